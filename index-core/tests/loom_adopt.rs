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
//!
//! The writer's view then may lack the other split's new leaf, and its next writes of that chain
//! lock it without reading the header (ARCHITECTURE §6, "Writes"): a write that trusts its cached
//! chain although its leaf's claim would change (`WriterTrust::CachedChain`), and a split that
//! ignores the header its slot claim returns (`WriterTrust::SplitUnchecked`), must be caught too;
//! so must a split that found its chain stale and, computing the write again on the slot it
//! claimed, does not confirm the chain (`WriterTrust::ClaimedSplitUnconfirmed`), and an insert
//! that foresees its split and takes its chain as current whatever its lock batch's claim found
//! (`WriterTrust::ForeseenUnchecked`).

#![cfg(loom)]

mod common;

use index_core::broken::{AdoptChanges, Broken, WriterTrust};
use index_core::{Store, StoreConfig};
use sim_transport::SimConfig;

/// What the writer does after the race.
#[derive(Clone, Copy)]
enum Op {
    Insert(u64),
    Delete(u64),
    /// An insert of a key already present (it changes nothing, and sees the leaf).
    Present(u64),
}

/// A rewrite whose claim would grow: 42 goes, then 46 comes to the leaf {40}, which claims up to
/// 44 while the other split's new leaf {45, 47} follows it.
const GROWS_A_CLAIM: &[Op] = &[Op::Delete(42), Op::Insert(46)];
/// A split of the leaf {40, 42} whose successor the writer's view lacks.
const SPLITS_A_STALE_LEAF: &[Op] = &[Op::Insert(43)];
/// The same split, foreseen: the writer sees the leaf {40, 42} full first, so its insert of 43
/// claims the SLT slot in its lock batch, where the header the claim finds is all that tells it
/// whether its chain is current.
const FORESEES_A_STALE_SPLIT: &[Op] = &[Op::Present(42), Op::Insert(43)];

fn scenario(adopt_changes: AdoptChanges, writer_trust: WriterTrust, after: &'static [Op]) {
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    builder.check(move || {
        // δ = 2, two full leaves {10, 20} {30, 40} in one slot.
        let transport = common::two_full_leaves(16, SimConfig::default());
        let config = StoreConfig::default();
        let broken = Broken {
            adopt_changes,
            writer_trust,
            ..Broken::default()
        };
        // Before the race: 45 splits the second leaf, so its chain is {30} → {40, 45}.
        let other_store =
            Store::open_broken(transport.clone(), config.clone(), broken).expect("open");
        let mut other = other_store.client().expect("client");
        assert!(other.insert(45, 45).expect("insert"));
        let writer_store =
            Store::open_broken(transport.clone(), config.clone(), broken).expect("open");
        let mut writer = writer_store.client().expect("client");
        let racing = loom::thread::spawn(move || {
            // Splits the synonym leaf {40, 45} into {40} → {45, 47} (only an SLT entry changes,
            // not the LT entry), then fills {40} again.
            assert!(other.insert(47, 47).expect("insert"));
            assert!(other.insert(42, 42).expect("insert"));
        });
        // Splits the first leaf; its view takes the change.
        assert!(writer.insert(15, 15).expect("insert"));
        racing.join().expect("racing writer");
        let mut keys = std::collections::BTreeSet::from([10, 15, 20, 30, 40, 42, 45, 47]);
        // Writes of the second chain through that view, which may predate the other split.
        for &op in after {
            match op {
                Op::Insert(key) => {
                    assert!(writer.insert(key, key).expect("insert"));
                    keys.insert(key);
                }
                Op::Delete(key) => {
                    assert!(writer.delete(key).expect("delete"));
                    keys.remove(&key);
                }
                Op::Present(key) => assert!(!writer.insert(key, key).expect("insert")),
            }
        }
        let reader_store = Store::open_broken(transport, config, broken).expect("open");
        let mut reader = reader_store.client().expect("client");
        for key in keys {
            assert_eq!(reader.get(key).expect("get"), Some(key), "key {key} lost");
        }
    });
}

#[test]
fn a_writer_adopts_its_own_split_only_when_nothing_else_changed() {
    scenario(AdoptChanges::Checked, WriterTrust::Claims, GROWS_A_CLAIM);
}

#[test]
fn a_writer_whose_view_missed_a_split_still_splits_right() {
    scenario(
        AdoptChanges::Checked,
        WriterTrust::Claims,
        SPLITS_A_STALE_LEAF,
    );
}

#[test]
fn a_writer_whose_view_missed_a_split_still_splits_right_when_it_foresees_its_own() {
    scenario(
        AdoptChanges::Checked,
        WriterTrust::Claims,
        FORESEES_A_STALE_SPLIT,
    );
}

#[test]
fn loom_catches_a_foreseen_split_that_ignores_the_header_its_claim_found() {
    sim_transport::loom_support::assert_caught(
        || {
            scenario(
                AdoptChanges::Checked,
                WriterTrust::ForeseenUnchecked,
                FORESEES_A_STALE_SPLIT,
            )
        },
        "lost",
    );
}

#[test]
fn loom_catches_a_view_that_adopts_a_change_without_checking_the_header() {
    sim_transport::loom_support::assert_caught(
        || scenario(AdoptChanges::Unchecked, WriterTrust::Claims, GROWS_A_CLAIM),
        "lost",
    );
}

#[test]
fn loom_catches_a_writer_that_trusts_its_cached_chain_without_the_header() {
    sim_transport::loom_support::assert_caught(
        || {
            scenario(
                AdoptChanges::Checked,
                WriterTrust::CachedChain,
                GROWS_A_CLAIM,
            )
        },
        "lost",
    );
}

#[test]
fn loom_catches_a_split_that_ignores_the_header_its_slot_claim_returns() {
    sim_transport::loom_support::assert_caught(
        || {
            scenario(
                AdoptChanges::Checked,
                WriterTrust::SplitUnchecked,
                SPLITS_A_STALE_LEAF,
            )
        },
        "lost",
    );
}

#[test]
fn loom_catches_a_split_on_a_slot_claimed_before_a_reread_that_skips_confirming_its_chain() {
    sim_transport::loom_support::assert_caught(
        || {
            scenario(
                AdoptChanges::Checked,
                WriterTrust::ClaimedSplitUnconfirmed,
                SPLITS_A_STALE_LEAF,
            )
        },
        "lost",
    );
}
