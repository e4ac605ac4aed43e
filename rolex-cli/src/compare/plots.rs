//! The SVG plots of `rolex compare`, a series (or bar) per index run: modeled throughput against
//! the insert share, the clients and the cache budget; measured throughput; bytes and round trips
//! per operation type; the latency percentile spectrum; and ROLEX's modeled throughput over each
//! baseline's, a series per baseline. Indexes are named as in the table ([`super::label`]):
//! ROLEX's lines solid, the baselines' dashed.

use sim_transport::cost_model::NetworkProfile;

use super::{BudgetPoint, ByIndex, Case, ClientPoint, CompareArgs, label, modeled_at};
use crate::index::IndexKind;
use crate::svg::{self, Series};

/// Every plot, by file name; `indexes` are the indexes run, ROLEX first.
pub(super) fn plots(
    cases: &[Case],
    sweep: &[ClientPoint],
    budgets: &[BudgetPoint],
    indexes: &[IndexKind],
    args: &CompareArgs,
    profile: &NetworkProfile,
) -> Vec<(&'static str, String)> {
    let runs = if args.runs > 1 {
        format!("; mean of {} runs, bars ±1 standard deviation", args.runs)
    } else {
        String::new()
    };
    let per_run = match args.length.duration {
        Some(s) => format!("{s} s per run"),
        None => format!("{} operations per run", args.ops),
    };
    let warmup = args.length.warmup.map_or(String::new(), |w| match w {
        crate::checks::Warmup::Ops(n) => format!(" after {n} warm-up operations"),
        crate::checks::Warmup::Seconds(s) => format!(" after a warm-up of {s} s"),
    });
    let sizes = format!(
        "{} keys, {per_run}{warmup}{}",
        args.keys,
        args.value_size
            .map_or(String::new(), |v| format!(", values of {v}"))
    );
    let subtitle = format!("{sizes}{runs}");
    // Modeled throughput at `clients` threads (64 or 2) against the insert share: a case's
    // spread over its runs, or its one run.
    let by_ratio = |clients: u64| {
        let mut series = Vec::new();
        for dist in ["uniform", "zipfian"] {
            for &index in indexes {
                let figure = |c: &Case| -> Option<(f64, f64)> {
                    match &c.spread {
                        Some(s) => {
                            let s = s.get(index)?;
                            let s = if clients == 64 {
                                &s.modeled_64_threads_ops_s
                            } else {
                                &s.modeled_2_threads_ops_s
                            };
                            Some((s.mean, s.sd))
                        }
                        None => Some((
                            modeled_at(c.report(index)?, clients * args.inflight, profile),
                            0.0,
                        )),
                    }
                };
                let picked: Vec<(f64, (f64, f64))> = cases
                    .iter()
                    .filter(|c| c.dist == dist)
                    .filter_map(|c| Some((100.0 * c.insert_ratio?, figure(c)?)))
                    .collect();
                series.push(Series {
                    name: format!("{}, {dist}", label(index)),
                    points: picked.iter().map(|&(x, (y, _))| (x, y)).collect(),
                    err: picked.iter().map(|&(_, (_, e))| e).collect(),
                    dashed: index != IndexKind::Rolex,
                });
            }
        }
        series
    };
    let by_clients = per_index(
        &["ycsb-a", "ycsb-c"],
        indexes,
        sweep
            .iter()
            .map(|p| (p.workload.as_str(), p.clients as f64, p.ops_s.clone())),
    );
    let by_budget = per_index(
        &["ycsb-c", "ycsb-a"],
        indexes,
        budgets.iter().map(|p| {
            (
                p.workload.as_str(),
                p.budget_bytes_per_key,
                p.indexes.map(|_, f| f.ops_s),
            )
        }),
    );
    // Measured throughput of the cases of one request distribution, with their spread.
    let of_dist = |dist: &str| -> Vec<&Case> { cases.iter().filter(|c| c.dist == dist).collect() };
    let categories_of = |cases: &[&Case]| -> Vec<String> {
        cases
            .iter()
            .map(|c| match c.name.strip_prefix("ycsb-") {
                Some(w) => format!("YCSB {}", w.to_uppercase()),
                None => c.name.clone(),
            })
            .collect()
    };
    let measured_of = |cases: &[&Case]| {
        let mut measured: Vec<(String, Vec<f64>)> = Vec::new();
        let mut measured_sd: Vec<Vec<f64>> = Vec::new();
        for &index in indexes {
            let (values, sd): (Vec<f64>, Vec<f64>) = cases
                .iter()
                .map(|c| match (&c.spread, c.report(index)) {
                    (Some(s), _) => s.get(index).map_or((0.0, 0.0), |s| {
                        (s.throughput_ops_s.mean, s.throughput_ops_s.sd)
                    }),
                    (None, Some(r)) => (r.throughput_ops_s, 0.0),
                    (None, None) => (0.0, 0.0),
                })
                .unzip();
            measured.push((label(index).to_string(), values));
            measured_sd.push(sd);
        }
        (measured, measured_sd)
    };
    let zipfian = of_dist("zipfian");
    let zipfian_categories = categories_of(&zipfian);
    let (measured, measured_sd) = measured_of(&zipfian);
    let uniform = of_dist("uniform");
    let (measured_uniform, measured_uniform_sd) = measured_of(&uniform);
    // ROLEX's modeled throughput at 64 threads over each baseline's, zipfian.
    let ratios: Vec<(String, Vec<f64>)> = indexes
        .iter()
        .skip(1)
        .map(|&b| {
            (
                format!("ROLEX/{}", label(b)),
                zipfian
                    .iter()
                    .map(|c| {
                        c.ratios
                            .get(b)
                            .map_or(0.0, |r| r.modeled_throughput_64_threads.ratio)
                    })
                    .collect(),
            )
        })
        .collect();
    // Per operation type, each from the zipfian run that shows it alone or mostly: GET from
    // YCSB C, UPDATE from YCSB A, INSERT from the all-insert run, SCAN from YCSB E.
    let pick = |name: &str| cases.iter().find(|c| c.name == name && c.dist == "zipfian");
    let kinds = [
        ("GET (YCSB C)", "ycsb-c", "read"),
        ("UPDATE (YCSB A)", "ycsb-a", "update"),
        ("INSERT (100% inserts)", "inserts 100%", "insert"),
        ("SCAN (YCSB E)", "ycsb-e", "scan"),
    ];
    let per_op = |f: fn(&crate::report::OpReport) -> f64| -> Vec<(String, Vec<f64>)> {
        indexes
            .iter()
            .map(|&index| {
                let values = kinds
                    .iter()
                    .map(|&(_, case, op)| {
                        pick(case)
                            .and_then(|c| c.report(index))
                            .and_then(|r| r.ops.get(op).map(f))
                            .unwrap_or(0.0)
                    })
                    .collect();
                (label(index).to_string(), values)
            })
            .collect()
    };
    let categories: Vec<String> = kinds.iter().map(|k| k.0.to_string()).collect();
    let op_subtitle = format!(
        "measured on the simulator, zipfian, each type from the run named{}; {sizes}",
        if args.runs > 1 {
            " (its first run: these counts vary little)"
        } else {
            ""
        }
    );
    // The modeled figures of runs differ only as their counters do, often by far less than a
    // pixel: the subtitle says so rather than promise bars no one can see.
    let ratio_subtitle = |series: &[svg::Series]| {
        format!(
            "modeled: RTT 2 µs, 100 Gb/s, NIC 50 Mverbs/s; rest GETs; {subtitle}{}",
            bars_too_short(series, args.runs)
        )
    };
    let (at_64, at_2) = (by_ratio(64), by_ratio(2));
    let mut plots = vec![
        (
            "throughput_vs_write_ratio.svg",
            svg::line_chart(
                &format!(
                    "Modeled throughput, 64 threads x {} in flight, against the share of inserts",
                    args.inflight
                ),
                &ratio_subtitle(&at_64),
                "inserts, % of operations",
                "modeled operations per second",
                &at_64,
                false,
            ),
        ),
        (
            "throughput_vs_write_ratio_2_threads.svg",
            svg::line_chart(
                &format!(
                    "Modeled throughput, 2 threads x {} in flight, against the share of inserts",
                    args.inflight
                ),
                &ratio_subtitle(&at_2),
                "inserts, % of operations",
                "modeled operations per second",
                &at_2,
                false,
            ),
        ),
        (
            "throughput_vs_clients.svg",
            svg::line_chart(
                "Modeled throughput against compute clients (zipfian)",
                "modeled from each run's round trips, verbs and bytes; one memory node",
                "modeled compute clients (threads x operations in flight)",
                "modeled operations per second",
                &by_clients,
                true,
            ),
        ),
        (
            "measured_throughput.svg",
            svg::bar_chart_with_errors(
                "Measured throughput on the simulator (zipfian)",
                &format!("{} compute threads, wall clock; {subtitle}", args.threads),
                "workload",
                "operations per second",
                &zipfian_categories,
                &measured,
                &measured_sd,
            ),
        ),
        (
            "measured_throughput_uniform.svg",
            svg::bar_chart_with_errors(
                "Measured throughput on the simulator (uniform)",
                &format!("{} compute threads, wall clock; {subtitle}", args.threads),
                "workload",
                "operations per second",
                &categories_of(&uniform),
                &measured_uniform,
                &measured_uniform_sd,
            ),
        ),
        (
            "ratio_over_baselines.svg",
            svg::bar_chart_with_errors(
                &format!(
                    "ROLEX's modeled throughput over each baseline's, 64 threads x {} in flight (zipfian)",
                    args.inflight
                ),
                &format!(
                    "above 1: ROLEX ahead; {}; {sizes}",
                    if args.runs > 1 {
                        "ratios of the means over the runs, their 95% intervals in the JSON"
                    } else {
                        "one run per case"
                    }
                ),
                "workload",
                "ROLEX / baseline",
                &zipfian_categories,
                &ratios,
                &[],
            ),
        ),
        (
            "bytes_per_op.svg",
            svg::bar_chart(
                "Bytes moved per operation",
                &op_subtitle,
                "bytes per operation",
                &categories,
                &per_op(|o| o.bytes_per_op),
            ),
        ),
        (
            "rtts_per_op.svg",
            svg::bar_chart(
                "Round trips per operation",
                &op_subtitle,
                "round trips per operation",
                &categories,
                &per_op(|o| o.rtts_per_op),
            ),
        ),
        ("latency_cdf.svg", latency_cdf(cases, indexes, &sizes)),
    ];
    if !budgets.is_empty() {
        plots.push((
            "throughput_vs_cache_budget.svg",
            svg::line_chart(
                &format!("Modeled throughput, 64 threads x {} in flight, against the compute-side cache budget", args.inflight),
                &format!("uniform requests; budget in bytes per key (log scale); {sizes}"),
                "cache budget, bytes per key",
                "modeled operations per second",
                &by_budget,
                true,
            ),
        ));
    }
    plots
}

