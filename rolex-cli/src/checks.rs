//! Value parsers for the flags every command shares: each refuses, while the command line is
//! parsed and before any work, what cannot run (an infinite duration, a thread count the store
//! has no connections for, a cost model that divides by zero), naming the limit.
//!
//! The limits, and why:
//! * `--threads`: 1 to [`MAX_THREADS`] — a compute node has that many connection indexes per
//!   memory node (`leaf_store::members::CONNECTIONS_PER_MEMBER`), one per client.
//! * `--memory-nodes`: 1 to [`MAX_MEMORY_NODES`] embedded memory nodes (each a pool, a retrainer
//!   thread and its share of the keys; a harness on one machine gains nothing from more).
//! * `--duration`: a positive, finite number of seconds, at most [`MAX_SECONDS`] (115 days).
//! * `--target-rate`: a positive, finite number of operations per second, at most
//!   [`MAX_TARGET_RATE`] (a nanosecond between two operations of one thread).
//! * `--delta`, `--epsilon`: what the learned models take (`learned_model::MAX_DELTA`,
//!   `MAX_EPSILON`).
//! * cost-model figures: positive and finite.

use std::ops::RangeInclusive;

/// The size of the byte values a bench run stores: every value `min` bytes, or uniform in
/// `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ValueSize {
    /// Shortest value.
    pub min: u64,
    /// Longest value.
    pub max: u64,
}

impl ValueSize {
    /// As `--value-size` takes it.
    pub fn flag(&self) -> String {
        if self.min == self.max {
            self.min.to_string()
        } else {
            format!("{}-{}", self.min, self.max)
        }
    }
}

impl std::fmt::Display for ValueSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min == self.max {
            write!(f, "{} bytes", self.min)
        } else {
            write!(f, "{}-{} bytes (uniform)", self.min, self.max)
        }
    }
}

/// A compute node's cache budget: bytes per loaded key, or bytes in all.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheBudget {
    /// This many bytes per key loaded (a fraction is fine).
    PerKey(f64),
    /// This many bytes per compute node.
    Bytes(u64),
}

impl CacheBudget {
    /// As `--cache-budget` takes it.
    pub fn flag(&self) -> String {
        match *self {
            CacheBudget::PerKey(b) => b.to_string(),
            CacheBudget::Bytes(b) => format!("{}MiB", b as f64 / MIB),
        }
    }

    /// Bytes for a compute node of a store holding `keys` keys.
    pub fn bytes(&self, keys: u64) -> u64 {
        match *self {
            // Truncation is the intent: a budget is an upper bound.
            CacheBudget::PerKey(b) => (b * keys as f64) as u64,
            CacheBudget::Bytes(b) => b,
        }
    }
}

impl std::fmt::Display for CacheBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            CacheBudget::PerKey(b) => write!(f, "{b} bytes per key"),
            CacheBudget::Bytes(b) => write!(f, "{:.2} MiB per compute node", b as f64 / MIB),
        }
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// The largest cache budget taken: 1 TiB per compute node, or 4,096 bytes per key.
const MAX_BUDGET_MIB: f64 = 1024.0 * 1024.0;
const MAX_BUDGET_PER_KEY: f64 = 4096.0;

/// `--cache-budget`: `B` bytes per key (`0.5`), or `M` MiB per compute node (`64MiB`).
pub fn cache_budget(s: &str) -> Result<CacheBudget, String> {
    not_negative(
        s,
        &format!(
            "bytes per key in 0..={MAX_BUDGET_PER_KEY} (0.5) or MiB per compute node in 0..={MAX_BUDGET_MIB} (64MiB)"
        ),
    )?;
    let t = s.trim();
    let (number, per_node) = match t.strip_suffix("MiB") {
        Some(n) => (n, true),
        None => (t, false),
    };
    let x = finite_number(number)
        .map_err(|e| format!("{e}: give bytes per key (0.5) or MiB per compute node (64MiB)"))?;
    let max = if per_node {
        MAX_BUDGET_MIB
    } else {
        MAX_BUDGET_PER_KEY
    };
    if !(0.0..=max).contains(&x) {
        return Err(format!(
            "{x} is outside 0..={max} ({})",
            if per_node {
                "MiB per compute node"
            } else {
                "bytes per key"
            }
        ));
    }
    Ok(if per_node {
        // Truncation is the intent: a budget is an upper bound.
        CacheBudget::Bytes((x * MIB) as u64)
    } else {
        CacheBudget::PerKey(x)
    })
}

