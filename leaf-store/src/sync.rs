//! The one place that chooses between std and loom primitives.

#[cfg(loom)]
pub(crate) use loom::thread::yield_now;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;
