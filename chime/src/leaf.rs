//! Hopscotch leaves: a leaf is a small hash table in which every key lies within `H` slots of
//! its home slot, so a lookup READs one neighbourhood instead of the leaf (CHIME's leaf).
//!
//! **Invariants** (of a leaf as its lock holder writes it):
//! - every key lies in one of the `H` slots from its home ([`Geometry::home`], one of the first
//!   `slots - H + 1`: neighbourhoods do not wrap), so a change only ever moves a key to a higher
//!   slot;
//! - the home's hop bitmap has bit `d` set exactly when slot `home + d` holds a key homed there;
//! - keys are unique, and below the leaf's high fence (the tail's; see `crate::geometry`).
//!
//! So a reader of a neighbourhood that finds its key has its value; one that does not, and whose
//! rebuilt hop bitmap (from the keys it read homed at the slot) equals the one it read, knows the
//! key is absent. A READ takes a leaf's words in ascending order, and a WRITE lands them so; a
//! reader that passes a displacement's WRITE between the slot a key leaves and the slot it goes
//! to sees the key in neither (or, the other way round, in both), but the key's home bitmap, in
//! the same WRITE, then names a slot without it (or disagrees with two), and the READ is taken
//! again (CHIME's rule). This needs keys to move only up: with neighbourhoods that wrapped, a key
//! moved past the last slot to the first could hide from a whole-leaf READ whose bitmaps agree.
//!
//! A split moves the keys at or above the separator to the same slots of a new leaf, so both
//! halves keep the invariants without moving a key.

use crate::geometry::{Geometry, SLOT_WORDS, Span, TAIL_WORDS, WordAt};
use crate::vacancy::mark;
use crate::word::{Entry, Meta, Tail, VALID, next_version};

/// A whole leaf, decoded (what its lock holder reads, changes and writes back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    geometry: Geometry,
    /// The right sibling's page (0: none).
    pub sibling: u64,
    /// Keys of the leaf are below this (`None`: no bound).
    pub high: Option<u64>,
    /// The leaf version (bumped by a split).
    pub version: u16,
    slots: Vec<Entry>,
}

/// Slots a change rewrote: `count` from `first` (what its WRITE must carry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touched {
    /// The first slot rewritten.
    pub first: usize,
    /// Slots rewritten.
    pub count: usize,
}

