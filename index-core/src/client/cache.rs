//! The compute node's cache upkeep: routing a key to a cached view, reloading views and the
//! directory, the read batch of leaves and header words, and judging from a header read after
//! the leaves whether what was read through a cached view is complete (ARCHITECTURE §6).

use leaf_store::{Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, SLT_SLOTS, le_word};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::store::NodeCache;
use crate::view::{Borrowed, ChainEntries, Pinned, SlotView, ViewRef};

use super::*;

/// The `keep` of a shrink that protects no view (no operation is about to use one).
const NO_VIEW_KEPT: (usize, u64) = (usize::MAX, u64::MAX);

impl<E: Endpoint> Client<E> {
    /// READs the leaves `leaves` of `layout`'s node, then the words at `words` (header words,
    /// and for a lean-mode scan a pivot before them), in one batch, into `self.buf` (leaf `i` at
    /// `i · leaf_bytes`; the buffer may be longer); returns the words. Leaves come before
    /// headers: if a header read agrees with the cached one, no split or unlink of those chains
    /// had bumped it before the leaves were read, so the cached chains were complete (see the
    /// write protocol).
    pub(super) async fn read_batch(
        &mut self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        words: &[RemoteAddr],
    ) -> Result<Words, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let leaf_part = leaves.len() * leaf_bytes;
        let used = leaf_part + 8 * words.len();
        // Grown, never cleared: every byte of the used part is read into, and what lies beyond
        // it (an earlier, longer batch's) is never looked at — readers zip it with `leaves`.
        if self.buf.len() < used {
            self.buf.resize(used, 0);
        }
        let (leaf_buf, word_buf) = self.buf[..used].split_at_mut(leaf_part);
        let mut verbs: smallvec::SmallVec<[Verb<'_>; 12]> = smallvec::SmallVec::new();
        for (entry, chunk) in leaves.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(layout.leaf_addr(entry.leaf_num()), chunk));
        }
        for (&at, chunk) in words.iter().zip(word_buf.chunks_exact_mut(8)) {
            verbs.push(Verb::read(at, chunk));
        }
        wait::batches(&mut self.ep, self.waiting, &mut verbs).await?;
        drop(verbs);
        if words.is_empty() {
            return Ok(Words::new());
        }
        Ok(self.buf[leaf_part..used]
            .chunks_exact(8)
            .map(|c| le_word(c, 0))
            .collect())
    }

    /// Whether data read through `views` (slot, record) before this call is complete although
    /// their headers showed them retired: the retrainer retires a record *before* it points the
    /// slot table at the new one, so while the table still names the record, no compute node can
    /// have changed a chain through the new record. A split also publishes a new slot before
    /// the redirect, and compute nodes write through it at once: so the data is complete only if
    /// no slot was published beyond the `known` ones of the directory the views were routed by
    /// (the slot count is read here too). If one was, the node's directory is read again, and
    /// every view counts as not current. One batch of slot-table READs (two more for a
    /// directory).
    pub(super) fn still_current(
        &mut self,
        node: &NodeCache,
        views: &[(u64, RemoteAddr)],
        known: u64,
    ) -> Result<Vec<bool>, IndexError> {
        let layout = &node.layout;
        let mut words = vec![0u8; 8 * (views.len() + 1)];
        let (entries, count) = words.split_at_mut(8 * views.len());
        let mut verbs: Vec<Verb<'_>> = views
            .iter()
            .zip(entries.chunks_exact_mut(8))
            .map(|(&(slot, _), chunk)| Verb::read(layout.slot_entry_addr(slot), chunk))
            .collect();
        verbs.push(Verb::read(layout.slot_count_addr(), count));
        self.ep.batches(&mut verbs)?;
        drop(verbs);
        #[cfg(loom)]
        let known = if self.caches.broken.confirm_slot_count {
            known
        } else {
            u64::MAX
        };
        if le_word(&words, views.len()) > known {
            self.reload_directory(node)?;
            return Ok(vec![false; views.len()]);
        }
        Ok(views
            .iter()
            .zip(words.chunks_exact(8))
            .map(|(&(_, record), w)| RemoteAddr::unpack(le_word(w, 0)) == record)
            .collect())
    }

    /// Reads the node's slot table and installs it as the node's directory if it holds more
    /// slots than the cached one. Whether it did.
    pub(super) fn reload_directory(&mut self, node: &NodeCache) -> Result<bool, IndexError> {
        self.directory_reloads += 1;
        let table = leaf_store::read_slot_table(&mut self.ep, &node.layout)?;
        let cached = node.directory.load();
        if table.len() as u64 <= cached.count {
            return Ok(false);
        }
        let fresh = crate::view::Directory::new(&table).map_err(|e| {
            IndexError::Layout(LeafStoreError::CorruptRecord {
                slot: table.len() as u64,
                reason: format!("slot first keys: {e}"),
            })
        })?;
        let budget = &self.caches.budget;
        let (added, removed) = (fresh.cache_bytes(), cached.cache_bytes());
        if budget.exchange(added, removed, || node.directory.replace(&cached, fresh)) {
            // A larger directory (a slot split) makes room among the views.
            budget.shrink(|at| self.caches.cell_at(at), NO_VIEW_KEPT);
        }
        Ok(true)
    }

    /// Decodes `leaves`, as the last [`Self::read_batch`] read them; `None` if one was torn.
    pub(super) fn decode_leaves(
        &self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
    ) -> Result<Option<Vec<Leaf>>, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let mut out = Vec::with_capacity(leaves.len());
        for (entry, chunk) in leaves.iter().zip(self.buf.chunks_exact(leaf_bytes)) {
            match Leaf::decode(entry.leaf_num(), chunk) {
                Ok(leaf) => out.push(leaf),
                Err(LeafStoreError::TornLeaf { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Some(out))
    }

    /// Re-reads a slot's header, then its LT and SLT (header first: a header that shows a bump
    /// proves the tables read after it include the change that bump published), and installs
    /// the new view. A retired record is replaced by the slot's current one.
    pub(super) fn refresh(&mut self, node: &NodeCache, stale: &SlotView) -> Result<(), IndexError> {
        let fresh = self.fetch_view(node, stale)?;
        if let Some(cell) = node.cell(stale.slot) {
            self.install(node, cell, stale, fresh);
        }
        Ok(())
    }

    /// Replaces `current` by `fresh` in `cell` (if it still holds it), within the cache budget:
    /// `fresh` goes in whole (this operation is about to use it), and the other views are shrunk
    /// while the budget is exceeded (`crate::budget`). Returns `fresh`, counted, whether or not
    /// it went in.
    pub(super) fn install(
        &self,
        node: &NodeCache,
        cell: &crate::view::ViewCell,
        current: &SlotView,
        fresh: SlotView,
    ) -> ViewRef {
        let slot = fresh.slot;
        let fresh = ViewRef::new(fresh);
        let budget = &self.caches.budget;
        budget.replace(cell, current, ViewRef::clone(&fresh), (node.position, slot));
        budget.shrink(|at| self.caches.cell_at(at), (node.position, slot));
        fresh
    }

    /// A view built from a snapshot read now (see [`Self::refresh`]). Writers holding a lock use
    /// the view they read themselves: the cell may meanwhile hold another thread's view, built
    /// from a snapshot older than the lock.
    ///
    /// Reads the LT and the SLT's used prefix (as last known, plus a margin); if the header shows
    /// more SLT slots in use, a second READ fetches the rest. Every table word is read after the
    /// header either way.
    pub(super) fn fetch_view(
        &mut self,
        node: &NodeCache,
        stale: &SlotView,
    ) -> Result<SlotView, IndexError> {
        const MARGIN: usize = 8;
        let leaves = stale.leaves() as usize;
        let known = (stale.header.slot_use() as usize + 1 + MARGIN).min(SLT_SLOTS);
        // Header and slot id: a record retired since the view was built, or (were the view not
        // confirmed in this operation's epoch) reclaimed and reused, shows the retired flag,
        // another slot or another generation. Generations wrap: the epoch, not this check, is
        // what excludes reuse.
        let mut fixed = [0u8; 16];
        let mut tables = vec![0u8; 8 * (leaves + SLT_SLOTS)];
        let (first, rest) = tables.split_at_mut(8 * (leaves + known));
        let mut verbs = [
            Verb::read(stale.record, &mut fixed),
            Verb::read(stale.record.saturating_add(stale.layout.lt_entry(0)), first),
        ];
        self.ep.batches(&mut verbs)?;
        let header = ModelHeader::from_raw(le_word(&fixed, 0));
        if header.is_retired()
            || le_word(&fixed, 1) != stale.slot
            || header.generation() != stale.header.generation()
        {
            return self.reload(node, stale.slot);
        }
        let used = (header.slot_use() as usize + 1).min(SLT_SLOTS);
        if used > known {
            let at = stale
                .record
                .saturating_add(stale.layout.slt_entry(known as u64));
            self.ep.read(at, &mut rest[..8 * (used - known)])?;
        }
        let entries: Vec<LeafTableEntry> = tables
            .chunks_exact(8)
            .map(|c| LeafTableEntry::from_raw(le_word(c, 0)))
            .collect();
        let (lt, slt) = entries.split_at(stale.leaves() as usize);
        Ok(stale.with_tables(header, lt, slt, self.op_epoch))
    }

    /// Reads slot `slot`'s current record from the slot table.
    pub(super) fn reload(&mut self, node: &NodeCache, slot: u64) -> Result<SlotView, IndexError> {
        let addr = RemoteAddr::unpack(self.ep.read_word(node.layout.slot_entry_addr(slot))?);
        let record = leaf_store::read_record(&mut self.ep, &node.layout, slot, addr)?;
        Ok(SlotView::from_record(
            record,
            addr,
            self.caches.config.cache_mode,
            self.op_epoch,
        ))
    }

    /// Slot `slot`'s cached view, reloaded from the slot table first if it was not validated in
    /// this operation's epoch (its record may have been retired and, once every compute node has
    /// moved past that epoch, reused — see `crate::membership`); counted, to hold across waits.
    pub(super) fn view(&mut self, node: &NodeCache, slot: u64) -> Result<ViewRef, IndexError> {
        self.view_with(node, slot, &crate::view::pin(), |view| view.counted())
    }

    /// `take` of slot `slot`'s view as [`Self::view`] finds it, borrowed under `pinned` (no
    /// count: what a GET takes is copied out). A view this operation had to read itself is
    /// taken whether or not it stayed in its cell (another thread may replace it, or the cache
    /// budget shrink it, before it could be taken from there): at most one reload per call,
    /// however busy the cell.
    pub(super) fn view_with<'g, R>(
        &mut self,
        node: &'g NodeCache,
        slot: u64,
        pinned: &'g Pinned,
        mut take: impl FnMut(Borrowed<'_, SlotView>) -> R,
    ) -> Result<R, IndexError> {
        let Some(cell) = node.cell(slot) else {
            // First use of a slot published since this compute node started: the view read is
            // taken whichever thread's view the new cell holds.
            let fresh = ViewRef::new(self.reload(node, slot)?);
            let budget = &self.caches.budget;
            if node
                .cell_or_install(slot, ViewRef::clone(&fresh), budget)
                .is_none()
            {
                return Err(IndexError::Layout(LeafStoreError::CorruptRecord {
                    slot,
                    reason: "slot beyond the slot table's capacity".into(),
                }));
            }
            budget.shrink(|at| self.caches.cell_at(at), (node.position, slot));
            return Ok(take(Borrowed::of(&fresh)));
        };
        let (op_epoch, budget) = (self.op_epoch, &self.caches.budget);
        let stale = match cell.with_in(pinned, |view| {
            if view.validated.get() >= op_epoch && !view.evicted {
                budget.touch(&view);
                Ok(take(view))
            } else {
                Err(view)
            }
        }) {
            Ok(taken) => return Ok(taken),
            Err(stale) => stale,
        };
        let fresh = if stale.validated.get() >= op_epoch {
            // An evicted view whose record is still safe to read: read it again with the
            // slot-table entry that must still name it, one round trip (its layout and header
            // are known).
            match leaf_store::read_record_if_current(
                &mut self.ep,
                &node.layout,
                slot,
                stale.record,
                stale.layout,
                stale.header,
            ) {
                Ok(Some(record)) => SlotView::from_record(
                    record,
                    stale.record,
                    self.caches.config.cache_mode,
                    op_epoch,
                ),
                Ok(None) | Err(LeafStoreError::CorruptRecord { .. }) => self.reload(node, slot)?,
                Err(e) => return Err(e.into()),
            }
        } else {
            self.reload(node, slot)?
        };
        let fresh = self.install(node, cell, &stale, fresh);
        Ok(take(Borrowed::of(&fresh)))
    }

    /// What [`route!`] takes of a view to hold it across waits: counted, with the slot count of
    /// the directory that routed it (for [`Self::still_current`]) and the last key it serves.
    pub(super) fn held(view: Borrowed<'_, SlotView>, routing: Routing<'_>) -> Routed {
        Routed {
            end: routing.end(&view),
            view: view.counted(),
            known: routing.known(),
        }
    }

    /// `take` of the view of the slot serving `key` (borrowed for the call) and of the
    /// directory that routed it ([`Routing`]), once [`Self::route_cached`] found that the cached
    /// directory routes `key` to slot `stale`, which ends below it. Slots are split by
    /// retraining: the cached directory may predate a split, and then the record it leads to
    /// ends below `key` (records carry their last key). The directory is then read again (two
    /// round trips) and the key routed again.
    pub(super) async fn route_with<R>(
        &mut self,
        node: &NodeCache,
        key: u64,
        mut stale: u64,
        mut take: impl FnMut(Borrowed<'_, SlotView>, Routing<'_>) -> R,
    ) -> Result<R, IndexError> {
        let mut backoff = crate::backoff::Backoff::new(self.caches.config.wait_limit);
        let attempts = self.caches.config.max_attempts;
        for _ in 0..attempts {
            if !self.reload_directory(node)?
                && !super::wait::pause(&mut backoff, self.waiting).await
            {
                // The slot table names no slot serving `key` beyond this one's records: only a
                // split cut short could do that (the memory node publishes the new slot before
                // redirecting the old one).
                return Err(IndexError::RetrainingTimeout {
                    node: node.info.id,
                    slot: stale,
                });
            }
            stale = match self.route_cached(node, key, &mut take)? {
                Ok(taken) => return Ok(taken),
                Err(slot) => slot,
            };
        }
        Err(IndexError::TooManyRetries(attempts))
    }

    /// One step of [`Self::route_with`], by the cached directory alone (no wait): `Err(slot)` if
    /// the slot it routes `key` to ends below `key` (the directory predates a split). A caller
    /// tries it first and falls back to `route_with` (which goes on from that slot): what never
    /// waits is then never a future of its own.
    pub(super) fn route_cached<R>(
        &mut self,
        node: &NodeCache,
        key: u64,
        take: &mut impl FnMut(Borrowed<'_, SlotView>, Routing<'_>) -> R,
    ) -> Result<Result<R, u64>, IndexError> {
        // The directory and the view are borrowed for this step alone (never across a wait),
        // under one pin.
        let pinned = crate::view::pin();
        node.directory.with_in(&pinned, |directory| {
            let (slot, rank) = directory.slot_of(key);
            self.view_with(node, slot, &pinned, |view| {
                (key <= view.last_key).then(|| {
                    take(
                        view,
                        Routing {
                            directory: &directory,
                            rank,
                        },
                    )
                })
            })
            .map(|taken| taken.ok_or(slot))
        })
    }

    /// The chains a GET of `key` reads: the owner's (a view with pivots) or every candidate's
    /// (lean mode, or a view the cache budget shrank).
    /// Written into `out` (emptied first); false if the view's tables are inconsistent.
    pub(super) fn chains_for(view: &SlotView, key: u64, out: &mut ChainEntries) -> bool {
        out.clear();
        match view.owner(key) {
            Some(owner) => view.chain_into(owner, out),
            None => view
                .model
                .owner_candidates(key)
                .iter()
                .all(|leaf| view.chain_into(leaf, out)),
        }
    }
}

/// `$take` of the view of the slot serving `$key` and of the directory that routed it, as
/// [`Client::route_with`] finds them, in an async fn of the client: [`Client::route_cached`]
/// first, then (if the cached directory predates a split) `route_with`, so that routing that
/// needs no wait is no future of its own. `Client::held` takes a view to keep.
macro_rules! route {
    ($client:expr, $node:expr, $key:expr, $take:expr) => {{
        let mut take = $take;
        match $client.route_cached($node, $key, &mut take)? {
            Ok(taken) => taken,
            Err(stale) => $client.route_with($node, $key, stale, &mut take).await?,
        }
    }};
}
pub(super) use route;

/// The directory that routed a key, as [`Client::route_with`] shows it with the view.
pub(super) struct Routing<'d> {
    directory: &'d crate::view::Directory,
    /// The routed slot's rank in the directory.
    rank: usize,
}

