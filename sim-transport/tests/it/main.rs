//! The simulator's integration tests as one test binary (one module per scenario file), so that
//! the workspace links one binary for them instead of one per file. The loom model
//! (`tests/loom_lock.rs`) stays a binary of its own: CI runs the `loom_*` targets under
//! `--cfg loom`.

mod conformance;
mod cross_process;
mod posted;
