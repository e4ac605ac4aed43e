//! The `rolex` command's integration tests as one test binary (one module per scenario file, the
//! helpers that run the binary in `common`), so that the workspace links one binary for them
//! instead of one per file. `verbs_cli` is compiled with the `verbs` feature only: CI runs it as
//! `cargo test -p rolex-cli --features verbs --test it verbs_cli::`.

mod common;

mod attached;
mod compare;
mod harness;
mod input_checks;
mod interrupt;
mod load_phase;
mod multiprocess;
mod open_loop;
mod values;
mod verbs_cli;
mod workloads;
