//! `verify` must catch every kind of damage; allocation and locks must behave as documented.

#![cfg(not(loom))]

use leaf_store::{
    BulkLoadConfig, Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, ModelRecord,
    Problem, alloc_leaf, bulk_load, read_record, read_slot_table, try_lock, unlock, verify,
};
use rdma_transport::{Endpoint, MemoryNodeInfo, RemoteAddr, Transport};
use sim_transport::{SimEndpoint, SimTransport};

struct Fixture {
    transport: SimTransport,
    node: MemoryNodeInfo,
    ep: SimEndpoint,
    layout: Layout,
}

/// 2,000 keys (multiples of 1000), fill 4, 8 leaves per slot: many slots, room for more leaves.
fn fixture(leaf_capacity: Option<u64>) -> Fixture {
    let transport = SimTransport::anonymous(&[8 << 20]).expect("pool");
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().expect("endpoint");
    let config = BulkLoadConfig {
        fill: 4,
        slot_leaves: 8,
        leaf_capacity,
        ..Default::default()
    };
    let pairs = (1..=2000u64).map(|k| (k * 1000, k)).collect();
    let report = bulk_load(&mut ep, node, pairs, &config).expect("load");
    assert!(verify(&mut ep, node).expect("verify").is_clean());
    Fixture {
        transport,
        node,
        ep,
        layout: report.layout,
    }
}

impl Fixture {
    fn record(&mut self, slot: u64) -> (RemoteAddr, ModelRecord) {
        let table = read_slot_table(&mut self.ep, &self.layout).expect("slot table");
        let addr = table[slot as usize].0;
        (
            addr,
            read_record(&mut self.ep, &self.layout, slot, addr).expect("record"),
        )
    }

    fn lt_addr(&mut self, slot: u64, leaf: u64) -> (RemoteAddr, LeafTableEntry) {
        let (addr, record) = self.record(slot);
        let offset = record.layout().lt_entry(leaf);
        (
            addr.checked_add(offset).expect("addr"),
            record.lt[leaf as usize],
        )
    }

    /// Links leaf `fresh` after slot 0's trained leaf 0 as its first synonym (SLT slot 1).
    fn link_synonym(&mut self, fresh: u64) {
        let (record_addr, record) = self.record(0);
        self.ep
            .faa(record_addr, ModelHeader::SLOT_USE_ONE)
            .expect("faa");
        let slt1 = record_addr
            .checked_add(record.layout().slt_entry(1))
            .expect("addr");
        self.ep
            .write_word(slt1, LeafTableEntry::new(fresh).expect("fits").raw())
            .expect("write");
        let (lt0, entry) = self.lt_addr(0, 0);
        let locked = try_lock(&mut self.ep, lt0, entry, 1)
            .expect("cas")
            .expect("free");
        unlock(&mut self.ep, lt0, locked, Some(1)).expect("unlock and link");
    }

    fn problems(&mut self) -> Vec<Problem> {
        verify(&mut self.ep, self.node).expect("verify").problems
    }

    fn write_leaf(&mut self, leaf_num: u64, entries: Vec<(u64, u64)>) {
        let bytes = Leaf::from_entries(entries)
            .expect("sorted")
            .encode(leaf_num, self.layout.delta())
            .expect("fits");
        self.ep
            .write(self.layout.leaf_addr(leaf_num), &bytes)
            .expect("write");
    }
}

#[test]
fn verify_reports_a_damaged_leaf() {
    let mut f = fixture(None);
    let addr = f.layout.leaf_addr(5).checked_add(20).expect("addr");
    let mut byte = [0u8; 1];
    f.ep.read(addr, &mut byte).expect("read");
    f.ep.write(addr, &[byte[0] ^ 0x40]).expect("write");
    let problems = f.problems();
    assert!(
        problems.iter().any(|p| matches!(
            p,
            Problem::Leaf {
                slot: 0,
                leaf: 5,
                ..
            }
        )),
        "{problems:?}"
    );
}

#[test]
fn verify_reports_a_key_outside_its_owner() {
    let mut f = fixture(None);
    // Slot 1's first trained leaf (leaf number 8) gets a key that belongs to slot 0.
    f.write_leaf(8, vec![(1500, 0), (33_000, 33), (34_000, 34)]);
    let problems = f.problems();
    assert!(
        problems.contains(&Problem::KeyOutsideOwner {
            slot: 1,
            leaf: 0,
            key: 1500
        }),
        "{problems:?}"
    );
}

