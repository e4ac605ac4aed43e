//! The retraining worker.
//!
//! One file per protocol: [`recover`] (start-up and repair after a crash), [`poll`] (taking work
//! from the ring and the idle sweep), [`retrain`] (one retraining with shadow redirection),
//! [`members`] (leases: declaring compute nodes dead and fencing them), [`roll_forward`]
//! (releasing a dead compute node's locks, finishing its cut-short writes).

#[cfg(loom)]
pub mod broken;
mod members;
mod orphans;
mod poll;
mod recover;
mod retrain;
mod roll_forward;
mod space;
mod values;

pub use members::{MemberStats, recovery_steps};
pub use roll_forward::RollForward;

use space::FreeSpace;

use crate::sync::time::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use leaf_store::{
    Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, ModelRecord, RECORD_FIXED_BYTES,
    RingEntry, RingLayout, le_word, read_leaf, read_record, read_slot_table,
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
    /// How long to wait, before freezing, for each leaf lock seen held to be released once (a
    /// lock held throughout puts the slot off without freezing it: its holder may have died), and
    /// after freezing for held locks to drain (else the record is unfrozen and the slot put off).
    /// Writers of a frozen slot wait at most about this long.
    pub drain_limit: Duration,
    /// Sleep between polls of an empty queue.
    pub idle_sleep: Duration,
    /// When the queue is empty, slots whose SLT has handed out at least this many slots are
    /// retrained too (most used first): an idle memory-node core compacts chains so GETs return
    /// to reading one leaf. 0 disables the sweep.
    pub idle_sweep_threshold: u64,
    /// At most one idle sweep (reading every slot's header) per this interval.
    pub sweep_interval: Duration,
    /// With a lease watch: how often the orphan sweep begins (reading every box, unlink word and
    /// record twice, an epoch apart) to find leaves held by nobody and free them
    /// ([`Retrainer::sweep_orphans`]; ARCHITECTURE §7, "Orphaned leaves"). Default 10 s.
    pub orphan_sweep_interval: Duration,
    /// With a lease watch: how often the live members' leaf boxes are topped up (default
    /// 500 µs). A client whose box is empty allocates from the allocation counter instead.
    pub box_fill_interval: Duration,
    /// A ring position claimed by a compute node but left unwritten this long is skipped (its
    /// writer has died; compute nodes write right after claiming), and every slot marked queued
    /// that no entry names is queued again.
    pub ring_stall_limit: Duration,
    /// A retraining whose new record would hold more trained leaves than this splits the slot
    /// in two: the lower half keeps the slot, the upper half becomes a new slot published at
    /// the end of the slot table, so no record (and no retraining) grows with the data. `None`
    /// (default): twice the pool's `slot_leaves`. `Some(u64::MAX)` never splits.
    pub split_leaves: Option<u64>,
}

impl Default for RetrainConfig {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(10),
            drain_limit: Duration::from_millis(500),
            idle_sleep: Duration::from_micros(200),
            idle_sweep_threshold: 8,
            sweep_interval: Duration::from_millis(50),
            orphan_sweep_interval: Duration::from_secs(10),
            box_fill_interval: Duration::from_micros(500),
            ring_stall_limit: Duration::from_secs(5),
            split_leaves: None,
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
    /// The slot was not retrained because the lock of its trained leaf `leaf` stayed held for
    /// the whole drain limit (a writer that died holding it?). Nothing was changed; the worker
    /// tries the slot again later, backing off.
    #[error("slot {slot} not retrained: the lock of its trained leaf {leaf} stays held")]
    LeafLocked {
        /// The slot.
        slot: u64,
        /// The trained leaf whose lock is held.
        leaf: u64,
    },
    /// A dead compute node's connection could not be fenced (a live process kept a batch in
    /// flight); its recovery is tried again at the next check.
    #[error("member {tag} not fenced: {reason}")]
    FenceFailed {
        /// The member's tag.
        tag: u8,
        /// What the fence said.
        reason: String,
    },
}

impl RetrainError {
    /// Whether the worker's transport is gone (the connection is broken, the endpoint crashed):
    /// nothing more can be done through it. Every other error concerns one slot or one attempt.
    pub fn is_transport_lost(&self) -> bool {
        matches!(
            self,
            RetrainError::Layout(LeafStoreError::Transport(
                TransportError::Crashed
                    | TransportError::Broken(_)
                    | TransportError::Connection(_)
                    | TransportError::NoDevice(_)
                    | TransportError::UnknownNode(_)
            ))
        )
    }
}

