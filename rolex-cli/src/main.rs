//! The `rolex` command: parses the command line and dispatches to one file per command.
//!
//! * `rolex bench` (`bench.rs`) — a workload (YCSB A–F, insert-only, 50/50 writes) over an
//!   embedded memory node (pool, bulk load, retrainer thread) or, with `--attach`, a pool file
//!   served by `rolex memnode`.
//! * `rolex memnode` (`memnode.rs`) — creates and bulk-loads a shared pool file, runs the
//!   retrainer, prints status until stopped; `--resume` serves an existing pool file again.
//! * `rolex inspect` (`inspect.rs`) — superblock, model and leaf statistics, the verify report.
//! * `rolex suite` (`suite.rs`) — YCSB A–F, uniform and zipfian, as one table.
//! * `rolex compare` (`compare/`) — ROLEX against the baselines (the B+-tree, the CHIME-style
//!   index).
//! * `rolex inflight` (`inflight.rs`) — throughput against the operations in flight per thread.
//!
//! Bad input gets one line on stderr and exit code 2.

mod bench;
mod checks;
mod compare;
mod error;
mod index;
mod inflight;
mod inspect;
mod interrupt;
mod keys;
mod memnode;
mod pools;
mod report;
mod spread;
mod suite;
mod svg;
mod verdict;
mod workload;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "rolex",
    version,
    arg_required_else_help = true,
    about = "ROLEX: a learned, ordered key-value store for disaggregated memory"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workload and report throughput, latency, round trips, bytes and cache size.
    #[command(after_help = format!("{BENCH_AFTER_HELP}{VERIFY_RULE}"))]
    Bench(Box<bench::BenchArgs>),
    /// Create and bulk-load a shared pool file, run its retrainer, print status until stopped.
    Memnode(memnode::MemnodeArgs),
    /// Print a pool's superblock, statistics and verify report.
    #[command(after_help = format!("{INSPECT_AFTER_HELP}{VERIFY_RULE}"))]
    Inspect(inspect::InspectArgs),
    /// Run YCSB A–F under uniform and zipfian requests (embedded memory node, fresh pool each) and
    /// print a results table, measured and modeled columns apart.
    Suite(suite::SuiteArgs),
    /// ROLEX against the baselines (`--index`: the B+-tree, the CHIME-style index) on the same
    /// transport, keys and operation streams: YCSB A–F and a write-ratio sweep, uniform and
    /// zipfian; a table of ratios over each baseline, JSON, SVG plots.
    Compare(compare::CompareArgs),
    /// Throughput against the operations each thread keeps in flight, ROLEX and both baselines:
    /// measured in the simulator's latency mode and modeled; a table, JSON and an SVG plot.
    Inflight(inflight::InflightArgs),
}

/// How `verify` treats a pool that others may be writing (`verdict.rs`), for the help.
const VERIFY_RULE: &str = "Verify: a walk of the pool that finds problems is made again, up to 4 walks 50 ms apart \
(other processes may be writing an attached pool, and its memnode retraining it: their work in \
flight looks like problems). A clean walk makes the pool clean. Problems count only when every \
walk finds them, the same in the same place, and nothing else changed the pool meanwhile (no \
other compute process renewed its lease, nothing was retrained, allocated or recovered); \
otherwise the verify is inconclusive. Verify a pool nothing writes to be sure.";

/// `rolex bench --help`'s last words: the exit codes and the verify rule.
const BENCH_AFTER_HELP: &str = "Exit codes: 0 the run finished and verify found the pool clean; \
1 the run failed (an index or transport error, inserted keys missing, or verify problems); \
2 bad input, nothing ran (an --attach pool no `rolex memnode` serves is refused unless \
--allow-unserved; whether one serves is asked at once, with no wait); 3 the run finished and \
its report was written, but verify was inconclusive (the pool changed while it was read); \
130 Ctrl-C.\n\n";

