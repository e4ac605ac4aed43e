//! Byte values across compute nodes and the memory node: freed blocks are reused only past the
//! reuse horizon, a reader paused between its leaf and its block READ gets the value it found
//! (its block is not reused under it), chunks of a store that closed go back to the region, and
//! churn keeps the region's claimed bytes near the live ones.

#![cfg(not(loom))]

use std::time::Duration;

use index_core::{Store, StoreConfig, bootstrap_values};
use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes, verify};
use rdma_transport::Transport;
use retrainer::Retrainer;
use sim_transport::{Gate, SimConfig, SimEndpoint, SimTransport};

use crate::common::{config, watcher};

fn load_config() -> BulkLoadConfig {
    BulkLoadConfig {
        epsilon: 2,
        delta: 4,
        fill: 3,
        slot_leaves: 2,
        model_region_factor: 24,
        values: Some(ValueConfig {
            bytes: 4 << 20,
            chunk_bytes: 8 * 1024,
        }),
        ..BulkLoadConfig::default()
    }
}

/// The value `version` of `key` writes: its bytes name both.
fn value(key: u64, version: u64) -> Vec<u8> {
    let mut v = format!("key {key} version {version};").into_bytes();
    v.resize(100, b'.');
    v
}

fn loaded(keys: u64, sim: SimConfig) -> SimTransport {
    loaded_in(keys, sim, load_config())
}

/// As [`loaded`], with the layout (and value region) of `load`.
fn loaded_in(keys: u64, sim: SimConfig, load: BulkLoadConfig) -> SimTransport {
    let size = required_pool_bytes(keys, &load, 2_000).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], sim).expect("pool");
    let pairs = (0..keys).map(|k| (k * 10, value(k * 10, 0))).collect();
    bootstrap_values(&transport, pairs, &load, |_, _, _, _| {}).expect("load");
    transport
}

/// Lets the memory node check leases (publishing the horizon, advancing the epoch when asked)
/// and the compute nodes' renewers announce.
fn settle(worker: &mut Retrainer<SimEndpoint>, rounds: usize) {
    for _ in 0..rounds {
        worker.check_members().expect("check");
        std::thread::sleep(Duration::from_millis(6));
    }
}

fn space(transport: &SimTransport) -> leaf_store::ValueSpace {
    let mut ep = transport.endpoint().expect("endpoint");
    let report = verify(&mut ep, transport.memory_nodes()[0]).expect("verify");
    assert!(report.is_clean(), "{report}");
    report.values.expect("a value region")
}

#[test]
fn freed_blocks_are_reused_once_the_horizon_passes_and_churn_stays_near_the_live_bytes() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    for round in 1..=60u64 {
        for k in 0..40 {
            assert_eq!(c.update_value(k * 10, &value(k * 10, round)), Ok(true));
        }
        settle(&mut worker, 1);
    }
    for k in 0..40 {
        assert_eq!(c.get_value(k * 10), Ok(Some(value(k * 10, 60))));
    }
    assert!(
        store.value_blocks_reused() > 1_000,
        "reused {}",
        store.value_blocks_reused()
    );
    let used = space(&transport);
    // 2,400 updates of 124-byte blocks (128-byte class, 63 to a chunk of 8 KiB) over 40 live
    // values: without reuse they would claim 39 chunks. With it, the chunks hold the live
    // blocks plus those freed during the few epochs a free waits.
    assert!(used.chunks_claimed <= 10, "{used}");
    assert_eq!(store.values_forgotten(), 0);
}

