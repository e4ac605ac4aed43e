//! The superblock and the address arithmetic of a pool.

use bytemuck::{Pod, Zeroable};
use rdma_transport::{Endpoint, MemoryNodeInfo, RemoteAddr};

use crate::{LeafStoreError, leaf_bytes};

/// `"ROLEXPL1"`: the first word of every pool.
pub const SUPERBLOCK_MAGIC: u64 = u64::from_le_bytes(*b"ROLEXPL1");
/// The layout version this build writes and reads (7: a record's unclaimed SLT entries are
/// `FREED`, not 0).
pub const LAYOUT_VERSION: u64 = 7;
/// Size of the superblock at offset 0.
pub const SUPERBLOCK_BYTES: u64 = 256;

/// The superblock: 32 little-endian words at offset 0 of every memory node, written last by bulk
/// load and never changed afterwards. A compute node needs nothing else to attach.
///
/// ```text
/// word  0 magic "ROLEXPL1"       8 key_lo (first key served)   16 model_region_offset  26..30 reserved
///       1 layout version         9 key_hi (last key served)    17 model_region_bytes   31 checksum
///       2 ε                     10 pool_bytes (laid out)       18 ring_offset
///       3 δ                     11 leaf_region_offset          19 ring_capacity
///       4 fill (bulk load)      12 leaf_capacity (leaves)      20 keys at bulk load
///       5 slot_leaves           13 leaf_bytes (v6: 24 + 16·δ)  21 trained leaves at bulk load
///       6 node_id               14 slot_table_offset           22 model records' bytes at bulk load
///       7 node_count            15 slots (at bulk load)        23 members_offset (v3)
///                                                              24 slot_capacity (v4)
///                                                              25 generation_bits (0: 22)
///                                                              26 value_region_offset (v5)
///                                                              27 value_region_bytes (v5; 0:
///                                                                 values are u64 words)
///                                                              28 value_chunk_bytes (v5)
/// ```
///
/// Regions, in address order: superblock, slot table (v4: a slot count word and a reserved word,
/// then `slot_capacity` × 16 bytes: record address, first key; retraining splits slots and
/// publishes new ones at the end, see [`Layout::slot_count_addr`]), retraining ring, membership table ([`crate::members`], v3), model region (`[next_free][end]` then records), leaf region
/// (`[alloc_num][capacity]` then `leaf_capacity` leaves), and in a pool with byte values the value
/// region ([`crate::value`], v5). `checksum` is XXH3-64 of words 0..31.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Superblock {
    pub magic: u64,
    pub version: u64,
    pub epsilon: u64,
    pub delta: u64,
    pub fill: u64,
    pub slot_leaves: u64,
    pub node_id: u64,
    pub node_count: u64,
    pub key_lo: u64,
    pub key_hi: u64,
    pub pool_bytes: u64,
    pub leaf_region_offset: u64,
    pub leaf_capacity: u64,
    pub leaf_bytes: u64,
    pub slot_table_offset: u64,
    pub slots: u64,
    pub model_region_offset: u64,
    pub model_region_bytes: u64,
    pub ring_offset: u64,
    pub ring_capacity: u64,
    pub keys_loaded: u64,
    pub trained_leaves: u64,
    pub record_bytes_loaded: u64,
    pub members_offset: u64,
    pub slot_capacity: u64,
    /// Width of the record generations the memory node hands out; 0 (every pool before this word
    /// was used) means the header's full 22 bits. Narrower only to test wrap-around.
    pub generation_bits: u64,
    /// Where the value region starts (v5; see [`crate::value`]).
    pub value_region_offset: u64,
    /// The value region's length; 0: the pool stores `u64` values in its leaves.
    pub value_region_bytes: u64,
    /// Bytes per value chunk.
    pub value_chunk_bytes: u64,
    pub reserved: [u64; 2],
    pub checksum: u64,
}

const _: () = assert!(std::mem::size_of::<Superblock>() as u64 == SUPERBLOCK_BYTES);

impl Superblock {
    fn computed_checksum(&self) -> u64 {
        let bytes = bytemuck::bytes_of(self);
        xxhash_rust::xxh3::xxh3_64(&bytes[..bytes.len() - 8])
    }

    /// The superblock with its checksum filled in.
    pub fn sealed(mut self) -> Self {
        self.checksum = self.computed_checksum();
        self
    }

