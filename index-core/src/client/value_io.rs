//! The value side of a write in a pool with byte values: the new block, the block the change
//! stops naming, the client's free word, and the verbs they add around a write's own in the
//! batch that ends it (ARCHITECTURE §12).
//!
//! Invariant: no leaf names a block before the block is whole (its WRITEs go before the leaves),
//! and a replaced block is freed only after the leaves stop naming it (its free goes after them),
//! the free word naming it meanwhile so recovery can finish the free.

// Flags an operation keeps for itself, atomic only so that an operation (its future) may move
// between threads between two of its batches; never shared, so `Relaxed` suffices.
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use leaf_store::value::{STATE_FREE, STATE_USED, ValueRef};
use rdma_transport::{RemoteAddr, Verb};

use super::batch::Verbs;

/// The value side of the write a client is running.
#[derive(Debug, Default)]
pub(super) struct ValueIo {
    /// The new block: its address, its bytes, its state byte.
    new: Option<(RemoteAddr, Vec<u8>, RemoteAddr)>,
    /// The state byte of the block the change stops naming.
    free: Option<RemoteAddr>,
    /// This client's value free word and what it holds during the batch: the reference being
    /// replaced (so recovery can finish the free if this compute node dies).
    free_word: Option<(RemoteAddr, [u8; 8])>,
    /// Whether the change being committed changes the key's entry (else nothing is written).
    armed: bool,
    /// Whether an ending batch carrying the new block was run (it may have landed).
    sent: AtomicBool,
    /// Whether one completed.
    linked: AtomicBool,
}

const USED: [u8; 1] = [STATE_USED];
const FREE: [u8; 1] = [STATE_FREE];
const CLEAR: [u8; 8] = [0; 8];

impl ValueIo {
    /// The value side of a write storing the block at `at` (its bytes, its state byte).
    pub(super) fn storing(at: RemoteAddr, bytes: Vec<u8>, state: RemoteAddr) -> Self {
        Self {
            new: Some((at, bytes, state)),
            ..Self::default()
        }
    }

    /// Arms it for the commit about to run: `changes` says whether the outcome changes the key's
    /// entry; `free` is the state byte of the block the change stops naming, `free_word` this
    /// client's free word and the reference it holds meanwhile.
    pub(super) fn arm(
        &mut self,
        changes: bool,
        free: Option<RemoteAddr>,
        free_word: Option<(RemoteAddr, [u8; 8])>,
    ) {
        self.armed = changes;
        self.free = free;
        self.free_word = free_word;
    }

    /// Whether an ending batch carrying the new block was run (it may have landed).
    pub(super) fn sent(&self) -> bool {
        self.sent.load(Relaxed)
    }

    /// Whether one completed: a leaf names the new block.
    pub(super) fn linked(&self) -> bool {
        self.linked.load(Relaxed)
    }

    /// The verbs that go before the leaves: the free word naming the block being replaced, the
    /// new block, then its state byte.
    pub(super) fn prefix<'a>(&'a self, verbs: &mut Verbs<'a>) {
        if !self.armed {
            return;
        }
        if let (Some(_), Some((word, old))) = (self.free, &self.free_word) {
            verbs.push(Verb::write(*word, old));
        }
        if let Some((at, bytes, state)) = &self.new {
            verbs.push(Verb::write(*at, bytes));
            verbs.push(Verb::write(*state, &USED));
        }
    }

    /// The verbs that go after the leaves, before the unlock: the replaced block freed, then the
    /// free word cleared.
    pub(super) fn suffix<'a>(&'a self, verbs: &mut Verbs<'a>) {
        let Some(state) = self.free.filter(|_| self.armed) else {
            return;
        };
        verbs.push(Verb::write(state, &FREE));
        if let Some((word, _)) = &self.free_word {
            verbs.push(Verb::write(*word, &CLEAR));
        }
    }

    /// Tells the ghost state (`leaf_store::ghost`) that the block being replaced waits in this
    /// client's free word, before an ending batch that sets the word runs.
    pub(super) fn ghost_placed(&self) {
        if let (true, Some(_), Some((word, old))) = (self.armed, self.free, &self.free_word) {
            let replaced = ValueRef::from_raw(u64::from_le_bytes(*old));
            leaf_store::ghost::place_block(word.node(), replaced.offset(), *word);
        }
    }

    /// After the ending batch built from this (`completed`: it ran whole): whether it carried the
    /// new block, and whether that landed; a completed batch freed the replaced block and cleared
    /// the free word (told to the ghost state).
    pub(super) fn ended(&self, completed: bool) {
        let carries = self.carries_block();
        if carries {
            self.sent.store(true, Relaxed);
            if completed {
                self.linked.store(true, Relaxed);
            }
        }
        if let (true, true, Some((word, _))) = (completed, self.armed, &self.free_word) {
            leaf_store::ghost::settle_free_word(*word);
        }
    }

    /// Whether an ending batch built now carries the new block.
    fn carries_block(&self) -> bool {
        self.armed && self.new.is_some()
    }
}
