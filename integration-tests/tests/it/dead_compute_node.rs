//! A compute node that dies — at any verb of an insert, an update, a delete, a splitting insert
//! or an unlinking delete — while another compute node waits for the same leaf: the memory node
//! declares it dead when its lease lapses, fences it, and rolls its cut-short write forward. The
//! waiter proceeds, no key that was present is lost, the dead write is applied wholly or not at
//! all, and `verify` is clean once the slots recovery queued are retrained.
//!
//! A compute node that was only paused past its lease finds its resumed write refused (fenced)
//! with nothing changed, and rejoins as a new member.

#![cfg(not(loom))]

use std::sync::Arc;
use std::time::{Duration, Instant};

use index_core::{IndexError, Store, StoreConfig};
use integration_tests::recovery::{
    LEASE, SHORT_LEASE, WAITER_KEY, assert_before_or_after, contents, lease_of,
    prepare_with_a_filled_box, recover_dead_member, retrain_and_verify, spawn_waiter, target_entry,
    traces_of, until_recovered, verbs_with_a_filled_box, watcher,
};
use integration_tests::write_scenarios::{
    SCENARIOS, apply, apply_oracle, other_client, prepare, problems,
};
use rdma_transport::Transport;
use sim_transport::{Gate, SimConfig, SimEndpoint};

/// Runs `op` through `client` on a thread of its own (a writer the test pauses).
fn spawn_write(
    mut client: index_core::Client<SimEndpoint>,
    op: integration_tests::write_scenarios::Op,
) -> std::thread::JoinHandle<Result<bool, IndexError>> {
    std::thread::spawn(move || apply(&mut client, op))
}

#[test]
fn a_compute_node_dying_at_any_verb_of_a_write_costs_a_waiter_a_pause_and_loses_nothing() {
    let mut longest_pause = Duration::ZERO;
    // In order, then with torn words and InfiniBand's reorderings (a crash point then falls
    // between verbs in the order the fabric executed them).
    for (sim, mode) in [
        (SimConfig::default(), "in order"),
        (SimConfig::harsh(), "harsh"),
    ] {
        for scenario in SCENARIOS {
            let total = verbs_with_a_filled_box(scenario, sim);
            let mut held_at_death = 0;
            let mut applied = 0;
            for k in 0..=total {
                let what = format!("{mode}: {}: dead after verb {k} of {total}", scenario.name);
                // The writer's split takes its new leaf from its leaf box.
                let (mut p, mut worker) = prepare_with_a_filled_box(scenario, sim);
                let tag = p.store.member_tags()[0];
                assert_ne!(tag, 0, "{what}: the store joined");

                p.client.endpoint_mut().crash_after(k);
                let outcome = apply(&mut p.client, scenario.op);
                assert_eq!(outcome.is_ok(), k == total, "{what}: {outcome:?}");
                p.store.stop_renewing();
                // Before any recovery: the lock is held exactly when the crash came between the lock
                // CAS and the unlock.
                let entry = target_entry(&p.transport);
                if entry.is_locked() {
                    assert_eq!(entry.owner(), tag, "{what}: the lock names its holder");
                    held_at_death += 1;
                }
                // What recovery relies on: the writer's unlink word is set, and a leaf its box
                // names is linked, only while it holds the lock.
                let (unlinking, boxed_and_linked) = traces_of(&p.transport, tag);
                if unlinking || boxed_and_linked {
                    assert!(
                        entry.is_locked(),
                        "{what}: unlink word set: {unlinking}, a boxed leaf linked: \
                         {boxed_and_linked}, but the lock is free"
                    );
                }

                // Another compute node writes the same leaf meanwhile.
                let waiter = {
                    let transport = p.transport.clone();
                    std::thread::spawn(move || {
                        let mut client = other_client(&transport, Duration::from_secs(10));
                        let started = Instant::now();
                        let result = client.insert(WAITER_KEY, WAITER_KEY);
                        (result, started.elapsed())
                    })
                };
                let half_unlinked = integration_tests::recovery::half_unlinked(&p.transport, tag);
                recover_dead_member(&mut worker);
                let (result, waited) = waiter.join().expect("waiter");
                assert_eq!(result, Ok(true), "{what}: the waiter's insert");
                // A leaf its unlink took out of the chain unmarked: recovery marks its slot freed
                // (and bumps the header), and the leaf waits for the retraining. Handed out at once,
                // a compute node whose view still links it would write it as this chain's after
                // its header check passed, while it served another.
                if let Some(leaf) = half_unlinked {
                    assert!(
                        integration_tests::recovery::named_by_a_freed_slot(&p.transport, leaf),
                        "{what}: leaf {leaf} unlinked but its slot not marked freed"
                    );
                    assert!(
                        !worker.free_leaves().contains(&leaf),
                        "{what}: leaf {leaf} handed out while its record still names it"
                    );
                }
                longest_pause = longest_pause.max(waited);

                applied += u64::from(assert_before_or_after(&p, &what));

                // The dead node stays cut off: a new client of its store is refused.
                assert!(
                    matches!(p.store.client(), Err(IndexError::Fenced { .. })),
                    "{what}: the fenced node registered a new client"
                );
                let stats = worker.member_stats().expect("watching");
                assert_eq!((stats.deaths, stats.recoveries), (1, 1), "{what}");
                retrain_and_verify(&mut worker, &p.transport, &what);
            }
            assert!(
                held_at_death > 0,
                "{}: no crash point held the lock",
                scenario.name
            );
            assert!(
                applied > 0,
                "{}: no cut-short write was rolled forward",
                scenario.name
            );
        }
    }
    println!("longest pause of a waiter: {longest_pause:?} (lease {LEASE:?})");
}

