//! Loom models of the leaf-store verbs over the simulator. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p leaf-store --release --test loom_leaf`.
//!
//! Each protocol passes every interleaving, and a deliberately broken variant of it is caught.

#![cfg(loom)]

use std::sync::Arc;

use leaf_store::{
    LAYOUT_VERSION, Layout, Leaf, LeafStoreError, LeafTableEntry, SUPERBLOCK_MAGIC, Superblock,
    alloc_leaf, leaf_bytes, try_lock, unlock,
};
use rdma_transport::{Endpoint, RemoteAddr, Transport};
use sim_transport::SimTransport;

const DELTA: u64 = 2;
const LEAVES: u64 = 4;
/// A spare word in the model region, used as the LT entry of the leaf under test.
const LT_WORD: u64 = 256 + 16 + 48 + 16;

/// A minimal valid pool: one slot, a one-entry ring, a 32-byte model region and four leaves of
/// δ = 2; `alloc_num` starts at 1 (leaf 0 is "trained").
fn pool() -> (Arc<SimTransport>, Layout) {
    let slot_table = 256;
    // Slot table: count word, reserved word, one entry.
    let ring = slot_table + 32;
    let members = ring + 8 * (leaf_store::RingLayout::HEADER_WORDS + 1 + 1);
    let model = members + leaf_store::members::MEMBERS_BYTES;
    let leaves = model + 32;
    let size = leaves + 16 + LEAVES * leaf_bytes(DELTA);
    let transport = Arc::new(SimTransport::anonymous(&[size]).expect("pool"));
    let sb = Superblock {
        magic: SUPERBLOCK_MAGIC,
        version: LAYOUT_VERSION,
        epsilon: 1,
        delta: DELTA,
        fill: DELTA,
        slot_leaves: 1,
        node_id: 0,
        node_count: 1,
        key_lo: 0,
        key_hi: u64::MAX,
        pool_bytes: size,
        leaf_region_offset: leaves,
        leaf_capacity: LEAVES,
        leaf_bytes: leaf_bytes(DELTA),
        slot_table_offset: slot_table,
        slots: 1,
        model_region_offset: model,
        model_region_bytes: 32,
        ring_offset: ring,
        ring_capacity: 1,
        keys_loaded: 0,
        trained_leaves: 1,
        record_bytes_loaded: 0,
        members_offset: members,
        slot_capacity: 1,
        generation_bits: 0,
        value_region_offset: 0,
        value_region_bytes: 0,
        value_chunk_bytes: 0,
        reserved: [0; 2],
        checksum: 0,
    }
    .sealed();
    let mut ep = transport.endpoint().expect("endpoint");
    ep.write(addr(0), &sb.to_bytes()).expect("superblock");
    let layout = Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("attach");
    ep.write_word(layout.alloc_num_addr(), 1)
        .expect("alloc_num");
    ep.write_word(layout.capacity_addr(), LEAVES)
        .expect("capacity");
    let empty = Leaf::new().encode(0, DELTA).expect("encode");
    ep.write(layout.leaf_addr(0), &empty).expect("leaf 0");
    ep.write_word(addr(LT_WORD), LeafTableEntry::new(0).expect("entry").raw())
        .expect("lt");
    (transport, layout)
}

fn addr(offset: u64) -> RemoteAddr {
    RemoteAddr::new(0, offset).expect("addr")
}

fn caught(model: impl Fn() + Send + Sync + 'static, expected: &str) {
    sim_transport::loom_support::assert_caught(|| loom::model(model), expected);
}

// --- FAA allocation ----------------------------------------------------------------------------

fn allocation(broken: bool) {
    let (transport, layout) = pool();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let t = Arc::clone(&transport);
            loom::thread::spawn(move || {
                let mut ep = t.endpoint().expect("endpoint");
                if broken {
                    // Read, then write back plus one: not atomic.
                    let n = ep.read_word(layout.alloc_num_addr()).expect("read");
                    ep.write_word(layout.alloc_num_addr(), n + 1)
                        .expect("write");
                    n
                } else {
                    alloc_leaf(&mut ep, &layout).expect("alloc")
                }
            })
        })
        .collect();
    let got: Vec<u64> = threads
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    assert_ne!(got[0], got[1], "one leaf number handed out twice");
}

#[test]
fn faa_allocation_hands_out_unique_leaves() {
    loom::model(|| allocation(false));
}

#[test]
fn loom_catches_read_then_write_allocation() {
    caught(|| allocation(true), "handed out twice");
}

// --- the leaf lock -----------------------------------------------------------------------------

