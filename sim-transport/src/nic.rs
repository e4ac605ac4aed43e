//! The simulated NIC's connection table: what lets a memory node cut a compute node off.
//!
//! On InfiniBand a memory node fences a compute node by moving its queue pairs to the error
//! state: no packet of theirs lands afterwards, and a packet lands whole or not at all. The
//! simulator keeps the same promise with a table stored *behind* each pool's RDMA-visible region
//! (in the same mapping, so every process attached to a pool file shares it):
//!
//! ```text
//! NIC area (NIC_BYTES after the pool's region; a pool file pads it to NIC_AREA_BYTES, whole
//! 2 MiB pages):
//!   CONNECTIONS entries of ENTRY_WORDS words:
//!     0 state   open:1 | revoked:1 | generation:30 | in_flight:32
//!     1 pid     the process that opened the connection
//!     2 start   that process's start time (clock ticks after boot: a reused pid differs)
//!     3 log_at  offset+1 of the WRITE being executed (0: none)
//!     4 log_len its length
//!     5 pid_ns  the process's pid namespace (the inode of /proc/self/ns/pid; 0: unknown)
//!     6..       its bytes (up to LOG_BYTES)
//!
//! connection id = generation << 16 | (entry index + 1)      (never 0)
//! ```
//!
//! An endpoint opens one connection per pool. Every batch *enters* (adds 1 to `in_flight` by CAS,
//! only while the entry is open, not revoked and of its generation) and *leaves* when done. A
//! WRITE is placed packet by packet (`SimConfig::packet_bytes`, at most [`LOG_BYTES`]), and each
//! packet is copied into the log before it is placed. [`fence`] sets `revoked`, then looks at
//! `in_flight`: drained, the connection is closed; if the process that owns the connection has
//! died in the middle of a batch (killed: `in_flight` never drains), the packet it was placing is
//! replayed from the log — a packet lands whole — and the connection is closed. So after `fence`
//! reports [`Fenced::Done`] nothing of the connection takes effect any more, and a killed
//! process leaves a WRITE longer than one packet with a prefix of whole packets placed, as a NIC
//! does (the index finishes such a WRITE from its redo leaf). A live process stopped inside a
//! batch is not waited for: the fence reports [`Fenced::InFlight`] (no new batch starts) and the
//! memory node fences again at its next check.
//!
//! A process counts as dead only when `/proc` proves it: its pid is gone, a zombie, or another
//! process (another start time). A process in another pid namespace than the fencer's cannot be
//! looked up by its pid here (the number names another process, or none), so it counts as
//! alive: its batch in flight is waited for, never replayed under its feet.

// Loom builds have no connection table (CONNECTIONS = 0).
#![cfg_attr(
    loom,
    allow(clippy::absurd_extreme_comparisons, clippy::reversed_empty_ranges)
)]

use rdma_transport::Fenced;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::time::{Duration, Instant};

/// Connections per pool (entries are reused once closed).
pub(crate) const CONNECTIONS: usize = if cfg!(loom) { 0 } else { 1024 };
/// Whether connections are tracked (not in loom builds: fencing is not modelled there).
pub(crate) const fn enabled() -> bool {
    !cfg!(loom)
}

/// Bytes of the largest packet the log holds. One word short of 2 KiB: the entry keeps the size
/// it had before it recorded the pid namespace, so pool files made then still attach.
pub(crate) const LOG_BYTES: usize = 2040;
const ENTRY_WORDS: usize = LOG_WORD + LOG_BYTES / 8;
/// Index of the word holding the owner's pid namespace.
const NS_WORD: usize = 5;
/// Index of the first log word in an entry.
const LOG_WORD: usize = 6;
/// Bytes of the connection table behind each pool's region.
pub(crate) const NIC_BYTES: u64 = (CONNECTIONS * ENTRY_WORDS * 8) as u64;
/// The huge page size a pool file is sized for (hugetlbfs refuses a file that is not a whole
/// number of its pages).
#[cfg_attr(loom, allow(dead_code))]
pub const HUGE_PAGE_BYTES: u64 = 2 << 20;
/// Bytes of the NIC area behind a pool file's region: the connection table, padded to whole huge
/// pages, so that a region of whole huge pages makes a pool file of whole huge pages.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const NIC_AREA_BYTES: u64 = NIC_BYTES.next_multiple_of(HUGE_PAGE_BYTES);

