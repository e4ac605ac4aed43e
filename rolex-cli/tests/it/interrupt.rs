//! Ctrl-C during `rolex bench` and `rolex compare`: the first SIGINT stops the run at its next
//! sample and the command writes what was measured, marked as interrupted, then exits with 130;
//! a second SIGINT exits at once.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{ROLEX, json};

/// Sends SIGINT to `child` (with `kill -INT`, as a shell's Ctrl-C would reach it).
fn interrupt(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -INT {}", child.id());
}

/// What is left in an ended child's `pipe` (its stdout or stderr), as text.
fn drained(pipe: Option<impl std::io::Read>) -> String {
    let mut text = String::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_string(&mut text).expect("read the pipe");
    }
    text
}

/// Waits for `child` at most `limit`, killing it (and failing) past that; its exit code.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let started = std::time::Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ctrl_c_stops_a_bench_and_writes_what_it_measured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    let stdout = dir.path().join("stdout");
    let mut child = Command::new(ROLEX)
        .args([
            "bench",
            "--quiet",
            "--keys",
            "20000",
            "--duration",
            "30",
            "--json",
        ])
        .arg(&report)
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rolex");
    std::thread::sleep(Duration::from_millis(1500));
    interrupt(&child);
    let code = wait_at_most(&mut child, Duration::from_secs(20));
    let stderr = drained(child.stderr.take());
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupted (Ctrl-C)"), "{stderr}");
    let r = json(&report);
    assert_eq!(r["interrupted"], true, "{r}");
    let ops = r["config"]["ops_run"].as_u64().expect("ops_run");
    assert!(ops > 0, "the operations run before Ctrl-C are reported");
    let wall = r["wall_seconds"].as_f64().expect("wall");
    assert!(wall < 29.0, "the run stopped early: {wall} s");
    let text = std::fs::read_to_string(&stdout).expect("stdout");
    assert!(
        text.contains("interrupted (Ctrl-C): the figures cover the operations run until then"),
        "{text}"
    );
}

/// Ctrl-C during a load phase stops it at its next sample; the run after it does not start, and
/// the report says how far the load got.
#[test]
fn ctrl_c_during_a_load_phase_reports_it_and_runs_nothing_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("r.json");
    // Four million keys on one thread: a load phase of many seconds.
    let mut child = Command::new(ROLEX)
        .args([
            "bench",
            "--quiet",
            "--keys",
            "4000000",
            "--threads",
            "1",
            "--load-phase",
            "--json",
        ])
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run rolex");
    std::thread::sleep(Duration::from_millis(2500));
    interrupt(&child);
    assert_eq!(wait_at_most(&mut child, Duration::from_secs(30)), Some(130));
    let text = drained(child.stdout.take());
    let r = json(&report);
    assert_eq!(r["interrupted"], true, "{r}");
    assert_eq!(r["load"]["interrupted"], true, "{r}");
    let inserted = r["load"]["inserted"].as_u64().expect("inserted");
    assert!(inserted < 3_960_000, "the load stopped early: {inserted}");
    assert_eq!(
        r["config"]["ops_run"], 0,
        "no run after an interrupted load"
    );
    assert_eq!(
        r["modeled"]["throughput_ops_s"], 0.0,
        "nothing run, nothing modeled"
    );
    assert!(text.contains("(interrupted by Ctrl-C)"), "{text}");
}

/// The first Ctrl-C lets the work under way before the run (here: waiting for a key file on a
/// named pipe no one writes) go on; a second one does not wait: the command ends with 130 at
/// once, writing no report.
#[test]
fn a_second_ctrl_c_exits_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pipe = dir.path().join("keys.sosd");
    let made = Command::new("mkfifo").arg(&pipe).status().expect("mkfifo");
    assert!(made.success(), "mkfifo");
    let report = dir.path().join("r.json");
    let mut child = Command::new(ROLEX)
        .args(["bench", "--quiet", "--duration", "30", "--keys-file"])
        .arg(&pipe)
        .arg("--json")
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run rolex");
    std::thread::sleep(Duration::from_millis(1000));
    interrupt(&child);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the first Ctrl-C does not end the command at once"
    );
    interrupt(&child);
    assert_eq!(wait_at_most(&mut child, Duration::from_secs(20)), Some(130));
    assert!(!report.exists(), "no report after a second Ctrl-C");
}

#[test]
fn ctrl_c_stops_a_comparison_and_writes_the_cases_finished() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("c.json");
    let out = dir.path().join("plots");
    let mut child = Command::new(ROLEX)
        .args([
            "compare", "--quiet", "--keys", "3000", "--ops", "500000", "--out",
        ])
        .arg(&out)
        .arg("--json")
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run rolex");
    std::thread::sleep(Duration::from_millis(1500));
    interrupt(&child);
    assert_eq!(wait_at_most(&mut child, Duration::from_secs(60)), Some(130));
    let r = json(&report);
    assert_eq!(r["interrupted"], true);
    // 48 runs of 500,000 operations take far longer than the 1.5 s before Ctrl-C.
    let cases = r["cases"].as_array().expect("cases").len();
    assert!(
        cases < 24,
        "{cases} cases: the run under way was not stopped"
    );
    let table = std::fs::read_to_string(out.join("table.md")).expect("table");
    assert!(table.contains("interrupted (Ctrl-C) during "), "{table}");
}

/// A reader that goes away (`rolex bench | head -1`) ends the run quietly, by SIGPIPE as other
/// Unix tools end, not with a panic and a backtrace on stderr.
#[test]
fn a_closed_stdout_ends_a_run_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(ROLEX)
        .args([
            "bench",
            "--workload",
            "ycsb-c",
            "--keys",
            "20000",
            "--ops",
            "20000",
            "--threads",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rolex");
    // The reader goes away before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}
