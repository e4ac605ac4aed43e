//! `verify`: walk a whole tree level by level and check every structural invariant.

use std::fmt;

use rdma_transport::{Endpoint, MemoryNodeInfo};

use leaf_store::value::{CLASS_BYTES, ValueRef, check_block, class_for};

use crate::TreeError;
use crate::layout::{Layout, LeafKind, unpack_root};
use crate::page::Page;

/// What [`verify`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Keys in the leaves.
    pub keys: u64,
    /// Pages per level, leaves first.
    pub pages_per_level: Vec<u64>,
    /// Pages handed out (the allocation word).
    pub allocated_pages: u64,
    /// Every broken invariant, described.
    pub problems: Vec<String>,
    /// With byte values: what the value region holds (every chunk handed out counts as owned:
    /// the baseline gives none back).
    pub values: Option<leaf_store::ValueSpace>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} keys; pages per level (leaves first) {:?}; {} pages allocated",
            self.keys, self.pages_per_level, self.allocated_pages
        )?;
        if let Some(v) = &self.values {
            writeln!(f, "{v}")?;
        }
        if self.is_clean() {
            write!(f, "verify: clean")
        } else {
            writeln!(f, "verify: {} problem(s)", self.problems.len())?;
            for p in self.problems.iter().take(20) {
                writeln!(f, "  - {p}")?;
            }
            Ok(())
        }
    }
}

/// Walks the tree on memory node `node` (meant for a quiescent pool) and checks: every page's
/// checksum and level; along every level, fences that start at the node's first key, follow each
/// other without gap or overlap and end open; keys inside their leaf's fences and unique;
/// separators sorted inside their page's fences; every page of a level below the root referenced
/// by exactly one parent, whose separator is the child's low fence; the root word's level; no
/// page beyond the allocation word; no lock held. With byte values: every leaf entry's block
/// lies in a chunk handed out, holds its key, length and a checksum that holds, and no two
/// entries name one block.
pub fn verify<E: Endpoint>(ep: &mut E, node: MemoryNodeInfo) -> Result<VerifyReport, TreeError> {
    let layout = Layout::attach(ep, node)?;
    let mut report = VerifyReport::default();
    let problems = &mut report.problems;
    let allocated = ep.read_word(layout.alloc_addr())?;
    report.allocated_pages = allocated;
    if allocated > layout.page_capacity || allocated < 2 {
        problems.push(format!(
            "allocation word {allocated} outside 2..={}",
            layout.page_capacity
        ));
    }
    let (root_level, root) = unpack_root(ep.read_word(layout.root_addr())?);
    // A page as the walk sees it; a hopscotch leaf as a page of its entries, with the low fence
    // the level reached (it keeps none) and its own invariants checked here.
    let read = |ep: &mut E,
                no: u64,
                level: u8,
                low: u64,
                problems: &mut Vec<String>|
     -> Result<Option<Page>, TreeError> {
        if no == 0 || no >= allocated.min(layout.page_capacity) {
            return Ok(None);
        }
        let mut bytes = vec![0u8; layout.page_size as usize];
        ep.read(layout.page_addr(no), &mut bytes)?;
        let LeafKind::Hopscotch(g) = layout.leaf else {
            return Ok(Page::decode(no, &bytes));
        };
        if level > 0 {
            return Ok(Page::decode(no, &bytes));
        }
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let Some(leaf) = chime::Leaf::decode_unchecked(g, no, &words) else {
            return Ok(None);
        };
        if let Err(why) = leaf.check() {
            problems.push(format!("hopscotch leaf {no}: {why}"));
        }
        if words[g.tail_word()] != leaf.vacancy() {
            problems.push(format!(
                "hopscotch leaf {no}: vacancy word {:#x}, its slots say {:#x}",
                words[g.tail_word()],
                leaf.vacancy()
            ));
        }
        let mut page = Page::new(0, low, leaf.high, 0);
        page.sibling = leaf.sibling;
        page.slots = leaf.entries().map(Some).collect();
        Ok(Some(page))
    };
    // Walk each level from its leftmost page, top-down; `expected` holds the children the level
    // above references (page → the separator or low fence it was given).
    let mut leftmost = root;
    let mut expected: Option<Vec<(u64, u64)>> = None;
    let mut per_level = Vec::new();
    let mut refs: Vec<(u64, u64)> = Vec::new();
    for level in (0..=root_level).rev() {
        let mut seen: Vec<(u64, u64)> = Vec::new();
        let mut children: Vec<(u64, u64)> = Vec::new();
        let mut no = leftmost;
        let mut low = layout.key_lo;
        let mut first = true;
        let mut count = 0u64;
        loop {
            let Some(page) = read(ep, no, level, low, problems)? else {
                problems.push(format!(
                    "level {level}: page {no} unreadable or unallocated"
                ));
                break;
            };
            count += 1;
            if page.level != level {
                problems.push(format!("page {no}: level {} on level {level}", page.level));
            }
            if page.low != low {
                problems.push(format!(
                    "page {no}: low fence {} where the level reached {low}",
                    page.low
                ));
            }
            if first && level == root_level && no != root {
                problems.push("root word names another page".into());
            }
            if level == root_level && (page.high.is_some() || page.sibling != 0) {
                problems.push(format!(
                    "root page {no} has a sibling: a root split was never installed"
                ));
            }
            first = false;
            seen.push((no, page.low));
            if page.is_leaf() {
                if layout.has_values() {
                    refs.extend(page.entries());
                }
                let mut keys: Vec<u64> = page.entries().map(|e| e.0).collect();
                report.keys += keys.len() as u64;
                if let Some(&k) = keys.iter().find(|&&k| !page.covers(k)) {
                    problems.push(format!("leaf {no}: key {k} outside its fences"));
                }
                keys.sort_unstable();
                if keys.windows(2).any(|w| w[0] == w[1]) {
                    problems.push(format!("leaf {no}: a key twice"));
                }
            } else {
                children.push((page.leftmost, page.low));
                let seps: Vec<(u64, u64)> = page.entries().collect();
                if seps.windows(2).any(|w| w[0].0 >= w[1].0)
                    || seps.first().is_some_and(|s| s.0 <= page.low)
                    || seps.last().is_some_and(|s| page.past_high(s.0))
                {
                    problems.push(format!("internal page {no}: separators out of order"));
                }
                children.extend(seps.iter().map(|&(key, child)| (child, key)));
            }
            match (page.high, page.sibling) {
                (None, 0) => break,
                (Some(high), sibling) if sibling != 0 && high > low => {
                    low = high;
                    no = sibling;
                }
                (high, sibling) => {
                    problems.push(format!(
                        "page {no}: high fence {high:?} with sibling {sibling}"
                    ));
                    break;
                }
            }
            if count > layout.page_capacity {
                problems.push(format!("level {level}: sibling chain loops"));
                break;
            }
        }
        if let Some(mut refs) = expected.take() {
            refs.sort_unstable();
            let mut pages = seen.clone();
            pages.sort_unstable();
            if refs != pages {
                let differ: Vec<_> = refs
                    .iter()
                    .filter(|r| !pages.contains(r))
                    .chain(pages.iter().filter(|p| !refs.contains(p)))
                    .take(4)
                    .collect();
                problems.push(format!(
                    "level {level}: {} pages linked, {} referenced by the level above (or with \
                     other fences); (page, low) pairs in one but not the other: {differ:?}",
                    pages.len(),
                    refs.len()
                ));
            }
        }
        per_level.push(count);
        leftmost = children.first().map_or(0, |c| c.0);
        expected = Some(children);
        if level > 0 && leftmost == 0 {
            problems.push(format!("level {level}: no children"));
            break;
        }
    }
    per_level.reverse();
    report.pages_per_level = per_level;
    let mut locks = vec![0u8; (8 * layout.lock_words) as usize];
    for (i, chunk) in locks.chunks_mut(1 << 20).enumerate() {
        let at = layout.lock_addr((i as u64) << 17);
        ep.read(at, chunk)?;
    }
    let held = locks
        .chunks_exact(8)
        .filter(|w| w.iter().any(|&b| b != 0))
        .count();
    if held > 0 {
        problems.push(format!("{held} lock word(s) held"));
    }
    if layout.has_values() {
        report.values = Some(check_values(ep, &layout, &refs, problems)?);
    }
    Ok(report)
}

