//! The benchmark report: its JSON schema (stable; documented in the README) and the table.

use crate::error::{CliError, failed};
use std::collections::BTreeMap;

use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    /// The slowest operation (a writer that waited for a dead compute node's lease shows here).
    pub max: f64,
}

impl Latency {
    /// The figures of a histogram of nanoseconds.
    pub fn of(hist: &hdrhistogram::Histogram<u64>) -> Self {
        let us = |ns: u64| ns as f64 / 1e3;
        Self {
            mean: hist.mean() / 1e3,
            p50: us(hist.value_at_quantile(0.5)),
            p90: us(hist.value_at_quantile(0.9)),
            p95: us(hist.value_at_quantile(0.95)),
            p99: us(hist.value_at_quantile(0.99)),
            p999: us(hist.value_at_quantile(0.999)),
            max: us(hist.max()),
        }
    }
}

/// One sample of a run's measured stretch: seconds since it began, operations done,
/// retrainings and their nanoseconds so far.
pub type Sample = (f64, u64, u64, u64);

/// One interval of the throughput series (`--report-interval`).
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    /// Seconds from the start of the measured stretch to the interval's end.
    pub end_s: f64,
    /// The interval's length in seconds.
    pub seconds: f64,
    /// Operations completed in it.
    pub ops: u64,
    pub ops_per_s: f64,
    /// Retrainings the embedded memory nodes completed in it.
    pub retrainings: u64,
    /// The latencies of the operations that completed in it, every type together (null if
    /// none did).
    pub latency_us: Option<Latency>,
    /// Per operation type that had any: its latencies, a compressed HdrHistogram (nanoseconds),
    /// for the histogram log.
    #[serde(skip)]
    pub histograms: Vec<(&'static str, Vec<u8>)>,
    #[serde(skip)]
    pub end: Sample,
}

impl Interval {
    /// The interval from sample `from` to sample `to`.
    pub fn between(from: Sample, to: Sample) -> Self {
        let seconds = to.0 - from.0;
        let ops = to.1.saturating_sub(from.1);
        Self {
            end_s: to.0,
            seconds,
            ops,
            ops_per_s: ops as f64 / seconds.max(1e-9),
            retrainings: to.2.saturating_sub(from.2),
            latency_us: None,
            histograms: Vec::new(),
            end: to,
        }
    }

    /// The line printed as the run goes.
    pub fn line(&self) -> String {
        format!(
            "{:>9.2} s {:>12.0} ops/s {:>6} retrainings",
            self.end_s, self.ops_per_s, self.retrainings
        )
    }
}

/// One entry of the histogram log: from `start_s` seconds into the measured stretch, for
/// `seconds`, operation type `name`'s latencies (nanoseconds).
pub struct LogEntry {
    pub start_s: f64,
    pub seconds: f64,
    pub name: &'static str,
    pub hist: hdrhistogram::Histogram<u64>,
}

/// Writes latency histograms (nanoseconds) to `path` in HdrHistogram's interval log format, an
/// interval per entry tagged with its operation type: one per type spanning the measured runs, or
/// one per type and `--report-interval` (`seconds` in all).
pub fn write_histogram_log(
    path: &std::path::Path,
    entries: &[LogEntry],
    seconds: f64,
) -> Result<(), CliError> {
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let now = std::time::SystemTime::now();
    let start = now
        .checked_sub(std::time::Duration::from_secs_f64(seconds.max(0.0)))
        .unwrap_or(now);
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("rolex bench: operation latencies in nanoseconds, tagged by operation type")
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(1e3)
        .begin_log_with(&mut out, &mut serializer)
        .map_err(|e| failed!("--latency-histogram: {e}"))?;
    let secs = |s: f64| std::time::Duration::from_secs_f64(s.max(0.0));
    for e in entries {
        log.write_histogram(&e.hist, secs(e.start_s), secs(e.seconds), Tag::new(e.name))
            .map_err(|e| failed!("--latency-histogram: {e:?}"))?;
    }
    std::fs::write(path, out).map_err(|e| failed!("{}: {e}", path.display()))
}

