//! A compute node's membership on every memory node: joined when the [`crate::Store`] opens,
//! renewed by a background thread, given up cleanly when the last client is gone.
//!
//! The protocol (lease words, tags, why a registered connection is always fenced) is in
//! [`leaf_store::members`]; this module is the compute node's side of it:
//!
//! * [`join_all`] joins every memory node and registers the store's own endpoint (connection 0),
//!   which the renewer then uses;
//! * each client takes a connection index (1..128) and registers its endpoint on every node
//!   ([`Members::register`]) before its first operation;
//! * the renewer renews every lease each [`crate::StoreConfig::lease_renewal`]; a renewal that finds
//!   the lease no longer ours means the memory node declared this compute node dead and cut it off:
//!   [`Members::is_fenced`] turns true and operations fail with [`crate::IndexError::Fenced`]. The
//!   compute node opens the store again to rejoin as a new member.
//!
//! What a member announces — its retirement epoch — is [`crate::epoch`]'s.

use std::sync::Arc;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::thread::JoinHandle;
use crate::sync::time::Duration;
use crate::sync::{MembershipCondvar as Condvar, MembershipMutex as Mutex};

use leaf_store::Layout;

use crate::epoch::LocalEpoch;
use crate::locks::LockTable;
use crate::self_recovery::{MaybeHeld, Retired, Settled};
use crate::view::SlotCells;

use leaf_store::members::{CONNECTIONS_PER_MEMBER, MemberTable, Membership, MembershipError};
use rdma_transport::Endpoint;

use crate::IndexError;

/// What the clients, the renewer and the store share about the memberships.
#[derive(Debug)]
pub(crate) struct Members {
    /// Per memory node in the store's key order: its table and our membership (`None`: not
    /// joined, locks carry owner 0 and nothing renews).
    pub(crate) nodes: Vec<(MemberTable, Option<Membership>)>,
    /// Connection indexes in use by clients (index 0 is the renewer's).
    in_use: Mutex<Vec<bool>>,
    fenced: AtomicBool,
    stop: (Mutex<bool>, Condvar),
    /// Set by [`Members::halt`]: renew no more, and do not leave.
    halted: AtomicBool,
    /// The local retirement epoch and the epochs running operations began in.
    pub(crate) epochs: LocalEpoch,
    /// Every memory node's slot views (store key order), for the renewer to confirm.
    pub(crate) views: Vec<Arc<SlotCells>>,
    /// The local lock stripes (the renewer takes one to recover a lock an operation left).
    locks: Arc<LockTable>,
    /// Client connection indexes retired after an operation reported a lock that may remain
    /// (see [`crate::self_recovery`]); each stays taken until the renewer has settled it.
    retired: Mutex<Vec<Retired>>,
}

