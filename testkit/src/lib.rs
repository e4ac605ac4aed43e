//! Helpers shared by the workspace's tests, examples and benchmarks — never by the library code.
//!
//! By default the crate has no dependencies at all, so any crate of the workspace can take it as
//! a dev-dependency without a cycle. Its features add some only for the test crates that turn
//! them on (the libraries and the `rolex` binary never build them): `quickcheck` the
//! `quickcheck` crate and the `model_case` module, `pipelined` the `kv-session` crate and the
//! `pipelined` module.
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
//! - `pipelined` (feature `pipelined`): a pipelined session's random run as a history for the
//!   linearizability checker.

mod args;
pub mod linearizability;
#[cfg(feature = "quickcheck")]
pub mod model_case;
#[cfg(feature = "pipelined")]
pub mod pipelined;
mod stats;
mod xorshift;

pub use args::{flag_u64, print_json_or_fail};
pub use stats::median;
pub use xorshift::XorShift64;
