//! Seeded whole-store simulation: the store's compute nodes, memory node and faults run under
//! `sim_scheduler`, which picks from a seed which thread's next verb, lock or atomic goes next,
//! with virtual time; the history every run leaves is checked for linearizability, and the
//! store for `verify` and leaf conservation (see `world` for what a run is).
//!
//! A failing seed replays: `cargo run --release -p store-sim --bin simulate -- --seed S`.

pub mod history;
pub mod oracle;
mod world;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sim_scheduler::{Config, Outcome, Strategy};

pub use world::{Faults, LEASE, Options, Summary};

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
    }
}
