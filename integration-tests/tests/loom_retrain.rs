//! Loom model: a retraining swap races an insert that splits a leaf into a new synonym leaf. Run
//! with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p integration-tests --release --test loom_retrain`
//! (about 3,600 executions).
//!
//! The readers' GETs first trust leaves that claim the key (ARCHITECTURE §4, "Claims") and fall
//! back to the validated read when the key moved out of their stale chain; the models that must
//! pass also run with the validated read alone (`GetsTrust::HeaderOnly`), the broken variants
//! are caught through the fallback.
//!
//! Every key must survive the swap. A retrainer that swaps in the record it pre-built, without
//! carrying over the leaves created between its snapshot and the freeze, must be caught.
//!
//! The second model (the new record built and the old one frozen beforehand, so that the
//! threads race only the retire and the swap) has three compute nodes' worth of caches: a reader on its own `Store`, whose
//! cache holds the record being replaced, GETs a key while the retraining retires and swaps and a
//! writer on a third `Store` splits that key's leaf — through the new record, once the swap has
//! happened. Swapping before retiring must be caught: the reader then accepts the frozen old
//! record's unchanged header and misses the key the split moved. So must a reader that accepts a
//! retired record without confirming that the slot table still names it.
//!
//! The freeze model races an insert into an emptied leaf against its slot's retraining: a freeze
//! that does not take every LT lock must be caught.
//!
//! The third model races a *slot* split the same way: the retraining cuts the slot in two and
//! publishes the upper half as a new slot, a writer on its own `Store` attaches once it is
//! published and splits a leaf through it, and a reader whose directory predates the split GETs
//! the key that moves. A reader that confirms the retired record against its slot-table entry
//! but not against the slot count must be caught.

#![cfg(loom)]

use index_core::broken::{Broken, GetsTrust};
use index_core::{Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rdma_transport::{Endpoint, Transport};
use retrainer::broken::Broken as RetrainerBroken;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimEndpoint, SimTransport};

/// δ = 2, leaves {10, 20} {30, 40} in one slot: inserting 15 splits the first leaf and moves 20
/// (with 15) into a new synonym leaf. Returns the pool and its layout.
fn one_slot_pool() -> (SimTransport, leaf_store::Layout) {
    pool_with_ring(1)
}

/// `one_slot_pool` with a ring (and so a slot table) of `ring` entries.
fn pool_with_ring(ring: u64) -> (SimTransport, leaf_store::Layout) {
    let load = BulkLoadConfig {
        epsilon: 1,
        delta: 2,
        fill: 2,
        slot_leaves: 2,
        ring_capacity: Some(ring),
        model_region_factor: 4,
        ..BulkLoadConfig::default()
    };
    let pairs: Vec<(u64, u64)> = [10, 20, 30, 40].iter().map(|&k| (k, k)).collect();
    let size = required_pool_bytes(4, &load, 2).next_multiple_of(8);
    let transport = SimTransport::anonymous(&[size]).expect("pool");
    let layout = bootstrap(&transport, pairs, &load).expect("load")[0].layout;
    (transport, layout)
}

/// The retraining worker of `transport`'s memory node.
fn retrainer_of(transport: &SimTransport, config: RetrainConfig) -> Retrainer<SimEndpoint> {
    let node = transport.memory_nodes()[0];
    Retrainer::new(transport.endpoint().expect("endpoint"), node, config).expect("retrainer")
}

fn scenario(carry_over: bool) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 200_000;
    builder.check(move || {
        let (transport, _) = one_slot_pool();
        let mut worker = retrainer_of(&transport, RetrainConfig::default());
        worker.break_steps(RetrainerBroken {
            carry_over,
            ..RetrainerBroken::default()
        });
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

/// The freeze: an insert into an empty (but claimed) leaf races the retraining of its slot, which
/// drops empty leaves. Writers do not read the header when their leaf claims the key, so the
/// freeze must take every LT lock (ARCHITECTURE §7); a freeze by the header's flag alone lets the
/// insert land after the frozen snapshot found the leaf empty, and the key is lost.
fn freeze_scenario(freeze_leaves: bool) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 200_000;
    builder.check(move || {
        let (transport, _) = one_slot_pool();
        let mut worker = retrainer_of(&transport, RetrainConfig::default());
        worker.break_steps(RetrainerBroken {
            freeze_leaves,
            ..RetrainerBroken::default()
        });
        let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
        let mut client = store.client().expect("client");
        // The second trained leaf emptied: it still claims [30, ..].
        assert!(client.delete(30).expect("delete"));
        assert!(client.delete(40).expect("delete"));
        let retraining = loom::thread::spawn(move || {
            worker.retrain_slot(0).expect("retrain");
        });
        assert!(client.insert(35, 35).expect("insert"));
        retraining.join().expect("retrainer");
        let fresh = Store::open(transport, StoreConfig::default()).expect("open");
        let mut reader = fresh.client().expect("client");
        for k in [10, 20, 35] {
            assert_eq!(
                reader.get(k).expect("get"),
                Some(k),
                "key {k} lost across the freeze"
            );
        }
    });
}

#[test]
fn an_insert_racing_a_freeze_loses_nothing() {
    freeze_scenario(true);
}

#[test]
fn loom_catches_a_freeze_that_leaves_the_leaf_locks_free() {
    sim_transport::loom_support::assert_caught(|| freeze_scenario(false), "lost across the freeze");
}

#[test]
fn a_retraining_swap_racing_a_split_loses_nothing() {
    scenario(true);
}

#[test]
fn loom_catches_a_swap_without_carry_over() {
    sim_transport::loom_support::assert_caught(|| scenario(false), "lost");
}

fn three_caches(retire_first: bool, confirm_retired: bool, gets_trust: GetsTrust) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 500_000;
    builder.check(move || {
        let (transport, layout) = one_slot_pool();
        let mut worker = retrainer_of(&transport, RetrainConfig::default());
        worker.break_steps(RetrainerBroken {
            retire_first,
            ..RetrainerBroken::default()
        });
        // The reader's cache holds the record that is about to be replaced.
        let broken = Broken {
            confirm_retired,
            gets_trust,
            ..Broken::default()
        };
        let reader_store =
            Store::open_broken(transport.clone(), StoreConfig::default(), broken).expect("open");
        let mut ep = transport.endpoint().expect("endpoint");
        let slot_entry = layout.slot_entry_addr(0);
        let old_record = ep.read_word(slot_entry).expect("slot table");
        // The new record is built and the old one frozen before the threads start: the race is
        // the retire and the swap against the reader and the writer.
        let prepared = worker
            .prepare_swap(0)
            .expect("prepare")
            .expect("slot 0 has keys");
        let retraining = loom::thread::spawn(move || {
            worker.complete_swap(prepared).expect("swap");
        });
        // A compute node that attaches once the slot table names the new record, and splits
        // {10, 20} through it: 15 and 20 move to a new synonym leaf, 10 stays.
        let writing = loom::thread::spawn(move || {
            while ep.read_word(slot_entry).expect("slot table") == old_record {
                loom::thread::yield_now();
            }
            let store = Store::open(transport, StoreConfig::default()).expect("open");
            let mut writer = store.client().expect("client");
            assert!(writer.insert(15, 15).expect("insert"));
        });
        let mut reader = reader_store.client().expect("client");
        assert_eq!(
            reader.get(20).expect("get"),
            Some(20),
            "a reader with an old cache misses 20"
        );
        writing.join().expect("writer");
        retraining.join().expect("retrainer");
        for k in [10, 15, 20, 30, 40] {
            assert_eq!(
                reader.get(k).expect("get"),
                Some(k),
                "a reader with an old cache misses {k}"
            );
        }
    });
}

