//! The simulator's `Transport`.

use crate::sync::Arc;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::Duration;

use rdma_transport::{MemoryNodeInfo, RemoteAddr, Transport, TransportError};

use crate::{Pool, PoolError, SimEndpoint};

/// How the simulator's endpoints behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Torn-read mode: endpoints yield the CPU between the words of a READ or WRITE (about one
    /// word in four, pseudo-randomly), so concurrent multi-word accesses tear often.
    pub torn: bool,
    /// Busy-wait this long before executing each batch (a crude network delay).
    pub batch_delay: Option<Duration>,
    /// Apply InfiniBand's permitted reorderings inside a batch (see [`Reordering`]).
    pub reordering: Reordering,
    /// Bytes of one packet (the path MTU's payload): a WRITE is placed packet by packet, and a
    /// connection cut mid-WRITE (a killed process, [`crate::SimEndpoint::tear_after`]) leaves
    /// a prefix of whole packets placed. A multiple of 8 from 8 to [`MAX_PACKET_BYTES`]; default
    /// 1,024, the verbs backend's path MTU; other values are clamped into that range and
    /// rounded down to a multiple of 8.
    pub packet_bytes: usize,
    /// Latency mode: the round trip of a posted batch. Its verbs land no earlier than half of
    /// it (plus its bytes at 100 Gb/s and a seeded jitter of up to an eighth) after the post,
    /// and its completion is polled no earlier than the other half after that: a batch
    /// completes no earlier than this after it was posted, in wall-clock time outside a seeded
    /// run. Measured throughput then shows what keeping several batches in flight buys. `None`
    /// (the default): a posted batch lands at the second poll of its ticket (or of a later one).
    pub latency: Option<Duration>,
    /// NIC atomicity: a CAS or FAA is atomic only with respect to other atomics (of this
    /// process's endpoints, on one pool), as a NIC's are: it reads the word, lets others run, and
    /// writes its result, so a WRITE that lands on the word in between is lost (the atomic's
    /// value wins). Off by default (every word access atomic, as CPU atomics are).
    pub nic_atomics: bool,
}

/// The largest [`SimConfig::packet_bytes`]: what one connection's replay log holds.
pub const MAX_PACKET_BYTES: usize = crate::nic::LOG_BYTES / 8 * 8;
/// The default [`SimConfig::packet_bytes`].
pub const DEFAULT_PACKET_BYTES: usize = 1024;

impl SimConfig {
    /// [`SimConfig::packet_bytes`] as the endpoints use it.
    pub fn packet(&self) -> usize {
        self.packet_bytes.clamp(8, MAX_PACKET_BYTES) / 8 * 8
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            torn: false,
            batch_delay: None,
            reordering: Reordering::default(),
            packet_bytes: DEFAULT_PACKET_BYTES,
            latency: None,
            nic_atomics: false,
        }
    }
}

/// How the simulator orders the verbs of one batch.
///
/// InfiniBand RC lets a later verb — a WRITE included — take effect before an earlier READ of its
/// batch has returned its data or an earlier atomic has executed, unless the later verb is fenced.
/// WRITEs stay in order with respect to earlier WRITEs, and READs observe memory in order. The
/// simulator models this by *holding back* READs and atomics: a held verb completes later —
/// before the next fenced verb, or at the end of the batch — while the unfenced verbs after it
/// take effect first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reordering {
    /// Strictly in order (fences change nothing).
    #[default]
    InOrder,
    /// Each READ and atomic is held back with probability ½, and a held verb completes at a
    /// pseudo-random later point: the permitted reorderings, mixed with in-order runs.
    Random,
    /// Every READ and atomic is held back as long as the rules allow, and held verbs complete
    /// READs first (in order), then atomics latest first: deterministic (for loom models), and
    /// the schedule that most punishes a missing fence.
    Adversarial,
}

impl SimConfig {
    /// The default configuration with torn-read mode switched on.
    pub fn torn() -> Self {
        Self {
            torn: true,
            ..Self::default()
        }
    }

    /// Torn-read mode, random reordering and the NIC's atomicity: the harshest mode for stress
    /// tests.
    pub fn harsh() -> Self {
        Self {
            torn: true,
            reordering: Reordering::Random,
            nic_atomics: true,
            ..Self::default()
        }
    }
}

