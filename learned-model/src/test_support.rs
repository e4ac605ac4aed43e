//! Generators shared by this crate's property tests.

use quickcheck::{Arbitrary, Gen};
use testkit::XorShift64;

/// A sorted set of unique keys drawn in one of several shapes that stress different paths:
/// full-range random (huge gaps, spans near 2^64), clustered runs, dense runs, and sets that
/// include the extreme keys 0 and `u64::MAX`.
#[derive(Debug, Clone)]
pub(crate) struct KeySet(pub Vec<u64>);

impl Arbitrary for KeySet {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % (g.size() * 8 + 1) + 1;
        let mut keys: Vec<u64> = match u8::arbitrary(g) % 5 {
            0 => (0..n).map(|_| u64::arbitrary(g)).collect(),
            1 => {
                let mut k = u64::arbitrary(g) / 2;
                (0..n)
                    .map(|_| {
                        k = k.saturating_add(u64::from(u16::arbitrary(g)) + 1);
                        k
                    })
                    .collect()
            }
            2 => {
                let start = u64::arbitrary(g) / 2;
                (0..n as u64)
                    .map(|i| start + i * (1 + u64::from(u8::arbitrary(g) % 3)))
                    .collect()
            }
            3 => {
                // Clusters far apart.
                let mut keys = Vec::with_capacity(n);
                while keys.len() < n {
                    let base = u64::arbitrary(g);
                    for i in 0..(u64::from(u8::arbitrary(g)) % 16 + 1) {
                        keys.push(base.saturating_add(i * (u64::from(u8::arbitrary(g)) + 1)));
                    }
                }
                keys
            }
            _ => {
                let mut keys: Vec<u64> = (0..n).map(|_| u64::arbitrary(g)).collect();
                keys.extend([0, 1, u64::MAX - 1, u64::MAX]);
                keys
            }
        };
        keys.sort_unstable();
        keys.dedup();
        KeySet(keys)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let keys = self.0.clone();
        Box::new(
            (1..keys.len())
                .rev()
                .step_by(keys.len() / 8 + 1)
                .map(move |n| KeySet(keys[..n].to_vec())),
        )
    }
}

/// Splits `keys` into leaves of between 1 and `delta` keys, pseudo-randomly from `seed`.
pub(crate) fn random_leaves(keys: &[u64], delta: u64, seed: u64) -> Vec<Vec<u64>> {
    let mut random = XorShift64::new(seed | 1);
    let mut leaves = Vec::new();
    let mut rest = keys;
    while !rest.is_empty() {
        let state = random.next_u64();
        let take = ((state % delta) + 1).min(rest.len() as u64) as usize;
        leaves.push(rest[..take].to_vec());
        rest = &rest[take..];
    }
    leaves
}
