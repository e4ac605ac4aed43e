//! The ROLEX store: memory-node bootstrap and the compute-node client.
//!
//! A compute node opens a [`Store`] over any `rdma_transport::Transport` — it needs only the
//! memory nodes' superblocks — and gives each thread a [`Client`]. Every request is served with
//! one-sided verbs through cached, possibly stale models; no memory-node CPU is involved:
//!
//! * `get` — one round trip with a fresh cache: the owner's chain (or the predicted range, in
//!   [`CacheMode::Lean`]) and the record's header word, in one batch;
//! * `insert`, `update`, `delete`, `upsert` — lock the owner's LT entry by CAS with the chain
//!   re-read behind it in the same batch, then write and unlock: two round trips, three when a
//!   leaf splits into a new synonym leaf;
//! * `scan` — the owner's chain and the following ones in one batch where possible.
//!
//! [`bootstrap`] bulk-loads one or more range-partitioned memory nodes. The protocols and their
//! ordering arguments are in `docs/ARCHITECTURE.md` §6.

mod backoff;
mod bootstrap;
mod client;
mod config;
mod error;
mod locks;
mod stats;
mod store;
mod sync;
mod view;

pub use bootstrap::{bootstrap, bootstrap_with_progress};
pub use client::Client;
#[cfg(loom)]
pub use config::SplitOrder;
pub use config::{CacheMode, StoreConfig};
pub use error::IndexError;
pub use stats::{OpCounters, OpKind, OpStats};
pub use store::Store;
