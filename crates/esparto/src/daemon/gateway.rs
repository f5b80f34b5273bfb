//! The running gateway: one multi-queue TUN device, one SPI-steered UDP
//! socket group, one pinned worker per core, and the Child SA table
//! ([`super::table`]) that says what they hold.
//!
//! Start-up is all-or-nothing: the TUN device, the sockets and the worker
//! threads are created first, then every child's policies and SAs are
//! installed; any failure tears down what was created and returns the
//! error, so a daemon never runs half-configured. The worker threads are
//! started from a thread that has given up every capability, so they run
//! with none: they only read and write the descriptors set-up gave them.
//!
//! Routing is Esparto's own table behind policy rules
//! ([`esparto_io::routing`]): claimed first, before any device exists (a
//! table or rule priority someone else uses refuses the start with nothing
//! changed; what a daemon that died left there is removed), the daemon's
//! sockets marked so that its own IKE and ESP bypass the tunnel, and every
//! peer's route checked once the static children are in. The gateway
//! removes every route and rule it added when it stops.
//!
//! The gateway is driven by the daemon's control thread. It never touches a
//! packet: it sends the workers the commands the table's transitions
//! produce ([`Gateway::apply`]: built SAs, policies one at a time, groups)
//! and sets routes, drains their events, and gathers statistics snapshots
//! for `status`, which the table labels ([`Gateway::gather`], on the
//! control thread) and which are formatted afterwards
//! ([`Gathered::into_status`], on the metrics endpoint's thread for a
//! scrape).
//! Every channel between it and the workers is bounded (`esparto_io::worker`
//! says how and why): what a worker cannot hand over is dropped and counted
//! (`control_queue_full`), and the status's drops by reason include the I/O
//! layer's beside the ESP engine's.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use esparto_esp::{Command, Direction, TAILROOM, max_inner_len};
use esparto_io::udp::UdpConfig;
use esparto_io::routing::{PeerPath, Prefix, RoutingError, TunnelRouting};
use esparto_io::wake::Waker;

use super::barrier::{Admit, Barriers};
use super::router::Router;
use esparto_io::netdev::DeviceStats;
use esparto_io::worker::{ControlDatagram, IoStats, WorkerFailure};
use esparto_io::{ControlRx, control_channel};
use esparto_io::{Steering, TunConfig, TunDevice, UdpGroup, UdpSocket, WorkerConfig, Workers};
use tracing::{info, warn};

use super::seqstate::{self, Claims, FsStore, PairAt, Reservations, StaticOut, Store};
use super::table::report::Counters;
use super::table::{Effect, Table};
use crate::config::{Config, Connection};
use crate::metrics::SaRow;
use crate::datapath::{self, EspCommand, EspDatapath, IcmpSources, SPI_STEERING, Snapshot, WorkerEvent};
use crate::status::{DeviceStatus, IkeSaStatus, IoStatus, LoopGapsStatus, SaStatus, Status, WorkerStatus};

/// TUN MTU when no SA suite is known yet (IKE children before negotiation).
const DEFAULT_TUN_MTU: u16 = 1400;
/// How long `status` waits for the workers' snapshots.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(1);
/// Least time between two log lines about failing reservation writes.
const RESERVATION_WARN_EVERY: Duration = Duration::from_secs(10);

/// The running data plane.
pub struct Gateway {
    started: Instant,
    tun: String,
    steering: Steering,
    nworkers: usize,
    workers: Workers<EspCommand>,
    events: mpsc::Receiver<WorkerEvent>,
    control_dgrams: ControlRx,
    /// The reuseport group's control socket (IKE on the NAT-T port).
    udp_control: UdpSocket,
    /// Routes into the TUN device, and the rules that lead to them
    /// (changed on a thread of their own once the daemon runs).
    routing: Router,
    /// Every child and Child SA, and what the workers hold of them.
    pub(super) table: Table,
    bind: SocketAddr,
    /// The sockets serve IPv4 and IPv6 ([`dual_stack`]).
    dual_stack: bool,
    /// Sequence numbers reserved for static SAs (none without static children).
    reservations: Option<Reservations<FsStore>>,
    /// When a failed reservation write was last logged.
    reservation_warned: Option<Instant>,
    /// The kernel's counters of the TUN device.
    device: DeviceCounters,
    /// The table's effects held until the workers confirm an install
    /// ([`super::barrier`]).
    barriers: Barriers,
    /// Raised by the workers when they send an event.
    waker: Arc<Waker>,
}

