//! The quickcheck case of the model-based tests: an initial load, then a sequence of operations
//! run against an oracle (a `BTreeMap`, say), with how a case is drawn and shrunk, how a run's
//! outcome is told to quickcheck, and how a property is checked.
//!
//! A test names its operations (an `enum` implementing quickcheck's `Arbitrary`), says in a
//! [`CaseOp`] impl how many entries a case loads, how many operations it runs and how one entry
//! is drawn, and checks a `fn(Case<Op>) -> TestResult` with [`check`]; the run itself (the store,
//! the oracle, the final verification) stays with the test.
//!
//! **Invariant** — shrinking a [`Case`] shortens its operations and keeps its load as drawn: the
//! failing sequence gets shorter, on the same bulk-loaded contents.
//!
//! Compiled only with the feature `quickcheck`, which adds the `quickcheck` dependency to the
//! test crates that turn it on. Its own tests need the feature too: `cargo test -p testkit
//! --features quickcheck` (a test run that also builds one of those crates turns it on).

use std::fmt::Debug;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

/// An operation of a model-based sequence, and how a [`Case`] of them is drawn.
pub trait CaseOp: Arbitrary + Debug {
    /// One key of the initial load, with whatever else it loads (its value's length, say).
    type Entry: Clone + Debug + Ord + Send + 'static;
    /// A case draws at least this many entries for its initial load (then keeps one per key).
    const MIN_LOADS: usize = 4;
    /// A case draws between `MIN_LOADS` and `MIN_LOADS + LOADS - 1` entries for its initial load
    /// (then keeps one per key).
    const LOADS: usize;
    /// A case holds between 1 and `OPS` operations.
    const OPS: usize;

    /// Draws one entry of the initial load.
    fn entry(g: &mut Gen) -> Self::Entry;

    /// The key of `entry`.
    fn key(entry: &Self::Entry) -> u64;
}

/// A model-based case: the entries bulk-loaded (sorted, one per key), then the operations run
/// against the oracle. Shrinking shortens the operations and keeps the load.
#[derive(Debug, Clone)]
pub struct Case<O: CaseOp> {
    /// What is bulk-loaded.
    pub initial: Vec<O::Entry>,
    /// What runs then, in order.
    pub ops: Vec<O>,
}

impl<O: CaseOp> Arbitrary for Case<O> {
    fn arbitrary(g: &mut Gen) -> Self {
        let mut initial: Vec<O::Entry> = (0..usize::arbitrary(g) % O::LOADS + O::MIN_LOADS)
            .map(|_| O::entry(g))
            .collect();
        initial.sort_unstable();
        initial.dedup_by_key(|entry| O::key(entry));
        let ops = (0..usize::arbitrary(g) % O::OPS + 1)
            .map(|_| O::arbitrary(g))
            .collect();
        Case { initial, ops }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        let initial = self.initial.clone();
        Box::new(self.ops.shrink().map(move |ops| Case {
            initial: initial.clone(),
            ops,
        }))
    }
}

/// A run's outcome as quickcheck takes it: its error is the failure's message.
pub fn outcome(run: Result<(), String>) -> TestResult {
    match run {
        Ok(()) => TestResult::passed(),
        Err(e) => TestResult::error(e),
    }
}

/// Checks `prop` on `tests` cases, drawing at most four times as many.
pub fn check<O: CaseOp>(tests: u64, prop: fn(Case<O>) -> TestResult) {
    QuickCheck::new()
        .tests(tests)
        .max_tests(tests * 4)
        .quickcheck(prop);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Op(u64);

    impl Arbitrary for Op {
        fn arbitrary(g: &mut Gen) -> Self {
            Op(u64::arbitrary(g) % 10)
        }

        fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
            Box::new(self.0.shrink().map(Op))
        }
    }

    impl CaseOp for Op {
        type Entry = (u64, u8);
        const MIN_LOADS: usize = 2;
        const LOADS: usize = 30;
        const OPS: usize = 20;

        fn entry(g: &mut Gen) -> (u64, u8) {
            (u64::arbitrary(g) % 16, u8::arbitrary(g))
        }

        fn key(entry: &(u64, u8)) -> u64 {
            entry.0
        }
    }

    #[test]
    fn a_case_loads_sorted_distinct_keys_and_runs_between_one_and_ops_operations() {
        let mut g = Gen::new(100);
        for _ in 0..500 {
            let case = Case::<Op>::arbitrary(&mut g);
            assert!(!case.initial.is_empty(), "{case:?}");
            assert!(case.initial.len() < Op::MIN_LOADS + Op::LOADS, "{case:?}");
            assert!(case.initial.windows(2).all(|w| w[0].0 < w[1].0), "{case:?}");
            assert!((1..=Op::OPS).contains(&case.ops.len()), "{case:?}");
        }
    }

    #[test]
    fn shrinking_shortens_the_operations_and_keeps_the_load() {
        let mut g = Gen::new(100);
        for _ in 0..50 {
            let case = Case::<Op>::arbitrary(&mut g);
            for smaller in case.shrink().take(50) {
                assert_eq!(smaller.initial, case.initial);
                assert!(smaller.ops.len() <= case.ops.len());
            }
        }
    }

    #[test]
    fn an_error_fails_the_property_and_ok_passes_it() {
        assert!(!outcome(Ok(())).is_failure());
        assert!(outcome(Err("no".to_string())).is_failure());
        check::<Op>(20, |case| {
            outcome(if case.ops.is_empty() {
                Err("empty".into())
            } else {
                Ok(())
            })
        });
    }
}
