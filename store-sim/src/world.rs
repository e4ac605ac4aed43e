//! One seeded run of the whole store: its shape, its threads, its faults and its final checks.
//!
//! - **Memory nodes.** One or two simulated pools, range-partitioned and bulk-loaded with a small
//!   layout (a few keys per leaf, two leaves per slot, so inserts split leaves and deletes empty
//!   them; in half the runs generations of one or two bits, which wrap), each with its worker —
//!   a retrainer that also watches leases, fences and recovers — on a process of its own.
//! - **Compute nodes.** Two or three `Store`s, each on a process of its own (its own caches,
//!   renewer and connections) with one or two client threads running random operations on a few
//!   dozen keys (in a third of the runs on 16 hot keys of one or two slots; in a fifth, three
//!   client threads each on 4 keys of one leaf, which hand its lock over), each write with a
//!   value never written before; in seven runs of eight each thread keeps 2 to 8 of them in
//!   flight, a pipeline of as many clients driven by one session ([`run_pipelined`]; a
//!   contended run then has one thread per compute node, running the three's operations); with
//!   byte values, in a third of the runs in a value region too small for every compute node to
//!   keep a chunk of every size class.
//! - **Faults**, drawn from the seed by a thread of their own: a compute node killed wherever its
//!   threads are (a WRITE in flight lands a prefix of its packets), a compute node paused past
//!   its lease (wherever it is, or at a named step of a write or split), transient verb
//!   failures, a lost completion, a batch landing late, a batch stalled partway, the memory
//!   node's worker killed, losing a completion (both restart it on its pool) or paused (the whole
//!   process, between two batches, or at a named step of a retraining, recovery, box refill or
//!   orphan sweep), a client dropped and made again, a store closed and opened again, a killed
//!   or fenced compute node started again as a new member. Some are tied to a named step: a
//!   write's next batch made late or stalled once it holds a leaf lock or has claimed a split's
//!   SLT slot, and a store reopened while the worker stops inside a retraining.
//! - **End.** Once every client is done, each memory node must recover every member that died
//!   (every lease entry free again), retrain what recovery queued, `verify` clean, conserve its
//!   leaves (allocated = linked + freed + in boxes + free-listed) and hold no stale redo image;
//!   the history, with a final read of every key appended, must be linearizable.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use index_core::{Client, Done, IndexError, Lane, Reply, Request, Session, Store, StoreConfig};
use leaf_store::BulkLoadConfig;
use leaf_store::members::{MemberState, MemberTable};
use rdma_transport::{Transport, TransportError};
use retrainer::{RetrainConfig, Retrainer};
use sim_scheduler::{Group, thread};
use sim_transport::{Reordering, SimConfig, SimEndpoint, SimTransport};
use testkit::XorShift64;
use testkit::linearizability::{KvOp, KvResult};

use crate::fault_mix::{FAULT_NAMES, FaultMix, pauses_worker};
use crate::history::{Entry, Op, Recorder, Returned};
use crate::liveness::{Began, Liveness, LivenessStats, gives_up};
use crate::side_draw::side_draw;
use crate::times::{LEASE, RECOVERY_LIMIT, RENEWAL};

/// How a run is shaped (the seed fills in the rest).
#[derive(Debug, Clone)]
pub struct Options {
    /// Operations each client runs (three times as many in a contended run with several in
    /// flight, whose one client thread per compute node runs the three's).
    pub ops_per_client: usize,
    /// Whether faults are injected.
    pub faults: bool,
    /// Whether the pools store byte values (every operation then goes through the value
    /// blocks: `get_value`, `put_value`, `scan_values`, ...), each value's bytes naming its key and
    /// the number the history records.
    pub byte_values: bool,
    /// Operations each client thread keeps in flight (1 to [`MAX_IN_FLIGHT`]) in every run;
    /// `None`: 1 to 8 drawn from the seed by a generator of its own (so a seed draws its other
    /// choices as before).
    pub inflight: Option<usize>,
    /// The NIC's atomicity (`SimConfig::nic_atomics`): a WRITE landing on a word between an
    /// atomic's read and its write is lost. On by default: atomics as a NIC runs them; off,
    /// as a CPU does (a pool file shared by processes without a NIC).
    pub nic_atomics: bool,
    /// Swarm runs: in three runs of four, the faults come from a subset of their kinds drawn
    /// from the seed (each kind in about half of them), so a run piles up the few kinds it has
    /// instead of spreading over all of them (`fault_mix.rs`); and half the runs that stop the
    /// worker in slot splits (of those neither contended nor grown then shrunk) grow the last
    /// slot's keys, so that it splits. Off: every run is drawn as before swarm runs, every fault
    /// kind in each (`simulate --no-swarm`; CI's regression seeds).
    pub swarm: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            ops_per_client: 25,
            faults: true,
            byte_values: false,
            inflight: None,
            nic_atomics: true,
            swarm: true,
        }
    }
}

/// The most operations a client thread keeps in flight.
pub const MAX_IN_FLIGHT: usize = 8;

/// Operations each client thread of a run keeps in flight: `pinned`, or 1 to [`MAX_IN_FLIGHT`]
/// drawn from the seed by a generator of its own (so the seed's other choices are those it made
/// before). With 1 a thread runs one operation at a time, as it did before pipelines existed.
fn in_flight(seed: u64, pinned: Option<usize>) -> usize {
    pinned.unwrap_or_else(|| {
        1 + (side_draw(seed, 0x91e1_17ed_0000_0001) % MAX_IN_FLIGHT as u64) as usize
    })
}

/// The bytes the simulation stores for value `v` of `key` in a pool with byte values: both
/// numbers, then 0 to 299 bytes that depend on them (so lengths, and size classes, vary).
pub fn value_bytes(key: u64, v: u64) -> Vec<u8> {
    let mix = (key ^ v.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let len = (mix >> 40) % 300;
    let mut out = Vec::with_capacity(16 + len as usize);
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&v.to_le_bytes());
    out.extend((0..len).map(|i| (mix >> (i % 7 * 8)) as u8 ^ i as u8));
    out
}

/// The number a value of `key` read back stands for; a torn or foreign value ends the run.
fn value_number(key: u64, bytes: &[u8]) -> u64 {
    let v = bytes
        .get(8..16)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
        .unwrap_or(u64::MAX);
    if bytes.get(..8) != Some(&key.to_le_bytes()[..]) || value_bytes(key, v) != bytes {
        sim_scheduler::fail(&format!(
            "key {key} read a torn or foreign value of {} bytes: {:?}",
            bytes.len(),
            &bytes[..bytes.len().min(32)]
        ));
    }
    v
}

/// The value region of a pool with byte values: small chunks, so that chunks are claimed,
/// left, adopted and given back all the time; in a third of the runs only 32 of them, fewer than
/// the size classes in use times the compute nodes, so that writers run out of fresh chunks and
/// wait for freed blocks to pass the reuse horizon, and some get `ValuesExhausted` (a chunk
/// another compute node owns is not theirs to carve): in 35 such runs of seeds 0–120, 15 waited
/// and 11 were refused.
fn value_region(seed: u64) -> leaf_store::ValueConfig {
    let small = side_draw(seed, 0x7a1e_e5e9_10b5_0001).is_multiple_of(3);
    leaf_store::ValueConfig {
        bytes: if small { 32 * 2048 } else { 1 << 20 },
        chunk_bytes: 2048,
    }
}

/// Faults injected in a run, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Compute nodes killed.
    pub kills: u64,
    /// Compute nodes paused past their lease.
    pub pauses: u64,
    /// Transient verb failures.
    pub verb_failures: u64,
    /// Lost completions.
    pub lost_completions: u64,
    /// Lost completions of batches whose verbs land later (a NIC still working on them), up to
    /// two leases later.
    pub late_landings: u64,
    /// Memory-node workers killed (and restarted on the pool).
    pub worker_restarts: u64,
    /// Memory-node workers paused.
    pub worker_pauses: u64,
    /// Lost completions of the memory node's worker (restarted on its pool like a killed one).
    pub worker_lost_completions: u64,
    /// Clients dropped and made again.
    pub client_restarts: u64,
    /// Compute nodes started again as a new member (after a kill or a fence).
    pub store_restarts: u64,
    /// Compute nodes whose store was closed and opened again (every cached view dropped).
    pub store_reopens: u64,
    /// Batches a NIC stalled partway through (some verbs done, the rest waiting).
    pub stalled_batches: u64,
}

impl Faults {
    /// Each kind's count, named.
    pub fn by_kind(&self) -> [(&'static str, u64); 12] {
        [
            ("kill", self.kills),
            ("pause", self.pauses),
            ("verb failure", self.verb_failures),
            ("lost completion", self.lost_completions),
            ("late landing", self.late_landings),
            ("worker restart", self.worker_restarts),
            ("worker pause", self.worker_pauses),
            ("worker lost completion", self.worker_lost_completions),
            ("client restart", self.client_restarts),
            ("store restart", self.store_restarts),
            ("store reopen", self.store_reopens),
            ("stalled batch", self.stalled_batches),
        ]
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|&(_, n)| n).sum()
    }
}

/// What a run left for its report.
#[derive(Debug, Default)]
pub struct Summary {
    /// Operations that completed (failed ones included).
    pub ops: u64,
    /// Faults injected.
    pub faults: Faults,
    /// A line describing the run's shape.
    pub shape: String,
    /// The history (kept for a failing run's report).
    pub history: Vec<Entry>,
    /// Each fault as it was injected, after the history's clock then (`[clock] what`).
    pub fault_log: Vec<String>,
    /// Operations that failed, by the error's kind.
    pub errors: BTreeMap<&'static str, u64>,
    /// What the liveness oracle saw.
    pub liveness: LivenessStats,
    /// What the ledgers of leaves and value blocks accounted for.
    pub ledger: crate::Ledger,
    /// Operations each client thread kept in flight.
    pub inflight: usize,
    /// Whether the run's faults came from a subset of the kinds (a swarm run).
    pub swarm: bool,
}

