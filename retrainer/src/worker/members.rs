//! Watching leases: declaring a compute node dead, fencing it, and recovering what it held.
//!
//! The memory node's CPU reads the membership table ([`leaf_store::members`]) every few
//! milliseconds. A member whose heartbeat has not moved for the lease time is declared dead by
//! CAS (a renewal that lands first wins: a slow node that renews survives). Then, in this order,
//! each step idempotent so that a memory node that dies half-way does it all again on restart
//! (the entry stays marked dead until the last step):
//! 1. every connection the member registered is fenced ([`rdma_transport::Fence`]): nothing it
//!    posted lands afterwards;
//! 2. its leaf locks are released with their chains repaired ([`Retrainer::roll_forward`]);
//! 3. its connection words are cleared and the entry freed; a node that was only paused finds
//!    its lease gone at its next renewal, its verbs failing, and must join again.

use crate::sync::step;
use crate::sync::time::{Duration, Instant};

use leaf_store::members::{
    CONNECTIONS_PER_MEMBER, LEAF_BOX, Lease, MEMBER_TAGS, MemberState, MemberTable, REVOKE,
};
use rdma_transport::{Endpoint, Fence};

use super::roll_forward::RollForward;
use super::*;

/// The named steps of a dead member's recovery, in the order ARCHITECTURE §8 gives them (a step
/// with nothing to do is left out): its leaves first, its locks last. The seeded simulation
/// holds every recovery to [`ORDER`](recovery_steps::ORDER).
pub mod recovery_steps {
    /// Every connection of the member fenced on this memory node.
    pub const FENCED: &str = "recover: fenced";
    /// Its torn leaves restored and its half-done splits finished, its locks kept.
    pub const CHAINS_REPAIRED: &str = "recover: chains repaired";
    /// Its leaf boxes emptied, each leaf on the free list before its slot is.
    pub const BOXES_SETTLED: &str = "recover: boxes settled";
    /// Its unlink words completed and zeroed.
    pub const UNLINK_WORDS_SETTLED: &str = "recover: unlink words settled";
    /// Its value free words settled.
    pub const VALUE_FREES_SETTLED: &str = "recover: value frees settled";
    /// Its locks released: only once every word above is settled.
    pub const LOCKS_RELEASED: &str = "recover: locks released";
    /// Its connection words cleared.
    pub const CONNECTIONS_CLEARED: &str = "recover: connections cleared";
    /// All of them, in order.
    pub const ORDER: [&str; 7] = [
        FENCED,
        CHAINS_REPAIRED,
        BOXES_SETTLED,
        UNLINK_WORDS_SETTLED,
        VALUE_FREES_SETTLED,
        LOCKS_RELEASED,
        CONNECTIONS_CLEARED,
    ];
}

/// What the worker needs to watch leases.
pub(super) struct MemberWatch {
    lease: Duration,
    fence: Box<dyn Fence>,
    table: MemberTable,
    /// Per tag: the lease last seen and when it was first seen so.
    seen: Vec<Option<(Lease, Instant)>>,
    last_check: Option<Instant>,
    /// Tags alive at the last check: whose leaf boxes are kept filled.
    alive: Vec<u8>,
    /// The smallest epoch announced by a member alive or dead but not yet recovered, at the last
    /// check; `None`: no such member.
    oldest: Option<u64>,
    last_fill: Option<Instant>,
    pub(super) stats: MemberStats,
    last_problem: Option<RetrainError>,
}

impl MemberWatch {
    /// The smallest epoch a member that may still use cached views has announced it is past (the
    /// epoch at that check if there was no member). A record retired in an earlier epoch is in
    /// no member's views.
    pub(super) fn oldest_announced(&self) -> Option<u64> {
        self.oldest
    }
}

