//! The simulator's `Endpoint`.

mod in_flight;

use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::{Duration, Instant};

use rdma_transport::{
    Completion, Endpoint, RemoteAddr, Stats, Ticket, TransportError, Verb, validate_batch,
    validate_verb,
};

use crate::Reordering;
use crate::nic::{self, Connection};
use crate::transport::{Life, Shared};

/// One thread's endpoint on a [`crate::SimTransport`]. Executes verbs directly on the pools'
/// atomic words, in order, and counts them like a NIC would.
#[derive(Debug)]
pub struct SimEndpoint {
    shared: Arc<Shared>,
    /// The life of the simulated process the endpoint belongs to.
    life: Arc<Life>,
    stats: Stats,
    /// Verbs still to fail with `InjectedFault`.
    fail_next: u64,
    /// Verbs still allowed before the endpoint crashes; `None` = no crash planned.
    crash_after: Option<u64>,
    /// Verbs still allowed before one verb fails transiently; `None` = none planned.
    fail_after: Option<u64>,
    /// Verbs still allowed before the batch in flight loses its completion; `None` = none planned.
    break_after: Option<u64>,
    /// Set once a completion was lost: every later call fails with `Broken`.
    broken: bool,
    crashed: bool,
    /// xorshift state for torn-mode yields.
    rng: u64,
    /// This endpoint's connection on each pool (index as in `shared.pools`), for fencing.
    connections: Vec<Option<Connection>>,
    /// Batches still allowed before the endpoint waits at `gate`.
    pause: Option<(u64, Gate)>,
    /// Batches still allowed before the endpoint waits at `gate` inside its next batch.
    pause_inside: Option<(u64, Gate)>,
    /// Batches still allowed before the next one loses its completion and lands when `gate`
    /// opens.
    land_late: Option<(u64, Gate)>,
    /// In the batch running now: verbs still to execute before the batch stalls at `gate`.
    stall: Option<(u64, Gate)>,
    /// Verbs still allowed before the endpoint crashes inside the next one, and how many packets
    /// of it (a WRITE) land.
    tear: Option<(u64, usize)>,
    /// Whether a planned tear cut a WRITE short.
    tore: bool,
    /// Batches posted and not yet taken back.
    posted: in_flight::Posted,
}

/// A gate a paused endpoint waits at (see [`SimEndpoint::pause_after`]): a thread descheduled
/// between two batches, as long as a test wants.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    state: Arc<(crate::sync::Mutex<GateState>, crate::sync::Condvar)>,
}

/// What a [`Gate`] knows.
#[derive(Debug, Default)]
struct GateState {
    open: bool,
    /// An endpoint waits at it.
    waiting: bool,
    /// When an endpoint last arrived.
    arrived: Option<Instant>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the gate: the endpoint waiting at it goes on.
    pub fn open(&self) {
        let (lock, wake) = &*self.state;
        lock.lock().unwrap_or_else(|e| e.into_inner()).open = true;
        wake.notify_all();
    }

    /// Whether an endpoint is waiting at the gate.
    pub fn is_waiting(&self) -> bool {
        self.state
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
    }

    /// Waits until an endpoint waits at the gate, at most `limit`; whether one does.
    pub fn wait_for_arrival(&self, limit: Duration) -> bool {
        self.wait_for_arrival_since(limit).is_some()
    }

    /// [`Self::wait_for_arrival`], returning how long ago the endpoint arrived (this poller
    /// sees it up to a millisecond later). The same sync points as [`Self::wait_for_arrival`].
    pub fn wait_for_arrival_since(&self, limit: Duration) -> Option<Duration> {
        let until = Instant::now() + limit;
        loop {
            let arrived = {
                let state = self.state.0.lock().unwrap_or_else(|e| e.into_inner());
                state.waiting.then_some(state.arrived).flatten()
            };
            if let Some(at) = arrived {
                return Some(Instant::now().saturating_duration_since(at));
            }
            if Instant::now() >= until {
                return None;
            }
            crate::sync::thread::sleep(Duration::from_millis(1));
        }
    }

    fn pass(&self) {
        let (lock, wake) = &*self.state;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.waiting = true;
        state.arrived = Some(Instant::now());
        while !state.open {
            state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.waiting = false;
    }
}

/// Takes a fault planned for the whole process (see [`crate::SimTransport::process`]): the
/// first endpoint to see `planned` set clears it and takes the plan. The flag is read on every
/// batch without taking the lock.
fn take_planned<T>(planned: &AtomicU64, plan: &crate::sync::Mutex<Option<T>>) -> Option<T> {
    if planned.load(Ordering::Relaxed) != 0 && planned.swap(0, Ordering::SeqCst) != 0 {
        plan.lock().unwrap_or_else(|e| e.into_inner()).take()
    } else {
        None
    }
}

/// Counts one batch against a fault planned after a number of batches: its gate once it is due
/// (the plan then ends), else `None`.
fn due(plan: &mut Option<(u64, Gate)>) -> Option<Gate> {
    match plan {
        Some((0, _)) => plan.take().map(|(_, gate)| gate),
        Some((left, _)) => {
            *left -= 1;
            None
        }
        None => None,
    }
}

/// A verb of a batch that lands late (see [`SimEndpoint::land_late`]).
enum LateVerb {
    Read,
    Write(Vec<u8>),
    Cas(u64, u64),
    Faa(u64),
}

impl SimEndpoint {
    /// A new endpoint with a connection on every pool; fails if a pool's connection table is full.
    pub(crate) fn new(shared: Arc<Shared>, life: Arc<Life>) -> Result<Self, TransportError> {
        let rng = crate::sync::endpoint_seed() | 1;
        let mut connections = Vec::with_capacity(shared.pools.len());
        if nic::enabled() {
            let me = nic::this_process();
            for (pool, info) in shared.pools.iter().zip(&shared.nodes) {
                match nic::open(pool.nic(), me) {
                    Some(conn) => connections.push(Some(conn)),
                    None => {
                        for (pool, conn) in shared.pools.iter().zip(&connections) {
                            if let Some(conn) = conn {
                                nic::close(pool.nic(), *conn);
                            }
                        }
                        return Err(TransportError::Connection(format!(
                            "memory node {}: all {} simulated connections are open",
                            info.id,
                            nic::CONNECTIONS
                        )));
                    }
                }
            }
        }
        Ok(Self {
            shared,
            life,
            stats: Stats::default(),
            fail_next: 0,
            crash_after: None,
            fail_after: None,
            break_after: None,
            broken: false,
            crashed: false,
            rng,
            connections,
            pause: None,
            pause_inside: None,
            land_late: None,
            posted: in_flight::Posted::default(),
            stall: None,
            tear: None,
            tore: false,
        })
    }

