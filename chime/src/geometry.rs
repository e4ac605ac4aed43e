//! A leaf's shape: how many slots, how wide a neighbourhood, and where every word lies.
//!
//! ```text
//! group g (0 ≤ g < slots / H), GROUP_WORDS = 2 + 3·H words from word g · GROUP_WORDS:
//!   +0        sibling page (0: none)                        ┐ the leaf's metadata, one copy
//!   +1        meta word  (crate::word::Meta)                ┘ per group
//!   +2 + 3i   key of slot g·H + i
//!   +3 + 3i   value of slot g·H + i
//!   +4 + 3i   entry word (crate::word::Entry)
//! then the tail:
//!   vacancy word (crate::vacancy), written by lock holders only
//!   high fence: keys of the leaf are below it (u64::MAX when it has no bound)  ┐ checked as one
//!   tail word  (crate::word::Tail)                                             ┘
//! ```
//!
//! Any H consecutive slots contain one group's start or begin right after one, so a
//! neighbourhood READ that starts at its home slot (or, when the home starts a group, at that
//! group's metadata) carries one copy of the metadata: one small READ validates itself.

use crate::ChimeError;

/// Words of a slot: key, value, entry word.
pub const SLOT_WORDS: usize = 3;
/// Words of a group's metadata copy: sibling, meta word.
pub const META_WORDS: usize = 2;
/// Words of the tail: vacancy word, high fence, tail word.
pub const TAIL_WORDS: usize = 3;
/// The largest neighbourhood: the hop bitmap is 16 bits.
pub const MAX_NEIGHBOURHOOD: usize = 16;
/// The most slots a leaf has: a vacancy bitmap covers them from one lock word.
pub const MAX_SLOTS: usize = 64;

/// A leaf's number of slots and neighbourhood size `H` (CHIME's defaults: 64 and 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    slots: usize,
    neighbourhood: usize,
}

impl Default for Geometry {
    fn default() -> Self {
        Self {
            slots: 64,
            neighbourhood: 8,
        }
    }
}

/// A span of a leaf's words: `len` words from word `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First word.
    pub start: usize,
    /// Words.
    pub len: usize,
}

impl Geometry {
    /// `slots` slots in neighbourhoods of `neighbourhood`: `neighbourhood` from 2 to
    /// [`MAX_NEIGHBOURHOOD`], `slots` a multiple of it, at least two groups, at most
    /// [`MAX_SLOTS`].
    pub fn new(slots: usize, neighbourhood: usize) -> Result<Self, ChimeError> {
        if !(2..=MAX_NEIGHBOURHOOD).contains(&neighbourhood) {
            return Err(ChimeError::Config(format!(
                "neighbourhood {neighbourhood}: must be 2 to {MAX_NEIGHBOURHOOD}"
            )));
        }
        if slots > MAX_SLOTS || !slots.is_multiple_of(neighbourhood) || slots < 2 * neighbourhood {
            return Err(ChimeError::Config(format!(
                "{slots} slots: must be a multiple of the neighbourhood ({neighbourhood}), at \
                 least two of them, and at most {MAX_SLOTS}"
            )));
        }
        Ok(Self {
            slots,
            neighbourhood,
        })
    }

    /// Slots of a leaf.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slots that are a key's home: the first `slots - H + 1` (the last `H - 1` only take keys
    /// moved along from the homes before them), so neighbourhoods never wrap past the last slot.
    pub fn homes(&self) -> usize {
        self.slots - self.neighbourhood + 1
    }

    /// The home slot of `key`: a mix of its bits (the splitmix64 finalizer), reduced to
    /// [`Geometry::homes`].
    pub fn home(&self, key: u64) -> usize {
        let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (((z >> 32) * self.homes() as u64) >> 32) as usize
    }

    /// `H`: a key lies within this many slots from its home.
    pub fn neighbourhood(&self) -> usize {
        self.neighbourhood
    }

    /// Groups of a leaf (each with its metadata copy).
    pub fn groups(&self) -> usize {
        self.slots / self.neighbourhood
    }

    /// Words of one group.
    pub fn group_words(&self) -> usize {
        META_WORDS + SLOT_WORDS * self.neighbourhood
    }

    /// Words of a whole leaf, tail included.
    pub fn leaf_words(&self) -> usize {
        self.groups() * self.group_words() + TAIL_WORDS
    }

    /// Bytes of a whole leaf, tail included.
    pub fn leaf_bytes(&self) -> u64 {
        8 * self.leaf_words() as u64
    }

    /// The word of group `g`'s metadata copy (its sibling word; the meta word follows).
    pub fn meta_word(&self, group: usize) -> usize {
        group * self.group_words()
    }

    /// The first word of slot `slot` (its key; value and entry word follow).
    pub fn slot_word(&self, slot: usize) -> usize {
        let (g, i) = (slot / self.neighbourhood, slot % self.neighbourhood);
        self.meta_word(g) + META_WORDS + SLOT_WORDS * i
    }

    /// The tail's first word: the vacancy word.
    pub fn tail_word(&self) -> usize {
        self.groups() * self.group_words()
    }

    /// The high fence's word (the tail word follows).
    pub fn high_word(&self) -> usize {
        self.tail_word() + 1
    }

    /// The tail: vacancy word, high fence, tail word.
    pub fn tail_span(&self) -> Span {
        Span {
            start: self.tail_word(),
            len: TAIL_WORDS,
        }
    }

    /// Slots from `from` to `to`, going up and wrapping around (0 for `to == from`).
    pub fn distance(&self, from: usize, to: usize) -> usize {
        (to + self.slots - from) % self.slots
    }

