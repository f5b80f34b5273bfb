//! The comparison baseline: strongSwan on both gateways of the standard
//! topology, and the plain routed ceiling (no IPsec at all), measured the
//! way `esparto-testbed bench tunnel` measures Esparto, so that the benchmark can
//! print them side by side from one run.
//!
//! Figures per section: TCP throughput with 1 and 4 streams (iperf3, 10 s),
//! and the RFC 2544 zero-loss UDP rate for each inner IP packet size
//! (64 … 1400 bytes; see [`super::udp_payload_len`]) found by
//! [`zeroloss`] with the [`udpgen`] blaster, with the CPU the gateways
//! spent ([`cpu`]) over the confirming trial or the TCP run, per GB
//! carried. "Carried" counts inner IP bytes for UDP (packets received ×
//! packet size) and TCP payload bytes for TCP.
//!
//! Two additions serve `esparto-testbed bench tunnel`: [`measure_probed`] also
//! records how the gateways' workers shared each run ([`WorkerSplit`]:
//! with one SA pair a single worker decrypts everything), and
//! [`Options::calibrate`] caps each search at what the generator actually
//! offers, for systems faster than the generator (see [`calibrated_max`]).
//!
//! The routed section runs first on its own topology with plain routes,
//! once with the kernel's veth offloads (GRO off) and once with GRO and UDP
//! GRO forwarding on, which is the question [`super::topology`] leaves
//! open: does GRO on veth change the ceiling? (It lets the gateways forward
//! coalesced super-packets; see the report that comes with the figures.)
//!
//! The machine has 2 cores shared with everything else running on it, and
//! the generators run on them too: the figures are those of this system
//! under this load, noisy, and recorded with the load average around them.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::cpu::{Meter, Usage};
use super::esparto::{EspartoConfig, EspartoGateway};
use super::strongswan::SwanPair;
use super::topology::{Net, Node, Offloads, Topology};
use super::traffic::{self, IPERF3_PORT, Iperf3Server, TcpResult};
use super::udpgen::UdpGen;
use super::zeroloss::{self, Outcome, Search};
use super::{Family, loadavg, udp_payload_len};

/// What to measure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Options {
    /// Seconds per TCP run.
    pub tcp_seconds: u32,
    /// Stream counts to run TCP with.
    pub tcp_streams: Vec<u32>,
    /// Inner IP packet sizes for the zero-loss search.
    pub sizes: Vec<usize>,
    /// Inner address family.
    pub family: Family,
    /// Search parameters; `max_pps` is further capped per size by `max_mbps`.
    pub search: Search,
    /// Cap on the offered IP bit rate, Mbit/s, for the tunnel (strongSwan
    /// queues without bound: offering 10× its capacity only fills memory).
    pub tunnel_max_mbps: f64,
    /// The same cap for the routed ceiling.
    pub routed_max_mbps: f64,
    /// The highest packet rate offered to the routed path.
    pub routed_max_pps: f64,
    /// Measure the routed ceiling (GRO as the kernel sets it).
    pub routed: bool,
    /// Also measure it with GRO and UDP GRO forwarding on.
    pub routed_gro: bool,
    /// IKE proposal for strongSwan.
    pub ike_proposal: String,
    /// ESP proposal.
    pub esp_proposal: String,
    /// UDP flows offered at once (each its own source port and thread;
    /// see [`UdpGen::with_flows`]). 1 measures one SA's per-packet
    /// capacity; as many as the gateways have cores exercises per-CPU SAs.
    #[serde(default = "one")]
    pub udp_flows: usize,
    /// Print each trial to stderr as it ends.
    #[serde(default)]
    pub verbose: bool,
    /// Before each search, blast once at the cap and, if the generator
    /// fell short of it, search below what it did offer (see
    /// [`calibrated_max`]). For systems far faster than the generator.
    #[serde(default)]
    pub calibrate: bool,
    /// GRO and UDP GRO forwarding on the gateways' LAN interfaces
    /// ([`Topology::set_lan_gro`]) before measuring.
    #[serde(default)]
    pub lan_gro: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            tcp_seconds: 10,
            tcp_streams: vec![1, 4],
            sizes: vec![64, 128, 256, 512, 1024, 1400],
            family: Family::V4,
            search: Search {
                min_pps: 500.0,
                max_pps: 250_000.0,
                loss_tolerance: 0.0,
                resolution: 0.03,
                trial: Duration::from_secs(3),
                settle: Duration::from_secs(1),
                confirm_retries: 4,
            },
            tunnel_max_mbps: 1_000.0,
            routed_max_mbps: 20_000.0,
            routed_max_pps: 2_000_000.0,
            routed: true,
            routed_gro: true,
            ike_proposal: "aes256gcm16-prfsha256-x25519".into(),
            esp_proposal: "aes256gcm16".into(),
            udp_flows: 1,
            verbose: false,
            calibrate: false,
            lan_gro: false,
        }
    }
}