impl std::fmt::Debug for MemberWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberWatch")
            .field("lease", &self.lease)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Counters of the lease watch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Members alive at the last check.
    pub alive: u64,
    /// Joins seen (a new incarnation of an entry).
    pub joins: u64,
    /// Members declared dead.
    pub deaths: u64,
    /// Dead members whose recovery finished (entry freed).
    pub recoveries: u64,
    /// Connections fenced.
    pub fenced_connections: u64,
    /// What the roll-forwards did, summed.
    pub rolled_forward: RollForward,
    /// The longest time from declaring a member dead to freeing its entry.
    pub longest_recovery: Duration,
    /// Leaves handed out through leaf boxes.
    pub leaves_granted: u64,
    /// Recovery attempts that failed (a fence that failed, a transport error); the member stays
    /// marked dead and is tried again at the next check.
    pub failed_recoveries: u64,
    /// Recovery attempts put off because a fenced connection still had a batch in flight (its
    /// process stopped inside it): the member stays dead, nothing of it is touched, and the next
    /// check fences again — the worker never waits on it.
    pub fences_in_flight: u64,
    /// Connections of live members fenced at their member's request (an operation failed
    /// holding a leaf lock, which the member then recovers itself).
    pub revoked_connections: u64,
}

/// How often the table is read.
const CHECK_EVERY: Duration = Duration::from_millis(2);
/// How often, at most, the retirement epoch advances.
const EPOCH_EVERY: Duration = Duration::from_millis(5);
/// How long a stalled ring position is still waited for once a member died.
const DEAD_CLAIM_WAIT: Duration = Duration::from_millis(50);
/// How often the live members' leaf boxes are topped up.
impl<E: Endpoint> Retrainer<E> {
    /// Makes this worker watch the leases of its memory node's members: one whose lease has not
    /// been renewed for `lease` is declared dead, fenced through `fence`, and its locks recovered
    /// (from [`Self::run`], or [`Self::check_members`] directly).
    pub fn watch_members(&mut self, lease: Duration, fence: Box<dyn Fence>) {
        self.members = Some(MemberWatch {
            lease,
            fence,
            table: MemberTable::new(&self.layout),
            seen: vec![None; usize::from(MEMBER_TAGS) + 1],
            last_check: None,
            alive: Vec::new(),
            oldest: Some(0),
            last_fill: None,
            stats: MemberStats::default(),
            last_problem: None,
        });
    }

    /// Counters of the lease watch (`None` if leases are not watched).
    pub fn member_stats(&self) -> Option<MemberStats> {
        self.members.as_ref().map(|m| m.stats)
    }

    /// Why the last recovery attempt that failed did (the member stays dead and is retried).
    pub fn member_problem(&self) -> Option<&RetrainError> {
        self.members.as_ref().and_then(|m| m.last_problem.as_ref())
    }

    /// Runs a check if one is due (at most every 2 ms), and tops the live members' leaf boxes
    /// up (at most every `RetrainConfig::box_fill_interval`).
    pub(super) fn check_members_if_due(&mut self) -> Result<(), RetrainError> {
        let due = self
            .members
            .as_ref()
            .is_some_and(|m| m.last_check.is_none_or(|at| at.elapsed() >= CHECK_EVERY));
        if due {
            self.check_members()?;
        }
        let fill = self.members.as_ref().is_some_and(|m| {
            m.last_fill
                .is_none_or(|at| at.elapsed() >= self.config.box_fill_interval)
        });
        if fill {
            self.fill_boxes()?;
        }
        Ok(())
    }

    /// Fills every empty slot of every live member's registered clients' leaf boxes: from the
    /// free list first, else fresh leaves from the allocation counter. Returns how many leaves
    /// were handed out.
    pub fn fill_boxes(&mut self) -> Result<u64, RetrainError> {
        let Some(mut watch) = self.members.take() else {
            return Ok(0);
        };
        let result = self.fill_boxes_with(&mut watch);
        watch.last_fill = Some(Instant::now());
        self.members = Some(watch);
        result
    }

