//! `--transport verbs` without an RDMA device: one line, exit code 2, nothing created.
//! Run with `cargo test -p rolex-cli --features verbs --test it verbs_cli::`.

#![cfg(feature = "verbs")]

use crate::common::bad_input_line;

#[test]
fn without_a_device_verbs_commands_say_so_in_one_line() {
    if rdma_transport::verbs::device_present() {
        eprintln!("an RDMA device is present: the no-device path cannot be exercised here");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = dir.path().join("pool");
    let runs: [Vec<String>; 2] = [
        vec![
            "bench".into(),
            "--transport".into(),
            "verbs".into(),
            "--connect".into(),
            "127.0.0.1:9".into(),
        ],
        vec![
            "memnode".into(),
            "--transport".into(),
            "verbs".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--pool".into(),
            pool.display().to_string(),
            "--size".into(),
            "16M".into(),
        ],
    ];
    for args in runs {
        let line = bad_input_line(&args);
        assert!(line.contains("no RDMA device"), "{args:?}: {line}");
    }
    assert!(
        !pool.exists(),
        "a memnode that cannot serve must not create its pool"
    );
}
