//! The IKE driver: runs the sans-IO [`Endpoint`] on real sockets and turns
//! its events into data-plane installs.
//!
//! IKE arrives on UDP 500 (a plain socket of its own) and, once NAT-T
//! floats, on UDP 4500 behind the non-ESP marker: there it shares the port
//! with ESP, and the SPI-steering program hands it to the reuseport group's
//! control socket (or, coalesced behind ESP by GRO, a worker forwards it).
//! Outbound IKE leaves through the socket of the port the engine chose.
//!
//! Events are translated one to one (RFC 7296 ↔ XFRM, as Linux splits it
//! between the IKE daemon and the kernel):
//! - `ChildSaEstablished` → the child's group gets the pair (inbound first),
//!   in the fallback slot, or a worker's slot for a per-resource Child SA;
//! - `ChildSaDeleted` → the pair goes; the group and its policies stay;
//! - a worker's `Acquire` for a trap policy → `Endpoint::acquire`.
//!
//! Inbound ESP SPIs are chosen by [`SteeringSpis`]: random in every bit the
//! steering rule does not fix, so each SA is processed by a chosen worker
//! (round-robin, spreading tunnels over cores) yet stays unpredictable.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use esparto_crypto::{Rng, SystemRng};
use esparto_ike::{ChildSaEstablished, Endpoint, EndpointConfig, Event, IkeSaId, SpiAllocator, StartAction};
use tracing::{info, warn};

use super::install::{ChildParams, SaPair, Slot};
use super::Gateway;
use crate::config::{Config, PerCpuSas};
use crate::status::{ChildSaStatus, IkeSaStatus, Status};

/// How long a trap acquire for one child is considered pending.
const ACQUIRE_PENDING: Duration = Duration::from_secs(30);
/// Largest IKE datagram we read.
const MAX_IKE_DATAGRAM: usize = 65_535;

/// Inbound SPIs that steer to a chosen worker (see the module docs).
#[derive(Debug)]
pub struct SteeringSpis {
    workers: usize,
    next: usize,
    live: HashSet<u32>,
}

impl SteeringSpis {
    /// An allocator for `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self { workers: workers.max(1), next: 0, live: HashSet::new() }
    }
}

impl SpiAllocator for SteeringSpis {
    fn allocate(&mut self, rng: &mut dyn Rng, worker: Option<u16>) -> u32 {
        let w = match worker {
            Some(k) => usize::from(k) % self.workers,
            None => {
                self.next = (self.next + 1) % self.workers;
                self.next
            }
        };
        loop {
            let mut b = [0u8; 4];
            rng.fill_public(&mut b);
            if let Some(spi) = esparto_io::spi_for_worker(u32::from_be_bytes(b), w, self.workers) {
                if self.live.insert(spi) {
                    return spi;
                }
            }
        }
    }

    fn release(&mut self, spi: u32) {
        self.live.remove(&spi);
    }
}

/// The daemon-side settings of a negotiated child.
#[derive(Debug, Clone)]
struct ChildSettings {
    replay_window: u32,
    lifetime: esparto_esp::Lifetime,
    per_cpu: bool,
    start: StartAction,
}

#[derive(Debug)]
struct ChildRecord {
    child: Arc<str>,
    in_spi: u32,
    out_spi: u32,
    suite: &'static str,
    resource: Option<u16>,
    since: Instant,
}

#[derive(Debug)]
struct IkeRecord {
    connection: Arc<str>,
    local: SocketAddr,
    remote: SocketAddr,
    local_id: String,
    remote_id: String,
    initiator: bool,
    since: Instant,
    established: bool,
    children: Vec<ChildRecord>,
}

/// The IKE side of the daemon.
pub struct Ike {
    ep: Endpoint,
    sock500: UdpSocket,
    natt_port: u16,
    settings: HashMap<(String, String), ChildSettings>,
    /// Trap groups: group id → (connection, child).
    traps: HashMap<u32, (String, String)>,
    pending: HashMap<(String, String), Instant>,
    /// Children to start once their connection's IKE SA is up.
    start_after: HashMap<String, Vec<String>>,
    sas: BTreeMap<IkeSaId, IkeRecord>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Ike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ike").field("ike_sas", &self.sas.len()).finish()
    }
}