/// The kernel's own counters of the TUN device (`esparto_io::netdev`),
/// read for each status and scrape: the packets the kernel dropped in
/// front of the workers, which no worker can count. Counted from the
/// daemon's start (a device left by an earlier run keeps its counters, so
/// they are read once at start and taken off).
struct DeviceCounters {
    name: String,
    baseline: DeviceStats,
}

impl DeviceCounters {
    fn new(name: &str) -> Self {
        let baseline = esparto_io::netdev::stats(name).ok().flatten().unwrap_or_default();
        Self { name: name.to_string(), baseline }
    }

    /// The device's counters since the start; `None` if the kernel did not
    /// say.
    fn read(&self) -> Option<DeviceStatus> {
        let now = esparto_io::netdev::stats(&self.name).ok().flatten()?;
        let b = self.baseline;
        Some(DeviceStatus {
            name: self.name.clone(),
            to_workers: now.tx_packets.saturating_sub(b.tx_packets),
            queue_full: now.tx_dropped.saturating_sub(b.tx_dropped),
            from_workers: now.rx_packets.saturating_sub(b.rx_packets),
            input_dropped: now.rx_dropped.saturating_sub(b.rx_dropped),
        })
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("tun", &self.tun).field("workers", &self.nworkers).finish()
    }
}

/// The TUN MTU: the largest inner packet every configured SA can carry.
pub(super) fn tun_mtu(cfg: &Config) -> u16 {
    let mut mtu: Option<usize> = None;
    for conn in &cfg.connections {
        let Some(peer) = conn.remote_addrs.first() else { continue };
        let peer = SocketAddr::new(*peer, conn.remote_port);
        for child in &conn.children {
            if let Some(s) = &child.static_sas {
                let m = max_inner_len(s.suite, &peer, cfg.daemon.path_mtu);
                mtu = Some(mtu.map_or(m, |x| x.min(m)));
            }
        }
    }
    mtu.map_or(DEFAULT_TUN_MTU, |m| m.clamp(576, usize::from(u16::MAX)) as u16)
}

/// Whether the connections have peers (or local addresses) of both
/// families, or name a peer by host name with no local address to fix
/// its family: then one dual-stack IPv6 socket per group serves both
/// (IPv4 peers as IPv4-mapped addresses on the wire of the socket API
/// only).
pub(super) fn dual_stack(cfg: &Config) -> bool {
    if cfg.connections.iter().any(|c| !c.remote_hosts.is_empty() && c.local_addrs.is_empty()) {
        return true;
    }
    let mut addrs = cfg.connections.iter().flat_map(|c| c.local_addrs.iter().chain(&c.remote_addrs));
    let Some(first) = addrs.next() else { return false };
    addrs.any(|a| a.is_ipv6() != first.is_ipv6())
}

/// The local address to bind: the one address every connection names, or
/// the wildcard of their family — IPv6's, dual-stack, when they have
/// both ([`dual_stack`]).
pub(super) fn bind_addr(cfg: &Config) -> SocketAddr {
    if dual_stack(cfg) {
        return SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), cfg.daemon.port);
    }
    let locals: Vec<IpAddr> = cfg.connections.iter().filter_map(|c| c.local_addrs.first().copied()).collect();
    let remotes: Vec<IpAddr> = cfg.connections.iter().filter_map(|c| c.remote_addrs.first().copied()).collect();
    let v6 = locals.first().or(remotes.first()).is_some_and(IpAddr::is_ipv6);
    // One address only if every connection names it: one without
    // local_addrs (`%any`) may be reached at, and send from, any.
    let every = cfg.connections.iter().all(|c| !c.local_addrs.is_empty());
    let ip = match locals.first() {
        Some(first) if every && locals.iter().all(|a| a == first) => *first,
        _ if v6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, cfg.daemon.port)
}

