//! Byte values: the value region, its chunks and blocks, and the 8-byte reference a leaf holds
//! (ARCHITECTURE §12).
//!
//! A pool bulk-loaded with a value region stores *byte values*: every leaf entry's value word is
//! a [`ValueRef`] to a block in this region, never the value itself. Keys stay 8-byte integers.
//!
//! **Invariant.** A leaf that names a block was written after the block (the block's WRITE
//! precedes the leaf's in one batch, and WRITEs land in order), so a block a reader reaches
//! through a leaf is whole unless it was freed and used again since; a block is used again only
//! after the retirement epochs show that no operation that could have read its reference from a
//! leaf is still running. A reader that nevertheless finds another key, another length or a
//! failed checksum (a compute node paused past those epochs) retries through the leaf: it never
//! returns another key's bytes or a torn value.
//!
//! ```text
//! value region (value_region_offset, value_region_bytes; 8-byte words):
//!   word 0    fresh chunk counter: chunks at or above it were never claimed (FAA to claim one)
//!   word 1    chunk count
//!   word 2    chunk bytes
//!   word 3    reuse horizon: a block found free while the retirement epoch word showed `s` may be
//!             used again once this word exceeds `s` (written by the memory node only)
//!   word 4    reuse wanted: a compute node sets it to 1 when blocks wait on the epoch; the memory
//!             node advances the epoch and clears it
//!   words 5-7 reserved (0)
//!   then      the chunk table, one ChunkWord per chunk (padded to 8 words)
//!   then      the chunks, `chunk bytes` each:
//!               one state byte per block (0 free, 1 in use), padded to 8 bytes, then the blocks,
//!               all of the chunk's size class
//!
//! block (CLASS_BYTES[class] bytes, 8-aligned):
//!   word 0    key
//!   word 1    value length (bytes)
//!   word 2    checksum: XXH3-64 seeded with the block's offset in the region, over words 0-1
//!             and the value bytes
//!   then      the value bytes, then zeros up to the class size
//!
//! ValueRef (the leaf entry's value word):
//!  63                     44 43                                                           0
//! +-------------------------+--------------------------------------------------------------+
//! |     value length (20)    |        block offset in the value region / 8 (44)             |
//! +-------------------------+--------------------------------------------------------------+
//!
//! ChunkWord (chunk table entry):
//!  63       56 55                           26 25       18 17                             0
//! +-----------+-------------------------------+-----------+--------------------------------+
//! |  tag (8)  |       incarnation (30)        | class+1(8)|          reserved (18)         |
//! +-----------+-------------------------------+-----------+--------------------------------+
//!   tag 0: no compute node owns the chunk (any may claim it by CAS); class+1 = 0: never carved
//! ```
//!
//! Only a chunk's owner allocates in it (so an allocation needs no remote atomic); anyone frees
//! (a WRITE of the state byte, idempotent, after the leaf WRITE that drops the reference). The
//! owner learns of frees by READing the chunk's state bytes.

use rdma_transport::RemoteAddr;

use crate::LeafStoreError;

/// The longest value a pool stores: 64 KiB (a pool whose chunks are smaller stores less, see
/// [`ValueRegion::max_value_len`]).
pub const MAX_VALUE_LEN: u64 = 64 * 1024;
/// Bytes of a block before its value: key, length, checksum.
pub const BLOCK_HEADER_BYTES: u64 = 24;
/// Bytes of the value region's header.
pub const VALUE_HEADER_BYTES: u64 = 64;
/// The default chunk size: 256 KiB (three blocks of the largest value).
pub const DEFAULT_CHUNK_BYTES: u64 = 256 * 1024;
/// The smallest chunk size a pool may have.
pub const MIN_CHUNK_BYTES: u64 = 256;
/// A block's state byte: free.
pub const STATE_FREE: u8 = 0;
/// A block's state byte: in use (written by the allocating compute node before any leaf names it).
pub const STATE_USED: u8 = 1;

/// Number of size classes.
pub const CLASSES: usize = 48;

/// Block bytes of each size class: four steps per doubling from 32 bytes (32, 40, 48, 56, 64, 80,
/// …, 114,688), so a block wastes less than a quarter of its bytes.
pub const CLASS_BYTES: [u64; CLASSES] = class_table();

const fn class_table() -> [u64; CLASSES] {
    let mut out = [0u64; CLASSES];
    let mut i = 0;
    while i < CLASSES {
        let base = 32u64 << (i / 4);
        out[i] = base + base / 4 * (i % 4) as u64;
        i += 1;
    }
    out
}

