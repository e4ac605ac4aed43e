//! The store used as an application would: a memory-node process and a compute process sharing a
//! pool file, a directory of a few thousand people — a record per name, stored as a CSV line
//! (`name,id,city,since`) — looked up, changed and listed by prefix.
//!
//! ```sh
//! cargo run --release -p index-core --example names
//! ```
//!
//! With no arguments it runs the whole demonstration: it starts itself as a memory-node process
//! (`names memnode POOL`: creates the pool file, bulk-loads 4,096 records, prints `ready`, runs
//! the retrainer until its standard input closes), then as a compute process (`names compute POOL`:
//! attaches to the pool file, registers 576 more people, reads records back, moves one person to
//! another city, lists records by prefix), and finally shuts the memory node down cleanly and
//! removes the pool file.
//!
//! Names of up to 8 bytes become `u64` keys big-endian, zero-padded on the right, so key order is
//! name order and every name starting with a prefix lies in one key range. The records are byte
//! values: the pool has a value region, and each leaf entry names the block holding its record.

#[cfg(loom)]
fn main() {}

#[cfg(not(loom))]
fn main() {
    if let Err(e) = demo::main() {
        eprintln!("names: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(loom))]
mod demo {
    use std::error::Error;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use index_core::{Client, Reply, Request, Store, StoreConfig, bootstrap_values};
    use leaf_store::{BulkLoadConfig, ValueConfig, required_pool_bytes};
    use rdma_transport::Transport;
    use retrainer::{RetrainConfig, Retrainer};
    use sim_transport::{Pool, SimConfig, SimEndpoint, SimTransport};

    type Result<T> = std::result::Result<T, Box<dyn Error>>;

    const SYLLABLES: [&str; 8] = ["ka", "lo", "mi", "ra", "to", "ne", "su", "vi"];
    const CITIES: [&str; 5] = ["Lisbon", "Osaka", "Quito", "Tromsø", "Windhoek"];

    /// Person `id`'s record: a CSV line.
    fn record(name: &str, id: u64, city: &str) -> Vec<u8> {
        format!("{name},{id},{city},{}", 1990 + id % 35).into_bytes()
    }

    /// The key of a name of 1 to 8 bytes: its bytes big-endian, zero-padded on the right.
    pub fn key_of(name: &str) -> Option<u64> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > 8 || bytes.contains(&0) {
            return None;
        }
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        Some(u64::from_be_bytes(word))
    }

    /// The keys of every name that starts with `prefix` (itself a name of at most 8 bytes).
    fn prefix_range(prefix: &str) -> Option<(u64, u64)> {
        let low = key_of(prefix)?;
        let free_bits = 8 * (8 - prefix.len() as u32);
        let high = if free_bits == 64 {
            u64::MAX
        } else {
            low | ((1u64 << free_bits) - 1)
        };
        Some((low, high))
    }

    /// Every name of `syllables` syllables from `SYLLABLES`, in a fixed order.
    fn names(syllables: u32) -> Vec<String> {
        let count = SYLLABLES.len().pow(syllables);
        (0..count)
            .map(|mut i| {
                let mut name = String::new();
                for _ in 0..syllables {
                    name.push_str(SYLLABLES[i % SYLLABLES.len()]);
                    i /= SYLLABLES.len();
                }
                name
            })
            .collect()
    }

    pub fn main() -> Result<()> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match args.as_slice() {
            [] => orchestrate(),
            [role, pool] if role == "memnode" => memnode(Path::new(pool)),
            [role, pool] if role == "compute" => compute(Path::new(pool)),
            _ => Err("usage: names [memnode POOL | compute POOL]".into()),
        }
    }

    /// Starts the memory node, then the compute process, then stops the memory node.
    fn orchestrate() -> Result<()> {
        let me = std::env::current_exe()?;
        let dir = std::env::temp_dir().join(format!("rolex-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let pool = dir.join("names.pool");
        let result = run_both(&me, &pool);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    fn run_both(me: &Path, pool: &Path) -> Result<()> {
        let mut memnode = Command::new(me)
            .arg("memnode")
            .arg(pool)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut memnode_out = BufReader::new(memnode.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        memnode_out.read_line(&mut line)?;
        if !line.starts_with("ready") {
            let _ = memnode.kill();
            return Err(format!("the memory node did not start: {line:?}").into());
        }
        print!("[memnode] {line}");

        let compute = Command::new(me).arg("compute").arg(pool).status()?;

        // Clean shutdown: closing the memory node's standard input stops its retrainer.
        drop(memnode.stdin.take());
        let mut rest = String::new();
        memnode_out.read_to_string(&mut rest)?;
        for line in rest.lines() {
            println!("[memnode] {line}");
        }
        let memnode_status = memnode.wait()?;
        if !compute.success() || !memnode_status.success() {
            return Err(format!("compute {compute}, memnode {memnode_status}").into());
        }
        println!("done: both processes exited cleanly; the pool file is removed");
        Ok(())
    }

    /// The memory node: creates and loads the pool file, then retrains until stdin closes.
    fn memnode(path: &Path) -> Result<()> {
        let loaded = names(4); // 4,096 names of four syllables
        let config = BulkLoadConfig {
            // 4 MiB of value blocks: records of a few dozen bytes, and room to change them.
            values: Some(ValueConfig::with_bytes(4 << 20)),
            ..BulkLoadConfig::default()
        };
        let size = required_pool_bytes(loaded.len() as u64, &config, 4096).next_multiple_of(4096);
        let transport =
            SimTransport::new(vec![Pool::create_file(path, size)?], SimConfig::default());
        let mut pairs: Vec<(u64, Vec<u8>)> = Vec::new();
        for (id, name) in loaded.iter().enumerate() {
            let city = CITIES[id % CITIES.len()];
            pairs.push((
                key_of(name).ok_or("bad name")?,
                record(name, id as u64, city),
            ));
        }
        bootstrap_values(&transport, pairs, &config, |_, _, _, _| {})?;
        let node = transport.memory_nodes()[0];
        let mut worker = Retrainer::new(transport.endpoint()?, node, RetrainConfig::default())?;
        // Watching the compute nodes' leases lets their freed value blocks be used again once no
        // reader can hold them (and recovers a compute process that dies).
        let fence = transport
            .fence(node.id)
            .ok_or("the memory node has no pool")?;
        worker.watch_members(Duration::from_secs(2), Box::new(fence));
        println!(
            "ready: {} holds {} records ({} bytes)",
            path.display(),
            loaded.len(),
            size
        );
        std::io::stdout().flush()?;

        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                // Returns when the orchestrator closes our stdin (or dies).
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
                stop.store(true, Ordering::Release);
            })
        };
        let stats = worker.run(|| stop.load(Ordering::Acquire))?;
        let _ = watcher.join();
        println!(
            "stopped: {} retrainings, {} slots still queued, {} put off",
            stats.retrains,
            worker.pending(),
            worker.deferred().len()
        );
        Ok(())
    }

    /// The compute process: attaches to the pool file and uses the store.
    fn compute(path: &Path) -> Result<()> {
        let transport = SimTransport::new(vec![Pool::open_file(path)?], SimConfig::default());
        let store = Store::open(transport, StoreConfig::default())?;
        let mut client = store.client()?;
        let started = Instant::now();

        // Register every person of a two- and three-syllable name (576 more, ids after the
        // loaded ones), eight inserts in flight at once on this thread.
        let mut registrations = Vec::new();
        for (i, name) in names(2).iter().chain(&names(3)).enumerate() {
            let key = key_of(name).ok_or("bad name")?;
            let row = record(name, 4096 + i as u64, CITIES[i % CITIES.len()]);
            registrations.push((key, Request::InsertValue(key, row)));
        }
        let mut pipeline = store.pipeline(8)?;
        let mut session = pipeline.session();
        let mut registrations = registrations.into_iter();
        let (mut registered, mut round_trips) = (0, 0);
        loop {
            while session.has_room() {
                let Some((key, request)) = registrations.next() else {
                    break;
                };
                if session.submit(key, request).is_err() {
                    return Err("a session with room refused a request".into());
                }
            }
            let Some(done) = session.wait() else {
                break;
            };
            round_trips += done.net.batches;
            if done.result? == Reply::Done(true) {
                registered += 1;
            }
        }
        drop(session);
        println!(
            "[compute] registered {registered} people, eight at a time ({round_trips} round trips)"
        );

        for name in ["kalomi", "vivivivi", "sutone", "rarararara"] {
            match key_of(name) {
                Some(key) => match client.get_value(key)? {
                    Some(row) => println!("[compute] {name:>8} -> {}", String::from_utf8(row)?),
                    None => println!("[compute] {name:>8} -> not registered"),
                },
                None => println!("[compute] {name:>8} -> not a name (longer than 8 bytes)"),
            }
        }

        // Someone moves: the record is rewritten in a new block, the old one freed.
        let key = key_of("kalomi").ok_or("bad name")?;
        let row = client.get_value(key)?.ok_or("kalomi is registered")?;
        let moved = String::from_utf8(row)?.replace("Lisbon", "Reykjavík");
        client.update_value(key, moved.as_bytes())?;
        let back = String::from_utf8(client.get_value(key)?.ok_or("kalomi is registered")?)?;
        if back != moved {
            return Err(format!("kalomi's record reads back as {back:?}, not {moved:?}").into());
        }
        println!("[compute]   kalomi moved -> {back}");

        client.delete(key_of("kakaka").ok_or("bad name")?)?;
        for prefix in ["kaka", "vimi", "tosune"] {
            let listed = list(&mut client, prefix, 100)?;
            println!(
                "[compute] {} people's names start with {prefix:?}:",
                listed.len()
            );
            for row in listed.iter().take(4) {
                println!("[compute]     {row}");
            }
            if listed.len() > 4 {
                println!("[compute]     … and {} more", listed.len() - 4);
            }
        }
        println!(
            "[compute] {} round trips in {:.1} ms; {} bytes of cached models",
            client.net_stats().batches,
            started.elapsed().as_secs_f64() * 1e3,
            store.cache_bytes()
        );
        Ok(())
    }

    /// The records of every name starting with `prefix`, in order, at most `limit`: scans of
    /// the prefix's key range, a page at a time.
    fn list(client: &mut Client<SimEndpoint>, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let (mut from, high) = prefix_range(prefix).ok_or("a prefix is a name of 1 to 8 bytes")?;
        let mut out = Vec::new();
        while out.len() < limit {
            let page = client.scan_values(from, 16)?;
            for (key, row) in &page {
                if *key > high || out.len() == limit {
                    return Ok(out);
                }
                out.push(String::from_utf8_lossy(row).into_owned());
            }
            match page.last() {
                Some(&(last, _)) if page.len() == 16 && last < u64::MAX => from = last + 1,
                _ => break,
            }
        }
        Ok(out)
    }
}
