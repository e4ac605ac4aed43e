//! A record and its replacement: compute nodes whose caches predate a retraining — each on its own
//! `Store` — must never miss a key, in GETs or SCANs, whatever point the retraining reached,
//! including a worker stopped between any two of its verbs and not yet recovered.

#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::time::Duration;

use index_core::{CacheMode, Client, IndexError, Store, StoreConfig};
use integration_tests::{self as fixtures, client, tiny};
use leaf_store::{BulkLoadConfig, Layout, verify};
use rdma_transport::{Endpoint, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

use crate::common::no_sweep;

fn load(keys: &[u64], spare: u64) -> (SimTransport, Layout) {
    fixtures::load(keys, spare, &tiny(), SimConfig::default())
}

fn load_with(keys: &[u64], spare: u64, config: &BulkLoadConfig) -> (SimTransport, Layout) {
    fixtures::load(keys, spare, config, SimConfig::default())
}

fn expected_scan(oracle: &BTreeMap<u64, u64>, start: u64, n: usize) -> Vec<(u64, u64)> {
    oracle
        .range(start..)
        .take(n)
        .map(|(&k, &v)| (k, v))
        .collect()
}

/// Keys 0, 10, …, 3990; delete a slot's keys so one of its leaves empties, retrain the slot, and
/// scan through a `Store` whose cache predates the retraining (the retrained record has fewer
/// trained leaves than the one it caches). Every start key of the slot and its neighbours, in both
/// cache modes.
#[test]
fn a_scan_through_a_cache_older_than_a_retraining_skips_nothing() {
    for mode in [CacheMode::Pivots, CacheMode::Lean] {
        let config = StoreConfig {
            cache_mode: mode,
            ..StoreConfig::default()
        };
        let keys: Vec<u64> = (0..400).map(|i| i * 10).collect();
        let (transport, layout) = load(&keys, 64);
        let node = transport.memory_nodes()[0];
        let mut oracle: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
        let mut writer = client(&transport, config.clone());
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        // Slot s holds keys 80·s .. 80·s + 70.
        for slot in [1u64, 5, 9, 20] {
            let first = slot * 80;
            // Empty the slot's first leaf (the case: delete 80–110, retrain slot 1).
            for k in (first..first + 40).step_by(10) {
                assert!(writer.delete(k).expect("delete"));
                oracle.remove(&k);
            }
            let mut stale: Vec<Client<SimEndpoint>> = (0..12)
                .map(|_| client(&transport, config.clone()))
                .collect();
            let report = worker.retrain_slot(slot).expect("retrain").expect("report");
            assert!(
                report.trained_after < report.trained_before,
                "the emptied leaf is dropped"
            );
            for (i, reader) in stale.iter_mut().enumerate() {
                let start = first.saturating_sub(20) + 10 * i as u64;
                for n in [6, 1, 30] {
                    assert_eq!(
                        reader.scan(start, n).expect("scan"),
                        expected_scan(&oracle, start, n),
                        "{mode:?}: scan({start}, {n}) after retraining slot {slot}"
                    );
                }
            }
        }
        assert!(
            verify(&mut transport.endpoint().expect("endpoint"), node)
                .expect("verify")
                .is_clean()
        );
        let _ = layout;
    }
}

#[test]
fn a_scan_of_usize_max_entries_returns_everything() {
    // Fill 1: a scan's leaf estimate is n itself, where `n + 1` would overflow.
    let keys: Vec<u64> = (0..200).map(|i| i * 7).collect();
    let (transport, _) = load_with(&keys, 16, &BulkLoadConfig { fill: 1, ..tiny() });
    for mode in [CacheMode::Pivots, CacheMode::Lean] {
        let mut reader = client(
            &transport,
            StoreConfig {
                cache_mode: mode,
                ..StoreConfig::default()
            },
        );
        let all = reader.scan(0, usize::MAX).expect("scan");
        assert_eq!(all.len(), keys.len());
        assert_eq!(reader.scan(u64::MAX, usize::MAX).expect("scan"), Vec::new());
        assert_eq!(reader.scan(5, 0).expect("scan"), Vec::new());
    }
}

/// 32 keys 0, 1000, …, 31000 (four slots), keys 1..=12 inserted so slot 0 has synonym leaves.
fn crash_pool() -> (SimTransport, BTreeMap<u64, u64>) {
    let keys: Vec<u64> = (0..32).map(|i| i * 1000).collect();
    let (transport, _) = load(&keys, 256);
    let mut oracle: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
    let mut writer = client(&transport, StoreConfig::default());
    for k in 1..=12 {
        assert!(writer.insert(k, k).expect("insert"));
        oracle.insert(k, k);
    }
    (transport, oracle)
}

/// Verbs of one uninterrupted retraining of slot 0.
fn verbs_of_one_retraining() -> u64 {
    let (transport, _) = crash_pool();
    let node = transport.memory_nodes()[0];
    let mut worker =
        Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep()).expect("worker");
    let before = worker.endpoint_mut().stats().verbs();
    let report = worker.retrain_slot(0).expect("retrain").expect("slot 0");
    // The retraining also splits the slot, so every crash point of a slot split is covered: its
    // upper half becomes a slot the readers' directories do not know.
    assert!(report.split_into.is_some(), "slot 0 is split");
    worker.endpoint_mut().stats().verbs() - before
}

