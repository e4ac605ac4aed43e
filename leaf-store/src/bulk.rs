//! Bulk load: the memory node builds a pool from sorted key-value pairs.

use std::time::{Duration, Instant};

use learned_model::{LeafModel, ModelParams};
use rdma_transport::{Endpoint, MemoryNodeInfo};

use crate::layout::{LAYOUT_VERSION, SUPERBLOCK_BYTES, SUPERBLOCK_MAGIC};
use crate::record::RECORD_FIXED_BYTES;
use crate::ring::RingLayout;
use crate::{
    Layout, Leaf, LeafStoreError, LeafTableEntry, ModelHeader, ModelRecord, SLT_SLOTS, Superblock,
    leaf_bytes,
};

/// How to lay out a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkLoadConfig {
    /// Model error bound ε (default 16).
    pub epsilon: u64,
    /// Key slots per leaf δ (default 16).
    pub delta: u64,
    /// Keys per bulk-loaded leaf, `1..=δ` (default 12: room for 4 inserts before a leaf splits).
    pub fill: u64,
    /// Trained leaves per model slot (default 64).
    pub slot_leaves: u64,
    /// Leaves the leaf region holds; `None` (default) gives it all space left after the other
    /// regions.
    pub leaf_capacity: Option<u64>,
    /// The model region holds this many times the bulk-loaded records' bytes, plus as many times
    /// [`MODEL_BYTES_PER_GROWN_LEAF`] for every leaf of the leaf region beyond the loaded ones
    /// (default 2, at least 2): room for retrained records beside the ones they replace, as the
    /// data grows into the leaf region.
    pub model_region_factor: u64,
    /// Retraining-ring entries; `None` (default) gives one per slot the slot table can hold (at
    /// least 64). A smaller ring than that is refused: each pending slot may hold an entry.
    pub ring_capacity: Option<u64>,
    /// This memory node's index among `node_count` range-partitioned nodes (default 0 of 1).
    pub node_index: u64,
    /// Number of memory nodes (default 1).
    pub node_count: u64,
    /// Smallest key this node serves (default 0). Slot 0 owns every key from here.
    pub key_lo: u64,
    /// Largest key this node serves (default `u64::MAX`).
    pub key_hi: u64,
    /// Width of the record generations retraining hands out; `None` (default) gives the model
    /// header's full 22 bits. Narrower widths exist to test that nothing depends on generations
    /// being unique: they wrap after a few retrainings instead of after four million.
    pub generation_bits: Option<u64>,
    /// A value region, for a pool whose values are byte strings (see [`crate::value`] and
    /// [`bulk_load_values`]); `None` (default): values are `u64` words in the leaves.
    pub values: Option<ValueConfig>,
}

/// The value region of a pool with byte values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueConfig {
    /// The region's length in bytes (the pool ends with it).
    pub bytes: u64,
    /// Bytes per chunk (default [`crate::value::DEFAULT_CHUNK_BYTES`]); values longer than a
    /// chunk's largest block are refused ([`crate::value::ValueRegion::max_value_len`]).
    pub chunk_bytes: u64,
}

impl ValueConfig {
    /// A region of `bytes` bytes with the default chunk size.
    pub fn with_bytes(bytes: u64) -> Self {
        Self {
            bytes,
            chunk_bytes: crate::value::DEFAULT_CHUNK_BYTES,
        }
    }
}

impl Default for BulkLoadConfig {
    fn default() -> Self {
        Self {
            epsilon: 16,
            delta: 16,
            fill: 12,
            slot_leaves: 64,
            leaf_capacity: None,
            model_region_factor: 2,
            ring_capacity: None,
            node_index: 0,
            node_count: 1,
            key_lo: 0,
            key_hi: u64::MAX,
            generation_bits: None,
            values: None,
        }
    }
}

/// About what one trained leaf costs a compute node's cache with pivots (ARCHITECTURE §6, "Cache
/// budget"): its pivot (8 bytes) and its share of the models, about 2.6 bytes at ε = 16 (measured:
/// 0.88 bytes per key at 12 keys a leaf, uniform keys). [`BulkLoadConfig::sized_for_cache`]
/// sizes leaves by it.
pub const CACHE_BYTES_PER_LEAF: f64 = 11.0;

