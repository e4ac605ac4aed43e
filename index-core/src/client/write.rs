//! The write path: the leaf-lock protocol shared by INSERT, UPDATE, UPSERT and DELETE.
use crate::sync::atomic::Ordering;

use leaf_store::settle::Step;
use leaf_store::{Leaf, LeafStoreError, LeafTableEntry, ModelHeader, check_allocation, le_word};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::backoff::Backoff;
use crate::locks::{HeldLock, Stripe};
use crate::store::NodeCache;
use crate::view::{ChainEntries, SlotView};

use super::batch::{self, NOT_EXECUTED};
use super::cache::route;
use super::op::WriteOp;
use super::release::{self, LockRef};
use super::split::SplitEnd;
use super::wait::{self, Waiting};
use super::*;

impl<E: Endpoint> Client<E> {
    // ----- writing -------------------------------------------------------------------------------

    /// Lean mode: the owner of `key` and the keys its chain serves, from the candidate range's
    /// pivots and the next one (one READ).
    ///
    /// Pivots never change in a record, so no header is needed: a retired record's pivots still
    /// route correctly, and the lock protocol that follows checks freshness.
    pub(super) fn lean_owner(
        &mut self,
        view: &SlotView,
        key: u64,
    ) -> Result<(u64, (u64, u64)), IndexError> {
        let range = view.model.owner_candidates(key);
        let last = (range.last + 1).min(view.leaves().saturating_sub(1));
        let mut bytes = vec![0u8; 8 * (last + 1 - range.first) as usize];
        self.ep.read(
            view.record
                .saturating_add(view.layout.pivots() + 8 * range.first),
            &mut bytes,
        )?;
        let mut pivots: Vec<u64> = bytes.chunks_exact(8).map(|c| le_word(c, 0)).collect();
        let owner = range.first + pivots.partition_point(|&p| p <= key).saturating_sub(1) as u64;
        if owner == last && owner + 1 < view.leaves() {
            // Past the candidates (the model's guarantee says it cannot be): one more pivot.
            pivots.push(
                self.ep.read_word(
                    view.record
                        .saturating_add(view.layout.pivots() + 8 * (owner + 1)),
                )?,
            );
        }
        let next = pivots.get((owner + 1 - range.first) as usize).copied();
        Ok((
            owner,
            chain_range(view, owner, pivots[(owner - range.first) as usize], next),
        ))
    }

