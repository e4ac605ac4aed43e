//! The compute node's side: [`Tree`] (what its threads share: root words, the cache of internal
//! pages, the local lock table) and [`Client`] (one per thread: the operations).
//!
//! Read path: descend from the cached root through cached internal pages to the leaf's number,
//! READ the leaf, move right along siblings while the key lies at or past a page's high fence
//! (a split the cache has not seen). Write path: take the leaf's lock (local stripe, then a CAS
//! of the remote lock word with the leaf's READ fenced behind it in the same batch), change the
//! leaf, and WRITE the change with the unlock in one batch. Splits write the new right page, then
//! the shrunk left page, then unlock, and insert the separator into the parent the same way, up
//! to a new root installed by CAS of the root word.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use rdma_transport::{Endpoint, Stats, Transport, Verb};

use crate::TreeError;
use crate::layout::{Layout, root_word, unpack_root};
use crate::locks::{Held, LocalLocks, MAX_HANDOVERS};
use crate::page::{HEADER_WORDS, Page, page_checksum};

/// How a compute node uses the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeConfig {
    /// How long a writer waits for a lock before giving up (default 2 s).
    pub wait_limit: Duration,
    /// Attempts before an operation gives up (torn pages, trees changing under it; default
    /// 10,000).
    pub max_attempts: u32,
    /// The lowest level of internal pages the compute node caches (default 1: every internal
    /// page, the parents of leaves included, as Sherman does; 2 leaves the leaves' parents out,
    /// so a GET reads two pages; `u8::MAX` caches nothing).
    pub cache_from_level: u8,
    /// Stripes of the local lock table (default 4,096).
    pub local_lock_stripes: usize,
    /// Loom builds only: whether a reader moves right past a page's high fence (always, outside
    /// loom builds; loom models switch it off to show a split needs it).
    #[cfg(loom)]
    pub move_right: bool,
}

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            wait_limit: Duration::from_secs(2),
            max_attempts: 10_000,
            cache_from_level: 1,
            local_lock_stripes: 4096,
            #[cfg(loom)]
            move_right: true,
        }
    }
}

/// One memory node's tree as a compute node caches it.
#[derive(Debug)]
struct NodeTree {
    layout: Layout,
    /// The root word as last read.
    root: AtomicU64,
    /// Internal pages by number, as last read or written here.
    cache: RwLock<HashMap<u64, Arc<Page>>>,
}

#[derive(Debug)]
struct Shared {
    config: TreeConfig,
    /// Memory nodes in key order.
    nodes: Vec<NodeTree>,
    /// First key of each node.
    partition: Vec<u64>,
    locks: LocalLocks,
    /// This compute node's lock tag (never 0).
    tag: u64,
}

impl Shared {
    fn node_of(&self, key: u64) -> usize {
        self.partition
            .partition_point(|&lo| lo <= key)
            .saturating_sub(1)
    }
}

/// A compute node's handle on the B+-tree: shared by its [`Client`]s (one per thread).
#[derive(Debug)]
pub struct Tree<T: Transport> {
    transport: T,
    shared: Arc<Shared>,
}

/// Lock tags handed out in this process (each `Tree` is a compute node).
static NEXT_TAG: AtomicU64 = AtomicU64::new(1);

