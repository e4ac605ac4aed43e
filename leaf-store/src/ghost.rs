//! Leaves, value blocks and leaf locks in a thread's hands, told to the seeded simulation's
//! ghost state (`sim_scheduler::ghost`; every call does nothing outside a seeded run, and is
//! compiled out of a build without the `simulation` feature).
//!
//! A leaf is *in hand* from the allocation that returned its number until the thread places it
//! where the orphan sweep sees it — linked, in a leaf box, on a worker's free list — or forgets
//! it for the sweep (ARCHITECTURE §7, "Orphaned leaves"). The sweep says what it reclaimed. With
//! that, the simulation accounts for every reclaimed leaf: forgotten, or held by a node a fault
//! took (a death, a lost completion), or allocated by a verb whose completion was lost; and a
//! leaf the sweep reclaims from a thread's hands must never be used by that thread after.
//!
//! A value block is in hand from the allocation that handed it to an operation until the
//! operation's last batch lands (a leaf names it) or it is given back unwritten; a block whose
//! last batch failed is forgotten, for the memory node, which frees every block in use that no
//! leaf names when the member that owned its chunk is gone (ARCHITECTURE §12). A block a write
//! is replacing waits in the writer's value free word until the word is settled — by the
//! write's last batch, by its store once the writer is retired, or by its member's recovery —
//! and only then must it be free or named again.
//!
//! A leaf lock is held from the CAS that took it (or a hand-over from another thread of the
//! store) to the unlock CAS that found it held as expected (or a hand-over). A holder whose lock
//! another thread took by CAS meanwhile lost it to a fault (its node was declared dead, and its
//! lock recovered): it, and whoever it hands the lock to, may never release it after.
//!
//! A leaf, block or lock is named across memory nodes by [`named`].

use rdma_transport::RemoteAddr;

use crate::Layout;

#[cfg(feature = "simulation")]
use sim_scheduler::ghost as sim;

/// Without the seeded scheduler, nothing is told.
#[cfg(not(feature = "simulation"))]
mod sim {
    pub(super) fn take(_: &'static str, _: u64) {}
    pub(super) fn receive(_: &'static str, _: u64) {}
    pub(super) fn put(_: &'static str, _: u64) {}
    pub(super) fn hand(_: &'static str, _: u64) {}
    pub(super) fn forget(_: &'static str, _: u64) {}
    pub(super) fn reclaim(_: &'static str, _: u64) {}
    pub(super) fn place(_: &'static str, _: u64, _: u64) {}
    pub(super) fn unplace(_: u64) {}
    pub(super) fn expect_none_held(_: &'static str, _: &str) {}
}

/// The ghost kind of leaves.
pub const LEAF: &str = "leaf";

/// Leaf `leaf` of memory node `node`, as one ghost value: the node in the top 16 bits.
pub fn named(node: u16, leaf: u64) -> u64 {
    (u64::from(node) << 48) | (leaf & ((1 << 48) - 1))
}

/// The memory node and leaf number of a ghost value ([`named`]'s inverse).
pub fn unnamed(value: u64) -> (u16, u64) {
    ((value >> 48) as u16, value & ((1 << 48) - 1))
}

/// The word at `addr` (a free word, a lock's LT entry) as one ghost value.
fn at(addr: RemoteAddr) -> u64 {
    named(addr.node(), addr.offset())
}

/// The calling thread now holds `leaf` of `layout`'s node where no shared place names it.
pub fn take(layout: &Layout, leaf: u64) {
    sim::take(LEAF, named(layout.node(), leaf));
}

/// The calling thread placed `leaf` where the orphan sweep sees it.
pub fn put(node: u16, leaf: u64) {
    sim::put(LEAF, named(node, leaf));
}

/// The calling thread let go of `leaf`, for the orphan sweep.
pub fn forget(node: u16, leaf: u64) {
    sim::forget(LEAF, named(node, leaf));
}

/// The orphan sweep reclaimed `leaf` of `layout`'s node.
pub fn reclaim(layout: &Layout, leaf: u64) {
    sim::reclaim(LEAF, named(layout.node(), leaf));
}

/// Fails the seeded run if the calling thread holds a leaf: `when` names the moment (one where
/// everything the thread took must be placed or forgotten).
pub fn expect_none_held(when: &str) {
    sim::expect_none_held(LEAF, when);
}

/// The ghost kind of value blocks (named by [`named`] with the block's offset in the pool).
pub const BLOCK: &str = "value block";

/// The calling thread holds the value block at `offset` of memory node `node` for an operation
/// (handed out, no leaf names it yet).
pub fn take_block(node: u16, offset: u64) {
    sim::take(BLOCK, named(node, offset));
}

/// The operation holding the block ended with a leaf naming it, or gave it back unwritten.
pub fn put_block(node: u16, offset: u64) {
    sim::put(BLOCK, named(node, offset));
}

/// The operation holding the block failed in its last batch: left to the memory node.
pub fn forget_block(node: u16, offset: u64) {
    sim::forget(BLOCK, named(node, offset));
}

/// The memory node freed the block, in use and named by no leaf, of a departed member's chunk.
pub fn reclaim_block(node: u16, offset: u64) {
    sim::reclaim(BLOCK, named(node, offset));
}

/// The block at `offset` of memory node `node` is named by the value free word at `word` (a
/// write replacing it set the word; the block's free completes when the word is settled).
pub fn place_block(node: u16, offset: u64, word: RemoteAddr) {
    sim::place(BLOCK, named(node, offset), at(word));
}

/// The value free word at `word` is settled: the block it named is free or named by a leaf.
pub fn settle_free_word(word: RemoteAddr) {
    sim::unplace(at(word));
}

/// The ghost kind of leaf locks (named by [`named`] with the LT entry's address).
pub const LOCK: &str = "leaf lock";

/// The calling thread holds the leaf lock at `lt_addr`: its CAS took it.
pub fn take_lock(lt_addr: RemoteAddr) {
    sim::take(LOCK, at(lt_addr));
}

/// The calling thread released the leaf lock at `lt_addr` (its unlock CAS found it held as
/// expected).
pub fn put_lock(lt_addr: RemoteAddr) {
    sim::put(LOCK, at(lt_addr));
}

/// The calling thread receives the leaf lock at `lt_addr` from another writer of its store.
pub fn receive_lock(lt_addr: RemoteAddr) {
    sim::receive(LOCK, at(lt_addr));
}

/// The calling thread hands the leaf lock at `lt_addr` to the next writer of its store.
pub fn hand_lock(lt_addr: RemoteAddr) {
    sim::hand(LOCK, at(lt_addr));
}
