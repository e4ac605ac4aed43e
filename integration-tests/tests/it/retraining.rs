//! Retraining under load: the memory node's retrainer keeps up with inserts of five times the
//! bulk-loaded key count, nothing is lost, and GETs return to their post-bulk-load cost.

#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use index_core::{OpKind, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, RingLayout, required_pool_bytes, verify};
use rdma_transport::{Endpoint, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{SimConfig, SimTransport};
use testkit::XorShift64;

fn keys(n: usize, seed: u64) -> Vec<u64> {
    let mut random = XorShift64::new(seed | 1);
    let mut out = BTreeSet::new();
    while out.len() < n {
        out.insert(random.next_u64() >> 1);
    }
    out.into_iter().collect()
}

/// Bytes and round trips per GET of `sample` keys through a store with fresh caches.
fn get_cost(transport: &SimTransport, sample: &[u64]) -> (f64, f64) {
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut client = store.client().expect("client");
    for &k in sample {
        assert_eq!(client.get(k).expect("get"), Some(k), "key {k}");
    }
    let gets = client.stats().get(OpKind::Get);
    (gets.rtts_per_op(), gets.bytes_per_op())
}

/// Whether the ring is empty, no slot is queued, and no slot is left for the idle sweep.
fn settled(transport: &SimTransport, layout: &leaf_store::Layout) -> bool {
    let ring = RingLayout::new(*layout);
    let mut ep = transport.endpoint().expect("endpoint");
    let head = ep.read_word(ring.head()).expect("read");
    let tail = ep.read_word(ring.tail()).expect("read");
    let unqueued = (0..layout.slot_capacity())
        .step_by(64)
        .all(|s| ep.read_word(ring.queued_bit(s).0).expect("read") == 0);
    let compact = leaf_store::read_slot_table(&mut ep, layout)
        .expect("slot table")
        .iter()
        .all(|&(addr, _)| {
            let header = leaf_store::ModelHeader::from_raw(ep.read_word(addr).expect("read"));
            header.slot_use() < RetrainConfig::default().idle_sweep_threshold
        });
    head == tail && unqueued && compact
}

#[test]
fn retraining_keeps_up_with_five_times_the_loaded_keys() {
    let n = 20_000;
    let all = keys(6 * n, 99);
    // Loaded keys are every sixth key: inserts land everywhere, in every slot.
    let loaded: Vec<u64> = all.iter().copied().step_by(6).collect();
    let inserted: Vec<u64> = all
        .iter()
        .copied()
        .enumerate()
        .filter(|(i, _)| i % 6 != 0)
        .map(|(_, k)| k)
        .collect();
    // Default layout (64 trained leaves per slot, fill 12): five times the keys make about seven
    // splits per leaf, some 450 per slot — each slot crosses the retraining threshold (128) often.
    let load = BulkLoadConfig {
        model_region_factor: 24,
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(loaded.len() as u64, &load, inserted.len() as u64 / 2)
        .next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], SimConfig::harsh()).expect("pool");
    let reports =
        bootstrap(&transport, loaded.iter().map(|&k| (k, k)).collect(), &load).expect("load");
    let layout = reports[0].layout;
    let sample: Vec<u64> = loaded.iter().copied().step_by(7).collect();
    let (rtt_loaded, bytes_loaded) = get_cost(&transport, &sample);
    assert!(
        (rtt_loaded - 1.0).abs() < 1e-9,
        "GET after bulk load: {rtt_loaded} round trips"
    );

    // The memory node's retrainer, on its own thread and endpoint.
    let stop = Arc::new(AtomicBool::new(false));
    let retrainer = {
        let (transport, stop) = (transport.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut worker = Retrainer::new(
                transport.endpoint().expect("endpoint"),
                transport.memory_nodes()[0],
                RetrainConfig::default(),
            )
            .expect("retrainer");
            worker
                .run(|| stop.load(Ordering::Acquire))
                .expect("retrainer run")
        })
    };

    // Writers wait for the retrainer as long as it takes: on a machine running more threads than
    // it has cores, its thread (with the harsh mode's yields) can be off a core past the default
    // two seconds a writer waits for a frozen slot, which says nothing of whether it keeps up.
    let config = StoreConfig {
        wait_limit: Duration::from_secs(60),
        ..StoreConfig::default()
    };
    let store = Arc::new(Store::open(transport.clone(), config).expect("open"));
    let writers = 3;
    let published: Arc<Vec<AtomicUsize>> =
        Arc::new((0..writers).map(|_| AtomicUsize::new(0)).collect());
    let shares: Vec<Vec<u64>> = (0..writers)
        .map(|t| inserted.iter().copied().skip(t).step_by(writers).collect())
        .collect();
    let writing = Arc::new(AtomicBool::new(true));
    let reader = {
        let (store, published, shares, writing) = (
            Arc::clone(&store),
            Arc::clone(&published),
            shares.clone(),
            Arc::clone(&writing),
        );
        std::thread::spawn(move || {
            let mut client = store.client().expect("client");
            let mut random = XorShift64::new(5);
            let mut reads = 0u64;
            while writing.load(Ordering::Acquire) {
                let state = random.next_u64();
                let t = (state % shares.len() as u64) as usize;
                let done = published[t].load(Ordering::Acquire);
                if done > 0 {
                    let key = shares[t][(state >> 8) as usize % done];
                    assert_eq!(
                        client.get(key).expect("get"),
                        Some(key),
                        "completed insert of {key} not visible"
                    );
                    reads += 1;
                }
            }
            reads
        })
    };
    let started = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|t| {
            let (store, published, share) = (
                Arc::clone(&store),
                Arc::clone(&published),
                shares[t].clone(),
            );
            std::thread::spawn(move || {
                let mut client = store.client().expect("client");
                for (i, &k) in share.iter().enumerate() {
                    assert!(client.insert(k, k).expect("insert"), "insert {k}");
                    published[t].store(i + 1, Ordering::Release);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    let insert_seconds = started.elapsed().as_secs_f64();
    writing.store(false, Ordering::Release);
    let reads = reader.join().expect("reader");

    // Let the queue drain and the idle sweep compact what is left, then stop the retrainer.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !settled(&transport, &layout) {
        assert!(Instant::now() < deadline, "the retrainer never settled");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    let stats = retrainer.join().expect("retrainer thread");
    eprintln!(
        "{} inserts in {insert_seconds:.2} s ({:.0}/s) with {reads} concurrent reads; {} retrains ({} rebuilt under freeze), {:.1} µs each, {:.1} ns training per key",
        inserted.len(),
        inserted.len() as f64 / insert_seconds,
        stats.retrains,
        stats.rebuilt_under_freeze,
        stats.total_nanos as f64 / stats.retrains.max(1) as f64 / 1000.0,
        stats.train_nanos as f64 / stats.keys_trained.max(1) as f64
    );
    assert!(stats.retrains > 0, "nothing was retrained");

    // Nothing lost, the pool is sound, GETs cost what they did after the bulk load.
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.keys, all.len() as u64);
    let mut client = store.client().expect("client");
    let everything = client.scan(0, usize::MAX >> 1).expect("scan");
    assert!(
        everything.iter().map(|e| e.0).eq(all.iter().copied()),
        "scan differs from the keys written"
    );
    let sample: Vec<u64> = all.iter().copied().step_by(41).collect();
    let (rtt, bytes) = get_cost(&transport, &sample);
    eprintln!(
        "GET after bulk load: {rtt_loaded:.3} RTT, {bytes_loaded:.1} B; after retraining: {rtt:.3} RTT, {bytes:.1} B; {report}"
    );
    assert!(
        (rtt - 1.0).abs() < 1e-9,
        "GET after retraining: {rtt} round trips"
    );
    assert!(
        bytes <= bytes_loaded * 1.10,
        "GET bytes {bytes} vs {bytes_loaded} after bulk load"
    );
}

/// A leaf that a writer keeps rewriting can stay torn through every re-read of the snapshot taken
/// before the freeze. That must not stop the worker: the snapshot is discarded and the record is
/// built under the freeze, once the writer is out.
/// The keys [`first_leaf`] loads.
const FIRST_LEAF_KEYS: std::ops::Range<u64> = 0..32;

/// A pool of 32 keys (0, 1000, …) in tiny leaves, and its slot 0's first trained leaf.
struct FirstLeaf {
    transport: SimTransport,
    ep: sim_transport::SimEndpoint,
    record_addr: rdma_transport::RemoteAddr,
    record: leaf_store::ModelRecord,
    leaf_addr: rdma_transport::RemoteAddr,
    /// The leaf's bytes as loaded.
    good: Vec<u8>,
}

fn first_leaf() -> FirstLeaf {
    let loaded: Vec<u64> = FIRST_LEAF_KEYS.map(|i| i * 1000).collect();
    let (transport, layout) = integration_tests::load(
        &loaded,
        64,
        &integration_tests::tiny(),
        SimConfig::default(),
    );
    let mut ep = transport.endpoint().expect("endpoint");
    let record_addr = leaf_store::read_slot_table(&mut ep, &layout).expect("table")[0].0;
    let record = leaf_store::read_record(&mut ep, &layout, 0, record_addr).expect("record");
    let leaf_addr = layout.leaf_addr(record.lt[0].leaf_num());
    let mut good = vec![0u8; layout.leaf_bytes() as usize];
    ep.read(leaf_addr, &mut good).expect("read");
    FirstLeaf {
        transport,
        ep,
        record_addr,
        record,
        leaf_addr,
        good,
    }
}

#[test]
fn a_leaf_torn_before_the_freeze_does_not_stop_the_worker() {
    let FirstLeaf {
        transport,
        mut ep,
        record_addr,
        record,
        leaf_addr,
        good,
    } = first_leaf();
    let entry = record.lt[0];
    let entry_addr = record_addr
        .checked_add(record.layout().lt_entry(0))
        .expect("addr");

    // A writer holds the leaf's lock, half way through rewriting it (its checksum fails on every
    // read), and finishes 200 ms after the worker starts its retraining (or once it sees the
    // record frozen): the worker's first snapshot sees the torn leaf; the worker waits for the
    // lock (up to its 500 ms drain limit) before it freezes. (The 200 ms used to be 50 ms from
    // the writer's own start, which a loaded machine could reach before the worker's first
    // snapshot: the worker then saw no torn leaf and rebuilt nothing.)
    let held = leaf_store::try_lock(&mut ep, entry_addr, entry, 1)
        .expect("cas")
        .expect("unlocked");
    let mut torn = good.clone();
    *torn.last_mut().expect("bytes") ^= 1;
    ep.write(leaf_addr, &torn).expect("write");
    let (go, started) = std::sync::mpsc::channel::<()>();
    let writer = {
        let transport = transport.clone();
        std::thread::spawn(move || {
            let mut ep = transport.endpoint().expect("endpoint");
            started.recv().expect("the worker starts");
            let started = std::time::Instant::now();
            while !leaf_store::ModelHeader::from_raw(ep.read_word(record_addr).expect("read"))
                .is_locked()
                && started.elapsed() < Duration::from_millis(200)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            ep.write(leaf_addr, &good).expect("write");
            leaf_store::unlock(&mut ep, entry_addr, held, None).expect("unlock");
        })
    };

    let mut worker = Retrainer::new(
        transport.endpoint().expect("endpoint"),
        transport.memory_nodes()[0],
        RetrainConfig::default(),
    )
    .expect("retrainer");
    go.send(()).expect("the writer waits");
    let report = worker
        .retrain_slot(0)
        .expect("the worker goes on")
        .expect("slot 0 retrained");
    assert!(report.rebuilt_under_freeze);
    writer.join().expect("writer");
    let store = Store::open(transport.clone(), StoreConfig::default()).expect("open");
    let mut client = store.client().expect("client");
    for k in FIRST_LEAF_KEYS.map(|i| i * 1000) {
        assert_eq!(client.get(k).expect("get"), Some(k));
    }
    assert!(
        verify(&mut ep, transport.memory_nodes()[0])
            .expect("verify")
            .is_clean()
    );
}

/// A reader waits out a leaf left torn longer than its attempts would last spinning (a writer
/// process descheduled in the middle of its WRITE, where memory is shared, did that to a reader
/// on a loaded machine: it gave up after 10,000 attempts in a few milliseconds). It retries,
/// yielding, until it has made `max_attempts` attempts and the wait limit has passed, and reads
/// the leaf once whole.
#[test]
fn a_get_waits_out_a_leaf_torn_for_longer_than_its_attempts_last() {
    let FirstLeaf {
        transport,
        mut ep,
        record,
        leaf_addr,
        good,
        ..
    } = first_leaf();
    let key = leaf_store::Leaf::decode(record.lt[0].leaf_num(), &good)
        .expect("whole")
        .entries()[0]
        .0;
    let mut torn = good.clone();
    *torn.last_mut().expect("bytes") ^= 1;
    ep.write(leaf_addr, &torn).expect("write");
    let mut reader = integration_tests::client(&transport, StoreConfig::default());
    let mender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        ep.write(leaf_addr, &good).expect("write");
    });
    let started = Instant::now();
    assert_eq!(reader.get(key).expect("get"), Some(key));
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "read a torn leaf as whole"
    );
    mender.join().expect("mender");
}