fn one() -> usize {
    1
}

/// CPU over one measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CpuFigure {
    /// The raw usage.
    pub usage: Usage,
    /// Bytes carried while measuring.
    pub bytes: u64,
    /// Gateway-process CPU seconds per GB (none for plain routing).
    pub gateway_s_per_gb: Option<f64>,
    /// Machine-wide busy CPU seconds per GB (everything, generators included).
    pub system_s_per_gb: Option<f64>,
}

impl CpuFigure {
    fn new(usage: Usage, bytes: u64) -> Self {
        let gw = if usage.processes.is_empty() {
            None
        } else {
            usage.process_s_per_gb(bytes)
        };
        Self {
            gateway_s_per_gb: gw,
            system_s_per_gb: usage.system_s_per_gb(bytes),
            bytes,
            usage,
        }
    }
}

/// How the gateways' workers shared one measurement: packets each worker
/// encapsulated at gw-west (the sending side) and decapsulated at gw-east.
/// With one SA pair every inbound packet goes to the one worker its SPI
/// steers to; with per-CPU SAs each worker should take a share.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerSplit {
    /// Packets encapsulated by each gw-west worker.
    pub west_encap: Vec<u64>,
    /// Packets decapsulated by each gw-east worker.
    pub east_decap: Vec<u64>,
    /// Packets encapsulated by each gw-east worker (the return traffic:
    /// TCP's acknowledgements).
    #[serde(default)]
    pub east_encap: Vec<u64>,
    /// Packets decapsulated by each gw-west worker.
    #[serde(default)]
    pub west_decap: Vec<u64>,
    /// gw-west's I/O batching, all workers together.
    #[serde(default)]
    pub west_io: IoBatching,
    /// gw-east's I/O batching, all workers together.
    #[serde(default)]
    pub east_io: IoBatching,
}

/// How many packets a gateway's system calls carried during one
/// measurement: TUN reads and writes (GSO super-packets split and
/// coalesced) and UDP receives and sends (GRO and GSO). Two runs at the
/// same rate with different batching cost the kernel differently.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct IoBatching {
    /// TUN reads that returned a packet.
    pub tun_reads: u64,
    /// Packets those reads carried (after splitting).
    pub tun_rx_packets: u64,
    /// TUN writes (a coalesced super-packet is one).
    pub tun_writes: u64,
    /// Packets those writes carried (before coalescing).
    pub tun_tx_packets: u64,
    /// UDP receive calls that returned datagrams.
    pub udp_recv_calls: u64,
    /// Datagrams those calls carried (after splitting GRO buffers).
    pub udp_rx_datagrams: u64,
    /// UDP send calls.
    pub udp_send_calls: u64,
    /// Datagrams those calls carried.
    pub udp_tx_datagrams: u64,
}

impl IoBatching {
    /// The sum over a gateway's workers.
    pub fn total<'a>(io: impl IntoIterator<Item = &'a ::esparto::status::IoStatus>) -> Self {
        io.into_iter().fold(Self::default(), |t, x| Self {
            tun_reads: t.tun_reads + x.tun_reads,
            tun_rx_packets: t.tun_rx_packets + x.tun_rx_packets,
            tun_writes: t.tun_writes + x.tun_writes,
            tun_tx_packets: t.tun_tx_packets + x.tun_tx_packets,
            udp_recv_calls: t.udp_recv_calls + x.udp_recv_calls,
            udp_rx_datagrams: t.udp_rx_datagrams + x.udp_rx_datagrams,
            udp_send_calls: t.udp_send_calls + x.udp_send_calls,
            udp_tx_datagrams: t.udp_tx_datagrams + x.udp_tx_datagrams,
        })
    }

    /// `self − before`, field by field.
    fn since(&self, b: &Self) -> Self {
        Self {
            tun_reads: self.tun_reads.saturating_sub(b.tun_reads),
            tun_rx_packets: self.tun_rx_packets.saturating_sub(b.tun_rx_packets),
            tun_writes: self.tun_writes.saturating_sub(b.tun_writes),
            tun_tx_packets: self.tun_tx_packets.saturating_sub(b.tun_tx_packets),
            udp_recv_calls: self.udp_recv_calls.saturating_sub(b.udp_recv_calls),
            udp_rx_datagrams: self.udp_rx_datagrams.saturating_sub(b.udp_rx_datagrams),
            udp_send_calls: self.udp_send_calls.saturating_sub(b.udp_send_calls),
            udp_tx_datagrams: self.udp_tx_datagrams.saturating_sub(b.udp_tx_datagrams),
        }
    }
}

