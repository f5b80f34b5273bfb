//! Routes into the TUN device: the remote side's selectors are routed to
//! `esparto0`, so the kernel hands their packets to the workers (strongSwan
//! uses table 220 for the same purpose).
//!
//! Routes are set over rtnetlink ([`crate::netlink`]), never by running
//! `ip`. A [`Route`] names its table, so the same calls can fill a table of
//! Esparto's own (behind a policy rule) as well as the main table they use
//! today. [`DeviceRoutes`] keeps the set of routes one device carries: it
//! replaces a route whenever it is asked to (so a route the kernel flushed,
//! for instance when the device went down, comes back the next time its
//! child is installed), and removes exactly those routes on stop. Routes
//! through a device also disappear with the device, so a daemon that dies
//! leaves none behind either.
//!
//! Routes are `proto static`, `scope link` (IPv4; IPv6 routes have no
//! scope), like `ip route replace PREFIX dev DEV` makes them.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType};
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
        let mut host_bits = if cur == 0 { width } else { cur.trailing_zeros().min(width) };
        while host_bits > 0 {
            let last = if host_bits == 128 { u128::MAX } else { cur | ((1u128 << host_bits) - 1) };
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
        let size_minus_one = if host_bits == 128 { u128::MAX } else { (1u128 << host_bits) - 1 };
        match cur.checked_add(size_minus_one).and_then(|l| l.checked_add(1)) {
            Some(next) => cur = next,
            None => break,
        }
    }
    out
}

/// The main routing table (`RT_TABLE_MAIN`).
pub const MAIN_TABLE: u32 = 254;

/// Tables above this number do not fit the header's byte and travel only
/// in the `RTA_TABLE` attribute.
const MAX_HEADER_TABLE: u32 = 255;

/// One route: a prefix out of a device (no gateway), in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    /// The prefix's first address (host bits zero).
    pub dst: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// The device's interface index.
    pub ifindex: u32,
    /// Routing table ([`MAIN_TABLE`], or one of Esparto's own).
    pub table: u32,
}

impl Route {
    fn message(&self, delete: bool) -> RouteMessage {
        let mut m = RouteMessage::default();
        let v6 = self.dst.is_ipv6();
        m.header.address_family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        m.header.destination_prefix_length = self.prefix_len;
        m.header.table = if self.table <= MAX_HEADER_TABLE { self.table as u8 } else { RouteHeader::RT_TABLE_UNSPEC };
        // A delete leaves protocol, type and (IPv4) scope unspecified, so it
        // matches the route whoever set it; the device and table still must.
        m.header.protocol = if delete { RouteProtocol::Unspec } else { RouteProtocol::Static };
        m.header.kind = if delete { RouteType::Unspec } else { RouteType::Unicast };
        m.header.scope = match (v6, delete) {
            (true, _) => RouteScope::Universe,
            (false, true) => RouteScope::NoWhere,
            (false, false) => RouteScope::Link,
        };
        if self.prefix_len > 0 {
            m.attributes.push(RouteAttribute::Destination(RouteAddress::from(self.dst)));
        }
        m.attributes.push(RouteAttribute::Oif(self.ifindex));
        m.attributes.push(RouteAttribute::Table(self.table));
        m
    }

    /// The route a dumped message describes, if it is a unicast route out
    /// of one device without a gateway.
    fn parse(m: &RouteMessage) -> Option<Self> {
        if m.header.kind != RouteType::Unicast {
            return None;
        }
        let mut table = u32::from(m.header.table);
        let (mut dst, mut ifindex) = (None, None);
        for a in &m.attributes {
            match a {
                RouteAttribute::Table(t) => table = *t,
                RouteAttribute::Destination(RouteAddress::Inet(a)) => dst = Some(IpAddr::V4(*a)),
                RouteAttribute::Destination(RouteAddress::Inet6(a)) => dst = Some(IpAddr::V6(*a)),
                RouteAttribute::Oif(i) => ifindex = Some(*i),
                RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_) | RouteAttribute::Via(_) => return None,
                _ => {}
            }
        }
        let dst = match (dst, m.header.address_family) {
            (Some(d), _) => d,
            (None, AddressFamily::Inet) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            (None, AddressFamily::Inet6) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            _ => return None,
        };
        Some(Self { dst, prefix_len: m.header.destination_prefix_length, ifindex: ifindex?, table })
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} dev #{} table {}", self.dst, self.prefix_len, self.ifindex, self.table)
    }
}

