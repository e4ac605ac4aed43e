//! Batches posted and not yet taken back: when each lands on the memory nodes and when its
//! completion can be polled (docs/ARCHITECTURE.md §2, "Posting and polling").
//!
//! **Invariant.** A posted batch executes later than it was posted — at a poll of its endpoint
//! (or a synchronous batch, which first lands every batch posted before it) — and never before
//! a batch posted earlier by the same endpoint that touches one of its memory nodes (one RC
//! queue pair per memory node). Batches on disjoint memory nodes land in either order. A batch
//! executes through the same path as a synchronous one ([`SimEndpoint::run_batch`]), so every
//! fault the simulator injects (torn and reordered verbs, packet tearing, failures, lost
//! completions, crashes, fences, pauses) applies to it as it lands.
//!
//! **Timing.** Without a latency ([`crate::SimConfig::latency`]) a batch lands at the second
//! poll of its ticket or of a ticket posted after it (the first finds it in flight, so what
//! else its poster has in flight runs before it lands), or at a synchronous batch of its
//! endpoint, and completes as it lands. With a round trip `rtt`, its verbs land no
//! earlier than `rtt / 2` plus its bytes at 100 Gb/s plus a seeded jitter of up to `rtt / 8`
//! after its post, and its completion is polled no earlier than `rtt / 2` after that landing
//! time (or at once, if the poll that landed it came later): so a batch completes no earlier
//! than `rtt` after its post, in wall-clock time outside a seeded run (where time is virtual).

use std::collections::VecDeque;

use rdma_transport::{Completion, PostedBatch, Ticket, TransportError, Verb};

use super::SimEndpoint;
use crate::sync::time::{Duration, Instant};

/// One posted batch.
#[derive(Debug)]
pub(super) struct InFlight {
    id: u64,
    batch: PostedBatch,
    /// The memory nodes its verbs touch.
    nodes: Vec<u16>,
    /// When its verbs may land.
    lands_at: Instant,
    /// Set once it landed: its outcome, and when its completion may be polled.
    landed: Option<(Result<(), TransportError>, Instant)>,
    /// Its poster gave up on it: dropped once it landed.
    abandoned: bool,
    /// Whether a poll found it not landed yet: without a latency, it lands at the poll after
    /// the first (so a batch polled at once after its post is still in flight then, and the
    /// poster's other operations run before it lands).
    polled: bool,
}

/// An endpoint's posted batches, oldest first.
#[derive(Debug, Default)]
pub(super) struct Posted {
    queue: VecDeque<InFlight>,
    next_id: u64,
}

impl Posted {
    /// Batches posted and not yet taken back or dropped.
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// Link speed the latency mode charges bytes at (the cost model's reference, 100 Gb/s).
const LINK_BYTES_PER_US: u64 = 12_500;

impl SimEndpoint {
    /// [`rdma_transport::Endpoint::post`]: validated and copied now, landed by a later poll.
    pub(super) fn post_batch(&mut self, verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
        if self.broken {
            return Err(TransportError::Broken("a completion was lost".into()));
        }
        if self.crashed {
            return Err(TransportError::Crashed);
        }
        rdma_transport::validate_batch(verbs)?;
        for verb in verbs {
            rdma_transport::validate_verb(verb, &self.shared.nodes)?;
        }
        if verbs.is_empty() {
            return Ok(Ticket::ready(Completion::new(
                PostedBatch::default(),
                Ok(()),
            )));
        }
        let mut nodes: Vec<u16> = verbs.iter().map(|v| v.addr().node()).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let now = Instant::now();
        let lands_at = match self.shared.config.latency {
            None => now,
            Some(rtt) => {
                let bytes: usize = verbs.iter().map(Verb::len).sum();
                let wire = Duration::from_nanos(bytes as u64 * 1_000 / LINK_BYTES_PER_US);
                let eighth = (rtt / 8).as_nanos() as u64;
                let jitter = match eighth {
                    0 => 0,
                    n => super::xorshift(&mut self.rng) % n,
                };
                now + rtt / 2 + wire + Duration::from_nanos(jitter)
            }
        };
        let id = self.posted.next_id;
        self.posted.next_id += 1;
        self.posted.queue.push_back(InFlight {
            id,
            batch: PostedBatch::copy_of(verbs),
            nodes,
            lands_at,
            landed: None,
            abandoned: false,
            polled: false,
        });
        Ok(Ticket::pending(id))
    }

