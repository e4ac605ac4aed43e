//! One client thread's loop: pick an operation, run it, and (once the warm-up is over) record its
//! latency and verbs.
//!
//! Closed loop by default: a thread starts an operation when one ends, and an operation's latency
//! runs from its start. Open loop with `--target-rate` ([`Schedule`]): operations start on a
//! schedule, and an operation's latency runs from its scheduled start, so a thread that fell
//! behind counts the time its operations waited (no coordinated omission).

use crate::error::{CliError, failed};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdma_transport::Stats;

use super::intervals::ThreadIntervals;
use super::latency::{MAX_LATENCY_NS, OP_NAMES, latency_histogram};
use crate::error::Failed;
use crate::index::{BenchClient, BenchIndex};
use crate::workload::{Chooser, Mix, Op};
use kv_session::{Lane, Request};

/// Operations a thread does between two updates of the shared counters.
const FLUSH_EVERY: u64 = 256;

/// What every thread of a run shares.
pub(super) struct Shared {
    pub chooser: Chooser,
    pub mix: Mix,
    pub loaded: Vec<u64>,
    pub to_insert: Vec<u64>,
    /// New keys handed out so far (indexes into `to_insert`).
    pub claimed: AtomicU64,
    /// Measured operations done (updated every [`FLUSH_EVERY`]).
    pub done: AtomicU64,
    /// Warm-up operations done (likewise).
    pub warm_done: AtomicU64,
    /// Whether the warm-up is over: operations from now on are measured.
    pub measuring: AtomicBool,
    /// With `--duration`: when measuring stops, in nanoseconds after `started` (`u64::MAX`
    /// until measuring starts).
    pub deadline_ns: AtomicU64,
    pub started: Instant,
    /// Measured operations per thread (without `--duration`).
    pub per_thread: u64,
    pub timed: bool,
    /// A churn run: each thread deletes keys it owns as often as it inserts.
    pub churn: bool,
    pub threads: u64,
    /// Ctrl-C: every thread stops after the operation under way (set by the sampling loop).
    pub stop: AtomicBool,
    /// Open loop (`--target-rate`): nanoseconds between two scheduled starts of one thread.
    pub pace_ns: Option<f64>,
    /// With `--report-interval`: latencies are kept per interval ([`super::intervals`]).
    pub per_interval: bool,
    /// The interval under way (the sampler advances it as it closes one).
    pub interval_seq: AtomicU64,
    /// A load phase (`--load-phase`): every operation inserts the next key of `to_insert`, and
    /// the phase ends when they run out (each is inserted once, by one thread).
    pub load_only: bool,
}

impl Shared {
    /// The interval under way, if latencies are kept per interval (`--report-interval`).
    fn interval_now(&self) -> Option<u64> {
        self.per_interval
            .then(|| self.interval_seq.load(Ordering::Acquire))
    }

    /// Whether the measured stretch is over by its clock (`--duration`).
    fn past_deadline(&self) -> bool {
        self.timed
            && self.started.elapsed().as_nanos() as u64 >= self.deadline_ns.load(Ordering::Acquire)
    }
}

/// An open-loop thread's schedule: its `n`th operation of a stretch starts at `origin + n ×
/// interval`, however long the ones before it took. Threads' schedules are offset by a share of
/// the interval each, so the run's operations are spread evenly, not started in bursts.
struct Schedule {
    origin: Instant,
    interval_ns: f64,
    offset_ns: f64,
    next: u64,
}

impl Schedule {
    /// Thread `t`'s schedule, if the run is open-loop; from now on.
    fn of(shared: &Shared, t: u64) -> Option<Self> {
        shared.pace_ns.map(|interval_ns| Self {
            origin: Instant::now(),
            interval_ns,
            offset_ns: interval_ns * t as f64 / shared.threads as f64,
            next: 0,
        })
    }

    /// Starts the schedule again from now (a new stretch: the warm-up's backlog is not the
    /// measured stretch's).
    fn restart(&mut self) {
        self.origin = Instant::now();
        self.next = 0;
    }

    /// When the next operation is due.
    fn due(&self) -> Instant {
        let ns = self.offset_ns + self.interval_ns * self.next as f64;
        self.origin + std::time::Duration::from_nanos(ns as u64)
    }

