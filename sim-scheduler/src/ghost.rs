//! Ghost state: what the system under test tells a run about the things it holds, so that the
//! simulation checks an invariant where it holds rather than only through the answers.
//!
//! The code under test calls these at the places its protocol moves a resource; outside a run
//! every call does nothing (one thread-local read), and none is a sync point, so adding them
//! changes no seed's schedule.
//!
//! - **Holds.** A thread [`take`]s a value of a kind when it holds it where no shared place names
//!   it (a leaf it allocated), [`put`]s it when it places it where others find it (linked,
//!   parked, a lock released as the memory showed it held), [`hand`]s it to another thread of
//!   its process (which [`receive`]s it), and [`forget`]s it when it lets go of it for a sweep
//!   to find. Two threads may hold one value at once only if the first lost it to a fault (it
//!   died or was fenced) before the second took it: the first then never puts it. A thread that
//!   puts a value another took while it held it is a *conflict* (a leaf handed out twice, a lock
//!   with two holders).
//! - **Reclaims.** A sweep that takes a value back as held by nobody says so with [`reclaim`].
//!   One some thread still holds is a conflict once that thread [`put`]s it (it was used after
//!   being handed out again). A thread that dies or is fenced holding it never puts it, and its
//!   holds are the harness's to [`excuse`] ([`take_mine`]) on that thread.
//! - **Places.** A value may wait in a shared place whose settlement finishes with it (a word
//!   naming a block to be freed, which a recovery completes): [`place`] puts it there (replacing
//!   what the place held), [`unplace`] says the place was settled.
//! - **The ledger** ([`ledger`]): every first take, forget, excuse, place and reclaim, in the
//!   order they happened, so a harness can match each reclaim with what explains it.
//! - **Step orders.** [`require_order`] registers steps a thread must meet in that order within
//!   one pass of a protocol (a pass begins at the first; a step may be left out, never met
//!   after a later one). A step out of order fails the run where it is met.
//!
//! - **Lanes.** A thread that keeps several operations in flight acts for each of them in turn;
//!   the harness says which ([`as_lane`]), and each lane's holds and step orders are its own, as
//!   a thread's are: a resource one operation took and a sibling released is a conflict, and an
//!   operation that ends holding something is told apart from its siblings still running.
//!
//! **Invariant.** Ghost state never feeds back into the system under test: nothing here returns
//! a value the system's code reads.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use crate::run::with_ghost;

/// Lanes a thread may act as (lane 0 is the thread itself).
const LANES: usize = 256;