/// Inserts `key` into leaf 0 under its LT lock (or without it, when `broken`).
fn insert(ep: &mut impl Endpoint, layout: &Layout, key: u64, broken: bool) {
    let entry = LeafTableEntry::new(0).expect("entry");
    let held = if broken {
        None
    } else {
        loop {
            match try_lock(ep, addr(LT_WORD), entry, 1).expect("cas") {
                Ok(held) => break Some(held),
                Err(_) => loom::thread::yield_now(),
            }
        }
    };
    let mut bytes = vec![0u8; leaf_bytes(DELTA) as usize];
    let mut leaf = loop {
        ep.read(layout.leaf_addr(0), &mut bytes).expect("read");
        match Leaf::decode(0, &bytes) {
            Ok(leaf) => break leaf,
            Err(LeafStoreError::TornLeaf { .. }) => loom::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    };
    let entries = leaf.entries_mut();
    let at = entries.partition_point(|e| e.0 < key);
    entries.insert(at, (key, key));
    ep.write(layout.leaf_addr(0), &leaf.encode(0, DELTA).expect("fits"))
        .expect("write");
    if let Some(held) = held {
        unlock(ep, addr(LT_WORD), held, None).expect("unlock");
    }
}

fn mutual_exclusion(broken: bool) {
    let (transport, layout) = pool();
    let writers: Vec<_> = [10u64, 20]
        .into_iter()
        .map(|key| {
            let t = Arc::clone(&transport);
            loom::thread::spawn(move || {
                insert(&mut t.endpoint().expect("endpoint"), &layout, key, broken)
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let mut ep = transport.endpoint().expect("endpoint");
    let mut bytes = vec![0u8; leaf_bytes(DELTA) as usize];
    ep.read(layout.leaf_addr(0), &mut bytes).expect("read");
    // Unsynchronised writers can also leave a torn leaf behind: that loses inserts too.
    let entries = Leaf::decode(0, &bytes)
        .map(|leaf| leaf.entries().to_vec())
        .unwrap_or_default();
    assert_eq!(entries, [(10, 10), (20, 20)], "an insert was lost");
}

#[test]
fn the_lt_lock_excludes_concurrent_writers() {
    loom::model(|| mutual_exclusion(false));
}

#[test]
fn loom_catches_writers_that_skip_the_lock() {
    caught(|| mutual_exclusion(true), "an insert was lost");
}

// --- a reader racing a locked writer ------------------------------------------------------------

/// Decodes without checking the checksum: what a reader that trusts a single READ would accept.
fn decode_unchecked(bytes: &[u8]) -> Vec<(u64, u64)> {
    let word = |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    (0..(word(1) as usize).min(DELTA as usize))
        .map(|i| (word(2 + 2 * i), word(3 + 2 * i)))
        .collect()
}

fn reader_vs_writer(broken: bool) {
    let (transport, layout) = pool();
    let old = vec![(1u64, 1u64), (2, 2)];
    let new = vec![(7u64, 70u64), (8, 80)];
    {
        let mut ep = transport.endpoint().expect("endpoint");
        let leaf = Leaf::from_entries(old.clone()).expect("sorted");
        ep.write(layout.leaf_addr(0), &leaf.encode(0, DELTA).expect("fits"))
            .expect("write");
    }
    let t = Arc::clone(&transport);
    let new_entries = new.clone();
    let writer = loom::thread::spawn(move || {
        let mut ep = t.endpoint().expect("endpoint");
        let entry = LeafTableEntry::new(0).expect("entry");
        let held = try_lock(&mut ep, addr(LT_WORD), entry, 1)
            .expect("cas")
            .expect("free");
        let leaf = Leaf::from_entries(new_entries).expect("sorted");
        ep.write(layout.leaf_addr(0), &leaf.encode(0, DELTA).expect("fits"))
            .expect("write");
        unlock(&mut ep, addr(LT_WORD), held, None).expect("unlock");
    });
    let mut ep = transport.endpoint().expect("endpoint");
    let mut bytes = vec![0u8; leaf_bytes(DELTA) as usize];
    ep.read(layout.leaf_addr(0), &mut bytes).expect("read");
    let accepted = if broken {
        Some(decode_unchecked(&bytes))
    } else {
        Leaf::decode(0, &bytes)
            .ok()
            .map(|leaf| leaf.entries().to_vec())
    };
    if let Some(entries) = accepted {
        assert!(
            entries == old || entries == new,
            "reader accepted a torn leaf: {entries:?}"
        );
    }
    writer.join().expect("writer");
}

#[test]
fn a_reader_never_accepts_a_torn_leaf() {
    loom::model(|| reader_vs_writer(false));
}

#[test]
fn loom_catches_a_reader_that_skips_the_checksum() {
    caught(|| reader_vs_writer(true), "reader accepted a torn leaf");
}
