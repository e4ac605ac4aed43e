//! Splits: a full page's new right half written first, then the shrunk left page with the
//! unlock; the separator goes to the parent the same way, up to a new root installed by CAS of
//! the root word.

use std::sync::atomic::Ordering;

use rdma_transport::Endpoint;

use super::{Client, Locked, Shared};
use crate::TreeError;
use crate::layout::{LeafKind, root_word};
use crate::page::Page;

impl<E: Endpoint> Client<E> {
    /// Splits a full leaf while inserting `key`: a new right page (one page allocation), then
    /// the shrunk left page and the unlock in one batch; then the separator goes to the parent.
    pub(super) async fn split_leaf(
        &mut self,
        shared: &Shared,
        locked: Locked<'_>,
        key: u64,
        value: u64,
    ) -> Result<(), TreeError> {
        let node = locked.node;
        let layout = shared.nodes[node].layout;
        let right_no = match self.allocate(node).await {
            Ok(n) => n,
            Err(e) => {
                self.release(locked, &[]).await?;
                return Err(e);
            }
        };
        let mut all = locked.page.sorted();
        let at = all.partition_point(|e| e.0 < key);
        all.insert(at, (key, value));
        let mid = all.len() / 2;
        let split_key = all[mid].0;
        let capacity = Page::capacity(layout.page_size);
        let mut right = Page::new(0, split_key, locked.page.high, capacity);
        right.sibling = locked.page.sibling;
        for (slot, &e) in all[mid..].iter().enumerate() {
            right.slots[slot] = Some(e);
        }
        let mut left = Page::new(0, locked.page.low, Some(split_key), capacity);
        left.sibling = right_no;
        for (slot, &e) in all[..mid].iter().enumerate() {
            left.slots[slot] = Some(e);
        }
        let left_no = locked.page_no;
        self.write_split(locked, right_no, &right, &left).await?;
        self.insert_separator(shared, node, 1, split_key, right_no, left_no)
            .await
    }

    /// Writes a split of the locked page into `left` (itself, shrunk) and the new page
    /// `right_no`: the right page first, so that it is whole once the left page's new version
    /// points at it (a reader that got there earlier would only read a page failing its checksum
    /// and read it again: the order is for progress, the checksum for correctness), then the left
    /// page with the unlock. On an error the lock is released while this thread still holds the
    /// word's stripe (so the word is its own).
    pub(super) async fn write_split(
        &mut self,
        locked: Locked<'_>,
        right_no: u64,
        right: &Page,
        left: &Page,
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[locked.node].layout;
        let right_bytes = right.encode(right_no, layout.page_size);
        let left_bytes = left.encode(locked.page_no, layout.page_size);
        self.write_split_bytes(locked, right_no, &right_bytes, &left_bytes)
            .await
    }

    /// [`Client::write_split`] of pages already encoded (a sorted page's or a hopscotch leaf's
    /// bytes): the right page whole first, then the left with the unlock.
    pub(super) async fn write_split_bytes<P>(
        &mut self,
        locked: Locked<'_, P>,
        right_no: u64,
        right_bytes: &[u8],
        left_bytes: &[u8],
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[locked.node].layout;
        if let Err(e) = self
            .remote_write(layout.page_addr(right_no), right_bytes)
            .await
        {
            self.abandon(layout, locked.word).await;
            drop(locked);
            return Err(e.into());
        }
        self.release(locked, &[(0, left_bytes)]).await
    }

    /// Installs a root above the chain of pages at level `level` starting at `first` (the old
    /// root and the pages split off it; as many of them as a page takes) if the root word still
    /// names `first`.
    pub(super) async fn install_root_over_chain(
        &mut self,
        node: usize,
        level: u8,
        first: u64,
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[node].layout;
        let capacity = Page::capacity(layout.page_size);
        let mut chain = Vec::new();
        // Each page after the first starts where the one before it ends (a hopscotch leaf keeps
        // no low fence of its own).
        let (mut high, mut sibling) = self.fences(node, level, first).await?;
        while sibling != 0 && chain.len() < capacity {
            let next = sibling;
            chain.push((high, next));
            (high, sibling) = self.fences(node, level, next).await?;
        }
        // A chain longer than a page takes is installed over its first pages anyway: the pages
        // after them are reached by moving right, and their splitters, which wait for a root,
        // put their separators in it (refusing would leave every splitter waiting for good).
        if chain.is_empty() {
            return Ok(());
        }
        let root_no = self.allocate(node).await?;
        let mut root = Page::new(level + 1, layout.key_lo, None, capacity);
        root.leftmost = first;
        for (slot, &e) in chain.iter().enumerate() {
            root.slots[slot] = Some(e);
        }
        self.remote_write(
            layout.page_addr(root_no),
            &root.encode(root_no, layout.page_size),
        )
        .await?;
        let old = root_word(level, first);
        let new = root_word(level + 1, root_no);
        if self.remote_cas(layout.root_addr(), old, new).await? == old {
            self.shared.nodes[node]
                .root
                .fetch_max(new, Ordering::AcqRel);
            self.remember(node, root_no, &root);
        }
        Ok(())
    }