/// State shared by a transport and all its endpoints.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) pools: Vec<Pool>,
    /// Memory-node id → index into `pools` (`usize::MAX`: no such node).
    pub(crate) index_of: Vec<usize>,
    pub(crate) nodes: Vec<MemoryNodeInfo>,
    pub(crate) config: SimConfig,
    /// Transport-wide fault injection: this many upcoming verbs, on any endpoint, fail.
    pub(crate) fail_verbs: AtomicU64,
    /// Transport-wide fault injection: the next batch, on any endpoint, longer than the low 32
    /// bits fails its verb at that index (0: none armed).
    pub(crate) fail_inside: AtomicU64,
    /// Told of every WRITE that landed whole ([`SimTransport::observe_writes`]).
    pub(crate) observer: std::sync::OnceLock<Observer>,
}

/// What [`SimTransport::observe_writes`] calls: the address and bytes of a WRITE that landed
/// whole, on the thread that landed it.
pub type WriteObserver = Box<dyn Fn(RemoteAddr, &[u8]) + Send + Sync>;

/// A [`WriteObserver`], for `Debug`.
pub(crate) struct Observer(WriteObserver);

// An observer that panics fails the simulation run it checks; the fabric's own state is
// untouched by it (it is told after the bytes landed).
impl std::panic::RefUnwindSafe for Observer {}
impl std::panic::UnwindSafe for Observer {}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteObserver")
    }
}

impl Shared {
    /// Tells the observer, if any, of a WRITE that landed whole.
    pub(crate) fn landed(&self, addr: RemoteAddr, data: &[u8]) {
        if let Some(Observer(observe)) = self.observer.get() {
            observe(addr, data);
        }
    }
}

impl Shared {
    /// The pool of memory node `id`.
    pub(crate) fn pool(&self, id: u16) -> Option<&Pool> {
        let at = *self.index_of.get(usize::from(id))?;
        self.pools.get(at)
    }
}

/// The life of one simulated process's endpoints (see [`SimTransport::process`]).
#[derive(Debug, Default)]
pub(crate) struct Life {
    /// 0 while the process lives; once killed, 1 + the packets of a WRITE cut at the kill that
    /// land.
    pub(crate) killed: AtomicU64,
    /// Set to make the process's next batch lose its completion.
    pub(crate) break_next: AtomicU64,
    /// Set to make the process's next batch lose its completion and land when the gate opens.
    pub(crate) land_late: crate::sync::Mutex<Option<crate::Gate>>,
    /// Whether `land_late` holds a gate (read on every batch without taking the lock).
    pub(crate) late_planned: AtomicU64,
    /// Set to stop the process's next endpoint to run a batch after that many more batches, at
    /// the gate, until it opens.
    pub(crate) pause: crate::sync::Mutex<Option<(u64, crate::Gate)>>,
    /// Whether `pause` holds a plan.
    pub(crate) pause_planned: AtomicU64,
    /// Set to stall the process's next batch after that many of its verbs, until the gate opens.
    pub(crate) stall: crate::sync::Mutex<Option<(u64, crate::Gate)>>,
    /// Whether `stall` holds a plan.
    pub(crate) stall_planned: AtomicU64,
    /// Set to fail the process's next batch of more than this many verbs at that verb (0: none).
    pub(crate) fail_inside: AtomicU64,
}

/// A simulated RDMA fabric: memory node `i` is the `i`-th pool (or pools carry explicit ids, see
/// [`SimTransport::with_node_ids`]).
///
/// Cloning is cheap and shares the pools, and the simulated process: see
/// [`SimTransport::process`] for a handle of another process on the same fabric.
#[derive(Debug, Clone)]
pub struct SimTransport {
    shared: Arc<Shared>,
    life: Arc<Life>,
}

impl SimTransport {
    /// A transport over `pools`; pool `i` becomes memory node `i`.
    ///
    /// # Panics
    /// If more than 65,536 pools are given (memory-node ids are 16 bits).
    pub fn new(pools: Vec<Pool>, config: SimConfig) -> Self {
        assert!(pools.len() <= 1 << 16, "at most 65,536 memory nodes");
        let numbered = pools
            .into_iter()
            .enumerate()
            .map(|(id, pool)| (id as u16, pool))
            .collect();
        Self::with_node_ids(numbered, config).unwrap_or_else(|_| unreachable!("ids are distinct"))
    }

