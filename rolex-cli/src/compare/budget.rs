//! The cache-budget sweep of `rolex compare`: YCSB C and A (uniform requests) with both indexes
//! held to each budget of `--budget-sweep`, modeled at 64 threads with the comparison's operations in flight, as a second table.

use sim_transport::cost_model::NetworkProfile;

use super::{BudgetPoint, CompareArgs, modeled_at, run_of};
use crate::bench::{self, BenchArgs};
use crate::error::{CliError, failed, input};
use crate::index::IndexKind;
use crate::report::weighted;
use crate::workload::{self, RequestDist, Workload};

/// The table's line saying what the compute nodes may cache.
pub(super) fn emit_budget_line(table: &mut String, budget: Option<crate::checks::CacheBudget>) {
    table.push_str(&match budget {
        Some(b) => format!("compute-side cache budget, both indexes: {b}\n\n"),
        None => "compute-side cache budget: none (each index caches what it uses)\n\n".into(),
    });
}

/// YCSB C and A, uniform requests, at each budget of `--budget-sweep` (one run each, seed as
/// given), printed as a second table.
pub(super) fn budget_sweep(
    args: &CompareArgs,
    defaults: &BenchArgs,
    profile: &NetworkProfile,
    emit: &mut dyn FnMut(String),
) -> Result<Vec<BudgetPoint>, CliError> {
    emit(String::new());
    emit(format!(
        "Against the compute-side cache budget (uniform requests, modeled at 64 threads x {} in flight):",
        args.inflight
    ));
    emit(String::new());
    emit("| budget, bytes/key | workload | ROLEX ops/s | B+-tree ops/s | ratio | ROLEX cache, bytes/key | B+-tree cache, bytes/key | RTT/op ROLEX | RTT/op B+-tree | bytes/op ROLEX | bytes/op B+-tree |".into());
    emit("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |".into());
    let mut points = Vec::new();
    for &budget in &args.budget_sweep {
        for workload in [Workload::YcsbC, Workload::YcsbA] {
            if !args.quiet {
                eprintln!(
                    "cache budget {budget} bytes per key: {}",
                    workload::name(workload)
                );
            }
            let mut reports = Vec::new();
            for index in [IndexKind::Rolex, IndexKind::Bplus] {
                let mut run = run_of(args, defaults, index, args.seed);
                run.cache_budget = Some(crate::checks::CacheBudget::PerKey(budget));
                run.workload = workload;
                run.insert_ratio = None;
                run.request_dist = Some(RequestDist::Uniform);
                let report = bench::run(&run)?;
                if crate::interrupt::interrupted() {
                    // Ctrl-C: the point under way is left out.
                    return Ok(points);
                }
                if !report.verify_clean {
                    return Err(input!(
                        "{} at a cache budget of {budget}: verify found problems after the {} run",
                        workload::name(workload),
                        index.name()
                    ));
                }
                reports.push(report);
            }
            let (Some(bplus), Some(rolex)) = (reports.pop(), reports.pop()) else {
                return Err(failed!("a run produced no report"));
            };
            let point = BudgetPoint {
                workload: workload::name(workload),
                budget_bytes_per_key: budget,
                rolex_ops_s: modeled_at(&rolex, 64 * args.inflight, profile),
                bplus_ops_s: modeled_at(&bplus, 64 * args.inflight, profile),
                rolex_cache_bytes_per_key: rolex.cache_bytes_per_key,
                bplus_cache_bytes_per_key: bplus.cache_bytes_per_key,
                rolex_rtts_per_op: weighted(&rolex, |o| o.rtts_per_op),
                bplus_rtts_per_op: weighted(&bplus, |o| o.rtts_per_op),
                rolex_bytes_per_op: weighted(&rolex, |o| o.bytes_per_op),
                bplus_bytes_per_op: weighted(&bplus, |o| o.bytes_per_op),
            };
            emit(format!(
                "| {} | {} | {:.0} | {:.0} | {:.2} | {:.3} | {:.3} | {:.2} | {:.2} | {:.0} | {:.0} |",
                point.budget_bytes_per_key,
                point.workload,
                point.rolex_ops_s,
                point.bplus_ops_s,
                point.rolex_ops_s / point.bplus_ops_s.max(1e-9),
                point.rolex_cache_bytes_per_key,
                point.bplus_cache_bytes_per_key,
                point.rolex_rtts_per_op,
                point.bplus_rtts_per_op,
                point.rolex_bytes_per_op,
                point.bplus_bytes_per_op,
            ));
            points.push(point);
        }
    }
    Ok(points)
}
