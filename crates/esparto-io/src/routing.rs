//! Esparto's own routing table, and the policy rules that send tunnel
//! traffic to it without taking anything else from the host.
//!
//! The kernel must hand the workers (through the TUN device) exactly the
//! packets the tunnels carry: those from a child's local selectors to its
//! remote ones. Routes in the main table would do that for destinations
//! only, and would replace the host's own routes for the same prefixes: a
//! remote selector `0.0.0.0/0` would replace the default route, and the
//! daemon's own ESP to its peer would be routed into the tunnel. So
//! Esparto keeps its routes in a table of its own (`T`, default 220 as
//! strongSwan's) and adds, per address family, at three consecutive
//! priorities `P`, `P+1`, `P+2` (default 220–222):
//!
//! ```text
//! P:    from all fwmark M goto P+2                      the daemon's own packets skip the rest
//! P+1:  from L lookup main suppress_prefixlength 0      for each local selector prefix L:
//! P+1:  from L lookup T                                 the main table's specific routes first, then the tunnels
//! P+2:  from all nop                                    where marked packets land
//! ```
//!
//! - **Only traffic from a local selector** is looked up in `T`. The
//!   host's own traffic from its other addresses (a management login over
//!   the WAN, its updates, its DNS) never is, whatever the remote selectors
//!   cover: a full-tunnel site (`remote_ts = 0.0.0.0/0`) keeps its host
//!   reachable. (A rule cannot say "from L and not mark M": `not` inverts
//!   a rule's whole match, so the mark gets a rule of its own.)
//! - **The daemon's own IKE and ESP** leave through sockets that carry
//!   the firewall mark `M` (`SO_MARK`, set when they are created); the
//!   rule at `P` sends them past the tunnel's rules, on to whatever the
//!   host's rules and main table say, even when a selector covers the
//!   peer's address or the socket's own (`local_ts = dynamic`). This is
//!   wg-quick's "not fwmark" bypass.
//! - **The main table's routes come first, except its default route**
//!   (wg-quick's `suppress_prefixlength 0`): for traffic from a local
//!   selector, a route the host has for a specific prefix (its LAN, a link
//!   route, a static route to another site) wins over the tunnel; only
//!   what the host would send along its default route, or could not route
//!   at all, goes into the tunnel. Decrypted packets to the LAN (whose
//!   source is a remote selector) never meet the tunnel's rules at all.
//!   `check-config` warns where a selector covers one of the main table's
//!   routes.
//!
//! Nothing is added to or replaced in the main table. Everything added
//! carries the protocol number [`PROTOCOL`] (`proto 229` in `ip rule` and
//! `ip route`). At start ([`TunnelRouting::claim`]) the host is surveyed
//! first: a route in `T` or a rule at `P`–`P+2` that is not tagged as
//! Esparto's, or an untagged rule that looks up `T`, belongs to someone
//! else (strongSwan's default table is also 220), and the start is refused
//! naming it, before anything is changed. Tagged routes in `T` and tagged
//! rules at `P`–`P+2` (or looking up `T`) are what a daemon that died
//! without stopping left behind, and are removed; the lock files of
//! [`crate::instance`] make sure no live daemon in the namespace uses the
//! same table or priorities. On stop everything added is removed
//! ([`TunnelRouting::remove_all`], also on drop). The routes also go with
//! the TUN device when the process dies; the rules do not, but without
//! their routes they send nothing anywhere (a lookup in an empty table
//! falls through to the next rule).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use crate::netlink::{Rtnetlink, errno};
use crate::route::{MAIN_TABLE, Route, RouteEntry, already_gone, prefix_within};
use crate::rule::{Action, FULL_MASK, Rule};

/// The protocol number on every route and rule Esparto adds (`proto
/// 229`). Not one of iproute2's reserved numbers (`/etc/iproute2/rt_protos`);
/// `echo "229 esparto" > /etc/iproute2/rt_protos.d/esparto.conf` makes
/// `ip` print it by name.
pub const PROTOCOL: u8 = 229;
/// How many consecutive rule priorities the rules take, from
/// [`RoutingConfig::priority`].
pub const PRIORITIES: u32 = 3;

/// Where Esparto's routes and rules go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingConfig {
    /// The routing table of the tunnel routes (not main, local, default or 0).
    pub table: u32,
    /// The first of the [`PRIORITIES`] rule priorities.
    pub priority: u32,
    /// The firewall mark of the daemon's sockets (non-zero).
    pub mark: u32,
}

/// A prefix: its first address and its length.
pub type Prefix = (IpAddr, u8);

