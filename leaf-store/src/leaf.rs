//! The leaf: δ sorted key-value slots behind a checksummed header.

use crate::{LeafStoreError, le_word};

/// A decoded leaf: up to δ `(key, value)` entries, sorted by key, keys unique.
///
/// Remote format (`16 + 16·δ` bytes, little-endian words):
///
/// ```text
/// word 0          word 1        words 2, 3          …   words 2δ, 2δ+1
/// +--------------+-------------+-------------------+---+-----------------------+
/// | checksum     | count       | key 0  | value 0  | … | key δ−1 | value δ−1   |
/// +--------------+-------------+-------------------+---+-----------------------+
/// ```
///
/// `checksum` is XXH3-64, seeded with the leaf number, of everything after it: the count and all δ
/// slots (slots past `count` are zero). So a torn READ (words from two versions), any flipped bit,
/// a never-written leaf (all zeros) and a READ of the wrong leaf all fail validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leaf {
    entries: Vec<(u64, u64)>,
}

/// Bytes of a leaf with `delta` slots.
pub const fn leaf_bytes(delta: u64) -> u64 {
    16 + 16 * delta
}

/// The checksum a leaf numbered `leaf_num` must carry, over its bytes after the checksum word.
pub fn leaf_checksum(leaf_num: u64, body: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(body, leaf_num)
}

impl Leaf {
    /// An empty leaf.
    pub fn new() -> Self {
        Self::default()
    }

    /// A leaf holding `entries`, which must be sorted by key with unique keys (checked).
    pub fn from_entries(entries: Vec<(u64, u64)>) -> Result<Self, LeafStoreError> {
        if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(LeafStoreError::CorruptLeaf(
                "entries not sorted by unique keys",
            ));
        }
        Ok(Self { entries })
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> &[(u64, u64)] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the leaf holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The smallest key, if any.
    pub fn first_key(&self) -> Option<u64> {
        self.entries.first().map(|e| e.0)
    }

    /// The largest key, if any.
    pub fn last_key(&self) -> Option<u64> {
        self.entries.last().map(|e| e.0)
    }

