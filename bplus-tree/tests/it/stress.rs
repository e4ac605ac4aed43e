//! Torn-mode stress, the simulator's harshest mode (words of READs and WRITEs interleave, READs
//! and atomics reorder as InfiniBand allows): writers on one compute node (`Tree`), readers and
//! scanners on another, so neither shares the other's cache. Keys of class `k % 4 == t` belong to
//! writer `t` and are published once inserted; class 3 is bulk-loaded and never changes. Every
//! published insert is found; every scan is strictly increasing and holds every loaded key of its
//! range and every insert published before it began. It runs with sorted leaves and with
//! hopscotch leaves (sixteen slots in neighbourhoods of four).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::common;

use bplus_tree::{BulkLoadConfig, LeafKind, Tree, verify};
use rdma_transport::Transport;
use sim_transport::SimConfig;

const PER_WRITER: u64 = 3000;
const WRITERS: u64 = 3;

fn writer_key(t: u64, i: u64) -> u64 {
    ((i * 7919) % PER_WRITER) * 4 + t
}

#[test]
fn torn_stress_readers_on_another_compute_node_miss_no_completed_insert() {
    stress(BulkLoadConfig {
        page_size: 256,
        fill: Some(8),
        lock_words: 256,
        ..BulkLoadConfig::default()
    });
}

#[test]
fn torn_stress_over_hopscotch_leaves_misses_no_completed_insert() {
    let g = chime::Geometry::new(16, 4).expect("shape");
    stress(BulkLoadConfig {
        page_size: g.leaf_bytes().next_multiple_of(64),
        fill: Some(8),
        lock_words: 256,
        leaf: LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    });
}

fn stress(config: BulkLoadConfig) {
    let loaded: Vec<u64> = (0..PER_WRITER / 2).map(|i| i * 8 + 3).collect();
    let (transport, _) = common::loaded_pool(
        loaded.iter().map(|&k| (k, k)).collect(),
        &config,
        WRITERS * PER_WRITER,
        SimConfig::harsh(),
    );
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");

    let writers = Arc::new(Tree::open(transport.clone(), common::tree_config()).expect("open"));
    let readers = Arc::new(Tree::open(transport.clone(), common::tree_config()).expect("open"));
    let published: Arc<Vec<AtomicU64>> =
        Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));

    let mut handles = Vec::new();
    for t in 0..WRITERS {
        let (tree, published) = (Arc::clone(&writers), Arc::clone(&published));
        handles.push(std::thread::spawn(move || {
            let mut client = tree.client().expect("client");
            for i in 0..PER_WRITER {
                let k = writer_key(t, i);
                assert_eq!(client.insert(k, k + 1), Ok(true), "insert {k}");
                if i % 3 == 0 {
                    assert_eq!(client.update(k, k), Ok(true), "update {k}");
                } else {
                    assert_eq!(client.upsert(k, k), Ok(false), "upsert {k}");
                }
                published[t as usize].store(i + 1, Ordering::Release);
            }
        }));
    }
    let checkers: Vec<_> = (0..2)
        .map(|r| {
            let (tree, published, done) = (
                Arc::clone(&readers),
                Arc::clone(&published),
                Arc::clone(&done),
            );
            let loaded = loaded.clone();
            std::thread::spawn(move || {
                let mut client = tree.client().expect("client");
                let mut rounds = 0u64;
                while !done.load(Ordering::Acquire) || rounds < 20 {
                    rounds += 1;
                    if r == 0 {
                        // Point reads of published inserts.
                        for t in 0..WRITERS {
                            let n = published[t as usize].load(Ordering::Acquire);
                            for i in (0..n).rev().take(40) {
                                let k = writer_key(t, i);
                                let v = client.get(k).expect("get");
                                assert!(
                                    v == Some(k) || v == Some(k + 1),
                                    "completed insert {k} read as {v:?}"
                                );
                            }
                        }
                    } else {
                        // Scans: strictly increasing, nothing present since before them missed.
                        let before: Vec<u64> = published
                            .iter()
                            .map(|p| p.load(Ordering::Acquire))
                            .collect();
                        let start = (rounds * 977) % (PER_WRITER * 4);
                        let got = client.scan(start, 64).expect("scan");
                        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "scan out of order");
                        let end = got.last().map_or(start, |e| e.0);
                        let mut expected: Vec<u64> = loaded
                            .iter()
                            .copied()
                            .filter(|&k| k >= start && k <= end)
                            .collect();
                        for t in 0..WRITERS {
                            expected.extend(
                                (0..before[t as usize])
                                    .map(|i| writer_key(t, i))
                                    .filter(|&k| k >= start && k <= end),
                            );
                        }
                        let keys: Vec<u64> = got.iter().map(|e| e.0).collect();
                        for k in expected {
                            assert!(
                                keys.binary_search(&k).is_ok(),
                                "scan from {start} skipped {k}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    done.store(true, Ordering::Release);
    for c in checkers {
        c.join().expect("checker");
    }
    let report = verify(&mut ep, node).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, loaded.len() as u64 + WRITERS * PER_WRITER);
    let mut client = readers.client().expect("client");
    let all = client.scan(0, usize::MAX).expect("scan");
    assert_eq!(all.len() as u64, report.keys);
    assert!(
        report.pages_per_level.len() >= 3,
        "the tree grew new roots: {report}"
    );
}
