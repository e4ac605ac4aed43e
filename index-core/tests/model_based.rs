//! Model-based tests: random sequences of all six operations against a `BTreeMap` oracle, on tiny
//! configurations where splits, synonym chains and unlinks happen constantly, and on the default.
//! `verify` must be clean after every sequence.

#![cfg(not(loom))]

use std::collections::BTreeMap;

use index_core::{CacheMode, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};

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

#[derive(Debug, Clone)]
struct Case {
    initial: Vec<u64>,
    ops: Vec<Op>,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut initial: Vec<u64> = (0..usize::arbitrary(g) % 200 + 4).map(|_| key(g)).collect();
        initial.sort_unstable();
        initial.dedup();
        let ops = (0..usize::arbitrary(g) % 300 + 1)
            .map(|_| Op::arbitrary(g))
            .collect();
        Case { initial, ops }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let initial = self.initial.clone();
        Box::new(self.ops.shrink().map(move |ops| Case {
            initial: initial.clone(),
            ops,
        }))
    }
}

fn run(case: &Case, load: &BulkLoadConfig, nodes: usize, mode: CacheMode) -> Result<(), String> {
    if case.initial.len() < nodes {
        return Ok(());
    }
    let size = required_pool_bytes(
        case.initial.len() as u64,
        load,
        4 * case.ops.len() as u64 + 64,
    )
    .next_multiple_of(8)
        * 2;
    let transport = SimTransport::anonymous_with(&vec![size; nodes], SimConfig::harsh())
        .map_err(|e| e.to_string())?;
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
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).map_err(|e| e.to_string())?;
        if !report.is_clean() {
            return Err(format!("verify on node {}: {report}", node.id));
        }
    }
    Ok(())
}

fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    }
}

thread_local! {
    /// The configuration the property runs with (quickcheck takes plain functions).
    static SETUP: std::cell::RefCell<(BulkLoadConfig, usize, CacheMode)> =
        std::cell::RefCell::new((BulkLoadConfig::default(), 1, CacheMode::Pivots));
}

fn prop(case: Case) -> TestResult {
    let (load, nodes, mode) = SETUP.with(|s| s.borrow().clone());
    match run(&case, &load, nodes, mode) {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

fn check(load: BulkLoadConfig, nodes: usize, mode: CacheMode, tests: u64) {
    SETUP.with(|s| *s.borrow_mut() = (load, nodes, mode));
    QuickCheck::new()
        .tests(tests)
        .max_tests(tests * 4)
        .quickcheck(prop as fn(Case) -> TestResult);
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
