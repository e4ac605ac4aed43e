//! The verbs endpoint's batches in flight: posted as chains of work requests, completed by
//! polling each queue pair's completion queue, taken back by ticket.
//!
//! **Invariant.** A batch is cut into runs, one per consecutive stretch of verbs for one server
//! (one queue pair). A run is posted as one chain with only its last work request signaled, and
//! its completion — that request's — says the whole run executed (an RC queue pair completes in
//! order). A batch's runs go out one after the other, each once the one before it completed; a
//! run is never posted while an earlier batch still has a run not yet posted on the same queue
//! pair, so batches posted to one memory node execute in the order they were posted. A run's
//! staging bytes stay reserved until its completion was polled, and none is reused once the
//! endpoint broke (its requests may still be in flight): so the NIC never writes into staging
//! bytes another run uses.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use sideway::ibverbs::queue_pair::{
    PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};

use super::{COMPLETION_TIMEOUT, Link, STAGING_BYTES, VerbsEndpoint};
use crate::{Completion, PostedBatch, Stats, Ticket, TransportError, Verb};

/// Completions taken from a completion queue per poll.
const POLL_BATCH: usize = 16;

/// One run of a batch: its verbs, its link, and where it stands.
#[derive(Debug)]
struct Run {
    link: usize,
    verbs: Range<usize>,
    state: RunState,
}

#[derive(Debug)]
enum RunState {
    Waiting,
    /// Posted: each verb's staging offset, the id of its last (signalled) work request — ids
    /// count up from 1 per link, wrapping — and when it times out.
    Posted {
        offsets: Vec<usize>,
        last_wr: u64,
        deadline: Instant,
    },
    Done,
}

/// One posted batch.
#[derive(Debug)]
pub(super) struct Flight {
    id: u64,
    batch: PostedBatch,
    runs: Vec<Run>,
    outcome: Option<Result<(), TransportError>>,
    abandoned: bool,
}

/// The endpoint's batches in flight, oldest first.
#[derive(Debug, Default)]
pub(super) struct Flights {
    queue: VecDeque<Flight>,
    next_id: u64,
}

impl Flights {
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

impl VerbsEndpoint {
    /// [`crate::Endpoint::post`]: validated, copied, cut into runs; posted as far as the queue
    /// pairs allow now.
    pub(super) fn post_batch(&mut self, verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
        if let Some(stopped) = &mut self.broken {
            return Err(stopped.later(self.links.iter_mut().map(|link| {
                let node = link.regions.first().map_or(0, |r| r.id);
                (node, &mut link.notice)
            })));
        }
        crate::validate_batch(verbs)?;
        for verb in verbs {
            crate::validate_verb(verb, &self.nodes)?;
        }
        if verbs.is_empty() {
            return Ok(Ticket::ready(Completion::new(
                PostedBatch::default(),
                Ok(()),
            )));
        }
        let mut runs = Vec::new();
        let mut start = 0;
        while start < verbs.len() {
            let node = verbs[start].addr().node();
            let link = self
                .links
                .iter()
                .position(|l| l.serves(node))
                .ok_or(TransportError::UnknownNode(node))?;
            let mut end = start + 1;
            while end < verbs.len() && self.links[link].serves(verbs[end].addr().node()) {
                end += 1;
            }
            runs.push(Run {
                link,
                verbs: start..end,
                state: RunState::Waiting,
            });
            start = end;
        }
        let id = self.flights.next_id;
        self.flights.next_id += 1;
        self.flights.queue.push_back(Flight {
            id,
            batch: PostedBatch::copy_of(verbs),
            runs,
            outcome: None,
            abandoned: false,
        });
        self.progress();
        Ok(Ticket::pending(id))
    }

    /// Moves every batch along, then takes `id`'s completion if it has one.
    pub(super) fn take_completion(&mut self, id: u64) -> Option<Completion> {
        self.progress();
        let at = self
            .flights
            .queue
            .iter()
            .position(|f| f.id == id && f.outcome.is_some())?;
        let flight = self.flights.queue.remove(at)?;
        let outcome = flight.outcome?;
        Some(Completion::new(flight.batch, outcome))
    }

    /// Marks `id` abandoned: dropped once it has an outcome.
    pub(super) fn abandon_batch(&mut self, id: u64) {
        if let Some(flight) = self.flights.queue.iter_mut().find(|f| f.id == id) {
            flight.abandoned = true;
        }
        self.progress();
    }

    /// Polls the completion queues of links with runs out, then posts the runs that may go.
    fn progress(&mut self) {
        if self.broken.is_none() {
            self.poll_links();
        }
        if self.broken.is_none() {
            self.post_waiting();
        }
        if let Some(stopped) = &self.broken {
            // Nothing more completes: every batch without an outcome fails, executed or not.
            for flight in &mut self.flights.queue {
                if flight.outcome.is_none() {
                    flight.outcome = Some(Err(stopped.in_flight()));
                }
            }
        }
        self.flights
            .queue
            .retain(|f| !(f.abandoned && f.outcome.is_some()));
    }

