//! The self-checking words of a leaf: each slot's entry word and each group's meta word.
//!
//! ```text
//! entry word (one per slot; with the slot's key and value, checked as one):
//!   bits  0..16  hop bitmap: bit d set ⇔ slot home + d holds a key whose home is this slot
//!   bit   16     OCCUPIED: the slot holds a key
//!   bits 17..32  leaf version (15 bits)
//!   bits 32..64  check: 32 bits of a hash of (page, slot, key, value, bits 0..32)
//! meta word (one per group; with the group's sibling word, checked as one):
//!   bits  0..16  flags: VALID
//!   bits 17..32  leaf version
//!   bits 32..64  check: 32 bits of a hash of (page, group, sibling, bits 0..32)
//! tail word (one per leaf; with the high fence before it, checked as one):
//!   bits  0..16  flags: OPEN_HIGH (the leaf has no high fence)
//!   bits 17..32  leaf version
//!   bits 32..64  check: 32 bits of a hash of (page, high fence, bits 0..32)
//! ```
//!
//! **Invariant.** A READ may tear between any two words (this store's rule; CHIME's cache-line
//! versions assume a 64-byte line lands whole). A slot is accepted only when its three words
//! agree with its check, and a group's metadata only when its two do, so a reader sees each
//! slot and each metadata copy either as one writer left it or not at all (a false accept has
//! odds of 2⁻³² per torn slot). The leaf version, bumped by every split (which rewrites the
//! whole leaf), must be the same in every word a reader accepts: a READ that straddles a
//! split's WRITE is read again. It wraps after 2¹⁵ splits of one leaf during one READ.

/// The flag of a meta word: the leaf is in use.
pub const VALID: u16 = 1;

const OCCUPIED: u64 = 1 << 16;
const VERSION_SHIFT: u32 = 17;
const VERSION_MASK: u64 = (1 << 15) - 1;

/// A leaf version (15 bits).
pub fn next_version(version: u16) -> u16 {
    (version + 1) & VERSION_MASK as u16
}

/// 32 bits of a hash of `words` seeded with `seed`: a multiply-xorshift mix (the checks guard
/// against torn reads, not against an adversary).
fn check(seed: u64, words: [u64; 3]) -> u32 {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for w in words {
        h = (h ^ w).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h ^= h >> 31;
        h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 29;
    }
    (h >> 32) as u32
}

fn slot_seed(page: u64, slot: usize) -> u64 {
    page.rotate_left(8) ^ slot as u64
}

fn group_seed(page: u64, group: usize) -> u64 {
    page.rotate_left(8) ^ (0x80 | group as u64) << 56
}

/// The flag of a tail word: the leaf has no high fence.
const OPEN_HIGH: u64 = 1;

fn tail_seed(page: u64) -> u64 {
    page.rotate_left(8) ^ 0xC0 << 56
}

/// A leaf's high fence as a reader accepts it, with the version it was written at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tail {
    /// Keys of the leaf are below it (`None`: no bound).
    pub high: Option<u64>,
    /// The leaf version.
    pub version: u16,
}

impl Tail {
    /// The high fence's word and the tail word of page `page`.
    pub fn encode(&self, page: u64) -> [u64; 2] {
        let high = self.high.unwrap_or(u64::MAX);
        let low = if self.high.is_none() { OPEN_HIGH } else { 0 }
            | (u64::from(self.version) & VERSION_MASK) << VERSION_SHIFT;
        let sum = check(tail_seed(page), [high, low, 0]);
        [high, low | u64::from(sum) << 32]
    }

    /// Page `page`'s tail from its two words; `None` if they do not check.
    pub fn decode(page: u64, [high, word]: [u64; 2]) -> Option<Self> {
        let low = word & 0xFFFF_FFFF;
        if check(tail_seed(page), [high, low, 0]) != (word >> 32) as u32 {
            return None;
        }
        Some(Self {
            high: (low & OPEN_HIGH == 0).then_some(high),
            version: ((low >> VERSION_SHIFT) & VERSION_MASK) as u16,
        })
    }
}

/// A slot as a reader accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    /// The key and its value, if the slot holds one.
    pub kv: Option<(u64, u64)>,
    /// The hop bitmap of the keys whose home this slot is.
    pub hop: u16,
    /// The leaf version it was written at.
    pub version: u16,
}

impl Entry {
    /// The three words of slot `slot` of page `page`.
    pub fn encode(&self, page: u64, slot: usize) -> [u64; 3] {
        let (key, value) = self.kv.unwrap_or((0, 0));
        let low = u64::from(self.hop)
            | if self.kv.is_some() { OCCUPIED } else { 0 }
            | (u64::from(self.version) & VERSION_MASK) << VERSION_SHIFT;
        let sum = check(slot_seed(page, slot), [key, value, low]);
        [key, value, low | u64::from(sum) << 32]
    }

