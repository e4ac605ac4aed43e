//! The transport conformance suite: written once, run against every [`Transport`].
//!
//! Each check panics with a message naming the broken guarantee, so a backend's test is just
//!
//! ```text
//! rdma_transport::conformance::run_all(&my_transport, Scratch::new(0, 0, 1 << 20));
//! ```
//!
//! Checks only touch the scratch range they are given, and leave it in an unspecified state.
//! [`peer_exchange`] is the two-party check: two endpoints — two threads, or two processes that
//! attached to the same memory — each see the other's WRITEs and atomics.

use std::time::{Duration, Instant};

use crate::{
    Completion, Endpoint, MAX_BATCH_BYTES, MAX_BATCH_VERBS, RemoteAddr, Stats, Ticket, Transport,
    TransportError, Verb,
};

/// The remote range a check may use freely: `len` bytes at `base` on memory node `node`.
#[derive(Debug, Clone, Copy)]
pub struct Scratch {
    /// Memory node id.
    pub node: u16,
    /// First byte of the range (8-byte aligned).
    pub base: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Smallest scratch range [`run_all`] accepts.
pub const MIN_SCRATCH: u64 = 64 * 1024;

impl Scratch {
    /// `len` bytes at `base` on memory node `node`.
    pub fn new(node: u16, base: u64, len: u64) -> Self {
        Self { node, base, len }
    }

    /// Address of byte `offset` of the scratch range.
    pub fn at(&self, offset: u64) -> RemoteAddr {
        assert!(
            offset < self.len,
            "conformance check ran past its scratch range"
        );
        RemoteAddr::new(self.node, self.base + offset).expect("scratch range within 48 bits")
    }
}

/// Where the checks of posted batches work (above [`peer_exchange_in_threads`]'s range).
const POSTED: u64 = 32 * 1024;

/// Run every single-party check in order, then [`concurrent_faa_is_unique`] with 4 threads, and
/// [`peer_exchange`] between two threads.
pub fn run_all<T: Transport>(transport: &T, scratch: Scratch) {
    assert!(
        scratch.len >= MIN_SCRATCH && scratch.base.is_multiple_of(8),
        "conformance needs an 8-byte-aligned scratch range of at least {MIN_SCRATCH} bytes"
    );
    let mut ep = transport.endpoint().expect("open an endpoint");
    read_after_write(&mut ep, scratch);
    cas_returns_old_value(&mut ep, scratch);
    faa_returns_old_value_and_adds(&mut ep, scratch);
    batch_executes_in_order(&mut ep, scratch);
    counters_are_exact(&mut ep, scratch);
    batch_limits_are_enforced(&mut ep, scratch);
    malformed_verbs_are_errors(transport, &mut ep, scratch);
    posted_batches_complete_in_any_order_of_polls(&mut ep, scratch);
    posted_batches_keep_their_order_on_a_memory_node(&mut ep, scratch);
    a_failed_posted_batch_leaves_the_others_alone(&mut ep, scratch);
    an_abandoned_batch_still_executes(&mut ep, scratch);
    concurrent_faa_is_unique(transport, scratch, 4, 2_000);
    peer_exchange_in_threads(transport, scratch, 500);
}

fn zero<E: Endpoint>(ep: &mut E, scratch: Scratch, offset: u64, len: usize) {
    ep.write(scratch.at(offset), &vec![0u8; len])
        .expect("zero scratch");
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ 0x5a)
        .collect()
}

