//! The 64-bit LT/SLT entry.

/// One entry of a leaf table (LT) or synonym leaf table (SLT):
///
/// ```text
///  63   62          56 55          48 47                                              0
/// +----+--------------+--------------+-------------------------------------------------+
/// |lock|    owner     | synonym_ptr  |                    leaf_num                     |
/// +----+--------------+--------------+-------------------------------------------------+
///   1        7               8                              48 bits
/// ```
///
/// * `lock` — set while a writer holds the trained leaf and its whole synonym chain (only LT
///   entries are ever locked; SLT entries share their trained leaf's lock).
/// * `owner` — while locked, the lock holder's member tag on this memory node (1..=126, see
///   [`crate::members`]; 0 = a holder that did not join; [`FREEZE_OWNER`], 127, = the
///   retrainer, which holds every LT lock of a record it freezes, and never lets go of a
///   record it replaced); 0 while unlocked. Recovery finds a dead compute node's locks by this
///   tag, so taking a lock records its holder for free. (Layout v2 called these bits
///   `leaf_region` and always kept them 0.)
/// * `synonym_ptr` — the SLT slot (1..=255) of the next leaf in this chain; 0 = end of chain.
/// * `leaf_num` — the leaf's number in its region (address = region base + 16 + num · leaf size).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LeafTableEntry(u64);

const LOCK_SHIFT: u32 = 63;
const OWNER_SHIFT: u32 = 56;
const OWNER_MASK: u64 = 0x7f;
const SYNONYM_SHIFT: u32 = 48;
const SYNONYM_MASK: u64 = 0xff;
const LEAF_MASK: u64 = (1 << 48) - 1;

/// Largest leaf number an entry can hold.
pub const MAX_LEAF_NUM: u64 = LEAF_MASK;
/// Largest owner tag an entry can hold (member tags are 1..=126).
pub const MAX_OWNER: u8 = OWNER_MASK as u8;
/// The owner tag of the locks a retrainer's freeze holds (no member has it): a writer whose lock
/// CAS finds it knows the record is frozen or replaced (ARCHITECTURE §7).
pub const FREEZE_OWNER: u8 = MAX_OWNER;

impl LeafTableEntry {
    /// Marks an SLT slot that holds no leaf: every slot of a record as it is built
    /// ([`crate::unclaimed_slt`]), so also one handed out (its `slot_use` FAA happened) and
    /// never written, and one the split that claimed it gave up (the leaf region exhausted, its
    /// batch failed). `slot_use` only grows, so such a slot is never reused; `verify` accepts it
    /// as long as no chain links it. A slot whose synonym leaf a delete unlinked is marked
    /// [`LeafTableEntry::freed`] with that leaf instead.
    pub const FREED: Self = Self(u64::MAX >> 1);

    /// An SLT slot marked freed that names the leaf it held (unlinked by a delete): the
    /// retrainer, which rebuilds the record without the slot, hands the leaf out again. Bits:
    /// lock 0, owner and synonym all ones, then the leaf number.
    pub const fn freed(leaf_num: u64) -> Self {
        Self((Self::FREED.0 & !LEAF_MASK) | (leaf_num & LEAF_MASK))
    }

    /// Whether this marks a freed SLT slot ([`LeafTableEntry::FREED`] or
    /// [`LeafTableEntry::freed`]).
    pub const fn is_freed(self) -> bool {
        self.0 >> SYNONYM_SHIFT == Self::FREED.0 >> SYNONYM_SHIFT
    }

    /// The leaf a freed SLT slot names, if any.
    pub const fn freed_leaf(self) -> Option<u64> {
        if self.is_freed() && self.leaf_num() != LEAF_MASK {
            Some(self.leaf_num())
        } else {
            None
        }
    }

