//! Starting a worker: attach to the pool and repair what a previous worker left half done.

use super::*;

/// How an unfinished retraining was settled (see [`Retrainer::settle_in_flight`]).
pub(super) enum Settled {
    /// The slot still named the old record: unfrozen, to be retrained again.
    RolledBack(u64),
    /// The slot had moved on: the old record is retired.
    Retired(u64),
}

impl<E: Endpoint> Retrainer<E> {
    /// A worker for the pool on `node`, reached through `ep`. Its generations go on from the
    /// newest record's. They wrap (after 2^22 retrainings, or sooner in a pool loaded with
    /// narrower ones), so a header word may repeat at a reused address: nothing relies on it
    /// not repeating, since a record's memory is reused only once no operation that could have
    /// read its address is still running (ARCHITECTURE §7, reclamation).
    ///
    /// One worker serves a pool at a time. If the previous one stopped in the middle of a
    /// retraining, this one finishes what the ring's in-flight word says was left: a record still
    /// referenced by its slot is unfrozen (and un-retired: the slot table never named the new
    /// record, so nothing used it) and the slot queued again; one already replaced is marked
    /// retired. Slots marked queued that no ring entry names are queued again.
    /// Model-region space no slot references (written but never swapped in, or retired but not
    /// reclaimed) is reused after the grace period, as if retired now. What was repaired is in
    /// [`Retrainer::recovery`].
    pub fn new(
        mut ep: E,
        node: MemoryNodeInfo,
        config: RetrainConfig,
    ) -> Result<Self, RetrainError> {
        let layout = Layout::attach(&mut ep, node)?;
        let params = ModelParams::new(layout.epsilon(), layout.delta())
            .map_err(|e| RetrainError::Train(e.to_string()))?;
        let ring = RingLayout::new(layout);
        let head = ep.read_word(ring.head())?;
        // Every record's fixed part: the generations now, the extents for the recovery.
        let table = read_slot_table(&mut ep, &layout)?;
        let fixed = record_prefixes(&mut ep, &table, RECORD_FIXED_BYTES as usize)?;
        let generation = newest_generation(&fixed);
        // The retirement epoch: kept in the pool, so that records retired before a restart are
        // stamped with an epoch compute nodes have not yet announced they are past.
        let members = leaf_store::members::MemberTable::new(&layout);
        let epoch = ep.read_word(members.epoch_addr())?;
        // Tag 127 is the freeze's (`leaf_store::FREEZE_OWNER`): a pool an older version left with
        // a member there would have its locks taken for a freeze's, and never recovered.
        // (Loom builds' tables have no row there.)
        let last = match cfg!(loom) {
            true => leaf_store::members::Lease::from_raw(0),
            false => leaf_store::members::Lease::from_raw(
                ep.read_word(members.lease_addr(leaf_store::FREEZE_OWNER))?,
            ),
        };
        if last.state() != leaf_store::members::MemberState::Free {
            return Err(RetrainError::Layout(LeafStoreError::InvalidConfig(
                format!(
                    "membership entry {} is in use (an older version's member): the retrainer's freeze \
                 owns that tag now; let every compute node leave, or load the pool again",
                    leaf_store::FREEZE_OWNER
                ),
            )));
        }
        let mut worker = Self {
            ep,
            layout,
            params,
            config,
            ring,
            head,
            pending: BinaryHeap::new(),
            retired: VecDeque::new(),
            epoch,
            epoch_advanced: None,
            free: FreeSpace::default(),
            generation: (generation + 1) & layout.generation_mask(),
            stats: RetrainStats::default(),
            recovery: Recovery::default(),
            stalled: None,
            deferred: Vec::new(),
            backoff: HashMap::new(),
            last_problem: None,
            stuck: HashMap::new(),
            provisional: Vec::new(),
            requeue_owed: false,
            members: None,
            free_leaves: Vec::new(),
            published_problem: None,
            orphan_scan: None,
            last_orphan_sweep: None,
            values: values::ValueWatch::default(),
            #[cfg(loom)]
            broken: super::broken::Broken::default(),
        };
        worker.recover(&table, &fixed)?;
        Ok(worker)
    }

    /// Repairs what a previous worker left (see [`Retrainer::new`]), given the slot table and
    /// every record's fixed part as read at start.
    pub(super) fn recover(
        &mut self,
        table: &[(RemoteAddr, u64)],
        fixed: &[u8],
    ) -> Result<(), RetrainError> {
        match self.settle_in_flight()? {
            Some(Settled::RolledBack(slot)) => {
                self.queue_slot(slot);
                self.recovery.unfrozen = Some(slot);
            }
            Some(Settled::Retired(slot)) => self.recovery.retired = Some(slot),
            None => {}
        }
        self.recovery.requeued = self.requeue_marked()?;
        if self.recovery.finished_split.is_some() {
            // A slot was published since `table` was read: its record is referenced.
            let table = read_slot_table(&mut self.ep, &self.layout)?;
            let fixed = record_prefixes(&mut self.ep, &table, RECORD_FIXED_BYTES as usize)?;
            self.generation = (newest_generation(&fixed) + 1) & self.layout.generation_mask();
            self.recovery.unreferenced_bytes = self.retire_unreferenced(&table, &fixed)?;
        } else {
            self.recovery.unreferenced_bytes = self.retire_unreferenced(table, fixed)?;
        }
        Ok(())
    }

