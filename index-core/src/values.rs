//! A compute node's allocator of value blocks on one memory node (ARCHITECTURE §12).
//!
//! **Invariant.** A block this compute node hands out is free: never handed out before (a chunk
//! claimed fresh), or seen free in its chunk's state bytes while the retirement epoch word showed
//! `s`, by a READ issued when no operation of this compute node had it in flight, and the
//! memory node's reuse horizon has since passed `s`. Blocks are carved only from chunks this
//! compute node owns (it claimed them by CAS on the chunk table), so no other compute node hands
//! out the same block.
//!
//! **Why the horizon.** A block is freed (its state byte written free) after the leaf WRITE that
//! dropped its reference, in the same batch. A reader that read the reference before that began
//! its operation before the free, so before this compute node's READ that saw the free and
//! before the epoch word moved past `s`; every member announces an epoch above `s` only once
//! every operation it was running when it saw the word move has ended (`crate::epoch`), and
//! the memory node's horizon is the smallest epoch every member announced.
//!
//! **Why "not in flight".** A block handed to an operation is written (state byte in use, then
//! the leaf naming it) in the operation's last batch. A state READ issued while that batch may
//! still land could see the block free although a leaf is about to name it; so the blocks a
//! scan may conclude about are chosen before its READ, among blocks no running operation holds.
//! A block whose last batch failed is never concluded about (its batch may land late): it stays
//! out of this allocator for good (counted, [`NodeValues::forgotten`]).

use std::collections::VecDeque;

use leaf_store::value::{CLASSES, ChunkWord, STATE_USED, ValueRef, ValueRegion};
use rdma_transport::{Endpoint, RemoteAddr, Verb};

use crate::IndexError;
use crate::sync::MembershipMutex as Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::{Duration, Instant};

/// How many owned chunks of a class one scan READs at most.
const SCAN_CHUNKS: usize = 8;
/// How many chunks left by others one allocation that needs a chunk takes at most.
const ADOPT_CHUNKS: usize = 8;
/// How soon a class with no block in limbo is scanned again, and the chunk table read again
/// once no fresh chunk is left.
const RESCAN_AFTER: Duration = Duration::from_millis(1);

/// The state byte of the block a leaf's value word `raw` names on the pool of `layout`, if it
/// names a block of its value region.
pub(crate) fn state_of_ref(layout: &leaf_store::Layout, raw: u64) -> Option<RemoteAddr> {
    leaf_store::settle::state_of(&layout.values()?, ValueRef::from_raw(raw))
}

/// A block of the value region: chunk, size class, index in the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) chunk: u64,
    pub(crate) class: usize,
    pub(crate) index: u64,
}

/// What this compute node knows of a block of a chunk it owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Free and usable (ready, or never handed out in a fresh chunk).
    Free,
    /// Waiting in limbo for the horizon.
    Limbo,
    /// Handed to a running operation.
    InFlight,
    /// Named by a leaf, as far as this compute node knows.
    Used,
    /// Its last batch failed: never concluded about again.
    Forgotten,
}

#[derive(Debug)]
struct OwnedChunk {
    chunk: u64,
    /// Blocks never handed out since the chunk was claimed fresh start here.
    fresh_from: u64,
    held: Vec<Held>,
}

#[derive(Debug, Default)]
struct ClassSpace {
    /// Owned chunks of the class, in the order they were taken (never removed).
    chunks: Vec<OwnedChunk>,
    /// Where each owned chunk sits in `chunks`, by chunk number.
    by_chunk: std::collections::HashMap<u64, usize>,
    /// Positions in `chunks` of chunks that may still have blocks never handed out, newest
    /// last.
    with_fresh: Vec<usize>,
    /// Blocks freed and past the horizon (packed chunk << 32 | index).
    ready: Vec<u64>,
    /// Blocks of the class waiting in `Inner::limbo`.
    in_limbo: usize,
    /// The next owned chunk a scan starts at.
    cursor: usize,
    /// Owned chunks scanned, in all.
    scanned: usize,
    /// `scanned` when a scan last found a block freed or a block was last handed out.
    progress_at: usize,
    scanned_at: Option<Instant>,
}