#[test]
fn a_reader_paused_before_its_block_read_gets_the_value_it_found() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let paused_store = Store::open(transport.clone(), config()).expect("open");
    let mut reader = paused_store.client().expect("client");
    let busy_store = Store::open(transport.clone(), config()).expect("open");
    let mut writer = busy_store.client().expect("client");
    assert_eq!(reader.get_value(170), Ok(Some(value(170, 0))));

    // Reuse works while nobody is paused (past the first chunk's fresh blocks).
    for round in 1..=100 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    let reused_before = busy_store.value_blocks_reused();
    assert!(reused_before > 0, "nothing was reused at all");

    // The reader READs the leaf (version 100), then stops before READing the block.
    let gate = Gate::new();
    reader.endpoint_mut().pause_after(1, gate.clone());
    let get = std::thread::spawn(move || {
        let got = reader.get_value(170);
        (got, reader.value_retries())
    });
    assert!(gate.wait_for_arrival(Duration::from_secs(5)));
    // Meanwhile the key is rewritten many times and the memory node reclaims all it may.
    for round in 101..=300 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    gate.open();
    let (got, retries) = get.join().expect("reader");
    assert_eq!(
        got,
        Ok(Some(value(170, 100))),
        "the paused reader's block was reused"
    );
    assert_eq!(retries, 0);
    // Once it is done, reuse goes on.
    for round in 301..=400 {
        writer
            .update_value(170, &value(170, round))
            .expect("update");
        settle(&mut worker, 1);
    }
    assert!(busy_store.value_blocks_reused() > reused_before);
    space(&transport);
}

#[test]
fn chunks_of_a_store_that_closed_go_back_and_another_store_reuses_their_free_blocks() {
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    {
        let store = Store::open(transport.clone(), config()).expect("open");
        let mut c = store.client().expect("client");
        for round in 1..=10 {
            for k in 0..40 {
                c.update_value(k * 10, &value(k * 10, round))
                    .expect("update");
            }
        }
        assert!(space(&transport).chunks_owned > 0);
    }
    settle(&mut worker, 3);
    let after = space(&transport);
    assert_eq!(after.chunks_owned, 0, "{after}");
    let claimed = after.chunks_claimed;
    // A new store takes the chunks that were left before any fresh one.
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    for round in 11..=30 {
        for k in 0..40 {
            c.update_value(k * 10, &value(k * 10, round))
                .expect("update");
        }
        settle(&mut worker, 1);
    }
    let later = space(&transport);
    // Every chunk left behind was taken (one per chunk the store needed, beside a fresh one).
    assert_eq!(later.chunks_owned, later.chunks_claimed, "{later}");
    assert!(
        later.chunks_claimed <= claimed + 4,
        "{later} (was {claimed} chunks)"
    );
    assert!(store.value_blocks_reused() > 0);
}

#[test]
fn a_reader_outside_the_epochs_that_finds_its_block_reused_reads_again_through_the_leaf() {
    // A store that did not join its memory node announces no epoch: nothing waits for its
    // operations, and a block it is about to READ may be freed and reused under it. The block's
    // key, length and checksum tell it so, and it reads again through the leaf.
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let outsider = Store::open(
        transport.clone(),
        StoreConfig {
            join_members: false,
            ..config()
        },
    )
    .expect("open");
    let mut reader = outsider.client().expect("client");
    let busy_store = Store::open(transport.clone(), config()).expect("open");
    let mut writer = busy_store.client().expect("client");
    assert_eq!(reader.get_value(170), Ok(Some(value(170, 0))));
    let gate = Gate::new();
    reader.endpoint_mut().pause_after(1, gate.clone());
    let get = std::thread::spawn(move || {
        let got = reader.get_value(170);
        (got, reader.value_retries())
    });
    assert!(gate.wait_for_arrival(Duration::from_secs(5)));
    // Every key rewritten many times: key 170's old block is freed and taken by another value.
    for round in 1..=60 {
        for k in 0..40 {
            writer
                .update_value(k * 10, &value(k * 10, round))
                .expect("update");
        }
        settle(&mut worker, 1);
    }
    assert!(busy_store.value_blocks_reused() > 0);
    gate.open();
    let (got, retries) = get.join().expect("reader");
    assert_eq!(
        got,
        Ok(Some(value(170, 60))),
        "a foreign or torn value was returned"
    );
    assert!(
        retries > 0,
        "the block was not reused under the reader (the test proves nothing)"
    );
    space(&transport);
}