/// The smallest size class whose blocks hold a value of `len` bytes.
pub fn class_for(len: u64) -> Option<usize> {
    let need = BLOCK_HEADER_BYTES.checked_add(len)?;
    CLASS_BYTES.iter().position(|&b| b >= need)
}

const LEN_SHIFT: u32 = 44;
const LEN_MASK: u64 = (1 << 20) - 1;
const BLOCK_MASK: u64 = (1 << LEN_SHIFT) - 1;

/// A leaf entry's value word in a pool with byte values: the value's length and its block.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ValueRef(u64);

impl ValueRef {
    /// The reference to a block at byte `offset` of the value region (8-aligned) holding `len`
    /// bytes. `None` if either does not fit its field.
    pub fn new(offset: u64, len: u64) -> Option<Self> {
        (offset.is_multiple_of(8) && offset / 8 <= BLOCK_MASK && len <= LEN_MASK)
            .then_some(Self((len << LEN_SHIFT) | (offset / 8)))
    }

    /// The word as a leaf stores it.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The reference a leaf's value word holds.
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The value's length in bytes.
    pub const fn len(self) -> u64 {
        self.0 >> LEN_SHIFT & LEN_MASK
    }

    /// Whether the value is empty (its block still exists: it holds the key).
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The block's byte offset in the value region.
    pub const fn offset(self) -> u64 {
        (self.0 & BLOCK_MASK) * 8
    }

    /// Bytes to READ for the block: header and value, rounded up to words.
    pub const fn read_bytes(self) -> u64 {
        (BLOCK_HEADER_BYTES + self.len()).next_multiple_of(8)
    }
}

impl std::fmt::Debug for ValueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueRef({} bytes at +{})", self.len(), self.offset())
    }
}

const TAG_SHIFT: u32 = 56;
const INCARNATION_SHIFT: u32 = 26;
const INCARNATION_MASK: u64 = (1 << 30) - 1;
const CLASS_SHIFT: u32 = 18;

/// A chunk table entry: the chunk's owner and size class.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Debug)]
pub struct ChunkWord(u64);

impl ChunkWord {
    /// Owned by member `tag` (incarnation `incarnation`; 0 = no owner), carved into blocks of
    /// size class `class` (`None`: never carved).
    pub fn new(tag: u8, incarnation: u32, class: Option<usize>) -> Self {
        let class = class.map_or(0, |c| (c as u64 + 1) & 0xff);
        Self(
            u64::from(tag) << TAG_SHIFT
                | (u64::from(incarnation) & INCARNATION_MASK) << INCARNATION_SHIFT
                | class << CLASS_SHIFT,
        )
    }

    /// The word as stored.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The entry a chunk table word holds.
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The owner's member tag (0: none).
    pub const fn tag(self) -> u8 {
        (self.0 >> TAG_SHIFT) as u8
    }

    /// The owner's incarnation.
    pub const fn incarnation(self) -> u32 {
        (self.0 >> INCARNATION_SHIFT & INCARNATION_MASK) as u32
    }

    /// The size class its blocks have, if it was ever carved.
    pub fn class(self) -> Option<usize> {
        let c = (self.0 >> CLASS_SHIFT & 0xff) as usize;
        (c != 0 && c <= CLASSES).then(|| c - 1)
    }

    /// The same chunk with no owner (its class kept).
    pub fn unowned(self) -> Self {
        Self::new(0, 0, self.class())
    }
}

/// The value region's geometry: where everything of it lies. Derived from the superblock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ValueRegion {
    node: u16,
    offset: u64,
    bytes: u64,
    chunk_bytes: u64,
    chunks: u64,
}

/// Words of the chunk table for `chunks` chunks (padded to 8 words).
fn table_bytes(chunks: u64) -> u64 {
    (8 * chunks).next_multiple_of(64)
}

