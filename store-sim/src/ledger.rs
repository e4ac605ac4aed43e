//! The ledger of leaves and value blocks: every leaf the orphan sweeps reclaim in a run, and
//! every value block a memory node frees from a departed member's chunks, is accounted for,
//! kills included.
//!
//! The store's code tells the run's ghost state (`leaf_store::ghost`) which leaves and blocks
//! each thread holds where no shared place names them (a leaf allocated, not yet linked, parked
//! or forgotten; a block handed to an operation whose last batch has not landed), which it
//! forgets for the memory node, and which the memory node reclaims. The harness adds what faults
//! took: an operation that ended in its node's death or a lost completion leaves what it held
//! *excused*; a memory node's worker that died or lost a completion excuses its free list and
//! whatever it held. Then:
//!
//! - **An operation that completed, or failed without losing its connection, holds nothing**:
//!   every leaf it took is linked, parked in its box or forgotten, and every block is named by a
//!   leaf, given back or forgotten (a leaf kept across operations could be reclaimed under it).
//! - **Every reclaim is explained**, in ledger order: by one earlier forget or excuse; by the
//!   hands it was taken from (a thread of a node that died or was fenced: were it a live one,
//!   its next use of the leaf is a conflict); or, for a leaf only, as one no thread had taken
//!   yet, numbered past the bulk load, reclaimed for the first time: an allocation whose
//!   completion was lost handed it to nobody; or, for a block only, as one a value free word
//!   names that is not settled yet (a write replacing the block set the word and died or lost
//!   its connection: the word's settlement frees the block again, harmlessly, as the unsettled
//!   word's member holds the reuse horizon back). Anything else a protocol dropped: a leak the
//!   sweep would otherwise hide — a word settled without freeing its block among them.
//! - **Nothing is used after it was reclaimed from a thread's hands**, and nothing is taken
//!   while another thread holds it (the ghost state's conflicts).

use std::collections::{HashMap, HashSet};

use leaf_store::ghost::{BLOCK, LEAF, unnamed};
use sim_scheduler::ghost::{self, Entry};

/// What the ledger accounted for in a run, of leaves or of value blocks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// Reclaimed by the memory node.
    pub reclaimed: u64,
    /// Of those, forgotten by a store.
    pub forgotten: u64,
    /// Of those, taken from their holder by a fault (a death, a lost completion), or reclaimed
    /// from the hands of a thread whose node died or was fenced.
    pub taken_by_faults: u64,
    /// Of those (leaves only), handed to nobody by an allocation whose completion was lost.
    pub lost_allocations: u64,
    /// Of those (blocks only), named by a value free word not yet settled (freed again when it
    /// is: harmless, as the member's unsettled word holds the reuse horizon back).
    pub in_free_words: u64,
}

impl Account {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Account) {
        self.reclaimed += other.reclaimed;
        self.forgotten += other.forgotten;
        self.taken_by_faults += other.taken_by_faults;
        self.lost_allocations += other.lost_allocations;
        self.in_free_words += other.in_free_words;
    }
}