    /// An unlocked entry for leaf `leaf_num` with no synonym. `None` if the leaf number does not
    /// fit in 48 bits.
    pub const fn new(leaf_num: u64) -> Option<Self> {
        if leaf_num > LEAF_MASK {
            return None;
        }
        Some(Self(leaf_num))
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

    /// The lock holder's member tag (0 while unlocked, or for a holder that did not join).
    pub const fn owner(self) -> u8 {
        ((self.0 >> OWNER_SHIFT) & OWNER_MASK) as u8
    }

    /// The SLT slot of the next leaf in the chain, 0 for none.
    pub const fn synonym_ptr(self) -> u8 {
        ((self.0 >> SYNONYM_SHIFT) & SYNONYM_MASK) as u8
    }

    /// The leaf number.
    pub const fn leaf_num(self) -> u64 {
        self.0 & LEAF_MASK
    }

    /// The same entry with the lock bit set (the owner tag unchanged).
    pub const fn locked(self) -> Self {
        Self(self.0 | (1 << LOCK_SHIFT))
    }

    /// The same entry locked by member `owner` (tags above [`MAX_OWNER`] are cut to 7 bits).
    pub const fn locked_by(self, owner: u8) -> Self {
        Self(
            (self.0 & !(OWNER_MASK << OWNER_SHIFT))
                | (1 << LOCK_SHIFT)
                | ((owner as u64 & OWNER_MASK) << OWNER_SHIFT),
        )
    }

    /// The same entry locked by a retrainer's freeze ([`FREEZE_OWNER`]).
    pub const fn frozen(self) -> Self {
        self.locked_by(FREEZE_OWNER)
    }

    /// Whether a retrainer's freeze holds this entry's lock.
    pub const fn is_frozen(self) -> bool {
        self.is_locked() && self.owner() == FREEZE_OWNER
    }

    /// Whether a writer (not a freeze) holds this entry's lock.
    pub const fn is_held_by_writer(self) -> bool {
        self.is_locked() && self.owner() != FREEZE_OWNER
    }

    /// The same entry unlocked: lock bit and owner tag clear.
    pub const fn unlocked(self) -> Self {
        Self(self.0 & !(1 << LOCK_SHIFT) & !(OWNER_MASK << OWNER_SHIFT))
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
            "Entry{{leaf {}, syn {}{}}}",
            self.leaf_num(),
            self.synonym_ptr(),
            if self.is_locked() {
                format!(", locked by {}", self.owner())
            } else {
                String::new()
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        fn fields_round_trip(lock: bool, owner: u8, ptr: u8, leaf: u64) -> bool {
            let (owner, leaf) = (owner & MAX_OWNER, leaf & MAX_LEAF_NUM);
            let mut e = LeafTableEntry::new(leaf).expect("fields fit").with_synonym(ptr);
            if lock {
                e = e.locked_by(owner);
            }
            let back = LeafTableEntry::from_raw(e.raw());
            back == e
                && back.is_locked() == lock
                && back.owner() == if lock { owner } else { 0 }
                && back.unlocked().owner() == 0
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
            let rebuilt = LeafTableEntry::new(e.leaf_num())
                .expect("fields of a word fit")
                .with_synonym(e.synonym_ptr());
            let rebuilt = if e.is_locked() { rebuilt.locked_by(e.owner()) } else { rebuilt };
            // An unlocked word with owner bits (only FREED is one) is the one exception.
            rebuilt.raw() == word || (!e.is_locked() && e.owner() != 0)
        }
    }

    #[test]
    fn freed_slots_may_name_their_leaf() {
        assert!(LeafTableEntry::FREED.is_freed());
        assert_eq!(LeafTableEntry::FREED.freed_leaf(), None);
        let f = LeafTableEntry::freed(42);
        assert!(f.is_freed() && !f.is_locked());
        assert_eq!(f.freed_leaf(), Some(42));
        assert!(!LeafTableEntry::new(42).expect("fits").is_freed());
        assert!(
            !LeafTableEntry::new(42)
                .expect("fits")
                .with_synonym(0xff)
                .locked_by(0x7f)
                .is_freed()
        );
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let e = LeafTableEntry::new(0xabc)
            .expect("fits")
            .with_synonym(0x12)
            .locked_by(0x7f);
        assert_eq!(e.raw(), 1 << 63 | 0x7f << 56 | 0x12 << 48 | 0xabc);
        assert_eq!(e.unlocked().raw(), 0x12 << 48 | 0xabc);
        assert_eq!(e.locked_by(3).owner(), 3);
        assert!(LeafTableEntry::new(1 << 48).is_none());
    }
}
