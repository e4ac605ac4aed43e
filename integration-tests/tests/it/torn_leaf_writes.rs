//! Leaves longer than one packet, cut mid-WRITE: a NIC places a WRITE packet by packet, and a
//! connection cut inside it (a killed process, a fence) leaves a prefix of its packets placed.
//! The simulator here uses 16-byte packets, so the scenarios' 80-byte leaves (δ = 4) span five,
//! and every WRITE of every write scenario is cut after its first and its second packet:
//! - by a compute node killed there, which the memory node declares dead and recovers;
//! - by a live compute node's broken endpoint, whose store recovers the lock itself;
//! - inside the memory node's own repair, which a restarted memory node finishes.
//!
//! Each time: before recovery the lock is held by the writer; a writer on another store waits for
//! the leaf and succeeds; the pool is wholly before or after the cut write (read by a third
//! store); no chain is left damaged; after the queued slots are retrained `verify` is clean and
//! every leaf is held exactly once.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::IndexError;
use integration_tests::recovery::{
    SHORT_LEASE, WAITER_KEY, assert_before_or_after, contents, lease_of, prepare_with_a_filled_box,
    recover_dead_member, retrain_and_verify, spawn_waiter, target_entry, until_recovered,
    verbs_with_a_filled_box,
};
use integration_tests::write_scenarios::{Prepared, SCENARIOS, Scenario, apply, problems};
use retrainer::Retrainer;
use sim_transport::{SimConfig, SimEndpoint};

/// Packets of 16 bytes: the scenarios' leaves are 80 bytes, five packets, so that even the
/// emptied leaf of an unlink (which differs from its old image in its first two words only)
/// tears visibly.
const PACKET: usize = 16;

/// The key a sibling client of the writer's store updates first (in the target leaf).
const SIBLING_KEY: u64 = 600;
const SIBLING_VALUE: u64 = 601;

