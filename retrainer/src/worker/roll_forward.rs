//! Roll-forward: releasing the leaf locks of a compute node declared dead, finishing or undoing
//! the write it had cut short.
//!
//! Runs only after the dead node is fenced, so nothing it posted lands any more and the chains it
//! locked are stable: no live writer touches a locked chain, and the worker is the only other
//! party. The state of a chain tells how far the dead writer got, because every write places its
//! steps in the one order of [`leaf_store::settle::Step`], whose table says what a writer stopped
//! after each step leaves and how it is finished; a leaf longer than one packet torn by its
//! in-place WRITE is restored from its whole image in the writer's redo leaf (`leaf_store::redo`).
//!
//! The repair ([`leaf_store::redo::plan_repair`]): torn leaves are restored from their one image
//! in the member's box leaves, and every box image of a held chain's leaf invalidated — all
//! chains first — then each chain's trims go in one batch: the header bump first (so readers
//! whose cached tables predate the link refresh before any key leaves a leaf they might read),
//! the trimmed leaves fenced behind it (through a redo leaf of the member when leaves are longer
//! than a packet). The locks are released last, after the member's boxes and unlink words are
//! settled (`members.rs`). Each step is idempotent — restoring a whole leaf is not needed,
//! trimming a trimmed chain changes nothing, a second bump only makes readers refresh once more,
//! the unlock CAS expects the dead owner's tag — so a memory node that dies during recovery
//! simply recovers again: the member stays marked dead until every lock is released.
//!
//! SLT slots a cut-short split or unlink handed out but left unlinked cannot be told apart, in a
//! live record, from a live writer's split between its claim and its link; the slots whose locks
//! were released are therefore queued for retraining (on the ring, so that a restart keeps them),
//! which rebuilds the record from its chains and leaves such slots behind.

use leaf_store::members::{LEAF_BOX, MemberTable};
use leaf_store::redo::{BoxImages, REDO_SLOT, needs_redo, plan_repair};
use leaf_store::{LeafTableEntry, ModelHeader, read_record, read_slot_table};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use super::*;

/// What releasing one dead member's locks did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollForward {
    /// Leaves its leaf boxes held that no chain links (allocated, never linked): freed.
    pub leaves_freed: u64,
    /// Leaf locks released.
    pub locks_released: u64,
    /// Chains where a cut-short split was completed (keys dropped from the split leaf).
    pub splits_completed: u64,
    /// New leaves of splits cut short before their link whose claims were withdrawn
    /// (ARCHITECTURE §4, "Claims").
    pub claims_withdrawn: u64,
    /// Leaves of unlinks cut short after the link-around (named by the client's unlink word,
    /// linked and held nowhere): freed.
    pub unlinks_completed: u64,
    /// Leaves torn by a WRITE the dead node was placing, restored from the image its redo leaf
    /// held (`leaf_store::redo`).
    pub leaves_restored: u64,
    /// Chains with a leaf that failed its checksum under the dead lock and that no image
    /// restored (released anyway; `verify` reports the leaf).
    pub damaged_chains: u64,
}

/// A dead member's leaf lock, found by [`Retrainer::trace_member`].
pub(super) struct HeldLeaf {
    slot: u64,
    record_addr: RemoteAddr,
    record: std::sync::Arc<leaf_store::ModelRecord>,
    leaf: usize,
    lt_addr: RemoteAddr,
    entry: LeafTableEntry,
}

impl<E: Endpoint> Retrainer<E> {
    /// Releases every leaf lock that carries owner `tag`, repairing each chain first (see the
    /// module documentation), and queues the slots concerned for retraining. The caller has
    /// fenced the member: call it for a live one and its writes break. (Recovery of a dead
    /// member settles its leaf boxes and unlink words between the repair and the release.)
    pub fn roll_forward(&mut self, tag: u8) -> Result<RollForward, RetrainError> {
        let (held, linked) = self.trace_member(tag)?;
        let table = MemberTable::new(&self.layout);
        let boxes = table.read_boxes(&mut self.ep, tag)?;
        let mut done = self.repair_held(&held, &boxes, &linked)?;
        let released = self.release_held(held)?;
        done.locks_released = released.locks_released;
        Ok(done)
    }

