//! The ordered indexes `rolex bench` drives: ROLEX, and the two baselines on the same transport,
//! the Sherman-style B+-tree and the CHIME-style index (both `bplus-tree`, with sorted or
//! hopscotch leaves). The harness, workloads, key sets, report and cost model are shared; only
//! what is behind these two traits differs.

use crate::error::{CliError, Failed, failed};
use kv_session::{Lane, Reply, Request};
use rdma_transport::{Stats, Transport};

/// Which index a run drives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// ROLEX: learned models over leaves, retrained on the memory node.
    #[default]
    Rolex,
    /// The B+-tree baseline (Sherman-style, `bplus-tree`).
    Bplus,
    /// The CHIME-style baseline: the B+-tree's internal pages over hopscotch leaves, of which a
    /// GET READs one neighbourhood (`bplus-tree` with `chime`'s leaves).
    Chime,
}

impl IndexKind {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Rolex => "rolex",
            IndexKind::Bplus => "bplus",
            IndexKind::Chime => "chime",
        }
    }

    /// Whether it is one of the two baselines built on `bplus-tree`'s internal pages.
    pub fn is_tree(self) -> bool {
        matches!(self, IndexKind::Bplus | IndexKind::Chime)
    }

    /// The `bplus-tree` layout of a baseline's pools: Sherman's pages of `page_size` bytes, or
    /// hopscotch leaves of `leaf` (CHIME's shape by default) in pages just large enough.
    pub fn tree_layout(self, page_size: u64, leaf: chime::Geometry) -> bplus_tree::BulkLoadConfig {
        match self {
            IndexKind::Chime => bplus_tree::BulkLoadConfig {
                page_size: leaf.leaf_bytes().next_multiple_of(64),
                leaf: bplus_tree::LeafKind::Hopscotch(leaf),
                ..bplus_tree::BulkLoadConfig::default()
            },
            _ => bplus_tree::BulkLoadConfig {
                page_size,
                ..bplus_tree::BulkLoadConfig::default()
            },
        }
    }
}

/// One bench thread's handle on an index; as a [`Lane`], one of the clients a thread with
/// several operations in flight drives together (`--inflight`).
pub trait BenchClient: Lane + Send + 'static {
    /// What a failed operation of the lane means to the harness.
    fn failure(e: <Self as Lane>::Error) -> Failed;
    /// The value of `key`.
    fn get(&mut self, key: u64) -> Result<Option<u64>, Failed>;
    /// Inserts `key`; false if present.
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, Failed>;
    /// Updates `key`; false if absent.
    fn update(&mut self, key: u64, value: u64) -> Result<bool, Failed>;
    /// Deletes `key`; false if absent.
    fn delete(&mut self, key: u64) -> Result<bool, Failed>;
    /// Scans `n` entries from `start`; how many it returned.
    fn scan(&mut self, start: u64, n: usize) -> Result<usize, Failed>;
    /// Verbs on a lock table (counted within `net_stats` too); 0 for an index without one.
    fn lock_verbs(&self) -> u64;
    /// Value bytes this client's operations read or wrote (0 for 8-byte values).
    fn value_bytes(&self) -> u64 {
        0
    }
}

/// What a verify walk over every memory node found.
#[derive(Debug, Clone, Default)]
pub struct Structure {
    /// Leaves (ROLEX: trained and synonym; B+-tree: leaf pages).
    pub leaves: u64,
    /// ROLEX's synonym leaves (0 for the B+-tree).
    pub synonym_leaves: u64,
    /// Keys present.
    pub keys: u64,
    /// ROLEX: model slots; B+-tree: internal pages.
    pub models: u64,
    /// What the verify walks found (see [`crate::verdict`]).
    pub verdict: crate::verdict::Verdict,
    /// Walks made on the memory node that needed the most.
    pub walks: usize,
    /// Memory-node bytes the index occupies (B+-tree: pages and lock table; ROLEX's comes from
    /// its retrainer).
    pub pool_bytes: Option<u64>,
    /// With byte values: what the value regions hold (`leaf_store::ValueSpace`, summed).
    pub values: Option<leaf_store::ValueSpace>,
}