/// A retraining stopped between its freeze and its swap: see [`Retrainer::prepare_swap`] and
/// [`Retrainer::complete_swap`]. The old record is frozen, the new one written beside it.
#[derive(Debug)]
#[must_use = "the slot stays frozen until complete_swap runs"]
pub struct PreparedSwap {
    slot: u64,
    /// Leaves the old record's chains hold that the new one drops (empty ones), and leaves its
    /// freed SLT slots name: free once the slot table names the new record.
    freed_leaves: Vec<u64>,
    old_addr: RemoteAddr,
    old_bytes: u64,
    trained_before: u64,
    trained_after: u64,
    segments: u64,
    synonyms_absorbed: u64,
    keys: u64,
    new_at: u64,
    /// A split: the new slot, its record's offset and its first key.
    split: Option<Split>,
    rebuilt: bool,
    train_time: Duration,
    frozen_at: Instant,
    started: Instant,
}

/// The upper half of a split slot, written beside the lower one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Split {
    pub(super) slot: u64,
    pub(super) at: u64,
    pub(super) first_key: u64,
}

impl PreparedSwap {
    /// The slot being retrained.
    pub fn slot(&self) -> u64 {
        self.slot
    }
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
    /// The new slot the record's upper half went to, if the slot was split.
    pub split_into: Option<u64>,
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
    /// Retrainings that split their slot in two (a new slot published).
    pub splits: u64,
    /// Splits not made because the slot table was full (the record keeps growing).
    pub slot_table_full: u64,
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
    /// Leaves found held by nobody (an allocation whose completion was lost, a compute node or
    /// worker gone with leaves in hand) and put on the free list (see [`Retrainer::sweep_orphans`]).
    pub orphans_reclaimed: u64,
    /// Slots marked queued that no ring entry named, queued again (after a skip or at start).
    pub requeued: u64,
    /// Retrainings put off because a leaf lock stayed held ([`RetrainError::LeafLocked`]).
    pub leaf_locked: u64,
    /// Retrainings put off because the model region had no room.
    pub model_region_full: u64,
    /// Other failed attempts (a record that could not be read or trained, a transient transport
    /// error); each slot concerned is tried again later.
    pub errors: u64,
}

/// Model-region space the worker holds for reuse (see [`Retrainer::model_space`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelSpace {
    /// Bytes free for the next records (coalesced).
    pub reusable_bytes: u64,
    /// Separate free ranges those bytes form.
    pub reusable_fragments: u64,
    /// Bytes of retired records still inside their grace period.
    pub retired_bytes: u64,
}

/// How full a pool is (see [`Retrainer::pool_usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolUsage {
    /// Leaves the leaf region holds.
    pub leaf_capacity: u64,
    /// Leaves handed out so far (the allocation counter).
    pub leaves_allocated: u64,
    /// Bytes of the model region.
    pub model_region_bytes: u64,
    /// Model-region bytes below the allocation point, less what this worker holds for reuse.
    pub model_bytes_used: u64,
    /// Allocated leaves on this worker's free list (dropped by retraining, unlinked by deletes,
    /// left by dead compute nodes), waiting to be handed out again.
    pub leaves_free_listed: u64,
    /// Slots published now (the slot count word: bulk-loaded ones plus one per split).
    pub slots: u64,
    /// The most slots the slot table holds.
    pub slot_capacity: u64,
}

