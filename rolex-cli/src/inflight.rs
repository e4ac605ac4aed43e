//! `rolex inflight`: throughput against the operations each thread keeps in flight, for ROLEX
//! and both baselines (the B+-tree and the CHIME-style index) — measured in the simulator's
//! latency mode (every batch a round trip of wall-clock time) and modeled from the same runs'
//! counters — as a table, a JSON report and a plot.

use std::path::PathBuf;

use clap::Parser;

use crate::error::{CliError, failed, input};
use crate::index::IndexKind;
use crate::svg::{self, Series};
use crate::workload::Workload;
use crate::{bench, report};

/// What `rolex inflight` takes.
#[derive(Debug, clap::Args)]
pub(crate) struct InflightArgs {
    /// Keys to bulk-load for each run.
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::checks::positive_count)]
    keys: u64,
    /// Operations per run.
    #[arg(long, default_value_t = 200_000, value_parser = crate::checks::positive_count)]
    ops: u64,
    /// Compute threads.
    #[arg(long, default_value_t = 1, value_parser = crate::checks::threads)]
    threads: u64,
    /// The operations in flight per thread to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8",
          value_parser = crate::checks::inflight)]
    depths: Vec<u64>,
    /// The simulator's round trip, in µs (latency mode: long enough that the wire, not the
    /// simulator's CPU, bounds a thread).
    #[arg(long, default_value_t = 10.0, value_parser = crate::checks::latency_us)]
    latency_us: f64,
    /// The workload.
    #[arg(long, value_enum, default_value_t = Workload::YcsbC)]
    workload: Workload,
    /// Seed of the keys and operation streams (the same for every index and depth).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    seed: u64,
    /// Where the table (`table.md`), the report (`inflight.json`) and the plot
    /// (`throughput_vs_inflight.svg`) go.
    #[arg(long, default_value = "inflight")]
    out: PathBuf,
    /// Hide progress.
    #[arg(long)]
    quiet: bool,
}

/// The indexes swept, in the order they run (and are plotted).
const INDEXES: [IndexKind; 3] = [IndexKind::Rolex, IndexKind::Bplus, IndexKind::Chime];

/// One index at one depth.
#[derive(Debug, serde::Serialize)]
struct Point {
    index: &'static str,
    inflight: u64,
    measured_ops_s: f64,
    modeled_ops_s: f64,
    rtts_per_op: f64,
    mean_latency_us: f64,
}

/// Runs every index at every depth, prints the table as it grows, writes it, the JSON report
/// and the plot.
pub(crate) fn run(args: &InflightArgs) -> Result<(), CliError> {
    let make_out = crate::checks::output_dir(&args.out, "--out")?;
    let mut depths = args.depths.clone();
    depths.sort_unstable();
    depths.dedup();
    if let Some(&deepest) = depths.last()
        && args.threads.saturating_mul(deepest) > crate::checks::MAX_THREADS
    {
        return Err(input!(
            "--threads {} x --depths {deepest} = {} clients: a compute node has {} connection indexes",
            args.threads,
            args.threads * deepest,
            crate::checks::MAX_THREADS
        ));
    }
    if let Some(dir) = make_out {
        crate::checks::make_dir(&dir, "--out")?;
    }
    let mut table = format!(
        "{} over {} keys, {} operations per run, {} thread(s), simulator latency mode ({} µs round trip); modeled: RTT 2 µs, 100 Gb/s, NIC 50 Mverbs/s, threads x inflight clients\n\n",
        crate::workload::name(args.workload),
        args.keys,
        args.ops,
        args.threads,
        args.latency_us
    );
    table.push_str("| index | in flight | measured ops/s | × one in flight | modeled ops/s | RTT/op | mean latency µs |\n");
    table.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    print!("{table}");
    let mut points = Vec::new();
    for index in INDEXES {
        let mut first = None;
        for &depth in &depths {
            if !args.quiet {
                eprintln!("{} with {depth} in flight", index.name());
            }
            let mut run = crate::suite::BenchDefaults::try_parse_from(["rolex"])?.args;
            run.index = index;
            run.keys = args.keys;
            run.ops = args.ops;
            run.threads = args.threads;
            run.inflight = depth;
            run.latency_us = Some(args.latency_us);
            run.workload = args.workload;
            run.seed = args.seed;
            run.quiet = true;
            let report = bench::run(&run)?;
            if !report.verify_clean {
                return Err(failed!(
                    "{} with {depth} in flight: verify found problems",
                    index.name()
                ));
            }
            let measured = report.throughput_ops_s;
            let base = *first.get_or_insert(measured);
            let ops: u64 = report.ops.values().map(|o| o.count).sum();
            let mean_latency_us = report
                .ops
                .values()
                .map(|o| o.latency_us.mean * o.count as f64)
                .sum::<f64>()
                / ops.max(1) as f64;
            let point = Point {
                index: index.name(),
                inflight: depth,
                measured_ops_s: measured,
                modeled_ops_s: report.modeled.throughput_ops_s,
                rtts_per_op: report::weighted(&report, |o| o.rtts_per_op),
                mean_latency_us,
            };
            let line = format!(
                "| {} | {} | {:.0} | {:.2} | {:.0} | {:.3} | {:.1} |\n",
                point.index,
                point.inflight,
                point.measured_ops_s,
                measured / base.max(1e-9),
                point.modeled_ops_s,
                point.rtts_per_op,
                point.mean_latency_us
            );
            print!("{line}");
            table.push_str(&line);
            points.push(point);
        }
    }
    let series = |index: IndexKind, modeled: bool| Series {
        name: format!(
            "{} {}",
            crate::compare::label(index),
            if modeled { "modeled" } else { "measured" }
        ),
        points: points
            .iter()
            .filter(|p| p.index == index.name())
            .map(|p| {
                let y = if modeled {
                    p.modeled_ops_s
                } else {
                    p.measured_ops_s
                };
                (p.inflight as f64, y)
            })
            .collect(),
        dashed: modeled,
        err: Vec::new(),
    };
    let plot = svg::line_chart(
        &format!(
            "Throughput against operations in flight per thread ({})",
            crate::workload::name(args.workload)
        ),
        &format!(
            "{} thread(s); measured: simulator latency mode, {} µs round trip; modeled: 2 µs, threads x inflight clients",
            args.threads, args.latency_us
        ),
        "operations in flight per thread",
        "operations per second",
        &[false, true]
            .iter()
            .flat_map(|&modeled| INDEXES.map(|index| series(index, modeled)))
            .collect::<Vec<_>>(),
        true,
    );
    let write = |name: &str, body: String| -> Result<(), CliError> {
        let path = args.out.join(name);
        std::fs::write(&path, body).map_err(|e| failed!("{}: {e}", path.display()))
    };
    write("table.md", table)?;
    write("throughput_vs_inflight.svg", plot)?;
    write(
        "inflight.json",
        serde_json::to_string_pretty(&serde_json::json!({
            "keys": args.keys,
            "ops": args.ops,
            "threads": args.threads,
            "latency_us": args.latency_us,
            "workload": crate::workload::name(args.workload),
            "points": points,
        }))? + "\n",
    )?;
    println!(
        "table and plot: {} (table.md, throughput_vs_inflight.svg, inflight.json)",
        args.out.display()
    );
    Ok(())
}
