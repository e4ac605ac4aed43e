//! A model slot's model: segments over leaf-major positions, and leaf-range prediction.

use crate::{MAX_DELTA, MAX_EPSILON, MAX_POSITION, PlrBuilder, Segment, TrainError};

/// Error bound ε and leaf size δ of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelParams {
    epsilon: u64,
    delta: u64,
}

impl ModelParams {
    /// Checked parameters: ε in `1..=MAX_EPSILON`, δ in `1..=MAX_DELTA`.
    pub fn new(epsilon: u64, delta: u64) -> Result<Self, TrainError> {
        if epsilon == 0 || epsilon > MAX_EPSILON {
            return Err(TrainError::InvalidEpsilon(epsilon));
        }
        if delta == 0 || delta > MAX_DELTA {
            return Err(TrainError::InvalidDelta(delta));
        }
        Ok(Self { epsilon, delta })
    }

    /// The error bound ε.
    pub fn epsilon(&self) -> u64 {
        self.epsilon
    }

    /// The leaf size δ (key slots per leaf).
    pub fn delta(&self) -> u64 {
        self.delta
    }
}

/// An inclusive range of trained-leaf indices of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafRange {
    /// First leaf index.
    pub first: u64,
    /// Last leaf index (inclusive).
    pub last: u64,
}

impl LeafRange {
    /// Number of leaves in the range.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Always false: a range holds at least one leaf.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `leaf` is in the range.
    pub fn contains(&self, leaf: u64) -> bool {
        (self.first..=self.last).contains(&leaf)
    }

    /// The leaf indices in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + use<> {
        self.first..=self.last
    }
}

/// The model of one model slot: PLR segments over the slot's trained leaves.
///
/// **Positions.** Key `j` (0-based, in key order) of trained leaf `i` has position `i·δ + j`.
/// Bulk load fills each leaf with `m ≤ δ` keys; retraining takes leaves as they stand, whatever
/// their counts. Both use this one convention, so retraining never moves data.
///
/// **Ownership** (`docs/ARCHITECTURE.md` §5, "Leaf ranges and ownership"). Trained leaf `i` owns
/// the keys from its pivot (its smallest trained key; leaf 0: every key below too) up to the next
/// leaf's pivot. Guarantees:
/// * a trained key's own leaf is in [`LeafModel::predicted_leaves`] (paper eq. 2);
/// * **every** key's owner leaf is in [`LeafModel::owner_candidates`]: the leaves intersecting
///   `[pred − ε − 1, pred + ε]`. A key `k` that was never trained, between trained keys `a` (last
///   of leaf `i`) and `b` (first of leaf `i + 1`), predicts at most as far as `b` does — so
///   `pred(k) − ε ≤ pos(b) = (i + 1)·δ` and eq. 2 may start at leaf `i + 1`, one to the right of
///   its owner. One extra position on the left (not a whole extra leaf, as the paper's
///   previous-leaf check reads) brings leaf `i` back: `pred(k) − ε − 1 ≤ (i + 1)·δ − 1`. Keys past
///   a segment's last trained key predict exactly like that key, so they are covered too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafModel {
    params: ModelParams,
    leaves: u64,
    segments: Vec<Segment>,
}

impl LeafModel {
    /// Trains on `leaves`, each the strictly increasing keys of one trained leaf, in key order
    /// (every leaf non-empty, at most δ keys).
    pub fn train<I, L>(params: ModelParams, leaves: I) -> Result<Self, TrainError>
    where
        I: IntoIterator<Item = L>,
        L: AsRef<[u64]>,
    {
        let mut builder = PlrBuilder::new(params.epsilon)?;
        let mut count = 0u64;
        for leaf in leaves {
            let keys = leaf.as_ref();
            if keys.is_empty() {
                return Err(TrainError::EmptyLeaf(count));
            }
            if keys.len() as u64 > params.delta {
                return Err(TrainError::LeafOverfull {
                    leaf: count,
                    count: keys.len(),
                    delta: params.delta,
                });
            }
            let base = count
                .checked_mul(params.delta)
                .filter(|b| b + params.delta - 1 <= MAX_POSITION)
                .ok_or(TrainError::PositionTooLarge(
                    count.saturating_mul(params.delta),
                ))?;
            builder.push_leaf(keys, base)?;
            count += 1;
        }
        if count == 0 {
            return Err(TrainError::NoKeys);
        }
        Ok(Self {
            params,
            leaves: count,
            segments: builder.finish()?,
        })
    }

    /// Trains on sorted keys laid out `fill` per leaf (the last leaf may hold fewer), as bulk load
    /// writes them.
    pub fn train_filled(params: ModelParams, keys: &[u64], fill: u64) -> Result<Self, TrainError> {
        if fill == 0 || fill > params.delta {
            return Err(TrainError::InvalidFill {
                fill,
                delta: params.delta,
            });
        }
        Self::train(params, keys.chunks(fill as usize))
    }

