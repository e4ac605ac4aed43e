//! One `rolex memnode` process serving a pool file, two `rolex bench --attach` processes inserting
//! and reading at once; then `rolex inspect` shows a clean verify holding every inserted key.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::{ROLEX, attached_bench_ended_well, bad_input_line, json};

/// Starts `rolex` with `args` and returns it once it printed its `ready:` line, with that line
/// and a thread counting the lines it prints after it.
pub(crate) fn start_until_ready(
    args: &[&std::ffi::OsStr],
) -> (std::process::Child, String, std::thread::JoinHandle<usize>) {
    let mut child = Command::new(ROLEX)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("read");
    assert!(ready.starts_with("ready:"), "{ready}");
    (child, ready, std::thread::spawn(move || lines.count()))
}

/// A memnode creating `pool` with 20,000 keys, and `extra` flags.
fn start_memnode(
    pool: &std::path::Path,
    extra: &[&str],
) -> (std::process::Child, String, std::thread::JoinHandle<usize>) {
    start_memnode_sized(pool, "96M", "20000", extra)
}

/// `rolex inspect` reports a clean verify and exactly `keys` keys.
fn assert_pool_holds(pool: &std::path::Path, keys: u64) {
    let out = Command::new(ROLEX)
        .args(["inspect", "--attach"])
        .arg(pool)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "inspect: {text}");
    assert!(text.contains("verify: clean"), "{text}");
    assert!(
        text.contains(&format!("{keys} keys in")),
        "expected {keys} keys: {text}"
    );
}

/// Two `rolex bench` processes (seeds 1 and 2) attached to `attach` (one pool file, or a
/// comma-separated list), each running write50 for 20,000 operations with `--check-inserts`;
/// waits for both, checks each found every key it inserted, and returns how many keys they
/// inserted together.
fn two_attached_benches(dir: &std::path::Path, attach: &std::ffi::OsStr) -> u64 {
    let benches: Vec<_> = (1..=2)
        .map(|seed| {
            let report = dir.join(format!("bench{seed}.json"));
            let child = Command::new(ROLEX)
                .args(["bench", "--attach"])
                .arg(attach)
                .args([
                    "--workload",
                    "write50",
                    "--ops",
                    "20000",
                    "--threads",
                    "2",
                    "--quiet",
                    "--check-inserts",
                ])
                .args(["--seed", &seed.to_string(), "--json"])
                .arg(&report)
                .stdout(Stdio::null())
                .spawn()
                .expect("start bench");
            (child, report)
        })
        .collect();
    let mut inserted = 0;
    for (mut child, report) in benches {
        // The first to finish verifies while the other still writes.
        let status = child.wait().expect("wait");
        let r = json(&report);
        attached_bench_ended_well(status, &r);
        assert_eq!(r["inserts_missing"], 0, "inserted keys missing: {r}");
        assert!(r["ops"]["read"]["count"].as_u64().unwrap_or(0) > 0);
        inserted += r["inserted"].as_u64().expect("inserted");
    }
    assert!(inserted > 15_000, "only {inserted} inserts");
    inserted
}

