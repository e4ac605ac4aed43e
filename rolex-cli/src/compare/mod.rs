//! `rolex compare`: ROLEX and the B+-tree baseline on the same keys, the same operation streams
//! and the same transport — YCSB A–F and a write-ratio sweep, under uniform and zipfian requests,
//! then YCSB C and A at a range of compute-side cache budgets (`budget.rs`) — with a table of
//! ratios, a JSON report and SVG plots (`plots.rs`).

mod budget;
mod plots;

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
    /// Keys bulk-loaded for each run (both indexes load the same keys).
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::checks::positive_count)]
    pub keys: u64,
    /// Operations per run.
    #[arg(long, default_value_t = 1_000_000, conflicts_with = "duration",
          value_parser = crate::checks::positive_count)]
    pub ops: u64,
    /// `--duration` and `--warmup`, as `rolex bench` takes them, for every run of both indexes
    /// (the budget sweep's included).
    #[command(flatten)]
    pub length: bench::RunLength,
    /// Compute threads (measured runs; at most 128).
    #[arg(long, default_value_t = 2, value_parser = crate::checks::threads)]
    pub threads: u64,
    /// Operations each thread keeps in flight, for both indexes (CHIME's and SMART's runs use
    /// 2); every modeled figure counts threads x inflight clients.
    #[arg(long, default_value_t = 2, value_parser = crate::checks::inflight)]
    pub inflight: u64,
    /// Seed of the keys and operation streams (the same for both indexes).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    pub seed: u64,
    /// Write the JSON report here (every run's full report and the ratios).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Directory for the table and the SVG plots (made if missing, when its parent exists).
    #[arg(long, default_value = "compare")]
    pub out: PathBuf,
    /// B+-tree page size in bytes (Sherman's: 1 KiB).
    #[arg(long, default_value_t = 1024, value_parser = crate::checks::page_size)]
    pub page_size: u64,
    /// Both indexes store byte values of this many bytes (`N`, or `MIN-MAX` uniform; at most
    /// 65536) in value blocks, instead of 8-byte values.
    #[arg(long, value_parser = crate::checks::value_size)]
    pub value_size: Option<crate::checks::ValueSize>,
    /// Run every case this many times per index (run i uses seed + i) and report ratios and
    /// throughput as mean ± standard deviation, with error bars in the plots (at most 100).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::runs)]
    pub runs: u64,
    /// What each compute node may cache, for both indexes, in every case of the table:
    /// bytes per key (`0.5`) or MiB per compute node (`64MiB`). Default: no limit.
    #[arg(long, value_parser = crate::checks::cache_budget)]
    pub cache_budget: Option<crate::checks::CacheBudget>,
    /// The cache budgets (bytes per key) at which YCSB C and A (uniform requests) are run again
    /// for the plot of throughput against the budget.
    #[arg(long, value_delimiter = ',', default_value = "0.05,0.1,0.2,0.5,1,2",
          value_parser = crate::checks::budget_per_key)]
    pub budget_sweep: Vec<f64>,
    /// Leave the budget sweep out.
    #[arg(long, conflicts_with = "budget_sweep")]
    pub no_budget_sweep: bool,
    /// Hide progress.
    #[arg(long)]
    pub quiet: bool,
}

/// One workload of the comparison.
#[derive(Debug, Clone, serde::Serialize)]
struct Case {
    name: String,
    dist: String,
    /// Insert share, for the write-ratio sweep.
    insert_ratio: Option<f64>,
    /// The first run of each index.
    rolex: Report,
    bplus: Report,
    /// Runs 2 to N with `--runs N` (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repeats: Vec<Pair>,
    /// ROLEX over the B+-tree: the ratio of the means over the runs, with a 95% interval.
    ratios: Ratios,
    /// With `--runs N > 1`: the spread over the runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    spread: Option<CaseSpread>,
}

/// One more run of both indexes.
#[derive(Debug, Clone, serde::Serialize)]
struct Pair {
    rolex: Report,
    bplus: Report,
}

