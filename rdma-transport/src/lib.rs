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
//!   verbs are executed **in order** by the memory node and cost **one round trip**; or
//!   [`Endpoint::post`] and [`Endpoint::poll`]: the same batch posted without waiting, several in
//!   flight at once, each taken back as a [`Completion`] named by its [`Ticket`]; [`wait`]
//!   awaits one from an async operation.
//! * [`Stats`] — per-endpoint counters; every network figure the project reports comes from them.
//! * Limits — [`MAX_BATCH_VERBS`] and [`MAX_BATCH_BYTES`] per batch, enforced by every backend;
//!   [`Endpoint::batches`] splits larger work into consecutive batches.
//! * [`conformance`] — a test suite written once and run against every implementation.
//!
//! # Example: a new transport, checked by the conformance suite
//!
//! A toy transport whose one memory node is a byte vector behind a mutex (the simulator in
//! `sim-transport` does it properly, with atomics and cross-process pools). Implementing
//! [`Endpoint::batch`] is all it takes; [`validate_batch`], [`validate_verb`] and
//! [`Stats::record_verb`] keep limits, errors and counters identical across backends, and
//! [`conformance::run_all`] checks the contract.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use rdma_transport::conformance::{self, Scratch};
//! use rdma_transport::{
//!     Endpoint, MemoryNodeInfo, Stats, Transport, TransportError, Verb, validate_batch,
//!     validate_verb,
//! };
//!
//! #[derive(Clone)]
//! struct Toy {
//!     memory: Arc<Mutex<Vec<u8>>>,
//!     nodes: [MemoryNodeInfo; 1],
//! }
//!
//! struct ToyEndpoint {
//!     toy: Toy,
//!     stats: Stats,
//! }
//!
//! impl Transport for Toy {
//!     type Endpoint = ToyEndpoint;
//!     fn endpoint(&self) -> Result<ToyEndpoint, TransportError> {
//!         Ok(ToyEndpoint { toy: self.clone(), stats: Stats::default() })
//!     }
//!     fn memory_nodes(&self) -> &[MemoryNodeInfo] {
//!         &self.nodes
//!     }
//! }
//!
//! fn word(memory: &[u8], at: usize) -> u64 {
//!     u64::from_le_bytes(memory[at..at + 8].try_into().expect("8 bytes"))
//! }
//!
//! impl Endpoint for ToyEndpoint {
//!     fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
//!         // Validate everything — the batch limits, then each verb — before executing anything.
//!         validate_batch(verbs)?;
//!         for verb in verbs.iter() {
//!             validate_verb(verb, &self.toy.nodes)?;
//!         }
//!         if verbs.is_empty() {
//!             return Ok(());
//!         }
//!         let mut memory = self.toy.memory.lock().expect("not poisoned");
//!         self.stats.batches += 1;
//!         for verb in verbs.iter_mut() {
//!             let at = verb.addr().offset() as usize;
//!             match verb {
//!                 Verb::Read { buf, .. } => buf.copy_from_slice(&memory[at..at + buf.len()]),
//!                 Verb::Write { data, .. } => memory[at..at + data.len()].copy_from_slice(data),
//!                 Verb::Cas { expected, desired, old, .. } => {
//!                     *old = word(&memory, at);
//!                     if *old == *expected {
//!                         memory[at..at + 8].copy_from_slice(&desired.to_le_bytes());
//!                     }
//!                 }
//!                 Verb::Faa { add, old, .. } => {
//!                     *old = word(&memory, at);
//!                     memory[at..at + 8].copy_from_slice(&old.wrapping_add(*add).to_le_bytes());
//!                 }
//!             }
//!             self.stats.record_verb(verb);
//!         }
//!         Ok(())
//!     }
//!     fn stats(&self) -> Stats {
//!         self.stats
//!     }
//! }
//!
//! let toy = Toy {
//!     memory: Arc::new(Mutex::new(vec![0; 1 << 20])),
//!     nodes: [MemoryNodeInfo { id: 0, region_len: 1 << 20 }],
//! };
//! // Panics, naming the broken guarantee, if the transport breaks the contract.
//! conformance::run_all(&toy, Scratch::new(0, 0, 1 << 20));
//! ```

mod addr;
pub mod conformance;
pub mod device_limits;
mod endpoint;
mod error;
mod fence_notice;
pub mod gid;
mod limits;
pub mod memlock;
mod peers;
mod posted;
mod stats;
mod verb;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wait;
pub mod work_completion;

pub use addr::{MAX_OFFSET, RemoteAddr};
pub use endpoint::{Endpoint, Fence, Fenced, MemoryNodeInfo, Transport, validate_verb};
pub use error::TransportError;
pub use limits::{MAX_BATCH_BYTES, MAX_BATCH_VERBS, batch_bytes, validate_batch};
pub use posted::{Completion, PostedBatch, Ticket};
pub use stats::Stats;
pub use verb::Verb;

#[cfg(target_endian = "big")]
compile_error!(
    "ROLEX lays remote words out in little-endian byte order; big-endian hosts are not supported"
);
