//! What an attached `rolex bench` says about the pool it attached to: a pool no `rolex memnode`
//! serves is refused unless `--allow-unserved`.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{ROLEX, bad_input_line, json};
use crate::multiprocess::start_until_ready;

/// A pool file of 5,000 keys made by a memnode that stopped after a tenth of a second: a pool
/// no memory node serves.
fn stopped_pool(dir: &Path) -> std::path::PathBuf {
    let pool = dir.join("pool");
    let out = Command::new(ROLEX)
        .args(["memnode", "--pool"])
        .arg(&pool)
        .args(["--size", "32M", "--keys", "5000", "--duration", "0.1"])
        .output()
        .expect("memnode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pool
}

/// `rolex bench --attach pool --quiet --workload ycsb-c --ops 2000 --json report` and `extra`:
/// how it ended, and its report if it wrote one.
fn read_only_bench(pool: &Path, report: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let out = Command::new(ROLEX)
        .args([
            "bench",
            "--quiet",
            "--workload",
            "ycsb-c",
            "--ops",
            "2000",
            "--attach",
        ])
        .arg(pool)
        .arg("--json")
        .arg(report)
        .args(extra)
        .output()
        .expect("bench");
    let r = if report.exists() {
        json(report)
    } else {
        serde_json::Value::Null
    };
    (out, r)
}

#[test]
fn an_attached_bench_refuses_a_pool_no_memnode_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = stopped_pool(dir.path());
    let shown = pool.display().to_string();

    // Never started again: refused at once, naming the pool, with the way out.
    let started = Instant::now();
    let line = bad_input_line(&["bench", "--attach", &shown, "--ops", "1000"]);
    assert!(
        line.contains(&format!("{shown}: no memory node serves it"))
            && line.contains("--allow-unserved"),
        "{line}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the check waits"
    );
    let line = bad_input_line(&["bench", "--allow-unserved"]);
    assert!(
        line.contains("--allow-unserved") && line.contains("--attach"),
        "{line}"
    );

    // Run anyway: a warning at the start, a line in the report, the pool in the JSON.
    let report = dir.path().join("unserved.json");
    let (out, r) = read_only_bench(&pool, &report, &["--allow-unserved"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("no memory node serves it"),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "retrainer: none ran: no memory node served {shown}"
        )),
        "{stdout}"
    );
    assert_eq!(r["unserved_pools"], serde_json::json!([shown]), "{r}");
    assert_eq!(r["config"]["allow_unserved"], true, "{r}");

    // Served: no refusal, no warning, nothing in the report.
    let resume: [&std::ffi::OsStr; 6] = [
        "memnode".as_ref(),
        "--resume".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--duration".as_ref(),
        "60".as_ref(),
    ];
    let (mut memnode, _, _) = start_until_ready(&resume);
    let report = dir.path().join("served.json");
    let (out, r) = read_only_bench(&pool, &report, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(r["unserved_pools"], serde_json::json!([]), "{r}");
    // Given where it is not needed, it changes nothing.
    let (out, r) = read_only_bench(&pool, &report, &["--allow-unserved"]);
    assert!(out.status.success());
    assert_eq!(r["unserved_pools"], serde_json::json!([]), "{r}");

    // Its memnode killed: its lock went with it, and the pool is unserved again.
    memnode.kill().expect("kill");
    memnode.wait().expect("reap");
    let line = bad_input_line(&["bench", "--attach", &shown]);
    assert!(line.contains("no memory node serves it"), "{line}");
}

/// A bench asks whether a pool is served by taking its lock, shared, for an instant: a memnode
/// starting then waits it out instead of taking the pool for served by another memnode.
#[test]
fn a_memnode_waits_out_a_bench_asking_whether_it_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = stopped_pool(dir.path());
    let asking = std::fs::File::open(&pool).expect("open");
    asking.lock_shared().expect("shared lock");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(120));
        drop(asking);
    });
    let out = Command::new(ROLEX)
        .args(["memnode", "--resume", "--duration", "0.1", "--pool"])
        .arg(&pool)
        .output()
        .expect("memnode");
    release.join().expect("release");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