/// A case's figures over its runs (their ratios are in [`Ratios`]).
#[derive(Debug, Clone, serde::Serialize)]
struct CaseSpread {
    rolex_throughput_ops_s: Spread,
    bplus_throughput_ops_s: Spread,
    rolex_modeled_64_threads_ops_s: Spread,
    bplus_modeled_64_threads_ops_s: Spread,
    rolex_modeled_2_threads_ops_s: Spread,
    bplus_modeled_2_threads_ops_s: Spread,
}

/// ROLEX's figure over the baseline's (> 1: ROLEX ahead, for throughput; < 1: ROLEX moves
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
const RATIO_STATISTIC: &str = "ratio of the two indexes' means over the runs; ci95: 95% confidence interval by Fieller's method, runs paired by seed, cut at 0 (null with one run; low and high null when unbounded)";

/// The whole comparison, as written to `--json`.
#[derive(Debug, serde::Serialize)]
struct Comparison {
    /// `schema_version`, `tool_version`, `timestamp` (when the comparison ended), as in
    /// `rolex bench`'s reports.
    #[serde(flatten)]
    stamp: crate::report::Stamp,
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
    /// How each case's `ratios` are computed ([`RATIO_STATISTIC`]).
    ratio_statistic: &'static str,
    /// Ctrl-C stopped the comparison: `cases` and `budget_sweep` hold what finished before.
    interrupted: bool,
}

