//! The repair rule for a chain whose lock holder stopped mid-write: what recovery applies to a
//! dead compute node's chains (`retrainer`'s roll-forward) and a live compute node to a lock an
//! operation of its own may have left held (`index-core`).
//!
//! Every write protocol orders its steps so that each prefix leaves a chain this rule finishes
//! (ARCHITECTURE §8): a split that linked its new leaf but did not shrink the split leaf yet
//! leaves the moved keys — and their claim — in both; every other prefix leaves nothing to trim.
//! The rule — **each leaf keeps only the keys below the start of every later leaf's claim (an
//! unclaimed leaf: its first key), and its claim ends below it too** — completes such a split and
//! changes nothing else, so applying it twice is applying it once.

use rdma_transport::{Endpoint, RemoteAddr};

use crate::{Layout, Leaf, LeafStoreError, LeafTableEntry, ModelRecord, walk_chain};

/// The leaves of `chain` (in chain order, as [`crate::walk_chain`] returns it) that the rule
/// changes: their numbers and trimmed contents. Empty for a chain with nothing to finish.
pub fn trim_chain(chain: &[(LeafTableEntry, Leaf)]) -> Result<Vec<(u64, Leaf)>, LeafStoreError> {
    // Keys at or past `bound` belong to a later leaf.
    let mut bound: Option<u64> = None;
    let mut trimmed = Vec::new();
    for (entry, contents) in chain.iter().rev() {
        let below = |k: u64| bound.is_none_or(|b| k < b);
        let keep: Vec<(u64, u64)> = contents
            .entries()
            .iter()
            .copied()
            .filter(|&(k, _)| below(k))
            .collect();
        let claim = contents.claim().and_then(|(lo, hi)| match bound {
            Some(b) if hi >= b => (lo < b).then(|| (lo, b - 1)),
            _ => Some((lo, hi)),
        });
        // (An unclaimed leaf's first key, if trimmed away, lies past `bound` already.)
        if let Some(start) = contents.start() {
            bound = Some(bound.map_or(start, |b| b.min(start)));
        }
        if keep.len() != contents.len() || claim != contents.claim() {
            let mut leaf = Leaf::from_entries(keep)?;
            leaf.set_claim(claim);
            trimmed.push((entry.leaf_num(), leaf));
        }
    }
    Ok(trimmed)
}

/// WRITEs of whole leaves: address and encoded bytes.
pub type LeafWrites = Vec<(RemoteAddr, Vec<u8>)>;

/// Reads trained leaf `leaf`'s chain of `record` and returns the WRITEs (address, encoded leaf)
/// that apply the rule to it — empty when there is nothing to finish — or `None` if the chain
/// cannot be read (a torn leaf: the chain is released as it is, and `verify` reports the leaf).
pub fn repair_writes<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    record: &ModelRecord,
    leaf: usize,
) -> Result<Option<LeafWrites>, LeafStoreError> {
    let Ok(chain) = walk_chain(ep, layout, record, leaf) else {
        return Ok(None);
    };
    let delta = layout.delta();
    trim_chain(&chain)?
        .into_iter()
        .map(|(leaf_num, contents)| {
            Ok((
                layout.leaf_addr(leaf_num),
                contents.encode(leaf_num, delta)?,
            ))
        })
        .collect::<Result<LeafWrites, LeafStoreError>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(keys: &[u64]) -> Leaf {
        Leaf::from_entries(keys.iter().map(|&k| (k, k)).collect()).expect("sorted")
    }

    fn entry(n: u64) -> LeafTableEntry {
        LeafTableEntry::new(n).expect("leaf number")
    }

    #[test]
    fn a_split_cut_after_its_link_is_finished_and_nothing_else_changes() {
        // The split leaf still holds 70 and 80, and claims them, which the linked new leaf took.
        let chain = vec![
            (entry(1), leaf(&[10, 20, 70, 80]).with_claim(0, 89)),
            (entry(2), leaf(&[70, 80]).with_claim(70, 89)),
            (entry(3), leaf(&[])),
            (entry(4), leaf(&[90]).with_claim(90, 99)),
        ];
        let trimmed = trim_chain(&chain).expect("trim");
        assert_eq!(trimmed, vec![(1, leaf(&[10, 20]).with_claim(0, 69))]);
        let mut repaired = chain.clone();
        repaired[0].1 = leaf(&[10, 20]).with_claim(0, 69);
        assert_eq!(trim_chain(&repaired).expect("trim"), vec![], "idempotent");
    }

    #[test]
    fn unclaimed_leaves_bound_the_earlier_ones_by_their_first_key() {
        let chain = vec![
            (entry(1), leaf(&[10, 20, 70, 80])),
            (entry(2), leaf(&[70, 80])),
        ];
        assert_eq!(
            trim_chain(&chain).expect("trim"),
            vec![(1, leaf(&[10, 20]))]
        );
    }
}