impl Members {
    /// Whether a memory node declared this compute node dead (its connections are cut off).
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Retires a client's connection index after its operation, running in local epoch
    /// `epoch`, lost a batch's completion (which may still execute) or reported that `lock` may
    /// remain held: the renewer revokes the connection on every node, recovers the lock, and
    /// frees the index; until every node has fenced it, no epoch past `epoch` is announced.
    /// Whether this store can (it joined the lock's memory node, or with no lock, any node).
    pub(crate) fn retire(
        &self,
        index: u64,
        ids: Vec<u64>,
        lock: Option<MaybeHeld>,
        epoch: u64,
    ) -> bool {
        let joined = |node: usize| matches!(self.nodes.get(node), Some((_, Some(_))));
        let can = match lock {
            Some(lock) => joined(lock.node),
            None => (0..self.nodes.len()).any(joined),
        };
        if !can {
            return false;
        }
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Retired {
                index,
                lock,
                epoch,
                // Not yet fenced wherever a connection is registered: counted as running from
                // this moment, not from the renewer's first revocation.
                revoked: self
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(node, (_, member))| {
                        member.is_none() || ids.get(node).copied().unwrap_or(0) == 0
                    })
                    .collect(),
                ids,
            });
        true
    }

    /// Connection indexes retired and not yet settled.
    pub(crate) fn retired_count(&self) -> usize {
        self.retired.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// One attempt at every retired index (the renewer, each period): each is revoked first;
    /// those that may hold the same lock are settled together, once all are revoked; the indexes
    /// settled are unregistered and freed.
    pub(crate) fn settle_retired<E: Endpoint>(&self, ep: &mut E) {
        // Held throughout: a client retiring meanwhile (it holds the stripe then, which this
        // only ever try-locks) must land in the group it belongs to, not in a list set aside.
        let mut list = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let mut retired = std::mem::take(&mut *list);
        let mut ready = Vec::with_capacity(retired.len());
        for r in &mut retired {
            ready.push(crate::self_recovery::revoked(ep, &self.nodes, r).unwrap_or(false));
        }
        let mut settled = vec![false; retired.len()];
        for at in 0..retired.len() {
            if settled[at] {
                continue;
            }
            // Every index naming the lock, wherever it stands in the list: one earlier in it
            // whose fence is still awaited (its batch in flight) holds the whole group back,
            // or settling the rest would release the lock under that batch, whose writes then
            // land on a chain repaired without them (the seeded simulation found it, seed 203).
            let same: Vec<usize> = (0..retired.len())
                .filter(|&o| {
                    o == at || (retired[o].lock.is_some() && retired[o].lock == retired[at].lock)
                })
                .collect();
            if !same.iter().all(|&o| ready[o]) {
                continue;
            }
            let group: Vec<&Retired> = same.iter().map(|&o| &retired[o]).collect();
            if crate::self_recovery::settle_group(ep, &self.nodes, &self.locks, &group)
                == Ok(Settled::Done)
            {
                for &o in &same {
                    settled[o] = true;
                }
            }
        }
        for (r, done) in retired.into_iter().zip(settled) {
            if done {
                self.unregister(ep, r.index, &r.ids);
                self.release_index(r.index);
            } else {
                list.push(r);
            }
        }
    }

    /// Takes a free connection index for a client.
    pub(crate) fn take_index(&self) -> Result<u64, IndexError> {
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        let Some(free) = (1..in_use.len()).find(|&i| !in_use[i]) else {
            return Err(IndexError::Config(format!(
                "at most {} clients per store",
                CONNECTIONS_PER_MEMBER - 1
            )));
        };
        in_use[free] = true;
        Ok(free as u64)
    }

    /// Gives a client's connection index back.
    pub(crate) fn release_index(&self, index: u64) {
        self.epochs.leave(index);
        let mut in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = in_use.get_mut(index as usize) {
            *slot = false;
        }
    }

    /// Registers `ep` as connection `index` on every joined node (one batch per node), in place
    /// of `previous` (the ids registered before, per node; empty for a new client). Returns the
    /// ids registered, per node (0 where not joined).
    pub(crate) fn register<E: Endpoint>(
        &self,
        ep: &mut E,
        index: u64,
        previous: &[u64],
    ) -> Result<Vec<u64>, IndexError> {
        if self.is_fenced() {
            return Err(self.fenced_error());
        }
        let mut ids = Vec::with_capacity(self.nodes.len());
        for (i, (table, member)) in self.nodes.iter().enumerate() {
            let Some(member) = member else {
                ids.push(0);
                continue;
            };
            let id = connection_id(ep, table.node())?;
            table
                .register(
                    ep,
                    *member,
                    index,
                    id,
                    previous.get(i).copied().unwrap_or(0),
                )
                .map_err(|e| self.membership_error(e))?;
            ids.push(id);
        }
        Ok(ids)
    }

    /// Clears connection `index`'s registrations `ids` (a client going away; best effort).
    pub(crate) fn unregister<E: Endpoint>(&self, ep: &mut E, index: u64, ids: &[u64]) {
        for ((table, member), &id) in self.nodes.iter().zip(ids) {
            if let (Some(member), true) = (member, id != 0) {
                let _ = table.unregister(ep, *member, index, id);
            }
        }
    }

    /// The error operations of a fenced compute node return.
    pub(crate) fn fenced_error(&self) -> IndexError {
        let node = self
            .nodes
            .iter()
            .find_map(|(t, m)| m.map(|_| t.node()))
            .unwrap_or(0);
        IndexError::Fenced { node }
    }

    fn membership_error(&self, e: MembershipError) -> IndexError {
        match e {
            MembershipError::Fenced { node, .. } => {
                self.fenced.store(true, Ordering::Release);
                IndexError::Fenced { node }
            }
            MembershipError::Store(leaf_store::LeafStoreError::Transport(
                rdma_transport::TransportError::Fenced(node),
            )) => {
                self.fenced.store(true, Ordering::Release);
                IndexError::Fenced { node }
            }
            MembershipError::Store(e) => e.into(),
            other => IndexError::Config(other.to_string()),
        }
    }

    /// Whether every running operation began in local epoch `epoch` or later — counting as
    /// running every retired operation whose connection some memory node has not fenced yet (a
    /// batch of it whose completion was lost may still land: a leaf it links, a record it
    /// writes through; a review of the orphan sweep found the leaf freed under it). A client
    /// retires before its operation leaves the active list, so one of the two always counts it.
    fn quiescent_since(&self, epoch: u64) -> bool {
        self.epochs.running_began_since(epoch)
            && self
                .retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .all(|r| (r.is_revoked() && !self.settles_values(r)) || r.epoch >= epoch)
    }

    /// Whether `r` may have left a value free word (it may hold a lock on a memory node with byte
    /// values): then it counts as running until settled, not only until fenced — the block the
    /// word names must not be reused before the word is settled (`crate::self_recovery`).
    fn settles_values(&self, r: &Retired) -> bool {
        r.lock.is_some_and(|lock| {
            self.nodes
                .get(lock.node)
                .is_some_and(|(table, _)| table.layout().values().is_some())
        })
    }

    /// Stops renewing without leaving (a fault drill: the compute node looks dead to the memory
    /// nodes once its lease lapses).
    pub(crate) fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// Asks the renewer to stop (and leave, unless a lock may remain) and returns at once.
    pub(crate) fn stop(&self) {
        let (flag, wake) = &self.stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        wake.notify_all();
    }
}

