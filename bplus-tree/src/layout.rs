//! The pool of one memory node: superblock, root and allocation words, lock table, pages.

use rdma_transport::{Endpoint, MemoryNodeInfo, RemoteAddr};

use crate::TreeError;

/// `"BPTREE01"`: the first word of every B+-tree pool.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BPTREE01");
/// The layout version this build writes and reads.
pub const VERSION: u64 = 1;
/// Bytes of the superblock (and of the mutable words after it).
const HEADER_BYTES: u64 = 128;

/// The pool's fixed description, written last by bulk load.
///
/// ```text
/// offset   0  superblock, 16 words: magic, version, page size, page capacity, lock words,
///             lock table offset, pages offset, key_lo, key_hi, keys loaded, reserved…,
///             XXH3 checksum of words 0..15
/// offset 128  root word: level << 56 | page number (CASed when a root splits)
/// offset 136  allocation word: pages handed out (FAA)
/// lock table  `lock_words` words: 0 free, else the holder's tag
/// pages       `page_capacity` pages of `page_size` bytes; page 0 is never used (0 = no page)
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
    /// table of `lock_words` words, serving `[key_lo, key_hi]`.
    pub fn plan(
        node: MemoryNodeInfo,
        page_size: u64,
        lock_words: u64,
        key_lo: u64,
        key_hi: u64,
    ) -> Result<Self, TreeError> {
        if !(128..=65536).contains(&page_size) || !page_size.is_multiple_of(64) {
            return Err(TreeError::Config(format!(
                "page size {page_size} must be a multiple of 64 in 128..=65536"
            )));
        }
        if lock_words == 0 || key_lo > key_hi {
            return Err(TreeError::Config(
                "lock table empty or key range inverted".into(),
            ));
        }
        let lock_table_offset = HEADER_BYTES + 64;
        let pages_offset = (lock_table_offset + 8 * lock_words).next_multiple_of(page_size);
        let page_capacity = node.region_len.saturating_sub(pages_offset) / page_size;
        if page_capacity < 2 {
            return Err(TreeError::PoolTooSmall {
                needed: pages_offset + 2 * page_size,
                available: node.region_len,
            });
        }
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
        if words[1] != VERSION || words[15] != checksum(&words[..15]) {
            return Err(TreeError::Corrupt(
                "superblock version or checksum wrong".into(),
            ));
        }
        let layout = Self {
            node: node.id,
            page_size: words[2],
            page_capacity: words[3],
            lock_words: words[4],
            lock_table_offset: words[5],
            pages_offset: words[6],
            key_lo: words[7],
            key_hi: words[8],
            keys_loaded: words[9],
        };
        let end = layout
            .page_capacity
            .checked_mul(layout.page_size)
            .and_then(|b| b.checked_add(layout.pages_offset));
        if layout.page_size < 128
            || layout.lock_words == 0
            || layout.lock_table_offset + 8 * layout.lock_words > layout.pages_offset
            || end.is_none_or(|e| e > node.region_len)
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