/// An insert that found no room within any key's neighbourhood: the leaf must split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl Leaf {
    /// An empty leaf.
    pub fn new(geometry: Geometry, high: Option<u64>) -> Self {
        Self {
            geometry,
            sibling: 0,
            high,
            version: 0,
            slots: vec![Entry::default(); geometry.slots()],
        }
    }

    /// Its shape.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The entries present, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.iter().filter_map(|e| e.kv)
    }

    /// The vacancy word of the leaf (`crate::vacancy`): bit `s` set when slot `s` holds a key.
    pub fn vacancy(&self) -> u64 {
        (0..self.geometry.slots())
            .filter(|&s| self.slots[s].kv.is_some())
            .fold(0, |word, s| word | 1 << s)
    }

    /// Keys present.
    pub fn len(&self) -> usize {
        self.entries().count()
    }

    /// Whether no key is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slot `slot`.
    pub fn slot(&self, slot: usize) -> Entry {
        self.slots[slot]
    }

    /// The slot holding `key`, found through its home's hop bitmap.
    pub fn find(&self, key: u64) -> Option<usize> {
        let g = self.geometry;
        let h = g.home(key);
        let hop = self.slots[h].hop;
        (0..g.neighbourhood())
            .filter(|d| hop >> d & 1 == 1)
            .map(|d| g.after(h, d))
            .find(|&s| self.slots[s].kv.is_some_and(|(k, _)| k == key))
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<u64> {
        self.find(key).and_then(|s| self.slots[s].kv.map(|kv| kv.1))
    }

    /// Sets `key` to `value`: in place if present, else into its neighbourhood, moving other
    /// keys along their own neighbourhoods to make room (hopscotch displacement). `Full` (the
    /// leaf unchanged) when no empty slot can be brought within `H` of the key's home.
    pub fn insert(&mut self, key: u64, value: u64) -> Result<Touched, Full> {
        let g = self.geometry;
        if let Some(s) = self.find(key) {
            self.slots[s].kv = Some((key, value));
            return Ok(Touched { first: s, count: 1 });
        }
        let h = g.home(key);
        // Neighbourhoods do not wrap: keys only ever move to higher slots.
        let far = (h..g.slots())
            .find(|&s| self.slots[s].kv.is_none())
            .ok_or(Full)?;
        let mut plan = self.clone();
        let mut empty = far;
        while g.distance(h, empty) >= g.neighbourhood() {
            empty = plan.hop_toward(empty).ok_or(Full)?;
        }
        plan.slots[empty].kv = Some((key, value));
        plan.slots[h].hop |= 1 << g.distance(h, empty);
        *self = plan;
        Ok(Touched {
            first: h,
            count: g.distance(h, far) + 1,
        })
    }

    /// Moves into the empty slot `empty` a key from one of the `H - 1` slots before it whose
    /// neighbourhood reaches it (the one farthest back first: that frees the slot closest to
    /// the home being filled); the slot it left, now empty.
    fn hop_toward(&mut self, empty: usize) -> Option<usize> {
        let g = self.geometry;
        for back in (1..g.neighbourhood()).rev() {
            let b = g.before(empty, back);
            // Keys homed at `b` lying before `empty` (at distance below `back`): the first.
            let hop = self.slots[b].hop;
            let Some(d) = (0..back).find(|d| hop >> d & 1 == 1) else {
                continue;
            };
            let from = g.after(b, d);
            self.slots[empty].kv = self.slots[from].kv.take();
            self.slots[b].hop = hop & !(1 << d) | 1 << back;
            return Some(from);
        }
        None
    }

    /// Removes `key`; the slots rewritten (its home's bitmap and its slot), `None` if absent.
    pub fn remove(&mut self, key: u64) -> Option<Touched> {
        let g = self.geometry;
        let s = self.find(key)?;
        let h = g.home(key);
        self.slots[s].kv = None;
        self.slots[h].hop &= !(1 << g.distance(h, s));
        Some(Touched {
            first: h,
            count: g.distance(h, s) + 1,
        })
    }

    /// Splits at the median key: keys at or above the separator move, each to the same slot
    /// of the right leaf (so no key moves within a leaf and both keep the invariants); the left
    /// keeps the others and points at the right leaf, `right_page`. Both take the next
    /// version. `None` for a leaf of fewer than two keys.
    pub fn split(&self, right_page: u64) -> Option<(Leaf, Leaf, u64)> {
        let mut keys: Vec<u64> = self.entries().map(|(k, _)| k).collect();
        if keys.len() < 2 {
            return None;
        }
        keys.sort_unstable();
        let separator = keys[keys.len() / 2];
        let version = next_version(self.version);
        let mut left = Leaf {
            sibling: right_page,
            high: Some(separator),
            version,
            ..Leaf::new(self.geometry, None)
        };
        let mut right = Leaf {
            sibling: self.sibling,
            high: self.high,
            version,
            ..Leaf::new(self.geometry, None)
        };
        for (s, e) in self.slots.iter().enumerate() {
            if let Some((k, v)) = e.kv {
                let side = if k < separator { &mut left } else { &mut right };
                side.slots[s].kv = Some((k, v));
            }
        }
        left.rebuild_hops();
        right.rebuild_hops();
        Some((left, right, separator))
    }

    /// Every hop bitmap again from the keys' places.
    fn rebuild_hops(&mut self) {
        let g = self.geometry;
        for e in &mut self.slots {
            e.hop = 0;
        }
        for s in 0..g.slots() {
            if let Some((k, _)) = self.slots[s].kv {
                let h = g.home(k);
                self.slots[h].hop |= 1 << g.distance(h, s);
            }
        }
    }

    /// Whether the invariants hold (every key in its neighbourhood and named by its home's
    /// bitmap, every bit naming one; keys unique and below the high fence).
    pub fn check(&self) -> Result<(), String> {
        let g = self.geometry;
        let mut rebuilt = self.clone();
        rebuilt.rebuild_hops();
        let mut seen = std::collections::BTreeSet::new();
        for (s, e) in self.slots.iter().enumerate() {
            if let Some((k, _)) = e.kv {
                let h = g.home(k);
                if g.distance(h, s) >= g.neighbourhood() {
                    return Err(format!(
                        "key {k} in slot {s}, {} from home {h}",
                        g.distance(h, s)
                    ));
                }
                if !seen.insert(k) {
                    return Err(format!("key {k} twice"));
                }
                if self.high.is_some_and(|hi| k >= hi) {
                    return Err(format!("key {k} at or above the high fence"));
                }
            }
            if e.hop != rebuilt.slots[s].hop {
                return Err(format!(
                    "slot {s}: hop bitmap {:#x}, keys say {:#x}",
                    e.hop, rebuilt.slots[s].hop
                ));
            }
        }
        Ok(())
    }

    /// The leaf's words (tail included) as page `page` holds them.
    pub fn encode(&self, page: u64) -> Vec<u64> {
        let g = self.geometry;
        let mut words = vec![0u64; g.leaf_words()];
        let meta = Meta {
            sibling: self.sibling,
            flags: VALID,
            version: self.version,
        };
        for group in 0..g.groups() {
            let at = g.meta_word(group);
            words[at..at + 2].copy_from_slice(&meta.encode(page, group));
        }
        for (s, e) in self.slots.iter().enumerate() {
            let at = g.slot_word(s);
            let e = Entry {
                version: self.version,
                ..*e
            };
            words[at..at + 3].copy_from_slice(&e.encode(page, s));
        }
        words[g.tail_word()] = self.vacancy();
        let tail = Tail {
            high: self.high,
            version: self.version,
        };
        words[g.high_word()..g.high_word() + 2].copy_from_slice(&tail.encode(page));
        words
    }

    /// The leaf of page `page` from its words, tail included, as a reader without the lock
    /// must take it: `None` if a slot, metadata copy or the tail does not check, their versions
    /// differ (a split landed during the READ), or the hop bitmaps disagree with the keys'
    /// places (a displacement did: a key it moved may be in neither slot or in both). The
    /// reader reads again.
    pub fn decode(geometry: Geometry, page: u64, words: &[u64]) -> Option<Self> {
        Self::decode_unchecked(geometry, page, words).filter(|leaf| leaf.check().is_ok())
    }

    /// [`Leaf::decode`] without the hopscotch invariants checked ([`Leaf::check`] says which
    /// fails: what `verify` reports).
    pub fn decode_unchecked(geometry: Geometry, page: u64, words: &[u64]) -> Option<Self> {
        let g = geometry;
        if words.len() < g.leaf_words() {
            return None;
        }
        let window = Window::decode(g, page, &[g.spans(0, g.slots())[0]], words)?;
        let tail = window.tail(page, &words[g.tail_word()..g.tail_word() + TAIL_WORDS])?;
        let mut slots = vec![Entry::default(); g.slots()];
        for (s, e) in window.slots {
            slots[s] = e;
        }
        Some(Self {
            geometry,
            sibling: window.sibling,
            high: tail.high,
            version: window.version,
            slots,
        })
    }

    /// The words of the slots `touched` names, as spans of page `page` with their words (the
    /// WRITEs a change needs).
    pub fn touched_words(&self, page: u64, touched: Touched) -> Vec<(Span, Vec<u64>)> {
        let words = self.encode(page);
        self.geometry
            .spans(touched.first, touched.count)
            .into_iter()
            .map(|span| (span, words[span.start..span.start + span.len].to_vec()))
            .collect()
    }
}

