//! Crashes around the retraining queue: a memory-node worker that dies at any verb of a
//! retraining, and a compute node that dies between claiming a ring position and writing it.
//! Neither may leave a slot frozen, a replaced record in use, or a slot that is never retrained.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::{Client, IndexError, Store, StoreConfig};
use integration_tests::tiny;
use leaf_store::queue::{enqueue, is_pending};
use leaf_store::{BulkLoadConfig, Layout, ModelHeader, RingLayout, read_slot_table, verify};
use rdma_transport::{Endpoint, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimEndpoint, SimTransport};

use crate::common::no_sweep;

struct Pool {
    transport: SimTransport,
    layout: Layout,
    /// Every key the store holds.
    keys: Vec<u64>,
    /// A reader whose cache holds every slot's record as it was before any retraining.
    stale: Client<SimEndpoint>,
}

/// 32 keys 0, 1000, …, 31000 bulk-loaded (four slots); keys 1..=12 inserted (slot 0 gets synonym
/// leaves); slot 0 queued for retraining; a reader's cache warmed.
fn pool() -> Pool {
    pool_with(&tiny())
}

fn pool_with(load: &BulkLoadConfig) -> Pool {
    let loaded: Vec<u64> = (0..32).map(|i| i * 1000).collect();
    let (transport, layout) =
        integration_tests::load(&loaded, 256, load, sim_transport::SimConfig::default());
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut writer = store.client().expect("client");
    let mut keys = loaded;
    for k in 1..=12 {
        assert!(writer.insert(k, k).expect("insert"), "insert {k}");
        keys.push(k);
    }
    let mut ep = transport.endpoint().expect("endpoint");
    assert!(enqueue(&mut ep, &layout, 0).is_ok());
    let stale_store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut stale = stale_store.client().expect("client");
    for &k in &keys {
        assert_eq!(stale.get(k).expect("get"), Some(k));
    }
    Pool {
        transport,
        layout,
        keys,
        stale,
    }
}

fn header_of_slot(ep: &mut impl Endpoint, layout: &Layout, slot: usize) -> ModelHeader {
    let record = read_slot_table(ep, layout).expect("slot table")[slot].0;
    ModelHeader::from_raw(ep.read_word(record).expect("read"))
}

/// Verbs one uninterrupted poll and retraining of slot 0 take.
fn verbs_of_one_retraining() -> u64 {
    let p = pool();
    let mut worker = Retrainer::new(
        p.transport.endpoint().expect("endpoint"),
        p.transport.memory_nodes()[0],
        no_sweep(),
    )
    .expect("worker");
    assert_eq!(
        worker.recovery(),
        retrainer::Recovery::default(),
        "a freshly loaded pool needs no repair and has no unreferenced space"
    );
    let before = worker.endpoint_mut().stats().verbs();
    assert_eq!(worker.poll().expect("poll"), 1);
    let report = worker.retrain_next().expect("retrain").expect("slot 0");
    assert_eq!(report.slot, 0);
    assert!(report.synonyms_absorbed > 0, "slot 0 had synonym leaves");
    assert_eq!(
        report.split_into,
        Some(p.layout.loaded_slots()),
        "slot 0 outgrew the split bound: its upper half is the next slot"
    );
    worker.endpoint_mut().stats().verbs() - before
}

