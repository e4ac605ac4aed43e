//! Several operations in flight per thread: pipelined sessions and async clients on separate
//! stores (their own caches), with a retrainer running, in torn and reordering mode and with
//! batches that take a round trip to complete; every history linearizable, every pool clean.

#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use index_core::{OpKind, Reply, Request, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimConfig, SimTransport};
use testkit::linearizability::{KvEvent, check};
use testkit::{XorShift64, pipelined};

fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    }
}

fn pool(initial: &[(u64, u64)], config: SimConfig) -> SimTransport {
    let size = required_pool_bytes(initial.len() as u64, &tiny(), 20_000).next_multiple_of(8);
    let transport = SimTransport::anonymous_with(&[size], config).expect("pool");
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

/// A retrainer on its own thread until `stop`.
fn retrainer(transport: &SimTransport, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (transport, stop) = (transport.clone(), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut worker = Retrainer::new(
            transport.endpoint().expect("endpoint"),
            transport.memory_nodes()[0],
            RetrainConfig::default(),
        )
        .expect("retrainer");
        worker
            .run(|| stop.load(Ordering::Acquire))
            .expect("retrainer run");
    })
}

/// `threads` threads, each with its own store and a pipeline of `depth`, run `ops` random
/// requests each on 60 keys ([`testkit::pipelined`]); returns the history (call and return
/// stamped by one shared clock).
fn run_pipelined(transport: &SimTransport, threads: u64, depth: usize, ops: u64) -> Vec<KvEvent> {
    let clock = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (transport, clock) = (transport.clone(), Arc::clone(&clock));
            std::thread::spawn(move || {
                let store = Store::open(transport, StoreConfig::default()).expect("open");
                let mut pipeline = store.pipeline(depth).expect("pipeline");
                let mut session = pipeline.session();
                let mut random = XorShift64::new(t * 7 + 1);
                let run =
                    pipelined::run_session(&mut session, &mut random, (60, false), ops, &clock);
                assert_eq!(
                    run.most_in_flight, depth,
                    "operations were in flight together"
                );
                drop(session);
                let counted: u64 = pipeline
                    .clients()
                    .iter()
                    .flat_map(|c| OpKind::ALL.map(|kind| c.stats().get(kind).ops))
                    .sum();
                assert_eq!(counted, ops, "every operation ran on one of the clients");
                run.history
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("pipelined thread"))
        .collect()
}

fn initial() -> Vec<(u64, u64)> {
    (0..120u64).map(|i| (i * 7 + 3, i + 1)).collect()
}

#[test]
fn pipelined_sessions_on_separate_stores_are_linearizable_under_retraining() {
    for config in [
        SimConfig::harsh(),
        SimConfig {
            latency: Some(Duration::from_micros(20)),
            ..SimConfig::harsh()
        },
    ] {
        let transport = pool(&initial(), config);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = retrainer(&transport, &stop);
        let history = run_pipelined(&transport, 2, 4, 1_500);
        stop.store(true, Ordering::Release);
        worker.join().expect("retrainer");
        let start: BTreeMap<u64, u64> = initial().into_iter().collect();
        if let Err(violation) = check(&start, &history) {
            panic!("not linearizable ({config:?}): {violation:?}");
        }
        assert_clean(&transport);
    }
}

/// Eight inserts of one thread into one leaf at once, batches in flight for a round trip each:
/// they take the leaf's lock one after the other (through the local stripe, handed over or
/// released), none waits for a lock its own thread cannot release, and all land.
#[test]
fn operations_of_one_thread_on_one_leaf_lock_wait_for_each_other() {
    let config = SimConfig {
        latency: Some(Duration::from_micros(50)),
        ..SimConfig::torn()
    };
    for handovers in [8, 0] {
        let transport = pool(&initial(), config);
        let store = Store::open(
            transport.clone(),
            StoreConfig {
                max_handovers: handovers,
                // Waiting is what is tested, not its limit: on a loaded machine the last of
                // eight writers (splits among them) once waited out the default 2 s.
                wait_limit: Duration::from_secs(60),
                ..StoreConfig::default()
            },
        )
        .expect("open");
        let mut pipeline = store.pipeline(8).expect("pipeline");
        let mut session = pipeline.session();
        // Keys past the last loaded one: all in the last leaf to begin with.
        let keys: Vec<u64> = (0..200u64).map(|i| 500 * 7 + 1_000 + i).collect();
        let mut requests = keys.iter().map(|&k| (k, Request::Insert(k, k + 1)));
        let mut inserted = 0;
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
            assert_eq!(done.result.expect("insert"), Reply::Done(true));
            inserted += 1;
        }
        assert_eq!(inserted, keys.len());
        drop(session);
        let mut client = store.client().expect("client");
        for &k in &keys {
            assert_eq!(client.get(k).expect("get"), Some(k + 1));
        }
        assert_clean(&transport);
    }
}

