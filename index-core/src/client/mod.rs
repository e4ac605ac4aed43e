//! The compute-node client: every operation with one-sided verbs.
//!
//! One file per protocol: [`read`] (GET, SCAN and cache freshness), [`write`] (the leaf-lock
//! protocol of INSERT, UPDATE, UPSERT and DELETE), [`split`] (structural changes: splits and
//! unlinks, which bump the record's header), [`release`] (what a write holds when a verb fails),
//! [`redo`] (where a leaf longer than one packet goes before it is rewritten in place).

mod batch;
#[cfg(loom)]
pub mod broken;
mod cache;
mod op;
mod read;
mod redo;
mod release;
mod scan;
mod split;
mod value;
mod value_io;
mod wait;
mod write;

pub(crate) use wait::{Waiting, block_on};
pub(crate) use write::Change;
use write::Locked;

use std::sync::Arc;

use leaf_store::LeafStoreError;
use rdma_transport::{Endpoint, Stats, Verb};

use crate::IndexError;
use crate::stats::{OpKind, OpStats};
use crate::store::Caches;

/// One thread's handle on a [`crate::Store`]: its own endpoint, the shared caches, and counters per
/// operation type. Operations take `&mut self`; open one client per thread.
#[derive(Debug)]
pub struct Client<E: Endpoint> {
    ep: E,
    /// The store's shared state. Set once, in [`Client::new`], and never replaced: an
    /// operation borrows it apart from `self` for its whole length ([`Client::op_caches`]).
    caches: Arc<Caches>,
    stats: OpStats,
    /// Scratch space a lock batch reads into (reused for its capacity; holds nothing between
    /// operations).
    buf: Vec<u8>,
    /// This client's leaf box on each memory node (store key order), as last read.
    boxes: Vec<LeafBox>,
    enqueue_failures: u64,
    /// Times a key routed past its record's last key made this client read the slot directory
    /// again (slots split by retraining).
    directory_reloads: u64,
    /// GETs whose first READ found no leaf claiming the key (see [`Client::claim_misses`]).
    claim_misses: u64,
    /// Writes whose lock batch found the record changed since the cached view.
    write_rereads: u64,
    /// Counters of endpoints this client had before a reconnect.
    retired_stats: Stats,
    /// The client's connection index in its store's memberships.
    connection_index: u64,
    /// The connection ids registered for it, per memory node (0: not joined).
    registered: Vec<u64>,
    /// The local epoch the running operation began in (see `crate::membership`).
    op_epoch: u64,
    /// Its entry in the store's list of running operations.
    active: Arc<crate::epoch::ActiveEpoch>,
    /// Set when an operation reported a lock that may remain: the connection index is retired
    /// (the store recovers the lock; see `crate::self_recovery`) and the endpoint is not used
    /// again until [`crate::Store::reconnect`] gives the client a new one.
    retired: bool,
    /// Value blocks read again because their key, length or checksum did not match.
    value_retries: u64,
    /// How the operation running now waits for its batches (set as it starts: a client runs one
    /// operation at a time; a thread runs several clients for several in flight).
    waiting: Waiting,
}

impl<E: Endpoint> Drop for Client<E> {
    fn drop(&mut self) {
        if self.retired {
            // The index belongs to the store's recovery now.
            return;
        }
        let members = std::sync::Arc::clone(&self.caches.members);
        members.unregister(&mut self.ep, self.connection_index, &self.registered);
        members.release_index(self.connection_index);
    }
}

impl<E: Endpoint> Client<E> {
    /// The store's caches for the length of an operation, borrowed apart from `self` so that
    /// the operation can go on calling `&mut self` methods, without a counted clone: every client
    /// of a store shares the count, so a clone per operation was a contended atomic on every
    /// thread's path (a tenth of a GET's time at two threads).
    ///
    /// # Safety
    /// The caller uses the reference only while it holds its borrow of this client (an
    /// operation's future, which borrows the client for its whole life).
    unsafe fn op_caches<'c>(&self) -> &'c Caches {
        // SAFETY: `self.caches` is set in `Client::new` and never replaced, so the `Caches` it
        // points to lives as long as this client holds its count, which it does while the
        // caller's borrow lasts (the contract above).
        unsafe { &*Arc::as_ptr(&self.caches) }
    }

