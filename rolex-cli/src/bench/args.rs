//! What `rolex bench` takes.

use std::path::PathBuf;

use crate::index::IndexKind;
use crate::keys::{self, KeyDist};
use crate::workload::{RequestDist, Workload};

/// Everything `rolex bench` takes.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct BenchArgs {
    /// The index to run: ROLEX, or the Sherman-style B+-tree baseline on the same transport
    /// (embedded simulator only).
    #[arg(long, value_enum, default_value_t = IndexKind::Rolex)]
    pub index: IndexKind,
    /// B+-tree baseline: bytes per page (Sherman's is 1 KiB).
    #[arg(long, default_value_t = 1024, value_parser = crate::checks::page_size)]
    pub page_size: u64,
    /// B+-tree baseline: the lowest level of internal pages its compute nodes cache (1: every
    /// internal page, as Sherman; 2: not the leaves' parents; up to 255: none).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::cache_from_level)]
    pub cache_from_level: u8,
    /// CHIME-style baseline: slots of a hopscotch leaf (CHIME's: 64; a multiple of
    /// `--neighbourhood`, at least two of them, at most 64).
    #[arg(long, default_value_t = 64, value_parser = crate::checks::leaf_slots)]
    pub leaf_slots: u64,
    /// CHIME-style baseline: slots of a neighbourhood, within which a key lies from its home
    /// (CHIME's: 8; 2 to 16).
    #[arg(long, default_value_t = 8, value_parser = crate::checks::neighbourhood)]
    pub neighbourhood: u64,
    /// Keys to bulk-load (embedded memory node). Given on the command line, it wins over a
    /// workload file's `recordcount`.
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::checks::positive_count)]
    pub keys: u64,
    /// Put the keys in the store with a measured load phase (YCSB's `load`), reported apart
    /// before the run: one key in 100 (at least one per memory node) is bulk-loaded, then the
    /// client threads insert the rest (in `--insert-order`: random, or ascending above the bulk
    /// load's keys). Embedded memory nodes only.
    #[arg(long)]
    pub load_phase: bool,
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
    #[arg(long, value_parser = crate::checks::share)]
    pub insert_ratio: Option<f64>,
    /// `--duration` and `--warmup`.
    #[command(flatten)]
    #[serde(flatten)]
    pub length: RunLength,
    /// Print the throughput every this many seconds as the run goes (on standard error), and keep
    /// the series in the JSON (`intervals`). At least 0.005: the run is sampled every 5 ms.
    #[arg(long, value_parser = crate::checks::report_interval)]
    pub report_interval: Option<f64>,
    /// With `--report-interval`: also draw the series (throughput over time) as an SVG here.
    #[arg(long, requires = "report_interval")]
    pub interval_plot: Option<PathBuf>,
    /// Write every operation type's latency histogram here, in HdrHistogram's interval log
    /// format (values in nanoseconds; one interval per type, tagged with its name), for
    /// HdrHistogram's own tools.
    #[arg(long)]
    pub latency_histogram: Option<PathBuf>,
    /// Repeat the run this many times (run i uses seed + i) and report the mean, standard
    /// deviation, min and max of its figures (at most 100).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::runs)]
    pub runs: u64,
    /// Compute threads (one client each; at most 128).
    #[arg(long, default_value_t = 2, value_parser = crate::checks::threads)]
    pub threads: u64,
    /// Operations each thread keeps in flight (one client each: threads x inflight at most
    /// 128). Above 1 a thread posts its operations' batches and polls their completions, as
    /// RDMA systems run several coroutines per thread; the cost model counts threads x inflight
    /// clients.
    #[arg(long, default_value_t = 1, value_parser = crate::checks::inflight)]
    pub inflight: u64,
    /// Simulator latency mode: every batch completes no earlier than this round trip (in µs)
    /// after it was posted, in wall-clock time, so measured throughput shows what keeping
    /// operations in flight buys (embedded or attached simulator only).
    #[arg(long, value_parser = crate::checks::latency_us)]
    pub latency_us: Option<f64>,
    /// The workload.
    #[arg(long, value_enum, default_value_t = Workload::YcsbA)]
    pub workload: Workload,
    /// A YCSB workload property file (overrides --workload, and --keys/--ops where it sets them).
    #[arg(long)]
    pub workload_file: Option<PathBuf>,
    /// Sets one of the workload file's properties, over the file's (YCSB's `-p`; repeat it for
    /// more): `-p requestdistribution=uniform -p operationcount=500000`.
    #[arg(short = 'p', long = "property", value_name = "KEY=VALUE",
          value_parser = crate::checks::property)]
    pub properties: Vec<String>,
    /// Store byte values of this many bytes (`N`, or `MIN-MAX` uniform; at most 65536) instead
    /// of 8-byte integers: each leaf entry then names a block of the memory node's value region,
    /// and a GET reads the leaf and the block. A workload file's fieldcount x fieldlength sets
    /// it too (YCSB's 10 x 100 bytes where the file gives neither). Embedded memory nodes only
    /// (for now).
    #[arg(long, value_parser = crate::checks::value_size)]
    pub value_size: Option<crate::checks::ValueSize>,
    /// Where the value size came from, when not from `--value-size` (a workload file's fields).
    #[arg(skip)]
    pub value_source: Option<String>,
    /// Whether ROLEX's leaves were sized for `--cache-budget` (a budget in bytes per key, with
    /// neither `--delta` nor `--fill` given): `delta` and `fill` say what ran.
    #[arg(skip)]
    pub leaves_sized_for_budget: bool,
    /// Request distribution (default: the workload's own: zipfian, or latest for YCSB D).
    #[arg(long, value_enum)]
    pub request_dist: Option<RequestDist>,
    /// Zipfian exponent θ (of the zipfian and latest request distributions only).
    #[arg(long, default_value_t = 0.99, value_parser = crate::checks::positive)]
    pub theta: f64,
    /// Key set to bulk-load.
    #[arg(long, value_enum, default_value_t = KeyDist::Uniform)]
    pub key_dist: KeyDist,
    /// A SOSD key file to bulk-load instead (u64 count, then sorted u64 keys).
    #[arg(long)]
    pub keys_file: Option<PathBuf>,
    /// The order inserted keys arrive in: `random` (the key distribution's) or `append`
    /// (ascending above every loaded key, as time-stamped keys arrive). Workloads with inserts
    /// only.
    #[arg(long, value_enum, default_value_t = keys::InsertOrder::Random)]
    pub insert_order: keys::InsertOrder,
    /// Model error bound ε.
    #[arg(long, default_value_t = 16, value_parser = crate::checks::epsilon)]
    pub epsilon: u64,
    /// Key slots per leaf δ (at most 4096).
    #[arg(long, default_value_t = 16, value_parser = crate::checks::delta)]
    pub delta: u64,
    /// Keys per bulk-loaded leaf.
    #[arg(long, default_value_t = 12, value_parser = crate::checks::positive_count)]
    pub fill: u64,
    /// Compute-side cache mode.
    #[arg(long, value_enum, default_value_t = CliCacheMode::Pivots)]
    pub cache_mode: CliCacheMode,
    /// What the compute node may cache, for either index: bytes per loaded key (`0.5`) or MiB
    /// per compute node (`64MiB`). ROLEX keeps pivots where they fit and drops them, then
    /// whole slot views, least recently used first; the B+-tree keeps the internal pages it used
    /// most recently. Default: no limit.
    #[arg(long, value_parser = crate::checks::cache_budget)]
    pub cache_budget: Option<crate::checks::CacheBudget>,
    /// Memory nodes (embedded), range-partitioned (at most 64).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::memory_nodes)]
    pub memory_nodes: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    pub seed: u64,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Attach to pool files served by `rolex memnode` instead of embedded memory nodes: one
    /// file, or every memory node's of a deployment (comma-separated, any order).
    #[arg(long, value_delimiter = ',')]
    pub attach: Vec<PathBuf>,
    /// With `--attach`: run even on a pool no `rolex memnode` serves (it stopped, or never
    /// started), with a warning, and without its retrainer and lease watch (the report says
    /// so). Without it such a run is refused. A pool counts as served while a memnode holds its
    /// file's lock, which is asked at once, with no wait.
    #[arg(long)]
    pub allow_unserved: bool,
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
    /// After the run, read back every key this run inserted and report how many are missing
    /// (workloads with inserts only).
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
    /// Cost model: clients to model (default: --threads x --inflight).
    #[arg(long, value_parser = crate::checks::positive_count)]
    pub model_clients: Option<u64>,
}

