//! Scans: rounds of one batch of leaf READs, predicted from the cached parent.

use std::sync::Arc;

use rdma_transport::Endpoint;

use super::{Client, Shared};
use crate::TreeError;
use crate::layout::LeafKind;
use crate::page::Page;
use chime::{Geometry, Leaf};

impl<E: Endpoint> Client<E> {
    /// The scan itself, whatever the pool's values (see [`Client::scan`]).
    pub(super) async fn scan_entries(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, u64)>, TreeError> {
        let shared = Arc::clone(&self.shared);
        if let LeafKind::Hopscotch(g) = shared.nodes[shared.node_of(start)].layout.leaf {
            return self.hop_scan_entries(start, n, g).await;
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut from = start;
        let mut attempts = 0;
        while out.len() < n {
            attempts += 1;
            if attempts > shared.config.max_attempts {
                return Err(TreeError::TooManyRetries(shared.config.max_attempts));
            }
            let node = shared.node_of(from);
            let layout = shared.nodes[node].layout;
            let (leaf_no, parent) = self.locate(node, from, 0).await?;
            // Loaded leaves hold about four fifths of their entries.
            let per_leaf = (Page::capacity(layout.page_size) * 4 / 5).max(1);
            let want = (n - out.len()).div_ceil(per_leaf).clamp(1, 64);
            let mut batch = vec![leaf_no];
            if let Some(page) = self.last_parent.take() {
                batch.extend(predict_after(&page, leaf_no, want - 1));
            }
            let mut pages = self.read_pages(node, &batch).await?.into_iter();
            // The first page must hold `from`; otherwise (torn, or a split the cache missed)
            // find it the slow way, moving right.
            let first = match pages.next().flatten() {
                Some(p) if p.is_leaf() && p.covers(from) => p,
                _ => match self.leaf_and_number(node, leaf_no, parent, from).await? {
                    Some((p, _)) => {
                        pages = Vec::new().into_iter();
                        p
                    }
                    None => continue,
                },
            };
            // A round that found its first leaf made progress.
            attempts = 0;
            let mut page = first;
            loop {
                for (k, v) in page.sorted() {
                    if k >= from && out.len() < n {
                        out.push((k, v));
                    }
                }
                let Some(next) = resume_after(&shared, node, page.high) else {
                    return Ok(out);
                };
                from = next;
                if page.high.is_none() {
                    // The node's last leaf: on to the next node.
                    break;
                }
                if out.len() >= n {
                    break;
                }
                match pages.next().flatten() {
                    Some(next) if next.is_leaf() && next.low == from => page = next,
                    // The prediction ran out or missed: the next round locates `from` again.
                    _ => break,
                }
            }
        }
        out.truncate(n);
        Ok(out)
    }
}

impl<E: Endpoint> Client<E> {
    /// [`Client::scan_entries`] over hopscotch leaves: the same rounds, each leaf READ whole
    /// (a hash table holds its keys in no order). A leaf has no low fence: a predicted leaf is
    /// taken only if it is the sibling of the one before, which starts where that one ends.
    async fn hop_scan_entries(
        &mut self,
        start: u64,
        n: usize,
        g: Geometry,
    ) -> Result<Vec<(u64, u64)>, TreeError> {
        let shared = Arc::clone(&self.shared);
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut from = start;
        while out.len() < n {
            let node = shared.node_of(from);
            let (leaf_no, _) = self.locate(node, from, 0).await?;
            let per_leaf = (g.slots() * 4 / 5).max(1);
            let want = (n - out.len()).div_ceil(per_leaf).clamp(1, 64);
            let mut batch = vec![leaf_no];
            if let Some(page) = self.last_parent.take() {
                batch.extend(predict_after(&page, leaf_no, want - 1));
            }
            let mut leaves = self.hop_read_leaves(node, &batch, g).await?.into_iter();
            // The first leaf must hold `from`; otherwise (torn, or a split the cache missed)
            // find it the slow way, moving right.
            let mut leaf: Leaf = match leaves.next().flatten() {
                Some(l) if l.high.is_none_or(|h| from < h) => l,
                _ => {
                    leaves = Vec::new().into_iter();
                    self.hop_leaf_covering(node, leaf_no, from, g).await?.0
                }
            };
            let mut numbers = batch.into_iter().skip(1);
            loop {
                let mut taken: Vec<(u64, u64)> = leaf.entries().filter(|e| e.0 >= from).collect();
                taken.sort_unstable();
                out.extend(taken.into_iter().take(n - out.len()));
                let Some(next) = resume_after(&shared, node, leaf.high) else {
                    return Ok(out);
                };
                from = next;
                if leaf.high.is_none() {
                    break;
                }
                if out.len() >= n {
                    break;
                }
                match (leaves.next().flatten(), numbers.next()) {
                    (Some(next), Some(no)) if no == leaf.sibling => leaf = next,
                    // The prediction ran out or missed: the next round locates `from` again.
                    _ => break,
                }
            }
        }
        out.truncate(n);
        Ok(out)
    }
}

/// Where a scan goes on after a leaf of memory node `node` whose high fence is `high`: the
/// fence, or after the node's last leaf the next node's first key; `None` after the last node's.
fn resume_after(shared: &Shared, node: usize, high: Option<u64>) -> Option<u64> {
    match high {
        Some(high) => Some(high),
        None => shared.nodes.get(node + 1).map(|next| next.layout.key_lo),
    }
}

/// Up to `want` children `parent` lists after `leaf_no`, in key order.
fn predict_after(parent: &Page, leaf_no: u64, want: usize) -> Vec<u64> {
    let children: Vec<u64> = std::iter::once(parent.leftmost)
        .chain(parent.entries().map(|e| e.1))
        .collect();
    match children.iter().position(|&c| c == leaf_no) {
        Some(at) => children[at + 1..].iter().take(want).copied().collect(),
        None => Vec::new(),
    }
}
