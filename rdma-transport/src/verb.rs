//! One-sided verbs, as posted in a doorbell batch.

use crate::RemoteAddr;

/// One one-sided verb inside a doorbell batch (see [`crate::Endpoint::batch`]).
///
/// Buffers are borrowed for the duration of the batch; atomics carry an `old` slot that the
/// endpoint fills with the value the remote word held before the atomic executed.
///
/// **Ordering** (InfiniBand RC; `docs/ARCHITECTURE.md` §2). WRITEs take effect in order
/// with respect to earlier WRITEs, and READs observe memory in order; but a later verb — a WRITE
/// included — may take effect before an earlier READ of its batch has returned its data or an
/// earlier atomic has executed. A verb that must take effect (or observe memory) only after every
/// earlier READ and atomic of its batch has completed is marked *fenced* (`IBV_SEND_FENCE`). The
/// simulator's reordering mode (`sim-transport`) applies exactly these permitted reorderings.
#[derive(Debug)]
pub enum Verb<'a> {
    /// `READ`: copy `buf.len()` bytes from `addr` into `buf`.
    Read {
        /// Remote source.
        addr: RemoteAddr,
        /// Local destination; its length is the READ's length.
        buf: &'a mut [u8],
        /// Execute only after every earlier verb of the batch has completed.
        fenced: bool,
    },
    /// `WRITE`: copy `data` to `addr`.
    Write {
        /// Remote destination.
        addr: RemoteAddr,
        /// Local source; its length is the WRITE's length.
        data: &'a [u8],
        /// Take effect only after every earlier READ and atomic of the batch has completed.
        fenced: bool,
    },
    /// `CAS`: if the 8-byte word at `addr` equals `expected`, replace it with `desired`.
    Cas {
        /// Remote word; must be 8-byte aligned.
        addr: RemoteAddr,
        /// Value the word must hold for the swap to happen.
        expected: u64,
        /// Value written on success.
        desired: u64,
        /// Execute only after every earlier verb of the batch has completed.
        fenced: bool,
        /// Filled by the endpoint: the word's value before the CAS, on success and failure alike.
        old: u64,
    },
    /// `FAA`: add `add` (wrapping) to the 8-byte word at `addr`.
    Faa {
        /// Remote word; must be 8-byte aligned.
        addr: RemoteAddr,
        /// Addend (wrapping arithmetic, as on RDMA NICs).
        add: u64,
        /// Execute only after every earlier verb of the batch has completed.
        fenced: bool,
        /// Filled by the endpoint: the word's value before the addition.
        old: u64,
    },
}

impl<'a> Verb<'a> {
    /// An unfenced READ of `buf.len()` bytes at `addr`.
    pub fn read(addr: RemoteAddr, buf: &'a mut [u8]) -> Self {
        Verb::Read {
            addr,
            buf,
            fenced: false,
        }
    }

    /// A WRITE of `data` to `addr`.
    pub fn write(addr: RemoteAddr, data: &'a [u8]) -> Self {
        Verb::Write {
            addr,
            data,
            fenced: false,
        }
    }

    /// An unfenced CAS of the word at `addr` from `expected` to `desired`.
    pub fn cas(addr: RemoteAddr, expected: u64, desired: u64) -> Self {
        Verb::Cas {
            addr,
            expected,
            desired,
            fenced: false,
            old: 0,
        }
    }

    /// An unfenced FAA of `add` to the word at `addr`.
    pub fn faa(addr: RemoteAddr, add: u64) -> Self {
        Verb::Faa {
            addr,
            add,
            fenced: false,
            old: 0,
        }
    }

    /// The same verb, marked fenced: it takes effect (or observes memory) only after every earlier
    /// READ and atomic of its batch has completed.
    #[must_use]
    pub fn fenced(mut self) -> Self {
        match &mut self {
            Verb::Read { fenced, .. }
            | Verb::Write { fenced, .. }
            | Verb::Cas { fenced, .. }
            | Verb::Faa { fenced, .. } => *fenced = true,
        }
        self
    }

    /// Whether the verb waits for every earlier verb of its batch.
    pub fn is_fenced(&self) -> bool {
        match self {
            Verb::Read { fenced, .. }
            | Verb::Write { fenced, .. }
            | Verb::Cas { fenced, .. }
            | Verb::Faa { fenced, .. } => *fenced,
        }
    }

    /// The remote address the verb targets.
    pub fn addr(&self) -> RemoteAddr {
        match self {
            Verb::Read { addr, .. }
            | Verb::Write { addr, .. }
            | Verb::Cas { addr, .. }
            | Verb::Faa { addr, .. } => *addr,
        }
    }

    /// Number of remote bytes the verb touches.
    pub fn len(&self) -> usize {
        match self {
            Verb::Read { buf, .. } => buf.len(),
            Verb::Write { data, .. } => data.len(),
            Verb::Cas { .. } | Verb::Faa { .. } => 8,
        }
    }

    /// Whether the verb touches no bytes (a zero-length READ or WRITE).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the verb is a CAS or FAA.
    pub fn is_atomic(&self) -> bool {
        matches!(self, Verb::Cas { .. } | Verb::Faa { .. })
    }

    /// For a CAS or FAA that has executed: the word's value before it. `None` for READ and WRITE.
    pub fn old_value(&self) -> Option<u64> {
        match self {
            Verb::Cas { old, .. } | Verb::Faa { old, .. } => Some(*old),
            Verb::Read { .. } | Verb::Write { .. } => None,
        }
    }

    /// For a CAS that has executed: whether it swapped. `None` for every other verb.
    pub fn cas_succeeded(&self) -> Option<bool> {
        match self {
            Verb::Cas { expected, old, .. } => Some(old == expected),
            _ => None,
        }
    }
}
