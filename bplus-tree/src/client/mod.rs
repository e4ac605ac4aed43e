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
//!
//! Operations are futures (several may be in flight on one thread, each on a client of its own:
//! see [`crate::Pipeline`]): every batch is awaited as the operation waits ([`Waiting`], set as
//! it starts). The synchronous methods run them in blocking mode, where nothing is ever pending:
//! they behave exactly as before.

mod hopscotch;
mod hot;
mod io;
mod page_cache;
mod read;
mod scan;
mod split;
mod value;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rdma_transport::{Endpoint, Stats, Transport};

pub use hot::HOT_ENTRY_BYTES;

use crate::TreeError;
use crate::layout::{Layout, LeafKind};
use crate::locks::{Held, LocalLocks};
use crate::page::Page;
use crate::value::NodeValues;
use crate::wait::{self, Waiting, block_on};

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
    /// Bytes of internal pages this compute node may cache, over all memory nodes (default: no
    /// limit); over it, the least recently used go (CLOCK), as in Sherman and CHIME.
    pub cache_budget: Option<u64>,
    /// Stripes of the local lock table (default 4,096).
    pub local_lock_stripes: usize,
    /// Pools of hopscotch leaves only: bytes of CHIME's buffer of hot entries (where a key was
    /// last found, so that a GET of a hot key READs one slot; 24 bytes an entry), taken out of
    /// `cache_budget` when there is one (default 0: none).
    pub hot_entries_bytes: u64,
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
            cache_budget: None,
            local_lock_stripes: 4096,
            hot_entries_bytes: 0,
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
}

#[derive(Debug)]
struct Shared {
    config: TreeConfig,
    /// Memory nodes in key order.
    nodes: Vec<NodeTree>,
    /// Internal pages of every node, as last read or written here.
    cache: page_cache::PageCache,
    /// Where hot keys were last found (hopscotch pools).
    hot: hot::HotEntries,
    /// First key of each node.
    partition: Vec<u64>,
    locks: LocalLocks,
    /// Per memory node (in key order), with byte values: this compute node's value blocks.
    values: Vec<Option<Mutex<NodeValues>>>,
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
        if nodes
            .windows(2)
            .any(|w| w[0].layout.leaf != w[1].layout.leaf)
        {
            return Err(TreeError::Config(
                "the memory nodes' pools have leaves of different kinds".into(),
            ));
        }
        let tag = (u64::from(std::process::id()) << 24) | NEXT_TAG.fetch_add(1, Ordering::Relaxed);
        let page_size = nodes.first().map_or(1, |n| n.layout.page_size);
        Ok(Self {
            transport,
            shared: Arc::new(Shared {
                cache: page_cache::PageCache::new(
                    config
                        .cache_budget
                        .map(|b| b.saturating_sub(config.hot_entries_bytes)),
                    page_size,
                ),
                hot: hot::HotEntries::new(match nodes.first().map(|n| n.layout.leaf) {
                    Some(LeafKind::Hopscotch(_)) => config.hot_entries_bytes,
                    _ => 0,
                }),
                partition: nodes.iter().map(|n| n.layout.key_lo).collect(),
                values: nodes
                    .iter()
                    .map(|n| n.layout.has_values().then(|| Mutex::new(NodeValues::new())))
                    .collect(),
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
            waiting: Waiting::Blocking,
        })
    }

    /// `depth` clients driven together by one thread: up to `depth` operations in flight
    /// ([`kv_session::Pipeline::session`]). Each is a client of its own (see [`Tree::client`]).
    ///
    /// ```
    /// # #[cfg(loom)] fn main() {}
    /// # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use bplus_tree::{BulkLoadConfig, Reply, Request, Tree, TreeConfig, bulk_load};
    /// use bplus_tree::required_pool_bytes;
    /// use rdma_transport::Transport;
    /// use sim_transport::SimTransport;
    ///
    /// let entries: Vec<(u64, u64)> = (0..1_000).map(|k| (k * 10, k * 10)).collect();
    /// let load = BulkLoadConfig::default();
    /// let size = required_pool_bytes(entries.len() as u64, &load, 1_000).next_multiple_of(8);
    /// let memory_node = SimTransport::anonymous(&[size])?;
    /// let mut ep = memory_node.endpoint()?;
    /// bulk_load(&mut ep, memory_node.memory_nodes()[0], entries, &load)?;
    /// let tree = Tree::open(memory_node, TreeConfig::default())?;
    ///
    /// let mut pipeline = tree.pipeline(4)?; // four operations in flight on this thread
    /// let mut session = pipeline.session();
    /// let mut requests = (0..100u64).map(|i| (i, Request::Get(i * 10)));
    /// let mut found = 0;
    /// loop {
    ///     // Keep every client busy, then take one result.
    ///     while session.has_room() {
    ///         let Some((tag, request)) = requests.next() else { break };
    ///         session.submit(tag, request).expect("a client is free");
    ///     }
    ///     let Some(done) = session.wait() else { break };
    ///     assert_eq!(done.result?, Reply::Value(Some(done.tag * 10)));
    ///     // One READ once the leaf's parent is cached (the first GETs fill the cache).
    ///     assert!(done.net.batches >= 1);
    ///     found += 1;
    /// }
    /// assert_eq!(found, 100);
    /// # Ok(()) }
    /// ```
    pub fn pipeline(&self, depth: usize) -> Result<crate::Pipeline<T::Endpoint>, TreeError> {
        if depth == 0 {
            return Err(TreeError::Config(
                "a pipeline runs at least one operation at a time".into(),
            ));
        }
        let lanes = (0..depth)
            .map(|_| self.client())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::Pipeline::new(lanes))
    }

