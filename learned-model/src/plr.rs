//! OptimalPLR: the minimal number of segments with every trained key within ε of its position.
//!
//! Xie et al. (2014), as used by the PGM-index: one pass over points `(x, y)` with increasing `x`;
//! the current segment is extended while some line stays within the error band of every point,
//! which is decided in amortised O(1) per point by maintaining two convex hulls of the band's
//! endpoints and the extreme feasible lines. The greedy longest extension is optimal.
//!
//! Exactness: hull arithmetic is exact integer arithmetic — `i64` while a segment's spans allow
//! it, `i128` otherwise (see [`crate::hull`]) — with `y` doubled so the band of every point is
//! the integer range `[2·pos + 1 − 2ε, 2·pos + 1 + 2ε]` (the real band `pos + ½ ± ε`). The stored
//! predictor floors, so its admissible range is `[pos − ε, pos + ε + 1)`: half a position of slack
//! on each side of the trained band. The slope is rounded to fixed point and the intercept is then
//! chosen exactly, from the hull vertices, so the bound holds by construction.
//!
//! The slope tried first is the middle of the feasible window (computed in `f64`). Should no
//! exact intercept exist for it (the window narrower than the rounding), the steepest feasible
//! line's slope is used, rounded exactly: that line is feasible, and re-pivoting it around the
//! middle of the segment with a slope off by at most 2^-65 moves no prediction by more than ¼
//! position (spans are below 2^64), well inside the ½-position slack — so an intercept always
//! exists. No point is buffered: memory is the two hulls, however long a segment grows.

use crate::hull::{Chain, Narrow, Point, Products, Wide, side, side_rising};
use crate::segment::Segment;
use crate::{MAX_POSITION, TrainError};

/// A line through two points, `from.x < to.x`.
#[derive(Debug, Clone, Copy, Default)]
struct Line {
    from: Point,
    to: Point,
}

impl Line {
    fn slope(&self) -> f64 {
        (self.to.y - self.from.y) as f64 / (self.to.x - self.from.x) as f64
    }

    /// The line's slope in positions per key unit (y is doubled), rounded to the nearest fixed-point
    /// value with 64 fractional bits, computed exactly; 0 for a falling line.
    fn fixed_point_slope(&self) -> u128 {
        let Ok(rise) = u64::try_from(self.to.y - self.from.y) else {
            return 0;
        };
        // rise < 2^51, so rise·2^64 < 2^115; run·2 < 2^65.
        let numerator = u128::from(rise) << 64;
        let denominator = 2 * u128::from(self.to.x - self.from.x);
        (numerator + denominator / 2) / denominator
    }
}

/// The hull state of the segment being built.
#[derive(Debug, Default)]
struct Hulls {
    /// Upper convex hull of the band's lower endpoints.
    lower: Chain<true>,
    /// Lower convex hull of the band's upper endpoints.
    upper: Chain<false>,
    /// Steepest feasible line: through a lower endpoint (left) and an upper endpoint (right).
    /// Meaningful once two points were added.
    max_line: Line,
    /// Flattest feasible line: through an upper endpoint (left) and a lower endpoint (right).
    /// Meaningful once two points were added.
    min_line: Line,
    points: usize,
}

impl Hulls {
    fn clear(&mut self) {
        self.lower.clear();
        self.upper.clear();
        self.points = 0;
    }

    /// Adds the band `[lo, hi]` at `x` (larger than every earlier x) if some line still stabs
    /// every band; returns false, changing nothing, if none does. `A` must hold every product of
    /// differences between the segment's points, this one included (see [`crate::hull`]).
    #[inline(always)]
    fn add<A: Products>(&mut self, x: u64, lo: i64, hi: i64) -> bool {
        let low = Point { x, y: lo };
        let high = Point { x, y: hi };
        match self.points {
            0 => {}
            1 => {
                self.max_line = Line {
                    from: self.lower.live()[0],
                    to: high,
                };
                self.min_line = Line {
                    from: self.upper.live()[0],
                    to: low,
                };
            }
            _ => {
                // Both band ends against both extreme lines; a line's own product is shared. The
                // steepest line rises, from a lower endpoint that neither end can be below.
                let Line { from, to } = self.max_line;
                let (high_height, max_height) = side_rising::<A>(from, to, high);
                let (low_height, _) = side_rising::<A>(from, to, low);
                let high_below_max = high_height < max_height;
                let low_above_max = low_height > max_height;
                let Line { from, to } = self.min_line;
                let (high_height, min_height) = side::<A>(from, to, high);
                let (low_height, _) = side::<A>(from, to, low);
                let high_below_min = high_height < min_height;
                let low_above_min = low_height > min_height;
                if high_below_min || low_above_max {
                    return false;
                }
                if high_below_max {
                    // The new upper endpoint caps the steepest line: pivot it on the lower hull.
                    self.max_line = Line {
                        from: self.lower.pivot::<A>(high),
                        to: high,
                    };
                }
                if low_above_min {
                    // The new lower endpoint lifts the flattest line: pivot it on the upper hull.
                    self.min_line = Line {
                        from: self.upper.pivot::<A>(low),
                        to: low,
                    };
                }
            }
        }
        self.lower.push::<A>(low);
        self.upper.push::<A>(high);
        self.points += 1;
        true
    }