/// Joins every memory node of `layouts` (store key order) through `ep` and registers `ep` as
/// connection 0. With `join` false, nothing is joined (owner tags 0, no lease). A store joins
/// *before* it reads any slot table or record: a memory node reuses a retired record once every
/// member has moved past its epoch, and a compute node that read the slot table before it was a
/// member could be reading a record reused under it (a multi-process test caught exactly that).
pub(crate) fn join_all<E: Endpoint>(
    ep: &mut E,
    layouts: &[Layout],
    join: bool,
) -> Result<Vec<(MemberTable, Option<Membership>)>, IndexError> {
    let mut nodes = Vec::with_capacity(layouts.len());
    for layout in layouts {
        let table = MemberTable::new(layout);
        let member = if join {
            let member = table.join(ep).map_err(joining_error)?;
            crate::sync::step("join: tag taken");
            let id = connection_id(ep, layout.node())?;
            table
                .register(ep, member, 0, id, 0)
                .map_err(joining_error)?;
            Some(member)
        } else {
            None
        };
        nodes.push((table, member));
    }
    Ok(nodes)
}

/// What a failure to join or to register the store's own endpoint is reported as.
fn joining_error(e: MembershipError) -> IndexError {
    match e {
        MembershipError::Store(e) => IndexError::from(e),
        other => IndexError::Config(other.to_string()),
    }
}

/// What the store's clients and renewer share, once it has joined (`nodes`, from [`join_all`])
/// and loaded its views.
pub(crate) fn members(
    nodes: Vec<(MemberTable, Option<Membership>)>,
    views: Vec<Arc<SlotCells>>,
    locks: Arc<LockTable>,
) -> Arc<Members> {
    let mut in_use = vec![false; CONNECTIONS_PER_MEMBER as usize];
    in_use[0] = true;
    Arc::new(Members {
        nodes,
        in_use: Mutex::new(in_use),
        fenced: AtomicBool::new(false),
        stop: (Mutex::new(false), Condvar::new()),
        halted: AtomicBool::new(false),
        epochs: LocalEpoch::new(CONNECTIONS_PER_MEMBER as usize),
        views,
        locks,
        retired: Mutex::new(Vec::new()),
    })
}

/// The id under which memory node `node` knows `ep`'s connection; an error if the transport
/// cannot fence (a member it could not cut off would make recovery unsafe).
fn connection_id<E: Endpoint>(ep: &E, node: u16) -> Result<u64, IndexError> {
    ep.connection_id(node).ok_or_else(|| {
        IndexError::Config(format!(
            "the transport cannot fence connections to memory node {node}: open the store with \
             join_members false"
        ))
    })
}

