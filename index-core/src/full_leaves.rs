//! Which leaves this compute node last saw full: one bit per leaf of a memory node's leaf region.
//!
//! **Invariant: none that correctness rests on.** A bit is a guess — set when a write of this
//! compute node left the leaf holding δ entries, or a lock batch read it so, and cleared when
//! one saw it hold fewer — that an insert into the leaf's chain will split. An insert whose
//! chain has a leaf guessed full claims its SLT slot in its lock batch already (ARCHITECTURE §6,
//! "Splits foreseen"), saving the split's own round trip; a wrong guess costs a slot marked
//! freed in the write's last batch. Other compute nodes' writes are not seen, so the guess can
//! be stale either way.

use crate::sync::atomic::{AtomicU64, Ordering};

/// One bit per leaf number below the leaf region's capacity.
#[derive(Debug)]
pub(crate) struct FullLeaves {
    words: Vec<AtomicU64>,
}

impl FullLeaves {
    /// Room for leaves `0..capacity`, none guessed full.
    pub(crate) fn new(capacity: u64) -> Self {
        let words = capacity.div_ceil(64) as usize;
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records whether `leaf` was seen full (a leaf beyond the capacity is ignored).
    pub(crate) fn set(&self, leaf: u64, full: bool) {
        let Some(word) = self.words.get((leaf / 64) as usize) else {
            return;
        };
        let bit = 1u64 << (leaf % 64);
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

    /// Whether `leaf` was last seen full.
    pub(crate) fn is_full(&self, leaf: u64) -> bool {
        self.words
            .get((leaf / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (leaf % 64)) != 0)
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
        let full = FullLeaves::new(130);
        assert_eq!(full.cache_bytes(), 24);
        assert!(!full.is_full(129));
        full.set(129, true);
        full.set(3, true);
        assert!(full.is_full(129) && full.is_full(3) && !full.is_full(128));
        full.set(129, false);
        assert!(!full.is_full(129) && full.is_full(3));
        // Past the capacity: ignored.
        full.set(1_000, true);
        assert!(!full.is_full(1_000));
    }
}
