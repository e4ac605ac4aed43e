//! Shared by the tests that run the `rolex` binary.

use std::ffi::OsStr;
use std::process::Command;

pub const ROLEX: &str = env!("CARGO_BIN_EXE_rolex");

/// Runs `rolex` with `args` and checks that it failed as bad input must: exit code 2 and one line
/// on stderr, starting `rolex: `, no panic. Returns that line.
pub fn bad_input_line<S: AsRef<OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let out = Command::new(ROLEX).args(args).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "{args:?}: not one line: {stderr}"
    );
    assert!(stderr.starts_with("rolex: "), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    stderr
}

/// Runs `rolex` with `args`, which must succeed; its standard output and error.
#[allow(dead_code)]
pub fn run(args: &[&str]) -> (String, String) {
    let out = Command::new(ROLEX).args(args).output().expect("run rolex");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "rolex {args:?}: {stderr}");
    (stdout, stderr)
}

/// The JSON report at `path`.
#[allow(dead_code)]
pub fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("json")
}

/// `rolex bench --quiet` with `args`, which must succeed: its JSON report and its standard
/// output. (A workload with inserts gives `--check-inserts` in `args` to have them read back; a
/// workload without refuses it.)
#[allow(dead_code)]
pub fn bench(args: &[&str]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("report.json");
    let out = Command::new(ROLEX)
        .args(["bench", "--quiet", "--json"])
        .arg(&report)
        .args(args)
        .output()
        .expect("run rolex");
    assert!(
        out.status.success(),
        "rolex bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        json(&report),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Checks how an attached `rolex bench` ended, while other processes may have been writing its
/// pool: exit code 0 with its verify clean, or 3 with its verify inconclusive (the pool changed
/// while it was read) — never verify problems, which would be a false alarm.
#[allow(dead_code)]
pub fn attached_bench_ended_well(status: std::process::ExitStatus, report: &serde_json::Value) {
    match status.code() {
        Some(0) => assert_eq!(report["verify"], "clean", "{report}"),
        Some(3) => assert_eq!(report["verify"], "inconclusive", "{report}"),
        other => panic!("attached bench exited with {other:?}: {report}"),
    }
    assert_eq!(report["verify_problems"], serde_json::json!([]), "{report}");
}
