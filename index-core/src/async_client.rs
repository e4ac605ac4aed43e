//! The async face of a client: every operation as a future that posts its batches and is
//! pending while they are in flight, for any executor (ARCHITECTURE §6, "Operations in
//! flight").
//!
//! **Invariant.** An operation is never left half done: an [`Operation`] dropped before it
//! completed finishes first (its drop blocks until the operation has ended), because a write
//! stopped between its lock and its unlock would leave a leaf lock held that nothing recovers
//! while its client lives. Cancel by not starting an operation, not by dropping it.
//!
//! The futures are `Send`: a multi-threaded runtime may move an operation to another worker
//! between two of its batches (`tokio::spawn` takes them; a write owns its leaf's local lock
//! stripe as a token, not a mutex guard). Await every operation you started, or drop it: one
//! left unpolled keeps its lock stripe, and an async sibling waiting for that stripe gives up
//! after the store's wait limit (`LockTimeout`); a synchronous call on that stripe would wait
//! until the operation is polled to its end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rdma_transport::Endpoint;

use crate::IndexError;
use crate::client::{Change, Client, Waiting};
use crate::pipeline::{Reply, Request};

/// A [`Client`] whose operations are futures (see the module's invariant). Made by
/// [`Client::into_async`].
///
/// ```
/// # #[cfg(loom)] fn main() {}
/// # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use index_core::{Store, StoreConfig, bootstrap};
/// use leaf_store::{BulkLoadConfig, required_pool_bytes};
/// use sim_transport::SimTransport;
///
/// let entries: Vec<(u64, u64)> = (0..1_000).map(|k| (k * 10, k * 10)).collect();
/// let load = BulkLoadConfig::default();
/// let size = required_pool_bytes(entries.len() as u64, &load, 1_000).next_multiple_of(8);
/// let memory_node = SimTransport::anonymous(&[size])?;
/// bootstrap(&memory_node, entries, &load)?;
/// let store = Store::open(memory_node, StoreConfig::default())?;
/// let mut one = store.client()?.into_async();
/// let mut two = store.client()?.into_async();
///
/// // Two operations in flight on this thread (each starts when made), on any executor (here
/// // the crate's own).
/// let (a, b) = index_core::block_on(async {
///     let a = one.insert(5, 50);
///     let b = two.get(10);
///     (a.await, b.await)
/// });
/// assert_eq!((a?, b?), (true, Some(10)));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncClient<E: Endpoint> {
    client: Client<E>,
}

impl<E: Endpoint> Client<E> {
    /// This client, its operations as futures.
    pub fn into_async(self) -> AsyncClient<E> {
        AsyncClient { client: self }
    }
}

/// One operation of an [`AsyncClient`]. It starts when it is made — it runs until its first
/// batch is posted — so several made before any is awaited are in flight together.
#[must_use = "an operation's result is its future's output (dropped unawaited, it still runs to its end)"]
pub struct Operation<'c, R> {
    state: State<'c, R>,
}

enum State<'c, R> {
    Running(Pin<Box<dyn Future<Output = Result<R, IndexError>> + Send + 'c>>),
    Done(Option<Result<R, IndexError>>),
}

impl<R> std::fmt::Debug for Operation<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operation")
            .field("running", &matches!(self.state, State::Running(_)))
            .finish()
    }
}

impl<'c, R> Operation<'c, R> {
    /// `future`, started: polled once now.
    fn new(future: impl Future<Output = Result<R, IndexError>> + Send + 'c) -> Self {
        let mut future: Pin<Box<dyn Future<Output = Result<R, IndexError>> + Send + 'c>> =
            Box::pin(future);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let state = match future.as_mut().poll(&mut cx) {
            Poll::Ready(out) => State::Done(Some(out)),
            Poll::Pending => State::Running(future),
        };
        Self { state }
    }
}

// Nothing of an operation is pinned in place but its boxed future.
impl<R> Unpin for Operation<'_, R> {}

impl<R> Future for Operation<'_, R> {
    type Output = Result<R, IndexError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Running(future) => {
                let out = future.as_mut().poll(cx);
                if out.is_ready() {
                    this.state = State::Done(None);
                }
                out
            }
            State::Done(out) => Poll::Ready(out.take().unwrap_or(Err(IndexError::Polled))),
        }
    }
}

