//! `rolex memnode`: creates and bulk-loads a shared pool file (or serves one again with
//! `--resume`), runs its retrainer and lease watch, and prints a status line every second until
//! stopped.

use crate::error::{CliError, failed, input};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use leaf_store::{BulkLoadConfig, Layout, bulk_load};
use rdma_transport::Transport;
use retrainer::{RetrainConfig, Retrainer};
use sim_transport::{Pool, SimConfig, SimTransport};

use crate::{bench, keys, pools};

#[derive(Debug, clap::Args)]
pub(crate) struct MemnodeArgs {
    /// The pool file to create (e.g. under /dev/shm), or with `--resume` to serve again.
    #[arg(long)]
    pool: PathBuf,
    /// Its size: bytes, or with a suffix K, M, G (powers of 1024).
    #[arg(long, value_parser = parse_size, required_unless_present = "resume")]
    size: Option<u64>,
    /// Serve an existing pool file (created by an earlier `rolex memnode`, which stopped or was
    /// killed) instead of creating one: its keys stay as they are, and the retrainer repairs what
    /// a retraining cut short left behind.
    #[arg(long, conflicts_with_all = ["size", "load", "keys", "key_dist", "force", "node", "nodes",
                                      "epsilon", "delta", "fill", "seed"])]
    resume: bool,
    /// Keys to generate and bulk-load (all memory nodes' together: each takes its share).
    #[arg(long, default_value_t = 1_000_000, conflicts_with = "load",
          value_parser = crate::checks::positive_count)]
    keys: u64,
    /// This memory node's id in a deployment of `--nodes` (each started with the same key flags;
    /// node i loads the i-th range of the keys, as `bootstrap` splits them).
    #[arg(long, default_value_t = 0, value_parser = crate::checks::node_id)]
    node: u16,
    /// Memory nodes in the deployment.
    #[arg(long, default_value_t = 1, value_parser = crate::checks::node_count)]
    nodes: u16,
    /// Key distribution of the generated keys.
    #[arg(long, value_enum, default_value_t = keys::KeyDist::Uniform, conflicts_with = "load")]
    key_dist: keys::KeyDist,
    /// Bulk-load a SOSD key file instead (u64 count, then sorted u64 keys).
    #[arg(long)]
    load: Option<PathBuf>,
    #[arg(long, default_value_t = 16, value_parser = crate::checks::epsilon)]
    epsilon: u64,
    #[arg(long, default_value_t = 16, value_parser = crate::checks::delta)]
    delta: u64,
    #[arg(long, default_value_t = 12, value_parser = crate::checks::positive_count)]
    fill: u64,
    #[arg(long, default_value_t = 1, value_parser = crate::checks::whole_number)]
    seed: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_parser = crate::checks::seconds)]
    duration: Option<f64>,
    /// Replace the pool file if it exists.
    #[arg(long)]
    force: bool,
    /// Serve the pool to compute nodes through the simulator (they attach to the file), or over
    /// RDMA verbs (needs the `verbs` build feature, an RDMA device and `--listen`).
    #[arg(long, value_enum, default_value_t = bench::CliTransport::Sim)]
    transport: bench::CliTransport,
    /// A compute node whose lease has not been renewed for this many milliseconds is declared
    /// dead: its connections are cut off and the leaf locks it held released (its cut-short
    /// writes finished or undone). Compute nodes renew every 5 ms. 0 turns the watch off.
    #[arg(long, default_value_t = 250, value_parser = crate::checks::whole_number)]
    lease_ms: u64,
    /// With `--transport verbs`: the TCP address to serve bootstrap requests on.
    #[arg(long)]
    listen: Option<String>,
    /// With `--transport verbs`: the RDMA device to register the pool with (default: the first).
    #[arg(long)]
    device: Option<String>,
}

fn parse_size(s: &str) -> Result<u64, String> {
    crate::checks::not_negative(
        s,
        "a size: bytes, or with a suffix K, M, G, T (4096, 64M, 2G)",
    )?;
    let s = s.trim();
    let (digits, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let base: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64M, 2G)"))?;
    let factor = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} (use K, M, G, T)")),
    };
    base.checked_mul(factor)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("{s:?} is not a usable size"))
}

