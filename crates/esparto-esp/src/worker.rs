//! One worker's data plane: its copy of the SPD, its share of every SA
//! group, its inbound SAs, its counters and events.
//!
//! A `Worker` is owned by one thread and mutated only by it: the control
//! plane sends [`Command`]s (built SAs, policies added or removed one at a
//! time) that the thread applies between batches, and reads [`Event`]s and
//! statistics back. So the per-packet path has no locks and no shared
//! writes, except the sequence counter of a fallback SA, which is shared by
//! design. Every command costs the same however many tunnels the worker
//! holds: no command carries or rebuilds the whole database.
//!
//! With many tunnels, what a packet needs (its policy, group, SA and replay
//! window) is no longer in the cache when its turn comes, and each of those
//! loads depends on the one before. A caller holding a batch therefore
//! looks ahead: [`Worker::prefetch_outbound`] and
//! [`Worker::prefetch_inbound`] look up a packet a few places further in
//! the batch and ask the CPU for its SA's hot cache lines, so they arrive
//! while the current packet is being encrypted ([`PREFETCH_AHEAD`]).

use core::ops::Range;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::net::SocketAddr;
use std::time::Instant;

use esparto_wire::esp as wesp;

use crate::counters::{DropReason, Drops, SaCounters};
use crate::group::SaGroup;
use crate::ipcomp::{Deflate, IpcompParams, IpcompSa, IpcompStats, IpcompSwitch};
use crate::lifetime::Expiry;
use crate::sa::{Dropped, InboundSa, OutboundSa, Spi, next_header_for};
use crate::sad::{Sad, SpiHasher};
use crate::spd::{Action, FlowKey, GroupId, Policy, PolicyId, Spd};

/// Most events a worker queues before dropping new ones (they are rare:
/// acquires are rate-limited, expiries happen once per SA).
pub const MAX_PENDING_EVENTS: usize = 4096;

/// How many packets ahead of the one being processed a batch loop calls
/// the prefetch functions: enough for a line to arrive from memory
/// (~100 ns) during the work on the packets before it (at least a few
/// hundred ns each), few enough that the flow cache still holds the
/// looked-up flows when their turn comes.
pub const PREFETCH_AHEAD: usize = 4;

/// A change the control plane asks a worker to make.
#[derive(Debug)]
pub enum Command {
    /// Add a policy to the SPD (replacing one of the same id).
    AddPolicy(PolicyId, Box<Policy>),
    /// Remove a policy from the SPD.
    RemovePolicy(PolicyId),
    /// Create (or reconfigure) a group.
    AddGroup {
        /// Its id, as policies name it.
        id: GroupId,
        /// Raise acquires for a per-worker sub-SA.
        per_cpu: bool,
    },
    /// Remove a group and its outbound SAs.
    RemoveGroup(GroupId),
    /// Install the fallback SA of a group (this worker's copy).
    SetFallback(GroupId, Box<OutboundSa>),
    /// Install this worker's sub-SA of a group.
    SetSub(GroupId, Box<OutboundSa>),
    /// Remove an outbound SA from a group.
    RemoveOutbound(GroupId, Spi),
    /// Send on the group's SAs to this peer endpoint from now on (its NAT
    /// mapping changed), keeping their sequence numbers.
    SetPeer(GroupId, std::net::SocketAddr),
    /// Install an inbound SA (its SPI steers to this worker).
    AddInbound(Box<InboundSa>),
    /// Remove an inbound SA.
    RemoveInbound(Spi),
    /// Give the SA `Spi` of `Direction` IPComp (RFC 3173), or take it away
    /// (`None`). Sent before the SA is installed, so that its first packet
    /// is already handled; removing the SA removes it too.
    SetIpcomp(Spi, Direction, Option<IpcompParams>),
    /// Raise [`Event::FirstPacket`] when the inbound SA `Spi` delivers its
    /// first packet (once; removing the SA cancels it): the peer has
    /// installed the SA and sends on it.
    AnnounceFirst(Spi),
    /// Answer with [`Event::Barrier`] of the same number: every command
    /// queued before it has been applied. Commands are applied in order, so
    /// the answer confirms them all.
    Barrier(u64),
}

/// SA direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Received.
    Inbound,
    /// Sent.
    Outbound,
}

