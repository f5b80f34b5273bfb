//! One side of `esparto-testbed bench setup`: a single-threaded loop over one IKE
//! [`Endpoint`] and its two UDP sockets (500, and 4500 after the NAT-T
//! float), run as its own process (`esparto-testbed bench setup-peer`, hidden) in
//! its own namespace and pinned to its own core.
//!
//! The loop is the daemon's IKE driver without the data plane: receive a
//! batch (`recvmmsg`), hand each datagram to the endpoint, run due timers,
//! start tunnels (initiator, up to `concurrency` in flight), drain events,
//! send the endpoint's datagrams in a batch (`sendmmsg`, with UDP GSO where
//! consecutive datagrams allow), and sleep in `poll(2)` only when idle.
//! Like strongSwan's load-tester, a `ChildSaEstablished` event is counted
//! and dropped — its keys are wiped, nothing is installed — so what is
//! measured is the control plane alone.
//!
//! Protocol with the orchestrator, on stdout: `READY` once the sockets are
//! bound and the baseline taken, then one line of JSON ([`PeerReport`]).
//! The initiator reports when its `tunnels` Child SAs are up (or have
//! failed, or the time is up); the responder takes its figures when it has
//! seen `tunnels` Child SAs and reports when its stdin closes, answering
//! retransmissions until then.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_crypto::ike::KeGroup;
use esparto_crypto::{Rng, SystemRng};
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, IkeSaId, SteeringSpiAllocator,
};
use esparto_io::poll::Poller;
use esparto_io::{RxBatch, TxBatch, UdpConfig, UdpSocket};

use super::procfs::{CpuTime, rss_bytes};
use super::report::latency;
pub use super::report::{EngineCounters, Latency, PeerReport, Role};
use super::{ESP_PROPOSAL, IKE_PROPOSAL, heap};

/// IKE port (RFC 7296 §2).
pub const IKE_PORT: u16 = 500;
/// NAT-T port (RFC 3948), where IKE continues after the float.
pub const NATT_PORT: u16 = 4500;
/// Datagrams per `recvmmsg`/`sendmmsg`.
const BATCH: usize = 64;
/// Largest IKE datagram expected here (no fragmentation): an IKE_AUTH
/// with an RSA-3072 certificate and signature is about 2.3 KB.
const MAX_DATAGRAM: usize = 8192;
/// Longest sleep in `poll(2)` when idle, so a closed stdin or a deadline is
/// noticed.
const IDLE_POLL: Duration = Duration::from_millis(20);
/// At most this many failure reasons are kept for the report.
const MAX_REASONS: usize = 8;

/// What one peer runs.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// Initiator or responder.
    pub role: Role,
    /// Our address (the sockets bind it on 500 and 4500).
    pub local: IpAddr,
    /// The other peer's address.
    pub remote: IpAddr,
    /// Tunnels to bring up.
    pub tunnels: usize,
    /// IKE SAs in flight at most (initiator).
    pub concurrency: usize,
    /// CPU to pin to.
    pub cpu: Option<usize>,
    /// Give up after this long.
    pub timeout: Duration,
    /// Responder: demand a COOKIE for every IKE_SA_INIT (RFC 7296 §2.6).
    pub cookies: bool,
    /// Workers the inbound ESP SPIs steer to (as the daemon's allocator).
    pub workers: usize,
    /// Spoke connections (and PSKs) each side loads; tunnels go round-robin.
    pub connections: usize,
    /// Authenticate with the certificates in this directory
    /// ([`super::pki`]) instead of PSKs.
    pub pki: Option<std::path::PathBuf>,
}

/// Most spoke connections (one /24 of 10.128.0.0/9 each).
pub const MAX_CONNECTIONS: usize = 1 << 15;

