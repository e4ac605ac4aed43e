//! The benchmark report: its JSON schema (stable; documented in the README) and the table.

use std::collections::BTreeMap;

use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

/// One operation type's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpReport {
    pub count: u64,
    pub rtts_per_op: f64,
    pub verbs_per_op: f64,
    pub bytes_per_op: f64,
    pub latency_us: Latency,
}

/// The network cost model's figures — always labelled as modeled.
#[derive(Debug, Clone, Serialize)]
pub struct Modeled {
    pub profile: Profile,
    pub clients: u64,
    /// Mean modeled latency per operation, over all operations.
    pub latency_us: f64,
    /// Modeled latency per operation type.
    pub latency_us_by_op: BTreeMap<String, f64>,
    pub throughput_ops_s: f64,
}

/// The network profile used.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub rtt_us: f64,
    pub link_gbps: f64,
    pub nic_verbs_per_s: f64,
    pub nic_bytes_per_s: f64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub config: serde_json::Value,
    pub wall_seconds: f64,
    pub throughput_ops_s: f64,
    pub ops: BTreeMap<String, OpReport>,
    pub cache_bytes: u64,
    pub cache_bytes_per_key: f64,
    pub models: u64,
    pub leaves: u64,
    pub synonym_leaves: u64,
    pub keys_after: u64,
    pub retrains: Option<u64>,
    pub verify_clean: bool,
    /// Inserts that added a key.
    pub inserted: u64,
    pub inserts_missing: Option<u64>,
    pub modeled: Modeled,
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "measured on the simulator: {:.0} ops/s over {:.2} s; cache {} bytes ({:.3} per key); {} models, {} leaves ({} synonym){}\n",
            self.throughput_ops_s,
            self.wall_seconds,
            self.cache_bytes,
            self.cache_bytes_per_key,
            self.models,
            self.leaves,
            self.synonym_leaves,
            self.retrains.map_or(String::new(), |r| format!(", {r} retrains"))
        ));
        out.push_str(&format!(
            "{:<8} {:>10} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>12}\n",
            "op",
            "count",
            "rtt/op",
            "verbs/op",
            "bytes/op",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "modeled µs"
        ));
        for (name, op) in &self.ops {
            out.push_str(&format!(
                "{:<8} {:>10} {:>8.3} {:>9.2} {:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>12.2}\n",
                name,
                op.count,
                op.rtts_per_op,
                op.verbs_per_op,
                op.bytes_per_op,
                op.latency_us.p50,
                op.latency_us.p99,
                op.latency_us.p999,
                self.modeled
                    .latency_us_by_op
                    .get(name)
                    .copied()
                    .unwrap_or(0.0)
            ));
        }
        out.push_str(&format!(
            "modeled (RTT {} µs, {} Gb/s, NIC {:.0} Mverbs/s): {:.2} µs per op, {:.0} ops/s with {} clients\n",
            self.modeled.profile.rtt_us,
            self.modeled.profile.link_gbps,
            self.modeled.profile.nic_verbs_per_s / 1e6,
            self.modeled.latency_us,
            self.modeled.throughput_ops_s,
            self.modeled.clients
        ));
        out.push_str(if self.verify_clean {
            "verify: clean\n"
        } else {
            "verify: PROBLEMS (run `rolex inspect`)\n"
        });
        out
    }
}
