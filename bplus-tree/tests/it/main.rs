//! The B+-tree's integration tests as one test binary (one module per scenario file, the helpers
//! they share in `common`), so that the workspace links one binary for them instead of one per
//! file. The loom model (`tests/loom_split.rs`) stays a binary of its own: CI runs the `loom_*`
//! targets under `--cfg loom`.

mod common;

mod handover;
mod hopscotch;
mod model;
mod pipelined;
mod roots;
mod stress;
mod values;
mod verify;
