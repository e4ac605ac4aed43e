//! Learned models for ROLEX: exact OptimalPLR, leaf-range prediction and the top-level index.
//!
//! * [`PlrBuilder`] / [`train`] — OptimalPLR (Xie et al. 2014, as in the PGM-index): the minimal
//!   number of [`Segment`]s such that every trained key's predicted position is within ε of its
//!   true position. Prediction is integer-only, so the bound holds exactly.
//! * [`LeafModel`] — one model slot's model over its trained leaves. Positions are **leaf-major**:
//!   key `j` of trained leaf `i` has position `i·δ + j`, for bulk-loaded leaves (filled with `m ≤ δ`
//!   keys) and retrained leaves (any count) alike, so no data moves. [`LeafModel::predicted_leaves`]
//!   is the paper's eq. 2; [`LeafModel::owner_candidates`] widens it by one position and contains
//!   the owner leaf of *every* key, trained or not.
//! * [`TopLevelIndex`] — maps a key to its model slot (the last slot whose first key is ≤ the key).
//! * [`serial`] — compact, versioned, checksummed encodings; corrupt input is an error.
//!
//! This crate depends on no transport: it is pure computation over sorted keys.
//!
//! # Example: train a PLR, then a leaf model, and query them
//!
//! ```
//! use learned_model::{LeafModel, ModelParams, train};
//!
//! // 10,000 sorted keys with gaps: an OptimalPLR with ε = 4 over (key, rank).
//! let keys: Vec<u64> = (0..10_000u64).map(|i| i * 37 + (i % 7) * 5).collect();
//! let segments = train(keys.iter().enumerate().map(|(rank, &k)| (k, rank as u64)), 4)?;
//! let segment = &segments[segments.partition_point(|s| s.first_key <= keys[1234]) - 1];
//! // Every trained key is predicted within ε of its position (one position of flooring slack).
//! assert!(segment.predict(keys[1234]).abs_diff(1234) <= 5);
//!
//! // A model slot's model over leaves of δ = 16 slots, 12 keys per leaf (leaf-major positions):
//! // the owner candidates of any key — trained or not — contain the leaf that owns it.
//! let params = ModelParams::new(4, 16)?;
//! let model = LeafModel::train_filled(params, &keys, 12)?;
//! assert_eq!(model.leaves(), keys.len().div_ceil(12) as u64);
//! let probe = keys[5000] + 1; // between two trained keys
//! assert!(model.owner_candidates(probe).contains(5000 / 12));
//! # Ok::<(), learned_model::TrainError>(())
//! ```

mod error;
mod hull;
mod leaf_model;
mod plr;
#[cfg(test)]
mod reference;
mod segment;
pub mod serial;
#[cfg(test)]
mod test_support;
mod top_level;

pub use error::{DecodeError, TrainError};
pub use leaf_model::{LeafModel, LeafRange, ModelParams};
pub use plr::{PlrBuilder, train};
pub use segment::Segment;
pub use top_level::TopLevelIndex;

/// Largest error bound accepted.
pub const MAX_EPSILON: u64 = 1 << 20;
/// Largest leaf size δ accepted (keys per leaf).
pub const MAX_DELTA: u64 = 1 << 12;
/// Largest position a model may hold (positions are 48-bit, like leaf numbers).
pub const MAX_POSITION: u64 = (1 << 48) - 1;

#[cfg(target_endian = "big")]
compile_error!(
    "ROLEX encodes models in little-endian byte order; big-endian hosts are not supported"
);
