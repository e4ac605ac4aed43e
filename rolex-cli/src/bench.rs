//! `rolex bench`: a workload against an embedded memory node or an attached pool file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use index_core::{CacheMode, Store, StoreConfig};
use indicatif::{ProgressBar, ProgressStyle};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdma_transport::{Stats, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::SimTransport;
use sim_transport::cost_model::NetworkProfile;

use crate::index::{BenchClient, BenchIndex, Failed, IndexKind};
use crate::keys::{self, KeyDist};
use crate::report::{Latency, Modeled, OpReport, Profile, Report, RetrainerSummary};
use crate::workload::{Chooser, Mix, Op, RequestDist, Workload};

/// Everything `rolex bench` takes.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct BenchArgs {
    /// The index to run: ROLEX, or the Sherman-style B+-tree baseline on the same transport
    /// (embedded simulator only).
    #[arg(long, value_enum, default_value_t = IndexKind::Rolex)]
    pub index: IndexKind,
    /// B+-tree baseline: bytes per page (Sherman's is 1 KiB).
    #[arg(long, default_value_t = 1024)]
    pub page_size: u64,
    /// B+-tree baseline: the lowest level of internal pages its compute nodes cache (1: every
    /// internal page, as Sherman; 2: not the leaves' parents).
    #[arg(long, default_value_t = 1)]
    pub cache_from_level: u8,
    /// Keys to bulk-load (embedded memory node). Given on the command line, it wins over a
    /// workload file's `recordcount`.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Operations in total (over all threads). Given on the command line, it wins over a
    /// workload file's `operationcount`.
    #[arg(long, default_value_t = 1_000_000, conflicts_with = "duration",
          value_parser = crate::checks::positive_count)]
    pub ops: u64,
    /// Whether `--keys` was given on the command line (set by `main`).
    #[arg(skip)]
    #[serde(skip)]
    pub keys_given: bool,
    /// Whether `--ops` was given on the command line (set by `main`).
    #[arg(skip)]
    #[serde(skip)]
    pub ops_given: bool,
    /// Every flag given on the command line, by its id (set by `main`): a flag that does not
    /// apply to the run is refused rather than ignored.
    #[arg(skip)]
    #[serde(skip)]
    pub typed: Vec<String>,
    /// Inserts as this share of the operations, the rest GETs (a point of a write-ratio sweep;
    /// overrides --workload).
    #[arg(long)]
    pub insert_ratio: Option<f64>,
    /// Run for this many seconds instead of a number of operations.
    #[arg(long, value_parser = crate::checks::seconds)]
    pub duration: Option<f64>,
    /// Compute threads (one client each; at most 128).
    #[arg(long, default_value_t = 2, value_parser = crate::checks::threads)]
    pub threads: u64,
    /// The workload.
    #[arg(long, value_enum, default_value_t = Workload::YcsbA)]
    pub workload: Workload,
    /// A YCSB workload property file (overrides --workload, and --keys/--ops where it sets them).
    #[arg(long)]
    pub workload_file: Option<PathBuf>,
    /// Store byte values of this many bytes (`N`, or `MIN-MAX` uniform; at most 65536) instead
    /// of 8-byte integers: each leaf entry then names a block of the memory node's value region,
    /// and a GET reads the leaf and the block. A workload file's fieldcount x fieldlength sets
    /// it too. Embedded ROLEX memory nodes only (for now).
    #[arg(long, value_parser = crate::checks::value_size)]
    pub value_size: Option<crate::checks::ValueSize>,
    /// Request distribution (default: the workload's own: zipfian, or latest for YCSB D).
    #[arg(long, value_enum)]
    pub request_dist: Option<RequestDist>,
    /// Zipfian exponent θ.
    #[arg(long, default_value_t = 0.99, value_parser = crate::checks::positive)]
    pub theta: f64,
    /// Key set to bulk-load.
    #[arg(long, value_enum, default_value_t = KeyDist::Uniform)]
    pub key_dist: KeyDist,
    /// A SOSD key file to bulk-load instead (u64 count, then sorted u64 keys).
    #[arg(long)]
    pub keys_file: Option<PathBuf>,
    /// The order inserted keys arrive in: `random` (the key distribution's) or `append`
    /// (ascending above every loaded key, as time-stamped keys arrive).
    #[arg(long, value_enum, default_value_t = keys::InsertOrder::Random)]
    pub insert_order: keys::InsertOrder,
    /// Model error bound ε.
    #[arg(long, default_value_t = 16, value_parser = crate::checks::epsilon)]
    pub epsilon: u64,
    /// Key slots per leaf δ (at most 4096).
    #[arg(long, default_value_t = 16, value_parser = crate::checks::delta)]
    pub delta: u64,
    /// Keys per bulk-loaded leaf.
    #[arg(long, default_value_t = 12)]
    pub fill: u64,
    /// Compute-side cache mode.
    #[arg(long, value_enum, default_value_t = CliCacheMode::Pivots)]
    pub cache_mode: CliCacheMode,
    /// Memory nodes (embedded), range-partitioned (at most 64).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::memory_nodes)]
    pub memory_nodes: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Attach to pool files served by `rolex memnode` instead of embedded memory nodes: one
    /// file, or every memory node's of a deployment (comma-separated, any order).
    #[arg(long, value_delimiter = ',')]
    pub attach: Vec<PathBuf>,
    /// The transport: the simulator, or real RDMA verbs (needs the `verbs` build feature, an RDMA
    /// device, and `--connect`).
    #[arg(long, value_enum, default_value_t = CliTransport::Sim)]
    pub transport: CliTransport,
    /// With `--transport verbs`: the memory nodes' bootstrap addresses (`rolex memnode
    /// --listen`), comma-separated: one per memory-node process.
    #[arg(long, value_delimiter = ',')]
    pub connect: Vec<String>,
    /// With `--transport verbs`: the RDMA device to use (default: the first).
    #[arg(long)]
    pub device: Option<String>,
    /// After the run, read back every key this run inserted and report how many are missing.
    #[arg(long)]
    pub check_inserts: bool,
    /// Do not run a retrainer beside the embedded memory node.
    #[arg(long)]
    pub no_retrainer: bool,
    /// Hide progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Cost model: round trip per batch, in µs.
    #[arg(long, default_value_t = 2.0, value_parser = crate::checks::positive)]
    pub model_rtt_us: f64,
    /// Cost model: link bandwidth, Gb/s.
    #[arg(long, default_value_t = 100.0, value_parser = crate::checks::positive)]
    pub model_link_gbps: f64,
    /// Cost model: verbs per second one memory node's NIC serves.
    #[arg(long, default_value_t = 50e6, value_parser = crate::checks::positive)]
    pub model_nic_verbs: f64,
    /// Cost model: bytes per second one memory node's NIC moves.
    #[arg(long, default_value_t = 12.5e9, value_parser = crate::checks::positive)]
    pub model_nic_bytes: f64,
    /// Cost model: client threads to model (default: --threads).
    #[arg(long, value_parser = crate::checks::positive_count)]
    pub model_clients: Option<u64>,
}