/// What a READ of some spans of a leaf shows, validated: the slots it holds, and the metadata
/// every copy in it agrees on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The right sibling.
    pub sibling: u64,
    /// Whether the leaf is in use.
    pub valid: bool,
    /// The leaf version every word read carries.
    pub version: u16,
    /// The slots read, in the order read.
    pub slots: Vec<(usize, Entry)>,
}

/// A lookup in a [`Window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// The key's value.
    Found(u64),
    /// Absent from the leaf.
    Absent,
    /// The window disagrees with itself (a writer's displacement landed during the READ): read
    /// again.
    Inconsistent,
}

impl Window {
    /// The window of page `page` read as `spans`, their words concatenated in `words`; `None`
    /// if a slot or metadata copy does not check, versions differ, or no copy was read.
    pub fn decode(geometry: Geometry, page: u64, spans: &[Span], words: &[u64]) -> Option<Self> {
        let g = geometry;
        let mut at = 0;
        let mut meta: Option<Meta> = None;
        let mut slots = Vec::new();
        let mut versions = Vec::new();
        for span in spans {
            let part = words.get(at..at + span.len)?;
            at += span.len;
            let mut w = 0;
            while w < part.len() {
                match g.word_at(span.start + w) {
                    WordAt::Sibling(group) => {
                        let m = Meta::decode(page, group, [part[w], *part.get(w + 1)?])?;
                        if meta.is_some_and(|seen| seen != m) {
                            return None;
                        }
                        meta = Some(m);
                        w += 2;
                    }
                    WordAt::Slot { slot, part: 0 } => {
                        let e = Entry::decode(
                            page,
                            slot,
                            [part[w], *part.get(w + 1)?, *part.get(w + 2)?],
                        )?;
                        versions.push(e.version);
                        slots.push((slot, e));
                        w += 3;
                    }
                    // A span begins at a slot's key or a group's sibling word.
                    _ => return None,
                }
            }
        }
        let meta = meta?;
        if versions.iter().any(|&v| v != meta.version) {
            return None;
        }
        Some(Self {
            sibling: meta.sibling,
            valid: meta.flags & VALID != 0,
            version: meta.version,
            slots,
        })
    }

