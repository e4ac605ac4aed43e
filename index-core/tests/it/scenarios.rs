//! Deterministic scenarios for paths random sequences reach too rarely.

#![cfg(not(loom))]

use index_core::{CacheMode, IndexError, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use rdma_transport::{Endpoint, Transport};
use sim_transport::SimTransport;

fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 4,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    }
}

fn store(
    keys: &[u64],
    load: &BulkLoadConfig,
    spare: u64,
    mode: CacheMode,
) -> (SimTransport, Store<SimTransport>) {
    let size = required_pool_bytes(keys.len() as u64, load, spare).next_multiple_of(8);
    let transport = SimTransport::anonymous(&[size]).expect("pool");
    bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), load).expect("load");
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            cache_mode: mode,
            ..StoreConfig::default()
        },
    )
    .expect("open");
    (transport, store)
}

fn assert_clean(transport: &SimTransport) {
    let mut ep = transport.endpoint().expect("endpoint");
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).expect("verify");
        assert!(report.is_clean(), "{report}");
    }
}

/// Fill a chain until it has several synonym leaves, then delete everything in one of them: the
/// emptied synonym leaf is unlinked (from the LT entry or from the previous SLT entry), its SLT
/// slot marked freed, and every other key stays reachable, for both cache modes.
#[test]
fn emptied_synonym_leaves_are_unlinked() {
    for mode in [CacheMode::Pivots, CacheMode::Lean] {
        let (transport, store) = store(&[0, 1000, 2000, 3000, 100_000, 200_000], &tiny(), 64, mode);
        let mut c = store.client().expect("client");
        // Keys 1..=40 all belong to trained leaf 0 (pivot 0): its chain grows to ~10 leaves.
        for k in 1..=40u64 {
            assert!(c.insert(k, k).expect("insert"), "insert {k}");
        }
        assert_clean(&transport);
        // Delete a run of keys that empties synonym leaves in the middle and at the front.
        for k in (1..=12u64).chain(20..=30) {
            assert!(c.delete(k).expect("delete"), "delete {k}");
        }
        assert_clean(&transport);
        for k in 1..=40u64 {
            let expected = (!(1..=12).contains(&k) && !(20..=30).contains(&k)).then_some(k);
            assert_eq!(c.get(k).expect("get"), expected, "get {k} ({mode:?})");
        }
        // A second client with a cold, stale cache sees the same.
        let other = Store::open(
            transport.clone(),
            StoreConfig {
                cache_mode: mode,
                ..StoreConfig::default()
            },
        )
        .expect("open");
        let mut cold = other.client().expect("client");
        assert_eq!(cold.scan(0, 100).expect("scan").len(), 40 + 6 - 23);
        // The unlinked leaves are named by their freed SLT slots (the retrainer hands them out
        // again once it has rebuilt the record), and no chain links them.
        let mut ep = transport.endpoint().expect("endpoint");
        let layout = store.layouts()[0];
        let mut freed = Vec::new();
        let mut linked_leaves = Vec::new();
        for (slot, (addr, _)) in leaf_store::read_slot_table(&mut ep, &layout)
            .expect("slot table")
            .into_iter()
            .enumerate()
        {
            let record =
                leaf_store::read_record(&mut ep, &layout, slot as u64, addr).expect("record");
            freed.extend(record.slt.iter().filter_map(|e| e.freed_leaf()));
            for leaf in 0..record.lt.len() {
                linked_leaves.extend(
                    record
                        .chain_entries(leaf)
                        .expect("chain")
                        .iter()
                        .map(|e| e.leaf_num()),
                );
            }
        }
        assert!(!freed.is_empty(), "{mode:?}: the unlinks named no leaf");
        assert!(
            freed.iter().all(|l| !linked_leaves.contains(l)),
            "{mode:?}: a freed slot names a linked leaf"
        );
        // Re-inserting into the emptied range works and keeps the pool clean.
        let linked = |ep: &mut sim_transport::SimEndpoint| {
            verify(ep, transport.memory_nodes()[0])
                .expect("verify")
                .synonym_leaves
        };
        let synonyms_before = linked(&mut ep);
        for k in (1..=12u64).chain(20..=30) {
            assert!(c.insert(k, k + 1).expect("re-insert"));
        }
        assert_clean(&transport);
        assert!(
            linked(&mut ep) > synonyms_before,
            "the re-inserts split leaves"
        );
        assert_eq!(cold.get(25).expect("get"), Some(26));
    }
}