impl Routing<'_> {
    /// Slots the directory knew of.
    pub(super) fn known(&self) -> u64 {
        self.directory.count
    }

    /// The last key `view`'s record serves as far as the directory knows: an old record whose
    /// split is published (not yet redirected) still names the new slot's leaves, which may have
    /// changed through the new slot.
    pub(super) fn end(&self, view: &SlotView) -> u64 {
        self.directory
            .next_first_after(view.first_key, self.rank)
            .map_or(view.last_key, |next| view.last_key.min(next - 1))
    }
}

/// A routed view and the slot count of the directory that routed it.
pub(super) struct Routed {
    pub(super) view: crate::view::ViewRef,
    /// Slots the routing directory knew of.
    pub(super) known: u64,
    /// The last key the view's record serves as far as the routing directory knows.
    pub(super) end: u64,
}

/// Words read after the leaves of a read batch (headers, a pivot): inline, no allocation.
pub(super) type Words = smallvec::SmallVec<[u64; 4]>;

/// What a header read in a batch says about data read through a cached view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Freshness {
    /// The chains are as cached: the data read is complete.
    Fresh,
    /// A chain changed (or the record was replaced and reused): refresh and read again.
    Stale,
    /// As cached, but the record is retired: complete only if the slot table still names it
    /// (see [`Client::still_current`]).
    Retired,
}

