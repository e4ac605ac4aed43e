//! Bulk load: leaves filled in key order, internal levels above them, the root word last but one
//! and the superblock last. With byte values, the value blocks first, packed into chunks.

use leaf_store::ValueConfig;
use leaf_store::value::{CLASS_BYTES, CLASSES, ValueRef, class_for, encode_block};
use rdma_transport::{Endpoint, MemoryNodeInfo};

use crate::TreeError;
use crate::layout::{Layout, LeafKind, root_word};
use crate::page::Page;

/// How to lay out a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkLoadConfig {
    /// Bytes per page (default 1 KiB, Sherman's): a multiple of 64, at least 128.
    pub page_size: u64,
    /// Entries per bulk-loaded page, at most the page's capacity (default: 80% of it).
    pub fill: Option<usize>,
    /// Words in the lock table (default 65,536: 512 KiB).
    pub lock_words: u64,
    /// First key this memory node serves (default 0).
    pub key_lo: u64,
    /// Last key it serves (default `u64::MAX`).
    pub key_hi: u64,
    /// A value region: the pool stores byte values ([`bulk_load_values`]); `None` (the default)
    /// stores 8-byte values.
    pub values: Option<ValueConfig>,
    /// What the leaves are (default: Sherman's sorted pages; [`BulkLoadConfig::hopscotch`]
    /// for CHIME's).
    pub leaf: LeafKind,
}

impl Default for BulkLoadConfig {
    fn default() -> Self {
        Self {
            page_size: 1024,
            fill: None,
            lock_words: 1 << 16,
            key_lo: 0,
            key_hi: u64::MAX,
            values: None,
            leaf: LeafKind::Sorted,
        }
    }
}

impl BulkLoadConfig {
    /// CHIME's layout: hopscotch leaves of its default shape (64 slots, neighbourhoods of 8)
    /// in pages just large enough for one (1,728 bytes), internal pages of that size too.
    pub fn hopscotch() -> Self {
        let leaf = LeafKind::hopscotch();
        let LeafKind::Hopscotch(g) = leaf else {
            unreachable!("hopscotch() names a hopscotch leaf")
        };
        Self {
            page_size: g.leaf_bytes().next_multiple_of(64),
            leaf,
            ..Self::default()
        }
    }

    /// Keys per bulk-loaded leaf.
    fn fill(&self) -> usize {
        let capacity = self.leaf.capacity(self.page_size);
        self.fill
            .unwrap_or(capacity * 4 / 5)
            .clamp(2.min(capacity), capacity)
    }
}

/// Bytes a pool needs for `keys` keys under `config`, with room for `spare` more keys inserted
/// (at the worst case of pages split half full).
pub fn required_pool_bytes(keys: u64, config: &BulkLoadConfig, spare: u64) -> u64 {
    let capacity = config.leaf.capacity(config.page_size).max(2) as u64;
    let fill = config.fill() as u64;
    let leaves = keys.div_ceil(fill) + 2 * spare.div_ceil(capacity) + 2;
    // Internal pages: at most one per half-full page of children, over every level.
    let pages = 2 * leaves + 16;
    192 + 8 * config.lock_words
        + config.page_size * (pages + 2)
        + config.values.map_or(0, |v| v.bytes)
}

/// Builds a B+-tree on memory node `node` from `(key, value)` pairs (sorted here if they are
/// not). Everything is checked before the first WRITE; the superblock is invalidated first and
/// written last, so an interrupted load leaves no attachable pool.
pub fn bulk_load<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
) -> Result<Layout, TreeError> {
    if config.values.is_some() {
        return Err(TreeError::Config(
            "a pool with a value region is loaded with byte values (bulk_load_values)".into(),
        ));
    }
    load(ep, node, pairs, config, |_, _| Ok(()))
}

