//! What a write holds when a verb fails, and how it lets go.
//!
//! A write holds its trained leaf's LT lock from the lock CAS to the unlock CAS. A verb that fails
//! in between must not leave the lock held behind a transient error, or every later writer of
//! that leaf — and every retraining of its slot — would wait forever. The rules:
//!
//! * **Before anything is written** (the lock batch, reading under the lock, encoding): release the
//!   lock and report the error.
//! * **The batch that ends a write** (leaf WRITEs, a structural change, the unlock) may have
//!   executed a prefix. It is run again, unlock included, a few times: the write then completes
//!   and the operation succeeds. Every verb before a structural change's header bump can be
//!   repeated as long as the bump has not executed (nothing fenced behind it has, then): WRITEs
//!   carry the bytes they carried, a link CAS already applied shows its desired value. Once the
//!   bump has executed (its `old` field says so), the repeat starts *after* it: a split whose new
//!   key falls in the upper half writes the new leaf twice — without the key before the shrink,
//!   with it after — and repeating the first image after the second would take the key out again
//!   while the leaf claims it (ARCHITECTURE §4, "Claims"). After a broken endpoint, which cannot
//!   say whether the bump executed, such a batch is not repeated: the lock is reported as possibly
//!   held, and its recovery finishes the split.
//! * If releasing (or the repeated batch) fails too, the transport is gone (a dead compute node):
//!   the error is [`IndexError::LockMayRemain`], naming the leaf. Nothing else of the slot is held.
//!
//! A failed batch reports, for each atomic it executed, the previous value in its `old` field;
//! atomics it did not reach keep the value they were built with. Lock CASes are built with a value
//! the word cannot hold after a successful swap, so "did my lock CAS take the lock" has an answer —
//! except on a broken endpoint ([`rdma_transport::TransportError::Broken`]: a real queue pair whose
//! batch timed out or failed), where nothing is known and the lock is treated as taken.

use leaf_store::settle::Step;
use leaf_store::{LeafTableEntry, ModelHeader};
use rdma_transport::{Endpoint, RemoteAddr, TransportError, Verb};

use crate::IndexError;

use super::batch::{Ending, Unlock};
use super::value_io::ValueIo;
use super::*;

/// How many times a failed batch that ends a write is run again before the lock is reported as
/// possibly held.
const REDO_ATTEMPTS: u32 = 3;

/// How the batch that ends a write ran.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    /// Whether the lock was released (false: handed over to a sibling thread).
    pub(super) released: bool,
    /// The header a structural change's bump found, when the batch ran whole at its first
    /// attempt (a repeated batch's bump says nothing the writer can adopt).
    pub(super) bumped: Option<ModelHeader>,
}

/// What the lock on one trained leaf is, for releasing it after an error.
#[derive(Debug, Clone, Copy)]
pub(super) struct LockRef {
    pub(super) node: u16,
    pub(super) slot: u64,
    pub(super) leaf: u64,
    pub(super) lt_addr: RemoteAddr,
    /// The LT entry's value while held (lock bit set).
    pub(super) held: LeafTableEntry,
    /// The record whose LT holds the entry.
    pub(super) record: RemoteAddr,
}

impl Locked {
    pub(super) fn lock_ref(&self) -> LockRef {
        LockRef {
            node: self.record.node(),
            slot: self.slot,
            leaf: self.leaf,
            lt_addr: self.lt_addr,
            held: self.lt_now,
            record: self.record,
        }
    }
}

impl<E: Endpoint> Client<E> {
    /// Releases `lock` after `cause` stopped a write before it wrote anything (best effort, a few
    /// tries). Returns the error to report: `cause` if the lock is free again, else
    /// [`IndexError::LockMayRemain`].
    pub(super) fn release_after(&mut self, lock: LockRef, cause: IndexError) -> IndexError {
        match self.unlock_with_retries(lock) {
            Ok(Ok(())) => cause,
            Ok(Err(other)) => other,
            Err(release) => may_remain(lock, cause, release),
        }
    }

    /// Unlocks `lock`, retrying a failed unlock a few times; then
    /// [`IndexError::LockMayRemain`].
    pub(super) fn release(&mut self, lock: LockRef) -> Result<(), IndexError> {
        match self.unlock_with_retries(lock) {
            Ok(result) => result,
            Err(release) => Err(may_remain(lock, release.clone(), release)),
        }
    }

    /// `Err`: every unlock batch failed (the last error). `Ok(result)`: an unlock ran, and
    /// `result` says whether it found the lock held as expected.
    fn unlock_with_retries(&mut self, lock: LockRef) -> Result<Result<(), IndexError>, IndexError> {
        let mut last = IndexError::Config("no release attempted".into());
        for _ in 0..REDO_ATTEMPTS {
            let mut verbs = [leaf_store::unlock_verb(lock.lt_addr, lock.held, None)];
            match self.ep.batches(&mut verbs) {
                Ok(()) => return Ok(released(&verbs, lock)),
                Err(e) => last = e.into(),
            }
        }
        Err(last)
    }

