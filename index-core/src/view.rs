//! What a compute node caches of one model slot, and the cell that holds it.

use leaf_store::{LeafTableEntry, ModelHeader, ModelRecord, RecordLayout, SLT_SLOTS};
use learned_model::LeafModel;
use rdma_transport::RemoteAddr;

use crate::CacheMode;
use crate::sync::atomic::{AtomicBool, Ordering};

/// The leaf table as cached, in both modes, in runs where that is smaller: a bulk-loaded
/// record's trained leaves are leaf-major (ARCHITECTURE §5), so entry `i` is `base + i` with no
/// synonym — one run; a retrained record's leaves are the old chains' leaves in key order (no
/// data moves, §7), so they stay consecutive between the synonyms it absorbed — a run each. An
/// entry that differs from its run (a chain that splits or unlinks changed) is listed apart, 16
/// bytes per run and per exception. A table retrained so often that its runs would take more
/// than the table itself (8 bytes per entry) is kept plain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CachedLt {
    Runs {
        /// `(first index, its leaf number)`, by index: entry `i` of the run starting at `s` is
        /// leaf `leaf + (i - s)` with no synonym, unless listed in `exceptions`.
        runs: Vec<(u64, u64)>,
        /// Entries that differ from their run, by index.
        exceptions: Vec<(u64, LeafTableEntry)>,
    },
    /// Every entry (lock bits cleared).
    Plain(Vec<LeafTableEntry>),
}

impl Default for CachedLt {
    fn default() -> Self {
        CachedLt::Plain(Vec::new())
    }
}

impl CachedLt {
    /// The smaller cached form of `lt` (lock bits cleared).
    fn of(lt: &[LeafTableEntry]) -> Self {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut exceptions = Vec::new();
        for (i, entry) in lt.iter().map(|e| e.unlocked()).enumerate() {
            let i = i as u64;
            if run_entry(&runs, i) == Some(entry) {
                continue;
            }
            if entry.synonym_ptr() == 0 && LeafTableEntry::new(entry.leaf_num()) == Some(entry) {
                runs.push((i, entry.leaf_num()));
            } else {
                exceptions.push((i, entry));
            }
        }
        if 2 * (runs.len() + exceptions.len()) > lt.len() {
            CachedLt::Plain(lt.iter().map(|e| e.unlocked()).collect())
        } else {
            CachedLt::Runs { runs, exceptions }
        }
    }

    /// Entry `i` (lock bit clear).
    fn entry(&self, i: u64) -> LeafTableEntry {
        match self {
            CachedLt::Runs { runs, exceptions } => {
                match exceptions.binary_search_by_key(&i, |e| e.0) {
                    Ok(at) => exceptions[at].1,
                    Err(_) => run_entry(runs, i).unwrap_or_default(),
                }
            }
            CachedLt::Plain(entries) => entries.get(i as usize).copied().unwrap_or_default(),
        }
    }

    /// Sets entry `i` of a table of `len` entries (lock bit cleared), turning the runs plain when
    /// they would take more than the table.
    fn set(&mut self, i: u64, entry: LeafTableEntry, len: u64) {
        let entry = entry.unlocked();
        let too_big = match self {
            CachedLt::Runs { runs, exceptions } => {
                let at = exceptions.binary_search_by_key(&i, |e| e.0);
                match (run_entry(runs, i) == Some(entry), at) {
                    (true, Ok(at)) => {
                        exceptions.remove(at);
                    }
                    (true, Err(_)) => {}
                    (false, Ok(at)) => exceptions[at].1 = entry,
                    (false, Err(at)) => exceptions.insert(at, (i, entry)),
                }
                2 * (runs.len() + exceptions.len()) as u64 > len
            }
            CachedLt::Plain(entries) => {
                if let Some(slot) = entries.get_mut(i as usize) {
                    *slot = entry;
                }
                false
            }
        };
        if too_big {
            let plain = (0..len).map(|j| self.entry(j)).collect();
            *self = CachedLt::Plain(plain);
        }
    }

