//! A root split whose new root was never installed (its splitter stopped in between): `verify`
//! reports it, and the next compute node that needs the level above installs a root over the
//! whole chain itself instead of waiting for the splitter forever.

use crate::common;

use bplus_tree::{BulkLoadConfig, Page, Tree, TreeConfig, unpack_root, verify};
use rdma_transport::{Endpoint, Transport};
use sim_transport::SimConfig;

#[test]
fn an_uninstalled_root_split_is_reported_and_then_finished_by_the_next_splitter() {
    // Pages of 4 entries, 3 per loaded page: 12 leaves under a root of level 2.
    let config = BulkLoadConfig {
        page_size: 128,
        fill: Some(3),
        lock_words: 16,
        ..BulkLoadConfig::default()
    };
    let keys: Vec<(u64, u64)> = (0..36).map(|k| (k * 100, k)).collect();
    let (transport, layout) =
        common::loaded_pool(keys.clone(), &config, 4000, SimConfig::default());
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let (level, root_no) = unpack_root(ep.read_word(layout.root_addr()).expect("root"));
    assert!(verify(&mut ep, node).expect("verify").is_clean());

    // Split the root by hand, as a splitter would, and stop before installing a new root.
    let mut root = common::read_page(&mut ep, &layout, root_no);
    let seps: Vec<(u64, u64)> = root.entries().collect();
    assert!(seps.len() >= 2, "a root with separators to split");
    let mid = seps.len() / 2;
    let right_no = ep.faa(layout.alloc_addr(), 1).expect("allocate");
    let mut right = Page::new(level, seps[mid].0, None, root.slots.len());
    right.leftmost = seps[mid].1;
    for (slot, &e) in seps[mid + 1..].iter().enumerate() {
        right.slots[slot] = Some(e);
    }
    ep.write(
        layout.page_addr(right_no),
        &right.encode(right_no, layout.page_size),
    )
    .expect("write");
    root.high = Some(seps[mid].0);
    root.sibling = right_no;
    for (slot, e) in root.slots.iter_mut().enumerate() {
        *e = seps.get(slot).copied().filter(|_| slot < mid);
    }
    ep.write(
        layout.page_addr(root_no),
        &root.encode(root_no, layout.page_size),
    )
    .expect("write");
    let report = verify(&mut ep, node).expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("never installed")),
        "{report}"
    );

    // Reads still work (they move right), and inserts that split pages up to the root level
    // install a root over the chain.
    let tree = Tree::open(transport.clone(), TreeConfig::default()).expect("open");
    let mut client = tree.client().expect("client");
    for &(k, v) in &keys {
        assert_eq!(client.get(k), Ok(Some(v)));
    }
    for k in 0..3000u64 {
        assert_eq!(client.insert(k * 100 + 1, k), Ok(true), "insert {k}");
    }
    let (new_level, _) = unpack_root(ep.read_word(layout.root_addr()).expect("root"));
    assert!(
        new_level > level,
        "a root was installed above the split root level"
    );
    let report = verify(&mut ep, node).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, 36 + 3000);
}
