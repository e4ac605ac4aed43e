//! The compute node's local lock table: threads of one compute node queue here before touching a
//! remote lock word, and a thread that is done may hand the remote lock it holds to the next local
//! waiter instead of releasing it (Sherman's hand-over).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

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

    /// Whether another local thread waits for the stripe.
    pub(crate) fn contended(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
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
