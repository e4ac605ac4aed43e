//! Choices drawn from a run's seed by generators of their own.
//!
//! *Invariant:* a choice added to the simulation draws from its own generator (its `salt`), so
//! every choice a seed made before it is made as it was, and old schedules replay.

use testkit::XorShift64;

/// A number drawn from the run's `seed` by a generator of its own (`salt` tells choices apart).
pub(crate) fn side_draw(seed: u64, salt: u64) -> u64 {
    XorShift64::new(seed ^ salt | 1).next_u64()
}
