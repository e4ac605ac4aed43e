//! What an attached `rolex bench` (and `rolex inspect`) says about the pool it attached to: a
//! pool no `rolex memnode` serves is refused unless `--allow-unserved`, and `verify` tells
//! problems that last (exit code 1) from a pool that changed while it was read, as it does while
//! another process writes it (clean, or inconclusive with exit code 3; never a false alarm).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ROLEX, attached_bench_ended_well, bad_input_line, json};
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
    assert_eq!(r["verify"], "clean", "{r}");

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

/// The file offset of the ring (from `rolex inspect`'s `ring @N` ).
fn ring_offset(pool: &Path) -> u64 {
    let out = Command::new(ROLEX)
        .args(["inspect", "--attach"])
        .arg(pool)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("ring @").expect("the ring's offset") + "ring @".len();
    text[at..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

/// A problem that stays where it is (a slot split journaled in the ring but never published, in
/// a pool nobody serves, where nothing repairs it) is found by every walk: `verify` reports it,
/// and `bench` and `inspect` exit with code 1 after their report.
#[test]
fn verify_problems_that_last_fail_the_run() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = stopped_pool(dir.path());
    // The split journal's first word: the ring's fifth.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&pool)
        .expect("open");
    file.seek(SeekFrom::Start(ring_offset(&pool) + 32))
        .expect("seek");
    file.write_all(&1u64.to_le_bytes()).expect("write");
    drop(file);

    let report = dir.path().join("report.json");
    let (out, r) = read_only_bench(&pool, &report, &["--allow-unserved"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // One line after the warning, and the report before it.
    let last: Vec<&str> = stderr.lines().filter(|l| !l.contains("warning")).collect();
    assert_eq!(last.len(), 1, "{stderr}");
    assert!(
        last[0].starts_with("rolex: verify found problems") && last[0].contains("4 walks"),
        "{stderr}"
    );
    assert!(
        stdout.contains("verify: PROBLEMS, 1 found by every one of 4 walks"),
        "{stdout}"
    );
    assert_eq!(r["verify"], "problems", "{r}");
    assert_eq!(r["verify_clean"], false, "{r}");
    assert_eq!(r["verify_walks"], 4, "{r}");
    assert!(
        r["verify_problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("split is journaled")),
        "{r}"
    );

    let out = Command::new(ROLEX)
        .args(["inspect", "--attach"])
        .arg(&pool)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("verify: PROBLEMS, 1 found by every one of 4 walks"),
        "{text}"
    );
}

/// The case: a bench attached to a pool another process is still writing verifies it
/// when it ends. Its walks see that writer's writes in flight and the memnode retraining what
/// the writer inserts; they must never be reported as problems: the bench (and `rolex inspect`,
/// run meanwhile) ends clean with exit code 0, or inconclusive with exit code 3 and one line
/// saying so.
#[test]
fn verify_while_another_process_writes_raises_no_false_alarm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let mut memnode = Command::new(ROLEX)
        .args(["memnode", "--pool"])
        .arg(&pool)
        .args(["--size", "96M", "--keys", "20000", "--lease-ms", "5000"])
        .args(["--duration", "60"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("memnode");
    let mut lines = BufReader::new(memnode.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("read");
    assert!(ready.starts_with("ready:"), "{ready}");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The memnode's status lines (once a second) until one counts `members` members alive,
    // for up to `seconds`: whether one did.
    let await_members = |members: u32, seconds: u64| {
        let until = Instant::now() + Duration::from_secs(seconds);
        let what = format!("members: {members} alive");
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(&what) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    };
    let bench = |workload: &str, seconds: &str, threads: &str, report: &Path| {
        Command::new(ROLEX)
            .args(["bench", "--quiet", "--attach"])
            .arg(&pool)
            .args(["--workload", workload, "--duration", seconds])
            .args(["--threads", threads, "--json"])
            .arg(report)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bench")
    };

    // The reader opens the store before the writer starts (a bench reading every record while
    // a retraining replaces one can fail to start: not what this test is about), and ends, and
    // verifies, while the writer inserts and the memnode retrains.
    let reader_report = dir.path().join("reader.json");
    let reader = bench("ycsb-c", "4", "1", &reader_report);
    assert!(await_members(1, 30), "the reader never joined");
    let writer_report = dir.path().join("writer.json");
    let writer = bench("write50", "6", "2", &writer_report);
    // Both at work (on a machine too busy for the writer to join before the reader ends, the
    // reader verifies a pool only the memnode works on, which must not raise an alarm either).
    let both = await_members(2, 10);

    let mut outcomes = vec![format!("reader and writer seen at work together: {both}")];
    for _ in 0..3 {
        let out = Command::new(ROLEX)
            .args(["inspect", "--attach"])
            .arg(&pool)
            .output()
            .expect("inspect");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            matches!(out.status.code(), Some(0 | 3)) && !text.contains("PROBLEMS"),
            "inspect exited with {:?}: {text}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        outcomes.push(format!("inspect: exit code {:?}", out.status.code()));
    }

    for (name, child, report) in [
        ("reader", reader, reader_report),
        ("writer", writer, writer_report),
    ] {
        let out = child.wait_with_output().expect("bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(report.exists(), "{name}: no report: {stderr}");
        let r = json(&report);
        attached_bench_ended_well(out.status, &r);
        if out.status.code() == Some(3) {
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
            assert!(stderr.starts_with("rolex: verify inconclusive"), "{stderr}");
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("verify: INCONCLUSIVE"),
                "{r}"
            );
        }
        outcomes.push(format!(
            "{name}: {} in {} walks",
            r["verify"], r["verify_walks"]
        ));
    }
    println!("{outcomes:?}");
    memnode.kill().expect("kill");
    memnode.wait().expect("reap");
}
