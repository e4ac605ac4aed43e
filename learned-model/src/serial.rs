//! Compact, versioned, checksummed encodings of [`LeafModel`] and [`TopLevelIndex`].
//!
//! Both start with the same 64-byte header of eight little-endian `u64` words, followed by a body:
//!
//! ```text
//! word  0       1        2        3        4        5        6          7
//!     +-------+--------+--------+--------+--------+--------+----------+----------+
//!     | magic | version| epsilon| delta  | leaves | count  | body_len | checksum |
//!     +-------+--------+--------+--------+--------+--------+----------+----------+
//! LeafModel body:     count × SegmentRecord (48 bytes: first_key, max_dx, slope lo/hi, intercept lo/hi)
//! TopLevelIndex body: count × u64 first keys (delta = leaves = 0; its PLR is retrained on decode)
//! ```
//!
//! `checksum` is XXH3-64 of the header (with the checksum word zeroed) and the body. Decoding
//! checks length, magic, version, checksum and every structural invariant, so truncated or
//! corrupted input is an error — never a panic and never a model that could mispredict. The
//! records are `bytemuck::Pod`, so the encoding can be written to and read from remote memory
//! as it is.

use bytemuck::{Pod, Zeroable};

use crate::{DecodeError, LeafModel, ModelParams, Segment, TopLevelIndex};

/// Magic of an encoded [`LeafModel`]: `"RLXLEAFM"`.
pub const LEAF_MODEL_MAGIC: u64 = u64::from_le_bytes(*b"RLXLEAFM");
/// Magic of an encoded [`TopLevelIndex`]: `"RLXTOPIX"`.
pub const TOP_LEVEL_MAGIC: u64 = u64::from_le_bytes(*b"RLXTOPIX");
/// The encoding version this build writes and reads.
pub const VERSION: u64 = 1;

/// The common header.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, PartialEq, Eq)]
pub struct Header {
    /// [`LEAF_MODEL_MAGIC`] or [`TOP_LEVEL_MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u64,
    /// ε.
    pub epsilon: u64,
    /// δ (0 for a top-level index).
    pub delta: u64,
    /// Trained leaves (0 for a top-level index).
    pub leaves: u64,
    /// Records in the body.
    pub count: u64,
    /// Body length in bytes.
    pub body_len: u64,
    /// XXH3-64 of header (this word zeroed) and body.
    pub checksum: u64,
}

/// Size of [`Header`] in bytes.
pub const HEADER_LEN: usize = std::mem::size_of::<Header>();

/// One [`Segment`] as stored.
#[repr(C)]
#[derive(Debug, Clone, Copy, Pod, Zeroable, PartialEq, Eq)]
pub struct SegmentRecord {
    /// [`Segment::first_key`].
    pub first_key: u64,
    /// [`Segment::max_dx`].
    pub max_dx: u64,
    /// Low and high 64 bits of [`Segment::slope`].
    pub slope: [u64; 2],
    /// Low and high 64 bits of [`Segment::intercept`] (two's complement).
    pub intercept: [u64; 2],
}

impl From<&Segment> for SegmentRecord {
    fn from(s: &Segment) -> Self {
        let intercept = s.intercept as u128;
        Self {
            first_key: s.first_key,
            max_dx: s.max_dx,
            slope: [s.slope as u64, (s.slope >> 64) as u64],
            intercept: [intercept as u64, (intercept >> 64) as u64],
        }
    }
}

impl From<&SegmentRecord> for Segment {
    fn from(r: &SegmentRecord) -> Self {
        let join = |w: [u64; 2]| u128::from(w[0]) | (u128::from(w[1]) << 64);
        Self {
            first_key: r.first_key,
            max_dx: r.max_dx,
            slope: join(r.slope),
            intercept: join(r.intercept) as i128,
        }
    }
}

fn checksum(header: &Header, body: &[u8]) -> u64 {
    let mut zeroed = *header;
    zeroed.checksum = 0;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(bytemuck::bytes_of(&zeroed));
    hasher.update(body);
    hasher.digest()
}