#[test]
fn a_worker_stopped_at_any_verb_of_a_retraining_is_repaired_by_the_next_one() {
    let total = verbs_of_one_retraining();
    assert!(total > 10, "{total} verbs");
    let (mut unfrozen, mut retired, mut requeued, mut unreferenced) = (0, 0, 0, 0);
    let mut published = 0;
    for crash_after in 0..total {
        let mut p = pool();
        let node = p.transport.memory_nodes()[0];
        let mut first = Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        first.endpoint_mut().crash_after(crash_after);
        let outcome = first.poll().and_then(|_| first.retrain_next());
        assert!(
            outcome.is_err(),
            "crash after {crash_after} of {total} verbs"
        );
        drop(first);

        // No grace period: space found unreferenced is reused at once, so reusing live space
        // would show below.
        let mut next = Retrainer::new(p.transport.endpoint().expect("endpoint"), node, eager())
            .expect("the next worker starts");
        next.reclaim();
        let recovery = next.recovery();
        unfrozen += u64::from(recovery.unfrozen.is_some());
        retired += u64::from(recovery.retired.is_some());
        requeued += recovery.requeued;
        unreferenced += recovery.unreferenced_bytes;
        published += u64::from(recovery.finished_split.is_some());

        let mut ep = p.transport.endpoint().expect("endpoint");
        let ring = RingLayout::new(p.layout);
        assert_eq!(
            ep.read_word(ring.in_flight()),
            Ok(0),
            "in-flight word cleared"
        );
        assert_eq!(
            ep.read_word(ring.split_slot()),
            Ok(0),
            "split journal cleared"
        );
        let header = header_of_slot(&mut ep, &p.layout, 0);
        assert!(
            !header.is_locked() && !header.is_retired(),
            "crash after {crash_after}: slot 0's record left {header:?}"
        );
        // Writers go on (a record left frozen would make them time out) and split leaves, so
        // the new keys lie in leaves only the slot's current record links.
        let store = Store::open(
            p.transport.clone(),
            StoreConfig {
                wait_limit: Duration::from_millis(50),
                ..StoreConfig::default()
            },
        )
        .expect("open");
        let mut writer = store.client().expect("client");
        for k in 100..=130 {
            match writer.insert(k, k) {
                Ok(true) => p.keys.push(k),
                Ok(false) => panic!("{k} was already there"),
                Err(IndexError::RetrainingTimeout { .. }) => {
                    panic!("crash after {crash_after}: slot 0 still frozen")
                }
                Err(e) => panic!("insert {k}: {e}"),
            }
        }
        // A reader whose cache predates the crash finds them: a replaced record must be retired
        // for it to notice and reload.
        for &k in &p.keys {
            assert_eq!(
                p.stale.get(k).expect("get"),
                Some(k),
                "crash after {crash_after}: the stale reader misses {k}"
            );
        }
        // The next worker retrains what is still queued, and slot 0 ends unqueued.
        next.poll().expect("poll");
        while next.retrain_next().expect("retrain").is_some() {}
        assert!(
            !is_pending(&mut ep, &p.layout, 0).expect("read"),
            "crash after {crash_after}: slot 0 stays marked queued"
        );
        // Every other slot is retrained too, into whatever space the recovery freed: were any
        // range handed out twice, two records would overlap and the reads or verify below fail.
        for slot in 1..p.layout.loaded_slots() {
            assert!(enqueue(&mut ep, &p.layout, slot).is_ok());
        }
        next.poll().expect("poll");
        next.reclaim();
        while next.retrain_next().expect("retrain").is_some() {
            next.reclaim();
        }
        for &k in &p.keys {
            assert_eq!(
                p.stale.get(k).expect("get"),
                Some(k),
                "crash after {crash_after}: {k} lost after reuse"
            );
        }
        let report = verify(&mut ep, node).expect("verify");
        assert!(report.is_clean(), "crash after {crash_after}: {report}");
    }
    // Each repair was needed somewhere along the way, publishing a half-done split among them.
    assert!(
        unfrozen > 0 && retired > 0 && requeued > 0 && unreferenced > 0 && published > 0,
        "{unfrozen} {retired} {requeued} {unreferenced} {published}"
    );
}

/// `no_sweep`, and retired space reused at once.
fn eager() -> RetrainConfig {
    RetrainConfig {
        grace_period: Duration::ZERO,
        ..no_sweep()
    }
}