const OPEN: u64 = 1 << 63;
const REVOKED: u64 = 1 << 62;
const GEN_SHIFT: u32 = 32;
const GEN_MASK: u64 = (1 << 30) - 1;
const IN_FLIGHT_MASK: u64 = (1 << 32) - 1;

/// How long [`fence`] waits for a batch in flight to leave before reporting it in flight (a
/// running batch takes microseconds; a stopped process is not waited for).
const FENCE_SPIN: Duration = Duration::from_micros(200);

/// A connection an endpoint holds on one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Connection {
    index: usize,
    generation: u64,
}

impl Connection {
    /// The id a memory node fences it by.
    pub(crate) fn id(self) -> u64 {
        (self.generation << 16) | (self.index as u64 + 1)
    }

    fn from_id(id: u64) -> Option<Self> {
        let index = usize::try_from(id & 0xffff).ok()?.checked_sub(1)?;
        (index < CONNECTIONS).then_some(Self {
            index,
            generation: (id >> 16) & GEN_MASK,
        })
    }
}

fn entry(nic: &[AtomicU64], index: usize) -> &[AtomicU64] {
    &nic[index * ENTRY_WORDS..(index + 1) * ENTRY_WORDS]
}

/// A process as the connection table names it: pid, start time, pid namespace.
pub(crate) type Process = (u64, u64, u64);

/// This process: its pid, start time and pid namespace.
pub(crate) fn this_process() -> Process {
    let pid = u64::from(std::process::id());
    (pid, start_time(pid).unwrap_or(0), pid_namespace())
}

/// This process's pid namespace: the inode `/proc/self/ns/pid` links to (`pid:[4026531836]`);
/// 0 if it cannot be read.
fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), `None` if it cannot be read.
fn start_time(pid: u64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // After the name: state is field 3, start time field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Opens a connection for process `(pid, start)`: takes a closed entry with no batch in flight,
/// with the next generation. `None` if every entry is open or still draining.
pub(crate) fn open(nic: &[AtomicU64], (pid, start, ns): Process) -> Option<Connection> {
    for index in 0..CONNECTIONS {
        let e = entry(nic, index);
        let mut state = e[0].load(Ordering::Acquire);
        while state & OPEN == 0 && state & IN_FLIGHT_MASK == 0 {
            let generation = ((state >> GEN_SHIFT) + 1) & GEN_MASK;
            let opened = OPEN | (generation << GEN_SHIFT);
            match e[0].compare_exchange(state, opened, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    e[1].store(pid, Ordering::Release);
                    e[2].store(start, Ordering::Release);
                    e[3].store(0, Ordering::Release);
                    e[NS_WORD].store(ns, Ordering::Release);
                    return Some(Connection { index, generation });
                }
                Err(seen) => state = seen,
            }
        }
    }
    None
}

/// Closes `conn` (its endpoint is dropped). A fenced connection may already be closed. A batch
/// still in flight (one whose completion was lost while its verbs execute) keeps its count: the
/// entry is not reopened, and a fence waits for it, until it leaves.
pub(crate) fn close(nic: &[AtomicU64], conn: Connection) {
    let e = entry(nic, conn.index);
    let mut state = e[0].load(Ordering::Acquire);
    while state & OPEN != 0 && (state >> GEN_SHIFT) & GEN_MASK == conn.generation {
        let closed = state & !(OPEN | REVOKED);
        match e[0].compare_exchange(state, closed, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(seen) => state = seen,
        }
    }
}

