//! Pool files as memory nodes: each is attached under the memory-node id its superblock names, so
//! one process can serve node 2 of three and a compute process can attach to all three.

use crate::error::{CliError, input};
use std::path::{Path, PathBuf};

use leaf_store::Layout;
use rdma_transport::{MemoryNodeInfo, Transport};
use sim_transport::{Pool, SimConfig, SimTransport};

/// Refuses a file that is not a ROLEX pool of this build's layout, from its first two words (the
/// superblock's magic and layout version), before it is mapped.
pub fn check_pool_file(path: &Path) -> Result<(), CliError> {
    use std::io::Read;
    let shown = path.display();
    let mut head = [0u8; 16];
    let mut file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut read = 0;
    while read < head.len() {
        match file.read(&mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => return Err(input!("{shown}: {e}")),
        }
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&head[8 * i..8 * i + 8]);
        u64::from_le_bytes(w)
    };
    if read < head.len() || word(0) != leaf_store::SUPERBLOCK_MAGIC {
        return Err(input!(
            "{shown}: not a ROLEX pool (it does not begin with the superblock's magic \"ROLEXPL1\")"
        ));
    }
    if word(1) != leaf_store::LAYOUT_VERSION {
        return Err(input!(
            "{shown}: a ROLEX pool of layout version {}; this build reads version {}",
            word(1),
            leaf_store::LAYOUT_VERSION
        ));
    }
    Ok(())
}

/// The memory-node id and node count a pool file's superblock names.
pub fn node_of_file(path: &Path) -> Result<(u16, u64), CliError> {
    check_pool_file(path)?;
    let pool = Pool::open_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let transport = SimTransport::new(vec![pool], SimConfig::default());
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint()?;
    let layout = Layout::attach(&mut ep, node).map_err(|e| format!("{}: {e}", path.display()))?;
    let sb = layout.superblock();
    let id = u16::try_from(sb.node_id).map_err(|_| {
        format!(
            "{}: memory-node id {} out of range",
            path.display(),
            sb.node_id
        )
    })?;
    Ok((id, sb.node_count))
}

/// A transport over pool files, each under its superblock's memory-node id. With `complete`, the
/// files must be every node of one deployment (ids 0 .. count, each once).
pub fn attach_files(paths: &[PathBuf], complete: bool) -> Result<SimTransport, CliError> {
    attach_files_with(paths, complete, SimConfig::default())
}

/// [`attach_files`], the simulator configured as `config` says (its latency mode).
pub fn attach_files_with(
    paths: &[PathBuf],
    complete: bool,
    config: SimConfig,
) -> Result<SimTransport, CliError> {
    if paths.is_empty() {
        return Err("no pool file given".into());
    }
    let mut pools = Vec::with_capacity(paths.len());
    let mut counts = Vec::with_capacity(paths.len());
    for path in paths {
        let (id, count) = node_of_file(path)?;
        let pool = Pool::open_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
        pools.push((id, pool));
        counts.push((id, count, path.display().to_string()));
    }
    if complete {
        let count = counts[0].1;
        let mut ids: Vec<u16> = counts.iter().map(|c| c.0).collect();
        ids.sort_unstable();
        let expected: Vec<u16> = (0..count).filter_map(|i| u16::try_from(i).ok()).collect();
        if counts.iter().any(|c| c.1 != count) || ids != expected {
            let found: Vec<String> = counts
                .iter()
                .map(|(id, n, path)| format!("{path}: node {id} of {n}"))
                .collect();
            return Err(input!(
                "the pool files are not one deployment's memory nodes 0..{count}, each once ({})",
                found.join("; ")
            ));
        }
    }
    SimTransport::with_node_ids(pools, config).map_err(CliError::from)
}

/// The memory node a single-pool transport serves.
pub fn only_node(transport: &SimTransport) -> MemoryNodeInfo {
    transport.memory_nodes()[0]
}