#[test]
fn a_record_written_but_never_swapped_in_is_reused() {
    // The first crash point after which the pool holds a record no slot references: the
    // pre-built record of slot 0, written beside the old one. Unsplit, so that the retraining
    // after recovery writes one record of the same size.
    let no_sweep = || RetrainConfig {
        split_leaves: Some(u64::MAX),
        ..no_sweep()
    };
    let eager = || RetrainConfig {
        split_leaves: Some(u64::MAX),
        ..eager()
    };
    let total = verbs_of_one_retraining();
    let (p, unreferenced) = (0..total)
        .find_map(|crash_after| {
            let p = pool();
            let node = p.transport.memory_nodes()[0];
            let mut first =
                Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
                    .expect("worker");
            first.endpoint_mut().crash_after(crash_after);
            assert!(first.poll().and_then(|_| first.retrain_next()).is_err());
            let probe = Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
                .expect("worker");
            let unreferenced = probe.recovery().unreferenced_bytes;
            (unreferenced > 0).then_some((p, unreferenced))
        })
        .expect("some crash point leaves a record unreferenced");
    let node = p.transport.memory_nodes()[0];
    let mut next =
        Retrainer::new(p.transport.endpoint().expect("endpoint"), node, eager()).expect("worker");
    assert_eq!(next.recovery().unreferenced_bytes, unreferenced);
    next.reclaim();
    // Retraining slot 0 from the same chains builds a record of the same size: it goes where the
    // dead worker's copy lay, and the allocation point does not move.
    let allocation_point = || {
        let mut ep = p.transport.endpoint().expect("endpoint");
        ep.read_word(p.layout.model_region_addr()).expect("read")
    };
    let before = allocation_point();
    next.poll().expect("poll");
    let report = next.retrain_next().expect("retrain").expect("slot 0");
    assert_eq!(report.slot, 0);
    assert_eq!(
        allocation_point(),
        before,
        "the unreferenced record's space was not reused"
    );
    let mut stale = p.stale;
    for &k in &p.keys {
        assert_eq!(stale.get(k).expect("get"), Some(k));
    }
    let mut ep = p.transport.endpoint().expect("endpoint");
    assert!(verify(&mut ep, node).expect("verify").is_clean());
}

#[test]
fn a_position_its_claimant_never_wrote_is_skipped_and_its_slot_still_retrained() {
    let p = pool();
    let node = p.transport.memory_nodes()[0];
    let mut worker = Retrainer::new(
        p.transport.endpoint().expect("endpoint"),
        node,
        RetrainConfig {
            ring_stall_limit: Duration::from_millis(50),
            ..no_sweep()
        },
    )
    .expect("worker");
    assert_eq!(worker.poll().expect("poll"), 1, "slot 0, queued by pool()");
    // A compute node marks slot 1, claims a position (read, CAS, FAA) and dies before writing.
    let mut dying = p.transport.endpoint().expect("endpoint");
    dying.crash_after(3);
    assert!(enqueue(&mut dying, &p.layout, 1).is_err());
    let mut ep = p.transport.endpoint().expect("endpoint");
    assert!(is_pending(&mut ep, &p.layout, 1).expect("read"));
    // Another queues slot 2 behind the hole.
    assert!(enqueue(&mut ep, &p.layout, 2).is_ok());
    assert_eq!(
        worker.poll().expect("poll"),
        0,
        "waits at the unwritten position"
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        worker.poll().expect("poll"),
        2,
        "skips it: slot 2, and slot 1 again"
    );
    assert_eq!(worker.stats().ring_positions_skipped, 1);
    let mut retrained = Vec::new();
    while let Some(report) = worker.retrain_next().expect("retrain") {
        retrained.push(report.slot);
    }
    retrained.sort_unstable();
    assert_eq!(retrained, [0, 1, 2]);
    for slot in 0..3 {
        assert!(!is_pending(&mut ep, &p.layout, slot).expect("read"));
    }
    assert!(verify(&mut ep, node).expect("verify").is_clean());
}