#[derive(Debug)]
struct Inner {
    classes: Vec<ClassSpace>,
    /// Blocks seen free, with the epoch word read after they were seen.
    limbo: VecDeque<(u64, Block)>,
    horizon: u64,
    /// Unowned chunks the chunk table showed when last read, by class; index [`CLASSES`]: never
    /// carved.
    unowned: Vec<Vec<u64>>,
    /// When the chunk table was last read (`None`: never).
    table_read_at: Option<Instant>,
    fresh_exhausted: bool,
}

/// One memory node's value region as this compute node allocates in it.
#[derive(Debug)]
pub(crate) struct NodeValues {
    pub(crate) region: ValueRegion,
    owner: ChunkWord,
    tag: u8,
    epoch_addr: RemoteAddr,
    inner: Mutex<Inner>,
    forgotten: AtomicU64,
    reused: AtomicU64,
}

impl NodeValues {
    /// The allocator of member `tag` (incarnation `incarnation`) in `region`; `epoch_addr` is the
    /// memory node's retirement epoch word.
    pub(crate) fn new(
        region: ValueRegion,
        tag: u8,
        incarnation: u64,
        epoch_addr: RemoteAddr,
    ) -> Self {
        Self {
            region,
            owner: ChunkWord::new(tag, incarnation as u32, None),
            tag,
            epoch_addr,
            inner: Mutex::new(Inner {
                classes: (0..CLASSES).map(|_| ClassSpace::default()).collect(),
                limbo: VecDeque::new(),
                horizon: 0,
                unowned: vec![Vec::new(); CLASSES + 1],
                table_read_at: None,
                fresh_exhausted: false,
            }),
            forgotten: AtomicU64::new(0),
            reused: AtomicU64::new(0),
        }
    }

    /// Blocks whose last batch failed, left to the memory node.
    pub(crate) fn forgotten(&self) -> u64 {
        self.forgotten.load(Ordering::Relaxed)
    }

    /// Blocks handed out again after they were freed.
    pub(crate) fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    fn mine(&self, class: usize) -> ChunkWord {
        ChunkWord::new(self.owner.tag(), self.owner.incarnation(), Some(class))
    }

    /// The reference a block holding `len` bytes has.
    pub(crate) fn reference(&self, block: Block, len: u64) -> Option<ValueRef> {
        ValueRef::new(
            self.region
                .block_offset(block.chunk, block.class, block.index),
            len,
        )
    }

    /// The block a reference names, if it lies in a chunk this allocator owns (so its class is
    /// known locally); else `None`.
    pub(crate) fn state_addr(&self, block: Block) -> RemoteAddr {
        self.region.state_addr(block.chunk, block.index)
    }

    /// A free block of size class `class` for a running operation.
    pub(crate) fn alloc<E: Endpoint>(&self, ep: &mut E, class: usize) -> Result<Block, IndexError> {
        if self.tag == 0 {
            return Err(IndexError::Config(
                "byte values need a store that joined its memory nodes (join_members)".into(),
            ));
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (mut scanned, mut adopted) = (false, false);
        for _ in 0..8 {
            inner.promote();
            let block = inner.take_ready(class).inspect(|_| {
                self.reused.fetch_add(1, Ordering::Relaxed);
            });
            if let Some(block) = block.or_else(|| inner.take_fresh(class)) {
                let space = &mut inner.classes[class];
                space.progress_at = space.scanned;
                leaf_store::ghost::take_block(self.region.node(), self.offset(block));
                return Ok(block);
            }
            let due = inner.classes[class]
                .scanned_at
                .is_none_or(|at| at.elapsed() >= RESCAN_AFTER);
            // Blocks of the class in limbo: scanned at once, for the horizon that frees them.
            if !scanned && (due || inner.classes[class].in_limbo > 0) {
                scanned = true;
                self.scan(ep, &mut inner, class)?;
                continue;
            }
            if !adopted {
                // Chunks other compute nodes left (or bulk load filled), a few per chunk needed:
                // their free blocks wait in limbo for later allocations.
                adopted = true;
                let mut any = false;
                for _ in 0..ADOPT_CHUNKS {
                    if !self.adopt(ep, &mut inner, class)? {
                        break;
                    }
                    any = true;
                }
                if any {
                    continue;
                }
            }
            if !self.claim_blank(ep, &mut inner, class)? {
                break;
            }
        }
        Err(IndexError::ValuesExhausted {
            node: self.region.node(),
            chunks: self.region.chunks(),
        })
    }

    /// Owned chunks of `class` scanned so far, in all: what [`NodeValues::may_free`] counts from.
    pub(crate) fn scanned(&self, class: usize) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.classes[class].scanned
    }

