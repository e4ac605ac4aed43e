//! A CHIME-style index (Luo et al., SOSP '24) on one-sided RDMA verbs: B+-tree internal nodes
//! cached at compute nodes over leaves that are hopscotch hash tables, so that a lookup READs one
//! neighbourhood of a leaf rather than the whole leaf. It is the second baseline ROLEX is
//! measured against, beside `bplus-tree`, on the same `rdma-transport`.
//!
//! What this crate has so far is the leaf, whole and tested:
//! - [`Geometry`]: slots and neighbourhood size (CHIME's defaults, 64 and 8), and where each word
//!   of a leaf lies: a copy of the leaf's metadata (sibling, version, valid flag) heads every
//!   group of `H` slots, so any neighbourhood READ carries one;
//! - [`word`]: the self-checking slot and metadata words (this store's READs may tear between any
//!   two words, where CHIME's cache-line versions assume a 64-byte line lands whole);
//! - [`Leaf`]: hopscotch insert with displacement, remove, a split that keeps every key's slot,
//!   encoding; [`Window`]: a neighbourhood READ validated and looked up (CHIME's hop-bitmap
//!   check catches a displacement that landed during the READ);
//! - [`vacancy`]: the leaf's vacancy word, READ in the batch that takes the leaf's lock, which
//!   tells an insert whether its key's neighbourhood has room;
//! - [`pack`]: sorted keys packed into leaves in key order, as a bulk load lays them out.
//!
//! The tree over them (internal pages, the compute-side cache, the client's operations and its
//! place in `rolex compare`) is not written yet.

pub mod geometry;
pub mod leaf;
pub mod pack;
pub mod vacancy;
pub mod word;

pub use geometry::{Geometry, Span};
pub use leaf::{Full, Leaf, Lookup, Touched, Window};

/// What can go wrong.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChimeError {
    /// Bad parameters.
    #[error("invalid configuration: {0}")]
    Config(String),
}
