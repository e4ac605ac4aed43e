//! The compute-node client: every operation with one-sided verbs.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use leaf_store::{
    Layout, Leaf, LeafStoreError, LeafTableEntry, MAX_SYNONYMS, ModelHeader, SLT_SLOTS,
    check_allocation, le_word,
};
use rdma_transport::{Endpoint, RemoteAddr, Stats, Verb};

use crate::backoff::Backoff;
use crate::locks::{HeldLock, Stripe};
use crate::stats::{OpKind, OpStats};
use crate::store::{Caches, NodeCache};
use crate::view::{Guard, SlotView, pin};
use crate::{CacheMode, IndexError};

/// One thread's handle on a [`crate::Store`]: its own endpoint, the shared caches, and counters per
/// operation type. Operations take `&mut self`; open one client per thread.
#[derive(Debug)]
pub struct Client<E: Endpoint> {
    ep: E,
    caches: Arc<Caches>,
    stats: OpStats,
    buf: Vec<u8>,
    /// Leaves allocated for a split that could not use them (its SLT was full); used first by the
    /// next split on the same node.
    spare_leaves: Vec<(u16, u64)>,
    enqueue_failures: u64,
}

/// The change a write makes to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Insert(u64),
    Update(u64),
    Upsert(u64),
    Delete,
}

/// What a change does to a locked chain.
#[derive(Debug)]
enum Outcome {
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
    },
    /// The synonym leaf at `pos` (> 0) became empty: write it empty and unlink it.
    Unlink { result: bool, pos: usize },
}

/// A chain whose trained leaf's LT lock this client holds.
#[derive(Debug)]
struct Locked {
    slot: u64,
    record: RemoteAddr,
    layout: leaf_store::RecordLayout,
    leaf: u64,
    lt_addr: RemoteAddr,
    /// The LT entry's current value (lock bit set).
    lt_now: LeafTableEntry,
    chain: Vec<(LeafTableEntry, Leaf)>,
    header: ModelHeader,
    handovers: u32,
}

impl Locked {
    /// The lock, with the chain as last written, for the next local writer of this leaf.
    fn hand_over(&mut self) -> HeldLock {
        HeldLock {
            record: self.record,
            leaf: self.leaf,
            lt_addr: self.lt_addr,
            lt_now: self.lt_now,
            chain: std::mem::take(&mut self.chain),
            header: self.header,
            handovers: self.handovers,
        }
    }
}

/// How a commit ended.
enum Committed {
    Done(bool),
    /// The slot's SLT is full: nothing changed, lock released; wait for retraining.
    SltFull,
}

fn offset(addr: RemoteAddr, by: u64) -> RemoteAddr {
    addr.checked_add(by).unwrap_or(addr)
}

impl<E: Endpoint> Client<E> {
    pub(crate) fn new(ep: E, caches: Arc<Caches>) -> Self {
        Self {
            ep,
            caches,
            stats: OpStats::default(),
            buf: Vec::new(),
            spare_leaves: Vec::new(),
            enqueue_failures: 0,
        }
    }

    /// Counters per operation type since the client was created.
    pub fn stats(&self) -> &OpStats {
        &self.stats
    }

    /// The endpoint's raw counters.
    pub fn net_stats(&self) -> Stats {
        self.ep.stats()
    }

    /// Times a slot that reached the retraining threshold could not be queued (transport errors
    /// while queueing; the write itself had completed).
    pub fn enqueue_failures(&self) -> u64 {
        self.enqueue_failures
    }

    fn counted<R>(&mut self, kind: OpKind, op: impl FnOnce(&mut Self) -> R) -> R {
        let before = self.ep.stats();
        let result = op(self);
        let used = self.ep.stats() - before;
        self.stats.record(kind, used);
        result
    }