    /// Fault injection: after `n` more batches, the endpoint stops before its next batch until
    /// `gate` opens — a compute-node thread paused (descheduled, stopped) between two verbs of a
    /// protocol for as long as the test wants.
    pub fn pause_after(&mut self, n: u64, gate: Gate) {
        self.pause = Some((n, gate));
    }

    /// Fault injection: after `n` more batches, the endpoint stops *inside* its next batch —
    /// entered on its connections, before its first verb — until `gate` opens: a process stopped
    /// (SIGSTOP, a long page fault, a descheduled thread) with a batch in flight, which a fence
    /// cannot complete until it resumes.
    pub fn pause_inside(&mut self, n: u64, gate: Gate) {
        self.pause_inside = Some((n, gate));
    }

    /// Fault injection: the next batch executes its first `verbs` verbs (in the order the
    /// reordering mode gives them) and then waits, entered on its connections, until `gate`
    /// opens: a NIC partway through a batch. A batch with fewer verbs is not stalled.
    pub fn stall_inside(&mut self, verbs: u64, gate: Gate) {
        self.stall = Some((verbs, gate));
    }

    /// Fault injection: after `n` more batches, the next one loses its completion at once — the
    /// caller gets [`TransportError::Broken`], as on every later call — while its verbs are still
    /// executing: they take effect (in order, on a thread of their own, inside the batch's
    /// connections, so a fence finds them in flight) only when `gate` opens. A NIC still working
    /// through a queue pair whose completion timed out; what a compute node must not assume
    /// finished when its call returned.
    pub fn land_late(&mut self, n: u64, gate: Gate) {
        self.land_late = Some((n, gate));
    }

