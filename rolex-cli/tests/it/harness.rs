//! What a researcher needs from the bench beyond one run's table: a warm-up left out of the
//! figures, throughput over time, latency distributions (and HdrHistogram's log format),
//! repeated runs with their spread, YCSB's hot-spot and exponential distributions, and
//! `compare --runs` with error bars.

use crate::common::{bad_input_line, bench, json, run as rolex};

#[test]
fn a_warm_up_is_run_and_left_out_of_every_figure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let path = report.to_str().expect("utf-8");
    let (stdout, _) = rolex(&[
        "bench", "--keys", "20000", "--ops", "10000", "--warmup", "30000", "--quiet", "--json",
        path,
    ]);
    let r = json(&report);
    // The warm-up ran at least its count (the sampler stops it within a few milliseconds)...
    assert!(
        r["warmup_ops"].as_u64().expect("warm-up") >= 30_000,
        "{}",
        r["warmup_ops"]
    );
    // ...and the figures count the measured operations only.
    let counted: u64 = r["ops"]
        .as_object()
        .expect("ops")
        .values()
        .map(|o| o["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(counted, 10_000);
    assert_eq!(r["config"]["ops_run"], 10_000);
    assert!(stdout.contains("warm-up: "), "{stdout}");
    // A warm-up in seconds, before a timed run.
    rolex(&[
        "bench",
        "--keys",
        "5000",
        "--warmup",
        "0.2s",
        "--duration",
        "0.3",
        "--quiet",
        "--json",
        path,
    ]);
    let r = json(&report);
    assert!(r["warmup_ops"].as_u64().expect("warm-up") > 0);
    let wall = r["wall_seconds"].as_f64().expect("wall");
    assert!(
        (0.25..2.0).contains(&wall),
        "the measured stretch lasted {wall} s"
    );
}

#[test]
fn throughput_over_time_is_printed_kept_and_plotted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let plot = dir.path().join("t.svg");
    let (_, stderr) = rolex(&[
        "bench",
        "--keys",
        "20000",
        "--duration",
        "0.5",
        "--report-interval",
        "0.1",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
        "--interval-plot",
        plot.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    let intervals = r["intervals"].as_array().expect("intervals");
    assert!(
        (4..=7).contains(&intervals.len()),
        "{} intervals",
        intervals.len()
    );
    let ops: u64 = intervals
        .iter()
        .map(|i| i["ops"].as_u64().expect("ops"))
        .sum();
    let total: u64 = r["config"]["ops_run"].as_u64().expect("ops");
    // The series covers the run (up to the last flush of each thread's counter).
    assert!(ops <= total && ops + 2 * 256 >= total, "{ops} of {total}");
    for i in intervals {
        assert!(i["ops_per_s"].as_f64().expect("rate") > 0.0);
    }
    assert_eq!(
        stderr.lines().filter(|l| l.contains(" ops/s ")).count(),
        intervals.len()
    );
    let svg = std::fs::read_to_string(&plot).expect("plot");
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"));
    // The time axis starts at 0 and is labelled at whole intervals, not at the samples' ends.
    for tick in [">0<", ">0.10<", ">0.20<"] {
        assert!(svg.contains(tick), "no tick {tick}");
    }
}

#[test]
fn latencies_have_their_distribution_and_an_hdrhistogram_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let log = dir.path().join("lat.hlog");
    rolex(&[
        "bench",
        "--keys",
        "20000",
        "--ops",
        "20000",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
        "--latency-histogram",
        log.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    for op in ["read", "update"] {
        let l = &r["ops"][op]["latency_us"];
        let at = |f: &str| l[f].as_f64().expect(f);
        assert!(at("p50") <= at("p90") && at("p90") <= at("p95") && at("p95") <= at("p99"));
        assert!(at("p99") <= at("p999") && at("p999") <= at("max") && at("mean") > 0.0);
    }
    // HdrHistogram's interval log: its headers, then one tagged, compressed histogram per type.
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("#[StartTime: ") && text.contains("#[BaseTime: "),
        "{text}"
    );
    for op in ["read", "update"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("Tag={op},")))
            .unwrap_or_else(|| panic!("no {op} interval in {text}"));
        let fields: Vec<&str> = line.split(',').collect();
        assert_eq!(fields.len(), 5, "{line}");
        assert!(fields[4].starts_with("HISTF"), "{line}");
    }
}

