//! What the clients of a run did, in the order the scheduler ran it.
//!
//! Only one thread of a run executes at a time, so a counter bumped at every call and every
//! return orders the history as real time would. The recorder is the harness's own bookkeeping:
//! it uses `std` primitives on purpose, so it adds no sync points to the schedule.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use testkit::linearizability::{KvEvent, KvOp, KvResult};

/// An operation a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A key-value operation on one key.
    Kv(u64, KvOp),
    /// `scan(start, n)`.
    Scan(u64, usize),
}

/// What an operation returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Returned {
    /// A key-value operation's result.
    Kv(KvResult),
    /// A scan's pairs.
    Scan(Vec<(u64, u64)>),
    /// An error: the operation may or may not have taken effect.
    Failed(String),
}

/// One operation of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The client that ran it.
    pub client: String,
    /// What it asked.
    pub op: Op,
    /// When it was called.
    pub call: u64,
    /// When it returned (`None`: it never did, its thread stopped inside it).
    pub ret: Option<u64>,
    /// What it returned.
    pub returned: Option<Returned>,
}

/// The history of a run, as it is recorded.
#[derive(Debug, Default)]
pub struct Recorder {
    clock: AtomicU64,
    entries: Mutex<Vec<Entry>>,
}

impl Recorder {
    /// The history's clock now (for a fault log).
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// A call: its entry's index.
    pub fn call(&self, client: &str, op: Op) -> usize {
        let call = self.clock.fetch_add(1, Ordering::SeqCst);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.push(Entry {
            client: client.to_string(),
            op,
            call,
            ret: None,
            returned: None,
        });
        entries.len() - 1
    }

    /// The return of the call recorded at `at`.
    pub fn ret(&self, at: usize, returned: Returned) {
        let ret = self.clock.fetch_add(1, Ordering::SeqCst);
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = entries.get_mut(at) {
            entry.ret = Some(ret);
            entry.returned = Some(returned);
        }
    }

    /// The history so far.
    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Entry {
    /// The entry as the linearizability checker takes it, if it is a key-value operation: an
    /// operation that failed, or never returned, may or may not have happened.
    pub fn kv_event(&self) -> Option<KvEvent> {
        let Op::Kv(key, op) = self.op else {
            return None;
        };
        let ret = match (&self.ret, &self.returned) {
            (Some(at), Some(Returned::Kv(result))) => Some((*at, *result)),
            _ => None,
        };
        Some(KvEvent {
            key,
            op,
            call: self.call,
            ret,
        })
    }
}
