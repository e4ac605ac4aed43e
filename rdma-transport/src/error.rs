//! Transport errors.

use crate::RemoteAddr;

/// Why a verb or a connection failed. Every malformed request is reported here; none panics.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportError {
    /// The verb's byte range does not lie inside the memory node's region.
    #[error("{len} bytes at {addr} run past the end of memory node {}'s {region_len}-byte region", addr.node())]
    OutOfBounds {
        /// Start of the offending range.
        addr: RemoteAddr,
        /// Its length in bytes.
        len: usize,
        /// Size of the memory node's region.
        region_len: u64,
    },
    /// An atomic (CAS/FAA) whose address is not 8-byte aligned.
    #[error("remote atomic at {0} is not 8-byte aligned")]
    Misaligned(RemoteAddr),
    /// The address names a memory node this transport does not know.
    #[error("memory node {0} is unknown to this transport")]
    UnknownNode(u16),
    /// No RDMA device is present (verbs backend).
    #[error("no RDMA device found: {0}")]
    NoDevice(String),
    /// Connecting to, or talking to, a memory node failed.
    #[error("connection failed: {0}")]
    Connection(String),
    /// A batch carries more verbs or staging bytes than one batch may
    /// ([`crate::MAX_BATCH_VERBS`], [`crate::MAX_BATCH_BYTES`]); nothing was executed. Split the
    /// work ([`crate::Endpoint::batches`]).
    #[error(
        "a batch of {verbs} verbs and {bytes} staging bytes exceeds the limits ({} verbs, {} bytes)",
        crate::MAX_BATCH_VERBS,
        crate::MAX_BATCH_BYTES
    )]
    BatchTooLarge {
        /// Verbs in the batch.
        verbs: usize,
        /// Staging bytes it would use.
        bytes: usize,
    },
    /// The endpoint is broken: a batch timed out or completed with an error, so its queue pair
    /// may still execute or write into local buffers; nothing more is posted through it. Open a
    /// fresh endpoint (a new queue pair through the bootstrap) to go on.
    #[error("endpoint broken: {0}")]
    Broken(String),
    /// A verb failed because the test harness asked it to (simulator fault injection).
    #[error("injected fault")]
    InjectedFault,
    /// The endpoint has crashed (simulator fault injection) and executes nothing more.
    #[error("endpoint crashed")]
    Crashed,
    /// A completion was delivered to verbs other than the batch it completed (another number,
    /// kind, address or length of verbs): nothing was copied. A bug of the caller.
    #[error("a completion was delivered to verbs that are not the batch it completed")]
    NotThatBatch,
    /// Registering memory with the RDMA device would lock more than this process may
    /// (`RLIMIT_MEMLOCK`, without `CAP_IPC_LOCK`): nothing was registered.
    #[error(
        "registering {needed} bytes with the RDMA device locks them in memory, with {already} \
         locked already, but this process may lock only {limit} bytes (RLIMIT_MEMLOCK): raise \
         it (`ulimit -l unlimited`; `LimitMEMLOCK=infinity` for a systemd service; \
         `--ulimit memlock=-1` for a container) or grant the process CAP_IPC_LOCK"
    )]
    MemoryLockLimit {
        /// Bytes the registration would lock.
        needed: u64,
        /// Bytes this process had registered already.
        already: u64,
        /// The soft limit, in bytes.
        limit: u64,
    },
    /// The memory node cut this connection off ([`crate::Fence`]): it declared the compute node
    /// dead. Nothing posted through it takes effect any more; the compute node must join again.
    #[error("connection fenced by memory node {0}: this compute node was declared dead")]
    Fenced(u16),
}
