//! The one place that chooses between loom and the seeded scheduler's primitives, mirroring
//! `std`'s paths (`crate::sync::thread::yield_now`). The crate's shared state is remote memory,
//! reached through verbs; the only primitive it needs of its own is a yield while it waits for
//! another compute node (loom's in loom builds; `sim_scheduler`'s otherwise, which is `std`'s
//! outside a seeded run and a sync point inside one).

pub(crate) mod thread {
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;
    #[cfg(not(loom))]
    pub(crate) use sim_scheduler::thread::yield_now;
}
