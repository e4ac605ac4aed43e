//! How an operation waits for its batches: blocking on each (a client used through its
//! synchronous methods, one operation per thread at a time), or posting it and yielding until
//! its completion has come (an operation awaited, several in flight per thread: see
//! `crate::pipeline` and ARCHITECTURE §6, "Operations in flight").
//!
//! **Invariant.** A posted batch's completion is delivered to the verbs it was posted from, or,
//! if the operation awaiting it is dropped first, abandoned ([`Posted`]'s `Drop`): a ticket is
//! never lost with its completion left in the endpoint. An operation yields only where it waits
//! for a batch or for something a sibling operation of its thread holds (a lock stripe), never
//! while it holds a value another operation could need to go on; and in blocking mode it never
//! yields at all, so a synchronous call behaves exactly as before any of this existed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use rdma_transport::{Completion, Endpoint, Ticket, TransportError, Verb};

use crate::backoff::Backoff;

/// How the operation running on a client waits for its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Each batch executes and completes before the call returns ([`Endpoint::batch`]).
    Blocking,
    /// Each batch is posted ([`Endpoint::post`]) and awaited: other operations of the thread go
    /// on meanwhile.
    Posting,
}

/// Executes `verbs` as [`Endpoint::batches`] does: in blocking mode exactly that; in posting
/// mode one posted batch, awaited, when they fit one (the split into several, rare, blocks).
pub(crate) async fn batches<E: Endpoint>(
    ep: &mut E,
    waiting: Waiting,
    verbs: &mut [Verb<'_>],
) -> Result<(), TransportError> {
    let fits = verbs.len() <= rdma_transport::MAX_BATCH_VERBS
        && rdma_transport::batch_bytes(verbs) <= rdma_transport::MAX_BATCH_BYTES;
    if waiting == Waiting::Blocking || !fits || verbs.is_empty() {
        return ep.batches(verbs);
    }
    let ticket = ep.post(verbs)?;
    Posted {
        ep,
        ticket: Some(ticket),
    }
    .await
    .deliver(verbs)
}

/// A posted batch being awaited: ready once its endpoint returns its completion. Dropped before
/// that, it abandons the batch (which still executes).
struct Posted<'e, E: Endpoint> {
    ep: &'e mut E,
    ticket: Option<Ticket>,
}

impl<E: Endpoint> Future for Posted<'_, E> {
    type Output = Completion;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Completion> {
        let this = self.get_mut();
        let Some(ticket) = this.ticket.take() else {
            // Polled after it completed: a bug of the executor; never ready again.
            return Poll::Pending;
        };
        match this.ep.poll(ticket) {
            Ok(done) => Poll::Ready(done),
            Err(pending) => {
                this.ticket = Some(pending);
                // Completions arrive by polling the endpoint: ask to be polled again.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

impl<E: Endpoint> Drop for Posted<'_, E> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.ep.abandon(ticket);
        }
    }
}

/// Yields once: pending the first time it is polled (asking to be polled again), ready the
/// second. What an operation awaits while a sibling of its thread holds what it needs.
pub(crate) fn yield_now() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

/// One more wait of `backoff` ([`Backoff::wait`]); in posting mode a yield to the thread's
/// other operations instead (one of them may hold what this one waits for, and goes on only
/// while this one is pending). False once the backoff's deadline has passed.
pub(crate) async fn pause(backoff: &mut Backoff, waiting: Waiting) -> bool {
    match waiting {
        Waiting::Blocking => backoff.wait(),
        Waiting::Posting => {
            if backoff.expired() {
                return false;
            }
            yield_now().await;
            true
        }
    }
}

/// Runs `future` to its end on this thread, polling it again whenever it is pending (a
/// pending operation of this crate is one whose batch is in flight: the next poll may find it
/// complete). In blocking mode an operation is never pending, so this costs one poll.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        crate::sync::thread::yield_now();
    }
}
