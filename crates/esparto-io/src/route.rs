//! Routes over rtnetlink: the primitives [`crate::routing`] builds Esparto's
//! own routing table with, and the dumps it and `check-config` compare the
//! host's tables with.
//!
//! Routes are set over rtnetlink ([`crate::netlink`]), never by running
//! `ip`. A [`Route`] is what Esparto adds: a prefix out of one device, in
//! one table, tagged with a protocol number of its own (`proto`), `scope
//! link` (IPv4; IPv6 routes have no scope), like `ip route replace PREFIX
//! dev DEV table T proto P` makes it. A [`RouteEntry`] is any route the
//! kernel lists, whoever made it, with what a message about it needs
//! (type, gateway, device, protocol).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::netlink::{Rtnetlink, errno};

/// Splits an inclusive address range into the fewest CIDR prefixes covering
/// exactly it (a selector need not be a prefix: `10.0.0.3-10.0.0.9`).
pub fn range_to_prefixes(start: IpAddr, end: IpAddr) -> Vec<(IpAddr, u8)> {
    let (width, s, e) = match (start, end) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (32u32, u128::from(u32::from(a)), u128::from(u32::from(b))),
        (IpAddr::V6(a), IpAddr::V6(b)) => (128u32, u128::from(a), u128::from(b)),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut cur = s;
    while cur <= e {
        // The largest aligned block starting at `cur` that stays within `e`.
        let mut host_bits = if cur == 0 {
            width
        } else {
            cur.trailing_zeros().min(width)
        };
        while host_bits > 0 {
            let last = if host_bits == 128 {
                u128::MAX
            } else {
                cur | ((1u128 << host_bits) - 1)
            };
            if last <= e {
                break;
            }
            host_bits -= 1;
        }
        let addr = if width == 32 {
            IpAddr::V4(std::net::Ipv4Addr::from(cur as u32))
        } else {
            IpAddr::V6(std::net::Ipv6Addr::from(cur))
        };
        out.push((addr, (width - host_bits) as u8));
        let size_minus_one = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        match cur.checked_add(size_minus_one).and_then(|l| l.checked_add(1)) {
            Some(next) => cur = next,
            None => break,
        }
    }
    out
}

/// Whether `addr` lies in the prefix `net/len` (of its family).
pub fn prefix_contains(net: IpAddr, len: u8, addr: IpAddr) -> bool {
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            masked(u128::from(u32::from(n)), len, 32) == masked(u128::from(u32::from(a)), len, 32)
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => masked(u128::from(n), len, 128) == masked(u128::from(a), len, 128),
        _ => false,
    }
}

/// Whether the prefix `inner` lies within the prefix `outer` (equal
/// prefixes do).
pub fn prefix_within(inner: (IpAddr, u8), outer: (IpAddr, u8)) -> bool {
    inner.1 >= outer.1 && prefix_contains(outer.0, outer.1, inner.0)
}

/// The first `len` bits of a `width`-bit address.
fn masked(v: u128, len: u8, width: u32) -> u128 {
    let len = u32::from(len).min(width);
    if len == 0 {
        return 0;
    }
    let shift = width - len;
    (v >> shift) << shift
}

/// The main routing table (`RT_TABLE_MAIN`).
pub const MAIN_TABLE: u32 = 254;
/// The local table (`RT_TABLE_LOCAL`): the host's own and broadcast
/// addresses.
pub const LOCAL_TABLE: u32 = 255;

/// Tables above this number do not fit the header's byte and travel only
/// in the `RTA_TABLE` attribute.
const MAX_HEADER_TABLE: u32 = 255;

/// One route as Esparto sets it: a prefix out of a device (no gateway), in
/// a table, tagged with a protocol number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// The prefix's first address (host bits zero).
    pub dst: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// The device's interface index.
    pub ifindex: u32,
    /// Routing table.
    pub table: u32,
    /// The protocol number it is tagged with (`proto`).
    pub protocol: u8,
}

