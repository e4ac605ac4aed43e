//! The leaf: δ sorted key-value slots behind a checksummed header that names the key range the
//! leaf answers for.
//!
//! **Invariant (ARCHITECTURE §4, "Claims").** A leaf whose bytes validate as its own number and
//! that *claims* a key `k` (`lo ≤ k ≤ hi`) holds the current state of `k`: `k` is in the store with
//! value `v` exactly when `(k, v)` is in that leaf. Writers keep it under the chain's lock: a leaf
//! not (yet) linked claims keys only while it holds what the linked leaf claiming them holds (a
//! split's new leaf, first written with the moved keys only, until its link — or until recovery
//! withdraws the claim of a new leaf a stopped split never linked); a split leaf's claim shrinks in
//! the WRITE that drops the moved keys; and every leaf that leaves a chain (an unlinked or
//! retrained-away empty leaf) gives its claim up before any other leaf may take its keys. A leaf
//! that claims nothing is *unclaimed*.

use crate::{LeafStoreError, le_word};

/// A decoded leaf: up to δ `(key, value)` entries, sorted by key, keys unique, and the range of
/// keys it claims (`None`: unclaimed).
///
/// Remote format (`24 + 16·δ` bytes, little-endian words; layout v6):
///
/// ```text
/// word 0                           word 1      word 2      words 3, 4          …
/// +--------------------+----------+-----------+-----------+-------------------+---+
/// | checksum (51 bits) | count:13 | claim lo  | claim hi  | key 0  | value 0  | … |
/// +--------------------+----------+-----------+-----------+-------------------+---+
///  bits 63..13          bits 12..0
/// ```
///
/// `claim lo ≤ claim hi` (both inclusive) is the claimed range; any `lo > hi` is unclaimed
/// (written as `lo = 1, hi = 0`). `checksum` is the top 51 bits of XXH3-64, seeded with
/// `leaf number << 13 | count` (leaf numbers have 48 bits, δ at most 4,096), of everything after word 0: the claim and all δ slots (slots past
/// `count` are zero). So a torn READ (words from two versions), any flipped bit, a never-written
/// leaf (all zeros) and a READ of the wrong leaf all fail validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leaf {
    entries: Vec<(u64, u64)>,
    claim: Option<(u64, u64)>,
}

/// Bytes of a leaf with `delta` slots.
pub const fn leaf_bytes(delta: u64) -> u64 {
    24 + 16 * delta
}

const COUNT_BITS: u32 = 13;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The words before the slots: checksum and count, claim lo, claim hi.
const HEAD_WORDS: usize = 3;
const HEAD_BYTES: usize = 8 * HEAD_WORDS;
/// How an unclaimed leaf's claim words read.
const UNCLAIMED: (u64, u64) = (1, 0);

/// Word 0 of leaf `leaf_num` holding `count` entries, over its bytes after word 0.
pub fn leaf_checksum(leaf_num: u64, count: u64, body: &[u8]) -> u64 {
    let seed = (leaf_num << COUNT_BITS) | (count & COUNT_MASK);
    let hash = xxhash_rust::xxh3::xxh3_64_with_seed(body, seed);
    (hash & !COUNT_MASK) | (count & COUNT_MASK)
}

/// What one leaf says about a key: see [`Leaf::lookup_claimed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// The leaf claims the key: its state, present with this value or absent.
    Covered(Option<u64>),
    /// The leaf does not claim the key (unclaimed, or the key is outside its range).
    NotCovered,
}

impl Leaf {
    /// An empty, unclaimed leaf.
    pub fn new() -> Self {
        Self::default()
    }

