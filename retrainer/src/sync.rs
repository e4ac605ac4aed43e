//! The one place that chooses between `std`, loom and the seeded scheduler's primitives,
//! mirroring `std`'s paths (`crate::sync::thread::sleep`, `crate::sync::time::Instant`).
//! Everything else in the crate names these, never `std::thread`, `std::time::Instant` or
//! `loom` directly.
//!
//! A plain build uses `std`'s. With the `simulation` feature (the seeded whole-store simulation
//! turns it on) they are `sim_scheduler`'s, which are `std`'s outside a seeded run; inside one,
//! sleeps and yields are sync points at which the run's seed picks the next thread, and the
//! clock is virtual (lease checks, grace periods, drains and backoff follow it). The worker owns
//! everything else it touches: its only shared state is remote memory, reached through verbs
//! (each a sync point of the simulator).

#[cfg(feature = "simulation")]
use sim_scheduler as rt;

/// `std`, under the seeded scheduler's paths.
#[cfg(not(feature = "simulation"))]
mod rt {
    pub(crate) use std::{thread, time};
}

pub(crate) mod thread {
    /// Lets another thread go first while the worker waits for one (loom's in loom builds).
    #[cfg(not(loom))]
    pub(crate) use super::rt::thread::yield_now;
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;

    pub(crate) use super::rt::thread::sleep;
}

pub(crate) mod time {
    pub use super::rt::time::{Duration, Instant};
}

/// A named step of a protocol: in a seeded run, a place where the fault plan may stop the
/// memory node's process (between two verbs whose order a compute node could observe); a
/// no-op anywhere else. Named as `"<protocol>: <what is done>"`.
#[cfg(feature = "simulation")]
pub(crate) use sim_scheduler::step;

/// A named step of a protocol (see the `simulation` build): nothing without the seeded scheduler.
#[cfg(not(feature = "simulation"))]
#[inline(always)]
pub(crate) fn step(_name: &'static str) {}
