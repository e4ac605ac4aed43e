//! `rolex bench` with byte values: `--value-size` (fixed or uniform), a workload file's record
//! size, what the report says about the value region, and what is refused.

use std::process::Command;

use crate::common::{ROLEX, bad_input_line, bench};

#[test]
fn a_run_with_byte_values_reads_two_round_trips_and_reports_the_value_region() {
    let (report, text) = bench(&["--keys", "20000", "--ops", "40000", "--value-size", "100"]);
    assert_eq!(report["config"]["value_size"]["min"], 100);
    let read = &report["ops"]["read"];
    let rtt = read["rtts_per_op"].as_f64().expect("rtt");
    assert!(
        (1.99..2.05).contains(&rtt),
        "a GET of a value: {rtt} round trips"
    );
    // The leaf and the block: at most 32 bytes of block overhead beside the 100 value bytes.
    let bytes = read["bytes_per_op"].as_f64().expect("bytes");
    assert!(bytes < 280.0 + 100.0 + 32.0 + 8.0, "{bytes} bytes per GET");
    let update = report["ops"]["update"]["rtts_per_op"]
        .as_f64()
        .expect("rtt");
    assert!(update < 2.05, "an update of a value: {update} round trips");
    let values = &report["values"];
    assert_eq!(values["blocks"], 20_000);
    assert_eq!(values["live_bytes"], 20_000 * 100);
    assert!(values["value_bytes_per_op"].as_f64().expect("moved") > 90.0);
    assert_eq!(report["verify_clean"], true);
    assert!(text.contains("value bytes moved per operation"), "{text}");
}

#[test]
fn churn_with_values_keeps_the_region_within_twice_the_live_bytes() {
    // Chunks are 256 KiB and every thread keeps one open per size class, so the bound only means
    // something once the live bytes are many chunks: 10 MB here.
    let (report, _) = bench(&[
        "--workload",
        "churn",
        "--keys",
        "100000",
        "--ops",
        "500000",
        "--value-size",
        "100",
        "--check-inserts",
    ]);
    let values = &report["values"];
    let live = values["live_bytes"].as_f64().expect("live");
    let allocated = values["allocated_bytes"].as_f64().expect("allocated");
    assert!(
        allocated <= 2.0 * live,
        "{allocated} bytes allocated for {live} live"
    );
    assert_eq!(report["inserts_missing"], 0);
    assert_eq!(report["verify_clean"], true);
}

#[test]
fn sizes_vary_uniformly_and_a_workload_file_sets_the_record_size() {
    let (report, _) = bench(&[
        "--keys",
        "5000",
        "--ops",
        "10000",
        "--value-size",
        "10-2000",
    ]);
    let values = &report["values"];
    let mean = values["live_bytes"].as_f64().expect("live") / 5_000.0;
    assert!((800.0..1200.0).contains(&mean), "mean value length {mean}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("w");
    std::fs::write(
        &file,
        "recordcount=3000\noperationcount=6000\nreadproportion=0.5\nupdateproportion=0.5\nfieldcount=4\nfieldlength=50\n",
    )
    .expect("write");
    let (report, _) = bench(&["--workload-file", file.to_str().expect("utf-8")]);
    assert_eq!(report["config"]["value_size"]["max"], 200);
    assert_eq!(report["values"]["live_bytes"], 3_000 * 200);
}

#[test]
fn what_byte_values_cannot_do_is_refused_in_one_line() {
    assert!(bad_input_line(&["bench", "--value-size", "70000"]).contains("64 KiB"));
    assert!(
        bad_input_line(&["bench", "--value-size", "20-10"]).contains("longer than the longest")
    );
    assert!(bad_input_line(&["bench", "--value-size", "abc"]).contains("--value-size"));
    assert!(
        bad_input_line(&[
            "bench",
            "--value-size",
            "100",
            "--attach",
            "/nonexistent.pool"
        ])
        .contains("embedded")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("w");
    std::fs::write(
        &file,
        "fieldcount=1000\nfieldlength=1000\nreadproportion=1\n",
    )
    .expect("write");
    assert!(
        bad_input_line(&["bench", "--workload-file", file.to_str().expect("utf-8")])
            .contains("64 KiB")
    );
}

#[test]
fn the_baseline_stores_byte_values_the_same_way() {
    let (report, _) = bench(&[
        "--index",
        "bplus",
        "--keys",
        "20000",
        "--ops",
        "40000",
        "--value-size",
        "100",
    ]);
    let read = &report["ops"]["read"];
    let rtt = read["rtts_per_op"].as_f64().expect("rtt");
    assert!(
        (1.99..2.05).contains(&rtt),
        "a GET of a value: {rtt} round trips"
    );
    // A page and a block of 100 value bytes.
    let bytes = read["bytes_per_op"].as_f64().expect("bytes");
    assert!(
        bytes > 1024.0 + 100.0 && bytes < 1024.0 + 100.0 + 32.0 + 8.0,
        "{bytes}"
    );
    let update = report["ops"]["update"]["rtts_per_op"]
        .as_f64()
        .expect("rtt");
    assert!(update < 2.05, "an update of a value: {update} round trips");
    let values = &report["values"];
    assert_eq!(values["blocks"], 20_000);
    assert_eq!(values["live_bytes"], 20_000 * 100);
    assert_eq!(report["verify_clean"], true);
}

#[test]
fn compare_takes_a_value_size_for_every_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("plots");
    let json = dir.path().join("compare.json");
    let status = Command::new(ROLEX)
        .args([
            "compare",
            "--keys",
            "3000",
            "--ops",
            "2000",
            "--quiet",
            "--value-size",
            "200",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run rolex");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    assert_eq!(r["value_size"]["max"], 200);
    for case in r["cases"].as_array().expect("cases") {
        for index in ["rolex", "bplus", "chime"] {
            let values = &case[index]["values"];
            assert!(
                values["live_bytes"].as_u64().expect("live") >= 200 * 1000,
                "{index} in {}: {values}",
                case["name"]
            );
        }
    }
    let table = std::fs::read_to_string(out.join("table.md")).expect("table");
    assert!(table.contains("--value-size 200`"), "{table}");
}