    /// The write of `key`, carrying `op` along its steps (its caller concludes it).
    // The lock stripe is owned across the operation's batches by design: a synchronous call
    // never yields, and a posting one only try-locks a stripe (yielding while a sibling of its
    // thread owns it), so no operation blocks its thread on a stripe that thread owns
    // (`tests/loom_pipeline.rs` catches the blocking variant).
    pub(super) async fn write_in(
        &mut self,
        op: &mut WriteOp,
        key: u64,
        change: Change,
    ) -> Result<bool, IndexError> {
        // SAFETY: used only within this operation, which borrows `self` throughout.
        let caches = unsafe { self.op_caches() };
        let node = &caches.nodes[caches.node_of(key)];
        let mut backoff = Backoff::new(caches.config.wait_limit);
        let mut slt_full = false;
        let mut slot = 0;
        'attempts: for _ in 0..caches.config.max_attempts {
            // A slot an earlier attempt claimed and did not use (every exit of the operation
            // itself frees one too: `Client::conclude`).
            self.free_preclaimed(op);
            let loaded = route!(self, node, key, Self::held).view;
            let view: &SlotView = &loaded;
            slot = view.slot as usize;
            if view.fetched_at.elapsed() > crate::view::VIEW_MAX_AGE {
                self.refresh(node, view)?;
                continue;
            }
            if view.header.is_locked() {
                // The retrainer froze this record; wait for the new one. Once it is retired, a
                // split may already have published the slot that serves `key`.
                if view.header.is_retired() && self.reload_directory(node)? {
                    continue;
                }
                if !wait::pause(&mut backoff, self.waiting).await {
                    return Err(IndexError::RetrainingTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                    });
                }
                self.refresh(node, view)?;
                continue;
            }
            let (owner, range) = match (view.owner(key), &view.pivots) {
                (Some(owner), Some(pivots)) => {
                    let at = |i: u64| pivots.get(i as usize).copied();
                    let first = at(owner).unwrap_or(view.first_key);
                    (owner, chain_range(view, owner, first, at(owner + 1)))
                }
                _ => self.lean_owner(view, key)?,
            };
            let stripe = caches.locks.stripe(view.record, owner);
            // Counted as waiting until the stripe is taken, or the operation dropped.
            let queued = crate::locks::Queued::on(stripe);
            let mut held_slot = match self.waiting {
                Waiting::Blocking => stripe.lock(),
                // Loom's broken variant: a posting operation blocks as a synchronous call does.
                #[cfg(loom)]
                Waiting::Posting
                    if caches.broken.stripe_wait == super::broken::StripeWait::Blocks =>
                {
                    stripe.lock()
                }
                // A sibling operation of this thread may hold the stripe, and goes on only
                // when this one yields; one its executor does not poll (an async operation
                // awaited after this one) would hold it for ever, so the wait is bounded.
                Waiting::Posting => {
                    let mut stripe_wait = Backoff::new(caches.config.wait_limit);
                    loop {
                        if let Some(held) = stripe.try_lock() {
                            break held;
                        }
                        if !wait::pause(&mut stripe_wait, Waiting::Posting).await {
                            return Err(IndexError::LockTimeout {
                                node: node.info.id,
                                slot: slot as u64,
                                leaf: owner,
                            });
                        }
                    }
                }
            };
            drop(queued);
            let mut locked = None;
            if let Some(held) = held_slot.take() {
                leaf_store::ghost::receive_lock(held.lt_addr);
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
                        // Held throughout: the chain is as the last holder left it, which is
                        // the record's if that holder had confirmed it.
                        confirmed: held.confirmed,
                        handovers: held.handovers + 1,
                    });
                } else {
                    let released = self.release_held(*held);
                    self.retiring(released)?;
                }
            }
            let mut locked = match locked {
                Some(locked) => locked,
                None => {
                    let may_split = matches!(change, Change::Insert(_) | Change::Upsert(_));
                    let acquired = self
                        .acquire(op, node, view, slot, owner, &mut backoff, may_split)
                        .await;
                    match self.retiring(acquired)? {
                        Some(locked) => locked,
                        None if std::mem::take(&mut op.wait_unstriped) => {
                            // Our own node's lock, left by a broken operation: wait without the
                            // stripe, which the store's recovery of that lock needs.
                            drop(held_slot);
                            if !wait::pause(&mut backoff, self.waiting).await {
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
            let (trust_cached, check_splits) = {
                #[cfg(loom)]
                {
                    let trust = caches.broken.writer_trust;
                    (
                        trust == super::broken::WriterTrust::CachedChain,
                        trust != super::broken::WriterTrust::ClaimedSplitUnconfirmed,
                    )
                }
                #[cfg(not(loom))]
                {
                    (false, true)
                }
            };
            // A split that finds the chain stale hands the lock back (`Committed::Stale`), keeping
            // its slot claimed; a split with a slot claimed beforehand (that, or an insert's
            // foreseeing claim) does not check the header, so its chain is confirmed first.
            let committed = loop {
                let mut outcome = apply(&locked.chain, key, change, node.layout.delta(), range);
                let split_on_claim = check_splits
                    && op.preclaimed.is_some()
                    && matches!(outcome, Outcome::Split { .. });
                if !locked.confirmed
                    && (split_on_claim
                        || (!trust_cached && !trusted_unconfirmed(&locked.chain, key, &outcome)))
                {
                    match self.confirm_chain(node, view, slot, &mut locked).await {
                        Ok(true) => {}
                        Ok(false) => {
                            let released = self.release(locked.lock_ref());
                            self.retiring(released)?;
                            continue 'attempts;
                        }
                        Err(e) => {
                            let failed: Result<bool, IndexError> =
                                Err(self.release_after(locked.lock_ref(), e));
                            return self.retiring(failed);
                        }
                    }
                    outcome = apply(&locked.chain, key, change, node.layout.delta(), range);
                }
                let old = locked.chain.iter().find_map(|(_, leaf)| leaf.get(key));
                self.arm_value(
                    &mut op.value,
                    node,
                    !matches!(outcome, Outcome::Unchanged(_)),
                    old,
                );
                match self
                    .commit(op, node, locked, outcome, stripe, &mut held_slot)
                    .await
                {
                    Ok(Committed::Stale(back)) => locked = *back,
                    other => break other,
                }
            };
            match self.retiring(committed)? {
                Committed::Done(result) => return Ok(result),
                Committed::Stale(back) => {
                    // Not returned by the loop above; were it, the lock is let go.
                    let released = self.release(back.lock_ref());
                    self.retiring(released)?;
                }
                Committed::SltFull => {
                    slt_full = true;
                    drop(held_slot);
                    if !wait::pause(&mut backoff, self.waiting).await {
                        break;
                    }
                    let loaded = self.view(node, slot as u64)?;
                    self.refresh(node, &loaded)?;
                }
            }
        }
        if slt_full {
            // Why the memory node has not retrained it, if its retrainer published why.
            let retrainer = self
                .ep
                .read_word(node.members.problem_addr())
                .ok()
                .and_then(leaf_store::put_off::decode)
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
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn acquire(
        &mut self,
        op: &mut WriteOp,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        leaf: u64,
        backoff: &mut Backoff,
        may_split: bool,
    ) -> Result<Option<Locked>, IndexError> {
        let Some(chain) = view.chain(leaf) else {
            self.refresh(node, view)?;
            return Ok(None);
        };
        let expected = view.lt_entry(leaf);
        let lt_addr = view.record.saturating_add(view.layout.lt_entry(leaf));
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
        self.buf.resize(chain.len() * leaf_bytes + box_bytes, 0);
        let (leaf_buf, box_buf) = self.buf.split_at_mut(chain.len() * leaf_bytes);
        let mut verbs = batch::Verbs::new();
        let lock = batch::place(
            &mut verbs,
            batch::unexecuted(
                Verb::cas(lt_addr, expected.raw(), expected.locked_by(node.tag).raw()),
                !expected.raw(),
            ),
        );
        for (entry, chunk) in chain.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(node.layout.leaf_addr(entry.leaf_num()), chunk).fenced());
        }
        // An insert into a chain with a leaf last seen full foresees its split: its SLT slot is
        // claimed here, saving the split's own round trip (ARCHITECTURE §6, "Splits foreseen").
        // The claim is a CAS from the view's header: it takes the slot only if no split, unlink or
        // freeze changed the record since the view was read — then the chain is the record's — and
        // otherwise takes nothing (a guess made stale by another compute node's split costs no
        // slot).
        let foresee = may_split
            && view.header.slot_use() < leaf_store::MAX_SYNONYMS
            && node
                .full
                .as_ref()
                .is_some_and(|full| chain.iter().any(|e| full.is_full(e.leaf_num())));
        let claiming = view.header.raw().wrapping_add(ModelHeader::SLOT_USE_ONE);
        let claim = foresee.then(|| {
            batch::place(
                &mut verbs,
                batch::unexecuted(
                    Verb::cas(view.record, view.header.raw(), claiming).fenced(),
                    NOT_EXECUTED,
                ),
            )
        });
        // And its new leaf, if neither a spare nor the leaf box has one (and the box is not being
        // read in this batch): allocated here too (parked as a spare if the split does not come —
        // or forgotten, for the orphan sweep, if the box is full: so only by a member, whose
        // memory node sweeps).
        let allocate = foresee
            && node.tag != 0
            && !read_box
            && !op.spare_leaves.iter().any(|&(n, _)| n == node.info.id)
            && self.boxes[node.position].leaf(redo).is_none();
        let alloc = allocate.then(|| {
            batch::place(
                &mut verbs,
                batch::unexecuted(leaf_store::alloc_leaf_verb(&node.layout), NOT_EXECUTED),
            )
        });
        if read_box {
            let at = node.members.box_addr(node.tag, self.connection_index, 0);
            verbs.push(Verb::read(at, box_buf));
        }
        let batch = wait::batches(&mut self.ep, self.waiting, &mut verbs).await;
        let allocated = alloc.and_then(|at| at.executed_old(&verbs));
        // Whether the foreseeing claim took the slot (its CAS found the view's header).
        let claimed = claim.is_some_and(|at| at.old(&verbs) == Some(view.header.raw()))
            && view.header.raw() != NOT_EXECUTED;
        // A lock that may be held after a failed batch is released — which fails on a broken
        // endpoint, and then says so (LockMayRemain).
        let took = batch
            .as_ref()
            .err()
            .is_some_and(|e| release::may_hold_lock(&verbs, e));
        let old = lock.old(&verbs).unwrap_or_default();
        drop(verbs);
        // A leaf allocated here is kept as a spare whatever happens next.
        if let Some(n) =
            allocated.and_then(|old| check_allocation(&mut self.ep, &node.layout, old).ok())
        {
            op.spare_leaves.push((node.info.id, n));
        }
        if let Err(e) = batch {
            if claimed {
                self.give_back_claim(view);
            }
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
        if read_box {
            let at = chain.len() * leaf_bytes;
            let slots = (0..leaf_store::members::LEAF_BOX as usize)
                .map(|i| le_word(&self.buf[at..], i))
                .collect();
            let lbox = &mut self.boxes[node.position];
            lbox.slots = slots;
            lbox.read_at = Some(crate::sync::time::Instant::now());
        }
        if old != expected.raw() {
            // Not locked: a slot the batch claimed is given back.
            if claimed {
                self.give_back_claim(view);
            }
            let seen = LeafTableEntry::from_raw(old);
            if seen.is_frozen() {
                // A retrainer froze the record (or replaced it, and holds its locks for good):
                // wait for the new one.
                self.refresh(node, view)?;
                if !wait::pause(backoff, self.waiting).await {
                    return Err(IndexError::RetrainingTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                    });
                }
                return Ok(None);
            }
            if seen.is_locked() && node.tag != 0 && seen.owner() == node.tag {
                // Held by this compute node although this thread holds the stripe: a lock a
                // broken operation left, which the store recovers under this stripe.
                op.wait_unstriped = true;
                return Ok(None);
            }
            if seen.is_locked() {
                if !wait::pause(backoff, self.waiting).await {
                    return Err(IndexError::LockTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                        leaf,
                    });
                }
            } else {
                self.refresh(node, view)?;
            }
            return Ok(None);
        }
        let held = expected.locked_by(node.tag);
        leaf_store::ghost::take_lock(lt_addr);
        let mut locked = Locked {
            slot: slot as u64,
            record: view.record,
            layout: view.layout,
            leaf,
            lt_addr,
            lt_now: held,
            chain: Vec::new(),
            // Not read: what the view says, until a write that needs it confirms it.
            header: view.header,
            confirmed: false,
            handovers: 0,
        };
        let check = {
            #[cfg(loom)]
            {
                self.caches.broken.writer_trust != super::broken::WriterTrust::ForeseenUnchecked
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        if claimed {
            // The record is as the view read it: its chain is the record's (as the split's own
            // claim would have shown), and the slot after the view's last is this write's.
            locked.confirmed = true;
            let claimed_slot = view.header.slot_use() + 1;
            op.preclaimed = Some((view.record, view.layout, claimed_slot));
            if claimed_slot == self.caches.config.retrain_threshold {
                // Queued by the claim, whether a split uses the slot or not.
                self.request_retraining(node, slot as u64);
            }
        } else if foresee && !check {
            locked.confirmed = true;
        }
        // The lock is held from here: every error releases it (or says it may remain).
        let contents = match self.decode_leaves(&node.layout, &chain) {
            Ok(Some(contents)) => {
                if let Some(full) = &node.full {
                    let delta = node.layout.delta() as usize;
                    for (entry, leaf) in chain.iter().zip(&contents) {
                        full.set(entry.leaf_num(), leaf.len() >= delta);
                    }
                }
                contents
            }
            Ok(None) => {
                // Torn: damage under the lock, unless the view is stale and the leaf no longer
                // ours; the header says which.
                match self.confirm_chain(node, view, slot, &mut locked).await {
                    Ok(true) => return Ok(Some(locked)),
                    Ok(false) => {
                        self.release(locked.lock_ref())?;
                        return Ok(None);
                    }
                    Err(e) => return Err(self.release_after(locked.lock_ref(), e)),
                }
            }
            Err(e) => return Err(self.release_after(locked.lock_ref(), e)),
        };
        locked.chain = chain.into_iter().zip(contents).collect();
        Ok(Some(locked))
    }

    /// Makes sure the locked chain is the record's chain as it stands (the lock batch trusts the
    /// view's, and the leaves' claims say whether that is enough for a given write; ARCHITECTURE
    /// §6, "Writes"): READs the header; the same as the view's, nothing changed the record since
    /// the view was read, and `chain` (the view's) is current; otherwise the tables and the chain
    /// are read again under the lock. Fills `locked`'s chain and header. `false`: the record no
    /// longer has this chain (it was replaced) — let go and start over.
    pub(super) async fn confirm_chain(
        &mut self,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        locked: &mut Locked,
    ) -> Result<bool, IndexError> {
        // The view's chain, which the header can vouch for (a lock handed over carries the chain
        // of the view its first holder used, which may be another).
        let chain = match view.chain(locked.leaf) {
            Some(chain) if view.record == locked.record => chain,
            _ => {
                let read = self
                    .reread_locked_chain(node, view, slot, locked.leaf, locked)
                    .await?;
                return self.confirmed_from(read, locked);
            }
        };
        let words = self
            .read_batch(&node.layout, &chain, &[view.record])
            .await?;
        let header = ModelHeader::from_raw(words[0]);
        let read = if header == view.header {
            locked.header = header;
            self.decode_leaves(&node.layout, &chain)
                .map(|contents| Some((chain, contents)))
        } else {
            self.reread_locked_chain(node, view, slot, locked.leaf, locked)
                .await
        }?;
        self.confirmed_from(read, locked)
    }

    /// Installs a confirmed chain in `locked` (see [`Self::confirm_chain`]).
    #[allow(clippy::type_complexity)]
    fn confirmed_from(
        &mut self,
        read: Option<(ChainEntries, Option<Vec<Leaf>>)>,
        locked: &mut Locked,
    ) -> Result<bool, IndexError> {
        let Some((entries, contents)) = read else {
            return Ok(false);
        };
        let Some(contents) = contents else {
            // Under the lock nothing writes these leaves: a failed checksum is damage.
            return Err(LeafStoreError::TornLeaf {
                leaf_num: entries[0].leaf_num(),
            }
            .into());
        };
        locked.chain = entries.into_iter().zip(contents).collect();
        locked.confirmed = true;
        Ok(true)
    }

    /// Gives back the SLT slot a foreseeing claim took (the slot after `view`'s header's last)
    /// when the write could not lock: marked freed (best effort, as a split that fails does).
    fn give_back_claim(&mut self, view: &SlotView) {
        self.mark_slot_freed(view.record, view.layout, view.header.slot_use() + 1);
    }

    /// The record changed since the view was built (another chain split, or ours did). We hold
    /// the lock, so our chain is stable now: read the tables ourselves (not the cell's view, which
    /// may predate our lock), install them, and re-read the chain. `None` if the record no longer
    /// has this chain (it was replaced).
    #[allow(clippy::type_complexity)]
    async fn reread_locked_chain(
        &mut self,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        leaf: u64,
        locked: &mut Locked,
    ) -> Result<Option<(ChainEntries, Option<Vec<Leaf>>)>, IndexError> {
        self.write_rereads += 1;
        let fresh = self.fetch_view(node, view)?;
        let chain = (fresh.record == view.record)
            .then(|| fresh.chain(leaf))
            .flatten();
        if let Some(cell) = node.cell(slot as u64) {
            self.install(node, cell, view, fresh);
        }
        let Some(chain) = chain else {
            return Ok(None);
        };
        let words = self
            .read_batch(&node.layout, &chain, &[view.record])
            .await?;
        locked.header = ModelHeader::from_raw(words[0]);
        let contents = self.decode_leaves(&node.layout, &chain)?;
        Ok(Some((chain, contents)))
    }

    /// Applies `outcome` to the locked chain: writes in the order that keeps concurrent readers
    /// correct, then releases the lock or hands it to a waiting sibling thread.
    pub(super) async fn commit(
        &mut self,
        op: &mut WriteOp,
        node: &NodeCache,
        mut locked: Locked,
        outcome: Outcome,
        stripe: &Stripe,
        held_slot: &mut Option<Box<HeldLock>>,
    ) -> Result<Committed, IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        let hand_over = stripe.waiting.load(Ordering::Acquire) > 0
            && locked.handovers < self.caches.config.max_handovers;
        // A leaf rewritten in place goes through the redo leaf when it is longer than a packet.
        let redo = if matches!(outcome, Outcome::Unchanged(_)) {
            None
        } else {
            match self.redo_leaf(op, node) {
                Ok(redo) => redo,
                Err(e) => return Err(self.release_after(locked.lock_ref(), e)),
            }
        };
        // What this write leaves full or not, for the next insert's guess.
        if let Some(full) = &node.full {
            match &outcome {
                Outcome::Rewrite { pos, leaf, .. } => {
                    full.set(locked.chain[*pos].0.leaf_num(), leaf.len() as u64 >= delta);
                }
                Outcome::Split { pos, .. } => full.set(locked.chain[*pos].0.leaf_num(), false),
                Outcome::Unchanged(_) | Outcome::Unlink { .. } => {}
            }
        }
        let result = match outcome {
            Outcome::Unchanged(result) => {
                self.finish(op, &mut locked, Vec::new(), None, hand_over, held_slot)
                    .await?;
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
                    op,
                    &mut locked,
                    vec![(layout.leaf_addr(leaf_num), bytes)],
                    redo.map(|leaf| layout.leaf_addr(leaf)),
                    hand_over,
                    held_slot,
                )
                .await?;
                result
            }
            // Structural changes are rare and their futures large: boxed, so a rewrite's future
            // (the common case, moved on every call) stays small.
            Outcome::Unlink { result, pos } => {
                Box::pin(self.unlink(op, node, &mut locked, pos, redo, hand_over, held_slot))
                    .await?;
                result
            }
            Outcome::Split {
                result,
                pos,
                lower,
                upper,
                moved,
            } => match Box::pin(self.split(
                op,
                node,
                &mut locked,
                pos,
                lower,
                (upper, moved),
                redo,
                hand_over,
                held_slot,
            ))
            .await?
            {
                SplitEnd::Done => result,
                SplitEnd::SltFull => return Ok(Committed::SltFull),
                SplitEnd::Stale => return Ok(Committed::Stale(Box::new(locked))),
            },
        };
        Ok(Committed::Done(result))
    }

    /// Writes `writes` — leaves rewritten in place, through the `redo` leaf if there is one
    /// (`leaf_store::redo`) — in order, then releases the lock, or leaves it to a waiting
    /// sibling. A failed batch is repeated with the unlock (see [`release`]).
    pub(super) async fn finish(
        &mut self,
        op: &mut WriteOp,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>)>,
        redo: Option<RemoteAddr>,
        hand_over: bool,
        held_slot: &mut Option<Box<HeldLock>>,
    ) -> Result<(), IndexError> {
        let lock = locked.lock_ref();
        // A slot an insert claimed foreseeing a split that did not come: marked freed here.
        let unused = match op.preclaimed {
            Some((record, layout, slot)) if record == locked.record => {
                op.preclaimed = None;
                Some(leaf_store::settle::unused_mark(record, layout, slot))
            }
            _ => None,
        };
        let unlock = batch::Unlock {
            entry: lock.held,
            fenced: false,
        };
        let ran = self
            .end_write(
                &op.value,
                lock,
                !hand_over,
                unlock,
                |batch| {
                    for (at, bytes) in &writes {
                        leaf_store::redo::in_place(batch, *at, bytes, redo, false);
                    }
                },
                |batch| {
                    if let Some((at, freed)) = &unused {
                        batch.enter(Step::FreedMark);
                        batch.push(Verb::write(*at, freed));
                    }
                },
            )
            .await;
        if !ran?.released {
            *held_slot = Some(locked.hand_over());
        }
        Ok(())
    }
}