    /// The next operation's scheduled start, taken.
    fn take(&mut self) -> Instant {
        let due = self.due();
        self.next += 1;
        due
    }
}

/// Waits until `due`; false if the run stopped meanwhile (Ctrl-C, or the measured stretch's
/// deadline while `measuring`), or a warm-up ended.
fn wait_until(due: Instant, shared: &Shared, measuring: bool) -> bool {
    loop {
        let now = Instant::now();
        if now >= due {
            return true;
        }
        if shared.stop.load(Ordering::Acquire)
            || (measuring && shared.past_deadline())
            || (!measuring && shared.measuring.load(Ordering::Acquire))
        {
            return false;
        }
        // Asleep until a millisecond before it is due (a millisecond at a time: a stop is seen
        // within one), then spinning: a sleep wakes late by the scheduler's slack, which the
        // operation's latency would count.
        let left = due - now;
        let margin = std::time::Duration::from_millis(1);
        if left > 2 * margin {
            std::thread::sleep((left - margin).min(margin));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Per thread: latency histograms and network counters per operation type.
pub(super) struct ThreadResult {
    pub latency: Vec<Histogram<u64>>,
    pub net: Vec<Stats>,
    /// Lock-table verbs per operation kind (the B+-tree's; within `net` too).
    pub lock_verbs: Vec<u64>,
    pub inserted: Vec<u64>,
    /// Inserts that added a key.
    pub inserted_count: u64,
    /// Churn: the keys this thread owns at the end (all must be present).
    pub owned: Vec<u64>,
    /// Fresh endpoints this thread needed after its endpoint broke.
    pub reconnects: u64,
    /// Value bytes its measured operations moved (byte values only).
    pub value_bytes: u64,
    /// When its last operation finished.
    pub finished: Instant,
    /// Its latencies per interval (with `--report-interval`; [`super::intervals`]).
    pub interval_latencies: Vec<(u64, usize, Vec<u8>)>,
}

/// A thread's result before its first operation.
fn empty_result(shared: &Shared, t: u64) -> Result<ThreadResult, CliError> {
    let mut result = ThreadResult {
        latency: (0..OP_NAMES.len())
            .map(|_| latency_histogram())
            .collect::<Result<_, _>>()?,
        net: vec![Stats::default(); OP_NAMES.len()],
        lock_verbs: vec![0; OP_NAMES.len()],
        inserted: Vec::new(),
        inserted_count: 0,
        owned: Vec::new(),
        reconnects: 0,
        value_bytes: 0,
        finished: Instant::now(),
        interval_latencies: Vec::new(),
    };
    if shared.churn {
        result.owned = shared
            .loaded
            .iter()
            .skip(t as usize)
            .step_by(shared.threads as usize)
            .copied()
            .collect();
    }
    Ok(result)
}

/// Thread `t`'s loop: warm-up operations until `shared.measuring`, then its share of the
/// measured ones (or until the deadline); with `inflight` above one, that many at once
/// ([`run_pipelined`]).
pub(super) fn run_thread<I: BenchIndex>(
    store: &I,
    shared: &Arc<Shared>,
    t: u64,
    seed: u64,
    inflight: u64,
) -> Result<ThreadResult, CliError> {
    if inflight > 1 {
        return run_pipelined(store, shared, t, seed, inflight);
    }
    let mut client = store.client()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut result = empty_result(shared, t)?;
    let (mut measured, mut unflushed, mut warm_unflushed) = (0u64, 0u64, 0u64);
    let mut value_bytes_at_start = None;
    let mut schedule = Schedule::of(shared, t);
    let mut per_interval = ThreadIntervals::new()?;
    loop {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let measuring = shared.measuring.load(Ordering::Acquire);
        if measuring {
            if value_bytes_at_start.is_none() {
                value_bytes_at_start = Some(client.value_bytes());
                shared
                    .warm_done
                    .fetch_add(warm_unflushed, Ordering::Relaxed);
                warm_unflushed = 0;
                if let Some(schedule) = &mut schedule {
                    schedule.restart();
                }
            }
            let over = if shared.timed {
                shared.past_deadline()
            } else {
                measured >= shared.per_thread
            };
            if over {
                break;
            }
        }
        // Open loop: the operation's scheduled start (waited for if it is ahead), from which its
        // latency counts; closed loop: now.
        let at = match &mut schedule {
            Some(schedule) => {
                let due = schedule.take();
                if !wait_until(due, shared, measuring) {
                    continue;
                }
                due
            }
            None => Instant::now(),
        };
        let Some(op) = next_op(shared, &mut rng, &mut result.owned) else {
            break;
        };
        let before = client.net_stats();
        let locks_before = client.lock_verbs();
        let inserted_before = result.inserted.len();
        let kind = match execute(&mut client, op, &mut result.inserted) {
            Ok(kind) => kind,
            // A broken endpoint (a failed or timed-out batch on a real NIC): a fresh one, and the
            // operation once more.
            Err(Failed::ConnectionLost(first)) => {
                store
                    .reconnect(&mut client)
                    .map_err(|e| e.context(format!("{first}; reconnecting")))?;
                result.reconnects += 1;
                execute(&mut client, op, &mut result.inserted).map_err(|e| {
                    CliError::from(e).context(format!("{first}; after reconnecting"))
                })?
            }
            Err(other) => return Err(other.into()),
        };
        let ns = at.elapsed().as_nanos() as u64;
        if result.inserted.len() > inserted_before {
            result.inserted_count += u64::from(measuring);
            if shared.churn {
                // The key is this thread's to delete later, not a lasting insert.
                result.owned.extend(result.inserted.pop());
            }
        }
        if !measuring {
            warm_unflushed += 1;
            if warm_unflushed == FLUSH_EVERY {
                shared
                    .warm_done
                    .fetch_add(warm_unflushed, Ordering::Relaxed);
                warm_unflushed = 0;
            }
            continue;
        }
        let _ = result.latency[kind].record(ns.clamp(1, MAX_LATENCY_NS));
        per_interval.record(shared.interval_now(), kind, ns.clamp(1, MAX_LATENCY_NS));
        result.net[kind] += client.net_stats() - before;
        result.lock_verbs[kind] += client.lock_verbs() - locks_before;
        measured += 1;
        unflushed += 1;
        if unflushed == FLUSH_EVERY {
            shared.done.fetch_add(unflushed, Ordering::Relaxed);
            unflushed = 0;
        }
    }
    shared.done.fetch_add(unflushed, Ordering::Relaxed);
    result.finished = Instant::now();
    result.value_bytes = client.value_bytes() - value_bytes_at_start.unwrap_or(0);
    per_interval.file();
    result.interval_latencies = per_interval.filed;
    Ok(result)
}

/// The next operation: a churn thread's delete of a key it owns half the time, else the mix's;
/// in a load phase, the next key's insert, or none once every key is handed out.
fn next_op(shared: &Shared, rng: &mut StdRng, owned: &mut Vec<u64>) -> Option<Op> {
    if shared.load_only {
        let n = shared.claimed.fetch_add(1, Ordering::AcqRel) as usize;
        return shared.to_insert.get(n).map(|&k| Op::Insert(k));
    }
    if shared.churn && !owned.is_empty() && rng.random::<bool>() {
        let at = rng.random_range(0..owned.len());
        return Some(Op::Delete(owned.swap_remove(at)));
    }
    let (loaded, to_insert) = (&shared.loaded, &shared.to_insert);
    let live = loaded.len() as u64
        + shared
            .claimed
            .load(Ordering::Acquire)
            .min(to_insert.len() as u64);
    let key_at = |idx: u64| {
        let idx = idx as usize;
        loaded
            .get(idx)
            .copied()
            .unwrap_or_else(|| to_insert.get(idx - loaded.len()).copied().unwrap_or(0))
    };
    let new_key = || {
        let n = shared.claimed.fetch_add(1, Ordering::AcqRel) as usize;
        to_insert
            .get(n)
            .copied()
            .unwrap_or_else(rand::random::<u64>)
    };
    Some(shared.mix.next(rng, &shared.chooser, live, key_at, new_key))
}

/// Issues one operation; returns its index in [`OP_NAMES`].
fn execute<C: BenchClient>(
    client: &mut C,
    op: Op,
    inserted: &mut Vec<u64>,
) -> Result<usize, Failed> {
    Ok(match op {
        Op::Read(k) => {
            client.get(k)?;
            0
        }
        Op::Update(k) => {
            client.update(k, k.wrapping_add(1))?;
            1
        }
        Op::Insert(k) => {
            if client.insert(k, k)? {
                inserted.push(k);
            }
            2
        }
        Op::Delete(k) => {
            if !client.delete(k)? {
                return Err(Failed::Other(format!(
                    "churn: deleting {k}, which this thread owns, found nothing"
                )));
            }
            5
        }
        Op::Scan(k, n) => {
            client.scan(k, n)?;
            3
        }
        Op::ReadModifyWrite(k) => {
            let v = client.get(k)?.unwrap_or(0);
            client.update(k, v.wrapping_add(1))?;
            4
        }
    })
}

/// An operation in flight on a pipelined thread.
struct InFlight {
    op: Op,
    kind: usize,
    started: Instant,
    /// Started after the warm-up: recorded.
    measured: bool,
    /// What its requests have used so far (a read-modify-write makes two).
    net: Stats,
    /// A read-modify-write whose GET is done: its update is in flight.
    updating: bool,
}

/// The request that starts `op` (a read-modify-write starts with its GET).
fn first_request(op: Op) -> (Request, usize) {
    match op {
        Op::Read(k) => (Request::Get(k), 0),
        Op::Update(k) => (Request::Update(k, k.wrapping_add(1)), 1),
        Op::Insert(k) => (Request::Insert(k, k), 2),
        Op::Scan(k, n) => (Request::Scan(k, n), 3),
        Op::ReadModifyWrite(k) => (Request::Get(k), 4),
        Op::Delete(k) => (Request::Delete(k), 5),
    }
}

/// [`run_thread`] with `inflight` operations at once: one client per operation in flight, driven
/// by one session (`kv_session`), each operation's latency from its start to its end and its
/// verbs from its own client's counters. The warm-up and the measured stretch are two sessions:
/// the warm-up's operations all end before the first measured one starts.
fn run_pipelined<I: BenchIndex>(
    store: &I,
    shared: &Arc<Shared>,
    t: u64,
    seed: u64,
    inflight: u64,
) -> Result<ThreadResult, CliError> {
    let mut lanes: Vec<I::Client> = (0..inflight)
        .map(|_| store.client())
        .collect::<Result<_, _>>()?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut result = empty_result(shared, t)?;
    let mut value_bytes_at_start = 0;
    let mut schedule = Schedule::of(shared, t);
    let mut per_interval = ThreadIntervals::new()?;
    for measuring in [false, true] {
        if measuring {
            if !shared.measuring.load(Ordering::Acquire) {
                // Still warming up: this thread's warm-up goes on until the run's ends.
                while !shared.measuring.load(Ordering::Acquire)
                    && !shared.stop.load(Ordering::Acquire)
                {
                    std::thread::yield_now();
                }
            }
            value_bytes_at_start = lanes.iter().map(BenchClient::value_bytes).sum();
        } else if shared.measuring.load(Ordering::Acquire) {
            continue;
        }
        if let Some(schedule) = &mut schedule {
            schedule.restart();
        }
        drive(
            shared,
            &mut lanes,
            &mut rng,
            &mut result,
            measuring,
            schedule.as_mut(),
            &mut per_interval,
        )?;
    }
    result.finished = Instant::now();
    result.value_bytes =
        lanes.iter().map(BenchClient::value_bytes).sum::<u64>() - value_bytes_at_start;
    per_interval.file();
    result.interval_latencies = per_interval.filed;
    Ok(result)
}

/// One stretch of a pipelined thread: the warm-up (until the run's warm-up ends) or the measured
/// operations (its share, or until the deadline). Open loop (`schedule`): an operation starts
/// once it is due and a lane is free; meanwhile the session is polled, not waited on, so a due
/// operation is not held up by one in flight.
fn drive<C: BenchClient>(
    shared: &Shared,
    lanes: &mut [C],
    rng: &mut StdRng,
    result: &mut ThreadResult,
    measuring: bool,
    mut schedule: Option<&mut Schedule>,
    per_interval: &mut ThreadIntervals,
) -> Result<(), CliError> {
    let mut session = kv_session::session(lanes);
    let mut flights: std::collections::HashMap<u64, InFlight> = std::collections::HashMap::new();
    let (mut next_tag, mut started, mut unflushed) = (0u64, 0u64, 0u64);
    // A load phase's keys all handed out.
    let exhausted = std::cell::Cell::new(false);
    let over = |started: u64| {
        if shared.stop.load(Ordering::Acquire) || exhausted.get() {
            return true;
        }
        if !measuring {
            return shared.measuring.load(Ordering::Acquire);
        }
        if shared.timed {
            shared.past_deadline()
        } else {
            started >= shared.per_thread
        }
    };
    loop {
        while session.has_room() && !over(started) {
            let at = match schedule.as_deref_mut() {
                Some(schedule) if schedule.due() > Instant::now() => break,
                Some(schedule) => schedule.take(),
                None => Instant::now(),
            };
            let Some(op) = next_op(shared, rng, &mut result.owned) else {
                exhausted.set(true);
                break;
            };
            let (request, kind) = first_request(op);
            flights.insert(
                next_tag,
                InFlight {
                    op,
                    kind,
                    started: at,
                    measured: measuring,
                    net: Stats::default(),
                    updating: false,
                },
            );
            if session.submit(next_tag, request).is_err() {
                return Err(failed!("a pipelined session refused work it had room for"));
            }
            next_tag += 1;
            started += 1;
        }
        let done = match schedule.as_deref() {
            // Open loop, more to start: whatever completed, else wait for the next start.
            Some(schedule) if !over(started) => match session.poll() {
                Some(done) => done,
                None => {
                    if session.in_flight() == 0 {
                        wait_until(schedule.due(), shared, measuring);
                    } else {
                        C::idle();
                    }
                    continue;
                }
            },
            _ => match session.wait() {
                Some(done) => done,
                None => break,
            },
        };
        let Some(mut flight) = flights.remove(&done.tag) else {
            return Err(failed!("a pipelined session returned an unknown operation"));
        };
        flight.net += done.net;
        let reply = done.result.map_err(|e| CliError::from(C::failure(e)))?;
        // A read-modify-write's GET: now its update, on the lane the GET just freed.
        if let (Op::ReadModifyWrite(k), kv_session::Reply::Value(v), false) =
            (flight.op, &reply, flight.updating)
        {
            let update = Request::Update(k, v.unwrap_or(0).wrapping_add(1));
            flights.insert(
                done.tag,
                InFlight {
                    updating: true,
                    ..flight
                },
            );
            if session.submit(done.tag, update).is_err() {
                return Err(failed!("a pipelined session refused work it had room for"));
            }
            continue;
        }
        if let (Op::Insert(k), kv_session::Reply::Done(true)) = (flight.op, &reply) {
            if shared.churn {
                // The key is this thread's to delete later, not a lasting insert.
                result.owned.push(k);
            } else {
                result.inserted.push(k);
            }
            result.inserted_count += u64::from(flight.measured);
        }
        if let (Op::Delete(k), kv_session::Reply::Done(false)) = (flight.op, &reply) {
            return Err(Failed::Other(format!(
                "churn: deleting {k}, which this thread owns, found nothing"
            ))
            .into());
        }
        if !flight.measured {
            shared.warm_done.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let ns = flight.started.elapsed().as_nanos() as u64;
        let _ = result.latency[flight.kind].record(ns.clamp(1, MAX_LATENCY_NS));
        per_interval.record(
            shared.interval_now(),
            flight.kind,
            ns.clamp(1, MAX_LATENCY_NS),
        );
        result.net[flight.kind] += flight.net;
        unflushed += 1;
        if unflushed == FLUSH_EVERY {
            shared.done.fetch_add(unflushed, Ordering::Relaxed);
            unflushed = 0;
        }
    }
    shared.done.fetch_add(unflushed, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_spaces_a_thread_s_starts_evenly_and_offsets_the_threads() {
        let at = |s: &Schedule| s.due().duration_since(s.origin).as_nanos() as u64;
        let mut third = Schedule {
            origin: Instant::now(),
            interval_ns: 3_000.0,
            offset_ns: 3_000.0 * 2.0 / 3.0,
            next: 0,
        };
        let starts: Vec<u64> = (0..4)
            .map(|_| {
                let due = third.take();
                due.duration_since(third.origin).as_nanos() as u64
            })
            .collect();
        assert_eq!(starts, [2_000, 5_000, 8_000, 11_000]);
        // However late the thread is, the next start is the schedule's, not now.
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(at(&third), 14_000);
        third.restart();
        assert_eq!(at(&third), 2_000, "a new stretch starts its schedule again");
    }
}
