//! `esparto-testbed demo`: the whole thing on a built-in default.
//!
//! Builds four network namespaces in a line — host-west, gw-west, gw-east,
//! host-east — starts an Esparto daemon on each gateway, lets them
//! negotiate with IKEv2 (PSK, AES-256-GCM, X25519), pings across in both
//! directions (IPv4 and IPv6), drives iperf3 TCP and UDP through the tunnel
//! while printing each worker's packet rate every second, shows both
//! gateways' status, and tears down exactly what it built.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use ::esparto::render;
use ::esparto::status::Status;
use crate::esparto::{EspartoConfig, EspartoGateway, Keying};
use crate::topology::{Net, Node, Topology};
use crate::traffic::{self, Iperf3Server};
use crate::{Family, missing};

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seconds of each traffic phase.
    pub seconds: u32,
    /// Workers per gateway (`None`: the CPUs the process may use).
    pub workers: Option<usize>,
    /// Print a JSON summary instead of the narration.
    pub json: bool,
}

/// Packets one worker of one gateway processed.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSummary {
    /// Worker index.
    pub worker: u16,
    /// Packets encapsulated.
    pub tx_packets: u64,
    /// Packets decapsulated.
    pub rx_packets: u64,
}

/// One gateway at the end of the demo.
#[derive(Debug, Clone, Serialize)]
pub struct GatewaySummary {
    /// Per-worker packet counts.
    pub workers: Vec<WorkerSummary>,
    /// Drops by reason.
    pub drops: std::collections::BTreeMap<String, u64>,
    /// IKE SAs.
    pub ike_sas: usize,
    /// Child SAs.
    pub child_sas: usize,
}

/// The machine-readable result.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Every ping (both directions, both families) answered.
    pub ping_ok: bool,
    /// iperf3 TCP, 4 streams, west → east, Mbit/s received.
    pub tcp_mbps: f64,
    /// iperf3 UDP with 1400-byte packets, Mbit/s received.
    pub udp_1400_mbps: f64,
    /// Loss of that UDP run, percent.
    pub udp_1400_loss_pct: f64,
    /// The west gateway.
    pub west: GatewaySummary,
    /// The east gateway.
    pub east: GatewaySummary,
}

struct Say(bool);

impl Say {
    fn line(&self, s: impl AsRef<str>) {
        if !self.0 {
            println!("{}", s.as_ref());
        }
    }
}

/// Runs the demo with the `esparto` binary at `bin`.
pub fn run(bin: &Path, opts: &Options) -> Result<Summary> {
    let say = Say(opts.json);
    let m = missing(false);
    if !m.is_empty() {
        bail!("the demo needs {} (run `make demo`, which installs them, as root)", m.join(", "));
    }
    say.line("esparto-testbed demo: host-west ── gw-west ══ IPsec (ESP-in-UDP, IKEv2, a Child SA per worker) ══ gw-east ── host-east");
    say.line("  west LAN 10.1.0.0/24 + fd00:1::/64, transit 192.0.2.0/24, east LAN 10.2.0.0/24 + fd00:2::/64");
    let topo = Topology::new().context("building the namespaces")?;
    let keying = |west: bool| Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: if west { "@west" } else { "@east" }.into(),
        remote_id: if west { "@east" } else { "@west" }.into(),
        psk: "esparto demo: a pre-shared key for namespaces only".into(),
        initiator: west,
    };
    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true))?;
    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false))?;
    wcfg.workers = opts.workers;
    ecfg.workers = opts.workers;
    // As in `esparto-testbed bench tunnel`: a flow's two ends on different CPUs,
    // as two machines would have them.
    ecfg.cpus = Some(crate::esparto::east_cpus_shifted()?);
    // RFC 9611: a Child SA per worker, negotiated right after IKE_AUTH.
    wcfg.per_cpu_sas = "eager".into();
    ecfg.per_cpu_sas = "eager".into();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).context("starting the east gateway")?;
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).context("starting the west gateway")?;
    say.line(format!(
        "gateways up: west pid {}, east pid {}, {} workers each",
        west.pid(),
        east.pid(),
        west.status()?.workers.len()
    ));

    let t0 = Instant::now();
    let workers = west.status()?.workers.len();
    let established = wait_tunnel(&west, workers + 1, Duration::from_secs(10))?;
    say.line(format!(
        "IKEv2: tunnel established in {:.0} ms, with {} Child SAs (a fallback and one per worker)",
        t0.elapsed().as_secs_f64() * 1000.0,
        established.ike_sas.iter().map(|i| i.children.len()).sum::<usize>()
    ));
    say.line(render::ike_sas_text(&established.ike_sas).trim_end());

    let mut ping_ok = true;
    for (from, to) in [(Node::HostWest, Node::HostEast), (Node::HostEast, Node::HostWest)] {
        for fam in [Family::V4, Family::V6] {
            let dst = Topology::addr(to, Net::Lan, fam);
            let r = traffic::ping(topo.ns(from), dst, 3, Duration::from_millis(200))?;
            ping_ok &= r.all_answered();
            say.line(format!(
                "ping {:?} → {dst}: {}/{} answered{}",
                from,
                r.received,
                r.transmitted,
                r.rtt_ms.map(|(_, avg, _)| format!(", avg {avg:.3} ms")).unwrap_or_default()
            ));
        }
    }

    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let server = Iperf3Server::start(topo.ns(Node::HostEast), 5201)?;
    say.line(format!("\niperf3 TCP, 4 streams, {} s, host-west → host-east; per-second packets per worker:", opts.seconds));
    let tcp = live(&say, &west, &east, || traffic::tcp(topo.ns(Node::HostWest), dst, server.port(), 4, opts.seconds))?;
    say.line(format!("TCP: {:.0} Mbit/s received ({} retransmits)", tcp.received_mbps, tcp.retransmits));

    // Four UDP flows (dealt out to the workers by the steering flow table) at a third
    // of the TCP rate: iperf3's per-datagram sends, not the tunnel, limit
    // UDP beyond that on a small machine.
    let pps = (tcp.received_mbps * 1e6 / 3.0 / (1400.0 * 8.0)).clamp(1000.0, 400_000.0);
    say.line(format!("\niperf3 UDP, 4 flows of 1400-byte packets, {:.0} packets/s in all, {} s:", pps, opts.seconds));
    let udp = live(&say, &west, &east, || {
        traffic::udp_streams(topo.ns(Node::HostWest), dst, server.port(), 1400, pps, opts.seconds, 4)
    })?;
    let udp_mbps = udp.received as f64 * 1400.0 * 8.0 / udp.seconds.max(1e-9) / 1e6;
    let loss = if udp.sent > 0 { 100.0 * udp.lost as f64 / udp.sent as f64 } else { 0.0 };
    say.line(format!("UDP 1400: {udp_mbps:.0} Mbit/s received, {} of {} lost ({loss:.3} %)", udp.lost, udp.sent));
    drop(server);

    let (ws, es) = (west.status()?, east.status()?);
    say.line("\n── gw-west ──");
    say.line(render::status_text(&ws).trim_end());
    say.line("\n── gw-east ──");
    say.line(render::status_text(&es).trim_end());
    let summary = Summary {
        ping_ok,
        tcp_mbps: tcp.received_mbps,
        udp_1400_mbps: udp_mbps,
        udp_1400_loss_pct: loss,
        west: gateway_summary(&ws),
        east: gateway_summary(&es),
    };
    west.stop().context("stopping the west gateway")?;
    east.stop().context("stopping the east gateway")?;
    drop(topo);
    say.line("\nstopped both gateways and removed the namespaces.");
    Ok(summary)
}

