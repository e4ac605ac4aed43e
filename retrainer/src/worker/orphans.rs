//! Orphaned leaves: allocated, held by nobody, and reclaimed by the memory node.
//!
//! A leaf can drop out of every place that names it: a compute node allocated it by
//! fetch-and-add and lost the completion (it never learnt the number), or died holding it for a
//! split, or forgot a spare it had nowhere to put; a worker that lost a completion or was killed
//! took its free list with it. Nothing else ever finds such a leaf again.
//!
//! **Invariant.** The sweep frees a leaf only if it was allocated before the sweep began and was
//! held by nobody at two scans, the second taken once every member has announced a retirement
//! epoch later than the one the first was taken in. *Held* means named by one of, read in this
//! order: the worker's free list, a leaf box (any member, any connection), a chain or a freed SLT
//! slot of a current record, an unlink word, and the records again.
//!
//! Why that is enough:
//! - **A leaf in transit is seen.** A leaf moves only forward through those places, and always
//!   appears in the next before it leaves the one it is in: a split links a box leaf before its
//!   batch clears the box slot; a delete writes its unlink word before the link-around, marks the
//!   SLT slot freed before it clears the word; only this worker moves a freed leaf to its free list
//!   and from there into a box. Reading the places in that order, each READ after the one before,
//!   the leaf is at or past the place read next at every step, so some READ finds it.
//! - **A leaf in a compute node's hands is not taken.** A compute node holds a leaf nowhere
//!   visible only inside an operation: one it allocated for a split, until the split links it; a
//!   spare is parked in an empty box slot, or forgotten, before the operation ends
//!   (`index_core`'s client). A leaf allocated after the first scan read the allocation counter is
//!   not a candidate. One allocated before, by an operation still running at the first scan, is
//!   linked, parked or forgotten before that operation ends — and every member announces an
//!   epoch later than the first scan's only after every operation it was running then has ended
//!   (`index_core::membership`). A member that dies instead is fenced, so its split can no longer
//!   link the leaf, and it counts as not announced until its recovery frees it.
//! - **This worker's own leaves** (its free list, a retraining's leaves) change only on this
//!   thread, between the sweep's steps.
//!
//! A reclaimed leaf's checksum word is zeroed before it goes on the free list, so no image it
//! held can validate later (`leaf_store::redo`).

use std::collections::HashSet;

use leaf_store::members::{MEMBER_TAGS, MemberTable, word_leaf};
use leaf_store::redo::INVALID_CHECKSUM;
use rdma_transport::Endpoint;

use super::{RetrainError, Retrainer};
use crate::sync::step;
use crate::sync::time::Instant;

/// A sweep's first scan, waiting for the epoch it was taken in to be over everywhere.
#[derive(Debug, Clone)]
pub(super) struct OrphanScan {
    /// The retirement epoch when it was taken.
    stamp: u64,
    /// Leaves allocated before it and held by nobody at it.
    candidates: Vec<u64>,
}

impl<E: Endpoint> Retrainer<E> {
    /// One step of the orphan sweep (see the module documentation): the first scan, or — once
    /// every member has announced an epoch later than the first scan's — the second, which frees
    /// the leaves found in neither. Only with a lease watch (members announce epochs); returns
    /// the leaves freed.
    pub fn sweep_orphans(&mut self) -> Result<u64, RetrainError> {
        let Some(oldest) = self.members.as_ref().map(|m| m.oldest_announced()) else {
            return Ok(0);
        };
        let Some(scan) = self.orphan_scan.take() else {
            self.last_orphan_sweep = Some(Instant::now());
            let allocated = self.ep.read_word(self.layout.alloc_num_addr())?;
            let held = self.held_leaves()?;
            let candidates: Vec<u64> = (0..allocated.min(self.layout.leaf_capacity()))
                .filter(|leaf| !held.contains(leaf))
                .collect();
            if !candidates.is_empty() {
                self.orphan_scan = Some(OrphanScan {
                    stamp: self.epoch,
                    candidates,
                });
                step("orphans: first scan taken");
            }
            return Ok(0);
        };
        if oldest.is_none_or(|announced| scan.stamp >= announced) {
            self.orphan_scan = Some(scan);
            return Ok(0);
        }
        let held = self.held_leaves()?;
        let orphans: Vec<u64> = scan
            .candidates
            .into_iter()
            .filter(|leaf| !held.contains(leaf))
            .collect();
        step("orphans: second scan taken");
        for &leaf in &orphans {
            self.ep
                .write(self.layout.leaf_addr(leaf), &INVALID_CHECKSUM)?;
        }
        for &leaf in &orphans {
            leaf_store::ghost::reclaim(&self.layout, leaf);
        }
        self.stats.orphans_reclaimed += orphans.len() as u64;
        self.free_leaves.extend(orphans.iter().copied());
        Ok(orphans.len() as u64)
    }

    /// Whether a first scan taken in epoch `epoch` waits for it to be over.
    pub(super) fn orphan_scan_waits_on(&self, epoch: u64) -> bool {
        self.orphan_scan.as_ref().is_some_and(|s| s.stamp >= epoch)
    }

    /// The leaves the pending first scan found held by nobody (empty if none waits): what a
    /// sweep that did not wait for the epoch would free.
    pub fn orphan_candidates(&self) -> &[u64] {
        self.orphan_scan
            .as_ref()
            .map_or(&[], |scan| scan.candidates.as_slice())
    }

    /// Whether a sweep's first scan waits for its epoch to be over.
    pub fn orphan_scan_pending(&self) -> bool {
        self.orphan_scan.is_some()
    }

    /// [`Self::sweep_orphans`] when its interval has passed since the last first scan, or a
    /// first scan waits.
    pub(super) fn sweep_orphans_if_due(&mut self) -> Result<(), RetrainError> {
        let due = self.orphan_scan.is_some()
            || self
                .last_orphan_sweep
                .is_none_or(|at| at.elapsed() >= self.config.orphan_sweep_interval);
        if due {
            self.sweep_orphans()?;
        }
        Ok(())
    }

    /// Every leaf some place names, read in the order of the module documentation.
    fn held_leaves(&mut self) -> Result<HashSet<u64>, RetrainError> {
        let mut held: HashSet<u64> = self.free_leaves.iter().copied().collect();
        let table = MemberTable::new(&self.layout);
        held.extend(self.boxed_leaves(&table)?);
        held.extend(self.linked_leaves()?);
        for tag in 1..=MEMBER_TAGS {
            held.extend(
                table
                    .read_unlink_words(&mut self.ep, tag)?
                    .into_iter()
                    .filter_map(word_leaf),
            );
        }
        held.extend(self.linked_leaves()?);
        Ok(held)
    }

    /// Every leaf in a leaf box of any member.
    pub(super) fn boxed_leaves(&mut self, table: &MemberTable) -> Result<Vec<u64>, RetrainError> {
        let mut boxed = Vec::new();
        for tag in 1..=MEMBER_TAGS {
            boxed.extend(
                table
                    .read_boxes(&mut self.ep, tag)?
                    .into_iter()
                    .filter_map(word_leaf),
            );
        }
        Ok(boxed)
    }
}
