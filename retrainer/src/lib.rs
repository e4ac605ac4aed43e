//! Memory-node retraining with shadow redirection (`docs/ARCHITECTURE.md` §7).
//!
//! Compute nodes queue a model slot whose SLT reaches the threshold
//! ([`leaf_store::queue::enqueue`]). The
//! memory node's [`Retrainer`] (one core, beside an in-process pool or inside `rolex memnode`)
//! takes the most urgent queued slot, walks its chains in key order, and trains a new model on the
//! leaves as they stand — no data is moved: every non-empty leaf, trained or synonym, becomes a
//! trained leaf of the new record. Shadow redirection then swaps the slot to the new record while
//! compute nodes keep reading the old one. Every atomic on a word compute nodes also touch goes
//! through an `Endpoint` (RDMA atomics are not atomic with CPU atomics).
//!
//! # Example: start a retrainer beside a pool
//!
//! ```
//! # #[cfg(loom)] fn main() {} // the simulator's loom build runs only inside loom models
//! # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! use leaf_store::{BulkLoadConfig, Layout, bulk_load, queue, required_pool_bytes};
//! use rdma_transport::Transport;
//! use retrainer::{RetrainConfig, Retrainer};
//! use sim_transport::SimTransport;
//!
//! let config = BulkLoadConfig::default();
//! let size = required_pool_bytes(50_000, &config, 1_000).next_multiple_of(8);
//! let memory_node = SimTransport::anonymous(&[size])?;
//! let node = memory_node.memory_nodes()[0];
//! let pairs = (0..50_000u64).map(|k| (k * 7, k)).collect();
//! let layout: Layout = bulk_load(&mut memory_node.endpoint()?, node, pairs, &config)?.layout;
//!
//! // The worker, driven step by step: a compute node queues slot 3, the worker takes it from
//! // the ring and retrains it (a new record beside the old one, then the slot is redirected).
//! let mut worker = Retrainer::new(memory_node.endpoint()?, node, RetrainConfig::default())?;
//! queue::enqueue(&mut memory_node.endpoint()?, &layout, 3)?;
//! assert_eq!(worker.poll()?, 1);
//! let report = worker.retrain_next()?.expect("slot 3 was queued");
//! assert_eq!(report.slot, 3);
//!
//! // Or on its own thread (one memory-node core), until told to stop; it stops by itself only
//! // if its transport is gone.
//! let stop = Arc::new(AtomicBool::new(false));
//! let running = {
//!     let stop = Arc::clone(&stop);
//!     std::thread::spawn(move || worker.run(|| stop.load(Ordering::Acquire)))
//! };
//! stop.store(true, Ordering::Release);
//! let stats = running.join().expect("no panic")?;
//! assert_eq!(stats.retrains, 1);
//! # Ok(()) }
//! ```

pub mod problem;
mod sync;
mod worker;

#[cfg(loom)]
pub use worker::broken;
pub use worker::{
    MemberStats, ModelSpace, PoolUsage, PreparedSwap, Recovery, RetrainConfig, RetrainError,
    RetrainReport, RetrainStats, Retrainer, RollForward, recovery_steps,
};
