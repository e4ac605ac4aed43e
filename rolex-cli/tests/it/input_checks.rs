//! Input the harness refuses before any work — each with one line naming what is wrong (and,
//! for clap's own errors, its hints and the subcommand's help) and exit code 2 — and the help a
//! user gets from `rolex` alone.

use std::process::Command;

use crate::common::{ROLEX, bad_input_line};

/// Runs `args` and checks the one line contains every one of `needles`.
fn refused(args: &[&str], needles: &[&str]) {
    let line = bad_input_line(args);
    for needle in needles {
        assert!(line.contains(needle), "{args:?}: {line:?} lacks {needle:?}");
    }
}

#[test]
fn what_cannot_run_is_refused_with_its_limit() {
    refused(
        &["bench", "--keys", "1000", "--duration", "inf"],
        &["--duration", "finite"],
    );
    refused(&["bench", "--duration", "1e30"], &["at most 1e7"]);
    refused(&["bench", "--duration", "nan"], &["--duration"]);
    refused(&["bench", "--duration", "0"], &["above 0"]);
    refused(
        &["bench", "--target-rate", "0"],
        &["--target-rate", "operations per second above 0"],
    );
    refused(
        &["bench", "--target-rate", "inf"],
        &["--target-rate", "finite"],
    );
    refused(&["bench", "--target-rate", "nan"], &["--target-rate"]);
    refused(&["bench", "--target-rate", "2e9"], &["at most 1e9"]);
    refused(
        &["compare", "--rate-sweep", "1000,0"],
        &["--rate-sweep", "above 0"],
    );
    refused(&["compare", "--rate-sweep", "1000,fast"], &["--rate-sweep"]);
    refused(
        &[
            "memnode",
            "--pool",
            "/nonexistent/p",
            "--size",
            "1M",
            "--duration",
            "1e30",
        ],
        &["--duration"],
    );
    refused(&["bench", "--threads", "100000"], &["1..=128"]);
    refused(&["bench", "--inflight", "0"], &["--inflight", "1..=64"]);
    refused(
        &["bench", "--threads", "100", "--inflight", "2"],
        &["200 clients", "connection indexes"],
    );
    refused(
        &["bench", "--latency-us", "0"],
        &["--latency-us", "above 0"],
    );
    refused(&["bench", "--latency-us", "inf"], &["--latency-us"]);
    refused(
        &["bench", "--transport", "verbs", "--latency-us", "10"],
        &["--latency-us", "simulator"],
    );
    refused(
        &["bench", "--transport", "verbs", "--attach", "pool"],
        &["--attach", "--connect"],
    );
    refused(&["compare", "--inflight", "65"], &["--inflight", "1..=64"]);
    refused(&["suite", "--inflight", "0"], &["--inflight"]);
    refused(&["bench", "--memory-nodes", "1000"], &["1..=64"]);
    refused(&["bench", "--delta", "1000000"], &["1..=4096"]);
    refused(&["bench", "--ops", "0"], &["--ops", "at least 1"]);
    refused(&["bench", "--model-clients", "0"], &["--model-clients"]);
    refused(&["bench", "--model-link-gbps", "0"], &["above 0"]);
    refused(&["bench", "--model-rtt-us", "nan"], &["--model-rtt-us"]);
    refused(&["suite", "--keys", "0"], &["--keys"]);
    refused(&["compare", "--keys", "0"], &["--keys"]);
    refused(&["compare", "--threads", "500"], &["1..=128"]);
    refused(
        &["bench", "--cache-budget=-1"],
        &["--cache-budget", "0..=4096"],
    );
    refused(
        &["bench", "--cache-budget", "lots"],
        &["--cache-budget", "64MiB"],
    );
    refused(
        &["bench", "--cache-budget", "2e9MiB"],
        &["MiB per compute node"],
    );
    refused(&["compare", "--cache-budget", "nan"], &["--cache-budget"]);
    refused(
        &["compare", "--budget-sweep", "0.1,8MiB"],
        &["bytes per key"],
    );
    refused(
        &["compare", "--budget-sweep", "0.1", "--no-budget-sweep"],
        &["--no-budget-sweep"],
    );
}

