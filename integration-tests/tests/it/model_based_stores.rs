//! Model-based: random sequences of all six operations, spread over three compute nodes — three
//! `Store`s with separate caches, each going stale as the others write — interleaved with "retrain
//! slot S now", on tiny layouts where leaves split, empty and are dropped by retrainings. The oracle
//! is a `BTreeMap`; `verify` must be clean after every sequence.

#![cfg(not(loom))]

use std::collections::BTreeMap;

use index_core::{CacheMode, Client, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use quickcheck::{Arbitrary, Gen, TestResult};
use rdma_transport::Transport;
use retrainer::{RetrainError, Retrainer};
use sim_transport::{SimConfig, SimEndpoint, SimTransport};
use testkit::model_case::{self, CaseOp};

use crate::common::no_sweep;

const STORES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Get(usize, u64),
    Insert(usize, u64, u64),
    Update(usize, u64, u64),
    Delete(usize, u64),
    Upsert(usize, u64, u64),
    Scan(usize, u64, usize),
    /// Retrain slot (this modulo the slot count) now.
    Retrain(u64),
}

/// Keys from a small domain, so inserts fill leaves and deletes empty them.
fn key(g: &mut Gen) -> u64 {
    let k = u64::arbitrary(g) % 120;
    if bool::arbitrary(g) {
        k * 1_000
    } else {
        k * 1_000 + u64::arbitrary(g) % 3 + 1
    }
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let v = u64::arbitrary(g);
        let s = usize::arbitrary(g) % STORES;
        match u8::arbitrary(g) % 14 {
            0 | 1 => Op::Get(s, key(g)),
            2..=4 => Op::Insert(s, key(g), v),
            5 => Op::Update(s, key(g), v),
            6..=8 => Op::Delete(s, key(g)),
            9 => Op::Upsert(s, key(g), v),
            10 | 11 => Op::Scan(s, key(g), usize::arbitrary(g) % 30),
            _ => Op::Retrain(u64::arbitrary(g)),
        }
    }
}

impl CaseOp for Op {
    type Entry = u64;
    const MIN_LOADS: usize = 8;
    const LOADS: usize = 150;
    const OPS: usize = 250;

    fn entry(g: &mut Gen) -> u64 {
        key(g)
    }

    fn key(entry: &u64) -> u64 {
        *entry
    }
}

type Case = model_case::Case<Op>;

/// What each store may cache: all of it, or each its own budget (see [`budgets`]).
#[derive(Debug, Clone, Copy)]
enum Budgets {
    Unlimited,
    /// Store 0 unlimited, store 1 a few views, store 2 nothing (every view read when used).
    Tight,
}

fn budgets(which: Budgets, store: usize) -> Option<u64> {
    match which {
        Budgets::Unlimited => None,
        Budgets::Tight => [None, Some(600), Some(0)][store % 3],
    }
}

fn run(case: &Case, mode: CacheMode, which: Budgets) -> Result<(), String> {
    let load = BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 4,
        slot_leaves: 2,
        model_region_factor: 32,
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(case.initial.len() as u64, &load, 512).next_multiple_of(4096);
    let transport =
        SimTransport::anonymous_with(&[size], SimConfig::harsh()).map_err(|e| e.to_string())?;
    let pairs: Vec<(u64, u64)> = case.initial.iter().map(|&k| (k, k)).collect();
    let layout = bootstrap(&transport, pairs.clone(), &load).map_err(|e| e.to_string())?[0].layout;
    let node = transport.memory_nodes()[0];
    let config = StoreConfig {
        cache_mode: mode,
        ..StoreConfig::default()
    };
    let mut clients: Vec<Client<SimEndpoint>> = (0..STORES)
        .map(|s| {
            let config = StoreConfig {
                cache_budget: budgets(which, s),
                ..config.clone()
            };
            Store::open(transport.clone(), config)
                .and_then(|store| store.client())
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let mut worker = Retrainer::new(
        transport.endpoint().map_err(|e| e.to_string())?,
        node,
        no_sweep(),
    )
    .map_err(|e| e.to_string())?;
    let mut oracle: BTreeMap<u64, u64> = pairs.into_iter().collect();
    for (i, op) in case.ops.iter().enumerate() {
        let at = |what: String| format!("op {i} {op:?}: {what}");
        match *op {
            Op::Get(s, k) => {
                let got = clients[s].get(k).map_err(|e| at(e.to_string()))?;
                if got != oracle.get(&k).copied() {
                    return Err(at(format!("got {got:?}, oracle {:?}", oracle.get(&k))));
                }
            }
            Op::Insert(s, k, v) => {
                let done = clients[s].insert(k, v).map_err(|e| at(e.to_string()))?;
                let expected = !oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(at(format!("returned {done}")));
                }
            }
            Op::Update(s, k, v) => {
                let done = clients[s].update(k, v).map_err(|e| at(e.to_string()))?;
                let expected = oracle.contains_key(&k);
                if expected {
                    oracle.insert(k, v);
                }
                if done != expected {
                    return Err(at(format!("returned {done}")));
                }
            }
            Op::Upsert(s, k, v) => {
                let inserted = clients[s].upsert(k, v).map_err(|e| at(e.to_string()))?;
                if inserted != oracle.insert(k, v).is_none() {
                    return Err(at(format!("returned {inserted}")));
                }
            }
            Op::Delete(s, k) => {
                let done = clients[s].delete(k).map_err(|e| at(e.to_string()))?;
                if done != oracle.remove(&k).is_some() {
                    return Err(at(format!("returned {done}")));
                }
            }
            Op::Scan(s, start, n) => {
                let got = clients[s].scan(start, n).map_err(|e| at(e.to_string()))?;
                let expected: Vec<(u64, u64)> = oracle
                    .range(start..)
                    .take(n)
                    .map(|(&k, &v)| (k, v))
                    .collect();
                if got != expected {
                    return Err(at(format!("got {got:?}, oracle {expected:?}")));
                }
            }
            Op::Retrain(s) => match worker.retrain_slot(s % layout.loaded_slots()) {
                Ok(_) | Err(RetrainError::ModelRegionFull { .. }) => {}
                Err(e) => return Err(at(e.to_string())),
            },
        }
    }
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    let report = verify(&mut ep, node).map_err(|e| e.to_string())?;
    if !report.is_clean() {
        return Err(format!("verify: {report}"));
    }
    Ok(())
}

fn check(case: Case, mode: CacheMode, which: Budgets) -> TestResult {
    model_case::outcome(run(&case, mode, which))
}

#[test]
fn three_stores_and_retrainings_agree_with_a_btreemap_pivots() {
    model_case::check(80, check_pivots);
}

#[test]
fn three_stores_and_retrainings_agree_with_a_btreemap_lean() {
    model_case::check(80, check_lean);
}

#[test]
fn three_stores_within_cache_budgets_agree_with_a_btreemap() {
    model_case::check(80, check_budgets);
}

fn check_pivots(case: Case) -> TestResult {
    check(case, CacheMode::Pivots, Budgets::Unlimited)
}

fn check_lean(case: Case) -> TestResult {
    check(case, CacheMode::Lean, Budgets::Unlimited)
}

fn check_budgets(case: Case) -> TestResult {
    check(case, CacheMode::Pivots, Budgets::Tight)
}
