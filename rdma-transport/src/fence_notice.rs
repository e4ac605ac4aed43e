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
//! **Invariant.** Before the memory node moves a connection to the error state, it writes one
//! byte, [`NOTICE`], on that connection's bootstrap stream, which it holds open for as long as
//! the connection lives and which carries nothing else after the bootstrap exchange. A compute
//! endpoint whose connection fails looks for that byte, waiting at most [`PATIENCE`], and
//! reports [`TransportError::Fenced`] if it is there and [`TransportError::Broken`] otherwise.
//! The byte leaves before the queue pair breaks and the failure surfaces only after the retries
//! run out, hundreds of times later than a byte takes to cross a working network: a fenced
//! compute node finds the notice unless the network itself failed, when `Broken` is as true.
//! Once heard, the notice is kept: every later failure of the connection says `Fenced` too.

#![cfg_attr(not(feature = "verbs"), allow(dead_code))]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::TransportError;

/// The byte a memory node writes on a bootstrap stream to say "this connection is fenced".
pub(crate) const NOTICE: u8 = 0xFE;

/// How long a compute endpoint whose connection failed waits for a notice that has not arrived.
/// Paid only when a connection fails, which ends the endpoint anyway.
pub(crate) const PATIENCE: Duration = Duration::from_millis(200);

/// Memory-node side: tells the compute end of `stream` that its connection is being fenced.
/// Best effort — a compute node already gone reads nothing, and needs to.
pub(crate) fn give(stream: &mut impl Write) {
    let _ = stream.write_all(&[NOTICE]).and_then(|()| stream.flush());
}

/// Compute side: a connection's bootstrap stream, listened to for the memory node's notice.
#[derive(Debug)]
pub(crate) struct Listener {
    stream: TcpStream,
    heard: bool,
}

impl Listener {
    /// Listens on `stream`, the bootstrap stream once its exchange is over.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            heard: false,
        }
    }

    /// Whether the memory node fenced this connection, waiting at most `patience` for its
    /// notice. A stream that closed, failed or carried anything else says no.
    pub(crate) fn heard(&mut self, patience: Duration) -> bool {
        if !self.heard
            && self
                .stream
                .set_read_timeout(Some(patience.max(Duration::from_millis(1))))
                .is_ok()
        {
            let mut byte = [0u8];
            self.heard = matches!(self.stream.read(&mut byte), Ok(1) if byte[0] == NOTICE);
        }
        self.heard
    }

    /// What a failure of this connection to memory node `node`, for reason `why`, is: `Fenced`
    /// if the memory node said so, `Broken` otherwise.
    pub(crate) fn failure(&mut self, node: u16, why: String) -> TransportError {
        if self.heard(PATIENCE) {
            TransportError::Fenced(node)
        } else {
            TransportError::Broken(why)
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
            if self.served.gives_notice {
                give(&mut stream);
            }
            error.store(true, Ordering::SeqCst);
            Ok(Fenced::Done)
        }
    }

    struct VerbsLikeEndpoint {
        served: Arc<Served>,
        nodes: [MemoryNodeInfo; 1],
        id: u64,
        error: Arc<AtomicBool>,
        notice: Listener,
        broken: Option<TransportError>,
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
                broken: None,
                stats: Stats::default(),
            })
        }

        fn memory_nodes(&self) -> &[MemoryNodeInfo] {
            &self.nodes
        }
    }

    impl Endpoint for VerbsLikeEndpoint {
        fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
            if let Some(why) = &self.broken {
                return Err(why.clone());
            }
            crate::validate_batch(verbs)?;
            for verb in verbs.iter() {
                crate::validate_verb(verb, &self.nodes)?;
            }
            if self.error.load(Ordering::SeqCst) {
                // The requests go out, are dropped, and are retried until the retries run out.
                std::thread::sleep(RETRIES_RUN_OUT);
                let why = self.notice.failure(0, "retries exhausted".into());
                self.broken = Some(why.clone());
                return Err(why);
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
        conformance::a_fenced_connection_says_so(&transport, &transport, Scratch::new(0, 0, LEN));
    }

    /// The broken variant: a fence without its notice is reported as `Broken`, and the
    /// conformance case catches it.
    #[test]
    #[should_panic(expected = "must fail with Fenced")]
    fn without_the_notice_the_compute_node_sees_broken_and_the_case_catches_it() {
        let transport = VerbsLike::start(false);
        conformance::a_fenced_connection_says_so(&transport, &transport, Scratch::new(0, 0, LEN));
    }

    #[test]
    fn a_closed_or_silent_stream_is_no_notice_and_a_heard_one_is_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        let mut notice = Listener::new(client);
        assert!(
            !notice.heard(Duration::from_millis(5)),
            "silence is no notice"
        );
        server.write_all(&[NOTICE ^ 1]).expect("write");
        assert!(
            !notice.heard(Duration::from_millis(5)),
            "another byte is no notice"
        );
        give(&mut server);
        assert_eq!(notice.failure(3, "x".into()), TransportError::Fenced(3));
        drop(server);
        assert!(notice.heard(Duration::ZERO), "a heard notice is kept");
        let second = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        drop(listener.accept().expect("accept"));
        let mut closed = Listener::new(second);
        assert_eq!(
            closed.failure(3, "gone".into()),
            TransportError::Broken("gone".into())
        );
    }
}