/// Transport as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CliTransport {
    Sim,
    Verbs,
}

/// Cache mode as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CliCacheMode {
    Pivots,
    Lean,
}

const OP_NAMES: [&str; 6] = ["read", "update", "insert", "scan", "rmw", "delete"];

/// Per thread: latency histograms and network counters per operation type.
struct ThreadResult {
    latency: Vec<Histogram<u64>>,
    net: Vec<Stats>,
    /// Lock-table verbs per operation kind (the B+-tree's; within `net` too).
    lock_verbs: Vec<u64>,
    inserted: Vec<u64>,
    /// Inserts that added a key.
    inserted_count: u64,
    /// Churn: the keys this thread owns at the end (all must be present).
    owned: Vec<u64>,
    /// Fresh endpoints this thread needed after its endpoint broke.
    reconnects: u64,
    /// Value bytes its operations moved (byte values only).
    value_bytes: u64,
    /// When its last operation finished.
    finished: Instant,
}

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

/// Refuses a flag typed on the command line that the run would not use.
fn check_combinations(args: &BenchArgs) -> Result<(), String> {
    let typed = |id: &str| args.typed.iter().any(|t| t == id);
    let flag = |id: &str| format!("--{}", id.replace('_', "-"));
    let refuse = |ids: &[&str], why: &str| -> Result<(), String> {
        match ids.iter().find(|id| typed(id)) {
            Some(id) => Err(format!("{} {why}", flag(id))),
            None => Ok(()),
        }
    };
    if args.keys_file.is_some() {
        refuse(
            &["keys", "key_dist"],
            "does not apply with --keys-file (the file gives the keys)",
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
            ],
            "does not apply with --attach (the pool has its keys, layout and retrainer)",
        )?;
    }
    match args.index {
        IndexKind::Bplus => refuse(
            &["epsilon", "delta", "fill", "cache_mode", "no_retrainer"],
            "is a ROLEX setting; --index bplus does not take it",
        )?,
        IndexKind::Rolex => refuse(
            &["page_size", "cache_from_level"],
            "is a B+-tree setting (give --index bplus)",
        )?,
    }
    if args.transport != CliTransport::Verbs {
        refuse(&["connect", "device"], "needs --transport verbs")?;
    }
    Ok(())
}

