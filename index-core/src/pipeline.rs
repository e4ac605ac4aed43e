//! Several operations in flight on one thread: a [`Pipeline`] of clients, each running one
//! operation at a time, driven by a [`Session`] that takes tagged [`Request`]s and gives back
//! their results as they complete (ARCHITECTURE §6, "Operations in flight").
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

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use rdma_transport::Endpoint;

use crate::IndexError;
use crate::client::{Change, Client, Waiting};

/// One operation, as a [`Session`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// [`Client::get`].
    Get(u64),
    /// [`Client::insert`].
    Insert(u64, u64),
    /// [`Client::update`].
    Update(u64, u64),
    /// [`Client::upsert`].
    Upsert(u64, u64),
    /// [`Client::delete`].
    Delete(u64),
    /// [`Client::scan`]: start key, most entries.
    Scan(u64, usize),
    /// [`Client::get_value`].
    GetValue(u64),
    /// [`Client::insert_value`].
    InsertValue(u64, Vec<u8>),
    /// [`Client::update_value`].
    UpdateValue(u64, Vec<u8>),
    /// [`Client::put_value`].
    PutValue(u64, Vec<u8>),
    /// [`Client::scan_values`]: start key, most entries.
    ScanValues(u64, usize),
}

/// What a [`Request`] came back with (the variant its synchronous twin returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A GET's value.
    Value(Option<u64>),
    /// A write's outcome: whether it inserted, updated or deleted (as the synchronous call's
    /// `bool`).
    Done(bool),
    /// A scan's entries.
    Rows(Vec<(u64, u64)>),
    /// A byte-value GET's bytes.
    Bytes(Option<Vec<u8>>),
    /// A byte-value scan's entries.
    ValueRows(Vec<(u64, Vec<u8>)>),
}

impl<E: Endpoint> Client<E> {
    /// Runs `request`, waiting for its batches as `waiting` says.
    pub(crate) async fn run(
        &mut self,
        request: Request,
        waiting: Waiting,
    ) -> Result<Reply, IndexError> {
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
    pub fn session<T: 'static>(&mut self) -> Session<'_, E, T> {
        let depth = self.lanes.len();
        Session {
            idle: self.lanes.iter_mut().collect(),
            running: Vec::with_capacity(depth),
            ready: VecDeque::new(),
        }
    }
}

/// What a lane's running operation gives back: the lane, the tag, the result.
type Finished<'p, E, T> = (&'p mut Client<E>, T, Result<Reply, IndexError>);

/// An operation running on a lane.
type Running<'p, E, T> = Pin<Box<dyn Future<Output = Finished<'p, E, T>> + 'p>>;

/// The operations in flight on a [`Pipeline`]: [`Session::submit`] starts one on a free client,
/// [`Session::poll`] and [`Session::wait`] move every one along and give back those that
/// completed, with their tags, in the order they completed.
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
///     let Some((tag, reply)) = session.wait() else { break };
///     assert_eq!(reply?, Reply::Value(Some(tag * 10)));
///     found += 1;
/// }
/// assert_eq!(found, 100);
/// # Ok(()) }
/// ```
pub struct Session<'p, E: Endpoint, T> {
    idle: Vec<&'p mut Client<E>>,
    running: Vec<Running<'p, E, T>>,
    ready: VecDeque<(T, Result<Reply, IndexError>)>,
}

impl<E: Endpoint, T> std::fmt::Debug for Session<'_, E, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("idle", &self.idle.len())
            .field("running", &self.running.len())
            .field("ready", &self.ready.len())
            .finish()
    }
}

/// A request [`Session::submit`] could not start: every client is busy, or as many results as
/// the pipeline is deep wait to be taken. Take a result first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy<T> {
    /// The request's tag.
    pub tag: T,
    /// The request.
    pub request: Request,
}

impl<'p, E: Endpoint + 'p, T: 'static> Session<'p, E, T> {
    /// Starts `request` on a free client (it runs as far as its first batch), or gives it back
    /// if every client is busy.
    pub fn submit(&mut self, tag: T, request: Request) -> Result<(), Busy<T>> {
        if !self.has_room() {
            return Err(Busy { tag, request });
        }
        let Some(lane) = self.idle.pop() else {
            return Err(Busy { tag, request });
        };
        let mut running: Running<'p, E, T> = Box::pin(async move {
            let result = lane.run(request, Waiting::Posting).await;
            (lane, tag, result)
        });
        // Started now: its first batch is posted before this returns.
        let mut cx = Context::from_waker(Waker::noop());
        match running.as_mut().poll(&mut cx) {
            Poll::Ready((lane, tag, result)) => {
                self.idle.push(lane);
                self.ready.push_back((tag, result));
            }
            Poll::Pending => self.running.push(running),
        }
        Ok(())
    }

    /// Whether a request can be submitted now: a client is free and fewer results than the
    /// pipeline's depth wait to be taken.
    pub fn has_room(&self) -> bool {
        !self.idle.is_empty() && self.in_flight() < self.running.len() + self.idle.len()
    }

    /// Operations started and not yet given back (results waiting in the session included).
    pub fn in_flight(&self) -> usize {
        self.running.len() + self.ready.len()
    }

    /// Moves every running operation along once; gives back one that completed, if any.
    pub fn poll(&mut self) -> Option<(T, Result<Reply, IndexError>)> {
        if self.ready.is_empty() {
            self.sweep();
        }
        self.ready.pop_front()
    }

    /// Moves the running operations along until one completes and gives it back; `None` if
    /// none is running.
    pub fn wait(&mut self) -> Option<(T, Result<Reply, IndexError>)> {
        loop {
            if let Some(done) = self.ready.pop_front() {
                return Some(done);
            }
            if self.running.is_empty() {
                return None;
            }
            if !self.sweep() {
                idle();
            }
        }
    }

    /// Polls every running operation once; whether one completed.
    fn sweep(&mut self) -> bool {
        let before = self.ready.len();
        let mut at = 0;
        while at < self.running.len() {
            let mut cx = Context::from_waker(Waker::noop());
            match self.running[at].as_mut().poll(&mut cx) {
                Poll::Ready((lane, tag, result)) => {
                    drop(self.running.swap_remove(at));
                    self.idle.push(lane);
                    self.ready.push_back((tag, result));
                }
                Poll::Pending => at += 1,
            }
        }
        self.ready.len() > before
    }
}

impl<E: Endpoint, T> Drop for Session<'_, E, T> {
    /// Finishes every operation still running (an operation dropped half done could leave a
    /// leaf lock held); their results are dropped.
    fn drop(&mut self) {
        while !self.running.is_empty() {
            let mut at = 0;
            let mut progressed = false;
            while at < self.running.len() {
                let mut cx = Context::from_waker(Waker::noop());
                match self.running[at].as_mut().poll(&mut cx) {
                    Poll::Ready(_) => {
                        drop(self.running.swap_remove(at));
                        progressed = true;
                    }
                    Poll::Pending => at += 1,
                }
            }
            if !progressed {
                idle();
            }
        }
    }
}

/// A pause when no operation of a session could go on: a spin hint, or a yield where the
/// scheduler decides who runs (loom models, seeded runs), whose other threads may hold what
/// these operations wait for.
fn idle() {
    if cfg!(loom) || cfg!(feature = "simulation") {
        crate::sync::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}