/// Something the control plane must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Traffic for `group` needs an SA: for `worker`'s own sub-SA (per-CPU),
    /// or (`worker: None`) for the group as a whole (nothing installed yet).
    Acquire {
        /// The group.
        group: GroupId,
        /// The worker asking for its sub-SA.
        worker: Option<u16>,
    },
    /// An SA crossed a lifetime limit.
    Expire {
        /// The SA.
        spi: Spi,
        /// Its direction.
        direction: Direction,
        /// Soft (rekey) or hard (dead).
        kind: Expiry,
    },
    /// An adaptive IPComp SA started or stopped compressing (for the log).
    IpcompSwitched {
        /// The outbound SA.
        spi: Spi,
        /// The new state and the ratio that decided it.
        switch: IpcompSwitch,
    },
    /// ESP arrived from `peer` with an SPI no inbound SA has (counted as
    /// `unknown_spi` too). Raised by the I/O layer, which knows the
    /// source, and rate-limited there: the peer may hold SAs we lost in a
    /// restart, and the IKE layer may tell it so (RFC 7296 §1.5).
    UnknownSpi {
        /// The SPI.
        spi: Spi,
        /// The ESP-in-UDP source.
        peer: SocketAddr,
    },
    /// The inbound SA `spi` delivered its first packet ([`Command::AnnounceFirst`]).
    FirstPacket {
        /// The SA.
        spi: Spi,
    },
    /// Every command before [`Command::Barrier`] of this number has been
    /// applied.
    Barrier(u64),
}

/// An encapsulated packet ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encapsulated {
    /// The ESP packet (UDP payload) within the caller's buffer.
    pub esp: Range<usize>,
    /// Where to send it.
    pub peer: SocketAddr,
}

/// Statistics of one SA as one worker sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SaStats {
    /// SPI.
    pub spi: Spi,
    /// Direction.
    pub direction: Direction,
    /// Group (outbound only).
    pub group: Option<GroupId>,
    /// Whether this is the fallback SA of its group (outbound only).
    pub fallback: bool,
    /// Suite name.
    pub suite: &'static str,
    /// Peer endpoint.
    pub peer: SocketAddr,
    /// Highest sequence number sent or received.
    pub last_seq: u64,
    /// Installed at.
    pub installed: Instant,
    /// When it last carried a packet on this worker (`None`: never).
    pub last_used: Option<Instant>,
    /// Packets, bytes, drops.
    pub counters: SaCounters,
    /// IPComp figures, for an SA with IPComp.
    pub ipcomp: Option<IpcompStats>,
}

/// A snapshot of a worker's state for `esparto status`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerStats {
    /// Worker index.
    pub worker: u16,
    /// Drops by reason (all drops of this worker, attributable to an SA or not).
    pub drops: Drops,
    /// Packets encapsulated.
    pub tx_packets: u64,
    /// Packets decapsulated.
    pub rx_packets: u64,
    /// Inner bytes encapsulated (the sum of its outbound SAs' bytes, SAs
    /// since removed included).
    pub tx_bytes: u64,
    /// Inner bytes decapsulated and delivered.
    pub rx_bytes: u64,
    /// Per-SA figures.
    pub sas: Vec<SaStats>,
    /// Events lost because [`MAX_PENDING_EVENTS`] were already waiting.
    pub events_dropped: u64,
}

/// Entries of the per-worker flow cache (a power of two).
const FLOW_CACHE: usize = 64;

/// A cached decision: the flow and what the SPD said for it.
type CachedFlow = Option<(FlowKey, Option<Action>)>;

/// A direct-mapped cache of policy decisions by flow, in front of the SPD.
///
/// Packets from the TUN arrive in runs of one flow (a TSO super-packet is
/// split into dozens of segments), so most lookups repeat the previous
/// one; a hit costs a hash and a 40-byte compare instead of the SPD's
/// binary search and selector matches. The cache holds the *outcome* of
/// the SPD lookup only (protect with group g, discard, no policy), so it
/// is cleared whenever a policy is added or removed (64 slots: a cost
/// that does not grow with the SPD), and a group's SAs are looked up fresh
/// every time.
#[derive(Debug)]
struct FlowCache {
    slots: Box<[CachedFlow; FLOW_CACHE]>,
}

impl FlowCache {
    fn new() -> Self {
        Self { slots: Box::new([None; FLOW_CACHE]) }
    }