    /// The admissible fixed-point intercepts for fixed-point `slope`, from the hull vertices only:
    /// each bound is linear in a point, so its extreme over all points is reached at a vertex of
    /// the matching hull (points popped from a hull lie below/above a chord of it and are
    /// dominated; points before the start indices are kept and only add candidates).
    ///
    /// `floor((A + slope·dx) / 2^64) ∈ [pos − ε, pos + ε]` ⇔
    /// `A ∈ [(pos − ε)·2^64 − slope·dx, (pos + ε + 1)·2^64 − 1 − slope·dx]`, and with the doubled
    /// band ends `lo = 2·pos + 1 − 2ε`, `hi = 2·pos + 1 + 2ε` those are
    /// `(lo − 1)·2^63 − slope·dx` and `(hi + 1)·2^63 − 1 − slope·dx`.
    fn intercept_range(&self, slope: u128) -> Option<(i128, i128)> {
        const HALF: i128 = 1 << 63;
        let scaled = |x: u64| {
            slope
                .checked_mul(u128::from(x))
                .and_then(|s| i128::try_from(s).ok())
        };
        let mut low = i128::MIN;
        for p in self.lower.live() {
            low = low.max((i128::from(p.y) - 1) * HALF - scaled(p.x)?);
        }
        let mut high = i128::MAX;
        for p in self.upper.live() {
            high = high.min((i128::from(p.y) + 1) * HALF - 1 - scaled(p.x)?);
        }
        (low <= high).then_some((low, high))
    }

    /// A slope (positions per key unit, ≥ 0) in the middle of the feasible window.
    fn middle_slope(&self) -> f64 {
        if self.points < 2 {
            return 0.0;
        }
        // Doubled y: halve to get positions per key unit.
        let steep = self.max_line.slope() / 2.0;
        let flat = (self.min_line.slope() / 2.0).max(0.0);
        ((steep + flat) / 2.0).max(0.0)
    }
}

/// Streaming OptimalPLR trainer.
///
/// Push `(key, position)` pairs with strictly increasing keys and non-decreasing positions below
/// 2^48; [`PlrBuilder::finish`] returns the minimal number of [`Segment`]s such that every pushed
/// key's prediction is within ε of its position (exactly, see the module docs).
#[derive(Debug)]
pub struct PlrBuilder {
    epsilon: u64,
    hulls: Hulls,
    /// The segment being built, if it has any point.
    current: Option<OpenSegment>,
    segments: Vec<Segment>,
    last: Option<(u64, u64)>,
    /// Segments whose middle slope admitted no exact intercept, so the steepest line's was used.
    steepest_slope_fallbacks: u64,
    /// Tests: skip the middle slope, so the fallback path is exercised on every segment.
    #[cfg(test)]
    force_steepest_slope: bool,
    /// Tests: decide every turn in `i128`, to show the narrow arithmetic changes nothing.
    #[cfg(test)]
    force_wide: bool,
}

/// The segment being built.
#[derive(Debug, Clone, Copy)]
struct OpenSegment {
    first_key: u64,
    last_key: u64,
    /// The lowest y of any band endpoint in the segment: its first point's lower endpoint.
    floor: i64,
}

