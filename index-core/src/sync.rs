//! The one place that chooses between loom and the seeded scheduler's primitives, mirroring
//! `std`'s paths (`crate::sync::Mutex`, `crate::sync::atomic::AtomicU64`,
//! `crate::sync::thread::sleep`, `crate::sync::time::Instant`). Everything else in the crate
//! names these, never `std::sync`, `std::thread`, `std::time::Instant` or `loom` directly.
//!
//! - `sim_scheduler`'s types are `std`'s outside a seeded run; inside one, every lock, atomic
//!   operation, sleep and yield is a sync point at which the run's seed picks the next thread,
//!   and the clock is virtual (leases, backoff and re-read intervals follow it).
//! - Built with `RUSTFLAGS="--cfg loom"`, the data path's lock stripes and yields are loom's.
//!   Loom models leave membership out (no store joins, no renewer runs: `join_members` is off
//!   there), so the membership and epoch machinery keeps the scheduler's types in that build —
//!   `std`'s, as no seeded run exists there.

/// A lock the data path takes (loom's in loom builds).
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(not(loom))]
pub(crate) use sim_scheduler::sync::Mutex;

/// What the membership and epoch machinery locks and waits with (never loom's: see above).
pub(crate) use sim_scheduler::sync::{Condvar, Mutex as MembershipMutex};

pub(crate) mod atomic {
    /// The data path's lock-stripe counters (loom's in loom builds).
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::AtomicUsize;
    #[cfg(not(loom))]
    pub(crate) use sim_scheduler::sync::atomic::AtomicUsize;

    pub(crate) use sim_scheduler::sync::atomic::{AtomicBool, AtomicU64, Ordering};
}

pub(crate) mod thread {
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;
    #[cfg(not(loom))]
    pub(crate) use sim_scheduler::thread::yield_now;

    pub(crate) use sim_scheduler::thread::{Builder, JoinHandle, sleep};
}

pub(crate) mod time {
    pub(crate) use sim_scheduler::time::{Duration, Instant};
}

/// A named step of a protocol: in a seeded run, a place where the fault plan may stop this
/// compute node's process (between two round trips whose order another node could observe); a
/// no-op anywhere else. Named as `"<protocol>: <what is done>"`.
pub(crate) use sim_scheduler::step;
