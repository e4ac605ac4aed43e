//! Bulk load into the simulator, attach from the superblock alone, read everything back.

#![cfg(not(loom))]

use leaf_store::{BulkLoadConfig, Layout, LeafStoreError, bulk_load, read_all_entries, verify};
use rdma_transport::{Endpoint, Transport};
use sim_transport::{Pool, SimConfig, SimTransport};
use testkit::XorShift64;

fn pairs(n: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut keys: Vec<u64> = XorShift64::new(seed | 1).take(n as usize).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|k| (k, k.rotate_left(17) ^ 0x5555))
        .collect()
}

#[test]
fn a_million_keys_load_verify_clean_and_read_back_from_another_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    let input = pairs(1_000_000, 42);
    let config = BulkLoadConfig::default();
    let size =
        leaf_store::required_pool_bytes(input.len() as u64, &config, 10_000).next_multiple_of(8);
    let loader = SimTransport::new(
        vec![Pool::create_file(&path, size).expect("create pool")],
        SimConfig::default(),
    );
    let node = loader.memory_nodes()[0];
    let mut ep = loader.endpoint().expect("endpoint");
    // Unsorted input is sorted by the loader.
    let mut shuffled = input.clone();
    shuffled.reverse();
    let report = bulk_load(&mut ep, node, shuffled, &config).expect("bulk load");
    assert_eq!(report.keys, input.len() as u64);
    assert_eq!(report.trained_leaves, (input.len() as u64).div_ceil(12));

    let checked = verify(&mut ep, node).expect("verify");
    assert!(checked.is_clean(), "{checked}");
    assert_eq!(checked.keys, input.len() as u64);
    assert_eq!(checked.trained_leaves, report.trained_leaves);
    drop(loader);

    // An independent client: its own mapping of the pool file, nothing but the superblock.
    let client = SimTransport::new(
        vec![Pool::open_file(&path).expect("attach")],
        SimConfig::default(),
    );
    let mut ep = client.endpoint().expect("endpoint");
    let layout =
        Layout::attach(&mut ep, client.memory_nodes()[0]).expect("attach from the superblock");
    assert_eq!(layout.superblock().keys_loaded, input.len() as u64);
    let read_back = read_all_entries(&mut ep, &layout).expect("walk");
    assert!(read_back == input, "the walk returned different entries");
}

#[test]
fn bad_input_is_an_error_and_writes_nothing() {
    let transport = SimTransport::anonymous(&[1 << 20]).expect("pool");
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let good = pairs(1000, 7);
    type Case = (BulkLoadConfig, Vec<(u64, u64)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            BulkLoadConfig {
                epsilon: 0,
                ..Default::default()
            },
            good.clone(),
            "ε",
        ),
        (
            BulkLoadConfig {
                delta: 0,
                ..Default::default()
            },
            good.clone(),
            "δ",
        ),
        (
            BulkLoadConfig {
                fill: 17,
                ..Default::default()
            },
            good.clone(),
            "fill",
        ),
        (
            BulkLoadConfig {
                fill: 0,
                ..Default::default()
            },
            good.clone(),
            "fill",
        ),
        (
            BulkLoadConfig {
                generation_bits: Some(0),
                ..Default::default()
            },
            good.clone(),
            "generation_bits",
        ),
        (
            BulkLoadConfig {
                generation_bits: Some(23),
                ..Default::default()
            },
            good.clone(),
            "generation_bits",
        ),
        (
            BulkLoadConfig {
                slot_leaves: 0,
                ..Default::default()
            },
            good.clone(),
            "slot_leaves",
        ),
        (
            BulkLoadConfig::default(),
            vec![(5, 1), (3, 2), (5, 3)],
            "duplicate",
        ),
        (BulkLoadConfig::default(), vec![], "no keys"),
        (
            BulkLoadConfig {
                key_lo: 10,
                key_hi: 20,
                ..Default::default()
            },
            vec![(5, 0)],
            "outside",
        ),
        (BulkLoadConfig::default(), pairs(200_000, 9), "too small"),
        (
            BulkLoadConfig {
                model_region_factor: 1,
                ..Default::default()
            },
            good.clone(),
            "model_region_factor",
        ),
        (
            BulkLoadConfig {
                ring_capacity: Some(0),
                ..Default::default()
            },
            good.clone(),
            "ring_capacity",
        ),
        (
            // 1,000 keys at fill 12 in slots of 4 leaves: 21 slots, a ring of 20 cannot hold them.
            BulkLoadConfig {
                slot_leaves: 4,
                ring_capacity: Some(20),
                ..Default::default()
            },
            good.clone(),
            "ring_capacity",
        ),
        (
            BulkLoadConfig {
                leaf_capacity: Some(3),
                ..Default::default()
            },
            good.clone(),
            "too small",
        ),
    ];
    for (config, input, what) in cases {
        let before = ep.stats();
        let err = bulk_load(&mut ep, node, input, &config).expect_err(what);
        assert!(
            err.to_string().to_lowercase().contains(what),
            "{what}: {err}"
        );
        assert_eq!(
            ep.stats().writes,
            before.writes,
            "{what}: a rejected bulk load wrote something"
        );
    }
    assert!(matches!(
        bulk_load(&mut ep, node, pairs(200_000, 9), &BulkLoadConfig::default()),
        Err(LeafStoreError::PoolTooSmall { available, .. }) if available == 1 << 20
    ));
}