/// A compute node's handle on an index, shared by its bench threads.
pub trait BenchIndex: Send + Sync + 'static {
    /// A thread's client.
    type Client: BenchClient;
    /// A client for one thread.
    fn client(&self) -> Result<Self::Client, CliError>;
    /// Gives `client` a fresh endpoint after its own broke.
    fn reconnect(&self, client: &mut Self::Client) -> Result<(), CliError>;
    /// Bytes of metadata the compute node caches.
    fn cache_bytes(&self) -> u64;
    /// Memory nodes.
    fn memory_nodes(&self) -> u64;
    /// Verify walks over every memory node (see [`crate::verdict`]); `served`: a memnode serves
    /// the pools (an attached or verbs run), so its retraining or recovery under way is work in
    /// progress, not something left behind.
    fn structure(&self, served: bool) -> Result<Structure, CliError>;
}

fn rolex_failed(e: index_core::IndexError) -> Failed {
    if e.is_connection_lost() {
        Failed::ConnectionLost(e.to_string())
    } else {
        Failed::Other(e.to_string())
    }
}

impl<E: rdma_transport::Endpoint + 'static> BenchClient for index_core::Client<E> {
    fn failure(e: index_core::IndexError) -> Failed {
        rolex_failed(e)
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, Failed> {
        index_core::Client::get(self, key).map_err(rolex_failed)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        index_core::Client::insert(self, key, value).map_err(rolex_failed)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        index_core::Client::update(self, key, value).map_err(rolex_failed)
    }
    fn delete(&mut self, key: u64) -> Result<bool, Failed> {
        index_core::Client::delete(self, key).map_err(rolex_failed)
    }
    fn scan(&mut self, start: u64, n: usize) -> Result<usize, Failed> {
        index_core::Client::scan(self, start, n)
            .map(|v| v.len())
            .map_err(rolex_failed)
    }
    fn lock_verbs(&self) -> u64 {
        0
    }
}

impl<T: Transport + 'static> BenchIndex for index_core::Store<T>
where
    T::Endpoint: 'static,
{
    type Client = index_core::Client<T::Endpoint>;

    fn client(&self) -> Result<Self::Client, CliError> {
        index_core::Store::client(self).map_err(CliError::from)
    }

    fn reconnect(&self, client: &mut Self::Client) -> Result<(), CliError> {
        index_core::Store::reconnect(self, client).map_err(CliError::from)
    }

    fn cache_bytes(&self) -> u64 {
        index_core::Store::cache_bytes(self)
    }

    fn memory_nodes(&self) -> u64 {
        self.transport().memory_nodes().len() as u64
    }

    fn structure(&self, served: bool) -> Result<Structure, CliError> {
        let transport = self.transport();
        let mut ep = transport.endpoint()?;
        let mut s = Structure::default();
        // This process's own lease, which it renews meanwhile, on each memory node.
        let own: Vec<(u16, u8)> = self
            .layouts()
            .iter()
            .zip(self.member_tags())
            .map(|(layout, tag)| (layout.node(), tag))
            .collect();
        for &node in transport.memory_nodes() {
            let tag = own.iter().find(|o| o.0 == node.id).map(|o| o.1);
            // Walked again while it finds problems: other processes may be writing the pool.
            let walked = crate::verdict::verify_pool(&mut ep, node, tag, served)?;
            s.verdict = std::mem::take(&mut s.verdict).and(walked.verdict);
            s.walks = s.walks.max(walked.walks);
            let report = walked.last;
            s.leaves += report.trained_leaves + report.synonym_leaves;
            s.synonym_leaves += report.synonym_leaves;
            s.keys += report.keys;
            s.models += report.slots;
            if let Some(v) = report.values {
                add_values(&mut s.values, v);
            }
        }
        Ok(s)
    }
}

