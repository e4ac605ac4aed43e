//! The batch that ends a write, as it is built: its verbs in order, and where the verbs its
//! runner checks stand (`release.rs` runs it).
//!
//! Invariant: the place of the link CAS and of the header bump in a batch is recorded when each
//! is pushed ([`Ending::link`], [`Ending::bump`]), never counted, so a step added before them
//! cannot make the runner check the wrong verb.

use leaf_store::{LeafStoreError, LeafTableEntry, ModelHeader};
use rdma_transport::Verb;

use crate::IndexError;

/// The verbs of one batch of a write: inline, no heap allocation per operation.
pub(super) type Verbs<'a> = smallvec::SmallVec<[Verb<'a>; 12]>;

/// The verbs of a batch that ends a write, and where the two its runner checks stand — recorded
/// as they are placed, never counted: the link CAS on the LT entry, and a structural change's
/// header bump.
#[derive(Debug, Default)]
pub(super) struct Ending<'a> {
    verbs: Verbs<'a>,
    link: Option<usize>,
    bump: Option<usize>,
}

impl<'a> Ending<'a> {
    /// Places the CAS that links a leaf in the (held) LT entry: it must find the entry as held.
    pub(super) fn link(&mut self, cas: Verb<'a>) {
        self.link = Some(self.verbs.len());
        self.verbs.push(cas);
    }

    /// Places a structural change's header bump (an FAA, built [`unexecuted`]: after a failure
    /// its `old` says whether it ran, and a repeat resumes after it).
    pub(super) fn bump(&mut self, faa: Verb<'a>) {
        debug_assert!(matches!(faa, Verb::Faa { .. }), "the bump is an FAA");
        self.bump = Some(self.verbs.len());
        self.verbs.push(unexecuted(faa, NOT_EXECUTED));
    }

    /// Whether the batch makes a structural change (it has a header bump).
    pub(super) fn is_structural(&self) -> bool {
        self.bump.is_some()
    }

    /// Whether the bump executed (its `old` is the header it found).
    pub(super) fn bumped(&self) -> Option<ModelHeader> {
        self.bump
            .and_then(|at| self.verbs.get(at))
            .and_then(Verb::old_value)
            .filter(|&old| old != NOT_EXECUTED)
            .map(ModelHeader::from_raw)
    }

    /// The link CAS swapped — or, when the batch is being repeated, had swapped before.
    pub(super) fn check_link(&self, repeated: bool) -> Result<(), IndexError> {
        let Some(at) = self.link else {
            return Ok(());
        };
        match &self.verbs[at] {
            Verb::Cas {
                expected,
                desired,
                old,
                ..
            } if old == expected || (repeated && old == desired) => Ok(()),
            _ => Err(LeafStoreError::CorruptLeaf("LT entry changed under its lock").into()),
        }
    }
}

impl<'a> std::ops::Deref for Ending<'a> {
    type Target = Verbs<'a>;
    fn deref(&self) -> &Verbs<'a> {
        &self.verbs
    }
}

impl<'a> std::ops::DerefMut for Ending<'a> {
    fn deref_mut(&mut self) -> &mut Verbs<'a> {
        &mut self.verbs
    }
}

impl<'a> Extend<Verb<'a>> for Ending<'a> {
    fn extend<I: IntoIterator<Item = Verb<'a>>>(&mut self, verbs: I) {
        self.verbs.extend(verbs);
    }
}

/// How the unlock CAS that ends a write's batch sets the LT entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unlock {
    /// The entry it leaves (unlocked by the CAS).
    pub(super) entry: LeafTableEntry,
    /// Whether it is fenced behind the verbs before it.
    pub(super) fenced: bool,
}

/// The `old` an atomic of a write keeps if it did not execute: neither the leaf allocation
/// counter nor a header word can hold it.
pub(super) const NOT_EXECUTED: u64 = u64::MAX;

/// `verb` (a CAS or FAA) with its `old` field preset to `sentinel`, so that after a failed batch
/// an unchanged field means "not executed".
pub(super) fn unexecuted(mut verb: Verb<'_>, sentinel: u64) -> Verb<'_> {
    if let Verb::Cas { old, .. } | Verb::Faa { old, .. } = &mut verb {
        *old = sentinel;
    }
    verb
}
