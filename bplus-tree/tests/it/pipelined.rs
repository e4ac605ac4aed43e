//! Several operations in flight per thread, as ROLEX's pipelined test runs them
//! (`integration-tests/tests/it/pipelined.rs`): sessions of depth 4 on pages small enough to
//! split all the time, two threads sharing one compute node (`Tree`: its cache and local lock
//! stripes) and one on a compute node of its own, in torn and reordering mode and with batches
//! that take a round trip to complete; every history linearizable, every pool clean, with sorted
//! and with hopscotch leaves. Then eight
//! inserts of one thread on one leaf in flight together, and byte values through a session.

#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::common;

use bplus_tree::{
    BulkLoadConfig, Reply, Request, Tree, TreeConfig, TreeError, ValueConfig, bulk_load_values,
    required_pool_bytes, verify,
};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};
use testkit::linearizability::{KvEvent, check};
use testkit::{XorShift64, pipelined};

/// Pages of four entries, three loaded, sharing 64 lock words: splits, internal splits and new
/// roots all the time, and pages of one lock word meeting on one local stripe. `hopscotch`:
/// leaves of four slots in neighbourhoods of two, three loaded.
fn tiny(hopscotch: bool) -> BulkLoadConfig {
    if hopscotch {
        return common::tiny_hopscotch();
    }
    BulkLoadConfig {
        page_size: 128,
        fill: Some(3),
        lock_words: 64,
        ..BulkLoadConfig::default()
    }
}

/// Keys `i * 7 + 3` for `i < 120`; the even ones are loaded.
fn initial() -> Vec<(u64, u64)> {
    (0..60u64).map(|i| (i * 14 + 3, i + 1)).collect()
}

fn assert_clean(transport: &SimTransport) {
    let mut ep = transport.endpoint().expect("endpoint");
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).expect("verify");
        assert!(report.is_clean(), "node {}: {report}", node.id);
    }
}

/// One thread's session of `depth` on `tree`, running `ops` random requests on 120 keys, scans
/// among them ([`testkit::pipelined`]); returns its history (call and return stamped by the
/// shared `clock`).
fn run_session(
    tree: &Tree<SimTransport>,
    seed: u64,
    depth: usize,
    ops: u64,
    clock: &AtomicU64,
) -> Vec<KvEvent> {
    let mut pipeline = tree.pipeline(depth).expect("pipeline");
    let mut session = pipeline.session();
    let mut random = XorShift64::new(seed);
    let run = pipelined::run_session(&mut session, &mut random, (120, true), ops, clock);
    assert_eq!(
        run.most_in_flight, depth,
        "operations were in flight together"
    );
    assert!(run.scans > 0, "scans ran among the operations");
    drop(session);
    let net: u64 = pipeline
        .clients()
        .iter()
        .map(|c| c.net_stats().batches)
        .sum();
    assert_eq!(
        net, run.round_trips,
        "every round trip counted to one operation"
    );
    run.history
}

#[test]
fn pipelined_sessions_are_linearizable_and_leave_the_tree_clean() {
    const OPS: u64 = 1_500;
    for (hopscotch, config) in [false, true].into_iter().flat_map(|h| {
        [
            (h, SimConfig::harsh()),
            (
                h,
                SimConfig {
                    latency: Some(Duration::from_micros(20)),
                    ..SimConfig::harsh()
                },
            ),
        ]
    }) {
        let (transport, _) = common::loaded_pool(initial(), &tiny(hopscotch), 3 * OPS, config);
        let shared = Arc::new(Tree::open(transport.clone(), common::tree_config()).expect("open"));
        let clock = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..3u64)
            .map(|t| {
                let (transport, shared, clock) =
                    (transport.clone(), Arc::clone(&shared), Arc::clone(&clock));
                std::thread::spawn(move || {
                    if t < 2 {
                        run_session(&shared, t * 7 + 1, 4, OPS, &clock)
                    } else {
                        let own = Tree::open(transport, common::tree_config()).expect("open");
                        run_session(&own, t * 7 + 1, 4, OPS, &clock)
                    }
                })
            })
            .collect();
        let history: Vec<KvEvent> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("pipelined thread"))
            .collect();
        let start: BTreeMap<u64, u64> = initial().into_iter().collect();
        if let Err(violation) = check(&start, &history) {
            panic!("not linearizable (hopscotch {hopscotch}, {config:?}): {violation:?}");
        }
        assert_clean(&transport);
    }
}

