//! Leaves in a thread's hands, told to the seeded simulation's ghost state
//! (`sim_scheduler::ghost`; every call does nothing outside a seeded run).
//!
//! A leaf is *in hand* from the allocation that returned its number until the thread places it
//! where the orphan sweep sees it — linked, in a leaf box, on a worker's free list — or forgets
//! it for the sweep (ARCHITECTURE §7, "Orphaned leaves"). The sweep says what it reclaimed. With
//! that, the simulation accounts for every reclaimed leaf: forgotten, or held by a node a fault
//! took (a death, a lost completion), or allocated by a verb whose completion was lost; and a
//! leaf the sweep reclaims from a thread's hands must never be used by that thread after.
//!
//! A leaf is named across memory nodes by [`named`].

use crate::Layout;

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

/// The calling thread now holds `leaf` of `layout`'s node where no shared place names it.
pub fn take(layout: &Layout, leaf: u64) {
    sim_scheduler::ghost::take(LEAF, named(layout.node(), leaf));
}

/// The calling thread placed `leaf` where the orphan sweep sees it.
pub fn put(node: u16, leaf: u64) {
    sim_scheduler::ghost::put(LEAF, named(node, leaf));
}

/// The calling thread let go of `leaf`, for the orphan sweep.
pub fn forget(node: u16, leaf: u64) {
    sim_scheduler::ghost::forget(LEAF, named(node, leaf));
}

/// The orphan sweep reclaimed `leaf` of `layout`'s node.
pub fn reclaim(layout: &Layout, leaf: u64) {
    sim_scheduler::ghost::reclaim(LEAF, named(layout.node(), leaf));
}

/// Fails the seeded run if the calling thread holds a leaf: `when` names the moment (one where
/// everything the thread took must be placed or forgotten).
pub fn expect_none_held(when: &str) {
    sim_scheduler::ghost::expect_none_held(LEAF, when);
}
