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
/// module's invariant), through [`kv_session::Pipeline::session`]. Made by [`crate::Tree::pipeline`].
pub type Pipeline<E> = kv_session::Pipeline<Client<E>>;

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
