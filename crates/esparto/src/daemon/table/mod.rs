//! The Child SA table: the daemon's one record of every child, its SA
//! group and policies, and every Child SA with where it sends.
//!
//! **Who owns what.** The IKE engine ([`esparto_ike::Endpoint`]) owns the
//! protocol state: exchanges, keys, when to rekey. Each worker
//! ([`esparto_esp::Worker`]) owns its copy of the data plane: its SPD, its
//! share of every group, the inbound SAs its SPIs steer to. Everything in
//! between is here, once: which connections and children exist, which
//! group and policies a child has, which Child SA sits in which slot
//! (the fallback, a worker's sub-SA, or received on only), the outbound
//! SA waiting for the peer to switch, the inbound SAs lingering after a
//! rekey, traps, acquires in flight, and whether the peer gives per-CPU
//! SAs at all; and what the IKE driver keeps per connection ([`conn`]:
//! what the end of an IKE SA calls for, children to start once it is up,
//! IKE SAs being negotiated, IKE SAs a reload retired). `status` and
//! `sas` are derived from it ([`report`]).
//!
//! **Typed ids, no string keys.** Connections, children and Child SAs are
//! held in slabs and named by [`ConnId`], [`ChildId`] and [`SaId`]; SAs are
//! indexed by inbound SPI and by outbound SPI (integers, `O(1)`), groups by
//! [`GroupId`], IKE SAs by [`IkeSaId`]. Names are for display and for the
//! one translation at the edge: the engine names a child by its
//! connection's and its own name, looked up once per event (a hash of
//! the connection's name, then its few children).
//!
//! **Transitions produce commands.** Every change is a method here — an
//! IKE event ([`Table::child_established`], [`Table::child_deleted`], …),
//! a data-plane event ([`Table::acquire`], [`Table::soft_expire`]), a
//! timer ([`Table::expire_lingering`]), or configuration ([`Table::arm_trap`],
//! [`Table::install_static`], [`Table::remove_conn`]). It updates the
//! table and queues the [`Effect`]s that make the workers agree: built SAs,
//! policies added or removed one at a time (never a whole SPD), groups.
//! The gateway takes and sends them ([`Table::take_effects`]); the table itself
//! does no I/O, so it is tested and benchmarked with plain
//! [`esparto_esp::Worker`]s.
//!
//! **How an SA is installed.** A child gets its group and policies with
//! its first SA (or its trap); then each Child SA goes in inbound first, on
//! the worker its SPI steers to, so the peer may use it at once; then its
//! outbound half into its slot ([`child`] says which), replacing whatever
//! was there — or, when the peer initiated a rekey, only once the peer has
//! switched (make-before-break, RFC 7296 §2.8). A rekeyed SA takes its
//! predecessor's slot; the predecessor's inbound SA lingers [`LINGER`]
//! after its delete. A static SA sends only within the sequence numbers
//! reserved for it (`seqstate`: reserved durably ahead of use, extended by
//! the gateway as it goes). The states of one SA are in [`sa`].
//!
//! **Cost.** No transition walks all children or all SAs: each touches one
//! child, its SAs and its policies (and the workers, once each), so its
//! cost does not grow with the number of tunnels. Removing a connection
//! costs its children.

mod activity;
#[cfg(test)]
mod bench;
mod child;
mod conn;
mod events;
pub(crate) mod report;
mod sa;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use esparto_esp::{Action, Command, GroupId, Policy, PolicyId, Selector, SpiHasher};
use esparto_ike::IkeSaId;
use slab::Slab;

use crate::config::{Config, Connection, PerCpuSas};

pub(crate) use child::{Child, Settings, Slot, static_slot};
pub(crate) use conn::Actions;
pub(crate) use events::{AcquireRequest, IkeSaUp};
pub(crate) use sa::ChildSa;

use child::Group;

pub(crate) use activity::LastPackets;

/// How long an inbound SA stays installed after its delete following a
/// rekey: ESP the peer sent on it just before switching may still be in
/// flight (queued in a worker, a socket, a GSO batch).
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// How long the outbound half of a new per-worker sub-SA we answered for
/// waits for the peer's first packet on it before it goes in anyway (see
/// `Table::child_established`).
pub(crate) const CONFIRM_WAIT: Duration = Duration::from_secs(2);
/// How long an acquire for one child (or one worker's sub-SA) is
/// considered in flight.
pub(crate) const ACQUIRE_PENDING: Duration = Duration::from_secs(30);
/// The data plane's hard time limit of an IKE-negotiated SA trails the
/// engine's `life_time` by this much: the engine deletes the SA (and says
/// so) first. Time-based rekeys are the engine's (with jitter); the data
/// plane counts bytes and packets.
pub(crate) const LIFETIME_GRACE: Duration = Duration::from_secs(30);