#[test]
fn verify_reports_a_held_lock() {
    let mut f = fixture(None);
    let (addr, entry) = f.lt_addr(3, 2);
    let locked = try_lock(&mut f.ep, addr, entry, 1)
        .expect("cas")
        .expect("lock is free");
    assert!(f.problems().contains(&Problem::LockHeld {
        slot: 3,
        leaf: 2,
        owner: 1
    }));
    unlock(&mut f.ep, addr, locked, None).expect("unlock");
    assert!(f.problems().is_empty());
}

#[test]
fn verify_reports_an_orphaned_synonym_slot() {
    let mut f = fixture(None);
    let (addr, record) = f.record(2);
    // Claimed and never written (its writer died between the claim and its batch): the slot
    // reads as it was built, FREED, which is no problem — not as leaf 0 unlinked.
    f.ep.faa(addr, ModelHeader::SLOT_USE_ONE).expect("faa");
    assert!(f.problems().is_empty(), "{:?}", f.problems());
    // Written and never linked (its writer died before the link): an orphan.
    let entry = LeafTableEntry::new(1999).expect("fits");
    let at = addr
        .checked_add(record.layout().slt_entry(1))
        .expect("addr");
    f.ep.write_word(at, entry.raw()).expect("write");
    assert!(f.problems().contains(&Problem::OrphanSynonym {
        slot: 2,
        slt_slot: 1
    }));
}

#[test]
fn verify_reports_an_slt_slot_written_past_the_slots_in_use() {
    let mut f = fixture(None);
    let (addr, record) = f.record(2);
    let at = addr
        .checked_add(record.layout().slt_entry(7))
        .expect("addr");
    f.ep.write_word(at, LeafTableEntry::new(1999).expect("fits").raw())
        .expect("write");
    let problems = f.problems();
    assert!(
        problems.iter().any(|p| matches!(
            p,
            Problem::Record { slot: 2, reason } if reason.contains("SLT slot 7, past the slots in use")
        )),
        "{problems:?}"
    );
}

#[test]
fn verify_reports_a_leaf_reachable_twice_and_an_unsorted_chain() {
    let mut f = fixture(None);
    let (record_addr, record) = f.record(0);
    // SLT slot 1 of slot 0 points at trained leaf 1, and trained leaf 0 links it.
    f.ep.faa(record_addr, ModelHeader::SLOT_USE_ONE)
        .expect("faa");
    let slt1 = record_addr
        .checked_add(record.layout().slt_entry(1))
        .expect("addr");
    f.ep.write_word(slt1, record.lt[1].raw()).expect("write");
    let (lt0, entry) = f.lt_addr(0, 0);
    let locked = try_lock(&mut f.ep, lt0, entry, 1)
        .expect("cas")
        .expect("free");
    unlock(&mut f.ep, lt0, locked, Some(1)).expect("unlock and link");
    let problems = f.problems();
    let twice = record.lt[1].leaf_num();
    assert!(
        problems.contains(&Problem::LeafReachableTwice { leaf_num: twice }),
        "{problems:?}"
    );
    // Trained leaf 1's keys (5000…) are outside leaf 0's range (1000…4000) too.
    assert!(problems.iter().any(|p| matches!(
        p,
        Problem::KeyOutsideOwner {
            slot: 0,
            leaf: 0,
            ..
        }
    )));

    // A fresh synonym leaf whose keys sort before its trained leaf's: in range, out of order.
    let mut f = fixture(None);
    let fresh = alloc_leaf(&mut f.ep, &f.layout).expect("alloc");
    f.write_leaf(fresh, vec![(1001, 0)]);
    f.link_synonym(fresh);
    assert!(
        f.problems()
            .contains(&Problem::ChainNotSorted { slot: 0, leaf: 0 })
    );
}

#[test]
fn verify_reports_alloc_num_beyond_capacity() {
    let mut f = fixture(None);
    let capacity = f.layout.leaf_capacity();
    f.ep.write_word(f.layout.alloc_num_addr(), capacity + 1)
        .expect("write");
    assert!(f.problems().contains(&Problem::AllocNum {
        alloc_num: capacity + 1,
        capacity
    }));
}

#[test]
fn verify_reports_a_retraining_cut_short_and_ring_bounds() {
    let mut f = fixture(None);
    let ring = leaf_store::RingLayout::new(f.layout);
    let (record, _) = f.record(3);
    f.ep.write_word(ring.in_flight(), record.pack())
        .expect("write");
    let problems = f.problems();
    assert!(
        matches!(problems.as_slice(), [Problem::Ring(s)] if s.contains("cut short")),
        "{problems:?}"
    );
    f.ep.write_word(ring.in_flight(), 0).expect("write");
    f.ep.write_word(ring.head(), 5).expect("write");
    let problems = f.problems();
    assert!(
        matches!(problems.as_slice(), [Problem::Ring(s)] if s.contains("head 5, tail 0")),
        "{problems:?}"
    );
}

