//! Scans: rounds of one batch of leaf READs, predicted from the cached parent.

use std::sync::Arc;

use rdma_transport::Endpoint;

use super::Client;
use crate::TreeError;
use crate::page::Page;

impl<E: Endpoint> Client<E> {
    /// The scan itself, whatever the pool's values (see [`Client::scan`]).
    pub(super) async fn scan_entries(
        &mut self,
        start: u64,
        n: usize,
    ) -> Result<Vec<(u64, u64)>, TreeError> {
        let shared = Arc::clone(&self.shared);
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
                match page.high {
                    Some(high) => from = high,
                    None => {
                        // The node's last leaf: on to the next node, or done.
                        match shared.nodes.get(node + 1) {
                            Some(next) => from = next.layout.key_lo,
                            None => return Ok(out),
                        }
                        break;
                    }
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
