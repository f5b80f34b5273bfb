//! The IKE driver: runs the sans-IO [`Endpoint`] on real sockets and turns
//! its events into transitions of the Child SA table ([`super::table`];
//! the events themselves are handled in `ike_events.rs`).
//!
//! IKE arrives on UDP 500 (a socket of its own, with large buffers, since
//! it is also where a flood of IKE_SA_INIT lands) and, once NAT-T floats,
//! on UDP 4500 behind the non-ESP marker: there it shares the port with
//! ESP, and the SPI-steering program hands it to the reuseport group's
//! control socket (or, coalesced behind ESP by GRO, a worker forwards it).
//! Outbound IKE leaves through the socket of the port the engine chose.
//!
//! The daemon and the engine split the lifecycle the way Linux splits it
//! between XFRM and the IKE daemon: the engine rekeys by *time* (with
//! jitter) and deletes at the hard time; the data plane counts *bytes and
//! packets* and raises soft-expire events, on which the driver asks the
//! engine to rekey. A rekeyed pair takes its predecessor's slot (fallback
//! or a worker's sub-SA); its inbound half is installed at once, its
//! outbound half when the engine says the peer has switched; the old
//! inbound SA lingers a moment after its delete to catch packets in flight
//! (the table's `LINGER`). That is what makes rekeying lossless.
//!
//! Inbound ESP SPIs are chosen by a [`SteeringSpiAllocator`] with the data
//! plane's steering function ([`crate::datapath::spi_for_worker`]): random in
//! every bit the steering rule does not fix, so each SA is processed by a
//! chosen worker (round-robin, spreading tunnels over cores) yet stays
//! unpredictable.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use esparto_crypto::SystemRng;
use esparto_ike::{Endpoint, EndpointConfig, IkeSaId, StartAction, SteeringSpiAllocator, UnixTime};
use esparto_io::udp::UdpConfig;
use tracing::{debug, info, warn};

use super::Gateway;
use super::log_limit::TRAFFIC;
use super::table::ChildId;
use crate::config::{Config, Connection};
use crate::status::{IkeEvents, IkeSaStatus};

/// Longest the shutdown loop sleeps between looks at worker-caught IKE.
const SHUTDOWN_POLL: Duration = Duration::from_millis(20);
/// Largest IKE datagram we read.
const MAX_IKE_DATAGRAM: usize = 65_535;
/// IKE datagrams read per `recvmmsg` and sent per `sendmmsg`: under a flood
/// of IKE_SA_INIT (each answered with a COOKIE, RFC 7296 §2.6) the system
/// calls, not the IKE work, are most of the cost.
const IKE_BATCH: usize = 16;

/// The IKE side of the daemon.
pub struct Ike {
    pub(super) ep: Endpoint,
    sock500: esparto_io::UdpSocket,
    pub(super) natt_port: u16,
    pub(super) ike_port: u16,
    rx: esparto_io::RxBatch,
    /// Datagrams to send from the IKE port and from the NAT-T port.
    tx500: esparto_io::TxBatch,
    tx4500: esparto_io::TxBatch,
    /// Datagrams held until the workers confirm the barrier they wait for
    /// (`super::barrier`), oldest first.
    held: VecDeque<HeldDatagram>,
    /// Set-ups, rekeys and failures so far.
    pub(super) counts: EventCounts,
    /// The sockets are on a wildcard address: each datagram names its
    /// local address (received) and its source (sent).
    wildcard: bool,
    /// Peers' host names, looked up off this thread.
    resolver: super::resolver::Resolver,
    /// When every host name was last asked for (`None`: not yet).
    refreshed: Option<Instant>,
}

/// An IKE datagram waiting for a barrier.
#[derive(Debug)]
struct HeldDatagram {
    barrier: u64,
    local: SocketAddr,
    remote: SocketAddr,
    data: Vec<u8>,
}

