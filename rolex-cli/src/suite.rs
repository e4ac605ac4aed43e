//! `rolex suite`: YCSB A–F under uniform and zipfian requests, each on a fresh embedded pool,
//! as one table (measured and modeled columns apart).

use crate::error::{CliError, failed};
use std::io::Write;
use std::path::PathBuf;

use clap::Parser;

use crate::{bench, report, workload};

#[derive(Debug, clap::Args)]
pub(crate) struct SuiteArgs {
    /// Keys to bulk-load for each run.
    #[arg(long, default_value_t = 10_000_000, value_parser = crate::checks::positive_count)]
    keys: u64,
    /// Operations per run.
    #[arg(long, default_value_t = 1_000_000, value_parser = crate::checks::positive_count)]
    ops: u64,
    /// Compute threads (at most 128).
    #[arg(long, default_value_t = 2, value_parser = crate::checks::threads)]
    threads: u64,
    /// Operations each thread keeps in flight (threads x inflight at most 128; the modeled
    /// columns count threads x inflight clients).
    #[arg(long, default_value_t = 1, value_parser = crate::checks::inflight)]
    inflight: u64,
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    seed: u64,
    /// Write every run's full report here, as a JSON array.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Parses bench defaults (so the suite runs exactly what `rolex bench` would).
#[derive(Debug, Parser)]
pub(crate) struct BenchDefaults {
    #[command(flatten)]
    pub(crate) args: bench::BenchArgs,
}

pub(crate) fn run(args: &SuiteArgs) -> Result<(), CliError> {
    if let Some(path) = &args.json {
        crate::checks::output_file(path, "--json", false)?;
    }
    use workload::{RequestDist, Workload};
    let workloads = Workload::YCSB;
    let run_of = |workload: Workload, dist: RequestDist| -> Result<bench::BenchArgs, CliError> {
        let mut run = BenchDefaults::try_parse_from(["rolex"])?.args;
        run.keys = args.keys;
        run.ops = args.ops;
        run.threads = args.threads;
        run.inflight = args.inflight;
        run.seed = args.seed;
        run.workload = workload;
        run.request_dist = Some(dist);
        run.quiet = true;
        Ok(run)
    };
    // Every run must fit in this machine's memory, checked before the first.
    for workload in workloads {
        bench::check_memory_of(&run_of(workload, RequestDist::Uniform)?)?;
    }
    println!(
        "| workload | requests | measured ops/s | RTT/op | bytes/op | p50 µs | p99 µs || modeled µs/op | modeled ops/s |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: || ---: | ---: |");
    let mut reports = Vec::new();
    for workload in workloads {
        for dist in [RequestDist::Uniform, RequestDist::Zipfian] {
            let run = run_of(workload, dist)?;
            let report = bench::run(&run)?;
            let weighted = |f: fn(&report::OpReport) -> f64| report::weighted(&report, f);
            // Latency percentiles of the workload's main operation.
            let main = report
                .ops
                .iter()
                .max_by_key(|(_, o)| o.count)
                .map(|(_, o)| o.latency_us.clone());
            println!(
                "| {} | {} | {:.0} | {:.3} | {:.0} | {:.2} | {:.2} || {:.2} | {:.0} |",
                workload::name(workload),
                workload::name(dist),
                report.throughput_ops_s,
                weighted(|o| o.rtts_per_op),
                weighted(|o| o.bytes_per_op),
                main.as_ref().map_or(0.0, |l| l.p50),
                main.as_ref().map_or(0.0, |l| l.p99),
                report.modeled.latency_us,
                report.modeled.throughput_ops_s
            );
            std::io::stdout().flush()?;
            if !report.verify_clean {
                return Err(failed!("verify found problems after a run"));
            }
            reports.push(report);
        }
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&reports)?;
        std::fs::write(path, json + "\n").map_err(|e| failed!("{}: {e}", path.display()))?;
    }
    Ok(())
}