    fn poll_links(&mut self) {
        for link in 0..self.links.len() {
            if self.links[link].runs_out == 0 {
                continue;
            }
            // Every completion the queue holds, POLL_BATCH at a time, before any deadline is
            // judged: a run whose completion is queued is not late, however long since the
            // last poll.
            loop {
                let mut seen: Vec<(u64, u32, u32)> = Vec::with_capacity(POLL_BATCH);
                if let Ok(mut poller) = self.links[link].cq.start_poll() {
                    while seen.len() < POLL_BATCH {
                        let Some(wc) = poller.next() else {
                            break;
                        };
                        seen.push((wc.wr_id(), wc.status(), wc.vendor_err()));
                    }
                }
                let more = seen.len() == POLL_BATCH;
                for (wr_id, status, vendor_err) in seen {
                    if status != 0 {
                        self.failed(link, wr_id, status, vendor_err);
                        return;
                    }
                    if let Err(why) = self.completed(link, wr_id) {
                        self.break_on(why);
                        return;
                    }
                }
                if !more {
                    break;
                }
            }
            let now = Instant::now();
            let late = self.flights.queue.iter().flat_map(|f| &f.runs).find(|r| {
                r.link == link
                    && matches!(&r.state, RunState::Posted { deadline, .. } if *deadline <= now)
            });
            if let Some(Run {
                state: RunState::Posted { last_wr, .. },
                ..
            }) = late
            {
                let why = format!(
                    "no completion for work request {} within {} s",
                    last_wr,
                    COMPLETION_TIMEOUT.as_secs()
                );
                self.break_on(why);
                return;
            }
        }
    }

    /// The endpoint breaks, a link having failed for reason `why`: nothing is posted any more,
    /// every batch without an outcome fails with the error returned (`Broken`), and later calls
    /// with `Broken` until a link's memory node says it fenced the connection, and with `Fenced`
    /// from then on ([`crate::fence_notice`]; a server serves one memory node, the one `Fenced`
    /// names).
    fn break_on(&mut self, why: String) -> TransportError {
        let stopped = crate::fence_notice::Stopped::new(why);
        let error = stopped.in_flight();
        self.broken = Some(stopped);
        error
    }

    /// Takes the failed completion of work request `wr_id` on `link`, which breaks the endpoint:
    /// the verbs of its run before it executed (a queue pair executes a run in order), so their
    /// results (READs, atomics' `old`) are copied out and delivered with the batch's failure.
    fn failed(&mut self, link: usize, wr_id: u64, status: u32, vendor_err: u32) {
        let error = self.break_on(crate::work_completion::failure(wr_id, status, vendor_err));
        let found = self.flights.queue.iter_mut().find_map(|flight| {
            flight
                .runs
                .iter()
                .enumerate()
                .find_map(|(at, r)| match &r.state {
                    RunState::Posted { last_wr, .. } if r.link == link => {
                        crate::work_completion::position_in_run(*last_wr, r.verbs.len(), wr_id)
                            .map(|done| (at, done))
                    }
                    _ => None,
                })
                .map(|(at, done)| (flight, at, done))
        });
        if let Some((flight, at, done)) = found {
            let run = &mut flight.runs[at];
            if let RunState::Posted { offsets, .. } =
                std::mem::replace(&mut run.state, RunState::Done)
            {
                let executed = run.verbs.start..run.verbs.start + done;
                copy_results(
                    &mut flight.batch,
                    executed,
                    &offsets,
                    &self.links[link].staging,
                    &mut self.stats,
                );
            }
            flight.outcome = Some(Err(error));
        }
    }

    /// Takes the completion of work request `wr_id` on `link`: the end of the run it signals,
    /// whose results are copied out of the staging buffer. A request no posted run ends with is
    /// why the endpoint breaks.
    fn completed(&mut self, link: usize, wr_id: u64) -> Result<(), String> {
        let found = self.flights.queue.iter_mut().find_map(|flight| {
            let at = flight.runs.iter().position(|r| {
                r.link == link
                    && matches!(&r.state, RunState::Posted { last_wr, .. } if *last_wr == wr_id)
            })?;
            Some((flight, at))
        });
        let Some((flight, at)) = found else {
            return Err(format!(
                "a completion for work request {wr_id}, which ends no batch in flight"
            ));
        };
        let run = &mut flight.runs[at];
        let RunState::Posted { offsets, .. } = std::mem::replace(&mut run.state, RunState::Done)
        else {
            return Err("a run completed twice".into());
        };
        let range = run.verbs.clone();
        let last = at + 1 == flight.runs.len();
        copy_results(
            &mut flight.batch,
            range.clone(),
            &offsets,
            &self.links[link].staging,
            &mut self.stats,
        );
        if last {
            flight.outcome = Some(Ok(()));
        }
        let link = &mut self.links[link];
        link.runs_out -= 1;
        link.wrs_out -= range.len();
        if link.runs_out == 0 {
            link.staged = 0;
        }
        Ok(())
    }