/// A connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ConnId(usize);
/// A child of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ChildId(usize);
/// A Child SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SaId(usize);

/// Something the data plane must do to follow the table.
#[derive(Debug)]
pub(crate) enum Effect {
    /// A command for one worker.
    Worker(u16, Command),
    /// Send traffic from the `local` selectors to the `remote` ones into
    /// the TUN device (again: the kernel may have flushed the routes).
    Routes {
        /// Our side's selectors: the sources the policy rules select.
        local: Vec<Selector>,
        /// The peer's side: the routes.
        remote: Vec<Selector>,
    },
    /// Remove the routes of these prefixes: no group routes them any more.
    Unroute(Vec<Prefix>),
    /// Nothing after this may happen before every worker has applied the
    /// commands before it: the gateway asks each worker to confirm
    /// (`Command::Barrier`) and holds back every later effect — and every
    /// IKE message — until all have. So a new inbound SA is in its worker
    /// before the message that lets the peer send on it leaves, and before
    /// we send on its outbound half (RFC 7296 §2.8, make-before-break).
    Barrier,
}

/// A routed prefix: address and length.
pub(crate) type Prefix = (IpAddr, u8);

/// A connection as the table holds it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Its name (display, and the engine's name for it).
    pub(crate) name: Arc<str>,
    /// Its children.
    pub(crate) children: Vec<ChildId>,
    /// Its IKE SAs.
    pub(crate) ike_sas: Vec<IkeSaId>,
    /// What the end of one of its IKE SAs calls for (`None`: no IKE).
    pub(crate) actions: Option<Actions>,
    /// IKE SAs the daemon initiated for it, not established yet.
    pub(crate) initiating: Vec<IkeSaId>,
}

/// An IKE SA, for `sas` and for finding its Child SAs.
#[derive(Debug)]
pub(crate) struct IkeRecord {
    /// Its connection.
    pub(crate) conn: ConnId,
    /// Our IKE endpoint.
    pub(crate) local: SocketAddr,
    /// The peer's.
    pub(crate) remote: SocketAddr,
    /// Our identity.
    pub(crate) local_id: String,
    /// The peer's.
    pub(crate) remote_id: String,
    /// We initiated it.
    pub(crate) initiator: bool,
    /// Since when we know it.
    pub(crate) since: Instant,
    /// Authenticated.
    pub(crate) established: bool,
    /// Its Child SAs (not those lingering after a rekey).
    pub(crate) sas: Vec<SaId>,
}

type SpiMap<V> = HashMap<u32, V, BuildHasherDefault<SpiHasher>>;

/// The table (see the module docs).
#[derive(Debug)]
pub(crate) struct Table {
    workers: u16,
    path_mtu: u16,
    conns: Slab<Conn>,
    conn_names: HashMap<Arc<str>, ConnId>,
    children: Slab<Child>,
    groups: HashMap<GroupId, ChildId, BuildHasherDefault<SpiHasher>>,
    next_group: GroupId,
    sas: Slab<ChildSa>,
    by_in: SpiMap<SaId>,
    /// Outbound SPIs are the peers' choice: two peers may pick the same.
    by_out: SpiMap<smallvec::SmallVec<[SaId; 1]>>,
    ike_sas: HashMap<IkeSaId, IkeRecord>,
    /// IKE SAs being negotiated that the daemon initiated, by connection.
    initiating: HashMap<IkeSaId, ConnId>,
    /// IKE SAs of connections a reload removed or changed, until the
    /// engine reports them gone (see [`conn`]).
    retired: HashSet<IkeSaId>,
    /// Policy ids in use (the workers' SPDs are indexed by them).
    policies: Slab<ChildId>,
    /// Lingering inbound SAs by when they go (checked against the SA, so
    /// an entry whose SA went earlier is skipped).
    lingering: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Outbound halves waiting for the peer's first packet (by inbound
    /// SPI), with when they go in regardless.
    confirming: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Every inbound SA's last-packet time, for the engine's liveness
    /// checks.
    last_packets: LastPackets,
    /// How many children want each prefix of the peer's selectors routed:
    /// one count per child for its configured selectors, one for its
    /// group's (the negotiated ones). A route goes when no child wants it
    /// (see [`Table::flush_unroutes`]).
    routed: HashMap<Prefix, u32>,
    /// Prefixes whose count fell to zero since the last flush.
    unrouting: Vec<Prefix>,
    effects: Vec<Effect>,
}

