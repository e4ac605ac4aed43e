use std::sync::Arc;
use std::time::Duration;

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::{Config, Outcome, Strategy, pause, run, thread, time::Instant};

fn config(seed: u64, strategy: Strategy) -> Config {
    Config {
        seed,
        strategy,
        max_steps: 100_000,
        stall_limit: Duration::from_secs(20),
        ..Config::default()
    }
}

/// Two threads increment a counter by a load and a store (a lost update when they interleave);
/// the run fails if an update was lost.
fn lost_update(seed: u64, strategy: Strategy) -> Outcome {
    run(config(seed, strategy), || {
        let counter = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let counter = Arc::clone(&counter);
                thread::spawn(move || {
                    for _ in 0..3 {
                        let v = counter.load(Ordering::SeqCst);
                        counter.store(v + 1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("join");
        }
        if counter.load(Ordering::SeqCst) != 6 {
            crate::fail("an update was lost");
        }
    })
    .outcome
}

#[test]
fn both_strategies_find_a_lost_update_and_some_schedules_miss_it() {
    for strategy in [
        Strategy::Random,
        Strategy::Pct {
            depth: 2,
            steps: 30,
        },
    ] {
        let outcomes: Vec<Outcome> = (0..40)
            .map(|seed| lost_update(seed, strategy.clone()))
            .collect();
        let failed = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Panicked { .. }))
            .count();
        assert!(failed > 0, "{strategy:?} never lost an update in 40 seeds");
        assert!(failed < 40, "{strategy:?} lost an update in every schedule");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Outcome::Finished | Outcome::Panicked { .. }))
        );
    }
}

