//! Loom builds only: help for models whose broken variants must be caught.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `model` — a loom model of a deliberately broken protocol — and asserts that loom caught
/// it: the model must panic, and with a message containing `expected` (so a model that fails for
/// an unrelated reason, such as loom's own branch limit, does not count as caught).
///
/// # Panics
/// If the model passes, or fails with another message.
pub fn assert_caught(model: impl FnOnce(), expected: &str) {
    let payload =
        catch_unwind(AssertUnwindSafe(model)).expect_err("loom did not catch the broken variant");
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        message.contains(expected),
        "the broken variant failed, but not with {expected:?}: {message:?}"
    );
}