impl WorkerSplit {
    /// `after − before`, worker by worker (counters are cumulative; a
    /// worker missing from `before` counts from zero).
    pub fn since(&self, before: &WorkerSplit) -> WorkerSplit {
        let d = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter()
                .enumerate()
                .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                .collect()
        };
        WorkerSplit {
            west_encap: d(&self.west_encap, &before.west_encap),
            east_decap: d(&self.east_decap, &before.east_decap),
            east_encap: d(&self.east_encap, &before.east_encap),
            west_decap: d(&self.west_decap, &before.west_decap),
            west_io: self.west_io.since(&before.west_io),
            east_io: self.east_io.since(&before.east_io),
        }
    }

    /// The busiest worker's share of `counts` (1.0: one worker did it
    /// all; `1 / workers`: evenly spread); `None` when nothing was counted.
    pub fn busiest_share(counts: &[u64]) -> Option<f64> {
        let total: u64 = counts.iter().sum();
        let max = counts.iter().copied().max()?;
        (total > 0).then(|| max as f64 / total as f64)
    }
}

/// Reads the gateways' cumulative per-worker counters (see [`WorkerSplit`]).
pub type WorkerProbe<'a> = &'a dyn Fn() -> Result<WorkerSplit>;

/// One TCP figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TcpFigure {
    /// iperf3's result.
    pub result: TcpResult,
    /// CPU over the run.
    pub cpu: CpuFigure,
    /// How the workers shared the run (Esparto only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSplit>,
}

/// One zero-loss UDP figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UdpFigure {
    /// Inner IP packet size.
    pub ip_size: usize,
    /// UDP payload per packet.
    pub payload: usize,
    /// Zero-loss rate, packets/s (0: none found).
    pub rate_pps: f64,
    /// The same as inner IP Mbit/s (`pps × ip_size × 8`).
    pub ip_mbps: f64,
    /// What the generator offered when asked for the cap, packets/s (with
    /// [`Options::calibrate`]); the search started from the lower of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator_pps: Option<f64>,
    /// The search's record.
    pub outcome: Outcome,
    /// CPU over the last (confirming) trial.
    pub cpu: Option<CpuFigure>,
    /// How the workers shared the last (confirming) trial (Esparto only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<WorkerSplit>,
}

/// The figures of one system.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Section {
    /// What was measured.
    pub label: String,
    /// TCP figures.
    pub tcp: Vec<TcpFigure>,
    /// Zero-loss UDP figures by size.
    pub udp: Vec<UdpFigure>,
}

/// Everything the baseline measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Results {
    /// The options used.
    pub options: Options,
    /// Unix time at the start.
    pub started_unix: u64,
    /// Wall-clock seconds it took.
    pub seconds: f64,
    /// 1-minute load average before and after (noise indicator).
    pub loadavg: (Option<f64>, Option<f64>),
    /// `charon --version`-style identification of the IPsec software.
    pub strongswan: String,
    /// Plain routed ceilings (kernel default offloads, then GRO on).
    pub routed: Vec<Section>,
    /// strongSwan ↔ strongSwan.
    pub tunnel: Option<Section>,
}

/// A generator that offers less than this fraction of the rate asked of it
/// is the limit, not the system under test.
pub const GENERATOR_SHORTFALL: f64 = 0.95;

/// The highest rate worth asking for, given a blast at `cap` that offered
/// `offered` packets/s: the cap itself if the generator kept up (within
/// [`GENERATOR_SHORTFALL`]), else what it managed.
///
/// Why: the search bisects on the *requested* rate. Above what the
/// generator can offer, every request is the same blast, so a bisection
/// step can pass at a rate that was never offered and its confirmation —
/// another blast, at a different real rate on a busy machine — fail,
/// leaving no result at all. Searching below the generator's real ceiling
/// keeps every request a rate that is actually offered; a passing probe
/// then says "at least the generator's ceiling".
pub fn calibrated_max(cap: f64, offered: f64) -> f64 {
    if offered > 0.0 && offered < cap * GENERATOR_SHORTFALL {
        offered
    } else {
        cap
    }
}