#[test]
fn a_memnode_and_two_attached_benches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let (mut memnode, _, drain) = start_memnode(&pool, &["--duration", "12"]);
    let inserted = two_attached_benches(dir.path(), pool.as_os_str());
    assert!(memnode.wait().expect("memnode").success(), "memnode failed");
    assert!(
        drain.join().expect("stdout") >= 1,
        "memnode printed no status"
    );

    assert_pool_holds(&pool, 20_000 + inserted);
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, [7u8; 4096]).expect("write");
    let sosd = dir.path().join("keys.sosd");
    std::fs::write(&sosd, 5u64.to_le_bytes()).expect("write");
    let mut cases: Vec<Vec<String>> = vec![
        vec!["bench".into(), "--bogus".into()],
        vec!["bench".into(), "--threads".into(), "0".into()],
        vec!["bench".into(), "--workload".into(), "ycsb-z".into()],
        vec![
            "memnode".into(),
            "--pool".into(),
            dir.path().join("p3").display().to_string(),
            "--size".into(),
            "16M".into(),
            "--node".into(),
            "3".into(),
            "--nodes".into(),
            "3".into(),
        ],
        // Without the verbs feature (the default build), or without a device: one line either way.
        vec![
            "bench".into(),
            "--transport".into(),
            "verbs".into(),
            "--connect".into(),
            "127.0.0.1:9".into(),
        ],
        vec![
            "bench".into(),
            "--attach".into(),
            missing.display().to_string(),
        ],
        vec![
            "bench".into(),
            "--keys-file".into(),
            sosd.display().to_string(),
        ],
        vec![
            "bench".into(),
            "--workload-file".into(),
            missing.display().to_string(),
        ],
        vec![
            "inspect".into(),
            "--attach".into(),
            garbage.display().to_string(),
        ],
        vec![
            "memnode".into(),
            "--pool".into(),
            garbage.display().to_string(),
            "--size".into(),
            "1M".into(),
        ],
        vec![
            "memnode".into(),
            "--pool".into(),
            dir.path().join("p").display().to_string(),
            "--size".into(),
            "12Q".into(),
        ],
        vec![
            "memnode".into(),
            "--pool".into(),
            dir.path().join("q").display().to_string(),
            "--size".into(),
            "64K".into(),
            "--keys".into(),
            "100000".into(),
        ],
    ];
    let resume = |path: &std::path::Path| -> Vec<String> {
        vec![
            "memnode".into(),
            "--resume".into(),
            "--pool".into(),
            path.display().to_string(),
        ]
    };
    cases.push(resume(&missing));
    cases.push(resume(&garbage));
    let mut with_size = resume(&garbage);
    with_size.extend(["--size".into(), "1M".into()]);
    cases.push(with_size);
    for args in cases {
        bad_input_line(&args);
    }
    // A failed memnode leaves no half-built pool behind.
    assert!(!dir.path().join("q").exists());
}

/// A memnode killed while compute processes write can be started again on its pool file: the
/// keys are all there, writes go on, and only one memnode serves a pool at a time.
#[test]
fn a_killed_memnode_resumes_its_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let (mut first, _, _) = start_memnode(&pool, &[]);
    let bench = |seed: &str, report: &std::path::Path| {
        let out = Command::new(ROLEX)
            .args(["bench", "--attach"])
            .arg(&pool)
            .args(["--workload", "insert-only", "--ops", "20000", "--quiet"])
            .args(["--check-inserts", "--seed", seed, "--json"])
            .arg(report)
            .stdout(Stdio::null())
            .output()
            .expect("bench");
        assert!(
            report.exists(),
            "no report: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The memnode's retrainer may still be retraining what the inserts queued.
        let r = json(report);
        attached_bench_ended_well(out.status, &r);
        r["inserted"].as_u64().expect("inserted")
    };
    let mut inserted = bench("1", &dir.path().join("before.json"));
    // Killed, not stopped: whatever it was doing is cut short.
    first.kill().expect("kill");
    first.wait().expect("wait");

    let resume = [
        "memnode".as_ref(),
        "--resume".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--duration".as_ref(),
        "30".as_ref(),
        "--lease-ms".as_ref(),
        "5000".as_ref(),
    ];
    let (mut second, ready, _) = start_until_ready(&resume);
    assert!(ready.contains("resumed"), "{ready}");
    let twice = bad_input_line(&resume);
    assert!(twice.contains("served by another memnode"), "{twice}");
    inserted += bench("2", &dir.path().join("after.json"));
    // Killed right after the inserts, most likely while compacting the chains they made.
    second.kill().expect("kill");
    second.wait().expect("wait");

    // A third memnode repairs whatever that cut short and stops cleanly; then verify is clean
    // (a record left frozen or a retraining left in flight would be reported).
    let out = Command::new(ROLEX)
        .args(["memnode", "--resume", "--duration", "1", "--pool"])
        .arg(&pool)
        .output()
        .expect("third memnode");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_pool_holds(&pool, 20_000 + inserted);
}

