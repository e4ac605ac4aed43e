//! The pool of one memory node: superblock, root and allocation words, lock table, pages, and
//! (in a pool with byte values) the value region.

use leaf_store::ValueConfig;
use leaf_store::value::{
    BLOCK_HEADER_BYTES, CLASS_BYTES, MAX_VALUE_LEN, MIN_CHUNK_BYTES, ValueRef,
};
use rdma_transport::{Endpoint, MemoryNodeInfo, RemoteAddr};

use crate::TreeError;

/// `"BPTREE01"`: the first word of every B+-tree pool.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BPTREE01");
/// The layout version this build writes and reads (3: hopscotch leaves' homes are the first
/// `slots - H + 1` slots; a version 2 pool of sorted leaves is read as it is).
pub const VERSION: u64 = 3;
/// Bytes of the superblock (and of the mutable words after it).
const HEADER_BYTES: u64 = 128;

/// The pool's fixed description, written last by bulk load.
///
/// ```text
/// offset   0  superblock, 16 words: magic, version, page size, page capacity, lock words,
///             lock table offset, pages offset, key_lo, key_hi, keys loaded, value region
///             offset, value region bytes, value chunk bytes (the last three 0 without byte
///             values), leaf kind (0 sorted pages; else hopscotch: 1 << 32 | slots << 8 |
///             neighbourhood), reserved, XXH3 checksum of words 0..15
/// offset 128  root word: level << 56 | page number (CASed when a root splits)
/// offset 136  allocation word: pages handed out (FAA)
/// offset 144  value chunk word: chunks of the value region handed out (FAA)
/// lock table  `lock_words` words: 0 free, else the holder's tag
/// pages       `page_capacity` pages of `page_size` bytes; page 0 is never used (0 = no page);
///             leaves are `crate::Page`s or, in a hopscotch pool, `chime::Leaf`s
/// values      (byte values only) chunks of `value_chunk_bytes`, each carved into blocks of one
///             size class by the compute node that took it; a block is `leaf_store`'s: key,
///             length, checksum, value (see `crate::value`)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    node: u16,
    /// Bytes per page.
    pub page_size: u64,
    /// Pages the region holds (page 0 included, never used).
    pub page_capacity: u64,
    /// Words in the lock table.
    pub lock_words: u64,
    lock_table_offset: u64,
    pages_offset: u64,
    /// First key this node serves.
    pub key_lo: u64,
    /// Last key this node serves (inclusive).
    pub key_hi: u64,
    /// Keys bulk-loaded.
    pub keys_loaded: u64,
    /// The value region's first byte (0: the pool stores 8-byte values).
    pub value_offset: u64,
    /// The value region's length in bytes.
    pub value_bytes: u64,
    /// Bytes per value chunk.
    pub value_chunk_bytes: u64,
    /// What the leaves are.
    pub leaf: LeafKind,
}

/// What a pool's leaves are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeafKind {
    /// Sherman's: a [`crate::Page`] of unsorted entries, READ whole (the default).
    #[default]
    Sorted,
    /// CHIME's: a hopscotch hash table ([`chime::Leaf`]) of this shape, of which a lookup READs
    /// one neighbourhood.
    Hopscotch(chime::Geometry),
}

impl LeafKind {
    /// CHIME's leaves of its default shape (64 slots, neighbourhoods of 8).
    pub fn hopscotch() -> Self {
        Self::Hopscotch(chime::Geometry::default())
    }

    /// The superblock's word for it.
    fn word(self) -> u64 {
        match self {
            Self::Sorted => 0,
            Self::Hopscotch(g) => 1 << 32 | (g.slots() as u64) << 8 | g.neighbourhood() as u64,
        }
    }

    /// The kind a superblock's word names.
    fn from_word(word: u64) -> Option<Self> {
        match word >> 32 {
            0 if word == 0 => Some(Self::Sorted),
            1 if word >> 16 & 0xFFFF == 0 => {
                chime::Geometry::new((word >> 8 & 0xFF) as usize, (word & 0xFF) as usize)
                    .ok()
                    .map(Self::Hopscotch)
            }
            _ => None,
        }
    }

    /// Whether a page of `page_size` bytes holds a leaf of this kind.
    pub fn fits(self, page_size: u64) -> bool {
        match self {
            Self::Sorted => true,
            Self::Hopscotch(g) => g.leaf_bytes() <= page_size,
        }
    }

    /// Keys a leaf holds at most, in pages of `page_size` bytes.
    pub fn capacity(self, page_size: u64) -> usize {
        match self {
            Self::Sorted => crate::Page::capacity(page_size),
            Self::Hopscotch(g) => g.slots(),
        }
    }
}

/// Bits of the root word below the level.
const ROOT_LEVEL_SHIFT: u32 = 56;

