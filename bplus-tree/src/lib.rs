//! A Sherman-style B+-tree on one-sided RDMA verbs — the baseline ROLEX is measured against, on
//! the same [`rdma_transport`] and so with the same counters and cost model.
//!
//! What it is (see the README section "The B+-tree baseline" for what differs from Sherman):
//! - **Pages** of a fixed size (default 1 KiB) in the memory node's region ([`Page`]): leaves of
//!   unsorted `(key, value)` entries that a write changes one at a time, internal pages of sorted
//!   separators; every page has low and high fences and a right sibling (a B-link tree), so a
//!   reader that meets a page split under it moves right instead of failing.
//! - **Whole pages or nothing**: a page carries a checksum seeded with its number; a torn or
//!   misplaced read is read again.
//! - **Locks** in a lock table of 8-byte words in the memory node ([`Layout::lock_addr`]), one
//!   CAS to take, one WRITE to release riding in the batch that writes the data; their verbs are
//!   counted apart ([`ClientStats::lock_verbs`]). Threads of one compute node queue locally and
//!   hand a held lock to a local waiter (at most [`MAX_HANDOVERS`] times in a row).
//! - **A compute-side cache** of internal pages ([`Tree::cache_bytes`]): a GET whose leaf's
//!   parent is cached is one READ of one page.
//! - **Splits** up to a new root (CAS of the root word); pages are never merged or freed.
//! - **Byte values** (a pool bulk-loaded with [`bulk_load_values`]) as ROLEX stores them: a leaf
//!   entry holds an 8-byte reference to a block (key, length, checksum, value) in the pool's
//!   value region; the block travels in the batch that takes the lock, so a write still takes two
//!   round trips and a GET two (the leaf, the block). Compute nodes carve blocks from chunks
//!   taken with one FAA; a freed block is used again after [`REUSE_GRACE`] (a time, where ROLEX
//!   has retirement epochs: see `Client::get_value`).
//!
//! - **Operations in flight**: a [`Pipeline`] ([`Tree::pipeline`]) of `K` clients runs up to
//!   `K` operations on one thread through a [`Session`] of the `kv-session` crate, as ROLEX's
//!   does: each batch is posted and awaited while the others go on.
//!
//! Every operation is linearizable with respect to completed writes; scans never skip a key
//! present throughout them.

mod bulk;
mod client;
mod layout;
mod locks;
mod page;
mod pipeline;
mod value;
mod verify;
mod wait;

pub use bulk::{BulkLoadConfig, bulk_load, bulk_load_values, required_pool_bytes};
pub use client::{Client, ClientStats, HOT_ENTRY_BYTES, Tree, TreeConfig};
pub use layout::{Layout, LeafKind, MAGIC, VERSION, root_word, unpack_root};
pub use leaf_store::ValueConfig;
pub use locks::MAX_HANDOVERS;
pub use page::{HEADER_WORDS, Page, page_checksum};
pub use pipeline::{Busy, Done, Lane, Pipeline, Reply, Request, Session};
pub use value::REUSE_GRACE;
pub use verify::{VerifyReport, verify};

use rdma_transport::TransportError;

/// What can go wrong.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TreeError {
    /// A verb failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Bad parameters or input.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The region is too small for what was asked.
    #[error("pool too small: {needed} bytes needed, {available} available")]
    PoolTooSmall {
        /// Bytes needed.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// Every page of a memory node is in use.
    #[error("memory node {node} has no free page (capacity {capacity})")]
    PoolExhausted {
        /// The memory node.
        node: u16,
        /// Its page capacity.
        capacity: u64,
    },
    /// A pool's contents cannot be what this build wrote.
    #[error("corrupt pool: {0}")]
    Corrupt(String),
    /// Keys given to a bulk load were not unique.
    #[error("duplicate key {0}")]
    DuplicateKey(u64),
    /// A lock stayed held past the wait limit (a crashed writer?). Nothing was changed.
    #[error("the lock of page {page} on memory node {node} stayed held past the wait limit")]
    LockTimeout {
        /// The memory node.
        node: u16,
        /// The page.
        page: u64,
    },
    /// A byte value longer than the memory node stores.
    #[error(
        "a value of {len} bytes is longer than memory node {node} stores ({limit} bytes at most)"
    )]
    ValueTooLarge {
        /// The memory node.
        node: u16,
        /// The value's length.
        len: u64,
        /// The longest value its value region stores.
        limit: u64,
    },
    /// Every chunk of the memory node's value region is handed out and full.
    #[error("value region of memory node {node} exhausted: all {chunks} chunks are in use")]
    ValuesExhausted {
        /// The memory node.
        node: u16,
        /// Chunks its value region holds.
        chunks: u64,
    },
    /// A `u64` operation on a pool with byte values, or a byte-value operation on a pool with
    /// `u64` values.
    #[error("memory node {node} stores {stores} values; use the {stores} operations")]
    WrongValueKind {
        /// The memory node.
        node: u16,
        /// What its pool stores: "byte" or "u64".
        stores: &'static str,
    },
    /// A page kept failing its checksum, or the tree kept changing under the operation.
    #[error("gave up after {0} attempts: pages kept changing or failing their checksum")]
    TooManyRetries(u32),
}
