//! Warnings about where the file's selectors send traffic, given the host's
//! routing (`esparto_io::routing` says what Esparto adds to it).
//!
//! The tunnel routes live in a table of Esparto's own, looked up only for
//! traffic from a local selector and only after the main table's routes
//! other than its default route. So a remote selector can be right and
//! still not do what its author expected:
//!
//! - it **covers a peer's address**: the daemon's own IKE and ESP to that
//!   peer still bypass the tunnel (their sockets carry the firewall mark),
//!   but any other traffic from the local selectors to that address now
//!   enters the tunnel. Intended for a full-tunnel site; a surprise
//!   otherwise. Not said of a selector that is exactly its own peer's
//!   address (host-to-host, `dynamic`), which means just that;
//! - it **covers a route of the main table** (one more specific than the
//!   selector, or as specific): that route comes first, and traffic to it
//!   keeps following it instead of the tunnel — the LAN's own routes stay
//!   local, which is what a full-tunnel site wants, but a static route to
//!   another site does too. Routes inside the same child's local selectors
//!   (the LAN itself) are not mentioned;
//! - it **lies inside a route of the main table** other than the default
//!   route: that route comes first for all of the selector, and the tunnel
//!   carries nothing of it;
//! - a **local selector covers the host's own address on the device of
//!   its default route** while the child's remote selectors cover every
//!   address of that family (a full tunnel): the host's own traffic from
//!   that address — its DNS, its updates, answers to a login over it from
//!   outside — then goes through the tunnel too, and the host is
//!   reachable at that address only from the other site and its own
//!   subnets;
//! - a selector **names a protocol or ports**: routes and rules select by
//!   address only, so all traffic between the addresses enters the TUN
//!   device, and what the selector does not cover is dropped there
//!   (`policy_mismatch`) instead of following the host's routes;
//! - the **routing table or rule priorities are in use** by someone else
//!   (`esparto run` would refuse to start).
//!
//! The first and the protocol/port one are facts of the file. The others
//! compare it with the routes
//! and rules of the machine the file is checked on ([`Host`], read by
//! `check-config` and `run`; nothing is compared when it could not be
//! read), so they mean something on the gateway itself. A main table
//! with very many routes (a full BGP table) gets at most
//! [`MAX_ROUTES_NAMED`] named per selector and a count of the rest; the
//! look-ups are by binary search and by prefix, so a large table costs
//! little.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use esparto_esp::Selector;
use esparto_io::route::{LOCAL_TABLE, MAIN_TABLE, RouteEntry, RouteKind, prefix_within, range_to_prefixes};
use esparto_io::routing::{Conflict, Prefix, RoutingConfig};
use esparto_io::rule::Rule;

use super::check::ChildSeen;
use super::error::KeyPath;
use super::model::{Connection, Daemon};
use super::tree::{Cx, Node};

/// Routes of the main table named per selector; the rest are counted.
pub const MAX_ROUTES_NAMED: usize = 8;

/// The host's routing, as the warnings compare a file with it.
#[derive(Debug, Default, Clone)]
pub struct Host {
    /// Every route of every table, both families.
    pub routes: Vec<RouteEntry>,
    /// Every policy rule, both families.
    pub rules: Vec<Rule>,
    /// Device names by interface index, for messages.
    pub names: HashMap<u32, String>,
    /// Whether this was read from a host at all (`Host::default()`: no).
    pub read: bool,
    /// The CPUs this process may run on (empty: not known), for `[daemon]
    /// cpus`.
    pub cpus: Vec<usize>,
}

impl Host {
    /// The routes, rules and device names of the calling thread's network
    /// namespace (needs no privilege).
    pub fn read() -> std::io::Result<Self> {
        let mut nl = esparto_io::netlink::Rtnetlink::open()?;
        let mut rules = nl.rules(false)?;
        rules.extend(nl.rules(true)?);
        Ok(Self {
            routes: nl.route_entries()?,
            rules,
            names: nl.link_names()?,
            read: true,
            cpus: esparto_io::cpu::allowed_cpus().unwrap_or_default(),
        })
    }
}