/// Builds a B+-tree storing byte values on memory node `node` from `(key, value)` pairs:
/// `config.values` must name the value region. Each value goes to a block of its size class,
/// packed into chunks in key order; the leaves hold [`ValueRef`]s. Values longer than
/// [`Layout::max_value_len`] are refused before the first WRITE.
pub fn bulk_load_values<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    mut pairs: Vec<(u64, Vec<u8>)>,
    config: &BulkLoadConfig,
) -> Result<Layout, TreeError> {
    let Some(values) = config.values else {
        return Err(TreeError::Config(
            "byte values need a value region (BulkLoadConfig::values)".into(),
        ));
    };
    let plan = Layout::plan(
        node,
        config.page_size,
        config.lock_words,
        config.key_lo,
        config.key_hi,
        Some(values),
        config.leaf,
    )?;
    pairs.sort_unstable_by_key(|p| p.0);
    let max = plan.max_value_len();
    // Place every block: each size class fills its own chunks, taken in order.
    let mut chunks_used = 0u64;
    let mut open: [Option<(u64, u64)>; CLASSES] = [None; CLASSES];
    let mut placed = Vec::with_capacity(pairs.len());
    for (key, value) in &pairs {
        let len = value.len() as u64;
        let too_large = TreeError::ValueTooLarge {
            node: node.id,
            len,
            limit: max,
        };
        let class = class_for(len)
            .filter(|_| len <= max)
            .ok_or_else(|| too_large.clone())?;
        let size = CLASS_BYTES[class];
        let at = match open[class] {
            Some((next, end)) if next + size <= end => next,
            _ => {
                if chunks_used >= plan.value_chunks() {
                    return Err(TreeError::ValuesExhausted {
                        node: node.id,
                        chunks: plan.value_chunks(),
                    });
                }
                let start = chunks_used * plan.value_chunk_bytes;
                chunks_used += 1;
                start
            }
        };
        open[class] = Some((
            at + size,
            (at / plan.value_chunk_bytes + 1) * plan.value_chunk_bytes,
        ));
        let reference = ValueRef::new(at, len).ok_or(too_large)?;
        placed.push((*key, reference.raw()));
    }
    let blocks: Vec<(u64, u64)> = placed.clone();
    load(ep, node, placed, config, move |ep, layout| {
        // Blocks in region order, written a MiB at a time.
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        order.sort_unstable_by_key(|&i| ValueRef::from_raw(blocks[i].1).offset());
        let mut buffer: Vec<u8> = Vec::new();
        let mut start = 0u64;
        for i in order {
            let (key, raw) = blocks[i];
            let reference = ValueRef::from_raw(raw);
            let offset = reference.offset();
            let end = start + buffer.len() as u64;
            if offset >= end && offset - end <= 1 << 16 {
                // A block's class is longer than its bytes: zeros between neighbours.
                buffer.resize((offset - start) as usize, 0);
            } else {
                if !buffer.is_empty() {
                    ep.write(layout.value_addr(start), &buffer)?;
                }
                buffer.clear();
                start = offset;
            }
            buffer.extend_from_slice(&encode_block(key, &pairs[i].1, offset));
            if buffer.len() >= 1 << 20 {
                ep.write(layout.value_addr(start), &buffer)?;
                start += buffer.len() as u64;
                buffer.clear();
            }
        }
        if !buffer.is_empty() {
            ep.write(layout.value_addr(start), &buffer)?;
        }
        ep.write_word(layout.value_chunk_word_addr(), chunks_used)?;
        Ok(())
    })
}

