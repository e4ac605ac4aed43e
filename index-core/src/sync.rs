//! The one place that chooses between `std`, loom and the seeded scheduler's primitives,
//! mirroring `std`'s paths (`crate::sync::Mutex`, `crate::sync::atomic::AtomicU64`,
//! `crate::sync::thread::sleep`, `crate::sync::time::Instant`). Everything else in the crate
//! names these, never `std::sync`, `std::thread`, `std::time::Instant` or `loom` directly.
//!
//! - A plain build uses `std`'s: the seeded scheduler is no dependency of the library.
//! - With the `simulation` feature (the seeded whole-store simulation turns it on), they are
//!   `sim_scheduler`'s, which are `std`'s outside a seeded run; inside one, every lock, atomic
//!   operation, sleep and yield is a sync point at which the run's seed picks the next thread,
//!   and the clock is virtual (leases, backoff and re-read intervals follow it).
//! - Built with `RUSTFLAGS="--cfg loom"`, the data path's lock stripes and yields are loom's.
//!   Loom models leave membership out (no store joins, no renewer runs: `join_members` is off
//!   there), so the membership and epoch machinery keeps the other types in that build.

#[cfg(feature = "simulation")]
use sim_scheduler as rt;

/// `std`, under the seeded scheduler's paths.
#[cfg(not(feature = "simulation"))]
mod rt {
    pub(crate) use std::{sync, thread, time};
}

/// A lock the data path takes, and what it waits with (loom's in loom builds).
#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use rt::sync::{Condvar, Mutex};

/// What the membership and epoch machinery locks and waits with (never loom's: see above).
pub(crate) use rt::sync::{Condvar as MembershipCondvar, Mutex as MembershipMutex};

pub(crate) mod atomic {
    /// The data path's lock-stripe counters (loom's in loom builds).
    #[cfg(not(loom))]
    pub(crate) use super::rt::sync::atomic::AtomicUsize;
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::AtomicUsize;

    pub(crate) use super::rt::sync::atomic::{AtomicBool, AtomicU64, Ordering};
}

pub(crate) mod thread {
    #[cfg(not(loom))]
    pub(crate) use super::rt::thread::yield_now;
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;

    pub(crate) use super::rt::thread::{Builder, JoinHandle, sleep};
}

pub(crate) mod time {
    pub(crate) use super::rt::time::{Duration, Instant};
}

/// A named step of a protocol: in a seeded run, a place where the fault plan may stop this
/// compute node's process (between two round trips whose order another node could observe); a
/// no-op anywhere else. Named as `"<protocol>: <what is done>"`.
#[cfg(feature = "simulation")]
pub(crate) use sim_scheduler::step;

/// A named step of a protocol (see the `simulation` build): nothing without the seeded scheduler.
#[cfg(not(feature = "simulation"))]
#[inline(always)]
pub(crate) fn step(_name: &'static str) {}
