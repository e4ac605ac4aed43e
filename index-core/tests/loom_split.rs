//! Loom model: an insert that splits a leaf into a new synonym leaf, moving a key, races a GET of
//! that key from a compute node with its own (soon stale) cache. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p index-core --release --test loom_split`.
//!
//! The GET must always find the key. Its first READ, of the cached chain's leaves alone, trusts
//! only a leaf that claims the key (ARCHITECTURE §4, "Claims"): a GET that trusts whatever its
//! stale chain holds — the split leaf, shrunk, no longer holds the key — must be caught. Two
//! wrong split orders must be caught too: the reference
//! design's (`docs/ARCHITECTURE.md` §6, "Splits": bump the header, shrink the split leaf, then
//! link and unlock in one CAS — a reader that refreshes between
//! the bump and the link caches the new header without the link) and shrinking first. The same
//! model also runs with the simulator holding back every READ and atomic as long as InfiniBand
//! allows (`Reordering::Adversarial`): the split as built passes, and a shrinking WRITE that is not
//! fenced behind the header bump — it may then land before the bump — is caught.

#![cfg(loom)]

mod common;

use index_core::broken::{Broken, GetsTrust, SplitOrder};
use index_core::{Store, StoreConfig};
use sim_transport::{Reordering, SimConfig};

fn scenario(order: SplitOrder) {
    scenario_in(order, Reordering::InOrder, true);
}

fn scenario_in(order: SplitOrder, reordering: Reordering, fence_shrink: bool) {
    scenario_trusting(order, reordering, fence_shrink, GetsTrust::Claims);
    // The validated read alone, as a GET falls back to it (and SCANs read): a reader whose cache
    // another thread refreshed between the split's slot claim and its link.
    scenario_trusting(order, reordering, fence_shrink, GetsTrust::HeaderOnly);
}

fn scenario_trusting(
    order: SplitOrder,
    reordering: Reordering,
    fence_shrink: bool,
    gets_trust: GetsTrust,
) {
    // The single-threaded setup (bulk load, two stores attaching) alone makes hundreds of word
    // accesses, each a loom branch point: raise the per-execution budget.
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 50_000;
    if reordering != Reordering::InOrder {
        // The reordered schedule that breaks an unfenced shrink needs four preemptions: the
        // writer starts, runs up to its SLT claim, the reader refreshes and is stopped before its
        // leaf READ, the writer links and shrinks, the reader reads before the bump lands.
        builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(4).max(4));
    }
    builder.check(move || {
        // δ = 2, two full leaves {10, 20} {30, 40} in one slot: inserting 15 splits the first and
        // moves 20 into a new synonym leaf.
        let sim = SimConfig {
            reordering,
            ..SimConfig::default()
        };
        let transport = common::two_full_leaves(4, sim);
        let config = StoreConfig::default();
        let broken = Broken {
            split_order: order,
            fence_shrink,
            gets_trust,
            ..Broken::default()
        };
        let writer_store =
            Store::open_broken(transport.clone(), config.clone(), broken).expect("open");
        let reader_store = Store::open_broken(transport, config, broken).expect("open");
        let writer = loom::thread::spawn(move || {
            let mut client = writer_store.client().expect("client");
            assert!(client.insert(15, 15).expect("insert"));
        });
        let mut reader = reader_store.client().expect("client");
        assert_eq!(
            reader.get(20).expect("get"),
            Some(20),
            "GET missed a key while it moved"
        );
        writer.join().expect("writer");
        assert_eq!(
            reader.get(15).expect("get"),
            Some(15),
            "GET missed the inserted key after the split"
        );
        assert_eq!(
            reader.get(20).expect("get"),
            Some(20),
            "the moved key is lost"
        );
    });
}

fn caught(order: SplitOrder) {
    sim_transport::loom_support::assert_caught(
        || scenario(order),
        "GET missed a key while it moved",
    );
}

#[test]
fn a_get_racing_a_split_finds_the_moving_key() {
    scenario(SplitOrder::Safe);
}

#[test]
fn loom_catches_the_design_split_order() {
    caught(SplitOrder::LinkLast);
}

#[test]
fn loom_catches_shrinking_before_linking() {
    caught(SplitOrder::ShrinkFirst);
}

#[test]
fn under_infiniband_reordering_the_split_as_built_loses_nothing() {
    scenario_in(SplitOrder::Safe, Reordering::Adversarial, true);
}

#[test]
fn loom_catches_an_unfenced_shrink_under_infiniband_reordering() {
    sim_transport::loom_support::assert_caught(
        || scenario_in(SplitOrder::Safe, Reordering::Adversarial, false),
        "GET missed a key while it moved",
    );
}

#[test]
fn loom_catches_a_get_that_trusts_leaves_that_do_not_claim_the_key() {
    sim_transport::loom_support::assert_caught(
        || {
            scenario_trusting(
                SplitOrder::Safe,
                Reordering::InOrder,
                true,
                GetsTrust::AnyLeaf,
            )
        },
        "GET missed",
    );
}
