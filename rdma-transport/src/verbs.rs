//! The real ibverbs backend (feature `verbs`): RC queue pairs through `sideway`.
//!
//! * A memory node runs a [`VerbsServer`]: it registers its regions (remote read, write and
//!   atomic access) and answers bootstrap requests over TCP. Each compute-node endpoint is its own
//!   RC queue pair, connected by one TCP exchange: the endpoint sends its queue pair's number,
//!   LID, GID and first packet sequence number; the server creates a queue pair for it, connects
//!   it, and answers with its own, plus every region's rkey, base address and length.
//! * A compute node holds a [`VerbsTransport`] (one per process) and one [`VerbsEndpoint`] per
//!   thread. An endpoint owns a registered staging buffer: WRITE data is copied in, READ data and
//!   atomic results land there. A doorbell batch is posted as one chain of work requests of which
//!   only the last is signaled (its id names the batch's run), with `IBV_SEND_FENCE` on fenced
//!   verbs, and costs one completion. Several batches may be in flight at once
//!   ([`crate::Endpoint::post`]); each poll takes up to 16 completions from each completion queue
//!   (see `in_flight.rs`).
//! * Atomics use `IBV_ACCESS_REMOTE_ATOMIC` and `max_rd_atomic`/`max_dest_rd_atomic` of 16.
//!
//! Without an RDMA device every entry point returns [`TransportError::NoDevice`]. Everything here
//! compiles and fails cleanly in CI; the data path has not run on a NIC in this repository's CI
//! (no device there) — the conformance suite runs against it wherever a device exists.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{AtomicCapability, DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, QueuePair, QueuePairAttribute, QueuePairState, SendOperationFlags,
};

use crate::peers::Peers;
use crate::{Completion, Endpoint, MemoryNodeInfo, Stats, Ticket, Transport, TransportError, Verb};

mod in_flight;

/// The bootstrap protocol's first word ("RLX2": version 2 carries each side's outstanding
/// READ and atomic depth; a version-1 peer is refused as not speaking it).
const MAGIC: u32 = u32::from_le_bytes(*b"RLX2");
const PORT: u8 = 1;
/// The path MTU every queue pair is set up with, and its payload in bytes: the largest WRITE
/// that lands whole when a queue pair is moved to the error state mid-message.
const PATH_MTU: Mtu = Mtu::Mtu1024;
const PATH_MTU_BYTES: usize = 1024;
/// Staging buffer per endpoint: the most one batch may move.
pub const STAGING_BYTES: usize = crate::MAX_BATCH_BYTES;
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

fn connection(what: impl std::fmt::Display) -> TransportError {
    TransportError::Connection(what.to_string())
}

/// Opens the RDMA device `name`, or the first one. [`TransportError::NoDevice`] if there is none.
fn open_device(name: Option<&str>) -> Result<Arc<DeviceContext>, TransportError> {
    let list = DeviceList::new()
        .map_err(|e| TransportError::NoDevice(format!("cannot list RDMA devices: {e}")))?;
    let device = list
        .iter()
        .find(|d| name.is_none_or(|n| d.name() == n))
        .ok_or_else(|| {
            TransportError::NoDevice(match name {
                Some(n) => format!("no RDMA device named {n:?}"),
                None => "no RDMA device on this machine".into(),
            })
        })?;
    device.open().map_err(|e| {
        TransportError::NoDevice(format!("cannot open RDMA device {}: {e}", device.name()))
    })
}

/// Whether this machine has an RDMA device (for tests that need one).
pub fn device_present() -> bool {
    open_device(None).is_ok()
}

/// The port's GID table, as [`crate::gid::choose`] takes it.
fn gid_table(ctx: &DeviceContext) -> Result<Vec<crate::gid::GidCandidate>, TransportError> {
    use crate::gid::{GidCandidate, GidKind};
    let table = ctx
        .query_gid_table()
        .map_err(|e| connection(format!("GID table: {e}")))?;
    Ok(table
        .iter()
        .map(|e| GidCandidate {
            index: e.gid_index(),
            port: e.port_num(),
            kind: match e.gid_type() {
                GidType::InfiniBand => GidKind::InfiniBand,
                GidType::RoceV1 => GidKind::RoceV1,
                GidType::RoceV2 => GidKind::RoceV2,
            },
            gid: Ipv6Addr::from(e.gid()).octets(),
        })
        .collect())
}