impl RoutingConfig {
    /// The priorities the rules use.
    pub fn priorities(&self) -> RangeInclusive<u32> {
        self.priority..=self.priority.saturating_add(PRIORITIES - 1)
    }

    fn tagged(mut r: Rule) -> Rule {
        r.protocol = PROTOCOL;
        r
    }

    /// `P: fwmark M goto P+2`: the daemon's own packets skip the tunnel's
    /// rules.
    pub fn bypass_rule(&self, v6: bool) -> Rule {
        let mut r = Rule::new(v6, self.priority, Action::Goto(self.priority + 2));
        r.fwmark = Some((self.mark, FULL_MASK));
        Self::tagged(r)
    }

    /// `P+2: nop`: the bypass rule's target.
    pub fn end_rule(&self, v6: bool) -> Rule {
        Self::tagged(Rule::new(v6, self.priority + 2, Action::Nop))
    }

    /// `P+1: from L lookup main suppress_prefixlength 0` and `P+1: from L
    /// lookup T`, in that order.
    pub fn source_rules(&self, from: Prefix) -> [Rule; 2] {
        let v6 = from.0.is_ipv6();
        let mut main = Rule::new(v6, self.priority + 1, Action::Lookup(MAIN_TABLE));
        main.from = Some(from);
        main.suppress_prefixlen = Some(0);
        let mut own = Rule::new(v6, self.priority + 1, Action::Lookup(self.table));
        own.from = Some(from);
        [Self::tagged(main), Self::tagged(own)]
    }

    /// The route of `dst` into device `ifindex`, in the table.
    pub fn route(&self, dst: Prefix, ifindex: u32) -> Route {
        Route {
            dst: dst.0,
            prefix_len: dst.1,
            ifindex,
            table: self.table,
            protocol: PROTOCOL,
        }
    }

    /// Sorts what the host holds that concerns this configuration: leftovers
    /// of an Esparto that did not stop (removed at start), and what belongs
    /// to others (which refuses the start).
    pub fn survey(&self, rules: &[Rule], routes: &[RouteEntry]) -> Survey {
        let mut s = Survey::default();
        for r in rules {
            let at_ours = self.priorities().contains(&r.priority);
            let into_ours = r.table() == Some(self.table);
            match (r.protocol == PROTOCOL, at_ours, into_ours) {
                (true, true, _) | (true, _, true) => s.leftover_rules.push(r.clone()),
                (false, true, _) => s.conflicts.push(Conflict::Priority(r.clone())),
                (false, false, true) => s.conflicts.push(Conflict::LooksUpTable(r.clone())),
                _ => {}
            }
        }
        for e in routes.iter().filter(|e| e.table == self.table) {
            if e.protocol == PROTOCOL {
                s.leftover_routes.push(e.clone());
            } else {
                s.conflicts.push(Conflict::Route(e.clone()));
            }
        }
        s
    }
}

/// What [`RoutingConfig::survey`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Survey {
    /// Esparto's rules a daemon left behind.
    pub leftover_rules: Vec<Rule>,
    /// Esparto's routes a daemon left behind in the table.
    pub leftover_routes: Vec<RouteEntry>,
    /// What belongs to someone else.
    pub conflicts: Vec<Conflict>,
}

/// Something of someone else's in the table or at the priorities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// A rule at one of the priorities.
    Priority(Rule),
    /// A rule elsewhere that looks up the table.
    LooksUpTable(Rule),
    /// A route in the table.
    Route(RouteEntry),
}

impl Conflict {
    /// What it is and what to do about it, with device names from `names`.
    pub fn describe(&self, cfg: &RoutingConfig, names: &HashMap<u32, String>) -> String {
        let (p0, p2) = (cfg.priority, cfg.priority + 2);
        let fam = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
        match self {
            Conflict::Priority(r) => format!(
                "{} rule '{r}' is not Esparto's and holds priority {}, one of the {p0}-{p2} Esparto's rules need: choose other priorities with [daemon] routing_table_prio",
                fam(r.v6),
                r.priority
            ),
            Conflict::LooksUpTable(r) => format!(
                "{} rule '{r}' is not Esparto's and sends traffic to table {}: another program uses that table (strongSwan's default is 220); choose another with [daemon] routing_table",
                fam(r.v6),
                cfg.table
            ),
            Conflict::Route(e) => format!(
                "table {} holds route '{}' that Esparto did not set: another program uses that table (strongSwan's default is 220); choose another with [daemon] routing_table",
                cfg.table,
                e.describe(names)
            ),
        }
    }
}

