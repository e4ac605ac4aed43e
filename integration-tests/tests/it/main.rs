//! The whole store's scenarios as one test binary (one module per scenario file, the helpers
//! several of them share in `common`; the fixtures `store-sim` shares too are this crate's
//! library), so that the workspace links one binary for them instead of one per file. The loom
//! model (`tests/loom_retrain.rs`) stays a binary of its own: CI runs the `loom_*` targets under
//! `--cfg loom`.

mod common;

mod concurrency;
mod dead_compute_node;
mod evicted_views;
mod model_based_stores;
mod open_large;
mod orphans;
mod pipelined;
mod reclamation;
mod recovery;
mod replacement;
mod retraining;
mod torn_leaf_writes;
mod value_faults;
mod values;
mod write_faults;