/// The version a value of `key` carries, if its bytes are a value of `key` and whole.
fn version_of(key: u64, bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(&format!("key {key} version "))?;
    let (version, tail) = rest.split_once(';')?;
    let version: u64 = version.parse().ok()?;
    (bytes == stress_value(key, version).as_slice() && tail.bytes().all(|b| b == b'.'))
        .then_some(version)
}

/// Lengths vary with the version, so blocks of several size classes are freed and reused.
fn stress_value(key: u64, version: u64) -> Vec<u8> {
    let mut v = format!("key {key} version {version};").into_bytes();
    v.resize(30 + ((key * 7 + version * 13) % 300) as usize, b'.');
    v
}

#[test]
fn torn_stress_readers_on_other_stores_see_whole_current_values_while_blocks_are_reused() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    const KEYS: u64 = 64;
    const ROUNDS: u64 = 600;
    const WRITERS: u64 = 4;
    let load = load_config();
    let size = required_pool_bytes(KEYS, &load, 4_000).next_multiple_of(4096);
    let transport = SimTransport::anonymous_with(&[size], SimConfig::harsh()).expect("pool");
    let pairs = (0..KEYS)
        .map(|k| (k * 10, stress_value(k * 10, 0)))
        .collect();
    bootstrap_values(&transport, pairs, &load, |_, _, _, _| {}).expect("load");
    let node = transport.memory_nodes()[0];
    let cfg = StoreConfig {
        retrain_threshold: 4,
        ..config()
    };
    let writers = Store::open(transport.clone(), cfg.clone()).expect("open");
    let readers = Store::open(transport.clone(), cfg).expect("open");
    // What each key's last completed write was (a reader must never see older).
    let done_version: Arc<Vec<AtomicU64>> =
        Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (transport, stop) = (transport.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut worker = Retrainer::new(
                transport.endpoint().expect("endpoint"),
                node,
                retrainer::RetrainConfig {
                    idle_sweep_threshold: 2,
                    sweep_interval: Duration::from_millis(2),
                    ..retrainer::RetrainConfig::default()
                },
            )
            .expect("worker");
            worker.watch_members(
                Duration::from_secs(30),
                Box::new(transport.fence(node.id).expect("fence")),
            );
            worker.run(|| stop.load(Ordering::Acquire)).expect("worker")
        })
    };
    // Four writers on one store, each with a quarter of the keys.
    let mut threads = Vec::new();
    for t in 0..WRITERS {
        let mut client = writers.client().expect("client");
        let done_version = Arc::clone(&done_version);
        threads.push(std::thread::spawn(move || {
            for round in 1..=ROUNDS {
                for k in (t..KEYS).step_by(WRITERS as usize) {
                    let key = k * 10;
                    let v = stress_value(key, round);
                    let changed = if round % 5 == 0 {
                        client
                            .put_value(key, &v)
                            .expect("put")
                            .then_some(())
                            .is_none()
                    } else {
                        client.update_value(key, &v).expect("update")
                    };
                    assert!(changed, "key {key} round {round}");
                    done_version[k as usize].store(round, Ordering::Release);
                    if round % 10 == 0 {
                        // Keys beside it (never read by the checkers) split its leaves, and the
                        // retrainer moves all of them to new records.
                        let extra = key + 1 + (round / 10) % 9;
                        client
                            .put_value(extra, &stress_value(extra, round))
                            .expect("extra");
                    }
                }
            }
            client.value_retries()
        }));
    }
    let mut checkers = Vec::new();
    for r in 0..2u64 {
        let mut client = readers.client().expect("client");
        let done_version = Arc::clone(&done_version);
        let stop = Arc::clone(&stop);
        checkers.push(std::thread::spawn(move || {
            let mut seen = vec![0u64; KEYS as usize];
            let mut reads = 0u64;
            let mut i = r;
            while !stop.load(Ordering::Acquire) {
                i = i
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = i >> 20;
                let k = i % KEYS;
                let key = k * 10;
                if i % 7 == 0 {
                    // A scan: every value whole, the checked keys in order and none older than
                    // before the scan began.
                    let floor: Vec<u64> = (0..KEYS)
                        .map(|j| done_version[j as usize].load(Ordering::Acquire))
                        .collect();
                    let rows = client.scan_values(key, 24).expect("scan");
                    let mut next = k;
                    for (got, bytes) in &rows {
                        let version = version_of(*got, bytes)
                            .unwrap_or_else(|| panic!("torn or foreign value of {got}: {bytes:?}"));
                        if got % 10 != 0 {
                            continue;
                        }
                        assert_eq!(*got, next * 10, "scan skipped a key");
                        let j = next as usize;
                        assert!(
                            version >= floor[j],
                            "key {got}: version {version} < {}",
                            floor[j]
                        );
                        next += 1;
                    }
                } else {
                    let floor = done_version[k as usize]
                        .load(Ordering::Acquire)
                        .max(seen[k as usize]);
                    let bytes = client.get_value(key).expect("get").expect("present");
                    let version = version_of(key, &bytes)
                        .unwrap_or_else(|| panic!("torn or foreign value of {key}: {bytes:?}"));
                    assert!(
                        version >= floor,
                        "key {key}: version {version} after {floor}"
                    );
                    seen[k as usize] = version;
                }
                reads += 1;
            }
            (reads, client.value_retries())
        }));
    }
    let mut writer_retries = 0;
    for t in threads {
        writer_retries += t.join().expect("writer");
    }
    stop.store(true, Ordering::Release);
    let mut reads = 0;
    for c in checkers {
        let (n, retries) = c.join().expect("reader");
        reads += n;
        // Inside the epochs a block is never reused under a reader.
        assert_eq!(retries, 0, "a reader met a reused block");
    }
    assert_eq!(writer_retries, 0);
    let stats = worker.join().expect("worker");
    assert!(reads > 1_000, "readers did {reads} reads");
    assert!(
        writers.value_blocks_reused() > 1_000,
        "reused {}",
        writers.value_blocks_reused()
    );
    assert!(stats.retrains > 0, "no retraining ran");
    let mut c = readers.client().expect("client");
    for k in 0..KEYS {
        assert_eq!(c.get_value(k * 10), Ok(Some(stress_value(k * 10, ROUNDS))));
    }
    drop((c, writers, readers));
    space(&transport);
}

