//! The geometry under OptimalPLR: band endpoints, exact orientation tests in the narrowest integer
//! type that holds them, and the convex chains the trainer maintains.
//!
//! Every test compares two products `dx · dy` of a key-offset difference (`dx ≥ 0`, up to 2^64)
//! and a doubled-position difference (`dy`, signed). [`Wide`] computes them in `i128`, which always
//! suffices. [`Narrow`] computes them in `i64` and is used only while the segment being built has
//! `x_span · y_span < 2^63` — then every product of differences between its points does too (each
//! `|dx| ≤ x_span`, `|dy| ≤ y_span`). That holds for most segments of real key sets (uniform
//! 64-bit keys at 10^7 keys: spans about 2^51 × 2^11), and a single-instruction multiply and
//! compare is what makes training cheap. The trainer decides per point; both give identical
//! answers, so the choice never changes a model (a test forces [`Wide`] throughout to show it).

/// A band endpoint: `x` is the key's offset from the segment's first key, `y` a doubled position
/// (below 2^50 in magnitude, see the `plr` module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Point {
    pub(crate) x: u64,
    pub(crate) y: i64,
}

/// Exact products of a key-offset difference and a doubled-position difference. Most tests
/// involve only non-negative differences (y never decreases along a chain or against the steepest
/// line), and those use the cheaper unsigned products.
pub(crate) trait Products {
    /// Unsigned product type; its order is the order of the exact products.
    type Unsigned: Copy + Ord;
    /// Signed product type; its order is the order of the exact products.
    type Signed: Copy + Ord;
    /// `dx · dy` exactly, for `dy ≥ 0` (under the implementation's magnitude precondition).
    fn unsigned(dx: u64, dy: i64) -> Self::Unsigned;
    /// `dx · dy` exactly (under the implementation's magnitude precondition).
    fn signed(dx: u64, dy: i64) -> Self::Signed;
}

/// Products in 64 bits. Precondition: `dx · |dy| < 2^63`, which the trainer guarantees by using
/// this only while the segment's `x_span · y_span < 2^63`.
#[derive(Debug)]
pub(crate) enum Narrow {}

impl Products for Narrow {
    type Unsigned = u64;
    type Signed = i64;

    #[inline(always)]
    fn unsigned(dx: u64, dy: i64) -> u64 {
        debug_assert!(dy >= 0 && u128::from(dx) * (dy as u128) < 1 << 63);
        dx.wrapping_mul(dy as u64)
    }

    #[inline(always)]
    fn signed(dx: u64, dy: i64) -> i64 {
        debug_assert!(u128::from(dx) * u128::from(dy.unsigned_abs()) < 1 << 63);
        (dx as i64).wrapping_mul(dy)
    }
}

/// Products in 128 bits: always exact (`|dx · dy| < 2^64 · 2^63`).
#[derive(Debug)]
pub(crate) enum Wide {}

impl Products for Wide {
    type Unsigned = u128;
    type Signed = i128;

    #[inline(always)]
    fn unsigned(dx: u64, dy: i64) -> u128 {
        debug_assert!(dy >= 0);
        u128::from(dx) * u128::from(dy as u64)
    }

    #[inline(always)]
    fn signed(dx: u64, dy: i64) -> i128 {
        i128::from(dx) * i128::from(dy)
    }
}

/// Whether the slope of `p → q` is less than that of `r → s` (`p.x < q.x`, `r.x < s.x`).
#[inline(always)]
fn slope_less<A: Products>(p: Point, q: Point, r: Point, s: Point) -> bool {
    A::signed(s.x - r.x, q.y - p.y) < A::signed(q.x - p.x, s.y - r.y)
}

/// Where `q` lies against the line through `from` and `to` (`from.x < to.x`, `from.x ≤ q.x`), as
/// two heights above `from`, both scaled by the line's run `to.x − from.x`: `q`'s,
/// `(to.x − from.x)(q.y − from.y)`, and the line's at `q.x`, `(q.x − from.x)(to.y − from.y)`.
/// The first below the second: `q` strictly below the line; above: strictly above.
#[inline(always)]
pub(crate) fn side<A: Products>(from: Point, to: Point, q: Point) -> (A::Signed, A::Signed) {
    (
        A::signed(to.x - from.x, q.y - from.y),
        A::signed(q.x - from.x, to.y - from.y),
    )
}