/// A READ returns exactly what the last WRITE put there, for aligned and unaligned ranges of many
/// lengths, and leaves neighbouring bytes alone.
pub fn read_after_write<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    for (i, (offset, len)) in [
        (0u64, 8usize),
        (8, 1),
        (13, 7),
        (21, 13),
        (64, 256),
        (333, 4096),
    ]
    .into_iter()
    .enumerate()
    {
        let span = len + 16;
        let base = offset.saturating_sub(8);
        zero(ep, scratch, base, span);
        let data = pattern(len, i as u8);
        ep.write(scratch.at(offset), &data).expect("write");
        let mut back = vec![0u8; len];
        ep.read(scratch.at(offset), &mut back).expect("read");
        assert_eq!(back, data, "read-after-write: {len} bytes at +{offset}");
        let mut around = vec![0u8; span];
        ep.read(scratch.at(base), &mut around).expect("read");
        let lead = (offset - base) as usize;
        assert!(
            around[..lead].iter().all(|&b| b == 0) && around[lead + len..].iter().all(|&b| b == 0),
            "a {len}-byte WRITE at +{offset} changed bytes outside its range"
        );
    }
    ep.write_word(scratch.at(0), 0x0123_4567_89ab_cdef)
        .expect("write word");
    assert_eq!(
        ep.read_word(scratch.at(0)).expect("read word"),
        0x0123_4567_89ab_cdef
    );
}

/// CAS swaps only on equality, and returns the previous value on success and on failure.
pub fn cas_returns_old_value<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(64);
    ep.write_word(w, 10).expect("write");
    assert_eq!(
        ep.cas(w, 10, 20).expect("cas"),
        10,
        "successful CAS must return the old value"
    );
    assert_eq!(
        ep.read_word(w).expect("read"),
        20,
        "successful CAS must swap"
    );
    assert_eq!(
        ep.cas(w, 10, 30).expect("cas"),
        20,
        "failed CAS must return the current value"
    );
    assert_eq!(
        ep.read_word(w).expect("read"),
        20,
        "failed CAS must not swap"
    );
    assert_eq!(ep.cas(w, 20, u64::MAX).expect("cas"), 20);
    assert_eq!(ep.read_word(w).expect("read"), u64::MAX);
}

/// FAA returns the previous value and adds, with wrapping arithmetic.
pub fn faa_returns_old_value_and_adds<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(72);
    ep.write_word(w, 5).expect("write");
    assert_eq!(
        ep.faa(w, 3).expect("faa"),
        5,
        "FAA must return the old value"
    );
    assert_eq!(ep.faa(w, 0).expect("faa"), 8, "FAA must add");
    ep.write_word(w, u64::MAX).expect("write");
    assert_eq!(ep.faa(w, 2).expect("faa"), u64::MAX);
    assert_eq!(
        ep.read_word(w).expect("read"),
        1,
        "FAA must wrap like a NIC"
    );
}

/// Fenced verbs of one batch see every earlier verb's effect, and a fenced WRITE does not overtake
/// an earlier READ; WRITEs land in order.
pub fn batch_executes_in_order<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(80);
    ep.write_word(w, 0).expect("write");
    let one = 1u64.to_le_bytes();
    let two = 2u64.to_le_bytes();
    let mut seen = [0u8; 8];
    let mut verbs = [
        Verb::write(w, &one),
        Verb::cas(w, 1, 7).fenced(),
        Verb::faa(w, 3).fenced(),
        Verb::read(w, &mut seen).fenced(),
        Verb::write(w, &two).fenced(),
    ];
    ep.batch(&mut verbs).expect("batch");
    assert_eq!(
        verbs[1].cas_succeeded(),
        Some(true),
        "a fenced CAS must see the WRITE before it"
    );
    assert_eq!(
        verbs[2].old_value(),
        Some(7),
        "a fenced FAA must see the CAS before it"
    );
    assert_eq!(
        u64::from_le_bytes(seen),
        10,
        "a fenced READ must see the FAA before it"
    );
    assert_eq!(
        ep.read_word(w).expect("read"),
        2,
        "the last WRITE of a batch must win"
    );
}