#[test]
fn attaching_to_something_else_is_a_clear_error() {
    let transport = SimTransport::anonymous(&[4 << 20]).expect("pool");
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    assert!(matches!(
        Layout::attach(&mut ep, node),
        Err(LeafStoreError::BadMagic(0))
    ));
    bulk_load(&mut ep, node, pairs(1000, 3), &BulkLoadConfig::default()).expect("load");
    let at = |o| rdma_transport::RemoteAddr::new(0, o).expect("addr");
    let version = ep.read_word(at(8)).expect("read");
    ep.write_word(at(8), 99).expect("write");
    assert!(matches!(
        Layout::attach(&mut ep, node),
        Err(LeafStoreError::UnsupportedVersion {
            found: 99,
            supported: leaf_store::LAYOUT_VERSION
        })
    ));
    ep.write_word(at(8), version).expect("write");
    let epsilon = ep.read_word(at(16)).expect("read");
    ep.write_word(at(16), epsilon + 1).expect("write");
    assert!(matches!(
        Layout::attach(&mut ep, node),
        Err(LeafStoreError::CorruptSuperblock(_))
    ));
    ep.write_word(at(16), epsilon).expect("write");
    let layout = Layout::attach(&mut ep, node).expect("attach");
    assert_eq!(
        layout.generation_mask(),
        leaf_store::ModelHeader::MAX_GENERATION
    );
    // Generations wider than the header's field (word 25, checksum resealed).
    let mut sb = [0u8; 256];
    ep.read(at(0), &mut sb).expect("read");
    let mut bad = *layout.superblock();
    bad.generation_bits = 23;
    ep.write(at(0), &bad.sealed().to_bytes()).expect("write");
    assert!(matches!(
        Layout::attach(&mut ep, node),
        Err(LeafStoreError::CorruptSuperblock(_))
    ));
    bad.generation_bits = 3;
    ep.write(at(0), &bad.sealed().to_bytes()).expect("write");
    assert_eq!(
        Layout::attach(&mut ep, node).map(|l| l.generation_mask()),
        Ok(7)
    );
    ep.write(at(0), &sb).expect("write");
    assert!(Layout::attach(&mut ep, node).is_ok());
    // A superblock claiming more memory than the node has.
    let small = SimTransport::anonymous(&[4096]).expect("pool");
    let mut sep = small.endpoint().expect("endpoint");
    let mut sb = [0u8; 256];
    ep.read(at(0), &mut sb).expect("read");
    sep.write(at(0), &sb).expect("write");
    assert!(matches!(
        Layout::attach(&mut sep, small.memory_nodes()[0]),
        Err(LeafStoreError::CorruptSuperblock(_))
    ));
    assert!(verify(&mut sep, small.memory_nodes()[0]).is_err());
}

#[test]
fn the_model_region_grows_with_the_leaf_region() {
    let input = pairs(5_000, 3);
    let config = BulkLoadConfig::default();
    for spare in [0u64, 1_000, 20_000] {
        let size = leaf_store::required_pool_bytes(input.len() as u64, &config, spare);
        let transport = SimTransport::anonymous(&[size.next_multiple_of(8)]).expect("pool");
        let node = transport.memory_nodes()[0];
        let mut ep = transport.endpoint().expect("endpoint");
        let report = bulk_load(&mut ep, node, input.clone(), &config).expect("load");
        let sb = *report.layout.superblock();
        let grown = report.layout.leaf_capacity() - report.trained_leaves;
        assert!(
            grown >= spare,
            "spare {spare}: room for {grown} more leaves"
        );
        // Room for every grown leaf as a trained leaf of a record, in both copies.
        let for_growth =
            config.model_region_factor * leaf_store::MODEL_BYTES_PER_GROWN_LEAF * grown;
        assert!(
            sb.model_region_bytes >= config.model_region_factor * report.record_bytes + for_growth,
            "spare {spare}: model region {} for {} loaded record bytes and {grown} grown leaves",
            sb.model_region_bytes,
            report.record_bytes
        );
        assert!(
            sb.pool_bytes <= size,
            "the layout fits the pool it was sized for"
        );
        assert!(verify(&mut ep, node).expect("verify").is_clean());
    }
}
