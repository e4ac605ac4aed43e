//! `redo::plan_repair`: a torn leaf is restored from its one image among the holder's box leaves;
//! every image of a chain leaf is invalidated, damaged chain or not; two different images, no
//! image, or impossible contents leave the chain damaged without an error (recovery must go on).

#![cfg(not(loom))]

use leaf_store::redo::{BoxImages, plan_repair};
use leaf_store::{
    BulkLoadConfig, Layout, Leaf, ModelRecord, bulk_load, read_record, read_slot_table,
};
use rdma_transport::{Endpoint, Transport};
use sim_transport::{SimEndpoint, SimTransport};

/// 200 keys, four a leaf, two leaves a slot; leaves 1000.. are free for the test's box leaves.
fn fixture() -> (SimEndpoint, Layout, ModelRecord) {
    let transport = SimTransport::anonymous(&[4 << 20]).expect("pool");
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let config = BulkLoadConfig {
        fill: 4,
        slot_leaves: 2,
        ..Default::default()
    };
    let pairs = (1..=200u64).map(|k| (k * 10, k)).collect();
    let layout = bulk_load(&mut ep, node, pairs, &config)
        .expect("load")
        .layout;
    let table = read_slot_table(&mut ep, &layout).expect("table");
    let record = read_record(&mut ep, &layout, 0, table[0].0).expect("record");
    (ep, layout, record)
}

fn image(layout: &Layout, leaf: u64, keys: &[u64]) -> Vec<u8> {
    Leaf::from_entries(keys.iter().map(|&k| (k, k)).collect())
        .expect("sorted")
        .encode(leaf, layout.delta())
        .expect("fits")
}

#[test]
fn a_torn_leaf_is_restored_from_its_one_image_and_every_image_invalidated() {
    let (mut ep, layout, record) = fixture();
    let target = record.lt[0].leaf_num();
    let old = image(&layout, target, &[10, 20, 30, 40]);
    let new = image(&layout, target, &[10, 15, 20, 30, 40]);
    // Torn: the new image's first packet (checksum and count) over the old entries.
    let mut torn = new[..16].to_vec();
    torn.extend_from_slice(&old[16..]);
    assert!(Leaf::decode(target, &torn).is_err());
    ep.write(layout.leaf_addr(target), &torn).expect("write");
    // The holder's box: the redo leaf holds the new image, another an image of itself.
    ep.write(layout.leaf_addr(1000), &new).expect("write");
    ep.write(layout.leaf_addr(1001), &image(&layout, 1001, &[1]))
        .expect("write");
    let images = BoxImages::read(&mut ep, &layout, &[1000, 1001]).expect("images");
    let plan = plan_repair(&mut ep, &layout, &record, 0, &images).expect("plan");
    assert!(!plan.damaged);
    assert_eq!(plan.restores, vec![(target, new.clone())]);
    assert_eq!(plan.invalidate, vec![1000]);
    assert!(plan.trims.is_empty());
}

#[test]
fn two_images_no_image_or_impossible_contents_leave_the_chain_damaged_its_images_invalidated() {
    let (mut ep, layout, record) = fixture();
    let target = record.lt[0].leaf_num();
    let new = image(&layout, target, &[10, 15, 20, 30, 40]);
    let mut torn = new.clone();
    let last = torn.len() - 1;
    torn[last] ^= 0xff;
    ep.write(layout.leaf_addr(target), &torn).expect("write");
    // No image.
    let none = BoxImages::read(&mut ep, &layout, &[]).expect("images");
    let plan = plan_repair(&mut ep, &layout, &record, 0, &none).expect("plan");
    assert!(plan.damaged && plan.restores.is_empty() && plan.invalidate.is_empty());
    // Two different images: a stale one must not be taken.
    ep.write(layout.leaf_addr(1000), &new).expect("write");
    ep.write(layout.leaf_addr(1001), &image(&layout, target, &[10, 20]))
        .expect("write");
    let two = BoxImages::read(&mut ep, &layout, &[1000, 1001]).expect("images");
    let plan = plan_repair(&mut ep, &layout, &record, 0, &two).expect("plan");
    assert!(plan.damaged && plan.restores.is_empty() && plan.trims.is_empty());
    assert_eq!(plan.invalidate, vec![1000, 1001]);
    // A valid checksum over an impossible count: damaged, not an error.
    let mut bad = vec![0u8; layout.leaf_bytes() as usize];
    let word = leaf_store::leaf_checksum(target, layout.delta() + 1, &bad[8..]);
    bad[..8].copy_from_slice(&word.to_le_bytes());
    ep.write(layout.leaf_addr(target), &bad).expect("write");
    let plan = plan_repair(&mut ep, &layout, &record, 0, &none).expect("no error");
    assert!(plan.damaged);
}