/// One batch is one round trip, and every verb and byte is counted exactly.
pub fn counters_are_exact<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let before = ep.stats();
    let data = [7u8; 40];
    let mut buf = [0u8; 256];
    let mut verbs = [
        Verb::write(scratch.at(128), &data),
        Verb::read(scratch.at(512), &mut buf).fenced(),
        Verb::cas(scratch.at(96), 0, 0),
        Verb::faa(scratch.at(104), 1),
    ];
    ep.batch(&mut verbs).expect("batch");
    let d = ep.stats() - before;
    let expected = Stats {
        batches: 1,
        reads: 1,
        writes: 1,
        cas: 1,
        faa: 1,
        bytes_read: 256 + 8 + 8,
        bytes_written: 40 + 16 + 8,
    };
    assert_eq!(
        d, expected,
        "a 4-verb batch must count as one round trip with exact verb counts"
    );

    let before = ep.stats();
    ep.batch(&mut []).expect("empty batch");
    assert_eq!(ep.stats(), before, "an empty batch must cost nothing");

    let before = ep.stats();
    ep.read_word(scratch.at(96)).expect("read");
    ep.faa(scratch.at(104), 1).expect("faa");
    let d = ep.stats() - before;
    assert_eq!(
        (d.batches, d.reads, d.faa),
        (2, 1, 1),
        "single verbs are batches of one"
    );
}

/// Out-of-bounds ranges, misaligned atomics and unknown nodes are errors, never panics; a batch
/// with one bad verb executes none of its verbs and counts nothing.
pub fn malformed_verbs_are_errors<T: Transport>(
    transport: &T,
    ep: &mut T::Endpoint,
    scratch: Scratch,
) {
    let node = transport
        .memory_node(scratch.node)
        .expect("scratch node is known");
    let last = RemoteAddr::new(scratch.node, node.region_len - 4).expect("valid addr");
    let mut buf = [0u8; 8];
    assert!(
        matches!(
            ep.read(last, &mut buf),
            Err(TransportError::OutOfBounds { .. })
        ),
        "a READ past the region's end must be OutOfBounds"
    );
    assert!(
        matches!(
            ep.write(last, &buf),
            Err(TransportError::OutOfBounds { .. })
        ),
        "a WRITE past the region's end must be OutOfBounds"
    );
    let misaligned = scratch.at(68);
    assert_eq!(
        ep.cas(misaligned, 0, 1),
        Err(TransportError::Misaligned(misaligned))
    );
    assert_eq!(
        ep.faa(misaligned, 1),
        Err(TransportError::Misaligned(misaligned))
    );
    let unknown_id = (0..=u16::MAX)
        .find(|id| transport.memory_node(*id).is_none())
        .expect("some node id is unused");
    let unknown = RemoteAddr::new(unknown_id, 0).expect("valid addr");
    assert_eq!(
        ep.faa(unknown, 1),
        Err(TransportError::UnknownNode(unknown_id))
    );

    let w = scratch.at(112);
    ep.write_word(w, 0).expect("write");
    let before = ep.stats();
    let one = 1u64.to_le_bytes();
    let result = ep.batch(&mut [Verb::write(w, &one), Verb::faa(misaligned, 1)]);
    assert_eq!(result, Err(TransportError::Misaligned(misaligned)));
    assert_eq!(ep.stats(), before, "a rejected batch must not be counted");
    assert_eq!(
        ep.read_word(w).expect("read"),
        0,
        "a rejected batch must execute none of its verbs"
    );
}

/// FAA from `threads` threads, `per_thread` times each, hands out every value exactly once.
pub fn concurrent_faa_is_unique<T: Transport>(
    transport: &T,
    scratch: Scratch,
    threads: usize,
    per_thread: usize,
) {
    let counter = scratch.at(120);
    transport
        .endpoint()
        .and_then(|mut ep| ep.write_word(counter, 0))
        .expect("reset counter");
    let mut all: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut ep = transport.endpoint().expect("endpoint");
                    (0..per_thread)
                        .map(|_| ep.faa(counter, 1).expect("faa"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("FAA thread panicked"))
            .collect()
    });
    all.sort_unstable();
    let n = (threads * per_thread) as u64;
    assert!(
        all.iter().copied().eq(0..n),
        "concurrent FAA must hand out each of 0..{n} exactly once"
    );
}

