//! Local lock hand-over among a compute node's threads (paper §3.4).
//!
//! Threads of one compute node that write the same leaf queue on a local stripe mutex instead of
//! hammering the NIC with CASes. When a writer finishes and a sibling is waiting on its stripe, it
//! may keep the remote leaf lock and leave it, with the exact chain it just wrote, in the stripe:
//! the next writer of that leaf skips the lock CAS and the re-read (no round trip to acquire).
//! A writer that finds a lock left for another leaf (stripes are shared by hashing) releases it
//! remotely first. Hand-overs in a row are bounded, so the remote lock is released regularly.

use std::hash::{Hash, Hasher};

use leaf_store::{Leaf, LeafTableEntry, ModelHeader};
use rdma_transport::RemoteAddr;

use crate::sync::Mutex;
use crate::sync::atomic::AtomicUsize;

/// A remote leaf lock this compute node holds, left for the next local writer.
#[derive(Debug, Clone)]
pub(crate) struct HeldLock {
    /// The record whose LT entry is locked, its slot, and the trained leaf.
    pub(crate) record: RemoteAddr,
    pub(crate) slot: u64,
    pub(crate) leaf: u64,
    /// The LT entry's address.
    pub(crate) lt_addr: RemoteAddr,
    /// The LT entry's current value (lock bit set).
    pub(crate) lt_now: LeafTableEntry,
    /// The chain as last written: entries and contents.
    pub(crate) chain: Vec<(LeafTableEntry, Leaf)>,
    /// The record header seen when the lock was taken or last changed by us.
    pub(crate) header: ModelHeader,
    /// Whether `chain` was confirmed to be the record's (see `Locked::confirmed`): a chain that
    /// was not stays unconfirmed for the next holder.
    pub(crate) confirmed: bool,
    /// Hand-overs so far without a remote release.
    pub(crate) handovers: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Stripe {
    pub(crate) waiting: AtomicUsize,
    pub(crate) held: Mutex<Option<HeldLock>>,
}

/// Stripes of local locks, keyed by (record, trained leaf).
#[derive(Debug)]
pub(crate) struct LockTable {
    stripes: Box<[Stripe]>,
}

const STRIPES: usize = if cfg!(loom) { 4 } else { 4096 };

impl LockTable {
    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
        }
    }

    pub(crate) fn stripe(&self, record: RemoteAddr, leaf: u64) -> &Stripe {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (record.pack(), leaf).hash(&mut h);
        &self.stripes[(h.finish() % STRIPES as u64) as usize]
    }
}

/// A writer counted as waiting on a stripe ([`Stripe::waiting`], which tells the holder to hand
/// its lock over) from [`Queued::on`] until dropped — taken the stripe, or dropped with its
/// operation: a waiter that went away is never counted on.
#[derive(Debug)]
pub(crate) struct Queued<'s>(&'s Stripe);

impl<'s> Queued<'s> {
    pub(crate) fn on(stripe: &'s Stripe) -> Self {
        stripe
            .waiting
            .fetch_add(1, crate::sync::atomic::Ordering::AcqRel);
        Self(stripe)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0
            .waiting
            .fetch_sub(1, crate::sync::atomic::Ordering::AcqRel);
    }
}