/// The load itself; `before_pages` writes what the leaves will name (value blocks) once the
/// superblock is invalid and before any page.
fn load<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    mut pairs: Vec<(u64, u64)>,
    config: &BulkLoadConfig,
    before_pages: impl FnOnce(&mut E, &Layout) -> Result<(), TreeError>,
) -> Result<Layout, TreeError> {
    let mut layout = Layout::plan(
        node,
        config.page_size,
        config.lock_words,
        config.key_lo,
        config.key_hi,
        config.values,
        config.leaf,
    )?;
    pairs.sort_unstable_by_key(|p| p.0);
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(TreeError::DuplicateKey(w[0].0));
    }
    if let Some(&(key, _)) = pairs
        .iter()
        .find(|p| p.0 < config.key_lo || p.0 > config.key_hi)
    {
        return Err(TreeError::Config(format!(
            "key {key} outside the node's range [{}, {}]",
            config.key_lo, config.key_hi
        )));
    }
    let capacity = Page::capacity(config.page_size);
    if capacity < 4 {
        return Err(TreeError::Config(
            "pages must hold at least 4 entries".into(),
        ));
    }
    let fill = config.fill();

    // Plan every page before writing: leaves, then each internal level, page 1 onwards. Hopscotch
    // leaves are planned apart (`hop`); `pages` holds a stand-in for each with its fences.
    let mut pages: Vec<Page> = Vec::new();
    let mut level_pages: Vec<u64> = Vec::new();
    let mut hop: Vec<chime::Leaf> = Vec::new();
    match config.leaf {
        LeafKind::Sorted => {
            let chunks: Vec<&[(u64, u64)]> = if pairs.is_empty() {
                vec![&[]]
            } else {
                pairs.chunks(fill).collect()
            };
            for (i, chunk) in chunks.iter().enumerate() {
                let low = if i == 0 { config.key_lo } else { chunk[0].0 };
                let mut page = Page::new(0, low, None, capacity);
                for (slot, &e) in chunk.iter().enumerate() {
                    page.slots[slot] = Some(e);
                }
                pages.push(page);
                level_pages.push(pages.len() as u64);
            }
        }
        LeafKind::Hopscotch(g) => {
            hop = chime::pack::pack(g, &pairs, fill, None)
                .map_err(|e| TreeError::Config(e.to_string()))?;
            let mut low = config.key_lo;
            for leaf in &hop {
                pages.push(Page::new(0, low, leaf.high, 0));
                level_pages.push(pages.len() as u64);
                low = leaf.high.unwrap_or(u64::MAX);
            }
        }
    }
    // Internal pages take at most `fill` separators, and no more than they hold.
    let fill = fill.min(capacity);
    let mut level = 0u8;
    while level_pages.len() > 1 {
        level += 1;
        let children = std::mem::take(&mut level_pages);
        // Each internal page: a leftmost child plus up to `fill` separators.
        for group in children.chunks(fill + 1) {
            let first = &pages[(group[0] - 1) as usize];
            let mut page = Page::new(level, first.low, None, capacity);
            page.leftmost = group[0];
            for (slot, &child) in group[1..].iter().enumerate() {
                page.slots[slot] = Some((pages[(child - 1) as usize].low, child));
            }
            pages.push(page);
            level_pages.push(pages.len() as u64);
        }
    }
    let root = level_pages[0];
    // Fences and siblings along every level: each page ends where its right neighbour starts.
    let mut by_level: Vec<Vec<u64>> = vec![Vec::new(); usize::from(level) + 1];
    for (i, p) in pages.iter().enumerate() {
        by_level[usize::from(p.level)].push(i as u64 + 1);
    }
    for row in &by_level {
        for w in row.windows(2) {
            let next_low = pages[(w[1] - 1) as usize].low;
            let p = &mut pages[(w[0] - 1) as usize];
            p.high = Some(next_low);
            p.sibling = w[1];
        }
    }
    let total = pages.len() as u64 + 1;
    if total > layout.page_capacity {
        return Err(TreeError::PoolTooSmall {
            needed: required_pool_bytes(pairs.len() as u64, config, 0),
            available: node.region_len,
        });
    }
    layout.keys_loaded = pairs.len() as u64;

    ep.write(layout.superblock_addr(), &[0u8; 8])?;
    ep.write_word(layout.value_chunk_word_addr(), 0)?;
    before_pages(ep, &layout)?;
    let mut buffer = Vec::new();
    let mut start = 1u64;
    for (i, page) in pages.iter().enumerate() {
        let number = i as u64 + 1;
        match hop.get_mut(i) {
            Some(leaf) => {
                leaf.sibling = page.sibling;
                let start = buffer.len();
                buffer.extend(leaf.encode(number).iter().flat_map(|w| w.to_le_bytes()));
                buffer.resize(start + layout.page_size as usize, 0);
            }
            None => buffer.extend_from_slice(&page.encode(number, layout.page_size)),
        }
        if buffer.len() >= 1 << 20 {
            ep.write(layout.page_addr(start), &buffer)?;
            buffer.clear();
            start = number + 1;
        }
    }
    if !buffer.is_empty() {
        ep.write(layout.page_addr(start), &buffer)?;
    }
    let zeros = vec![0u8; (8 * layout.lock_words) as usize];
    for (i, chunk) in zeros.chunks(1 << 20).enumerate() {
        let at = layout
            .lock_table_addr()
            .checked_add((i as u64) << 20)
            .unwrap_or_default();
        ep.write(at, chunk)?;
    }
    ep.write_word(layout.alloc_addr(), total)?;
    ep.write_word(layout.root_addr(), root_word(level, root))?;
    let words: Vec<u8> = layout
        .superblock()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    ep.write(layout.superblock_addr(), &words)?;
    Ok(layout)
}