/// A leaf sized for a cache budget keeps a free slot for inserts per this many keys it is loaded
/// with, rounded up (12 keys: 2 free slots; 22: 4). The default geometry keeps 4 for 12. Fewer
/// free slots split leaves sooner, and each split adds a pivot the budget must hold: with 2 free
/// slots for 22 keys, a quarter of inserts at half a byte per key outgrew the budget and cost a
/// third of the modeled throughput (4 free slots: none).
pub const SIZED_LEAF_KEYS_PER_FREE_SLOT: u64 = 6;

/// The most keys per leaf [`BulkLoadConfig::sized_for_cache`] chooses: beyond it a GET's whole
/// leaf moves more bytes than reading two smaller leaves without pivots does.
pub const MAX_SIZED_FILL: u64 = 24;

impl BulkLoadConfig {
    /// This configuration with its leaves sized for a compute-side cache of `bytes_per_key`, or
    /// unchanged where no size fits. A GET READs one whole leaf when its view has pivots, so the
    /// smallest leaf whose pivots fit the budget moves the fewest bytes: the fewest keys per
    /// leaf (at least the default 12) whose [`CACHE_BYTES_PER_LEAF`] fit `bytes_per_key`, and a
    /// free slot per [`SIZED_LEAF_KEYS_PER_FREE_SLOT`] keys (1 byte per key: 12 keys in leaves
    /// of 14 slots, 248 bytes instead of 280; 0.5: 22 in 26, one leaf instead of about two).
    /// Where that would take more than [`MAX_SIZED_FILL`] keys a leaf, the budget holds no
    /// pivots anyway and the default leaves read least. Fewer free slots than the default's cost
    /// inserts: a leaf splits sooner, and its keys go to synonym leaves until a retraining.
    pub fn sized_for_cache(self, bytes_per_key: f64) -> Self {
        // Not a positive number of bytes (NaN included): nothing fits.
        if bytes_per_key.is_nan() || bytes_per_key <= 0.0 {
            return self;
        }
        let fill = ((CACHE_BYTES_PER_LEAF / bytes_per_key).ceil() as u64).max(Self::default().fill);
        if fill > MAX_SIZED_FILL {
            return self;
        }
        Self {
            fill,
            delta: fill + fill.div_ceil(SIZED_LEAF_KEYS_PER_FREE_SLOT),
            ..self
        }
    }
}

/// What a bulk load built, and what it cost.
#[derive(Debug, Clone)]
pub struct BulkLoadReport {
    /// The pool's layout (as a compute node attaching now would see it).
    pub layout: Layout,
    /// Keys loaded.
    pub keys: u64,
    /// Trained leaves written.
    pub trained_leaves: u64,
    /// Model slots.
    pub slots: u64,
    /// PLR segments over all slots.
    pub segments: u64,
    /// Bytes of all model records.
    pub record_bytes: u64,
    /// Bytes the pool uses now (superblock to the last trained leaf, not the free leaves).
    pub used_bytes: u64,
    /// Time spent sorting and checking the input.
    pub sort_time: Duration,
    /// Time spent training models.
    pub train_time: Duration,
    /// Time spent writing the pool.
    pub write_time: Duration,
}

/// Where bulk-load time goes, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Sorting and checking input.
    Sort,
    /// Training the slots' models.
    Train,
    /// Writing leaves.
    WriteLeaves,
    /// Writing records and tables.
    WriteRecords,
}

impl Phase {
    /// What the phase does, in words for a progress line.
    pub const fn describe(self) -> &'static str {
        match self {
            Phase::Sort => "sorting keys",
            Phase::Train => "training models",
            Phase::WriteLeaves => "writing leaves",
            Phase::WriteRecords => "writing models",
        }
    }
}

