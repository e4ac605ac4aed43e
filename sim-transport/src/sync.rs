//! The one place that chooses between std and loom primitives.
//!
//! Built with `RUSTFLAGS="--cfg loom"`, simulated remote memory is made of loom atomics, so loom
//! explores every interleaving of the protocols running over the simulator. Everything else in
//! the crate names these re-exports, never `std::sync::atomic` or `loom` directly.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::thread::yield_now;

pub(crate) use std::sync::atomic::Ordering;

/// A sequentially consistent fence between a verb and the next. A no-op under loom, whose model
/// makes every word access a read-modify-write (see `pool.rs`), which already orders them.
#[inline]
pub(crate) fn fence_seq_cst() {
    #[cfg(not(loom))]
    std::sync::atomic::fence(Ordering::SeqCst);
}