    /// Bytes it takes to cache: an index and a leaf number per run and per exception, or 8 per
    /// entry of a plain table.
    fn cache_bytes(&self) -> u64 {
        match self {
            CachedLt::Runs { runs, exceptions } => 16 * (runs.len() + exceptions.len()) as u64,
            CachedLt::Plain(entries) => 8 * entries.len() as u64,
        }
    }
}

/// Entry `i` as the run covering it says (`None` before the first run).
fn run_entry(runs: &[(u64, u64)], i: u64) -> Option<LeafTableEntry> {
    let at = runs.partition_point(|&(start, _)| start <= i);
    let (start, leaf) = *runs.get(at.checked_sub(1)?)?;
    LeafTableEntry::new(leaf + (i - start))
}

/// A cached model record: enough to route a key to leaves and read them in one round trip.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlotView {
    pub(crate) slot: u64,
    pub(crate) record: RemoteAddr,
    pub(crate) layout: RecordLayout,
    /// The header word this view reflects; a read that sees another value refreshes the view.
    pub(crate) header: ModelHeader,
    pub(crate) first_key: u64,
    /// The last key the record serves (inclusive): a larger key is served by a slot published
    /// after this record's directory was read.
    pub(crate) last_key: u64,
    pub(crate) model: LeafModel,
    /// Pivots mode only: the smallest key of each trained leaf at training time.
    pub(crate) pivots: Option<Vec<u64>>,
    pub(crate) lt: CachedLt,
    /// SLT entries `0..=min(slot_use, 255)` (entry 0 unused).
    pub(crate) slt: Vec<LeafTableEntry>,
    /// When the tables were read. Writers refresh views older than [`VIEW_MAX_AGE`] before
    /// writing through them, so no write targets a record retired longer ago than that plus one
    /// operation — far inside the retrainer's grace period before it reuses the memory. (What a
    /// memory node without a lease watch relies on; with one, reclamation waits for epochs.)
    pub(crate) fetched_at: crate::sync::time::Instant,
    /// The latest local epoch in which this view was known to name a record that is not retired
    /// (see `crate::membership`): an operation of a later epoch reloads it from the slot table.
    pub(crate) validated: Validated,
    /// Used since the cache budget's CLOCK hand last passed (marked only under a budget).
    pub(crate) referenced: Referenced,
    /// An evicted stub (see `crate::budget`): no model or tables; reloaded before any use (from
    /// its record's address, if still validated in the operation's epoch).
    pub(crate) evicted: bool,
}

/// A view's validation epoch: an atomic, so the lease renewer can confirm a view in place.
#[derive(Debug, Default)]
pub(crate) struct Validated(crate::sync::atomic::AtomicU64);

impl Validated {
    pub(crate) fn new(epoch: u64) -> Self {
        Self(crate::sync::atomic::AtomicU64::new(epoch))
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(crate::sync::atomic::Ordering::Acquire)
    }

    /// Raises it to `epoch` (never lowers it).
    pub(crate) fn raise(&self, epoch: u64) {
        self.0
            .fetch_max(epoch, crate::sync::atomic::Ordering::AcqRel);
    }
}

impl Clone for Validated {
    fn clone(&self) -> Self {
        Self::new(self.get())
    }
}

impl PartialEq for Validated {
    /// Not part of what a view says about its record.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Age past which a writer refreshes a view before using its addresses.
pub(crate) const VIEW_MAX_AGE: crate::sync::time::Duration =
    crate::sync::time::Duration::from_secs(1);

/// The entries of one chain: inline for the chains operations meet (no heap allocation per
/// operation).
pub(crate) type ChainEntries = smallvec::SmallVec<[LeafTableEntry; 8]>;

/// Longest chain a view will follow before declaring itself inconsistent.
const MAX_CHAIN: usize = SLT_SLOTS;

impl SlotView {
    /// A view of a freshly read record, validated in local epoch `epoch`.
    pub(crate) fn from_record(
        record: ModelRecord,
        addr: RemoteAddr,
        mode: CacheMode,
        epoch: u64,
    ) -> Self {
        let layout = record.layout();
        let mut view = Self {
            slot: record.slot,
            record: addr,
            layout,
            header: record.header,
            first_key: record.first_key,
            last_key: record.last_key,
            model: record.model,
            pivots: (mode == CacheMode::Pivots).then_some(record.pivots),
            lt: CachedLt::default(),
            slt: Vec::new(),
            fetched_at: crate::sync::time::Instant::now(),
            validated: Validated::new(epoch),
            referenced: Referenced::default(),
            evicted: false,
        };
        view.set_tables(record.header, &record.lt, &record.slt);
        view
    }

