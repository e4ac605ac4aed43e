//! Trains a leaf model on a synthetic key set and prints one JSON object of figures.
//!
//! ```text
//! cargo run --release -p learned-model --example plr_stats -- \
//!     --keys N --dist uniform|normal|lognormal|sequential --epsilon E --seed S \
//!     [--delta D] [--fill F] [--runs R]
//! ```
//!
//! Defaults: 10,000,000 keys, uniform, ε = 16, δ = 16, fill = δ (so positions are ranks, as in the
//! paper's Table 1), 5 runs. Times are medians over the runs. `train_ns_per_key` covers the whole
//! `LeafModel::train_filled` (PLR plus exact intercepts); `predict_ns` is one `owner_candidates`
//! call (segment search, prediction, leaf range) for a random trained key.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use learned_model::{LeafModel, ModelParams, TopLevelIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal};
use testkit::median;

struct Args {
    keys: usize,
    dist: String,
    epsilon: u64,
    delta: u64,
    fill: Option<u64>,
    seed: u64,
    runs: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        keys: 10_000_000,
        dist: "uniform".into(),
        epsilon: 16,
        delta: 16,
        fill: None,
        seed: 1,
        runs: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |s: String| s.parse::<u64>().map_err(|e| format!("{flag} {s:?}: {e}"));
        match flag.as_str() {
            "--keys" => args.keys = number(value()?)? as usize,
            "--dist" => args.dist = value()?,
            "--epsilon" => args.epsilon = number(value()?)?,
            "--delta" => args.delta = number(value()?)?,
            "--fill" => args.fill = Some(number(value()?)?),
            "--seed" => args.seed = number(value()?)?,
            "--runs" => args.runs = number(value()?)?.max(1) as usize,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.keys == 0 {
        return Err("--keys must be positive".into());
    }
    Ok(args)
}

/// Sorted unique keys of the requested distribution. Normal and lognormal samples are scaled to
/// [0, 10^12], as in the ROLEX paper; duplicates after rounding are dropped.
fn key_set(dist: &str, n: usize, seed: u64) -> Result<Vec<u64>, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let scaled = |samples: Vec<f64>| {
        let (lo, hi) = samples
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let span = (hi - lo).max(f64::MIN_POSITIVE);
        samples
            .into_iter()
            .map(|x| ((x - lo) / span * 1e12) as u64)
            .collect::<Vec<_>>()
    };
    let mut keys = match dist {
        "uniform" => (0..n).map(|_| rng.random::<u64>()).collect(),
        "sequential" => (0..n as u64).collect(),
        "normal" => {
            let d = Normal::new(0.0, 1.0).map_err(|e| e.to_string())?;
            scaled((0..n).map(|_| d.sample(&mut rng)).collect())
        }
        "lognormal" => {
            let d = LogNormal::new(0.0, 2.0).map_err(|e| e.to_string())?;
            scaled((0..n).map(|_| d.sample(&mut rng)).collect())
        }
        other => {
            return Err(format!(
                "unknown distribution {other:?} (uniform, normal, lognormal, sequential)"
            ));
        }
    };
    keys.sort_unstable();
    keys.dedup();
    Ok(keys)
}

fn run(args: &Args) -> Result<String, String> {
    let params = ModelParams::new(args.epsilon, args.delta).map_err(|e| e.to_string())?;
    let fill = args.fill.unwrap_or(args.delta);
    let keys = key_set(&args.dist, args.keys, args.seed)?;
    let n = keys.len();

    let mut model = None;
    let train = median(
        (0..args.runs)
            .map(|_| {
                let start = Instant::now();
                let trained =
                    LeafModel::train_filled(params, &keys, fill).map_err(|e| e.to_string());
                let elapsed = start.elapsed().as_nanos() as f64 / n as f64;
                model = Some(trained);
                elapsed
            })
            .collect(),
    );
    let model = model.ok_or("no run")??;

    let mut rng = StdRng::seed_from_u64(args.seed ^ 0xabcdef);
    let probes: Vec<u64> = (0..1_000_000)
        .map(|_| keys[rng.random_range(0..n)])
        .collect();
    let predict = median(
        (0..args.runs)
            .map(|_| {
                let start = Instant::now();
                let mut sum = 0u64;
                for &k in &probes {
                    sum = sum.wrapping_add(black_box(&model).owner_candidates(black_box(k)).first);
                }
                black_box(sum);
                start.elapsed().as_nanos() as f64 / probes.len() as f64
            })
            .collect(),
    );
    let mut leaves_read = 0u64;
    for &k in &probes {
        leaves_read += model.owner_candidates(k).len();
    }

    // A top-level index over one slot per segment, as bulk load lays them out.
    let first_keys: Vec<u64> = model.segments().iter().map(|s| s.first_key).collect();
    let top = TopLevelIndex::new(first_keys).map_err(|e| e.to_string())?;
    let top_predict = median(
        (0..args.runs)
            .map(|_| {
                let start = Instant::now();
                let mut sum = 0usize;
                for &k in &probes {
                    sum = sum.wrapping_add(black_box(&top).slot_of(black_box(k)));
                }
                black_box(sum);
                start.elapsed().as_nanos() as f64 / probes.len() as f64
            })
            .collect(),
    );

    let model_bytes = model.encode().len();
    Ok(format!(
        concat!(
            "{{\"keys\": {}, \"dist\": \"{}\", \"seed\": {}, \"epsilon\": {}, \"delta\": {}, \"fill\": {}, ",
            "\"segments\": {}, \"leaves\": {}, \"model_bytes\": {}, \"model_bytes_per_key\": {:.4}, ",
            "\"train_ns_per_key\": {:.2}, \"predict_ns\": {:.2}, \"mean_candidate_leaves\": {:.3}, ",
            "\"top_level_slots\": {}, \"top_level_segments\": {}, \"top_level_ns\": {:.2}, \"runs\": {}}}"
        ),
        n,
        args.dist,
        args.seed,
        args.epsilon,
        args.delta,
        fill,
        model.segments().len(),
        model.leaves(),
        model_bytes,
        model_bytes as f64 / n as f64,
        train,
        predict,
        leaves_read as f64 / probes.len() as f64,
        top.len(),
        top.segment_count(),
        top_predict,
        args.runs,
    ))
}

fn main() -> ExitCode {
    testkit::print_json_or_fail("plr_stats", parse().and_then(|args| run(&args)))
}
