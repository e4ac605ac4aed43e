//! The value region, as the memory node keeps it (ARCHITECTURE §12): the reuse horizon compute
//! nodes wait on, their requests that the epoch move, and the chunks of members that are gone.
//!
//! **Invariant.** The horizon word never exceeds the smallest epoch announced by a member that
//! is alive, or dead and not yet recovered: a block a compute node saw free while the epoch word
//! showed `s` is reused only once no operation that may have read its reference is running. A
//! chunk is given back (unowned) only once its owner is gone for good — its lease entry free or
//! taken by a later incarnation, so fenced and rolled forward if it died — and only after the
//! blocks it marked in use that no leaf names are marked free.

use std::collections::HashSet;

use leaf_store::members::{Lease, MEMBER_TAGS, MemberState, MemberTable};
use leaf_store::value::{ChunkWord, STATE_FREE, STATE_USED, ValueRef};
use rdma_transport::Endpoint;

use super::*;

/// What the worker remembers of its value region.
#[derive(Debug, Default)]
pub(super) struct ValueWatch {
    /// The horizon last written.
    horizon: u64,
    /// The lease words at the last pass over the chunk table.
    leases: Vec<u64>,
    /// Blocks no leaf named, marked free by passes so far.
    pub(super) blocks_freed: u64,
    /// Chunks given back so far.
    pub(super) chunks_released: u64,
}

impl<E: Endpoint> Retrainer<E> {
    /// Publishes `oldest` (the smallest epoch every member that may still run an operation has
    /// announced) as the value region's reuse horizon.
    pub(super) fn publish_horizon(&mut self, oldest: u64) -> Result<(), RetrainError> {
        let Some(region) = self.layout.values() else {
            return Ok(());
        };
        if oldest > self.values.horizon {
            self.ep.write_word(region.horizon_addr(), oldest)?;
            self.values.horizon = oldest;
        }
        Ok(())
    }

    /// Whether a compute node asked for the epoch to move (blocks wait on it).
    pub(super) fn reuse_wanted(&mut self) -> Result<bool, RetrainError> {
        match self.layout.values() {
            Some(region) => Ok(self.ep.read_word(region.wanted_addr())? != 0),
            None => Ok(false),
        }
    }

    /// Clears the request once the epoch moved.
    pub(super) fn clear_reuse_wanted(&mut self) -> Result<(), RetrainError> {
        if let Some(region) = self.layout.values() {
            self.ep.write_word(region.wanted_addr(), 0)?;
        }
        Ok(())
    }

    /// A dead member's value free words, while its locks are still held (after its chains are
    /// repaired): a block its write was replacing that no leaf names any more is marked free;
    /// then the words are cleared. Returns how many blocks were freed.
    pub(super) fn settle_value_frees(
        &mut self,
        table: &MemberTable,
        tag: u8,
    ) -> Result<u64, RetrainError> {
        let Some(region) = self.layout.values() else {
            return Ok(0);
        };
        let words = table.read_free_words(&mut self.ep, tag)?;
        if words.iter().all(|&w| w == 0) {
            return Ok(0);
        }
        // The key a word names is under the dead member's lock: its chain is final.
        let named: HashSet<u64> = leaf_store::read_all_entries_live(&mut self.ep, &self.layout)?
            .into_iter()
            .map(|(_, raw)| ValueRef::from_raw(raw).offset())
            .collect();
        let mut freed = 0;
        for &word in &words {
            let state = leaf_store::settle::replaced_block_state(&region, word, |offset| {
                named.contains(&offset)
            });
            if let Some(state) = state {
                self.ep.write(state, &[STATE_FREE])?;
                freed += 1;
            }
        }
        // Cleared last: a worker cut short before this does it all again (the member's announced
        // epoch holds reuse back until its entry is freed, so no block was reused meanwhile).
        self.ep
            .write(table.free_word_addr(tag, 0), &vec![0u8; 8 * words.len()])?;
        for index in 0..words.len() {
            leaf_store::ghost::settle_free_word(table.free_word_addr(tag, index as u64));
        }
        self.values.blocks_freed += freed;
        Ok(freed)
    }

    /// When the leases changed since the last pass: gives back the chunks whose owners are gone
    /// for good, first marking free the blocks in them that are in use and that no leaf names (a
    /// write its owner never finished). Returns how many chunks were given back.
    pub(super) fn release_departed_chunks(
        &mut self,
        leases: &[Lease],
    ) -> Result<u64, RetrainError> {
        let Some(region) = self.layout.values() else {
            return Ok(0);
        };
        let words: Vec<u64> = leases.iter().map(|l| l.raw()).collect();
        if words == self.values.leases {
            return Ok(0);
        }
        let gone = |word: ChunkWord| {
            let tag = word.tag();
            if tag == 0 || tag > MEMBER_TAGS {
                return false;
            }
            let lease = leases[usize::from(tag)];
            match lease.state() {
                MemberState::Free => true,
                MemberState::Dead => false,
                MemberState::Alive => {
                    lease.incarnation() & ((1 << 30) - 1) != u64::from(word.incarnation())
                }
            }
        };
        let claimed = self.ep.read_word(region.fresh_addr())?.min(region.chunks());
        let mut table = vec![0u8; 8 * claimed as usize];
        if claimed > 0 {
            self.ep.read(region.table_addr(), &mut table)?;
        }
        let departed: Vec<(u64, ChunkWord)> = (0..claimed)
            .map(|c| {
                (
                    c,
                    ChunkWord::from_raw(leaf_store::le_word(&table, c as usize)),
                )
            })
            .filter(|&(_, w)| gone(w))
            .collect();
        if departed.is_empty() {
            self.values.leases = words;
            return Ok(0);
        }
        // Every block a leaf names now (a walk that sees a key a split is moving: it repeats a
        // slot whose header moved). Nobody allocates in these chunks any more: their owners are
        // fenced or gone.
        let named: HashSet<u64> = leaf_store::read_all_entries_live(&mut self.ep, &self.layout)?
            .into_iter()
            .map(|(_, raw)| ValueRef::from_raw(raw).offset())
            .collect();
        let mut released = 0;
        for (chunk, word) in departed {
            if let Some(class) = word.class() {
                let mut states = vec![0u8; region.blocks_per_chunk(class) as usize];
                self.ep.read(region.states_addr(chunk), &mut states)?;
                for (index, &state) in states.iter().enumerate() {
                    let offset = region.block_offset(chunk, class, index as u64);
                    if state == STATE_USED && !named.contains(&offset) {
                        self.ep
                            .write(region.state_addr(chunk, index as u64), &[STATE_FREE])?;
                        leaf_store::ghost::reclaim_block(self.layout.node(), offset);
                        self.values.blocks_freed += 1;
                    }
                }
            }
            let at = region.chunk_word_addr(chunk);
            if self.ep.cas(at, word.raw(), word.unowned().raw())? == word.raw() {
                released += 1;
            }
        }
        self.values.chunks_released += released;
        self.values.leases = words;
        Ok(released)
    }
}
