//! Helpers that several of this binary's modules used to carry a copy of each.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::StoreConfig;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimEndpoint, SimTransport};

/// A store that renews its lease every millisecond, otherwise configured by default.
pub fn config() -> StoreConfig {
    StoreConfig {
        lease_renewal: Duration::from_millis(1),
        ..StoreConfig::default()
    }
}

/// The memory node's lease watcher with a lease of 30 s (no member of a test expires), driven
/// by the test.
pub fn watcher(transport: &SimTransport) -> Retrainer<SimEndpoint> {
    integration_tests::lease_watcher(transport, Duration::from_secs(30))
}

/// The default retraining configuration without the idle sweep, which would repair some of what
/// a test sets up on its own: a test shows the repair or retraining that does not depend on it.
pub fn no_sweep() -> RetrainConfig {
    RetrainConfig {
        idle_sweep_threshold: 0,
        ..RetrainConfig::default()
    }
}
