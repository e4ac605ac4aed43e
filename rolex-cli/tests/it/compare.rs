//! The baselines through `rolex bench --index bplus` and `rolex compare` (ROLEX against the
//! B+-tree and the CHIME-style index, or those `--index` names), and the bench's command-line
//! rules that came with them.

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

/// The rows of the table under the header line starting `header` (up to the blank line after
/// it), the separator left out.
fn table_rows<'a>(text: &'a str, header: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with("| "))
        .collect()
}

/// The first table's header: throughput per index, then the ratios.
const THROUGHPUT_TABLE: &str = "| workload | requests | ROLEX ops/s |";
/// The second table's header: each index's counters per operation.
const COUNTER_TABLE: &str = "| workload | requests | ROLEX RTT / verbs / bytes |";

#[test]
fn compare_runs_every_index_by_default_and_writes_a_table_json_and_plots() {
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
    // YCSB A–F and six write ratios, under uniform and zipfian requests, in each table.
    for header in [THROUGHPUT_TABLE, COUNTER_TABLE] {
        let rows = table_rows(&stdout, header);
        assert_eq!(rows.len(), 24, "{header}: {stdout}");
        assert_eq!(rows.iter().filter(|l| l.starts_with("| ycsb-")).count(), 12);
    }
    // Every index by default: a throughput column each, and ratios over each baseline.
    let header = stdout
        .lines()
        .find(|l| l.starts_with(THROUGHPUT_TABLE))
        .expect("header");
    for column in [
        "B+-tree ops/s",
        "CHIME ops/s",
        "ROLEX/B+-tree measured",
        "ROLEX/CHIME modeled, 64 threads x 2 in flight",
    ] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    for row in table_rows(&stdout, THROUGHPUT_TABLE) {
        // workload, requests, three throughputs, three ratios per baseline.
        assert_eq!(row.matches(" | ").count() + 1, 11, "{row}");
    }
    for row in table_rows(&stdout, COUNTER_TABLE) {
        // RTT / verbs / bytes of each index, then the bytes and RTT ratios per baseline.
        assert_eq!(row.matches(" / ").count(), 6, "{row}");
    }
    let r = json(&report);
    assert_eq!(r["indexes"], serde_json::json!(["rolex", "bplus", "chime"]));
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 24);
    for case in cases {
        for index in ["rolex", "bplus", "chime"] {
            assert_eq!(case[index]["index"], index, "{}", case["name"]);
            // The per-operation counters are in each report.
            let ops = case[index]["ops"].as_object().expect("ops");
            assert!(
                ops.values()
                    .all(|o| o["rtts_per_op"].as_f64().is_some_and(|v| v > 0.0)
                        && o["verbs_per_op"].is_f64()
                        && o["bytes_per_op"].is_f64()),
                "{index}: {ops:?}"
            );
        }
        let ratios = case["ratios"].as_object().expect("ratios");
        assert_eq!(
            ratios.keys().collect::<Vec<_>>(),
            ["bplus", "chime"],
            "{ratios:?}"
        );
        for baseline in ["bplus", "chime"] {
            assert!(
                case["ratios"][baseline]["modeled_throughput"]["ratio"]
                    .as_f64()
                    .expect("ratio")
                    > 0.0
            );
        }
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
        for index in ["rolex", "bplus", "chime"] {
            assert!(
                point["ops_s"][index].as_f64().expect("ops") > 0.0,
                "{point}"
            );
        }
    }
    // The budget sweep: YCSB C and A at six budgets, each index within its budget (ROLEX may
    // exceed one smaller than its directories and one view).
    let budgets = r["budget_sweep"].as_array().expect("budget sweep");
    assert_eq!(budgets.len(), 12);
    for p in budgets {
        let budget = p["budget_bytes_per_key"].as_f64().expect("budget");
        for baseline in ["bplus", "chime"] {
            let cache = p[baseline]["cache_bytes_per_key"].as_f64().expect("cache");
            assert!(cache <= budget + 1e-9, "{baseline}: {p}");
            assert!(p[baseline]["ops_s"].as_f64().expect("ops") > 0.0);
        }
        let rolex = p["rolex"]["cache_bytes_per_key"].as_f64().expect("cache");
        if budget * 5000.0 >= 2000.0 {
            assert!(rolex <= budget + 1e-9, "{p}");
        }
        assert!(p["rolex"]["ops_s"].as_f64().expect("ops") > 0.0);
    }
    assert!(table_has_budget_sweep(&stdout));
    for svg in [
        "throughput_vs_cache_budget.svg",
        "throughput_vs_write_ratio.svg",
        "throughput_vs_clients.svg",
        "measured_throughput.svg",
        "measured_throughput_uniform.svg",
        "bytes_per_op.svg",
        "rtts_per_op.svg",
        "latency_cdf.svg",
    ] {
        let text = std::fs::read_to_string(out.join(svg)).expect("plot");
        assert!(
            text.starts_with("<svg")
                && text.contains(">ROLEX")
                && text.contains(">B+-tree")
                && text.contains(">CHIME"),
            "{svg}"
        );
    }
    // Measured latency tails say where they come from on a shared machine.
    let cdf = std::fs::read_to_string(out.join("latency_cdf.svg")).expect("plot");
    assert!(cdf.contains("the tails include this host's scheduling"));
    // ROLEX over each baseline: a series each.
    let ratios = std::fs::read_to_string(out.join("ratio_over_baselines.svg")).expect("plot");
    assert!(ratios.contains(">ROLEX/B+-tree<") && ratios.contains(">ROLEX/CHIME<"));
    // The table as printed, in table.md beside the plots, under the command that made it.
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(
        table.starts_with(
            "`rolex compare --keys 5000 --ops 3000 --threads 2 --seed 1 --index rolex,bplus,chime --page-size 1024`"
        ),
        "{table}"
    );
    for line in stdout.lines().filter(|l| l.starts_with("| ")) {
        assert!(table.contains(line), "{line} missing from table.md");
    }
    the_json_says_what_wrote_it_and_when(&r);
    one_run_gives_ratios_without_an_interval(&r, &stdout, &table);
}

