//! The read path: GET, SCAN, and keeping cached views fresh.
use std::sync::Arc;

use leaf_store::{Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, SLT_SLOTS, le_word};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::store::NodeCache;
use crate::view::{ChainEntries, Guard, SlotView, pin};
use crate::{CacheMode, IndexError};

use super::*;

impl<E: Endpoint> Client<E> {
    // ----- reading -------------------------------------------------------------------------------

    /// READs the leaves `leaves` of `layout`'s node, then the words at `words` (header words,
    /// and for a lean-mode scan a pivot before them), in one batch, into `self.buf` (leaf `i` at
    /// `i · leaf_bytes`); returns the words. Leaves come before headers: if a header read agrees
    /// with the cached one, no split or unlink of those chains had bumped it before the leaves
    /// were read, so the cached chains were complete (see the write protocol).
    pub(super) fn read_batch(
        &mut self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        words: &[RemoteAddr],
    ) -> Result<Words, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let leaf_part = leaves.len() * leaf_bytes;
        self.buf.clear();
        self.buf.resize(leaf_part + 8 * words.len(), 0);
        let (leaf_buf, word_buf) = self.buf.split_at_mut(leaf_part);
        let mut verbs: smallvec::SmallVec<[Verb<'_>; 12]> = smallvec::SmallVec::new();
        for (entry, chunk) in leaves.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(layout.leaf_addr(entry.leaf_num()), chunk));
        }
        for (&at, chunk) in words.iter().zip(word_buf.chunks_exact_mut(8)) {
            verbs.push(Verb::read(at, chunk));
        }
        self.ep.batches(&mut verbs)?;
        drop(verbs);
        Ok(self.buf[leaf_part..]
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
        guard: &Guard,
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
        let known = if self.caches.config.confirm_slot_count {
            known
        } else {
            u64::MAX
        };
        if le_word(&words, views.len()) > known {
            self.reload_directory(node, guard)?;
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
    pub(super) fn reload_directory(
        &mut self,
        node: &NodeCache,
        guard: &Guard,
    ) -> Result<bool, IndexError> {
        self.directory_reloads += 1;
        let table = leaf_store::read_slot_table(&mut self.ep, &node.layout)?;
        let cached = node.directory.load(guard);
        if table.len() as u64 <= cached.count {
            return Ok(false);
        }
        let fresh = crate::view::Directory::new(&table).map_err(|e| {
            IndexError::Layout(LeafStoreError::CorruptRecord {
                slot: table.len() as u64,
                reason: format!("slot first keys: {e}"),
            })
        })?;
        node.directory.replace(&cached, fresh, guard);
        Ok(true)
    }

    /// Looks `key` up in the leaves last read by [`Self::read_batch`], without decoding them.
    /// Keys are unique across a chain except while a split is in progress, when both copies carry
    /// the same value: a hit in a whole leaf is the answer even if another leaf was torn.
    pub(super) fn lookup_in_batch(
        &self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        key: u64,
    ) -> Result<Lookup, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let mut torn = false;
        for (entry, chunk) in leaves.iter().zip(self.buf.chunks_exact(leaf_bytes)) {
            match Leaf::lookup(entry.leaf_num(), chunk, key) {
                Ok(Some(value)) => return Ok(Lookup::Found(value)),
                Ok(None) => {}
                Err(LeafStoreError::TornLeaf { .. }) => torn = true,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(if torn { Lookup::Torn } else { Lookup::Absent })
    }

    /// Decodes the `count` leaves last read by [`Self::read_batch`]; `None` if one was torn.
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
    pub(super) fn refresh(
        &mut self,
        node: &NodeCache,
        stale: &SlotView,
        guard: &Guard,
    ) -> Result<(), IndexError> {
        let fresh = self.fetch_view(node, stale)?;
        if let Some(cell) = node.cell(stale.slot) {
            cell.replace(stale, fresh, guard);
        }
        Ok(())
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
            Verb::read(offset(stale.record, stale.layout.lt_entry(0)), first),
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
            let at = offset(stale.record, stale.layout.slt_entry(known as u64));
            self.ep.read(at, &mut rest[..8 * (used - known)])?;
        }
        let entries: Vec<LeafTableEntry> = tables
            .chunks_exact(8)
            .map(|c| LeafTableEntry::from_raw(le_word(c, 0)))
            .collect();
        let (lt, slt) = entries.split_at(stale.leaves() as usize);
        Ok(stale.with_tables(
            header,
            lt,
            slt,
            self.caches.config.cache_mode,
            self.op_epoch,
        ))
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
    /// moved past that epoch, reused — see `crate::membership`).
    pub(super) fn view<'g>(
        &mut self,
        node: &NodeCache,
        slot: u64,
        guard: &'g Guard,
    ) -> Result<crate::view::ViewRef<'g>, IndexError> {
        for _ in 0..16 {
            let Some(cell) = node.cell(slot) else {
                // First use of a slot published since this compute node started.
                let fresh = self.reload(node, slot)?;
                if node.cell_or_install(slot, fresh).is_none() {
                    return Err(IndexError::Layout(LeafStoreError::CorruptRecord {
                        slot,
                        reason: "slot beyond the slot table's capacity".into(),
                    }));
                }
                continue;
            };
            let loaded = cell.load(guard);
            if loaded.validated.get() >= self.op_epoch {
                return Ok(loaded);
            }
            let fresh = self.reload(node, slot)?;
            cell.replace(&loaded, fresh, guard);
        }
        Err(IndexError::TooManyRetries(16))
    }

    /// The view of the slot serving `key` (see [`Self::view`]), and the slot count of the
    /// directory that routed it (for [`Self::still_current`]). Slots are split by retraining:
    /// the cached directory may predate a split, and then the record it leads to ends below
    /// `key` (records carry their last key). The directory is then read again (two round trips)
    /// and the key routed again.
    pub(super) fn route<'g>(
        &mut self,
        node: &NodeCache,
        key: u64,
        guard: &'g Guard,
    ) -> Result<Routed<'g>, IndexError> {
        let mut backoff = crate::backoff::Backoff::new(self.caches.config.wait_limit);
        let attempts = self.caches.config.max_attempts;
        for _ in 0..attempts {
            let directory = node.directory.load(guard);
            let slot = directory.slot_of(key);
            let view = self.view(node, slot, guard)?;
            if key <= view.last_key {
                // What the record serves as far as this directory knows: an old record whose
                // split is published (not yet redirected) still names the new slot's leaves,
                // which may have changed through the new slot.
                let end = directory
                    .next_first_after(view.first_key)
                    .map_or(view.last_key, |next| view.last_key.min(next - 1));
                return Ok(Routed {
                    view,
                    known: directory.count,
                    end,
                });
            }
            if !self.reload_directory(node, guard)? && !backoff.wait() {
                // The slot table names no slot serving `key` beyond this one's records: only a
                // split cut short could do that (the memory node publishes the new slot before
                // redirecting the old one).
                return Err(IndexError::RetrainingTimeout {
                    node: node.info.id,
                    slot,
                });
            }
        }
        Err(IndexError::TooManyRetries(attempts))
    }

    /// The chains a GET of `key` reads: the owner's (pivots mode) or every candidate's (lean).
    pub(super) fn chains_for(view: &SlotView, mode: CacheMode, key: u64) -> Option<ChainEntries> {
        match (mode, view.owner(key)) {
            (CacheMode::Pivots, Some(owner)) => view.chain(owner),
            _ => {
                let range = view.model.owner_candidates(key);
                let mut all = ChainEntries::new();
                for leaf in range.iter() {
                    all.extend(view.chain(leaf)?);
                }
                Some(all)
            }
        }
    }

    pub(super) fn get_inner(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        let caches = Arc::clone(&self.caches);
        let node = &caches.nodes[caches.node_of(key)];
        let guard = pin();
        for _ in 0..caches.config.max_attempts {
            let routed = self.route(node, key, &guard)?;
            let view: &SlotView = &routed.view;
            let Some(leaves) = Self::chains_for(view, caches.config.cache_mode, key) else {
                self.refresh(node, view, &guard)?;
                continue;
            };
            let seen =
                ModelHeader::from_raw(self.read_batch(&node.layout, &leaves, &[view.record])?[0]);
            let valid = match Freshness::of(view.header, seen) {
                Freshness::Fresh => true,
                Freshness::Stale => false,
                #[cfg(loom)]
                Freshness::Retired if !caches.config.confirm_retired => true,
                Freshness::Retired => {
                    self.still_current(node, &[(view.slot, view.record)], routed.known, &guard)?[0]
                }
            };
            if !valid {
                self.refresh(node, view, &guard)?;
                continue;
            }
            match self.lookup_in_batch(&node.layout, &leaves, key)? {
                Lookup::Found(value) => return Ok(Some(value)),
                Lookup::Absent => return Ok(None),
                // A leaf was being written: let the writer finish.
                Lookup::Torn => retry_pause(),
            }
        }
        Err(IndexError::TooManyRetries(caches.config.max_attempts))
    }

    // ----- scanning ------------------------------------------------------------------------------

    /// SCAN: rounds of one batch each. A round starts at the key `from` (at first `start`): it
    /// reads the chain that owns `from` and the chains after it, across the node's slots, until
    /// enough leaves — those chains own every key of `[from, bound)`, where `bound` is the next
    /// chain's pivot (or the next slot's or node's first key), fixed when that record was
    /// trained. Once the round's headers validate it, every present key of `[from, bound)` was
    /// read, and the next round starts at `bound`, whichever record serves it by then: a
    /// retraining between rounds (new trained leaves, empty ones dropped) cannot skip or repeat
    /// keys. No arithmetic depends on `n` beyond a saturating leaf count.
    pub(super) fn scan_inner(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
        let caches = Arc::clone(&self.caches);
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(n.min(4096));
        let guard = pin();
        let mut from = start;
        let mut attempts = 0;
        while out.len() < n {
            let node_index = caches.node_of(from);
            let node = &caches.nodes[node_index];
            let node_end = caches.partition.get(node_index + 1).copied();
            let fill = node.layout.superblock().fill.max(1) as usize;
            let want_leaves = (n - out.len())
                .div_ceil(fill)
                .saturating_add(1)
                .min(MAX_SCAN_LEAVES);
            let Some(round) = self.plan_scan_round(node, from, node_end, want_leaves, &guard)?
            else {
                attempts += 1;
                if attempts > caches.config.max_attempts {
                    return Err(IndexError::TooManyRetries(caches.config.max_attempts));
                }
                continue;
            };
            let mut words: Vec<RemoteAddr> = round.bound_word.into_iter().collect();
            words.extend(round.records.iter().map(|r| r.record));
            let read = self.read_batch(&node.layout, &round.leaves, &words)?;
            let (bound_read, headers) = read.split_at(usize::from(round.bound_word.is_some()));
            let mut stale: Vec<u64> = Vec::new();
            let mut retired: Vec<(u64, RemoteAddr)> = Vec::new();
            for (r, &seen) in round.records.iter().zip(headers) {
                match Freshness::of(r.header, ModelHeader::from_raw(seen)) {
                    Freshness::Fresh => {}
                    Freshness::Stale => stale.push(r.slot),
                    Freshness::Retired => retired.push((r.slot, r.record)),
                }
            }
            if !retired.is_empty() {
                let current = self.still_current(node, &retired, round.known, &guard)?;
                stale.extend(
                    retired
                        .iter()
                        .zip(current)
                        .filter(|(_, ok)| !ok)
                        .map(|(r, _)| r.0),
                );
            }
            for &s in &stale {
                let loaded = self.view(node, s, &guard)?;
                self.refresh(node, &loaded, &guard)?;
            }
            let contents = if stale.is_empty() {
                self.decode_leaves(&node.layout, &round.leaves)?
            } else {
                None
            };
            let Some(contents) = contents else {
                retry_pause();
                attempts += 1;
                if attempts > caches.config.max_attempts {
                    return Err(IndexError::TooManyRetries(caches.config.max_attempts));
                }
                continue;
            };
            let bound = match (round.bound, bound_read.first()) {
                (Bound::Key(key), _) => Some(key),
                (Bound::ReadPivot, Some(&pivot)) => Some(pivot),
                (Bound::ReadPivot, None) | (Bound::End, _) => None,
            };
            // A pivot read from an old record may lie past what that record still serves.
            let bound = match (bound, round.limits.last()) {
                (Some(b), Some(&limit)) => Some(b.min(limit.saturating_add(1))),
                (bound, _) => bound,
            };
            for (leaf_contents, &limit) in contents.iter().zip(&round.limits) {
                for &(k, v) in leaf_contents.entries() {
                    // Chains are sorted and follow each other in key order; a split in progress
                    // can show a key twice, at adjacent places. A leaf read through a record
                    // gives only the keys that record serves.
                    if k >= from
                        && k <= limit
                        && bound.is_none_or(|b| k < b)
                        && out.last().is_none_or(|&(last, _)| k > last)
                    {
                        out.push((k, v));
                    }
                }
            }
            match bound {
                Some(b) if b > from => from = b,
                Some(_) => {
                    return Err(IndexError::Layout(LeafStoreError::CorruptRecord {
                        slot: round.records.last().map_or(0, |r| r.slot),
                        reason: format!("scan bound does not advance past key {from}"),
                    }));
                }
                None => break,
            }
        }
        out.truncate(n);
        Ok(out)
    }

    /// The chains one scan round reads from `from` on (see [`Self::scan_inner`]); `None` if a
    /// cached view was inconsistent and has been refreshed (plan again).
    fn plan_scan_round(
        &mut self,
        node: &NodeCache,
        from: u64,
        node_end: Option<u64>,
        want_leaves: usize,
        guard: &Guard,
    ) -> Result<Option<ScanRound>, IndexError> {
        let mode = self.caches.config.cache_mode;
        let mut round = ScanRound {
            leaves: Vec::new(),
            limits: Vec::new(),
            known: u64::MAX,
            records: Vec::new(),
            bound: Bound::End,
            bound_word: None,
        };
        // Each slot's view is loaded once and used for everything the round takes from that slot
        // (leaf indexes, chains, pivots, header): a sibling thread may replace the cell meanwhile,
        // and a leaf index of one record applied to another would skip or repeat chains.
        let routed = self.route(node, from, guard)?;
        round.known = routed.known;
        let mut end = routed.end;
        let mut loaded = routed.view;
        let mut leaf = match loaded.owner(from) {
            Some(owner) => owner,
            None => loaded.model.owner_candidates(from).first,
        };
        // Lean mode does not know the owner: read every candidate, which includes it.
        let mut must_reach = match mode {
            CacheMode::Pivots => leaf,
            CacheMode::Lean => loaded.model.owner_candidates(from).last,
        };
        loop {
            let view: &SlotView = &loaded;
            // Chain 0 owns keys from the slot's first key, whatever its pivot: a record ends
            // before a later chain only.
            if leaf >= view.leaves()
                || (leaf > 0
                    && view
                        .pivots
                        .as_ref()
                        .is_some_and(|p| p.get(leaf as usize).is_some_and(|&p| p > end)))
            {
                // The slot ends here: its last chain owns keys up to the record's last key (or,
                // for an old record whose split is published, the new slot's first key minus
                // one), and the slot serving the next key starts right after it.
                let next = end.checked_add(1);
                let Some(next) = next.filter(|&k| node_end.is_none_or(|end| k < end)) else {
                    round.bound = node_end.map_or(Bound::End, Bound::Key);
                    break;
                };
                if round.leaves.len() >= want_leaves {
                    round.bound = Bound::Key(next);
                    break;
                }
                let routed = self.route(node, next, guard)?;
                round.known = round.known.min(routed.known);
                end = routed.end;
                loaded = routed.view;
                leaf = 0;
                must_reach = 0;
                continue;
            }
            if round.leaves.len() >= want_leaves && leaf > must_reach {
                // The next chain's pivot bounds what this round owns.
                match &view.pivots {
                    Some(pivots) => round.bound = Bound::Key(pivots[leaf as usize]),
                    None => {
                        round.bound = Bound::ReadPivot;
                        round.bound_word =
                            Some(offset(view.record, view.layout.pivots() + 8 * leaf));
                    }
                }
                break;
            }
            let Some(chain) = view.chain(leaf) else {
                self.refresh(node, view, guard)?;
                return Ok(None);
            };
            if round.records.last().is_none_or(|r| r.slot != view.slot) {
                round.records.push(RoundRecord {
                    slot: view.slot,
                    header: view.header,
                    record: view.record,
                });
            }
            round.limits.extend(std::iter::repeat_n(end, chain.len()));
            round.leaves.extend(chain);
            leaf += 1;
        }
        Ok(Some(round))
    }
}

