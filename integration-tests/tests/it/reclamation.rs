//! Reclaiming retired records without trusting a clock: a compute node paused between routing
//! with its cached view and its first READ (or its lock CAS) — as long as the test likes, while
//! the slot is retrained again and again and the memory node reclaims everything it may — finds
//! its record's memory untouched when it resumes, and completes correctly. Once it is done, the
//! records retired meanwhile are reclaimed.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::Store;
use integration_tests::{load, tiny};
use leaf_store::{Layout, ModelHeader};
use rdma_transport::{Endpoint, RemoteAddr, Transport};
use retrainer::Retrainer;
use sim_transport::{Gate, SimConfig, SimEndpoint, SimTransport};

use crate::common::{config, watcher};

/// Slot `slot`'s record now, and its header word.
fn record_of(transport: &SimTransport, slot: u64) -> (RemoteAddr, u64) {
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
    let addr = RemoteAddr::unpack(ep.read_word(layout.slot_entry_addr(slot)).expect("slot"));
    (addr, ep.read_word(addr).expect("header"))
}

/// Lets the memory node check leases, advance its epoch and reclaim, and the compute nodes'
/// renewers announce, for `rounds` short rounds.
fn settle(worker: &mut Retrainer<SimEndpoint>, rounds: usize) {
    for _ in 0..rounds {
        worker.check_members().expect("check");
        worker.reclaim();
        std::thread::sleep(Duration::from_millis(6));
    }
}

#[test]
fn a_paused_operation_s_record_is_never_reused_however_often_its_slot_is_retrained() {
    // 40 keys, two leaves of four per slot: slot 2 holds keys 16..=23 (times 10).
    let keys: Vec<u64> = (0..40).map(|k| k * 10).collect();
    let (transport, _) = load(&keys, 400, &tiny(), SimConfig::default());
    const SLOT: u64 = 2;
    const OTHER: u64 = 4;
    let mut worker = watcher(&transport);

    let paused_store = Store::open(transport.clone(), config()).expect("open");
    let mut reader = paused_store.client().expect("client");
    let mut writer = paused_store.client().expect("client");
    let busy_store = Store::open(transport.clone(), config()).expect("open");
    let mut busy = busy_store.client().expect("client");
    assert_eq!(reader.get(170), Ok(Some(170)));
    assert_eq!(writer.get(180), Ok(Some(180)));

    // Reclamation works: records retired while nobody holds them are reused.
    for _ in 0..4 {
        worker.retrain_slot(OTHER).expect("retrain");
        settle(&mut worker, 3);
    }
    let reclaimed_before = worker.stats().reclaimed_records;
    assert!(reclaimed_before > 0, "nothing was reclaimed at all");

    // Both operations stop right after routing with their views of the current record: the
    // reader before its READ, the writer before its lock CAS.
    let (record, header) = record_of(&transport, SLOT);
    let (read_gate, write_gate) = (Gate::new(), Gate::new());
    reader.endpoint_mut().pause_after(0, read_gate.clone());
    writer.endpoint_mut().pause_after(0, write_gate.clone());
    let get = std::thread::spawn(move || reader.get(170));
    let insert = std::thread::spawn(move || writer.insert(175, 175));
    assert!(read_gate.wait_for_arrival(Duration::from_secs(5)));
    assert!(write_gate.wait_for_arrival(Duration::from_secs(5)));

    // The slot is retrained over and over; everything reclaimable is reclaimed and reused.
    let mut retrained = 0;
    let fresh: Vec<u64> = (161..230).filter(|k| k % 10 != 0 && *k != 175).collect();
    for (round, &key) in fresh.iter().take(40).enumerate() {
        assert_eq!(busy.insert(key, 1), Ok(true));
        if worker.retrain_slot(SLOT).expect("retrain").is_some() {
            retrained += 1;
        }
        worker.retrain_slot(OTHER).expect("retrain");
        settle(&mut worker, 2);
        // Still the same record, whole: its slot, its generation, its checksum.
        let mut ep = transport.endpoint().expect("endpoint");
        let layout = Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
        let still = leaf_store::read_record(&mut ep, &layout, SLOT, record);
        assert!(
            still.as_ref().is_ok_and(|r| r.header.generation()
                == ModelHeader::from_raw(header).generation()
                && r.header.is_retired()),
            "round {round}: the paused operations' record at {record} was reused: {still:?}"
        );
    }
    assert!(retrained >= 30, "only {retrained} retrainings of the slot");
    // What the pause costs: the records retired meanwhile wait (a running operation of any
    // compute node holds back reclamation of what was retired after it began — bounded by the
    // longest operation, a lock wait at most, or by the lease if its node dies).
    assert!(
        worker.model_space().retired_bytes > 0,
        "nothing waited for reclamation"
    );

    read_gate.open();
    write_gate.open();
    assert_eq!(get.join().expect("reader"), Ok(Some(170)));
    assert_eq!(insert.join().expect("writer"), Ok(true));
    assert_eq!(busy.get(175), Ok(Some(175)), "the resumed insert landed");
    // Once they are done, the record is reclaimed like any other.
    let reclaimed = worker.stats().reclaimed_records;
    worker.retrain_slot(OTHER).expect("retrain");
    settle(&mut worker, 10);
    assert!(worker.stats().reclaimed_records > reclaimed);
    let mut ep = transport.endpoint().expect("endpoint");
    assert!(
        leaf_store::verify(&mut ep, transport.memory_nodes()[0])
            .expect("verify")
            .is_clean()
    );
}