    /// A transport over `pools`, each with its memory-node id — e.g. one process serving memory
    /// node 2 of three, or a compute process attaching to the pool files of nodes 0, 1 and 2.
    /// Ids must be distinct.
    pub fn with_node_ids(pools: Vec<(u16, Pool)>, config: SimConfig) -> Result<Self, PoolError> {
        let mut index_of = Vec::new();
        let mut nodes = Vec::with_capacity(pools.len());
        let mut list = Vec::with_capacity(pools.len());
        for (i, (id, pool)) in pools.into_iter().enumerate() {
            let at = usize::from(id);
            if index_of.len() <= at {
                index_of.resize(at + 1, usize::MAX);
            }
            if index_of[at] != usize::MAX {
                return Err(PoolError::Config(format!("memory node {id} given twice")));
            }
            index_of[at] = i;
            nodes.push(MemoryNodeInfo {
                id,
                region_len: pool.len(),
            });
            list.push(pool);
        }
        Ok(Self {
            life: Arc::default(),
            shared: Arc::new(Shared {
                pools: list,
                index_of,
                nodes,
                config,
                fail_verbs: AtomicU64::new(0),
                fail_inside: AtomicU64::new(0),
                observer: std::sync::OnceLock::new(),
            }),
        })
    }

    /// A transport over fresh anonymous pools of the given sizes, default configuration.
    pub fn anonymous(node_sizes: &[u64]) -> Result<Self, PoolError> {
        Self::anonymous_with(node_sizes, SimConfig::default())
    }