/// The CPUs the workers are pinned to, round-robin: `[daemon] cpus`
/// (each one this process may run on), else every CPU it may use.
fn worker_cpus(cfg: &Config) -> Result<Vec<usize>> {
    let allowed = esparto_io::cpu::allowed_cpus().unwrap_or_default();
    if cfg.daemon.cpus.is_empty() {
        return Ok(allowed);
    }
    if let Some(c) = cfg.daemon.cpus.iter().find(|c| !allowed.is_empty() && !allowed.contains(c)) {
        bail!(
            "{}: [daemon] cpus: CPU {c} is not one this process may run on (allowed: {allowed:?})",
            cfg.path.display()
        );
    }
    Ok(cfg.daemon.cpus.clone())
}

/// Creates the TUN device with one queue per worker and points the
/// tunnel's routing at it; says so when outbound flows cannot be spread
/// by the flow table.
fn create_tun(cfg: &Config, queues: usize, mtu: u16, routing: &mut TunnelRouting) -> Result<TunDevice> {
    let tun = TunDevice::create(&TunConfig {
        name: cfg.daemon.tun.clone(),
        queues,
        mtu,
        ipv4: None,
        ipv6: None,
        offload: true,
        tx_queue_len: Some(cfg.daemon.tun_queue_len),
        steering: Steering::FlowTable,
    })
    .with_context(|| format!("creating TUN device {} with {queues} queues", cfg.daemon.tun))?;
    routing.attach(tun.name()).context("setting up routing")?;
    let (steering, why) = tun.steering();
    match steering {
        Steering::FlowTable => {}
        Steering::FlowHash => {
            warn!(tun = %tun.name(), reason = why.unwrap_or(""), "outbound flows spread over workers by hash alone: a few flows may share one worker");
        }
        Steering::Kernel => {
            warn!(tun = %tun.name(), reason = why.unwrap_or(""), "outbound flows follow the kernel's flow learning: with one SA pair one worker may carry everything");
        }
    }
    Ok(tun)
}

impl Gateway {
    /// Creates the TUN device, the sockets and the workers, then installs
    /// every statically keyed child. Must run in the gateway's network
    /// namespace, with CAP_NET_ADMIN.
    pub fn start(cfg: &Config) -> Result<Self> {
        let n = cfg.daemon.workers.max(1);
        let cpus = worker_cpus(cfg)?;
        // Before any device: a routing table or rule priority that is
        // someone else's stops the start with nothing changed.
        let (mut routing, cleaned) = TunnelRouting::claim(cfg.daemon.routing.into()).context("setting up routing")?;
        if cleaned.rules + cleaned.routes > 0 {
            info!(
                rules = cleaned.rules, routes = cleaned.routes, table = cfg.daemon.routing.table,
                "removed the routes and rules an earlier esparto left behind"
            );
        }
        // Before any device: a state file that cannot be trusted, or a
        // static SA that may not send, stops the start here.
        let (reservations, claims) = match seqstate::reserve_static(cfg, n)? {
            Some((r, c)) => (Some(r), c),
            None => (None, Claims::new()),
        };
        let mtu = tun_mtu(cfg);
        let tun = create_tun(cfg, n, mtu, &mut routing)?;
        let tun_name = tun.name().to_string();
        let steering = tun.steering().0;
        let bind = bind_addr(cfg);
        let dual_stack = dual_stack(cfg);
        // Marked: the daemon's own ESP and IKE skip the tunnel's rules.
        // The control socket reads IKE, whose local address matters
        // (which connection, NAT detection): told per datagram when the
        // group is on a wildcard address.
        let udp = UdpConfig {
            steering: Some(SPI_STEERING),
            mark: Some(cfg.daemon.routing.mark),
            freebind: super::local_addrs::freebind(bind.ip(), "ESP-in-UDP"),
            dual_stack,
            pktinfo: bind.ip().is_unspecified(),
            ..UdpConfig::default()
        };
        let group = UdpGroup::bind(bind, n, &udp)
            .with_context(|| format!("binding {n}+1 UDP sockets to {bind} (is another esparto or an IKE daemon running?)"))?;
        let (ev_tx, events) = datapath::event_channel();
        let (ctl_tx, control_dgrams) = control_channel(n);
        // ICMP errors about packets too big for the tunnel come from the
        // packet's destination (see `IcmpSources`).
        let icmp = IcmpSources::default();
        // Events wake the control thread: it waits for barriers' answers.
        let waker = Arc::new(Waker::new().context("creating the control thread's wake-up")?);
        let datapaths: Vec<EspDatapath> =
            (0..n).map(|k| EspDatapath::new(k as u16, ev_tx.clone(), icmp).with_waker(waker.clone())).collect();
        let path_mtu = usize::from(cfg.daemon.path_mtu);
        let wcfg = WorkerConfig {
            tun_rx_slot_len: usize::from(mtu) + TAILROOM + 16,
            udp_tx_slot_len: path_mtu.max(1500),
            cpus,
            ..WorkerConfig::default()
        };
        let UdpGroup { workers: socks, control } = group;
        let datapaths = super::fault::inject(datapaths);
        let workers = esparto_io::privs::with_no_capabilities(|| {
            Workers::spawn(&wcfg, tun.into_queues(), socks, datapaths, Some(ctl_tx))
        })
        .and_then(|r| r)
        .context("starting worker threads")?;
        info!(tun = %tun_name, mtu, workers = n, %bind, dual_stack, "data plane up");
        let routing = Router::new(routing)?;
        let table = Table::from_config(cfg, u16::try_from(n).unwrap_or(u16::MAX), bind.ip());
        let device = DeviceCounters::new(&tun_name);
        let mut gw = Self {
            started: Instant::now(),
            tun: tun_name,
            steering,
            nworkers: n,
            workers,
            events,
            control_dgrams,
            udp_control: control,
            routing,
            table,
            bind,
            dual_stack,
            reservations,
            reservation_warned: None,
            device,
            barriers: Barriers::new(n),
            waker,
        };
        let now = Instant::now();
        for conn in &cfg.connections {
            gw.install_static(now, conn, &claims)?;
        }
        gw.check_peers(cfg.connections.iter().map(|c| &**c))?;
        Ok(gw)
    }