/// Packs a root word.
pub fn root_word(level: u8, page: u64) -> u64 {
    (u64::from(level) << ROOT_LEVEL_SHIFT) | page
}

/// Unpacks a root word into (level, page).
pub fn unpack_root(word: u64) -> (u8, u64) {
    (
        (word >> ROOT_LEVEL_SHIFT) as u8,
        word & ((1 << ROOT_LEVEL_SHIFT) - 1),
    )
}

impl Layout {
    /// The layout for a region of `region_len` bytes with pages of `page_size` bytes and a lock
    /// table of `lock_words` words, serving `[key_lo, key_hi]`; with `values`, the pool ends
    /// with a value region of that size and chunk size.
    pub fn plan(
        node: MemoryNodeInfo,
        page_size: u64,
        lock_words: u64,
        key_lo: u64,
        key_hi: u64,
        values: Option<ValueConfig>,
        leaf: LeafKind,
    ) -> Result<Self, TreeError> {
        if !(128..=65536).contains(&page_size) || !page_size.is_multiple_of(64) {
            return Err(TreeError::Config(format!(
                "page size {page_size} must be a multiple of 64 in 128..=65536"
            )));
        }
        if !leaf.fits(page_size) {
            return Err(TreeError::Config(format!(
                "a page of {page_size} bytes cannot hold a hopscotch leaf ({leaf:?})"
            )));
        }
        if lock_words == 0 || key_lo > key_hi {
            return Err(TreeError::Config(
                "lock table empty or key range inverted".into(),
            ));
        }
        let lock_table_offset = HEADER_BYTES + 64;
        let pages_offset = (lock_table_offset + 8 * lock_words).next_multiple_of(page_size);
        let (value_bytes, value_chunk_bytes) = match values {
            None => (0, 0),
            Some(v) => {
                if v.chunk_bytes < MIN_CHUNK_BYTES
                    || !v.chunk_bytes.is_multiple_of(8)
                    || v.bytes < v.chunk_bytes
                {
                    return Err(TreeError::Config(format!(
                        "value chunks of {} bytes in a region of {} bytes: chunks must be a \
                         multiple of 8 of at least {MIN_CHUNK_BYTES} bytes, and the region hold one",
                        v.chunk_bytes, v.bytes
                    )));
                }
                (v.bytes - v.bytes % v.chunk_bytes, v.chunk_bytes)
            }
        };
        let pages_end = node.region_len.saturating_sub(value_bytes) & !63;
        let page_capacity = pages_end.saturating_sub(pages_offset) / page_size;
        if page_capacity < 2 {
            return Err(TreeError::PoolTooSmall {
                needed: pages_offset + 2 * page_size + value_bytes,
                available: node.region_len,
            });
        }
        let value_offset = if value_bytes == 0 { 0 } else { pages_end };
        Ok(Self {
            node: node.id,
            page_size,
            page_capacity,
            lock_words,
            lock_table_offset,
            pages_offset,
            key_lo,
            key_hi,
            keys_loaded: 0,
            value_offset,
            value_bytes,
            value_chunk_bytes,
            leaf,
        })
    }

    /// The superblock's 16 words, checksum last.
    pub(crate) fn superblock(&self) -> [u64; 16] {
        let mut words = [0u64; 16];
        words[0] = MAGIC;
        words[1] = VERSION;
        words[2] = self.page_size;
        words[3] = self.page_capacity;
        words[4] = self.lock_words;
        words[5] = self.lock_table_offset;
        words[6] = self.pages_offset;
        words[7] = self.key_lo;
        words[8] = self.key_hi;
        words[9] = self.keys_loaded;
        words[10] = self.value_offset;
        words[11] = self.value_bytes;
        words[12] = self.value_chunk_bytes;
        words[13] = self.leaf.word();
        words[15] = checksum(&words[..15]);
        words
    }

