//! Memory-node bootstrap: bulk load over one or more range-partitioned memory nodes (DESIGN §8).

use leaf_store::{
    BulkLoadConfig, BulkLoadReport, LeafStoreError, Phase, bulk_load_values,
    bulk_load_with_progress,
};
use rdma_transport::{MemoryNodeInfo, Transport};

use crate::IndexError;

/// Bulk-loads `pairs` (unsorted input is sorted; duplicates are an error) over every memory node
/// of `transport`: the sorted keys are split evenly, node `i` serving from its first key (node 0
/// from 0) up to the next node's first key. `config`'s node index, count and key range are set
/// per node; its other fields apply to all.
pub fn bootstrap<T: Transport>(
    transport: &T,
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
) -> Result<Vec<BulkLoadReport>, IndexError> {
    bootstrap_with_progress(transport, pairs, config, |_, _, _, _| {})
}

/// [`bootstrap`], calling `progress(node index, phase, done, total)` as each node's load advances.
pub fn bootstrap_with_progress<T: Transport>(
    transport: &T,
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    progress: impl FnMut(usize, Phase, u64, u64),
) -> Result<Vec<BulkLoadReport>, IndexError> {
    load_all(
        transport,
        pairs,
        config,
        progress,
        |ep, node, pairs, config, p| bulk_load_with_progress(ep, node, pairs, config, p),
    )
}

/// [`bootstrap_with_progress`] for a store with byte values: `config.values` gives every memory
/// node a value region of that size (see `leaf_store::value`).
pub fn bootstrap_values<T: Transport>(
    transport: &T,
    pairs: Vec<(u64, Vec<u8>)>,
    config: &BulkLoadConfig,
    progress: impl FnMut(usize, Phase, u64, u64),
) -> Result<Vec<BulkLoadReport>, IndexError> {
    load_all(
        transport,
        pairs,
        config,
        progress,
        |ep, node, pairs, config, p| bulk_load_values(ep, node, pairs, config, p),
    )
}

type Loader<E, V> = fn(
    &mut E,
    MemoryNodeInfo,
    Vec<(u64, V)>,
    &BulkLoadConfig,
    &mut dyn FnMut(Phase, u64, u64),
) -> Result<BulkLoadReport, LeafStoreError>;

fn load_all<T: Transport, V: Clone>(
    transport: &T,
    mut pairs: Vec<(u64, V)>,
    config: &BulkLoadConfig,
    mut progress: impl FnMut(usize, Phase, u64, u64),
    load: Loader<T::Endpoint, V>,
) -> Result<Vec<BulkLoadReport>, IndexError> {
    let nodes = transport.memory_nodes().to_vec();
    if nodes.is_empty() {
        return Err(IndexError::Config(
            "the transport reaches no memory node".into(),
        ));
    }
    if pairs.is_empty() {
        return Err(LeafStoreError::NoKeys.into());
    }
    if !pairs.is_sorted_by_key(|p| p.0) {
        pairs.sort_unstable_by_key(|p| p.0);
    }
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(LeafStoreError::DuplicateKey(w[0].0).into());
    }
    let (len, count) = (pairs.len(), nodes.len());
    if len < count {
        return Err(IndexError::Config(format!(
            "{len} keys cannot fill {count} memory nodes"
        )));
    }
    let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let parts = partition(&keys, count, config);
    drop(keys);
    let mut ep = transport.endpoint()?;
    let mut reports = Vec::new();
    for (i, (range, node_config)) in parts.into_iter().enumerate() {
        reports.push(load(
            &mut ep,
            nodes[i],
            pairs[range].to_vec(),
            &node_config,
            &mut |phase, done, total| progress(i, phase, done, total),
        )?);
    }
    Ok(reports)
}

/// How [`bootstrap`] range-partitions `keys` (sorted, distinct, at least `count`) over `count`
/// memory nodes: node `i` gets `keys[i·len/count .. (i+1)·len/count]` (never empty) and serves
/// from its first key (0 for node 0) to the next node's first key; returns each node's index
/// range into `keys` and its bulk-load configuration (`config` with the node's index, count and
/// key range). A process that loads one memory node of a deployment uses the same split.
pub fn partition(
    keys: &[u64],
    count: usize,
    config: &BulkLoadConfig,
) -> Vec<(std::ops::Range<usize>, BulkLoadConfig)> {
    let len = keys.len();
    let count = count.max(1);
    let ranges: Vec<std::ops::Range<usize>> = (0..count)
        .map(|i| i * len / count..(i + 1) * len / count)
        .collect();
    let starts: Vec<u64> = ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i == 0 {
                0
            } else {
                keys.get(r.start).copied().unwrap_or(0)
            }
        })
        .collect();
    ranges
        .into_iter()
        .enumerate()
        .map(|(i, range)| {
            let node_config = BulkLoadConfig {
                node_index: i as u64,
                node_count: count as u64,
                key_lo: starts[i],
                key_hi: starts
                    .get(i + 1)
                    .map_or(u64::MAX, |next| next.saturating_sub(1)),
                ..config.clone()
            };
            (range, node_config)
        })
        .collect()
}