    /// Its bytes, as stored.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_BYTES as usize] {
        let mut out = [0u8; SUPERBLOCK_BYTES as usize];
        out.copy_from_slice(bytemuck::bytes_of(self));
        out
    }

    /// Decodes and checks a superblock read from a memory node of `region_len` bytes: magic,
    /// version, checksum, parameter ranges, and that every region lies inside the node, in order.
    pub fn decode(bytes: &[u8], region_len: u64) -> Result<Self, LeafStoreError> {
        let bytes = bytes
            .get(..SUPERBLOCK_BYTES as usize)
            .ok_or(LeafStoreError::CorruptSuperblock("shorter than 256 bytes"))?;
        let sb: Superblock = bytemuck::pod_read_unaligned(bytes);
        if sb.magic != SUPERBLOCK_MAGIC {
            return Err(LeafStoreError::BadMagic(sb.magic));
        }
        if sb.version != LAYOUT_VERSION {
            return Err(LeafStoreError::UnsupportedVersion {
                found: sb.version,
                supported: LAYOUT_VERSION,
            });
        }
        if sb.checksum != sb.computed_checksum() {
            return Err(LeafStoreError::CorruptSuperblock("checksum mismatch"));
        }
        learned_model::ModelParams::new(sb.epsilon, sb.delta)
            .map_err(|_| LeafStoreError::CorruptSuperblock("ε or δ out of range"))?;
        if sb.generation_bits > crate::ModelHeader::GENERATION_BITS {
            return Err(LeafStoreError::CorruptSuperblock(
                "generation width beyond the header's",
            ));
        }
        if sb.fill == 0 || sb.fill > sb.delta || sb.slot_leaves == 0 {
            return Err(LeafStoreError::CorruptSuperblock(
                "fill or slot size out of range",
            ));
        }
        if sb.leaf_bytes != leaf_bytes(sb.delta)
            || sb.key_lo > sb.key_hi
            || sb.slots == 0
            || sb.slot_capacity < sb.slots
            || sb.slot_capacity > crate::RingEntry::MAX_SLOT + 1
            || sb.ring_capacity < sb.slot_capacity
        {
            return Err(LeafStoreError::CorruptSuperblock(
                "inconsistent leaf size, key range or slots",
            ));
        }
        let leaf_end = sb
            .leaf_capacity
            .checked_mul(sb.leaf_bytes)
            .and_then(|b| b.checked_add(16 + sb.leaf_region_offset));
        let ring_end = sb
            .ring_capacity
            .checked_add(crate::RingLayout::HEADER_WORDS)
            .and_then(|w| w.checked_add(sb.slot_capacity.div_ceil(64)));
        let ordered = sb.slot_table_offset >= SUPERBLOCK_BYTES
            && sb
                .slot_capacity
                .checked_add(1)
                .and_then(|s| s.checked_mul(16))
                .and_then(|b| b.checked_add(sb.slot_table_offset))
                .is_some_and(|e| e <= sb.ring_offset)
            && ring_end
                .and_then(|w| w.checked_mul(8))
                .and_then(|b| b.checked_add(sb.ring_offset))
                .is_some_and(|e| e <= sb.members_offset)
            && sb
                .members_offset
                .checked_add(crate::members::MEMBERS_BYTES)
                .is_some_and(|e| e <= sb.model_region_offset)
            && sb
                .model_region_offset
                .checked_add(sb.model_region_bytes)
                .is_some_and(|e| e <= sb.leaf_region_offset)
            && leaf_end.is_some_and(|e| e <= sb.pool_bytes)
            && (sb.value_region_bytes == 0
                || (leaf_end.is_some_and(|e| e <= sb.value_region_offset)
                    && sb
                        .value_region_offset
                        .checked_add(sb.value_region_bytes)
                        .is_some_and(|e| e <= sb.pool_bytes)
                    && sb.value_region_offset.is_multiple_of(8)
                    && crate::value::ValueRegion::new(
                        0,
                        sb.value_region_offset,
                        sb.value_region_bytes,
                        sb.value_chunk_bytes,
                    )
                    .is_ok()))
            && sb.pool_bytes <= region_len
            && [
                sb.slot_table_offset,
                sb.ring_offset,
                sb.members_offset,
                sb.model_region_offset,
                sb.leaf_region_offset,
                sb.model_region_bytes,
            ]
            .iter()
            .all(|v| v % 8 == 0);
        if !ordered {
            return Err(LeafStoreError::CorruptSuperblock(
                "regions overlap or exceed the memory node",
            ));
        }
        Ok(sb)
    }
}

/// A pool's layout as a compute node sees it: the superblock plus address arithmetic. Obtained
/// with [`Layout::attach`] from the superblock alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    node: u16,
    sb: Superblock,
}

