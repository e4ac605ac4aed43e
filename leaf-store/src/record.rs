//! Model records: one slot's model, leaf table and synonym leaf table.

use learned_model::{LeafModel, ModelParams};

use crate::{LeafTableEntry, ModelHeader, SLT_SLOTS, le_word};

/// Where the parts of a model record lie, relative to its start.
///
/// ```text
/// word 0  header word (ModelHeader)        ← every read batch re-reads it (freshness)
/// word 1  slot id
/// word 2  the slot's first key (its owned range starts here)
/// word 3  trained leaves n
/// word 4  model bytes m (a multiple of 8)
/// word 5  checksum: XXH3-64 of words 1..5 and 6, the model and the pivots (the immutable part)
/// word 6  the slot's last key (v4; inclusive): the record serves [first key, last key]; a
///         compute node routed here for a larger key knows its slot directory is stale
/// word 7  reserved (0)
/// 64                model: `learned_model::LeafModel` encoding (m bytes, itself checksummed)
/// 64 + m            pivots: n words, the smallest key of each trained leaf at training time
/// 64 + m + 8n       LT: n entries (LeafTableEntry; CASed by compute nodes to lock and link)
/// 64 + m + 16n      SLT: 256 entries; slot 0 unused (its count lives in the header word)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    /// Trained leaves.
    pub leaves: u64,
    /// Model encoding bytes.
    pub model_bytes: u64,
}

/// Bytes of a record's fixed part.
pub const RECORD_FIXED_BYTES: u64 = 64;

impl RecordLayout {
    /// Offset of the header word.
    pub const HEADER: u64 = 0;

    /// Offset of the model encoding.
    pub fn model(&self) -> u64 {
        RECORD_FIXED_BYTES
    }

    /// Offset of the pivots.
    pub fn pivots(&self) -> u64 {
        RECORD_FIXED_BYTES + self.model_bytes
    }

    /// Offset of LT entry `leaf`.
    pub fn lt_entry(&self, leaf: u64) -> u64 {
        self.pivots() + 8 * self.leaves + 8 * leaf
    }

    /// Offset of SLT entry `slot` (1..=255).
    pub fn slt_entry(&self, slot: u64) -> u64 {
        self.pivots() + 16 * self.leaves + 8 * slot
    }

    /// Total bytes.
    pub fn total(&self) -> u64 {
        self.slt_entry(SLT_SLOTS as u64)
    }
}

/// A decoded model record.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRecord {
    /// The header word.
    pub header: ModelHeader,
    /// The model slot.
    pub slot: u64,
    /// The slot's first key.
    pub first_key: u64,
    /// The last key the record serves (inclusive): the next slot's first key minus one, or the
    /// node's last key. A split lowers it; nothing raises it.
    pub last_key: u64,
    /// The model over the trained leaves.
    pub model: LeafModel,
    /// Smallest key of each trained leaf at training time.
    pub pivots: Vec<u64>,
    /// One entry per trained leaf.
    pub lt: Vec<LeafTableEntry>,
    /// All 256 SLT entries (entry 0 unused). A new record has them all
    /// [`LeafTableEntry::FREED`] ([`unclaimed_slt`]).
    pub slt: Vec<LeafTableEntry>,
}

/// The SLT of a record as it is built: every entry [`LeafTableEntry::FREED`], so that a slot a
/// split claims (its `slot_use` FAA) and never writes — its writer died or failed first — reads
/// as "handed out, holds no leaf" rather than as leaf 0 unlinked, which recovery's searches by
/// leaf number and `verify` could take for a real leaf.
pub fn unclaimed_slt() -> Vec<LeafTableEntry> {
    vec![LeafTableEntry::FREED; SLT_SLOTS]
}

fn checksum(fixed: &[u8], model: &[u8], pivots: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&fixed[8..40]);
    h.update(&fixed[48..56]);
    h.update(model);
    h.update(pivots);
    h.digest()
}

/// The keys a chain serves, inclusive, in a record serving `record` (`[first key, last key]`):
/// from its trained leaf's pivot (the record's first key for the `first` chain) to just below the
/// next trained leaf's pivot (`next`; `None` for the last chain: the record's last key).
pub fn chain_range(record: (u64, u64), first: bool, pivot: u64, next: Option<u64>) -> (u64, u64) {
    let lo = if first { record.0 } else { pivot };
    let hi = next.map_or(record.1, |next| next.saturating_sub(1));
    (lo, hi)
}

impl ModelRecord {
    /// The record's layout.
    pub fn layout(&self) -> RecordLayout {
        RecordLayout {
            leaves: self.lt.len() as u64,
            model_bytes: self.model.encode().len() as u64,
        }
    }