impl Freshness {
    /// Judges the header `seen` (read after the leaves) against the view's `cached` one. A
    /// frozen record's data is as good as before the freeze: the retired flag, not the locked
    /// one, is what announces the swap.
    pub(super) fn of(cached: ModelHeader, seen: ModelHeader) -> Self {
        if seen.without_flags() != cached.without_flags() {
            Freshness::Stale
        } else if seen.is_retired() {
            Freshness::Retired
        } else {
            Freshness::Fresh
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use leaf_store::{BulkLoadConfig, required_pool_bytes};
    use sim_transport::{SimConfig, SimTransport};

    use crate::{Store, StoreConfig, bootstrap};

    /// A view this operation reads itself is the one it takes, however busy its cell: here
    /// another thread replaces every cell's view by an evicted stub of it as fast as it can
    /// (each a new value, so a reader's fresh view rarely stays in its cell until it is taken),
    /// while each round trip takes 100 µs. A reader that took views only from their cell would
    /// reload turn after turn and give up.
    #[test]
    fn a_view_read_by_the_operation_is_taken_however_busy_its_cell() {
        let load = BulkLoadConfig::default();
        let pairs: Vec<(u64, u64)> = (1..=2_000u64).map(|k| (10 * k, k)).collect();
        let size = required_pool_bytes(2_000, &load, 2).next_multiple_of(8);
        let sim = SimConfig {
            batch_delay: Some(Duration::from_micros(100)),
            ..SimConfig::default()
        };
        let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
        bootstrap(&transport, pairs, &load).expect("load");
        let store = Store::open(transport, StoreConfig::default()).expect("open");
        let mut client = store.client().expect("client");
        let caches = std::sync::Arc::clone(store.caches());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    for slot in 0..store.slots() {
                        if let Some(cell) = caches.cell_at((0, slot)) {
                            let view = cell.load();
                            if let Some(stub) = view.evicted_stub() {
                                cell.replace(&view, stub);
                            }
                        }
                    }
                }
            });
            let gets = (1..=200u64)
                .map(|k| client.get(100 * k))
                .collect::<Vec<_>>();
            stop.store(true, Ordering::Relaxed);
            for (k, got) in (1..=200u64).zip(gets) {
                assert_eq!(got.expect("get"), Some(10 * k), "key {}", 100 * k);
            }
        });
    }
}
