//! The client's redo leaf: where the image of a leaf longer than one packet goes before the leaf
//! is rewritten in place (`leaf_store::redo`, docs/ARCHITECTURE.md §8).
//!
//! It is the leaf in slot [`REDO_SLOT`] of the client's leaf box on each memory node: granted by
//! the memory node like the others (or, if the slot is still empty when the client first needs
//! it, a leaf the client allocates and puts there by CAS), never taken for a split, and so
//! recovered with the box.

use leaf_store::members::{LEAF_BOX, leaf_word, word_leaf};
use leaf_store::redo::{REDO_SLOT, needs_redo};
use rdma_transport::{Endpoint, RemoteAddr};

use crate::IndexError;
use crate::store::NodeCache;

use super::Client;

impl<E: Endpoint> Client<E> {
    /// Whether this client rewrites `node`'s leaves through a redo leaf: they are longer than
    /// one packet of its endpoint, and it is a member there (only members are recovered).
    pub(super) fn uses_redo(&self, node: &NodeCache) -> bool {
        node.tag != 0 && needs_redo(&node.layout, self.ep.packet_bytes())
    }

    /// The address of this client's redo leaf on `node`, if it [uses one](Self::uses_redo): from
    /// its box as last read, else read from the box slot, else allocated and put there. Called
    /// under a leaf lock, before anything of the write is written.
    pub(super) fn redo_leaf(&mut self, node: &NodeCache) -> Result<Option<RemoteAddr>, IndexError> {
        if !self.uses_redo(node) {
            return Ok(None);
        }
        if let Some(leaf) = self.boxes[node.position].redo_leaf() {
            return Ok(Some(node.layout.leaf_addr(leaf)));
        }
        let at = node
            .members
            .box_addr(node.tag, self.connection_index, REDO_SLOT);
        let mut word = self.ep.read_word(at)?;
        if word == 0 {
            // Not granted yet: a leaf of our own (a spare kept from a split, else a fresh one),
            // put in the slot by CAS so that recovery finds it. If the memory node granted one
            // meanwhile, that one is used and ours kept for a split.
            let spare = self
                .spare_leaves
                .iter()
                .position(|&(n, _)| n == node.info.id)
                .map(|i| self.spare_leaves.swap_remove(i).1);
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
            let old = match self.ep.cas(at, 0, leaf_word(leaf)) {
                Ok(old) => old,
                Err(e) => {
                    // Whether it landed is unknown: the slot is read again next time, and the
                    // leaf is not used for anything else.
                    return Err(e.into());
                }
            };
            if old == 0 {
                word = leaf_word(leaf);
            } else {
                self.spare_leaves.push((node.info.id, leaf));
                word = old;
            }
        }
        let lbox = &mut self.boxes[node.position];
        if lbox.slots.len() != LEAF_BOX as usize {
            lbox.slots = vec![0; LEAF_BOX as usize];
        }
        lbox.slots[REDO_SLOT as usize] = word;
        Ok(word_leaf(word).map(|leaf| node.layout.leaf_addr(leaf)))
    }
}
