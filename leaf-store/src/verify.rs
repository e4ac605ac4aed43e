//! `verify`: walk a whole pool and check every structural invariant.

use std::fmt;

use rdma_transport::{Endpoint, MemoryNodeInfo};

use crate::problem::Problem;
use crate::ring::RingLayout;
use crate::walk::{read_record, read_slot_table, walk_chain};
use crate::{Layout, Leaf, LeafStoreError, LeafTableEntry, MAX_SYNONYMS};

/// What [`verify`] found: the problems (none for a healthy pool) and what the pool holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Every broken invariant found (the walk goes on past each one).
    pub problems: Vec<Problem>,
    /// Model slots.
    pub slots: u64,
    /// Trained leaves over all records.
    pub trained_leaves: u64,
    /// Synonym leaves linked into chains.
    pub synonym_leaves: u64,
    /// Keys stored.
    pub keys: u64,
    /// Leaves handed out (`alloc_num`).
    pub allocated_leaves: u64,
    /// Leaves the region holds.
    pub leaf_capacity: u64,
    /// Longest chain (trained leaf plus synonyms).
    pub longest_chain: u64,
    /// Most synonym-leaf-table entries claimed by one slot, freed ones included: a slot refuses
    /// splits (`SltFull`) at 255 until it is retrained.
    pub fullest_slot: u64,
    /// Leaves holding no key.
    pub empty_leaves: u64,
    /// What the value region holds, in a pool with byte values.
    pub values: Option<crate::verify_values::ValueSpace>,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} keys in {} slots: {} trained + {} synonym leaves ({} empty, longest chain {}, fullest slot {}/255), {} of {} leaves allocated",
            self.keys,
            self.slots,
            self.trained_leaves,
            self.synonym_leaves,
            self.empty_leaves,
            self.longest_chain,
            self.fullest_slot,
            self.allocated_leaves,
            self.leaf_capacity
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
            if self.problems.len() > 20 {
                writeln!(f, "  … and {} more", self.problems.len() - 20)?;
            }
            Ok(())
        }
    }
}