impl Route {
    fn message(&self, delete: bool) -> RouteMessage {
        let mut m = RouteMessage::default();
        let v6 = self.dst.is_ipv6();
        m.header.address_family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        m.header.destination_prefix_length = self.prefix_len;
        m.header.table = if self.table <= MAX_HEADER_TABLE {
            self.table as u8
        } else {
            RouteHeader::RT_TABLE_UNSPEC
        };
        // A delete leaves type and (IPv4) scope unspecified, so that it
        // matches whatever became of the route; device, table and
        // protocol still must match.
        m.header.protocol = RouteProtocol::from(self.protocol);
        m.header.kind = if delete { RouteType::Unspec } else { RouteType::Unicast };
        m.header.scope = match (v6, delete) {
            (true, _) => RouteScope::Universe,
            (false, true) => RouteScope::NoWhere,
            (false, false) => RouteScope::Link,
        };
        if self.prefix_len > 0 {
            m.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(self.dst)));
        }
        m.attributes.push(RouteAttribute::Oif(self.ifindex));
        m.attributes.push(RouteAttribute::Table(self.table));
        m
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} dev #{} table {} proto {}",
            self.dst, self.prefix_len, self.ifindex, self.table, self.protocol
        )
    }
}

/// What kind of route a [`RouteEntry`] is (`ip route`'s first word when it
/// is not a plain unicast route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// Forward (through a device, or a gateway).
    Unicast,
    /// Drop silently.
    Blackhole,
    /// Drop with "host unreachable".
    Unreachable,
    /// Drop with "administratively prohibited".
    Prohibit,
    /// Go on with the next rule.
    Throw,
    /// One of the host's addresses (table local).
    Local,
    /// A broadcast address (table local).
    Broadcast,
    /// Multicast.
    Multicast,
    /// Anything else (the kernel's number).
    Other(u8),
}

impl RouteKind {
    fn of(t: RouteType) -> Self {
        match t {
            RouteType::Unicast => Self::Unicast,
            RouteType::BlackHole => Self::Blackhole,
            RouteType::Unreachable => Self::Unreachable,
            RouteType::Prohibit => Self::Prohibit,
            RouteType::Throw => Self::Throw,
            RouteType::Local => Self::Local,
            RouteType::Broadcast => Self::Broadcast,
            RouteType::Multicast => Self::Multicast,
            other => Self::Other(u8::from(other)),
        }
    }

    /// The word `ip route` puts before the prefix (none for unicast).
    fn word(self) -> Option<String> {
        match self {
            Self::Unicast => None,
            Self::Blackhole => Some("blackhole".into()),
            Self::Unreachable => Some("unreachable".into()),
            Self::Prohibit => Some("prohibit".into()),
            Self::Throw => Some("throw".into()),
            Self::Local => Some("local".into()),
            Self::Broadcast => Some("broadcast".into()),
            Self::Multicast => Some("multicast".into()),
            Self::Other(n) => Some(format!("type {n}")),
        }
    }
}

/// A route as the kernel lists it, whoever set it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteEntry {
    /// The prefix's first address.
    pub dst: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// Its table.
    pub table: u32,
    /// Who set it (`proto`: 2 kernel, 3 boot, 4 static, …).
    pub protocol: u8,
    /// Its type.
    pub kind: RouteKind,
    /// The output device, if it names one (a multipath route does not).
    pub oif: Option<u32>,
    /// The gateway, if any.
    pub gateway: Option<IpAddr>,
    /// Several next hops.
    pub multipath: bool,
    /// Its metric (`RTA_PRIORITY`), if set.
    pub metric: Option<u32>,
}