/// The IP rate cap for `size`, as packets/s.
fn max_pps_for(size: usize, max_pps: f64, max_mbps: f64) -> f64 {
    max_pps.min(max_mbps * 1e6 / (size as f64 * 8.0))
}

/// Measure TCP and zero-loss UDP from host-west to host-east on `topo`
/// as it stands, accounting CPU to `pids`.
pub fn measure(
    topo: &Topology,
    opts: &Options,
    label: &str,
    pids: &[(&str, u32)],
    max_pps: f64,
    max_mbps: f64,
) -> Result<Section> {
    measure_probed(topo, opts, label, pids, max_pps, max_mbps, None)
}

/// [`measure`], also recording how the gateways' workers shared each TCP
/// run and each zero-loss trial when given a `probe` (read before the CPU
/// meter starts and after it stops, so its own cost is not charged).
pub fn measure_probed(
    topo: &Topology,
    opts: &Options,
    label: &str,
    pids: &[(&str, u32)],
    max_pps: f64,
    max_mbps: f64,
    probe: Option<WorkerProbe<'_>>,
) -> Result<Section> {
    if opts.lan_gro {
        topo.set_lan_gro(true)?;
    }
    let read = || probe.map(|p| p()).transpose();
    let split = |before: Option<WorkerSplit>| -> Result<Option<WorkerSplit>> {
        Ok(match (before, read()?) {
            (Some(b), Some(a)) => Some(a.since(&b)),
            _ => None,
        })
    };
    let dst = Topology::addr(Node::HostEast, Net::Lan, opts.family);
    let src = Topology::addr(Node::HostWest, Net::Lan, opts.family);
    let mut tcp = Vec::new();
    {
        let server = Iperf3Server::start(topo.ns(Node::HostEast), IPERF3_PORT)?;
        for &n in &opts.tcp_streams {
            let before = read()?;
            let m = Meter::start(pids)?;
            let r = traffic::tcp(
                topo.ns(Node::HostWest),
                dst,
                server.port(),
                n,
                opts.tcp_seconds,
            )
            .with_context(|| format!("{label}: TCP with {n} streams"))?;
            let usage = m.stop()?;
            let workers = split(before)?;
            if opts.verbose {
                eprintln!("  {label}: TCP {n} streams: {:.1} Mbit/s", r.received_mbps);
            }
            tcp.push(TcpFigure {
                cpu: CpuFigure::new(usage, r.bytes),
                result: r,
                workers,
            });
        }
    }
    let mut udpgen = UdpGen::with_flows(
        topo.ns(Node::HostWest),
        src,
        topo.ns(Node::HostEast),
        dst,
        opts.udp_flows,
    )?;
    // After a lost trial, strongSwan may still be working off its backlog.
    udpgen.drain_limit = Duration::from_secs(20);
    let mut udp = Vec::new();
    for &size in &opts.sizes {
        let payload = udp_payload_len(size, opts.family)?;
        let cap = max_pps_for(size, max_pps, max_mbps);
        let mut search = Search {
            max_pps: cap,
            ..opts.search.clone()
        };
        let mut generator_pps = None;
        if opts.calibrate {
            // Half a second tells the generator's rate; a longer blast
            // would only deepen a slow system's backlog.
            let blast = search.trial.min(Duration::from_millis(500));
            let (t, _) = udpgen.trial(size, cap, blast)?;
            generator_pps = Some(t.offered_pps);
            // Stay above the search's floor, or it refuses to run.
            search.max_pps = calibrated_max(cap, t.offered_pps).max(search.min_pps * 2.0);
            if opts.verbose {
                eprintln!(
                    "  {label}: {size} B: the generator offered {:.0} pps when asked for {cap:.0}; searching up to {:.0}",
                    t.offered_pps, search.max_pps
                );
            }
            std::thread::sleep(search.settle);
        }
        let mut last_cpu: Option<CpuFigure> = None;
        let mut last_split: Option<WorkerSplit> = None;
        let outcome = zeroloss::search(&search, |rate| {
            let before = read()?;
            let m = Meter::start(pids)?;
            let (t, _) = udpgen.trial(size, rate, search.trial)?;
            if opts.verbose {
                eprintln!(
                    "  {label}: {size} B at {:.0} pps (offered {:.0}): sent {} received {} loss {:.4} %",
                    t.requested_pps,
                    t.offered_pps,
                    t.sent,
                    t.received,
                    t.loss() * 100.0
                );
            }
            last_cpu = Some(CpuFigure::new(m.stop()?, t.received * size as u64));
            last_split = split(before)?;
            Ok(t)
        })
        .with_context(|| format!("{label}: zero-loss search at {size} bytes"))?;
        let (cpu, workers) = if outcome.confirmed {
            (last_cpu, last_split)
        } else {
            (None, None)
        };
        udp.push(UdpFigure {
            ip_size: size,
            payload,
            rate_pps: outcome.rate_pps,
            ip_mbps: outcome.rate_pps * size as f64 * 8.0 / 1e6,
            generator_pps,
            outcome,
            cpu,
            workers,
        });
    }
    Ok(Section {
        label: label.to_string(),
        tcp,
        udp,
    })
}