    /// The slot `d` after `slot`, circularly.
    pub fn after(&self, slot: usize, d: usize) -> usize {
        (slot + d) % self.slots
    }

    /// The slot `d` before `slot`, circularly.
    pub fn before(&self, slot: usize, d: usize) -> usize {
        (slot + self.slots - d % self.slots) % self.slots
    }

    /// The spans that hold slots `first` to `first + count - 1` (circularly), each beginning
    /// at a slot's key (or, for a span that begins at a group's first slot, at that group's
    /// metadata): one span, or two when the slots wrap past the last. Every span carries a
    /// metadata copy when `count` is at least `H`, or when it begins a group.
    pub fn spans(&self, first: usize, count: usize) -> Vec<Span> {
        let count = count.clamp(1, self.slots);
        let start_of = |slot: usize| {
            if slot.is_multiple_of(self.neighbourhood) {
                self.meta_word(slot / self.neighbourhood)
            } else {
                self.slot_word(slot)
            }
        };
        let end_of = |slot: usize| self.slot_word(slot) + SLOT_WORDS;
        if count == self.slots {
            let start = start_of(0);
            return vec![Span {
                start,
                len: end_of(self.slots - 1) - start,
            }];
        }
        let last = first + count - 1;
        if last < self.slots {
            let start = start_of(first);
            return vec![Span {
                start,
                len: end_of(last) - start,
            }];
        }
        let (a, b) = (start_of(first), start_of(0));
        vec![
            Span {
                start: a,
                len: end_of(self.slots - 1) - a,
            },
            Span {
                start: b,
                len: end_of(last - self.slots) - b,
            },
        ]
    }

    /// The spans a lookup of a key homed at `home` READs: its neighbourhood.
    pub fn neighbourhood_spans(&self, home: usize) -> Vec<Span> {
        self.spans(home, self.neighbourhood)
    }

    /// What word `word` of a leaf is.
    pub fn word_at(&self, word: usize) -> WordAt {
        if word >= self.tail_word() {
            return WordAt::Tail;
        }
        let (g, at) = (word / self.group_words(), word % self.group_words());
        match at {
            0 => WordAt::Sibling(g),
            1 => WordAt::Meta(g),
            _ => {
                let i = (at - META_WORDS) / SLOT_WORDS;
                WordAt::Slot {
                    slot: g * self.neighbourhood + i,
                    part: (at - META_WORDS) % SLOT_WORDS,
                }
            }
        }
    }
}

/// What a word of a leaf holds ([`Geometry::word_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordAt {
    /// Group `g`'s copy of the sibling.
    Sibling(usize),
    /// Group `g`'s meta word.
    Meta(usize),
    /// Part `part` (0 key, 1 value, 2 entry word) of slot `slot`.
    Slot {
        /// The slot.
        slot: usize,
        /// 0 key, 1 value, 2 entry word.
        part: usize,
    },
    /// The tail (vacancy word, high fence, tail word).
    Tail,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chime_defaults_make_a_leaf_of_eight_groups() {
        let g = Geometry::default();
        assert_eq!((g.slots(), g.neighbourhood(), g.groups()), (64, 8, 8));
        assert_eq!(g.group_words(), 26);
        assert_eq!(g.leaf_bytes(), 8 * (8 * 26 + 3));
    }

    #[test]
    fn bad_shapes_are_refused() {
        for (s, h) in [(64, 1), (64, 17), (60, 8), (8, 8), (128, 8), (0, 4)] {
            assert!(Geometry::new(s, h).is_err(), "{s} slots, H = {h}");
        }
        assert!(Geometry::new(32, 16).is_ok());
    }

    /// Every neighbourhood's spans hold exactly its slots' words, one metadata copy at least,
    /// and nothing else but metadata.
    #[test]
    fn every_neighbourhood_reads_its_slots_and_a_metadata_copy() {
        for (s, h) in [(64, 8), (32, 4), (48, 16), (16, 2)] {
            let g = Geometry::new(s, h).expect("shape");
            for home in 0..s {
                let spans = g.neighbourhood_spans(home);
                assert!(spans.len() <= 2);
                let mut slots = Vec::new();
                let mut metas = 0;
                for span in &spans {
                    assert!(span.start + span.len <= g.tail_word());
                    for w in span.start..span.start + span.len {
                        match g.word_at(w) {
                            WordAt::Slot { slot, part: 0 } => slots.push(slot),
                            WordAt::Slot { .. } | WordAt::Sibling(_) => {}
                            WordAt::Meta(_) => metas += 1,
                            WordAt::Tail => panic!("tail read"),
                        }
                    }
                }
                let want: Vec<usize> = (0..h).map(|d| g.after(home, d)).collect();
                assert_eq!(slots, want, "{s}/{h} home {home}");
                assert!(metas >= 1, "{s}/{h} home {home}: no metadata copy");
            }
        }
    }

    #[test]
    fn words_map_back_to_what_they_hold() {
        let g = Geometry::default();
        for slot in 0..g.slots() {
            let w = g.slot_word(slot);
            assert_eq!(g.word_at(w), WordAt::Slot { slot, part: 0 });
            assert_eq!(g.word_at(w + 2), WordAt::Slot { slot, part: 2 });
        }
        assert_eq!(g.word_at(g.meta_word(3) + 1), WordAt::Meta(3));
        assert_eq!(g.word_at(g.tail_word()), WordAt::Tail);
        assert_eq!(g.distance(60, 3), 7);
        assert_eq!((g.after(62, 5), g.before(2, 5)), (3, 61));
    }
}