/// An async operation dropped after it started runs to its end: its insert lands and no lock
/// stays held.
#[test]
fn a_dropped_async_operation_finishes() {
    let config = SimConfig {
        latency: Some(Duration::from_micros(200)),
        ..SimConfig::default()
    };
    let transport = pool(&initial(), config);
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut client = store.client().expect("client").into_async();
    for k in 0..20u64 {
        let key = 10_000 + k;
        let operation = client.insert(key, k);
        drop(operation);
        assert_eq!(index_core::block_on(client.get(key)), Ok(Some(k)));
    }
    let mut client = client.into_inner();
    assert_eq!(
        client.insert(10_000, 1),
        Ok(false),
        "the leaf is not locked"
    );
    assert_clean(&transport);
}

/// Async clients on tokio's multi-threaded runtime: tasks spawned with `tokio::spawn` (their
/// operations' futures are `Send`), each with its own client, moving between the worker threads
/// between their batches, all inserting past the loaded keys (into the last leaves, split as
/// they fill, a retrainer running); and on a current-thread runtime, tasks of one thread with
/// their operations in flight together.
#[test]
fn async_clients_run_on_tokio() {
    let config = SimConfig {
        latency: Some(Duration::from_micros(20)),
        ..SimConfig::harsh()
    };
    /// Task `t`: 100 inserts and GETs of its own keys, then a scan of them.
    async fn task(store: Arc<Store<SimTransport>>, base: u64) -> usize {
        let mut client = store.client().expect("client").into_async();
        for i in 0..100u64 {
            assert_eq!(client.insert(base + i, i).await, Ok(true));
            assert_eq!(client.get(base + i).await, Ok(Some(i)));
        }
        client.scan(base, 100).await.expect("scan").len()
    }
    let threaded = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for multi_threaded in [true, false] {
        let transport = pool(&initial(), config);
        let stop = Arc::new(AtomicBool::new(false));
        let worker = retrainer(&transport, &stop);
        let store = Arc::new(Store::open(transport.clone(), StoreConfig::default()).expect("open"));
        let spawned = async {
            let tasks: Vec<_> = (0..4u64)
                .map(|t| {
                    let work = task(Arc::clone(&store), 20_000 + t * 1_000);
                    if multi_threaded {
                        tokio::spawn(work)
                    } else {
                        tokio::task::spawn_local(work)
                    }
                })
                .collect();
            let mut lens = Vec::new();
            for task in tasks {
                lens.push(task.await.expect("task"));
            }
            lens
        };
        let results = if multi_threaded {
            threaded.block_on(spawned)
        } else {
            tokio::task::LocalSet::new().block_on(&current, spawned)
        };
        stop.store(true, Ordering::Release);
        worker.join().expect("retrainer");
        assert_eq!(results, [100; 4], "multi-threaded: {multi_threaded}");
        assert_clean(&transport);
    }
}

/// Two async operations of one thread on one leaf awaited in the wrong order (the second, which
/// waits for the stripe the first holds, first): the waiting one gives up after the store's wait
/// limit instead of spinning for ever, and the first then completes.
#[test]
fn an_operation_waiting_on_a_sibling_that_is_not_polled_gives_up() {
    let config = SimConfig {
        latency: Some(Duration::from_micros(200)),
        ..SimConfig::default()
    };
    let transport = pool(&initial(), config);
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            wait_limit: Duration::from_millis(50),
            ..StoreConfig::default()
        },
    )
    .expect("open");
    let mut one = store.client().expect("client").into_async();
    let mut two = store.client().expect("client").into_async();
    let (a, b) = index_core::block_on(async {
        let a = one.insert(30_001, 1);
        let b = two.insert(30_002, 2);
        let b = b.await;
        (a.await, b)
    });
    assert_eq!(a, Ok(true));
    assert!(
        matches!(b, Err(index_core::IndexError::LockTimeout { .. })),
        "{b:?}"
    );
    let mut client = store.client().expect("client");
    assert_eq!(client.get(30_001), Ok(Some(1)));
    assert_eq!(client.get(30_002), Ok(None));
    assert_clean(&transport);
}