/// [`side`] for a rising line and a point not below `from`: every difference is non-negative.
#[inline(always)]
pub(crate) fn side_rising<A: Products>(
    from: Point,
    to: Point,
    q: Point,
) -> (A::Unsigned, A::Unsigned) {
    (
        A::unsigned(to.x - from.x, q.y - from.y),
        A::unsigned(q.x - from.x, to.y - from.y),
    )
}

/// Whether the turn `before → last → p` makes `last` redundant: for the upper hull (`UPPER`) a
/// left turn or straight on, for the lower hull a right turn or straight on.
#[inline(always)]
fn redundant<const UPPER: bool, A: Products>(before: Point, last: Point, p: Point) -> bool {
    debug_assert!(before.x <= last.x && last.x <= p.x);
    // Along either chain y never decreases (positions never do).
    let ahead = A::unsigned(last.x - before.x, p.y - before.y);
    let behind = A::unsigned(p.x - before.x, last.y - before.y);
    if UPPER {
        ahead >= behind
    } else {
        ahead <= behind
    }
}

/// One convex chain of band endpoints: for `UPPER` the upper hull of the lower endpoints, else
/// the lower hull of the upper endpoints.
///
/// Vertices `0..len` are live, in increasing x. Vertices before `start` are frozen: no later
/// point can pop them, because the extreme line pivoted past them (they stay as candidates for
/// the intercept). `points` always holds at least one slot beyond `len`, so appending is a plain
/// store whatever the pops were.
#[derive(Debug)]
pub(crate) struct Chain<const UPPER: bool> {
    points: Vec<Point>,
    len: usize,
    /// First vertex a pop or a pivot may consider.
    pub(crate) start: usize,
}

impl<const UPPER: bool> Default for Chain<UPPER> {
    fn default() -> Self {
        Self {
            points: vec![Point::default(); 16],
            len: 0,
            start: 0,
        }
    }
}

impl<const UPPER: bool> Chain<UPPER> {
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.start = 0;
    }

    /// The chain's vertices, in increasing x.
    #[inline(always)]
    pub(crate) fn live(&self) -> &[Point] {
        &self.points[..self.len]
    }

    /// Moves `start` to the vertex, from `start` on, where a line from `q` (right of every vertex)
    /// touches the chain — for the upper hull the flattest line from a vertex to `q`, for the
    /// lower hull the steepest — and returns that vertex. Along a convex chain the slopes to `q`
    /// improve up to the tangent point and worsen after it, so the scan stops at the first worse.
    #[inline(always)]
    pub(crate) fn pivot<A: Products>(&mut self, q: Point) -> Point {
        let hull = self.live();
        let mut best = self.start;
        for i in best + 1..hull.len() {
            let better = if UPPER {
                slope_less::<A>(hull[i], q, hull[best], q)
            } else {
                slope_less::<A>(hull[best], q, hull[i], q)
            };
            if !better {
                break;
            }
            best = i;
        }
        let vertex = hull[best];
        self.start = best;
        vertex
    }

    /// Appends `p` (x beyond every vertex), first dropping the last vertices while they are
    /// [`redundant`] — never one before `start`.
    ///
    /// Which vertices go is data-dependent and close to a coin toss on random keys (no pop, one
    /// pop and two pops are all common), so the first three tests are evaluated unconditionally
    /// and combined without branches; a test reaching before `start` is masked out. Only a
    /// fourth pop (about one push in twenty on uniform keys) takes the loop.
    #[inline(always)]
    pub(crate) fn push<A: Products>(&mut self, p: Point) {
        let len = self.len;
        let start = self.start;
        let (mut kept, settled) = if let Some(&[fourth, third, second, last]) =
            self.points.get(len.wrapping_sub(4)..len)
        {
            let drop1 = (len >= start + 2) & redundant::<UPPER, A>(second, last, p);
            let drop2 = drop1 & (len >= start + 3) & redundant::<UPPER, A>(third, second, p);
            let drop3 = drop2 & (len >= start + 4) & redundant::<UPPER, A>(fourth, third, p);
            let kept = len - usize::from(drop1) - usize::from(drop2) - usize::from(drop3);
            (kept, !drop3)
        } else {
            (len, false)
        };
        if !settled {
            while kept >= start + 2
                && redundant::<UPPER, A>(self.points[kept - 2], self.points[kept - 1], p)
            {
                kept -= 1;
            }
        }
        self.points[kept] = p;
        self.len = kept + 1;
        if self.len == self.points.len() {
            self.points.push(Point::default());
        }
    }
}