impl BulkLoadConfig {
    fn check(&self) -> Result<ModelParams, LeafStoreError> {
        let params = ModelParams::new(self.epsilon, self.delta)?;
        if self.fill == 0 || self.fill > self.delta {
            return Err(LeafStoreError::InvalidConfig(format!(
                "fill must be between 1 and δ = {}, not {}",
                self.delta, self.fill
            )));
        }
        if self.slot_leaves == 0 || self.slot_leaves > 1 << 20 {
            return Err(LeafStoreError::InvalidConfig(format!(
                "slot_leaves must be between 1 and 1048576, not {}",
                self.slot_leaves
            )));
        }
        if self.model_region_factor < 2 || self.model_region_factor > 64 {
            // Below 2 no retrained record fits beside the one it replaces: the first slot to
            // fill its SLT could never take another split.
            return Err(LeafStoreError::InvalidConfig(format!(
                "model_region_factor must be between 2 and 64, not {}",
                self.model_region_factor
            )));
        }
        if self.node_count == 0 || self.node_index >= self.node_count || self.key_lo > self.key_hi {
            return Err(LeafStoreError::InvalidConfig(
                "node index, node count or key range inconsistent".into(),
            ));
        }
        if let Some(values) = self.values {
            crate::value::ValueRegion::new(0, 0, values.bytes, values.chunk_bytes)?;
        }
        if let Some(bits) = self.generation_bits
            && !(1..=crate::ModelHeader::GENERATION_BITS).contains(&bits)
        {
            return Err(LeafStoreError::InvalidConfig(format!(
                "generation_bits must be between 1 and {}, not {bits}",
                crate::ModelHeader::GENERATION_BITS
            )));
        }
        Ok(params)
    }
}

/// Model-region bytes reserved (per copy: see `model_region_factor`) for each leaf the leaf region
/// holds beyond the bulk-loaded ones: once retrained, a grown leaf is a trained leaf of some record,
/// with an LT entry and a pivot (16 bytes), plus its share of segments and slack. Slot splits add
/// a record per `slot_leaves` grown leaves or more; [`grown_leaf_model_bytes`] adds its share.
pub const MODEL_BYTES_PER_GROWN_LEAF: u64 = 24;

/// Model-region bytes reserved per copy for each grown leaf: [`MODEL_BYTES_PER_GROWN_LEAF`] plus
/// the share of one new record (fixed part, a model, 256 SLT entries) per `slot_leaves` leaves —
/// a split record holds more than `slot_leaves` trained leaves in each half.
pub fn grown_leaf_model_bytes(slot_leaves: u64) -> u64 {
    MODEL_BYTES_PER_GROWN_LEAF
        + (RECORD_FIXED_BYTES + 64 + 8 * SLT_SLOTS as u64).div_ceil(slot_leaves.max(1))
}

/// Slot-table capacity for a pool loaded with `slots` slots whose leaf region can hold at most
/// `max_leaves` leaves: every split takes more than `slot_leaves` new leaves to happen, so the
/// slots can never outnumber this.
pub fn slot_capacity_for(slots: u64, max_leaves: u64, slot_leaves: u64) -> u64 {
    slots
        .saturating_add(max_leaves / slot_leaves.max(1))
        .saturating_add(1)
        .min(crate::RingEntry::MAX_SLOT + 1)
}

/// Bytes a pool needs for `keys` keys under `config` plus `spare_leaves` free leaves for inserts
/// (or `config.leaf_capacity` leaves, if that is larger),
/// assuming models of at most two segments per slot plus one per 32 keys (true of every
/// distribution measured; a bulk load that needs more says so with
/// [`LeafStoreError::PoolTooSmall`]).
pub fn required_pool_bytes(keys: u64, config: &BulkLoadConfig, spare_leaves: u64) -> u64 {
    let fill = config.fill.clamp(1, config.delta.max(1));
    let leaves = keys.div_ceil(fill).max(1);
    let slots = leaves.div_ceil(config.slot_leaves.max(1));
    let segments = 2 * slots + keys / 32;
    let records =
        slots * (RECORD_FIXED_BYTES + 64 + 8 * SLT_SLOTS as u64) + 16 * leaves + 48 * segments;
    let capacity = (leaves + spare_leaves).max(config.leaf_capacity.unwrap_or(0));
    let slot_capacity = slot_capacity_for(slots, capacity, config.slot_leaves);
    let slot_capacity = config
        .ring_capacity
        .map_or(slot_capacity, |ring| slot_capacity.min(ring))
        .max(slots);
    let ring = config.ring_capacity.unwrap_or(slot_capacity.max(64));
    let grown = capacity - leaves;
    SUPERBLOCK_BYTES
        + 16 * (slot_capacity + 1)
        + RingLayout::bytes(ring, slot_capacity)
        + crate::members::MEMBERS_BYTES
        + 16
        + records.saturating_mul(config.model_region_factor.max(1))
        + grown.saturating_mul(
            config.model_region_factor.max(1) * grown_leaf_model_bytes(config.slot_leaves),
        )
        + 16
        + 8
        + capacity.saturating_mul(leaf_bytes(config.delta))
        + config.values.map_or(0, |v| v.bytes + 8)
}