#[test]
fn a_paused_compute_node_is_fenced_its_resumed_write_changes_nothing_and_it_rejoins() {
    for scenario in SCENARIOS {
        let what = scenario.name;
        let mut p = prepare(scenario);
        let mut worker = watcher(&p.transport);
        // The writer stops after its lock batch, holding the lock, for as long as the test says;
        // its renewals stop with it.
        let gate = Gate::new();
        p.client.endpoint_mut().pause_after(1, gate.clone());
        let store = Arc::new(p.store);
        let victim = spawn_write(p.client, scenario.op);
        assert!(
            gate.wait_for_arrival(Duration::from_secs(5)),
            "{what}: paused"
        );
        store.stop_renewing();
        assert!(
            target_entry(&p.transport).is_locked(),
            "{what}: paused holding the lock"
        );

        let mut waiter = other_client(&p.transport, Duration::from_secs(10));
        recover_dead_member(&mut worker);
        assert_eq!(
            waiter.insert(WAITER_KEY, WAITER_KEY),
            Ok(true),
            "{what}: the waiter goes on"
        );
        gate.open();
        let resumed = victim.join().expect("victim");
        assert!(
            matches!(resumed, Err(IndexError::Fenced { .. })),
            "{what}: the resumed write must fail as fenced, got {resumed:?}"
        );
        let mut expected = p.before.clone();
        expected.insert(WAITER_KEY, WAITER_KEY);
        assert_eq!(
            contents(&p.transport),
            expected,
            "{what}: the resumed write changed something"
        );
        // A splitting insert that foresaw its split allocated its leaf in the lock batch it was
        // paused after: nobody holds that leaf, and the orphan sweep frees it.
        let orphans = integration_tests::recovery::reclaim_orphans(&mut worker, what);
        assert!(orphans <= 1, "{what}: {orphans} orphans");
        retrain_and_verify(&mut worker, &p.transport, what);

        // Rejoining: a new store is a new member, with a new tag or incarnation.
        drop(store);
        let again = Store::open(p.transport.clone(), StoreConfig::default()).expect("rejoin");
        let mut client = again.client().expect("client");
        assert_eq!(
            apply(&mut client, scenario.op),
            Ok(true),
            "{what}: after rejoining"
        );
        apply_oracle(&mut expected, scenario.op);
        assert_eq!(contents(&p.transport), expected, "{what}");
        assert_eq!(problems(&p.transport), [], "{what}");
    }
}