impl<T: Transport> Tree<T> {
    /// Attaches to every memory node of `transport` (each holding a bulk-loaded tree; their key
    /// ranges must tile the key space) and reads the root words.
    pub fn open(transport: T, config: TreeConfig) -> Result<Self, TreeError> {
        let mut ep = transport.endpoint()?;
        let mut nodes = Vec::new();
        for &info in transport.memory_nodes() {
            let layout = Layout::attach(&mut ep, info)?;
            let root = ep.read_word(layout.root_addr())?;
            nodes.push(NodeTree {
                layout,
                root: AtomicU64::new(root),
                cache: RwLock::new(HashMap::new()),
            });
        }
        nodes.sort_by_key(|n| n.layout.key_lo);
        let tiles = nodes.first().is_some_and(|n| n.layout.key_lo == 0)
            && nodes.last().is_some_and(|n| n.layout.key_hi == u64::MAX)
            && nodes
                .windows(2)
                .all(|w| w[0].layout.key_hi.checked_add(1) == Some(w[1].layout.key_lo));
        if !tiles {
            return Err(TreeError::Config(
                "the memory nodes' key ranges do not tile the key space".into(),
            ));
        }
        let tag = (u64::from(std::process::id()) << 24) | NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            transport,
            shared: Arc::new(Shared {
                partition: nodes.iter().map(|n| n.layout.key_lo).collect(),
                nodes,
                locks: LocalLocks::new(config.local_lock_stripes),
                config,
                tag: tag.max(1),
            }),
        })
    }

    /// A client for one thread (its own endpoint).
    pub fn client(&self) -> Result<Client<T::Endpoint>, TreeError> {
        Ok(Client {
            ep: self.transport.endpoint()?,
            shared: Arc::clone(&self.shared),
            stats: ClientStats::default(),
            last_parent: None,
        })
    }

    /// Bytes of internal pages cached now.
    pub fn cache_bytes(&self) -> u64 {
        self.shared
            .nodes
            .iter()
            .map(|n| {
                let cache = n.cache.read().unwrap_or_else(|e| e.into_inner());
                cache.len() as u64 * n.layout.page_size
            })
            .sum()
    }

    /// The layouts of the memory nodes, in key order.
    pub fn layouts(&self) -> Vec<Layout> {
        self.shared.nodes.iter().map(|n| n.layout).collect()
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }
}

/// A client's counters beyond its endpoint's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Verbs on the lock table (CAS attempts and unlock WRITEs): Sherman keeps the table in the
    /// NIC's on-chip memory, where these are cheaper; here they are counted apart so the report
    /// can show it.
    pub lock_verbs: u64,
    /// Locks taken from a local thread instead of the remote table.
    pub handovers: u64,
    /// Internal pages READ because the cache missed.
    pub cache_misses: u64,
    /// Moves to a right sibling (a split the cache had not seen).
    pub moves_right: u64,
    /// Pages read again because their checksum failed (a write was landing).
    pub torn_reads: u64,
}

/// The change a write makes.
#[derive(Debug, Clone, Copy)]
enum Change {
    Insert(u64),
    Update(u64),
    Upsert(u64),
    Delete,
}

/// A leaf or internal page read under its lock: the decoded page and its raw bytes (a write
/// patches the bytes, so words no entry uses keep what the memory node holds).
struct Locked<'s> {
    node: usize,
    page_no: u64,
    word: u64,
    page: Page,
    bytes: Vec<u8>,
    guard: MutexGuard<'s, Option<Held>>,
    handovers: u32,
}

/// One thread's handle on the tree.
#[derive(Debug)]
pub struct Client<E: Endpoint> {
    ep: E,
    shared: Arc<Shared>,
    stats: ClientStats,
    /// The internal page the last `locate` came through (scans predict the next leaves from it,
    /// cached or not).
    last_parent: Option<Arc<Page>>,
}

impl<E: Endpoint> Client<E> {
    /// The value of `key`, if present. One READ when the leaf's parent is cached.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, TreeError> {
        let shared = Arc::clone(&self.shared);
        let n = shared.node_of(key);
        for _ in 0..shared.config.max_attempts {
            let (leaf_no, parent) = self.locate(n, key, 0)?;
            match self.leaf_for(n, leaf_no, parent, key)? {
                Some(page) => return Ok(page.find(key).map(|e| e.1)),
                None => continue,
            }
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Inserts `key`; `Ok(false)` (and no change) if present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        self.write(key, Change::Insert(value))
    }