impl PlrBuilder {
    /// A trainer with error bound `epsilon` (at least 1, at most [`crate::MAX_EPSILON`]).
    pub fn new(epsilon: u64) -> Result<Self, TrainError> {
        if epsilon == 0 || epsilon > crate::MAX_EPSILON {
            return Err(TrainError::InvalidEpsilon(epsilon));
        }
        Ok(Self {
            epsilon,
            hulls: Hulls::default(),
            current: None,
            segments: Vec::new(),
            last: None,
            steepest_slope_fallbacks: 0,
            #[cfg(test)]
            force_steepest_slope: false,
            #[cfg(test)]
            force_wide: false,
        })
    }

    /// Adds one trained point.
    #[inline]
    pub fn push(&mut self, key: u64, position: u64) -> Result<(), TrainError> {
        if position > MAX_POSITION {
            return Err(TrainError::PositionTooLarge(position));
        }
        if let Some((last_key, last_pos)) = self.last {
            if key <= last_key {
                return Err(TrainError::KeysNotIncreasing {
                    previous: last_key,
                    key,
                });
            }
            if position < last_pos {
                return Err(TrainError::PositionsDecreasing { key, position });
            }
        }
        self.last = Some((key, position));
        self.add(key, position)
    }

    /// Pushes one trained leaf: `keys` at positions `base, base + 1, …`. The caller guarantees
    /// the positions are at least the previous point's and at most [`MAX_POSITION`]; keys are
    /// checked here.
    #[inline]
    pub(crate) fn push_leaf(&mut self, keys: &[u64], base: u64) -> Result<(), TrainError> {
        debug_assert!(base + keys.len() as u64 <= MAX_POSITION + 1);
        debug_assert!(self.last.is_none_or(|(_, p)| p <= base));
        let mut previous = self.last.map(|(k, _)| k);
        for (j, &key) in keys.iter().enumerate() {
            if let Some(previous) = previous.filter(|&p| key <= p) {
                return Err(TrainError::KeysNotIncreasing { previous, key });
            }
            previous = Some(key);
            self.add(key, base + j as u64)?;
        }
        if let (Some(&key), Some(_)) = (keys.last(), previous) {
            self.last = Some((key, base + keys.len() as u64 - 1));
        }
        Ok(())
    }

    #[inline(always)]
    fn add(&mut self, key: u64, position: u64) -> Result<(), TrainError> {
        if let Some(open) = self.current {
            let (x, lo, hi) = self.band(open.first_key, key, position);
            // Every difference between the segment's points, this one included, is at most x in
            // key offset and hi − floor in y, so the narrow products suffice below this bound.
            let narrow = (u128::from(x) * u128::from((hi - open.floor) as u64)) >> 63 == 0;
            #[cfg(test)]
            let narrow = narrow && !self.force_wide;
            let fits = if narrow {
                self.hulls.add::<Narrow>(x, lo, hi)
            } else {
                self.hulls.add::<Wide>(x, lo, hi)
            };
            if fits {
                self.current = Some(OpenSegment {
                    last_key: key,
                    ..open
                });
                return Ok(());
            }
            self.close_segment()?;
        }
        let (x, lo, hi) = self.band(key, key, position);
        let added = self.hulls.add::<Wide>(x, lo, hi);
        debug_assert!(added, "a single point is always feasible");
        self.current = Some(OpenSegment {
            first_key: key,
            last_key: key,
            floor: lo,
        });
        Ok(())
    }

    fn band(&self, first_key: u64, key: u64, position: u64) -> (u64, i64, i64) {
        // position < 2^48 and ε ≤ 2^20, so these stay far below 2^63.
        let y = 2 * position as i64 + 1;
        let e = 2 * self.epsilon as i64;
        (key - first_key, y - e, y + e)
    }

    /// Turns the current points into one segment.
    fn close_segment(&mut self) -> Result<(), TrainError> {
        let Some(OpenSegment {
            first_key,
            last_key,
            ..
        }) = self.current.take()
        else {
            return Ok(());
        };
        let mut slope = fixed_point_slope(self.hulls.middle_slope());
        let mut range = self.hulls.intercept_range(slope);
        #[cfg(test)]
        if self.force_steepest_slope {
            range = None;
        }
        if range.is_none() {
            self.steepest_slope_fallbacks += 1;
            slope = if self.hulls.points < 2 {
                0
            } else {
                self.hulls.max_line.fixed_point_slope()
            };
            range = self.hulls.intercept_range(slope);
        }
        self.hulls.clear();
        // Proven non-empty (module docs); an error rather than a wrong model if that were false.
        let (low, high) = range.ok_or(TrainError::NoExactIntercept { first_key })?;
        self.segments.push(Segment {
            first_key,
            max_dx: last_key - first_key,
            slope,
            intercept: low + (high - low) / 2,
        });
        Ok(())
    }