thread_local! {
    /// The lane the calling thread acts as ([`as_lane`]).
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Runs `f` with the calling thread acting as its lane `lane` (1 to 255; 0 is the thread
/// itself): whatever `f` takes, puts, hands, forgets or meets as a step is that lane's, and
/// [`take_mine`] inside it takes the lane's holds. Lanes nest as calls do.
///
/// # Panics
/// If `lane` is 256 or more (a harness's bug).
pub fn as_lane<R>(lane: usize, f: impl FnOnce() -> R) -> R {
    assert!(lane < LANES, "lane {lane} of at most {LANES}");
    /// Restores the lane acted as before, however `f` ends.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            LANE.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LANE.with(|l| l.replace(lane)));
    f()
}

/// Task `task`'s holder as the calling thread acts now: the task and its lane, one number.
pub(crate) fn holder(task: usize) -> usize {
    task * LANES + LANE.with(Cell::get)
}

/// A holder as a conflict names it.
fn named_holder(holder: usize) -> String {
    match holder % LANES {
        0 => format!("task {}", holder / LANES),
        lane => format!("task {} (lane {lane})", holder / LANES),
    }
}

/// One entry of the [`ledger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A value taken for the first time.
    FirstTaken(&'static str, u64),
    /// A thread let go of a value it held, for a sweep to find.
    Forgotten(&'static str, u64),
    /// The harness excused a value: a fault (a death, a lost completion) took it from its holder.
    Excused(&'static str, u64),
    /// A value put in a place (see [`place`]).
    Placed(&'static str, u64),
    /// A place settled: the value it held is out of it.
    Unplaced(&'static str, u64),
    /// A sweep took a value back as held by nobody; `true` if a thread held it then (a thread
    /// of a node that died or was fenced, or a conflict once it puts it to use).
    Reclaimed(&'static str, u64, bool),
}

#[derive(Debug, Default)]
pub(crate) struct Ghost {
    /// What each task holds.
    holds: HashMap<usize, Vec<(&'static str, u64)>>,
    /// Every value ever taken.
    ever: HashSet<(&'static str, u64)>,
    /// (task, value) pairs: the value was reclaimed while the task held it (its put is a
    /// conflict).
    reclaimed_from: HashSet<(usize, &'static str, u64)>,
    /// (task, value) pairs: another task took the value while this one held it (its put is a
    /// conflict).
    superseded: HashSet<(usize, &'static str, u64)>,
    /// (group, value) pairs: handed over by a superseded holder of that group (process), whose
    /// next receiver is superseded too.
    handed_superseded: HashSet<(usize, &'static str, u64)>,
    ledger: Vec<Entry>,
    conflicts: Vec<String>,
    orders: Vec<&'static [&'static str]>,
    /// What each place holds.
    places: HashMap<u64, (&'static str, u64)>,
    /// Per (task, order): the position of the last step of that order the task met.
    at: HashMap<(usize, usize), usize>,
}

impl Ghost {
    fn holders(&self, kind: &'static str, value: u64) -> Vec<usize> {
        self.holds
            .iter()
            .filter(|(_, held)| held.contains(&(kind, value)))
            .map(|(&task, _)| task)
            .collect()
    }

    /// `task` no longer holds the value: whatever was pending against its hold is void.
    /// Whether the sweep had reclaimed it from those hands.
    fn settle(&mut self, task: usize, kind: &'static str, value: u64) -> bool {
        self.superseded.remove(&(task, kind, value));
        self.reclaimed_from.remove(&(task, kind, value))
    }

    /// Removes one hold of `(kind, value)` by `task`; whether it had one.
    fn release(&mut self, task: usize, kind: &'static str, value: u64) -> bool {
        let Some(held) = self.holds.get_mut(&task) else {
            return false;
        };
        let Some(i) = held.iter().position(|&h| h == (kind, value)) else {
            return false;
        };
        held.swap_remove(i);
        true
    }

    /// A step met by `task`: a description of the order it breaks, if it does.
    pub(crate) fn step_met(&mut self, task: usize, name: &'static str) -> Option<String> {
        for (o, order) in self.orders.iter().enumerate() {
            let Some(i) = order.iter().position(|&s| s == name) else {
                continue;
            };
            if i == 0 {
                self.at.insert((task, o), 0);
                continue;
            }
            if let Some(&last) = self.at.get(&(task, o))
                && last >= i
            {
                return Some(format!(
                    "step \"{name}\" met after \"{}\": the protocol orders them {order:?}",
                    order[last]
                ));
            }
            self.at.insert((task, o), i);
        }
        None
    }
}

/// The calling thread takes `value` of `kind` into its hands (no shared place names it, or a
/// lock it now holds).
pub fn take(kind: &'static str, value: u64) {
    with_ghost(|g, task, _| {
        for other in g.holders(kind, value) {
            g.superseded.insert((other, kind, value));
        }
        hold(g, task, kind, value);
    });
}

/// The calling thread receives `value` from another thread of its process ([`hand`]): it holds
/// it as the giver did — superseded if the giver was — and supersedes nobody (a hand-over is no
/// proof that the process still holds it).
pub fn receive(kind: &'static str, value: u64) {
    with_ghost(|g, task, group| {
        if g.handed_superseded.remove(&(group, kind, value)) {
            g.superseded.insert((task, kind, value));
        }
        hold(g, task, kind, value);
    });
}

/// `task` now holds the value (its first take on the ledger).
fn hold(g: &mut Ghost, task: usize, kind: &'static str, value: u64) {
    if g.ever.insert((kind, value)) {
        g.ledger.push(Entry::FirstTaken(kind, value));
    }
    g.holds.entry(task).or_default().push((kind, value));
}

/// The calling thread placed `value` where others find it (or released it, as the memory
/// showed). A conflict if a sweep reclaimed it from this thread's hands (it was used after being
/// handed out again), or another thread took it while this one held it (two holders at once).
/// A value it does not hold: nothing.
pub fn put(kind: &'static str, value: u64) {
    with_ghost(|g, task, _| {
        if !g.release(task, kind, value) {
            return;
        }
        let superseded = g.superseded.contains(&(task, kind, value));
        if g.settle(task, kind, value) {
            g.conflicts.push(format!(
                "{kind} {value:#x} put to use by {} after a sweep reclaimed it from its hands",
                named_holder(task)
            ));
        } else if superseded {
            g.conflicts.push(format!(
                "{kind} {value:#x} put by {} after another holder took it while this one held it",
                named_holder(task)
            ));
        }
    });
}

/// The calling thread hands `value` to another thread of its process (which [`receive`]s it):
/// no place names it in between. A holder another thread superseded passes that on.
pub fn hand(kind: &'static str, value: u64) {
    with_ghost(|g, task, group| {
        if g.release(task, kind, value) {
            let superseded = g.superseded.contains(&(task, kind, value));
            if g.settle(task, kind, value) || superseded {
                g.handed_superseded.insert((group, kind, value));
            }
        }
    });
}

/// The calling thread let go of `value`, for a sweep to find (on the [`ledger`] if it held it).
pub fn forget(kind: &'static str, value: u64) {
    with_ghost(|g, task, _| {
        // Not on the ledger if the sweep reclaimed it from this thread's hands already.
        if g.release(task, kind, value) && !g.settle(task, kind, value) {
            g.ledger.push(Entry::Forgotten(kind, value));
        }
    });
}

/// A sweep took `value` back as held by nobody (on the [`ledger`]).
pub fn reclaim(kind: &'static str, value: u64) {
    with_ghost(|g, _, _| {
        let holders = g.holders(kind, value);
        for &task in &holders {
            g.reclaimed_from.insert((task, kind, value));
        }
        g.ledger
            .push(Entry::Reclaimed(kind, value, !holders.is_empty()));
    });
}

/// Removes and returns what the calling thread holds (for the harness to excuse or to judge).
pub fn take_mine() -> Vec<(&'static str, u64)> {
    with_ghost(|g, task, _| g.holds.remove(&task).unwrap_or_default()).unwrap_or_default()
}

/// Fails the run if the calling thread holds a value of `kind`: `when` names the moment (a
/// protocol's quiescent point, where everything it took is placed or forgotten).
pub fn expect_none_held(kind: &'static str, when: &str) {
    let held = with_ghost(|g, task, _| {
        g.holds
            .get(&task)
            .and_then(|h| h.iter().find(|(k, _)| *k == kind).copied())
    })
    .flatten();
    if let Some((kind, value)) = held {
        crate::fail(&format!(
            "{kind} {value:#x} still held {when}: it is nowhere"
        ));
    }
}

/// Puts an excuse for `value` on the [`ledger`]: a fault took it from the calling thread's hands
/// (not if the sweep reclaimed it from those hands already: that reclaim is on the ledger as
/// held).
pub fn excuse(kind: &'static str, value: u64) {
    with_ghost(|g, task, _| {
        if !g.settle(task, kind, value) {
            g.ledger.push(Entry::Excused(kind, value));
        }
    });
}

/// The ledger so far, in order.
pub fn ledger() -> Vec<Entry> {
    with_ghost(|g, _, _| g.ledger.clone()).unwrap_or_default()
}

/// The conflicts so far (values handed out twice).
pub fn conflicts() -> Vec<String> {
    with_ghost(|g, _, _| g.conflicts.clone()).unwrap_or_default()
}

/// `value` of `kind` now waits in place `place` (a shared word naming it), replacing what the
/// place held (on the [`ledger`]).
pub fn place(kind: &'static str, value: u64, place: u64) {
    with_ghost(|g, _, _| {
        if let Some(old) = g.places.insert(place, (kind, value))
            && old != (kind, value)
        {
            g.ledger.push(Entry::Unplaced(old.0, old.1));
        }
        if g.ledger.last() != Some(&Entry::Placed(kind, value)) {
            g.ledger.push(Entry::Placed(kind, value));
        }
    });
}

/// Place `place` was settled: what it held is out of it (on the [`ledger`]).
pub fn unplace(place: u64) {
    with_ghost(|g, _, _| {
        if let Some((kind, value)) = g.places.remove(&place) {
            g.ledger.push(Entry::Unplaced(kind, value));
        }
    });
}

/// Registers an order of named steps that every thread keeps within one pass (see the module
/// documentation).
pub fn require_order(steps: &'static [&'static str]) {
    with_ghost(|g, _, _| g.orders.push(steps));
}