    /// Sets a present `key`'s value; `Ok(false)` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        self.write(key, Change::Update(value))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        self.write(key, Change::Upsert(value))
    }

    /// Deletes `key`; `Ok(false)` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, TreeError> {
        self.write(key, Change::Delete)
    }

    /// Up to `n` entries with keys ≥ `start`, in key order; continues across memory nodes.
    ///
    /// Rounds of one batch: locate the leaf holding `from` through the cache (no verb when the
    /// parent is cached), READ it together with the leaves the cached parent lists after it (as
    /// many as the rest of the scan needs), and take them in order while each starts where the
    /// previous one ended; the next round starts where the last page taken ended. A leaf the
    /// cache placed wrongly (a split it has not seen) is found by moving right instead.
    pub fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, TreeError> {
        let shared = Arc::clone(&self.shared);
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut from = start;
        let mut attempts = 0;
        while out.len() < n {
            attempts += 1;
            if attempts > shared.config.max_attempts {
                return Err(TreeError::TooManyRetries(shared.config.max_attempts));
            }
            let node = shared.node_of(from);
            let layout = shared.nodes[node].layout;
            let (leaf_no, parent) = self.locate(node, from, 0)?;
            // Loaded leaves hold about four fifths of their entries.
            let per_leaf = (Page::capacity(layout.page_size) * 4 / 5).max(1);
            let want = (n - out.len()).div_ceil(per_leaf).clamp(1, 64);
            let mut batch = vec![leaf_no];
            if let Some(page) = self.last_parent.take() {
                batch.extend(predict_after(&page, leaf_no, want - 1));
            }
            let mut pages = self.read_pages(node, &batch)?.into_iter();
            // The first page must hold `from`; otherwise (torn, or a split the cache missed)
            // find it the slow way, moving right.
            let first = match pages.next().flatten() {
                Some(p) if p.is_leaf() && p.covers(from) => p,
                _ => match self.leaf_and_number(node, leaf_no, parent, from)? {
                    Some((p, _)) => {
                        pages = Vec::new().into_iter();
                        p
                    }
                    None => continue,
                },
            };
            // A round that found its first leaf made progress.
            attempts = 0;
            let mut page = first;
            loop {
                for (k, v) in page.sorted() {
                    if k >= from && out.len() < n {
                        out.push((k, v));
                    }
                }
                match page.high {
                    Some(high) => from = high,
                    None => {
                        // The node's last leaf: on to the next node, or done.
                        match shared.nodes.get(node + 1) {
                            Some(next) => from = next.layout.key_lo,
                            None => return Ok(out),
                        }
                        break;
                    }
                }
                if out.len() >= n {
                    break;
                }
                match pages.next().flatten() {
                    Some(next) if next.is_leaf() && next.low == from => page = next,
                    // The prediction ran out or missed: the next round locates `from` again.
                    _ => break,
                }
            }
        }
        out.truncate(n);
        Ok(out)
    }

    /// Counters beyond the endpoint's.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The endpoint's counters.
    pub fn net_stats(&self) -> Stats {
        self.ep.stats()
    }

    /// The endpoint (fault injection in tests).
    pub fn endpoint_mut(&mut self) -> &mut E {
        &mut self.ep
    }

    // ----- reading -------------------------------------------------------------------------------

    /// READs page `page_no` until its checksum holds.
    fn read_page(&mut self, node: usize, page_no: u64) -> Result<Page, TreeError> {
        self.read_page_bytes(node, page_no).map(|(p, _)| p)
    }

    fn read_page_bytes(&mut self, node: usize, page_no: u64) -> Result<(Page, Vec<u8>), TreeError> {
        let layout = self.shared.nodes[node].layout;
        let mut bytes = vec![0u8; layout.page_size as usize];
        for attempt in 0..self.shared.config.max_attempts {
            self.ep.read(layout.page_addr(page_no), &mut bytes)?;
            if let Some(page) = Page::decode(page_no, &bytes) {
                return Ok((page, bytes));
            }
            self.stats.torn_reads += 1;
            pause(attempt);
        }
        Err(TreeError::TooManyRetries(self.shared.config.max_attempts))
    }

    /// READs `pages` in one batch; a page whose checksum fails is `None`.
    fn read_pages(&mut self, node: usize, pages: &[u64]) -> Result<Vec<Option<Page>>, TreeError> {
        let layout = self.shared.nodes[node].layout;
        let size = layout.page_size as usize;
        let mut buf = vec![0u8; size * pages.len()];
        {
            let mut verbs: Vec<Verb<'_>> = pages
                .iter()
                .zip(buf.chunks_exact_mut(size))
                .map(|(&p, chunk)| Verb::read(layout.page_addr(p), chunk))
                .collect();
            self.ep.batches(&mut verbs)?;
        }
        Ok(pages
            .iter()
            .zip(buf.chunks_exact(size))
            .map(|(&p, chunk)| Page::decode(p, chunk))
            .collect())
    }

    /// The internal page `page_no`: from the cache, else READ (and cached).
    fn internal(&mut self, node: usize, page_no: u64) -> Result<Arc<Page>, TreeError> {
        let shared = Arc::clone(&self.shared);
        let tree = &shared.nodes[node];
        // Only pages at or above the cached levels are ever put in the cache.
        if let Some(page) = tree
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&page_no)
        {
            return Ok(Arc::clone(page));
        }
        self.stats.cache_misses += 1;
        let page = Arc::new(self.read_page(node, page_no)?);
        if !page.is_leaf() && page.level >= shared.config.cache_from_level {
            tree.cache
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(page_no, Arc::clone(&page));
        }
        Ok(page)
    }

    fn forget(&self, node: usize, page_no: u64) {
        self.shared.nodes[node]
            .cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&page_no);
    }

    fn remember(&self, node: usize, page_no: u64, page: &Page) {
        if !page.is_leaf() && page.level >= self.shared.config.cache_from_level {
            self.shared.nodes[node]
                .cache
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(page_no, Arc::new(page.clone()));
        }
    }

    /// Re-reads the root word.
    fn refresh_root(&mut self, node: usize) -> Result<(u8, u64), TreeError> {
        let tree = &self.shared.nodes[node];
        let word = self.ep.read_word(tree.layout.root_addr())?;
        // Roots only ever rise (a new root's word is larger: its level is higher), and a slower
        // thread's older read must not take the cached word back.
        let newest = tree.root.fetch_max(word, Ordering::AcqRel).max(word);
        Ok(unpack_root(newest))
    }

    /// The page at `level` whose range should hold `key` (a split the cache has not seen may
    /// have moved `key` to a right sibling), and the internal page that led there (if any).
    /// `level` must not exceed the root's.
    fn locate(
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
                let (fresh_level, _) = self.refresh_root(node)?;
                if fresh_level < level {
                    return Err(TreeError::Corrupt(format!(
                        "no level {level} yet (the root is at level {fresh_level})"
                    )));
                }
                continue 'restart;
            }
            let mut parent = None;
            while at_level > level {
                let page = self.internal(node, page_no)?;
                if page.level != at_level || page.low > key {
                    // A cached page from before a change we cannot explain: start over fresh.
                    self.forget(node, page_no);
                    if let Some(p) = parent {
                        self.forget(node, p);
                    }
                    self.refresh_root(node)?;
                    continue 'restart;
                }
                if page.past_high(key) {
                    // A split this cache has not seen: move right, and let the parent (or the
                    // root word) be read again next time.
                    self.stats.moves_right += 1;
                    match parent {
                        Some(p) => self.forget(node, p),
                        None => {
                            self.refresh_root(node)?;
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
    fn leaf_for(
        &mut self,
        node: usize,
        leaf_no: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<Option<Page>, TreeError> {
        Ok(self
            .leaf_and_number(node, leaf_no, parent, key)?
            .map(|(p, _)| p))
    }

    fn leaf_and_number(
        &mut self,
        node: usize,
        mut leaf_no: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<Option<(Page, u64)>, TreeError> {
        for _ in 0..self.shared.config.max_attempts {
            let page = self.read_page(node, leaf_no)?;
            if !page.is_leaf() || page.low > key {
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                self.refresh_root(node)?;
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

    // ----- writing -------------------------------------------------------------------------------

    fn write(&mut self, key: u64, change: Change) -> Result<bool, TreeError> {
        let shared = Arc::clone(&self.shared);
        let node = shared.node_of(key);
        for _ in 0..shared.config.max_attempts {
            let (leaf_no, parent) = self.locate(node, key, 0)?;
            let Some(mut locked) = self.lock_covering(&shared, node, leaf_no, parent, key)? else {
                continue;
            };
            let page = &locked.page;
            let found = page.find(key);
            let result = match (change, found) {
                (Change::Insert(_), Some(_))
                | (Change::Update(_), None)
                | (Change::Delete, None) => {
                    self.release(locked, &[])?;
                    return Ok(false);
                }
                (Change::Update(v) | Change::Upsert(v), Some((slot, _))) => {
                    set_entry(&mut locked, slot, Some((key, v)));
                    self.commit_entry(locked, slot)?;
                    return Ok(matches!(change, Change::Update(_)));
                }
                (Change::Delete, Some((slot, _))) => {
                    set_entry(&mut locked, slot, None);
                    self.commit_entry(locked, slot)?;
                    return Ok(true);
                }
                (Change::Insert(v) | Change::Upsert(v), None) => match page.free_slot() {
                    Some(slot) => {
                        set_entry(&mut locked, slot, Some((key, v)));
                        self.commit_entry(locked, slot)?;
                        true
                    }
                    None => {
                        self.split_leaf(&shared, locked, key, v)?;
                        true
                    }
                },
            };
            return Ok(result);
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Locks the page at or right of `page_no` that covers `key` (moving right under the lock
    /// protocol); `None` if the cache led somewhere wrong (locate again).
    fn lock_covering<'s>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        mut page_no: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<Option<Locked<'s>>, TreeError> {
        for _ in 0..shared.config.max_attempts {
            let locked = self.lock(shared, node, page_no)?;
            if locked.page.low > key {
                self.release(locked, &[])?;
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                self.refresh_root(node)?;
                return Ok(None);
            }
            if locked.page.past_high(key) {
                let sibling = locked.page.sibling;
                self.release(locked, &[])?;
                self.stats.moves_right += 1;
                // The parent that led here predates a split: read it again next time.
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                if sibling == 0 {
                    return Err(TreeError::Corrupt(format!(
                        "page {page_no} ends below {key} with no sibling"
                    )));
                }
                page_no = sibling;
                continue;
            }
            return Ok(Some(locked));
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Takes page `page_no`'s lock and reads the page under it: the local stripe first; then, if
    /// no local thread left the remote lock to this one, a CAS of the lock word with the page's
    /// READ fenced behind it (one round trip per attempt).
    fn lock<'s>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        page_no: u64,
    ) -> Result<Locked<'s>, TreeError> {
        let layout = shared.nodes[node].layout;
        let word = layout.lock_of(page_no);
        let stripe = shared.locks.stripe(layout.node(), word);
        let mut guard = stripe.enter();
        let mut handovers = 0;
        let mut have = false;
        if let Some(held) = guard.take() {
            if held.node == layout.node() && held.word == word {
                have = true;
                handovers = held.handovers + 1;
                self.stats.handovers += 1;
            } else {
                // A lock left for another word of this stripe: release it first, on its node.
                self.stats.lock_verbs += 1;
                let other = shared
                    .nodes
                    .iter()
                    .find(|n| n.layout.node() == held.node)
                    .map(|n| n.layout.lock_addr(held.word));
                if let Some(at) = other
                    && let Err(e) = self.ep.write_word(at, 0)
                {
                    // Still held: leave it recorded for whoever comes next.
                    *guard = Some(held);
                    return Err(e.into());
                }
            }
        }
        let size = layout.page_size as usize;
        let mut bytes = vec![0u8; size];
        if have {
            if let Err(e) = self.ep.read(layout.page_addr(page_no), &mut bytes) {
                self.abandon(layout, word);
                return Err(e.into());
            }
        } else {
            let deadline = Instant::now() + shared.config.wait_limit;
            let mut attempt = 0;
            loop {
                let mut verbs = [
                    Verb::cas(layout.lock_addr(word), 0, shared.tag),
                    Verb::read(layout.page_addr(page_no), &mut bytes).fenced(),
                ];
                self.stats.lock_verbs += 1;
                if let Err(e) = self.ep.batch(&mut verbs) {
                    // The CAS may have executed before the failure: a word holding this compute
                    // node's tag is this thread's (it holds the word's stripe).
                    if self.ep.read_word(layout.lock_addr(word)) == Ok(shared.tag) {
                        self.abandon(layout, word);
                    }
                    return Err(e.into());
                }
                if verbs[0].cas_succeeded() == Some(true) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(TreeError::LockTimeout {
                        node: layout.node(),
                        page: page_no,
                    });
                }
                pause(attempt);
                attempt += 1;
            }
        }
        let Some(page) = Page::decode(page_no, &bytes) else {
            // Nothing writes a page without its lock: a page that fails its checksum under the
            // lock is damage, not a race.
            self.ep.write_word(layout.lock_addr(word), 0)?;
            self.stats.lock_verbs += 1;
            return Err(TreeError::Corrupt(format!(
                "page {page_no} of memory node {} fails its checksum under its lock",
                layout.node()
            )));
        };
        Ok(Locked {
            node,
            page_no,
            word,
            page,
            bytes,
            guard,
            handovers,
        })
    }

    /// Ends a locked write: `writes` (fenced in order), then the unlock in the same batch — or,
    /// if a local thread waits for this lock and it has not been handed over too often, no
    /// unlock: the lock is left to that thread.
    fn release(
        &mut self,
        mut locked: Locked<'_>,
        writes: &[(u64, &[u8])],
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[locked.node].layout;
        let stripe = self.shared.locks.stripe(layout.node(), locked.word);
        let hand_over = stripe.contended() && locked.handovers < MAX_HANDOVERS;
        let zero = [0u8; 8];
        let mut verbs: Vec<Verb<'_>> = writes
            .iter()
            .map(|&(offset, data)| {
                Verb::write(
                    layout
                        .page_addr(locked.page_no)
                        .checked_add(offset)
                        .unwrap_or_default(),
                    data,
                )
            })
            .collect();
        if !hand_over {
            verbs.push(Verb::write(layout.lock_addr(locked.word), &zero));
            self.stats.lock_verbs += 1;
        }
        // Every verb of the batch can be repeated (the same bytes; the unlock), so a batch that
        // failed part-way is run again rather than leaving a page half written under its lock.
        let mut result = self.ep.batch(&mut verbs);
        for _ in 0..2 {
            if result.is_ok() {
                break;
            }
            result = self.ep.batch(&mut verbs);
        }
        drop(verbs);
        if result.is_err() {
            // Still failing: whatever of the batch ran, the lock must not stay held (a lost
            // completion breaks the endpoint for good, so a retry above never repeats a batch
            // that had run whole). Released while the stripe is still this thread's.
            self.abandon(layout, locked.word);
        }
        if hand_over && result.is_ok() {
            *locked.guard = Some(Held {
                node: layout.node(),
                word: locked.word,
                handovers: locked.handovers,
            });
        }
        result.map_err(Into::into)
    }

    /// Writes leaf entry `slot` and the page's checksum and bitmap, and unlocks.
    fn commit_entry(&mut self, locked: Locked<'_>, slot: usize) -> Result<(), TreeError> {
        let at = 8 * (HEADER_WORDS + 2 * slot);
        let head = locked.bytes[..16].to_vec();
        let entry = locked.bytes[at..at + 16].to_vec();
        self.release(locked, &[(at as u64, &entry), (0, &head)])
    }

    /// Splits a full leaf while inserting `key`: a new right page (one page allocation), then
    /// the shrunk left page and the unlock in one batch; then the separator goes to the parent.
    fn split_leaf(
        &mut self,
        shared: &Shared,
        locked: Locked<'_>,
        key: u64,
        value: u64,
    ) -> Result<(), TreeError> {
        let node = locked.node;
        let layout = shared.nodes[node].layout;
        let right_no = match self.allocate(node) {
            Ok(n) => n,
            Err(e) => {
                self.release(locked, &[])?;
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
        self.write_split(locked, right_no, &right, &left)?;
        self.insert_separator(shared, node, 1, split_key, right_no, left_no)
    }

    /// Writes a split of the locked page into `left` (itself, shrunk) and the new page
    /// `right_no`: the right page first, so that it is whole once the left page's new version
    /// points at it (a reader that got there earlier would only read a page failing its checksum
    /// and read it again: the order is for progress, the checksum for correctness), then the left
    /// page with the unlock. On an error the lock is released while this thread still holds the
    /// word's stripe (so the word is its own).
    fn write_split(
        &mut self,
        locked: Locked<'_>,
        right_no: u64,
        right: &Page,
        left: &Page,
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[locked.node].layout;
        let right_bytes = right.encode(right_no, layout.page_size);
        let left_bytes = left.encode(locked.page_no, layout.page_size);
        if let Err(e) = self.ep.write(layout.page_addr(right_no), &right_bytes) {
            self.abandon(layout, locked.word);
            drop(locked);
            return Err(e.into());
        }
        self.release(locked, &[(0, &left_bytes)])
    }

    /// Installs a root above the chain of pages at level `level` starting at `first` (the old
    /// root and the pages split off it), if the chain fits one page and the root word still
    /// names `first`.
    fn install_root_over_chain(
        &mut self,
        node: usize,
        level: u8,
        first: u64,
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[node].layout;
        let capacity = Page::capacity(layout.page_size);
        let mut chain = Vec::new();
        let mut page = self.read_page(node, first)?;
        while page.sibling != 0 && chain.len() < capacity {
            let next = page.sibling;
            page = self.read_page(node, next)?;
            chain.push((page.low, next));
        }
        if chain.is_empty() || page.sibling != 0 {
            return Ok(());
        }
        let root_no = self.allocate(node)?;
        let mut root = Page::new(level + 1, layout.key_lo, None, capacity);
        root.leftmost = first;
        for (slot, &e) in chain.iter().enumerate() {
            root.slots[slot] = Some(e);
        }
        self.ep.write(
            layout.page_addr(root_no),
            &root.encode(root_no, layout.page_size),
        )?;
        let old = root_word(level, first);
        let new = root_word(level + 1, root_no);
        if self.ep.cas(layout.root_addr(), old, new)? == old {
            self.shared.nodes[node]
                .root
                .fetch_max(new, Ordering::AcqRel);
            self.remember(node, root_no, &root);
        }
        Ok(())
    }

    /// Best-effort release of lock word `word` after an error (the error is what the caller
    /// reports; if this WRITE fails too, the word stays held and writers of its pages time out).
    fn abandon(&mut self, layout: Layout, word: u64) {
        self.stats.lock_verbs += 1;
        let _ = self.ep.write_word(layout.lock_addr(word), 0);
    }

    /// One page from the memory node's allocation word (FAA); an allocation past the capacity is
    /// undone and reported.
    fn allocate(&mut self, node: usize) -> Result<u64, TreeError> {
        let layout = self.shared.nodes[node].layout;
        let page = self.ep.faa(layout.alloc_addr(), 1)?;
        if page >= layout.page_capacity {
            self.ep.faa(layout.alloc_addr(), u64::MAX)?;
            return Err(TreeError::PoolExhausted {
                node: layout.node(),
                capacity: layout.page_capacity,
            });
        }
        Ok(page)
    }

    /// Inserts separator `key` → `child` (the new right half of `left`, at `level - 1`) into the
    /// page at `level` covering `key`, splitting it (and so on up) if full; installs a new root
    /// if `left` was the root.
    fn insert_separator(
        &mut self,
        shared: &Shared,
        node: usize,
        level: u8,
        key: u64,
        child: u64,
        left: u64,
    ) -> Result<(), TreeError> {
        let layout = shared.nodes[node].layout;
        for attempt in 0..shared.config.max_attempts {
            let (root_level, root_page) = self.refresh_root(node)?;
            if root_level < level {
                if root_level + 1 == level && root_page == left {
                    // `left` was the root: a new root above it and its new sibling.
                    let root_no = self.allocate(node)?;
                    let mut root =
                        Page::new(level, layout.key_lo, None, Page::capacity(layout.page_size));
                    root.leftmost = left;
                    root.slots[0] = Some((key, child));
                    let bytes = root.encode(root_no, layout.page_size);
                    self.ep.write(layout.page_addr(root_no), &bytes)?;
                    let old = root_word(root_level, root_page);
                    let new = root_word(level, root_no);
                    if self.ep.cas(layout.root_addr(), old, new)? == old {
                        shared.nodes[node].root.fetch_max(new, Ordering::AcqRel);
                        self.remember(node, root_no, &root);
                        return Ok(());
                    }
                    // Someone else installed a root first (the page stays unused).
                    continue;
                }
                // Another compute node split the root and has not installed the new one yet: help
                // it, with a root over the whole chain of the root level (whoever's CAS loses
                // finds its separator already there).
                if attempt >= 6 {
                    self.install_root_over_chain(node, root_level, root_page)?;
                }
                pause(attempt);
                continue;
            }
            let (page_no, parent) = self.locate(node, key, level)?;
            let Some(mut locked) = self.lock_covering(shared, node, page_no, parent, key)? else {
                continue;
            };
            let mut seps: Vec<(u64, u64)> = locked.page.entries().collect();
            if key == locked.page.low || seps.iter().any(|s| s.0 == key) {
                // Already there: as a separator, or as this page's low fence (a helper's root
                // listed it, and a split of that root moved it up).
                self.release(locked, &[])?;
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
                self.release(locked, &[(0, &bytes)])?;
                self.remember(node, page_no, &page);
                return Ok(());
            }
            // Split the internal page: the middle separator moves up.
            let right_no = match self.allocate(node) {
                Ok(n) => n,
                Err(e) => {
                    self.release(locked, &[])?;
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
            self.write_split(locked, right_no, &right, &left_page)?;
            self.remember(node, right_no, &right);
            self.remember(node, left_no, &left_page);
            return self.insert_separator(shared, node, level + 1, up_key, right_no, left_no);
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }
}

/// Sets leaf entry `slot` in the locked page and patches its raw bytes (entry, bitmap,
/// checksum).
fn set_entry(locked: &mut Locked<'_>, slot: usize, entry: Option<(u64, u64)>) {
    locked.page.slots[slot] = entry;
    let bytes = &mut locked.bytes;
    let mut bitmap = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
    match entry {
        Some((k, v)) => {
            bitmap |= 1 << slot;
            let at = 8 * (HEADER_WORDS + 2 * slot);
            bytes[at..at + 8].copy_from_slice(&k.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
        }
        None => bitmap &= !(1 << slot),
    }
    bytes[8..16].copy_from_slice(&bitmap.to_le_bytes());
    let sum = page_checksum(locked.page_no, &bytes[8..]);
    bytes[..8].copy_from_slice(&sum.to_le_bytes());
}

/// Backoff between attempts: spin, then yield, then sleep a little.
fn pause(attempt: u32) {
    #[cfg(loom)]
    {
        let _ = attempt;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    if attempt >= 12 {
        std::thread::sleep(Duration::from_micros(20));
    } else if attempt < 6 {
        for _ in 0..(1u32 << attempt) {
            std::hint::spin_loop();
        }
    } else {
        std::thread::yield_now();
    }
}

/// Up to `want` children `parent` lists after `leaf_no`, in key order.
fn predict_after(parent: &Page, leaf_no: u64, want: usize) -> Vec<u64> {
    let children: Vec<u64> = std::iter::once(parent.leftmost)
        .chain(parent.entries().map(|e| e.1))
        .collect();
    match children.iter().position(|&c| c == leaf_no) {
        Some(at) => children[at + 1..].iter().take(want).copied().collect(),
        None => Vec::new(),
    }
}
