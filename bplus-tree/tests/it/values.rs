//! Byte values in the B+-tree baseline: a model-based check against a `BTreeMap<u64, Vec<u8>>`
//! with two compute nodes and pages small enough to split all the time; a torn-mode stress with
//! writers on one compute node and readers on another checking every value's bytes while blocks
//! are freed and used again; a reader paused past the reuse grace, whose block goes to another
//! key; the typed errors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bplus_tree::{
    BulkLoadConfig, LeafKind, REUSE_GRACE, Tree, TreeConfig, TreeError, ValueConfig,
    bulk_load_values, required_pool_bytes, verify,
};
use quickcheck::{Arbitrary, Gen, QuickCheck};
use rdma_transport::Transport;
use sim_transport::{Gate, SimConfig, SimTransport};

fn pool(
    pairs: Vec<(u64, Vec<u8>)>,
    value_bytes: u64,
    chunk_bytes: u64,
    sim: SimConfig,
) -> SimTransport {
    pool_of(LeafKind::Sorted, pairs, value_bytes, chunk_bytes, sim)
}

/// [`pool`] with leaves of `leaf` (hopscotch: sixteen slots in neighbourhoods of four).
fn pool_of(
    leaf: LeafKind,
    pairs: Vec<(u64, Vec<u8>)>,
    value_bytes: u64,
    chunk_bytes: u64,
    sim: SimConfig,
) -> SimTransport {
    let page_size = match leaf {
        LeafKind::Hopscotch(g) => g.leaf_bytes().next_multiple_of(64),
        _ => 256,
    };
    let config = BulkLoadConfig {
        page_size,
        leaf,
        fill: Some(6),
        lock_words: 256,
        values: Some(ValueConfig {
            bytes: value_bytes,
            chunk_bytes,
        }),
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(pairs.len() as u64, &config, 4000).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let mut ep = transport.endpoint().expect("endpoint");
    bulk_load_values(&mut ep, transport.memory_nodes()[0], pairs, &config).expect("load");
    transport
}

/// The bytes of version `version` of `key`'s value: its length and every byte follow from both,
/// so a torn, foreign or made-up value is recognised.
fn value_of(key: u64, version: u64) -> Vec<u8> {
    let len = ((key * 31 + version * 17) % 700) as usize;
    (0..len)
        .map(|i| (key as usize * 7 + version as usize * 13 + i) as u8)
        .collect()
}

/// The version `bytes` are of `key`'s value, if they are one.
fn version_of(key: u64, bytes: &[u8], max: u64) -> Option<u64> {
    (0..=max).find(|&v| value_of(key, v) == bytes)
}

#[derive(Debug, Clone)]
enum Op {
    Get(u64),
    Insert(u64, usize),
    Update(u64, usize),
    Put(u64, usize),
    Delete(u64),
    Scan(u64, usize),
}

const KEYS: u64 = 300;

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let key = u64::arbitrary(g) % KEYS;
        // Lengths from empty to a few KiB, most short.
        let len = match u8::arbitrary(g) % 8 {
            0 => 0,
            1 => usize::arbitrary(g) % 4096,
            _ => usize::arbitrary(g) % 200,
        };
        match u8::arbitrary(g) % 6 {
            0 => Op::Get(key),
            1 => Op::Insert(key, len),
            2 => Op::Update(key, len),
            3 => Op::Put(key, len),
            4 => Op::Delete(key),
            _ => Op::Scan(key, usize::arbitrary(g) % 20),
        }
    }
}

fn bytes(key: u64, len: usize, step: usize) -> Vec<u8> {
    (0..len).map(|i| (key as usize + step + i) as u8).collect()
}

fn run_model(ops: Vec<(bool, Op)>) -> bool {
    run_model_with(LeafKind::Sorted, ops)
}

fn run_model_hopscotch(ops: Vec<(bool, Op)>) -> bool {
    run_model_with(hopscotch(), ops)
}

fn hopscotch() -> LeafKind {
    LeafKind::Hopscotch(chime::Geometry::new(16, 4).expect("shape"))
}