impl Rtnetlink {
    /// Adds `route`, replacing any route for the same prefix in its table
    /// (`ip route replace`).
    pub fn replace_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(RouteNetlinkMessage::NewRoute(route.message(false)), NLM_F_CREATE | NLM_F_REPLACE)
    }

    /// Deletes `route` (`ip route del`): `ESRCH` if there is no such route.
    pub fn delete_route(&mut self, route: &Route) -> io::Result<()> {
        self.request(RouteNetlinkMessage::DelRoute(route.message(true)), 0)
    }

    /// The unicast device routes (no gateway) of `table`, both families.
    pub fn routes(&mut self, table: u32) -> io::Result<Vec<Route>> {
        let msgs = self.dump(RouteNetlinkMessage::GetRoute(RouteMessage::default()))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) => Route::parse(r),
                _ => None,
            })
            .filter(|r| r.table == table)
            .collect())
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

/// Whether a delete failed only because the route (or its device) is gone.
fn already_gone(e: &io::Error) -> bool {
    matches!(errno(e), Some(libc::ESRCH | libc::ENOENT | libc::ENODEV))
}

/// The routes one device carries in one table, as this process set them.
pub struct DeviceRoutes {
    nl: Rtnetlink,
    dev: String,
    ifindex: u32,
    table: u32,
    installed: BTreeSet<(IpAddr, u8)>,
}

impl fmt::Debug for DeviceRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceRoutes")
            .field("dev", &self.dev)
            .field("table", &self.table)
            .field("installed", &self.installed.len())
            .finish()
    }
}

impl DeviceRoutes {
    /// Routes out of `dev` in `table`. Opens an rtnetlink socket in the
    /// calling thread's network namespace (the device's).
    pub fn new(dev: &str, table: u32) -> io::Result<Self> {
        let mut nl = Rtnetlink::open()?;
        let ifindex = nl.link_index(dev)?;
        Ok(Self { nl, dev: dev.to_string(), ifindex, table, installed: BTreeSet::new() })
    }

    /// The device's name.
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// The table.
    pub fn table(&self) -> u32 {
        self.table
    }

