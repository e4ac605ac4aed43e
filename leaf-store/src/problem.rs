//! What `verify` reports: one broken invariant of a pool each.

use std::fmt;

/// One broken invariant found by [`crate::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The leaf region's `alloc_num` exceeds its capacity, or is below the trained leaves.
    AllocNum {
        /// `alloc_num`.
        alloc_num: u64,
        /// Capacity.
        capacity: u64,
    },
    /// The model region or slot table is inconsistent.
    Table(String),
    /// A record cannot be read, or its header or contents are inconsistent.
    Record {
        /// Slot.
        slot: u64,
        /// What is wrong.
        reason: String,
    },
    /// A leaf cannot be read or is damaged.
    Leaf {
        /// Slot.
        slot: u64,
        /// Trained leaf index in the slot.
        leaf: u64,
        /// What is wrong.
        reason: String,
    },
    /// A leaf number is reachable from two places.
    LeafReachableTwice {
        /// The leaf number.
        leaf_num: u64,
    },
    /// A leaf number not below `alloc_num`.
    LeafNotAllocated {
        /// The leaf number.
        leaf_num: u64,
    },
    /// A chain's keys are not strictly increasing.
    ChainNotSorted {
        /// Slot.
        slot: u64,
        /// Trained leaf index.
        leaf: u64,
    },
    /// A key outside the range its chain's trained leaf owns.
    KeyOutsideOwner {
        /// Slot.
        slot: u64,
        /// Trained leaf index.
        leaf: u64,
        /// The key.
        key: u64,
    },
    /// An LT entry still locked (in a pool nobody is writing to).
    LockHeld {
        /// Slot.
        slot: u64,
        /// Trained leaf index.
        leaf: u64,
        /// The holder's member tag (0: a holder that had not joined).
        owner: u8,
    },
    /// An SLT slot handed out but linked into no chain (e.g. its writer crashed).
    OrphanSynonym {
        /// Slot.
        slot: u64,
        /// The SLT slot.
        slt_slot: u64,
    },
    /// A linked leaf's claim (ARCHITECTURE §4, "Claims") is wrong: outside its chain's range,
    /// overlapping an earlier leaf's, or missing on a leaf that holds keys.
    Claim {
        /// Slot.
        slot: u64,
        /// Trained leaf index.
        leaf: u64,
        /// What is wrong.
        reason: String,
    },
    /// A leaf no current record links claims keys: a reader reaching it through an old cache
    /// would take it for the keys' current state.
    StrayClaim {
        /// The leaf number.
        leaf_num: u64,
        /// The claimed range, inclusive.
        claim: (u64, u64),
    },
    /// The retraining ring is inconsistent.
    Ring(String),
    /// A key's value reference names no valid block of the value region.
    Value {
        /// The key.
        key: u64,
        /// What is wrong.
        reason: String,
    },
    /// A block marked in use that no leaf names (leaked), or the value region's header or chunk
    /// table is inconsistent.
    ValueRegion(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::AllocNum {
                alloc_num,
                capacity,
            } => write!(f, "alloc_num {alloc_num} with capacity {capacity}"),
            Problem::Table(s) => write!(f, "tables: {s}"),
            Problem::Record { slot, reason } => write!(f, "slot {slot}: {reason}"),
            Problem::Leaf { slot, leaf, reason } => write!(f, "slot {slot} leaf {leaf}: {reason}"),
            Problem::LeafReachableTwice { leaf_num } => {
                write!(f, "leaf {leaf_num} is reachable twice")
            }
            Problem::LeafNotAllocated { leaf_num } => {
                write!(f, "leaf {leaf_num} was never allocated")
            }
            Problem::ChainNotSorted { slot, leaf } => {
                write!(f, "slot {slot} leaf {leaf}: chain not sorted")
            }
            Problem::KeyOutsideOwner { slot, leaf, key } => {
                write!(
                    f,
                    "slot {slot} leaf {leaf}: key {key} outside the range the leaf owns"
                )
            }
            Problem::LockHeld { slot, leaf, owner } => {
                write!(f, "slot {slot} leaf {leaf}: lock held by member {owner}")
            }
            Problem::OrphanSynonym { slot, slt_slot } => {
                write!(
                    f,
                    "slot {slot}: SLT slot {slt_slot} handed out but never linked"
                )
            }
            Problem::Claim { slot, leaf, reason } => {
                write!(f, "slot {slot} leaf {leaf}: claim {reason}")
            }
            Problem::StrayClaim { leaf_num, claim } => write!(
                f,
                "leaf {leaf_num} is linked nowhere but claims keys {}..={}",
                claim.0, claim.1
            ),
            Problem::Ring(s) => write!(f, "ring: {s}"),
            Problem::Value { key, reason } => write!(f, "value of key {key}: {reason}"),
            Problem::ValueRegion(s) => write!(f, "value region: {s}"),
        }
    }
}