    /// Refuses to run if the daemon's own packets to a peer would enter the
    /// TUN device (someone routed the peer into it, in the main table or by
    /// a rule of their own): the peer would be unreachable. A peer the host
    /// has no route to yet is only logged.
    pub(super) fn check_peers<'a>(&mut self, conns: impl IntoIterator<Item = &'a Connection>) -> Result<()> {
        for conn in conns {
            for peer in &conn.remote_addrs {
                let src = Some(self.bind.ip()).filter(|a| !a.is_unspecified());
                match self.routing.check_peer(*peer, src).with_context(|| format!("connection {}", conn.name))? {
                    PeerPath::Via(dev) => info!(connection = %conn.name, %peer, %dev, "peer reached outside the tunnel"),
                    PeerPath::Unreachable => {
                        warn!(connection = %conn.name, %peer, "no route to the peer yet (the host has none); IKE and ESP to it fail until there is one")
                    }
                }
            }
        }
        Ok(())
    }

    /// Installs the statically keyed children of `conn` (the table holds
    /// them), each outbound SA sending within its claim.
    pub(super) fn install_static(&mut self, now: Instant, conn: &Connection, claims: &Claims) -> Result<()> {
        for child in &conn.children {
            let Some(st) = &child.static_sas else { continue };
            let id = self.table.child_id(&conn.name, &child.name).context("a configured child is in the table")?;
            self.table
                .install_static(now, id, st, |i| claims.get(&(conn.name.clone(), child.name.clone(), i)))
                .and_then(|()| self.apply())
                .with_context(|| format!("installing {}/{}", conn.name, child.name))?;
            info!(
                connection = %conn.name, child = %child.name, suite = st.suite.name(),
                pairs = st.pairs.len(), workers = self.nworkers, "static child installed"
            );
        }
        Ok(())
    }

    /// Whether the static SAs `outs` could claim their sequence numbers
    /// once those sending under the keys `released` have stopped (see
    /// `seqstate`), opening the state file in `state_dir` if no static SA
    /// has run so far. Changes nothing the daemon runs on.
    pub(super) fn check_static(&mut self, state_dir: &Path, outs: &[StaticOut], released: &[[u8; 16]]) -> Result<()> {
        if outs.is_empty() {
            return Ok(());
        }
        if self.reservations.is_none() {
            self.reservations = Some(Reservations::open(FsStore::open(state_dir)?)?);
        }
        let Some(r) = &self.reservations else { return Ok(()) };
        for sa in outs {
            r.check_claim(sa, released)?;
        }
        Ok(())
    }

    /// Stops extending the reservations of the SAs sending under the keys
    /// `released`, then claims sequence numbers for `outs` and makes them
    /// durable. Call [`check_static`](Self::check_static) first. A write
    /// that fails is returned beside the claims: their SAs send once a
    /// later write succeeds (retried every turn, as at run time).
    pub(super) fn reserve_static(
        &mut self,
        outs: Vec<(PairAt, StaticOut)>,
        released: &[[u8; 16]],
    ) -> (Claims, Option<anyhow::Error>) {
        let mut claims = Claims::new();
        let Some(r) = &mut self.reservations else {
            return (claims, None);
        };
        for key in released {
            r.release(key);
        }
        if outs.is_empty() {
            return (claims, None);
        }
        let mut failed = None;
        for (at, sa) in outs {
            match r.claim(&sa) {
                Ok(c) => {
                    claims.insert(at, c);
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Err(e) = r.commit() {
            failed.get_or_insert(anyhow!("{}: cannot write: {e}", r.store().path().display()));
        }
        (claims, failed)
    }

    /// Sends the workers the commands the table's last transitions queued,
    /// in order, and sets the routes they ask for. A route that cannot be
    /// set does not stop the rest (the next install sets it again); the
    /// first failure is returned.
    ///
    /// Effects after a barrier wait until every worker has confirmed it
    /// ([`super::barrier`]); [`Gateway::barrier_reached`] sends them.
    pub(super) fn apply(&mut self) -> Result<()> {
        let now = Instant::now();
        let mut failed = None;
        for e in self.table.take_effects() {
            let a = self.barriers.admit(now, e);
            self.carry_out(a, &mut failed)?;
        }
        match failed {
            Some(e) => Err(anyhow::Error::new(e).context("routes not updated")),
            None => Ok(()),
        }
    }

    /// Does what [`Barriers`] says: applies an effect, or asks every
    /// worker to confirm a barrier.
    fn carry_out(&mut self, a: Admit, failed: &mut Option<RoutingError>) -> Result<()> {
        let e = match a {
            Admit::Now(e) => e,
            Admit::Issue(id) => {
                for k in 0..self.nworkers {
                    self.workers
                        .send(k, EspCommand::Esp(Command::Barrier(id)))
                        .map_err(|_| anyhow!("worker {k} has stopped"))?;
                }
                return Ok(());
            }
            Admit::Held => return Ok(()),
        };
        match e {
            Effect::Worker(k, cmd) => self
                .workers
                .send(usize::from(k), EspCommand::Esp(cmd))
                .map_err(|_| anyhow!("worker {k} has stopped"))?,
            Effect::Routes { local, remote } => {
                let prefixes = |ts: &[esparto_esp::Selector]| -> Vec<Prefix> {
                    ts.iter()
                        .flat_map(|t| esparto_io::route::range_to_prefixes(t.addrs.start(), t.addrs.end()))
                        .collect()
                };
                if let Err(e) = self.routing.add(prefixes(&local), prefixes(&remote)) {
                    failed.get_or_insert(e);
                }
            }
            Effect::Unroute(prefixes) => {
                if let Err(e) = self.routing.remove(prefixes) {
                    failed.get_or_insert(e);
                }
            }
            // `Barriers::admit` turns every barrier into an `Issue`.
            Effect::Barrier => {}
        }
        Ok(())
    }

    /// A worker answered barrier `id`. When it was the last to, the effects
    /// held behind the barrier go out, and the barrier's number is
    /// returned: IKE messages that waited for it may leave.
    pub(super) fn barrier_reached(&mut self, id: u64) -> Result<Option<u64>> {
        let Some(done) = self.barriers.confirmed(id) else {
            return Ok(None);
        };
        self.release_held()?;
        Ok(Some(done))
    }

    /// Gives up a barrier not answered in time ([`super::barrier::BARRIER_TIMEOUT`]):
    /// the held effects go out, and the barrier's number is returned (the
    /// IKE messages that waited for it are dropped by the caller).
    pub(super) fn expire_barrier(&mut self, now: Instant) -> Result<Option<u64>> {
        let Some((id, waited)) = self.barriers.expire(now) else {
            return Ok(None);
        };
        warn!(waited_ms = waited.as_millis() as u64, "the workers did not confirm Child SA installs in time; the IKE messages that waited for them are dropped (peers retransmit)");
        self.release_held()?;
        Ok(Some(id))
    }

    fn release_held(&mut self) -> Result<()> {
        let mut failed = None;
        for a in self.barriers.release(Instant::now()) {
            self.carry_out(a, &mut failed)?;
        }
        if let Some(e) = failed {
            warn!(error = %e, "routes not updated");
        }
        Ok(())
    }

    /// The barrier an IKE message sent now must wait for, if one is
    /// pending.
    pub(super) fn holding(&self) -> Option<u64> {
        self.barriers.holding()
    }

    /// When the pending barrier times out.
    pub(super) fn barrier_deadline(&self) -> Option<Instant> {
        self.barriers.deadline()
    }

    /// The wake-up the workers raise when they send events, for the
    /// control thread's `poll`; [`Gateway::poll_events`] lowers it.
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.waker.as_raw_fd()
    }

    /// From now on, route changes are made on a thread of their own
    /// ([`super::router`]): called once the daemon is up and its
    /// capabilities are dropped (the thread inherits the control thread's).
    pub fn spawn_router(&mut self) -> Result<()> {
        self.routing.spawn()
    }

    /// The TUN device's name.
    pub fn tun(&self) -> &str {
        &self.tun
    }

    /// The UDP port ESP (in UDP) is received on.
    pub(super) fn esp_port(&self) -> u16 {
        self.bind.port()
    }

    /// The local address the sockets are bound to (may be the wildcard).
    pub fn local_ip(&self) -> IpAddr {
        self.bind.ip()
    }

    /// Whether the sockets serve both families ([`dual_stack`]).
    pub fn is_dual_stack(&self) -> bool {
        self.dual_stack
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.nworkers
    }

    /// The UDP control socket (IKE datagrams on the NAT-T port arrive here).
    pub fn udp_control(&self) -> &UdpSocket {
        &self.udp_control
    }

    /// The same, for batched I/O (`recvmmsg`/`sendmmsg` keep scratch space).
    pub fn udp_control_mut(&mut self) -> &mut UdpSocket {
        &mut self.udp_control
    }

    /// A worker that has stopped on its own (panicked, or lost its TUN
    /// queue): the daemon cannot go on without it.
    pub fn worker_failure(&self) -> Option<WorkerFailure> {
        self.workers.failure()
    }

    /// Extends, durably, the sequence-number reservations static SAs asked
    /// more of, then lets them go on. Call every loop: a sender asks half
    /// a reservation before it runs out. A failed write is logged (at
    /// most every 10 s) and retried on the next call.
    pub fn keep_reservations(&mut self) {
        let Some(r) = &mut self.reservations else { return };
        if let Err(e) = r.poll() {
            let now = Instant::now();
            if self.reservation_warned.is_none_or(|t| now.duration_since(t) >= RESERVATION_WARN_EVERY) {
                self.reservation_warned = Some(now);
                warn!(
                    file = %r.store().path().display(), error = %e,
                    "cannot write the sequence numbers reserved for static SAs; they stop sending when their reservation runs out"
                );
            }
        }
    }

    /// Drains worker events; returns them for the IKE layer.
    pub fn poll_events(&mut self) -> Vec<WorkerEvent> {
        self.waker.drain();
        let mut out = Vec::new();
        while let Ok(ev) = self.events.try_recv() {
            out.push(ev);
        }
        out
    }

    /// Drains non-ESP datagrams the workers caught (IKE coalesced behind ESP).
    pub fn poll_control_datagrams(&mut self) -> Vec<ControlDatagram> {
        let mut out = Vec::new();
        while let Some(d) = self.control_dgrams.try_recv() {
            out.push(d);
        }
        out
    }

    /// Gathers every worker's snapshot, labels it from the table, and
    /// lists the IKE SAs with their Child SAs' traffic.
    pub fn status(&self) -> Result<Status> {
        self.gather(true).map(Gathered::into_status)
    }

    /// Every worker's snapshot and whose each SA in it is, formatting
    /// nothing (that is [`Gathered::into_status`], which may run on another
    /// thread); with `ike_sas`, also the IKE SAs with their Child SAs'
    /// traffic. Every worker is asked before any answer is awaited, so
    /// they take their snapshots at once and the wait is the slowest
    /// worker's, not the sum.
    pub fn gather(&self, ike_sas: bool) -> Result<Gathered> {
        let mut replies = Vec::with_capacity(self.nworkers);
        for k in 0..self.nworkers {
            let (tx, rx) = mpsc::sync_channel(1);
            self.workers
                .send(k, EspCommand::Snapshot(tx))
                .map_err(|_| anyhow!("worker {k} has stopped"))?;
            replies.push(rx);
        }
        let deadline = Instant::now() + SNAPSHOT_TIMEOUT;
        let mut snaps: Vec<Snapshot> = Vec::with_capacity(self.nworkers);
        for (k, rx) in replies.into_iter().enumerate() {
            let s = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .map_err(|_| anyhow!("worker {k} did not answer within {SNAPSHOT_TIMEOUT:?}"))?;
            snaps.push(s);
        }
        let at = Instant::now();
        let owners = snaps
            .iter()
            .map(|s| {
                s.esp
                    .sas
                    .iter()
                    .map(|sa| {
                        self.table.owner(sa.spi, sa.direction, sa.group).map(|(connection, child, role, refused)| Owner {
                            connection,
                            child,
                            role: role.name(),
                            ipcomp_refused: refused,
                        })
                    })
                    .collect()
            })
            .collect();
        let ike_sas = if ike_sas {
            let mut counters = Counters::default();
            for sa in snaps.iter().flat_map(|s| &s.esp.sas) {
                counters.add(sa);
            }
            self.table.ike_sas_status(at, &counters, self.bind.port())
        } else {
            Vec::new()
        };
        Ok(Gathered {
            devices: self.device.read().into_iter().collect(),
            snaps,
            owners,
            uptime_s: self.started.elapsed().as_secs_f64(),
            tun: self.tun.clone(),
            steering: self.steering.to_string(),
            ike_sas,
            at,
        })
    }

    /// Removes the rules and routes it added, then stops the workers
    /// (closing the TUN queues and sockets; the TUN device disappears with
    /// the last queue).
    pub fn shutdown(mut self) -> Vec<IoStats> {
        let t0 = Instant::now();
        for e in self.routing.stop() {
            warn!("{e}");
        }
        let t1 = Instant::now();
        let reports = self.workers.shutdown();
        // Closing the TUN queues and removing the device wait for the
        // kernel (RCU grace periods), which a busy machine makes slow.
        info!(
            routing_ms = t1.duration_since(t0).as_millis() as u64,
            workers_ms = t1.elapsed().as_millis() as u64,
            "routing removed, workers stopped"
        );
        for r in &reports {
            if r.io_errors > 0 || r.udp_tx_dropped > 0 {
                warn!(worker = r.index, io_errors = r.io_errors, udp_tx_dropped = r.udp_tx_dropped, "worker I/O trouble");
            }
        }
        reports
    }
}

/// The kernel's drops at the TUN devices, under their reasons (non-zero
/// only).
fn device_drops(devices: &[DeviceStatus]) -> impl Iterator<Item = (String, u64)> + '_ {
    let full: u64 = devices.iter().map(|d| d.queue_full).sum();
    let input: u64 = devices.iter().map(|d| d.input_dropped).sum();
    [("tun_queue_full", full), ("tun_input_dropped", input)]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (r.to_string(), n))
}

