//! The read path: GET, SCAN, and keeping cached views fresh.
use std::sync::Arc;

use leaf_store::{Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, SLT_SLOTS, le_word};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::store::NodeCache;
use crate::view::{Guard, SlotView, pin};
use crate::{CacheMode, IndexError};

use super::*;

impl<E: Endpoint> Client<E> {
    // ----- reading -------------------------------------------------------------------------------

    /// READs the leaves `leaves` of `layout`'s node, then the header words at `headers`, in one
    /// batch, into `self.buf` (leaf `i` at `i · leaf_bytes`). Leaves come before headers: if a
    /// header read equals the cached one, no split or unlink of those chains had bumped it before
    /// the leaves were read, so the cached chains were complete (see the write protocol).
    pub(super) fn read_batch(
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
    pub(super) fn fetch_view(
        &mut self,
        node: &NodeCache,
        stale: &SlotView,
    ) -> Result<SlotView, IndexError> {
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
    pub(super) fn reload(&mut self, node: &NodeCache, slot: u64) -> Result<SlotView, IndexError> {
        let addr = RemoteAddr::unpack(self.ep.read_word(node.layout.slot_entry_addr(slot))?);
        let record = leaf_store::read_record(&mut self.ep, &node.layout, slot, addr)?;
        Ok(SlotView::from_record(
            record,
            addr,
            self.caches.config.cache_mode,
        ))
    }

    /// The chains a GET of `key` reads: the owner's (pivots mode) or every candidate's (lean).
    pub(super) fn chains_for(
        view: &SlotView,
        mode: CacheMode,
        key: u64,
    ) -> Option<Vec<LeafTableEntry>> {
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

    pub(super) fn get_inner(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
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

    pub(super) fn scan_inner(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
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
}