    /// The value of `key`, if present. One round trip with a fresh cache.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        self.counted(OpKind::Get, |c| c.get_inner(key))
    }

    /// Inserts `key` with `value`; `Ok(false)` (and no change) if the key is present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        self.counted(OpKind::Insert, |c| c.write(key, Change::Insert(value)))
    }

    /// Sets the value of a present `key`; `Ok(false)` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        self.counted(OpKind::Update, |c| c.write(key, Change::Update(value)))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        self.counted(OpKind::Upsert, |c| c.write(key, Change::Upsert(value)))
    }

    /// Deletes `key`; `Ok(false)` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, IndexError> {
        self.counted(OpKind::Delete, |c| c.write(key, Change::Delete))
    }

    /// Up to `n` entries with keys ≥ `start`, in key order, without duplicates; continues across
    /// model slots and memory nodes.
    pub fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, IndexError> {
        self.counted(OpKind::Scan, |c| c.scan_inner(start, n))
    }

    // ----- reading -------------------------------------------------------------------------------

    /// READs the leaves `leaves` of `layout`'s node, then the header words at `headers`, in one
    /// batch, into `self.buf` (leaf `i` at `i · leaf_bytes`). Leaves come before headers: if a
    /// header read equals the cached one, no split or unlink of those chains had bumped it before
    /// the leaves were read, so the cached chains were complete (see the write protocol).
    fn read_batch(
        &mut self,
        layout: &Layout,
        leaves: &[LeafTableEntry],
        headers: &[RemoteAddr],
    ) -> Result<Vec<ModelHeader>, IndexError> {
        let leaf_bytes = layout.leaf_bytes() as usize;
        let leaf_part = leaves.len() * leaf_bytes;
        self.buf.clear();
        self.buf.resize(leaf_part + 8 * headers.len(), 0);
        let (leaf_buf, header_buf) = self.buf.split_at_mut(leaf_part);
        let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(leaves.len() + headers.len());
        for (entry, chunk) in leaves.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(layout.leaf_addr(entry.leaf_num()), chunk));
        }
        for (&at, chunk) in headers.iter().zip(header_buf.chunks_exact_mut(8)) {
            verbs.push(Verb::read(at, chunk));
        }
        self.ep.batch(&mut verbs)?;
        drop(verbs);
        Ok(self.buf[leaf_part..]
            .chunks_exact(8)
            .map(|c| ModelHeader::from_raw(le_word(c, 0)))
            .collect())
    }

    /// Decodes the `count` leaves last read by [`Self::read_batch`]; `None` if one was torn.
    fn decode_leaves(
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
    fn refresh(
        &mut self,
        node: &NodeCache,
        stale: &SlotView,
        guard: &Guard,
    ) -> Result<(), IndexError> {
        let fresh = self.fetch_view(node, stale)?;
        node.slots[stale.slot as usize].replace(stale, fresh, guard);
        Ok(())
    }

    /// A view built from a snapshot read now (see [`Self::refresh`]). Writers holding a lock use
    /// the view they read themselves: the cell may meanwhile hold another thread's view, built
    /// from a snapshot older than the lock.
    ///
    /// Reads the LT and the SLT's used prefix (as last known, plus a margin); if the header shows
    /// more SLT slots in use, a second READ fetches the rest. Every table word is read after the
    /// header either way.
    fn fetch_view(&mut self, node: &NodeCache, stale: &SlotView) -> Result<SlotView, IndexError> {
        const MARGIN: usize = 8;
        let leaves = stale.leaves() as usize;
        let known = (stale.header.slot_use() as usize + 1 + MARGIN).min(SLT_SLOTS);
        // Header and slot id: a record whose memory was reclaimed and reused by another record
        // shows another slot or generation (generations are unique per memory node).
        let mut fixed = [0u8; 16];
        let mut tables = vec![0u8; 8 * (leaves + SLT_SLOTS)];
        let (first, rest) = tables.split_at_mut(8 * (leaves + known));
        let mut verbs = [
            Verb::read(stale.record, &mut fixed),
            Verb::read(offset(stale.record, stale.layout.lt_entry(0)), first),
        ];
        self.ep.batch(&mut verbs)?;
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
        Ok(stale.with_tables(header, lt, slt, self.caches.config.cache_mode))
    }

    /// Reads slot `slot`'s current record from the slot table.
    fn reload(&mut self, node: &NodeCache, slot: u64) -> Result<SlotView, IndexError> {
        let addr = RemoteAddr::unpack(self.ep.read_word(node.layout.slot_entry_addr(slot))?);
        let record = leaf_store::read_record(&mut self.ep, &node.layout, slot, addr)?;
        Ok(SlotView::from_record(
            record,
            addr,
            self.caches.config.cache_mode,
        ))
    }

    /// The chains a GET of `key` reads: the owner's (pivots mode) or every candidate's (lean).
    fn chains_for(view: &SlotView, mode: CacheMode, key: u64) -> Option<Vec<LeafTableEntry>> {
        match (mode, view.owner(key)) {
            (CacheMode::Pivots, Some(owner)) => view.chain(owner),
            _ => {
                let range = view.model.owner_candidates(key);
                let mut all = Vec::new();
                for leaf in range.iter() {
                    all.extend(view.chain(leaf)?);
                }
                Some(all)
            }
        }
    }

    fn get_inner(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        let caches = Arc::clone(&self.caches);
        let node = &caches.nodes[caches.node_of(key)];
        let slot = node.top.slot_of(key);
        let guard = pin();
        for _ in 0..caches.config.max_attempts {
            let loaded = node.slots[slot].load(&guard);
            let view: &SlotView = &loaded;
            let Some(leaves) = Self::chains_for(view, caches.config.cache_mode, key) else {
                self.refresh(node, view, &guard)?;
                continue;
            };
            let header = self.read_batch(&node.layout, &leaves, &[view.record])?[0];
            if header != view.header {
                self.refresh(node, view, &guard)?;
                continue;
            }
            if let Some(contents) = self.decode_leaves(&node.layout, &leaves)? {
                return Ok(contents.iter().find_map(|leaf| leaf.get(key)));
            }
            // A leaf was being written: let the writer finish.
            retry_pause();
        }
        Err(IndexError::TooManyRetries(caches.config.max_attempts))
    }

    // ----- scanning ------------------------------------------------------------------------------

    fn scan_inner(&mut self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, IndexError> {
        let caches = Arc::clone(&self.caches);
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(n.min(4096));
        if n == 0 {
            return Ok(out);
        }
        let guard = pin();
        // Position: (node index, slot, trained leaf) of the next chain to read.
        let mut node_index = caches.node_of(start);
        let first_node = &caches.nodes[node_index];
        let mut slot = first_node.top.slot_of(start);
        let mut leaf = {
            let loaded = first_node.slots[slot].load(&guard);
            match loaded.owner(start) {
                Some(owner) => owner,
                None => loaded.model.owner_candidates(start).first,
            }
        };
        let mut attempts = 0;
        'rounds: while out.len() < n {
            let node = &caches.nodes[node_index];
            let fill = node.layout.superblock().fill.max(1) as usize;
            let want_leaves = (n - out.len()).div_ceil(fill) + 1;
            // Collect chains from the position on, across slots of this node, until enough leaves.
            let mut leaves: Vec<LeafTableEntry> = Vec::new();
            let mut records: Vec<(usize, ModelHeader, RemoteAddr)> = Vec::new();
            let (mut s, mut l) = (slot, leaf);
            while leaves.len() < want_leaves && s < node.slots.len() {
                let loaded = node.slots[s].load(&guard);
                let view: &SlotView = &loaded;
                if l >= view.leaves() {
                    s += 1;
                    l = 0;
                    continue;
                }
                let Some(chain) = view.chain(l) else {
                    self.refresh(node, view, &guard)?;
                    continue 'rounds;
                };
                if records.last().is_none_or(|r| r.0 != s) {
                    records.push((s, view.header, view.record));
                }
                leaves.extend(chain);
                l += 1;
            }
            if leaves.is_empty() {
                // This node is exhausted: continue on the next one.
                node_index += 1;
                if node_index >= caches.nodes.len() {
                    break;
                }
                (slot, leaf) = (0, 0);
                continue;
            }
            let addrs: Vec<RemoteAddr> = records.iter().map(|r| r.2).collect();
            let headers = self.read_batch(&node.layout, &leaves, &addrs)?;
            let mut stale = false;
            for (&(s, cached, _), &seen) in records.iter().zip(&headers) {
                if seen != cached {
                    let loaded = node.slots[s].load(&guard);
                    self.refresh(node, &loaded, &guard)?;
                    stale = true;
                }
            }
            let contents = if stale {
                None
            } else {
                self.decode_leaves(&node.layout, &leaves)?
            };
            let Some(contents) = contents else {
                retry_pause();
                attempts += 1;
                if attempts > caches.config.max_attempts {
                    return Err(IndexError::TooManyRetries(caches.config.max_attempts));
                }
                continue;
            };
            for leaf_contents in &contents {
                for &(k, v) in leaf_contents.entries() {
                    // Chains are sorted and chains follow each other in key order; a split in
                    // progress can show a key twice, at adjacent places.
                    if k >= start && out.last().is_none_or(|&(last, _)| k > last) {
                        out.push((k, v));
                    }
                }
            }
            (slot, leaf) = (s, l);
        }
        out.truncate(n);
        Ok(out)
    }

    // ----- writing -------------------------------------------------------------------------------

    /// Lean mode: the owner of `key`, from the candidate range's pivots (one READ).
    ///
    /// Pivots never change in a record, so no header is needed: a retired record's pivots still
    /// route correctly, and the lock protocol that follows checks freshness.
    fn lean_owner(&mut self, view: &SlotView, key: u64) -> Result<u64, IndexError> {
        let range = view.model.owner_candidates(key);
        let mut pivots = vec![0u8; 8 * range.len() as usize];
        self.ep.read(
            offset(view.record, view.layout.pivots() + 8 * range.first),
            &mut pivots,
        )?;
        let pivots: Vec<u64> = pivots.chunks_exact(8).map(|c| le_word(c, 0)).collect();
        Ok(range.first + pivots.partition_point(|&p| p <= key).saturating_sub(1) as u64)
    }

    fn write(&mut self, key: u64, change: Change) -> Result<bool, IndexError> {
        let caches = Arc::clone(&self.caches);
        let node = &caches.nodes[caches.node_of(key)];
        let slot = node.top.slot_of(key);
        let guard = pin();
        let mut backoff = Backoff::new(caches.config.wait_limit);
        let mut slt_full = false;
        for _ in 0..caches.config.max_attempts {
            let loaded = node.slots[slot].load(&guard);
            let view: &SlotView = &loaded;
            if view.fetched_at.elapsed() > crate::view::VIEW_MAX_AGE {
                self.refresh(node, view, &guard)?;
                continue;
            }
            if view.header.is_locked() {
                // The retrainer froze this record; wait for the new one.
                if !backoff.wait() {
                    return Err(IndexError::RetrainingTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                    });
                }
                self.refresh(node, view, &guard)?;
                continue;
            }
            let owner = match view.owner(key) {
                Some(owner) => owner,
                None => self.lean_owner(view, key)?,
            };
            let stripe = caches.locks.stripe(view.record, owner);
            stripe.waiting.fetch_add(1, Ordering::AcqRel);
            let mut held_slot = stripe.held.lock().unwrap_or_else(|e| e.into_inner());
            stripe.waiting.fetch_sub(1, Ordering::AcqRel);
            let mut locked = None;
            if let Some(held) = held_slot.take() {
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
                        handovers: held.handovers + 1,
                    });
                } else {
                    self.release_held(held)?;
                }
            }
            let locked = match locked {
                Some(locked) => locked,
                None => match self.acquire(node, view, slot, owner, &guard, &mut backoff)? {
                    Some(locked) => locked,
                    None => continue,
                },
            };
            let outcome = apply(&locked.chain, key, change, node.layout.delta());
            match self.commit(node, locked, outcome, stripe, &mut held_slot)? {
                Committed::Done(result) => return Ok(result),
                Committed::SltFull => {
                    slt_full = true;
                    drop(held_slot);
                    if !backoff.wait() {
                        break;
                    }
                    let loaded = node.slots[slot].load(&guard);
                    self.refresh(node, &loaded, &guard)?;
                }
            }
        }
        if slt_full {
            return Err(IndexError::SltFull {
                node: node.info.id,
                slot: slot as u64,
            });
        }
        Err(IndexError::TooManyRetries(caches.config.max_attempts))
    }

    /// Releases a lock another local writer left for a different leaf of the same stripe.
    fn release_held(&mut self, held: HeldLock) -> Result<(), IndexError> {
        leaf_store::unlock(&mut self.ep, held.lt_addr, held.lt_now, None)?;
        Ok(())
    }

    /// Takes trained leaf `leaf`'s lock and reads its chain behind the CAS in the same batch.
    /// `None`: not taken (contention: waited; or a stale cache: refreshed) — try again.
    fn acquire(
        &mut self,
        node: &NodeCache,
        view: &SlotView,
        slot: usize,
        leaf: u64,
        guard: &Guard,
        backoff: &mut Backoff,
    ) -> Result<Option<Locked>, IndexError> {
        let Some(chain) = view.chain(leaf) else {
            self.refresh(node, view, guard)?;
            return Ok(None);
        };
        let expected = view.lt_entry(leaf);
        let lt_addr = offset(view.record, view.layout.lt_entry(leaf));
        let leaf_bytes = node.layout.leaf_bytes() as usize;
        self.buf.clear();
        self.buf.resize(chain.len() * leaf_bytes + 8, 0);
        let (leaf_buf, header_buf) = self.buf.split_at_mut(chain.len() * leaf_bytes);
        let mut verbs = vec![Verb::cas(lt_addr, expected.raw(), expected.locked().raw())];
        for (entry, chunk) in chain.iter().zip(leaf_buf.chunks_exact_mut(leaf_bytes)) {
            verbs.push(Verb::read(node.layout.leaf_addr(entry.leaf_num()), chunk).fenced());
        }
        verbs.push(Verb::read(view.record, header_buf).fenced());
        self.ep.batch(&mut verbs)?;
        let old = verbs[0].old_value().unwrap_or_default();
        drop(verbs);
        if old != expected.raw() {
            if LeafTableEntry::from_raw(old).is_locked() {
                if !backoff.wait() {
                    return Err(IndexError::LockTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                        leaf,
                    });
                }
            } else {
                self.refresh(node, view, guard)?;
            }
            return Ok(None);
        }
        let held = expected.locked();
        let header = ModelHeader::from_raw(le_word(&self.buf[chain.len() * leaf_bytes..], 0));
        let mut locked = Locked {
            slot: slot as u64,
            record: view.record,
            layout: view.layout,
            leaf,
            lt_addr,
            lt_now: held,
            chain: Vec::new(),
            header,
            handovers: 0,
        };
        let (entries, contents) = if header == view.header {
            (chain.clone(), self.decode_leaves(&node.layout, &chain)?)
        } else {
            if header.is_locked() || header.is_retired() {
                leaf_store::unlock(&mut self.ep, lt_addr, held, None)?;
                self.refresh(node, view, guard)?;
                if header.is_locked() && !backoff.wait() {
                    return Err(IndexError::RetrainingTimeout {
                        node: node.info.id,
                        slot: slot as u64,
                    });
                }
                return Ok(None);
            }
            // The record changed since the view was built (another chain split, or ours did).
            // We hold the lock, so our chain is stable now: read the tables ourselves (not the
            // cell's view, which may predate our lock), install them, and re-read the chain.
            let fresh = self.fetch_view(node, view)?;
            let chain = (fresh.record == view.record)
                .then(|| fresh.chain(leaf))
                .flatten();
            node.slots[slot].replace(view, fresh, guard);
            let Some(chain) = chain else {
                leaf_store::unlock(&mut self.ep, lt_addr, held, None)?;
                return Ok(None);
            };
            let headers = self.read_batch(&node.layout, &chain, &[view.record])?;
            locked.header = headers[0];
            let contents = self.decode_leaves(&node.layout, &chain)?;
            (chain, contents)
        };
        let Some(contents) = contents else {
            // Under the lock nothing writes these leaves: a failed checksum is damage.
            leaf_store::unlock(&mut self.ep, lt_addr, held, None)?;
            return Err(LeafStoreError::TornLeaf {
                leaf_num: entries[0].leaf_num(),
            }
            .into());
        };
        locked.chain = entries.into_iter().zip(contents).collect();
        Ok(Some(locked))
    }

    /// Applies `outcome` to the locked chain: writes in the order that keeps concurrent readers
    /// correct, then releases the lock or hands it to a waiting sibling thread.
    fn commit(
        &mut self,
        node: &NodeCache,
        mut locked: Locked,
        outcome: Outcome,
        stripe: &Stripe,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<Committed, IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        let hand_over = stripe.waiting.load(Ordering::Acquire) > 0
            && locked.handovers < self.caches.config.max_handovers;
        let result = match outcome {
            Outcome::Unchanged(result) => {
                self.finish(&mut locked, Vec::new(), hand_over, held_slot)?;
                result
            }
            Outcome::Rewrite { result, pos, leaf } => {
                let leaf_num = locked.chain[pos].0.leaf_num();
                let bytes = leaf.encode(leaf_num, delta)?;
                locked.chain[pos].1 = leaf;
                self.finish(
                    &mut locked,
                    vec![(layout.leaf_addr(leaf_num), bytes)],
                    hand_over,
                    held_slot,
                )?;
                result
            }
            Outcome::Unlink { result, pos } => {
                let (gone, _) = locked.chain[pos];
                let empty = Leaf::new().encode(gone.leaf_num(), delta)?;
                let slot_of_gone = u64::from(locked.chain[pos - 1].0.synonym_ptr());
                let next = gone.synonym_ptr();
                let mut verbs_owned: Vec<(RemoteAddr, Vec<u8>)> =
                    vec![(layout.leaf_addr(gone.leaf_num()), empty)];
                // Link around it: in the LT entry (keeping the lock) or in the previous SLT entry.
                let mut lt_change = None;
                if pos == 1 {
                    lt_change = Some(locked.lt_now.with_synonym(next));
                    locked.chain[0].0 = locked.chain[0].0.with_synonym(next);
                } else {
                    let prev_slot = u64::from(locked.chain[pos - 2].0.synonym_ptr());
                    let prev = locked.chain[pos - 1].0.with_synonym(next);
                    verbs_owned.push((
                        offset(locked.record, locked.layout.slt_entry(prev_slot)),
                        prev.raw().to_le_bytes().to_vec(),
                    ));
                    locked.chain[pos - 1].0 = prev;
                }
                let freed = (
                    offset(locked.record, locked.layout.slt_entry(slot_of_gone)),
                    LeafTableEntry::FREED.raw().to_le_bytes().to_vec(),
                );
                // The chain as it will be: a sibling thread may inherit it with the lock.
                locked.chain.remove(pos);
                self.structural(
                    &mut locked,
                    verbs_owned,
                    lt_change,
                    Some(freed),
                    Vec::new(),
                    hand_over,
                    held_slot,
                )?;
                result
            }
            Outcome::Split {
                result,
                pos,
                lower,
                upper,
            } => match self.split(node, &mut locked, pos, lower, upper, hand_over, held_slot)? {
                Some(()) => result,
                None => return Ok(Committed::SltFull),
            },
        };
        Ok(Committed::Done(result))
    }

    /// Writes `writes` (in order), then releases the lock — or leaves it to a waiting sibling.
    fn finish(
        &mut self,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>)>,
        hand_over: bool,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<(), IndexError> {
        let mut verbs: Vec<Verb<'_>> = writes
            .iter()
            .map(|(at, bytes)| Verb::write(*at, bytes))
            .collect();
        if !hand_over {
            verbs.push(leaf_store::unlock_verb(locked.lt_addr, locked.lt_now, None));
        }
        self.ep.batch(&mut verbs)?;
        if !hand_over {
            check_unlocked(&verbs)?;
        }
        drop(verbs);
        if hand_over {
            *held_slot = Some(locked.hand_over());
        }
        Ok(())
    }

    /// A structural change in one batch, in this order: `writes` (new or emptied leaves, SLT
    /// entries), the LT link change (keeping the lock), the FREED marker, FAA of the header's
    /// change counter, then `late_writes` (the split leaf's shrunken contents), then the unlock.
    /// Readers that cached the old tables see the bump before any key leaves a leaf they read.
    #[allow(clippy::too_many_arguments)]
    fn structural(
        &mut self,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>)>,
        lt_change: Option<LeafTableEntry>,
        freed: Option<(RemoteAddr, Vec<u8>)>,
        late_writes: Vec<(RemoteAddr, Vec<u8>)>,
        hand_over: bool,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<(), IndexError> {
        let mut verbs: Vec<Verb<'_>> = writes
            .iter()
            .map(|(at, bytes)| Verb::write(*at, bytes))
            .collect();
        let link_at = verbs.len();
        if let Some(new) = lt_change {
            verbs.push(Verb::cas(
                locked.lt_addr,
                locked.lt_now.raw(),
                new.locked().raw(),
            ));
        }
        if let Some((at, bytes)) = &freed {
            verbs.push(Verb::write(*at, bytes));
        }
        verbs.push(Verb::faa(locked.record, ModelHeader::CHANGE_ONE).fenced());
        for (at, bytes) in &late_writes {
            verbs.push(Verb::write(*at, bytes));
        }
        let lt_final = lt_change.map_or(locked.lt_now, LeafTableEntry::locked);
        if !hand_over {
            verbs.push(leaf_store::unlock_verb(locked.lt_addr, lt_final, None).fenced());
        }
        self.ep.batch(&mut verbs)?;
        if lt_change.is_some() && verbs[link_at].cas_succeeded() != Some(true) {
            return Err(LeafStoreError::CorruptLeaf("LT entry changed under its lock").into());
        }
        if !hand_over {
            check_unlocked(&verbs)?;
        }
        drop(verbs);
        locked.lt_now = lt_final;
        locked.header =
            ModelHeader::from_raw(locked.header.raw().wrapping_add(ModelHeader::CHANGE_ONE));
        if hand_over {
            *held_slot = Some(locked.hand_over());
        }
        Ok(())
    }

    /// Splits the leaf at chain position `pos`: a new synonym leaf after it takes `upper`.
    /// `None` if the slot's SLT is full (nothing changed, lock released).
    #[allow(clippy::too_many_arguments)]
    fn split(
        &mut self,
        node: &NodeCache,
        locked: &mut Locked,
        pos: usize,
        lower: Leaf,
        upper: Leaf,
        hand_over: bool,
        held_slot: &mut Option<HeldLock>,
    ) -> Result<Option<()>, IndexError> {
        let layout = node.layout;
        let delta = layout.delta();
        // Round trip 2: a leaf number (unless a spare is at hand) and an SLT slot.
        let spare = self
            .spare_leaves
            .iter()
            .position(|&(n, _)| n == node.info.id)
            .map(|i| self.spare_leaves.swap_remove(i).1);
        let mut verbs = Vec::with_capacity(2);
        if spare.is_none() {
            verbs.push(leaf_store::alloc_leaf_verb(&layout));
        }
        verbs.push(Verb::faa(locked.record, ModelHeader::SLOT_USE_ONE));
        self.ep.batch(&mut verbs)?;
        let slot_use_old =
            ModelHeader::from_raw(verbs.last().and_then(Verb::old_value).unwrap_or_default())
                .slot_use();
        let allocated = if spare.is_none() {
            verbs[0].old_value()
        } else {
            None
        };
        drop(verbs);
        if slot_use_old >= MAX_SYNONYMS {
            // SLT full: give the slot back, keep the leaf for later, release, ask for retraining.
            self.ep
                .faa(locked.record, ModelHeader::SLOT_USE_ONE.wrapping_neg())?;
            let leaf = match (spare, allocated) {
                (Some(n), _) => Some(n),
                (None, Some(old)) => check_allocation(&mut self.ep, &layout, old).ok(),
                _ => None,
            };
            if let Some(n) = leaf {
                self.spare_leaves.push((node.info.id, n));
            }
            leaf_store::unlock(&mut self.ep, locked.lt_addr, locked.lt_now, None)?;
            self.request_retraining(node, locked.slot);
            return Ok(None);
        }
        let slt_slot = slot_use_old + 1;
        let new_leaf = match (spare, allocated) {
            (Some(n), _) => n,
            (None, old) => match check_allocation(&mut self.ep, &layout, old.unwrap_or(u64::MAX)) {
                Ok(n) => n,
                Err(LeafStoreError::PoolExhausted { capacity }) => {
                    // The SLT slot is claimed but will hold nothing: mark it freed, release.
                    let at = offset(locked.record, locked.layout.slt_entry(slt_slot));
                    let freed = LeafTableEntry::FREED.raw().to_le_bytes();
                    let mut verbs = [
                        Verb::write(at, &freed),
                        leaf_store::unlock_verb(locked.lt_addr, locked.lt_now, None),
                    ];
                    self.ep.batch(&mut verbs)?;
                    check_unlocked(&verbs)?;
                    return Err(IndexError::PoolExhausted {
                        node: node.info.id,
                        capacity,
                    });
                }
                Err(e) => return Err(e.into()),
            },
        };
        // Round trip 3, in order: the new leaf and its SLT entry, the link to it, the header
        // bump, and only then the split leaf's shrunken contents; then unlock.
        let (split_entry, _) = locked.chain[pos];
        let new_entry = LeafTableEntry::new(0, new_leaf)
            .unwrap_or_default()
            .with_synonym(split_entry.synonym_ptr());
        let mut writes = vec![
            (layout.leaf_addr(new_leaf), upper.encode(new_leaf, delta)?),
            (
                offset(locked.record, locked.layout.slt_entry(slt_slot)),
                new_entry.raw().to_le_bytes().to_vec(),
            ),
        ];
        let slt_ptr = u8::try_from(slt_slot).unwrap_or(0);
        let linked = split_entry.with_synonym(slt_ptr);
        let lt_change = if pos == 0 {
            Some(locked.lt_now.with_synonym(slt_ptr))
        } else {
            let at_slot = u64::from(locked.chain[pos - 1].0.synonym_ptr());
            writes.push((
                offset(locked.record, locked.layout.slt_entry(at_slot)),
                linked.raw().to_le_bytes().to_vec(),
            ));
            None
        };
        let late = vec![(
            layout.leaf_addr(split_entry.leaf_num()),
            lower.encode(split_entry.leaf_num(), delta)?,
        )];
        #[cfg(loom)]
        if self.caches.config.split_order != crate::config::SplitOrder::Safe {
            self.split_in_wrong_order(locked, writes, late, linked, pos)?;
            return Ok(Some(()));
        }
        locked.chain[pos] = (linked, lower);
        locked.chain.insert(pos + 1, (new_entry, upper));
        locked.header =
            ModelHeader::from_raw(locked.header.raw().wrapping_add(ModelHeader::SLOT_USE_ONE));
        self.structural(locked, writes, lt_change, None, late, hand_over, held_slot)?;
        if slt_slot == self.caches.config.retrain_threshold {
            self.request_retraining(node, locked.slot);
        }
        Ok(Some(()))
    }

    /// Loom builds only: the split's third round trip in a deliberately wrong order (pos 0 only).
    #[cfg(loom)]
    fn split_in_wrong_order(
        &mut self,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>)>,
        late: Vec<(RemoteAddr, Vec<u8>)>,
        linked: LeafTableEntry,
        pos: usize,
    ) -> Result<(), IndexError> {
        use crate::config::SplitOrder;
        assert_eq!(
            pos, 0,
            "the wrong orders are modelled for splits of the trained leaf"
        );
        let new_leaf_writes = writes.iter().map(|(at, b)| Verb::write(*at, b));
        let shrink = late.iter().map(|(at, b)| Verb::write(*at, b));
        let bump = Verb::faa(locked.record, ModelHeader::CHANGE_ONE);
        let link_and_unlock =
            Verb::cas(locked.lt_addr, locked.lt_now.raw(), linked.unlocked().raw());
        let mut verbs: Vec<Verb<'_>> = match self.caches.config.split_order {
            SplitOrder::LinkLast => new_leaf_writes
                .chain([bump])
                .chain(shrink)
                .chain([link_and_unlock])
                .collect(),
            SplitOrder::ShrinkFirst => shrink
                .chain(new_leaf_writes)
                .chain([bump, link_and_unlock])
                .collect(),
            SplitOrder::Safe => unreachable!("handled by split"),
        };
        self.ep.batch(&mut verbs)?;
        check_unlocked(&verbs)
    }

    fn request_retraining(&mut self, node: &NodeCache, slot: u64) {
        if retrainer::queue::enqueue(&mut self.ep, &node.layout, slot).is_err() {
            self.enqueue_failures += 1;
        }
    }
}