/// The keys trained leaf `owner`'s chain serves in `view`'s record, inclusive
/// ([`leaf_store::chain_range`]), given its pivot and the next one (`None` past the last chain).
fn chain_range(view: &SlotView, owner: u64, pivot: u64, next: Option<u64>) -> (u64, u64) {
    let next = next.filter(|_| owner + 1 < view.leaves());
    leaf_store::chain_range((view.first_key, view.last_key), owner == 0, pivot, next)
}

/// The claim a leaf at chain position `pos` takes when it is written: from its own claim's start
/// (the chain's start, `range.0`, if no leaf before it claims anything) to just below the next
/// claiming leaf's start (the chain's end, `range.1`, if none follows). So a leaf that another
/// left unclaimed (an unlinked synonym, a leaf a retraining dropped) gives its keys to the
/// claiming leaf before it — no other leaf can claim them: those that leave a chain are
/// unclaimed first (ARCHITECTURE §4, "Claims").
fn claim_at(chain: &[(LeafTableEntry, Leaf)], pos: usize, range: (u64, u64)) -> (u64, u64) {
    let lo = match chain[..pos].iter().any(|(_, l)| l.claim().is_some()) {
        false => range.0,
        true => chain[pos].1.claim().map_or(range.0, |c| c.0),
    };
    let hi = chain[pos + 1..]
        .iter()
        .find_map(|(_, l)| l.claim())
        .map_or(range.1, |(next, _)| next.saturating_sub(1));
    (lo, hi)
}