/// The GID (index, GID) a queue pair whose bootstrap connection goes out from `local` uses
/// ([`crate::gid::choose`]; `wanted`, from `ROLEX_GID_INDEX`, overrides).
fn gid_for(
    table: &[crate::gid::GidCandidate],
    wanted: Option<u32>,
    local: std::net::IpAddr,
) -> Result<(u8, Gid), TransportError> {
    let entry =
        crate::gid::choose(table, u32::from(PORT), Some(local), wanted).map_err(connection)?;
    let index = u8::try_from(entry.index).map_err(|_| connection("GID index beyond 255"))?;
    Ok((index, Gid::from(Ipv6Addr::from(entry.gid))))
}

/// What one side of a queue pair tells the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QpInfo {
    qp_num: u32,
    lid: u16,
    gid: [u8; 16],
    psn: u32,
    /// The outstanding READs and atomics its device allows (`crate::device_limits`).
    rd_atomic: u8,
}

/// A registered region as compute nodes address it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RegionInfo {
    id: u16,
    rkey: u32,
    addr: u64,
    len: u64,
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(bytes);
}

fn take<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], TransportError> {
    if input.len() < N {
        return Err(connection("truncated bootstrap message"));
    }
    let (head, rest) = input.split_at(N);
    *input = rest;
    head.try_into()
        .map_err(|_| connection("truncated bootstrap message"))
}

fn encode_qp(out: &mut Vec<u8>, qp: &QpInfo) {
    put(out, &qp.qp_num.to_le_bytes());
    put(out, &qp.lid.to_le_bytes());
    put(out, &qp.gid);
    put(out, &qp.psn.to_le_bytes());
    put(out, &[qp.rd_atomic]);
}

fn decode_qp(input: &mut &[u8]) -> Result<QpInfo, TransportError> {
    Ok(QpInfo {
        qp_num: u32::from_le_bytes(take(input)?),
        lid: u16::from_le_bytes(take(input)?),
        gid: take(input)?,
        psn: u32::from_le_bytes(take(input)?),
        rd_atomic: take::<1>(input)?[0],
    })
}

fn send_message(stream: &mut TcpStream, body: &[u8]) -> Result<(), TransportError> {
    let mut out = MAGIC.to_le_bytes().to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out).map_err(connection)
}

