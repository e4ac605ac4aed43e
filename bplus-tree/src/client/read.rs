//! Reading: pages READ until their checksum holds, the cache of internal pages, and the descent
//! from the root to the page that should hold a key, moving right past splits the cache has not
//! seen.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rdma_transport::{Endpoint, Verb};

use super::Client;
use crate::TreeError;
use crate::layout::unpack_root;
use crate::page::Page;

impl<E: Endpoint> Client<E> {
    /// READs page `page_no` until its checksum holds.
    pub(super) async fn read_page(&mut self, node: usize, page_no: u64) -> Result<Page, TreeError> {
        self.read_page_bytes(node, page_no).await.map(|(p, _)| p)
    }

    pub(super) async fn read_page_bytes(
        &mut self,
        node: usize,
        page_no: u64,
    ) -> Result<(Page, Vec<u8>), TreeError> {
        let layout = self.shared.nodes[node].layout;
        let mut bytes = vec![0u8; layout.page_size as usize];
        for attempt in 0..self.shared.config.max_attempts {
            self.remote_read(layout.page_addr(page_no), &mut bytes)
                .await?;
            if let Some(page) = Page::decode(page_no, &bytes) {
                return Ok((page, bytes));
            }
            self.stats.torn_reads += 1;
            self.pause(attempt).await;
        }
        Err(TreeError::TooManyRetries(self.shared.config.max_attempts))
    }

    /// READs `pages` in one batch; a page whose checksum fails is `None`.
    pub(super) async fn read_pages(
        &mut self,
        node: usize,
        pages: &[u64],
    ) -> Result<Vec<Option<Page>>, TreeError> {
        let size = self.shared.nodes[node].layout.page_size as usize;
        let buf = self.read_page_prefixes(node, pages, size).await?;
        Ok(pages
            .iter()
            .zip(buf.chunks_exact(size))
            .map(|(&p, chunk)| Page::decode(p, chunk))
            .collect())
    }

    /// READs the first `size` bytes of each of `pages` in one batch, one after another.
    pub(super) async fn read_page_prefixes(
        &mut self,
        node: usize,
        pages: &[u64],
        size: usize,
    ) -> Result<Vec<u8>, TreeError> {
        let layout = self.shared.nodes[node].layout;
        let mut buf = vec![0u8; size * pages.len()];
        {
            let mut verbs: Vec<Verb<'_>> = pages
                .iter()
                .zip(buf.chunks_exact_mut(size))
                .map(|(&p, chunk)| Verb::read(layout.page_addr(p), chunk))
                .collect();
            self.batches(&mut verbs).await?;
        }
        Ok(buf)
    }

    /// The internal page `page_no`: from the cache, else READ (and cached).
    pub(super) async fn internal(
        &mut self,
        node: usize,
        page_no: u64,
    ) -> Result<Arc<Page>, TreeError> {
        let shared = Arc::clone(&self.shared);
        // Only pages at or above the cached levels are ever put in the cache.
        if let Some(page) = shared.cache.get(node, page_no) {
            return Ok(page);
        }
        self.stats.cache_misses += 1;
        let page = Arc::new(self.read_page(node, page_no).await?);
        if !page.is_leaf() && page.level >= shared.config.cache_from_level {
            shared.cache.insert(node, page_no, Arc::clone(&page));
        }
        Ok(page)
    }

    pub(super) fn forget(&self, node: usize, page_no: u64) {
        self.shared.cache.remove(node, page_no);
    }

    pub(super) fn remember(&self, node: usize, page_no: u64, page: &Page) {
        if !page.is_leaf() && page.level >= self.shared.config.cache_from_level {
            self.shared
                .cache
                .insert(node, page_no, Arc::new(page.clone()));
        }
    }

