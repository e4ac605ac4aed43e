//! Leaf allocation: one FAA on the leaf region's `alloc_num`.

use rdma_transport::{Endpoint, Verb};

use crate::{Layout, LeafStoreError};

/// The FAA verb that claims the next leaf number; put it in a batch, then pass the returned old
/// value to [`check_allocation`].
pub fn alloc_leaf_verb(layout: &Layout) -> Verb<'static> {
    Verb::faa(layout.alloc_num_addr(), 1)
}

/// Interprets the old value an allocation FAA returned: the leaf number if it is below the
/// region's capacity. Past capacity the claim is void: this undoes it with a second FAA (so a
/// quiescent pool's `alloc_num` never exceeds its capacity) and reports
/// [`LeafStoreError::PoolExhausted`]. A leaf returned is in the caller's hands
/// ([`crate::ghost`]). Nothing else was written, so the pool stays consistent.
pub fn check_allocation<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    old: u64,
) -> Result<u64, LeafStoreError> {
    let capacity = layout.leaf_capacity();
    if old < capacity {
        crate::ghost::take(layout, old);
        return Ok(old);
    }
    ep.faa(layout.alloc_num_addr(), 1u64.wrapping_neg())?;
    Err(LeafStoreError::PoolExhausted { capacity })
}

/// Allocates one leaf (one round trip; two when the region is exhausted). Every leaf number is
/// handed out at most once, whatever the concurrency (FAA).
pub fn alloc_leaf<E: Endpoint>(ep: &mut E, layout: &Layout) -> Result<u64, LeafStoreError> {
    let old = ep.faa(layout.alloc_num_addr(), 1)?;
    check_allocation(ep, layout, old)
}
