//! The cache-budget sweep of `rolex compare`: YCSB C and A (uniform requests) with every index
//! held to each budget of `--budget-sweep`, modeled at 64 threads with the comparison's
//! operations in flight, as a second table.

use sim_transport::cost_model::NetworkProfile;

use super::{
    BudgetFigures, BudgetPoint, ByIndex, CompareArgs, bytes, label, modeled_at, rtts, run_of,
};
use crate::bench::{self, BenchArgs};
use crate::error::{CliError, input};
use crate::index::IndexKind;
use crate::workload::{self, RequestDist, Workload};

/// The table's line saying what the compute nodes may cache.
pub(super) fn emit_budget_line(table: &mut String, budget: Option<crate::checks::CacheBudget>) {
    table.push_str(&match budget {
        Some(b) => format!("compute-side cache budget, every index: {b}\n"),
        None => "compute-side cache budget: none (each index caches what it uses)\n".into(),
    });
    // ROLEX's leaves, where a budget per key sizes them (as each bench run does).
    if let Some(crate::checks::CacheBudget::PerKey(per_key)) = budget {
        let default = leaf_store::BulkLoadConfig::default();
        let sized = default.clone().sized_for_cache(per_key);
        if sized != default {
            table.push_str(&format!(
                "ROLEX's leaves sized for it: {} keys in leaves of {} slots (the default: {} in {})\n",
                sized.fill, sized.delta, default.fill, default.delta
            ));
        }
    }
    table.push('\n');
}

/// YCSB C and A, uniform requests, at each budget of `--budget-sweep` (one run of each of
/// `indexes`, ROLEX first, seed as given), printed as a second table.
pub(super) fn budget_sweep(
    args: &CompareArgs,
    defaults: &BenchArgs,
    indexes: &[IndexKind],
    profile: &NetworkProfile,
    emit: &mut dyn FnMut(String),
) -> Result<Vec<BudgetPoint>, CliError> {
    let baselines = &indexes[1.min(indexes.len())..];
    let all = |what: &str| {
        format!(
            "{what} ({})",
            indexes
                .iter()
                .map(|&i| label(i))
                .collect::<Vec<_>>()
                .join(" / ")
        )
    };
    emit(String::new());
    emit(format!(
        "Against the compute-side cache budget (uniform requests, modeled at 64 threads x {} in flight):",
        args.inflight
    ));
    emit(String::new());
    let mut header = String::from("| budget, bytes/key | workload |");
    for &index in indexes {
        header.push_str(&format!(" {} ops/s |", label(index)));
    }
    for &b in baselines {
        header.push_str(&format!(" ROLEX/{} |", label(b)));
    }
    header.push_str(&format!(
        " {} | {} | {} |",
        all("cache, bytes/key"),
        all("RTT/op"),
        all("bytes/op")
    ));
    emit(header);
    emit(format!(
        "| ---: | --- |{}",
        " ---: |".repeat(indexes.len() + baselines.len() + 3)
    ));
    let mut points = Vec::new();
    for &budget in &args.budget_sweep {
        for workload in [Workload::YcsbC, Workload::YcsbA] {
            if !args.quiet {
                eprintln!(
                    "cache budget {budget} bytes per key: {}",
                    workload::name(workload)
                );
            }
            let mut figures = Vec::new();
            for &index in indexes {
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
                figures.push((
                    index,
                    BudgetFigures {
                        ops_s: modeled_at(&report, 64 * args.inflight, profile),
                        cache_bytes_per_key: report.cache_bytes_per_key,
                        rtts_per_op: rtts(&report),
                        bytes_per_op: bytes(&report),
                    },
                ));
            }
            let point = BudgetPoint {
                workload: workload::name(workload),
                budget_bytes_per_key: budget,
                indexes: ByIndex(figures),
            };
            let joined = |f: &dyn Fn(&BudgetFigures) -> String| {
                point
                    .indexes
                    .iter()
                    .map(|(_, p)| f(p))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let mut row = format!("| {} | {} |", point.budget_bytes_per_key, point.workload);
            for (_, p) in point.indexes.iter() {
                row.push_str(&format!(" {:.0} |", p.ops_s));
            }
            let rolex = point.indexes.get(IndexKind::Rolex).map_or(0.0, |p| p.ops_s);
            for &b in baselines {
                let base = point.indexes.get(b).map_or(0.0, |p| p.ops_s);
                row.push_str(&format!(" {:.2} |", rolex / base.max(1e-9)));
            }
            row.push_str(&format!(
                " {} | {} | {} |",
                joined(&|p| format!("{:.3}", p.cache_bytes_per_key)),
                joined(&|p| format!("{:.2}", p.rtts_per_op)),
                joined(&|p| format!("{:.0}", p.bytes_per_op)),
            ));
            emit(row);
            points.push(point);
        }
    }
    Ok(points)
}
