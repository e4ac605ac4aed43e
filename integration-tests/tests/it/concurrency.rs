//! Multi-threaded scenarios over the simulator in torn-read mode.

#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use index_core::{CacheMode, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};
use testkit::XorShift64;

const WRITERS: u64 = 3;

fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    }
}

fn pool(initial: &[(u64, u64)], spare: u64, nodes: usize) -> SimTransport {
    let size = required_pool_bytes(initial.len() as u64, &tiny(), spare).next_multiple_of(8);
    let transport =
        SimTransport::anonymous_with(&vec![size; nodes], SimConfig::harsh()).expect("pool");
    bootstrap(&transport, initial.to_vec(), &tiny()).expect("load");
    transport
}

fn assert_clean(transport: &SimTransport) {
    let mut ep = transport.endpoint().expect("endpoint");
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).expect("verify");
        assert!(report.is_clean(), "node {}: {report}", node.id);
    }
}

/// Keys `k` with `k % 8 == t` belong to writer `t` (interleaved: all writers share every leaf);
/// `k % 8 == 7` are contended (every writer inserts them); insert-only keys `k % 8 == 6`
/// are published for the reader once inserted. All spread over the bulk-loaded range, so every
/// slot takes inserts (a slot cannot outgrow 255 synonym leaves before retraining).
#[test]
fn torn_mode_stress_keeps_every_key_and_readers_never_miss_a_completed_insert() {
    for (mode, handovers) in [
        (CacheMode::Pivots, 8),
        (CacheMode::Pivots, 0),
        (CacheMode::Lean, 8),
    ] {
        stress(mode, 2, handovers);
    }
}