/// The ledger's accounts of a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ledger {
    /// Leaves the orphan sweeps reclaimed.
    pub leaves: Account,
    /// Value blocks freed from departed members' chunks.
    pub blocks: Account,
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
        Some(&(kind, value)) => {
            let (node, at) = unnamed(value);
            Err(format!(
                "{who} ended holding {kind} {at} of memory node {node}: it is nowhere (not linked, parked, given back or forgotten)"
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
pub(crate) fn account(loaded: &HashMap<u16, u64>) -> Result<Ledger, String> {
    if let Some(conflict) = ghost::conflicts().first() {
        return Err(format!("handed out twice: {conflict}"));
    }
    let ledger = ghost::ledger();
    Ok(Ledger {
        leaves: balance(&ledger, LEAF, Some(loaded))?,
        blocks: balance(&ledger, BLOCK, None)?,
    })
}

/// [`account`]'s matching of the values of `kind`; `loaded` (leaves only) gives each memory
/// node's leaves written by the bulk load (past them, a leaf never taken may be a lost
/// allocation's).
fn balance(
    ledger: &[Entry],
    kind: &'static str,
    loaded: Option<&HashMap<u16, u64>>,
) -> Result<Account, String> {
    let mut account = Account::default();
    // Per leaf: its unmatched forgets and excuses, in order.
    let mut open: HashMap<u64, Vec<bool>> = HashMap::new();
    let mut reclaimed_once: HashSet<u64> = HashSet::new();
    let mut taken: HashSet<u64> = HashSet::new();
    let mut placed: HashSet<u64> = HashSet::new();
    for entry in ledger {
        match *entry {
            Entry::Placed(k, v) if k == kind => {
                placed.insert(v);
            }
            Entry::Unplaced(k, v) if k == kind => {
                placed.remove(&v);
            }
            Entry::FirstTaken(k, v) if k == kind => {
                taken.insert(v);
            }
            Entry::Forgotten(k, v) if k == kind => open.entry(v).or_default().push(true),
            Entry::Excused(k, v) if k == kind => open.entry(v).or_default().push(false),
            Entry::Reclaimed(k, v, from_hands) if k == kind => {
                account.reclaimed += 1;
                if from_hands {
                    account.taken_by_faults += 1;
                    continue;
                }
                if placed.contains(&v) {
                    account.in_free_words += 1;
                    continue;
                }
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
                        let past_load =
                            loaded.is_some_and(|l| l.get(&node).is_some_and(|&l| leaf >= l));
                        let ever_taken = taken.contains(&v);
                        if first && past_load && !ever_taken {
                            account.lost_allocations += 1;
                        } else {
                            return Err(format!(
                                "the memory node reclaimed {kind} {leaf} of memory node {node}, which no store forgot and no fault took from its holder: a protocol leaked it ({}{}{})",
                                if ever_taken {
                                    "once in a thread's hands"
                                } else {
                                    "never in a thread's hands"
                                },
                                match loaded {
                                    None => "",
                                    Some(_) if past_load => ", allocated in the run",
                                    Some(_) => ", written by the load",
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
            Entry::Reclaimed(LEAF, v, false),
            Entry::Excused(LEAF, v),
            Entry::Reclaimed(LEAF, v, false),
        ];
        let account = balance(&ledger, LEAF, Some(&loaded())).unwrap();
        assert_eq!(
            account,
            Account {
                reclaimed: 2,
                forgotten: 1,
                taken_by_faults: 1,
                lost_allocations: 0,
                in_free_words: 0
            }
        );
        // A third reclaim of the same leaf has nothing left to explain it.
        let mut more = ledger.to_vec();
        more.push(Entry::Reclaimed(LEAF, v, false));
        assert!(balance(&more, LEAF, Some(&loaded())).is_err());
    }

    #[test]
    fn an_explanation_after_the_reclaim_does_not_count() {
        let v = named(1, 12);
        let ledger = [
            Entry::FirstTaken(LEAF, v),
            Entry::Reclaimed(LEAF, v, false),
            Entry::Forgotten(LEAF, v),
        ];
        assert!(balance(&ledger, LEAF, Some(&loaded())).is_err());
    }

    #[test]
    fn only_a_never_taken_leaf_past_the_load_is_a_lost_allocation() {
        let past = named(1, 10);
        let loaded_leaf = named(1, 9);
        let once = [Entry::Reclaimed(LEAF, past, false)];
        assert_eq!(
            balance(&once, LEAF, Some(&loaded()))
                .unwrap()
                .lost_allocations,
            1
        );
        // Taken before: its holder dropped it (taken only after: the sweep found it first).
        let taken = [
            Entry::FirstTaken(LEAF, past),
            Entry::Reclaimed(LEAF, past, false),
        ];
        assert!(balance(&taken, LEAF, Some(&loaded())).is_err());
        let later = [
            Entry::Reclaimed(LEAF, past, false),
            Entry::FirstTaken(LEAF, past),
        ];
        assert!(balance(&later, LEAF, Some(&loaded())).is_ok());
        // Written by the load: a chain dropped it.
        assert!(
            balance(
                &[Entry::Reclaimed(LEAF, loaded_leaf, false)],
                LEAF,
                Some(&loaded())
            )
            .is_err()
        );
        // A memory node the load did not name.
        assert!(
            balance(
                &[Entry::Reclaimed(LEAF, named(2, 50), false)],
                LEAF,
                Some(&loaded())
            )
            .is_err()
        );
        // Reclaimed again: the first reclaim put it on a free list, so it was in a place since.
        let twice = [
            Entry::Reclaimed(LEAF, past, false),
            Entry::Reclaimed(LEAF, past, false),
        ];
        assert!(balance(&twice, LEAF, Some(&loaded())).is_err());
    }

    #[test]
    fn a_block_is_explained_by_its_forget_or_the_hands_it_was_taken_from_never_by_being_new() {
        let v = named(1, 4096);
        let forgotten = [
            Entry::FirstTaken(BLOCK, v),
            Entry::Forgotten(BLOCK, v),
            Entry::Reclaimed(BLOCK, v, false),
        ];
        assert_eq!(balance(&forgotten, BLOCK, None).unwrap().forgotten, 1);
        let from_hands = [
            Entry::FirstTaken(BLOCK, v),
            Entry::Reclaimed(BLOCK, v, true),
        ];
        assert_eq!(
            balance(&from_hands, BLOCK, None).unwrap().taken_by_faults,
            1
        );
        // Never taken (a block the load wrote, or one a protocol dropped): a leak.
        assert!(balance(&[Entry::Reclaimed(BLOCK, v, false)], BLOCK, None).is_err());
        // Named by a free word until it is settled.
        let waiting = [
            Entry::Placed(BLOCK, v),
            Entry::Reclaimed(BLOCK, v, false),
            Entry::Unplaced(BLOCK, v),
        ];
        assert_eq!(balance(&waiting, BLOCK, None).unwrap().in_free_words, 1);
        let settled = [
            Entry::Placed(BLOCK, v),
            Entry::Unplaced(BLOCK, v),
            Entry::Reclaimed(BLOCK, v, false),
        ];
        assert!(balance(&settled, BLOCK, None).is_err());
        // A leaf's explanation does not explain a block.
        let other = [Entry::Forgotten(LEAF, v), Entry::Reclaimed(BLOCK, v, false)];
        assert!(balance(&other, BLOCK, None).is_err());
    }
}
