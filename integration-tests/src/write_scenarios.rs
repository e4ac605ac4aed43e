//! Writes on a tiny pool, each to be faulted at every one of its verbs: the scenarios the
//! write-fault and dead-compute-node tests share.

use std::collections::BTreeMap;
use std::time::Duration;

use index_core::{Client, IndexError, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, Problem, verify};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimEndpoint, SimTransport};

/// δ = 4, three keys per loaded leaf, two leaves per slot. Keys 0, 100, …, 2900: slot 1 holds
/// trained leaf 0 = {600, 700, 800} (the target) and leaf 1 = {900, 1000, 1100}.
pub fn load() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        model_region_factor: 8,
        ..BulkLoadConfig::default()
    }
}

/// The slot every scenario writes to.
pub const TARGET_SLOT: u64 = 1;
/// The trained leaf (of [`TARGET_SLOT`]) every scenario writes to.
pub const TARGET_LEAF: u64 = 0;
/// A key of the slot's other trained leaf that no scenario holds.
pub const OTHER_LEAF_KEY: u64 = 950;

#[derive(Debug, Clone, Copy)]
/// One write.
pub enum Op {
    /// Insert the key (value = key).
    Insert(u64),
    /// Update the key to the value.
    Update(u64, u64),
    /// Delete the key.
    Delete(u64),
}

#[derive(Debug, Clone, Copy)]
/// A write and what prepares it.
pub struct Scenario {
    /// What it is.
    pub name: &'static str,
    /// Done without faults first (fills the leaf, makes a synonym leaf, …).
    pub prepare: &'static [Op],
    /// The write that is faulted.
    pub op: Op,
}

/// Every kind of write: a leaf rewrite (insert, update, delete), a split, an unlink.
pub const SCENARIOS: [Scenario; 5] = [
    Scenario {
        name: "insert",
        prepare: &[],
        op: Op::Insert(650),
    },
    Scenario {
        name: "update",
        prepare: &[],
        op: Op::Update(700, 7),
    },
    Scenario {
        name: "delete",
        prepare: &[],
        op: Op::Delete(700),
    },
    Scenario {
        name: "splitting insert",
        prepare: &[Op::Insert(650)],
        op: Op::Insert(750),
    },
    Scenario {
        // After the split the chain is {600, 650} → {700, 750, 800}; emptying the synonym leaf
        // unlinks it.
        name: "unlinking delete",
        prepare: &[
            Op::Insert(650),
            Op::Insert(750),
            Op::Delete(700),
            Op::Delete(750),
        ],
        op: Op::Delete(800),
    },
];

/// Runs `op`.
pub fn apply(client: &mut Client<SimEndpoint>, op: Op) -> Result<bool, IndexError> {
    match op {
        Op::Insert(k) => client.insert(k, k),
        Op::Update(k, v) => client.update(k, v),
        Op::Delete(k) => client.delete(k),
    }
}

/// What `op` does to a map.
pub fn apply_oracle(oracle: &mut BTreeMap<u64, u64>, op: Op) {
    match op {
        Op::Insert(k) => {
            oracle.entry(k).or_insert(k);
        }
        Op::Update(k, v) => {
            if let Some(old) = oracle.get_mut(&k) {
                *old = v;
            }
        }
        Op::Delete(k) => {
            oracle.remove(&k);
        }
    }
}

/// A pool with a scenario's preparation done, and the store and client that did it.
#[allow(missing_debug_implementations)]
pub struct Prepared {
    /// The fabric.
    pub transport: SimTransport,
    /// The writer's store.
    pub store: Store<SimTransport>,
    /// The writer.
    pub client: Client<SimEndpoint>,
    /// The contents before the scenario's write.
    pub before: BTreeMap<u64, u64>,
    /// The contents after it.
    pub after: BTreeMap<u64, u64>,
}

/// Loads keys 0, 100, …, 2900 and runs the scenario's preparation.
///
/// # Panics
/// If loading or preparing fails (a test fixture).
pub fn prepare(scenario: Scenario) -> Prepared {
    prepare_with(scenario, SimConfig::default())
}

/// [`prepare`] on a simulator configured as `sim` (torn words, reordering).
///
/// # Panics
/// If loading or preparing fails (a test fixture).
pub fn prepare_with(scenario: Scenario, sim: SimConfig) -> Prepared {
    prepare_configured(scenario, sim, StoreConfig::default())
}

/// [`prepare_with`], the writer's store opened with `config`.
///
/// # Panics
/// If loading or preparing fails (a test fixture).
pub fn prepare_configured(scenario: Scenario, sim: SimConfig, config: StoreConfig) -> Prepared {
    let keys: Vec<u64> = (0..30).map(|i| i * 100).collect();
    let size =
        leaf_store::required_pool_bytes(keys.len() as u64, &load(), 64).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), &load()).expect("load");
    let store = Store::open(transport.clone(), config).expect("open");
    let mut client = store.client().expect("client");
    let mut before: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
    for &op in scenario.prepare {
        assert!(apply(&mut client, op).expect("prepare"), "{op:?}");
        apply_oracle(&mut before, op);
    }
    let mut after = before.clone();
    apply_oracle(&mut after, scenario.op);
    Prepared {
        transport,
        store,
        client,
        before,
        after,
    }
}

/// A client of a new store (its own caches) waiting at most `wait` for locks.
///
/// # Panics
/// If the store cannot be opened (a test fixture).
pub fn other_client(transport: &SimTransport, wait: Duration) -> Client<SimEndpoint> {
    Store::open(
        transport.clone(),
        StoreConfig {
            wait_limit: wait,
            ..StoreConfig::default()
        },
    )
    .expect("open")
    .client()
    .expect("client")
}

/// What `verify` finds on memory node 0.
///
/// # Panics
/// If the pool cannot be read at all (a test fixture).
pub fn problems(transport: &SimTransport) -> Vec<Problem> {
    let mut ep = transport.endpoint().expect("endpoint");
    verify(&mut ep, transport.memory_nodes()[0])
        .expect("verify")
        .problems
}

/// Verbs the scenario's write takes without faults.
///
/// # Panics
/// If the write fails (a test fixture).
pub fn verbs_of(scenario: Scenario) -> u64 {
    let mut p = prepare(scenario);
    let before = p.client.net_stats().verbs();
    assert!(apply(&mut p.client, scenario.op).expect("op"));
    p.client.net_stats().verbs() - before
}
