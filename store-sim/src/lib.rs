//! Seeded whole-store simulation: the store's compute nodes, memory node and faults run under
//! `sim_scheduler`, which picks from a seed which thread's next verb, lock or atomic goes next,
//! with virtual time; the history every run leaves is checked for linearizability, and the
//! store for `verify` and leaf conservation (see `world` for what a run is).
//!
//! A failing seed replays: `cargo run --release -p store-sim --bin simulate -- --seed S`.

mod fault_mix;
pub mod history;
mod images;
mod ledger;
pub mod liveness;
pub mod oracle;
mod side_draw;
mod times;
mod world;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sim_scheduler::{Config, Outcome, Strategy};

pub use ledger::{Account, Ledger};
pub use times::LEASE;
pub use world::{Faults, MAX_IN_FLIGHT, Options, Summary};

use std::collections::BTreeMap;

/// How a seed is scheduled: even seeds by a random walk, odd ones by PCT of depth 3.
pub fn strategy_for(seed: u64) -> Strategy {
    if seed.is_multiple_of(2) {
        Strategy::Random
    } else {
        Strategy::Pct {
            depth: 3,
            steps: 40_000,
        }
    }
}

/// What one seed did.
#[derive(Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// How the run ended (`Finished` is a pass).
    pub outcome: Outcome,
    /// Sync points.
    pub steps: u64,
    /// Sync points at which another thread went on (each an OS thread switch).
    pub switches: u64,
    /// Virtual time.
    pub virtual_time: Duration,
    /// Wall-clock time.
    pub wall: Duration,
    /// The digest of the schedule (equal for a replay).
    pub trace: u64,
    /// What the run left.
    pub summary: Summary,
    /// The named steps at which a planned pause stopped a process, in order.
    pub paused_at: Vec<&'static str>,
    /// Every named step the run's threads passed, with how often.
    pub steps_met: BTreeMap<&'static str, u64>,
}

impl SeedReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Finished
    }
}

/// Runs one seed.
pub fn run_seed(seed: u64, options: &Options) -> SeedReport {
    let summary = Arc::new(Mutex::new(Summary::default()));
    let started = Instant::now();
    let report = {
        let summary = Arc::clone(&summary);
        let options = options.clone();
        sim_scheduler::run(
            Config {
                seed,
                strategy: strategy_for(seed),
                step_cost: Duration::from_micros(2),
                max_steps: 3_000_000,
                stall_limit: Duration::from_secs(60),
            },
            move || world::main(&options, &summary),
        )
    };
    let summary = std::mem::take(&mut *summary.lock().unwrap_or_else(|e| e.into_inner()));
    SeedReport {
        seed,
        outcome: report.outcome,
        steps: report.steps,
        switches: report.switches,
        virtual_time: report.virtual_time,
        wall: started.elapsed(),
        trace: report.trace,
        summary,
        paused_at: report.paused_at,
        steps_met: report.steps_met,
    }
}

/// What a campaign of seeds reached: how often each named step was met and was a stop point,
/// each fault kind injected, each error returned, and what the liveness oracle saw — so a blind
/// spot (a step never met, a fault never injected) is seen before a bug hides in it.
#[derive(Debug, Default)]
pub struct Coverage {
    /// Seeds run.
    pub seeds: u64,
    /// Named steps met (every pass), summed over the seeds.
    pub steps_met: BTreeMap<&'static str, u64>,
    /// Named steps at which a planned pause stopped a process.
    pub steps_paused: BTreeMap<&'static str, u64>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Operations that failed, by the error's kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// The longest operation no fault held up, in virtual microseconds.
    pub slowest_unheld_us: u64,
    /// Operations that gave up waiting, or took longer than the bound, under faults (accepted).
    pub held: u64,
    /// Reads that backed off under compute nodes' faults (accepted).
    pub reads_waited: u64,
    /// What the ledgers of leaves and value blocks accounted for, summed.
    pub ledger: Ledger,
    /// Seeds by the operations each client thread kept in flight.
    pub inflight: BTreeMap<usize, u64>,
    /// Seeds whose faults came from a subset of the kinds (swarm runs).
    pub swarm_runs: u64,
}

impl Coverage {
    /// Adds one seed's report.
    pub fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        for (&step, &n) in &report.steps_met {
            *self.steps_met.entry(step).or_default() += n;
        }
        for &step in &report.paused_at {
            *self.steps_paused.entry(step).or_default() += 1;
        }
        for (kind, n) in report.summary.faults.by_kind() {
            *self.faults.entry(kind).or_default() += n;
        }
        for (&kind, &n) in &report.summary.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        let l = &report.summary.liveness;
        self.slowest_unheld_us = self.slowest_unheld_us.max(l.slowest_unheld_us);
        self.held += l.gave_up_held + l.slow_held;
        self.reads_waited += l.reads_waited;
        self.ledger.leaves.add(&report.summary.ledger.leaves);
        self.ledger.blocks.add(&report.summary.ledger.blocks);
        *self.inflight.entry(report.summary.inflight).or_default() += 1;
        self.swarm_runs += u64::from(report.summary.swarm);
    }
}

impl std::fmt::Display for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "coverage over {} seeds:", self.seeds)?;
        writeln!(f, "  named step                          met   stopped at")?;
        let mut names: Vec<&&str> = self.steps_met.keys().collect();
        names.extend(self.steps_paused.keys());
        names.sort();
        names.dedup();
        for name in names {
            writeln!(
                f,
                "  {:<32} {:>7} {:>10}",
                name,
                self.steps_met.get(*name).copied().unwrap_or(0),
                self.steps_paused.get(*name).copied().unwrap_or(0)
            )?;
        }
        let list = |m: &BTreeMap<&str, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "  faults injected: {}", list(&self.faults))?;
        writeln!(f, "  operations failed: {}", list(&self.errors))?;
        writeln!(
            f,
            "  seeds by operations in flight per client thread: {}",
            self.inflight
                .iter()
                .map(|(k, n)| format!("K = {k}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        writeln!(
            f,
            "  seeds with faults of a subset of the kinds (swarm runs): {} of {}",
            self.swarm_runs, self.seeds
        )?;
        let (l, b) = (&self.ledger.leaves, &self.ledger.blocks);
        writeln!(
            f,
            "  leaves the orphan sweeps reclaimed: {} ({} forgotten by stores, {} taken from their holders by faults, {} handed to nobody by allocations whose completion was lost)",
            l.reclaimed, l.forgotten, l.taken_by_faults, l.lost_allocations
        )?;
        writeln!(
            f,
            "  value blocks freed from departed members' chunks: {} ({} forgotten by stores, {} taken from their holders by faults, {} named by value free words not yet settled)",
            b.reclaimed, b.forgotten, b.taken_by_faults, b.in_free_words
        )?;
        write!(
            f,
            "  liveness: slowest operation no fault held up {} µs (bound {} ms); {} slow or given up under faults; {} reads backed off under compute nodes' faults",
            self.slowest_unheld_us,
            liveness::BOUND.as_millis(),
            self.held,
            self.reads_waited
        )
    }
}
