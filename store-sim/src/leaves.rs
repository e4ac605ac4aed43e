//! The leaf ledger: every leaf the orphan sweeps reclaim in a run is accounted for, kills
//! included.
//!
//! The store's code tells the run's ghost state (`leaf_store::ghost`) which leaves each thread
//! holds where no shared place names them (allocated, not yet linked, parked or forgotten), which
//! it forgets for the sweep, and which the sweep reclaims. The harness adds what faults took:
//! an operation that ended in its node's death or a lost completion leaves its leaves *excused*;
//! a memory node's worker that died or lost a completion excuses its free list and whatever it
//! held. Then:
//!
//! - **An operation that completed, or failed without losing its connection, holds nothing**:
//!   every leaf it took is linked, parked in its box or forgotten (a leaf kept across
//!   operations could be reclaimed under it).
//! - **Every reclaim is explained**, in ledger order, by one earlier forget or excuse of that
//!   leaf, or is a leaf no thread had taken yet, numbered past the bulk load, reclaimed for the
//!   first time: one an allocation whose completion was lost handed out to nobody. Anything else a
//!   protocol dropped: a leak the sweep would otherwise hide.
//! - **No leaf is used after the sweep reclaimed it from a thread's hands**, and none is taken
//!   while another thread holds it (the ghost state's conflicts).
//!
//! Value blocks need no ledger of their own: a member's chunks go back whole when it is
//! recovered, and `leaf_store::verify` finds every block named twice or by nobody at the end.

use std::collections::{HashMap, HashSet};

use leaf_store::ghost::{LEAF, unnamed};
use sim_scheduler::ghost::{self, Entry};

/// What the ledger accounted for in a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LeafAccount {
    /// Leaves the orphan sweeps reclaimed.
    pub reclaimed: u64,
    /// Of those, leaves a store forgot.
    pub forgotten: u64,
    /// Of those, leaves a fault took from their holder (a death, a lost completion).
    pub taken_by_faults: u64,
    /// Of those, leaves an allocation whose completion was lost handed out to nobody.
    pub lost_allocations: u64,
}

/// After an operation of `who`: what its thread still holds is excused if the operation lost
/// its connection or its node (`lost`); otherwise it must hold nothing.
pub(crate) fn after_operation(who: &str, lost: bool) -> Result<(), String> {
    let held = ghost::take_mine();
    if lost {
        for (kind, value) in held {
            ghost::excuse(kind, value);
        }
        return Ok(());
    }
    match held.first() {
        None => Ok(()),
        Some(&(_, value)) => {
            let (node, leaf) = unnamed(value);
            Err(format!(
                "{who} ended holding leaf {leaf} of memory node {node}: not linked, parked or forgotten"
            ))
        }
    }
}

/// A memory node's worker ended: if it died or lost a completion (`lost`), its free list
/// (`free`, of memory node `node`) and whatever it held are excused; a worker stopped cleanly
/// holds nothing.
pub(crate) fn worker_ended(node: u16, free: &[u64], lost: bool) -> Result<(), String> {
    if lost {
        for &leaf in free {
            ghost::excuse(LEAF, leaf_store::ghost::named(node, leaf));
        }
    }
    after_operation(&format!("memory node {node}'s worker"), lost)
}

/// The run's ledger checked (see the module documentation); `loaded` gives each memory node's
/// leaves written by the bulk load.
pub(crate) fn account(loaded: &HashMap<u16, u64>) -> Result<LeafAccount, String> {
    if let Some(conflict) = ghost::conflicts().first() {
        return Err(format!("a leaf handed out twice: {conflict}"));
    }
    balance(&ghost::ledger(), loaded)
}