/// One budget of `rolex compare --budget-sweep`: bytes per key, in `0..=4096`.
pub fn budget_per_key(s: &str) -> Result<f64, String> {
    match cache_budget(s)? {
        CacheBudget::PerKey(b) => Ok(b),
        CacheBudget::Bytes(_) => Err(format!("'{s}': the sweep takes bytes per key (0.5)")),
    }
}

/// `--value-size`: `N` bytes, or `MIN-MAX` (uniform), each at most 64 KiB.
pub fn value_size(s: &str) -> Result<ValueSize, String> {
    let limit = leaf_store::value::MAX_VALUE_LEN;
    not_negative(
        s,
        &format!("a whole number of bytes in 0..={limit}, or MIN-MAX (uniform)"),
    )?;
    let why = "a value is at most 64 KiB";
    let (min, max) = match s.split_once('-') {
        Some((a, b)) => (
            integer_in(a, 0..=limit, why)?,
            integer_in(b, 0..=limit, why)?,
        ),
        None => {
            let n = integer_in(s, 0..=limit, why)?;
            (n, n)
        }
    };
    if min > max {
        return Err(format!(
            "'{s}': the shortest value is longer than the longest"
        ));
    }
    Ok(ValueSize { min, max })
}

/// Most client threads one bench process runs: one connection index each.
pub const MAX_THREADS: u64 = leaf_store::members::CONNECTIONS_PER_MEMBER;

/// Most embedded memory nodes.
pub const MAX_MEMORY_NODES: u64 = 64;

/// Longest `--duration`, in seconds.
pub const MAX_SECONDS: f64 = 1e7;

/// Refuses a value starting with `-` where the flag takes none: a negative number (`-5`, `-5s`,
/// `-1MiB`), or the next flag taken for this one's value. Numeric flags take such values (see
/// `main.rs`) so that this says what the flag needs instead of clap's "unexpected argument".
pub fn not_negative(s: &str, needs: &str) -> Result<(), String> {
    if s.trim_start().starts_with('-') {
        Err(format!("needs {needs}, not {s}"))
    } else {
        Ok(())
    }
}

fn integer_in(s: &str, range: RangeInclusive<u64>, why: &str) -> Result<u64, String> {
    not_negative(
        s,
        &format!(
            "a whole number in {}..={} ({why})",
            range.start(),
            range.end()
        ),
    )?;
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n} is outside {}..={} ({why})",
            range.start(),
            range.end()
        ))
    }
}

/// `--threads`.
pub fn threads(s: &str) -> Result<u64, String> {
    integer_in(
        s,
        1..=MAX_THREADS,
        "a client thread takes one of a compute node's connection indexes",
    )
}

/// `--inflight`.
pub fn inflight(s: &str) -> Result<u64, String> {
    integer_in(
        s,
        1..=MAX_INFLIGHT,
        "each operation in flight takes one of a compute node's connection indexes",
    )
}

/// Most operations one bench thread keeps in flight.
pub const MAX_INFLIGHT: u64 = 64;

/// Longest `--latency-us` round trip.
pub const MAX_LATENCY_US: f64 = 10_000.0;

/// `--latency-us`: a round trip in microseconds, more than 0 and at most [`MAX_LATENCY_US`].
pub fn latency_us(s: &str) -> Result<f64, String> {
    not_negative(
        s,
        &format!("a round trip above 0 and at most {MAX_LATENCY_US} µs"),
    )?;
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of microseconds"))?;
    if x.is_finite() && x > 0.0 && x <= MAX_LATENCY_US {
        Ok(x)
    } else {
        Err(format!(
            "{s} µs: give a round trip above 0 and at most {MAX_LATENCY_US} µs"
        ))
    }
}

/// `--memory-nodes`.
pub fn memory_nodes(s: &str) -> Result<u64, String> {
    integer_in(s, 1..=MAX_MEMORY_NODES, "embedded memory nodes")
}

/// `--delta`: key slots per leaf.
pub fn delta(s: &str) -> Result<u64, String> {
    integer_in(s, 1..=learned_model::MAX_DELTA, "key slots per leaf")
}

/// `--epsilon`: the models' error bound.
pub fn epsilon(s: &str) -> Result<u64, String> {
    integer_in(s, 1..=learned_model::MAX_EPSILON, "a model's error bound")
}

