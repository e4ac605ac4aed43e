//! A compute node's local retirement epoch: what lets a memory node reuse a retired record's
//! memory without trusting a clock (ARCHITECTURE §7, reclamation).
//!
//! **Invariant.** Once this compute node has announced epoch `g` to a memory node, none of its
//! operations uses a view of a record that was retired there (and swapped out of the slot table)
//! before the memory node's epoch word showed `g`, and none has a batch that may still land
//! through such a view (a retired operation counts as running until fenced, see
//! [`crate::membership::Members`]).
//!
//! **How.** The renewal batch also READs the memory node's epoch word. When it shows an
//! epoch `g` this compute node has not announced yet, the renewer (1) READs the slot table and
//! confirms, in place, every cached view whose record the table still names (raising its
//! validation epoch to the next local epoch); (2) advances the local epoch; (3) waits — without
//! blocking renewals — until no operation that began in an earlier local epoch is still running;
//! (4) WRITEs `g` as its announced epoch. Every operation runs in the local epoch it registered
//! in at its start, and reloads from the slot table any view validated in an earlier one
//! (`Client::view`). So once `g` is announced, no operation of this compute node uses a view of a
//! record that was retired (and swapped out of the slot table) before the epoch word showed `g`:
//! the memory node reuses a record retired in epoch `s` once every member has announced more
//! than `s`.

use std::sync::Arc;

use rdma_transport::RemoteAddr;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::view::SlotCells;

/// The local epoch a store starts in (views loaded at open are validated in it).
pub(crate) const FIRST_EPOCH: u64 = 1;
/// An idle client's entry in the active list.
const IDLE: u64 = u64::MAX;

/// One client's entry in the active list: the local epoch its running operation began in, or
/// [`IDLE`]. Every operation writes it twice, so it has a cache line of its own (entries of
/// different clients side by side would bounce one line between their threads), and the client
/// holds its own handle on it (no shared reference count touched per operation).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct ActiveEpoch(AtomicU64);

impl ActiveEpoch {
    /// The operation has ended.
    pub(crate) fn leave(&self) {
        self.0.store(IDLE, Ordering::Release);
    }
}

/// The local epoch and, per client connection index, the epoch its running operation began in.
#[derive(Debug)]
pub(crate) struct LocalEpoch {
    epoch: AtomicU64,
    active: Vec<Arc<ActiveEpoch>>,
}

impl LocalEpoch {
    /// Starts at [`FIRST_EPOCH`], with `clients` idle entries.
    pub(crate) fn new(clients: usize) -> Self {
        Self {
            epoch: AtomicU64::new(FIRST_EPOCH),
            active: (0..clients)
                .map(|_| Arc::new(ActiveEpoch(AtomicU64::new(IDLE))))
                .collect(),
        }
    }

    /// The local epoch now.
    pub(crate) fn current(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Client `index`'s entry in the active list (index 0, the renewer's, is never used).
    pub(crate) fn active_entry(&self, index: u64) -> Arc<ActiveEpoch> {
        Arc::clone(self.entry(index))
    }

    /// Client `index`'s entry, borrowed (the one [`Self::active_entry`] counts).
    pub(crate) fn entry(&self, index: u64) -> &Arc<ActiveEpoch> {
        &self.active[(index as usize).min(self.active.len() - 1)]
    }

    /// Marks client `index`'s entry idle (its connection index given back).
    pub(crate) fn leave(&self, index: u64) {
        if let Some(entry) = self.active.get(index as usize) {
            entry.leave();
        }
    }

    /// Registers the operation of the client owning `entry` as running; returns the local epoch
    /// it runs in.
    pub(crate) fn enter(&self, entry: &ActiveEpoch) -> u64 {
        loop {
            let epoch = self.epoch.load(Ordering::SeqCst);
            entry.0.store(epoch, Ordering::SeqCst);
            // The renewer advances the epoch, then reads every entry: one of the two sees the
            // other (both sequentially consistent).
            if self.epoch.load(Ordering::SeqCst) == epoch {
                return epoch;
            }
        }
    }

    /// Whether every running operation began in local epoch `epoch` or later (retired ones
    /// aside: [`crate::membership::Members`] counts those).
    pub(crate) fn running_began_since(&self, epoch: u64) -> bool {
        self.active
            .iter()
            .all(|a| a.0.load(Ordering::SeqCst) >= epoch)
    }

    /// Confirms into the next local epoch, on every memory node whose slot table was read
    /// (`tables`, store key order, read after the views were valid), the views valid now whose
    /// record the table still names; then moves to that epoch and returns it.
    pub(crate) fn confirm_and_advance(
        &self,
        views: &[Arc<SlotCells>],
        tables: &[Option<Vec<(RemoteAddr, u64)>>],
    ) -> u64 {
        let current = self.current();
        let next = current + 1;
        for (views, table) in views.iter().zip(tables) {
            if let Some(table) = table {
                confirm_views(views, table, current, next);
            }
        }
        self.epoch.store(next, Ordering::SeqCst);
        next
    }
}

/// Raises to `next` the validation epoch of every view in `views` that is valid in the `current`
/// local epoch and whose record `table` (the node's slot table, read after the views it
/// confirms were valid) names.
///
/// Only views valid in `current` may be confirmed: the table is compared by address, and an older
/// view's record may have been retired, its memory reclaimed (this compute node announced the
/// epochs that allowed it), and a later record of the same slot placed at the same address. Such
/// a view describes another record (its tables, generation and leaves), and confirming it would
/// let a writer lock and write through it.
fn confirm_views(views: &SlotCells, table: &[(RemoteAddr, u64)], current: u64, next: u64) {
    for (cell, &(record, _)) in views.iter().zip(table) {
        let Some(cell) = cell.get() else {
            continue;
        };
        let view = cell.load();
        if view.record == record && confirmable(view.validated.get(), current) {
            view.validated.raise(next);
        }
    }
}

/// Whether a view validated in local epoch `validated` may be confirmed into the epoch after
/// `current` (see [`confirm_views`]).
fn confirmable(validated: u64, current: u64) -> bool {
    validated >= current
}

#[cfg(all(test, not(loom)))]
mod tests;