    /// An unclaimed leaf holding `entries`, which must be sorted by key with unique keys (checked).
    pub fn from_entries(entries: Vec<(u64, u64)>) -> Result<Self, LeafStoreError> {
        if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(LeafStoreError::CorruptLeaf(
                "entries not sorted by unique keys",
            ));
        }
        Ok(Self {
            entries,
            claim: None,
        })
    }

    /// The same leaf claiming `[lo, hi]` (`lo ≤ hi`; `lo > hi` leaves it unclaimed).
    pub fn with_claim(mut self, lo: u64, hi: u64) -> Self {
        self.set_claim((lo <= hi).then_some((lo, hi)));
        self
    }

    /// The claimed range `(lo, hi)`, inclusive; `None` if unclaimed.
    pub fn claim(&self) -> Option<(u64, u64)> {
        self.claim
    }

    /// Sets the claimed range (`None`: unclaimed).
    pub fn set_claim(&mut self, claim: Option<(u64, u64)>) {
        self.claim = claim.filter(|&(lo, hi)| lo <= hi);
    }

    /// Where the leaf's keys start: its claim's first key, or (unclaimed) its first key; `None`
    /// for an empty, unclaimed leaf.
    pub fn start(&self) -> Option<u64> {
        self.claim.map(|(lo, _)| lo).or_else(|| self.first_key())
    }

    /// Whether the leaf claims `key`.
    pub fn claims(&self, key: u64) -> bool {
        self.claim.is_some_and(|(lo, hi)| lo <= key && key <= hi)
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
        let delta = slots_of(out.len())?;
        if self.entries.len() as u64 > delta {
            return Err(LeafStoreError::LeafOverflow {
                entries: self.entries.len(),
                delta,
            });
        }
        let (lo, hi) = self.claim.unwrap_or(UNCLAIMED);
        out[8..16].copy_from_slice(&lo.to_le_bytes());
        out[16..24].copy_from_slice(&hi.to_le_bytes());
        let slots = &mut out[HEAD_BYTES..];
        for (slot, &(key, value)) in slots.chunks_exact_mut(16).zip(&self.entries) {
            slot[..8].copy_from_slice(&key.to_le_bytes());
            slot[8..].copy_from_slice(&value.to_le_bytes());
        }
        slots[16 * self.entries.len()..].fill(0);
        let word = leaf_checksum(leaf_num, self.entries.len() as u64, &out[8..]);
        out[..8].copy_from_slice(&word.to_le_bytes());
        Ok(())
    }

    /// The encoding of the leaf as leaf number `leaf_num` with δ = `delta` slots.
    pub fn encode(&self, leaf_num: u64, delta: u64) -> Result<Vec<u8>, LeafStoreError> {
        let mut out = vec![0u8; leaf_bytes(delta) as usize];
        self.encode_into(leaf_num, &mut out)?;
        Ok(out)
    }

    /// The value of `key` in the encoded leaf `bytes` of leaf `leaf_num`, whatever the leaf
    /// claims, checked like [`Leaf::decode`] (a failed checksum is [`LeafStoreError::TornLeaf`])
    /// but without building the leaf: no allocation.
    pub fn lookup(leaf_num: u64, bytes: &[u8], key: u64) -> Result<Option<u64>, LeafStoreError> {
        let count = Self::checked_count(leaf_num, bytes)?;
        Ok(Self::find(bytes, count, key))
    }

    /// What the encoded leaf `bytes` of leaf `leaf_num` says about `key`: if it claims `key`, the
    /// key's state (by the invariant above, the store's current one when the READ happened).
    /// Checked like [`Leaf::lookup`]; no allocation.
    pub fn lookup_claimed(
        leaf_num: u64,
        bytes: &[u8],
        key: u64,
    ) -> Result<Claimed, LeafStoreError> {
        let count = Self::checked_count(leaf_num, bytes)?;
        let (lo, hi) = (le_word(bytes, 1), le_word(bytes, 2));
        Ok(if lo <= key && key <= hi {
            Claimed::Covered(Self::find(bytes, count, key))
        } else {
            Claimed::NotCovered
        })
    }

    fn find(bytes: &[u8], count: usize, key: u64) -> Option<u64> {
        (0..count)
            .find(|&i| le_word(bytes, HEAD_WORDS + 2 * i) == key)
            .map(|i| le_word(bytes, HEAD_WORDS + 1 + 2 * i))
    }

    /// What encoded leaf `bytes` hold, unchecked (a torn leaf's words come from two images): the
    /// count in word 0, and whether every slot is zero. Recovery uses it to tell a tear between two
    /// images of an empty leaf from any other. `None` if `bytes` is not a leaf's size.
    pub fn unchecked_emptiness(bytes: &[u8]) -> Option<(u64, bool)> {
        slots_of(bytes.len()).ok()?;
        let count = le_word(bytes, 0) & COUNT_MASK;
        Some((count, bytes[HEAD_BYTES..].iter().all(|&b| b == 0)))
    }

    /// The entry count of encoded leaf `bytes` after checking its size and checksum.
    fn checked_count(leaf_num: u64, bytes: &[u8]) -> Result<usize, LeafStoreError> {
        let delta = slots_of(bytes.len())?;
        let word = le_word(bytes, 0);
        let count = word & COUNT_MASK;
        if word != leaf_checksum(leaf_num, count, &bytes[8..]) {
            return Err(LeafStoreError::TornLeaf { leaf_num });
        }
        if count > delta {
            return Err(LeafStoreError::CorruptLeaf("entry count above δ"));
        }
        Ok(count as usize)
    }

    /// Decodes leaf number `leaf_num` from `bytes` ([`leaf_bytes`]`(δ)` bytes). A checksum
    /// mismatch is [`LeafStoreError::TornLeaf`] (re-read it); a valid checksum over impossible
    /// contents (unsorted keys, a key outside the claimed range) is
    /// [`LeafStoreError::CorruptLeaf`].
    pub fn decode(leaf_num: u64, bytes: &[u8]) -> Result<Self, LeafStoreError> {
        let count = Self::checked_count(leaf_num, bytes)?;
        let entries: Vec<(u64, u64)> = (0..count)
            .map(|i| {
                (
                    le_word(bytes, HEAD_WORDS + 2 * i),
                    le_word(bytes, HEAD_WORDS + 1 + 2 * i),
                )
            })
            .collect();
        let leaf = Self::from_entries(entries)?.with_claim(le_word(bytes, 1), le_word(bytes, 2));
        if leaf.claim.is_some() && leaf.entries.iter().any(|&(k, _)| !leaf.claims(k)) {
            return Err(LeafStoreError::CorruptLeaf(
                "a key outside the leaf's claim",
            ));
        }
        Ok(leaf)
    }
}

