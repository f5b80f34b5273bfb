//! The Security Policy Database (RFC 4301 §4.4.1).
//!
//! Every packet that comes out of the TUN device is looked up here by its
//! five-tuple; the first matching policy in priority order decides whether it
//! is protected (and by which SA group) or discarded. A packet no policy
//! covers is dropped: a gateway's TUN only carries traffic routed into the
//! tunnel, so "no policy" means misrouted traffic, not "send in clear".
//!
//! Lookup must stay fast with 10,000 policies. A linear scan would be 10,000
//! comparisons per packet; instead the database is compiled once per change
//! into an index over the *remote* (destination) address space of each
//! family: the boundaries of all policies' remote ranges cut the space into
//! elementary intervals, and each interval lists the policies covering it in
//! priority order. A lookup is a binary search for the interval followed by a
//! short scan of its candidates, checking the local address, protocol and
//! ports. Compiling is `O(n log n)` plus the total overlap, and the compiled
//! `Spd` is immutable: the control plane builds a new one and hands it to the
//! workers, who swap it in between batches (no lock on the per-packet path).
//!
//! Priority is deterministic: a lower `priority` value wins (as in XFRM);
//! equal priorities are broken by the order of insertion.

use crate::selector::{Family, TrafficSelector};

/// Identifies an SA group (see [`crate::SaGroup`]).
pub type GroupId = u32;

/// What to do with a packet a policy matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Protect with the SA group.
    Protect(GroupId),
    /// Drop it.
    Discard,
}

/// An outbound policy: packets from `local` to `remote` get `action`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Selector on the packet's source (our side of the tunnel).
    pub local: TrafficSelector,
    /// Selector on the packet's destination (the peer's side).
    pub remote: TrafficSelector,
    /// What happens to matching packets.
    pub action: Action,
    /// Lower values win.
    pub priority: u32,
}

impl Policy {
    /// A priority favouring specific selectors, as strongSwan computes it:
    /// longer prefixes and narrower protocol/port choices win.
    pub fn auto_priority(local: &TrafficSelector, remote: &TrafficSelector) -> u32 {
        fn weight(ts: &TrafficSelector) -> u32 {
            let (s, e) = ts.addrs.bits();
            let host_bits = 128 - (e - s).leading_zeros(); // 0 for a single host
            let proto = if ts.proto == 0 { 1 } else { 0 };
            let ports = if ts.port_start == 0 && ts.port_end == u16::MAX { 1 } else { 0 };
            host_bits * 4 + proto * 2 + ports
        }
        1000 + weight(local) + weight(remote)
    }
}

/// The five-tuple fields a policy lookup needs, in integer form.
pub use esparto_wire::ip::FlowKey;

/// One family's compiled index.
#[derive(Debug, Clone, Default)]
struct Index {
    /// Sorted interval start points; interval `i` is `points[i]..points[i+1]`.
    points: Vec<u128>,
    /// `cands[offsets[i]..offsets[i+1]]` are the policies covering interval `i`.
    offsets: Vec<u32>,
    cands: Vec<u32>,
}

impl Index {
    fn build(policies: &[Policy], order: &[u32], family: Family) -> Self {
        let mine: Vec<u32> = order
            .iter()
            .copied()
            .filter(|&i| policies[i as usize].remote.addrs.family() == family)
            .collect();
        if mine.is_empty() {
            return Self::default();
        }
        let mut points: Vec<u128> = Vec::with_capacity(mine.len() * 2);
        for &i in &mine {
            let (s, e) = policies[i as usize].remote.addrs.bits();
            points.push(s);
            if let Some(next) = e.checked_add(1) {
                points.push(next);
            }
        }
        points.sort_unstable();
        points.dedup();
        // Count, then fill: policies in `mine` are already in priority order,
        // so each interval's list comes out sorted.
        let n = points.len();
        let mut counts = vec![0u32; n + 1];
        let span = |i: u32| {
            let (s, e) = policies[i as usize].remote.addrs.bits();
            let first = points.partition_point(|&p| p <= s) - 1;
            let last = points.partition_point(|&p| p <= e) - 1;
            (first, last)
        };
        for &i in &mine {
            let (first, last) = span(i);
            for c in &mut counts[first..=last] {
                *c += 1;
            }
        }
        let mut offsets = Vec::with_capacity(n + 1);
        let mut acc = 0u32;
        for c in &counts[..n] {
            offsets.push(acc);
            acc += c;
        }
        offsets.push(acc);
        let mut fill: Vec<u32> = offsets[..n].to_vec();
        let mut cands = vec![0u32; acc as usize];
        for &i in &mine {
            let (first, last) = span(i);
            for slot in first..=last {
                cands[fill[slot] as usize] = i;
                fill[slot] += 1;
            }
        }
        Self { points, offsets, cands }
    }

