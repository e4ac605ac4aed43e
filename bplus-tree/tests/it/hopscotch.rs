//! Hopscotch leaves where keys move most: every key homed in the first two slots of eight-slot
//! leaves with neighbourhoods of four, so inserts move keys along (displacement) and split leaves
//! all the time. Two writers on one compute node, a reader on another (its own cache), in torn
//! and reordering mode; the history must be linearizable. A reader that took a neighbourhood
//! read while a displacement landed for an absent key (rather than reading it again) would
//! miss a key that was there throughout. GETs read hot keys speculatively (one slot, where the
//! key was last found), which displacements keep moving.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common;

use bplus_tree::{BulkLoadConfig, LeafKind, Tree, TreeConfig, verify};
use chime::Geometry;
use rdma_transport::{Endpoint, Transport};
use sim_transport::SimConfig;
use testkit::XorShift64;
use testkit::linearizability::{KvEvent, KvOp, KvResult, check};

const OPS: u64 = 4_000;

#[test]
fn keys_moved_by_displacements_and_splits_are_never_missed() {
    let g = Geometry::new(8, 4).expect("shape");
    let keys: Vec<u64> = (1..).filter(|&k| g.home(k) < 2).take(24).collect();
    let initial: Vec<(u64, u64)> = keys.iter().step_by(2).map(|&k| (k, 1)).collect();
    let config = BulkLoadConfig {
        page_size: g.leaf_bytes().next_multiple_of(64),
        fill: Some(4),
        lock_words: 64,
        leaf: LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    };
    let (transport, _) = common::loaded_pool(initial.clone(), &config, 4 * OPS, SimConfig::harsh());
    let writers = Arc::new(Tree::open(transport.clone(), common::tree_config()).expect("open"));
    let clock = Arc::new(AtomicU64::new(0));
    let keys = Arc::new(keys);
    let mut handles = Vec::new();
    for t in 0..3u64 {
        let tree = if t < 2 {
            Arc::clone(&writers)
        } else {
            Arc::new(Tree::open(transport.clone(), common::tree_config()).expect("open"))
        };
        let (clock, keys) = (Arc::clone(&clock), Arc::clone(&keys));
        handles.push(std::thread::spawn(move || {
            let mut client = tree.client().expect("client");
            let mut random = XorShift64::new(t + 11);
            let mut history = Vec::new();
            for i in 0..OPS {
                let key = keys[(random.next_u64() % keys.len() as u64) as usize];
                let op = match (t, random.next_u64() % 3) {
                    (2, _) => KvOp::Get,
                    (_, 0) => KvOp::Insert(i + 2),
                    (_, 1) => KvOp::Delete,
                    _ => KvOp::Upsert(i + 2),
                };
                let call = clock.fetch_add(1, Ordering::SeqCst);
                let result = match op {
                    KvOp::Get => client.get(key).map(KvResult::Value),
                    KvOp::Insert(v) => client.insert(key, v).map(KvResult::Done),
                    KvOp::Upsert(v) => client.upsert(key, v).map(KvResult::Done),
                    KvOp::Delete => client.delete(key).map(KvResult::Done),
                    KvOp::Update(v) => client.update(key, v).map(KvResult::Done),
                };
                let ret = clock.fetch_add(1, Ordering::SeqCst);
                let result = result.expect("no fault is injected: every operation completes");
                history.push(KvEvent {
                    key,
                    op,
                    call,
                    ret: Some((ret, result)),
                });
            }
            (history, client.stats())
        }));
    }
    let mut history: Vec<KvEvent> = Vec::new();
    let (mut hits, mut misses) = (0, 0);
    for h in handles {
        let (events, stats) = h.join().expect("thread");
        history.extend(events);
        hits += stats.speculative_hits;
        misses += stats.speculative_misses;
    }
    // Misses depend on how the threads happen to interleave (a busy machine may run the reader
    // apart from the writers): the next test makes one for certain.
    assert!(
        hits > 0,
        "GETs read speculatively: {hits} hits, {misses} misses"
    );
    let start: BTreeMap<u64, u64> = initial.into_iter().collect();
    if let Err(violation) = check(&start, &history) {
        panic!("not linearizable: {violation}");
    }
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert!(report.pages_per_level.len() > 1, "leaves split: {report}");
}

/// A leaf of `g` holding `keys` (values = keys) and a key whose insert moves one of them: the
/// keys, the key inserted, and the key it moves.
fn a_displacement(g: Geometry) -> (Vec<u64>, u64, u64) {
    let mut random = XorShift64::new(5);
    loop {
        let mut keys: Vec<u64> = (0..6).map(|_| random.next_u64() % 1000 + 1).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut leaf = chime::Leaf::new(g, None);
        if keys.iter().any(|&k| leaf.insert(k, k).is_err()) {
            continue;
        }
        for j in 1..1000u64 {
            let mut after = leaf.clone();
            if keys.contains(&j) || after.insert(j, j).is_err() {
                continue;
            }
            if let Some(&moved) = keys.iter().find(|&&k| after.find(k) != leaf.find(k)) {
                return (keys, j, moved);
            }
        }
    }
}