fn encode(mut header: Header, body: &[u8]) -> Vec<u8> {
    header.body_len = body.len() as u64;
    header.checksum = checksum(&header, body);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(bytemuck::bytes_of(&header));
    out.extend_from_slice(body);
    out
}

/// Checks everything generic about `bytes` and returns the header and exactly the body.
fn open(bytes: &[u8], magic: u64, record_len: usize) -> Result<(Header, &[u8]), DecodeError> {
    let truncated = |needed| DecodeError::Truncated {
        needed,
        available: bytes.len(),
    };
    let head = bytes.get(..HEADER_LEN).ok_or(truncated(HEADER_LEN))?;
    let header: Header = bytemuck::pod_read_unaligned(head);
    if header.magic != magic {
        return Err(DecodeError::BadMagic(header.magic));
    }
    if header.version != VERSION {
        return Err(DecodeError::UnsupportedVersion(header.version));
    }
    let body_len = usize::try_from(header.body_len).map_err(|_| truncated(usize::MAX))?;
    let total = HEADER_LEN
        .checked_add(body_len)
        .ok_or(truncated(usize::MAX))?;
    let body = bytes.get(HEADER_LEN..total).ok_or(truncated(total))?;
    if bytes.len() != total {
        return Err(DecodeError::Inconsistent("trailing bytes after the body"));
    }
    if checksum(&header, body) != header.checksum {
        return Err(DecodeError::ChecksumMismatch);
    }
    if usize::try_from(header.count)
        .ok()
        .and_then(|c| c.checked_mul(record_len))
        != Some(body_len)
    {
        return Err(DecodeError::Inconsistent(
            "body length does not match the record count",
        ));
    }
    Ok((header, body))
}

impl LeafModel {
    /// The encoding of this model (see the [module docs](self)).
    pub fn encode(&self) -> Vec<u8> {
        let records: Vec<SegmentRecord> = self.segments().iter().map(SegmentRecord::from).collect();
        let header = Header {
            magic: LEAF_MODEL_MAGIC,
            version: VERSION,
            epsilon: self.params().epsilon(),
            delta: self.params().delta(),
            leaves: self.leaves(),
            count: records.len() as u64,
            body_len: 0,
            checksum: 0,
        };
        encode(header, bytemuck::cast_slice(&records))
    }

    /// Decodes [`LeafModel::encode`]'s output; any truncation, corruption or inconsistency is an
    /// error.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (header, body) = open(
            bytes,
            LEAF_MODEL_MAGIC,
            std::mem::size_of::<SegmentRecord>(),
        )?;
        let params = ModelParams::new(header.epsilon, header.delta)
            .map_err(|_| DecodeError::Inconsistent("epsilon or delta out of range"))?;
        let records: Vec<SegmentRecord> = bytemuck::pod_collect_to_vec(body);
        let segments = records.iter().map(Segment::from).collect();
        LeafModel::from_parts(params, header.leaves, segments).map_err(DecodeError::Inconsistent)
    }
}

