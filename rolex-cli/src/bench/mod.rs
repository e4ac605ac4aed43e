//! `rolex bench`: a workload against an embedded memory node or an attached pool file.
//!
//! `args.rs` holds what it takes; this file sets the run up (keys, pools, bulk load, retrainers,
//! attaching, verbs) and prints the report; `bplus.rs` sets up the B+-tree baseline;
//! `measure.rs` runs the threads, samples the run and assembles the report; `thread.rs` is one
//! client thread's loop.

mod args;
mod bplus;
mod intervals;
mod latency;
mod load;
mod measure;
mod thread;

use crate::error::{CliError, failed, input};
pub use args::{BenchArgs, CliCacheMode, CliTransport, RunLength};
use bplus::run_bplus;
pub(crate) use latency::latency_histogram;
use measure::{Retraining, RunKeys, run_measured};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use index_core::{CacheMode, Store, StoreConfig};
use indicatif::{ProgressBar, ProgressStyle};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdma_transport::Transport;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimConfig, SimTransport};

use crate::index::IndexKind;
use crate::keys;
use crate::report::{Report, RetrainerSummary};
use crate::workload::Mix;

fn progress(quiet: bool, len: Option<u64>, what: &str) -> ProgressBar {
    let bar = match (quiet, len) {
        (true, _) => return ProgressBar::hidden(),
        (false, Some(n)) => ProgressBar::new(n),
        (false, None) => ProgressBar::new_spinner(),
    };
    // The rate in whole units a second (indicatif's own `per_sec` shows four decimals).
    let style = ProgressStyle::with_template(
        "{spinner} {msg:<12} [{elapsed_precise}] {wide_bar} {pos}/{len} ({rate})",
    )
    .map(|style| {
        style.with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        )
    })
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

/// Runs the workload on `store` (any index), after its load phase if there is one (`load.rs`),
/// and assembles the report (`measure.rs`), the load phase's figures in it apart (`load`).
fn run_workload<I: crate::index::BenchIndex>(
    args: &BenchArgs,
    ops: u64,
    mix: &crate::workload::Mix,
    store: Arc<I>,
    keys: RunKeys,
    retraining: Retraining,
) -> Result<crate::report::Report, CliError> {
    let RunKeys {
        loaded,
        to_insert,
        load,
    } = keys;
    if loaded.is_empty() {
        return Err("the store holds no keys to run a workload on".into());
    }
    let load = match load {
        Some(plan) => Some(load::load_phase(args, &store, plan, &retraining.progress)?),
        None => None,
    };
    let mut report = run_measured(args, ops, mix, store, loaded, to_insert, retraining)?;
    report.load = load;
    Ok(report)
}

