//! What the tests of compute nodes that die (or break) and of their recovery share: a worker
//! that watches leases, a scenario's writer with its leaf box filled, recovery driven to its
//! end, and the checks made before and after it — the target lock, the pool's contents read by
//! another store, and leaf conservation.
//!
//! # Panics
//! Every function here is a test fixture: it panics when the fabric fails or a check does not
//! hold.
#![allow(clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use index_core::Store;
use leaf_store::{LeafTableEntry, read_record, read_slot_table};
use rdma_transport::Transport;
use retrainer::Retrainer;
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

use crate::write_scenarios::{
    Prepared, TARGET_LEAF, TARGET_SLOT, apply, other_client, prepare_with,
};

/// The memory node's lease time in these tests: long enough that a live compute node's renewer,
/// starved by a busy 2-core machine, is not declared dead (its renewals come every 5 ms).
pub const LEASE: Duration = Duration::from_millis(100);

/// The lease where no compute node is alive to be starved.
pub const SHORT_LEASE: Duration = Duration::from_millis(10);

/// A key of the target leaf no scenario touches: what the waiter inserts.
pub const WAITER_KEY: u64 = 610;

/// A worker that watches leases (driven by the test, not a thread), having looked at them once.
pub fn watcher(transport: &SimTransport) -> Retrainer<SimEndpoint> {
    let mut worker = crate::lease_watcher(transport, LEASE);
    worker.check_members().expect("first look at the leases");
    worker
}

/// The scenario's prepared writer, with its leaf box filled and due to be read.
pub fn prepare_with_a_filled_box(
    scenario: crate::write_scenarios::Scenario,
    sim: SimConfig,
) -> (crate::write_scenarios::Prepared, Retrainer<SimEndpoint>) {
    let p = prepare_with(scenario, sim);
    let mut worker = watcher(&p.transport);
    worker.fill_boxes().expect("fill");
    // The writer read its box empty while preparing; it reads it again after a millisecond.
    std::thread::sleep(Duration::from_millis(2));
    (p, worker)
}

/// Verbs of the scenario's write when its writer's leaf box is filled.
pub fn verbs_with_a_filled_box(scenario: crate::write_scenarios::Scenario, sim: SimConfig) -> u64 {
    let (mut p, _worker) = prepare_with_a_filled_box(scenario, sim);
    let before = p.client.net_stats().verbs();
    assert!(apply(&mut p.client, scenario.op).expect("op"));
    p.client.net_stats().verbs() - before
}

