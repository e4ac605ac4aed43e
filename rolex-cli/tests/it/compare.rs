//! The B+-tree baseline through `rolex bench --index bplus` and `rolex compare`, and the bench's
//! command-line rules that came with them.

use crate::common::{bad_input_line, json, run};

#[test]
fn the_baseline_runs_every_operation_and_loses_no_insert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    for (workload, ops) in [
        ("ycsb-a", "6000"),
        ("ycsb-e", "3000"),
        ("insert-only", "40000"),
    ] {
        // Inserted keys are read back where the workload inserts (YCSB A does not).
        let inserts = workload != "ycsb-a";
        let check: &[&str] = if inserts { &["--check-inserts"] } else { &[] };
        let (stdout, _) = run(&[
            &[
                "bench",
                "--index",
                "bplus",
                "--keys",
                "20000",
                "--ops",
                ops,
                "--workload",
                workload,
                "--memory-nodes",
                "2",
                "--quiet",
                "--json",
                report.to_str().expect("utf-8"),
            ][..],
            check,
        ]
        .concat());
        let r = json(&report);
        assert_eq!(r["index"], "bplus");
        assert_eq!(r["verify_clean"], true, "{stdout}");
        if inserts {
            assert_eq!(r["inserts_missing"], 0);
        }
        if workload == "ycsb-a" {
            // An update takes the leaf's lock word and releases it: two lock-table verbs (fewer
            // when a lock is handed to a local waiter, more when a CAS finds it taken).
            let locks = r["ops"]["update"]["lock_verbs_per_op"]
                .as_f64()
                .expect("locks");
            assert!(
                (1.5..=3.0).contains(&locks),
                "{locks} lock verbs per update"
            );
            // A GET is one READ of one page once the internal pages are cached.
            let rtts = r["ops"]["read"]["rtts_per_op"].as_f64().expect("rtts");
            assert!((1.0..1.2).contains(&rtts), "{rtts} round trips per GET");
        }
        if workload == "insert-only" {
            // Three times the loaded keys: leaves and internal pages split.
            assert_eq!(r["keys_after"], 60_000);
        }
        assert!(
            !stdout.contains("over 0.00 s"),
            "a short run prints its length: {stdout}"
        );
    }
}

#[test]
fn flags_on_the_command_line_win_over_a_workload_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("workloada");
    std::fs::write(
        &file,
        "recordcount=1000\noperationcount=1000\nreadproportion=0.5\nupdateproportion=0.5\n",
    )
    .expect("write");
    let report = dir.path().join("r.json");
    let file = file.to_str().expect("utf-8");
    let report_path = report.to_str().expect("utf-8");
    run(&[
        "bench",
        "--workload-file",
        file,
        "--keys",
        "3000",
        "--quiet",
        "--json",
        report_path,
    ]);
    let r = json(&report);
    assert_eq!(r["config"]["keys_loaded"], 3000, "--keys wins");
    assert_eq!(
        r["config"]["ops_run"], 1000,
        "the file's operationcount stays"
    );
    run(&[
        "bench",
        "--workload-file",
        file,
        "--quiet",
        "--json",
        report_path,
    ]);
    assert_eq!(
        json(&report)["config"]["keys_loaded"],
        1000,
        "the file's recordcount"
    );
}

#[test]
fn compare_writes_a_table_json_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    let report = dir.path().join("compare.json");
    let (stdout, _) = run(&[
        "compare",
        "--keys",
        "5000",
        "--ops",
        "3000",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    // YCSB A–F and six write ratios, under uniform and zipfian requests.
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("| ycsb-")).count(),
        12
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("| inserts "))
            .count(),
        12
    );
    let r = json(&report);
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 24);
    for case in cases {
        assert_eq!(case["rolex"]["index"], "rolex");
        assert_eq!(case["bplus"]["index"], "bplus");
        assert!(
            case["ratios"]["modeled_throughput"]["ratio"]
                .as_f64()
                .expect("ratio")
                > 0.0
        );
    }
    // YCSB A and C at 1 to 128 modeled threads, each with the comparison's two in flight.
    let sweep = r["clients_sweep"].as_array().expect("sweep");
    assert_eq!(sweep.len(), 16);
    assert_eq!(r["inflight"], 2);
    for point in sweep {
        assert_eq!(
            point["clients"].as_u64(),
            point["threads"].as_u64().map(|t| t * 2),
            "{point}"
        );
    }
    // The budget sweep: YCSB C and A at six budgets, each index within its budget (ROLEX may
    // exceed one smaller than its directories and one view).
    let budgets = r["budget_sweep"].as_array().expect("budget sweep");
    assert_eq!(budgets.len(), 12);
    for p in budgets {
        let budget = p["budget_bytes_per_key"].as_f64().expect("budget");
        let bplus = p["bplus_cache_bytes_per_key"].as_f64().expect("cache");
        let rolex = p["rolex_cache_bytes_per_key"].as_f64().expect("cache");
        assert!(bplus <= budget + 1e-9, "{p}");
        if budget * 5000.0 >= 2000.0 {
            assert!(rolex <= budget + 1e-9, "{p}");
        }
        assert!(p["rolex_ops_s"].as_f64().expect("ops") > 0.0);
    }
    assert!(table_has_budget_sweep(&stdout));
    for svg in [
        "throughput_vs_cache_budget.svg",
        "throughput_vs_write_ratio.svg",
        "throughput_vs_clients.svg",
        "bytes_per_op.svg",
        "rtts_per_op.svg",
    ] {
        let text = std::fs::read_to_string(out.join(svg)).expect("plot");
        assert!(text.starts_with("<svg") && text.contains("ROLEX") && text.contains("B+-tree"));
    }
    // The table as printed, in table.md beside the plots, under the command that made it.
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(
        table.starts_with("`rolex compare --keys 5000 --ops 3000"),
        "{table}"
    );
    for line in stdout.lines().filter(|l| l.starts_with("| ")) {
        assert!(table.contains(line), "{line} missing from table.md");
    }
    the_json_says_what_wrote_it_and_when(&r);
    one_run_gives_ratios_without_an_interval(&r, &stdout, &table);
}