/// `rolex inspect` on one pool file: its output, after checking it ran and verified clean.
fn inspect_clean(pool: &std::path::Path) -> String {
    let out = Command::new(ROLEX)
        .args(["inspect", "--attach"])
        .arg(pool)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "inspect: {text}");
    assert!(text.contains("verify: clean"), "{text}");
    text
}

/// The number after `before` and up to `after` in `text`.
fn number_between(text: &str, before: &str, after: &str) -> u64 {
    let start = text.find(before).expect("field") + before.len();
    let rest = &text[start..];
    rest[..rest.find(after).expect("end")]
        .trim()
        .parse()
        .expect("number")
}

/// The paper's deployment on one machine: three `rolex memnode` processes, each creating its own
/// pool file with one range partition of the keys, and two `rolex bench` processes attached to
/// all three, inserting and reading across them. Every inserted key reads back (through the
/// partition table), and each pool verifies clean — `verify` bounds every key by its node's key
/// range, so a key stored in the wrong partition would show.
#[test]
fn three_memnodes_and_two_benches_across_all_of_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pools: Vec<std::path::PathBuf> = (0..3).map(|i| dir.path().join(format!("p{i}"))).collect();
    let memnodes: Vec<_> = pools
        .iter()
        .enumerate()
        .map(|(i, pool)| {
            let node = i.to_string();
            start_memnode_sized(
                pool,
                "64M",
                "30000",
                &["--nodes", "3", "--node", &node, "--duration", "12"],
            )
        })
        .collect();
    for (i, (_, ready, _)) in memnodes.iter().enumerate() {
        assert!(ready.contains(&format!("memory node {i} of 3")), "{ready}");
    }
    let attach = pools
        .iter()
        .rev() // any order
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let inserted = two_attached_benches(dir.path(), attach.as_ref());
    for (mut memnode, _, drain) in memnodes {
        assert!(memnode.wait().expect("memnode").success(), "memnode failed");
        drain.join().expect("stdout");
    }
    // Each pool clean; their key ranges tile the key space; together they hold every key.
    let mut keys = 0;
    let mut next_lo = 0u64;
    for (i, pool) in pools.iter().enumerate() {
        let text = inspect_clean(pool);
        assert!(text.contains(&format!("node {i} of 3")), "{text}");
        let lo = number_between(&text, "keys [", ",");
        let hi = number_between(&text, &format!("keys [{lo},"), "]");
        assert_eq!(
            lo,
            next_lo,
            "node {i}'s range starts where node {}'s ends",
            i.max(1) - 1
        );
        next_lo = hi.wrapping_add(1);
        keys += text
            .lines()
            .find(|line| line.contains(" keys in "))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .expect("the keys line");
    }
    assert_eq!(next_lo, 0, "the last node serves up to the largest key");
    assert_eq!(keys, 30_000 + inserted);
}

/// A memnode creating a pool of `size` at `pool` with `keys` keys, and `extra` flags.
fn start_memnode_sized(
    pool: &std::path::Path,
    size: &str,
    keys: &str,
    extra: &[&str],
) -> (std::process::Child, String, std::thread::JoinHandle<usize>) {
    // No process dies in these tests: a lease a starved but live bench cannot outlast.
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "memnode".as_ref(),
        "--pool".as_ref(),
        pool.as_os_str(),
        "--size".as_ref(),
        size.as_ref(),
        "--keys".as_ref(),
        keys.as_ref(),
        "--lease-ms".as_ref(),
        "5000".as_ref(),
    ];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    start_until_ready(&args)
}