struct World {
    transport: SimTransport,
    recorder: Recorder,
    /// Each compute node's current process, and its group.
    compute: Vec<(Mutex<SimTransport>, Group)>,
    /// Per compute node: set to make its clients stop and its store close and open again.
    reopen: Vec<AtomicBool>,
    /// Each memory node's current process (its worker's), and its group.
    memory: Vec<(Mutex<SimTransport>, Group)>,
    clients_done: AtomicBool,
    stop_worker: AtomicBool,
    faults: Mutex<Faults>,
    fault_log: Mutex<Vec<String>>,
    ops: AtomicU64,
    /// How often the memory node tops leaf boxes up.
    box_fill_interval: Duration,
    /// The keys clients pick from: `keys.0 + 10 * (0..keys.1)`, each also `+ 5` now and then.
    keys: (u64, u64),
    /// Set by the fault thread for a run whose faults cannot leak a leaf (see
    /// [`crate::fault_mix::LEAK_FREE_FAULTS`]): the orphan sweeps must then reclaim exactly the
    /// leaves the stores say they forgot.
    leak_free: AtomicBool,
    /// The sum of every store's `leaves_forgotten`, added as each closes.
    forgotten: AtomicU64,
    /// The first thread found holding a leaf, block or lock where it must hold none (see
    /// `crate::ledger`).
    in_hand: Mutex<Option<String>>,
    /// Whether the pools store byte values.
    byte_values: bool,
    /// Whether the memory nodes' workers stop inside every slot split (see
    /// [`watch_slot_splits`]).
    split_window: bool,
    /// Whether the clients only grow their keys (a run watching slot splits, on the last slot's
    /// keys: see [`main`]).
    split_prone: bool,
    /// Set while a worker is stopped inside a slot split: the prober (see [`probe`]) opens a
    /// store and scans every key.
    probe: AtomicBool,
    /// Whether the clients grow their keys for the first half of their operations and delete
    /// them for the second (see [`main`]).
    grow_then_shrink: bool,
    /// The faults' holds and the operations' virtual times, for the liveness oracle.
    liveness: Liveness,
    /// Operations that failed, by the error's kind.
    errors: Mutex<BTreeMap<&'static str, u64>>,
    /// The first operation that found a value block no longer holding what the leaf it read
    /// named (the block reused under it), with how many it re-read.
    reused_under_reader: Mutex<Option<String>>,
}

impl World {
    fn count(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.faults.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Records the first leaf, block or lock found in a thread's hands where it must hold none.
    fn left_in_hand(&self, what: String) {
        self.in_hand
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(what);
    }

    /// Logs a fault (for a replay's report), at the history's clock now.
    fn log(&self, what: String) {
        let line = format!("[{}] {what}", self.recorder.now());
        self.fault_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }

    /// Puts a new process in `slot` (a node started again after it was killed or fenced).
    fn start_again(&self, slot: &Mutex<SimTransport>) {
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = self.transport.process();
    }

    /// Memory node `n`'s worker's current process.
    fn worker_process(&self, n: usize) -> SimTransport {
        self.memory[n]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn layout_config(rng: &mut XorShift64) -> BulkLoadConfig {
    BulkLoadConfig {
        // A small model region now and then (the smallest a layout allows, 2, or 6): records are
        // reclaimed and their space reused.
        model_region_factor: match rng.next_u64() % 6 {
            0 => 2,
            1 => 6,
            _ => 24,
        },
        // Generations of one or two bits in half the runs: they wrap every second or fourth
        // retraining, so a reused address holds a record with the generation its predecessor
        // had there, and nothing may take the one for the other.
        generation_bits: rng
            .next_u64()
            .is_multiple_of(2)
            .then(|| 1 + rng.next_u64() % 2),
        ..integration_tests::tiny()
    }
}

/// `keys` (value = key) bulk-loaded over `nodes` simulated memory nodes, range-partitioned
/// (with byte values if `config` has a value region).
fn load(
    keys: &[u64],
    nodes: usize,
    config: &BulkLoadConfig,
    sim: SimConfig,
) -> (SimTransport, Vec<leaf_store::Layout>, HashMap<u16, u64>) {
    let size =
        leaf_store::required_pool_bytes(keys.len() as u64, config, 2048).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&vec![size; nodes], sim)
        .unwrap_or_else(|e| sim_scheduler::fail(&format!("pool: {e}")));
    let loaded = if config.values.is_some() {
        let pairs = keys.iter().map(|&k| (k, value_bytes(k, k))).collect();
        index_core::bootstrap_values(&transport, pairs, config, |_, _, _, _| {})
    } else {
        index_core::bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), config)
    };
    match loaded {
        Ok(reports) => {
            let loaded = reports
                .iter()
                .map(|r| (r.layout.node(), r.trained_leaves))
                .collect();
            (
                transport,
                reports.iter().map(|r| r.layout).collect(),
                loaded,
            )
        }
        Err(e) => sim_scheduler::fail(&format!("bulk load: {e}")),
    }
}

/// `scan_values(start, n)` of a pool with byte values, each value read back as its number.
fn scan_numbers(
    client: &mut Client<SimEndpoint>,
    start: u64,
    n: usize,
) -> Result<Vec<(u64, u64)>, IndexError> {
    client.scan_values(start, n).map(|rows| {
        rows.into_iter()
            .map(|(k, b)| (k, value_number(k, &b)))
            .collect()
    })
}

/// Every key and value number a new store reads (a full scan).
fn contents(transport: &SimTransport, byte_values: bool) -> BTreeMap<u64, u64> {
    if !byte_values {
        return integration_tests::recovery::contents(transport);
    }
    let mut reader =
        integration_tests::write_scenarios::other_client(transport, Duration::from_secs(10));
    match scan_numbers(&mut reader, 0, usize::MAX) {
        Ok(rows) => rows.into_iter().collect(),
        Err(e) => sim_scheduler::fail(&format!("final scan: {e}")),
    }
}

