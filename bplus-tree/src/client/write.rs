//! Writing one entry: the leaf's lock (a local stripe, then a CAS of the remote lock word with
//! the leaf's READ fenced behind it), the changed entry and the unlock in one batch, and a held
//! lock handed to a waiting local thread.
//!
//! A write holds its local stripe from the lock's CAS to the unlock, round trips included: a
//! sibling operation of its thread (posting mode) waiting for the same stripe try-locks it and
//! yields ([`crate::locks::Stripe::enter_with`]), so the holder goes on and lets it go.

use std::sync::Arc;
use std::time::Instant;

use rdma_transport::{Endpoint, Verb};

use super::{Change, Client, Locked, Outcome, PendingBlock, Shared};
use crate::TreeError;
use crate::layout::{Layout, LeafKind};
use crate::locks::{Held, MAX_HANDOVERS};
use crate::page::{HEADER_WORDS, Page, page_checksum};

impl<E: Endpoint> Client<E> {
    /// Applies `change` to `key`'s leaf entry. `block` (byte values) is WRITten in the batch
    /// that takes the lock, and so lands before the entry that names it; it is `None` once
    /// WRITten.
    pub(super) async fn write(
        &mut self,
        key: u64,
        change: Change,
        block: &mut Option<PendingBlock>,
    ) -> Result<Outcome, TreeError> {
        let shared = Arc::clone(&self.shared);
        let node = shared.node_of(key);
        if let LeafKind::Hopscotch(g) = shared.nodes[node].layout.leaf {
            return self.hop_write(key, change, block, g).await;
        }
        for _ in 0..shared.config.max_attempts {
            let (leaf_no, parent) = self.locate(node, key, 0).await?;
            let Some(mut locked) = self
                .lock_covering(&shared, node, leaf_no, parent, key, block)
                .await?
            else {
                continue;
            };
            let page = &locked.page;
            let found = page.find(key);
            let unchanged = Outcome {
                done: false,
                linked: false,
                old: None,
            };
            let outcome = match (change, found) {
                (Change::Insert(_), Some(_))
                | (Change::Update(_), None)
                | (Change::Delete, None) => {
                    self.release(locked, &[]).await?;
                    unchanged
                }
                (Change::Update(v) | Change::Upsert(v), Some((slot, old))) => {
                    set_entry(&mut locked, slot, Some((key, v)));
                    self.commit_entry(locked, slot).await?;
                    Outcome {
                        done: matches!(change, Change::Update(_)),
                        linked: true,
                        old: Some(old),
                    }
                }
                (Change::Delete, Some((slot, old))) => {
                    set_entry(&mut locked, slot, None);
                    self.commit_entry(locked, slot).await?;
                    Outcome {
                        done: true,
                        linked: false,
                        old: Some(old),
                    }
                }
                (Change::Insert(v) | Change::Upsert(v), None) => {
                    match page.free_slot() {
                        Some(slot) => {
                            set_entry(&mut locked, slot, Some((key, v)));
                            self.commit_entry(locked, slot).await?;
                        }
                        None => self.split_leaf(&shared, locked, key, v).await?,
                    }
                    Outcome {
                        done: true,
                        linked: true,
                        old: None,
                    }
                }
            };
            return Ok(outcome);
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Locks the page at or right of `page_no` that covers `key` (moving right under the lock
    /// protocol); `None` if the cache led somewhere wrong (locate again).
    pub(super) async fn lock_covering<'s>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        mut page_no: u64,
        parent: Option<u64>,
        key: u64,
        block: &mut Option<PendingBlock>,
    ) -> Result<Option<Locked<'s>>, TreeError> {
        for _ in 0..shared.config.max_attempts {
            let locked = self.lock(shared, node, page_no, block).await?;
            if locked.page.low > key {
                self.release(locked, &[]).await?;
                if let Some(p) = parent {
                    self.forget(node, p);
                }
                self.refresh_root(node).await?;
                return Ok(None);
            }
            if locked.page.past_high(key) {
                let sibling = locked.page.sibling;
                page_no = self.move_right(locked, sibling, parent, key).await?;
                continue;
            }
            return Ok(Some(locked));
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Releases a locked page that ends at or below `key` and names its right `sibling`, where
    /// the caller goes next; the parent that led there predates a split, and is read again next
    /// time.
    pub(super) async fn move_right<P>(
        &mut self,
        locked: Locked<'_, P>,
        sibling: u64,
        parent: Option<u64>,
        key: u64,
    ) -> Result<u64, TreeError> {
        let (node, page_no) = (locked.node, locked.page_no);
        self.release(locked, &[]).await?;
        if let Some(p) = parent {
            self.forget(node, p);
        }
        self.step_right(page_no, sibling, key)
    }

    /// A move right from page `page_no`, which ends at or below `key`, to its right `sibling`
    /// (counted); a page that ends below a key with no sibling is damage.
    pub(super) fn step_right(
        &mut self,
        page_no: u64,
        sibling: u64,
        key: u64,
    ) -> Result<u64, TreeError> {
        self.stats.moves_right += 1;
        if sibling == 0 {
            return Err(TreeError::Corrupt(format!(
                "page {page_no} ends below {key} with no sibling"
            )));
        }
        Ok(sibling)
    }

    /// Takes page `page_no`'s lock and reads the page under it: the local stripe first; then, if
    /// no local thread left the remote lock to this one, a CAS of the lock word with the page's
    /// READ fenced behind it (one round trip per attempt).
    ///
    /// The stripe's guard is held across the round trips on purpose (it is the local lock, held
    /// from the CAS to the unlock): a sibling operation of this thread try-locks the stripe and
    /// yields ([`crate::locks::Stripe::enter_with`]), other threads block on it as before.
    pub(super) async fn lock<'s>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        page_no: u64,
        block: &mut Option<PendingBlock>,
    ) -> Result<Locked<'s>, TreeError> {
        let size = shared.nodes[node].layout.page_size as usize;
        self.lock_with(shared, node, page_no, &[(0, size)], block, |bytes| {
            Page::decode(page_no, bytes)
        })
        .await
    }

    /// [`Client::lock`], READing the byte ranges `(offset, len)` of the page under the lock
    /// (concatenated in `Locked::bytes`) and decoding them with `decode` (`None`: damage).
    #[allow(clippy::await_holding_lock)]
    pub(super) async fn lock_with<'s, P>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        page_no: u64,
        ranges: &[(u64, usize)],
        block: &mut Option<PendingBlock>,
        decode: impl FnOnce(&[u8]) -> Option<P>,
    ) -> Result<Locked<'s, P>, TreeError> {
        let layout = shared.nodes[node].layout;
        let word = layout.lock_of(page_no);
        let stripe = shared.locks.stripe(layout.node(), word);
        let mut guard = stripe.enter_with(self.waiting).await;
        let mut handovers = 0;
        let mut have = false;
        if let Some(held) = guard.take() {
            if held.node == layout.node() && held.word == word {
                have = true;
                handovers = held.handovers + 1;
                self.stats.handovers += 1;
            } else {
                // A lock left for another word of this stripe: release it first, on its node.
                self.stats.lock_verbs += 1;
                let other = shared
                    .nodes
                    .iter()
                    .find(|n| n.layout.node() == held.node)
                    .map(|n| n.layout.lock_addr(held.word));
                let released = match other {
                    Some(at) => self.remote_write_word(at, 0).await,
                    None => Ok(()),
                };
                if let Err(e) = released {
                    // Still held: leave it recorded for whoever comes next.
                    *guard = Some(held);
                    return Err(e.into());
                }
            }
        }
        let mut bytes = vec![0u8; ranges.iter().map(|r| r.1).sum()];
        // A value block the entry will name travels in the first batch that reaches the memory
        // node (it is this client's alone until a leaf names it).
        if have {
            let result = {
                let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(1 + ranges.len());
                if let Some((at, data)) = block.as_ref() {
                    verbs.push(Verb::write(*at, data));
                }
                push_reads(&mut verbs, layout, page_no, ranges, &mut bytes, false);
                self.one_batch(&mut verbs).await
            };
            if let Err(e) = result {
                self.abandon(layout, word).await;
                return Err(e.into());
            }
            *block = None;
        } else {
            let deadline = Instant::now() + shared.config.wait_limit;
            let mut attempt = 0;
            loop {
                let (result, taken) = {
                    let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(2 + ranges.len());
                    if let Some((at, data)) = block.as_ref() {
                        verbs.push(Verb::write(*at, data));
                    }
                    let cas = verbs.len();
                    verbs.push(Verb::cas(layout.lock_addr(word), 0, shared.tag));
                    push_reads(&mut verbs, layout, page_no, ranges, &mut bytes, true);
                    let result = self.one_batch(&mut verbs).await;
                    (result, verbs[cas].cas_succeeded() == Some(true))
                };
                self.stats.lock_verbs += 1;
                if let Err(e) = result {
                    // The CAS may have executed before the failure: a word holding this compute
                    // node's tag is this thread's (it holds the word's stripe).
                    if self.remote_read_word(layout.lock_addr(word)).await == Ok(shared.tag) {
                        self.abandon(layout, word).await;
                    }
                    return Err(e.into());
                }
                *block = None;
                if taken {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(TreeError::LockTimeout {
                        node: layout.node(),
                        page: page_no,
                    });
                }
                self.pause(attempt).await;
                attempt += 1;
            }
        }
        let Some(page) = decode(&bytes) else {
            // Nothing writes a page without its lock: a page that fails its checksum under the
            // lock is damage, not a race.
            self.remote_write_word(layout.lock_addr(word), 0).await?;
            self.stats.lock_verbs += 1;
            return Err(TreeError::Corrupt(format!(
                "page {page_no} of memory node {} fails its checksum under its lock",
                layout.node()
            )));
        };
        Ok(Locked {
            node,
            page_no,
            word,
            page,
            bytes,
            guard,
            handovers,
        })
    }

    /// Ends a locked write: `writes` (fenced in order), then the unlock in the same batch — or,
    /// if a local thread waits for this lock and it has not been handed over too often, no
    /// unlock: the lock is left to that thread.
    pub(super) async fn release<P>(
        &mut self,
        mut locked: Locked<'_, P>,
        writes: &[(u64, &[u8])],
    ) -> Result<(), TreeError> {
        let layout = self.shared.nodes[locked.node].layout;
        let stripe = self.shared.locks.stripe(layout.node(), locked.word);
        let hand_over = stripe.contended() && locked.handovers < MAX_HANDOVERS;
        let zero = [0u8; 8];
        let mut verbs: Vec<Verb<'_>> = writes
            .iter()
            .map(|&(offset, data)| {
                Verb::write(
                    layout
                        .page_addr(locked.page_no)
                        .checked_add(offset)
                        .unwrap_or_default(),
                    data,
                )
            })
            .collect();
        if !hand_over {
            verbs.push(Verb::write(layout.lock_addr(locked.word), &zero));
            self.stats.lock_verbs += 1;
        }
        // Every verb of the batch can be repeated (the same bytes; the unlock), so a batch that
        // failed part-way is run again rather than leaving a page half written under its lock.
        let mut result = self.one_batch(&mut verbs).await;
        for _ in 0..2 {
            if result.is_ok() {
                break;
            }
            result = self.one_batch(&mut verbs).await;
        }
        drop(verbs);
        if result.is_err() {
            // Still failing: whatever of the batch ran, the lock must not stay held (a lost
            // completion breaks the endpoint for good, so a retry above never repeats a batch
            // that had run whole). Released while the stripe is still this thread's.
            self.abandon(layout, locked.word).await;
        }
        if hand_over && result.is_ok() {
            *locked.guard = Some(Held {
                node: layout.node(),
                word: locked.word,
                handovers: locked.handovers,
            });
        }
        result.map_err(Into::into)
    }

    /// Writes leaf entry `slot` and the page's checksum and bitmap, and unlocks.
    pub(super) async fn commit_entry(
        &mut self,
        locked: Locked<'_>,
        slot: usize,
    ) -> Result<(), TreeError> {
        let at = 8 * (HEADER_WORDS + 2 * slot);
        let head = locked.bytes[..16].to_vec();
        let entry = locked.bytes[at..at + 16].to_vec();
        self.release(locked, &[(at as u64, &entry), (0, &head)])
            .await
    }

    /// Best-effort release of lock word `word` after an error (the error is what the caller
    /// reports; if this WRITE fails too, the word stays held and writers of its pages time out).
    pub(super) async fn abandon(&mut self, layout: Layout, word: u64) {
        self.stats.lock_verbs += 1;
        let _ = self.remote_write_word(layout.lock_addr(word), 0).await;
    }
}