/// What a worker found and repaired when it started on a pool whose previous worker stopped
/// without finishing (a crash, a kill): see [`Retrainer::new`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The slot whose retraining stopped before its slot pointer moved: its record was unfrozen
    /// (and un-retired, if the worker had retired it) and the slot queued again.
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
    /// The new slot of a split that was published but not finished (the split slot may still
    /// have named the old record): finished from the ring's journal.
    pub finished_split: Option<u64>,
    /// Leaves of the unfrozen slot that its retraining tore while taking their claims away
    /// (empty leaves the new record would have dropped): written empty and unclaimed again.
    pub mended_leaves: u64,
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
    /// Retired records, oldest first.
    retired: VecDeque<RetiredRange>,
    /// The retirement epoch (the membership table's epoch word, which only this worker writes).
    epoch: u64,
    /// When the epoch last advanced.
    epoch_advanced: Option<Instant>,
    /// Reusable model-region space: offset, bytes.
    free: FreeSpace,
    generation: u64,
    stats: RetrainStats,
    recovery: Recovery,
    /// The ring position found claimed but unwritten, and since when.
    stalled: Option<(u64, Instant)>,
    /// Slots whose last attempt failed: when to try again.
    deferred: Vec<(Instant, u64)>,
    /// The current back-off of each slot whose attempts keep failing.
    backoff: HashMap<u64, Duration>,
    /// The last failed attempt: the slot and why.
    last_problem: Option<(u64, RetrainError)>,
    /// Slots put off for a leaf lock held throughout, and that leaf: the next attempt first
    /// checks it with one READ instead of waiting the drain limit again.
    stuck: HashMap<u64, u64>,
    /// Model-region space allocated by the retraining in progress and not yet referenced by the
    /// slot table: given back if the attempt fails.
    provisional: Vec<(u64, u64)>,
    /// A re-queue of marked slots is owed (a poll skipped a dead claimant's position but failed
    /// before re-queueing).
    requeue_owed: bool,
    /// The lease watch, if this worker watches its memory node's members.
    members: Option<members::MemberWatch>,
    /// Leaves no chain links and nobody holds: handed out again through the members' leaf boxes.
    free_leaves: Vec<u64>,
    /// The slot the published put-off word names, if any.
    published_problem: Option<u64>,
    /// An orphan sweep's first scan, waiting for its epoch to be over everywhere.
    orphan_scan: Option<orphans::OrphanScan>,
    /// When the last orphan sweep began.
    last_orphan_sweep: Option<Instant>,
    /// The value region's horizon and departed owners' chunks.
    values: values::ValueWatch,
    /// Which steps run in their wrong variant (loom builds only).
    #[cfg(loom)]
    broken: broken::Broken,
}

/// Model-region space no slot references any more, waiting to be reused.
#[derive(Debug, Clone, Copy)]
struct RetiredRange {
    /// When it was retired (reclamation by grace period, without a lease watch).
    at: Instant,
    /// The retirement epoch it was retired in (reclamation once every member announced a later
    /// one).
    stamp: u64,
    offset: u64,
    bytes: u64,
}

/// First and longest wait before a slot whose retraining failed is tried again.
const BACKOFF_FIRST: Duration = Duration::from_millis(1);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

impl<E: Endpoint> Retrainer<E> {
    /// What this worker repaired when it started.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// The endpoint the worker reaches its pool through (its counters; fault injection in tests).
    pub fn endpoint_mut(&mut self) -> &mut E {
        &mut self.ep
    }

    /// Counters so far.
    pub fn stats(&self) -> RetrainStats {
        self.stats
    }

    /// Slots taken from the ring and not yet retrained.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The slots taken from the ring (or re-queued) and not yet retrained, ascending; a slot
    /// queued twice appears twice.
    pub fn pending_slots(&self) -> Vec<u64> {
        let mut slots: Vec<u64> = self.pending.iter().map(|&(_, Reverse(s))| s).collect();
        slots.sort_unstable();
        slots
    }

    /// The model-region space this worker can hand out again, and what awaits reclamation.
    pub fn model_space(&self) -> ModelSpace {
        ModelSpace {
            reusable_bytes: self.free.total(),
            reusable_fragments: self.free.fragments() as u64,
            retired_bytes: self.retired.iter().map(|r| r.bytes).sum(),
        }
    }

    /// How full the pool is now (two READs).
    pub fn pool_usage(&mut self) -> Result<PoolUsage, RetrainError> {
        let sb = *self.layout.superblock();
        let allocated = self.ep.read_word(self.layout.alloc_num_addr())?;
        let next_free = self.ep.read_word(self.layout.model_region_addr())?;
        let slots = self.ep.read_word(self.layout.slot_count_addr())?;
        Ok(PoolUsage {
            slots,
            slot_capacity: self.layout.slot_capacity(),
            leaf_capacity: self.layout.leaf_capacity(),
            leaves_allocated: allocated.min(self.layout.leaf_capacity()),
            model_region_bytes: sb.model_region_bytes,
            model_bytes_used: next_free
                .saturating_sub(sb.model_region_offset + 16)
                .saturating_sub(self.free.total()),
            leaves_free_listed: self.free_leaves.len() as u64,
        })
    }