    /// The same view with new header, LT and SLT (read with the header first, then the tables),
    /// validated in local epoch `epoch`.
    pub(crate) fn with_tables(
        &self,
        header: ModelHeader,
        lt: &[LeafTableEntry],
        slt: &[LeafTableEntry],
        epoch: u64,
    ) -> Self {
        let mut view = self.clone();
        view.set_tables(header, lt, slt);
        view.fetched_at = crate::sync::time::Instant::now();
        view.validated = Validated::new(epoch);
        view
    }

    fn set_tables(&mut self, header: ModelHeader, lt: &[LeafTableEntry], slt: &[LeafTableEntry]) {
        self.header = header;
        self.lt = CachedLt::of(lt);
        let used = (header.slot_use() as usize).min(SLT_SLOTS - 1);
        self.slt = slt.iter().take(used + 1).copied().collect();
    }

    /// This view after a structural change the caller made under trained leaf `leaf`'s lock:
    /// `header` is the record's header just after the change's bump, `chain` the chain's entries
    /// as the change left them (LT entry first), `freed` an SLT slot the change marked freed.
    /// Only sound when the header the caller's own atomics returned shows that nothing else
    /// changed the record between this view's header and the change (ARCHITECTURE §6, "A
    /// writer's own changes"). `None` if the result does not hold together (the view then stays
    /// as it is, and the next writer re-reads the tables).
    pub(crate) fn after_change(
        &self,
        header: ModelHeader,
        leaf: u64,
        chain: &[LeafTableEntry],
        freed: Option<(u64, LeafTableEntry)>,
    ) -> Option<Self> {
        if self.evicted || leaf >= self.leaves() || chain.is_empty() {
            return None;
        }
        let mut view = self.clone();
        view.header = header;
        view.lt.set(leaf, chain[0], self.leaves());
        let used = (header.slot_use() as usize).min(SLT_SLOTS - 1);
        view.slt.resize(used + 1, LeafTableEntry::default());
        let mut set_slt = |at: usize, entry: LeafTableEntry| -> Option<()> {
            *view.slt.get_mut(at).filter(|_| at != 0)? = entry.unlocked();
            Some(())
        };
        for pair in chain.windows(2) {
            set_slt(usize::from(pair[0].synonym_ptr()), pair[1])?;
        }
        if let Some((at, entry)) = freed {
            set_slt(at as usize, entry)?;
        }
        let unlocked: ChainEntries = chain.iter().map(|e| e.unlocked()).collect();
        (view.chain(leaf)? == unlocked).then_some(view)
    }

    /// Number of trained leaves.
    pub(crate) fn leaves(&self) -> u64 {
        self.layout.leaves
    }

    /// Trained leaf `i`'s LT entry (lock bit clear).
    pub(crate) fn lt_entry(&self, i: u64) -> LeafTableEntry {
        self.lt.entry(i)
    }

    /// The entries of trained leaf `i`'s chain: its LT entry, then its synonyms. `None` if the
    /// cached tables are inconsistent (a pointer past the cached SLT, a freed slot, a cycle): the
    /// view is stale and must be refreshed.
    pub(crate) fn chain(&self, i: u64) -> Option<ChainEntries> {
        let mut chain = ChainEntries::new();
        self.chain_into(i, &mut chain).then_some(chain)
    }

