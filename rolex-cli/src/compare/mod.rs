//! `rolex compare`: ROLEX and the baselines `--index` names — the Sherman-style B+-tree and the
//! CHIME-style index — on the same keys, the same operation streams and the same transport: YCSB
//! A–F and a write-ratio sweep, under uniform and zipfian requests, then YCSB C and A at a range
//! of compute-side cache budgets (`budget.rs`); a table of ROLEX's ratios over each baseline, a
//! JSON report and SVG plots (`plots.rs`).

mod budget;
mod plots;
mod rate;

use crate::error::{CliError, failed, input};
use std::io::Write as _;
use std::path::PathBuf;

use rdma_transport::Stats;
use sim_transport::cost_model::NetworkProfile;

use crate::bench::{self, BenchArgs};
use crate::index::IndexKind;
use crate::report::{Report, weighted};
use crate::spread::{RatioOfMeans, Spread};
use crate::workload::{self, RequestDist, Workload};

/// What `rolex compare` takes.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The indexes to run, comma-separated: rolex and at least one baseline (bplus: the
    /// Sherman-style B+-tree; chime: the CHIME-style index). Order and repeats do not matter:
    /// each runs once per case and run, ROLEX first, then the B+-tree, then CHIME.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "rolex,bplus,chime"
    )]
    pub index: Vec<IndexKind>,
    /// Keys bulk-loaded for each run (every index loads the same keys).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::checks::positive_count)]
    pub keys: u64,
    /// Operations per run.
    #[arg(long, default_value_t = 1_000_000, conflicts_with = "duration",
          value_parser = crate::checks::positive_count)]
    pub ops: u64,
    /// `--duration` and `--warmup`, as `rolex bench` takes them, for every run of every index
    /// (the budget sweep's included).
    #[command(flatten)]
    pub length: bench::RunLength,
    /// Compute threads (measured runs; at most 128).
    #[arg(long, default_value_t = 2, value_parser = crate::checks::threads)]
    pub threads: u64,
    /// Operations each thread keeps in flight, for every index (CHIME's and SMART's runs use
    /// 2); every modeled figure counts threads x inflight clients.
    #[arg(long, default_value_t = 2, value_parser = crate::checks::inflight)]
    pub inflight: u64,
    /// Seed of the keys and operation streams (the same for every index).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    pub seed: u64,
    /// Write the JSON report here (every run's full report and the ratios).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Directory for the table and the SVG plots (made if missing, when its parent exists).
    #[arg(long, default_value = "compare")]
    pub out: PathBuf,
    /// B+-tree page size in bytes (default: 1024, Sherman's 1 KiB). Only with bplus among
    /// `--index`: the CHIME-style index sizes its pages to its hopscotch leaves.
    #[arg(long, value_parser = crate::checks::page_size)]
    pub page_size: Option<u64>,
    /// Every index stores byte values of this many bytes (`N`, or `MIN-MAX` uniform; at most
    /// 65536) in value blocks, instead of 8-byte values.
    #[arg(long, value_parser = crate::checks::value_size)]
    pub value_size: Option<crate::checks::ValueSize>,
    /// Run every case this many times per index (run i uses seed + i) and report ratios and
    /// throughput as mean ± standard deviation, with error bars in the plots (at most 100).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::runs)]
    pub runs: u64,
    /// What each compute node may cache, for every index, in every case of the table:
    /// bytes per key (`0.5`) or MiB per compute node (`64MiB`). Default: no limit.
    #[arg(long, value_parser = crate::checks::cache_budget)]
    pub cache_budget: Option<crate::checks::CacheBudget>,
    /// The cache budgets (bytes per key) at which YCSB C and A (uniform requests) are run again,
    /// for every index, for the plot of throughput against the budget.
    #[arg(long, value_delimiter = ',', default_value = "0.05,0.1,0.2,0.5,1,2",
          value_parser = crate::checks::budget_per_key)]
    pub budget_sweep: Vec<f64>,
    /// Leave the budget sweep out.
    #[arg(long, conflicts_with = "budget_sweep")]
    pub no_budget_sweep: bool,
    /// Open-loop rates (operations per second, comma-separated) at which YCSB C and A (uniform
    /// requests) are run again, for every index, each at `--target-rate` the rate: measured
    /// throughput and latency from scheduled starts, a table and a plot of latency against
    /// throughput per workload. Each point runs `--duration`, or `--ops` up to five seconds'
    /// worth. Default: none.
    #[arg(long, value_delimiter = ',', value_name = "OPS,...",
          value_parser = crate::checks::target_rate)]
    pub rate_sweep: Vec<f64>,
    /// Hide progress.
    #[arg(long)]
    pub quiet: bool,
}

