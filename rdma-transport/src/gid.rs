//! Which GID a queue pair uses: on RoCE a GID is an IP address of one of the port's network
//! devices, and both ends of a connection must use the same RoCE version and addresses that
//! reach each other. Each side chooses from its own table, given the address its bootstrap TCP
//! connection goes out from (the route the operator already set up) and the port in use:
//!
//! 1. `ROLEX_GID_INDEX` (an operator's override), if it names an entry of the port;
//! 2. the entry of the port whose GID is the bootstrap connection's local address, RoCE v2
//!    first (both sides pick v2 when both have it);
//! 3. else a RoCE v2 entry of the port that is not link-local;
//! 4. else the port's first entry (InfiniBand: GID 0, the port's own).
//!
//! Entries of other ports are never taken (the queue pair is bound to its port).

use std::net::IpAddr;

/// A GID's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// InfiniBand.
    InfiniBand,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
}

/// One entry of a device's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidCandidate {
    /// Its index in the port's table.
    pub index: u32,
    /// The port it belongs to.
    pub port: u32,
    /// Its type.
    pub kind: GidKind,
    /// The GID (an IPv6 address; IPv4 as `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
}

/// The GID bytes of address `ip`.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn link_local(gid: &[u8; 16]) -> bool {
    gid[0] == 0xfe && gid[1] & 0xc0 == 0x80
}

/// The entry a queue pair on `port` uses (see the module's rules), given the bootstrap
/// connection's local address `local` and the override `wanted`; why none, if none.
pub fn choose(
    table: &[GidCandidate],
    port: u32,
    local: Option<IpAddr>,
    wanted: Option<u32>,
) -> Result<GidCandidate, String> {
    let on_port = || table.iter().filter(|e| e.port == port);
    if let Some(index) = wanted {
        return on_port()
            .find(|e| e.index == index)
            .copied()
            .ok_or_else(|| format!("ROLEX_GID_INDEX={index} names no GID of port {port}"));
    }
    let v2_first = |a: &&GidCandidate| a.kind != GidKind::RoceV2;
    if let Some(ip) = local {
        let own = gid_of(ip);
        let mut same: Vec<&GidCandidate> = on_port().filter(|e| e.gid == own).collect();
        same.sort_by_key(v2_first);
        if let Some(e) = same.first() {
            return Ok(**e);
        }
    }
    on_port()
        .find(|e| e.kind == GidKind::RoceV2 && !link_local(&e.gid))
        .or_else(|| on_port().next())
        .copied()
        .ok_or_else(|| format!("port {port} of the RDMA device has no GID (set ROLEX_GID_INDEX)"))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn entry(index: u32, port: u32, kind: GidKind, ip: IpAddr) -> GidCandidate {
        GidCandidate {
            index,
            port,
            kind,
            gid: gid_of(ip),
        }
    }

    /// A RoCE host's table: link-local v1 and v2, then two addresses in v1 and v2, and port 2's.
    fn roce() -> Vec<GidCandidate> {
        let ll: IpAddr = "fe80::1".parse().expect("ip");
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
        let b = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
        vec![
            entry(0, 1, GidKind::RoceV1, ll),
            entry(1, 1, GidKind::RoceV2, ll),
            entry(2, 1, GidKind::RoceV1, a),
            entry(3, 1, GidKind::RoceV2, a),
            entry(4, 1, GidKind::RoceV1, b),
            entry(5, 1, GidKind::RoceV2, b),
            entry(
                0,
                2,
                GidKind::RoceV2,
                IpAddr::V4(Ipv4Addr::new(172, 16, 0, 5)),
            ),
        ]
    }

    #[test]
    fn the_bootstrap_address_picks_its_own_gid_in_roce_v2() {
        let t = roce();
        let on = |ip: [u8; 4]| choose(&t, 1, Some(IpAddr::V4(Ipv4Addr::from(ip))), None);
        assert_eq!(on([192, 168, 1, 5]).expect("gid").index, 5);
        assert_eq!(on([10, 0, 0, 5]).expect("gid").index, 3);
        // Loopback (a local test) matches nothing: the first routable v2 entry.
        assert_eq!(on([127, 0, 0, 1]).expect("gid").index, 3);
        // Only v1 for that address: it is still the one that reaches the peer.
        let v1_only: Vec<GidCandidate> = t.iter().copied().filter(|e| e.index != 5).collect();
        let b = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
        assert_eq!(choose(&v1_only, 1, Some(b), None).expect("gid").index, 4);
    }

    #[test]
    fn another_port_s_entries_are_never_taken_and_the_override_is_checked() {
        let t = roce();
        let other = IpAddr::V4(Ipv4Addr::new(172, 16, 0, 5));
        assert_eq!(choose(&t, 1, Some(other), None).expect("gid").index, 3);
        assert_eq!(choose(&t, 2, Some(other), None).expect("gid").port, 2);
        assert_eq!(choose(&t, 1, None, Some(4)).expect("gid").index, 4);
        let e = choose(&t, 2, None, Some(4)).expect_err("no entry 4 on port 2");
        assert!(e.contains("ROLEX_GID_INDEX=4"), "{e}");
        assert!(choose(&t, 3, None, None).is_err());
    }

    #[test]
    fn infiniband_takes_the_port_s_first_gid() {
        let ib = [
            entry(
                0,
                1,
                GidKind::InfiniBand,
                IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4)),
            ),
            entry(
                1,
                1,
                GidKind::InfiniBand,
                IpAddr::V6(Ipv6Addr::new(0xfec0, 0, 0, 0, 1, 2, 3, 4)),
            ),
        ];
        let local = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(choose(&ib, 1, Some(local), None).expect("gid").index, 0);
    }
}
