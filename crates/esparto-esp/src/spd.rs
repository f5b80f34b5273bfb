//! The Security Policy Database (RFC 4301 §4.4.1).
//!
//! Every packet that comes out of the TUN device is looked up here by its
//! five-tuple; the first matching policy in priority order decides whether it
//! is protected (and by which SA group) or discarded. A packet no policy
//! covers is dropped: a gateway's TUN only carries traffic routed into the
//! tunnel, so "no policy" means misrouted traffic, not "send in clear".
//!
//! Two costs matter, and neither may grow with the number of tunnels: a
//! lookup (per packet that misses the worker's flow cache) and a change
//! (per tunnel that comes or goes; every worker applies each one). A
//! linear scan would be 10,000 comparisons per packet at 10,000 policies,
//! and an index compiled once per change would make each change cost the
//! whole database. So the database is an index kept up to date one policy
//! at a time, over the *remote* (destination) address space of each family:
//! the boundaries of all policies' remote ranges cut the space into
//! elementary intervals, and each interval lists the policies covering it
//! in priority order. A lookup is a binary search for the interval followed
//! by a short scan of its candidates, checking the local address, protocol
//! and ports.
//!
//! The intervals are kept sorted in chunks of at most [`CHUNK_MAX`]: a
//! binary search over the chunks' first starts, then one within the chunk,
//! costs the same comparisons as one search over a flat array, while
//! adding or removing an interval moves at most a chunk's entries (plus,
//! when a chunk splits or merges, the short array of chunk heads). Adding
//! a policy splits at most two intervals and adds it to the intervals its
//! remote range spans; removing it takes it out of them and merges the two
//! boundaries it no longer justifies. Its cost is thus logarithmic in the
//! number of intervals plus the policy's overlap with others (a catch-all
//! spans every interval; disjoint sites span one or two).
//!
//! Policies are named by a [`PolicyId`] the control plane chooses, so it can
//! remove exactly the ones it added; every worker applies the same changes
//! in the same order and so holds the same database.
//!
//! Priority is deterministic: a lower `priority` value wins (as in XFRM);
//! equal priorities are broken by the order of insertion.

use smallvec::SmallVec;

use crate::selector::{Family, Selector};

/// Identifies an SA group (see [`crate::SaGroup`]).
pub type GroupId = u32;

/// Identifies a policy in an [`Spd`] (chosen by whoever inserts it; small
/// integers, reused after removal, keep the database's table dense).
pub type PolicyId = u32;

/// Most elementary intervals in one chunk of an index.
const CHUNK_MAX: usize = 64;
/// Fewest intervals a chunk keeps when it has a neighbour to merge with.
const CHUNK_MIN: usize = CHUNK_MAX / 4;

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
    pub local: Selector,
    /// Selector on the packet's destination (the peer's side).
    pub remote: Selector,
    /// What happens to matching packets.
    pub action: Action,
    /// Lower values win.
    pub priority: u32,
}

impl Policy {
    /// A priority favouring specific selectors, as strongSwan computes it:
    /// longer prefixes and narrower protocol/port choices win.
    pub fn auto_priority(local: &Selector, remote: &Selector) -> u32 {
        fn weight(ts: &Selector) -> u32 {
            let (s, e) = ts.addrs.bits();
            let host_bits = 128 - (e - s).leading_zeros(); // 0 for a single host
            let proto = if ts.proto == 0 { 1 } else { 0 };
            let ports = if ts.port_start == 0 && ts.port_end == u16::MAX {
                1
            } else {
                0
            };
            host_bits * 4 + proto * 2 + ports
        }
        1000 + weight(local) + weight(remote)
    }
}

/// The five-tuple fields a policy lookup needs, in integer form.
pub use esparto_wire::ip::FlowKey;

/// The policies covering one elementary interval, best first (most cover
/// one or two: a site's own policy and a catch-all).
type Cands = SmallVec<[PolicyId; 2]>;

/// A policy as stored: with the order it was inserted in, which breaks
/// priority ties.
#[derive(Debug, Clone)]
struct Stored {
    policy: Policy,
    seq: u64,
}

/// Which of two stored policies comes first.
fn rank(by_id: &[Option<Stored>], id: PolicyId) -> (u32, u64) {
    by_id
        .get(id as usize)
        .and_then(Option::as_ref)
        .map_or((u32::MAX, u64::MAX), |s| (s.policy.priority, s.seq))
}

/// An address as an index key: `u32` for IPv4 (half the memory and
/// cheaper comparisons on the lookup path), `u128` for IPv6.
trait Key: Copy + Ord + Default + core::fmt::Debug {
    /// The last address of the family.
    const MAX: Self;
    /// From the `u128` form selectors use (the family's bits only).
    fn from_bits(bits: u128) -> Self;
    /// The next address (never called on `MAX`).
    fn next(self) -> Self;
}