#[test]
fn a_seed_replays_the_same_choices() {
    let trace = |seed| {
        run(config(seed, Strategy::Random), || {
            let m = Arc::new(Mutex::new(Vec::new()));
            let hs: Vec<_> = (0..3)
                .map(|i| {
                    let m = Arc::clone(&m);
                    thread::spawn(move || {
                        for j in 0..5 {
                            m.lock().expect("lock").push(i * 10 + j);
                            thread::yield_now();
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().expect("join");
            }
        })
    };
    let (a, b, c) = (trace(7), trace(7), trace(8));
    assert_eq!(a.outcome, Outcome::Finished);
    assert_eq!((a.trace, a.steps), (b.trace, b.steps));
    assert_ne!(a.trace, c.trace);
}

#[test]
fn a_mutex_excludes_and_sleep_is_virtual() {
    let report = run(config(3, Strategy::Random), || {
        let m = Arc::new(Mutex::new(0u64));
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let m = Arc::clone(&m);
                thread::spawn(move || {
                    for _ in 0..4 {
                        let mut g = m.lock().expect("lock");
                        let v = *g;
                        thread::yield_now();
                        *g = v + 1;
                    }
                })
            })
            .collect();
        let started = Instant::now();
        thread::sleep(Duration::from_secs(3600));
        assert!(started.elapsed() >= Duration::from_secs(3600));
        for h in hs {
            h.join().expect("join");
        }
        assert_eq!(*m.lock().expect("lock"), 12);
    });
    assert_eq!(report.outcome, Outcome::Finished);
    assert!(report.virtual_time >= Duration::from_secs(3600));
}

#[test]
fn a_paused_group_does_not_run_until_its_time() {
    let report = run(config(5, Strategy::Random), || {
        let counter = Arc::new(AtomicU64::new(0));
        let group = crate::new_group();
        let c = Arc::clone(&counter);
        let h = thread::spawn_in(group, "paused", move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .expect("spawn");
        pause(group, Duration::from_secs(10));
        let start = Instant::now();
        while counter.load(Ordering::SeqCst) == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        // Either it ran before the pause took effect, or only after ten seconds.
        let waited = start.elapsed();
        assert!(waited < Duration::from_millis(5) || waited >= Duration::from_secs(9));
        h.join().expect("join");
    });
    assert_eq!(report.outcome, Outcome::Finished);
}

#[test]
fn a_paused_group_says_so_until_its_pause_ends() {
    let report = run(config(3, Strategy::Random), || {
        let group = crate::new_group();
        assert!(!crate::is_paused(group));
        crate::pause(group, Duration::from_millis(10));
        assert!(crate::is_paused(group));
        thread::sleep(Duration::from_millis(11));
        assert!(!crate::is_paused(group));
    });
    assert_eq!(report.outcome, Outcome::Finished);
    assert!(!crate::is_paused(crate::Group(0)), "outside a run");
}

#[test]
fn a_step_pause_stops_the_group_at_the_named_step_it_counts_to() {
    for seed in 0..20 {
        let report = run(config(seed, Strategy::Random), || {
            let group = crate::new_group();
            // Armed before the thread exists: it passes "x: a" and, of the steps named "x: ...",
            // skips one and stops at "x: b" for ten seconds.
            crate::pause_at_step(group, "x:", 1, Duration::from_secs(10));
            let h = thread::spawn_in(group, "stepper", move || {
                let start = Instant::now();
                crate::step("y: a");
                crate::step("x: a");
                let after_a = start.elapsed();
                crate::step("x: b");
                let after_b = start.elapsed();
                crate::step("x: c");
                (after_a, after_b)
            })
            .expect("spawn");
            let (after_a, after_b) = h.join().expect("join");
            assert!(
                after_a < Duration::from_millis(5),
                "paused at a: {after_a:?}"
            );
            assert!(
                after_b >= Duration::from_secs(10),
                "not paused at b: {after_b:?}"
            );
            // Disarmed, a plan is never met.
            crate::pause_at_step(group, "", 0, Duration::from_secs(10));
            crate::disarm_step_pause(group);
            let start = Instant::now();
            thread::spawn_in(group, "free", || crate::step("d"))
                .expect("spawn")
                .join()
                .expect("join");
            assert!(start.elapsed() < Duration::from_millis(5));
        });
        assert_eq!(report.outcome, Outcome::Finished, "seed {seed}");
        assert_eq!(report.paused_at, vec!["x: b"], "seed {seed}");
    }
}

#[test]
fn a_step_action_runs_on_the_thread_that_meets_the_step_before_its_group_stops() {
    for seed in 0..20 {
        let report = run(config(seed, Strategy::Random), || {
            let group = crate::new_group();
            let seen = std::sync::Arc::new(AtomicU64::new(0));
            let set = std::sync::Arc::clone(&seen);
            crate::pause_at_step_then(group, "x:", 0, Duration::from_secs(10), move || {
                // Another thread's view: the step's thread runs this, before it stops.
                set.store(
                    u64::from(crate::current_group() == group) + 1,
                    Ordering::SeqCst,
                );
            });
            let watcher = std::sync::Arc::clone(&seen);
            let h = thread::spawn_in(group, "stepper", move || {
                let start = Instant::now();
                assert_eq!(watcher.load(Ordering::SeqCst), 0, "ran before the step");
                crate::step("x: a");
                start.elapsed()
            })
            .expect("spawn");
            // Within the pause, the action has run on the stepping thread.
            while seen.load(Ordering::SeqCst) == 0 {
                thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(
                seen.load(Ordering::SeqCst),
                2,
                "ran on another group's thread"
            );
            let paused = h.join().expect("join");
            assert!(paused >= Duration::from_secs(10), "not paused: {paused:?}");
            // Replaced before it is met, a plan's action never runs.
            let never = std::sync::Arc::new(AtomicU64::new(0));
            let touch = std::sync::Arc::clone(&never);
            crate::pause_at_step_then(group, "y", 0, Duration::ZERO, move || {
                touch.store(1, Ordering::SeqCst);
            });
            crate::disarm_step_pause(group);
            thread::spawn_in(group, "free", || crate::step("y"))
                .expect("spawn")
                .join()
                .expect("join");
            assert_eq!(never.load(Ordering::SeqCst), 0);
        });
        assert_eq!(report.outcome, Outcome::Finished, "seed {seed}");
    }
}

#[test]
fn a_panic_and_a_livelock_are_reported() {
    let report = run(config(1, Strategy::Random), || {
        let h = thread::spawn(|| panic!("boom"));
        let _ = h.join();
    });
    assert!(matches!(report.outcome, Outcome::Panicked { ref message, .. } if message == "boom"));
    let report = run(config(1, Strategy::Random), || {
        let flag = AtomicU64::new(0);
        while flag.load(Ordering::SeqCst) == 0 {}
    });
    assert_eq!(report.outcome, Outcome::StepLimit);
}

#[test]
fn outside_a_run_everything_is_std() {
    assert!(!crate::is_simulated());
    let m = Mutex::new(1);
    *m.lock().expect("lock") += 1;
    assert_eq!(*m.lock().expect("lock"), 2);
    let h = thread::spawn(|| 5);
    assert_eq!(h.join().expect("join"), 5);
    let t = Instant::now();
    thread::sleep(Duration::from_millis(2));
    assert!(t.elapsed() >= Duration::from_millis(2));
}

#[test]
fn ghost_holds_say_what_was_taken_twice_or_used_after_a_reclaim() {
    use crate::ghost;
    let report = run(config(1, Strategy::Random), || {
        // Held by two threads at once: the first to take it may not put it after (a holder
        // that lost it to a fault never does).
        ghost::take("lock", 1);
        thread::spawn(|| {
            ghost::take("lock", 1);
            ghost::put("lock", 1);
        })
        .join()
        .expect("join");
        if !ghost::conflicts().is_empty() {
            crate::fail("a conflict before the first holder's put");
        }
        ghost::put("lock", 1);
        // One that lost it hands it on (its process does not know yet): the next holder may
        // not put it either.
        ghost::take("lock", 4);
        thread::spawn(|| {
            ghost::take("lock", 4);
            ghost::put("lock", 4);
        })
        .join()
        .expect("join");
        ghost::hand("lock", 4);
        thread::spawn(|| {
            ghost::receive("lock", 4);
            ghost::excuse("lock", 4);
            let _ = ghost::take_mine();
        })
        .join()
        .expect("join");
        // A hand-over with nobody else in between passes nothing on.
        ghost::take("lock", 6);
        ghost::hand("lock", 6);
        thread::spawn(|| {
            ghost::receive("lock", 6);
            ghost::put("lock", 6);
        })
        .join()
        .expect("join");
        // Reclaimed from a holder that then lets go of it: no conflict; one that puts it to
        // use: a conflict.
        ghost::take("leaf", 2);
        ghost::take("leaf", 3);
        ghost::reclaim("leaf", 2);
        ghost::reclaim("leaf", 3);
        ghost::forget("leaf", 2);
        ghost::put("leaf", 3);
        let conflicts = ghost::conflicts();
        if conflicts.len() != 2
            || !conflicts[0].contains("lock 0x1 put by task")
            || !conflicts[0].contains("took it while this one held it")
            || !conflicts[1].contains("leaf 0x3 put to use")
        {
            crate::fail(&format!("conflicts: {conflicts:?}"));
        }
        // The ledger, in order: a forget of what the thread does not hold is not on it, nor one
        // of what the sweep reclaimed from its hands (that reclaim says so).
        ghost::forget("leaf", 9);
        ghost::take("leaf", 5);
        ghost::excuse("leaf", 5);
        let ledger = ghost::ledger();
        let expected = [
            ghost::Entry::FirstTaken("lock", 1),
            ghost::Entry::FirstTaken("lock", 4),
            ghost::Entry::Excused("lock", 4),
            ghost::Entry::FirstTaken("lock", 6),
            ghost::Entry::FirstTaken("leaf", 2),
            ghost::Entry::FirstTaken("leaf", 3),
            ghost::Entry::Reclaimed("leaf", 2, true),
            ghost::Entry::Reclaimed("leaf", 3, true),
            ghost::Entry::FirstTaken("leaf", 5),
            ghost::Entry::Excused("leaf", 5),
        ];
        if ledger != expected {
            crate::fail(&format!("ledger: {ledger:?}"));
        }
        // What this thread holds: leaf 5; taken, it is held no more.
        if ghost::take_mine() != [("leaf", 5)] || !ghost::take_mine().is_empty() {
            crate::fail("take_mine");
        }
    });
    assert_eq!(report.outcome, Outcome::Finished);
}

#[test]
fn a_thread_s_lanes_hold_apart() {
    use crate::ghost;
    let report = run(config(1, Strategy::Random), || {
        // Lane 1 takes a leaf; lane 2 ends holding nothing, lane 1 holding it.
        ghost::as_lane(1, || ghost::take("leaf", 5));
        let (two, one) = (
            ghost::as_lane(2, ghost::take_mine),
            ghost::as_lane(1, ghost::take_mine),
        );
        if !two.is_empty() || one != [("leaf", 5)] || !ghost::take_mine().is_empty() {
            crate::fail(&format!("lane 2 {two:?}, lane 1 {one:?}"));
        }
        // A lock lane 1 holds, lane 2 takes (lane 1 lost it): lane 1's put is a conflict that
        // names its lane; a hand-over between lanes of one thread is none.
        ghost::as_lane(1, || ghost::take("lock", 8));
        ghost::as_lane(2, || ghost::take("lock", 8));
        ghost::as_lane(1, || ghost::put("lock", 8));
        ghost::as_lane(2, || ghost::hand("lock", 8));
        ghost::as_lane(3, || ghost::receive("lock", 8));
        ghost::as_lane(3, || ghost::put("lock", 8));
        let conflicts = ghost::conflicts();
        if conflicts.len() != 1 || !conflicts[0].contains("put by task 0 (lane 1)") {
            crate::fail(&format!("conflicts: {conflicts:?}"));
        }
        // Steps: each lane's pass of an order is its own (as one thread's, "b" after "c" would
        // break the order).
        ghost::require_order(&["a", "b", "c"]);
        ghost::as_lane(1, || crate::step("a"));
        ghost::as_lane(2, || crate::step("a"));
        ghost::as_lane(1, || crate::step("c"));
        ghost::as_lane(2, || crate::step("b"));
    });
    assert_eq!(report.outcome, Outcome::Finished, "{:?}", report.outcome);
}

#[test]
fn a_held_leaf_at_a_quiescent_point_fails_the_run() {
    use crate::ghost;
    let report = run(config(1, Strategy::Random), || {
        ghost::expect_none_held("leaf", "at the start");
        ghost::take("leaf", 7);
        ghost::expect_none_held("leaf", "between two steps");
    });
    match report.outcome {
        Outcome::Panicked { message, .. } => {
            assert!(
                message.contains("leaf 0x7 still held between two steps"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_step_out_of_its_required_order_fails_the_run_where_it_is_met() {
    use crate::{ghost, step};
    static ORDER: [&str; 3] = ["p: a", "p: b", "p: c"];
    let in_order = run(config(1, Strategy::Random), || {
        ghost::require_order(&ORDER);
        // A pass may leave a step out, and a new pass begins at the first.
        for _ in 0..2 {
            step("p: a");
            step("p: c");
        }
        // Another thread keeps its own place.
        step("p: a");
        step("p: b");
        thread::spawn(|| {
            step("p: a");
            step("p: b");
        })
        .join()
        .expect("join");
        step("p: c");
    });
    assert_eq!(in_order.outcome, Outcome::Finished);
    let broken = run(config(1, Strategy::Random), || {
        ghost::require_order(&ORDER);
        step("p: a");
        step("p: c");
        step("p: b");
    });
    match broken.outcome {
        Outcome::Panicked { message, .. } => {
            assert!(
                message.contains("step \"p: b\" met after \"p: c\""),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}