    fn fill_boxes_with(&mut self, watch: &mut MemberWatch) -> Result<u64, RetrainError> {
        let mut handed = 0;
        for &tag in &watch.alive {
            let connections = watch.table.read_connection_words(&mut self.ep, tag)?;
            // Connections their member asked to have fenced (an operation failed holding a leaf
            // lock): fenced, then the word cleared — the member recovers the lock once it reads
            // 0. One still in flight is fenced again next time.
            for (index, &word) in connections.iter().enumerate() {
                if word & REVOKE == 0 {
                    continue;
                }
                let fenced = match watch.fence.fence(word & !REVOKE) {
                    Ok(fenced) => fenced,
                    Err(e) => {
                        // Tried again at the next refill; the other members are served.
                        watch.last_problem = Some(RetrainError::FenceFailed {
                            tag,
                            reason: e.to_string(),
                        });
                        continue;
                    }
                };
                if fenced == rdma_transport::Fenced::Done {
                    let at = watch.table.connection_addr(tag, index as u64);
                    if self.ep.cas(at, word, 0)? == word {
                        watch.stats.revoked_connections += 1;
                        step("boxes: connection revoked");
                    }
                }
            }
            let boxes = watch.table.read_boxes(&mut self.ep, tag)?;
            let mut grants = Vec::new();
            // Index 0 is the compute node's own (renewing) endpoint: it never splits.
            for index in 1..CONNECTIONS_PER_MEMBER {
                if connections[index as usize] & !REVOKE == 0 {
                    continue;
                }
                // The last slot first: it holds the client's redo leaf when leaves are longer
                // than a packet, which a rewrite in place needs before a split needs the rest.
                for slot in (0..LEAF_BOX).rev() {
                    if boxes[(index * LEAF_BOX + slot) as usize] != 0 {
                        continue;
                    }
                    let leaf = match self.free_leaves.pop() {
                        Some(leaf) => {
                            leaf_store::ghost::take(&self.layout, leaf);
                            leaf
                        }
                        None => match leaf_store::alloc_leaf(&mut self.ep, &self.layout) {
                            Ok(leaf) => leaf,
                            Err(LeafStoreError::PoolExhausted { .. }) => break,
                            Err(e) => {
                                // The leaves gathered so far go back to the free list: dropped
                                // here, they were leaked (the seeded simulation found it).
                                for &(_, leaf) in &grants {
                                    self.free_leaves.push(leaf);
                                    leaf_store::ghost::put(self.layout.node(), leaf);
                                }
                                return Err(e.into());
                            }
                        },
                    };
                    grants.push((watch.table.box_addr(tag, index, slot), leaf));
                }
            }
            if grants.is_empty() {
                continue;
            }
            step("boxes: leaves gathered");
            // `old` preset to a value the slot cannot hold before the swap: a CAS the batch did not
            // execute does not look like one that swapped.
            let mut verbs: Vec<Verb<'_>> = grants
                .iter()
                .map(|&(at, leaf)| {
                    let mut cas = Verb::cas(at, 0, leaf_store::members::leaf_word(leaf));
                    if let Verb::Cas { old, .. } = &mut cas {
                        *old = u64::MAX;
                    }
                    cas
                })
                .collect();
            let outcome = self.ep.batches(&mut verbs);
            let taken: Vec<bool> = verbs
                .iter()
                .map(|v| v.cas_succeeded() == Some(true))
                .collect();
            drop(verbs);
            for (&(_, leaf), took) in grants.iter().zip(taken) {
                if took {
                    handed += 1;
                } else {
                    self.free_leaves.push(leaf);
                }
                leaf_store::ghost::put(self.layout.node(), leaf);
            }
            outcome?;
        }
        watch.stats.leaves_granted += handed;
        Ok(handed)
    }

    /// Reads every lease once: declares members whose lease lapsed dead, and recovers every dead
    /// member (fence, roll forward, free). Returns how many members were recovered.
    pub fn check_members(&mut self) -> Result<u64, RetrainError> {
        let Some(mut watch) = self.members.take() else {
            return Ok(0);
        };
        let result = self.check_members_with(&mut watch);
        watch.last_check = Some(Instant::now());
        self.members = Some(watch);
        result
    }

