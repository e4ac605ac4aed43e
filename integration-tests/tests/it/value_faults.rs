//! A transient fault and a crash at every verb of a put, an update, a splitting insert and a
//! delete of a byte value. Nothing torn is ever visible: another compute node reads the old value
//! or the new one, before any recovery. After a transient fault a retry completes the write and
//! the pool verifies clean — no block leaked. After a crash the compute node is declared dead and
//! recovered; then, once a retraining has dropped SLT slots a crashed split claimed, the pool
//! verifies clean too: the blocks it marked in use that no leaf names are free again and its
//! chunks belong to nobody (space is conserved).

#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::time::Duration;

use index_core::{Client, IndexError, Store, StoreConfig, bootstrap_values};
use integration_tests::recovery::{LEASE, recover_dead_member};
use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes, verify};
use rdma_transport::{Transport, TransportError};
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

#[derive(Debug, Clone, Copy)]
enum Op {
    Put(u64),
    Update(u64),
    Delete(u64),
}

struct Scenario {
    name: &'static str,
    before: &'static [Op],
    op: Op,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "put of a new key",
        before: &[],
        op: Op::Put(15),
    },
    Scenario {
        name: "update",
        before: &[],
        op: Op::Update(20),
    },
    Scenario {
        name: "splitting put",
        before: &[Op::Put(15)],
        op: Op::Put(16),
    },
    Scenario {
        name: "delete",
        before: &[],
        op: Op::Delete(30),
    },
];

fn value(key: u64, version: u64) -> Vec<u8> {
    let mut v = format!("key {key} version {version};").into_bytes();
    v.resize(60 + (key as usize % 50), b'.');
    v
}

fn apply(c: &mut Client<SimEndpoint>, op: Op) -> Result<bool, IndexError> {
    match op {
        Op::Put(k) => c.put_value(k, &value(k, 1)),
        Op::Update(k) => c.update_value(k, &value(k, 1)),
        Op::Delete(k) => c.delete(k),
    }
}

fn apply_oracle(oracle: &mut BTreeMap<u64, Vec<u8>>, op: Op) {
    match op {
        Op::Put(k) | Op::Update(k) => {
            oracle.insert(k, value(k, 1));
        }
        Op::Delete(k) => {
            oracle.remove(&k);
        }
    }
}

fn key_of(op: Op) -> u64 {
    match op {
        Op::Put(k) | Op::Update(k) | Op::Delete(k) => k,
    }
}

struct Prepared {
    transport: SimTransport,
    store: Store<SimTransport>,
    client: Client<SimEndpoint>,
    before: BTreeMap<u64, Vec<u8>>,
    after: BTreeMap<u64, Vec<u8>>,
}

fn config() -> StoreConfig {
    StoreConfig {
        lease_renewal: Duration::from_millis(2),
        wait_limit: Duration::from_secs(2),
        ..StoreConfig::default()
    }
}

fn prepare(s: &Scenario) -> Prepared {
    let load = BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        model_region_factor: 24,
        values: Some(ValueConfig {
            bytes: 2 << 20,
            chunk_bytes: 8 * 1024,
        }),
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(30, &load, 500).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], SimConfig::default()).expect("pool");
    let pairs: Vec<(u64, Vec<u8>)> = (0..30).map(|k| (k * 10, value(k * 10, 0))).collect();
    bootstrap_values(&transport, pairs.clone(), &load, |_, _, _, _| {}).expect("load");
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut client = store.client().expect("client");
    let mut before: BTreeMap<u64, Vec<u8>> = pairs.into_iter().collect();
    for &op in s.before {
        assert!(apply(&mut client, op).expect("before"));
        apply_oracle(&mut before, op);
    }
    let mut after = before.clone();
    apply_oracle(&mut after, s.op);
    Prepared {
        transport,
        store,
        client,
        before,
        after,
    }
}

fn verbs_of(s: &Scenario) -> u64 {
    let mut p = prepare(s);
    let before = p.client.net_stats().verbs();
    assert!(apply(&mut p.client, s.op).expect("op"));
    p.client.net_stats().verbs() - before
}

fn contents(transport: &SimTransport) -> BTreeMap<u64, Vec<u8>> {
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    c.scan_values(0, usize::MAX)
        .expect("scan")
        .into_iter()
        .collect()
}

fn assert_clean(transport: &SimTransport, what: &str) {
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{what}: {report}");
}