/// Every index `rolex compare` can run, in the order it runs them (ROLEX, then the baselines).
const INDEXES: [IndexKind; 3] = [IndexKind::Rolex, IndexKind::Bplus, IndexKind::Chime];

/// How the table, the plots and their legends name an index.
pub(crate) fn label(index: IndexKind) -> &'static str {
    match index {
        IndexKind::Rolex => "ROLEX",
        IndexKind::Bplus => "B+-tree",
        IndexKind::Chime => "CHIME",
    }
}

/// The indexes `--index` names, each once, ROLEX first, checked before any work: ROLEX and at
/// least one baseline, and `--page-size` only with the B+-tree among them.
fn lineup(args: &CompareArgs) -> Result<Vec<IndexKind>, CliError> {
    let listed = args
        .index
        .iter()
        .map(|i| i.name())
        .collect::<Vec<_>>()
        .join(",");
    let indexes: Vec<IndexKind> = INDEXES
        .into_iter()
        .filter(|i| args.index.contains(i))
        .collect();
    if !indexes.contains(&IndexKind::Rolex) {
        return Err(input!(
            "--index {listed}: rolex must be among the indexes (compare gives ROLEX's figures over each baseline's)"
        ));
    }
    if indexes.len() < 2 {
        return Err(input!(
            "--index {listed}: name a baseline to compare ROLEX with (bplus, chime or both)"
        ));
    }
    if args.page_size.is_some() && !indexes.contains(&IndexKind::Bplus) {
        return Err(input!(
            "--page-size is the B+-tree's; --index {listed} runs no B+-tree (the CHIME-style index sizes its pages to its hopscotch leaves)"
        ));
    }
    Ok(indexes)
}

/// One figure per index that ran, in the comparison's order (ROLEX first); in the JSON an
/// object keyed by index name (`rolex`, `bplus`, `chime`), with no key for an index that did
/// not run.
#[derive(Debug, Clone)]
struct ByIndex<T>(Vec<(IndexKind, T)>);

impl<T> ByIndex<T> {
    /// `index`'s figure, if it ran.
    fn get(&self, index: IndexKind) -> Option<&T> {
        self.0.iter().find(|(i, _)| *i == index).map(|(_, t)| t)
    }

    /// Each index's figure, in order.
    fn iter(&self) -> impl Iterator<Item = (IndexKind, &T)> {
        self.0.iter().map(|(i, t)| (*i, t))
    }

    /// `f` of each index's figure.
    fn map<U>(&self, mut f: impl FnMut(IndexKind, &T) -> U) -> ByIndex<U> {
        ByIndex(self.iter().map(|(i, t)| (i, f(i, t))).collect())
    }
}

impl<T: serde::Serialize> serde::Serialize for ByIndex<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (index, figure) in &self.0 {
            map.serialize_entry(index.name(), figure)?;
        }
        map.end()
    }
}

/// One workload of the comparison.
#[derive(Debug, Clone, serde::Serialize)]
struct Case {
    name: String,
    dist: String,
    /// Insert share, for the write-ratio sweep.
    insert_ratio: Option<f64>,
    /// The first run of each index, under its name: `rolex`, and `bplus` and `chime` where
    /// they ran.
    #[serde(flatten)]
    reports: ByIndex<Report>,
    /// Runs 2 to N with `--runs N` (empty otherwise), each `{rolex, bplus, chime}` as above.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repeats: Vec<ByIndex<Report>>,
    /// ROLEX over each baseline, under the baseline's name (`bplus`, `chime`): the ratio of the
    /// means over the runs, with a 95% interval.
    ratios: ByIndex<Ratios>,
    /// With `--runs N > 1`: each index's figures over the runs, under its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    spread: Option<ByIndex<IndexSpread>>,
}