/// A count that must be positive (`--model-clients`, `--ops`, `--keys` of a suite).
pub fn positive_count(s: &str) -> Result<u64, String> {
    not_negative(s, "a whole number ≥ 1")?;
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

fn finite_number(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

/// `--duration` (seconds).
pub fn seconds(s: &str) -> Result<f64, String> {
    not_negative(
        s,
        &format!("a number of seconds above 0 and at most {MAX_SECONDS:e}"),
    )?;
    let x = finite_number(s)?;
    if x > 0.0 && x <= MAX_SECONDS {
        Ok(x)
    } else {
        Err(format!(
            "{s} is not a number of seconds above 0 and at most {MAX_SECONDS:e}"
        ))
    }
}

/// `-p KEY=VALUE`: a property name and a value (checked as the workload file's are).
pub fn property(s: &str) -> Result<String, String> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && !value.trim().is_empty() => {
            Ok(s.to_string())
        }
        _ => Err(format!(
            "{s:?} is not KEY=VALUE (a workload-file property and its value)"
        )),
    }
}

/// The highest `--target-rate`: one operation a nanosecond (the schedule's resolution).
pub const MAX_TARGET_RATE: f64 = 1e9;

/// `--target-rate` (operations per second, over all client threads).
pub fn target_rate(s: &str) -> Result<f64, String> {
    let needs =
        format!("a number of operations per second above 0 and at most {MAX_TARGET_RATE:e}");
    not_negative(s, &needs)?;
    let x = finite_number(s)?;
    if x > 0.0 && x <= MAX_TARGET_RATE {
        Ok(x)
    } else {
        Err(format!("{s} is not {needs}"))
    }
}

/// A cost-model figure: positive and finite.
pub fn positive(s: &str) -> Result<f64, String> {
    not_negative(s, "a number above 0")?;
    let x = finite_number(s)?;
    if x > 0.0 {
        Ok(x)
    } else {
        Err(format!("{s} must be above 0"))
    }
}

/// A whole number, 0 or more (`--seed`, `--lease-ms`).
pub fn whole_number(s: &str) -> Result<u64, String> {
    not_negative(s, "a whole number, 0 or more")?;
    s.trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number (0 to {})", u64::MAX))
}

/// How often a bench run is sampled: the shortest `--report-interval`.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(5);

/// `--report-interval` (seconds): at least the sampling period, [`SAMPLE_EVERY`] (an interval
/// ends at a sample, so a shorter one could not be kept).
pub fn report_interval(s: &str) -> Result<f64, String> {
    let x = seconds(s)?;
    let min = SAMPLE_EVERY.as_secs_f64();
    if x < min {
        Err(format!(
            "{s} s is shorter than the {} ms the run is sampled at: give at least {min}",
            SAMPLE_EVERY.as_millis()
        ))
    } else {
        Ok(x)
    }
}

/// `--insert-ratio`: a share of the operations, in `[0, 1]`.
pub fn share(s: &str) -> Result<f64, String> {
    not_negative(s, "a share of the operations in [0, 1]")?;
    let x = finite_number(s)?;
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("{s} is outside [0, 1] (a share of the operations)"))
    }
}

/// `--page-size`: the B+-tree's page, a multiple of 64 bytes in 128..=65536.
pub fn page_size(s: &str) -> Result<u64, String> {
    let n = integer_in(s, 128..=65536, "bytes per B+-tree page, a multiple of 64")?;
    if n.is_multiple_of(64) {
        Ok(n)
    } else {
        Err(format!(
            "{n} is not a multiple of 64 (bytes per B+-tree page)"
        ))
    }
}

/// `--cache-from-level`: the lowest level of internal B+-tree pages a compute node caches, 1
/// (every internal page) to 255 (none); level 0 holds the leaves, which are never cached.
pub fn cache_from_level(s: &str) -> Result<u8, String> {
    let n = integer_in(
        s,
        1..=u64::from(u8::MAX),
        "1: every internal page, 2: not the leaves' parents, 255: none; leaves are never cached",
    )?;
    u8::try_from(n).map_err(|_| format!("{n} is outside 1..=255"))
}

/// `bench --leaf-slots`: slots of a hopscotch leaf (checked against `--neighbourhood` later).
pub fn leaf_slots(s: &str) -> Result<u64, String> {
    integer_in(s, 4..=64, "slots of a hopscotch leaf, at most 64")
}

/// `bench --neighbourhood`: slots of a hopscotch neighbourhood.
pub fn neighbourhood(s: &str) -> Result<u64, String> {
    integer_in(s, 2..=16, "slots of a neighbourhood")
}

/// `memnode --node`: a memory-node id.
pub fn node_id(s: &str) -> Result<u16, String> {
    let n = integer_in(s, 0..=u64::from(u16::MAX), "a memory-node id")?;
    u16::try_from(n).map_err(|_| format!("{n} is outside 0..=65535"))
}