    /// Starts `verbs` on a thread of their own that runs them once `gate` opens (see
    /// [`Self::land_late`]); their results are lost.
    fn start_late(&mut self, verbs: &[Verb<'_>], gate: Gate) -> Result<(), TransportError> {
        validate_batch(verbs)?;
        for verb in verbs {
            validate_verb(verb, &self.shared.nodes)?;
        }
        let entered = self.enter(verbs)?;
        self.stats.batches += 1;
        // What each verb does, owned (READ results and atomics' old values are lost anyway).
        let owned: Vec<(RemoteAddr, LateVerb)> = verbs
            .iter()
            .map(|verb| {
                let late = match verb {
                    Verb::Read { .. } => LateVerb::Read,
                    Verb::Write { data, .. } => LateVerb::Write(data.to_vec()),
                    Verb::Cas {
                        expected, desired, ..
                    } => LateVerb::Cas(*expected, *desired),
                    Verb::Faa { add, .. } => LateVerb::Faa(*add),
                };
                (verb.addr(), late)
            })
            .collect();
        let shared = Arc::clone(&self.shared);
        let nic_atomics = shared.config.nic_atomics && !cfg!(loom);
        let yield_now = crate::sync::thread::yield_now;
        crate::sync::thread::spawn(move || {
            gate.pass();
            for (addr, verb) in owned {
                let Some(pool) = shared.pool(addr.node()) else {
                    continue;
                };
                match verb {
                    LateVerb::Read => {}
                    LateVerb::Write(data) => {
                        pool.write_bytes(addr.offset(), &data, || {});
                        shared.landed(addr, &data);
                    }
                    LateVerb::Cas(expected, desired) if nic_atomics => {
                        pool.nic_atomic(addr.offset(), Some(expected), desired, yield_now);
                    }
                    LateVerb::Faa(add) if nic_atomics => {
                        pool.nic_atomic(addr.offset(), None, add, yield_now);
                    }
                    LateVerb::Cas(expected, desired) => {
                        pool.cas(addr.offset(), expected, desired);
                    }
                    LateVerb::Faa(add) => {
                        pool.faa(addr.offset(), add);
                    }
                }
                crate::sync::fence_seq_cst();
            }
            for &(at, conn) in &entered {
                nic::leave(shared.pools[at].nic(), conn);
            }
        });
        Ok(())
    }

    /// The connection on the pool of memory node `node`, with that pool's index.
    fn connection(&self, node: u16) -> Option<(usize, Connection)> {
        let at = *self.shared.index_of.get(usize::from(node))?;
        Some((at, (*self.connections.get(at)?)?))
    }

    /// Enters a batch on the connection of every node it touches; `Err(Fenced)` (nothing held)
    /// if one was fenced.
    fn enter(
        &self,
        verbs: &[Verb<'_>],
    ) -> Result<smallvec::SmallVec<[(usize, Connection); 2]>, TransportError> {
        let mut entered: smallvec::SmallVec<[(usize, Connection); 2]> = smallvec::SmallVec::new();
        for verb in verbs {
            let node = verb.addr().node();
            let Some((at, conn)) = self.connection(node) else {
                continue;
            };
            if entered.iter().any(|&(a, _)| a == at) {
                continue;
            }
            if !nic::enter(self.shared.pools[at].nic(), conn) {
                self.leave(&entered);
                return Err(TransportError::Fenced(node));
            }
            entered.push((at, conn));
        }
        Ok(entered)
    }

    fn leave(&self, entered: &[(usize, Connection)]) {
        for &(at, conn) in entered {
            nic::leave(self.shared.pools[at].nic(), conn);
        }
    }

    /// Fault injection: the next `n` verbs of this endpoint fail with
    /// [`TransportError::InjectedFault`]; each failure ends its batch (earlier verbs of the batch
    /// have executed).
    pub fn fail_next(&mut self, n: u64) {
        self.fail_next = n;
    }

    /// Fault injection: execute `n` more verbs, then crash — every later verb, including the rest
    /// of the batch in flight, fails with [`TransportError::Crashed`]. Models a compute node dying
    /// in the middle of a protocol.
    pub fn crash_after(&mut self, n: u64) {
        self.crash_after = Some(n);
    }

    /// Fault injection: execute `n` more verbs, then fail the next one with
    /// [`TransportError::InjectedFault`] (its batch ends there: earlier verbs of the batch have
    /// executed, later ones have not), then work normally — a transient failure at an exact
    /// point of a protocol.
    pub fn fail_after(&mut self, n: u64) {
        self.fail_after = Some(n);
    }

    /// Fault injection: the batch in flight once `n` more verbs have executed loses its
    /// completion, as a real queue pair's can — its remaining verbs still execute, but the caller
    /// learns nothing of them (atomics keep the `old` they were built with) and gets
    /// [`TransportError::Broken`], as on every later call.
    pub fn break_after(&mut self, n: u64) {
        self.break_after = Some(n);
    }

    /// Whether the endpoint has crashed.
    pub fn is_crashed(&self) -> bool {
        self.crashed
    }

    /// Fault injection: execute `n` more verbs, then crash *inside* the next one, as a process
    /// killed in the middle of a WRITE leaves it: of a WRITE longer than `packets` packets
    /// ([`crate::SimConfig::packet_bytes`]) the first `packets` land and the rest never does; any
    /// other verb does not execute. Every later verb fails with [`TransportError::Crashed`], as
    /// after [`Self::crash_after`]`(n)`. [`Self::tore`] says whether a WRITE was cut.
    pub fn tear_after(&mut self, n: u64, packets: usize) {
        self.tear = Some((n, packets));
    }

    /// Whether a [`Self::tear_after`] fault cut a WRITE short.
    pub fn tore(&self) -> bool {
        self.tore
    }

    /// The packets to land of the verb about to run, if a [`Self::tear_after`] is due now.
    fn tear_due(&mut self) -> Option<usize> {
        if self.crashed {
            return None;
        }
        let killed = self.life.killed.load(Ordering::SeqCst);
        if killed != 0 {
            // The process was killed: this verb is where the connection is cut.
            return Some(usize::try_from(killed - 1).unwrap_or(usize::MAX));
        }
        match self.tear.as_mut()? {
            (0, packets) => {
                let packets = *packets;
                self.tear = None;
                Some(packets)
            }
            (left, _) => {
                *left -= 1;
                None
            }
        }
    }

    fn injected_fault(&mut self) -> Option<TransportError> {
        if self.crashed {
            return Some(TransportError::Crashed);
        }
        if let Some(left) = self.crash_after.as_mut() {
            if *left == 0 {
                self.crashed = true;
                return Some(TransportError::Crashed);
            }
            *left -= 1;
        }
        if let Some(left) = self.fail_after.as_mut() {
            if *left == 0 {
                self.fail_after = None;
                return Some(TransportError::InjectedFault);
            }
            *left -= 1;
        }
        if self.fail_next > 0 {
            self.fail_next -= 1;
            return Some(TransportError::InjectedFault);
        }
        let shared = &self.shared.fail_verbs;
        if shared.load(Ordering::Relaxed) > 0
            && shared
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Some(TransportError::InjectedFault);
        }
        None
    }

    /// Executes `verb`; of a WRITE, only its first `packets` packets.
    fn execute(&mut self, verb: &mut Verb<'_>, packets: usize) {
        let torn = self.shared.config.torn && !cfg!(loom);
        let rng = &mut self.rng;
        // NIC atomicity: others go first between an atomic's read and its write, always in a
        // seeded run (a sync point) and at half of the atomics outside one.
        // (The stream is drawn from only then: other runs tear and reorder as they did.)
        let nic_atomics = self.shared.config.nic_atomics
            && !cfg!(loom)
            && matches!(verb, Verb::Cas { .. } | Verb::Faa { .. });
        let yield_in_atomic =
            nic_atomics && (crate::sync::is_simulated() || xorshift(rng).is_multiple_of(2));
        // Others go first at a quarter of the word boundaries of a verb up to 8 words long (a
        // leaf of the tiny layouts, a record's fixed part), and about twice in a longer one (a
        // slot table, a lease table): every verb can be torn anywhere, and long READs of tables
        // do not cost a thread switch every few words.
        let one_in = (verb.len() as u64 / 16).max(4);
        let mut between_words = || {
            if torn && xorshift(rng).is_multiple_of(one_in) {
                crate::sync::thread::yield_now();
            }
        };
        let between_atomic = || {
            if yield_in_atomic {
                crate::sync::thread::yield_now();
                // Outside a seeded run, hold the gap open a little (a NIC's read-modify-write
                // takes a PCIe round trip).
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
        };
        // Validation found the node, so its pool exists.
        let Some(pool) = self.shared.pool(verb.addr().node()) else {
            return;
        };
        match verb {
            Verb::Read { addr, buf, .. } => pool.read_bytes(addr.offset(), buf, &mut between_words),
            Verb::Write { addr, data, .. } => {
                let conn = self
                    .shared
                    .index_of
                    .get(usize::from(addr.node()))
                    .and_then(|&at| self.connections.get(at).copied().flatten());
                // Packet by packet, each logged first: a process killed inside the WRITE has the
                // packet it was placing replayed by the fence, whole, and no later one.
                let packet = self.shared.config.packet();
                let mut at = addr.offset();
                for piece in data.chunks(packet).take(packets) {
                    if let Some(conn) = conn {
                        nic::log_write(pool.nic(), conn, at, piece);
                    }
                    pool.write_bytes(at, piece, &mut between_words);
                    if let Some(conn) = conn {
                        nic::clear_log(pool.nic(), conn);
                    }
                    at += piece.len() as u64;
                }
                if at == addr.offset() + data.len() as u64 {
                    self.shared.landed(*addr, data);
                }
            }
            Verb::Cas {
                addr,
                expected,
                desired,
                old,
                ..
            } => {
                *old = if nic_atomics {
                    pool.nic_atomic(addr.offset(), Some(*expected), *desired, between_atomic)
                } else {
                    pool.cas(addr.offset(), *expected, *desired)
                }
            }
            Verb::Faa { addr, add, old, .. } => {
                *old = if nic_atomics {
                    pool.nic_atomic(addr.offset(), None, *add, between_atomic)
                } else {
                    pool.faa(addr.offset(), *add)
                }
            }
        }
        // A NIC executes a queue pair's requests in order, so a READ after a WRITE (or an atomic)
        // of the same batch observes memory after it — also with respect to what other queue
        // pairs do meanwhile. CPU atomics alone would let the READ pass the earlier store (store
        // buffering); the membership protocol's registration relies on it not doing so.
        if !matches!(verb, Verb::Read { .. }) {
            crate::sync::fence_seq_cst();
        }
    }
}

impl SimEndpoint {
    /// Executes one verb (or fails it, if a fault is due) and counts it.
    fn run(&mut self, verb: &mut Verb<'_>) -> Result<(), TransportError> {
        if let Some((left, _)) = &mut self.stall {
            if *left == 0 {
                if let Some((_, gate)) = self.stall.take() {
                    gate.pass();
                }
            } else {
                *left -= 1;
            }
        }
        crate::sync::verb_point();
        if let Some(packets) = self.tear_due() {
            // The connection is cut inside this verb: of a WRITE longer than `packets` packets,
            // that many land; nothing else of it, and nothing after it.
            if let Verb::Write { data, .. } = verb
                && data.len() > packets * self.shared.config.packet()
            {
                self.execute(verb, packets);
                self.tore = true;
            }
            self.crashed = true;
            return Err(TransportError::Crashed);
        }
        if let Some(fault) = self.injected_fault() {
            return Err(fault);
        }
        self.execute(verb, usize::MAX);
        self.stats.record_verb(verb);
        Ok(())
    }

    /// A batch under the permitted reorderings (see [`Reordering`]): READs and atomics — fenced
    /// ones too, once their fence is satisfied — may be held back; a held verb completes before
    /// the next fenced verb, before a later READ (READs observe memory in order), at a
    /// pseudo-random later point (random mode), or at the end. WRITEs are never held, so they stay
    /// in order with respect to each other.
    fn run_reordered(
        &mut self,
        verbs: &mut [Verb<'_>],
        mode: Reordering,
    ) -> Result<(), TransportError> {
        let mut held: Vec<usize> = Vec::new();
        for i in 0..verbs.len() {
            let (is_read, fenced) = (matches!(verbs[i], Verb::Read { .. }), verbs[i].is_fenced());
            if fenced {
                self.flush(verbs, &mut held, mode)?;
            } else if is_read {
                // READs observe memory in order: earlier held READs complete first.
                let mut rest = Vec::with_capacity(held.len());
                for j in std::mem::take(&mut held) {
                    if matches!(verbs[j], Verb::Read { .. }) {
                        self.run(&mut verbs[j])?;
                    } else {
                        rest.push(j);
                    }
                }
                held = rest;
            }
            if mode == Reordering::Random && !held.is_empty() && self.coin() {
                // Some held verbs complete now, in their order.
                let cut = held.len() / 2 + 1;
                for j in held.drain(..cut.min(held.len())) {
                    self.run(&mut verbs[j])?;
                }
            }
            // A fenced verb waits for the earlier ones (above), but once issued, a fenced READ or
            // atomic may itself be overtaken by later unfenced verbs.
            let holdable = is_read || verbs[i].is_atomic();
            if holdable && (mode == Reordering::Adversarial || self.coin()) {
                held.push(i);
            } else {
                self.run(&mut verbs[i])?;
            }
        }
        self.flush(verbs, &mut held, mode)
    }

    /// Completes every held verb. In adversarial mode the held READs go first, in order, and
    /// the held atomics after them, latest first — both permitted (a later verb may take effect
    /// before an earlier READ or atomic), and the order that most punishes a missing fence
    /// between atomics, or between an atomic and the READs after it. Otherwise in order.
    fn flush(
        &mut self,
        verbs: &mut [Verb<'_>],
        held: &mut Vec<usize>,
        mode: Reordering,
    ) -> Result<(), TransportError> {
        let held = std::mem::take(held);
        if mode == Reordering::Adversarial {
            let (reads, atomics): (Vec<usize>, Vec<usize>) = held
                .into_iter()
                .partition(|&j| matches!(verbs[j], Verb::Read { .. }));
            for j in reads.into_iter().chain(atomics.into_iter().rev()) {
                self.run(&mut verbs[j])?;
            }
        } else {
            for j in held {
                self.run(&mut verbs[j])?;
            }
        }
        Ok(())
    }

    /// A pseudo-random bit.
    fn coin(&mut self) -> bool {
        xorshift(&mut self.rng) & 1 == 1
    }
}

/// The endpoint's pseudo-random stream (xorshift64): advances `state` and returns it.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

impl Endpoint for SimEndpoint {
    fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        if self.shared.config.latency.is_some() && !verbs.is_empty() {
            // A post and a wait, paying the round trip like a posted batch.
            let ticket = self.post_batch(verbs)?;
            return self.wait(ticket).deliver(verbs);
        }
        if !self.posted.is_empty() {
            // Ordered after every batch posted before it.
            self.land_all();
        }
        self.run_batch(verbs)
    }

    fn post(&mut self, verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
        self.post_batch(verbs)
    }

    fn poll(&mut self, ticket: Ticket) -> Result<Completion, Ticket> {
        ticket.poll_with(|id| self.take_completion(id))
    }

    fn abandon(&mut self, ticket: Ticket) {
        ticket.abandon_with(|id| self.abandon_batch(id));
    }

    fn in_flight(&self) -> usize {
        self.posted.len()
    }

    fn stats(&self) -> Stats {
        self.stats
    }

    fn connection_id(&self, node: u16) -> Option<u64> {
        self.connection(node).map(|(_, conn)| conn.id())
    }

    fn packet_bytes(&self) -> usize {
        if nic::enabled() {
            self.shared.config.packet()
        } else {
            // No connection table, no fence: a WRITE is never cut.
            usize::MAX
        }
    }
}

impl SimEndpoint {
    /// One batch, now: every fault the endpoint has planned applies to it. What
    /// [`Endpoint::batch`] runs, and what a posted batch runs when it lands.
    fn run_batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        if self.pause.is_none() {
            self.pause = take_planned(&self.life.pause_planned, &self.life.pause);
        }
        if let Some(gate) = due(&mut self.pause) {
            gate.pass();
        }
        if self.broken {
            return Err(TransportError::Broken("a completion was lost".into()));
        }
        if self.life.break_next.load(Ordering::Relaxed) != 0
            && self.life.break_next.swap(0, Ordering::SeqCst) != 0
        {
            self.break_after = Some(0);
        }
        if self.land_late.is_none() {
            self.land_late =
                take_planned(&self.life.late_planned, &self.life.land_late).map(|gate| (0, gate));
        }
        if let Some(gate) = due(&mut self.land_late) {
            self.broken = true;
            self.start_late(verbs, gate)?;
            return Err(TransportError::Broken(
                "a completion was lost (its verbs still executing)".into(),
            ));
        }
        if let Some(left) = self.break_after
            && (left as usize) < verbs.len()
        {
            // The whole batch executes; its completion (and with it every result) is lost.
            self.break_after = None;
            let built: Vec<Option<u64>> = verbs.iter().map(Verb::old_value).collect();
            self.broken = true;
            let executed = self.batch_inner(verbs);
            for (verb, before) in verbs.iter_mut().zip(built) {
                if let (Verb::Cas { old, .. } | Verb::Faa { old, .. }, Some(value)) = (verb, before)
                {
                    *old = value;
                }
            }
            // A verb that failed inside it reported through the completion that was lost: the
            // caller learns nothing of it either, and an earlier atomic of the batch may have
            // executed although its `old` reads as built. (A crash or a fence is what the
            // process or connection is, not what a completion says, and stays as it is.)
            match executed {
                Err(e @ (TransportError::Crashed | TransportError::Fenced(_))) => return Err(e),
                _ => return Err(TransportError::Broken("a completion was lost".into())),
            }
        }
        if let Some(left) = self.break_after.as_mut() {
            *left -= verbs.len() as u64;
        }
        self.batch_inner(verbs)
    }
}

impl Drop for SimEndpoint {
    fn drop(&mut self) {
        for (pool, conn) in self.shared.pools.iter().zip(&self.connections) {
            if let Some(conn) = conn {
                nic::close(pool.nic(), *conn);
            }
        }
    }
}

impl SimEndpoint {
    fn batch_inner(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        if verbs.is_empty() {
            return Ok(());
        }
        if self.crashed {
            return Err(TransportError::Crashed);
        }
        validate_batch(verbs)?;
        for verb in verbs.iter() {
            validate_verb(verb, &self.shared.nodes)?;
        }
        if let Some(delay) = self.shared.config.batch_delay {
            if crate::sync::is_simulated() {
                crate::sync::thread::sleep(delay);
            } else {
                let until = Instant::now() + delay;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
        }
        let entered = self.enter(verbs)?;
        let inside = &self.shared.fail_inside;
        let index = inside.load(Ordering::Relaxed);
        if index != 0
            && (verbs.len() as u64) > index
            && inside
                .compare_exchange(index, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.fail_after = Some(index);
        }
        let here = self.life.fail_inside.load(Ordering::Relaxed);
        if here != 0
            && (verbs.len() as u64) > here
            && self
                .life
                .fail_inside
                .compare_exchange(here, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.fail_after = Some(here);
        }
        if let Some(gate) = due(&mut self.pause_inside) {
            gate.pass();
        }
        if self.stall.is_none() {
            self.stall = take_planned(&self.life.stall_planned, &self.life.stall);
        }
        self.stats.batches += 1;
        let outcome = match self.shared.config.reordering {
            Reordering::InOrder => verbs.iter_mut().try_for_each(|verb| self.run(verb)),
            mode => self.run_reordered(verbs, mode),
        };
        // A stall planned past the batch's last verb is not met.
        self.stall = None;
        self.leave(&entered);
        outcome
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicBool;

    use rdma_transport::{RemoteAddr, Transport};

    use super::*;
    use crate::{SimConfig, SimTransport};

    fn addr(offset: u64) -> RemoteAddr {
        RemoteAddr::new(0, offset).expect("addr")
    }

    /// A lost completion hides a verb failure inside its batch too: the caller must hear
    /// `Broken` (anything may have executed), never the failure, while the atomic before it did
    /// execute and its `old` reads as built. (The simulation found a lock left held when the
    /// failure came through: the writer read its lock CAS as not executed.)
    #[test]
    fn a_verb_failure_inside_a_batch_that_loses_its_completion_reports_broken() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        ep.break_after(0);
        ep.fail_after(1);
        let mut buf = [0u8; 8];
        let mut verbs = [
            Verb::cas(addr(0), 0, 7),
            Verb::read(addr(8), &mut buf),
            Verb::faa(addr(16), 1),
        ];
        if let Verb::Cas { old, .. } = &mut verbs[0] {
            *old = u64::MAX;
        }
        let result = ep.batch(&mut verbs);
        assert!(
            matches!(result, Err(TransportError::Broken(_))),
            "got {result:?}"
        );
        assert_eq!(verbs[0].old_value(), Some(u64::MAX), "nothing is learnt");
        let check = t.endpoint().expect("endpoint").read_word(addr(0));
        assert_eq!(check, Ok(7), "the CAS executed");
    }

    #[test]
    fn fail_next_fails_exactly_n_verbs_then_recovers() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        ep.fail_next(2);
        assert_eq!(ep.faa(addr(0), 1), Err(TransportError::InjectedFault));
        // The first verb of this batch fails, so the second does not run either.
        let mut verbs = [Verb::faa(addr(0), 1), Verb::faa(addr(0), 1)];
        assert_eq!(ep.batch(&mut verbs), Err(TransportError::InjectedFault));
        assert_eq!(
            ep.faa(addr(0), 1),
            Ok(0),
            "failed verbs must not have executed"
        );
        assert_eq!(ep.read_word(addr(0)), Ok(1));
    }

    #[test]
    fn reads_and_writes_larger_than_a_batch_are_split_and_oversized_batches_refused() {
        let len = 2 * rdma_transport::MAX_BATCH_BYTES + 4096;
        let t = SimTransport::anonymous(&[len as u64 + 4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        ep.write(addr(8), &data).expect("a large WRITE is split");
        assert_eq!(ep.stats().batches, 3);
        let mut back = vec![0u8; len];
        ep.read(addr(8), &mut back).expect("a large READ is split");
        assert_eq!(back, data);
        assert_eq!(ep.stats().batches, 6);
        let mut one = vec![0u8; rdma_transport::MAX_BATCH_BYTES + 8];
        assert!(matches!(
            ep.batch(&mut [Verb::read(addr(0), &mut one)]),
            Err(TransportError::BatchTooLarge { .. })
        ));
        assert_eq!(ep.stats().batches, 6, "a refused batch costs nothing");
    }

    #[test]
    fn reordering_lets_unfenced_verbs_overtake_reads_and_atomics_and_fences_stop_it() {
        let t = SimTransport::anonymous_with(
            &[4096],
            SimConfig {
                reordering: crate::Reordering::Adversarial,
                ..SimConfig::default()
            },
        )
        .expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        let five = 5u64.to_le_bytes();
        // An unfenced WRITE lands before the earlier FAA executes.
        let mut verbs = [Verb::faa(addr(0), 1), Verb::write(addr(0), &five)];
        ep.batch(&mut verbs).expect("batch");
        assert_eq!(verbs[0].old_value(), Some(5));
        assert_eq!(ep.read_word(addr(0)), Ok(6));
        // Fenced, it waits for the FAA.
        ep.write_word(addr(8), 0).expect("write");
        let mut verbs = [Verb::faa(addr(8), 1), Verb::write(addr(8), &five).fenced()];
        ep.batch(&mut verbs).expect("batch");
        assert_eq!(verbs[0].old_value(), Some(0));
        assert_eq!(ep.read_word(addr(8)), Ok(5));
        // A READ may return data written after it; fenced WRITE, it may not.
        let nine = 9u64.to_le_bytes();
        let mut seen = [0u8; 8];
        ep.batch(&mut [Verb::read(addr(8), &mut seen), Verb::write(addr(8), &nine)])
            .expect("batch");
        assert_eq!(u64::from_le_bytes(seen), 9);
        ep.batch(&mut [
            Verb::read(addr(8), &mut seen),
            Verb::write(addr(8), &five).fenced(),
        ])
        .expect("batch");
        assert_eq!(u64::from_le_bytes(seen), 9);
        assert_eq!(ep.read_word(addr(8)), Ok(5));
        // WRITEs stay in order; READs observe memory in order.
        let (one, two) = (1u64.to_le_bytes(), 2u64.to_le_bytes());
        let (mut first, mut second) = ([0u8; 8], [0u8; 8]);
        ep.batch(&mut [
            Verb::write(addr(16), &one),
            Verb::read(addr(16), &mut first),
            Verb::write(addr(16), &two),
            Verb::read(addr(16), &mut second),
        ])
        .expect("batch");
        assert_eq!(ep.read_word(addr(16)), Ok(2));
        assert_eq!(u64::from_le_bytes(first), 2, "held past the later WRITE");
        assert_eq!(u64::from_le_bytes(second), 2);
    }

    #[test]
    fn fail_after_fails_exactly_one_verb_at_that_point() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        ep.fail_after(2);
        let mut verbs = [
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
        ];
        assert_eq!(ep.batch(&mut verbs), Err(TransportError::InjectedFault));
        assert_eq!(
            ep.read_word(addr(0)),
            Ok(2),
            "the two verbs before the fault ran"
        );
        assert_eq!(ep.faa(addr(0), 1), Ok(2), "later verbs run again");
    }

    #[test]
    fn a_fault_armed_inside_the_next_long_batch_skips_short_ones_and_fails_that_verb() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        t.fail_inside_next_batch(2);
        let mut short = [Verb::faa(addr(0), 1), Verb::faa(addr(0), 1)];
        assert_eq!(ep.batch(&mut short), Ok(()), "two verbs: not long enough");
        let mut long = [
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
        ];
        assert_eq!(ep.batch(&mut long), Err(TransportError::InjectedFault));
        assert_eq!(
            ep.read_word(addr(0)),
            Ok(4),
            "the two verbs before the fault ran"
        );
        assert_eq!(ep.batch(&mut long), Ok(()), "one batch only");
    }

    #[test]
    fn a_fault_armed_inside_one_process_s_next_long_batch_leaves_other_processes_alone() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let (mine, theirs) = (t.process(), t.process());
        let mut other = theirs.endpoint().expect("endpoint");
        let mut ep = mine.endpoint().expect("endpoint");
        mine.fail_inside_next_batch_here(2);
        let long = || {
            [
                Verb::faa(addr(0), 1),
                Verb::faa(addr(0), 1),
                Verb::faa(addr(0), 1),
            ]
        };
        assert_eq!(other.batch(&mut long()), Ok(()), "another process's batch");
        assert_eq!(
            ep.batch(&mut [Verb::faa(addr(0), 1), Verb::faa(addr(0), 1)]),
            Ok(()),
            "two verbs: not long enough"
        );
        assert_eq!(ep.batch(&mut long()), Err(TransportError::InjectedFault));
        assert_eq!(
            ep.read_word(addr(0)),
            Ok(7),
            "two verbs ran before the fault"
        );
        assert_eq!(ep.batch(&mut long()), Ok(()), "one batch only");
        // Disarmed before any batch meets it: nothing fails.
        mine.fail_inside_next_batch_here(1);
        mine.disarm();
        assert_eq!(ep.batch(&mut long()), Ok(()));
    }

    #[test]
    fn the_write_observer_is_told_of_whole_writes_only() {
        let config = SimConfig {
            packet_bytes: 32,
            ..SimConfig::default()
        };
        let t = SimTransport::anonymous_with(&[4096], config).expect("pool");
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&told);
        assert!(t.observe_writes(Box::new(move |at, data| {
            seen.lock().expect("lock").push((at.offset(), data.len()));
        })));
        assert!(
            !t.observe_writes(Box::new(|_, _| {})),
            "one observer per fabric"
        );
        let mut ep = t.endpoint().expect("endpoint");
        let data = [7u8; 80];
        ep.write(addr(64), &data).expect("write");
        ep.write_word(addr(8), 1).expect("write a word");
        ep.faa(addr(0), 1).expect("faa");
        // A WRITE a crash cuts after two of its three packets: not told.
        ep.tear_after(0, 2);
        assert_eq!(ep.write(addr(256), &data), Err(TransportError::Crashed));
        // Another process of the fabric: told.
        let mut other = t.process().endpoint().expect("endpoint");
        other.write(addr(512), &data[..16]).expect("write");
        assert_eq!(*told.lock().expect("lock"), [(64, 80), (8, 8), (512, 16)]);
    }