/// `rolex compare --index` names ROLEX and at least one baseline, from rolex, bplus and chime;
/// `--page-size` only with the B+-tree among them. Each refusal comes before any work (a run of
/// 10^8 keys would take minutes) and names the list.
#[test]
fn compare_needs_rolex_and_a_baseline_in_its_index_list() {
    let huge = ["compare", "--keys", "100000000"];
    let with = |extra: &[&'static str]| [&huge[..], extra].concat();
    refused_at_once(
        &with(&["--index", "bplus,chime"]),
        &["--index bplus,chime", "rolex must be among the indexes"],
    );
    refused_at_once(
        &with(&["--index", "rolex"]),
        &["--index rolex", "name a baseline", "bplus, chime"],
    );
    refused_at_once(
        &with(&["--index", "rolex,rolex"]),
        &["--index rolex,rolex", "name a baseline"],
    );
    refused_at_once(
        &with(&["--index", "rolex,btree"]),
        &[
            "--index",
            "btree",
            "rolex, bplus, chime",
            "rolex compare --help",
        ],
    );
    refused_at_once(&with(&["--index", ""]), &["--index"]);
    refused_at_once(
        &with(&["--index", "rolex,chime", "--page-size", "2048"]),
        &["--page-size", "--index rolex,chime runs no B+-tree"],
    );
}

#[test]
fn output_paths_are_checked_before_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let missing_dir = dir.path().join("no-such-dir").join("x.json");
    // Each would run for a long time (10^9 keys) before failing, were the path checked late.
    let started = std::time::Instant::now();
    refused(
        &[
            "bench",
            "--keys",
            "1000000000",
            "--json",
            missing_dir.to_str().expect("utf-8"),
        ],
        &["does not exist"],
    );
    refused(
        &[
            "bench",
            "--keys",
            "1000000000",
            "--json",
            dir.path().to_str().expect("utf-8"),
        ],
        &["is a directory"],
    );
    refused(
        &[
            "compare",
            "--keys",
            "1000000000",
            "--out",
            file.to_str().expect("utf-8"),
        ],
        &["not a directory"],
    );
    refused(
        &["suite", "--keys", "1000000000", "--json", "-"],
        &["standard output"],
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the checks ran after the work"
    );
}

#[test]
fn a_file_that_is_not_a_pool_is_named_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zeros = dir.path().join("zeros");
    std::fs::write(&zeros, vec![0u8; 1 << 20]).expect("write");
    let sosd = dir.path().join("keys.sosd");
    let mut bytes = 3u64.to_le_bytes().to_vec();
    for k in [1u64, 5, 9] {
        bytes.extend(k.to_le_bytes());
    }
    std::fs::write(&sosd, bytes).expect("write");
    let mut old = b"ROLEXPL1".to_vec();
    old.extend(1u64.to_le_bytes());
    old.resize(4096, 0);
    let old_file = dir.path().join("old");
    std::fs::write(&old_file, old).expect("write");
    for file in [&zeros, &sosd] {
        let path = file.to_str().expect("utf-8");
        refused(&["inspect", "--attach", path], &["not a ROLEX pool"]);
        refused(&["bench", "--attach", path], &["not a ROLEX pool"]);
        refused(
            &["memnode", "--resume", "--pool", path],
            &["not a ROLEX pool"],
        );
    }
    refused(
        &["inspect", "--attach", old_file.to_str().expect("utf-8")],
        &["layout version 1"],
    );
}

#[test]
fn clap_errors_keep_their_hints_and_name_the_subcommand_help() {
    refused(
        &["bench", "--workload", "ycsb-z"],
        &["possible values", "ycsb-a", "rolex bench --help"],
    );
    refused(
        &["bench", "--thread", "3"],
        &["similar argument", "--threads"],
    );
    refused(&["memnode"], &["--pool", "--size", "rolex memnode --help"]);
}