/// Pushes READs of the byte ranges `(offset, len)` of page `page_no` into `bytes`, one after
/// another; `fenced`: behind the lock's CAS.
fn push_reads<'b>(
    verbs: &mut Vec<Verb<'b>>,
    layout: Layout,
    page_no: u64,
    ranges: &[(u64, usize)],
    mut bytes: &'b mut [u8],
    fenced: bool,
) {
    for &(offset, len) in ranges {
        let (head, rest) = bytes.split_at_mut(len);
        bytes = rest;
        let at = layout
            .page_addr(page_no)
            .checked_add(offset)
            .unwrap_or_default();
        let read = Verb::read(at, head);
        verbs.push(if fenced { read.fenced() } else { read });
    }
}

/// Sets leaf entry `slot` in the locked page and patches its raw bytes (entry, bitmap,
/// checksum).
pub(super) fn set_entry(locked: &mut Locked<'_>, slot: usize, entry: Option<(u64, u64)>) {
    locked.page.slots[slot] = entry;
    let bytes = &mut locked.bytes;
    let mut bitmap = u64::from_le_bytes(bytes[8..16].try_into().unwrap_or_default());
    match entry {
        Some((k, v)) => {
            bitmap |= 1 << slot;
            let at = 8 * (HEADER_WORDS + 2 * slot);
            bytes[at..at + 8].copy_from_slice(&k.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
        }
        None => bitmap &= !(1 << slot),
    }
    bytes[8..16].copy_from_slice(&bitmap.to_le_bytes());
    let sum = page_checksum(locked.page_no, &bytes[8..]);
    bytes[..8].copy_from_slice(&sum.to_le_bytes());
}
