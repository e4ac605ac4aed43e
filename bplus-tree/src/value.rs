//! Byte values in the B+-tree baseline: where a compute node's value blocks come from, and when
//! a freed one is used again.
//!
//! The baseline stores byte values as ROLEX does (ARCHITECTURE §12), so that `rolex compare`
//! measures the same bytes and round trips: a leaf entry's value word is a
//! [`leaf_store::value::ValueRef`] to a block of `leaf_store`'s format (key, length, checksum
//! seeded with the block's offset, value) in the pool's value region; a writer WRITEs the block
//! in the batch that takes the leaf's lock, so it lands before the leaf entry that names it; a
//! reader READs the leaf, then the block, and checks the block's key, length and checksum.
//!
//! **Invariant.** A block is carved by one compute node from a chunk it took with one FAA of
//! the pool's value chunk word, and only that compute node allocates in it; a block some leaf
//! named is used again only [`REUSE_GRACE`] after the write that dropped the reference, and a
//! block no leaf ever named may be used again at once.
//!
//! What the baseline does not do, unlike ROLEX: it has no retirement epochs, so the grace is a
//! time, not a proof. A reader paused longer than the grace between its leaf READ and its block
//! READ can find the block used again: for another key or a torn write, the block check sends it
//! back to the leaf (never another key's bytes, never torn bytes); for the same key, it returns
//! that key's newer value, possibly before the leaf names it. It frees nothing after a failed
//! write (the block may be named) and gives no chunk back: a compute node that goes away leaks
//! its free blocks. The B+-tree has no crash recovery either (a writer that dies holding a lock
//! leaves it held).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use leaf_store::value::{CLASS_BYTES, CLASSES};

/// How long a block some leaf named waits, once freed, before its compute node uses it again.
pub const REUSE_GRACE: Duration = Duration::from_millis(20);

/// One compute node's value blocks on one memory node: the unused tail of its chunks, and the
/// blocks it freed, per size class.
#[derive(Debug)]
pub(crate) struct NodeValues {
    /// Per class: `(next, end)` byte ranges of the region still to carve, newest last.
    open: Vec<Vec<(u64, u64)>>,
    /// Per class: freed blocks, oldest first; `None` for a block no leaf ever named (ready now).
    free: Vec<VecDeque<(u64, Option<Instant>)>>,
    /// Chunks this compute node took.
    pub(crate) chunks: u64,
}

impl NodeValues {
    pub(crate) fn new() -> Self {
        Self {
            open: vec![Vec::new(); CLASSES],
            free: vec![VecDeque::new(); CLASSES],
            chunks: 0,
        }
    }

    /// A block of `class` (its offset in the region), if one is free past its grace or carvable
    /// from a chunk taken before; `None` if a chunk must be taken first.
    pub(crate) fn take(&mut self, class: usize, now: Instant) -> Option<u64> {
        let free = &mut self.free[class];
        if let Some(&(offset, freed)) = free.front()
            && freed.is_none_or(|t| now.saturating_duration_since(t) >= REUSE_GRACE)
        {
            free.pop_front();
            return Some(offset);
        }
        let size = CLASS_BYTES[class];
        let open = &mut self.open[class];
        while let Some(range) = open.last_mut() {
            if range.0 + size <= range.1 {
                let at = range.0;
                range.0 += size;
                return Some(at);
            }
            open.pop();
        }
        None
    }

    /// Adds a chunk (`start..start + bytes` of the region) to carve blocks of `class` from.
    pub(crate) fn add_chunk(&mut self, class: usize, start: u64, bytes: u64) {
        self.chunks += 1;
        self.open[class].push((start, start + bytes));
    }

    /// Frees block `offset` of `class`: `Some(when)` if a leaf named it (it waits the grace),
    /// `None` if none ever did.
    pub(crate) fn free(&mut self, class: usize, offset: u64, freed: Option<Instant>) {
        match freed {
            None => self.free[class].push_front((offset, None)),
            Some(_) => self.free[class].push_back((offset, freed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_block_waits_the_grace_and_an_unnamed_one_does_not() {
        let class = 3;
        let size = CLASS_BYTES[class];
        let mut values = NodeValues::new();
        let t0 = Instant::now();
        assert_eq!(values.take(class, t0), None, "no chunk yet");
        values.add_chunk(class, 4096, 2 * size);
        let a = values.take(class, t0).unwrap();
        let b = values.take(class, t0).unwrap();
        assert_eq!((a, b), (4096, 4096 + size));
        assert_eq!(values.take(class, t0), None, "the chunk is carved");
        values.free(class, a, Some(t0));
        assert_eq!(values.take(class, t0), None, "within the grace");
        assert_eq!(values.take(class, t0 + REUSE_GRACE), Some(a));
        values.free(class, b, None);
        assert_eq!(values.take(class, t0), Some(b), "never named: at once");
        assert_eq!(values.chunks, 1);
    }
}
