//! Running the client threads, sampling the run, and assembling the report.
//!
//! The run has up to two stretches: a warm-up (`--warmup`: a count of operations or seconds),
//! whose operations run but are recorded nowhere, then the measured operations. Every figure of
//! the report, the phases and the throughput series (`--report-interval`) cover the measured
//! stretch only; its clock starts when the warm-up ends.
//!
//! A measured load phase (`--load-phase`) comes before both (`load.rs`, run first by
//! `super::run_workload`): the client threads insert the keys the bulk load left out, each once,
//! and its figures are reported apart (`load`).

use crate::error::{CliError, failed};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdma_transport::Stats;
use sim_transport::cost_model::NetworkProfile;

use super::latency::{OP_NAMES, latency_histogram};
use super::thread::{Shared, run_thread};
use super::{BenchArgs, RetrainProgress, progress};
use crate::checks::Warmup;
use crate::index::{BenchClient, BenchIndex};
use crate::report::{
    Interval, Latency, Modeled, OpReport, Profile, Report, RetrainerSummary, Sample,
};
use crate::workload::{Chooser, Mix, Workload};

/// The embedded retrainers' threads.
pub(super) type Retrainers = Vec<std::thread::JoinHandle<Result<RetrainerSummary, CliError>>>;

/// The embedded memory nodes' retrainers beside a run: their threads, the flag that stops them
/// when the run ends, and the counters they publish as they go (none for an attached pool, a
/// verbs run or a baseline).
#[derive(Default)]
pub(super) struct Retraining {
    pub threads: Retrainers,
    pub stop: Arc<AtomicBool>,
    pub progress: Vec<Arc<RetrainProgress>>,
}

/// How often the run is sampled (`--report-interval` is at least this).
const SAMPLE_EVERY: Duration = crate::checks::SAMPLE_EVERY;

/// The keys of a run.
pub(super) struct RunKeys {
    /// The keys the run's operations start from (after the load phase, if there is one).
    pub loaded: Vec<u64>,
    /// Keys for the run's inserts, in insertion order.
    pub to_insert: Vec<u64>,
    /// With `--load-phase`: what was bulk-loaded, and the keys the load phase inserts.
    pub load: Option<crate::keys::LoadPlan>,
}

/// Runs the workload on `store` (any index) from `loaded`, inserting from `to_insert`, and
/// assembles the report (the load phase, if there is one, has run: `super::run_workload`).
pub(super) fn run_measured<I: BenchIndex>(
    args: &BenchArgs,
    ops: u64,
    mix: &Mix,
    store: Arc<I>,
    loaded: Vec<u64>,
    to_insert: Vec<u64>,
    retraining: Retraining,
) -> Result<Report, CliError> {
    let retrain_progress = &retraining.progress[..];
    let chooser = Chooser::with_params(
        mix.request_dist,
        loaded.len() as u64,
        args.theta,
        mix.dist_params,
    )?;
    let timed = args.length.duration.is_some();
    let duration_ns = args.length.duration.map_or(0, |s| (s * 1e9) as u64);
    let shared = Arc::new(Shared {
        chooser,
        mix: mix.clone(),
        loaded,
        to_insert,
        claimed: AtomicU64::new(0),
        done: AtomicU64::new(0),
        warm_done: AtomicU64::new(0),
        measuring: AtomicBool::new(args.length.warmup.is_none()),
        deadline_ns: AtomicU64::new(if args.length.warmup.is_none() {
            duration_ns
        } else {
            u64::MAX
        }),
        started: Instant::now(),
        per_thread: ops.div_ceil(args.threads),
        timed,
        // A churn run deletes as much as it inserts (a workload file, which overrides
        // --workload, has no deletes).
        churn: args.workload == Workload::Churn && args.workload_file.is_none(),
        threads: args.threads,
        // Ctrl-C during the load phase: the run does not start.
        stop: AtomicBool::new(crate::interrupt::interrupted()),
        pace_ns: args
            .length
            .target_rate
            .map(|rate| args.threads as f64 * 1e9 / rate),
        per_interval: args.report_interval.is_some(),
        interval_seq: AtomicU64::new(0),
        load_only: false,
    });
    let measured = run_threads(args, &store, &shared, retrain_progress)?;
    retraining.stop.store(true, Ordering::Release);
    let mut retrainer: Option<RetrainerSummary> = None;
    for r in retraining.threads {
        let summary = r.join().map_err(|_| failed!("the retrainer panicked"))??;
        retrainer = Some(match retrainer {
            Some(total) => total.plus(&summary),
            None => summary,
        });
    }

    assemble(args, &*store, &shared, measured, retrainer)
}