/// Bytes [`peer_exchange`] uses for `rounds` rounds.
pub fn peer_exchange_len(rounds: usize) -> u64 {
    PEER_RESULTS + 2 * 8 * rounds as u64
}

const PEER_COUNTER: u64 = 0;
const PEER_DONE: u64 = 8;
const PEER_HELLO: u64 = 16; // one word per role
const PEER_RESULTS: u64 = 64; // `rounds` words per role
const PEER_TIMEOUT: Duration = Duration::from_secs(60);

fn hello_value(role: usize) -> u64 {
    0x4845_4c4c_4f00_0000 | (role as u64 + 1)
}

/// One half of a two-party check over a shared, **zeroed** range of [`peer_exchange_len`] bytes.
///
/// Role 0 and role 1 run concurrently on different endpoints (threads, or processes attached to
/// the same memory). Each WRITEs a greeting and waits to READ the other's, takes `rounds` values
/// from a shared FAA counter and WRITEs them out, signals completion with FAA, waits for the
/// other, then checks that the two sides together received every counter value exactly once.
pub fn peer_exchange<E: Endpoint>(ep: &mut E, shared: Scratch, role: usize, rounds: usize) {
    assert!(role < 2, "peer_exchange has roles 0 and 1");
    assert!(
        shared.len >= peer_exchange_len(rounds),
        "peer_exchange range too small"
    );
    let other = 1 - role;
    ep.write_word(shared.at(PEER_HELLO + 8 * role as u64), hello_value(role))
        .expect("write greeting");
    wait_until(
        ep,
        shared.at(PEER_HELLO + 8 * other as u64),
        |v| v == hello_value(other),
        "the other side's greeting",
    );

    let mine = PEER_RESULTS + 8 * (role * rounds) as u64;
    for i in 0..rounds {
        let v = ep.faa(shared.at(PEER_COUNTER), 1).expect("faa");
        ep.write_word(shared.at(mine + 8 * i as u64), v)
            .expect("write result");
    }
    ep.faa(shared.at(PEER_DONE), 1).expect("faa done");
    wait_until(
        ep,
        shared.at(PEER_DONE),
        |v| v == 2,
        "the other side to finish",
    );

    let mut bytes = vec![0u8; 16 * rounds];
    ep.read(shared.at(PEER_RESULTS), &mut bytes)
        .expect("read results");
    let mut values: Vec<u64> = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
        .collect();
    values.sort_unstable();
    assert!(
        values.iter().copied().eq(0..2 * rounds as u64),
        "role {role}: the two peers' FAAs must hand out each of 0..{} exactly once",
        2 * rounds
    );
    assert_eq!(
        ep.read_word(shared.at(PEER_COUNTER)).expect("read"),
        2 * rounds as u64
    );
}

