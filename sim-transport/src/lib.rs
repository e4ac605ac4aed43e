//! A shared-memory simulator of one-sided RDMA.
//!
//! Each memory node is a [`Pool`] of bytes that is only ever touched through 8-byte atomic words:
//! anonymous memory for tests, or a file mapped shared that a memory-node process and several
//! compute processes attach to — real one-sided access, with no remote CPU involved.
//!
//! [`SimTransport`] implements [`rdma_transport::Transport`]. Its endpoints copy READs and WRITEs
//! word by word, so a READ racing a WRITE tears at 8-byte granularity exactly as RDMA can; with
//! [`SimConfig::torn`] they yield between words so tearing becomes frequent and the validation
//! paths of the protocols above really run. Fault injection ([`SimEndpoint::fail_next`],
//! [`SimEndpoint::crash_after`], [`SimTransport::fail_next_verbs`], [`SimConfig::batch_delay`])
//! lets tests break a protocol half-way.
//!
//! ```
//! # #[cfg(loom)] fn main() {} // the loom build's atomics work only inside loom models
//! # #[cfg(not(loom))] fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rdma_transport::{Endpoint, RemoteAddr, Transport, Verb};
//! use sim_transport::SimTransport;
//!
//! let fabric = SimTransport::anonymous(&[1 << 20])?; // one memory node, 1 MiB
//! let mut ep = fabric.endpoint()?; // one per thread
//! let lock = RemoteAddr::new(0, 0).expect("offset fits in 48 bits");
//! let data = RemoteAddr::new(0, 64).expect("offset fits in 48 bits");
//! let mut leaf = [0u8; 256];
//! // One doorbell batch = one round trip: take a lock, and read what it guards behind it.
//! let mut verbs = [Verb::cas(lock, 0, 1), Verb::read(data, &mut leaf).fenced()];
//! ep.batch(&mut verbs)?;
//! assert_eq!(verbs[0].cas_succeeded(), Some(true));
//! assert_eq!(ep.stats().batches, 1);
//! # Ok(()) }
//! ```
//!
//! Built with `RUSTFLAGS="--cfg loom"`, the words are loom atomics (anonymous pools only), so loom
//! model-checks the protocols that run over the simulator.

pub mod cost_model;
mod endpoint;
#[cfg(loom)]
pub mod loom_support;
mod nic;
mod pool;
mod sync;
mod transport;

pub use endpoint::{Gate, SimEndpoint};
pub use pool::{Pool, PoolError};
pub use transport::{
    DEFAULT_PACKET_BYTES, MAX_PACKET_BYTES, Reordering, SimConfig, SimFence, SimTransport,
    WriteObserver,
};