impl RouteEntry {
    fn parse(m: &RouteMessage) -> Option<Self> {
        let zero = match m.header.address_family {
            AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        let mut e = RouteEntry {
            dst: zero,
            prefix_len: m.header.destination_prefix_length,
            table: u32::from(m.header.table),
            protocol: u8::from(m.header.protocol),
            kind: RouteKind::of(m.header.kind),
            oif: None,
            gateway: None,
            multipath: false,
            metric: None,
        };
        for a in &m.attributes {
            match a {
                RouteAttribute::Table(t) => e.table = *t,
                RouteAttribute::Destination(RouteAddress::Inet(a)) => e.dst = IpAddr::V4(*a),
                RouteAttribute::Destination(RouteAddress::Inet6(a)) => e.dst = IpAddr::V6(*a),
                RouteAttribute::Oif(i) => e.oif = Some(*i),
                RouteAttribute::Gateway(RouteAddress::Inet(a)) => e.gateway = Some(IpAddr::V4(*a)),
                RouteAttribute::Gateway(RouteAddress::Inet6(a)) => e.gateway = Some(IpAddr::V6(*a)),
                RouteAttribute::MultiPath(_) => e.multipath = true,
                RouteAttribute::Priority(p) => e.metric = Some(*p),
                _ => {}
            }
        }
        Some(e)
    }

    /// As `ip route` shows it, with device names from `names`:
    /// `10.2.0.0/24 via 192.0.2.9 dev eth1 proto static`.
    pub fn describe(&self, names: &HashMap<u32, String>) -> String {
        let mut s = String::new();
        if let Some(w) = self.kind.word() {
            s.push_str(&w);
            s.push(' ');
        }
        if self.prefix_len == 0 {
            s.push_str("default");
        } else {
            s.push_str(&format!("{}/{}", self.dst, self.prefix_len));
        }
        if let Some(g) = self.gateway {
            s.push_str(&format!(" via {g}"));
        }
        if self.multipath {
            s.push_str(" (multipath)");
        }
        if let Some(i) = self.oif {
            match names.get(&i) {
                Some(n) => s.push_str(&format!(" dev {n}")),
                None => s.push_str(&format!(" dev #{i}")),
            }
        }
        if self.table != MAIN_TABLE {
            s.push_str(&format!(" table {}", crate::rule::table_name(self.table)));
        }
        let proto = match self.protocol {
            2 => "kernel".to_string(),
            3 => "boot".to_string(),
            4 => "static".to_string(),
            16 => "dhcp".to_string(),
            9 => "ra".to_string(),
            p => p.to_string(),
        };
        s.push_str(&format!(" proto {proto}"));
        s
    }
}

impl Rtnetlink {
    /// Adds `route`, replacing any route for the same prefix in its table
    /// (`ip route replace`).
    pub fn replace_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(
            RouteNetlinkMessage::NewRoute(route.message(false)),
            NLM_F_CREATE | NLM_F_REPLACE,
        )
    }