impl Case {
    /// `index`'s first run, if it ran.
    fn report(&self, index: IndexKind) -> Option<&Report> {
        self.reports.get(index)
    }

    /// Every run of `index` (none if it did not run).
    fn runs(&self, index: IndexKind) -> Vec<&Report> {
        self.report(index)
            .into_iter()
            .chain(self.repeats.iter().filter_map(|r| r.get(index)))
            .collect()
    }
}

/// One index's figures over a case's runs (the ratios between indexes are in [`Ratios`]).
#[derive(Debug, Clone, serde::Serialize)]
struct IndexSpread {
    throughput_ops_s: Spread,
    modeled_64_threads_ops_s: Spread,
    modeled_2_threads_ops_s: Spread,
}

/// ROLEX's figure over one baseline's (> 1: ROLEX ahead, for throughput; < 1: ROLEX moves
/// fewer bytes): each the ratio of the two indexes' means over the runs, with its 95% interval
/// (Fieller's, runs paired by seed; none with one run) — see [`RatioOfMeans`] for why.
#[derive(Debug, Clone, serde::Serialize)]
struct Ratios {
    measured_throughput: RatioOfMeans,
    modeled_throughput: RatioOfMeans,
    /// The same at 64 modeled threads, each with `inflight` operations in flight (where the
    /// memory node's NIC, not the round trips, bounds throughput).
    modeled_throughput_64_threads: RatioOfMeans,
    bytes_per_op: RatioOfMeans,
    rtts_per_op: RatioOfMeans,
}

/// What every case's `ratios` hold, as the JSON says it (`ratio_statistic`).
const RATIO_STATISTIC: &str = "under each baseline's name (bplus, chime): ROLEX's mean over that baseline's mean over the runs; ci95: 95% confidence interval by Fieller's method, runs paired by seed, cut at 0 (null with one run; low and high null when unbounded)";

/// The version of `rolex compare --json`'s layout as a whole (its `schema_version`); the run
/// reports it holds carry their own, [`crate::report::SCHEMA_VERSION`].
///
/// 3: more than one baseline — each case holds each baseline's report under its name (`bplus`,
/// `chime`), `ratios` and `spread` are keyed by index name, `clients_sweep` points hold
/// `ops_s: {rolex, bplus, chime}`, `budget_sweep` points each index's figures under its name,
/// and `indexes` lists the indexes run; later, fields added (`rate_sweep`, `target_rate`), none
/// changed. (2: the ratios of means with an interval.)
const COMPARE_SCHEMA_VERSION: u32 = 3;

/// The whole comparison, as written to `--json`.
#[derive(Debug, serde::Serialize)]
struct Comparison {
    /// `schema_version` ([`COMPARE_SCHEMA_VERSION`]), `tool_version`, `timestamp` (when the
    /// comparison ended), as in `rolex bench`'s reports.
    #[serde(flatten)]
    stamp: crate::report::Stamp,
    /// The indexes run, ROLEX first.
    indexes: Vec<&'static str>,
    keys: u64,
    /// Operations per run (null: each run lasted `duration` seconds instead).
    ops: Option<u64>,
    /// `duration` (seconds per run) and `warmup` (null where not given).
    #[serde(flatten)]
    length: bench::RunLength,
    threads: u64,
    runs: u64,
    /// Byte values' length bounds (absent: 8-byte values).
    value_size: Option<crate::checks::ValueSize>,
    cases: Vec<Case>,
    /// Operations in flight per thread.
    inflight: u64,
    /// Modeled throughput of YCSB A and C (zipfian) for 1–128 modeled threads x `inflight`.
    clients_sweep: Vec<ClientPoint>,
    /// The compute-side cache budget of the cases (absent: no limit).
    cache_budget: Option<crate::checks::CacheBudget>,
    /// YCSB C and A (uniform) at each budget of `--budget-sweep`.
    budget_sweep: Vec<BudgetPoint>,
    /// YCSB C and A (uniform) at each open-loop rate of `--rate-sweep`: measured throughput and
    /// latencies from scheduled starts.
    rate_sweep: Vec<rate::RatePoint>,
    /// How each case's `ratios` are computed ([`RATIO_STATISTIC`]).
    ratio_statistic: &'static str,
    /// Ctrl-C stopped the comparison: `cases` and the sweeps hold what finished before.
    interrupted: bool,
}