/// A prefix as bits: (family is IPv6, first address, length).
type Key = (bool, u128, u8);

fn key(p: Prefix) -> Key {
    match p.0 {
        IpAddr::V4(a) => (false, u128::from(u32::from(a)), p.1),
        IpAddr::V6(a) => (true, u128::from(a), p.1),
    }
}

/// The first `len` bits of `v` (of a `width`-bit address).
fn mask(v: u128, len: u8, v6: bool) -> u128 {
    let width = if v6 { 128u32 } else { 32 };
    let len = u32::from(len).min(width);
    if len == 0 {
        return 0;
    }
    let shift = width - len;
    (v >> shift) << shift
}

/// The main table's routes that matter here, indexed both ways.
struct MainRoutes<'h> {
    /// Sorted by (family, first address, length).
    sorted: Vec<(Key, &'h RouteEntry)>,
    /// By exact prefix.
    by_prefix: HashMap<Key, &'h RouteEntry>,
}

impl<'h> MainRoutes<'h> {
    fn new(host: &'h Host) -> Self {
        let mut sorted: Vec<(Key, &RouteEntry)> = host
            .routes
            .iter()
            .filter(|e| e.table == MAIN_TABLE && e.prefix_len > 0 && !never_tunnelled(e))
            .map(|e| (key((e.dst, e.prefix_len)), e))
            .collect();
        sorted.sort_by_key(|(k, _)| *k);
        let by_prefix = sorted.iter().map(|(k, e)| (*k, *e)).collect();
        Self { sorted, by_prefix }
    }

    /// Routes inside `p` (as long as it or longer), in address order.
    fn within(&self, p: Prefix) -> impl Iterator<Item = &'h RouteEntry> + '_ {
        let (v6, start, len) = key(p);
        let host_bits = if v6 { 128 } else { 32 } - u32::from(len);
        let end = if host_bits >= 128 {
            u128::MAX
        } else {
            start | ((1u128 << host_bits) - 1)
        };
        let lo = self.sorted.partition_point(|(k, _)| (k.0, k.1) < (v6, start));
        self.sorted[lo..]
            .iter()
            .take_while(move |(k, _)| (k.0, k.1) <= (v6, end))
            .filter(move |(k, _)| k.2 >= len)
            .map(|(_, e)| *e)
    }

    /// Routes that contain `p` (as long as it or shorter, but not the
    /// default route), longest first.
    fn containing(&self, p: Prefix) -> impl Iterator<Item = &'h RouteEntry> + '_ {
        let (v6, start, len) = key(p);
        (1..=len)
            .rev()
            .filter_map(move |l| self.by_prefix.get(&(v6, mask(start, l, v6), l)).copied())
    }
}

