//! `sim-pool-peer POOL_FILE SCRATCH_OFFSET SHARED_OFFSET ROUNDS`
//!
//! Attaches to an existing simulator pool file, runs the whole transport conformance suite in its
//! own scratch range, then plays role 1 of `conformance::peer_exchange` in the shared range while
//! another process plays role 0. Exits 0 on success, 1 if a check failed, 2 on bad arguments.

#![cfg_attr(loom, allow(unused))]

use std::process::ExitCode;

#[cfg(not(loom))]
use rdma_transport::Transport;
#[cfg(not(loom))]
use rdma_transport::conformance::{self, Scratch};
#[cfg(not(loom))]
use sim_transport::{Pool, SimConfig, SimTransport};

fn parse(args: &[String]) -> Result<(String, u64, u64, usize), String> {
    let [path, scratch, shared, rounds] = args else {
        return Err("usage: sim-pool-peer POOL_FILE SCRATCH_OFFSET SHARED_OFFSET ROUNDS".into());
    };
    let number = |s: &String| s.parse::<u64>().map_err(|e| format!("{s:?}: {e}"));
    let rounds = usize::try_from(number(rounds)?).map_err(|e| e.to_string())?;
    Ok((path.clone(), number(scratch)?, number(shared)?, rounds))
}

/// Pool files do not exist under loom (pools are vectors of loom atomics).
#[cfg(loom)]
fn main() -> ExitCode {
    eprintln!("sim-pool-peer: not available in a loom build");
    ExitCode::from(2)
}

#[cfg(not(loom))]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, scratch, shared, rounds) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("sim-pool-peer: {message}");
            return ExitCode::from(2);
        }
    };
    let pool = match Pool::open_file(&path) {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("sim-pool-peer: {e}");
            return ExitCode::from(2);
        }
    };
    let transport = SimTransport::new(vec![pool], SimConfig::default());
    let outcome = std::panic::catch_unwind(|| {
        conformance::run_all(
            &transport,
            Scratch::new(0, scratch, conformance::MIN_SCRATCH),
        );
        let mut ep = transport.endpoint().expect("endpoint");
        let range = Scratch::new(0, shared, conformance::peer_exchange_len(rounds));
        conformance::peer_exchange(&mut ep, range, 1, rounds);
    });
    match outcome {
        Ok(()) => {
            println!("sim-pool-peer: conformance and peer exchange passed");
            ExitCode::SUCCESS
        }
        Err(_) => ExitCode::from(1),
    }
}
