//! The one place that chooses between `std`, loom and the seeded scheduler, mirroring `std`'s
//! paths (`crate::sync::Mutex`, `crate::sync::atomic::AtomicU64`, `crate::sync::thread::sleep`,
//! `crate::sync::time::Instant`). Everything else in the crate names these, never `std::sync`,
//! `std::thread`, `std::time::Instant` or `loom` directly.
//!
//! - Built with `RUSTFLAGS="--cfg loom"`, simulated remote memory is made of loom atomics, so
//!   loom explores every interleaving of the protocols running over the simulator.
//! - Otherwise the locks, threads, sleeps and clock are `sim_scheduler`'s, which are `std`'s
//!   outside a seeded run and sync points of the run inside one. Remote memory's words stay plain
//!   `std` atomics, the fastest there are: each verb that touches them is a sync point
//!   ([`verb_point`]), and in torn mode so is the gap between two words of a READ or WRITE.

#[cfg(loom)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::AtomicU64;
    pub(crate) use std::sync::atomic::Ordering;
}
#[cfg(not(loom))]
pub(crate) mod atomic {
    /// Remote memory's words: `std`'s (see the module's comment).
    pub(crate) use std::sync::atomic::AtomicU64;
    pub(crate) use std::sync::atomic::Ordering;
}

pub(crate) use std::sync::Arc;

#[cfg(not(loom))]
pub(crate) use sim_scheduler::sync::{Condvar, Mutex};
/// Test gates only: loom models never pause an endpoint.
#[cfg(loom)]
pub(crate) use std::sync::{Condvar, Mutex};

#[cfg(loom)]
pub(crate) mod thread {
    pub(crate) use loom::thread::yield_now;
    pub(crate) use std::thread::{sleep, spawn};
}
#[cfg(not(loom))]
pub(crate) mod thread {
    pub(crate) use sim_scheduler::thread::{sleep, spawn, yield_now};
}

#[cfg(not(loom))]
pub(crate) mod time {
    pub(crate) use sim_scheduler::time::{Duration, Instant};
}
#[cfg(loom)]
pub(crate) mod time {
    pub(crate) use std::time::{Duration, Instant};
}

/// A sequentially consistent fence between a verb and the next. A no-op under loom, whose model
/// makes every word access a read-modify-write (see `pool.rs`), which already orders them.
#[inline]
pub(crate) fn fence_seq_cst() {
    #[cfg(not(loom))]
    std::sync::atomic::fence(atomic::Ordering::SeqCst);
}

/// Whether the calling thread is in a seeded run (where time is virtual).
#[inline]
pub(crate) fn is_simulated() -> bool {
    #[cfg(not(loom))]
    {
        sim_scheduler::is_simulated()
    }
    #[cfg(loom)]
    {
        false
    }
}

/// The sync point before each verb: in a seeded run, another thread may go first.
#[inline]
pub(crate) fn verb_point() {
    #[cfg(not(loom))]
    sim_scheduler::point();
}

/// A seed for an endpoint's pseudo-random stream: from the run's seed in a seeded run (so a
/// replay tears and reorders the same way), else from a process-wide sequence.
pub(crate) fn endpoint_seed() -> u64 {
    #[cfg(not(loom))]
    {
        sim_scheduler::random_u64()
    }
    #[cfg(loom)]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
        SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
    }
}