/// Live compute nodes take their splits' leaves from the leaf boxes the memory node keeps filled
/// (retraining, which frees emptied leaves, runs all along): every leaf stays accounted for, and
/// none is linked twice.
#[test]
fn leaf_boxes_serve_splits_while_the_memory_node_refills_them() {
    let loaded: Vec<u64> = (0..300).map(|i| i * 1000).collect();
    let (transport, _) = integration_tests::load(
        &loaded,
        3000,
        &integration_tests::tiny(),
        SimConfig::harsh(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        // No compute node dies here: a long lease, so a starved renewer is never taken for dead.
        let mut worker = integration_tests::lease_watcher(&transport, Duration::from_secs(30));
        worker.check_members().expect("first look at the leases");
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            worker
                .run(|| stop.load(std::sync::atomic::Ordering::Acquire))
                .expect("worker");
            worker
        })
    };
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let transport = transport.clone();
            std::thread::spawn(move || {
                let store = Store::open(
                    transport,
                    StoreConfig {
                        wait_limit: Duration::from_secs(10),
                        ..StoreConfig::default()
                    },
                )
                .expect("open");
                let mut client = store.client().expect("client");
                for i in 0..1500u64 {
                    // Spread over every gap of the loaded keys.
                    let key = (i % 300) * 1000 + 1 + 2 * (i / 300) + w;
                    assert_eq!(client.insert(key, key), Ok(true), "insert {key}");
                    if i % 3 == 0 {
                        assert_eq!(client.delete(key), Ok(true), "delete {key}");
                    }
                }
                drop(client);
                store.leaves_forgotten()
            })
        })
        .collect();
    let forgotten: u64 = writers
        .into_iter()
        .map(|writer| writer.join().expect("writer"))
        .sum();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let mut worker = worker.join().expect("worker thread");
    // Spares an insert allocated foreseeing a split that did not come (the other writer's delete
    // had made room), and could not park in a full box, are held by nobody: the orphan sweep
    // frees exactly those.
    assert_eq!(
        integration_tests::recovery::reclaim_orphans(&mut worker, "after the writers"),
        forgotten,
        "the orphan sweep frees the forgotten spares"
    );
    let stats = worker.member_stats().expect("watching");
    assert!(
        stats.leaves_granted > 0,
        "no leaf went through a box: {stats:?}"
    );
    retrain_and_verify(&mut worker, &transport, "after the writers");
}

