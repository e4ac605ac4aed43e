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

use std::time::{Duration, Instant};

use leaf_store::members::{CONNECTIONS_PER_MEMBER, Lease, MEMBER_TAGS, MemberState, MemberTable};
use rdma_transport::{Endpoint, Fence};

use super::roll_forward::RollForward;
use super::*;

/// What the worker needs to watch leases.
pub(super) struct MemberWatch {
    lease: Duration,
    fence: Box<dyn Fence>,
    table: MemberTable,
    /// Per tag: the lease last seen and when it was first seen so.
    seen: Vec<Option<(Lease, Instant)>>,
    last_check: Option<Instant>,
    pub(super) stats: MemberStats,
    last_problem: Option<RetrainError>,
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
    /// Recovery attempts that failed (a fence that did not complete, a transport error); the
    /// member stays marked dead and is tried again at the next check.
    pub failed_recoveries: u64,
}

/// How often the table is read.
const CHECK_EVERY: Duration = Duration::from_millis(2);

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

    /// Runs a check if one is due (at most every 2 ms).
    pub(super) fn check_members_if_due(&mut self) -> Result<(), RetrainError> {
        let due = self
            .members
            .as_ref()
            .is_some_and(|m| m.last_check.is_none_or(|at| at.elapsed() >= CHECK_EVERY));
        if due {
            self.check_members()?;
        }
        Ok(())
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
        Ok(recovered)
    }

    /// Fences dead member `tag`, releases its locks and frees its entry. `Ok(false)`: not finished
    /// (a fence did not complete, a step failed); the entry stays dead and the next check tries
    /// again.
    fn recover_member(
        &mut self,
        watch: &mut MemberWatch,
        tag: u8,
        dead: Lease,
        declared: Instant,
    ) -> Result<bool, RetrainError> {
        match self.try_recover_member(watch, tag, dead) {
            Ok(()) => {
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

    fn try_recover_member(
        &mut self,
        watch: &mut MemberWatch,
        tag: u8,
        dead: Lease,
    ) -> Result<(), RetrainError> {
        for connection in watch.table.read_connections(&mut self.ep, tag)? {
            watch
                .fence
                .fence(connection)
                .map_err(|e| RetrainError::FenceFailed {
                    tag,
                    reason: e.to_string(),
                })?;
            watch.stats.fenced_connections += 1;
        }
        let done = self.roll_forward(tag)?;
        let sum = &mut watch.stats.rolled_forward;
        sum.locks_released += done.locks_released;
        sum.splits_completed += done.splits_completed;
        sum.damaged_chains += done.damaged_chains;
        // A ring position the dead node claimed will never be written: skip it now.
        if let Some((position, _)) = self.stalled {
            let long_ago = Instant::now().checked_sub(self.config.ring_stall_limit);
            if let Some(long_ago) = long_ago {
                self.stalled = Some((position, long_ago));
            }
        }
        let zeros = vec![0u8; 8 * CONNECTIONS_PER_MEMBER as usize];
        self.ep.write(watch.table.connection_addr(tag, 0), &zeros)?;
        self.ep
            .cas(watch.table.lease_addr(tag), dead.raw(), dead.freed().raw())?;
        Ok(())
    }
}