    /// Deletes `route` (`ip route del`): `ESRCH` if there is no such route.
    pub fn delete_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(RouteNetlinkMessage::DelRoute(route.message(true)), 0)
    }

    /// Every route of every table, both families.
    pub fn route_entries(&mut self) -> io::Result<Vec<RouteEntry>> {
        let msgs = self.dump(RouteNetlinkMessage::GetRoute(RouteMessage::default()))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => RouteEntry::parse(r),
                _ => None,
            })
            .collect())
    }

    /// The routes of `table` on device `ifindex`, both families. The
    /// kernel filters the dump (`NETLINK_GET_STRICT_CHK`, Linux 4.20), so
    /// its cost is that of the table's own routes, not of every table's
    /// (the main table may hold a full Internet table); a kernel that
    /// cannot filter gets the whole dump, filtered here.
    pub fn routes_in(&mut self, table: u32, ifindex: u32) -> io::Result<Vec<RouteEntry>> {
        let mut out = Vec::new();
        let strict = self.set_strict(true).is_ok();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut m = RouteMessage::default();
            m.header.address_family = family;
            if strict {
                m.header.table = if table <= MAX_HEADER_TABLE { table as u8 } else { RouteHeader::RT_TABLE_UNSPEC };
                m.attributes.push(RouteAttribute::Table(table));
                m.attributes.push(RouteAttribute::Oif(ifindex));
            }
            let msgs = self.dump(RouteNetlinkMessage::GetRoute(m));
            let msgs = match msgs {
                Ok(m) => m,
                Err(e) => {
                    let _ = self.set_strict(false);
                    return Err(e);
                }
            };
            out.extend(msgs.iter().filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => RouteEntry::parse(r),
                _ => None,
            }));
        }
        if strict {
            let _ = self.set_strict(false);
        }
        out.retain(|e| e.table == table && e.oif == Some(ifindex));
        Ok(out)
    }

    /// The route the kernel would give a packet from `src` (one of the
    /// host's addresses, or `None`: not chosen yet) to `dst` carrying
    /// firewall mark `mark`, through every policy rule (`ip route get DST
    /// from SRC mark M`); `Ok(None)` if it has none (unreachable).
    pub fn route_get(&mut self, dst: IpAddr, src: Option<IpAddr>, mark: u32) -> io::Result<Option<RouteEntry>> {
        Ok(self.get_route(dst, src, mark)?.as_ref().and_then(RouteEntry::parse))
    }

    /// The source address the kernel would pick for a packet to `dst`
    /// carrying mark `mark` (`ip route get DST mark M`: its `src`), or
    /// `None` without a route.
    pub fn source_towards(&mut self, dst: IpAddr, mark: u32) -> io::Result<Option<IpAddr>> {
        let Some(m) = self.get_route(dst, None, mark)? else {
            return Ok(None);
        };
        Ok(m.attributes.iter().find_map(|a| match a {
            RouteAttribute::PrefSource(RouteAddress::Inet(a)) => Some(IpAddr::V4(*a)),
            RouteAttribute::PrefSource(RouteAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
            _ => None,
        }))
    }

    /// The kernel's answer to `ip route get DST [from SRC] [mark M]`.
    fn get_route(&mut self, dst: IpAddr, src: Option<IpAddr>, mark: u32) -> io::Result<Option<RouteMessage>> {
        let mut m = RouteMessage::default();
        let full = if dst.is_ipv6() { 128 } else { 32 };
        m.header.address_family = if dst.is_ipv6() {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        m.header.destination_prefix_length = full;
        m.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst)));
        if let Some(src) = src.filter(|s| s.is_ipv6() == dst.is_ipv6() && !s.is_unspecified()) {
            m.header.source_prefix_length = full;
            m.attributes.push(RouteAttribute::Source(RouteAddress::from(src)));
        }
        if mark != 0 {
            m.attributes.push(RouteAttribute::Mark(mark));
        }
        match self.query(RouteNetlinkMessage::GetRoute(m)) {
            Ok(msgs) => Ok(msgs.into_iter().find_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Some(r),
                _ => None,
            })),
            Err(e) if matches!(errno(&e), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What was being done to which route when the kernel said no.
#[derive(Debug)]
pub struct RouteError {
    /// `"add"` or `"delete"`.
    pub op: &'static str,
    /// The prefix.
    pub dst: IpAddr,
    /// Its length.
    pub prefix_len: u8,
    /// The device's name.
    pub dev: String,
    /// The table.
    pub table: u32,
    /// The kernel's answer (errno, and its message if it gave one).
    pub source: io::Error,
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} route {}/{} dev {} table {}: {}",
            self.op, self.dst, self.prefix_len, self.dev, self.table, self.source
        )
    }
}

impl RouteError {
    /// The kernel's errno.
    pub fn errno(&self) -> Option<i32> {
        errno(&self.source)
    }
}