/// `compare --json` begins as `bench --json` does: the layout's version, the `rolex` that
/// wrote it, and when (RFC 3339, UTC), after every run it holds.
fn the_json_says_what_wrote_it_and_when(r: &serde_json::Value) {
    assert_eq!(r["schema_version"], 2);
    assert_eq!(r["tool_version"], env!("CARGO_PKG_VERSION"));
    let stamp = r["timestamp"].as_str().expect("timestamp");
    let fields: Vec<u32> = stamp
        .trim_end_matches('Z')
        .split(['-', 'T', ':'])
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert!(
        stamp.len() == 20
            && stamp.ends_with('Z')
            && stamp.as_bytes()[10] == b'T'
            && fields.len() == 6,
        "{stamp}"
    );
    let (year, month, day) = (fields[0], fields[1], fields[2]);
    let (hour, minute, second) = (fields[3], fields[4], fields[5]);
    assert!(
        (2025..2100).contains(&year)
            && (1..=12).contains(&month)
            && (1..=31).contains(&day)
            && hour < 24
            && minute < 60
            && second < 60,
        "{stamp}"
    );
    // The runs carry the same fields, written by the same code, each before the comparison ended.
    for case in r["cases"].as_array().expect("cases") {
        for index in ["rolex", "bplus"] {
            let run = &case[index];
            assert_eq!(run["schema_version"], r["schema_version"]);
            assert_eq!(run["tool_version"], r["tool_version"]);
            let run_stamp = run["timestamp"].as_str().expect("timestamp");
            assert!(
                run_stamp.len() == 20 && run_stamp <= stamp,
                "{run_stamp} after {stamp}"
            );
        }
    }
}

/// With one run per case a ratio is that run's, with no interval: null in the JSON, no "±" and
/// no brackets in the table, and a line saying so.
fn one_run_gives_ratios_without_an_interval(r: &serde_json::Value, stdout: &str, table: &str) {
    assert!(
        r["ratio_statistic"]
            .as_str()
            .is_some_and(|s| s.contains("Fieller")),
        "{}",
        r["ratio_statistic"]
    );
    for case in r["cases"].as_array().expect("cases") {
        let measured = &case["ratios"]["measured_throughput"];
        assert_eq!(measured["n"], 1, "{case}");
        assert!(measured["ci95"].is_null(), "{measured}");
        let (rolex, bplus) = (
            case["rolex"]["throughput_ops_s"].as_f64().expect("ops/s"),
            case["bplus"]["throughput_ops_s"].as_f64().expect("ops/s"),
        );
        let ratio = measured["ratio"].as_f64().expect("ratio");
        assert!((ratio - rolex / bplus).abs() <= 1e-9 * ratio, "{measured}");
        for name in [
            "modeled_throughput",
            "modeled_throughput_64_threads",
            "bytes_per_op",
            "rtts_per_op",
        ] {
            assert!(case["ratios"][name]["ci95"].is_null(), "{name}");
            assert!(case["ratios"][name]["ratio"].as_f64().expect("ratio") > 0.0);
        }
    }
    for row in stdout.lines().filter(|l| l.starts_with("| ycsb-")) {
        assert!(!row.contains('±') && !row.contains('['), "{row}");
    }
    for text in [stdout, table] {
        assert!(text.contains("no confidence interval"), "{text}");
    }
}