/// Runs the benchmark and returns its report.
pub fn run(args: &BenchArgs) -> Result<Report, String> {
    use crate::checks::{MAX_MEMORY_NODES, MAX_THREADS};
    check_combinations(args)?;
    // What runs: the flags, with a workload file's settings where no flag was typed (the report's
    // configuration is this).
    let mut args = args.clone();
    if !(1..=MAX_THREADS).contains(&args.threads)
        || !(1..=MAX_MEMORY_NODES).contains(&args.memory_nodes)
    {
        return Err(format!(
            "--threads must lie in 1..={MAX_THREADS} and --memory-nodes in 1..={MAX_MEMORY_NODES}"
        ));
    }
    let mut mix: Mix = args.workload.mix();
    if let Some(path) = &args.workload_file {
        let file = crate::workload::read_property_file(path)?;
        mix = file.mix;
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
        if !typed("value_size")
            && let Some(bytes) = file.record_bytes
        {
            args.value_size = Some(crate::checks::ValueSize {
                min: bytes,
                max: bytes,
            });
        }
    }
    if args.value_size.is_some()
        && (!args.attach.is_empty() || args.transport == CliTransport::Verbs)
    {
        return Err("--value-size: byte values run on embedded memory nodes only (for now)".into());
    }
    let args = &args;
    let (keys_wanted, ops) = (args.keys, args.ops);
    if let Some(ratio) = args.insert_ratio {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(format!("--insert-ratio {ratio} must lie in [0, 1]"));
        }
        mix = crate::workload::Mix {
            read: 1.0 - ratio,
            update: 0.0,
            insert: ratio,
            scan: 0.0,
            read_modify_write: 0.0,
            max_scan_length: 100,
            request_dist: crate::workload::RequestDist::Zipfian,
        };
    }
    if let Some(dist) = args.request_dist {
        mix.request_dist = dist;
    }
    let expected_inserts = (ops as f64 * mix.insert) as u64 + 1024;

    if args.transport == CliTransport::Verbs {
        if args.index == IndexKind::Bplus {
            return Err("the B+-tree baseline runs on the embedded simulator only".into());
        }
        return run_verbs(args, mix, expected_inserts);
    }
    // The memory node(s): embedded, or an attached pool file.
    let mut retrain_progress: Vec<Arc<RetrainProgress>> = Vec::new();
    if args.index == IndexKind::Bplus && !args.attach.is_empty() {
        return Err("--attach serves ROLEX pools; the B+-tree baseline runs embedded only".into());
    }
    let (transport, loaded, to_insert, retrainers, stop_retrainers) = if !args.attach.is_empty() {
        let transport = crate::pools::attach_files(&args.attach, true)?;
        let loaded = existing_keys(&transport, args.quiet)?;
        let to_insert = match args.insert_order {
            keys::InsertOrder::Random => fresh_keys(args.seed, expected_inserts),
            keys::InsertOrder::Append => {
                keys::ascending_above(loaded.iter().copied().max().unwrap_or(0), expected_inserts)
            }
        };
        (
            transport,
            loaded,
            to_insert,
            Vec::new(),
            Arc::new(AtomicBool::new(false)),
        )
    } else {
        let bar = progress(args.quiet, None, "key set");
        let set = match &args.keys_file {
            Some(path) => {
                let loaded = keys::read_sosd(path)?;
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
        if args.index == IndexKind::Bplus {
            bar.finish_and_clear();
            return run_bplus(args, ops, &mix, set, expected_inserts);
        }
        bar.set_message("bulk load");
        let per_node = (set.loaded.len() as u64).div_ceil(args.memory_nodes);
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
        let transport = SimTransport::anonymous(&vec![
            size.next_multiple_of(4096);
            args.memory_nodes as usize
        ])
        .map_err(|e| e.to_string())?;
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
                set.loaded
                    .iter()
                    .map(|&k| (k, crate::index::value_bytes(size, k, k)))
                    .collect(),
                &load,
                show,
            ),
            None => index_core::bootstrap_with_progress(
                &transport,
                set.loaded.iter().map(|&k| (k, k)).collect(),
                &load,
                show,
            ),
        }
        .map_err(|e| e.to_string())?;
        load_bar.finish_and_clear();
        bar.finish_and_clear();
        let stop = Arc::new(AtomicBool::new(false));
        let mut retrainers = Vec::new();
        if !args.no_retrainer {
            for &node in transport.memory_nodes() {
                let (transport, stop) = (transport.clone(), Arc::clone(&stop));
                let progress = Arc::new(RetrainProgress::default());
                retrain_progress.push(Arc::clone(&progress));
                retrainers.push(std::thread::spawn(
                    move || -> Result<RetrainerSummary, String> {
                        let ep = transport.endpoint().map_err(|e| e.to_string())?;
                        let mut worker = Retrainer::new(ep, node, RetrainConfig::default())
                            .map_err(|e| e.to_string())?;
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
                            let stats = worker
                                .run(|| {
                                    stop.load(Ordering::Acquire)
                                        || stretch.elapsed() >= Duration::from_millis(10)
                                })
                                .map_err(|e| e.to_string())?;
                            progress.retrains.store(stats.retrains, Ordering::Release);
                            progress.nanos.store(stats.total_nanos, Ordering::Release);
                            if stop.load(Ordering::Acquire) {
                                break stats;
                            }
                        };
                        let pool = worker.pool_usage().map_err(|e| e.to_string())?;
                        Ok(RetrainerSummary::of(&worker, stats, pool))
                    },
                ));
            }
        }
        (transport, set.loaded, set.to_insert, retrainers, stop)
    };
    let opening = std::time::Instant::now();
    let store = open_rolex(args, transport)?;
    let open_seconds = opening.elapsed().as_secs_f64();
    let mut report = match args.value_size {
        Some(size) => {
            let store = Arc::new(crate::index::ValueStore::new(store, size));
            run_workload(
                args,
                ops,
                &mix,
                store,
                loaded,
                to_insert,
                retrainers,
                &stop_retrainers,
                &retrain_progress,
            )?
        }
        None => run_workload(
            args,
            ops,
            &mix,
            store,
            loaded,
            to_insert,
            retrainers,
            &stop_retrainers,
            &retrain_progress,
        )?,
    };
    report.open_seconds = Some(open_seconds);
    Ok(report)
}