#[test]
fn rolex_alone_lists_the_commands_and_help_takes_help() {
    let out = Command::new(ROLEX).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    for command in ["bench", "memnode", "inspect", "suite", "compare"] {
        assert!(stderr.contains(command), "{stderr}");
    }
    let out = Command::new(ROLEX)
        .args(["help", "--help"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Commands:"));
}

#[test]
fn json_to_standard_output_is_the_json_alone() {
    let out = Command::new(ROLEX)
        .args([
            "bench", "--keys", "2000", "--ops", "2000", "--quiet", "--json", "-",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("standard output is one JSON document");
    assert!(json.get("ops").is_some(), "{json}");
    assert_eq!(json["schema_version"], 2);
    assert_eq!(json["tool_version"], env!("CARGO_PKG_VERSION"));
    let stamp = json["timestamp"].as_str().expect("timestamp");
    assert!(
        stamp.len() == 20 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{stamp}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("RTT"),
        "the table goes to standard error"
    );
    assert!(!std::path::Path::new("-").exists(), "no file named '-'");
}

#[test]
fn a_flag_the_run_would_ignore_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sosd = dir.path().join("keys.sosd");
    let mut bytes = 3u64.to_le_bytes().to_vec();
    for k in [1u64, 5, 9] {
        bytes.extend(k.to_le_bytes());
    }
    std::fs::write(&sosd, bytes).expect("write");
    let sosd = sosd.to_str().expect("utf-8");
    let pool = dir.path().join("pool");
    let pool = pool.to_str().expect("utf-8");
    refused(
        &["bench", "--keys-file", sosd, "--keys", "5"],
        &["--keys ", "--keys-file"],
    );
    refused(
        &["bench", "--keys-file", sosd, "--key-dist", "normal"],
        &["--key-dist"],
    );
    for flag in [
        &["--keys", "5"][..],
        &["--memory-nodes", "2"],
        &["--key-dist", "normal"],
        &["--delta", "8"],
        &["--load-phase"],
    ] {
        refused(
            &[&["bench", "--attach", pool][..], flag].concat(),
            &[flag[0], "--attach"],
        );
    }
    refused(
        &["bench", "--transport", "verbs", "--load-phase"],
        &["--load-phase", "embedded memory nodes", "rolex memnode"],
    );
    refused(
        &["bench", "--index", "bplus", "--delta", "8"],
        &["ROLEX setting"],
    );
    refused(&["bench", "--page-size", "512"], &["B+-tree setting"]);
    refused(
        &["bench", "--index", "chime", "--page-size", "2048"],
        &["sizes its pages to its hopscotch leaves"],
    );
    refused(
        &["bench", "--index", "chime", "--fill", "8"],
        &["ROLEX setting"],
    );
    refused(
        &["bench", "--leaf-slots", "32"],
        &["--leaf-slots", "CHIME-style setting"],
    );
    refused(
        &["bench", "--index", "bplus", "--neighbourhood", "4"],
        &["--neighbourhood", "CHIME-style setting"],
    );
    refused(
        &["bench", "--index", "chime", "--leaf-slots", "60"],
        &["--leaf-slots 60", "multiple of the neighbourhood"],
    );
    refused(
        &["bench", "--index", "chime", "--neighbourhood", "17"],
        &["--neighbourhood", "2..=16"],
    );
    refused(
        &["bench", "--connect", "127.0.0.1:9"],
        &["--transport verbs"],
    );
    // One workload runs: --insert-ratio's, else a file's, else --workload's.
    let file = dir.path().join("workload");
    std::fs::write(&file, "readproportion=1\n").expect("write");
    let file = file.to_str().expect("utf-8");
    refused(
        &["bench", "--workload-file", file, "--workload", "ycsb-c"],
        &["--workload ", "--workload-file"],
    );
    refused(
        &["bench", "--workload", "ycsb-d", "--insert-ratio", "0.5"],
        &["--workload ", "--insert-ratio"],
    );
    refused(
        &["bench", "--workload-file", file, "--insert-ratio", "0.5"],
        &["--workload-file", "--insert-ratio"],
    );
    refused(
        &[
            "bench",
            "--workload-file",
            file,
            "-p",
            "requestdistribution=uniform",
            "--request-dist",
            "zipfian",
        ],
        &["-p requestdistribution=uniform", "--request-dist"],
    );
    refused(
        &["bench", "--load-phase", "--no-retrainer"],
        &["--no-retrainer", "--load-phase"],
    );
    // The memory node's flags, likewise.
    let new_pool = dir.path().join("new.pool");
    let new_pool = new_pool.to_str().expect("utf-8");
    for flag in [["--listen", "0.0.0.0:7000"], ["--device", "mlx5_0"]] {
        refused(
            &[
                "memnode", "--pool", new_pool, "--size", "1M", flag[0], flag[1],
            ],
            &[flag[0], "--transport verbs"],
        );
    }
    refused(
        &[
            "memnode",
            "--pool",
            new_pool,
            "--size",
            "1M",
            "--key-dist",
            "normal",
            "--load",
            sosd,
        ],
        &["--key-dist", "--load"],
    );
    for flag in [["--epsilon", "8"], ["--seed", "3"], ["--fill", "10"]] {
        refused(
            &["memnode", "--pool", new_pool, "--resume", flag[0], flag[1]],
            &[flag[0], "--resume"],
        );
    }
    assert!(
        !std::path::Path::new(new_pool).exists(),
        "no pool made for refused input"
    );
}

#[test]
fn a_workload_files_settings_are_honoured_or_refused_and_the_report_says_what_ran() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("w");
    std::fs::write(
        &file,
        "recordcount=2000\noperationcount=1500\nreadproportion=0.5\ninsertproportion=0.5\n\
         zipfianconstant=0.5\ninsertorder=ordered\nscanlengthdistribution=uniform\n",
    )
    .expect("write");
    let report = dir.path().join("r.json");
    let out = Command::new(ROLEX)
        .args(["bench", "--quiet", "--workload-file"])
        .arg(&file)
        .arg("--json")
        .arg(&report)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
    let config = &r["config"];
    assert_eq!(config["keys"], 2000, "{config}");
    assert_eq!(config["ops"], 1500, "{config}");
    assert_eq!(config["theta"], 0.5, "{config}");
    assert_eq!(config["insert_order"], "append", "{config}");
    assert!(
        config["workload"]
            .as_str()
            .is_some_and(|w| w.starts_with("file ")),
        "{config}"
    );
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "readproportion=1\nscanlengthdistribution=zipfian\n").expect("write");
    refused(
        &["bench", "--workload-file", bad.to_str().expect("utf-8")],
        &["scanlengthdistribution"],
    );
}

/// `-p KEY=VALUE` sets a workload file's property over the file's, as YCSB's `-p` does; one that
/// nothing reads, one without a file, one malformed, or one a flag also sets, is refused.
#[test]
fn a_p_property_overrides_the_workload_file_and_every_misuse_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("w");
    std::fs::write(
        &file,
        "recordcount=2000\noperationcount=1500\nreadproportion=1\nrequestdistribution=zipfian\n",
    )
    .expect("write");
    let path = file.to_str().expect("utf-8");
    let report = dir.path().join("r.json");
    crate::common::run(&[
        "bench",
        "--quiet",
        "--workload-file",
        path,
        "-p",
        "operationcount=700",
        "--property",
        "requestdistribution=uniform",
        "-p",
        "readproportion=0.5",
        "-p",
        "updateproportion=0.5",
        "--json",
        report.to_str().expect("utf-8"),
    ]);
    let r = crate::common::json(&report);
    let config = &r["config"];
    assert_eq!(config["ops"], 700, "{config}");
    assert_eq!(config["keys"], 2000, "{config}");
    assert_eq!(config["mix"]["request_dist"], "uniform", "{config}");
    assert_eq!(config["mix"]["update"], 0.5, "{config}");
    assert_eq!(
        r["ops"]["update"]["count"].as_u64().map(|n| n > 0),
        Some(true)
    );
    refused(
        &["bench", "--workload-file", path, "-p", "readallfields=true"],
        &[
            "-p readallfields=true",
            "\"readallfields\"",
            "operationcount",
        ],
    );
    refused(
        &["bench", "-p", "operationcount=5"],
        &["-p operationcount=5", "--workload-file"],
    );
    refused(
        &["bench", "--workload-file", path, "-p", "operationcount"],
        &["KEY=VALUE"],
    );
    refused(
        &[
            "bench",
            "--workload-file",
            path,
            "-p",
            "operationcount=lots",
        ],
        &["-p operationcount=lots"],
    );
    refused(
        &[
            "bench",
            "--workload-file",
            path,
            "--ops",
            "5",
            "-p",
            "operationcount=9",
        ],
        &["-p operationcount=9", "--ops", "give one"],
    );
    refused(
        &["bench", "--workload-file", path, "-p", "readproportion=0.7"],
        &["sum to 1"],
    );
}

