//! How an operation waits for its batches: blocking on each (a client used through its
//! synchronous methods, one operation per thread at a time), or posting it and yielding until
//! its completion has come (an operation awaited, several in flight per thread: see
//! `crate::pipeline` and ARCHITECTURE §6, "Operations in flight").
//!
//! **Invariant.** A posted batch's completion is delivered to the verbs it was posted from, or
//! abandoned if the operation awaiting it is dropped first ([`rdma_transport::wait`]). In
//! posting mode an operation never blocks its thread on anything a sibling operation of the
//! thread may hold (a lock stripe, a leaf lock it waits out): it yields, so the sibling goes on
//! and releases it. In blocking mode an operation never yields, so a synchronous call behaves
//! exactly as it did before operations were futures.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use crate::backoff::Backoff;

pub(crate) use rdma_transport::wait::{Waiting, batches};

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
/// complete). In blocking mode an operation is never pending, so this costs one poll. It takes
/// the future pinned where its caller made it: an operation's future is kilobytes, and moving
/// it into this call cost a synchronous write a tenth of its time.
pub(crate) fn block_on<F: Future + ?Sized>(mut future: std::pin::Pin<&mut F>) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        crate::sync::thread::yield_now();
    }
}

/// Runs an operation's future to its end on this thread ([`block_on`]), pinned where it is
/// made — or, in loom builds, on the heap: a loom thread's stack is small, and an operation's
/// future (kilobytes, nested) overflowed it.
macro_rules! blocking {
    ($future:expr) => {{
        #[cfg(loom)]
        {
            $crate::client::wait::block_on(Box::pin($future).as_mut())
        }
        #[cfg(not(loom))]
        {
            $crate::client::wait::block_on(std::pin::pin!($future))
        }
    }};
}
pub(crate) use blocking;