    /// Whether waiting may yet give this compute node a block of `class` after
    /// [`IndexError::ValuesExhausted`]: some wait in limbo for the memory node's horizon, or the
    /// scans since `waiting_since` (a [`NodeValues::scanned`] count), and since one last found a
    /// block freed or a block was handed out, have not yet looked at every owned chunk of the
    /// class (with none of the class in limbo, scans are at least [`RESCAN_AFTER`] apart). False
    /// once a whole round of scans found the region full of values this compute node sees named.
    pub(crate) fn may_free(&self, class: usize, waiting_since: usize) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let space = &inner.classes[class];
        !space.ready.is_empty()
            || space.in_limbo > 0
            || space.scanned - space.progress_at.max(waiting_since) < space.chunks.len()
    }

    /// The operation holding `block` ended with a leaf naming it.
    pub(crate) fn linked(&self, block: Block) {
        self.set(block, Held::Used);
        leaf_store::ghost::put_block(self.region.node(), self.offset(block));
    }

    /// Where `block` lies in the pool.
    fn offset(&self, block: Block) -> u64 {
        self.region
            .block_offset(block.chunk, block.class, block.index)
    }

    /// The operation holding `block` ended without writing it: free again at once.
    pub(crate) fn unused(&self, block: Block) {
        leaf_store::ghost::put_block(self.region.node(), self.offset(block));
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.set(block, Held::Free) {
            inner.classes[block.class]
                .ready
                .push(block.chunk << 32 | block.index);
        }
    }

    /// The operation holding `block` failed in its last batch: the block may be named or not.
    pub(crate) fn forget(&self, block: Block) {
        leaf_store::ghost::forget_block(self.region.node(), self.offset(block));
        self.set(block, Held::Forgotten);
        self.forgotten.fetch_add(1, Ordering::Relaxed);
    }

    fn set(&self, block: Block, held: Held) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.set(block, held);
    }

    /// READs the state bytes of up to [`SCAN_CHUNKS`] owned chunks of `class`, then the epoch
    /// word and the horizon: blocks believed used that show free go to limbo, stamped with the
    /// epoch; asks the memory node to advance the epoch while limbo is not empty.
    fn scan<E: Endpoint>(
        &self,
        ep: &mut E,
        inner: &mut Inner,
        class: usize,
    ) -> Result<(), IndexError> {
        let space = &mut inner.classes[class];
        space.scanned_at = Some(Instant::now());
        let n = space.chunks.len();
        let picked: Vec<usize> = (0..n.min(SCAN_CHUNKS))
            .map(|i| (space.cursor + i) % n)
            .collect();
        space.cursor = if n == 0 {
            0
        } else {
            (space.cursor + picked.len()) % n
        };
        // Decided before the READ: only blocks no running operation holds.
        let candidates: Vec<Vec<bool>> = picked
            .iter()
            .map(|&i| {
                space.chunks[i]
                    .held
                    .iter()
                    .map(|&h| h == Held::Used)
                    .collect()
            })
            .collect();
        let per_chunk = self.region.state_bytes(class) as usize;
        let mut states = vec![0u8; per_chunk * picked.len()];
        let mut words = [0u8; 16];
        let (epoch_buf, horizon_buf) = words.split_at_mut(8);
        {
            let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(picked.len() + 3);
            for (&i, buf) in picked.iter().zip(states.chunks_exact_mut(per_chunk)) {
                verbs.push(Verb::read(
                    self.region.states_addr(space.chunks[i].chunk),
                    buf,
                ));
            }
            verbs.push(Verb::read(self.epoch_addr, epoch_buf));
            verbs.push(Verb::read(self.region.horizon_addr(), horizon_buf));
            ep.batches(&mut verbs)?;
        }
        let epoch = leaf_store::le_word(&words, 0);
        inner.horizon = inner.horizon.max(leaf_store::le_word(&words, 1));
        let mut found = 0;
        for (k, &i) in picked.iter().enumerate() {
            let chunk = &mut inner.classes[class].chunks[i];
            let seen = &states[k * per_chunk..(k + 1) * per_chunk];
            for (index, held) in chunk.held.iter_mut().enumerate() {
                if candidates[k][index] && *held == Held::Used && seen[index] != STATE_USED {
                    *held = Held::Limbo;
                    found += 1;
                    inner.limbo.push_back((
                        epoch,
                        Block {
                            chunk: chunk.chunk,
                            class,
                            index: index as u64,
                        },
                    ));
                }
            }
        }
        let space = &mut inner.classes[class];
        space.scanned += picked.len();
        space.in_limbo += found;
        if found > 0 {
            space.progress_at = space.scanned;
        }
        inner.promote();
        if !inner.limbo.is_empty() {
            // A request, not a promise: the memory node advances the epoch and clears it.
            ep.write_word(self.region.wanted_addr(), 1)?;
        }
        Ok(())
    }

    /// Takes an unowned chunk carved for `class` (left by a compute node that went, or filled
    /// by bulk load) and scans it: blocks in use stay, free ones go to limbo. False if the chunk
    /// table (as last read) shows none.
    fn adopt<E: Endpoint>(
        &self,
        ep: &mut E,
        inner: &mut Inner,
        class: usize,
    ) -> Result<bool, IndexError> {
        if inner.table_read_at.is_none() {
            self.read_table(ep, inner)?;
        }
        while let Some(chunk) = inner.unowned[class].pop() {
            let expected = ChunkWord::new(0, 0, Some(class));
            let old = ep.cas(
                self.region.chunk_word_addr(chunk),
                expected.raw(),
                self.mine(class).raw(),
            )?;
            if old != expected.raw() {
                continue;
            }
            // Every block counts as named until a scan sees it free.
            let blocks = self.region.blocks_per_chunk(class) as usize;
            let space = &mut inner.classes[class];
            space.push(OwnedChunk {
                chunk,
                fresh_from: blocks as u64,
                held: vec![Held::Used; blocks],
            });
            space.cursor = space.chunks.len() - 1;
            self.scan(ep, inner, class)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Claims a chunk nothing was ever carved from — one the chunk table shows unowned and
    /// uncarved, else a fresh one (FAA on the fresh counter) — for `class`. False if none is
    /// left.
    fn claim_blank<E: Endpoint>(
        &self,
        ep: &mut E,
        inner: &mut Inner,
        class: usize,
    ) -> Result<bool, IndexError> {
        loop {
            let chunk = match inner.unowned[CLASSES].pop() {
                Some(chunk) => chunk,
                None if inner.fresh_exhausted => {
                    // Chunks may have been left since (a compute node went): the table is read
                    // again, at most once per `RESCAN_AFTER` (a write waiting for freed blocks
                    // asks often).
                    let due = inner
                        .table_read_at
                        .is_none_or(|at| at.elapsed() >= RESCAN_AFTER);
                    if due {
                        self.read_table(ep, inner)?;
                        if !inner.unowned[CLASSES].is_empty() || !inner.unowned[class].is_empty() {
                            return Ok(true);
                        }
                    }
                    return Ok(false);
                }
                None => {
                    let chunk = ep.faa(self.region.fresh_addr(), 1)?;
                    if chunk >= self.region.chunks() {
                        inner.fresh_exhausted = true;
                        continue;
                    }
                    chunk
                }
            };
            let old = ep.cas(
                self.region.chunk_word_addr(chunk),
                0,
                self.mine(class).raw(),
            )?;
            if old != 0 {
                continue;
            }
            // Never carved: nothing in it was ever named, but its state bytes may be stale.
            let blocks = self.region.blocks_per_chunk(class) as usize;
            ep.write(
                self.region.states_addr(chunk),
                &vec![0u8; blocks.next_multiple_of(8)],
            )?;
            inner.classes[class].push(OwnedChunk {
                chunk,
                fresh_from: 0,
                held: vec![Held::Free; blocks],
            });
            return Ok(true);
        }
    }

    fn read_table<E: Endpoint>(&self, ep: &mut E, inner: &mut Inner) -> Result<(), IndexError> {
        let fresh = ep
            .read_word(self.region.fresh_addr())?
            .min(self.region.chunks());
        let mut table = vec![0u8; 8 * fresh as usize];
        if fresh > 0 {
            ep.read(self.region.table_addr(), &mut table)?;
        }
        inner.unowned = vec![Vec::new(); CLASSES + 1];
        // Popped from the end: lowest chunk numbers first, as before.
        for chunk in (0..fresh).rev() {
            let word = ChunkWord::from_raw(leaf_store::le_word(&table, chunk as usize));
            match (word.tag(), word.class()) {
                (0, None) => inner.unowned[CLASSES].push(chunk),
                (0, Some(class)) if class < CLASSES => inner.unowned[class].push(chunk),
                _ => {}
            }
        }
        inner.table_read_at = Some(Instant::now());
        Ok(())
    }
}

impl ClassSpace {
    /// Adds a chunk just taken.
    fn push(&mut self, chunk: OwnedChunk) {
        let at = self.chunks.len();
        self.by_chunk.insert(chunk.chunk, at);
        if (chunk.fresh_from as usize) < chunk.held.len() {
            self.with_fresh.push(at);
        }
        self.chunks.push(chunk);
    }
}

impl Inner {
    fn take_ready(&mut self, class: usize) -> Option<Block> {
        let packed = self.classes[class].ready.pop()?;
        self.in_flight(class, packed)
    }

    fn in_flight(&mut self, class: usize, packed: u64) -> Option<Block> {
        let block = Block {
            chunk: packed >> 32,
            class,
            index: packed & 0xffff_ffff,
        };
        self.set(block, Held::InFlight);
        Some(block)
    }

    fn take_fresh(&mut self, class: usize) -> Option<Block> {
        let space = &mut self.classes[class];
        let chunk = loop {
            let at = *space.with_fresh.last()?;
            let chunk = &space.chunks[at];
            if (chunk.fresh_from as usize) < chunk.held.len() {
                break &mut space.chunks[at];
            }
            space.with_fresh.pop();
        };
        let index = chunk.fresh_from;
        chunk.fresh_from += 1;
        chunk.held[index as usize] = Held::InFlight;
        Some(Block {
            chunk: chunk.chunk,
            class,
            index,
        })
    }

    /// Moves limbo blocks the horizon has passed to their class's ready list.
    fn promote(&mut self) {
        while let Some(&(stamp, block)) = self.limbo.front() {
            if stamp >= self.horizon {
                break;
            }
            self.limbo.pop_front();
            self.classes[block.class].in_limbo -= 1;
            if self.set(block, Held::Free) {
                self.classes[block.class]
                    .ready
                    .push(block.chunk << 32 | block.index);
            }
        }
    }

    /// Sets what is known of `block`; false if it is in no owned chunk.
    fn set(&mut self, block: Block, held: Held) -> bool {
        let space = &mut self.classes[block.class];
        let Some(chunk) = space
            .by_chunk
            .get(&block.chunk)
            .and_then(|&at| space.chunks.get_mut(at))
        else {
            return false;
        };
        match chunk.held.get_mut(block.index as usize) {
            Some(h) => {
                *h = held;
                true
            }
            None => false,
        }
    }
}
