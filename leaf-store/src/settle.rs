//! What a writer leaves for its recovery, and how recovery finishes it: defined once, for the
//! writer (`index-core`'s split and unlink), a live store settling a lock its own retired client
//! may have left (`index-core`'s self-recovery), and the memory node recovering a dead member's
//! locks (`retrainer`'s roll-forward and value settling). The chains themselves are finished by
//! the repair rule ([`crate::repair`], [`crate::redo::plan_repair`]); this module covers the
//! words beside them.
//!
//! Invariant: each step below is written by the writer with the function recovery decodes it
//! with, so a change to what a word means is one change here.
//!
//! - **The freed mark of an unlinked leaf.** An unlink links the emptied synonym leaf around,
//!   then marks its SLT slot freed *naming the leaf* ([`freed_mark`]), so the retraining that
//!   rebuilds the record hands the leaf out again. A writer stopped between the two leaves the
//!   slot naming the leaf unfreed while no chain links it: recovery finds that slot
//!   ([`unmarked_slot`]) through the writer's unlink word (a [`crate::members::leaf_word`] of the
//!   leaf) and writes the same mark.
//! - **The value free word.** A write replacing a byte value first writes the replaced reference
//!   in the member's free word, frees the replaced block after the leaves, then clears the word.
//!   Recovery frees the block the word names when no leaf names it any more
//!   ([`replaced_block_state`]), then clears the word.

use rdma_transport::RemoteAddr;

use crate::value::{ValueRef, ValueRegion, class_for};

/// The steps of the batch that ends a write, in the one order a writer places them (a step may be
/// absent; none comes before one listed above it). WRITEs land in order and the fenced ones wait
/// for the verbs before them, so a writer stopped anywhere leaves a prefix of these, and each
/// prefix is one recovery finishes:
///
/// | the writer stopped after … | the chain and words show … | recovery |
/// | --- | --- | --- |
/// | [`Step::ValueBlock`] | a new value block no leaf names; the free word names the replaced one | the block is given back; the replaced one stays (a leaf names it) |
/// | [`Step::Leaves`] | new leaf images (a split's new leaf claiming its keys, unlinked; an unlink's emptied leaf; a rewrite whole), the unlink word set | a rewrite: nothing; a split's claim withdrawn ([`crate::redo::plan_repair`]) |
/// | [`Step::Link`] | a split's new leaf linked, the split leaf still holding its keys; an unlinked leaf out of its chain | the split leaf trimmed ([`crate::repair`]); the unlinked leaf's slot marked ([`unmarked_slot`], [`freed_mark`]) |
/// | [`Step::FreedMark`] | the unlinked leaf's slot marked freed | nothing more |
/// | [`Step::Bump`] | the header bumped: readers of older tables refresh | the repair bumps again (idempotent) |
/// | [`Step::Shrink`] | the split leaf shrunk (and the new key in place) | nothing more |
/// | [`Step::ClearWord`] | the box slot or unlink word cleared | nothing more |
/// | [`Step::ValueFree`] | the replaced block freed, the free word cleared | nothing more |
/// | [`Step::Unlock`] | the lock released | nothing (the write is whole) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// The value free word naming the block being replaced, the new block, its state byte.
    ValueBlock,
    /// Leaf images and words written before the link: rewrites in place (through a redo leaf),
    /// a split's new leaf and its SLT entry, an unlink's emptied leaf, the unlink word.
    Leaves,
    /// The CAS that links a leaf in (or around) the held LT entry. (An unlink deeper in the chain
    /// links around its leaf by a WRITE of the previous SLT entry, the last of its leaf WRITEs.)
    Link,
    /// An SLT slot marked freed: an unlinked leaf's ([`freed_mark`]), or a claimed slot left
    /// unused.
    FreedMark,
    /// The header bump of a structural change.
    Bump,
    /// The split leaf's shrunken image, and the new leaf's second image (fenced behind the bump).
    Shrink,
    /// The client's box slot or unlink word cleared.
    ClearWord,
    /// The replaced value block freed, the free word cleared.
    ValueFree,
    /// The unlock CAS.
    Unlock,
}
use crate::{LeafTableEntry, MAX_SYNONYMS, ModelRecord};

/// The WRITE that marks SLT slot `slot` of the record at `record_addr` (`record`'s layout)
/// freed, naming leaf `leaf`: its address and bytes.
pub fn freed_mark(
    record_addr: RemoteAddr,
    record: crate::RecordLayout,
    slot: u64,
    leaf: u64,
) -> (RemoteAddr, [u8; 8]) {
    (
        record_addr.saturating_add(record.slt_entry(slot)),
        LeafTableEntry::freed(leaf).raw().to_le_bytes(),
    )
}