    #[test]
    fn a_write_cut_by_a_crash_lands_a_prefix_of_whole_packets() {
        let config = SimConfig {
            packet_bytes: 32,
            ..SimConfig::default()
        };
        let t = SimTransport::anonymous_with(&[4096], config).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        let data: Vec<u8> = (1..=80).collect();
        ep.tear_after(1, 2);
        let mut verbs = [Verb::faa(addr(0), 1), Verb::write(addr(64), &data)];
        assert_eq!(ep.batch(&mut verbs), Err(TransportError::Crashed));
        assert!(ep.tore());
        assert!(ep.is_crashed());
        let mut other = t.endpoint().expect("endpoint");
        assert_eq!(other.read_word(addr(0)), Ok(1), "the verb before ran");
        let mut placed = [0u8; 80];
        other.read(addr(64), &mut placed).expect("read");
        assert_eq!(placed[..64], data[..64], "two whole packets landed");
        assert_eq!(placed[64..], [0u8; 16], "the third never did");
        // A verb that is not a WRITE is not executed at all.
        let mut ep = t.endpoint().expect("endpoint");
        ep.tear_after(0, 1);
        assert_eq!(ep.faa(addr(0), 1), Err(TransportError::Crashed));
        assert!(!ep.tore());
        assert_eq!(other.read_word(addr(0)), Ok(1));
        // Nor is a WRITE that fits in the packets allowed to land (it would land whole).
        let mut ep = t.endpoint().expect("endpoint");
        ep.tear_after(0, 3);
        assert_eq!(ep.write(addr(256), &data), Err(TransportError::Crashed));
        assert!(!ep.tore());
        assert_eq!(other.read_word(addr(256)), Ok(0));
        assert_eq!(ep.stats().verbs(), 0);
    }