/// `memnode --nodes`: memory nodes in a deployment.
pub fn node_count(s: &str) -> Result<u16, String> {
    let n = integer_in(s, 1..=u64::from(u16::MAX), "memory nodes in the deployment")?;
    u16::try_from(n).map_err(|_| format!("{n} is outside 1..=65535"))
}

/// Whether `path` names standard output (`-`).
pub fn is_stdout(path: &std::path::Path) -> bool {
    path.as_os_str() == "-"
}

/// Checks, before any work, that a report can be written at `path`: its directory exists, and
/// it is not itself a directory or a read-only file. `-` (standard output) is taken where
/// `stdout_ok`; elsewhere the command's table is on standard output, and `-` is refused.
pub fn output_file(path: &std::path::Path, flag: &str, stdout_ok: bool) -> Result<(), String> {
    if is_stdout(path) {
        return if stdout_ok {
            Ok(())
        } else {
            Err(format!(
                "{flag} -: standard output carries this command's table; name a file"
            ))
        };
    }
    let shown = path.display();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {shown}: directory {} does not exist",
            dir.display()
        ));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(format!("{flag} {shown}: is a directory")),
        Ok(m) if m.permissions().readonly() => Err(format!("{flag} {shown}: is read-only")),
        _ => Ok(()),
    }
}

/// Checks, before any work, a directory a command writes its files into: one that exists, or a
/// missing one whose parent exists — only the last level of a directory is made, so a mistyped
/// path is not created whole. Returns the directory to make, if it is missing ([`make_dir`]).
pub fn output_dir(
    path: &std::path::Path,
    flag: &str,
) -> Result<Option<std::path::PathBuf>, String> {
    dir_to_make(path, flag, path)
}

/// [`output_dir`] for `dir`, named in messages as `shown` (the path given to `flag`).
fn dir_to_make(
    dir: &std::path::Path,
    flag: &str,
    shown: &std::path::Path,
) -> Result<Option<std::path::PathBuf>, String> {
    if dir.is_dir() {
        return Ok(None);
    }
    if dir.exists() {
        return Err(if dir == shown {
            format!("{flag} {}: exists and is not a directory", shown.display())
        } else {
            format!(
                "{flag} {}: {} is not a directory",
                shown.display(),
                dir.display()
            )
        });
    }
    let shown = shown.display();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if parent.is_dir() {
        Ok(Some(dir.to_path_buf()))
    } else {
        Err(format!(
            "{flag} {shown}: directory {} does not exist (only the last level of a missing directory is made)",
            parent.display()
        ))
    }
}

/// [`output_file`] (standard output refused) for a command that makes its output directory:
/// the file's directory may be missing if its parent exists. Returns the directory to make, if
/// any ([`make_dir`]).
pub fn output_file_in_dir(
    path: &std::path::Path,
    flag: &str,
) -> Result<Option<std::path::PathBuf>, String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if is_stdout(path) || dir.is_dir() {
        return output_file(path, flag, false).map(|()| None);
    }
    dir_to_make(dir, flag, path)
}

/// Makes the directory [`output_dir`] or [`output_file_in_dir`] found missing (its last level
/// only).
pub fn make_dir(path: &std::path::Path, flag: &str) -> Result<(), String> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(_) if path.is_dir() => Ok(()),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_run_is_refused_and_what_can_is_taken() {
        for bad in ["inf", "1e30", "nan", "-1", "0", "x", "NaN"] {
            assert!(seconds(bad).is_err(), "--duration {bad}");
        }
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert!(threads("0").is_err() && threads("100000").is_err());
        assert_eq!(threads("128"), Ok(128));
        assert!(memory_nodes("1000").is_err() && memory_nodes("0").is_err());
        assert!(delta("1000000").is_err() && delta("0").is_err());
        assert_eq!(delta("16"), Ok(16));
        assert!(positive("0").is_err() && positive("nan").is_err() && positive("-2").is_err());
        assert_eq!(positive("100"), Ok(100.0));
        assert!(positive_count("0").is_err());
        let message = threads("100000").unwrap_err();
        assert!(message.contains("1..=128"), "{message}");
    }
}

/// `--warmup`: operations run before the measured ones and left out of every figure.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Warmup {
    /// This many operations (over all threads).
    Ops(u64),
    /// This many seconds.
    Seconds(f64),
}