/// The worker stops after each verb of a retraining. Before any recovery runs: a compute node on
/// a third `Store` inserts keys that split leaves (through the new record, if the swap happened;
/// a frozen slot makes it wait and give up, which is allowed); then compute nodes whose caches
/// predate the retraining — a fresh one per probe, so every probe goes through the old cache —
/// find every key and scan every range exactly. Then a new worker recovers and `verify` is clean.
#[test]
fn readers_with_caches_from_before_a_retraining_stopped_at_any_verb_miss_nothing() {
    let total = verbs_of_one_retraining();
    assert!(total > 10, "{total} verbs");
    let mut inserted_through_new = 0;
    for crash_after in 0..=total {
        let (transport, mut oracle) = crash_pool();
        let node = transport.memory_nodes()[0];
        let probes = 2 * (oracle.len() + 32) + 4;
        // More readers than a memory node has member entries: they only read, so they do not join.
        let readers = StoreConfig {
            join_members: false,
            ..StoreConfig::default()
        };
        let mut stale: Vec<Client<SimEndpoint>> = (0..probes)
            .map(|_| client(&transport, readers.clone()))
            .collect();
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        worker.endpoint_mut().crash_after(crash_after);
        let outcome = worker.retrain_slot(0);
        assert_eq!(
            outcome.is_ok(),
            crash_after == total,
            "crash after {crash_after} of {total}: {outcome:?}"
        );
        drop(worker);

        let mut writer = client(
            &transport,
            StoreConfig {
                wait_limit: Duration::from_millis(10),
                ..StoreConfig::default()
            },
        );
        let mut splits = 0;
        for k in (20..=40).chain(500..=510) {
            match writer.insert(k, k) {
                Ok(true) => {
                    oracle.insert(k, k);
                    splits += 1;
                }
                Ok(false) => panic!("{k} was already there"),
                Err(IndexError::RetrainingTimeout { .. }) => break,
                Err(e) => panic!("crash after {crash_after}: insert {k}: {e}"),
            }
        }
        if splits > 0 {
            inserted_through_new += 1;
        }
        let mut probe = stale.drain(..);
        for &k in oracle.keys() {
            let mut reader = probe.next().expect("a reader per probe");
            assert_eq!(
                reader.get(k).expect("get"),
                Some(k),
                "crash after {crash_after}: a reader with an old cache misses {k}"
            );
        }
        let starts: Vec<u64> = oracle.keys().copied().chain([0, 15, 999, 4500]).collect();
        for start in starts {
            let mut reader = probe.next().expect("a reader per probe");
            assert_eq!(
                reader.scan(start, 7).expect("scan"),
                expected_scan(&oracle, start, 7),
                "crash after {crash_after}: scan({start}, 7) through an old cache"
            );
        }

        // Now recover, and everything is still there.
        let mut next = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        next.poll().expect("poll");
        while next.retrain_next().expect("retrain").is_some() {}
        let mut reader = client(&transport, StoreConfig::default());
        assert_eq!(
            reader.scan(0, usize::MAX).expect("scan"),
            expected_scan(&oracle, 0, usize::MAX),
            "crash after {crash_after}: after recovery"
        );
        let report = verify(&mut transport.endpoint().expect("endpoint"), node).expect("verify");
        assert!(report.is_clean(), "crash after {crash_after}: {report}");
    }
    assert!(
        inserted_through_new > 0,
        "some crash points must come after the swap, with splits through the new record"
    );
}