/// Enters a batch on `conn`; `false` (and nothing changed) if the connection was fenced. A CAS,
/// not an add: an endpoint whose entry was fenced and reused must never touch the new owner's
/// count (an add and its undo, straddling the reuse, would corrupt it).
pub(crate) fn enter(nic: &[AtomicU64], conn: Connection) -> bool {
    let e = entry(nic, conn.index);
    let mut state = e[0].load(Ordering::Acquire);
    loop {
        let ours = state & OPEN != 0
            && state & REVOKED == 0
            && (state >> GEN_SHIFT) & GEN_MASK == conn.generation;
        if !ours {
            return false;
        }
        match e[0].compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) => state = seen,
        }
    }
}

/// Leaves the batch [`enter`] let in.
pub(crate) fn leave(nic: &[AtomicU64], conn: Connection) {
    entry(nic, conn.index)[0].fetch_sub(1, Ordering::AcqRel);
}

/// Records the packet of `data` at `offset` about to be placed (at most [`LOG_BYTES`]: the
/// endpoint never places a longer one).
pub(crate) fn log_write(nic: &[AtomicU64], conn: Connection, offset: u64, data: &[u8]) {
    debug_assert!(data.len() <= LOG_BYTES, "packets fit the log");
    let data = &data[..data.len().min(LOG_BYTES)];
    let e = entry(nic, conn.index);
    for (word, chunk) in e[LOG_WORD..].iter().zip(data.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
    }
    e[4].store(data.len() as u64, Ordering::Relaxed);
    e[3].store(offset + 1, Ordering::Release);
}

/// The logged WRITE has executed.
pub(crate) fn clear_log(nic: &[AtomicU64], conn: Connection) {
    entry(nic, conn.index)[3].store(0, Ordering::Release);
}

