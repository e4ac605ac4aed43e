//! The retraining ring (the paper's CirQ): where compute nodes queue model slots for retraining.
//!
//! ```text
//! word 0 head (next entry the memory node consumes)      word 2 capacity (entries)
//! word 1 tail (next entry a compute node claims, by FAA)  word 3 in flight (see below)
//! word 4 split slot + 1 (v4; 0: none)                     word 5 split record (v4)
//! word 6 split lower record (v4)                          word 7 reserved
//! words 8 .. 8 + capacity          entries (RingEntry): the slot queued at a position, tagged
//!                                  with the position's lap, so an entry from an earlier lap is
//!                                  never mistaken for the current one (nothing is zeroed)
//! then ceil(slot capacity / 64)    queued bitmap: bit (slot mod 64) of word (slot / 64) is set
//!                                  (by CAS) while the slot is queued, so no slot is queued twice
//! ```
//!
//! The in-flight word is the memory node's own: the packed address of the record its worker is
//! retraining from just before the freeze until the old record is retired, else 0 — so a worker
//! started after a crash knows which record may be left frozen or unretired. Pools written before
//! it existed hold 0 there (the word was reserved and zero).
//!
//! The split words (layout v4) journal a slot split (see the retrainer): the new slot's id plus
//! one, the packed address of its record, and the packed address of the record that replaces the
//! old one in the split slot. They are written before the old record is retired and cleared once
//! the split slot names its new record, so a worker started after a crash finishes a split whose
//! new slot was already published.
//!
//! The protocols (enqueue with FAA + WRITE, priority, consumption, recovery) belong to the
//! retrainer; this is only where the words are.

use rdma_transport::RemoteAddr;

use crate::Layout;

/// One ring entry: the slot queued at a ring position.
///
/// ```text
///  63   62 ................ 32   31 ............ 0
/// ┌───┬───────────────────────┬──────────────────┐
/// │ 1 │ lap (31 bits)         │ slot (32 bits)   │
/// └───┴───────────────────────┴──────────────────┘
/// lap = (position / capacity) mod 2^31; an all-zero word was never written
/// ```
///
/// The consumer accepts the entry at position `p` only if it carries `p`'s lap: a position
/// claimed (tail FAA) but not yet written still holds an entry of an earlier lap, or 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingEntry(u64);

impl RingEntry {
    const WRITTEN: u64 = 1 << 63;
    const LAP_SHIFT: u32 = 32;
    const LAP_MASK: u64 = (1 << 31) - 1;
    const SLOT_MASK: u64 = (1 << 32) - 1;
    /// Largest slot an entry can name.
    pub const MAX_SLOT: u64 = Self::SLOT_MASK;

    /// The entry queueing `slot` at `position` of a ring of `capacity` entries; `None` if the
    /// slot does not fit.
    pub fn new(position: u64, capacity: u64, slot: u64) -> Option<Self> {
        (slot <= Self::MAX_SLOT).then(|| {
            Self(Self::WRITTEN | (Self::lap(position, capacity) << Self::LAP_SHIFT) | slot)
        })
    }

    /// The entry as stored.
    pub fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The stored word.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The queued slot, if this word is the entry written for `position` (not one of an earlier
    /// lap, not unwritten).
    pub fn slot_at(self, position: u64, capacity: u64) -> Option<u64> {
        let lap = (self.0 >> Self::LAP_SHIFT) & Self::LAP_MASK;
        (self.0 & Self::WRITTEN != 0 && lap == Self::lap(position, capacity))
            .then_some(self.0 & Self::SLOT_MASK)
    }

    fn lap(position: u64, capacity: u64) -> u64 {
        (position / capacity.max(1)) & Self::LAP_MASK
    }
}

/// Addresses of the ring's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLayout {
    layout: Layout,
}

impl RingLayout {
    /// The ring of `layout`'s pool.
    pub fn new(layout: Layout) -> Self {
        Self { layout }
    }

    /// Words before the entries.
    pub const HEADER_WORDS: u64 = 8;

    /// Ring bytes for `capacity` entries and a slot table of `slot_capacity` slots.
    pub fn bytes(capacity: u64, slot_capacity: u64) -> u64 {
        8 * (Self::HEADER_WORDS + capacity + slot_capacity.div_ceil(64))
    }

    fn base(&self) -> u64 {
        self.layout.superblock().ring_offset
    }

    /// The head word.
    pub fn head(&self) -> RemoteAddr {
        self.layout.at(self.base())
    }

    /// The tail word.
    pub fn tail(&self) -> RemoteAddr {
        self.layout.at(self.base() + 8)
    }

    /// The in-flight word: the record being retrained, packed, or 0.
    pub fn in_flight(&self) -> RemoteAddr {
        self.layout.at(self.base() + 24)
    }

    /// The split journal's first word: the new slot's id plus one, or 0.
    pub fn split_slot(&self) -> RemoteAddr {
        self.layout.at(self.base() + 32)
    }

    /// The split journal's second word: the new slot's record, packed.
    pub fn split_record(&self) -> RemoteAddr {
        self.layout.at(self.base() + 40)
    }

    /// The split journal's third word: the split slot's new (lower) record, packed.
    pub fn split_lower(&self) -> RemoteAddr {
        self.layout.at(self.base() + 48)
    }

    /// The capacity word.
    pub fn capacity_word(&self) -> RemoteAddr {
        self.layout.at(self.base() + 16)
    }

    /// The first entry; the `capacity` entries are contiguous from here.
    pub fn entries(&self) -> RemoteAddr {
        self.layout.at(self.base() + 8 * Self::HEADER_WORDS)
    }

    /// The first queued-bitmap word; the `ceil(slot capacity / 64)` words are contiguous from here.
    pub fn bitmap(&self) -> RemoteAddr {
        self.queued_bit(0).0
    }

    /// Entry for ring position `position` (taken modulo the capacity).
    pub fn entry(&self, position: u64) -> RemoteAddr {
        let capacity = self.layout.superblock().ring_capacity.max(1);
        self.layout
            .at(self.base() + 8 * Self::HEADER_WORDS + 8 * (position % capacity))
    }

    /// The bitmap word holding slot `slot`'s queued bit, and the bit.
    pub fn queued_bit(&self, slot: u64) -> (RemoteAddr, u64) {
        let capacity = self.layout.superblock().ring_capacity;
        (
            self.layout
                .at(self.base() + 8 * Self::HEADER_WORDS + 8 * capacity + 8 * (slot / 64)),
            1 << (slot % 64),
        )
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::RingEntry;

    quickcheck! {
        /// The word at a ring index is accepted only for the lap it was written in: never for a
        /// later lap of the same index (a claimed, not yet written position), never if unwritten.
        fn an_entry_is_accepted_in_its_lap_only(position: u64, capacity: u16, slot: u32, laps: u16) -> bool {
            let capacity = u64::from(capacity) + 1;
            let position = position >> 20; // room for laps ahead
            let Some(entry) = RingEntry::new(position, capacity, u64::from(slot)) else {
                return false;
            };
            let later = position + capacity * (u64::from(laps) + 1);
            entry.slot_at(position, capacity) == Some(u64::from(slot))
                && entry.slot_at(later, capacity).is_none()
                && RingEntry::from_raw(0).slot_at(position, capacity).is_none()
        }
    }

    #[test]
    fn slots_beyond_32_bits_do_not_fit() {
        assert!(RingEntry::new(0, 8, RingEntry::MAX_SLOT).is_some());
        assert!(RingEntry::new(0, 8, RingEntry::MAX_SLOT + 1).is_none());
    }
}
