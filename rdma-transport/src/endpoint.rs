//! The `Transport` and `Endpoint` traits.

use crate::{Completion, PostedBatch, RemoteAddr, Stats, Ticket, TransportError, Verb};

/// What a process knows about one memory node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNodeInfo {
    /// The node's id, as used in [`RemoteAddr::node`].
    pub id: u16,
    /// Size in bytes of the node's registered region; valid offsets are `0..region_len`.
    pub region_len: u64,
}

/// A process's handle on the memory nodes. Cheap to share between threads; each thread takes its
/// own [`Endpoint`].
pub trait Transport: Send + Sync {
    /// The per-thread endpoint type.
    type Endpoint: Endpoint;

    /// A new endpoint (on real hardware, a connected RC queue pair to every memory node).
    fn endpoint(&self) -> Result<Self::Endpoint, TransportError>;

    /// The memory nodes this transport reaches, in id order.
    fn memory_nodes(&self) -> &[MemoryNodeInfo];

    /// The memory node with id `id`, if known.
    fn memory_node(&self, id: u16) -> Option<MemoryNodeInfo> {
        self.memory_nodes().iter().copied().find(|n| n.id == id)
    }
}

/// A memory node's power to cut compute nodes off (fencing).
///
/// Guarantee: once [`Fence::fence`] returns `Ok(Fenced::Done)`, no verb posted through the named
/// connection — earlier or later — takes effect any more, and later ones fail with
/// [`TransportError::Fenced`]; on a backend whose fence only breaks the connection (verbs), the
/// compute side learns it a moment later: batches in flight when its connection fails, and calls
/// until it has heard the memory node's notice, fail with `Broken` first. `Fenced` always means
/// that the batch executed nothing. A verb that was executing when the fence came completed before
/// `fence` returned or never takes effect — except a WRITE larger than one packet
/// ([`Endpoint::packet_bytes`]): its packets land whole, in order, so a prefix of them may have
/// landed and the rest never will. Whoever writes such a WRITE in place must be able to finish
/// it from elsewhere (the index's redo leaves, docs/ARCHITECTURE.md §8).
///
/// A fence never waits on the compute node: where a batch of a live process is still in flight
/// (a process stopped inside it), it returns [`Fenced::InFlight`] at once — no new batch of the
/// connection starts any more, but the one in flight may still land — and the caller fences
/// again later. A memory node's single CPU must not spend its time waiting on one unresponsive
/// compute node while others need recovery and retraining.
pub trait Fence: Send + Sync {
    /// Cuts connection `connection` (an [`Endpoint::connection_id`]) off, or starts to. Fencing
    /// an unknown or already fenced connection is not an error (`Done`).
    fn fence(&self, connection: u64) -> Result<Fenced, TransportError>;
}

/// How far a [`Fence::fence`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Nothing posted through the connection takes effect any more.
    Done,
    /// No new batch starts, but one is still in flight (its process is alive and stopped inside
    /// it): fence again later; until then, what it holds must not be recovered.
    InFlight,
}

/// One thread's connection to the memory nodes. `Send` but not meant to be shared.
///
/// Guarantees every implementation gives (checked by [`crate::conformance`]):
/// * the verbs of one [`Endpoint::batch`] execute in order and count as **one** round trip;
/// * CAS and FAA return the remote word's previous value; CAS swaps only on equality;
/// * a malformed verb (out of bounds, misaligned atomic, unknown memory node) is an error, and a
///   batch containing one executes none of its verbs;
/// * batches posted with [`Endpoint::post`] may be in flight together and complete in any
///   order, but on one memory node they execute in the order they were posted (one RC queue
///   pair): the verbs of a later batch are ordered after an earlier batch's exactly as if they
///   had been appended to it (WRITEs and atomics take effect in order, a READ sees every earlier
///   WRITE and atomic; a WRITE may overtake an earlier READ's return unless fenced). Batches to
///   different memory nodes are not ordered with each other. A [`Endpoint::batch`] is a post
///   and a wait, ordered after every batch posted before it.
pub trait Endpoint: Send {
    /// Execute `verbs` as one doorbell batch: posted together, executed in order, one completion,
    /// one round trip. Atomics' `old` fields are filled in. An empty batch costs nothing.
    ///
    /// If the batch fails after validation (a broken connection, an injected fault), verbs before
    /// the failing one may have executed, as on a real queue pair.
    fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError>;

    /// Posts `verbs` as one batch (the ordering and limits of [`Endpoint::batch`]) without
    /// waiting for it; its results come back through [`Endpoint::poll`]. The batch is copied:
    /// nothing of `verbs` is borrowed once this returns (see [`PostedBatch`]), and its results
    /// are copied back by [`Completion::deliver`].
    ///
    /// A malformed batch is refused here or by its completion, and executes nothing either way;
    /// a broken endpoint refuses every post.
    ///
    /// The default executes the batch now, through [`Endpoint::batch`] on the copy, and returns
    /// a ticket that is complete already: a transport that cannot overlap batches needs nothing
    /// more.
    fn post(&mut self, verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
        let mut posted = PostedBatch::copy_of(verbs);
        let outcome = posted.execute(|verbs| self.batch(verbs));
        Ok(Ticket::ready(Completion::new(posted, outcome)))
    }

