//! The write path: the leaf-lock protocol shared by INSERT, UPDATE, UPSERT and DELETE.
use crate::sync::atomic::Ordering;
use std::sync::Arc;

use leaf_store::{Leaf, LeafStoreError, LeafTableEntry, ModelHeader, le_word};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::backoff::Backoff;
use crate::locks::{HeldLock, Stripe};
use crate::store::NodeCache;
use crate::view::{ChainEntries, Guard, SlotView, pin};

use super::release::{self, LockRef};
use super::*;

impl<E: Endpoint> Client<E> {
    // ----- writing -------------------------------------------------------------------------------

    /// Lean mode: the owner of `key`, from the candidate range's pivots (one READ).
    ///
    /// Pivots never change in a record, so no header is needed: a retired record's pivots still
    /// route correctly, and the lock protocol that follows checks freshness.
    pub(super) fn lean_owner(&mut self, view: &SlotView, key: u64) -> Result<u64, IndexError> {
        let range = view.model.owner_candidates(key);
        let mut pivots = vec![0u8; 8 * range.len() as usize];
        self.ep.read(
            offset(view.record, view.layout.pivots() + 8 * range.first),
            &mut pivots,
        )?;
        let pivots: Vec<u64> = pivots.chunks_exact(8).map(|c| le_word(c, 0)).collect();
        Ok(range.first + pivots.partition_point(|&p| p <= key).saturating_sub(1) as u64)
    }