fn run_model_with(leaf: LeafKind, ops: Vec<(bool, Op)>) -> bool {
    let loaded: Vec<(u64, Vec<u8>)> = (0..KEYS).step_by(3).map(|k| (k, bytes(k, 40, 0))).collect();
    let transport = pool_of(
        leaf,
        loaded.clone(),
        4 << 20,
        16 << 10,
        SimConfig::default(),
    );
    let trees = [
        Tree::open(transport.clone(), TreeConfig::default()).expect("open"),
        Tree::open(transport.clone(), TreeConfig::default()).expect("open"),
    ];
    let mut clients = [
        trees[0].client().expect("client"),
        trees[1].client().expect("client"),
    ];
    let mut model: BTreeMap<u64, Vec<u8>> = loaded.into_iter().collect();
    for (step, (which, op)) in ops.into_iter().enumerate() {
        let c = &mut clients[usize::from(which)];
        match op {
            Op::Get(k) => assert_eq!(c.get_value(k).expect("get"), model.get(&k).cloned()),
            Op::Insert(k, len) => {
                let v = bytes(k, len, step);
                let absent = !model.contains_key(&k);
                assert_eq!(c.insert_value(k, &v).expect("insert"), absent);
                model.entry(k).or_insert(v);
            }
            Op::Update(k, len) => {
                let v = bytes(k, len, step);
                let present = model.contains_key(&k);
                assert_eq!(c.update_value(k, &v).expect("update"), present);
                if present {
                    model.insert(k, v);
                }
            }
            Op::Put(k, len) => {
                let v = bytes(k, len, step);
                assert_eq!(
                    c.put_value(k, &v).expect("put"),
                    model.insert(k, v).is_none()
                );
            }
            Op::Delete(k) => {
                assert_eq!(c.delete(k).expect("delete"), model.remove(&k).is_some());
            }
            Op::Scan(k, n) => {
                let want: Vec<(u64, Vec<u8>)> = model
                    .range(k..)
                    .take(n)
                    .map(|(k, v)| (*k, v.clone()))
                    .collect();
                assert_eq!(c.scan_values(k, n).expect("scan"), want);
            }
        }
    }
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    let space = report.values.expect("a value region");
    assert_eq!(space.blocks, model.len() as u64);
    assert_eq!(
        space.live_bytes,
        model.values().map(|v| v.len() as u64).sum::<u64>()
    );
    true
}

#[test]
fn byte_values_on_two_compute_nodes_match_a_btreemap() {
    QuickCheck::new()
        .tests(40)
        .quickcheck(run_model as fn(Vec<(bool, Op)>) -> bool);
}

#[test]
fn byte_values_over_hopscotch_leaves_match_a_btreemap() {
    QuickCheck::new()
        .tests(40)
        .quickcheck(run_model_hopscotch as fn(Vec<(bool, Op)>) -> bool);
}

#[test]
fn torn_stress_readers_on_another_compute_node_see_only_whole_values_of_their_key() {
    values_stress(LeafKind::Sorted);
}

#[test]
fn torn_stress_over_hopscotch_leaves_sees_only_whole_values_of_their_key() {
    values_stress(hopscotch());
}

fn values_stress(leaf: LeafKind) {
    const KEYS: u64 = 200;
    const WRITERS: u64 = 2;
    let loaded: Vec<(u64, Vec<u8>)> = (0..KEYS).map(|k| (k, value_of(k, 0))).collect();
    // Small chunks: blocks are freed and used again all through the run.
    let transport = pool_of(leaf, loaded, 2 << 20, 4 << 10, SimConfig::harsh());
    let writers = Arc::new(Tree::open(transport.clone(), TreeConfig::default()).expect("open"));
    let readers = Arc::new(Tree::open(transport.clone(), TreeConfig::default()).expect("open"));
    let done = Arc::new(AtomicBool::new(false));
    let versions: u64 = 60;
    let mut handles = Vec::new();
    for t in 0..WRITERS {
        let tree = Arc::clone(&writers);
        handles.push(std::thread::spawn(move || {
            let mut client = tree.client().expect("client");
            for version in 1..=versions {
                for k in (t..KEYS).step_by(WRITERS as usize) {
                    assert_eq!(client.update_value(k, &value_of(k, version)), Ok(true));
                }
                if version % 10 == 0 {
                    // Past the grace, so every block freed so far can be used again, by other
                    // keys too. However fast the writes run, the blocks freed before one pause
                    // cover the ten versions after it: about 11 of the 61 versions claim space.
                    std::thread::sleep(REUSE_GRACE);
                }
            }
        }));
    }
    let mut checkers = Vec::new();
    for r in 0..2u64 {
        let (tree, done) = (Arc::clone(&readers), Arc::clone(&done));
        checkers.push(std::thread::spawn(move || {
            let mut client = tree.client().expect("client");
            let mut last = vec![0u64; KEYS as usize];
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) {
                for k in (r..KEYS).step_by(7) {
                    let v = client.get_value(k).expect("get").expect("present");
                    let version = version_of(k, &v, versions)
                        .unwrap_or_else(|| panic!("key {k}: {} bytes of no version", v.len()));
                    assert!(version >= last[k as usize], "key {k} went back");
                    last[k as usize] = version;
                    reads += 1;
                }
                let rows = client.scan_values(r * 50, 30).expect("scan");
                assert_eq!(rows.len(), 30);
                for (k, v) in rows {
                    assert!(version_of(k, &v, versions).is_some(), "scan: key {k}");
                }
            }
            reads
        }));
    }
    for h in handles {
        h.join().expect("writer");
    }
    done.store(true, Ordering::Release);
    let reads: u64 = checkers
        .into_iter()
        .map(|h| h.join().expect("reader"))
        .sum();
    assert!(reads > 0);
    let mut client = readers.client().expect("client");
    for k in 0..KEYS {
        assert_eq!(client.get_value(k), Ok(Some(value_of(k, versions))));
    }
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    // Every update freed a block: without reuse the blocks written would need this many bytes.
    let written: u64 = (0..KEYS)
        .flat_map(|k| (0..=versions).map(move |v| value_of(k, v).len() as u64 + 24))
        .sum();
    let space = report.values.expect("values");
    assert!(
        space.claimed_bytes * 3 < written,
        "{space}; {written} bytes written"
    );
}

