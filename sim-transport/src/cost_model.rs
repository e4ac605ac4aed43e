//! The network cost model (`docs/ARCHITECTURE.md` §9): turns verb counters into modeled latency
//! and throughput.
//!
//! Always reported as *modeled*, next to the simulator's measured wall-clock figures.

use rdma_transport::Stats;

/// A network profile: per-batch round trip, link bandwidth, and each memory node's NIC limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetworkProfile {
    /// Round-trip time of one batch, in microseconds (reference: 2 µs).
    pub rtt_us: f64,
    /// Link bandwidth in gigabits per second (reference: 100 Gb/s).
    pub link_gbps: f64,
    /// Verbs per second one memory node's NIC serves (reference: 50 million).
    pub nic_verbs_per_s: f64,
    /// Bytes per second one memory node's NIC moves (reference: 12.5 GB/s).
    pub nic_bytes_per_s: f64,
}

impl Default for NetworkProfile {
    fn default() -> Self {
        Self {
            rtt_us: 2.0,
            link_gbps: 100.0,
            nic_verbs_per_s: 50e6,
            nic_bytes_per_s: 12.5e9,
        }
    }
}

impl NetworkProfile {
    /// Modeled latency in microseconds of operations that together used `net` over `ops`
    /// operations: per operation, its round trips times the RTT plus its bytes at link speed.
    pub fn latency_us(&self, net: &Stats, ops: u64) -> f64 {
        let ops = ops.max(1) as f64;
        let bytes = (net.bytes_read + net.bytes_written) as f64 / ops;
        net.batches as f64 / ops * self.rtt_us + bytes * 8.0 / (self.link_gbps * 1e3)
    }

    /// Modeled throughput (operations per second) of `clients` client threads issuing operations
    /// that together used `net` over `ops` operations, against `memory_nodes` NICs:
    /// `min(clients / mean latency, NIC verb limit / verbs per op, NIC byte limit / bytes per op)`.
    /// No operations (a run stopped before its first): zero, not a limit of nothing.
    pub fn throughput_ops_s(&self, net: &Stats, ops: u64, clients: u64, memory_nodes: u64) -> f64 {
        if ops == 0 {
            return 0.0;
        }
        let ops_f = ops.max(1) as f64;
        let latency_s = self.latency_us(net, ops) / 1e6;
        let by_latency = if latency_s > 0.0 {
            clients as f64 / latency_s
        } else {
            f64::INFINITY
        };
        let nodes = memory_nodes.max(1) as f64;
        let verbs = net.verbs() as f64 / ops_f;
        let bytes = (net.bytes_read + net.bytes_written) as f64 / ops_f;
        let by_verbs = if verbs > 0.0 {
            nodes * self.nic_verbs_per_s / verbs
        } else {
            f64::INFINITY
        };
        let by_bytes = if bytes > 0.0 {
            nodes * self.nic_bytes_per_s / bytes
        } else {
            f64::INFINITY
        };
        by_latency.min(by_verbs).min(by_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_round_trip_of_280_bytes() {
        let p = NetworkProfile::default();
        let net = Stats {
            batches: 10,
            reads: 20,
            bytes_read: 2800,
            ..Stats::default()
        };
        // 2 µs + 280 B at 100 Gb/s (0.0224 µs).
        assert!((p.latency_us(&net, 10) - 2.0224).abs() < 1e-9);
        // 64 clients: 64 / 2.0224 µs ≈ 31.6 M/s; NIC: 50 M verbs / 2 verbs = 25 M/s wins.
        assert!((p.throughput_ops_s(&net, 10, 64, 1) - 25e6).abs() < 1.0);
        // Two memory nodes double the NIC limits; latency now binds.
        assert!((p.throughput_ops_s(&net, 10, 64, 2) - 64.0 / 2.0224e-6).abs() < 1.0);
    }

    #[test]
    fn no_operations_model_no_throughput() {
        let p = NetworkProfile::default();
        assert_eq!(p.throughput_ops_s(&Stats::default(), 0, 64, 1), 0.0);
    }
}