/// `rolex inspect --help`'s last words.
const INSPECT_AFTER_HELP: &str = "Exit codes: 0 verify clean and no lock held by a non-member; \
1 verify problems or such a lock; 2 bad input (not a pool); 3 verify inconclusive (the pool \
changed while it was read).\n\n";

/// The command line's parser. Every flag that takes a number also takes a value beginning with
/// `-` (`-5`, `-5s`, `-1MiB`): its own check then says what the flag needs ("needs a whole
/// number ≥ 1, not -5"), where clap would take the value for an unknown flag. No numeric flag
/// takes a negative value.
fn command() -> clap::Command {
    use clap::CommandFactory;
    use std::any::TypeId;
    let numeric = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u64>(),
        TypeId::of::<f64>(),
        TypeId::of::<checks::Warmup>(),
        TypeId::of::<checks::ValueSize>(),
        TypeId::of::<checks::CacheBudget>(),
    ];
    Cli::command().mut_subcommands(|sub| {
        sub.mut_args(|arg| {
            let id = arg.get_value_parser().type_id();
            if numeric.iter().any(|t| id == *t) {
                arg.allow_hyphen_values(true)
            } else {
                arg
            }
        })
    })
}

/// The subcommand named on the command line, if any (for pointing at its help).
fn subcommand() -> Option<String> {
    let names: Vec<String> = command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    std::env::args().skip(1).find(|a| names.contains(a))
}

/// Clap's message on one line: what is wrong, the arguments it names, its possible values and
/// its tips, without the usage block; then where the help is.
fn one_line(text: &str, subcommand: Option<String>) -> String {
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .map(|l| l.trim_start_matches("error: "))
        .collect();
    let message = if parts.is_empty() {
        "invalid arguments".to_string()
    } else {
        parts.join("; ").replace(":;", ":")
    };
    let help = match subcommand {
        Some(name) => format!("rolex {name} --help"),
        None => "rolex --help".into(),
    };
    format!("{message} (see {help})")
}

fn main() -> ExitCode {
    use clap::FromArgMatches;
    quiet_on_a_closed_pipe();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 3 && args[1] == "help" && (args[2] == "--help" || args[2] == "-h") {
        // `rolex help --help`: the help, as `rolex --help` gives it.
        let _ = command().print_long_help();
        return ExitCode::SUCCESS;
    }
    let parsed = command()
        .try_get_matches_from(args)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let cli = match parsed {
        Ok((mut cli, matches)) => {
            // Which bench counts were typed (they win over a workload file's).
            if let (Command::Bench(args), Some(m)) =
                (&mut cli.command, matches.subcommand_matches("bench"))
            {
                let typed =
                    |id: &str| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
                args.keys_given = typed("keys");
                args.ops_given = typed("ops");
                args.typed = m
                    .ids()
                    .map(|id| id.as_str().to_string())
                    .filter(|id| typed(id))
                    .collect();
            }
            cli
        }
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `rolex` alone: what there is to run, on standard error (nothing ran).
            eprint!("{}", command().render_help());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("rolex: {}", one_line(&e.to_string(), subcommand()));
            return ExitCode::from(2);
        }
    };
    let outcome = match &cli.command {
        Command::Bench(args) => bench::command(args).map(|()| true),
        Command::Memnode(args) => memnode::run(args).map(|()| true),
        Command::Inspect(args) => inspect::run(args),
        Command::Suite(args) => suite::run(args).map(|()| true),
        Command::Inflight(args) => inflight::run(args).map(|()| true),
        Command::Compare(args) => suite::BenchDefaults::try_parse_from(["rolex"])
            .map_err(error::CliError::from)
            .and_then(|d| compare::run(args, d.args))
            .map(|()| true),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rolex: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A reader that goes away (`rolex compare | head`) ends the process as it ends other Unix tools,
/// by SIGPIPE's default action, silently: Rust ignores SIGPIPE, so the next write to stdout
/// fails, and `println!` panics with a backtrace.
fn quiet_on_a_closed_pipe() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler of ours (no code runs in the signal's
    // context), and it is called first thing in `main`, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
