//! Shared by the B+-tree's tests.

use bplus_tree::{BulkLoadConfig, Layout, Page, bulk_load, required_pool_bytes};
use rdma_transport::{Endpoint, Transport};
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

/// Page `page` as it is in the pool now, read through `ep`.
///
/// # Panics
/// If the READ fails or the page does not decode whole (a test fixture).
pub fn read_page(ep: &mut impl Endpoint, layout: &Layout, page: u64) -> Page {
    let mut bytes = vec![0u8; layout.page_size as usize];
    ep.read(layout.page_addr(page), &mut bytes).expect("read");
    Page::decode(page, &bytes).expect("whole")
}

/// A compute node's configuration for the tests: with a small hot-entry buffer, so that GETs on
/// hopscotch leaves read speculatively (a buffer ignored by pools of sorted leaves).
pub fn tree_config() -> bplus_tree::TreeConfig {
    bplus_tree::TreeConfig {
        hot_entries_bytes: 24 * 16 * 8,
        ..bplus_tree::TreeConfig::default()
    }
}

/// Hopscotch leaves of four slots in neighbourhoods of two, three loaded, sharing 64 lock words:
/// splits, internal splits and new roots all the time (the hopscotch twin of the tests' pages
/// of four entries).
pub fn tiny_hopscotch() -> BulkLoadConfig {
    let g = chime::Geometry::new(4, 2).expect("shape");
    BulkLoadConfig {
        page_size: g.leaf_bytes().next_multiple_of(64),
        fill: Some(3),
        lock_words: 64,
        leaf: bplus_tree::LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    }
}
