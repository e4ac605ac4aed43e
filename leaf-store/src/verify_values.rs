//! `verify` of the value region: every key's block, and every block in use named by a key.

use std::fmt;

use rdma_transport::Endpoint;

use crate::problem::Problem;
use crate::value::{
    CLASS_BYTES, ChunkWord, STATE_FREE, STATE_USED, ValueRef, ValueRegion, check_block,
};
use crate::{LeafStoreError, le_word};

/// What a value region holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueSpace {
    /// Chunks the region holds.
    pub chunks: u64,
    /// Chunks ever claimed (below the fresh counter).
    pub chunks_claimed: u64,
    /// Chunks owned by a compute node now.
    pub chunks_owned: u64,
    /// Blocks in use.
    pub blocks: u64,
    /// Bytes of the values stored.
    pub live_bytes: u64,
    /// Bytes of the blocks in use (headers and rounding included).
    pub block_bytes: u64,
    /// Bytes of the claimed chunks.
    pub claimed_bytes: u64,
}

impl fmt::Display for ValueSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "values: {} bytes in {} blocks of {} bytes; {} of {} chunks claimed ({} bytes, {} owned by compute nodes)",
            self.live_bytes,
            self.blocks,
            self.block_bytes,
            self.chunks_claimed,
            self.chunks,
            self.claimed_bytes,
            self.chunks_owned
        )
    }
}

/// Checks the region against `refs` (every `(key, value word)` the leaves hold).
pub(crate) fn check<E: Endpoint>(
    ep: &mut E,
    region: &ValueRegion,
    refs: &[(u64, u64)],
    problems: &mut Vec<Problem>,
) -> Result<ValueSpace, LeafStoreError> {
    let mut header = [0u8; 24];
    ep.read(region.fresh_addr(), &mut header)?;
    let (fresh, chunks, chunk_bytes) = (
        le_word(&header, 0),
        le_word(&header, 1),
        le_word(&header, 2),
    );
    if chunks != region.chunks() || chunk_bytes != region.chunk_bytes() {
        problems.push(Problem::ValueRegion(format!(
            "header says {chunks} chunks of {chunk_bytes} bytes, the superblock {} of {}",
            region.chunks(),
            region.chunk_bytes()
        )));
    }
    // The counter may run past the chunk count (claims that found none left undo nothing).
    let claimed = fresh.min(region.chunks());
    let mut table = vec![0u8; 8 * claimed as usize];
    ep.read(region.table_addr(), &mut table)?;
    let words: Vec<ChunkWord> = (0..claimed as usize)
        .map(|i| ChunkWord::from_raw(le_word(&table, i)))
        .collect();
    let mut space = ValueSpace {
        chunks: region.chunks(),
        chunks_claimed: claimed,
        chunks_owned: words.iter().filter(|w| w.tag() != 0).count() as u64,
        claimed_bytes: claimed * region.chunk_bytes(),
        ..ValueSpace::default()
    };
    let mut states: Vec<Vec<u8>> = Vec::with_capacity(claimed as usize);
    for (chunk, word) in words.iter().enumerate() {
        let Some(class) = word.class() else {
            states.push(Vec::new());
            continue;
        };
        let mut bytes = vec![0u8; region.blocks_per_chunk(class) as usize];
        ep.read(region.states_addr(chunk as u64), &mut bytes)?;
        states.push(bytes);
    }
    let class_of = |chunk: u64| words.get(chunk as usize).and_then(|w| w.class());
    let mut named: Vec<Vec<bool>> = states.iter().map(|s| vec![false; s.len()]).collect();
    let mut block = Vec::new();
    for &(key, raw) in refs {
        let value = ValueRef::from_raw(raw);
        let Some((chunk, class, index)) = region.locate(value.offset(), class_of) else {
            problems.push(Problem::Value {
                key,
                reason: format!("{value:?} is not a block of a claimed chunk"),
            });
            continue;
        };
        let (c, i) = (chunk as usize, index as usize);
        if named[c][i] {
            problems.push(Problem::Value {
                key,
                reason: format!("{value:?} is named by another key too"),
            });
        }
        named[c][i] = true;
        if states[c][i] != STATE_USED {
            problems.push(Problem::Value {
                key,
                reason: format!("{value:?} is marked free"),
            });
        }
        if value.read_bytes() > CLASS_BYTES[class] {
            problems.push(Problem::Value {
                key,
                reason: format!(
                    "{value:?} is longer than its block of {} bytes",
                    CLASS_BYTES[class]
                ),
            });
            continue;
        }
        block.resize(value.read_bytes() as usize, 0);
        ep.read(region.block_addr(value), &mut block)?;
        if let Err(why) = check_block(&block, key, value) {
            problems.push(Problem::Value {
                key,
                reason: format!("{value:?}: {why:?}"),
            });
        }
        space.blocks += 1;
        space.live_bytes += value.len();
        space.block_bytes += CLASS_BYTES[class];
    }
    for (chunk, (state, named)) in states.iter().zip(&named).enumerate() {
        for (i, (&s, &n)) in state.iter().zip(named).enumerate() {
            if s == STATE_USED && !n {
                problems.push(Problem::ValueRegion(format!(
                    "block {i} of chunk {chunk} is in use but no key names it (leaked)"
                )));
            } else if s != STATE_USED && s != STATE_FREE {
                problems.push(Problem::ValueRegion(format!(
                    "block {i} of chunk {chunk} has state byte {s}"
                )));
            }
        }
    }
    Ok(space)
}