/// A routed view and the slot count of the directory that routed it.
pub(super) struct Routed<'g> {
    pub(super) view: crate::view::ViewRef<'g>,
    /// Slots the routing directory knew of.
    pub(super) known: u64,
    /// The last key the view's record serves as far as the routing directory knows.
    pub(super) end: u64,
}

/// Words read after the leaves of a read batch (headers, a pivot): inline, no allocation.
pub(super) type Words = smallvec::SmallVec<[u64; 4]>;

/// Most leaves one scan round reads in its batch.
const MAX_SCAN_LEAVES: usize = 512;

/// A GET's search of the leaves it read.
pub(super) enum Lookup {
    Found(u64),
    Absent,
    /// A leaf failed its checksum (a writer was rewriting it) and the key was not found elsewhere.
    Torn,
}

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

/// One scan round's plan.
struct ScanRound {
    leaves: Vec<LeafTableEntry>,
    /// For each leaf, the last key the record it was reached through serves.
    limits: Vec<u64>,
    /// The fewest slots a directory that routed the round knew of.
    known: u64,
    /// Every record whose chains the round reads, in order.
    records: Vec<RoundRecord>,
    bound: Bound,
    /// Lean mode: the pivot word to read for [`Bound::ReadPivot`].
    bound_word: Option<RemoteAddr>,
}

struct RoundRecord {
    slot: u64,
    header: ModelHeader,
    record: RemoteAddr,
}

/// Where a scan round's owned keys end.
enum Bound {
    /// Before this key.
    Key(u64),
    /// Before the pivot read in the round's batch.
    ReadPivot,
    /// Nowhere: the round reaches the end of the key space.
    End,
}
