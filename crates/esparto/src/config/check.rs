//! Checks across the whole file, run once every child has been parsed:
//! overlapping selectors between children, and SPIs used twice.
//!
//! **Overlaps.** The SPD is searched by packet; if two children both match
//! some packet, one of them is unreachable for it (RFC 4301 §4.4.1: the
//! SPD is ordered, and the first match wins; an unordered, decorrelated SPD
//! is what makes caching by flow correct). Two children overlap when a
//! local selector of one intersects a local selector of the other *and* a
//! remote selector of one intersects a remote selector of the other, with
//! compatible protocols: then there is a packet both claim. Outbound and
//! inbound policies are the same pairs read in opposite directions, so one
//! check covers both. The error names both children and where the other
//! one is. The check indexes selectors by address interval instead of
//! comparing every pair of children, so a 10,000-spoke hub loads in linear
//! time (see [`overlaps`]; `esparto-testbed bench setup` measures it).
//!
//! **SPIs.** Inbound SAs are found by SPI alone (RFC 4301 §4.1: "the SPI
//! alone suffices to specify an SA" for unicast), so an inbound SPI used
//! twice anywhere in the file is refused. Outbound SPIs are chosen by the
//! peer; two peers may pick the same one, so they must only be unique
//! towards one peer (within a connection).
//!
//! **What `run` would refuse.** Some files parse section by section yet
//! cannot start: a child with `start_action = "start"` on a connection
//! without `local_addrs` or `remote_addrs` (nothing to initiate from or
//! to), a `trap` without `remote_addrs`, connections whose outer addresses
//! mix IPv4 and IPv6 (one daemon binds one family). [`runnable`] makes
//! these errors here, so `check-config` fails where `run` would; a trap
//! without `local_addrs` (it can never initiate, though the peer can) and
//! a file with no connections at all are warnings. So is a `[daemon]
//! cpus` entry the checking process may not run on ([`cpus_allowed`]):
//! `run` refuses it, but the affinity `run` gets (a service manager's
//! `CPUAffinity`) may differ from `check-config`'s.

use std::collections::HashMap;

use esparto_esp::{Family, Selector};

use esparto_ike::StartAction;

use super::error::KeyPath;
use std::sync::Arc;

use super::layer::Grafted;
use super::model::Connection;
use super::tree::{Cx, Kind, Node, Span};

/// A value with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Located<T> {
    /// The value.
    pub(crate) value: T,
    /// Its position.
    pub(crate) span: Span,
    /// Its key path.
    pub(crate) path: KeyPath,
}

/// What the cross checks need to know about one child.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChildSeen {
    /// `connection/child`.
    pub(crate) name: String,
    /// The connection's name.
    pub(crate) connection: String,
    /// Resolved local selectors (`dynamic` without a known address is left out).
    pub(crate) local: Vec<Located<Selector>>,
    /// Resolved remote selectors.
    pub(crate) remote: Vec<Located<Selector>>,
    /// Inbound SPIs of static SAs.
    pub(crate) in_spis: Vec<Located<u32>>,
    /// Outbound SPIs of static SAs.
    pub(crate) out_spis: Vec<Located<u32>>,
    /// The keys of static SAs, in file order, by an id that reveals
    /// nothing of them (`key_id`).
    pub(crate) keys: Vec<Located<[u8; 16]>>,
}

/// Would one packet match both (local, remote) pairs?
fn pairs_overlap(l1: &Selector, r1: &Selector, l2: &Selector, r2: &Selector) -> bool {
    let (Some(l), Some(r)) = (l1.intersect(l2), r1.intersect(r2)) else {
        return false;
    };
    // One packet has one protocol: both intersections must allow it.
    l.proto == 0 || r.proto == 0 || l.proto == r.proto
}