/// The latency percentile spectrum of YCSB A (zipfian): GETs and UPDATEs of each index, every
/// run pooled.
fn latency_cdf(cases: &[Case], indexes: &[IndexKind], subtitle: &str) -> String {
    const QUANTILES: [f64; 9] = [0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999];
    let mut series = Vec::new();
    if let Some(case) = cases
        .iter()
        .find(|c| c.name == "ycsb-a" && c.dist == "zipfian")
    {
        for &index in indexes {
            let reports = case.runs(index);
            for op in ["read", "update"] {
                let mut pooled: Option<hdrhistogram::Histogram<u64>> = None;
                for r in &reports {
                    if let Some((_, h)) = r.latency_histograms.iter().find(|h| h.0 == op) {
                        match &mut pooled {
                            Some(p) => {
                                let _ = p.add(h);
                            }
                            None => pooled = Some(h.clone()),
                        }
                    }
                }
                if let Some(h) = pooled {
                    series.push(Series {
                        name: format!(
                            "{}, {}",
                            label(index),
                            if op == "read" { "GET" } else { "UPDATE" }
                        ),
                        points: QUANTILES
                            .iter()
                            .map(|&q| (nines(q), h.value_at_quantile(q) as f64 / 1e3))
                            .collect(),
                        dashed: index != IndexKind::Rolex,
                        err: Vec::new(),
                    });
                }
            }
        }
    }
    let ticks: Vec<(f64, String)> = [0.5, 0.9, 0.99, 0.999, 0.9999]
        .iter()
        .map(|&q| (nines(q), format!("{}%", 100.0 * q)))
        .collect();
    svg::latency_chart(
        "Latency by percentile, YCSB A (zipfian)",
        &format!(
            "measured on the simulator, every run pooled; the tails include this host's scheduling; {subtitle}"
        ),
        "percentile",
        "latency, µs (log scale)",
        &series,
        &ticks,
        1,
    )
}