    /// At an operation's end: puts the leaves this client allocated and could not use into empty
    /// slots of its leaf box (by CAS), where its later splits, or recovery, find them; a leaf no
    /// empty slot takes, or whose CAS fails, is forgotten, and the memory node's orphan sweep
    /// reclaims it. A spare is never kept across operations: the sweep frees a leaf nobody names
    /// once every operation that was running when it first looked has ended (ARCHITECTURE §7,
    /// "Orphaned leaves"), so one kept longer could be handed out twice. (A client dropped with
    /// spares in its memory leaked them: the seeded simulation found it.)
    ///
    /// Returns the error of a CAS whose completion was lost (it may still land: the caller
    /// retires the client before the operation ends).
    fn park_spare_leaves(&mut self, spares: Vec<(u16, u64)>) -> Option<IndexError> {
        let forgotten = |client: &Self, leaves: &[(u16, u64)]| {
            client
                .caches
                .leaves_forgotten
                .fetch_add(leaves.len() as u64, crate::sync::atomic::Ordering::Relaxed);
            for &(node_id, leaf) in leaves {
                leaf_store::ghost::forget(node_id, leaf);
            }
        };
        if self.retired {
            // Its endpoint is not used again: forgotten.
            forgotten(self, &spares);
            return None;
        }
        for (at_spare, &(node_id, leaf)) in spares.iter().enumerate() {
            let Some(node) = self.caches.nodes.iter().find(|n| n.info.id == node_id) else {
                forgotten(self, &spares[at_spare..=at_spare]);
                continue;
            };
            if node.tag == 0 {
                forgotten(self, &spares[at_spare..=at_spare]);
                continue;
            }
            let word = leaf_store::members::leaf_word(leaf);
            let mut parked = false;
            for slot in 0..leaf_store::members::LEAF_BOX {
                let at = node.members.box_addr(node.tag, self.connection_index, slot);
                match self.ep.cas(at, 0, word) {
                    Ok(0) => {
                        let lbox = &mut self.boxes[node.position];
                        if let Some(local) = lbox.slots.get_mut(slot as usize) {
                            *local = word;
                        }
                        leaf_store::ghost::put(node_id, leaf);
                        parked = true;
                        break;
                    }
                    Err(e) => {
                        let e = IndexError::from(e);
                        if e.is_connection_lost() {
                            // This one (its CAS may yet land: then it is in the box, and the
                            // count is one too high) and the rest.
                            forgotten(self, &spares[at_spare..]);
                            return Some(e);
                        }
                        break;
                    }
                    Ok(_) => {}
                }
            }
            if !parked {
                forgotten(self, &spares[at_spare..=at_spare]);
            }
        }
        None
    }
}

/// A client's view of its leaf box on one memory node ([`leaf_store::members`]): leaves the
/// memory node granted it, for its splits. Read (one more READ in a lock batch) only when every
/// slot is used up, at most once a millisecond.
#[derive(Debug, Clone, Default)]
struct LeafBox {
    /// The box's words as last read ([`leaf_store::members::leaf_word`]; 0: empty or used).
    slots: Vec<u64>,
    read_at: Option<crate::sync::time::Instant>,
    /// Leaves a split took from the box whose batch failed: it may have linked them without its
    /// box clear landing, so they are never taken from the box again (recovery sorts them out
    /// when this compute node goes).
    suspect: Vec<u64>,
}

impl LeafBox {
    /// How long an empty box is trusted before it is read again.
    const REREAD: crate::sync::time::Duration = crate::sync::time::Duration::from_millis(1);

    /// A granted leaf for a split: its box slot and number. With `redo` (leaves longer than a
    /// packet), the slot [`leaf_store::redo::REDO_SLOT`] holds the client's redo leaf, never
    /// taken.
    fn leaf(&self, redo: bool) -> Option<(u64, u64)> {
        self.leaf_except(redo, None)
    }

    /// [`Self::leaf`], but never `busy` (the leaf this write uses as its redo leaf).
    fn leaf_except(&self, redo: bool, busy: Option<u64>) -> Option<(u64, u64)> {
        self.slots.iter().enumerate().find_map(|(i, &word)| {
            leaf_store::members::word_leaf(word)
                .filter(|leaf| !self.suspect.contains(leaf) && Some(*leaf) != busy)
                .filter(|_| !(redo && i as u64 == leaf_store::redo::REDO_SLOT))
                .map(|leaf| (i as u64, leaf))
        })
    }

    /// The redo leaf, if the box holds one (with `redo`).
    fn redo_leaf(&self) -> Option<u64> {
        let word = *self.slots.get(leaf_store::redo::REDO_SLOT as usize)?;
        leaf_store::members::word_leaf(word)
    }

