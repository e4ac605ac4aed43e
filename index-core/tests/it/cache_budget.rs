//! The compute-side cache budget (ARCHITECTURE §6, "Cache budget"): a store stays within it
//! after every operation, drops pivots before it evicts any view, answers like a store without
//! a budget while another store changes the data under its evicted views, and costs what the
//! budget implies (one leaf per GET with every pivot held, more without).

#![cfg(not(loom))]

use std::collections::BTreeMap;

use index_core::{CacheMode, OpKind, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};

/// A small deterministic generator (xorshift64).
struct XorShift64(u64);

impl XorShift64 {
    fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const KEYS: u64 = 20_000;

fn pool(config: SimConfig) -> (SimTransport, Vec<u64>) {
    let load = BulkLoadConfig::default();
    let size = required_pool_bytes(KEYS, &load, 4096).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], config).expect("pool");
    let keys: Vec<u64> = (0..KEYS).map(|i| i * 1_000).collect();
    bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), &load).expect("load");
    (transport, keys)
}

fn open(transport: &SimTransport, budget: Option<u64>) -> Store<SimTransport> {
    Store::open(
        transport.clone(),
        StoreConfig {
            cache_budget: budget,
            ..StoreConfig::default()
        },
    )
    .expect("open")
}

/// Bytes the store's directory takes (what a store with no budget at all holds after opening),
/// and the average bytes of a view with pivots.
fn directory_and_view(transport: &SimTransport) -> (u64, u64) {
    let directory = open(transport, Some(0)).cache_bytes();
    let store = open(transport, None);
    let views = store.cache_bytes() - directory;
    (directory, views / store.slots())
}

/// Bytes the store caches with no budget: with every pivot, and lean.
fn unlimited_bytes(transport: &SimTransport) -> (u64, u64) {
    let full = open(transport, None).cache_bytes();
    let lean = Store::open(
        transport.clone(),
        StoreConfig {
            cache_mode: CacheMode::Lean,
            ..StoreConfig::default()
        },
    )
    .expect("open")
    .cache_bytes();
    (full, lean)
}

#[test]
fn a_budget_between_lean_and_full_drops_pivots_and_evicts_nothing() {
    let (transport, keys) = pool(SimConfig::default());
    let (full, lean) = unlimited_bytes(&transport);
    assert!(lean < full, "lean {lean} full {full}");
    let budget = (lean + full) / 2;
    let store = open(&transport, Some(budget));
    let mut client = store.client().expect("client");
    for &k in keys.iter().step_by(7) {
        assert_eq!(client.get(k).expect("get"), Some(k));
        assert!(store.cache_bytes() <= budget);
    }
    let stats = store.cache_stats();
    assert_eq!(stats.views_not_held(), 0, "{stats:?}");
    assert!(
        stats.views_with_pivots > 0 && stats.lean_views > 0,
        "{stats:?}"
    );
    assert_eq!(stats.bytes, store.cache_bytes());
}

#[test]
fn a_budget_below_lean_evicts_views_and_reads_them_again() {
    let (transport, keys) = pool(SimConfig::default());
    let (_, lean) = unlimited_bytes(&transport);
    let (directory, view) = directory_and_view(&transport);
    let budget = directory + 3 * view;
    assert!(budget < lean, "budget {budget}, lean {lean}");
    let store = open(&transport, Some(budget));
    let mut client = store.client().expect("client");
    let mut rng = XorShift64::new(7);
    for _ in 0..2_000 {
        let k = keys[(rng.next_u64() % KEYS) as usize];
        assert_eq!(client.get(k).expect("get"), Some(k));
        assert!(store.cache_bytes() <= budget, "{:?}", store.cache_stats());
    }
    let stats = store.cache_stats();
    assert!(stats.views_not_held() > 0, "{stats:?}");
    // Evicted views are read again: more than one round trip per GET on average.
    let rtts = client.stats().get(OpKind::Get).net.batches;
    assert!(rtts > 2_000, "{rtts} round trips for 2,000 GETs");
}

#[test]
fn no_budget_at_all_still_answers_everything() {
    let (transport, keys) = pool(SimConfig::default());
    let store = open(&transport, Some(0));
    let mut client = store.client().expect("client");
    for &k in keys.iter().step_by(97) {
        assert_eq!(client.get(k).expect("get"), Some(k));
        assert!(client.insert(k + 1, k).expect("insert"));
        assert_eq!(client.scan(k, 3).expect("scan").len(), 3);
    }
    // Only the view the last operation used is held: a budget below the directory and one
    // view is exceeded by that view alone.
    let stats = store.cache_stats();
    assert!(stats.views_with_pivots + stats.lean_views <= 1, "{stats:?}");
    assert_eq!(store.cache_bytes(), stats.bytes);
}

