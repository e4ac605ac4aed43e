//! Byte values: random sequences of every operation with values of random lengths against a
//! `BTreeMap<u64, Vec<u8>>`, on tiny layouts (splits, chains and unlinks all the time), one and
//! two memory nodes, with a second `Store` (its own cache) reading along; `verify` — the value
//! region included: no block leaked, none named twice — clean after every sequence.

#![cfg(not(loom))]

use std::collections::BTreeMap;

use index_core::{IndexError, Store, StoreConfig, bootstrap, bootstrap_values};
use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes};
use quickcheck::{Arbitrary, Gen, TestResult};
use sim_transport::SimTransport;

use crate::common::{self, CaseOp};

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, usize),
    Update(u64, usize),
    Put(u64, usize),
    Delete(u64),
    Scan(u64, usize),
    /// A GET through the second store.
    OtherGet(u64),
}

fn key(g: &mut Gen) -> u64 {
    (u64::arbitrary(g) % 120) * 10 + u64::arbitrary(g) % 2
}

/// Mostly short values, some of a few KiB.
fn len(g: &mut Gen) -> usize {
    match u8::arbitrary(g) % 8 {
        0 => 0,
        1 => usize::arbitrary(g) % 3000,
        _ => usize::arbitrary(g) % 120,
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 14 {
            0 | 1 => Op::Get(key(g)),
            2..=4 => Op::Insert(key(g), len(g)),
            5 => Op::Update(key(g), len(g)),
            6 | 7 => Op::Put(key(g), len(g)),
            8 | 9 => Op::Delete(key(g)),
            10 | 11 => Op::Scan(key(g), usize::arbitrary(g) % 30),
            _ => Op::OtherGet(key(g)),
        }
    }
}

impl CaseOp for Op {
    /// A key and the length of its value.
    type Entry = (u64, usize);
    const LOADS: usize = 150;
    const OPS: usize = 250;

    fn entry(g: &mut Gen) -> (u64, usize) {
        (key(g), len(g))
    }

    fn key(entry: &(u64, usize)) -> u64 {
        entry.0
    }
}

type Case = common::Case<Op>;

/// A value whose bytes say which key and which write made it.
fn bytes(key: u64, version: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (key as usize)
                .wrapping_mul(131)
                .wrapping_add(version * 7 + i) as u8
        })
        .collect()
}

fn tiny(value_bytes: u64) -> BulkLoadConfig {
    BulkLoadConfig {
        values: Some(ValueConfig {
            bytes: value_bytes,
            chunk_bytes: 8 * 1024,
        }),
        ..common::tiny()
    }
}

