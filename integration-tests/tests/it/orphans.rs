//! The memory node's orphan sweep (ARCHITECTURE §7, "Orphaned leaves"): a leaf allocated and
//! held by nobody is reclaimed once an epoch every member announced separates two scans that
//! found it nowhere; a leaf a running split holds in its hands is found nowhere too, and is not
//! taken, because that split's compute node cannot announce the epoch until the split is done.

use std::sync::Arc;
use std::time::Duration;

use index_core::{Store, StoreConfig};
use leaf_store::Layout;
use rdma_transport::{Endpoint, Transport};
use sim_transport::{Gate, SimConfig, SimTransport};

const LEASE: Duration = Duration::from_secs(5);

type Worker = retrainer::Retrainer<sim_transport::SimEndpoint>;

/// Sixteen keys in a tiny layout, the memory node's worker watching leases, and a store that
/// joined and renews every millisecond: (transport, layout, worker, store).
fn one_member() -> (SimTransport, Layout, Worker, Store<SimTransport>) {
    let keys: Vec<u64> = (0..16).map(|k| k * 10).collect();
    let (transport, layout) =
        integration_tests::load(&keys, 64, &integration_tests::tiny(), SimConfig::default());
    let mut worker = integration_tests::lease_watcher(&transport, LEASE);
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            lease_renewal: Duration::from_millis(1),
            ..StoreConfig::default()
        },
    )
    .expect("open");
    worker.check_members().expect("check");
    (transport, layout, worker, store)
}

/// Drives the memory node's lease checks (and with `refill`, its box refills, which fence
/// revoked connections) and the sweep whose first scan waits until it has finished (at most
/// about two seconds); the leaves it freed.
fn finish_sweep(worker: &mut Worker, what: &str, refill: bool) -> u64 {
    let mut freed = 0;
    for _ in 0..2_000 {
        if !worker.orphan_scan_pending() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        worker.check_members().expect("check");
        if refill {
            worker.fill_boxes().expect("fill");
        }
        freed += worker.sweep_orphans().expect("sweep");
    }
    assert!(!worker.orphan_scan_pending(), "{what}: the sweep finished");
    freed
}

#[test]
fn a_leaf_nobody_holds_is_reclaimed_and_one_in_a_running_split_s_hands_is_not() {
    let (transport, layout, mut worker, store) = one_member();
    let store = Arc::new(store);

    // Allocated and forgotten: a fetch-and-add whose completion was lost, say.
    let mut ep = transport.endpoint().expect("endpoint");
    let orphan = leaf_store::alloc_leaf(&mut ep, &layout).expect("alloc");

    // A splitting insert (its leaf is full, its leaf box empty: it allocates by fetch-and-add)
    // stopped after its lock and allocation batches, the new leaf in its hands.
    let mut client = store.client().expect("client");
    let gate = Gate::new();
    client.endpoint_mut().pause_after(2, gate.clone());
    let writer = std::thread::spawn(move || client.insert(5, 5));
    assert!(gate.wait_for_arrival(Duration::from_secs(5)), "paused");
    let allocated = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
    let in_hand = allocated - 1;
    assert_ne!(in_hand, orphan, "the split allocated a leaf of its own");

    worker.sweep_orphans().expect("first scan");
    assert!(worker.orphan_scan_pending());
    // What a sweep that did not wait for the epoch would free: both.
    assert!(worker.orphan_candidates().contains(&orphan));
    assert!(
        worker.orphan_candidates().contains(&in_hand),
        "the split's leaf is named nowhere yet: only the epoch protects it"
    );

    // The epoch advances, but the paused split's compute node cannot announce it.
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(2));
        worker.check_members().expect("check");
        assert_eq!(worker.sweep_orphans().expect("sweep"), 0);
    }
    assert!(
        worker.orphan_scan_pending(),
        "the epoch is not over while the split runs"
    );
    assert!(!worker.free_leaves().contains(&in_hand));

    gate.open();
    assert_eq!(writer.join().expect("writer"), Ok(true));
    let freed = finish_sweep(&mut worker, "the orphan", false);
    assert_eq!(freed, 1, "the orphan alone");
    assert!(worker.free_leaves().contains(&orphan));
    assert!(
        !worker.free_leaves().contains(&in_hand),
        "linked by the split"
    );
    assert_eq!(worker.stats().orphans_reclaimed, 1);
    integration_tests::recovery::assert_no_leaf_leaked_but(
        &worker,
        &transport,
        "after the sweep",
        &[],
    );
    drop(store);
}

