//! What a run's latencies are kept in: a histogram per operation type, in nanoseconds, the types
//! named and ordered once here for every per-type array of a run.

use hdrhistogram::Histogram;

use crate::error::CliError;

/// The operation types, in the order of the per-thread arrays.
pub(crate) const OP_NAMES: [&str; 6] = ["read", "update", "insert", "scan", "rmw", "delete"];

/// The highest latency recorded, in nanoseconds (a minute).
pub(crate) const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// A histogram of latencies in nanoseconds (three significant digits).
pub(crate) fn latency_histogram() -> Result<Histogram<u64>, CliError> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).map_err(CliError::from)
}