impl Table {
    /// An empty table for `workers` workers and a path MTU.
    pub(crate) fn new(workers: u16, path_mtu: u16) -> Self {
        Self {
            workers: workers.max(1),
            path_mtu,
            conns: Slab::new(),
            conn_names: HashMap::new(),
            children: Slab::new(),
            groups: HashMap::default(),
            next_group: 1,
            sas: Slab::new(),
            by_in: SpiMap::default(),
            by_out: SpiMap::default(),
            ike_sas: HashMap::new(),
            initiating: HashMap::new(),
            retired: HashSet::new(),
            policies: Slab::new(),
            lingering: BinaryHeap::new(),
            confirming: BinaryHeap::new(),
            last_packets: LastPackets::default(),
            routed: HashMap::new(),
            unrouting: Vec::new(),
            effects: Vec::new(),
        }
    }

    pub(super) fn emit(&mut self, e: Effect) {
        self.effects.push(e);
    }

    /// The last-packet times of every inbound SA, for the IKE engine
    /// (`Endpoint::set_inbound_activity`).
    pub(crate) fn last_packets(&self) -> LastPackets {
        self.last_packets.clone()
    }

    /// Takes the effects queued since the last call, in order.
    pub(crate) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// A table holding every connection and child of `cfg` (nothing
    /// installed yet). `local_ip` stands in for the peer of an IKE child
    /// without `remote_addrs` (a responder-only connection: its SAs send
    /// to whoever negotiated them).
    pub(crate) fn from_config(cfg: &Config, workers: u16, local_ip: IpAddr) -> Self {
        let mut t = Self::new(workers, cfg.daemon.path_mtu);
        for conn in &cfg.connections {
            t.add_configured(conn, local_ip);
        }
        t
    }

    /// Adds a configured connection and its children (nothing installed
    /// yet), with what the end of its IKE SAs calls for; `local_ip` as in
    /// [`Table::from_config`].
    pub(crate) fn add_configured(&mut self, conn: &Connection, local_ip: IpAddr) -> ConnId {
        let id = self.add_conn(&conn.name);
        self.conns[id.0].actions = conn.ike.as_ref().map(|c| Actions { dpd: c.dpd_action, close: c.close_action });
        let peer = SocketAddr::new(conn.remote_addrs.first().copied().unwrap_or(local_ip), conn.remote_port);
        for child in &conn.children {
            let ike = child.static_sas.is_none();
            let mut lifetime = child.lifetime;
            if ike {
                lifetime.soft_time = None;
                lifetime.hard_time = lifetime.hard_time.map(|t| t + LIFETIME_GRACE);
            }
            let settings = Settings {
                local_ts: child.local_ts.clone(),
                remote_ts: child.remote_ts.clone(),
                peer,
                replay_window: child.replay_window,
                lifetime,
                per_cpu: ike && child.per_cpu_sas != PerCpuSas::No,
                ipcomp: child.ipcomp,
                link_mbps: child.link_mbps,
            };
            self.add_child(id, &child.name, settings);
        }
        id
    }

    /// Adds a connection (names are unique; an existing one is returned).
    pub(crate) fn add_conn(&mut self, name: &str) -> ConnId {
        if let Some(&id) = self.conn_names.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let id = ConnId(self.conns.insert(Conn {
            name: name.clone(),
            children: Vec::new(),
            ike_sas: Vec::new(),
            actions: None,
            initiating: Vec::new(),
        }));
        self.conn_names.insert(name, id);
        id
    }

    /// Adds a child to a connection.
    pub(crate) fn add_child(&mut self, conn: ConnId, name: &str, settings: Settings) -> ChildId {
        self.count_routes(&settings.remote_ts, 1);
        let id = ChildId(
            self.children
                .insert(Child::new(conn, Arc::from(name), settings, self.workers)),
        );
        self.conns[conn.0].children.push(id);
        id
    }

    /// The connection named `name`.
    pub(crate) fn conn_id(&self, name: &str) -> Option<ConnId> {
        self.conn_names.get(name).copied()
    }

    /// The child `child` of connection `conn` (the engine's names).
    pub(crate) fn child_id(&self, conn: &str, child: &str) -> Option<ChildId> {
        let c = self.conns.get(self.conn_id(conn)?.0)?;
        c.children
            .iter()
            .copied()
            .find(|id| &*self.children[id.0].name == child)
    }