/// The connections both peers load, one IKE SA with one Child SA each, PSK:
/// `connections` spokes `@spokeN.bench` (the initiator's side, LAN
/// 10.128.0.0 + N·256 /24) of one hub `@responder.bench` (LAN 10.0.0.0/16).
/// With one connection every tunnel is an IKE SA of the same
/// configuration, as strongSwan's load-tester does; with many, the
/// responder is a hub that must find each spoke's connection and key among
/// all of them. Returns the connections and, for each, its identity pair.
fn connections(o: &PeerOptions) -> Result<Vec<(ConnectionConfig, [Identity; 2])>> {
    if o.connections == 0 || o.connections > MAX_CONNECTIONS {
        bail!("--connections must be between 1 and {MAX_CONNECTIONS}");
    }
    let hub = Identity::parse("@responder.bench")?;
    let mut out = Vec::with_capacity(o.connections);
    for i in 0..o.connections {
        let spoke = Identity::parse(&format!("@spoke{i}.bench"))?;
        let spoke_lan = format!(
            "{}/24",
            std::net::Ipv4Addr::from(0x0a80_0000u32 + ((i as u32) << 8))
        );
        let hub_lan = "10.0.0.0/16";
        let (me, peer, lts, rts) = match o.role {
            Role::Initiator => (&spoke, &hub, spoke_lan.as_str(), hub_lan),
            Role::Responder => (&hub, &spoke, hub_lan, spoke_lan.as_str()),
        };
        let mut c = ConnectionConfig::new(&connection_name(i), IKE_PROPOSAL)?;
        c.local_addrs = vec![o.local];
        c.remote_addrs = vec![o.remote];
        c.remote_port = IKE_PORT;
        c.local.id = Some(me.clone());
        c.remote.id = Some(peer.clone());
        // Always ESP-in-UDP, as the daemon does: IKE floats to 4500 (§2.23).
        c.encap = true;
        c.children
            .push(ChildConfig::new("net", lts, rts, ESP_PROPOSAL)?);
        out.push((c, [spoke, hub.clone()]));
    }
    Ok(out)
}

fn connection_name(i: usize) -> String {
    format!("spoke{i}")
}

fn endpoint_config(o: &PeerOptions) -> EndpointConfig {
    let mut cfg = EndpointConfig {
        ike_port: IKE_PORT,
        natt_port: NATT_PORT,
        ..EndpointConfig::default()
    };
    // Every tunnel comes from one address, `concurrency` of them half-open
    // at once: the DoS limits meant for strangers (§2.6) would turn the
    // load into COOKIE rounds and drops. strongSwan's load-tester guide
    // switches the same defences off. `--cookies` measures with a COOKIE
    // demanded on every IKE_SA_INIT instead.
    let (limit, cookie_at) = (
        o.tunnels.max(o.concurrency) + 1024,
        if o.cookies { 0 } else { usize::MAX },
    );
    cfg.half_open_per_source = limit;
    cfg.max_half_open = limit;
    cfg.cookie_threshold = cookie_at;
    cfg.cookie_threshold_per_source = cookie_at;
    cfg.max_ike_sas = cfg.max_ike_sas.max(2 * limit);
    cfg
}

/// The sockets of one peer.
struct Io {
    socks: [UdpSocket; 2],
    tx: [TxBatch; 2],
    rx: RxBatch,
    sent: u64,
    received: u64,
    /// Datagrams too large for a batch slot, dropped.
    oversize: u64,
}

impl Io {
    fn bind(local: IpAddr) -> Result<Self> {
        // No GSO: IKE_AUTH messages with certificates are larger than the
        // MTU, and equal-sized ones to the one peer would be coalesced into
        // a GSO send whose segments the kernel refuses.
        let cfg = UdpConfig {
            gro: false,
            gso: false,
            ..UdpConfig::default()
        };
        let bind = |port| {
            let a = SocketAddr::new(local, port);
            UdpSocket::bind(a, &cfg, false).with_context(|| format!("binding {a}"))
        };
        Ok(Io {
            socks: [bind(IKE_PORT)?, bind(NATT_PORT)?],
            tx: [
                TxBatch::new(BATCH, 0, MAX_DATAGRAM),
                TxBatch::new(BATCH, 0, MAX_DATAGRAM),
            ],
            rx: RxBatch::new(BATCH, 0, MAX_DATAGRAM, BATCH),
            sent: 0,
            received: 0,
            oversize: 0,
        })
    }

