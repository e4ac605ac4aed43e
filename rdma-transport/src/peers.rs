//! A memory node's table of the queue pairs it keeps for connected compute nodes, by connection
//! id (the verbs backend's server side; written without a device, so it is tested everywhere).
//!
//! **Invariants.**
//! * An id names at most one connection, ever: ids are a counter under a per-server nonce, never
//!   reused. Queue-pair numbers are recycled by the device once a queue pair is destroyed, so
//!   fencing by queue-pair number could cut off an unrelated compute node that connected later —
//!   a retried recovery fencing a dead node's connection would hit it.
//! * A connection lives exactly as long as its compute endpoint's bootstrap stream: the server
//!   holds the stream open and removes (destroys) the queue pair when it closes — the endpoint
//!   dropped, or its process gone. Without that, every client, reconnect and `rolex inspect` left
//!   a queue pair behind until the device ran out.

#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use std::io::Read;

/// Connections by id.
#[derive(Debug)]
pub(crate) struct Peers<Q> {
    nonce: u64,
    counter: u32,
    entries: Vec<(u64, Q)>,
}

impl<Q> Peers<Q> {
    /// An empty table whose ids carry `nonce` (31 bits of it), so a restarted server does not
    /// hand out the ids of its previous run.
    pub(crate) fn new(nonce: u64) -> Self {
        Self {
            nonce: nonce & 0x7fff_ffff,
            counter: 0,
            entries: Vec::new(),
        }
    }

    /// A nonce for [`Peers::new`] from the clock and the process id.
    pub(crate) fn fresh_nonce() -> u64 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ (u64::from(std::process::id()) << 20)
    }

    /// Adds a connection; returns its id (never 0, below bit 63).
    pub(crate) fn insert(&mut self, queue_pair: Q) -> u64 {
        self.counter = self.counter.wrapping_add(1).max(1);
        let id = (self.nonce << 32) | u64::from(self.counter);
        self.entries.push((id, queue_pair));
        id
    }

    /// Takes connection `id` out of the table (to fence or destroy it); `None` if it is not there
    /// (closed, fenced, or never known).
    pub(crate) fn remove(&mut self, id: u64) -> Option<Q> {
        let at = self.entries.iter().position(|&(i, _)| i == id)?;
        Some(self.entries.swap_remove(at).1)
    }

    /// Connection `id`, if it is in the table.
    #[cfg(test)]
    pub(crate) fn get(&self, id: u64) -> Option<&Q> {
        self.entries.iter().find(|&&(i, _)| i == id).map(|(_, q)| q)
    }

    /// Connections in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Removes every connection; returns how many there were.
    pub(crate) fn clear(&mut self) -> usize {
        let count = self.entries.len();
        self.entries.clear();
        count
    }
}

/// Reads `stream` until its other end closes it (or it fails): how long a bootstrap stream,
/// and so its connection, lives.
pub(crate) fn hold_until_closed(stream: &mut impl Read) {
    let mut scratch = [0u8; 64];
    while matches!(stream.read(&mut scratch), Ok(n) if n > 0) {}
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_and_a_stale_fence_touches_no_newer_connection() {
        let mut peers = Peers::new(7);
        let a = peers.insert("a");
        let b = peers.insert("b");
        assert_ne!(a, b);
        assert!(a != 0 && a < 1 << 63);
        assert_eq!(peers.remove(a), Some("a"));
        let c = peers.insert("c");
        assert_ne!(c, a, "an id was reused");
        // A recovery fencing the old id again finds nothing, and leaves the newer ones alone.
        assert_eq!(peers.remove(a), None);
        assert_eq!(peers.len(), 2);
        assert_eq!(peers.remove(c), Some("c"));
        // Another server run (another nonce) hands out other ids.
        let mut restarted = Peers::new(8);
        assert_ne!(restarted.insert("d"), b);
    }

    #[test]
    fn a_connection_lives_as_long_as_its_bootstrap_stream() {
        use std::net::{TcpListener, TcpStream};
        use std::sync::{Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let peers = Arc::new(Mutex::new(Peers::new(1)));
        let server = {
            let peers = Arc::clone(&peers);
            std::thread::spawn(move || {
                let (mut stream, _) = listener.accept().expect("accept");
                let id = peers.lock().expect("peers").insert("queue pair");
                hold_until_closed(&mut stream);
                peers.lock().expect("peers").remove(id)
            })
        };
        let client = TcpStream::connect(addr).expect("connect");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while peers.lock().expect("peers").len() == 0 {
            assert!(std::time::Instant::now() < deadline, "never registered");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!server.is_finished(), "released while the endpoint lives");
        drop(client);
        assert_eq!(server.join().expect("server"), Some("queue pair"));
        assert_eq!(peers.lock().expect("peers").len(), 0);
    }
}