impl Key for u32 {
    const MAX: Self = u32::MAX;
    fn from_bits(bits: u128) -> Self {
        u32::try_from(bits).unwrap_or(u32::MAX)
    }
    fn next(self) -> Self {
        self.saturating_add(1)
    }
}

impl Key for u128 {
    const MAX: Self = u128::MAX;
    fn from_bits(bits: u128) -> Self {
        bits
    }
    fn next(self) -> Self {
        self.saturating_add(1)
    }
}

/// The index of the last element of the ascending, non-empty `xs` that is
/// at most `x` (0 if none is). A binary search without a data-dependent
/// branch: the lookup path's searches are unpredictable by nature.
#[inline]
fn last_at_or_below<K: Key>(xs: &[K], x: K) -> usize {
    let mut base = 0usize;
    let mut size = xs.len();
    while size > 1 {
        let half = size / 2;
        let mid = base + half;
        base = if xs.get(mid).is_some_and(|&m| m <= x) {
            mid
        } else {
            base
        };
        size -= half;
    }
    base
}

/// A run of consecutive elementary intervals.
#[derive(Debug, Clone, Default)]
struct Chunk<K> {
    /// Each interval's first address, ascending.
    starts: Vec<K>,
    /// Each interval's candidates.
    cands: Vec<Cands>,
}

/// One family's index: every address of the family lies in exactly one
/// elementary interval (the first starts at 0).
#[derive(Debug, Clone)]
struct Index<K> {
    /// `heads[c] == chunks[c].starts[0]`.
    heads: Vec<K>,
    chunks: Vec<Chunk<K>>,
}

impl<K: Key> Index<K> {
    fn new() -> Self {
        Self {
            heads: vec![K::default()],
            chunks: vec![Chunk {
                starts: vec![K::default()],
                cands: vec![Cands::new()],
            }],
        }
    }

    /// The chunk and position of the interval holding `addr`.
    #[inline]
    fn locate(&self, addr: K) -> (usize, usize) {
        // heads[0] is the family's first address, so both searches find
        // at least one entry.
        let c = last_at_or_below(&self.heads, addr);
        let i = last_at_or_below(&self.chunks[c].starts, addr);
        (c, i)
    }

    #[inline]
    fn candidates(&self, addr: K) -> &[PolicyId] {
        let (c, i) = self.locate(addr);
        &self.chunks[c].cands[i]
    }

    /// Number of elementary intervals.
    fn intervals(&self) -> usize {
        self.chunks.iter().map(|c| c.starts.len()).sum()
    }

    /// Makes `addr` the start of an interval (a copy of the one it cut).
    fn split(&mut self, addr: K) {
        let (c, i) = self.locate(addr);
        if self.chunks[c].starts[i] == addr {
            return;
        }
        let cands = self.chunks[c].cands[i].clone();
        self.insert_at(c, i + 1, addr, cands);
    }

    /// Merges the interval starting at `addr` into the one before it if
    /// both have the same candidates (no policy starts or ends there).
    fn merge(&mut self, addr: K) {
        let (c, i) = self.locate(addr);
        if addr == K::default() || self.chunks[c].starts[i] != addr {
            return;
        }
        let before = if i > 0 {
            self.chunks[c].cands.get(i - 1)
        } else {
            self.chunks[c - 1].cands.last()
        };
        if before == Some(&self.chunks[c].cands[i]) {
            self.remove_at(c, i);
        }
    }

    /// Calls `f` on the candidates of every interval within `start..=end`.
    fn each_in(&mut self, start: K, end: K, mut f: impl FnMut(&mut Cands)) {
        let (mut c, mut i) = self.locate(start);
        while c < self.chunks.len() {
            let chunk = &mut self.chunks[c];
            if chunk.starts[i] > end {
                return;
            }
            f(&mut chunk.cands[i]);
            i += 1;
            if i == chunk.starts.len() {
                (c, i) = (c + 1, 0);
            }
        }
    }

    fn insert_at(&mut self, c: usize, i: usize, start: K, cands: Cands) {
        let chunk = &mut self.chunks[c];
        chunk.starts.insert(i, start);
        chunk.cands.insert(i, cands);
        if i == 0 {
            self.heads[c] = start;
        }
        if chunk.starts.len() > CHUNK_MAX {
            let half = chunk.starts.len() / 2;
            let tail = Chunk {
                starts: chunk.starts.split_off(half),
                cands: chunk.cands.split_off(half),
            };
            self.heads.insert(c + 1, tail.starts[0]);
            self.chunks.insert(c + 1, tail);
        }
    }