/// Refuse children whose selectors claim the same traffic: each child that
/// overlaps an earlier one is reported once, against the first (in file
/// order) it overlaps, at the first of its selector pairs that does.
///
/// Comparing every child with every earlier one is O(n²) — FreeS/WAN's
/// start-up problem (200 tunnels took minutes). Instead each child's
/// (local, remote) selector pairs are rectangles in (local address, remote
/// address) space, indexed by their interval on each axis ([`Intervals`]).
/// A rectangle is looked up on the axis where fewer intervals meet it —
/// a hub's children share the local side and differ on the remote one, a
/// spoke's the other way round — and only those candidates are tested in
/// full (other axis, protocol, ports). Cost: O(n log n) plus the number of
/// candidates, which for a valid file is the pairs that overlap in both
/// address ranges yet differ in protocol or ports.
/// Returns how many candidate pairs were looked at (for the tests that
/// hold it to linear).
pub(crate) fn overlaps(cx: &mut Cx<'_>, children: &[Arc<ChildSeen>]) -> usize {
    let mut rects = Vec::new();
    for (child, c) in children.iter().enumerate() {
        for l in &c.local {
            for r in &c.remote {
                rects.push(Rect {
                    child,
                    local: &l.value,
                    remote: &r.value,
                });
            }
        }
    }
    let by_local = Intervals::new(rects.iter().map(|r| span_of(r.local)));
    let by_remote = Intervals::new(rects.iter().map(|r| span_of(r.remote)));
    // For each child, the first earlier child it overlaps.
    let mut first: Vec<Option<usize>> = vec![None; children.len()];
    let mut candidates = 0;
    for b in &rects {
        let (l, r) = (span_of(b.local), span_of(b.remote));
        let on_local = by_local.count(l) <= by_remote.count(r);
        let (index, axis) = if on_local {
            (&by_local, l)
        } else {
            (&by_remote, r)
        };
        let found = &mut first[b.child];
        index.visit(axis, &mut |j| {
            candidates += 1;
            let a = &rects[j];
            if a.child < b.child
                && found.is_none_or(|f| a.child < f)
                && pairs_overlap(a.local, a.remote, b.local, b.remote)
            {
                *found = Some(a.child);
            }
        });
    }
    for (j, b) in children.iter().enumerate() {
        if let Some(i) = first[j] {
            report_overlap(cx, &children[i], b);
        }
    }
    candidates
}

/// [`overlaps`] when `children[..from]` are known to hold no overlap
/// among themselves: only the children from `from` on are compared, each
/// with every earlier one (for a few children added to a checked list,
/// cheaper than indexing them all again). Reports exactly what
/// [`overlaps`] would: each against the first earlier child it overlaps.
pub(crate) fn overlaps_after(cx: &mut Cx<'_>, children: &[Arc<ChildSeen>], from: usize) {
    let meet = |a: &ChildSeen, b: &ChildSeen| {
        a.local.iter().any(|la| {
            a.remote.iter().any(|ra| {
                b.local
                    .iter()
                    .any(|lb| b.remote.iter().any(|rb| pairs_overlap(&la.value, &ra.value, &lb.value, &rb.value)))
            })
        })
    };
    for (j, b) in children.iter().enumerate().skip(from) {
        if let Some(a) = children[..j].iter().find(|a| meet(a, b)) {
            report_overlap(cx, a, b);
        }
    }
}

/// One (local, remote) selector pair of a child.
struct Rect<'a> {
    child: usize,
    local: &'a Selector,
    remote: &'a Selector,
}

/// A point on an address axis: families never meet, so the family orders
/// first and a selector's range stays within one family.
type Point = (Family, u128);

fn span_of(ts: &Selector) -> (Point, Point) {
    let (lo, hi) = ts.addrs.bits();
    let f = ts.addrs.family();
    ((f, lo), (f, hi))
}

/// Closed intervals on one axis, for "which intervals meet [s, e]?":
/// sorted by start, with a max-of-ends tree over that order, so a query
/// walks down only into runs that hold an interval reaching `s`
/// (O((k + 1) log n) for k answers); and the ends sorted apart, to count
/// the answers in O(log n) before choosing an axis.
struct Intervals {
    /// (start, end, rectangle) by start.
    items: Vec<(Point, Point, usize)>,
    starts: Vec<Point>,
    ends: Vec<Point>,
    /// Implicit binary tree over `items` (leaves from `leaves`): max end.
    max_end: Vec<Point>,
    leaves: usize,
}

impl Intervals {
    fn new(spans: impl Iterator<Item = (Point, Point)>) -> Self {
        let mut items: Vec<_> = spans.enumerate().map(|(i, (s, e))| (s, e, i)).collect();
        items.sort_unstable_by_key(|&(s, _, _)| s);
        let starts: Vec<Point> = items.iter().map(|&(s, _, _)| s).collect();
        let mut ends: Vec<Point> = items.iter().map(|&(_, e, _)| e).collect();
        ends.sort_unstable();
        let leaves = items.len().next_power_of_two();
        // Padding leaves hold the smallest point; they lie past every
        // query's prefix and are never reported.
        let mut max_end = vec![(Family::V4, 0); 2 * leaves];
        for (i, &(_, e, _)) in items.iter().enumerate() {
            max_end[leaves + i] = e;
        }
        for n in (1..leaves).rev() {
            max_end[n] = max_end[2 * n].max(max_end[2 * n + 1]);
        }
        Intervals {
            items,
            starts,
            ends,
            max_end,
            leaves,
        }
    }