impl ValueRegion {
    /// The region of `bytes` bytes at `offset` of memory node `node`, cut into chunks of
    /// `chunk_bytes`. Errors if the chunk size is out of range or no chunk fits.
    pub fn new(
        node: u16,
        offset: u64,
        bytes: u64,
        chunk_bytes: u64,
    ) -> Result<Self, LeafStoreError> {
        if chunk_bytes < MIN_CHUNK_BYTES
            || !chunk_bytes.is_multiple_of(8)
            || !offset.is_multiple_of(8)
        {
            return Err(LeafStoreError::InvalidConfig(format!(
                "a value chunk must be a multiple of 8 bytes of at least {MIN_CHUNK_BYTES}, not {chunk_bytes}"
            )));
        }
        let room = bytes.saturating_sub(VALUE_HEADER_BYTES);
        let mut chunks = room / (chunk_bytes + 8);
        while chunks > 0 && table_bytes(chunks) + chunks * chunk_bytes > room {
            chunks -= 1;
        }
        if chunks == 0 {
            return Err(LeafStoreError::InvalidConfig(format!(
                "a value region of {bytes} bytes holds no chunk of {chunk_bytes} bytes"
            )));
        }
        Ok(Self {
            node,
            offset,
            bytes,
            chunk_bytes,
            chunks,
        })
    }

    /// The memory node.
    pub fn node(&self) -> u16 {
        self.node
    }

    /// Its first byte on the memory node.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Its length.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Number of chunks.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The longest value this region stores: [`MAX_VALUE_LEN`], or less when a chunk cannot
    /// hold a block that large.
    pub fn max_value_len(&self) -> u64 {
        let largest = CLASS_BYTES
            .iter()
            .rev()
            .find(|&&b| self.blocks_per_chunk_of(b) > 0)
            .copied()
            .unwrap_or(0);
        largest
            .saturating_sub(BLOCK_HEADER_BYTES)
            .min(MAX_VALUE_LEN)
    }

    /// The size class for a value of `len` bytes, or [`LeafStoreError::ValueTooLarge`].
    pub fn class_for(&self, len: u64) -> Result<usize, LeafStoreError> {
        let limit = self.max_value_len();
        match class_for(len) {
            Some(class) if len <= limit => Ok(class),
            _ => Err(LeafStoreError::ValueTooLarge { len, limit }),
        }
    }

    fn blocks_per_chunk_of(&self, block: u64) -> u64 {
        let mut n = self.chunk_bytes / (block + 1);
        while n > 0 && n.next_multiple_of(8) + n * block > self.chunk_bytes {
            n -= 1;
        }
        n
    }

    /// Blocks a chunk of size class `class` holds.
    pub fn blocks_per_chunk(&self, class: usize) -> u64 {
        self.blocks_per_chunk_of(CLASS_BYTES[class])
    }

    /// Bytes of the state array at the start of a chunk of size class `class`.
    pub fn state_bytes(&self, class: usize) -> u64 {
        self.blocks_per_chunk(class).next_multiple_of(8)
    }

    /// The address of byte `region_offset` of the region.
    pub fn at_offset(&self, region_offset: u64) -> RemoteAddr {
        RemoteAddr::saturating(self.node, self.offset + region_offset)
    }

    fn at(&self, region_offset: u64) -> RemoteAddr {
        self.at_offset(region_offset)
    }

    /// The fresh chunk counter (FAA it to claim a never-used chunk).
    pub fn fresh_addr(&self) -> RemoteAddr {
        self.at(0)
    }

    /// The reuse horizon word (written by the memory node).
    pub fn horizon_addr(&self) -> RemoteAddr {
        self.at(24)
    }

    /// The reuse-wanted word.
    pub fn wanted_addr(&self) -> RemoteAddr {
        self.at(32)
    }

    /// The chunk table's first entry.
    pub fn table_addr(&self) -> RemoteAddr {
        self.at(VALUE_HEADER_BYTES)
    }

    /// Chunk `chunk`'s table entry.
    pub fn chunk_word_addr(&self, chunk: u64) -> RemoteAddr {
        self.at(VALUE_HEADER_BYTES + 8 * chunk)
    }

    /// Chunk `chunk`'s first byte, as an offset in the region.
    pub fn chunk_offset(&self, chunk: u64) -> u64 {
        VALUE_HEADER_BYTES + table_bytes(self.chunks) + chunk * self.chunk_bytes
    }

    /// The state byte of block `block` of chunk `chunk`.
    pub fn state_addr(&self, chunk: u64, block: u64) -> RemoteAddr {
        self.at(self.chunk_offset(chunk) + block)
    }

    /// The state array of chunk `chunk` of size class `class`.
    pub fn states_addr(&self, chunk: u64) -> RemoteAddr {
        self.at(self.chunk_offset(chunk))
    }

