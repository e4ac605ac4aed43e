//! Per-operation counters.

use rdma_transport::Stats;

/// The operation types a client counts separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `get`.
    Get,
    /// `insert`.
    Insert,
    /// `update`.
    Update,
    /// `delete`.
    Delete,
    /// `upsert`.
    Upsert,
    /// `scan`.
    Scan,
}

impl OpKind {
    /// All kinds, in a stable order.
    pub const ALL: [OpKind; 6] = [
        OpKind::Get,
        OpKind::Insert,
        OpKind::Update,
        OpKind::Delete,
        OpKind::Upsert,
        OpKind::Scan,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Insert => "insert",
            OpKind::Update => "update",
            OpKind::Delete => "delete",
            OpKind::Upsert => "upsert",
            OpKind::Scan => "scan",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counters of one operation type: how many, and the transport counters they used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// Operations completed (successfully or not).
    pub ops: u64,
    /// Verbs, bytes and round trips they used, including cache refreshes and retries.
    pub net: Stats,
}

impl OpCounters {
    /// Round trips per operation.
    pub fn rtts_per_op(&self) -> f64 {
        self.net.batches as f64 / self.ops.max(1) as f64
    }

    /// Verbs per operation.
    pub fn verbs_per_op(&self) -> f64 {
        self.net.verbs() as f64 / self.ops.max(1) as f64
    }

    /// Bytes moved (read plus written) per operation.
    pub fn bytes_per_op(&self) -> f64 {
        (self.net.bytes_read + self.net.bytes_written) as f64 / self.ops.max(1) as f64
    }
}

/// Counters per operation type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpStats {
    by_kind: [OpCounters; 6],
}

impl OpStats {
    /// The counters of `kind`.
    pub fn get(&self, kind: OpKind) -> OpCounters {
        self.by_kind[kind.index()]
    }

    pub(crate) fn record(&mut self, kind: OpKind, net: Stats) {
        let c = &mut self.by_kind[kind.index()];
        c.ops += 1;
        c.net += net;
    }

    /// Adds `other`'s counters to these.
    pub fn merge(&mut self, other: &OpStats) {
        for (mine, theirs) in self.by_kind.iter_mut().zip(&other.by_kind) {
            mine.ops += theirs.ops;
            mine.net += theirs.net;
        }
    }
}