/// Every thread's latencies, verbs and lock-table verbs of operation type `kind`, together.
pub(super) fn merged(
    results: &[super::thread::ThreadResult],
    kind: usize,
) -> Result<(hdrhistogram::Histogram<u64>, Stats, u64), CliError> {
    let mut hist = latency_histogram()?;
    let (mut net, mut lock_verbs) = (Stats::default(), 0);
    for r in results {
        hist.add(&r.latency[kind])?;
        net += r.net[kind];
        lock_verbs += r.lock_verbs[kind];
    }
    Ok((hist, net, lock_verbs))
}

/// How many of `keys` a GET on `store` does not find (`--check-inserts`).
pub(super) fn missing<I: BenchIndex>(store: &I, keys: &[u64]) -> Result<u64, CliError> {
    let mut client = store.client()?;
    let mut missing = 0;
    for &k in keys {
        if client.get(k)?.is_none() {
            missing += 1;
        }
    }
    Ok(missing)
}

/// One operation type's figures, from what [`merged`] gathered.
pub(super) fn op_report(
    hist: &hdrhistogram::Histogram<u64>,
    net: &Stats,
    lock_verbs: u64,
) -> OpReport {
    let count = hist.len();
    let per = |v: u64| v as f64 / count.max(1) as f64;
    OpReport {
        count,
        rtts_per_op: per(net.batches),
        verbs_per_op: per(net.verbs()),
        bytes_per_op: per(net.bytes_read + net.bytes_written),
        lock_verbs_per_op: per(lock_verbs),
        latency_us: Latency::of(hist),
    }
}

/// The clients the cost model counts: `--model-clients`, or every operation in flight.
pub(super) fn modeled_clients(args: &BenchArgs) -> u64 {
    args.model_clients
        .unwrap_or(args.threads.saturating_mul(args.inflight))
}

/// The cost model's network, from the `--model-*` flags.
pub(super) fn network_profile(args: &BenchArgs) -> NetworkProfile {
    NetworkProfile {
        rtt_us: args.model_rtt_us,
        link_gbps: args.model_link_gbps,
        nic_verbs_per_s: args.model_nic_verbs,
        nic_bytes_per_s: args.model_nic_bytes,
    }
}

/// What the client threads measured.
pub(super) struct Measured {
    pub results: Vec<super::thread::ThreadResult>,
    phases: crate::report::Phases,
    intervals: Vec<Interval>,
    warmup_ops: u64,
    /// Seconds from the end of the warm-up to the last thread's last operation.
    pub wall: f64,
}