    /// The leaves on this worker's free list (handed out again through leaf boxes).
    pub fn free_leaves(&self) -> &[u64] {
        &self.free_leaves
    }

    /// The layout of the pool.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Retrains the most urgent pending slot, if any. A slot whose attempt fails is tried again
    /// later, after a back-off that doubles with each failure (1 ms to 2 s), and the error is
    /// returned; deferred slots whose time has come are pending again.
    pub fn retrain_next(&mut self) -> Result<Option<RetrainReport>, RetrainError> {
        self.undefer();
        let Some((_, Reverse(slot))) = self.pending.pop() else {
            return Ok(None);
        };
        let result = self.retrain_slot(slot);
        let problems = leaf_store::members::MemberTable::new(&self.layout).problem_addr();
        match &result {
            Err(e) => {
                match e {
                    RetrainError::LeafLocked { .. } => self.stats.leaf_locked += 1,
                    RetrainError::ModelRegionFull { .. } => self.stats.model_region_full += 1,
                    _ => self.stats.errors += 1,
                }
                // Published for writers that give up on the slot (best effort).
                let _ = self.ep.write_word(
                    problems,
                    leaf_store::put_off::encode(slot, crate::problem::put_off(e)),
                );
                self.published_problem = Some(slot);
                self.last_problem = Some((slot, e.clone()));
                self.defer(slot);
            }
            Ok(_) if self.published_problem == Some(slot) => {
                if self.ep.write_word(problems, 0).is_ok() {
                    self.published_problem = None;
                }
            }
            Ok(_) => {}
        }
        result
    }

    /// Slots put off after a failed attempt, with when each is tried again.
    pub fn deferred(&self) -> Vec<(u64, Instant)> {
        self.deferred.iter().map(|&(at, slot)| (slot, at)).collect()
    }

    /// The last failed retraining attempt: the slot and why.
    pub fn last_problem(&self) -> Option<&(u64, RetrainError)> {
        self.last_problem.as_ref()
    }

    /// Puts `slot` off: it is tried again after its back-off, which doubles each time.
    fn defer(&mut self, slot: u64) {
        let wait = self
            .backoff
            .get(&slot)
            .map_or(BACKOFF_FIRST, |&w| (w * 2).min(BACKOFF_MAX));
        self.backoff.insert(slot, wait);
        if !self.deferred.iter().any(|&(_, s)| s == slot) {
            self.deferred.push((Instant::now() + wait, slot));
        }
    }

    /// Moves deferred slots whose time has come back into the queue.
    fn undefer(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.deferred.len() {
            if self.deferred[i].0 <= now {
                let (_, slot) = self.deferred.swap_remove(i);
                self.pending.push((0, Reverse(slot)));
            } else {
                i += 1;
            }
        }
    }

    /// Reclaims retired records no compute node can still be using: with a lease watch, those
    /// retired in an epoch every member has announced it is past (see [`Self::watch_members`];
    /// no clock involved); without one, those retired longer ago than the grace period.
    pub fn reclaim(&mut self) {
        let now = Instant::now();
        let past = self.members.as_ref().map(|m| m.oldest_announced());
        let mut in_flight = None;
        while let Some(front) = self.retired.front().copied() {
            let free = match past {
                Some(announced) => announced.is_none_or(|a| front.stamp < a),
                None => now.duration_since(front.at) >= self.config.grace_period,
            };
            if !free {
                break;
            }
            // Never the record a retraining left in flight (its settling would retire it again,
            // and the same bytes would be handed out twice); unknown: wait.
            let journaled = *in_flight.get_or_insert_with(|| {
                self.ep
                    .read_word(self.ring.in_flight())
                    .map(RemoteAddr::unpack)
                    .ok()
            });
            if journaled.is_none_or(|r| r.pack() != 0 && r.offset() == front.offset) {
                break;
            }
            self.retired.pop_front();
            self.free.release(front.offset, front.bytes);
            self.stats.reclaimed_records += 1;
        }
    }