/// Whether the process `(pid, start, ns)` is gone: `/proc/<pid>` does not exist, or shows a
/// zombie, or a different process (another start time: the pid was reused). Anything else counts
/// as alive — a `/proc` that cannot be read for another reason, and a process of another pid
/// namespace (or of one this process cannot name): its pid means nothing here. A fence then
/// waits rather than replay a WRITE under a live writer's feet.
fn process_is_dead((pid, start, ns): Process) -> bool {
    if pid == u64::from(std::process::id()) {
        return false;
    }
    let here = pid_namespace();
    if ns == 0 || here == 0 || ns != here {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("");
            let started = fields.nth(18).and_then(|f| f.parse::<u64>().ok());
            state == "Z" || state == "X" || (start != 0 && started.is_some_and(|s| s != start))
        }
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Fences connection `id`: revokes it (no batch starts any more), and if no batch is in flight
/// — or its process was killed inside it (the WRITE it was executing is replayed from the log
/// through `replay`) — closes it: `Done`. A batch of a live process still in flight after a
/// moment: `InFlight` (call again later). An unknown, closed or reused id is already fenced.
pub(crate) fn fence(nic: &[AtomicU64], id: u64, mut replay: impl FnMut(u64, &[u8])) -> Fenced {
    let Some(conn) = Connection::from_id(id) else {
        return Fenced::Done;
    };
    let e = entry(nic, conn.index);
    let mut state = e[0].load(Ordering::Acquire);
    loop {
        if (state >> GEN_SHIFT) & GEN_MASK != conn.generation
            || state & (OPEN | IN_FLIGHT_MASK) == 0
        {
            return Fenced::Done;
        }
        if state & REVOKED != 0 || state & OPEN == 0 {
            break;
        }
        match e[0].compare_exchange(state, state | REVOKED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(seen) => state = seen,
        }
    }
    let owner = (
        e[1].load(Ordering::Acquire),
        e[2].load(Ordering::Acquire),
        e[NS_WORD].load(Ordering::Acquire),
    );
    let started = Instant::now();
    loop {
        let state = e[0].load(Ordering::Acquire);
        if (state >> GEN_SHIFT) & GEN_MASK != conn.generation
            || state & (OPEN | IN_FLIGHT_MASK) == 0
        {
            return Fenced::Done;
        }
        if state & IN_FLIGHT_MASK == 0 {
            break;
        }
        if started.elapsed() > FENCE_SPIN {
            if !process_is_dead(owner) {
                return Fenced::InFlight;
            }
            // Killed inside a batch: the WRITE it was executing lands whole.
            let at = e[3].load(Ordering::Acquire);
            if at != 0 {
                let len = (e[4].load(Ordering::Acquire) as usize).min(LOG_BYTES);
                let mut bytes = vec![0u8; len.next_multiple_of(8)];
                for (chunk, word) in bytes.chunks_exact_mut(8).zip(&e[LOG_WORD..]) {
                    chunk.copy_from_slice(&word.load(Ordering::Acquire).to_le_bytes());
                }
                replay(at - 1, &bytes[..len]);
            }
            break;
        }
        crate::sync::thread::yield_now();
    }
    close(nic, conn);
    Fenced::Done
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn table() -> Vec<AtomicU64> {
        (0..CONNECTIONS * ENTRY_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect()
    }

    #[test]
    fn a_fenced_connection_lets_no_batch_in_and_its_entry_is_reused_under_a_new_id() {
        let nic = table();
        let me = this_process();
        let a = open(&nic, me).expect("free entry");
        let b = open(&nic, me).expect("free entry");
        assert_ne!(a.id(), b.id());
        assert!(enter(&nic, a));
        leave(&nic, a);
        assert_eq!(
            fence(&nic, a.id(), |_, _| panic!("nothing to replay")),
            Fenced::Done
        );
        assert!(!enter(&nic, a), "a fenced connection must not execute");
        assert!(enter(&nic, b), "other connections are untouched");
        leave(&nic, b);
        let c = open(&nic, me).expect("the fenced entry is free again");
        assert_eq!(c.index, a.index);
        assert_ne!(c.id(), a.id());
        assert!(
            !enter(&nic, a),
            "the old connection stays cut off after reuse"
        );
        assert!(enter(&nic, c));
        leave(&nic, c);
        assert_eq!(
            fence(&nic, a.id(), |_, _| panic!("nothing to replay")),
            Fenced::Done,
            "stale id: no-op"
        );
        assert!(
            enter(&nic, c),
            "fencing a stale id must not touch the entry's new owner"
        );
        leave(&nic, c);
    }

    #[test]
    fn a_stale_endpoint_never_touches_the_count_of_its_entry_s_next_owner() {
        let nic = table();
        let me = this_process();
        let old = open(&nic, me).expect("free entry");
        assert_eq!(
            fence(&nic, old.id(), |_, _| panic!("nothing to replay")),
            Fenced::Done
        );
        let new = open(&nic, me).expect("reused");
        assert_eq!(new.index, old.index);
        for _ in 0..3 {
            assert!(!enter(&nic, old));
        }
        assert_eq!(
            entry(&nic, new.index)[0].load(Ordering::Acquire) & IN_FLIGHT_MASK,
            0,
            "the stale endpoint changed the new owner's count"
        );
        assert!(enter(&nic, new));
        leave(&nic, new);
    }

    /// A connection closed (its endpoint dropped) while a batch of it is still in flight — a
    /// completion lost while its verbs execute — is neither reopened nor taken for fenced until
    /// the batch leaves: the seeded simulation found its late leave corrupting the next owner's
    /// state word (a new store's connection read as fenced).
    #[test]
    fn a_connection_closed_with_a_batch_in_flight_drains_before_reuse() {
        let nic = table();
        let me = this_process();
        let late = open(&nic, me).expect("free entry");
        assert!(enter(&nic, late));
        close(&nic, late);
        let other = open(&nic, me).expect("another entry");
        assert_ne!(other.index, late.index, "a draining entry is not reopened");
        assert_eq!(
            fence(&nic, late.id(), |_, _| panic!(
                "a live process: nothing to replay"
            )),
            Fenced::InFlight,
            "its batch has not landed"
        );
        leave(&nic, late);
        assert_eq!(
            fence(&nic, late.id(), |_, _| panic!("nothing to replay")),
            Fenced::Done
        );
        let again = open(&nic, me).expect("free entry");
        assert_eq!(again.index, late.index, "drained, the entry is free again");
        assert!(enter(&nic, again), "its new owner is not fenced");
        leave(&nic, again);
        assert!(enter(&nic, other));
        leave(&nic, other);
    }

    #[test]
    fn a_reused_pid_is_a_dead_process_and_an_unreadable_proc_is_not() {
        let (_, start, ns) = this_process();
        assert!(start != 0, "this process's start time is readable");
        assert!(ns != 0, "this process's pid namespace is readable");
        // The pid of a process that is alive (the parent of this one), with its start time: alive.
        let parent = u64::from(std::os::unix::process::parent_id());
        let parent_start = start_time(parent).expect("the parent's start time");
        assert!(!process_is_dead((parent, parent_start, ns)));
        // The same pid with another start time: the pid was reused, the process is gone.
        assert!(process_is_dead((parent, parent_start + 1, ns)));
        // No such pid.
        assert!(process_is_dead((1 << 40, 1, ns)));
    }

    #[test]
    fn a_process_of_another_pid_namespace_is_never_taken_for_dead() {
        let (_, _, ns) = this_process();
        // Its pid names no process here, or another one: neither says anything about it.
        assert!(!process_is_dead((1 << 40, 1, ns + 1)));
        let parent = u64::from(std::os::unix::process::parent_id());
        let parent_start = start_time(parent).expect("the parent's start time");
        assert!(!process_is_dead((parent, parent_start + 1, ns + 1)));
        // An owner whose namespace is unknown counts as alive too.
        assert!(!process_is_dead((1 << 40, 1, 0)));
        // So its batch in flight is never replayed and the fence waits for it.
        let nic = table();
        let conn = open(&nic, (1 << 40, 1, ns + 1)).expect("free entry");
        assert!(enter(&nic, conn));
        log_write(&nic, conn, 4096, &[7u8; 24]);
        assert_eq!(
            fence(&nic, conn.id(), |_, _| panic!(
                "replayed under a live writer"
            )),
            Fenced::InFlight
        );
        leave(&nic, conn);
        assert_eq!(
            fence(&nic, conn.id(), |_, _| panic!("nothing to replay")),
            Fenced::Done
        );
    }

    #[test]
    fn a_killed_process_inside_a_write_has_its_write_completed_by_the_fence() {
        let nic = table();
        // A pid no process has (beyond the kernel's pid_max).
        let conn = open(&nic, (1 << 40, 1, this_process().2)).expect("free entry");
        assert!(enter(&nic, conn));
        log_write(&nic, conn, 4096, &[7u8; 24]);
        // ... and the process dies here: the batch never leaves.
        let mut replayed = Vec::new();
        let fenced = fence(&nic, conn.id(), |at, bytes| {
            replayed.push((at, bytes.to_vec()))
        });
        assert_eq!(
            fenced,
            Fenced::Done,
            "a dead process does not hold the fence up"
        );
        assert_eq!(replayed, vec![(4096, vec![7u8; 24])]);
        assert!(!enter(&nic, conn));
    }

    #[test]
    fn a_live_process_inside_a_batch_is_not_waited_for_and_starts_no_new_batch() {
        let nic = table();
        let conn = open(&nic, this_process()).expect("free entry");
        assert!(enter(&nic, conn));
        let started = Instant::now();
        assert_eq!(
            fence(&nic, conn.id(), |_, _| panic!("not dead")),
            Fenced::InFlight,
            "the fence must not close a connection with a batch in flight"
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "the fence waited on a stopped process: {:?}",
            started.elapsed()
        );
        // Revoked meanwhile: the stopped process starts nothing new once it resumes.
        leave(&nic, conn);
        assert!(!enter(&nic, conn), "a revoked connection let a batch in");
        assert_eq!(
            fence(&nic, conn.id(), |_, _| panic!("not dead")),
            Fenced::Done
        );
        assert!(!enter(&nic, conn));
    }
}
