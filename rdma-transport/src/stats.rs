//! Per-endpoint verb counters.

use std::ops::{Add, AddAssign, Sub};

/// Counters kept by every [`crate::Endpoint`]. One batch is one round trip; single verbs issued
/// through `read`/`write`/`cas`/`faa` are batches of one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Doorbell batches posted, i.e. network round trips.
    pub batches: u64,
    /// READ verbs executed.
    pub reads: u64,
    /// WRITE verbs executed.
    pub writes: u64,
    /// CAS verbs executed (successful or not).
    pub cas: u64,
    /// FAA verbs executed.
    pub faa: u64,
    /// Bytes moved by READs and returned by atomics (8 per atomic).
    pub bytes_read: u64,
    /// Bytes moved by WRITEs and sent by atomics (8 per FAA, 16 per CAS).
    pub bytes_written: u64,
}

impl Stats {
    /// Total verbs of every kind.
    pub fn verbs(&self) -> u64 {
        self.reads + self.writes + self.cas + self.faa
    }
}

impl Add for Stats {
    type Output = Stats;
    fn add(self, o: Stats) -> Stats {
        Stats {
            batches: self.batches + o.batches,
            reads: self.reads + o.reads,
            writes: self.writes + o.writes,
            cas: self.cas + o.cas,
            faa: self.faa + o.faa,
            bytes_read: self.bytes_read + o.bytes_read,
            bytes_written: self.bytes_written + o.bytes_written,
        }
    }
}

impl AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        *self = *self + o;
    }
}

impl Sub for Stats {
    type Output = Stats;
    /// The counters accumulated between two snapshots (`later - earlier`); saturates at zero.
    fn sub(self, o: Stats) -> Stats {
        Stats {
            batches: self.batches.saturating_sub(o.batches),
            reads: self.reads.saturating_sub(o.reads),
            writes: self.writes.saturating_sub(o.writes),
            cas: self.cas.saturating_sub(o.cas),
            faa: self.faa.saturating_sub(o.faa),
            bytes_read: self.bytes_read.saturating_sub(o.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(o.bytes_written),
        }
    }
}
