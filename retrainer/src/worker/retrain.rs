//! One retraining: snapshot, train, shadow redirection (freeze, drain, retire, swap).

use super::*;
use crate::sync::step;

impl<E: Endpoint> Retrainer<E> {
    /// Retrains `slot` now (whether queued or not) — shadow redirection:
    /// 1. read the record and snapshot its chains; train the new record beside the old one and
    ///    write it (unreferenced) into free model-region space;
    /// 2. wait, without freezing, until no leaf of the slot has stayed locked throughout (a lock
    ///    whose holder died would otherwise freeze every writer of the slot for the drain limit,
    ///    again and again): [`RetrainError::LeafLocked`] names it;
    /// 3. freeze the old record: its header's locked flag, then every LT lock, taken with the
    ///    freeze's owner tag as writers let go of them (a writer's lock CAS then fails, and the
    ///    record stays locked so for good once replaced);
    /// 4. snapshot again: if any chain changed since step 1 (inserts, splits, deletes that landed
    ///    meanwhile), rebuild the record from the frozen state, which carries every leaf created
    ///    meanwhile (as a trained leaf);
    /// 5. retire the old record, then point the slot at the new one, clear the slot's queued bit.
    ///
    /// Readers are never blocked: the old record stays readable until the slot table moves. If a
    /// step fails after the freeze, the freeze is lifted (best effort; otherwise the next worker's
    /// recovery does it). Steps 1–4 are [`Retrainer::prepare_swap`], step 5
    /// [`Retrainer::complete_swap`].
    pub fn retrain_slot(&mut self, slot: u64) -> Result<Option<RetrainReport>, RetrainError> {
        match self.prepare_swap(slot)? {
            Some(prepared) => self.complete_swap(prepared).map(Some),
            None => Ok(None),
        }
    }

    /// Steps 1–4 of [`Retrainer::retrain_slot`]: on return the old record is frozen and the new
    /// one written beside it; `None` if the slot holds no key (nothing to do, nothing frozen).
    /// Writers of the slot wait until [`Retrainer::complete_swap`] runs (or, should this worker
    /// stop first, until the next worker's recovery lifts the freeze). For callers that act
    /// between the two halves — models of the swap, tests.
    pub fn prepare_swap(&mut self, slot: u64) -> Result<Option<PreparedSwap>, RetrainError> {
        let prepared = self.prepare(slot);
        match &prepared {
            Ok(Some(_)) => {}
            Ok(None) => self.give_back_provisional(),
            Err(_) => {
                // Nothing references what this attempt wrote: the slot table never moved.
                self.settle_after_error();
                self.give_back_provisional();
            }
        }
        prepared
    }

    /// Step 5 of [`Retrainer::retrain_slot`]: retire the frozen record, point the slot at the new
    /// one, clear the slot's queued bit.
    pub fn complete_swap(&mut self, prepared: PreparedSwap) -> Result<RetrainReport, RetrainError> {
        let freed_leaves = prepared.freed_leaves.clone();
        // The leaves the old record alone names are this worker's from the moment the swap may
        // redirect the slot until they are on its free list (told to the ghost state: a worker
        // that dies in between loses them to the orphan sweep, as it loses its free list).
        for &leaf in &freed_leaves {
            leaf_store::ghost::take(&self.layout, leaf);
        }
        let done = self.swap(prepared);
        let node = self.layout.node();
        if done.is_err() {
            match self.settle_after_error() {
                // The slot still names the old record: the new one is unreferenced, the old
                // record names its leaves again.
                Some(recover::Settled::RolledBack(_)) => {
                    self.give_back_provisional();
                    for &leaf in &freed_leaves {
                        leaf_store::ghost::put(node, leaf);
                    }
                }
                // The swap was finished: the leaves the old record alone held are free.
                Some(recover::Settled::Retired(_)) => {
                    self.provisional.clear();
                    for leaf in freed_leaves {
                        if !self.free_leaves.contains(&leaf) {
                            self.free_leaves.push(leaf);
                        }
                        leaf_store::ghost::put(node, leaf);
                    }
                }
                // It cannot be told: keep everything (a leaf no record names any more is the
                // orphan sweep's).
                None => {
                    self.provisional.clear();
                    for &leaf in &freed_leaves {
                        leaf_store::ghost::forget(node, leaf);
                    }
                }
            }
        } else {
            self.provisional.clear();
        }
        done
    }