fn receive_message(stream: &mut TcpStream) -> Result<Vec<u8>, TransportError> {
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).map_err(connection)?;
    if u32::from_le_bytes([header[0], header[1], header[2], header[3]]) != MAGIC {
        return Err(connection(
            "the peer does not speak the ROLEX verbs bootstrap protocol",
        ));
    }
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > 1 << 20 {
        return Err(connection("bootstrap message too large"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(connection)?;
    Ok(body)
}

/// A device context with its protection domain.
struct Device {
    ctx: Arc<DeviceContext>,
    pd: Arc<ProtectionDomain>,
    lid: u16,
    gids: Vec<crate::gid::GidCandidate>,
    /// `ROLEX_GID_INDEX`, read when the device is opened.
    gid_wanted: Option<u32>,
    /// Outstanding READs and atomics per queue pair ([`crate::device_limits::check`]).
    rd_atomic: u8,
}

impl Device {
    fn open(name: Option<&str>) -> Result<Self, TransportError> {
        let ctx = open_device(name)?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| connection(format!("protection domain: {e}")))?;
        let lid = ctx
            .query_port(PORT)
            .map_err(|e| connection(format!("port {PORT}: {e}")))?
            .lid();
        let gids = gid_table(&ctx)?;
        let gid_wanted = std::env::var("ROLEX_GID_INDEX")
            .ok()
            .and_then(|v| v.parse::<u32>().ok());
        let attr = ctx
            .query_device()
            .map_err(|e| connection(format!("device attributes: {e}")))?;
        let limits = crate::device_limits::DeviceLimits {
            atomics: attr.atomic_capability() != AtomicCapability::None,
            max_qp_rd_atom: attr.max_qp_rd_atom(),
            max_qp_init_rd_atom: attr.max_qp_init_rd_atom(),
            max_qp_wr: attr.max_qp_wr(),
            max_cqe: attr.max_cqe(),
        };
        let rd_atomic = crate::device_limits::check(name.unwrap_or("(the first)"), &limits)
            .map_err(TransportError::NoDevice)?;
        Ok(Self {
            ctx,
            pd,
            lid,
            gids,
            gid_wanted,
            rd_atomic,
        })
    }

    /// A new RC queue pair and its completion queue, in the INIT state, with the GID for a
    /// bootstrap connection going out from `local` (its index is what [`Self::connect`] takes).
    fn queue_pair(
        &self,
        local: std::net::IpAddr,
    ) -> Result<(GenericQueuePair, GenericCompletionQueue, QpInfo, u8), TransportError> {
        let (gid_index, gid) = gid_for(&self.gids, self.gid_wanted, local)?;
        let mut cq = self.ctx.create_cq_builder();
        cq.setup_cqe(crate::device_limits::COMPLETION_QUEUE_ENTRIES);
        let cq = GenericCompletionQueue::from(
            cq.build_ex()
                .map_err(|e| connection(format!("completion queue: {e}")))?,
        );
        let mut builder = self.pd.create_qp_builder();
        builder
            .setup_max_send_wr(crate::MAX_BATCH_VERBS as u32)
            .setup_max_send_sge(1)
            .setup_max_inline_data(0)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .setup_send_ops_flags(
                SendOperationFlags::Write
                    | SendOperationFlags::Read
                    | SendOperationFlags::AtomicCompareAndSwap
                    | SendOperationFlags::AtomicFetchAndAdd,
            );
        let mut qp: GenericQueuePair = builder
            .build_ex()
            .map_err(|e| connection(format!("queue pair: {e}")))?
            .into();
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(PORT)
            .setup_access_flags(
                AccessFlags::LocalWrite
                    | AccessFlags::RemoteWrite
                    | AccessFlags::RemoteRead
                    | AccessFlags::RemoteAtomic,
            );
        qp.modify(&attr)
            .map_err(|e| connection(format!("queue pair to INIT: {e}")))?;
        let info = QpInfo {
            qp_num: qp.qp_number(),
            lid: self.lid,
            gid: Ipv6Addr::from(gid).octets(),
            psn: rand_psn(),
            rd_atomic: self.rd_atomic,
        };
        Ok((qp, cq, info, gid_index))
    }

    /// Moves `qp` (whose GID is entry `gid_index`) to RTR and RTS towards `remote`.
    fn connect(
        &self,
        qp: &mut GenericQueuePair,
        local: &QpInfo,
        gid_index: u8,
        remote: &QpInfo,
    ) -> Result<(), TransportError> {
        // Neither side initiates more than the other can take.
        let depth = self.rd_atomic.min(remote.rd_atomic).max(1);
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(PATH_MTU)
            .setup_dest_qp_num(remote.qp_num)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(depth)
            .setup_min_rnr_timer(12);
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(PORT)
            .setup_service_level(0)
            .setup_grh_src_gid_index(gid_index)
            .setup_grh_dest_gid(&Gid::from(Ipv6Addr::from(remote.gid)))
            .setup_grh_hop_limit(64);
        attr.setup_address_vector(&ah);
        qp.modify(&attr)
            .map_err(|e| connection(format!("queue pair to RTR: {e}")))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(local.psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(depth);
        qp.modify(&attr)
            .map_err(|e| connection(format!("queue pair to RTS: {e}")))?;
        Ok(())
    }
}

fn rand_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos());
    nanos & 0x00ff_ffff
}

/// A memory region a [`VerbsServer`] exposes.
#[derive(Debug, Clone, Copy)]
pub struct ServedRegion {
    /// Memory-node id compute nodes address it by.
    pub id: u16,
    /// First byte.
    pub ptr: *mut u8,
    /// Length in bytes (a multiple of 8).
    pub len: u64,
}

/// A memory node's verbs server: registered regions and the TCP bootstrap listener.
pub struct VerbsServer {
    addr: SocketAddr,
    served: Arc<Served>,
    _regions: Vec<Arc<MemoryRegion>>,
    /// The regions' bytes, counted against the lock limit while registered.
    _pinned: Vec<crate::memlock::Pinned>,
}

impl std::fmt::Debug for VerbsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

struct Served {
    device: Device,
    regions: Vec<RegionInfo>,
    /// Queue pairs kept alive for their compute nodes, by connection id, each with its bootstrap
    /// stream to give the fence's notice on ([`crate::fence_notice`]).
    peers: Mutex<Peers<(GenericQueuePair, GenericCompletionQueue, TcpStream)>>,
}

