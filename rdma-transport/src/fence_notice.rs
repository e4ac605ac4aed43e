//! How a compute node learns that a memory node fenced it, where the fence itself only breaks
//! the connection (the verbs backend's: the memory node moves the compute node's queue pair to
//! the error state). Written without a device, so it is tested everywhere.
//!
//! A queue pair in the error state drops what arrives on it. The compute side sees nothing of
//! that until its requests' retries run out (about half a second), and then only an error
//! completion, the same a cut cable gives: on its own it could say `Broken`, never `Fenced`. But
//! the store learns that it was declared dead through [`TransportError::Fenced`] (or its lease
//! word, which a broken connection cannot read), so a fence reported as `Broken` leaves a store
//! renewing and reconnecting forever.
//!
//! **Invariants.**
//! * Once the memory node has moved a connection to the error state, it writes one byte,
//!   [`NOTICE`], on that connection's bootstrap stream, which it holds open for as long as the
//!   connection lives and on which nothing else is written after the bootstrap exchange. So a
//!   compute node hears the notice only if it was fenced, and once it does, nothing it posts on
//!   that connection executes any more.
//! * A compute endpoint stops when one of its connections fails ([`Stopped`]). The batches in
//!   flight then fail with `Broken`: whether they executed is unknown (a request may have
//!   executed and its acknowledgement been lost, fence or no fence). Every later call posts
//!   nothing and fails with `Broken` until a notice is heard on any of the endpoint's connections
//!   — listened for without waiting, at each such call — and with `Fenced` from then on (naming
//!   that connection's memory node): so `Fenced` always
//!   means "executed nothing", as on the simulator. The notice leaves as the fence returns, and
//!   the failure surfaces only once the retries run out, about half a second later: in a working
//!   network the first call after the failure hears it; over a cut one, a later call does.

#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use crate::TransportError;

/// The byte a memory node writes on a bootstrap stream to say "this connection is fenced".
pub(crate) const NOTICE: u8 = 0xFE;

/// Memory-node side: tells the compute end of `stream` that its connection is fenced. Best
/// effort — a compute node already gone reads nothing, and needs to.
pub(crate) fn give(stream: &mut impl Write) {
    let _ = stream.write_all(&[NOTICE]).and_then(|()| stream.flush());
}

/// Compute side: a connection's bootstrap stream, listened to for the memory node's notice.
#[derive(Debug)]
pub(crate) struct Listener {
    stream: TcpStream,
    /// Whether the stream can still carry a notice (open, and made non-blocking).
    listening: bool,
    heard: bool,
}

impl Listener {
    /// Listens on `stream`, the bootstrap stream once its exchange is over (it is made
    /// non-blocking: listening never waits).
    pub(crate) fn new(stream: TcpStream) -> Self {
        let listening = stream.set_nonblocking(true).is_ok();
        Self {
            stream,
            listening,
            heard: false,
        }
    }

    /// Whether the memory node said it fenced this connection, from what the stream holds now.
    /// A stream that closed or failed carries no notice; other bytes are not one. Once heard, the
    /// notice is kept.
    pub(crate) fn heard(&mut self) -> bool {
        while self.listening && !self.heard {
            let mut byte = [0u8];
            match self.stream.read(&mut byte) {
                Ok(1) => self.heard = byte[0] == NOTICE,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Ok(_) | Err(_) => self.listening = false,
            }
        }
        self.heard
    }
}

/// Why a compute endpoint stopped: one of its connections failed.
#[derive(Debug)]
pub(crate) struct Stopped {
    why: String,
    /// The memory node whose notice was heard.
    fenced: Option<u16>,
}

impl Stopped {
    /// A connection failed for reason `why`.
    pub(crate) fn new(why: String) -> Self {
        Self { why, fenced: None }
    }

    /// What a batch in flight when the endpoint stopped fails with: `Broken`, whether it
    /// executed being unknown.
    pub(crate) fn in_flight(&self) -> TransportError {
        TransportError::Broken(self.why.clone())
    }

