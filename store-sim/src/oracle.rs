//! The checks a run's history must pass.
//!
//! - Every key-value operation fits a linearization of its key's history
//!   (`testkit::linearizability`, a Wing–Gong search): an operation that failed may or may not
//!   have happened, one that succeeded must have.
//! - A scan returns keys strictly increasing from its start, and agrees with every key whose
//!   state is certain for the whole scan: such a key present must be returned (if within the
//!   range the scan covered) with its value, and one absent must not be.

use std::collections::BTreeMap;

use testkit::linearizability::{KvOp, KvResult, check};

use crate::history::{Entry, Op, Returned};

/// Checks `history` of keys that started as `initial`; the first violation found.
pub fn check_history(initial: &BTreeMap<u64, u64>, history: &[Entry]) -> Result<(), String> {
    let events: Vec<_> = history.iter().filter_map(Entry::kv_event).collect();
    check(initial, &events).map_err(|v| v.to_string())?;
    // Each key's writes, whatever their outcome: built once for every scan.
    let mut writes: BTreeMap<u64, Vec<&Entry>> = BTreeMap::new();
    for e in history {
        if let Op::Kv(key, op) = e.op
            && op != KvOp::Get
        {
            writes.entry(key).or_default().push(e);
        }
    }
    for scan in history {
        if let (Op::Scan(start, n), Some(ret), Some(Returned::Scan(pairs))) =
            (scan.op, scan.ret, &scan.returned)
        {
            check_scan(initial, &writes, start, n, scan.call, ret, pairs)
                .map_err(|e| format!("{} scan({start}, {n}) at {}: {e}", scan.client, scan.call))?;
        }
    }
    Ok(())
}

/// A key's state throughout `[call, ret]`, when the history makes it certain: `Some(value)` or
/// `None` (absent); `Err(())` when it is not certain.
fn certain_state(
    initial: &BTreeMap<u64, u64>,
    writes: &[&Entry],
    call: u64,
    ret: u64,
) -> Result<Option<u64>, ()> {
    // A write that may take effect during the scan: one that failed or never returned (it may
    // land at any time after its call), or one overlapping the scan.
    for w in writes {
        let completed = matches!(w.returned, Some(Returned::Kv(_)));
        if w.call < ret && (!completed || w.ret.is_none_or(|r| r > call)) {
            return Err(());
        }
    }
    // The last write completed before the scan; it must not overlap another (their order would
    // be uncertain).
    let before: Vec<&&Entry> = writes
        .iter()
        .filter(|w| w.ret.is_some_and(|r| r < call))
        .collect();
    let Some(last) = before.iter().max_by_key(|w| w.ret) else {
        let Some(Op::Kv(key, _)) = writes.first().map(|w| w.op) else {
            return Err(());
        };
        return Ok(initial.get(&key).copied());
    };
    let last_call = last.call;
    if before
        .iter()
        .any(|w| !std::ptr::eq(**w, **last) && w.ret.unwrap_or(u64::MAX) > last_call)
    {
        return Err(());
    }
    let (Op::Kv(_, op), Some(Returned::Kv(KvResult::Done(done)))) = (last.op, &last.returned)
    else {
        return Err(());
    };
    match (op, done) {
        (KvOp::Insert(v) | KvOp::Update(v), true) | (KvOp::Upsert(v), _) => Ok(Some(v)),
        (KvOp::Update(_) | KvOp::Delete, false) | (KvOp::Delete, true) => Ok(None),
        // An insert that found the key present leaves a value this analysis does not track.
        _ => Err(()),
    }
}