impl VerbsServer {
    /// Registers `regions` on the RDMA device `device` (or the first one) and serves bootstrap
    /// requests on `listen` from a background thread.
    ///
    /// # Safety
    /// Every region must stay mapped and valid for as long as the process runs: compute nodes
    /// read, write and atomically modify it through the NIC at any time, bypassing Rust.
    pub unsafe fn start(
        listen: impl ToSocketAddrs,
        device: Option<&str>,
        regions: &[ServedRegion],
    ) -> Result<Self, TransportError> {
        let device = Device::open(device)?;
        let access = AccessFlags::LocalWrite
            | AccessFlags::RemoteWrite
            | AccessFlags::RemoteRead
            | AccessFlags::RemoteAtomic;
        let mut registered = Vec::new();
        let mut pinned = Vec::new();
        let mut infos = Vec::new();
        for region in regions {
            // Checked before registering: past the lock limit the device says only ENOMEM.
            pinned.push(crate::memlock::pin(region.len)?);
            // SAFETY: the caller guarantees the region stays mapped and valid while the process
            // runs, which is what registration requires of it.
            let mr = unsafe {
                device
                    .pd
                    .reg_mr(region.ptr as usize, region.len as usize, access)
            }
            .map_err(|e| connection(format!("registering memory node {}: {e}", region.id)))?;
            infos.push(RegionInfo {
                id: region.id,
                rkey: mr.rkey(),
                addr: region.ptr as u64,
                len: region.len,
            });
            registered.push(mr);
        }
        let listener = TcpListener::bind(listen).map_err(connection)?;
        let addr = listener.local_addr().map_err(connection)?;
        let served = Arc::new(Served {
            device,
            regions: infos,
            peers: Mutex::new(Peers::new(Peers::<()>::fresh_nonce())),
        });
        let serving = Arc::clone(&served);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let served = Arc::clone(&serving);
                std::thread::spawn(move || {
                    if let Err(e) = serve_one(&served, stream) {
                        eprintln!("rolex verbs server: {e}");
                    }
                });
            }
        });
        Ok(Self {
            addr,
            served,
            _regions: registered,
            _pinned: pinned,
        })
    }

    /// The address compute nodes connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The fence of this server: moves one compute node's queue pair to the error state, by the
    /// queue-pair number its endpoint reports as [`Endpoint::connection_id`].
    pub fn fence(&self) -> VerbsFence {
        VerbsFence {
            served: Arc::clone(&self.served),
        }
    }

    /// Destroys the queue pairs of every compute node connected so far (they see their next
    /// batch fail: a compute node cut off). Returns how many. New compute nodes can still
    /// connect.
    pub fn disconnect_all(&self) -> usize {
        let mut peers = self.served.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.clear()
    }
}

/// Cuts compute nodes off a [`VerbsServer`] (see [`VerbsServer::fence`]).
pub struct VerbsFence {
    served: Arc<Served>,
}

impl std::fmt::Debug for VerbsFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsFence").finish_non_exhaustive()
    }
}

impl crate::Fence for VerbsFence {
    /// Moves the queue pair of connection `id` to the error state — the NIC drops every request
    /// arriving on it afterwards — and destroys it, then tells the compute node on its bootstrap
    /// stream (so it reaches the compute node as `Fenced`, docs/ARCHITECTURE.md §2). An unknown id
    /// was fenced (or closed) already: ids are never reused, so a stale one never reaches a
    /// newer connection.
    fn fence(&self, id: u64) -> Result<crate::Fenced, TransportError> {
        let taken = self
            .served
            .peers
            .lock()
            .map_err(|_| connection("server state poisoned"))?
            .remove(id);
        let Some((mut qp, cq, mut bootstrap)) = taken else {
            return Ok(crate::Fenced::Done);
        };
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Error);
        let moved = qp.modify(&attr);
        drop((qp, cq));
        // Destroyed whether or not the move went through: nothing arriving on it executes.
        crate::fence_notice::give(&mut bootstrap);
        moved.map_err(|e| connection(format!("moving connection {id} to error: {e}")))?;
        Ok(crate::Fenced::Done)
    }
}