    /// Segments whose middle slope admitted no exact intercept, so the steepest feasible line's
    /// exactly rounded slope was used instead (rare; never affects the bound).
    pub fn steepest_slope_fallbacks(&self) -> u64 {
        self.steepest_slope_fallbacks
    }

    /// Segments so far, counting the one being built.
    pub fn segments_so_far(&self) -> usize {
        self.segments.len() + usize::from(self.current.is_some())
    }

    /// Closes the last segment and returns all of them, ordered by `first_key`. Empty if nothing
    /// was pushed.
    pub fn finish(mut self) -> Result<Vec<Segment>, TrainError> {
        self.close_segment()?;
        Ok(self.segments)
    }
}

/// Rounds a non-negative slope in positions per key unit to fixed point (64 fractional bits).
fn fixed_point_slope(slope: f64) -> u128 {
    let scaled = slope * 18_446_744_073_709_551_616.0; // 2^64
    if scaled.is_finite() && scaled > 0.0 {
        scaled as u128 // saturating cast
    } else {
        0
    }
}

/// Trains segments over `(key, position)` pairs; see [`PlrBuilder`].
pub fn train(
    points: impl IntoIterator<Item = (u64, u64)>,
    epsilon: u64,
) -> Result<Vec<Segment>, TrainError> {
    let mut builder = PlrBuilder::new(epsilon)?;
    for (key, position) in points {
        builder.push(key, position)?;
    }
    builder.finish()
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;
    use crate::reference::optimal_segment_count;
    use crate::test_support::KeySet;

    /// Passes when every point's prediction by the segment covering its key is within `epsilon`
    /// of its position; fails naming the first point that is not.
    fn bound_holds(points: &[(u64, u64)], segments: &[Segment], epsilon: u64) -> TestResult {
        for &(key, position) in points {
            let i = segments.partition_point(|s| s.first_key <= key);
            let pred = segments[i - 1].predict(key);
            if pred.abs_diff(position) > epsilon {
                return TestResult::error(format!(
                    "key {key}: predicted {pred}, position {position}, ε {epsilon}"
                ));
            }
        }
        TestResult::passed()
    }

    /// The points `(key, rank · stride)` of `keys`.
    fn strided(keys: &[u64], stride: u64) -> Vec<(u64, u64)> {
        keys.iter()
            .enumerate()
            .map(|(i, &k)| (k, i as u64 * stride))
            .collect()
    }

    /// What a builder set up by `configure` trains on `points`.
    fn train_configured(
        points: &[(u64, u64)],
        epsilon: u64,
        configure: impl FnOnce(&mut PlrBuilder),
    ) -> Result<Vec<Segment>, TrainError> {
        let mut builder = PlrBuilder::new(epsilon)?;
        configure(&mut builder);
        points.iter().try_for_each(|&(k, p)| builder.push(k, p))?;
        builder.finish()
    }

    #[test]
    fn every_trained_key_is_within_epsilon_of_its_rank() {
        fn prop(keys: KeySet, e: u16) -> TestResult {
            let epsilon = u64::from(e % 256) + 1;
            let points: Vec<_> = keys
                .0
                .iter()
                .enumerate()
                .map(|(i, &k)| (k, i as u64))
                .collect();
            let segments = train(points.iter().copied(), epsilon).expect("valid input");
            bound_holds(&points, &segments, epsilon)
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(KeySet, u16) -> TestResult);
    }

    #[test]
    fn every_trained_key_is_within_epsilon_of_a_staircase_position() {
        // Leaf-major positions with gaps (fill < δ) and repeated jumps.
        fn prop(keys: KeySet, e: u8, gap: u8) -> TestResult {
            let epsilon = u64::from(e % 64) + 1;
            let stride = u64::from(gap % 32) + 3;
            let points: Vec<_> = keys
                .0
                .iter()
                .enumerate()
                .map(|(i, &k)| (k, i as u64 / 3 * stride + i as u64 % 3))
                .collect();
            let segments = train(points.iter().copied(), epsilon).expect("valid input");
            bound_holds(&points, &segments, epsilon)
        }
        QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(KeySet, u8, u8) -> TestResult);
    }

    /// The fallback slope (the steepest line's, rounded exactly) must always admit an intercept
    /// and keep the bound: force it on every segment.
    #[test]
    fn the_steepest_slope_fallback_keeps_the_bound() {
        fn prop(keys: KeySet, e: u16, stride: u8) -> TestResult {
            let epsilon = u64::from(e % 256) + 1;
            let stride = u64::from(stride % 20) + 1;
            let points = strided(&keys.0, stride);
            match train_configured(&points, epsilon, |b| b.force_steepest_slope = true) {
                Ok(segments) => bound_holds(&points, &segments, epsilon),
                Err(e) => TestResult::error(format!("{e}")),
            }
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(KeySet, u16, u8) -> TestResult);
    }

    /// The narrow (`i64`) arithmetic is an optimisation only: deciding every turn in `i128`
    /// gives the same segments, for dense sets (narrow throughout), sparse ones (wide) and
    /// segments that cross from one to the other.
    #[test]
    fn narrow_arithmetic_changes_no_segment() {
        fn prop(keys: KeySet, e: u16, stride: u8) -> TestResult {
            let epsilon = u64::from(e % 256) + 1;
            let stride = u64::from(stride % 20) + 1;
            let points = strided(&keys.0, stride);
            let train_with = |wide: bool| {
                train_configured(&points, epsilon, |b| b.force_wide = wide).expect("train")
            };
            TestResult::from_bool(train_with(false) == train_with(true))
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(KeySet, u16, u8) -> TestResult);
    }

    #[test]
    fn segment_count_is_optimal_on_small_inputs() {
        fn prop(keys: KeySet, e: u8, stride: u8) -> TestResult {
            let keys = &keys.0[..keys.0.len().min(36)];
            let epsilon = u64::from(e % 6) + 1;
            let stride = u64::from(stride % 4) + 1;
            let points = strided(keys, stride);
            let fast = train_configured(&points, epsilon, |_| {})
                .expect("train")
                .len();
            let optimal = optimal_segment_count(&points, epsilon);
            if fast == optimal {
                TestResult::passed()
            } else {
                TestResult::error(format!("{fast} segments, optimal is {optimal}"))
            }
        }
        QuickCheck::new()
            .tests(400)
            .quickcheck(prop as fn(KeySet, u8, u8) -> TestResult);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(
            PlrBuilder::new(0).err(),
            Some(TrainError::InvalidEpsilon(0))
        );
        let mut b = PlrBuilder::new(4).expect("epsilon");
        b.push(10, 0).expect("first point");
        assert_eq!(
            b.push(10, 1),
            Err(TrainError::KeysNotIncreasing {
                previous: 10,
                key: 10
            })
        );
        assert_eq!(
            b.push(5, 1),
            Err(TrainError::KeysNotIncreasing {
                previous: 10,
                key: 5
            })
        );
        b.push(11, 5).expect("increasing");
        assert_eq!(
            b.push(12, 4),
            Err(TrainError::PositionsDecreasing {
                key: 12,
                position: 4
            })
        );
        assert_eq!(
            b.push(13, 1 << 48),
            Err(TrainError::PositionTooLarge(1 << 48))
        );
        assert!(
            train(std::iter::empty(), 4)
                .expect("empty is fine")
                .is_empty()
        );
        // A single segment of many points keeps no per-point buffer (memory is the hulls).
        let one = train((0..1_000_000u64).map(|k| (k, k)), 1).expect("train");
        assert_eq!(one.len(), 1);
    }

    /// The paper's Table 1 reports 5,153 models for 5·10^6 uniform random keys (ε = 16 at full
    /// leaves, i.e. positions = ranks). Optimal PLR must not need more.
    #[test]
    fn table_1_uniform_5m_keys_needs_at_most_5153_segments() {
        let mut keys: Vec<u64> = testkit::XorShift64::new(0x2545_f491_4f6c_dd1d)
            .take(5_000_000)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let segments =
            train(keys.iter().enumerate().map(|(i, &k)| (k, i as u64)), 16).expect("train");
        assert!(segments.len() <= 5_153, "{} segments", segments.len());
    }
}
