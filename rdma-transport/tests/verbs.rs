//! The verbs backend: a clean typed error without a device; the conformance suite with one.
//! Run with `cargo test -p rdma-transport --features verbs`.

#![cfg(feature = "verbs")]

use rdma_transport::conformance::{self, Scratch};
use rdma_transport::verbs::{ServedRegion, VerbsServer, VerbsTransport, device_present};
use rdma_transport::{Endpoint, Transport, TransportError};

#[test]
fn without_a_device_opening_is_a_clean_no_device_error() {
    if device_present() {
        eprintln!("an RDMA device is present: the no-device path cannot be exercised here");
        return;
    }
    match VerbsTransport::connect("127.0.0.1:9", None) {
        Err(TransportError::NoDevice(message)) => assert!(!message.is_empty()),
        other => panic!("expected NoDevice, got {other:?}"),
    }
    let mut memory = vec![0u64; 512];
    let region = ServedRegion {
        id: 0,
        ptr: memory.as_mut_ptr().cast(),
        len: 4096,
    };
    // SAFETY: no device means nothing is registered; the region is not touched by the NIC.
    let served = unsafe { VerbsServer::start("127.0.0.1:0", None, &[region]) };
    assert!(
        matches!(served, Err(TransportError::NoDevice(_))),
        "{served:?}"
    );
    assert!(matches!(
        VerbsTransport::connect("127.0.0.1:9", Some("mlx5_0")),
        Err(TransportError::NoDevice(_))
    ));
}

/// A verbs server on loopback serving a leaked region of `words` words as memory node 0.
fn loopback_server(words: usize) -> (VerbsServer, ServedRegion) {
    // The region lives for the rest of the process, as registration requires.
    let memory: &'static mut [u64] = Box::leak(vec![0u64; words].into_boxed_slice());
    let region = ServedRegion {
        id: 0,
        ptr: memory.as_mut_ptr().cast(),
        len: (memory.len() * 8) as u64,
    };
    // SAFETY: the region is leaked, so it stays mapped and valid for the rest of the process.
    let server = unsafe { VerbsServer::start("127.0.0.1:0", None, &[region]) }.expect("server");
    (server, region)
}

#[test]
fn the_conformance_suite_passes_over_a_loopback_queue_pair() {
    if !device_present() {
        eprintln!("skipped: no RDMA device on this machine (the verbs conformance run needs one)");
        return;
    }
    let (server, region) = loopback_server(1 << 17);
    let transport = VerbsTransport::connect(server.local_addr(), None).expect("connect");
    assert_eq!(transport.memory_nodes()[0].region_len, region.len);
    conformance::run_all(&transport, Scratch::new(0, 0, region.len));
}

#[test]
fn a_fenced_queue_pair_reaches_its_compute_node_as_fenced() {
    if !device_present() {
        eprintln!("skipped: no RDMA device on this machine (fencing a queue pair needs one)");
        return;
    }
    let (server, region) = loopback_server(1 << 12);
    let transport = VerbsTransport::connect(server.local_addr(), None).expect("connect");
    // Broken until the notice is read: at most the completion timeout and a little more.
    conformance::a_fenced_connection_says_so(
        &transport,
        &server.fence(),
        Scratch::new(0, 0, region.len),
        std::time::Duration::from_secs(15),
    );
}

#[test]
fn a_failed_batch_breaks_the_endpoint_and_a_fresh_one_works() {
    if !device_present() {
        eprintln!("skipped: no RDMA device on this machine (breaking a queue pair needs one)");
        return;
    }
    let (server, _) = loopback_server(1 << 12);
    let transport = VerbsTransport::connect(server.local_addr(), None).expect("connect");
    let mut ep = transport.endpoint().expect("endpoint");
    let word = rdma_transport::RemoteAddr::new(0, 0).expect("addr");
    ep.write_word(word, 5).expect("a working queue pair");
    assert!(server.disconnect_all() >= 1);
    // The peer's queue pair is gone: the batch fails (retries exhausted, or no completion)...
    assert!(ep.read_word(word).is_err());
    // ...and the endpoint stays broken: nothing more is posted through it.
    assert!(matches!(ep.read_word(word), Err(TransportError::Broken(_))));
    let mut fresh = transport.endpoint().expect("a fresh queue pair");
    assert_eq!(fresh.read_word(word), Ok(5));
}