    /// Re-reads the root word.
    pub(super) async fn refresh_root(&mut self, node: usize) -> Result<(u8, u64), TreeError> {
        let root_addr = self.shared.nodes[node].layout.root_addr();
        let word = self.remote_read_word(root_addr).await?;
        let tree = &self.shared.nodes[node];
        // Roots only ever rise (a new root's word is larger: its level is higher), and a slower
        // thread's older read must not take the cached word back.
        let newest = tree.root.fetch_max(word, Ordering::AcqRel).max(word);
        Ok(unpack_root(newest))
    }

    /// The page at `level` whose range should hold `key` (a split the cache has not seen may
    /// have moved `key` to a right sibling), and the internal page that led there (if any).
    /// `level` must not exceed the root's.
    pub(super) async fn locate(
        &mut self,
        node: usize,
        key: u64,
        level: u8,
    ) -> Result<(u64, Option<u64>), TreeError> {
        let max = self.shared.config.max_attempts;
        'restart: for _ in 0..max {
            let (mut at_level, mut page_no) =
                unpack_root(self.shared.nodes[node].root.load(Ordering::Acquire));
            if at_level < level {
                // The cached root may be older than the one the caller saw.
                let (fresh_level, _) = self.refresh_root(node).await?;
                if fresh_level < level {
                    return Err(TreeError::Corrupt(format!(
                        "no level {level} yet (the root is at level {fresh_level})"
                    )));
                }
                continue 'restart;
            }
            let mut parent = None;
            while at_level > level {
                let page = self.internal(node, page_no).await?;
                if page.level != at_level || page.low > key {
                    // A cached page from before a change we cannot explain: start over fresh.
                    self.forget(node, page_no);
                    if let Some(p) = parent {
                        self.forget(node, p);
                    }
                    self.refresh_root(node).await?;
                    continue 'restart;
                }
                if page.past_high(key) {
                    // A split this cache has not seen: move right, and let the parent (or the
                    // root word) be read again next time.
                    self.stats.moves_right += 1;
                    match parent {
                        Some(p) => self.forget(node, p),
                        None => {
                            self.refresh_root(node).await?;
                        }
                    }
                    if page.sibling == 0 {
                        return Err(TreeError::Corrupt(format!(
                            "page {page_no} ends below {key} with no sibling"
                        )));
                    }
                    self.forget(node, page_no);
                    page_no = page.sibling;
                    continue;
                }
                parent = Some(page_no);
                page_no = page.child_for(key);
                at_level -= 1;
                self.last_parent = Some(page);
            }
            if parent.is_none() {
                self.last_parent = None;
            }
            return Ok((page_no, parent));
        }
        Err(TreeError::TooManyRetries(max))
    }

    /// READs leaf `leaf_no` and moves right until the page covers `key`; `None` if the cache led
    /// somewhere wrong (it has been corrected: locate again).
    pub(super) async fn leaf_for(
        &mut self,
        node: usize,
        leaf_no: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<Option<Page>, TreeError> {
        Ok(self
            .leaf_and_number(node, leaf_no, parent, key)
            .await?
            .map(|(p, _)| p))
    }

    pub(super) async fn leaf_and_number(
        &mut self,
        node: usize,
        mut leaf_no: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<Option<(Page, u64)>, TreeError> {
        for _ in 0..self.shared.config.max_attempts {
            let page = self.read_page(node, leaf_no).await?;
            if !page.is_leaf() || page.low > key {
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                self.refresh_root(node).await?;
                return Ok(None);
            }
            #[cfg(loom)]
            let moves = self.shared.config.move_right;
            #[cfg(not(loom))]
            let moves = true;
            if page.past_high(key) && moves {
                self.stats.moves_right += 1;
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                if page.sibling == 0 {
                    return Err(TreeError::Corrupt(format!(
                        "leaf {leaf_no} ends below {key} with no sibling"
                    )));
                }
                leaf_no = page.sibling;
                continue;
            }
            return Ok(Some((page, leaf_no)));
        }
        Err(TreeError::TooManyRetries(self.shared.config.max_attempts))
    }
}
