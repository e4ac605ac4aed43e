//! Loom model: a writer applies its own split to its compute node's cached view (so the next
//! writer of the slot need not read the tables again) while a writer on another compute node
//! splits a synonym leaf of another chain of the same slot. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p index-core --release --test loom_adopt`.
//!
//! The view may take the change only when the header words the split's own atomics returned show
//! that nothing else changed the record since the view's header (ARCHITECTURE §6, "A writer's own
//! changes"). A split of a synonym leaf changes an SLT entry, not the LT entry a writer's lock CAS
//! compares, so a view that took the writer's change but missed the other split — with the header
//! that includes both — lets the next write of that chain trust a chain without the new leaf: it
//! grows a leaf's claim over keys the new leaf holds, and a reader loses them. That variant
//! (`AdoptChanges::Unchecked`) must be caught.

#![cfg(loom)]

use index_core::{AdoptChanges, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use sim_transport::SimTransport;

fn scenario(adopt_changes: AdoptChanges) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    builder.check(move || {
        // δ = 2, two full leaves {10, 20} {30, 40} in one slot.
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
        let size = required_pool_bytes(16, &load, 2).next_multiple_of(8);
        let transport = SimTransport::anonymous(&[size]).expect("pool");
        bootstrap(&transport, pairs, &load).expect("load");
        let config = StoreConfig {
            adopt_changes,
            ..StoreConfig::default()
        };
        // Before the race: 45 splits the second leaf, so its chain is {30} → {40, 45}.
        let other_store = Store::open(transport.clone(), config.clone()).expect("open");
        let mut other = other_store.client().expect("client");
        assert!(other.insert(45, 45).expect("insert"));
        let writer_store = Store::open(transport.clone(), config.clone()).expect("open");
        let mut writer = writer_store.client().expect("client");
        // The writer's view of the slot, read after that split.
        assert_eq!(writer.get(45).expect("get"), Some(45));
        let racing = loom::thread::spawn(move || {
            // Splits the synonym leaf {40, 45}: only an SLT entry changes, not the LT entry.
            assert!(other.insert(47, 47).expect("insert"));
        });
        // Splits the first leaf; its view takes the change.
        assert!(writer.insert(15, 15).expect("insert"));
        racing.join().expect("racing writer");
        // A write of the second chain through that view.
        assert!(writer.insert(46, 46).expect("insert"));
        let reader_store = Store::open(transport, config).expect("open");
        let mut reader = reader_store.client().expect("client");
        for key in [10, 15, 20, 30, 40, 45, 46, 47] {
            assert_eq!(reader.get(key).expect("get"), Some(key), "key {key} lost");
        }
    });
}

#[test]
fn a_writer_adopts_its_own_split_only_when_nothing_else_changed() {
    scenario(AdoptChanges::Checked);
}

#[test]
fn loom_catches_a_view_that_adopts_a_change_without_checking_the_header() {
    sim_transport::loom_support::assert_caught(|| scenario(AdoptChanges::Unchecked), "key 45 lost");
}