/// The plain routed ceiling with the given offloads, on a topology of its own.
pub fn routed(opts: &Options, offloads: Offloads) -> Result<Section> {
    let topo = Topology::new()?;
    topo.route_lans_directly()?;
    topo.set_offloads(offloads)?;
    let label = if offloads.gro {
        format!(
            "routed, no IPsec, veth GRO on, rx-udp-gro-forwarding {}",
            if offloads.udp_gro_forwarding {
                "on"
            } else {
                "off"
            }
        )
    } else if opts.lan_gro {
        format!("routed, no IPsec, LAN links as multi-queue NICs ({})", super::topology::LAN_AS_NICS)
    } else {
        "routed, no IPsec, veth offloads as the kernel sets them (GRO off)".to_string()
    };
    measure(
        &topo,
        opts,
        &label,
        &[],
        opts.routed_max_pps,
        opts.routed_max_mbps,
    )
}

/// strongSwan ↔ strongSwan on the standard topology.
pub fn tunnel(opts: &Options) -> Result<Section> {
    let topo = Topology::new()?;
    let pair = SwanPair::up(
        &topo,
        "esparto baseline psk",
        &opts.ike_proposal,
        &opts.esp_proposal,
    )?;
    let label = format!(
        "strongSwan 5.9 kernel-libipsec ↔ same, IKE {} / ESP {}",
        opts.ike_proposal, opts.esp_proposal
    );
    let r = measure(
        &topo,
        opts,
        &label,
        &pair.pids(),
        opts.search.max_pps,
        opts.tunnel_max_mbps,
    );
    if r.is_err() {
        pair.keep_logs();
    }
    let r = r?;
    pair.down()?;
    Ok(r)
}

/// Esparto on both gateways of the standard topology, with the given
/// configurations (e.g. [`EspartoConfig::site`] with mirrored static
/// pairs), measured exactly like [`tunnel`]: for `esparto-testbed bench tunnel`
/// to print beside [`strongswan`]'s figures from the same run.
pub fn esparto(
    opts: &Options,
    bin: &Path,
    west: &EspartoConfig,
    east: &EspartoConfig,
) -> Result<Section> {
    let topo = Topology::new()?;
    let gw_east = EspartoGateway::start(topo.ns(Node::GwEast), bin, east)?;
    let gw_west = EspartoGateway::start(topo.ns(Node::GwWest), bin, west)?;
    let label = format!("Esparto ↔ Esparto, ESP {}", west.esp_proposal);
    let pids = [
        ("gw-west esparto", gw_west.pid()),
        ("gw-east esparto", gw_east.pid()),
    ];
    let r = measure(
        &topo,
        opts,
        &label,
        &pids,
        opts.search.max_pps,
        opts.tunnel_max_mbps,
    );
    if r.is_err() {
        gw_west.dir().keep();
        gw_east.dir().keep();
    }
    let r = r?;
    let w = gw_west.stop();
    let e = gw_east.stop();
    w.and(e)?;
    Ok(r)
}