/// A slot whose SLT fills up (255 synonym leaves) refuses further splits with `SltFull` after
/// waiting, and loses nothing; it was queued for retraining at 128.
#[test]
fn a_full_slot_refuses_splits_and_loses_nothing() {
    let load = BulkLoadConfig {
        slot_leaves: 1,
        ..tiny()
    };
    let (transport, store) = store(&[0, 1_000_000], &load, 400, CacheMode::Pivots);
    let config = StoreConfig {
        wait_limit: std::time::Duration::from_millis(20),
        ..StoreConfig::default()
    };
    let store = Store::open(store.transport().clone(), config).expect("open");
    let mut c = store.client().expect("client");
    let mut inserted = vec![0u64];
    let mut refused = None;
    for k in 1..2000u64 {
        match c.insert(k, k) {
            Ok(true) => inserted.push(k),
            Err(IndexError::SltFull { slot: 0, .. }) => {
                refused = Some(k);
                break;
            }
            other => panic!("insert {k}: {other:?}"),
        }
    }
    assert!(refused.is_some(), "the SLT never filled");
    for &k in &inserted {
        assert_eq!(c.get(k).expect("get"), Some(k));
    }
    assert_eq!(c.get(refused.unwrap_or(0)).expect("get"), None);
    // Updates and deletes still work on a full slot: they do not split.
    assert!(c.update(5, 55).expect("update"));
    assert!(c.delete(6).expect("delete"));
    assert_clean(&transport);
    let layout = store.layouts()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert_eq!(report.fullest_slot, 255, "{report}");
    assert!(
        leaf_store::queue::is_pending(&mut ep, &layout, 0).expect("read"),
        "slot 0 was never queued"
    );

    // The memory node cannot retrain the slot while a leaf lock stays held: a writer that gives
    // up says why.
    let record = leaf_store::read_slot_table(&mut ep, &layout).expect("table")[0].0;
    let old = leaf_store::read_record(&mut ep, &layout, 0, record).expect("record");
    let lt_addr = record
        .checked_add(old.layout().lt_entry(0))
        .expect("address");
    let held = leaf_store::try_lock(&mut ep, lt_addr, old.lt[0], 99)
        .expect("cas")
        .expect("free");
    let mut worker = retrainer::Retrainer::new(
        transport.endpoint().expect("endpoint"),
        transport.memory_nodes()[0],
        retrainer::RetrainConfig {
            drain_limit: std::time::Duration::from_millis(10),
            ..retrainer::RetrainConfig::default()
        },
    )
    .expect("worker");
    worker.poll().expect("poll");
    assert!(matches!(
        worker.retrain_next(),
        Err(retrainer::RetrainError::LeafLocked { slot: 0, leaf: 0 })
    ));
    let problems = leaf_store::members::MemberTable::new(&layout).problem_addr();
    assert_eq!(
        leaf_store::put_off::decode(ep.read_word(problems).expect("read")),
        Some((0, leaf_store::put_off::PutOff::LeafLocked { leaf: 0 }))
    );
    leaf_store::unlock(&mut ep, lt_addr, held, None).expect("unlock");
    // The worker has not come back to the slot yet: a writer giving up now says why it waits.
    let refused = refused.unwrap_or(0);
    match c.insert(refused, refused) {
        Err(IndexError::SltFull {
            slot: 0,
            retrainer: Some(why),
            ..
        }) => assert!(why.contains("trained leaf 0 stays held"), "{why}"),
        other => panic!("expected SltFull naming the held lock: {other:?}"),
    }
    // Retrained, the word is cleared and the insert goes in.
    std::thread::sleep(std::time::Duration::from_millis(5));
    while worker.retrain_next().is_err() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(ep.read_word(problems).expect("read"), 0);
    assert_eq!(c.insert(refused, refused), Ok(true));
}

