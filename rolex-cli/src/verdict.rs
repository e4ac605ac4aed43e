//! `verify` on a pool that other processes may be writing: walked again until a walk is clean,
//! or the problems it finds can be told apart from others' work in flight.
//!
//! `leaf_store::verify` is meant for a quiescent pool. An attached run's pool may not be: other
//! compute processes may still write it (their locks are held for a moment, their leaves half
//! written when read), and its memnode's retrainer retrains slots (a slot's leaves frozen, a
//! record replaced) and recovers dead members. So a walk that finds problems is made again, up
//! to [`WALKS`] walks [`PAUSE`] apart, and after each walk the words others' work changes are
//! read ([`Activity`]: the leaf allocator, the retraining ring, the slot table, the epoch, every
//! other member's lease). Then:
//! * a walk that finds nothing: **clean** (a consistent state was seen);
//! * every walk found the same problems (same kind, same place, same details) and nothing else
//!   changed the pool meanwhile: **problems** (exit code 1);
//! * otherwise — problems that moved from walk to walk, or others at work in the pool while it
//!   was read (a member renewing its lease, the ring or the slot table moving, a retraining or a
//!   recovery under way on a served pool) — **inconclusive**: the pool changed while it was read,
//!   and nothing could be verified (exit code [`INCONCLUSIVE`]).
//!
//! A pool nobody writes gives the same problems at every walk and no activity, so a quiescent
//! pool's verdict is never inconclusive.

use std::fmt::Display;
use std::time::Duration;

use leaf_store::members::{MemberState, MemberTable};
use leaf_store::{Layout, LeafStoreError, RingLayout};
use rdma_transport::{Endpoint, MemoryNodeInfo};

/// Walks at most, the first included.
pub const WALKS: usize = 4;
/// The pause between two walks.
pub const PAUSE: Duration = Duration::from_millis(50);
/// The exit code of a run whose verify was inconclusive (the run itself succeeded).
pub const INCONCLUSIVE: u8 = 3;
/// Problems listed in a verdict at most (the count says how many there were).
const LISTED: usize = 20;

/// What the walks of one or more memory nodes found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Verdict {
    /// A walk found nothing wrong.
    #[default]
    Clean,
    /// These problems (described; at most [`LISTED`] of `count`) were found by every walk, and
    /// nothing else changed the pool meanwhile.
    Problems {
        /// How many.
        count: usize,
        /// The first of them, described.
        listed: Vec<String>,
    },
    /// Every walk found problems, but the pool changed while it was read: `lasting` of them
    /// were found by every walk (0: none).
    Inconclusive {
        /// Problems every walk found.
        lasting: usize,
    },
}

impl Verdict {
    /// `clean`, `problems` or `inconclusive` (the report's `verify`).
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Problems { .. } => "problems",
            Verdict::Inconclusive { .. } => "inconclusive",
        }
    }

    /// The verdict of several memory nodes: problems on any, else inconclusive on any, else clean.
    pub fn and(self, other: Verdict) -> Verdict {
        match (self, other) {
            (
                Verdict::Problems { count, mut listed },
                Verdict::Problems {
                    count: more,
                    listed: also,
                },
            ) => {
                listed.extend(also);
                listed.truncate(LISTED);
                Verdict::Problems {
                    count: count + more,
                    listed,
                }
            }
            (p @ Verdict::Problems { .. }, _) | (_, p @ Verdict::Problems { .. }) => p,
            (Verdict::Inconclusive { lasting: a }, Verdict::Inconclusive { lasting: b }) => {
                Verdict::Inconclusive { lasting: a + b }
            }
            (i @ Verdict::Inconclusive { .. }, _) | (_, i @ Verdict::Inconclusive { .. }) => i,
            (Verdict::Clean, Verdict::Clean) => Verdict::Clean,
        }
    }
}

/// What others' work in a pool changes, read after a walk: two walks with different words had
/// someone at work between them; `busy`, someone is at work now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Activity {
    /// Words of the pool that writers, the retrainer and recoveries change.
    pub words: Vec<u64>,
    /// A retraining or a dead member's recovery is under way on a pool a memnode serves.
    pub busy: bool,
}

/// One walk: its report, the problems it found, and the pool's activity after it.
#[derive(Debug)]
pub struct Walk<R, P> {
    /// What the walk returned (its figures: keys, leaves, …).
    pub report: R,
    /// The problems it found.
    pub problems: Vec<P>,
    /// See [`Activity`].
    pub activity: Activity,
}