fn drops_map(d: &esparto_esp::Drops) -> BTreeMap<String, u64> {
    d.nonzero().map(|(r, n)| (r.name().to_string(), n)).collect()
}

/// Whose an SA is, for [`Gathered`].
#[derive(Debug, Clone)]
struct Owner {
    connection: Arc<str>,
    child: Arc<str>,
    role: &'static str,
    /// `ipcomp` configured, but the peer refused it.
    ipcomp_refused: Option<esparto_esp::IpcompMode>,
}

/// The figures of [`Gateway::gather`], not formatted yet.
#[derive(Debug)]
pub struct Gathered {
    snaps: Vec<Snapshot>,
    /// The kernel's counters of the TUN device.
    devices: Vec<DeviceStatus>,
    /// For each snapshot, for each of its SAs in order: whose it is.
    owners: Vec<Vec<Option<Owner>>>,
    uptime_s: f64,
    tun: String,
    steering: String,
    ike_sas: Vec<IkeSaStatus>,
    /// When the snapshots were in.
    at: Instant,
}

impl Gathered {
    /// The status, every figure formatted (no IKE engine counters: the
    /// IKE driver adds them).
    pub fn into_status(self) -> Status {
        self.split(true).0
    }

    /// The status without its list of SAs, and that list unformatted: for
    /// the metrics, which sum it per SA and format only the sums.
    pub fn into_summary(self) -> (Status, Vec<SaRow>) {
        self.split(false)
    }

