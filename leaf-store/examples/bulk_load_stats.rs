//! Bulk-loads a simulated pool and prints one JSON object: load time, pool bytes per key, and the
//! compute-side metadata bytes per key in both cache modes, measured by attaching like a compute
//! node and reading every record.
//!
//! ```text
//! cargo run --release -p leaf-store --example bulk_load_stats -- [--keys N] [--fill F] [--slot-leaves L] [--seed S]
//! ```
//!
//! Cache modes (`docs/ARCHITECTURE.md` §4 and §6), counting the bytes each must hold, not any
//! allocator overhead:
//! * `pivots`: per slot its first key, header word and segments; per trained leaf its LT entry and
//!   pivot (16 bytes) — the owner leaf is known locally and a GET reads one chain.
//! * `lean`: per slot its first key, header word, segments and base leaf number (trained leaves of
//!   a slot are consecutive after bulk load, so no exceptions) — a GET reads the predicted range.
//!
//! Both include the top-level index (its first keys and segments).

use std::process::ExitCode;
use std::time::Instant;

use leaf_store::{BulkLoadConfig, Layout, bulk_load, read_record, read_slot_table};
use learned_model::TopLevelIndex;
use rdma_transport::Transport;
use sim_transport::SimTransport;
use testkit::{XorShift64, flag_u64};

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().collect();
    let keys = flag_u64(&args, "--keys", 10_000_000)?;
    let seed = flag_u64(&args, "--seed", 1)?;
    let config = BulkLoadConfig {
        fill: flag_u64(&args, "--fill", BulkLoadConfig::default().fill)?,
        slot_leaves: flag_u64(
            &args,
            "--slot-leaves",
            BulkLoadConfig::default().slot_leaves,
        )?,
        ..BulkLoadConfig::default()
    };
    let pairs: Vec<(u64, u64)> = XorShift64::new(seed | 1).zip(0..keys).collect();
    let size = leaf_store::required_pool_bytes(keys, &config, 0).next_multiple_of(4096);
    let transport = SimTransport::anonymous(&[size]).map_err(|e| e.to_string())?;
    let node = transport.memory_nodes()[0];
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let report = bulk_load(&mut ep, node, pairs, &config).map_err(|e| e.to_string())?;
    let load = started.elapsed().as_secs_f64();

    // Attach like a compute node and count what each cache mode must hold.
    let layout = Layout::attach(&mut ep, node).map_err(|e| e.to_string())?;
    let table = read_slot_table(&mut ep, &layout).map_err(|e| e.to_string())?;
    let (mut segments, mut leaves) = (0u64, 0u64);
    for (slot, &(addr, _)) in table.iter().enumerate() {
        let record = read_record(&mut ep, &layout, slot as u64, addr).map_err(|e| e.to_string())?;
        segments += record.model.segments().len() as u64;
        leaves += record.lt.len() as u64;
    }
    let top = TopLevelIndex::new(table.iter().map(|e| e.1).collect()).map_err(|e| e.to_string())?;
    let top_bytes = 8 * top.len() as u64 + 48 * top.segment_count() as u64;
    let per_slot = 8 + 8; // first key, header word
    let model_bytes = 48 * segments;
    let pivots = top_bytes + per_slot * table.len() as u64 + model_bytes + 16 * leaves;
    let lean = top_bytes + (per_slot + 8) * table.len() as u64 + model_bytes;
    let n = report.keys as f64;
    Ok(format!(
        concat!(
            "{{\"keys\": {}, \"fill\": {}, \"slot_leaves\": {}, \"slots\": {}, \"trained_leaves\": {}, \"segments\": {}, ",
            "\"load_seconds\": {:.3}, \"sort_seconds\": {:.3}, \"train_seconds\": {:.3}, \"write_seconds\": {:.3}, ",
            "\"pool_bytes_used\": {}, \"pool_bytes_per_key\": {:.2}, \"record_bytes_per_key\": {:.3}, ",
            "\"cache_bytes_pivots\": {}, \"cache_bytes_per_key_pivots\": {:.3}, ",
            "\"cache_bytes_lean\": {}, \"cache_bytes_per_key_lean\": {:.4}, \"paper_cache_bytes_per_key\": 1.02}}"
        ),
        report.keys,
        config.fill,
        config.slot_leaves,
        report.slots,
        report.trained_leaves,
        report.segments,
        load,
        report.sort_time.as_secs_f64(),
        report.train_time.as_secs_f64(),
        report.write_time.as_secs_f64(),
        report.used_bytes,
        report.used_bytes as f64 / n,
        report.record_bytes as f64 / n,
        pivots,
        pivots as f64 / n,
        lean,
        lean as f64 / n,
    ))
}

fn main() -> ExitCode {
    testkit::print_json_or_fail("bulk_load_stats", run())
}