    /// Records `bytes` at `offset` as retired now, in the current epoch.
    pub(super) fn push_retired(&mut self, offset: u64, bytes: u64) {
        self.retired.push_back(RetiredRange {
            at: Instant::now(),
            stamp: self.epoch,
            offset,
            bytes,
        });
    }

    /// Polls, retrains and reclaims until `stop` returns true; when the queue is empty, sweeps
    /// for slots worth compacting (see [`RetrainConfig::idle_sweep_threshold`]); sleeps while idle.
    ///
    /// A problem with one slot (a lock that stays held, a full model region, a record that cannot
    /// be read) never stops the worker: the slot is put off with back-off ([`Self::deferred`],
    /// [`Self::last_problem`], counted in [`RetrainStats`]) and the others are served. Only an
    /// error that means the transport is gone ([`RetrainError::is_transport_lost`]) ends it.
    pub fn run(&mut self, mut stop: impl FnMut() -> bool) -> Result<RetrainStats, RetrainError> {
        let mut last_sweep: Option<Instant> = None;
        while !stop() {
            // Between two steps, every leaf this worker took for a box is in one or back on its
            // free list.
            leaf_store::ghost::expect_none_held("by a memory node's worker between two steps");
            let checked = self.check_members_if_due();
            self.survive(checked)?;
            let swept = self.sweep_orphans_if_due();
            self.survive(swept)?;
            let polled = self.poll().map(|_| ());
            self.survive(polled)?;
            self.reclaim();
            if self.pending.is_empty()
                && self.config.idle_sweep_threshold > 0
                && last_sweep.is_none_or(|at| at.elapsed() >= self.config.sweep_interval)
            {
                let swept = self.sweep(self.config.idle_sweep_threshold).map(|_| ());
                self.survive(swept)?;
                last_sweep = Some(Instant::now());
            }
            match self.retrain_next() {
                Ok(Some(_)) => {}
                Ok(None) => crate::sync::thread::sleep(self.config.idle_sleep),
                Err(e) if e.is_transport_lost() => return Err(e),
                Err(_) => crate::sync::thread::sleep(self.config.idle_sleep),
            }
        }
        Ok(self.stats)
    }

