//! Remote addresses.

use std::fmt;

/// Largest byte offset a [`RemoteAddr`] can carry (48 bits).
pub const MAX_OFFSET: u64 = (1 << OFFSET_BITS) - 1;

const OFFSET_BITS: u32 = 48;
const NODE_SHIFT: u32 = OFFSET_BITS;

/// A byte address in the memory of one memory node.
///
/// Packs into one `u64` so it can be stored in remote memory and swapped atomically:
///
/// ```text
///  63            48 47                                             0
/// +----------------+------------------------------------------------+
/// |  memory node   |                  byte offset                   |
/// +----------------+------------------------------------------------+
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RemoteAddr {
    node: u16,
    offset: u64,
}

impl RemoteAddr {
    /// The address `offset` on memory node `node`, or `None` if `offset` exceeds 48 bits.
    pub const fn new(node: u16, offset: u64) -> Option<Self> {
        if offset > MAX_OFFSET {
            None
        } else {
            Some(Self { node, offset })
        }
    }

    /// The address `offset` on memory node `node`, an offset beyond 48 bits becoming the largest
    /// one: no memory node's region reaches it, so a verb there fails with an out-of-bounds error
    /// instead of touching other data.
    pub const fn saturating(node: u16, offset: u64) -> Self {
        Self {
            node,
            offset: if offset > MAX_OFFSET {
                MAX_OFFSET
            } else {
                offset
            },
        }
    }

    /// Memory-node id.
    pub const fn node(self) -> u16 {
        self.node
    }

    /// Byte offset inside the memory node's region.
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// The address `bytes` further on, or `None` if that leaves the 48-bit offset space.
    pub const fn checked_add(self, bytes: u64) -> Option<Self> {
        match self.offset.checked_add(bytes) {
            Some(offset) => Self::new(self.node, offset),
            None => None,
        }
    }

    /// The address `bytes` further on; past the 48-bit offset space, the largest offset (see
    /// [`RemoteAddr::saturating`]: a verb there fails instead of touching other data).
    pub const fn saturating_add(self, bytes: u64) -> Self {
        Self::saturating(self.node, self.offset.saturating_add(bytes))
    }

    /// The packed form: node in bits 48–63, offset in bits 0–47.
    pub const fn pack(self) -> u64 {
        ((self.node as u64) << NODE_SHIFT) | self.offset
    }

    /// Inverse of [`RemoteAddr::pack`]; every `u64` is a valid packed address.
    pub const fn unpack(word: u64) -> Self {
        Self {
            node: (word >> NODE_SHIFT) as u16,
            offset: word & MAX_OFFSET,
        }
    }

    /// Whether the address is a multiple of 8, as remote atomics require.
    pub const fn is_word_aligned(self) -> bool {
        self.offset.is_multiple_of(8)
    }
}

impl fmt::Debug for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{:#x}", self.node, self.offset)
    }
}

impl fmt::Display for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_at_field_limits() {
        for node in [0u16, 1, 0x1234, u16::MAX] {
            for offset in [0u64, 8, 0xdead_beef, MAX_OFFSET] {
                let addr = RemoteAddr::new(node, offset).expect("offset within 48 bits");
                assert_eq!(RemoteAddr::unpack(addr.pack()), addr);
                assert_eq!(addr.pack() >> 48, u64::from(node));
                assert_eq!(addr.pack() & MAX_OFFSET, offset);
            }
        }
    }

    #[test]
    fn offsets_beyond_48_bits_are_refused() {
        assert!(RemoteAddr::new(0, MAX_OFFSET + 1).is_none());
        let last = RemoteAddr::new(3, MAX_OFFSET).expect("max offset is valid");
        assert!(last.checked_add(1).is_none());
        assert_eq!(
            RemoteAddr::new(3, 8).and_then(|a| a.checked_add(8)),
            RemoteAddr::new(3, 16)
        );
    }

    #[test]
    fn saturating_keeps_the_node_and_clamps_the_offset() {
        assert_eq!(
            RemoteAddr::saturating(7, 64),
            RemoteAddr::new(7, 64).expect("valid")
        );
        let clamped = RemoteAddr::saturating(7, u64::MAX);
        assert_eq!((clamped.node(), clamped.offset()), (7, MAX_OFFSET));
        assert_eq!(
            RemoteAddr::saturating(7, MAX_OFFSET + 1).offset(),
            MAX_OFFSET
        );
    }

    #[test]
    fn alignment() {
        assert!(RemoteAddr::new(0, 64).is_some_and(RemoteAddr::is_word_aligned));
        assert!(!RemoteAddr::new(0, 12).is_some_and(RemoteAddr::is_word_aligned));
    }
}
