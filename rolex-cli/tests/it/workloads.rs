//! The growth and churn workloads: `churn` keeps the key count steady (every delete finds the key
//! its thread owns), `--insert-order append` inserts ascending keys above every loaded one.

use std::process::Command;

use crate::common::{self, ROLEX, bad_input_line};

fn bench(args: &[&str]) -> serde_json::Value {
    common::bench(args).0
}

#[test]
fn churn_keeps_the_key_count_and_finds_every_owned_key() {
    let report = bench(&[
        "--workload",
        "churn",
        "--keys",
        "20000",
        "--ops",
        "40000",
        "--check-inserts",
    ]);
    let deletes = report["ops"]["delete"]["count"].as_u64().expect("deletes");
    let inserts = report["ops"]["insert"]["count"].as_u64().expect("inserts");
    assert!(
        deletes > 15_000 && inserts > 15_000,
        "{deletes} deletes, {inserts} inserts"
    );
    let keys_after = report["keys_after"].as_u64().expect("keys");
    assert_eq!(
        keys_after,
        20_000 + inserts - deletes,
        "every delete removed a key"
    );
    assert_eq!(
        report["inserts_missing"], 0,
        "every key a thread owns is present"
    );
    assert_eq!(report["verify_clean"], true);
    assert!(report["retrainer"]["leaf_capacity"].as_u64().expect("pool") > 0);
}

#[test]
fn append_inserts_ascend_above_the_loaded_keys() {
    let report = bench(&[
        "--workload",
        "insert-only",
        "--insert-order",
        "append",
        "--keys",
        "20000",
        "--ops",
        "60000",
        "--check-inserts",
    ]);
    assert_eq!(report["config"]["insert_order"], "append");
    assert_eq!(report["keys_after"], 80_000);
    assert_eq!(report["inserts_missing"], 0);
    assert_eq!(report["verify_clean"], true);
    // Every append lands in the last slot: it must have been split again and again (27 slots of
    // 64 leaves were loaded), each split publishing a slot.
    let retrainer = &report["retrainer"];
    let splits = retrainer["slot_splits"].as_u64().expect("splits");
    assert!(splits >= 10, "{splits} slot splits");
    assert_eq!(retrainer["slots"].as_u64(), Some(27 + splits));
}

#[test]
fn an_unknown_insert_order_is_one_line_of_bad_input() {
    let line = bad_input_line(&["bench", "--insert-order", "sideways"]);
    assert!(line.contains("sideways"), "{line}");
}

/// The text report says what ran (workload, request distribution and θ, where the keys came
/// from), shows the lock-table column only for the B+-tree (with what it means), and measures
/// its phases while every thread ran, or says the run was too short.
#[test]
fn the_text_report_says_what_ran_and_what_its_columns_mean() {
    let text = |args: &[&str]| {
        let out = Command::new(ROLEX)
            .args(["bench", "--quiet", "--keys", "20000"])
            .args(args)
            .output()
            .expect("run rolex");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rolex = text(&["--ops", "20000", "--workload", "ycsb-b"]);
    assert!(
        rolex.starts_with("workload ycsb-b, zipfian requests (θ 0.99), 20000 keys loaded (uniform distribution), 20000 operations on 2 threads"),
        "{rolex}"
    );
    assert!(!rolex.contains("lock/op"), "{rolex}");
    assert!(
        rolex.contains("while every thread ran, first tenth") || rolex.contains("too short a run"),
        "{rolex}"
    );
    let bplus = text(&[
        "--ops",
        "2000",
        "--index",
        "bplus",
        "--request-dist",
        "uniform",
    ]);
    assert!(
        bplus.starts_with("workload ycsb-a, uniform requests, "),
        "{bplus}"
    );
    assert!(bplus.contains("lock/op: of verbs/op"), "{bplus}");
    let chime = text(&["--ops", "2000", "--index", "chime", "--workload", "ycsb-d"]);
    assert!(
        chime.contains("(chime)") && chime.contains("internal pages"),
        "{chime}"
    );
    assert!(chime.contains("verify: clean"), "{chime}");
}

/// A stock YCSB workload file (no fieldcount or fieldlength) runs as YCSB does: 10 fields of
/// 100 bytes, 1,000-byte records stored as byte values, and the report says so;
/// `fieldlengthdistribution` and `insertstart`/`insertcount` are honoured or refused.
#[test]
fn a_stock_ycsb_workload_file_runs_with_1000_byte_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stock = "# Yahoo! Cloud System Benchmark\n# Workload A: Update heavy workload\n\
        recordcount=2000\noperationcount=2000\nworkload=site.ycsb.workloads.CoreWorkload\n\
        readallfields=true\nreadproportion=0.5\nupdateproportion=0.5\nscanproportion=0\n\
        insertproportion=0\nrequestdistribution=zipfian\n";
    let file = dir.path().join("workloada");
    std::fs::write(&file, stock).expect("write");
    let (report, stdout) = common::bench(&["--workload-file", file.to_str().expect("utf-8")]);
    assert_eq!(report["config"]["value_size"]["min"], 1000, "{report}");
    assert_eq!(report["config"]["value_size"]["max"], 1000, "{report}");
    assert!(
        report["config"]["value_source"]
            .as_str()
            .is_some_and(|s| s.contains("fieldcount 10 x fieldlength 100, YCSB's defaults")),
        "{report}"
    );
    assert_eq!(report["values"]["live_bytes"], 2_000 * 1_000);
    assert!(
        stdout.contains("1000-byte values (workload file: "),
        "{stdout}"
    );
    // Uniform field lengths: records of 4..=400 bytes for 4 fields of up to 100.
    let uniform = dir.path().join("uniform");
    std::fs::write(
        &uniform,
        format!("{stock}fieldcount=4\nfieldlengthdistribution=uniform\ninsertstart=0\ninsertcount=2000\n"),
    )
    .expect("write");
    let (report, _) = common::bench(&["--workload-file", uniform.to_str().expect("utf-8")]);
    assert_eq!(report["config"]["value_size"]["min"], 4, "{report}");
    assert_eq!(report["config"]["value_size"]["max"], 400, "{report}");
    let mean = report["values"]["live_bytes"].as_f64().expect("live") / 2_000.0;
    assert!((150.0..250.0).contains(&mean), "mean record {mean} bytes");
    // What cannot be honoured is refused in one line.
    for (extra, needle) in [
        (
            "fieldlengthdistribution=zipfian\n",
            "fieldlengthdistribution \"zipfian\"",
        ),
        (
            "insertstart=1000\ninsertcount=1000\n",
            "insertstart 1000 and insertcount 1000",
        ),
        ("insertcount=10\n", "insertcount 10"),
    ] {
        let bad = dir.path().join("bad");
        std::fs::write(&bad, format!("{stock}{extra}")).expect("write");
        let line = bad_input_line(&["bench", "--workload-file", bad.to_str().expect("utf-8")]);
        assert!(line.contains(needle), "{extra}: {line}");
    }
    let line = bad_input_line(&[
        "bench",
        "--workload-file",
        file.to_str().expect("utf-8"),
        "--attach",
        "/nonexistent.pool",
    ]);
    assert!(
        line.contains("1000 bytes") && line.contains("embedded"),
        "{line}"
    );
}