impl Ike {
    /// Sets up the endpoint and the port-500 socket if the configuration has
    /// IKE connections; installs trap policies; initiates `start` children.
    pub fn start(cfg: &mut Config, gw: &mut Gateway, now: Instant) -> Result<Option<Self>> {
        if cfg.connections.iter().all(|c| c.ike.is_none()) {
            return Ok(None);
        }
        let ep_cfg = EndpointConfig { ike_port: cfg.daemon.ike_port, natt_port: cfg.daemon.port, ..EndpointConfig::default() };
        let mut ep = Endpoint::new(ep_cfg, Box::new(SystemRng), Box::new(SteeringSpis::new(gw.workers())));
        *ep.secrets_mut() = std::mem::take(&mut cfg.secrets);
        let bind = SocketAddr::new(gw.local_ip(), cfg.daemon.ike_port);
        let sock500 = UdpSocket::bind(bind).with_context(|| format!("binding IKE socket {bind} (is another IKE daemon running?)"))?;
        sock500.set_nonblocking(true)?;
        let mut ike = Self {
            ep,
            sock500,
            natt_port: cfg.daemon.port,
            settings: HashMap::new(),
            traps: HashMap::new(),
            pending: HashMap::new(),
            start_after: HashMap::new(),
            sas: BTreeMap::new(),
            buf: vec![0u8; MAX_IKE_DATAGRAM],
        };
        for conn in &cfg.connections {
            let Some(ike_conn) = &conn.ike else { continue };
            ike.ep.add_connection(ike_conn.clone()).with_context(|| format!("connection {}", conn.name))?;
            let mut starts = Vec::new();
            for child in &conn.children {
                let start = ike_conn.child(&child.name).map(|c| c.start_action).unwrap_or_default();
                ike.settings.insert(
                    (conn.name.clone(), child.name.clone()),
                    ChildSettings {
                        replay_window: child.replay_window,
                        lifetime: child.lifetime,
                        per_cpu: child.per_cpu_sas != PerCpuSas::No,
                        start,
                    },
                );
                match start {
                    StartAction::Trap => {
                        let peer = conn.remote_addrs.first().copied().context("a trap needs remote_addrs")?;
                        let params = ChildParams {
                            local_ts: child.local_ts.clone(),
                            remote_ts: child.remote_ts.clone(),
                            peer: SocketAddr::new(peer, conn.remote_port),
                            replay_window: child.replay_window,
                            lifetime: child.lifetime,
                            per_cpu: false,
                        };
                        let group = gw.ensure_child(&conn.name, &child.name, params)?;
                        ike.traps.insert(group, (conn.name.clone(), child.name.clone()));
                        info!(connection = %conn.name, child = %child.name, "trap policy installed");
                    }
                    StartAction::Start => starts.push(child.name.clone()),
                    StartAction::None => {}
                }
            }
            if let Some((first, rest)) = starts.split_first() {
                ike.ep.initiate(now, &conn.name, Some(first)).with_context(|| format!("initiating {}", conn.name))?;
                ike.start_after.insert(conn.name.clone(), rest.to_vec());
            }
        }
        ike.flush(now, gw);
        Ok(Some(ike))
    }

    /// File descriptors to wait on (port 500; port 4500 is the gateway's).
    pub fn fds(&self) -> [RawFd; 1] {
        [self.sock500.as_raw_fd()]
    }

    /// When [`tick`](Self::tick) must run next.
    pub fn next_timeout(&mut self) -> Option<Instant> {
        self.ep.poll_timeout()
    }