/// The value region a memory node needs for `keys` values of `size` (bulk-loaded and inserted):
/// twice their blocks (freed blocks wait a few epochs before reuse, and each compute node keeps
/// a partly used chunk per size class), plus 64 chunks.
pub fn value_region(size: crate::checks::ValueSize, keys: u64) -> leaf_store::ValueConfig {
    let chunk = leaf_store::value::DEFAULT_CHUNK_BYTES;
    let block = leaf_store::value::class_for(size.max)
        .map_or(size.max + 64, |c| leaf_store::value::CLASS_BYTES[c]);
    leaf_store::ValueConfig {
        bytes: keys
            .saturating_mul(block + 1)
            .saturating_mul(2)
            .saturating_add(64 * chunk)
            .next_multiple_of(8),
        chunk_bytes: chunk,
    }
}

/// The bytes the bench stores as value `v` of `key`: a length in `size` drawn from both, filled
/// with `v`'s bytes.
pub fn value_bytes(size: crate::checks::ValueSize, key: u64, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    fill_value(size, key, v, &mut out);
    out
}

fn fill_value(size: crate::checks::ValueSize, key: u64, v: u64, out: &mut Vec<u8>) {
    let span = size.max - size.min + 1;
    let len = size.min + (key ^ v.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % span;
    out.clear();
    out.extend(v.to_le_bytes().iter().cycle().take(len as usize));
}

/// A client of an index storing byte values, as the bench drives it.
pub trait ByteClient: Send + 'static {
    /// Reads `key`'s value into `out`; false if absent.
    fn get_into(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, Failed>;
    /// Inserts `key`; false if present.
    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed>;
    /// Updates `key`; false if absent.
    fn update(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed>;
    /// Deletes `key`; false if absent.
    fn delete(&mut self, key: u64) -> Result<bool, Failed>;
    /// Up to `n` keys from `start` with their values.
    fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, Vec<u8>)>, Failed>;
}

impl<E: rdma_transport::Endpoint + 'static> ByteClient for index_core::Client<E> {
    fn get_into(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, Failed> {
        self.get_value_into(key, out).map_err(rolex_failed)
    }
    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed> {
        self.insert_value(key, value).map_err(rolex_failed)
    }
    fn update(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed> {
        self.update_value(key, value).map_err(rolex_failed)
    }
    fn delete(&mut self, key: u64) -> Result<bool, Failed> {
        index_core::Client::delete(self, key).map_err(rolex_failed)
    }
    fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, Vec<u8>)>, Failed> {
        self.scan_values(start, n).map_err(rolex_failed)
    }
}

impl<E: rdma_transport::Endpoint + 'static> ByteClient for bplus_tree::Client<E> {
    fn get_into(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool, Failed> {
        self.get_value_into(key, out).map_err(tree_failed)
    }
    fn insert(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed> {
        self.insert_value(key, value).map_err(tree_failed)
    }
    fn update(&mut self, key: u64, value: &[u8]) -> Result<bool, Failed> {
        self.update_value(key, value).map_err(tree_failed)
    }
    fn delete(&mut self, key: u64) -> Result<bool, Failed> {
        bplus_tree::Client::delete(self, key).map_err(tree_failed)
    }
    fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, Vec<u8>)>, Failed> {
        self.scan_values(start, n).map_err(tree_failed)
    }
}

/// An index storing byte values: each operation moves a value of the run's size.
pub struct ValueStore<I> {
    index: std::sync::Arc<I>,
    size: crate::checks::ValueSize,
}

impl<I> ValueStore<I> {
    /// `index` (whose pools hold byte values), with values of `size`.
    pub fn new(index: std::sync::Arc<I>, size: crate::checks::ValueSize) -> Self {
        Self { index, size }
    }
}

/// A bench thread's client of a [`ValueStore`].
pub struct ValueClient<C> {
    client: C,
    size: crate::checks::ValueSize,
    buf: Vec<u8>,
    moved: u64,
}

/// The first eight bytes of a value as a number (what the bench wrote).
fn first_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(word)
}

