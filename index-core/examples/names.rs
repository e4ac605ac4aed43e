//! The store used as an application would: a memory-node process and a compute process sharing a
//! pool file, a directory of a few thousand names, looked up and listed by prefix.
//!
//! ```sh
//! cargo run --release -p index-core --example names
//! ```
//!
//! With no arguments it runs the whole demonstration: it starts itself as a memory-node process
//! (`names memnode POOL`: creates the pool file, bulk-loads 4,096 names, prints `ready`, runs
//! the retrainer until its standard input closes), then as a compute process (`names compute POOL`:
//! attaches to the pool file, registers 576 more, looks names up, lists them by prefix), and
//! finally shuts the memory node down cleanly and removes the pool file.
//!
//! Names of up to 8 bytes become `u64` keys big-endian, zero-padded on the right, so key order is
//! name order and every name starting with a prefix lies in one key range.

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
    use std::time::Instant;

    use index_core::{Client, Store, StoreConfig, bootstrap};
    use leaf_store::{BulkLoadConfig, required_pool_bytes};
    use rdma_transport::Transport;
    use retrainer::{RetrainConfig, Retrainer};
    use sim_transport::{Pool, SimConfig, SimEndpoint, SimTransport};

    type Result<T> = std::result::Result<T, Box<dyn Error>>;

    const SYLLABLES: [&str; 8] = ["ka", "lo", "mi", "ra", "to", "ne", "su", "vi"];

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

    /// The name a key was made from.
    pub fn name_of(key: u64) -> String {
        let bytes = key.to_be_bytes();
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(8);
        String::from_utf8_lossy(&bytes[..len]).into_owned()
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
        let config = BulkLoadConfig::default();
        let size = required_pool_bytes(loaded.len() as u64, &config, 4096).next_multiple_of(4096);
        let transport =
            SimTransport::new(vec![Pool::create_file(path, size)?], SimConfig::default());
        let mut pairs: Vec<(u64, u64)> = Vec::new();
        for (id, name) in loaded.iter().enumerate() {
            pairs.push((key_of(name).ok_or("bad name")?, id as u64));
        }
        bootstrap(&transport, pairs, &config)?;
        let node = transport.memory_nodes()[0];
        let mut worker = Retrainer::new(transport.endpoint()?, node, RetrainConfig::default())?;
        println!(
            "ready: {} holds {} names ({} bytes)",
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

        // Register every name of two and three syllables (576 more, ids after the loaded ones).
        let mut registered = 0;
        for (i, name) in names(2).iter().chain(&names(3)).enumerate() {
            let key = key_of(name).ok_or("bad name")?;
            if client.insert(key, 4096 + i as u64)? {
                registered += 1;
            }
        }
        println!("[compute] registered {registered} names");

        for name in ["kalomi", "vivivivi", "sutone", "rarararara"] {
            match key_of(name) {
                Some(key) => match client.get(key)? {
                    Some(id) => println!("[compute] {name:>8} -> id {id}"),
                    None => println!("[compute] {name:>8} -> not registered"),
                },
                None => println!("[compute] {name:>8} -> not a name (longer than 8 bytes)"),
            }
        }

        client.delete(key_of("kakaka").ok_or("bad name")?)?;
        for prefix in ["kaka", "vimi", "tosune"] {
            let listed = list(&mut client, prefix, 100)?;
            println!(
                "[compute] {} names start with {prefix:?}: {}",
                listed.len(),
                listed.join(" ")
            );
        }
        println!(
            "[compute] {} round trips in {:.1} ms; {} bytes of cached models",
            client.net_stats().batches,
            started.elapsed().as_secs_f64() * 1e3,
            store.cache_bytes()
        );
        Ok(())
    }

    /// Every name starting with `prefix`, in order, at most `limit`: scans of the prefix's key
    /// range, a page at a time.
    fn list(client: &mut Client<SimEndpoint>, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let (mut from, high) = prefix_range(prefix).ok_or("a prefix is a name of 1 to 8 bytes")?;
        let mut out = Vec::new();
        while out.len() < limit {
            let page = client.scan(from, 16)?;
            for &(key, _) in &page {
                if key > high || out.len() == limit {
                    return Ok(out);
                }
                out.push(name_of(key));
            }
            match page.last() {
                Some(&(last, _)) if page.len() == 16 && last < u64::MAX => from = last + 1,
                _ => break,
            }
        }
        Ok(out)
    }
}
