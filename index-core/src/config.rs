//! Client configuration.

use std::time::Duration;

/// What a compute node caches of each model slot (`docs/ARCHITECTURE.md` §6, "Cache modes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// The models, every trained leaf's pivot and the LT entries that differ from the trained
    /// layout: the owner leaf is known locally and a GET reads only the owner's chain (about 8
    /// bytes per trained leaf).
    #[default]
    Pivots,
    /// The models and a compressed LT (a base leaf number per slot plus the entries that differ):
    /// a GET reads every chain of the predicted range; writes fetch the pivots they need.
    Lean,
}

/// Loom builds only: what a GET trusts in the leaves it reads without the header word (the wrong
/// variant exists so that a loom model can show it is caught).
#[cfg(loom)]
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

/// The order of a split's steps (loom builds only: the wrong orders exist so that a loom model can
/// show they are caught).
#[cfg(loom)]
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

/// Whether a writer's own structural change is applied to its compute node's cached view (loom
/// builds only: the wrong variant exists so that a loom model can show it is caught).
#[cfg(loom)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdoptChanges {
    /// Only when the header words the change's atomics returned show nothing else changed the
    /// record since the view's header (ARCHITECTURE §6, "A writer's own changes").
    #[default]
    Checked,
    /// Wrong: into whatever view of the record is cached, with the header the bump returned.
    Unchecked,
}

/// What a writer trusts of a chain it locked through its view without reading the header (loom
/// builds only: the wrong variants exist so that loom models can show they are caught).
#[cfg(loom)]
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

/// How a [`crate::Store`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// What to cache per slot.
    pub cache_mode: CacheMode,
    /// Bytes this compute node may cache in all (slot views and directories, as
    /// [`crate::Store::cache_bytes`] counts them; default: no limit). Over it, views lose
    /// their pivots (pivots mode), then the least recently used are evicted and read again
    /// when next used (ARCHITECTURE §6, "Cache budget").
    pub cache_budget: Option<u64>,
    /// How long a writer waits, with exponential backoff, for a leaf lock held by another compute
    /// node, for a full slot to be retrained, or for freed value blocks to pass the memory node's
    /// reuse horizon (which stands still while no worker watches leases or a dead member waits
    /// for recovery), before giving up with an error.
    pub wait_limit: Duration,
    /// Attempts a read makes when data keeps changing under it (stale cache, torn leaves).
    pub max_attempts: u32,
    /// A slot whose SLT reaches this many used entries is queued for retraining (paper: 128).
    pub retrain_threshold: u64,
    /// How many times in a row a held leaf lock may be handed to another thread of this compute
    /// node without being released remotely.
    pub max_handovers: u32,
    /// Join every memory node's membership table when the store opens (default; off in loom
    /// builds). A member's locks carry its tag, so a memory node that declares it dead can find
    /// and recover them, and its announcements hold reclamation back while it may use a retired
    /// record. A store that did not join takes locks no recovery will release, and must not be
    /// used with a memory node that watches leases (`rolex memnode`, `Retrainer::watch_members`):
    /// that memory node reclaims records without waiting for it (one that does not watch keeps
    /// its grace period, which such a store relies on).
    pub join_members: bool,
    /// How often the lease of every membership is renewed (one CAS per memory node), by a
    /// background thread (default 5 ms). Memory nodes declare a member dead when its lease
    /// has not been renewed for their lease time (`rolex memnode --lease-ms`, default 250 ms).
    pub lease_renewal: Duration,
    /// Loom builds only: the order of a split's steps.
    #[cfg(loom)]
    pub split_order: SplitOrder,
    /// Loom builds only: whether a reader confirms a retired record against the slot table
    /// before accepting what it read through it (always, outside loom builds; loom models switch
    /// it off to show the check is needed).
    #[cfg(loom)]
    pub confirm_retired: bool,
    /// Loom builds only: whether a split's shrinking WRITE is fenced behind the header bump
    /// (always, outside loom builds; loom models switch it off to show the fence is needed).
    #[cfg(loom)]
    pub fence_shrink: bool,
    /// Loom builds only: how a GET's first READ of the leaves alone is trusted (always by claims,
    /// outside loom builds; loom models switch to trusting any leaf to show claims are needed).
    #[cfg(loom)]
    pub gets_trust: GetsTrust,
    /// Loom builds only: whether a reader that confirms a retired record also checks that no
    /// slot was published beyond its directory (always, outside loom builds; loom models switch
    /// it off to show a slot split needs it).
    #[cfg(loom)]
    pub confirm_slot_count: bool,
    /// Loom builds only: how a writer's own structural change reaches its cached view (always
    /// checked, outside loom builds; loom models switch the check off to show it is needed).
    #[cfg(loom)]
    pub adopt_changes: AdoptChanges,
    /// Loom builds only: what a writer trusts of a chain it has not confirmed (always claims and
    /// the split's header check, outside loom builds).
    #[cfg(loom)]
    pub writer_trust: WriterTrust,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            cache_mode: CacheMode::Pivots,
            cache_budget: None,
            wait_limit: Duration::from_secs(2),
            max_attempts: 10_000,
            retrain_threshold: 128,
            max_handovers: 8,
            join_members: !cfg!(loom),
            lease_renewal: Duration::from_millis(5),
            #[cfg(loom)]
            split_order: SplitOrder::Safe,
            #[cfg(loom)]
            confirm_retired: true,
            #[cfg(loom)]
            fence_shrink: true,
            #[cfg(loom)]
            confirm_slot_count: true,
            #[cfg(loom)]
            gets_trust: GetsTrust::Claims,
            #[cfg(loom)]
            adopt_changes: AdoptChanges::Checked,
            #[cfg(loom)]
            writer_trust: WriterTrust::Claims,
        }
    }
}