/// Why routing could not be set up or changed.
#[derive(Debug)]
pub enum RoutingError {
    /// The table or the priorities belong to someone else (nothing was
    /// changed); one description per conflict.
    Conflicts(Vec<String>),
    /// The kernel refused a request.
    Netlink {
        /// What was being done.
        what: String,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The daemon's own packets to a peer would enter the tunnel device.
    PeerIntoTunnel {
        /// The peer.
        peer: IpAddr,
        /// The tunnel device.
        dev: String,
        /// The route the kernel gives them.
        route: String,
    },
}

impl fmt::Display for RoutingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutingError::Conflicts(c) => {
                write!(
                    f,
                    "the routing table or rule priorities are in use, nothing was changed:"
                )?;
                for line in c {
                    write!(f, "\n  {line}")?;
                }
                Ok(())
            }
            RoutingError::Netlink { what, source } => write!(f, "cannot {what}: {source}"),
            RoutingError::PeerIntoTunnel { peer, dev, route } => write!(
                f,
                "the daemon's own packets to peer {peer} would be routed into {dev} ({route}), and the peer would be unreachable: remove that route or rule"
            ),
        }
    }
}

impl std::error::Error for RoutingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RoutingError::Netlink { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn netlink(what: impl Into<String>) -> impl FnOnce(io::Error) -> RoutingError {
    let what = what.into();
    move |source| RoutingError::Netlink { what, source }
}

/// What [`TunnelRouting::claim`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Leftover rules.
    pub rules: usize,
    /// Leftover routes.
    pub routes: usize,
}

/// Where the daemon's own packets to a peer go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerPath {
    /// Out of this device (by name).
    Via(String),
    /// The host has no route to it now.
    Unreachable,
}

/// Esparto's routes and rules in one network namespace, as this process
/// set them (see the module's documentation).
pub struct TunnelRouting {
    nl: Rtnetlink,
    cfg: RoutingConfig,
    /// The tunnel device: name and index.
    dev: Option<(String, u32)>,
    /// Rules added, in order.
    rules: Vec<Rule>,
    /// Families (IPv4, IPv6) whose bypass and end rules are in.
    base: [bool; 2],
    /// Source prefixes that have their rules.
    sources: Vec<Prefix>,
    /// Destination prefixes routed into the device.
    routes: BTreeSet<Prefix>,
}

impl fmt::Debug for TunnelRouting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TunnelRouting")
            .field("cfg", &self.cfg)
            .field("dev", &self.dev)
            .field("rules", &self.rules.len())
            .field("routes", &self.routes.len())
            .finish()
    }
}

fn family(a: IpAddr) -> usize {
    usize::from(a.is_ipv6())
}

impl TunnelRouting {
    /// Opens an rtnetlink socket in the calling thread's network namespace,
    /// surveys the host ([`RoutingConfig::survey`]): refuses, changing
    /// nothing, if the table or the priorities are someone else's; else
    /// removes Esparto's leftovers.
    pub fn claim(cfg: RoutingConfig) -> Result<(Self, Cleaned), RoutingError> {
        let mut nl = Rtnetlink::open().map_err(netlink("open an rtnetlink socket"))?;
        let mut rules = nl.rules(false).map_err(netlink("list the IPv4 rules"))?;
        rules.extend(nl.rules(true).map_err(netlink("list the IPv6 rules"))?);
        let routes = nl.route_entries().map_err(netlink("list the routes"))?;
        let survey = cfg.survey(&rules, &routes);
        if !survey.conflicts.is_empty() {
            let names = nl.link_names().unwrap_or_default();
            return Err(RoutingError::Conflicts(
                survey.conflicts.iter().map(|c| c.describe(&cfg, &names)).collect(),
            ));
        }
        let mut cleaned = Cleaned::default();
        for r in &survey.leftover_rules {
            match nl.delete_rule(r) {
                Ok(()) => cleaned.rules += 1,
                Err(e) if already_gone(&e) => {}
                Err(e) => return Err(netlink(format!("remove the leftover rule '{r}'"))(e)),
            }
        }
        for e in &survey.leftover_routes {
            // Esparto's routes always name their device.
            let Some(oif) = e.oif else { continue };
            let r = Route {
                dst: e.dst,
                prefix_len: e.prefix_len,
                ifindex: oif,
                table: e.table,
                protocol: PROTOCOL,
            };
            match nl.delete_route(&r) {
                Ok(()) => cleaned.routes += 1,
                Err(err) if already_gone(&err) => {}
                Err(err) => return Err(netlink(format!("remove the leftover route {r}"))(err)),
            }
        }
        let me = Self {
            nl,
            cfg,
            dev: None,
            rules: Vec::new(),
            base: [false; 2],
            sources: Vec::new(),
            routes: BTreeSet::new(),
        };
        Ok((me, cleaned))
    }

