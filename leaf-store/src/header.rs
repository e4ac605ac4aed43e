//! The model record's header word: what compute nodes read in every batch to check freshness.

/// The first word of every model record. Any change to the record that a compute node must notice
/// — a new synonym leaf, an unlinked leaf, a retraining in progress or done — changes this word,
/// so reading it in the same batch as the leaves tells the reader whether its cache is fresh.
///
/// ```text
///  63      62      61                40 39                    16 15              0
/// +-------+-------+--------------------+------------------------+-----------------+
/// |retired|locked |    generation      |        changes         |    slot_use     |
/// +-------+-------+--------------------+------------------------+-----------------+
///    1       1            22 bits                24 bits              16 bits
/// ```
///
/// * `slot_use` — SLT slots handed out (the paper's SLT entry 0). At most 255 are valid; the field
///   is 16 bits wide so that FAAs racing past a full SLT (each undone by its issuer) can never carry
///   into `changes`. Bumped with FAA of [`ModelHeader::SLOT_USE_ONE`].
/// * `changes` — structural changes that do not allocate (e.g. unlinking an emptied synonym leaf).
///   Bumped with FAA of [`ModelHeader::CHANGE_ONE`]; bounded per record far below 2^24.
/// * `generation` — the retraining generation of the record (a new record gets its old one's + 1).
/// * `locked` — the retrainer has frozen the record for shadow redirection.
/// * `retired` — the record is being replaced. The retrainer sets it on the frozen record *before*
///   it points the slot table at the new one, so data read through a retired record is complete
///   exactly while the slot table still names it: readers confirm that (one more READ) or reload.
///   Writers wait for the new record.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ModelHeader(u64);

const SLOT_USE_MASK: u64 = 0xffff;
const CHANGES_SHIFT: u32 = 16;
const CHANGES_MASK: u64 = (1 << 24) - 1;
const GENERATION_SHIFT: u32 = 40;
const GENERATION_MASK: u64 = (1 << 22) - 1;
const LOCKED_BIT: u64 = 1 << 62;
const RETIRED_BIT: u64 = 1 << 63;

/// SLT slots per record, including the reserved slot 0 (the paper's `slot_use` entry).
pub const SLT_SLOTS: usize = 256;
/// Synonym leaves one record can link: SLT slots 1..=255.
pub const MAX_SYNONYMS: u64 = SLT_SLOTS as u64 - 1;

impl ModelHeader {
    /// FAA addend that hands out one SLT slot.
    pub const SLOT_USE_ONE: u64 = 1;
    /// FAA addend that records one structural change.
    pub const CHANGE_ONE: u64 = 1 << CHANGES_SHIFT;
    /// Largest generation a header can carry (generations wrap past it).
    pub const MAX_GENERATION: u64 = GENERATION_MASK;
    /// Bits of the generation field.
    pub const GENERATION_BITS: u64 = GENERATION_MASK.count_ones() as u64;

    /// A fresh header of generation `generation` (wrapped to 22 bits): no SLT slot used, no
    /// change, neither locked nor retired.
    pub const fn new(generation: u64) -> Self {
        Self((generation & GENERATION_MASK) << GENERATION_SHIFT)
    }

    /// From the raw word.
    pub const fn from_raw(word: u64) -> Self {
        Self(word)
    }

    /// The raw word.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// SLT slots handed out (may exceed 255 transiently while over-capacity FAAs are undone).
    pub const fn slot_use(self) -> u64 {
        self.0 & SLOT_USE_MASK
    }

    /// Structural changes recorded.
    pub const fn changes(self) -> u64 {
        (self.0 >> CHANGES_SHIFT) & CHANGES_MASK
    }

    /// Retraining generation.
    pub const fn generation(self) -> u64 {
        (self.0 >> GENERATION_SHIFT) & GENERATION_MASK
    }

    /// Whether the retrainer froze the record.
    pub const fn is_locked(self) -> bool {
        self.0 & LOCKED_BIT != 0
    }

    /// Whether the record was replaced.
    pub const fn is_retired(self) -> bool {
        self.0 & RETIRED_BIT != 0
    }

    /// The same header with the locked flag set.
    pub const fn locked(self) -> Self {
        Self(self.0 | LOCKED_BIT)
    }

    /// The same header with the retired flag set.
    pub const fn retired(self) -> Self {
        Self(self.0 | RETIRED_BIT)
    }

    /// The same header with neither the locked nor the retired flag: the part that changes when
    /// the record's tables change. Two reads whose headers agree here saw the same chains.
    pub const fn without_flags(self) -> Self {
        Self(self.0 & !(LOCKED_BIT | RETIRED_BIT))
    }

    /// The same header with `slot_use` replaced (values above 16 bits are truncated).
    pub const fn with_slot_use(self, slot_use: u64) -> Self {
        Self((self.0 & !SLOT_USE_MASK) | (slot_use & SLOT_USE_MASK))
    }
}

impl std::fmt::Debug for ModelHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Header{{gen {}, slot_use {}, changes {}{}{}}}",
            self.generation(),
            self.slot_use(),
            self.changes(),
            if self.is_locked() { ", locked" } else { "" },
            if self.is_retired() { ", retired" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        fn fields_round_trip(generation: u64, slot_use: u16, changes: u32, locked: bool, retired: bool) -> bool {
            let generation = generation & ModelHeader::MAX_GENERATION;
            let changes = u64::from(changes) & CHANGES_MASK;
            let mut h = ModelHeader::new(generation).with_slot_use(u64::from(slot_use));
            h = ModelHeader::from_raw(h.raw().wrapping_add(changes * ModelHeader::CHANGE_ONE));
            if locked { h = h.locked(); }
            if retired { h = h.retired(); }
            h.generation() == generation && h.slot_use() == u64::from(slot_use) && h.changes() == changes
                && h.is_locked() == locked && h.is_retired() == retired
        }
    }

    #[test]
    fn faa_addends_touch_only_their_field() {
        let h = ModelHeader::new(5).locked();
        let bumped = ModelHeader::from_raw(h.raw() + ModelHeader::SLOT_USE_ONE);
        assert_eq!(
            (
                bumped.slot_use(),
                bumped.changes(),
                bumped.generation(),
                bumped.is_locked()
            ),
            (1, 0, 5, true)
        );
        let changed = ModelHeader::from_raw(bumped.raw() + ModelHeader::CHANGE_ONE);
        assert_eq!(
            (changed.slot_use(), changed.changes(), changed.generation()),
            (1, 1, 5)
        );
        // 300 racing over-capacity FAAs stay inside slot_use.
        let full = ModelHeader::from_raw(
            h.with_slot_use(MAX_SYNONYMS).raw() + 300 * ModelHeader::SLOT_USE_ONE,
        );
        assert_eq!(
            (full.slot_use(), full.changes(), full.generation()),
            (555, 0, 5)
        );
        assert_eq!(ModelHeader::new(1).raw(), 1 << 40);
    }
}