    #[test]
    fn crash_after_stops_mid_batch_and_stays_crashed() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let mut ep = t.endpoint().expect("endpoint");
        ep.crash_after(2);
        let mut verbs = [
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
            Verb::faa(addr(0), 1),
        ];
        assert_eq!(ep.batch(&mut verbs), Err(TransportError::Crashed));
        assert!(ep.is_crashed());
        assert_eq!(ep.read_word(addr(0)), Err(TransportError::Crashed));
        let mut other = t.endpoint().expect("endpoint");
        assert_eq!(
            other.read_word(addr(0)),
            Ok(2),
            "exactly the verbs before the crash ran"
        );
    }

    #[test]
    fn transport_wide_faults_hit_any_endpoint() {
        let t = SimTransport::anonymous(&[4096]).expect("pool");
        let (mut a, mut b) = (
            t.endpoint().expect("endpoint"),
            t.endpoint().expect("endpoint"),
        );
        t.fail_next_verbs(2);
        assert_eq!(a.faa(addr(0), 1), Err(TransportError::InjectedFault));
        assert_eq!(b.faa(addr(0), 1), Err(TransportError::InjectedFault));
        assert_eq!(a.faa(addr(0), 1), Ok(0));
    }

    /// In torn mode a READ racing WRITEs of all-zero and all-one blocks must observe a mixture:
    /// this is what makes the checksum-validation paths of the layers above run in tests.
    #[test]
    fn a_fenced_endpoint_executes_nothing_more_and_others_go_on() {
        use rdma_transport::Fence;
        let fabric = SimTransport::anonymous(&[4096]).expect("pool");
        let mut victim = fabric.endpoint().expect("endpoint");
        let mut other = fabric.endpoint().expect("endpoint");
        let id = victim
            .connection_id(0)
            .expect("the simulator names connections");
        assert_ne!(Some(id), other.connection_id(0));
        victim.write_word(addr(0), 1).expect("write");
        assert_eq!(
            fabric.fence(0).expect("node 0").fence(id),
            Ok(rdma_transport::Fenced::Done)
        );
        assert_eq!(
            victim.write_word(addr(0), 2),
            Err(TransportError::Fenced(0))
        );
        assert_eq!(victim.read_word(addr(0)), Err(TransportError::Fenced(0)));
        assert_eq!(
            other.read_word(addr(0)),
            Ok(1),
            "the fenced WRITE did not land"
        );
        other.write_word(addr(8), 3).expect("others are not fenced");
    }