#[test]
fn with_one_bit_generations_a_reused_address_is_never_taken_for_the_record_a_cache_held() {
    // Generations wrap every second retraining, and a small model region reuses addresses: the
    // record an idle store cached comes back at its address with its generation. The store's
    // next operations must reload it from the slot table (its views are from an older epoch),
    // not confirm it by address.
    let keys: Vec<u64> = (0..40).map(|k| k * 10).collect();
    let layout = leaf_store::BulkLoadConfig {
        generation_bits: Some(1),
        model_region_factor: 2,
        ..tiny()
    };
    let (transport, _) = load(&keys, 400, &layout, SimConfig::default());
    const SLOT: u64 = 2;
    let mut worker = watcher(&transport);
    let idle_store = Store::open(transport.clone(), config()).expect("open");
    let mut idle = idle_store.client().expect("client");
    let busy_store = Store::open(transport.clone(), config()).expect("open");
    let mut busy = busy_store.client().expect("client");
    let mut oracle: std::collections::BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();

    let mut generations = Vec::new();
    let mut lookalikes = 0;
    let (mut cached, mut cached_header) = record_of(&transport, SLOT);
    for (round, key) in (161..240).filter(|k| k % 10 != 0).take(40).enumerate() {
        assert_eq!(busy.insert(key, round as u64), Ok(true));
        oracle.insert(key, round as u64);
        worker.retrain_slot(SLOT).expect("retrain");
        settle(&mut worker, 2);
        let (record, header) = record_of(&transport, SLOT);
        generations.push(ModelHeader::from_raw(header).generation());
        if record == cached
            && ModelHeader::from_raw(header).generation()
                == ModelHeader::from_raw(cached_header).generation()
        {
            // The idle store's view names this address and generation, from another record.
            lookalikes += 1;
            for (&k, &v) in oracle.range(150..250) {
                assert_eq!(idle.get(k), Ok(Some(v)), "round {round}: key {k}");
            }
            assert_eq!(
                idle.scan(150, 100).map(|s| s.len()),
                Ok(oracle.range(150..).count().min(100))
            );
            (cached, cached_header) = (record, header);
        }
    }
    assert!(
        generations.iter().all(|&g| g <= 1)
            && generations.windows(2).filter(|w| w[0] != w[1]).count() >= 30,
        "generations do not wrap: {generations:?}"
    );
    assert!(
        lookalikes > 0,
        "no record came back at a cached address with its generation"
    );
    let mut ep = transport.endpoint().expect("endpoint");
    assert!(
        leaf_store::verify(&mut ep, transport.memory_nodes()[0])
            .expect("verify")
            .is_clean()
    );
}
