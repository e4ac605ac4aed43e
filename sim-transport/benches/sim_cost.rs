//! The simulator's own cost per verb, single-threaded, default configuration.
//!
//! `cargo bench -p sim-transport --bench sim_cost [-- --iters N --runs R]`
//!
//! Prints the median over R runs of N operations each, in nanoseconds per operation. These are
//! the costs the simulator adds to every figure measured on it; they are not network latencies.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use rdma_transport::{Endpoint, RemoteAddr, Transport, Verb};
use sim_transport::{SimEndpoint, SimTransport};
use testkit::{flag_u64, median};

fn median_ns(runs: usize, iters: u64, mut op: impl FnMut(u64)) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                for i in 0..iters {
                    op(i);
                }
                start.elapsed().as_nanos() as f64 / iters as f64
            })
            .collect(),
    )
}

/// ns/op for READ, WRITE, CAS, FAA and a 4-verb batch over `slots` 4 KiB slots.
fn measure(ep: &mut SimEndpoint, runs: usize, iters: u64, slots: u64) -> [f64; 5] {
    let at = |i: u64| RemoteAddr::new(0, (i % slots) * 4096).unwrap_or_default();
    for i in 0..slots {
        let _ = ep.write(at(i), &[1u8; 256]);
    }
    let mut buf = [0u8; 256];
    let read = median_ns(runs, iters, |i| {
        ep.read(at(i), &mut buf).ok();
        black_box(&buf);
    });
    let data = [7u8; 256];
    let write = median_ns(runs, iters, |i| {
        ep.write(at(i), black_box(&data)).ok();
    });
    let cas = median_ns(runs, iters, |i| {
        black_box(ep.cas(at(i), i, i + 1).ok());
    });
    let faa = median_ns(runs, iters, |i| {
        black_box(ep.faa(at(i), 1).ok());
    });
    let batch4 = median_ns(runs, iters, |i| {
        let mut leaf = [0u8; 256];
        let mut header = [0u8; 8];
        let word = 5u64.to_le_bytes();
        let mut verbs = [
            Verb::cas(at(i), 0, 0),
            Verb::read(at(i + 1), &mut leaf).fenced(),
            Verb::read(at(i + 2), &mut header),
            Verb::write(at(i + 3).checked_add(512).unwrap_or_default(), &word),
        ];
        ep.batch(&mut verbs).ok();
        black_box(&verbs);
    });
    [read, write, cas, faa, batch4]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (iters, runs) = match (
        flag_u64(&args, "--iters", 2_000_000),
        flag_u64(&args, "--runs", 7),
    ) {
        (Ok(i), Ok(r)) if i > 0 && r > 0 => (i, r as usize),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("sim_cost: {e}");
            return ExitCode::from(2);
        }
        _ => {
            eprintln!("sim_cost: --iters and --runs must be positive");
            return ExitCode::from(2);
        }
    };
    let pool_len = 64 << 20;
    let transport = match SimTransport::anonymous(&[pool_len]) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sim_cost: {e}");
            return ExitCode::from(2);
        }
    };
    let mut ep: SimEndpoint = match transport.endpoint() {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("sim_cost: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "simulator cost per operation, one thread, median of {runs} runs x {iters} ops (ns/op)"
    );
    println!(
        "{:<52} {:>12} {:>12}",
        "operation", "hot 64 KiB", "cold 64 MiB"
    );
    // Hot: 16 slots of 4 KiB stay in L1/L2. Cold: accesses spread over the whole 64 MiB pool,
    // missing caches and TLB like an index over a large pool would.
    let hot = measure(&mut ep, runs, iters, 16);
    let cold = measure(&mut ep, runs, iters, pool_len / 4096);
    for (i, name) in [
        "READ 256 B",
        "WRITE 256 B",
        "CAS 8 B",
        "FAA 8 B",
        "batch of 4 (CAS, fenced READ 256 B, READ 8 B, WRITE 8 B)",
    ]
    .into_iter()
    .enumerate()
    {
        println!("{name:<52} {:>12.1} {:>12.1}", hot[i], cold[i]);
    }
    let s = ep.stats();
    println!("(counted {} round trips, {} verbs)", s.batches, s.verbs());
    ExitCode::SUCCESS
}
