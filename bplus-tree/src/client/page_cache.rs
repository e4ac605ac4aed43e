//! The compute node's cache of internal pages, within a byte budget (as Sherman and CHIME keep
//! theirs): pages by (memory node, page number), evicted in CLOCK order once the budget is full.
//!
//! **Invariant.** With a budget, the pages held never take more than the budget (`len · page
//! size ≤ budget`): an insert first evicts until its page fits, and a budget smaller than one
//! page caches nothing. Every held page is in the CLOCK ring; the ring may also hold keys of
//! pages since forgotten (a split the cache had not seen), which the hand skips. Without a
//! budget the ring is not kept and nothing is evicted.
//!
//! A cached page is only ever a hint (ARCHITECTURE §10: pages are never freed, and a stale one
//! costs a move right), so evicting one costs a READ, never an answer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::page::Page;

#[derive(Debug)]
struct Held {
    page: Arc<Page>,
    /// Used since the hand last passed it.
    referenced: AtomicBool,
}

#[derive(Debug, Default)]
struct Pages {
    map: HashMap<u64, Held>,
    /// Keys in CLOCK order (kept only with a budget).
    ring: VecDeque<u64>,
}

/// Internal pages of every memory node, shared by a compute node's clients.
#[derive(Debug)]
pub(super) struct PageCache {
    pages: RwLock<Pages>,
    /// Pages it may hold (`None`: no limit).
    capacity: Option<usize>,
    page_size: u64,
}

fn key(node: usize, page_no: u64) -> u64 {
    ((node as u64) << 48) | page_no
}

impl PageCache {
    /// A cache of pages of `page_size` bytes within `budget` bytes (`None`: no limit).
    pub(super) fn new(budget: Option<u64>, page_size: u64) -> Self {
        Self {
            pages: RwLock::new(Pages::default()),
            capacity: budget.map(|b| usize::try_from(b / page_size.max(1)).unwrap_or(usize::MAX)),
            page_size,
        }
    }

    pub(super) fn get(&self, node: usize, page_no: u64) -> Option<Arc<Page>> {
        let pages = self.pages.read().unwrap_or_else(|e| e.into_inner());
        let held = pages.map.get(&key(node, page_no))?;
        if self.capacity.is_some() && !held.referenced.load(Ordering::Relaxed) {
            held.referenced.store(true, Ordering::Relaxed);
        }
        Some(Arc::clone(&held.page))
    }

    pub(super) fn insert(&self, node: usize, page_no: u64, page: Arc<Page>) {
        let k = key(node, page_no);
        let mut pages = self.pages.write().unwrap_or_else(|e| e.into_inner());
        let held = Held {
            page,
            referenced: AtomicBool::new(false),
        };
        let Some(capacity) = self.capacity else {
            pages.map.insert(k, held);
            return;
        };
        if capacity == 0 {
            return;
        }
        if let Some(old) = pages.map.get_mut(&k) {
            *old = held;
            return;
        }
        while pages.map.len() >= capacity {
            let Some(victim) = pages.ring.pop_front() else {
                break;
            };
            let keep = match pages.map.get(&victim) {
                Some(h) => h.referenced.swap(false, Ordering::Relaxed),
                None => continue,
            };
            if keep {
                pages.ring.push_back(victim);
            } else {
                pages.map.remove(&victim);
            }
        }
        pages.map.insert(k, held);
        pages.ring.push_back(k);
        if pages.ring.len() > 2 * pages.map.len() + 64 {
            let Pages { map, ring } = &mut *pages;
            let mut seen = HashSet::new();
            ring.retain(|k| map.contains_key(k) && seen.insert(*k));
        }
    }

    pub(super) fn remove(&self, node: usize, page_no: u64) {
        self.pages
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .remove(&key(node, page_no));
    }

    /// Bytes of pages held.
    pub(super) fn bytes(&self) -> u64 {
        let pages = self.pages.read().unwrap_or_else(|e| e.into_inner());
        pages.map.len() as u64 * self.page_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(level: u8) -> Arc<Page> {
        Arc::new(Page::new(level, 0, None, 4))
    }

    #[test]
    fn stays_within_its_budget_and_keeps_what_is_used() {
        let cache = PageCache::new(Some(4 * 1024), 1024);
        for n in 1..=4 {
            cache.insert(0, n, page(1));
        }
        assert_eq!(cache.bytes(), 4 * 1024);
        // Page 1 is used: the hand passes it over and evicts page 2 instead.
        assert!(cache.get(0, 1).is_some());
        cache.insert(0, 5, page(1));
        assert_eq!(cache.bytes(), 4 * 1024);
        assert!(cache.get(0, 1).is_some());
        assert!(cache.get(0, 2).is_none());
        // Many more: never above the budget.
        for n in 6..100 {
            cache.insert(1, n, page(1));
            assert!(cache.bytes() <= 4 * 1024);
        }
        cache.remove(1, 99);
        assert_eq!(cache.bytes(), 3 * 1024);
    }

    #[test]
    fn a_budget_below_one_page_caches_nothing_and_none_caches_everything() {
        let tiny = PageCache::new(Some(1000), 1024);
        tiny.insert(0, 1, page(1));
        assert_eq!(tiny.bytes(), 0);
        let all = PageCache::new(None, 1024);
        for n in 0..1000 {
            all.insert(0, n, page(1));
        }
        assert_eq!(all.bytes(), 1000 * 1024);
    }
}