    /// The value stored for `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.entries
            .binary_search_by_key(&key, |e| e.0)
            .ok()
            .map(|i| self.entries[i].1)
    }

    /// Mutable access to the entries; the caller keeps them sorted and unique.
    pub fn entries_mut(&mut self) -> &mut Vec<(u64, u64)> {
        &mut self.entries
    }

    /// Encodes the leaf as leaf number `leaf_num` into `out`, which must be exactly
    /// [`leaf_bytes`]`(delta)` long and hold at most δ entries.
    pub fn encode_into(&self, leaf_num: u64, out: &mut [u8]) -> Result<(), LeafStoreError> {
        if out.len() < 16 || !(out.len() - 16).is_multiple_of(16) {
            return Err(LeafStoreError::CorruptLeaf(
                "leaf buffer is not 16 + 16·δ bytes",
            ));
        }
        let delta = (out.len() - 16) / 16;
        if self.entries.len() > delta {
            return Err(LeafStoreError::LeafOverflow {
                entries: self.entries.len(),
                delta: delta as u64,
            });
        }
        out[8..16].copy_from_slice(&(self.entries.len() as u64).to_le_bytes());
        let slots = &mut out[16..];
        for (slot, &(key, value)) in slots.chunks_exact_mut(16).zip(&self.entries) {
            slot[..8].copy_from_slice(&key.to_le_bytes());
            slot[8..].copy_from_slice(&value.to_le_bytes());
        }
        slots[16 * self.entries.len()..].fill(0);
        let checksum = leaf_checksum(leaf_num, &out[8..]);
        out[..8].copy_from_slice(&checksum.to_le_bytes());
        Ok(())
    }

    /// The encoding of the leaf as leaf number `leaf_num` with δ = `delta` slots.
    pub fn encode(&self, leaf_num: u64, delta: u64) -> Result<Vec<u8>, LeafStoreError> {
        let mut out = vec![0u8; leaf_bytes(delta) as usize];
        self.encode_into(leaf_num, &mut out)?;
        Ok(out)
    }

    /// The value of `key` in the encoded leaf `bytes` of leaf `leaf_num`, checked like
    /// [`Leaf::decode`] (a failed checksum is [`LeafStoreError::TornLeaf`]) but without building
    /// the leaf: no allocation.
    pub fn lookup(leaf_num: u64, bytes: &[u8], key: u64) -> Result<Option<u64>, LeafStoreError> {
        let count = Self::checked_count(leaf_num, bytes)?;
        Ok((0..count)
            .find(|&i| le_word(bytes, 2 + 2 * i) == key)
            .map(|i| le_word(bytes, 3 + 2 * i)))
    }

    /// The entry count of encoded leaf `bytes` after checking its size and checksum.
    fn checked_count(leaf_num: u64, bytes: &[u8]) -> Result<usize, LeafStoreError> {
        if bytes.len() < 16 || !(bytes.len() - 16).is_multiple_of(16) {
            return Err(LeafStoreError::CorruptLeaf(
                "leaf buffer is not 16 + 16·δ bytes",
            ));
        }
        if le_word(bytes, 0) != leaf_checksum(leaf_num, &bytes[8..]) {
            return Err(LeafStoreError::TornLeaf { leaf_num });
        }
        let delta = (bytes.len() - 16) / 16;
        let count = usize::try_from(le_word(bytes, 1)).unwrap_or(usize::MAX);
        if count > delta {
            return Err(LeafStoreError::CorruptLeaf("entry count above δ"));
        }
        Ok(count)
    }

    /// Decodes leaf number `leaf_num` from `bytes` (`16 + 16·δ` bytes). A checksum mismatch is
    /// [`LeafStoreError::TornLeaf`] (re-read it); a valid checksum over impossible contents is
    /// [`LeafStoreError::CorruptLeaf`].
    pub fn decode(leaf_num: u64, bytes: &[u8]) -> Result<Self, LeafStoreError> {
        let count = Self::checked_count(leaf_num, bytes)?;
        let entries: Vec<(u64, u64)> = (0..count)
            .map(|i| (le_word(bytes, 2 + 2 * i), le_word(bytes, 3 + 2 * i)))
            .collect();
        Self::from_entries(entries)
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;

    fn leaf_from(keys: Vec<u64>, delta: usize) -> Leaf {
        let mut keys = keys;
        keys.sort_unstable();
        keys.dedup();
        keys.truncate(delta);
        Leaf::from_entries(keys.iter().map(|&k| (k, k.wrapping_mul(31) ^ 7)).collect())
            .expect("sorted")
    }

    #[test]
    fn lookup_agrees_with_decode_and_detects_tearing() {
        fn prop(keys: Vec<u64>, probe: u64, leaf_num: u64) -> bool {
            let leaf = leaf_from(keys, 16);
            let mut bytes = leaf.encode(leaf_num, 16).expect("encode");
            let probes = leaf.entries().iter().map(|e| e.0).chain([probe]);
            let agrees = probes
                .into_iter()
                .all(|k| Leaf::lookup(leaf_num, &bytes, k) == Ok(leaf.get(k)));
            let last = bytes.len() - 1;
            bytes[last] ^= 1;
            agrees
                && Leaf::lookup(leaf_num, &bytes, probe)
                    == Err(LeafStoreError::TornLeaf { leaf_num })
        }
        QuickCheck::new().quickcheck(prop as fn(Vec<u64>, u64, u64) -> bool);
    }

    #[test]
    fn leaves_round_trip() {
        fn prop(keys: Vec<u64>, d: u8, leaf_num: u64) -> bool {
            let delta = u64::from(d % 64) + 1;
            let leaf = leaf_from(keys, delta as usize);
            let bytes = leaf.encode(leaf_num, delta).expect("fits");
            bytes.len() as u64 == leaf_bytes(delta) && Leaf::decode(leaf_num, &bytes) == Ok(leaf)
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(Vec<u64>, u8, u64) -> bool);
    }

    #[test]
    fn any_flipped_bit_fails_the_checksum() {
        fn prop(keys: Vec<u64>, d: u8, leaf_num: u64, bit: usize) -> bool {
            let delta = u64::from(d % 32) + 1;
            let mut bytes = leaf_from(keys, delta as usize)
                .encode(leaf_num, delta)
                .expect("fits");
            let bit = bit % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            Leaf::decode(leaf_num, &bytes).is_err()
        }
        QuickCheck::new()
            .tests(1000)
            .quickcheck(prop as fn(Vec<u64>, u8, u64, usize) -> bool);
    }

    /// A READ racing a WRITE can return some words of the old leaf and some of the new: any such
    /// mixture that differs from both must fail.
    #[test]
    fn a_torn_word_fails_the_checksum() {
        fn prop(old: Vec<u64>, new: Vec<u64>, d: u8, leaf_num: u64, mask: u64) -> TestResult {
            let delta = u64::from(d % 32) + 1;
            let a = leaf_from(old, delta as usize)
                .encode(leaf_num, delta)
                .expect("fits");
            let b = leaf_from(new, delta as usize)
                .encode(leaf_num, delta)
                .expect("fits");
            let words = a.len() / 8;
            // Take each word from `b` where `mask` (repeated) says so, else from `a`.
            let torn: Vec<u8> = (0..words)
                .flat_map(|w| {
                    let src = if mask >> (w % 64) & 1 == 1 { &b } else { &a };
                    src[8 * w..8 * w + 8].to_vec()
                })
                .collect();
            if torn == a || torn == b {
                return TestResult::discard();
            }
            TestResult::from_bool(Leaf::decode(leaf_num, &torn).is_err())
        }
        QuickCheck::new()
            .tests(1000)
            .quickcheck(prop as fn(Vec<u64>, Vec<u64>, u8, u64, u64) -> TestResult);
    }

    #[test]
    fn the_wrong_leaf_number_and_empty_memory_are_rejected() {
        let leaf = leaf_from(vec![1, 2, 3], 4);
        let bytes = leaf.encode(7, 4).expect("fits");
        assert_eq!(
            Leaf::decode(8, &bytes),
            Err(LeafStoreError::TornLeaf { leaf_num: 8 })
        );
        assert_eq!(
            Leaf::decode(7, &vec![0u8; bytes.len()]),
            Err(LeafStoreError::TornLeaf { leaf_num: 7 })
        );
        assert!(matches!(
            leaf_from(vec![1, 2, 3, 4, 5], 5).encode(0, 4),
            Err(LeafStoreError::LeafOverflow { .. })
        ));
        assert!(Leaf::from_entries(vec![(2, 0), (1, 0)]).is_err());
        assert!(Leaf::from_entries(vec![(1, 0), (1, 0)]).is_err());
    }
}