/// `compare --json` begins as `bench --json` does: the layout's version (compare's own: 3, as
/// its layout changed when it took more than one baseline; the runs it holds carry bench's, 2),
/// the `rolex` that wrote it, and when (RFC 3339, UTC), after every run it holds.
fn the_json_says_what_wrote_it_and_when(r: &serde_json::Value) {
    assert_eq!(r["schema_version"], 3);
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
        for index in ["rolex", "bplus", "chime"] {
            let run = &case[index];
            assert_eq!(run["schema_version"], 2);
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
            .is_some_and(|s| s.contains("Fieller") && s.contains("bplus, chime")),
        "{}",
        r["ratio_statistic"]
    );
    for case in r["cases"].as_array().expect("cases") {
        for baseline in ["bplus", "chime"] {
            let ratios = &case["ratios"][baseline];
            let measured = &ratios["measured_throughput"];
            assert_eq!(measured["n"], 1, "{case}");
            assert!(measured["ci95"].is_null(), "{measured}");
            let (rolex, base) = (
                case["rolex"]["throughput_ops_s"].as_f64().expect("ops/s"),
                case[baseline]["throughput_ops_s"].as_f64().expect("ops/s"),
            );
            let ratio = measured["ratio"].as_f64().expect("ratio");
            assert!(
                (ratio - rolex / base).abs() <= 1e-9 * ratio,
                "{baseline}: {measured}"
            );
            for name in [
                "modeled_throughput",
                "modeled_throughput_64_threads",
                "bytes_per_op",
                "rtts_per_op",
            ] {
                assert!(ratios[name]["ci95"].is_null(), "{baseline}: {name}");
                assert!(ratios[name]["ratio"].as_f64().expect("ratio") > 0.0);
            }
        }
    }
    for row in stdout.lines().filter(|l| l.starts_with("| ycsb-")) {
        assert!(!row.contains('±') && !row.contains('['), "{row}");
    }
    for text in [stdout, table] {
        assert!(text.contains("no confidence interval"), "{text}");
    }
}

