//! A pipelined session's random run as a linearizability history: the driver the indexes'
//! pipelining tests share (ROLEX's and the B+-tree's, on any [`kv_session::Lane`]).
//!
//! Requests are drawn on a small key domain, so operations of one session meet on one leaf and
//! on one lock; each is stamped at its call and its return by one clock shared by every thread,
//! so overlapping operations of one session are concurrent in the history, as they are.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};

use kv_session::{Lane, Reply, Request, Session};

use crate::XorShift64;
use crate::linearizability::{KvEvent, KvOp, KvResult};

/// A random request over `keys` keys (`3 + 7 i`), as the checker names it; `None` for a scan
/// (the checker knows key-value operations only: a scan is checked for order alone). Without
/// `scans`, a scan's draw is a GET.
pub fn draw(random: &mut XorShift64, keys: u64, scans: bool) -> (Option<(u64, KvOp)>, Request) {
    let key = (random.next_u64() % keys) * 7 + 3;
    let value = random.next_u64() % 1_000_000 + 1;
    let (op, request) = match random.next_u64() % 20 {
        0..=5 => (KvOp::Get, Request::Get(key)),
        6..=9 => (KvOp::Insert(value), Request::Insert(key, value)),
        10..=11 => (KvOp::Update(value), Request::Update(key, value)),
        12..=14 => (KvOp::Upsert(value), Request::Upsert(key, value)),
        15..=18 => (KvOp::Delete, Request::Delete(key)),
        _ if scans => return (None, Request::Scan(key, 12)),
        _ => (KvOp::Get, Request::Get(key)),
    };
    (Some((key, op)), request)
}

/// What a key-value request's reply says, as the checker names it.
///
/// # Panics
/// On a reply no key-value request gives (a test's failure).
pub fn result_of(reply: Reply) -> KvResult {
    match reply {
        Reply::Value(value) => KvResult::Value(value),
        Reply::Done(done) => KvResult::Done(done),
        other => panic!("a key-value request answered {other:?}"),
    }
}

/// What [`run_session`] saw.
#[derive(Debug, Default)]
pub struct SessionRun {
    /// The key-value operations, stamped.
    pub history: Vec<KvEvent>,
    /// The most operations the session had in flight at once.
    pub most_in_flight: usize,
    /// Round trips over every operation (each [`kv_session::Done`]'s own).
    pub round_trips: u64,
    /// Scans run (each checked for key order).
    pub scans: u64,
}

/// Runs `ops` requests drawn from `random` ([`draw`]) through `session`, keeping it full, and
/// returns the history, each call and return stamped by `clock`.
///
/// # Panics
/// If an operation fails, or a scan comes back out of key order (a test's failure).
pub fn run_session<'p, L>(
    session: &mut Session<'p, L, u64>,
    random: &mut XorShift64,
    (keys, scans): (u64, bool),
    ops: u64,
    clock: &AtomicU64,
) -> SessionRun
where
    L: Lane + 'p,
    L::Error: Debug,
{
    let mut pending: BTreeMap<u64, (Option<(u64, KvOp)>, u64)> = BTreeMap::new();
    let mut run = SessionRun::default();
    let mut next = 0u64;
    loop {
        while next < ops && session.has_room() {
            let (op, request) = draw(random, keys, scans);
            let call = clock.fetch_add(1, Ordering::SeqCst);
            pending.insert(next, (op, call));
            if session.submit(next, request).is_err() {
                panic!("a session with room refused a request");
            }
            next += 1;
        }
        run.most_in_flight = run.most_in_flight.max(session.in_flight());
        let Some(done) = session.wait() else {
            break;
        };
        let ret = clock.fetch_add(1, Ordering::SeqCst);
        let Some((op, call)) = pending.remove(&done.tag) else {
            panic!("a tag never submitted came back: {}", done.tag);
        };
        let reply = match done.result {
            Ok(reply) => reply,
            Err(e) => panic!("operation {} failed: {e:?}", done.tag),
        };
        run.round_trips += done.net.batches;
        match op {
            Some((key, op)) => run.history.push(KvEvent {
                key,
                op,
                call,
                ret: Some((ret, result_of(reply))),
            }),
            None => {
                let Reply::Rows(rows) = reply else {
                    panic!("a scan answered {reply:?}");
                };
                assert!(
                    rows.windows(2).all(|w| w[0].0 < w[1].0),
                    "scan out of order: {rows:?}"
                );
                run.scans += 1;
            }
        }
    }
    assert!(
        pending.is_empty(),
        "operations never came back: {pending:?}"
    );
    run
}