    pub(super) fn write(&mut self, key: u64, change: Change) -> Result<bool, IndexError> {
        let caches = Arc::clone(&self.caches);
        let node = &caches.nodes[caches.node_of(key)];
        let guard = pin();
        let mut backoff = Backoff::new(caches.config.wait_limit);
        let mut slt_full = false;
        let mut slot = 0;
        for _ in 0..caches.config.max_attempts {
            let loaded = self.route(node, key, &guard)?.view;
            let view: &SlotView = &loaded;
            slot = view.slot as usize;
            if view.fetched_at.elapsed() > crate::view::VIEW_MAX_AGE {
                self.refresh(node, view, &guard)?;
                continue;
            }
            if view.header.is_locked() {
                // The retrainer froze this record; wait for the new one. Once it is retired, a
                // split may already have published the slot that serves `key`.
                if view.header.is_retired() && self.reload_directory(node, &guard)? {
                    continue;
                }
                if !backoff.wait() {
                    return Err(IndexError::RetrainingTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                    });
                }
                self.refresh(node, view, &guard)?;
                continue;
            }
            let owner = match view.owner(key) {
                Some(owner) => owner,
                None => self.lean_owner(view, key)?,
            };
            let stripe = caches.locks.stripe(view.record, owner);
            stripe.waiting.fetch_add(1, Ordering::AcqRel);
            let mut held_slot = stripe.held.lock().unwrap_or_else(|e| e.into_inner());
            stripe.waiting.fetch_sub(1, Ordering::AcqRel);
            let mut locked = None;
            if let Some(held) = held_slot.take() {
                if held.record == view.record && held.leaf == owner {
                    locked = Some(Locked {
                        slot: slot as u64,
                        record: held.record,
                        layout: view.layout,
                        leaf: held.leaf,
                        lt_addr: held.lt_addr,
                        lt_now: held.lt_now,
                        chain: held.chain,
                        header: held.header,
                        handovers: held.handovers + 1,
                    });
                } else {
                    let released = self.release_held(held);
                    self.retiring(released)?;
                }
            }
            let locked = match locked {
                Some(locked) => locked,
                None => {
                    let acquired = self.acquire(node, view, slot, owner, &guard, &mut backoff);
                    match self.retiring(acquired)? {
                        Some(locked) => locked,
                        None if std::mem::take(&mut self.wait_unstriped) => {
                            // Our own node's lock, left by a broken operation: wait without the
                            // stripe, which the store's recovery of that lock needs.
                            drop(held_slot);
                            if !backoff.wait() {
                                return Err(IndexError::LockTimeout {
                                    node: node.info.id,
                                    slot: slot as u64,
                                    leaf: owner,
                                });
                            }
                            continue;
                        }
                        None => continue,
                    }
                }
            };
            crate::sync::step("write: locked");
            let outcome = apply(&locked.chain, key, change, node.layout.delta());
            let old = locked.chain.iter().find_map(|(_, leaf)| leaf.get(key));
            self.arm_value(node, !matches!(outcome, Outcome::Unchanged(_)), old);
            let committed = self.commit(node, locked, outcome, stripe, &mut held_slot);
            match self.retiring(committed)? {
                Committed::Done(result) => return Ok(result),
                Committed::SltFull => {
                    slt_full = true;
                    drop(held_slot);
                    if !backoff.wait() {
                        break;
                    }
                    let loaded = self.view(node, slot as u64, &guard)?;
                    self.refresh(node, &loaded, &guard)?;
                }
            }
        }
        if slt_full {
            // Why the memory node has not retrained it, if its retrainer published why.
            let retrainer = self
                .ep
                .read_word(node.members.problem_addr())
                .ok()
                .and_then(retrainer::problem::decode)
                .filter(|&(s, _)| s == slot as u64)
                .map(|(_, why)| why.to_string());
            return Err(IndexError::SltFull {
                node: node.info.id,
                slot: slot as u64,
                retrainer,
            });
        }
        Err(IndexError::TooManyRetries(caches.config.max_attempts))
    }

    /// Releases a lock another local writer left for a different leaf of the same stripe.
    pub(super) fn release_held(&mut self, held: HeldLock) -> Result<(), IndexError> {
        self.release(LockRef {
            node: held.record.node(),
            slot: held.slot,
            leaf: held.leaf,
            lt_addr: held.lt_addr,
            held: held.lt_now,
            record: held.record,
        })
    }

    /// Takes trained leaf `leaf`'s lock and reads its chain behind the CAS in the same batch.
    /// `None`: not taken (contention: waited; or a stale cache: refreshed) — try again.
    pub(super) fn acquire(
        &mut self,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        leaf: u64,
        guard: &Guard,
        backoff: &mut Backoff,
    ) -> Result<Option<Locked>, IndexError> {
        let Some(chain) = view.chain(leaf) else {
            self.refresh(node, view, guard)?;
            return Ok(None);
        };
        let expected = view.lt_entry(leaf);
        let lt_addr = offset(view.record, view.layout.lt_entry(leaf));
        let leaf_bytes = node.layout.leaf_bytes() as usize;
        // An empty leaf box is read in the same batch (its leaves serve this client's splits).
        let redo = self.uses_redo(node);
        let read_box = node.tag != 0 && self.boxes[node.position].wants_read(redo);
        let box_bytes = if read_box {
            8 * leaf_store::members::LEAF_BOX as usize
        } else {
            0
        };
        self.buf.clear();
        self.buf.resize(chain.len() * leaf_bytes + 8 + box_bytes, 0);
        let (leaf_buf, rest) = self.buf.split_at_mut(chain.len() * leaf_bytes);
        let (header_buf, box_buf) = rest.split_at_mut(8);
        let mut verbs: release::Verbs<'_> = smallvec::smallvec![release::unexecuted(
            Verb::cas(lt_addr, expected.raw(), expected.locked_by(node.tag).raw()),
            !expected.raw(),
        )];
        for (entry, chunk) in chain.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(node.layout.leaf_addr(entry.leaf_num()), chunk).fenced());
        }
        verbs.push(Verb::read(view.record, header_buf).fenced());
        if read_box {
            let at = node.members.box_addr(node.tag, self.connection_index, 0);
            verbs.push(Verb::read(at, box_buf));
        }
        if let Err(e) = self.ep.batches(&mut verbs) {
            // A lock that may be held is released — which fails on a broken endpoint, and then
            // says so (LockMayRemain).
            let took = release::may_hold_lock(&verbs, &e);
            drop(verbs);
            let lock = LockRef {
                node: node.info.id,
                slot: slot as u64,
                leaf,
                lt_addr,
                held: expected.locked_by(node.tag),
                record: view.record,
            };
            return Err(if took {
                self.release_after(lock, e.into())
            } else {
                e.into()
            });
        }
        let old = verbs[0].old_value().unwrap_or_default();
        drop(verbs);
        if read_box {
            let at = chain.len() * leaf_bytes + 8;
            let slots = (0..leaf_store::members::LEAF_BOX as usize)
                .map(|i| le_word(&self.buf[at..], i))
                .collect();
            let lbox = &mut self.boxes[node.position];
            lbox.slots = slots;
            lbox.read_at = Some(crate::sync::time::Instant::now());
        }
        if old != expected.raw() {
            let seen = LeafTableEntry::from_raw(old);
            if seen.is_locked() && node.tag != 0 && seen.owner() == node.tag {
                // Held by this compute node although this thread holds the stripe: a lock a
                // broken operation left, which the store recovers under this stripe.
                self.wait_unstriped = true;
                return Ok(None);
            }
            if seen.is_locked() {
                if !backoff.wait() {
                    return Err(IndexError::LockTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                        leaf,
                    });
                }
            } else {
                self.refresh(node, view, guard)?;
            }
            return Ok(None);
        }
        let held = expected.locked_by(node.tag);
        let header = ModelHeader::from_raw(le_word(&self.buf[chain.len() * leaf_bytes..], 0));
        let mut locked = Locked {
            slot: slot as u64,
            record: view.record,
            layout: view.layout,
            leaf,
            lt_addr,
            lt_now: held,
            chain: Vec::new(),
            header,
            handovers: 0,
        };
        // The lock is held from here: every error releases it (or says it may remain).
        if header != view.header && (header.is_locked() || header.is_retired()) {
            // Frozen or being replaced by a retraining: let go and wait for the new record.
            self.release(locked.lock_ref())?;
            self.refresh(node, view, guard)?;
            if !backoff.wait() {
                return Err(IndexError::RetrainingTimeout {
                    node: node.info.id,
                    slot: slot as u64,
                });
            }
            return Ok(None);
        }
        let read = if header == view.header {
            self.decode_leaves(&node.layout, &chain)
                .map(|contents| Some((chain.clone(), contents)))
        } else {
            self.reread_locked_chain(node, view, slot, leaf, guard, &mut locked)
        };
        let (entries, contents) = match read {
            Ok(Some(read)) => read,
            Ok(None) => {
                // The chain is not in this record any more: let go and start over.
                self.release(locked.lock_ref())?;
                return Ok(None);
            }
            Err(e) => return Err(self.release_after(locked.lock_ref(), e)),
        };
        let Some(contents) = contents else {
            // Under the lock nothing writes these leaves: a failed checksum is damage.
            let torn = LeafStoreError::TornLeaf {
                leaf_num: entries[0].leaf_num(),
            };
            return Err(self.release_after(locked.lock_ref(), torn.into()));
        };
        locked.chain = entries.into_iter().zip(contents).collect();
        Ok(Some(locked))
    }

    /// The record changed since the view was built (another chain split, or ours did). We hold
    /// the lock, so our chain is stable now: read the tables ourselves (not the cell's view, which
    /// may predate our lock), install them, and re-read the chain. `None` if the record no longer
    /// has this chain (it was replaced).
    #[allow(clippy::type_complexity)]
    fn reread_locked_chain(
        &mut self,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        leaf: u64,
        guard: &Guard,
        locked: &mut Locked,
    ) -> Result<Option<(ChainEntries, Option<Vec<Leaf>>)>, IndexError> {
        let fresh = self.fetch_view(node, view)?;
        let chain = (fresh.record == view.record)
            .then(|| fresh.chain(leaf))
            .flatten();
        if let Some(cell) = node.cell(slot as u64) {
            cell.replace(view, fresh, guard);
        }
        let Some(chain) = chain else {
            return Ok(None);
        };
        let words = self.read_batch(&node.layout, &chain, &[view.record])?;
        locked.header = ModelHeader::from_raw(words[0]);
        let contents = self.decode_leaves(&node.layout, &chain)?;
        Ok(Some((chain, contents)))
    }

    /// Applies `outcome` to the locked chain: writes in the order that keeps concurrent readers
    /// correct, then releases the lock or hands it to a waiting sibling thread.
    pub(super) fn commit(
        &mut self,
        node: &NodeCache,
        mut locked: Locked,
        outcome: Outcome,
        stripe: &Stripe,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<Committed, IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        let hand_over = stripe.waiting.load(Ordering::Acquire) > 0
            && locked.handovers < self.caches.config.max_handovers;
        // A leaf rewritten in place goes through the redo leaf when it is longer than a packet.
        let redo = if matches!(outcome, Outcome::Unchanged(_)) {
            None
        } else {
            match self.redo_leaf(node) {
                Ok(redo) => redo,
                Err(e) => return Err(self.release_after(locked.lock_ref(), e)),
            }
        };
        let result = match outcome {
            Outcome::Unchanged(result) => {
                self.finish(&mut locked, Vec::new(), None, hand_over, held_slot)?;
                result
            }
            Outcome::Rewrite { result, pos, leaf } => {
                let leaf_num = locked.chain[pos].0.leaf_num();
                let bytes = match leaf.encode(leaf_num, delta) {
                    Ok(bytes) => bytes,
                    Err(e) => return Err(self.release_after(locked.lock_ref(), e.into())),
                };
                locked.chain[pos].1 = leaf;
                self.finish(
                    &mut locked,
                    vec![(layout.leaf_addr(leaf_num), bytes)],
                    redo.map(|leaf| layout.leaf_addr(leaf)),
                    hand_over,
                    held_slot,
                )?;
                result
            }
            Outcome::Unlink { result, pos } => {
                self.unlink(node, &mut locked, pos, redo, hand_over, held_slot)?;
                result
            }
            Outcome::Split {
                result,
                pos,
                lower,
                upper,
            } => match self.split(
                node,
                &mut locked,
                pos,
                lower,
                upper,
                redo,
                hand_over,
                held_slot,
            )? {
                Some(()) => result,
                None => return Ok(Committed::SltFull),
            },
        };
        Ok(Committed::Done(result))
    }

    /// Writes `writes` — leaves rewritten in place, through the `redo` leaf if there is one
    /// (`leaf_store::redo`) — in order, then releases the lock, or leaves it to a waiting
    /// sibling. A failed batch is repeated with the unlock (see [`release`]).
    pub(super) fn finish(
        &mut self,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>)>,
        redo: Option<RemoteAddr>,
        hand_over: bool,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<(), IndexError> {
        let lock = locked.lock_ref();
        let value = std::mem::take(&mut self.value_io);
        let build = |unlock: bool| {
            let mut verbs: release::Verbs<'_> = release::Verbs::new();
            value.prefix(&mut verbs);
            for (at, bytes) in &writes {
                leaf_store::redo::in_place(&mut verbs, *at, bytes, redo, false);
            }
            value.suffix(&mut verbs);
            if unlock {
                verbs.push(leaf_store::unlock_verb(lock.lt_addr, lock.held, None));
            }
            verbs
        };
        let carries = value.carries_block();
        let ran = self.run_ending_batch(lock, build, !hand_over, None);
        self.value_io = value;
        self.value_io.sent |= carries;
        self.value_io.linked |= carries && ran.is_ok();
        let released = ran?;
        if !released {
            *held_slot = Some(locked.hand_over());
        }
        Ok(())
    }
}