impl Layout {
    /// Reads and checks the superblock of memory node `node` (one READ).
    pub fn attach<E: Endpoint>(ep: &mut E, node: MemoryNodeInfo) -> Result<Self, LeafStoreError> {
        if node.region_len < SUPERBLOCK_BYTES {
            return Err(LeafStoreError::PoolTooSmall {
                needed: SUPERBLOCK_BYTES,
                available: node.region_len,
            });
        }
        let mut bytes = [0u8; SUPERBLOCK_BYTES as usize];
        ep.read(RemoteAddr::saturating(node.id, 0), &mut bytes)?;
        Ok(Self {
            node: node.id,
            sb: Superblock::decode(&bytes, node.region_len)?,
        })
    }

    /// The layout of a superblock already in hand (bulk load).
    pub(crate) fn from_superblock(node: u16, sb: Superblock) -> Self {
        Self { node, sb }
    }

    /// The memory node.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The mask of the record generations this pool's memory node hands out: the header's full
    /// width unless the pool was loaded with narrower ones (a test of their wrap-around).
    pub fn generation_mask(&self) -> u64 {
        match self.sb.generation_bits {
            0 => crate::ModelHeader::MAX_GENERATION,
            bits => (1 << bits) - 1,
        }
    }

    /// Error bound ε.
    pub fn epsilon(&self) -> u64 {
        self.sb.epsilon
    }

    /// Slots per leaf δ.
    pub fn delta(&self) -> u64 {
        self.sb.delta
    }

    /// Bytes per leaf.
    pub fn leaf_bytes(&self) -> u64 {
        self.sb.leaf_bytes
    }

    /// Model slots at bulk load. Retraining splits slots, so a pool may hold more: the slot
    /// count word ([`Layout::slot_count_addr`]) says how many now.
    pub fn loaded_slots(&self) -> u64 {
        self.sb.slots
    }

    /// The most slots the slot table holds: every slot id is below it.
    pub fn slot_capacity(&self) -> u64 {
        self.sb.slot_capacity
    }

    /// Leaves the leaf region holds.
    pub fn leaf_capacity(&self) -> u64 {
        self.sb.leaf_capacity
    }

    /// The address `offset` on this node.
    pub fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr::saturating(self.node, offset)
    }

    /// The leaf region's `alloc_num` word (FAA it to allocate).
    pub fn alloc_num_addr(&self) -> RemoteAddr {
        self.at(self.sb.leaf_region_offset)
    }

    /// The leaf region's `capacity` word.
    pub fn capacity_addr(&self) -> RemoteAddr {
        self.at(self.sb.leaf_region_offset + 8)
    }

    /// Address of leaf `leaf_num` (paper eq. 3: region base + 16 + num · leaf size). The caller
    /// keeps `leaf_num` below the capacity; larger numbers give addresses past the region.
    pub fn leaf_addr(&self, leaf_num: u64) -> RemoteAddr {
        self.at(self.sb.leaf_region_offset + 16 + leaf_num.saturating_mul(self.sb.leaf_bytes))
    }

    /// The slot count word: slots `0..count` are published. Only the memory node's retrainer
    /// raises it, after writing the new slot's entry, so a compute node that READs the count and
    /// then the entries below it never sees an unwritten entry.
    pub fn slot_count_addr(&self) -> RemoteAddr {
        self.at(self.sb.slot_table_offset)
    }

    /// Address of slot `slot`'s entry in the slot table: the record address word, then the
    /// slot's first key (which never changes once published).
    pub fn slot_entry_addr(&self, slot: u64) -> RemoteAddr {
        self.at(self.sb.slot_table_offset + 16 + 16 * slot)
    }

    /// The model region's `[next_free][end]` header.
    pub fn model_region_addr(&self) -> RemoteAddr {
        self.at(self.sb.model_region_offset)
    }

    /// The value region, in a pool that stores byte values (`None`: values are `u64` words in
    /// the leaves).
    pub fn values(&self) -> Option<crate::value::ValueRegion> {
        if self.sb.value_region_bytes == 0 {
            return None;
        }
        crate::value::ValueRegion::new(
            self.node,
            self.sb.value_region_offset,
            self.sb.value_region_bytes,
            self.sb.value_chunk_bytes,
        )
        .ok()
    }

    /// The retraining ring's first word.
    pub fn ring_addr(&self) -> RemoteAddr {
        self.at(self.sb.ring_offset)
    }
}
