//! The store a compute node opens: per memory node, its layout, top-level index and slot views.

use std::sync::Arc;

use crate::sync::MembershipMutex as Mutex;
use crate::sync::thread::JoinHandle;

use leaf_store::{Layout, read_record, read_slot_table};
use rdma_transport::{Endpoint, MemoryNodeInfo, Transport};

use crate::locks::LockTable;
use crate::membership::{self, Members};
use crate::view::{Cell, Directory, SlotCells, SlotView, ViewCell};
use crate::{Client, IndexError, StoreConfig};

/// One memory node as a compute node caches it.
#[derive(Debug)]
pub(crate) struct NodeCache {
    pub(crate) info: MemoryNodeInfo,
    pub(crate) layout: Layout,
    /// Which slot serves a key (reloaded when a record's last key shows a newer slot).
    pub(crate) directory: Cell<Directory>,
    /// Views by slot id.
    pub(crate) slots: Arc<SlotCells>,
    /// This compute node's member tag on the node: the owner its leaf locks carry (0: not
    /// joined).
    pub(crate) tag: u8,
    /// The node's membership table (leaf boxes live there).
    pub(crate) members: leaf_store::members::MemberTable,
    /// Its index in [`Caches::nodes`].
    pub(crate) position: usize,
    /// Its value region's allocator, in a pool with byte values.
    pub(crate) values: Option<Arc<crate::values::NodeValues>>,
    /// The leaves last seen full, by which inserts foresee their splits (none under a cache
    /// budget: the budget goes to views).
    pub(crate) full: Option<crate::full_leaves::FullLeaves>,
}

// The broken protocol variants a loom model may switch on (`crate::broken`); outside loom builds
// none exists.
#[cfg(loom)]
use crate::broken::Broken;
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Broken;

/// The protocol as the library runs it.
fn unbroken() -> Broken {
    #[cfg(loom)]
    {
        Broken::default()
    }
    #[cfg(not(loom))]
    {
        Broken
    }
}

/// Everything the clients of one compute node share.
#[derive(Debug)]
pub(crate) struct Caches {
    pub(crate) config: StoreConfig,
    /// Which protocol steps run in their wrong variant (loom builds only: nothing elsewhere).
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) broken: Broken,
    /// Memory nodes in key order.
    pub(crate) nodes: Vec<NodeCache>,
    /// First key served by each node of `nodes`.
    pub(crate) partition: Vec<u64>,
    pub(crate) locks: Arc<LockTable>,
    pub(crate) members: Arc<Members>,
    /// The lease renewer, stopped and joined when the last client and the store are gone.
    renewer: Mutex<Option<JoinHandle<()>>>,
    /// Leaves allocated for a split that could not use them and that no leaf box could take
    /// back (see [`Store::leaves_forgotten`]).
    pub(crate) leaves_forgotten: crate::sync::atomic::AtomicU64,
    /// What the views and directories may cache, and what they do.
    pub(crate) budget: crate::budget::Budget,
}

impl Drop for Caches {
    fn drop(&mut self) {
        self.members.stop();
        if let Some(renewer) = self
            .renewer
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = renewer.join();
        }
    }
}

impl NodeCache {
    /// Slot `slot`'s cell, if the slot has been used here.
    pub(crate) fn cell(&self, slot: u64) -> Option<&ViewCell> {
        self.slots.get(usize::try_from(slot).ok()?)?.get()
    }

    /// Slot `slot`'s cell, holding `view` if it had none (else `view` is dropped), charged to
    /// `budget`; `None` for a slot beyond the table's capacity.
    ///
    /// Nothing a seeded run schedules happens inside the initialisation: a thread blocked on a
    /// `OnceLock` another thread is initialising waits outside the scheduler, so a sync point in
    /// there hung the simulation. The view is charged before and credited back if another
    /// thread's view got in first.
    pub(crate) fn cell_or_install(
        &self,
        slot: u64,
        view: crate::view::ViewRef,
        budget: &crate::budget::Budget,
    ) -> Option<&ViewCell> {
        let once = self.slots.get(usize::try_from(slot).ok()?)?;
        let charge = budget.charge_view(&view);
        let mut ours = false;
        let cell = once.get_or_init(|| {
            ours = true;
            ViewCell::new(view)
        });
        budget.installed(charge, ours, (self.position, slot));
        Some(cell)
    }
}