/// Refuses a flag typed on the command line that the run would not use.
fn check_combinations(args: &BenchArgs) -> Result<(), CliError> {
    let typed = |id: &str| args.typed.iter().any(|t| t == id);
    let flag = |id: &str| format!("--{}", id.replace('_', "-"));
    let refuse = |ids: &[&str], why: &str| -> Result<(), CliError> {
        match ids.iter().find(|id| typed(id)) {
            Some(id) => Err(input!("{} {why}", flag(id))),
            None => Ok(()),
        }
    };
    if args.keys_file.is_some() {
        refuse(
            &["keys", "key_dist"],
            "does not apply with --keys-file (the file gives the keys)",
        )?;
    }
    if let (None, Some(p)) = (&args.workload_file, args.properties.first()) {
        return Err(input!(
            "-p {p} sets a property of --workload-file over the file's: give the file (--workload and its flags set the rest)"
        ));
    }
    // A flag and a -p that set the same thing: one would be ignored.
    for (property, id, given) in [
        ("recordcount", "keys", args.keys_given),
        ("operationcount", "ops", args.ops_given),
        ("zipfianconstant", "theta", typed("theta")),
        ("insertorder", "insert_order", typed("insert_order")),
        ("fieldcount", "value_size", typed("value_size")),
        ("fieldlength", "value_size", typed("value_size")),
        ("requestdistribution", "request_dist", typed("request_dist")),
    ] {
        let set = |p: &String| p.split_once('=').is_some_and(|(k, _)| k.trim() == property);
        if let Some(p) = args.properties.iter().find(|p| set(p)).filter(|_| given) {
            return Err(input!("-p {p} and {} both set it: give one", flag(id)));
        }
    }
    // One workload runs: --insert-ratio's, else the file's, else --workload's.
    if args.insert_ratio.is_some() {
        refuse(
            &["workload", "workload_file"],
            "does not apply with --insert-ratio (it sets the whole mix: R inserts, the rest GETs)",
        )?;
    }
    if args.workload_file.is_some() {
        refuse(
            &["workload"],
            "does not apply with --workload-file (the file gives the mix)",
        )?;
    }
    if args.load_phase {
        refuse(
            &["no_retrainer"],
            "does not apply with --load-phase: its inserts into one key in 100 need retraining (without it a model slot fills its synonym leaves and the load fails)",
        )?;
    }
    if !args.attach.is_empty() {
        refuse(
            &[
                "keys",
                "key_dist",
                "keys_file",
                "memory_nodes",
                "epsilon",
                "delta",
                "fill",
                "no_retrainer",
                "load_phase",
            ],
            "does not apply with --attach (the pool has its keys, layout and retrainer)",
        )?;
    } else {
        refuse(
            &["allow_unserved"],
            "applies only with --attach (an embedded memory node is always served)",
        )?;
    }
    match args.index {
        IndexKind::Bplus => {
            refuse(
                &["epsilon", "delta", "fill", "cache_mode", "no_retrainer"],
                "is a ROLEX setting; --index bplus does not take it",
            )?;
            refuse(
                &["leaf_slots", "neighbourhood"],
                "is a CHIME-style setting (give --index chime)",
            )?;
        }
        IndexKind::Chime => {
            refuse(
                &["epsilon", "delta", "fill", "cache_mode", "no_retrainer"],
                "is a ROLEX setting; --index chime does not take it",
            )?;
            refuse(
                &["page_size"],
                "is the B+-tree's; --index chime sizes its pages to its hopscotch leaves",
            )?;
            args.hopscotch_shape()?;
        }
        IndexKind::Rolex => {
            refuse(
                &["page_size", "cache_from_level"],
                "is a B+-tree setting (give --index bplus)",
            )?;
            refuse(
                &["leaf_slots", "neighbourhood"],
                "is a CHIME-style setting (give --index chime)",
            )?;
        }
    }
    if args.transport != CliTransport::Verbs {
        refuse(&["connect", "device"], "needs --transport verbs")?;
    } else {
        refuse(
            &["latency_us"],
            "is the simulator's latency mode; --transport verbs has a real network",
        )?;
        refuse(
            &["attach"],
            "attaches to the simulator's pool files; --transport verbs reaches its memory nodes with --connect",
        )?;
        refuse(
            &["load_phase"],
            "runs on embedded memory nodes; with --transport verbs, `rolex memnode` bulk-loads the keys",
        )?;
    }
    let clients = args.threads.saturating_mul(args.inflight);
    if clients > crate::checks::MAX_THREADS {
        return Err(input!(
            "--threads {} x --inflight {} = {clients} clients: a compute node has {} connection indexes, one per operation in flight",
            args.threads,
            args.inflight,
            crate::checks::MAX_THREADS
        ));
    }
    Ok(())
}

/// Refuses a flag typed on the command line that the workload that runs (a named one, a file's
/// or `--insert-ratio`'s, its request distribution settled) would not use.
fn check_workload_flags(args: &BenchArgs, mix: &Mix) -> Result<(), CliError> {
    use crate::workload::{RequestDist, name};
    let typed = |id: &str| args.typed.iter().any(|t| t == id);
    if typed("theta") && !matches!(mix.request_dist, RequestDist::Zipfian | RequestDist::Latest) {
        return Err(input!(
            "--theta does not apply: {} requests do not use the zipfian exponent (zipfian and latest do)",
            name(mix.request_dist)
        ));
    }
    if mix.insert <= 0.0 && !args.load_phase {
        // (A load phase inserts, in --insert-order, and --check-inserts checks its keys.)
        // --insert-ratio overrides a workload file, which overrides --workload.
        let workload = match (args.insert_ratio, &args.workload_file) {
            (Some(ratio), _) => format!("--insert-ratio {ratio}"),
            (None, Some(path)) => format!("workload file {}", path.display()),
            (None, None) => format!("workload {}", name(args.workload)),
        };
        for (id, flag) in [
            ("insert_order", "--insert-order"),
            ("check_inserts", "--check-inserts"),
        ] {
            if typed(id) {
                return Err(input!(
                    "{flag} does not apply: {workload} inserts no keys (nor is there a --load-phase)"
                ));
            }
        }
    }
    Ok(())
}

/// ROLEX's leaves sized for a cache budget in bytes per key (`BulkLoadConfig::sized_for_cache`),
/// where this run bulk-loads them and neither `--delta` nor `--fill` was given: the smallest
/// leaves whose pivots fit, so each GET reads one small leaf.
fn size_leaves_for_budget(args: &mut BenchArgs) {
    let typed = |id: &str| args.typed.iter().any(|t| t == id);
    let Some(crate::checks::CacheBudget::PerKey(budget)) = args.cache_budget else {
        return;
    };
    if args.index != IndexKind::Rolex
        || !args.attach.is_empty()
        || args.transport == CliTransport::Verbs
        || typed("delta")
        || typed("fill")
    {
        return;
    }
    let sized = BulkLoadConfig {
        delta: args.delta,
        fill: args.fill,
        ..BulkLoadConfig::default()
    }
    .sized_for_cache(budget);
    if (sized.delta, sized.fill) != (args.delta, args.fill) {
        (args.delta, args.fill) = (sized.delta, sized.fill);
        args.leaves_sized_for_budget = true;
    }
}