/// Set-ups, rekeys and failures of IKE and Child SAs, counted as the
/// engine reports them (`ike_events.rs`); `status` and the metrics read
/// them ([`Ike::events`]). Reasons are a fixed set of names, so the maps
/// stay small whatever peers send.
#[derive(Debug, Default)]
pub(super) struct EventCounts {
    pub(super) ike_sa_setups: u64,
    pub(super) ike_sa_rekeys: u64,
    pub(super) ike_sa_rekeys_initiated: u64,
    pub(super) ike_sa_failures: BTreeMap<&'static str, u64>,
    pub(super) ike_sa_deletes: BTreeMap<&'static str, u64>,
    pub(super) auth_failures: BTreeMap<&'static str, u64>,
    pub(super) child_sa_setups: u64,
    pub(super) child_sa_rekeys: u64,
    pub(super) child_sa_failures: BTreeMap<&'static str, u64>,
}

/// The engine's message counts by strongSwan's names (`ike-auth-in-req`,
/// `info-out-resp`, …), every one, zero or not.
fn messages(m: &esparto_ike::Messages) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (i, exchange) in ["ike-init", "ike-auth", "create-child", "info"].into_iter().enumerate() {
        for (dir, table) in [("in", &m.received), ("out", &m.sent)] {
            for (kind, n) in [("req", table[i][0]), ("resp", table[i][1])] {
                out.insert(format!("{exchange}-{dir}-{kind}"), n);
            }
        }
    }
    out
}

/// Counts one more under `reason`.
pub(super) fn bump(map: &mut BTreeMap<&'static str, u64>, reason: &'static str) {
    *map.entry(reason).or_default() += 1;
}

impl std::fmt::Debug for Ike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ike").field("ike_sas", &self.ep.ike_sa_count()).finish()
    }
}

impl Ike {
    /// Sets up the endpoint and the port-500 socket if the configuration has
    /// IKE connections, or a VICI socket (over which a client may load
    /// some); installs trap policies; initiates `start` children.
    pub fn start(cfg: &mut Config, gw: &mut Gateway, now: Instant) -> Result<Option<Self>> {
        let vici = cfg.daemon.vici != crate::config::ViciSocket::Off;
        if !vici && cfg.connections.iter().all(|c| c.ike.is_none()) {
            return Ok(None);
        }
        let limits = cfg.daemon.ike;
        let ep_cfg = EndpointConfig {
            ike_port: cfg.daemon.ike_port,
            natt_port: cfg.daemon.port,
            resources: u16::try_from(gw.workers()).unwrap_or(u16::MAX),
            window_size: limits.window_size,
            cookie_threshold: limits.cookie_threshold,
            cookie_threshold_per_source: limits.cookie_threshold_per_source,
            half_open_per_source: limits.half_open_per_source,
            cookie_threshold_per_peer: limits.cookie_threshold_per_peer,
            half_open_per_peer: limits.half_open_per_peer,
            max_half_open: limits.max_half_open,
            initiating_per_peer: limits.initiating_per_peer,
            fragment_size: limits.fragment_size,
            ..EndpointConfig::default()
        };
        let mut ep = Endpoint::new(ep_cfg, Box::new(SystemRng), Box::new(SteeringSpiAllocator::new(gw.workers(), crate::datapath::spi_for_worker, crate::datapath::spi_to_worker)));
        // ESP from the peer counts as liveness (dpd_delay asks for a check
        // only after that long without it, too).
        ep.set_inbound_activity(Box::new(gw.table.last_packets()));
        // A connection without local_addrs (`%any`) initiates from the
        // address the routing table picks towards the peer, asked with the
        // daemon's own mark (as its IKE goes: past the tunnel's rules).
        let mark = cfg.daemon.routing.mark;
        let mut nl = esparto_io::netlink::Rtnetlink::open().context("opening rtnetlink for source address lookups")?;
        ep.set_source_chooser(Box::new(move |peer| match nl.source_towards(peer, mark) {
            Ok(src) => src,
            Err(e) => {
                warn!(%peer, error = %e, "no source address towards the peer: route lookup failed");
                None
            }
        }));
        *ep.secrets_mut() = std::mem::take(&mut cfg.secrets);
        let bind = SocketAddr::new(gw.local_ip(), cfg.daemon.ike_port);
        // Marked like the NAT-T sockets: IKE to a peer skips the tunnel.
        let udp = UdpConfig {
            mark: Some(cfg.daemon.routing.mark),
            freebind: super::local_addrs::freebind(bind.ip(), "IKE"),
            dual_stack: gw.is_dual_stack(),
            pktinfo: bind.ip().is_unspecified(),
            ..UdpConfig::default()
        };
        let sock500 = esparto_io::UdpSocket::bind(bind, &udp, false)
            .with_context(|| format!("binding IKE socket {bind} (is another IKE daemon running?)"))?;
        let mut ike = Self {
            ep,
            sock500,
            natt_port: cfg.daemon.port,
            ike_port: cfg.daemon.ike_port,
            rx: esparto_io::RxBatch::new(IKE_BATCH, 0, MAX_IKE_DATAGRAM, IKE_BATCH * esparto_io::udp::MAX_GRO_SEGMENTS),
            tx500: esparto_io::TxBatch::new(IKE_BATCH, 0, MAX_IKE_DATAGRAM),
            tx4500: esparto_io::TxBatch::new(IKE_BATCH, 0, MAX_IKE_DATAGRAM),
            held: VecDeque::new(),
            counts: EventCounts::default(),
            wildcard: bind.ip().is_unspecified(),
            resolver: super::resolver::Resolver::new().context("the resolver's wake-up socket")?,
            refreshed: None,
        };
        for conn in &cfg.connections {
            let Some(ike_conn) = &conn.ike else { continue };
            ike.ep.add_connection(ike_conn.clone()).with_context(|| format!("connection {}", conn.name))?;
        }
        for conn in &cfg.connections {
            ike.activate(now, gw, conn)?;
        }
        ike.flush(now, gw);
        Ok(Some(ike))
    }

