//! The standard topology: four namespaces in a line.
//!
//! ```text
//!  host-west          gw-west                 gw-east          host-east
//!  lan0 ──────────── lan0   wan0 ─────────── wan0   lan0 ────────── lan0
//!  10.1.0.10/24  10.1.0.1/24 192.0.2.1/24  192.0.2.2/24 10.2.0.1/24  10.2.0.10/24
//!  fd00:1::10/64  fd00:1::1/64 fd00:ff::1/64 fd00:ff::2/64 fd00:2::1/64 fd00:2::10/64
//! ```
//!
//! The transit network is TEST-NET-1 (RFC 5737) and the LANs are ULAs
//! (RFC 4193) and RFC 1918 space: nothing here can leak anywhere real.
//! Hosts send everything to their gateway; gateways forward IPv4 and IPv6.
//! How the remote LAN is reached is the IPsec software's business (Esparto
//! routes it into its TUN device, strongSwan's kernel-libipsec into
//! `ipsec0` via table 220); [`Topology::route_lans_directly`] adds plain
//! routes across the transit instead, for tests and for the routed
//! ceiling (no IPsec at all).
//!
//! Offloads are left as the kernel sets them on veth (GRO off, GSO on).
//! [`Topology::set_offloads`] turns GRO (which makes veth use NAPI) and UDP
//! GRO forwarding on. Whether that changes the routed ceiling (plain
//! routing, no IPsec, host-west → host-east) was measured with
//! `testbed_baseline::routed_gro_comparison` (kernel 6.18, 2 shared cores,
//! load average ≈ 4.5, GRO off/on alternated twice):
//!
//! - TCP, one stream: 13.9 / 14.0 Gbit/s off, 13.9 / 13.9 on — no change.
//!   TCP crosses veth as TSO super-packets that are never segmented (veth
//!   passes GSO packets through and forwarding keeps them whole), so GRO
//!   finds nothing to coalesce.
//! - UDP, one flow of individual datagrams: GRO on was 10–20 % *slower*
//!   (64 B: 200k / 204k pps off, 163k / 180k on; 1400 B: 187k / 193k off,
//!   164k / 174k on). NAPI adds a ring and a poll per hop, and with one
//!   flow the sending CPU carries the whole path (veth delivers in the
//!   sender's softirq context) so coalescing saves it nothing.
//! - UDP, two flows: inconsistent between rounds (1400 B: 223k / 282k pps
//!   off, 366k / 136k on): noise of the shared machine dominates.
//!
//! So [`Topology::set_offloads`] stays off (the kernel default) for the
//! routed ceiling. Note that the routed UDP figures are bounded by the
//! generator, not the path: the probe at the maximum rate passed
//! everywhere because veth forwarding runs synchronously in the sender's
//! context and so clocks the sender itself.
//!
//! What `esparto-testbed bench tunnel` uses by default is different and narrower:
//! [`Topology::set_lan_gro`] makes the LAN links behave like multi-queue
//! NICs (a queue per CPU with XPS on every end, GRO and UDP GRO forwarding
//! on the gateways' LAN ends only), which is what lets a gateway read a
//! burst of small UDP packets as one super-packet (docs/BENCHMARKS.md,
//! "LAN links like multi-queue NICs").
//!
//! Each namespace is an `esparto_netns::Netns` named
//! `esp-<pid>-<n>-<role>`; dropping the topology deletes the four
//! namespaces, which takes the veth pairs and routes with them, and nothing
//! else.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context, Result};
use esparto_netns::Netns;
use serde::{Deserialize, Serialize};

use super::Family;

/// `RcvbufErrors` of UDP in namespace `ns` so far (`/proc/net/snmp` as a
/// thread in it sees it): datagrams a receiving socket there dropped
/// because its reader fell behind — lost by the receiver, not the path.
pub fn udp_rcvbuf_errors(ns: &Netns) -> Result<u64> {
    // /proc/thread-self/net is the reading thread's namespace.
    let text = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/snmp"))??;
    Ok(snmp_field(&text, "Udp:", "RcvbufErrors").unwrap_or(0))
}

/// `field` of the `prefix` lines of an SNMP table (`/proc/net/snmp`:
/// a line of names, then a line of values).
pub fn snmp_field(text: &str, prefix: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (names, values) = (lines.next()?, lines.next()?);
    names.split_whitespace().zip(values.split_whitespace()).find(|(n, _)| *n == field)?.1.parse().ok()
}