pub(crate) fn run(args: &MemnodeArgs) -> Result<(), CliError> {
    if args.transport == bench::CliTransport::Verbs {
        verbs_available(args)?;
    } else if let Some(flag) = [("--listen", &args.listen), ("--device", &args.device)]
        .iter()
        .find_map(|(flag, value)| value.is_some().then_some(flag))
    {
        return Err(crate::error::input!(
            "{flag} needs --transport verbs (the simulator serves the pool file itself)"
        ));
    }
    let (transport, _lock) = if args.resume {
        resume_pool(args)?
    } else {
        create_pool(args)?
    };
    std::io::stdout().flush()?;
    let end = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    match args.transport {
        bench::CliTransport::Sim => {
            let node = transport.memory_nodes()[0];
            let ep = transport.endpoint()?;
            let mut worker = Retrainer::new(ep, node, RetrainConfig::default())?;
            if args.lease_ms > 0 {
                let fence = transport
                    .fence(node.id)
                    .ok_or("the pool's memory node is unknown to its transport")?;
                worker.watch_members(Duration::from_millis(args.lease_ms), Box::new(fence));
            }
            report_recovery(&worker);
            retrain_loop(worker, end)
        }
        bench::CliTransport::Verbs => serve_verbs(args, transport, end),
    }
}

/// Creates and bulk-loads the pool file; prints `ready:`. Removes the file if loading fails.
fn create_pool(args: &MemnodeArgs) -> Result<(SimTransport, std::fs::File), CliError> {
    if args.pool.exists() {
        if !args.force {
            return Err(input!(
                "{} exists (use --force to replace it, or --resume to serve it again)",
                args.pool.display()
            ));
        }
        let _held = lock_pool(&args.pool)?;
        std::fs::remove_file(&args.pool).map_err(|e| format!("{}: {e}", args.pool.display()))?;
    }
    let keys = match &args.load {
        Some(path) => keys::read_sosd(path, "--load")?,
        None => keys::generate(args.key_dist, args.keys as usize, 0, args.seed).loaded,
    };
    let config = BulkLoadConfig {
        epsilon: args.epsilon,
        delta: args.delta,
        fill: args.fill,
        ..BulkLoadConfig::default()
    };
    if args.nodes == 0 || args.node >= args.nodes {
        return Err(input!(
            "--node {} is not a node of a deployment of --nodes {}",
            args.node,
            args.nodes
        ));
    }
    if (keys.len() as u64) < u64::from(args.nodes) {
        return Err(input!(
            "{} keys cannot fill {} memory nodes",
            keys.len(),
            args.nodes
        ));
    }
    let (range, config) = index_core::partition(&keys, usize::from(args.nodes), &config)
        .swap_remove(usize::from(args.node));
    let size = args.size.ok_or("--size is needed to create a pool")?;
    let pool = Pool::create_file(&args.pool, size.next_multiple_of(8))?;
    let lock = lock_pool(&args.pool)?;
    let transport = SimTransport::with_node_ids(vec![(args.node, pool)], SimConfig::default())?;
    let node = pools::only_node(&transport);
    let mut ep = transport.endpoint()?;
    let started = Instant::now();
    let report = match bulk_load(
        &mut ep,
        node,
        keys[range].iter().map(|&k| (k, k)).collect(),
        &config,
    ) {
        Ok(report) => report,
        Err(e) => {
            let _ = std::fs::remove_file(&args.pool);
            return Err(e.into());
        }
    };
    println!(
        "ready: {} (memory node {} of {}) holds {} keys in {} slots, {} trained leaves of {} (loaded in {:.2} s)",
        args.pool.display(),
        args.node,
        args.nodes,
        report.keys,
        report.slots,
        report.trained_leaves,
        report.layout.leaf_capacity(),
        started.elapsed().as_secs_f64()
    );
    Ok((transport, lock))
}

