//! What the model-based modules (`model_based`, `values`) used to carry a copy of each: the
//! quickcheck case (an initial load, then a sequence of operations), its pool, the layout they
//! run on, the final `verify` of every memory node, and how a property is checked.

#![cfg(not(loom))]

use std::fmt::Debug;

use leaf_store::{BulkLoadConfig, required_pool_bytes, verify};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use rdma_transport::Transport;
use sim_transport::{SimConfig, SimTransport};

/// An operation of a model-based sequence, and how a [`Case`] of them is drawn.
pub trait CaseOp: Arbitrary + Debug {
    /// One key of the initial load, with whatever else it loads (its value's length, say).
    type Entry: Clone + Debug + Ord + Send + 'static;
    /// A case draws between 4 and `LOADS + 3` entries for its initial load (then keeps one per
    /// key).
    const LOADS: usize;
    /// A case holds between 1 and `OPS` operations.
    const OPS: usize;

    /// Draws one entry of the initial load.
    fn entry(g: &mut Gen) -> Self::Entry;

    /// The key of `entry`.
    fn key(entry: &Self::Entry) -> u64;
}

/// A model-based case: the entries bulk-loaded (sorted, one per key), then the operations run
/// against the oracle. Shrinking shortens the operations and keeps the load.
#[derive(Debug, Clone)]
pub struct Case<O: CaseOp> {
    /// What is bulk-loaded.
    pub initial: Vec<O::Entry>,
    /// What runs then, in order.
    pub ops: Vec<O>,
}

impl<O: CaseOp> Arbitrary for Case<O> {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut initial: Vec<O::Entry> = (0..usize::arbitrary(g) % O::LOADS + 4)
            .map(|_| O::entry(g))
            .collect();
        initial.sort_unstable();
        initial.dedup_by_key(|entry| O::key(entry));
        let ops = (0..usize::arbitrary(g) % O::OPS + 1)
            .map(|_| O::arbitrary(g))
            .collect();
        Case { initial, ops }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let initial = self.initial.clone();
        Box::new(self.ops.shrink().map(move |ops| Case {
            initial: initial.clone(),
            ops,
        }))
    }
}

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

/// A run's outcome as quickcheck takes it: its error is the failure's message.
pub fn outcome(run: Result<(), String>) -> TestResult {
    match run {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

/// Checks `prop` on `tests` cases, drawing at most four times as many.
pub fn check<O: CaseOp>(tests: u64, prop: fn(Case<O>) -> TestResult) {
    QuickCheck::new()
        .tests(tests)
        .max_tests(tests * 4)
        .quickcheck(prop);
}