/// The body of a run (its first thread): builds the world, runs it, checks it; a failed check
/// ends the run through `sim_scheduler::fail`.
pub(crate) fn main(options: &Options, summary: &Mutex<Summary>) {
    let seed = sim_scheduler::random_u64() | 1;
    let mut rng = XorShift64::new(seed);
    let sim = SimConfig {
        torn: rng.next_u64().is_multiple_of(2),
        reordering: if rng.next_u64().is_multiple_of(2) {
            Reordering::InOrder
        } else {
            Reordering::Random
        },
        // Small packets now and then: leaves span several, and in-place writes go through redo
        // leaves.
        packet_bytes: if rng.next_u64().is_multiple_of(2) {
            16
        } else {
            1024
        },
        nic_atomics: options.nic_atomics,
        ..SimConfig::default()
    };
    let keys: Vec<u64> = (0..24).map(|i| i * 10).collect();
    let config = BulkLoadConfig {
        values: options.byte_values.then(|| value_region(seed)),
        ..layout_config(&mut rng)
    };
    // Two memory nodes in a third of the runs: a compute node is a member of each, with a lease,
    // an epoch and views to confirm on each, and each has a worker of its own.
    let memory_nodes = if rng.next_u64().is_multiple_of(3) {
        2
    } else {
        1
    };
    let (transport, layouts, loaded_leaves) = load(&keys, memory_nodes, &config, sim);
    // Every recovery keeps its steps in ARCHITECTURE's order (checked where each is met).
    sim_scheduler::ghost::require_order(&retrainer::recovery_steps::ORDER);
    let initial: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
    let compute_nodes = 2 + (rng.next_u64() % 2) as usize;
    let mut clients = 1 + (rng.next_u64() % 2) as usize;
    // A third of the runs top leaf boxes up rarely: splits allocate from the counter, and leaves
    // a split could not use become spares.
    let box_fill_interval = if rng.next_u64().is_multiple_of(3) {
        Duration::from_millis(20)
    } else {
        Duration::from_micros(500)
    };
    // Hot keys in a third of the runs: 16 keys of one or two slots instead of 60 keys of all of
    // them, so that every retraining meets operations routed by the views it makes stale.
    let mut key_space = if rng.next_u64().is_multiple_of(3) {
        (100, 8)
    } else {
        (0, 30)
    };
    // Several operations in flight per client thread in seven runs of eight: each a pipeline of
    // that many clients (its own endpoints and connection indexes) driven by one session.
    let inflight = in_flight(seed, options.inflight);
    let mut ops_per_client = options.ops_per_client;
    // A fifth of the runs are contended instead: three clients on each compute node and 4 keys
    // of one leaf, so that writers of one compute node queue on its local lock and hand the leaf
    // lock over (8 to 24 times a run in seeds 0-30, against 0 to 3 in the others; with 8 keys,
    // 0 to 14), and the leaf's splits and unlinks meet every other write. With several
    // operations in flight, one client thread per compute node runs the three's operations: its
    // writers queue as operations of one session. (Three threads of seven in flight on each of
    // three compute nodes, up to 63 operations at once on 4 keys, made seed 321's history of one
    // key, every landed leaf image a read, take the linearizability search 66 s; the whole run
    // takes 0.3 s this way.)
    let contended = side_draw(seed, 0xc0e7_e57e_d000_0001).is_multiple_of(5);
    if contended {
        key_space = (100, 2);
        if inflight == 1 {
            clients = 3;
        } else {
            clients = 1;
            ops_per_client *= 3;
        }
    }
    // A sixth of the others grow then shrink: on the hot keys, each client inserts for the first
    // half of its operations and deletes for the second, so that leaves split into synonyms that
    // deletes then empty and unlink (about one run in twenty unlinked a leaf before; an unlink
    // is a structural change of its own, with its own crash points and recovery).
    let grow_then_shrink = !contended && side_draw(seed, 0x6e0e_5e11_0000_0001).is_multiple_of(6);
    if grow_then_shrink {
        key_space = (100, 8);
    }
    // A third of the runs stop the worker in every slot split's window (while a prober scans),
    // and slot splits are the rarest retraining: a slot must grow past twice its leaves. In half
    // of those (neither contended nor grown then shrunk), the clients insert on the last slot's
    // keys and the keys past them, which route to it, so that it splits, and again. (With two
    // memory nodes the second holds 120-230, and 160-190 fall in its second-to-last slot.)
    let split_window = side_draw(seed, 0x5b11_7e1d_0000_0001).is_multiple_of(3);
    let split_prone = options.swarm
        && split_window
        && !contended
        && !grow_then_shrink
        && side_draw(seed, 0x5b11_7e1d_0000_0002).is_multiple_of(2);
    if split_prone {
        key_space = (160, 13);
    }
    let mix = FaultMix::drawn(seed, options.swarm);
    let faults_shown = if options.faults {
        mix.to_string()
    } else {
        "no faults".to_string()
    };
    let shape = format!(
        "{compute_nodes} compute nodes x {clients} clients of {ops_per_client} operations, {inflight} in flight, {} keys{}{}, {memory_nodes} memory node{}, torn {}, {:?}, packets of {} bytes, model region x{}, {}-bit generations, boxes filled every {box_fill_interval:?}, {faults_shown}{}",
        key_space.1 * 2,
        if grow_then_shrink {
            " grown then shrunk"
        } else if split_prone {
            " of the last slot and past it, grown"
        } else {
            ""
        },
        match &config.values {
            Some(v) if v.bytes < 1 << 20 => " with byte values in a small region",
            Some(_) => " with byte values",
            None => "",
        },
        if memory_nodes == 1 { "" } else { "s" },
        sim.torn,
        sim.reordering,
        sim.packet_bytes,
        config.model_region_factor,
        config
            .generation_bits
            .unwrap_or(leaf_store::ModelHeader::GENERATION_BITS),
        if split_window {
            ", the worker stopped in slot splits"
        } else {
            ""
        },
    );
    {
        let mut s = summary.lock().unwrap_or_else(|e| e.into_inner());
        s.shape = shape;
        s.inflight = inflight;
        s.swarm = options.faults && mix.is_subset();
    }
    let world = Arc::new(World {
        compute: (0..compute_nodes)
            .map(|_| (Mutex::new(transport.process()), sim_scheduler::new_group()))
            .collect(),
        reopen: (0..compute_nodes).map(|_| AtomicBool::new(false)).collect(),
        memory: (0..memory_nodes)
            .map(|_| (Mutex::new(transport.process()), sim_scheduler::new_group()))
            .collect(),
        transport,
        recorder: Recorder::default(),
        clients_done: AtomicBool::new(false),
        stop_worker: AtomicBool::new(false),
        faults: Mutex::new(Faults::default()),
        fault_log: Mutex::new(Vec::new()),
        ops: AtomicU64::new(0),
        box_fill_interval,
        keys: key_space,
        leak_free: AtomicBool::new(!options.faults),
        forgotten: AtomicU64::new(0),
        in_hand: Mutex::new(None),
        byte_values: options.byte_values,
        grow_then_shrink,
        split_window,
        split_prone,
        probe: AtomicBool::new(false),
        liveness: Liveness::new(),
        errors: Mutex::new(BTreeMap::new()),
        reused_under_reader: Mutex::new(None),
    });
    // Every leaf image that lands is a read of the keys it claims (u64 values: the history's).
    if !world.byte_values {
        let every_key = (0..world.keys.1)
            .flat_map(|i| [world.keys.0 + 10 * i, world.keys.0 + 10 * i + 5])
            .chain(initial.keys().copied())
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        let history = Arc::downgrade(&world);
        crate::images::observe(&world.transport, &layouts, every_key, move |key, state| {
            if let Some(world) = history.upgrade() {
                let at = world.recorder.call("leaf image", Op::Kv(key, KvOp::Get));
                world.recorder.ret(at, Returned::Kv(KvResult::Value(state)));
            }
        });
    }

    let workers: Vec<_> = (0..memory_nodes)
        .map(|n| {
            let world = Arc::clone(&world);
            thread::spawn_in(world.memory[n].1, &format!("mn{n}"), move || {
                memory_node(&world, n)
            })
            .unwrap_or_else(|e| sim_scheduler::fail(&format!("spawn: {e}")))
        })
        .collect();
    let drivers: Vec<_> = (0..compute_nodes)
        .map(|i| {
            let world = Arc::clone(&world);
            let seed = rng.next_u64();
            let ops = ops_per_client;
            thread::spawn_in(world.compute[i].1, &format!("cn{i}"), move || {
                compute_node(&world, i, clients, ops, inflight, seed);
            })
            .unwrap_or_else(|e| sim_scheduler::fail(&format!("spawn: {e}")))
        })
        .collect();
    let prober = world.split_window.then(|| {
        let world = Arc::clone(&world);
        thread::spawn_in(sim_scheduler::new_group(), "probe", move || probe(&world))
            .unwrap_or_else(|e| sim_scheduler::fail(&format!("spawn: {e}")))
    });
    let faults = options.faults.then(|| {
        let world = Arc::clone(&world);
        let seed = rng.next_u64();
        let group = sim_scheduler::new_group();
        thread::spawn_in(group, "faults", move || inject_faults(&world, seed, mix))
            .unwrap_or_else(|e| sim_scheduler::fail(&format!("spawn: {e}")))
    });
    for driver in drivers {
        if driver.join().is_err() {
            sim_scheduler::fail("a compute node's driver panicked");
        }
    }
    world.clients_done.store(true, Ordering::SeqCst);
    if let Some(faults) = faults {
        let _ = faults.join();
    }
    if let Some(prober) = prober
        && prober.join().is_err()
    {
        sim_scheduler::fail("the prober panicked");
    }
    // No verb failure or lost completion left armed for the checks below.
    world.transport.fail_next_verbs(0);
    world.transport.fail_inside_next_batch(0);
    for n in 0..memory_nodes {
        world.worker_process(n).disarm();
    }

    // Every member that died must be recovered, every live one must have left.
    wait_for_free_members(&world.transport);
    world.stop_worker.store(true, Ordering::SeqCst);
    let mut last_workers = Vec::new();
    for worker in workers {
        let Ok(Some(worker)) = worker.join() else {
            sim_scheduler::fail("a memory node's worker did not come back");
        };
        last_workers.push(worker);
    }
    {
        let mut s = summary.lock().unwrap_or_else(|e| e.into_inner());
        s.ops = world.ops.load(Ordering::SeqCst);
        s.faults = *world.faults.lock().unwrap_or_else(|e| e.into_inner());
        s.history = world.recorder.entries();
        s.fault_log =
            std::mem::take(&mut *world.fault_log.lock().unwrap_or_else(|e| e.into_inner()));
        s.errors = world
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
    }
    // A block a reader reaches through a leaf holds what the leaf named: no block is used again
    // while an operation that may have read its reference runs (the reuse horizon). The readers'
    // block check would mask a reuse (they read again through the leaf), so the re-reads are
    // the evidence: a run has none.
    if let Some(first) = world
        .reused_under_reader
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        sim_scheduler::fail(&format!(
            "a value block was used again under a reader: {first}"
        ));
    }
    if let Some(first) = world
        .in_hand
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        sim_scheduler::fail(&first);
    }
    // Every operation completed in bounded virtual time, or faults held the store for it.
    match world.liveness.check() {
        Ok(stats) => summary.lock().unwrap_or_else(|e| e.into_inner()).liveness = stats,
        Err(e) => sim_scheduler::fail(&format!("no progress: {e}")),
    }
    // Whatever leaked in the run (lost completions, dead compute nodes' leaves in hand, killed
    // workers' free lists) is the orphan sweep's: finish the one under way, then one whole sweep
    // begun now, so no leaf is excused.
    let mut reclaimed = 0;
    for worker in &mut last_workers {
        for round in 0..2 {
            if round == 1
                && let Err(e) = worker.sweep_orphans()
            {
                sim_scheduler::fail(&format!("orphan sweep: {e}"));
            }
            let mut waited = 0;
            while worker.orphan_scan_pending() {
                waited += 1;
                if waited > 200 {
                    sim_scheduler::fail("an orphan sweep's epoch never ended");
                }
                thread::sleep(LEASE);
                let step = worker.check_members().and_then(|_| worker.sweep_orphans());
                if let Err(e) = step {
                    sim_scheduler::fail(&format!("orphan sweep: {e}"));
                }
            }
        }
        reclaimed += worker.stats().orphans_reclaimed;
        let node = worker.layout().node();
        // Every member is gone: the value chunks they held go back, with their unnamed blocks
        // freed, before `verify` looks for leaked ones.
        if let Err(e) = worker.check_members() {
            sim_scheduler::fail(&format!("check: {e}"));
        }
        integration_tests::recovery::retrain_and_verify(
            worker,
            &world.transport,
            &format!("memory node {node}, at the end"),
        );
    }

    // Every leaf the orphan sweeps reclaimed and every block freed from a departed member's
    // chunks, kills included, was forgotten by a store or taken from its holder by a fault (see
    // `crate::ledger`).
    if let Err(e) = crate::ledger::after_operation("the final sweeps", false) {
        sim_scheduler::fail(&e);
    }
    match crate::ledger::account(&loaded_leaves) {
        Ok(ledger) => summary.lock().unwrap_or_else(|e| e.into_inner()).ledger = ledger,
        Err(e) => sim_scheduler::fail(&e),
    }
    // Without a fault that may leak a leaf, the orphan sweeps (during the run and above) freed
    // exactly the leaves the stores forgot: any other was leaked by a protocol. A compute node
    // declared dead makes the run one that may leak (the recovery takes the leaves it held, and
    // the ledger above accounts for each): one no fault stopped can still be, when the schedule
    // starves its renewals past the lease, as a busy host's scheduler can (seed 1829, a NIC's
    // atomics: their extra sync points gave the other threads more steps).
    let deaths: u64 = last_workers
        .iter()
        .filter_map(|w| w.member_stats())
        .map(|s| s.deaths)
        .sum();
    let forgotten = world.forgotten.load(Ordering::SeqCst);
    if world.leak_free.load(Ordering::SeqCst) && deaths == 0 && reclaimed != forgotten {
        sim_scheduler::fail(&format!(
            "the orphan sweeps freed {reclaimed} leaves in a run without a fault that may leak one; the stores forgot {forgotten}"
        ));
    }

    // The final contents, read by a new store, close the history.
    let contents = contents(&world.transport, world.byte_values);
    let mut history = world.recorder.entries();
    let mut clock = history.iter().filter_map(|e| e.ret).max().unwrap_or(0) + 1;
    let mut keys: Vec<u64> = initial.keys().copied().collect();
    keys.extend(history.iter().filter_map(|e| match e.op {
        Op::Kv(k, _) => Some(k),
        Op::Scan(..) => None,
    }));
    keys.extend(contents.keys().copied());
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        history.push(Entry {
            client: "final".into(),
            op: Op::Kv(key, KvOp::Get),
            call: clock,
            ret: Some(clock + 1),
            returned: Some(Returned::Kv(KvResult::Value(contents.get(&key).copied()))),
        });
        clock += 2;
    }
    summary.lock().unwrap_or_else(|e| e.into_inner()).history = history.clone();
    if let Err(violation) = crate::oracle::check_history(&initial, &history) {
        sim_scheduler::fail(&format!("not linearizable: {violation}"));
    }
}