/// One workload at one cache budget: each index's figures, under its name.
#[derive(Debug, Clone, serde::Serialize)]
struct BudgetPoint {
    workload: String,
    budget_bytes_per_key: f64,
    #[serde(flatten)]
    indexes: ByIndex<BudgetFigures>,
}

/// One index's run at one cache budget: modeled throughput at 64 threads x `inflight`, what it
/// cached, and its round trips and bytes per operation.
#[derive(Debug, Clone, serde::Serialize)]
struct BudgetFigures {
    ops_s: f64,
    cache_bytes_per_key: f64,
    rtts_per_op: f64,
    bytes_per_op: f64,
}

/// Modeled throughput of every index at one count of modeled threads.
#[derive(Debug, Clone, serde::Serialize)]
struct ClientPoint {
    workload: String,
    /// Modeled threads.
    threads: u64,
    /// Modeled clients: threads x operations in flight per thread.
    clients: u64,
    /// Each index's modeled operations per second, under its name.
    ops_s: ByIndex<f64>,
}

/// The bench run of `index` with seed `seed` that every case starts from: the comparison's
/// sizes, threads, page size and values, quietly.
fn run_of(args: &CompareArgs, defaults: &BenchArgs, index: IndexKind, seed: u64) -> BenchArgs {
    let mut run = defaults.clone();
    run.index = index;
    if let Some(page_size) = args.page_size {
        run.page_size = page_size;
    }
    run.keys = args.keys;
    run.ops = args.ops;
    run.length = args.length;
    run.threads = args.threads;
    run.inflight = args.inflight;
    run.seed = seed;
    run.value_size = args.value_size;
    run.quiet = true;
    run
}

/// Totals of a report's operations as endpoint counters (for the cost model at other client
/// counts): round trips, verbs and bytes.
fn totals(report: &Report) -> (Stats, u64) {
    let mut net = Stats::default();
    let mut ops = 0;
    for op in report.ops.values() {
        let n = op.count as f64;
        net.batches += (op.rtts_per_op * n).round() as u64;
        net.reads += (op.verbs_per_op * n).round() as u64;
        net.bytes_read += (op.bytes_per_op * n).round() as u64;
        ops += op.count;
    }
    (net, ops)
}

/// Round trips per operation, over all the run's operation types.
fn rtts(report: &Report) -> f64 {
    weighted(report, |o| o.rtts_per_op)
}

/// Verbs per operation, over all the run's operation types.
fn verbs(report: &Report) -> f64 {
    weighted(report, |o| o.verbs_per_op)
}

/// Bytes per operation, over all the run's operation types.
fn bytes(report: &Report) -> f64 {
    weighted(report, |o| o.bytes_per_op)
}

/// ROLEX's figures over `baseline`'s across a case's `runs` (each holding both).
fn ratios_over(
    runs: &[ByIndex<Report>],
    baseline: IndexKind,
    inflight: u64,
    profile: &NetworkProfile,
) -> Result<Ratios, CliError> {
    let of_means = |f: &dyn Fn(&Report) -> f64| -> Result<RatioOfMeans, CliError> {
        let figures: Vec<(f64, f64)> = runs
            .iter()
            .filter_map(|run| Some((f(run.get(IndexKind::Rolex)?), f(run.get(baseline)?))))
            .collect();
        RatioOfMeans::of(&figures)
            .ok_or_else(|| failed!("a case ran no run of ROLEX and {}", baseline.name()))
    };
    Ok(Ratios {
        measured_throughput: of_means(&|r| r.throughput_ops_s)?,
        modeled_throughput: of_means(&|r| r.modeled.throughput_ops_s)?,
        modeled_throughput_64_threads: of_means(&|r| modeled_at(r, 64 * inflight, profile))?,
        bytes_per_op: of_means(&bytes)?,
        rtts_per_op: of_means(&rtts)?,
    })
}

