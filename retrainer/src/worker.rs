//! The retraining worker.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use leaf_store::{
    Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, ModelRecord, RECORD_FIXED_BYTES,
    RingEntry, RingLayout, SLT_SLOTS, le_word, read_leaf, read_record, read_slot_table,
};
use learned_model::{LeafModel, ModelParams};
use rdma_transport::{Endpoint, MemoryNodeInfo, RemoteAddr, TransportError, Verb};

/// How the worker behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrainConfig {
    /// A retired record's memory is reused only this long after it was retired. Compute nodes
    /// revalidate views older than a second before writing through them, and give up on an
    /// operation after their wait limit (2 s by default), so ten seconds leaves a wide margin.
    pub grace_period: Duration,
    /// How long to wait for leaf locks held on a frozen record to drain before unfreezing it and
    /// trying the slot again later.
    pub drain_limit: Duration,
    /// Sleep between polls of an empty queue.
    pub idle_sleep: Duration,
    /// When the queue is empty, slots whose SLT has handed out at least this many slots are
    /// retrained too (most used first): an idle memory-node core compacts chains so GETs return
    /// to reading one leaf. 0 disables the sweep.
    pub idle_sweep_threshold: u64,
    /// At most one idle sweep (reading every slot's header) per this interval.
    pub sweep_interval: Duration,
    /// A ring position claimed by a compute node but left unwritten this long is skipped (its
    /// writer has died; compute nodes write right after claiming), and every slot marked queued
    /// that no entry names is queued again.
    pub ring_stall_limit: Duration,
    /// Whether changes made between the pre-built snapshot and the freeze are carried into the new
    /// record (always, outside loom builds; loom models switch it off to show it is needed).
    #[cfg(loom)]
    pub carry_over: bool,
}

impl Default for RetrainConfig {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(10),
            drain_limit: Duration::from_secs(2),
            idle_sleep: Duration::from_micros(200),
            idle_sweep_threshold: 8,
            sweep_interval: Duration::from_millis(50),
            ring_stall_limit: Duration::from_secs(5),
            #[cfg(loom)]
            carry_over: true,
        }
    }
}

/// Why a retraining failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetrainError {
    /// The pool's layout or a record could not be read.
    #[error(transparent)]
    Layout(#[from] LeafStoreError),
    /// The model region has no room for the new record until retired ones are reclaimed.
    #[error("model region full: {needed} bytes needed")]
    ModelRegionFull {
        /// Bytes of the record that did not fit.
        needed: u64,
    },
    /// A new model could not be trained.
    #[error("training failed: {0}")]
    Train(String),
}

impl From<TransportError> for RetrainError {
    fn from(e: TransportError) -> Self {
        RetrainError::Layout(e.into())
    }
}

/// What one retraining did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrainReport {
    /// The slot.
    pub slot: u64,
    /// Trained leaves before and after.
    pub trained_before: u64,
    /// Trained leaves of the new record.
    pub trained_after: u64,
    /// Synonym leaves the old record linked (all absorbed as trained leaves).
    pub synonyms_absorbed: u64,
    /// Keys trained on.
    pub keys: u64,
    /// Segments of the new model.
    pub segments: u64,
    /// Whether the chains changed between the pre-built snapshot and the freeze, so the record was
    /// rebuilt from the frozen state.
    pub rebuilt_under_freeze: bool,
    /// Time spent training the model(s).
    pub train_time: Duration,
    /// Time writers of the slot were held off (freeze to retire).
    pub frozen_time: Duration,
    /// Whole retraining, from reading the record to retiring it.
    pub total_time: Duration,
}

/// Counters over a worker's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetrainStats {
    /// Slots retrained.
    pub retrains: u64,
    /// Retrainings whose record was rebuilt under the freeze.
    pub rebuilt_under_freeze: u64,
    /// Queued slots that held no key (nothing to retrain).
    pub skipped_empty: u64,
    /// Freezes undone because leaf locks did not drain in time.
    pub drain_timeouts: u64,
    /// Keys trained on.
    pub keys_trained: u64,
    /// Nanoseconds spent training.
    pub train_nanos: u64,
    /// Nanoseconds spent retraining in total.
    pub total_nanos: u64,
    /// Retired records whose memory was reclaimed.
    pub reclaimed_records: u64,
    /// Ring positions skipped because their claimant never wrote them.
    pub ring_positions_skipped: u64,
    /// Slots marked queued that no ring entry named, queued again (after a skip or at start).
    pub requeued: u64,
}