    /// How many intervals meet `[s, e]`: those starting at or before `e`,
    /// less those ending before `s` (which all start before `e` too).
    fn count(&self, (s, e): (Point, Point)) -> usize {
        let started = self.starts.partition_point(|&p| p <= e);
        let ended = self.ends.partition_point(|&p| p < s);
        started.saturating_sub(ended)
    }

    /// Call `f` with the rectangle of every interval meeting `[s, e]`.
    fn visit(&self, (s, e): (Point, Point), f: &mut dyn FnMut(usize)) {
        let prefix = self.starts.partition_point(|&p| p <= e);
        self.walk(1, 0, self.leaves, prefix, s, f);
    }

    fn walk(
        &self,
        node: usize,
        lo: usize,
        hi: usize,
        prefix: usize,
        s: Point,
        f: &mut dyn FnMut(usize),
    ) {
        if lo >= prefix || self.max_end[node] < s {
            return;
        }
        if hi - lo == 1 {
            f(self.items[lo].2);
            return;
        }
        let mid = lo + (hi - lo) / 2;
        self.walk(2 * node, lo, mid, prefix, s, f);
        self.walk(2 * node + 1, mid, hi, prefix, s, f);
    }
}

/// The error for child `b` overlapping the earlier child `a`, at the first
/// of `b`'s selector pairs (in file order) that meets one of `a`'s.
fn report_overlap(cx: &mut Cx<'_>, a: &ChildSeen, b: &ChildSeen) {
    for lb in &b.local {
        for rb in &b.remote {
            for la in &a.local {
                for ra in &a.remote {
                    if pairs_overlap(&la.value, &ra.value, &lb.value, &rb.value) {
                        let msg = format!(
                            "{} <-> {} overlaps child {} ({} <-> {}, at {}): both would claim the same traffic and one of them would never see it",
                            lb.value,
                            rb.value,
                            a.name,
                            la.value,
                            ra.value,
                            cx.position(&la.span),
                        );
                        cx.err(&lb.span, &lb.path, msg);
                        return;
                    }
                }
            }
        }
    }
}

/// Refuse a static key used twice in the file: by two SAs, or in both
/// directions of one. Both ends would encrypt under one key with the same
/// sequence numbers, so AES-GCM nonces repeat (RFC 4106 §8.1), and
/// `esparto run` refuses it too.
pub(crate) fn static_keys(cx: &mut Cx<'_>, children: &[Arc<ChildSeen>]) {
    let mut seen: HashMap<[u8; 16], (Span, KeyPath)> = HashMap::new();
    for c in children {
        for k in &c.keys {
            match seen.get(&k.value) {
                Some((span, path)) => {
                    let msg = format!(
                        "the same key as {} (at {}): both ends would encrypt under one key with the same sequence numbers, so nonces repeat and the traffic can be read and forged (RFC 4106 §8.1); give every SA and each direction its own random key",
                        path.as_str(),
                        cx.position(span)
                    );
                    cx.err(&k.span, &k.path, msg);
                }
                None => {
                    seen.insert(k.value, (k.span.clone(), k.path.clone()));
                }
            }
        }
    }
}

/// Refuse an inbound SPI used twice in the file, or an outbound SPI used
/// twice towards one peer.
pub(crate) fn spis(cx: &mut Cx<'_>, children: &[Arc<ChildSeen>]) {
    let mut seen_in: HashMap<u32, (Span, String)> = HashMap::new();
    let mut seen_out: HashMap<(String, u32), (Span, String)> = HashMap::new();
    for c in children {
        for s in &c.in_spis {
            match seen_in.get(&s.value) {
                Some((span, name)) => {
                    let msg = format!(
                        "in_spi 0x{:08x} is already used by {name} (at {}): inbound SAs are looked up by SPI alone (RFC 4301 §4.1)",
                        s.value,
                        cx.position(span)
                    );
                    cx.err(&s.span, &s.path, msg);
                }
                None => {
                    seen_in.insert(s.value, (s.span.clone(), c.name.clone()));
                }
            }
        }
        for s in &c.out_spis {
            let key = (c.connection.clone(), s.value);
            match seen_out.get(&key) {
                Some((span, name)) => {
                    let msg = format!(
                        "out_spi 0x{:08x} is already used by {name} (at {}) towards the same peer",
                        s.value,
                        cx.position(span)
                    );
                    cx.err(&s.span, &s.path, msg);
                }
                None => {
                    seen_out.insert(key, (s.span.clone(), c.name.clone()));
                }
            }
        }
    }
}