/// The simulator's configuration for this run: its latency mode, if asked for.
pub(crate) fn sim_config(args: &BenchArgs) -> SimConfig {
    SimConfig {
        latency: args
            .latency_us
            .map(|us| Duration::from_nanos((us * 1_000.0) as u64)),
        ..SimConfig::default()
    }
}

/// Runs the benchmark and returns its report.
pub fn run(args: &BenchArgs) -> Result<Report, CliError> {
    use crate::checks::{MAX_MEMORY_NODES, MAX_THREADS};
    check_combinations(args)?;
    // What runs: the flags, with a workload file's settings where no flag was typed (the report's
    // configuration is this).
    let mut args = args.clone();
    if !(1..=MAX_THREADS).contains(&args.threads)
        || !(1..=MAX_MEMORY_NODES).contains(&args.memory_nodes)
    {
        return Err(input!(
            "--threads must lie in 1..={MAX_THREADS} and --memory-nodes in 1..={MAX_MEMORY_NODES}"
        ));
    }
    let mut mix: Mix = args.workload.mix();
    if let Some(path) = &args.workload_file {
        let file = crate::workload::read_property_file(path, &args.properties)?;
        mix = file.mix.clone();
        // Flags on the command line win (as YCSB's own -p overrides do).
        let typed = |id: &str| args.typed.iter().any(|t| t == id);
        if !args.keys_given {
            args.keys = file.record_count.unwrap_or(args.keys);
        }
        if !args.ops_given {
            args.ops = file.operation_count.unwrap_or(args.ops);
        }
        if !typed("theta") {
            args.theta = file.theta.unwrap_or(args.theta);
        }
        if !typed("insert_order") {
            args.insert_order = file.insert_order.unwrap_or(args.insert_order);
        }
        file.check_insert_range(path, args.keys)?;
        if !typed("value_size") {
            // YCSB's records: the file's fields, or its defaults (10 x 100 bytes).
            if !args.attach.is_empty() || args.transport == CliTransport::Verbs {
                return Err(input!(
                    "--workload-file {}: its records are {} ({}), stored as byte values, which run on embedded memory nodes only (for now)",
                    path.display(),
                    file.record,
                    file.record_source
                ));
            }
            args.value_size = Some(file.record);
            args.value_source = Some(format!("workload file: {}", file.record_source));
        }
    }
    if args.value_size.is_some()
        && (!args.attach.is_empty() || args.transport == CliTransport::Verbs)
    {
        return Err("--value-size: byte values run on embedded memory nodes only (for now)".into());
    }
    size_leaves_for_budget(&mut args);
    let args = &args;
    let (keys_wanted, ops) = (args.keys, args.ops);
    if let Some(ratio) = args.insert_ratio {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(input!("--insert-ratio {ratio} must lie in [0, 1]"));
        }
        mix = crate::workload::Mix {
            read: 1.0 - ratio,
            update: 0.0,
            insert: ratio,
            scan: 0.0,
            read_modify_write: 0.0,
            max_scan_length: 100,
            request_dist: crate::workload::RequestDist::Zipfian,
            dist_params: crate::workload::DistParams::default(),
        };
    }
    if let Some(dist) = args.request_dist {
        mix.request_dist = dist;
    }
    check_workload_flags(args, &mix)?;
    let expected_inserts = (ops as f64 * mix.insert) as u64 + 1024;
    check_memory(args, expected_inserts)?;

    if args.transport == CliTransport::Verbs {
        if args.index.is_tree() {
            return Err(format!(
                "the {} baseline runs on the embedded simulator only",
                args.index.name()
            )
            .into());
        }
        return run_verbs(args, mix, expected_inserts);
    }
    // The memory node(s): embedded, or an attached pool file.
    if args.index.is_tree() && !args.attach.is_empty() {
        return Err(format!(
            "--attach serves ROLEX pools; the {} baseline runs embedded only",
            args.index.name()
        )
        .into());
    }
    let mut unserved = Vec::new();
    let (transport, keys, retraining) = if !args.attach.is_empty() {
        let transport = crate::pools::attach_files_with(&args.attach, true, sim_config(args))?;
        unserved = unserved_pools(args)?;
        let loaded = existing_keys(&transport, args.quiet)?;
        let to_insert = match args.insert_order {
            keys::InsertOrder::Random => fresh_keys(args.seed, expected_inserts),
            keys::InsertOrder::Append => {
                keys::ascending_above(loaded.iter().copied().max().unwrap_or(0), expected_inserts)
            }
        };
        let keys = RunKeys {
            loaded,
            to_insert,
            load: None,
        };
        (transport, keys, Retraining::default())
    } else {
        let bar = progress(args.quiet, None, "key set");
        let set = match &args.keys_file {
            Some(path) => {
                let loaded = keys::read_sosd(path, "--keys-file")?;
                let mut rng = StdRng::seed_from_u64(args.seed);
                let to_insert = match args.insert_order {
                    keys::InsertOrder::Random => {
                        (0..expected_inserts).map(|_| rng.random::<u64>()).collect()
                    }
                    // The file's keys stay as they are; inserts ascend above the largest.
                    keys::InsertOrder::Append => {
                        keys::ascending_above(loaded.last().copied().unwrap_or(0), expected_inserts)
                    }
                };
                keys::KeySet { loaded, to_insert }
            }
            None => keys::generate(
                args.key_dist,
                keys_wanted as usize,
                expected_inserts as usize,
                args.seed,
            ),
        };
        let set = if args.keys_file.is_some() {
            set
        } else {
            set.in_order(args.insert_order)
        };
        // With a measured load phase, the bulk load holds a share of the keys.
        let plan = args.load_phase.then(|| {
            keys::LoadPlan::new(&set.loaded, args.insert_order, args.seed, args.memory_nodes)
        });
        // Room in the pools for the load phase's inserts as for the run's.
        let expected_inserts =
            expected_inserts + plan.as_ref().map_or(0, |p| p.inserts.len() as u64);
        if args.index.is_tree() {
            bar.finish_and_clear();
            return run_bplus(args, ops, &mix, set, plan, expected_inserts);
        }
        let bulk = plan.as_ref().map_or(&set.loaded, |plan| &plan.bulk);
        bar.set_message("bulk load");
        let per_node = (bulk.len() as u64).div_ceil(args.memory_nodes);
        let load = BulkLoadConfig {
            epsilon: args.epsilon,
            delta: args.delta,
            fill: args.fill,
            values: args.value_size.map(|size| {
                crate::index::value_region(size, per_node + expected_inserts / args.memory_nodes)
            }),
            ..BulkLoadConfig::default()
        };
        let spare =
            (expected_inserts / args.memory_nodes).saturating_mul(2) / args.fill.max(1) + 1024;
        let size = required_pool_bytes(per_node, &load, spare).saturating_mul(5) / 4;
        let transport = SimTransport::anonymous_with(
            &vec![size.next_multiple_of(4096); args.memory_nodes as usize],
            sim_config(args),
        )?;
        bar.finish_and_clear();
        let load_bar = progress(args.quiet, Some(1), "bulk load");
        let show = |node: usize, phase: leaf_store::Phase, done: u64, total: u64| {
            load_bar.set_message(format!("memory node {node}: {}", phase.describe()));
            load_bar.set_length(total.max(1));
            load_bar.set_position(done);
        };
        match args.value_size {
            Some(size) => index_core::bootstrap_values(
                &transport,
                bulk.iter()
                    .map(|&k| (k, crate::index::value_bytes(size, k, k)))
                    .collect(),
                &load,
                show,
            ),
            None => index_core::bootstrap_with_progress(
                &transport,
                bulk.iter().map(|&k| (k, k)).collect(),
                &load,
                show,
            ),
        }?;
        load_bar.finish_and_clear();
        bar.finish_and_clear();
        let stop = Arc::new(AtomicBool::new(false));
        let (mut retrainers, mut retrain_progress) = (Vec::new(), Vec::new());
        if !args.no_retrainer {
            for &node in transport.memory_nodes() {
                let (transport, stop) = (transport.clone(), Arc::clone(&stop));
                let progress = Arc::new(RetrainProgress::default());
                retrain_progress.push(Arc::clone(&progress));
                retrainers.push(std::thread::spawn(
                    move || -> Result<RetrainerSummary, CliError> {
                        let ep = transport.endpoint()?;
                        let mut worker = Retrainer::new(ep, node, RetrainConfig::default())?;
                        // The embedded memory node watches its members like `rolex memnode`:
                        // leaf boxes (splits reuse freed leaves) and reclamation by epochs. Its
                        // only member is this process, which cannot die without it: a lease
                        // long enough that a starved renewer is never taken for dead.
                        let fence = transport
                            .fence(node.id)
                            .ok_or("the memory node has no pool")?;
                        worker.watch_members(Duration::from_secs(5), Box::new(fence));
                        // Run in short stretches, publishing the counters after each (the report's
                        // first and last tenth of the run are taken from them).
                        let stats = loop {
                            let stretch = Instant::now();
                            let stats = worker.run(|| {
                                stop.load(Ordering::Acquire)
                                    || stretch.elapsed() >= Duration::from_millis(10)
                            })?;
                            progress.retrains.store(stats.retrains, Ordering::Release);
                            progress.nanos.store(stats.total_nanos, Ordering::Release);
                            if stop.load(Ordering::Acquire) {
                                break stats;
                            }
                        };
                        let pool = worker.pool_usage()?;
                        Ok(RetrainerSummary::of(&worker, stats, pool))
                    },
                ));
            }
        }
        let keys = RunKeys {
            loaded: set.loaded,
            to_insert: set.to_insert,
            load: plan,
        };
        let retraining = Retraining {
            threads: retrainers,
            stop,
            progress: retrain_progress,
        };
        (transport, keys, retraining)
    };
    let opening = std::time::Instant::now();
    let store = open_rolex(args, transport, keys.loaded.len() as u64)?;
    let open_seconds = opening.elapsed().as_secs_f64();
    let mut report = match args.value_size {
        Some(size) => {
            let store = Arc::new(crate::index::ValueStore::new(store, size));
            run_workload(args, ops, &mix, store, keys, retraining)?
        }
        None => run_workload(args, ops, &mix, store, keys, retraining)?,
    };
    report.open_seconds = Some(open_seconds);
    report.unserved_pools = unserved;
    Ok(report)
}

