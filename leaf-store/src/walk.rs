//! Reading the layout back: slot table, records, leaves and synonym chains.

use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::record::RECORD_FIXED_BYTES;
use crate::{
    Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, ModelRecord, RecordLayout,
    SLT_SLOTS, le_word,
};

/// How many times a torn leaf is re-read before giving up.
pub const TORN_READ_RETRIES: usize = 64;

/// Reads the slot table: for each published slot, by slot id, its record's address and its
/// first key. Two round trips: the count word, then the entries below it (see
/// [`Layout::slot_count_addr`]). Slot ids follow publication, not key order.
pub fn read_slot_table<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
) -> Result<Vec<(RemoteAddr, u64)>, LeafStoreError> {
    let slots = ep.read_word(layout.slot_count_addr())?;
    if slots == 0 || slots > layout.slot_capacity() {
        return Err(LeafStoreError::CorruptRecord {
            slot: slots,
            reason: format!(
                "slot count {slots} outside 1..={} (the slot table's capacity)",
                layout.slot_capacity()
            ),
        });
    }
    let mut out = Vec::with_capacity(usize::try_from(slots).unwrap_or(0));
    const CHUNK: u64 = 1 << 14;
    let mut buf = vec![0u8; 16 * CHUNK as usize];
    let mut slot = 0;
    while slot < slots {
        let n = CHUNK.min(slots - slot);
        let bytes = &mut buf[..16 * n as usize];
        ep.read(layout.slot_entry_addr(slot), bytes)?;
        for entry in bytes.chunks_exact(16) {
            let word = |i: usize| {
                u64::from_le_bytes(entry[8 * i..8 * i + 8].try_into().unwrap_or_default())
            };
            out.push((RemoteAddr::unpack(word(0)), word(1)));
        }
        slot += n;
    }
    Ok(out)
}

/// SLT entries read past the used prefix a record's header showed before the read.
const SLT_READ_MARGIN: u64 = 8;

/// Reads and decodes slot `slot`'s record at `record` (two round trips, three if the SLT grew
/// meanwhile: the fixed part announces the size). SLT entries past the header's `slot_use` are
/// not read (they are zero in the result: nothing links them). The record must lie inside the
/// model region.
pub fn read_record<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    slot: u64,
    record: RemoteAddr,
) -> Result<ModelRecord, LeafStoreError> {
    let sb = layout.superblock();
    let corrupt = |reason: String| LeafStoreError::CorruptRecord { slot, reason };
    let region = sb.model_region_offset..sb.model_region_offset + sb.model_region_bytes;
    if record.node() != layout.node() || !region.contains(&record.offset()) {
        return Err(corrupt(format!(
            "record address {record} outside the model region"
        )));
    }
    let room = region.end - record.offset();
    let mut fixed = [0u8; RECORD_FIXED_BYTES as usize];
    ep.read(record, &mut fixed)?;
    let record_layout = ModelRecord::layout_of(&fixed, room).map_err(corrupt)?;
    let header = ModelHeader::from_raw(le_word(&fixed, 0));
    let mut bytes = vec![0u8; record_layout.total() as usize];
    let first_end = record_layout.slt_entry(first_slt_read(header)) as usize;
    ep.read(record, &mut bytes[..first_end])?;
    read_rest(ep, layout, slot, record, record_layout, header, bytes)
}

/// [`read_record`] for a compute node that cached the record and dropped it, and so knows its
/// layout and a recent header word: one round trip instead of two. Its layout is trusted only
/// if the record is still the one the compute node knew: the slot table's entry, READ in the
/// same batch *before* the record (which is fenced behind it), must name `record`, and the
/// header read must carry `header`'s generation. `None` otherwise (the record was replaced;
/// its memory may hold another record now): read the slot table and the record afresh.
///
/// Entry first: a record is written whole before the slot table names it, so the bytes read
/// after an entry naming it are that record's, not a half-written successor's at the same
/// address (a READ is not atomic); the generation then tells an older incarnation from it. The
/// other order proved only that the record was current once the batch ended (an adversarial
/// review found the schedule, with generations that repeat).
pub fn read_record_if_current<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    slot: u64,
    record: RemoteAddr,
    record_layout: RecordLayout,
    header: ModelHeader,
) -> Result<Option<ModelRecord>, LeafStoreError> {
    let mut bytes = vec![0u8; record_layout.total() as usize];
    let first_end = record_layout.slt_entry(first_slt_read(header)) as usize;
    let mut entry = [0u8; 8];
    let mut verbs = [
        Verb::read(layout.slot_entry_addr(slot), &mut entry),
        Verb::read(record, &mut bytes[..first_end]).fenced(),
    ];
    ep.batches(&mut verbs)?;
    let seen = ModelHeader::from_raw(le_word(&bytes, 0));
    if RemoteAddr::unpack(le_word(&entry, 0)) != record || seen.generation() != header.generation()
    {
        return Ok(None);
    }
    read_rest(ep, layout, slot, record, record_layout, header, bytes).map(Some)
}

/// The SLT entries a first READ of a record covers: up to the used prefix as `header` shows it,
/// plus a margin. Entries past `slot_use` mean nothing and stay zero.
fn first_slt_read(header: ModelHeader) -> u64 {
    (used_slt(header.raw()) + SLT_READ_MARGIN).min(SLT_SLOTS as u64)
}

