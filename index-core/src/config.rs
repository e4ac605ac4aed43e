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
    /// Attempts a read makes when data keeps changing under it (stale cache, torn leaves), at
    /// least: it gives up only once it has made these and `wait_limit` has passed too.
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
        }
    }
}
