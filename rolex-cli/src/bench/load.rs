//! The measured load phase (`--load-phase`, YCSB's `load`): before the run, the client threads
//! insert the keys the bulk load left out (one in 100 was bulk-loaded: no index can start empty),
//! each key once, by whichever thread takes it next; its figures are reported apart (`load`).
//!
//! It runs through the run's own thread loop ([`super::thread`], with [`Shared::load_only`]) and
//! sampler ([`run_threads`]), with no warm-up, pacing or intervals: those are the run's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::measure::{merged, missing, modeled_clients, network_profile, op_report, run_threads};
use super::thread::Shared;
use super::{BenchArgs, RetrainProgress};
use crate::error::{CliError, failed};
use crate::index::BenchIndex;
use crate::workload::{Chooser, Mix};

/// The measured load phase: the client threads insert `plan.inserts` (each key once, by whichever
/// thread takes it next) into the store bulk-loaded with `plan.bulk`. No warm-up, no pacing and
/// no intervals: those are the run's.
pub(super) fn load_phase<I: BenchIndex>(
    args: &BenchArgs,
    store: &Arc<I>,
    plan: crate::keys::LoadPlan,
    retrain_progress: &[Arc<RetrainProgress>],
) -> Result<crate::report::LoadReport, CliError> {
    use crate::workload::{DistParams, RequestDist};
    let crate::keys::LoadPlan { bulk, inserts } = plan;
    let (bulk_loaded, to_load) = (bulk.len() as u64, inserts.len() as u64);
    let shared = Arc::new(Shared {
        // Unused: every operation is the next key's insert.
        chooser: Chooser::with_params(
            RequestDist::Uniform,
            bulk_loaded,
            args.theta,
            DistParams::default(),
        )?,
        mix: Mix {
            read: 0.0,
            update: 0.0,
            insert: 1.0,
            scan: 0.0,
            read_modify_write: 0.0,
            max_scan_length: 1,
            request_dist: RequestDist::Uniform,
            dist_params: DistParams::default(),
        },
        loaded: bulk,
        to_insert: inserts,
        claimed: AtomicU64::new(0),
        done: AtomicU64::new(0),
        warm_done: AtomicU64::new(0),
        measuring: AtomicBool::new(true),
        deadline_ns: AtomicU64::new(u64::MAX),
        started: Instant::now(),
        per_thread: u64::MAX,
        timed: false,
        churn: false,
        threads: args.threads,
        stop: AtomicBool::new(false),
        pace_ns: None,
        per_interval: false,
        interval_seq: AtomicU64::new(0),
        load_only: true,
    });
    let phase_args = BenchArgs {
        length: super::args::RunLength::default(),
        report_interval: None,
        ..args.clone()
    };
    let measured = run_threads(&phase_args, store, &shared, retrain_progress)?;
    let interrupted = shared.stop.load(Ordering::Acquire);
    let (hist, net, lock_verbs) = merged(&measured.results, INSERT)?;
    let inserted: u64 = measured.results.iter().map(|r| r.inserted_count).sum();
    if !interrupted && inserted != to_load {
        return Err(failed!(
            "the load phase inserted {inserted} of its {to_load} keys: the others were found present already"
        ));
    }
    let inserts_missing = if args.check_inserts {
        let loaded: Vec<u64> = measured
            .results
            .iter()
            .flat_map(|r| r.inserted.iter().copied())
            .collect();
        Some(missing(&**store, &loaded)?)
    } else {
        None
    };
    let count = hist.len();
    let clients = modeled_clients(args);
    Ok(crate::report::LoadReport {
        bulk_loaded,
        inserted,
        wall_seconds: measured.wall,
        throughput_ops_s: count as f64 / measured.wall.max(1e-9),
        insert: op_report(&hist, &net, lock_verbs),
        modeled_throughput_ops_s: network_profile(args).throughput_ops_s(
            &net,
            count,
            clients,
            store.memory_nodes(),
        ),
        inserts_missing,
        interrupted,
    })
}

/// Where inserts are filed in [`OP_NAMES`](super::latency::OP_NAMES).
const INSERT: usize = 2;
