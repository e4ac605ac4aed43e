//! How an operation waits: blocking on each batch (a client used through its synchronous
//! methods, one operation per thread at a time), or posting it and yielding until its completion
//! has come (an operation run by a [`crate::Pipeline`]'s session, several in flight per thread).
//!
//! **Invariant.** A posted batch's completion is delivered to the verbs it was posted from, or
//! abandoned if the operation awaiting it is dropped first ([`rdma_transport::wait`]). In
//! posting mode an operation never blocks its thread on anything a sibling operation of the
//! thread may hold (a local lock stripe): it yields, so the sibling goes on and releases it. In
//! blocking mode an operation never yields, so a synchronous call behaves exactly as it did
//! before operations were futures.

use std::future::Future;
use std::task::{Context, Poll, Waker};

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

/// Backoff between attempts number `attempt` and the next: in blocking mode spin, then yield
/// the thread, then sleep a little ([`backoff`]); in posting mode the thread's other operations
/// go on meanwhile (one of them may hold what this one waits for): one yield for the short
/// waits, yields until the sleep's time has passed for the long ones.
pub(crate) async fn pause(attempt: u32, waiting: Waiting) {
    match waiting {
        Waiting::Blocking => backoff(attempt),
        Waiting::Posting => {
            #[cfg(not(loom))]
            if attempt >= LONG_FROM {
                let until = std::time::Instant::now() + LONG_PAUSE;
                while std::time::Instant::now() < until {
                    yield_now().await;
                }
                return;
            }
            yield_now().await;
        }
    }
}

/// The attempt from which a backoff sleeps.
#[cfg(not(loom))]
const LONG_FROM: u32 = 12;

/// How long a backoff sleeps, from attempt [`LONG_FROM`] on.
#[cfg(not(loom))]
const LONG_PAUSE: std::time::Duration = std::time::Duration::from_micros(20);

/// The blocking backoff: spin, then yield, then sleep a little.
pub(crate) fn backoff(attempt: u32) {
    #[cfg(loom)]
    {
        let _ = attempt;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    if attempt >= LONG_FROM {
        std::thread::sleep(LONG_PAUSE);
    } else if attempt < 6 {
        for _ in 0..(1u32 << attempt) {
            std::hint::spin_loop();
        }
    } else {
        std::thread::yield_now();
    }
}

/// What a thread does when none of its operations could go on: a spin hint (their batches
/// complete by being polled), or a yield in loom models, whose scheduler decides who runs.
pub(crate) fn idle() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Runs `future` to its end on this thread, polling it again whenever it is pending. In
/// blocking mode an operation is never pending, so this costs one poll.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        idle();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn yield_now_is_pending_once() {
        let mut future = std::pin::pin!(yield_now());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert!(future.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_blocking_pause_is_ready_at_once_and_a_posting_one_yields() {
        let mut cx = Context::from_waker(Waker::noop());
        for attempt in [0, 7, 20] {
            let mut blocking = std::pin::pin!(pause(attempt, Waiting::Blocking));
            assert!(blocking.as_mut().poll(&mut cx).is_ready());
            let mut posting = std::pin::pin!(pause(attempt, Waiting::Posting));
            assert!(posting.as_mut().poll(&mut cx).is_pending());
        }
        let started = std::time::Instant::now();
        block_on(pause(LONG_FROM, Waiting::Posting));
        assert!(
            started.elapsed() >= LONG_PAUSE,
            "a long pause takes its time"
        );
    }
}