/// A pause before re-reading data that was changing: a spin hint, or under loom a yield (a loom
/// thread that spins without yielding would keep the writer it waits for from running).
fn retry_pause() {
    if cfg!(loom) {
        crate::sync::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn check_unlocked(verbs: &[Verb<'_>]) -> Result<(), IndexError> {
    match verbs.last().and_then(Verb::cas_succeeded) {
        Some(true) => Ok(()),
        _ => {
            Err(LeafStoreError::CorruptLeaf("released an LT entry this client did not hold").into())
        }
    }
}

/// What `change` does to a chain (sorted across its leaves).
fn apply(chain: &[(LeafTableEntry, Leaf)], key: u64, change: Change, delta: u64) -> Outcome {
    let found = chain
        .iter()
        .enumerate()
        .find_map(|(pos, (_, leaf))| leaf.get(key).map(|v| (pos, v)));
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
                leaf,
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
                    leaf,
                }
            }
        }
        (Change::Insert(value) | Change::Upsert(value), None) => {
            // The last non-empty leaf whose smallest key is below `key` (else the first leaf).
            let pos = chain
                .iter()
                .rposition(|(_, leaf)| leaf.first_key().is_some_and(|f| f < key))
                .unwrap_or(0);
            let mut leaf = chain[pos].1.clone();
            let entries = leaf.entries_mut();
            let at = entries.partition_point(|e| e.0 < key);
            entries.insert(at, (key, value));
            if entries.len() as u64 <= delta {
                return Outcome::Rewrite {
                    result: true,
                    pos,
                    leaf,
                };
            }
            let upper = entries.split_off(entries.len() / 2);
            Outcome::Split {
                result: true,
                pos,
                lower: leaf,
                upper: Leaf::from_entries(upper).unwrap_or_default(),
            }
        }
    }
}
