//! The transport contract every other ROLEX crate is written against.
//!
//! A compute node reaches remote memory only through one-sided verbs: `READ`, `WRITE`, 8-byte
//! compare-and-swap (`CAS`) and fetch-and-add (`FAA`). This crate defines that contract and nothing
//! else, so index code runs unchanged over the shared-memory simulator (`sim-transport`) and over
//! real RDMA NICs (the `verbs` feature).
//!
//! * [`RemoteAddr`] — memory-node id (16 bits) and byte offset (48 bits), packable into one `u64`.
//! * [`Transport`] — what a process holds: knows the memory nodes and hands out one [`Endpoint`]
//!   per thread (one RC queue pair per thread per memory node on real hardware).
//! * [`Endpoint`] — `read`, `write`, `cas`, `faa`, and [`Endpoint::batch`]: a doorbell batch whose
//!   verbs are executed **in order** by the memory node and cost **one round trip**.
//! * [`Stats`] — per-endpoint counters; every network figure the project reports comes from them.
//! * [`conformance`] — a test suite written once and run against every implementation.

mod addr;
pub mod conformance;
mod endpoint;
mod error;
mod stats;
mod verb;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use addr::{MAX_OFFSET, RemoteAddr};
pub use endpoint::{Endpoint, MemoryNodeInfo, Transport, validate_verb};
pub use error::TransportError;
pub use stats::Stats;
pub use verb::Verb;

#[cfg(target_endian = "big")]
compile_error!(
    "ROLEX lays remote words out in little-endian byte order; big-endian hosts are not supported"
);
