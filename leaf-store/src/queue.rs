//! The retraining queue, compute side: enqueue a model slot for retraining.
//!
//! The ring's words are defined in [`RingLayout`] (`ring.rs`); the memory node's worker (the
//! `retrainer` crate) consumes them. Enqueueing a slot:
//! 1. set the slot's bit in the queued bitmap by CAS (read the word, CAS it with the bit set;
//!    if the bit is already set, the slot is pending and nothing more is done) — so no slot is
//!    ever queued twice while pending;
//! 2. FAA the tail to claim a position;
//! 3. WRITE the entry at that position: the slot, tagged with the position's lap
//!    ([`RingEntry`]), so the consumer tells it from an entry of an earlier lap.
//!
//! Because every pending slot holds its bit, at most `slots` entries are pending, and bulk load
//! gives the ring at least one entry per slot: the ring cannot overflow. The memory node consumes
//! from the head and clears the bit once the slot's retraining is done.
//!
//! A compute node that dies between steps 1 and 3 leaves its slot marked but unnamed, and after
//! step 2 also a claimed position that is never written. The worker skips a position left
//! unwritten for `RetrainConfig::ring_stall_limit` and then queues again every marked slot that
//! no entry names, so neither stops retraining for good.

use rdma_transport::Endpoint;

use crate::{Layout, LeafStoreError, RingEntry, RingLayout};

/// What [`enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// The slot was queued at this ring position.
    At(u64),
    /// The slot was already pending; nothing changed.
    AlreadyPending,
}

/// Queues `slot` for retraining (at most a few round trips; only done when a slot's SLT reaches
/// the retraining threshold, so rarely).
pub fn enqueue<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    slot: u64,
) -> Result<Enqueued, LeafStoreError> {
    if slot >= layout.slot_capacity() {
        return Err(LeafStoreError::InvalidConfig(format!(
            "slot {slot} does not exist"
        )));
    }
    let ring = RingLayout::new(*layout);
    let (word_addr, bit) = ring.queued_bit(slot);
    let mut word = ep.read_word(word_addr)?;
    loop {
        if word & bit != 0 {
            return Ok(Enqueued::AlreadyPending);
        }
        let old = ep.cas(word_addr, word, word | bit)?;
        if old == word {
            break;
        }
        word = old;
    }
    let position = ep.faa(ring.tail(), 1)?;
    let entry = RingEntry::new(position, layout.superblock().ring_capacity, slot).ok_or(
        LeafStoreError::InvalidConfig(format!("slot {slot} does not fit a ring entry")),
    )?;
    ep.write_word(ring.entry(position), entry.raw())?;
    Ok(Enqueued::At(position))
}

/// Whether `slot` is pending in the queue (its bit is set).
pub fn is_pending<E: Endpoint>(
    ep: &mut E,
    layout: &Layout,
    slot: u64,
) -> Result<bool, LeafStoreError> {
    let (word_addr, bit) = RingLayout::new(*layout).queued_bit(slot);
    Ok(ep.read_word(word_addr)? & bit != 0)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{BulkLoadConfig, bulk_load};
    use rdma_transport::Transport;
    use sim_transport::SimTransport;

    use super::*;

    #[test]
    fn a_slot_is_queued_once_while_pending() {
        let transport = SimTransport::anonymous(&[4 << 20]).expect("pool");
        let node = transport.memory_nodes()[0];
        let mut ep = transport.endpoint().expect("endpoint");
        let pairs = (0..5000u64).map(|k| (k * 7, k)).collect();
        let config = BulkLoadConfig {
            slot_leaves: 4,
            ..Default::default()
        };
        let layout = bulk_load(&mut ep, node, pairs, &config)
            .expect("load")
            .layout;
        assert!(
            layout.slot_capacity() > 70,
            "need slots on several bitmap words"
        );
        assert_eq!(enqueue(&mut ep, &layout, 3), Ok(Enqueued::At(0)));
        assert_eq!(enqueue(&mut ep, &layout, 3), Ok(Enqueued::AlreadyPending));
        assert_eq!(enqueue(&mut ep, &layout, 70), Ok(Enqueued::At(1)));
        assert_eq!(enqueue(&mut ep, &layout, 4), Ok(Enqueued::At(2)));
        assert!(is_pending(&mut ep, &layout, 4).expect("read"));
        assert!(!is_pending(&mut ep, &layout, 5).expect("read"));
        let ring = RingLayout::new(layout);
        let entry = RingEntry::from_raw(ep.read_word(ring.entry(1)).expect("read"));
        let capacity = layout.superblock().ring_capacity;
        assert_eq!(entry.slot_at(1, capacity), Some(70));
        assert_eq!(entry.slot_at(1 + capacity, capacity), None);
        assert_eq!(ep.read_word(ring.tail()), Ok(3));
        assert!(enqueue(&mut ep, &layout, layout.slot_capacity()).is_err());
        assert!(crate::verify(&mut ep, node).expect("verify").is_clean());
    }
}
