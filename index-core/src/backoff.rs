//! Bounded exponential backoff: [`Backoff::wait`] (spins, yields, then sleeps, up to a
//! deadline) for a wait on another party's step; [`Backoff::pause_awake`] (spins, then yields,
//! never a sleep) for a read's retries of data changing under it.

use crate::sync::time::{Duration, Instant};

/// Exponential backoff that gives up after a deadline: spins first, then yields, then sleeps.
#[derive(Debug)]
pub(crate) struct Backoff {
    step: u32,
    deadline: Instant,
}

impl Backoff {
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            step: 0,
            deadline: Instant::now() + limit,
        }
    }

    /// Whether the deadline has passed.
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// A pause of a read waiting for data to stop changing: spins, then yields, never a sleep
    /// (a read waits for nobody's step: a writer whose WRITE is landing, descheduled maybe, gets
    /// the processor; and a read that slept while writers went on would find the next change).
    pub(crate) fn pause_awake(&mut self) {
        awake(self.step);
        self.step = (self.step + 1).min(SPINS);
    }

    /// Waits a little longer than last time; false once the deadline has passed.
    pub(crate) fn wait(&mut self) -> bool {
        if Instant::now() >= self.deadline {
            return false;
        }
        if cfg!(loom) || self.step < 2 * SPINS {
            awake(self.step);
        } else {
            let longer = (self.step - 2 * SPINS).min(6);
            crate::sync::thread::sleep(Duration::from_micros(50 << longer));
        }
        self.step += 1;
        true
    }
}

/// Steps that spin (doubling) before a backoff yields.
const SPINS: u32 = 6;

/// The pause of step `step` short of a sleep: a spin of 2^`step` hints for the first [`SPINS`]
/// steps, then a yield (under loom always a yield: a loom thread that spins keeps the one it
/// waits for from running).
fn awake(step: u32) {
    if cfg!(loom) || step >= SPINS {
        crate::sync::thread::yield_now();
    } else {
        for _ in 0..(1u32 << step) {
            std::hint::spin_loop();
        }
    }
}