/// Writers on one `Store`, readers and scanners on another, the retrainer on its own thread
/// (retraining often: a low queueing threshold and an eager idle sweep), torn mode. Keys of
/// class `k % 8 == t` belong to writer `t` and are published once inserted; class 3 churns
/// (inserted and deleted again, so leaves empty and retrainings drop them) and is never checked;
/// class 5 is bulk-loaded. Every published insert is found; every scan is strictly increasing and
/// misses no key that was present since before it began.
#[test]
fn torn_stress_stale_readers_and_scanners_across_retrainings_miss_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const PER_WRITER: u64 = 4000;
    const SPACE: u64 = 4096;
    let writer_key = |t: u64, i: u64| ((i * 7919) % SPACE) * 8 + t;
    let loaded: Vec<u64> = (0..SPACE / 4).map(|i| i * 32 + 5).collect();
    let load = BulkLoadConfig {
        fill: 3,
        model_region_factor: 64,
        ..tiny()
    };
    let (transport, _) = fixtures::load(&loaded, 8 * PER_WRITER, &load, SimConfig::harsh());
    let node = transport.memory_nodes()[0];
    let config = StoreConfig {
        retrain_threshold: 4,
        ..StoreConfig::default()
    };
    let writers_store = Store::open(transport.clone(), config.clone()).expect("open");
    let readers_store = Store::open(transport.clone(), config).expect("open");
    let published: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let done = Arc::new(AtomicBool::new(false));
    let stop_worker = Arc::new(AtomicBool::new(false));

    let worker = {
        let (transport, stop) = (transport.clone(), Arc::clone(&stop_worker));
        std::thread::spawn(move || {
            let mut worker = Retrainer::new(
                transport.endpoint().expect("endpoint"),
                node,
                RetrainConfig {
                    idle_sweep_threshold: 2,
                    sweep_interval: Duration::from_millis(2),
                    ..RetrainConfig::default()
                },
            )
            .expect("worker");
            worker
                .run(|| stop.load(Ordering::Acquire))
                .expect("the worker runs until stopped")
        })
    };
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let mut client = writers_store.client().expect("client");
        let published = Arc::clone(&published);
        threads.push(std::thread::spawn(move || {
            for i in 0..PER_WRITER {
                let k = writer_key(t, i);
                assert!(client.insert(k, k).expect("insert"), "insert {k}");
                published[t as usize].store(i + 1, Ordering::Release);
            }
        }));
    }
    {
        let mut client = writers_store.client().expect("client");
        let done = Arc::clone(&done);
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !done.load(Ordering::Acquire) {
                let k = ((i * 613) % SPACE) * 8 + 3;
                client.insert(k, k).expect("churn insert");
                if !i.is_multiple_of(3) {
                    client.delete(k).expect("churn delete");
                }
                i += 1;
            }
        }));
    }
    let mut checkers = Vec::new();
    {
        let mut client = readers_store.client().expect("client");
        let (published, done) = (Arc::clone(&published), Arc::clone(&done));
        checkers.push(std::thread::spawn(move || {
            let mut rng = testkit::XorShift64::new(7);
            let mut reads = 0u64;
            // At least a few checks even if the retrainings are over before this thread runs.
            while !done.load(Ordering::Acquire) || reads < 50 {
                let t = rng.next_u64() % 2;
                let n = published[t as usize].load(Ordering::Acquire);
                if n == 0 {
                    continue;
                }
                let k = writer_key(t, rng.next_u64() % n);
                assert_eq!(client.get(k).expect("get"), Some(k), "a completed insert");
                reads += 1;
            }
            reads
        }));
    }
    {
        let mut client = readers_store.client().expect("client");
        let (published, done) = (Arc::clone(&published), Arc::clone(&done));
        let loaded = loaded.clone();
        checkers.push(std::thread::spawn(move || {
            let mut rng = testkit::XorShift64::new(11);
            let mut scans = 0u64;
            while !done.load(Ordering::Acquire) || scans < 20 {
                let counts = [
                    published[0].load(Ordering::Acquire),
                    published[1].load(Ordering::Acquire),
                ];
                let start = rng.next_u64() % (SPACE * 8);
                let n = (rng.next_u64() % 40) as usize + 1;
                let got = client.scan(start, n).expect("scan");
                assert!(
                    got.windows(2).all(|w| w[0].0 < w[1].0),
                    "scan({start}, {n}) not strictly increasing"
                );
                assert!(got.iter().all(|&(k, _)| k >= start));
                let end = if got.len() == n {
                    got.last().map_or(start, |e| e.0)
                } else {
                    u64::MAX
                };
                let present: Vec<u64> = loaded
                    .iter()
                    .copied()
                    .chain(
                        (0..2u64)
                            .flat_map(|t| (0..counts[t as usize]).map(move |i| writer_key(t, i))),
                    )
                    .filter(|&k| k >= start && k <= end)
                    .collect();
                for k in present {
                    assert!(
                        got.binary_search_by_key(&k, |e| e.0).is_ok(),
                        "scan({start}, {n}) skipped {k}, present since before it began"
                    );
                }
                scans += 1;
            }
            scans
        }));
    }
    for t in threads.drain(..2) {
        t.join().expect("writer");
    }
    // Churn and checks go on until more than ten retrainings have run (a busy machine may give
    // the worker little time while the writers run): the newest record's generation counts them,
    // two at most per retraining (a slot split writes two records).
    let newest_generation = || {
        let mut ep = transport.endpoint().expect("endpoint");
        let layout = leaf_store::Layout::attach(&mut ep, node).expect("layout");
        leaf_store::read_slot_table(&mut ep, &layout)
            .expect("slot table")
            .iter()
            .map(|&(addr, _)| {
                leaf_store::ModelHeader::from_raw(ep.read_word(addr).expect("header")).generation()
            })
            .max()
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while newest_generation() <= 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    done.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("churn");
    }
    let checked: Vec<u64> = checkers
        .into_iter()
        .map(|c| c.join().expect("checker"))
        .collect();
    stop_worker.store(true, Ordering::Release);
    let stats = worker.join().expect("worker");
    eprintln!("reads and scans: {checked:?}; retrainer: {stats:?}");
    assert!(checked.iter().all(|&n| n > 0), "checks ran: {checked:?}");
    assert!(
        stats.retrains > 10,
        "retrainings ran during the test: {stats:?}"
    );
    let mut reader = client(&transport, StoreConfig::default());
    for t in 0..2 {
        for i in 0..PER_WRITER {
            let k = writer_key(t, i);
            assert_eq!(reader.get(k).expect("get"), Some(k));
        }
    }
    let report = verify(&mut transport.endpoint().expect("endpoint"), node).expect("verify");
    assert!(report.is_clean(), "{report}");
}

