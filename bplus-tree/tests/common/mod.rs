//! Shared by the B+-tree's tests.

use bplus_tree::{BulkLoadConfig, Layout, bulk_load, required_pool_bytes};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};

/// One simulated memory node bulk-loaded with `pairs` under `config`, with room for `spare`
/// more keys.
///
/// # Panics
/// If the pool cannot be made or loaded (a test fixture).
pub fn loaded_pool(
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    spare: u64,
    sim: SimConfig,
) -> (SimTransport, Layout) {
    let size = required_pool_bytes(pairs.len() as u64, config, spare).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let mut ep = transport.endpoint().expect("endpoint");
    let layout = bulk_load(&mut ep, transport.memory_nodes()[0], pairs, config).expect("load");
    (transport, layout)
}