impl Caches {
    /// The cell of slot `slot` of the node at position `node`, if that slot has one.
    pub(crate) fn cell_at(&self, (node, slot): (usize, u64)) -> Option<&ViewCell> {
        self.nodes.get(node).and_then(|n| n.cell(slot))
    }

    /// The index in `nodes` of the node serving `key`.
    pub(crate) fn node_of(&self, key: u64) -> usize {
        self.partition
            .partition_point(|&lo| lo <= key)
            .saturating_sub(1)
    }
}

/// What a compute node caches (see [`Store::cache_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Bytes held, as [`Store::cache_bytes`] counts them.
    pub bytes: u64,
    /// The budget they must stay within ([`StoreConfig::cache_budget`]).
    pub budget: Option<u64>,
    /// Model slots known (over all memory nodes).
    pub slots: u64,
    /// Slots whose view holds pivots: a GET reads only the owner's chain.
    pub views_with_pivots: u64,
    /// Slots whose view holds no pivots (lean mode, or shrunk to fit the budget): a GET reads
    /// every candidate chain.
    pub lean_views: u64,
}

impl CacheStats {
    /// Slots with no view held (evicted to fit the budget, or not loaded yet): their record is
    /// read when next used.
    pub fn views_not_held(&self) -> u64 {
        self.slots
            .saturating_sub(self.views_with_pivots + self.lean_views)
    }
}

/// A compute node's handle on a ROLEX store: the cached top-level indexes and slot views of every
/// memory node, shared by all its [`Client`]s (one per thread).
#[derive(Debug)]
pub struct Store<T: Transport> {
    transport: T,
    caches: Arc<Caches>,
}