fn stress(mode: CacheMode, nodes: usize, handovers: u32) {
    // Initial keys are in class 5, which no writer touches.
    let initial: Vec<(u64, u64)> = (0..300u64).map(|i| (i * 1600 + 5, i)).collect();
    let transport = pool(&initial, 20_000, nodes);
    let store = Arc::new(
        Store::open(
            transport.clone(),
            StoreConfig {
                cache_mode: mode,
                max_handovers: handovers,
                ..StoreConfig::default()
            },
        )
        .expect("open"),
    );
    let ops_per_writer = 2_500u64;
    // Insert-only keys, per writer, in the order they are inserted; `published[t]` counts the ones done.
    let sequences: Vec<Vec<u64>> = (0..WRITERS)
        .map(|t| {
            (0..ops_per_writer)
                .map(|i| (i * 24 + t * 3) * 8 + 6)
                .collect()
        })
        .collect();
    let published: Arc<Vec<AtomicUsize>> =
        Arc::new((0..WRITERS).map(|_| AtomicUsize::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let contended_wins: Arc<Vec<AtomicU64>> =
        Arc::new((0..2_000).map(|_| AtomicU64::new(0)).collect());

    let reader = {
        let (store, published, stop, sequences) = (
            Arc::clone(&store),
            Arc::clone(&published),
            Arc::clone(&stop),
            sequences.clone(),
        );
        std::thread::spawn(move || {
            let mut client = store.client().expect("client");
            let mut random = XorShift64::new(0x1234_5678_9abc_def1);
            let mut checked = 0u64;
            while !stop.load(Ordering::Acquire) || checked < 2_000 {
                let t = (random.next_u64() % WRITERS) as usize;
                let done = published[t].load(Ordering::Acquire);
                if done == 0 {
                    std::thread::yield_now();
                    continue;
                }
                let key = sequences[t][(random.next_u64() % done as u64) as usize];
                let got = client.get(key).expect("reader get");
                assert_eq!(
                    got,
                    Some(key),
                    "a completed insert of {key} was not visible"
                );
                checked += 1;
            }
            checked
        })
    };

    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (store, published, wins, sequence) = (
                Arc::clone(&store),
                Arc::clone(&published),
                Arc::clone(&contended_wins),
                sequences[t as usize].clone(),
            );
            std::thread::spawn(move || {
                let mut client = store.client().expect("client");
                let mut oracle: BTreeMap<u64, u64> = BTreeMap::new();
                let mut random = XorShift64::new(0xdead_beef + t);
                for (i, &seq_key) in sequence.iter().enumerate() {
                    assert!(client.insert(seq_key, seq_key).expect("insert"));
                    published[t as usize].store(i + 1, Ordering::Release);
                    oracle.insert(seq_key, seq_key);
                    let key = (random.next_u64() % 2_000) * 240 + t;
                    let value = random.next_u64();
                    match random.next_u64() % 5 {
                        0 => {
                            let present = client.get(key).expect("get");
                            assert_eq!(
                                present,
                                oracle.get(&key).copied(),
                                "writer {t} op {i}: own key {key} ({mode:?})"
                            );
                        }
                        1 => {
                            let inserted = client.upsert(key, value).expect("upsert");
                            let previous = oracle.insert(key, value);
                            assert_eq!(
                                inserted,
                                previous.is_none(),
                                "writer {t} op {i}: upsert {key} (previous {previous:?}, {mode:?})"
                            );
                        }
                        2 => {
                            let deleted = client.delete(key).expect("delete");
                            assert_eq!(
                                deleted,
                                oracle.remove(&key).is_some(),
                                "writer {t} op {i}: delete {key} ({mode:?})"
                            );
                        }
                        3 => {
                            let updated = client.update(key, value).expect("update");
                            assert_eq!(updated, oracle.contains_key(&key));
                            if updated {
                                oracle.insert(key, value);
                            }
                        }
                        _ => {
                            let contended = random.next_u64() % 2_000;
                            if client
                                .insert(contended * 240 + 7, contended)
                                .expect("contended insert")
                            {
                                wins[contended as usize].fetch_add(1, Ordering::AcqRel);
                            }
                        }
                    }
                }
                oracle
            })
        })
        .collect();
    let mut oracles = Vec::new();
    for w in writers {
        oracles.push(w.join().expect("writer"));
    }
    stop.store(true, Ordering::Release);
    let checked = reader.join().expect("reader");
    assert!(checked >= 2_000);

    // The final state is exactly: the initial keys, every writer's oracle, the contended winners.
    let mut expected: BTreeMap<u64, u64> = initial.iter().copied().collect();
    for oracle in &oracles {
        expected.extend(oracle.iter().map(|(&k, &v)| (k, v)));
    }
    for (contended, wins) in contended_wins.iter().enumerate() {
        let won = wins.load(Ordering::Acquire);
        assert!(won <= 1, "contended key {contended} inserted {won} times");
        if won == 1 {
            expected.insert(contended as u64 * 240 + 7, contended as u64);
        }
    }
    let mut client = store.client().expect("client");
    let all: BTreeMap<u64, u64> = client
        .scan(0, usize::MAX >> 1)
        .expect("scan")
        .into_iter()
        .collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|(k, v)| all.get(k) != Some(v))
        .take(10)
        .collect();
    let extra: Vec<_> = all
        .iter()
        .filter(|(k, v)| expected.get(k) != Some(v))
        .take(10)
        .collect();
    assert!(
        all == expected,
        "final state differs: {} entries, oracle {}; missing or different {missing:?}; unexpected {extra:?}",
        all.len(),
        expected.len()
    );
    assert_clean(&transport);
}

/// Two compute nodes (separate stores, separate caches) insert into the same leaves; each one's
/// cache goes stale as the other splits leaves. Nothing is lost.
///
/// No retrainer runs, so every slot must hold its share of the inserts within 255 synonym leaves:
/// the inserts spread over 200 gaps leave the fullest slot near half of that, with room for the
/// claims that splits racing on a slow machine free again.
#[test]
fn two_independent_clients_with_stale_caches_lose_nothing() {
    const GAPS: u64 = 200;
    let initial: Vec<(u64, u64)> = (0..GAPS).map(|i| (i * 1000, i)).collect();
    let transport = pool(&initial, 10_000, 1);
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let transport = transport.clone();
            std::thread::spawn(move || {
                let store = Store::open(transport, StoreConfig::default()).expect("open");
                let mut client = store.client().expect("client");
                for i in 0..3_000u64 {
                    // Both insert between the same trained keys: shared leaves, constant splits.
                    let key = (i % GAPS) * 1000 + 1 + (i / GAPS) * 2 + t;
                    assert!(client.insert(key, key).expect("insert"), "insert {key}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut client = store.client().expect("client");
    let all = client.scan(0, 100_000).expect("scan");
    assert_eq!(all.len(), GAPS as usize + 2 * 3_000);
    for i in 0..3_000u64 {
        for t in 0..2 {
            let key = (i % GAPS) * 1000 + 1 + (i / GAPS) * 2 + t;
            assert_eq!(client.get(key).expect("get"), Some(key));
        }
    }
    assert_clean(&transport);
}