/// Waits (virtual time) until every lease entry of every memory node is free.
fn wait_for_free_members(transport: &SimTransport) {
    let process = transport.process();
    let started = sim_scheduler::time::Instant::now();
    loop {
        let mut ep = process
            .endpoint()
            .unwrap_or_else(|e| sim_scheduler::fail(&format!("endpoint: {e}")));
        let mut held: Vec<(u16, usize, MemberState)> = Vec::new();
        for &node in transport.memory_nodes() {
            let layout = leaf_store::Layout::attach(&mut ep, node)
                .unwrap_or_else(|e| sim_scheduler::fail(&format!("attach: {e}")));
            let leases = MemberTable::new(&layout)
                .read_leases(&mut ep)
                .unwrap_or_else(|e| sim_scheduler::fail(&format!("leases: {e}")));
            held.extend(
                leases
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.state() != MemberState::Free)
                    .map(|(i, l)| (node.id, i, l.state())),
            );
        }
        if held.is_empty() {
            return;
        }
        if started.elapsed() > RECOVERY_LIMIT {
            sim_scheduler::fail(&format!(
                "members never recovered or left within {RECOVERY_LIMIT:?}: {held:?}"
            ));
        }
        thread::sleep(LEASE);
    }
}

/// Memory node `n`: its worker retrains and watches leases until the end; killed, it is made
/// again on the pool. Returns the last worker.
fn memory_node(world: &World, n: usize) -> Option<Retrainer<SimEndpoint>> {
    let node = world.transport.memory_nodes()[n];
    let mut attempts = 0;
    loop {
        let process = world.worker_process(n);
        let made = process
            .endpoint()
            .map_err(retrainer::RetrainError::from)
            .and_then(|ep| {
                Retrainer::new(
                    ep,
                    node,
                    RetrainConfig {
                        grace_period: Duration::from_millis(2),
                        // Retrain often: a slot with one synonym is swept every millisecond,
                        // so stale caches, retired records and slot splits meet the clients.
                        // (A run that grows then shrinks keeps its synonyms longer: a slot is
                        // swept once it has three, so deletes find synonym leaves to empty.)
                        idle_sweep_threshold: if world.grow_then_shrink { 6 } else { 1 },
                        sweep_interval: Duration::from_millis(1),
                        // And look for orphaned leaves every 2 ms.
                        orphan_sweep_interval: Duration::from_millis(2),
                        box_fill_interval: world.box_fill_interval,
                        ..RetrainConfig::default()
                    },
                )
            });
        let mut worker = match made {
            Ok(worker) => worker,
            Err(_) if process.is_killed() => {
                world.start_again(&world.memory[n].0);
                continue;
            }
            Err(_) if attempts < 100 => {
                // A transient verb failure: try again.
                attempts += 1;
                thread::sleep(Duration::from_micros(100));
                continue;
            }
            Err(e) => sim_scheduler::fail(&format!("the memory node's worker cannot start: {e}")),
        };
        let fence = world
            .transport
            .fence(node.id)
            .unwrap_or_else(|| sim_scheduler::fail("no fence"));
        worker.watch_members(LEASE, Box::new(fence));
        let ran = worker.run(|| world.stop_worker.load(Ordering::SeqCst) || process.is_killed());
        let stopped = ran.is_ok() && !process.is_killed();
        if let Err(e) = crate::ledger::worker_ended(node.id, worker.free_leaves(), !stopped) {
            world.left_in_hand(e);
        }
        if stopped {
            return Some(worker);
        }
        // Killed, or its endpoint lost a completion: started again on its pool, as a new process
        // (its free list, and what its lost completions allocated, are the orphan sweep's).
        world.start_again(&world.memory[n].0);
    }
}

/// The cache budget of a compute node's incarnation: none for two in three, else none at all
/// (every view read again when used), a few views' worth or a few dozen. Drawn from its own
/// generator, so that a seed's other choices are those it made before budgets existed.
fn cache_budget(seed: u64, incarnation: u64) -> Option<u64> {
    let pick =
        XorShift64::new((seed ^ 0xb0d6_e7ca_c4e0_0001).wrapping_add(incarnation) | 1).next_u64();
    match pick % 9 {
        0 => Some(0),
        1 => Some(1 << 10),
        2 => Some(8 << 10),
        _ => None,
    }
}

/// A compute node: opens a store on its process and runs its client threads, each with
/// `inflight` operations in flight; killed or fenced, it starts again as a new member until its
/// clients have run all their operations.
fn compute_node(
    world: &Arc<World>,
    index: usize,
    clients: usize,
    ops: usize,
    inflight: usize,
    seed: u64,
) {
    let mut rng = XorShift64::new(seed | 1);
    let mut left = vec![ops; clients];
    for incarnation in 0.. {
        if left.iter().all(|&l| l == 0) || incarnation > 40 {
            return;
        }
        // Closed and opened again on its process, or (killed, fenced) started again as a new one.
        let reopened = world.reopen[index].swap(false, Ordering::SeqCst);
        if incarnation > 0 && !reopened {
            world.count(|f| f.store_restarts += 1);
            world.start_again(&world.compute[index].0);
        }
        let process = world.compute[index]
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let config = StoreConfig {
            lease_renewal: RENEWAL,
            // Every split asks for its slot's retraining.
            // (In a run that grows then shrinks, every third: synonyms live long enough for
            // deletes to empty and unlink them.)
            retrain_threshold: if world.grow_then_shrink { 6 } else { 1 },
            cache_budget: cache_budget(seed, incarnation),
            ..StoreConfig::default()
        };
        let store = match Store::open(process.clone(), config) {
            Ok(store) => Arc::new(store),
            Err(_) => {
                thread::sleep(LEASE);
                continue;
            }
        };
        let threads: Vec<_> = left
            .iter()
            .enumerate()
            .filter(|&(_, &l)| l > 0)
            .map(|(c, &l)| {
                let store = Arc::clone(&store);
                let seed = rng.next_u64();
                let name = format!("cn{index}.{incarnation}.c{c}");
                let world = Arc::clone(world);
                (
                    c,
                    thread::Builder::new().name(name.clone()).spawn(move || {
                        if inflight == 1 {
                            run_client(&world, index, &store, &name, l, seed)
                        } else {
                            run_pipelined(&world, index, &store, &name, l, seed, inflight)
                        }
                    }),
                )
            })
            .collect();
        for (c, handle) in threads {
            match handle.map(thread::JoinHandle::join) {
                Ok(Ok(done)) => left[c] -= done,
                _ => sim_scheduler::fail("a client thread panicked"),
            }
        }
        world
            .forgotten
            .fetch_add(store.leaves_forgotten(), Ordering::SeqCst);
        drop(store);
    }
}

/// The name of an error's kind, for the run's tally.
fn error_kind(e: &IndexError) -> &'static str {
    match e {
        IndexError::Transport(TransportError::Fenced(_)) => "transport: fenced",
        IndexError::Transport(TransportError::Broken(_)) => "transport: broken",
        IndexError::Transport(TransportError::Crashed) => "transport: crashed",
        IndexError::Transport(TransportError::InjectedFault) => "transport: injected",
        IndexError::Transport(_) => "transport: other",
        IndexError::Layout(_) => "layout",
        IndexError::PoolExhausted { .. } => "pool exhausted",
        IndexError::SltFull { .. } => "SLT full",
        IndexError::RetrainingTimeout { .. } => "retraining timeout",
        IndexError::LockTimeout { .. } => "lock timeout",
        IndexError::LockMayRemain { .. } => "lock may remain",
        IndexError::Fenced { .. } => "fenced",
        IndexError::TooManyRetries(_) => "too many retries",
        IndexError::ValueTooLarge { .. } => "value too large",
        IndexError::ValuesExhausted { .. } => "values exhausted",
        IndexError::WrongValueKind { .. } => "wrong value kind",
        IndexError::Config(_) => "config",
        _ => "other",
    }
}

/// The prober of a run that watches slot splits: a compute node that starts while a worker is
/// stopped inside a slot split (its store opened there, every view read from the slot table as
/// it is then) and scans every key. Every key must stay routable through a retraining, whatever
/// step it stopped at: a scan that waits for the worker fails the liveness oracle.
fn probe(world: &World) {
    let process = world.transport.process();
    while !world.clients_done.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_micros(100));
        if !world.probe.swap(false, Ordering::SeqCst) {
            continue;
        }
        let config = StoreConfig {
            lease_renewal: RENEWAL,
            ..StoreConfig::default()
        };
        let Ok(store) = Store::open(process.clone(), config) else {
            continue;
        };
        let Ok(mut client) = store.client() else {
            continue;
        };
        let op = Op::Scan(0, usize::MAX);
        let at = world.recorder.call("probe", op);
        let began = world.liveness.begin();
        let result = if world.byte_values {
            scan_numbers(&mut client, 0, usize::MAX)
        } else {
            client.scan(0, usize::MAX)
        };
        let gave_up = matches!(&result, Err(e) if gives_up(e));
        world
            .liveness
            .ended("probe", || format!("{op:?}"), began, true, gave_up);
        match result {
            Ok(pairs) => world.recorder.ret(at, Returned::Scan(pairs)),
            Err(e) => world.recorder.ret(at, Returned::Failed(e.to_string())),
        }
    }
}