    /// What a connection the engine holds needs to run: its traps armed,
    /// its `start` children initiated (the first in IKE_AUTH, the others
    /// marked in the table to follow once the IKE SA is up). Call
    /// [`check_activation`] first: what it refuses fails here.
    pub(super) fn activate(&mut self, now: Instant, gw: &mut Gateway, conn: &Connection) -> Result<()> {
        let Some(ike_conn) = &conn.ike else { return Ok(()) };
        check_activation(conn).map_err(anyhow::Error::msg)?;
        let conn_id = gw.table.conn_id(&conn.name).context("a configured connection is in the table")?;
        let mut starts = Vec::new();
        for child in &conn.children {
            let id = gw.table.child_id(&conn.name, &child.name).context("a configured child is in the table")?;
            match ike_conn.child(&child.name).map(|c| c.start_action).unwrap_or_default() {
                StartAction::Trap => self.arm_trap(gw, id)?,
                StartAction::Start => starts.push(id),
                StartAction::None => {}
            }
        }
        if let Some((first, rest)) = starts.split_first() {
            let first = gw.table.child(*first).map(|c| c.name.clone()).context("a configured child")?;
            let ike_sa = self.ep.initiate(now, &conn.name, Some(&first)).with_context(|| format!("initiating {}", conn.name))?;
            gw.table.ike_sa_initiated(ike_sa, conn_id);
            for child in rest {
                gw.table.defer_start(*child);
            }
        }
        Ok(())
    }

    /// Installs the trap policy of a child of a negotiated connection
    /// (VICI `install`), as `start_action = "trap"` would.
    pub(super) fn install_trap(&mut self, gw: &mut Gateway, config: &Config, name: &str, child: &str) -> Result<String, String> {
        let conn = config.connections.iter().find(|c| c.name == name).ok_or_else(|| format!("{name}: no such connection"))?;
        let ike_conn = conn.ike.as_ref().ok_or_else(|| format!("{name}: statically keyed; nothing to negotiate"))?;
        if ike_conn.child(child).is_none() {
            return Err(format!("{name}/{child}: no such child"));
        }
        if conn.remote_addrs.is_empty() && conn.remote_hosts.is_empty() {
            return Err(format!("{name}/{child}: a trap needs remote_addrs"));
        }
        let id = gw.table.child_id(name, child).ok_or_else(|| format!("{name}/{child}: no such child"))?;
        if gw.table.child(id).is_some_and(|c| c.trap) {
            return Err(format!("{name}/{child}: a trap policy is installed already"));
        }
        self.arm_trap(gw, id).map_err(|e| format!("{name}/{child}: {e:#}"))?;
        Ok(format!("{name}/{child}: trap policy installed"))
    }

