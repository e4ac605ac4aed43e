//! Ctrl-C during `rolex bench` and `rolex compare`: the first SIGINT stops the run at its next
//! sample (every 5 ms), and the command writes what was measured, marked as interrupted, then
//! exits with code 130; a second SIGINT exits at once, with code 130.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{CliError, INTERRUPTED, failed};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Catches SIGINT from now on: the first sets the flag [`interrupted`] reads, the second ends
/// the process at once with [`INTERRUPTED`].
pub fn install() -> Result<(), CliError> {
    if FLAG.get().is_some() {
        return Ok(());
    }
    let flag = Arc::new(AtomicBool::new(false));
    let signal = signal_hook::consts::SIGINT;
    // In this order: a SIGINT that finds the flag set (the second) exits; the first sets it.
    signal_hook::flag::register_conditional_shutdown(
        signal,
        i32::from(INTERRUPTED),
        Arc::clone(&flag),
    )
    .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&flag)))
    .map_err(|e| failed!("catching Ctrl-C: {e}"))?;
    let _ = FLAG.set(flag);
    Ok(())
}

/// Whether a SIGINT has come since [`install`] (false where it was not installed).
pub fn interrupted() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Acquire))
}