    /// Region offset of block `block` of chunk `chunk` (size class `class`).
    pub fn block_offset(&self, chunk: u64, class: usize, block: u64) -> u64 {
        self.chunk_offset(chunk) + self.state_bytes(class) + block * CLASS_BYTES[class]
    }

    /// The block a reference names.
    pub fn block_addr(&self, value: ValueRef) -> RemoteAddr {
        self.at(value.offset())
    }

    /// The chunk, size class and block index of a block at region offset `offset`, if it lies
    /// on a block boundary of a chunk carved in `class_of(chunk)`.
    pub fn locate(
        &self,
        offset: u64,
        class_of: impl Fn(u64) -> Option<usize>,
    ) -> Option<(u64, usize, u64)> {
        let first = self.chunk_offset(0);
        let chunk = offset.checked_sub(first)? / self.chunk_bytes;
        if chunk >= self.chunks {
            return None;
        }
        let class = class_of(chunk)?;
        let within = offset - self.chunk_offset(chunk);
        let blocks = within.checked_sub(self.state_bytes(class))?;
        let size = CLASS_BYTES[class];
        let block = blocks / size;
        (blocks % size == 0 && block < self.blocks_per_chunk(class))
            .then_some((chunk, class, block))
    }
}

/// Encodes a block holding `value` for `key`, to be written at region offset `offset`.
pub fn encode_block(key: u64, value: &[u8], offset: u64) -> Vec<u8> {
    let mut out =
        Vec::with_capacity((BLOCK_HEADER_BYTES as usize + value.len()).next_multiple_of(8));
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(&block_checksum(key, value, offset).to_le_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(8), 0);
    out
}

fn block_checksum(key: u64, value: &[u8], offset: u64) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::with_seed(offset);
    hasher.update(&key.to_le_bytes());
    hasher.update(&(value.len() as u64).to_le_bytes());
    hasher.update(value);
    hasher.digest()
}

/// Why a block READ through a reference is not the value the reference names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockMismatch {
    /// Fewer bytes than the header and value.
    Short,
    /// The block holds another key (it was freed and used again).
    Key(u64),
    /// The block holds a value of another length.
    Length(u64),
    /// The checksum fails (torn, half-written or damaged).
    Checksum,
}