/// Opens ROLEX over `transport` as the bench configures it.
fn open_rolex<T: Transport + 'static>(
    args: &BenchArgs,
    transport: T,
) -> Result<Arc<Store<T>>, String>
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
            ..StoreConfig::default()
        },
    )
    .map(Arc::new)
    .map_err(|e| e.to_string())
}

/// The B+-tree baseline on embedded memory nodes: the same key set, range-partitioned over the
/// nodes as ROLEX's bootstrap does, then the same workload.
fn run_bplus(
    args: &BenchArgs,
    ops: u64,
    mix: &Mix,
    set: keys::KeySet,
    expected_inserts: u64,
) -> Result<Report, String> {
    let nodes = args.memory_nodes;
    let mut sorted = set.loaded.clone();
    sorted.sort_unstable();
    if (sorted.len() as u64) < nodes {
        return Err("more memory nodes than loaded keys".into());
    }
    let per_node_guess = (sorted.len() as u64).div_ceil(nodes);
    let config = bplus_tree::BulkLoadConfig {
        page_size: args.page_size,
        // As ROLEX's: every node has room for every insert.
        values: args
            .value_size
            .map(|size| crate::index::value_region(size, per_node_guess + expected_inserts)),
        ..bplus_tree::BulkLoadConfig::default()
    };
    // The same shares and key ranges as ROLEX's bootstrap. Each node has room for every insert:
    // they need not spread evenly (appends all go to the last node). Untouched room costs
    // nothing on the simulator's anonymous pools.
    let shares = index_core::partition(&sorted, nodes as usize, &BulkLoadConfig::default());
    let per_node = shares.iter().map(|(r, _)| r.len()).max().unwrap_or(0) as u64;
    let size = bplus_tree::required_pool_bytes(per_node, &config, expected_inserts + 1024)
        .saturating_mul(5)
        / 4;
    let transport = SimTransport::anonymous(&vec![size.next_multiple_of(4096); nodes as usize])
        .map_err(|e| e.to_string())?;
    let load_bar = progress(args.quiet, Some(nodes), "bulk load");
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    for (&node, (range, share)) in transport.memory_nodes().iter().zip(shares) {
        let node_config = bplus_tree::BulkLoadConfig {
            key_lo: share.key_lo,
            key_hi: share.key_hi,
            ..config.clone()
        };
        match args.value_size {
            Some(size) => bplus_tree::bulk_load_values(
                &mut ep,
                node,
                sorted[range]
                    .iter()
                    .map(|&k| (k, crate::index::value_bytes(size, k, k)))
                    .collect(),
                &node_config,
            ),
            None => bplus_tree::bulk_load(
                &mut ep,
                node,
                sorted[range].iter().map(|&k| (k, k)).collect(),
                &node_config,
            ),
        }
        .map_err(|e| e.to_string())?;
        load_bar.inc(1);
    }
    load_bar.finish_and_clear();
    let tree = bplus_tree::Tree::open(
        transport,
        bplus_tree::TreeConfig {
            cache_from_level: args.cache_from_level.max(1),
            ..bplus_tree::TreeConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let tree = Arc::new(tree);
    match args.value_size {
        Some(size) => run_workload(
            args,
            ops,
            mix,
            Arc::new(crate::index::ValueStore::new(tree, size)),
            set.loaded,
            set.to_insert,
            Vec::new(),
            &AtomicBool::new(false),
            &[],
        ),
        None => run_workload(
            args,
            ops,
            mix,
            tree,
            set.loaded,
            set.to_insert,
            Vec::new(),
            &AtomicBool::new(false),
            &[],
        ),
    }
}

/// An embedded retrainer's counters, published as it runs.
#[derive(Debug, Default)]
struct RetrainProgress {
    retrains: AtomicU64,
    nanos: AtomicU64,
}

/// One sample of the run: seconds since its start, operations done, retrainings and their
/// nanoseconds so far.
type Sample = (f64, u64, u64, u64);

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

/// Every key the store holds now (to have existing keys to request).
fn existing_keys<T: Transport>(transport: &T, quiet: bool) -> Result<Vec<u64>, String> {
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    let bar = progress(quiet, None, "reading keys");
    let mut keys = Vec::new();
    for &node in transport.memory_nodes() {
        let layout = leaf_store::Layout::attach(&mut ep, node).map_err(|e| e.to_string())?;
        keys.extend(
            leaf_store::read_all_entries(&mut ep, &layout)
                .map_err(|e| e.to_string())?
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
fn run_verbs(args: &BenchArgs, mix: Mix, expected_inserts: u64) -> Result<Report, String> {
    if args.connect.is_empty() {
        return Err(
            "--transport verbs needs --connect ADDR[,ADDR…] (rolex memnode --listen addresses)"
                .into(),
        );
    }
    let servers: Vec<&str> = args.connect.iter().map(String::as_str).collect();
    let transport =
        rdma_transport::verbs::VerbsTransport::connect_all(&servers, args.device.as_deref())
            .map_err(|e| e.to_string())?;
    let loaded = existing_keys(&transport, args.quiet)?;
    let to_insert = fresh_keys(args.seed, expected_inserts);
    let opening = std::time::Instant::now();
    let store = open_rolex(args, transport)?;
    let open_seconds = opening.elapsed().as_secs_f64();
    let mut report = run_workload(
        args,
        args.ops,
        &mix,
        store,
        loaded,
        to_insert,
        Vec::new(),
        &AtomicBool::new(false),
        &[],
    )?;
    report.open_seconds = Some(open_seconds);
    Ok(report)
}

#[cfg(not(feature = "verbs"))]
fn run_verbs(_: &BenchArgs, _: Mix, _: u64) -> Result<Report, String> {
    Err("this rolex was built without RDMA verbs support (build with: cargo build --release -p rolex-cli --features verbs)".into())
}

type Retrainers = Vec<std::thread::JoinHandle<Result<RetrainerSummary, String>>>;

/// Runs the workload on `store` (either index) and assembles the report.
#[allow(clippy::too_many_arguments)]
fn run_workload<I: BenchIndex>(
    args: &BenchArgs,
    ops: u64,
    mix: &Mix,
    store: Arc<I>,
    loaded: Vec<u64>,
    to_insert: Vec<u64>,
    retrainers: Retrainers,
    stop_retrainers: &AtomicBool,
    retrain_progress: &[Arc<RetrainProgress>],
) -> Result<Report, String> {
    let mix = mix.clone();
    if loaded.is_empty() {
        return Err("the store holds no keys to run a workload on".into());
    }

    let chooser = Arc::new(Chooser::new(
        mix.request_dist,
        loaded.len() as u64,
        args.theta,
    )?);
    let (loaded, to_insert, mix) = (Arc::new(loaded), Arc::new(to_insert), Arc::new(mix));
    let claimed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let per_thread = ops.div_ceil(args.threads);
    let bar = progress(
        args.quiet,
        if deadline.is_some() {
            None
        } else {
            Some(per_thread * args.threads)
        },
        "running",
    );

    // A churn run deletes as much as it inserts (a workload file, which overrides --workload,
    // has no deletes).
    let churn = args.workload == Workload::Churn && args.workload_file.is_none();
    let thread_count = args.threads;
    let started = Instant::now();
    let handles: Vec<_> = (0..args.threads)
        .map(|t| {
            let (store, chooser, loaded, to_insert, mix, claimed, done) = (
                Arc::clone(&store),
                Arc::clone(&chooser),
                Arc::clone(&loaded),
                Arc::clone(&to_insert),
                Arc::clone(&mix),
                Arc::clone(&claimed),
                Arc::clone(&done),
            );
            let seed = args
                .seed
                .wrapping_add(t)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            std::thread::spawn(move || -> Result<ThreadResult, String> {
                let mut client = store.client().map_err(|e| e.to_string())?;
                let mut rng = StdRng::seed_from_u64(seed);
                let mut result = ThreadResult {
                    latency: (0..OP_NAMES.len())
                        .map(|_| {
                            Histogram::new_with_bounds(1, 60_000_000_000, 3)
                                .map_err(|e| e.to_string())
                        })
                        .collect::<Result<_, _>>()?,
                    net: vec![Stats::default(); OP_NAMES.len()],
                    lock_verbs: vec![0; OP_NAMES.len()],
                    inserted: Vec::new(),
                    inserted_count: 0,
                    owned: Vec::new(),
                    reconnects: 0,
                    value_bytes: 0,
                    finished: Instant::now(),
                };
                if churn {
                    result.owned = loaded
                        .iter()
                        .skip(t as usize)
                        .step_by(thread_count as usize)
                        .copied()
                        .collect();
                }
                let mut i = 0u64;
                while deadline.map_or(i < per_thread, |d| Instant::now() < d) {
                    i += 1;
                    let live = loaded.len() as u64
                        + claimed.load(Ordering::Acquire).min(to_insert.len() as u64);
                    let key_at = |idx: u64| {
                        let idx = idx as usize;
                        loaded.get(idx).copied().unwrap_or_else(|| {
                            to_insert.get(idx - loaded.len()).copied().unwrap_or(0)
                        })
                    };
                    let new_key = || {
                        let n = claimed.fetch_add(1, Ordering::AcqRel) as usize;
                        to_insert
                            .get(n)
                            .copied()
                            .unwrap_or_else(rand::random::<u64>)
                    };
                    let op = if churn && !result.owned.is_empty() && rng.random::<bool>() {
                        let at = rng.random_range(0..result.owned.len());
                        Op::Delete(result.owned.swap_remove(at))
                    } else {
                        mix.next(&mut rng, &chooser, live, key_at, new_key)
                    };
                    let before = client.net_stats();
                    let locks_before = client.lock_verbs();
                    let at = Instant::now();
                    let inserted_before = result.inserted.len();
                    let kind = match execute(&mut client, op, &mut result.inserted) {
                        Ok(kind) => kind,
                        // A broken endpoint (a failed or timed-out batch on a real NIC): a fresh
                        // one, and the operation once more.
                        Err(Failed::ConnectionLost(first)) => {
                            store
                                .reconnect(&mut client)
                                .map_err(|e| format!("{first}; reconnecting: {e}"))?;
                            result.reconnects += 1;
                            execute(&mut client, op, &mut result.inserted)
                                .map_err(|e| format!("{first}; after reconnecting: {e}"))?
                        }
                        Err(other) => return Err(other.to_string()),
                    };
                    let ns = at.elapsed().as_nanos() as u64;
                    let _ = result.latency[kind].record(ns.max(1));
                    result.net[kind] += client.net_stats() - before;
                    result.lock_verbs[kind] += client.lock_verbs() - locks_before;
                    if result.inserted.len() > inserted_before {
                        result.inserted_count += 1;
                        if churn {
                            // The key is this thread's to delete later, not a lasting insert.
                            result.owned.extend(result.inserted.pop());
                        }
                    }
                    if i.is_multiple_of(1024) {
                        done.fetch_add(1024, Ordering::Relaxed);
                    }
                }
                done.fetch_add(i % 1024, Ordering::Relaxed);
                result.finished = Instant::now();
                result.value_bytes = client.value_bytes();
                Ok(result)
            })
        })
        .collect();
    let sample = || -> Sample {
        (
            started.elapsed().as_secs_f64(),
            done.load(Ordering::Relaxed),
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
    let mut samples = vec![sample()];
    // The last sample taken while every thread still ran: the phases are measured up to it, so a
    // thread that finished its share early does not show as a slowdown.
    let mut all_ran_until = None;
    while handles.iter().any(|h| !h.is_finished()) {
        bar.set_position(done.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(5));
        let finished_one = handles.iter().any(|h| h.is_finished());
        samples.push(sample());
        if finished_one && all_ran_until.is_none() {
            all_ran_until = Some(samples.len() - 1);
        }
    }
    samples.push(sample());
    let window = &samples[..=all_ran_until.unwrap_or(samples.len() - 1)];
    let phases = crate::report::Phases {
        first_tenth: phase(window, 0.0, 0.1),
        last_tenth: phase(window, 0.9, 1.0),
    };
    let mut results = Vec::new();
    for h in handles {
        results.push(
            h.join()
                .map_err(|_| "a benchmark thread panicked".to_string())??,
        );
    }
    // From the start to the last thread's last operation (not to when the sampling loop noticed).
    let wall = results
        .iter()
        .map(|r| r.finished.saturating_duration_since(started))
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    bar.finish_and_clear();

    stop_retrainers.store(true, Ordering::Release);
    let mut retrainer: Option<RetrainerSummary> = None;
    for r in retrainers {
        let summary = r
            .join()
            .map_err(|_| "the retrainer panicked".to_string())??;
        retrainer = Some(match retrainer {
            Some(total) => total.plus(&summary),
            None => summary,
        });
    }
    let retrains = retrainer.as_ref().map(|r| r.retrains);

    // Inserted keys must all read back.
    let inserted: Vec<u64> = results
        .iter()
        .flat_map(|r| r.inserted.iter().chain(&r.owned).copied())
        .collect();
    let inserted_count: u64 = results.iter().map(|r| r.inserted_count).sum();
    let reconnects: u64 = results.iter().map(|r| r.reconnects).sum();
    let inserts_missing = if args.check_inserts {
        let mut client = store.client().map_err(|e| e.to_string())?;
        let mut missing = 0;
        for &k in &inserted {
            if client.get(k).map_err(|e| e.to_string())?.is_none() {
                missing += 1;
            }
        }
        Some(missing)
    } else {
        None
    };

    // What the compute node caches once the run has warmed it (the B+-tree fills its cache of
    // internal pages as it goes; ROLEX caches every record from the start).
    let cache_bytes = store.cache_bytes();

    // Structure, from a verify walk (problems are reported, not fatal, for an attached pool that
    // other processes may be writing).
    let structure = store.structure()?;
    let (leaves, synonyms, keys_after, clean, models) = (
        structure.leaves,
        structure.synonym_leaves,
        structure.keys,
        structure.clean,
        structure.models,
    );

    // Assemble.
    let profile = NetworkProfile {
        rtt_us: args.model_rtt_us,
        link_gbps: args.model_link_gbps,
        nic_verbs_per_s: args.model_nic_verbs,
        nic_bytes_per_s: args.model_nic_bytes,
    };
    let mut total_ops = 0u64;
    let mut total_net = Stats::default();
    let mut ops_report = BTreeMap::new();
    let mut modeled_by_op = BTreeMap::new();
    for (kind, name) in OP_NAMES.iter().enumerate() {
        let mut hist =
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
        let mut net = Stats::default();
        let mut lock_verbs = 0;
        for r in &results {
            hist.add(&r.latency[kind]).map_err(|e| e.to_string())?;
            net += r.net[kind];
            lock_verbs += r.lock_verbs[kind];
        }
        let count = hist.len();
        if count == 0 {
            continue;
        }
        total_ops += count;
        total_net += net;
        let per = |v: u64| v as f64 / count as f64;
        ops_report.insert(
            name.to_string(),
            OpReport {
                count,
                rtts_per_op: per(net.batches),
                verbs_per_op: per(net.verbs()),
                bytes_per_op: per(net.bytes_read + net.bytes_written),
                lock_verbs_per_op: per(lock_verbs),
                latency_us: Latency {
                    p50: hist.value_at_quantile(0.5) as f64 / 1e3,
                    p99: hist.value_at_quantile(0.99) as f64 / 1e3,
                    p999: hist.value_at_quantile(0.999) as f64 / 1e3,
                    max: hist.max() as f64 / 1e3,
                },
            },
        );
        modeled_by_op.insert(name.to_string(), profile.latency_us(&net, count));
    }
    let clients = args.model_clients.unwrap_or(args.threads);
    let nodes = store.memory_nodes();
    let mut config = serde_json::to_value(args).map_err(|e| e.to_string())?;
    if let Some(obj) = config.as_object_mut() {
        obj.insert("keys_loaded".into(), serde_json::json!(loaded.len()));
        obj.insert(
            "mix".into(),
            serde_json::to_value(&*mix).map_err(|e| e.to_string())?,
        );
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
        schema_version: crate::report::SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        timestamp: crate::report::utc_now(),
        index: args.index.name(),
        config,
        wall_seconds: wall,
        throughput_ops_s: total_ops as f64 / wall.max(1e-9),
        ops: ops_report,
        cache_bytes,
        cache_bytes_per_key: cache_bytes as f64 / loaded.len().max(1) as f64,
        models,
        leaves,
        synonym_leaves: synonyms,
        keys_after,
        retrains,
        retrainer,
        verify_clean: clean,
        inserted: inserted_count,
        reconnects,
        open_seconds: None,
        inserts_missing,
        phases,
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

/// Issues one operation; returns its index in [`OP_NAMES`].
fn execute<C: BenchClient>(
    client: &mut C,
    op: Op,
    inserted: &mut Vec<u64>,
) -> Result<usize, Failed> {
    let e = |e: Failed| e;
    Ok(match op {
        Op::Read(k) => {
            client.get(k).map_err(e)?;
            0
        }
        Op::Update(k) => {
            client.update(k, k.wrapping_add(1)).map_err(e)?;
            1
        }
        Op::Insert(k) => {
            if client.insert(k, k).map_err(e)? {
                inserted.push(k);
            }
            2
        }
        Op::Delete(k) => {
            if !client.delete(k).map_err(e)? {
                return Err(Failed::Other(format!(
                    "churn: deleting {k}, which this thread owns, found nothing"
                )));
            }
            5
        }
        Op::Scan(k, n) => {
            client.scan(k, n).map_err(e)?;
            3
        }
        Op::ReadModifyWrite(k) => {
            let v = client.get(k).map_err(e)?.unwrap_or(0);
            client.update(k, v.wrapping_add(1)).map_err(e)?;
            4
        }
    })
}

/// `rolex bench`: runs, prints the report, writes the JSON.
pub(crate) fn command(args: &BenchArgs) -> Result<(), String> {
    if let Some(path) = &args.json {
        crate::checks::output_file(path, "--json", true)?;
    }
    let report = run(args)?;
    match &args.json {
        // The JSON alone on standard output; the table goes to standard error.
        Some(path) if crate::checks::is_stdout(path) => {
            eprint!("{}", report.table());
            let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            println!("{json}");
        }
        Some(path) => {
            print!("{}", report.table());
            let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            std::fs::write(path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        }
        None => print!("{}", report.table()),
    }
    if report.inserts_missing.is_some_and(|m| m > 0) {
        return Err(format!(
            "{} inserted keys are missing",
            report.inserts_missing.unwrap_or(0)
        ));
    }
    Ok(())
}