    /// Reads every pending datagram from both IKE sockets.
    pub fn on_readable(&mut self, now: Instant, gw: &mut Gateway) {
        let local500 = self.sock500.local_addr().ok();
        loop {
            match self.sock500.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    if let Some(local) = local500 {
                        self.ep.handle_datagram(now, local, from, &self.buf[..n]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let local4500 = gw.udp_control().local_addr();
        while let Ok(Some((n, from))) = gw.udp_control().recv_from(&mut self.buf) {
            self.ep.handle_datagram(now, local4500, from, &self.buf[..n]);
        }
        self.flush(now, gw);
    }

    /// IKE datagrams a worker caught on the data sockets.
    pub fn on_stray(&mut self, now: Instant, gw: &mut Gateway, from: SocketAddr, data: &[u8]) {
        let local4500 = gw.udp_control().local_addr();
        self.ep.handle_datagram(now, local4500, from, data);
        self.flush(now, gw);
    }

    /// A worker has traffic for a group with no SA.
    pub fn on_acquire(&mut self, now: Instant, gw: &mut Gateway, group: u32, worker: Option<u16>) {
        let Some((conn, child)) = self.traps.get(&group).cloned() else { return };
        if worker.is_some() {
            return; // per-CPU sub-SAs: issue 5
        }
        let key = (conn.clone(), child.clone());
        if self.pending.get(&key).is_some_and(|t| now.duration_since(*t) < ACQUIRE_PENDING) {
            return;
        }
        match self.ep.acquire(now, &conn, &child, None) {
            Ok(id) => {
                info!(connection = %conn, child = %child, ike_sa = %id, "acquire: negotiating");
                self.pending.insert(key, now);
            }
            Err(e) => warn!(connection = %conn, child = %child, error = ?e, "acquire failed"),
        }
        self.flush(now, gw);
    }

    /// Timers: retransmissions, liveness, half-open expiry.
    pub fn tick(&mut self, now: Instant, gw: &mut Gateway) {
        self.ep.handle_timeout(now);
        self.flush(now, gw);
    }

    /// `esparto up NAME`.
    pub fn up(&mut self, now: Instant, gw: &mut Gateway, name: &str) -> Result<String, String> {
        let r = self.ep.initiate(now, name, None).map_err(|e| format!("{name}: {e:?}"));
        self.flush(now, gw);
        r.map(|id| format!("initiating IKE SA {id} for {name}"))
    }

    /// `esparto down NAME`.
    pub fn down(&mut self, now: Instant, gw: &mut Gateway, name: &str) -> Result<String, String> {
        let ids: Vec<IkeSaId> = self.sas.iter().filter(|(_, r)| &*r.connection == name).map(|(id, _)| *id).collect();
        if ids.is_empty() {
            return Err(format!("{name}: no IKE SA"));
        }
        for id in &ids {
            if let Err(e) = self.ep.terminate(now, *id) {
                warn!(ike_sa = %id, error = ?e, "terminate failed");
            }
        }
        self.flush(now, gw);
        Ok(format!("deleting {} IKE SA(s) of {name}", ids.len()))
    }

    /// Sends what the engine queued and acts on its events.
    fn flush(&mut self, now: Instant, gw: &mut Gateway) {
        loop {
            let mut progress = false;
            while let Some(t) = self.ep.poll_transmit() {
                progress = true;
                let r = if t.local.port() == self.natt_port {
                    gw.udp_control().send_to(&t.data, t.remote).map(|_| ())
                } else {
                    self.sock500.send_to(&t.data, t.remote).map(|_| ())
                };
                if let Err(e) = r {
                    warn!(remote = %t.remote, error = %e, "IKE send failed");
                }
            }
            while let Some(ev) = self.ep.poll_event() {
                progress = true;
                self.on_event(now, gw, ev);
            }
            if !progress {
                break;
            }
        }
    }

    fn on_event(&mut self, now: Instant, gw: &mut Gateway, ev: Event) {
        match ev {
            Event::IkeSaEstablished { ike_sa, connection, local, remote, local_id, remote_id, initiator } => {
                info!(%ike_sa, %connection, %remote, %remote_id, "IKE SA established");
                let rec = self.sas.entry(ike_sa).or_insert_with(|| IkeRecord {
                    connection: connection.clone(),
                    local,
                    remote,
                    local_id: local_id.to_string(),
                    remote_id: remote_id.to_string(),
                    initiator,
                    since: now,
                    established: true,
                    children: Vec::new(),
                });
                rec.established = true;
                if let Some(rest) = self.start_after.remove(&*connection) {
                    for child in rest {
                        if let Err(e) = self.ep.acquire(now, &connection, &child, None) {
                            warn!(%connection, %child, error = ?e, "starting child failed");
                        }
                    }
                }
            }
            Event::ChildSaEstablished(c) => self.install(now, gw, *c),
            Event::ChildSaDeleted { ike_sa, connection, child, inbound_spi, outbound_spi, reason } => {
                info!(%ike_sa, %connection, %child, in_spi = %format!("{inbound_spi:08x}"), out_spi = %format!("{outbound_spi:08x}"), ?reason, "Child SA deleted");
                if let Err(e) = gw.remove_pair(&connection, &child, inbound_spi, outbound_spi) {
                    warn!(error = %e, "removing Child SA from the data plane");
                }
                if let Some(r) = self.sas.get_mut(&ike_sa) {
                    r.children.retain(|c| c.in_spi != inbound_spi);
                }
            }
            Event::IkeSaDeleted { ike_sa, connection, reason } => {
                info!(%ike_sa, connection = ?connection, ?reason, "IKE SA deleted");
                if let Some(rec) = self.sas.remove(&ike_sa) {
                    // Children die with their IKE SA (RFC 7296 §1.4.1).
                    for c in rec.children {
                        let _ = gw.remove_pair(&rec.connection, &c.child, c.in_spi, c.out_spi);
                    }
                }
            }
            Event::ChildSaFailed { ike_sa, connection, child, reason } => {
                warn!(%ike_sa, %connection, child = ?child, ?reason, "Child SA negotiation failed");
                if let Some(child) = child {
                    self.pending.remove(&(connection.to_string(), child.to_string()));
                }
            }
            Event::AuthFailed { ike_sa, peer, identity, reason } => {
                warn!(%ike_sa, %peer, identity = ?identity.map(|i| i.to_string()), ?reason, "IKE authentication failed");
            }
            Event::IkeSaRekeyed { old, new, connection } => {
                // RFC 7296 §1.3.2: the new IKE SA inherits every Child SA.
                info!(%old, %new, %connection, "IKE SA rekeyed");
                if let Some(rec) = self.sas.remove(&old) {
                    self.sas.insert(new, rec);
                }
            }
            Event::ChildSaOutboundActive { ike_sa, connection, child, inbound_spi, outbound_spi } => {
                // TODO(lead): install() switches outbound at once; defer it for
                // `outbound_active: false` and switch here (esparto-ike event.rs).
                info!(%ike_sa, %connection, %child, in_spi = %format!("{inbound_spi:08x}"), out_spi = %format!("{outbound_spi:08x}"), "Child SA outbound active");
            }
            Event::PerResourceUnavailable { ike_sa, connection, child, reason } => {
                info!(%ike_sa, %connection, %child, ?reason, "no per-resource Child SAs");
            }
            Event::PeerAddressChanged { ike_sa, local, remote } => {
                info!(%ike_sa, %local, %remote, "peer address changed");
                if let Some(r) = self.sas.get_mut(&ike_sa) {
                    r.local = local;
                    r.remote = remote;
                }
            }
        }
    }

    fn install(&mut self, now: Instant, gw: &mut Gateway, c: ChildSaEstablished) {
        let key = (c.connection.to_string(), c.child.to_string());
        self.pending.remove(&key);
        let Some(settings) = self.settings.get(&key).cloned() else {
            warn!(connection = %c.connection, child = %c.child, "Child SA for an unknown child: not installed");
            return;
        };
        // ESP always travels in UDP (RFC 3948) to the peer's NAT-T port.
        let peer_port = if c.remote.port() == gw_ike_port(&self.sock500) { self.natt_port } else { c.remote.port() };
        let params = ChildParams {
            local_ts: c.local_ts.iter().map(to_esp_ts).collect(),
            remote_ts: c.remote_ts.iter().map(to_esp_ts).collect(),
            peer: SocketAddr::new(c.remote.ip(), peer_port),
            replay_window: settings.replay_window,
            lifetime: settings.lifetime,
            per_cpu: settings.per_cpu && settings.start != StartAction::Trap,
        };
        let slot = match c.resource {
            Some(k) => Slot::Worker(k),
            None => Slot::Fallback,
        };
        let pair = SaPair {
            suite: c.suite,
            esn: c.esn,
            in_spi: c.inbound_spi,
            out_spi: c.outbound_spi,
            in_key: &c.inbound_key,
            out_key: &c.outbound_key,
            slot,
        };
        let r = gw.ensure_child(&c.connection, &c.child, params).and_then(|_| gw.add_pair(&c.connection, &c.child, &pair));
        match r {
            Ok(()) => {
                info!(
                    connection = %c.connection, child = %c.child, ike_sa = %c.ike_sa, suite = c.suite.name(),
                    in_spi = %format!("{:08x}", c.inbound_spi), out_spi = %format!("{:08x}", c.outbound_spi),
                    "Child SA installed"
                );
                let rec = self.sas.entry(c.ike_sa).or_insert_with(|| IkeRecord {
                    connection: c.connection.clone(),
                    local: c.local,
                    remote: c.remote,
                    local_id: String::new(),
                    remote_id: String::new(),
                    initiator: c.initiator,
                    since: now,
                    established: true,
                    children: Vec::new(),
                });
                rec.children.push(ChildRecord {
                    child: c.child.clone(),
                    in_spi: c.inbound_spi,
                    out_spi: c.outbound_spi,
                    suite: c.suite.name(),
                    resource: c.resource,
                    since: now,
                });
            }
            Err(e) => warn!(connection = %c.connection, child = %c.child, error = %format!("{e:#}"), "installing Child SA failed"),
        }
    }

    /// The IKE SAs with their Child SAs, joined with the data plane's
    /// counters by SPI.
    pub fn report(&self, now: Instant, dp: &Status) -> Vec<IkeSaStatus> {
        let find = |spi: u32, dir: &str| {
            let hex = format!("{spi:08x}");
            let mut packets = 0;
            let mut bytes = 0;
            let mut worker = None;
            let mut role = None;
            for s in dp.sas.iter().filter(|s| s.spi == hex && s.direction == dir) {
                packets += s.packets;
                bytes += s.bytes;
                worker = Some(s.worker);
                role = Some(s.role.clone());
            }
            (packets, bytes, worker, role)
        };
        self.sas
            .iter()
            .map(|(id, r)| IkeSaStatus {
                id: id.to_string(),
                connection: r.connection.to_string(),
                state: if r.established { "established" } else { "connecting" }.into(),
                initiator: r.initiator,
                local: r.local.to_string(),
                remote: r.remote.to_string(),
                local_id: r.local_id.clone(),
                remote_id: r.remote_id.clone(),
                age_s: now.duration_since(r.since).as_secs_f64(),
                children: r
                    .children
                    .iter()
                    .map(|c| {
                        let (in_packets, in_bytes, in_worker, role) = find(c.in_spi, "in");
                        let (out_packets, out_bytes, _, _) = find(c.out_spi, "out");
                        ChildSaStatus {
                            child: c.child.to_string(),
                            in_spi: format!("{:08x}", c.in_spi),
                            out_spi: format!("{:08x}", c.out_spi),
                            suite: c.suite.into(),
                            role: role.unwrap_or_else(|| "single".into()),
                            in_worker,
                            out_worker: c.resource,
                            age_s: now.duration_since(c.since).as_secs_f64(),
                            in_bytes,
                            in_packets,
                            out_bytes,
                            out_packets,
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

fn gw_ike_port(s: &UdpSocket) -> u16 {
    s.local_addr().map(|a| a.port()).unwrap_or(500)
}

/// An IKE traffic selector as the data plane's.
fn to_esp_ts(ts: &esparto_ike::TrafficSelector) -> esparto_esp::TrafficSelector {
    let addrs = esparto_esp::IpRange::new(ts.start, ts.end).unwrap_or_else(|_| {
        // The engine only produces ranges with both ends of one family and
        // in order; fall back to the start host rather than panic.
        esparto_esp::IpRange::host(ts.start)
    });
    esparto_esp::TrafficSelector { addrs, proto: ts.protocol, port_start: ts.start_port, port_end: ts.end_port }
}