    /// [`Self::chain`], appended to `out`; false (and `out` partly filled) if inconsistent.
    pub(crate) fn chain_into(&self, i: u64, out: &mut ChainEntries) -> bool {
        let mut entry = self.lt_entry(i);
        let start = out.len();
        out.push(entry);
        while entry.synonym_ptr() != 0 {
            let Some(&next) = self.slt.get(usize::from(entry.synonym_ptr())) else {
                return false;
            };
            entry = next;
            if entry.is_freed() || out.len() - start >= MAX_CHAIN {
                return false;
            }
            out.push(entry);
        }
        true
    }

    /// The trained leaf that owns `key` (pivots mode): the last whose pivot is ≤ `key`, searched
    /// inside the model's owner candidates (which provably contain it).
    pub(crate) fn owner(&self, key: u64) -> Option<u64> {
        let pivots = self.pivots.as_ref()?;
        Some(owner_among(pivots, &self.model, key))
    }

    /// The stub that replaces this view when the cache budget evicts it: the slot's first key
    /// and record (what the directory knows anyway), a one-leaf model and no tables. `None` if
    /// even that model cannot be built.
    pub(crate) fn evicted_stub(&self) -> Option<Self> {
        let model = LeafModel::train(self.model.params(), [[self.first_key]]).ok()?;
        Some(Self {
            slot: self.slot,
            record: self.record,
            layout: self.layout,
            header: self.header,
            first_key: self.first_key,
            last_key: self.last_key,
            model,
            pivots: None,
            lt: CachedLt::default(),
            slt: Vec::new(),
            fetched_at: self.fetched_at,
            // Its record stays as safe to read as the view's was: the epochs that keep it from
            // reuse (`crate::epoch`) are the same, and the renewer confirms a stub as a view.
            validated: self.validated.clone(),
            referenced: Referenced::default(),
            evicted: true,
        })
    }

    /// Bytes this view holds that a compute node must cache (not counting allocator overhead);
    /// none for an evicted stub, which holds only what the directory knows.
    pub(crate) fn cache_bytes(&self) -> u64 {
        if self.evicted {
            return 0;
        }
        let lt = self.lt.cache_bytes();
        let pivots = self.pivots.as_ref().map_or(0, |p| 8 * p.len() as u64);
        // Header word, first key, record address, and the model's segments.
        24 + 48 * self.model.segments().len() as u64
            + lt
            + pivots
            + 8 * self.slt.len().saturating_sub(1) as u64
    }
}

/// The owner of `key` among trained leaves with `pivots`, using `model` to narrow the search.
pub(crate) fn owner_among(pivots: &[u64], model: &LeafModel, key: u64) -> u64 {
    let range = model.owner_candidates(key);
    let (first, last) = (
        range.first as usize,
        (range.last as usize).min(pivots.len().saturating_sub(1)),
    );
    if first <= last
        && (first == 0 || pivots[first] <= key)
        && pivots.get(last + 1).is_none_or(|&p| p > key)
    {
        let within = pivots[first..=last].partition_point(|&p| p <= key);
        return (first + within).saturating_sub(1) as u64;
    }
    // Unreachable by the candidates' guarantee; searched in full rather than trusted.
    pivots.partition_point(|&p| p <= key).saturating_sub(1) as u64
}

#[cfg(not(loom))]
mod cell {
    use std::marker::PhantomData;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicPtr, Ordering};

    /// The current value of a cached thing (a slot's view, a node's slot directory), replaced
    /// atomically. A reader takes a counted reference ([`Cell::load`]), which it may keep across
    /// its operation's awaits without holding anything of its thread: the cell's own reference
    /// to a replaced value is released through crossbeam-epoch, once no thread can still be in
    /// the middle of a `load` of it.
    ///
    /// **Invariant.** The pointer is always `Arc::into_raw` of a value whose count includes one
    /// reference owned by the cell; that reference is released only by a function deferred when
    /// the value was unlinked, which crossbeam-epoch runs after every thread pinned at that time
    /// has unpinned. A `load` pins around its read of the pointer and its increment of the count,
    /// so the count it increments is never zero.
    #[derive(Debug)]
    pub(crate) struct Cell<T>(AtomicPtr<T>, PhantomData<Arc<T>>);

