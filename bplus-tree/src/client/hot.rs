//! The compute node's buffer of hot entries (CHIME's hotness-aware speculative read): where in
//! its hopscotch leaf a key was last found, so that a GET of a hot key READs that one slot
//! (24 bytes) instead of the neighbourhood, and needs no internal page.
//!
//! **Invariant.** An entry is a hint, never an answer: a speculative READ is taken only when the
//! slot it names checks (key, value and entry word agree, seeded with its page and slot) and
//! holds the key. A slot holds a key only while its leaf holds it (a split empties the slots of
//! keys it moves, and pages are never freed, so the slot is always a leaf's), and no other leaf
//! holds that key with another value meanwhile (the right half of a split is unreachable until
//! its left half is written, and no writer changes the key there before): the value read was
//! the key's at the moment of the READ. A slot that no longer holds the key sends the GET the
//! usual way, which puts the key's new place in the buffer (or takes it out if absent).
//!
//! Entries are kept in shards, each evicting in CLOCK order once full: keys read often stay
//! (CHIME admits by hotness; CLOCK keeps what is read again before the hand comes round).

use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes an entry counts against the cache budget: key, page, slot, as CHIME's buffer keeps them
/// (the map's own overhead on the compute node is left out, as for cached pages).
pub const HOT_ENTRY_BYTES: u64 = 24;

/// Shards of the buffer (threads of one compute node meet on one only for keys of one shard).
const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Place {
    key: u64,
    node: usize,
    page: u64,
    slot: u16,
    referenced: bool,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<u64, usize>,
    ring: Vec<Place>,
    hand: usize,
}

/// Where hot keys were last found.
#[derive(Debug)]
pub(super) struct HotEntries {
    shards: Vec<Mutex<Shard>>,
    /// Entries a shard holds at most.
    per_shard: usize,
}

fn shard_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
}

impl HotEntries {
    /// A buffer of at most `bytes` bytes of entries (none below one entry per shard).
    pub(super) fn new(bytes: u64) -> Self {
        let entries = usize::try_from(bytes / HOT_ENTRY_BYTES).unwrap_or(usize::MAX);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: entries / SHARDS,
        }
    }

    /// Whether it holds nothing, ever.
    pub(super) fn is_off(&self) -> bool {
        self.per_shard == 0
    }

    /// Bytes of the entries held.
    pub(super) fn bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len() as u64)
            .sum::<u64>()
            * HOT_ENTRY_BYTES
    }

    /// Where `key` was last found on memory node `node`: its leaf page and slot.
    pub(super) fn get(&self, node: usize, key: u64) -> Option<(u64, usize)> {
        if self.is_off() {
            return None;
        }
        let mut shard = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let &i = shard.map.get(&key)?;
        let place = &mut shard.ring[i];
        if place.node != node {
            return None;
        }
        place.referenced = true;
        Some((place.page, usize::from(place.slot)))
    }

    /// Records that `key` lies in slot `slot` of leaf `page` on memory node `node`.
    pub(super) fn put(&self, node: usize, key: u64, page: u64, slot: usize) {
        if self.is_off() {
            return;
        }
        let mut shard = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let place = Place {
            key,
            node,
            page,
            slot: slot as u16,
            referenced: false,
        };
        if let Some(&i) = shard.map.get(&key) {
            shard.ring[i] = Place {
                referenced: true,
                ..place
            };
            return;
        }
        if shard.ring.len() < self.per_shard {
            shard.ring.push(place);
            let i = shard.ring.len() - 1;
            shard.map.insert(key, i);
            return;
        }
        // CLOCK: the first entry not read since the hand last passed goes.
        loop {
            let i = shard.hand;
            shard.hand = (shard.hand + 1) % shard.ring.len();
            if shard.ring[i].referenced {
                shard.ring[i].referenced = false;
                continue;
            }
            let old = shard.ring[i].key;
            if shard.map.get(&old) == Some(&i) {
                shard.map.remove(&old);
            }
            shard.ring[i] = place;
            shard.map.insert(key, i);
            return;
        }
    }

    /// Forgets `key` (found absent).
    pub(super) fn forget(&self, key: u64) {
        if self.is_off() {
            return;
        }
        let mut shard = self.shards[shard_of(key)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(i) = shard.map.remove(&key) {
            // The slot stays in the ring, unreferenced: the hand gives it to the next key.
            shard.ring[i].referenced = false;
            shard.ring[i].key = u64::MAX;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    impl HotEntries {
        /// Whether `key` has an entry (without marking it read).
        fn map_holds(&self, key: u64) -> bool {
            let shard = self.shards[shard_of(key)].lock().expect("shard");
            shard.map.contains_key(&key)
        }
    }

    #[test]
    fn entries_are_found_updated_forgotten_and_kept_within_the_budget() {
        let hot = HotEntries::new(HOT_ENTRY_BYTES * SHARDS as u64 * 16);
        assert!(!hot.is_off());
        for k in 0..1000u64 {
            hot.put(0, k, k + 100, (k % 64) as usize);
        }
        assert!(hot.bytes() <= HOT_ENTRY_BYTES * SHARDS as u64 * 16);
        let held: Vec<u64> = (0..1000).filter(|&k| hot.get(0, k).is_some()).collect();
        assert!(!held.is_empty());
        let k = held[0];
        assert_eq!(hot.get(0, k), Some((k + 100, (k % 64) as usize)));
        assert_eq!(hot.get(1, k), None, "another memory node's key");
        hot.put(0, k, 7, 3);
        assert_eq!(hot.get(0, k), Some((7, 3)));
        hot.forget(k);
        assert_eq!(hot.get(0, k), None);
        // A key read again (between fewer new keys than its shard holds) stays while others,
        // never read, come and go.
        let hot = HotEntries::new(HOT_ENTRY_BYTES * SHARDS as u64 * 16);
        for k in 0..1000u64 {
            hot.put(0, k, k + 100, (k % 64) as usize);
        }
        let held: Vec<u64> = (0..1000).filter(|&k| hot.map_holds(k)).collect();
        let keep = held[1];
        for round in 0..200u64 {
            assert!(hot.get(0, keep).is_some(), "round {round}");
            for j in 0..4 {
                hot.put(0, 10_000 + round * 4 + j, 1, 1);
            }
        }
        assert!(
            (0..1000).filter(|&k| hot.map_holds(k)).count() < held.len(),
            "others went"
        );
        assert!(HotEntries::new(0).is_off());
        assert_eq!(HotEntries::new(0).get(0, 1), None);
    }
}
