//! Figures over repeated runs (`--runs`): a figure's spread (mean, standard deviation, min and
//! max), and one figure over another (`rolex compare`'s ratios) as the ratio of their means with
//! a 95% confidence interval.

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

/// One figure over another across `n` paired runs (`rolex compare`: ROLEX's throughput over a
/// baseline's, run i of both with seed S + i): the ratio of the two means, with a 95% confidence
/// interval by Fieller's method for paired samples.
///
/// Why this statistic:
/// * **The ratio of the means, not the mean of the per-run ratios.** What a reader wants is how
///   much faster one index is on average, `mean(x) / mean(y)`. The mean of the ratios answers
///   another question and is pulled far off by one run whose denominator was low: YCSB F
///   (zipfian) once gave per-run ratios averaging 5.49 ± 7.31 where the mean throughputs were
///   2.14 apart. A ratio of means weighs each run by its throughput, so one slow
///   baseline run moves it far less.
/// * **Fieller's interval**, not the delta method's `ratio ± t·se`. Fieller's is the set of
///   ratios `R` that a t-test of `mean(x) − R·mean(y) = 0` does not reject at 5%; it is exact
///   when the means are normal (their sums over runs nearly are), needs no linearisation, and
///   is asymmetric as a ratio's uncertainty is. Where the denominator's mean cannot be told
///   from 0 at 95% (`t²·var(mean(y)) ≥ mean(y)²`, likely with 2 or 3 noisy runs) no finite
///   interval holds the ratio with 95% confidence, and it says so ([`Interval::UNBOUNDED`])
///   where the delta method would print a narrow, wrong one. Where the numerator's mean cannot
///   be told from 0 the interval reaches below 0; figures that are never negative (throughput,
///   bytes, round trips) cannot have a negative ratio, so it is cut at 0 then (a confidence set
///   cut to the values the ratio can take keeps its coverage).
/// * **Paired**: run i of both indexes shares its seed (the same keys and operation streams)
///   and its moment on the machine, so the two figures of a run may move together; the sample
///   covariance of the pairs enters the interval. If the runs are in fact independent it is
///   near 0 and costs only the degrees of freedom (n − 1, Student's t).
/// * **One run**: no interval at all (`ci95: None`), never a spread of 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioOfMeans {
    /// `mean(x) / mean(y)` over the runs.
    pub ratio: f64,
    /// The 95% confidence interval of the ratio (Fieller's, paired); `None` with one run.
    pub ci95: Option<Interval>,
    /// Runs (pairs).
    pub n: usize,
}

/// A confidence interval: `low` to `high`, both `None` when it is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub low: Option<f64>,
    pub high: Option<f64>,
}

impl Interval {
    /// No finite interval: the denominator's mean is not clearly above 0.
    pub const UNBOUNDED: Interval = Interval {
        low: None,
        high: None,
    };
}

impl RatioOfMeans {
    /// The ratio of the means of `pairs` (`(x, y)`, one per run) with its interval; `None` for
    /// no pairs. A mean `y` of 0 or less is taken as 1e-9 (the ratio is then huge, and the
    /// interval unbounded).
    pub fn of(pairs: &[(f64, f64)]) -> Option<Self> {
        let n = pairs.len();
        if n == 0 {
            return None;
        }
        let count = n as f64;
        let mx = pairs.iter().map(|p| p.0).sum::<f64>() / count;
        let my = pairs.iter().map(|p| p.1).sum::<f64>() / count;
        let ratio = mx / my.max(1e-9);
        if n == 1 {
            return Some(Self {
                ratio,
                ci95: None,
                n,
            });
        }
        // Variances and covariance of the two means (sample moments over n − 1, then over n).
        let moment = |f: &dyn Fn(f64, f64) -> f64| {
            pairs.iter().map(|&(x, y)| f(x - mx, y - my)).sum::<f64>() / (count - 1.0) / count
        };
        let vxx = moment(&|dx, _| dx * dx);
        let vyy = moment(&|_, dy| dy * dy);
        let vxy = moment(&|dx, dy| dx * dy);
        // var(mean(x) − R·mean(y)) at R = ratio, from the centred residuals (no cancellation).
        let vdd = moment(&|dx, dy| (dx - ratio * dy) * (dx - ratio * dy));
        let t2 = t_975(n - 1).powi(2);
        // Fieller: (mx − R·my)² ≤ t²·(vxx − 2R·vxy + R²·vyy), i.e. a·R² − 2b·R + c ≤ 0.
        let a = my * my - t2 * vyy;
        if a <= 0.0 || !a.is_finite() {
            return Some(Self {
                ratio,
                ci95: Some(Interval::UNBOUNDED),
                n,
            });
        }
        let b = mx * my - t2 * vxy;
        // b² − a·c, written so that nothing large cancels: t²·my²·vdd − t⁴·(vxx·vyy − vxy²).
        let disc = (t2 * my * my * vdd - t2 * t2 * (vxx * vyy - vxy * vxy).max(0.0)).max(0.0);
        let root = disc.sqrt();
        let mut low = (b - root) / a;
        if pairs.iter().all(|&(x, y)| x >= 0.0 && y >= 0.0) {
            low = low.max(0.0);
        }
        Some(Self {
            ratio,
            ci95: Some(Interval {
                low: Some(low),
                high: Some((b + root) / a),
            }),
            n,
        })
    }