/// [`bulk_load_with_progress`] without progress reports.
pub fn bulk_load<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
) -> Result<BulkLoadReport, LeafStoreError> {
    bulk_load_with_progress(ep, node, pairs, config, |_, _, _| {})
}

/// Builds a pool on memory node `node` from `(key, value)` pairs: sorts them (unsorted input is
/// fine), trains one model per slot of `slot_leaves` trained leaves, writes the leaves `fill` keys
/// each, the records, slot table, ring and leaf-region header, and the superblock last.
///
/// Everything is checked before the first write — parameters, duplicate keys, keys outside the
/// node's range, the pool's size — so bad input gets an error and leaves the pool untouched. Once
/// writing starts, the old superblock (if any) is invalidated first, so an interrupted load never
/// leaves an attachable pool describing half-written data.
///
/// `progress(phase, done, total)` is called as the work advances.
pub fn bulk_load_with_progress<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    progress: impl FnMut(Phase, u64, u64),
) -> Result<BulkLoadReport, LeafStoreError> {
    if config.values.is_some() {
        return Err(LeafStoreError::InvalidConfig(
            "a pool with a value region is loaded with byte values (bulk_load_values)".into(),
        ));
    }
    load(ep, node, pairs, config, progress, None)
}

/// Builds a pool with byte values on memory node `node`: like [`bulk_load_with_progress`], with
/// every value written to a block of the value region (`config.values`, required) and the
/// leaves holding [`crate::value::ValueRef`]s. Values longer than the region stores, or more than
/// it holds, are refused before anything is written.
pub fn bulk_load_values<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    mut pairs: Vec<(u64, Vec<u8>)>,
    config: &BulkLoadConfig,
    progress: impl FnMut(Phase, u64, u64),
) -> Result<BulkLoadReport, LeafStoreError> {
    let Some(values) = config.values else {
        return Err(LeafStoreError::InvalidConfig(
            "byte values need a value region (BulkLoadConfig::values)".into(),
        ));
    };
    if !pairs.is_sorted_by_key(|p| p.0) {
        pairs.sort_unstable_by_key(|p| p.0);
    }
    // Geometry relative to the region's start: references do not depend on where it lies.
    let region = crate::value::ValueRegion::new(node.id, 0, values.bytes, values.chunk_bytes)?;
    let plan = crate::value_load::plan(&region, &pairs)?;
    let words = pairs
        .iter()
        .zip(&plan.refs)
        .map(|(p, r)| (p.0, r.raw()))
        .collect();
    load(ep, node, words, config, progress, Some((&pairs, &plan)))
}

type ValueInput<'a> = Option<(&'a [(u64, Vec<u8>)], &'a crate::value_load::Plan)>;