    #[inline]
    fn slot(k: &FlowKey) -> usize {
        let a = (k.src ^ (k.dst << 1)) as u64 ^ ((k.src ^ k.dst) >> 64) as u64;
        let b = (u64::from(k.src_port) << 24) ^ (u64::from(k.dst_port) << 8) ^ u64::from(k.proto);
        ((a ^ b).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize & (FLOW_CACHE - 1)
    }

    #[inline]
    fn lookup(&mut self, spd: &Spd, k: &FlowKey) -> Option<Action> {
        let slot = &mut self.slots[Self::slot(k)];
        match slot {
            Some((key, action)) if key == k => *action,
            _ => {
                let action = spd.lookup(k).map(|p| p.action);
                *slot = Some((*k, action));
                action
            }
        }
    }

    fn clear(&mut self) {
        self.slots.fill(None);
    }
}

/// One worker's data plane.
#[derive(Debug)]
pub struct Worker {
    id: u16,
    spd: Spd,
    flows: FlowCache,
    groups: HashMap<GroupId, SaGroup, BuildHasherDefault<SpiHasher>>,
    sad: Sad,
    drops: Drops,
    tx_packets: u64,
    rx_packets: u64,
    tx_bytes: u64,
    rx_bytes: u64,
    events: VecDeque<Event>,
    events_dropped: u64,
    ipcomp: IpcompTable,
    /// Inbound SAs whose first delivered packet is announced
    /// ([`Command::AnnounceFirst`]); nearly always empty, so a packet pays
    /// one emptiness check.
    announce: Vec<Spi>,
}

/// IPComp beside the ESP SAs: per-SA state by SPI and direction, and the
/// worker's one DEFLATE engine (allocated when the first IPComp SA comes).
#[derive(Debug, Default)]
struct IpcompTable {
    outbound: HashMap<Spi, IpcompSa, BuildHasherDefault<SpiHasher>>,
    inbound: HashMap<Spi, IpcompSa, BuildHasherDefault<SpiHasher>>,
    deflate: Option<Box<Deflate>>,
    /// Sends the UDP socket refused in part (its buffer full): the link
    /// pushing back, for adaptive SAs.
    pushbacks: u64,
    /// The latest verdict on the worker's link: `Some(mbps)` while its
    /// send queue stands (the link is the bottleneck, draining at that
    /// rate), `None` while it keeps up.
    link_saturated_mbps: Option<u32>,
}

/// Where a decapsulated inner packet is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Delivered {
    /// In the caller's buffer.
    Buf(Range<usize>),
    /// Decompressed, the first bytes of the worker's scratch buffer.
    Scratch(usize),
}

impl Worker {
    /// Worker number `id`, with nothing installed.
    pub fn new(id: u16) -> Self {
        Self {
            id,
            spd: Spd::default(),
            flows: FlowCache::new(),
            groups: HashMap::default(),
            sad: Sad::new(),
            drops: Drops::default(),
            tx_packets: 0,
            rx_packets: 0,
            tx_bytes: 0,
            rx_bytes: 0,
            events: VecDeque::with_capacity(64),
            events_dropped: 0,
            ipcomp: IpcompTable::default(),
            announce: Vec::new(),
        }
    }

    /// The send path could not take all it was given (a UDP send refused
    /// in part: the socket buffer is full): the link pushes back. Adaptive
    /// IPComp SAs weigh it in their next decision.
    pub fn note_send_pushback(&mut self) {
        self.ipcomp.pushbacks += 1;
    }

    /// Whether the worker has outbound IPComp SAs, for which it wants
    /// [`Worker::note_link`] verdicts.
    #[inline]
    pub fn wants_link(&self) -> bool {
        !self.ipcomp.outbound.is_empty()
    }

    /// The link below the worker's socket: saturated, draining at
    /// `bytes_per_sec`, or (`None`) keeping up with what the worker sends.
    /// Adaptive IPComp SAs without a configured `link_mbps` weigh the
    /// measured rate as if it were configured.
    pub fn note_link(&mut self, saturated_bytes_per_sec: Option<u64>) {
        self.ipcomp.link_saturated_mbps = saturated_bytes_per_sec
            .map(|b| u32::try_from(b.saturating_mul(8) / 1_000_000).unwrap_or(u32::MAX).max(1));
    }

