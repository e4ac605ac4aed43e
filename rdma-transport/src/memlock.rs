//! Pinned memory: registering memory with an RDMA device locks it in RAM, and the kernel refuses
//! a registration that would take the process past `RLIMIT_MEMLOCK` unless it holds
//! `CAP_IPC_LOCK`. The device then reports a bare ENOMEM; this module checks first and says what
//! is needed and how to allow it.
//!
//! **Invariant.** [`Pinned`] counts every byte this process registered through this crate and
//! has not released; a registration is attempted only if [`pin`] found the count plus its size
//! within the limit (or the limit unbounded, or the capability held).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::TransportError;

/// Bytes registered through this crate and not yet released, in this process.
static PINNED: AtomicU64 = AtomicU64::new(0);

/// The lock limit as `/proc/self/limits` states it (the soft limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `unlimited`.
    Unlimited,
    /// That many bytes.
    Bytes(u64),
}

/// `bytes` registered and counted; released (uncounted) when dropped. Keep it beside the memory
/// region it stands for.
#[derive(Debug)]
pub struct Pinned(u64);

impl Drop for Pinned {
    fn drop(&mut self) {
        PINNED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// Counts `bytes` about to be registered, after checking them against this process's lock limit
/// (read from `/proc/self/limits` and `/proc/self/status`; where they cannot be read, nothing
/// is refused and the device says what it says).
pub fn pin(bytes: u64) -> Result<Pinned, TransportError> {
    let already = PINNED.fetch_add(bytes, Ordering::Relaxed);
    let pinned = Pinned(bytes);
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| parse_limit(&text));
    let capable = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| parse_cap_ipc_lock(&text));
    check(already, bytes, limit, capable)?;
    Ok(pinned)
}

/// Whether pinning `bytes` more, with `already` pinned, fits `limit` (unknown: it fits) for a
/// process that holds `CAP_IPC_LOCK` or not (unknown: it does not).
pub fn check(
    already: u64,
    bytes: u64,
    limit: Option<Limit>,
    capable: Option<bool>,
) -> Result<(), TransportError> {
    match limit {
        Some(Limit::Bytes(limit))
            if !capable.unwrap_or(false) && already.saturating_add(bytes) > limit =>
        {
            Err(TransportError::MemoryLockLimit {
                needed: bytes,
                already,
                limit,
            })
        }
        _ => Ok(()),
    }
}

/// The soft "Max locked memory" of a `/proc/<pid>/limits` text.
pub fn parse_limit(limits: &str) -> Option<Limit> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(Limit::Unlimited);
    }
    soft.parse().ok().map(Limit::Bytes)
}

/// Whether a `/proc/<pid>/status` text shows `CAP_IPC_LOCK` (capability 14) in `CapEff`.
pub fn parse_cap_ipc_lock(status: &str) -> Option<bool> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let bits = u64::from_str_radix(hex, 16).ok()?;
    Some(bits >> 14 & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max locked memory         8388608              8388608              bytes     \n\
        Max address space         unlimited            unlimited            bytes     \n";

    #[test]
    fn the_limit_and_the_capability_are_read_from_proc_texts() {
        assert_eq!(parse_limit(LIMITS), Some(Limit::Bytes(8 << 20)));
        let unlimited = LIMITS.replace("8388608              8388608", "unlimited unlimited");
        assert_eq!(parse_limit(&unlimited), Some(Limit::Unlimited));
        assert_eq!(parse_limit("nothing here"), None);
        let status = "Name:\tx\nCapEff:\t0000000000004000\n";
        assert_eq!(parse_cap_ipc_lock(status), Some(true));
        assert_eq!(
            parse_cap_ipc_lock("CapEff:\t0000000000000000\n"),
            Some(false)
        );
        // Root's usual set includes it.
        assert_eq!(
            parse_cap_ipc_lock("CapEff:\t000001ffffffffff\n"),
            Some(true)
        );
        assert_eq!(parse_cap_ipc_lock("CapEff: zz\n"), None);
    }

    /// An 8 GiB memory node under the usual 8 MiB limit is refused with the figures and what to
    /// do; the capability, an unlimited limit or an unreadable one let it through, and the
    /// staging buffers of earlier endpoints count.
    #[test]
    fn a_registration_past_the_limit_is_refused_with_what_to_do() {
        let limit = Some(Limit::Bytes(8 << 20));
        let e = check(0, 8 << 30, limit, Some(false)).expect_err("refused");
        let text = e.to_string();
        for part in ["8589934592", "8388608", "ulimit -l", "CAP_IPC_LOCK"] {
            assert!(text.contains(part), "{text}");
        }
        assert!(check(0, 8 << 30, limit, Some(true)).is_ok());
        assert!(check(0, 8 << 30, Some(Limit::Unlimited), Some(false)).is_ok());
        assert!(check(0, 8 << 30, None, None).is_ok());
        // Two 4 MiB staging buffers fit 8 MiB; a third does not.
        assert!(check(4 << 20, 4 << 20, limit, None).is_ok());
        assert!(check(8 << 20, 4 << 20, limit, None).is_err());
    }

    #[test]
    fn pinned_bytes_are_counted_until_released() {
        let before = PINNED.load(Ordering::Relaxed);
        // This process's own limit may refuse; either way nothing stays counted after the drop.
        if let Ok(p) = pin(4096) {
            assert_eq!(PINNED.load(Ordering::Relaxed), before + 4096);
            drop(p);
        }
        assert_eq!(PINNED.load(Ordering::Relaxed), before);
    }
}
