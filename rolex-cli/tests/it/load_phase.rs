//! `rolex bench --load-phase`: YCSB's `load`, measured and reported apart. One key in 100 is
//! bulk-loaded, the client threads insert the rest (each once), and then the run goes on over
//! every key.

use crate::common::bench;

/// Checks a run's load phase: `keys` in all, one in 100 bulk-loaded, the rest inserted and read
/// back, and the run after it over all of them.
fn load_phase_of(report: &serde_json::Value, text: &str, keys: u64) {
    let load = &report["load"];
    let bulk = keys.div_ceil(100);
    assert_eq!(load["bulk_loaded"], bulk, "{load}");
    assert_eq!(load["inserted"], keys - bulk, "{load}");
    assert_eq!(load["insert"]["count"], keys - bulk, "{load}");
    assert_eq!(
        load["inserts_missing"], 0,
        "every loaded key reads back: {load}"
    );
    assert_eq!(load["interrupted"], false);
    for figure in [
        "throughput_ops_s",
        "wall_seconds",
        "modeled_throughput_ops_s",
    ] {
        assert!(
            load[figure].as_f64().expect(figure) > 0.0,
            "{figure}: {load}"
        );
    }
    let insert = &load["insert"];
    assert!(
        insert["rtts_per_op"].as_f64().expect("rtts") >= 1.0,
        "{insert}"
    );
    assert!(insert["latency_us"]["p50"].as_f64().expect("p50") > 0.0);
    // The run is over every key, after the load.
    assert_eq!(report["config"]["keys_loaded"], keys);
    assert_eq!(report["config"]["load_phase"], true);
    assert_eq!(report["verify"], "clean", "{report}");
    assert!(
        text.contains(&format!(
            "load phase: {} keys inserted after a bulk load of {bulk}",
            keys - bulk
        )),
        "{text}"
    );
}

#[test]
fn a_load_phase_inserts_every_key_once_and_is_reported_apart_for_every_index() {
    for (index, inflight) in [
        ("rolex", "1"),
        ("rolex", "3"),
        ("bplus", "2"),
        ("chime", "1"),
    ] {
        let (report, text) = bench(&[
            "--index",
            index,
            "--inflight",
            inflight,
            "--keys",
            "20000",
            "--ops",
            "4000",
            "--workload",
            "ycsb-c",
            "--load-phase",
            "--check-inserts",
        ]);
        load_phase_of(&report, &text, 20_000);
        // YCSB C inserts nothing: the store holds exactly the loaded keys.
        assert_eq!(report["keys_after"], 20_000, "{index}");
        assert_eq!(report["ops"]["read"]["count"], 4000, "{index}");
    }
}

/// Appends: the bulk load holds the smallest keys and the load phase ascends above them; with
/// byte values and a run that inserts too, whose keys are apart from the loaded ones.
#[test]
fn an_appending_load_phase_with_byte_values_leaves_every_key_in_place() {
    let (report, text) = bench(&[
        "--keys",
        "12000",
        "--ops",
        "3000",
        "--workload",
        "ycsb-d",
        "--insert-order",
        "append",
        "--value-size",
        "40",
        "--load-phase",
        "--check-inserts",
    ]);
    load_phase_of(&report, &text, 12_000);
    let run_inserts = report["inserted"].as_u64().expect("inserted");
    assert!(run_inserts > 0, "YCSB D inserts");
    assert_eq!(report["inserts_missing"], 0);
    assert_eq!(report["keys_after"], 12_000 + run_inserts);
}

/// Without the flag there is no load phase, and the JSON says so.
#[test]
fn without_the_flag_the_keys_are_bulk_loaded_and_there_is_no_load_phase() {
    let (report, text) = bench(&["--keys", "5000", "--ops", "1000"]);
    assert_eq!(report["load"], serde_json::Value::Null);
    assert!(!text.contains("load phase"), "{text}");
}