/// Whether an error means this compute node is gone (killed, fenced): its clients stop.
fn node_gone(e: &IndexError, process: &SimTransport) -> bool {
    process.is_killed()
        || e.is_fenced()
        || matches!(e, IndexError::Transport(TransportError::Crashed))
}

/// A client thread's random operations, drawn in the same order whether it runs them one at a
/// time ([`run_client`]) or several at once ([`run_pipelined`]): before each operation, whether
/// it idles first and whether a client restarts, then the operation.
struct Draws {
    rng: XorShift64,
    /// Values never written before: the client's seed in the high bits, a counter below.
    first_value: u64,
    /// The keys this client inserted, latest last (a run that grows then shrinks deletes them).
    inserted: Vec<u64>,
    /// Where the shrinking half's deletes of every key in turn are.
    sweep: u64,
}

impl Draws {
    fn new(seed: u64) -> Self {
        Self {
            rng: XorShift64::new(seed | 1),
            first_value: (seed >> 40) << 20,
            inserted: Vec::new(),
            sweep: seed % 16,
        }
    }

    /// Whether the thread idles before its next operation, and for how long: this store's views
    /// age across retirement epochs while the others' writes retrain the slots they name (and
    /// records are reclaimed under them).
    fn idle(&mut self) -> Option<Duration> {
        self.rng
            .next_u64()
            .is_multiple_of(6)
            .then(|| Duration::from_micros(1000 + self.rng.next_u64() % 11_000))
    }

    /// Whether a client is dropped and made again before the next operation (a thread of the
    /// compute node restarting).
    fn restart(&mut self) -> bool {
        self.rng.next_u64().is_multiple_of(40)
    }

    /// Operation `done` of the thread's `ops`.
    fn op(&mut self, world: &World, done: usize, ops: usize) -> Op {
        let rng = &mut self.rng;
        let key = world.keys.0
            + (rng.next_u64() % world.keys.1) * 10
            + if rng.next_u64().is_multiple_of(4) {
                5
            } else {
                0
            };
        let value = self.first_value + done as u64 + 1;
        let draw = rng.next_u64() % 20;
        let growing = world.split_prone || (world.grow_then_shrink && done < ops / 2);
        match (world.grow_then_shrink || world.split_prone, growing) {
            // Growing: mostly inserts, which split leaves.
            (true, true) => match draw {
                0..=2 => Op::Kv(key, KvOp::Get),
                3..=12 => Op::Kv(key, KvOp::Insert(value)),
                13..=15 => Op::Kv(key, KvOp::Upsert(value)),
                16 => Op::Kv(key, KvOp::Delete),
                _ => Op::Scan(key, 1 + (rng.next_u64() % 6) as usize),
            },
            // Shrinking: mostly deletes, which empty the synonym leaves the splits made, and
            // unlink them.
            (true, false) => match draw {
                0..=2 => Op::Kv(key, KvOp::Get),
                3 => Op::Kv(key, KvOp::Insert(value)),
                // The keys it inserted, last first (they went to the synonym leaves), then
                // every key in turn, so that whole leaves empty.
                4..=14 => Op::Kv(
                    self.inserted.pop().unwrap_or_else(|| {
                        self.sweep += 1;
                        let sweep = self.sweep;
                        world.keys.0 + (sweep % world.keys.1) * 10 + 5 * (sweep / world.keys.1 % 2)
                    }),
                    KvOp::Delete,
                ),
                15..=16 => Op::Kv(key, KvOp::Update(value)),
                _ => Op::Scan(key, 1 + (rng.next_u64() % 6) as usize),
            },
            (false, _) => match draw {
                0..=4 => Op::Kv(key, KvOp::Get),
                5..=8 => Op::Kv(key, KvOp::Insert(value)),
                9..=10 => Op::Kv(key, KvOp::Update(value)),
                11..=13 => Op::Kv(key, KvOp::Upsert(value)),
                14..=17 => Op::Kv(key, KvOp::Delete),
                _ => Op::Scan(key, 1 + (rng.next_u64() % 6) as usize),
            },
        }
    }

    /// An operation came back `returned`: an insert or upsert that inserted puts its key on
    /// the list a shrinking half deletes from.
    fn returned(&mut self, op: Op, returned: &Returned) {
        if let (
            Op::Kv(key, KvOp::Insert(_) | KvOp::Upsert(_)),
            Returned::Kv(KvResult::Done(true)),
        ) = (op, returned)
        {
            self.inserted.push(key);
        }
    }
}

/// A GET or a scan.
fn is_read(op: Op) -> bool {
    matches!(op, Op::Kv(_, KvOp::Get) | Op::Scan(..))
}

/// Whether an operation that failed with `e` ended in its own node's death or fence. Judged
/// from the error alone: asking the process would be a sync point.
fn ended_by_death(e: &IndexError) -> bool {
    e.is_fenced() || matches!(e, IndexError::Transport(TransportError::Crashed))
}

/// What an operation of `client` that came back `result` leaves to the run's accounts (done
/// in one place for [`run_client`] and [`run_pipelined`]): the liveness oracle is told of it
/// (`read`: judged as a read, which must not back off for a memory node's worker; `began`: when
/// it was called), its error is tallied and its return is recorded at `at`.
#[allow(clippy::too_many_arguments)]
fn account(
    world: &World,
    client: &str,
    op: Op,
    at: usize,
    began: Began,
    read: bool,
    result: &Result<Returned, IndexError>,
    draws: &mut Draws,
) {
    let gave_up = matches!(result, Err(e) if gives_up(e));
    world
        .liveness
        .ended(client, || format!("{op:?}"), began, read, gave_up);
    if let Err(e) = result {
        *world
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(error_kind(e))
            .or_default() += 1;
    }
    match result {
        Ok(returned) => {
            draws.returned(op, returned);
            world.recorder.ret(at, returned.clone());
        }
        Err(e) => world.recorder.ret(at, Returned::Failed(e.to_string())),
    }
}

/// Whether an operation's error means it lost its connection or its node (judged from the
/// error alone): its leaves are then excused, placed or forgotten or not.
fn lost_connection(result: &Result<Returned, IndexError>) -> bool {
    matches!(result, Err(e) if e.is_connection_lost() || e.is_fenced())
}

/// A client thread: `ops` random operations, one at a time; returns how many it ran before its
/// compute node was killed or fenced.
fn run_client(
    world: &World,
    node: usize,
    store: &Store<SimTransport>,
    name: &str,
    ops: usize,
    seed: u64,
) -> usize {
    let mut draws = Draws::new(seed);
    let mut client: Client<SimEndpoint> = match store.client() {
        Ok(client) => client,
        Err(_) => return 0,
    };
    let process = store.transport().clone();
    for done in 0..ops {
        if world.reopen[node].load(Ordering::SeqCst) {
            return done;
        }
        if let Some(idle) = draws.idle() {
            thread::sleep(idle);
        }
        if draws.restart() {
            drop(client);
            world.count(|f| f.client_restarts += 1);
            client = match store.client() {
                Ok(client) => client,
                Err(_) => return done,
            };
        }
        let op = draws.op(world, done, ops);
        let at = world.recorder.call(name, op);
        let began = world.liveness.begin();
        let rereads = client.value_retries();
        let answered = |r: Result<bool, IndexError>| r.map(|d| Returned::Kv(KvResult::Done(d)));
        let result = if world.byte_values {
            match op {
                Op::Kv(key, KvOp::Get) => client
                    .get_value(key)
                    .map(|v| Returned::Kv(KvResult::Value(v.map(|b| value_number(key, &b))))),
                Op::Kv(key, KvOp::Insert(v)) => {
                    answered(client.insert_value(key, &value_bytes(key, v)))
                }
                Op::Kv(key, KvOp::Update(v)) => {
                    answered(client.update_value(key, &value_bytes(key, v)))
                }
                Op::Kv(key, KvOp::Upsert(v)) => {
                    answered(client.put_value(key, &value_bytes(key, v)))
                }
                Op::Kv(key, KvOp::Delete) => answered(client.delete(key)),
                Op::Scan(start, n) => scan_numbers(&mut client, start, n).map(Returned::Scan),
            }
        } else {
            match op {
                Op::Kv(key, KvOp::Get) => client.get(key).map(|v| Returned::Kv(KvResult::Value(v))),
                Op::Kv(key, KvOp::Insert(v)) => answered(client.insert(key, v)),
                Op::Kv(key, KvOp::Update(v)) => answered(client.update(key, v)),
                Op::Kv(key, KvOp::Upsert(v)) => answered(client.upsert(key, v)),
                Op::Kv(key, KvOp::Delete) => answered(client.delete(key)),
                Op::Scan(start, n) => client.scan(start, n).map(Returned::Scan),
            }
        };
        world.ops.fetch_add(1, Ordering::SeqCst);
        if client.value_retries() != rereads {
            world
                .reused_under_reader
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| {
                    format!(
                        "{name} {op:?} (history clock {}) re-read {} value blocks",
                        world.recorder.now(),
                        client.value_retries() - rereads
                    )
                });
        }
        // A read that ended in its own node's death may have waited at that death (a batch of
        // a dying node stalls until it is cut): not judged as a read.
        let read = is_read(op) && !matches!(&result, Err(e) if ended_by_death(e));
        // Its leaves: placed or forgotten, unless the operation lost its connection or its node.
        if let Err(e) = crate::ledger::after_operation(
            &format!("{name} {op:?} (history clock {})", world.recorder.now()),
            lost_connection(&result),
        ) {
            world.left_in_hand(e);
        }
        account(world, name, op, at, began, read, &result, &mut draws);
        if let Err(e) = result {
            if node_gone(&e, &process) {
                return done + 1;
            }
            if matches!(e, IndexError::Transport(TransportError::Broken(_)))
                && store.reconnect(&mut client).is_err()
            {
                return done + 1;
            }
        }
    }
    ops
}

/// An operation of a pipelined client thread in flight: what it asked, its history entry,
/// when it began, and whether a write of its thread was in flight beside it.
struct InFlight {
    op: Op,
    at: usize,
    began: Began,
    beside_write: bool,
}