    /// Settles a retraining the ring's in-flight word says was left unfinished (by a worker that
    /// stopped, or by this one after a failed step). If the slot still names the old record, the
    /// retraining is rolled back: the slot table never named the new record, so no compute node
    /// has acted on it and the old record's chains are exactly as frozen — lifting both flags
    /// (retired, if set, and locked) is safe; the pre-built record is unreferenced space.
    /// If the slot names another record, the old one is marked retired (compute nodes still
    /// caching it go to the slot table) and awaits reclamation.
    pub(super) fn settle_in_flight(&mut self) -> Result<Option<Settled>, RetrainError> {
        let in_flight = self.ep.read_word(self.ring.in_flight())?;
        if in_flight == 0 {
            return Ok(None);
        }
        let old_addr = RemoteAddr::unpack(in_flight);
        // Word 1 of a record is its slot id; read_record checks the whole record against it.
        let slot = self.ep.read_word(old_addr.saturating_add(8))?;
        if slot >= self.layout.slot_capacity() {
            return Err(LeafStoreError::CorruptRecord {
                slot,
                reason: format!("the in-flight record {old_addr} names no slot"),
            }
            .into());
        }
        let old = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
        let current = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
        let split = self.journaled_split()?;
        // A split whose new slot is published may have been written through: finish it.
        let count = self.ep.read_word(self.layout.slot_count_addr())?;
        let published = split.is_some_and(|(split, _)| count > split.slot);
        let settled = if current == old_addr && !published {
            // Nothing named the split's records: unreferenced space.
            if split.is_some() {
                self.ep.write_word(self.ring.split_slot(), 0)?;
            }
            self.mend_torn_unclaims(old_addr, &old)?;
            self.lift_freeze(&old, old_addr, ModelHeader::new(0).locked().retired().raw())?;
            Settled::RolledBack(slot)
        } else {
            self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
            if let Some((split, lower)) = split {
                self.publish(split)?;
                if current == old_addr {
                    self.ep
                        .write_word(self.layout.slot_entry_addr(slot), lower.pack())?;
                }
                self.ep.write_word(self.ring.split_slot(), 0)?;
                self.recovery.finished_split = Some(split.slot);
            }
            if !self.retired.iter().any(|r| r.offset == old_addr.offset()) {
                self.push_retired(old_addr.offset(), old.layout().total());
            }
            Settled::Retired(slot)
        };
        self.ep.write_word(self.ring.in_flight(), 0)?;
        Ok(Some(settled))
    }

    /// Before a rolled-back retraining lifts its freeze: rewrites as an empty, unclaimed leaf
    /// every torn leaf of `old`'s chains that can only be one of the retraining's own WRITEs
    /// taking an empty leaf's claim away (ARCHITECTURE §4, "Claims"): a worker cut inside one
    /// leaves the leaf torn, and every writer of its chain, and every later snapshot, stuck on it.
    /// Such a tear mixes two images of an empty leaf: word 0 counts no entry and no slot holds
    /// anything. Any other torn leaf is left alone (a compute node's leaf torn with no image to
    /// restore it, which `verify` reports; a tear cut inside the head of an insert into an empty
    /// leaf shows a count of one). Only while the record is still frozen, and only a leaf whose
    /// chain's lock the freeze holds (taken here if the stopped worker had not taken it yet, after
    /// a writer that holds it lets go), so never under a live writer's WRITE.
    fn mend_torn_unclaims(
        &mut self,
        old_addr: RemoteAddr,
        old: &ModelRecord,
    ) -> Result<(), RetrainError> {
        if !ModelHeader::from_raw(self.ep.read_word(old_addr)?).is_locked() {
            return Ok(());
        }
        let delta = self.layout.delta();
        let mut bytes = vec![0u8; self.layout.leaf_bytes() as usize];
        for leaf in 0..old.lt.len() {
            let Ok(entries) = old.chain_entries(leaf) else {
                continue;
            };
            for entry in entries {
                let n = entry.leaf_num();
                if n >= self.layout.leaf_capacity() {
                    continue;
                }
                let at = self.layout.leaf_addr(n);
                self.ep.read(at, &mut bytes)?;
                // Both images empty: word 0 counts nothing, and no slot holds anything.
                let torn_empty = |bytes: &[u8]| {
                    matches!(Leaf::decode(n, bytes), Err(LeafStoreError::TornLeaf { .. }))
                        && Leaf::unchecked_emptiness(bytes) == Some((0, true))
                };
                if !torn_empty(&bytes) || !self.lock_lets_go(old_addr, old, leaf)? {
                    continue;
                }
                self.ep.read(at, &mut bytes)?;
                if torn_empty(&bytes) {
                    let empty = Leaf::new().encode(n, delta)?;
                    self.ep.write(at, &empty)?;
                    self.recovery.mended_leaves += 1;
                }
            }
        }
        Ok(())
    }