fn gateway_summary(s: &Status) -> GatewaySummary {
    GatewaySummary {
        workers: s
            .workers
            .iter()
            .map(|w| WorkerSummary { worker: w.worker, tx_packets: w.tx_packets, rx_packets: w.rx_packets })
            .collect(),
        drops: s.drops.clone(),
        ike_sas: s.ike_sas.len(),
        child_sas: s.ike_sas.iter().map(|i| i.children.len()).sum(),
    }
}

/// Waits for an IKE SA with `children` Child SAs on `gw` (or at least one
/// when the timeout comes); returns its status.
fn wait_tunnel(gw: &EspartoGateway, children: usize, timeout: Duration) -> Result<Status> {
    let deadline = Instant::now() + timeout;
    loop {
        let s = gw.status()?;
        let n: usize = s.ike_sas.iter().filter(|i| i.state == "established").map(|i| i.children.len()).sum();
        if n >= children || (n > 0 && Instant::now() >= deadline) {
            return Ok(s);
        }
        if Instant::now() >= deadline {
            bail!("no tunnel after {timeout:?}; the gateways' logs are in {}", gw.dir().path().display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `job` (an iperf3 client) in a thread and prints each worker's
/// packet rate on both gateways every second until it ends.
fn live<T: Send>(say: &Say, west: &EspartoGateway, east: &EspartoGateway, job: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        let h = s.spawn(job);
        let mut prev: Option<(Instant, Status, Status)> = None;
        let mut second = 0;
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(100));
            let due = prev.as_ref().is_none_or(|(t, _, _)| t.elapsed() >= Duration::from_secs(1));
            if !due {
                continue;
            }
            let (Ok(w), Ok(e)) = (west.status(), east.status()) else { continue };
            let now = Instant::now();
            if let Some((t, pw, pe)) = &prev {
                second += 1;
                let dt = now.duration_since(*t).as_secs_f64();
                let rate = |a: &Status, b: &Status, tx: bool| -> String {
                    a.workers
                        .iter()
                        .zip(&b.workers)
                        .map(|(n, o)| {
                            let d = if tx { n.tx_packets - o.tx_packets } else { n.rx_packets - o.rx_packets };
                            format!("w{} {:>6.1}k", n.worker, d as f64 / dt / 1e3)
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                say.line(format!(
                    "  {second:>2}s  west encap pps [{}]  east decap pps [{}]",
                    rate(&w, pw, true),
                    rate(&e, pe, false)
                ));
            }
            prev = Some((now, w, e));
        }
        h.join().map_err(|_| anyhow::anyhow!("traffic thread panicked"))?
    })
}