    /// Slot `slot` of page `page` from its three words; `None` if they do not check (torn, or
    /// never written).
    pub fn decode(page: u64, slot: usize, [key, value, word]: [u64; 3]) -> Option<Self> {
        let low = word & 0xFFFF_FFFF;
        if check(slot_seed(page, slot), [key, value, low]) != (word >> 32) as u32 {
            return None;
        }
        let occupied = low & OCCUPIED != 0;
        if !occupied && (key != 0 || value != 0) {
            return None;
        }
        Some(Self {
            kv: occupied.then_some((key, value)),
            hop: low as u16,
            version: ((low >> VERSION_SHIFT) & VERSION_MASK) as u16,
        })
    }
}

/// A group's copy of the leaf's metadata as a reader accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// The right sibling's page (0: none).
    pub sibling: u64,
    /// [`VALID`] and nothing else yet.
    pub flags: u16,
    /// The leaf version.
    pub version: u16,
}

impl Meta {
    /// The two words of group `group`'s copy in page `page`.
    pub fn encode(&self, page: u64, group: usize) -> [u64; 2] {
        let low = u64::from(self.flags) | (u64::from(self.version) & VERSION_MASK) << VERSION_SHIFT;
        let sum = check(group_seed(page, group), [self.sibling, low, 0]);
        [self.sibling, low | u64::from(sum) << 32]
    }

    /// Group `group`'s copy from its two words; `None` if they do not check.
    pub fn decode(page: u64, group: usize, [sibling, word]: [u64; 2]) -> Option<Self> {
        let low = word & 0xFFFF_FFFF;
        if check(group_seed(page, group), [sibling, low, 0]) != (word >> 32) as u32 {
            return None;
        }
        Some(Self {
            sibling,
            flags: low as u16,
            version: ((low >> VERSION_SHIFT) & VERSION_MASK) as u16,
        })
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        fn an_entry_round_trips(page: u64, slot: u8, kv: Option<(u64, u64)>, hop: u16, version: u16) -> bool {
            let e = Entry { kv, hop, version: version & VERSION_MASK as u16 };
            let slot = usize::from(slot % 64);
            Entry::decode(page, slot, e.encode(page, slot)) == Some(e)
        }

        fn a_tail_round_trips(page: u64, high: Option<u64>, version: u16) -> bool {
            let t = Tail { high, version: version & VERSION_MASK as u16 };
            Tail::decode(page, t.encode(page)) == Some(t) && Tail::decode(page ^ 1, t.encode(page)).is_none()
        }

        fn meta_round_trips(page: u64, group: u8, sibling: u64, version: u16) -> bool {
            let m = Meta { sibling, flags: VALID, version: version & VERSION_MASK as u16 };
            let group = usize::from(group % 8);
            Meta::decode(page, group, m.encode(page, group)) == Some(m)
        }

        /// Any word-wise mix of two different writes of one slot is refused, unless it is one
        /// of them whole.
        fn a_torn_slot_is_refused(page: u64, a: (u64, u64), b: (u64, u64), hops: (u16, u16), mask: u8) -> bool {
            let old = Entry { kv: Some(a), hop: hops.0, version: 1 }.encode(page, 5);
            let new = Entry { kv: Some(b), hop: hops.1, version: 1 }.encode(page, 5);
            let mixed: [u64; 3] = std::array::from_fn(|i| if mask >> i & 1 == 1 { new[i] } else { old[i] });
            match Entry::decode(page, 5, mixed) {
                None => true,
                Some(e) => mixed == old && e.kv == Some(a) || mixed == new && e.kv == Some(b),
            }
        }
    }

    #[test]
    fn a_slot_read_at_another_place_or_page_is_refused() {
        let e = Entry {
            kv: Some((7, 8)),
            hop: 0b101,
            version: 3,
        };
        let words = e.encode(11, 4);
        assert_eq!(Entry::decode(11, 4, words), Some(e));
        assert_eq!(Entry::decode(11, 5, words), None);
        assert_eq!(Entry::decode(12, 4, words), None);
        let m = Meta {
            sibling: 9,
            flags: VALID,
            version: 3,
        };
        assert_eq!(Meta::decode(11, 2, m.encode(11, 1)), None);
        assert_eq!(
            Meta::decode(11, 1, [0, 0]),
            None,
            "zeroed memory is no metadata"
        );
        assert_eq!(
            Entry::decode(11, 1, [0, 0, 0]),
            None,
            "zeroed memory is no slot"
        );
    }
}