#[test]
fn an_entry_of_an_earlier_lap_is_not_taken_for_an_unwritten_position() {
    // A ring of four entries for four slots: one lap queues each slot once.
    let p = pool_with(&BulkLoadConfig {
        ring_capacity: Some(4),
        ..tiny()
    });
    assert_eq!(p.layout.loaded_slots(), 4);
    let node = p.transport.memory_nodes()[0];
    let mut worker = Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
        .expect("worker");
    let mut ep = p.transport.endpoint().expect("endpoint");
    for slot in 1..4 {
        assert!(enqueue(&mut ep, &p.layout, slot).is_ok());
    }
    assert_eq!(worker.poll().expect("poll"), 4);
    while worker.retrain_next().expect("retrain").is_some() {}
    // Position 4 reuses the first entry, which still names slot 0 from the first lap. Its
    // claimant dies before writing it.
    let mut dying = p.transport.endpoint().expect("endpoint");
    dying.crash_after(3);
    assert!(enqueue(&mut dying, &p.layout, 2).is_err());
    assert_eq!(
        worker.poll().expect("poll"),
        0,
        "nothing written at position 4 yet"
    );
    assert_eq!(worker.pending(), 0);
}

/// 600 keys in slots of two four-key leaves: 75 slots, a ring of 75 entries.
fn many_slots() -> Pool {
    let loaded: Vec<u64> = (0..600).map(|i| i * 1000).collect();
    let (transport, layout) =
        integration_tests::load(&loaded, 64, &tiny(), sim_transport::SimConfig::default());
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let stale = store.client().expect("client");
    Pool {
        transport,
        layout,
        keys: loaded,
        stale,
    }
}

#[test]
fn a_starting_worker_requeues_exactly_the_queued_slots() {
    for count in [0u64, 1, 9, 75] {
        // Slots spread over the table (and over both bitmap words), queued in this order.
        let queued: Vec<u64> = (0..count).map(|i| (i * 31) % 75).collect();
        let mut expected = queued.clone();
        expected.sort_unstable();
        for consumed_by_a_dead_worker in [false, true] {
            let p = many_slots();
            assert_eq!(p.layout.loaded_slots(), 75);
            assert_eq!(
                p.layout.superblock().ring_capacity,
                p.layout.slot_capacity(),
                "a ring entry for every slot the table can hold"
            );
            let node = p.transport.memory_nodes()[0];
            let mut ep = p.transport.endpoint().expect("endpoint");
            for &slot in &queued {
                assert!(matches!(
                    enqueue(&mut ep, &p.layout, slot),
                    Ok(leaf_store::queue::Enqueued::At(_))
                ));
            }
            if consumed_by_a_dead_worker {
                // A worker takes every entry from the ring, then dies before retraining any.
                let mut first =
                    Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
                        .expect("worker");
                assert_eq!(first.poll().expect("poll"), count as usize);
                drop(first);
            }
            let mut worker =
                Retrainer::new(p.transport.endpoint().expect("endpoint"), node, no_sweep())
                    .expect("a starting worker must not fail on a queued ring");
            let requeued = worker.recovery().requeued;
            worker.poll().expect("poll");
            let what =
                format!("{count} queued, consumed by a dead worker: {consumed_by_a_dead_worker}");
            assert_eq!(
                requeued,
                if consumed_by_a_dead_worker { count } else { 0 },
                "{what}: re-queued at start"
            );
            assert_eq!(
                worker.pending_slots(),
                expected,
                "{what}: pending after a poll"
            );
        }
    }
}

