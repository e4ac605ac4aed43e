//! A linearizability checker for histories of key-value operations (Wing & Gong's search, with the
//! pruning Porcupine uses: a cache of (operations linearized, state) pairs already explored).
//!
//! **What it decides.** A history is linearizable when every operation that completed can be
//! given a point between its call and its return such that, taken in the order of those points
//! from the initial contents, each returns what it returned. An operation that failed (an error,
//! a lost completion) may or may not have taken effect, at any point after its call: it may be
//! linearized anywhere after its call with any result, or left out. Operations on different keys
//! commute, so the history is checked one key at a time (linearizability is local: Herlihy &
//! Wing), which keeps each search small.
//!
//! Three reductions keep histories with many failed operations small (a run of a few dozen
//! failed writes on one key made the search exponential): a failed GET is left out (it changes
//! nothing and returned nothing); a value no GET returned is replaced by one stand-in (only a
//! GET tells values apart), so failed writes of the same kind become interchangeable; and of
//! two such, the earlier is linearized first (taking the later one instead leads to the same
//! histories).
//!
//! Times are any totally ordered stamps taken from one clock shared by all threads (a global
//! counter is best: two events never share a stamp), with `call` read before the operation is
//! issued and `ret` after it returned.

use std::collections::{BTreeMap, HashSet};

/// An operation on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    /// Read the value.
    Get,
    /// Insert if absent.
    Insert(u64),
    /// Set if present.
    Update(u64),
    /// Set, inserting if absent.
    Upsert(u64),
    /// Remove if present.
    Delete,
}

/// What an operation returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvResult {
    /// A GET's value.
    Value(Option<u64>),
    /// A write's answer: inserted / updated / newly inserted (upsert) / deleted.
    Done(bool),
}

/// One operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvEvent {
    /// The key.
    pub key: u64,
    /// What was asked.
    pub op: KvOp,
    /// When it was called.
    pub call: u64,
    /// When it returned, and what; `None` for an operation that failed (it may or may not have
    /// taken effect).
    pub ret: Option<(u64, KvResult)>,
}

/// A key whose operations fit no linearization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The key.
    pub key: u64,
    /// Its value before the history.
    pub initial: Option<u64>,
    /// Its operations, by call time.
    pub events: Vec<KvEvent>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "key {}: no linearization of its {} operations from {:?}:",
            self.key,
            self.events.len(),
            self.initial
        )?;
        for e in &self.events {
            match e.ret {
                Some((at, result)) => {
                    writeln!(f, "  [{}, {}] {:?} -> {:?}", e.call, at, e.op, result)?
                }
                None => writeln!(f, "  [{}, -] {:?} -> failed", e.call, e.op)?,
            }
        }
        Ok(())
    }
}

/// What `op` does to a key holding `state`: its new state and its result.
pub fn step(state: Option<u64>, op: KvOp) -> (Option<u64>, KvResult) {
    match op {
        KvOp::Get => (state, KvResult::Value(state)),
        KvOp::Insert(v) => match state {
            None => (Some(v), KvResult::Done(true)),
            Some(_) => (state, KvResult::Done(false)),
        },
        KvOp::Update(v) => match state {
            Some(_) => (Some(v), KvResult::Done(true)),
            None => (state, KvResult::Done(false)),
        },
        KvOp::Upsert(v) => (Some(v), KvResult::Done(state.is_none())),
        KvOp::Delete => (None, KvResult::Done(state.is_some())),
    }
}

/// Checks `history` against the contents `initial` (keys absent from it start absent): `Err`
/// names the first key, in key order, whose operations fit no linearization.
pub fn check(initial: &BTreeMap<u64, u64>, history: &[KvEvent]) -> Result<(), Violation> {
    let mut by_key: BTreeMap<u64, Vec<KvEvent>> = BTreeMap::new();
    for e in history {
        by_key.entry(e.key).or_default().push(*e);
    }
    for (key, events) in by_key {
        check_key(key, initial.get(&key).copied(), events)?;
    }
    Ok(())
}