impl std::error::Error for RouteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether a delete failed only because the route or rule (or its
/// device) is gone.
pub(crate) fn already_gone(e: &io::Error) -> bool {
    matches!(errno(e), Some(libc::ESRCH | libc::ENOENT | libc::ENODEV))
}

#[cfg(test)]
mod tests {
    use super::*;
    use esparto_netns::{self as netns, Netns};

    fn p(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn prefixes_cover_ranges_exactly() {
        assert_eq!(
            range_to_prefixes(p("10.1.0.0"), p("10.1.255.255")),
            vec![(p("10.1.0.0"), 16)]
        );
        assert_eq!(
            range_to_prefixes(p("0.0.0.0"), p("255.255.255.255")),
            vec![(p("0.0.0.0"), 0)]
        );
        assert_eq!(
            range_to_prefixes(p("::"), p("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
            vec![(p("::"), 0)]
        );
        assert_eq!(
            range_to_prefixes(p("10.0.0.3"), p("10.0.0.9")),
            vec![(p("10.0.0.3"), 32), (p("10.0.0.4"), 30), (p("10.0.0.8"), 31)]
        );
        assert_eq!(
            range_to_prefixes(p("10.0.0.9"), p("10.0.0.9")),
            vec![(p("10.0.0.9"), 32)]
        );
        assert!(range_to_prefixes(p("10.0.0.9"), p("::1")).is_empty());
    }

    #[test]
    fn prefixes_contain_addresses_and_prefixes() {
        assert!(prefix_contains(p("10.1.0.0"), 16, p("10.1.255.3")));
        assert!(!prefix_contains(p("10.1.0.0"), 16, p("10.2.0.1")));
        assert!(prefix_contains(p("0.0.0.0"), 0, p("203.0.113.9")));
        assert!(prefix_contains(p("::"), 0, p("2001:db8::1")));
        assert!(!prefix_contains(p("::"), 0, p("10.0.0.1")), "families never mix");
        assert!(prefix_contains(p("fd00:1::"), 64, p("fd00:1::10")));
        assert!(
            prefix_contains(p("192.0.2.1"), 32, p("192.0.2.1")) && !prefix_contains(p("192.0.2.1"), 32, p("192.0.2.2"))
        );
        assert!(prefix_within((p("10.1.2.0"), 24), (p("10.1.0.0"), 16)));
        assert!(prefix_within((p("10.1.0.0"), 16), (p("10.1.0.0"), 16)));
        assert!(!prefix_within((p("10.1.0.0"), 16), (p("10.1.2.0"), 24)));
        assert!(prefix_within((p("fd00:1::"), 64), (p("::"), 0)));
    }

    /// Routes in `table` as `ip route show` prints them: an oracle
    /// independent of the netlink code under test.
    fn ip_routes(ns: &Netns, family: &str, table: &str) -> String {
        ns.ip(&[family, "route", "show", "table", table])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn routes_are_replaced_listed_got_and_deleted_over_netlink() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("route").unwrap();
        // veth pairs inside the namespace (the dummy driver may be absent).
        for (d, peer) in [("d0", "p0"), ("d1", "p1")] {
            ns.ip(&["link", "add", d, "type", "veth", "peer", "name", peer])
                .unwrap();
            ns.ip(&["link", "set", d, "up"]).unwrap();
            ns.ip(&["link", "set", peer, "up"]).unwrap();
        }
        ns.ip(&["addr", "add", "192.0.2.1/24", "dev", "d1"]).unwrap();
        ns.ip(&["route", "add", "blackhole", "10.66.0.0/16"]).unwrap();
        let (d0, names) = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                (nl.link_index("d0").unwrap(), nl.link_names().unwrap())
            })
            .unwrap();
        assert_eq!(names.get(&d0).map(String::as_str), Some("d0"));
        let r4 = Route {
            dst: p("10.9.0.0"),
            prefix_len: 24,
            ifindex: d0,
            table: 1000,
            protocol: 229,
        };
        let r6 = Route {
            dst: p("::"),
            prefix_len: 0,
            ifindex: d0,
            table: 1000,
            protocol: 229,
        };
        let entries = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                nl.replace_route(&r4).unwrap();
                nl.replace_route(&r6).unwrap();
                nl.replace_route(&r4).unwrap(); // again: a no-op replace
                nl.route_entries().unwrap()
            })
            .unwrap();
        let v4 = ip_routes(&ns, "-4", "1000");
        assert_eq!(v4.trim(), "10.9.0.0/24 dev d0 proto 229 scope link", "{v4}");
        assert!(ip_routes(&ns, "-6", "1000").contains("default dev d0 proto 229"));
        assert!(!ip_routes(&ns, "-4", "main").contains("10.9.0.0"));
        let ours: Vec<&RouteEntry> = entries.iter().filter(|e| e.table == 1000).collect();
        assert_eq!(ours.len(), 2, "{ours:?}");
        // The same two, and only they, from a dump of that table and device
        // (another device's route in it is left out).
        ns.ip(&["route", "add", "10.8.0.0/24", "dev", "d1", "table", "1000"]).unwrap();
        let filtered = ns.run(|| Rtnetlink::open().unwrap().routes_in(1000, d0).unwrap()).unwrap();
        let mut got: Vec<(IpAddr, u8)> = filtered.iter().map(|e| (e.dst, e.prefix_len)).collect();
        got.sort();
        assert_eq!(got, [(p("10.9.0.0"), 24), (p("::"), 0)], "{filtered:?}");
        ns.ip(&["route", "del", "10.8.0.0/24", "dev", "d1", "table", "1000"]).unwrap();
        assert!(
            ours.iter()
                .all(|e| e.protocol == 229 && e.oif == Some(d0) && e.kind == RouteKind::Unicast)
        );
        let bh = entries
            .iter()
            .find(|e| e.prefix_len == 16 && e.table == MAIN_TABLE)
            .unwrap();
        assert_eq!(bh.kind, RouteKind::Blackhole);
        assert_eq!(bh.describe(&names), "blackhole 10.66.0.0/16 proto boot");
        let link = entries
            .iter()
            .find(|e| e.dst == p("192.0.2.0") && e.table == MAIN_TABLE)
            .unwrap();
        assert_eq!(link.describe(&names), "192.0.2.0/24 dev d1 proto kernel");

        // `ip route get`: the main table's answer, through the rules.
        let (via, none) = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                (
                    nl.route_get(p("192.0.2.7"), Some(p("192.0.2.1")), 0xdc).unwrap(),
                    nl.route_get(p("198.51.100.1"), None, 0).unwrap(),
                )
            })
            .unwrap();
        assert_eq!(
            via.and_then(|e| e.oif),
            names.iter().find(|(_, n)| *n == "d1").map(|(i, _)| *i)
        );
        assert!(none.is_none(), "no default route: unreachable");

        // Deleting: exactly ours; twice is "gone".
        let again = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                nl.delete_route(&r4).unwrap();
                nl.delete_route(&r6).unwrap();
                nl.delete_route(&r4).unwrap_err()
            })
            .unwrap();
        assert!(already_gone(&again), "{again}");
        assert_eq!(ip_routes(&ns, "-4", "1000").trim(), "");
        assert!(ip_routes(&ns, "-4", "main").contains("blackhole 10.66.0.0/16"));

        // Errors carry the errno: a device that is down takes no route.
        ns.ip(&["link", "add", "down0", "type", "veth", "peer", "name", "pdown0"])
            .unwrap();
        let e = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                let i = nl.link_index("down0").unwrap();
                nl.replace_route(&Route {
                    dst: p("10.7.0.0"),
                    prefix_len: 24,
                    ifindex: i,
                    table: 1000,
                    protocol: 229,
                })
                .unwrap_err()
            })
            .unwrap();
        assert_eq!(errno(&e), Some(libc::ENETDOWN), "{e}");
    }
}
