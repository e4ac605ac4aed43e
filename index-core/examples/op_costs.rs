//! Round trips, verbs and bytes per operation type, on a simulated pool of uniform keys.
//!
//! ```text
//! cargo run --release -p index-core --example op_costs -- [--keys N] [--ops M] [--mode pivots|lean|both] [--fill F]
//! ```
//!
//! Defaults: 10^6 bulk-loaded uniform 64-bit keys (default layout: ε = δ = 16, fill 12, or `F`
//! keys per leaf with `--fill`), then with
//! a client whose cache was just built: M (default 100,000) GETs of present keys, M INSERTs of new
//! keys, M UPDATEs and M DELETEs of present keys, M/10 SCANs of 100 keys, and again M GETs.
//! Counts include every cache refresh and retry the operations needed. Prints a table, how many
//! INSERTs took how many verbs (4 for a write; a split adds its own), then one JSON object per
//! mode. Heap allocations per operation are counted by a counting global
//! allocator (this process's only allocator; the client runs on this thread alone).

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use index_core::{CacheMode, OpKind, Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, required_pool_bytes};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sim_transport::SimTransport;

/// The system allocator, counting allocations.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so `System`'s
// guarantees hold; the counter is a relaxed atomic and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc`/`realloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's, valid for `System` too.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn run(keys: usize, ops: usize, mode: CacheMode, fill: u64) -> Result<String, String> {
    let mut rng = StdRng::seed_from_u64(7);
    let mut all: Vec<u64> = (0..keys + ops).map(|_| rng.random::<u64>()).collect();
    all.sort_unstable();
    all.dedup();
    all.shuffle(&mut rng);
    let (loaded, fresh) = all.split_at(keys.min(all.len()));
    let load = BulkLoadConfig {
        fill,
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(keys as u64, &load, 2 * ops as u64).next_multiple_of(4096);
    let transport = SimTransport::anonymous(&[size]).map_err(|e| e.to_string())?;
    bootstrap(&transport, loaded.iter().map(|&k| (k, k)).collect(), &load)
        .map_err(|e| e.to_string())?;
    let store = Store::open(
        transport,
        StoreConfig {
            cache_mode: mode,
            ..StoreConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let cache_after_load = store.cache_bytes();
    let mut client = store.client().map_err(|e| e.to_string())?;
    let e = |e: index_core::IndexError| e.to_string();
    let at_start = allocations();
    for &k in loaded.iter().take(ops) {
        if client.get(k).map_err(e)? != Some(k) {
            return Err(format!("key {k} not found"));
        }
    }
    let get_allocs = allocations() - at_start;
    let gets_fresh = client.stats().get(OpKind::Get);
    let at_start = allocations();
    let mut insert_verbs = std::collections::BTreeMap::<u64, u64>::new();
    for &k in fresh.iter().take(ops) {
        let before = client.stats().get(OpKind::Insert).net.verbs();
        client.insert(k, k).map_err(e)?;
        *insert_verbs
            .entry(client.stats().get(OpKind::Insert).net.verbs() - before)
            .or_default() += 1;
    }
    let insert_allocs = allocations() - at_start;
    for &k in loaded.iter().skip(ops).take(ops) {
        client.update(k, k + 1).map_err(e)?;
    }
    for &k in loaded.iter().skip(2 * ops).take(ops) {
        client.delete(k).map_err(e)?;
    }
    for &k in loaded.iter().skip(3 * ops).take(ops / 10) {
        let got = client.scan(k, 100).map_err(e)?;
        if got.len() < 100 && got.first().map(|x| x.0) != Some(k) {
            return Err(format!("scan from {k} returned {} entries", got.len()));
        }
    }
    let before_second = client.stats().get(OpKind::Get);
    for &k in loaded.iter().skip(3 * ops).take(ops) {
        client.get(k).map_err(e)?;
    }
    let after = client.stats().get(OpKind::Get);
    let gets_after_writes = index_core::OpCounters {
        ops: after.ops - before_second.ops,
        net: after.net - before_second.net,
    };
    let stats = *client.stats();
    let mut rows = Vec::new();
    let mut json = vec![format!(
        "\"mode\": \"{mode:?}\", \"keys\": {}, \"ops\": {ops}, \"cache_bytes_per_key\": {:.3}",
        loaded.len(),
        cache_after_load as f64 / loaded.len() as f64
    )];
    let gets = [
        ("get (fresh cache)", gets_fresh),
        ("get (after the writes)", gets_after_writes),
    ];
    let writes = OpKind::ALL
        .iter()
        .filter(|k| !matches!(k, OpKind::Upsert | OpKind::Get))
        .map(|&k| (k.name(), stats.get(k)));
    for (name, c) in gets.into_iter().chain(writes) {
        rows.push(format!(
            "{name:<26} {:>9} {:>8.3} {:>8.2} {:>10.1}",
            c.ops,
            c.rtts_per_op(),
            c.verbs_per_op(),
            c.bytes_per_op()
        ));
        let key = match name {
            "get (fresh cache)" => "get_fresh",
            "get (after the writes)" => "get_after_writes",
            other => other,
        };
        json.push(format!(
            "\"{key}\": {{\"count\": {}, \"rtts_per_op\": {:.4}, \"verbs_per_op\": {:.3}, \"bytes_per_op\": {:.1}}}",
            c.ops,
            c.rtts_per_op(),
            c.verbs_per_op(),
            c.bytes_per_op()
        ));
    }
    let histogram = |entry: fn(&u64, &u64) -> String| {
        insert_verbs
            .iter()
            .map(|(verbs, n)| entry(verbs, n))
            .collect::<Vec<_>>()
            .join(", ")
    };
    rows.push(format!(
        "inserts by verbs: {}",
        histogram(|verbs, n| format!("{verbs} × {n}"))
    ));
    json.push(format!(
        "\"insert_verbs\": {{{}}}",
        histogram(|verbs, n| format!("\"{verbs}\": {n}"))
    ));
    let per_op = |n: u64| n as f64 / ops.max(1) as f64;
    rows.push(format!(
        "heap allocations per op: get (fresh cache) {:.2}, insert {:.2}",
        per_op(get_allocs),
        per_op(insert_allocs)
    ));
    json.push(format!(
        "\"allocations_per_op\": {{\"get\": {:.3}, \"insert\": {:.3}}}",
        per_op(get_allocs),
        per_op(insert_allocs)
    ));
    Ok(format!(
        "mode {mode:?}: {} keys, cache {:.3} bytes/key after load\n{:<26} {:>9} {:>8} {:>8} {:>10}\n{}\n{{{}}}",
        loaded.len(),
        cache_after_load as f64 / loaded.len() as f64,
        "operation",
        "count",
        "rtt/op",
        "verbs/op",
        "bytes/op",
        rows.join("\n"),
        json.join(", ")
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // Every flag takes a value: flags at odd positions, each known.
    let known = ["--keys", "--ops", "--mode", "--fill"];
    if let Some(bad) = args
        .iter()
        .skip(1)
        .step_by(2)
        .find(|a| !known.contains(&a.as_str()))
    {
        eprintln!(
            "op_costs: unknown argument {bad:?} (--keys N, --ops M, --mode pivots|lean|both, --fill F)"
        );
        return ExitCode::from(2);
    }
    if args.len().is_multiple_of(2) {
        eprintln!("op_costs: {} needs a value", args[args.len() - 1]);
        return ExitCode::from(2);
    }
    let keys = arg(&args, "--keys").map_or(Ok(1_000_000), |v| v.parse::<usize>());
    let ops = arg(&args, "--ops").map_or(Ok(100_000), |v| v.parse::<usize>());
    let fill =
        arg(&args, "--fill").map_or(Ok(BulkLoadConfig::default().fill), |v| v.parse::<u64>());
    let (Ok(keys), Ok(ops), Ok(fill)) = (keys, ops, fill) else {
        eprintln!("op_costs: --keys, --ops and --fill take whole numbers");
        return ExitCode::from(2);
    };
    let delta = BulkLoadConfig::default().delta;
    if fill == 0 || fill > delta {
        eprintln!("op_costs: --fill must be 1 to {delta} (keys per leaf at load)");
        return ExitCode::from(2);
    }
    let modes = match arg(&args, "--mode").as_deref() {
        None | Some("both") => vec![CacheMode::Pivots, CacheMode::Lean],
        Some("pivots") => vec![CacheMode::Pivots],
        Some("lean") => vec![CacheMode::Lean],
        Some(other) => {
            eprintln!("op_costs: unknown mode {other:?} (pivots, lean, both)");
            return ExitCode::from(2);
        }
    };
    if keys < 4 * ops {
        eprintln!("op_costs: --keys must be at least 4 × --ops");
        return ExitCode::from(2);
    }
    for mode in modes {
        match run(keys, ops, mode, fill) {
            Ok(out) => println!("{out}\n"),
            Err(e) => {
                eprintln!("op_costs: {e}");
                return ExitCode::from(1);
            }
        }
    }
    ExitCode::SUCCESS
}
