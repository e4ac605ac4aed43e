//! A live compute node recovering a leaf lock an operation of its own may have left held.
//!
//! **Invariant.** A client connection index whose operation reported
//! [`crate::IndexError::LockMayRemain`] is *retired*: no client uses it again, and no new client
//! is given it, until the lock it may hold is released, the chain repaired, and its leaf box and
//! unlink word agree with the chain. Only then is the index free again.
//!
//! Why each step, in order (ARCHITECTURE §8, "A lock a live node may have left"):
//! 1. **Revoke.** The renewer sets [`leaf_store::members::REVOKE`] on the failed connection's word;
//!    the memory node fences the connection and clears the word. On a NIC a failed batch's verbs
//!    may still be executing; after the fence none lands, so the chain read next is final.
//! 2. **Is it ours?** Under the local stripe of (record, trained leaf), the LT entry locked with
//!    this compute node's tag is the leftover: a sibling thread takes the remote lock only while
//!    holding that stripe, or leaves it parked there for a hand-over. An entry not locked by us
//!    means the failed batch ended with its unlock, which is fenced behind everything else of
//!    it: the chain, box and unlink word are already consistent.
//! 3. **Repair, then release, in one batch:** the header bump, a leaf the failed batch tore
//!    restored from its image in the retired indexes' boxes and every such image invalidated
//!    ([`leaf_store::redo`]), the chain trimmed by [`leaf_store::repair::trim_chain`] (a split cut
//!    after its link; through a redo leaf when leaves are longer than a packet), the freed mark of a leaf an
//!    unlink took out of the chain without marking it, the unlink word cleared, every box slot
//!    naming a leaf the chain links cleared (a split cut after its link, before its box clear),
//!    then the unlock — each fenced behind the bump, each idempotent, the unlock last.
//!    In a pool with byte values, the value free words of the retired indexes (the block each
//!    write was replacing) are settled after the repair and before the unlock, the chain final:
//!    a block no entry names any more is freed, then the words are cleared. Until a retired
//!    index is settled, its operation counts as running (`Members::quiescent_since`): the block
//!    cannot have been reused meanwhile, so "no entry names it" means what it says.
//! 4. The slot is queued for retraining (an SLT slot a cut-short split claimed but never linked
//!    is dropped by it), and the index is unregistered and freed.
//!
//! The memory node's roll-forward of a *dead* compute node does the same (fence, then the same
//! trim), so a compute node that dies while a retired index waits is recovered as before.

use leaf_store::members::{LEAF_BOX, MemberTable, Membership, word_leaf};
use leaf_store::redo::{BoxImages, REDO_SLOT, needs_redo, plan_repair};
use leaf_store::value::ValueRef;
use leaf_store::{ModelHeader, le_word, read_record};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::locks::LockTable;

/// A lock an operation may have left held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaybeHeld {
    /// The memory node's position in the store's key order.
    pub(crate) node: usize,
    pub(crate) slot: u64,
    pub(crate) leaf: u64,
}

/// A retired connection index and what it may hold.
#[derive(Debug, Clone)]
pub(crate) struct Retired {
    pub(crate) index: u64,
    /// The connection ids it had registered, per node (0: none).
    pub(crate) ids: Vec<u64>,
    /// The lock its operation may have left held; `None`: a batch of it lost its completion
    /// holding no lock, and only its fencing is awaited.
    pub(crate) lock: Option<MaybeHeld>,
    /// The local epoch the failed operation ran in. Until every memory node has fenced the
    /// connection, a batch of it may still be executing there (a lost completion), so the
    /// renewer announces no epoch past this one: the operation has not ended for the memory
    /// nodes' reclamation and orphan sweep, whatever its caller was told.
    pub(crate) epoch: u64,
    /// Per node: whether the memory node has fenced the connection there (its word reads 0;
    /// true where nothing was registered).
    pub(crate) revoked: Vec<bool>,
}

impl Retired {
    /// Whether every memory node has fenced the connection: nothing it posted lands any more.
    pub(crate) fn is_revoked(&self) -> bool {
        self.revoked.iter().all(|&r| r)
    }
}

/// How one attempt at a retired index ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Recovered: the index may be reused.
    Done,
    /// Waiting (for the memory node's fence, or for a sibling on the stripe): try again later.
    NotYet,
}