fn modes() -> [(SimConfig, &'static str); 2] {
    [
        (
            SimConfig {
                packet_bytes: PACKET,
                ..SimConfig::default()
            },
            "in order",
        ),
        (
            SimConfig {
                packet_bytes: PACKET,
                ..SimConfig::harsh()
            },
            "harsh",
        ),
    ]
}

/// The scenario prepared with a filled box, and a sibling client of the writer's store that has
/// rewritten the target leaf: its redo leaf held an image of the leaf, which must not be taken
/// for the image of the write cut later.
fn prepare_with_a_sibling(
    scenario: Scenario,
    sim: SimConfig,
) -> (Prepared, Retrainer<SimEndpoint>) {
    let (mut p, worker) = prepare_with_a_filled_box(scenario, sim);
    let mut sibling = p.store.client().expect("sibling");
    assert_eq!(sibling.update(SIBLING_KEY, SIBLING_VALUE), Ok(true));
    drop(sibling);
    for map in [&mut p.before, &mut p.after] {
        map.insert(SIBLING_KEY, SIBLING_VALUE);
    }
    (p, worker)
}

/// Whether `verify` finds a damaged leaf now.
fn a_leaf_is_torn(p: &Prepared) -> bool {
    problems(&p.transport)
        .iter()
        .any(|problem| matches!(problem, leaf_store::Problem::Leaf { .. }))
}

#[test]
fn a_compute_node_killed_inside_a_leaf_write_loses_nothing() {
    for (sim, mode) in modes() {
        for scenario in SCENARIOS {
            let total = verbs_with_a_filled_box(scenario, sim);
            let (mut cut, mut torn_in_place, mut restored) = (0, 0, 0);
            for k in 0..total {
                // Killed inside verb k + 1 after its first or second packet, or (in order) just
                // before it: between a leaf WRITE and its redo leaf's invalidation, too.
                for packets in 0..=2 {
                    if packets == 0 && mode != "in order" {
                        continue;
                    }
                    let what = format!(
                        "{mode}: {}: killed after packet {packets} of verb {} of {total}",
                        scenario.name,
                        k + 1
                    );
                    let (mut p, mut worker) = prepare_with_a_sibling(scenario, sim);
                    let tag = p.store.member_tags()[0];
                    if packets == 0 {
                        p.client.endpoint_mut().crash_after(k);
                    } else {
                        p.client.endpoint_mut().tear_after(k, packets);
                    }
                    let outcome = apply(&mut p.client, scenario.op);
                    if packets > 0 && !p.client.endpoint_mut().tore() {
                        continue;
                    }
                    cut += 1;
                    assert!(outcome.is_err(), "{what}: {outcome:?}");
                    p.store.stop_renewing();
                    // Before recovery: every leaf WRITE happens under the lock.
                    let entry = target_entry(&p.transport);
                    if packets > 0 {
                        assert!(entry.is_locked(), "{what}: a leaf was cut outside the lock");
                    }
                    if entry.is_locked() {
                        assert_eq!(entry.owner(), tag, "{what}");
                    }
                    torn_in_place += u64::from(a_leaf_is_torn(&p));

                    let waiter = spawn_waiter(&p, Duration::from_secs(10));
                    recover_dead_member(&mut worker);
                    assert_eq!(waiter.join().expect("waiter"), Ok(true), "{what}: waiter");
                    let _ = assert_before_or_after(&p, &what);
                    let stats = worker.member_stats().expect("watching");
                    assert_eq!(stats.rolled_forward.damaged_chains, 0, "{what}: {stats:?}");
                    restored += stats.rolled_forward.leaves_restored;
                    retrain_and_verify(&mut worker, &p.transport, &what);
                }
            }
            assert!(cut > 0, "{mode}: {}: no WRITE was cut", scenario.name);
            assert!(
                torn_in_place > 0 && restored == torn_in_place,
                "{mode}: {}: {torn_in_place} leaves torn in place, {restored} restored",
                scenario.name
            );
        }
    }
}

#[test]
fn a_live_compute_node_restores_a_leaf_its_broken_write_tore() {
    for (sim, mode) in modes() {
        for scenario in SCENARIOS {
            let total = verbs_with_a_filled_box(scenario, sim);
            let mut torn_in_place = 0;
            for k in 0..total {
                for packets in 1..=2 {
                    let what = format!(
                        "{mode}: {}: broken after packet {packets} of verb {} of {total}",
                        scenario.name,
                        k + 1
                    );
                    let (mut p, mut worker) = prepare_with_a_sibling(scenario, sim);
                    p.client.endpoint_mut().tear_after(k, packets);
                    let outcome = apply(&mut p.client, scenario.op);
                    if !p.client.endpoint_mut().tore() {
                        continue;
                    }
                    assert!(
                        matches!(outcome, Err(IndexError::LockMayRemain { .. })),
                        "{what}: {outcome:?}"
                    );
                    let entry = target_entry(&p.transport);
                    assert!(entry.is_locked(), "{what}: cut outside the lock");
                    assert_eq!(entry.owner(), p.store.member_tags()[0], "{what}");
                    torn_in_place += u64::from(a_leaf_is_torn(&p));

                    let waiter = spawn_waiter(&p, Duration::from_secs(10));
                    until_recovered(&mut worker, &p.store, &p.transport, &what);
                    assert_eq!(waiter.join().expect("waiter"), Ok(true), "{what}: waiter");
                    assert!(!p.store.is_fenced(), "{what}: declared dead");
                    let _ = assert_before_or_after(&p, &what);
                    p.store.reconnect(&mut p.client).expect("reconnect");
                    assert_eq!(p.client.get(WAITER_KEY), Ok(Some(WAITER_KEY)), "{what}");
                    retrain_and_verify(&mut worker, &p.transport, &what);
                }
            }
            assert!(
                torn_in_place > 0,
                "{mode}: {}: no leaf was torn in place",
                scenario.name
            );
        }
    }
}

/// A splitting insert killed after its link, before its shrink: recovery trims the split leaf.
/// The memory node is killed inside each of its own WRITEs of that recovery, after each packet;
/// a restarted memory node recovers again and loses nothing.
#[test]
fn a_memory_node_killed_inside_its_own_repair_leaves_what_a_restart_finishes() {
    let scenario = SCENARIOS[3];
    assert_eq!(scenario.name, "splitting insert");
    let sim = modes()[0].0;
    let total = verbs_with_a_filled_box(scenario, sim);
    // The first crash point whose recovery completes a split.
    let k = (0..total)
        .find(|&k| {
            let (mut p, _) = prepare_with_a_filled_box(scenario, sim);
            let mut worker = integration_tests::lease_watcher(&p.transport, SHORT_LEASE);
            worker.check_members().expect("first look");
            p.client.endpoint_mut().crash_after(k);
            let _ = apply(&mut p.client, scenario.op);
            p.store.stop_renewing();
            recover_dead_member(&mut worker);
            worker
                .member_stats()
                .is_some_and(|s| s.rolled_forward.splits_completed > 0)
        })
        .expect("a crash point after the link, before the shrink");
    let mut torn_by_repair = 0;
    let mut cut = 0;
    let mut finished = false;
    for fault in 0.. {
        for packets in 1..=2 {
            let what = format!(
                "dead after verb {k} of {total}; memory node killed after packet {packets} of \
                 its verb {}",
                fault + 1
            );
            let (mut p, _) = prepare_with_a_filled_box(scenario, sim);
            let mut worker = integration_tests::lease_watcher(&p.transport, SHORT_LEASE);
            worker.check_members().expect("first look");
            let tag = p.store.member_tags()[0];
            p.client.endpoint_mut().crash_after(k);
            assert!(apply(&mut p.client, scenario.op).is_err(), "{what}");
            p.store.stop_renewing();
            std::thread::sleep(SHORT_LEASE + Duration::from_millis(5));
            worker.endpoint_mut().tear_after(fault, packets);
            let recovered = worker.check_members();
            if !worker.endpoint_mut().tore() {
                // Past the recovery's last verb: every point was tried.
                finished |= recovered == Ok(1);
                continue;
            }
            cut += 1;
            torn_by_repair += u64::from(a_leaf_is_torn(&p));
            // The memory node restarts on its pool and recovers again.
            let mut restarted = integration_tests::lease_watcher(&p.transport, SHORT_LEASE);
            if lease_of(&p.transport, tag).state() != leaf_store::members::MemberState::Free {
                recover_dead_member(&mut restarted);
            }
            let stats = restarted.member_stats().expect("watching");
            assert_eq!(stats.rolled_forward.damaged_chains, 0, "{what}: {stats:?}");
            let now = contents(&p.transport);
            assert!(now == p.before || now == p.after, "{what}: {now:?}");
            while restarted.retrain_next().expect("retrain").is_some() {}
            assert_eq!(problems(&p.transport), [], "{what}");
        }
        if finished {
            break;
        }
    }
    println!("{cut} WRITEs of the recovery cut, {torn_by_repair} leaving a leaf torn");
    assert!(
        torn_by_repair > 0,
        "no memory node was killed inside a leaf WRITE of its repair"
    );
}

/// A rewrite needs a redo leaf, but not a fresh one: with the pool's allocation counter at its
/// end and the client's redo slot still empty, an update goes through another leaf of its box
/// (which recovery finds there like any box leaf) instead of failing with `PoolExhausted`.
#[test]
fn a_full_pool_does_not_stop_a_rewrite_while_the_box_holds_a_leaf() {
    use rdma_transport::{Endpoint, Transport};
    let scenario = SCENARIOS[1];
    assert_eq!(scenario.name, "update");
    let sim = modes()[0].0;
    let mut p = integration_tests::write_scenarios::prepare_with(scenario, sim);
    let mut ep = p.transport.endpoint().expect("endpoint");
    let layout =
        leaf_store::Layout::attach(&mut ep, p.transport.memory_nodes()[0]).expect("layout");
    let table = leaf_store::members::MemberTable::new(&layout);
    let tag = p.store.member_tags()[0];
    // The box holds one leaf, in a split slot; then the pool is full.
    let leaf = leaf_store::alloc_leaf(&mut ep, &layout).expect("a leaf");
    ep.write_word(
        table.box_addr(tag, 1, 0),
        leaf_store::members::leaf_word(leaf),
    )
    .expect("box");
    ep.write_word(layout.alloc_num_addr(), layout.leaf_capacity())
        .expect("exhaust");
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(apply(&mut p.client, scenario.op), Ok(true));
    let now = contents(&p.transport);
    assert_eq!(now, p.after);
}
