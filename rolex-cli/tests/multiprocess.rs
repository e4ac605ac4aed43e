//! One `rolex memnode` process serving a pool file, two `rolex bench --attach` processes inserting
//! and reading at once; then `rolex inspect` shows a clean verify holding every inserted key.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const ROLEX: &str = env!("CARGO_BIN_EXE_rolex");

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("json")
}

#[test]
fn a_memnode_and_two_attached_benches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let mut memnode = Command::new(ROLEX)
        .args(["memnode", "--pool"])
        .arg(&pool)
        .args(["--size", "96M", "--keys", "20000", "--duration", "12"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start memnode");
    let mut lines = BufReader::new(memnode.stdout.take().expect("stdout")).lines();
    let ready = lines.next().expect("a line").expect("read");
    assert!(ready.starts_with("ready:"), "{ready}");
    let drain = std::thread::spawn(move || lines.count());

    let benches: Vec<_> = (1..=2)
        .map(|seed| {
            let report = dir.path().join(format!("bench{seed}.json"));
            let child = Command::new(ROLEX)
                .args(["bench", "--attach"])
                .arg(&pool)
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
        assert!(child.wait().expect("wait").success(), "bench failed");
        let r = json(&report);
        assert_eq!(r["inserts_missing"], 0, "inserted keys missing: {r}");
        assert!(r["ops"]["read"]["count"].as_u64().unwrap_or(0) > 0);
        inserted += r["inserted"].as_u64().expect("inserted");
    }
    assert!(inserted > 15_000, "only {inserted} inserts");
    assert!(memnode.wait().expect("memnode").success(), "memnode failed");
    assert!(
        drain.join().expect("stdout") >= 1,
        "memnode printed no status"
    );

    let out = Command::new(ROLEX)
        .args(["inspect", "--attach"])
        .arg(&pool)
        .output()
        .expect("inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "inspect: {text}");
    assert!(text.contains("verify: clean"), "{text}");
    assert!(
        text.contains(&format!("{} keys in", 20_000 + inserted)),
        "expected {} keys: {text}",
        20_000 + inserted
    );
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, [7u8; 4096]).expect("write");
    let sosd = dir.path().join("keys.sosd");
    std::fs::write(&sosd, 5u64.to_le_bytes()).expect("write");
    let cases: Vec<Vec<String>> = vec![
        vec!["bench".into(), "--bogus".into()],
        vec!["bench".into(), "--threads".into(), "0".into()],
        vec!["bench".into(), "--workload".into(), "ycsb-z".into()],
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
    for args in cases {
        let out = Command::new(ROLEX).args(&args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: not one line: {stderr}"
        );
        assert!(stderr.starts_with("rolex: "), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A failed memnode leaves no half-built pool behind.
    assert!(!dir.path().join("q").exists());
}