/// What `change` does to a chain (sorted across its leaves).
fn apply(chain: &[(LeafTableEntry, Leaf)], key: u64, change: Change, delta: u64) -> Outcome {
    let found = chain
        .iter()
        .enumerate()
        .find_map(|(pos, (_, leaf))| leaf.get(key).map(|v| (pos, v)));
    match (change, found) {
        (Change::Insert(_), Some(_)) | (Change::Update(_) | Change::Delete, None) => {
            Outcome::Unchanged(false)
        }
        (Change::Update(value) | Change::Upsert(value), Some((pos, _))) => {
            let mut leaf = chain[pos].1.clone();
            if let Some(entry) = leaf.entries_mut().iter_mut().find(|e| e.0 == key) {
                entry.1 = value;
            }
            Outcome::Rewrite {
                result: matches!(change, Change::Update(_)),
                pos,
                leaf,
            }
        }
        (Change::Delete, Some((pos, _))) => {
            let mut leaf = chain[pos].1.clone();
            leaf.entries_mut().retain(|e| e.0 != key);
            if leaf.is_empty() && pos > 0 {
                Outcome::Unlink { result: true, pos }
            } else {
                Outcome::Rewrite {
                    result: true,
                    pos,
                    leaf,
                }
            }
        }
        (Change::Insert(value) | Change::Upsert(value), None) => {
            // The last non-empty leaf whose smallest key is below `key` (else the first leaf).
            let pos = chain
                .iter()
                .rposition(|(_, leaf)| leaf.first_key().is_some_and(|f| f < key))
                .unwrap_or(0);
            let mut leaf = chain[pos].1.clone();
            let entries = leaf.entries_mut();
            let at = entries.partition_point(|e| e.0 < key);
            entries.insert(at, (key, value));
            if entries.len() as u64 <= delta {
                return Outcome::Rewrite {
                    result: true,
                    pos,
                    leaf,
                };
            }
            let upper = entries.split_off(entries.len() / 2);
            Outcome::Split {
                result: true,
                pos,
                lower: leaf,
                upper: Leaf::from_entries(upper).unwrap_or_default(),
            }
        }
    }
}

