//! Opening a store of a realistic size: a compute node reads every record of a pool of over
//! 10^5 model slots (each READ slowed down as over a network) while the memory node watches
//! leases of 100 ms. It must renew from the moment it joins: a store that read everything first
//! was declared dead before its first operation (`rolex bench --attach` to a pool of 6 × 10^7
//! keys did exactly that on a loaded machine).

#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use index_core::{Store, StoreConfig};
use integration_tests::{load, tiny};
use sim_transport::SimConfig;

const SLOTS: u64 = 100_000;
const LEASE: Duration = Duration::from_millis(100);

#[test]
fn a_store_of_over_a_hundred_thousand_slots_opens_under_a_100_ms_lease() {
    // Tiny slots: two leaves of four keys, filled to four: eight keys per slot.
    let keys: Vec<u64> = (0..SLOTS * 8).map(|k| k * 16).collect();
    let (transport, layout) = load(
        &keys,
        64,
        &tiny(),
        SimConfig {
            // Every READ of the open crosses a "network": 10^5 record reads take over a second.
            batch_delay: Some(Duration::from_micros(10)),
            ..SimConfig::default()
        },
    );
    let mut ep = rdma_transport::Transport::endpoint(&transport).expect("endpoint");
    let slots = leaf_store::read_slot_table(&mut ep, &layout)
        .expect("slot table")
        .len() as u64;
    assert!(slots >= SLOTS, "only {slots} slots");

    // The memory node's CPU checks leases every 2 ms on its own thread.
    let mut worker = integration_tests::lease_watcher(&transport, LEASE);
    let stop = Arc::new(AtomicBool::new(false));
    let watching = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                worker.check_members().expect("check");
                std::thread::sleep(Duration::from_millis(2));
            }
            worker
        })
    };

    let started = Instant::now();
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let opened = started.elapsed();
    assert!(
        opened > LEASE,
        "the open took {opened:?}, within one lease: the test shows nothing"
    );
    let mut client = store.client().expect("a client of a live store");
    assert_eq!(client.get(keys[12_345]), Ok(Some(keys[12_345])));
    assert_eq!(client.insert(keys[54_321] + 1, 7), Ok(true));
    assert!(
        !store.is_fenced(),
        "the store was declared dead while opening"
    );
    stop.store(true, Ordering::Release);
    let worker = watching.join().expect("watcher");
    let stats = worker.member_stats().expect("watching");
    assert_eq!(stats.deaths, 0, "{stats:?}");
    println!("opened {slots} slots in {opened:?} under a {LEASE:?} lease");
}
