//! The compute-side cache budget (ARCHITECTURE §6, "Cache budget"): how many bytes a compute
//! node's slot views and directories may hold, and how views are shrunk to stay within it.
//!
//! **Invariant.** `used` is the sum of [`SlotView::cache_bytes`] over the views installed in the
//! cells of every node, plus every node's directory, as of the installs that have finished. An
//! install adds its view's bytes *before* its compare-and-swap (and takes them back if the swap
//! fails), and subtracts the bytes of the view it replaced only after the swap: so every
//! subtraction follows the addition of the same view, and the counter never wraps.
//!
//! A view is never shrunk in place (readers hold counted references to it): it is replaced, by a
//! copy without pivots (a lean view, which reads every candidate chain) or by an evicted stub,
//! which [`crate::Client`] reloads on its next use. Which views go is chosen as CLOCK does, over
//! the ring of resident views (each installed, not evicted view once): a view used since the
//! hand last passed keeps its place for one more round, and so does a view just installed.
//! Pivots are dropped from every other view before any view is evicted: a lean view costs a few
//! more leaves per GET, an evicted one a READ of its record.
//!
//! Without a limit none of this runs: no counter is touched and no view is marked, so the data
//! path and the model checkers see nothing of it.

use std::collections::VecDeque;

use crate::sync::MembershipMutex as Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::view::{SlotView, ViewCell, ViewRef};

/// A compute node's cache budget and what is charged against it.
#[derive(Debug)]
pub(crate) struct Budget {
    /// Bytes the views and directories may hold (`None`: no limit).
    limit: Option<u64>,
    /// Bytes they hold (see the module's invariant).
    used: AtomicU64,
    /// Installed views that have pivots (while another than the caller's has them, shrinking
    /// drops pivots rather than evicting).
    with_pivots: AtomicU64,
    /// The resident views (node position, slot), each once, in CLOCK order; the front is
    /// where the hand is.
    resident: Mutex<VecDeque<(usize, u64)>>,
}

/// What [`Budget::charge_view`] charged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge {
    bytes: u64,
    pivots: bool,
}

impl Budget {
    pub(crate) fn new(limit: Option<u64>) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            with_pivots: AtomicU64::new(0),
            resident: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether a limit exists (else nothing here runs).
    pub(crate) fn limited(&self) -> bool {
        self.limit.is_some()
    }