/// The WRITE that marks SLT slot `slot` of the record at `record_addr` (`record`'s layout), claimed
/// by a split that will not use it, [`LeafTableEntry::FREED`]: its address and bytes.
pub fn unused_mark(
    record_addr: RemoteAddr,
    record: crate::RecordLayout,
    slot: u64,
) -> (RemoteAddr, [u8; 8]) {
    (
        record_addr.saturating_add(record.slt_entry(slot)),
        LeafTableEntry::FREED.raw().to_le_bytes(),
    )
}

/// The used SLT slot of `record` that still names leaf `gone` and is not marked freed: where an
/// unlink that linked `gone` around stopped before its freed mark.
pub fn unmarked_slot(record: &ModelRecord, gone: u64) -> Option<u64> {
    let used = record.header.slot_use().min(MAX_SYNONYMS);
    (1..=used).find(|&s| {
        let entry = record.slt[s as usize];
        !entry.is_freed() && entry.leaf_num() == gone
    })
}

/// The state byte to mark free for a value free word holding `word` (a replaced block's
/// reference), if the block it names is in `region` and no leaf names it any more (`named`: is
/// a block at this region offset named by a leaf).
pub fn replaced_block_state(
    region: &ValueRegion,
    word: u64,
    named: impl Fn(u64) -> bool,
) -> Option<RemoteAddr> {
    if word == 0 {
        return None;
    }
    let value = ValueRef::from_raw(word);
    if named(value.offset()) {
        return None;
    }
    state_of(region, value)
}

/// The state byte of the block `value` names, if it lies on a block of `region`.
pub fn state_of(region: &ValueRegion, value: ValueRef) -> Option<RemoteAddr> {
    let class = class_for(value.len())?;
    let (chunk, _, index) = region.locate(value.offset(), |_| Some(class))?;
    Some(region.state_addr(chunk, index))
}

#[cfg(test)]
mod tests {
    use learned_model::{LeafModel, ModelParams};

    use super::*;
    use crate::{ModelHeader, SLT_SLOTS};

    /// A record using SLT slots 1..=3: slot 1 links leaf 50, slot 2 is marked freed naming leaf
    /// 60, slot 3 names leaf 70 (unfreed); slot 4, beyond `slot_use`, names leaf 80.
    fn record() -> ModelRecord {
        let params = ModelParams::new(4, 4).expect("params");
        let keys: Vec<u64> = (0..12).map(|k| k * 100).collect();
        let model = LeafModel::train_filled(params, &keys, 3).expect("train");
        let mut slt: Vec<LeafTableEntry> = vec![LeafTableEntry::default(); SLT_SLOTS];
        slt[1] = LeafTableEntry::new(50).expect("fits");
        slt[2] = LeafTableEntry::freed(60);
        slt[3] = LeafTableEntry::new(70).expect("fits");
        slt[4] = LeafTableEntry::new(80).expect("fits");
        ModelRecord {
            header: ModelHeader::new(1).with_slot_use(3),
            slot: 0,
            first_key: 0,
            last_key: 1 << 40,
            lt: (0..model.leaves())
                .map(|i| LeafTableEntry::new(i).expect("fits"))
                .collect(),
            model,
            pivots: keys.chunks(3).map(|c| c[0]).collect(),
            slt,
        }
    }

    #[test]
    fn recovery_finds_the_slot_an_unlink_did_not_mark_and_writes_the_writers_mark() {
        let record = record();
        assert_eq!(unmarked_slot(&record, 70), Some(3));
        assert_eq!(unmarked_slot(&record, 50), Some(1));
        // Marked already, or beyond the slots in use: nothing to finish.
        assert_eq!(unmarked_slot(&record, 60), None);
        assert_eq!(unmarked_slot(&record, 80), None);
        let addr = RemoteAddr::new(2, 4096).expect("addr");
        let (at, bytes) = freed_mark(addr, record.layout(), 3, 70);
        assert_eq!(at, addr.saturating_add(record.layout().slt_entry(3)));
        let written = LeafTableEntry::from_raw(u64::from_le_bytes(bytes));
        assert!(written.is_freed());
        assert_eq!(written.freed_leaf(), Some(70));
        // A claim a split gives up names no leaf.
        let (at, bytes) = unused_mark(addr, record.layout(), 4);
        assert_eq!(at, addr.saturating_add(record.layout().slt_entry(4)));
        assert_eq!(
            LeafTableEntry::from_raw(u64::from_le_bytes(bytes)),
            LeafTableEntry::FREED
        );
    }

    #[test]
    fn a_replaced_block_is_freed_only_when_no_leaf_names_it() {
        let region = ValueRegion::new(1, 0, 1 << 16, 1024).expect("region");
        let chunk = 0;
        let class = class_for(40).expect("a class");
        let offset = region.block_offset(chunk, class, 2);
        let word = ValueRef::new(offset, 40).expect("reference").raw();
        let state = replaced_block_state(&region, word, |_| false);
        assert_eq!(state, Some(region.state_addr(chunk, 2)));
        assert_eq!(replaced_block_state(&region, word, |o| o == offset), None);
        // An empty word names nothing.
        assert_eq!(replaced_block_state(&region, 0, |_| false), None);
    }
}
