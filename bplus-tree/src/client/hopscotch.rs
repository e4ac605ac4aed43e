//! Hopscotch leaves (CHIME's, [`chime`]) under the tree's internal pages: a lookup READs one
//! neighbourhood of its leaf; a writer READs that neighbourhood and the leaf's tail under the
//! lock, and the whole leaf only when the neighbourhood has no room.
//!
//! **Invariant** (what makes one small READ enough). A leaf's words are written only under its
//! lock; every slot, metadata copy and the tail check themselves and carry the leaf version,
//! which a split (the only change of a leaf's sibling or high fence) bumps. Pages are never
//! freed, so a sibling names one page forever, and leaves keep their low fence. Homes are the
//! first `slots - H + 1` slots, so keys only move to higher slots, each with its home's bitmap in
//! the same WRITE; a READ takes a leaf's words in ascending order (a WRITE lands them so), so a
//! key present throughout that the READ passes over (a displacement landing between its old slot
//! and its new one) shows as a home bitmap naming a slot without it: read again. Hence a
//! neighbourhood whose words all check at one version, whose bitmaps agree, and whose sibling
//! is the child the cached parent lists after the leaf, holds what the leaf held while its range
//! held the key (CHIME's sibling-based validation). When the parent lists none after it
//! (the leaf is its last child), or the sibling differs (a split the cache has not seen), the
//! READ takes the tail too, whose high fence, at the window's version, says whether to move
//! right.
//!
//! Steps: GET = the one slot the hot-entry buffer names (`hot.rs`), else locate, READ the
//! neighbourhood (one READ: neighbourhoods do not wrap), look up. Write = locate, lock (CAS)
//! with the neighbourhood and the tail READ behind it, move right past the high fence, change
//! the neighbourhood's slots (or READ up to the first free slot and move keys along, or the
//! whole leaf to split), WRITE the slots and the vacancy word with the unlock. Split = the whole
//! leaf in hand: the right half to a new page, then the left half with the unlock, then the
//! separator into the parent as the B+-tree's.

use std::sync::Arc;

use chime::word::Tail;
use chime::{Geometry, Leaf, Lookup, Span, Window};
use rdma_transport::{Endpoint, Verb};

use super::{Change, Client, Locked, Outcome, PendingBlock, Shared};
use crate::TreeError;

/// What a writer READs under a hopscotch leaf's lock: the key's neighbourhood and the tail
/// (which an update whose window the cached parent vouches for goes without).
pub(super) struct HopRead {
    window: Window,
    tail: Option<Tail>,
    vacancy: Option<u64>,
}

