//! Byte values across compute nodes and the memory node: freed blocks are reused only past the
//! reuse horizon, a reader paused between its leaf and its block READ gets the value it found
//! (its block is not reused under it), chunks of a store that closed go back to the region, and
//! churn keeps the region's claimed bytes near the live ones.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::{Store, StoreConfig, bootstrap_values};
use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use retrainer::Retrainer;
use sim_transport::{Gate, SimConfig, SimEndpoint, SimTransport};

fn config() -> StoreConfig {
    StoreConfig {
        lease_renewal: Duration::from_millis(1),
        ..StoreConfig::default()
    }
}

fn load_config() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        model_region_factor: 24,
        values: Some(ValueConfig {
            bytes: 4 << 20,
            chunk_bytes: 8 * 1024,
        }),
        ..BulkLoadConfig::default()
    }
}

/// The value `version` of `key` writes: its bytes name both.
fn value(key: u64, version: u64) -> Vec<u8> {
    let mut v = format!("key {key} version {version};").into_bytes();
    v.resize(100, b'.');
    v
}

fn loaded(keys: u64, sim: SimConfig) -> SimTransport {
    let load = load_config();
    let size = required_pool_bytes(keys, &load, 2_000).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let pairs = (0..keys).map(|k| (k * 10, value(k * 10, 0))).collect();
    bootstrap_values(&transport, pairs, &load, |_, _, _, _| {}).expect("load");
    transport
}

fn watcher(transport: &SimTransport) -> Retrainer<SimEndpoint> {
    integration_tests::lease_watcher(transport, Duration::from_secs(30))
}

/// Lets the memory node check leases (publishing the horizon, advancing the epoch when asked)
/// and the compute nodes' renewers announce.
fn settle(worker: &mut Retrainer<SimEndpoint>, rounds: usize) {
    for _ in 0..rounds {
        worker.check_members().expect("check");
        std::thread::sleep(Duration::from_millis(6));
    }
}

fn space(transport: &SimTransport) -> leaf_store::ValueSpace {
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    report.values.expect("a value region")
}

#[test]
fn freed_blocks_are_reused_once_the_horizon_passes_and_churn_stays_near_the_live_bytes() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    for round in 1..=60u64 {
        for k in 0..40 {
            assert_eq!(c.update_value(k * 10, &value(k * 10, round)), Ok(true));
        }
        settle(&mut worker, 1);
    }
    for k in 0..40 {
        assert_eq!(c.get_value(k * 10), Ok(Some(value(k * 10, 60))));
    }
    assert!(
        store.value_blocks_reused() > 1_000,
        "reused {}",
        store.value_blocks_reused()
    );
    let used = space(&transport);
    // 2,400 updates of 124-byte blocks (128-byte class, 63 to a chunk of 8 KiB) over 40 live
    // values: without reuse they would claim 39 chunks. With it, the chunks hold the live
    // blocks plus those freed during the few epochs a free waits.
    assert!(used.chunks_claimed <= 10, "{used}");
    assert_eq!(store.values_forgotten(), 0);
}

#[test]
fn a_reader_paused_before_its_block_read_gets_the_value_it_found() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let paused_store = Store::open(transport.clone(), config()).expect("open");
    let mut reader = paused_store.client().expect("client");
    let busy_store = Store::open(transport.clone(), config()).expect("open");
    let mut writer = busy_store.client().expect("client");
    assert_eq!(reader.get_value(170), Ok(Some(value(170, 0))));

    // Reuse works while nobody is paused (past the first chunk's fresh blocks).
    for round in 1..=100 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    let reused_before = busy_store.value_blocks_reused();
    assert!(reused_before > 0, "nothing was reused at all");

    // The reader READs the leaf (version 100), then stops before READing the block.
    let gate = Gate::new();
    reader.endpoint_mut().pause_after(1, gate.clone());
    let get = std::thread::spawn(move || {
        let got = reader.get_value(170);
        (got, reader.value_retries())
    });
    assert!(gate.wait_for_arrival(Duration::from_secs(5)));
    // Meanwhile the key is rewritten many times and the memory node reclaims all it may.
    for round in 101..=300 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    gate.open();
    let (got, retries) = get.join().expect("reader");
    assert_eq!(
        got,
        Ok(Some(value(170, 100))),
        "the paused reader's block was reused"
    );
    assert_eq!(retries, 0);
    // Once it is done, reuse goes on.
    for round in 301..=400 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    assert!(busy_store.value_blocks_reused() > reused_before);
    space(&transport);
}

#[test]
fn chunks_of_a_store_that_closed_go_back_and_another_store_reuses_their_free_blocks() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    {
        let store = Store::open(transport.clone(), config()).expect("open");
        let mut c = store.client().expect("client");
        for round in 1..=10 {
            for k in 0..40 {
                c.update_value(k * 10, &value(k * 10, round))
                    .expect("update");
            }
        }
        assert!(space(&transport).chunks_owned > 0);
    }
    settle(&mut worker, 3);
    let after = space(&transport);
    assert_eq!(after.chunks_owned, 0, "{after}");
    let claimed = after.chunks_claimed;
    // A new store takes the chunks that were left before any fresh one.
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    for round in 11..=30 {
        for k in 0..40 {
            c.update_value(k * 10, &value(k * 10, round))
                .expect("update");
        }
        settle(&mut worker, 1);
    }
    let later = space(&transport);
    // Every chunk left behind was taken (one per chunk the store needed, beside a fresh one).
    assert_eq!(later.chunks_owned, later.chunks_claimed, "{later}");
    assert!(
        later.chunks_claimed <= claimed + 4,
        "{later} (was {claimed} chunks)"
    );
    assert!(store.value_blocks_reused() > 0);
}