    /// A transport over fresh anonymous pools of the given sizes.
    pub fn anonymous_with(node_sizes: &[u64], config: SimConfig) -> Result<Self, PoolError> {
        let pools = node_sizes
            .iter()
            .map(|&len| Pool::anonymous(len))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(pools, config))
    }

    /// Calls `observe` with the address and bytes of every WRITE that lands whole from now on, on
    /// the thread that lands it, over the whole fabric (every process): a simulation's check of
    /// what reaches memory (a WRITE cut by a kill, landing a prefix, is not told). `observe` must
    /// not take the seeded scheduler's locks or atomics (it runs inside a verb). Once per
    /// fabric: `false` (and `observe` dropped) if one is set already.
    pub fn observe_writes(&self, observe: WriteObserver) -> bool {
        self.shared.observer.set(Observer(observe)).is_ok()
    }

    /// The configuration its endpoints run with.
    pub fn config(&self) -> SimConfig {
        self.shared.config
    }

    /// The pool behind memory node `id`.
    pub fn pool(&self, id: u16) -> Option<&Pool> {
        self.shared.pool(id)
    }

    /// The fence of memory node `id` (its pool must be one of this transport's): what the memory
    /// node's process uses to cut compute nodes' connections off.
    pub fn fence(&self, id: u16) -> Option<SimFence> {
        self.shared.pool(id)?;
        Some(SimFence {
            shared: Arc::clone(&self.shared),
            node: id,
        })
    }

    /// A handle of a new simulated process on the same fabric (the same pools and NICs): its
    /// endpoints die together when [`Self::kill`] is called on it (or on a clone of it), and
    /// those of other processes go on.
    pub fn process(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            life: Arc::default(),
        }
    }

    /// Fault injection: kills this handle's process, at whatever point each of its endpoints is.
    /// Each endpoint's next verb is cut — of a WRITE longer than `packets` packets
    /// ([`crate::SimConfig::packet_bytes`]) the first `packets` land, as a NIC leaves a WRITE
    /// when its process dies; nothing else of it, and nothing after it — and fails with
    /// [`TransportError::Crashed`], as does every later verb and every endpoint made afterwards.
    /// What the process's threads do after that no longer reaches memory.
    pub fn kill(&self, packets: usize) {
        let code = u64::try_from(packets)
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        let _ = self
            .life
            .killed
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether this handle's process was killed.
    pub fn is_killed(&self) -> bool {
        self.life.killed.load(Ordering::SeqCst) != 0
    }

    /// Fault injection: the next batch of any endpoint of this handle's process loses its
    /// completion (see [`SimEndpoint::break_after`]): it executes, the caller gets
    /// [`TransportError::Broken`], and so does every later call of that endpoint.
    pub fn break_next_batch(&self) {
        self.life.break_next.store(1, Ordering::SeqCst);
    }

    /// Fault injection: the next batch of any endpoint of this handle's process loses its
    /// completion while its verbs still execute: they land only when `gate` opens (see
    /// [`SimEndpoint::land_late`]), and until then a fence of its connections finds the batch in
    /// flight. The caller gets [`TransportError::Broken`], and so does every later call of that
    /// endpoint.
    pub fn land_next_batch_late(&self, gate: crate::Gate) {
        *self
            .life
            .land_late
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(gate);
        self.life.late_planned.store(1, Ordering::SeqCst);
    }

    /// Fault injection: an endpoint of this handle's process, the next to run a batch, stops
    /// before its batch after `n` more, until `gate` opens (see [`SimEndpoint::pause_after`]): a
    /// process descheduled between two steps of a protocol.
    pub fn pause_after_batches(&self, n: u64, gate: crate::Gate) {
        *self.life.pause.lock().unwrap_or_else(|e| e.into_inner()) = Some((n, gate));
        self.life.pause_planned.store(1, Ordering::SeqCst);
    }

    /// Fault injection: the next batch an endpoint of this handle's process runs executes its
    /// first `verbs` verbs (in the order the reordering mode gives them), then stalls, entered
    /// on its connections, until `gate` opens (see [`SimEndpoint::stall_inside`]): a NIC that
    /// has carried out part of a batch while the rest waits behind other traffic. Other compute
    /// nodes see the batch's first verbs' effects and not the rest's — what its fences must
    /// make safe.
    pub fn stall_next_batch(&self, verbs: u64, gate: crate::Gate) {
        *self.life.stall.lock().unwrap_or_else(|e| e.into_inner()) = Some((verbs, gate));
        self.life.stall_planned.store(1, Ordering::SeqCst);
    }

    /// Fault injection: the next batch of this handle's process that has more than `index`
    /// verbs fails its verb at `index` (in the order verbs execute) with
    /// [`TransportError::InjectedFault`]: the verbs before it executed, the rest did not — a
    /// transient fault in the middle of one process's long batch (the batch that ends its write,
    /// or its split, which it then repeats), where [`Self::fail_inside_next_batch`] takes whichever
    /// process's batch comes first. `index` 0 disarms it.
    pub fn fail_inside_next_batch_here(&self, index: u32) {
        self.life
            .fail_inside
            .store(u64::from(index), Ordering::SeqCst);
    }

    /// Cancels the faults planned for this handle's process's next batches
    /// ([`Self::break_next_batch`], [`Self::land_next_batch_late`], [`Self::pause_after_batches`],
    /// [`Self::stall_next_batch`], [`Self::fail_inside_next_batch_here`]) that no batch has met yet.
    pub fn disarm(&self) {
        self.life.break_next.store(0, Ordering::SeqCst);
        self.life.late_planned.store(0, Ordering::SeqCst);
        self.life.pause_planned.store(0, Ordering::SeqCst);
        self.life.stall_planned.store(0, Ordering::SeqCst);
        self.life.fail_inside.store(0, Ordering::SeqCst);
        *self.life.pause.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.life.stall.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self
            .life
            .land_late
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Fault injection: the next `n` verbs executed by any endpoint of this transport fail with
    /// [`TransportError::InjectedFault`] (each failure ends its batch).
    pub fn fail_next_verbs(&self, n: u64) {
        self.shared.fail_verbs.store(n, Ordering::SeqCst);
    }

    /// Fault injection: the next batch, on any endpoint, of more than `index` verbs fails its
    /// verb at `index` (in the order verbs execute) with [`TransportError::InjectedFault`]: the
    /// verbs before it executed, the rest did not. Where [`Self::fail_next_verbs`] mostly hits
    /// the first verb of a batch, this reaches the middle of long ones — the batches that end a
    /// write, which are repeated after a fault. `index` 0 disarms it.
    pub fn fail_inside_next_batch(&self, index: u32) {
        self.shared
            .fail_inside
            .store(u64::from(index), Ordering::SeqCst);
    }
}

/// Cuts connections to one simulated memory node off (see the `nic` module for how a connection's
/// batch in flight is waited for, or completed when its process was killed).
#[derive(Debug, Clone)]
pub struct SimFence {
    shared: Arc<Shared>,
    node: u16,
}

impl rdma_transport::Fence for SimFence {
    fn fence(&self, connection: u64) -> Result<rdma_transport::Fenced, TransportError> {
        let Some(pool) = self.shared.pool(self.node) else {
            return Err(TransportError::UnknownNode(self.node));
        };
        Ok(crate::nic::fence(
            pool.nic(),
            connection,
            |offset, bytes| {
                if offset.saturating_add(bytes.len() as u64) <= pool.len() {
                    pool.write_bytes(offset, bytes, || {});
                }
            },
        ))
    }
}

impl Transport for SimTransport {
    type Endpoint = SimEndpoint;

    fn endpoint(&self) -> Result<SimEndpoint, TransportError> {
        if self.is_killed() {
            return Err(TransportError::Crashed);
        }
        SimEndpoint::new(Arc::clone(&self.shared), Arc::clone(&self.life))
    }

    fn memory_nodes(&self) -> &[MemoryNodeInfo] {
        &self.shared.nodes
    }
}