    /// Encodes the record (the model encoding is padded to a multiple of 8 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut model = self.model.encode();
        model.resize(model.len().next_multiple_of(8), 0);
        let n = self.lt.len();
        let mut out = Vec::with_capacity(64 + model.len() + 16 * n + 8 * SLT_SLOTS);
        for w in [
            self.header.raw(),
            self.slot,
            self.first_key,
            n as u64,
            model.len() as u64,
            0,
            self.last_key,
            0,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&model);
        for p in &self.pivots {
            out.extend_from_slice(&p.to_le_bytes());
        }
        let sum = checksum(&out[..64], &model, &out[64 + model.len()..]);
        out[40..48].copy_from_slice(&sum.to_le_bytes());
        for e in self.lt.iter().chain(&self.slt) {
            out.extend_from_slice(&e.raw().to_le_bytes());
        }
        out
    }

    /// The entries of trained leaf `leaf`'s chain, in chain order: its LT entry (lock bit clear),
    /// then its synonyms through the SLT. An error names what is wrong: no such leaf, a pointer
    /// to an SLT slot beyond `slot_use` or marked FREED, or a cycle.
    pub fn chain_entries(&self, leaf: usize) -> Result<Vec<LeafTableEntry>, String> {
        let mut entry = self
            .lt
            .get(leaf)
            .ok_or_else(|| format!("no trained leaf {leaf}"))?
            .unlocked();
        let mut chain = vec![entry];
        while entry.synonym_ptr() != 0 {
            let next = u64::from(entry.synonym_ptr());
            if next > self.header.slot_use()
                || next as usize >= SLT_SLOTS
                || self.slt[next as usize].is_freed()
            {
                return Err(format!(
                    "leaf {leaf}'s chain points at unused SLT slot {next}"
                ));
            }
            if chain.len() >= SLT_SLOTS {
                return Err(format!("leaf {leaf}'s chain has a cycle"));
            }
            entry = self.slt[next as usize];
            chain.push(entry);
        }
        Ok(chain)
    }

    /// The keys trained leaf `leaf`'s chain serves, inclusive (see [`chain_range`]).
    pub fn chain_range(&self, leaf: usize) -> (u64, u64) {
        let pivot = self.pivots.get(leaf).copied().unwrap_or(self.first_key);
        let next = self.pivots.get(leaf + 1).copied();
        chain_range((self.first_key, self.last_key), leaf == 0, pivot, next)
    }

    /// The leaves SLT slots in use name (not FREED) that no chain links: a split's new leaf
    /// between its SLT entry and its link (or stopped there).
    pub fn unlinked_synonyms(&self) -> Vec<u64> {
        let linked: std::collections::HashSet<u64> = (0..self.lt.len())
            .filter_map(|i| self.chain_entries(i).ok())
            .flatten()
            .map(|e| e.leaf_num())
            .collect();
        let used = (self.header.slot_use() as usize).min(SLT_SLOTS - 1);
        self.slt[1..=used]
            .iter()
            .filter(|e| !e.is_freed() && !linked.contains(&e.leaf_num()))
            .map(|e| e.leaf_num())
            .collect()
    }

    /// The layout announced by a record's fixed part (its first 64 bytes), checked for sanity
    /// against `max_bytes`, the most the record may occupy.
    pub fn layout_of(fixed: &[u8], max_bytes: u64) -> Result<RecordLayout, String> {
        if fixed.len() < RECORD_FIXED_BYTES as usize {
            return Err("fixed part shorter than 64 bytes".into());
        }
        let layout = RecordLayout {
            leaves: le_word(fixed, 3),
            model_bytes: le_word(fixed, 4),
        };
        let total = layout
            .leaves
            .checked_mul(16)
            .and_then(|b| b.checked_add(layout.model_bytes))
            .and_then(|b| b.checked_add(RECORD_FIXED_BYTES + 8 * SLT_SLOTS as u64));
        if layout.leaves == 0
            || !layout.model_bytes.is_multiple_of(8)
            || total.is_none_or(|t| t > max_bytes)
        {
            return Err(format!(
                "impossible sizes ({} leaves, {} model bytes)",
                layout.leaves, layout.model_bytes
            ));
        }
        Ok(layout)
    }

    /// Decodes a whole record and checks it against the pool's ε and δ.
    pub fn decode(bytes: &[u8], params: ModelParams) -> Result<Self, String> {
        let layout = Self::layout_of(bytes, bytes.len() as u64)?;
        if bytes.len() as u64 != layout.total() {
            return Err("record length does not match its sizes".into());
        }
        let n = layout.leaves as usize;
        let (fixed, rest) = bytes.split_at(RECORD_FIXED_BYTES as usize);
        let (model_bytes, rest) = rest.split_at(layout.model_bytes as usize);
        let (pivot_bytes, rest) = rest.split_at(8 * n);
        if checksum(fixed, model_bytes, pivot_bytes) != le_word(fixed, 5) {
            return Err("checksum mismatch".into());
        }
        if model_bytes.len() < learned_model::serial::HEADER_LEN {
            return Err("model shorter than its header".into());
        }
        // The model encoding knows its own length; the padding after it is zero.
        let model_len = learned_model::serial::HEADER_LEN
            + usize::try_from(le_word(model_bytes, 6)).map_err(|_| "model length overflows")?;
        let model = LeafModel::decode(model_bytes.get(..model_len).ok_or("model truncated")?)
            .map_err(|e| format!("model: {e}"))?;
        if model.params() != params || model.leaves() != layout.leaves {
            return Err("model parameters or leaf count differ from the pool's".into());
        }
        let words = |b: &[u8]| (0..b.len() / 8).map(|i| le_word(b, i)).collect::<Vec<_>>();
        let entries = words(rest)
            .into_iter()
            .map(LeafTableEntry::from_raw)
            .collect::<Vec<_>>();
        let (lt, slt) = entries.split_at(n);
        Ok(Self {
            header: ModelHeader::from_raw(le_word(fixed, 0)),
            slot: le_word(fixed, 1),
            first_key: le_word(fixed, 2),
            last_key: le_word(fixed, 6),
            model,
            pivots: words(pivot_bytes),
            lt: lt.to_vec(),
            slt: slt.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ModelRecord {
        let params = ModelParams::new(4, 4).expect("params");
        let keys: Vec<u64> = (0..40).map(|k| k * 1000 + 7).collect();
        let model = LeafModel::train_filled(params, &keys, 3).expect("train");
        let leaves = model.leaves();
        ModelRecord {
            header: ModelHeader::new(3).with_slot_use(2),
            slot: 9,
            first_key: 5,
            last_key: 1 << 40,
            model,
            pivots: keys.chunks(3).map(|c| c[0]).collect(),
            lt: (0..leaves)
                .map(|i| LeafTableEntry::new(100 + i).expect("fits"))
                .collect(),
            slt: (0..SLT_SLOTS as u64)
                .map(|i| LeafTableEntry::new(i).expect("fits"))
                .collect(),
        }
    }

    #[test]
    fn records_round_trip_and_match_their_layout() {
        let r = record();
        let bytes = r.encode();
        let layout = r.layout();
        assert_eq!(bytes.len() as u64, layout.total());
        let decoded = ModelRecord::decode(&bytes, r.model.params()).expect("decode");
        assert_eq!(decoded, r);
        let entry = |off: u64| {
            u64::from_le_bytes(bytes[off as usize..off as usize + 8].try_into().expect("8"))
        };
        assert_eq!(entry(layout.lt_entry(2)), r.lt[2].raw());
        assert_eq!(entry(layout.slt_entry(7)), r.slt[7].raw());
        assert_eq!(entry(layout.pivots() + 8), r.pivots[1]);
    }

    #[test]
    fn chains_are_walked_and_bad_pointers_named() {
        let mut r = record();
        r.header = ModelHeader::new(0).with_slot_use(3);
        r.lt[0] = r.lt[0].with_synonym(2).locked();
        r.slt[2] = LeafTableEntry::new(500).expect("fits").with_synonym(1);
        r.slt[1] = LeafTableEntry::new(501).expect("fits");
        let chain = r.chain_entries(0).expect("valid chain");
        assert_eq!(
            chain.iter().map(|e| e.leaf_num()).collect::<Vec<_>>(),
            vec![100, 500, 501]
        );
        assert!(
            !chain[0].is_locked(),
            "the lock bit is not part of the chain"
        );
        assert!(r.chain_entries(99).is_err());
        r.slt[1] = r.slt[1].with_synonym(4);
        assert!(
            r.chain_entries(0)
                .unwrap_err()
                .contains("unused SLT slot 4"),
            "beyond slot_use"
        );
        r.slt[1] = r.slt[1].with_synonym(3);
        r.slt[3] = LeafTableEntry::FREED;
        assert!(
            r.chain_entries(0)
                .unwrap_err()
                .contains("unused SLT slot 3"),
            "a freed slot"
        );
        r.slt[1] = r.slt[1].with_synonym(2);
        assert!(r.chain_entries(0).unwrap_err().contains("cycle"));
    }

    #[test]
    fn damaged_immutable_parts_are_rejected_and_mutable_parts_are_not_covered() {
        let r = record();
        let bytes = r.encode();
        let layout = r.layout();
        let params = r.model.params();
        for offset in [8, 16, 50, 70, layout.pivots() as usize + 3] {
            let mut bad = bytes.clone();
            bad[offset] ^= 0x10;
            assert!(
                ModelRecord::decode(&bad, params).is_err(),
                "flip at {offset} accepted"
            );
        }
        // LT entries change under the checksum (locks, links): still decodable.
        let mut locked = bytes.clone();
        locked[layout.lt_entry(0) as usize + 7] |= 0x80;
        assert!(ModelRecord::decode(&locked, params).is_ok_and(|d| d.lt[0].is_locked()));
        assert!(ModelRecord::decode(&bytes[..bytes.len() - 8], params).is_err());
        assert!(ModelRecord::decode(&bytes, ModelParams::new(5, 4).expect("params")).is_err());
    }
}