/// The `--attach` pool files no `rolex memnode` serves now (see [`crate::pools::served`]), shown
/// as given. Refused unless `--allow-unserved`, which runs anyway after a warning.
fn unserved_pools(args: &BenchArgs) -> Result<Vec<String>, CliError> {
    let mut unserved = Vec::new();
    let mut unknown = Vec::new();
    for path in &args.attach {
        match crate::pools::served(path) {
            Ok(true) => {}
            Ok(false) => unserved.push(path.display().to_string()),
            Err(why) => unknown.push(format!("{} ({why})", path.display())),
        }
    }
    let plural = unserved.len() + unknown.len() > 1;
    let (them, locks) = if plural {
        ("them", "their files' locks")
    } else {
        ("it", "its file's lock")
    };
    let mut parts = Vec::new();
    if !unserved.is_empty() {
        parts.push(format!(
            "{}: no memory node serves {them} (no `rolex memnode` holds {locks})",
            unserved.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!(
            "{}: cannot tell whether a memory node serves {them}",
            unknown.join(", ")
        ));
    }
    if parts.is_empty() {
        return Ok(unserved);
    }
    let what = parts.join("; ");
    if !args.allow_unserved {
        return Err(input!(
            "{what}; serve {them} with `rolex memnode --resume --pool FILE`, or give --allow-unserved to run without a retrainer"
        ));
    }
    eprintln!(
        "rolex: warning: {what}; running anyway (--allow-unserved): no retrainer and no lease watch run for {them}, so nothing is retrained or recovered"
    );
    unserved.extend(unknown);
    Ok(unserved)
}

/// Above this many keys the pools are left out of the estimate (their sizing arithmetic is not
/// meant for such counts): the keys alone then need 8 TiB.
const ESTIMATED_KEYS_MAX: u64 = 1 << 40;

/// What a run of `args` with room for `expected_inserts` inserts needs in memory, estimated
/// before anything is allocated, in bytes, with its parts: the key vectors as they are generated
/// or read, the bulk load's input, and the embedded pools as sized for the bulk load (value
/// regions included). An attached or verbs run allocates only its keys to insert. `loaded` is
/// the count of keys to load (`--keys`, a workload file's, or a key file's header).
fn memory_needed(args: &BenchArgs, loaded: u64, expected_inserts: u64) -> Vec<(&'static str, u64)> {
    let embedded = args.attach.is_empty() && args.transport == CliTransport::Sim;
    if !embedded {
        return vec![("keys to insert", expected_inserts.saturating_mul(8))];
    }
    let all = loaded.saturating_add(expected_inserts);
    // Generating draws a little more than it keeps and sorts in place (normal and lognormal
    // keys come from as many f64 samples); a key file is read once, the inserts drawn apart.
    let per_key = match (&args.keys_file, args.key_dist) {
        (Some(_), _) | (None, keys::KeyDist::Sequential) => 8,
        (None, keys::KeyDist::Uniform) => 16,
        (None, _) => 24,
    };
    let keys = all.saturating_mul(per_key);
    // The bulk load's (key, value) pairs: two words, or a key and a vector of the longest value.
    let per_pair = match args.value_size {
        Some(size) => 32 + size.max,
        None => 16,
    };
    let mut input = loaded.saturating_mul(per_pair);
    let pool_keys = loaded.min(ESTIMATED_KEYS_MAX);
    let inserts = expected_inserts.min(ESTIMATED_KEYS_MAX);
    let nodes = args.memory_nodes.max(1);
    let per_node = pool_keys.div_ceil(nodes);
    let pool = match args.index {
        IndexKind::Rolex => {
            let load = BulkLoadConfig {
                epsilon: args.epsilon,
                delta: args.delta,
                fill: args.fill,
                values: args
                    .value_size
                    .map(|size| crate::index::value_region(size, per_node + inserts / nodes)),
                ..BulkLoadConfig::default()
            };
            let spare = (inserts / nodes).saturating_mul(2) / args.fill.max(1) + 1024;
            required_pool_bytes(per_node, &load, spare).saturating_mul(5) / 4
        }
        IndexKind::Bplus | IndexKind::Chime => {
            // The baseline sorts a copy of the keys first.
            input = input.saturating_add(loaded.saturating_mul(8));
            let config = bplus_tree::BulkLoadConfig {
                values: args
                    .value_size
                    .map(|size| crate::index::value_region(size, per_node + inserts)),
                // (A shape that cannot be was refused with the flags.)
                ..args
                    .index
                    .tree_layout(args.page_size, args.hopscotch_shape().unwrap_or_default())
            };
            bplus_tree::required_pool_bytes(per_node, &config, inserts + 1024).saturating_mul(5) / 4
        }
    };
    vec![
        ("keys", keys),
        ("bulk-load input", input),
        ("pools", pool.next_multiple_of(4096).saturating_mul(nodes)),
    ]
}

/// Refuses, before anything is allocated, a run that needs more memory than this machine has
/// (see [`memory_needed`]; skipped where `/proc/meminfo` cannot be read).
pub(crate) fn check_memory(args: &BenchArgs, expected_inserts: u64) -> Result<(), CliError> {
    let embedded = args.attach.is_empty() && args.transport == CliTransport::Sim;
    let (loaded, what) = match &args.keys_file {
        _ if !embedded => (0, format!("--ops {}", args.ops)),
        // A pipe or device is read once, by the load (which bounds it by its header's count).
        Some(path) if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) => {
            (0, format!("--keys-file {}", path.display()))
        }
        Some(path) => {
            let count = keys::sosd_count(path, "--keys-file")?;
            let shown = format!("--keys-file {} ({count} keys)", path.display());
            (count, format!("{shown} and --ops {}", args.ops))
        }
        None => match &args.workload_file {
            Some(file) if !args.keys_given => (
                args.keys,
                format!(
                    "{} keys and {} operations (--workload-file {})",
                    args.keys,
                    args.ops,
                    file.display()
                ),
            ),
            _ => (
                args.keys,
                format!("--keys {} and --ops {}", args.keys, args.ops),
            ),
        },
    };
    let parts = memory_needed(args, loaded, expected_inserts);
    let total = parts.iter().fold(0u64, |t, p| t.saturating_add(p.1));
    let shown: Vec<String> = parts
        .iter()
        .map(|(name, bytes)| format!("{name} {}", crate::checks::bytes_text(*bytes)))
        .collect();
    crate::checks::memory_fits(total, &shown.join(", "), &what).map_err(CliError::from)
}