/// What a pipelined client thread does once its session is drained (see [`run_pipelined`]).
#[derive(Debug, Default)]
struct Between {
    /// Its node is gone (killed, fenced) or its store reopens: the thread ends.
    stop: bool,
    /// An operation's completion was lost (`Broken`): the clients reconnect.
    reconnect: bool,
    /// The thread idles this long before its next operation.
    idle: Option<Duration>,
    /// One of its clients is dropped and made again before its next operation.
    restart: bool,
}

/// The state of a pipelined client thread across its sessions.
struct Pipelined<'w> {
    world: &'w World,
    node: usize,
    process: SimTransport,
    /// Each session slot's name in the history: the thread's, then `.k` and the slot.
    names: Vec<String>,
    /// What each slot runs (the slot is the operation's tag).
    flight: Vec<Option<InFlight>>,
    draws: Draws,
    ops: usize,
    submitted: usize,
    completed: usize,
    /// Whether the next operation's idle and restart draws were made (the session ended for
    /// them; the operation comes in the next).
    drawn: bool,
}

impl Pipelined<'_> {
    /// Submits operations to `session` as it has room, until they are all submitted or
    /// something needs the clients themselves (or ends the thread); then drains it. What to do
    /// between this session and the next.
    fn run(&mut self, session: &mut Session<'_, Tracked<'_>, usize>) -> Between {
        let mut between = Between::default();
        'submit: loop {
            while !session.has_room() {
                let Some(done) = session.wait() else { break };
                self.finish(done, &mut between);
                if between.stop || between.reconnect {
                    break 'submit;
                }
            }
            if self.submitted == self.ops {
                break;
            }
            if self.world.reopen[self.node].load(Ordering::SeqCst) {
                between.stop = true;
                break;
            }
            if !self.drawn {
                self.drawn = true;
                between.idle = self.draws.idle();
                between.restart = self.draws.restart();
                if between.idle.is_some() || between.restart {
                    break;
                }
            }
            self.drawn = false;
            let op = self.draws.op(self.world, self.submitted, self.ops);
            let Some(slot) = self.flight.iter().position(Option::is_none) else {
                sim_scheduler::fail("a session with room has no free slot");
            };
            // A read is judged as one that must not back off only if no write of its thread
            // was in flight beside it: a thread's sleep is not told apart by operation, and a
            // write may back off (waiting for freed value blocks to pass the reuse horizon).
            let beside_write = if is_read(op) {
                self.flight.iter().flatten().any(|f| !is_read(f.op))
            } else {
                for f in self.flight.iter_mut().flatten() {
                    f.beside_write = true;
                }
                false
            };
            let at = self.world.recorder.call(&self.names[slot], op);
            let began = self.world.liveness.begin();
            self.flight[slot] = Some(InFlight {
                op,
                at,
                began,
                beside_write,
            });
            self.submitted += 1;
            if session.submit(slot, self.request(op)).is_err() {
                sim_scheduler::fail("a session with room refused an operation");
            }
        }
        while let Some(done) = session.wait() {
            self.finish(done, &mut between);
        }
        between
    }

    /// `op` as a session's request (through the value blocks in a run with byte values).
    fn request(&self, op: Op) -> Request {
        match (op, self.world.byte_values) {
            (Op::Kv(key, KvOp::Get), false) => Request::Get(key),
            (Op::Kv(key, KvOp::Insert(v)), false) => Request::Insert(key, v),
            (Op::Kv(key, KvOp::Update(v)), false) => Request::Update(key, v),
            (Op::Kv(key, KvOp::Upsert(v)), false) => Request::Upsert(key, v),
            (Op::Scan(start, n), false) => Request::Scan(start, n),
            (Op::Kv(key, KvOp::Get), true) => Request::GetValue(key),
            (Op::Kv(key, KvOp::Insert(v)), true) => Request::InsertValue(key, value_bytes(key, v)),
            (Op::Kv(key, KvOp::Update(v)), true) => Request::UpdateValue(key, value_bytes(key, v)),
            (Op::Kv(key, KvOp::Upsert(v)), true) => Request::PutValue(key, value_bytes(key, v)),
            (Op::Scan(start, n), true) => Request::ScanValues(start, n),
            (Op::Kv(key, KvOp::Delete), _) => Request::Delete(key),
        }
    }

    /// An operation came back: recorded and accounted as [`run_client`] does, and `between`
    /// told if the thread must stop or reconnect.
    fn finish(&mut self, done: Done<usize, IndexError>, between: &mut Between) {
        let Some(f) = self.flight.get_mut(done.tag).and_then(Option::take) else {
            sim_scheduler::fail(&format!("a session gave back tag {} twice", done.tag));
        };
        let result = done.result.map(|reply| returned(f.op, reply));
        self.world.ops.fetch_add(1, Ordering::SeqCst);
        self.completed += 1;
        let read =
            is_read(f.op) && !f.beside_write && !matches!(&result, Err(e) if ended_by_death(e));
        let name = &self.names[done.tag];
        // What the operation held at its end was judged (or excused) as it ended, on its lane
        // ([`Tracked`]).
        account(
            self.world,
            name,
            f.op,
            f.at,
            f.began,
            read,
            &result,
            &mut self.draws,
        );
        if let Err(e) = result {
            if node_gone(&e, &self.process) {
                between.stop = true;
            } else if matches!(e, IndexError::Transport(TransportError::Broken(_))) {
                between.reconnect = true;
            }
        }
    }
}

/// What a session's `reply` to `op` stands for in the history (a value's bytes read back as
/// its number).
fn returned(op: Op, reply: Reply) -> Returned {
    match (op, reply) {
        (_, Reply::Value(v)) => Returned::Kv(KvResult::Value(v)),
        (_, Reply::Done(d)) => Returned::Kv(KvResult::Done(d)),
        (_, Reply::Rows(rows)) => Returned::Scan(rows),
        (Op::Kv(key, _), Reply::Bytes(b)) => {
            Returned::Kv(KvResult::Value(b.map(|b| value_number(key, &b))))
        }
        (_, Reply::ValueRows(rows)) => Returned::Scan(
            rows.into_iter()
                .map(|(k, b)| (k, value_number(k, &b)))
                .collect(),
        ),
        (op, reply) => sim_scheduler::fail(&format!("{op:?} answered {reply:?}")),
    }
}

/// The value blocks a pipeline's clients re-read so far (see [`Client::value_retries`]).
fn value_retries(pipeline: &kv_session::Pipeline<Tracked<'_>>) -> u64 {
    pipeline
        .clients()
        .iter()
        .map(|t| t.client.value_retries())
        .sum()
}

/// A pipeline's client as a lane of the ghost state (`sim_scheduler::ghost::as_lane`, lanes
/// numbered from 1): what each of its operations takes, places and meets as a step is that
/// operation's own, so an operation that ends holding a leaf, block or lock is caught as it
/// ends — as [`run_client`] catches one — however long its siblings stay in flight, and one
/// that lost its connection or its node has its holds excused, not its siblings'.
struct Tracked<'w> {
    client: Client<SimEndpoint>,
    lane: usize,
    world: &'w World,
    /// The thread's name.
    thread: &'w str,
}

impl Tracked<'_> {
    /// Runs `f` on the client as its lane.
    fn as_lane<R>(&mut self, f: impl FnOnce(&mut Client<SimEndpoint>) -> R) -> R {
        let client = &mut self.client;
        sim_scheduler::ghost::as_lane(self.lane, || f(client))
    }
}

impl Lane for Tracked<'_> {
    type Error = IndexError;

    fn run(
        &mut self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Reply, IndexError>> + '_ {
        let (lane, world, thread) = (self.lane, self.world, self.thread);
        let who = format!("{thread}'s {request:?} (lane {lane})");
        let mut inner = Box::pin(Lane::run(&mut self.client, request));
        async move {
            let result = std::future::poll_fn(|cx| {
                sim_scheduler::ghost::as_lane(lane, || inner.as_mut().poll(cx))
            })
            .await;
            let lost = matches!(&result, Err(e) if e.is_connection_lost() || e.is_fenced());
            sim_scheduler::ghost::as_lane(lane, || {
                if let Err(e) = crate::ledger::after_operation(&who, lost) {
                    world.left_in_hand(e);
                }
            });
            result
        }
    }

    fn net_stats(&self) -> rdma_transport::Stats {
        self.client.net_stats()
    }

    fn idle() {
        <Client<SimEndpoint> as Lane>::idle();
    }
}

