//! ROLEX's remote memory layout, and the one-sided verbs that act on it.
//!
//! Everything a compute node reads and writes on a memory node is defined here, once, with a
//! bit/byte diagram: the [`Superblock`] at offset 0 (all a client needs to attach), the leaf region
//! (`[alloc_num][capacity]` then fixed-size [`Leaf`]s, allocated with one FAA), the 64-bit
//! [`LeafTableEntry`] of the LT and SLT (with its lock bit), the model slot table, the model
//! records with their [`ModelHeader`] word, and the retraining ring ([`RingLayout`]; compute nodes
//! queue a slot with [`queue::enqueue`], and read why the memory node put one off in the
//! [`put_off`] word).
//!
//! The memory-node side builds a pool with [`bulk_load`]; [`verify`] walks a whole pool through an
//! `Endpoint` and checks every structural invariant, returning a report instead of panicking.
//!
//! Every function reaches remote memory only through an [`rdma_transport::Endpoint`], so the same
//! code runs over the simulator and over real RDMA.
//!
//! # Example: lay out a pool, attach to it, verify it
//!
//! ```
//! # #[cfg(loom)] fn main() {} // the simulator's loom build runs only inside loom models
//! # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use leaf_store::{BulkLoadConfig, Layout, bulk_load, read_all_entries, required_pool_bytes, verify};
//! use rdma_transport::Transport;
//! use sim_transport::SimTransport;
//!
//! let pairs: Vec<(u64, u64)> = (0..10_000u64).map(|k| (k * 3, k)).collect();
//! let config = BulkLoadConfig::default(); // ε = δ = 16, 12 keys per leaf, 64 leaves per slot
//! let size = required_pool_bytes(pairs.len() as u64, &config, 1_000); // room for 1,000 more leaves
//! let memory_node = SimTransport::anonymous(&[size.next_multiple_of(8)])?;
//! let node = memory_node.memory_nodes()[0];
//! let mut ep = memory_node.endpoint()?;
//!
//! let report = bulk_load(&mut ep, node, pairs.clone(), &config)?;
//! assert_eq!(report.trained_leaves, 10_000u64.div_ceil(12));
//!
//! // A compute node needs only the superblock to attach.
//! let layout = Layout::attach(&mut ep, node)?;
//! assert_eq!((layout.epsilon(), layout.delta()), (16, 16));
//! assert_eq!(read_all_entries(&mut ep, &layout)?, pairs);
//!
//! // Every structural invariant, walked through the endpoint.
//! let checked = verify(&mut ep, node)?;
//! assert!(checked.is_clean(), "{checked}");
//! assert_eq!(checked.keys, 10_000);
//! # Ok(()) }
//! ```

mod alloc;
mod bulk;
mod entry;
mod error;
pub mod ghost;
mod header;
mod layout;
mod leaf;
mod lock;
pub mod members;
mod problem;
pub mod put_off;
pub mod queue;
mod record;
pub mod redo;
pub mod repair;
mod ring;
pub mod settle;
mod sync;
pub mod value;
mod value_load;
mod verify;
mod verify_values;
mod walk;

pub use alloc::{alloc_leaf, alloc_leaf_verb, check_allocation};
pub use bulk::{
    BulkLoadConfig, BulkLoadReport, CACHE_BYTES_PER_LEAF, MAX_SIZED_FILL,
    MODEL_BYTES_PER_GROWN_LEAF, Phase, SIZED_LEAF_KEYS_PER_FREE_SLOT, ValueConfig, bulk_load,
    bulk_load_values, bulk_load_with_progress, grown_leaf_model_bytes, required_pool_bytes,
    slot_capacity_for,
};
pub use entry::{FREEZE_OWNER, LeafTableEntry, MAX_LEAF_NUM, MAX_OWNER};
pub use error::LeafStoreError;
pub use header::{MAX_SYNONYMS, ModelHeader, SLT_SLOTS};
pub use layout::{LAYOUT_VERSION, Layout, SUPERBLOCK_BYTES, SUPERBLOCK_MAGIC, Superblock};
pub use leaf::{Claimed, Leaf, leaf_bytes, leaf_checksum};
pub use lock::{lock_verb, try_lock, unlock, unlock_verb};
pub use problem::Problem;
pub use record::{ModelRecord, RECORD_FIXED_BYTES, RecordLayout, chain_range, unclaimed_slt};
pub use ring::{RingEntry, RingLayout};
pub use verify::{VerifyReport, verify};
pub use verify_values::ValueSpace;
pub use walk::{
    TORN_READ_RETRIES, read_all_entries, read_all_entries_live, read_leaf, read_record,
    read_record_if_current, read_slot_table, walk_chain,
};

/// Word `i` (8 bytes, little-endian, as every multi-byte value in remote memory) of bytes read
/// from a memory node.
///
/// # Panics
/// If `bytes` is shorter than `8 · (i + 1)`.
pub fn le_word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(w)
}

#[cfg(target_endian = "big")]
compile_error!(
    "ROLEX lays remote words out in little-endian byte order; big-endian hosts are not supported"
);
