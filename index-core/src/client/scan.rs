//! SCAN: rounds of one batch over the leaves the cached views predict, each round bounded by
//! the records it read through.

use leaf_store::{LeafStoreError, LeafTableEntry, ModelHeader};
use rdma_transport::{Endpoint, RemoteAddr};

use crate::IndexError;
use crate::store::NodeCache;
use crate::view::SlotView;

use super::cache::{Freshness, route};
use super::*;

impl<E: Endpoint> Client<E> {
    /// SCAN: rounds of one batch each. A round starts at the key `from` (at first `start`): it
    /// reads the chain that owns `from` and the chains after it, across the node's slots, until
    /// enough leaves — those chains own every key of `[from, bound)`, where `bound` is the next
    /// chain's pivot (or the next slot's or node's first key), fixed when that record was
    /// trained. Once the round's headers validate it, every present key of `[from, bound)` was
    /// read, and the next round starts at `bound`, whichever record serves it by then: a
    /// retraining between rounds (new trained leaves, empty ones dropped) cannot skip or repeat
    /// keys. No arithmetic depends on `n` beyond a saturating leaf count.
    pub(super) async fn scan_inner(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
        // SAFETY: used only within this operation, which borrows `self` throughout.
        let caches = unsafe { self.op_caches() };
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(n.min(4096));
        let mut from = start;
        // As a GET's (`Client::get_inner`): read again after a pause (`ReadRetries`).
        let mut retries = super::ReadRetries::new(&caches.config);
        while out.len() < n {
            let node_index = caches.node_of(from);
            let node = &caches.nodes[node_index];
            let node_end = caches.partition.get(node_index + 1).copied();
            let fill = node.layout.superblock().fill.max(1) as usize;
            let want_leaves = (n - out.len())
                .div_ceil(fill)
                .saturating_add(1)
                .min(MAX_SCAN_LEAVES);
            let Some(round) = self
                .plan_scan_round(node, from, node_end, want_leaves)
                .await?
            else {
                retries.again(self.waiting).await?;
                continue;
            };
            let mut words: Vec<RemoteAddr> = round.bound_word.into_iter().collect();
            words.extend(round.records.iter().map(|r| r.record));
            let read = self.read_batch(&node.layout, &round.leaves, &words).await?;
            let (bound_read, headers) = read.split_at(usize::from(round.bound_word.is_some()));
            let mut stale: Vec<u64> = Vec::new();
            let mut retired: Vec<(u64, RemoteAddr)> = Vec::new();
            for (r, &seen) in round.records.iter().zip(headers) {
                match Freshness::of(r.header, ModelHeader::from_raw(seen)) {
                    Freshness::Fresh => {}
                    Freshness::Stale => stale.push(r.slot),
                    Freshness::Retired => retired.push((r.slot, r.record)),
                }
            }
            if !retired.is_empty() {
                let current = self.still_current(node, &retired, round.known)?;
                stale.extend(
                    retired
                        .iter()
                        .zip(current)
                        .filter(|(_, ok)| !ok)
                        .map(|(r, _)| r.0),
                );
            }
            for &s in &stale {
                let loaded = self.view(node, s)?;
                self.refresh(node, &loaded)?;
            }
            let contents = if stale.is_empty() {
                self.decode_leaves(&node.layout, &round.leaves)?
            } else {
                None
            };
            let Some(contents) = contents else {
                retries.again(self.waiting).await?;
                continue;
            };
            let bound = match (round.bound, bound_read.first()) {
                (Bound::Key(key), _) => Some(key),
                (Bound::ReadPivot, Some(&pivot)) => Some(pivot),
                (Bound::ReadPivot, None) | (Bound::End, _) => None,
            };
            // A pivot read from an old record may lie past what that record still serves.
            let bound = match (bound, round.limits.last()) {
                (Some(b), Some(&limit)) => Some(b.min(limit.saturating_add(1))),
                (bound, _) => bound,
            };
            for (leaf_contents, &limit) in contents.iter().zip(&round.limits) {
                for &(k, v) in leaf_contents.entries() {
                    // Chains are sorted and follow each other in key order; a split in progress
                    // can show a key twice, at adjacent places. A leaf read through a record
                    // gives only the keys that record serves.
                    if k >= from
                        && k <= limit
                        && bound.is_none_or(|b| k < b)
                        && out.last().is_none_or(|&(last, _)| k > last)
                    {
                        out.push((k, v));
                    }
                }
            }
            match bound {
                Some(b) if b > from => from = b,
                Some(_) => {
                    return Err(IndexError::Layout(LeafStoreError::CorruptRecord {
                        slot: round.records.last().map_or(0, |r| r.slot),
                        reason: format!("scan bound does not advance past key {from}"),
                    }));
                }
                None => break,
            }
        }
        out.truncate(n);
        Ok(out)
    }