/// A compute node stopped *inside* a batch (its lock held, its commit in flight) while its lease
/// lapses, and a second compute node that simply dies: the memory node's checks never wait on the
/// stopped one — the other is recovered and the worker goes on at once — and nothing of the
/// stopped one is rolled forward under its feet. Once it resumes, its batch in flight lands whole,
/// the fence completes, and its recovery finishes.
#[test]
fn a_compute_node_stopped_inside_a_batch_holds_up_no_other_recovery_and_no_check() {
    // A delete: its second batch rewrites the leaf and unlocks.
    let scenario = SCENARIOS[2];
    assert_eq!(scenario.name, "delete");
    let mut p = prepare(scenario);
    let mut worker = watcher(&p.transport);
    let gate = Gate::new();
    // Inside its second batch (the commit), before its first verb: the lock is held.
    p.client.endpoint_mut().pause_inside(1, gate.clone());
    let stopped_store = Arc::new(p.store);
    let stopped = spawn_write(p.client, scenario.op);
    assert!(gate.wait_for_arrival(Duration::from_secs(5)), "stopped");
    stopped_store.stop_renewing();
    // A second compute node dies (its renewals stop).
    let other = Store::open(p.transport.clone(), StoreConfig::default()).expect("open");
    let other_tags = other.member_tags();
    other.stop_renewing();
    std::mem::forget(other);
    assert!(
        target_entry(&p.transport).is_locked(),
        "stopped holding the lock"
    );

    let started = Instant::now();
    let mut recovered = 0;
    while recovered == 0 {
        let check = Instant::now();
        recovered += worker.check_members().expect("check");
        assert!(
            check.elapsed() < Duration::from_secs(1),
            "a check waited {:?} on the stopped compute node",
            check.elapsed()
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the dead compute node was never recovered: {:?} {:?}",
            worker.member_stats(),
            worker.member_problem()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // More checks while it stays stopped: each is quick, and its fence stays in flight.
    for _ in 0..20 {
        let check = Instant::now();
        assert_eq!(worker.check_members().expect("check"), 0);
        assert!(check.elapsed() < Duration::from_secs(1));
    }
    let stats = worker.member_stats().expect("watched");
    assert_eq!(
        stats.recoveries, 1,
        "only the dead node is recovered: {stats:?}"
    );
    assert!(stats.fences_in_flight > 0, "{stats:?}");
    assert!(
        target_entry(&p.transport).is_locked(),
        "the stopped node's lock was released with its batch in flight"
    );
    assert_eq!(
        contents(&p.transport),
        p.before,
        "the stopped node's write was rolled forward under its feet"
    );
    // The other node's tag is free again.
    let mut ep = p.transport.endpoint().expect("endpoint");
    let layout =
        leaf_store::Layout::attach(&mut ep, p.transport.memory_nodes()[0]).expect("layout");
    let leases = leaf_store::members::MemberTable::new(&layout)
        .read_leases(&mut ep)
        .expect("leases");
    assert_eq!(
        leases[usize::from(other_tags[0])].state(),
        leaf_store::members::MemberState::Free
    );

    // Resumed, its batch in flight lands whole; the fence then completes and recovery finishes.
    gate.open();
    let resumed = stopped.join().expect("stopped writer");
    recover_dead_member(&mut worker);
    let mut waiter = other_client(&p.transport, Duration::from_secs(10));
    assert_eq!(waiter.insert(WAITER_KEY, WAITER_KEY), Ok(true));
    let mut expected = match resumed {
        Ok(true) => p.after.clone(),
        Ok(false) => panic!("the insert found its key present"),
        Err(_) => {
            // Its commit landed or not: the pool shows one of the two, wholly.
            let now = contents(&p.transport);
            if now.contains_key(&scenario_key(scenario)) {
                p.after.clone()
            } else {
                p.before.clone()
            }
        }
    };
    expected.insert(WAITER_KEY, WAITER_KEY);
    assert_eq!(contents(&p.transport), expected);
    retrain_and_verify(&mut worker, &p.transport, "stopped inside a batch");
}

/// The key a scenario's write changes.
fn scenario_key(scenario: integration_tests::write_scenarios::Scenario) -> u64 {
    use integration_tests::write_scenarios::Op;
    match scenario.op {
        Op::Insert(k) | Op::Update(k, _) | Op::Delete(k) => k,
    }
}

/// A memory node that dies at any verb of a recovery (its endpoint crashes; a restarted worker
/// recovers again), for a compute node that died inside an unlinking delete: no attempt ever
/// leaves one of the dead node's locks released while its unlink word still names a leaf. (Once a
/// lock is released, a retraining may free that leaf into a live client's box; a later attempt
/// that read the word would then free it a second time while a live split links it.) The
/// restarted worker finishes, and `verify` is clean.
#[test]
fn a_recovery_cut_short_never_releases_a_lock_before_settling_the_unlink_word() {
    let scenario = SCENARIOS[4];
    assert_eq!(scenario.name, "unlinking delete");
    let total = verbs_with_a_filled_box(scenario, SimConfig::default());
    // The first crash point that leaves the word set (the others recover alike).
    let k = (0..total)
        .find(|&k| {
            let (mut p, _worker) = prepare_with_a_filled_box(scenario, SimConfig::default());
            let tag = p.store.member_tags()[0];
            p.client.endpoint_mut().crash_after(k);
            let _ = apply(&mut p.client, scenario.op);
            p.store.stop_renewing();
            traces_of(&p.transport, tag).0
        })
        .expect("a crash point with the unlink word set");
    let mut released_before_settled = Vec::new();
    for fault in 0.. {
        let what = format!("dead after verb {k} of {total}, memory node dead at verb {fault}");
        let (mut p, _) = prepare_with_a_filled_box(scenario, SimConfig::default());
        // No live compute node here: a short lease keeps the many rounds quick.
        let mut worker = integration_tests::lease_watcher(&p.transport, SHORT_LEASE);
        worker.check_members().expect("first look");
        let tag = p.store.member_tags()[0];
        p.client.endpoint_mut().crash_after(k);
        assert!(apply(&mut p.client, scenario.op).is_err(), "{what}");
        p.store.stop_renewing();
        std::thread::sleep(SHORT_LEASE + Duration::from_millis(5));
        worker.endpoint_mut().crash_after(fault);
        let recovered = worker.check_members();
        if !worker.endpoint_mut().is_crashed() {
            assert_eq!(recovered, Ok(1), "{what}");
            assert!(fault > 0, "no recovery was cut short");
            break;
        }
        let (unlinking, _) = traces_of(&p.transport, tag);
        if unlinking && !target_entry(&p.transport).is_locked() {
            released_before_settled.push(fault);
        }
        // The memory node restarts and recovers again.
        let mut restarted = integration_tests::lease_watcher(&p.transport, SHORT_LEASE);
        if lease_of(&p.transport, tag).state() != leaf_store::members::MemberState::Free {
            recover_dead_member(&mut restarted);
        }
        while restarted.retrain_next().expect("retrain").is_some() {}
        assert_eq!(problems(&p.transport), [], "{what}");
    }
    assert_eq!(
        released_before_settled,
        Vec::<u64>::new(),
        "recoveries cut at these verbs left a lock released while the unlink word still named a \
         leaf"
    );
}

// A live compute node whose operation cut short may have left a lock held (its endpoint broke
// mid-write: on a NIC any failed batch does): it recovers the lock itself, without being declared
// dead, once the memory node has fenced the failed connection.

#[test]
fn a_live_compute_node_recovers_a_lock_its_broken_operation_left_and_loses_nothing() {
    for (sim, mode) in [
        (SimConfig::default(), "in order"),
        (SimConfig::harsh(), "harsh"),
    ] {
        for scenario in SCENARIOS {
            let total = verbs_with_a_filled_box(scenario, sim);
            let mut left_held = 0;
            for k in 0..total {
                let what = format!(
                    "{mode}: {}: endpoint broken after verb {k} of {total}",
                    scenario.name
                );
                let (mut p, mut worker) = prepare_with_a_filled_box(scenario, sim);
                p.client.endpoint_mut().crash_after(k);
                let outcome = apply(&mut p.client, scenario.op);
                if !matches!(outcome, Err(IndexError::LockMayRemain { .. })) {
                    continue;
                }
                // Before any recovery: the lock is held by this (live) compute node, and a
                // reader on another store sees the pool before or after the write.
                let held = target_entry(&p.transport);
                if !held.is_locked() {
                    continue;
                }
                left_held += 1;
                assert_eq!(held.owner(), p.store.member_tags()[0], "{what}");
                let seen = contents(&p.transport);
                assert!(seen == p.before || seen == p.after, "{what}: {seen:?}");
                // The client must get a new endpoint before it goes on.
                assert!(
                    p.client.get(0).is_err_and(|e| e.is_connection_lost()),
                    "{what}: the retired client was used"
                );
                let waiter = spawn_waiter(&p, Duration::from_secs(10));
                until_recovered(&mut worker, &p.store, &p.transport, &what);
                assert_eq!(
                    waiter.join().expect("waiter"),
                    Ok(true),
                    "{what}: the waiter"
                );
                assert!(!p.store.is_fenced(), "{what}: declared dead");
                let stats = worker.member_stats().expect("watching");
                assert_eq!(stats.deaths, 0, "{what}: {stats:?}");
                assert!(stats.revoked_connections > 0, "{what}: {stats:?}");
                let _ = assert_before_or_after(&p, &what);
                // The client goes on under a new connection.
                p.store.reconnect(&mut p.client).expect("reconnect");
                assert_eq!(
                    p.client.get(WAITER_KEY),
                    Ok(Some(WAITER_KEY)),
                    "{what}: after reconnecting"
                );
                retrain_and_verify(&mut worker, &p.transport, &what);
            }
            assert!(
                left_held > 0,
                "{mode}: {}: no broken operation left the lock held",
                scenario.name
            );
        }
    }
}

/// A split whose ending batch broke after linking its box leaf but before clearing the box slot,
/// its client then dropped and a new client created on the same store: the new client never
/// takes that leaf from the box (its connection index, and the box with it, stay with the
/// store's recovery), so no leaf is ever linked twice.
#[test]
fn a_client_created_after_a_broken_split_never_takes_its_box_leaf_again() {
    let scenario = SCENARIOS[3];
    assert_eq!(scenario.name, "splitting insert");
    let total = verbs_with_a_filled_box(scenario, SimConfig::default());
    let mut linked_and_boxed = 0;
    for k in 0..total {
        let what = format!("broken after verb {k} of {total}");
        // The renewer (which recovers the lock) waits long enough for the new client to split.
        let p = integration_tests::write_scenarios::prepare_configured(
            scenario,
            SimConfig::default(),
            StoreConfig {
                lease_renewal: Duration::from_millis(40),
                ..StoreConfig::default()
            },
        );
        let mut p = p;
        let mut worker = watcher(&p.transport);
        worker.fill_boxes().expect("fill");
        std::thread::sleep(Duration::from_millis(2));
        let tag = p.store.member_tags()[0];
        p.client.endpoint_mut().crash_after(k);
        if !matches!(
            apply(&mut p.client, scenario.op),
            Err(IndexError::LockMayRemain { .. })
        ) {
            continue;
        }
        let (_, boxed_and_linked) = traces_of(&p.transport, tag);
        linked_and_boxed += u64::from(boxed_and_linked);
        drop(p.client);
        // A new client splits leaves of other slots at once, taking leaves from its box.
        let mut client = p.store.client().expect("client");
        for key in [1_001, 1_002, 1_003, 1_004, 2_001, 2_002, 2_003, 2_004] {
            assert_eq!(client.insert(key, key), Ok(true), "{what}: {key}");
        }
        let twice: Vec<_> = problems(&p.transport)
            .into_iter()
            .filter(|p| matches!(p, leaf_store::Problem::LeafReachableTwice { .. }))
            .collect();
        assert_eq!(twice, [], "{what}: a leaf linked twice");
        until_recovered(&mut worker, &p.store, &p.transport, &what);
        retrain_and_verify(&mut worker, &p.transport, &what);
    }
    assert!(
        linked_and_boxed > 0,
        "no broken split left its box leaf linked and still boxed"
    );
}

/// An update whose ending batch loses its completion while its verbs are still executing (a NIC
/// working through a queue pair whose completion timed out): the operation reports
/// `LockMayRemain`, but the store must not repair and release the lock until the memory node has
/// fenced the connection — which waits for the batch in flight. Released earlier, a waiter's
/// insert into the same leaf would be overwritten when the late batch lands.
#[test]
fn a_lock_is_recovered_only_after_the_failed_batch_can_no_longer_land() {
    let scenario = SCENARIOS[1];
    assert_eq!(scenario.name, "update");
    let (mut p, mut worker) = prepare_with_a_filled_box(scenario, SimConfig::default());
    let late = Gate::new();
    // Batch 1 takes the lock; batch 2 (the leaf WRITE and the unlock) lands late.
    p.client.endpoint_mut().land_late(1, late.clone());
    let outcome = apply(&mut p.client, scenario.op);
    assert!(
        matches!(outcome, Err(IndexError::LockMayRemain { .. })),
        "{outcome:?}"
    );
    assert!(late.wait_for_arrival(Duration::from_secs(5)));
    assert!(target_entry(&p.transport).is_locked());
    let waiter = spawn_waiter(&p, Duration::from_secs(20));
    // The memory node runs; the batch is still in flight, so the lock must stay put.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(200) {
        worker.fill_boxes().expect("fill");
        worker.check_members().expect("check");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        target_entry(&p.transport).is_locked(),
        "the lock was released while the failed batch could still land"
    );
    assert_eq!(p.store.unrecovered_locks(), 1);
    // The late batch lands (its WRITE and its unlock); the fence completes; recovery ends.
    late.open();
    until_recovered(&mut worker, &p.store, &p.transport, "landed late");
    assert_eq!(waiter.join().expect("waiter"), Ok(true));
    let mut expected = p.after.clone();
    expected.insert(WAITER_KEY, WAITER_KEY);
    assert_eq!(
        contents(&p.transport),
        expected,
        "the late batch overwrote what another writer did after the lock was released"
    );
    assert!(!p.store.is_fenced());
    retrain_and_verify(&mut worker, &p.transport, "landed late");
}

/// The same late batch, and then a sibling client of the same store whose update of the same
/// leaf loses the completion of its lock batch (its CAS failed against the leftover lock, but it
/// cannot know): two retired indexes name one lock, and the second is fenced at once. The lock
/// must stay held until both are: settled on its own, the second released it under the first's
/// batch, whose WRITEs then landed on a chain repaired without them (the seeded simulation found
/// it as a split's shrink landing late and losing the keys it moved, seed 203).
#[test]
fn a_lock_two_retired_indexes_name_waits_for_both_fences() {
    let scenario = SCENARIOS[1];
    assert_eq!(scenario.name, "update");
    let (mut p, mut worker) = prepare_with_a_filled_box(scenario, SimConfig::default());
    let late = Gate::new();
    p.client.endpoint_mut().land_late(1, late.clone());
    let outcome = apply(&mut p.client, scenario.op);
    assert!(
        matches!(outcome, Err(IndexError::LockMayRemain { .. })),
        "{outcome:?}"
    );
    assert!(late.wait_for_arrival(Duration::from_secs(5)));
    let mut sibling = p.store.client().expect("client");
    sibling.endpoint_mut().break_after(0);
    let outcome = apply(&mut sibling, scenario.op);
    assert!(
        matches!(outcome, Err(IndexError::LockMayRemain { .. })),
        "{outcome:?}"
    );
    assert_eq!(p.store.unrecovered_locks(), 2);
    // The memory node fences the sibling's connection at once, the first one's not while its
    // batch is in flight: the lock stays put.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(200) {
        worker.fill_boxes().expect("fill");
        worker.check_members().expect("check");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        target_entry(&p.transport).is_locked(),
        "the lock was released while a batch of an index naming it could still land"
    );
    assert_eq!(p.store.unrecovered_locks(), 2);
    late.open();
    until_recovered(&mut worker, &p.store, &p.transport, "two indexes, one late");
    assert_eq!(contents(&p.transport), p.after);
    retrain_and_verify(&mut worker, &p.transport, "two indexes, one late");
}