/// What `change` does to a chain (sorted across its leaves) that serves the keys `range`
/// (inclusive) of its record.
fn apply(
    chain: &[(LeafTableEntry, Leaf)],
    key: u64,
    change: Change,
    delta: u64,
    range: (u64, u64),
) -> Outcome {
    let found = chain
        .iter()
        .enumerate()
        .find_map(|(pos, (_, leaf))| leaf.get(key).map(|v| (pos, v)));
    // A rewritten leaf keeps claiming what it claims, grown over keys no leaf claims.
    let reclaimed = |pos: usize, mut leaf: Leaf| {
        if leaf.claim().is_some() {
            leaf.set_claim(Some(claim_at(chain, pos, range)));
        }
        leaf
    };
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
                leaf: reclaimed(pos, leaf),
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
                    leaf: reclaimed(pos, leaf),
                }
            }
        }
        (Change::Insert(value) | Change::Upsert(value), None) => {
            // The last claiming leaf whose claim starts at or below `key`, else the first claiming
            // leaf (its claim grows down to the chain's start), else the trained leaf (claiming
            // the whole chain's range again).
            let pos = chain
                .iter()
                .rposition(|(_, leaf)| leaf.claim().is_some_and(|(lo, _)| lo <= key))
                .or_else(|| chain.iter().position(|(_, leaf)| leaf.claim().is_some()))
                .unwrap_or(0);
            let (lo, hi) = claim_at(chain, pos, range);
            let mut leaf = chain[pos].1.clone();
            let entries = leaf.entries_mut();
            let at = entries.partition_point(|e| e.0 < key);
            entries.insert(at, (key, value));
            if entries.len() as u64 <= delta {
                return Outcome::Rewrite {
                    result: true,
                    pos,
                    leaf: leaf.with_claim(lo, hi),
                };
            }
            let upper = entries.split_off(entries.len() / 2);
            let middle = upper[0].0;
            // Until the split leaf's shrink lands it still claims the upper half, so the new
            // leaf, which claims it from its first WRITE, must hold the same: the moved keys
            // only. A new key of the upper half joins it after the shrink (ARCHITECTURE §6).
            let moved = upper.binary_search_by_key(&key, |e| e.0).is_ok().then(|| {
                let keys = upper.iter().copied().filter(|e| e.0 != key).collect();
                Leaf::from_entries(keys)
                    .unwrap_or_default()
                    .with_claim(middle, hi)
            });
            Outcome::Split {
                result: true,
                pos,
                lower: leaf.with_claim(lo, middle - 1),
                upper: Leaf::from_entries(upper)
                    .unwrap_or_default()
                    .with_claim(middle, hi),
                moved,
            }
        }
    }
}

