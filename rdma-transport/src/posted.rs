//! Batches posted without waiting: what a posted batch owns, the [`Ticket`] that names it, and
//! the [`Completion`] its poster takes back (docs/ARCHITECTURE.md §2, "Posting and polling").
//!
//! **Invariant.** A posted batch borrows nothing of its poster once [`crate::Endpoint::post`]
//! has returned: WRITE payloads, atomics' operands and the `old` values they were built with,
//! and the READ buffers' contents are copied into a [`PostedBatch`] at post time, and the
//! results (READ bytes, atomics' `old` values) are kept there until the poster copies them into
//! its verbs with [`Completion::deliver`]. So an operation dropped while its batch is in flight
//! (an async call cancelled) leaves no buffer the transport may still write into; the
//! completion is simply never delivered ([`crate::Endpoint::abandon`]).
//!
//! Because a READ's buffer is copied in at post and copied back at delivery, a verb that did
//! not execute (its batch failed before it) leaves the poster's verb exactly as built, as
//! [`crate::Endpoint::batch`] does: an atomic's `old` keeps its preset sentinel, a READ's buffer
//! its bytes.

use smallvec::SmallVec;

use crate::{RemoteAddr, TransportError, Verb};

/// A batch posted through an endpoint and not yet taken back: handed to
/// [`crate::Endpoint::poll`], which returns its [`Completion`] once the batch has completed, or
/// the ticket again. Not `Clone`: a completion is taken once.
#[derive(Debug)]
#[must_use = "a posted batch's completion is taken with Endpoint::poll (or dropped with Endpoint::abandon)"]
pub struct Ticket(TicketState);

#[derive(Debug)]
enum TicketState {
    /// Completed already when it was posted (a transport that executes at post time).
    Ready(Box<Completion>),
    /// In flight: the endpoint's number for it.
    Pending(u64),
}

impl Ticket {
    /// A ticket for a batch still in flight, numbered `id` by its endpoint.
    pub fn pending(id: u64) -> Self {
        Self(TicketState::Pending(id))
    }

    /// A ticket for a batch that completed as it was posted.
    pub fn ready(completion: Completion) -> Self {
        Self(TicketState::Ready(Box::new(completion)))
    }

    /// The endpoint's number for a batch in flight; `None` for one that completed at post.
    pub fn id(&self) -> Option<u64> {
        match &self.0 {
            TicketState::Pending(id) => Some(*id),
            TicketState::Ready(_) => None,
        }
    }

    /// The completion of a ticket that completed at post, else the ticket again.
    pub fn into_ready(self) -> Result<Completion, Ticket> {
        match self.0 {
            TicketState::Ready(done) => Ok(*done),
            pending @ TicketState::Pending(_) => Err(Ticket(pending)),
        }
    }

    /// What an endpoint's [`crate::Endpoint::poll`] does with a ticket: the completion it came
    /// with, or the one `take` finds for its number, or the ticket again if its batch is still
    /// in flight.
    pub fn poll_with(
        self,
        take: impl FnOnce(u64) -> Option<Completion>,
    ) -> Result<Completion, Ticket> {
        match self.0 {
            TicketState::Ready(done) => Ok(*done),
            TicketState::Pending(id) => take(id).ok_or(self),
        }
    }

    /// What an endpoint's [`crate::Endpoint::abandon`] does with a ticket: `forget` its number
    /// if its batch is in flight (a ticket that completed at post holds nothing of the
    /// endpoint's).
    pub fn abandon_with(self, forget: impl FnOnce(u64)) {
        if let TicketState::Pending(id) = self.0 {
            forget(id);
        }
    }
}