/// Runs the client threads through the warm-up and the measured stretch, sampling as they go.
pub(super) fn run_threads<I: BenchIndex>(
    args: &BenchArgs,
    store: &Arc<I>,
    shared: &Arc<Shared>,
    retrain_progress: &[Arc<RetrainProgress>],
) -> Result<Measured, CliError> {
    let bar = progress(
        args.quiet,
        (!shared.timed).then_some(if shared.load_only {
            shared.to_insert.len() as u64
        } else {
            shared.per_thread.saturating_mul(args.threads)
        }),
        if shared.load_only {
            "load phase"
        } else if args.length.warmup.is_some() {
            "warming up"
        } else {
            "running"
        },
    );
    let handles: Vec<_> = (0..args.threads)
        .map(|t| {
            let (store, shared) = (Arc::clone(store), Arc::clone(shared));
            let seed = args
                .seed
                .wrapping_add(t)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let inflight = args.inflight;
            std::thread::spawn(move || run_thread(&*store, &shared, t, seed, inflight))
        })
        .collect();

    let retrains_now = || -> (u64, u64) {
        (
            retrain_progress
                .iter()
                .map(|p| p.retrains.load(Ordering::Acquire))
                .sum(),
            retrain_progress
                .iter()
                .map(|p| p.nanos.load(Ordering::Acquire))
                .sum(),
        )
    };
    let mut measure_start = args.length.warmup.is_none().then_some(shared.started);
    let mut samples: Vec<Sample> = Vec::new();
    if measure_start.is_some() {
        let (r, n) = retrains_now();
        samples.push((0.0, 0, r, n));
    }
    let mut intervals: Vec<Interval> = Vec::new();
    // The last sample taken while every thread still ran: the phases are measured up to it, so a
    // thread that finished its share early does not show as a slowdown.
    let mut all_ran_until = None;
    while handles.iter().any(|h| !h.is_finished()) {
        std::thread::sleep(SAMPLE_EVERY);
        if crate::interrupt::interrupted() && !shared.stop.load(Ordering::Acquire) {
            // Ctrl-C: the threads stop after the operations under way; the report covers what
            // they did until now.
            shared.stop.store(true, Ordering::Release);
        }
        let Some(start) = measure_start else {
            let over = match args.length.warmup {
                Some(Warmup::Seconds(s)) => shared.started.elapsed().as_secs_f64() >= s,
                Some(Warmup::Ops(n)) => shared.warm_done.load(Ordering::Relaxed) >= n,
                None => true,
            };
            if over {
                let now = Instant::now();
                let since = now.saturating_duration_since(shared.started).as_nanos() as u64;
                shared.deadline_ns.store(
                    since.saturating_add(args.length.duration.map_or(0, |s| (s * 1e9) as u64)),
                    Ordering::Release,
                );
                shared.measuring.store(true, Ordering::Release);
                measure_start = Some(now);
                let (r, n) = retrains_now();
                samples.push((0.0, 0, r, n));
                bar.set_message("running");
                bar.reset_elapsed();
            }
            continue;
        };
        let done = shared.done.load(Ordering::Relaxed);
        bar.set_position(done);
        let (r, n) = retrains_now();
        let sample = (start.elapsed().as_secs_f64(), done, r, n);
        samples.push(sample);
        if handles.iter().any(|h| h.is_finished()) && all_ran_until.is_none() {
            all_ran_until = Some(samples.len() - 1);
        }
        if let Some(every) = args.report_interval {
            let from = intervals.last().map_or(samples[0], |i| i.end);
            if sample.0 - from.0 >= every {
                let interval = Interval::between(from, sample);
                bar.suspend(|| eprintln!("{}", interval.line()));
                intervals.push(interval);
                // Operations completing from now on count in the next interval.
                shared.interval_seq.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    let mut results = Vec::new();
    for h in handles {
        results.push(
            h.join()
                .map_err(|_| failed!("a benchmark thread panicked"))??,
        );
    }
    bar.finish_and_clear();
    let start = measure_start.unwrap_or(shared.started);
    let (r, n) = retrains_now();
    samples.push((
        start.elapsed().as_secs_f64(),
        shared.done.load(Ordering::Relaxed),
        r,
        n,
    ));
    if let Some(every) = args.report_interval {
        // The last, shorter interval (if it holds anything).
        let from = intervals.last().map_or(samples[0], |i| i.end);
        let last = *samples.last().unwrap_or(&from);
        let next = intervals.len() as u64;
        let latencies_in_it = results
            .iter()
            .any(|r| r.interval_latencies.iter().any(|f| f.0 == next));
        if last.1 > from.1 || latencies_in_it {
            let interval = Interval::between(from, last);
            if !args.quiet || interval.seconds >= every / 2.0 {
                eprintln!("{}", interval.line());
            }
            intervals.push(interval);
        }
    }
    // Each interval's latencies, from what every thread filed.
    let filed = results
        .iter_mut()
        .flat_map(|r| std::mem::take(&mut r.interval_latencies));
    let latencies = super::intervals::merge(filed, intervals.len())?;
    for (interval, latency) in intervals.iter_mut().zip(latencies) {
        interval.latency_us = latency.all;
        interval.histograms = latency.by_type;
    }
    let window = &samples[..=all_ran_until.unwrap_or(samples.len() - 1)];
    let phases = crate::report::Phases {
        first_tenth: phase(window, 0.0, 0.1),
        last_tenth: phase(window, 0.9, 1.0),
    };
    let warmup_ops = shared.warm_done.load(Ordering::Relaxed);
    // From the end of the warm-up to the last thread's last operation (not to when the sampling
    // loop noticed).
    let wall = results
        .iter()
        .map(|r| r.finished.saturating_duration_since(start))
        .max()
        .unwrap_or_default()
        .as_secs_f64();

    Ok(Measured {
        results,
        phases,
        intervals,
        warmup_ops,
        wall,
    })
}

/// The report of a run: its measurements, what the store holds at the end (a verify walk), and
/// the cost model's figures.
fn assemble<I: BenchIndex>(
    args: &BenchArgs,
    store: &I,
    shared: &Shared,
    measured: Measured,
    retrainer: Option<RetrainerSummary>,
) -> Result<Report, CliError> {
    let Measured {
        results,
        phases,
        intervals,
        warmup_ops,
        wall,
    } = measured;
    let retrains = retrainer.as_ref().map(|r| r.retrains);
    let loaded = &shared.loaded;
    let mix = &shared.mix;

    // Inserted keys must all read back.
    let inserted: Vec<u64> = results
        .iter()
        .flat_map(|r| r.inserted.iter().chain(&r.owned).copied())
        .collect();
    let inserted_count: u64 = results.iter().map(|r| r.inserted_count).sum();
    let reconnects: u64 = results.iter().map(|r| r.reconnects).sum();
    let inserts_missing = if args.check_inserts {
        Some(missing(store, &inserted)?)
    } else {
        None
    };

    // What the compute node caches once the run has warmed it (the B+-tree fills its cache of
    // internal pages as it goes; ROLEX caches every record from the start).
    let cache_bytes = store.cache_bytes();

    // Structure, from verify walks (walked again while they find problems: other processes may
    // be writing an attached pool; `command` turns the verdict into the exit code). A memnode
    // serves the pools of a verbs run, and an attached run's whose lock it holds now.
    let served = args.transport == super::CliTransport::Verbs
        || args
            .attach
            .iter()
            .any(|pool| crate::pools::served(pool).unwrap_or(false));
    let structure = store.structure(served)?;
    let (leaves, synonyms, keys_after, models) = (
        structure.leaves,
        structure.synonym_leaves,
        structure.keys,
        structure.models,
    );
    let verify_problems = match &structure.verdict {
        crate::verdict::Verdict::Problems { listed, .. } => listed.clone(),
        _ => Vec::new(),
    };

    // Assemble.
    let profile = network_profile(args);
    let mut total_ops = 0u64;
    let mut total_net = Stats::default();
    let mut ops_report = BTreeMap::new();
    let mut modeled_by_op = BTreeMap::new();
    let mut histograms = Vec::new();
    for (kind, name) in OP_NAMES.iter().enumerate() {
        let (hist, net, lock_verbs) = merged(&results, kind)?;
        let count = hist.len();
        if count == 0 {
            continue;
        }
        total_ops += count;
        total_net += net;
        ops_report.insert(name.to_string(), op_report(&hist, &net, lock_verbs));
        modeled_by_op.insert(name.to_string(), profile.latency_us(&net, count));
        histograms.push((*name, hist));
    }

    let clients = modeled_clients(args);
    let nodes = store.memory_nodes();
    let mut config = serde_json::to_value(args)?;
    if let Some(obj) = config.as_object_mut() {
        obj.insert("keys_loaded".into(), serde_json::json!(loaded.len()));
        obj.insert("mix".into(), serde_json::to_value(mix)?);
        obj.insert("ops_run".into(), serde_json::json!(total_ops));
        // The workload that ran, where a file or --insert-ratio replaced --workload's.
        if let Some(path) = &args.workload_file {
            obj.insert(
                "workload".into(),
                serde_json::json!(format!("file {}", path.display())),
            );
        } else if let Some(ratio) = args.insert_ratio {
            obj.insert(
                "workload".into(),
                serde_json::json!(format!("insert-ratio {ratio}")),
            );
        }
    }
    // Leaves allocated (whole leaves, used or free-listed) plus model bytes in use, per key held.
    let pool_bytes_per_key = match structure.pool_bytes {
        Some(bytes) => Some(bytes as f64 / keys_after.max(1) as f64),
        None => retrainer.as_ref().map(|r| {
            (r.leaves_allocated * leaf_store::leaf_bytes(args.delta) + r.model_bytes_used) as f64
                / keys_after.max(1) as f64
        }),
    };
    Ok(Report {
        stamp: crate::report::Stamp::now(),
        index: args.index.name(),
        config,
        wall_seconds: wall,
        throughput_ops_s: total_ops as f64 / wall.max(1e-9),
        ops: ops_report,
        cache_bytes,
        cache_bytes_per_key: cache_bytes as f64 / loaded.len().max(1) as f64,
        cache_budget_bytes: args.cache_budget.map(|b| b.bytes(loaded.len() as u64)),
        models,
        leaves,
        synonym_leaves: synonyms,
        keys_after,
        retrains,
        retrainer,
        verify_clean: structure.verdict == crate::verdict::Verdict::Clean,
        verify: structure.verdict.name(),
        verify_walks: structure.walks,
        verify_problems,
        verdict: structure.verdict.clone(),
        unserved_pools: Vec::new(),
        inserted: inserted_count,
        reconnects,
        open_seconds: None,
        inserts_missing,
        load: None,
        phases,
        warmup_ops,
        target_rate: args.length.target_rate,
        intervals,
        interrupted: shared.stop.load(Ordering::Acquire),
        latency_histograms: histograms,
        pool_bytes_per_key,
        values: structure
            .values
            .as_ref()
            .map(|v| crate::report::ValuesReport {
                live_bytes: v.live_bytes,
                blocks: v.blocks,
                block_bytes: v.block_bytes,
                allocated_bytes: v.claimed_bytes,
                value_bytes_per_op: results.iter().map(|r| r.value_bytes).sum::<u64>() as f64
                    / total_ops.max(1) as f64,
            }),
        modeled: Modeled {
            profile: Profile {
                rtt_us: profile.rtt_us,
                link_gbps: profile.link_gbps,
                nic_verbs_per_s: profile.nic_verbs_per_s,
                nic_bytes_per_s: profile.nic_bytes_per_s,
            },
            clients,
            latency_us: profile.latency_us(&total_net, total_ops),
            latency_us_by_op: modeled_by_op,
            throughput_ops_s: profile.throughput_ops_s(&total_net, total_ops, clients, nodes),
        },
    })
}

/// The figures of the stretch of the run between the samples where `from` and `to` (fractions of
/// the operations) were reached.
fn phase(samples: &[Sample], from: f64, to: f64) -> Option<crate::report::Phase> {
    let total = samples.last()?.1 as f64;
    let at = |fraction: f64| {
        samples
            .iter()
            .find(|s| s.1 as f64 >= fraction * total)
            .copied()
    };
    let (start, end) = (at(from)?, at(to)?);
    let seconds = end.0 - start.0;
    if seconds <= 0.0 {
        return None;
    }
    let retrains = end.2.saturating_sub(start.2);
    Some(crate::report::Phase {
        seconds,
        ops_per_s: (end.1 - start.1) as f64 / seconds,
        retrainings_per_s: retrains as f64 / seconds,
        us_per_retraining: (retrains > 0)
            .then(|| end.3.saturating_sub(start.3) as f64 / retrains as f64 / 1e3),
    })
}