    /// The prefixes routed so far (and not removed).
    pub fn installed(&self) -> impl Iterator<Item = (IpAddr, u8)> + '_ {
        self.installed.iter().copied()
    }

    fn route(&self, dst: IpAddr, prefix_len: u8) -> Route {
        Route { dst, prefix_len, ifindex: self.ifindex, table: self.table }
    }

    fn error(&self, op: &'static str, dst: IpAddr, prefix_len: u8, source: io::Error) -> RouteError {
        RouteError { op, dst, prefix_len, dev: self.dev.clone(), table: self.table, source }
    }

    /// Routes `dst/prefix_len` into the device, replacing any route for
    /// the same prefix in the table (also one the kernel had flushed or
    /// another program had pointed elsewhere).
    pub fn add(&mut self, dst: IpAddr, prefix_len: u8) -> Result<(), RouteError> {
        let r = self.route(dst, prefix_len);
        self.nl.replace_route(&r).map_err(|e| self.error("add", dst, prefix_len, e))?;
        self.installed.insert((dst, prefix_len));
        Ok(())
    }

    /// Removes the route for `dst/prefix_len` out of the device (a route
    /// that is already gone is not an error).
    pub fn remove(&mut self, dst: IpAddr, prefix_len: u8) -> Result<(), RouteError> {
        self.installed.remove(&(dst, prefix_len));
        let r = self.route(dst, prefix_len);
        match self.nl.delete_route(&r) {
            Ok(()) => Ok(()),
            Err(e) if already_gone(&e) => Ok(()),
            Err(e) => Err(self.error("delete", dst, prefix_len, e)),
        }
    }

    /// Removes every route added; returns the ones that could not be.
    pub fn remove_all(&mut self) -> Vec<RouteError> {
        let all: Vec<(IpAddr, u8)> = self.installed.iter().copied().collect();
        all.into_iter().filter_map(|(d, l)| self.remove(d, l).err()).collect()
    }
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
        assert_eq!(range_to_prefixes(p("10.1.0.0"), p("10.1.255.255")), vec![(p("10.1.0.0"), 16)]);
        assert_eq!(range_to_prefixes(p("0.0.0.0"), p("255.255.255.255")), vec![(p("0.0.0.0"), 0)]);
        assert_eq!(range_to_prefixes(p("::"), p("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")), vec![(p("::"), 0)]);
        assert_eq!(
            range_to_prefixes(p("10.0.0.3"), p("10.0.0.9")),
            vec![(p("10.0.0.3"), 32), (p("10.0.0.4"), 30), (p("10.0.0.8"), 31)]
        );
        assert_eq!(range_to_prefixes(p("10.0.0.9"), p("10.0.0.9")), vec![(p("10.0.0.9"), 32)]);
        assert!(range_to_prefixes(p("10.0.0.9"), p("::1")).is_empty());
    }

    /// Our own routes in `table` as `ip route show` prints them: an oracle
    /// independent of the netlink code under test.
    fn ip_routes(ns: &Netns, family: &str, table: &str) -> String {
        ns.ip(&[family, "route", "show", "table", table])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn routes_are_added_replaced_and_deleted_over_netlink() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("route").unwrap();
        // veth pairs inside the namespace (the dummy driver may be absent).
        for (d, peer) in [("d0", "p0"), ("d1", "p1")] {
            ns.ip(&["link", "add", d, "type", "veth", "peer", "name", peer]).unwrap();
            ns.ip(&["link", "set", d, "up"]).unwrap();
            ns.ip(&["link", "set", peer, "up"]).unwrap();
        }
        ns.ip(&["link", "add", "down0", "type", "veth", "peer", "name", "pdown0"]).unwrap();

        // Another program routed 10.9.0.0/24 out of d1; ours replaces it.
        ns.ip(&["route", "add", "10.9.0.0/24", "dev", "d1"]).unwrap();
        let mut routes = ns.run(|| DeviceRoutes::new("d0", MAIN_TABLE)).unwrap().unwrap();
        let d0 = ns.run(|| Rtnetlink::open().unwrap().link_index("d0").unwrap()).unwrap();
        ns.run(|| {
            routes.add(p("10.9.0.0"), 24).unwrap();
            routes.add(p("fd00:9::"), 64).unwrap();
            routes.add(p("10.9.0.0"), 24).unwrap(); // again: a no-op replace
        })
        .unwrap();
        let v4 = ip_routes(&ns, "-4", "main");
        assert!(v4.contains("10.9.0.0/24 dev d0 proto static scope link"), "{v4}");
        assert!(!v4.contains("dev d1"), "{v4}");
        assert!(ip_routes(&ns, "-6", "main").contains("fd00:9::/64 dev d0 proto static"));
        let listed = ns.run(|| Rtnetlink::open().unwrap().routes(MAIN_TABLE).unwrap()).unwrap();
        for (dst, len) in [(p("10.9.0.0"), 24), (p("fd00:9::"), 64)] {
            let want = Route { dst, prefix_len: len, ifindex: d0, table: MAIN_TABLE };
            assert!(listed.contains(&want), "{want} not in {listed:?}");
        }
        assert_eq!(routes.installed().count(), 2);

        // A table of our own, numbered beyond the header's byte.
        let mut own = ns.run(|| DeviceRoutes::new("d0", 1000)).unwrap().unwrap();
        ns.run(|| own.add(p("10.8.0.0"), 16).unwrap()).unwrap();
        assert!(ip_routes(&ns, "-4", "1000").contains("10.8.0.0/16 dev d0"));
        assert!(!ip_routes(&ns, "-4", "main").contains("10.8.0.0/16"));

        // Removing deletes exactly ours; removing twice is not an error.
        let left = ns.run(|| routes.remove_all()).unwrap();
        assert!(left.is_empty(), "{left:?}");
        assert!(!ip_routes(&ns, "-4", "main").contains("10.9.0.0"));
        assert!(!ip_routes(&ns, "-6", "main").contains("fd00:9::"));
        assert!(ip_routes(&ns, "-4", "1000").contains("10.8.0.0/16 dev d0"));
        ns.run(|| routes.remove(p("10.9.0.0"), 24).unwrap()).unwrap();
        ns.run(|| assert!(own.remove_all().is_empty())).unwrap();
        assert!(!ip_routes(&ns, "-4", "1000").contains("10.8.0.0"));

        // Errors name the prefix, the device and the errno.
        let mut down = ns.run(|| DeviceRoutes::new("down0", MAIN_TABLE)).unwrap().unwrap();
        let e = ns.run(|| down.add(p("10.7.0.0"), 24).unwrap_err()).unwrap();
        assert_eq!(e.errno(), Some(libc::ENETDOWN), "{e}");
        let text = e.to_string();
        for part in ["add route 10.7.0.0/24", "dev down0", "table 254", "os error"] {
            assert!(text.contains(part), "{text}");
        }
        assert_eq!(down.installed().count(), 0, "a failed add is not recorded");
        let e = ns.run(|| routes.add(p("10.9.0.1"), 24).unwrap_err()).unwrap();
        assert_eq!(e.errno(), Some(libc::EINVAL), "host bits set: {e}");
        let missing = ns.run(|| DeviceRoutes::new("nosuch0", MAIN_TABLE).unwrap_err()).unwrap();
        assert!(missing.to_string().contains("nosuch0"), "{missing}");
    }
}