/// A value client as a lane: the bench's u64 requests become byte-value requests of the run's
/// size, as its synchronous calls do.
impl<C: BenchClient + ByteClient> Lane for ValueClient<C> {
    type Error = <C as Lane>::Error;

    async fn run(&mut self, request: Request) -> Result<Reply, Self::Error> {
        let bytes = |this: &mut Self, key: u64, value: u64| {
            fill_value(this.size, key, value, &mut this.buf);
            this.moved += this.buf.len() as u64;
            this.buf.clone()
        };
        let request = match request {
            Request::Insert(k, v) => Request::InsertValue(k, bytes(self, k, v)),
            Request::Update(k, v) => Request::UpdateValue(k, bytes(self, k, v)),
            Request::Upsert(k, v) => Request::PutValue(k, bytes(self, k, v)),
            Request::Get(k) => Request::GetValue(k),
            Request::Scan(k, n) => Request::ScanValues(k, n),
            other => other,
        };
        Ok(match self.client.run(request).await? {
            Reply::Bytes(found) => {
                self.moved += found.as_ref().map_or(0, |b| b.len() as u64);
                Reply::Value(found.as_deref().map(first_word))
            }
            Reply::ValueRows(rows) => {
                self.moved += rows.iter().map(|r| r.1.len() as u64).sum::<u64>();
                Reply::Rows(rows.iter().map(|(k, v)| (*k, first_word(v))).collect())
            }
            other => other,
        })
    }

    fn net_stats(&self) -> Stats {
        Lane::net_stats(&self.client)
    }

    fn idle() {
        C::idle();
    }
}

impl<C: BenchClient + ByteClient> BenchClient for ValueClient<C> {
    fn failure(e: <Self as Lane>::Error) -> Failed {
        C::failure(e)
    }
    /// The value's first eight bytes as a number (what the bench wrote), if present.
    fn get(&mut self, key: u64) -> Result<Option<u64>, Failed> {
        let found = self.client.get_into(key, &mut self.buf)?;
        self.moved += self.buf.len() as u64;
        Ok(found.then(|| {
            let mut word = [0u8; 8];
            let n = self.buf.len().min(8);
            word[..n].copy_from_slice(&self.buf[..n]);
            u64::from_le_bytes(word)
        }))
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        fill_value(self.size, key, value, &mut self.buf);
        self.moved += self.buf.len() as u64;
        ByteClient::insert(&mut self.client, key, &self.buf)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        fill_value(self.size, key, value, &mut self.buf);
        self.moved += self.buf.len() as u64;
        ByteClient::update(&mut self.client, key, &self.buf)
    }
    fn delete(&mut self, key: u64) -> Result<bool, Failed> {
        ByteClient::delete(&mut self.client, key)
    }
    fn scan(&mut self, start: u64, n: usize) -> Result<usize, Failed> {
        let rows = ByteClient::scan(&mut self.client, start, n)?;
        self.moved += rows.iter().map(|r| r.1.len() as u64).sum::<u64>();
        Ok(rows.len())
    }
    fn lock_verbs(&self) -> u64 {
        self.client.lock_verbs()
    }
    fn value_bytes(&self) -> u64 {
        self.moved
    }
}

impl<I: BenchIndex> BenchIndex for ValueStore<I>
where
    I::Client: ByteClient,
{
    type Client = ValueClient<I::Client>;

    fn client(&self) -> Result<Self::Client, CliError> {
        Ok(ValueClient {
            client: self.index.client()?,
            size: self.size,
            buf: Vec::new(),
            moved: 0,
        })
    }

    fn reconnect(&self, client: &mut Self::Client) -> Result<(), CliError> {
        self.index.reconnect(&mut client.client)
    }

    fn cache_bytes(&self) -> u64 {
        self.index.cache_bytes()
    }

    fn memory_nodes(&self) -> u64 {
        self.index.memory_nodes()
    }

    fn structure(&self, served: bool) -> Result<Structure, CliError> {
        self.index.structure(served)
    }
}

