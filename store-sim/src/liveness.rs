//! The liveness oracle: the store must make progress whenever no injected fault holds it up.
//!
//! Invariants checked:
//! - Every operation of a run either completes within [`BOUND`] of virtual time, or the faults
//!   the simulation injected *hold* at least half of the virtual time it took. An operation that
//!   gives up waiting ([`gives_up`]: a retraining, a lock or a validated read that never
//!   settles, a slot table that stays full) is a failure on the same terms, whatever it took:
//!   the store's wait limits (seconds) are far longer than any fault the simulation injects
//!   (milliseconds), so only a protocol that stopped making progress reaches them.
//! - A read (GET, SCAN) never waits for the memory node's worker: one that *slept* (backed off,
//!   as opposed to being scheduled late) needs faults of the compute nodes holding half its
//!   time. Every key stays routable through a retraining, whatever step it stopped at; a worker
//!   stopped there holds up writers of its frozen record, never a reader.
//!
//! A fault holds the store from the moment it is injected (or, for a fault tied to a named step,
//! from the moment a thread meets that step) for its own length — a pause's, a stall's, a late
//! batch's hold — plus the time the memory node needs to notice and repair what it may leave
//! behind ([`REPAIR`]: a lease to lapse, a recovery, a retraining finished by a restarted
//! worker). Without this oracle the linearizability check accepts a store that never answers:
//! a failed operation may or may not have happened, so a protocol that leaves keys unroutable
//! (a split's new slot published after the redirect) passes it.
//!
//! The harness's own bookkeeping: `std` primitives, so it adds no sync point to a schedule.

use std::sync::Mutex;
use std::time::Duration;

use index_core::IndexError;
use sim_scheduler::time::Instant;

use crate::times::LEASE;

/// How long an operation may take, in virtual time, when no fault holds the store (a thousand
/// times a GET's round trips; a write that waits for a retraining takes a few milliseconds).
pub const BOUND: Duration = Duration::from_millis(100);

/// What a fault leaves the memory node to notice and repair after its own length: a lease to
/// lapse, a dead member's recovery, its retired lock indexes settled, a retraining finished.
pub const REPAIR: Duration = Duration::from_millis(4 * LEASE.as_millis() as u64);

/// Whether `e` says the operation gave up waiting for the store (rather than for a fault it
/// met directly: a broken connection, a fence, a full value region).
pub fn gives_up(e: &IndexError) -> bool {
    matches!(
        e,
        IndexError::RetrainingTimeout { .. }
            | IndexError::LockTimeout { .. }
            | IndexError::TooManyRetries(_)
            | IndexError::SltFull { .. }
    )
}

/// A span of virtual time a fault held the store.
#[derive(Debug, Clone)]
struct Hold {
    from: Duration,
    /// The end of the fault's own length, without [`REPAIR`].
    until: Duration,
    to: Duration,
    /// Held by a memory node's worker (paused, killed, restarting), not by a compute node.
    worker: bool,
}

/// An operation as the oracle sees it.
#[derive(Debug, Clone)]
struct Timed {
    client: String,
    what: String,
    from: Duration,
    to: Duration,
    gave_up: bool,
    /// A GET or a SCAN.
    read: bool,
    /// The virtual time its thread asked to sleep (backoff) during it.
    slept: Duration,
}

/// What the oracle found over a run, for the campaign's report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LivenessStats {
    /// The longest operation no fault held up, in virtual microseconds.
    pub slowest_unheld_us: u64,
    /// Operations that gave up waiting while faults held the store (accepted).
    pub gave_up_held: u64,
    /// Operations that took longer than [`BOUND`] while faults held the store (accepted).
    pub slow_held: u64,
    /// Reads that backed off (slept) while compute nodes' faults held the store (accepted).
    pub reads_waited: u64,
}

/// The run's holds and timed operations.
#[derive(Debug)]
pub struct Liveness {
    started: Instant,
    holds: Mutex<Vec<Hold>>,
    ops: Mutex<Vec<Timed>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Self::new()
    }
}

