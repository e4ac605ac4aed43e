//! Model-based test: random sequences of all six operations against a `BTreeMap`, with pages of
//! four entries so that leaf splits, internal splits and new roots happen constantly; the tree
//! is checked by `verify` at the end. A second compute node (its own `Tree`, so its own cache)
//! reads everything back.

use std::collections::BTreeMap;

use crate::common;

use bplus_tree::{BulkLoadConfig, Tree, TreeConfig, verify};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use rdma_transport::Transport;
use sim_transport::SimConfig;

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, u64),
    Update(u64, u64),
    Upsert(u64, u64),
    Delete(u64),
    Scan(u64, u8),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        // Keys from a small space, so operations meet the same keys often.
        let key = u64::arbitrary(g) % 400;
        let value = u64::arbitrary(g);
        match u8::arbitrary(g) % 8 {
            0 => Op::Get(key),
            1..=3 => Op::Insert(key, value),
            4 => Op::Update(key, value),
            5 => Op::Upsert(key, value),
            6 => Op::Delete(key),
            _ => Op::Scan(key, u8::arbitrary(g) % 20),
        }
    }
}

fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        page_size: 128,
        fill: Some(3),
        lock_words: 64,
        ..BulkLoadConfig::default()
    }
}

fn run(loaded: Vec<u64>, ops: Vec<Op>) -> TestResult {
    run_with(1, loaded, ops)
}

/// Nothing cached: every operation descends from the root through READs.
fn run_uncached(loaded: Vec<u64>, ops: Vec<Op>) -> TestResult {
    run_with(u8::MAX, loaded, ops)
}

fn run_with(cache_from_level: u8, loaded: Vec<u64>, ops: Vec<Op>) -> TestResult {
    let config_tree = TreeConfig {
        cache_from_level,
        ..TreeConfig::default()
    };
    let mut loaded = loaded;
    loaded.iter_mut().for_each(|k| *k %= 400);
    loaded.sort_unstable();
    loaded.dedup();
    let (transport, _) = common::loaded_pool(
        loaded.iter().map(|&k| (k, k)).collect(),
        &tiny(),
        ops.len() as u64 + 400,
        SimConfig::default(),
    );
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let tree = Tree::open(transport.clone(), config_tree).expect("open");
    let mut client = tree.client().expect("client");
    let mut model: BTreeMap<u64, u64> = loaded.iter().map(|&k| (k, k)).collect();
    for (i, op) in ops.iter().enumerate() {
        let ok = match *op {
            Op::Get(k) => client.get(k) == Ok(model.get(&k).copied()),
            Op::Insert(k, v) => {
                let expected = !model.contains_key(&k);
                if expected {
                    model.insert(k, v);
                }
                client.insert(k, v) == Ok(expected)
            }
            Op::Update(k, v) => {
                let expected = model.contains_key(&k);
                if expected {
                    model.insert(k, v);
                }
                client.update(k, v) == Ok(expected)
            }
            Op::Upsert(k, v) => {
                let expected = model.insert(k, v).is_none();
                client.upsert(k, v) == Ok(expected)
            }
            Op::Delete(k) => client.delete(k) == Ok(model.remove(&k).is_some()),
            Op::Scan(k, n) => {
                let expected: Vec<(u64, u64)> = model
                    .range(k..)
                    .take(usize::from(n))
                    .map(|(&k, &v)| (k, v))
                    .collect();
                client.scan(k, usize::from(n)) == Ok(expected)
            }
        };
        if !ok {
            return TestResult::error(format!("op {i}: {op:?} disagrees with the model"));
        }
    }
    let report = verify(&mut ep, node).expect("verify");
    if !report.is_clean() {
        return TestResult::error(format!("{report}"));
    }
    if report.keys != model.len() as u64 {
        return TestResult::error(format!("{} keys, model {}", report.keys, model.len()));
    }
    // Another compute node, whose cache starts empty, sees the same.
    let other = Tree::open(transport, TreeConfig::default()).expect("open");
    let mut reader = other.client().expect("client");
    let all = reader.scan(0, usize::MAX).expect("scan");
    let expected: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    if all != expected {
        return TestResult::error("a second compute node's scan disagrees".to_string());
    }
    for (&k, &v) in &model {
        if reader.get(k) != Ok(Some(v)) {
            return TestResult::error(format!("a second compute node misses {k}"));
        }
    }
    TestResult::passed()
}

#[test]
#[allow(deprecated)]
fn every_operation_agrees_with_a_btreemap_through_splits_and_new_roots() {
    QuickCheck::new()
        .tests(300)
        .r#gen(Gen::new(400))
        .quickcheck(run as fn(Vec<u64>, Vec<Op>) -> TestResult);
}

#[test]
#[allow(deprecated)]
fn without_a_cache_every_operation_agrees_with_a_btreemap_too() {
    QuickCheck::new()
        .tests(100)
        .r#gen(Gen::new(400))
        .quickcheck(run_uncached as fn(Vec<u64>, Vec<Op>) -> TestResult);
}

#[test]
fn an_empty_tree_grows_to_many_levels() {
    let ops: Vec<Op> = (0..2000u64)
        .map(|i| Op::Insert((i * 7919) % 400 + 400 * (i / 400), i))
        .chain((0..50).map(|i| Op::Scan(i * 37, 19)))
        .collect();
    let result = run(Vec::new(), ops);
    assert!(!result.is_error() && !result.is_failure(), "{result:?}");
}