#[test]
fn a_block_handed_to_a_paused_write_is_not_taken_for_free_by_its_own_store() {
    // Client B of a store takes a block for its write and stops before its first batch (the
    // block's state byte still says free); client A of the same store meanwhile writes so much
    // that its allocator scans the chunk, waits out the horizon and reuses what it found free.
    // B's block must not be among what it found free: B writes it once it resumes, and two keys
    // would share one block.
    let transport = loaded(40, SimConfig::default());
    let mut worker = watcher(&transport);
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut a = store.client().expect("client");
    let mut b = store.client().expect("client");
    // A claims a chunk first, so B's block comes from it without a verb (a thread stopped inside
    // the allocator would hold its lock).
    a.update_value(0, &value(0, 0)).expect("update");
    let gate = Gate::new();
    b.endpoint_mut().pause_after(0, gate.clone());
    // B's key is in the last leaf (390 and up), which A leaves alone: B holds that leaf's lock
    // stripe while it is stopped.
    let paused = std::thread::spawn(move || {
        let done = b.put_value(395, &value(395, 1));
        (done, b)
    });
    assert!(gate.wait_for_arrival(Duration::from_secs(5)));
    for round in 1..=60 {
        for k in 0..39 {
            a.update_value(k * 10, &value(k * 10, round))
                .expect("update");
        }
        settle(&mut worker, 1);
    }
    gate.open();
    let (done, _b) = paused.join().expect("writer");
    assert_eq!(done, Ok(true));
    // B's operation held the store's epoch back; now reuse goes on.
    for round in 61..=120 {
        for k in 0..39 {
            a.update_value(k * 10, &value(k * 10, round))
                .expect("update");
        }
        settle(&mut worker, 1);
    }
    assert!(store.value_blocks_reused() > 0);
    for k in 0..39 {
        assert_eq!(
            a.get_value(k * 10),
            Ok(Some(value(k * 10, 120))),
            "key {}",
            k * 10
        );
    }
    assert_eq!(a.get_value(395), Ok(Some(value(395, 1))));
    space(&transport);
}

