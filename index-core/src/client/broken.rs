//! The broken variants of the store's protocols, compiled only into loom builds: each loom model
//! that guards an ordering claim runs the protocol as it is and as it must not be, and must catch
//! the second (ARCHITECTURE §6). Nothing here exists in any other build; [`Broken::default`] is the
//! protocol as the library runs it, and a model opens its store with
//! [`crate::Store::open_broken`] to switch one step to its wrong variant.
//!
//! Invariant: with `Broken::default()`, a loom build runs exactly the protocol every other build
//! runs.

use leaf_store::{LeafTableEntry, ModelHeader};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;

use super::{Client, Locked, check_unlocked};

/// Which steps of the protocols run in their wrong variant (all right by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken {
    /// The order of a split's steps.
    pub split_order: SplitOrder,
    /// Whether a reader confirms a retired record against the slot table before accepting what
    /// it read through it (wrong: off).
    pub confirm_retired: bool,
    /// Whether a split's shrinking WRITE is fenced behind the header bump (wrong: off).
    pub fence_shrink: bool,
    /// How a GET's first READ of the leaves alone is trusted.
    pub gets_trust: GetsTrust,
    /// Whether a reader that confirms a retired record also checks that no slot was published
    /// beyond its directory (wrong: off; a slot split needs it).
    pub confirm_slot_count: bool,
    /// How a writer's own structural change reaches its cached view.
    pub adopt_changes: AdoptChanges,
    /// What a writer trusts of a chain it has not confirmed.
    pub writer_trust: WriterTrust,
    /// How an operation in posting mode waits for a lock stripe.
    pub stripe_wait: StripeWait,
}

impl Default for Broken {
    fn default() -> Self {
        Self {
            split_order: SplitOrder::Safe,
            confirm_retired: true,
            fence_shrink: true,
            gets_trust: GetsTrust::Claims,
            confirm_slot_count: true,
            adopt_changes: AdoptChanges::Checked,
            writer_trust: WriterTrust::Claims,
            stripe_wait: StripeWait::Yields,
        }
    }
}

/// What a GET trusts in the leaves it reads without the header word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GetsTrust {
    /// A leaf that claims the key (ARCHITECTURE §4, "Claims"); otherwise the validated read.
    #[default]
    Claims,
    /// Wrong: whatever the leaves hold, claimed or not (a stale chain misses moved keys).
    AnyLeaf,
    /// No first READ: the validated read (leaves and header word) alone — the read a GET falls
    /// back to, whose ordering against a split's steps models of the fences examine directly.
    HeaderOnly,
}

/// The order of a split's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SplitOrder {
    /// SLT entry, new leaf and the link; header bump; shrink the split leaf; unlock.
    #[default]
    Safe,
    /// The reference design's order (`docs/ARCHITECTURE.md` §6, "Splits"): new leaf and SLT
    /// entry; header bump; shrink; link and unlock in one CAS.
    LinkLast,
    /// Shrink the split leaf first.
    ShrinkFirst,
}

/// Whether a writer's own structural change is applied to its compute node's cached view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdoptChanges {
    /// Only when the header words the change's atomics returned show nothing else changed the
    /// record since the view's header (ARCHITECTURE §6, "A writer's own changes").
    #[default]
    Checked,
    /// Wrong: into whatever view of the record is cached, with the header the bump returned.
    Unchecked,
}

/// What a writer trusts of a chain it locked through its view without reading the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriterTrust {
    /// A rewrite of a leaf that claims the key, its claim unchanged; a split whose slot claim
    /// returns the view's header; anything else after a header READ (ARCHITECTURE §6, "Writes").
    #[default]
    Claims,
    /// Wrong: a write that does not split trusts the view's chain without reading the header.
    CachedChain,
    /// Wrong: a split does not compare the header its slot claim returns.
    SplitUnchecked,
    /// Wrong: a split that found its chain stale, and computes the write again on a slot it
    /// claimed then, does not confirm its chain first.
    ClaimedSplitUnconfirmed,
    /// Wrong: an insert whose lock batch claimed a slot foreseeing a split takes its chain as
    /// confirmed whatever header the claim found.
    ForeseenUnchecked,
}

/// How a write in posting mode (one of several operations in flight on its thread) takes the
/// lock stripe of its leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StripeWait {
    /// It try-locks the stripe and, while a sibling operation of its thread holds it, yields to
    /// that sibling (ARCHITECTURE §6, "Operations in flight").
    #[default]
    Yields,
    /// Wrong: it blocks on the stripe as a synchronous call does — on a stripe a sibling of its
    /// own thread holds, which can go on only once this one yields: the thread deadlocks.
    Blocks,
}

impl<E: Endpoint> Client<E> {
    /// The split's third round trip in a deliberately wrong order (pos 0 only).
    pub(super) fn split_in_wrong_order(
        &mut self,
        locked: &mut Locked,
        writes: Vec<(RemoteAddr, Vec<u8>, bool)>,
        late: Vec<(RemoteAddr, Vec<u8>)>,
        linked: LeafTableEntry,
        pos: usize,
    ) -> Result<(), IndexError> {
        assert_eq!(
            pos, 0,
            "the wrong orders are modelled for splits of the trained leaf"
        );
        let new_leaf_writes = writes.iter().map(|(at, b, _)| Verb::write(*at, b));
        // `late`: the shrink, then the new leaf with the new key (which follows its first image).
        let shrink = late[..1].iter().map(|(at, b)| Verb::write(*at, b));
        let new_key = late[1..].iter().map(|(at, b)| Verb::write(*at, b));
        let bump = Verb::faa(locked.record, ModelHeader::CHANGE_ONE);
        let link_and_unlock =
            Verb::cas(locked.lt_addr, locked.lt_now.raw(), linked.unlocked().raw());
        let mut verbs: Vec<Verb<'_>> = match self.caches.broken.split_order {
            SplitOrder::LinkLast => new_leaf_writes
                .chain([bump])
                .chain(shrink)
                .chain(new_key)
                .chain([link_and_unlock])
                .collect(),
            SplitOrder::ShrinkFirst => shrink
                .chain(new_leaf_writes)
                .chain(new_key)
                .chain([bump, link_and_unlock])
                .collect(),
            SplitOrder::Safe => unreachable!("handled by split"),
        };
        self.ep.batch(&mut verbs)?;
        check_unlocked(&verbs)
    }
}