/// What a worker found and repaired when it started on a pool whose previous worker stopped
/// without finishing (a crash, a kill): see [`Retrainer::new`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The slot whose retraining stopped before its slot pointer moved: its record was unfrozen
    /// and the slot queued again.
    pub unfrozen: Option<u64>,
    /// The slot whose retraining stopped after its slot pointer moved: its old record was marked
    /// retired (compute nodes still using it reload) and will be reclaimed after the grace period.
    pub retired: Option<u64>,
    /// Slots marked queued that no ring entry names any more (the previous worker had taken them):
    /// queued again.
    pub requeued: u64,
    /// Model-region bytes no slot references (records a previous worker wrote but never swapped
    /// in, or retired but had not reclaimed): reused after the grace period.
    pub unreferenced_bytes: u64,
}

type Chains = Vec<Vec<(LeafTableEntry, Leaf)>>;

/// The memory node's retraining worker for one memory node's pool.
#[derive(Debug)]
pub struct Retrainer<E: Endpoint> {
    ep: E,
    layout: Layout,
    params: ModelParams,
    config: RetrainConfig,
    ring: RingLayout,
    head: u64,
    /// Queued slots, most used SLT first.
    pending: BinaryHeap<(u64, Reverse<u64>)>,
    /// Retired records: when, where, how many bytes.
    retired: VecDeque<(Instant, u64, u64)>,
    /// Reusable model-region space: offset, bytes.
    free: Vec<(u64, u64)>,
    generation: u64,
    stats: RetrainStats,
    recovery: Recovery,
    /// The ring position found claimed but unwritten, and since when.
    stalled: Option<(u64, Instant)>,
}