fn used_slt(header: u64) -> u64 {
    (ModelHeader::from_raw(header).slot_use() + 1).min(SLT_SLOTS as u64)
}

/// Decodes a record whose first READ (header first, up to the SLT entries of
/// [`first_slt_read`]) is in `bytes`; if the header read with it shows more SLT entries in use,
/// they are read after it.
fn read_rest<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    slot: u64,
    record: RemoteAddr,
    record_layout: RecordLayout,
    header: ModelHeader,
    mut bytes: Vec<u8>,
) -> Result<ModelRecord, LeafStoreError> {
    let corrupt = |reason: String| LeafStoreError::CorruptRecord { slot, reason };
    let first = first_slt_read(header);
    let first_end = record_layout.slt_entry(first) as usize;
    let needed = used_slt(le_word(&bytes, 0));
    if needed > first {
        let rest = record.saturating_add(first_end as u64);
        ep.read(
            rest,
            &mut bytes[first_end..record_layout.slt_entry(needed) as usize],
        )?;
    }
    let params = learned_model::ModelParams::new(layout.epsilon(), layout.delta())
        .map_err(|e| corrupt(e.to_string()))?;
    let decoded = ModelRecord::decode(&bytes, params).map_err(corrupt)?;
    if decoded.slot != slot {
        return Err(corrupt(format!("record names slot {}", decoded.slot)));
    }
    Ok(decoded)
}

/// Reads leaf `leaf_num`, re-reading while its checksum fails (a READ racing a WRITE), at most
/// [`TORN_READ_RETRIES`] times.
pub fn read_leaf<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    leaf_num: u64,
) -> Result<Leaf, LeafStoreError> {
    if leaf_num >= layout.leaf_capacity() {
        return Err(LeafStoreError::CorruptLeaf(
            "leaf number beyond the region's capacity",
        ));
    }
    let mut bytes = vec![0u8; layout.leaf_bytes() as usize];
    let mut last = LeafStoreError::TornLeaf { leaf_num };
    for _ in 0..TORN_READ_RETRIES {
        ep.read(layout.leaf_addr(leaf_num), &mut bytes)?;
        match Leaf::decode(leaf_num, &bytes) {
            Ok(leaf) => return Ok(leaf),
            Err(e @ LeafStoreError::TornLeaf { .. }) => last = e,
            Err(e) => return Err(e),
        }
        crate::sync::thread::yield_now();
    }
    Err(last)
}

/// The leaves of trained leaf `leaf`'s chain, in chain order: the trained leaf, then its synonym
/// leaves through the SLT. Errors on a pointer to an unused SLT slot or a cycle.
pub fn walk_chain<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    record: &ModelRecord,
    leaf: usize,
) -> Result<Vec<(LeafTableEntry, Leaf)>, LeafStoreError> {
    let entries = record
        .chain_entries(leaf)
        .map_err(|reason| LeafStoreError::CorruptRecord {
            slot: record.slot,
            reason,
        })?;
    entries
        .into_iter()
        .map(|entry| Ok((entry, read_leaf(ep, layout, entry.leaf_num())?)))
        .collect()
}

/// Every `(key, value)` of the pool in key order, read by walking slot table, records and
/// chains: what a client that knows only the superblock can reach.
pub fn read_all_entries<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
) -> Result<Vec<(u64, u64)>, LeafStoreError> {
    let mut out = Vec::new();
    for (slot, (record_addr, _)) in read_slot_table(ep, layout)?.into_iter().enumerate() {
        let record = read_record(ep, layout, slot as u64, record_addr)?;
        for leaf in 0..record.lt.len() {
            for (_, contents) in walk_chain(ep, layout, &record, leaf)? {
                out.extend_from_slice(contents.entries());
            }
        }
    }
    Ok(out)
}

/// Every `(key, value)` entry of the pool, read while compute nodes may be writing it: exact for
/// every key present throughout. Each slot's record and chains are read between two READs of
/// the record's header word, and read again if the word changed — a split moves keys to its new
/// leaf, links it, bumps the header, and only then shrinks the old leaf, so a walk that saw the
/// shrink without the link saw the header move. (The slot table and the records must not change
/// meanwhile: the memory node's worker, which alone retrains, calls this.)
pub fn read_all_entries_live<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
) -> Result<Vec<(u64, u64)>, LeafStoreError> {
    let mut out = Vec::new();
    for (slot, (record_addr, _)) in read_slot_table(ep, layout)?.into_iter().enumerate() {
        let mut attempts = 0;
        loop {
            let before = ep.read_word(record_addr)?;
            let record = read_record(ep, layout, slot as u64, record_addr)?;
            let mut entries = Vec::new();
            for leaf in 0..record.lt.len() {
                for (_, contents) in walk_chain(ep, layout, &record, leaf)? {
                    entries.extend_from_slice(contents.entries());
                }
            }
            if ep.read_word(record_addr)? == before {
                out.extend(entries);
                break;
            }
            attempts += 1;
            if attempts > 10_000 {
                return Err(LeafStoreError::CorruptRecord {
                    slot: slot as u64,
                    reason: "its header kept changing during a walk".into(),
                });
            }
            crate::sync::thread::yield_now();
        }
    }
    Ok(out)
}