/// A client thread with `depth` operations in flight: the random operations [`run_client`]
/// draws, through sessions of a pipeline of `depth` clients (each operation on a client of its
/// own, named in the history by its session slot, `name.kS`: operations of one thread in
/// flight together are concurrent clients to the oracles). What needs the clients themselves —
/// reconnecting after a lost completion, a client dropped and made again, the re-read value
/// blocks, and the ledger's check that the thread itself holds nothing (each operation's own
/// holds are checked as it ends: [`Tracked`]) — is done between sessions: the thread stops
/// submitting, drains the session and drops it. It idles between
/// sessions too (a sleep with operations in flight would be their wait). Returns how many
/// operations it ran before its compute node was killed or fenced, or its store reopens.
fn run_pipelined(
    world: &World,
    node: usize,
    store: &Store<SimTransport>,
    name: &str,
    ops: usize,
    seed: u64,
    depth: usize,
) -> usize {
    let mut pipeline = match store.pipeline(depth) {
        Ok(pipeline) => kv_session::Pipeline::new(
            pipeline
                .into_clients()
                .into_iter()
                .enumerate()
                .map(|(k, client)| Tracked {
                    client,
                    lane: k + 1,
                    world,
                    thread: name,
                })
                .collect(),
        ),
        Err(_) => return 0,
    };
    let mut thread = Pipelined {
        world,
        node,
        process: store.transport().clone(),
        names: (0..depth).map(|k| format!("{name}.k{k}")).collect(),
        flight: (0..depth).map(|_| None).collect(),
        draws: Draws::new(seed),
        ops,
        submitted: 0,
        completed: 0,
        drawn: false,
    };
    loop {
        let rereads = value_retries(&pipeline);
        let from = world.recorder.now();
        let between = thread.run(&mut pipeline.session());
        let to = world.recorder.now();
        let reread = value_retries(&pipeline) - rereads;
        if reread != 0 {
            world
                .reused_under_reader
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| {
                    format!(
                        "an operation of {name}'s session (history clocks {from} to {to}) re-read {reread} value blocks"
                    )
                });
        }
        // The thread's own holds, outside its operations' lanes: none.
        if let Err(e) = crate::ledger::after_operation(
            &format!("{name} between its sessions (history clocks {from} to {to})"),
            false,
        ) {
            world.left_in_hand(e);
        }
        if between.stop {
            return thread.completed;
        }
        if between.reconnect {
            // The client whose completion was lost is not told apart: all of them reconnect.
            for lane in pipeline.clients_mut() {
                if lane.as_lane(|client| store.reconnect(client)).is_err() {
                    return thread.completed;
                }
            }
        }
        if thread.submitted == ops {
            return thread.completed;
        }
        if let Some(idle) = between.idle {
            thread::sleep(idle);
        }
        if between.restart {
            let mut lanes = pipeline.into_clients();
            let at = (thread.draws.rng.next_u64() % depth as u64) as usize;
            let gone = lanes.swap_remove(at);
            let lane = gone.lane;
            sim_scheduler::ghost::as_lane(lane, || drop(gone));
            world.count(|f| f.client_restarts += 1);
            match sim_scheduler::ghost::as_lane(lane, || store.client()) {
                Ok(client) => lanes.push(Tracked {
                    client,
                    lane,
                    world,
                    thread: name,
                }),
                Err(_) => return thread.completed,
            }
            pipeline = kv_session::Pipeline::new(lanes);
        }
    }
}

/// Opens `gate` after `d` of virtual time, on a thread of its own that holds the store — for a
/// compute node's fault, or a `worker`'s — from when it first runs: the gate's timer starts
/// there, which may be a while after the thread was spawned.
fn open_after(
    world: &Arc<World>,
    openers: &mut Vec<thread::JoinHandle<()>>,
    gate: sim_transport::Gate,
    d: Duration,
    worker: bool,
) {
    let holding = Arc::clone(world);
    openers.push(thread::spawn(move || {
        if worker {
            holding.liveness.hold_worker(d);
        } else {
            holding.liveness.hold(d);
        }
        thread::sleep(d);
        gate.open();
    }));
}

/// Kills compute node `node` inside a protocol: at the next step of an unlink, a split, a write
/// or a join (whichever it meets first of the one drawn, a few such steps from now), its next
/// batch carries out its first verbs and the process dies before the rest (of a WRITE cut there,
/// the first `packets` packets land). A death inside the batch of an unlink leaves its unlink
/// word set and its chain half changed; one inside a join leaves a member that never registered.
fn die_at_step(
    world: &Arc<World>,
    side: &mut XorShift64,
    node: usize,
    packets: usize,
    openers: &mut Vec<thread::JoinHandle<()>>,
) {
    // In a run that grows then shrinks, an unlink's: those runs are where unlinks are, and the
    // node's one plan is kept for it (see `compute_step`).
    let pick = side.next_u64() % 8;
    let prefix = if world.grow_then_shrink {
        "unlink"
    } else {
        ["unlink", "split", "write", "join"][(pick % 4) as usize]
    };
    let skip = (side.next_u64() % 3) as u32;
    let skip = if world.grow_then_shrink { 0 } else { skip };
    let verbs = side.next_u64() % 12;
    let gate = sim_transport::Gate::new();
    let (dying, armed) = (Arc::clone(world), gate.clone());
    sim_scheduler::pause_at_step_then(
        world.compute[node].1,
        prefix,
        skip,
        Duration::ZERO,
        move || {
            dying.liveness.hold(Duration::ZERO);
            dying.log(format!(
                "compute node {node} met its {prefix} step: it dies after {verbs} verbs of its next batch"
            ));
            // Cloned out of the slot first: the harness's lock must not be held across the
            // simulator's sync points (another thread blocking on it would hang the run).
            let process = dying.compute[node]
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            process.stall_next_batch(verbs, armed);
        },
    );
    let killer = Arc::clone(world);
    openers.push(thread::spawn(move || {
        // A step never met (the run ended first) kills nothing.
        let mut arrived = gate.is_waiting();
        while !arrived && !killer.clients_done.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1));
            arrived = gate.is_waiting();
        }
        if arrived {
            let process = killer.compute[node]
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            process.kill(packets);
        }
        gate.open();
    }));
}

/// Arms a fault plan of `group` at a named step (see `sim_scheduler::pause_at_step_then`) —
/// unless the group's one plan is `reserved` for something rarer (a death inside an unlink, a
/// slot split's window): then the group stops (and `then` runs) at once.
fn step_plan(
    group: Group,
    reserved: bool,
    prefix: &'static str,
    skip: u32,
    pause: Duration,
    then: impl FnOnce() + Send + 'static,
) {
    if reserved {
        then();
        sim_scheduler::pause(group, pause);
    } else {
        sim_scheduler::pause_at_step_then(group, prefix, skip, pause, then);
    }
}

/// [`step_plan`] for compute node `n` (in a run that grows then shrinks its plan is kept for a
/// death inside an unlink).
fn compute_step(
    world: &World,
    n: usize,
    prefix: &'static str,
    skip: u32,
    pause: Duration,
    then: impl FnOnce() + Send + 'static,
) {
    let reserved = world.grow_then_shrink;
    step_plan(world.compute[n].1, reserved, prefix, skip, pause, then);
}

/// [`step_plan`] for memory node `n`'s worker (in a run that watches slot splits its plan is
/// kept for them).
fn worker_step(
    world: &World,
    n: usize,
    prefix: &'static str,
    skip: u32,
    pause: Duration,
    then: impl FnOnce() + Send + 'static,
) {
    step_plan(
        world.memory[n].1,
        world.split_window,
        prefix,
        skip,
        pause,
        then,
    );
}

/// In a run that watches slot splits: every slot split memory node `n`'s worker journals stops
/// it for 1–10 ms at one of the three steps after the journal (taken in turn: its retire, then
/// the one after, then the one after that), the window in which two slots share the split's
/// keys and both must route them; then the watch is armed again for the next split.
fn watch_slot_splits(world: &Arc<World>, n: usize, count: u64) {
    let group = world.memory[n].1;
    let watcher = Arc::clone(world);
    sim_scheduler::pause_at_step_then(
        group,
        "retrain: split journaled",
        0,
        Duration::ZERO,
        move || {
            let after = [1, 2, 0][(count % 3) as usize];
            let pause = Duration::from_micros(1000 + count.wrapping_mul(0x9e37_79b9) % 9000);
            watcher.log(format!(
                "memory node {n}'s worker journaled a slot split: it stops {after} steps on for {pause:?}"
            ));
            let inner = Arc::clone(&watcher);
            sim_scheduler::pause_at_step_then(group, "retrain", after, pause, move || {
                inner.liveness.hold_worker(pause);
                inner.probe.store(true, Ordering::SeqCst);
                watch_slot_splits(&inner, n, count + 1);
            });
        },
    );
}