/// One verb of a [`PostedBatch`]: the verb's fields, its bytes in the batch's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Cas { expected: u64, desired: u64 },
    Faa { add: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Owned {
    kind: Kind,
    addr: RemoteAddr,
    fenced: bool,
    /// A READ's or WRITE's bytes: `arena[at..at + len]`.
    at: usize,
    len: usize,
    /// An atomic's `old`: as built until it executes.
    old: u64,
}

/// A batch copied out of its poster's verbs: what a backend executes (through
/// [`PostedBatch::execute`]) and what [`Completion::deliver`] copies back.
#[derive(Debug, Clone, Default)]
pub struct PostedBatch {
    /// Inline up to a lock batch's size: a posted batch of a few verbs allocates nothing for them.
    verbs: SmallVec<[Owned; 4]>,
    /// Inline up to two leaves' bytes.
    arena: SmallVec<[u8; 576]>,
}

impl PostedBatch {
    /// A copy of `verbs` (see the module's invariant).
    pub fn copy_of(verbs: &[Verb<'_>]) -> Self {
        let bytes = verbs.iter().filter(|v| !v.is_atomic()).map(Verb::len).sum();
        let mut arena = SmallVec::with_capacity(bytes);
        let owned = verbs
            .iter()
            .map(|verb| {
                let at = arena.len();
                let (kind, old) = match verb {
                    Verb::Read { buf, .. } => {
                        arena.extend_from_slice(buf);
                        (Kind::Read, 0)
                    }
                    Verb::Write { data, .. } => {
                        arena.extend_from_slice(data);
                        (Kind::Write, 0)
                    }
                    Verb::Cas {
                        expected,
                        desired,
                        old,
                        ..
                    } => (
                        Kind::Cas {
                            expected: *expected,
                            desired: *desired,
                        },
                        *old,
                    ),
                    Verb::Faa { add, old, .. } => (Kind::Faa { add: *add }, *old),
                };
                Owned {
                    kind,
                    addr: verb.addr(),
                    fenced: verb.is_fenced(),
                    at,
                    len: arena.len() - at,
                    old,
                }
            })
            .collect();
        Self {
            verbs: owned,
            arena,
        }
    }

    /// How many verbs the batch has.
    pub fn len(&self) -> usize {
        self.verbs.len()
    }

    /// Whether the batch has no verbs.
    pub fn is_empty(&self) -> bool {
        self.verbs.is_empty()
    }

    /// The batch as verbs borrowing its own buffers (see [`PostedBatch::execute`]).
    fn verbs(&mut self) -> SmallVec<[Verb<'_>; 4]> {
        let mut rest: &mut [u8] = &mut self.arena;
        let mut out = SmallVec::with_capacity(self.verbs.len());
        for owned in &self.verbs {
            let verb = match owned.kind {
                Kind::Read | Kind::Write => {
                    let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(owned.len);
                    rest = tail;
                    match owned.kind {
                        Kind::Read => Verb::Read {
                            addr: owned.addr,
                            buf: bytes,
                            fenced: owned.fenced,
                        },
                        _ => Verb::Write {
                            addr: owned.addr,
                            data: bytes,
                            fenced: owned.fenced,
                        },
                    }
                }
                Kind::Cas { expected, desired } => Verb::Cas {
                    addr: owned.addr,
                    expected,
                    desired,
                    fenced: owned.fenced,
                    old: owned.old,
                },
                Kind::Faa { add } => Verb::Faa {
                    addr: owned.addr,
                    add,
                    fenced: owned.fenced,
                    old: owned.old,
                },
            };
            out.push(verb);
        }
        out
    }

    /// Keeps the `old` values the batch's verbs, run, found.
    fn settle(&mut self, olds: &[Option<u64>]) {
        for (owned, old) in self.verbs.iter_mut().zip(olds) {
            if let Some(old) = old {
                owned.old = *old;
            }
        }
    }

    /// Executes the batch with `run` (a backend's way of executing verbs, here on the batch's
    /// own buffers) and keeps its results; returns what `run` returned. A backend that executed
    /// the batch elsewhere (a NIC, through a staging buffer) passes a `run` that copies the
    /// results in.
    pub fn execute<R>(&mut self, run: impl FnOnce(&mut [Verb<'_>]) -> R) -> R {
        let (outcome, olds) = {
            let mut verbs = self.verbs();
            let outcome = run(&mut verbs);
            let olds: SmallVec<[Option<u64>; 4]> = verbs.iter().map(Verb::old_value).collect();
            (outcome, olds)
        };
        self.settle(&olds);
        outcome
    }

    /// Copies the batch's results into `verbs`, the verbs it was copied from: READ buffers and
    /// atomics' `old` values. Fails, changing nothing, if `verbs` is not that batch (another
    /// number, kind, address or length of verbs).
    pub fn deliver(&self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        let same = verbs.len() == self.verbs.len()
            && verbs.iter().zip(&self.verbs).all(|(verb, owned)| {
                verb.addr() == owned.addr
                    && match (verb, owned.kind) {
                        (Verb::Read { buf, .. }, Kind::Read) => buf.len() == owned.len,
                        (Verb::Write { data, .. }, Kind::Write) => data.len() == owned.len,
                        (
                            Verb::Cas {
                                expected, desired, ..
                            },
                            Kind::Cas {
                                expected: e,
                                desired: d,
                            },
                        ) => *expected == e && *desired == d,
                        (Verb::Faa { add, .. }, Kind::Faa { add: a }) => *add == a,
                        _ => false,
                    }
            });
        if !same {
            return Err(TransportError::NotThatBatch);
        }
        for (verb, owned) in verbs.iter_mut().zip(&self.verbs) {
            match verb {
                Verb::Read { buf, .. } => {
                    buf.copy_from_slice(&self.arena[owned.at..owned.at + owned.len]);
                }
                Verb::Cas { old, .. } | Verb::Faa { old, .. } => *old = owned.old,
                Verb::Write { .. } => {}
            }
        }
        Ok(())
    }
}

/// What a posted batch came back with: its outcome and its results.
#[derive(Debug, Clone)]
pub struct Completion {
    outcome: Result<(), TransportError>,
    batch: PostedBatch,
}

impl Completion {
    /// The completion of `batch` (executed, its results in it) with `outcome`: as
    /// [`crate::Endpoint::batch`] would have returned, a failure leaving the verbs before the
    /// failing one executed.
    pub fn new(batch: PostedBatch, outcome: Result<(), TransportError>) -> Self {
        Self { outcome, batch }
    }

    /// How the batch ended, without its results.
    pub fn outcome(&self) -> &Result<(), TransportError> {
        &self.outcome
    }

    /// Copies the results into `verbs` (the verbs the batch was posted from) and returns the
    /// batch's outcome; or [`TransportError::NotThatBatch`], copying nothing, if `verbs` is not
    /// that batch.
    pub fn deliver(self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        self.batch.deliver(verbs)?;
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64) -> RemoteAddr {
        RemoteAddr::new(0, offset).expect("addr")
    }

    #[test]
    fn a_copied_batch_executes_on_its_own_buffers_and_delivers_back() {
        let data = [7u8; 12];
        let mut buf = [1u8; 16];
        let mut verbs = [
            Verb::write(at(0), &data),
            Verb::read(at(16), &mut buf).fenced(),
            Verb::cas(at(32), 3, 4),
            Verb::faa(at(40), 9),
        ];
        let mut posted = PostedBatch::copy_of(&verbs);
        assert_eq!(posted.len(), 4);
        // A "backend" that fills the READ and the atomics' `old`, and checks what it was given.
        let outcome = posted.execute(|run| {
            assert!(matches!(run[0], Verb::Write { data, .. } if data == [7u8; 12]));
            assert!(run[1].is_fenced());
            for verb in run.iter_mut() {
                match verb {
                    Verb::Read { buf, .. } => buf.copy_from_slice(&[5u8; 16]),
                    Verb::Cas { old, .. } => *old = 3,
                    Verb::Faa { old, .. } => *old = 11,
                    Verb::Write { .. } => {}
                }
            }
            Ok(())
        });
        assert_eq!(outcome, Ok(()));
        let done = Completion::new(posted, outcome);
        assert_eq!(done.deliver(&mut verbs), Ok(()));
        assert!(matches!(&verbs[1], Verb::Read { buf, .. } if **buf == [5u8; 16]));
        assert_eq!(verbs[2].cas_succeeded(), Some(true));
        assert_eq!(verbs[3].old_value(), Some(11));
    }

    #[test]
    fn verbs_that_did_not_execute_come_back_as_built() {
        let mut buf = [1u8; 8];
        let mut verbs = [
            Verb::faa(at(0), 1),
            Verb::Cas {
                addr: at(8),
                expected: 0,
                desired: 1,
                fenced: false,
                old: u64::MAX,
            },
            Verb::read(at(16), &mut buf),
        ];
        let mut posted = PostedBatch::copy_of(&verbs);
        let outcome = posted.execute(|run| {
            if let Verb::Faa { old, .. } = &mut run[0] {
                *old = 41;
            }
            Err(TransportError::InjectedFault)
        });
        let done = Completion::new(posted, outcome);
        assert_eq!(done.deliver(&mut verbs), Err(TransportError::InjectedFault));
        assert_eq!(verbs[0].old_value(), Some(41));
        assert_eq!(
            verbs[1].old_value(),
            Some(u64::MAX),
            "the sentinel survives"
        );
        assert!(matches!(&verbs[2], Verb::Read { buf, .. } if **buf == [1u8; 8]));
    }

    #[test]
    fn a_completion_is_delivered_only_to_the_batch_it_came_from() {
        let mut one = [0u8; 8];
        let mut two = [0u8; 16];
        let posted = PostedBatch::copy_of(&[Verb::read(at(0), &mut one)]);
        let done = Completion::new(posted, Ok(()));
        let mut other = [Verb::read(at(0), &mut two)];
        assert_eq!(
            done.clone().deliver(&mut other),
            Err(TransportError::NotThatBatch)
        );
        let mut elsewhere = [Verb::read(at(8), &mut one)];
        assert_eq!(
            done.deliver(&mut elsewhere),
            Err(TransportError::NotThatBatch)
        );
    }

    #[test]
    fn a_ticket_is_ready_or_pending() {
        let ready = Ticket::ready(Completion::new(PostedBatch::default(), Ok(())));
        assert_eq!(ready.id(), None);
        assert!(ready.into_ready().is_ok());
        let pending = Ticket::pending(7);
        assert_eq!(pending.id(), Some(7));
        assert!(pending.into_ready().is_err());
    }

    #[test]
    fn polling_a_ticket_asks_its_endpoint_only_about_a_batch_in_flight() {
        let done = || Completion::new(PostedBatch::default(), Ok(()));
        let ready = Ticket::ready(done());
        assert!(
            ready
                .poll_with(|_| panic!("a ready ticket asks nobody"))
                .is_ok()
        );
        let mut asked = Vec::new();
        let still = Ticket::pending(3).poll_with(|id| {
            asked.push(id);
            None
        });
        let still = still.expect_err("not complete yet");
        assert_eq!(still.id(), Some(3), "the same ticket back");
        assert!(still.poll_with(|_| Some(done())).is_ok());
        assert_eq!(asked, [3]);
        let mut forgotten = Vec::new();
        Ticket::pending(9).abandon_with(|id| forgotten.push(id));
        Ticket::ready(done()).abandon_with(|id| forgotten.push(id));
        assert_eq!(forgotten, [9], "only a batch in flight is forgotten");
    }
}