/// A GET whose neighbourhood READ sees a displacement half landed (the moved key gone from its
/// old slot, not yet in its new one: its home's bitmap names a slot without it) reads again until
/// the WRITE is whole, rather than answer "absent" for a key present throughout.
#[test]
fn a_neighbourhood_read_while_a_displacement_lands_is_read_again() {
    let g = Geometry::new(8, 4).expect("shape");
    let (keys, inserted, moved) = a_displacement(g);
    let config = BulkLoadConfig {
        page_size: g.leaf_bytes().next_multiple_of(64),
        fill: Some(8),
        lock_words: 64,
        leaf: LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    };
    let (transport, layout) = common::loaded_pool(
        keys.iter().map(|&k| (k, k)).collect(),
        &config,
        16,
        SimConfig::default(),
    );
    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    assert_eq!(client.get(moved), Ok(Some(moved)));

    // The leaf is page 1 (a root leaf); a displacement, and its WRITE stopped half way.
    let mut ep = transport.endpoint().expect("endpoint");
    let words = |ep: &mut sim_transport::SimEndpoint| -> Vec<u64> {
        let mut bytes = vec![0u8; g.leaf_bytes() as usize];
        ep.read(layout.page_addr(1), &mut bytes).expect("read");
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("word")))
            .collect()
    };
    let before = words(&mut ep);
    let leaf = chime::Leaf::decode(g, 1, &before).expect("whole");
    let mut after_leaf = leaf.clone();
    after_leaf.insert(inserted, inserted).expect("room");
    let after = after_leaf.encode(1);
    let to = after_leaf.find(moved).expect("moved");
    let mut torn = after.clone();
    let at = g.slot_word(to);
    torn[at..at + 3].copy_from_slice(&before[at..at + 3]);
    let bytes = |w: &[u64]| -> Vec<u8> { w.iter().flat_map(|w| w.to_le_bytes()).collect() };
    ep.write(layout.page_addr(1), &bytes(&torn)).expect("write");

    let finisher = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(30));
        ep.write(layout.page_addr(1), &bytes(&after))
            .expect("write");
    });
    assert_eq!(
        client.get(moved),
        Ok(Some(moved)),
        "a key present throughout is found"
    );
    finisher.join().expect("finisher");
    assert_eq!(client.get(inserted), Ok(Some(inserted)));
}

#[test]
fn a_page_too_small_for_a_hopscotch_leaf_is_refused() {
    let g = Geometry::default();
    let config = BulkLoadConfig {
        page_size: 1024,
        leaf: LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    };
    let transport = sim_transport::SimTransport::anonymous(&[8 << 20]).expect("pool");
    let mut ep = transport.endpoint().expect("endpoint");
    let loaded = bplus_tree::bulk_load(&mut ep, transport.memory_nodes()[0], vec![(1, 1)], &config);
    assert!(
        matches!(&loaded, Err(bplus_tree::TreeError::Config(why)) if why.contains("hopscotch")),
        "{loaded:?}"
    );
    let fits = BulkLoadConfig::hopscotch();
    assert!(fits.page_size >= g.leaf_bytes() && fits.page_size.is_multiple_of(64));
    let layout = bplus_tree::bulk_load(&mut ep, transport.memory_nodes()[0], vec![(1, 1)], &fits)
        .expect("load");
    assert_eq!(layout.leaf, LeafKind::Hopscotch(g));
    let tree = Tree::open(transport, TreeConfig::default()).expect("open");
    assert_eq!(
        tree.layouts()[0].leaf,
        LeafKind::Hopscotch(g),
        "the superblock names it"
    );
}