    /// Routes go into device `dev` from now on.
    pub fn attach(&mut self, dev: &str) -> Result<(), RoutingError> {
        let i = self.nl.link_index(dev).map_err(netlink(format!("find device {dev}")))?;
        self.dev = Some((dev.to_string(), i));
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> RoutingConfig {
        self.cfg
    }

    /// The rules added so far, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The prefixes routed into the device so far.
    pub fn routes(&self) -> impl Iterator<Item = Prefix> + '_ {
        self.routes.iter().copied()
    }

    fn add_rule(&mut self, r: Rule) -> Result<(), RoutingError> {
        match self.nl.add_rule(&r) {
            Ok(()) => {}
            // Identical and tagged: ours (the survey cleared every leftover,
            // and the lock keeps other daemons off these priorities).
            Err(e) if errno(&e) == Some(libc::EEXIST) => {}
            Err(e) => return Err(netlink(format!("add rule '{r}'"))(e)),
        }
        if !self.rules.contains(&r) {
            self.rules.push(r);
        }
        Ok(())
    }

    /// Sends traffic from the `local` prefixes to the `remote` prefixes into
    /// the device: the rules of every local prefix not yet covered by one
    /// that has them, then a route for every remote prefix that has none
    /// yet (a rekey that keeps its selectors changes nothing in the
    /// kernel). Routes the kernel dropped since (it flushes a device's
    /// routes when the device goes down) come back with [`restore`](Self::restore).
    /// Only families with both local and remote prefixes are touched. Goes
    /// on past a failure and returns the first.
    pub fn add(&mut self, local: &[Prefix], remote: &[Prefix]) -> Result<(), RoutingError> {
        let Some((dev, ifindex)) = self.dev.clone() else {
            return Err(RoutingError::Netlink {
                what: "route into the tunnel".into(),
                source: io::Error::new(io::ErrorKind::NotFound, "no device attached"),
            });
        };
        let mut first = None;
        for fam in [0, 1] {
            let remote: Vec<Prefix> = remote.iter().copied().filter(|p| family(p.0) == fam).collect();
            let local: Vec<Prefix> = local.iter().copied().filter(|p| family(p.0) == fam).collect();
            if remote.is_empty() || local.is_empty() {
                continue;
            }
            if !self.base[fam] {
                let v6 = fam == 1;
                // The target first, so that the jump always lands.
                let r = self
                    .add_rule(self.cfg.end_rule(v6))
                    .and_then(|()| self.add_rule(self.cfg.bypass_rule(v6)));
                match r {
                    Ok(()) => self.base[fam] = true,
                    Err(e) => {
                        // Without the bypass the daemon's own packets could
                        // follow the tunnel's rules: add none of them.
                        first.get_or_insert(e);
                        continue;
                    }
                }
            }
            for l in local {
                if self.sources.iter().any(|s| prefix_within(l, *s)) {
                    continue;
                }
                let [main, own] = self.cfg.source_rules(l);
                match self.add_rule(main).and_then(|()| self.add_rule(own)) {
                    Ok(()) => self.sources.push(l),
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            for r in remote {
                if self.routes.contains(&r) {
                    continue;
                }
                let route = self.cfg.route(r, ifindex);
                match self.nl.replace_route(&route) {
                    Ok(()) => {
                        self.routes.insert(r);
                    }
                    Err(e) => {
                        let what = format!(
                            "add route {}/{} dev {dev} table {} proto {PROTOCOL}",
                            r.0, r.1, self.cfg.table
                        );
                        first.get_or_insert(RoutingError::Netlink { what, source: e });
                    }
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Puts back every route it set that the kernel no longer has (it
    /// flushes a device's routes when the device goes down and up), from a
    /// dump of the table's routes on the device (filtered by the kernel:
    /// it costs the tunnel's routes, not the host's). Returns how many it
    /// put back; goes on past a failure and returns the first.
    pub fn restore(&mut self) -> Result<usize, RoutingError> {
        let Some((dev, ifindex)) = self.dev.clone() else {
            return Ok(0);
        };
        let present: BTreeSet<Prefix> = self
            .nl
            .routes_in(self.cfg.table, ifindex)
            .map_err(netlink(format!("list the routes of table {}", self.cfg.table)))?
            .iter()
            .map(|e| (e.dst, e.prefix_len))
            .collect();
        let mut first = None;
        let mut n = 0;
        for r in self.routes.iter().copied().filter(|r| !present.contains(r)).collect::<Vec<_>>() {
            match self.nl.replace_route(&self.cfg.route(r, ifindex)) {
                Ok(()) => n += 1,
                Err(e) => {
                    let what = format!("put back route {}/{} dev {dev} table {}", r.0, r.1, self.cfg.table);
                    first.get_or_insert(RoutingError::Netlink { what, source: e });
                }
            }
        }
        first.map_or(Ok(n), Err)
    }

    /// The tunnel device's name and index, once attached.
    pub fn device(&self) -> Option<(&str, u32)> {
        self.dev.as_ref().map(|(n, i)| (n.as_str(), *i))
    }

    /// Where the daemon's own (marked) packets from `src` (its sockets'
    /// address; `None`: the wildcard) to `peer` go. An error if into the
    /// tunnel device: the peer would be unreachable.
    pub fn check_peer(&mut self, peer: IpAddr, src: Option<IpAddr>) -> Result<PeerPath, RoutingError> {
        let dev = self.dev.clone();
        peer_path(&mut self.nl, self.cfg.mark, dev.as_ref().map(|(n, i)| (n.as_str(), *i)), peer, src)
    }

    /// Removes the routes of `remote` prefixes from the table (a route
    /// already gone is not an error): no tunnel needs them any more (a
    /// configuration reload dropped their connections). The source rules
    /// stay until [`remove_all`](Self::remove_all): traffic from a local
    /// prefix that no route in the table covers falls through them to the
    /// host's own routing. Goes on past a failure and returns the first.
    pub fn remove_routes(&mut self, remote: &[Prefix]) -> Result<(), RoutingError> {
        let Some((dev, ifindex)) = self.dev.clone() else {
            return Ok(());
        };
        let mut first = None;
        for p in remote {
            self.routes.remove(p);
            match self.nl.delete_route(&self.cfg.route(*p, ifindex)) {
                Ok(()) => {}
                Err(e) if already_gone(&e) => {}
                Err(e) => {
                    let what = format!("remove route {}/{} dev {dev} table {}", p.0, p.1, self.cfg.table);
                    first.get_or_insert(RoutingError::Netlink { what, source: e });
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Removes every rule (newest first) and route added; returns what
    /// could not be removed.
    pub fn remove_all(&mut self) -> Vec<RoutingError> {
        let mut errors = Vec::new();
        while let Some(r) = self.rules.pop() {
            match self.nl.delete_rule(&r) {
                Ok(()) => {}
                Err(e) if already_gone(&e) => {}
                Err(e) => errors.push(netlink(format!("remove rule '{r}'"))(e)),
            }
        }
        self.base = [false; 2];
        self.sources.clear();
        if let Some((dev, ifindex)) = self.dev.clone() {
            for p in std::mem::take(&mut self.routes) {
                match self.nl.delete_route(&self.cfg.route(p, ifindex)) {
                    Ok(()) => {}
                    Err(e) if already_gone(&e) => {}
                    Err(e) => errors.push(netlink(format!(
                        "remove route {}/{} dev {dev} table {}",
                        p.0, p.1, self.cfg.table
                    ))(e)),
                }
            }
        }
        errors
    }
}

/// Where packets with firewall mark `mark` from `src` (`None`: the
/// wildcard) to `peer` go, by the kernel's routing (`ip route get`). An
/// error if into `tunnel` (name, index): the peer would be unreachable.
/// A lookup, not a change: the kernel answers it without its routing lock.
pub fn peer_path(
    nl: &mut Rtnetlink,
    mark: u32,
    tunnel: Option<(&str, u32)>,
    peer: IpAddr,
    src: Option<IpAddr>,
) -> Result<PeerPath, RoutingError> {
    let got = nl.route_get(peer, src, mark).map_err(netlink(format!("look up the route to peer {peer}")))?;
    let Some(e) = got else { return Ok(PeerPath::Unreachable) };
    if let (Some(oif), Some((dev, ifindex))) = (e.oif, tunnel) {
        if oif == ifindex {
            let names = nl.link_names().unwrap_or_default();
            return Err(RoutingError::PeerIntoTunnel { peer, dev: dev.to_string(), route: e.describe(&names) });
        }
    }
    // The one device's name: a hub checks a peer per connection loaded.
    Ok(match e.oif.and_then(|i| nl.link_name(i).ok().flatten()) {
        Some(n) => PeerPath::Via(n),
        None => PeerPath::Via(e.describe(&Default::default())),
    })
}

impl Drop for TunnelRouting {
    /// A start that fails half-way leaves nothing behind.
    fn drop(&mut self) {
        let _ = self.remove_all();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::route::RouteKind;
    use esparto_netns::{self as netns, Netns};

    const CFG: RoutingConfig = RoutingConfig {
        table: 220,
        priority: 220,
        mark: 220,
    };

    fn p(s: &str) -> Prefix {
        let (a, l) = s.split_once('/').unwrap();
        (a.parse().unwrap(), l.parse().unwrap())
    }

    fn entry(dst: &str, table: u32, protocol: u8) -> RouteEntry {
        let (dst, prefix_len) = p(dst);
        RouteEntry {
            dst,
            prefix_len,
            table,
            protocol,
            kind: RouteKind::Unicast,
            oif: Some(7),
            gateway: None,
            multipath: false,
            metric: None,
        }
    }

    #[test]
    fn the_rules_are_a_bypass_a_pair_per_source_and_a_landing() {
        assert_eq!(
            CFG.bypass_rule(false).to_string(),
            "220: from all fwmark 0xdc goto 222 proto 229"
        );
        assert_eq!(CFG.end_rule(true).to_string(), "222: from all nop proto 229");
        let [main, own] = CFG.source_rules(p("10.1.0.0/24"));
        assert_eq!(
            main.to_string(),
            "221: from 10.1.0.0/24 lookup main suppress_prefixlength 0 proto 229"
        );
        assert_eq!(own.to_string(), "221: from 10.1.0.0/24 lookup 220 proto 229");
        let [_, own6] = RoutingConfig {
            table: 1000,
            priority: 30000,
            mark: 0x1_0000,
        }
        .source_rules(p("::/0"));
        assert_eq!(own6.to_string(), "30001: from all lookup 1000 proto 229");
        assert!(own6.v6 && !own6.invert);
        // The bypass jumps forward, past the pairs, to the landing rule.
        assert_eq!(CFG.bypass_rule(true).action, Action::Goto(CFG.end_rule(true).priority));
        assert_eq!(CFG.priorities(), 220..=222);
        let r = CFG.route(p("0.0.0.0/0"), 9);
        assert_eq!((r.table, r.protocol, r.ifindex, r.prefix_len), (220, PROTOCOL, 9, 0));
    }

    #[test]
    fn marked_packets_never_reach_the_tunnel_table() {
        // Walk the rules as the kernel does for a packet from a source
        // every selector covers: the marked one must never get to a
        // lookup of the tunnel's table; the unmarked one must.
        let src: IpAddr = "10.1.0.5".parse().unwrap();
        let mut rules = vec![CFG.bypass_rule(false)];
        rules.extend(CFG.source_rules(p("10.1.0.0/24")));
        rules.extend(CFG.source_rules(p("0.0.0.0/0")));
        rules.push(CFG.end_rule(false));
        let walk = |mark: u32| -> Vec<u32> {
            let mut seen = Vec::new();
            let mut i = 0;
            while i < rules.len() {
                let r = &rules[i];
                i += 1;
                if !(r.matches_mark(mark) && r.covers_source(src)) {
                    continue;
                }
                match r.action {
                    Action::Goto(t) => i = rules.iter().position(|x| x.priority == t).unwrap(),
                    Action::Lookup(t) => seen.push(t),
                    _ => {}
                }
            }
            seen
        };
        assert_eq!(walk(CFG.mark), Vec::<u32>::new());
        assert_eq!(walk(0), vec![MAIN_TABLE, 220, MAIN_TABLE, 220]);
        assert_eq!(walk(CFG.mark + 1), vec![MAIN_TABLE, 220, MAIN_TABLE, 220]);
    }

    #[test]
    fn the_survey_sorts_leftovers_from_what_is_someone_elses() {
        let mut rules = vec![
            CFG.bypass_rule(false),
            CFG.source_rules(p("10.1.0.0/24"))[1].clone(),
            CFG.end_rule(true),
        ];
        // The kernel's own rules, and others' at other priorities.
        rules.push(Rule::new(false, 0, Action::Lookup(crate::route::LOCAL_TABLE)));
        rules.push(Rule::new(false, 32766, Action::Lookup(MAIN_TABLE)));
        rules.push(Rule::new(false, 1000, Action::Lookup(100)));
        // Ours by tag, at another priority but into our table: left over
        // from a daemon with other priorities.
        let mut moved = CFG.source_rules(p("10.1.0.0/24"))[1].clone();
        moved.priority = 5000;
        rules.push(moved.clone());
        // Ours by tag, at another priority and into main: not ours to judge.
        let mut elsewhere = CFG.source_rules(p("10.1.0.0/24"))[0].clone();
        elsewhere.priority = 5000;
        rules.push(elsewhere);
        let routes = vec![
            entry("10.2.0.0/24", 220, PROTOCOL),
            entry("10.9.0.0/24", MAIN_TABLE, 4),
            entry("10.2.0.0/24", 221, PROTOCOL),
        ];
        let s = CFG.survey(&rules, &routes);
        assert!(s.conflicts.is_empty(), "{:?}", s.conflicts);
        assert_eq!(s.leftover_rules.len(), 4, "{:?}", s.leftover_rules);
        assert!(s.leftover_rules.contains(&moved));
        assert_eq!(s.leftover_routes, vec![entry("10.2.0.0/24", 220, PROTOCOL)]);

        // strongSwan's rule and route: both conflicts, named.
        let mut swan = Rule::new(false, 220, Action::Lookup(220));
        swan.protocol = 3;
        let mut into = Rule::new(true, 100, Action::Lookup(220));
        into.from = Some(p("fd00::/8"));
        let mut at_p2 = Rule::new(false, 222, Action::Lookup(100));
        at_p2.fwmark = Some((1, 1));
        let s = CFG.survey(
            &[swan.clone(), into.clone(), at_p2.clone()],
            &[entry("10.2.0.0/24", 220, 4)],
        );
        assert_eq!(
            s.conflicts,
            vec![
                Conflict::Priority(swan),
                Conflict::LooksUpTable(into),
                Conflict::Priority(at_p2),
                Conflict::Route(entry("10.2.0.0/24", 220, 4)),
            ]
        );
        let names = HashMap::from([(7, "ipsec0".to_string())]);
        let text: Vec<String> = s.conflicts.iter().map(|c| c.describe(&CFG, &names)).collect();
        assert!(
            text[0].contains("IPv4 rule '220: from all lookup 220 proto 3'") && text[0].contains("routing_table_prio"),
            "{}",
            text[0]
        );
        assert!(
            text[1].contains("IPv6 rule") && text[1].contains("routing_table"),
            "{}",
            text[1]
        );
        assert!(
            text[3].contains("'10.2.0.0/24 dev ipsec0 table 220 proto static'"),
            "{}",
            text[3]
        );
    }

    /// The host's routing state as `ip` shows it, both families, every
    /// table: the oracle for "exactly as before".
    fn snapshot(ns: &Netns) -> String {
        let mut s = String::new();
        for args in [
            &["-4", "rule"][..],
            &["-6", "rule"],
            &["-4", "route", "show", "table", "all"],
            &["-6", "route", "show", "table", "all"],
        ] {
            s.push_str(&String::from_utf8_lossy(&ns.ip(args).unwrap().stdout));
        }
        s
    }

    fn veth(ns: &Netns, d: &str) {
        ns.ip(&["link", "add", d, "type", "veth", "peer", "name", &format!("p{d}")])
            .unwrap();
        ns.ip(&["link", "set", d, "up"]).unwrap();
        ns.ip(&["link", "set", &format!("p{d}"), "up"]).unwrap();
    }

    #[test]
    fn routing_is_claimed_added_checked_and_removed_without_a_trace() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("routing").unwrap();
        veth(&ns, "tun0");
        veth(&ns, "wan0");
        ns.ip(&["addr", "add", "192.0.2.1/32", "dev", "wan0"]).unwrap();
        ns.ip(&["route", "add", "default", "dev", "wan0"]).unwrap();
        let before = snapshot(&ns);

        let (mut r, cleaned) = ns.run(|| TunnelRouting::claim(CFG)).unwrap().unwrap();
        assert_eq!(cleaned, Cleaned::default());
        ns.run(|| {
            r.attach("tun0").unwrap();
            // A full tunnel whose local side includes the gateway's own
            // address, and a narrower child inside it (no more rules).
            r.add(
                &[p("10.1.0.0/24"), p("192.0.2.1/32"), p("fd00:1::/64")],
                &[p("0.0.0.0/0"), p("::/0")],
            )
            .unwrap();
            r.add(&[p("10.1.0.128/25")], &[p("0.0.0.0/0")]).unwrap();
            r.add(&[p("10.1.0.0/24")], &[p("0.0.0.0/0")]).unwrap(); // again: routes set again, nothing doubled
        })
        .unwrap();
        assert_eq!(r.rules().len(), 2 + 2 * 2 + 2 + 2, "{:?}", r.rules());
        let rules4 = String::from_utf8_lossy(&ns.ip(&["-4", "rule"]).unwrap().stdout).into_owned();
        for want in [
            "220:\tfrom all fwmark 0xdc goto 222 proto 229",
            "221:\tfrom 10.1.0.0/24 lookup main suppress_prefixlength 0 proto 229",
            "221:\tfrom 10.1.0.0/24 lookup 220 proto 229",
            "221:\tfrom 192.0.2.1 lookup 220 proto 229",
            "222:\tfrom all nop proto 229",
        ] {
            assert!(rules4.contains(want), "{want:?} not in\n{rules4}");
        }
        assert_eq!(rules4.matches("10.1.0.0/24 lookup 220").count(), 1, "{rules4}");
        let t = String::from_utf8_lossy(&ns.ip(&["route", "show", "table", "220"]).unwrap().stdout).into_owned();
        assert_eq!(t.trim(), "default dev tun0 proto 229 scope link", "{t}");
        let main_now =
            String::from_utf8_lossy(&ns.ip(&["route", "show", "table", "main"]).unwrap().stdout).into_owned();
        assert!(before.contains(&main_now), "the main table changed:\n{main_now}");

        // The kernel's view: the daemon's own packets (marked) from its own
        // address go out the WAN; unmarked, they enter the tunnel.
        let get = |mark: &str| {
            let o = ns
                .ip(&["route", "get", "198.51.100.1", "from", "192.0.2.1", "mark", mark])
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        assert!(get("0xdc").contains("dev wan0"), "{}", get("0xdc"));
        assert!(get("0").contains("dev tun0"), "{}", get("0"));
        let path = ns
            .run(|| r.check_peer("198.51.100.1".parse().unwrap(), "192.0.2.1".parse().ok()))
            .unwrap()
            .unwrap();
        assert_eq!(path, PeerPath::Via("wan0".into()));

        // Someone routes the peer into the tunnel device in the main table:
        // refused, naming the route.
        ns.ip(&["route", "add", "198.51.100.1/32", "dev", "tun0"]).unwrap();
        let e = ns
            .run(|| r.check_peer("198.51.100.1".parse().unwrap(), "192.0.2.1".parse().ok()))
            .unwrap()
            .unwrap_err();
        assert!(
            e.to_string().contains("peer 198.51.100.1 would be routed into tun0"),
            "{e}"
        );
        ns.ip(&["route", "del", "198.51.100.1/32", "dev", "tun0"]).unwrap();
        ns.ip(&["route", "del", "default", "dev", "wan0"]).unwrap();
        let none = ns
            .run(|| r.check_peer("198.51.100.1".parse().unwrap(), "192.0.2.1".parse().ok()))
            .unwrap()
            .unwrap();
        assert_eq!(none, PeerPath::Unreachable);
        ns.ip(&["route", "add", "default", "dev", "wan0"]).unwrap();

        // A daemon that dies leaves its rules and routes; the next claim
        // removes exactly those, and a second one finds nothing.
        std::mem::forget(r);
        let (mut again, cleaned) = ns.run(|| TunnelRouting::claim(CFG)).unwrap().unwrap();
        assert_eq!(cleaned, Cleaned { rules: 10, routes: 2 });
        assert_eq!(snapshot(&ns), before);
        ns.run(|| {
            again.attach("tun0").unwrap();
            again.add(&[p("10.1.0.0/24")], &[p("10.2.0.0/24")]).unwrap();
        })
        .unwrap();
        assert!(ns.run(|| again.remove_all()).unwrap().is_empty());
        assert_eq!(snapshot(&ns), before);
        // Dropping removes what is left too.
        ns.run(|| again.add(&[p("fd00:1::/64")], &[p("fd00:2::/64")]).unwrap())
            .unwrap();
        assert_ne!(snapshot(&ns), before);
        drop(again);
        assert_eq!(snapshot(&ns), before);

        // Someone else's rule at our priorities, someone else's route in
        // our table: refused before anything changes.
        ns.ip(&["rule", "add", "priority", "221", "lookup", "100"]).unwrap();
        ns.ip(&["-6", "route", "add", "fd00:9::/64", "dev", "wan0", "table", "220"])
            .unwrap();
        let with_others = snapshot(&ns);
        let e = ns.run(|| TunnelRouting::claim(CFG)).unwrap().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("nothing was changed"), "{text}");
        assert!(
            text.contains("IPv4 rule '221: from all lookup 100' is not Esparto's"),
            "{text}"
        );
        assert!(
            text.contains("table 220 holds route 'fd00:9::/64 dev wan0 table 220 proto boot'"),
            "{text}"
        );
        assert_eq!(snapshot(&ns), with_others);
        // Elsewhere, it starts.
        let other = RoutingConfig {
            table: 1220,
            priority: 1220,
            mark: 0x4_0000,
        };
        let (o, _) = ns.run(|| TunnelRouting::claim(other)).unwrap().unwrap();
        drop(o);
    }
}
