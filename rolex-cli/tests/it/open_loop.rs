//! Open-loop runs (`--target-rate`): `bench` starts operations on a schedule and says so, and
//! `compare --rate-sweep` runs every index at each rate into a table, a JSON section and a plot
//! of latency against throughput per workload.

use crate::common::{json, run};

/// A run offered 4,000 operations per second cannot do its 2,000 operations in less than half a
/// second, however fast the store (the schedule holds them back; a lower bound, which a busy
/// machine cannot break), and its report says it ran open-loop.
#[test]
fn a_bench_run_at_a_target_rate_keeps_to_its_schedule_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    for inflight in ["1", "3"] {
        let (stdout, _) = run(&[
            "bench",
            "--keys",
            "5000",
            "--ops",
            "2000",
            "--threads",
            "2",
            "--inflight",
            inflight,
            "--target-rate",
            "4000",
            "--quiet",
            "--json",
            report.to_str().expect("utf-8"),
        ]);
        let r = json(&report);
        assert_eq!(r["target_rate"], 4000.0, "{r}");
        let wall = r["wall_seconds"].as_f64().expect("wall");
        // Each thread's last operation is due (1000 - 1) / 2000 s after its first, at the
        // earliest.
        assert!(
            wall >= 0.49,
            "{wall} s for 2,000 operations at 4,000 per second"
        );
        let done = r["throughput_ops_s"].as_f64().expect("throughput");
        assert!(done <= 4100.0, "{done} ops/s done at 4,000 offered");
        assert!(
            stdout.contains("open loop: 4000 ops/s offered")
                && stdout.contains("latencies from each operation's scheduled start"),
            "{stdout}"
        );
        assert_eq!(r["verify_clean"], true);
    }
    // A closed-loop run's report has no rate.
    run(&[
        "bench",
        "--keys",
        "5000",
        "--ops",
        "500",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    assert!(json(&report)["target_rate"].is_null());
}

#[test]
fn compare_sweeps_rates_for_every_index_into_a_table_json_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let report = dir.path().join("c.json");
    let (stdout, _) = run(&[
        "compare",
        "--keys",
        "5000",
        "--ops",
        "600",
        "--no-budget-sweep",
        "--rate-sweep",
        "3000,12000",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    let points = r["rate_sweep"].as_array().expect("rate_sweep");
    assert_eq!(points.len(), 4, "two rates, YCSB C and A: {points:?}");
    for (p, (workload, offered)) in points.iter().zip([
        ("ycsb-c", 3000.0),
        ("ycsb-c", 12000.0),
        ("ycsb-a", 3000.0),
        ("ycsb-a", 12000.0),
    ]) {
        assert_eq!(p["workload"], workload);
        assert_eq!(p["offered_ops_s"], offered);
        for index in ["rolex", "bplus", "chime"] {
            let f = &p[index];
            let done = f["ops_s"].as_f64().expect("ops_s");
            assert!(
                done > 0.0 && done <= offered * 1.03,
                "{index} did {done} ops/s at {offered} offered"
            );
            let (p50, p99) = (
                f["p50_us"].as_f64().expect("p50"),
                f["p99_us"].as_f64().expect("p99"),
            );
            assert!(p50 > 0.0 && p50 <= p99, "{index}: p50 {p50}, p99 {p99}");
        }
    }
    let table = std::fs::read_to_string(out.join("table.md")).expect("table");
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|l| l.contains(" --rate-sweep 3000,12000")),
        "{table}"
    );
    assert!(stdout.contains("Open loop") && stdout.contains("| ycsb-a | 12000 |"));
    for svg in [
        "latency_vs_throughput_ycsb-c.svg",
        "latency_vs_throughput_ycsb-a.svg",
    ] {
        let text = std::fs::read_to_string(out.join(svg)).expect("plot");
        for series in [
            ">ROLEX, p99<",
            ">ROLEX, p50<",
            ">B+-tree, p99<",
            ">CHIME, p50<",
        ] {
            assert!(text.contains(series), "{svg} lacks {series}");
        }
    }
}