    // `T: 'static`: a replaced value is dropped whenever the epoch lets it, maybe after every
    // borrow it could hold has ended. `Send + Sync`: it is shared, and dropped on any thread.
    impl<T: Send + Sync + 'static> Cell<T> {
        pub(crate) fn new(value: impl Into<Arc<T>>) -> Self {
            Self(
                AtomicPtr::new(Arc::into_raw(value.into()).cast_mut()),
                PhantomData,
            )
        }

        /// The current value.
        pub(crate) fn load(&self) -> Arc<T> {
            self.with_in(&pin(), |value| value.counted())
        }

        /// `f` of the current value, borrowed under a pin the caller holds (one pin for several
        /// cells read in a row): no count is taken unless `f` asks for one
        /// ([`Borrowed::counted`]) — what a reader that never holds the value across a wait
        /// uses (a count is one more atomic, on a line that misses the cache).
        pub(crate) fn with_in<'g, R>(
            &'g self,
            _pinned: &'g Pinned,
            f: impl FnOnce(Borrowed<'g, T>) -> R,
        ) -> R {
            let raw = self.0.load(Ordering::Acquire);
            // SAFETY: `raw` came from `Arc::into_raw` (the invariant) and was read while this
            // thread is pinned (`_pinned`, borrowed for 'g): the cell's reference to it is
            // released only after the thread unpins, or when the cell is dropped (not before 'g
            // ends either: the cell is borrowed for it), so it lives at least as long as 'g.
            f(Borrowed(unsafe { &*raw }))
        }

        /// Installs `new` if the cell still holds `current`; false if another thread replaced it
        /// first (then the cell's reference to `new` is dropped). `current` is alive (borrowed),
        /// so no other live value can have its address: the pointer comparison cannot be fooled
        /// by a freed value's address reused. `new` may be shared already: a caller that keeps
        /// a count of it may use it whether or not it went in.
        pub(crate) fn replace(&self, current: &T, new: impl Into<Arc<T>>) -> bool {
            let new = Arc::into_raw(new.into()).cast_mut();
            let pinned = crossbeam_epoch::pin();
            let expected = std::ptr::from_ref(current).cast_mut();
            match self
                .0
                .compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(old) => {
                    let old = Unlinked(old);
                    // SAFETY: `old` is no longer reachable from the cell, so no new `load`
                    // can read it; a `load` that read it earlier is pinned, and the deferred
                    // release runs only after it unpins. `T: Send + Sync`, so the value may be
                    // dropped on whichever thread runs the deferred function.
                    unsafe { pinned.defer_unchecked(move || old.release()) };
                    true
                }
                Err(_) => {
                    // SAFETY: `new` came from `Arc::into_raw` above and was never published: the
                    // reference it owns is released here, once.
                    drop(unsafe { Arc::from_raw(new) });
                    false
                }
            }
        }
    }

    /// This thread pinned (crossbeam-epoch): while it is, no value a cell held when it was
    /// pinned is released.
    pub(crate) struct Pinned {
        _guard: crossbeam_epoch::Guard,
    }

    /// Pins this thread until the result is dropped.
    pub(crate) fn pin() -> Pinned {
        Pinned {
            _guard: crossbeam_epoch::pin(),
        }
    }

    /// A cell's value borrowed while its thread is pinned ([`Cell::with_in`]).
    pub(crate) struct Borrowed<'a, T>(&'a T);

    impl<T> std::ops::Deref for Borrowed<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0
        }
    }

    impl<'a, T> Borrowed<'a, T> {
        /// A value this thread holds a count of, lent as a cell's would be (a value built for
        /// the operation at hand, whether or not it went into its cell).
        pub(crate) fn of(value: &'a Arc<T>) -> Self {
            Self(value)
        }

        /// A counted reference to the value, to keep beyond the call.
        pub(crate) fn counted(&self) -> Arc<T> {
            let raw = std::ptr::from_ref(self.0);
            // SAFETY: a `Borrowed<'a>` is made by `Cell::with_in`, which borrows the cell and the
            // pin for 'a (`raw` is `Arc::into_raw`'s, the cell's invariant, and the cell's own
            // reference to it is not released within 'a), or by `Borrowed::of`, which borrows a
            // live `Arc` for 'a (`Arc::as_ptr` is the pointer `Arc::into_raw` gives). Either
            // way the count is at least one here.
            unsafe { Arc::increment_strong_count(raw) };
            // SAFETY: the reference just counted is ours to own, and `raw` is `Arc::into_raw`'s.
            unsafe { Arc::from_raw(raw) }
        }
    }

    /// The cell's reference to a value it no longer holds, until released.
    struct Unlinked<T>(*mut T);

    // SAFETY: it is only ever released (once), and `T: Send + Sync` wherever one is made
    // (`Cell::replace`): dropping the reference on another thread is what `Arc<T>` allows.
    unsafe impl<T: Send + Sync> Send for Unlinked<T> {}

    impl<T> Unlinked<T> {
        fn release(self) {
            // SAFETY: the pointer came from `Arc::into_raw` and this is the cell's reference
            // to it, released once (`self` is consumed).
            drop(unsafe { Arc::from_raw(self.0) });
        }
    }

    impl<T> Drop for Cell<T> {
        fn drop(&mut self) {
            // SAFETY: `drop` has exclusive access to the cell, whose pointer holds the cell's
            // own reference (the invariant); readers hold references of their own.
            drop(unsafe { Arc::from_raw(*self.0.get_mut()) });
        }
    }
}

