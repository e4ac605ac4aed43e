//! How the next thread is chosen at a sync point: a uniform random walk, or PCT.
//!
//! PCT (Burckhardt et al., "A Randomized Scheduler with Probabilistic Guarantees of Finding
//! Bugs", ASPLOS 2010) gives every thread a random priority and always runs the runnable thread
//! of highest priority; at `depth - 1` steps drawn in advance it drops the running thread's
//! priority below every other. A bug that needs `d` ordering constraints between `n` threads
//! within `k` steps is found with probability at least `1 / (n k^(d-1))` per run. A thread that
//! yields (it spins, waiting for another) is dropped the same way, so a spinning thread of high
//! priority cannot starve the one it waits for.

/// How the next thread is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly among the runnable threads (a yielding one only if it is alone).
    Random,
    /// PCT with `depth` (at least 1) and change points drawn among the first `steps` steps.
    Pct {
        /// The bug depth PCT targets: `depth - 1` priority change points.
        depth: u32,
        /// The steps a run is expected to take (where change points fall).
        steps: u64,
    },
}

/// Marsaglia's xorshift64: the run's only source of randomness.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // Mix the seed so that neighbouring seeds start far apart; never the zero state.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A choice: the thread to run, and a thread whose priority must drop first (PCT).
#[derive(Debug)]
pub(crate) struct Choice {
    pub(crate) task: usize,
    pub(crate) lower: Option<usize>,
}

/// A strategy with its state in a run.
#[derive(Debug)]
pub(crate) enum StrategyState {
    Random,
    Pct {
        /// Steps at which the running thread's priority drops, ascending.
        change_points: Vec<u64>,
        /// The next priority handed out by a drop (below every initial one, decreasing).
        next_low: u64,
    },
}

/// Initial priorities are at least this; dropped ones below it.
const HIGH: u64 = 1 << 32;

impl StrategyState {
    pub(crate) fn new(strategy: &Strategy, rng: &mut Rng) -> Self {
        match *strategy {
            Strategy::Random => Self::Random,
            Strategy::Pct { depth, steps } => {
                let mut change_points: Vec<u64> = (1..depth.max(1))
                    .map(|_| 1 + rng.below(steps.max(1)))
                    .collect();
                change_points.sort_unstable();
                Self::Pct {
                    change_points,
                    next_low: HIGH - 1,
                }
            }
        }
    }

    pub(crate) fn initial_priority(&self, rng: &mut Rng) -> u64 {
        HIGH + (rng.next_u64() >> 1)
    }

    /// A priority below every one handed out so far.
    pub(crate) fn lowest(&mut self) -> u64 {
        match self {
            Self::Random => 0,
            Self::Pct { next_low, .. } => {
                *next_low = next_low.saturating_sub(1);
                *next_low
            }
        }
    }

    /// Chooses among `runnable` (not empty; `priorities` aligned with it) at step `step`.
    /// `yielded` asked to let the others go first; `running` held the baton.
    pub(crate) fn choose(
        &mut self,
        rng: &mut Rng,
        step: u64,
        runnable: &[usize],
        priorities: &[u64],
        yielded: Option<usize>,
        running: usize,
    ) -> Choice {
        match self {
            Self::Random => {
                let others: Vec<usize> = runnable
                    .iter()
                    .copied()
                    .filter(|&t| Some(t) != yielded)
                    .collect();
                let pool = if others.is_empty() {
                    runnable
                } else {
                    &others[..]
                };
                Choice {
                    task: pool[rng.below(pool.len() as u64) as usize],
                    lower: None,
                }
            }
            Self::Pct { change_points, .. } => {
                let mut lower = yielded;
                if change_points.first() == Some(&step) {
                    change_points.remove(0);
                    lower = lower.or(Some(running));
                }
                // The dropped thread's new priority is the lowest of all.
                let mut best: Option<(u64, usize)> = None;
                for (&task, &priority) in runnable.iter().zip(priorities) {
                    let priority = if Some(task) == lower { 0 } else { priority };
                    if best.is_none_or(|(p, _)| priority > p) {
                        best = Some((priority, task));
                    }
                }
                Choice {
                    task: best.map_or(runnable[0], |(_, t)| t),
                    lower,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pct_runs_the_highest_priority_and_drops_a_yielder() {
        let mut rng = Rng::new(3);
        let mut s = StrategyState::new(
            &Strategy::Pct {
                depth: 1,
                steps: 10,
            },
            &mut rng,
        );
        let c = s.choose(
            &mut rng,
            1,
            &[0, 1, 2],
            &[HIGH + 5, HIGH + 9, HIGH + 1],
            None,
            0,
        );
        assert_eq!(c.task, 1);
        assert!(c.lower.is_none());
        let c = s.choose(
            &mut rng,
            2,
            &[0, 1, 2],
            &[HIGH + 5, HIGH + 9, HIGH + 1],
            Some(1),
            1,
        );
        assert_eq!((c.task, c.lower), (0, Some(1)));
    }

    #[test]
    fn random_never_picks_a_yielder_that_is_not_alone() {
        let mut rng = Rng::new(5);
        let mut s = StrategyState::Random;
        for step in 0..200 {
            let c = s.choose(&mut rng, step, &[0, 1], &[0, 0], Some(0), 0);
            assert_eq!(c.task, 1);
        }
        assert_eq!(s.choose(&mut rng, 0, &[0], &[0], Some(0), 0).task, 0);
    }
}
