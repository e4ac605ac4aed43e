//! The retrainer's last put-off, published for compute nodes: why a slot is not being retrained.
//!
//! A writer that gives up on a full slot (`IndexError::SltFull` in `index-core`) reads this word
//! and, when it names the same slot, says why the memory node has not retrained it. One word,
//! written by the memory node's worker only ([`crate::members::MemberTable::problem_addr`]):
//!
//! ```text
//!  63     60 59                                   24 23                      0
//! +---------+---------------------------------------+------------------------+
//! |  cause  |               slot (36)               |      detail (24)       |
//! +---------+---------------------------------------+------------------------+
//!   cause: 0 none, 1 model region full (detail: KiB needed), 2 a leaf lock stays held
//!   (detail: the trained leaf), 3 another failure
//! ```

const CAUSE_SHIFT: u32 = 60;
const SLOT_SHIFT: u32 = 24;
const SLOT_MASK: u64 = (1 << 36) - 1;
const DETAIL_MASK: u64 = (1 << 24) - 1;

/// Why the worker put a slot off, as compute nodes read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOff {
    /// The model region has no room for the new record (this many KiB were needed).
    ModelRegionFull {
        /// KiB the record needed.
        kib: u64,
    },
    /// The lock of trained leaf `leaf` stays held (a writer that died holding it, not yet
    /// recovered?).
    LeafLocked {
        /// The trained leaf.
        leaf: u64,
    },
    /// Another failure (a record that could not be read or trained, a transport fault).
    Other,
}

impl std::fmt::Display for PutOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutOff::ModelRegionFull { kib } => {
                write!(f, "the model region is full ({kib} KiB needed)")
            }
            PutOff::LeafLocked { leaf } => {
                write!(f, "the lock of its trained leaf {leaf} stays held")
            }
            PutOff::Other => write!(f, "its retraining keeps failing (see the memory node)"),
        }
    }
}

/// The word saying `slot` was put off for `why` (details past 24 bits are cut to the largest).
pub fn encode(slot: u64, why: PutOff) -> u64 {
    let (cause, detail) = match why {
        PutOff::ModelRegionFull { kib } => (1, kib),
        PutOff::LeafLocked { leaf } => (2, leaf),
        PutOff::Other => (3, 0),
    };
    (cause << CAUSE_SHIFT) | ((slot & SLOT_MASK) << SLOT_SHIFT) | detail.min(DETAIL_MASK)
}

/// The slot and cause a word names; `None` for the empty word.
pub fn decode(word: u64) -> Option<(u64, PutOff)> {
    let detail = word & DETAIL_MASK;
    let put_off = match word >> CAUSE_SHIFT {
        0 => return None,
        1 => PutOff::ModelRegionFull { kib: detail },
        2 => PutOff::LeafLocked { leaf: detail },
        _ => PutOff::Other,
    };
    Some(((word >> SLOT_SHIFT) & SLOT_MASK, put_off))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_offs_round_trip() {
        assert_eq!(decode(0), None);
        let locked = encode(7, PutOff::LeafLocked { leaf: 3 });
        assert_eq!(decode(locked), Some((7, PutOff::LeafLocked { leaf: 3 })));
        let full = encode(9, PutOff::ModelRegionFull { kib: 5 });
        assert_eq!(decode(full), Some((9, PutOff::ModelRegionFull { kib: 5 })));
        let other = encode(1 << 35, PutOff::Other);
        assert_eq!(decode(other), Some((1 << 35, PutOff::Other)));
        // A detail too large for its field is cut, not spilled into the slot.
        let huge = encode(2, PutOff::LeafLocked { leaf: u64::MAX });
        assert_eq!(
            decode(huge),
            Some((2, PutOff::LeafLocked { leaf: DETAIL_MASK }))
        );
    }
}