    /// The worker's index.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Applies a control-plane change.
    pub fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::AddPolicy(id, policy) => {
                self.spd.insert(id, *policy);
                self.flows.clear();
            }
            Command::RemovePolicy(id) => {
                if self.spd.remove(id).is_some() {
                    self.flows.clear();
                }
            }
            Command::AddGroup { id, per_cpu } => {
                let g = self.groups.entry(id).or_insert_with(|| SaGroup::new(id, per_cpu));
                if g.per_cpu() != per_cpu {
                    let mut fresh = SaGroup::new(id, per_cpu);
                    fresh.set_fallback(g.set_fallback(None));
                    fresh.set_sub(g.set_sub(None));
                    *g = fresh;
                }
            }
            Command::RemoveGroup(id) => {
                if let Some(g) = self.groups.remove(&id) {
                    for sa in [g.sub(), g.fallback()].into_iter().flatten() {
                        self.ipcomp.outbound.remove(&sa.spi());
                    }
                }
            }
            Command::SetFallback(id, sa) => {
                self.groups.entry(id).or_insert_with(|| SaGroup::new(id, false)).set_fallback(Some(sa));
            }
            Command::SetSub(id, sa) => {
                self.groups.entry(id).or_insert_with(|| SaGroup::new(id, true)).set_sub(Some(*sa));
            }
            Command::RemoveOutbound(id, spi) => {
                if let Some(g) = self.groups.get_mut(&id) {
                    g.remove_spi(spi);
                }
                self.ipcomp.outbound.remove(&spi);
            }
            Command::SetPeer(id, peer) => {
                if let Some(g) = self.groups.get_mut(&id) {
                    g.set_peer(peer);
                }
            }
            Command::AddInbound(sa) => {
                self.sad.insert(sa);
            }
            Command::RemoveInbound(spi) => {
                self.sad.remove(spi);
                self.ipcomp.inbound.remove(&spi);
                self.announce.retain(|s| *s != spi);
            }
            Command::AnnounceFirst(spi) => {
                if !self.announce.contains(&spi) {
                    self.announce.push(spi);
                }
            }
            Command::Barrier(n) => {
                push_event(&mut self.events, &mut self.events_dropped, Event::Barrier(n));
            }
            Command::SetIpcomp(spi, direction, params) => {
                let table = match direction {
                    Direction::Outbound => &mut self.ipcomp.outbound,
                    Direction::Inbound => &mut self.ipcomp.inbound,
                };
                match params {
                    Some(p) => {
                        table.insert(spi, IpcompSa::new(p));
                        self.ipcomp.deflate.get_or_insert_with(|| Box::new(Deflate::new()));
                    }
                    None => {
                        table.remove(&spi);
                    }
                }
            }
        }
    }

    /// Encapsulates the inner packet at `buf[inner]`: SPD lookup, SA
    /// selection (own sub-SA, else fallback and an acquire), ESP.
    ///
    /// `buf` needs [`HEADROOM`](crate::HEADROOM) before and
    /// [`TAILROOM`](crate::TAILROOM) after the inner packet.
    #[inline]
    pub fn encapsulate(&mut self, now: Instant, buf: &mut [u8], inner: Range<usize>) -> Result<Encapsulated, Dropped> {
        let len = inner.len() as u64;
        let r = self.encapsulate_inner(now, buf, inner);
        match &r {
            Ok(_) => {
                self.tx_packets += 1;
                self.tx_bytes += len;
            }
            Err(d) => self.drops.count(d.reason),
        }
        r
    }

    fn encapsulate_inner(&mut self, now: Instant, buf: &mut [u8], inner: Range<usize>) -> Result<Encapsulated, Dropped> {
        let packet = buf.get(inner.clone()).ok_or(DropReason::Malformed)?;
        let next_header = next_header_for(packet).ok_or(DropReason::Malformed)?;
        let key = FlowKey::extract(packet).map_err(|_| DropReason::Malformed)?;
        let group_id = match self.flows.lookup(&self.spd, &key) {
            Some(Action::Protect(g)) => g,
            Some(Action::Discard) => return Err(DropReason::Discarded.into()),
            // The kernel's own link-scope IPv6 (MLD reports, router
            // solicitations) never belongs in a tunnel (RFC 4291 §2.5.6,
            // §2.7): discarded, not a policy miss an operator must chase.
            None if key.v6 && link_scope_v6(key.dst) => return Err(DropReason::Discarded.into()),
            None => return Err(DropReason::PolicyMismatch.into()),
        };
        // The control plane installs a group with its policy (a trap policy
        // gets an empty group, which raises rate-limited acquires), so a
        // missing group is a transient state during an update: just count.
        let group = self.groups.get_mut(&group_id).ok_or(DropReason::NoSa)?;
        let selected = group.select(now);
        if let Some(own) = selected.acquire {
            let worker = own.then_some(self.id);
            push_event(&mut self.events, &mut self.events_dropped, Event::Acquire { group: group_id, worker });
        }
        let sa = selected.sa.ok_or(DropReason::NoSa)?;
        let (inner, next_header) = if self.ipcomp.outbound.is_empty() {
            (inner, next_header)
        } else {
            match (self.ipcomp.outbound.get_mut(&sa.spi()), self.ipcomp.deflate.as_deref_mut()) {
                // A packet too big for the SA stays so: it is refused
                // with the MTU its sender must use, compressible or not.
                (Some(ipc), Some(deflate)) if inner.len() <= sa.max_inner() => {
                    ipc.observe(now, self.ipcomp.pushbacks, self.ipcomp.link_saturated_mbps);
                    let len = inner.len();
                    let t0 = ipc.time_next().then(std::time::Instant::now);
                    let (inner, nh, switch) = deflate.compress_in_place(ipc, buf, inner, next_header);
                    if let Some(t0) = t0 {
                        ipc.note_cost(len, u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
                    }
                    if let Some(switch) = switch {
                        push_event(&mut self.events, &mut self.events_dropped, Event::IpcompSwitched { spi: sa.spi(), switch });
                    }
                    (inner, nh)
                }
                _ => (inner, next_header),
            }
        };
        let mut expiry = None;
        let r = sa.encapsulate(now, buf, inner, next_header, &mut expiry);
        if let Some(kind) = expiry {
            push_event(&mut self.events, &mut self.events_dropped, Event::Expire { spi: sa.spi(), direction: Direction::Outbound, kind });
        }
        let peer = sa.peer();
        r.map(|esp| Encapsulated { esp, peer })
    }

    /// Looks up the SA an outbound packet (the inner packet at `buf[inner]`)
    /// will be sent on, as [`encapsulate`](Self::encapsulate) will (the
    /// flow cache remembers the policy decision for it), and asks
    /// `prefetch` for the SA's hot cache lines. Changes nothing else and
    /// counts nothing: a packet that will be dropped is simply not
    /// prefetched.
    #[inline]
    pub fn prefetch_outbound(&mut self, buf: &[u8], inner: Range<usize>, prefetch: crate::sad::Prefetch) {
        let Some(packet) = buf.get(inner) else { return };
        let Ok(key) = FlowKey::extract(packet) else { return };
        let Some(Action::Protect(g)) = self.flows.lookup(&self.spd, &key) else { return };
        if let Some(sa) = self.groups.get(&g).and_then(|g| g.sub().filter(|s| !s.is_dead()).or(g.fallback())) {
            sa.prefetch(prefetch);
        }
    }

    /// Looks up the inbound SA of the ESP packet (a UDP payload) `esp` and
    /// asks `prefetch` for its hot cache lines (see [`Sad::prefetch`]).
    /// Changes and counts nothing.
    #[inline]
    pub fn prefetch_inbound(&self, esp: &[u8], prefetch: crate::sad::Prefetch) {
        if let Ok(p) = wesp::Packet::new_checked(esp) {
            self.sad.prefetch(p.spi(), prefetch);
        }
    }

    /// Decapsulates the ESP packet (a UDP payload) at `buf[esp]`; returns
    /// the inner packet's range. A dummy packet (RFC 4303 §2.6) is an error
    /// like any other drop, [`DropReason::Dummy`], so the range is never
    /// empty. A lifetime limit the packet crossed is queued as an
    /// [`Event::Expire`] whether the packet is delivered or refused.
    ///
    /// A compressed packet (IPComp) is decompressed into the caller's
    /// buffer at the start of the ESP packet, which may overwrite up to the
    /// tunnel's largest inner packet past its end: a caller holding several
    /// packets in one buffer uses [`Worker::decapsulate_packet`].
    #[inline]
    pub fn decapsulate(&mut self, now: Instant, buf: &mut [u8], esp: Range<usize>) -> Result<Range<usize>, DropReason> {
        let start = esp.start;
        match self.decapsulate_counted(now, buf, esp)? {
            Delivered::Buf(r) => Ok(r),
            Delivered::Scratch(n) => {
                let Some(dst) = buf.get_mut(start..start + n) else {
                    self.rx_packets -= 1;
                    self.rx_bytes -= n as u64;
                    self.drops.count(DropReason::TooBig);
                    return Err(DropReason::TooBig);
                };
                let Some(deflate) = self.ipcomp.deflate.as_deref() else { return Err(DropReason::Malformed) };
                dst.copy_from_slice(&deflate.scratch()[..n]);
                Ok(start..start + n)
            }
        }
    }

    /// [`Worker::decapsulate`] that leaves the rest of `buf` alone: the
    /// inner packet is returned in place, or, decompressed, from the
    /// worker's own buffer (valid until its next call).
    #[inline]
    pub fn decapsulate_packet<'a>(&'a mut self, now: Instant, buf: &'a mut [u8], esp: Range<usize>) -> Result<&'a [u8], DropReason> {
        match self.decapsulate_counted(now, buf, esp)? {
            Delivered::Buf(r) => buf.get(r).ok_or(DropReason::Malformed),
            Delivered::Scratch(n) => {
                self.ipcomp.deflate.as_deref().and_then(|d| d.scratch().get(..n)).ok_or(DropReason::Malformed)
            }
        }
    }

    fn decapsulate_counted(&mut self, now: Instant, buf: &mut [u8], esp: Range<usize>) -> Result<Delivered, DropReason> {
        let r = self.decapsulate_inner(now, buf, esp);
        match &r {
            Ok(Delivered::Buf(inner)) => {
                self.rx_packets += 1;
                self.rx_bytes += inner.len() as u64;
            }
            Ok(Delivered::Scratch(n)) => {
                self.rx_packets += 1;
                self.rx_bytes += *n as u64;
            }
            Err(reason) => self.drops.count(*reason),
        }
        r
    }

    fn decapsulate_inner(&mut self, now: Instant, buf: &mut [u8], esp: Range<usize>) -> Result<Delivered, DropReason> {
        let packet = buf.get(esp.clone()).ok_or(DropReason::Malformed)?;
        let spi = wesp::Packet::new_checked(packet).map_err(|_| DropReason::Malformed)?.spi();
        let sa = self.sad.get_mut(spi).ok_or(DropReason::UnknownSpi)?;
        let mut expiry = None;
        let r = match (self.ipcomp.inbound.get_mut(&spi), self.ipcomp.deflate.as_deref_mut()) {
            (Some(ipc), Some(deflate)) => {
                let r = decapsulate_ipcomp(sa, ipc, deflate, now, buf, esp, &mut expiry);
                if let Err(reason) = r {
                    sa.count_drop(reason);
                }
                r
            }
            _ => sa.decapsulate(now, buf, esp, &mut expiry).map(Delivered::Buf),
        };
        if let Some(kind) = expiry {
            push_event(&mut self.events, &mut self.events_dropped, Event::Expire { spi, direction: Direction::Inbound, kind });
        }
        if !self.announce.is_empty() && r.is_ok() {
            if let Some(i) = self.announce.iter().position(|s| *s == spi) {
                self.announce.swap_remove(i);
                push_event(&mut self.events, &mut self.events_dropped, Event::FirstPacket { spi });
            }
        }
        r
    }

    /// Time-driven work: lifetimes of idle SAs. Call every few hundred ms.
    pub fn tick(&mut self, now: Instant) {
        for g in self.groups.values_mut() {
            let (sub, fallback) = g.both_mut();
            for sa in [sub, fallback].into_iter().flatten() {
                if let Some(kind) = sa.check_time(now) {
                    push_event(&mut self.events, &mut self.events_dropped, Event::Expire { spi: sa.spi(), direction: Direction::Outbound, kind });
                }
            }
        }
        for sa in self.sad.iter_mut() {
            if let Some(kind) = sa.check_time(now) {
                push_event(&mut self.events, &mut self.events_dropped, Event::Expire { spi: sa.spi(), direction: Direction::Inbound, kind });
            }
        }
    }

    /// The next event for the control plane.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The policy database.
    pub fn spd(&self) -> &Spd {
        &self.spd
    }

    /// The inbound SAs.
    pub fn sad(&self) -> &Sad {
        &self.sad
    }

    /// This worker's share of a group.
    pub fn group(&self, id: GroupId) -> Option<&SaGroup> {
        self.groups.get(&id)
    }

    /// Drops by reason.
    pub fn drops(&self) -> &Drops {
        &self.drops
    }

    /// Counts a drop that happened outside ESP processing (e.g. an I/O layer
    /// refusing a datagram), so every drop is in one place.
    pub fn count_drop(&mut self, reason: DropReason) {
        self.drops.count(reason);
    }

    /// A snapshot for status output (allocates; not for the packet path).
    pub fn stats(&self) -> WorkerStats {
        let mut sas = Vec::new();
        for g in self.groups.values() {
            for (sa, fallback) in [(g.sub(), false), (g.fallback(), true)] {
                if let Some(sa) = sa {
                    sas.push(SaStats {
                        spi: sa.spi(),
                        direction: Direction::Outbound,
                        group: Some(g.id()),
                        fallback,
                        suite: sa.suite().name(),
                        peer: sa.peer(),
                        last_seq: sa.last_seq(),
                        installed: sa.installed(),
                        last_used: sa.last_used(),
                        counters: *sa.counters(),
                        ipcomp: self.ipcomp.outbound.get(&sa.spi()).map(|c| *c.stats()),
                    });
                }
            }
        }
        for sa in self.sad.iter() {
            sas.push(SaStats {
                spi: sa.spi(),
                direction: Direction::Inbound,
                group: None,
                fallback: false,
                suite: sa.suite().name(),
                peer: sa.peer(),
                last_seq: sa.last_seq(),
                installed: sa.installed(),
                last_used: sa.last_used(),
                counters: *sa.counters(),
                ipcomp: self.ipcomp.inbound.get(&sa.spi()).map(|c| *c.stats()),
            });
        }
        sas.sort_by_key(|s| (s.direction == Direction::Inbound, s.spi));
        WorkerStats {
            worker: self.id,
            drops: self.drops,
            tx_packets: self.tx_packets,
            rx_packets: self.rx_packets,
            tx_bytes: self.tx_bytes,
            rx_bytes: self.rx_bytes,
            sas,
            events_dropped: self.events_dropped,
        }
    }
}