/// Checks a block READ (at least [`ValueRef::read_bytes`] bytes) through `value`, which a leaf
/// holds for `key`, and returns the value's bytes.
pub fn check_block(bytes: &[u8], key: u64, value: ValueRef) -> Result<&[u8], BlockMismatch> {
    let len = value.len() as usize;
    let end = BLOCK_HEADER_BYTES as usize + len;
    if bytes.len() < end {
        return Err(BlockMismatch::Short);
    }
    let found = crate::le_word(bytes, 0);
    if found != key {
        return Err(BlockMismatch::Key(found));
    }
    let stored_len = crate::le_word(bytes, 1);
    if stored_len != value.len() {
        return Err(BlockMismatch::Length(stored_len));
    }
    let data = &bytes[BLOCK_HEADER_BYTES as usize..end];
    if crate::le_word(bytes, 2) != block_checksum(key, data, value.offset()) {
        return Err(BlockMismatch::Checksum);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_grow_by_quarters_and_cover_the_largest_value() {
        assert_eq!(&CLASS_BYTES[..6], &[32, 40, 48, 56, 64, 80]);
        assert!(CLASS_BYTES.windows(2).all(|w| w[0] < w[1]));
        assert!(CLASS_BYTES.iter().all(|b| b % 8 == 0));
        for w in CLASS_BYTES.windows(2) {
            assert!(w[1] - w[0] <= w[0] / 4, "{w:?}");
        }
        let largest = class_for(MAX_VALUE_LEN).unwrap();
        assert!(CLASS_BYTES[largest] >= MAX_VALUE_LEN + BLOCK_HEADER_BYTES);
        assert_eq!(class_for(0), Some(0));
        assert_eq!(class_for(8), Some(0));
        assert_eq!(class_for(9), Some(1));
        assert_eq!(class_for(u64::MAX), None);
    }

    #[test]
    fn a_value_ref_round_trips_and_refuses_what_does_not_fit() {
        let r = ValueRef::new(8 * 12_345, 65_536).unwrap();
        assert_eq!((r.offset(), r.len()), (8 * 12_345, 65_536));
        assert_eq!(ValueRef::from_raw(r.raw()), r);
        assert_eq!(r.read_bytes(), 24 + 65_536);
        assert!(ValueRef::new(12, 1).is_none(), "unaligned");
        assert!(ValueRef::new(8, 1 << 20).is_none(), "length beyond 20 bits");
        assert!(
            ValueRef::new(8 << 44, 1).is_none(),
            "offset beyond 44 bits of words"
        );
        assert_eq!(ValueRef::new(0, 0).unwrap().read_bytes(), 24);
    }

    #[test]
    fn a_chunk_word_keeps_owner_and_class() {
        let w = ChunkWord::new(127, (1 << 30) - 1, Some(CLASSES - 1));
        assert_eq!(
            (w.tag(), w.incarnation(), w.class()),
            (127, (1 << 30) - 1, Some(CLASSES - 1))
        );
        assert_eq!(ChunkWord::from_raw(w.raw()), w);
        assert_eq!(w.unowned(), ChunkWord::new(0, 0, Some(CLASSES - 1)));
        assert_eq!(ChunkWord::default().class(), None);
        assert_eq!(ChunkWord::new(3, 9, Some(0)).class(), Some(0));
    }

    #[test]
    fn chunks_fit_the_region_and_blocks_fit_their_chunk() {
        let region = ValueRegion::new(0, 4096, 1 << 20, 16 * 1024).unwrap();
        assert!(region.chunk_offset(region.chunks()) <= region.bytes());
        assert!(region.chunk_offset(0) >= VALUE_HEADER_BYTES + 8 * region.chunks());
        for (class, &size) in CLASS_BYTES.iter().enumerate() {
            let n = region.blocks_per_chunk(class);
            if n == 0 {
                assert!(size + 8 > region.chunk_bytes());
                continue;
            }
            let end = region.block_offset(0, class, n - 1) + size;
            assert!(end <= region.chunk_offset(1), "class {class}");
            assert_eq!(
                region.locate(region.block_offset(0, class, n - 1), |_| Some(class)),
                Some((0, class, n - 1))
            );
            assert_eq!(
                region.locate(region.block_offset(0, class, 0) + 8, |_| Some(class)),
                None
            );
        }
        let limit = region.max_value_len();
        assert!(limit < MAX_VALUE_LEN && limit > 8 * 1024, "{limit}");
        assert!(region.class_for(limit).is_ok());
        assert_eq!(
            region.class_for(limit + 1),
            Err(LeafStoreError::ValueTooLarge {
                len: limit + 1,
                limit
            })
        );
        let big = ValueRegion::new(0, 0, 1 << 30, DEFAULT_CHUNK_BYTES).unwrap();
        assert_eq!(big.max_value_len(), MAX_VALUE_LEN);
        assert!(ValueRegion::new(0, 0, 100, 256).is_err());
        assert!(ValueRegion::new(0, 0, 1 << 20, 100).is_err());
    }

    #[test]
    fn a_block_is_checked_for_key_length_and_checksum() {
        let value = b"a record of some length".to_vec();
        let at = 8 * 77;
        let r = ValueRef::new(at, value.len() as u64).unwrap();
        let block = encode_block(5, &value, at);
        assert_eq!(block.len() as u64, r.read_bytes());
        assert_eq!(check_block(&block, 5, r), Ok(&value[..]));
        assert_eq!(check_block(&block, 6, r), Err(BlockMismatch::Key(5)));
        let shorter = ValueRef::new(at, 3).unwrap();
        assert_eq!(
            check_block(&block, 5, shorter),
            Err(BlockMismatch::Length(23))
        );
        let elsewhere = ValueRef::new(at + 8, value.len() as u64).unwrap();
        assert_eq!(
            check_block(&block, 5, elsewhere),
            Err(BlockMismatch::Checksum)
        );
        for i in 0..block.len() {
            for bit in 0..8 {
                let mut damaged = block.clone();
                damaged[i] ^= 1 << bit;
                if i >= BLOCK_HEADER_BYTES as usize + value.len() {
                    continue; // padding
                }
                assert!(check_block(&damaged, 5, r).is_err(), "byte {i} bit {bit}");
            }
        }
        assert_eq!(check_block(&block[..20], 5, r), Err(BlockMismatch::Short));
        // A half-written block: the new header over the old value.
        let other = encode_block(5, b"another record of same len", at);
        let mut torn = other[..24].to_vec();
        torn.extend_from_slice(&block[24..]);
        let r2 = ValueRef::new(at, 26).unwrap();
        assert!(check_block(&torn, 5, r2).is_err());
    }
}