/// The change a write makes to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
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
        /// The new leaf's first image when the new key is in the upper half: the upper half
        /// without it (`upper` is written after the split leaf's shrink).
        moved: Option<Leaf>,
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
    /// The header as last known: read (or, for a lock handed over, as the last holder left it)
    /// when `confirmed`; the view's otherwise.
    pub(super) header: ModelHeader,
    /// Whether `chain` is known to be the record's chain as it stands: read after a header READ
    /// that agreed with the view, or re-read from the tables, or handed over. Until then a write
    /// may trust only what the leaves' claims prove (`trusted_unconfirmed`).
    pub(super) confirmed: bool,
    pub(super) handovers: u32,
}

impl Locked {
    /// The lock, with the chain as last written, for the next local writer of this leaf.
    pub(super) fn hand_over(&mut self) -> Box<HeldLock> {
        leaf_store::ghost::hand_lock(self.lt_addr);
        Box::new(HeldLock {
            record: self.record,
            slot: self.slot,
            leaf: self.leaf,
            lt_addr: self.lt_addr,
            lt_now: self.lt_now,
            chain: std::mem::take(&mut self.chain),
            header: self.header,
            confirmed: self.confirmed,
            handovers: self.handovers,
        })
    }
}

/// Whether `outcome`, computed on a locked chain that came from the view and was not confirmed
/// (no header read), is right whatever the record's chain is now (ARCHITECTURE §6, "Writes").
/// Under the lock nothing changes the chain, and no leaf of a stale chain can have moved to
/// another (leaves change chains only through a retraining, whose freeze this lock excludes):
/// every leaf read either is in the chain or left it unclaimed. So a leaf that claims `key`
/// answers for it (R1), and rewriting it in place is right as long as its claim stays as it is
/// (a claim grown from a stale chain could cover keys of a leaf the chain lacks). A split is
/// checked by the header its slot claim returns (`Client::split`); an unlink, a grown claim and
/// a key no leaf claims need the header first.
fn trusted_unconfirmed(chain: &[(LeafTableEntry, Leaf)], key: u64, outcome: &Outcome) -> bool {
    let claimed = |pos: usize| chain.get(pos).is_some_and(|(_, l)| l.claims(key));
    match outcome {
        // The leaf that claims the key must say what the outcome says: present (an insert of a
        // key held) or absent (an update or delete of a key no leaf holds). A leaf of a stale
        // chain that holds the key without claiming it — a stray a recovery withdrew — says
        // nothing.
        Outcome::Unchanged(_) => {
            let held = chain.iter().any(|(_, l)| l.get(key).is_some());
            chain
                .iter()
                .find(|(_, l)| l.claims(key))
                .is_some_and(|(_, l)| l.get(key).is_some() == held)
        }
        Outcome::Rewrite { pos, leaf, .. } => {
            claimed(*pos)
                && chain
                    .get(*pos)
                    .is_some_and(|(_, l)| l.claim() == leaf.claim())
        }
        Outcome::Split { .. } => true,
        Outcome::Unlink { .. } => false,
    }
}

