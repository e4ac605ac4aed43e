//! Lock hand-over between threads of one compute node, with every lock word of two memory nodes
//! sharing one local stripe (`local_lock_stripes: 1`), so that a thread constantly meets a remote
//! lock left for a different word, often on the other memory node. Whatever it is handed, it must
//! release the right word on the right node: afterwards every insert is present, no lock word is
//! held on either node, and `verify` is clean.

use std::sync::Arc;

use bplus_tree::{BulkLoadConfig, Tree, TreeConfig, bulk_load, required_pool_bytes, verify};
use rdma_transport::Transport;
use sim_transport::SimTransport;

#[test]
fn locks_handed_over_across_words_and_memory_nodes_are_all_released() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 1500;
    let config = BulkLoadConfig {
        page_size: 256,
        fill: Some(8),
        lock_words: 8,
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(1000, &config, THREADS * PER_THREAD).next_multiple_of(4096);
    let transport = SimTransport::anonymous(&[size, size]).expect("pools");
    let mut ep = transport.endpoint().expect("endpoint");
    // Node 0 serves keys below 1 << 32, node 1 the rest.
    let split = 1u64 << 32;
    for (i, &node) in transport.memory_nodes().iter().enumerate() {
        let (lo, hi) = if i == 0 {
            (0, split - 1)
        } else {
            (split, u64::MAX)
        };
        let keys: Vec<(u64, u64)> = (0..500).map(|k| (lo + k * 1000, k)).collect();
        let node_config = BulkLoadConfig {
            key_lo: lo,
            key_hi: hi,
            ..config.clone()
        };
        bulk_load(&mut ep, node, keys, &node_config).expect("load");
    }
    let tree = Arc::new(
        Tree::open(
            transport.clone(),
            TreeConfig {
                local_lock_stripes: 1,
                ..TreeConfig::default()
            },
        )
        .expect("open"),
    );
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let tree = Arc::clone(&tree);
            std::thread::spawn(move || {
                let mut client = tree.client().expect("client");
                for i in 0..PER_THREAD {
                    // Alternate memory nodes; spread over the pages (and so the lock words).
                    let base = if i % 2 == 0 { 0 } else { split };
                    // Residues 1..=4 mod 8: never a loaded key (multiples of 1000).
                    let k = base + ((i * 7919 + t * 104_729) % 499_000) * 8 + t + 1;
                    assert_eq!(client.insert(k, i), Ok(true), "insert {k}");
                    assert_eq!(client.update(k, i + 1), Ok(true), "update {k}");
                }
                client.stats()
            })
        })
        .collect();
    let handovers: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("thread").handovers)
        .sum();
    assert!(
        handovers > 0,
        "no lock was handed over: the test shows nothing"
    );
    let mut keys = 0;
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).expect("verify");
        assert!(report.is_clean(), "node {}: {report}", node.id);
        keys += report.keys;
    }
    assert_eq!(keys, 1000 + THREADS * PER_THREAD);
}