/// `index`'s figures over a case's `runs`.
fn spread_of(
    runs: &[ByIndex<Report>],
    index: IndexKind,
    inflight: u64,
    profile: &NetworkProfile,
) -> IndexSpread {
    let over = |f: &dyn Fn(&Report) -> f64| -> Spread {
        let values: Vec<f64> = runs.iter().filter_map(|r| r.get(index)).map(f).collect();
        Spread::of(&values).unwrap_or(Spread {
            mean: 0.0,
            sd: 0.0,
            min: 0.0,
            max: 0.0,
            n: 0,
        })
    };
    IndexSpread {
        throughput_ops_s: over(&|r| r.throughput_ops_s),
        modeled_64_threads_ops_s: over(&|r| modeled_at(r, 64 * inflight, profile)),
        modeled_2_threads_ops_s: over(&|r| modeled_at(r, 2 * inflight, profile)),
    }
}

/// The command line that made the table, as its first line.
fn command_line(args: &CompareArgs, defaults: &BenchArgs, indexes: &[IndexKind]) -> String {
    format!(
        "`rolex compare --keys {}{} --threads {} --seed {} --index {}{}{}{}{}{}`\n\n",
        args.keys,
        match args.length.duration {
            // --duration replaces --ops; --warmup comes with either.
            Some(_) => args.length.flags(),
            None => format!(" --ops {}{}", args.ops, args.length.flags()),
        },
        args.threads,
        args.seed,
        indexes
            .iter()
            .map(|i| i.name())
            .collect::<Vec<_>>()
            .join(","),
        if indexes.contains(&IndexKind::Bplus) {
            format!(
                " --page-size {}",
                args.page_size.unwrap_or(defaults.page_size)
            )
        } else {
            String::new()
        },
        if args.runs > 1 {
            format!(" --runs {}", args.runs)
        } else {
            String::new()
        },
        args.value_size
            .map_or(String::new(), |v| format!(" --value-size {}", v.flag())),
        args.cache_budget
            .map_or(String::new(), |b| format!(" --cache-budget {}", b.flag())),
        if args.rate_sweep.is_empty() {
            String::new()
        } else {
            format!(
                " --rate-sweep {}",
                args.rate_sweep
                    .iter()
                    .map(f64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
    )
}

/// The line naming the baselines the table compares ROLEX with.
fn baselines_line(baselines: &[IndexKind], page_size: u64) -> String {
    let named: Vec<String> = baselines
        .iter()
        .map(|&b| match b {
            IndexKind::Bplus => format!("B+-tree (Sherman-style, {page_size}-byte pages)"),
            IndexKind::Chime => {
                "CHIME (CHIME-style: the B+-tree's internal pages over hopscotch leaves)".into()
            }
            IndexKind::Rolex => "ROLEX".into(),
        })
        .collect();
    format!("Baselines: {}.", named.join("; "))
}

/// Runs the comparison, prints the table, writes the JSON and the plots.
pub fn run(args: &CompareArgs, defaults: BenchArgs) -> Result<(), CliError> {
    let indexes = lineup(args)?;
    let baselines = &indexes[1..];
    // Every output path is checked before any work, then the missing directories made (the last
    // level of each only: `--json` may name a file in the `--out` directory this makes).
    let json_dir = match &args.json {
        Some(path) => crate::checks::output_file_in_dir(path, "--json")?,
        None => None,
    };
    let out_dir = crate::checks::output_dir(&args.out, "--out")?;
    // The largest run (all inserts) of each index must fit in this machine's memory.
    for &index in &indexes {
        let mut run = run_of(args, &defaults, index, args.seed);
        run.insert_ratio = Some(1.0);
        bench::check_memory_of(&run)?;
    }
    if let Some(dir) = out_dir {
        crate::checks::make_dir(&dir, "--out")?;
    }
    if let Some(dir) = json_dir {
        crate::checks::make_dir(&dir, "--json")?;
    }
    // Ctrl-C from here on stops the run under way and writes what finished before it.
    crate::interrupt::install()?;
    let profile = NetworkProfile {
        rtt_us: defaults.model_rtt_us,
        link_gbps: defaults.model_link_gbps,
        nic_verbs_per_s: defaults.model_nic_verbs,
        nic_bytes_per_s: defaults.model_nic_bytes,
    };
    let mut plan: Vec<(String, Option<Workload>, Option<f64>, RequestDist)> = Vec::new();
    for dist in [RequestDist::Uniform, RequestDist::Zipfian] {
        for w in Workload::YCSB {
            plan.push((workload::name(w), Some(w), None, dist));
        }
        for ratio in [0.0, 0.05, 0.25, 0.5, 0.75, 1.0] {
            plan.push((
                format!("inserts {:.0}%", ratio * 100.0),
                None,
                Some(ratio),
                dist,
            ));
        }
    }
    // Printed as it grows, and written to `table.md` beside the plots at the end.
    let mut table = command_line(args, &defaults, &indexes);
    budget::emit_budget_line(&mut table, args.cache_budget);
    let mut emit = |line: String| {
        println!("{line}");
        table.push_str(&line);
        table.push('\n');
    };
    emit(baselines_line(
        baselines,
        args.page_size.unwrap_or(defaults.page_size),
    ));
    // What the ratio columns hold.
    emit(if args.runs > 1 {
        format!(
            "Ratios are ROLEX's mean over each baseline's mean across the {} runs, with a 95% confidence interval [low–high] (Fieller's method, runs paired by seed; \"unbounded\" where the baseline's runs vary too much for one); ops/s are mean ± standard deviation; the intervals of the bytes and round-trip ratios are in the JSON.",
            args.runs
        )
    } else {
        "Ratios are ROLEX's figure over each baseline's in one run per case: no confidence interval (--runs 2 or more gives one).".into()
    });
    emit(String::new());
    let mut header = String::from("| workload | requests |");
    for &index in &indexes {
        header.push_str(&format!(" {} ops/s |", label(index)));
    }
    for &b in baselines {
        let over = format!("ROLEX/{}", label(b));
        header.push_str(&format!(
            " {over} measured | {over} modeled | {over} modeled, 64 threads x {} in flight |",
            args.inflight
        ));
    }
    emit(header);
    emit(format!(
        "| --- | --- |{}",
        " ---: |".repeat(indexes.len() + 3 * baselines.len())
    ));
    // The per-operation counters of each case, a second table after the first.
    let mut counters = Vec::new();
    let started = std::time::Instant::now();
    let mut cases = Vec::new();
    let mut stopped_at = None;
    'plan: for (i, (name, workload, ratio, dist)) in plan.iter().enumerate() {
        if !args.quiet {
            eprintln!(
                "[{}/{}] {name} ({}) — {:.0} s so far",
                i + 1,
                plan.len(),
                workload::name(*dist),
                started.elapsed().as_secs_f64()
            );
        }
        let mut runs: Vec<ByIndex<Report>> = Vec::new();
        for r in 0..args.runs {
            let mut reports = Vec::new();
            for &index in &indexes {
                let mut run = run_of(args, &defaults, index, args.seed.wrapping_add(r));
                run.cache_budget = args.cache_budget;
                if let Some(w) = workload {
                    run.workload = *w;
                }
                run.insert_ratio = *ratio;
                run.request_dist = Some(*dist);
                let report = bench::run(&run)?;
                if crate::interrupt::interrupted() {
                    // The case under way is left out: its runs did not all finish.
                    stopped_at = Some(format!("{name} ({})", workload::name(*dist)));
                    break 'plan;
                }
                if !report.verify_clean {
                    return Err(input!(
                        "{name} ({}): verify found problems after the {} run",
                        workload::name(*dist),
                        index.name()
                    ));
                }
                reports.push((index, report));
            }
            runs.push(ByIndex(reports));
        }
        let mut ratios = Vec::new();
        for &b in baselines {
            ratios.push((b, ratios_over(&runs, b, args.inflight, &profile)?));
        }
        let ratios = ByIndex(ratios);
        let spread = ByIndex(
            indexes
                .iter()
                .map(|&i| (i, spread_of(&runs, i, args.inflight, &profile)))
                .collect(),
        );
        let mut runs = runs.into_iter();
        let Some(first) = runs.next() else {
            return Err(failed!("a case ran no run"));
        };
        let repeats: Vec<ByIndex<Report>> = runs.collect();
        // With several runs, a throughput is shown as mean ± standard deviation (a ratio as
        // the ratio of means with its interval).
        let shown = |s: &Spread, decimals: usize| {
            if args.runs > 1 {
                s.short(decimals)
            } else {
                format!("{:.d$}", s.mean, d = decimals)
            }
        };
        let mut row = format!("| {name} | {} |", workload::name(*dist));
        for (_, s) in spread.iter() {
            row.push_str(&format!(" {} |", shown(&s.throughput_ops_s, 0)));
        }
        for (_, r) in ratios.iter() {
            row.push_str(&format!(
                " {} | {} | {} |",
                r.measured_throughput.show(2),
                r.modeled_throughput.show(2),
                r.modeled_throughput_64_threads.show(2)
            ));
        }
        emit(row);
        std::io::stdout().flush()?;
        let mut row = format!("| {name} | {} |", workload::name(*dist));
        for (_, r) in first.iter() {
            row.push_str(&format!(
                " {:.2} / {:.2} / {:.0} |",
                rtts(r),
                verbs(r),
                bytes(r)
            ));
        }
        for (_, r) in ratios.iter() {
            row.push_str(&format!(
                " {:.2} | {:.2} |",
                r.bytes_per_op.ratio, r.rtts_per_op.ratio
            ));
        }
        counters.push(row);
        cases.push(Case {
            name: name.clone(),
            dist: workload::name(*dist),
            insert_ratio: *ratio,
            reports: first,
            repeats,
            ratios,
            spread: (args.runs > 1).then_some(spread),
        });
    }
    if !counters.is_empty() {
        emit(String::new());
        emit(format!(
            "Per operation, each index's {}: round trips / verbs / bytes, over all the case's operation types; the ratios are ROLEX's over each baseline's{}.",
            if args.runs > 1 { "first run" } else { "run" },
            if args.runs > 1 {
                " (of the means over the runs)"
            } else {
                ""
            }
        ));
        emit(String::new());
        let mut header = String::from("| workload | requests |");
        for &index in &indexes {
            header.push_str(&format!(" {} RTT / verbs / bytes |", label(index)));
        }
        for &b in baselines {
            header.push_str(&format!(" bytes ROLEX/{0} | RTT ROLEX/{0} |", label(b)));
        }
        emit(header);
        emit(format!(
            "| --- | --- |{}",
            " ---: |".repeat(indexes.len() + 2 * baselines.len())
        ));
        for row in counters {
            emit(row);
        }
    }
    let clients_sweep = clients_sweep(&cases, &profile, args.inflight);
    if let Some(c) = cases
        .iter()
        .find(|c| c.name == "ycsb-c" && c.dist == "zipfian")
    {
        let of = |f: &dyn Fn(&Report) -> String| {
            c.reports
                .iter()
                .map(|(i, r)| format!("{} {}", label(i), f(r)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        emit(format!(
            "\ncompute-side cache, bytes per key (YCSB C, zipfian): {}; memory-node bytes per key: {}",
            of(&|r| format!("{:.2}", r.cache_bytes_per_key)),
            of(&|r| r
                .pool_bytes_per_key
                .map_or("n/a".into(), |b| format!("{b:.1}"))),
        ));
    }
    let budget_sweep = if args.no_budget_sweep || stopped_at.is_some() {
        Vec::new()
    } else {
        budget::budget_sweep(args, &defaults, &indexes, &profile, &mut emit)?
    };
    let rate_sweep =
        if args.rate_sweep.is_empty() || stopped_at.is_some() || crate::interrupt::interrupted() {
            Vec::new()
        } else {
            rate::rate_sweep(args, &defaults, &indexes, &mut emit)?
        };
    let interrupted = crate::interrupt::interrupted();
    if interrupted {
        emit(format!(
            "\ninterrupted (Ctrl-C) during {}: the tables hold what finished before it",
            stopped_at.as_deref().unwrap_or("the sweeps")
        ));
    }
    let table_path = args.out.join("table.md");
    std::fs::write(&table_path, &table).map_err(|e| failed!("{}: {e}", table_path.display()))?;
    let mut plots = plots::plots(
        &cases,
        &clients_sweep,
        &budget_sweep,
        &indexes,
        args,
        &profile,
    );
    plots.extend(rate::plots(
        &rate_sweep,
        &indexes,
        &format!(
            "{} keys, {} threads x {} in flight, uniform; measured, not modeled (tails: this host's scheduling too)",
            args.keys, args.threads, args.inflight
        ),
    ));
    for (file, svg) in &plots {
        let path = args.out.join(file);
        std::fs::write(&path, svg).map_err(|e| failed!("{}: {e}", path.display()))?;
    }
    println!(
        "table and plots: {} (table.md, {}); {} runs in {:.0} s",
        args.out.display(),
        plots.iter().map(|p| p.0).collect::<Vec<_>>().join(", "),
        indexes.len() as u64
            * (cases.len() as u64 * args.runs
                + budget_sweep.len() as u64
                + rate_sweep.len() as u64),
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&Comparison {
            stamp: crate::report::Stamp {
                schema_version: COMPARE_SCHEMA_VERSION,
                ..crate::report::Stamp::now()
            },
            indexes: indexes.iter().map(|i| i.name()).collect(),
            keys: args.keys,
            ops: args.length.duration.is_none().then_some(args.ops),
            length: args.length,
            threads: args.threads,
            runs: args.runs,
            value_size: args.value_size,
            cases,
            inflight: args.inflight,
            clients_sweep,
            cache_budget: args.cache_budget,
            budget_sweep,
            rate_sweep,
            ratio_statistic: RATIO_STATISTIC,
            interrupted,
        })?;
        std::fs::write(path, json + "\n").map_err(|e| failed!("{}: {e}", path.display()))?;
    }
    if interrupted {
        return Err(CliError::Interrupted(
            "interrupted (Ctrl-C): the table, plots and JSON hold the cases that finished before it"
                .into(),
        ));
    }
    Ok(())
}

/// Modeled throughput of YCSB A and C (zipfian) at 1–128 modeled threads with `inflight`
/// operations in flight each, from each run's counters.
fn clients_sweep(cases: &[Case], profile: &NetworkProfile, inflight: u64) -> Vec<ClientPoint> {
    let mut out = Vec::new();
    for name in ["ycsb-a", "ycsb-c"] {
        let Some(case) = cases.iter().find(|c| c.name == name && c.dist == "zipfian") else {
            continue;
        };
        let counted = case.reports.map(|_, r| totals(r));
        for threads in [1, 2, 4, 8, 16, 32, 64, 128] {
            let clients = threads * inflight;
            out.push(ClientPoint {
                workload: name.into(),
                threads,
                clients,
                ops_s: counted.map(|_, (net, ops)| profile.throughput_ops_s(net, *ops, clients, 1)),
            });
        }
    }
    out
}

/// Modeled throughput of `report`'s operations for `clients` clients on one memory node.
fn modeled_at(report: &Report, clients: u64, profile: &NetworkProfile) -> f64 {
    let (net, ops) = totals(report);
    profile.throughput_ops_s(&net, ops, clients, 1)
}