/// A split whose batch fails after its allocation keeps the leaf as a spare; the spare is parked
/// in the client's leaf box before the operation ends. Kept in the client's memory instead, the
/// orphan sweep would find it named nowhere across an epoch, free it, and the client's next split
/// would link a leaf that is also on the free list.
#[test]
fn a_spare_leaf_never_outlives_its_operation() {
    let mut found_a_spare = false;
    for k in 0..12 {
        let what = format!("failed after verb {k}");
        let (transport, layout, mut worker, store) = one_member();
        let mut ep = transport.endpoint().expect("endpoint");
        let mut client = store.client().expect("client");
        let before = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
        client.endpoint_mut().fail_after(k);
        let failed = client.insert(5, 5);
        let allocated = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
        if failed.is_ok() {
            break;
        }
        if allocated == before {
            continue;
        }
        // The split allocated, then its batch failed: a spare.
        let spare = allocated - 1;
        found_a_spare = true;
        let table = leaf_store::members::MemberTable::new(&layout);
        let tag = store.member_tags()[0];
        let parked = table
            .read_boxes(&mut ep, tag)
            .expect("boxes")
            .contains(&leaf_store::members::leaf_word(spare));
        // A whole sweep: the parked spare is held, so nothing is reclaimed.
        worker.sweep_orphans().expect("first scan");
        finish_sweep(&mut worker, &what, false);
        assert_eq!(client.insert(5, 5), Ok(true), "{what}: the retry");
        // Kept in the client's memory, the spare was reclaimed by the sweep and then linked by
        // the retry: on the free list and in a chain at once.
        integration_tests::recovery::assert_no_leaf_leaked_but(&worker, &transport, &what, &[]);
        assert!(parked, "{what}: the spare was parked in the client's box");
    }
    assert!(found_a_spare, "some crash point leaves a spare");
}

/// A split whose structural batch loses its completion while the NIC still executes it: the
/// operation fails (the lock may remain), but the batch — which links the leaf the split
/// allocated — lands later. Until the memory node has fenced the connection, the compute node
/// announces no later epoch, so the sweep cannot free that leaf under the late link. (A review
/// found the leaf freed, handed to another client and linked twice when the operation's end was
/// taken for its batches' end.)
#[test]
fn a_split_whose_batch_lands_late_keeps_its_leaf_until_fenced() {
    let (transport, layout, mut worker, store) = one_member();
    let mut ep = transport.endpoint().expect("endpoint");
    let mut client = store.client().expect("client");
    let before = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
    // The lock batch, the allocation batch, then the structural batch lands late.
    let gate = Gate::new();
    client.endpoint_mut().land_late(2, gate.clone());
    let failed = client.insert(5, 5);
    assert!(failed.is_err(), "the split's batch lost its completion");
    let allocated = ep.read_word(layout.alloc_num_addr()).expect("alloc_num");
    assert_eq!(
        allocated,
        before + 1,
        "the split allocated by fetch-and-add"
    );
    let in_flight = allocated - 1;

    worker.sweep_orphans().expect("first scan");
    assert!(
        worker.orphan_candidates().contains(&in_flight),
        "named nowhere: only the epoch protects it"
    );
    // Renewals, epoch advances, refills (which fence the revoked connection: in flight): the
    // compute node does not announce past the failed operation's epoch.
    for _ in 0..60 {
        std::thread::sleep(Duration::from_millis(2));
        worker.check_members().expect("check");
        worker.fill_boxes().expect("fill");
        assert_eq!(
            worker.sweep_orphans().expect("sweep"),
            0,
            "a leaf a late batch may still link was freed"
        );
    }
    assert!(worker.orphan_scan_pending());

    gate.open();
    // Fenced once the batch has landed; the lock recovered, the leaf linked.
    finish_sweep(&mut worker, "once fenced", true);
    assert!(
        !worker.free_leaves().contains(&in_flight),
        "linked by the late batch"
    );
    store.reconnect(&mut client).expect("reconnect");
    assert_eq!(client.get(5), Ok(Some(5)), "the late split landed whole");
    assert_eq!(client.insert(15, 15), Ok(true));
    integration_tests::recovery::assert_no_leaf_leaked_but(
        &worker,
        &transport,
        "after the late batch",
        &[],
    );
}