/// How a commit ended.
pub(super) enum Committed {
    Done(bool),
    /// A split found the record changed since the view its unconfirmed chain came from: nothing
    /// written, the lock (handed back) still held, the claimed SLT slot kept; confirm the chain
    /// and compute the write again.
    Stale(Box<Locked>),
    /// The slot's SLT is full: nothing changed, lock released; wait for retraining.
    SltFull,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(leaves: Vec<Leaf>) -> Vec<(LeafTableEntry, Leaf)> {
        leaves
            .into_iter()
            .enumerate()
            .map(|(i, leaf)| (LeafTableEntry::new(i as u64).unwrap_or_default(), leaf))
            .collect()
    }

    fn full_leaf(keys: impl Iterator<Item = u64>, lo: u64, hi: u64) -> Leaf {
        Leaf::from_entries(keys.map(|k| (k, k + 1)).collect())
            .expect("sorted")
            .with_claim(lo, hi)
    }

    /// What `leaf` says about `key`: its state if it claims it.
    fn covered(leaf: &Leaf, key: u64) -> Option<Option<u64>> {
        leaf.claims(key).then(|| leaf.get(key))
    }

    /// Every key `leaf` claims has the same state in `other` (which claims it too).
    fn agree_on_claim(leaf: &Leaf, other: &Leaf) {
        let (lo, hi) = leaf.claim().expect("claimed");
        for key in lo..=hi.min(lo + 1_000) {
            let a = covered(leaf, key);
            assert!(a.is_some(), "{key}");
            assert_eq!(a, covered(other, key), "key {key}");
        }
    }

