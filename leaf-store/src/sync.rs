//! The one place that chooses between `std`, loom and the seeded scheduler's primitives,
//! mirroring `std`'s paths (`crate::sync::thread::yield_now`). The crate's shared state is remote
//! memory, reached through verbs; the only primitive it needs of its own is a yield while it
//! waits for another compute node: loom's in loom builds, `sim_scheduler`'s with the
//! `simulation` feature (`std`'s outside a seeded run, a sync point inside one), else `std`'s.

pub(crate) mod thread {
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;
    #[cfg(all(not(loom), feature = "simulation"))]
    pub(crate) use sim_scheduler::thread::yield_now;
    #[cfg(all(not(loom), not(feature = "simulation")))]
    pub(crate) use std::thread::yield_now;
}
