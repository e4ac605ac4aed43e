//! Runs seeds of the whole-store simulation, printing progress; stops at the first failure and
//! prints the command that replays it.
//!
//! ```text
//! simulate [--from S] [--seeds N] [--ops N] [--no-faults] [--values] [--inflight K]   run seeds S, S+1, ... (N of them)
//! simulate --seed S [--ops N] [--no-faults] [--values] [--inflight K] [--history]     replay one seed
//! (either with `--cpu-atomics`: every atomic is atomic with respect to WRITEs too, as a CPU's are;
//! by default atomics are a NIC's, and a WRITE landing between an atomic's read and write is lost;
//! and with `--no-swarm`: every run drawn as before swarm runs, with faults of every kind, where
//! by default three runs in four draw them from a subset of the kinds, drawn from the seed, and
//! half the uncontended runs that stop the worker in slot splits grow the last slot's keys)
//!
//! With `--values`, the pools store byte values and every operation goes through value blocks.
//! With `--inflight K` (1 to 8), every client thread keeps K operations in flight; without it,
//! each seed draws its K (1 in about one seed of eight: one operation at a time).
//! ```
//!
//! With `--history`, a replay prints the faults as they were injected (each with the history's
//! clock then) and every operation.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use store_sim::{Options, SeedReport, run_seed};
use testkit::flag_u64;

const USAGE: &str = "usage: simulate [--from S] [--seeds N] [--ops N] [--no-faults] [--values] [--inflight K] [--keep-going] | --seed S [--ops N] [--no-faults] [--values] [--inflight K] [--history]  (--inflight: operations in flight per client thread, 1-8; default drawn per seed; --cpu-atomics: atomics as a CPU's, never losing a WRITE that lands between an atomic's read and write, as a NIC's do by default; --no-swarm: every run drawn as before swarm runs, with faults of every kind, where by default three runs in four draw from a subset of the kinds and half the uncontended runs watching slot splits grow the last slot)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // A failing run's panic is reported with its seed; the default hook's backtrace is noise.
    std::panic::set_hook(Box::new(|_| {}));
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("simulate: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    // Flags that take a value, and flags that stand alone.
    let with_value = ["--from", "--seeds", "--ops", "--seed", "--inflight"];
    let switches = [
        "--no-faults",
        "--values",
        "--history",
        "--keep-going",
        "--cpu-atomics",
        "--no-swarm",
        "--help",
    ];
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        i += if switches.contains(&a) {
            1
        } else if with_value.contains(&a) {
            2
        } else {
            return Err(format!("unknown argument {a:?}"));
        };
    }
    if args.iter().any(|a| a == "--help") {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    let ops = flag_u64(args, "--ops", Options::default().ops_per_client as u64)?;
    if ops == 0 || ops > 100_000 {
        return Err("--ops must be between 1 and 100000".into());
    }
    let inflight = if args.iter().any(|a| a == "--inflight") {
        let k = flag_u64(args, "--inflight", 0)?;
        if k == 0 || k > store_sim::MAX_IN_FLIGHT as u64 {
            return Err(format!(
                "--inflight must be between 1 and {}",
                store_sim::MAX_IN_FLIGHT
            ));
        }
        Some(k as usize)
    } else {
        None
    };
    let options = Options {
        ops_per_client: ops as usize,
        faults: !args.iter().any(|a| a == "--no-faults"),
        byte_values: args.iter().any(|a| a == "--values"),
        inflight,
        nic_atomics: !args.iter().any(|a| a == "--cpu-atomics"),
        swarm: !args.iter().any(|a| a == "--no-swarm"),
    };
    let flags = replay_flags(&options);
    if args.iter().any(|a| a == "--seed") {
        let seed = flag_u64(args, "--seed", 0)?;
        let report = run_seed(seed, &options);
        print_one(&report);
        if args.iter().any(|a| a == "--history") {
            for fault in &report.summary.fault_log {
                println!("fault {fault}");
            }
            for entry in &report.summary.history {
                println!("{entry:?}");
            }
        }
        return Ok(if report.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let from = flag_u64(args, "--from", 0)?;
    let seeds = flag_u64(args, "--seeds", 100)?;
    let started = Instant::now();
    let mut last_print = Instant::now();
    let (mut ops_total, mut faults_total, mut steps_total) = (0u64, 0u64, 0u64);
    let mut pipelined = 0u64;
    let keep_going = args.iter().any(|a| a == "--keep-going");
    let mut failed = Vec::new();
    let mut coverage = store_sim::Coverage::default();
    for (n, seed) in (from..from.saturating_add(seeds)).enumerate() {
        let report = run_seed(seed, &options);
        ops_total += report.summary.ops;
        faults_total += report.summary.faults.total();
        steps_total += report.steps;
        pipelined += u64::from(report.summary.inflight > 1);
        coverage.add(&report);
        if !report.passed() {
            print_one(&report);
            println!(
                "FAILED at seed {seed} ({:.1} s into the run); replay: cargo run --release -p store-sim --bin simulate -- --seed {seed}{flags}",
                started.elapsed().as_secs_f64()
            );
            if !keep_going {
                return Ok(ExitCode::FAILURE);
            }
            failed.push(seed);
        }
        if last_print.elapsed() >= Duration::from_secs(10) || n as u64 + 1 == seeds {
            last_print = Instant::now();
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            println!(
                "{} seeds ({from}..={seed}, {} failed) in {:.0} s: {} operations, {} faults, {} sync points; {:.2} schedules/s, {:.0} operations/s; K > 1 in {pipelined} of {} seeds",
                n + 1,
                failed.len(),
                secs,
                ops_total,
                faults_total,
                steps_total,
                (n + 1) as f64 / secs,
                ops_total as f64 / secs,
                n + 1
            );
        }
    }
    println!("{coverage}");
    if !failed.is_empty() {
        println!("{} seeds failed: {failed:?}", failed.len());
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn replay_flags(options: &Options) -> String {
    let mut flags = String::new();
    if options.ops_per_client != Options::default().ops_per_client {
        flags.push_str(&format!(" --ops {}", options.ops_per_client));
    }
    if options.byte_values {
        flags.push_str(" --values");
    }
    if !options.faults {
        flags.push_str(" --no-faults");
    }
    if let Some(k) = options.inflight {
        flags.push_str(&format!(" --inflight {k}"));
    }
    if !options.nic_atomics {
        flags.push_str(" --cpu-atomics");
    }
    if !options.swarm {
        flags.push_str(" --no-swarm");
    }
    flags
}

fn print_one(report: &SeedReport) {
    println!(
        "seed {}: {:?}\n  {}\n  {} operations, faults {:?}\n  operations failed: {:?}\n  liveness: {:?}\n  leaves and blocks reclaimed: {:?}\n  named steps met: {:?}\n  stopped at named steps: {:?}\n  {} sync points ({} switches), {:?} virtual, {:?} wall, schedule digest {:016x}",
        report.seed,
        report.outcome,
        report.summary.shape,
        report.summary.ops,
        report.summary.faults,
        report.summary.errors,
        report.summary.liveness,
        report.summary.ledger,
        report.steps_met,
        report.paused_at,
        report.steps,
        report.switches,
        report.virtual_time,
        report.wall,
        report.trace
    );
}