    fn check_members_with(&mut self, watch: &mut MemberWatch) -> Result<u64, RetrainError> {
        let leases = watch.table.read_leases(&mut self.ep)?;
        let now = Instant::now();
        let mut alive = 0;
        let mut recovered = 0;
        for tag in 1..=MEMBER_TAGS {
            let lease = leases[usize::from(tag)];
            let seen = &mut watch.seen[usize::from(tag)];
            match lease.state() {
                MemberState::Free => *seen = None,
                MemberState::Alive => {
                    alive += 1;
                    match *seen {
                        Some((last, since)) if last == lease => {
                            if now.duration_since(since) < watch.lease {
                                continue;
                            }
                            let dead = lease.dead();
                            let old = self.ep.cas(
                                watch.table.lease_addr(tag),
                                lease.raw(),
                                dead.raw(),
                            )?;
                            if old != lease.raw() {
                                // Renewed just now: alive after all.
                                *seen = Some((Lease::from_raw(old), now));
                                continue;
                            }
                            watch.stats.deaths += 1;
                            alive -= 1;
                            if self.recover_member(watch, tag, dead, now)? {
                                recovered += 1;
                            }
                        }
                        Some((last, _)) if last.same_holding(lease) => *seen = Some((lease, now)),
                        _ => {
                            watch.stats.joins += 1;
                            *seen = Some((lease, now));
                        }
                    }
                }
                MemberState::Dead => {
                    // Declared dead earlier (by this worker, or one that stopped half-way).
                    let since = seen.map_or(now, |(_, since)| since);
                    if self.recover_member(watch, tag, lease, since)? {
                        recovered += 1;
                    }
                }
            }
        }
        watch.stats.alive = alive;
        watch.alive = (1..=MEMBER_TAGS)
            .filter(|&t| leases[usize::from(t)].state() == MemberState::Alive)
            .filter(|&t| watch.seen[usize::from(t)].is_some())
            .collect();
        // Reclamation: read after the leases, so a member that joined since has no view of a
        // record retired before (it reads the slot table after joining); a member still being
        // recovered counts until it is freed.
        let announced = watch.table.read_announcements(&mut self.ep)?;
        let leases = watch.table.read_leases(&mut self.ep)?;
        // With no member, what is retired from now on is stamped with the current epoch and
        // stays until a later check (a member may join meanwhile): never `None`.
        watch.oldest = Some(
            (1..=MEMBER_TAGS)
                .filter(|&t| leases[usize::from(t)].state() != MemberState::Free)
                .map(|t| announced[usize::from(t)])
                .min()
                .unwrap_or(self.epoch),
        );
        if let Some(oldest) = watch.oldest {
            self.publish_horizon(oldest)?;
        }
        self.release_departed_chunks(&leases)?;
        self.advance_epoch_if_due()?;
        Ok(recovered)
    }

    /// Advances the retirement epoch (at most every [`EPOCH_EVERY`]) when a record retired in the
    /// current one waits, or an orphan sweep's first scan taken in it: members can announce they
    /// are past an epoch only once it is over.
    fn advance_epoch_if_due(&mut self) -> Result<(), RetrainError> {
        let due = self
            .epoch_advanced
            .is_none_or(|at| at.elapsed() >= EPOCH_EVERY);
        if !due {
            return Ok(());
        }
        let wanted = self.reuse_wanted()?;
        let waiting = self.retired.back().is_some_and(|r| r.stamp >= self.epoch)
            || self.orphan_scan_waits_on(self.epoch)
            || wanted;
        if waiting {
            // Stamp with the new epoch from now on even if the WRITE's completion is lost (it
            // may have landed: members could then announce it); a stamp above the word only
            // delays reclamation, one below it would free too early.
            self.epoch += 1;
            self.epoch_advanced = Some(Instant::now());
            let table = MemberTable::new(&self.layout);
            self.ep.write_word(table.epoch_addr(), self.epoch)?;
            if wanted {
                self.clear_reuse_wanted()?;
            }
        }
        Ok(())
    }

