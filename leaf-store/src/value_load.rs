//! Bulk load of byte values: where each value's block goes, and writing the value region.
//!
//! Values are packed class by class into consecutive chunks (the first chunk a class needs is the
//! next unused one), which no compute node owns afterwards: any may claim them, and their frees,
//! later. The chunks after them are fresh (the region's fresh counter points at the first).

use rdma_transport::Endpoint;

use crate::LeafStoreError;
use crate::value::{CLASSES, ChunkWord, STATE_USED, ValueRef, ValueRegion, encode_block};

/// Where bulk-loaded values go.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Each value's reference, in input order.
    pub(crate) refs: Vec<ValueRef>,
    /// Per chunk used, its class and the input indexes of its blocks, in block order.
    chunks: Vec<(usize, Vec<usize>)>,
}

/// Places every value of `pairs` (sorted by key) in `region` (geometry relative to its start).
pub(crate) fn plan(region: &ValueRegion, pairs: &[(u64, Vec<u8>)]) -> Result<Plan, LeafStoreError> {
    let mut open: [Option<usize>; CLASSES] = [None; CLASSES];
    let mut chunks: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut refs = Vec::with_capacity(pairs.len());
    for (i, (_, value)) in pairs.iter().enumerate() {
        let len = value.len() as u64;
        let class = region.class_for(len)?;
        let per_chunk = region.blocks_per_chunk(class) as usize;
        let chunk = match open[class] {
            Some(c) if chunks[c].1.len() < per_chunk => c,
            _ => {
                if chunks.len() as u64 >= region.chunks() {
                    return Err(LeafStoreError::InvalidConfig(format!(
                        "the values need more than the value region's {} chunks of {} bytes",
                        region.chunks(),
                        region.chunk_bytes()
                    )));
                }
                chunks.push((class, Vec::new()));
                open[class] = Some(chunks.len() - 1);
                chunks.len() - 1
            }
        };
        let block = chunks[chunk].1.len() as u64;
        chunks[chunk].1.push(i);
        let offset = region.block_offset(chunk as u64, class, block);
        refs.push(
            ValueRef::new(offset, len).ok_or(LeafStoreError::ValueTooLarge {
                len,
                limit: region.max_value_len(),
            })?,
        );
    }
    Ok(Plan { refs, chunks })
}

/// Writes the value region of `plan`: its chunks, chunk table and header.
pub(crate) fn write<E: Endpoint>(
    ep: &mut E,
    region: &ValueRegion,
    pairs: &[(u64, Vec<u8>)],
    plan: &Plan,
) -> Result<(), LeafStoreError> {
    let chunk_bytes = region.chunk_bytes() as usize;
    let mut image = vec![0u8; chunk_bytes];
    for (chunk, (_, members)) in plan.chunks.iter().enumerate() {
        image.fill(0);
        for (block, &i) in members.iter().enumerate() {
            image[block] = STATE_USED;
            let (key, value) = &pairs[i];
            let at = plan.refs[i].offset();
            let bytes = encode_block(*key, value, at);
            let start = (at - region.chunk_offset(chunk as u64)) as usize;
            image[start..start + bytes.len()].copy_from_slice(&bytes);
        }
        write_all(ep, region, region.chunk_offset(chunk as u64), &image)?;
    }
    let mut table = vec![0u8; (region.chunk_offset(0) - crate::value::VALUE_HEADER_BYTES) as usize];
    for (chunk, (class, _)) in plan.chunks.iter().enumerate() {
        let word = ChunkWord::new(0, 0, Some(*class)).raw();
        table[8 * chunk..8 * chunk + 8].copy_from_slice(&word.to_le_bytes());
    }
    write_all(ep, region, crate::value::VALUE_HEADER_BYTES, &table)?;
    let mut header = vec![0u8; crate::value::VALUE_HEADER_BYTES as usize];
    for (i, word) in [
        plan.chunks.len() as u64,
        region.chunks(),
        region.chunk_bytes(),
    ]
    .into_iter()
    .enumerate()
    {
        header[8 * i..8 * i + 8].copy_from_slice(&word.to_le_bytes());
    }
    write_all(ep, region, 0, &header)
}

fn write_all<E: Endpoint>(
    ep: &mut E,
    region: &ValueRegion,
    offset: u64,
    bytes: &[u8],
) -> Result<(), LeafStoreError> {
    const PIECE: usize = 1 << 20;
    for (i, piece) in bytes.chunks(PIECE).enumerate() {
        ep.write(region.at_offset(offset + (i * PIECE) as u64), piece)?;
    }
    Ok(())
}