    /// A connection.
    pub(crate) fn conn(&self, id: ConnId) -> Option<&Conn> {
        self.conns.get(id.0)
    }

    /// A child.
    pub(crate) fn child(&self, id: ChildId) -> Option<&Child> {
        self.children.get(id.0)
    }

    /// The connection's and the child's names.
    pub(crate) fn names(&self, id: ChildId) -> Option<(&Arc<str>, &Arc<str>)> {
        let c = self.children.get(id.0)?;
        Some((&self.conns[c.conn.0].name, &c.name))
    }

    /// The Child SA we receive on with `spi`.
    #[cfg(test)]
    pub(crate) fn by_in_spi(&self, spi: u32) -> Option<(SaId, &ChildSa)> {
        self.by_in.get(&spi).map(|id| (*id, &self.sas[id.0]))
    }

    /// A Child SA.
    pub(crate) fn sa(&self, id: SaId) -> Option<&ChildSa> {
        self.sas.get(id.0)
    }

    /// An IKE SA's record.
    pub(crate) fn ike_sa(&self, id: IkeSaId) -> Option<&IkeRecord> {
        self.ike_sas.get(&id)
    }

    /// Numbers of children, Child SAs and IKE SAs.
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        (self.children.len(), self.sas.len(), self.ike_sas.len())
    }

    /// Gives `child` a group with policies for these selectors (or sets
    /// its policies to them), and routes traffic from ours to the peer's
    /// again.
    pub(super) fn ensure_group(
        &mut self,
        child: ChildId,
        local_ts: &[Selector],
        remote_ts: &[Selector],
        peer: SocketAddr,
        per_cpu: bool,
    ) {
        let c = &mut self.children[child.0];
        let (id, changed) = match &mut c.group {
            Some(g) => {
                g.peer = peer;
                (g.id, g.local_ts != local_ts || g.remote_ts != remote_ts)
            }
            None => {
                let id = self.next_group;
                // Group ids are never reused: an acquire raised for a
                // group that is gone must not reach a new one.
                self.next_group = self.next_group.wrapping_add(1).max(1);
                c.group = Some(Group {
                    id,
                    per_cpu,
                    local_ts: Vec::new(),
                    remote_ts: Vec::new(),
                    peer,
                    policies: Vec::new(),
                });
                self.groups.insert(id, child);
                for k in 0..self.workers {
                    self.emit(Effect::Worker(k, Command::AddGroup { id, per_cpu }));
                }
                (id, true)
            }
        };
        if changed {
            // The new policies go in before the old ones leave, so that no
            // packet of the child finds no policy in between.
            let old = self.children[child.0]
                .group
                .as_mut()
                .map(|g| std::mem::take(&mut g.policies))
                .unwrap_or_default();
            let mut ids = Vec::new();
            for l in local_ts {
                for r in remote_ts.iter().filter(|r| r.addrs.family() == l.addrs.family()) {
                    let policy = Policy {
                        local: *l,
                        remote: *r,
                        action: Action::Protect(id),
                        priority: Policy::auto_priority(l, r),
                    };
                    let pid = u32::try_from(self.policies.insert(child)).unwrap_or(u32::MAX);
                    ids.push(pid);
                    for k in 0..self.workers {
                        self.emit(Effect::Worker(k, Command::AddPolicy(pid, Box::new(policy.clone()))));
                    }
                }
            }
            self.retire_policies(old);
            let mut old_remote = Vec::new();
            if let Some(g) = &mut self.children[child.0].group {
                g.policies = ids;
                g.local_ts = local_ts.to_vec();
                old_remote = std::mem::replace(&mut g.remote_ts, remote_ts.to_vec());
            }
            self.count_routes(remote_ts, 1);
            self.count_routes(&old_remote, -1);
            self.flush_unroutes();
        }
        self.emit(Effect::Routes { local: local_ts.to_vec(), remote: remote_ts.to_vec() });
    }

    /// Counts a child's wish for the routes of `remote_ts` in (`+1`) or
    /// out (`-1`).
    fn count_routes(&mut self, remote_ts: &[Selector], delta: i32) {
        for ts in remote_ts {
            for p in esparto_io::route::range_to_prefixes(ts.addrs.start(), ts.addrs.end()) {
                if delta > 0 {
                    *self.routed.entry(p).or_default() += 1;
                    continue;
                }
                if let Some(n) = self.routed.get_mut(&p) {
                    *n -= 1;
                    if *n == 0 {
                        self.routed.remove(&p);
                        self.unrouting.push(p);
                    }
                }
            }
        }
    }

    /// Unroutes the prefixes no child wants any more. Removing children
    /// leaves this to the caller, so that a reload that drops a connection
    /// and loads it again keeps its routes throughout (its traffic is
    /// dropped in the device meanwhile instead of leaving by another
    /// route): it calls this once the new connections are in.
    pub(crate) fn flush_unroutes(&mut self) {
        let mut gone = std::mem::take(&mut self.unrouting);
        gone.retain(|p| !self.routed.contains_key(p));
        gone.sort_unstable();
        gone.dedup();
        if !gone.is_empty() {
            self.emit(Effect::Unroute(gone));
        }
    }

    /// The prefixes routed into the TUN device and how many groups route
    /// each.
    #[cfg(test)]
    pub(crate) fn routed(&self) -> &HashMap<Prefix, u32> {
        &self.routed
    }

    fn remove_policies(&mut self, child: ChildId) {
        let Some(g) = self.children[child.0].group.as_mut() else {
            return;
        };
        let ids = std::mem::take(&mut g.policies);
        self.retire_policies(ids);
    }

    /// Takes `child`'s group (and its policies) out of every worker.
    fn remove_group(&mut self, child: ChildId) {
        self.remove_policies(child);
        let Some(g) = self.children[child.0].group.take() else { return };
        self.groups.remove(&g.id);
        for k in 0..self.workers {
            self.emit(Effect::Worker(k, Command::RemoveGroup(g.id)));
        }
        self.count_routes(&g.remote_ts, -1);
    }

    /// Takes `child`'s trap policy away (VICI `uninstall`): no more
    /// acquires, and with no Child SA using them, its policies and group
    /// go too (its traffic then meets no policy and is dropped). False if
    /// it had no trap.
    pub(crate) fn disarm_trap(&mut self, child: ChildId) -> bool {
        let Some(c) = self.children.get_mut(child.0) else { return false };
        if !std::mem::replace(&mut c.trap, false) {
            return false;
        }
        if c.sas.is_empty() {
            self.remove_group(child);
        }
        true
    }

    /// Takes policies out of every worker's SPD and frees their ids.
    fn retire_policies(&mut self, ids: Vec<PolicyId>) {
        for pid in ids {
            self.policies.try_remove(pid as usize);
            for k in 0..self.workers {
                self.emit(Effect::Worker(k, Command::RemovePolicy(pid)));
            }
        }
    }

    /// Tells the workers whether to ask for their own sub-SAs of `child`.
    pub(super) fn set_per_cpu(&mut self, child: ChildId, on: bool) {
        let Some(g) = self.children[child.0].group.as_mut() else {
            return;
        };
        if g.per_cpu == on {
            return;
        }
        g.per_cpu = on;
        let id = g.id;
        for k in 0..self.workers {
            self.emit(Effect::Worker(k, Command::AddGroup { id, per_cpu: on }));
        }
    }

    /// Removes a child: its policies first (so no packet is encapsulated
    /// on an SA about to go), then its group and every SA.
    pub(crate) fn remove_child(&mut self, child: ChildId) {
        if !self.children.contains(child.0) {
            return;
        }
        self.remove_policies(child);
        for id in self.children[child.0].sas.clone() {
            self.remove_sa(id);
        }
        self.remove_group(child);
        let c = self.children.remove(child.0);
        self.count_routes(&c.settings.remote_ts, -1);
        if let Some(conn) = self.conns.get_mut(c.conn.0) {
            conn.children.retain(|x| *x != child);
        }
    }

    /// Removes a connection with its children (their policies, SAs and
    /// groups; the routes no other child wants go at the next
    /// [`flush_unroutes`](Self::flush_unroutes)) and its IKE SA records,
    /// in the time of its children: what a configuration reload does to a
    /// connection it drops or changes. Its IKE SAs, established or being
    /// negotiated, are retired (the engine deletes them): their later
    /// events no longer reach the table. What the connection's record held
    /// for the IKE driver ([`conn`]) goes with it.
    pub(crate) fn remove_conn(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(conn.0) else { return };
        let children = c.children.clone();
        for child in children {
            self.remove_child(child);
        }
        let c = self.conns.remove(conn.0);
        for id in &c.ike_sas {
            self.ike_sas.remove(id);
        }
        for id in &c.initiating {
            self.initiating.remove(id);
        }
        self.retired.extend(c.ike_sas.iter().chain(&c.initiating).copied());
        self.conn_names.remove(&c.name);
    }
}