/// [`account`]'s matching, on a ledger and what was ever taken.
fn balance(ledger: &[Entry], loaded: &HashMap<u16, u64>) -> Result<LeafAccount, String> {
    let mut account = LeafAccount::default();
    // Per leaf: its unmatched forgets and excuses, in order.
    let mut open: HashMap<u64, Vec<bool>> = HashMap::new();
    let mut reclaimed_once: HashSet<u64> = HashSet::new();
    let mut taken: HashSet<u64> = HashSet::new();
    for entry in ledger {
        match *entry {
            Entry::FirstTaken(LEAF, v) => {
                taken.insert(v);
            }
            Entry::Forgotten(LEAF, v) => open.entry(v).or_default().push(true),
            Entry::Excused(LEAF, v) => open.entry(v).or_default().push(false),
            Entry::Reclaimed(LEAF, v) => {
                account.reclaimed += 1;
                let first = reclaimed_once.insert(v);
                let explained = open.get_mut(&v).and_then(|o| {
                    if o.is_empty() {
                        None
                    } else {
                        Some(o.remove(0))
                    }
                });
                match explained {
                    Some(true) => account.forgotten += 1,
                    Some(false) => account.taken_by_faults += 1,
                    None => {
                        let (node, leaf) = unnamed(v);
                        let past_load = loaded.get(&node).is_some_and(|&l| leaf >= l);
                        let ever_taken = taken.contains(&v);
                        if first && past_load && !ever_taken {
                            account.lost_allocations += 1;
                        } else {
                            return Err(format!(
                                "the orphan sweep reclaimed leaf {leaf} of memory node {node}, which no store forgot and no fault took from its holder: a protocol leaked it ({}, {}{})",
                                if ever_taken {
                                    "once in a thread's hands"
                                } else {
                                    "never in a thread's hands"
                                },
                                if past_load {
                                    "allocated in the run"
                                } else {
                                    "written by the load"
                                },
                                if first { "" } else { ", reclaimed before" }
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(account)
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaf_store::ghost::named;

    fn loaded() -> HashMap<u16, u64> {
        HashMap::from([(1, 10)])
    }

    #[test]
    fn each_reclaim_consumes_one_explanation() {
        let v = named(1, 12);
        let ledger = [
            Entry::FirstTaken(LEAF, v),
            Entry::Forgotten(LEAF, v),
            Entry::Reclaimed(LEAF, v),
            Entry::Excused(LEAF, v),
            Entry::Reclaimed(LEAF, v),
        ];
        let account = balance(&ledger, &loaded()).unwrap();
        assert_eq!(
            account,
            LeafAccount {
                reclaimed: 2,
                forgotten: 1,
                taken_by_faults: 1,
                lost_allocations: 0
            }
        );
        // A third reclaim of the same leaf has nothing left to explain it.
        let mut more = ledger.to_vec();
        more.push(Entry::Reclaimed(LEAF, v));
        assert!(balance(&more, &loaded()).is_err());
    }

    #[test]
    fn an_explanation_after_the_reclaim_does_not_count() {
        let v = named(1, 12);
        let ledger = [
            Entry::FirstTaken(LEAF, v),
            Entry::Reclaimed(LEAF, v),
            Entry::Forgotten(LEAF, v),
        ];
        assert!(balance(&ledger, &loaded()).is_err());
    }

    #[test]
    fn only_a_never_taken_leaf_past_the_load_is_a_lost_allocation() {
        let past = named(1, 10);
        let loaded_leaf = named(1, 9);
        let once = [Entry::Reclaimed(LEAF, past)];
        assert_eq!(balance(&once, &loaded()).unwrap().lost_allocations, 1);
        // Taken before: its holder dropped it (taken only after: the sweep found it first).
        let taken = [Entry::FirstTaken(LEAF, past), Entry::Reclaimed(LEAF, past)];
        assert!(balance(&taken, &loaded()).is_err());
        let later = [Entry::Reclaimed(LEAF, past), Entry::FirstTaken(LEAF, past)];
        assert!(balance(&later, &loaded()).is_ok());
        // Written by the load: a chain dropped it.
        assert!(balance(&[Entry::Reclaimed(LEAF, loaded_leaf)], &loaded()).is_err());
        // A memory node the load did not name.
        assert!(balance(&[Entry::Reclaimed(LEAF, named(2, 50))], &loaded()).is_err());
        // Reclaimed again: the first reclaim put it on a free list, so it was in a place since.
        let twice = [Entry::Reclaimed(LEAF, past), Entry::Reclaimed(LEAF, past)];
        assert!(balance(&twice, &loaded()).is_err());
    }
}