impl<T: Transport> Store<T>
where
    T::Endpoint: 'static,
{
    /// Attaches to every memory node of `transport` from its superblock, reads every slot's record
    /// and builds the caches. The nodes' key ranges must tile the key space (as [`crate::bootstrap`]
    /// lays them out).
    pub fn open(transport: T, config: StoreConfig) -> Result<Self, IndexError> {
        Self::open_as(transport, config, unbroken())
    }

    /// Loom builds only: [`Store::open`], with the protocol steps `broken` names in their wrong
    /// variant (a model shows it catches them).
    #[cfg(loom)]
    pub fn open_broken(
        transport: T,
        config: StoreConfig,
        broken: crate::broken::Broken,
    ) -> Result<Self, IndexError> {
        Self::open_as(transport, config, broken)
    }

    fn open_as(transport: T, config: StoreConfig, broken: Broken) -> Result<Self, IndexError> {
        if config.max_attempts == 0
            || config.retrain_threshold == 0
            || config.retrain_threshold > 255
        {
            return Err(IndexError::Config(
                "max_attempts must be positive and retrain_threshold in 1..=255".into(),
            ));
        }
        let mut ep = transport.endpoint()?;
        let mut layouts = Vec::new();
        for &info in transport.memory_nodes() {
            layouts.push((info, Layout::attach(&mut ep, info)?));
        }
        layouts.sort_by_key(|(_, l)| l.superblock().key_lo);
        let Some((_, first)) = layouts.first() else {
            return Err(IndexError::Config(
                "the transport reaches no memory node".into(),
            ));
        };
        if first.superblock().key_lo != 0
            || layouts
                .last()
                .is_some_and(|(_, l)| l.superblock().key_hi != u64::MAX)
            || layouts.windows(2).any(|w| {
                w[0].1.superblock().key_hi.checked_add(1) != Some(w[1].1.superblock().key_lo)
            })
        {
            return Err(IndexError::Config(
                "the memory nodes' key ranges do not tile the key space".into(),
            ));
        }
        // Join first, then read the slot tables and records (see `membership::join_all`); and
        // renew the leases from the start, while the records are read: a large pool takes far
        // longer to read than a lease lasts (10^5 records over RDMA), and a store that read
        // first and renewed afterwards was declared dead before its first operation.
        let plain: Vec<Layout> = layouts.iter().map(|&(_, l)| l).collect();
        let joined = membership::join_all(&mut ep, &plain, config.join_members)?;
        let tags: Vec<u8> = joined.iter().map(|(_, m)| m.map_or(0, |m| m.tag)).collect();
        let incarnations: Vec<u64> = joined
            .iter()
            .map(|(_, m)| m.map_or(0, |m| m.lease.incarnation()))
            .collect();
        let cells: Vec<Arc<SlotCells>> = plain
            .iter()
            .map(|layout| {
                Arc::new(
                    (0..layout.slot_capacity())
                        .map(|_| std::sync::OnceLock::new())
                        .collect(),
                )
            })
            .collect();
        let locks = Arc::new(LockTable::new());
        let members = membership::members(joined, cells.clone(), Arc::clone(&locks));
        let renewer = if config.join_members {
            let renewer = membership::spawn_renewer(ep, Arc::clone(&members), config.lease_renewal)
                .map_err(|e| IndexError::Config(format!("starting the lease renewer: {e}")))?;
            Some(renewer)
        } else {
            None
        };
        // From here on a failure stops the renewer, which leaves every memory node.
        let stop = |renewer: Option<JoinHandle<()>>| {
            members.stop();
            if let Some(renewer) = renewer {
                let _ = renewer.join();
            }
        };
        let mut load_ep = match transport.endpoint() {
            Ok(ep) => ep,
            Err(e) => {
                stop(renewer);
                return Err(e.into());
            }
        };
        let mut nodes = Vec::new();
        let budget = crate::budget::Budget::new(config.cache_budget);
        for (i, (&(info, layout), slots)) in layouts.iter().zip(cells).enumerate() {
            let epoch = members.epochs.current();
            match open_node(
                &mut load_ep,
                (i, info, layout),
                &config,
                &budget,
                slots,
                epoch,
            ) {
                Ok(mut node) => {
                    node.tag = tags[i];
                    node.position = i;
                    node.values = layout.values().map(|region| {
                        Arc::new(crate::values::NodeValues::new(
                            region,
                            tags[i],
                            incarnations[i],
                            node.members.epoch_addr(),
                        ))
                    });
                    nodes.push(node);
                }
                Err(e) => {
                    stop(renewer);
                    return Err(e);
                }
            }
        }
        drop(load_ep);
        let partition = nodes.iter().map(|n| n.layout.superblock().key_lo).collect();
        Ok(Self {
            transport,
            caches: Arc::new(Caches {
                config,
                broken,
                nodes,
                partition,
                locks,
                members,
                renewer: Mutex::new(renewer),
                leaves_forgotten: crate::sync::atomic::AtomicU64::new(0),
                budget,
            }),
        })
    }

    /// A client for one thread (its own endpoint: one queue pair per memory node on hardware),
    /// registered with every memory node so that fencing this compute node covers it. At most
    /// 127 clients of one store exist at a time.
    pub fn client(&self) -> Result<Client<T::Endpoint>, IndexError> {
        let mut ep = self.transport.endpoint()?;
        let index = self.caches.members.take_index()?;
        match self.caches.members.register(&mut ep, index, &[]) {
            Ok(ids) => Ok(Client::new(ep, Arc::clone(&self.caches), index, ids)),
            Err(e) => {
                self.caches.members.release_index(index);
                Err(e)
            }
        }
    }

    /// `depth` clients driven together by one thread: up to `depth` operations in flight
    /// ([`kv_session::Pipeline::session`]). Each is a client of its own (see [`Store::client`]).
    ///
    /// ```
    /// # #[cfg(loom)] fn main() {}
    /// # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use index_core::{Reply, Request, Store, StoreConfig, bootstrap};
    /// use leaf_store::{BulkLoadConfig, required_pool_bytes};
    /// use sim_transport::SimTransport;
    ///
    /// let entries: Vec<(u64, u64)> = (0..1_000).map(|k| (k * 10, k * 10)).collect();
    /// let load = BulkLoadConfig::default();
    /// let size = required_pool_bytes(entries.len() as u64, &load, 1_000).next_multiple_of(8);
    /// let memory_node = SimTransport::anonymous(&[size])?;
    /// bootstrap(&memory_node, entries, &load)?;
    /// let store = Store::open(memory_node, StoreConfig::default())?;
    ///
    /// let mut pipeline = store.pipeline(4)?; // four operations in flight on this thread
    /// let mut session = pipeline.session();
    /// let mut requests = (0..100u64).map(|i| (i, Request::Get(i * 10)));
    /// let mut found = 0;
    /// loop {
    ///     // Keep every client busy, then take one result.
    ///     while session.has_room() {
    ///         let Some((tag, request)) = requests.next() else { break };
    ///         session.submit(tag, request).expect("a client is free");
    ///     }
    ///     let Some(done) = session.wait() else { break };
    ///     assert_eq!(done.result?, Reply::Value(Some(done.tag * 10)));
    ///     assert_eq!(done.net.batches, 1, "a GET is one round trip");
    ///     found += 1;
    /// }
    /// assert_eq!(found, 100);
    /// # Ok(()) }
    /// ```
    pub fn pipeline(&self, depth: usize) -> Result<crate::Pipeline<T::Endpoint>, IndexError> {
        if depth == 0 {
            return Err(IndexError::Config(
                "a pipeline runs at least one operation at a time".into(),
            ));
        }
        let lanes = (0..depth)
            .map(|_| self.client())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(crate::Pipeline::new(lanes))
    }

    /// Whether a memory node declared this compute node dead and fenced it (see
    /// [`IndexError::Fenced`]): open the store again to go on.
    pub fn is_fenced(&self) -> bool {
        self.caches.members.is_fenced()
    }

    /// Fault drill: stops renewing this compute node's leases without leaving, so that memory
    /// nodes watching leases declare it dead once they lapse, fence it and recover its locks —
    /// what happens when the process dies. Its clients then fail with [`IndexError::Fenced`].
    pub fn stop_renewing(&self) {
        self.caches.members.halt();
    }

    /// Leaf locks this compute node's operations may have left held that it has not recovered
    /// yet ([`IndexError::LockMayRemain`]; the lease renewer recovers them once the memory node
    /// has fenced the failed connection). While one waits, writers of that one leaf wait, and
    /// the store does not leave its memberships when dropped (the memory node recovers the lock
    /// once the lease lapses).
    pub fn unrecovered_locks(&self) -> usize {
        self.caches.members.retired_count()
    }

    /// Value blocks whose write failed in its last batch (the block may be named by a leaf or
    /// not): this compute node never hands them out again (ARCHITECTURE §12).
    pub fn values_forgotten(&self) -> u64 {
        self.caches
            .nodes
            .iter()
            .filter_map(|n| n.values.as_ref())
            .map(|v| v.forgotten())
            .sum()
    }

    /// Value blocks this compute node handed out again after they were freed (seen free in its
    /// chunks and past the memory node's reuse horizon).
    pub fn value_blocks_reused(&self) -> u64 {
        self.caches
            .nodes
            .iter()
            .filter_map(|n| n.values.as_ref())
            .map(|v| v.reused())
            .sum()
    }

    /// Leaves this compute node's clients allocated for splits that could not use them and then
    /// could not park in a leaf box (the box full, an error, the client retired): nobody holds
    /// them, and a memory node's orphan sweep frees them. Nothing else leaks a leaf while no
    /// fault strikes: the seeded simulation checks that its sweeps free exactly these.
    pub fn leaves_forgotten(&self) -> u64 {
        self.caches
            .leaves_forgotten
            .load(crate::sync::atomic::Ordering::Relaxed)
    }

    /// This compute node's member tag on each memory node, in key order (0: not joined).
    pub fn member_tags(&self) -> Vec<u8> {
        self.caches.nodes.iter().map(|n| n.tag).collect()
    }

    /// Gives `client` a fresh endpoint (on hardware a new queue pair through the bootstrap) after
    /// its own broke ([`IndexError::is_connection_lost`]). A client whose operation reported
    /// [`IndexError::LockMayRemain`] must be given one before it goes on: the store recovers that
    /// lock in the background (the memory node first fences the old connection, so nothing it
    /// posted lands afterwards), and the client continues under a new connection index meanwhile.
    /// The client's counters carry on.
    pub fn reconnect(&self, client: &mut Client<T::Endpoint>) -> Result<(), IndexError> {
        let mut ep = self.transport.endpoint()?;
        if client.is_retired() {
            // Its index waits for the recovery of the lock it may hold: go on under a new one.
            let index = self.caches.members.take_index()?;
            return match self.caches.members.register(&mut ep, index, &[]) {
                Ok(ids) => {
                    client.replace_retired(ep, index, ids);
                    Ok(())
                }
                Err(e) => {
                    self.caches.members.release_index(index);
                    Err(e)
                }
            };
        }
        let ids = self.caches.members.register(
            &mut ep,
            client.connection_index(),
            client.registered_ids(),
        )?;
        client.replace_endpoint(ep, ids);
        Ok(())
    }

    /// What the clients share (tests look inside).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn caches(&self) -> &Arc<Caches> {
        &self.caches
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.caches.config
    }

    /// The layouts of the memory nodes, in key order.
    pub fn layouts(&self) -> Vec<Layout> {
        self.caches.nodes.iter().map(|n| n.layout).collect()
    }

    /// Bytes of metadata this compute node caches now: top-level indexes and slot views
    /// (models, LT knowledge, pivots in pivots mode, known SLT entries), without allocator
    /// overhead.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_stats().bytes
    }

    /// What this compute node caches now, by kind of view, and its budget.
    pub fn cache_stats(&self) -> CacheStats {
        let mut stats = CacheStats {
            bytes: 0,
            budget: self.caches.config.cache_budget,
            ..CacheStats::default()
        };
        for n in &self.caches.nodes {
            let directory = n.directory.load();
            stats.bytes += directory.cache_bytes();
            stats.bytes += n.full.as_ref().map_or(0, |f| f.cache_bytes());
            stats.slots += directory.count;
            for cell in n.slots.iter().filter_map(|c| c.get()) {
                let view = cell.load();
                stats.bytes += view.cache_bytes();
                if view.evicted {
                    continue;
                }
                match view.pivots {
                    Some(_) => stats.views_with_pivots += 1,
                    None => stats.lean_views += 1,
                }
            }
        }
        stats
    }

    /// Model slots over all memory nodes, as far as this compute node knows (retraining splits
    /// slots; a compute node learns of new ones when it routes a key to them).
    pub fn slots(&self) -> u64 {
        self.caches
            .nodes
            .iter()
            .map(|n| n.directory.load().count)
            .sum()
    }
}

