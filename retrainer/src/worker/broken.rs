//! The broken variants of the memory node's retraining, compiled only into loom builds: each loom
//! model that guards an ordering claim of a retraining runs it as it is and as it must not be, and
//! must catch the second (ARCHITECTURE §7). Nothing here exists in any other build; with
//! [`Broken::default`] a loom build retrains exactly as every other build does.

use rdma_transport::Endpoint;

use super::Retrainer;

/// Which steps of a retraining run in their wrong variant (all right by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken {
    /// Whether changes made between the pre-built snapshot and the freeze are carried into the
    /// new record (wrong: off).
    pub carry_over: bool,
    /// Whether the old record is retired before the slot table names the new one (wrong: off,
    /// swap then retire).
    pub retire_first: bool,
    /// Whether the freeze takes every LT lock of the record (wrong: off, the header's locked flag
    /// alone, which writers do not read, so a write lands in a record being replaced).
    pub freeze_leaves: bool,
}

impl Default for Broken {
    fn default() -> Self {
        Self {
            carry_over: true,
            retire_first: true,
            freeze_leaves: true,
        }
    }
}

impl<E: Endpoint> Retrainer<E> {
    /// Runs the steps `broken` names in their wrong variant from now on.
    pub fn break_steps(&mut self, broken: Broken) {
        self.broken = broken;
    }
}
