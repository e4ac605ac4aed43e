use std::sync::atomic::Ordering;
use std::time::Duration;

use rdma_transport::{Endpoint, Transport};
use sim_transport::SimTransport;

use crate::Store;
use crate::membership::tests::quiet_store;

#[test]
fn an_operation_in_a_later_epoch_reloads_a_view_not_confirmed_in_it() {
    // The renewer never runs during the test: it would confirm views itself.
    let store = quiet_store(1, Duration::from_secs(3600));
    let mut client = store.client().expect("client");
    assert_eq!(client.get(500), Ok(Some(500)));
    let caches = store.caches();
    let slot = caches.nodes[0].directory.load().slot_of(500).0;
    let validated = |caches: &super::super::store::Caches| {
        caches.nodes[0]
            .cell(slot)
            .expect("a used slot")
            .load()
            .validated
            .get()
    };
    assert_eq!(validated(caches), super::FIRST_EPOCH);
    let plain = client.net_stats().batches;
    assert_eq!(client.get(500), Ok(Some(500)));
    assert_eq!(
        client.net_stats().batches - plain,
        1,
        "a GET is one round trip"
    );

    // A new local epoch in which nothing was confirmed: the next operation must not trust
    // the cached view (its record may have been retired and reused since).
    caches.members.epochs.epoch.fetch_add(1, Ordering::SeqCst);
    let before = client.net_stats().batches;
    assert_eq!(client.get(500), Ok(Some(500)));
    assert!(
        client.net_stats().batches - before > 1,
        "the view was used without reloading it from the slot table"
    );
    assert_eq!(validated(caches), super::FIRST_EPOCH + 1);
    // Reloaded once, it serves the epoch's next operations directly.
    let again = client.net_stats().batches;
    assert_eq!(client.get(500), Ok(Some(500)));
    assert_eq!(client.net_stats().batches - again, 1);
}

/// The validation epoch of the view of the slot serving `key` on node `node`.
fn validated_of(store: &Store<SimTransport>, node: usize, key: u64) -> u64 {
    let cache = &store.caches().nodes[node];
    let slot = cache.directory.load().slot_of(key).0;
    cache
        .cell(slot)
        .expect("a used slot")
        .load()
        .validated
        .get()
}

#[test]
fn a_view_not_valid_in_the_current_epoch_is_never_confirmed_by_address() {
    let store = quiet_store(1, Duration::from_secs(3600));
    let mut client = store.client().expect("client");
    assert_eq!(client.get(500), Ok(Some(500)));
    let caches = store.caches();
    assert_eq!(validated_of(&store, 0, 500), super::FIRST_EPOCH);
    // Two local epochs pass in which the slot's view was not confirmed (its record was
    // swapped out then): its record may have been reclaimed, and a later record of the slot
    // placed at the same address, which the slot table now names.
    caches.members.epochs.epoch.fetch_add(2, Ordering::SeqCst);
    let current = caches.members.epochs.current();
    let mut ep = store.transport().endpoint().expect("endpoint");
    let layout = caches.nodes[0].layout;
    let table = leaf_store::read_slot_table(&mut ep, &layout).expect("slot table");
    super::confirm_views(&caches.members.views[0], &table, current, current + 1);
    assert_eq!(
        validated_of(&store, 0, 500),
        super::FIRST_EPOCH,
        "a view from an earlier epoch was confirmed because its address matched"
    );
    // A view valid now is confirmed.
    assert_eq!(client.get(500), Ok(Some(500)));
    assert_eq!(validated_of(&store, 0, 500), current);
    let table = leaf_store::read_slot_table(&mut ep, &layout).expect("slot table");
    super::confirm_views(&caches.members.views[0], &table, current, current + 1);
    assert_eq!(validated_of(&store, 0, 500), current + 1);
}

#[test]
fn an_epoch_advance_on_one_memory_node_keeps_the_views_of_the_others() {
    let store = quiet_store(2, Duration::from_millis(1));
    let caches = store.caches();
    let mut client = store.client().expect("client");
    let key = caches.partition[1] + 10;
    assert_eq!(client.get(key), Ok(Some(key)));
    let before = caches.members.epochs.current();
    // Memory node 0 (only) moves to a new retirement epoch.
    let mut ep = store.transport().endpoint().expect("endpoint");
    let table = leaf_store::members::MemberTable::new(&caches.nodes[0].layout);
    let word = ep.read_word(table.epoch_addr()).expect("epoch");
    ep.write_word(table.epoch_addr(), word + 1)
        .expect("advance");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while caches.members.epochs.current() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewer never moved on"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let batches = client.net_stats().batches;
    assert_eq!(client.get(key), Ok(Some(key)));
    assert_eq!(
        client.net_stats().batches - batches,
        1,
        "memory node 1's view was dropped by memory node 0's epoch advance"
    );
}
