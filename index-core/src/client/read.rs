//! GET: one READ of the cached chain's leaves, answered by a leaf that claims the key; else one
//! batch of the chain's leaves and the record's header word, validated against the cached view.
//!
//! **Invariant used (ARCHITECTURE §4, "Claims").** A leaf whose bytes validate as its own number
//! and that claims the key holds the key's current state, whatever record, chain or cache led
//! to it: a stale chain, a leaf since unlinked, retrained away or freed and reused answers only
//! for keys it claims now. So the first READ needs no header word; a GET whose leaves claim
//! nothing (the key moved to a leaf the cached chain lacks, a leaf was torn, an unlink left
//! keys unclaimed until the next write) falls back to the validated read of the same round trip
//! count as before, which refreshes a stale view.

use leaf_store::{Claimed, Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader};
use rdma_transport::{Endpoint, RemoteAddr};

use crate::IndexError;
use crate::store::NodeCache;
use crate::view::{Borrowed, ChainEntries, SlotView};

use super::cache::{Freshness, Routing, route};
use super::*;

impl<E: Endpoint> Client<E> {
    pub(super) async fn get_inner(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        // SAFETY: used only within this operation, which borrows `self` throughout.
        let caches = unsafe { self.op_caches() };
        let node = &caches.nodes[caches.node_of(key)];
        let mut fell_back = false;
        let mut leaves = ChainEntries::new();
        // Data changing under the read is read again after a pause (`ReadRetries`).
        let mut retries = ReadRetries::new(&caches.config);
        loop {
            // What the read needs of the view, copied out: no count is taken on it.
            let plan = |view: Borrowed<'_, SlotView>, routing: Routing<'_>| Planned {
                consistent: Self::chains_for(&view, key, &mut leaves),
                slot: view.slot,
                record: view.record,
                header: view.header,
                known: routing.known(),
            };
            let routed = route!(self, node, key, plan);
            if !routed.consistent {
                self.refresh_if_held(node, &routed)?;
                retries.again(self.waiting).await?;
                continue;
            }
            #[cfg(loom)]
            if caches.broken.gets_trust == super::broken::GetsTrust::HeaderOnly {
                fell_back = true;
            }
            if !fell_back {
                self.read_batch(&node.layout, &leaves, &[]).await?;
                if let Some(answer) = self.claimed_in_batch(&node.layout, &leaves, key)? {
                    return Ok(answer);
                }
                // Nothing the leaves claim answers: the validated read, from now on.
                fell_back = true;
                self.claim_misses += 1;
            }
            let seen = ModelHeader::from_raw(
                self.read_batch(&node.layout, &leaves, &[routed.record])
                    .await?[0],
            );
            let valid = match Freshness::of(routed.header, seen) {
                Freshness::Fresh => true,
                Freshness::Stale => false,
                #[cfg(loom)]
                Freshness::Retired if !caches.broken.confirm_retired => true,
                Freshness::Retired => {
                    self.still_current(node, &[(routed.slot, routed.record)], routed.known)?[0]
                }
            };
            if !valid {
                self.refresh_if_held(node, &routed)?;
                retries.again(self.waiting).await?;
                continue;
            }
            match self.lookup_in_batch(&node.layout, &leaves, key)? {
                Lookup::Found(value) => return Ok(Some(value)),
                Lookup::Absent => return Ok(None),
                // A leaf was being written: let the writer finish.
                Lookup::Torn => retries.again(self.waiting).await?,
            }
        }
    }

    /// Refreshes the view a GET was planned by ([`Self::refresh`]) if its slot's cell still
    /// holds it (not evicted); if the cell has moved on, the next routing uses what it holds now.
    fn refresh_if_held(&mut self, node: &NodeCache, planned: &Planned) -> Result<(), IndexError> {
        let Some(cell) = node.cell(planned.slot) else {
            return Ok(());
        };
        let held = cell.load();
        // An evicted stub of the same record is not refreshed: the next routing reads it again.
        if !held.evicted && held.record == planned.record && held.header == planned.header {
            self.refresh(node, &held)?;
        }
        Ok(())
    }

    /// What the first leaf last read by [`Self::read_batch`] that validates and claims `key`
    /// says of it (`None`: no leaf does), without decoding them. Two valid leaves that claim a
    /// key agree on it (a split's new leaf holds what the split leaf holds until the shrink), so
    /// the first is the answer.
    fn claimed_in_batch(
        &self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        key: u64,
    ) -> Result<Option<Option<u64>>, IndexError> {
        #[cfg(loom)]
        if self.caches.broken.gets_trust == super::broken::GetsTrust::AnyLeaf {
            return Ok(match self.lookup_in_batch(layout, leaves, key)? {
                Lookup::Found(value) => Some(Some(value)),
                Lookup::Absent => Some(None),
                Lookup::Torn => None,
            });
        }
        let leaf_bytes = layout.leaf_bytes() as usize;
        for (entry, chunk) in leaves.iter().zip(self.buf.chunks_exact(leaf_bytes)) {
            match Leaf::lookup_claimed(entry.leaf_num(), chunk, key) {
                Ok(Claimed::Covered(state)) => return Ok(Some(state)),
                // Not claimed, or not whole: another leaf may claim it.
                Ok(Claimed::NotCovered) | Err(LeafStoreError::TornLeaf { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// Looks `key` up in the leaves last read by [`Self::read_batch`], without decoding them.
    /// Keys are unique across a chain except while a split is in progress, when both copies carry
    /// the same value: a hit in a whole leaf is the answer even if another leaf was torn.
    pub(super) fn lookup_in_batch(
        &self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        key: u64,
    ) -> Result<Lookup, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let mut torn = false;
        for (entry, chunk) in leaves.iter().zip(self.buf.chunks_exact(leaf_bytes)) {
            match Leaf::lookup(entry.leaf_num(), chunk, key) {
                Ok(Some(value)) => return Ok(Lookup::Found(value)),
                Ok(None) => {}
                Err(LeafStoreError::TornLeaf { .. }) => torn = true,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(if torn { Lookup::Torn } else { Lookup::Absent })
    }
}

/// What a GET takes of the view that routed it.
struct Planned {
    /// Whether the chains to read were found (false: the view's tables are inconsistent;
    /// refresh it).
    consistent: bool,
    slot: u64,
    record: RemoteAddr,
    header: ModelHeader,
    /// Slots the routing directory knew of.
    known: u64,
}

/// A GET's search of the leaves it read.
pub(super) enum Lookup {
    Found(u64),
    Absent,
    /// A leaf failed its checksum (a writer was rewriting it) and the key was not found elsewhere.
    Torn,
}