fn load<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    mut pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    mut progress: impl FnMut(Phase, u64, u64),
    values: ValueInput<'_>,
) -> Result<BulkLoadReport, LeafStoreError> {
    let params = config.check()?;
    let started = Instant::now();
    progress(Phase::Sort, 0, pairs.len() as u64);
    if pairs.is_empty() {
        return Err(LeafStoreError::NoKeys);
    }
    if !pairs.is_sorted_by_key(|p| p.0) {
        pairs.sort_unstable_by_key(|p| p.0);
    }
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(LeafStoreError::DuplicateKey(w[0].0));
    }
    let (lo, hi) = (config.key_lo, config.key_hi);
    if let Some(&(key, _)) = pairs.iter().find(|p| p.0 < lo || p.0 > hi) {
        return Err(LeafStoreError::KeyOutOfRange { key, lo, hi });
    }
    progress(Phase::Sort, pairs.len() as u64, pairs.len() as u64);
    let sort_time = started.elapsed();

    // Train every slot's model (in parallel: slots are independent).
    let started = Instant::now();
    let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let fill = config.fill as usize;
    let keys_per_slot = fill * config.slot_leaves as usize;
    let slot_keys: Vec<&[u64]> = keys.chunks(keys_per_slot).collect();
    let slots = slot_keys.len() as u64;
    let models = train_slots(&slot_keys, params, config.fill, &mut progress)?;
    drop(slot_keys);
    let train_time = started.elapsed();

    // Lay the regions out and check the pool is large enough, still before writing anything.
    let value_bytes = config.values.map_or(0, |v| v.bytes);
    let trained_leaves = keys.len().div_ceil(fill) as u64;
    let record_sizes: Vec<u64> = models
        .iter()
        .map(|m| {
            RECORD_FIXED_BYTES
                + (learned_model::serial::HEADER_LEN as u64 + 48 * m.segments().len() as u64)
                    .next_multiple_of(8)
                + 16 * m.leaves()
                + 8 * SLT_SLOTS as u64
        })
        .collect();
    let record_bytes: u64 = record_sizes.iter().sum();
    let segments: u64 = models.iter().map(|m| m.segments().len() as u64).sum();
    let leaf_size = leaf_bytes(config.delta);
    let loaded_models =
        (16 + record_bytes.saturating_mul(config.model_region_factor)).next_multiple_of(8);
    let per_grown_leaf = config
        .model_region_factor
        .saturating_mul(grown_leaf_model_bytes(config.slot_leaves));
    // The ring holds an entry per pending slot: an explicit ring capacity caps the slot table.
    let ring_for = |slot_capacity: u64| config.ring_capacity.unwrap_or(slot_capacity.max(64));
    let cap_slots = |slot_capacity: u64| {
        config
            .ring_capacity
            .map_or(slot_capacity, |ring| slot_capacity.min(ring))
            .max(slots)
    };
    // The most leaves such that the leaves and the model space they may need both fit, with a
    // slot table of `slot_capacity` slots.
    let leaves_fitting = |slot_capacity: u64| {
        config.leaf_capacity.unwrap_or_else(|| {
            let fixed = SUPERBLOCK_BYTES
                .saturating_add(16 * (slot_capacity + 1))
                .saturating_add(RingLayout::bytes(ring_for(slot_capacity), slot_capacity))
                .saturating_add(crate::members::MEMBERS_BYTES)
                .saturating_add(loaded_models)
                .saturating_add(16 + 8);
            let room = node
                .region_len
                .saturating_sub(fixed)
                .saturating_sub(value_bytes + 8);
            room.saturating_add(per_grown_leaf.saturating_mul(trained_leaves))
                / (leaf_size + per_grown_leaf)
        })
    };
    // Room for every slot the leaf region could ever need (splits publish new slots): sized
    // first for a region of nothing but leaves, then for the leaves that leaves room for.
    let first_guess = cap_slots(slot_capacity_for(
        slots,
        (node.region_len / leaf_size).max(trained_leaves),
        config.slot_leaves,
    ));
    let slot_capacity = cap_slots(slot_capacity_for(
        slots,
        leaves_fitting(first_guess).max(trained_leaves),
        config.slot_leaves,
    ));
    let ring_capacity = ring_for(slot_capacity);
    if ring_capacity < slots.max(1) {
        // Every pending slot holds one entry: a smaller ring could overflow and lose queued
        // slots, and `verify` would report the ring broken.
        return Err(LeafStoreError::InvalidConfig(format!(
            "ring_capacity must be at least the number of slots ({slots}), not {ring_capacity}"
        )));
    }
    let slot_table_offset = SUPERBLOCK_BYTES;
    let ring_offset = slot_table_offset + 16 * (slot_capacity + 1);
    let members_offset = ring_offset + RingLayout::bytes(ring_capacity, slot_capacity);
    let model_region_offset = members_offset + crate::members::MEMBERS_BYTES;
    // The model region follows the leaf region's capacity: every leaf beyond the loaded ones may
    // become a trained leaf of some record after retraining (its LT entry and pivot, and its
    // share of a split's new record), and shadow redirection keeps old and new records side by
    // side (the factor).
    let leaf_capacity = leaves_fitting(slot_capacity);
    let model_region_bytes = loaded_models
        .saturating_add(per_grown_leaf.saturating_mul(leaf_capacity.saturating_sub(trained_leaves)))
        .next_multiple_of(8);
    let leaf_region_offset = model_region_offset.saturating_add(model_region_bytes);
    let leaf_end = leaf_region_offset
        .saturating_add(16)
        .saturating_add(leaf_capacity.max(trained_leaves).saturating_mul(leaf_size));
    let value_region_offset = if value_bytes > 0 {
        leaf_end.next_multiple_of(8)
    } else {
        0
    };
    let needed = leaf_end.max(value_region_offset.saturating_add(value_bytes));
    if leaf_capacity < trained_leaves || needed > node.region_len {
        return Err(LeafStoreError::PoolTooSmall {
            needed: needed.max(leaf_region_offset + 16 + trained_leaves * leaf_size),
            available: node.region_len,
        });
    }
    if leaf_capacity > crate::MAX_LEAF_NUM {
        return Err(LeafStoreError::InvalidConfig(
            "leaf capacity beyond 48-bit leaf numbers".into(),
        ));
    }
    let sb = Superblock {
        magic: SUPERBLOCK_MAGIC,
        version: LAYOUT_VERSION,
        epsilon: config.epsilon,
        delta: config.delta,
        fill: config.fill,
        slot_leaves: config.slot_leaves,
        node_id: u64::from(node.id),
        node_count: config.node_count,
        key_lo: lo,
        key_hi: hi,
        pool_bytes: needed,
        leaf_region_offset,
        leaf_capacity,
        leaf_bytes: leaf_size,
        slot_table_offset,
        slots,
        model_region_offset,
        model_region_bytes,
        ring_offset,
        ring_capacity,
        keys_loaded: keys.len() as u64,
        trained_leaves,
        record_bytes_loaded: record_bytes,
        members_offset,
        slot_capacity,
        generation_bits: config.generation_bits.unwrap_or(0),
        value_region_offset,
        value_region_bytes: value_bytes,
        value_chunk_bytes: config.values.map_or(0, |v| v.chunk_bytes),
        reserved: [0; 2],
        checksum: 0,
    }
    .sealed();
    let layout = Layout::from_superblock(node.id, sb);

    // Write. First make any old pool unattachable.
    let started = Instant::now();
    ep.write(layout.at(0), &[0u8; 8])?;
    write_leaves(ep, &layout, &pairs, &mut progress)?;
    drop(pairs);
    progress(Phase::WriteRecords, 0, slots);
    let records_start = model_region_offset + 16;
    let mut slot_table = Vec::with_capacity(16 * (slots as usize + 1));
    slot_table.extend_from_slice(&slots.to_le_bytes());
    slot_table.extend_from_slice(&0u64.to_le_bytes());
    let mut buffer = Vec::new();
    let mut buffer_start = records_start;
    let mut offset = records_start;
    for (slot, (model, size)) in models.into_iter().zip(&record_sizes).enumerate() {
        let slot = slot as u64;
        let first_leaf = slot * config.slot_leaves;
        let slot_first = keys[(first_leaf * config.fill) as usize];
        let record = ModelRecord {
            header: ModelHeader::new(0),
            slot,
            first_key: if slot == 0 { lo } else { slot_first },
            last_key: keys
                .get(((slot + 1) * config.slot_leaves * config.fill) as usize)
                .map_or(hi, |next| next - 1),
            pivots: keys[(first_leaf * config.fill) as usize..]
                .chunks(fill)
                .take(model.leaves() as usize)
                .map(|c| c[0])
                .collect(),
            lt: (first_leaf..first_leaf + model.leaves())
                .map(|n| LeafTableEntry::new(n).unwrap_or_default())
                .collect(),
            slt: crate::record::unclaimed_slt(),
            model,
        };
        let bytes = record.encode();
        debug_assert_eq!(bytes.len() as u64, *size);
        slot_table.extend_from_slice(&layout.at(offset).pack().to_le_bytes());
        slot_table.extend_from_slice(&record.first_key.to_le_bytes());
        buffer.extend_from_slice(&bytes);
        offset += size;
        if buffer.len() >= 1 << 20 {
            ep.write(layout.at(buffer_start), &buffer)?;
            buffer_start = offset;
            buffer.clear();
            progress(Phase::WriteRecords, slot + 1, slots);
        }
    }
    ep.write(layout.at(buffer_start), &buffer)?;
    let mut region_header = offset.to_le_bytes().to_vec();
    region_header.extend_from_slice(&(model_region_offset + model_region_bytes).to_le_bytes());
    ep.write(layout.model_region_addr(), &region_header)?;
    write_chunked(ep, &layout, slot_table_offset, &slot_table)?;
    let mut ring = vec![0u8; RingLayout::bytes(ring_capacity, slot_capacity) as usize];
    ring[16..24].copy_from_slice(&ring_capacity.to_le_bytes());
    write_chunked(ep, &layout, ring_offset, &ring)?;
    // No member yet: a pool loaded over an old one must not inherit its leases.
    let members = vec![0u8; crate::members::MEMBERS_BYTES as usize];
    write_chunked(ep, &layout, members_offset, &members)?;
    let mut leaf_header = trained_leaves.to_le_bytes().to_vec();
    leaf_header.extend_from_slice(&leaf_capacity.to_le_bytes());
    ep.write(layout.alloc_num_addr(), &leaf_header)?;
    if let (Some((values, plan)), Some(region)) = (values, layout.values()) {
        crate::value_load::write(ep, &region, values, plan)?;
    }
    ep.write(layout.at(0), &sb.to_bytes())?;
    progress(Phase::WriteRecords, slots, slots);
    let write_time = started.elapsed();

    Ok(BulkLoadReport {
        layout,
        keys: keys.len() as u64,
        trained_leaves,
        slots,
        segments,
        record_bytes,
        used_bytes: leaf_region_offset + 16 + trained_leaves * leaf_size,
        sort_time,
        train_time,
        write_time,
    })
}