/// Checks leases until a member has been recovered (at most five seconds).
pub fn recover_dead_member(worker: &mut Retrainer<SimEndpoint>) -> Duration {
    let started = Instant::now();
    loop {
        if worker.check_members().expect("check") > 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the dead member was never recovered: {:?} {:?}",
            worker.member_stats(),
            worker.member_problem()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The target leaf's LT entry as it is now.
pub fn target_entry(transport: &SimTransport) -> LeafTableEntry {
    let mut ep = transport.endpoint().expect("endpoint");
    let node = transport.memory_nodes()[0];
    let layout = leaf_store::Layout::attach(&mut ep, node).expect("layout");
    let table = read_slot_table(&mut ep, &layout).expect("slot table");
    let (addr, _) = table[TARGET_SLOT as usize];
    read_record(&mut ep, &layout, TARGET_SLOT, addr)
        .expect("record")
        .lt[TARGET_LEAF as usize]
}

/// Everything the pool holds, scanned by a client of a new store (its own caches).
pub fn contents(transport: &SimTransport) -> BTreeMap<u64, u64> {
    let mut reader = other_client(transport, Duration::from_secs(10));
    reader
        .scan(0, usize::MAX)
        .expect("scan")
        .into_iter()
        .collect()
}

/// Every slot's current record.
pub fn current_records(
    ep: &mut SimEndpoint,
    layout: &leaf_store::Layout,
) -> Vec<leaf_store::ModelRecord> {
    read_slot_table(ep, layout)
        .expect("slot table")
        .into_iter()
        .enumerate()
        .map(|(slot, (addr, _))| read_record(ep, layout, slot as u64, addr).expect("record"))
        .collect()
}

/// Every leaf `record`'s chains link.
pub fn chained_leaves(record: &leaf_store::ModelRecord) -> Vec<u64> {
    (0..record.lt.len())
        .flat_map(|leaf| record.chain_entries(leaf).expect("chain"))
        .map(|e| e.leaf_num())
        .collect()
}

/// Whether member `tag`'s client 1 has its unlink word set, and whether a leaf its box names is
/// linked by a chain.
pub fn traces_of(transport: &SimTransport, tag: u8) -> (bool, bool) {
    use rdma_transport::Endpoint;
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
    let table = leaf_store::members::MemberTable::new(&layout);
    let unlinking = ep.read_word(table.unlink_addr(tag, 1)).expect("read") != 0;
    let linked: std::collections::HashSet<u64> = current_records(&mut ep, &layout)
        .iter()
        .flat_map(chained_leaves)
        .collect();
    let boxed_and_linked = table
        .read_boxes(&mut ep, tag)
        .expect("boxes")
        .into_iter()
        .filter_map(leaf_store::members::word_leaf)
        .any(|leaf| linked.contains(&leaf));
    (unlinking, boxed_and_linked)
}

/// The leaf member `tag`'s client 1 was unlinking, if its unlink took it out of its chain but
/// did not yet mark its SLT slot freed: linked nowhere, named by no freed slot.
pub fn half_unlinked(transport: &SimTransport, tag: u8) -> Option<u64> {
    use rdma_transport::Endpoint;
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
    let table = leaf_store::members::MemberTable::new(&layout);
    let word = ep.read_word(table.unlink_addr(tag, 1)).expect("read");
    let leaf = leaf_store::members::word_leaf(word)?;
    let records = current_records(&mut ep, &layout);
    let linked = records.iter().flat_map(chained_leaves).any(|l| l == leaf);
    let marked = records
        .iter()
        .flat_map(|r| r.slt.iter())
        .any(|e| e.freed_leaf() == Some(leaf));
    (!linked && !marked).then_some(leaf)
}

/// Whether a freed SLT slot of a current record names `leaf`.
pub fn named_by_a_freed_slot(transport: &SimTransport, leaf: u64) -> bool {
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
    current_records(&mut ep, &layout)
        .iter()
        .flat_map(|r| r.slt.iter())
        .any(|e| e.freed_leaf() == Some(leaf))
}

/// The memory node `worker` serves.
///
/// # Panics
/// If `transport` does not reach it.
pub fn node_of(
    worker: &Retrainer<SimEndpoint>,
    transport: &SimTransport,
) -> rdma_transport::MemoryNodeInfo {
    *transport
        .memory_nodes()
        .iter()
        .find(|n| n.id == worker.layout().node())
        .expect("the worker's memory node")
}

/// Retrains what recovery queued (on the ring or in the worker), then checks `verify` (of the
/// worker's memory node) and that no leaf leaked.
pub fn retrain_and_verify(
    worker: &mut Retrainer<SimEndpoint>,
    transport: &SimTransport,
    what: &str,
) {
    retrain_and_verify_but(worker, transport, what, &[]);
}

/// [`retrain_and_verify`], where the leaves of `lost` may be held by nobody (see
/// [`assert_no_leaf_leaked_but`]).
pub fn retrain_and_verify_but(
    worker: &mut Retrainer<SimEndpoint>,
    transport: &SimTransport,
    what: &str,
    lost: &[u64],
) {
    worker.poll().expect("poll");
    while worker.retrain_next().expect("retrain").is_some() {}
    let mut ep = transport.endpoint().expect("endpoint");
    let problems = leaf_store::verify(&mut ep, node_of(worker, transport))
        .expect("verify")
        .problems;
    assert_eq!(problems, [], "{what}");
    assert_no_leaf_leaked_but(worker, transport, what, lost);
    assert_no_stale_image(worker, transport, what);
}

/// With no lock held, no leaf outside the chains — in a leaf box, on the free list — validates as
/// a leaf a chain links: every redo image was invalidated (by its writer's batch, or by the
/// recovery that used it), so none can be taken later for the image of another write of that
/// leaf (`leaf_store::redo`).
pub fn assert_no_stale_image(
    worker: &Retrainer<SimEndpoint>,
    transport: &SimTransport,
    what: &str,
) {
    use rdma_transport::Endpoint;
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, node_of(worker, transport)).expect("layout");
    let linked: std::collections::HashSet<u64> = current_records(&mut ep, &layout)
        .iter()
        .flat_map(chained_leaves)
        .collect();
    let table = leaf_store::members::MemberTable::new(&layout);
    let mut outside: Vec<u64> = worker.free_leaves().to_vec();
    for tag in 1..=leaf_store::members::MEMBER_TAGS {
        outside.extend(
            table
                .read_boxes(&mut ep, tag)
                .expect("boxes")
                .into_iter()
                .filter_map(leaf_store::members::word_leaf),
        );
    }
    let mut bytes = vec![0u8; layout.leaf_bytes() as usize];
    for leaf in outside.into_iter().filter(|l| !linked.contains(l)) {
        ep.read(layout.leaf_addr(leaf), &mut bytes).expect("read");
        let stale: Vec<u64> = linked
            .iter()
            .copied()
            .filter(|&n| leaf_store::Leaf::decode(n, &bytes).is_ok())
            .collect();
        assert_eq!(
            stale,
            Vec::<u64>::new(),
            "{what}: leaf {leaf}, outside the chains, holds a valid image of these linked leaves"
        );
    }
}

/// Every allocated leaf is exactly one of: linked by a chain of a current record, named by a
/// freed SLT slot (free at that slot's next retraining), in a leaf box, on the worker's free list.
pub fn assert_no_leaf_leaked(
    worker: &Retrainer<SimEndpoint>,
    transport: &SimTransport,
    what: &str,
) {
    assert_no_leaf_leaked_but(worker, transport, what, &[]);
}

/// [`assert_no_leaf_leaked`], where the leaves of `lost` may be held by nobody: those on the
/// free lists of workers that were killed (a memory node that restarts leaks its free list).
pub fn assert_no_leaf_leaked_but(
    worker: &Retrainer<SimEndpoint>,
    transport: &SimTransport,
    what: &str,
    lost: &[u64],
) {
    use rdma_transport::Endpoint;
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, node_of(worker, transport)).expect("layout");
    let allocated = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
    let mut owners: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for record in current_records(&mut ep, &layout) {
        for leaf in chained_leaves(&record) {
            owners.entry(leaf).or_default().push("linked");
        }
        for entry in &record.slt {
            if let Some(leaf) = entry.freed_leaf() {
                owners.entry(leaf).or_default().push("freed slot");
            }
        }
    }
    let table = leaf_store::members::MemberTable::new(&layout);
    for tag in 1..=leaf_store::members::MEMBER_TAGS {
        for word in table.read_boxes(&mut ep, tag).expect("boxes") {
            if let Some(leaf) = leaf_store::members::word_leaf(word) {
                owners.entry(leaf).or_default().push("box");
            }
        }
    }
    for &leaf in worker.free_leaves() {
        owners.entry(leaf).or_default().push("free list");
    }
    let leaked: Vec<u64> = (0..allocated)
        .filter(|l| !owners.contains_key(l) && !lost.contains(l))
        .collect();
    assert_eq!(
        leaked,
        Vec::<u64>::new(),
        "{what}: leaves nobody holds; allocated {allocated}, held {owners:?}, stats {:?}",
        worker.member_stats()
    );
    let twice: Vec<(&u64, &Vec<&str>)> = owners.iter().filter(|(_, o)| o.len() > 1).collect();
    assert!(twice.is_empty(), "{what}: leaves held twice: {twice:?}");
}