    /// Reads and checks the superblock of memory node `node`.
    pub fn attach<E: Endpoint>(ep: &mut E, node: MemoryNodeInfo) -> Result<Self, TreeError> {
        if node.region_len < HEADER_BYTES {
            return Err(TreeError::PoolTooSmall {
                needed: HEADER_BYTES,
                available: node.region_len,
            });
        }
        let mut bytes = [0u8; 128];
        ep.read(at(node.id, 0), &mut bytes)?;
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if words[0] != MAGIC {
            return Err(TreeError::Corrupt(format!(
                "memory node {} holds no B+-tree pool (magic {:#x})",
                node.id, words[0]
            )));
        }
        if words[1] != VERSION && !(words[1] == 2 && words[13] == 0) {
            return Err(TreeError::Corrupt(format!(
                "memory node {} holds a B+-tree pool of layout version {}; this build reads {VERSION}",
                node.id, words[1]
            )));
        }
        if words[15] != checksum(&words[..15]) {
            return Err(TreeError::Corrupt("superblock checksum wrong".into()));
        }
        let Some(leaf) = LeafKind::from_word(words[13]) else {
            return Err(TreeError::Corrupt(format!(
                "memory node {} names no leaf kind this build knows ({:#x})",
                node.id, words[13]
            )));
        };
        let layout = Self {
            leaf,
            node: node.id,
            page_size: words[2],
            page_capacity: words[3],
            lock_words: words[4],
            lock_table_offset: words[5],
            pages_offset: words[6],
            key_lo: words[7],
            key_hi: words[8],
            keys_loaded: words[9],
            value_offset: words[10],
            value_bytes: words[11],
            value_chunk_bytes: words[12],
        };
        let end = layout
            .page_capacity
            .checked_mul(layout.page_size)
            .and_then(|b| b.checked_add(layout.pages_offset));
        if layout.page_size < 128
            || !leaf.fits(layout.page_size)
            || layout.lock_words == 0
            || layout.lock_table_offset + 8 * layout.lock_words > layout.pages_offset
            || end.is_none_or(|e| e > node.region_len)
            || (layout.value_bytes > 0
                && (end.is_none_or(|e| e > layout.value_offset)
                    || layout.value_chunk_bytes < MIN_CHUNK_BYTES
                    || !layout.value_bytes.is_multiple_of(layout.value_chunk_bytes)
                    || layout
                        .value_offset
                        .checked_add(layout.value_bytes)
                        .is_none_or(|e| e > node.region_len)))
        {
            return Err(TreeError::Corrupt("regions exceed the memory node".into()));
        }
        Ok(layout)
    }

    /// The memory node.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// The root word.
    pub fn root_addr(&self) -> RemoteAddr {
        at(self.node, HEADER_BYTES)
    }

    /// The page-allocation word.
    pub fn alloc_addr(&self) -> RemoteAddr {
        at(self.node, HEADER_BYTES + 8)
    }

    /// Whether the pool stores byte values (leaf entries hold [`ValueRef`]s).
    pub fn has_values(&self) -> bool {
        self.value_bytes > 0
    }

    /// The value chunk word: chunks handed out (FAA).
    pub fn value_chunk_word_addr(&self) -> RemoteAddr {
        at(self.node, HEADER_BYTES + 16)
    }

    /// Chunks the value region holds.
    pub fn value_chunks(&self) -> u64 {
        self.value_bytes
            .checked_div(self.value_chunk_bytes)
            .unwrap_or(0)
    }

    /// The longest value the pool stores: its largest size class that fits a chunk, at most
    /// [`MAX_VALUE_LEN`] (0 without byte values).
    pub fn max_value_len(&self) -> u64 {
        CLASS_BYTES
            .iter()
            .rev()
            .find(|&&b| b <= self.value_chunk_bytes)
            .map_or(0, |&b| (b - BLOCK_HEADER_BYTES).min(MAX_VALUE_LEN))
    }

    /// The byte at `offset` of the value region.
    pub fn value_addr(&self, offset: u64) -> RemoteAddr {
        at(self.node, self.value_offset + offset.min(self.value_bytes))
    }

    /// The block a [`ValueRef`] names.
    pub fn block_addr(&self, value: ValueRef) -> RemoteAddr {
        self.value_addr(value.offset())
    }

    /// Lock word `index` (taken modulo the table).
    pub fn lock_addr(&self, index: u64) -> RemoteAddr {
        at(
            self.node,
            self.lock_table_offset + 8 * (index % self.lock_words),
        )
    }

    /// The lock word guarding page `page`.
    pub fn lock_of(&self, page: u64) -> u64 {
        // A multiplicative hash spreads neighbouring pages over the table; the index is the
        // word itself, so pages that share a word share everything keyed by it.
        (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) % self.lock_words
    }

    /// Page `page`'s first byte.
    pub fn page_addr(&self, page: u64) -> RemoteAddr {
        at(
            self.node,
            self.pages_offset + page.min(self.page_capacity) * self.page_size,
        )
    }

    /// Page `page`'s word `word`.
    pub fn page_word_addr(&self, page: u64, word: u64) -> RemoteAddr {
        at(
            self.node,
            self.pages_offset + page.min(self.page_capacity) * self.page_size + 8 * word,
        )
    }

    /// The superblock's address.
    pub(crate) fn superblock_addr(&self) -> RemoteAddr {
        at(self.node, 0)
    }

    /// The lock table's first word.
    pub(crate) fn lock_table_addr(&self) -> RemoteAddr {
        at(self.node, self.lock_table_offset)
    }
}

fn checksum(words: &[u64]) -> u64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

pub(crate) fn at(node: u16, offset: u64) -> RemoteAddr {
    RemoteAddr::new(node, offset.min(rdma_transport::MAX_OFFSET)).unwrap_or_default()
}
