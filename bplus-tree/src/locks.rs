//! The compute node's local lock table: threads of one compute node queue here before touching a
//! remote lock word, and a thread that is done may hand the remote lock it holds to the next local
//! waiter instead of releasing it (Sherman's hand-over).
//!
//! An operation holds its stripe from the lock's CAS to the unlock, round trips included: in
//! posting mode (several operations in flight on one thread, see [`crate::wait`]) a sibling
//! operation of the same thread may hold the stripe another one wants, so there it is try-locked
//! with a yield between tries ([`Stripe::enter_with`]), never blocked on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::wait::{Waiting, yield_now};

/// Times in a row a remote lock may be handed from one local thread to the next before it is
/// released (so other compute nodes get their turn).
pub const MAX_HANDOVERS: u32 = 4;

/// A remote lock this compute node holds, left for the next local waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    /// The memory node of the lock word (stripes are shared by words of every node).
    pub(crate) node: u16,
    /// The remote lock word's index.
    pub(crate) word: u64,
    /// Hand-overs so far.
    pub(crate) handovers: u32,
}

/// One stripe: a mutex the local threads queue on, holding a remote lock left for them.
#[derive(Debug, Default)]
pub(crate) struct Stripe {
    pub(crate) held: Mutex<Option<Held>>,
    waiting: AtomicU32,
}

impl Stripe {
    /// Queues for the stripe.
    pub(crate) fn enter(&self) -> MutexGuard<'_, Option<Held>> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let guard = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        guard
    }

    /// Queues for the stripe as the running operation waits: as [`Stripe::enter`] in blocking
    /// mode; in posting mode by try-locking it, yielding between tries (a sibling operation of
    /// this thread may hold it, and goes on only while this one is pending). Counted as waiting
    /// meanwhile, so that the holder hands its remote lock over; the count is taken back even if
    /// the operation is dropped while it waits.
    pub(crate) async fn enter_with(&self, waiting: Waiting) -> MutexGuard<'_, Option<Held>> {
        if waiting == Waiting::Blocking {
            return self.enter();
        }
        let _queued = Queued::new(&self.waiting);
        loop {
            match self.held.try_lock() {
                Ok(guard) => return guard,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => yield_now().await,
            }
        }
    }

    /// Whether another local thread (or operation) waits for the stripe.
    pub(crate) fn contended(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }
}

/// One waiter counted on a stripe, until dropped.
struct Queued<'s>(&'s AtomicU32);

impl<'s> Queued<'s> {
    fn new(waiting: &'s AtomicU32) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        Self(waiting)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Stripes, by remote lock word.
#[derive(Debug)]
pub(crate) struct LocalLocks {
    stripes: Vec<Stripe>,
}

impl LocalLocks {
    pub(crate) fn new(stripes: usize) -> Self {
        Self {
            stripes: (0..stripes.max(1)).map(|_| Stripe::default()).collect(),
        }
    }

    /// The stripe of remote lock word `word` on memory node `node`.
    pub(crate) fn stripe(&self, node: u16, word: u64) -> &Stripe {
        let i = (word ^ (u64::from(node) << 40)).wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
        &self.stripes[i as usize % self.stripes.len()]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};

    use super::*;

    #[test]
    fn a_posting_waiter_yields_while_the_stripe_is_held_and_is_counted_until_it_has_it() {
        let stripe = Stripe::default();
        let mut cx = Context::from_waker(Waker::noop());
        let held = stripe.enter();
        assert!(!stripe.contended());
        {
            let mut waiter = std::pin::pin!(stripe.enter_with(Waiting::Posting));
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
            assert!(
                stripe.contended(),
                "the holder sees a waiter: it hands over"
            );
            drop(held);
            let std::task::Poll::Ready(guard) = waiter.as_mut().poll(&mut cx) else {
                panic!("the stripe is free");
            };
            assert!(!stripe.contended(), "no longer waiting once it has it");
            drop(guard);
        }
        // A waiter dropped while it waits takes its count back.
        let held = stripe.enter();
        {
            let mut waiter = std::pin::pin!(stripe.enter_with(Waiting::Posting));
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
            assert!(stripe.contended());
        }
        assert!(!stripe.contended());
        drop(held);
        let mut blocking = std::pin::pin!(stripe.enter_with(Waiting::Blocking));
        assert!(blocking.as_mut().poll(&mut cx).is_ready());
    }
}
