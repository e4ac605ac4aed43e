//! Awaiting a batch: the async half of [`Endpoint`], for clients whose operations are futures
//! (several in flight on one thread). A [`Waiting::Blocking`] client executes each batch at
//! once with [`Endpoint::batches`] (never pending); a [`Waiting::Posting`] one posts it and is
//! pending until its completion has come.
//!
//! **Invariant.** A posted batch's completion is delivered to the verbs it was posted from, or,
//! if the future awaiting it is dropped first, the batch is abandoned ([`Endpoint::abandon`]):
//! a ticket is never lost with its completion left in the endpoint.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Endpoint, Ticket, TransportError, Verb};

/// How an operation waits for its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Waiting {
    /// Each batch executes and completes before the call returns ([`Endpoint::batch`]).
    #[default]
    Blocking,
    /// Each batch is posted ([`Endpoint::post`]) and awaited: other operations of the thread go
    /// on meanwhile.
    Posting,
}

/// Executes `verbs` as [`Endpoint::batches`] does: in blocking mode exactly that, at once (the
/// future returned is ready at its first poll); in posting mode one posted batch, awaited, when
/// they fit one (work split into several batches blocks). A plain function returning a
/// hand-written future, not an `async fn`: a blocking batch then costs what the call costs.
#[inline]
pub fn batches<'a, 'v, E: Endpoint + ?Sized>(
    ep: &'a mut E,
    waiting: Waiting,
    verbs: &'a mut [Verb<'v>],
) -> Batches<'a, 'v, E> {
    match waiting {
        Waiting::Blocking => Batches(State::Done(Some(ep.batches(verbs)))),
        Waiting::Posting => posted(ep, verbs),
    }
}

/// [`batches`] in posting mode.
fn posted<'a, 'v, E: Endpoint + ?Sized>(
    ep: &'a mut E,
    verbs: &'a mut [Verb<'v>],
) -> Batches<'a, 'v, E> {
    if verbs.is_empty()
        || verbs.len() > crate::MAX_BATCH_VERBS
        || crate::batch_bytes(verbs) > crate::MAX_BATCH_BYTES
    {
        return Batches(State::Done(Some(ep.batches(verbs))));
    }
    match ep.post(verbs) {
        Ok(ticket) => Batches(State::Posted {
            ep,
            ticket: Some(ticket),
            verbs,
        }),
        Err(e) => Batches(State::Done(Some(Err(e)))),
    }
}

/// The future of [`batches`]: ready once the batch has executed and its completion was delivered
/// to its verbs. Dropped before that, it abandons a posted batch (which still executes).
pub struct Batches<'a, 'v, E: Endpoint + ?Sized>(State<'a, 'v, E>);

enum State<'a, 'v, E: Endpoint + ?Sized> {
    /// Executed already (or refused); the outcome, until taken.
    Done(Option<Result<(), TransportError>>),
    /// Posted, its completion not yet delivered (`ticket` is taken while it is polled).
    Posted {
        ep: &'a mut E,
        ticket: Option<Ticket>,
        verbs: &'a mut [Verb<'v>],
    },
}

impl<E: Endpoint + ?Sized> std::fmt::Debug for Batches<'_, '_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            State::Done(_) => "Batches(done)",
            State::Posted { .. } => "Batches(posted)",
        })
    }
}

impl<E: Endpoint + ?Sized> Future for Batches<'_, '_, E> {
    type Output = Result<(), TransportError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().0 {
            // `None`: polled after it was ready, a bug of the executor; never ready again.
            State::Done(outcome) => outcome.take().map_or(Poll::Pending, Poll::Ready),
            State::Posted { ep, ticket, verbs } => {
                let Some(pending) = ticket.take() else {
                    return Poll::Pending;
                };
                match ep.poll(pending) {
                    Ok(done) => Poll::Ready(done.deliver(verbs)),
                    Err(pending) => {
                        *ticket = Some(pending);
                        // Completions arrive by polling the endpoint: ask to be polled again.
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }
            }
        }
    }
}

impl<E: Endpoint + ?Sized> Drop for Batches<'_, '_, E> {
    #[inline]
    fn drop(&mut self) {
        if let State::Posted { ep, ticket, .. } = &mut self.0
            && let Some(ticket) = ticket.take()
        {
            ep.abandon(ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint whose posted batches complete at the third poll, and that counts abandons.
    #[derive(Default)]
    struct Slow {
        polls: u32,
        abandoned: u32,
        executed: u32,
    }

    impl Endpoint for Slow {
        fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
            self.executed += 1;
            for verb in verbs {
                if let Verb::Faa { old, .. } = verb {
                    *old = 41;
                }
            }
            Ok(())
        }
        fn post(&mut self, _verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
            Ok(Ticket::pending(1))
        }
        fn poll(&mut self, ticket: Ticket) -> Result<crate::Completion, Ticket> {
            self.polls += 1;
            if self.polls < 3 {
                return Err(ticket);
            }
            let addr = crate::RemoteAddr::new(0, 0).expect("addr");
            let mut posted = crate::PostedBatch::copy_of(&[Verb::faa(addr, 1)]);
            let outcome = posted.execute(|verbs| self.batch(verbs));
            Ok(crate::Completion::new(posted, outcome))
        }
        fn abandon(&mut self, _ticket: Ticket) {
            self.abandoned += 1;
        }
        fn stats(&self) -> crate::Stats {
            crate::Stats::default()
        }
    }

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_posted_batch_is_pending_until_its_completion_and_delivered() {
        let mut ep = Slow::default();
        let addr = crate::RemoteAddr::new(0, 0).expect("addr");
        let mut verbs = [Verb::faa(addr, 1)];
        {
            let mut future = std::pin::pin!(batches(&mut ep, Waiting::Posting, &mut verbs));
            assert!(poll_once(future.as_mut()).is_pending());
            assert!(poll_once(future.as_mut()).is_pending());
            assert_eq!(poll_once(future.as_mut()), Poll::Ready(Ok(())));
        }
        assert_eq!(verbs[0].old_value(), Some(41));
        assert_eq!(ep.abandoned, 0);
    }

    #[test]
    fn blocking_mode_executes_at_once_and_a_dropped_wait_abandons() {
        let mut ep = Slow::default();
        let addr = crate::RemoteAddr::new(0, 0).expect("addr");
        let mut verbs = [Verb::faa(addr, 1)];
        {
            let mut future = std::pin::pin!(batches(&mut ep, Waiting::Blocking, &mut verbs));
            assert_eq!(poll_once(future.as_mut()), Poll::Ready(Ok(())));
        }
        assert_eq!(ep.executed, 1);
        {
            let mut future = std::pin::pin!(batches(&mut ep, Waiting::Posting, &mut verbs));
            assert!(poll_once(future.as_mut()).is_pending());
        }
        assert_eq!(ep.abandoned, 1, "the dropped wait gave its ticket up");
    }
}