/// How long a run lasts and how work is offered: `--duration` instead of a count of operations,
/// after a `--warmup`; `--target-rate` for an open-loop run. `rolex bench` and `rolex compare`
/// both take these flags (flattened into each), so they mean the same and are checked the same
/// in both (by [`crate::checks::seconds`], [`crate::checks::warmup`] and
/// [`crate::checks::target_rate`]); each run of `compare`, of each index, is a bench run with
/// them.
/// A command that takes them gives its `--ops` `conflicts_with = "duration"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, clap::Args, serde::Serialize)]
pub struct RunLength {
    /// Run for this many seconds instead of a number of operations (each run, of each index).
    #[arg(long, value_parser = crate::checks::seconds)]
    pub duration: Option<f64>,
    /// Operations to run first and leave out of every figure: a count (`100000`) or seconds
    /// (`2s`). The measured run (`--ops` or `--duration`) starts when it ends.
    #[arg(long, value_parser = crate::checks::warmup)]
    pub warmup: Option<crate::checks::Warmup>,
    /// Open loop: start operations at this many per second in all (each client thread its share,
    /// evenly spaced), however long earlier ones take, and count each one's latency from its
    /// scheduled start — a stall shows in every operation it held up. Without it, each thread
    /// starts an operation when one ends (closed loop).
    #[arg(long, value_name = "OPS", value_parser = crate::checks::target_rate)]
    pub target_rate: Option<f64>,
}

impl RunLength {
    /// The flags as typed (` --duration 2 --warmup 1000 --target-rate 5000`; empty when none was
    /// given).
    pub fn flags(&self) -> String {
        let mut out = String::new();
        if let Some(s) = self.duration {
            out.push_str(&format!(" --duration {s}"));
        }
        if let Some(w) = self.warmup {
            out.push_str(&format!(" --warmup {}", w.flag()));
        }
        if let Some(r) = self.target_rate {
            out.push_str(&format!(" --target-rate {r}"));
        }
        out
    }
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

impl BenchArgs {
    /// The CHIME-style baseline's leaf shape (`--leaf-slots`, `--neighbourhood`); a shape that
    /// cannot be is bad input.
    pub fn hopscotch_shape(&self) -> Result<chime::Geometry, crate::error::CliError> {
        chime::Geometry::new(self.leaf_slots as usize, self.neighbourhood as usize).map_err(|e| {
            crate::error::input!(
                "--leaf-slots {} --neighbourhood {}: {e}",
                self.leaf_slots,
                self.neighbourhood
            )
        })
    }
}
