//! Loom model: two operations in flight on one thread (a [`index_core::Session`] of a pipeline of
//! depth 2) insert two keys of the same leaf — so the same lock stripe and the same remote leaf
//! lock — while a GET on another compute node reads a key of that leaf. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p index-core --release --test loom_pipeline`.
//!
//! The first insert takes the stripe and holds it across its posted lock batch; the second finds
//! it held by its sibling. A posting operation must try-lock the stripe and yield while it is held
//! (ARCHITECTURE §6, "Operations in flight"): its sibling goes on only when it yields, takes the
//! leaf lock, writes, and hands the lock over through the stripe. Both inserts complete, both keys
//! are found, the GET never misses the key beside them, and the pool is left clean (no leaf lock
//! held). A posting operation that blocks on the stripe as a synchronous call does
//! (`StripeWait::Blocks`) blocks its thread on a stripe that thread already holds: loom must report
//! the deadlock — which also shows the model reaches the contended stripe.

#![cfg(loom)]

use index_core::broken::{Broken, StripeWait};
use index_core::{Reply, Request, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};

/// A pool bulk-loaded with δ = 4 and two half-full leaves {10, 20} {30, 40} in one slot (every key
/// is its own value): two inserts into the first leaf fit without a split.
fn two_leaves_with_room() -> SimTransport {
    let load = BulkLoadConfig {
        epsilon: 1,
        delta: 4,
        fill: 2,
        slot_leaves: 2,
        ring_capacity: Some(1),
        model_region_factor: 2,
        ..BulkLoadConfig::default()
    };
    let pairs: Vec<(u64, u64)> = [10, 20, 30, 40].iter().map(|&k| (k, k)).collect();
    let size = required_pool_bytes(4, &load, 2).next_multiple_of(8);
    let transport = SimTransport::anonymous_with(&[size], SimConfig::default()).expect("pool");
    bootstrap(&transport, pairs, &load).expect("load");
    transport
}

fn scenario(stripe_wait: StripeWait) {
    // The single-threaded setup (bulk load, two stores attaching) alone makes hundreds of word
    // accesses, each a loom branch point: raise the per-execution budget.
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 50_000;
    builder.check(move || {
        let transport = two_leaves_with_room();
        let config = StoreConfig::default();
        let broken = Broken {
            stripe_wait,
            ..Broken::default()
        };
        let store = Store::open_broken(transport.clone(), config.clone(), broken).expect("open");
        let reader_store = Store::open_broken(transport.clone(), config, broken).expect("open");
        let reader = loom::thread::spawn(move || {
            let mut reader = reader_store.client().expect("client");
            assert_eq!(
                reader.get(10).expect("get"),
                Some(10),
                "GET missed a key beside the pipelined inserts"
            );
            reader
        });
        // 12 and 15 both fall in the leaf {10, 20}: one stripe, one leaf lock.
        let mut pipeline = store.pipeline(2).expect("pipeline");
        {
            let mut session = pipeline.session();
            session
                .submit(12, Request::Insert(12, 12))
                .expect("a client is free");
            session
                .submit(15, Request::Insert(15, 15))
                .expect("a client is free");
            let mut completed = Vec::new();
            while let Some(done) = session.wait() {
                let key = done.tag;
                assert_eq!(
                    done.result.expect("insert"),
                    Reply::Done(true),
                    "insert of {key}"
                );
                completed.push(key);
            }
            completed.sort_unstable();
            assert_eq!(completed, [12, 15], "an insert never completed");
        }
        let mut reader = reader.join().expect("reader");
        for key in [10, 12, 15, 20, 30, 40] {
            assert_eq!(reader.get(key).expect("get"), Some(key), "key {key} lost");
        }
        let mut ep = transport.endpoint().expect("endpoint");
        let report = leaf_store::verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
        assert!(report.is_clean(), "{report}");
    });
}

#[test]
fn two_operations_of_one_thread_share_a_leaf_lock_without_deadlock() {
    scenario(StripeWait::Yields);
}

#[test]
fn loom_catches_a_posting_operation_that_blocks_on_its_siblings_stripe() {
    sim_transport::loom_support::assert_caught(|| scenario(StripeWait::Blocks), "deadlock");
}
