//! Loom model: a leaf split (and the new root above it) on one compute node races a lookup on
//! another. Run with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p bplus-tree
//! --release --test loom_split`.
//!
//! One full leaf {10, 20, 30, 40} is the whole tree. Inserting 25 splits it: 30 and 40 move to a
//! new right page, and a new root goes above both. A reader on its own `Tree` (whose root is
//! still the old leaf) GETs 40 meanwhile: it must find it, moving right when it reads the shrunk
//! leaf. A reader that does not move right must be caught. (A split that wrote the shrunk left
//! page before the right page it points at would not be: a reader that got to the right page
//! first reads a page failing its checksum and reads it again — the order matters for progress,
//! not for what readers see.)

#![cfg(loom)]

use bplus_tree::{BulkLoadConfig, Tree, TreeConfig, bulk_load, required_pool_bytes};
use rdma_transport::Transport;
use sim_transport::SimTransport;

fn model(move_right: bool) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 200_000;
    builder.check(move || {
        let config = BulkLoadConfig {
            page_size: 128,
            fill: Some(4),
            lock_words: 4,
            ..BulkLoadConfig::default()
        };
        let size = required_pool_bytes(4, &config, 4).next_multiple_of(8);
        let transport = SimTransport::anonymous(&[size]).expect("pool");
        let node = transport.memory_nodes()[0];
        let mut ep = transport.endpoint().expect("endpoint");
        let pairs = [10, 20, 30, 40].iter().map(|&k| (k, k)).collect();
        bulk_load(&mut ep, node, pairs, &config).expect("load");
        let tree_config = TreeConfig {
            max_attempts: 8,
            move_right,
            ..TreeConfig::default()
        };
        let writer_tree = Tree::open(transport.clone(), tree_config.clone()).expect("open");
        let reader_tree = Tree::open(transport, tree_config).expect("open");
        let writing = loom::thread::spawn(move || {
            let mut writer = writer_tree.client().expect("client");
            assert_eq!(writer.insert(25, 25), Ok(true));
        });
        let mut reader = reader_tree.client().expect("client");
        assert_eq!(reader.get(40), Ok(Some(40)), "the reader misses 40");
        writing.join().expect("writer");
        for k in [10, 20, 25, 30, 40] {
            assert_eq!(reader.get(k), Ok(Some(k)), "the reader misses {k}");
        }
    });
}

#[test]
fn a_lookup_racing_a_split_and_a_new_root_finds_its_key() {
    model(true);
}

#[test]
fn loom_catches_a_reader_that_does_not_move_right() {
    sim_transport::loom_support::assert_caught(|| model(false), "misses");
}
