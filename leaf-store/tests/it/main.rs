//! The remote memory layout's integration tests as one test binary (one module per scenario
//! file), so that the workspace links one binary for them instead of one per file. The loom model
//! (`tests/loom_leaf.rs`) stays a binary of its own: CI runs the `loom_*` targets under
//! `--cfg loom`.

mod bulk_load;
mod redo_repair;
mod values;
mod verify_and_verbs;
