//! Helpers shared by the workspace's tests, examples and benchmarks — never by the library code.
//!
//! The crate has no workspace dependencies, so any crate of the workspace can take it as a
//! dev-dependency without a cycle, and by default no dependencies at all. Its one feature,
//! `quickcheck`, adds the `quickcheck` crate (and the `model_case` module) only for the test
//! crates that turn it on: the libraries and the `rolex` binary never build it.
//!
//! - [`XorShift64`]: the deterministic generator the tests and examples draw keys from, so a
//!   seed names the same key set everywhere.
//! - [`flag_u64`]: one numeric `--flag value` of an example's command line;
//!   [`print_json_or_fail`]: how a measuring example ends.
//! - [`median`]: the figure the measuring examples report over their runs.
//! - [`linearizability`]: a per-key linearizability checker for histories of key-value
//!   operations (failed operations may or may not have happened).
//! - `model_case` (feature `quickcheck`): the model-based tests' quickcheck case — an initial
//!   load, then a sequence of operations, shrunk by shortening the operations and keeping the
//!   load — with how a run's outcome is told to quickcheck and how a property is checked.

mod args;
pub mod linearizability;
#[cfg(feature = "quickcheck")]
pub mod model_case;
mod stats;
mod xorshift;

pub use args::{flag_u64, print_json_or_fail};
pub use stats::median;
pub use xorshift::XorShift64;