/// Splits need free leaves: when the leaf region is exhausted, an insert fails cleanly and the pool
/// stays consistent.
#[test]
fn an_exhausted_pool_fails_inserts_cleanly() {
    let load = BulkLoadConfig {
        leaf_capacity: Some(4),
        ..tiny()
    };
    let (transport, store) = store(&[0, 10, 20, 30, 100, 110, 120], &load, 0, CacheMode::Pivots);
    let mut c = store.client().expect("client");
    let mut failed = false;
    for k in 1..100u64 {
        match c.insert(k * 2 + 1, k) {
            Ok(_) => {}
            Err(IndexError::PoolExhausted { capacity: 4, .. }) => {
                failed = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed, "the pool never ran out");
    assert_clean(&transport);
}

/// While a retraining holds a record frozen, GETs go on; writers wait, then give up with a clear
/// error and change nothing; once the record is unfrozen, writes proceed.
#[test]
fn a_frozen_record_blocks_writers_not_readers() {
    let (transport, store) = store(&[0, 1000, 2000, 3000], &tiny(), 8, CacheMode::Pivots);
    let config = StoreConfig {
        wait_limit: std::time::Duration::from_millis(20),
        ..StoreConfig::default()
    };
    let store = Store::open(store.transport().clone(), config).expect("open");
    let mut c = store.client().expect("client");
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = store.layouts()[0];
    let record = leaf_store::read_slot_table(&mut ep, &layout).expect("table")[0].0;
    let header = ep.read_word(record).expect("read");
    let locked = leaf_store::ModelHeader::from_raw(header).locked().raw();
    // Frozen as a retrainer freezes: the header's flag, then every LT lock with the freeze's tag.
    let slot = leaf_store::read_record(&mut ep, &layout, 0, record).expect("record");
    let lt: Vec<_> = (0..slot.lt.len() as u64)
        .map(|i| record.checked_add(slot.layout().lt_entry(i)).expect("addr"))
        .collect();
    assert_eq!(ep.cas(record, header, locked).expect("cas"), header);
    for (&at, entry) in lt.iter().zip(&slot.lt) {
        assert_eq!(
            ep.cas(at, entry.raw(), entry.frozen().raw()).expect("cas"),
            entry.raw()
        );
    }
    assert_eq!(c.get(1000).expect("get while frozen"), Some(1000));
    assert!(matches!(
        c.insert(1500, 1),
        Err(IndexError::RetrainingTimeout { slot: 0, .. })
    ));
    assert_eq!(c.get(1500).expect("get"), None);
    for (&at, entry) in lt.iter().zip(&slot.lt) {
        let frozen = entry.frozen().raw();
        assert_eq!(ep.cas(at, frozen, entry.raw()).expect("cas"), frozen);
    }
    assert_eq!(ep.cas(record, locked, header).expect("cas"), locked);
    assert!(c.insert(1500, 1).expect("insert after unfreezing"));
    assert_clean(&transport);
}

/// A SCAN of a freshly loaded store reads what it returns in one round trip in both cache modes:
/// a view without pivots reads every owner candidate, and the candidates below the owner do not
/// count towards the leaves the round wants (when they did, about half of such scans stopped
/// short and took a second round).
#[test]
fn a_scan_of_a_loaded_store_takes_one_round_trip_in_both_modes() {
    let load = BulkLoadConfig::default();
    // Spread keys (a multiplicative hash of 0..N), sorted by the loader.
    let keys: Vec<u64> = (1..=50_000u64)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    for mode in [CacheMode::Pivots, CacheMode::Lean] {
        let (_transport, store) = store(&keys, &load, 64, mode);
        let mut c = store.client().expect("client");
        let scans = 500;
        for i in 0..scans {
            let at = (i * 97) % (sorted.len() - 200);
            let got = c.scan(sorted[at], 100).expect("scan");
            let want: Vec<(u64, u64)> = sorted[at..at + 100].iter().map(|&k| (k, k)).collect();
            assert_eq!(got, want, "{mode:?}: scan from {}", sorted[at]);
        }
        let rounds = c.stats().get(index_core::OpKind::Scan).net.batches;
        assert_eq!(
            rounds, scans as u64,
            "{mode:?}: {rounds} round trips for {scans} scans"
        );
    }
}