    /// Hand every queued datagram to the endpoint; returns how many.
    fn receive(&mut self, ep: &mut Endpoint) -> Result<usize> {
        let mut n = 0;
        for sock in &mut self.socks {
            let local = sock.local_addr();
            loop {
                let got = sock.recv_batch(&mut self.rx)?;
                if got == 0 {
                    break;
                }
                let now = Instant::now();
                let wall_clock = esparto_ike::UnixTime::now();
                for (data, peer) in self.rx.iter() {
                    if let Some(peer) = peer {
                        ep.handle_datagram(now, wall_clock, local, peer, data);
                    }
                }
                n += got;
                if got < BATCH {
                    break;
                }
            }
        }
        self.received += n as u64;
        Ok(n)
    }

    /// Send everything the endpoint has queued; returns how many.
    fn transmit(&mut self, ep: &mut Endpoint) -> Result<usize> {
        let mut n = 0;
        while let Some(t) = ep.poll_transmit() {
            let i = usize::from(t.local.port() == NATT_PORT);
            if self.tx[i].is_full() {
                self.flush(i)?;
            }
            // A datagram larger than a slot cannot come from this exchange;
            // if one did, it is dropped and counted.
            if self.tx[i].push(Some(t.remote), &t.data).is_ok() {
                n += 1;
            } else {
                self.oversize += 1;
            }
        }
        self.flush(0)?;
        self.flush(1)?;
        self.sent += n as u64;
        Ok(n)
    }

    fn flush(&mut self, i: usize) -> Result<()> {
        let (sock, batch) = (&mut self.socks[i], &mut self.tx[i]);
        let mut from = 0;
        while from < batch.len() {
            from = sock.send_batch_from(batch, from)?;
            if from < batch.len() {
                // The socket buffer is full (8 MiB: unlikely); let the
                // kernel drain it rather than drop IKE messages.
                std::thread::yield_now();
            }
        }
        batch.clear();
        Ok(())
    }

    fn drops(&self) -> u64 {
        self.oversize
            + self
                .socks
                .iter()
                .map(|s| {
                    let st = s.stats();
                    st.tx_errors + st.tx_no_dst + st.rx_truncated + st.rx_overflow
                })
                .sum::<u64>()
    }
}

/// `RcvbufErrors` of this namespace's UDP (`/proc/net/snmp`).
fn udp_rcvbuf_errors() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/net/snmp") else {
        return 0;
    };
    let mut lines = s.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Counts of what happened, kept by the loop.
#[derive(Default)]
struct Tally {
    tunnels: usize,
    ike_sas: usize,
    failures: usize,
    reasons: Vec<String>,
}

impl Tally {
    fn fail(&mut self, why: String) {
        self.failures += 1;
        if self.reasons.len() < MAX_REASONS {
            self.reasons.push(why);
        }
    }
}

/// Figures frozen when the last tunnel came up.
struct Snapshot {
    at: Instant,
    cpu: CpuTime,
    rss: u64,
    heap: Option<i64>,
}

impl Snapshot {
    fn take() -> Result<Self> {
        Ok(Snapshot {
            at: Instant::now(),
            cpu: CpuTime::thread()?,
            rss: rss_bytes()?,
            heap: heap::live_bytes(),
        })
    }
}

/// Pay once-per-process costs before the baseline: aws-lc seeds its
/// generator from CPU jitter entropy on first use and detects CPU features
/// on the first X25519; the run should measure tunnels, not start-up.
fn warm_up() -> Result<()> {
    let mut rng = SystemRng;
    let mut b = [0u8; 32];
    rng.fill_public(&mut b);
    let peer = KeGroup::Curve25519.generate(&mut rng).context("X25519")?;
    let ours = KeGroup::Curve25519.generate(&mut rng).context("X25519")?;
    ours.agree(peer.public_value()).context("X25519")?;
    Ok(())
}