/// One operation type's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpReport {
    pub count: u64,
    pub rtts_per_op: f64,
    pub verbs_per_op: f64,
    pub bytes_per_op: f64,
    /// Of `verbs_per_op`, the verbs on a lock table (the B+-tree baseline's; Sherman keeps the
    /// table in NIC memory, so these would be cheaper there).
    pub lock_verbs_per_op: f64,
    pub latency_us: Latency,
}

/// A measured load phase (`--load-phase`, YCSB's `load`): the store's keys inserted by the
/// client threads before the run, reported apart from it.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Keys bulk-loaded before it (one in 100: a store cannot start empty).
    pub bulk_loaded: u64,
    /// Keys it inserted (each added a key).
    pub inserted: u64,
    /// From its first insert to its last thread's last.
    pub wall_seconds: f64,
    pub throughput_ops_s: f64,
    /// Its inserts' counters and latencies.
    pub insert: OpReport,
    /// The cost model's throughput for its inserts (same profile and clients as the run's).
    pub modeled_throughput_ops_s: f64,
    /// With `--check-inserts`: its keys that did not read back right after it (null otherwise).
    pub inserts_missing: Option<u64>,
    /// Ctrl-C stopped it: the run after it did not start.
    pub interrupted: bool,
}

impl LoadReport {
    /// Its line in the human-readable table.
    pub fn line(&self) -> String {
        let i = &self.insert;
        format!(
            "load phase: {} keys inserted after a bulk load of {}, in {}: {:.0} ops/s; per insert {:.3} RTT, {:.2} verbs, {:.1} bytes, p50 {:.2} µs, p99 {:.2} µs; modeled {:.0} ops/s{}{}\n",
            self.inserted,
            self.bulk_loaded,
            duration(self.wall_seconds),
            self.throughput_ops_s,
            i.rtts_per_op,
            i.verbs_per_op,
            i.bytes_per_op,
            i.latency_us.p50,
            i.latency_us.p99,
            self.modeled_throughput_ops_s,
            self.inserts_missing.map_or(String::new(), |m| format!(
                "; {m} of its keys missing after it"
            )),
            if self.interrupted {
                " (interrupted by Ctrl-C)"
            } else {
                ""
            }
        )
    }
}

/// The network cost model's figures — always labelled as modeled.
#[derive(Debug, Clone, Serialize)]
pub struct Modeled {
    pub profile: Profile,
    pub clients: u64,
    /// Mean modeled latency per operation, over all operations.
    pub latency_us: f64,
    /// Modeled latency per operation type.
    pub latency_us_by_op: BTreeMap<String, f64>,
    pub throughput_ops_s: f64,
}

/// The network profile used.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub rtt_us: f64,
    pub link_gbps: f64,
    pub nic_verbs_per_s: f64,
    pub nic_bytes_per_s: f64,
}

/// What the embedded memory nodes' retrainers did, and how full their pools ended (summed over
/// memory nodes).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetrainerSummary {
    pub retrains: u64,
    /// Retrainings that split their slot in two, publishing a new slot.
    pub slot_splits: u64,
    /// Slots at the end, and the most the slot tables hold.
    pub slots: u64,
    pub slot_capacity: u64,
    /// Slots queued or put off and not yet retrained at the end.
    pub backlog: u64,
    /// Attempts put off because a leaf lock stayed held, because the model region was full, or
    /// for another reason (a transient fault, an unreadable record).
    pub put_off_leaf_locked: u64,
    pub put_off_model_region_full: u64,
    pub put_off_other: u64,
    pub records_reclaimed: u64,
    /// Leaves the orphan sweep found held by nobody and handed out again.
    pub orphans_reclaimed: u64,
    pub leaf_capacity: u64,
    pub leaves_allocated: u64,
    /// Allocated leaves on the free list, waiting to be handed out again.
    pub leaves_free_listed: u64,
    /// Leaves the memory node handed out through compute nodes' leaf boxes.
    pub leaves_granted: u64,
    pub model_region_bytes: u64,
    pub model_bytes_used: u64,
}