/// δ of a leaf encoding `len` bytes long.
fn slots_of(len: usize) -> Result<u64, LeafStoreError> {
    if len < HEAD_BYTES || !(len - HEAD_BYTES).is_multiple_of(16) {
        return Err(LeafStoreError::CorruptLeaf(
            "leaf buffer is not 24 + 16·δ bytes",
        ));
    }
    Ok(((len - HEAD_BYTES) / 16) as u64)
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;

    #[test]
    fn unchecked_emptiness_tells_a_tear_between_empty_images_from_others() {
        let (n, delta) = (9, 4);
        let claimed = Leaf::new()
            .with_claim(10, 20)
            .encode(n, delta)
            .expect("fits");
        let unclaimed = Leaf::new().encode(n, delta).expect("fits");
        let one = Leaf::from_entries(vec![(12, 1)])
            .expect("sorted")
            .with_claim(10, 20)
            .encode(n, delta)
            .expect("fits");
        // The new image's head, the old image's rest: torn, and what each tear holds.
        let torn = |new: &[u8], old: &[u8], cut: usize| {
            let mut bytes = old.to_vec();
            bytes[..cut].copy_from_slice(&new[..cut]);
            assert!(matches!(
                Leaf::decode(n, &bytes),
                Err(LeafStoreError::TornLeaf { .. })
            ));
            Leaf::unchecked_emptiness(&bytes)
        };
        assert_eq!(torn(&unclaimed, &claimed, 8), Some((0, true)));
        assert_eq!(torn(&unclaimed, &claimed, 16), Some((0, true)));
        // An insert into an empty leaf cut inside its head: counts one entry.
        assert_eq!(torn(&one, &claimed, 8), Some((1, true)));
        // A delete cut inside its head: the entry is still in the slots.
        assert_eq!(torn(&claimed, &one, 8), Some((0, false)));
        assert_eq!(Leaf::unchecked_emptiness(&one[1..]), None);
    }

    /// A leaf of (at most δ of) `keys`, claiming from its smallest key to its largest (an empty
    /// one claims `[7, 7]`).
    fn leaf_from(keys: Vec<u64>, delta: usize) -> Leaf {
        let mut keys = keys;
        keys.sort_unstable();
        keys.dedup();
        keys.truncate(delta);
        let (lo, hi) = (
            keys.first().copied().unwrap_or(7),
            keys.last().copied().unwrap_or(7),
        );
        Leaf::from_entries(keys.iter().map(|&k| (k, k.wrapping_mul(31) ^ 7)).collect())
            .expect("sorted")
            .with_claim(lo, hi)
    }

    #[test]
    fn a_claimed_lookup_answers_only_inside_the_claim() {
        fn prop(keys: Vec<u64>, probe: u64, leaf_num: u64, unclaimed: bool) -> bool {
            let mut leaf = leaf_from(keys, 16);
            if unclaimed {
                leaf.set_claim(None);
            }
            let leaf_num = leaf_num >> 16;
            let bytes = leaf.encode(leaf_num, 16).expect("encode");
            let decoded = Leaf::decode(leaf_num, &bytes) == Ok(leaf.clone());
            let probes = leaf.entries().iter().map(|e| e.0).chain([probe]);
            decoded
                && probes.into_iter().all(|k| {
                    let want = if leaf.claims(k) {
                        Claimed::Covered(leaf.get(k))
                    } else {
                        Claimed::NotCovered
                    };
                    Leaf::lookup_claimed(leaf_num, &bytes, k) == Ok(want)
                })
        }
        QuickCheck::new().quickcheck(prop as fn(Vec<u64>, u64, u64, bool) -> bool);
        let leaf = leaf_from(vec![10, 20], 4).with_claim(5, 29);
        let bytes = leaf.encode(3, 4).expect("fits");
        assert_eq!(
            Leaf::lookup_claimed(3, &bytes, 5),
            Ok(Claimed::Covered(None))
        );
        assert_eq!(
            Leaf::lookup_claimed(3, &bytes, 20),
            Ok(Claimed::Covered(leaf.get(20)))
        );
        assert_eq!(Leaf::lookup_claimed(3, &bytes, 30), Ok(Claimed::NotCovered));
        assert_eq!(Leaf::lookup_claimed(3, &bytes, 4), Ok(Claimed::NotCovered));
        assert!(Leaf::new().with_claim(9, 8).claim().is_none());
    }

    #[test]
    fn a_key_outside_the_claim_is_a_corrupt_leaf() {
        let leaf = leaf_from(vec![10, 20], 4).with_claim(10, 15);
        let bytes = leaf.encode(3, 4).expect("fits");
        assert!(matches!(
            Leaf::decode(3, &bytes),
            Err(LeafStoreError::CorruptLeaf(_))
        ));
        // Unclaimed leaves may hold anything sorted (nobody answers from them).
        let unclaimed = leaf_from(vec![10, 20], 4).with_claim(1, 0);
        let bytes = unclaimed.encode(3, 4).expect("fits");
        assert_eq!(Leaf::decode(3, &bytes), Ok(unclaimed));
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
            let leaf_num = leaf_num >> 16;
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
