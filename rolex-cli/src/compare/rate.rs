//! The open-loop rate sweep of `rolex compare --rate-sweep`: YCSB C and A (uniform requests)
//! with every index offered each rate in turn (`--target-rate`), as a third table and a plot of
//! latency against throughput per workload.
//!
//! These figures are measured, not modeled: the schedule runs on this machine's clock, so they
//! say what the simulated store keeps up with here and how long its operations wait when it
//! cannot, latencies counted from each operation's scheduled start (no coordinated omission).
//! Each point runs the comparison's `--duration`, or its `--ops` up to five seconds' worth at
//! the point's rate.

use super::{ByIndex, CompareArgs, label, run_of};
use crate::bench::{self, BenchArgs};
use crate::error::{CliError, failed, input};
use crate::index::IndexKind;
use crate::report::Report;
use crate::svg::{self, Series};
use crate::workload::{self, RequestDist, Workload};

/// The longest a point of the sweep runs without `--duration`, in seconds of its schedule.
const POINT_SECONDS: f64 = 5.0;

/// The workloads the sweep runs, with their plots' file names.
const WORKLOADS: [(Workload, &str); 2] = [
    (Workload::YcsbC, "latency_vs_throughput_ycsb-c.svg"),
    (Workload::YcsbA, "latency_vs_throughput_ycsb-a.svg"),
];

/// One workload offered one rate: each index's figures, under its name.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct RatePoint {
    pub workload: String,
    /// Operations per second offered (`--target-rate`).
    pub offered_ops_s: f64,
    #[serde(flatten)]
    pub indexes: ByIndex<RateFigures>,
}

/// One index's run at one offered rate: what it did and the latencies of all its operations,
/// from their scheduled starts.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct RateFigures {
    /// Measured operations per second.
    pub ops_s: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl RateFigures {
    /// From a run's report: its throughput, and its operations' latencies merged.
    fn of(report: &Report) -> Result<Self, CliError> {
        let mut all = crate::bench::latency_histogram()?;
        for (_, h) in &report.latency_histograms {
            all.add(h)
                .map_err(|e| failed!("merging latency histograms: {e}"))?;
        }
        let us = |ns: f64| ns / 1e3;
        Ok(Self {
            ops_s: report.throughput_ops_s,
            mean_us: us(all.mean()),
            p50_us: us(all.value_at_quantile(0.5) as f64),
            p99_us: us(all.value_at_quantile(0.99) as f64),
        })
    }
}

/// Operations a point runs without `--duration`: the comparison's, up to [`POINT_SECONDS`]
/// worth at `rate`.
fn point_ops(ops: u64, rate: f64) -> u64 {
    ops.min((rate * POINT_SECONDS).ceil() as u64).max(1)
}

/// YCSB C and A, uniform requests, at each rate of `--rate-sweep` (one run of each of
/// `indexes`, seed as given), printed as a table.
pub(super) fn rate_sweep(
    args: &CompareArgs,
    defaults: &BenchArgs,
    indexes: &[IndexKind],
    emit: &mut dyn FnMut(String),
) -> Result<Vec<RatePoint>, CliError> {
    emit(String::new());
    emit(format!(
        "Open loop (measured on this machine's simulator, {} threads x {} in flight; latencies from each operation's scheduled start, all operations):",
        args.threads, args.inflight
    ));
    emit(String::new());
    let mut header = String::from("| workload | offered ops/s |");
    for &index in indexes {
        let name = label(index);
        header.push_str(&format!(" {name} ops/s | {name} p50 µs | {name} p99 µs |"));
    }
    emit(header);
    emit(format!(
        "| --- | ---: |{}",
        " ---: |".repeat(3 * indexes.len())
    ));
    let mut points = Vec::new();
    for (workload, _) in WORKLOADS {
        for &rate in &args.rate_sweep {
            if !args.quiet {
                eprintln!("offered {rate} ops/s: {}", workload::name(workload));
            }
            let mut figures = Vec::new();
            for &index in indexes {
                let mut run = run_of(args, defaults, index, args.seed);
                run.workload = workload;
                run.insert_ratio = None;
                run.request_dist = Some(RequestDist::Uniform);
                run.length.target_rate = Some(rate);
                if args.length.duration.is_none() {
                    run.ops = point_ops(args.ops, rate);
                }
                let report = bench::run(&run)?;
                if crate::interrupt::interrupted() {
                    // Ctrl-C: the point under way is left out.
                    return Ok(points);
                }
                if !report.verify_clean {
                    return Err(input!(
                        "{} offered {rate} ops/s: verify found problems after the {} run",
                        workload::name(workload),
                        index.name()
                    ));
                }
                figures.push((index, RateFigures::of(&report)?));
            }
            let point = RatePoint {
                workload: workload::name(workload),
                offered_ops_s: rate,
                indexes: ByIndex(figures),
            };
            let mut row = format!("| {} | {rate} |", point.workload);
            for (_, f) in point.indexes.iter() {
                row.push_str(&format!(
                    " {:.0} | {:.1} | {:.1} |",
                    f.ops_s, f.p50_us, f.p99_us
                ));
            }
            emit(row);
            points.push(point);
        }
    }
    Ok(points)
}

/// A plot per workload of the sweep: each index's p99 (solid) and p50 (dashed) latency against
/// the throughput it did, a point per offered rate.
pub(super) fn plots(
    points: &[RatePoint],
    indexes: &[IndexKind],
    subtitle: &str,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for (workload, file) in WORKLOADS {
        let name = workload::name(workload);
        let mine: Vec<&RatePoint> = points.iter().filter(|p| p.workload == name).collect();
        if mine.is_empty() {
            continue;
        }
        let mut series = Vec::new();
        for &index in indexes {
            for (quantile, dashed) in [("p99", false), ("p50", true)] {
                let points = mine
                    .iter()
                    .filter_map(|p| p.indexes.get(index))
                    .map(|f| {
                        let latency = if dashed { f.p50_us } else { f.p99_us };
                        (f.ops_s, latency)
                    })
                    .collect();
                series.push(Series {
                    name: format!("{}, {quantile}", label(index)),
                    points,
                    dashed,
                    err: Vec::new(),
                });
            }
        }
        // Ticks at the offered rates: a store that keeps up has its points on them.
        let ticks: Vec<(f64, String)> = mine
            .iter()
            .map(|p| (p.offered_ops_s, svg::short(p.offered_ops_s)))
            .collect();
        out.push((
            file,
            svg::latency_chart(
                &format!("{name}, open loop: latency against throughput"),
                subtitle,
                "operations per second done (measured; ticks at the rates offered)",
                "latency from scheduled start, µs (log)",
                &series,
                &ticks,
                2,
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_runs_the_comparison_s_operations_up_to_five_seconds_worth() {
        assert_eq!(point_ops(1_000_000, 1_000.0), 5_000);
        assert_eq!(point_ops(1_000, 1_000_000.0), 1_000);
        assert_eq!(point_ops(10, 0.01), 1);
    }
}