/// Interface towards the LAN, in every namespace that has one.
pub const LAN_IF: &str = "lan0";
/// Interface towards the transit network, on the gateways.
pub const WAN_IF: &str = "wan0";

/// West LAN, IPv4.
pub const WEST_LAN4: &str = "10.1.0.0/24";
/// West LAN, IPv6.
pub const WEST_LAN6: &str = "fd00:1::/64";
/// East LAN, IPv4.
pub const EAST_LAN4: &str = "10.2.0.0/24";
/// East LAN, IPv6.
pub const EAST_LAN6: &str = "fd00:2::/64";
/// Transit, IPv4 (RFC 5737 TEST-NET-1).
pub const TRANSIT4: &str = "192.0.2.0/24";
/// Transit, IPv6.
pub const TRANSIT6: &str = "fd00:ff::/64";

/// One of the four namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Node {
    /// The west host.
    HostWest,
    /// The west gateway.
    GwWest,
    /// The east gateway.
    GwEast,
    /// The east host.
    HostEast,
}

/// Where a node's address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// On its LAN side.
    Lan,
    /// On the transit (gateways only).
    Transit,
}

/// Offload switches applied to every veth end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offloads {
    /// `ethtool -K DEV gro on` (enables NAPI on veth).
    pub gro: bool,
    /// `ethtool -K DEV rx-udp-gro-forwarding on` (keep UDP GRO packets
    /// whole when forwarding; needs `gro`).
    pub udp_gro_forwarding: bool,
}

/// `ethtool -K DEV gro … rx-udp-gro-forwarding …` in one namespace.
fn gro(ns: &Netns, dev: &str, o: Offloads) -> Result<()> {
    let onoff = |b: bool| if b { "on" } else { "off" };
    ns.exec("ethtool", &["-K", dev, "gro", onoff(o.gro)])?;
    ns.exec("ethtool", &["-K", dev, "rx-udp-gro-forwarding", onoff(o.udp_gro_forwarding)])?;
    Ok(())
}

/// What [`Topology::set_lan_gro`] makes of the LAN links, for reports.
pub const LAN_AS_NICS: &str =
    "a queue per CPU with XPS, GRO and UDP GRO forwarding on the gateways' LAN ends";

/// A sysfs CPU mask (`xps_cpus`, `rps_cpus`) with one CPU set: 32-bit
/// hex words, most significant first, separated by commas.
fn cpumask(cpu: usize) -> String {
    let mut words = vec![0u32; cpu / 32 + 1];
    words[cpu / 32] = 1 << (cpu % 32);
    let mut out = format!("{:x}", words[words.len() - 1]);
    for w in words.iter().rev().skip(1) {
        out.push_str(&format!(",{w:08x}"));
    }
    out
}

/// The four namespaces and their links.
#[derive(Debug)]
pub struct Topology {
    // Field order is drop order: namespaces are deleted one by one.
    host_west: Netns,
    gw_west: Netns,
    gw_east: Netns,
    host_east: Netns,
}

impl Topology {
    /// Build the topology (about a second: ~40 `ip` commands).
    pub fn new() -> Result<Self> {
        let t = Self {
            host_west: Netns::new("host-west")?,
            gw_west: Netns::new("gw-west")?,
            gw_east: Netns::new("gw-east")?,
            host_east: Netns::new("host-east")?,
        };
        t.build().context("building the test-bed topology")?;
        Ok(t)
    }

