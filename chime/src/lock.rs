//! A leaf's lock word, with the vacancy bitmap piggybacked on it (CHIME's "vacancy-aware lock").
//!
//! ```text
//! bit  63      LOCKED
//! bits 56..63  the holder's tag (7 bits; 0 when unlocked)
//! bits  0..56  vacancy: bit b set ⇔ every slot of bucket b is taken (a slot's bucket is
//!              slot · buckets / slots, buckets = min(slots, 56))
//! ```
//!
//! The CAS that takes the lock returns the word, so a writer learns for free where the nearest
//! bucket with room lies after its key's home, and READs the leaf only that far
//! ([`insert_read`]). The bitmap is a hint, kept by lock holders: a bucket marked full that has
//! room costs a longer READ, one marked with room that has none a second READ of the rest of
//! the leaf; neither gives a wrong answer.

use crate::geometry::Geometry;
use crate::leaf::Leaf;

/// The lock bit.
pub const LOCKED: u64 = 1 << 63;
const TAG_SHIFT: u32 = 56;
const VACANCY_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// The most vacancy buckets a lock word holds.
pub const MAX_BUCKETS: usize = 56;

/// Buckets of a leaf of `geometry`.
pub fn buckets(geometry: Geometry) -> usize {
    geometry.slots().min(MAX_BUCKETS)
}

/// The bucket of slot `slot`.
pub fn bucket_of(geometry: Geometry, slot: usize) -> usize {
    slot * buckets(geometry) / geometry.slots()
}

/// The vacancy bitmap of `leaf`: exact.
pub fn vacancy(leaf: &Leaf) -> u64 {
    let g = leaf.geometry();
    let mut room = 0u64;
    for s in 0..g.slots() {
        if leaf.slot(s).kv.is_none() {
            room |= 1 << bucket_of(g, s);
        }
    }
    !room & ((1u64 << buckets(g)) - 1)
}

/// The lock word held by `tag` (1 to 127) over `vacancy`.
pub fn locked(tag: u8, vacancy: u64) -> u64 {
    LOCKED | u64::from(tag & 0x7F) << TAG_SHIFT | vacancy & VACANCY_MASK
}

/// The lock word released, with `vacancy`.
pub fn unlocked(vacancy: u64) -> u64 {
    vacancy & VACANCY_MASK
}

/// Whether `word` is held.
pub fn is_locked(word: u64) -> bool {
    word & LOCKED != 0
}

/// The holder's tag (0: none).
pub fn holder(word: u64) -> u8 {
    ((word >> TAG_SHIFT) & 0x7F) as u8
}

/// The vacancy bitmap of `word`.
pub fn vacancy_of(word: u64) -> u64 {
    word & VACANCY_MASK
}

/// Slots an insert of a key homed at `home` READs from it, given `vacancy`: its neighbourhood at
/// least (the key may be there already), and on through the first bucket that begins at or
/// after the home and that the bitmap says has room; the whole leaf if none does. (The home's
/// bucket is skipped if it begins before the home: its room may lie behind it.)
pub fn insert_read(geometry: Geometry, home: usize, vacancy: u64) -> usize {
    let g = geometry;
    let straddles = bucket_of(g, g.before(home, 1)) == bucket_of(g, home);
    for d in 0..g.slots() {
        let s = g.after(home, d);
        if straddles && bucket_of(g, s) == bucket_of(g, home) {
            continue;
        }
        if vacancy >> bucket_of(g, s) & 1 == 0 {
            // Through the bucket's last slot.
            let mut last = d;
            while last + 1 < g.slots() && bucket_of(g, g.after(home, last + 1)) == bucket_of(g, s) {
                last += 1;
            }
            return (last + 1).max(g.neighbourhood());
        }
    }
    g.slots()
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;
    use crate::leaf::home;

    quickcheck! {
        /// The slot an insert fills lies within what `insert_read` says to READ (given the exact
        /// bitmap), and the word keeps tag and bitmap apart.
        fn an_insert_reads_far_enough(keys: Vec<u16>, key: u16, tag: u8) -> bool {
            let g = Geometry::default();
            let mut leaf = Leaf::new(g, None);
            for k in keys {
                let _ = leaf.insert(u64::from(k), 1);
            }
            let v = vacancy(&leaf);
            let word = locked(tag, v);
            assert!(is_locked(word) && holder(word) == tag & 0x7F && vacancy_of(word) == v);
            assert_eq!(vacancy_of(unlocked(v)), v);
            let key = u64::from(key);
            let h = home(key, g.slots());
            let read = insert_read(g, h, v);
            let before = leaf.clone();
            match leaf.insert(key, 2) {
                Ok(touched) => {
                    assert_eq!(touched.first, if before.find(key).is_some() { touched.first } else { h });
                    let end = g.distance(h, touched.first) + touched.count;
                    end <= read
                }
                Err(_) => true,
            }
        }
    }

    /// A bucket of two slots whose room lies before the home does not end the READ there
    /// (found by the property above).
    #[test]
    fn room_behind_the_home_in_its_bucket_does_not_count() {
        let g = Geometry::default();
        let mut leaf = Leaf::new(g, None);
        for k in [6166u64, 16364, 40045, 24480, 46357, 737, 38042, 58463] {
            let _ = leaf.insert(k, 1);
        }
        let key = 20078;
        let h = home(key, g.slots());
        let read = insert_read(g, h, vacancy(&leaf));
        let touched = leaf.insert(key, 2).expect("room");
        assert!(g.distance(h, touched.first) + touched.count <= read);
    }

    #[test]
    fn a_full_leaf_reads_whole_and_an_empty_one_a_neighbourhood() {
        let g = Geometry::default();
        assert_eq!(insert_read(g, 5, 0), g.neighbourhood());
        assert_eq!(insert_read(g, 5, (1 << buckets(g)) - 1), g.slots());
        assert_eq!(buckets(g), 56);
        assert_eq!((bucket_of(g, 0), bucket_of(g, 63)), (0, 55));
    }
}