fn wait_until<E: Endpoint>(ep: &mut E, addr: RemoteAddr, done: impl Fn(u64) -> bool, what: &str) {
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        if done(ep.read_word(addr).expect("poll")) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// [`peer_exchange`] between two threads of this process on two endpoints.
pub fn peer_exchange_in_threads<T: Transport>(transport: &T, scratch: Scratch, rounds: usize) {
    let shared = Scratch::new(scratch.node, scratch.base + 4096, peer_exchange_len(rounds));
    transport
        .endpoint()
        .and_then(|mut ep| ep.write(shared.at(0), &vec![0u8; shared.len as usize]))
        .expect("zero the shared range");
    std::thread::scope(|s| {
        for role in 0..2 {
            s.spawn(move || {
                let mut ep = transport.endpoint().expect("endpoint");
                peer_exchange(&mut ep, shared, role, rounds);
            });
        }
    });
}

/// A batch at the limits ([`MAX_BATCH_VERBS`] verbs, [`MAX_BATCH_BYTES`] staging bytes) executes
/// as one round trip; one over either limit is [`TransportError::BatchTooLarge`] and executes
/// nothing; [`Endpoint::batches`] splits larger work into consecutive batches.
pub fn batch_limits_are_enforced<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    const PAGE: usize = 8 * 1024;
    zero(ep, scratch, 0, PAGE);
    let word = scratch.at(0);
    ep.write_word(word, 7).expect("write");

    // At the verb limit.
    let mut bufs = vec![[0u8; 8]; MAX_BATCH_VERBS];
    let mut verbs: Vec<Verb<'_>> = bufs.iter_mut().map(|b| Verb::read(word, b)).collect();
    let before = ep.stats();
    ep.batch(&mut verbs)
        .expect("a batch of exactly MAX_BATCH_VERBS verbs");
    assert_eq!(ep.stats().batches - before.batches, 1, "one round trip");
    drop(verbs);
    assert!(bufs.iter().all(|b| u64::from_le_bytes(*b) == 7));

    // One verb over: nothing runs, not even the WRITE in front.
    let new_value = 8u64.to_le_bytes();
    let mut verbs = vec![Verb::write(word, &new_value)];
    verbs.extend(bufs.iter_mut().map(|b| Verb::read(word, b)));
    let before = ep.stats();
    assert!(matches!(
        ep.batch(&mut verbs),
        Err(TransportError::BatchTooLarge { verbs, .. }) if verbs == MAX_BATCH_VERBS + 1
    ));
    drop(verbs);
    assert_eq!(ep.stats(), before, "an oversized batch is not counted");
    assert_eq!(
        ep.read_word(word),
        Ok(7),
        "an oversized batch executed a verb"
    );

    // At, and one page over, the byte limit.
    let pages = MAX_BATCH_BYTES / PAGE;
    let mut big = vec![0u8; MAX_BATCH_BYTES + PAGE];
    let mut verbs: Vec<Verb<'_>> = big
        .chunks_mut(PAGE)
        .take(pages)
        .map(|b| Verb::read(scratch.at(0), b))
        .collect();
    ep.batch(&mut verbs)
        .expect("a batch of exactly MAX_BATCH_BYTES bytes");
    drop(verbs);
    let mut verbs: Vec<Verb<'_>> = big
        .chunks_mut(PAGE)
        .map(|b| Verb::read(scratch.at(0), b))
        .collect();
    assert!(matches!(
        ep.batch(&mut verbs),
        Err(TransportError::BatchTooLarge { bytes, .. }) if bytes == MAX_BATCH_BYTES + PAGE
    ));
    // The same work split: three batches of verbs, and atomics' results come back.
    ep.write_word(word, 100).expect("write");
    let mut bufs = vec![[0u8; 8]; 2 * MAX_BATCH_VERBS + 10];
    let mut verbs: Vec<Verb<'_>> = bufs.iter_mut().map(|b| Verb::read(word, b)).collect();
    verbs.push(Verb::faa(word, 1));
    let before = ep.stats();
    ep.batches(&mut verbs).expect("split work");
    assert_eq!(ep.stats().batches - before.batches, 3);
    assert_eq!(verbs.last().and_then(Verb::old_value), Some(100));
    assert_eq!(ep.read_word(word), Ok(101));
}

/// Takes `ticket`'s completion, polling no longer than a minute.
fn complete<E: Endpoint>(ep: &mut E, mut ticket: Ticket) -> Completion {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match ep.poll(ticket) {
            Ok(done) => return done,
            Err(pending) => ticket = pending,
        }
        assert!(
            Instant::now() < deadline,
            "a posted batch did not complete within a minute"
        );
        std::hint::spin_loop();
    }
}

