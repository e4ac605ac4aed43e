//! Packing sorted keys into leaves, as a bulk load lays them out: each leaf takes keys in order
//! until it holds `fill` of them or the next one finds no room within its neighbourhood (then the
//! leaf closes early rather than split), and its high fence is the next leaf's first key.

use crate::ChimeError;
use crate::geometry::Geometry;
use crate::leaf::{Full, Leaf};

/// `entries` (sorted by key, keys unique) packed into leaves of `geometry` holding up to `fill`
/// keys each, in key order; the last leaf's high fence is `high` (`None`: no bound). Sibling
/// pointers are left 0: the caller links the leaves once it knows their pages ([`link`]).
pub fn pack(
    geometry: Geometry,
    entries: &[(u64, u64)],
    fill: usize,
    high: Option<u64>,
) -> Result<Vec<Leaf>, ChimeError> {
    if fill == 0 || fill > geometry.slots() {
        return Err(ChimeError::Config(format!(
            "fill {fill}: must be 1 to the leaf's {} slots",
            geometry.slots()
        )));
    }
    if entries.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(ChimeError::Config(
            "entries must be sorted by unique keys".into(),
        ));
    }
    let mut leaves = Vec::new();
    let mut leaf = Leaf::new(geometry, None);
    for &(key, value) in entries {
        // A full insert leaves the leaf unchanged: the key goes to a fresh leaf instead.
        if leaf.len() < fill && leaf.insert(key, value).is_ok() {
            continue;
        }
        leaf.high = Some(key);
        leaves.push(std::mem::replace(&mut leaf, Leaf::new(geometry, None)));
        leaf.insert(key, value).map_err(|Full| {
            ChimeError::Config(format!("key {key} finds no room in an empty leaf"))
        })?;
    }
    leaf.high = high;
    leaves.push(leaf);
    Ok(leaves)
}

/// Points each of `leaves` at the next one's page: leaf `i` is at `pages[i]`; the last keeps
/// its sibling.
pub fn link(leaves: &mut [Leaf], pages: &[u64]) {
    for (i, leaf) in leaves.iter_mut().enumerate() {
        if let Some(&next) = pages.get(i + 1) {
            leaf.sibling = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::quickcheck;

    use super::*;

    quickcheck! {
        /// Every key lands in exactly one leaf, below its high fence and at or above the one
        /// before; every leaf keeps the invariants and at most `fill` keys.
        fn every_key_in_one_leaf_within_its_fences(keys: Vec<u32>, fill: u8) -> bool {
            let g = Geometry::default();
            let fill = usize::from(fill % 64) + 1;
            let mut keys: Vec<u64> = keys.into_iter().map(u64::from).collect();
            keys.sort_unstable();
            keys.dedup();
            let entries: Vec<(u64, u64)> = keys.iter().map(|&k| (k, k + 1)).collect();
            let leaves = pack(g, &entries, fill, Some(1 << 40)).expect("pack");
            let mut low = 0;
            let mut seen = 0;
            for leaf in &leaves {
                leaf.check().expect("invariants");
                assert!(leaf.len() <= fill);
                for (k, v) in leaf.entries() {
                    assert!(k >= low && leaf.high.is_none_or(|h| k < h) && v == k + 1);
                }
                seen += leaf.len();
                low = leaf.high.unwrap_or(u64::MAX);
            }
            assert_eq!(leaves.last().and_then(|l| l.high), Some(1 << 40));
            seen == entries.len()
        }
    }

    #[test]
    fn leaves_are_linked_and_bad_input_refused() {
        let g = Geometry::default();
        let entries: Vec<(u64, u64)> = (0..200).map(|k| (k, k)).collect();
        let mut leaves = pack(g, &entries, 48, None).expect("pack");
        assert!(leaves.len() >= 5, "{} leaves", leaves.len());
        let pages: Vec<u64> = (10..10 + leaves.len() as u64).collect();
        link(&mut leaves, &pages);
        for (i, leaf) in leaves.iter().enumerate() {
            assert_eq!(leaf.sibling, pages.get(i + 1).copied().unwrap_or(0));
        }
        assert!(pack(g, &entries, 0, None).is_err());
        assert!(pack(g, &entries, 65, None).is_err());
        assert!(pack(g, &[(2, 0), (1, 0)], 8, None).is_err());
        assert!(pack(g, &[(1, 0), (1, 0)], 8, None).is_err());
    }
}
