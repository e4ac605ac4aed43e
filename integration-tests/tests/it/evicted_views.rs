//! A compute node whose cache budget evicted a slot's view reads the record back from its old
//! address in one round trip — but only while the slot table still names that record. Here the
//! memory node (reclaiming by grace period, no lease watch) retrains the slot, reclaims the old
//! record at once and writes the next retraining's record, not yet published, into the same
//! memory. A store that trusted its stub would take that record for the slot's, write through
//! it while the published one is frozen, and answer from it.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::{IndexError, Store, StoreConfig};
use integration_tests::{load, tiny};
use leaf_store::{Layout, ModelHeader, read_record};
use rdma_transport::{Endpoint, RemoteAddr, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimConfig, SimTransport};

fn record_of(transport: &SimTransport, layout: &Layout, slot: u64) -> RemoteAddr {
    let mut ep = transport.endpoint().expect("endpoint");
    RemoteAddr::unpack(
        ep.read_word(layout.slot_entry_addr(slot))
            .expect("slot entry"),
    )
}

#[test]
fn an_evicted_view_is_not_read_back_from_memory_another_record_took() {
    let keys: Vec<u64> = (0..400u64).map(|k| k * 10).collect();
    let (transport, layout) = load(&keys, 256, &tiny(), SimConfig::default());
    let node = transport.memory_nodes()[0];
    // What the directory alone takes, then room for about one view more.
    let directory = Store::open(
        transport.clone(),
        StoreConfig {
            cache_budget: Some(0),
            join_members: false,
            ..StoreConfig::default()
        },
    )
    .expect("open")
    .cache_bytes();
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            cache_budget: Some(directory + 150),
            join_members: false,
            wait_limit: Duration::from_millis(30),
            ..StoreConfig::default()
        },
    )
    .expect("open");
    let mut client = store.client().expect("client");
    let key = keys[100];
    // The slot of `key`, then one far away: the first view is evicted.
    assert_eq!(client.get(key).expect("get"), Some(key));
    assert_eq!(client.get(keys[keys.len() - 1]).expect("get"), Some(3990));
    let (slot, old_addr) = {
        let mut ep = transport.endpoint().expect("endpoint");
        let table = leaf_store::read_slot_table(&mut ep, &layout).expect("table");
        let slot = table
            .iter()
            .rposition(|&(_, first)| first <= key)
            .expect("a slot serves the key");
        (slot as u64, table[slot].0)
    };
    let stats = store.cache_stats();
    assert!(stats.views_not_held() > 0, "nothing evicted: {stats:?}");

    // Retrain the slot, reclaim the old record's memory at once, and prepare the next
    // retraining: its record goes to the lowest free range, the old record's.
    let mut worker = Retrainer::new(
        transport.endpoint().expect("endpoint"),
        node,
        RetrainConfig {
            grace_period: Duration::ZERO,
            ..RetrainConfig::default()
        },
    )
    .expect("retrainer");
    worker.retrain_slot(slot).expect("retrain");
    let published = record_of(&transport, &layout, slot);
    assert_ne!(published, old_addr);
    worker.reclaim();
    let prepared = worker
        .prepare_swap(slot)
        .expect("prepare")
        .expect("keys to retrain");
    let mut ep = transport.endpoint().expect("endpoint");
    let prebuilt = read_record(&mut ep, &layout, slot, old_addr).expect("a record is there");
    assert!(
        !prebuilt.header.is_retired() && !prebuilt.header.is_locked(),
        "the scenario needs the unpublished record at the old address"
    );
    assert!(
        ModelHeader::from_raw(ep.read_word(published).expect("header")).is_locked(),
        "the published record is frozen"
    );

    // The slot is frozen: a write must wait for the swap, and a read must answer from the
    // published record.
    let new_key = key + 1;
    match client.insert(new_key, 7) {
        Err(IndexError::RetrainingTimeout { .. }) => {}
        other => panic!("a write through the frozen slot returned {other:?}"),
    }
    assert_eq!(client.get(key).expect("get"), Some(key));
    worker.complete_swap(prepared).expect("swap");
    assert!(client.insert(new_key, 7).expect("insert"));
    assert_eq!(client.get(new_key).expect("get"), Some(7));
    let report = leaf_store::verify(&mut ep, node).expect("verify");
    assert!(report.is_clean(), "{report}");
}