    /// Whether the lock batch should read the box.
    fn wants_read(&self, redo: bool) -> bool {
        (self.leaf(redo).is_none() || (redo && self.redo_leaf().is_none()))
            && self.read_at.is_none_or(|at| at.elapsed() >= Self::REREAD)
    }
}

impl<E: Endpoint> Client<E> {
    pub(crate) fn new(
        ep: E,
        caches: Arc<Caches>,
        connection_index: u64,
        registered: Vec<u64>,
    ) -> Self {
        let nodes = caches.nodes.len();
        let active = caches.members.epochs.active_entry(connection_index);
        Self {
            ep,
            caches,
            stats: OpStats::default(),
            buf: Vec::new(),
            boxes: vec![LeafBox::default(); nodes],
            enqueue_failures: 0,
            directory_reloads: 0,
            claim_misses: 0,
            write_rereads: 0,
            retired_stats: Stats::default(),
            connection_index,
            registered,
            op_epoch: crate::epoch::FIRST_EPOCH,
            active,
            retired: false,
            value_retries: 0,
            waiting: Waiting::Blocking,
        }
    }

    /// Retires this client's connection index if `e` says a lock may remain, or that a batch
    /// lost its completion and may still be executing (see `crate::self_recovery`). A write
    /// calls it while it still holds the lock's local stripe, so the store's recovery, which
    /// takes that stripe, always sees every index that may hold the lock; every operation calls
    /// it before it leaves the active list, so the renewer announces no later epoch until the
    /// connection is fenced.
    pub(crate) fn retire_on(&mut self, e: &IndexError) {
        if self.retired {
            return;
        }
        let lock = match *e {
            IndexError::LockMayRemain {
                node, slot, leaf, ..
            } => {
                let Some(position) = self.caches.nodes.iter().position(|n| n.info.id == node)
                else {
                    return;
                };
                Some(crate::self_recovery::MaybeHeld {
                    node: position,
                    slot,
                    leaf,
                })
            }
            IndexError::Transport(
                rdma_transport::TransportError::Broken(_)
                | rdma_transport::TransportError::Connection(_),
            ) => None,
            _ => return,
        };
        self.retired = self.caches.members.retire(
            self.connection_index,
            self.registered.clone(),
            lock,
            self.op_epoch,
        );
    }

    /// `result`, having retired this client's index if it says a lock may remain
    /// ([`Self::retire_on`]); for a write's steps, called while the stripe is held.
    pub(crate) fn retiring<T>(&mut self, result: Result<T, IndexError>) -> Result<T, IndexError> {
        if let Err(e) = &result {
            self.retire_on(e);
        }
        result
    }

    /// Whether the client's connection index was retired (see [`crate::Store::reconnect`]).
    pub(crate) fn is_retired(&self) -> bool {
        self.retired
    }

    /// Goes on under connection index `index` with endpoint `ep` (registered as `registered`),
    /// leaving its retired index to the store's recovery. Counters carry on.
    pub(crate) fn replace_retired(&mut self, ep: E, index: u64, registered: Vec<u64>) {
        self.replace_endpoint(ep, registered);
        self.connection_index = index;
        self.active = self.caches.members.epochs.active_entry(index);
        self.boxes = vec![LeafBox::default(); self.caches.nodes.len()];
        self.retired = false;
    }

    pub(crate) fn registered_ids(&self) -> &[u64] {
        &self.registered
    }

    pub(crate) fn connection_index(&self) -> u64 {
        self.connection_index
    }

    /// Counters per operation type since the client was created.
    pub fn stats(&self) -> &OpStats {
        &self.stats
    }

    /// Swaps in a fresh endpoint, registered as `registered`; counters carry on (see
    /// [`crate::Store::reconnect`]).
    pub(crate) fn replace_endpoint(&mut self, ep: E, registered: Vec<u64>) {
        let carried = self.ep.stats();
        self.ep = ep;
        self.registered = registered;
        self.retired_stats += carried;
    }

    /// The client's endpoint (its counters; fault injection in tests).
    pub fn endpoint_mut(&mut self) -> &mut E {
        &mut self.ep
    }

    /// Value blocks this client read again through their leaf because the block's key, length
    /// or checksum did not match the reference (ARCHITECTURE §12).
    pub fn value_retries(&self) -> u64 {
        self.value_retries
    }

    /// Times this client found a slot directory stale (a key past its record's last key: the
    /// slot had been split) and read the slot table again.
    pub fn directory_reloads(&self) -> u64 {
        self.directory_reloads
    }

