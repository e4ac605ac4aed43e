//! The virtual durations a run is built on: the world paces its compute and memory nodes by them,
//! and the liveness oracle measures waits against them.

use std::time::Duration;

/// The memory node's lease time (virtual).
pub const LEASE: Duration = Duration::from_millis(4);
/// How often compute nodes renew (virtual).
pub(crate) const RENEWAL: Duration = Duration::from_micros(500);
/// How long the end waits for the memory node to recover every member (virtual).
pub(crate) const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