/// One memory node's walks: the last walk's report, the verdict, and how many walks it took.
#[derive(Debug)]
pub struct Walked<R, P> {
    /// What the last walk returned.
    pub last: R,
    /// See [`Verdict`].
    pub verdict: Verdict,
    /// Walks made (1 for a clean first walk).
    pub walks: usize,
    /// The problems every walk found (empty for a clean verdict).
    pub lasting: Vec<P>,
}

/// Walks with `walk` until a walk is clean or [`WALKS`] walks were made, `pause` apart, and
/// gives the verdict (see the module's documentation).
pub fn settle<R, P: PartialEq + Display, E>(
    pause: Duration,
    mut walk: impl FnMut() -> Result<Walk<R, P>, E>,
) -> Result<Walked<R, P>, E> {
    let first = walk()?;
    let mut walks = 1;
    let mut clean = first.problems.is_empty();
    let mut moved = first.activity.busy;
    let mut lasting = first.problems;
    let mut words = first.activity.words;
    let mut last = first.report;
    while !clean && walks < WALKS {
        std::thread::sleep(pause);
        let next = walk()?;
        walks += 1;
        clean = next.problems.is_empty();
        moved |= next.activity.busy || next.activity.words != words;
        lasting.retain(|p| next.problems.contains(p));
        words = next.activity.words;
        last = next.report;
    }
    if clean {
        lasting.clear();
    }
    let verdict = if clean {
        Verdict::Clean
    } else if moved || lasting.is_empty() {
        Verdict::Inconclusive {
            lasting: lasting.len(),
        }
    } else {
        Verdict::Problems {
            count: lasting.len(),
            listed: lasting
                .iter()
                .take(LISTED)
                .map(ToString::to_string)
                .collect(),
        }
    };
    Ok(Walked {
        last,
        verdict,
        walks,
        lasting,
    })
}

/// The words of the pool on `node` that others' work changes (see [`Activity`]), but for the
/// lease of member `own` (the caller's own, renewed meanwhile). `served`: a memnode serves the
/// pool, so a retraining in flight or a dead member is its work under way, not something left
/// behind.
pub fn activity<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    own: Option<u8>,
    served: bool,
) -> Result<Activity, LeafStoreError> {
    let layout = Layout::attach(ep, node)?;
    let ring = RingLayout::new(layout);
    let members = MemberTable::new(&layout);
    let in_flight = ep.read_word(ring.in_flight())?;
    let mut words = vec![
        ep.read_word(layout.alloc_num_addr())?,
        ep.read_word(layout.model_region_addr())?,
        ep.read_word(ring.head())?,
        ep.read_word(ring.tail())?,
        in_flight,
        ep.read_word(ring.split_slot())?,
    ];
    match leaf_store::read_slot_table(ep, &layout) {
        Ok(table) => words.extend(table.iter().flat_map(|&(at, key)| [at.pack(), key])),
        Err(LeafStoreError::Transport(e)) => return Err(e.into()),
        // A slot count out of range: verify reports it; here it is a word like any other.
        Err(_) => words.push(u64::MAX),
    }
    let mut busy = served && in_flight != 0;
    // Word 0 is the retirement epoch; the others are the members' leases.
    for (tag, lease) in members.read_leases(ep)?.into_iter().enumerate() {
        if tag > 0 && own == u8::try_from(tag).ok() {
            continue;
        }
        busy |= served && tag > 0 && lease.state() == MemberState::Dead;
        words.push(lease.raw());
    }
    Ok(Activity { words, busy })
}

/// A ROLEX pool's verify walks as [`settle`] makes them (`own` and `served` as [`activity`]
/// takes them).
pub fn verify_pool<E: Endpoint>(
    ep: &mut E,
    node: MemoryNodeInfo,
    own: Option<u8>,
    served: bool,
) -> Result<Walked<leaf_store::VerifyReport, leaf_store::Problem>, LeafStoreError> {
    settle(PAUSE, || {
        let report = leaf_store::verify(ep, node)?;
        let activity = activity(ep, node, own, served)?;
        Ok(Walk {
            problems: report.problems.clone(),
            report,
            activity,
        })
    })
}