    /// GETs (byte-value GETs included) whose first READ, of the cached chain's leaves alone,
    /// found no valid leaf claiming the key, and which then read the leaves again with the
    /// record's header word: one round trip more than a GET needs (ARCHITECTURE §6).
    pub fn claim_misses(&self) -> u64 {
        self.claim_misses
    }

    /// Writes whose lock batch found the record's header changed since the cached view was
    /// built (a split or unlink of another chain, or a retraining), and which then read the
    /// tables and their chain again under the lock: two round trips more (ARCHITECTURE §6).
    pub fn write_rereads(&self) -> u64 {
        self.write_rereads
    }

    /// The endpoint's raw counters.
    pub fn net_stats(&self) -> Stats {
        self.retired_stats + self.ep.stats()
    }

    /// Times a slot that reached the retraining threshold could not be queued (transport errors
    /// while queueing; the write itself had completed).
    pub fn enqueue_failures(&self) -> u64 {
        self.enqueue_failures
    }

    /// Runs `op` as one operation of kind `kind` ([`Self::begin`], [`Self::end`]).
    async fn counted<R>(
        &mut self,
        kind: OpKind,
        waiting: Waiting,
        op: impl AsyncFnOnce(&mut Self) -> Result<R, IndexError>,
    ) -> Result<R, IndexError> {
        let begun = self.begin(waiting)?;
        let result = op(self).await;
        self.end(begun, kind, result)
    }

    /// Starts an operation waiting as `waiting` says: refused if the client is fenced or
    /// retired; else registered as running in the local epoch until [`Self::end`] (or the drop
    /// of what this returns, on a panic).
    #[inline(always)]
    fn begin<'c>(&mut self, waiting: Waiting) -> Result<Begun<'c>, IndexError> {
        self.waiting = waiting;
        if self.caches.members.is_fenced() || self.retired {
            return Err(self.refusal());
        }
        self.op_epoch = self.caches.members.epochs.enter(&self.active);
        // SAFETY: `Begun` is private, and ended by this client's `end` within the operation,
        // which borrows `self` throughout.
        let caches = unsafe { self.op_caches() };
        Ok(Begun {
            // Left on every path, a panic included (a client stuck "running" would hold every
            // memory node's reclamation back). Borrowed, not counted: no atomic but the leave.
            running: Running(caches.members.epochs.entry(self.connection_index)),
            before: self.ep.stats(),
        })
    }

    /// Why a fenced or retired client refuses an operation.
    #[cold]
    fn refusal(&self) -> IndexError {
        if self.caches.members.is_fenced() {
            return self.caches.members.fenced_error();
        }
        IndexError::Transport(rdma_transport::TransportError::Broken(
            "an operation of this client lost a completion or may have left a leaf lock held \
             (the store fences its connection and recovers the lock): give the client a new \
             endpoint with Store::reconnect"
                .into(),
        ))
    }

    /// Ends the operation `begun` with `result`, counting what it used as one of kind `kind`.
    #[inline(always)]
    fn end<R>(
        &mut self,
        begun: Begun<'_>,
        kind: OpKind,
        result: Result<R, IndexError>,
    ) -> Result<R, IndexError> {
        // Retired before the operation leaves the active list: a batch whose completion was lost
        // may still land, and the renewer must not announce a later epoch until it cannot.
        // (Writes retire under their stripe; this is the net for every other path.)
        if let Err(e) = &result {
            self.retire_on(e);
        }
        let Begun { running, before } = begun;
        drop(running);
        let used = self.ep.stats() - before;
        self.stats.record(kind, used);
        result.map_err(|e| match e {
            IndexError::Transport(rdma_transport::TransportError::Fenced(node)) => {
                IndexError::Fenced { node }
            }
            e => e,
        })
    }

    /// The value of `key`, if present. One round trip with a fresh cache.
    pub fn get(&mut self, key: u64) -> Result<Option<u64>, IndexError> {
        wait::blocking!(self.get_with(key, Waiting::Blocking))
    }