    /// Arms (or re-arms) the trap policy of a child.
    pub(super) fn arm_trap(&mut self, gw: &mut Gateway, child: ChildId) -> Result<()> {
        gw.table.arm_trap(child);
        let r = gw.apply();
        if let Some((conn, child)) = gw.table.names(child) {
            info!(connection = %conn, child = %child, "trap policy installed");
        }
        r
    }

    /// File descriptors to wait on (port 500; port 4500 is the gateway's).
    pub fn fds(&self) -> [RawFd; 2] {
        [self.sock500.as_raw_fd(), self.resolver.fd()]
    }

    /// When [`tick`](Self::tick) must run next.
    pub fn next_timeout(&mut self, gw: &Gateway) -> Option<Instant> {
        [self.ep.poll_timeout(), gw.table.next_linger(), gw.table.next_confirm(), gw.barrier_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Reads every pending datagram from both IKE sockets.
    pub fn on_readable(&mut self, now: Instant, gw: &mut Gateway) {
        let local500 = self.sock500.local_addr();
        while let Ok(n) = self.sock500.recv_batch(&mut self.rx) {
            if n == 0 {
                break;
            }
            self.handle_batch(now, local500);
            // Answer as we go: a flood must not queue up every reply first.
            self.flush(now, gw);
        }
        let local4500 = gw.udp_control().local_addr();
        while let Ok(n) = gw.udp_control_mut().recv_batch(&mut self.rx) {
            if n == 0 {
                break;
            }
            self.handle_batch(now, local4500);
            self.flush(now, gw);
        }
        self.flush(now, gw);
    }

    /// The datagrams of `self.rx`, read from a socket bound to `bound`:
    /// each to the engine with the address it was sent to (which a
    /// wildcard socket reads per datagram).
    fn handle_batch(&mut self, now: Instant, bound: SocketAddr) {
        // The engine reads no clock: the calendar time a peer's
        // certificates are checked against comes from here, once a batch.
        let wall_clock = UnixTime::now();
        for i in 0..self.rx.len() {
            // recvmmsg gives every datagram its source.
            let (Some(data), Some(from)) = (self.rx.packet(i), self.rx.peer(i)) else { continue };
            let local = SocketAddr::new(self.rx.local(i).unwrap_or(bound.ip()), bound.port());
            self.ep.handle_datagram(now, wall_clock, local, from, data);
        }
    }

    /// IKE datagrams a worker caught on the data sockets.
    pub fn on_stray(&mut self, now: Instant, gw: &mut Gateway, from: SocketAddr, data: &[u8]) {
        let local4500 = gw.udp_control().local_addr();
        self.ep.handle_datagram(now, UnixTime::now(), local4500, from, data);
        self.flush(now, gw);
    }

    /// Timers: retransmissions, liveness, rekeys, lingering inbound SAs.
    pub fn tick(&mut self, now: Instant, gw: &mut Gateway) {
        self.resolve(now);
        self.ep.handle_timeout(now);
        if gw.table.expire_lingering(now) > 0 {
            if let Err(e) = gw.apply() {
                warn!(error = %format!("{e:#}"), "removing lingering inbound SAs");
            }
        }
        match gw.table.expire_confirming(now) {
            Ok(0) => {}
            Ok(n) => {
                debug!(sas = n, "no first packet from the peer in time: sending on the new sub-SAs anyway");
                if let Err(e) = gw.apply() {
                    warn!(error = %format!("{e:#}"), "installing outbound SAs");
                }
            }
            Err(e) => warn!(error = %format!("{e:#}"), "installing outbound SAs"),
        }
        match gw.expire_barrier(now) {
            Ok(Some(id)) => self.release_held(gw, id, false),
            Ok(None) => {}
            Err(e) => warn!(error = %format!("{e:#}"), "releasing held effects"),
        }
        self.flush(now, gw);
    }

    /// Hands the resolver's answers to the engine, and asks for every
    /// host name the connections hold at start and every
    /// [`super::resolver::REFRESH`] after.
    fn resolve(&mut self, now: Instant) {
        for (name, answer) in self.resolver.answers() {
            self.ep.host_resolved(now, &name, answer);
        }
        if self.refreshed.is_none_or(|t| now.saturating_duration_since(t) >= super::resolver::REFRESH) {
            self.refreshed = Some(now);
            for name in self.ep.remote_hosts() {
                self.resolver.ask(&name);
            }
        }
    }

    /// Asks the resolver for `name` (the engine's `ResolveHost`).
    pub(super) fn ask_resolver(&mut self, name: &Arc<str>) {
        self.resolver.ask(name);
    }

    /// Leaves cleanly (SIGTERM, SIGINT): a Delete for every IKE SA (its
    /// Child SAs go with it, RFC 7296 §1.4.1), then IKE datagrams and
    /// timers are served until every Delete is answered or `grace` is
    /// over, so that peers drop our SAs at once instead of after their DPD
    /// gives up. No new IKE SA is accepted meanwhile.
    pub fn shutdown(&mut self, gw: &mut Gateway, grace: Duration) {
        let start = Instant::now();
        let deadline = start + grace;
        let n = self.ep.ike_sa_count();
        self.ep.shutdown(start);
        self.flush(start, gw);
        while self.ep.ike_sa_count() > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut poller = esparto_io::poll::Poller::new();
            let first = poller.add(self.sock500.as_raw_fd());
            poller.add(gw.udp_control().as_raw_fd());
            let wait = self.next_timeout(gw).map_or(deadline, |t| t.min(deadline)).saturating_duration_since(now);
            // Worker-caught IKE (coalesced behind ESP) arrives over a
            // channel, not a descriptor: look at it at least this often.
            if let Err(e) = poller.wait(wait.min(SHUTDOWN_POLL)) {
                warn!(error = %e, "waiting for the peers' answers");
                break;
            }
            let now = Instant::now();
            if poller.readable(first) || poller.readable(first + 1) {
                self.on_readable(now, gw);
            }
            for d in gw.poll_control_datagrams() {
                if let Some(from) = d.peer() {
                    self.on_stray(now, gw, from, d.bytes());
                }
            }
            self.tick(now, gw);
        }
        let left = self.ep.ike_sa_count();
        if left == 0 {
            info!(ike_sas = n, in_ms = start.elapsed().as_millis() as u64, "every IKE SA deleted");
        } else {
            warn!(ike_sas = n, unanswered = left, "peers did not answer every Delete in time; leaving anyway");
        }
    }

    /// `esparto up NAME`.
    pub fn up(&mut self, now: Instant, gw: &mut Gateway, name: &str, force: bool) -> Result<String, String> {
        if !force {
            if let Some(up) = self.already_up(now, gw, name)? {
                self.flush(now, gw);
                return Ok(up);
            }
        }
        let r = self.ep.initiate(now, name, None).map_err(|e| format!("{name}: {e}"));
        if let (Ok(ike_sa), Some(conn)) = (&r, gw.table.conn_id(name)) {
            gw.table.ike_sa_initiated(*ike_sa, conn);
        }
        self.flush(now, gw);
        r.map(|id| format!("initiating IKE SA {id} for {name}"))
    }

    /// `up` of a connection with an IKE SA: the children without a Child
    /// SA are negotiated within the established one (`Some`, what it
    /// does); none missing, or an IKE SA still being negotiated, is an
    /// error that says so. `None`: no IKE SA, go ahead.
    fn already_up(&mut self, now: Instant, gw: &Gateway, name: &str) -> Result<Option<String>, String> {
        let Some(conn) = gw.table.conn_id(name).and_then(|c| gw.table.conn(c)) else { return Ok(None) };
        // One going away (`esparto down` just now) does not count.
        let open = |id: IkeSaId| self.ep.ike_sa_info(id).is_some_and(|i| !i.closing);
        let established = conn.ike_sas.iter().copied().find(|id| gw.table.ike_sa(*id).is_some_and(|r| r.established) && open(*id));
        let Some(ike_sa) = established else {
            return match conn.initiating.iter().find(|id| open(**id)) {
                Some(id) => Err(format!(
                    "{name}: IKE SA {id} is being negotiated already; `esparto up --force {name}` starts another"
                )),
                None => Ok(None),
            };
        };
        let missing: Vec<Arc<str>> =
            conn.children.iter().filter_map(|c| gw.table.child(*c)).filter(|c| c.sas.is_empty()).map(|c| c.name.clone()).collect();
        if missing.is_empty() {
            return Err(format!("{name}: already up (IKE SA {ike_sa}); `esparto up --force {name}` starts another IKE SA"));
        }
        for child in &missing {
            self.ep.acquire(now, name, child, None).map_err(|e| format!("{name}/{child}: {e:?}"))?;
        }
        let names: Vec<&str> = missing.iter().map(|c| &**c).collect();
        Ok(Some(format!("{name}: IKE SA {ike_sa} is up; negotiating {} within it", names.join(", "))))
    }

    /// `esparto down NAME`.
    pub fn down(&mut self, now: Instant, gw: &mut Gateway, name: &str) -> Result<String, String> {
        // Down means down: a re-initiation waiting for its back-off is
        // called off too.
        let cancelled = self.ep.cancel_reinitiation(name);
        let ids = ike_sas_of(gw, name);
        if ids.is_empty() {
            if cancelled {
                return Ok(format!("{name}: no IKE SA; its pending re-initiation is cancelled"));
            }
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

    /// One Child SA of connection `name`, by our inbound SPI, deleted
    /// with the peer (its IKE SA stays).
    pub fn down_child(&mut self, now: Instant, gw: &mut Gateway, name: &str, in_spi: u32) -> Result<String, String> {
        let found = ike_sas_of(gw, name).into_iter().find(|id| self.ep.terminate_child(now, *id, in_spi).is_ok());
        match found {
            Some(_) => {
                self.flush(now, gw);
                Ok(format!("deleting Child SA {in_spi:08x} of {name}"))
            }
            None => Err(format!("{name}: no Child SA with inbound SPI {in_spi:08x}")),
        }
    }

    /// `esparto rekey NAME [--ike]`: every Child SA of the connection, or
    /// its IKE SA(s).
    pub fn rekey(&mut self, now: Instant, gw: &mut Gateway, name: &str, ike: bool) -> Result<String, String> {
        let ids = ike_sas_of(gw, name);
        if ids.is_empty() {
            return Err(format!("{name}: no IKE SA"));
        }
        let mut n = 0;
        let mut errors = Vec::new();
        for id in ids {
            if ike {
                match self.ep.rekey_ike(now, id) {
                    Ok(()) => n += 1,
                    Err(e) => errors.push(format!("{id}: {e:?}")),
                }
            } else {
                let spis: Vec<u32> = gw
                    .table
                    .ike_sa(id)
                    .map(|r| r.sas.iter().filter_map(|s| gw.table.sa(*s)).map(|sa| sa.in_spi).collect())
                    .unwrap_or_default();
                for spi in spis {
                    match self.ep.rekey_child(now, id, spi) {
                        Ok(()) => n += 1,
                        Err(e) => errors.push(format!("{spi:08x}: {e:?}")),
                    }
                }
            }
        }
        self.flush(now, gw);
        if n == 0 {
            return Err(format!("{name}: nothing to rekey ({})", errors.join(", ")));
        }
        Ok(format!("rekeying {n} {} of {name}", if ike { "IKE SA(s)" } else { "Child SA(s)" }))
    }


    /// Sends what the engine queued and acts on its events.
    pub(super) fn flush(&mut self, now: Instant, gw: &mut Gateway) {
        loop {
            let mut progress = false;
            // Events first: a responder's new inbound SA must be on its way
            // to the workers before the response that lets the peer send on
            // it leaves (make-before-break; the worker applies commands
            // before the ESP that follows them, see esparto_io::worker).
            while let Some(ev) = self.ep.poll_event() {
                progress = true;
                self.on_event(now, gw, ev);
            }
            while let Some(t) = self.ep.poll_transmit() {
                progress = true;
                // Behind a Child SA install the workers have not confirmed:
                // it leaves when they have (`super::barrier`).
                if let Some(barrier) = gw.holding() {
                    self.held.push_back(HeldDatagram { barrier, local: t.local, remote: t.remote, data: t.data });
                    continue;
                }
                self.queue_datagram(gw, t.local, t.remote, &t.data);
            }
            if !progress {
                break;
            }
        }
        self.send_queued(gw);
        super::ike_events::file_watch_lines(gw);
    }

    /// Queues a datagram from `local` on its port's send batch (sending
    /// the batch first if it is full). Sockets on a wildcard address send
    /// it from `local`'s address: an answer leaves from the address the
    /// peer asked at, and the IKE SA keeps the address it was set up on.
    fn queue_datagram(&mut self, gw: &mut Gateway, local: SocketAddr, remote: SocketAddr, data: &[u8]) {
        let natt = local.port() == self.natt_port;
        if self.tx(natt).is_full() {
            self.send_queued(gw);
        }
        let source = Some(local.ip()).filter(|a| self.wildcard && !a.is_unspecified());
        let tx = self.tx(natt);
        match tx.push(Some(remote), data) {
            Ok(()) => tx.set_last_source(source),
            // Longer than any UDP payload: the engine never builds one.
            Err(_) => warn!(%remote, len = data.len(), "IKE datagram too long to send"),
        }
    }

    /// The datagrams that waited for barriers up to `done`: sent, or
    /// (`send` false: the barrier timed out) dropped, for the peer to
    /// retransmit.
    pub(super) fn release_held(&mut self, gw: &mut Gateway, done: u64, send: bool) {
        let mut dropped = 0;
        while self.held.front().is_some_and(|d| d.barrier <= done) {
            let Some(d) = self.held.pop_front() else { break };
            if send {
                self.queue_datagram(gw, d.local, d.remote, &d.data);
            } else {
                dropped += 1;
            }
        }
        if dropped > 0 {
            warn!(dropped, "IKE messages dropped: they waited for SA installs the workers did not confirm");
        }
        self.send_queued(gw);
    }

    /// The send queue of the NAT-T port or of the IKE port.
    fn tx(&mut self, natt: bool) -> &mut esparto_io::TxBatch {
        if natt { &mut self.tx4500 } else { &mut self.tx500 }
    }

    /// Sends the queued datagrams of both ports, one `sendmmsg` each.
    fn send_queued(&mut self, gw: &mut Gateway) {
        for (batch, sock) in [(&mut self.tx500, &mut self.sock500), (&mut self.tx4500, gw.udp_control_mut())] {
            if batch.is_empty() {
                continue;
            }
            match sock.send_batch(batch) {
                // Under a flood these recur per batch: limited (`log_limit`).
                Ok(sent) if sent < batch.len() => {
                    warn!(target: TRAFFIC, dropped = batch.len() - sent, "IKE socket send buffer full; datagrams dropped (peers retransmit)");
                }
                Ok(_) => {}
                Err(e) => warn!(target: TRAFFIC, error = %e, "IKE send failed"),
            }
            batch.clear();
        }
    }

    /// The engine's counters, for `esparto status`.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let s = self.ep.stats();
        [
            ("datagrams", s.datagrams),
            ("malformed", s.malformed),
            ("unknown_spi", s.unknown_spi),
            ("init_refused", s.init_refused),
            ("integrity_failures", s.integrity_failures),
            ("out_of_window", s.out_of_window),
            ("cookies_sent", s.cookies_sent),
            ("cookies_verified", s.cookies_verified),
            ("cookies_rejected", s.cookies_rejected),
            ("half_open_dropped_per_source", s.half_open_dropped_per_source),
            ("half_open_dropped_global", s.half_open_dropped_global),
            ("invalid_ike_spi_sent", s.invalid_ike_spi_sent),
            ("invalid_ike_spi_received", s.invalid_ike_spi_received),
            ("invalid_ike_spi_ignored", s.invalid_ike_spi_ignored),
            ("invalid_spi_hints_sent", s.invalid_spi_hints_sent),
            ("invalid_spi_hints_received", s.invalid_spi_hints_received),
            ("rate_limited", s.rate_limited),
            ("reinitiations", s.reinitiations),
            ("closing_dropped", s.closing_dropped),
            ("cert_payloads_skipped", s.cert_payloads_skipped),
            ("liveness_checks", s.liveness_checks),
            ("recoveries", s.recoveries),
            ("initiations_paced", s.initiations_paced),
            ("unresolved_hosts", s.unresolved_hosts),
            ("mobike_updates", s.mobike_updates),
            ("additional_key_exchanges", s.additional_key_exchanges),
            ("intermediate_refused", s.intermediate_refused),
            ("mobike_checks_failed", s.mobike_checks_failed),
            ("fragments_sent", s.fragments_sent),
            ("fragments_received", s.fragments_received),
            ("fragments_dropped", s.fragments_dropped),
            ("messages_reassembled", s.messages_reassembled),
            ("fragment_bytes_held", s.fragment_bytes_held as u64),
            ("ike_sas", self.ep.ike_sa_count() as u64),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Adds what only the engine knows to the table's view of the IKE
    /// SAs: the IKE proposal, NAT detection, and the rekey and expiry
    /// timers (jittered, RFC 7296 §2.8) that replace the configured
    /// lifetimes the table filled in.
    pub fn annotate(&self, now: Instant, sas: &mut [IkeSaStatus]) {
        self.annotate_as(now, sas, false);
    }

    /// [`annotate`](Self::annotate); `exact`: with what the engine knows
    /// of each IKE SA itself, not of its successor if it was rekeyed.
    pub(super) fn annotate_as(&self, now: Instant, sas: &mut [IkeSaStatus], exact: bool) {
        let left = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(now).as_secs_f64());
        for s in sas {
            let info = u64::from_str_radix(&s.id, 16).ok().and_then(|id| match exact {
                true => self.ep.ike_sa_info_exact(IkeSaId(id)),
                false => self.ep.ike_sa_info(IkeSaId(id)),
            });
            let Some(info) = info else {
                continue;
            };
            s.proposal = info.proposal;
            s.rekey_in_s = left(info.rekey_at);
            s.initiator_spi = format!("{:016x}", info.spis.0);
            if info.spis.1 != 0 {
                s.responder_spi = format!("{:016x}", info.spis.1);
            }
            s.nat.local_behind_nat = info.nat.local_behind_nat;
            s.nat.remote_behind_nat = info.nat.remote_behind_nat;
            s.nat.encap_forced = info.encap_forced;
            s.remote_host = info.remote_host.map(|h| h.to_string()).unwrap_or_default();
            for c in &mut s.children {
                let spi = u32::from_str_radix(&c.in_spi, 16).ok();
                if let Some(ci) = info.children.iter().find(|ci| Some(ci.inbound_spi) == spi) {
                    c.rekey_in_s = left(ci.rekey_at);
                    c.expire_in_s = left(ci.expire_at);
                }
            }
        }
    }

    /// IKE SAs by state and the event counts, for `esparto status` and
    /// the metrics.
    pub fn events(&self) -> IkeEvents {
        let states = self.ep.ike_sa_states();
        let owned = |m: &BTreeMap<&'static str, u64>| m.iter().map(|(k, v)| ((*k).to_string(), *v)).collect();
        let c = &self.counts;
        IkeEvents {
            ike_sa_states: [
                ("waiting", states.waiting),
                ("connecting", states.connecting - states.waiting),
                ("authenticating", states.authenticating),
                ("established", states.established),
                ("failed", states.failed),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v as u64))
            .collect(),
            ike_sa_setups: c.ike_sa_setups,
            ike_sa_rekeys: c.ike_sa_rekeys,
            ike_sa_rekeys_initiated: c.ike_sa_rekeys_initiated,
            ike_messages: messages(&self.ep.stats().messages),
            ike_sa_failures: owned(&c.ike_sa_failures),
            ike_sa_deletes: owned(&c.ike_sa_deletes),
            auth_failures: owned(&c.auth_failures),
            child_sa_setups: c.child_sa_setups,
            child_sa_rekeys: c.child_sa_rekeys,
            child_sa_failures: owned(&c.child_sa_failures),
        }
    }
}

/// Refuses a connection whose start actions cannot be carried out: a trap
/// or a `start` child needs the peer's address to initiate to (without
/// `local_addrs`, the route's source is ours).
pub(super) fn check_activation(conn: &Connection) -> Result<(), String> {
    let Some(ike_conn) = &conn.ike else { return Ok(()) };
    for child in &ike_conn.children {
        let action = match child.start_action {
            StartAction::None => continue,
            StartAction::Trap => "a trap",
            StartAction::Start => "start_action = \"start\"",
        };
        if conn.remote_addrs.is_empty() && conn.remote_hosts.is_empty() {
            return Err(format!("{}/{}: {action} needs remote_addrs", conn.name, child.name));
        }
    }
    Ok(())
}

/// The IKE SAs of the connection named `name`.
fn ike_sas_of(gw: &Gateway, name: &str) -> Vec<IkeSaId> {
    gw.table.conn_id(name).and_then(|c| gw.table.conn(c)).map(|c| c.ike_sas.clone()).unwrap_or_default()
}