/// Attaches to an existing pool file; prints `ready:`.
fn resume_pool(args: &MemnodeArgs) -> Result<(SimTransport, std::fs::File), CliError> {
    let lock = lock_pool(&args.pool)?;
    let transport = pools::attach_files(std::slice::from_ref(&args.pool), false)?;
    let node = pools::only_node(&transport);
    let mut ep = transport.endpoint()?;
    let layout =
        Layout::attach(&mut ep, node).map_err(|e| format!("{}: {e}", args.pool.display()))?;
    let leaves_used = rdma_transport::Endpoint::read_word(&mut ep, layout.alloc_num_addr())?
        .min(layout.leaf_capacity());
    let slots = rdma_transport::Endpoint::read_word(&mut ep, layout.slot_count_addr())?;
    println!(
        "ready: {} resumed: {} slots, {} leaves in use of {} ({} keys at bulk load)",
        args.pool.display(),
        slots,
        leaves_used,
        layout.leaf_capacity(),
        layout.superblock().keys_loaded
    );
    Ok((transport, lock))
}

/// Holds an exclusive advisory lock on the pool file for as long as the returned handle lives, so
/// two memory nodes never serve (or replace) one pool. Attached compute processes do not hold it:
/// `rolex bench --attach` only asks whether it is held ([`pools::served`]), taking a shared lock
/// for an instant, so a lock found held is tried again for [`LOCK_PATIENCE`] before the pool is
/// taken for served by another memnode.
fn lock_pool(path: &std::path::Path) -> Result<std::fs::File, CliError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let until = Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(input!(
                    "{} is served by another memnode (its lock is held)",
                    path.display()
                ));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(input!("{}: {e}", path.display()));
            }
        }
    }
}

/// How long a memnode waits for a pool file's lock held by someone else: a bench asking whether
/// the pool is served holds it (shared) for an instant; another memnode holds it for good.
const LOCK_PATIENCE: Duration = Duration::from_millis(200);

/// Prints what the retrainer repaired when it started, if anything.
fn report_recovery<E: rdma_transport::Endpoint>(worker: &Retrainer<E>) {
    let recovery = worker.recovery();
    if recovery != retrainer::Recovery::default() {
        println!(
            "recovered: {}{}{} slots queued again",
            recovery
                .unfrozen
                .map_or(String::new(), |s| format!("slot {s} unfrozen and queued, ")),
            recovery.retired.map_or(String::new(), |s| format!(
                "slot {s}'s replaced record retired, "
            )),
            recovery.requeued
        );
    }
}

/// Runs the retrainer, printing status every second, until `end` (or forever).
fn retrain_loop<E: rdma_transport::Endpoint>(
    mut worker: Retrainer<E>,
    end: Option<Instant>,
) -> Result<(), CliError> {
    let started = Instant::now();
    // SIGTERM or SIGINT: finish the step under way, print a last line, exit 0 (the pool file
    // stays, consistent, for `--resume`).
    let signalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&signalled))
            .map_err(|e| failed!("cannot handle signal {signal}: {e}"))?;
    }
    let stop = || signalled.load(std::sync::atomic::Ordering::Relaxed);
    loop {
        let next_status = Instant::now() + Duration::from_secs(1);
        // The worker stops only when its transport is gone; problems with single slots are
        // reported here and the slots tried again.
        let stats = worker
            .run(|| {
                Instant::now() >= next_status || end.is_some_and(|e| Instant::now() >= e) || stop()
            })
            .map_err(|e| failed!("retrainer stopped, its connection to the pool is gone: {e}"))?;
        let mut line = format!(
            "status at {:.0} s: {} retrains ({} slot splits), {} pending, {} records reclaimed, {} orphaned leaves reclaimed",
            started.elapsed().as_secs_f64(),
            stats.retrains,
            stats.splits,
            worker.pending(),
            stats.reclaimed_records,
            stats.orphans_reclaimed
        );
        if let Ok(pool) = worker.pool_usage() {
            let space = worker.model_space();
            line.push_str(&format!(
                "; slots {}/{}; leaves {}/{} ({} free-listed); model region {}/{} KiB used ({} KiB reusable, {} KiB retired)",
                pool.slots,
                pool.slot_capacity,
                pool.leaves_allocated,
                pool.leaf_capacity,
                pool.leaves_free_listed,
                pool.model_bytes_used / 1024,
                pool.model_region_bytes / 1024,
                space.reusable_bytes / 1024,
                space.retired_bytes / 1024
            ));
        }
        let put_off = worker.deferred().len();
        if put_off > 0 || stats.leaf_locked + stats.model_region_full + stats.errors > 0 {
            line.push_str(&format!(
                ", {put_off} put off (so far: {} by a held leaf lock, {} by a full model region, {} other)",
                stats.leaf_locked, stats.model_region_full, stats.errors
            ));
            if let Some((slot, problem)) = worker.last_problem() {
                line.push_str(&format!("; last: slot {slot}: {problem}"));
            }
        }
        if let Some(members) = worker.member_stats() {
            let done = members.rolled_forward;
            line.push_str(&format!(
                "; members: {} alive, {} joined, {} died, {} recovered ({} locks released, {} splits completed, {} leaves freed, longest recovery {:.1} ms); {} leaves granted",
                members.alive,
                members.joins,
                members.deaths,
                members.recoveries,
                done.locks_released,
                done.splits_completed,
                done.leaves_freed + done.unlinks_completed,
                members.longest_recovery.as_secs_f64() * 1e3,
                members.leaves_granted
            ));
            if let Some(problem) = worker.member_problem() {
                line.push_str(&format!("; last recovery problem: {problem}"));
            }
        }
        println!("{line}");
        if stop() {
            println!(
                "stopped by a signal after {:.0} s; the pool file stays, to be served again with --resume",
                started.elapsed().as_secs_f64()
            );
        }
        std::io::stdout().flush()?;
        if stop() || end.is_some_and(|e| Instant::now() >= e) {
            return Ok(());
        }
    }
}