#[test]
fn compare_takes_warmup_and_duration_as_bench_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    let report = dir.path().join("compare.json");
    run(&[
        "compare",
        "--keys",
        "5000",
        "--duration",
        "0.02",
        "--warmup",
        "300",
        "--no-budget-sweep",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    assert_eq!(r["duration"], 0.02);
    assert_eq!(r["warmup"], serde_json::json!({"ops": 300}));
    assert!(r["ops"].is_null(), "--duration, not --ops: {}", r["ops"]);
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 24);
    for case in cases {
        for index in ["rolex", "bplus"] {
            // Each run of both indexes is a bench run with the two flags.
            let run = &case[index];
            assert_eq!(run["config"]["duration"], 0.02, "{index}");
            assert_eq!(run["config"]["warmup"]["ops"], 300, "{index}");
            assert!(run["warmup_ops"].as_u64().expect("warm-up") >= 300);
            let wall = run["wall_seconds"].as_f64().expect("wall");
            assert!(
                (0.015..2.0).contains(&wall),
                "{} ({index}): the measured stretch lasted {wall} s",
                case["name"]
            );
        }
    }
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(
        table.starts_with("`rolex compare --keys 5000 --duration 0.02 --warmup 300 --threads"),
        "{table}"
    );
    let plot = std::fs::read_to_string(out.join("measured_throughput.svg")).expect("plot");
    assert!(
        plot.contains("0.02 s per run after 300 warm-up operations"),
        "{plot}"
    );
}

#[test]
fn compare_refuses_a_bad_warmup_or_duration_as_bench_does() {
    // The same value gets the same one line from both commands (bar the help each names), and
    // it names the flag and what the flag needs.
    for (flag, value, needs) in [
        ("--warmup", "abc", "seconds (2s)"),
        ("--warmup", "0", "seconds (2s)"),
        ("--warmup", "-5", "seconds (2s)"),
        ("--warmup", "infs", "finite"),
        ("--warmup", "0s", "above 0"),
        ("--duration", "0", "above 0"),
        ("--duration", "-1", "above 0"),
        ("--duration", "inf", "finite"),
        ("--duration", "1e30", "at most 1e7"),
        ("--duration", "nan", "finite"),
    ] {
        let compare = bad_input_line(&["compare", flag, value]);
        assert!(
            compare.contains(flag) && compare.contains(needs),
            "{flag} {value}: {compare:?} lacks {needs:?}"
        );
        let bench = bad_input_line(&["bench", flag, value]);
        assert_eq!(
            compare.replace("rolex compare --help", "rolex bench --help"),
            bench,
            "{flag} {value}"
        );
    }
    // --duration replaces --ops, as in bench.
    let line = bad_input_line(&["compare", "--duration", "1", "--ops", "5"]);
    assert!(
        line.contains("--ops") && line.contains("--duration"),
        "{line}"
    );
    // Both forms of --warmup are taken (the refusal here is --out's, after parsing).
    for warmup in ["1000", "0.5s"] {
        let line = bad_input_line(&[
            "compare",
            "--warmup",
            warmup,
            "--duration",
            "0.5",
            "--out",
            "/nonexistent/rolex/plots",
        ]);
        assert!(
            line.contains("--out") && !line.contains("--warmup"),
            "{line}"
        );
    }
}

fn table_has_budget_sweep(stdout: &str) -> bool {
    stdout.contains("Against the compute-side cache budget")
        && stdout.lines().any(|l| l.starts_with("| 0.05 | ycsb-c |"))
}

#[test]
fn compare_holds_every_case_to_a_cache_budget_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    // The JSON goes into the --out directory, which the command makes first.
    let report = out.join("compare.json");
    let (stdout, _) = run(&[
        "compare",
        "--keys",
        "5000",
        "--ops",
        "2000",
        "--quiet",
        "--cache-budget",
        "0.5",
        "--no-budget-sweep",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    assert!(!table_has_budget_sweep(&stdout));
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(table.contains("--cache-budget 0.5"), "{table}");
    assert!(
        table.contains("compute-side cache budget, both indexes: 0.5 bytes per key"),
        "{table}"
    );
    assert!(!out.join("throughput_vs_cache_budget.svg").exists());
    let r = json(&report);
    assert_eq!(r["cache_budget"]["per_key"], 0.5);
    for case in r["cases"].as_array().expect("cases") {
        // Without inserts no view grows: both stay within the budget. Inserts grow a slot's view
        // (its synonym leaves), and ROLEX keeps the one its last operation used, whole, even
        // when the directories and that view alone exceed the budget.
        let no_inserts = matches!(
            case["name"].as_str(),
            Some("ycsb-a" | "ycsb-b" | "ycsb-c" | "ycsb-f" | "inserts 0%")
        );
        for index in ["rolex", "bplus"] {
            assert_eq!(case[index]["cache_budget_bytes"], 2500, "{index}");
            let cache = case[index]["cache_bytes"].as_u64().expect("cache");
            if no_inserts || index == "bplus" {
                assert!(
                    cache <= 2500,
                    "{}, {index}: {cache} bytes cached",
                    case["name"]
                );
            }
        }
    }
}

#[test]
fn what_the_baseline_cannot_do_is_one_line_of_bad_input() {
    let line = bad_input_line(&["bench", "--index", "bplus", "--attach", "/nonexistent.pool"]);
    assert!(line.contains("embedded only"), "{line}");
    let line = bad_input_line(&["bench", "--insert-ratio", "1.5"]);
    assert!(line.contains("--insert-ratio"), "{line}");
    let line = bad_input_line(&["bench", "--index", "btree"]);
    assert!(line.contains("btree"), "{line}");
}