/// The same check for a run that [`run`] would make of `args` with no workload file (as
/// `rolex suite` and `rolex compare` make them): its mix from `--insert-ratio` or `--workload`.
pub(crate) fn check_memory_of(args: &BenchArgs) -> Result<(), CliError> {
    let insert = args.insert_ratio.unwrap_or(args.workload.mix().insert);
    check_memory(args, (args.ops as f64 * insert) as u64 + 1024)
}

/// Opens ROLEX over `transport` as the bench configures it.
fn open_rolex<T: Transport + 'static>(
    args: &BenchArgs,
    transport: T,
    keys: u64,
) -> Result<Arc<Store<T>>, CliError>
where
    T::Endpoint: 'static,
{
    let cache_mode = match args.cache_mode {
        CliCacheMode::Pivots => CacheMode::Pivots,
        CliCacheMode::Lean => CacheMode::Lean,
    };
    Store::open(
        transport,
        StoreConfig {
            cache_mode,
            cache_budget: args.cache_budget.map(|b| b.bytes(keys)),
            ..StoreConfig::default()
        },
    )
    .map(Arc::new)
    .map_err(CliError::from)
}

/// An embedded retrainer's counters, published as it runs.
#[derive(Debug, Default)]
struct RetrainProgress {
    retrains: AtomicU64,
    nanos: AtomicU64,
}