    /// Removes interval `i` of chunk `c` (never the one at address 0).
    fn remove_at(&mut self, c: usize, i: usize) {
        let chunk = &mut self.chunks[c];
        chunk.starts.remove(i);
        chunk.cands.remove(i);
        if chunk.starts.is_empty() {
            self.heads.remove(c);
            self.chunks.remove(c);
            return;
        }
        self.heads[c] = chunk.starts[0];
        if chunk.starts.len() < CHUNK_MIN && self.chunks.len() > 1 {
            let first = if c + 1 < self.chunks.len() { c } else { c - 1 };
            self.rebalance(first);
        }
    }

    /// Joins chunks `c` and `c + 1`, splitting the result in halves again
    /// if it is too long.
    fn rebalance(&mut self, c: usize) {
        let next = self.chunks.remove(c + 1);
        self.heads.remove(c + 1);
        let chunk = &mut self.chunks[c];
        chunk.starts.extend(next.starts);
        chunk.cands.extend(next.cands);
        if chunk.starts.len() > CHUNK_MAX {
            let half = chunk.starts.len() / 2;
            let tail = Chunk {
                starts: chunk.starts.split_off(half),
                cands: chunk.cands.split_off(half),
            };
            self.heads.insert(c + 1, tail.starts[0]);
            self.chunks.insert(c + 1, tail);
        }
    }

    /// Adds policy `id` over `start..=end`, in priority order.
    fn add(&mut self, by_id: &[Option<Stored>], id: PolicyId, start: K, end: K) {
        self.split(start);
        if end < K::MAX {
            self.split(end.next());
        }
        let key = rank(by_id, id);
        self.each_in(start, end, |cands| {
            let at = cands.iter().position(|&o| rank(by_id, o) > key).unwrap_or(cands.len());
            cands.insert(at, id);
        });
    }

    /// Removes policy `id` from `start..=end` and the boundaries it alone made.
    fn remove(&mut self, id: PolicyId, start: K, end: K) {
        self.each_in(start, end, |cands| cands.retain(|o| *o != id));
        if end < K::MAX {
            self.merge(end.next());
        }
        self.merge(start);
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    fn check(&self, by_id: &[Option<Stored>]) {
        assert_eq!(self.heads.len(), self.chunks.len());
        assert_eq!(self.heads[0], K::default());
        let mut prev: Option<(K, &Cands)> = None;
        for (h, c) in self.heads.iter().zip(&self.chunks) {
            assert_eq!(*h, c.starts[0]);
            assert!(!c.starts.is_empty() && c.starts.len() <= CHUNK_MAX);
            assert_eq!(c.starts.len(), c.cands.len());
            if self.chunks.len() > 1 {
                assert!(c.starts.len() >= CHUNK_MIN, "chunk of {}", c.starts.len());
            }
            for (s, cands) in c.starts.iter().zip(&c.cands) {
                if let Some((p, pc)) = prev {
                    assert!(p < *s, "starts ascend");
                    assert_ne!(pc, cands, "no boundary without a policy starting or ending there");
                }
                for w in cands.windows(2) {
                    assert!(rank(by_id, w[0]) < rank(by_id, w[1]), "candidates in priority order");
                }
                prev = Some((*s, cands));
            }
        }
    }
}

/// The policy database.
#[derive(Debug, Clone)]
pub struct Spd {
    /// Policies by id.
    by_id: Vec<Option<Stored>>,
    len: usize,
    next_seq: u64,
    v4: Index<u32>,
    v6: Index<u128>,
}

impl Default for Spd {
    fn default() -> Self {
        Self {
            by_id: Vec::new(),
            len: 0,
            next_seq: 0,
            v4: Index::new(),
            v6: Index::new(),
        }
    }
}

impl Spd {
    /// A database holding `policies`, with ids `0..n` in order (their order
    /// breaks priority ties).
    pub fn new(policies: Vec<Policy>) -> Self {
        let mut spd = Self::default();
        for (id, p) in (0..).zip(policies) {
            spd.insert(id, p);
        }
        spd
    }

    /// Adds `policy` as `id`, after every policy of equal priority already
    /// present; returns the policy `id` named before, which it replaces.
    pub fn insert(&mut self, id: PolicyId, policy: Policy) -> Option<Policy> {
        let old = self.remove(id);
        let slot = id as usize;
        if self.by_id.len() <= slot {
            self.by_id.resize_with(slot + 1, || None);
        }
        let (start, end) = policy.remote.addrs.bits();
        let family = policy.remote.addrs.family();
        self.by_id[slot] = Some(Stored {
            policy,
            seq: self.next_seq,
        });
        self.next_seq += 1;
        self.len += 1;
        match family {
            Family::V4 => self.v4.add(&self.by_id, id, u32::from_bits(start), u32::from_bits(end)),
            Family::V6 => self.v6.add(&self.by_id, id, start, end),
        }
        old
    }

