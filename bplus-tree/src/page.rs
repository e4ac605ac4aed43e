//! Pages: leaves of unsorted entries written one at a time, internal pages of sorted separators.

/// Words of a page's header.
pub const HEADER_WORDS: usize = 8;
/// Flag in the level word: the high fence is +infinity (the page is the last of its level).
const OPEN_HIGH: u64 = 1 << 8;

/// A decoded page.
///
/// ```text
/// word 0   checksum: XXH3-64, seeded with the page number, of words 1..end
/// word 1   leaf: occupancy bitmap (bit i: entry i holds a key); internal: separator count
/// word 2   level (bits 0..8; 0 = leaf) | OPEN_HIGH (bit 8)
/// word 3   low fence (inclusive): the page holds keys ≥ it
/// word 4   high fence (exclusive, unless OPEN_HIGH): the page holds keys < it
/// word 5   right sibling's page number (0: none)
/// word 6   internal: the leftmost child (keys below the first separator)
/// word 7   reserved
/// word 8.. entries, two words each: leaf (key, value) in any order, only the bitmap's count;
///          internal (separator, child) sorted by separator; child i holds keys in
///          [separator i, separator i+1)
/// ```
///
/// A writer changes one leaf entry by WRITEing the entry and words 0..1 (checksum and bitmap) in
/// one batch; a reader accepts a page only if its checksum matches, so a page read while a WRITE
/// was landing (any mix of old and new words) is read again. Sherman's per-entry and per-page
/// versions cannot give that: a reader can see a new front version, an old middle and a new rear
/// version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// 0 for a leaf.
    pub level: u8,
    /// Keys ≥ this.
    pub low: u64,
    /// Keys < this; `None`: no upper bound.
    pub high: Option<u64>,
    /// The right sibling (0: none).
    pub sibling: u64,
    /// Internal pages: the child for keys below the first separator.
    pub leftmost: u64,
    /// Leaves: slot `i` holds `entries[i]` if set; internal pages: sorted (separator, child).
    pub slots: Vec<Option<(u64, u64)>>,
}

impl Page {
    /// An empty page with `capacity` entry slots.
    pub fn new(level: u8, low: u64, high: Option<u64>, capacity: usize) -> Self {
        Self {
            level,
            low,
            high,
            sibling: 0,
            leftmost: 0,
            slots: vec![None; capacity],
        }
    }

    /// Entry slots a page of `page_size` bytes has (at most 64: the bitmap).
    pub fn capacity(page_size: u64) -> usize {
        ((page_size as usize / 8 - HEADER_WORDS) / 2).min(64)
    }

    /// Whether this is a leaf.
    pub fn is_leaf(&self) -> bool {
        self.level == 0
    }

    /// Whether `key` lies inside the fences.
    pub fn covers(&self, key: u64) -> bool {
        key >= self.low && self.high.is_none_or(|h| key < h)
    }

    /// Whether `key` lies at or past the high fence (a reader moves right).
    pub fn past_high(&self, key: u64) -> bool {
        self.high.is_some_and(|h| key >= h)
    }