impl Liveness {
    /// A new account; virtual time counts from now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            holds: Mutex::new(Vec::new()),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Virtual time since the run began.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// A fault of a compute node holds the store from now for `length`, then [`REPAIR`].
    pub fn hold(&self, length: Duration) {
        self.push_hold(length, false);
    }

    /// A fault of a compute node holds the store from `ago` before now for `length`, then
    /// [`REPAIR`]: a batch held from the moment it reached a gate, which the harness sees only
    /// later.
    pub fn hold_since(&self, ago: Duration, length: Duration) {
        let from = self.now().saturating_sub(ago);
        self.push(from, length, false);
    }

    /// A fault of a memory node's worker holds the store from now for `length`, then
    /// [`REPAIR`].
    pub fn hold_worker(&self, length: Duration) {
        self.push_hold(length, true);
    }

    fn push_hold(&self, length: Duration, worker: bool) {
        self.push(self.now(), length, worker);
    }

    fn push(&self, from: Duration, length: Duration, worker: bool) {
        self.holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Hold {
                from,
                until: from + length,
                to: from + length + REPAIR,
                worker,
            });
    }

    /// An operation begins now: when, and how long its thread had slept before it.
    pub fn begin(&self) -> Began {
        Began {
            from: self.now(),
            slept: sim_scheduler::thread::slept(),
        }
    }

    /// An operation of `client` that [`Self::begin`] saw begin ended now: a read (GET, SCAN) or
    /// not, and whether it failed with an error of [`gives_up`]'s kind.
    pub fn ended(
        &self,
        client: &str,
        what: impl FnOnce() -> String,
        began: Began,
        read: bool,
        gave_up: bool,
    ) {
        let to = self.now();
        let slept = sim_scheduler::thread::slept().saturating_sub(began.slept);
        let from = began.from;
        if gave_up || slept > Duration::ZERO || to.saturating_sub(from) > BOUND / 100 {
            self.ops
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Timed {
                    client: client.to_string(),
                    what: what(),
                    from,
                    to,
                    gave_up,
                    read,
                    slept,
                });
        }
    }

    /// Checks every operation recorded; the first one nothing explains.
    pub fn check(&self) -> Result<LivenessStats, String> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let ops = self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone();
        check(&holds, &ops)
    }
}

/// When an operation began, for [`Liveness::ended`].
#[derive(Debug, Clone, Copy)]
pub struct Began {
    from: Duration,
    /// The virtual time its thread had asked to sleep by then.
    slept: Duration,
}

/// How much of `[from, to]` the union of `holds` covers.
fn covered<'h>(
    holds: impl IntoIterator<Item = &'h Hold>,
    from: Duration,
    to: Duration,
) -> Duration {
    let mut spans: Vec<(Duration, Duration)> = holds
        .into_iter()
        .filter(|h| h.to > from && h.from < to)
        .map(|h| (h.from.max(from), h.to.min(to)))
        .collect();
    spans.sort();
    let mut total = Duration::ZERO;
    let mut end = from;
    for (a, b) in spans {
        let a = a.max(end);
        if b > a {
            total += b - a;
            end = b;
        }
    }
    total
}

