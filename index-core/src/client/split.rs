//! Structural changes: a split into a new synonym leaf, an unlink of an emptied one.

use leaf_store::settle::Step;
use leaf_store::{
    Leaf, LeafStoreError, LeafTableEntry, MAX_SYNONYMS, ModelHeader, check_allocation,
};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::locks::HeldLock;
use crate::store::NodeCache;

use super::batch::{self, NOT_EXECUTED};
use super::op::WriteOp;
use super::*;

impl<E: Endpoint> Client<E> {
    /// A structural change in one batch, in this order: `writes` (new or emptied leaves, SLT
    /// entries; those marked `true` are linked leaves rewritten in place), the LT link change
    /// (keeping the lock), the FREED marker, FAA of the header's change counter, then
    /// `late_writes` (the split leaf's shrunken contents, in place, fenced behind the bump), then
    /// clearing a word of this client's in the membership table (`clear_word`: its address and
    /// the value it holds — the leaf-box slot the new leaf came from, or the unlink word; a CAS to
    /// 0, fenced, so it lands after the link and the freed mark), then the unlock (fenced).
    /// Readers that cached the old tables see the bump before any key leaves a leaf they read.
    /// Leaves rewritten in place go through the `redo` leaf, if there is one (`leaf_store::redo`).
    /// Returns the header the bump found, when the batch ran whole at its first attempt.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn structural(
        &mut self,
        op: &mut WriteOp,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>, bool)>,
        redo: Option<RemoteAddr>,
        lt_change: Option<LeafTableEntry>,
        freed: Option<(RemoteAddr, Vec<u8>)>,
        late_writes: Vec<(RemoteAddr, Vec<u8>)>,
        clear_word: Option<(RemoteAddr, u64)>,
        hand_over: bool,
        held_slot: &mut Option<Box<HeldLock>>,
    ) -> Result<Option<ModelHeader>, IndexError> {
        let lock = locked.lock_ref();
        let fence_shrink = {
            #[cfg(loom)]
            {
                self.caches.broken.fence_shrink
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        let lt_final = lt_change.map_or(locked.lt_now, LeafTableEntry::locked);
        let unlock = batch::Unlock {
            entry: lt_final,
            fenced: true,
        };
        let ran = self
            .end_write(
                &op.value,
                lock,
                !hand_over,
                unlock,
                |batch| {
                    for (at, bytes, in_place) in &writes {
                        let redo = redo.filter(|_| *in_place);
                        leaf_store::redo::in_place(batch, *at, bytes, redo, false);
                    }
                    if let Some(new) = lt_change {
                        batch.link(Verb::cas(lock.lt_addr, lock.held.raw(), new.locked().raw()));
                    }
                    // Fenced behind the link CAS: were the slot marked freed while the LT entry still
                    // pointed at it, a batch cut off there would leave a chain no reader can follow.
                    if let Some((at, bytes)) = &freed {
                        batch.enter(Step::FreedMark);
                        batch.push(Verb::write(*at, bytes).fenced());
                    }
                    batch.bump(Verb::faa(lock.record, ModelHeader::CHANGE_ONE).fenced());
                },
                |batch| {
                    // Fenced: on InfiniBand an unfenced WRITE may land before the earlier header FAA
                    // executes, and a reader could see the shrunk leaf under the old header.
                    batch.enter(Step::Shrink);
                    for (at, bytes) in &late_writes {
                        leaf_store::redo::in_place(batch, *at, bytes, redo, fence_shrink);
                    }
                    if let Some((at, word)) = clear_word {
                        batch.enter(Step::ClearWord);
                        batch.push(Verb::cas(at, word, 0).fenced());
                    }
                },
            )
            .await;
        let ended = ran?;
        locked.lt_now = lt_final;
        locked.header =
            ModelHeader::from_raw(locked.header.raw().wrapping_add(ModelHeader::CHANGE_ONE));
        if !ended.released {
            *held_slot = Some(locked.hand_over());
        }
        Ok(ended.bumped)
    }

    /// After a structural change that ran whole at its first attempt: the cached view of the
    /// record brought up to date with it, so that the next writer of the slot on this compute
    /// node need not read the tables again — if the header words the change's own atomics
    /// returned prove that nothing else changed the record since that view's header: the slot
    /// claim (`slot_claim`, a split's) found `before`, and the bump found `before` plus the
    /// claim (ARCHITECTURE §6, "A writer's own changes"). Otherwise the view stays as it is.
    pub(super) fn adopt_change(
        &mut self,
        bumped: Option<ModelHeader>,
        node: &NodeCache,
        locked: &Locked,
        before: ModelHeader,
        slot_claim: Option<ModelHeader>,
        freed: Option<(u64, LeafTableEntry)>,
    ) {
        let Some(bumped) = bumped else {
            return;
        };
        let checked = {
            #[cfg(loom)]
            {
                self.caches.broken.adopt_changes == super::broken::AdoptChanges::Checked
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        let at_bump = match slot_claim {
            Some(claimed_at) if claimed_at != before && checked => return,
            Some(_) => before.raw().wrapping_add(ModelHeader::SLOT_USE_ONE),
            None => before.raw(),
        };
        if bumped.raw() != at_bump && checked {
            return;
        }
        let after = ModelHeader::from_raw(bumped.raw().wrapping_add(ModelHeader::CHANGE_ONE));
        let Some(cell) = node.cell(locked.slot) else {
            return;
        };
        let current = cell.load();
        if current.record != locked.record || (current.header != before && checked) {
            return;
        }
        let chain: Vec<LeafTableEntry> = locked.chain.iter().map(|(entry, _)| *entry).collect();
        if let Some(fresh) = current.after_change(after, locked.leaf, &chain, freed) {
            crate::sync::step("write: view adopted");
            self.install(node, cell, &current, fresh);
        }
    }

    /// Unlinks the emptied synonym leaf at chain position `pos` (> 0): written empty, linked
    /// around (in the LT entry, keeping the lock, or in the previous SLT entry), its SLT slot
    /// marked freed, the header bumped — one structural batch.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn unlink(
        &mut self,
        op: &mut WriteOp,
        node: &NodeCache,
        locked: &mut Locked,
        pos: usize,
        redo: Option<u64>,
        hand_over: bool,
        held_slot: &mut Option<Box<HeldLock>>,
    ) -> Result<(), IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        let before = locked.header;
        let (gone, _) = locked.chain[pos];
        let empty = match Leaf::new().encode(gone.leaf_num(), delta) {
            Ok(bytes) => bytes,
            Err(e) => return Err(self.release_after(locked.lock_ref(), e.into())),
        };
        let slot_of_gone = u64::from(locked.chain[pos - 1].0.synonym_ptr());
        let next = gone.synonym_ptr();
        let mut verbs_owned: Vec<(RemoteAddr, Vec<u8>, bool)> = Vec::with_capacity(3);
        // First, the leaf goes to this client's unlink word: should the node die before the
        // batch marks the slot freed, recovery finds the leaf there and frees it. The batch
        // clears the word again after the mark, so a word left set names a leaf under our lock.
        let unlink_word = (node.tag != 0).then(|| {
            (
                node.members.unlink_addr(node.tag, self.connection_index),
                leaf_store::members::leaf_word(gone.leaf_num()),
            )
        });
        if let Some((at, word)) = unlink_word {
            verbs_owned.push((at, word.to_le_bytes().to_vec(), false));
        }
        verbs_owned.push((layout.leaf_addr(gone.leaf_num()), empty, true));
        // Link around it: in the LT entry (keeping the lock) or in the previous SLT entry.
        let mut lt_change = None;
        if pos == 1 {
            lt_change = Some(locked.lt_now.with_synonym(next));
            locked.chain[0].0 = locked.chain[0].0.with_synonym(next);
        } else {
            let prev_slot = u64::from(locked.chain[pos - 2].0.synonym_ptr());
            let prev = locked.chain[pos - 1].0.with_synonym(next);
            verbs_owned.push((
                locked
                    .record
                    .saturating_add(locked.layout.slt_entry(prev_slot)),
                prev.raw().to_le_bytes().to_vec(),
                false,
            ));
            locked.chain[pos - 1].0 = prev;
        }
        // The freed mark names the leaf: the retrainer hands it out again once it has rebuilt the
        // record without this slot.
        let freed = {
            let (at, bytes) = leaf_store::settle::freed_mark(
                locked.record,
                locked.layout,
                slot_of_gone,
                gone.leaf_num(),
            );
            (at, bytes.to_vec())
        };
        // The chain as it will be: a sibling thread may inherit it with the lock.
        locked.chain.remove(pos);
        crate::sync::step("unlink: batch built");
        let bumped = self
            .structural(
                op,
                locked,
                verbs_owned,
                redo.map(|leaf| layout.leaf_addr(leaf)),
                lt_change,
                Some(freed),
                Vec::new(),
                unlink_word,
                hand_over,
                held_slot,
            )
            .await?;
        let freed = (slot_of_gone, LeafTableEntry::freed(gone.leaf_num()));
        self.adopt_change(bumped, node, locked, before, None, Some(freed));
        Ok(())
    }

    /// Splits the leaf at chain position `pos`: a new synonym leaf after it takes `upper` (first
    /// written as `moved`, the upper half without the new key, if there is one). Round trip 2
    /// claims an SLT slot; the header that claim returns must be the view's when the chain was
    /// not confirmed (`Locked::confirmed`), else nothing is changed (`SplitEnd::Stale`).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn split(
        &mut self,
        op: &mut WriteOp,
        node: &NodeCache,
        locked: &mut Locked,
        pos: usize,
        lower: Leaf,
        (upper, moved): (Leaf, Option<Leaf>),
        redo: Option<u64>,
        hand_over: bool,
        held_slot: &mut Option<Box<HeldLock>>,
    ) -> Result<SplitEnd, IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        let before = locked.header;
        // Round trip 2: a leaf number (unless a spare is at hand) and an SLT slot.
        // The new leaf: a spare kept from an earlier split, else one from this client's leaf box
        // (it stays there until the batch that links it clears it), else a fresh one.
        let spare = op
            .spare_leaves
            .iter()
            .position(|&(n, _)| n == node.info.id)
            .map(|i| op.spare_leaves.swap_remove(i).1);
        let boxed = if spare.is_none() {
            self.boxes[node.position].leaf_except(redo.is_some(), redo)
        } else {
            None
        };
        let spare = spare.or(boxed.map(|(_, leaf)| leaf));
        // An SLT slot this writer claimed in an earlier attempt under the same lock, before it
        // found its chain stale (see `SplitEnd::Stale`).
        let preclaimed = match op.preclaimed {
            Some((record, _, slot)) if record == locked.record => {
                op.preclaimed = None;
                Some(slot)
            }
            _ => None,
        };
        let mut verbs = batch::Verbs::new();
        let alloc = spare.is_none().then(|| {
            batch::place(
                &mut verbs,
                batch::unexecuted(leaf_store::alloc_leaf_verb(&layout), NOT_EXECUTED),
            )
        });
        let claim = preclaimed.is_none().then(|| {
            batch::place(
                &mut verbs,
                batch::unexecuted(
                    Verb::faa(locked.record, ModelHeader::SLOT_USE_ONE),
                    NOT_EXECUTED,
                ),
            )
        });
        let outcome = if verbs.is_empty() {
            Ok(())
        } else {
            wait::batches(&mut self.ep, self.waiting, &mut verbs).await
        };
        let slot_use_raw = match preclaimed {
            None => claim.and_then(|at| at.old(&verbs)).unwrap_or(NOT_EXECUTED),
            // As if the claim had just found the slot before it used.
            Some(slot) => slot - 1,
        };
        let allocated = alloc.and_then(|at| at.executed_old(&verbs));
        drop(verbs);
        // A leaf claimed now (or the spare) that this split will not use is kept for the next
        // (a box leaf simply stays in the box).
        let keep_leaf = |client: &mut Self, op: &mut WriteOp| {
            let leaf = match (spare, allocated) {
                (Some(_), _) if boxed.is_some() => None,
                (Some(n), _) => Some(n),
                (None, Some(old)) => check_allocation(&mut client.ep, &layout, old).ok(),
                _ => None,
            };
            if let Some(n) = leaf {
                op.spare_leaves.push((node.info.id, n));
            }
        };
        if let Err(e) = outcome {
            // Give back what executed, then release: the claimed SLT slot is marked freed (or an
            // over-full claim undone), the leaf kept.
            keep_leaf(self, op);
            let cause = IndexError::from(e);
            if let Some(slot) = preclaimed {
                self.free_slot_and_release(locked, slot).await?;
                return Err(cause);
            }
            if slot_use_raw == NOT_EXECUTED {
                return Err(self.release_after(locked.lock_ref(), cause));
            }
            let claimed = ModelHeader::from_raw(slot_use_raw).slot_use() + 1;
            if claimed > MAX_SYNONYMS {
                self.undo_slot_claim(locked.record);
                return Err(self.release_after(locked.lock_ref(), cause));
            }
            self.free_slot_and_release(locked, claimed).await?;
            return Err(cause);
        }
        let slot_use_old = ModelHeader::from_raw(slot_use_raw).slot_use();
        if preclaimed.is_none() && slot_use_old >= MAX_SYNONYMS {
            // SLT full: give the slot back, keep the leaf for later, release, ask for retraining.
            self.undo_slot_claim(locked.record);
            keep_leaf(self, op);
            self.release(locked.lock_ref())?;
            self.request_retraining(node, locked.slot);
            return Ok(SplitEnd::SltFull);
        }
        let slt_slot = slot_use_old + 1;
        crate::sync::step("split: slot claimed");
        let check_claim = {
            #[cfg(loom)]
            {
                self.caches.broken.writer_trust != super::broken::WriterTrust::SplitUnchecked
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        if preclaimed.is_none()
            && !locked.confirmed
            && check_claim
            && ModelHeader::from_raw(slot_use_raw) != locked.header
        {
            // The chain came from a view older than the record: it may lack a leaf, and the new
            // leaf's claim would then reach over that leaf's keys. Keep the lock, the slot and the
            // leaf; the writer reads the chain again and, if it still splits, uses them.
            keep_leaf(self, op);
            op.preclaimed = Some((locked.record, locked.layout, slt_slot));
            if slt_slot == self.caches.config.retrain_threshold {
                self.request_retraining(node, locked.slot);
            }
            return Ok(SplitEnd::Stale);
        }
        let new_leaf = match (spare, allocated) {
            (Some(n), _) => n,
            (None, old) => match check_allocation(&mut self.ep, &layout, old.unwrap_or(u64::MAX)) {
                Ok(n) => n,
                Err(LeafStoreError::PoolExhausted { capacity }) => {
                    // The SLT slot is claimed but will hold nothing: mark it freed, release.
                    self.free_slot_and_release(locked, slt_slot).await?;
                    return Err(IndexError::PoolExhausted {
                        node: node.info.id,
                        capacity,
                    });
                }
                Err(e) => {
                    self.free_slot_and_release(locked, slt_slot).await?;
                    return Err(e.into());
                }
            },
        };
        // Round trip 3, in order: the new leaf's SLT entry and the leaf, the link to it, the header
        // bump, and only then the split leaf's shrunken contents (and the new key in the new
        // leaf, if it went there); then unlock.
        let (split_entry, _) = locked.chain[pos];
        let new_entry = LeafTableEntry::new(new_leaf)
            .unwrap_or_default()
            .with_synonym(split_entry.synonym_ptr());
        let encoded = upper.encode(new_leaf, delta).and_then(|upper_bytes| {
            let moved_bytes = moved.map(|m| m.encode(new_leaf, delta)).transpose()?;
            Ok((
                upper_bytes,
                moved_bytes,
                lower.encode(split_entry.leaf_num(), delta)?,
            ))
        });
        let (first_bytes, after_shrink, lower_bytes) = match encoded {
            Ok((upper, Some(moved), lower)) => (moved, Some(upper), lower),
            Ok((upper, None, lower)) => (upper, None, lower),
            Err(e) => {
                if boxed.is_none() {
                    op.spare_leaves.push((node.info.id, new_leaf));
                }
                self.free_slot_and_release(locked, slt_slot).await?;
                return Err(e.into());
            }
        };
        // The SLT entry first: once the new leaf claims its keys, the record names it, so a
        // recovery that finds the split stopped before its link withdraws that claim (a leaf that
        // claims keys but is linked nowhere would answer for them after the split leaf changed
        // them). The new leaf is linked only after it is placed whole: no redo leaf for it.
        let mut writes = vec![
            (
                locked
                    .record
                    .saturating_add(locked.layout.slt_entry(slt_slot)),
                new_entry.raw().to_le_bytes().to_vec(),
                false,
            ),
            (layout.leaf_addr(new_leaf), first_bytes, false),
        ];
        let slt_ptr = u8::try_from(slt_slot).unwrap_or(0);
        let linked = split_entry.with_synonym(slt_ptr);
        let lt_change = if pos == 0 {
            Some(locked.lt_now.with_synonym(slt_ptr))
        } else {
            let at_slot = u64::from(locked.chain[pos - 1].0.synonym_ptr());
            writes.push((
                locked
                    .record
                    .saturating_add(locked.layout.slt_entry(at_slot)),
                linked.raw().to_le_bytes().to_vec(),
                false,
            ));
            None
        };
        // The shrink; then, if the new key is in the upper half, the new leaf with it: once the
        // split leaf no longer claims the key (the claims of the two agree until then).
        let mut late = vec![(layout.leaf_addr(split_entry.leaf_num()), lower_bytes)];
        if let Some(bytes) = after_shrink {
            late.push((layout.leaf_addr(new_leaf), bytes));
        }
        #[cfg(loom)]
        if self.caches.broken.split_order != super::broken::SplitOrder::Safe {
            self.split_in_wrong_order(locked, writes, late, linked, pos)?;
            return Ok(SplitEnd::Done);
        }
        locked.chain[pos] = (linked, lower);
        locked.chain.insert(pos + 1, (new_entry, upper));
        // The claim counts in the header once: a slot claimed before a re-read is counted in the
        // header that re-read found.
        if locked.header.slot_use() < slt_slot {
            locked.header =
                ModelHeader::from_raw(locked.header.raw().wrapping_add(ModelHeader::SLOT_USE_ONE));
        }
        let box_clear = boxed.map(|(box_slot, leaf)| {
            (
                node.members
                    .box_addr(node.tag, self.connection_index, box_slot),
                leaf_store::members::leaf_word(leaf),
            )
        });
        // The box slot is used up locally whatever happens; if the batch fails, the leaf may be
        // linked while the remote slot still names it: never take it from the box again.
        if let Some((box_slot, leaf)) = boxed {
            let lbox = &mut self.boxes[node.position];
            lbox.slots[box_slot as usize] = 0;
            lbox.suspect.push(leaf);
        }
        let bumped = self
            .structural(
                op,
                locked,
                writes,
                redo.map(|leaf| layout.leaf_addr(leaf)),
                lt_change,
                None,
                late,
                box_clear,
                hand_over,
                held_slot,
            )
            .await?;
        // Linked (a box leaf was never in hand: this does nothing for it).
        leaf_store::ghost::put(node.info.id, new_leaf);
        if let Some((_, leaf)) = boxed {
            self.boxes[node.position].suspect.retain(|&l| l != leaf);
        }
        // The header the slot claim found: this call's, or a foreseeing claim's whose header was
        // the view's (`before`, not counting the claim); a claim counted in `before` already (a
        // re-read found it) leaves the bump to find `before`.
        let claimed_at = match preclaimed {
            None => Some(ModelHeader::from_raw(slot_use_raw)),
            Some(slot) if before.slot_use() < slot => Some(before),
            Some(_) => None,
        };
        self.adopt_change(bumped, node, locked, before, claimed_at, None);
        // (A slot claimed beforehand asked for it when it was claimed, or in its own split.)
        if slt_slot == self.caches.config.retrain_threshold && preclaimed.is_none() {
            self.request_retraining(node, locked.slot);
        }
        Ok(SplitEnd::Done)
    }

    /// Marks SLT slot `slt_slot`, claimed by this split but left unused, freed, and releases the
    /// lock in the same batch (repeated if it fails, see [`release`]).
    async fn free_slot_and_release(
        &mut self,
        locked: &Locked,
        slt_slot: u64,
    ) -> Result<(), IndexError> {
        let lock = locked.lock_ref();
        let (at, freed) = leaf_store::settle::unused_mark(locked.record, locked.layout, slt_slot);
        let build = |unlock: bool, _after_bump: bool| {
            let mut batch = batch::Ending::default();
            batch.enter(Step::FreedMark);
            batch.push(Verb::write(at, &freed));
            if unlock {
                batch.enter(Step::Unlock);
                batch.push(leaf_store::unlock_verb(lock.lt_addr, lock.held, None));
            }
            batch
        };
        self.run_ending_batch(lock, build, true).await.map(|_| ())
    }

    /// Marks an SLT slot claimed in an earlier attempt and not used (the chain, read again, no
    /// longer split) freed, as a split that fails does (best effort: a slot left unwritten below
    /// `slot_use` is what a compute node that died between claim and link leaves too).
    pub(super) fn free_preclaimed(&mut self, op: &mut WriteOp) {
        if let Some((record, layout, slot)) = op.preclaimed.take() {
            self.mark_slot_freed(record, layout, slot);
        }
    }

    /// Marks SLT slot `slot` of `record` freed: claimed, and to hold no leaf (best effort).
    pub(super) fn mark_slot_freed(
        &mut self,
        record: RemoteAddr,
        layout: leaf_store::RecordLayout,
        slot: u64,
    ) {
        let (at, freed) = leaf_store::settle::unused_mark(record, layout, slot);
        let _ = self.ep.write(at, &freed);
    }

    /// Gives back an SLT claim past the last slot (best effort: a count left above 255 only
    /// makes later claimers give theirs back too, until the retraining the full slot needs).
    fn undo_slot_claim(&mut self, record: RemoteAddr) {
        for _ in 0..3 {
            if self
                .ep
                .faa(record, ModelHeader::SLOT_USE_ONE.wrapping_neg())
                .is_ok()
            {
                return;
            }
        }
    }

    pub(super) fn request_retraining(&mut self, node: &NodeCache, slot: u64) {
        if leaf_store::queue::enqueue(&mut self.ep, &node.layout, slot).is_err() {
            self.enqueue_failures += 1;
        }
    }
}

/// How a split ended.
pub(super) enum SplitEnd {
    Done,
    /// The SLT is full: nothing changed, lock released, retraining requested.
    SltFull,
    /// The record changed since the view the chain came from: nothing written; the lock is still
    /// held and the claimed SLT slot kept in `Client::preclaimed`.
    Stale,
}