    /// The leaf locks that carry owner `tag`, and every leaf the current records link or name in
    /// a freed SLT slot — changing nothing. While the dead member's locks are held its chains
    /// cannot change and its slots cannot be retrained, so what it was unlinking and what its
    /// box leaves are linked to stays as traced until [`Self::release_held`].
    pub(super) fn trace_member(
        &mut self,
        tag: u8,
    ) -> Result<(Vec<HeldLeaf>, HashSet<u64>), RetrainError> {
        let mut held = Vec::new();
        let mut linked = HashSet::new();
        let table = read_slot_table(&mut self.ep, &self.layout)?;
        for (slot, &(record_addr, _)) in table.iter().enumerate() {
            let slot = slot as u64;
            let record =
                std::sync::Arc::new(read_record(&mut self.ep, &self.layout, slot, record_addr)?);
            for (leaf, &entry) in record.lt.iter().enumerate() {
                if entry.is_locked() && entry.owner() == tag {
                    held.push(HeldLeaf {
                        slot,
                        record_addr,
                        record: std::sync::Arc::clone(&record),
                        leaf,
                        lt_addr: record_addr.saturating_add(record.layout().lt_entry(leaf as u64)),
                        entry,
                    });
                }
            }
            add_linked(&record, &mut linked);
        }
        Ok((held, linked))
    }

    /// Every leaf the current records link or name in a freed SLT slot (see
    /// [`Self::trace_member`], which also collects a member's locks in the same pass).
    pub(super) fn linked_leaves(&mut self) -> Result<HashSet<u64>, RetrainError> {
        let mut linked = HashSet::new();
        let table = read_slot_table(&mut self.ep, &self.layout)?;
        for (slot, &(record_addr, _)) in table.iter().enumerate() {
            let record = read_record(&mut self.ep, &self.layout, slot as u64, record_addr)?;
            add_linked(&record, &mut linked);
        }
        Ok(linked)
    }

    /// Repairs the chains of the locks [`Self::trace_member`] found, keeping the locks (see
    /// `leaf_store::redo`): first every torn leaf is restored from its one image among the
    /// member's unlinked box leaves (`boxes`: its box words) and every box leaf that validates as
    /// a leaf of a held chain is invalidated — for all chains, so that no image is still needed
    /// when the trims use a box leaf as scratch — then each chain's trims, behind a header bump.
    /// Idempotent: a memory node that stops half-way repairs again when it restarts.
    pub(super) fn repair_held(
        &mut self,
        held: &[HeldLeaf],
        boxes: &[u64],
        linked: &HashSet<u64>,
    ) -> Result<RollForward, RetrainError> {
        let mut done = RollForward::default();
        if held.is_empty() {
            return Ok(done);
        }
        let unlinked: Vec<u64> = boxes
            .iter()
            .filter_map(|&w| leaf_store::members::word_leaf(w))
            .filter(|leaf| !linked.contains(leaf))
            .collect();
        let images = BoxImages::read(&mut self.ep, &self.layout, &unlinked)?;
        let mut plans = Vec::with_capacity(held.len());
        for lock in held {
            let plan = plan_repair(&mut self.ep, &self.layout, &lock.record, lock.leaf, &images)?;
            let mut verbs = Vec::new();
            plan.push_restores(&mut verbs, &self.layout);
            self.ep.batches(&mut verbs)?;
            drop(verbs);
            done.leaves_restored += plan.restores.len() as u64;
            plans.push(plan);
        }
        // A redo leaf of the member serves as scratch: it is never linked, and after the
        // invalidations above it holds no image anybody needs.
        let scratch = boxes
            .chunks(LEAF_BOX as usize)
            .filter_map(|b| b.get(REDO_SLOT as usize).copied())
            .filter_map(leaf_store::members::word_leaf)
            .find(|leaf| !linked.contains(leaf));
        let redo = needs_redo(&self.layout, self.ep.packet_bytes());
        for (lock, plan) in held.iter().zip(&plans) {
            done.claims_withdrawn += plan.withdrawals.len() as u64;
            if plan.damaged {
                // Released as it is; only a claim an unfinished split left is withdrawn.
                done.damaged_chains += 1;
                let mut verbs = Vec::new();
                plan.push_withdrawals(&mut verbs, &self.layout);
                if !verbs.is_empty() {
                    self.ep.batches(&mut verbs)?;
                }
                continue;
            }
            if plan.trims.is_empty() && plan.withdrawals.is_empty() {
                continue;
            }
            done.splits_completed += u64::from(!plan.trims.is_empty());
            // The bump first: readers whose cached tables predate the link refresh before any
            // key leaves a leaf they might read.
            let mut verbs: Vec<Verb<'_>> =
                vec![Verb::faa(lock.record_addr, ModelHeader::CHANGE_ONE)];
            plan.push_trims(&mut verbs, &self.layout, scratch, redo);
            self.ep.batches(&mut verbs)?;
        }
        Ok(done)
    }