    /// The status, with the SAs in it (`format_sas`) or beside it.
    fn split(self, format_sas: bool) -> (Status, Vec<SaRow>) {
        let Gathered { snaps, devices, owners, uptime_s, tun, steering, ike_sas, at } = self;
        let mut total = esparto_esp::Drops::default();
        let mut workers = Vec::with_capacity(snaps.len());
        let n = snaps.iter().map(|s| s.esp.sas.len()).sum();
        let (mut sas, mut rows) = if format_sas { (Vec::with_capacity(n), Vec::new()) } else { (Vec::new(), Vec::with_capacity(n)) };
        let nobody: Arc<str> = Arc::from("");
        let mut io_total: BTreeMap<String, u64> = BTreeMap::new();
        for (Snapshot { esp: s, io, keepalives }, owners) in snaps.into_iter().zip(owners) {
            total.add(&s.drops);
            let mut drops = drops_map(&s.drops);
            for (reason, n) in io.drops().into_iter().filter(|(_, n)| *n > 0) {
                drops.insert(reason.to_string(), n);
                *io_total.entry(reason.to_string()).or_default() += n;
            }
            workers.push(WorkerStatus {
                worker: s.worker,
                cpu: io.cpu,
                tx_packets: s.tx_packets,
                rx_packets: s.rx_packets,
                tx_bytes: s.tx_bytes,
                rx_bytes: s.rx_bytes,
                drops,
                io: IoStatus::from_stats(&io),
                keepalives,
                events_dropped: s.events_dropped,
                loop_gaps: LoopGapsStatus::from_gaps(&io.loop_gaps),
                cpu_wait_ms: io.cpu_wait.map(|d| d.as_secs_f64() * 1000.0),
            });
            for (sa, owner) in s.sas.into_iter().zip(owners) {
                if !format_sas {
                    let (connection, child) = owner.map_or_else(|| (nobody.clone(), nobody.clone()), |o| (o.connection, o.child));
                    rows.push(SaRow {
                        connection,
                        child,
                        direction: sa.direction,
                        spi: sa.spi,
                        packets: sa.counters.packets,
                        bytes: sa.counters.bytes,
                        drops: sa.counters.drops,
                    });
                    continue;
                }
                sas.push(SaStatus {
                    connection: owner.as_ref().map_or_else(String::new, |o| o.connection.to_string()),
                    child: owner.as_ref().map_or_else(String::new, |o| o.child.to_string()),
                    spi: format!("{:08x}", sa.spi),
                    direction: match sa.direction {
                        Direction::Inbound => "in".into(),
                        Direction::Outbound => "out".into(),
                    },
                    role: owner.as_ref().map_or("single", |o| o.role).into(),
                    worker: s.worker,
                    suite: sa.suite.into(),
                    peer: sa.peer.to_string(),
                    packets: sa.counters.packets,
                    bytes: sa.counters.bytes,
                    last_seq: sa.last_seq,
                    age_s: at.saturating_duration_since(sa.installed).as_secs_f64(),
                    drops: drops_map(&sa.counters.drops),
                    ipcomp: sa.ipcomp.as_ref().map(crate::status::IpcompStatus::from_stats).or_else(|| {
                        owner.as_ref().and_then(|o| o.ipcomp_refused).map(crate::status::IpcompStatus::refused)
                    }),
                });
            }
        }
        let status = Status {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            uptime_s,
            tun,
            steering,
            workers,
            sas,
            drops: drops_map(&total).into_iter().chain(io_total).chain(device_drops(&devices)).collect(),
            devices,
            ike_sas,
            ike: BTreeMap::new(),
            ike_events: Default::default(),
        };
        (status, rows)
    }
}