/// Link-local and multicast destinations: never routed into a tunnel, and
/// on every interface, so never worth a warning.
fn never_tunnelled(e: &RouteEntry) -> bool {
    let link_local_or_multicast = match e.dst {
        IpAddr::V4(a) => a.is_multicast() || a.is_link_local(),
        IpAddr::V6(a) => a.is_multicast() || (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    link_local_or_multicast || matches!(e.kind, RouteKind::Local | RouteKind::Broadcast | RouteKind::Multicast)
}

fn prefixes(ts: &Selector) -> Vec<Prefix> {
    range_to_prefixes(ts.addrs.start(), ts.addrs.end())
}

fn show(p: Prefix) -> String {
    format!("{}/{}", p.0, p.1)
}

/// Adds every warning of this module to `cx`.
pub(crate) fn warn(
    cx: &mut Cx<'_>,
    root: &Node,
    seen: &[Arc<ChildSeen>],
    conns: &[Arc<Connection>],
    daemon: &Daemon,
    host: &Host,
) {
    peers_covered(cx, seen, conns, daemon);
    ports_not_routed(cx, seen);
    if host.read {
        main_routes_covered(cx, seen, host);
        own_addresses_tunnelled(cx, seen, host);
        routing_in_use(cx, root, daemon, host);
    }
}

/// Remote selectors that cover a peer's address. The peers' addresses
/// are sorted once, so each selector finds those it covers by binary
/// search (a hub has thousands of connections).
fn peers_covered(cx: &mut Cx<'_>, seen: &[Arc<ChildSeen>], conns: &[Arc<Connection>], daemon: &Daemon) {
    let mut first_peer: HashMap<&str, IpAddr> = HashMap::with_capacity(conns.len());
    first_peer.extend(conns.iter().filter_map(|k| Some((k.name.as_str(), *k.remote_addrs.first()?))));
    let mut peers: Vec<(IpAddr, &Connection)> =
        conns.iter().flat_map(|k| k.remote_addrs.iter().map(move |a| (*a, &**k))).collect();
    peers.sort_by_key(|(a, _)| *a);
    for c in seen {
        let own_peer = first_peer.get(c.connection.as_str()).copied();
        for r in &c.remote {
            // Exactly its own peer's address: host-to-host, meant so.
            if own_peer.is_some_and(|p| r.value.addrs.start() == p && r.value.addrs.end() == p) {
                continue;
            }
            let (lo, hi) = (r.value.addrs.start(), r.value.addrs.end());
            let from = peers.partition_point(|(a, _)| *a < lo);
            let to = peers.partition_point(|(a, _)| *a <= hi);
            for (peer, k) in &peers[from..to.max(from)] {
                let whose = if k.name == c.connection {
                    String::new()
                } else {
                    format!(" (connection {})", k.name)
                };
                cx.warn(
                    &r.span,
                    &r.path,
                    format!(
                        "{} covers peer {peer}{whose}: the daemon's own IKE and ESP to it bypass the tunnel (their sockets carry firewall mark {:#x}), but other traffic from local_ts to {peer} goes through the tunnel",
                        r.value, daemon.routing.mark
                    ),
                );
            }
        }
    }
}

/// Remote selectors that cover, or lie inside, routes of the main table.
fn main_routes_covered(cx: &mut Cx<'_>, seen: &[Arc<ChildSeen>], host: &Host) {
    let main = MainRoutes::new(host);
    if main.sorted.is_empty() {
        return;
    }
    for c in seen {
        let locals: Vec<Prefix> = c.local.iter().flat_map(|l| prefixes(&l.value)).collect();
        for r in &c.remote {
            let mut inside = Vec::new();
            let mut named = Vec::new();
            let mut more = 0usize;
            for p in prefixes(&r.value) {
                // The most specific route that contains this prefix wins
                // over the tunnel for all of it.
                if let Some(e) = main.containing(p).next() {
                    if !inside.contains(&e) {
                        inside.push(e);
                    }
                    continue;
                }
                for e in main.within(p) {
                    let rp = (e.dst, e.prefix_len);
                    if locals.iter().any(|l| prefix_within(rp, *l)) {
                        continue; // the child's own LAN: stays local, as it must
                    }
                    if named.len() < MAX_ROUTES_NAMED {
                        named.push(e);
                    } else {
                        more += 1;
                    }
                }
            }
            for e in inside {
                cx.warn(
                    &r.span,
                    &r.path,
                    format!(
                        "{} lies inside the main table's route '{}', which comes first: traffic from local_ts to {} follows that route and never enters the tunnel",
                        r.value,
                        e.describe(&host.names),
                        r.value
                    ),
                );
            }
            for e in named {
                cx.warn(
                    &r.span,
                    &r.path,
                    format!(
                        "{} covers the main table's route '{}': it comes first, so traffic from local_ts to {} keeps following it, not the tunnel",
                        r.value,
                        e.describe(&host.names),
                        show((e.dst, e.prefix_len))
                    ),
                );
            }
            if more > 0 {
                cx.warn(
                    &r.span,
                    &r.path,
                    format!(
                        "{} covers {more} more routes of the main table, which likewise come first",
                        r.value
                    ),
                );
            }
        }
    }
}

/// The routing table or rule priorities someone else uses: `run` refuses
/// to start (see `esparto_io::routing`).
fn routing_in_use(cx: &mut Cx<'_>, root: &Node, daemon: &Daemon, host: &Host) {
    let cfg: RoutingConfig = daemon.routing.into();
    let daemon_path = KeyPath::root().key("daemon");
    let section = root.field(&KeyPath::root(), "daemon");
    for c in &cfg.survey(&host.rules, &host.routes).conflicts {
        let key = match c {
            Conflict::Priority(_) => "routing_table_prio",
            Conflict::LooksUpTable(_) | Conflict::Route(_) => "routing_table",
        };
        let message = format!("esparto run would refuse to start: {}", c.describe(&cfg, &host.names));
        match section.as_ref().and_then(|d| d.node.field(&daemon_path, key)) {
            Some(f) => cx.warn(&f.node.span, &f.path, message),
            None => cx.warn_default(&format!("daemon.{key}"), message),
        }
    }
}

/// Selectors that name a protocol or ports: the routes and rules cannot.
fn ports_not_routed(cx: &mut Cx<'_>, seen: &[Arc<ChildSeen>]) {
    for c in seen {
        for (side, s) in c
            .local
            .iter()
            .map(|l| ("local", l))
            .chain(c.remote.iter().map(|r| ("remote", r)))
        {
            let t = &s.value;
            if t.proto == 0 && t.port_start == 0 && t.port_end == u16::MAX {
                continue;
            }
            let other = if side == "local" { "remote_ts" } else { "local_ts" };
            cx.warn(
                &s.span,
                &s.path,
                format!(
                    "{t} names a protocol or ports, but routes and policy rules select by address only: all traffic between {} and {other} enters the tunnel device, and what the selector does not cover is dropped there (policy_mismatch) instead of following the host's routes",
                    t.addrs
                ),
            );
        }
    }
}

/// An address as a number, for range arithmetic.
fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Whether the inclusive ranges together hold every address of one family.
fn cover_all(mut ranges: Vec<(u128, u128)>, v6: bool) -> bool {
    let last = if v6 { u128::MAX } else { u128::from(u32::MAX) };
    ranges.sort_unstable();
    // The first address not yet covered.
    let mut next = 0u128;
    for (start, end) in ranges {
        if start > next {
            return false;
        }
        if end >= last {
            return true;
        }
        next = next.max(end + 1);
    }
    false
}

/// This host's own addresses on the devices its main table's default
/// routes leave by (the addresses its traffic to the Internet comes from,
/// and that a login from outside reaches), with their device.
fn wan_addresses(host: &Host) -> Vec<(IpAddr, u32)> {
    let default_devs: Vec<(bool, u32)> = host
        .routes
        .iter()
        .filter(|e| e.table == MAIN_TABLE && e.prefix_len == 0 && e.kind == RouteKind::Unicast)
        .filter_map(|e| e.oif.map(|i| (e.dst.is_ipv6(), i)))
        .collect();
    let mut out: Vec<(IpAddr, u32)> = host
        .routes
        .iter()
        .filter(|e| e.table == LOCAL_TABLE && e.kind == RouteKind::Local)
        .filter(|e| e.prefix_len == if e.dst.is_ipv6() { 128 } else { 32 })
        .filter(|e| match e.dst {
            IpAddr::V4(a) => !(a.is_loopback() || a.is_link_local() || a.is_unspecified()),
            IpAddr::V6(a) => !(a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80),
        })
        .filter_map(|e| e.oif.map(|i| (e.dst, i)))
        .filter(|(a, i)| default_devs.contains(&(a.is_ipv6(), *i)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Local selectors of a full tunnel that cover the address the host's
/// default route leaves from: its own traffic goes through the tunnel.
fn own_addresses_tunnelled(cx: &mut Cx<'_>, seen: &[Arc<ChildSeen>], host: &Host) {
    let wan = wan_addresses(host);
    if wan.is_empty() {
        return;
    }
    for c in seen {
        for v6 in [false, true] {
            let remote: Vec<(u128, u128)> = c
                .remote
                .iter()
                .filter(|r| r.value.addrs.start().is_ipv6() == v6)
                .map(|r| (bits(r.value.addrs.start()), bits(r.value.addrs.end())))
                .collect();
            if !cover_all(remote, v6) {
                continue;
            }
            for l in c.local.iter().filter(|l| l.value.addrs.start().is_ipv6() == v6) {
                for (a, oif) in wan.iter().filter(|(a, _)| l.value.addrs.contains(*a)) {
                    let dev = host.names.get(oif).cloned().unwrap_or_else(|| format!("#{oif}"));
                    cx.warn(
                        &l.span,
                        &l.path,
                        format!(
                            "{} covers {a}, this host's address on {dev} where its default route leaves, and remote_ts covers every IPv{} address: the host's own traffic from {a} (its DNS and updates, answers to a login over {a} from outside) goes through the tunnel, except to the main table's routes other than the default route; only the daemon's IKE and ESP bypass it",
                            l.value,
                            if v6 { 6 } else { 4 }
                        ),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::{Routing, parse_str, parse_str_on};
    use esparto_io::routing::PROTOCOL;
    use esparto_io::rule::Action;

    /// A 36-byte key of its own for connection `i`, direction `dir`.
    fn k36(i: usize, dir: usize) -> String {
        format!("{:02x}", 2 * i + dir + 1).repeat(36)
    }

    /// One static connection per (name, peer, local, remote).
    fn file(daemon: &str, conns: &[(&str, &str, &str, &str)]) -> String {
        let mut t = format!("[daemon]\nworkers = 1\n{daemon}\n");
        for (i, (name, peer, local, remote)) in conns.iter().enumerate() {
            t.push_str(&format!(
                "\n[connections.{name}]\nlocal_addrs = [\"192.0.2.1\"]\nremote_addrs = [\"{peer}\"]\n\
                 \n[connections.{name}.children.lan]\nlocal_ts = [{local}]\nremote_ts = [{remote}]\nesp_proposals = [\"aes256gcm16\"]\n\
                 \n[[connections.{name}.children.lan.static_sas]]\nin_spi = {}\nout_spi = 0xc0000201\nin_key = \"{}\"\nout_key = \"{}\"\n",
                0xc000_0101u32 + i as u32,
                k36(i, 0),
                k36(i, 1),
            ));
        }
        t
    }

    fn route(dst: &str, table: u32, kind: RouteKind, oif: u32, gateway: Option<&str>) -> RouteEntry {
        let (a, l) = dst.split_once('/').unwrap();
        RouteEntry {
            dst: a.parse().unwrap(),
            prefix_len: l.parse().unwrap(),
            table,
            protocol: 2,
            kind,
            oif: (oif > 0).then_some(oif),
            gateway: gateway.map(|g| g.parse().unwrap()),
            multipath: false,
            metric: None,
        }
    }

    /// A gateway: LAN 10.1.0.0/24 on lan0, WAN 192.0.2.0/24 on wan0 with a
    /// default route, a static route to another site, a blackhole
    /// summary, link-local and multicast routes, and a route in some other
    /// table.
    fn host() -> Host {
        let u = RouteKind::Unicast;
        Host {
            routes: vec![
                route("0.0.0.0/0", MAIN_TABLE, u, 2, Some("192.0.2.254")),
                route("10.1.0.0/24", MAIN_TABLE, u, 1, None),
                route("192.0.2.0/24", MAIN_TABLE, u, 2, None),
                route("172.16.0.0/12", MAIN_TABLE, u, 1, Some("10.1.0.254")),
                route("10.2.0.0/16", MAIN_TABLE, RouteKind::Blackhole, 0, None),
                route("169.254.0.0/16", MAIN_TABLE, u, 1, None),
                route("224.0.0.0/4", MAIN_TABLE, u, 1, None),
                route("fe80::/64", MAIN_TABLE, u, 1, None),
                route("fd00:1::/64", MAIN_TABLE, u, 1, None),
                route("10.9.0.0/24", 100, u, 1, None),
                // The host's own addresses: on the LAN, on the WAN (where
                // the default route leaves), loopback.
                route("10.1.0.1/32", LOCAL_TABLE, RouteKind::Local, 1, None),
                route("192.0.2.1/32", LOCAL_TABLE, RouteKind::Local, 2, None),
                route("127.0.0.0/8", LOCAL_TABLE, RouteKind::Local, 3, None),
                route("127.0.0.1/32", LOCAL_TABLE, RouteKind::Local, 3, None),
            ],
            rules: Vec::new(),
            names: HashMap::from([(1, "lan0".to_string()), (2, "wan0".to_string()), (3, "lo".to_string())]),
            read: true,
            cpus: Vec::new(),
        }
    }

    fn messages(c: &crate::config::Config) -> Vec<String> {
        c.warnings.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_full_tunnel_is_told_what_stays_outside_it() {
        let text = file(
            "",
            &[(
                "site",
                "192.0.2.2",
                "\"10.1.0.0/24\", \"fd00:1::/64\"",
                "\"0.0.0.0/0\", \"::/0\"",
            )],
        );
        let c = parse_str_on(&text, "w.toml", &host()).unwrap();
        let w = messages(&c);
        let at = "w.toml:11:14: connections.site.children.lan.remote_ts[0]: warning: 0.0.0.0/0";
        let want = [
            format!(
                "{at} covers peer 192.0.2.2: the daemon's own IKE and ESP to it bypass the tunnel (their sockets carry firewall mark 0xdc), but other traffic from local_ts to 192.0.2.2 goes through the tunnel"
            ),
            format!(
                "{at} covers the main table's route 'blackhole 10.2.0.0/16 proto kernel': it comes first, so traffic from local_ts to 10.2.0.0/16 keeps following it, not the tunnel"
            ),
            format!(
                "{at} covers the main table's route '172.16.0.0/12 via 10.1.0.254 dev lan0 proto kernel': it comes first, so traffic from local_ts to 172.16.0.0/12 keeps following it, not the tunnel"
            ),
            format!(
                "{at} covers the main table's route '192.0.2.0/24 dev wan0 proto kernel': it comes first, so traffic from local_ts to 192.0.2.0/24 keeps following it, not the tunnel"
            ),
        ];
        assert_eq!(w, want);
        // Not named: the LAN itself (in local_ts), the default route,
        // link-local and multicast routes, other tables.
        let all = w.join("\n");
        for quiet in [
            "10.1.0.0/24 dev",
            "default",
            "169.254",
            "224.0.0.0",
            "fe80",
            "fd00:1::/64 dev",
            "10.9.0.0",
        ] {
            assert!(!all.contains(quiet), "{quiet}: {all}");
        }
        // Without the host's routes, only the fact of the file.
        assert_eq!(messages(&parse_str(&text, "w.toml").unwrap()), want[..1].to_vec());
    }

    #[test]
    fn a_selector_inside_a_main_route_gets_nothing_through_the_tunnel() {
        let text = file(
            "",
            &[
                (
                    "a",
                    "192.0.2.2",
                    "\"10.1.0.0/24\"",
                    "\"10.2.5.0/24\", \"172.16.1.7-172.16.1.9\"",
                ),
                ("b", "192.0.2.3", "\"10.3.0.0/24\"", "\"10.7.0.0/16\""),
            ],
        );
        let w = messages(&parse_str_on(&text, "w.toml", &host()).unwrap());
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(w[0].ends_with("remote_ts[0]: warning: 10.2.5.0/24 lies inside the main table's route 'blackhole 10.2.0.0/16 proto kernel', which comes first: traffic from local_ts to 10.2.5.0/24 follows that route and never enters the tunnel"), "{}", w[0]);
        // A range that is not a prefix: its prefixes are looked up, and the
        // route is named once.
        assert!(w[1].contains("remote_ts[1]: warning: 172.16.1.7-172.16.1.9 lies inside the main table's route '172.16.0.0/12 via 10.1.0.254 dev lan0"), "{}", w[1]);
    }

    #[test]
    fn a_peer_inside_another_connections_selector_is_named_and_host_to_host_is_not() {
        let text = file(
            "",
            &[
                ("a", "192.0.2.2", "\"10.1.0.0/24\"", "\"192.0.2.0/24\""),
                ("b", "192.0.2.3", "\"192.0.2.1\"", "\"192.0.2.3\""),
            ],
        );
        let w = messages(&parse_str(&text, "w.toml").unwrap());
        assert_eq!(w.len(), 2, "{w:#?}");
        assert!(
            w[0].contains("a.children.lan.remote_ts[0]: warning: 192.0.2.0/24 covers peer 192.0.2.2: "),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("192.0.2.0/24 covers peer 192.0.2.3 (connection b): "),
            "{}",
            w[1]
        );
    }

    #[test]
    fn a_big_main_table_is_counted_not_listed() {
        let mut h = host();
        for i in 0..1000u32 {
            h.routes.push(route(
                &format!("100.{}.{}.0/24", 64 + i / 256, i % 256),
                MAIN_TABLE,
                RouteKind::Unicast,
                2,
                None,
            ));
        }
        let text = file("", &[("site", "192.0.2.2", "\"10.1.0.0/24\"", "\"100.64.0.0/10\"")]);
        let w = messages(&parse_str_on(&text, "w.toml", &h).unwrap());
        assert_eq!(w.len(), MAX_ROUTES_NAMED + 1, "{w:#?}");
        assert!(w[MAX_ROUTES_NAMED].ends_with(&format!(
            "covers {} more routes of the main table, which likewise come first",
            1000 - MAX_ROUTES_NAMED
        )));
    }

    #[test]
    fn someone_elses_table_or_priority_is_a_warning_at_its_key() {
        let mut h = host();
        let mut swan = Rule::new(false, 220, Action::Lookup(220));
        swan.protocol = 3;
        h.rules.push(swan);
        // Our own rules (a daemon running with this file) are no conflict.
        let r = Routing::default();
        let cfg: RoutingConfig = r.into();
        h.rules.push(cfg.bypass_rule(false));
        h.routes.push(route("10.2.0.0/24", 220, RouteKind::Unicast, 9, None));
        h.routes.last_mut().unwrap().protocol = PROTOCOL;
        let text = file("", &[("site", "192.0.2.2", "\"10.1.0.0/24\"", "\"10.8.0.0/24\"")]);
        let w = messages(&parse_str_on(&text, "w.toml", &h).unwrap());
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(w[0].starts_with("w.toml: daemon.routing_table_prio: warning: esparto run would refuse to start: IPv4 rule '220: from all lookup 220 proto 3' is not Esparto's"), "{}", w[0]);
        // Written in the file: the warning points at the key.
        let text = file(
            "routing_table_prio = 220",
            &[("site", "192.0.2.2", "\"10.1.0.0/24\"", "\"10.8.0.0/24\"")],
        );
        let w = messages(&parse_str_on(&text, "w.toml", &h).unwrap());
        assert!(
            w[0].starts_with("w.toml:3:22: daemon.routing_table_prio: warning: esparto run would refuse"),
            "{}",
            w[0]
        );
        // Elsewhere: nothing to say.
        let text = file(
            "routing_table = 221\nrouting_table_prio = 300",
            &[("site", "192.0.2.2", "\"10.1.0.0/24\"", "\"10.8.0.0/24\"")],
        );
        assert!(parse_str_on(&text, "w.toml", &h).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_full_tunnel_from_the_wan_address_is_told_the_hosts_own_traffic_goes_too() {
        // Every IPv4 address in two halves; IPv6 only a /64. The LAN
        // address (10.1.0.1, in local_ts[0]) is not where the default
        // route leaves: not mentioned.
        let text = file(
            "",
            &[(
                "site",
                "192.0.2.2",
                "\"10.1.0.0/24\", \"192.0.2.1\", \"fd00:1::/64\"",
                "\"0.0.0.0/1\", \"128.0.0.0/1\", \"fd00:2::/64\"",
            )],
        );
        let w = messages(&parse_str_on(&text, "w.toml", &host()).unwrap());
        let own: Vec<&String> = w.iter().filter(|m| m.contains("this host's address")).collect();
        assert_eq!(own.len(), 1, "{w:#?}");
        assert!(
            own[0].contains("local_ts[1]: warning: 192.0.2.1/32 covers 192.0.2.1, this host's address on wan0 where its default route leaves, and remote_ts covers every IPv4 address: the host's own traffic from 192.0.2.1"),
            "{}",
            own[0]
        );
        // IPv6 too, once remote_ts takes all of it and a default route
        // leaves by the device of one of the host's addresses.
        let mut h = host();
        h.routes
            .push(route("::/0", MAIN_TABLE, RouteKind::Unicast, 2, Some("2001:db8::1")));
        h.routes
            .push(route("2001:db8::7/128", LOCAL_TABLE, RouteKind::Local, 2, None));
        h.routes.push(route("::1/128", LOCAL_TABLE, RouteKind::Local, 3, None));
        let text = file("", &[("site", "192.0.2.2", "\"2001:db8::/64\"", "\"::/0\"")]);
        let w = messages(&parse_str_on(&text, "w.toml", &h).unwrap());
        let own: Vec<&String> = w.iter().filter(|m| m.contains("this host's address")).collect();
        assert_eq!(own.len(), 1, "{w:#?}");
        assert!(
            own[0].contains("2001:db8::/64 covers 2001:db8::7, this host's address on wan0"),
            "{}",
            own[0]
        );
        assert!(own[0].contains("every IPv6 address"), "{}", own[0]);
        // Without the host's routes, nothing to compare with.
        assert!(
            !messages(&parse_str(&text, "w.toml").unwrap())
                .iter()
                .any(|m| m.contains("this host's"))
        );
    }

    #[test]
    fn ranges_cover_a_family_only_without_a_gap() {
        let v4max = u128::from(u32::MAX);
        assert!(cover_all(vec![(0, v4max)], false));
        assert!(cover_all(vec![(1 << 31, v4max), (0, (1 << 31) - 1)], false));
        assert!(cover_all(vec![(0, 10), (5, 20), (21, v4max)], false));
        assert!(!cover_all(vec![(0, 10), (12, v4max)], false), "a gap of one");
        assert!(!cover_all(vec![(1, v4max)], false), "the first address missing");
        assert!(!cover_all(vec![(0, v4max - 1)], false), "the last address missing");
        assert!(!cover_all(Vec::new(), false));
        assert!(!cover_all(vec![(0, v4max)], true), "all of IPv4 is not all of IPv6");
        assert!(cover_all(vec![(0, u128::MAX)], true));
    }

    #[test]
    fn a_selector_with_ports_is_told_routes_take_every_port() {
        let text = file(
            "",
            &[(
                "site",
                "192.0.2.2",
                "\"10.1.0.0/24\"",
                "\"10.8.0.0/24[tcp/443]\", \"10.9.0.0/24\"",
            )],
        );
        let w = messages(&parse_str(&text, "w.toml").unwrap());
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(
            w[0].contains("remote_ts[0]: warning: 10.8.0.0/24[6/443] names a protocol or ports, but routes and policy rules select by address only: all traffic between 10.8.0.0/24 and local_ts enters the tunnel device"),
            "{}",
            w[0]
        );
        let text = file("", &[("site", "192.0.2.2", "\"10.1.0.0/24[udp]\"", "\"10.9.0.0/24\"")]);
        let w = messages(&parse_str(&text, "w.toml").unwrap());
        assert_eq!(w.len(), 1, "{w:#?}");
        assert!(
            w[0].contains("local_ts[0]: warning: 10.1.0.0/24[17] names a protocol"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("between 10.1.0.0/24 and remote_ts"), "{}", w[0]);
    }
}
