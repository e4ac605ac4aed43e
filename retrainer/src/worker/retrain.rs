//! One retraining: snapshot, train, shadow redirection (freeze, drain, retire, swap).

use super::*;

impl<E: Endpoint> Retrainer<E> {
    /// Retrains `slot` now (whether queued or not) — shadow redirection:
    /// 1. read the record and snapshot its chains; train the new record beside the old one and
    ///    write it (unreferenced) into free model-region space;
    /// 2. freeze the old record (its header's locked flag): writers that lock a leaf and see it
    ///    release and wait; wait for held leaf locks to drain;
    /// 3. snapshot again: if any chain changed since step 1 (inserts, splits, deletes that landed
    ///    meanwhile), rebuild the record from the frozen state, which carries every leaf created
    ///    meanwhile (as a trained leaf);
    /// 4. retire the old record, then point the slot at the new one, clear the slot's queued bit.
    ///
    /// Readers are never blocked: the old record stays readable until retired, then they reload.
    pub fn retrain_slot(&mut self, slot: u64) -> Result<Option<RetrainReport>, RetrainError> {
        let started = Instant::now();
        let old_addr = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
        let old = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
        let old_bytes = old.layout().total();
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
        let mut train_time = Duration::ZERO;
        // Pre-build beside the old record.
        let built = match &snapshot {
            Some(chains) => self.build(&old, chains, &mut train_time),
            None => Err(RetrainError::Train("inconsistent snapshot".into())),
        };
        let prebuilt = match built {
            Ok(Some(record)) => {
                let bytes = record.encode();
                let at = self.allocate(bytes.len() as u64)?;
                self.ep.write(self.layout.at(at), &bytes)?;
                Some((record, at, bytes.len() as u64))
            }
            Ok(None) => {
                self.stats.skipped_empty += 1;
                self.clear_queued(slot)?;
                return Ok(None);
            }
            Err(RetrainError::Train(_)) => None,
            Err(e) => return Err(e),
        };

        // Freeze and drain; the in-flight word names the record until it is retired.
        let frozen_at = Instant::now();
        let locked = ModelHeader::new(0).locked().raw();
        self.ep.write_word(self.ring.in_flight(), old_addr.pack())?;
        self.set_flag(old_addr, locked)?;
        if !self.drain(&old, old_addr)? {
            self.unfreeze(old_addr)?;
            if let Some((_, at, len)) = prebuilt {
                self.free.push((at, len));
            }
            self.stats.drain_timeouts += 1;
            self.pending.push((0, Reverse(slot)));
            return Ok(None);
        }
        let frozen = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
        let frozen_chains = self.snapshot(&frozen)?;
        let carry_over = {
            #[cfg(loom)]
            {
                self.config.carry_over
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        let changed = snapshot
            .as_ref()
            .is_none_or(|s| !same_chains(s, &frozen_chains));
        let (new_record, new_at, rebuilt) = match prebuilt {
            Some((record, at, _)) if !changed || !carry_over => (record, at, false),
            unusable => {
                if let Some((_, at, len)) = unusable {
                    self.free.push((at, len));
                }
                // Under the freeze no writer is inside: the chains are consistent.
                let built = match self.build(&frozen, &frozen_chains, &mut train_time) {
                    Ok(built) => built,
                    Err(e) => {
                        self.unfreeze(old_addr)?;
                        return Err(e);
                    }
                };
                let Some(record) = built else {
                    // Everything was deleted meanwhile: keep the old record, unfrozen.
                    self.unfreeze(old_addr)?;
                    self.clear_queued(slot)?;
                    self.stats.skipped_empty += 1;
                    return Ok(None);
                };
                let bytes = record.encode();
                let at = match self.allocate(bytes.len() as u64) {
                    Ok(at) => at,
                    Err(e) => {
                        self.unfreeze(old_addr)?;
                        return Err(e);
                    }
                };
                self.ep.write(self.layout.at(at), &bytes)?;
                (record, at, true)
            }
        };

        // Retire, then redirect, then unqueue. Retiring first is what keeps a compute node that
        // still caches the old record correct: once the slot names the new record, other compute
        // nodes split leaves that only the new record links, and a reader of the old record must
        // already see "retired" (its header is otherwise unchanged) and go to the slot table.
        if self.retire_first() {
            self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
            self.ep.write_word(
                self.layout.slot_entry_addr(slot),
                self.layout.at(new_at).pack(),
            )?;
        } else {
            self.ep.write_word(
                self.layout.slot_entry_addr(slot),
                self.layout.at(new_at).pack(),
            )?;
            self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
        }
        self.retired
            .push_back((Instant::now(), old_addr.offset(), old_bytes));
        self.clear_queued(slot)?;
        self.ep.write_word(self.ring.in_flight(), 0)?;

        let report = RetrainReport {
            slot,
            trained_before: old.lt.len() as u64,
            trained_after: new_record.lt.len() as u64,
            synonyms_absorbed: frozen_chains.iter().map(|c| c.len() as u64 - 1).sum(),
            keys: frozen_chains
                .iter()
                .flatten()
                .map(|(_, l)| l.len() as u64)
                .sum(),
            segments: new_record.model.segments().len() as u64,
            rebuilt_under_freeze: rebuilt,
            train_time,
            frozen_time: frozen_at.elapsed(),
            total_time: started.elapsed(),
        };
        self.stats.retrains += 1;
        self.stats.rebuilt_under_freeze += u64::from(report.rebuilt_under_freeze);
        self.stats.keys_trained += report.keys;
        self.stats.train_nanos += report.train_time.as_nanos() as u64;
        self.stats.total_nanos += report.total_time.as_nanos() as u64;
        Ok(Some(report))
    }

    /// Whether the old record is retired before the slot table moves (always, outside loom
    /// builds; loom models switch it off to show the other order is caught).
    fn retire_first(&self) -> bool {
        #[cfg(loom)]
        {
            self.config.retire_first
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
            self.ep.batch(&mut verbs)?;
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
    /// leaf (no data moves); `None` if the slot holds no key.
    pub(super) fn build(
        &mut self,
        old: &ModelRecord,
        chains: &Chains,
        train_time: &mut Duration,
    ) -> Result<Option<ModelRecord>, RetrainError> {
        let leaves: Vec<&(LeafTableEntry, Leaf)> = chains
            .iter()
            .flatten()
            .filter(|(_, l)| !l.is_empty())
            .collect();
        if leaves.is_empty() {
            return Ok(None);
        }
        let keys: Vec<Vec<u64>> = leaves
            .iter()
            .map(|(_, l)| l.entries().iter().map(|e| e.0).collect())
            .collect();
        let started = Instant::now();
        let model =
            LeafModel::train(self.params, &keys).map_err(|e| RetrainError::Train(e.to_string()))?;
        *train_time += started.elapsed();
        let generation = self.generation;
        self.generation = (self.generation + 1) & ModelHeader::MAX_GENERATION;
        Ok(Some(ModelRecord {
            header: ModelHeader::new(generation),
            slot: old.slot,
            first_key: old.first_key,
            model,
            pivots: keys.iter().map(|k| k[0]).collect(),
            lt: leaves
                .iter()
                .map(|(e, _)| {
                    LeafTableEntry::new(e.leaf_region(), e.leaf_num()).unwrap_or_default()
                })
                .collect(),
            slt: vec![LeafTableEntry::default(); SLT_SLOTS],
        }))
    }

    /// Waits until no LT entry of `record` is locked; false after the drain limit.
    pub(super) fn drain(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
    ) -> Result<bool, RetrainError> {
        let layout = record.layout();
        let mut lt = vec![0u8; 8 * record.lt.len()];
        let deadline = Instant::now() + self.config.drain_limit;
        loop {
            self.ep.read(
                addr.checked_add(layout.lt_entry(0)).unwrap_or(addr),
                &mut lt,
            )?;
            if lt
                .chunks_exact(8)
                .all(|c| !LeafTableEntry::from_raw(le_word(c, 0)).is_locked())
            {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            pause();
        }
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
