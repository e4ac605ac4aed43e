//! Loom model: a retraining swap races an insert that splits a leaf into a new synonym leaf. Run
//! with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p integration-tests --release --test loom_retrain`
//! (about 3,600 executions).
//!
//! Every key must survive the swap. A retrainer that swaps in the record it pre-built, without
//! carrying over the leaves created between its snapshot and the freeze, must be caught.

#![cfg(loom)]

use index_core::{Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rdma_transport::Transport;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::SimTransport;

fn scenario(carry_over: bool) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 200_000;
    builder.check(move || {
        // δ = 2, leaves {10, 20} {30, 40} in one slot: inserting 15 splits the first leaf and
        // moves 20 into a new synonym leaf.
        let load = BulkLoadConfig {
            epsilon: 1,
            delta: 2,
            fill: 2,
            slot_leaves: 2,
            ring_capacity: Some(1),
            model_region_factor: 4,
            ..BulkLoadConfig::default()
        };
        let pairs: Vec<(u64, u64)> = [10, 20, 30, 40].iter().map(|&k| (k, k)).collect();
        let size = required_pool_bytes(4, &load, 2).next_multiple_of(8);
        let transport = SimTransport::anonymous(&[size]).expect("pool");
        bootstrap(&transport, pairs, &load).expect("load");
        let node = transport.memory_nodes()[0];
        let config = RetrainConfig {
            carry_over,
            ..RetrainConfig::default()
        };
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, config)
            .expect("retrainer");
        let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
        let retraining = loom::thread::spawn(move || {
            worker.retrain_slot(0).expect("retrain");
        });
        let mut client = store.client().expect("client");
        assert!(client.insert(15, 15).expect("insert"));
        retraining.join().expect("retrainer");
        // A compute node attaching now, and the writer's own (reloading) client, see every key.
        let fresh = Store::open(transport, StoreConfig::default()).expect("open");
        let mut reader = fresh.client().expect("client");
        for k in [10, 15, 20, 30, 40] {
            assert_eq!(
                reader.get(k).expect("get"),
                Some(k),
                "key {k} lost across the swap"
            );
            assert_eq!(
                client.get(k).expect("get"),
                Some(k),
                "key {k} lost for the writer"
            );
        }
    });
}

#[test]
fn a_retraining_swap_racing_a_split_loses_nothing() {
    scenario(true);
}

#[test]
fn loom_catches_a_swap_without_carry_over() {
    sim_transport::loom_support::assert_caught(|| scenario(false), "lost");
}