fn run(case: &Case, nodes: usize) -> Result<(), String> {
    if case.initial.len() < nodes {
        return Ok(());
    }
    let load = tiny(8 << 20);
    let transport = common::pool(case, &load, nodes)?;
    let pairs: Vec<(u64, Vec<u8>)> = case
        .initial
        .iter()
        .map(|&(k, n)| (k, bytes(k, 0, n)))
        .collect();
    bootstrap_values(&transport, pairs.clone(), &load, |_, _, _, _| {})
        .map_err(|e| e.to_string())?;
    let store =
        Store::open(transport.clone(), StoreConfig::default()).map_err(|e| e.to_string())?;
    let other =
        Store::open(transport.clone(), StoreConfig::default()).map_err(|e| e.to_string())?;
    let mut client = store.client().map_err(|e| e.to_string())?;
    let mut reader = other.client().map_err(|e| e.to_string())?;
    let mut oracle: BTreeMap<u64, Vec<u8>> = pairs.into_iter().collect();
    for (i, op) in case.ops.iter().enumerate() {
        let what = format!("op {i} {op:?}");
        let version = i + 1;
        match *op {
            Op::Get(k) | Op::OtherGet(k) => {
                let c = if matches!(op, Op::Get(_)) {
                    &mut client
                } else {
                    &mut reader
                };
                let got = c.get_value(k).map_err(|e| format!("{what}: {e}"))?;
                if got.as_ref() != oracle.get(&k) {
                    return Err(format!("{what}: got {got:?}, oracle {:?}", oracle.get(&k)));
                }
            }
            Op::Insert(k, n) => {
                let v = bytes(k, version, n);
                let done = client
                    .insert_value(k, &v)
                    .map_err(|e| format!("{what}: {e}"))?;
                let expected = !oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Update(k, n) => {
                let v = bytes(k, version, n);
                let done = client
                    .update_value(k, &v)
                    .map_err(|e| format!("{what}: {e}"))?;
                let expected = oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Put(k, n) => {
                let v = bytes(k, version, n);
                let inserted = client
                    .put_value(k, &v)
                    .map_err(|e| format!("{what}: {e}"))?;
                if inserted != oracle.insert(k, v).is_none() {
                    return Err(format!("{what}: returned {inserted}"));
                }
            }
            Op::Delete(k) => {
                let done = client.delete(k).map_err(|e| format!("{what}: {e}"))?;
                if done != oracle.remove(&k).is_some() {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Scan(k, n) => {
                let got = client
                    .scan_values(k, n)
                    .map_err(|e| format!("{what}: {e}"))?;
                let expected: Vec<(u64, Vec<u8>)> = oracle
                    .range(k..)
                    .take(n)
                    .map(|(&a, b)| (a, b.clone()))
                    .collect();
                if got != expected {
                    return Err(format!(
                        "{what}: scan got {} rows, expected {}",
                        got.len(),
                        expected.len()
                    ));
                }
            }
        }
    }
    let all = reader
        .scan_values(0, usize::MAX >> 1)
        .map_err(|e| e.to_string())?;
    let expected: Vec<(u64, Vec<u8>)> = oracle.iter().map(|(&a, b)| (a, b.clone())).collect();
    if all != expected {
        return Err(format!(
            "final scan: {} entries, oracle {}",
            all.len(),
            expected.len()
        ));
    }
    drop((client, reader, store, other));
    common::verify_all(&transport)
}

thread_local! {
    static NODES: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

fn prop(case: Case) -> TestResult {
    common::outcome(run(&case, NODES.with(|n| n.get())))
}

fn check(nodes: usize, tests: u64) {
    NODES.with(|n| n.set(nodes));
    common::check(tests, prop);
}

#[test]
fn byte_values_match_a_btreemap_on_one_memory_node() {
    check(1, 30);
}

#[test]
fn byte_values_match_a_btreemap_on_two_memory_nodes() {
    check(2, 20);
}

#[test]
fn the_wrong_kind_of_value_and_a_value_too_long_get_typed_errors() {
    let load = tiny(1 << 20);
    let size = required_pool_bytes(10, &load, 100).next_multiple_of(8);
    let t = SimTransport::anonymous(&[size]).unwrap();
    bootstrap_values(
        &t,
        (0..10).map(|k| (k, vec![1u8; 3])).collect(),
        &load,
        |_, _, _, _| {},
    )
    .unwrap();
    let store = Store::open(t.clone(), StoreConfig::default()).unwrap();
    let mut c = store.client().unwrap();
    assert!(matches!(
        c.get(3),
        Err(IndexError::WrongValueKind { stores: "byte", .. })
    ));
    assert!(matches!(
        c.insert(30, 1),
        Err(IndexError::WrongValueKind { stores: "byte", .. })
    ));
    assert!(matches!(
        c.scan(0, 3),
        Err(IndexError::WrongValueKind { stores: "byte", .. })
    ));
    let limit = 8 * 1024 - 8 - 24;
    let err = c.put_value(4, &vec![0u8; 9000]).unwrap_err();
    assert!(
        matches!(err, IndexError::ValueTooLarge { len: 9000, limit: l, .. } if l <= limit),
        "{err}"
    );
    assert!(err.to_string().contains("bytes at most"), "{err}");
    assert_eq!(
        c.get_value(4).unwrap(),
        Some(vec![1u8; 3]),
        "nothing changed"
    );
    // And byte operations on a pool of u64 values.
    let plain = BulkLoadConfig::default();
    let t = SimTransport::anonymous(&[required_pool_bytes(10, &plain, 100).next_multiple_of(8)])
        .unwrap();
    bootstrap(&t, (0..10).map(|k| (k, k)).collect(), &plain).unwrap();
    let store = Store::open(t, StoreConfig::default()).unwrap();
    let mut c = store.client().unwrap();
    assert!(matches!(
        c.get_value(3),
        Err(IndexError::WrongValueKind { stores: "u64", .. })
    ));
    assert!(matches!(
        c.put_value(3, b"x"),
        Err(IndexError::WrongValueKind { stores: "u64", .. })
    ));
    assert_eq!(c.get(3).unwrap(), Some(3));
}