/// Member `tag`'s lease word now.
pub fn lease_of(transport: &SimTransport, tag: u8) -> leaf_store::members::Lease {
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = leaf_store::Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
    leaf_store::members::MemberTable::new(&layout)
        .read_leases(&mut ep)
        .expect("leases")[usize::from(tag)]
}

/// Drives the memory node (box fills, which settle revoke requests; lease checks) until `store`
/// has recovered every lock it may have left, at most five seconds.
pub fn until_recovered(
    worker: &mut Retrainer<SimEndpoint>,
    store: &Store<SimTransport>,
    transport: &SimTransport,
    what: &str,
) {
    let started = Instant::now();
    while target_entry(transport).is_locked() || store.unrecovered_locks() > 0 {
        worker.fill_boxes().expect("fill");
        worker.check_members().expect("check");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: the lock an operation may have left was never recovered: {:?}",
            worker.member_stats()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A writer on a new store (its own caches) inserting [`WAITER_KEY`] into the target leaf, on a
/// thread of its own, waiting at most `wait` for the lock.
pub fn spawn_waiter(
    p: &Prepared,
    wait: Duration,
) -> std::thread::JoinHandle<Result<bool, index_core::IndexError>> {
    let transport = p.transport.clone();
    std::thread::spawn(move || other_client(&transport, wait).insert(WAITER_KEY, WAITER_KEY))
}

/// The pool, read by a new store, must hold the contents before or after the scenario's write,
/// with the waiter's key; returns whether it is after (and the write changed something).
pub fn assert_before_or_after(p: &Prepared, what: &str) -> bool {
    let mut before = p.before.clone();
    let mut after = p.after.clone();
    before.insert(WAITER_KEY, WAITER_KEY);
    after.insert(WAITER_KEY, WAITER_KEY);
    let now = contents(&p.transport);
    assert!(
        now == before || now == after,
        "{what}: neither before nor after the write:\n now {now:?}\n before {before:?}\n after {after:?}"
    );
    now == after && before != after
}

/// Runs the memory node's orphan sweep to its end (lease checks between its scans, at most about
/// two seconds): the leaves it freed — those nobody holds, such as a leaf a compute node
/// allocated in its lock batch for a split it foresaw and then died, or was paused, holding, or
/// a spare it had nowhere to park (`Store::leaves_forgotten`).
pub fn reclaim_orphans(worker: &mut Retrainer<SimEndpoint>, what: &str) -> u64 {
    let mut freed = worker.sweep_orphans().expect("first scan");
    for _ in 0..2_000 {
        if !worker.orphan_scan_pending() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        worker.check_members().expect("check");
        freed += worker.sweep_orphans().expect("sweep");
    }
    assert!(
        !worker.orphan_scan_pending(),
        "{what}: the orphan sweep finished"
    );
    freed
}