/// The whole baseline: routed ceiling(s), then strongSwan on both gateways.
pub fn strongswan(opts: &Options) -> Result<Results> {
    let t0 = std::time::Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let la0 = loadavg();
    let mut routed_sections = Vec::new();
    if opts.routed {
        routed_sections.push(routed(opts, Offloads::default())?);
    }
    if opts.routed_gro {
        routed_sections.push(routed(
            opts,
            Offloads {
                gro: true,
                udp_gro_forwarding: true,
            },
        )?);
    }
    let tunnel_section = tunnel(opts)?;
    Ok(Results {
        options: opts.clone(),
        started_unix,
        seconds: t0.elapsed().as_secs_f64(),
        loadavg: (la0, loadavg()),
        strongswan: charon_version(),
        routed: routed_sections,
        tunnel: Some(tunnel_section),
    })
}

/// strongSwan's identification as `charon --version` prints it.
pub fn charon_version() -> String {
    // `charon --version` prints e.g. "Linux strongSwan 5.9.8" and exits.
    std::process::Command::new(super::CHARON)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "strongSwan (version unknown)".into())
}

/// A plain-text table of a section (for reports and the benchmark).
pub fn render(s: &Section) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "{}", s.label);
    for t in &s.tcp {
        let _ = writeln!(
            o,
            "  TCP {} stream{}: {:8.1} Mbit/s  (retransmits {}, gateway CPU {} s/GB, machine {} s/GB)",
            t.result.streams,
            if t.result.streams == 1 { " " } else { "s" },
            t.result.received_mbps,
            t.result.retransmits,
            fmt_opt(t.cpu.gateway_s_per_gb),
            fmt_opt(t.cpu.system_s_per_gb),
        );
    }
    for u in &s.udp {
        let _ = writeln!(
            o,
            "  UDP {:5} B zero-loss: {:9.0} pps {:8.1} Mbit/s  {}{}trials {}  gateway CPU {} s/GB",
            u.ip_size,
            u.rate_pps,
            u.ip_mbps,
            if u.outcome.confirmed {
                ""
            } else {
                "UNCONFIRMED "
            },
            if u.outcome.at_max {
                "(at the offered max) "
            } else {
                ""
            },
            u.outcome.steps.len(),
            fmt_opt(u.cpu.as_ref().and_then(|c| c.gateway_s_per_gb)),
        );
    }
    o
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rate_caps_by_size() {
        // 1000 Mbit/s of 1400-byte packets is 89 286 pps; 64-byte ones hit the pps cap.
        assert!((max_pps_for(1400, 250_000.0, 1000.0) - 89_285.714).abs() < 0.01);
        assert_eq!(max_pps_for(64, 250_000.0, 1000.0), 250_000.0);
    }

    #[test]
    fn calibration_searches_below_a_short_generator() {
        // The generator kept up: the cap stands.
        assert_eq!(calibrated_max(100_000.0, 99_000.0), 100_000.0);
        // It offered a tenth of a 3 Mpps cap: search below what it offered.
        assert_eq!(calibrated_max(3e6, 300_000.0), 300_000.0);
        // Nothing offered at all (a broken trial): keep the cap.
        assert_eq!(calibrated_max(3e6, 0.0), 3e6);
    }

    #[test]
    fn worker_split_differences_and_shares() {
        let before = WorkerSplit {
            west_encap: vec![10, 20],
            east_decap: vec![5],
            ..WorkerSplit::default()
        };
        let after = WorkerSplit {
            west_encap: vec![110, 20],
            east_decap: vec![105, 300],
            ..WorkerSplit::default()
        };
        let d = after.since(&before);
        assert_eq!(d.west_encap, [100, 0]);
        // A worker that was not there before counts from zero.
        assert_eq!(d.east_decap, [100, 300]);
        let io = |n: u64| IoBatching {
            tun_writes: n,
            tun_tx_packets: 10 * n,
            ..IoBatching::default()
        };
        let moved = WorkerSplit {
            east_io: io(7),
            ..after.clone()
        }
        .since(&WorkerSplit {
            east_io: io(3),
            ..before.clone()
        });
        assert_eq!((moved.east_io.tun_writes, moved.east_io.tun_tx_packets), (4, 40));
        assert_eq!(moved.west_io, IoBatching::default());
        assert_eq!(WorkerSplit::busiest_share(&d.west_encap), Some(1.0));
        assert_eq!(WorkerSplit::busiest_share(&d.east_decap), Some(0.75));
        assert_eq!(WorkerSplit::busiest_share(&[0, 0]), None);
        assert_eq!(WorkerSplit::busiest_share(&[]), None);
    }

    #[test]
    fn options_round_trip() {
        let o = Options::default();
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Options>(&s).unwrap(), o);
        assert_eq!(o.sizes, [64, 128, 256, 512, 1024, 1400]);
    }
}
