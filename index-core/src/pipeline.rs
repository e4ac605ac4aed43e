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
/// module's invariant), through [`kv_session::Pipeline::session`]. Made by [`crate::Store::pipeline`].
pub type Pipeline<E> = kv_session::Pipeline<Client<E>>;

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
