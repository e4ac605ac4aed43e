//! The retraining ring (the paper's CirQ): where compute nodes queue model slots for retraining.
//!
//! ```text
//! word 0 head (next entry the memory node consumes)      word 2 capacity (entries)
//! word 1 tail (next entry a compute node claims, by FAA)  word 3 reserved
//! words 4 .. 4 + capacity          entries: VALID (bit 63) | slot id, 0 = empty
//! then ceil(slots / 64) words      queued bitmap: bit (slot mod 64) of word (slot / 64) is set
//!                                  (by CAS) while the slot is queued, so no slot is queued twice
//! ```
//!
//! The protocols (enqueue with FAA + WRITE, priority, consumption) belong to the retrainer; this
//! is only where the words are.

use rdma_transport::RemoteAddr;

use crate::Layout;

/// Flag of a filled ring entry.
pub const RING_VALID: u64 = 1 << 63;

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

    /// Ring bytes for `capacity` entries and `slots` slots.
    pub fn bytes(capacity: u64, slots: u64) -> u64 {
        8 * (4 + capacity + slots.div_ceil(64))
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

    /// The capacity word.
    pub fn capacity_word(&self) -> RemoteAddr {
        self.layout.at(self.base() + 16)
    }

    /// Entry for ring position `position` (taken modulo the capacity).
    pub fn entry(&self, position: u64) -> RemoteAddr {
        let capacity = self.layout.superblock().ring_capacity.max(1);
        self.layout.at(self.base() + 32 + 8 * (position % capacity))
    }

    /// The bitmap word holding slot `slot`'s queued bit, and the bit.
    pub fn queued_bit(&self, slot: u64) -> (RemoteAddr, u64) {
        let capacity = self.layout.superblock().ring_capacity;
        (
            self.layout
                .at(self.base() + 32 + 8 * capacity + 8 * (slot / 64)),
            1 << (slot % 64),
        )
    }
}
