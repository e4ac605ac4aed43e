//! `rolex inspect`: a pool file's superblock, regions, verify report, members and the locks
//! held by compute nodes that are no longer members.

use crate::error::CliError;
use std::path::PathBuf;

use leaf_store::Layout;
use rdma_transport::Transport;

use crate::pools;

#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// The pool file.
    #[arg(long)]
    attach: PathBuf,
}

pub(crate) fn run(args: &InspectArgs) -> Result<bool, CliError> {
    let transport = pools::attach_files(std::slice::from_ref(&args.attach), false)?;
    let node = pools::only_node(&transport);
    let mut ep = transport.endpoint()?;
    let layout =
        Layout::attach(&mut ep, node).map_err(|e| format!("{}: {e}", args.attach.display()))?;
    let sb = layout.superblock();
    println!("pool {} ({} bytes)", args.attach.display(), node.region_len);
    println!(
        "superblock: layout v{}, ε {}, δ {}, fill {}, {} leaves per slot, node {} of {}, keys [{}, {}]",
        sb.version,
        sb.epsilon,
        sb.delta,
        sb.fill,
        sb.slot_leaves,
        sb.node_id,
        sb.node_count,
        sb.key_lo,
        sb.key_hi
    );
    println!(
        "regions: slot table @{} (room for {} slots; {} at bulk load), ring @{} ({} entries), models @{} ({} bytes), leaves @{} ({} × {} bytes)",
        sb.slot_table_offset,
        sb.slot_capacity,
        sb.slots,
        sb.ring_offset,
        sb.ring_capacity,
        sb.model_region_offset,
        sb.model_region_bytes,
        sb.leaf_region_offset,
        sb.leaf_capacity,
        sb.leaf_bytes
    );
    println!(
        "bulk load: {} keys, {} trained leaves, {} record bytes",
        sb.keys_loaded, sb.trained_leaves, sb.record_bytes_loaded
    );
    // Walked again while it finds problems: compute processes may be writing the pool.
    let served = pools::served(&args.attach).unwrap_or(false);
    let walked = crate::verdict::verify_pool(&mut ep, node, None, served)?;
    let report = &walked.last;
    println!("{report}");
    if walked.walks > 1 {
        println!("{}", crate::verdict::line(&walked.verdict, walked.walks));
    }
    let table = leaf_store::members::MemberTable::new(&layout);
    let leases = table.read_leases(&mut ep)?;
    let mut alive = Vec::new();
    let mut listed = Vec::new();
    for (tag, lease) in leases.iter().enumerate().skip(1) {
        use leaf_store::members::MemberState;
        let state = match lease.state() {
            MemberState::Free => continue,
            MemberState::Alive => {
                alive.push(tag as u8);
                "alive"
            }
            MemberState::Dead => "dead, being recovered",
        };
        listed.push(format!(
            "{tag} ({state}, incarnation {}, heartbeat {})",
            lease.incarnation(),
            lease.heartbeat()
        ));
    }
    if listed.is_empty() {
        println!("members: none");
    } else {
        println!("members: {}", listed.join(", "));
    }
    // Of the problems every walk found (a lock taken by a member that joined after the leases
    // were read is not a non-member's).
    // A retrainer's freeze (owner `FREEZE_OWNER`) is no member's lock: listed apart.
    let held = |frozen: bool| -> Vec<String> {
        walked
            .lasting
            .iter()
            .filter_map(|p| match p {
                leaf_store::Problem::LockHeld { slot, leaf, owner }
                    if (*owner == leaf_store::FREEZE_OWNER) == frozen && !alive.contains(owner) =>
                {
                    Some(if frozen {
                        format!("slot {slot} leaf {leaf}")
                    } else {
                        format!("slot {slot} leaf {leaf} (member {owner})")
                    })
                }
                _ => None,
            })
            .collect()
    };
    let orphaned = held(false);
    let frozen = held(true);
    if !frozen.is_empty() {
        println!("frozen by a retrainer: {}", frozen.join(", "));
    }
    if orphaned.is_empty() {
        println!("locks held by non-members: none");
    } else {
        println!("locks held by non-members: {}", orphaned.join(", "));
    }
    if let crate::verdict::Verdict::Inconclusive { .. } = walked.verdict {
        return Err(CliError::Inconclusive(format!(
            "{}: verify inconclusive: the pool changed while it was read (compute processes write it, or its memnode retrains or recovers)",
            args.attach.display()
        )));
    }
    Ok(walked.verdict == crate::verdict::Verdict::Clean && orphaned.is_empty())
}