#[cfg(feature = "verbs")]
fn verbs_available(args: &MemnodeArgs) -> Result<(), CliError> {
    if args.listen.is_none() {
        return Err("--transport verbs needs --listen ADDR".into());
    }
    if !rdma_transport::verbs::device_present() {
        return Err("no RDMA device found".into());
    }
    Ok(())
}

#[cfg(not(feature = "verbs"))]
fn verbs_available(_: &MemnodeArgs) -> Result<(), CliError> {
    Err("this rolex was built without RDMA verbs support (build with: cargo build --release -p rolex-cli --features verbs)".into())
}

/// Serves the loaded pool over RDMA; the retrainer reaches it through a loopback queue pair, so
/// its atomics are atomic with the compute nodes' (RDMA atomics are not atomic with CPU ones).
#[cfg(feature = "verbs")]
fn serve_verbs(
    args: &MemnodeArgs,
    transport: SimTransport,
    end: Option<Instant>,
) -> Result<(), CliError> {
    use rdma_transport::verbs::{ServedRegion, VerbsServer, VerbsTransport};
    let listen = args
        .listen
        .as_deref()
        .ok_or("--transport verbs needs --listen ADDR")?;
    // The pool's mapping must outlive the server: keep it for the rest of the process.
    let transport: &'static SimTransport = Box::leak(Box::new(transport));
    let node = pools::only_node(transport);
    let pool = transport.pool(node.id).ok_or("the pool is missing")?;
    let region = ServedRegion {
        id: node.id,
        ptr: pool.base_ptr(),
        len: pool.len(),
    };
    // SAFETY: the pool is leaked above, so its mapping stays valid until the process exits; the
    // simulator and the NIC both access it only as whole 8-byte words.
    let server = unsafe { VerbsServer::start(listen, args.device.as_deref(), &[region]) }?;
    println!("serving on {} over RDMA", server.local_addr());
    let loopback = VerbsTransport::connect(server.local_addr(), args.device.as_deref())?;
    let node = loopback
        .memory_nodes()
        .first()
        .copied()
        .ok_or("the loopback connection saw no memory node")?;
    let ep = loopback.endpoint()?;
    let mut worker = Retrainer::new(ep, node, RetrainConfig::default())?;
    if args.lease_ms > 0 {
        worker.watch_members(
            Duration::from_millis(args.lease_ms),
            Box::new(server.fence()),
        );
    }
    report_recovery(&worker);
    retrain_loop(worker, end)
}

#[cfg(not(feature = "verbs"))]
fn serve_verbs(_: &MemnodeArgs, _: SimTransport, _: Option<Instant>) -> Result<(), CliError> {
    Err("this rolex was built without RDMA verbs support".into())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
