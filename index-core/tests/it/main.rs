//! The compute-node client's integration tests as one test binary (one module per scenario file,
//! what the model-based ones share in `common`), so that the workspace links one binary for them
//! instead of one per file. The loom models (`tests/loom_*.rs`, with their own helpers in
//! `tests/common/`) stay binaries of their own: CI runs the `loom_*` targets under `--cfg loom`.

mod common;

mod cache_budget;
mod model_based;
mod scenarios;
mod values;