/// Injects faults at random virtual times until the clients are done.
fn inject_faults(world: &Arc<World>, seed: u64, mix: FaultMix) {
    // Decided from the seed as drawn, so the other runs' streams are what they were.
    let leak_free = seed.is_multiple_of(6);
    world.leak_free.store(leak_free, Ordering::SeqCst);
    let mut rng = XorShift64::new(seed | 1);
    // The choices added since the step-tied deaths, from a generator of their own: a seed's
    // other faults are drawn as before.
    let mut side = XorShift64::new(side_draw(seed, 0xdea7_0f57_e900_0001));
    let mut kills = 0;
    let mut openers = Vec::new();
    if world.split_window {
        for n in 0..world.memory.len() {
            watch_slot_splits(world, n, side.next_u64());
        }
    }
    if world.grow_then_shrink && !leak_free {
        // One compute node dies inside one of its first unlinks, whatever else happens.
        kills += 1;
        let node = (side.next_u64() % world.compute.len() as u64) as usize;
        let packets = (side.next_u64() % 4) as usize;
        die_at_step(world, &mut side, node, packets, &mut openers);
        world.count(|f| f.kills += 1);
    }
    while !world.clients_done.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_micros(200 + rng.next_u64() % 3000));
        if world.clients_done.load(Ordering::SeqCst) {
            break;
        }
        let node = (rng.next_u64() % world.compute.len() as u64) as usize;
        let memory_node = (rng.next_u64() % world.memory.len() as u64) as usize;
        let (process, group) = &world.compute[node];
        let process = process.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let kind = mix.draw(&mut rng, leak_free);
        // A swarm run whose few kinds are mostly worker pauses would stack them, each from now
        // (a run that stops the worker in slot splits pauses it at once instead of at a step),
        // and keep the worker stopped nearly throughout: writers waiting for the value blocks
        // only it reclaims never finish (seed 403 with byte values ran to the step limit). Its
        // next pause waits until the last has ended.
        if mix.is_subset()
            && pauses_worker(kind)
            && sim_scheduler::is_paused(world.memory[memory_node].1)
        {
            continue;
        }
        world.log(format!(
            "{} (compute node {node}, memory node {memory_node})",
            FAULT_NAMES[kind as usize]
        ));
        match kind {
            0 | 1 if kills < 3 => {
                kills += 1;
                let packets = (rng.next_u64() % 4) as usize;
                if side.next_u64().is_multiple_of(2) {
                    die_at_step(world, &mut side, node, packets, &mut openers);
                } else {
                    process.kill(packets);
                    world.liveness.hold(Duration::ZERO);
                }
                world.count(|f| f.kills += 1);
            }
            2 | 3 => {
                // Past its lease (or not quite): wherever its threads are, or once one of them
                // has taken a leaf lock or claimed a split's SLT slot.
                let nanos = LEASE.as_nanos() as u64;
                let pause = Duration::from_nanos(nanos / 2 + rng.next_u64() % (nanos * 3));
                // Well inside the lease in a leak-free run.
                let pause = if leak_free {
                    pause.min(LEASE / 4)
                } else {
                    pause
                };
                if rng.next_u64().is_multiple_of(3) {
                    let prefix = if rng.next_u64().is_multiple_of(2) {
                        "split"
                    } else {
                        ""
                    };
                    let held = Arc::clone(world);
                    compute_step(
                        world,
                        node,
                        prefix,
                        (rng.next_u64() % 4) as u32,
                        pause,
                        move || held.liveness.hold(pause),
                    );
                } else {
                    sim_scheduler::pause(*group, pause);
                    world.liveness.hold(pause);
                }
                world.count(|f| f.pauses += 1);
            }
            4..=6 => {
                let (first, next) = (rng.next_u64(), rng.next_u64());
                if side.next_u64().is_multiple_of(2) {
                    // Inside the batch that ends one of this node's splits, writes or unlinks,
                    // which it then repeats (whole or in part): once the node meets that step.
                    let prefix = ["split", "write", "unlink"][(side.next_u64() % 3) as usize];
                    let index = 2 + (next % 10) as u32;
                    let (target, logged) = (process.clone(), Arc::clone(world));
                    compute_step(world, node, prefix, 0, Duration::ZERO, move || {
                        logged.liveness.hold(Duration::ZERO);
                        logged.log(format!(
                            "compute node {node} met its {prefix} step: verb {index} of its next long batch fails"
                        ));
                        target.fail_inside_next_batch_here(index);
                    });
                } else if first.is_multiple_of(2) {
                    world.transport.fail_next_verbs(1 + next % 3);
                } else {
                    // Inside a long batch: most often one that ends a write, and is repeated.
                    world
                        .transport
                        .fail_inside_next_batch(2 + (next % 10) as u32);
                }
                world.liveness.hold(Duration::ZERO);
                world.count(|f| f.verb_failures += 1);
            }
            7 | 8 => {
                process.break_next_batch();
                world.liveness.hold(Duration::ZERO);
                world.count(|f| f.lost_completions += 1);
            }
            9 => {
                let packets = (rng.next_u64() % 4) as usize;
                if side.next_u64().is_multiple_of(2) {
                    // Between two steps of one of its protocols: a recovery half done (its
                    // boxes settled, its locks not yet released, say), a retraining, a box
                    // refill or an orphan sweep; the next worker finds what it left.
                    let (prefix, steps) = [
                        ("recover", 7),
                        ("recover", 7),
                        ("retrain", 9),
                        ("boxes", 2),
                        ("orphans", 2),
                    ][(side.next_u64() % 5) as usize];
                    let skip = (side.next_u64() % steps) as u32;
                    let dying = Arc::clone(world);
                    worker_step(
                        world,
                        memory_node,
                        prefix,
                        skip,
                        Duration::ZERO,
                        move || {
                            dying.liveness.hold_worker(Duration::ZERO);
                            dying.log(format!(
                                "memory node {memory_node}'s worker met its step: killed there"
                            ));
                            dying.worker_process(memory_node).kill(packets);
                        },
                    );
                } else {
                    world.worker_process(memory_node).kill(packets);
                    world.liveness.hold_worker(Duration::ZERO);
                }
                world.count(|f| f.worker_restarts += 1);
            }
            10 => {
                let pause = Duration::from_micros(rng.next_u64() % 8000);
                if rng.next_u64().is_multiple_of(2) {
                    world.liveness.hold_worker(pause);
                    sim_scheduler::pause(world.memory[memory_node].1, pause);
                } else {
                    // Stopped between two batches, a few from now: most likely inside a
                    // retraining, a recovery or a box refill, between two of its steps.
                    let gate = sim_transport::Gate::new();
                    world
                        .worker_process(memory_node)
                        .pause_after_batches(rng.next_u64() % 48, gate.clone());
                    open_after(world, &mut openers, gate, pause, true);
                }
                world.count(|f| f.worker_pauses += 1);
            }
            12 | 13 => {
                // Stopped at a named step of one of its protocols, a few such steps from now:
                // a retraining between two of its verbs (stale views, a retired record and a
                // redirected slot around it), a recovery, a box refill or an orphan sweep.
                let (prefix, steps) = [
                    ("retrain", 9),
                    ("retrain", 9),
                    ("retrain", 9),
                    ("recover", 6),
                    ("boxes", 2),
                    ("orphans", 2),
                ][(rng.next_u64() % 6) as usize];
                // Long enough for the clients to run a few operations each through the window.
                let skip = (rng.next_u64() % steps) as u32;
                let pause = Duration::from_micros(rng.next_u64() % 20_000);
                let held = Arc::clone(world);
                let group = world.memory[memory_node].1;
                if side.next_u64().is_multiple_of(3) && !world.split_window {
                    // Inside a slot split, the rarest retraining (a slot grown past twice its
                    // size): once it is journaled, at one of the three steps after it — the
                    // window in which two slots share the keys and both must route them.
                    let after = (side.next_u64() % 3) as u32;
                    sim_scheduler::pause_at_step_then(
                        group,
                        "retrain: split journaled",
                        0,
                        Duration::ZERO,
                        move || {
                            held.log(format!(
                                "memory node {memory_node}'s worker journaled a slot split: it stops {after} steps on"
                            ));
                            let inner = Arc::clone(&held);
                            sim_scheduler::pause_at_step_then(
                                group,
                                "retrain",
                                after,
                                pause,
                                move || inner.liveness.hold_worker(pause),
                            );
                        },
                    );
                } else {
                    worker_step(world, memory_node, prefix, skip, pause, move || {
                        held.liveness.hold_worker(pause)
                    });
                }
                world.count(|f| f.worker_pauses += 1);
            }
            14 => {
                // Its NIC carries out the first verbs of its next batch and stalls the rest for
                // up to a lease: others see a prefix of the batch, which its fences must make
                // safe (a split's shrink before its header bump, say).
                let gate = sim_transport::Gate::new();
                process.stall_next_batch(rng.next_u64() % 8, gate.clone());
                let stall = Duration::from_micros(rng.next_u64() % LEASE.as_micros() as u64);
                open_after(world, &mut openers, gate, stall, false);
                world.count(|f| f.stalled_batches += 1);
            }
            16 => {
                // A write of this node, once it holds a leaf lock or its split has claimed an
                // SLT slot, has its next batch — the one that links, unlocks or publishes — land
                // up to three leases late, or stall partway for up to two, while the node stops
                // (or not) past its lease: a fence, a recovery and orphan sweeps meet it there.
                let prefix = if rng.next_u64().is_multiple_of(2) {
                    "split"
                } else {
                    "write"
                };
                let late = rng.next_u64().is_multiple_of(2);
                let verbs = rng.next_u64() % 6;
                let lease = LEASE.as_micros() as u64;
                let hold = Duration::from_micros(rng.next_u64() % (3 * lease));
                let pause = Duration::from_micros(rng.next_u64() % (2 * lease));
                let gate = sim_transport::Gate::new();
                let (target, held, logged) = (process.clone(), gate.clone(), Arc::clone(world));
                compute_step(
                    world,
                    node,
                    prefix,
                    (rng.next_u64() % 3) as u32,
                    pause,
                    move || {
                        logged.liveness.hold(pause);
                        logged.log(format!(
                            "the write met its step: its next batch {} for {hold:?} after it arrives, the node paused {pause:?}",
                            if late { "lands late".to_string() } else { format!("stalls after {verbs} verbs") }
                        ));
                        if late {
                            target.land_next_batch_late(held);
                        } else {
                            target.stall_next_batch(verbs, held);
                        }
                    },
                );
                let holding = Arc::clone(world);
                openers.push(thread::spawn(move || {
                    // Held from the moment the batch reaches the gate (or given up with the
                    // run: a step never met holds nothing) — and the store with it.
                    if let Some(ago) = gate.wait_for_arrival_since(Duration::from_millis(100)) {
                        // From its arrival, which this thread sees up to a poll later.
                        holding.liveness.hold_since(ago, ago + hold);
                    }
                    thread::sleep(hold);
                    gate.open();
                }));
                world.count(|f| {
                    if late {
                        f.late_landings += 1;
                    } else {
                        f.stalled_batches += 1;
                    }
                });
            }
            17 => {
                // The worker stops inside a retraining, and a compute node's store is closed and
                // opened again right there: its new views come from the slot table mid-way
                // (a new record swapped in, the old one not yet retired, a split published but
                // not redirected), while the other nodes' views predate the retraining.
                let reopened = Arc::clone(world);
                let skip = (rng.next_u64() % 9) as u32;
                let pause = Duration::from_micros(rng.next_u64() % 20_000);
                worker_step(world, memory_node, "retrain", skip, pause, move || {
                    reopened.liveness.hold_worker(pause);
                    reopened.log(format!(
                        "the worker met its step: compute node {node} reopens"
                    ));
                    reopened.reopen[node].store(true, Ordering::SeqCst);
                });
                world.count(|f| {
                    f.worker_pauses += 1;
                    f.store_reopens += 1;
                });
            }
            15 => {
                // Closed and opened again: every view it cached is dropped, and the next ones
                // come from the slot table as it is now (a retraining half done, say).
                world.reopen[node].store(true, Ordering::SeqCst);
                world.liveness.hold(Duration::ZERO);
                world.count(|f| f.store_reopens += 1);
            }
            _ if rng.next_u64().is_multiple_of(2) => {
                // The verbs land up to two leases later: a fence in between finds them in
                // flight, a recovery that does not wait for them is overwritten.
                let gate = sim_transport::Gate::new();
                process.land_next_batch_late(gate.clone());
                let late = Duration::from_micros(rng.next_u64() % (2 * LEASE.as_micros() as u64));
                open_after(world, &mut openers, gate, late, false);
                world.count(|f| f.late_landings += 1);
            }
            _ => {
                let worker = world.worker_process(memory_node);
                worker.break_next_batch();
                world.liveness.hold_worker(Duration::ZERO);
                world.count(|f| f.worker_lost_completions += 1);
            }
        }
    }
    for opener in openers {
        let _ = opener.join();
    }
}