#[test]
fn allocation_past_capacity_fails_cleanly() {
    let trained = 500; // 2,000 keys, 4 per leaf
    let mut f = fixture(Some(trained + 3));
    let got: Vec<u64> = (0..3)
        .map(|_| alloc_leaf(&mut f.ep, &f.layout).expect("alloc"))
        .collect();
    assert_eq!(got, vec![trained, trained + 1, trained + 2]);
    for _ in 0..5 {
        assert_eq!(
            alloc_leaf(&mut f.ep, &f.layout),
            Err(LeafStoreError::PoolExhausted {
                capacity: trained + 3
            })
        );
    }
    assert_eq!(
        f.ep.read_word(f.layout.alloc_num_addr()).expect("read"),
        trained + 3
    );
    assert!(f.problems().is_empty());
}

#[test]
fn concurrent_allocations_hand_out_each_leaf_once() {
    let trained = 500;
    let spare = 4000;
    let f = fixture(Some(trained + spare));
    let layout = f.layout;
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let transport = f.transport.clone();
                s.spawn(move || {
                    let mut ep = transport.endpoint().expect("endpoint");
                    let mut mine = Vec::new();
                    loop {
                        match alloc_leaf(&mut ep, &layout) {
                            Ok(n) => mine.push(n),
                            Err(LeafStoreError::PoolExhausted { .. }) => return mine,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    all.sort_unstable();
    assert!(
        all.iter().copied().eq(trained..trained + spare),
        "every spare leaf exactly once"
    );
}

#[test]
fn locks_exclude_and_unlock_can_link() {
    let mut f = fixture(None);
    let (addr, entry) = f.lt_addr(1, 3);
    let held = try_lock(&mut f.ep, addr, entry, 1)
        .expect("cas")
        .expect("free");
    assert!(held.is_locked());
    let mut other = f.transport.endpoint().expect("endpoint");
    assert_eq!(
        try_lock(&mut other, addr, entry, 1).expect("cas"),
        Err(held),
        "a held lock must refuse"
    );
    let released = unlock(&mut f.ep, addr, held, Some(7)).expect("unlock");
    assert_eq!(
        (
            released.is_locked(),
            released.synonym_ptr(),
            released.leaf_num()
        ),
        (false, 7, entry.leaf_num())
    );
    assert_eq!(f.ep.read_word(addr).expect("read"), released.raw());
    // Releasing a lock nobody holds is refused and changes nothing.
    assert!(unlock(&mut other, addr, held, None).is_err());
    assert_eq!(f.ep.read_word(addr).expect("read"), released.raw());
}

#[test]
fn a_joining_member_takes_the_free_tag_taken_fewest_times() {
    let mut f = fixture(None);
    let table = leaf_store::members::MemberTable::new(&f.layout);
    let first = table.join(&mut f.ep).expect("join");
    let second = table.join(&mut f.ep).expect("join");
    assert_ne!(first.tag, second.tag);
    table.leave(&mut f.ep, first).expect("leave");
    // The tag just freed was taken once; others never: it is reused last.
    let third = table.join(&mut f.ep).expect("join");
    assert_ne!(
        third.tag, first.tag,
        "a tag just freed was handed out again before unused ones"
    );
    assert_eq!(third.lease.incarnation(), 1);
}

/// Recovery clears a dead member's connection row with a WRITE of zeros. On a NIC, a sleeper's
/// register CAS (through a fresh connection, issued before it learnt it was dead) can land in
/// that WRITE's gap and survive it, leaving a freed entry whose word names the sleeper's
/// connection (docs/nic-atomicity.md, connection words). This is that state, made directly: the
/// next member of the tag registers its own connection over the leftover, and only its own is
/// then fenced when it dies; the leftover is never used (the sleeper's register read the lease
/// dead and failed).
#[test]
fn a_connection_word_left_in_a_freed_entry_is_replaced_by_the_next_member_of_its_tag() {
    use leaf_store::members::{MEMBER_TAGS, MemberTable};
    let mut f = fixture(None);
    let table = MemberTable::new(&f.layout);
    let dead = table.join(&mut f.ep).expect("join");
    table
        .register(&mut f.ep, dead, 0, 0xa11ce, 0)
        .expect("register");
    // Declared dead, fenced, its row zeroed — and the sleeper's CAS over the zeroing WRITE.
    let lease = table.lease_addr(dead.tag);
    let declared = dead.lease.dead();
    assert_eq!(
        f.ep.cas(lease, dead.lease.raw(), declared.raw()),
        Ok(dead.lease.raw())
    );
    let word = table.connection_addr(dead.tag, 0);
    f.ep.write_word(word, 0).expect("recovery's zeroing");
    let sleeper = 0x51eeb;
    f.ep.write_word(word, sleeper)
        .expect("the sleeper's CAS, surviving the WRITE");
    // A sleeper's register of a new index fails, its lease being dead, but its CAS into the
    // empty word stays (with a CPU's atomics too: register's doc accepts it).
    let slept = leaf_store::members::Membership {
        tag: dead.tag,
        lease: dead.lease,
    };
    assert!(table.register(&mut f.ep, slept, 1, 0x51ee2, 0).is_err());
    assert_eq!(
        f.ep.cas(lease, declared.raw(), declared.freed().raw()),
        Ok(declared.raw()),
        "recovery frees the entry"
    );
    // Every other tag taken, so that the next member gets this one.
    let others: Vec<_> = (1..MEMBER_TAGS)
        .map(|_| table.join(&mut f.ep).expect("join"))
        .collect();
    assert!(others.iter().all(|m| m.tag != dead.tag));
    let next = table.join(&mut f.ep).expect("join");
    assert_eq!(next.tag, dead.tag);
    assert_eq!(
        table.read_connections(&mut f.ep, next.tag),
        Ok(vec![sleeper, 0x51ee2]),
        "the leftovers, before the next member registers"
    );
    for (index, connection) in [(0, 0xb0b), (1, 0xb0b2)] {
        table
            .register(&mut f.ep, next, index, connection, 0)
            .expect("a new client's register replaces what it finds");
    }
    assert_eq!(
        table.read_connections(&mut f.ep, next.tag),
        Ok(vec![0xb0b, 0xb0b2]),
        "its death fences its own connections, and only those"
    );
}

#[test]
fn verify_reports_claims_missing_overlapping_outside_their_chain_and_stray() {
    // Bulk load: leaf n holds keys 1000·(4n+1) ..= 1000·(4n+4) and claims up to the next leaf's
    // first key, minus one.
    let claimed = |f: &mut Fixture, n: u64, keys: &[u64], claim: (u64, u64)| {
        let bytes = Leaf::from_entries(keys.iter().map(|&k| (k, k / 1000)).collect())
            .expect("sorted")
            .with_claim(claim.0, claim.1)
            .encode(n, f.layout.delta())
            .expect("fits");
        f.ep.write(f.layout.leaf_addr(n), &bytes).expect("write");
    };
    let reason_of = |problems: &[Problem], leaf: u64| {
        problems.iter().find_map(|p| match p {
            Problem::Claim {
                slot: 0,
                leaf: l,
                reason,
            } if *l == leaf => Some(reason.clone()),
            _ => None,
        })
    };
    let mut f = fixture(None);
    // Leaf 1: its keys, no claim. Leaf 2 claims below its chain's range (9,000 ..= 12,999), leaf
    // 4 above its chain's.
    f.write_leaf(1, vec![(5000, 5), (6000, 6), (7000, 7), (8000, 8)]);
    claimed(&mut f, 2, &[9000, 10_000], (8500, 12_999));
    claimed(&mut f, 4, &[17_000], (17_000, 21_500));
    // Trained leaf 0 (1,000 ..= 4,999, claiming it all) gets a synonym claiming 4,000 ..= 4,999.
    let fresh = alloc_leaf(&mut f.ep, &f.layout).expect("alloc");
    claimed(&mut f, fresh, &[4500], (4000, 4999));
    f.link_synonym(fresh);
    let problems = f.problems();
    let overlaps = reason_of(&problems, 0).expect("no claim problem for leaf 0");
    assert!(overlaps.contains("overlaps"), "{overlaps}");
    let missing = reason_of(&problems, 1).expect("no claim problem for leaf 1");
    assert!(missing.contains("missing"), "{missing}");
    for leaf in [2, 4] {
        let outside = reason_of(&problems, leaf).expect("no claim problem");
        assert!(outside.contains("outside"), "{outside}");
    }
    assert_eq!(reason_of(&problems, 3), None, "{problems:?}");

    // A leaf no chain links that claims keys: a stray claim; unclaimed, it is nothing.
    let mut f = fixture(None);
    let stray = alloc_leaf(&mut f.ep, &f.layout).expect("alloc");
    claimed(&mut f, stray, &[5000], (5000, 5000));
    assert!(
        f.problems().contains(&Problem::StrayClaim {
            leaf_num: stray,
            claim: (5000, 5000)
        }),
        "{:?}",
        f.problems()
    );
    f.write_leaf(stray, vec![]);
    assert_eq!(f.problems(), vec![]);
}