fn check(holds: &[Hold], ops: &[Timed]) -> Result<LivenessStats, String> {
    let mut stats = LivenessStats::default();
    for op in ops {
        let took = op.to.saturating_sub(op.from);
        if op.read && op.slept > Duration::ZERO {
            stats.reads_waited += 1;
            // Only a compute node's fault itself (its batch stalled, landing late), not what
            // the memory node repairs after it: a reader waits for nothing of that.
            let raw: Vec<Hold> = holds
                .iter()
                .filter(|h| !h.worker)
                .map(|h| Hold {
                    to: h.until,
                    ..h.clone()
                })
                .collect();
            let by_compute = covered(&raw, op.from, op.to);
            if by_compute * 2 < op.slept {
                let near: Vec<String> = raw
                    .iter()
                    .filter(|h| h.from < op.to && h.until > op.from)
                    .map(|h| format!("{:?}..{:?}", h.from, h.until))
                    .collect();
                return Err(format!(
                    "{} {} waited {:?} for the store (of {took:?}, from {:?}), no compute node's fault holding it for half of that (compute holds meeting it: {near:?}): a read never waits for a memory node's worker",
                    op.client, op.what, op.slept, op.from,
                ));
            }
        }
        let held = covered(holds, op.from, op.to) * 2 >= took;
        if !op.gave_up && took <= BOUND {
            if !held {
                stats.slowest_unheld_us = stats.slowest_unheld_us.max(took.as_micros() as u64);
            }
            continue;
        }
        if held {
            if op.gave_up {
                stats.gave_up_held += 1;
            } else {
                stats.slow_held += 1;
            }
            continue;
        }
        return Err(format!(
            "{} {} {} after {:?} of virtual time (from {:?}), no fault holding the store for half of it",
            op.client,
            op.what,
            if op.gave_up {
                "gave up"
            } else {
                "completed only"
            },
            took,
            op.from,
        ));
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn op(from: u64, to: u64, gave_up: bool) -> Timed {
        Timed {
            client: "c".into(),
            what: "get(1)".into(),
            from: ms(from),
            to: ms(to),
            gave_up,
            read: false,
            slept: Duration::ZERO,
        }
    }

    fn hold(from: u64, to: u64, worker: bool) -> Hold {
        Hold {
            from: ms(from),
            until: ms(to),
            to: ms(to),
            worker,
        }
    }

    #[test]
    fn an_operation_that_gives_up_or_crawls_needs_faults_holding_half_its_time() {
        // Nothing held: giving up fails, however quick; so does a crawl past the bound.
        assert!(check(&[], &[op(10, 12, true)]).is_err());
        assert!(check(&[], &[op(10, 10 + 2 * BOUND.as_millis() as u64, false)]).is_err());
        assert!(check(&[], &[op(10, 20, false)]).is_ok());
        // Two overlapping holds count once: 10..40 of 0..100 is not half.
        let holds = [hold(10, 30, false), hold(20, 40, true)];
        assert_eq!(covered(&holds, ms(0), ms(100)), ms(30));
        assert!(check(&holds, &[op(0, 100, true)]).is_err());
        // Held for most of its time: accepted, and counted.
        assert_eq!(
            check(&holds, &[op(12, 45, true)]).map(|s| s.gave_up_held),
            Ok(1)
        );
    }

    #[test]
    fn a_read_that_waits_needs_a_compute_node_holding_it_never_the_worker_alone() {
        let read = |from, to| Timed {
            read: true,
            slept: ms(1),
            ..op(from, to, false)
        };
        // A worker paused for all of it does not excuse a read that backed off.
        assert!(check(&[hold(0, 50, true)], &[read(10, 20)]).is_err());
        assert!(check(&[hold(0, 50, false)], &[read(10, 20)]).is_ok());
        // A write may wait for the worker (its record frozen by a retraining).
        let write = Timed {
            slept: ms(5),
            ..op(10, 20, false)
        };
        assert!(check(&[hold(0, 50, true)], &[write]).is_ok());
        // A read that was only scheduled late (it slept nothing) is judged by the bound alone.
        assert!(check(&[], &[op(10, 20, false)]).is_ok());
    }

    #[test]
    fn a_hold_since_an_earlier_moment_starts_there() {
        let report = sim_scheduler::run(
            sim_scheduler::Config {
                seed: 1,
                ..sim_scheduler::Config::default()
            },
            || {
                let liveness = Liveness::new();
                sim_scheduler::thread::sleep(ms(10));
                sim_scheduler::thread::sleep(ms(5));
                // Seen 5 ms after the batch arrived: held from the arrival.
                liveness.hold_since(ms(5), ms(5) + ms(2));
                let holds = liveness.holds.lock().unwrap_or_else(|e| e.into_inner());
                if (holds[0].from, holds[0].until) != (ms(10), ms(17)) {
                    sim_scheduler::fail(&format!("{:?}", holds[0]));
                }
            },
        );
        assert_eq!(report.outcome, sim_scheduler::Outcome::Finished);
    }
}