    /// Posts, oldest batch first, each batch's next run if its queue pair has room and no
    /// earlier batch still waits to post on that queue pair.
    fn post_waiting(&mut self) {
        let mut blocked: Vec<usize> = Vec::new();
        for flight in &mut self.flights.queue {
            if flight.outcome.is_some() {
                continue;
            }
            let Some(next) = flight
                .runs
                .iter()
                .position(|r| !matches!(r.state, RunState::Done))
            else {
                flight.outcome = Some(Ok(()));
                continue;
            };
            let link = flight.runs[next].link;
            if matches!(flight.runs[next].state, RunState::Waiting) && !blocked.contains(&link) {
                let range = flight.runs[next].verbs.clone();
                let links = &mut self.links;
                let stats = &mut self.stats;
                let started = flight
                    .batch
                    .execute(|verbs| links[link].start(&verbs[range], stats));
                match started {
                    Ok(Some(state)) => flight.runs[next].state = state,
                    Ok(None) => {}
                    Err(why) => {
                        self.break_on(why);
                        return;
                    }
                }
            }
            // Later batches wait behind this one's runs not posted yet, on their queue pairs.
            for run in &flight.runs[next..] {
                if matches!(run.state, RunState::Waiting) && !blocked.contains(&run.link) {
                    blocked.push(run.link);
                }
            }
        }
    }
}

impl Link {
    /// Posts `verbs` (validated, all for this server) as one chain whose last request is
    /// signaled, if the queue pair and the staging buffer have room for them now (else `None`).
    fn start(&mut self, verbs: &[Verb<'_>], stats: &mut Stats) -> Result<Option<RunState>, String> {
        let bytes: usize = verbs.iter().map(|v| v.len().next_multiple_of(8)).sum();
        if self.wrs_out + verbs.len() > crate::MAX_BATCH_VERBS
            || self.staged + bytes > STAGING_BYTES
        {
            return Ok(None);
        }
        let mut offsets = Vec::with_capacity(verbs.len());
        let mut used = self.staged;
        for verb in verbs {
            offsets.push(used);
            used += verb.len().next_multiple_of(8);
        }
        for (verb, &at) in verbs.iter().zip(&offsets) {
            if let Verb::Write { data, .. } = verb {
                self.staging[at..at + data.len()].copy_from_slice(data);
            }
        }
        let base = self.staging.as_ptr() as u64;
        let (lkey, last) = (self.staging_mr.lkey(), verbs.len() - 1);
        let mut guard = self.qp.start_post_send();
        for (i, (verb, &at)) in verbs.iter().zip(&offsets).enumerate() {
            let mut flags = if i == last {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            if verb.is_fenced() {
                flags |= WorkRequestFlags::Fence;
            }
            let Some(region) = self.regions.iter().find(|r| r.id == verb.addr().node()) else {
                return Err(format!(
                    "memory node {} is not served by this queue pair",
                    verb.addr().node()
                ));
            };
            let (rkey, remote) = (region.rkey, region.addr + verb.addr().offset());
            self.next_wr = self.next_wr.wrapping_add(1);
            let wr = guard.construct_wr(self.next_wr, flags);
            let handle = match verb {
                Verb::Read { .. } => wr.setup_read(rkey, remote),
                Verb::Write { .. } => wr.setup_write(rkey, remote),
                Verb::Cas {
                    expected, desired, ..
                } => wr.setup_atomic_compare_swap(rkey, remote, *expected, *desired),
                Verb::Faa { add, .. } => wr.setup_atomic_fetch_add(rkey, remote, *add),
            };
            // SAFETY: the scatter-gather entry lies inside the registered staging buffer
            // (`at + len ≤ used ≤ STAGING_BYTES`), which the link owns for as long as its
            // registration lives; these bytes are reserved for this run (`staged`) until its
            // completion has been polled, and never reused once the endpoint broke.
            unsafe { handle.setup_sge(lkey, base + at as u64, verb.len() as u32) };
        }
        // A post that fails may have handed some requests to the NIC: the endpoint breaks, and
        // nothing reuses the staging buffer.
        guard.post().map_err(|e| format!("posting a batch: {e}"))?;
        stats.batches += 1;
        self.staged = used;
        self.wrs_out += verbs.len();
        self.runs_out += 1;
        Ok(Some(RunState::Posted {
            offsets,
            last_wr: self.next_wr,
            deadline: Instant::now() + COMPLETION_TIMEOUT,
        }))
    }
}

/// Copies the results of `batch`'s verbs `range` (READ buffers, atomics' `old`) out of `staging`,
/// where each was placed at its offset of `offsets` (offsets of the range's run, from its first
/// verb), and counts the verbs.
fn copy_results(
    batch: &mut PostedBatch,
    range: Range<usize>,
    offsets: &[usize],
    staging: &[u8],
    stats: &mut Stats,
) {
    batch.execute(|verbs| {
        for (verb, &off) in verbs[range].iter_mut().zip(offsets) {
            match verb {
                Verb::Read { buf, .. } => buf.copy_from_slice(&staging[off..off + buf.len()]),
                Verb::Cas { old, .. } | Verb::Faa { old, .. } => {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(&staging[off..off + 8]);
                    *old = u64::from_le_bytes(word);
                }
                Verb::Write { .. } => {}
            }
            stats.record_verb(verb);
        }
    });
}