    fn build(&self) -> Result<()> {
        for ns in self.all() {
            // No duplicate address detection: addresses are usable at once
            // (RFC 4862 §5.4 DAD would hold them "tentative" for a second).
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
        }
        self.host_west.veth(LAN_IF, &self.gw_west, LAN_IF)?;
        self.gw_west.veth(WAN_IF, &self.gw_east, WAN_IF)?;
        self.gw_east.veth(LAN_IF, &self.host_east, LAN_IF)?;
        let addrs: [(&Netns, &str, [&str; 2]); 6] = [
            (&self.host_west, LAN_IF, ["10.1.0.10/24", "fd00:1::10/64"]),
            (&self.gw_west, LAN_IF, ["10.1.0.1/24", "fd00:1::1/64"]),
            (&self.gw_west, WAN_IF, ["192.0.2.1/24", "fd00:ff::1/64"]),
            (&self.gw_east, WAN_IF, ["192.0.2.2/24", "fd00:ff::2/64"]),
            (&self.gw_east, LAN_IF, ["10.2.0.1/24", "fd00:2::1/64"]),
            (&self.host_east, LAN_IF, ["10.2.0.10/24", "fd00:2::10/64"]),
        ];
        for (ns, dev, cidrs) in addrs {
            for cidr in cidrs {
                ns.ip(&["addr", "add", cidr, "dev", dev, "nodad"])?;
            }
        }
        for (host, gw4, gw6) in [
            (&self.host_west, "10.1.0.1", "fd00:1::1"),
            (&self.host_east, "10.2.0.1", "fd00:2::1"),
        ] {
            host.route("default", Some(gw4), None)?;
            host.ip(&["-6", "route", "add", "default", "via", gw6])?;
        }
        for gw in [&self.gw_west, &self.gw_east] {
            gw.sysctl("net.ipv4.ip_forward", "1")?;
            gw.sysctl("net.ipv6.conf.all.forwarding", "1")?;
        }
        // The hosts segment UDP GSO sends themselves, before their veth: the
        // gateways receive one packet per datagram, as from a real host on
        // a wire (the UDP generator sends its bursts as GSO messages).
        for host in [&self.host_west, &self.host_east] {
            host.exec("ethtool", &["-K", LAN_IF, "tx-udp-segmentation", "off"])?;
        }
        Ok(())
    }

    fn all(&self) -> [&Netns; 4] {
        [
            &self.host_west,
            &self.gw_west,
            &self.gw_east,
            &self.host_east,
        ]
    }

    /// The namespace of a node.
    pub fn ns(&self, node: Node) -> &Netns {
        match node {
            Node::HostWest => &self.host_west,
            Node::GwWest => &self.gw_west,
            Node::GwEast => &self.gw_east,
            Node::HostEast => &self.host_east,
        }
    }

    /// The four namespace names, west to east.
    pub fn names(&self) -> [String; 4] {
        self.all().map(|n| n.name().to_string())
    }