/// A pool of `keys` values in a value region of a few chunks only.
fn loaded_small(keys: u64, region_bytes: u64) -> SimTransport {
    let load = BulkLoadConfig {
        values: Some(ValueConfig {
            bytes: region_bytes,
            chunk_bytes: 8 * 1024,
        }),
        ..load_config()
    };
    loaded_in(keys, SimConfig::default(), load)
}

/// The memory node checking leases every 2 ms on its own thread until `stop`.
fn watching(
    transport: &SimTransport,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let mut worker = watcher(transport);
    let stop = std::sync::Arc::clone(stop);
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            worker.check_members().expect("check");
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

#[test]
fn a_writer_that_outruns_the_reuse_horizon_waits_for_it_instead_of_failing() {
    // Three chunks of 63 blocks for 40 live values: updates without a pause hand out every block
    // long before the memory node's horizon passes the first ones freed. Each such write waits
    // for the horizon (outside its own epoch, which would hold it back) and goes on.
    let transport = loaded_small(40, 3 * 8 * 1024 + 4096);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let memory_node = watching(&transport, &stop);
    let store = Store::open(transport.clone(), config()).expect("open");
    let mut c = store.client().expect("client");
    for round in 1..=30u64 {
        for k in 0..40 {
            assert_eq!(
                c.update_value(k * 10, &value(k * 10, round)),
                Ok(true),
                "key {} round {round}",
                k * 10
            );
        }
    }
    for k in 0..40 {
        assert_eq!(c.get_value(k * 10), Ok(Some(value(k * 10, 30))));
    }
    assert!(
        store.value_blocks_reused() > 1_000,
        "reused {}",
        store.value_blocks_reused()
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    memory_node.join().expect("memory node");
    drop((c, store));
    space(&transport);
}

#[test]
fn a_region_full_of_live_values_refuses_the_next_one_at_once_and_takes_values_again_once_some_go() {
    let transport = loaded_small(40, 3 * 8 * 1024 + 4096);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let memory_node = watching(&transport, &stop);
    let limit = Duration::from_secs(10);
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            wait_limit: limit,
            ..config()
        },
    )
    .expect("open");
    let mut c = store.client().expect("client");
    let mut inserted = 0u64;
    let started = std::time::Instant::now();
    let refused = loop {
        let key = 5 + 10 * inserted;
        match c.insert_value(key, &value(key, 0)) {
            Ok(true) => inserted += 1,
            other => break other,
        }
        assert!(
            inserted < 1_000,
            "a region of three chunks took {inserted} values"
        );
    };
    assert!(
        matches!(refused, Err(index_core::IndexError::ValuesExhausted { .. })),
        "{refused:?}"
    );
    // Every block of the region holds a live value: nothing could free one, so the writer did
    // not wait for one.
    assert!(started.elapsed() < limit, "waited {:?}", started.elapsed());
    let live = 40 + inserted;
    assert!(
        live >= 3 * 63 - 3,
        "{live} live values in three chunks of 63 blocks"
    );
    for k in 0..inserted {
        let key = 5 + 10 * k;
        assert_eq!(c.get_value(key), Ok(Some(value(key, 0))));
    }
    // Deletes free blocks (without scanning for them): the next inserts find them freed in their
    // own operation, and wait for the horizon to pass the epoch they found them in — which their
    // operation would hold back, were it not out of its epoch while it waits.
    for k in 0..20 {
        assert_eq!(c.delete(k * 10), Ok(true));
    }
    for k in 0..20 {
        let key = 7 + 10 * k;
        assert_eq!(c.insert_value(key, &value(key, 1)), Ok(true), "key {key}");
    }
    for k in 0..20 {
        assert_eq!(c.get_value(7 + 10 * k), Ok(Some(value(7 + 10 * k, 1))));
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    memory_node.join().expect("memory node");
    drop((c, store));
    space(&transport);
}
