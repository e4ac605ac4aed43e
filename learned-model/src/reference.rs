//! A slow, obviously correct OptimalPLR, to check the fast one's optimality on small inputs.
//!
//! Greedy longest segments (optimal for this problem: feasibility is preserved under taking
//! subsets, so extending as far as possible never hurts). A set of bands
//! `[2·pos + 1 − 2ε, 2·pos + 1 + 2ε]` at distinct x is stabbed by some line iff it is stabbed by
//! a line through two band endpoints at different x (the feasible region of the 2-variable
//! linear program is a bounded polygon once two x values exist, and its vertices are such
//! lines) — or trivially, when there are at most two points. Every candidate is checked exactly.

fn bands(points: &[(u64, u64)], epsilon: u64) -> Vec<(i128, i128, i128)> {
    let first = points[0].0;
    points
        .iter()
        .map(|&(k, p)| {
            let y = 2 * i128::from(p) + 1;
            let e = 2 * i128::from(epsilon);
            (i128::from(k - first), y - e, y + e)
        })
        .collect()
}

fn stabbed(bands: &[(i128, i128, i128)]) -> bool {
    if bands.len() <= 2 {
        return true;
    }
    for (i, &(x1, lo1, hi1)) in bands.iter().enumerate() {
        for &(x2, lo2, hi2) in &bands[i + 1..] {
            for y1 in [lo1, hi1] {
                for y2 in [lo2, hi2] {
                    // Line through (x1, y1), (x2, y2): at x, y = y1 + (y2 − y1)(x − x1)/(x2 − x1).
                    let dx = x2 - x1;
                    let ok = bands.iter().all(|&(x, lo, hi)| {
                        let scaled = y1 * dx + (y2 - y1) * (x - x1);
                        lo * dx <= scaled && scaled <= hi * dx
                    });
                    if ok {
                        return true;
                    }
                }
            }
        }
    }
    false
}

/// The minimal number of segments for `points` (strictly increasing keys) with error ε.
pub(crate) fn optimal_segment_count(points: &[(u64, u64)], epsilon: u64) -> usize {
    let mut count = 0;
    let mut start = 0;
    while start < points.len() {
        let mut end = start + 1;
        while end < points.len() && stabbed(&bands(&points[start..=end], epsilon)) {
            end += 1;
        }
        count += 1;
        start = end;
    }
    count
}
