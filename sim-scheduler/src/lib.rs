//! A seeded, replayable scheduler for simulating a whole concurrent system in one process.
//!
//! [`run`] starts a *run*: its first thread, and every thread spawned from it through
//! [`thread`], are real OS threads of which exactly one executes at a time. At every sync
//! point — a [`sync::Mutex`] lock, an operation on a [`sync::atomic`] type, a
//! [`thread::sleep`] or [`thread::yield_now`], a spawn, or a [`point`] the system declares
//! (the RDMA simulator declares one per verb) — the run's strategy, fed by its seed, picks the
//! thread that goes next: uniformly at random, or by PCT ([`Strategy`]). Time in a run is
//! virtual ([`time::Instant`]): sleeps cost no wall-clock time, and a [`Group`] of threads — a
//! simulated process — can be [`pause`]d past any deadline. A run that fails reports its seed,
//! and running the seed again makes the same choices (see [`Report::trace`]).
//!
//! Outside a run every primitive is its `std` namesake, so a crate's `sync` shim can re-export
//! these types in every build: production pays one thread-local read per operation.
//!
//! Why not `shuttle`: shuttle runs a test's threads as continuations on one OS thread, with
//! its own primitives chosen at compile time. The store's code keeps thread-local state
//! (crossbeam-epoch's pins) that shuttle's threads would share, a cargo feature selecting
//! shuttle would be unified into every test of the workspace, and shuttle has no virtual clock
//! for leases. The strategies here are shuttle's two (random, PCT); the mutation table in
//! `docs/ARCHITECTURE.md` is the evidence that they find what they should.

pub mod ghost;
mod run;
mod strategy;
pub mod sync;
pub mod thread;
pub mod time;

pub use run::{
    Config, Group, Outcome, Report, current_group, disarm_step_pause, fail, is_paused,
    is_simulated, new_group, pause, pause_at_step, pause_at_step_then, point, random_u64, run,
    step,
};
pub use strategy::Strategy;

#[cfg(test)]
mod tests;
