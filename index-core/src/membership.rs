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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use leaf_store::Layout;
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
    /// Set when an operation reported a lock that may remain: the store then does not leave its
    /// memberships at shutdown (the memory node must recover that lock when the lease lapses).
    may_hold_lock: AtomicBool,
    stop: (Mutex<bool>, Condvar),
    /// Set by [`Members::halt`]: renew no more, and do not leave.
    halted: AtomicBool,
}

impl Members {
    /// Whether a memory node declared this compute node dead (its connections are cut off).
    pub(crate) fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    pub(crate) fn note_lock_may_remain(&self) {
        self.may_hold_lock.store(true, Ordering::Release);
    }

    /// The owner tag this compute node's locks carry on node `i` (store key order).
    pub(crate) fn tag(&self, i: usize) -> u8 {
        self.nodes
            .get(i)
            .and_then(|(_, m)| m.map(|m| m.tag))
            .unwrap_or(0)
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
/// connection 0. With `join` false, nothing is joined (owner tags 0, no lease).
pub(crate) fn join_all<E: Endpoint>(
    ep: &mut E,
    layouts: &[Layout],
    join: bool,
) -> Result<Arc<Members>, IndexError> {
    let mut nodes = Vec::with_capacity(layouts.len());
    for layout in layouts {
        let table = MemberTable::new(layout);
        let member = if join {
            let member = table.join(ep).map_err(|e| match e {
                MembershipError::Store(e) => IndexError::from(e),
                other => IndexError::Config(other.to_string()),
            })?;
            let id = connection_id(ep, layout.node())?;
            table.register(ep, member, 0, id, 0).map_err(|e| match e {
                MembershipError::Store(e) => IndexError::from(e),
                other => IndexError::Config(other.to_string()),
            })?;
            Some(member)
        } else {
            None
        };
        nodes.push((table, member));
    }
    let mut in_use = vec![false; CONNECTIONS_PER_MEMBER as usize];
    in_use[0] = true;
    Ok(Arc::new(Members {
        nodes,
        in_use: Mutex::new(in_use),
        fenced: AtomicBool::new(false),
        may_hold_lock: AtomicBool::new(false),
        stop: (Mutex::new(false), Condvar::new()),
        halted: AtomicBool::new(false),
    }))
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
    std::thread::Builder::new()
        .name("rolex-lease".into())
        .spawn(move || {
            let mut held: Vec<(MemberTable, Membership)> = members
                .nodes
                .iter()
                .filter_map(|(t, m)| m.map(|m| (*t, m)))
                .collect();
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
                for (table, member) in &mut held {
                    if !renew(&mut ep, table, member) {
                        members.fenced.store(true, Ordering::Release);
                        return;
                    }
                }
            }
            if !members.may_hold_lock.load(Ordering::Acquire) && !members.is_fenced() {
                for (table, member) in held {
                    if let Some(id) = ep.connection_id(table.node()) {
                        let _ = table.unregister(&mut ep, member, 0, id);
                    }
                    let _ = table.leave(&mut ep, member);
                }
            }
        })
}

/// One renewal of `member`'s lease; false if the member turns out to be fenced. A renewal that
/// failed without an answer (a lost completion: the CAS may have executed) is settled by
/// reading the lease; one that cannot even do that is tried again next period — the lease is far
/// longer than one period, and if the endpoint stays broken the lease lapses: the memory node
/// then fences this compute node, which costs its operations an error, never data.
fn renew<E: Endpoint>(ep: &mut E, table: &MemberTable, member: &mut Membership) -> bool {
    match table.renew(ep, member) {
        Ok(()) => true,
        Err(MembershipError::Fenced { .. }) => false,
        Err(MembershipError::Store(leaf_store::LeafStoreError::Transport(
            rdma_transport::TransportError::Fenced(_),
        ))) => false,
        Err(_) => match ep.read_word(table.lease_addr(member.tag)) {
            Ok(word) if word == member.lease.renewed().raw() => {
                member.lease = member.lease.renewed();
                true
            }
            Ok(word) => word == member.lease.raw(),
            Err(rdma_transport::TransportError::Fenced(_)) => false,
            Err(_) => true,
        },
    }
}
