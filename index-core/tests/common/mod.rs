//! What the loom models of this crate share.

use index_core::bootstrap;
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use sim_transport::{SimConfig, SimTransport};

/// A pool with room for `leaves` leaves, bulk-loaded with δ = 2 and two full leaves {10, 20}
/// {30, 40} in one slot (every key is its own value), simulated with `sim`.
pub fn two_full_leaves(leaves: u64, sim: SimConfig) -> SimTransport {
    let load = BulkLoadConfig {
        epsilon: 1,
        delta: 2,
        fill: 2,
        slot_leaves: 2,
        ring_capacity: Some(1),
        model_region_factor: 2,
        ..BulkLoadConfig::default()
    };
    let pairs: Vec<(u64, u64)> = [10, 20, 30, 40].iter().map(|&k| (k, k)).collect();
    let size = required_pool_bytes(leaves, &load, 2).next_multiple_of(8);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    bootstrap(&transport, pairs, &load).expect("load");
    transport
}