#[test]
fn a_stale_reader_racing_retire_swap_and_a_split_through_the_new_record_misses_nothing() {
    three_caches(true, true, GetsTrust::Claims);
    three_caches(true, true, GetsTrust::HeaderOnly);
}

#[test]
fn loom_catches_swap_before_retire() {
    sim_transport::loom_support::assert_caught(
        || three_caches(false, true, GetsTrust::Claims),
        "misses",
    );
}

#[test]
fn loom_catches_a_reader_that_trusts_a_retired_record() {
    sim_transport::loom_support::assert_caught(
        || three_caches(true, false, GetsTrust::Claims),
        "misses",
    );
}

/// `one_slot_pool` with room in the slot table (and ring) for the slot a split publishes.
fn splittable_pool() -> (SimTransport, leaf_store::Layout) {
    let (transport, layout) = pool_with_ring(2);
    assert_eq!(layout.slot_capacity(), 2);
    (transport, layout)
}

fn slot_split(confirm_slot_count: bool, gets_trust: GetsTrust) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 500_000;
    builder.check(move || {
        let (transport, layout) = splittable_pool();
        // Two trained leaves are past a bound of one: the slot splits into {10, 20} and a new
        // slot 1 serving {30, 40} and everything above.
        let mut worker = retrainer_of(
            &transport,
            RetrainConfig {
                split_leaves: Some(1),
                ..RetrainConfig::default()
            },
        );
        let broken = Broken {
            confirm_slot_count,
            gets_trust,
            ..Broken::default()
        };
        // Its directory knows slot 0 only, and its cache holds the record being split.
        let reader_store =
            Store::open_broken(transport.clone(), StoreConfig::default(), broken).expect("open");
        let prepared = worker
            .prepare_swap(0)
            .expect("prepare")
            .expect("slot 0 has keys");
        let retraining = loom::thread::spawn(move || {
            let report = worker.complete_swap(prepared).expect("swap");
            assert_eq!(report.split_into, Some(1));
        });
        // A compute node that attaches once slot 1 is published and splits {30, 40} through it:
        // 35 and 40 move to a synonym leaf only slot 1's record links.
        let mut ep = transport.endpoint().expect("endpoint");
        let writing = loom::thread::spawn(move || {
            while ep.read_word(layout.slot_count_addr()).expect("slot count") < 2 {
                loom::thread::yield_now();
            }
            let store = Store::open(transport, StoreConfig::default()).expect("open");
            let mut writer = store.client().expect("client");
            assert!(writer.insert(35, 35).expect("insert"));
        });
        let mut reader = reader_store.client().expect("client");
        assert_eq!(
            reader.get(40).expect("get"),
            Some(40),
            "a reader with an old directory misses 40"
        );
        writing.join().expect("writer");
        retraining.join().expect("retrainer");
        for k in [10, 20, 30, 35, 40] {
            assert_eq!(
                reader.get(k).expect("get"),
                Some(k),
                "a reader with an old directory misses {k}"
            );
        }
    });
}

#[test]
fn a_stale_directory_racing_a_slot_split_and_a_leaf_split_through_the_new_slot_misses_nothing() {
    slot_split(true, GetsTrust::Claims);
    slot_split(true, GetsTrust::HeaderOnly);
}

#[test]
fn loom_catches_a_reader_that_ignores_a_published_slot() {
    sim_transport::loom_support::assert_caught(|| slot_split(false, GetsTrust::Claims), "misses");
}