#[cfg(test)]
mod tests {
    use quickcheck::{QuickCheck, TestResult};

    use super::*;

    /// Both product types order every in-range pair alike, at the edge of `Narrow`'s range too.
    #[test]
    fn narrow_and_wide_products_agree_within_the_narrow_range() {
        fn prop(a: u64, b: i64, c: u64, d: i64) -> TestResult {
            let fits = |dx: u64, dy: i64| u128::from(dx) * u128::from(dy.unsigned_abs()) < 1 << 63;
            if !fits(a, b) || !fits(c, d) {
                return TestResult::discard();
            }
            let signed = Narrow::signed(a, b).cmp(&Narrow::signed(c, d))
                == Wide::signed(a, b).cmp(&Wide::signed(c, d));
            let (b, d) = (b.saturating_abs(), d.saturating_abs());
            let unsigned = Narrow::unsigned(a, b).cmp(&Narrow::unsigned(c, d))
                == Wide::unsigned(a, b).cmp(&Wide::unsigned(c, d));
            TestResult::from_bool(signed && unsigned)
        }
        QuickCheck::new()
            .tests(2000)
            .quickcheck(prop as fn(u64, i64, u64, i64) -> TestResult);
        // Largest magnitudes: (2^63 − 1) · ±1 and (2^31)(2^32 − 1).
        let max = (1u64 << 63) - 1;
        assert_eq!(Narrow::signed(max, -1), -(max as i64));
        assert_eq!(
            i128::from(Narrow::signed(1 << 31, (1 << 32) - 1)),
            Wide::signed(1 << 31, (1 << 32) - 1)
        );
        assert_eq!(u128::from(Narrow::unsigned(max, 1)), Wide::unsigned(max, 1));
    }

    /// Pops stop at `start`, whether they are decided branch-free or by the loop.
    #[test]
    fn pops_never_reach_before_start() {
        let concave = [(0, 0), (10, 5), (20, 8), (30, 10), (40, 11), (50, 11)];
        let above_all = Point { x: 60, y: 100 };
        for start in 0..concave.len() {
            let mut chain = Chain::<true>::default();
            for &(x, y) in &concave {
                chain.push::<Narrow>(Point { x, y });
            }
            assert_eq!(
                chain.live().len(),
                concave.len(),
                "all are upper-hull vertices"
            );
            chain.start = start;
            chain.push::<Narrow>(above_all);
            // Everything after `start` (but at least the first vertex) goes.
            let kept = (start + 1).max(1);
            let expected: Vec<Point> = concave[..kept]
                .iter()
                .map(|&(x, y)| Point { x, y })
                .chain([above_all])
                .collect();
            assert_eq!(chain.live(), expected, "start {start}");
        }
    }

    /// Pushing points in x order keeps exactly the hull vertices a quadratic check says are on
    /// the hull, whichever product type decides.
    #[test]
    fn chains_keep_exactly_the_hull_vertices() {
        fn hull_by_definition<const UPPER: bool>(points: &[Point]) -> Vec<Point> {
            // A point is a vertex when no chord over it passes on its outer side or through it.
            (0..points.len())
                .filter(|&j| {
                    !(0..j).any(|i| {
                        (j + 1..points.len())
                            .any(|k| redundant::<UPPER, Wide>(points[i], points[j], points[k]))
                    })
                })
                .map(|j| points[j])
                .collect()
        }
        fn prop(steps: Vec<(u16, u8)>) -> TestResult {
            let mut points = Vec::new();
            let (mut x, mut y) = (0u64, 0i64);
            for (dx, dy) in steps.into_iter().take(40) {
                x += u64::from(dx) + 1;
                y += i64::from(dy % 8);
                points.push(Point { x, y });
            }
            let mut upper = Chain::<true>::default();
            let mut lower = Chain::<false>::default();
            let mut upper_wide = Chain::<true>::default();
            for &p in &points {
                upper.push::<Narrow>(p);
                lower.push::<Narrow>(p);
                upper_wide.push::<Wide>(p);
            }
            TestResult::from_bool(
                upper.live() == hull_by_definition::<true>(&points)
                    && lower.live() == hull_by_definition::<false>(&points)
                    && upper_wide.live() == upper.live(),
            )
        }
        QuickCheck::new()
            .tests(500)
            .quickcheck(prop as fn(Vec<(u16, u8)>) -> TestResult);
    }
}
