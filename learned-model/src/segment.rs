//! One linear segment with an exact, integer-only prediction.

/// One piece of a piecewise-linear model, valid for keys from `first_key` on.
///
/// The prediction for a key `k` is computed with integers only:
///
/// ```text
/// dx      = min(k - first_key, max_dx)            (0 for keys below first_key)
/// pred(k) = floor((intercept + slope · dx) / 2^64)   clamped to ≥ 0
/// ```
///
/// `slope` and `intercept` are fixed-point numbers with 64 fractional bits. Training
/// ([`crate::PlrBuilder`]) chooses them so that for **every** key the segment was trained on,
/// `|pred(k) − pos(k)| ≤ ε` holds exactly — no floating-point rounding is involved in prediction,
/// so the bound cannot be broken by it. `slope ≥ 0`, so predictions never decrease with the key
/// inside a segment; keys past the last trained key predict like the last trained key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Smallest key the segment was trained on.
    pub first_key: u64,
    /// `last trained key − first_key`: larger offsets are clamped to it.
    pub max_dx: u64,
    /// Positions per key unit, fixed point with 64 fractional bits.
    pub slope: u128,
    /// Position at `first_key`, fixed point with 64 fractional bits.
    pub intercept: i128,
}

impl Segment {
    /// Predicted position of `key`. Never panics, whatever the field values.
    #[inline]
    pub fn predict(&self, key: u64) -> u64 {
        let dx = key.saturating_sub(self.first_key).min(self.max_dx);
        let scaled = i128::try_from(self.slope.saturating_mul(u128::from(dx))).unwrap_or(i128::MAX);
        let value = self.intercept.saturating_add(scaled) >> 64;
        // Positions are below 2^48 for every model this crate trains.
        u64::try_from(value.max(0)).unwrap_or(u64::MAX)
    }

    /// Whether predicting any key can overflow the fixed-point arithmetic. Trained segments never
    /// can; decoded ones are checked with this.
    pub(crate) fn is_well_formed(&self) -> bool {
        let Some(span) = self.slope.checked_mul(u128::from(self.max_dx)) else {
            return false;
        };
        i128::try_from(span)
            .ok()
            .and_then(|span| self.intercept.checked_add(span))
            .is_some()
            && self.intercept > i128::MIN / 2
    }
}