/// `refused`, and the refusal came at once, before any key was generated or loaded: the runs
/// below ask for 10^8 keys, which take far longer to make; one still running after five seconds
/// is stopped, and fails the test.
fn refused_at_once(args: &[&str], needles: &[&str]) {
    use std::io::Read;
    let started = std::time::Instant::now();
    let mut child = Command::new(ROLEX)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 5 s, not refused");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("stderr");
    }
    assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("rolex: "), "{args:?}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{args:?}: {stderr:?} lacks {needle:?}"
        );
    }
}

/// Every flag of each command that takes a value, from its help.
fn flags_with_values(command: &str) -> Vec<String> {
    let out = Command::new(ROLEX)
        .args([command, "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags: Vec<String> = help
        .lines()
        .filter_map(|line| {
            let rest = line.trim_start().strip_prefix("--")?;
            let (name, value) = rest.split_once(' ')?;
            value.starts_with('<').then(|| format!("--{name}"))
        })
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

/// Each command's flags that take numbers (every other flag taking a value takes a path, an
/// address, a device or one of a list of names).
const NUMERIC_FLAGS: [(&str, &[&str]); 5] = [
    (
        "bench",
        &[
            "--cache-budget",
            "--cache-from-level",
            "--delta",
            "--duration",
            "--epsilon",
            "--fill",
            "--inflight",
            "--insert-ratio",
            "--keys",
            "--latency-us",
            "--leaf-slots",
            "--memory-nodes",
            "--model-clients",
            "--model-link-gbps",
            "--model-nic-bytes",
            "--model-nic-verbs",
            "--model-rtt-us",
            "--neighbourhood",
            "--ops",
            "--page-size",
            "--report-interval",
            "--runs",
            "--seed",
            "--target-rate",
            "--theta",
            "--threads",
            "--value-size",
            "--warmup",
        ],
    ),
    (
        "compare",
        &[
            "--budget-sweep",
            "--cache-budget",
            "--duration",
            "--inflight",
            "--keys",
            "--ops",
            "--page-size",
            "--rate-sweep",
            "--runs",
            "--seed",
            "--target-rate",
            "--threads",
            "--value-size",
            "--warmup",
        ],
    ),
    (
        "suite",
        &["--inflight", "--keys", "--ops", "--seed", "--threads"],
    ),
    (
        "memnode",
        &[
            "--delta",
            "--duration",
            "--epsilon",
            "--fill",
            "--keys",
            "--lease-ms",
            "--node",
            "--nodes",
            "--seed",
            "--size",
        ],
    ),
    (
        "inflight",
        &[
            "--depths",
            "--keys",
            "--latency-us",
            "--ops",
            "--seed",
            "--threads",
        ],
    ),
];

#[test]
fn a_negative_number_says_what_its_flag_needs() {
    let not_numeric = [
        // Paths, addresses and devices.
        "--attach",
        "--connect",
        "--device",
        "--interval-plot",
        "--json",
        "--keys-file",
        "--latency-histogram",
        "--listen",
        "--load",
        "--out",
        "--pool",
        "--property",
        "--workload-file",
        // Names from a list.
        "--cache-mode",
        "--index",
        "--insert-order",
        "--key-dist",
        "--request-dist",
        "--transport",
        "--workload",
    ];
    for (command, numeric) in NUMERIC_FLAGS {
        // The list is every numeric flag the command has.
        let listed: Vec<String> = flags_with_values(command)
            .into_iter()
            .filter(|f| !not_numeric.contains(&f.as_str()))
            .collect();
        assert_eq!(listed, numeric.to_vec(), "rolex {command}'s numeric flags");
        for flag in numeric {
            for value in ["-1", "-5"] {
                let line = bad_input_line(&[command, flag, value]);
                assert!(
                    line.contains(&format!("{flag} <"))
                        && line.contains("needs ")
                        && line.contains(&format!("not {value}"))
                        && !line.contains("unexpected argument"),
                    "rolex {command} {flag} {value}: {line}"
                );
            }
        }
    }
    // The cases, and negatives in each flag's other forms.
    refused_at_once(
        &["bench", "--keys", "100000000", "--value-size", "-5"],
        &["--value-size", "a whole number of bytes", "not -5"],
    );
    refused_at_once(&["bench", "--warmup", "-5"], &["--warmup", "seconds (2s)"]);
    refused_at_once(&["bench", "--warmup", "-5s"], &["--warmup", "not -5s"]);
    refused_at_once(&["bench", "--theta", "-1"], &["--theta", "above 0"]);
    refused_at_once(&["bench", "--seed", "-1"], &["--seed", "0 or more"]);
    refused_at_once(
        &["compare", "--budget-sweep", "-1"],
        &["--budget-sweep", "bytes per key"],
    );
    refused_at_once(&["compare", "--budget-sweep", "0.5,-1"], &["not -1"]);
    refused_at_once(&["bench", "--value-size", "-5-10"], &["not -5-10"]);
    refused_at_once(&["bench", "--cache-budget", "-1MiB"], &["not -1MiB"]);
    refused_at_once(&["bench", "--duration", "-inf"], &["--duration"]);
    refused_at_once(&["memnode", "--pool", "p", "--size", "-1G"], &["--size"]);
    // A flag given where a number belongs is not taken for one.
    refused_at_once(&["bench", "--seed", "--quiet"], &["--seed", "not --quiet"]);
}

#[test]
fn a_flag_the_workload_does_not_use_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reads = dir.path().join("reads");
    std::fs::write(
        &reads,
        "readproportion=1\nrequestdistribution=uniform\nrecordcount=100000000\n",
    )
    .expect("write");
    let reads = reads.to_str().expect("utf-8");
    let huge = ["--keys", "100000000"];
    for dist in ["uniform", "hotspot", "exponential"] {
        refused_at_once(
            &[
                &["bench", "--request-dist", dist, "--theta", "0.5"][..],
                &huge,
            ]
            .concat(),
            &["--theta", dist, "zipfian"],
        );
    }
    refused_at_once(
        &["bench", "--workload-file", reads, "--theta", "0.5"],
        &["--theta", "uniform"],
    );
    refused_at_once(
        &["bench", "--workload", "insert-only", "--theta", "0.5"],
        &["--theta"],
    );
    for flag in [&["--insert-order", "append"][..], &["--check-inserts"]] {
        refused_at_once(
            &[&["bench"][..], &huge, flag].concat(),
            &[flag[0], "ycsb-a inserts no keys", "--load-phase"],
        );
        refused_at_once(
            &[&["bench", "--workload", "ycsb-c"][..], &huge, flag].concat(),
            &[flag[0], "ycsb-c inserts no keys"],
        );
        refused_at_once(
            &[&["bench", "--attach", "/nonexistent.pool"][..], flag].concat(),
            &[flag[0], "inserts no keys"],
        );
        refused_at_once(
            &[&["bench", "--workload-file", reads][..], flag].concat(),
            &[flag[0], "workload file", "inserts no keys"],
        );
        refused_at_once(
            &[&["bench", "--insert-ratio", "0"][..], &huge, flag].concat(),
            &[flag[0], "--insert-ratio 0 inserts no keys"],
        );
    }
    refused_at_once(
        &[
            &["bench", "--index", "bplus", "--cache-from-level", "0"][..],
            &huge,
        ]
        .concat(),
        &["--cache-from-level", "1..=255", "every internal page"],
    );
}

#[test]
fn a_value_the_run_would_change_is_refused() {
    refused_at_once(
        &["bench", "--keys", "100000000", "--report-interval", "0.001"],
        &["--report-interval", "5 ms", "at least 0.005"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let scans = dir.path().join("scans");
    std::fs::write(
        &scans,
        "recordcount=100000000\nscanproportion=1\nmaxscanlength=0\n",
    )
    .expect("write");
    let scans = scans.to_str().expect("utf-8");
    refused_at_once(
        &["bench", "--workload-file", scans],
        &[scans, "maxscanlength", "at least 1"],
    );
}

#[test]
fn a_truncated_pool_file_says_it_is_shorter_than_its_superblock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let path = pool.to_str().expect("utf-8");
    let out = Command::new(ROLEX)
        .args(["memnode", "--pool", path, "--size", "64M", "--keys", "1000"])
        .args(["--duration", "0.1"])
        .output()
        .expect("run memnode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let full = std::fs::metadata(&pool).expect("pool").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&pool)
        .expect("open");
    file.set_len(1 << 20).expect("truncate");
    drop(file);
    for args in [
        &["inspect", "--attach", path][..],
        &["bench", "--attach", path],
        &["memnode", "--resume", "--pool", path],
    ] {
        let line = bad_input_line(args);
        assert!(
            line.contains("the file is 1048576 bytes, shorter than its superblock says")
                && !line.contains("multiple of 8"),
            "{args:?}: {line}"
        );
        // The pool's size as its superblock records it: at most the file it was made in.
        let recorded: u64 = line
            .split("a pool of ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("the superblock's size");
        assert!(recorded > 1 << 20 && recorded <= full, "{line}");
    }
}

#[test]
fn output_directories_are_made_one_level_deep() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let deeper = missing.join("deeper");
    let deeper = deeper.to_str().expect("utf-8");
    let json = missing.join("deeper").join("c.json");
    let json = json.to_str().expect("utf-8");
    refused_at_once(
        &["compare", "--keys", "100000000", "--out", deeper],
        &["--out", "does not exist", "only the last level"],
    );
    refused_at_once(
        &["inflight", "--keys", "100000000", "--out", deeper],
        &["--out", "does not exist"],
    );
    refused_at_once(
        &["compare", "--keys", "100000000", "--json", json],
        &["--json", "does not exist", "only the last level"],
    );
    assert!(!missing.exists(), "no directory was made");
}

/// Every file the command reads is read within a bound: a workload file up to 1 MiB, a SOSD key
/// file up to the count its header announces. An endless device (`/dev/zero`) or a file past the
/// bound is refused at once, naming the file and the bound, instead of being read into memory.
#[test]
fn an_endless_or_oversized_input_file_is_refused_unread() {
    refused_at_once(
        &["bench", "--workload-file", "/dev/zero"],
        &["--workload-file /dev/zero", "more than 1048576 bytes"],
    );
    refused_at_once(
        &["bench", "--keys-file", "/dev/zero"],
        &["--keys-file /dev/zero", "announces 0 keys", "holds more"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    refused_at_once(
        &[
            "memnode",
            "--pool",
            dir.path().join("p").to_str().expect("utf-8"),
            "--size",
            "1M",
            "--load",
            "/dev/zero",
        ],
        &["--load /dev/zero", "announces 0 keys"],
    );
    // A file of 1 MiB and a byte of comment lines.
    let long = dir.path().join("long");
    let mut text = b"readproportion=1\n".to_vec();
    text.resize((1 << 20) + 1, b'#');
    std::fs::write(&long, text).expect("write");
    let long = long.to_str().expect("utf-8");
    refused_at_once(
        &["bench", "--workload-file", long],
        &[long, "more than 1048576 bytes (1 MiB)"],
    );
    // A header announcing more keys than are ever read.
    let huge = dir.path().join("huge.sosd");
    std::fs::write(&huge, u64::MAX.to_le_bytes()).expect("write");
    let huge = huge.to_str().expect("utf-8");
    refused_at_once(
        &["bench", "--keys-file", huge],
        &[
            huge,
            "announces 18446744073709551615 keys",
            "at most 4294967296",
        ],
    );
}

/// A run that cannot fit in this machine's memory is refused before anything is allocated, with
/// the estimate and what the machine has (`/proc/meminfo`): bench, suite and compare alike, from
/// `--keys`, `--ops` (the keys to insert) or a key file's header.
#[test]
fn a_run_larger_than_the_machines_memory_is_refused_up_front() {
    let needles = [
        "needs about",
        "of memory",
        "this machine has",
        "/proc/meminfo",
    ];
    for command in ["bench", "suite", "compare"] {
        refused_at_once(
            &[command, "--keys", "10000000000"],
            &[&["--keys 10000000000"][..], &needles].concat(),
        );
    }
    refused_at_once(
        &["bench", "--insert-ratio", "1", "--ops", "1000000000000"],
        &[&["--ops 1000000000000", "keys "][..], &needles].concat(),
    );
    refused_at_once(
        &["bench", "--index", "bplus", "--keys", "10000000000"],
        &[&["pools"][..], &needles].concat(),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let big = dir.path().join("big.sosd");
    std::fs::write(&big, (1u64 << 32).to_le_bytes()).expect("write");
    let big = big.to_str().expect("utf-8");
    refused_at_once(
        &["bench", "--keys-file", big],
        &[&["4294967296 keys"][..], &needles].concat(),
    );
    let wl = dir.path().join("w");
    std::fs::write(&wl, "recordcount=10000000000\nreadproportion=1\n").expect("write");
    let wl = wl.to_str().expect("utf-8");
    refused_at_once(
        &["bench", "--workload-file", wl],
        &[&["10000000000 keys", wl][..], &needles].concat(),
    );
}