    #[test]
    fn a_stalled_batch_shows_its_first_verbs_only_and_a_fence_finds_it_in_flight() {
        use rdma_transport::Fence;
        let fabric = SimTransport::anonymous(&[4096]).expect("pool");
        let process = fabric.process();
        let mut writer = process.endpoint().expect("endpoint");
        let mut other = fabric.endpoint().expect("endpoint");
        let id = writer.connection_id(0).expect("named");
        let gate = Gate::new();
        process.stall_next_batch(2, gate.clone());
        let batch = std::thread::spawn(move || {
            let words = [1u64.to_le_bytes(), 2u64.to_le_bytes(), 3u64.to_le_bytes()];
            let mut verbs = [
                Verb::write(addr(0), &words[0]),
                Verb::write(addr(8), &words[1]),
                Verb::write(addr(16), &words[2]),
            ];
            writer.batch(&mut verbs)
        });
        assert!(
            gate.wait_for_arrival(Duration::from_secs(10)),
            "never stalled"
        );
        assert_eq!(other.read_word(addr(0)), Ok(1));
        assert_eq!(other.read_word(addr(8)), Ok(2));
        assert_eq!(other.read_word(addr(16)), Ok(0), "the third verb waits");
        assert_eq!(
            fabric.fence(0).expect("node 0").fence(id),
            Ok(rdma_transport::Fenced::InFlight),
            "a fence finds the stalled batch in flight"
        );
        gate.open();
        assert_eq!(batch.join().expect("join"), Ok(()));
        assert_eq!(other.read_word(addr(16)), Ok(3));
        // One batch only: the next runs through.
        let mut again = process.endpoint().expect("endpoint");
        let words = [4u64.to_le_bytes(), 5u64.to_le_bytes()];
        let mut verbs = [
            Verb::write(addr(24), &words[0]),
            Verb::write(addr(32), &words[1]),
        ];
        assert_eq!(again.batch(&mut verbs), Ok(()));
    }

