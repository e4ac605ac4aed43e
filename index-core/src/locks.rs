//! Local lock hand-over among a compute node's threads (paper §3.4).
//!
//! Threads of one compute node that write the same leaf queue on a local stripe instead of
//! hammering the NIC with CASes. When a writer finishes and a sibling is waiting on its stripe, it
//! may keep the remote leaf lock and leave it, with the exact chain it just wrote, in the stripe:
//! the next writer of that leaf skips the lock CAS and the re-read (no round trip to acquire).
//! A writer that finds a lock left for another leaf (stripes are shared by hashing) releases it
//! remotely first. Hand-overs in a row are bounded, so the remote lock is released regularly.
//!
//! **Invariant.** At most one writer owns a stripe at a time ([`StripeGuard`]), from the moment
//! it takes it until its guard drops; the lock left in the stripe moves into the guard with the
//! stripe and back out of it at the drop, so only the owner reads or changes it. A stripe is
//! owned across the owner's round trips, so its guard is an owner's token, not a mutex guard:
//! an async write holding it may move to another thread between two of its batches (the
//! stripe's mutex is held only for the instants of taking and giving back).

use leaf_store::{Leaf, LeafTableEntry, ModelHeader};
use rdma_transport::RemoteAddr;

use crate::sync::atomic::AtomicUsize;
use crate::sync::{Condvar, Mutex};

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

/// One cache line a stripe: a writer's first touch of its stripe is a miss, and one line is all
/// it then reads (the lock left in it lives out of line, boxed: it is rare).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct Stripe {
    /// Writers queued for the stripe ([`Queued`]): the owner hands its lock over if one is.
    pub(crate) waiting: AtomicUsize,
    state: Mutex<StripeState>,
    /// Signalled when the stripe is given back and a writer waits for it.
    given_back: Condvar,
}

#[derive(Debug, Default)]
struct StripeState {
    /// Whether a writer owns the stripe.
    owned: bool,
    /// Threads blocked in [`Stripe::lock`] until it is given back.
    sleepers: usize,
    /// The remote lock left for the next local writer (while not owned).
    held: Option<Box<HeldLock>>,
}

impl Stripe {
    /// Takes the stripe, waiting (blocking the thread) while another writer owns it.
    pub(crate) fn lock(&self) -> StripeGuard<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.owned {
            state.sleepers += 1;
            state = self
                .given_back
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
            state.sleepers -= 1;
        }
        self.take(&mut state)
    }

    /// Takes the stripe if no writer owns it.
    pub(crate) fn try_lock(&self) -> Option<StripeGuard<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (!state.owned).then(|| self.take(&mut state))
    }

    fn take(&self, state: &mut StripeState) -> StripeGuard<'_> {
        state.owned = true;
        StripeGuard {
            stripe: self,
            held: state.held.take(),
        }
    }
}

/// A stripe owned by one writer, with the lock left in it (`Option<Box<HeldLock>>`, which the writer
/// takes, or fills to leave one for the next); given back when dropped.
#[derive(Debug)]
pub(crate) struct StripeGuard<'s> {
    stripe: &'s Stripe,
    held: Option<Box<HeldLock>>,
}

impl std::ops::Deref for StripeGuard<'_> {
    type Target = Option<Box<HeldLock>>;
    fn deref(&self) -> &Option<Box<HeldLock>> {
        &self.held
    }
}

impl std::ops::DerefMut for StripeGuard<'_> {
    fn deref_mut(&mut self) -> &mut Option<Box<HeldLock>> {
        &mut self.held
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        let stripe = self.stripe;
        let sleepers = {
            let mut state = stripe.state.lock().unwrap_or_else(|e| e.into_inner());
            state.held = self.held.take();
            state.owned = false;
            state.sleepers
        };
        // A sleeper counted itself under the state's lock before it waited, so none is missed;
        // with none (the common case) no wake-up is paid for.
        if sleepers > 0 {
            stripe.given_back.notify_one();
        }
    }
}

/// Stripes of local locks, keyed by (record, trained leaf).
#[derive(Debug)]
pub(crate) struct LockTable {
    stripes: Box<[Stripe]>,
}

/// A power of two (the stripe is the hash's top bits).
const STRIPES: usize = if cfg!(loom) { 4 } else { 4096 };

impl LockTable {
    pub(crate) fn new() -> Self {
        Self {
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
        }
    }

    /// The stripe of `leaf` of `record`: a multiplicative hash (Fibonacci hashing) of the two,
    /// its top bits (every bit of the record, memory node included, reaches them; lower bits of
    /// a product do not depend on higher bits of its factors). Stripes only spread writers; two
    /// leaves sharing one merely queue on it.
    pub(crate) fn stripe(&self, record: RemoteAddr, leaf: u64) -> &Stripe {
        const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
        let h = ((record.pack().wrapping_mul(PHI) >> 32) ^ leaf).wrapping_mul(PHI);
        &self.stripes[(h >> (64 - STRIPES.trailing_zeros())) as usize]
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn held(leaf: u64) -> Box<HeldLock> {
        Box::new(HeldLock {
            record: RemoteAddr::new(0, 64).expect("an address"),
            slot: 1,
            leaf,
            lt_addr: RemoteAddr::new(0, 128).expect("an address"),
            lt_now: LeafTableEntry::new(3).expect("fits").locked(),
            chain: Vec::new(),
            header: ModelHeader::from_raw(0),
            confirmed: true,
            handovers: 0,
        })
    }

    /// One owner at a time; what an owner leaves in the stripe is the next owner's; a writer
    /// blocked on the stripe takes it when it is given back; the guard moves across threads.
    /// Every part of a leaf's name reaches its stripe: the leaf, the record's offset and its
    /// memory node (records at one offset of different nodes must not share every stripe).
    #[test]
    fn stripes_spread_by_leaf_offset_and_memory_node() {
        let table = LockTable::new();
        let index = |node: u16, offset: u64, leaf: u64| {
            let record = RemoteAddr::new(node, offset).expect("an address");
            std::ptr::from_ref(table.stripe(record, leaf)) as usize
        };
        let spread = |name: u64| -> std::collections::HashSet<usize> {
            (0..64).map(|leaf| index(name as u16, 4096, leaf)).collect()
        };
        assert!(spread(0).len() > 48, "leaves of one record spread");
        for node in 1..4 {
            assert_ne!(
                spread(0),
                spread(node),
                "node {node} shares node 0's stripes"
            );
        }
        let offsets: std::collections::HashSet<usize> =
            (0..64).map(|k| index(0, 4096 + 64 * k, 0)).collect();
        assert!(offsets.len() > 48, "records spread");
    }

    #[test]
    fn a_stripe_has_one_owner_and_passes_what_it_holds_on() {
        let stripe = Stripe::default();
        let mut first = stripe.try_lock().expect("free");
        assert!(first.is_none(), "nothing left in a new stripe");
        assert!(stripe.try_lock().is_none(), "owned");
        *first = Some(held(7));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let guard = stripe.lock();
                guard.as_ref().map(|h| h.leaf)
            });
            // The owner's token goes to another thread, which gives it back.
            s.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                drop(first);
            });
            assert_eq!(waiter.join().expect("waiter"), Some(7));
        });
        let again = stripe.try_lock().expect("given back");
        assert_eq!(again.as_ref().map(|h| h.leaf), Some(7), "left for the next");
    }
}