    /// Inserts `key` with `value`; `Ok(false)` (and no change) if the key is present.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        wait::blocking!(self.write_with(key, Change::Insert(value), Waiting::Blocking))
    }

    /// Sets the value of a present `key`; `Ok(false)` if absent.
    pub fn update(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        wait::blocking!(self.write_with(key, Change::Update(value), Waiting::Blocking))
    }

    /// Inserts or updates `key`; `Ok(true)` if it was inserted.
    pub fn upsert(&mut self, key: u64, value: u64) -> Result<bool, IndexError> {
        wait::blocking!(self.write_with(key, Change::Upsert(value), Waiting::Blocking))
    }

    /// Deletes `key`, whatever its kind of value; `Ok(false)` if absent.
    pub fn delete(&mut self, key: u64) -> Result<bool, IndexError> {
        wait::blocking!(self.write_with(key, Change::Delete, Waiting::Blocking))
    }

    /// Up to `n` entries with keys ≥ `start`, in key order, without duplicates; continues across
    /// model slots and memory nodes.
    pub fn scan(&mut self, start: u64, n: usize) -> Result<Vec<(u64, u64)>, IndexError> {
        wait::blocking!(self.scan_with(start, n, Waiting::Blocking))
    }

    /// [`Self::get`], waiting as `waiting` says.
    pub(crate) async fn get_with(
        &mut self,
        key: u64,
        waiting: Waiting,
    ) -> Result<Option<u64>, IndexError> {
        self.check_u64_pool(key)?;
        let begun = self.begin(waiting)?;
        let result = self.get_inner(key).await;
        self.end(begun, OpKind::Get, result)
    }

    /// An insert, update, upsert or delete of a `u64` value, waiting as `waiting` says.
    pub(crate) async fn write_with(
        &mut self,
        key: u64,
        change: Change,
        waiting: Waiting,
    ) -> Result<bool, IndexError> {
        if !matches!(change, Change::Delete) {
            self.check_u64_pool(key)?;
        }
        let kind = match change {
            Change::Insert(_) => OpKind::Insert,
            Change::Update(_) => OpKind::Update,
            Change::Upsert(_) => OpKind::Upsert,
            Change::Delete => OpKind::Delete,
        };
        let begun = self.begin(waiting)?;
        // The write's state ([`op::WriteOp`]), carried along its steps and concluded here.
        let mut op = op::WriteOp::default();
        let result = self.write_in(&mut op, key, change).await;
        let result = self.conclude(op, result);
        self.end(begun, kind, result)
    }

    /// [`Self::scan`], waiting as `waiting` says.
    pub(crate) async fn scan_with(
        &mut self,
        start: u64,
        n: usize,
        waiting: Waiting,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
        self.check_u64_pool(start)?;
        self.counted(OpKind::Scan, waiting, async |c| {
            c.scan_inner(start, n).await
        })
        .await
    }
}

/// An operation begun ([`Client::begin`]) and not yet ended.
struct Begun<'c> {
    running: Running<'c>,
    /// The endpoint's counters when it began.
    before: Stats,
}

/// An operation registered as running in its local epoch (its client's entry); leaves when
/// dropped.
struct Running<'c>(&'c crate::epoch::ActiveEpoch);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// A read's retries of data that was changing under it (a leaf a writer is WRITEing, a view
/// older than its record). Each retry pauses: spins, then yields the processor, never a sleep
/// ([`crate::backoff::Backoff::pause_awake`]; in posting mode after a yield to the thread's other
/// operations, so that a session whose operations all wait so does not spin). The read gives
/// up, with `TooManyRetries(retries)`, only once it has retried `max_attempts` times *and*
/// `wait_limit` has passed since its first retry: where processes share memory, a writer
/// descheduled in the middle of its WRITE leaves a leaf torn longer than any count of attempts
/// lasts on an idle processor. Nothing is read of the clock until a first retry.
pub(super) struct ReadRetries {
    retries: u32,
    max_attempts: u32,
    limit: std::time::Duration,
    backoff: Option<crate::backoff::Backoff>,
}

impl ReadRetries {
    pub(super) fn new(config: &crate::StoreConfig) -> Self {
        Self {
            retries: 0,
            max_attempts: config.max_attempts,
            limit: config.wait_limit,
            backoff: None,
        }
    }

    /// The pause before one more attempt, or why the read gives up.
    pub(super) async fn again(&mut self, waiting: Waiting) -> Result<(), IndexError> {
        self.retries = self.retries.saturating_add(1);
        let limit = self.limit;
        let backoff = self
            .backoff
            .get_or_insert_with(|| crate::backoff::Backoff::new(limit));
        if self.retries >= self.max_attempts && backoff.expired() {
            return Err(IndexError::TooManyRetries(self.retries));
        }
        if waiting == Waiting::Posting {
            wait::yield_now().await;
        }
        backoff.pause_awake();
        Ok(())
    }
}

fn check_unlocked(verbs: &[Verb<'_>]) -> Result<(), IndexError> {
    match verbs.last().and_then(Verb::cas_succeeded) {
        Some(true) => Ok(()),
        _ => {
            Err(LeafStoreError::CorruptLeaf("released an LT entry this client did not hold").into())
        }
    }
}