/// `--index` picks the baselines: with `chime,rolex,chime` (any order, repeats taken once)
/// ROLEX and the CHIME-style index run, ROLEX first, and nothing of the B+-tree appears — no
/// report, ratio, column, series or `--page-size`.
#[test]
fn compare_with_index_rolex_chime_runs_those_two_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    let report = dir.path().join("compare.json");
    let (stdout, _) = run(&[
        "compare",
        "--index",
        "chime,rolex,chime",
        "--keys",
        "3000",
        "--ops",
        "1000",
        "--budget-sweep",
        "0.5",
        "--quiet",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = json(&report);
    assert_eq!(r["indexes"], serde_json::json!(["rolex", "chime"]));
    let cases = r["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 24);
    for case in cases {
        assert_eq!(case["rolex"]["index"], "rolex");
        assert_eq!(case["chime"]["index"], "chime");
        assert!(case.get("bplus").is_none(), "{}", case["name"]);
        let ratios = case["ratios"].as_object().expect("ratios");
        assert_eq!(ratios.keys().collect::<Vec<_>>(), ["chime"]);
        assert!(case["ratios"]["chime"]["measured_throughput"]["ratio"].is_f64());
    }
    for point in r["clients_sweep"].as_array().expect("sweep") {
        // (The parsed object lists its keys in name order.)
        let ops = point["ops_s"].as_object().expect("ops_s");
        assert_eq!(ops.keys().collect::<Vec<_>>(), ["chime", "rolex"]);
    }
    let budgets = r["budget_sweep"].as_array().expect("budget sweep");
    assert_eq!(budgets.len(), 2);
    for p in budgets {
        assert!(
            p.get("bplus").is_none() && p["chime"]["ops_s"].is_f64(),
            "{p}"
        );
    }
    let table = std::fs::read_to_string(out.join("table.md")).expect("table.md");
    assert!(
        table.starts_with(
            "`rolex compare --keys 3000 --ops 1000 --threads 2 --seed 1 --index rolex,chime`"
        ),
        "{table}"
    );
    assert!(
        !table.contains("B+-tree ops/s")
            && !table.contains("ROLEX/B+-tree")
            && table.contains("ROLEX/CHIME measured"),
        "{table}"
    );
    for header in [THROUGHPUT_TABLE, COUNTER_TABLE] {
        assert_eq!(table_rows(&stdout, header).len(), 24, "{header}");
    }
    for row in table_rows(&stdout, THROUGHPUT_TABLE) {
        // workload, requests, two throughputs, three ratios.
        assert_eq!(row.matches(" | ").count() + 1, 7, "{row}");
    }
    for svg in [
        "throughput_vs_write_ratio.svg",
        "measured_throughput.svg",
        "latency_cdf.svg",
    ] {
        let text = std::fs::read_to_string(out.join(svg)).expect("plot");
        assert!(
            text.contains(">CHIME") && !text.contains("B+-tree"),
            "{svg}"
        );
    }
}

/// `--page-size` is the B+-tree's, as in `rolex bench`: refused, naming the list, when
/// `--index` leaves the B+-tree out. A list without ROLEX, or with a name no index has, is one
/// line of bad input too.
#[test]
fn compare_refuses_a_bad_index_list_and_a_page_size_it_would_not_use() {
    let line = bad_input_line(&["compare", "--index", "rolex,chime", "--page-size", "2048"]);
    assert!(
        line.contains("--page-size") && line.contains("--index rolex,chime runs no B+-tree"),
        "{line}"
    );
    let line = bad_input_line(&["compare", "--index", "bplus"]);
    assert!(line.contains("rolex must be among the indexes"), "{line}");
    let line = bad_input_line(&["compare", "--index", "rolex,bplustree"]);
    assert!(
        line.contains("bplustree") && line.contains("chime"),
        "{line}"
    );
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
        for index in ["rolex", "bplus", "chime"] {
            // Each run of every index is a bench run with the two flags.
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
        table.contains("compute-side cache budget, every index: 0.5 bytes per key"),
        "{table}"
    );
    assert!(
        table.contains("ROLEX's leaves sized for it: 22 keys in leaves of 26 slots"),
        "{table}"
    );
    assert!(!out.join("throughput_vs_cache_budget.svg").exists());
    let r = json(&report);
    assert_eq!(r["cache_budget"]["per_key"], 0.5);
    for case in r["cases"].as_array().expect("cases") {
        // Each ROLEX run had its leaves sized for the budget.
        let config = &case["rolex"]["config"];
        assert_eq!(
            (&config["delta"], &config["fill"]),
            (&26.into(), &22.into())
        );
        // Without inserts no view grows: every index stays within the budget. Inserts grow a slot's view
        // (its synonym leaves), and ROLEX keeps the one its last operation used, whole, even
        // when the directories and that view alone exceed the budget.
        let no_inserts = matches!(
            case["name"].as_str(),
            Some("ycsb-a" | "ycsb-b" | "ycsb-c" | "ycsb-f" | "inserts 0%")
        );
        for index in ["rolex", "bplus", "chime"] {
            assert_eq!(case[index]["cache_budget_bytes"], 2500, "{index}");
            let cache = case[index]["cache_bytes"].as_u64().expect("cache");
            if no_inserts || index != "rolex" {
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
