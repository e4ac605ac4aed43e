//! Taking work: the ring (the paper's CirQ), re-queueing slots nobody names, the idle sweep.

use super::*;

impl<E: Endpoint> Retrainer<E> {
    /// Moves queued slots from the ring into the worker's priority queue (most used SLT first).
    /// Stops at a position claimed but not yet written; one left unwritten for
    /// [`RetrainConfig::ring_stall_limit`] is skipped and marked slots are queued again.
    pub fn poll(&mut self) -> Result<usize, RetrainError> {
        let capacity = self.layout.superblock().ring_capacity;
        let tail = self.ep.read_word(self.ring.tail())?;
        let first = self.head;
        let mut taken = 0;
        let mut skipped = false;
        while self.head < tail {
            let entry = RingEntry::from_raw(self.ep.read_word(self.ring.entry(self.head))?);
            let Some(slot) = entry.slot_at(self.head, capacity) else {
                match self.stalled {
                    Some((position, since))
                        if position == self.head
                            && since.elapsed() >= self.config.ring_stall_limit =>
                    {
                        self.stalled = None;
                        self.head += 1;
                        self.stats.ring_positions_skipped += 1;
                        skipped = true;
                        continue;
                    }
                    Some((position, _)) if position == self.head => {}
                    _ => self.stalled = Some((self.head, Instant::now())),
                }
                break;
            };
            self.head += 1;
            if slot < self.layout.slot_capacity() {
                self.queue_slot(slot);
                taken += 1;
            }
        }
        if self.head != first {
            self.ep.write_word(self.ring.head(), self.head)?;
        }
        if skipped || self.requeue_owed {
            self.requeue_owed = true;
            taken += self.requeue_marked()? as usize;
            self.requeue_owed = false;
        }
        Ok(taken)
    }

    /// Adds `slot` to this worker's queue, ranked by its record's SLT use. Never loses the slot:
    /// if its use cannot be read, it is queued with the lowest rank.
    pub(super) fn queue_slot(&mut self, slot: u64) {
        let slot_use = self.slot_use(slot).unwrap_or(0);
        self.pending.push((slot_use, Reverse(slot)));
    }

    fn slot_use(&mut self, slot: u64) -> Result<u64, RetrainError> {
        let record = RemoteAddr::unpack(self.ep.read_word(self.layout.slot_entry_addr(slot))?);
        Ok(ModelHeader::from_raw(self.ep.read_word(record)?).slot_use())
    }

    /// Queues again every slot marked queued that neither an entry still in the ring nor this
    /// worker's queue holds (its claimant died, or a previous worker took it and stopped).
    /// Returns how many. One READ of the ring's entries, one of the bitmap.
    pub(super) fn requeue_marked(&mut self) -> Result<u64, RetrainError> {
        let capacity = self.layout.superblock().ring_capacity;
        let tail = self.ep.read_word(self.ring.tail())?;
        let mut entries = vec![0u8; 8 * capacity as usize];
        self.ep.read(self.ring.entries(), &mut entries)?;
        let mut held: HashSet<u64> = (self.head..tail.max(self.head))
            .take(capacity as usize)
            .filter_map(|position| {
                let raw = le_word(&entries, (position % capacity.max(1)) as usize);
                RingEntry::from_raw(raw).slot_at(position, capacity)
            })
            .collect();
        held.extend(self.pending.iter().map(|&(_, Reverse(slot))| slot));
        let mut bitmap = vec![0u8; 8 * self.layout.slot_capacity().div_ceil(64) as usize];
        self.ep.read(self.ring.bitmap(), &mut bitmap)?;
        let mut requeued = 0;
        for (index, word) in bitmap.chunks_exact(8).enumerate() {
            let mut bits = le_word(word, 0);
            while bits != 0 {
                let slot = 64 * index as u64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                if slot >= self.layout.slot_capacity() || held.contains(&slot) {
                    continue;
                }
                self.queue_slot(slot);
                requeued += 1;
            }
        }
        self.stats.requeued += requeued;
        Ok(requeued)
    }

    /// Queues every slot whose SLT has handed out at least `threshold` slots (one READ of the slot
    /// table, then the header READs in as few batches as the limits allow). Returns how many were
    /// queued.
    pub fn sweep(&mut self, threshold: u64) -> Result<usize, RetrainError> {
        let table = read_slot_table(&mut self.ep, &self.layout)?;
        let headers = record_prefixes(&mut self.ep, &table, 8)?;
        let mut queued = 0;
        for (slot, h) in headers.chunks_exact(8).enumerate() {
            let header = ModelHeader::from_raw(le_word(h, 0));
            if threshold > 0 && header.slot_use() >= threshold && !header.is_retired() {
                self.pending.push((header.slot_use(), Reverse(slot as u64)));
                queued += 1;
            }
        }
        Ok(queued)
    }
}
