//! What one retraining costs on one core, beside the paper's figures.
//!
//! ```text
//! cargo run --release -p integration-tests --example retrain_cost -- [--keys N] [--slots S]
//! ```
//!
//! Bulk-loads N uniform keys (default 10^6; default layout: 64 trained leaves per slot, fill 12),
//! then for S slots (default 20) inserts random keys into the slot until its SLT holds 128 synonym
//! leaves, and retrains it with the memory node's worker. Prints medians: microseconds per
//! retraining (paper: about 300 µs for 128 leaves), nanoseconds of training per key (paper:
//! 280 ns), and the inserts one retraining absorbs — divided by its time, the insert rate one
//! retraining core can keep up with.

use std::process::ExitCode;

use index_core::{Store, StoreConfig, bootstrap};
use leaf_store::{BulkLoadConfig, ModelHeader, read_slot_table, required_pool_bytes};
use rdma_transport::{Endpoint, Transport};
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::SimTransport;
use testkit::{XorShift64, flag_u64, median};

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().collect();
    let keys = flag_u64(&args, "--keys", 1_000_000)?;
    let slots = flag_u64(&args, "--slots", 20)?.max(1);
    let mut random = XorShift64::new(0x9e37_79b9_7f4a_7c15);
    let load = BulkLoadConfig {
        model_region_factor: 4,
        ..BulkLoadConfig::default()
    };
    let size = required_pool_bytes(keys, &load, slots * 2000).next_multiple_of(4096);
    let transport = SimTransport::anonymous(&[size]).map_err(|e| e.to_string())?;
    let mut pairs: Vec<(u64, u64)> = (0..keys).map(|_| (random.next_u64() >> 1, 0)).collect();
    pairs.sort_unstable();
    pairs.dedup_by_key(|p| p.0);
    bootstrap(&transport, pairs, &load).map_err(|e| e.to_string())?;
    let node = transport.memory_nodes()[0];
    // No automatic queueing: this measures retraining alone.
    let store = Store::open(
        transport.clone(),
        StoreConfig {
            retrain_threshold: 255,
            ..StoreConfig::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut client = store.client().map_err(|e| e.to_string())?;
    let mut ep = transport.endpoint().map_err(|e| e.to_string())?;
    let layout = store.layouts()[0];
    let table = read_slot_table(&mut ep, &layout).map_err(|e| e.to_string())?;
    let mut worker = Retrainer::new(
        transport.endpoint().map_err(|e| e.to_string())?,
        node,
        RetrainConfig::default(),
    )
    .map_err(|e| e.to_string())?;
    let (mut micros, mut train_ns, mut absorbed, mut leaves) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let step = (table.len() as u64 / slots).max(1) as usize;
    for slot in (0..table.len() - 1).step_by(step).take(slots as usize) {
        let (lo, hi) = (table[slot].1, table[slot + 1].1);
        let mut inserts = 0u64;
        loop {
            let addr =
                leaf_store::read_slot_table(&mut ep, &layout).map_err(|e| e.to_string())?[slot].0;
            if ModelHeader::from_raw(ep.read_word(addr).map_err(|e| e.to_string())?).slot_use()
                >= 128
            {
                break;
            }
            for _ in 0..32 {
                let key = lo + random.next_u64() % (hi - lo);
                if client.insert(key, key).map_err(|e| e.to_string())? {
                    inserts += 1;
                }
            }
        }
        let report = worker
            .retrain_slot(slot as u64)
            .map_err(|e| e.to_string())?
            .ok_or("slot was empty")?;
        micros.push(report.total_time.as_secs_f64() * 1e6);
        train_ns.push(report.train_time.as_nanos() as f64 / report.keys as f64);
        absorbed.push(inserts as f64);
        leaves.push((report.trained_before + report.synonyms_absorbed) as f64);
    }
    let (us, ns, ins, lv) = (
        median(micros),
        median(train_ns),
        median(absorbed),
        median(leaves),
    );
    Ok(format!(
        "{{\"keys\": {keys}, \"slots_measured\": {slots}, \"leaves_per_retrain\": {lv:.0}, \"synonyms_per_retrain\": 128, \
         \"retrain_us\": {us:.1}, \"paper_retrain_us\": 300, \"train_ns_per_key\": {ns:.1}, \"paper_train_ns_per_key\": 280, \
         \"inserts_absorbed_per_retrain\": {ins:.0}, \"sustainable_inserts_per_s_one_core\": {:.0}}}",
        ins / (us / 1e6)
    ))
}

fn main() -> ExitCode {
    testkit::print_json_or_fail("retrain_cost", run())
}