/// The field `keys` (a path from the root) of the file, if written.
fn field_at<'a>(root: &'a Node, keys: &[&str]) -> Option<(&'a Node, KeyPath)> {
    let mut node = root;
    let mut path = KeyPath::root();
    for k in keys {
        node = &node.get(k)?.value;
        path = path.key(k);
    }
    Some((node, path))
}

/// Errors for what `esparto run` would refuse at start-up in a file whose
/// sections are each valid, and warnings for what would start but never
/// work (see the module essay).
pub(crate) fn runnable(cx: &mut Cx<'_>, root: &Node, connections: &[Arc<Connection>], grafted: &Grafted) {
    // Where a connection's key is: in the tree, or, for a kept walk of a
    // tree loaded over VICI, that tree's segment. Looked up only to
    // report (a lookup scans the connections).
    let at = |conn: &str, keys: &[&str]| -> Option<(Span, KeyPath)> {
        let mut full = vec!["connections", conn];
        full.extend_from_slice(keys);
        field_at(root, &full).map(|(n, p)| (n.span.clone(), p)).or_else(|| {
            let slot = grafted.conns.iter().find(|s| &*s.name == conn && s.kept.is_some())?;
            Some((slot.span.clone(), full.iter().fold(KeyPath::root(), |p, k| p.key(k))))
        })
    };
    if connections.is_empty() {
        match field_at(root, &["connections"]) {
            Some((n, p)) => cx.warn(&n.span, &p, NO_CONNECTIONS),
            None => cx.warn_default("connections", NO_CONNECTIONS),
        }
        return;
    }
    for conn in connections {
        let Some(ike) = &conn.ike else { continue };
        for child in &ike.children {
            if child.start_action == StartAction::None {
                continue;
            }
            // Not written: the default, `none`.
            let Some((span, p)) = at(&conn.name, &["children", &child.name, "start_action"]) else { continue };
            // Without local_addrs, the initiator sends from the source the
            // routing table gives towards the peer.
            if !conn.remote_addrs.is_empty() || !conn.remote_hosts.is_empty() {
                continue;
            }
            match child.start_action {
                StartAction::Start => cx.err(&span, &p, format!(
                    "start_action = \"start\" needs remote_addrs on connection {} (esparto run would refuse to start: it has no address to initiate to)",
                    conn.name
                )),
                StartAction::Trap => cx.err(&span, &p, format!(
                    "start_action = \"trap\" needs remote_addrs on connection {} (esparto run would refuse to start: traffic would have no peer to negotiate with)",
                    conn.name
                )),
                StartAction::None => {}
            }
        }
    }
    // Both families may be served at once (dual-stack sockets), but a
    // peer is reached from a local address of its own family.
    for conn in connections {
        if conn.local_addrs.is_empty() {
            continue;
        }
        for a in &conn.remote_addrs {
            if conn.local_addrs.iter().any(|l| l.is_ipv6() == a.is_ipv6()) {
                continue;
            }
            let Some((span, p)) = at(&conn.name, &["remote_addrs"]) else { continue };
            let family = if a.is_ipv6() { "IPv6" } else { "IPv4" };
            cx.err(&span, &p, format!(
                "{a}: local_addrs of connection {} has no {family} address to reach it from (add one, or leave local_addrs out for the routing table's choice)",
                conn.name
            ));
        }
    }
}

/// Warn at each `[daemon] cpus` entry that `allowed` (the CPUs this
/// process may run on; empty: unknown) does not hold.
pub(crate) fn cpus_allowed(cx: &mut Cx<'_>, root: &Node, cpus: &[usize], allowed: &[usize]) {
    if allowed.is_empty() {
        return;
    }
    let Some((Node { kind: Kind::Array(items), .. }, path)) = field_at(root, &["daemon", "cpus"]) else {
        return;
    };
    for (i, (c, n)) in cpus.iter().zip(items).enumerate() {
        if !allowed.contains(c) {
            cx.warn(&n.span, &path.index(i), format!(
                "esparto run would refuse to start: CPU {c} is not one this process may run on (allowed: {allowed:?})"
            ));
        }
    }
}