/// Serves one compute endpoint's bootstrap: connects a queue pair for it, answers with its
/// connection id and the regions, then keeps the stream open for as long as the endpoint lives
/// and destroys the queue pair when it closes (see [`crate::peers`]).
fn serve_one(served: &Served, mut stream: TcpStream) -> Result<(), TransportError> {
    let request = receive_message(&mut stream)?;
    let mut input = request.as_slice();
    let remote = decode_qp(&mut input)?;
    let here = stream.local_addr().map_err(connection)?.ip();
    let (mut qp, cq, local, gid_index) = served.device.queue_pair(here)?;
    served.device.connect(&mut qp, &local, gid_index, &remote)?;
    let notice = stream.try_clone().map_err(connection)?;
    let id = served
        .peers
        .lock()
        .map_err(|_| connection("server state poisoned"))?
        .insert((qp, cq, notice));
    let mut reply = Vec::new();
    encode_qp(&mut reply, &local);
    put(&mut reply, &id.to_le_bytes());
    put(&mut reply, &(served.regions.len() as u32).to_le_bytes());
    for r in &served.regions {
        put(&mut reply, &r.id.to_le_bytes());
        put(&mut reply, &r.rkey.to_le_bytes());
        put(&mut reply, &r.addr.to_le_bytes());
        put(&mut reply, &r.len.to_le_bytes());
    }
    let sent = send_message(&mut stream, &reply);
    if sent.is_ok() {
        crate::peers::hold_until_closed(&mut stream);
    }
    // The endpoint is gone (or never got its answer): its queue pair goes with it.
    drop(
        served
            .peers
            .lock()
            .map_err(|_| connection("server state poisoned"))?
            .remove(id),
    );
    sent
}

/// A compute node's handle on the verbs servers of its memory nodes (one server per memory-node
/// process; each endpoint holds one RC queue pair to each).
pub struct VerbsTransport {
    device: Device,
    servers: Vec<SocketAddr>,
    nodes: Vec<MemoryNodeInfo>,
}

impl std::fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("servers", &self.servers)
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

impl VerbsTransport {
    /// Opens the RDMA device `device` (or the first one) — [`TransportError::NoDevice`] first,
    /// before any network traffic, if there is none — and connects to the server at `server`,
    /// learning its memory nodes through a first endpoint.
    pub fn connect(
        server: impl ToSocketAddrs,
        device: Option<&str>,
    ) -> Result<Self, TransportError> {
        Self::connect_all(&[server], device)
    }

    /// [`VerbsTransport::connect`] to several servers — the paper's deployment, one memory-node
    /// process each. Their memory-node ids must be distinct.
    pub fn connect_all<A: ToSocketAddrs>(
        servers: &[A],
        device: Option<&str>,
    ) -> Result<Self, TransportError> {
        let device = Device::open(device)?;
        let mut resolved = Vec::with_capacity(servers.len());
        for server in servers {
            resolved.push(
                server
                    .to_socket_addrs()
                    .map_err(connection)?
                    .next()
                    .ok_or_else(|| connection("a server address resolves to nothing"))?,
            );
        }
        if resolved.is_empty() {
            return Err(connection("no server to connect to"));
        }
        let mut transport = Self {
            device,
            servers: resolved,
            nodes: Vec::new(),
        };
        let first = transport.endpoint()?;
        let mut ids: Vec<u16> = first.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(connection("two servers serve the same memory-node id"));
        }
        transport.nodes = first.nodes.clone();
        Ok(transport)
    }

    /// One RC queue pair to the server at `server`, connected through its bootstrap.
    fn link_to(&self, server: SocketAddr) -> Result<Link, TransportError> {
        let mut stream = TcpStream::connect(server).map_err(connection)?;
        let here = stream.local_addr().map_err(connection)?.ip();
        let (mut qp, cq, local, gid_index) = self.device.queue_pair(here)?;
        let mut request = Vec::new();
        encode_qp(&mut request, &local);
        send_message(&mut stream, &request)?;
        let reply = receive_message(&mut stream)?;
        let mut input = reply.as_slice();
        let remote = decode_qp(&mut input)?;
        let connection_id = u64::from_le_bytes(take(&mut input)?);
        let count = u32::from_le_bytes(take(&mut input)?);
        let mut regions = Vec::new();
        for _ in 0..count {
            regions.push(RegionInfo {
                id: u16::from_le_bytes(take(&mut input)?),
                rkey: u32::from_le_bytes(take(&mut input)?),
                addr: u64::from_le_bytes(take(&mut input)?),
                len: u64::from_le_bytes(take(&mut input)?),
            });
        }
        self.device.connect(&mut qp, &local, gid_index, &remote)?;
        let pinned = crate::memlock::pin(STAGING_BYTES as u64)?;
        let mut staging = vec![0u8; STAGING_BYTES].into_boxed_slice();
        // SAFETY: `staging` is owned by the endpoint and outlives the registration (the endpoint
        // drops the memory region before the buffer: field order), and the NIC only touches it
        // while a batch of this endpoint is in flight, during which `batch` holds `&mut self`.
        let staging_mr = unsafe {
            self.device.pd.reg_mr(
                staging.as_mut_ptr() as usize,
                staging.len(),
                AccessFlags::LocalWrite,
            )
        }
        .map_err(|e| connection(format!("registering the staging buffer: {e}")))?;
        Ok(Link {
            qp,
            cq,
            staging_mr,
            staging,
            regions,
            next_wr: 0,
            staged: 0,
            wrs_out: 0,
            runs_out: 0,
            connection_id,
            notice: crate::fence_notice::Listener::new(stream),
            _pinned: pinned,
        })
    }
}