    /// The tail read as `words` (vacancy word, high fence, tail word) beside this window:
    /// `None` unless it checks and carries the window's version.
    pub fn tail(&self, page: u64, words: &[u64]) -> Option<Tail> {
        let tail = Tail::decode(page, [*words.get(1)?, *words.get(2)?])?;
        (tail.version == self.version).then_some(tail)
    }

    /// The slot holding `key` in the window and its value.
    pub fn find(&self, geometry: Geometry, key: u64) -> Option<(usize, u64)> {
        let h = geometry.home(key);
        self.slots.iter().find_map(|&(s, e)| match e.kv {
            Some((k, v)) if k == key && geometry.distance(h, s) < geometry.neighbourhood() => {
                Some((s, v))
            }
            _ => None,
        })
    }

    fn entry(&self, slot: usize) -> Option<Entry> {
        self.slots.iter().find(|e| e.0 == slot).map(|e| e.1)
    }

    /// Under the leaf's lock, with the window read at `key`'s home: sets `key` to `value` in
    /// place, or puts it in the first free slot of its neighbourhood. The slots to WRITE and the
    /// vacancy word after, or `None` when the neighbourhood has no free slot (the writer reads
    /// the whole leaf). `vacancy` is the vacancy word read with the window.
    pub fn set(
        &self,
        geometry: Geometry,
        key: u64,
        value: u64,
        vacancy: u64,
    ) -> Option<(Vec<(usize, Entry)>, u64)> {
        let g = geometry;
        let version = self.version;
        if let Some((s, _)) = self.find(g, key) {
            let e = self.entry(s)?;
            let e = Entry {
                kv: Some((key, value)),
                version,
                ..e
            };
            return Some((vec![(s, e)], vacancy));
        }
        let h = g.home(key);
        let (d, free) = (0..g.neighbourhood())
            .map(|d| (d, g.after(h, d)))
            .find(|&(_, s)| self.entry(s).is_some_and(|e| e.kv.is_none()))?;
        let mut home_entry = self.entry(h)?;
        home_entry.hop |= 1 << d;
        home_entry.version = version;
        let mut new = self.entry(free)?;
        new.kv = Some((key, value));
        new.version = version;
        if free == h {
            new.hop = home_entry.hop;
            return Some((vec![(h, new)], mark(vacancy, h, true)));
        }
        Some((
            vec![(h, home_entry), (free, new)],
            mark(vacancy, free, true),
        ))
    }

    /// The WRITEs of `slots` (changed entries of this window's leaf, page `page`): runs of
    /// neighbouring slots go as one span each, with the metadata copies between them as the
    /// window read them.
    pub fn writes(
        &self,
        geometry: Geometry,
        page: u64,
        slots: &[(usize, Entry)],
    ) -> Vec<(Span, Vec<u64>)> {
        let g = geometry;
        let mut sorted: Vec<(usize, Entry)> = slots.to_vec();
        sorted.sort_unstable_by_key(|e| e.0);
        let meta = Meta {
            sibling: self.sibling,
            flags: if self.valid { VALID } else { 0 },
            version: self.version,
        };
        let mut out = Vec::new();
        let mut i = 0;
        while i < sorted.len() {
            let mut j = i + 1;
            while j < sorted.len() && sorted[j].0 == sorted[j - 1].0 + 1 {
                j += 1;
            }
            let run = &sorted[i..j];
            let at = |slot: usize| run.iter().find(|e| e.0 == slot).map(|e| e.1);
            // A run's span starts at its first slot's key, not at a group's metadata.
            let first = run[0].0;
            let start = g.slot_word(first);
            let end = g.slot_word(run[run.len() - 1].0) + SLOT_WORDS;
            let mut words = Vec::with_capacity(end - start);
            let mut w = start;
            while w < end {
                match g.word_at(w) {
                    WordAt::Sibling(group) => {
                        words.extend_from_slice(&meta.encode(page, group));
                        w += 2;
                    }
                    WordAt::Slot { slot, .. } => {
                        let e = at(slot).unwrap_or_default();
                        words.extend_from_slice(&e.encode(page, slot));
                        w += SLOT_WORDS;
                    }
                    WordAt::Meta(_) | WordAt::Tail => break,
                }
            }
            out.push((
                Span {
                    start,
                    len: words.len(),
                },
                words,
            ));
            i = j;
        }
        out
    }

