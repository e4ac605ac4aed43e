//! Errors of training and decoding.

/// Why a model could not be trained. Every one is a problem with the input, reported, never a panic.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrainError {
    /// ε must be in `1..=MAX_EPSILON`.
    #[error("error bound ε must be between 1 and {max}, not {0}", max = crate::MAX_EPSILON)]
    InvalidEpsilon(u64),
    /// δ must be in `1..=MAX_DELTA`.
    #[error("leaf size δ must be between 1 and {max}, not {0}", max = crate::MAX_DELTA)]
    InvalidDelta(u64),
    /// The fill (keys per bulk-loaded leaf) must be in `1..=δ`.
    #[error("fill must be between 1 and δ = {delta}, not {fill}")]
    InvalidFill {
        /// The fill asked for.
        fill: u64,
        /// The leaf size.
        delta: u64,
    },
    /// Keys must be strictly increasing.
    #[error("keys must be strictly increasing: {key} follows {previous}")]
    KeysNotIncreasing {
        /// The key before.
        previous: u64,
        /// The offending key.
        key: u64,
    },
    /// Positions must not decrease.
    #[error("position {position} of key {key} is below the previous key's")]
    PositionsDecreasing {
        /// The offending key.
        key: u64,
        /// Its position.
        position: u64,
    },
    /// A position beyond 48 bits.
    #[error("position {0} exceeds 48 bits")]
    PositionTooLarge(u64),
    /// No fixed-point intercept satisfied the bound for a segment. Proven impossible (see the
    /// `plr` module); reported rather than returning a model that could mispredict.
    #[error("internal error: no exact intercept for the segment starting at key {first_key}")]
    NoExactIntercept {
        /// First key of the segment.
        first_key: u64,
    },
    /// There was nothing to train on.
    #[error("a model needs at least one key")]
    NoKeys,
    /// A trained leaf with no keys (trained leaves must hold at least one key).
    #[error("trained leaf {0} is empty")]
    EmptyLeaf(u64),
    /// A trained leaf with more than δ keys.
    #[error("trained leaf {leaf} holds {count} keys, more than δ = {delta}")]
    LeafOverfull {
        /// The leaf.
        leaf: u64,
        /// Its key count.
        count: usize,
        /// The leaf size.
        delta: u64,
    },
}

/// Why encoded bytes were rejected.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the header or the lengths it announces.
    #[error("truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// Not this kind of encoding.
    #[error("bad magic {0:#018x}")]
    BadMagic(u64),
    /// An encoding version this build does not read.
    #[error("unsupported encoding version {0}")]
    UnsupportedVersion(u64),
    /// The checksum does not match: the bytes were corrupted.
    #[error("checksum mismatch: the encoding is corrupted")]
    ChecksumMismatch,
    /// The fields are individually readable but inconsistent.
    #[error("inconsistent encoding: {0}")]
    Inconsistent(&'static str),
}
