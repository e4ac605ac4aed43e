//! Every leaf image that lands is a read: R1 checked on every leaf WRITE the simulator lands.
//!
//! R1 (ARCHITECTURE §4, "Claims"): a valid leaf that claims a key holds that key's current state.
//! So each WRITE that lands a whole leaf whose image validates as that leaf is, for every key it
//! claims, a GET answered at the moment it landed: it goes into the history as one (the client
//! `"leaf image"`), and the linearizability check judges it with the operations around it. An
//! image that takes a key's value back to an older one, or shows a key absent that a completed
//! insert put there, fails the run where the leaf was written, not only if a reader happened to
//! read it then.
//!
//! Not judged: an image written to another leaf than its own (a redo leaf's copy, which never
//! validates there), a WRITE a kill cut short (never told), and pools with byte values (the leaves
//! hold references, not the values the history knows).

use std::collections::HashMap;

use leaf_store::{Claimed, Layout, Leaf};
use rdma_transport::RemoteAddr;
use sim_transport::SimTransport;

/// Where each memory node's leaves are: the first leaf's offset, a leaf's bytes, how many.
#[derive(Debug, Clone, Copy)]
struct Region {
    base: u64,
    bytes: u64,
    capacity: u64,
}

impl Region {
    /// The leaf a WRITE of `len` bytes at `offset` covers whole, if it covers exactly one.
    fn leaf_at(&self, offset: u64, len: u64) -> Option<u64> {
        let from = offset.checked_sub(self.base)?;
        let leaf = from / self.bytes;
        (len == self.bytes && from % self.bytes == 0 && leaf < self.capacity).then_some(leaf)
    }
}

/// Calls `read(key, state)` for every key of `keys` that a leaf image landing on `transport`
/// claims, with the state the image gives it (see the module documentation), on the thread
/// that lands it.
pub(crate) fn observe(
    transport: &SimTransport,
    layouts: &[Layout],
    keys: Vec<u64>,
    read: impl Fn(u64, Option<u64>) + Send + Sync + 'static,
) {
    let regions: HashMap<u16, Region> = layouts
        .iter()
        .map(|l| {
            (
                l.node(),
                Region {
                    base: l.leaf_addr(0).offset(),
                    bytes: l.leaf_bytes(),
                    capacity: l.leaf_capacity(),
                },
            )
        })
        .collect();
    transport.observe_writes(Box::new(move |addr: RemoteAddr, data: &[u8]| {
        let Some(leaf) = regions
            .get(&addr.node())
            .and_then(|r| r.leaf_at(addr.offset(), data.len() as u64))
        else {
            return;
        };
        for &key in &keys {
            if let Ok(Claimed::Covered(state)) = Leaf::lookup_claimed(leaf, data, key) {
                read(key, state);
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::Region;

    #[test]
    fn only_a_write_of_exactly_one_whole_leaf_is_a_leaf_image() {
        let r = Region {
            base: 4096,
            bytes: 128,
            capacity: 10,
        };
        assert_eq!(r.leaf_at(4096, 128), Some(0));
        assert_eq!(r.leaf_at(4096 + 3 * 128, 128), Some(3));
        assert_eq!(r.leaf_at(4096 + 8, 128), None, "not at a leaf's start");
        assert_eq!(r.leaf_at(4096, 8), None, "a word of the leaf");
        assert_eq!(r.leaf_at(4096 + 10 * 128, 128), None, "past the region");
        assert_eq!(r.leaf_at(0, 128), None, "before it");
    }
}
