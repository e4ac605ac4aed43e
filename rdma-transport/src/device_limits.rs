//! What the verbs backend needs of an RDMA device, checked once when it opens the device, so a
//! device that cannot serve this store says so in one line instead of failing a queue-pair
//! transition with EINVAL.
//!
//! - remote atomics (CAS and FAA): an atomic capability other than none;
//! - outstanding READs and atomics per queue pair: up to 16 (Sherman's and this store's depth),
//!   fewer if the device allows fewer, never none; the two sides of a connection use the
//!   smaller of what each allows;
//! - a send queue of a whole batch ([`crate::MAX_BATCH_VERBS`] work requests) and a completion
//!   queue of [`COMPLETION_QUEUE_ENTRIES`].

/// Entries of each queue pair's completion queue.
pub const COMPLETION_QUEUE_ENTRIES: u32 = 1024;
/// The most READs and atomics a queue pair keeps outstanding.
pub const MAX_RD_ATOMIC: u8 = 16;

/// What a device reports of itself (`ibv_query_device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Whether it executes remote atomics (`atomic_cap` other than `IBV_ATOMIC_NONE`).
    pub atomics: bool,
    /// `max_qp_rd_atom`: outstanding READs and atomics a queue pair may be the target of.
    pub max_qp_rd_atom: i32,
    /// `max_qp_init_rd_atom`: outstanding READs and atomics a queue pair may initiate.
    pub max_qp_init_rd_atom: i32,
    /// `max_qp_wr`: work requests a queue may hold.
    pub max_qp_wr: i32,
    /// `max_cqe`: entries a completion queue may hold.
    pub max_cqe: i32,
}

/// The outstanding READs and atomics a queue pair of the device `name` uses, or why the device
/// cannot serve.
pub fn check(name: &str, d: &DeviceLimits) -> Result<u8, String> {
    if !d.atomics {
        return Err(format!(
            "RDMA device {name} executes no remote atomics (atomic capability: none); this \
             store needs CAS and FAA"
        ));
    }
    let depth = d.max_qp_rd_atom.min(d.max_qp_init_rd_atom);
    if depth < 1 {
        return Err(format!(
            "RDMA device {name} allows no outstanding READ or atomic per queue pair \
             (max_qp_rd_atom {}, max_qp_init_rd_atom {})",
            d.max_qp_rd_atom, d.max_qp_init_rd_atom
        ));
    }
    if i64::from(d.max_qp_wr) < crate::MAX_BATCH_VERBS as i64 {
        return Err(format!(
            "RDMA device {name} queues at most {} work requests; a batch takes up to {}",
            d.max_qp_wr,
            crate::MAX_BATCH_VERBS
        ));
    }
    if i64::from(d.max_cqe) < i64::from(COMPLETION_QUEUE_ENTRIES) {
        return Err(format!(
            "RDMA device {name} allows completion queues of {} entries; this store uses {}",
            d.max_cqe, COMPLETION_QUEUE_ENTRIES
        ));
    }
    Ok(u8::try_from(depth).unwrap_or(u8::MAX).min(MAX_RD_ATOMIC))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> DeviceLimits {
        DeviceLimits {
            atomics: true,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 128,
            max_qp_wr: 32_768,
            max_cqe: 4_194_303,
        }
    }

    #[test]
    fn a_device_allowing_fewer_outstanding_reads_gets_fewer() {
        assert_eq!(check("mlx5_0", &good()), Ok(16));
        let rxe = DeviceLimits {
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            ..good()
        };
        assert_eq!(check("rxe0", &rxe), Ok(16));
        let small = DeviceLimits {
            max_qp_rd_atom: 4,
            ..good()
        };
        assert_eq!(check("small", &small), Ok(4));
    }

    #[test]
    fn a_device_that_cannot_serve_says_why() {
        let cases = [
            (
                DeviceLimits {
                    atomics: false,
                    ..good()
                },
                "no remote atomics",
            ),
            (
                DeviceLimits {
                    max_qp_init_rd_atom: 0,
                    ..good()
                },
                "no outstanding READ",
            ),
            (
                DeviceLimits {
                    max_qp_wr: 8,
                    ..good()
                },
                "work requests",
            ),
            (
                DeviceLimits {
                    max_cqe: 256,
                    ..good()
                },
                "completion queues",
            ),
        ];
        for (d, why) in cases {
            let e = check("dev", &d).expect_err(why);
            assert!(e.contains(why) && e.contains("dev"), "{e}");
        }
    }
}