/// Every key the store holds now (to have existing keys to request).
fn existing_keys<T: Transport>(transport: &T, quiet: bool) -> Result<Vec<u64>, CliError> {
    let mut ep = transport.endpoint()?;
    let bar = progress(quiet, None, "reading keys");
    let mut keys = Vec::new();
    for &node in transport.memory_nodes() {
        let layout = leaf_store::Layout::attach(&mut ep, node)?;
        keys.extend(
            leaf_store::read_all_entries(&mut ep, &layout)?
                .into_iter()
                .map(|e| e.0),
        );
    }
    bar.finish_and_clear();
    Ok(keys)
}

/// Random keys to insert (another process attached to the same memory node uses another seed).
fn fresh_keys(seed: u64, n: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    (0..n).map(|_| rng.random::<u64>()).collect()
}

#[cfg(feature = "verbs")]
fn run_verbs(args: &BenchArgs, mix: Mix, expected_inserts: u64) -> Result<Report, CliError> {
    if args.connect.is_empty() {
        return Err(
            "--transport verbs needs --connect ADDR[,ADDR…] (rolex memnode --listen addresses)"
                .into(),
        );
    }
    let servers: Vec<&str> = args.connect.iter().map(String::as_str).collect();
    let transport =
        rdma_transport::verbs::VerbsTransport::connect_all(&servers, args.device.as_deref())
            // No device, or no memory node at those addresses: what was asked cannot run here.
            .map_err(|e| input!("{e}"))?;
    let loaded = existing_keys(&transport, args.quiet)?;
    let to_insert = fresh_keys(args.seed, expected_inserts);
    let opening = std::time::Instant::now();
    let store = open_rolex(args, transport, loaded.len() as u64)?;
    let open_seconds = opening.elapsed().as_secs_f64();
    let mut report = run_workload(
        args,
        args.ops,
        &mix,
        store,
        RunKeys {
            loaded,
            to_insert,
            load: None,
        },
        Retraining::default(),
    )?;
    report.open_seconds = Some(open_seconds);
    Ok(report)
}