/// Keys 1000, 1010, … loaded (slot 0 starts at 0 but its first pivot is 1000), then 1..=40
/// inserted below them: they pile into slot 0's first chain, so the split of slot 0 cuts inside
/// that chain, below the old record's first pivot. At every crash point of that retraining —
/// before any recovery — a compute node that attaches now (its directory knows the new slot as
/// soon as it is published, while the old record may still be the slot's) scans from every key
/// and GETs every key, in both cache modes. (A scan that ended the old record before its first
/// chain because that chain's pivot lay past the new slot's first key skipped keys; a review
/// found it.)
#[test]
fn a_split_cutting_below_the_first_pivot_loses_no_key_to_a_scan() {
    let loaded: Vec<u64> = (0..24).map(|i| 1000 + 10 * i).collect();
    let crash_pool = || {
        let (transport, _) = load(&loaded, 256);
        let mut oracle: BTreeMap<u64, u64> = loaded.iter().map(|&k| (k, k)).collect();
        let mut writer = client(&transport, StoreConfig::default());
        for k in (1..=40).rev() {
            assert!(writer.insert(k, k).expect("insert"));
            oracle.insert(k, k);
        }
        (transport, oracle)
    };
    let total = {
        let (transport, _) = crash_pool();
        let mut worker = Retrainer::new(
            transport.endpoint().expect("endpoint"),
            transport.memory_nodes()[0],
            no_sweep(),
        )
        .expect("worker");
        let before = worker.endpoint_mut().stats().verbs();
        let report = worker.retrain_slot(0).expect("retrain").expect("slot 0");
        let new_slot = report.split_into.expect("slot 0 is split");
        let mut ep = transport.endpoint().expect("endpoint");
        let layout = *worker.layout();
        let upper =
            leaf_store::read_slot_table(&mut ep, &layout).expect("table")[new_slot as usize].1;
        assert!(
            upper < 1000,
            "the cut lies below the old first pivot ({upper})"
        );
        worker.endpoint_mut().stats().verbs() - before
    };
    for crash_after in 0..=total {
        let (transport, oracle) = crash_pool();
        let node = transport.memory_nodes()[0];
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        worker.endpoint_mut().crash_after(crash_after);
        let _ = worker.retrain_slot(0);
        drop(worker);
        for mode in [CacheMode::Pivots, CacheMode::Lean] {
            let config = StoreConfig {
                cache_mode: mode,
                join_members: false,
                ..StoreConfig::default()
            };
            let mut reader = client(&transport, config);
            for start in [0, 1, 5, 20, 39, 40, 41, 999, 1000] {
                assert_eq!(
                    reader.scan(start, 30).expect("scan"),
                    expected_scan(&oracle, start, 30),
                    "crash after {crash_after} ({mode:?}): scan({start}, 30)"
                );
            }
            for &k in oracle.keys() {
                assert_eq!(
                    reader.get(k).expect("get"),
                    Some(k),
                    "crash after {crash_after} ({mode:?}): get {k}"
                );
            }
        }
        let mut next = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        next.poll().expect("poll");
        while next.retrain_next().expect("retrain").is_some() {}
        let report = verify(&mut transport.endpoint().expect("endpoint"), node).expect("verify");
        assert!(report.is_clean(), "crash after {crash_after}: {report}");
    }
}