/// With `--report-interval`, each interval has its latency percentiles in the JSON, and the
/// HdrHistogram log an entry per interval and operation type, in time order, their maxima the
/// run's.
#[test]
fn latencies_are_kept_per_interval_in_the_json_and_the_log() {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let log = dir.path().join("lat.hlog");
    rolex(&[
        "bench",
        "--keys",
        "20000",
        "--duration",
        "0.6",
        "--report-interval",
        "0.1",
        "--inflight",
        "2",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
        "--latency-histogram",
        log.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    let intervals = r["intervals"].as_array().expect("intervals");
    assert!(intervals.len() >= 4, "{intervals:?}");
    for i in intervals.iter().filter(|i| i["ops"].as_u64() > Some(0)) {
        let l = &i["latency_us"];
        let at = |f: &str| l[f].as_f64().unwrap_or_else(|| panic!("{f} in {i}"));
        assert!(
            at("p50") > 0.0 && at("p50") <= at("p99") && at("p99") <= at("max"),
            "{i}"
        );
    }
    let text = std::fs::read_to_string(&log).expect("log");
    let entries: Vec<(String, f64, f64, f64)> = IntervalLogIterator::new(text.as_bytes())
        .filter_map(|e| match e {
            Ok(LogEntry::Interval(h)) => Some((
                h.tag().map(|t| t.as_str().to_string()).expect("tagged"),
                h.start_timestamp().as_secs_f64(),
                h.duration().as_secs_f64(),
                h.max(),
            )),
            _ => None,
        })
        .collect();
    for op in ["read", "update"] {
        let mine: Vec<_> = entries.iter().filter(|e| e.0 == op).collect();
        assert!(mine.len() >= 4, "{op}: {mine:?}");
        assert!(
            mine.windows(2).all(|w| w[0].1 + w[0].2 <= w[1].1 + 1e-3),
            "{op}: intervals out of order or overlapping: {mine:?}"
        );
        let run_max = r["ops"][op]["latency_us"]["max"].as_f64().expect("max");
        let logged_max = mine.iter().map(|e| e.3).fold(0.0, f64::max);
        assert!(
            (logged_max - run_max).abs() <= 0.01 * run_max + 0.01,
            "{op}: the intervals' slowest {logged_max} µs, the run's {run_max} µs"
        );
    }
}

#[test]
fn repeated_runs_report_their_spread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let (stdout, _) = rolex(&[
        "bench",
        "--keys",
        "10000",
        "--ops",
        "10000",
        "--runs",
        "3",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    let runs = r["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    let seeds: Vec<u64> = runs
        .iter()
        .map(|run| run["config"]["seed"].as_u64().expect("seed"))
        .collect();
    assert_eq!(seeds, [1, 2, 3]);
    let t: Vec<f64> = runs
        .iter()
        .map(|run| run["throughput_ops_s"].as_f64().expect("t"))
        .collect();
    let spread = &r["spread"]["throughput_ops_s"];
    let mean = t.iter().sum::<f64>() / 3.0;
    assert!((spread["mean"].as_f64().expect("mean") - mean).abs() < 1e-6 * mean);
    assert_eq!(spread["min"].as_f64(), t.iter().copied().reduce(f64::min));
    assert_eq!(spread["max"].as_f64(), t.iter().copied().reduce(f64::max));
    assert!(
        spread["sd"].as_f64().expect("sd") > 0.0,
        "three wall-clock runs never agree"
    );
    assert!(r["spread"]["ops"]["read"]["latency_us"]["p99"]["n"] == 3);
    assert!(
        stdout.contains("over 3 runs, mean ± standard deviation"),
        "{stdout}"
    );
}

#[test]
fn hotspot_and_exponential_requests_run() {
    for dist in ["hotspot", "exponential"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let report = dir.path().join("r.json");
        let (stdout, _) = rolex(&[
            "bench",
            "--keys",
            "10000",
            "--ops",
            "10000",
            "--request-dist",
            dist,
            "--quiet",
            "--json",
            report.to_str().expect("utf-8"),
        ]);
        assert_eq!(json(&report)["config"]["mix"]["request_dist"], dist);
        assert!(stdout.contains(&format!("{dist} requests")), "{stdout}");
    }
    // From a workload file, with its parameters.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("w");
    std::fs::write(
        &file,
        "recordcount=5000\noperationcount=5000\nreadproportion=1\nrequestdistribution=hotspot\nhotspotdatafraction=0.1\nhotspotopnfraction=0.9\n",
    )
    .expect("write");
    let report = dir.path().join("r.json");
    rolex(&[
        "bench",
        "--workload-file",
        file.to_str().expect("utf-8"),
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let params = &json(&report)["config"]["mix"]["dist_params"];
    assert_eq!(params["hotspot_data_fraction"], 0.1);
    assert_eq!(params["hotspot_op_fraction"], 0.9);
}

#[test]
fn compare_with_runs_shows_spread_and_error_bars() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    let report = dir.path().join("c.json");
    let (stdout, _) = rolex(&[
        "compare",
        "--keys",
        "3000",
        "--ops",
        "3000",
        "--runs",
        "2",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    // The first table: each index's throughput, then ROLEX's ratios over each baseline.
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("| workload | requests | ROLEX ops/s |"))
        .filter(|l| l.starts_with("| ycsb-"))
        .take(12)
        .collect();
    assert_eq!(rows.len(), 12);
    for row in rows {
        // Throughputs of the three indexes as mean ± sd; the three throughput ratios over each
        // of the two baselines as ratio [low–high] or ratio [unbounded] (with two runs, t is
        // 12.7: often unbounded).
        assert_eq!(row.matches(" ± ").count(), 3, "{row}");
        assert_eq!(row.matches(" [").count(), 6, "{row}");
    }
    assert!(stdout.contains("95% confidence interval"), "{stdout}");
    let r = json(&report);
    assert_eq!(r["runs"], 2);
    for case in r["cases"].as_array().expect("cases") {
        assert_eq!(case["repeats"].as_array().expect("repeats").len(), 1);
        assert_eq!(case["repeats"][0]["rolex"]["config"]["seed"], 2);
        // The ratio of the mean throughputs (not the mean of the two runs' ratios), with its
        // interval around it or none (unbounded).
        let ops = |run: &serde_json::Value| run["throughput_ops_s"].as_f64().expect("ops/s");
        let mean = |index: &str| (ops(&case[index]) + ops(&case["repeats"][0][index])) / 2.0;
        for baseline in ["bplus", "chime"] {
            let measured = &case["ratios"][baseline]["measured_throughput"];
            assert_eq!(measured["n"], 2);
            let ratio = measured["ratio"].as_f64().expect("ratio");
            let expected = mean("rolex") / mean(baseline);
            assert!((ratio - expected).abs() <= 1e-9 * expected, "{measured}");
            let ci = &measured["ci95"];
            match (ci["low"].as_f64(), ci["high"].as_f64()) {
                (Some(low), Some(high)) => assert!(low <= ratio && ratio <= high, "{measured}"),
                _ => assert!(ci["low"].is_null() && ci["high"].is_null(), "{measured}"),
            }
        }
        // Each index's spread over the runs, under its name.
        for index in ["rolex", "bplus", "chime"] {
            assert_eq!(case["spread"][index]["throughput_ops_s"]["n"], 2, "{index}");
        }
        assert!(case["spread"].get("measured_throughput_ratio").is_none());
    }
    // The README's schema names every field of compare's JSON.
    let schema = readme_schema();
    let mut missing = Vec::new();
    let case = &r["cases"][0];
    for part in [
        &r,
        case,
        &case["ratios"],
        &case["ratios"]["bplus"],
        &case["ratios"]["chime"],
        &case["ratios"]["bplus"]["measured_throughput"],
        &case["spread"],
        &case["spread"]["rolex"],
        &case["repeats"][0],
        &r["clients_sweep"][0],
        &r["clients_sweep"][0]["ops_s"],
        &r["budget_sweep"][0],
        &r["budget_sweep"][0]["rolex"],
    ] {
        for key in part.as_object().expect("object").keys() {
            if !names(&schema, key) {
                missing.push(key.clone());
            }
        }
    }
    for key in ["low", "high", "seconds"] {
        if !names(&schema, key) {
            missing.push(key.into());
        }
    }
    assert!(missing.is_empty(), "the README's schema lacks {missing:?}");
    let measured = std::fs::read_to_string(out.join("measured_throughput.svg")).expect("plot");
    assert!(measured.contains("<path d="), "error bars drawn");
    let cdf = std::fs::read_to_string(out.join("latency_cdf.svg")).expect("plot");
    // GETs and UPDATEs of each of the three indexes.
    assert!(cdf.contains("99.9%") && cdf.matches("<polyline").count() == 6);
    let table = std::fs::read_to_string(out.join("table.md")).expect("table");
    assert!(table.contains("--runs 2`"), "{table}");
    // Each operation type's bars come from a named run (not pooled over runs).
    let bytes = std::fs::read_to_string(out.join("bytes_per_op.svg")).expect("plot");
    assert!(bytes.contains("GET (YCSB C)") && bytes.contains("INSERT (100% inserts)"));
}

/// Whether `text` holds `word` as a whole word (not inside a longer name).
fn names(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(part)
            && !text[at + word.len()..].chars().next().is_some_and(part)
    })
}

/// The README's section on the JSON reports.
fn readme_schema() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    let start = readme.find("**Report schema**").expect("a schema section");
    readme[start..start + readme[start..].find("\n## ").expect("its end")].to_string()
}

#[test]
fn the_readme_schema_names_every_field_of_the_json() {
    let schema = &readme_schema();
    assert!(
        schema.contains("`schema_version` (2;"),
        "the schema carries its version"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    rolex(&[
        "bench",
        "--keys",
        "5000",
        "--ops",
        "5000",
        "--value-size",
        "50",
        "--runs",
        "2",
        "--report-interval",
        "0.01",
        "--load-phase",
        "--quiet",
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    let mut missing = Vec::new();
    let mut check = |v: &serde_json::Value| {
        for key in v.as_object().expect("object").keys() {
            if !names(schema, key) {
                missing.push(key.clone());
            }
        }
    };
    check(&r);
    check(&r["spread"]);
    let run = &r["runs"][0];
    check(run);
    for part in ["modeled", "retrainer", "values", "phases", "load"] {
        check(&run[part]);
    }
    check(&run["ops"]["read"]);
    check(&run["ops"]["read"]["latency_us"]);
    check(&run["load"]["insert"]);
    check(&run["intervals"][0]);
    check(&run["values"]);
    assert!(missing.is_empty(), "the README's schema lacks {missing:?}");
}

#[test]
fn what_the_harness_cannot_do_is_refused_before_any_work() {
    assert!(bad_input_line(&["bench", "--warmup", "abc"]).contains("--warmup"));
    assert!(bad_input_line(&["bench", "--warmup", "0"]).contains("--warmup"));
    assert!(bad_input_line(&["bench", "--warmup", "infs"]).contains("--warmup"));
    assert!(bad_input_line(&["bench", "--runs", "0"]).contains("--runs"));
    assert!(bad_input_line(&["bench", "--runs", "101"]).contains("--runs"));
    assert!(bad_input_line(&["compare", "--runs", "0"]).contains("--runs"));
    assert!(bad_input_line(&["bench", "--report-interval", "0"]).contains("--report-interval"));
    assert!(
        bad_input_line(&["bench", "--interval-plot", "/tmp/x.svg"]).contains("--report-interval")
    );
    let started = std::time::Instant::now();
    let line = bad_input_line(&["bench", "--latency-histogram", "/nonexistent-dir/lat.hlog"]);
    assert!(line.contains("--latency-histogram"), "{line}");
    assert!(started.elapsed().as_secs() < 5, "checked after the run");
    let line = bad_input_line(&[
        "bench",
        "--report-interval",
        "0.1",
        "--interval-plot",
        "/nonexistent-dir/t.svg",
    ]);
    assert!(line.contains("--interval-plot"), "{line}");
}

/// Operations in flight: a pipelined run (also in the simulator's latency mode) does every
/// operation, verifies clean, counts threads x inflight modeled clients, and says so in its
/// JSON.
#[test]
fn a_pipelined_run_keeps_operations_in_flight_and_models_them_as_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (workload, latency, values) in [
        ("ycsb-a", None, None),
        ("ycsb-f", Some("5"), None),
        ("churn", None, None),
        ("ycsb-e", None, Some("64-200")),
    ] {
        let out = dir.path().join(format!("{workload}.json"));
        let mut args = vec![
            "bench",
            "--keys",
            "20000",
            "--ops",
            "20000",
            "--threads",
            "2",
            "--inflight",
            "4",
            "--workload",
            workload,
            "--quiet",
            "--json",
            out.to_str().expect("path"),
        ];
        if let Some(us) = latency {
            args.extend(["--latency-us", us]);
        }
        if let Some(size) = values {
            args.extend(["--value-size", size]);
        }
        let (stdout, _) = rolex(&args);
        assert!(stdout.contains("verify: clean"), "{workload}: {stdout}");
        assert!(stdout.contains("with 8 clients"), "{workload}: {stdout}");
        let report = json(&out);
        assert_eq!(report["config"]["inflight"], 4, "{workload}");
        let counted: u64 = report["ops"]
            .as_object()
            .expect("ops")
            .values()
            .map(|op| op["count"].as_u64().expect("count"))
            .sum();
        assert_eq!(counted, 20_000, "{workload}: every operation ran once");
        if let Some(read) = report["ops"].get("read") {
            assert!(
                (read["rtts_per_op"].as_f64().expect("rtt") - 1.0).abs() < 0.05,
                "{workload}: a GET is one round trip with several in flight: {read}"
            );
        }
    }
}

/// `rolex inflight`: ROLEX and both baselines at each depth, measured in latency mode and
/// modeled, as a table, a JSON report and a plot; the modeled figure grows with the depth.
#[test]
fn inflight_sweeps_every_index_and_plots_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("inflight");
    let (stdout, _) = rolex(&[
        "inflight",
        "--keys",
        "20000",
        "--ops",
        "4000",
        "--depths",
        "1,4",
        "--latency-us",
        "5",
        "--quiet",
        "--out",
        out.to_str().expect("path"),
    ]);
    assert!(stdout.contains("| rolex | 4 |"), "{stdout}");
    assert!(stdout.contains("| bplus | 1 |"), "{stdout}");
    assert!(stdout.contains("| chime | 4 |"), "{stdout}");
    let report = json(&out.join("inflight.json"));
    let points = report["points"].as_array().expect("points");
    assert_eq!(points.len(), 6);
    for index in ["rolex", "bplus", "chime"] {
        let modeled = |depth: u64| {
            points
                .iter()
                .find(|p| p["index"] == index && p["inflight"] == depth)
                .and_then(|p| p["modeled_ops_s"].as_f64())
                .expect("point")
        };
        assert!(modeled(4) > 3.0 * modeled(1), "{index}: {points:?}");
    }
    let svg = std::fs::read_to_string(out.join("throughput_vs_inflight.svg")).expect("plot");
    assert!(
        svg.contains("ROLEX measured")
            && svg.contains("B+-tree modeled")
            && svg.contains("CHIME measured")
    );
    assert!(bad_input_line(&["inflight", "--depths", "1,0"]).contains("--depths"));
    assert!(
        bad_input_line(&["inflight", "--threads", "64", "--depths", "1,4"])
            .contains("connection indexes")
    );
}

/// Whether `text` names `flag` as a whole flag (`--seed`, not the start of `--seeds`).
fn names_flag(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let after = text[at + flag.len()..].chars().next();
        let before = text[..at].chars().next_back();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// The README's synopsis of each command names every flag `--help` lists for it, so that a flag
/// added to a command is added there too (the synopsis once lacked four of compare's).
#[test]
fn the_readme_synopsis_names_every_flag_of_every_command() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    let block = readme
        .split("## The `rolex` command")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("the synopsis block");
    let mut missing = Vec::new();
    for command in [
        "bench", "memnode", "inspect", "suite", "inflight", "compare",
    ] {
        // The command's lines, each with the indented lines that continue it.
        let mut text = String::new();
        let mut mine = false;
        for line in block.lines() {
            if line.starts_with("rolex ") {
                mine = line.starts_with(&format!("rolex {command} "));
            }
            if mine {
                text.push_str(line);
                text.push('\n');
            }
        }
        assert!(!text.is_empty(), "no synopsis of rolex {command}");
        let help = std::process::Command::new(crate::common::ROLEX)
            .args([command, "--help"])
            .output()
            .expect("run");
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for line in help.lines() {
            let line = line.trim_start();
            // `--flag`, `--flag <VALUE>`, or `-p, --flag <VALUE>`.
            let line = line.split_once(", ").map_or(line, |(short, long)| {
                if short.starts_with('-') && !short.starts_with("--") {
                    long
                } else {
                    line
                }
            });
            let Some(rest) = line.strip_prefix("--") else {
                continue;
            };
            let name = rest.split([' ', '\t']).next().unwrap_or(rest);
            let flag = format!("--{name}");
            if name == "help" || name.is_empty() {
                continue;
            }
            if !names_flag(&text, &flag) {
                missing.push(format!("rolex {command} {flag}"));
            }
        }
    }
    missing.dedup();
    assert!(
        missing.is_empty(),
        "the README's synopsis lacks {missing:?}"
    );
}

/// A cache budget in bytes per key sizes ROLEX's leaves so their pivots fit it (one leaf of 26
/// slots per GET at half a byte per key), unless `--delta` or `--fill` chooses; an absolute
/// budget, or one too small for any size, leaves the default leaves.
#[test]
fn leaves_are_sized_for_a_cache_budget_per_key_unless_chosen() {
    let run = |extra: &[&str]| {
        let args = [
            &["--keys", "20000", "--ops", "4000", "--workload", "ycsb-c"][..],
            extra,
        ]
        .concat();
        bench(&args)
    };
    let (r, text) = run(&["--cache-budget", "0.5"]);
    let config = &r["config"];
    assert_eq!(
        (&config["delta"], &config["fill"]),
        (&26.into(), &22.into())
    );
    assert_eq!(config["leaves_sized_for_budget"], true);
    assert_eq!(r["ops"]["read"]["verbs_per_op"], 1.0, "{r}");
    assert_eq!(r["ops"]["read"]["bytes_per_op"], 440.0, "{r}");
    assert!(r["cache_bytes_per_key"].as_f64().expect("cache") <= 0.5);
    assert!(
        text.contains("leaves sized for the cache budget: 22 keys in leaves of 26 slots"),
        "{text}"
    );
    for extra in [
        &["--cache-budget", "0.5", "--delta", "16"][..],
        &["--cache-budget", "0.5", "--fill", "12"],
        &["--cache-budget", "1MiB"],
        &["--cache-budget", "0.1"],
    ] {
        let (r, text) = run(extra);
        assert_eq!(r["config"]["leaves_sized_for_budget"], false, "{extra:?}");
        assert_eq!(r["config"]["delta"], 16, "{extra:?}");
        assert!(!text.contains("leaves sized"), "{extra:?}: {text}");
    }
}