    /// What a later call, which posts nothing, fails with: `Fenced`, naming its memory node,
    /// once the notice of any of the endpoint's connections (`notices`, each with the memory
    /// node it serves) has been heard — the one that failed, or another the memory node fenced
    /// meanwhile — and `Broken` until then.
    pub(crate) fn later<'a>(
        &mut self,
        notices: impl IntoIterator<Item = (u16, &'a mut Listener)>,
    ) -> TransportError {
        if self.fenced.is_none() {
            self.fenced = notices
                .into_iter()
                .find_map(|(node, notice)| notice.heard().then_some(node));
        }
        match self.fenced {
            Some(node) => TransportError::Fenced(node),
            None => self.in_flight(),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The fencing case of the conformance suite against a transport that fences the way the
    //! verbs backend does: the memory node's table of connections ([`crate::peers`]), bootstrap
    //! streams held open over TCP, a fence that puts the connection in an error state, and a
    //! compute side that notices only when its retries run out.

    use std::net::{SocketAddr, TcpListener};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::conformance::{self, Scratch};
    use crate::peers::{Peers, hold_until_closed};
    use crate::{Endpoint, Fence, Fenced, MemoryNodeInfo, Stats, Transport, Verb};

    /// How long a request on a connection in the error state takes to fail: the NIC's retries.
    const RETRIES_RUN_OUT: Duration = Duration::from_millis(20);
    const LEN: u64 = 1 << 16;

    /// One connection's state on the memory node: in the error state or not.
    type Connection = (Arc<AtomicBool>, TcpStream);

    struct Served {
        memory: Mutex<Vec<u8>>,
        peers: Mutex<Peers<Connection>>,
        /// Whether the fence gives its notice (the fix), or only breaks the connection.
        gives_notice: bool,
    }

    /// The memory node: serves bootstraps on `addr`.
    #[derive(Clone)]
    struct VerbsLike {
        served: Arc<Served>,
        addr: SocketAddr,
        nodes: [MemoryNodeInfo; 1],
    }

    impl VerbsLike {
        fn start(gives_notice: bool) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("addr");
            let served = Arc::new(Served {
                memory: Mutex::new(vec![0; LEN as usize]),
                peers: Mutex::new(Peers::new(Peers::<Connection>::fresh_nonce())),
                gives_notice,
            });
            let serving = Arc::clone(&served);
            std::thread::spawn(move || {
                for mut stream in listener.incoming().flatten() {
                    let served = Arc::clone(&serving);
                    std::thread::spawn(move || {
                        let error = Arc::new(AtomicBool::new(false));
                        let notice = stream.try_clone().expect("clone the bootstrap stream");
                        let id = served.peers.lock().expect("peers").insert((error, notice));
                        if stream.write_all(&id.to_le_bytes()).is_ok() {
                            hold_until_closed(&mut stream);
                        }
                        served.peers.lock().expect("peers").remove(id);
                    });
                }
            });
            Self {
                served,
                addr,
                nodes: [MemoryNodeInfo {
                    id: 0,
                    region_len: LEN,
                }],
            }
        }
    }

    impl Fence for VerbsLike {
        fn fence(&self, id: u64) -> Result<Fenced, TransportError> {
            let Some((error, mut stream)) = self.served.peers.lock().expect("peers").remove(id)
            else {
                return Ok(Fenced::Done);
            };
            error.store(true, Ordering::SeqCst);
            if self.served.gives_notice {
                give(&mut stream);
            }
            Ok(Fenced::Done)
        }
    }

    struct VerbsLikeEndpoint {
        served: Arc<Served>,
        nodes: [MemoryNodeInfo; 1],
        id: u64,
        error: Arc<AtomicBool>,
        notice: Listener,
        stopped: Option<Stopped>,
        stats: Stats,
    }

    impl Transport for VerbsLike {
        type Endpoint = VerbsLikeEndpoint;

        fn endpoint(&self) -> Result<VerbsLikeEndpoint, TransportError> {
            let mut stream = TcpStream::connect(self.addr).expect("connect");
            let mut id = [0u8; 8];
            stream.read_exact(&mut id).expect("the connection id");
            let id = u64::from_le_bytes(id);
            let peers = self.served.peers.lock().expect("peers");
            let error = peers.get(id).map(|(e, _)| Arc::clone(e)).expect("served");
            drop(peers);
            Ok(VerbsLikeEndpoint {
                served: Arc::clone(&self.served),
                nodes: self.nodes,
                id,
                error,
                notice: Listener::new(stream),
                stopped: None,
                stats: Stats::default(),
            })
        }

        fn memory_nodes(&self) -> &[MemoryNodeInfo] {
            &self.nodes
        }
    }

    impl Endpoint for VerbsLikeEndpoint {
        fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
            if let Some(stopped) = &mut self.stopped {
                return Err(stopped.later([(0, &mut self.notice)]));
            }
            crate::validate_batch(verbs)?;
            for verb in verbs.iter() {
                crate::validate_verb(verb, &self.nodes)?;
            }
            if self.error.load(Ordering::SeqCst) {
                // The requests go out, are dropped, and are retried until the retries run out.
                std::thread::sleep(RETRIES_RUN_OUT);
                let stopped = Stopped::new("retries exhausted".into());
                let error = stopped.in_flight();
                self.stopped = Some(stopped);
                return Err(error);
            }
            let mut memory = self.served.memory.lock().expect("memory");
            for verb in verbs.iter_mut() {
                let at = verb.addr().offset() as usize;
                let word = |m: &[u8]| u64::from_le_bytes(m[at..at + 8].try_into().expect("8"));
                match verb {
                    Verb::Read { buf, .. } => buf.copy_from_slice(&memory[at..at + buf.len()]),
                    Verb::Write { data, .. } => memory[at..at + data.len()].copy_from_slice(data),
                    Verb::Cas {
                        expected,
                        desired,
                        old,
                        ..
                    } => {
                        *old = word(&memory);
                        if *old == *expected {
                            memory[at..at + 8].copy_from_slice(&desired.to_le_bytes());
                        }
                    }
                    Verb::Faa { add, old, .. } => {
                        *old = word(&memory);
                        let new = old.wrapping_add(*add);
                        memory[at..at + 8].copy_from_slice(&new.to_le_bytes());
                    }
                }
                self.stats.record_verb(verb);
            }
            Ok(())
        }

        fn stats(&self) -> Stats {
            self.stats
        }

        fn connection_id(&self, node: u16) -> Option<u64> {
            (node == 0).then_some(self.id)
        }
    }