/// Reads memory node `info` (at `position` in key order)'s slot table and every record it names into `slots`, as views
/// validated in local epoch `epoch` (read before the slot table: the renewer may move on while
/// the records are read, and their views then reload when first used). Under a cache budget,
/// views lose their pivots once those no longer fit, and once nothing more fits the remaining
/// slots are left to be loaded when first used.
fn open_node<E: Endpoint>(
    ep: &mut E,
    (position, info, layout): (usize, MemoryNodeInfo, Layout),
    config: &StoreConfig,
    budget: &crate::budget::Budget,
    slots: Arc<SlotCells>,
    epoch: u64,
) -> Result<NodeCache, IndexError> {
    let table = read_slot_table(ep, &layout)?;
    let allocated = ep
        .read_word(layout.alloc_num_addr())?
        .min(layout.leaf_capacity());
    let directory = Directory::new(&table)
        .map_err(|e| IndexError::Config(format!("memory node {}: slot keys: {e}", info.id)))?;
    budget.charge(directory.cache_bytes());
    for (slot, &(addr, _)) in table.iter().enumerate() {
        if budget.full() {
            break;
        }
        // While a large pool is read, a slot may be retrained and its old record reclaimed and
        // overwritten (the renewer announces epochs meanwhile, and the open is no operation):
        // such a slot's view is left to be loaded when first used.
        if let Ok(record) = read_record(ep, &layout, slot as u64, addr) {
            let mut view = SlotView::from_record(record, addr, config.cache_mode, epoch);
            budget.fit(&mut view);
            if !budget.fits(view.cache_bytes()) {
                break;
            }
            let charge = budget.charge_view(&view);
            let ours = slots[slot].set(ViewCell::new(view)).is_ok();
            budget.installed(charge, ours, (position, slot as u64));
        }
    }
    Ok(NodeCache {
        info,
        layout,
        directory: Cell::new(directory),
        slots,
        tag: 0,
        members: leaf_store::members::MemberTable::new(&layout),
        position: 0,
        values: None,
        full: config
            .cache_budget
            .is_none()
            .then(|| crate::full_leaves::FullLeaves::new(allocated, layout.leaf_capacity())),
    })
}