    #[test]
    fn a_split_whose_new_key_goes_up_first_writes_the_new_leaf_as_the_split_leaf_holds_it() {
        let old = full_leaf((0..16).map(|i| 10 * i), 0, 199);
        for key in [75u64, 151, 155, 199] {
            let Outcome::Split {
                lower,
                upper,
                moved,
                ..
            } = apply(
                &chain(vec![old.clone()]),
                key,
                Change::Insert(7),
                16,
                (0, 199),
            )
            else {
                panic!("no split for {key}");
            };
            let (lo, mid) = lower.claim().expect("lower claims");
            let (m, hi) = upper.claim().expect("upper claims");
            assert_eq!((lo, mid + 1, hi), (0, m, 199), "key {key}");
            // The final images: the key is where its claim is.
            let holder = if key < m { &lower } else { &upper };
            assert_eq!(covered(holder, key), Some(Some(7)));
            match moved {
                // The first image agrees with the split leaf, which still claims the upper half.
                Some(moved) => {
                    assert!(key >= m, "key {key} went down, yet a first image");
                    assert_eq!(moved.claim(), upper.claim());
                    agree_on_claim(&moved, &old);
                }
                None => {
                    assert!(key < m, "key {key} went up without a first image");
                    agree_on_claim(&upper, &old);
                }
            }
        }
    }