    /// An error of a step that concerns no single slot: fatal only if the transport is gone.
    fn survive(&mut self, result: Result<(), RetrainError>) -> Result<(), RetrainError> {
        match result {
            Err(e) if e.is_transport_lost() => Err(e),
            Err(_) => {
                self.stats.errors += 1;
                crate::sync::thread::sleep(self.config.idle_sleep);
                Ok(())
            }
            Ok(()) => Ok(()),
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

    /// Lifts the freeze of `record` (at `addr`), which stays the slot's, and clears the in-flight
    /// word.
    fn unfreeze(&mut self, record: &ModelRecord, addr: RemoteAddr) -> Result<(), RetrainError> {
        self.lift_freeze(record, addr, ModelHeader::new(0).locked().raw())?;
        self.ep.write_word(self.ring.in_flight(), 0)?;
        Ok(())
    }

    /// Lifts a freeze of `record` (at `addr`): the leaf locks the freeze holds first, then
    /// `flags` of its header (the locked flag, and the retired one where a rolled-back
    /// retraining had set it).
    pub(super) fn lift_freeze(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
        flags: u64,
    ) -> Result<(), RetrainError> {
        self.thaw_leaves(record, addr)?;
        self.clear_flag(addr, flags)
    }

    /// Address of trained leaf `leaf`'s LT entry in `record` at `addr`.
    pub(super) fn lt_addr(record: &ModelRecord, addr: RemoteAddr, leaf: u64) -> RemoteAddr {
        addr.checked_add(record.layout().lt_entry(leaf))
            .unwrap_or(addr)
    }

    /// `record`'s LT entries as they are now (one READ).
    pub(super) fn read_lt(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
    ) -> Result<Vec<LeafTableEntry>, RetrainError> {
        let mut lt = vec![0u8; 8 * record.lt.len()];
        self.ep.read(Self::lt_addr(record, addr, 0), &mut lt)?;
        Ok(lt
            .chunks_exact(8)
            .map(|c| LeafTableEntry::from_raw(le_word(c, 0)))
            .collect())
    }

    /// Takes every LT lock of `record` (at `addr`) with the freeze's owner tag
    /// ([`leaf_store::FREEZE_OWNER`]), waiting for writers that hold one to let go: from then
    /// on no writer can lock a chain of the record, and none is inside one (ARCHITECTURE §7).
    /// A leaf a writer held throughout the drain limit is returned (its freeze is then to be
    /// lifted by the caller); `None` once every lock is the freeze's.
    pub(super) fn freeze_leaves(
        &mut self,
        record: &ModelRecord,
        addr: RemoteAddr,
    ) -> Result<Option<u64>, RetrainError> {
        let freeze = {
            #[cfg(loom)]
            {
                self.broken.freeze_leaves
            }
            #[cfg(not(loom))]
            {
                true
            }
        };
        let deadline = Instant::now() + self.config.drain_limit;
        loop {
            let lt = self.read_lt(record, addr)?;
            let free: Vec<u64> = (0..lt.len() as u64)
                .filter(|&i| freeze && !lt[i as usize].is_locked())
                .collect();
            let mut verbs: Vec<Verb<'_>> = free
                .iter()
                .map(|&i| {
                    let e = lt[i as usize];
                    Verb::cas(Self::lt_addr(record, addr, i), e.raw(), e.frozen().raw())
                })
                .collect();
            if !verbs.is_empty() {
                self.ep.batches(&mut verbs)?;
            }
            let taken: HashSet<u64> = free
                .iter()
                .zip(&verbs)
                .filter(|&(&i, v)| v.old_value() == Some(lt[i as usize].raw()))
                .map(|(&i, _)| i)
                .collect();
            drop(verbs);
            let pending = lt.iter().enumerate().find(|&(i, e)| {
                if freeze {
                    !e.is_frozen() && !taken.contains(&(i as u64))
                } else {
                    e.is_locked()
                }
            });
            let Some((leaf, _)) = pending else {
                return Ok(None);
            };
            if Instant::now() >= deadline {
                return Ok(Some(leaf as u64));
            }
            pause();
        }
    }

    /// Releases every LT lock of `record` (at `addr`) that a freeze holds.
    fn thaw_leaves(&mut self, record: &ModelRecord, addr: RemoteAddr) -> Result<(), RetrainError> {
        let lt = self.read_lt(record, addr)?;
        let mut verbs: Vec<Verb<'_>> = lt
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_frozen())
            .map(|(i, e)| {
                Verb::cas(
                    Self::lt_addr(record, addr, i as u64),
                    e.raw(),
                    e.unlocked().raw(),
                )
            })
            .collect();
        if !verbs.is_empty() {
            self.ep.batches(&mut verbs)?;
        }
        Ok(())
    }

    fn clear_queued(&mut self, slot: u64) -> Result<(), RetrainError> {
        let (addr, bit) = self.ring.queued_bit(slot);
        self.clear_flag(addr, bit)
    }

    /// Model-region space for `bytes`: reclaimed space first (coalesced, lowest fit), else the
    /// region's end.
    /// Provisional until the retraining that asked for it swaps it in.
    fn allocate(&mut self, bytes: u64) -> Result<u64, RetrainError> {
        let at = self.allocate_space(bytes)?;
        self.provisional.push((at, bytes.next_multiple_of(8)));
        Ok(at)
    }

    fn allocate_space(&mut self, bytes: u64) -> Result<u64, RetrainError> {
        let bytes = bytes.next_multiple_of(8);
        if let Some(offset) = self.free.take(bytes) {
            return Ok(offset);
        }
        let header = self.layout.model_region_addr();
        let next = self.ep.read_word(header)?;
        let end = self.ep.read_word(header.saturating_add(8))?;
        if next.saturating_add(bytes) > end {
            return Err(RetrainError::ModelRegionFull { needed: bytes });
        }
        self.ep.write_word(header, next + bytes)?;
        Ok(next)
    }
}

/// The first `len` bytes of every record in `table`, in slot order: READs in as few batches as the
/// limits allow.
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
        ep.batches(&mut verbs)?;
    }
    Ok(out)
}

fn pause() {
    if cfg!(loom) {
        crate::sync::thread::yield_now();
    } else {
        crate::sync::thread::sleep(Duration::from_micros(20));
    }
}