impl<R> Drop for Operation<'_, R> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Polling a future whose thread unwinds could abort the process.
            return;
        }
        if let State::Running(future) = &mut self.state {
            // Finished, its result dropped (see the module's invariant).
            drop(crate::client::block_on(future.as_mut()));
        }
    }
}

impl<E: Endpoint> AsyncClient<E> {
    /// The client back, for synchronous calls.
    pub fn into_inner(self) -> Client<E> {
        self.client
    }

    /// The client (its counters).
    pub fn client(&self) -> &Client<E> {
        &self.client
    }

    /// The client, mutably ([`crate::Store::reconnect`] after a retirement).
    pub fn client_mut(&mut self) -> &mut Client<E> {
        &mut self.client
    }

    /// [`Client::get`].
    pub fn get(&mut self, key: u64) -> Operation<'_, Option<u64>> {
        Operation::new(self.client.get_with(key, Waiting::Posting))
    }

    /// [`Client::insert`].
    pub fn insert(&mut self, key: u64, value: u64) -> Operation<'_, bool> {
        Operation::new(
            self.client
                .write_with(key, Change::Insert(value), Waiting::Posting),
        )
    }

    /// [`Client::update`].
    pub fn update(&mut self, key: u64, value: u64) -> Operation<'_, bool> {
        Operation::new(
            self.client
                .write_with(key, Change::Update(value), Waiting::Posting),
        )
    }

    /// [`Client::upsert`].
    pub fn upsert(&mut self, key: u64, value: u64) -> Operation<'_, bool> {
        Operation::new(
            self.client
                .write_with(key, Change::Upsert(value), Waiting::Posting),
        )
    }

    /// [`Client::delete`].
    pub fn delete(&mut self, key: u64) -> Operation<'_, bool> {
        Operation::new(
            self.client
                .write_with(key, Change::Delete, Waiting::Posting),
        )
    }

    /// [`Client::scan`].
    pub fn scan(&mut self, start: u64, n: usize) -> Operation<'_, Vec<(u64, u64)>> {
        Operation::new(self.client.scan_with(start, n, Waiting::Posting))
    }

    /// [`Client::get_value`].
    pub fn get_value(&mut self, key: u64) -> Operation<'_, Option<Vec<u8>>> {
        let client = &mut self.client;
        Operation::new(async move {
            let mut out = Vec::new();
            let found = client
                .get_value_with(key, &mut out, Waiting::Posting)
                .await?;
            Ok(found.then_some(out))
        })
    }

    /// [`Client::insert_value`].
    pub fn insert_value<'c>(&'c mut self, key: u64, value: &'c [u8]) -> Operation<'c, bool> {
        Operation::new(
            self.client
                .write_value_with(key, value, Change::Insert, Waiting::Posting),
        )
    }

    /// [`Client::update_value`].
    pub fn update_value<'c>(&'c mut self, key: u64, value: &'c [u8]) -> Operation<'c, bool> {
        Operation::new(
            self.client
                .write_value_with(key, value, Change::Update, Waiting::Posting),
        )
    }

    /// [`Client::put_value`].
    pub fn put_value<'c>(&'c mut self, key: u64, value: &'c [u8]) -> Operation<'c, bool> {
        Operation::new(
            self.client
                .write_value_with(key, value, Change::Upsert, Waiting::Posting),
        )
    }

    /// [`Client::scan_values`].
    pub fn scan_values(&mut self, start: u64, n: usize) -> Operation<'_, Vec<(u64, Vec<u8>)>> {
        Operation::new(self.client.scan_values_with(start, n, Waiting::Posting))
    }

    /// Any operation, as a [`Request`].
    pub fn run(&mut self, request: Request) -> Operation<'_, Reply> {
        Operation::new(self.client.run_request(request, Waiting::Posting))
    }
}

/// Runs `future` to its end on this thread, polling it again whenever it is pending: the
/// smallest executor there is, enough for a few operations of an [`AsyncClient`] (a
/// [`crate::Session`] drives many).
pub fn block_on<F: Future>(future: F) -> F::Output {
    crate::client::block_on(std::pin::pin!(future))
}