#[test]
fn a_worker_puts_off_a_slot_it_cannot_retrain_and_stops_only_when_its_transport_is_gone() {
    let p = pool();
    let node = p.transport.memory_nodes()[0];
    let mut ep = p.transport.endpoint().expect("endpoint");
    // A writer that died holding the lock of slot 1's first trained leaf.
    let table = read_slot_table(&mut ep, &p.layout).expect("table");
    let record = leaf_store::read_record(&mut ep, &p.layout, 1, table[1].0).expect("record");
    let lt_addr = table[1]
        .0
        .checked_add(record.layout().lt_entry(0))
        .expect("addr");
    leaf_store::try_lock(&mut ep, lt_addr, record.lt[0], 1)
        .expect("cas")
        .expect("was unlocked");
    assert!(enqueue(&mut ep, &p.layout, 1).is_ok());
    assert!(enqueue(&mut ep, &p.layout, 2).is_ok());
    // A long drain limit: only the first attempt on slot 1 waits it out; later attempts check
    // the lock that held it off with one READ, so several fit in the run.
    let mut worker = Retrainer::new(
        p.transport.endpoint().expect("endpoint"),
        node,
        RetrainConfig {
            drain_limit: Duration::from_millis(600),
            ..no_sweep()
        },
    )
    .expect("worker");
    // And one transient fault, in the first retraining (after the poll's 11 verbs).
    worker.endpoint_mut().fail_after(15);
    let until = std::time::Instant::now() + Duration::from_millis(1000);
    let stats = worker
        .run(|| std::time::Instant::now() >= until)
        .expect("per-slot problems do not stop the worker");
    assert!(
        stats.errors >= 1,
        "the transient fault is counted: {stats:?}"
    );
    assert!(
        stats.leaf_locked >= 4,
        "slot 1 is tried again, cheaply: {stats:?}"
    );
    assert_eq!(stats.drain_timeouts, 0, "slot 1 is never frozen");
    assert!(
        matches!(
            worker.last_problem(),
            Some((1, retrainer::RetrainError::LeafLocked { slot: 1, leaf: 0 }))
        ),
        "{:?}",
        worker.last_problem()
    );
    assert!(worker.deferred().iter().any(|&(slot, _)| slot == 1));
    // The other queued slots were served.
    for slot in [0, 2] {
        assert!(
            !is_pending(&mut ep, &p.layout, slot).expect("read"),
            "slot {slot} was not retrained"
        );
    }
    assert!(!header_of_slot(&mut ep, &p.layout, 1).is_locked());
    // Losing the transport ends it, with an error that says so.
    worker.endpoint_mut().crash_after(0);
    let stopped = worker
        .run(|| false)
        .expect_err("a crashed endpoint stops the worker");
    assert!(stopped.is_transport_lost(), "{stopped}");
}

#[test]
fn space_of_a_retraining_that_fails_at_any_verb_is_given_back() {
    let p = pool();
    let node = p.transport.memory_nodes()[0];
    let mut ep = p.transport.endpoint().expect("endpoint");
    let next_free =
        |ep: &mut SimEndpoint| ep.read_word(p.layout.model_region_addr()).expect("read");
    let mut worker =
        Retrainer::new(p.transport.endpoint().expect("endpoint"), node, eager()).expect("worker");
    let before = worker.endpoint_mut().stats().verbs();
    let start = next_free(&mut ep);
    worker.retrain_slot(0).expect("retrain").expect("slot 0");
    let total = worker.endpoint_mut().stats().verbs() - before;
    let one_record = next_free(&mut ep) - start;
    assert!(one_record > 0);
    let mut failed = 0;
    for k in 0..total {
        worker.endpoint_mut().fail_after(k);
        if worker.retrain_slot(0).is_err() {
            failed += 1;
        }
        worker.reclaim();
    }
    assert!(failed > 10, "{failed} of {total} attempts failed");
    // The last fault may not have been reached: disarm it.
    worker.endpoint_mut().fail_after(u64::MAX);
    // Failed attempts give their space back (and retired records are reused at once): the
    // allocation point moves by a few records, not by one per failure.
    let grown = next_free(&mut ep) - start;
    assert!(
        grown <= 4 * one_record,
        "{failed} failed attempts grew the model region by {grown} bytes ({one_record} per record)"
    );
    worker
        .retrain_slot(0)
        .expect("a clean retraining")
        .expect("slot 0");
    for &k in &p.keys {
        let mut reader = Store::open(p.transport.clone(), StoreConfig::default())
            .expect("open")
            .client()
            .expect("client");
        assert_eq!(reader.get(k).expect("get"), Some(k));
    }
    assert!(verify(&mut ep, node).expect("verify").is_clean());
}
