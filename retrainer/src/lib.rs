//! Memory-node retraining with shadow redirection (DESIGN.md §7).
//!
//! Compute nodes queue a model slot whose SLT reaches the threshold ([`queue::enqueue`]). The
//! memory node's [`Retrainer`] (one core, beside an in-process pool or inside `rolex memnode`)
//! takes the most urgent queued slot, walks its chains in key order, and trains a new model on the
//! leaves as they stand — no data is moved: every non-empty leaf, trained or synonym, becomes a
//! trained leaf of the new record. Shadow redirection then swaps the slot to the new record while
//! compute nodes keep reading the old one. Every atomic on a word compute nodes also touch goes
//! through an `Endpoint` (RDMA atomics are not atomic with CPU atomics).

pub mod queue;
mod worker;

pub use worker::{
    PreparedSwap, Recovery, RetrainConfig, RetrainError, RetrainReport, RetrainStats, Retrainer,
};
