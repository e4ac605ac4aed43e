//! Loom model: a CAS lock on a remote word guards a two-word WRITE; a concurrent reader validates
//! what it READ. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p sim-transport --release --test loom_lock`.
//!
//! The record is two words that a writer always sets to the same counter value, so a READ that
//! tore between them is visible as two different words. Two writers each increment the record
//! under the lock; the reader accepts only records whose words agree. The correct protocol must
//! pass every interleaving; each broken variant must be caught.

#![cfg(loom)]

use std::sync::Arc;

use rdma_transport::{Endpoint, RemoteAddr, Transport, Verb};
use sim_transport::SimTransport;

const LOCK: u64 = 0;
const RECORD: u64 = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    /// Lock by CAS (with the record READ fenced behind it in the same batch), WRITE, unlock.
    Correct,
    /// Writers skip the lock entirely.
    NoLock,
    /// Writers release the lock before writing the record back.
    UnlockBeforeWrite,
    /// The reader accepts whatever it READ without validating it.
    ReaderSkipsValidation,
}

fn addr(offset: u64) -> RemoteAddr {
    RemoteAddr::new(0, offset).expect("addr")
}

fn decode(bytes: &[u8; 16]) -> (u64, u64) {
    let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    (word(0), word(8))
}

fn writer(ep: &mut impl Endpoint, variant: Variant) {
    let mut record = [0u8; 16];
    if variant != Variant::NoLock {
        loop {
            let mut verbs = [
                Verb::cas(addr(LOCK), 0, 1),
                Verb::read(addr(RECORD), &mut record).fenced(),
            ];
            ep.batch(&mut verbs).expect("lock batch");
            if verbs[0].cas_succeeded() == Some(true) {
                break;
            }
            loom::thread::yield_now();
        }
    } else {
        ep.read(addr(RECORD), &mut record).expect("read");
    }
    let (value, _) = decode(&record);
    let next = value + 1;
    let mut new = [0u8; 16];
    new[..8].copy_from_slice(&next.to_le_bytes());
    new[8..].copy_from_slice(&next.to_le_bytes());
    if variant == Variant::UnlockBeforeWrite {
        ep.write_word(addr(LOCK), 0).expect("unlock");
        ep.write(addr(RECORD), &new).expect("write");
    } else {
        ep.write(addr(RECORD), &new).expect("write");
        if variant != Variant::NoLock {
            assert_eq!(
                ep.cas(addr(LOCK), 1, 0).expect("unlock"),
                1,
                "unlocked a lock we did not hold"
            );
        }
    }
}

/// Reads the record once; returns it if it passes validation (or unconditionally when the variant
/// skips validation).
fn reader(ep: &mut impl Endpoint, variant: Variant) -> Option<(u64, u64)> {
    let mut record = [0u8; 16];
    ep.read(addr(RECORD), &mut record).expect("read");
    let (a, b) = decode(&record);
    (a == b || variant == Variant::ReaderSkipsValidation).then_some((a, b))
}

fn model(variant: Variant) {
    loom::model(move || {
        let transport = Arc::new(SimTransport::anonymous(&[64]).expect("pool"));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let t = Arc::clone(&transport);
                loom::thread::spawn(move || writer(&mut t.endpoint().expect("endpoint"), variant))
            })
            .collect();
        let mut ep = transport.endpoint().expect("endpoint");
        if let Some((a, b)) = reader(&mut ep, variant) {
            assert_eq!(a, b, "reader accepted a torn record");
            assert!(a <= 2, "reader accepted a value nobody wrote");
        }
        for w in writers {
            w.join().expect("writer");
        }
        let mut record = [0u8; 16];
        ep.read(addr(RECORD), &mut record).expect("read");
        assert_eq!(decode(&record), (2, 2), "an increment was lost");
        assert_eq!(ep.read_word(addr(LOCK)).expect("read"), 0, "lock left held");
    });
}

fn caught(variant: Variant, expected: &str) {
    sim_transport::loom_support::assert_caught(|| model(variant), expected);
}

#[test]
fn cas_lock_guards_a_multi_word_write() {
    model(Variant::Correct);
}

#[test]
fn loom_catches_writers_without_the_lock() {
    caught(Variant::NoLock, "an increment was lost");
}

#[test]
fn loom_catches_unlock_before_write() {
    caught(Variant::UnlockBeforeWrite, "an increment was lost");
}

#[test]
fn loom_catches_a_reader_that_does_not_validate() {
    caught(
        Variant::ReaderSkipsValidation,
        "reader accepted a torn record",
    );
}