/// Run one peer to the end; the report is also printed as JSON on stdout.
pub fn run(o: &PeerOptions) -> Result<PeerReport> {
    if o.tunnels == 0 || o.concurrency == 0 {
        bail!("--tunnels and --concurrency must be at least 1");
    }
    if let Some(cpu) = o.cpu {
        esparto_io::cpu::pin_current_thread(cpu)
            .with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let mut ep = Endpoint::new(
        endpoint_config(o),
        Box::new(SystemRng),
        Box::new(SteeringSpiAllocator::new(o.workers, ::esparto::datapath::spi_for_worker, ::esparto::datapath::spi_to_worker)),
    );
    let names: Vec<String> = (0..o.connections).map(connection_name).collect();
    let creds = match &o.pki {
        Some(dir) => Some(super::pki::load(dir, o.role == Role::Initiator)?),
        None => None,
    };
    for (i, (mut c, ids)) in connections(o)?.into_iter().enumerate() {
        if let Some((cred, trust)) = &creds {
            c.local.credential = Some(cred.clone());
            c.remote.trust = Some(trust.clone());
            ep.add_connection(c)?;
            continue;
        }
        ep.add_connection(c)?;
        let key = format!("esparto bench setup: the pre-shared key of spoke {i}");
        ep.secrets_mut().add_psk(&ids, key.as_bytes());
    }
    warm_up()?;
    let mut io = Io::bind(o.local)?;
    let mut poller = Poller::new();
    for s in &io.socks {
        poller.add(s.as_raw_fd());
    }
    let stdin_idx = (o.role == Role::Responder).then(|| poller.add(std::io::stdin().as_raw_fd()));
    // Everything the loop itself needs is allocated before the baseline,
    // so the difference is the engine's per-tunnel state.
    let mut pending: HashMap<IkeSaId, Instant> = HashMap::with_capacity(o.concurrency * 2);
    let mut latencies: Vec<f64> = Vec::with_capacity(o.tunnels);
    let mut deciles: Vec<f64> = Vec::with_capacity(10);
    let mut tally = Tally {
        reasons: Vec::with_capacity(MAX_REASONS),
        ..Tally::default()
    };
    let snmp_before = udp_rcvbuf_errors();
    let before = Snapshot::take()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY")?;
        out.flush()?;
    }
    let deadline = Instant::now() + o.timeout;
    let mut started = 0usize;
    let mut t0: Option<Instant> = None;
    let mut done: Option<Snapshot> = None;
    let mut stdin_closed = false;
    if o.role == Role::Initiator {
        t0 = Some(Instant::now());
    }
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let got = io.receive(&mut ep)?;
        if got > 0 && t0.is_none() {
            t0 = Some(now);
        }
        let now = Instant::now();
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        if o.role == Role::Initiator {
            while started < o.tunnels && pending.len() < o.concurrency {
                let name = &names[started % names.len()];
                let id = ep.initiate(now, name, None).context("initiate")?;
                pending.insert(id, now);
                started += 1;
            }
        }
        while let Some(e) = ep.poll_event() {
            match e {
                Event::ChildSaEstablished(c) => {
                    tally.tunnels += 1;
                    if let Some(t) = pending.remove(&c.ike_sa) {
                        latencies.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    while o.role == Role::Initiator
                        && deciles.len() < 10
                        && tally.tunnels * 10 >= (deciles.len() + 1) * o.tunnels
                    {
                        deciles.push(t0.map_or(0.0, |t| t.elapsed().as_secs_f64()));
                    }
                }
                Event::IkeSaEstablished { .. } => tally.ike_sas += 1,
                Event::IkeSaDeleted { ike_sa, reason, .. } => {
                    pending.remove(&ike_sa);
                    tally.fail(format!("IKE SA {ike_sa} deleted: {reason:?}"));
                }
                Event::ChildSaFailed { ike_sa, reason, .. } => {
                    pending.remove(&ike_sa);
                    tally.fail(format!("Child SA of {ike_sa} failed: {reason:?}"));
                }
                Event::AuthFailed { ike_sa, reason, .. } => {
                    pending.remove(&ike_sa);
                    tally.fail(format!(
                        "IKE SA {ike_sa}: authentication failed: {reason:?}"
                    ));
                }
                // Deletes, rekeys, address changes: none of them is set-up.
                _ => {}
            }
        }
        let sent = io.transmit(&mut ep)?;
        if done.is_none() && tally.tunnels >= o.tunnels {
            done = Some(Snapshot::take()?);
        }
        match o.role {
            Role::Initiator if done.is_some() || (started == o.tunnels && pending.is_empty()) => {
                break;
            }
            Role::Responder if stdin_closed => break,
            _ => {}
        }
        if got == 0 && sent == 0 {
            let wait = ep.poll_timeout().map_or(IDLE_POLL, |t| {
                t.saturating_duration_since(Instant::now()).min(IDLE_POLL)
            });
            poller.wait(wait)?;
            if let Some(i) = stdin_idx {
                if poller.readable(i) {
                    let mut b = [0u8; 64];
                    // Readable: a read does not block; 0 bytes is EOF.
                    stdin_closed = std::io::stdin().read(&mut b).map_or(true, |n| n == 0);
                }
            }
        }
    }
    let completed = done.is_some();
    let end = match done {
        Some(s) => s,
        None => Snapshot::take()?,
    };
    let cpu = end.cpu.since(before.cpu);
    let n = tally.tunnels.max(1) as f64;
    let expected_per_sa: u64 = if o.cookies { 3 } else { 2 };
    let retransmissions = match o.role {
        Role::Initiator => io.sent.saturating_sub(expected_per_sa * started as u64),
        Role::Responder => io
            .received
            .saturating_sub(expected_per_sa * ep.stats().responder_sas.max(tally.ike_sas as u64)),
    };
    let started = match o.role {
        Role::Initiator => started,
        Role::Responder => usize::try_from(ep.stats().responder_sas).unwrap_or(usize::MAX),
    };
    let report = PeerReport {
        role: o.role,
        cpu: o.cpu,
        tunnels: tally.tunnels,
        ike_sas: tally.ike_sas,
        started,
        failures: tally.failures,
        failure_reasons: tally.reasons,
        seconds: t0.map_or(0.0, |t| end.at.saturating_duration_since(t).as_secs_f64()),
        cpu_seconds: cpu.total,
        user_seconds: cpu.user,
        system_seconds: cpu.system,
        tunnels_per_cpu_second: if cpu.total > 0.0 {
            tally.tunnels as f64 / cpu.total
        } else {
            0.0
        },
        rss_before: before.rss,
        rss_after: end.rss,
        rss_per_tunnel: (end.rss as f64 - before.rss as f64) / n,
        heap_before: before.heap,
        heap_after: end.heap,
        heap_per_tunnel: before.heap.zip(end.heap).map(|(b, a)| (a - b) as f64 / n),
        datagrams_sent: io.sent,
        datagrams_received: io.received,
        retransmissions,
        socket_drops: io.drops() + udp_rcvbuf_errors().saturating_sub(snmp_before),
        gso: io.socks.iter().all(UdpSocket::gso_enabled),
        engine: ep.stats().into(),
        latency: (o.role == Role::Initiator).then(|| latency(&mut latencies)),
        deciles,
        completed,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn both_sides_agree_on_every_tunnel() {
        let o = |role, local: &str, remote: &str| PeerOptions {
            role,
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
            tunnels: 10,
            concurrency: 5,
            cpu: None,
            timeout: Duration::from_secs(5),
            cookies: false,
            workers: 2,
            connections: 300,
            pki: None,
        };
        let is = connections(&o(Role::Initiator, "198.18.0.1", "198.18.0.2")).unwrap();
        let rs = connections(&o(Role::Responder, "198.18.0.2", "198.18.0.1")).unwrap();
        assert_eq!(is.len(), 300);
        for ((i, iids), (r, rids)) in is.iter().zip(&rs) {
            assert_eq!(i.name, r.name);
            assert_eq!(i.children[0].local_ts, r.children[0].remote_ts);
            assert_eq!(i.children[0].remote_ts, r.children[0].local_ts);
            assert_eq!(i.local.id, r.remote.id);
            assert_eq!(i.remote.id, r.local.id);
            assert_eq!(iids, rids, "one PSK per spoke, the same on both sides");
            assert!(i.encap && r.encap);
            i.validate().unwrap();
            r.validate().unwrap();
        }
        assert_eq!(
            is[299].0.children[0].local_ts[0],
            esparto_ike::TsConfig::parse("10.129.43.0/24").unwrap()
        );
        assert_ne!(is[0].0.local.id, is[1].0.local.id, "spokes differ");
        let mut zero = o(Role::Initiator, "198.18.0.1", "198.18.0.2");
        zero.connections = 0;
        assert!(connections(&zero).is_err());
        let cfg = endpoint_config(&o(Role::Responder, "198.18.0.2", "198.18.0.1"));
        assert!(cfg.half_open_per_source > 5 && cfg.cookie_threshold == usize::MAX);
    }
}