/// Whether a view was used since the CLOCK hand last passed it (set by readers only when a
/// limit exists).
#[derive(Debug, Default)]
pub(crate) struct Referenced(AtomicBool);

impl Referenced {
    pub(crate) fn mark(&self) {
        if !self.0.load(Ordering::Relaxed) {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Clears the mark; whether it was set.
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

impl Clone for Referenced {
    /// A copy starts unmarked: it has not been used yet.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Referenced {
    /// Not part of what a view says about its record.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(loom)]
mod cell {
    use std::sync::{Arc, Mutex};

    /// Under loom, epochs are not modelled: a mutex around an `Arc` stands in for the cell. The
    /// mutex is never held across a loom operation, so it cannot block a loom thread.
    #[derive(Debug)]
    pub(crate) struct Cell<T>(Mutex<Arc<T>>);

    /// Epochs are not modelled: nothing to pin.
    pub(crate) struct Pinned;

    pub(crate) fn pin() -> Pinned {
        Pinned
    }

    /// A cell's value, counted (what a borrow under a pin stands for).
    pub(crate) struct Borrowed<'a, T>(Arc<T>, std::marker::PhantomData<&'a ()>);

    impl<T> std::ops::Deref for Borrowed<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<'a, T> Borrowed<'a, T> {
        pub(crate) fn of(value: &'a Arc<T>) -> Self {
            Self(Arc::clone(value), std::marker::PhantomData)
        }

        pub(crate) fn counted(&self) -> Arc<T> {
            Arc::clone(&self.0)
        }
    }

    impl<T> Cell<T> {
        pub(crate) fn new(value: impl Into<Arc<T>>) -> Self {
            Self(Mutex::new(value.into()))
        }

        pub(crate) fn load(&self) -> Arc<T> {
            Arc::clone(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
        }

        pub(crate) fn with_in<'g, R>(
            &'g self,
            _pinned: &'g Pinned,
            f: impl FnOnce(Borrowed<'g, T>) -> R,
        ) -> R {
            f(Borrowed(self.load(), std::marker::PhantomData))
        }

        pub(crate) fn replace(&self, current: &T, new: impl Into<Arc<T>>) -> bool {
            let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if !std::ptr::eq(Arc::as_ptr(&slot), current) {
                return false;
            }
            *slot = new.into();
            true
        }
    }
}

pub(crate) use cell::{Borrowed, Cell, Pinned, pin};

/// A view as an operation holds it: counted, so it stays valid across the operation's awaits
/// however the cell changes meanwhile.
pub(crate) type ViewRef<T = SlotView> = std::sync::Arc<T>;

/// The cell holding a slot's view.
pub(crate) type ViewCell = Cell<SlotView>;

/// One memory node's slot directory as a compute node caches it: which slot serves a key. Slot
/// first keys never change and retraining only appends slots (splitting one), so a directory
/// older than the pool routes every key to a slot whose range starts at or below it; the
/// record's last key tells the compute node when a newer slot serves the key (see
/// `Client::route`).
#[derive(Debug)]
pub(crate) struct Directory {
    top: learned_model::TopLevelIndex,
    /// The slot id of each rank (slots in first-key order).
    ids: Vec<u64>,
    /// Slots published when it was read.
    pub(crate) count: u64,
}

impl Directory {
    /// The directory of a slot table (by slot id: record address, first key).
    pub(crate) fn new(table: &[(RemoteAddr, u64)]) -> Result<Self, learned_model::TrainError> {
        let mut order: Vec<(u64, u64)> = table
            .iter()
            .enumerate()
            .map(|(slot, &(_, first))| (first, slot as u64))
            .collect();
        order.sort_unstable();
        Ok(Self {
            top: learned_model::TopLevelIndex::new(order.iter().map(|o| o.0).collect())?,
            ids: order.iter().map(|o| o.1).collect(),
            count: table.len() as u64,
        })
    }

    /// The slot serving `key` as far as this directory knows, and its rank (its place in
    /// first-key order).
    pub(crate) fn slot_of(&self, key: u64) -> (u64, usize) {
        let rank = self.top.slot_of(key);
        (self.ids[rank], rank)
    }

    /// The smallest slot first key above `key`, if any. `rank` is where `key` is expected among
    /// the first keys (the rank of the slot it is the first key of): then its successor is the
    /// answer, read without a search.
    pub(crate) fn next_first_after(&self, key: u64, rank: usize) -> Option<u64> {
        let firsts = self.top.first_keys();
        if firsts.get(rank) == Some(&key) {
            match firsts.get(rank + 1) {
                Some(&next) if next > key => return Some(next),
                None => return None,
                Some(_) => {}
            }
        }
        firsts.get(firsts.partition_point(|&f| f <= key)).copied()
    }

    /// Bytes it takes to cache (first keys, slot ids, top-level segments).
    pub(crate) fn cache_bytes(&self) -> u64 {
        16 * self.ids.len() as u64 + 48 * self.top.segment_count() as u64
    }
}

/// A node's slot views by slot id, as many as its slot table can hold; a slot's cell is filled
/// when the slot is first used.
pub(crate) type SlotCells = Vec<std::sync::OnceLock<ViewCell>>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Counts its drops.
    struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A value loaded and held (as an operation holds its view across its awaits) stays valid
    /// after the cell moves on, and does not keep the values replaced meanwhile alive: the
    /// holder has no epoch pinned, so they are freed as the epoch advances. (Held under an
    /// epoch guard, as views once were, none of them would be.)
    #[test]
    fn a_held_value_stays_valid_and_holds_no_other_back() {
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let cell = Cell::new((0u64, Counted(std::sync::Arc::clone(&dropped))));
        let held = cell.load();
        const REPLACED: usize = 1_000;
        for i in 1..=REPLACED as u64 {
            let current = cell.load();
            assert!(cell.replace(&current, (i, Counted(std::sync::Arc::clone(&dropped)))));
            assert!(
                !cell.replace(&current, (0, Counted(std::sync::Arc::clone(&dropped)))),
                "a replaced value is not current"
            );
        }
        // The refused replacements are dropped at once; of the replaced values, all but the held
        // one and those a few epochs have not yet passed, once other threads (tests running
        // beside this one, briefly pinned) let the epoch advance.
        let freed = || dropped.load(Ordering::Relaxed) - REPLACED;
        let started = std::time::Instant::now();
        while freed() < REPLACED - 300 && started.elapsed() < std::time::Duration::from_secs(10) {
            crossbeam_epoch::pin().flush();
            std::thread::yield_now();
        }
        assert_eq!(held.0, 0, "the held value is intact");
        assert_eq!(cell.load().0, REPLACED as u64);
        let freed = freed();
        assert!(
            freed >= REPLACED - 300,
            "only {freed} of {REPLACED} replaced values freed while one was held"
        );
        drop(held);
        drop(cell);
    }

    fn entry(leaf: u64) -> LeafTableEntry {
        LeafTableEntry::new(leaf).expect("fits")
    }

    /// Every entry comes back as it was (lock bits cleared), and the runs number `runs`.
    fn round_trips(lt: &[LeafTableEntry], runs: usize, exceptions: usize) {
        let cached = CachedLt::of(lt);
        for (i, e) in lt.iter().enumerate() {
            assert_eq!(cached.entry(i as u64), e.unlocked(), "entry {i}");
        }
        match &cached {
            CachedLt::Runs {
                runs: r,
                exceptions: e,
            } => assert_eq!((r.len(), e.len()), (runs, exceptions)),
            CachedLt::Plain(_) => panic!("plain, not {runs} runs and {exceptions} exceptions"),
        }
        assert_eq!(cached.cache_bytes(), 16 * (runs + exceptions) as u64);
    }

    #[test]
    fn a_bulk_loaded_table_is_one_run_and_changed_chains_are_listed() {
        let mut lt: Vec<LeafTableEntry> = (100..164).map(entry).collect();
        round_trips(&lt, 1, 0);
        // Splits linked synonyms to two chains; a writer holds a lock.
        lt[0] = lt[0].with_synonym(3);
        lt[40] = lt[40].with_synonym(1);
        lt[41] = lt[41].locked_by(9);
        round_trips(&lt, 1, 2);
    }

    #[test]
    fn a_retrained_table_is_a_run_between_absorbed_synonyms() {
        // Chains [100, 900], [101], [102, 901, 902], [103] retrained into trained leaves in key
        // order, the first with a synonym since.
        let lt: Vec<LeafTableEntry> = [100, 900, 101, 102, 901, 902, 103]
            .into_iter()
            .map(entry)
            .collect();
        // Runs 100; 900; 101-102; 901-902; 103: more than the table itself, so it stays plain.
        let cached = CachedLt::of(&lt);
        assert!(matches!(cached, CachedLt::Plain(_)));
        assert_eq!(cached.cache_bytes(), 8 * lt.len() as u64);
        for (i, e) in lt.iter().enumerate() {
            assert_eq!(cached.entry(i as u64), *e);
        }
        // The same shape in a table of 64: four jumps, a run each.
        let mut long: Vec<LeafTableEntry> = (100..130).map(entry).collect();
        long.extend((900..902).map(entry));
        long.extend((130..160).map(entry));
        long.extend((902..904).map(entry));
        round_trips(&long, 4, 0);
        let mut linked = long.clone();
        linked[30] = linked[30].with_synonym(5);
        // 900 is listed apart; 901 then starts a run of its own.
        round_trips(&linked, 4, 1);
        // An empty table has no run.
        round_trips(&[], 0, 0);
    }

    #[test]
    fn setting_entries_keeps_runs_until_the_plain_table_is_smaller() {
        let lt: Vec<LeafTableEntry> = (100..108).map(entry).collect();
        let mut cached = CachedLt::of(&lt);
        let mut expected = lt.clone();
        // A link listed apart; undone, it falls back into its run.
        cached.set(2, lt[2].with_synonym(4).locked_by(3), 8);
        expected[2] = lt[2].with_synonym(4);
        for (i, e) in expected.iter().enumerate() {
            assert_eq!(cached.entry(i as u64), *e, "entry {i}");
        }
        assert_eq!(cached.cache_bytes(), 32);
        cached.set(2, lt[2], 8);
        assert_eq!(cached, CachedLt::of(&lt));
        // Four exceptions and the run take more than the eight entries: plain.
        for i in [1, 3, 5, 7] {
            cached.set(i, lt[i as usize].with_synonym(9), 8);
            expected[i as usize] = lt[i as usize].with_synonym(9);
        }
        expected[2] = lt[2];
        assert!(matches!(cached, CachedLt::Plain(_)));
        for (i, e) in expected.iter().enumerate() {
            assert_eq!(cached.entry(i as u64), *e, "entry {i}");
        }
    }
}