    /// Removes policy `id`; returns it.
    pub fn remove(&mut self, id: PolicyId) -> Option<Policy> {
        let stored = self.by_id.get_mut(id as usize)?.take()?;
        self.len -= 1;
        let (start, end) = stored.policy.remote.addrs.bits();
        match stored.policy.remote.addrs.family() {
            Family::V4 => self.v4.remove(id, u32::from_bits(start), u32::from_bits(end)),
            Family::V6 => self.v6.remove(id, start, end),
        }
        // Keep the table no longer than its highest id.
        while matches!(self.by_id.last(), Some(None)) {
            self.by_id.pop();
        }
        Some(stored.policy)
    }

    /// Policy `id`.
    pub fn get(&self, id: PolicyId) -> Option<&Policy> {
        self.by_id.get(id as usize).and_then(Option::as_ref).map(|s| &s.policy)
    }

    /// The policies with their ids, by id.
    pub fn iter(&self) -> impl Iterator<Item = (PolicyId, &Policy)> {
        (0..)
            .zip(&self.by_id)
            .filter_map(|(id, s)| s.as_ref().map(|s| (id, &s.policy)))
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no policies.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of elementary intervals of both families (what a lookup
    /// searches; at most twice the number of policies, plus two).
    pub fn intervals(&self) -> usize {
        self.v4.intervals() + self.v6.intervals()
    }

    /// The highest-priority policy matching an outbound packet.
    #[inline]
    pub fn lookup(&self, key: &FlowKey) -> Option<&Policy> {
        let (cands, family) = if key.v6 {
            (self.v6.candidates(key.dst), Family::V6)
        } else {
            (self.v4.candidates(u32::from_bits(key.dst)), Family::V4)
        };
        cands
            .iter()
            .filter_map(|&id| self.by_id.get(id as usize).and_then(Option::as_ref))
            .map(|s| &s.policy)
            .find(|p| {
                p.remote.matches(family, key.dst, key.proto, key.dst_port)
                    && p.local.matches(family, key.src, key.proto, key.src_port)
            })
    }

    /// Linear-scan reference lookup (for tests and benchmarks).
    pub fn lookup_linear(&self, key: &FlowKey) -> Option<&Policy> {
        let family = if key.v6 { Family::V6 } else { Family::V4 };
        self.by_id
            .iter()
            .flatten()
            .filter(|s| {
                s.policy.remote.matches(family, key.dst, key.proto, key.dst_port)
                    && s.policy.local.matches(family, key.src, key.proto, key.src_port)
            })
            .min_by_key(|s| (s.policy.priority, s.seq))
            .map(|s| &s.policy)
    }

    /// Checks the index's invariants (tests).
    #[cfg(test)]
    fn check(&self) {
        self.v4.check(&self.by_id);
        self.v6.check(&self.by_id);
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
        FlowKey {
            v6: family == Family::V6,
            src,
            dst,
            proto,
            src_port: sport,
            dst_port: dport,
        }
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
        assert_eq!(
            g(key("10.1.0.1", "10.2.9.9", 6, 1000, 80)),
            Some(1),
            "insertion order breaks tie"
        );
        assert_eq!(
            g(key("10.1.0.1", "10.2.3.9", 6, 1000, 22)),
            Some(2),
            "same priority: first inserted"
        );
        assert_eq!(g(key("10.1.0.1", "10.2.3.9", 17, 1000, 53)), Some(2));
        assert_eq!(
            g(key("10.9.0.1", "10.2.3.9", 17, 1000, 53)),
            None,
            "source outside local"
        );
        assert_eq!(g(key("10.1.0.1", "10.3.0.1", 17, 1000, 53)), None);
    }

    #[test]
    fn families_are_separate_and_extremes_work() {
        let spd = Spd::new(vec![
            pol("0.0.0.0/0", "0.0.0.0/0", 1, 10),
            pol("::/0", "::/0", 2, 10),
            pol("fd00::/8", "fd00:2::/32", 3, 5),
        ]);
        assert_eq!(
            spd.lookup(&key("1.2.3.4", "255.255.255.255", 0, 0, 0)).unwrap().action,
            Action::Protect(1)
        );
        assert_eq!(
            spd.lookup(&key("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0, 0, 0))
                .unwrap()
                .action,
            Action::Protect(2)
        );
        assert_eq!(
            spd.lookup(&key("fd00::1", "fd00:2::1", 0, 0, 0)).unwrap().action,
            Action::Protect(3)
        );
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
            let local = if i % 3 == 0 {
                "10.0.0.0/8".to_string()
            } else {
                "0.0.0.0/0".to_string()
            };
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

    /// Policies come and go one at a time, in any order: after every
    /// change the index agrees with a linear scan, keeps its invariants,
    /// and holds no boundary no policy justifies (so removing everything
    /// leaves one interval per family).
    #[test]
    fn changes_one_at_a_time_agree_with_linear_scan() {
        let mut x: u64 = 7;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut spd = Spd::default();
        let mut live: Vec<PolicyId> = Vec::new();
        for step in 0..3000u32 {
            let grow = live.len() < 40 || (next() % 3 != 0 && live.len() < 400);
            if grow {
                let len = 4 + (next() % 29) as u8;
                let base = (next() as u32) & (u32::MAX << (32 - len));
                let remote = format!("{}/{}", std::net::Ipv4Addr::from(base), len);
                let local = if step % 3 == 0 { "10.0.0.0/8" } else { "0.0.0.0/0" };
                let id = (0..).find(|i| !live.contains(i)).unwrap();
                let mut p = pol(local, &remote, step, (next() % 8) as u32);
                if step % 7 == 0 {
                    p.remote.proto = 17;
                    p.remote.port_start = 1000;
                    p.remote.port_end = 2000;
                }
                spd.insert(id, p);
                live.push(id);
            } else {
                let id = live.swap_remove((next() as usize) % live.len());
                assert!(spd.remove(id).is_some());
            }
            assert_eq!(spd.len(), live.len());
            if step % 50 == 0 {
                spd.check();
                for _ in 0..200 {
                    let k = FlowKey {
                        v6: false,
                        src: u128::from(if next() % 2 == 0 { 0x0a00_0001 } else { next() as u32 }),
                        dst: u128::from(next() as u32),
                        proto: if next() % 2 == 0 { 17 } else { 6 },
                        src_port: 5,
                        dst_port: (next() % 3000) as u16,
                    };
                    assert_eq!(spd.lookup(&k), spd.lookup_linear(&k));
                }
            }
        }
        spd.check();
        for id in live.drain(..) {
            spd.remove(id);
        }
        spd.check();
        assert_eq!((spd.len(), spd.intervals()), (0, 2));
    }

    /// Ranges that end at the last address of their family, and ids
    /// replaced in place.
    #[test]
    fn family_ends_and_replacement() {
        let mut spd = Spd::default();
        spd.insert(3, pol("0.0.0.0/0", "255.255.255.0/24", 1, 10));
        spd.insert(9, pol("::/0", "ffff::/16", 2, 10));
        assert_eq!(
            spd.lookup(&key("1.2.3.4", "255.255.255.255", 0, 0, 0)).unwrap().action,
            Action::Protect(1)
        );
        assert_eq!(
            spd.lookup(&key("::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0, 0, 0))
                .unwrap()
                .action,
            Action::Protect(2)
        );
        let old = spd.insert(3, pol("0.0.0.0/0", "1.0.0.0/8", 5, 10)).unwrap();
        assert_eq!(old.action, Action::Protect(1));
        assert!(spd.lookup(&key("1.2.3.4", "255.255.255.255", 0, 0, 0)).is_none());
        assert_eq!(
            spd.lookup(&key("1.2.3.4", "1.9.9.9", 0, 0, 0)).unwrap().action,
            Action::Protect(5)
        );
        assert_eq!(spd.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![3, 9]);
        spd.check();
        assert!(spd.remove(4).is_none());
        spd.remove(3);
        spd.remove(9);
        assert_eq!(spd.intervals(), 2);
    }

    /// A policy inserted later loses a tie to one inserted earlier, even
    /// when it reuses a lower id.
    #[test]
    fn ties_follow_insertion_not_id() {
        let mut spd = Spd::default();
        spd.insert(5, pol("10.1.0.0/16", "10.2.0.0/16", 1, 100));
        spd.insert(0, pol("10.1.0.0/16", "10.2.0.0/16", 2, 100));
        assert_eq!(
            spd.lookup(&key("10.1.0.1", "10.2.0.1", 6, 1, 2)).unwrap().action,
            Action::Protect(1)
        );
        assert_eq!(
            spd.lookup_linear(&key("10.1.0.1", "10.2.0.1", 6, 1, 2)).unwrap().action,
            Action::Protect(1)
        );
    }
}