    /// Under the leaf's lock, with the window read from `key`'s home through the first free
    /// slot after it (the vacancy word says where): puts `key` in, moving keys along
    /// (hopscotch displacement) exactly as a writer of the whole leaf would, which touches no
    /// slot outside that range. The slots to WRITE; `Some(Err(Full))` when no move brings a
    /// free slot within reach of the home (the leaf must split); `None` when the window does
    /// not reach a free slot (read more).
    pub fn insert_moving(
        &self,
        geometry: Geometry,
        key: u64,
        value: u64,
    ) -> Option<Result<Vec<(usize, Entry)>, Full>> {
        let g = geometry;
        let mut leaf = Leaf {
            sibling: self.sibling,
            version: self.version,
            ..Leaf::new(g, None)
        };
        let mut known = vec![false; g.slots()];
        for &(s, e) in &self.slots {
            leaf.slots[s] = e;
            known[s] = true;
        }
        let h = g.home(key);
        // The slots the insert may touch, from the home to the first free one, must be known.
        for (known, slot) in known.iter().zip(&leaf.slots).skip(h) {
            if !known {
                return None;
            }
            if slot.kv.is_none() {
                break;
            }
        }
        let touched = match leaf.insert(key, value) {
            Ok(t) => t,
            Err(Full) => return Some(Err(Full)),
        };
        Some(Ok((0..touched.count)
            .map(|d| {
                let s = g.after(touched.first, d);
                let e = Entry {
                    version: self.version,
                    ..leaf.slots[s]
                };
                (s, e)
            })
            .collect()))
    }

    /// Under the leaf's lock, with the window read at `key`'s home: removes `key`. The slots to
    /// WRITE and the vacancy word after, or `None` if the window does not hold it.
    pub fn remove(
        &self,
        geometry: Geometry,
        key: u64,
        vacancy: u64,
    ) -> Option<(Vec<(usize, Entry)>, u64)> {
        let g = geometry;
        let (s, _) = self.find(g, key)?;
        let h = g.home(key);
        let d = g.distance(h, s);
        let mut home_entry = self.entry(h)?;
        home_entry.hop &= !(1 << d);
        home_entry.version = self.version;
        let mut gone = self.entry(s)?;
        gone.kv = None;
        gone.version = self.version;
        if s == h {
            gone.hop = home_entry.hop;
            return Some((vec![(h, gone)], mark(vacancy, h, false)));
        }
        Some((vec![(h, home_entry), (s, gone)], mark(vacancy, s, false)))
    }

