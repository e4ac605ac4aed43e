//! Model-based test: random sequences of all six operations against a `BTreeMap`, with pages of
//! four entries so that leaf splits, internal splits and new roots happen constantly; the tree
//! is checked by `verify` at the end. A second compute node (its own `Tree`, so its own cache)
//! reads everything back. Every test runs with both leaf kinds: Sherman's sorted pages, and
//! CHIME's hopscotch leaves of four slots in neighbourhoods of two (splits at every turn).

use std::collections::BTreeMap;

use crate::common;

use bplus_tree::{BulkLoadConfig, Tree, TreeConfig, verify};
use quickcheck::{Arbitrary, Gen, TestResult};
use rdma_transport::Transport;
use sim_transport::SimConfig;
use testkit::model_case::{self, CaseOp};

/// The keys' space: small, so operations meet the same keys often.
const KEYS: u64 = 400;

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
        let key = u64::arbitrary(g) % KEYS;
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

/// Sized as quickcheck's own `Vec`s are by a generator of size 400 (what these tests drew before
/// they shared `Case`): up to 399 keys loaded (the tree may start empty), up to 400 operations.
impl CaseOp for Op {
    type Entry = u64;
    const MIN_LOADS: usize = 0;
    const LOADS: usize = 400;
    const OPS: usize = 400;

    fn entry(g: &mut Gen) -> u64 {
        u64::arbitrary(g) % KEYS
    }

    fn key(entry: &u64) -> u64 {
        *entry
    }
}

type Case = model_case::Case<Op>;

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

fn run(case: Case) -> TestResult {
    run_with(false, 1, &case.initial, &case.ops)
}

/// Nothing cached: every operation descends from the root through READs.
fn run_uncached(case: Case) -> TestResult {
    run_with(false, u8::MAX, &case.initial, &case.ops)
}

fn run_hopscotch(case: Case) -> TestResult {
    run_with(true, 1, &case.initial, &case.ops)
}

fn run_hopscotch_uncached(case: Case) -> TestResult {
    run_with(true, u8::MAX, &case.initial, &case.ops)
}

/// Loads `loaded` (sorted, one per key) into a pool of hopscotch leaves or sorted pages, then
/// runs `ops`.
fn run_with(hopscotch: bool, cache_from_level: u8, loaded: &[u64], ops: &[Op]) -> TestResult {
    let config_tree = TreeConfig {
        cache_from_level,
        ..common::tree_config()
    };
    let (transport, _) = common::loaded_pool(
        loaded.iter().map(|&k| (k, k)).collect(),
        &tiny(hopscotch),
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
    let other = Tree::open(transport, common::tree_config()).expect("open");
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
fn every_operation_agrees_with_a_btreemap_through_splits_and_new_roots() {
    model_case::check(300, run);
}

#[test]
fn without_a_cache_every_operation_agrees_with_a_btreemap_too() {
    model_case::check(100, run_uncached);
}

#[test]
fn hopscotch_leaves_agree_with_a_btreemap_through_splits_and_new_roots() {
    model_case::check(300, run_hopscotch);
}

#[test]
fn without_a_cache_hopscotch_leaves_agree_with_a_btreemap_too() {
    model_case::check(100, run_hopscotch_uncached);
}

#[test]
fn an_empty_tree_grows_to_many_levels() {
    let ops: Vec<Op> = (0..2000u64)
        .map(|i| Op::Insert((i * 7919) % 400 + 400 * (i / 400), i))
        .chain((0..50).map(|i| Op::Scan(i * 37, 19)))
        .collect();
    for hopscotch in [false, true] {
        let result = run_with(hopscotch, 1, &[], &ops);
        assert!(!result.is_error() && !result.is_failure(), "{result:?}");
    }
}