/// Starts the renewer: every `every`, one CAS per joined node through `ep`. Stops when
/// [`Members::stop`] is called (then leaves every node, unless a lock may remain) or when a
/// renewal finds this compute node fenced.
pub(crate) fn spawn_renewer<E: Endpoint + 'static>(
    mut ep: E,
    members: Arc<Members>,
    every: Duration,
) -> std::io::Result<JoinHandle<()>> {
    crate::sync::thread::Builder::new()
        .name("rolex-lease".into())
        .spawn(move || {
            // Per joined node: its table, our membership, its position in store order, the epoch
            // we announced there.
            let mut held: Vec<(MemberTable, Membership, usize, u64)> = members
                .nodes
                .iter()
                .enumerate()
                .filter_map(|(i, (t, m))| m.map(|m| (*t, m, i, 0)))
                .collect();
            // Epochs seen but not announced yet: (node index in `held`, epoch), and the local
            // epoch the running operations must all have begun in first.
            let mut pending: Vec<(usize, u64)> = Vec::new();
            let mut pending_since = 0;
            loop {
                {
                    let (flag, wake) = &members.stop;
                    let stopped = flag.lock().unwrap_or_else(|e| e.into_inner());
                    let (stopped, _) = wake
                        .wait_timeout_while(stopped, every, |s| !*s)
                        .unwrap_or_else(|e| e.into_inner());
                    if *stopped {
                        break;
                    }
                }
                if members.halted.load(Ordering::Acquire) {
                    return;
                }
                let mut advanced = Vec::new();
                for (at, (table, member, _, announced)) in held.iter_mut().enumerate() {
                    match renew(&mut ep, table, member) {
                        Renewal::Fenced => {
                            members.fenced.store(true, Ordering::Release);
                            return;
                        }
                        Renewal::Renewed(Some(epoch))
                            if epoch > *announced && !pending.iter().any(|&(p, _)| p == at) =>
                        {
                            advanced.push((at, epoch));
                        }
                        Renewal::Renewed(_) => {}
                    }
                }
                if members.retired_count() > 0 {
                    members.settle_retired(&mut ep);
                }
                if !pending.is_empty() && members.quiescent_since(pending_since) {
                    let mut left = Vec::new();
                    for (at, epoch) in pending.drain(..) {
                        let (table, member, _, announced) = &mut held[at];
                        match ep.write_word(table.announce_addr(member.tag), epoch) {
                            Ok(()) => *announced = epoch,
                            Err(_) => left.push((at, epoch)),
                        }
                    }
                    pending = left;
                }
                if !advanced.is_empty() {
                    // Confirm, on *every* memory node, the views valid now that the slot tables
                    // still name, into the next local epoch; then move to it. The local epoch is
                    // store-wide: a node left unconfirmed would lose all its views to the advance
                    // of another (every slot there reloading its record at its next operation).
                    // Every table is read first, and views are raised only in a round that moves
                    // the epoch (raised in a round that did not, a view could later be trusted in
                    // that epoch although its record was swapped out since). A node whose table
                    // cannot be read keeps its views unconfirmed (they reload when used); an
                    // advanced node that could not be read is tried again.
                    let mut tables = vec![None; members.views.len()];
                    for (table, _, position, _) in &held {
                        tables[*position] =
                            leaf_store::read_slot_table(&mut ep, table.layout()).ok();
                    }
                    let confirmed: Vec<(usize, u64)> = advanced
                        .into_iter()
                        .filter(|&(at, _)| tables[held[at].2].is_some())
                        .collect();
                    if !confirmed.is_empty() {
                        pending_since = members.epochs.confirm_and_advance(&members.views, &tables);
                        pending.extend(confirmed);
                    }
                }
            }
            // A lock an operation may have left is given about 20 ms more (whatever the renewal
            // period; the memory node fences a revoked connection within a box refill, 500 µs).
            // One still not recovered then: the store does not leave, its lease lapses, and the
            // memory node recovers the lock.
            for _ in 0..20 {
                if members.retired_count() == 0 || members.is_fenced() {
                    break;
                }
                members.settle_retired(&mut ep);
                if members.retired_count() > 0 {
                    crate::sync::thread::sleep(every.min(Duration::from_millis(1)));
                }
            }
            if members.retired_count() == 0 && !members.is_fenced() {
                for (table, member, _, _) in held {
                    if let Some(id) = ep.connection_id(table.node()) {
                        let _ = table.unregister(&mut ep, member, 0, id);
                    }
                    let _ = table.leave(&mut ep, member);
                }
            }
        })
}

/// What one renewal found.
enum Renewal {
    /// Still a member; the retirement epoch, if it was read.
    Renewed(Option<u64>),
    /// The memory node declared this compute node dead.
    Fenced,
}

/// One renewal of `member`'s lease, reading the retirement epoch in the same batch. A renewal
/// that failed without an answer (a lost completion: the CAS may have executed) is settled by
/// reading the lease; one that cannot even do that is tried again next period — the lease is far
/// longer than one period, and if the endpoint stays broken the lease lapses: the memory node
/// then fences this compute node, which costs its operations an error, never data.
fn renew<E: Endpoint>(ep: &mut E, table: &MemberTable, member: &mut Membership) -> Renewal {
    match table.renew(ep, member) {
        Ok(epoch) => Renewal::Renewed(Some(epoch)),
        Err(MembershipError::Fenced { .. }) => Renewal::Fenced,
        Err(MembershipError::Store(leaf_store::LeafStoreError::Transport(
            rdma_transport::TransportError::Fenced(_),
        ))) => Renewal::Fenced,
        Err(_) => match ep.read_word(table.lease_addr(member.tag)) {
            Ok(word) if word == member.lease.renewed().raw() => {
                member.lease = member.lease.renewed();
                Renewal::Renewed(None)
            }
            Ok(word) if word == member.lease.raw() => Renewal::Renewed(None),
            Ok(_) | Err(rdma_transport::TransportError::Fenced(_)) => Renewal::Fenced,
            Err(_) => Renewal::Renewed(None),
        },
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;
