//! The top-level index: which model slot serves a key.

use crate::{PlrBuilder, Segment, TrainError};

/// Maps a key to its model slot: the last slot whose first key is ≤ the key (slot 0 for keys
/// below every first key). Exact for every key.
///
/// Built from the slots' first keys. A PLR with error [`TopLevelIndex::EPSILON`] over
/// `(first key, slot)` narrows the search to a window of `2·EPSILON + 2` first keys, searched by
/// binary search; a wrong window (impossible by construction, checked anyway) falls back to a
/// search of all first keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopLevelIndex {
    first_keys: Vec<u64>,
    segments: Vec<Segment>,
}

impl TopLevelIndex {
    /// Error bound of the top-level PLR.
    pub const EPSILON: u64 = 32;

    /// An index over the slots' first keys, which must be strictly increasing and non-empty.
    pub fn new(first_keys: Vec<u64>) -> Result<Self, TrainError> {
        if first_keys.is_empty() {
            return Err(TrainError::NoKeys);
        }
        let mut builder = PlrBuilder::new(Self::EPSILON)?;
        for (slot, &key) in first_keys.iter().enumerate() {
            builder.push(key, slot as u64)?;
        }
        Ok(Self {
            first_keys,
            segments: builder.finish()?,
        })
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.first_keys.len()
    }

    /// Always false: an index has at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The slots' first keys.
    pub fn first_keys(&self) -> &[u64] {
        &self.first_keys
    }

    /// Number of PLR segments of the index.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The slot serving `key`.
    #[inline]
    pub fn slot_of(&self, key: u64) -> usize {
        let keys = &self.first_keys;
        if key < keys[0] {
            return 0;
        }
        let s = self.segments.partition_point(|s| s.first_key <= key);
        let pred = self.segments[s.saturating_sub(1)].predict(key);
        let lo = usize::try_from(pred.saturating_sub(Self::EPSILON + 1))
            .unwrap_or(usize::MAX)
            .min(keys.len() - 1);
        let hi = usize::try_from(pred.saturating_add(Self::EPSILON + 2))
            .unwrap_or(usize::MAX)
            .min(keys.len());
        let end = lo + keys[lo..hi].partition_point(|&k| k <= key);
        if end > lo && (end == keys.len() || keys[end] > key) {
            return end - 1;
        }
        keys.partition_point(|&k| k <= key) - 1
    }

    /// Bytes of compute-side memory the index takes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of_val(self.first_keys.as_slice())
            + std::mem::size_of_val(self.segments.as_slice())
    }

    pub(crate) fn from_parts(first_keys: Vec<u64>) -> Result<Self, TrainError> {
        Self::new(first_keys)
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::test_support::KeySet;

    #[test]
    fn slot_of_is_exact_for_every_key() {
        fn prop(keys: KeySet, probes: Vec<u64>) -> TestResult {
            let index = TopLevelIndex::new(keys.0.clone()).expect("increasing keys");
            let expected = |k: u64| keys.0.partition_point(|&f| f <= k).saturating_sub(1);
            let mut all = probes;
            for &k in &keys.0 {
                all.extend([k, k.wrapping_sub(1), k.wrapping_add(1)]);
            }
            all.extend([0, u64::MAX]);
            match all.iter().find(|&&k| index.slot_of(k) != expected(k)) {
                None => TestResult::passed(),
                Some(&k) => TestResult::error(format!(
                    "key {k}: slot {} expected {}",
                    index.slot_of(k),
                    expected(k)
                )),
            }
        }
        QuickCheck::new()
            .tests(400)
            .quickcheck(prop as fn(KeySet, Vec<u64>) -> TestResult);
    }

    #[test]
    fn bad_first_keys_are_errors() {
        assert_eq!(TopLevelIndex::new(vec![]).err(), Some(TrainError::NoKeys));
        assert!(matches!(
            TopLevelIndex::new(vec![3, 3]),
            Err(TrainError::KeysNotIncreasing { .. })
        ));
    }
}