    /// A node's address. Hosts only have a LAN address; asking for a host's
    /// transit address gives its LAN address.
    pub fn addr(node: Node, net: Net, family: Family) -> IpAddr {
        use Family::*;
        use Net::*;
        use Node::*;
        match (node, net, family) {
            (HostWest, _, V4) => Ipv4Addr::new(10, 1, 0, 10).into(),
            (HostWest, _, V6) => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10).into(),
            (GwWest, Lan, V4) => Ipv4Addr::new(10, 1, 0, 1).into(),
            (GwWest, Lan, V6) => Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 1).into(),
            (GwWest, Transit, V4) => Ipv4Addr::new(192, 0, 2, 1).into(),
            (GwWest, Transit, V6) => Ipv6Addr::new(0xfd00, 0xff, 0, 0, 0, 0, 0, 1).into(),
            (GwEast, Transit, V4) => Ipv4Addr::new(192, 0, 2, 2).into(),
            (GwEast, Transit, V6) => Ipv6Addr::new(0xfd00, 0xff, 0, 0, 0, 0, 0, 2).into(),
            (GwEast, Lan, V4) => Ipv4Addr::new(10, 2, 0, 1).into(),
            (GwEast, Lan, V6) => Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 1).into(),
            (HostEast, _, V4) => Ipv4Addr::new(10, 2, 0, 10).into(),
            (HostEast, _, V6) => Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x10).into(),
        }
    }

    /// Plain routes between the LANs across the transit, without IPsec
    /// (tests, and the routed ceiling). Undo with
    /// [`Topology::unroute_lans`] before an IPsec gateway takes over.
    pub fn route_lans_directly(&self) -> Result<()> {
        self.lan_routes("add")
    }

    /// Remove the routes of [`Topology::route_lans_directly`].
    pub fn unroute_lans(&self) -> Result<()> {
        self.lan_routes("del")
    }

    fn lan_routes(&self, op: &str) -> Result<()> {
        for (gw, lan4, lan6, via4, via6) in [
            (
                &self.gw_west,
                EAST_LAN4,
                EAST_LAN6,
                "192.0.2.2",
                "fd00:ff::2",
            ),
            (
                &self.gw_east,
                WEST_LAN4,
                WEST_LAN6,
                "192.0.2.1",
                "fd00:ff::1",
            ),
        ] {
            gw.ip(&["route", op, lan4, "via", via4])?;
            gw.ip(&["-6", "route", op, lan6, "via", via6])?;
        }
        Ok(())
    }

    /// Apply offload settings to all six veth ends.
    pub fn set_offloads(&self, o: Offloads) -> Result<()> {
        let ends: [(&Netns, &str); 6] = [
            (&self.host_west, LAN_IF),
            (&self.gw_west, LAN_IF),
            (&self.gw_west, WAN_IF),
            (&self.gw_east, WAN_IF),
            (&self.gw_east, LAN_IF),
            (&self.host_east, LAN_IF),
        ];
        for (ns, dev) in ends {
            gro(ns, dev, o)?;
        }
        Ok(())
    }

    /// GRO and `rx-udp-gro-forwarding` on the gateways' LAN ends (the
    /// ends that receive from the hosts), and every LAN end set up as a
    /// multi-queue NIC's driver sets itself up: one queue per CPU, each
    /// CPU transmitting on its own queue (XPS). A burst of one flow's
    /// packets that arrives in one NAPI poll is forwarded as one GSO
    /// packet, which a TUN with USO hands over in one read.
    ///
    /// On a veth, GRO on switches the receiving end to NAPI, whose ring is
    /// 256 packets per queue and cannot be resized, and the queue a packet
    /// lands in is the queue it was sent on. Without XPS that queue is the
    /// flow's hash, so two CPUs feed one ring and its poll runs on only one
    /// of them: while that CPU is busy, the other fills the ring and
    /// packets are dropped before any gateway sees them (the "erratic"
    /// rows of docs/BENCHMARKS.md). With XPS each ring is filled and
    /// polled by one CPU, in the softirq that follows the send — as
    /// virtio-net, mlx5 and most multi-queue drivers configure XPS by
    /// default.
    pub fn set_lan_gro(&self, on: bool) -> Result<()> {
        let cpus = if on { esparto_io::cpu::allowed_cpus().context("reading the CPUs this process may use")? } else { Vec::new() };
        let queues = cpus.len().max(1).to_string();
        for ns in self.all() {
            ns.exec("ethtool", &["-L", LAN_IF, "rx", &queues, "tx", &queues])?;
            for (q, &cpu) in cpus.iter().enumerate() {
                let path = format!("/sys/class/net/{LAN_IF}/queues/tx-{q}/xps_cpus");
                // `ip netns exec` mounts the namespace's own sysfs; the
                // value and path are passed as arguments, not spliced in.
                ns.exec("sh", &["-c", "printf '%s' \"$1\" > \"$2\"", "sh", &cpumask(cpu), &path])
                    .with_context(|| format!("{}: setting {path}", ns.name()))?;
            }
        }
        for gw in [&self.gw_west, &self.gw_east] {
            gro(gw, LAN_IF, Offloads { gro: on, udp_gro_forwarding: on })?;
        }
        Ok(())
    }

    /// The offload state of one veth end as `ethtool -k` reports it
    /// (`generic-receive-offload`, `rx-udp-gro-forwarding`, GSO lines).
    pub fn offload_report(&self, node: Node, dev: &str) -> Result<String> {
        let out = self.ns(node).exec("ethtool", &["-k", dev])?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                l.starts_with("generic-receive-offload")
                    || l.starts_with("generic-segmentation-offload")
                    || l.starts_with("rx-udp-gro-forwarding")
                    || l.starts_with("tx-udp-segmentation")
            })
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::snmp_field;

    #[test]
    fn snmp_fields() {
        let t = "Ip: Forwarding\nIp: 1\nUdp: InDatagrams NoPorts RcvbufErrors\nUdp: 10 2 7\n";
        assert_eq!(snmp_field(t, "Udp:", "RcvbufErrors"), Some(7));
        assert_eq!(snmp_field(t, "Udp:", "Nope"), None);
        assert_eq!(snmp_field(t, "Tcp:", "RcvbufErrors"), None);
    }


    use super::cpumask;

    #[test]
    fn cpumask_is_sysfs_format() {
        assert_eq!(cpumask(0), "1");
        assert_eq!(cpumask(1), "2");
        assert_eq!(cpumask(31), "80000000");
        assert_eq!(cpumask(32), "1,00000000");
        assert_eq!(cpumask(65), "2,00000000,00000000");
    }
}