impl RetrainerSummary {
    /// One worker's figures.
    pub fn of<E: rdma_transport::Endpoint>(
        worker: &retrainer::Retrainer<E>,
        stats: retrainer::RetrainStats,
        pool: retrainer::PoolUsage,
    ) -> Self {
        Self {
            retrains: stats.retrains,
            slot_splits: stats.splits,
            slots: pool.slots,
            slot_capacity: pool.slot_capacity,
            backlog: (worker.pending() + worker.deferred().len()) as u64,
            put_off_leaf_locked: stats.leaf_locked,
            put_off_model_region_full: stats.model_region_full,
            put_off_other: stats.errors,
            records_reclaimed: stats.reclaimed_records,
            orphans_reclaimed: stats.orphans_reclaimed,
            leaf_capacity: pool.leaf_capacity,
            leaves_allocated: pool.leaves_allocated,
            leaves_free_listed: pool.leaves_free_listed,
            leaves_granted: worker.member_stats().map_or(0, |m| m.leaves_granted),
            model_region_bytes: pool.model_region_bytes,
            model_bytes_used: pool.model_bytes_used,
        }
    }

    /// Two memory nodes' figures together.
    pub fn plus(&self, other: &Self) -> Self {
        Self {
            retrains: self.retrains + other.retrains,
            slot_splits: self.slot_splits + other.slot_splits,
            slots: self.slots + other.slots,
            slot_capacity: self.slot_capacity + other.slot_capacity,
            backlog: self.backlog + other.backlog,
            put_off_leaf_locked: self.put_off_leaf_locked + other.put_off_leaf_locked,
            put_off_model_region_full: self.put_off_model_region_full
                + other.put_off_model_region_full,
            put_off_other: self.put_off_other + other.put_off_other,
            records_reclaimed: self.records_reclaimed + other.records_reclaimed,
            orphans_reclaimed: self.orphans_reclaimed + other.orphans_reclaimed,
            leaf_capacity: self.leaf_capacity + other.leaf_capacity,
            leaves_allocated: self.leaves_allocated + other.leaves_allocated,
            leaves_free_listed: self.leaves_free_listed + other.leaves_free_listed,
            leaves_granted: self.leaves_granted + other.leaves_granted,
            model_region_bytes: self.model_region_bytes + other.model_region_bytes,
            model_bytes_used: self.model_bytes_used + other.model_bytes_used,
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `schema_version`, `tool_version`, `timestamp` (when the run ended).
    #[serde(flatten)]
    pub stamp: Stamp,
    /// `rolex`, `bplus` or `chime`.
    pub index: &'static str,
    pub config: serde_json::Value,
    pub wall_seconds: f64,
    pub throughput_ops_s: f64,
    pub ops: BTreeMap<String, OpReport>,
    pub cache_bytes: u64,
    pub cache_bytes_per_key: f64,
    /// What the compute node could cache (`--cache-budget`; null: no limit).
    pub cache_budget_bytes: Option<u64>,
    pub models: u64,
    pub leaves: u64,
    pub synonym_leaves: u64,
    pub keys_after: u64,
    pub retrains: Option<u64>,
    /// The embedded memory nodes' retrainers and pools at the end (null when attached).
    pub retrainer: Option<RetrainerSummary>,
    /// The verify walk found the pool clean (`verify` is `clean`).
    pub verify_clean: bool,
    /// `clean`, `problems` or `inconclusive` (see [`crate::verdict`]).
    pub verify: &'static str,
    /// Verify walks made (problems found in a walk have it walked again).
    pub verify_walks: usize,
    /// The problems every walk found, described (at most 20; empty unless `verify` is
    /// `problems`).
    pub verify_problems: Vec<String>,
    /// The verdict itself.
    #[serde(skip)]
    pub verdict: crate::verdict::Verdict,
    /// With `--attach --allow-unserved`: the pool files no memory node served when the run
    /// started, so no retrainer ran for them (empty otherwise).
    pub unserved_pools: Vec<String>,
    /// Inserts that added a key.
    pub inserted: u64,
    /// Fresh endpoints client threads needed after theirs broke (each operation that met a broken
    /// endpoint was tried once more on the fresh one).
    pub reconnects: u64,
    /// How long opening the store took (joining every memory node and reading every record;
    /// null for the B+-tree baseline).
    pub open_seconds: Option<f64>,
    pub inserts_missing: Option<u64>,
    /// The measured load phase before the run (`--load-phase`; null without it).
    pub load: Option<LoadReport>,
    /// Throughput and retraining in the first and the last tenth of the operations done while
    /// every thread ran (how the store holds up as the data grows).
    pub phases: Phases,
    /// Operations run before the measured ones (`--warmup`) and left out of every figure.
    pub warmup_ops: u64,
    /// Open loop (`--target-rate`): operations per second offered, in all; latencies count from
    /// each operation's scheduled start. Null for a closed-loop run.
    pub target_rate: Option<f64>,
    /// Throughput per `--report-interval` over the measured stretch (empty without it).
    pub intervals: Vec<Interval>,
    /// Ctrl-C stopped the run: its figures cover the operations done until then.
    pub interrupted: bool,
    /// Each operation type's latencies, in nanoseconds (written by `--latency-histogram`).
    #[serde(skip)]
    pub latency_histograms: Vec<(&'static str, hdrhistogram::Histogram<u64>)>,
    /// The embedded pools' leaf bytes allocated plus model bytes in use, per key at the end.
    pub pool_bytes_per_key: Option<f64>,
    /// With byte values (`--value-size`): what the memory nodes' value regions hold at the end.
    pub values: Option<ValuesReport>,
    pub modeled: Modeled,
}

/// The value regions at the end of a run with byte values.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ValuesReport {
    /// Bytes of the values stored.
    pub live_bytes: u64,
    /// Blocks in use (one per key).
    pub blocks: u64,
    /// Bytes of those blocks (24 bytes of key, length and checksum each, and size-class rounding).
    pub block_bytes: u64,
    /// Bytes of the chunks compute nodes claimed (what the values occupy, free blocks included).
    pub allocated_bytes: u64,
    /// Value bytes the operations moved (read or written), per operation.
    pub value_bytes_per_op: f64,
}

/// The version of the JSON layout of `rolex bench`'s reports (`bench`, `bench --runs`, and each
/// run report `compare`'s JSON holds): raised when a field changes meaning or goes away.
///
/// 2: `compare`'s ratios over `--runs` are the ratios of the two indexes' mean figures with a
/// 95% interval (`{ratio, ci95, n}`), no longer the means of per-run ratios, and its `spread` no
/// longer holds ratios. `bench`'s reports are as in 1. From 3 on, `compare`'s JSON as a whole
/// carries its own version (`compare::COMPARE_SCHEMA_VERSION`), so that a change of its layout
/// leaves `bench`'s version alone.
pub const SCHEMA_VERSION: u32 = 2;

/// What every JSON report of `rolex` begins with (flattened into it): which layout it has,
/// which `rolex` wrote it, and when.
#[derive(Debug, Clone, Serialize)]
pub struct Stamp {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The `rolex` that wrote it (the crate's version).
    pub tool_version: &'static str,
    /// When the report was made (a run's: when the run ended), UTC, RFC 3339.
    pub timestamp: String,
}

impl Stamp {
    /// The stamp of a report made now.
    pub fn now() -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            tool_version: env!("CARGO_PKG_VERSION"),
            timestamp: utc_now(),
        }
    }
}

/// The time now, UTC, as RFC 3339 (`2026-11-24T20:22:15Z`).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the Unix epoch as RFC 3339, UTC (days to a civil date after H. Hinnant).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// See [`Report::phases`]: the first and the last tenth of the operations done while every
/// thread ran (until the first finished its share), each `null` when the run was too short to
/// sample it (samples every 5 ms).
#[derive(Debug, Clone, Serialize)]
pub struct Phases {
    pub first_tenth: Option<Phase>,
    pub last_tenth: Option<Phase>,
}

/// One stretch of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    pub seconds: f64,
    pub ops_per_s: f64,
    /// Retrainings completed per second (embedded retrainers only).
    pub retrainings_per_s: f64,
    /// Mean time of one retraining, in µs (null if none completed).
    pub us_per_retraining: Option<f64>,
}