#[cfg(not(feature = "verbs"))]
fn run_verbs(_: &BenchArgs, _: Mix, _: u64) -> Result<Report, CliError> {
    Err("this rolex was built without RDMA verbs support (build with: cargo build --release -p rolex-cli --features verbs)".into())
}

/// `rolex bench`: runs, prints the report, writes the JSON.
pub(crate) fn command(args: &BenchArgs) -> Result<(), CliError> {
    // Every output path is checked before any work.
    if let Some(path) = &args.json {
        crate::checks::output_file(path, "--json", true)?;
    }
    if let Some(path) = &args.latency_histogram {
        crate::checks::output_file(path, "--latency-histogram", false)?;
    }
    if let Some(path) = &args.interval_plot {
        crate::checks::output_file(path, "--interval-plot", false)?;
    }
    // Ctrl-C from here on stops the run at its next sample and writes what it measured.
    crate::interrupt::install()?;
    let to_stdout = args.json.as_deref().is_some_and(crate::checks::is_stdout);
    // The table goes to standard error when standard output carries the JSON.
    let show = |text: &str| {
        if to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    };
    let mut reports = Vec::new();
    for i in 0..args.runs {
        let mut run_args = args.clone();
        run_args.seed = args.seed.wrapping_add(i);
        if args.runs > 1 && !args.quiet {
            eprintln!("run {}/{} (seed {})", i + 1, args.runs, run_args.seed);
        }
        let report = run(&run_args)?;
        if args.runs > 1 {
            show(&format!(
                "run {}: {:.0} ops/s measured, {:.0} modeled\n",
                i + 1,
                report.throughput_ops_s,
                report.modeled.throughput_ops_s
            ));
        }
        reports.push(report);
        if crate::interrupt::interrupted() {
            break;
        }
    }
    // Ctrl-C, wherever it came: the last run is marked (its figures cover what it did).
    let interrupted = crate::interrupt::interrupted();
    if let Some(last) = reports.last_mut() {
        last.interrupted |= interrupted;
    }
    let Some(last) = reports.last() else {
        return Err(failed!("no run"));
    };
    show(&last.table());
    let spread = crate::report::RunsSpread::of(&reports);
    if args.runs > 1
        && let Some(spread) = &spread
    {
        show(&spread.table());
    }
    if let Some(path) = &args.latency_histogram {
        let seconds = reports.iter().map(|r| r.wall_seconds).sum();
        let mut entries: Vec<crate::report::LogEntry> = Vec::new();
        match reports.as_slice() {
            // One run with --report-interval: an entry per interval and operation type.
            [one] if args.report_interval.is_some() => {
                for interval in &one.intervals {
                    for (name, bytes) in &interval.histograms {
                        entries.push(crate::report::LogEntry {
                            start_s: interval.end_s - interval.seconds,
                            seconds: interval.seconds,
                            name,
                            hist: intervals::decode(bytes)?,
                        });
                    }
                }
            }
            // Otherwise every run's latencies pooled, an entry per operation type.
            _ => {
                for report in &reports {
                    for (name, hist) in &report.latency_histograms {
                        match entries.iter_mut().find(|e| e.name == *name) {
                            Some(e) => e.hist.add(hist)?,
                            None => entries.push(crate::report::LogEntry {
                                start_s: 0.0,
                                seconds,
                                name,
                                hist: hist.clone(),
                            }),
                        }
                    }
                }
            }
        }
        crate::report::write_histogram_log(path, &entries, seconds)?;
    }
    if let Some(path) = &args.interval_plot {
        let svg = interval_plot(args, &reports);
        std::fs::write(path, svg).map_err(|e| failed!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.json {
        let json = match (args.runs, spread) {
            (2.., Some(spread)) => serde_json::to_string_pretty(&crate::report::RunsReport {
                stamp: crate::report::Stamp::now(),
                runs: reports.clone(),
                spread,
                interrupted,
            }),
            _ => serde_json::to_string_pretty(last),
        }?;
        if to_stdout {
            println!("{json}");
        } else {
            std::fs::write(path, json + "\n").map_err(|e| failed!("{}: {e}", path.display()))?;
        }
    }
    if interrupted {
        return Err(CliError::Interrupted(format!(
            "interrupted (Ctrl-C) after {} of {} runs: the report{} cover{} the operations run until then",
            reports.len(),
            args.runs,
            if args.json.is_some() {
                " and the JSON"
            } else {
                ""
            },
            if args.json.is_some() { "" } else { "s" },
        )));
    }
    let missing: u64 = reports.iter().filter_map(|r| r.inserts_missing).sum();
    if missing > 0 {
        return Err(failed!("{missing} inserted keys are missing"));
    }
    verify_outcome(&reports)
}

/// The runs' verify verdicts as the exit code: problems found by every walk fail the command
/// (exit code 1); a verify that could not settle while others wrote the pool exits with
/// [`crate::verdict::INCONCLUSIVE`]; both after the report was written.
fn verify_outcome(reports: &[Report]) -> Result<(), CliError> {
    use crate::verdict::Verdict;
    let runs = |n: usize| {
        if reports.len() > 1 {
            format!(" in {n} of {} runs", reports.len())
        } else {
            String::new()
        }
    };
    let with_problems: Vec<&Report> = reports
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Problems { .. }))
        .collect();
    if let Some(first) = with_problems.first() {
        return Err(failed!(
            "verify found problems{} that every one of {} walks of the pool found again: {} (see the report; run `rolex inspect`)",
            runs(with_problems.len()),
            first.verify_walks,
            first.verify_problems.first().map_or("", String::as_str)
        ));
    }
    let inconclusive = reports
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Inconclusive { .. }))
        .count();
    if inconclusive > 0 {
        return Err(CliError::Inconclusive(format!(
            "verify inconclusive{}: the pool changed while it was read (other processes write it, or its memnode retrains it); the run itself succeeded and its report was written",
            runs(inconclusive)
        )));
    }
    Ok(())
}

