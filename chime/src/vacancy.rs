//! A leaf's vacancy word: which slots hold a key, so that an insert learns, in the batch that
//! takes the leaf's lock, whether its key's neighbourhood has room or how far away room lies.
//!
//! ```text
//! vacancy word (the tail's first word): bit s set ⇔ slot s holds a key
//! ```
//!
//! CHIME piggybacks its vacancy bitmap on the leaf's lock word and takes the lock with a masked
//! CAS (an extended atomic of ConnectX NICs), so the CAS returns the bitmap. This store's
//! transport has plain CAS only: the lock is the lock table's word, as the B+-tree's, and the
//! vacancy word is READ in the same batch, fenced behind the CAS (the same round trips, one
//! more verb). Only lock holders write it, each from what it read under the lock, so it is
//! exact; a writer still checks it against the slots it read, and reads the whole leaf if they
//! disagree.

use crate::geometry::Geometry;

/// `word` with slot `slot` marked as holding a key (`taken`) or not.
pub fn mark(word: u64, slot: usize, taken: bool) -> u64 {
    if taken {
        word | 1 << slot
    } else {
        word & !(1 << slot)
    }
}

/// How far from `home` the first slot without a key lies, at or after it, by `word` (`None`:
/// every slot from `home` to the leaf's last holds one; neighbourhoods do not wrap).
pub fn first_free(geometry: Geometry, home: usize, word: u64) -> Option<usize> {
    (0..geometry.slots().saturating_sub(home)).find(|&d| word >> (home + d) & 1 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_first_free_slots() {
        let g = Geometry::default();
        assert_eq!(first_free(g, 5, 0), Some(0));
        assert_eq!(first_free(g, 5, 0b11_1110_0000), Some(5));
        assert_eq!(
            first_free(g, 62, 1 << 62 | 1 << 63 | 1),
            None,
            "no wrapping"
        );
        assert_eq!(first_free(g, 60, 1 << 60 | 1 << 61), Some(2));
        assert_eq!(first_free(g, 3, u64::MAX), None);
        assert_eq!(mark(mark(0, 9, true), 9, false), 0);
        assert_eq!(mark(0, 63, true), 1 << 63);
    }
}
