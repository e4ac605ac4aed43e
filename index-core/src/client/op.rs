//! One write's own state: a value created when the write begins, passed along its steps (lock,
//! commit, split, unlink, the ending batch) and concluded when it ends. Nothing of it lives in the
//! [`Client`], so a client keeps only what outlives an operation.
//!
//! Invariant: a [`WriteOp`] ends with its write. [`Client::conclude`] frees a slot claimed for a
//! split that did not come and parks (or forgets) every leaf allocated and not used, before the
//! operation leaves the list of running ones; a spare leaf is never kept across operations
//! (ARCHITECTURE §7, "Orphaned leaves").

use leaf_store::RecordLayout;
use rdma_transport::{Endpoint, RemoteAddr};

use crate::IndexError;

use super::Client;
use super::value_io::ValueIo;

/// What one write carries from its first step to its last.
#[derive(Debug, Default)]
pub(super) struct WriteOp {
    /// Leaves allocated for a split that could not use them (its SLT was full, its batch
    /// failed): used first by a later split of the same write, and at its end parked in the
    /// client's leaf box or forgotten.
    pub(super) spare_leaves: Vec<(u16, u64)>,
    /// An SLT slot a split claimed before it found its chain stale, kept (with the lock) for the
    /// same write's next attempt: record, its layout, slot.
    pub(super) preclaimed: Option<(RemoteAddr, RecordLayout, u64)>,
    /// Set by a lock batch that found the lock held by this compute node (a lock a broken
    /// operation left): the write waits without holding the stripe.
    pub(super) wait_unstriped: bool,
    /// The value side, in a pool with byte values.
    pub(super) value: ValueIo,
}

impl WriteOp {
    /// A write that stores `value` (a byte value's block), or nothing beside the leaf entry.
    pub(super) fn carrying(value: ValueIo) -> Self {
        Self {
            value,
            ..Self::default()
        }
    }
}

impl<E: Endpoint> Client<E> {
    /// Ends `op`, whose write returned `result`: a slot claimed for a split that did not come
    /// (left by a path that returned early) is marked freed, spare leaves are parked or
    /// forgotten. A CAS of that parking whose completion was lost retires the client before the
    /// operation ends (it may still land).
    pub(super) fn conclude(
        &mut self,
        mut op: WriteOp,
        result: Result<bool, IndexError>,
    ) -> Result<bool, IndexError> {
        self.free_preclaimed(&mut op);
        if !op.spare_leaves.is_empty()
            && let Some(lost) = self.park_spare_leaves(op.spare_leaves)
        {
            self.retire_on(&lost);
        }
        result
    }
}
