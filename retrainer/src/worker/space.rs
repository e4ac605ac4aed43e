//! Reusable model-region space: free ranges kept coalesced, handed out first fit by address.

use std::collections::BTreeMap;

/// Free byte ranges of the model region, never adjacent to each other: a range released next to
/// a free one merges with it, so space freed piecemeal can hold a larger record later.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct FreeSpace {
    /// Start offset → length, for disjoint, non-adjacent ranges.
    ranges: BTreeMap<u64, u64>,
}

impl FreeSpace {
    /// Marks `[offset, offset + bytes)` free, merging it with free neighbours. Zero-length
    /// ranges are ignored.
    pub(crate) fn release(&mut self, offset: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let (mut start, mut end) = (offset, offset + bytes);
        if let Some((&before, &len)) = self.ranges.range(..start).next_back()
            && before + len == start
        {
            self.ranges.remove(&before);
            start = before;
        }
        if let Some(len) = self.ranges.remove(&end) {
            end += len;
        }
        self.ranges.insert(start, end - start);
    }

    /// The lowest free range that holds `bytes`: its start, now in use (the rest stays free).
    pub(crate) fn take(&mut self, bytes: u64) -> Option<u64> {
        let (&start, &len) = self.ranges.iter().find(|&(_, &len)| len >= bytes)?;
        self.ranges.remove(&start);
        if len > bytes {
            self.ranges.insert(start + bytes, len - bytes);
        }
        Some(start)
    }

    /// Free bytes in all.
    pub(crate) fn total(&self) -> u64 {
        self.ranges.values().sum()
    }

    /// Number of separate free ranges.
    pub(crate) fn fragments(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::FreeSpace;

    #[test]
    fn neighbours_merge_and_the_lowest_fit_is_taken() {
        let mut space = FreeSpace::default();
        space.release(100, 50);
        space.release(200, 50);
        assert_eq!(space.fragments(), 2);
        // Fills the gap: one range 100..250.
        space.release(150, 50);
        assert_eq!((space.fragments(), space.total()), (1, 150));
        assert_eq!(space.take(151), None);
        assert_eq!(space.take(120), Some(100));
        assert_eq!((space.fragments(), space.total()), (1, 30));
        // Merging on the left only, then on the right only.
        space.release(100, 120);
        assert_eq!((space.fragments(), space.total()), (1, 150));
        space.release(250, 10);
        assert_eq!((space.fragments(), space.total()), (1, 160));
        space.release(40, 10);
        assert_eq!(space.take(10), Some(40), "the lowest range that fits");
        space.release(0, 0);
        assert_eq!(space.fragments(), 1);
    }

    #[test]
    fn released_pieces_hold_a_larger_record_afterwards() {
        let mut space = FreeSpace::default();
        for i in 0..64u64 {
            space.release(1000 + 8 * i, 8);
        }
        assert_eq!(space.fragments(), 1);
        assert_eq!(space.take(512), Some(1000));
        assert_eq!(space.total(), 0);
    }
}