/// Words from little-endian bytes.
fn words_of(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// Little-endian bytes of `words` (what a WRITE of them carries).
fn bytes_of(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The byte ranges of `spans`, as `Client::lock_with` takes them.
fn ranges(spans: &[Span]) -> Vec<(u64, usize)> {
    spans
        .iter()
        .map(|s| (8 * s.start as u64, 8 * s.len))
        .collect()
}

/// The spans of `key`'s neighbourhood followed by the tail's, and how many are the
/// neighbourhood's.
fn window_and_tail(g: Geometry, key: u64) -> (Vec<Span>, usize) {
    let mut spans = g.neighbourhood_spans(g.home(key));
    let in_window = spans.len();
    spans.push(g.tail_span());
    (spans, in_window)
}

/// Words of `spans`, together.
fn span_words(spans: &[Span]) -> usize {
    spans.iter().map(|s| s.len).sum()
}

impl<E: Endpoint> Client<E> {
    /// READs `spans` of page `page_no` in one batch: their words, concatenated.
    async fn read_spans(
        &mut self,
        node: usize,
        page_no: u64,
        spans: &[Span],
    ) -> Result<Vec<u64>, TreeError> {
        let layout = self.shared.nodes[node].layout;
        let mut bytes = vec![0u8; 8 * span_words(spans)];
        {
            let mut rest: &mut [u8] = &mut bytes;
            let mut verbs: Vec<Verb<'_>> = Vec::with_capacity(spans.len());
            for span in spans {
                let (head, tail) = rest.split_at_mut(8 * span.len);
                rest = tail;
                verbs.push(Verb::read(
                    layout.page_word_addr(page_no, span.start as u64),
                    head,
                ));
            }
            self.one_batch(&mut verbs).await?;
        }
        Ok(words_of(&bytes))
    }

    /// The value word of `key` in a hopscotch pool (`None`: absent), READing one neighbourhood
    /// of its leaf when the cached parent vouches for the leaf's range.
    pub(super) async fn hop_lookup(
        &mut self,
        node: usize,
        key: u64,
        g: Geometry,
    ) -> Result<Option<u64>, TreeError> {
        if let Some(found) = self.hop_speculate(node, key, g).await? {
            return Ok(Some(found));
        }
        let max = self.shared.config.max_attempts;
        // The neighbourhood's spans, then the tail's (read only when the parent vouches for no
        // sibling).
        let (spans, in_window) = window_and_tail(g, key);
        let window_spans = &spans[..in_window];
        let n = span_words(window_spans);
        let (mut leaf_no, parent) = self.locate(node, key, 0).await?;
        let mut expected = match (&self.last_parent, parent) {
            (Some(p), Some(_)) => p.next_child(key),
            _ => None,
        };
        for attempt in 0..max {
            let read = if expected.is_some() {
                window_spans
            } else {
                &spans[..]
            };
            let words = self.read_spans(node, leaf_no, read).await?;
            let Some(window) = Window::decode(g, leaf_no, window_spans, &words[..n]) else {
                self.stats.torn_reads += 1;
                self.pause(attempt).await;
                continue;
            };
            match expected {
                Some(sibling) if window.sibling == sibling => {}
                Some(_) => {
                    // A split the cached parent has not seen: read the fence to know.
                    if let Some(p) = parent {
                        self.forget(node, p);
                    }
                    expected = None;
                    continue;
                }
                None => {
                    let Some(tail) = window.tail(leaf_no, &words[n..]) else {
                        self.stats.torn_reads += 1;
                        self.pause(attempt).await;
                        continue;
                    };
                    if tail.high.is_some_and(|h| key >= h) {
                        leaf_no = self.step_right(leaf_no, window.sibling, key)?;
                        continue;
                    }
                }
            }
            match window.lookup(g, key) {
                Lookup::Found(v) => {
                    if let Some((slot, _)) = window.find(g, key) {
                        self.shared.hot.put(node, key, leaf_no, slot);
                    }
                    return Ok(Some(v));
                }
                Lookup::Absent => {
                    self.shared.hot.forget(key);
                    return Ok(None);
                }
                Lookup::Inconsistent => {
                    // A displacement landed during the READ.
                    self.stats.torn_reads += 1;
                    self.pause(attempt).await;
                }
            }
        }
        Err(TreeError::TooManyRetries(max))
    }

    /// A GET's speculative READ (see `hot.rs`): the one slot where the hot-entry buffer says
    /// `key` was found, its value if the slot still holds it.
    async fn hop_speculate(
        &mut self,
        node: usize,
        key: u64,
        g: Geometry,
    ) -> Result<Option<u64>, TreeError> {
        let Some((page, slot)) = self.shared.hot.get(node, key) else {
            return Ok(None);
        };
        let span = Span {
            start: g.slot_word(slot),
            len: chime::geometry::SLOT_WORDS,
        };
        let words = self.read_spans(node, page, &[span]).await?;
        let entry = chime::word::Entry::decode(page, slot, [words[0], words[1], words[2]]);
        match entry.and_then(|e| e.kv) {
            Some((k, v)) if k == key => {
                self.stats.speculative_hits += 1;
                Ok(Some(v))
            }
            _ => {
                self.stats.speculative_misses += 1;
                Ok(None)
            }
        }
    }

    /// READs hopscotch leaf `leaf_no` whole once: `None` if it does not check (a write landed
    /// during the READ).
    async fn hop_try_read_leaf(
        &mut self,
        node: usize,
        leaf_no: u64,
        g: Geometry,
    ) -> Result<Option<Leaf>, TreeError> {
        let whole = [Span {
            start: 0,
            len: g.leaf_words(),
        }];
        let words = self.read_spans(node, leaf_no, &whole).await?;
        let leaf = Leaf::decode(g, leaf_no, &words);
        if leaf.is_none() {
            self.stats.torn_reads += 1;
        }
        Ok(leaf)
    }

    /// READs hopscotch leaf `leaf_no` whole until it checks.
    pub(super) async fn hop_read_leaf(
        &mut self,
        node: usize,
        leaf_no: u64,
        g: Geometry,
    ) -> Result<Leaf, TreeError> {
        let max = self.shared.config.max_attempts;
        for attempt in 0..max {
            if let Some(leaf) = self.hop_try_read_leaf(node, leaf_no, g).await? {
                return Ok(leaf);
            }
            self.pause(attempt).await;
        }
        Err(TreeError::TooManyRetries(max))
    }

    /// READs hopscotch leaf `leaf_no` whole, moving right until it covers `key`: the leaf and
    /// its page (a scan's first leaf when the batch's READ missed).
    pub(super) async fn hop_leaf_covering(
        &mut self,
        node: usize,
        mut leaf_no: u64,
        key: u64,
        g: Geometry,
    ) -> Result<(Leaf, u64), TreeError> {
        let max = self.shared.config.max_attempts;
        for attempt in 0..max {
            let Some(leaf) = self.hop_try_read_leaf(node, leaf_no, g).await? else {
                self.pause(attempt).await;
                continue;
            };
            if leaf.high.is_some_and(|h| key >= h) {
                leaf_no = self.step_right(leaf_no, leaf.sibling, key)?;
                continue;
            }
            return Ok((leaf, leaf_no));
        }
        Err(TreeError::TooManyRetries(max))
    }

    /// READs hopscotch leaves `pages` whole in one batch; one that does not check is `None`.
    pub(super) async fn hop_read_leaves(
        &mut self,
        node: usize,
        pages: &[u64],
        g: Geometry,
    ) -> Result<Vec<Option<Leaf>>, TreeError> {
        let size = g.leaf_bytes() as usize;
        let buf = self.read_page_prefixes(node, pages, size).await?;
        Ok(pages
            .iter()
            .zip(buf.chunks_exact(size))
            .map(|(&p, chunk)| Leaf::decode(g, p, &words_of(chunk)))
            .collect())
    }

    /// Applies `change` to `key` in a hopscotch pool (see [`Client::write`]).
    pub(super) async fn hop_write(
        &mut self,
        key: u64,
        change: Change,
        block: &mut Option<PendingBlock>,
        g: Geometry,
    ) -> Result<Outcome, TreeError> {
        let shared = Arc::clone(&self.shared);
        let node = shared.node_of(key);
        let unchanged = Outcome {
            done: false,
            linked: false,
            old: None,
        };
        for _ in 0..shared.config.max_attempts {
            let (leaf_no, parent) = self.locate(node, key, 0).await?;
            // An update changes one slot: the sibling the cached parent lists next vouches for
            // the leaf's range, as for a GET, and the tail is left unread.
            let expected = match (&self.last_parent, parent, change) {
                (Some(p), Some(_), Change::Update(_)) => p.next_child(key),
                _ => None,
            };
            let Some(locked) = self
                .hop_lock_covering(&shared, node, leaf_no, parent, key, g, block, expected)
                .await?
            else {
                continue;
            };
            // Without the tail (an update): an update in place leaves the vacancy word as it is.
            let vacancy = locked.page.vacancy.unwrap_or(0);
            let read = &locked.page;
            let found = read.window.find(g, key);
            let (slots, vacancy, outcome) = match (change, found) {
                (Change::Insert(_), Some(_))
                | (Change::Update(_), None)
                | (Change::Delete, None) => {
                    self.release(locked, &[]).await?;
                    return Ok(unchanged);
                }
                (Change::Delete, Some((_, old))) => {
                    let Some((slots, vacancy)) = read.window.remove(g, key, vacancy) else {
                        return Err(self.damaged(locked).await);
                    };
                    let outcome = Outcome {
                        done: true,
                        linked: false,
                        old: Some(old),
                    };
                    (slots, vacancy, outcome)
                }
                (Change::Update(v) | Change::Upsert(v) | Change::Insert(v), found) => {
                    let outcome = Outcome {
                        done: !matches!((change, found), (Change::Upsert(_), Some(_))),
                        linked: true,
                        old: found.map(|f| f.1),
                    };
                    match read.window.set(g, key, v, vacancy) {
                        Some((slots, vacancy)) => (slots, vacancy, outcome),
                        None => {
                            // No room in the neighbourhood: READ on to the first free slot and
                            // move keys along, or (no room within reach) the whole leaf, to
                            // split.
                            let Some(locked) = self.hop_insert_moving(locked, key, v, g).await?
                            else {
                                return Ok(outcome);
                            };
                            let again = self.hop_insert_whole(&shared, locked, key, v, g).await?;
                            if again {
                                continue;
                            }
                            return Ok(outcome);
                        }
                    }
                }
            };
            let vacancy = Some(vacancy)
                .filter(|&v| locked.page.tail.is_some() && Some(v) != locked.page.vacancy);
            let spans = locked.page.window.writes(g, locked.page_no, &slots);
            self.hop_release(locked, spans, vacancy, g).await?;
            return Ok(outcome);
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Locks the hopscotch leaf at or right of `page_no` that covers `key` (moving right by the
    /// high fence READ under the lock), with `key`'s neighbourhood and the tail READ behind the
    /// lock's CAS. With `expected` (the sibling the cached parent lists after the leaf), the
    /// tail is READ only if the leaf's sibling is another.
    #[allow(clippy::too_many_arguments)]
    async fn hop_lock_covering<'s>(
        &mut self,
        shared: &'s Shared,
        node: usize,
        mut page_no: u64,
        parent: Option<u64>,
        key: u64,
        g: Geometry,
        block: &mut Option<PendingBlock>,
        mut expected: Option<u64>,
    ) -> Result<Option<Locked<'s, HopRead>>, TreeError> {
        let (spans, in_window) = window_and_tail(g, key);
        let window_spans = &spans[..in_window];
        let n = span_words(window_spans);
        for _ in 0..shared.config.max_attempts {
            let page = page_no;
            let read = if expected.is_some() {
                window_spans
            } else {
                &spans[..]
            };
            let mut locked = self
                .lock_with(shared, node, page_no, &ranges(read), block, |bytes| {
                    let words = words_of(bytes);
                    let window = Window::decode(g, page, window_spans, &words[..n])?;
                    if words.len() == n {
                        return Some(HopRead {
                            window,
                            tail: None,
                            vacancy: None,
                        });
                    }
                    let tail = window.tail(page, &words[n..])?;
                    Some(HopRead {
                        window,
                        tail: Some(tail),
                        vacancy: Some(words[n]),
                    })
                })
                .await?;
            if locked.page.tail.is_none() {
                if expected == Some(locked.page.window.sibling) {
                    return Ok(Some(locked));
                }
                // A split the cached parent has not seen: the tail says where the leaf ends.
                expected = None;
                let words = match self.read_spans(node, page, &[g.tail_span()]).await {
                    Ok(w) => w,
                    Err(e) => {
                        self.release(locked, &[]).await?;
                        return Err(e);
                    }
                };
                let Some(tail) = locked.page.window.tail(page, &words) else {
                    return Err(self.damaged(locked).await);
                };
                locked.page.tail = Some(tail);
                locked.page.vacancy = Some(words[0]);
            }
            if locked
                .page
                .tail
                .is_some_and(|t| t.high.is_some_and(|h| key >= h))
            {
                let sibling = locked.page.window.sibling;
                page_no = self.move_right(locked, sibling, parent, key).await?;
                continue;
            }
            return Ok(Some(locked));
        }
        Err(TreeError::TooManyRetries(shared.config.max_attempts))
    }

    /// Under the lock, with no room in `key`'s neighbourhood: READs from its home through the
    /// first free slot the vacancy word names, and puts `key` in by moving keys along. The lock
    /// back (`Some`) when that cannot be done (no free slot, or none a move brings within
    /// reach): the caller reads the whole leaf.
    async fn hop_insert_moving<'s>(
        &mut self,
        locked: Locked<'s, HopRead>,
        key: u64,
        value: u64,
        g: Geometry,
    ) -> Result<Option<Locked<'s, HopRead>>, TreeError> {
        let h = g.home(key);
        let Some(vacancy) = locked.page.vacancy.filter(|_| locked.page.tail.is_some()) else {
            return Ok(Some(locked));
        };
        let Some(d) = chime::vacancy::first_free(g, h, vacancy) else {
            return Ok(Some(locked));
        };
        let (node, page_no) = (locked.node, locked.page_no);
        let spans = g.spans(h, (d + 1).max(g.neighbourhood()));
        let words = match self.read_spans(node, page_no, &spans).await {
            Ok(w) => w,
            Err(e) => {
                self.release(locked, &[]).await?;
                return Err(e);
            }
        };
        let Some(window) = Window::decode(g, page_no, &spans, &words) else {
            return Err(self.damaged(locked).await);
        };
        let slots = match window.insert_moving(g, key, value) {
            Some(Ok(slots)) if window.version == locked.page.window.version => slots,
            _ => return Ok(Some(locked)),
        };
        let after = chime::vacancy::mark(vacancy, g.after(h, d), true);
        let spans = window.writes(g, page_no, &slots);
        self.hop_release(locked, spans, Some(after), g).await?;
        Ok(None)
    }

    /// WRITEs `spans` of the locked leaf (each with its words) and the vacancy word if given,
    /// with the unlock.
    async fn hop_release(
        &mut self,
        locked: Locked<'_, HopRead>,
        spans: Vec<(Span, Vec<u64>)>,
        vacancy: Option<u64>,
        g: Geometry,
    ) -> Result<(), TreeError> {
        let mut writes: Vec<(u64, Vec<u8>)> = spans
            .into_iter()
            .map(|(span, words)| (8 * span.start as u64, bytes_of(&words)))
            .collect();
        if let Some(v) = vacancy {
            writes.push((8 * g.tail_word() as u64, v.to_le_bytes().to_vec()));
        }
        let writes: Vec<(u64, &[u8])> = writes.iter().map(|(o, b)| (*o, &b[..])).collect();
        self.release(locked, &writes).await
    }

    /// Under the lock, with no room within reach of `key`'s home: READs the whole leaf, and
    /// puts `key` in it by moving keys along, or splits it. `true`: the key did not fit even after
    /// the split (every half still full around its home): the caller tries again.
    async fn hop_insert_whole(
        &mut self,
        shared: &Shared,
        locked: Locked<'_, HopRead>,
        key: u64,
        value: u64,
        g: Geometry,
    ) -> Result<bool, TreeError> {
        let whole = [Span {
            start: 0,
            len: g.leaf_words(),
        }];
        let (node, page_no) = (locked.node, locked.page_no);
        let words = match self.read_spans(node, page_no, &whole).await {
            Ok(w) => w,
            Err(e) => {
                self.release(locked, &[]).await?;
                return Err(e);
            }
        };
        let Some(mut leaf) = Leaf::decode(g, page_no, &words) else {
            return Err(self.damaged(locked).await);
        };
        if let Ok(touched) = leaf.insert(key, value) {
            let spans = leaf.touched_words(page_no, touched);
            self.hop_release(locked, spans, Some(leaf.vacancy()), g)
                .await?;
            return Ok(false);
        }
        // Full: split, then put the key in its half.
        let right_no = match self.allocate(node).await {
            Ok(n) => n,
            Err(e) => {
                self.release(locked, &[]).await?;
                return Err(e);
            }
        };
        let Some((mut left, mut right, separator)) = leaf.split(right_no) else {
            return Err(self.damaged(locked).await);
        };
        let side = if key < separator {
            &mut left
        } else {
            &mut right
        };
        let again = side.insert(key, value).is_err();
        let (right_bytes, left_bytes) = (
            bytes_of(&right.encode(right_no)),
            bytes_of(&left.encode(page_no)),
        );
        self.write_split_bytes(locked, right_no, &right_bytes, &left_bytes)
            .await?;
        self.insert_separator(shared, node, 1, separator, right_no, page_no)
            .await?;
        Ok(again)
    }

    /// Releases a leaf that did not decode under its lock (nothing writes a leaf without its
    /// lock: damage, not a race), and says so.
    async fn damaged<P>(&mut self, locked: Locked<'_, P>) -> TreeError {
        let (node, page) = (self.shared.nodes[locked.node].layout.node(), locked.page_no);
        if let Err(e) = self.release(locked, &[]).await {
            return e;
        }
        TreeError::Corrupt(format!(
            "leaf {page} of memory node {node} fails its checks under its lock"
        ))
    }
}