/// The change a write makes to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Insert(u64),
    Update(u64),
    Upsert(u64),
    Delete,
}

/// What a change does to a locked chain.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Nothing to write; the operation's result.
    Unchanged(bool),
    /// Rewrite the leaf at chain position `pos`.
    Rewrite {
        result: bool,
        pos: usize,
        leaf: Leaf,
    },
    /// The leaf at `pos` overflows: it keeps `lower`, a new synonym leaf after it takes `upper`.
    Split {
        result: bool,
        pos: usize,
        lower: Leaf,
        upper: Leaf,
    },
    /// The synonym leaf at `pos` (> 0) became empty: write it empty and unlink it.
    Unlink { result: bool, pos: usize },
}

/// A chain whose trained leaf's LT lock this client holds.
#[derive(Debug)]
pub(super) struct Locked {
    pub(super) slot: u64,
    pub(super) record: RemoteAddr,
    pub(super) layout: leaf_store::RecordLayout,
    pub(super) leaf: u64,
    pub(super) lt_addr: RemoteAddr,
    /// The LT entry's current value (lock bit set).
    pub(super) lt_now: LeafTableEntry,
    pub(super) chain: Vec<(LeafTableEntry, Leaf)>,
    pub(super) header: ModelHeader,
    pub(super) handovers: u32,
}

impl Locked {
    /// The lock, with the chain as last written, for the next local writer of this leaf.
    pub(super) fn hand_over(&mut self) -> HeldLock {
        HeldLock {
            record: self.record,
            slot: self.slot,
            leaf: self.leaf,
            lt_addr: self.lt_addr,
            lt_now: self.lt_now,
            chain: std::mem::take(&mut self.chain),
            header: self.header,
            handovers: self.handovers,
        }
    }
}

/// How a commit ended.
pub(super) enum Committed {
    Done(bool),
    /// The slot's SLT is full: nothing changed, lock released; wait for retraining.
    SltFull,
}
