//! What the model-based modules (`model_based`, `values`) used to carry a copy of each: the
//! quickcheck case (an initial load, then a sequence of operations) and how a property is checked,
//! from `testkit::model_case` (shared with the other crates' model-based tests); and, needing
//! this crate's store, the case's pool, the layout they run on and the final `verify` of every
//! memory node.

#![cfg(not(loom))]

use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};
pub use testkit::model_case::{Case, CaseOp, check, outcome};

/// Leaves of four entries bulk-loaded with three, two leaves a slot: splits, synonym chains and
/// unlinks happen constantly.
pub fn tiny() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        ..BulkLoadConfig::default()
    }
}

/// `nodes` simulated memory nodes in the harshest mode, each with twice the room `case`'s load
/// under `load` takes with four spare leaves per operation (and 64 more).
///
/// # Errors
/// If the simulator cannot make the pools.
pub fn pool<O: CaseOp>(
    case: &Case<O>,
    load: &BulkLoadConfig,
    nodes: usize,
) -> Result<SimTransport, String> {
    let size = required_pool_bytes(
        case.initial.len() as u64,
        load,
        4 * case.ops.len() as u64 + 64,
    )
    .next_multiple_of(8)
        * 2;
    SimTransport::anonymous_with(&vec![size; nodes], SimConfig::harsh()).map_err(|e| e.to_string())
}

/// Whether `verify` finds every memory node of `transport` clean: if not, the first that is not
/// and its report.
///
/// # Errors
/// A memory node's problems, or why it could not be verified.
pub fn verify_all(transport: &SimTransport) -> Result<(), String> {
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    for &node in transport.memory_nodes() {
        let report = verify(&mut ep, node).map_err(|e| e.to_string())?;
        if !report.is_clean() {
            return Err(format!("verify on node {}: {report}", node.id));
        }
    }
    Ok(())
}
