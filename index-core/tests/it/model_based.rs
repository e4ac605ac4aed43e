//! Model-based tests: random sequences of all six operations against a `BTreeMap` oracle, on tiny
//! configurations where splits, synonym chains and unlinks happen constantly, and on the default.
//! `verify` must be clean after every sequence.

#![cfg(not(loom))]

use std::collections::BTreeMap;

use index_core::{CacheMode, Store, StoreConfig, bootstrap};
use leaf_store::BulkLoadConfig;
use quickcheck::{Arbitrary, Gen, TestResult};

use crate::common::{self, CaseOp, tiny};

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, u64),
    Update(u64, u64),
    Delete(u64),
    Upsert(u64, u64),
    Scan(u64, usize),
}

/// Keys from a small domain (about 600 values, so inserts fill leaves and deletes hit), spread so
/// that untrained keys fall between trained ones.
fn key(g: &mut Gen) -> u64 {
    let k = u64::arbitrary(g) % 150;
    if bool::arbitrary(g) {
        k * 1_000
    } else {
        k * 1_000 + u64::arbitrary(g) % 3 + 1
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let v = u64::arbitrary(g);
        match u8::arbitrary(g) % 12 {
            0 | 1 => Op::Get(key(g)),
            2..=4 => Op::Insert(key(g), v),
            5 => Op::Update(key(g), v),
            6 | 7 => Op::Delete(key(g)),
            8 | 9 => Op::Upsert(key(g), v),
            _ => Op::Scan(key(g), usize::arbitrary(g) % 40),
        }
    }
}

impl CaseOp for Op {
    type Entry = u64;
    const LOADS: usize = 200;
    const OPS: usize = 300;

    fn entry(g: &mut Gen) -> u64 {
        key(g)
    }

    fn key(entry: &u64) -> u64 {
        *entry
    }
}

type Case = common::Case<Op>;

fn run(case: &Case, load: &BulkLoadConfig, nodes: usize, mode: CacheMode) -> Result<(), String> {
    if case.initial.len() < nodes {
        return Ok(());
    }
    let transport = common::pool(case, load, nodes)?;
    let pairs: Vec<(u64, u64)> = case.initial.iter().map(|&k| (k, k ^ 0xabcd)).collect();
    bootstrap(&transport, pairs.clone(), load).map_err(|e| e.to_string())?;
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            cache_mode: mode,
            ..StoreConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut client = store.client().map_err(|e| e.to_string())?;
    let mut oracle: BTreeMap<u64, u64> = pairs.into_iter().collect();
    for (i, op) in case.ops.iter().enumerate() {
        let what = format!("op {i} {op:?}");
        match *op {
            Op::Get(k) => {
                let got = client.get(k).map_err(|e| format!("{what}: {e}"))?;
                if got != oracle.get(&k).copied() {
                    return Err(format!("{what}: got {got:?}, oracle {:?}", oracle.get(&k)));
                }
            }
            Op::Insert(k, v) => {
                let done = client.insert(k, v).map_err(|e| format!("{what}: {e}"))?;
                let expected = !oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Update(k, v) => {
                let done = client.update(k, v).map_err(|e| format!("{what}: {e}"))?;
                let expected = oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Delete(k) => {
                let done = client.delete(k).map_err(|e| format!("{what}: {e}"))?;
                if done != oracle.remove(&k).is_some() {
                    return Err(format!("{what}: returned {done}"));
                }
            }
            Op::Upsert(k, v) => {
                let inserted = client.upsert(k, v).map_err(|e| format!("{what}: {e}"))?;
                if inserted != oracle.insert(k, v).is_none() {
                    return Err(format!("{what}: returned {inserted}"));
                }
            }
            Op::Scan(k, n) => {
                let got = client.scan(k, n).map_err(|e| format!("{what}: {e}"))?;
                let expected: Vec<(u64, u64)> =
                    oracle.range(k..).take(n).map(|(&a, &b)| (a, b)).collect();
                if got != expected {
                    return Err(format!("{what}: scan got {got:?}\n expected {expected:?}"));
                }
            }
        }
    }
    // Every key reads back, a full scan equals the oracle, and the pool verifies clean.
    let all = client.scan(0, usize::MAX >> 1).map_err(|e| e.to_string())?;
    let expected: Vec<(u64, u64)> = oracle.iter().map(|(&a, &b)| (a, b)).collect();
    if all != expected {
        return Err(format!(
            "final scan differs: {} entries, oracle {}",
            all.len(),
            expected.len()
        ));
    }
    common::verify_all(&transport)
}

thread_local! {
    /// The configuration the property runs with (quickcheck takes plain functions).
    static SETUP: std::cell::RefCell<(BulkLoadConfig, usize, CacheMode)> =
        std::cell::RefCell::new((BulkLoadConfig::default(), 1, CacheMode::Pivots));
}

fn prop(case: Case) -> TestResult {
    let (load, nodes, mode) = SETUP.with(|s| s.borrow().clone());
    common::outcome(run(&case, &load, nodes, mode))
}

fn check(load: BulkLoadConfig, nodes: usize, mode: CacheMode, tests: u64) {
    SETUP.with(|s| *s.borrow_mut() = (load, nodes, mode));
    common::check(tests, prop);
}

#[test]
fn tiny_pivots_one_node() {
    check(tiny(), 1, CacheMode::Pivots, 150);
}

#[test]
fn tiny_lean_one_node() {
    check(tiny(), 1, CacheMode::Lean, 150);
}

#[test]
fn tiny_three_nodes() {
    check(tiny(), 3, CacheMode::Pivots, 80);
    check(tiny(), 3, CacheMode::Lean, 40);
}

#[test]
fn full_leaves_split_on_every_first_insert() {
    check(
        BulkLoadConfig { fill: 4, ..tiny() },
        1,
        CacheMode::Pivots,
        100,
    );
}

#[test]
fn default_configuration() {
    check(BulkLoadConfig::default(), 1, CacheMode::Pivots, 60);
    check(BulkLoadConfig::default(), 2, CacheMode::Lean, 30);
}