/// Inbound ESP on an SA with IPComp: the payload is an IP packet or, with
/// Next Header 108, an IPComp packet decompressed into `deflate`'s buffer,
/// which must then hold exactly one IP packet of the version its header
/// names (RFC 3173 §3).
fn decapsulate_ipcomp(
    sa: &mut InboundSa,
    ipc: &mut IpcompSa,
    deflate: &mut Deflate,
    now: Instant,
    buf: &mut [u8],
    esp: Range<usize>,
    expiry: &mut Option<Expiry>,
) -> Result<Delivered, DropReason> {
    let (data, next_header) = sa.open(now, buf, esp, expiry)?;
    let payload = buf.get(data.clone()).ok_or(DropReason::Malformed)?;
    if next_header != wesp::NEXT_HEADER_IPCOMP {
        let n = sa.admit(now, next_header, payload)?;
        return Ok(Delivered::Buf(data.start..data.start + n));
    }
    let (inner_nh, n) = deflate.decompress_packet(ipc, payload)?;
    let inner = deflate.scratch().get(..n).ok_or(DropReason::Malformed)?;
    // The decompressed packet's own length must be all of it.
    if esparto_wire::ip::packet_len(inner).ok() != Some(n) {
        return Err(DropReason::Malformed);
    }
    sa.admit(now, inner_nh, inner)?;
    Ok(Delivered::Scratch(n))
}

/// Queues an event for the control plane; past [`MAX_PENDING_EVENTS`] it
/// is dropped and counted (an acquire is raised again by the next packet
/// after its rate limit; expiries are the control plane's backstop too).
fn push_event(events: &mut VecDeque<Event>, dropped: &mut u64, ev: Event) {
    if events.len() < MAX_PENDING_EVENTS {
        events.push_back(ev);
    } else {
        *dropped += 1;
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;

/// Whether an IPv6 destination (as bits) is link-local unicast (fe80::/10)
/// or interface- or link-local multicast (ff01::/16, ff02::/16).
fn link_scope_v6(dst: u128) -> bool {
    (dst >> 118) == 0x3fa || matches!(dst >> 112, 0xff01 | 0xff02)
}
