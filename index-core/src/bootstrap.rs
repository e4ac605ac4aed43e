//! Memory-node bootstrap: bulk load over one or more range-partitioned memory nodes (DESIGN §8).

use leaf_store::{BulkLoadConfig, BulkLoadReport, LeafStoreError, Phase, bulk_load_with_progress};
use rdma_transport::Transport;

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
    mut pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    mut progress: impl FnMut(usize, Phase, u64, u64),
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
    // Balanced: node i gets pairs[i·len/count .. (i+1)·len/count], never empty.
    let chunks: Vec<Vec<(u64, u64)>> = (0..count)
        .map(|i| pairs[i * len / count..(i + 1) * len / count].to_vec())
        .collect();
    drop(pairs);
    let starts: Vec<u64> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| if i == 0 { 0 } else { c[0].0 })
        .collect();
    let mut ep = transport.endpoint()?;
    let mut reports = Vec::new();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let node_config = BulkLoadConfig {
            node_index: i as u64,
            node_count: nodes.len() as u64,
            key_lo: starts[i],
            key_hi: starts.get(i + 1).map_or(u64::MAX, |next| next - 1),
            ..config.clone()
        };
        reports.push(bulk_load_with_progress(
            &mut ep,
            nodes[i],
            chunk,
            &node_config,
            |phase, done, total| progress(i, phase, done, total),
        )?);
    }
    Ok(reports)
}