impl Report {
    /// Whether the run drove one of the baselines on `bplus-tree` (internal pages, a lock table).
    fn is_tree(&self) -> bool {
        self.index == "bplus" || self.index == "chime"
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        // What ran, from the configuration the report carries.
        let c = &self.config;
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "-".into(),
            other => other.to_string(),
        };
        let dist = text(&c["mix"]["request_dist"]);
        let keys_from = match &c["keys_file"] {
            serde_json::Value::String(path) => format!("from {path}"),
            _ if c["attach"].as_array().is_some_and(|a| !a.is_empty()) => {
                "of the attached pool".into()
            }
            _ => format!("{} distribution", text(&c["key_dist"])),
        };
        out.push_str(&format!(
            "workload {}, {} requests{}, {} keys loaded ({keys_from}), {} operations on {} threads\n",
            text(&c["workload"]),
            dist,
            if dist == "zipfian" {
                format!(" (θ {})", text(&c["theta"]))
            } else {
                String::new()
            },
            text(&c["keys_loaded"]),
            text(&c["ops_run"]),
            text(&c["threads"]),
        ));
        if c["leaves_sized_for_budget"] == true {
            out.push_str(&format!(
                "leaves sized for the cache budget: {} keys in leaves of {} slots (--delta and --fill choose otherwise)\n",
                text(&c["fill"]),
                text(&c["delta"]),
            ));
        }
        if let Some(load) = &self.load {
            out.push_str(&load.line());
        }
        if self.interrupted {
            out.push_str("interrupted (Ctrl-C): the figures cover the operations run until then\n");
        }
        if let (Some(min), Some(max)) = (
            c["value_size"]["min"].as_u64(),
            c["value_size"]["max"].as_u64(),
        ) {
            let size = if min == max {
                format!("{min}-byte values")
            } else {
                format!("values of {min}-{max} bytes (uniform)")
            };
            let source = c["value_source"]
                .as_str()
                .map_or("--value-size".to_string(), str::to_string);
            out.push_str(&format!("{size} ({source})\n"));
        }
        out.push_str(&format!(
            "measured on the simulator ({}): {:.0} ops/s over {}; cache {} bytes ({:.3} per key{}); {} {}, {} leaves ({} synonym){}\n",
            self.index,
            self.throughput_ops_s,
            duration(self.wall_seconds),
            self.cache_bytes,
            self.cache_bytes_per_key,
            self.cache_budget_bytes
                .map_or(String::new(), |b| format!(", budget {b} bytes")),
            self.models,
            if self.is_tree() {
                "internal pages"
            } else {
                "models"
            },
            self.leaves,
            self.synonym_leaves,
            self.retrains.map_or(String::new(), |r| format!(", {r} retrains"))
        ));
        if let Some(open) = self.open_seconds {
            out.push_str(&format!(
                "store opened (joined every memory node, read every record) in {}\n",
                duration(open)
            ));
        }
        // The baselines' lock-table verbs, a part of their verbs/op (ROLEX locks in the leaf
        // table's entries, which its verbs/op already counts).
        let locks = self.is_tree();
        let lock_column = |s: String| if locks { s } else { String::new() };
        if self.warmup_ops > 0 {
            out.push_str(&format!(
                "warm-up: {} operations first, left out of every figure\n",
                self.warmup_ops
            ));
        }
        if let Some(rate) = self.target_rate {
            out.push_str(&format!(
                "open loop: {rate:.0} ops/s offered, {:.0} done{}; latencies from each operation's scheduled start\n",
                self.throughput_ops_s,
                if self.throughput_ops_s < 0.95 * rate {
                    " (the store fell behind: operations waited, and their latencies say how long)"
                } else {
                    ""
                }
            ));
        }
        out.push_str(&format!(
            "{:<8} {:>10} {:>8} {:>9}{} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>12}\n",
            "op",
            "count",
            "rtt/op",
            "verbs/op",
            lock_column(format!(" {:>8}", "lock/op")),
            "bytes/op",
            "mean µs",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
            "modeled µs"
        ));
        for (name, op) in &self.ops {
            out.push_str(&format!(
                "{:<8} {:>10} {:>8.3} {:>9.2}{} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>12.2}\n",
                name,
                op.count,
                op.rtts_per_op,
                op.verbs_per_op,
                lock_column(format!(" {:>8.2}", op.lock_verbs_per_op)),
                op.bytes_per_op,
                op.latency_us.mean,
                op.latency_us.p50,
                op.latency_us.p90,
                op.latency_us.p99,
                op.latency_us.p999,
                op.latency_us.max,
                self.modeled
                    .latency_us_by_op
                    .get(name)
                    .copied()
                    .unwrap_or(0.0)
            ));
        }
        out.push_str(&format!(
            "modeled (RTT {} µs, {} Gb/s, NIC {:.0} Mverbs/s): {:.2} µs per op, {:.0} ops/s with {} clients\n",
            self.modeled.profile.rtt_us,
            self.modeled.profile.link_gbps,
            self.modeled.profile.nic_verbs_per_s / 1e6,
            self.modeled.latency_us,
            self.modeled.throughput_ops_s,
            self.modeled.clients
        ));
        if locks {
            out.push_str(
                "lock/op: of verbs/op, those on the B+-tree's lock table (Sherman keeps it in NIC memory)\n",
            );
        }
        if !self.unserved_pools.is_empty() {
            out.push_str(&format!(
                "retrainer: none ran: no memory node served {} when the run started (--allow-unserved), so nothing was retrained and no dead compute node recovered\n",
                self.unserved_pools.join(", ")
            ));
        }
        if let Some(r) = &self.retrainer {
            out.push_str(&format!(
                "retrainer: {} retrainings ({} slot splits; {} slots in use, room for {}), backlog {}, put off {} (held lock) / {} (model region full) / {} (other); pool: {} of {} leaves allocated ({} on the retrainer's free list, {} given to compute nodes through their leaf boxes), model region {}/{} KiB used\n",
                r.retrains,
                r.slot_splits,
                r.slots,
                r.slot_capacity,
                r.backlog,
                r.put_off_leaf_locked,
                r.put_off_model_region_full,
                r.put_off_other,
                r.leaves_allocated,
                r.leaf_capacity,
                r.leaves_free_listed,
                r.leaves_granted,
                r.model_bytes_used / 1024,
                r.model_region_bytes / 1024
            ));
        }
        if self.phases.first_tenth.is_none() || self.phases.last_tenth.is_none() {
            out.push_str(
                "phases: too short a run to measure its first and last tenth apart (sampled every 5 ms)\n",
            );
        }
        if let (Some(first), Some(last), None) = (
            &self.phases.first_tenth,
            &self.phases.last_tenth,
            &self.retrainer,
        ) {
            out.push_str(&format!(
                "while every thread ran, first tenth of its operations: {:.0} ops/s; last tenth: {:.0} ops/s\n",
                first.ops_per_s, last.ops_per_s
            ));
        }
        if let (Some(first), Some(last), Some(_)) = (
            &self.phases.first_tenth,
            &self.phases.last_tenth,
            &self.retrainer,
        ) {
            let us = |p: &Phase| {
                p.us_per_retraining
                    .map_or_else(|| "-".to_string(), |u| format!("{u:.0}"))
            };
            out.push_str(&format!(
                "while every thread ran, first tenth of its operations: {:.0} ops/s, {:.0} retrainings/s, {} µs each; last tenth: {:.0} ops/s, {:.0} retrainings/s, {} µs each\n",
                first.ops_per_s,
                first.retrainings_per_s,
                us(first),
                last.ops_per_s,
                last.retrainings_per_s,
                us(last)
            ));
        }
        if let Some(bytes) = self.pool_bytes_per_key {
            out.push_str(&format!("pool: {bytes:.1} bytes per key at the end\n"));
        }
        if let Some(v) = &self.values {
            out.push_str(&format!(
                "values: {:.1} value bytes moved per operation; at the end {} live bytes in {} blocks ({} bytes), {} bytes of chunks allocated ({:.2}x the live bytes)\n",
                v.value_bytes_per_op,
                v.live_bytes,
                v.blocks,
                v.block_bytes,
                v.allocated_bytes,
                v.allocated_bytes as f64 / v.live_bytes.max(1) as f64
            ));
        }
        out.push_str(&crate::verdict::line(&self.verdict, self.verify_walks));
        out.push('\n');
        out
    }
}