/// A writer on one store (no budget) inserts, updates and deletes while a reader on another
/// store, whose budget holds a few views, checks every answer against the oracle: its views are
/// evicted and read again from their records' addresses, across splits and retrainings (torn
/// and reordered verbs).
#[test]
fn a_budgeted_reader_on_another_store_follows_writes_and_retrainings() {
    let (transport, keys) = pool(SimConfig::harsh());
    let (directory, view) = directory_and_view(&transport);
    let budget = directory + 4 * view;
    let writer_store = open(&transport, None);
    let reader_store = open(&transport, Some(budget));
    let mut writer = writer_store.client().expect("client");
    let mut reader = reader_store.client().expect("client");
    let node = transport.memory_nodes()[0];
    let mut worker = retrainer::Retrainer::new(
        transport.endpoint().expect("endpoint"),
        node,
        retrainer::RetrainConfig::default(),
    )
    .expect("retrainer");
    let mut oracle: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
    let mut rng = XorShift64::new(11);
    let slots = writer_store.slots();
    for i in 0..6_000u64 {
        let k = (rng.next_u64() % KEYS) * 1_000 + rng.next_u64() % 4;
        match rng.next_u64() % 4 {
            0 => {
                let fresh = writer.insert(k, i).expect("insert");
                assert_eq!(fresh, !oracle.contains_key(&k));
                oracle.entry(k).or_insert(i);
            }
            1 => {
                let gone = writer.delete(k).expect("delete");
                assert_eq!(gone, oracle.remove(&k).is_some());
            }
            2 => {
                let got = reader.scan(k, 5).expect("scan");
                let want: Vec<(u64, u64)> =
                    oracle.range(k..).take(5).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(got, want, "scan from {k} at op {i}");
            }
            _ => assert_eq!(reader.get(k).expect("get"), oracle.get(&k).copied(), "{k}"),
        }
        if i % 500 == 0 {
            let slot = rng.next_u64() % slots;
            match worker.retrain_slot(slot) {
                Ok(_) | Err(retrainer::RetrainError::ModelRegionFull { .. }) => {}
                Err(e) => panic!("retrain {slot}: {e}"),
            }
        }
        assert!(
            reader_store.cache_bytes() <= budget,
            "{:?}",
            reader_store.cache_stats()
        );
    }
    let mut ep = transport.endpoint().expect("endpoint");
    assert!(verify(&mut ep, node).expect("verify").is_clean());
}

/// Leaves sized for a budget (`BulkLoadConfig::sized_for_cache`) keep every view's pivots within
/// it, so each GET READs one leaf of the sized geometry (smaller than the default's at 1 byte per
/// key); the default leaves under the same half-byte budget drop pivots and READ more than one.
#[test]
fn leaves_sized_for_a_budget_keep_one_small_leaf_per_get_within_it() {
    const KEYS: u64 = 100_000;
    let mut rng = XorShift64::new(11);
    let mut keys: Vec<u64> = (0..KEYS + KEYS / 10).map(|_| rng.next_u64() >> 1).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.truncate(KEYS as usize);
    // GETs of every key, in a scrambled order: (verbs, bytes) per GET, and the bytes cached.
    let gets = |load: &BulkLoadConfig, budget: f64| {
        let size = required_pool_bytes(KEYS, load, 4096).next_multiple_of(4096);
        let transport = SimTransport::anonymous_with(&[size], SimConfig::default()).expect("pool");
        bootstrap(&transport, keys.iter().map(|&k| (k, k)).collect(), load).expect("load");
        let limit = (budget * KEYS as f64) as u64;
        let store = open(&transport, Some(limit));
        let mut client = store.client().expect("client");
        for i in 0..KEYS {
            let k = keys[(i * 7_919 % KEYS) as usize];
            assert_eq!(client.get(k).expect("get"), Some(k));
        }
        assert!(store.cache_bytes() <= limit);
        let net = client.stats().get(OpKind::Get).net;
        let per = |v: u64| v as f64 / KEYS as f64;
        (per(net.verbs()), per(net.bytes_read + net.bytes_written))
    };
    for (budget, delta, fill) in [(1.0, 14, 12), (0.5, 26, 22)] {
        let sized = BulkLoadConfig::default().sized_for_cache(budget);
        assert_eq!(
            (sized.delta, sized.fill),
            (delta, fill),
            "at {budget} bytes per key"
        );
        let (verbs, bytes) = gets(&sized, budget);
        assert_eq!(verbs, 1.0, "one leaf per GET at {budget} bytes per key");
        assert_eq!(bytes, leaf_store::leaf_bytes(delta) as f64);
    }
    // The default leaves at half a byte per key: pivots dropped, more than a leaf per GET.
    let (verbs, bytes) = gets(&BulkLoadConfig::default(), 0.5);
    assert!(verbs > 1.5, "{verbs} verbs per GET");
    assert!(
        bytes > leaf_store::leaf_bytes(26) as f64,
        "{bytes} bytes per GET"
    );
    // Where no leaf size fits, the configuration stays as it was.
    assert_eq!(
        BulkLoadConfig::default().sized_for_cache(0.1),
        BulkLoadConfig::default()
    );
}