/// A quantile's position on a percentile axis: its number of nines.
fn nines(q: f64) -> f64 {
    -(1.0 - q).log10()
}

/// A series per workload and index from `(workload, x, each index's y)` points: ROLEX solid,
/// the baselines dashed.
fn per_index<'a>(
    workloads: &[&str],
    indexes: &[IndexKind],
    points: impl Iterator<Item = (&'a str, f64, ByIndex<f64>)> + Clone,
) -> Vec<Series> {
    let mut series = Vec::new();
    for &workload in workloads {
        for &index in indexes {
            series.push(Series {
                name: format!("{}, {workload}", label(index)),
                points: points
                    .clone()
                    .filter(|p| p.0 == workload)
                    .filter_map(|(_, x, ys)| Some((x, *ys.get(index)?)))
                    .collect(),
                dashed: index != IndexKind::Rolex,
                err: Vec::new(),
            });
        }
    }
    series
}

/// What a plot of `runs` runs' means says when its ±1 sd bars are too short to see: every bar
/// under 1% of its point (the runs' modeled figures agree, as their counters do); else nothing.
fn bars_too_short(series: &[svg::Series], runs: u64) -> String {
    let widest = series
        .iter()
        .flat_map(|s| s.points.iter().zip(&s.err))
        .map(|(p, e)| e / p.1.max(1.0))
        .fold(0.0, f64::max);
    if runs > 1 && widest < 0.01 {
        format!(
            " (the runs' figures differ by {:.2}% of a point at most: too little for a bar to show)",
            100.0 * widest
        )
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_too_short_to_see_are_said_so_and_visible_ones_are_left_to_show() {
        let series = |sd: f64| {
            vec![svg::Series {
                name: "ROLEX, uniform".into(),
                points: vec![(0.0, 1000.0), (50.0, 2000.0)],
                err: vec![0.0, sd],
                dashed: false,
            }]
        };
        assert!(bars_too_short(&series(4.0), 3).contains("0.20% of a point at most"));
        assert_eq!(bars_too_short(&series(100.0), 3), "", "5%: the bar shows");
        assert_eq!(
            bars_too_short(&series(0.0), 1),
            "",
            "one run: no bars at all"
        );
    }
}