    /// Releases the locks [`Self::trace_member`] found (their chains repaired by
    /// [`Self::repair_held`]), and queues their slots for retraining. Each release is idempotent
    /// (the unlock CAS expects the dead owner's tag).
    /// A leaf a dead member's unlink took out of its chain but did not get to mark: marks the
    /// SLT slot that still names it freed (naming it, so the retraining that rebuilds the record
    /// hands it out again) and bumps the header, as the unlink batch would have — compute nodes
    /// whose views still link it then re-read the tables before they write through that chain
    /// (ARCHITECTURE §6, "Writes"). `false` if no held chain's record names it (it is then free
    /// now). Before the member's locks are released, so nothing changed the record since
    /// [`Self::trace_member`] read it.
    pub(super) fn mark_unlinked(
        &mut self,
        held: &[HeldLeaf],
        gone: u64,
    ) -> Result<bool, RetrainError> {
        for lock in held {
            let record = &lock.record;
            let Some(slot) = leaf_store::settle::unmarked_slot(record, gone) else {
                continue;
            };
            let (mark, freed) =
                leaf_store::settle::freed_mark(lock.record_addr, record.layout(), slot, gone);
            let mut verbs = [
                Verb::write(mark, &freed),
                Verb::faa(lock.record_addr, leaf_store::ModelHeader::CHANGE_ONE).fenced(),
            ];
            self.ep.batch(&mut verbs)?;
            return Ok(true);
        }
        Ok(false)
    }

    pub(super) fn release_held(
        &mut self,
        held: Vec<HeldLeaf>,
    ) -> Result<RollForward, RetrainError> {
        let mut done = RollForward::default();
        let mut touched: Vec<u64> = Vec::new();
        for lock in held {
            self.ep
                .cas(lock.lt_addr, lock.entry.raw(), lock.entry.unlocked().raw())?;
            done.locks_released += 1;
            if !touched.contains(&lock.slot) {
                touched.push(lock.slot);
            }
        }
        for slot in touched {
            self.stuck.remove(&slot);
            // Queued on the ring (the queued bit and an entry), not only in this worker's
            // memory: a memory node that restarts after freeing the member still retrains it.
            if leaf_store::queue::enqueue(&mut self.ep, &self.layout, slot).is_err() {
                self.queue_slot(slot);
            }
        }
        self.poll()?;
        Ok(done)
    }
}

/// Adds to `linked` what `record`'s chains link and its freed SLT slots name (repairs move no leaf
/// in or out of a chain; an SLT slot a cut-short split wrote but never linked does not count). A
/// chain that cannot be followed counts every SLT entry, so nothing it might link is freed.
fn add_linked(record: &leaf_store::ModelRecord, linked: &mut HashSet<u64>) {
    let used = record.header.slot_use().min(leaf_store::MAX_SYNONYMS) as usize;
    linked.extend(record.slt[1..=used].iter().filter_map(|e| e.freed_leaf()));
    for leaf in 0..record.lt.len() {
        match record.chain_entries(leaf) {
            Ok(chain) => linked.extend(chain.iter().map(|e| e.leaf_num())),
            Err(_) => {
                linked.insert(record.lt[leaf].leaf_num());
                linked.extend(record.slt[1..=used].iter().map(|e| e.leaf_num()));
            }
        }
    }
}