/// Walks the pool on memory node `node` through `ep` and checks every structural invariant:
/// superblock, `alloc_num` within capacity, slot table order, every record's checksum and header,
/// every leaf's checksum, chains sorted and acyclic, every key inside the range its trained leaf
/// owns (`docs/ARCHITECTURE.md` §5, "Leaf ranges and ownership"), no leaf reachable twice or
/// unallocated, no lock held, no orphaned SLT slot, the ring's bounds, and in a pool with byte
/// values every value's block and every block in use (see [`crate::value`]). Meant for a quiescent
/// pool (locks held by live writers are reported).
///
/// Returns `Err` only when the pool cannot be walked at all (transport failure, no valid
/// superblock); everything else is a [`Problem`] in the report.
pub fn verify<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
) -> Result<VerifyReport, LeafStoreError> {
    let layout = Layout::attach(ep, node)?;
    let sb = *layout.superblock();
    let mut report = VerifyReport {
        slots: sb.slots,
        leaf_capacity: sb.leaf_capacity,
        ..VerifyReport::default()
    };
    let problems = &mut report.problems;

    let alloc_num = ep.read_word(layout.alloc_num_addr())?;
    let capacity = ep.read_word(layout.capacity_addr())?;
    report.allocated_leaves = alloc_num;
    if capacity != sb.leaf_capacity || alloc_num > capacity || alloc_num < sb.trained_leaves {
        problems.push(Problem::AllocNum {
            alloc_num,
            capacity,
        });
    }
    let next_free = ep.read_word(layout.model_region_addr())?;
    let region_end = sb.model_region_offset + sb.model_region_bytes;
    if next_free < sb.model_region_offset + 16 || next_free > region_end {
        problems.push(Problem::Table(format!(
            "model region's next_free {next_free} outside the region"
        )));
    }

    let table = read_slot_table(ep, &layout)?;
    report.slots = table.len() as u64;
    // Slot ids follow publication (splits append slots); their ranges follow the first keys.
    let mut order: Vec<usize> = (0..table.len()).collect();
    order.sort_by_key(|&slot| table[slot].1);
    if table.first().is_some_and(|&(_, k)| k != sb.key_lo) {
        problems.push(Problem::Table(
            "slot 0 does not start at the node's first key".into(),
        ));
    }
    if order.windows(2).any(|w| table[w[0]].1 == table[w[1]].1) {
        problems.push(Problem::Table("two slots share a first key".into()));
    }

    let mut refs: Vec<(u64, u64)> = Vec::new();
    let collect_values = layout.values().is_some();
    let mut seen = vec![0u64; usize::try_from(alloc_num.min(capacity).div_ceil(64)).unwrap_or(0)];
    for (rank, &slot) in order.iter().enumerate() {
        let (record_addr, first_key) = table[slot];
        let slot = slot as u64;
        // Keys of this slot lie in [first_key, upper]; `upper` inclusive.
        let upper = order
            .get(rank + 1)
            .map_or(sb.key_hi, |&next| table[next].1.saturating_sub(1));
        let record = match read_record(ep, &layout, slot, record_addr) {
            Ok(r) => r,
            Err(LeafStoreError::Transport(e)) => return Err(e.into()),
            Err(e) => {
                problems.push(Problem::Record {
                    slot,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let header = record.header;
        if header.is_retired() || header.is_locked() {
            problems.push(Problem::Record {
                slot,
                reason: format!("{header:?} in the slot table"),
            });
        }
        report.fullest_slot = report.fullest_slot.max(header.slot_use());
        if header.slot_use() > MAX_SYNONYMS {
            problems.push(Problem::Record {
                slot,
                reason: format!("slot_use {} beyond 255", header.slot_use()),
            });
        }
        if record.first_key != first_key {
            problems.push(Problem::Record {
                slot,
                reason: "first key differs from the slot table's".into(),
            });
        }
        if record.last_key != upper {
            problems.push(Problem::Record {
                slot,
                reason: format!(
                    "last key {} differs from the next slot's first key minus one ({upper})",
                    record.last_key
                ),
            });
        }
        let n = record.lt.len();
        if record.pivots.len() != n
            || record.pivots.windows(2).any(|w| w[0] >= w[1])
            || record.pivots.first().is_some_and(|&p| p < first_key)
            || record.pivots.last().is_some_and(|&p| p > upper)
        {
            problems.push(Problem::Record {
                slot,
                reason: "pivots not increasing inside the slot's range".into(),
            });
        }
        report.trained_leaves += n as u64;
        let mut linked = vec![false; crate::SLT_SLOTS];
        for (i, lt_entry) in record.lt.iter().enumerate() {
            let leaf = i as u64;
            if lt_entry.is_locked() {
                problems.push(Problem::LockHeld {
                    slot,
                    leaf,
                    owner: lt_entry.owner(),
                });
            }
            let lower = if i == 0 {
                first_key
            } else {
                record.pivots.get(i).copied().unwrap_or(first_key)
            };
            let high = record
                .pivots
                .get(i + 1)
                .map_or(upper, |&p| p.saturating_sub(1));
            let chain = match walk_chain(ep, &layout, &record, i) {
                Ok(chain) => chain,
                Err(LeafStoreError::Transport(e)) => return Err(e.into()),
                Err(e) => {
                    problems.push(Problem::Leaf {
                        slot,
                        leaf,
                        reason: e.to_string(),
                    });
                    continue;
                }
            };
            report.longest_chain = report.longest_chain.max(chain.len() as u64);
            report.synonym_leaves += chain.len() as u64 - 1;
            let mut previous: Option<u64> = None;
            let mut sorted = true;
            let mut claimed_to: Option<u64> = None;
            for (position, (entry, contents)) in chain.iter().enumerate() {
                let claim_problem = match contents.claim() {
                    None if !contents.is_empty() => Some("missing on a leaf holding keys".into()),
                    None => None,
                    Some((lo, hi)) if lo < lower || hi > high => Some(format!(
                        "{lo}..={hi} of leaf {} outside the chain's {lower}..={high}",
                        entry.leaf_num()
                    )),
                    Some((lo, hi)) if claimed_to.is_some_and(|to| lo <= to) => Some(format!(
                        "{lo}..={hi} of leaf {} overlaps an earlier leaf's",
                        entry.leaf_num()
                    )),
                    Some((_, hi)) => {
                        claimed_to = Some(hi);
                        None
                    }
                };
                if let Some(reason) = claim_problem {
                    problems.push(Problem::Claim { slot, leaf, reason });
                }
                let num = entry.leaf_num();
                if position > 0 {
                    // Which SLT slot led here: the previous entry's pointer.
                    let via = chain[position - 1].0.synonym_ptr() as usize;
                    linked[via] = true;
                }
                if num >= alloc_num.min(capacity) {
                    problems.push(Problem::LeafNotAllocated { leaf_num: num });
                } else {
                    let (word, bit) = ((num / 64) as usize, 1u64 << (num % 64));
                    if seen[word] & bit != 0 {
                        problems.push(Problem::LeafReachableTwice { leaf_num: num });
                    }
                    seen[word] |= bit;
                }
                if contents.is_empty() {
                    report.empty_leaves += 1;
                }
                if collect_values {
                    refs.extend_from_slice(contents.entries());
                }
                for &(key, _) in contents.entries() {
                    if previous.is_some_and(|p| p >= key) {
                        sorted = false;
                    }
                    previous = Some(key);
                    if key < lower || key > high {
                        problems.push(Problem::KeyOutsideOwner { slot, leaf, key });
                    }
                }
                report.keys += contents.len() as u64;
            }
            if !sorted {
                problems.push(Problem::ChainNotSorted { slot, leaf });
            }
        }
        for slt_slot in 1..=header.slot_use().min(MAX_SYNONYMS) {
            let freed = record.slt[slt_slot as usize].is_freed();
            if freed && linked[slt_slot as usize] {
                problems.push(Problem::Record {
                    slot,
                    reason: format!("freed SLT slot {slt_slot} is linked"),
                });
            } else if !freed && !linked[slt_slot as usize] {
                problems.push(Problem::OrphanSynonym { slot, slt_slot });
            }
        }
        // Nobody claimed these: they hold what the record was built with (read here: a decoded
        // record holds the slots in use only).
        let unclaimed = header.slot_use().min(MAX_SYNONYMS) + 1;
        if unclaimed <= MAX_SYNONYMS {
            let at = record_addr.saturating_add(record.layout().slt_entry(unclaimed));
            let mut tail = vec![0u8; 8 * (MAX_SYNONYMS + 1 - unclaimed) as usize];
            ep.read(at, &mut tail)?;
            for (i, word) in tail.chunks_exact(8).enumerate() {
                let entry = LeafTableEntry::from_raw(crate::le_word(word, 0));
                if entry != LeafTableEntry::FREED {
                    problems.push(Problem::Record {
                        slot,
                        reason: format!(
                            "SLT slot {}, past the slots in use, holds {entry:?}",
                            unclaimed + i as u64
                        ),
                    });
                }
            }
        }
    }

    // Every other allocated leaf must claim nothing.
    let leaf_size = layout.leaf_bytes() as usize;
    let allocated = alloc_num.min(capacity);
    const BATCH: u64 = 1024;
    let mut buf = vec![0u8; BATCH as usize * leaf_size];
    for first in (0..allocated).step_by(BATCH as usize) {
        let count = BATCH.min(allocated - first);
        let bytes = &mut buf[..count as usize * leaf_size];
        ep.read(layout.leaf_addr(first), bytes)?;
        for (i, leaf) in bytes.chunks_exact(leaf_size).enumerate() {
            let num = first + i as u64;
            if seen[(num / 64) as usize] & (1 << (num % 64)) != 0 {
                continue;
            }
            if let Some(claim) = Leaf::decode(num, leaf).ok().and_then(|l| l.claim()) {
                problems.push(Problem::StrayClaim {
                    leaf_num: num,
                    claim,
                });
            }
        }
    }

    let ring = RingLayout::new(layout);
    let (head, tail) = (ep.read_word(ring.head())?, ep.read_word(ring.tail())?);
    let ring_capacity = ep.read_word(ring.capacity_word())?;
    if ring_capacity != sb.ring_capacity || head > tail || tail - head > ring_capacity {
        problems.push(Problem::Ring(format!(
            "head {head}, tail {tail}, capacity {ring_capacity}"
        )));
    }
    if ep.read_word(ring.split_slot())? != 0 {
        problems.push(Problem::Ring(
            "a slot split is journaled but not published (a starting retrainer publishes it)"
                .into(),
        ));
    }
    let in_flight = ep.read_word(ring.in_flight())?;
    if in_flight != 0 {
        problems.push(Problem::Ring(format!(
            "a retraining of the record at {} is in flight or was cut short (a starting \
             retrainer repairs it)",
            rdma_transport::RemoteAddr::unpack(in_flight)
        )));
    }
    if let Some(region) = layout.values() {
        let space = crate::verify_values::check(ep, &region, &refs, &mut report.problems)?;
        report.values = Some(space);
    }
    Ok(report)
}