#[test]
fn a_reader_paused_past_the_grace_finds_its_block_reused_and_reads_again_through_the_leaf() {
    const KEYS: u64 = 40;
    // Every value in one size class, so a freed block goes to whichever key is written next.
    let value = |key: u64, version: u64| -> Vec<u8> {
        (0..100)
            .map(|i| (key * 3 + version * 5 + i) as u8)
            .collect()
    };
    let loaded: Vec<(u64, Vec<u8>)> = (0..KEYS).map(|k| (k, value(k, 0))).collect();
    let transport = pool(loaded, 1 << 20, 4 << 10, SimConfig::default());
    let writers = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let readers = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut writer = writers.client().expect("client");
    let mut reader = readers.client().expect("client");
    // The cache warm: the next GET is a leaf READ, then a block READ.
    assert_eq!(reader.get_value(7), Ok(Some(value(7, 0))));
    let gate = Gate::new();
    reader.endpoint_mut().pause_after(1, gate.clone());
    let get = std::thread::spawn(move || {
        let got = reader.get_value(7);
        (got, reader.stats().value_retries)
    });
    assert!(gate.wait_for_arrival(Duration::from_secs(5)));
    // Key 7's block is freed, and after the grace goes to other keys.
    assert_eq!(writer.update_value(7, &value(7, 1)), Ok(true));
    std::thread::sleep(REUSE_GRACE * 2);
    for round in 2..6 {
        for k in (0..KEYS).filter(|&k| k != 7) {
            assert_eq!(writer.update_value(k, &value(k, round)), Ok(true));
        }
        std::thread::sleep(REUSE_GRACE * 2);
    }
    gate.open();
    let (got, retries) = get.join().expect("reader");
    assert_eq!(got, Ok(Some(value(7, 1))), "a foreign value was returned");
    assert!(retries > 0, "the block was not reused under the reader");
}

#[test]
fn what_byte_values_cannot_do_is_a_typed_error() {
    let transport = pool(
        vec![(1, b"one".to_vec())],
        64 << 10,
        16 << 10,
        SimConfig::default(),
    );
    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    // The largest class that fits a 16 KiB chunk.
    let limit = tree.layouts()[0].max_value_len();
    assert!(limit < 16 << 10 && limit > 10_000, "{limit}");
    assert!(matches!(
        client.put_value(2, &vec![0; limit as usize + 1]),
        Err(TreeError::ValueTooLarge { len, limit: l, .. }) if len == limit + 1 && l == limit
    ));
    assert_eq!(client.put_value(2, &vec![7; limit as usize]), Ok(true));
    assert!(matches!(
        client.get(1),
        Err(TreeError::WrongValueKind { stores: "byte", .. })
    ));
    assert!(matches!(
        client.insert(5, 5),
        Err(TreeError::WrongValueKind { .. })
    ));
    // Four chunks: the region runs out, and says so.
    let mut result = Ok(true);
    for k in 10..100 {
        result = client.put_value(k, &[1; 5000]);
        if result.is_err() {
            break;
        }
    }
    assert!(
        matches!(result, Err(TreeError::ValuesExhausted { chunks: 4, .. })),
        "{result:?}"
    );
    assert_eq!(client.get_value(1), Ok(Some(b"one".to_vec())));
    // A pool of 8-byte values refuses byte operations.
    let config = BulkLoadConfig::default();
    let size = required_pool_bytes(1, &config, 10).next_multiple_of(4096);
    let plain = SimTransport::anonymous(&[size]).expect("pool");
    let mut ep = plain.endpoint().expect("endpoint");
    bplus_tree::bulk_load(&mut ep, plain.memory_nodes()[0], vec![(1, 1)], &config).expect("load");
    let tree = Tree::open(plain, TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    assert!(matches!(
        client.get_value(1),
        Err(TreeError::WrongValueKind { stores: "u64", .. })
    ));
}