    /// The chains one scan round reads from `from` on (see [`Self::scan_inner`]); `None` if a
    /// cached view was inconsistent and has been refreshed (plan again).
    async fn plan_scan_round(
        &mut self,
        node: &NodeCache,
        from: u64,
        node_end: Option<u64>,
        want_leaves: usize,
    ) -> Result<Option<ScanRound>, IndexError> {
        let mut round = ScanRound {
            leaves: Vec::new(),
            limits: Vec::new(),
            known: u64::MAX,
            records: Vec::new(),
            bound: Bound::End,
            bound_word: None,
        };
        // Each slot's view is loaded once and used for everything the round takes from that slot
        // (leaf indexes, chains, pivots, header): a sibling thread may replace the cell meanwhile,
        // and a leaf index of one record applied to another would skip or repeat chains.
        let routed = route!(self, node, from, Self::held);
        round.known = routed.known;
        let mut end = routed.end;
        let mut loaded = routed.view;
        // A view without pivots (lean mode, or one the cache budget shrank) does not know the
        // owner: read every candidate, which includes it.
        let (mut leaf, mut must_reach) = match loaded.owner(from) {
            Some(owner) => (owner, owner),
            None => {
                let candidates = loaded.model.owner_candidates(from);
                (candidates.first, candidates.last)
            }
        };
        // Leaves that may hold keys from `from` on: the candidates before the last one may all
        // lie below it, so they do not count towards `want_leaves` (counted, a round of a view
        // without pivots stopped short of `n` keys about half the time and took a second round).
        let mut counted = 0;
        loop {
            let view: &SlotView = &loaded;
            // Chain 0 owns keys from the slot's first key, whatever its pivot: a record ends
            // before a later chain only.
            if leaf >= view.leaves()
                || (leaf > 0
                    && view
                        .pivots
                        .as_ref()
                        .is_some_and(|p| p.get(leaf as usize).is_some_and(|&p| p > end)))
            {
                // The slot ends here: its last chain owns keys up to the record's last key (or,
                // for an old record whose split is published, the new slot's first key minus
                // one), and the slot serving the next key starts right after it.
                let next = end.checked_add(1);
                let Some(next) = next.filter(|&k| node_end.is_none_or(|end| k < end)) else {
                    round.bound = node_end.map_or(Bound::End, Bound::Key);
                    break;
                };
                if counted >= want_leaves {
                    round.bound = Bound::Key(next);
                    break;
                }
                let routed = route!(self, node, next, Self::held);
                round.known = round.known.min(routed.known);
                end = routed.end;
                loaded = routed.view;
                leaf = 0;
                must_reach = 0;
                continue;
            }
            if counted >= want_leaves && leaf > must_reach {
                // The next chain's pivot bounds what this round owns.
                match &view.pivots {
                    Some(pivots) => round.bound = Bound::Key(pivots[leaf as usize]),
                    None => {
                        round.bound = Bound::ReadPivot;
                        round.bound_word =
                            Some(view.record.saturating_add(view.layout.pivots() + 8 * leaf));
                    }
                }
                break;
            }
            let Some(chain) = view.chain(leaf) else {
                self.refresh(node, view)?;
                return Ok(None);
            };
            if round.records.last().is_none_or(|r| r.slot != view.slot) {
                round.records.push(RoundRecord {
                    slot: view.slot,
                    header: view.header,
                    record: view.record,
                });
            }
            if leaf >= must_reach {
                counted += chain.len();
            }
            round.limits.extend(std::iter::repeat_n(end, chain.len()));
            round.leaves.extend(chain);
            leaf += 1;
        }
        Ok(Some(round))
    }
}

/// Most leaves one scan round reads in its batch.
const MAX_SCAN_LEAVES: usize = 512;

/// One scan round's plan.
struct ScanRound {
    leaves: Vec<LeafTableEntry>,
    /// For each leaf, the last key the record it was reached through serves.
    limits: Vec<u64>,
    /// The fewest slots a directory that routed the round knew of.
    known: u64,
    /// Every record whose chains the round reads, in order.
    records: Vec<RoundRecord>,
    bound: Bound,
    /// Lean mode: the pivot word to read for [`Bound::ReadPivot`].
    bound_word: Option<RemoteAddr>,
}

struct RoundRecord {
    slot: u64,
    header: ModelHeader,
    record: RemoteAddr,
}

/// Where a scan round's owned keys end.
enum Bound {
    /// Before this key.
    Key(u64),
    /// Before the pivot read in the round's batch.
    ReadPivot,
    /// Nowhere: the round reaches the end of the key space.
    End,
}