/// One workload at one cache budget: both indexes' modeled throughput at 64 clients and what
/// each cached.
#[derive(Debug, Clone, serde::Serialize)]
struct BudgetPoint {
    workload: String,
    budget_bytes_per_key: f64,
    rolex_ops_s: f64,
    bplus_ops_s: f64,
    rolex_cache_bytes_per_key: f64,
    bplus_cache_bytes_per_key: f64,
    rolex_rtts_per_op: f64,
    bplus_rtts_per_op: f64,
    rolex_bytes_per_op: f64,
    bplus_bytes_per_op: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
struct ClientPoint {
    workload: String,
    /// Modeled threads.
    threads: u64,
    /// Modeled clients: threads x operations in flight per thread.
    clients: u64,
    rolex_ops_s: f64,
    bplus_ops_s: f64,
}

/// The bench run of `index` with seed `seed` that every case starts from: the comparison's
/// sizes, threads, page size and values, quietly.
fn run_of(args: &CompareArgs, defaults: &BenchArgs, index: IndexKind, seed: u64) -> BenchArgs {
    let mut run = defaults.clone();
    run.index = index;
    run.page_size = args.page_size;
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

/// Runs the comparison, prints the table, writes the JSON and the plots.
pub fn run(args: &CompareArgs, defaults: BenchArgs) -> Result<(), CliError> {
    // Every output path is checked before any work, then the missing directories made (the last
    // level of each only: `--json` may name a file in the `--out` directory this makes).
    let json_dir = match &args.json {
        Some(path) => crate::checks::output_file_in_dir(path, "--json")?,
        None => None,
    };
    let out_dir = crate::checks::output_dir(&args.out, "--out")?;
    // The largest run (all inserts) of either index must fit in this machine's memory.
    for index in [IndexKind::Rolex, IndexKind::Bplus] {
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
    let mut table = format!(
        "`rolex compare --keys {}{} --threads {} --seed {} --page-size {}{}{}{}`\n\n",
        args.keys,
        match args.length.duration {
            // --duration replaces --ops; --warmup comes with either.
            Some(_) => args.length.flags(),
            None => format!(" --ops {}{}", args.ops, args.length.flags()),
        },
        args.threads,
        args.seed,
        args.page_size,
        if args.runs > 1 {
            format!(" --runs {}", args.runs)
        } else {
            String::new()
        },
        args.value_size
            .map_or(String::new(), |v| format!(" --value-size {}", v.flag())),
        args.cache_budget
            .map_or(String::new(), |b| format!(" --cache-budget {}", b.flag()))
    );
    budget::emit_budget_line(&mut table, args.cache_budget);
    let mut emit = |line: String| {
        println!("{line}");
        table.push_str(&line);
        table.push('\n');
    };
    // What the ratio columns hold.
    emit(if args.runs > 1 {
        format!(
            "Ratios are ROLEX's mean over the B+-tree's mean across the {} runs, with a 95% confidence interval [low–high] (Fieller's method, runs paired by seed; \"unbounded\" where the B+-tree's runs vary too much for one); ops/s are mean ± standard deviation; the bytes ratio's interval is in the JSON.",
            args.runs
        )
    } else {
        "Ratios are ROLEX's figure over the B+-tree's in one run per case: no confidence interval (--runs 2 or more gives one).".into()
    });
    emit(String::new());
    emit(format!(
        "| workload | requests | ROLEX ops/s | B+-tree ops/s | measured ratio | modeled ratio | modeled ratio, 64 threads x {} in flight | bytes/op ROLEX | bytes/op B+-tree | bytes ratio | RTT/op ROLEX | RTT/op B+-tree |",
        args.inflight
    ));
    emit(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            .into(),
    );
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
        let mut pairs: Vec<Pair> = Vec::new();
        for r in 0..args.runs {
            let mut reports = Vec::new();
            for index in [IndexKind::Rolex, IndexKind::Bplus] {
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
                reports.push(report);
            }
            let (Some(bplus), Some(rolex)) = (reports.pop(), reports.pop()) else {
                return Err(failed!("a run produced no report"));
            };
            pairs.push(Pair { rolex, bplus });
        }
        let bytes = |r: &Report| weighted(r, |o| o.bytes_per_op);
        let rtts = |r: &Report| weighted(r, |o| o.rtts_per_op);
        let over = |f: &dyn Fn(&Pair) -> f64| -> Spread {
            Spread::of(&pairs.iter().map(f).collect::<Vec<_>>()).unwrap_or(Spread {
                mean: 0.0,
                sd: 0.0,
                min: 0.0,
                max: 0.0,
                n: 0,
            })
        };
        // ROLEX's figure and the B+-tree's, run by run.
        let of_means = |f: &dyn Fn(&Report) -> f64| -> Result<RatioOfMeans, CliError> {
            let figures: Vec<(f64, f64)> =
                pairs.iter().map(|p| (f(&p.rolex), f(&p.bplus))).collect();
            RatioOfMeans::of(&figures).ok_or_else(|| failed!("a case ran no run"))
        };
        let ratios = Ratios {
            measured_throughput: of_means(&|r| r.throughput_ops_s)?,
            modeled_throughput: of_means(&|r| r.modeled.throughput_ops_s)?,
            modeled_throughput_64_threads: of_means(&|r| {
                modeled_at(r, 64 * args.inflight, &profile)
            })?,
            bytes_per_op: of_means(&bytes)?,
            rtts_per_op: of_means(&rtts)?,
        };
        let spread = CaseSpread {
            rolex_throughput_ops_s: over(&|p| p.rolex.throughput_ops_s),
            bplus_throughput_ops_s: over(&|p| p.bplus.throughput_ops_s),
            rolex_modeled_64_threads_ops_s: over(&|p| {
                modeled_at(&p.rolex, 64 * args.inflight, &profile)
            }),
            bplus_modeled_64_threads_ops_s: over(&|p| {
                modeled_at(&p.bplus, 64 * args.inflight, &profile)
            }),
            rolex_modeled_2_threads_ops_s: over(&|p| {
                modeled_at(&p.rolex, 2 * args.inflight, &profile)
            }),
            bplus_modeled_2_threads_ops_s: over(&|p| {
                modeled_at(&p.bplus, 2 * args.inflight, &profile)
            }),
        };
        let mut pairs = pairs.into_iter();
        let Some(first) = pairs.next() else {
            return Err(failed!("a case ran no run"));
        };
        let repeats: Vec<Pair> = pairs.collect();
        let (rolex, bplus) = (first.rolex, first.bplus);
        // With several runs, a throughput is shown as mean ± standard deviation (a ratio as
        // the ratio of means with its interval).
        let shown = |s: &Spread, decimals: usize| {
            if args.runs > 1 {
                s.short(decimals)
            } else {
                format!("{:.d$}", s.mean, d = decimals)
            }
        };
        emit(format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
            workload::name(*dist),
            shown(&spread.rolex_throughput_ops_s, 0),
            shown(&spread.bplus_throughput_ops_s, 0),
            ratios.measured_throughput.show(2),
            ratios.modeled_throughput.show(2),
            ratios.modeled_throughput_64_threads.show(2),
            bytes(&rolex),
            bytes(&bplus),
            ratios.bytes_per_op.ratio,
            rtts(&rolex),
            rtts(&bplus)
        ));
        std::io::stdout().flush()?;
        cases.push(Case {
            name: name.clone(),
            dist: workload::name(*dist),
            insert_ratio: *ratio,
            rolex,
            bplus,
            repeats,
            ratios,
            spread: (args.runs > 1).then_some(spread),
        });
    }
    let clients_sweep = clients_sweep(&cases, &profile, args.inflight);
    if let Some(c) = cases
        .iter()
        .find(|c| c.name == "ycsb-c" && c.dist == "zipfian")
    {
        emit(format!(
            "\ncompute-side cache: ROLEX {:.2} bytes per key, B+-tree {:.2}; memory-node bytes per key: ROLEX {}, B+-tree {}",
            c.rolex.cache_bytes_per_key,
            c.bplus.cache_bytes_per_key,
            c.rolex
                .pool_bytes_per_key
                .map_or("n/a".into(), |b| format!("{b:.1}")),
            c.bplus
                .pool_bytes_per_key
                .map_or("n/a".into(), |b| format!("{b:.1}")),
        ));
    }
    let budget_sweep = if args.no_budget_sweep || stopped_at.is_some() {
        Vec::new()
    } else {
        budget::budget_sweep(args, &defaults, &profile, &mut emit)?
    };
    let interrupted = crate::interrupt::interrupted();
    if interrupted {
        emit(format!(
            "\ninterrupted (Ctrl-C) during {}: the tables hold what finished before it",
            stopped_at.as_deref().unwrap_or("the budget sweep")
        ));
    }
    let table_path = args.out.join("table.md");
    std::fs::write(&table_path, &table).map_err(|e| failed!("{}: {e}", table_path.display()))?;
    for (file, svg) in plots::plots(&cases, &clients_sweep, &budget_sweep, args, &profile) {
        let path = args.out.join(file);
        std::fs::write(&path, svg).map_err(|e| failed!("{}: {e}", path.display()))?;
    }
    println!(
        "table and plots: {} (table.md, throughput_vs_write_ratio.svg at 64 modeled threads, throughput_vs_write_ratio_2_threads.svg, throughput_vs_clients.svg, {}measured_throughput.svg, bytes_per_op.svg, rtts_per_op.svg, latency_cdf.svg); {} runs in {:.0} s",
        args.out.display(),
        if budget_sweep.is_empty() {
            ""
        } else {
            "throughput_vs_cache_budget.svg, "
        },
        2 * cases.len() as u64 * args.runs + 2 * budget_sweep.len() as u64,
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&Comparison {
            stamp: crate::report::Stamp::now(),
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
        let (rolex, rolex_ops) = totals(&case.rolex);
        let (bplus, bplus_ops) = totals(&case.bplus);
        for threads in [1, 2, 4, 8, 16, 32, 64, 128] {
            let clients = threads * inflight;
            out.push(ClientPoint {
                workload: name.into(),
                threads,
                clients,
                rolex_ops_s: profile.throughput_ops_s(&rolex, rolex_ops, clients, 1),
                bplus_ops_s: profile.throughput_ops_s(&bplus, bplus_ops, clients, 1),
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