impl Warmup {
    /// As `--warmup` takes it (`100000`, `2s`).
    pub fn flag(&self) -> String {
        match *self {
            Warmup::Ops(n) => n.to_string(),
            Warmup::Seconds(s) => format!("{s}s"),
        }
    }
}

/// `--warmup`: a count of operations (`100000`) or seconds (`2s`, `0.5s`).
pub fn warmup(s: &str) -> Result<Warmup, String> {
    not_negative(s, "a count of operations (100000) or seconds (2s), above 0")?;
    match s.strip_suffix('s') {
        Some(secs) => seconds(secs).map(Warmup::Seconds),
        None => positive_count(s).map(Warmup::Ops).map_err(|_| {
            format!("{s:?} is neither a count of operations (100000) nor seconds (2s)")
        }),
    }
}

/// The most runs `--runs` repeats.
pub const MAX_RUNS: u64 = 100;

/// `--runs`: 1 to [`MAX_RUNS`].
pub fn runs(s: &str) -> Result<u64, String> {
    not_negative(s, &format!("a number of runs in 1..={MAX_RUNS}"))?;
    let n: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of runs"))?;
    if (1..=MAX_RUNS).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} runs: give 1 to {MAX_RUNS}"))
    }
}

/// The most bytes read from a workload property file (`--workload-file`): such files are a few
/// dozen `key=value` lines; anything longer (a device, a wrong file) is refused, not read on.
pub const MAX_WORKLOAD_FILE_BYTES: u64 = 1 << 20;

/// Reads `path` whole, refusing it (before reading further) once it holds more than `limit`
/// bytes: a device such as `/dev/zero` or a huge file costs at most `limit` + 1 bytes.
/// `what` names the file in the message (`--workload-file /dev/zero`).
pub fn read_at_most(path: &std::path::Path, limit: u64, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{what}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{what}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{what}: more than {limit} bytes ({}); refused unread",
            bytes_text(limit)
        ));
    }
    Ok(bytes)
}

/// `bytes` for a person: `1 MiB`, `80.8 GB`.
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut x = bytes as f64;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else if x.fract() == 0.0 {
        format!("{x:.0} {}", UNITS[unit])
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

/// The memory this machine has for a run: `MemAvailable` from `/proc/meminfo` (`MemTotal` where
/// the kernel gives no `MemAvailable`), in bytes, with the field's name; `None` where neither
/// can be read (the check is then skipped).
pub fn machine_memory() -> Option<(u64, &'static str)> {
    let text = read_at_most(
        std::path::Path::new("/proc/meminfo"),
        1 << 16,
        "/proc/meminfo",
    )
    .ok()?;
    let text = String::from_utf8_lossy(&text);
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            kib.checked_mul(1024)
        })
    };
    field("MemAvailable")
        .map(|b| (b, "MemAvailable"))
        .or_else(|| field("MemTotal").map(|b| (b, "MemTotal")))
}

/// Refuses a run whose estimated memory, `needs` bytes (`parts` says of what), exceeds what
/// this machine has available; `what` names the run (`--keys 10000000000`). Passes where the
/// machine's memory cannot be read.
pub fn memory_fits(needs: u64, parts: &str, what: &str) -> Result<(), String> {
    fits(needs, parts, what, machine_memory())
}

fn fits(needs: u64, parts: &str, what: &str, machine: Option<(u64, &str)>) -> Result<(), String> {
    match machine {
        Some((have, field)) if needs > have => Err(format!(
            "{what}: the run needs about {} of memory ({parts}); this machine has {} ({field} in /proc/meminfo)",
            bytes_text(needs),
            bytes_text(have)
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    #[test]
    fn a_file_past_its_bound_is_refused_and_one_within_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, [7u8; 100]).expect("write");
        assert_eq!(read_at_most(&path, 100, "f").expect("read").len(), 100);
        let e = read_at_most(&path, 99, "--workload-file f").unwrap_err();
        assert!(
            e.starts_with("--workload-file f: more than 99 bytes"),
            "{e}"
        );
    }

    #[test]
    fn memory_is_compared_with_the_machines() {
        assert!(fits(10, "keys", "--keys 1", Some((100, "MemAvailable"))).is_ok());
        assert!(fits(10, "keys", "--keys 1", None).is_ok());
        let e = fits(
            3 << 30,
            "keys 3 GiB",
            "--keys 9",
            Some((1 << 30, "MemTotal")),
        )
        .unwrap_err();
        assert!(
            e.contains("about 3 GiB") && e.contains("has 1 GiB (MemTotal"),
            "{e}"
        );
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(12), "12 bytes");
    }
}