/// Adds one memory node's value space to `sum`.
fn add_values(sum: &mut Option<leaf_store::ValueSpace>, v: leaf_store::ValueSpace) {
    let sum = sum.get_or_insert_with(leaf_store::ValueSpace::default);
    sum.chunks += v.chunks;
    sum.chunks_claimed += v.chunks_claimed;
    sum.chunks_owned += v.chunks_owned;
    sum.blocks += v.blocks;
    sum.live_bytes += v.live_bytes;
    sum.block_bytes += v.block_bytes;
    sum.claimed_bytes += v.claimed_bytes;
}

fn tree_failed(e: bplus_tree::TreeError) -> Failed {
    match e {
        bplus_tree::TreeError::Transport(
            t @ (rdma_transport::TransportError::Broken(_)
            | rdma_transport::TransportError::Crashed
            | rdma_transport::TransportError::Connection(_)),
        ) => Failed::ConnectionLost(t.to_string()),
        e => Failed::Other(e.to_string()),
    }
}

impl<E: rdma_transport::Endpoint + 'static> BenchClient for bplus_tree::Client<E> {
    fn failure(e: bplus_tree::TreeError) -> Failed {
        tree_failed(e)
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>, Failed> {
        bplus_tree::Client::get(self, key).map_err(tree_failed)
    }
    fn insert(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        bplus_tree::Client::insert(self, key, value).map_err(tree_failed)
    }
    fn update(&mut self, key: u64, value: u64) -> Result<bool, Failed> {
        bplus_tree::Client::update(self, key, value).map_err(tree_failed)
    }
    fn delete(&mut self, key: u64) -> Result<bool, Failed> {
        bplus_tree::Client::delete(self, key).map_err(tree_failed)
    }
    fn scan(&mut self, start: u64, n: usize) -> Result<usize, Failed> {
        bplus_tree::Client::scan(self, start, n)
            .map(|v| v.len())
            .map_err(tree_failed)
    }
    fn lock_verbs(&self) -> u64 {
        self.stats().lock_verbs
    }
}

impl<T: Transport + 'static> BenchIndex for bplus_tree::Tree<T>
where
    T::Endpoint: 'static,
{
    type Client = bplus_tree::Client<T::Endpoint>;

    fn client(&self) -> Result<Self::Client, CliError> {
        bplus_tree::Tree::client(self).map_err(CliError::from)
    }

    fn reconnect(&self, _client: &mut Self::Client) -> Result<(), CliError> {
        Err(failed!(
            "the B+-tree baseline does not reconnect a broken endpoint"
        ))
    }

    fn cache_bytes(&self) -> u64 {
        bplus_tree::Tree::cache_bytes(self)
    }

    fn memory_nodes(&self) -> u64 {
        self.transport().memory_nodes().len() as u64
    }

    fn structure(&self, _served: bool) -> Result<Structure, CliError> {
        // Embedded only: nothing else writes the pool once the run is over.
        let transport = self.transport();
        let mut ep = transport.endpoint()?;
        let mut s = Structure {
            pool_bytes: Some(0),
            ..Structure::default()
        };
        for (&node, layout) in transport.memory_nodes().iter().zip(self.layouts()) {
            let walked = crate::verdict::settle(crate::verdict::PAUSE, || {
                bplus_tree::verify(&mut ep, node).map(|report| crate::verdict::Walk {
                    problems: report.problems.clone(),
                    report,
                    activity: crate::verdict::Activity::default(),
                })
            })?;
            s.verdict = std::mem::take(&mut s.verdict).and(walked.verdict);
            s.walks = s.walks.max(walked.walks);
            let report = walked.last;
            s.leaves += report.pages_per_level.first().copied().unwrap_or(0);
            s.models += report.pages_per_level.iter().skip(1).sum::<u64>();
            s.keys += report.keys;
            if let Some(v) = report.values {
                add_values(&mut s.values, v);
            }
            s.pool_bytes = s
                .pool_bytes
                .map(|b| b + report.allocated_pages * layout.page_size + 8 * layout.lock_words);
        }
        Ok(s)
    }
}
