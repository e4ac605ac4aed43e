//! The baselines' run (the B+-tree and the CHIME-style index, both `bplus-tree` pools): the same
//! keys, range-partitioned as ROLEX's bootstrap does.

use crate::error::CliError;
use std::sync::Arc;

use leaf_store::BulkLoadConfig;
use rdma_transport::Transport;
use sim_transport::SimTransport;

use super::measure::{Retraining, RunKeys};
use super::{BenchArgs, progress, run_workload};
use crate::index::IndexKind;
use crate::keys;
use crate::report::Report;
use crate::workload::Mix;

/// A baseline (`--index bplus` or `chime`) on embedded memory nodes: the same key set, range-partitioned over the
/// nodes as ROLEX's bootstrap does, then the same workload. `expected_inserts` is the room the
/// pools keep for inserts: the run's and a load phase's.
pub(super) fn run_bplus(
    args: &BenchArgs,
    ops: u64,
    mix: &Mix,
    set: keys::KeySet,
    plan: Option<keys::LoadPlan>,
    expected_inserts: u64,
) -> Result<Report, CliError> {
    let nodes = args.memory_nodes;
    // What the bulk load holds: every key, or a measured load phase's share.
    let mut sorted = plan.as_ref().map_or(&set.loaded, |p| &p.bulk).clone();
    sorted.sort_unstable();
    if (sorted.len() as u64) < nodes {
        return Err("more memory nodes than loaded keys".into());
    }
    let per_node_guess = (sorted.len() as u64).div_ceil(nodes);
    let config = bplus_tree::BulkLoadConfig {
        // As ROLEX's: every node has room for every insert.
        values: args
            .value_size
            .map(|size| crate::index::value_region(size, per_node_guess + expected_inserts)),
        ..args
            .index
            .tree_layout(args.page_size, args.hopscotch_shape()?)
    };
    // The same shares and key ranges as ROLEX's bootstrap. Each node has room for every insert:
    // they need not spread evenly (appends all go to the last node). Untouched room costs
    // nothing on the simulator's anonymous pools.
    let shares = index_core::partition(&sorted, nodes as usize, &BulkLoadConfig::default());
    let per_node = shares.iter().map(|(r, _)| r.len()).max().unwrap_or(0) as u64;
    let size = bplus_tree::required_pool_bytes(per_node, &config, expected_inserts + 1024)
        .saturating_mul(5)
        / 4;
    let transport = SimTransport::anonymous_with(
        &vec![size.next_multiple_of(4096); nodes as usize],
        super::sim_config(args),
    )?;
    let load_bar = progress(args.quiet, Some(nodes), "bulk load");
    let mut ep = transport.endpoint()?;
    for (&node, (range, share)) in transport.memory_nodes().iter().zip(shares) {
        let node_config = bplus_tree::BulkLoadConfig {
            key_lo: share.key_lo,
            key_hi: share.key_hi,
            ..config.clone()
        };
        match args.value_size {
            Some(size) => bplus_tree::bulk_load_values(
                &mut ep,
                node,
                sorted[range]
                    .iter()
                    .map(|&k| (k, crate::index::value_bytes(size, k, k)))
                    .collect(),
                &node_config,
            ),
            None => bplus_tree::bulk_load(
                &mut ep,
                node,
                sorted[range].iter().map(|&k| (k, k)).collect(),
                &node_config,
            ),
        }?;
        load_bar.inc(1);
    }
    load_bar.finish_and_clear();
    let cache_budget = args.cache_budget.map(|b| b.bytes(set.loaded.len() as u64));
    let tree = bplus_tree::Tree::open(
        transport,
        bplus_tree::TreeConfig {
            cache_from_level: args.cache_from_level,
            cache_budget,
            hot_entries_bytes: hot_entries_bytes(args.index, cache_budget, set.loaded.len()),
            ..bplus_tree::TreeConfig::default()
        },
    )?;
    let tree = Arc::new(tree);
    let keys = RunKeys {
        loaded: set.loaded,
        to_insert: set.to_insert,
        load: plan,
    };
    match args.value_size {
        Some(size) => run_workload(
            args,
            ops,
            mix,
            Arc::new(crate::index::ValueStore::new(tree, size)),
            keys,
            Retraining::default(),
        ),
        None => run_workload(args, ops, mix, tree, keys, Retraining::default()),
    }
}

/// The CHIME-style index's buffer of hot entries: a tenth of the cache budget (the rest caches
/// internal pages), or without a budget a tenth of a byte per loaded key (as with a budget of
/// one byte per key); none for the B+-tree.
fn hot_entries_bytes(index: IndexKind, budget: Option<u64>, keys: usize) -> u64 {
    if index != IndexKind::Chime {
        return 0;
    }
    budget.unwrap_or(keys as u64) / 10
}