    /// What the window says of `key`, whose home slot it must hold with the `H` after it.
    pub fn lookup(&self, geometry: Geometry, key: u64) -> Lookup {
        let g = geometry;
        let h = g.home(key);
        let mut rebuilt = 0u16;
        let mut bitmap = None;
        for &(s, e) in &self.slots {
            if s == h {
                bitmap = Some(e.hop);
            }
            let d = g.distance(h, s);
            if d >= g.neighbourhood() {
                continue;
            }
            if let Some((k, v)) = e.kv {
                if k == key {
                    return Lookup::Found(v);
                }
                if g.home(k) == h {
                    rebuilt |= 1 << d;
                }
            }
        }
        match bitmap {
            Some(b) if b == rebuilt => Lookup::Absent,
            _ => Lookup::Inconsistent,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use quickcheck::{TestResult, quickcheck};

    use super::*;

    fn small() -> Geometry {
        Geometry::new(16, 4).expect("shape")
    }

    /// The words of `spans` of `words`, concatenated (what a batch of READs returns).
    fn read(words: &[u64], spans: &[Span]) -> Vec<u64> {
        spans
            .iter()
            .flat_map(|s| words[s.start..s.start + s.len].iter().copied())
            .collect()
    }

    quickcheck! {
        /// Inserts and removes agree with a map, keep the invariants, and every key is found by
        /// a READ of its neighbourhood alone.
        fn a_leaf_agrees_with_a_map(ops: Vec<(bool, u8, u64)>) -> bool {
            let g = small();
            let mut leaf = Leaf::new(g, None);
            let mut model = BTreeMap::new();
            for (insert, key, value) in ops {
                let key = u64::from(key % 40);
                if insert {
                    match leaf.insert(key, value) {
                        Ok(_) => { model.insert(key, value); }
                        Err(Full) => assert!(model.len() >= g.neighbourhood() && !model.contains_key(&key)),
                    }
                } else {
                    assert_eq!(leaf.remove(key).is_some(), model.remove(&key).is_some());
                }
                leaf.check().expect("invariants");
            }
            let words = leaf.encode(9);
            for key in 0..40u64 {
                let spans = g.neighbourhood_spans(g.home(key));
                let window = Window::decode(g, 9, &spans, &read(&words, &spans)).expect("whole");
                let want = model.get(&key).map_or(Lookup::Absent, |&v| Lookup::Found(v));
                assert_eq!(window.lookup(g, key), want, "key {key}");
            }
            Leaf::decode(g, 9, &words).as_ref() == Some(&leaf)
        }

        /// A writer that READ only a key's neighbourhood and the vacancy word (under the lock)
        /// changes the leaf as a writer of the whole leaf would: the same leaf after, or, for
        /// an insert, no change when the neighbourhood has no room.
        fn a_change_from_one_window_is_the_whole_leafs(keys: Vec<u8>, op: (bool, u8, u64)) -> bool {
            let g = small();
            let mut leaf = Leaf::new(g, None);
            for k in keys {
                let _ = leaf.insert(u64::from(k % 40), 1);
            }
            let (insert, key, value) = (op.0, u64::from(op.1 % 40), op.2);
            let mut words = leaf.encode(9);
            let spans = g.neighbourhood_spans(g.home(key));
            let window = Window::decode(g, 9, &spans, &read(&words, &spans)).expect("whole");
            let vacancy = words[g.tail_word()];
            let change = if insert {
                window.set(g, key, value, vacancy)
            } else {
                window.remove(g, key, vacancy)
            };
            let mut whole = leaf.clone();
            let Some((slots, after)) = change else {
                // No room in the window (the whole leaf is read next), or nothing to remove.
                return if insert {
                    let h = g.home(key);
                    (0..g.neighbourhood()).all(|d| leaf.slot(g.after(h, d)).kv.is_some())
                } else {
                    whole.remove(key).is_none()
                };
            };
            for (span, w) in window.writes(g, 9, &slots) {
                words[span.start..span.start + span.len].copy_from_slice(&w);
            }
            words[g.tail_word()] = after;
            if insert {
                whole.insert(key, value).expect("room");
            } else {
                whole.remove(key).expect("present");
            }
            whole.check().expect("invariants");
            words == whole.encode(9)
        }

        /// An insert from a window READ from the key's home through the first free slot (as
        /// the vacancy word names it) changes the leaf as an insert into the whole leaf would,
        /// moving keys along if it must; `Full` exactly when the whole leaf's insert is.
        fn an_insert_from_home_to_the_first_free_slot_is_the_whole_leafs(keys: Vec<u8>, key: u8, value: u64) -> bool {
            let g = small();
            let mut leaf = Leaf::new(g, None);
            for k in keys {
                let _ = leaf.insert(u64::from(k % 40), 1);
            }
            let key = u64::from(key % 40);
            let mut words = leaf.encode(9);
            let h = g.home(key);
            let Some(d) = crate::vacancy::first_free(g, h, words[g.tail_word()]) else {
                return leaf.clone().insert(key, value).is_err() || leaf.find(key).is_some();
            };
            let spans = g.spans(h, (d + 1).max(g.neighbourhood()));
            let window = Window::decode(g, 9, &spans, &read(&words, &spans)).expect("whole");
            let mut whole = leaf.clone();
            let expected = whole.insert(key, value);
            match window.insert_moving(g, key, value).expect("reaches a free slot") {
                Err(Full) => expected.is_err(),
                Ok(slots) => {
                    for (span, w) in window.writes(g, 9, &slots) {
                        words[span.start..span.start + span.len].copy_from_slice(&w);
                    }
                    words[g.tail_word()] = whole.vacancy();
                    expected.is_ok() && words == whole.encode(9)
                }
            }
        }

        /// A split keeps every key on the side of the separator it belongs to, the invariants on
        /// both sides, and the left pointing at the right.
        fn a_split_keeps_every_key(keys: Vec<u16>) -> TestResult {
            let g = Geometry::default();
            let mut leaf = Leaf::new(g, Some(1 << 20));
            for k in keys {
                let _ = leaf.insert(u64::from(k), u64::from(k) + 1);
            }
            let Some((left, right, sep)) = leaf.split(77) else {
                return TestResult::discard();
            };
            left.check().expect("left");
            right.check().expect("right");
            assert_eq!((left.sibling, left.high, right.high), (77, Some(sep), Some(1 << 20)));
            for (k, v) in leaf.entries() {
                let side = if k < sep { &left } else { &right };
                assert_eq!(side.get(k), Some(v));
            }
            TestResult::from_bool(left.len() + right.len() == leaf.len() && !left.is_empty())
        }

        /// A neighbourhood READ that lands while a WRITE of the slots an insert or remove
        /// rewrote is landing word by word (any mix of old and new words) is refused, reads as
        /// inconsistent, or gives the key's state before or after the change.
        fn a_read_torn_by_a_write_gives_before_or_after(seed: Vec<u8>, key: u8, insert: bool, mask: Vec<bool>) -> bool {
            let g = small();
            let mut before = Leaf::new(g, None);
            for k in seed {
                let _ = before.insert(u64::from(k % 40), u64::from(k));
            }
            let key = u64::from(key % 40);
            let mut after = before.clone();
            let changed = if insert { after.insert(key, 1000).is_ok() } else { after.remove(key).is_some() };
            if !changed {
                return true;
            }
            let (old, new) = (before.encode(3), after.encode(3));
            let torn: Vec<u64> = (0..old.len())
                .map(|i| if mask.get(i % mask.len().max(1)).copied().unwrap_or(false) { new[i] } else { old[i] })
                .collect();
            for probe in 0..40u64 {
                let spans = g.neighbourhood_spans(g.home(probe));
                let Some(window) = Window::decode(g, 3, &spans, &read(&torn, &spans)) else {
                    continue;
                };
                let was = before.get(probe).map_or(Lookup::Absent, Lookup::Found);
                let is = after.get(probe).map_or(Lookup::Absent, Lookup::Found);
                let got = window.lookup(g, probe);
                if got != Lookup::Inconsistent && got != was && got != is {
                    return false;
                }
            }
            // A whole leaf read so is refused, or gives every key its state before or after.
            if let Some(leaf) = Leaf::decode(g, 3, &torn) {
                return (0..40u64).all(|probe| {
                    let got = leaf.get(probe);
                    got == before.get(probe) || got == after.get(probe)
                });
            }
            true
        }
    }

    quickcheck! {
        /// An insert that finds room fills the first free slot the word names, or one nearer
        /// its home (moving keys toward it), never beyond it.
        fn an_insert_fills_no_slot_past_the_first_free_one(keys: Vec<u16>, key: u16) -> bool {
            let g = Geometry::default();
            let mut leaf = Leaf::new(g, None);
            for k in keys {
                let _ = leaf.insert(u64::from(k), 1);
            }
            let word = leaf.vacancy();
            let key = u64::from(key);
            let h = g.home(key);
            let present = leaf.find(key).is_some();
            match (leaf.insert(key, 2), crate::vacancy::first_free(g, h, word)) {
                (Ok(_), _) if present => true,
                (Ok(touched), Some(d)) => touched.first == h && touched.count == d + 1,
                (Ok(_), None) => false,
                (Err(_), _) => true,
            }
        }
    }

    /// A READ runs through a leaf's words in ascending order while writers change it (their
    /// WRITEs landing word by word in ascending order too, interleaved with the READ at
    /// random): whatever it shows, a whole-leaf READ that decodes holds every key present
    /// throughout, and a neighbourhood READ that finds a key present throughout absent reads as
    /// inconsistent. Runs many cases of random writes on a small leaf (moves across the last
    /// slot, had neighbourhoods wrapped, would hide keys).
    #[test]
    fn a_read_racing_many_writes_misses_no_key_present_throughout() {
        fn case(seed: u64) -> Result<(), String> {
            let g = Geometry::new(16, 4).expect("shape");
            let mut random = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = |n: u64| {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                random % n
            };
            let mut leaf = Leaf::new(g, None);
            for _ in 0..next(14) {
                let _ = leaf.insert(next(40), 1);
            }
            // The states the leaf goes through while the READ runs, and which word of the READ
            // each is first seen at.
            let mut states = vec![leaf.encode(3)];
            let mut kept: Vec<u64> = leaf.entries().map(|e| e.0).collect();
            for _ in 0..1 + next(6) {
                let key = next(40);
                if next(2) == 0 {
                    let _ = leaf.insert(key, 2);
                } else {
                    leaf.remove(key);
                    kept.retain(|&k| k != key);
                }
                states.push(leaf.encode(3));
            }
            kept.retain(|&k| leaf.find(k).is_some());
            // The writes land word by word in ascending order, one after another, and the READ
            // takes the words in ascending order: the two run interleaved at random.
            let words = g.leaf_words();
            let mut landing: Vec<(usize, usize)> = Vec::new();
            for j in 1..states.len() {
                landing.extend(
                    (0..words)
                        .filter(|&w| states[j][w] != states[j - 1][w])
                        .map(|w| (j, w)),
                );
            }
            let mut memory = states[0].clone();
            let mut landed = landing.into_iter().peekable();
            let mut torn = Vec::with_capacity(words);
            for w in 0..words {
                while landed.peek().is_some() && next(3) == 0 {
                    if let Some((j, x)) = landed.next() {
                        memory[x] = states[j][x];
                    }
                }
                torn.push(memory[w]);
            }
            if let Some(read) = Leaf::decode(g, 3, &torn) {
                for &k in &kept {
                    if read.find(k).is_none() {
                        return Err(format!("seed {seed}: a whole READ lost {k}"));
                    }
                }
            }
            for &k in &kept {
                let spans = g.neighbourhood_spans(g.home(k));
                let Some(window) = Window::decode(g, 3, &spans, &read(&torn, &spans)) else {
                    continue;
                };
                if window.lookup(g, k) == Lookup::Absent {
                    return Err(format!("seed {seed}: a neighbourhood READ lost {k}"));
                }
            }
            Ok(())
        }
        for seed in 0..200_000 {
            case(seed).expect("no key present throughout is lost");
        }
    }

    /// A whole-leaf READ that sees a displacement half landed (the moved key gone from its old
    /// slot, not yet in its new one) is refused, though every slot in it checks.
    #[test]
    fn a_whole_read_missing_a_moved_key_is_refused() {
        let g = Geometry::new(8, 4).expect("shape");
        let mut found = 0;
        for base in 0..200u64 {
            let mut before = Leaf::new(g, None);
            for k in base..base + 6 {
                let _ = before.insert(k * 31, k);
            }
            for j in 0..300u64 {
                let mut after = before.clone();
                if before.find(j).is_some() || after.insert(j, 0).is_err() {
                    continue;
                }
                let Some((k, _)) = before
                    .entries()
                    .find(|e| after.find(e.0) != before.find(e.0))
                else {
                    continue;
                };
                let (old, mut torn) = (before.encode(3), after.encode(3));
                let at = g.slot_word(after.find(k).expect("moved"));
                torn[at..at + 3].copy_from_slice(&old[at..at + 3]);
                let raw = Leaf::decode_unchecked(g, 3, &torn).expect("every slot checks");
                assert_eq!(raw.get(k), None, "the moved key is in neither slot");
                assert_eq!(Leaf::decode(g, 3, &torn), None, "base {base}, insert {j}");
                found += 1;
            }
        }
        assert!(found > 10, "displacements found: {found}");
    }

    #[test]
    fn a_read_across_a_split_is_refused() {
        let g = small();
        let mut leaf = Leaf::new(g, None);
        for k in 0..10 {
            leaf.insert(k, k).expect("room");
        }
        let (left, _, _) = leaf.split(5).expect("split");
        let (old, new) = (leaf.encode(3), left.encode(3));
        // The first half of the words new, the rest old: every window that spans both is refused.
        let cut = g.meta_word(2);
        let torn: Vec<u64> = (0..old.len())
            .map(|i| if i < cut { new[i] } else { old[i] })
            .collect();
        let spans = g.spans(6, 4); // slots 6..9: group 1's last two, group 2's first two
        assert!(Window::decode(g, 3, &spans, &read(&torn, &spans)).is_none());
    }

    #[test]
    fn a_full_neighbourhood_makes_room_by_moving_keys_along() {
        let g = small();
        // Keys homed at one slot fill its neighbourhood; one more is Full, the leaf unchanged.
        let h = g.home(0);
        let same: Vec<u64> = (0..100_000u64)
            .filter(|&k| g.home(k) == h)
            .take(5)
            .collect();
        let mut leaf = Leaf::new(g, None);
        for &k in &same[..4] {
            leaf.insert(k, k).expect("room");
        }
        let before = leaf.clone();
        assert_eq!(leaf.insert(same[4], 1), Err(Full));
        assert_eq!(leaf, before);
        // Keys homed one slot later must hop past them: each lands within its neighbourhood.
        let mut leaf = Leaf::new(g, None);
        let next: Vec<u64> = (0..100_000u64)
            .filter(|&k| g.home(k) == g.after(h, 1))
            .take(2)
            .collect();
        for &k in same[..2].iter().chain(&next) {
            leaf.insert(k, k).expect("room");
        }
        leaf.check().expect("invariants");
        let touched = leaf.insert(same[2], 9).expect("room");
        leaf.check().expect("invariants after a displacement");
        assert_eq!(touched.first, h);
        assert_eq!(leaf.get(same[2]), Some(9));
    }

    #[test]
    fn homes_spread_over_the_slots() {
        let mut counts = [0u32; 64];
        let g = Geometry::default();
        for k in 0..57_000u64 {
            counts[g.home(k)] += 1;
        }
        assert!(
            counts[..57].iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert!(
            counts[57..].iter().all(|&c| c == 0),
            "the last H - 1 slots are no home"
        );
    }
}