/// The verdict in one line, for the bench's report and `rolex inspect`.
pub fn line(verdict: &Verdict, walks: usize) -> String {
    match verdict {
        Verdict::Clean if walks <= 1 => "verify: clean".into(),
        Verdict::Clean => format!(
            "verify: clean (at walk {walks}; the walks before found problems that went away: the pool was being written)"
        ),
        Verdict::Problems { count, listed } => {
            let more = count.saturating_sub(listed.len());
            format!(
                "verify: PROBLEMS, {count} found by every one of {walks} walks of a pool nothing else changed meanwhile: {}{} (run `rolex inspect`)",
                listed.join("; "),
                if more > 0 {
                    format!("; … and {more} more")
                } else {
                    String::new()
                }
            )
        }
        Verdict::Inconclusive { lasting } => format!(
            "verify: INCONCLUSIVE, the pool changed while it was read (other processes write it, or its memnode retrains or recovers): each of {walks} walks found problems, {}; verify it again when nothing writes it",
            match lasting {
                0 => "none of them in every walk".to_string(),
                n => format!("{n} of them in every walk"),
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks that return these problem sets and activity words, one per walk, then clean ones.
    fn walks(sets: &[(&[u32], u64)]) -> Walked<usize, u32> {
        let mut n = 0;
        settle(Duration::ZERO, || -> Result<Walk<usize, u32>, ()> {
            n += 1;
            let (problems, word) = sets
                .get(n - 1)
                .map_or((Vec::new(), 0), |s| (s.0.to_vec(), s.1));
            Ok(Walk {
                report: n,
                problems,
                activity: Activity {
                    words: vec![word],
                    busy: false,
                },
            })
        })
        .unwrap_or_else(|()| unreachable!())
    }

    #[test]
    fn a_clean_first_walk_is_clean_at_once() {
        let w = walks(&[]);
        assert_eq!((w.verdict, w.walks, w.last), (Verdict::Clean, 1, 1));
    }

    #[test]
    fn problems_that_go_away_leave_a_clean_pool() {
        let w = walks(&[(&[1, 2], 0), (&[3], 1)]);
        assert_eq!((w.verdict, w.walks, w.last), (Verdict::Clean, 3, 3));
    }

    #[test]
    fn problems_in_the_same_place_every_walk_of_a_still_pool_are_problems() {
        let w = walks(&[(&[1, 2], 5), (&[2, 1], 5), (&[1, 2], 5), (&[2, 1], 5)]);
        assert_eq!(w.walks, WALKS);
        assert_eq!(
            w.verdict,
            Verdict::Problems {
                count: 2,
                listed: vec!["1".into(), "2".into()]
            }
        );
        assert_eq!(w.lasting, vec![1, 2]);
    }

    #[test]
    fn problems_that_move_or_a_pool_that_changes_are_inconclusive() {
        let w = walks(&[(&[1], 0), (&[2], 0), (&[3], 0), (&[4], 0)]);
        assert_eq!(
            (w.verdict, w.walks),
            (Verdict::Inconclusive { lasting: 0 }, WALKS)
        );
        // The same problem every walk, but someone at work in the pool meanwhile.
        let w = walks(&[(&[1], 0), (&[1], 0), (&[1], 1), (&[1], 1)]);
        assert_eq!(w.verdict, Verdict::Inconclusive { lasting: 1 });
        // Problems that stopped lasting, then a clean walk: clean.
        let w = walks(&[(&[1], 0), (&[2], 0), (&[], 0)]);
        assert_eq!((w.verdict, w.walks), (Verdict::Clean, 3));
    }

    #[test]
    fn work_under_way_makes_lasting_problems_inconclusive() {
        let mut n = 0;
        let w = settle(Duration::ZERO, || -> Result<Walk<(), u32>, ()> {
            n += 1;
            Ok(Walk {
                report: (),
                problems: vec![7],
                activity: Activity {
                    words: vec![1],
                    busy: n == 2,
                },
            })
        })
        .unwrap_or_else(|()| unreachable!());
        assert_eq!(w.verdict, Verdict::Inconclusive { lasting: 1 });
    }

    #[test]
    fn memory_nodes_combine_problems_first() {
        let p = |n: usize| Verdict::Problems {
            count: n,
            listed: vec!["x".into(); n],
        };
        let i = |n: usize| Verdict::Inconclusive { lasting: n };
        assert_eq!(Verdict::Clean.and(i(0)), i(0));
        assert_eq!(i(1).and(i(2)), i(3));
        assert_eq!(i(0).and(p(1)), p(1));
        assert_eq!(p(1).and(p(2)), p(3));
        assert_eq!(Verdict::Clean.and(Verdict::Clean), Verdict::Clean);
    }
}