/// A run's length for people: seconds, or milliseconds for a run too short to show in seconds.
pub fn duration(seconds: f64) -> String {
    if seconds >= 0.1 {
        format!("{seconds:.2} s")
    } else if seconds >= 0.001 {
        format!("{:.1} ms", seconds * 1e3)
    } else {
        format!("{:.0} µs", seconds * 1e6)
    }
}

/// The mean of `f` over a report's operations, weighted by their counts.
pub fn weighted(report: &Report, f: impl Fn(&OpReport) -> f64) -> f64 {
    let ops: u64 = report.ops.values().map(|o| o.count).sum();
    report
        .ops
        .values()
        .map(|o| f(o) * o.count as f64)
        .sum::<f64>()
        / ops.max(1) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_795_551_735), "2026-11-24T20:22:15Z");
    }
}

/// Repeated runs (`--runs N`): every run's report and the spread of its figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunsReport {
    #[serde(flatten)]
    pub stamp: Stamp,
    pub runs: Vec<Report>,
    pub spread: RunsSpread,
    /// Ctrl-C stopped the last run (and the runs after it never started).
    pub interrupted: bool,
}

/// The spread of a run's figures over repeated runs.
#[derive(Debug, Clone, Serialize)]
pub struct RunsSpread {
    pub throughput_ops_s: crate::spread::Spread,
    pub modeled_throughput_ops_s: crate::spread::Spread,
    pub ops: BTreeMap<String, OpSpread>,
}