    /// Fences dead member `tag`, releases its locks and frees its entry. `Ok(false)`: not finished
    /// (a batch of it still in flight, a step failed); the entry stays dead and the next check
    /// tries again.
    fn recover_member(
        &mut self,
        watch: &mut MemberWatch,
        tag: u8,
        dead: Lease,
        declared: Instant,
    ) -> Result<bool, RetrainError> {
        match self.try_recover_member(watch, tag, dead) {
            Ok(false) => {
                watch.stats.fences_in_flight += 1;
                watch.seen[usize::from(tag)] = Some((dead, declared));
                Ok(false)
            }
            Ok(true) => {
                watch.stats.recoveries += 1;
                watch.seen[usize::from(tag)] = None;
                watch.stats.longest_recovery = watch.stats.longest_recovery.max(declared.elapsed());
                Ok(true)
            }
            Err(e) if e.is_transport_lost() => Err(e),
            Err(e) => {
                watch.stats.failed_recoveries += 1;
                watch.seen[usize::from(tag)] = Some((dead, declared));
                watch.last_problem = Some(e);
                Ok(false)
            }
        }
    }

    /// One recovery attempt; `Ok(false)`: a connection still has a batch in flight, nothing
    /// was changed beyond fencing.
    fn try_recover_member(
        &mut self,
        watch: &mut MemberWatch,
        tag: u8,
        dead: Lease,
    ) -> Result<bool, RetrainError> {
        // Every connection is revoked before any is waited for: none of them starts a batch
        // from here on.
        let mut in_flight = false;
        for connection in watch.table.read_connections(&mut self.ep, tag)? {
            match watch.fence.fence(connection) {
                Ok(rdma_transport::Fenced::Done) => watch.stats.fenced_connections += 1,
                Ok(rdma_transport::Fenced::InFlight) => in_flight = true,
                Err(e) => {
                    return Err(RetrainError::FenceFailed {
                        tag,
                        reason: e.to_string(),
                    });
                }
            }
        }
        if in_flight {
            return Ok(false);
        }
        step(recovery_steps::FENCED);
        // Its leaves first, its locks last. While its locks are held, nothing it was splitting or
        // unlinking can change or be retrained, so the trace stays true until the release; once
        // a lock is released, a retraining may free a leaf its unlink word names into a live
        // client's box, and a later attempt that read that word would free the leaf again (a
        // review found that double allocation). So each word is settled — zeroed *before* its
        // leaf goes on the free list — before any lock is released: an attempt cut short finds
        // every settled word empty, and one cut short before the zeroing changed nothing.
        let (held, linked) = self.trace_member(tag)?;
        // Its chains, locks kept: torn leaves restored from its redo leaves, splits finished.
        // Before its boxes are settled: their leaves hold the images.
        let boxes = watch.table.read_boxes(&mut self.ep, tag)?;
        let mut done = self.repair_held(&held, &boxes, &linked)?;
        step(recovery_steps::CHAINS_REPAIRED);
        // Its leaf boxes: a leaf a split linked before the node died (its box slot not yet
        // cleared) stays linked; every other one was never linked and is free again.
        for (i, &word) in boxes.iter().enumerate() {
            let Some(leaf) = leaf_store::members::word_leaf(word) else {
                continue;
            };
            let (index, slot) = (i as u64 / LEAF_BOX, i as u64 % LEAF_BOX);
            let at = watch.table.box_addr(tag, index, slot);
            // On the free list before the CAS that empties its slot: were the CAS's completion
            // lost, the slot would be empty and the leaf nowhere (the seeded simulation found
            // it). A lost completion ends this worker, and its free list with it (§7); any other
            // failure did not execute, and the leaf stays the box's. (A caller that goes on after
            // a lost completion finds the leaf on the free list already: it is not added twice.)
            let free = !linked.contains(&leaf) && !self.free_leaves.contains(&leaf);
            if free {
                self.free_leaves.push(leaf);
            }
            match self.ep.cas(at, word, 0) {
                Ok(old) if old == word => done.leaves_freed += u64::from(free),
                Ok(_) => {
                    if free {
                        self.free_leaves.pop();
                    }
                }
                Err(e) => {
                    let e = RetrainError::from(LeafStoreError::from(e));
                    if free && !e.is_transport_lost() {
                        self.free_leaves.pop();
                    }
                    return Err(e);
                }
            }
        }
        step(recovery_steps::BOXES_SETTLED);
        // Its unlink words: each names a leaf under its client's lock (the unlink batch clears
        // the word before it unlocks). One the batch took out of its chain but did not get to
        // mark freed is linked nowhere, marked nowhere, on no free list and in no box.
        let words = watch.table.read_unlink_words(&mut self.ep, tag)?;
        let unlinked: Vec<u64> = words
            .iter()
            .filter_map(|&w| leaf_store::members::word_leaf(w))
            .collect();
        if !unlinked.is_empty() {
            let mut held_anywhere: HashSet<u64> = linked;
            held_anywhere.extend(self.free_leaves.iter().copied());
            held_anywhere.extend(self.boxed_leaves(&watch.table)?);
            let mut freed = Vec::new();
            for leaf in unlinked {
                if !held_anywhere.insert(leaf) {
                    continue;
                }
                // Its SLT slot still names it: marked freed, the header bumped (the retraining
                // frees it). Handed out at once instead, a compute node whose view still links it
                // could write it as a leaf of this chain after the header check said the chain
                // was current, while it serves another (an adversarial review found that).
                if self.mark_unlinked(&held, leaf)? {
                    done.unlinks_completed += 1;
                } else {
                    freed.push(leaf);
                }
            }
            // On the free list before the WRITE that zeroes their words, for the same reason as
            // the box leaves above.
            let before = self.free_leaves.len();
            self.free_leaves.extend(freed.iter().copied());
            let zeros = vec![0u8; words.len() * 8];
            if let Err(e) = self.ep.write(watch.table.unlink_addr(tag, 0), &zeros) {
                let e = RetrainError::from(LeafStoreError::from(e));
                if !e.is_transport_lost() {
                    self.free_leaves.truncate(before);
                }
                return Err(e);
            }
            done.unlinks_completed += freed.len() as u64;
            step(recovery_steps::UNLINK_WORDS_SETTLED);
        }
        if self.settle_value_frees(&watch.table, tag)? > 0 {
            step(recovery_steps::VALUE_FREES_SETTLED);
        }
        let released = self.release_held(held)?;
        step(recovery_steps::LOCKS_RELEASED);
        done.locks_released = released.locks_released;
        let sum = &mut watch.stats.rolled_forward;
        sum.locks_released += done.locks_released;
        sum.splits_completed += done.splits_completed;
        sum.claims_withdrawn += done.claims_withdrawn;
        sum.leaves_restored += done.leaves_restored;
        sum.damaged_chains += done.damaged_chains;
        sum.leaves_freed += done.leaves_freed;
        sum.unlinks_completed += done.unlinks_completed;
        // A ring position claimed but not written may be the dead node's, which will never be
        // written: skip it after a short wait instead of the whole stall limit (a live node that
        // claimed it writes within microseconds; if it is slower, the re-queue after a skip still
        // saves its slot).
        if let Some((position, _)) = self.stalled {
            let soon = self.config.ring_stall_limit.saturating_sub(DEAD_CLAIM_WAIT);
            if let Some(earlier) = Instant::now().checked_sub(soon) {
                self.stalled = Some((position, earlier));
            }
        }
        let zeros = vec![0u8; 8 * CONNECTIONS_PER_MEMBER as usize];
        self.ep.write(watch.table.connection_addr(tag, 0), &zeros)?;
        step(recovery_steps::CONNECTIONS_CLEARED);
        self.ep.write_word(watch.table.announce_addr(tag), 0)?;
        self.ep
            .cas(watch.table.lease_addr(tag), dead.raw(), dead.freed().raw())?;
        Ok(true)
    }
}