/// Writes `bytes` at `offset` in WRITEs of at most 1 MiB.
fn write_chunked<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    offset: u64,
    bytes: &[u8],
) -> Result<(), LeafStoreError> {
    const CHUNK: usize = 1 << 20;
    for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
        ep.write(layout.at(offset + (i * CHUNK) as u64), chunk)?;
    }
    Ok(())
}

fn train_slots(
    slot_keys: &[&[u64]],
    params: ModelParams,
    fill: u64,
    progress: &mut impl FnMut(Phase, u64, u64),
) -> Result<Vec<LeafModel>, LeafStoreError> {
    let total = slot_keys.len() as u64;
    progress(Phase::Train, 0, total);
    // Loom builds train inline: no thread outside the model.
    let threads = if cfg!(loom) {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(slot_keys.len())
            .max(1)
    };
    if threads == 1 {
        let models = slot_keys
            .iter()
            .map(|keys| LeafModel::train_filled(params, keys, fill).map_err(LeafStoreError::from))
            .collect::<Result<Vec<_>, _>>()?;
        progress(Phase::Train, total, total);
        return Ok(models);
    }
    let per_thread = slot_keys.len().div_ceil(threads);
    let results: Vec<Result<Vec<LeafModel>, LeafStoreError>> = std::thread::scope(|s| {
        let handles: Vec<_> = slot_keys
            .chunks(per_thread)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|keys| {
                            LeafModel::train_filled(params, keys, fill)
                                .map_err(LeafStoreError::from)
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(LeafStoreError::InvalidConfig(
                        "training thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut models = Vec::with_capacity(slot_keys.len());
    for r in results {
        models.extend(r?);
    }
    progress(Phase::Train, total, total);
    Ok(models)
}

fn write_leaves<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    pairs: &[(u64, u64)],
    progress: &mut impl FnMut(Phase, u64, u64),
) -> Result<(), LeafStoreError> {
    let fill = layout.superblock().fill as usize;
    let leaf_size = layout.leaf_bytes() as usize;
    let total = pairs.len().div_ceil(fill) as u64;
    let (key_lo, key_hi) = (layout.superblock().key_lo, layout.superblock().key_hi);
    const BATCH: usize = 4096;
    let mut buffer = vec![0u8; BATCH * leaf_size];
    let mut leaf = Leaf::new();
    for (batch, chunk) in pairs.chunks(fill * BATCH).enumerate() {
        let first = (batch * BATCH) as u64;
        let leaves = chunk.len().div_ceil(fill);
        for (i, entries) in chunk.chunks(fill).enumerate() {
            let out = &mut buffer[i * leaf_size..(i + 1) * leaf_size];
            let n = first as usize + i;
            // The leaves tile the node's range: each claims from its first key (the first leaf
            // from the node's) to just below the next leaf's first key (the last to the node's
            // last key), exactly the range its record routes to it.
            let lo = if n == 0 { key_lo } else { entries[0].0 };
            let hi = pairs.get((n + 1) * fill).map_or(key_hi, |next| next.0 - 1);
            leaf.entries_mut().clear();
            leaf.entries_mut().extend_from_slice(entries);
            leaf.set_claim(Some((lo, hi)));
            leaf.encode_into(n as u64, out)?;
        }
        ep.write(layout.leaf_addr(first), &buffer[..leaves * leaf_size])?;
        progress(Phase::WriteLeaves, first + leaves as u64, total);
    }
    Ok(())
}