    /// Bytes cached now: internal pages, and hot entries.
    pub fn cache_bytes(&self) -> u64 {
        self.shared.cache.bytes() + self.shared.hot.bytes()
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
    /// GETs answered by a speculative READ of the one slot the hot-entry buffer named.
    pub speculative_hits: u64,
    /// Speculative READs whose slot no longer held the key (the GET went the usual way).
    pub speculative_misses: u64,
    /// Value blocks read again through their leaf: the block held another key or failed its
    /// checksum (used again while this client was paused).
    pub value_retries: u64,
}

/// The change a write makes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    Insert(u64),
    Update(u64),
    Upsert(u64),
    Delete,
}

/// What a write did.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    /// What the operation returns (inserted, updated, deleted).
    done: bool,
    /// Whether the leaf now names the write's value.
    linked: bool,
    /// The value word the write replaced or deleted.
    old: Option<u64>,
}

/// A value block to WRITE before the leaf entry that names it: its address and bytes.
type PendingBlock = (rdma_transport::RemoteAddr, Vec<u8>);

/// A leaf or internal page read under its lock: the decoded page and its raw bytes (a write
/// patches the bytes, so words no entry uses keep what the memory node holds). `P` is what was
/// decoded: a whole [`Page`], or the parts of a hopscotch leaf a writer READs.
struct Locked<'s, P = Page> {
    node: usize,
    page_no: u64,
    word: u64,
    page: P,
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
    /// How the operation running now waits for its batches (set as it starts: a client runs one
    /// operation at a time; a thread runs several clients for several in flight).
    waiting: Waiting,
}

impl<E: Endpoint> Client<E> {
    /// The value of `key`, if present. One READ when the leaf's parent is cached.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, TreeError> {
        block_on(self.get_with(key, Waiting::Blocking))
    }

    /// Inserts `key`; `Ok(false)` (and no change) if present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        block_on(self.write_with(key, Change::Insert(value), Waiting::Blocking))
    }

    /// Sets a present `key`'s value; `Ok(false)` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        block_on(self.write_with(key, Change::Update(value), Waiting::Blocking))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, TreeError> {
        block_on(self.write_with(key, Change::Upsert(value), Waiting::Blocking))
    }

    /// Deletes `key` (with byte values, its block is freed); `Ok(false)` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, TreeError> {
        block_on(self.write_with(key, Change::Delete, Waiting::Blocking))
    }

    /// Up to `n` entries with keys ≥ `start`, in key order; continues across memory nodes.
    ///
    /// Rounds of one batch: locate the leaf holding `from` through the cache (no verb when the
    /// parent is cached), READ it together with the leaves the cached parent lists after it (as
    /// many as the rest of the scan needs), and take them in order while each starts where the
    /// previous one ended; the next round starts where the last page taken ended. A leaf the
    /// cache placed wrongly (a split it has not seen) is found by moving right instead.
    pub fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, TreeError> {
        block_on(self.scan_with(start, n, Waiting::Blocking))
    }

    /// [`Client::get`], waiting as `waiting` says.
    pub(crate) async fn get_with(
        &mut self,
        key: u64,
        waiting: Waiting,
    ) -> Result<Option<u64>, TreeError> {
        self.waiting = waiting;
        self.expect_values(key, false)?;
        let n = self.shared.node_of(key);
        self.leaf_value(n, key).await
    }

    /// The value word `key`'s leaf holds (`None`: absent), from the leaf READ whole or, in a
    /// hopscotch pool, from one neighbourhood.
    async fn leaf_value(&mut self, n: usize, key: u64) -> Result<Option<u64>, TreeError> {
        let shared = Arc::clone(&self.shared);
        if let LeafKind::Hopscotch(g) = shared.nodes[n].layout.leaf {
            return self.hop_lookup(n, key, g).await;
        }
        for _ in 0..shared.config.max_attempts {
            let (leaf_no, parent) = self.locate(n, key, 0).await?;
            match self.leaf_for(n, leaf_no, parent, key).await? {
                Some(page) => return Ok(page.find(key).map(|e| e.1)),
                None => continue,
            }
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// An insert, update, upsert or delete of a `u64` value (a delete of a byte value too,
    /// freeing its block), waiting as `waiting` says.
    pub(crate) async fn write_with(
        &mut self,
        key: u64,
        change: Change,
        waiting: Waiting,
    ) -> Result<bool, TreeError> {
        self.waiting = waiting;
        if !matches!(change, Change::Delete) {
            self.expect_values(key, false)?;
        }
        let outcome = self.write(key, change, &mut None).await?;
        if let Some(old) = outcome.old
            && matches!(change, Change::Delete)
        {
            self.release_value(key, old);
        }
        Ok(outcome.done)
    }

    /// [`Client::scan`], waiting as `waiting` says.
    pub(crate) async fn scan_with(
        &mut self,
        start: u64,
        n: usize,
        waiting: Waiting,
    ) -> Result<Vec<(u64, u64)>, TreeError> {
        self.waiting = waiting;
        self.expect_values(start, false)?;
        self.scan_entries(start, n).await
    }

    /// `Err(WrongValueKind)` unless the pool serving `key` stores byte values (`bytes`) or
    /// 8-byte values (`!bytes`).
    fn expect_values(&self, key: u64, bytes: bool) -> Result<(), TreeError> {
        let layout = self.shared.nodes[self.shared.node_of(key)].layout;
        if layout.has_values() == bytes {
            return Ok(());
        }
        Err(TreeError::WrongValueKind {
            node: layout.node(),
            stores: if bytes { "u64" } else { "byte" },
        })
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
}

impl<E: Endpoint> Client<E> {
    /// Backoff between attempts, as the running operation waits ([`wait::pause`]).
    pub(super) async fn pause(&self, attempt: u32) {
        wait::pause(attempt, self.waiting).await;
    }
}