    /// Whether trained leaf `leaf`'s LT lock in frozen record `old` is the freeze's, or can be
    /// made so within 50 ms: a worker that stopped inside its freeze may have left it untaken,
    /// and a writer may hold it (one that does not let go is a dead compute node's, whose
    /// recovery restores its leaf). Taken, no writer can write the leaf until the freeze is
    /// lifted.
    fn lock_lets_go(
        &mut self,
        old_addr: RemoteAddr,
        old: &ModelRecord,
        leaf: usize,
    ) -> Result<bool, RetrainError> {
        let at = Self::lt_addr(old, old_addr, leaf as u64);
        for _ in 0..50 {
            let entry = LeafTableEntry::from_raw(self.ep.read_word(at)?);
            if entry.is_frozen() {
                return Ok(true);
            }
            if !entry.is_locked()
                && self.ep.cas(at, entry.raw(), entry.frozen().raw())? == entry.raw()
            {
                return Ok(true);
            }
            crate::sync::thread::sleep(Duration::from_millis(1));
        }
        Ok(false)
    }

    /// The split the ring's journal names, its new slot's record checked, and the split slot's
    /// new record; `None` if none is journaled.
    fn journaled_split(&mut self) -> Result<Option<(Split, RemoteAddr)>, RetrainError> {
        let word = self.ep.read_word(self.ring.split_slot())?;
        let Some(slot) = word.checked_sub(1) else {
            return Ok(None);
        };
        let addr = RemoteAddr::unpack(self.ep.read_word(self.ring.split_record())?);
        if slot >= self.layout.slot_capacity() {
            return Err(LeafStoreError::CorruptRecord {
                slot,
                reason: "the journaled split names a slot beyond the slot table".into(),
            }
            .into());
        }
        let lower = RemoteAddr::unpack(self.ep.read_word(self.ring.split_lower())?);
        let record = read_record(&mut self.ep, &self.layout, slot, addr)?;
        Ok(Some((
            Split {
                slot,
                at: addr.offset(),
                first_key: record.first_key,
            },
            lower,
        )))
    }

    /// Treats every model-region range below the allocation point that neither a slot's record
    /// nor a record already awaiting reclamation covers as retired now. Returns its bytes.
    pub(super) fn retire_unreferenced(
        &mut self,
        table: &[(RemoteAddr, u64)],
        fixed: &[u8],
    ) -> Result<u64, RetrainError> {
        let sb = *self.layout.superblock();
        let region_end = sb.model_region_offset + sb.model_region_bytes;
        let next = self.ep.read_word(self.layout.model_region_addr())?;
        let mut used: Vec<(u64, u64)> = self
            .retired
            .iter()
            .map(|r| (r.offset, r.offset + r.bytes))
            .collect();
        for (slot, (&(addr, _), part)) in table
            .iter()
            .zip(fixed.chunks_exact(RECORD_FIXED_BYTES as usize))
            .enumerate()
        {
            let offset = addr.offset();
            let record = ModelRecord::layout_of(part, region_end.saturating_sub(offset)).map_err(
                |reason| LeafStoreError::CorruptRecord {
                    slot: slot as u64,
                    reason,
                },
            )?;
            used.push((offset, offset + record.total()));
        }
        used.sort_unstable();
        let mut unreferenced = 0;
        let mut cursor = sb.model_region_offset + 16;
        for (start, end) in used {
            if start > cursor && start <= next {
                self.push_retired(cursor, start - cursor);
                unreferenced += start - cursor;
            }
            cursor = cursor.max(end);
        }
        if next > cursor {
            self.push_retired(cursor, next - cursor);
            unreferenced += next - cursor;
        }
        Ok(unreferenced)
    }
}

/// The highest generation among records' fixed parts (as [`record_prefixes`] reads them).
fn newest_generation(fixed: &[u8]) -> u64 {
    fixed
        .chunks_exact(RECORD_FIXED_BYTES as usize)
        .map(|part| ModelHeader::from_raw(le_word(part, 0)).generation())
        .max()
        .unwrap_or(0)
}
