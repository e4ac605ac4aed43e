//! The spread of a figure over repeated runs (`--runs`): mean, standard deviation, min and max.

use serde::Serialize;

/// A figure over `n` runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    /// The sample standard deviation (0 for one run).
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Spread {
    /// The spread of `values` (`None` if there are none).
    pub fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Self {
            mean,
            sd,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n,
        })
    }

    /// `mean ± sd [min–max]`, each with `decimals` decimals.
    pub fn show(&self, decimals: usize) -> String {
        format!(
            "{:.d$} ± {:.d$} [{:.d$}–{:.d$}]",
            self.mean,
            self.sd,
            self.min,
            self.max,
            d = decimals
        )
    }

    /// `mean ± sd`, each with `decimals` decimals.
    pub fn short(&self, decimals: usize) -> String {
        format!("{:.d$} ± {:.d$}", self.mean, self.sd, d = decimals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_of_known_values() {
        let s = Spread::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.mean, 5.0);
        assert!((s.sd - 2.138).abs() < 1e-3, "{}", s.sd);
        assert_eq!((s.min, s.max, s.n), (2.0, 9.0, 8));
        assert_eq!(Spread::of(&[3.0]).unwrap().sd, 0.0);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(s.short(1), "5.0 ± 2.1");
    }
}
