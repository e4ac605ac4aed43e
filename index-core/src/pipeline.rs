//! Several operations in flight on one thread: a [`Pipeline`] of clients, each running one
//! operation at a time, driven by a [`kv_session::Session`] that takes tagged requests and
//! gives back their results as they complete (ARCHITECTURE §6, "Operations in flight").
//!
//! **Invariant.** Each operation runs on a client of its own — its own endpoint (queue pairs),
//! connection index, leaf box and entry in the list of running operations — so an operation's
//! state is never shared with another in flight, and a failure (a lost completion, a lock that
//! may remain) retires only the connection of the operation it happened to, as it would on a
//! thread of its own. Operations of one session yield only while their batch is in flight or
//! while a sibling holds what they wait for (a lock stripe), and a session is never dropped
//! with an operation half done: dropping it finishes every operation it started.
//!
//! No runtime is involved: a session polls its operations' futures itself, in a loop, and an
//! operation's batch completes when its endpoint is polled. The same futures run on any
//! executor through [`crate::AsyncClient`].

use rdma_transport::Endpoint;

pub use kv_session::{Busy, Done, Lane, Reply, Request, Session};

use crate::IndexError;
use crate::client::{Change, Client, Waiting};

impl<E: Endpoint> Client<E> {
    /// Runs `request`, waiting for its batches as `waiting` says.
    pub(crate) async fn run_request(
        &mut self,
        request: Request,
        waiting: Waiting,
    ) -> Result<Reply, IndexError> {
        Ok(match request {
            Request::Get(key) => Reply::Value(self.get_with(key, waiting).await?),
            Request::Insert(key, value) => {
                Reply::Done(Box::pin(self.write_with(key, Change::Insert(value), waiting)).await?)
            }
            Request::Update(key, value) => {
                Reply::Done(Box::pin(self.write_with(key, Change::Update(value), waiting)).await?)
            }
            Request::Upsert(key, value) => {
                Reply::Done(Box::pin(self.write_with(key, Change::Upsert(value), waiting)).await?)
            }
            Request::Delete(key) => {
                Reply::Done(Box::pin(self.write_with(key, Change::Delete, waiting)).await?)
            }
            Request::Scan(start, n) => {
                Reply::Rows(Box::pin(self.scan_with(start, n, waiting)).await?)
            }
            Request::GetValue(key) => {
                let mut out = Vec::new();
                let found = Box::pin(self.get_value_with(key, &mut out, waiting)).await?;
                Reply::Bytes(found.then_some(out))
            }
            Request::InsertValue(key, bytes) => Reply::Done(
                Box::pin(self.write_value_with(key, &bytes, Change::Insert, waiting)).await?,
            ),
            Request::UpdateValue(key, bytes) => Reply::Done(
                Box::pin(self.write_value_with(key, &bytes, Change::Update, waiting)).await?,
            ),
            Request::PutValue(key, bytes) => Reply::Done(
                Box::pin(self.write_value_with(key, &bytes, Change::Upsert, waiting)).await?,
            ),
            Request::ScanValues(start, n) => {
                Reply::ValueRows(Box::pin(self.scan_values_with(start, n, waiting)).await?)
            }
        })
    }
}

/// `K` clients that one thread drives together: up to `K` operations in flight (see the
/// module's invariant). Made by [`crate::Store::pipeline`].
#[derive(Debug)]
pub struct Pipeline<E: Endpoint> {
    lanes: Vec<Client<E>>,
}

impl<E: Endpoint> Pipeline<E> {
    /// A pipeline of `lanes` (at least one).
    pub fn new(lanes: Vec<Client<E>>) -> Self {
        Self { lanes }
    }

    /// How many operations it runs at once.
    pub fn depth(&self) -> usize {
        self.lanes.len()
    }

    /// Its clients (their counters; [`crate::Store::reconnect`] for one that was retired).
    pub fn clients_mut(&mut self) -> &mut [Client<E>] {
        &mut self.lanes
    }

    /// Its clients.
    pub fn clients(&self) -> &[Client<E>] {
        &self.lanes
    }

    /// Gives the clients back.
    pub fn into_clients(self) -> Vec<Client<E>> {
        self.lanes
    }

    /// A session: submit tagged requests, take their results as they complete.
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
    pub fn session<'p, T: 'p>(&'p mut self) -> Session<'p, Client<E>, T> {
        kv_session::session(&mut self.lanes)
    }
}

/// A client as a lane of a [`Session`]: its operations post their batches and yield.
impl<E: Endpoint> Lane for Client<E> {
    type Error = IndexError;

    fn run(
        &mut self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Reply, IndexError>> + '_ {
        self.run_request(request, Waiting::Posting)
    }

    fn net_stats(&self) -> rdma_transport::Stats {
        Client::net_stats(self)
    }

    /// A spin hint, or a yield where the scheduler decides who runs (loom models, seeded runs),
    /// whose other threads may hold what these operations wait for.
    fn idle() {
        if cfg!(loom) || cfg!(feature = "simulation") {
            crate::sync::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
