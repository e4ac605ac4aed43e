//! The ROLEX store: memory-node bootstrap and the compute-node client.
//!
//! A compute node opens a [`Store`] over any `rdma_transport::Transport` — it needs only the
//! memory nodes' superblocks — and gives each thread a [`Client`]. Every request is served with
//! one-sided verbs through cached, possibly stale models; no memory-node CPU is involved:
//!
//! * `get` — one round trip: a READ of the owner's chain (or the predicted range, in
//!   [`CacheMode::Lean`]), answered by the leaf that claims the key, even through a stale cache;
//!   when no leaf read claims it, a second round trip reads the chain with the record's header
//!   word and refreshes a stale cache;
//! * `insert`, `update`, `delete`, `upsert` — lock the owner's LT entry by CAS with the chain
//!   re-read behind it in the same batch, then write and unlock: two round trips, three when a
//!   leaf splits into a new synonym leaf;
//! * `scan` — the owner's chain and the following ones in one batch where possible.
//!
//! What a compute node caches can be held to a budget ([`StoreConfig::cache_budget`]): views lose
//! their pivots first, then the least recently used are evicted and read back, in one round trip,
//! when next used ([`Store::cache_stats`] says what is held).
//!
//! [`bootstrap`] bulk-loads one or more range-partitioned memory nodes. The protocols and their
//! ordering arguments are in `docs/ARCHITECTURE.md` §6.
//!
//! # Example: a store on a simulated memory node, four client threads, a retrainer beside it
//!
//! ```
//! # #[cfg(loom)] fn main() {} // the simulator's loom build runs only inside loom models
//! # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering};
//!
//! use index_core::{Store, StoreConfig, bootstrap};
//! use leaf_store::{BulkLoadConfig, required_pool_bytes};
//! use rdma_transport::Transport;
//! use retrainer::{RetrainConfig, Retrainer};
//! use sim_transport::SimTransport;
//!
//! // The memory node: a simulated pool, bulk-loaded with even keys.
//! let config = BulkLoadConfig::default();
//! let size = required_pool_bytes(100_000, &config, 20_000).next_multiple_of(8);
//! let transport = SimTransport::anonymous(&[size])?;
//! bootstrap(&transport, (0..100_000u64).map(|k| (2 * k, k)).collect(), &config)?;
//!
//! // Its retrainer, on its own thread, absorbs the synonym leaves inserts create.
//! let stop = Arc::new(AtomicBool::new(false));
//! let retrainer = {
//!     let (ep, node) = (transport.endpoint()?, transport.memory_nodes()[0]);
//!     let stop = Arc::clone(&stop);
//!     let mut worker = Retrainer::new(ep, node, RetrainConfig::default())?;
//!     std::thread::spawn(move || worker.run(|| stop.load(Ordering::Acquire)))
//! };
//!
//! // A compute node: one Store (the cached models), one Client per thread.
//! let store = Store::open(transport, StoreConfig::default())?;
//! std::thread::scope(|threads| {
//!     for t in 0..4u64 {
//!         let mut client = store.client().expect("endpoint");
//!         threads.spawn(move || {
//!             for i in 0..5_000u64 {
//!                 let key = 2 * (i * 4 + t) + 1; // odd keys: new ones
//!                 assert!(client.insert(key, key).expect("insert"));
//!                 assert_eq!(client.get(key).expect("get"), Some(key));
//!             }
//!         });
//!     }
//! });
//! let mut client = store.client()?;
//! assert_eq!(client.get(2 * 777)?, Some(777)); // a bulk-loaded key
//! assert!(client.update(1, 10)?);
//! assert!(client.delete(3)?);
//! let first = client.scan(0, 4)?; // keys ≥ 0, in order
//! assert_eq!(first, [(0, 0), (1, 10), (2, 1), (4, 2)]);
//!
//! stop.store(true, Ordering::Release);
//! retrainer.join().expect("no panic")?;
//! # Ok(()) }
//! ```
//!
//! # Example: byte values
//!
//! A pool bulk-loaded with a value region stores values of up to 64 KiB: each leaf entry holds an
//! 8-byte reference to a block of the memory node's value region (`docs/ARCHITECTURE.md` §12). A
//! GET takes two round trips, a PUT still two.
//!
//! ```
//! # #[cfg(loom)] fn main() {} // the simulator's loom build runs only inside loom models
//! # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use index_core::{Store, StoreConfig, bootstrap_values};
//! use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes};
//! use sim_transport::SimTransport;
//!
//! let load = BulkLoadConfig {
//!     values: Some(ValueConfig::with_bytes(16 << 20)), // a 16 MiB value region
//!     ..BulkLoadConfig::default()
//! };
//! let records: Vec<(u64, Vec<u8>)> =
//!     (0..1_000u64).map(|k| (k, format!("record {k}").into_bytes())).collect();
//! let size = required_pool_bytes(records.len() as u64, &load, 1_000).next_multiple_of(8);
//! let memory_node = SimTransport::anonymous(&[size])?;
//! bootstrap_values(&memory_node, records, &load, |_, _, _, _| {})?;
//! let store = Store::open(memory_node, StoreConfig::default())?;
//! let mut client = store.client()?;
//! client.put_value(5_000, b"a new record, of any length")?;
//! assert_eq!(client.get_value(7)?, Some(b"record 7".to_vec()));
//! let rows = client.scan_values(998, 3)?;
//! assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [998, 999, 5_000]);
//! assert!(client.get(7).is_err()); // a u64 operation on a pool of byte values
//! # Ok(()) }
//! ```

mod async_client;
mod backoff;
mod bootstrap;
mod budget;
mod client;
mod config;
mod epoch;
mod error;
mod full_leaves;
mod locks;
mod membership;
mod pipeline;
mod self_recovery;
mod stats;
mod store;
mod sync;
mod values;
mod view;

pub use async_client::{AsyncClient, Operation, block_on};
pub use bootstrap::{bootstrap, bootstrap_values, bootstrap_with_progress, partition};
pub use client::Client;
#[cfg(loom)]
pub use client::broken;
pub use config::{CacheMode, StoreConfig};
pub use error::IndexError;
pub use pipeline::{Busy, Done, Lane, Pipeline, Reply, Request, Session};
pub use stats::{OpCounters, OpKind, OpStats};
pub use store::{CacheStats, Store};