/// The spread of one operation type's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpSpread {
    pub rtts_per_op: crate::spread::Spread,
    pub bytes_per_op: crate::spread::Spread,
    /// Latency figures in µs, by name (mean, p50, p90, p95, p99, p999, max).
    pub latency_us: BTreeMap<&'static str, crate::spread::Spread>,
}

impl RunsSpread {
    /// The spread over `runs` (at least one).
    pub fn of(runs: &[Report]) -> Option<Self> {
        use crate::spread::Spread;
        let over = |f: &dyn Fn(&Report) -> Option<f64>| -> Option<Spread> {
            Spread::of(&runs.iter().filter_map(f).collect::<Vec<_>>())
        };
        let mut ops = BTreeMap::new();
        for name in runs.first()?.ops.keys() {
            let op = |f: fn(&OpReport) -> f64| over(&|r: &Report| r.ops.get(name).map(f));
            let mut latency_us = BTreeMap::new();
            for (figure, pick) in [
                ("mean", (|l: &Latency| l.mean) as fn(&Latency) -> f64),
                ("p50", |l| l.p50),
                ("p90", |l| l.p90),
                ("p95", |l| l.p95),
                ("p99", |l| l.p99),
                ("p999", |l| l.p999),
                ("max", |l| l.max),
            ] {
                if let Some(s) = over(&|r: &Report| r.ops.get(name).map(|o| pick(&o.latency_us))) {
                    latency_us.insert(figure, s);
                }
            }
            ops.insert(
                name.clone(),
                OpSpread {
                    rtts_per_op: op(|o| o.rtts_per_op)?,
                    bytes_per_op: op(|o| o.bytes_per_op)?,
                    latency_us,
                },
            );
        }
        Some(Self {
            throughput_ops_s: over(&|r: &Report| Some(r.throughput_ops_s))?,
            modeled_throughput_ops_s: over(&|r: &Report| Some(r.modeled.throughput_ops_s))?,
            ops,
        })
    }

    /// The text printed after the runs.
    pub fn table(&self) -> String {
        let n = self.throughput_ops_s.n;
        let mut out = format!(
            "over {n} runs, mean ± standard deviation [min–max]:\nthroughput (measured)  {} ops/s\nthroughput (modeled)   {} ops/s\n",
            self.throughput_ops_s.show(0),
            self.modeled_throughput_ops_s.show(0)
        );
        for (name, op) in &self.ops {
            let lat = |f: &str| op.latency_us.get(f).map_or("-".into(), |s| s.show(2));
            out.push_str(&format!(
                "{name:<7} rtt/op {}; bytes/op {}\n        p50 {} µs; p99 {} µs; p99.9 {} µs\n",
                op.rtts_per_op.show(3),
                op.bytes_per_op.show(1),
                lat("p50"),
                lat("p99"),
                lat("p999"),
            ));
        }
        out
    }
}
