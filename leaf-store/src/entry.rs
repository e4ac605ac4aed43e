//! The 64-bit LT/SLT entry.

/// One entry of a leaf table (LT) or synonym leaf table (SLT):
///
/// ```text
///  63   62          56 55          48 47                                              0
/// +----+--------------+--------------+-------------------------------------------------+
/// |lock| leaf_region  | synonym_ptr  |                    leaf_num                     |
/// +----+--------------+--------------+-------------------------------------------------+
///   1        7               8                              48 bits
/// ```
///
/// * `lock` — set while a writer holds the trained leaf and its whole synonym chain (only LT
///   entries are ever locked; SLT entries share their trained leaf's lock).
/// * `leaf_region` — which leaf region of the memory node holds the leaf (always 0 today).
/// * `synonym_ptr` — the SLT slot (1..=255) of the next leaf in this chain; 0 = end of chain.
/// * `leaf_num` — the leaf's number in its region (address = region base + 16 + num · leaf size).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LeafTableEntry(u64);

const LOCK_SHIFT: u32 = 63;
const REGION_SHIFT: u32 = 56;
const REGION_MASK: u64 = 0x7f;
const SYNONYM_SHIFT: u32 = 48;
const SYNONYM_MASK: u64 = 0xff;
const LEAF_MASK: u64 = (1 << 48) - 1;

/// Largest leaf number an entry can hold.
pub const MAX_LEAF_NUM: u64 = LEAF_MASK;
/// Largest leaf-region number an entry can hold.
pub const MAX_LEAF_REGION: u8 = REGION_MASK as u8;

impl LeafTableEntry {
    /// Marks an SLT slot that was handed out (its `slot_use` FAA happened) but holds no leaf: the
    /// synonym leaf it held was unlinked by a delete, or the split that claimed it found the leaf
    /// region exhausted. `slot_use` only grows, so such a slot is never reused; `verify` accepts it
    /// as long as no chain links it.
    pub const FREED: Self = Self(u64::MAX >> 1);

    /// Whether this is [`LeafTableEntry::FREED`].
    pub const fn is_freed(self) -> bool {
        self.0 == Self::FREED.0
    }

    /// An unlocked entry for leaf `leaf_num` of region `leaf_region` with no synonym. `None` if a
    /// field does not fit (leaf number beyond 48 bits, region beyond 7 bits).
    pub const fn new(leaf_region: u8, leaf_num: u64) -> Option<Self> {
        if leaf_num > LEAF_MASK || leaf_region as u64 > REGION_MASK {
            return None;
        }
        Some(Self(((leaf_region as u64) << REGION_SHIFT) | leaf_num))
    }

    /// The entry from its raw word (every word is a valid entry).
    pub const fn from_raw(word: u64) -> Self {
        Self(word)
    }

    /// The raw word, as stored remotely.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Whether the lock bit is set.
    pub const fn is_locked(self) -> bool {
        self.0 >> LOCK_SHIFT != 0
    }

    /// The leaf region number.
    pub const fn leaf_region(self) -> u8 {
        ((self.0 >> REGION_SHIFT) & REGION_MASK) as u8
    }

    /// The SLT slot of the next leaf in the chain, 0 for none.
    pub const fn synonym_ptr(self) -> u8 {
        ((self.0 >> SYNONYM_SHIFT) & SYNONYM_MASK) as u8
    }

    /// The leaf number.
    pub const fn leaf_num(self) -> u64 {
        self.0 & LEAF_MASK
    }

    /// The same entry with the lock bit set.
    pub const fn locked(self) -> Self {
        Self(self.0 | (1 << LOCK_SHIFT))
    }

    /// The same entry with the lock bit clear.
    pub const fn unlocked(self) -> Self {
        Self(self.0 & !(1 << LOCK_SHIFT))
    }

    /// The same entry pointing at SLT slot `ptr` (0 = no synonym).
    pub const fn with_synonym(self, ptr: u8) -> Self {
        Self((self.0 & !(SYNONYM_MASK << SYNONYM_SHIFT)) | ((ptr as u64) << SYNONYM_SHIFT))
    }
}

impl std::fmt::Debug for LeafTableEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Entry{{leaf {}:{}, syn {}{}}}",
            self.leaf_region(),
            self.leaf_num(),
            self.synonym_ptr(),
            if self.is_locked() { ", locked" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        fn fields_round_trip(lock: bool, region: u8, ptr: u8, leaf: u64) -> bool {
            let (region, leaf) = (region & 0x7f, leaf & MAX_LEAF_NUM);
            let mut e = LeafTableEntry::new(region, leaf).expect("fields fit").with_synonym(ptr);
            if lock {
                e = e.locked();
            }
            let back = LeafTableEntry::from_raw(e.raw());
            back == e
                && back.is_locked() == lock
                && back.leaf_region() == region
                && back.synonym_ptr() == ptr
                && back.leaf_num() == leaf
                && !back.unlocked().is_locked()
                && back.unlocked().leaf_num() == leaf
                && back.with_synonym(0).synonym_ptr() == 0
                && back.with_synonym(0).leaf_num() == leaf
                && back.with_synonym(0).is_locked() == lock
        }

        fn every_word_decodes_and_re_encodes(word: u64) -> bool {
            let e = LeafTableEntry::from_raw(word);
            let rebuilt = LeafTableEntry::new(e.leaf_region(), e.leaf_num())
                .expect("fields of a word fit")
                .with_synonym(e.synonym_ptr());
            let rebuilt = if e.is_locked() { rebuilt.locked() } else { rebuilt };
            rebuilt.raw() == word
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let e = LeafTableEntry::new(0x7f, 0xabc)
            .expect("fits")
            .with_synonym(0x12)
            .locked();
        assert_eq!(e.raw(), 1 << 63 | 0x7f << 56 | 0x12 << 48 | 0xabc);
        assert!(LeafTableEntry::new(0x80, 0).is_none());
        assert!(LeafTableEntry::new(0, 1 << 48).is_none());
    }
}