/// A compute process killed with SIGKILL while inserting never blocks another one inserting into
/// the same keys: the memnode declares it dead when its lease lapses, cuts its connections off and
/// releases the leaf locks it held; the survivor finishes without an error and finds every key it
/// inserted; `rolex inspect` then verifies clean with no lock held by a non-member.
#[test]
fn a_compute_process_killed_while_inserting_blocks_nobody() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let mut memnode = Command::new(ROLEX)
        .args(["memnode", "--pool"])
        .arg(&pool)
        // A lease long enough that a live bench starved by the other tests running beside this
        // one is not taken for dead; the killed one is found a second after it stops.
        .args(["--size", "256M", "--keys", "200000", "--lease-ms", "1000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start memnode");
    let mut lines = BufReader::new(memnode.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("read");
    assert!(ready.starts_with("ready:"), "{ready}");
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    // The memnode's status line (once a second) until one contains `what`.
    let await_status = |what: &str| -> String {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match line_rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(e) => panic!("no status line with {what:?}: {e}"),
            }
        }
    };

    let bench = |seed: &str, seconds: &str| {
        let mut command = Command::new(ROLEX);
        command
            .args(["bench", "--attach"])
            .arg(&pool)
            .args(["--workload", "write50", "--threads", "2", "--quiet"])
            .args(["--duration", seconds, "--seed", seed])
            .stdout(Stdio::null());
        command
    };
    // The victim would insert far longer than the survivor; both start at once, from the same
    // 200,000 keys, and insert into the same key space. The survivor runs for a time, not a
    // number of operations: it must outlast the memnode's next status line (once a second),
    // the kill, and the lease (a second) after it, in release builds as in debug ones (a fixed
    // 300,000 operations ended before the first status line in release).
    let mut victim = bench("7", "600")
        .stderr(Stdio::null())
        .spawn()
        .expect("victim");
    let report = dir.path().join("survivor.json");
    let survivor = bench("8", "5")
        .args(["--check-inserts", "--json"])
        .arg(&report)
        .stderr(Stdio::piped())
        .spawn()
        .expect("survivor");
    await_status("members: 2 alive");
    std::thread::sleep(std::time::Duration::from_millis(300));
    victim.kill().expect("SIGKILL");
    victim.wait().expect("reap");

    let out = survivor.wait_with_output().expect("survivor");
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "the survivor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&report);
    attached_bench_ended_well(out.status, &r);
    assert_eq!(r["inserts_missing"], 0, "{r}");
    let inserted = r["inserted"].as_u64().expect("inserted");
    assert!(inserted > 50_000, "only {inserted} inserts");
    let recovered = await_status("1 died, 1 recovered");
    println!("{recovered}");
    println!(
        "survivor's slowest insert: {} µs (a wait for the dead node's lock shows here)",
        r["ops"]["insert"]["latency_us"]["max"]
    );

    // Stopped by a kill too; a memnode resuming the pool for a second settles whatever a
    // retraining in progress left, as after any memnode crash.
    memnode.kill().expect("kill memnode");
    memnode.wait().expect("reap memnode");
    let out = Command::new(ROLEX)
        .args(["memnode", "--resume", "--duration", "1", "--pool"])
        .arg(&pool)
        .output()
        .expect("resume");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = inspect_clean(&pool);
    assert!(text.contains("locks held by non-members: none"), "{text}");
    assert!(
        number_between(&text, "record bytes\n", " keys in") >= 200_000 + inserted,
        "{text}"
    );
}

/// SIGTERM (as `kill` and service managers send) stops a memnode cleanly: a last line saying so,
/// exit code 0, and a pool that resumes with every key.
#[test]
fn a_memnode_stops_on_sigterm_with_a_last_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let mut child = Command::new(ROLEX)
        .args(["memnode", "--pool"])
        .arg(&pool)
        .args(["--size", "32M", "--keys", "5000"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("read");
    assert!(ready.starts_with("ready:"), "{ready}");
    let status = lines.next().expect("a status line").expect("read");
    assert!(status.starts_with("status at "), "{status}");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let rest: Vec<String> = lines.map(|l| l.expect("read")).collect();
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "exit {exit:?}, output {rest:?}");
    assert!(
        rest.last()
            .is_some_and(|l| l.starts_with("stopped by a signal after")),
        "{rest:?}"
    );
    assert_pool_holds(&pool, 5000);
}