/// Asks every memory node the connection of `retired` is registered on to fence it, and checks
/// whether each has: `true` once nothing posted through it can land anywhere any more. (A lost
/// completion's batch may still be executing on any node the operation reached.)
pub(crate) fn revoked<E: Endpoint>(
    ep: &mut E,
    nodes: &[(MemberTable, Option<Membership>)],
    retired: &mut Retired,
) -> Result<bool, IndexError> {
    for (node, (table, member)) in nodes.iter().enumerate() {
        if retired.revoked.get(node).copied().unwrap_or(true) {
            continue;
        }
        let id = retired.ids.get(node).copied().unwrap_or(0);
        retired.revoked[node] = match member {
            Some(member) if id != 0 => table.revoke(ep, *member, retired.index, id)?,
            _ => true,
        };
    }
    Ok(retired.is_revoked())
}

/// One attempt to settle `group` — every retired index that may hold the same lock, each
/// already revoked ([`revoked`]) — through `ep` (the renewer's endpoint).
///
/// Several indexes can name one lock: an operation that reported `LockMayRemain` although its
/// unlock had landed, then another that took the lock again and failed holding it. Whichever
/// holds it, the repair must see every one's leaf box and unlink word; settled one by one, the
/// first would release the lock with the wrong box and the second find it free and hand its
/// index — and a box naming a linked leaf — out again (a review found it). A client registers
/// its retirement before it lets go of the stripe, so once the renewer holds the stripe, every
/// index that may hold the lock is in the group.
pub(crate) fn settle_group<E: Endpoint>(
    ep: &mut E,
    nodes: &[(MemberTable, Option<Membership>)],
    locks: &LockTable,
    group: &[&Retired],
) -> Result<Settled, IndexError> {
    let Some(MaybeHeld { node, slot, leaf }) = group.first().and_then(|first| first.lock) else {
        // Nothing held: fenced everywhere, the connection is done with.
        return Ok(Settled::Done);
    };
    let Some((table, Some(member))) = nodes.get(node) else {
        return Ok(Settled::Done);
    };
    let layout = table.layout();
    let record_addr = RemoteAddr::unpack(ep.read_word(layout.slot_entry_addr(slot))?);
    let stripe = locks.stripe(record_addr, leaf);
    let Some(parked) = stripe.try_lock() else {
        return Ok(Settled::NotYet);
    };
    // Everything the decision rests on is read under the stripe: a read from before it could
    // show a sibling's lock (since released, the slot retrained and its leaves reused) as ours.
    if RemoteAddr::unpack(ep.read_word(layout.slot_entry_addr(slot))?) != record_addr {
        return Ok(Settled::NotYet);
    }
    let record = read_record(ep, layout, slot, record_addr)?;
    let Some(&entry) = usize::try_from(leaf).ok().and_then(|l| record.lt.get(l)) else {
        return Ok(Settled::Done);
    };
    let handed_over = parked
        .as_ref()
        .is_some_and(|h| h.record == record_addr && h.leaf == leaf);
    if handed_over || !(entry.is_locked() && entry.owner() == member.tag) {
        // Not held by a leftover: every failed batch either never took the lock or ended with
        // its unlock, fenced behind the rest of it (so its box and unlink word agree).
        return Ok(Settled::Done);
    }
    // Ours: repair and release (see the module documentation).
    let linked: Vec<u64> = record
        .chain_entries(leaf as usize)
        .unwrap_or_default()
        .iter()
        .map(|e| e.leaf_num())
        .collect();
    let mut writes: Vec<(RemoteAddr, Vec<u8>)> = Vec::new();
    let mut unboxed = Vec::new();
    let mut scratch = None;
    let mut unlink_clears = Vec::new();
    let mut box_clears: Vec<(RemoteAddr, u64)> = Vec::new();
    for retired in group {
        let unlink_at = table.unlink_addr(member.tag, retired.index);
        let unlinking = word_leaf(ep.read_word(unlink_at)?);
        if let Some(gone) = unlinking {
            unlink_clears.push(unlink_at);
            // Linked around but perhaps not marked: mark its SLT slot freed (the retraining
            // hands the leaf out again).
            let mark = leaf_store::settle::unmarked_slot(&record, gone);
            if let Some(slot) = mark.filter(|_| !linked.contains(&gone)) {
                let (at, bytes) =
                    leaf_store::settle::freed_mark(record_addr, record.layout(), slot, gone);
                writes.push((at, bytes.to_vec()));
            }
        }
        let mut box_words = vec![0u8; 8 * LEAF_BOX as usize];
        ep.read(table.box_addr(member.tag, retired.index, 0), &mut box_words)?;
        for i in 0..LEAF_BOX {
            let word = le_word(&box_words, i as usize);
            match word_leaf(word) {
                Some(boxed) if linked.contains(&boxed) => {
                    box_clears.push((table.box_addr(member.tag, retired.index, i), word));
                }
                Some(boxed) => {
                    unboxed.push(boxed);
                    if i == REDO_SLOT && scratch.is_none() {
                        scratch = Some(boxed);
                    }
                }
                None => {}
            }
        }
    }
    // The chain: a leaf the failed batch tore is restored from the one image in the retired
    // indexes' boxes (leaf_store::redo), and the repair rule's trims are written through a redo
    // leaf of theirs, so a renewer killed half-way leaves what the memory node's recovery of
    // this node finishes.
    let images = BoxImages::read(ep, layout, &unboxed)?;
    let repair = plan_repair(ep, layout, &record, leaf as usize, &images)?;
    let redo = needs_redo(layout, ep.packet_bytes());
    let zero = 0u64.to_le_bytes();
    let mut verbs: Vec<Verb<'_>> = vec![Verb::faa(record_addr, ModelHeader::CHANGE_ONE)];
    repair.push_verbs(&mut verbs, layout, scratch, redo);
    verbs.extend(writes.iter().map(|(at, b)| Verb::write(*at, b).fenced()));
    verbs.extend(
        unlink_clears
            .iter()
            .map(|&at| Verb::write(at, &zero).fenced()),
    );
    verbs.extend(
        box_clears
            .iter()
            .map(|&(at, word)| Verb::cas(at, word, 0).fenced()),
    );
    let lt_addr = record_addr.saturating_add(record.layout().lt_entry(leaf));
    let unlock = Verb::cas(lt_addr, entry.raw(), entry.unlocked().raw()).fenced();
    // Byte values: a value free word one of them left names the block its write was replacing.
    // Settled under the lock, once the chain is final: the block is freed if no entry names it
    // any more, then the word cleared (before the index is freed, and — the retired operation
    // counting as running until then — before the block can be reused).
    let free_words: Vec<(RemoteAddr, u64)> = match layout.values() {
        Some(_) => {
            let mut words = Vec::new();
            for retired in group {
                let at = table.free_word_addr(member.tag, retired.index);
                let word = ep.read_word(at)?;
                if word != 0 {
                    words.push((at, word));
                }
            }
            words
        }
        None => Vec::new(),
    };
    if free_words.is_empty() {
        verbs.push(unlock);
        ep.batches(&mut verbs)?;
    } else {
        ep.batches(&mut verbs)?;
        drop(verbs);
        let repaired = read_record(ep, layout, slot, record_addr)?;
        let named: Vec<u64> = leaf_store::walk_chain(ep, layout, &repaired, leaf as usize)?
            .iter()
            .flat_map(|(_, l)| {
                l.entries()
                    .iter()
                    .map(|&(_, v)| ValueRef::from_raw(v).offset())
            })
            .collect();
        let free = [leaf_store::value::STATE_FREE];
        let states: Vec<RemoteAddr> = match layout.values() {
            Some(region) => free_words
                .iter()
                .filter_map(|&(_, word)| {
                    leaf_store::settle::replaced_block_state(&region, word, |offset| {
                        named.contains(&offset)
                    })
                })
                .collect(),
            None => Vec::new(),
        };
        let mut settle: Vec<Verb<'_>> = states.iter().map(|&at| Verb::write(at, &free)).collect();
        settle.extend(free_words.iter().map(|&(at, _)| Verb::write(at, &zero)));
        settle.push(unlock);
        ep.batches(&mut settle)?;
    }
    // Its lock released: every free word of the group is settled (`leaf_store::ghost`).
    if layout.values().is_some() {
        for retired in group {
            leaf_store::ghost::settle_free_word(table.free_word_addr(member.tag, retired.index));
        }
    }
    drop(parked);
    let _ = leaf_store::queue::enqueue(ep, layout, slot);
    Ok(Settled::Done)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::Duration;

    use leaf_store::{BulkLoadConfig, Problem, read_slot_table};
    use rdma_transport::Transport;
    use sim_transport::{SimEndpoint, SimTransport};

    use crate::{Client, IndexError, Store, StoreConfig, bootstrap};

    /// Keys 0, 100, …, 2900, δ = 4, three keys a leaf, two leaves a slot: slot 1's trained leaf
    /// 0 holds {600, 700, 800}. The store's renewer sleeps (settling is driven by the test); a
    /// memory node refills boxes and fences revoked connections when the test says.
    fn setup() -> (
        SimTransport,
        Store<SimTransport>,
        Client<SimEndpoint>,
        retrainer::Retrainer<SimEndpoint>,
    ) {
        let config = BulkLoadConfig {
            epsilon: 2,
            delta: 4,
            fill: 3,
            slot_leaves: 2,
            model_region_factor: 8,
            ..BulkLoadConfig::default()
        };
        let size = leaf_store::required_pool_bytes(30, &config, 64).next_multiple_of(4096);
        let transport = SimTransport::anonymous(&[size]).expect("pool");
        bootstrap(
            &transport,
            (0..30).map(|i| (i * 100, i * 100)).collect(),
            &config,
        )
        .expect("load");
        let store = Store::open(
            transport.clone(),
            StoreConfig {
                lease_renewal: Duration::from_secs(3600),
                ..StoreConfig::default()
            },
        )
        .expect("open");
        let node = transport.memory_nodes()[0];
        let mut worker = retrainer::Retrainer::new(
            transport.endpoint().expect("endpoint"),
            node,
            retrainer::RetrainConfig::default(),
        )
        .expect("worker");
        worker.watch_members(
            Duration::from_secs(3600),
            Box::new(transport.fence(node.id).expect("fence")),
        );
        worker.check_members().expect("look");
        let mut client = store.client().expect("client");
        assert_eq!(client.insert(650, 650), Ok(true), "the target leaf is full");
        (transport, store, client, worker)
    }

    fn target_locked(transport: &SimTransport) -> bool {
        let mut ep = transport.endpoint().expect("endpoint");
        let layout =
            leaf_store::Layout::attach(&mut ep, transport.memory_nodes()[0]).expect("layout");
        let (addr, _) = read_slot_table(&mut ep, &layout).expect("table")[1];
        leaf_store::read_record(&mut ep, &layout, 1, addr)
            .expect("record")
            .lt[0]
            .is_locked()
    }

    fn refill(worker: &mut retrainer::Retrainer<SimEndpoint>) {
        worker.fill_boxes().expect("fill");
        std::thread::sleep(Duration::from_millis(2));
    }

    /// An update whose completion is lost after it ran whole (the lock is free, but the client
    /// cannot know), then — under a new index — a split that breaks after linking its box leaf
    /// and before clearing the box slot (the lock stays held): two retired indexes, one lock.
    /// Settled, every index's box agrees with the chain, so clients given those indexes again
    /// never link a leaf twice.
    #[test]
    fn two_retired_indexes_naming_one_lock_are_settled_together() {
        let mut both = 0;
        for k in 0..24 {
            let (transport, store, mut client, mut worker) = setup();
            refill(&mut worker);
            // Lost completion of the ending batch: the update ran whole.
            client.endpoint_mut().break_after(4);
            if !matches!(client.update(700, 7), Err(IndexError::LockMayRemain { .. }))
                || target_locked(&transport)
            {
                continue;
            }
            store.reconnect(&mut client).expect("reconnect");
            refill(&mut worker);
            client.endpoint_mut().crash_after(k);
            if !matches!(
                client.insert(750, 750),
                Err(IndexError::LockMayRemain { .. })
            ) || !target_locked(&transport)
            {
                continue;
            }
            both += 1;
            assert_eq!(store.unrecovered_locks(), 2);
            let members = std::sync::Arc::clone(&store.caches().members);
            let mut ep = transport.endpoint().expect("endpoint");
            for _ in 0..1000 {
                if store.unrecovered_locks() == 0 {
                    break;
                }
                worker.fill_boxes().expect("fill");
                members.settle_retired(&mut ep);
            }
            assert_eq!(store.unrecovered_locks(), 0, "split broken after verb {k}");
            assert!(!target_locked(&transport));
            // Clients given the freed indexes again split with the leaves their boxes name.
            drop(client);
            let mut clients: Vec<_> = (0..3).map(|_| store.client().expect("client")).collect();
            for (i, c) in clients.iter_mut().enumerate() {
                for key in [1001, 1002, 1003, 1004, 2001, 2002, 2003] {
                    let _ = c.insert(key + i as u64 * 10_000, key);
                }
            }
            let mut check = transport.endpoint().expect("endpoint");
            let problems = leaf_store::verify(&mut check, transport.memory_nodes()[0])
                .expect("verify")
                .problems;
            assert!(
                !problems
                    .iter()
                    .any(|p| matches!(p, Problem::LeafReachableTwice { .. })),
                "split broken after verb {k}: {problems:?}"
            );
        }
        assert!(both > 0, "no case left two retired indexes on one lock");
    }
}