    /// Bytes charged now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn over(&self) -> bool {
        self.limit.is_some_and(|limit| self.used() > limit)
    }

    /// Whether nothing more fits.
    pub(crate) fn full(&self) -> bool {
        self.limit.is_some_and(|limit| self.used() >= limit)
    }

    /// Whether `bytes` more fit.
    pub(crate) fn fits(&self, bytes: u64) -> bool {
        self.limit
            .is_none_or(|limit| self.used().saturating_add(bytes) <= limit)
    }

    /// Makes `view` fit what is left: its pivots go if the whole view does not fit.
    pub(crate) fn fit(&self, view: &mut SlotView) {
        if let Some(limit) = self.limit
            && view.pivots.is_some()
            && self.used().saturating_add(view.cache_bytes()) > limit
        {
            view.pivots = None;
        }
    }

    /// Marks `view` used (the CLOCK hand passes it over once), under a limit.
    pub(crate) fn touch(&self, view: &SlotView) {
        if self.limited() {
            view.referenced.mark();
        }
    }

    /// Charges `bytes` (before the install they belong to).
    pub(crate) fn charge(&self, bytes: u64) {
        if self.limited() {
            self.used.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Takes back `bytes` charged earlier (a replaced view's, or a failed install's).
    pub(crate) fn refund(&self, bytes: u64) {
        if self.limited() {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    fn resident(&self) -> impl std::ops::DerefMut<Target = VecDeque<(usize, u64)>> + '_ {
        self.resident.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges `view`, about to be installed in an empty cell; then [`Self::installed`] says
    /// whether it was.
    pub(crate) fn charge_view(&self, view: &SlotView) -> Charge {
        let charge = Charge {
            bytes: view.cache_bytes(),
            pivots: view.pivots.is_some(),
        };
        if self.limited() {
            self.charge(charge.bytes);
            if charge.pivots {
                self.with_pivots.fetch_add(1, Ordering::Relaxed);
            }
            self.touch(view);
        }
        charge
    }

    /// After [`Self::charge_view`]: the view is resident in the cell of slot `at` (node
    /// position, slot) if `ours`, else another thread's view got there first and the charge
    /// is taken back.
    pub(crate) fn installed(&self, charge: Charge, ours: bool, at: (usize, u64)) {
        if !self.limited() {
            return;
        }
        if ours {
            self.resident().push_back(at);
        } else {
            self.refund(charge.bytes);
            if charge.pivots {
                self.with_pivots.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Replaces `current` by `new` in the cell of slot `at` (node position, slot), charging the
    /// difference; whether it did. The new view goes in whole, even past the limit: its caller
    /// is about to use it, and [`Self::shrink`] then makes room among the others.
    pub(crate) fn replace(
        &self,
        cell: &ViewCell,
        current: &SlotView,
        new: ViewRef,
        at: (usize, u64),
    ) -> bool {
        if !self.limited() {
            return cell.replace(current, new);
        }
        self.touch(&new);
        let came_back = current.evicted && !new.evicted;
        if !self.swap(cell, current, new) {
            return false;
        }
        if came_back {
            self.resident().push_back(at);
        }
        true
    }

    /// Runs `install`, which replaces something of `removed` bytes by something of `added` and
    /// says whether it did, with the module's order: `added` charged before, `removed` credited
    /// after (or `added` taken back if nothing was replaced). Whether it did.
    pub(crate) fn exchange(
        &self,
        added: u64,
        removed: u64,
        install: impl FnOnce() -> bool,
    ) -> bool {
        self.charge(added);
        let done = install();
        self.refund(if done { removed } else { added });
        done
    }

    /// [`Self::replace`] without the ring (the caller keeps it).
    fn swap(&self, cell: &ViewCell, current: &SlotView, new: impl Into<ViewRef>) -> bool {
        let new = new.into();
        let (added, removed) = (new.cache_bytes(), current.cache_bytes());
        let (gains, loses) = (new.pivots.is_some(), current.pivots.is_some());
        let done = self.exchange(added, removed, || cell.replace(current, new));
        if done && gains && !loses {
            self.with_pivots.fetch_add(1, Ordering::Relaxed);
        } else if done && loses && !gains {
            self.with_pivots.fetch_sub(1, Ordering::Relaxed);
        }
        done
    }

    /// While over the limit, moves the hand around the ring of resident views and shrinks them
    /// (see the module's documentation). `keep` (node position, slot) is the view the caller is
    /// about to use: it is left as it is. Gives up after four rounds (views used again and
    /// again by other threads meanwhile): the next install tries again. `cell_at` finds the
    /// cell of a (node position, slot).
    pub(crate) fn shrink<'a>(
        &self,
        cell_at: impl Fn((usize, u64)) -> Option<&'a ViewCell>,
        keep: (usize, u64),
    ) {
        if !self.over() {
            return;
        }
        let keep_has_pivots = cell_at(keep).is_some_and(|cell| cell.load().pivots.is_some());
        let mut ring = self.resident();
        let mut steps = 4 * ring.len() + 4;
        while steps > 0 && self.over() {
            steps -= 1;
            let Some(at) = ring.pop_front() else {
                break;
            };
            let Some(cell) = cell_at(at) else {
                continue;
            };
            let view = cell.load();
            if view.evicted {
                // Not resident any more (a stale entry): drop it.
                continue;
            }
            if at == keep || view.referenced.take() {
                ring.push_back(at);
                continue;
            }
            let others_with_pivots = self
                .with_pivots
                .load(Ordering::Relaxed)
                .saturating_sub(u64::from(keep_has_pivots));
            if others_with_pivots > 0 {
                if view.pivots.is_some() {
                    let mut lean = SlotView::clone(&view);
                    lean.pivots = None;
                    self.swap(cell, &view, lean);
                }
                ring.push_back(at);
                continue;
            }
            let evicted = view
                .evicted_stub()
                .is_some_and(|stub| self.swap(cell, &view, stub));
            if !evicted {
                ring.push_back(at);
            }
        }
    }
}
