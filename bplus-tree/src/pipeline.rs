//! Several operations in flight on one thread, as ROLEX's client runs them (so that the two are
//! compared on equal terms): a [`Pipeline`] of clients, each running one operation at a time,
//! driven by a [`kv_session::Session`] that takes tagged requests and gives back their results
//! as they complete.
//!
//! **Invariant.** Each operation runs on a client of its own — its own endpoint (queue pairs)
//! and its own state (the internal page a scan predicts from) — so an operation's state is never
//! shared with another in flight. Operations of one session yield only while their batch is in
//! flight, while a sibling holds the local lock stripe they wait for, or in a backoff; a session
//! is never dropped with an operation half done (dropping it finishes every operation it
//! started: a write stopped between its lock and its unlock would leave the lock held, and the
//! B+-tree has no recovery of locks).
//!
//! No runtime is involved: a session polls its operations' futures itself, in a loop, and an
//! operation's batch completes when its endpoint is polled.
//!
//! A thread whose session has operations in flight must not meanwhile make synchronous calls on
//! a client of the same compute node ([`crate::Tree`]): such a call blocks on a local lock stripe,
//! and the stripe may be held by one of the session's operations, which goes on only when the
//! session is polled.

use rdma_transport::Endpoint;

pub use kv_session::{Busy, Done, Lane, Reply, Request, Session};

use crate::TreeError;
use crate::client::{Change, Client};
use crate::wait::{self, Waiting};

impl<E: Endpoint> Client<E> {
    /// Runs `request`, waiting for its batches as `waiting` says. Every request has its
    /// synchronous twin on [`Client`]; one of the wrong kind of values for its memory node fails
    /// as that twin does ([`TreeError::WrongValueKind`]).
    pub(crate) async fn run_request(
        &mut self,
        request: Request,
        waiting: Waiting,
    ) -> Result<Reply, TreeError> {
        Ok(match request {
            Request::Get(key) => Reply::Value(self.get_with(key, waiting).await?),
            Request::Insert(key, value) => {
                Reply::Done(self.write_with(key, Change::Insert(value), waiting).await?)
            }
            Request::Update(key, value) => {
                Reply::Done(self.write_with(key, Change::Update(value), waiting).await?)
            }
            Request::Upsert(key, value) => {
                Reply::Done(self.write_with(key, Change::Upsert(value), waiting).await?)
            }
            Request::Delete(key) => {
                Reply::Done(self.write_with(key, Change::Delete, waiting).await?)
            }
            Request::Scan(start, n) => Reply::Rows(self.scan_with(start, n, waiting).await?),
            Request::GetValue(key) => {
                let mut out = Vec::new();
                let found = self.get_value_with(key, &mut out, waiting).await?;
                Reply::Bytes(found.then_some(out))
            }
            Request::InsertValue(key, bytes) => Reply::Done(
                self.write_value_with(key, &bytes, Change::Insert, waiting)
                    .await?,
            ),
            Request::UpdateValue(key, bytes) => Reply::Done(
                self.write_value_with(key, &bytes, Change::Update, waiting)
                    .await?,
            ),
            Request::PutValue(key, bytes) => Reply::Done(
                self.write_value_with(key, &bytes, Change::Upsert, waiting)
                    .await?,
            ),
            Request::ScanValues(start, n) => {
                Reply::ValueRows(self.scan_values_with(start, n, waiting).await?)
            }
        })
    }
}

/// `K` clients that one thread drives together: up to `K` operations in flight (see the
/// module's invariant). Made by [`crate::Tree::pipeline`].
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

    /// Its clients (their counters).
    pub fn clients(&self) -> &[Client<E>] {
        &self.lanes
    }

    /// Its clients, mutably.
    pub fn clients_mut(&mut self) -> &mut [Client<E>] {
        &mut self.lanes
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
    /// use bplus_tree::{BulkLoadConfig, Reply, Request, Tree, TreeConfig, bulk_load};
    /// use bplus_tree::required_pool_bytes;
    /// use rdma_transport::Transport;
    /// use sim_transport::SimTransport;
    ///
    /// let entries: Vec<(u64, u64)> = (0..1_000).map(|k| (k * 10, k * 10)).collect();
    /// let load = BulkLoadConfig::default();
    /// let size = required_pool_bytes(entries.len() as u64, &load, 1_000).next_multiple_of(8);
    /// let memory_node = SimTransport::anonymous(&[size])?;
    /// let mut ep = memory_node.endpoint()?;
    /// bulk_load(&mut ep, memory_node.memory_nodes()[0], entries, &load)?;
    /// let tree = Tree::open(memory_node, TreeConfig::default())?;
    ///
    /// let mut pipeline = tree.pipeline(4)?; // four operations in flight on this thread
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
    ///     // One READ once the leaf's parent is cached (the first GETs fill the cache).
    ///     assert!(done.net.batches >= 1);
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
    type Error = TreeError;

    fn run(
        &mut self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<Reply, TreeError>> + '_ {
        self.run_request(request, Waiting::Posting)
    }

    fn net_stats(&self) -> rdma_transport::Stats {
        Client::net_stats(self)
    }

    /// A spin hint, or a yield in loom models (whose other threads may hold what these
    /// operations wait for).
    fn idle() {
        wait::idle();
    }
}
