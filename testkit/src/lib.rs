//! Helpers shared by the workspace's tests, examples and benchmarks — never by the library code.
//!
//! The crate has no dependencies, so any crate of the workspace can take it as a
//! dev-dependency without a cycle.
//!
//! - [`XorShift64`]: the deterministic generator the tests and examples draw keys from, so a
//!   seed names the same key set everywhere.
//! - [`flag_u64`]: one numeric `--flag value` of an example's command line;
//!   [`print_json_or_fail`]: how a measuring example ends.
//! - [`median`]: the figure the measuring examples report over their runs.
//! - [`linearizability`]: a per-key linearizability checker for histories of key-value
//!   operations (failed operations may or may not have happened).

mod args;
pub mod linearizability;
mod stats;
mod xorshift;

pub use args::{flag_u64, print_json_or_fail};
pub use stats::median;
pub use xorshift::XorShift64;