    /// `ratio [low–high]` (the 95% interval), `ratio [unbounded]`, or `ratio` alone for one
    /// run, each with `decimals` decimals.
    pub fn show(&self, decimals: usize) -> String {
        match self.ci95 {
            None => format!("{:.d$}", self.ratio, d = decimals),
            Some(Interval {
                low: Some(low),
                high: Some(high),
            }) => format!("{:.d$} [{low:.d$}–{high:.d$}]", self.ratio, d = decimals),
            Some(_) => format!("{:.d$} [unbounded]", self.ratio, d = decimals),
        }
    }
}

/// Student's t distribution's 0.975 quantile for `df` degrees of freedom (the half-width factor
/// of a two-sided 95% interval): a table to 30, then the Cornish–Fisher expansion around the
/// normal quantile (within 1e-7 from 30 on); `df` 0 is taken as 1.
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706_204_736,
        4.302_652_730,
        3.182_446_305,
        2.776_445_105,
        2.570_581_836,
        2.446_911_851,
        2.364_624_252,
        2.306_004_135,
        2.262_157_163,
        2.228_138_852,
        2.200_985_160,
        2.178_812_830,
        2.160_368_656,
        2.144_786_688,
        2.131_449_546,
        2.119_905_299,
        2.109_815_578,
        2.100_922_040,
        2.093_024_054,
        2.085_963_447,
        2.079_613_845,
        2.073_873_068,
        2.068_657_610,
        2.063_898_562,
        2.059_538_553,
        2.055_529_439,
        2.051_830_516,
        2.048_407_142,
        2.045_229_642,
        2.042_272_456,
    ];
    if let Some(&t) = TABLE.get(df.max(1) - 1) {
        return t;
    }
    let z: f64 = 1.959_963_984_540_054;
    let v = df as f64;
    let g1 = (z.powi(3) + z) / 4.0;
    let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
    let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
    let g4 = (79.0 * z.powi(9) + 776.0 * z.powi(7) + 1482.0 * z.powi(5)
        - 1920.0 * z.powi(3)
        - 945.0 * z)
        / 92_160.0;
    z + g1 / v + g2 / v.powi(2) + g3 / v.powi(3) + g4 / v.powi(4)
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

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn bounds(r: &RatioOfMeans) -> (f64, f64) {
        match r.ci95 {
            Some(Interval {
                low: Some(low),
                high: Some(high),
            }) => (low, high),
            other => panic!("no bounded interval: {other:?}"),
        }
    }

    #[test]
    fn a_ratio_of_means_is_not_a_mean_of_ratios() {
        // One run's baseline at a tenth of the others': the per-run ratios average 1.94, the
        // means are 1.149 apart. The interval (reference: bisection on Fieller's inequality at
        // 40 digits) leaves the mean of the ratios well outside.
        let x = [10.0, 10.5, 9.5, 10.0, 11.0, 9.0, 10.0, 10.5, 9.5, 10.0];
        let y = [1.0, 10.0, 9.0, 10.0, 10.5, 8.5, 9.5, 10.0, 9.0, 9.5];
        let pairs: Vec<(f64, f64)> = x.into_iter().zip(y).collect();
        let mean_of_ratios = pairs.iter().map(|p| p.0 / p.1).sum::<f64>() / 10.0;
        assert!(
            close(mean_of_ratios, 1.942_281_684_603_666),
            "{mean_of_ratios}"
        );
        let r = RatioOfMeans::of(&pairs).unwrap();
        assert!(close(r.ratio, 100.0 / 87.0), "{r:?}");
        assert_eq!(r.n, 10);
        let (low, high) = bounds(&r);
        assert!(close(low, 0.939_951_904_327_786_2), "{low}");
        assert!(close(high, 1.480_009_110_173_665), "{high}");
        assert!(high < mean_of_ratios);
        assert_eq!(r.show(2), "1.15 [0.94–1.48]");
    }

    #[test]
    fn the_interval_counts_the_pairs_covariance() {
        // Four runs whose two figures move together (reference as above).
        let pairs = [(12.0, 6.0), (9.0, 5.0), (11.0, 5.5), (10.0, 5.5)];
        let r = RatioOfMeans::of(&pairs).unwrap();
        assert!(close(r.ratio, 42.0 / 22.0));
        let (low, high) = bounds(&r);
        assert!(close(low, 1.716_956_983_372_69), "{low}");
        assert!(close(high, 2.070_357_059_614_462), "{high}");
        // At each bound the paired t statistic is exactly t(0.975, 3).
        let n = 4.0;
        let (mx, my) = (42.0 / n, 22.0 / n);
        for bound in [low, high] {
            let d: Vec<f64> = pairs.iter().map(|&(x, y)| x - bound * y).collect();
            let mean = d.iter().sum::<f64>() / n;
            let var = d.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
            let t = (mx - bound * my) / (var / n).sqrt();
            assert!(close(t.abs(), t_975(3)), "{t}");
        }
    }

    #[test]
    fn a_numerator_too_noisy_to_tell_from_zero_gives_an_interval_from_zero() {
        // ROLEX's three runs within t·se of 0, the baseline's steady: Fieller's lower root is
        // below 0 (-1.79; reference as above), and a ratio of throughputs cannot be.
        let pairs = [(1.0, 10.0), (20.0, 10.5), (5.0, 9.5)];
        let r = RatioOfMeans::of(&pairs).unwrap();
        assert!(close(r.ratio, 26.0 / 30.0));
        let (low, high) = bounds(&r);
        assert_eq!(low, 0.0);
        assert!(close(high, 3.082_820_035_979_194), "{high}");
        // The same sample shifted below 0 keeps its negative root.
        let shifted: Vec<(f64, f64)> = pairs.iter().map(|&(x, y)| (x - 30.0, y)).collect();
        assert!(bounds(&RatioOfMeans::of(&shifted).unwrap()).0 < 0.0);
    }

    #[test]
    fn a_baseline_too_noisy_to_tell_from_zero_gives_no_bounded_interval() {
        // Like YCSB F (zipfian) with 3 runs: a mean of ratios 3.77, a ratio of means 1.58, and
        // the baseline's mean within t·se of 0: no finite interval.
        let pairs = [(900.0, 100.0), (950.0, 800.0), (1000.0, 900.0)];
        let r = RatioOfMeans::of(&pairs).unwrap();
        assert!(close(r.ratio, 950.0 / 600.0));
        assert_eq!(r.ci95, Some(Interval::UNBOUNDED));
        assert_eq!(r.show(2), "1.58 [unbounded]");
    }

    #[test]
    fn one_run_has_no_interval_and_identical_runs_a_point() {
        let one = RatioOfMeans::of(&[(3.0, 2.0)]).unwrap();
        assert_eq!((one.ratio, one.ci95, one.n), (1.5, None, 1));
        assert_eq!(one.show(2), "1.50", "no ± 0 and no interval");
        assert!(RatioOfMeans::of(&[]).is_none());
        let same = RatioOfMeans::of(&[(3.0, 2.0); 3]).unwrap();
        assert_eq!(bounds(&same), (1.5, 1.5));
        let json = serde_json::to_value(one).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"ratio": 1.5, "ci95": null, "n": 1})
        );
        let json = serde_json::to_value(RatioOfMeans {
            ci95: Some(Interval::UNBOUNDED),
            ..one
        })
        .unwrap();
        assert_eq!(json["ci95"], serde_json::json!({"low": null, "high": null}));
    }

    #[test]
    fn student_t_quantiles() {
        // References: the 0.975 quantile by root-finding on the regularized incomplete beta
        // function, 40 digits.
        for (df, t) in [
            (1, 12.706_204_736_2),
            (2, 4.302_652_729_75),
            (9, 2.262_157_162_8),
            (30, 2.042_272_456_3),
            (31, 2.039_513_446_4),
            (40, 2.021_075_390_3),
            (99, 1.984_216_951_59),
            (120, 1.979_930_405_08),
        ] {
            assert!((t_975(df) - t).abs() < 1e-7, "df {df}: {}", t_975(df));
        }
        assert_eq!(t_975(0), t_975(1));
    }
}
