//! The conformance suite across two processes attached to one pool file: a child process
//! (`sim-pool-peer`) and this test each run the suite in their own range, then exchange greetings,
//! WRITEs and FAAs through a shared range.

#![cfg(not(loom))]

use std::process::Command;

use rdma_transport::conformance::{self, Scratch};
use rdma_transport::{Endpoint, Transport};
use sim_transport::{Pool, SimConfig, SimTransport};

#[test]
fn two_processes_share_one_pool_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    let len = 1 << 20;
    let rounds = 2_000;
    let (mine, theirs, shared) = (0u64, 128 * 1024, 512 * 1024);
    drop(Pool::create_file(&path, len).expect("create pool file"));

    // Attach as a second mapping, exactly as the child will.
    let transport = SimTransport::new(
        vec![Pool::open_file(&path).expect("attach")],
        SimConfig::default(),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_sim-pool-peer"))
        .arg(&path)
        .arg(theirs.to_string())
        .arg(shared.to_string())
        .arg(rounds.to_string())
        .spawn()
        .expect("start the child process");

    conformance::run_all(&transport, Scratch::new(0, mine, conformance::MIN_SCRATCH));
    let mut ep = transport.endpoint().expect("endpoint");
    conformance::peer_exchange(
        &mut ep,
        Scratch::new(0, shared, conformance::peer_exchange_len(rounds)),
        0,
        rounds,
    );

    let status = child.wait().expect("wait for the child");
    assert!(
        status.success(),
        "the child process failed its half: {status}"
    );

    // What the child wrote in its own scratch range is visible here too.
    let mut theirs_bytes = vec![0u8; 64];
    ep.read(
        rdma_transport::RemoteAddr::new(0, theirs).expect("addr"),
        &mut theirs_bytes,
    )
    .expect("read");
    assert!(
        theirs_bytes.iter().any(|&b| b != 0),
        "the child's conformance writes must be visible"
    );
}

#[test]
fn bad_pool_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    assert!(
        Pool::open_file(&path).is_err(),
        "a missing file cannot be attached"
    );
    std::fs::write(&path, [0u8; 12]).expect("write");
    assert!(matches!(
        Pool::open_file(&path),
        Err(sim_transport::PoolError::BadSize(12))
    ));
    assert!(
        Pool::create_file(&path, 4096).is_err(),
        "an existing file is never clobbered"
    );
    assert!(matches!(
        Pool::anonymous(0),
        Err(sim_transport::PoolError::BadSize(0))
    ));
    assert!(matches!(
        Pool::anonymous(13),
        Err(sim_transport::PoolError::BadSize(13))
    ));
}