/// Eight inserts of one thread into one leaf at once, batches in flight for a round trip each:
/// they take the leaf's lock one after the other (through the local stripe, try-locked while a
/// sibling holds it, the remote lock handed over or released), none waits for a lock its own
/// thread cannot release, and all land. With one local stripe, every page's lock meets there.
#[test]
fn operations_of_one_thread_on_one_leaf_lock_wait_for_each_other() {
    let config = SimConfig {
        latency: Some(Duration::from_micros(50)),
        ..SimConfig::torn()
    };
    for stripes in [4096, 1] {
        let loaded: Vec<(u64, u64)> = (0..120u64).map(|i| (i * 7 + 3, i + 1)).collect();
        let (transport, _) = common::loaded_pool(loaded, &BulkLoadConfig::default(), 400, config);
        let tree = Tree::open(
            transport.clone(),
            TreeConfig {
                local_lock_stripes: stripes,
                ..TreeConfig::default()
            },
        )
        .expect("open");
        let mut pipeline = tree.pipeline(8).expect("pipeline");
        let mut session = pipeline.session();
        // Keys past the last loaded one: all in the last leaf to begin with.
        let keys: Vec<u64> = (0..200u64).map(|i| 500 * 7 + 1_000 + i).collect();
        let mut requests = keys.iter().map(|&k| (k, Request::Insert(k, k + 1)));
        let mut inserted = 0;
        let mut most_in_flight = 0;
        let mut first = true;
        loop {
            while session.has_room() {
                let Some((tag, request)) = requests.next() else {
                    break;
                };
                session.submit(tag, request).expect("room");
            }
            if std::mem::take(&mut first) {
                // Each insert takes two round trips at least (the lock with the leaf's READ, the
                // entry with the unlock), each one pending for 50 µs: none is done yet.
                assert!(
                    session.poll().is_none(),
                    "the inserts are in flight together"
                );
            }
            most_in_flight = most_in_flight.max(session.in_flight());
            let Some(done) = session.wait() else {
                break;
            };
            assert_eq!(done.result.expect("insert"), Reply::Done(true));
            inserted += 1;
        }
        assert_eq!(inserted, keys.len());
        assert_eq!(most_in_flight, 8);
        drop(session);
        let handovers: u64 = pipeline.clients().iter().map(|c| c.stats().handovers).sum();
        assert!(handovers > 0, "no lock was handed to a sibling operation");
        let mut client = tree.client().expect("client");
        for &k in &keys {
            assert_eq!(client.get(k).expect("get"), Some(k + 1));
        }
        assert_clean(&transport);
    }
}

/// Byte values through a session: every byte-value request as its synchronous twin answers it,
/// and a `u64` request on the byte-value pool refused as the twin refuses it.
#[test]
fn byte_values_run_in_a_session() {
    let config = BulkLoadConfig {
        page_size: 256,
        fill: Some(6),
        lock_words: 256,
        values: Some(ValueConfig {
            bytes: 1 << 20,
            chunk_bytes: 4 << 10,
        }),
        ..BulkLoadConfig::default()
    };
    let loaded: Vec<(u64, Vec<u8>)> = (0..100u64).map(|k| (k * 2, vec![k as u8; 10])).collect();
    let size = required_pool_bytes(loaded.len() as u64, &config, 400).next_multiple_of(4096);
    let sim = SimConfig {
        latency: Some(Duration::from_micros(20)),
        ..SimConfig::harsh()
    };
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let mut ep = transport.endpoint().expect("endpoint");
    bulk_load_values(&mut ep, transport.memory_nodes()[0], loaded, &config).expect("load");
    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut pipeline = tree.pipeline(4).expect("pipeline");
    {
        let mut session = pipeline.session();
        let mut run = |requests: Vec<Request>| -> BTreeMap<usize, Result<Reply, TreeError>> {
            let mut requests = requests.into_iter().enumerate();
            let mut out = BTreeMap::new();
            loop {
                while session.has_room() {
                    let Some((tag, request)) = requests.next() else {
                        break;
                    };
                    session.submit(tag, request).expect("room");
                }
                let Some(done) = session.wait() else {
                    break;
                };
                out.insert(done.tag, done.result);
            }
            out
        };
        // Odd keys are absent, even ones present.
        let writes = run((0..200u64)
            .map(|k| match k % 4 {
                0 => Request::UpdateValue(k, vec![1; 300]),
                1 => Request::InsertValue(k, vec![2; 40]),
                2 => Request::PutValue(k, vec![3; 5]),
                _ => Request::UpdateValue(k, vec![4; 7]),
            })
            .collect());
        for (k, result) in writes {
            let expected = matches!(k % 4, 0 | 1);
            assert_eq!(result, Ok(Reply::Done(expected)), "write of {k}");
        }
        let reads = run((0..200u64).map(Request::GetValue).collect());
        for (k, result) in reads {
            let expected = match k % 4 {
                0 => Some(vec![1; 300]),
                1 => Some(vec![2; 40]),
                2 => Some(vec![3; 5]),
                _ => None,
            };
            assert_eq!(result, Ok(Reply::Bytes(expected)), "value of {k}");
        }
        let scanned = run(vec![Request::ScanValues(0, 10), Request::Get(0)]);
        let Some(Ok(Reply::ValueRows(rows))) = scanned.get(&0) else {
            panic!("scan: {scanned:?}");
        };
        let keys: Vec<u64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(keys, [0, 1, 2, 4, 5, 6, 8, 9, 10, 12]);
        assert!(
            matches!(scanned.get(&1), Some(Err(TreeError::WrongValueKind { .. }))),
            "a u64 GET on a byte-value pool: {scanned:?}"
        );
    }
    let mut client = tree.client().expect("client");
    assert_eq!(client.get_value(1).expect("get"), Some(vec![2; 40]));
    assert_clean(&transport);
}

#[test]
fn a_pipeline_of_no_clients_is_refused() {
    let (transport, _) = common::loaded_pool(initial(), &tiny(false), 0, SimConfig::default());
    let tree = Tree::open(transport, TreeConfig::default()).expect("open");
    assert!(matches!(tree.pipeline(0), Err(TreeError::Config(_))));
}