const NO_CONNECTIONS: &str =
    "no connections: the daemon would start and carry no traffic";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Selector {
        s.parse().unwrap()
    }

    #[test]
    fn overlap_needs_both_sides_and_a_common_protocol() {
        let (l, r) = (ts("10.1.0.0/16"), ts("10.2.0.0/16"));
        assert!(pairs_overlap(&l, &r, &ts("10.1.2.0/24"), &ts("10.0.0.0/8")));
        // Same local side, disjoint remote sides: no packet matches both.
        assert!(!pairs_overlap(&l, &r, &l, &ts("10.3.0.0/16")));
        // Same addresses, different protocols on the two sides of one packet.
        assert!(!pairs_overlap(
            &l,
            &r,
            &ts("10.1.0.0/16[tcp]"),
            &ts("10.2.0.0/16[udp]")
        ));
        assert!(pairs_overlap(
            &l,
            &r,
            &ts("10.1.0.0/16[tcp]"),
            &ts("10.2.0.0/16")
        ));
        // Disjoint ports.
        assert!(!pairs_overlap(
            &ts("10.1.0.0/16[tcp/80]"),
            &r,
            &ts("10.1.0.0/16[tcp/443]"),
            &r
        ));
        // Families never overlap.
        assert!(!pairs_overlap(&l, &r, &ts("fd00::/8"), &ts("fd01::/16")));
    }

    /// The check as it was, comparing every child with every earlier one
    /// (O(n²)): the oracle for the indexed one.
    fn overlaps_naive(cx: &mut Cx<'_>, children: &[ChildSeen]) {
        for (j, b) in children.iter().enumerate() {
            if let Some(a) = children[..j].iter().find(|a| {
                b.local.iter().any(|lb| {
                    b.remote.iter().any(|rb| {
                        a.local.iter().any(|la| {
                            a.remote
                                .iter()
                                .any(|ra| pairs_overlap(&la.value, &ra.value, &lb.value, &rb.value))
                        })
                    })
                })
            }) {
                report_overlap(cx, a, b);
            }
        }
    }

    /// A file text long enough for every span the generators make.
    fn text() -> String {
        "x = 1\n".repeat(400)
    }

    fn child(n: usize, local: &[Selector], remote: &[Selector]) -> ChildSeen {
        let at = |k: usize, v: &Selector, side: &str| Located {
            value: *v,
            span: (n * 20 + k)..(n * 20 + k + 1),
            path: KeyPath::root().key(&format!("c{n}")).key(side),
        };
        ChildSeen {
            name: format!("conn{n}/c{n}"),
            connection: format!("conn{n}"),
            local: local
                .iter()
                .enumerate()
                .map(|(k, v)| at(k, v, "local_ts"))
                .collect(),
            remote: remote
                .iter()
                .enumerate()
                .map(|(k, v)| at(10 + k, v, "remote_ts"))
                .collect(),
            in_spis: vec![],
            out_spis: vec![],
            keys: vec![],
        }
    }

    fn errors(children: &[ChildSeen], naive: bool) -> Vec<crate::config::ConfigError> {
        let t = text();
        let mut cx = Cx::new("t.toml".into(), &t, std::path::PathBuf::from("."));
        if naive {
            overlaps_naive(&mut cx, children);
        } else {
            overlaps(&mut cx, &children.iter().cloned().map(Arc::new).collect::<Vec<_>>());
        }
        cx.into_errors()
    }

    #[test]
    fn hub_children_differ_only_on_the_remote_side() {
        let lan = ts("10.0.0.0/16");
        let mut cs: Vec<ChildSeen> = (0..200u32)
            .map(|i| child(i as usize, &[lan], &[ts(&format!("10.128.{}.0/24", i))]))
            .collect();
        assert!(errors(&cs, false).is_empty());
        // One more spoke claiming spoke 7's LAN (and more): reported against 7.
        cs.push(child(
            200,
            &[ts("10.0.1.0/24")],
            &[ts("10.128.7.128/25"), ts("10.128.3.0/24")],
        ));
        let e = errors(&cs, false);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].message.contains("overlaps child conn3/c3"),
            "{}",
            e[0].message
        );
        assert_eq!(e, errors(&cs, true));
    }

    /// The work stays linear for a hub (same local side, distinct remote
    /// sides) and for a spoke of many hubs (the other way round): each
    /// rectangle meets only itself on the axis chosen for it. Comparing
    /// every pair would look at n(n-1)/2 = 1,999,000.
    #[test]
    fn hub_and_spoke_files_cost_one_candidate_per_child() {
        let t = text();
        let n = 2000;
        let shapes: [&dyn Fn(u32) -> ChildSeen; 2] = [
            &|i| {
                child(
                    i as usize,
                    &[ts("10.0.0.0/16")],
                    &[ts(&format!("10.{}.{}.0/24", 128 + i / 256, i % 256))],
                )
            },
            &|i| {
                child(
                    i as usize,
                    &[ts(&format!("10.{}.{}.0/24", 128 + i / 256, i % 256))],
                    &[ts("10.0.0.0/8")],
                )
            },
        ];
        for shape in shapes {
            let cs: Vec<Arc<ChildSeen>> = (0..n).map(shape).map(Arc::new).collect();
            let mut cx = Cx::new("t.toml".into(), &t, std::path::PathBuf::from("."));
            assert_eq!(overlaps(&mut cx, &cs), n as usize);
            assert!(!cx.has_errors());
        }
    }

    #[test]
    fn ports_and_protocols_keep_address_twins_apart() {
        let (l, r) = (ts("10.1.0.0/16"), ts("10.2.0.0/16"));
        let cs = vec![
            child(0, &[ts("10.1.0.0/16[tcp/80]")], &[r]),
            child(1, &[ts("10.1.0.0/16[tcp/443]")], &[r]),
            child(2, &[ts("10.1.0.0/16[udp]")], &[r]),
            child(3, &[ts("fd00::/16")], &[ts("fd01::/16")]),
            child(4, &[l], &[ts("10.2.9.0/24[tcp]")]),
        ];
        let e = errors(&cs, false);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].message.contains("conn0/c0"), "{}", e[0].message);
        assert_eq!(e, errors(&cs, true));
    }

    #[test]
    fn intervals_count_and_visit_what_meets_a_range() {
        let v4 = |a: u128, b: u128| ((Family::V4, a), (Family::V4, b));
        let spans = [
            v4(0, 10),
            v4(5, 6),
            v4(20, 30),
            v4(8, 25),
            ((Family::V6, 0), (Family::V6, 100)),
        ];
        let ix = Intervals::new(spans.iter().copied());
        for q in [
            v4(0, 4),
            v4(6, 7),
            v4(11, 19),
            v4(26, 40),
            v4(31, 40),
            ((Family::V6, 50), (Family::V6, 50)),
        ] {
            let mut got = vec![];
            ix.visit(q, &mut |i| got.push(i));
            got.sort();
            let want: Vec<usize> = (0..spans.len())
                .filter(|&i| spans[i].0 <= q.1 && q.0 <= spans[i].1)
                .collect();
            assert_eq!(got, want, "{q:?}");
            assert_eq!(ix.count(q), want.len(), "{q:?}");
        }
        let empty = Intervals::new(std::iter::empty());
        empty.visit(v4(0, 1), &mut |_| panic!("nothing to visit"));
        assert_eq!(empty.count(v4(0, 1)), 0);
    }

    /// Selectors from a small space, so that overlaps are common.
    fn arb_ts() -> impl Strategy<Value = Selector> {
        (
            0u32..64,
            0u32..16,
            prop_oneof![Just(0u8), Just(6u8), Just(17u8)],
            0u16..4,
            0u16..4,
            any::<bool>(),
        )
            .prop_map(|(start, len, proto, p0, p1, v6)| {
                let (lo, hi) = (start, (start + len).min(63));
                let s = if v6 {
                    format!("fd00::{lo:x}-fd00::{hi:x}")
                } else {
                    format!("10.0.0.{lo}-10.0.0.{hi}")
                };
                let mut t: Selector = s.parse().unwrap();
                if proto != 0 {
                    t.proto = proto;
                    t.port_start = p0.min(p1) * 100;
                    t.port_end = p0.max(p1) * 100 + 99;
                }
                t
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

        /// The indexed check reports exactly what comparing every pair did.
        #[test]
        fn indexed_check_equals_the_quadratic_one(
            sides in proptest::collection::vec(
                (proptest::collection::vec(arb_ts(), 1..3), proptest::collection::vec(arb_ts(), 1..3)),
                0..16,
            )
        ) {
            let cs: Vec<ChildSeen> =
                sides.iter().enumerate().map(|(n, (l, r))| child(n, l, r)).collect();
            prop_assert_eq!(errors(&cs, false), errors(&cs, true));
        }
    }
}
