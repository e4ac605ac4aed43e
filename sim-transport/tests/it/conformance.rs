//! The transport conformance suite against the simulator, in every configuration it offers.

#![cfg(not(loom))]

use rdma_transport::conformance::{self, Scratch};
use sim_transport::{Pool, SimConfig, SimTransport};

const POOL: u64 = 1 << 20;

#[test]
fn anonymous_pool_conforms() {
    let transport = SimTransport::anonymous(&[POOL]).expect("pool");
    conformance::run_all(&transport, Scratch::new(0, 0, POOL));
}

#[test]
fn torn_mode_conforms() {
    let transport = SimTransport::anonymous_with(&[POOL], SimConfig::torn()).expect("pool");
    conformance::run_all(&transport, Scratch::new(0, 4096, POOL - 4096));
}

#[test]
fn every_memory_node_conforms() {
    let transport = SimTransport::anonymous(&[POOL, 2 * POOL, POOL]).expect("pools");
    for node in 0..3 {
        conformance::run_all(&transport, Scratch::new(node, 64, conformance::MIN_SCRATCH));
    }
}

#[test]
fn file_pool_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = Pool::create_file(dir.path().join("pool"), POOL).expect("create pool file");
    let transport = SimTransport::new(vec![pool], SimConfig::default());
    conformance::run_all(&transport, Scratch::new(0, 0, POOL));
}

#[test]
fn latency_mode_conforms() {
    let config = SimConfig {
        latency: Some(std::time::Duration::from_micros(2)),
        ..SimConfig::harsh()
    };
    let transport = SimTransport::anonymous_with(&[POOL, POOL], config).expect("pools");
    for node in 0..2 {
        conformance::run_all(&transport, Scratch::new(node, 0, POOL));
    }
}

#[test]
fn a_fenced_connection_says_so_on_every_memory_node() {
    let transport = SimTransport::anonymous_with(&[POOL, POOL], SimConfig::harsh()).expect("pools");
    for node in 0..2 {
        let fence = transport.fence(node).expect("a fence for each memory node");
        // The simulator's fence answers the very next batch with Fenced.
        conformance::a_fenced_connection_says_so(
            &transport,
            &fence,
            Scratch::new(node, 0, POOL),
            std::time::Duration::ZERO,
        );
    }
}