fn check_scan(
    initial: &BTreeMap<u64, u64>,
    writes: &BTreeMap<u64, Vec<&Entry>>,
    start: u64,
    n: usize,
    call: u64,
    ret: u64,
    pairs: &[(u64, u64)],
) -> Result<(), String> {
    if pairs.len() > n {
        return Err(format!("{} pairs returned", pairs.len()));
    }
    if let Some(&(first, _)) = pairs.first()
        && first < start
    {
        return Err(format!("key {first} is below the start"));
    }
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "keys not strictly increasing: {} then {}",
            w[0].0, w[1].0
        ));
    }
    // The range the scan covered: up to its last key, or everything if it came back short.
    let end = if pairs.len() == n {
        pairs.last().map_or(start, |&(k, _)| k)
    } else {
        u64::MAX
    };
    let returned: BTreeMap<u64, u64> = pairs.iter().copied().collect();
    let mut keys: Vec<u64> = initial.range(start..=end).map(|(&k, _)| k).collect();
    keys.extend(writes.range(start..=end).map(|(&k, _)| k));
    keys.extend(returned.keys().copied());
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let state = match writes.get(&key) {
            Some(list) => certain_state(initial, list, call, ret),
            None => Ok(initial.get(&key).copied()),
        };
        let Ok(state) = state else { continue };
        match (state, returned.get(&key)) {
            (Some(v), Some(&got)) if got != v => {
                return Err(format!(
                    "key {key} returned with {got}, but it held {v} throughout"
                ));
            }
            (Some(v), None) => {
                return Err(format!(
                    "key {key} (value {v}) present throughout was skipped"
                ));
            }
            (None, Some(&got)) => {
                return Err(format!(
                    "key {key} absent throughout was returned (value {got})"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(client: &str, key: u64, op: KvOp, call: u64, ret: u64, r: KvResult) -> Entry {
        Entry {
            client: client.into(),
            op: Op::Kv(key, op),
            call,
            ret: Some(ret),
            returned: Some(Returned::Kv(r)),
        }
    }

    fn scan(start: u64, n: usize, call: u64, ret: u64, pairs: Vec<(u64, u64)>) -> Entry {
        Entry {
            client: "s".into(),
            op: Op::Scan(start, n),
            call,
            ret: Some(ret),
            returned: Some(Returned::Scan(pairs)),
        }
    }

    #[test]
    fn a_scan_must_return_what_was_certainly_present_and_nothing_certainly_absent() {
        let initial: BTreeMap<u64, u64> = [(10, 10), (20, 20), (30, 30)].into_iter().collect();
        let base = vec![
            kv("a", 20, KvOp::Delete, 0, 1, KvResult::Done(true)),
            kv("a", 25, KvOp::Insert(7), 2, 3, KvResult::Done(true)),
        ];
        let ok = [
            base.clone(),
            vec![scan(10, 10, 4, 5, vec![(10, 10), (25, 7), (30, 30)])],
        ]
        .concat();
        assert_eq!(check_history(&initial, &ok), Ok(()));
        let skipped = [
            base.clone(),
            vec![scan(10, 10, 4, 5, vec![(10, 10), (30, 30)])],
        ]
        .concat();
        assert!(check_history(&initial, &skipped).is_err());
        let resurrected = [
            base.clone(),
            vec![scan(
                10,
                10,
                4,
                5,
                vec![(10, 10), (20, 20), (25, 7), (30, 30)],
            )],
        ]
        .concat();
        assert!(check_history(&initial, &resurrected).is_err());
        let unordered = [
            base.clone(),
            vec![scan(10, 10, 4, 5, vec![(10, 10), (30, 30), (25, 7)])],
        ]
        .concat();
        assert!(check_history(&initial, &unordered).is_err());
        // Cut short at 25 (n = 2): 30 was not in its range.
        let short = [
            base.clone(),
            vec![scan(10, 2, 4, 5, vec![(10, 10), (25, 7)])],
        ]
        .concat();
        assert_eq!(check_history(&initial, &short), Ok(()));
        // A delete overlapping the scan makes 10 uncertain either way.
        let mut racing = base;
        racing.push(kv("b", 10, KvOp::Delete, 4, 7, KvResult::Done(true)));
        racing.push(scan(10, 10, 5, 6, vec![(25, 7), (30, 30)]));
        assert_eq!(check_history(&initial, &racing), Ok(()));
    }
}
