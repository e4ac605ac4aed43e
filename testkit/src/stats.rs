//! Summaries of repeated measurements.

/// The median of `samples` (the upper one of the middle two when their number is even), in the
/// total order of `f64` (NaNs sort last).
///
/// # Panics
/// If `samples` is empty: a measurement of no runs has no figure.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn odd_even_and_unsorted() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(vec![5.5]), 5.5);
    }
}