    /// Runs the batch that ends `value`'s write: `head` places the verbs a repeat after the bump
    /// leaves out (leaves, link, freed mark, bump), `tail` the ones after the bump; the value's
    /// verbs go around them — its block and free word before, the replaced block's free after —
    /// and the unlock, `unlock`, last (see [`Self::run_ending_batch`]; `release`: false hands the
    /// lock over instead).
    pub(super) async fn end_write<'b>(
        &mut self,
        value: &'b ValueIo,
        lock: LockRef,
        release: bool,
        unlock: Unlock,
        head: impl Fn(&mut Ending<'b>),
        tail: impl Fn(&mut Ending<'b>),
    ) -> Result<Ended, IndexError> {
        let build = |unlocking: bool, after_bump: bool| {
            let mut batch = Ending::default();
            if !after_bump {
                value.prefix(&mut batch);
                batch.enter(Step::Leaves);
                head(&mut batch);
            }
            tail(&mut batch);
            batch.enter(Step::ValueFree);
            value.suffix(&mut batch);
            if unlocking {
                batch.enter(Step::Unlock);
                let verb = leaf_store::unlock_verb(lock.lt_addr, unlock.entry, None);
                batch.push(if unlock.fenced { verb.fenced() } else { verb });
            }
            batch
        };
        value.ghost_placed();
        let ran = self.run_ending_batch(lock, build, release).await;
        value.ended(ran.is_ok());
        ran
    }

    /// Runs the batch that ends a write. `build(unlock, after_bump)` makes its verbs; with
    /// `unlock`, the unlock CAS is the last one; with `after_bump`, only the verbs after the
    /// header bump.
    ///
    /// If the batch fails, it is built again with the unlock and run again (see the module
    /// documentation for why every verb may be repeated); after [`REDO_ATTEMPTS`] failures the
    /// error is [`IndexError::LockMayRemain`]. Once the bump has executed, the repeat makes the
    /// verbs after it only.
    ///
    /// Returns whether the lock was released (false: handed over, `unlock` was false) and the
    /// header the bump found, if the batch ran whole at its first attempt ([`Ended`]).
    pub(super) async fn run_ending_batch<'b>(
        &mut self,
        lock: LockRef,
        build: impl Fn(bool, bool) -> Ending<'b>,
        unlock: bool,
    ) -> Result<Ended, IndexError> {
        let mut batch = build(unlock, false);
        let structural = batch.is_structural();
        let first = match wait::batches(&mut self.ep, self.waiting, &mut batch).await {
            Ok(()) => {
                batch.check_link(false)?;
                if unlock {
                    released(&batch, lock)?;
                }
                return Ok(Ended {
                    released: unlock,
                    bumped: batch.bumped(),
                });
            }
            Err(e) => e,
        };
        let mut resume = batch.bumped().is_some();
        drop(batch);
        let first = IndexError::from(first);
        // After a broken endpoint, whether the bump (and what follows it) executed is unknown.
        let unknowable = |resume: bool, error: &IndexError| {
            structural
                && !resume
                && matches!(error, IndexError::Transport(TransportError::Broken(_)))
        };
        if unknowable(resume, &first) {
            return Err(may_remain(lock, first.clone(), first));
        }
        let mut last = first.clone();
        for _ in 0..REDO_ATTEMPTS {
            let mut batch = build(true, resume);
            match wait::batches(&mut self.ep, self.waiting, &mut batch).await {
                Ok(()) => {
                    if !resume {
                        batch.check_link(true)?;
                    }
                    released(&batch, lock)?;
                    return Ok(Ended {
                        released: true,
                        bumped: None,
                    });
                }
                Err(e) => {
                    resume |= batch.bumped().is_some();
                    last = IndexError::from(e);
                    if unknowable(resume, &last) {
                        break;
                    }
                }
            }
        }
        Err(may_remain(lock, first, last))
    }
}

/// The batch `verbs`, ending with `lock`'s unlock CAS, found the lock held as this client took it
/// (else the error of [`check_unlocked`]); the lock is released (told to the ghost state).
fn released(verbs: &[Verb<'_>], lock: LockRef) -> Result<(), IndexError> {
    check_unlocked(verbs)?;
    leaf_store::ghost::put_lock(lock.lt_addr);
    Ok(())
}

fn may_remain(lock: LockRef, cause: IndexError, release: IndexError) -> IndexError {
    if let IndexError::Transport(TransportError::Fenced(node)) = release {
        // The memory node cut this compute node off and recovers its locks itself.
        return IndexError::Fenced { node };
    }
    IndexError::LockMayRemain {
        node: lock.node,
        slot: lock.slot,
        leaf: lock.leaf,
        cause: if cause == release {
            format!("{cause}, also when releasing")
        } else {
            format!("{cause}; releasing: {release}")
        },
    }
}

/// Whether the lock CAS at index 0 of a lock batch that failed with `error` may hold the lock: it
/// executed and swapped, or the endpoint broke and cannot tell which of its verbs executed.
pub(super) fn may_hold_lock(verbs: &[Verb<'_>], error: &TransportError) -> bool {
    verbs.first().and_then(Verb::cas_succeeded) == Some(true)
        || matches!(error, TransportError::Broken(_))
}