/// Checks the blocks `refs` (every leaf entry) name, and what the value region holds.
fn check_values<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    refs: &[(u64, u64)],
    problems: &mut Vec<String>,
) -> Result<leaf_store::ValueSpace, TreeError> {
    let handed_out = ep.read_word(layout.value_chunk_word_addr())?;
    if handed_out > layout.value_chunks() {
        problems.push(format!(
            "value chunk word {handed_out} past the region's {} chunks",
            layout.value_chunks()
        ));
    }
    let claimed = handed_out.min(layout.value_chunks());
    let mut space = leaf_store::ValueSpace {
        chunks: layout.value_chunks(),
        chunks_claimed: claimed,
        chunks_owned: claimed,
        claimed_bytes: claimed * layout.value_chunk_bytes,
        ..leaf_store::ValueSpace::default()
    };
    let mut offsets: Vec<u64> = Vec::with_capacity(refs.len());
    let mut buf = Vec::new();
    for &(key, raw) in refs {
        let value = ValueRef::from_raw(raw);
        let Some(class) = class_for(value.len()) else {
            problems.push(format!("key {key}: a value of {} bytes", value.len()));
            continue;
        };
        let (offset, size) = (value.offset(), CLASS_BYTES[class]);
        let chunk = offset / layout.value_chunk_bytes.max(1);
        if chunk >= claimed || offset + size > (chunk + 1) * layout.value_chunk_bytes {
            problems.push(format!(
                "key {key}: its block at +{offset} lies outside the chunks handed out"
            ));
            continue;
        }
        buf.clear();
        buf.resize(value.read_bytes() as usize, 0);
        ep.read(layout.block_addr(value), &mut buf)?;
        if let Err(why) = check_block(&buf, key, value) {
            problems.push(format!("key {key}: its block at +{offset}: {why:?}"));
        }
        offsets.push(offset);
        space.blocks += 1;
        space.live_bytes += value.len();
        space.block_bytes += size;
    }
    offsets.sort_unstable();
    if let Some(w) = offsets.windows(2).find(|w| w[0] == w[1]) {
        problems.push(format!("two keys name the block at +{}", w[0]));
    }
    Ok(space)
}