/// A call or return event in the doubly linked list the search lifts operations out of.
#[derive(Clone, Copy)]
struct Node {
    op: usize,
    is_call: bool,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

/// Checks the operations of one key (see [`check`]).
pub fn check_key(
    key: u64,
    initial: Option<u64>,
    mut events: Vec<KvEvent>,
) -> Result<(), Violation> {
    events.sort_by_key(|e| e.call);
    // The values some GET returned; every other value is `unseen`, a number none of them is.
    let seen_values: HashSet<u64> = events
        .iter()
        .filter_map(|e| match e.ret {
            Some((_, KvResult::Value(Some(v)))) => Some(v),
            _ => None,
        })
        .collect();
    let unseen = (0..=u64::MAX)
        .rev()
        .find(|v| !seen_values.contains(v))
        .unwrap_or(u64::MAX);
    let canonical = |v: u64| if seen_values.contains(&v) { v } else { unseen };
    // What the search runs on; `events` stays as it was, for the report.
    let reduced: Vec<KvEvent> = events
        .iter()
        .filter(|e| !(e.ret.is_none() && e.op == KvOp::Get))
        .map(|&e| KvEvent {
            op: match e.op {
                KvOp::Insert(v) => KvOp::Insert(canonical(v)),
                KvOp::Update(v) => KvOp::Update(canonical(v)),
                KvOp::Upsert(v) => KvOp::Upsert(canonical(v)),
                other => other,
            },
            ..e
        })
        .collect();
    let n = reduced.len();
    // For each failed operation, the latest earlier failed one asking the same: it is linearized
    // first.
    let mut twin_before = vec![NONE; n];
    {
        let mut last: Vec<(KvOp, usize)> = Vec::new();
        for (i, e) in reduced.iter().enumerate() {
            if e.ret.is_some() {
                continue;
            }
            match last.iter_mut().find(|(op, _)| *op == e.op) {
                Some((_, at)) => {
                    twin_before[i] = *at;
                    *at = i;
                }
                None => last.push((e.op, i)),
            }
        }
    }
    // Events in time order: a call before a return at the same stamp (an operation that
    // returned at t overlaps one called at t).
    let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, e) in reduced.iter().enumerate() {
        order.push((e.call, false, i));
        if let Some((at, _)) = e.ret {
            order.push((at.max(e.call), true, i));
        }
    }
    order.sort_unstable();
    // Node 0 is the head sentinel.
    let mut nodes = vec![Node {
        op: NONE,
        is_call: false,
        prev: NONE,
        next: NONE,
    }];
    let mut call_node = vec![NONE; n];
    let mut ret_node = vec![NONE; n];
    for &(_, is_ret, op) in &order {
        let at = nodes.len();
        let prev = at - 1;
        nodes[prev].next = at;
        nodes.push(Node {
            op,
            is_call: !is_ret,
            prev,
            next: NONE,
        });
        if is_ret {
            ret_node[op] = at;
        } else {
            call_node[op] = at;
        }
    }
    let lift = |nodes: &mut Vec<Node>, op: usize| {
        for at in [call_node[op], ret_node[op]] {
            if at == NONE {
                continue;
            }
            let Node { prev, next, .. } = nodes[at];
            nodes[prev].next = next;
            if next != NONE {
                nodes[next].prev = prev;
            }
        }
    };
    let unlift = |nodes: &mut Vec<Node>, op: usize| {
        for at in [ret_node[op], call_node[op]] {
            if at == NONE {
                continue;
            }
            let Node { prev, next, .. } = nodes[at];
            nodes[prev].next = at;
            if next != NONE {
                nodes[next].prev = at;
            }
        }
    };
    let mut linearized = vec![0u64; n.div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state = initial.map(canonical);
    let mut entry = nodes[0].next;
    loop {
        if entry == NONE {
            // Every event left is the call of a failed operation: leaving it out is allowed.
            return Ok(());
        }
        let node = nodes[entry];
        if node.is_call {
            let e = &reduced[node.op];
            let twin = twin_before[node.op];
            if twin != NONE && linearized[twin / 64] & (1 << (twin % 64)) == 0 {
                // An earlier failed twin is not linearized yet: taking this one instead would
                // explore the same histories.
                entry = node.next;
                continue;
            }
            let (next_state, result) = step(state, e.op);
            let matches = e.ret.is_none_or(|(_, r)| r == result);
            let mut fresh = false;
            if matches {
                linearized[node.op / 64] |= 1 << (node.op % 64);
                fresh = seen.insert((linearized.clone(), next_state));
                if !fresh {
                    linearized[node.op / 64] &= !(1 << (node.op % 64));
                }
            }
            if fresh {
                stack.push((node.op, state));
                state = next_state;
                lift(&mut nodes, node.op);
                entry = nodes[0].next;
            } else {
                entry = node.next;
            }
        } else {
            // An operation returned before it could be linearized: undo the latest choice.
            let Some((op, before)) = stack.pop() else {
                return Err(Violation {
                    key,
                    initial,
                    events,
                });
            };
            unlift(&mut nodes, op);
            linearized[op / 64] &= !(1 << (op % 64));
            state = before;
            entry = nodes[call_node[op]].next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(call: u64, ret: u64, key: u64, op: KvOp, result: KvResult) -> KvEvent {
        KvEvent {
            key,
            op,
            call,
            ret: Some((ret, result)),
        }
    }

    fn failed(call: u64, key: u64, op: KvOp) -> KvEvent {
        KvEvent {
            key,
            op,
            call,
            ret: None,
        }
    }

    use KvOp::*;
    use KvResult::*;

    #[test]
    fn a_read_after_a_completed_write_must_see_it() {
        let history = [
            done(1, 2, 7, Insert(5), Done(true)),
            done(3, 4, 7, Get, Value(None)),
        ];
        let v = check(&BTreeMap::new(), &history).expect_err("a stale read");
        assert_eq!(v.key, 7);
        // Overlapping, either order is fine.
        let history = [
            done(1, 4, 7, Insert(5), Done(true)),
            done(2, 3, 7, Get, Value(None)),
        ];
        assert_eq!(check(&BTreeMap::new(), &history), Ok(()));
    }

    #[test]
    fn two_inserts_of_one_key_cannot_both_succeed_without_a_delete() {
        let history = [
            done(1, 4, 3, Insert(1), Done(true)),
            done(2, 5, 3, Insert(2), Done(true)),
        ];
        assert!(check(&BTreeMap::new(), &history).is_err());
        let history = [
            done(1, 4, 3, Insert(1), Done(true)),
            done(2, 6, 3, Delete, Done(true)),
            done(3, 7, 3, Insert(2), Done(true)),
            done(8, 9, 3, Get, Value(Some(2))),
        ];
        assert_eq!(check(&BTreeMap::new(), &history), Ok(()));
    }

    #[test]
    fn a_failed_write_may_or_may_not_have_happened_but_not_before_its_call() {
        let initial = BTreeMap::from([(1, 10)]);
        for seen in [Some(10), Some(11)] {
            let history = [failed(1, 1, Update(11)), done(5, 6, 1, Get, Value(seen))];
            assert_eq!(check(&initial, &history), Ok(()), "{seen:?}");
        }
        // Not before its call.
        let history = [
            done(1, 2, 1, Get, Value(Some(11))),
            failed(3, 1, Update(11)),
        ];
        assert!(check(&initial, &history).is_err());
        // Once seen, it stays done: a later read cannot see the value before it.
        let history = [
            failed(1, 1, Update(11)),
            done(2, 3, 1, Get, Value(Some(11))),
            done(4, 5, 1, Get, Value(Some(10))),
        ];
        assert!(check(&initial, &history).is_err());
    }

    #[test]
    fn many_failed_writes_of_one_key_are_checked_quickly_and_still_judged() {
        // Forty failed writes with new values, every one overlapping the rest and the reads (a
        // contended run's history): before failed GETs were left out, values no GET returned
        // merged and failed twins taken in order, the search ran for minutes (sixty of them:
        // stopped after two).
        let mut history = Vec::new();
        for i in 0..40u64 {
            let op = match i % 4 {
                0 => Insert(1000 + i),
                1 => Update(1000 + i),
                2 => Upsert(1000 + i),
                _ => Delete,
            };
            history.push(failed(1 + i, 5, op));
            history.push(failed(1 + i, 5, Get));
        }
        history.push(done(50, 80, 5, Get, Value(Some(1006))));
        history.push(done(81, 82, 5, Get, Value(None)));
        assert_eq!(check(&BTreeMap::new(), &history), Ok(()));
        // A value nobody wrote, and one older than a completed read after it, are still found.
        let mut wrong = history.clone();
        wrong.push(done(83, 84, 5, Get, Value(Some(7))));
        assert!(check(&BTreeMap::new(), &wrong).is_err());
        let mut stale = history.clone();
        stale.push(done(83, 84, 5, Delete, Done(false)));
        stale.push(done(85, 86, 5, Get, Value(Some(1006))));
        // After the delete, 1006 can come back only through the failed upsert that wrote it
        // landing late; it lands once, so after the second delete nothing brings 1006 back.
        stale.push(done(87, 88, 5, Delete, Done(true)));
        stale.push(done(89, 90, 5, Get, Value(Some(1006))));
        assert!(check(&BTreeMap::new(), &stale).is_err());
    }

    #[test]
    fn a_stand_in_value_never_passes_for_one_a_read_returned() {
        // The largest value is read back though nobody wrote it: the stand-in for unread values
        // must not be that value.
        let history = vec![
            failed(1, 3, Upsert(7)),
            done(2, 3, 3, Get, Value(Some(u64::MAX))),
        ];
        assert!(check(&BTreeMap::new(), &history).is_err());
        let history = vec![
            failed(1, 3, Upsert(u64::MAX)),
            done(2, 3, 3, Get, Value(Some(u64::MAX))),
        ];
        assert_eq!(check(&BTreeMap::new(), &history), Ok(()));
    }

    #[test]
    fn a_lost_update_is_found_among_many_concurrent_operations() {
        // Four writers overlap; the last read must see one of their values — and not the
        // initial one, since all completed before it.
        let mut history: Vec<KvEvent> = (0..4)
            .map(|i| done(1 + i, 10 + i, 9, Update(100 + i), Done(true)))
            .collect();
        history.push(done(20, 21, 9, Get, Value(Some(102))));
        let initial = BTreeMap::from([(9, 1)]);
        assert_eq!(check(&initial, &history), Ok(()));
        history.push(done(22, 23, 9, Get, Value(Some(1))));
        assert!(check(&initial, &history).is_err());
    }

    #[test]
    fn sequential_histories_of_the_model_pass_and_a_changed_result_fails() {
        let mut rng = crate::XorShift64::new(11);
        for round in 0..200 {
            let mut state = BTreeMap::new();
            let mut history = Vec::new();
            let mut t = 0;
            for _ in 0..40 {
                let key = rng.next_u64() % 4;
                let op = match rng.next_u64() % 5 {
                    0 => Get,
                    1 => Insert(rng.next_u64() % 3),
                    2 => Update(rng.next_u64() % 3),
                    3 => Upsert(rng.next_u64() % 3),
                    _ => Delete,
                };
                let (next, result) = step(state.get(&key).copied(), op);
                match next {
                    Some(v) => state.insert(key, v),
                    None => state.remove(&key),
                };
                history.push(done(t, t + 1, key, op, result));
                t += 2;
            }
            assert_eq!(check(&BTreeMap::new(), &history), Ok(()), "round {round}");
            // Flip one answer: a sequential history has one linearization, so it fails.
            let i = (rng.next_u64() % history.len() as u64) as usize;
            if let Some((at, result)) = history[i].ret {
                let wrong = match result {
                    Done(b) => Done(!b),
                    Value(None) => Value(Some(99)),
                    Value(Some(v)) => Value(Some(v + 1000)),
                };
                history[i].ret = Some((at, wrong));
            }
            assert!(
                check(&BTreeMap::new(), &history).is_err(),
                "round {round}: a changed answer passed"
            );
        }
    }

    /// Whether some order of `events` (one key) fits: every completed operation taken, each
    /// failed one taken or left out, none before an operation that returned before its call, each
    /// returning what the sequential model gives. No reduction, no cache: every order is tried.
    fn brute_force(initial: Option<u64>, events: &[KvEvent]) -> bool {
        fn search(state: Option<u64>, left: &[KvEvent]) -> bool {
            if left.iter().all(|e| e.ret.is_none()) {
                return true;
            }
            (0..left.len()).any(|i| {
                let e = left[i];
                // Something that returned before this one was called must go first.
                let blocked = left
                    .iter()
                    .any(|p| p.ret.is_some_and(|(at, _)| at < e.call));
                if blocked {
                    return false;
                }
                let mut rest = left.to_vec();
                rest.remove(i);
                let (next, result) = step(state, e.op);
                let fits = e.ret.is_none_or(|(_, r)| r == result) && search(next, &rest);
                // A failed operation may also never take effect.
                fits || (e.ret.is_none() && search(state, &rest))
            })
        }
        search(initial, events)
    }

    /// A random history of one key: `n` operations on values 1..=3, some failed, with random
    /// overlapping intervals and answers drawn from what the model could give (so that about
    /// half of the histories are linearizable).
    fn random_history(rng: &mut crate::XorShift64, n: usize) -> (Option<u64>, Vec<KvEvent>) {
        let initial = (!rng.next_u64().is_multiple_of(3)).then(|| 1 + rng.next_u64() % 3);
        let mut events = Vec::new();
        for _ in 0..n {
            let value = 1 + rng.next_u64() % 3;
            let op = match rng.next_u64() % 5 {
                0 | 1 => Get,
                2 => Insert(value),
                3 => [Update(value), Upsert(value)][(rng.next_u64() % 2) as usize],
                _ => Delete,
            };
            let call = rng.next_u64() % 12;
            let ret = if rng.next_u64().is_multiple_of(4) {
                None
            } else {
                let result = match op {
                    Get => {
                        Value((!rng.next_u64().is_multiple_of(3)).then(|| 1 + rng.next_u64() % 3))
                    }
                    _ => Done(rng.next_u64().is_multiple_of(2)),
                };
                Some((call + 1 + rng.next_u64() % 6, result))
            };
            events.push(KvEvent {
                key: 1,
                op,
                call,
                ret,
            });
        }
        (initial, events)
    }

    #[test]
    fn the_checker_agrees_with_a_brute_force_search_on_small_histories() {
        // Both ways: the reductions (failed GETs left out, unread values merged, failed twins in
        // order) and the cache neither reject a history some order fits nor accept one none does.
        let mut rng = crate::XorShift64::new(0x11e4_7ab1e);
        let (mut fits, mut fails) = (0, 0);
        for round in 0..4000 {
            let n = 1 + round % 7;
            let (initial, events) = random_history(&mut rng, n);
            let expected = brute_force(initial, &events);
            let got = check_key(1, initial, events.clone()).is_ok();
            assert_eq!(
                got, expected,
                "round {round}: the checker says {got}, every order tried says {expected}, from {initial:?}: {events:?}"
            );
            if expected {
                fits += 1;
            } else {
                fails += 1;
            }
        }
        // Both kinds were drawn, in numbers.
        assert!(
            fits > 500 && fails > 500,
            "{fits} linearizable, {fails} not"
        );
    }

    #[test]
    fn many_overlapping_operations_are_checked_quickly() {
        // 300 operations on one key, each overlapping the next few: the cache keeps it fast.
        let mut history = Vec::new();
        for i in 0..300u64 {
            history.push(done(i * 2, i * 2 + 7, 1, Upsert(i), Done(i == 0)));
        }
        history.push(done(700, 701, 1, Get, Value(Some(299))));
        assert_eq!(check(&BTreeMap::new(), &history), Ok(()));
    }
}