    /// The completion of the batch `ticket` names if it has completed, else the ticket back
    /// (call again later). Never blocks: each call also moves the endpoint's batches along
    /// (polls its completion queues, starts what waits). A batch that does not complete within
    /// the transport's timeout completes with [`TransportError::Broken`].
    fn poll(&mut self, ticket: Ticket) -> Result<Completion, Ticket> {
        ticket.into_ready()
    }

    /// Waits (spinning on [`Endpoint::poll`]) for the batch `ticket` names.
    fn wait(&mut self, mut ticket: Ticket) -> Completion {
        loop {
            match self.poll(ticket) {
                Ok(done) => return done,
                Err(pending) => ticket = pending,
            }
            std::hint::spin_loop();
        }
    }

    /// Gives up on the completion of `ticket`'s batch (its poster is gone): the batch still
    /// executes, and its completion is dropped when it comes.
    fn abandon(&mut self, ticket: Ticket) {
        drop(ticket);
    }

    /// Batches posted and not yet taken back or abandoned.
    fn in_flight(&self) -> usize {
        0
    }

    /// Counters accumulated by this endpoint since it was created.
    fn stats(&self) -> Stats;

    /// The id under which memory node `node` knows this endpoint's connection, for a [`Fence`]
    /// there to cut it off; `None` if the transport cannot fence (the default). Never 0.
    fn connection_id(&self, node: u16) -> Option<u64> {
        let _ = node;
        None
    }

    /// The largest WRITE that lands whole or not at all when its connection is cut mid-batch:
    /// one packet of the path MTU. A longer WRITE is placed packet by packet, in order, and a
    /// fence (or a killed process) can leave a prefix of its packets placed. The default, for a
    /// transport that cannot fence its connections: no limit.
    fn packet_bytes(&self) -> usize {
        usize::MAX
    }

    /// Executes `verbs` in order as few consecutive batches as the limits allow
    /// ([`crate::MAX_BATCH_VERBS`], [`crate::MAX_BATCH_BYTES`]): one batch and one round trip
    /// when they fit, else one round trip per batch, each batch completing before the next is
    /// posted (so every ordering a single batch guarantees still holds). A READ or WRITE larger
    /// than a batch's bytes is split into consecutive pieces. Atomics' `old` fields are filled
    /// in. If a batch fails, earlier batches have executed.
    fn batches(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        if verbs.len() <= crate::MAX_BATCH_VERBS
            && crate::batch_bytes(verbs) <= crate::MAX_BATCH_BYTES
        {
            return self.batch(verbs);
        }
        split_batches(self, verbs)
    }

    /// READ `buf.len()` bytes at `addr` (one round trip; more if it exceeds one batch).
    fn read(&mut self, addr: RemoteAddr, buf: &mut [u8]) -> Result<(), TransportError> {
        self.batches(&mut [Verb::read(addr, buf)])
    }

    /// WRITE `data` at `addr` (one round trip; more if it exceeds one batch).
    fn write(&mut self, addr: RemoteAddr, data: &[u8]) -> Result<(), TransportError> {
        self.batches(&mut [Verb::write(addr, data)])
    }

    /// CAS the word at `addr` from `expected` to `desired`; returns the previous value, so the
    /// swap happened iff the result equals `expected` (one round trip).
    fn cas(
        &mut self,
        addr: RemoteAddr,
        expected: u64,
        desired: u64,
    ) -> Result<u64, TransportError> {
        let mut verbs = [Verb::cas(addr, expected, desired)];
        self.batch(&mut verbs)?;
        Ok(verbs[0].old_value().unwrap_or_default())
    }

    /// FAA `add` to the word at `addr`; returns the previous value (one round trip).
    fn faa(&mut self, addr: RemoteAddr, add: u64) -> Result<u64, TransportError> {
        let mut verbs = [Verb::faa(addr, add)];
        self.batch(&mut verbs)?;
        Ok(verbs[0].old_value().unwrap_or_default())
    }