    /// Rebuilds a model from its parts (used by decoding); checks consistency.
    pub(crate) fn from_parts(
        params: ModelParams,
        leaves: u64,
        segments: Vec<Segment>,
    ) -> Result<Self, &'static str> {
        if leaves == 0
            || leaves
                .checked_mul(params.delta)
                .is_none_or(|p| p > MAX_POSITION + 1)
        {
            return Err("leaf count out of range");
        }
        if segments.is_empty() {
            return Err("no segments");
        }
        if segments
            .windows(2)
            .any(|w| w[0].first_key >= w[1].first_key)
        {
            return Err("segment keys not increasing");
        }
        if !segments.iter().all(Segment::is_well_formed) {
            return Err("segment parameters overflow");
        }
        Ok(Self {
            params,
            leaves,
            segments,
        })
    }

    /// ε and δ.
    pub fn params(&self) -> ModelParams {
        self.params
    }

    /// Number of trained leaves.
    pub fn leaves(&self) -> u64 {
        self.leaves
    }

    /// The segments, ordered by first key.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The smallest trained key.
    pub fn first_key(&self) -> u64 {
        self.segments[0].first_key
    }

    /// The segment responsible for `key`: the last one whose first key is ≤ `key` (the first one
    /// for smaller keys).
    #[inline]
    fn segment_for(&self, key: u64) -> &Segment {
        let i = self.segments.partition_point(|s| s.first_key <= key);
        &self.segments[i.saturating_sub(1)]
    }

    /// Predicted position of `key`; within ε of the true position for every trained key.
    #[inline]
    pub fn predict(&self, key: u64) -> u64 {
        self.segment_for(key).predict(key)
    }

    /// The paper's eq. 2: the leaves whose positions intersect `[pred − ε, pred + ε]`, clamped to
    /// the model's leaves. Contains the leaf of every trained key.
    #[inline]
    pub fn predicted_leaves(&self, key: u64) -> LeafRange {
        let pred = self.predict(key);
        let last_leaf = self.leaves - 1;
        let first = (pred.saturating_sub(self.params.epsilon) / self.params.delta).min(last_leaf);
        let last = (pred.saturating_add(self.params.epsilon) / self.params.delta).min(last_leaf);
        LeafRange { first, last }
    }

    /// The leaves intersecting `[pred − ε − 1, pred + ε]`: contains the owner leaf of every key,
    /// trained or not (see the type's docs for why one extra position suffices).
    #[inline]
    pub fn owner_candidates(&self, key: u64) -> LeafRange {
        let pred = self.predict(key);
        let last_leaf = self.leaves - 1;
        let first =
            (pred.saturating_sub(self.params.epsilon + 1) / self.params.delta).min(last_leaf);
        let last = (pred.saturating_add(self.params.epsilon) / self.params.delta).min(last_leaf);
        LeafRange { first, last }
    }

    /// Bytes of compute-side memory the model takes (parameters and segments).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(self.segments.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::test_support::{KeySet, random_leaves};

    /// The owner leaf of `key` under `docs/ARCHITECTURE.md` §5: the last leaf whose pivot is ≤
    /// key (leaf 0 for keys below every pivot).
    fn owner(pivots: &[u64], key: u64) -> u64 {
        pivots.partition_point(|&p| p <= key).saturating_sub(1) as u64
    }

    fn probes(keys: &[u64], seed: u64) -> Vec<u64> {
        let mut probes = vec![0, u64::MAX];
        for (i, &k) in keys.iter().enumerate() {
            probes.extend([k, k.wrapping_sub(1), k.wrapping_add(1)]);
            if let Some(&next) = keys.get(i + 1) {
                probes.push(k + (next - k) / 2);
            }
        }
        probes.extend(testkit::XorShift64::new(seed | 1).take(200));
        probes
    }

    fn check(leaves: &[Vec<u64>], params: ModelParams, seed: u64) -> TestResult {
        let model = LeafModel::train(params, leaves).expect("valid leaves");
        let pivots: Vec<u64> = leaves.iter().map(|l| l[0]).collect();
        for (i, leaf) in leaves.iter().enumerate() {
            for (j, &key) in leaf.iter().enumerate() {
                let pos = i as u64 * params.delta() + j as u64;
                if model.predict(key).abs_diff(pos) > params.epsilon() {
                    return TestResult::error(format!("trained key {key} mispredicted"));
                }
                if !model.predicted_leaves(key).contains(i as u64) {
                    return TestResult::error(format!("trained key {key}: leaf {i} not predicted"));
                }
            }
        }
        let keys: Vec<u64> = leaves.concat();
        for key in probes(&keys, seed) {
            let range = model.owner_candidates(key);
            let owner = owner(&pivots, key);
            if !range.contains(owner) {
                return TestResult::error(format!(
                    "key {key}: owner leaf {owner} outside candidates {range:?}"
                ));
            }
        }
        TestResult::passed()
    }

    #[test]
    fn every_key_has_its_owner_among_the_candidates_with_varying_leaf_counts() {
        fn prop(keys: KeySet, e: u16, d: u8, seed: u64) -> TestResult {
            let params =
                ModelParams::new(u64::from(e % 256) + 1, u64::from(d % 32) + 1).expect("params");
            check(&random_leaves(&keys.0, params.delta(), seed), params, seed)
        }
        QuickCheck::new()
            .tests(400)
            .quickcheck(prop as fn(KeySet, u16, u8, u64) -> TestResult);
    }

    #[test]
    fn every_key_has_its_owner_among_the_candidates_with_bulk_load_fill() {
        fn prop(keys: KeySet, e: u16, d: u8, f: u8, seed: u64) -> TestResult {
            let params =
                ModelParams::new(u64::from(e % 256) + 1, u64::from(d % 32) + 1).expect("params");
            let fill = u64::from(f) % params.delta() + 1;
            let leaves: Vec<Vec<u64>> = keys.0.chunks(fill as usize).map(<[u64]>::to_vec).collect();
            check(&leaves, params, seed)
        }
        QuickCheck::new()
            .tests(400)
            .quickcheck(prop as fn(KeySet, u16, u8, u8, u64) -> TestResult);
    }

    /// Eq. 2 alone is not enough: some untrained keys predict one leaf right of their owner, so
    /// the extra position of `owner_candidates` is needed (measured: about 4% of the probes
    /// next to leaf boundaries below, with small ε and δ).
    #[test]
    fn eq_2_alone_misses_some_owners() {
        let mut misses = 0;
        for (epsilon, delta) in [(1, 1), (1, 2), (2, 2), (2, 4)] {
            let params = ModelParams::new(epsilon, delta).expect("params");
            for seed in 1..300u64 {
                let mut key = 0u64;
                let keys: Vec<u64> =
                    testkit::XorShift64::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
                        .take(60)
                        .map(|state| {
                            key += 1 + state % [2, 10, 1000][(state >> 40) as usize % 3];
                            key
                        })
                        .collect();
                let model = LeafModel::train_filled(params, &keys, delta).expect("train");
                let pivots: Vec<u64> = keys.chunks(delta as usize).map(|c| c[0]).collect();
                for w in keys.windows(2).filter(|w| w[1] - w[0] > 1) {
                    let k = w[1] - 1;
                    let owner = owner(&pivots, k);
                    assert!(model.owner_candidates(k).contains(owner));
                    misses += usize::from(!model.predicted_leaves(k).contains(owner));
                }
            }
        }
        assert!(
            misses > 0,
            "eq. 2 never missed an owner: the extra position would be dead weight"
        );
    }

    #[test]
    fn bad_parameters_and_leaves_are_errors() {
        assert_eq!(ModelParams::new(0, 16), Err(TrainError::InvalidEpsilon(0)));
        assert_eq!(ModelParams::new(16, 0), Err(TrainError::InvalidDelta(0)));
        assert_eq!(
            ModelParams::new(16, MAX_DELTA + 1),
            Err(TrainError::InvalidDelta(MAX_DELTA + 1))
        );
        let params = ModelParams::new(4, 4).expect("params");
        assert_eq!(
            LeafModel::train_filled(params, &[1, 2, 3], 5).err(),
            Some(TrainError::InvalidFill { fill: 5, delta: 4 })
        );
        assert_eq!(
            LeafModel::train_filled(params, &[1, 2, 3], 0).err(),
            Some(TrainError::InvalidFill { fill: 0, delta: 4 })
        );
        assert_eq!(
            LeafModel::train_filled(params, &[], 4).err(),
            Some(TrainError::NoKeys)
        );
        assert_eq!(
            LeafModel::train(params, [vec![1u64], vec![]]).err(),
            Some(TrainError::EmptyLeaf(1))
        );
        assert_eq!(
            LeafModel::train(params, [vec![1u64, 2, 3, 4, 5]]).err(),
            Some(TrainError::LeafOverfull {
                leaf: 0,
                count: 5,
                delta: 4
            })
        );
        assert_eq!(
            LeafModel::train(params, [vec![5u64], vec![3]]).err(),
            Some(TrainError::KeysNotIncreasing {
                previous: 5,
                key: 3
            })
        );
    }
}
