//! The batches of a write, as they are built: where each verb whose result is read back stands
//! ([`Placed`]), and the batch that ends a write with the verbs its runner checks (`release.rs`
//! runs it).
//!
//! Invariant: the place of every verb whose result is read back is recorded when it is pushed
//! ([`place`], [`Ending::link`], [`Ending::bump`]), never counted, so a verb added before it
//! cannot make the reader look at the wrong one; and an ending batch's verbs follow the one order of
//! [`Step`] (`leaf_store::settle`), whose every prefix recovery finishes: a writer that placed a
//! step out of order fails every debug build's test that runs it.

use leaf_store::settle::Step;
use leaf_store::{LeafStoreError, LeafTableEntry, ModelHeader};
use rdma_transport::Verb;

use crate::IndexError;

/// The verbs of one batch of a write: inline, no heap allocation per operation.
pub(super) type Verbs<'a> = smallvec::SmallVec<[Verb<'a>; 12]>;

/// Where a verb whose result is read back was placed in its batch: returned by [`place`], the
/// one way such a verb is pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a verb placed to be read back"]
pub(super) struct Placed(usize);

/// Pushes `verb` onto `verbs` and says where it stands.
pub(super) fn place<'a>(verbs: &mut Verbs<'a>, verb: Verb<'a>) -> Placed {
    verbs.push(verb);
    Placed(verbs.len() - 1)
}

impl Placed {
    /// The `old` of the atomic placed here (`None` for a READ or WRITE).
    pub(super) fn old(self, verbs: &[Verb<'_>]) -> Option<u64> {
        verbs.get(self.0).and_then(Verb::old_value)
    }

    /// The `old` of the atomic placed here, built [`unexecuted`] with [`NOT_EXECUTED`]: `None`
    /// if it did not execute.
    pub(super) fn executed_old(self, verbs: &[Verb<'_>]) -> Option<u64> {
        self.old(verbs).filter(|&old| old != NOT_EXECUTED)
    }
}

/// The verbs of a batch that ends a write, and where the two its runner checks stand — recorded
/// as they are placed, never counted: the link CAS on the LT entry, and a structural change's
/// header bump.
#[derive(Debug)]
pub(super) struct Ending<'a> {
    verbs: Verbs<'a>,
    link: Option<usize>,
    bump: Option<usize>,
    /// The step the verbs pushed now belong to.
    step: Step,
}

impl Default for Ending<'_> {
    fn default() -> Self {
        Self {
            verbs: Verbs::new(),
            link: None,
            bump: None,
            step: Step::ValueBlock,
        }
    }
}

impl<'a> Ending<'a> {
    /// The verbs pushed from now on belong to `step`, which must not come before the current one
    /// (see [`Step`]).
    pub(super) fn enter(&mut self, step: Step) {
        debug_assert!(
            step >= self.step,
            "{step:?} placed after {:?}: a prefix of the batch would be one recovery cannot finish",
            self.step
        );
        self.step = step;
    }

    /// Places the CAS that links a leaf in the (held) LT entry: it must find the entry as held.
    pub(super) fn link(&mut self, cas: Verb<'a>) {
        self.enter(Step::Link);
        self.link = Some(self.verbs.len());
        self.verbs.push(cas);
    }

    /// Places a structural change's header bump (an FAA, built [`unexecuted`]: after a failure
    /// its `old` says whether it ran, and a repeat resumes after it).
    pub(super) fn bump(&mut self, faa: Verb<'a>) {
        debug_assert!(matches!(faa, Verb::Faa { .. }), "the bump is an FAA");
        self.enter(Step::Bump);
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

#[cfg(test)]
mod tests {
    use rdma_transport::RemoteAddr;

    use super::*;

    fn at(offset: u64) -> RemoteAddr {
        RemoteAddr::new(0, offset).expect("addr")
    }

    #[test]
    fn a_placed_verb_is_read_back_where_it_was_pushed() {
        let image = [0u8; 8];
        let mut verbs = Verbs::new();
        let lock = place(&mut verbs, Verb::cas(at(0), 1, 2));
        verbs.push(Verb::write(at(64), &image));
        let claim = place(&mut verbs, unexecuted(Verb::faa(at(8), 1), NOT_EXECUTED));
        let alloc = place(&mut verbs, unexecuted(Verb::faa(at(16), 1), NOT_EXECUTED));
        if let Verb::Cas { old, .. } = &mut verbs[0] {
            *old = 5;
        }
        if let Verb::Faa { old, .. } = &mut verbs[2] {
            *old = 9;
        }
        assert_eq!(lock.old(&verbs), Some(5));
        assert_eq!(claim.executed_old(&verbs), Some(9));
        // Not executed: its `old` kept the sentinel.
        assert_eq!(alloc.old(&verbs), Some(NOT_EXECUTED));
        assert_eq!(alloc.executed_old(&verbs), None);
    }

    #[test]
    fn the_link_and_the_bump_are_found_where_they_were_placed() {
        let image = [0u8; 16];
        let mut batch = Ending::default();
        batch.enter(Step::Leaves);
        batch.push(Verb::write(at(64), &image));
        batch.push(Verb::write(at(128), &image));
        batch.link(Verb::cas(at(8), 1, 2));
        batch.bump(Verb::faa(at(0), 1));
        batch.enter(Step::Shrink);
        batch.push(Verb::write(at(256), &image));
        assert!(batch.is_structural());
        assert!(matches!(batch.verbs[2], Verb::Cas { .. }));
        assert_eq!(batch.link, Some(2));
        assert_eq!(batch.bump, Some(3));
        // Not executed yet: the bump's `old` is the sentinel, so a repeat starts at the front.
        assert_eq!(batch.bumped(), None);
        if let Verb::Faa { old, .. } = &mut batch.verbs[3] {
            *old = 7;
        }
        assert_eq!(batch.bumped(), Some(ModelHeader::from_raw(7)));
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "placed after")]
    fn a_step_placed_out_of_order_is_refused() {
        let mut batch = Ending::default();
        batch.bump(Verb::faa(at(0), 1));
        // Leaf images after the bump: not the order whose every prefix recovery finishes.
        batch.enter(Step::Leaves);
    }
}