/// A retraining takes the claims of the empty leaves it drops, under its freeze (ARCHITECTURE §4,
/// "Claims"). With leaves longer than a packet, a worker cut inside one of those WRITEs leaves
/// the leaf torn in a chain of the record it was replacing. The next worker rolls the retraining
/// back and mends the leaf (empty, unclaimed): writers of its chain go on, a reader on another
/// `Store` finds every key, and `verify` is clean — at every cut.
#[test]
fn a_worker_cut_inside_taking_a_claim_away_leaves_no_torn_leaf_behind() {
    let keys: Vec<u64> = (0..400).map(|i| i * 10).collect();
    let sim = SimConfig {
        packet_bytes: 16,
        ..SimConfig::default()
    };
    // Slot 1 holds keys 80 ..= 150; its first trained leaf (80 ..= 110) is emptied.
    let prepare = || {
        let (transport, _) = fixtures::load(&keys, 64, &tiny(), sim);
        let mut oracle: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
        let mut writer = client(&transport, StoreConfig::default());
        for k in (80..120).step_by(10) {
            assert!(writer.delete(k).expect("delete"));
            oracle.remove(&k);
        }
        (transport, oracle)
    };
    let total = {
        let (transport, _) = prepare();
        let node = transport.memory_nodes()[0];
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        let before = worker.endpoint_mut().stats().verbs();
        let report = worker.retrain_slot(1).expect("retrain").expect("report");
        assert!(
            report.trained_after < report.trained_before,
            "the empty leaf is dropped"
        );
        worker.endpoint_mut().stats().verbs() - before
    };
    let mut mended = 0;
    for cut in 0..total {
        let (transport, mut oracle) = prepare();
        let node = transport.memory_nodes()[0];
        let mut worker = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        worker.endpoint_mut().tear_after(cut, 1);
        assert!(
            worker.retrain_slot(1).is_err(),
            "cut at verb {cut} of {total}"
        );
        drop(worker);
        let next = Retrainer::new(transport.endpoint().expect("endpoint"), node, no_sweep())
            .expect("worker");
        mended += next.recovery().mended_leaves;
        let mut writer = client(
            &transport,
            StoreConfig {
                wait_limit: Duration::from_millis(500),
                ..StoreConfig::default()
            },
        );
        for k in [85, 95, 105] {
            assert_eq!(
                writer.insert(k, k),
                Ok(true),
                "cut at verb {cut}: insert {k}"
            );
            oracle.insert(k, k);
        }
        let mut reader = client(&transport, StoreConfig::default());
        assert_eq!(
            reader.scan(0, usize::MAX).expect("scan"),
            expected_scan(&oracle, 0, usize::MAX),
            "cut at verb {cut}"
        );
        let report = verify(&mut transport.endpoint().expect("endpoint"), node).expect("verify");
        assert!(report.is_clean(), "cut at verb {cut}: {report}");
    }
    assert!(
        mended > 0,
        "no cut fell inside a WRITE that took a claim away"
    );
}
