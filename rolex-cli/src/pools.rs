//! Pool files as memory nodes: each is attached under the memory-node id its superblock names, so
//! one process can serve node 2 of three and a compute process can attach to all three.

use crate::error::{CliError, input};
use std::path::{Path, PathBuf};

use leaf_store::Layout;
use rdma_transport::{MemoryNodeInfo, Transport};
use sim_transport::{Pool, SimConfig, SimTransport};

/// Refuses a file that is not a ROLEX pool of this build's layout, from its first two words (the
/// superblock's magic and layout version), and one shorter than its superblock says the pool is
/// (a truncated file), before it is mapped. Returns the pool's size as its superblock records it,
/// when the superblock is whole (a damaged one is reported when the pool is attached).
pub fn check_pool_file(path: &Path) -> Result<Option<u64>, CliError> {
    use std::io::Read;
    let shown = path.display();
    let mut head = [0u8; leaf_store::SUPERBLOCK_BYTES as usize];
    let mut file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
    let file_len = file.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
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
    if read < 16 || word(0) != leaf_store::SUPERBLOCK_MAGIC {
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
    if read < head.len() {
        return Err(input!(
            "{shown}: the file is {file_len} bytes, shorter than a pool's superblock ({} bytes): was it truncated?",
            head.len()
        ));
    }
    // The pool's own size as its superblock records it (any region length passes here).
    let Ok(sb) = leaf_store::Superblock::decode(&head, u64::MAX) else {
        return Ok(None);
    };
    if file_len < sb.pool_bytes {
        return Err(truncated(path, file_len, sb.pool_bytes));
    }
    Ok(Some(sb.pool_bytes))
}

/// A pool file shorter than its superblock says.
fn truncated(path: &Path, file_len: u64, pool_bytes: u64) -> CliError {
    input!(
        "{}: the file is {file_len} bytes, shorter than its superblock says: a pool of {pool_bytes} bytes, and the simulated NIC's area after it; was it truncated?",
        path.display()
    )
}

/// Maps a pool file, after [`check_pool_file`]: a file too short for the pool its superblock
/// records, and the simulated NIC's area behind it, is named so.
pub fn open_pool(path: &Path) -> Result<Pool, CliError> {
    let pool_bytes = check_pool_file(path)?;
    let file_len = || std::fs::metadata(path).map_or(0, |m| m.len());
    match (Pool::open_file(path), pool_bytes) {
        (Ok(pool), Some(needed)) if pool.len() < needed => Err(truncated(path, file_len(), needed)),
        (Ok(pool), _) => Ok(pool),
        // The file is no longer than the NIC's area: shorter than any pool.
        (Err(sim_transport::PoolError::BadSize(n)), Some(needed)) if n == file_len() => {
            Err(truncated(path, n, needed))
        }
        (Err(e), _) => Err(input!("{}: {e}", path.display())),
    }
}

/// The memory-node id and node count a pool file's superblock names.
pub fn node_of_file(path: &Path) -> Result<(u16, u64), CliError> {
    let pool = open_pool(path)?;
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
        let pool = open_pool(path)?;
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

/// Whether a `rolex memnode` serves the pool file at `path` now: a memnode holds an exclusive lock
/// on its pool file for as long as it runs (taken before it loads or resumes the pool, released
/// by the kernel when it exits, killed or not), so the lock is held exactly while one serves.
/// Asked at once, without waiting: a shared lock is tried and, if it is granted (nobody serves),
/// dropped again at once (`rolex memnode` waits out a lock held that briefly). `Err`: the file
/// system cannot say (it takes no locks), with why.
pub fn served(path: &Path) -> Result<bool, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    match file.try_lock_shared() {
        // Nobody holds it exclusively; the shared lock goes with the file, now.
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(e.to_string()),
    }
}