#[test]
fn a_transient_fault_at_any_verb_of_a_value_write_leaks_nothing_and_a_retry_succeeds() {
    for s in SCENARIOS {
        let total = verbs_of(s);
        for k in 0..total {
            let what = format!("{}: fault at verb {k} of {total}", s.name);
            let mut p = prepare(s);
            p.client.endpoint_mut().fail_after(k);
            match apply(&mut p.client, s.op) {
                Ok(applied) => assert!(applied, "{what}: reported no change"),
                Err(IndexError::Transport(TransportError::InjectedFault)) => {}
                Err(e) => panic!("{what}: {e}"),
            }
            apply(&mut p.client, s.op).unwrap_or_else(|e| panic!("{what}: retry: {e}"));
            assert_eq!(contents(&p.transport), p.after, "{what}");
            assert_eq!(p.store.values_forgotten(), 0, "{what}");
            drop((p.client, p.store));
            assert_clean(&p.transport, &what);
        }
    }
}

#[test]
fn a_crash_at_any_verb_of_a_value_write_shows_nothing_torn_and_recovery_leaks_nothing() {
    for s in SCENARIOS {
        let total = verbs_of(s);
        let key = key_of(s.op);
        for k in 0..total {
            let what = format!("{}: crash at verb {k} of {total}", s.name);
            let mut p = prepare(s);
            let mut worker = integration_tests::lease_watcher(&p.transport, LEASE);
            worker.check_members().expect("first look");
            p.client.endpoint_mut().crash_after(k);
            let _ = apply(&mut p.client, s.op);
            // Before any recovery: the old value or the new one, whole.
            let reader_store = Store::open(p.transport.clone(), config()).expect("open");
            let mut reader = reader_store.client().expect("client");
            let seen = reader
                .get_value(key)
                .unwrap_or_else(|e| panic!("{what}: read: {e}"));
            assert!(
                seen.as_ref() == p.before.get(&key) || seen.as_ref() == p.after.get(&key),
                "{what}: read {seen:?}"
            );
            assert_eq!(
                reader.value_retries(),
                0,
                "{what}: a torn or foreign block was seen"
            );
            drop((reader, reader_store));
            // The compute node dies: its lease lapses, the memory node recovers it.
            p.store.stop_renewing();
            drop(p.client);
            recover_dead_member(&mut worker);
            for _ in 0..3 {
                worker.check_members().expect("check");
            }
            let now = contents(&p.transport);
            assert!(
                now == p.before || now == p.after,
                "{what}: neither before nor after"
            );
            drop(p.store);
            // An SLT slot a split claimed before the crash is dropped by the next retraining
            // (which moves references, never values).
            worker.poll().expect("poll");
            while worker.retrain_next().expect("retrain").is_some() {}
            assert_eq!(
                contents(&p.transport),
                now,
                "{what}: retraining changed the contents"
            );
            assert_clean(&p.transport, &what);
        }
    }
}

#[test]
fn a_crash_at_any_verb_of_a_value_write_is_settled_by_the_live_store_itself() {
    // The client's endpoint dies, its store lives on: the store revokes the connection, repairs
    // the lock it may have left, and settles the client's value free word (the block its write
    // was replacing) before the index is used again. Once the store closes, nothing is leaked.
    for s in SCENARIOS {
        let total = verbs_of(s);
        for k in 0..total {
            let what = format!("{}: crash at verb {k} of {total}", s.name);
            let mut p = prepare(s);
            let mut worker = integration_tests::lease_watcher(&p.transport, LEASE);
            worker.check_members().expect("first look");
            p.client.endpoint_mut().crash_after(k);
            let _ = apply(&mut p.client, s.op);
            for _ in 0..2_000 {
                if p.store.unrecovered_locks() == 0 {
                    break;
                }
                worker.fill_boxes().expect("fence revoked connections");
                std::thread::sleep(Duration::from_micros(200));
            }
            assert_eq!(p.store.unrecovered_locks(), 0, "{what}: never settled");
            let mut ep = p.transport.endpoint().expect("endpoint");
            let layout =
                leaf_store::Layout::attach(&mut ep, p.transport.memory_nodes()[0]).expect("layout");
            let table = leaf_store::members::MemberTable::new(&layout);
            for tag in p.store.member_tags() {
                let words = table.read_free_words(&mut ep, tag).expect("free words");
                assert!(
                    words.iter().all(|&w| w == 0),
                    "{what}: a free word left set"
                );
            }
            let now = contents(&p.transport);
            assert!(
                now == p.before || now == p.after,
                "{what}: neither before nor after"
            );
            drop(p.client);
            drop(p.store);
            for _ in 0..3 {
                worker.check_members().expect("check");
            }
            worker.poll().expect("poll");
            while worker.retrain_next().expect("retrain").is_some() {}
            assert_clean(&p.transport, &what);
        }
    }
}