    #[inline]
    fn candidates(&self, dst: u128) -> &[u32] {
        let idx = self.points.partition_point(|&p| p <= dst);
        if idx == 0 {
            return &[];
        }
        let i = idx - 1;
        &self.cands[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A compiled, immutable policy database.
#[derive(Debug, Clone, Default)]
pub struct Spd {
    policies: Vec<Policy>,
    v4: Index,
    v6: Index,
}

impl Spd {
    /// Compiles `policies` (their order breaks priority ties).
    pub fn new(policies: Vec<Policy>) -> Self {
        let mut order: Vec<u32> = (0..policies.len() as u32).collect();
        order.sort_by_key(|&i| (policies[i as usize].priority, i));
        let v4 = Index::build(&policies, &order, Family::V4);
        let v6 = Index::build(&policies, &order, Family::V6);
        Self { policies, v4, v6 }
    }

    /// The policies, in insertion order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether there are no policies.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The highest-priority policy matching an outbound packet.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<&Policy> {
        let (index, family) = if key.v6 { (&self.v6, Family::V6) } else { (&self.v4, Family::V4) };
        index.candidates(key.dst).iter().map(|&i| &self.policies[i as usize]).find(|p| {
            p.remote.matches(family, key.dst, key.proto, key.dst_port)
                && p.local.matches(family, key.src, key.proto, key.src_port)
        })
    }

    /// Linear-scan reference lookup (for tests and benchmarks).
    pub fn lookup_linear(&self, key: &FlowKey) -> Option<&Policy> {
        self.policies
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                let family = if key.v6 { Family::V6 } else { Family::V4 };
                p.remote.matches(family, key.dst, key.proto, key.dst_port)
                    && p.local.matches(family, key.src, key.proto, key.src_port)
            })
            .min_by_key(|(i, p)| (p.priority, *i))
            .map(|(_, p)| p)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::selector::addr_bits;
    use std::net::IpAddr;

    fn pol(local: &str, remote: &str, group: GroupId, priority: u32) -> Policy {
        Policy {
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            action: Action::Protect(group),
            priority,
        }
    }

    fn key(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> FlowKey {
        let (family, src) = addr_bits(src.parse::<IpAddr>().unwrap());
        let (_, dst) = addr_bits(dst.parse::<IpAddr>().unwrap());
        FlowKey { v6: family == Family::V6, src, dst, proto, src_port: sport, dst_port: dport }
    }

    #[test]
    fn priority_and_ties_are_deterministic() {
        let spd = Spd::new(vec![
            pol("10.1.0.0/16", "10.2.0.0/16", 1, 100),
            pol("10.1.0.0/16", "10.2.3.0/24", 2, 50),
            pol("10.1.0.0/16", "10.2.3.0/24[tcp/22]", 3, 50),
            pol("10.1.0.0/16", "10.2.0.0/16", 4, 100),
        ]);
        let g = |k: FlowKey| match spd.lookup(&k).map(|p| p.action) {
            Some(Action::Protect(g)) => Some(g),
            _ => None,
        };
        assert_eq!(g(key("10.1.0.1", "10.2.9.9", 6, 1000, 80)), Some(1), "insertion order breaks tie");
        assert_eq!(g(key("10.1.0.1", "10.2.3.9", 6, 1000, 22)), Some(2), "same priority: first inserted");
        assert_eq!(g(key("10.1.0.1", "10.2.3.9", 17, 1000, 53)), Some(2));
        assert_eq!(g(key("10.9.0.1", "10.2.3.9", 17, 1000, 53)), None, "source outside local");
        assert_eq!(g(key("10.1.0.1", "10.3.0.1", 17, 1000, 53)), None);
    }

    #[test]
    fn families_are_separate_and_extremes_work() {
        let spd = Spd::new(vec![
            pol("0.0.0.0/0", "0.0.0.0/0", 1, 10),
            pol("::/0", "::/0", 2, 10),
            pol("fd00::/8", "fd00:2::/32", 3, 5),
        ]);
        assert_eq!(spd.lookup(&key("1.2.3.4", "255.255.255.255", 0, 0, 0)).unwrap().action, Action::Protect(1));
        assert_eq!(spd.lookup(&key("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0, 0, 0)).unwrap().action, Action::Protect(2));
        assert_eq!(spd.lookup(&key("fd00::1", "fd00:2::1", 0, 0, 0)).unwrap().action, Action::Protect(3));
        assert!(Spd::new(vec![]).lookup(&key("1.2.3.4", "5.6.7.8", 0, 0, 0)).is_none());
    }

    /// The index agrees with a linear scan on many overlapping policies.
    #[test]
    fn index_matches_linear_scan() {
        let mut x: u64 = 42;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut policies = Vec::new();
        for i in 0..500u32 {
            let len = 8 + (next() % 25) as u8;
            let base = (next() as u32) & (u32::MAX << (32 - len));
            let remote = format!("{}/{}", std::net::Ipv4Addr::from(base), len);
            let local = if i % 3 == 0 { "10.0.0.0/8".to_string() } else { "0.0.0.0/0".to_string() };
            let mut p = pol(&local, &remote, i, (next() % 20) as u32);
            if i % 5 == 0 {
                p.remote.proto = 17;
                p.remote.port_start = 1000;
                p.remote.port_end = 2000;
            }
            policies.push(p);
        }
        let spd = Spd::new(policies);
        for _ in 0..20_000 {
            let src = if next() % 2 == 0 { 0x0a00_0001 } else { next() as u32 };
            let k = FlowKey {
                v6: false,
                src: u128::from(src),
                dst: u128::from(next() as u32),
                proto: if next() % 2 == 0 { 17 } else { 6 },
                src_port: 5,
                dst_port: (next() % 3000) as u16,
            };
            assert_eq!(spd.lookup(&k), spd.lookup_linear(&k));
        }
    }
}