    /// Lands what may land now, then takes `id`'s completion if it can be polled.
    pub(super) fn take_completion(&mut self, id: u64) -> Option<Completion> {
        let now = Instant::now();
        let nothing_due = self.shared.config.latency.is_some()
            && self
                .posted
                .queue
                .iter()
                .all(|f| f.landed.is_some() || f.lands_at > now);
        if !nothing_due {
            self.land_due(false, now);
        }
        if let Some(flight) = self.posted.queue.iter_mut().find(|f| f.id == id) {
            flight.polled = true;
        }
        let now = if nothing_due { now } else { Instant::now() };
        let at = self.posted.queue.iter().position(|f| f.id == id)?;
        match &self.posted.queue[at].landed {
            Some((_, done_at)) if *done_at <= now => {}
            _ => return None,
        }
        let flight = self.posted.queue.remove(at)?;
        let (outcome, _) = flight.landed?;
        Some(Completion::new(flight.batch, outcome))
    }

    /// Marks `id` abandoned (dropped once it landed).
    pub(super) fn abandon_batch(&mut self, id: u64) {
        if let Some(flight) = self.posted.queue.iter_mut().find(|f| f.id == id) {
            flight.abandoned = true;
        }
        self.drop_abandoned();
    }

    /// Lands every posted batch now (a synchronous batch comes after them), waiting out their
    /// landing times.
    pub(super) fn land_all(&mut self) {
        while self.posted.queue.iter().any(|f| f.landed.is_none()) {
            self.land_due(true, Instant::now());
        }
    }

    /// Lands the batches whose time has come (or, with `all`, the oldest not landed yet, its
    /// time waited out), each only after every earlier batch sharing a memory node with it;
    /// batches on disjoint memory nodes in a seeded order.
    fn land_due(&mut self, all: bool, mut now: Instant) {
        let mut first_round = true;
        loop {
            if !std::mem::take(&mut first_round) {
                now = Instant::now();
            }
            // The batches that may land now: due, and no earlier unlanded batch shares a node.
            let mut ready: smallvec::SmallVec<[usize; 8]> = smallvec::SmallVec::new();
            for (i, flight) in self.posted.queue.iter().enumerate() {
                if flight.landed.is_some() {
                    continue;
                }
                let blocked = self.posted.queue.iter().take(i).any(|earlier| {
                    earlier.landed.is_none()
                        && earlier.nodes.iter().any(|n| flight.nodes.contains(n))
                });
                let due = match self.shared.config.latency {
                    // It, or a batch posted after it, was found in flight before.
                    None => self.posted.queue.iter().skip(i).any(|f| f.polled),
                    Some(_) => flight.lands_at <= now,
                };
                if !blocked && (due || all) {
                    ready.push(i);
                }
            }
            let Some(&first) = ready.first() else {
                break;
            };
            let pick = if ready.len() > 1 && self.coin() {
                ready[1 + (super::xorshift(&mut self.rng) as usize % (ready.len() - 1))]
            } else {
                first
            };
            let lands_at = self.posted.queue[pick].lands_at;
            while Instant::now() < lands_at {
                wait_a_little();
            }
            let mut batch = std::mem::take(&mut self.posted.queue[pick].batch);
            let outcome = batch.execute(|verbs| self.run_batch(verbs));
            // Timed from when the verbs were due to land, as a NIC executes them whether or not
            // its host polls (a poll that came late lands them late, and completes them at once
            // if their round trip is over).
            let done_at = match self.shared.config.latency {
                None => Instant::now(),
                Some(rtt) => (lands_at + rtt / 2).max(Instant::now()),
            };
            let flight = &mut self.posted.queue[pick];
            flight.batch = batch;
            flight.landed = Some((outcome, done_at));
            if all {
                break;
            }
        }
        self.drop_abandoned();
    }

    fn drop_abandoned(&mut self) {
        self.posted
            .queue
            .retain(|f| !(f.abandoned && f.landed.is_some()));
    }
}

/// A pause while a batch is not due yet: a spin outside a seeded run (latencies are
/// microseconds), a sleep inside one (virtual time moves only when threads wait).
fn wait_a_little() {
    if crate::sync::is_simulated() {
        crate::sync::thread::sleep(Duration::from_micros(1));
    } else {
        std::hint::spin_loop();
    }
}
