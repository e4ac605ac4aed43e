//! Which leaves this compute node last saw full: a bit per leaf of a memory node's leaf region —
//! for four times the leaves allocated when the store opened, or the region's capacity if that is
//! less (a leaf past them shares the bit of its number modulo their count).
//!
//! **Invariant: none that correctness rests on.** A bit is a guess — set when a write of this
//! compute node left the leaf holding δ entries, or a lock batch read it so, and cleared when
//! one saw it hold fewer — that an insert into the leaf's chain will split. An insert whose
//! chain has a leaf guessed full claims its SLT slot in its lock batch already (ARCHITECTURE §6,
//! "Splits foreseen"), saving the split's own round trip; a wrong guess costs a slot marked
//! freed in the write's last batch. Other compute nodes' writes are not seen, so the guess can
//! be stale either way.

use crate::sync::atomic::{AtomicU64, Ordering};

/// Bits by leaf number, modulo their count.
#[derive(Debug)]
pub(crate) struct FullLeaves {
    words: Vec<AtomicU64>,
}

impl FullLeaves {
    /// Bits for a region of `capacity` leaves with `allocated` in use: four times as many as
    /// are in use (at least 1,024), at most the capacity; none guessed full.
    pub(crate) fn new(allocated: u64, capacity: u64) -> Self {
        let bits = allocated.saturating_mul(4).max(1_024).min(capacity.max(64));
        let words = bits.div_ceil(64) as usize;
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The word and bit of `leaf`.
    fn bit(&self, leaf: u64) -> (&AtomicU64, u64) {
        let at = leaf % (64 * self.words.len() as u64);
        (&self.words[(at / 64) as usize], 1u64 << (at % 64))
    }

    /// Records whether `leaf` was seen full.
    pub(crate) fn set(&self, leaf: u64, full: bool) {
        let (word, bit) = self.bit(leaf);
        // Read first: most writes do not change the guess, and need not write the word.
        if (word.load(Ordering::Relaxed) & bit != 0) == full {
            return;
        }
        if full {
            word.fetch_or(bit, Ordering::Relaxed);
        } else {
            word.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Whether `leaf` (or a leaf sharing its bit) was last seen full.
    pub(crate) fn is_full(&self, leaf: u64) -> bool {
        let (word, bit) = self.bit(leaf);
        word.load(Ordering::Relaxed) & bit != 0
    }

    /// Bytes it takes.
    pub(crate) fn cache_bytes(&self) -> u64 {
        8 * self.words.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_guessed_full_until_seen_otherwise() {
        let full = FullLeaves::new(750, 3_000);
        assert_eq!(full.cache_bytes(), 8 * 47);
        assert_eq!(FullLeaves::new(10, 1 << 20).cache_bytes(), 1_024 / 8);
        assert!(!full.is_full(129));
        full.set(129, true);
        full.set(3, true);
        assert!(full.is_full(129) && full.is_full(3) && !full.is_full(128));
        full.set(129, false);
        assert!(!full.is_full(129) && full.is_full(3));
        // Past the bits: the leaf shares a bit with one below.
        full.set(3_008 + 5, true);
        assert!(full.is_full(5) && full.is_full(3_008 + 5));
    }
}