    #[test]
    fn torn_mode_makes_reads_tear() {
        let t = SimTransport::anonymous_with(&[4096], SimConfig::torn()).expect("pool");
        let stop = AtomicBool::new(false);
        let torn_seen = std::thread::scope(|s| {
            s.spawn(|| {
                let mut ep = t.endpoint().expect("endpoint");
                let (zeros, ones) = ([0u8; 256], [0xffu8; 256]);
                while !stop.load(Ordering::Relaxed) {
                    ep.write(addr(0), &zeros).expect("write");
                    ep.write(addr(0), &ones).expect("write");
                }
            });
            let mut ep = t.endpoint().expect("endpoint");
            let mut buf = [0u8; 256];
            let mut seen = false;
            for _ in 0..200_000 {
                ep.read(addr(0), &mut buf).expect("read");
                if buf.contains(&0) && buf.contains(&0xff) {
                    seen = true;
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            seen
        });
        assert!(torn_seen, "torn mode never produced a torn READ");
    }

    /// With NIC atomicity, a WRITE landing between an atomic's read and its write is lost (the
    /// atomic's value wins: here FAAs of 0, which change nothing under CPU atomics, put back the
    /// word they read), while atomics stay atomic among themselves; without it, no WRITE is lost.
    #[test]
    fn nic_atomics_lose_a_racing_write_and_never_an_atomic() {
        for nic_atomics in [true, false] {
            let config = SimConfig {
                nic_atomics,
                ..SimConfig::default()
            };
            let t = SimTransport::anonymous_with(&[4096], config).expect("pool");
            const ADDS: u64 = 20_000;
            let stop = AtomicBool::new(false);
            let lost = std::thread::scope(|s| {
                let adders: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| {
                            let mut ep = t.endpoint().expect("endpoint");
                            for _ in 0..ADDS {
                                ep.faa(addr(8), 1).expect("faa");
                                ep.faa(addr(0), 0).expect("faa");
                            }
                            while !stop.load(Ordering::Relaxed) {
                                ep.faa(addr(0), 0).expect("faa");
                            }
                        })
                    })
                    .collect();
                let mut ep = t.endpoint().expect("endpoint");
                let mut lost = 0u64;
                for i in 1..=5_000u64 {
                    ep.write_word(addr(0), i).expect("write");
                    for _ in 0..200 {
                        std::hint::spin_loop();
                    }
                    if ep.read_word(addr(0)).expect("read") != i {
                        lost += 1;
                    }
                }
                stop.store(true, Ordering::Relaxed);
                for a in adders {
                    a.join().expect("adder");
                }
                lost
            });
            let mut ep = t.endpoint().expect("endpoint");
            assert_eq!(
                ep.read_word(addr(8)).expect("read"),
                2 * ADDS,
                "no atomic is lost (NIC atomics {nic_atomics})"
            );
            if nic_atomics {
                assert!(lost > 0, "a WRITE racing an atomic was lost at least once");
            } else {
                assert_eq!(lost, 0, "CPU atomics lose no WRITE");
            }
        }
    }

    #[test]
    fn torn_reads_tear_only_at_word_boundaries() {
        let t = SimTransport::anonymous_with(&[4096], SimConfig::torn()).expect("pool");
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut ep = t.endpoint().expect("endpoint");
                let (zeros, ones) = ([0u8; 128], [0xffu8; 128]);
                while !stop.load(Ordering::Relaxed) {
                    ep.write(addr(8), &zeros).expect("write");
                    ep.write(addr(8), &ones).expect("write");
                }
            });
            let mut ep = t.endpoint().expect("endpoint");
            let mut buf = [0u8; 128];
            for _ in 0..20_000 {
                ep.read(addr(8), &mut buf).expect("read");
                for word in buf.chunks_exact(8) {
                    assert!(
                        word.iter().all(|&b| b == word[0]),
                        "a single 8-byte word tore: {word:?}"
                    );
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}