impl<E: Endpoint> Retrainer<E> {
    /// A worker for the pool on `node`, reached through `ep`. Its generations start above every
    /// record's, so a header word never repeats on this node (records' memory is reused).
    ///
    /// One worker serves a pool at a time. If the previous one stopped in the middle of a
    /// retraining, this one finishes what the ring's in-flight word says was left: a record still
    /// referenced by its slot is unfrozen and the slot queued again; one already replaced is
    /// marked retired. Slots marked queued that no ring entry names are queued again.
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
        let generation = fixed
            .chunks_exact(RECORD_FIXED_BYTES as usize)
            .map(|part| ModelHeader::from_raw(le_word(part, 0)).generation())
            .max()
            .unwrap_or(0);
        let mut worker = Self {
            ep,
            layout,
            params,
            config,
            ring,
            head,
            pending: BinaryHeap::new(),
            retired: VecDeque::new(),
            free: Vec::new(),
            generation: generation + 1,
            stats: RetrainStats::default(),
            recovery: Recovery::default(),
            stalled: None,
        };
        worker.recover(&table, &fixed)?;
        Ok(worker)
    }

    /// What this worker repaired when it started.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// The endpoint the worker reaches its pool through (its counters; fault injection in tests).
    pub fn endpoint_mut(&mut self) -> &mut E {
        &mut self.ep
    }

    /// Repairs what a previous worker left (see [`Retrainer::new`]), given the slot table and
    /// every record's fixed part as read at start.
    fn recover(&mut self, table: &[(RemoteAddr, u64)], fixed: &[u8]) -> Result<(), RetrainError> {
        let in_flight = self.ep.read_word(self.ring.in_flight())?;
        if in_flight != 0 {
            let old_addr = RemoteAddr::unpack(in_flight);
            // Word 1 of a record is its slot id; read_record checks the whole record against it.
            let slot = self
                .ep
                .read_word(old_addr.checked_add(8).unwrap_or(old_addr))?;
            if slot >= self.layout.slots() {
                return Err(LeafStoreError::CorruptRecord {
                    slot,
                    reason: format!("the in-flight record {old_addr} names no slot"),
                }
                .into());
            }
            let old = read_record(&mut self.ep, &self.layout, slot, old_addr)?;
            let current = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
            if current == old_addr {
                self.clear_flag(old_addr, ModelHeader::new(0).locked().raw())?;
                self.queue_slot(slot)?;
                self.recovery.unfrozen = Some(slot);
            } else {
                self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
                self.retired
                    .push_back((Instant::now(), old_addr.offset(), old.layout().total()));
                self.recovery.retired = Some(slot);
            }
            self.ep.write_word(self.ring.in_flight(), 0)?;
        }

        self.recovery.requeued = self.requeue_marked()?;
        self.recovery.unreferenced_bytes = self.retire_unreferenced(table, fixed)?;
        Ok(())
    }

    /// Treats every model-region range below the allocation point that neither a slot's record
    /// nor a record already awaiting reclamation covers as retired now. Returns its bytes.
    fn retire_unreferenced(
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
            .map(|&(_, offset, bytes)| (offset, offset + bytes))
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
                self.retired
                    .push_back((Instant::now(), cursor, start - cursor));
                unreferenced += start - cursor;
            }
            cursor = cursor.max(end);
        }
        if next > cursor {
            self.retired
                .push_back((Instant::now(), cursor, next - cursor));
            unreferenced += next - cursor;
        }
        Ok(unreferenced)
    }

    /// Counters so far.
    pub fn stats(&self) -> RetrainStats {
        self.stats
    }

    /// Slots taken from the ring and not yet retrained.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The layout of the pool.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Moves queued slots from the ring into the worker's priority queue (most used SLT first).
    /// Stops at a position claimed but not yet written; one left unwritten for
    /// [`RetrainConfig::ring_stall_limit`] is skipped and marked slots are queued again.
    pub fn poll(&mut self) -> Result<usize, RetrainError> {
        let capacity = self.layout.superblock().ring_capacity;
        let tail = self.ep.read_word(self.ring.tail())?;
        let first = self.head;
        let mut taken = 0;
        let mut skipped = false;
        while self.head < tail {
            let entry = RingEntry::from_raw(self.ep.read_word(self.ring.entry(self.head))?);
            let Some(slot) = entry.slot_at(self.head, capacity) else {
                match self.stalled {
                    Some((position, since))
                        if position == self.head
                            && since.elapsed() >= self.config.ring_stall_limit =>
                    {
                        self.stalled = None;
                        self.head += 1;
                        self.stats.ring_positions_skipped += 1;
                        skipped = true;
                        continue;
                    }
                    Some((position, _)) if position == self.head => {}
                    _ => self.stalled = Some((self.head, Instant::now())),
                }
                break;
            };
            self.head += 1;
            if slot < self.layout.slots() {
                self.queue_slot(slot)?;
                taken += 1;
            }
        }
        if self.head != first {
            self.ep.write_word(self.ring.head(), self.head)?;
        }
        if skipped {
            taken += self.requeue_marked()? as usize;
        }
        Ok(taken)
    }

    /// Adds `slot` to this worker's queue, ranked by its record's SLT use.
    fn queue_slot(&mut self, slot: u64) -> Result<(), RetrainError> {
        let record = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
        let slot_use = ModelHeader::from_raw(self.ep.read_word(record)?).slot_use();
        self.pending.push((slot_use, Reverse(slot)));
        Ok(())
    }

    /// Queues again every slot marked queued that neither an entry still in the ring nor this
    /// worker's queue holds (its claimant died, or a previous worker took it and stopped).
    /// Returns how many. One READ of the ring's entries, one of the bitmap.
    fn requeue_marked(&mut self) -> Result<u64, RetrainError> {
        let capacity = self.layout.superblock().ring_capacity;
        let tail = self.ep.read_word(self.ring.tail())?;
        let mut entries = vec![0u8; 8 * capacity as usize];
        self.ep.read(self.ring.entries(), &mut entries)?;
        let mut held: HashSet<u64> = (self.head..tail.max(self.head))
            .take(capacity as usize)
            .filter_map(|position| {
                let raw = le_word(&entries, 8 * (position % capacity.max(1)) as usize);
                RingEntry::from_raw(raw).slot_at(position, capacity)
            })
            .collect();
        held.extend(self.pending.iter().map(|&(_, Reverse(slot))| slot));
        let mut bitmap = vec![0u8; 8 * self.layout.slots().div_ceil(64) as usize];
        self.ep.read(self.ring.bitmap(), &mut bitmap)?;
        let mut requeued = 0;
        for (index, word) in bitmap.chunks_exact(8).enumerate() {
            let mut bits = le_word(word, 0);
            while bits != 0 {
                let slot = 64 * index as u64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                if slot >= self.layout.slots() || held.contains(&slot) {
                    continue;
                }
                self.queue_slot(slot)?;
                requeued += 1;
            }
        }
        self.stats.requeued += requeued;
        Ok(requeued)
    }

    /// Retrains the most urgent pending slot, if any.
    pub fn retrain_next(&mut self) -> Result<Option<RetrainReport>, RetrainError> {
        let Some((_, Reverse(slot))) = self.pending.pop() else {
            return Ok(None);
        };
        match self.retrain_slot(slot) {
            Err(RetrainError::ModelRegionFull { needed }) => {
                self.pending.push((0, Reverse(slot)));
                Err(RetrainError::ModelRegionFull { needed })
            }
            other => other,
        }
    }

    /// Reclaims retired records whose grace period has passed.
    pub fn reclaim(&mut self) {
        let now = Instant::now();
        while self
            .retired
            .front()
            .is_some_and(|&(at, _, _)| now.duration_since(at) >= self.config.grace_period)
        {
            if let Some((_, offset, bytes)) = self.retired.pop_front() {
                self.free.push((offset, bytes));
                self.stats.reclaimed_records += 1;
            }
        }
    }

    /// Queues every slot whose SLT has handed out at least `threshold` slots (one READ of the slot
    /// table, one batch of header READs per 4,096 slots). Returns how many were queued.
    pub fn sweep(&mut self, threshold: u64) -> Result<usize, RetrainError> {
        let table = read_slot_table(&mut self.ep, &self.layout)?;
        let headers = record_prefixes(&mut self.ep, &table, 8)?;
        let mut queued = 0;
        for (slot, h) in headers.chunks_exact(8).enumerate() {
            let header = ModelHeader::from_raw(le_word(h, 0));
            if threshold > 0 && header.slot_use() >= threshold && !header.is_retired() {
                self.pending.push((header.slot_use(), Reverse(slot as u64)));
                queued += 1;
            }
        }
        Ok(queued)
    }

    /// Polls, retrains and reclaims until `stop` returns true; when the queue is empty, sweeps
    /// for slots worth compacting (see [`RetrainConfig::idle_sweep_threshold`]); sleeps while idle.
    pub fn run(&mut self, mut stop: impl FnMut() -> bool) -> Result<RetrainStats, RetrainError> {
        let mut last_sweep: Option<Instant> = None;
        while !stop() {
            self.poll()?;
            self.reclaim();
            if self.pending.is_empty()
                && self.config.idle_sweep_threshold > 0
                && last_sweep.is_none_or(|at| at.elapsed() >= self.config.sweep_interval)
            {
                self.sweep(self.config.idle_sweep_threshold)?;
                last_sweep = Some(Instant::now());
            }
            match self.retrain_next() {
                Ok(Some(_)) => {}
                Ok(None) | Err(RetrainError::ModelRegionFull { .. }) => {
                    std::thread::sleep(self.config.idle_sleep)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(self.stats)
    }

    /// Retrains `slot` now (whether queued or not) — shadow redirection:
    /// 1. read the record and snapshot its chains; train the new record beside the old one and
    ///    write it (unreferenced) into free model-region space;
    /// 2. freeze the old record (its header's locked flag): writers that lock a leaf and see it
    ///    release and wait; wait for held leaf locks to drain;
    /// 3. snapshot again: if any chain changed since step 1 (inserts, splits, deletes that landed
    ///    meanwhile), rebuild the record from the frozen state, which carries every leaf created
    ///    meanwhile (as a trained leaf);
    /// 4. point the slot at the new record, retire the old one, clear the slot's queued bit.
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

        // Redirect, retire, unqueue.
        self.ep.write_word(
            self.layout.slot_entry_addr(slot),
            self.layout.at(new_at).pack(),
        )?;
        self.set_flag(old_addr, ModelHeader::new(0).retired().raw())?;
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

    /// Reads every chain of `record` in key order: all leaves in one batch, torn ones re-read.
    fn snapshot(&mut self, record: &ModelRecord) -> Result<Chains, RetrainError> {
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
    fn build(
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
    fn drain(&mut self, record: &ModelRecord, addr: RemoteAddr) -> Result<bool, RetrainError> {
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

    /// Sets `flag` in the header word at `addr` by CAS (compute nodes FAA the same word).
    fn set_flag(&mut self, addr: RemoteAddr, flag: u64) -> Result<(), RetrainError> {
        let mut current = self.ep.read_word(addr)?;
        while current & flag == 0 {
            let old = self.ep.cas(addr, current, current | flag)?;
            if old == current {
                break;
            }
            current = old;
        }
        Ok(())
    }

    fn clear_flag(&mut self, addr: RemoteAddr, flag: u64) -> Result<(), RetrainError> {
        let mut current = self.ep.read_word(addr)?;
        while current & flag != 0 {
            let old = self.ep.cas(addr, current, current & !flag)?;
            if old == current {
                break;
            }
            current = old;
        }
        Ok(())
    }

    /// Lifts the freeze of `record`, which stays the slot's, and clears the in-flight word.
    fn unfreeze(&mut self, record: RemoteAddr) -> Result<(), RetrainError> {
        self.clear_flag(record, ModelHeader::new(0).locked().raw())?;
        self.ep.write_word(self.ring.in_flight(), 0)?;
        Ok(())
    }

    fn clear_queued(&mut self, slot: u64) -> Result<(), RetrainError> {
        let (addr, bit) = self.ring.queued_bit(slot);
        self.clear_flag(addr, bit)
    }

    /// Model-region space for `bytes`: reclaimed space first (first fit), else the region's end.
    fn allocate(&mut self, bytes: u64) -> Result<u64, RetrainError> {
        let bytes = bytes.next_multiple_of(8);
        if let Some(i) = self.free.iter().position(|&(_, size)| size >= bytes) {
            let (offset, size) = self.free.swap_remove(i);
            if size > bytes {
                self.free.push((offset + bytes, size - bytes));
            }
            return Ok(offset);
        }
        let header = self.layout.model_region_addr();
        let next = self.ep.read_word(header)?;
        let end = self.ep.read_word(header.checked_add(8).unwrap_or(header))?;
        if next.saturating_add(bytes) > end {
            return Err(RetrainError::ModelRegionFull { needed: bytes });
        }
        self.ep.write_word(header, next + bytes)?;
        Ok(next)
    }
}

/// The first `len` bytes of every record in `table`, in slot order: one batch of READs per 4,096
/// slots.
fn record_prefixes<E: Endpoint>(
    ep: &mut E,
    table: &[(RemoteAddr, u64)],
    len: usize,
) -> Result<Vec<u8>, RetrainError> {
    let mut out = vec![0u8; len * table.len()];
    for (chunk, bufs) in table.chunks(4096).zip(out.chunks_mut(4096 * len)) {
        let mut verbs: Vec<Verb<'_>> = chunk
            .iter()
            .zip(bufs.chunks_exact_mut(len))
            .map(|(&(addr, _), buf)| Verb::read(addr, buf))
            .collect();
        ep.batch(&mut verbs)?;
    }
    Ok(out)
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

fn pause() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::sleep(Duration::from_micros(20));
}