/// Throughput over time, one line per run.
fn interval_plot(args: &BenchArgs, reports: &[Report]) -> String {
    let every = args.report_interval.unwrap_or(1.0);
    // A last interval shorter than half the others is left out: its rate rests on too little.
    let kept = |r: &Report| -> Vec<(f64, f64)> {
        r.intervals
            .iter()
            .filter(|v| v.seconds >= every / 2.0)
            .map(|v| (v.end_s, v.ops_per_s))
            .collect()
    };
    let series: Vec<crate::svg::Series> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| crate::svg::Series {
            name: if reports.len() > 1 {
                format!("run {} (seed {})", i + 1, args.seed.wrapping_add(i as u64))
            } else {
                r.index.to_string()
            },
            points: kept(r),
            dashed: false,
            err: Vec::new(),
        })
        .collect();
    // From 0, at whole multiples of the interval, at most about ten of them.
    let end = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    let count = (end / every).ceil().max(1.0);
    let step = every * (count / 10.0).ceil().max(1.0);
    let ticks: Vec<f64> = (0..)
        .map(|k| f64::from(k) * step)
        .take_while(|&t| t <= end + step / 2.0)
        .collect();
    crate::svg::time_chart(
        "Throughput over time (measured)",
        &format!(
            "{} index, {} threads; a point per interval of {every} s, at its end; a short last one left out",
            reports.first().map_or("", |r| r.index),
            args.threads,
        ),
        "seconds into the measured run",
        "operations per second",
        &series,
        &ticks,
    )
}