    /// The entries present, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.slots.iter().flatten().copied()
    }

    /// Leaves: the entries sorted by key.
    pub fn sorted(&self) -> Vec<(u64, u64)> {
        let mut all: Vec<(u64, u64)> = self.entries().collect();
        all.sort_unstable();
        all
    }

    /// Leaves: the value of `key` and its slot.
    pub fn find(&self, key: u64) -> Option<(usize, u64)> {
        self.slots
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.filter(|e| e.0 == key).map(|e| (i, e.1)))
    }

    /// Leaves: a free slot.
    pub fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(Option::is_none)
    }

    /// Internal pages: the child whose range holds `key`.
    pub fn child_for(&self, key: u64) -> u64 {
        let seps: Vec<(u64, u64)> = self.entries().collect();
        let i = seps.partition_point(|s| s.0 <= key);
        if i == 0 { self.leftmost } else { seps[i - 1].1 }
    }

    /// Internal pages: the child after the one whose range holds `key` (`None`: that one is
    /// the page's last).
    pub fn next_child(&self, key: u64) -> Option<u64> {
        let i = self.entries().take_while(|s| s.0 <= key).count();
        self.entries().nth(i).map(|s| s.1)
    }

    /// Encodes the page as page `page` of `page_size` bytes.
    pub fn encode(&self, page: u64, page_size: u64) -> Vec<u8> {
        let words = page_size as usize / 8;
        let mut w = vec![0u64; words];
        if self.is_leaf() {
            w[1] = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_some())
                .fold(0, |m, (i, _)| m | (1 << i));
        } else {
            w[1] = self.entries().count() as u64;
        }
        w[2] = u64::from(self.level) | if self.high.is_none() { OPEN_HIGH } else { 0 };
        w[3] = self.low;
        w[4] = self.high.unwrap_or(0);
        w[5] = self.sibling;
        w[6] = self.leftmost;
        if self.is_leaf() {
            for (i, e) in self.slots.iter().enumerate() {
                if let Some((k, v)) = e {
                    w[HEADER_WORDS + 2 * i] = *k;
                    w[HEADER_WORDS + 2 * i + 1] = *v;
                }
            }
        } else {
            for (i, (k, c)) in self.entries().enumerate() {
                w[HEADER_WORDS + 2 * i] = k;
                w[HEADER_WORDS + 2 * i + 1] = c;
            }
        }
        let mut bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let sum = page_checksum(page, &bytes[8..]);
        bytes[..8].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    /// Decodes page `page` from `bytes`; `None` if the checksum does not match (a torn read, or
    /// a page never written).
    pub fn decode(page: u64, bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 8 * (HEADER_WORDS + 2) {
            return None;
        }
        let word =
            |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap_or_default());
        if word(0) != page_checksum(page, &bytes[8..]) {
            return None;
        }
        let capacity = Self::capacity(bytes.len() as u64);
        let level = (word(2) & 0xff) as u8;
        let high = (word(2) & OPEN_HIGH == 0).then(|| word(4));
        let mut p = Self::new(level, word(3), high, capacity);
        p.sibling = word(5);
        p.leftmost = word(6);
        if level == 0 {
            let bitmap = word(1);
            for i in 0..capacity {
                if bitmap & (1 << i) != 0 {
                    p.slots[i] = Some((word(HEADER_WORDS + 2 * i), word(HEADER_WORDS + 2 * i + 1)));
                }
            }
        } else {
            let n = (word(1) as usize).min(capacity);
            for i in 0..n {
                p.slots[i] = Some((word(HEADER_WORDS + 2 * i), word(HEADER_WORDS + 2 * i + 1)));
            }
        }
        Some(p)
    }
}

/// The checksum of a page's words 1.. (`body`), seeded with its number: a page read from the
/// wrong place fails it too.
pub fn page_checksum(page: u64, body: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(body, page)
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        fn leaves_round_trip(entries: Vec<(u64, u64)>, low: u64, high: Option<u64>, page: u64) -> bool {
            let mut p = Page::new(0, low, high, Page::capacity(1024));
            for (i, e) in entries.into_iter().take(60).enumerate() {
                if i % 3 != 1 {
                    p.slots[i] = Some(e);
                }
            }
            p.sibling = 7;
            Page::decode(page, &p.encode(page, 1024)) == Some(p)
        }

        fn any_flipped_word_or_wrong_page_is_rejected(word: usize, bit: u8, page: u64) -> bool {
            let mut p = Page::new(0, 5, Some(900), Page::capacity(256));
            p.slots[0] = Some((10, 1));
            p.slots[3] = Some((20, 2));
            let good = p.encode(page, 256);
            let mut bad = good.clone();
            let at = 8 * (word % 32) + usize::from(bit % 64) / 8;
            bad[at] ^= 1 << (bit % 8);
            Page::decode(page, &bad).is_none() && Page::decode(page.wrapping_add(1), &good).is_none()
        }
    }

    #[test]
    fn internal_pages_route_by_separator() {
        let mut p = Page::new(1, 0, None, Page::capacity(256));
        p.leftmost = 1;
        p.slots[0] = Some((100, 2));
        p.slots[1] = Some((200, 3));
        assert_eq!(p.child_for(0), 1);
        assert_eq!(p.child_for(99), 1);
        assert_eq!(p.child_for(100), 2);
        assert_eq!(p.child_for(199), 2);
        assert_eq!(p.child_for(u64::MAX), 3);
        assert_eq!(Page::decode(4, &p.encode(4, 256)), Some(p));
        assert_eq!(Page::capacity(1024), 60);
        assert_eq!(Page::capacity(128), 4);
    }
}
