//! `verify` finds each kind of damage.

use crate::common;

use bplus_tree::{BulkLoadConfig, Layout, Page, verify};
use rdma_transport::{Endpoint, Transport};
use sim_transport::{SimConfig, SimTransport};

fn pool() -> (SimTransport, Layout) {
    let config = BulkLoadConfig {
        page_size: 256,
        fill: Some(6),
        lock_words: 32,
        ..BulkLoadConfig::default()
    };
    let keys: Vec<(u64, u64)> = (0..200).map(|k| (k * 10, k)).collect();
    common::loaded_pool(keys, &config, 0, SimConfig::default())
}

fn problems(transport: &SimTransport) -> Vec<String> {
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    report.problems
}

fn read(transport: &SimTransport, layout: &Layout, page: u64) -> Page {
    let mut ep = transport.endpoint().expect("endpoint");
    common::read_page(&mut ep, layout, page)
}

fn write(transport: &SimTransport, layout: &Layout, page_no: u64, page: &Page) {
    let mut ep = transport.endpoint().expect("endpoint");
    ep.write(
        layout.page_addr(page_no),
        &page.encode(page_no, layout.page_size),
    )
    .expect("write");
}

#[test]
fn a_loaded_tree_is_clean_and_every_kind_of_damage_is_found() {
    let (transport, _) = pool();
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, 200);
    assert!(report.pages_per_level.len() >= 3, "{report}");

    // A torn or flipped page.
    let (t, l) = pool();
    let mut ep = t.endpoint().expect("endpoint");
    let at = l.page_word_addr(3, 9);
    let w = ep.read_word(at).expect("read");
    ep.write_word(at, w ^ 1).expect("write");
    assert!(
        problems(&t).iter().any(|p| p.contains("unreadable")),
        "{:?}",
        problems(&t)
    );

    // A key outside its leaf's fences.
    let (t, l) = pool();
    let mut leaf = read(&t, &l, 2);
    let high = leaf.high.expect("not the last leaf");
    let slot = leaf.free_slot().expect("room");
    leaf.slots[slot] = Some((high + 1, 0));
    write(&t, &l, 2, &leaf);
    assert!(
        problems(&t)
            .iter()
            .any(|p| p.contains("outside its fences")),
        "{:?}",
        problems(&t)
    );

    // A broken sibling chain (a gap in the fences).
    let (t, l) = pool();
    let mut leaf = read(&t, &l, 2);
    leaf.high = leaf.high.map(|h| h + 1);
    write(&t, &l, 2, &leaf);
    assert!(!problems(&t).is_empty());

    // A leaf its parent does not reference (the separator dropped from the parent).
    let (t, l) = pool();
    let mut ep = t.endpoint().expect("endpoint");
    let (level, root) = bplus_tree::unpack_root(ep.read_word(l.root_addr()).expect("root"));
    assert!(level >= 2);
    let mut top = read(&t, &l, root);
    top.slots[0] = None;
    top.slots.rotate_left(1);
    write(&t, &l, root, &top);
    assert!(
        problems(&t).iter().any(|p| p.contains("referenced")),
        "{:?}",
        problems(&t)
    );

    // A lock left held.
    let (t, l) = pool();
    let mut ep = t.endpoint().expect("endpoint");
    ep.write_word(l.lock_addr(5), 77).expect("write");
    assert!(
        problems(&t).iter().any(|p| p.contains("lock")),
        "{:?}",
        problems(&t)
    );
}
