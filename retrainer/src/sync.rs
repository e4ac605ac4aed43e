//! The one place that chooses between loom and the seeded scheduler's primitives, mirroring
//! `std`'s paths (`crate::sync::thread::sleep`, `crate::sync::time::Instant`). Everything else
//! in the crate names these, never `std::thread`, `std::time::Instant` or `loom` directly.
//!
//! `sim_scheduler`'s types are `std`'s outside a seeded run; inside one, sleeps and yields are
//! sync points at which the run's seed picks the next thread, and the clock is virtual (lease
//! checks, grace periods, drains and backoff follow it). The worker owns everything else it
//! touches: its only shared state is remote memory, reached through verbs (each a sync point of
//! the simulator).

pub(crate) mod thread {
    /// Lets another thread go first while the worker waits for one (loom's in loom builds).
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;
    #[cfg(not(loom))]
    pub(crate) use sim_scheduler::thread::yield_now;

    pub(crate) use sim_scheduler::thread::sleep;
}

pub(crate) mod time {
    pub use sim_scheduler::time::{Duration, Instant};
}

/// A named step of a protocol: in a seeded run, a place where the fault plan may stop the
/// memory node's process (between two verbs whose order a compute node could observe); a
/// no-op anywhere else. Named as `"<protocol>: <what is done>"`.
pub(crate) use sim_scheduler::step;
