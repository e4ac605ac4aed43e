//! The client's redo leaf: where the image of a leaf longer than one packet goes before the leaf
//! is rewritten in place (`leaf_store::redo`, docs/ARCHITECTURE.md §8).
//!
//! It is the leaf in slot [`REDO_SLOT`] of the client's leaf box on each memory node: granted by
//! the memory node like the others (the slot first), never taken for a split, and so recovered
//! with the box. While the slot is still empty a write uses another leaf of the box (never the
//! one its own split takes), or, with an empty box, a leaf the client allocates and puts in the
//! slot by CAS.

use leaf_store::members::{LEAF_BOX, leaf_word, word_leaf};
use leaf_store::redo::{REDO_SLOT, needs_redo};
use rdma_transport::Endpoint;

use crate::IndexError;
use crate::store::NodeCache;

use super::Client;
use super::op::WriteOp;

impl<E: Endpoint> Client<E> {
    /// Whether this client rewrites `node`'s leaves through a redo leaf: they are longer than
    /// one packet of its endpoint, and it is a member there (only members are recovered).
    pub(super) fn uses_redo(&self, node: &NodeCache) -> bool {
        node.tag != 0 && needs_redo(&node.layout, self.ep.packet_bytes())
    }

    /// This client's redo leaf on `node`, if it [uses one](Self::uses_redo): the box's redo slot
    /// as last read, else as read now; else, for this write, another leaf of its box (any
    /// unlinked leaf of the holder's boxes serves recovery; the split of this write must not take
    /// it); else a leaf it allocates and puts in the redo slot. Called under a leaf lock, before
    /// anything of the write is written. `PoolExhausted` only when the box is empty and the pool
    /// full.
    pub(super) fn redo_leaf(
        &mut self,
        op: &mut WriteOp,
        node: &NodeCache,
    ) -> Result<Option<u64>, IndexError> {
        if !self.uses_redo(node) {
            return Ok(None);
        }
        if let Some(leaf) = self.boxes[node.position].redo_leaf() {
            return Ok(Some(leaf));
        }
        let at = node
            .members
            .box_addr(node.tag, self.connection_index, REDO_SLOT);
        let mut word = self.ep.read_word(at)?;
        if word == 0 {
            if let Some((_, leaf)) = self.boxes[node.position].leaf(true) {
                // Not granted yet (the memory node fills this slot first, at its next round).
                return Ok(Some(leaf));
            }
            // A leaf of our own (a spare kept from a split, else a fresh one), put in the slot by
            // CAS so that recovery finds it. If the memory node granted one meanwhile, that one
            // is used and ours kept for a split.
            let spare = op
                .spare_leaves
                .iter()
                .position(|&(n, _)| n == node.info.id)
                .map(|i| op.spare_leaves.swap_remove(i).1);
            let leaf = match spare {
                Some(leaf) => leaf,
                None => {
                    leaf_store::alloc_leaf(&mut self.ep, &node.layout).map_err(|e| match e {
                        leaf_store::LeafStoreError::PoolExhausted { capacity } => {
                            IndexError::PoolExhausted {
                                node: node.info.id,
                                capacity,
                            }
                        }
                        e => e.into(),
                    })?
                }
            };
            // If the CAS fails without an answer, whether it landed is unknown: the slot is read
            // again next time, and the leaf is used for nothing else (leaked if it did not land,
            // as a split's allocation cut short is).
            let old = match self.ep.cas(at, 0, leaf_word(leaf)) {
                Ok(old) => old,
                Err(e) => {
                    if matches!(
                        e,
                        rdma_transport::TransportError::InjectedFault
                            | rdma_transport::TransportError::Fenced(_)
                    ) {
                        // The CAS certainly did not execute: the leaf is ours still.
                        op.spare_leaves.push((node.info.id, leaf));
                    }
                    return Err(e.into());
                }
            };
            if old == 0 {
                leaf_store::ghost::put(node.info.id, leaf);
                word = leaf_word(leaf);
            } else {
                op.spare_leaves.push((node.info.id, leaf));
                word = old;
            }
        }
        let lbox = &mut self.boxes[node.position];
        if lbox.slots.len() != LEAF_BOX as usize {
            lbox.slots = vec![0; LEAF_BOX as usize];
        }
        lbox.slots[REDO_SLOT as usize] = word;
        Ok(word_leaf(word))
    }
}