    /// Page `page_no` at `level`: its high fence (`u64::MAX` for the last of its level) and its
    /// right sibling.
    async fn fences(
        &mut self,
        node: usize,
        level: u8,
        page_no: u64,
    ) -> Result<(u64, u64), TreeError> {
        if let (0, LeafKind::Hopscotch(g)) = (level, self.shared.nodes[node].layout.leaf) {
            let leaf = self.hop_read_leaf(node, page_no, g).await?;
            return Ok((leaf.high.unwrap_or(u64::MAX), leaf.sibling));
        }
        let page = self.read_page(node, page_no).await?;
        Ok((page.high.unwrap_or(u64::MAX), page.sibling))
    }

    /// One page from the memory node's allocation word (FAA); an allocation past the capacity is
    /// undone and reported.
    pub(super) async fn allocate(&mut self, node: usize) -> Result<u64, TreeError> {
        let layout = self.shared.nodes[node].layout;
        let page = self.remote_faa(layout.alloc_addr(), 1).await?;
        if page >= layout.page_capacity {
            self.remote_faa(layout.alloc_addr(), u64::MAX).await?;
            return Err(TreeError::PoolExhausted {
                node: layout.node(),
                capacity: layout.page_capacity,
            });
        }
        Ok(page)
    }

    /// Inserts separator `key` → `child` (the new right half of `left`, at `level - 1`) into the
    /// page at `level` covering `key`, splitting it (and so on up: the separator a split moves up
    /// goes in next, with attempts counted afresh) if full; installs a new root if `left` was the
    /// root.
    pub(super) async fn insert_separator(
        &mut self,
        shared: &Shared,
        node: usize,
        mut level: u8,
        mut key: u64,
        mut child: u64,
        mut left: u64,
    ) -> Result<(), TreeError> {
        let layout = shared.nodes[node].layout;
        'levels: loop {
            for attempt in 0..shared.config.max_attempts {
                let (root_level, root_page) = self.refresh_root(node).await?;
                if root_level < level {
                    if root_level + 1 == level && root_page == left {
                        // `left` was the root: a new root over it and the pages split off it
                        // (its new sibling, and any page a splitter that stopped before
                        // installing its root left after it); whoever's CAS loses finds its
                        // separator there.
                        self.install_root_over_chain(node, root_level, root_page)
                            .await?;
                        continue;
                    }
                    // Another compute node split the root and has not installed the new one
                    // yet: help it, with a root over the whole chain of the root level (whoever's
                    // CAS loses finds its separator already there).
                    if attempt >= 6 {
                        self.install_root_over_chain(node, root_level, root_page)
                            .await?;
                    }
                    self.pause(attempt).await;
                    continue;
                }
                let (page_no, parent) = self.locate(node, key, level).await?;
                let Some(mut locked) = self
                    .lock_covering(shared, node, page_no, parent, key, &mut None)
                    .await?
                else {
                    continue;
                };
                let mut seps: Vec<(u64, u64)> = locked.page.entries().collect();
                if key == locked.page.low || seps.iter().any(|s| s.0 == key) {
                    // Already there: as a separator, or as this page's low fence (a helper's root
                    // listed it, and a split of that root moved it up).
                    self.release(locked, &[]).await?;
                    return Ok(());
                }
                let at = seps.partition_point(|s| s.0 < key);
                seps.insert(at, (key, child));
                let capacity = Page::capacity(layout.page_size);
                if seps.len() <= capacity {
                    for (slot, e) in locked.page.slots.iter_mut().enumerate() {
                        *e = seps.get(slot).copied();
                    }
                    let bytes = locked.page.encode(locked.page_no, layout.page_size);
                    let page = locked.page.clone();
                    let page_no = locked.page_no;
                    self.release(locked, &[(0, &bytes)]).await?;
                    self.remember(node, page_no, &page);
                    return Ok(());
                }
                // Split the internal page: the middle separator moves up.
                let right_no = match self.allocate(node).await {
                    Ok(n) => n,
                    Err(e) => {
                        self.release(locked, &[]).await?;
                        return Err(e);
                    }
                };
                let mid = seps.len() / 2;
                let (up_key, up_child) = seps[mid];
                let mut right = Page::new(level, up_key, locked.page.high, capacity);
                right.sibling = locked.page.sibling;
                right.leftmost = up_child;
                for (slot, &e) in seps[mid + 1..].iter().enumerate() {
                    right.slots[slot] = Some(e);
                }
                let mut left_page = Page::new(level, locked.page.low, Some(up_key), capacity);
                left_page.sibling = right_no;
                left_page.leftmost = locked.page.leftmost;
                for (slot, &e) in seps[..mid].iter().enumerate() {
                    left_page.slots[slot] = Some(e);
                }
                let left_no = locked.page_no;
                self.write_split(locked, right_no, &right, &left_page)
                    .await?;
                self.remember(node, right_no, &right);
                self.remember(node, left_no, &left_page);
                (level, key, child, left) = (level + 1, up_key, right_no, left_no);
                continue 'levels;
            }
            return Err(TreeError::TooManyRetries(shared.config.max_attempts));
        }
    }
}
