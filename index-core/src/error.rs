//! Errors of the store. "Not found" is not an error; these are.

use leaf_store::LeafStoreError;
use rdma_transport::TransportError;

/// Why an operation failed. None of them leaves partial state: an operation that fails after
/// taking a leaf lock releases it (or, if even that fails, says so with
/// [`IndexError::LockMayRemain`]), and data is only ever moved inside a locked chain in an order
/// that keeps every key reachable.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// A verb failed (connection lost, memory node unreachable, …).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The pool's layout is damaged or cannot be read.
    #[error("pool layout: {0}")]
    Layout(LeafStoreError),
    /// The memory node has no free leaf for a split.
    #[error("pool exhausted on memory node {node}: all {capacity} leaves are allocated")]
    PoolExhausted {
        /// The memory node.
        node: u16,
        /// Its leaf capacity.
        capacity: u64,
    },
    /// A model slot's synonym leaf table stayed full (255 synonym leaves) through every backoff:
    /// the slot needs retraining before it takes more keys. Nothing was changed.
    #[error(
        "slot {slot} of memory node {node} is full (255 synonym leaves) and was not retrained in time{}",
        retrainer.as_ref().map_or(String::new(), |why| format!(": the memory node put it off because {why}"))
    )]
    SltFull {
        /// The memory node.
        node: u16,
        /// The slot.
        slot: u64,
        /// Why the memory node's retrainer put the slot off, if it says so.
        retrainer: Option<String>,
    },
    /// The slot's record stayed frozen by a retraining through every backoff, or the slot was
    /// split and the new slot serving the key stayed unpublished (is the memory node's retrainer
    /// stalled?). Nothing was changed.
    #[error("slot {slot} of memory node {node} stayed frozen by a retraining past the wait limit")]
    RetrainingTimeout {
        /// The memory node.
        node: u16,
        /// The slot.
        slot: u64,
    },
    /// A leaf lock stayed held by someone else through every backoff (a crashed writer?).
    #[error("leaf lock of slot {slot} leaf {leaf} on memory node {node} stayed held")]
    LockTimeout {
        /// The memory node.
        node: u16,
        /// The slot.
        slot: u64,
        /// Trained leaf index in the slot.
        leaf: u64,
    },
    /// A verb failed while this client held the lock of trained leaf `leaf`, and releasing the
    /// lock failed too (the transport is gone: a broken connection, a compute node being cut
    /// off). The lock may remain held until it is recovered; writers of that one leaf wait, other
    /// leaves of the slot are not affected. The write may or may not have been applied; readers
    /// see the chain either as before it or as after it.
    #[error("leaf lock of slot {slot} leaf {leaf} on memory node {node} may remain held: {cause}")]
    LockMayRemain {
        /// The memory node.
        node: u16,
        /// The slot.
        slot: u64,
        /// Trained leaf index in the slot.
        leaf: u64,
        /// What failed, and what failed while releasing.
        cause: String,
    },
    /// A memory node declared this compute node dead — its lease lapsed — and cut its
    /// connections off; it recovered whatever locks the compute node held. Nothing this compute
    /// node posts takes effect any more: open the store again to rejoin as a new member.
    #[error(
        "memory node {node} declared this compute node dead and fenced it; open the store again"
    )]
    Fenced {
        /// The memory node.
        node: u16,
    },
    /// Reads kept failing validation (torn leaves or a changing record) past the retry budget.
    #[error("gave up after {0} attempts: data kept changing or failing its checksum")]
    TooManyRetries(u32),
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
    /// Every chunk of the memory node's value region is owned by a compute node and full.
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
    /// The store is configured in a way it cannot serve.
    #[error("configuration: {0}")]
    Config(String),
    /// An [`crate::Operation`] was polled again after it had returned its result (a bug of the
    /// executor polling it).
    #[error("an operation was polled again after it had completed")]
    Polled,
}

impl IndexError {
    /// Whether the client's endpoint is gone (broken, crashed, disconnected): reconnect with
    /// [`crate::Store::reconnect`] before trying again.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            IndexError::Transport(
                TransportError::Broken(_) | TransportError::Crashed | TransportError::Connection(_)
            )
        ) || matches!(self, IndexError::LockMayRemain { .. })
    }
}

impl IndexError {
    /// Whether this compute node was declared dead and fenced ([`IndexError::Fenced`]): it must
    /// open the store again (a new member) before it can go on.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            IndexError::Fenced { .. } | IndexError::Transport(TransportError::Fenced(_))
        )
    }
}

impl From<LeafStoreError> for IndexError {
    fn from(e: LeafStoreError) -> Self {
        match e {
            LeafStoreError::Transport(t) => IndexError::Transport(t),
            other => IndexError::Layout(other),
        }
    }
}