/// A root leaf split whose new root was never installed (its splitter stopped in between): the
/// next compute node that splits a leaf of that chain installs a root over the chain itself,
/// reading hopscotch leaves as such (not as sorted pages, which never check).
#[test]
fn an_uninstalled_split_of_a_root_leaf_is_finished_by_the_next_splitter() {
    let g = Geometry::new(8, 4).expect("shape");
    let config = BulkLoadConfig {
        page_size: g.leaf_bytes().next_multiple_of(64),
        fill: Some(6),
        lock_words: 16,
        leaf: LeafKind::Hopscotch(g),
        ..BulkLoadConfig::default()
    };
    let keys: Vec<(u64, u64)> = (1..=6).map(|k| (k * 1000, k)).collect();
    let (transport, layout) =
        common::loaded_pool(keys.clone(), &config, 4000, SimConfig::default());
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let (level, root_no) = bplus_tree::unpack_root(ep.read_word(layout.root_addr()).expect("root"));
    assert_eq!(level, 0, "the root is a leaf");

    // Split the root leaf by hand, as a splitter would, and stop before installing a root.
    let mut bytes = vec![0u8; g.leaf_bytes() as usize];
    ep.read(layout.page_addr(root_no), &mut bytes)
        .expect("read");
    let words: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("word")))
        .collect();
    let leaf = chime::Leaf::decode(g, root_no, &words).expect("whole");
    let right_no = ep.faa(layout.alloc_addr(), 1).expect("allocate");
    let (left, right, _) = leaf.split(right_no).expect("split");
    let encode = |leaf: &chime::Leaf, page: u64| -> Vec<u8> {
        leaf.encode(page)
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    };
    ep.write(layout.page_addr(right_no), &encode(&right, right_no))
        .expect("write");
    ep.write(layout.page_addr(root_no), &encode(&left, root_no))
        .expect("write");
    let report = verify(&mut ep, node).expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("never installed")),
        "{report}"
    );

    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    for &(k, v) in &keys {
        assert_eq!(client.get(k), Ok(Some(v)));
    }
    for k in 0..300u64 {
        assert_eq!(client.insert(k * 37 + 7, k), Ok(true), "insert {k}");
    }
    let (new_level, _) = bplus_tree::unpack_root(ep.read_word(layout.root_addr()).expect("root"));
    assert!(new_level > 0, "a root was installed above the leaves");
    let report = verify(&mut ep, node).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, 6 + 300);
}

/// A root split left uninstalled over a chain longer than one page takes (here the root word
/// names the first of 14 leaves): the next splitter installs a root over as much of the chain
/// as a page takes, instead of waiting for a root that never comes, and every key stays found
/// (the rest of the chain by moving right).
#[test]
fn a_chain_longer_than_a_page_under_an_uninstalled_root_gets_a_root() {
    let config = common::tiny_hopscotch();
    let keys: Vec<(u64, u64)> = (1..=40).map(|k| (k * 100, k)).collect();
    let (transport, layout) =
        common::loaded_pool(keys.clone(), &config, 4000, SimConfig::default());
    let mut ep = transport.endpoint().expect("endpoint");
    // The root as if the leaves' first split had never been installed: leaf 1, level 0.
    ep.write_word(layout.root_addr(), bplus_tree::root_word(0, 1))
        .expect("root word");
    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    for k in 0..200u64 {
        assert_eq!(client.insert(k * 20 + 1, k), Ok(true), "insert {k}");
    }
    let (level, _) = bplus_tree::unpack_root(ep.read_word(layout.root_addr()).expect("root"));
    assert!(level > 0, "a root was installed above the leaves");
    for &(k, v) in &keys {
        assert_eq!(client.get(k), Ok(Some(v)), "loaded key {k}");
    }
    for k in 0..200u64 {
        assert_eq!(client.get(k * 20 + 1), Ok(Some(k)), "inserted key {k}");
    }
}

/// A GET whose hot-entry slot no longer holds its key (another compute node deleted it there)
/// finds so in its one-slot READ, reads the key's neighbourhood instead and answers right: a
/// speculative miss, made for certain (the stress test above meets them only as threads
/// interleave).
#[test]
fn a_speculative_read_of_a_slot_that_moved_on_is_a_miss_and_reads_again() {
    let config = common::tiny_hopscotch();
    let initial: Vec<(u64, u64)> = (1..=40).map(|k| (k * 10, k)).collect();
    let (transport, _) = common::loaded_pool(initial, &config, 400, SimConfig::default());
    let reader = Tree::open(transport.clone(), common::tree_config()).expect("open");
    let writer = Tree::open(transport.clone(), common::tree_config()).expect("open");
    let (mut reader, mut writer) = (
        reader.client().expect("client"),
        writer.client().expect("client"),
    );
    let key = 200;
    assert_eq!(reader.get(key), Ok(Some(20)));
    assert_eq!(reader.get(key), Ok(Some(20)), "found where it was last");
    let before = reader.stats();
    assert!(before.speculative_hits > 0, "{before:?}");
    assert_eq!(writer.delete(key), Ok(true));
    assert_eq!(reader.get(key), Ok(None), "the slot moved on: read again");
    let after = reader.stats();
    assert_eq!(
        after.speculative_misses,
        before.speculative_misses + 1,
        "{after:?}"
    );
    assert_eq!(writer.insert(key, 7), Ok(true));
    assert_eq!(reader.get(key), Ok(Some(7)));
}