    /// Returns the model-region space this attempt allocated to the free list.
    fn give_back_provisional(&mut self) {
        for (offset, bytes) in std::mem::take(&mut self.provisional) {
            self.free.release(offset, bytes);
        }
    }

    /// Returns one provisional allocation (a pre-built record that will not be used).
    fn give_back(&mut self, at: u64) {
        if let Some(i) = self
            .provisional
            .iter()
            .position(|&(offset, _)| offset == at)
        {
            let (offset, bytes) = self.provisional.swap_remove(i);
            self.free.release(offset, bytes);
        }
    }

    fn prepare(&mut self, slot: u64) -> Result<Option<PreparedSwap>, RetrainError> {
        let started = Instant::now();
        if slot >= self.layout.slot_capacity() {
            return Err(RetrainError::Layout(LeafStoreError::InvalidConfig(
                format!("slot {slot} does not exist"),
            )));
        }
        // A freeze an earlier failed attempt could not lift is settled before the in-flight word
        // is used again (otherwise nothing would name that record any more).
        if let Some(recover::Settled::RolledBack(other)) = self.settle_in_flight()?
            && other != slot
        {
            self.defer(other);
        }
        let old_addr = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
        let old = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
        // A slot put off for a lock held throughout (see below) is checked with one READ first.
        if let Some(&leaf) = self.stuck.get(&slot) {
            if self
                .locked_leaves(&old, old_addr)?
                .binary_search(&leaf)
                .is_ok()
            {
                return Err(RetrainError::LeafLocked { slot, leaf });
            }
            self.stuck.remove(&slot);
        }
        // The first snapshot is read while writers work: its tables can show a link before its
        // header shows the slot, or a split half done (a key in two leaves), and a leaf being
        // rewritten can stay torn through every re-read. Such a snapshot is discarded and the
        // record is built under the freeze instead, where no writer is inside.
        let snapshot = match self.snapshot(&old) {
            Ok(chains) => Some(chains),
            Err(RetrainError::Layout(
                LeafStoreError::CorruptRecord { .. } | LeafStoreError::TornLeaf { .. },
            )) => None,
            Err(e) => return Err(e),
        };
        step("retrain: snapshot read");
        let mut train_time = Duration::ZERO;
        // Pre-build beside the old record.
        let built = match &snapshot {
            Some(chains) => self.build(&old, chains, &mut train_time),
            None => Err(RetrainError::Train("inconsistent snapshot".into())),
        };
        let prebuilt = match built {
            Ok(Some(built)) => {
                let written = self.write_built(built)?;
                step("retrain: record written");
                Some(written)
            }
            Ok(None) => {
                self.stats.skipped_empty += 1;
                self.clear_queued(slot)?;
                return Ok(None);
            }
            Err(RetrainError::Train(_)) => None,
            Err(e) => return Err(e),
        };

        // A lock held since before the freeze by a writer that died would hold every writer of
        // the slot off for the whole drain limit: do not freeze until each lock seen has been
        // released at least once.
        if let Some(leaf) = self.held_throughout(&old, old_addr)? {
            self.stuck.insert(slot, leaf);
            return Err(RetrainError::LeafLocked { slot, leaf });
        }

        // Freeze and drain; the in-flight word names the record until it is retired.
        let frozen_at = Instant::now();
        let locked = ModelHeader::new(0).locked().raw();
        self.ep.write_word(self.ring.in_flight(), old_addr.pack())?;
        step("retrain: in flight");
        self.set_flag(old_addr, locked)?;
        let stuck = self.freeze_leaves(&old, old_addr)?;
        step("retrain: frozen");
        if let Some(leaf) = stuck {
            self.unfreeze(&old, old_addr)?;
            self.stats.drain_timeouts += 1;
            self.stuck.insert(slot, leaf);
            return Err(RetrainError::LeafLocked { slot, leaf });
        }
        let frozen = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
        let frozen_chains = self.snapshot(&frozen)?;
        let carry_over = {
            #[cfg(loom)]
            {
                self.broken.carry_over
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        let changed = snapshot
            .as_ref()
            .is_none_or(|s| !same_chains(s, &frozen_chains));
        let (written, rebuilt) = match prebuilt {
            Some(written) if !changed || !carry_over => (written, false),
            unusable => {
                if let Some(written) = unusable {
                    self.give_back(written.lower_at);
                    if let Some(upper) = written.split {
                        self.give_back(upper.at);
                    }
                }
                // Under the freeze no writer is inside: the chains are consistent.
                let Some(built) = self.build(&frozen, &frozen_chains, &mut train_time)? else {
                    // Everything was deleted meanwhile: keep the old record, unfrozen.
                    self.unfreeze(&old, old_addr)?;
                    self.clear_queued(slot)?;
                    self.stats.skipped_empty += 1;
                    return Ok(None);
                };
                (self.write_built(built)?, true)
            }
        };
        // Under the freeze the chains are final. Their empty leaves, which the new record drops,
        // give up their claims now, before the swap lets writers give their keys to the leaf
        // before them (ARCHITECTURE §4, "Claims"). Should this retraining stop before its swap,
        // the old record links them unclaimed, which its writers handle (a leaf that claims
        // nothing gives its keys to the claiming leaf before it, or is claimed again).
        let delta = self.layout.delta();
        for (entry, leaf) in frozen_chains.iter().flatten() {
            if leaf.is_empty() && leaf.claim().is_some() {
                let n = entry.leaf_num();
                let bytes = Leaf::new().encode(n, delta)?;
                self.ep.write(self.layout.leaf_addr(n), &bytes)?;
            }
        }
        // They and the leaves the old record's freed SLT slots name become free with the swap.
        let freed_leaves = frozen_chains
            .iter()
            .flatten()
            .filter(|(_, l)| l.is_empty())
            .map(|(e, _)| e.leaf_num())
            .chain(frozen.slt.iter().filter_map(|e| e.freed_leaf()))
            .collect();
        Ok(Some(PreparedSwap {
            slot,
            freed_leaves,
            old_addr,
            old_bytes: old.layout().total(),
            trained_before: old.lt.len() as u64,
            trained_after: written.trained_leaves,
            segments: written.segments,
            synonyms_absorbed: frozen_chains.iter().map(|c| c.len() as u64 - 1).sum(),
            keys: frozen_chains
                .iter()
                .flatten()
                .map(|(_, l)| l.len() as u64)
                .sum(),
            new_at: written.lower_at,
            split: written.split,
            rebuilt,
            train_time,
            frozen_at,
            started,
        }))
    }

    fn swap(&mut self, prepared: PreparedSwap) -> Result<RetrainReport, RetrainError> {
        let PreparedSwap {
            slot,
            old_addr,
            new_at,
            ..
        } = prepared;
        // A split is journaled before anything a compute node can see changes: once its new
        // slot is published, the split can only be finished, never undone (compute nodes may
        // already write through the new slot), so a worker that stops after that point leaves
        // the next one what it needs to finish: the journal.
        if let Some(split) = prepared.split {
            self.ep
                .write_word(self.ring.split_record(), self.layout.at(split.at).pack())?;
            self.ep
                .write_word(self.ring.split_lower(), self.layout.at(new_at).pack())?;
            self.ep.write_word(self.ring.split_slot(), split.slot + 1)?;
            step("retrain: split journaled");
        }
        // Retire, then publish a split's new slot, then redirect, then unqueue. Retiring first
        // is what keeps a compute node that still caches the old record correct: once the slot
        // names the new record (or a new slot takes part of its keys), other compute nodes split
        // leaves that only the new records link, and a reader of the old record must already see
        // "retired" (its header is otherwise unchanged) and check the slot table — its record
        // address, and the slot count, which shows it a published split. Publishing before the
        // redirect keeps every key routable throughout: until the redirect, the old record
        // (frozen, so nobody writes through it) still serves the keys below the split point.
        if self.retire_first() {
            self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
            step("retrain: retired");
            if let Some(split) = prepared.split {
                self.publish(split)?;
                step("retrain: published");
            }
            self.ep.write_word(
                self.layout.slot_entry_addr(slot),
                self.layout.at(new_at).pack(),
            )?;
            step("retrain: redirected");
        } else {
            self.ep.write_word(
                self.layout.slot_entry_addr(slot),
                self.layout.at(new_at).pack(),
            )?;
            step("retrain: redirected");
            self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
            step("retrain: retired");
            if let Some(split) = prepared.split {
                self.publish(split)?;
                step("retrain: published");
            }
        }
        if prepared.split.is_some() {
            self.ep.write_word(self.ring.split_slot(), 0)?;
            self.stats.splits += 1;
        }
        self.push_retired(old_addr.offset(), prepared.old_bytes);
        // Safe to hand out at once, as a delete's unlinked leaf always was: the old record is
        // retired, so a compute node reading these leaves through it reloads whatever it read.
        self.free_leaves
            .extend(prepared.freed_leaves.iter().copied());
        for &leaf in &prepared.freed_leaves {
            leaf_store::ghost::put(self.layout.node(), leaf);
        }
        self.clear_queued(slot)?;
        step("retrain: unqueued");
        self.ep.write_word(self.ring.in_flight(), 0)?;
        self.backoff.remove(&slot);
        self.stuck.remove(&slot);

        let report = RetrainReport {
            slot,
            trained_before: prepared.trained_before,
            trained_after: prepared.trained_after,
            synonyms_absorbed: prepared.synonyms_absorbed,
            keys: prepared.keys,
            segments: prepared.segments,
            split_into: prepared.split.map(|s| s.slot),
            rebuilt_under_freeze: prepared.rebuilt,
            train_time: prepared.train_time,
            frozen_time: prepared.frozen_at.elapsed(),
            total_time: prepared.started.elapsed(),
        };
        self.stats.retrains += 1;
        self.stats.rebuilt_under_freeze += u64::from(report.rebuilt_under_freeze);
        self.stats.keys_trained += report.keys;
        self.stats.train_nanos += report.train_time.as_nanos() as u64;
        self.stats.total_nanos += report.total_time.as_nanos() as u64;
        Ok(report)
    }

    /// After a failed step: lifts a freeze this worker left (or finishes retiring a record the
    /// slot no longer names), as a starting worker's recovery would. Best effort: if the
    /// transport is gone, the next worker's recovery does it.
    fn settle_after_error(&mut self) -> Option<recover::Settled> {
        let settled = self.settle_in_flight().ok().flatten();
        if let Some(recover::Settled::RolledBack(slot)) = settled {
            self.defer(slot);
        }
        settled
    }

    /// Whether the old record is retired before the slot table moves (always, outside loom
    /// builds; loom models switch it off to show the other order is caught).
    fn retire_first(&self) -> bool {
        #[cfg(loom)]
        {
            self.broken.retire_first
        }
        #[cfg(not(loom))]
        {
            true
        }
    }

    /// Reads every chain of `record` in key order: all leaves in one batch, torn ones re-read.
    pub(super) fn snapshot(&mut self, record: &ModelRecord) -> Result<Chains, RetrainError> {
        let chains = (0..record.lt.len())
            .map(|leaf| record.chain_entries(leaf))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|reason| LeafStoreError::CorruptRecord {
                slot: record.slot,
                reason,
            })?;
        let leaf_bytes = self.layout.leaf_bytes() as usize;
        let all: Vec<LeafTableEntry> = chains.iter().flatten().copied().collect();
        let mut buf = vec![0u8; all.len() * leaf_bytes];
        {
            let mut verbs: Vec<Verb<'_>> = all
                .iter()
                .zip(buf.chunks_exact_mut(leaf_bytes))
                .map(|(e, chunk)| Verb::read(self.layout.leaf_addr(e.leaf_num()), chunk))
                .collect();
            self.ep.batches(&mut verbs)?;
        }
        let mut leaves = Vec::with_capacity(all.len());
        for (e, chunk) in all.iter().zip(buf.chunks_exact(leaf_bytes)) {
            leaves.push(match Leaf::decode(e.leaf_num(), chunk) {
                Ok(leaf) => leaf,
                Err(LeafStoreError::TornLeaf { .. }) => {
                    read_leaf(&mut self.ep, &self.layout, e.leaf_num())?
                }
                Err(e) => return Err(e.into()),
            });
        }
        let mut leaves = leaves.into_iter();
        Ok(chains
            .into_iter()
            .map(|chain| {
                chain
                    .into_iter()
                    .map(|e| (e, leaves.next().unwrap_or_default()))
                    .collect()
            })
            .collect())
    }

    /// The new record for `old`'s chains: every non-empty leaf, in chain order, becomes a trained
    /// leaf (no data moves); `None` if the slot holds no key. Past the split bound
    /// ([`RetrainConfig::split_leaves`]) the leaves are cut in two at a leaf boundary: the lower
    /// half keeps the slot, its first key and serves up to the upper half's first key minus one;
    /// the upper half becomes the next slot id, serving up to the old record's last key.
    pub(super) fn build(
        &mut self,
        old: &ModelRecord,
        chains: &Chains,
        train_time: &mut Duration,
    ) -> Result<Option<Built>, RetrainError> {
        let leaves: Vec<&(LeafTableEntry, Leaf)> = chains
            .iter()
            .flatten()
            .filter(|(_, l)| !l.is_empty())
            .collect();
        if leaves.is_empty() {
            return Ok(None);
        }
        let Some((cut, new_slot)) = self.split_point(old, &leaves)? else {
            let lower =
                self.train_record(old.slot, old.first_key, old.last_key, &leaves, train_time)?;
            return Ok(Some(Built { lower, upper: None }));
        };
        let (low, high) = leaves.split_at(cut);
        let split_key = high[0].1.start().unwrap_or(0);
        let lower = self.train_record(old.slot, old.first_key, split_key - 1, low, train_time)?;
        let upper = self.train_record(new_slot, split_key, old.last_key, high, train_time)?;
        Ok(Some(Built {
            lower,
            upper: Some(upper),
        }))
    }

    /// Where to split `leaves` (non-empty, in key order) of `old`, and the new slot's id; `None`
    /// below the split bound or with the slot table full.
    fn split_point(
        &mut self,
        old: &ModelRecord,
        leaves: &[&(LeafTableEntry, Leaf)],
    ) -> Result<Option<(usize, u64)>, RetrainError> {
        let bound = self
            .config
            .split_leaves
            .unwrap_or(2 * self.layout.superblock().slot_leaves)
            .max(1);
        if leaves.len() as u64 <= bound {
            return Ok(None);
        }
        let count = self.ep.read_word(self.layout.slot_count_addr())?;
        if count >= self.layout.slot_capacity() {
            self.stats.slot_table_full += 1;
            return Ok(None);
        }
        // The upper half's first key must lie strictly inside the slot's range (slot 0's first
        // key is the node's first, so every key of a chain is at least the slot's first key).
        let cut = (leaves.len() / 2..leaves.len()).find(|&i| {
            let first = leaves[i].1.start().unwrap_or(0);
            first > old.first_key && first <= old.last_key
        });
        Ok(cut.map(|cut| (cut, count)))
    }

    /// A record for `slot` over `leaves` (non-empty, in key order), serving
    /// `[first_key, last_key]`.
    fn train_record(
        &mut self,
        slot: u64,
        first_key: u64,
        last_key: u64,
        leaves: &[&(LeafTableEntry, Leaf)],
        train_time: &mut Duration,
    ) -> Result<ModelRecord, RetrainError> {
        // Each leaf after the first is trained from the start of its claim, which becomes its
        // pivot: the record then routes to it exactly the keys it claims, and the model's
        // ownership guarantee (learned-model's `LeafModel`) holds for those pivots.
        let keys: Vec<Vec<u64>> = leaves
            .iter()
            .enumerate()
            .map(|(i, (_, l))| {
                let mut keys: Vec<u64> = l.entries().iter().map(|e| e.0).collect();
                if i > 0 {
                    keys[0] = l.start().unwrap_or(keys[0]);
                }
                keys
            })
            .collect();
        let started = Instant::now();
        let model =
            LeafModel::train(self.params, &keys).map_err(|e| RetrainError::Train(e.to_string()))?;
        *train_time += started.elapsed();
        let generation = self.generation;
        self.generation = (self.generation + 1) & self.layout.generation_mask();
        Ok(ModelRecord {
            header: ModelHeader::new(generation),
            slot,
            first_key,
            last_key,
            model,
            pivots: keys.iter().map(|k| k[0]).collect(),
            lt: leaves
                .iter()
                .map(|(e, _)| LeafTableEntry::new(e.leaf_num()).unwrap_or_default())
                .collect(),
            slt: leaf_store::unclaimed_slt(),
        })
    }

    /// Allocates and WRITEs what [`Self::build`] produced (unreferenced until the swap).
    fn write_built(&mut self, built: Built) -> Result<Written, RetrainError> {
        let mut written = Written {
            lower_at: 0,
            split: None,
            trained_leaves: 0,
            segments: 0,
        };
        for (i, record) in std::iter::once(built.lower).chain(built.upper).enumerate() {
            let bytes = record.encode();
            let at = self.allocate(bytes.len() as u64)?;
            self.ep.write(self.layout.at(at), &bytes)?;
            written.trained_leaves += record.lt.len() as u64;
            written.segments += record.model.segments().len() as u64;
            if i == 0 {
                written.lower_at = at;
            } else {
                written.split = Some(Split {
                    slot: record.slot,
                    at,
                    first_key: record.first_key,
                });
            }
        }
        Ok(written)
    }

    /// Makes a split's new slot routable: its slot-table entry, then the slot count (compute
    /// nodes READ the count before the entries below it). Idempotent.
    pub(super) fn publish(&mut self, split: Split) -> Result<(), RetrainError> {
        let mut entry = [0u8; 16];
        entry[..8].copy_from_slice(&self.layout.at(split.at).pack().to_le_bytes());
        entry[8..].copy_from_slice(&split.first_key.to_le_bytes());
        self.ep
            .write(self.layout.slot_entry_addr(split.slot), &entry)?;
        let count = self.ep.read_word(self.layout.slot_count_addr())?;
        if count <= split.slot {
            self.ep
                .write_word(self.layout.slot_count_addr(), split.slot + 1)?;
        }
        Ok(())
    }

    /// A trained leaf of `record` whose LT lock stayed held through every look within the
    /// drain limit (`None` as soon as each lock seen held has been seen free once).
    fn held_throughout(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
    ) -> Result<Option<u64>, RetrainError> {
        let deadline = Instant::now() + self.config.drain_limit;
        let mut stuck = self.locked_leaves(record, addr)?;
        while !stuck.is_empty() {
            if Instant::now() >= deadline {
                return Ok(stuck.first().copied());
            }
            pause();
            let now = self.locked_leaves(record, addr)?;
            stuck.retain(|leaf| now.binary_search(leaf).is_ok());
        }
        Ok(None)
    }

    /// The trained leaves of `record` whose LT lock a writer holds now, ascending (one READ).
    fn locked_leaves(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
    ) -> Result<Vec<u64>, RetrainError> {
        Ok(self
            .read_lt(record, addr)?
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_held_by_writer())
            .map(|(i, _)| i as u64)
            .collect())
    }
}

fn same_chains(a: &Chains, b: &Chains) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((e1, l1), (e2, l2))| e1.leaf_num() == e2.leaf_num() && l1 == l2)
        })
}

/// What [`Retrainer::build`] produced: the slot's new record and, for a split, the new slot's.
pub(super) struct Built {
    lower: ModelRecord,
    upper: Option<ModelRecord>,
}

/// Where [`Retrainer::write_built`] put a build.
pub(super) struct Written {
    lower_at: u64,
    split: Option<Split>,
    trained_leaves: u64,
    segments: u64,
}