    #[test]
    fn an_unconfirmed_chain_is_trusted_only_where_a_claiming_leaf_vouches() {
        // A stale chain: a stray that still holds 360 but claims nothing (a recovery withdrew its
        // claim), before the leaf that claims 350..=399 and no longer holds 360.
        let stray = Leaf::from_entries(vec![(360, 1)]).expect("sorted");
        let claiming = full_leaf([350u64, 370].into_iter(), 350, 399);
        let leaves = chain(vec![
            full_leaf([300u64].into_iter(), 300, 349),
            stray,
            claiming,
        ]);
        // Insert 360: `apply` finds it in the stray; only the claiming leaf can say it is absent.
        let outcome = apply(&leaves, 360, Change::Insert(9), 16, (300, 399));
        assert!(matches!(outcome, Outcome::Unchanged(false)));
        assert!(!trusted_unconfirmed(&leaves, 360, &outcome));
        // Insert 370, which the claiming leaf holds: trusted.
        let outcome = apply(&leaves, 370, Change::Insert(9), 16, (300, 399));
        assert!(trusted_unconfirmed(&leaves, 370, &outcome));
        // A rewrite whose claim would grow (a key past every claim of a chain that may lack the
        // next leaf) is not; one inside the claim, unchanged, is.
        let short = chain(vec![full_leaf([300u64].into_iter(), 300, 349)]);
        let outcome = apply(&short, 360, Change::Insert(9), 16, (300, 499));
        assert!(!trusted_unconfirmed(&short, 360, &outcome));
        let outcome = apply(&short, 340, Change::Insert(9), 16, (300, 349));
        assert!(trusted_unconfirmed(&short, 340, &outcome));
    }

    #[test]
    fn a_rewrite_grows_its_claim_over_keys_no_leaf_claims() {
        // Leaf 1 (an unlinked synonym's keys, 100..=149) claims nothing; leaf 2 claims 150..
        let leaves = vec![
            full_leaf([10u64, 20].into_iter(), 0, 99),
            Leaf::new(),
            full_leaf([160u64].into_iter(), 150, 300),
        ];
        let Outcome::Rewrite { pos, leaf, .. } =
            apply(&chain(leaves), 120, Change::Insert(1), 16, (0, 300))
        else {
            panic!("no rewrite");
        };
        assert_eq!((pos, leaf.claim()), (0, Some((0, 149))));
        // Nothing claimed before: the first claiming leaf takes the chain's start.
        let leaves = vec![Leaf::new(), full_leaf([160u64].into_iter(), 150, 300)];
        let Outcome::Rewrite { pos, leaf, .. } =
            apply(&chain(leaves), 5, Change::Insert(1), 16, (0, 300))
        else {
            panic!("no rewrite");
        };
        assert_eq!((pos, leaf.claim()), (1, Some((0, 300))));
    }
}
