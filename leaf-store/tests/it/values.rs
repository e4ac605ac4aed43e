//! Pools with byte values: bulk load, read back through the references, `verify` of the value
//! region (and the damage it must find).

#![cfg(not(loom))]

use leaf_store::value::{STATE_USED, ValueRef, check_block};
use leaf_store::{
    BulkLoadConfig, Layout, LeafStoreError, Problem, ValueConfig, bulk_load, bulk_load_values,
    read_all_entries, required_pool_bytes, verify,
};
use rdma_transport::{Endpoint, Transport};
use sim_transport::SimTransport;

fn record(key: u64) -> Vec<u8> {
    let len = (key * 7919 % 700) as usize;
    (0..len).map(|i| (key as usize * 31 + i) as u8).collect()
}

fn config(value_bytes: u64, chunk_bytes: u64) -> BulkLoadConfig {
    BulkLoadConfig {
        delta: 8,
        fill: 6,
        slot_leaves: 8,
        values: Some(ValueConfig {
            bytes: value_bytes,
            chunk_bytes,
        }),
        ..BulkLoadConfig::default()
    }
}

fn loaded(keys: u64) -> (SimTransport, Vec<(u64, Vec<u8>)>) {
    let pairs: Vec<(u64, Vec<u8>)> = (0..keys).map(|k| (k * 3, record(k * 3))).collect();
    let config = config(4 << 20, 16 * 1024);
    let size = required_pool_bytes(keys, &config, 100).next_multiple_of(8);
    let t = SimTransport::anonymous(&[size]).expect("pool");
    let node = t.memory_nodes()[0];
    let mut ep = t.endpoint().expect("endpoint");
    let report =
        bulk_load_values(&mut ep, node, pairs.clone(), &config, |_, _, _| {}).expect("bulk load");
    assert_eq!(report.keys, keys);
    (t, pairs)
}

#[test]
fn byte_values_load_read_back_and_verify_clean() {
    let (t, pairs) = loaded(3_000);
    let node = t.memory_nodes()[0];
    let mut ep = t.endpoint().expect("endpoint");
    let layout = Layout::attach(&mut ep, node).expect("attach");
    let region = layout.values().expect("a value region");
    let entries = read_all_entries(&mut ep, &layout).expect("entries");
    assert_eq!(entries.len(), pairs.len());
    for ((key, word), (k, value)) in entries.iter().zip(&pairs) {
        assert_eq!(key, k);
        let r = ValueRef::from_raw(*word);
        let mut block = vec![0u8; r.read_bytes() as usize];
        ep.read(region.block_addr(r), &mut block).expect("read");
        assert_eq!(check_block(&block, *key, r).expect("block"), &value[..]);
    }
    let checked = verify(&mut ep, node).expect("verify");
    assert!(checked.is_clean(), "{checked}");
    let space = checked.values.expect("value space");
    assert_eq!(space.blocks, 3_000);
    assert_eq!(
        space.live_bytes,
        pairs.iter().map(|p| p.1.len() as u64).sum::<u64>()
    );
    assert!(
        space.block_bytes < space.live_bytes + 2 * 3_000 * 24 + space.live_bytes / 4 + 3_000 * 32
    );
    assert_eq!(space.chunks_owned, 0);
}

#[test]
fn verify_finds_a_damaged_block_a_free_named_block_and_a_leaked_one() {
    let (t, _) = loaded(500);
    let node = t.memory_nodes()[0];
    let mut ep = t.endpoint().expect("endpoint");
    let layout = Layout::attach(&mut ep, node).expect("attach");
    let region = layout.values().expect("a value region");
    let entries = read_all_entries(&mut ep, &layout).expect("entries");
    // A flipped byte in key 0's block (a length above 0: the checksum covers the value).
    let (damaged_key, word) = *entries
        .iter()
        .find(|e| !ValueRef::from_raw(e.1).is_empty())
        .unwrap();
    let r = ValueRef::from_raw(word);
    let at = region.block_addr(r);
    let mut byte = [0u8; 1];
    let last = rdma_transport::RemoteAddr::new(at.node(), at.offset() + 24).unwrap();
    ep.read(last, &mut byte).unwrap();
    ep.write(last, &[byte[0] ^ 0x40]).unwrap();
    // A named block marked free, and a free block marked in use (never named).
    let (free_key, free_word) = entries[7];
    let fr = ValueRef::from_raw(free_word);
    let class_of = |c: u64| {
        let mut w = [0u8; 8];
        let mut ep = t.endpoint().unwrap();
        ep.read(region.chunk_word_addr(c), &mut w).unwrap();
        leaf_store::value::ChunkWord::from_raw(u64::from_le_bytes(w)).class()
    };
    let (chunk, _, block) = region.locate(fr.offset(), class_of).expect("located");
    ep.write(region.state_addr(chunk, block), &[0]).unwrap();
    let fresh = ep.read_word(region.fresh_addr()).unwrap();
    assert!(fresh >= 1);
    // The last block of the first chunk's state array, if unused, marked in use.
    let used0 = {
        let class = class_of(0).unwrap();
        let n = region.blocks_per_chunk(class) as usize;
        let mut states = vec![0u8; n];
        ep.read(region.states_addr(0), &mut states).unwrap();
        states.iter().rposition(|&s| s != STATE_USED)
    };
    let leaked = used0.map(|i| i as u64);
    if let Some(i) = leaked {
        ep.write(region.state_addr(0, i), &[STATE_USED]).unwrap();
    }
    let checked = verify(&mut ep, node).expect("verify");
    let text = checked.to_string();
    assert!(
        checked.problems.iter().any(|p| matches!(p, Problem::Value { key, reason } if *key == damaged_key && reason.contains("Checksum"))),
        "{text}"
    );
    assert!(
        checked.problems.iter().any(|p| matches!(p, Problem::Value { key, reason } if *key == free_key && reason.contains("free"))),
        "{text}"
    );
    if leaked.is_some() {
        assert!(
            checked
                .problems
                .iter()
                .any(|p| matches!(p, Problem::ValueRegion(s) if s.contains("leaked"))),
            "{text}"
        );
    }
}

#[test]
fn values_the_pool_cannot_store_are_refused_before_anything_is_written() {
    let config = config(1 << 20, 4096);
    let size = required_pool_bytes(10, &config, 10).next_multiple_of(8);
    let t = SimTransport::anonymous(&[size]).expect("pool");
    let node = t.memory_nodes()[0];
    let mut ep = t.endpoint().expect("endpoint");
    let too_long = vec![(1u64, vec![7u8; 5000])];
    let err = bulk_load_values(&mut ep, node, too_long, &config, |_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, LeafStoreError::ValueTooLarge { len: 5000, limit } if limit < 4096),
        "{err}"
    );
    // More than the region holds.
    let many: Vec<(u64, Vec<u8>)> = (0..2000).map(|k| (k, vec![1u8; 1000])).collect();
    let err = bulk_load_values(&mut ep, node, many, &config, |_, _, _| {}).unwrap_err();
    assert!(err.to_string().contains("chunks"), "{err}");
    assert_eq!(ep.stats().writes, 0, "nothing written");
    // A u64 load into a pool configured for values, and byte values without a region.
    let err = bulk_load(&mut ep, node, vec![(1, 1)], &config).unwrap_err();
    assert!(matches!(err, LeafStoreError::InvalidConfig(_)));
    let err = bulk_load_values(
        &mut ep,
        node,
        vec![(1, vec![])],
        &BulkLoadConfig::default(),
        |_, _, _| {},
    )
    .unwrap_err();
    assert!(matches!(err, LeafStoreError::InvalidConfig(_)));
}
