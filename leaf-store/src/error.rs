//! Errors of the layout layer.

use rdma_transport::TransportError;

/// What went wrong. Bad input gets a variant that says what was wrong with it; nothing panics.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeafStoreError {
    /// A verb failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Offset 0 does not hold a ROLEX superblock.
    #[error("not a ROLEX pool: bad superblock magic {0:#018x}")]
    BadMagic(u64),
    /// A layout version this build cannot read.
    #[error("unsupported pool layout version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the superblock.
        found: u64,
        /// Version this build reads.
        supported: u64,
    },
    /// The superblock is damaged or describes regions that do not fit the memory node.
    #[error("corrupt superblock: {0}")]
    CorruptSuperblock(&'static str),
    /// The pool cannot hold what was asked.
    #[error("pool too small: {needed} bytes needed, {available} available")]
    PoolTooSmall {
        /// Bytes the layout needs.
        needed: u64,
        /// Bytes the memory node has.
        available: u64,
    },
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// Bulk-load input holds a key twice.
    #[error("duplicate key {0} in bulk-load input")]
    DuplicateKey(u64),
    /// Bulk-load input is empty.
    #[error("bulk-load input holds no keys")]
    NoKeys,
    /// A bulk-load key outside the memory node's key range.
    #[error("key {key} lies outside this memory node's range [{lo}, {hi}]")]
    KeyOutOfRange {
        /// The key.
        key: u64,
        /// First key of the range.
        lo: u64,
        /// Last key of the range.
        hi: u64,
    },
    /// Every leaf of the leaf region is allocated.
    #[error("pool exhausted: all {capacity} leaves are allocated")]
    PoolExhausted {
        /// Leaves the region holds.
        capacity: u64,
    },
    /// A leaf's checksum does not match: it was read while being written (or is damaged).
    #[error("leaf {leaf_num} failed its checksum (torn read or damage)")]
    TornLeaf {
        /// The leaf.
        leaf_num: u64,
    },
    /// A leaf whose checksum holds but whose contents are impossible.
    #[error("corrupt leaf: {0}")]
    CorruptLeaf(&'static str),
    /// More entries than a leaf has slots.
    #[error("{entries} entries do not fit a leaf of δ = {delta} slots")]
    LeafOverflow {
        /// Entries to store.
        entries: usize,
        /// Slots per leaf.
        delta: u64,
    },
    /// A byte value longer than the pool stores.
    #[error("a value of {len} bytes is longer than this pool stores ({limit} bytes at most)")]
    ValueTooLarge {
        /// The value's length.
        len: u64,
        /// The longest value the pool's value region stores.
        limit: u64,
    },
    /// A model record that cannot be decoded.
    #[error("corrupt model record of slot {slot}: {reason}")]
    CorruptRecord {
        /// The model slot.
        slot: u64,
        /// What is wrong.
        reason: String,
    },
}

impl From<learned_model::TrainError> for LeafStoreError {
    fn from(e: learned_model::TrainError) -> Self {
        LeafStoreError::InvalidConfig(e.to_string())
    }
}