/// Several batches posted before any is polled each complete with their own results, whatever
/// the order their completions are taken in; a ticket polled before its batch completed comes
/// back to be polled again; and a batch counts as one round trip, as [`Endpoint::batch`] does.
pub fn posted_batches_complete_in_any_order_of_polls<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let base = POSTED;
    for i in 0..4u64 {
        ep.write_word(scratch.at(base + 8 * i), 100 + i)
            .expect("write");
    }
    let before = ep.stats();
    let mut bufs = [[0u8; 8]; 4];
    let posted: Vec<Ticket> = (0..4u64)
        .map(|i| {
            let verbs = [
                Verb::faa(scratch.at(base + 8 * i), 1),
                Verb::read(scratch.at(base + 8 * i), &mut bufs[i as usize]).fenced(),
            ];
            ep.post(&verbs).expect("post")
        })
        .collect();
    assert!(
        ep.in_flight() <= 4,
        "at most the four batches posted are in flight"
    );
    // Taken back last to first.
    for (i, ticket) in posted.into_iter().enumerate().rev() {
        let mut buf = [0u8; 8];
        let mut verbs = [
            Verb::faa(scratch.at(base + 8 * i as u64), 1),
            Verb::read(scratch.at(base + 8 * i as u64), &mut buf).fenced(),
        ];
        complete(ep, ticket)
            .deliver(&mut verbs)
            .expect("a posted batch completes");
        let old = verbs[0].old_value();
        assert_eq!(
            old,
            Some(100 + i as u64),
            "batch {i}'s FAA must report its own word's old value"
        );
        assert_eq!(
            u64::from_le_bytes(buf),
            101 + i as u64,
            "batch {i}'s fenced READ must see its FAA"
        );
    }
    assert_eq!(ep.in_flight(), 0, "every posted batch was taken back");
    let d = ep.stats() - before;
    assert_eq!(
        (d.batches, d.faa, d.reads),
        (4, 4, 4),
        "four posted batches are four round trips"
    );
}

/// Batches posted to one memory node execute in the order they were posted: ten FAAs posted one
/// batch each find the word at 0, 1, …, 9; a READ posted after a WRITE sees it; and a
/// [`Endpoint::batch`] after posted batches sees them all.
pub fn posted_batches_keep_their_order_on_a_memory_node<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(POSTED + 64);
    ep.write_word(w, 0).expect("write");
    let tickets: Vec<Ticket> = (0..10)
        .map(|_| ep.post(&[Verb::faa(w, 1)]).expect("post"))
        .collect();
    let seven = 7u64.to_le_bytes();
    let write = ep
        .post(&[Verb::write(scratch.at(POSTED + 72), &seven)])
        .expect("post");
    let mut seen = [0u8; 8];
    let read = ep
        .post(&[Verb::read(scratch.at(POSTED + 72), &mut seen)])
        .expect("post");
    // The synchronous batch comes after every one posted before it.
    assert_eq!(
        ep.read_word(w),
        Ok(10),
        "a batch must see every FAA posted before it"
    );
    for (i, ticket) in tickets.into_iter().enumerate() {
        let mut verbs = [Verb::faa(w, 1)];
        complete(ep, ticket).deliver(&mut verbs).expect("faa");
        assert_eq!(
            verbs[0].old_value(),
            Some(i as u64),
            "FAAs posted in order must execute in order"
        );
    }
    complete(ep, write)
        .deliver(&mut [Verb::write(scratch.at(POSTED + 72), &seven)])
        .expect("write");
    complete(ep, read)
        .deliver(&mut [Verb::read(scratch.at(POSTED + 72), &mut seen)])
        .expect("read");
    assert_eq!(
        u64::from_le_bytes(seen),
        7,
        "a READ posted after a WRITE must see it"
    );
}