    /// READ one 8-byte word at `addr` (one round trip).
    fn read_word(&mut self, addr: RemoteAddr) -> Result<u64, TransportError> {
        let mut buf = [0u8; 8];
        self.read(addr, &mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    /// WRITE one 8-byte word at `addr` (one round trip).
    fn write_word(&mut self, addr: RemoteAddr, value: u64) -> Result<(), TransportError> {
        self.write(addr, &value.to_le_bytes())
    }
}

/// The address of piece `k` (of `PIECE` bytes each) of a verb at `addr`.
fn piece_addr(addr: RemoteAddr, k: usize, len: usize) -> Result<RemoteAddr, TransportError> {
    addr.checked_add((k * crate::MAX_BATCH_BYTES) as u64)
        .ok_or(TransportError::OutOfBounds {
            addr,
            len,
            region_len: 0,
        })
}

/// [`Endpoint::batches`] for work that does not fit one batch.
fn split_batches<E: Endpoint + ?Sized>(
    ep: &mut E,
    verbs: &mut [Verb<'_>],
) -> Result<(), TransportError> {
    const PIECE: usize = crate::MAX_BATCH_BYTES;
    // Oversized READs and WRITEs become consecutive pieces; `origin[i]` is the verb piece i
    // came from (to copy atomics' results back).
    let mut pieces: Vec<Verb<'_>> = Vec::with_capacity(verbs.len());
    let mut origin: Vec<usize> = Vec::with_capacity(verbs.len());
    for (i, verb) in verbs.iter_mut().enumerate() {
        match verb {
            Verb::Read { addr, buf, fenced } => {
                for (k, chunk) in buf.chunks_mut(PIECE).enumerate() {
                    let at = piece_addr(*addr, k, chunk.len())?;
                    let piece = Verb::read(at, chunk);
                    pieces.push(if *fenced && k == 0 {
                        piece.fenced()
                    } else {
                        piece
                    });
                    origin.push(i);
                }
            }
            Verb::Write { addr, data, fenced } => {
                for (k, chunk) in data.chunks(PIECE).enumerate() {
                    let piece = Verb::write(piece_addr(*addr, k, chunk.len())?, chunk);
                    pieces.push(if *fenced && k == 0 {
                        piece.fenced()
                    } else {
                        piece
                    });
                    origin.push(i);
                }
            }
            Verb::Cas {
                addr,
                expected,
                desired,
                fenced,
                old,
            } => {
                pieces.push(Verb::Cas {
                    addr: *addr,
                    expected: *expected,
                    desired: *desired,
                    fenced: *fenced,
                    old: *old,
                });
                origin.push(i);
            }
            Verb::Faa {
                addr,
                add,
                fenced,
                old,
            } => {
                pieces.push(Verb::Faa {
                    addr: *addr,
                    add: *add,
                    fenced: *fenced,
                    old: *old,
                });
                origin.push(i);
            }
        }
    }
    // Consecutive runs that fit one batch each.
    let mut start = 0;
    let mut result = Ok(());
    while start < pieces.len() {
        let (mut end, mut bytes) = (start, 0);
        while end < pieces.len()
            && end - start < crate::MAX_BATCH_VERBS
            && bytes + pieces[end].len().next_multiple_of(8) <= crate::MAX_BATCH_BYTES
        {
            bytes += pieces[end].len().next_multiple_of(8);
            end += 1;
        }
        result = ep.batch(&mut pieces[start..end]);
        if result.is_err() {
            break;
        }
        start = end;
    }
    // Atomics' results (also of a failed run: executed atomics report their old values).
    let olds: Vec<(usize, u64)> = pieces
        .iter()
        .zip(&origin)
        .filter_map(|(piece, &i)| piece.old_value().map(|old| (i, old)))
        .collect();
    drop(pieces);
    for (i, value) in olds {
        if let Verb::Cas { old, .. } | Verb::Faa { old, .. } = &mut verbs[i] {
            *old = value;
        }
    }
    result
}

/// Checks that `verb` is well formed against the memory nodes in `nodes`: a known node, a range
/// inside its region, and 8-byte alignment for atomics. Backends call this for every verb of a
/// batch before executing any of them.
pub fn validate_verb(verb: &Verb<'_>, nodes: &[MemoryNodeInfo]) -> Result<(), TransportError> {
    let addr = verb.addr();
    let node = nodes
        .iter()
        .find(|n| n.id == addr.node())
        .ok_or(TransportError::UnknownNode(addr.node()))?;
    if verb.is_atomic() && !addr.is_word_aligned() {
        return Err(TransportError::Misaligned(addr));
    }
    let len = verb.len();
    let end = addr.offset().checked_add(len as u64);
    if end.is_none_or(|end| end > node.region_len) {
        return Err(TransportError::OutOfBounds {
            addr,
            len,
            region_len: node.region_len,
        });
    }
    Ok(())
}

impl Stats {
    /// Account one executed verb. Backends call this so every implementation counts alike.
    pub fn record_verb(&mut self, verb: &Verb<'_>) {
        match verb {
            Verb::Read { buf, .. } => {
                self.reads += 1;
                self.bytes_read += buf.len() as u64;
            }
            Verb::Write { data, .. } => {
                self.writes += 1;
                self.bytes_written += data.len() as u64;
            }
            Verb::Cas { .. } => {
                self.cas += 1;
                self.bytes_read += 8;
                self.bytes_written += 16;
            }
            Verb::Faa { .. } => {
                self.faa += 1;
                self.bytes_read += 8;
                self.bytes_written += 8;
            }
        }
    }
}