impl Transport for VerbsTransport {
    type Endpoint = VerbsEndpoint;

    fn endpoint(&self) -> Result<VerbsEndpoint, TransportError> {
        let links = self
            .servers
            .iter()
            .map(|&server| self.link_to(server))
            .collect::<Result<Vec<_>, _>>()?;
        let nodes = links
            .iter()
            .flat_map(|link| link.regions.iter())
            .map(|r| MemoryNodeInfo {
                id: r.id,
                region_len: r.len,
            })
            .collect();
        Ok(VerbsEndpoint {
            links,
            nodes,
            stats: Stats::default(),
            broken: None,
            flights: in_flight::Flights::default(),
        })
    }

    fn memory_nodes(&self) -> &[MemoryNodeInfo] {
        &self.nodes
    }
}

/// One thread's RC queue pairs, one to each server, each with its staging buffer.
pub struct VerbsEndpoint {
    links: Vec<Link>,
    nodes: Vec<MemoryNodeInfo>,
    stats: Stats,
    /// Why the endpoint stopped working: a batch timed out or completed with an error (the
    /// memory node may have fenced it). Its work requests may still be in flight and the NIC may
    /// still write into the staging buffer, so nothing is posted any more; every later call fails
    /// with [`TransportError::Broken`], or [`TransportError::Fenced`] once the memory node said
    /// so.
    broken: Option<crate::fence_notice::Stopped>,
    /// Batches posted and not yet taken back.
    flights: in_flight::Flights,
}

/// One RC queue pair to one server, with its registered staging buffer. Field order matters:
/// the queue pair goes first, then the registration, then the buffer.
struct Link {
    qp: GenericQueuePair,
    cq: GenericCompletionQueue,
    staging_mr: Arc<MemoryRegion>,
    staging: Box<[u8]>,
    regions: Vec<RegionInfo>,
    next_wr: u64,
    /// Staging bytes reserved by runs posted and not yet completed (from the buffer's start).
    staged: usize,
    /// Work requests posted and not yet completed.
    wrs_out: usize,
    /// Runs posted and not yet completed.
    runs_out: usize,
    /// The id the server gave this link's connection: what the memory node fences it by.
    connection_id: u64,
    /// The bootstrap stream, held open while the link lives (the server destroys its queue pair
    /// when it closes), on which the server says it fenced the connection.
    notice: crate::fence_notice::Listener,
    /// The staging buffer's bytes, counted against the lock limit while registered (dropped
    /// after the memory region: field order).
    _pinned: crate::memlock::Pinned,
}

impl Link {
    fn serves(&self, node: u16) -> bool {
        self.regions.iter().any(|r| r.id == node)
    }
}

impl std::fmt::Debug for VerbsEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsEndpoint")
            .field("nodes", &self.nodes)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Endpoint for VerbsEndpoint {
    fn batch(&mut self, verbs: &mut [Verb<'_>]) -> Result<(), TransportError> {
        // A post and a wait: ordered after every batch posted before it.
        let ticket = self.post_batch(verbs)?;
        self.wait(ticket).deliver(verbs)
    }

    fn post(&mut self, verbs: &[Verb<'_>]) -> Result<Ticket, TransportError> {
        self.post_batch(verbs)
    }

    fn poll(&mut self, ticket: Ticket) -> Result<Completion, Ticket> {
        ticket.poll_with(|id| self.take_completion(id))
    }

    fn abandon(&mut self, ticket: Ticket) {
        ticket.abandon_with(|id| self.abandon_batch(id));
    }

    fn in_flight(&self) -> usize {
        self.flights.len()
    }

    fn stats(&self) -> Stats {
        self.stats
    }

    fn packet_bytes(&self) -> usize {
        PATH_MTU_BYTES
    }

    fn connection_id(&self, node: u16) -> Option<u64> {
        self.links
            .iter()
            .find(|link| link.serves(node))
            .map(|link| link.connection_id)
    }
}