/// A malformed batch posted between two good ones fails (at post or in its completion) and
/// executes nothing; the batches around it complete as if it had not been posted; a completion
/// delivered to verbs that are not its batch is refused.
pub fn a_failed_posted_batch_leaves_the_others_alone<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(POSTED + 128);
    ep.write_word(w, 0).expect("write");
    let first = ep.post(&[Verb::faa(w, 1)]).expect("post");
    let misaligned = scratch.at(POSTED + 140);
    let bad = [Verb::faa(w, 100), Verb::faa(misaligned, 1)];
    let refused = match ep.post(&bad) {
        Err(e) => Some(e),
        Ok(ticket) => complete(ep, ticket)
            .deliver(&mut [Verb::faa(w, 100), Verb::faa(misaligned, 1)])
            .err(),
    };
    assert_eq!(
        refused,
        Some(TransportError::Misaligned(misaligned)),
        "a malformed posted batch must fail"
    );
    let last = ep.post(&[Verb::faa(w, 1)]).expect("post");
    let mut verbs = [Verb::faa(w, 1)];
    complete(ep, first).deliver(&mut verbs).expect("first");
    assert_eq!(verbs[0].old_value(), Some(0));
    let done = complete(ep, last);
    let mut wrong = [Verb::faa(w, 2)];
    assert_eq!(
        done.clone().deliver(&mut wrong),
        Err(TransportError::NotThatBatch),
        "a completion must be delivered only to its own batch"
    );
    done.deliver(&mut verbs).expect("last");
    assert_eq!(
        verbs[0].old_value(),
        Some(1),
        "the malformed batch between must have executed nothing"
    );
}

/// A batch whose completion is abandoned still executes, and the endpoint goes on.
pub fn an_abandoned_batch_still_executes<E: Endpoint>(ep: &mut E, scratch: Scratch) {
    let w = scratch.at(POSTED + 192);
    ep.write_word(w, 0).expect("write");
    let ticket = ep.post(&[Verb::faa(w, 5)]).expect("post");
    ep.abandon(ticket);
    assert_eq!(
        ep.faa(w, 1),
        Ok(5),
        "the abandoned FAA must have executed first"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while ep.in_flight() > 0 {
        let probe = ep.post(&[]).expect("post an empty batch");
        drop(complete(ep, probe));
        assert!(
            Instant::now() < deadline,
            "an abandoned batch stayed in flight"
        );
    }
}

/// The [`crate::Fence`] guarantee, with the memory node's `fence`: a fenced connection executes
/// nothing more and says so — its batches fail, with [`TransportError::Fenced`] naming the memory
/// node from the first (`within` zero) or, on a backend whose fence only breaks the connection
/// (the verbs one), with `Broken` for at most `within` first — and keep failing so; other
/// endpoints go on; fencing again is harmless. Not part of [`run_all`], which has no fence.
pub fn a_fenced_connection_says_so<T: Transport, F: crate::Fence>(
    transport: &T,
    fence: &F,
    scratch: Scratch,
    within: Duration,
) {
    let mut victim = transport.endpoint().expect("open an endpoint");
    let mut other = transport.endpoint().expect("open an endpoint");
    let w = scratch.at(0);
    victim.write_word(w, 1).expect("write before the fence");
    let id = victim
        .connection_id(scratch.node)
        .expect("a transport that fences must name its connections");
    assert_ne!(
        Some(id),
        other.connection_id(scratch.node),
        "two endpoints share a connection id"
    );
    assert_eq!(
        fence.fence(id),
        Ok(crate::Fenced::Done),
        "fence an idle connection"
    );
    let fenced = Err(TransportError::Fenced(scratch.node));
    let deadline = Instant::now() + within;
    loop {
        let answer = victim.write_word(w, 2);
        if answer == fenced {
            break;
        }
        assert!(
            matches!(answer, Err(TransportError::Broken(_))),
            "a verb on a fenced connection must fail, with Fenced or Broken: {answer:?}"
        );
        assert!(
            Instant::now() < deadline,
            "a fenced connection must fail with Fenced within {within:?}: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        victim.read_word(w),
        Err(TransportError::Fenced(scratch.node)),
        "a fenced connection must fail with Fenced every time"
    );
    assert_eq!(
        other.read_word(w),
        Ok(1),
        "a WRITE posted after the fence took effect"
    );
    other
        .write_word(scratch.at(8), 3)
        .expect("fencing one connection must leave the others alone");
    assert_eq!(
        fence.fence(id),
        Ok(crate::Fenced::Done),
        "fencing a fenced connection again must be harmless"
    );
}