impl TopLevelIndex {
    /// The encoding of this index: its slots' first keys (see the [module docs](self)).
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            magic: TOP_LEVEL_MAGIC,
            version: VERSION,
            epsilon: TopLevelIndex::EPSILON,
            delta: 0,
            leaves: 0,
            count: self.len() as u64,
            body_len: 0,
            checksum: 0,
        };
        encode(header, bytemuck::cast_slice(self.first_keys()))
    }

    /// Decodes [`TopLevelIndex::encode`]'s output; any truncation, corruption or inconsistency
    /// is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (header, body) = open(bytes, TOP_LEVEL_MAGIC, 8)?;
        if header.epsilon != TopLevelIndex::EPSILON || header.delta != 0 || header.leaves != 0 {
            return Err(DecodeError::Inconsistent("not a top-level index header"));
        }
        let keys: Vec<u64> = bytemuck::pod_collect_to_vec(body);
        TopLevelIndex::from_parts(keys)
            .map_err(|_| DecodeError::Inconsistent("first keys empty or not increasing"))
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::test_support::{KeySet, random_leaves};

    fn model(keys: &KeySet, e: u16, d: u8, seed: u64) -> LeafModel {
        let params =
            ModelParams::new(u64::from(e % 256) + 1, u64::from(d % 32) + 1).expect("params");
        LeafModel::train(params, random_leaves(&keys.0, params.delta(), seed)).expect("train")
    }

    #[test]
    fn leaf_models_round_trip() {
        fn prop(keys: KeySet, e: u16, d: u8, seed: u64) -> bool {
            let m = model(&keys, e, d, seed);
            LeafModel::decode(&m.encode()) == Ok(m)
        }
        QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(KeySet, u16, u8, u64) -> bool);
    }

    #[test]
    fn top_level_indexes_round_trip() {
        fn prop(keys: KeySet) -> bool {
            let index = TopLevelIndex::new(keys.0).expect("index");
            TopLevelIndex::decode(&index.encode()) == Ok(index)
        }
        QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(KeySet) -> bool);
    }

    #[test]
    fn any_flipped_bit_or_truncation_is_rejected() {
        fn prop(keys: KeySet, e: u16, d: u8, seed: u64, bit: usize, cut: usize) -> TestResult {
            let m = model(&keys, e, d, seed);
            let bytes = m.encode();
            let mut flipped = bytes.clone();
            let bit = bit % (bytes.len() * 8);
            flipped[bit / 8] ^= 1 << (bit % 8);
            if LeafModel::decode(&flipped).is_ok() {
                return TestResult::error(format!("bit {bit} flipped, still accepted"));
            }
            let cut = cut % bytes.len();
            if LeafModel::decode(&bytes[..cut]).is_ok() {
                return TestResult::error(format!("truncated to {cut} bytes, still accepted"));
            }
            let mut longer = bytes.clone();
            longer.push(0);
            if LeafModel::decode(&longer).is_ok() {
                return TestResult::error("trailing byte accepted".to_string());
            }
            let index = TopLevelIndex::new(keys.0).expect("index");
            let mut bytes = index.encode();
            let bit = bit % (bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            if TopLevelIndex::decode(&bytes).is_ok() {
                return TestResult::error(format!("index bit {bit} flipped, still accepted"));
            }
            TestResult::passed()
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(KeySet, u16, u8, u64, usize, usize) -> TestResult);
    }

    #[test]
    fn a_wrong_magic_or_version_is_named() {
        let m = LeafModel::train_filled(ModelParams::new(4, 4).expect("params"), &[1, 2, 3], 2)
            .expect("train");
        let mut bytes = m.encode();
        bytes[..8].copy_from_slice(b"NOTMODEL");
        assert_eq!(
            LeafModel::decode(&bytes),
            Err(DecodeError::BadMagic(u64::from_le_bytes(*b"NOTMODEL")))
        );
        let mut bytes = m.encode();
        bytes[8] = 9;
        assert_eq!(
            LeafModel::decode(&bytes),
            Err(DecodeError::UnsupportedVersion(9))
        );
        assert!(matches!(
            TopLevelIndex::decode(&m.encode()),
            Err(DecodeError::BadMagic(_))
        ));
    }

    #[test]
    fn checksum_valid_but_inconsistent_input_is_rejected() {
        // Re-sign a body whose segments are out of order: the checksum passes, the structure not.
        let m = LeafModel::train_filled(
            ModelParams::new(1, 2).expect("params"),
            &[1, 50, 51, 900, 1u64 << 40, 1u64 << 50],
            1,
        )
        .expect("train");
        assert!(m.segments().len() >= 2, "need two segments");
        let mut records: Vec<SegmentRecord> =
            m.segments().iter().map(SegmentRecord::from).collect();
        records.swap(0, 1);
        let header = Header {
            magic: LEAF_MODEL_MAGIC,
            version: VERSION,
            epsilon: 1,
            delta: 2,
            leaves: m.leaves(),
            count: records.len() as u64,
            body_len: 0,
            checksum: 0,
        };
        let bytes = encode(header, bytemuck::cast_slice(&records));
        assert_eq!(
            LeafModel::decode(&bytes),
            Err(DecodeError::Inconsistent("segment keys not increasing"))
        );
    }
}