    #[test]
    fn a_fence_that_only_breaks_the_connection_still_reaches_the_compute_node_as_fenced() {
        let transport = VerbsLike::start(true);
        conformance::a_fenced_connection_says_so(
            &transport,
            &transport,
            Scratch::new(0, 0, LEN),
            Duration::from_secs(5),
        );
    }

    /// The broken variant: a fence without its notice is reported as `Broken`, and the
    /// conformance case catches it.
    #[test]
    #[should_panic(expected = "must fail with Fenced")]
    fn without_the_notice_the_compute_node_sees_broken_and_the_case_catches_it() {
        let transport = VerbsLike::start(false);
        conformance::a_fenced_connection_says_so(
            &transport,
            &transport,
            Scratch::new(0, 0, LEN),
            Duration::from_secs(1),
        );
    }

    /// A connected pair of streams: (memory node's end, compute node's end).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let compute = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        (listener.accept().expect("accept").0, compute)
    }

    /// Until `notice` has heard what the memory node wrote (loopback delivers within
    /// milliseconds), or 5 s.
    fn settle(notice: &mut Listener) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !notice.heard() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_closed_or_silent_stream_is_no_notice_another_byte_neither_and_a_heard_one_is_kept() {
        let (mut memory_node, compute) = pair();
        let mut notice = Listener::new(compute);
        assert!(
            !notice.heard(),
            "silence is no notice, and listening does not wait"
        );
        memory_node.write_all(&[NOTICE ^ 1]).expect("write");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!notice.heard(), "another byte is no notice");
        give(&mut memory_node);
        settle(&mut notice);
        assert!(notice.heard(), "the notice was given");
        drop(memory_node);
        assert!(notice.heard(), "a heard notice is kept");
        let (memory_node, compute) = pair();
        let mut closed = Listener::new(compute);
        drop(memory_node);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!closed.heard(), "a closed stream is no notice");
        assert!(!closed.heard(), "and stays none");
    }

    #[test]
    fn a_stopped_endpoint_says_broken_for_what_was_in_flight_and_fenced_once_it_hears_so() {
        let (mut memory_node, compute) = pair();
        let mut notice = Listener::new(compute);
        let (_other_node, other) = pair();
        let mut other = Listener::new(other);
        let mut stopped = Stopped::new("retries exhausted".into());
        let broken = TransportError::Broken("retries exhausted".into());
        assert_eq!(stopped.in_flight(), broken);
        assert_eq!(
            stopped.later([(2, &mut other), (4, &mut notice)]),
            broken,
            "no notice: broken"
        );
        give(&mut memory_node);
        settle(&mut notice);
        // Heard on the second of the endpoint's connections: named by its memory node.
        assert_eq!(
            stopped.later([(2, &mut other), (4, &mut notice)]),
            TransportError::Fenced(4)
        );
        assert_eq!(
            stopped.in_flight(),
            broken,
            "what was in flight may have executed: never Fenced"
        );
        drop(memory_node);
        assert_eq!(stopped.later([]), TransportError::Fenced(4), "kept");
    }
}
