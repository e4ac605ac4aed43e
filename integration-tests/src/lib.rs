//! Whole-store scenarios live in this crate's `tests/` directory; this library holds the fixtures
//! they share.

pub mod recovery;
pub mod write_scenarios;

use index_core::{Client, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, Layout};
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

/// Four keys per leaf (all four loaded), two leaves per slot, room for many retrained records: a
/// few inserts make synonym leaves, a few deletes empty a leaf that the next retraining drops.
pub fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 4,
        slot_leaves: 2,
        model_region_factor: 24,
        ..BulkLoadConfig::default()
    }
}

/// One simulated memory node bulk-loaded with `keys` (value = key) under `config`, with room for
/// `spare` more leaves.
///
/// # Panics
/// If the pool cannot be made or loaded (a test fixture).
pub fn load(
    keys: &[u64],
    spare: u64,
    config: &BulkLoadConfig,
    sim: SimConfig,
) -> (SimTransport, Layout) {
    let size =
        leaf_store::required_pool_bytes(keys.len() as u64, config, spare).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let layout = bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), config)
        .expect("load")[0]
        .layout;
    (transport, layout)
}

/// A client of a new `Store` (its own caches) on `transport`.
///
/// # Panics
/// If the store cannot be opened (a test fixture).
pub fn client(transport: &SimTransport, config: StoreConfig) -> Client<SimEndpoint> {
    Store::open(transport.clone(), config)
        .expect("open")
        .client()
        .expect("client")
}

/// A retraining worker on memory node 0 of `transport` that watches leases (lease time `lease`)
/// and fences through the simulator, without the idle sweep; driven by the test, not a thread.
///
/// # Panics
/// If the worker cannot start (a test fixture).
pub fn lease_watcher(
    transport: &SimTransport,
    lease: std::time::Duration,
) -> retrainer::Retrainer<SimEndpoint> {
    use rdma_transport::Transport;
    let node = transport.memory_nodes()[0];
    let mut worker = retrainer::Retrainer::new(
        transport.endpoint().expect("endpoint"),
        node,
        retrainer::RetrainConfig {
            idle_sweep_threshold: 0,
            ..retrainer::RetrainConfig::default()
        },
    )
    .expect("worker");
    worker.watch_members(lease, Box::new(transport.fence(node.id).expect("fence")));
    worker
}
