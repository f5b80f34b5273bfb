//! `esparto-testbed bench voip`: how many concurrent calls of each codec
//! cross two gateways, measured end to end rather than computed.
//!
//! For each gateway pair (strongSwan ↔ strongSwan and Esparto ↔ Esparto by
//! default, in the same run, on a fresh topology each; optionally the plain
//! routed path) and each codec of `esparto plan voip`'s table
//! ([`esparto_bench::plan::codec`]), N calls run between host-west and
//! host-east ([`crate::callgen`]: a pair of RTP-like flows per call at the
//! codec's packet size and rate), N ramped:
//!
//! 1. doubling from `--start-calls` until a trial neither kept every call
//!    at MOS ≥ 4.0 nor lost nothing, the generator falls short, or
//!    `--max-calls`;
//! 2. bisection between the largest N whose every call reached MOS ≥ 4.0
//!    and the smallest that did not, to `--resolution`;
//! 3. the same for zero loss (RFC 2544's criterion, applied to calls: not
//!    one packet of any call lost), reusing every trial already run.
//!
//! A trial the gateways failed is repeated (`--retries`, default once) and
//! the repeat counts: on a shared machine a passing disturbance (another
//! process's burst of work) can cost one trial a few hundred packets at a
//! tenth of the load the gateways carry, and a ramp that took it for the
//! limit would stop there.
//!
//! Every trial reports the one-way delay (median, 99th percentile), RFC
//! 3550 interarrival jitter, loss, and each call's R-factor and MOS
//! ([`crate::emodel`], from the call's own loss and the trial's 99th
//! percentile delay). A trial in which the generator could not send at the
//! rate asked is never counted as the gateway's failure: the search stops
//! below it, and the figure is reported as a lower bound set by the
//! generator (`≥`). `--peers routed` measures the generator's own ceiling
//! through the same topology without IPsec.
//!
//! With results of `esparto-testbed bench tunnel --save` in `--results`,
//! the run ends by setting beside each codec what `esparto plan voip`
//! computes from them (the LANCOM method: zero-loss packets/s at the IP
//! packet's size ÷ (2 × packets/s per call)), and the ratio.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use esparto_bench::args::{self, Json, Save};
use esparto_bench::plan::codec::{self, Codec};
use esparto_bench::plan::voip as plan_voip;
use esparto_bench::results::{self, Kind};
use serde::{Deserialize, Serialize};

use super::tunnel::{EspartoPair, Layout, Machine};
use crate::callgen::{self, CallGen, CallTrial, Stream};
use crate::emodel::{self, Impairment, MOS_GOOD};
use crate::strongswan::SwanPair;
use crate::topology::{Net, Node, Topology};
use crate::{Family, missing};

/// The codecs measured unless `--codecs` says otherwise: the two of the
/// figures the benchmark is judged by, then the rest of the plan's table.
pub fn default_codecs() -> Vec<Codec> {
    codec::CODECS.to_vec()
}

/// A pair of gateways (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    /// strongSwan 5.9 kernel-libipsec on both gateways.
    Strongswan,
    /// Esparto on both gateways, per-CPU Child SAs negotiated by IKEv2.
    Esparto,
    /// No IPsec: the gateways route (the generator's and the path's ceiling).
    Routed,
}

impl Peer {
    /// As printed.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Strongswan => "strongSwan",
            Peer::Esparto => "Esparto",
            Peer::Routed => "routed",
        }
    }
}

/// The command line of `esparto-testbed bench voip`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Codecs, comma separated (default: all of `esparto plan voip`'s), e.g. g711-20ms,g729-30.
    #[arg(long, alias = "codec", value_delimiter = ',')]
    pub codecs: Vec<String>,
    /// Gateway pairs to measure, in this order, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "strongswan,esparto")]
    pub peers: Vec<Peer>,
    /// Seconds per trial.
    #[arg(long, default_value_t = 4.0)]
    pub seconds: f64,
    /// Calls of the first trial.
    #[arg(long, default_value_t = 16)]
    pub start_calls: u32,
    /// The most calls offered.
    #[arg(long, default_value_t = 20_000)]
    pub max_calls: u32,
    /// Stop bisecting when the bracket is narrower than this fraction of its lower end.
    #[arg(long, default_value_t = 0.05)]
    pub resolution: f64,
    /// A trial the gateways failed is repeated up to this many times before it counts as failed (the last one counts): a shared machine's passing disturbance is not the gateways' limit.
    #[arg(long, default_value_t = 1)]
    pub retries: u32,
    /// Sending threads of the call generator.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Source sockets per sending thread and direction.
    #[arg(long, default_value_t = callgen::SOURCES_PER_THREAD)]
    pub sources_per_thread: usize,
    /// Addresses each host receives calls on (added to its LAN interface; 5-tuples each way = threads × sources × this).
    #[arg(long, default_value_t = HOST_ADDRS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_HOST_ADDRS as u64))]
    pub host_addrs: usize,
    /// Workers per Esparto gateway (default: the CPUs this process may use).
    #[arg(long, value_parser = args::workers())]
    pub workers: Option<usize>,
    /// IKE proposal, both systems.
    #[arg(long, default_value = "aes256gcm16-prfsha256-x25519")]
    pub ike_proposal: String,
    /// ESP proposal, both systems.
    #[arg(long, default_value = "aes256gcm16")]
    pub esp_proposal: String,
    /// LAN links with veth's defaults instead of multi-queue NICs with GRO (as `bench tunnel --no-lan-gro`).
    #[arg(long)]
    pub no_lan_gro: bool,
    /// How to print the results.
    #[command(flatten)]
    pub output: Json,
    /// Print every trial to stderr as it ends.
    #[arg(long)]
    pub verbose: bool,
    /// Whether to keep them, and where (`bench tunnel --save` results there are compared with).
    #[command(flatten)]
    pub save: Save,
    /// Also draw calls per codec (Esparto beside strongSwan, zero loss and MOS ≥ 4.0) as an SVG chart into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Instead of calls per codec: the zero-loss packet rate of call-like traffic at these IP packet sizes (B, comma separated, e.g. 70,200,280), what `esparto plan voip` turns into calls; --save keeps it for the plan.
    #[arg(long, value_delimiter = ',', value_name = "SIZES")]
    pub rates: Vec<usize>,
    /// With --rates: milliseconds between a flow's packets.
    #[arg(long, default_value_t = 20)]
    pub rate_ptime: u32,
}

/// What a run does, as the JSON records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// Codec keys.
    pub codecs: Vec<String>,
    /// Pairs, in order.
    pub peers: Vec<Peer>,
    /// Seconds per trial.
    pub trial_seconds: f64,
    /// First trial's calls.
    pub start_calls: u32,
    /// Most calls.
    pub max_calls: u32,
    /// Bisection resolution.
    pub resolution: f64,
    /// Repeats of a trial the gateways failed.
    #[serde(default)]
    pub retries: u32,
    /// The generator.
    pub generator: callgen::Options,
    /// Addresses each host receives on.
    pub host_addrs: usize,
    /// Esparto's workers per gateway.
    pub workers: usize,
    /// IKE proposal.
    pub ike_proposal: String,
    /// ESP proposal.
    pub esp_proposal: String,
    /// LAN links as multi-queue NICs.
    pub lan_gro: bool,
    /// Print trials.
    pub verbose: bool,
}

impl Args {
    /// The options these arguments ask for.
    pub fn options(&self) -> Result<Options> {
        let codecs = codec::select(&self.codecs).map_err(anyhow::Error::msg)?;
        if !(self.seconds.is_finite() && (0.2..=600.0).contains(&self.seconds)) {
            bail!("--seconds must be between 0.2 and 600");
        }
        if self.start_calls == 0 || self.start_calls > self.max_calls {
            bail!("--start-calls must be between 1 and --max-calls");
        }
        if !(self.resolution > 0.0 && self.resolution < 1.0) {
            bail!("--resolution must be a fraction between 0 and 1");
        }
        if self.peers.is_empty() {
            bail!("--peers: at least one of strongswan, esparto, routed");
        }
        let workers = self.workers.unwrap_or_else(esparto_io::cpu::default_workers);
        let generator = callgen::Options {
            threads: self.threads,
            sources_per_thread: self.sources_per_thread,
            ..callgen::Options::default()
        };
        generator.validate()?;
        Ok(Options {
            codecs: codecs.iter().map(|c| c.key.to_string()).collect(),
            peers: self.peers.clone(),
            trial_seconds: self.seconds,
            start_calls: self.start_calls,
            max_calls: self.max_calls,
            resolution: self.resolution,
            retries: self.retries,
            generator,
            host_addrs: self.host_addrs,
            workers,
            ike_proposal: self.ike_proposal.clone(),
            esp_proposal: self.esp_proposal.clone(),
            lan_gro: !self.no_lan_gro,
            verbose: self.verbose,
        })
    }
}

/// One trial, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The generator's record.
    pub trial: CallTrial,
    /// Mouth-to-ear delay the E-model was given, ms.
    pub mouth_to_ear_ms: Option<f64>,
    /// The worst call's R-factor.
    pub r_min: f64,
    /// The worst call's MOS.
    pub mos_min: f64,
    /// The median call's MOS.
    pub mos_median: f64,
    /// No packet of any call lost (and the generator kept up).
    pub zero_loss: bool,
    /// Every call's MOS ≥ 4.0 (and the generator kept up).
    pub mos_ok: bool,
}

impl Step {
    /// Judges `trial` of a codec with `ptime_ms` and impairment `imp`.
    pub fn judge(trial: CallTrial, ptime_ms: u32, imp: &Impairment) -> Self {
        let ta = trial.delay.map(|d| emodel::mouth_to_ear_ms(f64::from(ptime_ms), imp, d.p99_ms));
        let mut mos: Vec<(f64, f64)> = trial
            .per_call
            .iter()
            .map(|c| match ta {
                Some(ta) => {
                    let r = emodel::r_factor(imp, ta, c.loss_percent);
                    (r, emodel::mos(r))
                }
                None => (0.0, 1.0),
            })
            .collect();
        mos.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (r_min, mos_min) = mos.first().copied().unwrap_or((0.0, 1.0));
        let mos_median = mos.get(mos.len() / 2).map_or(1.0, |m| m.1);
        let ok = !trial.generator_limited && trial.received > 0;
        Self {
            zero_loss: ok && trial.lost() == 0 && trial.calls_with_loss == 0,
            mos_ok: ok && mos_min >= MOS_GOOD,
            mouth_to_ear_ms: ta,
            r_min,
            mos_min,
            mos_median,
            trial,
        }
    }
}

/// What ended a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// A trial with more calls failed the criterion: the gateways' limit.
    Gateway,
    /// The generator could not offer more calls: the figure is a lower bound.
    Generator,
    /// `--max-calls` passed: a lower bound.
    Cap,
}

/// The largest N meeting a criterion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// Calls (0: not even the smallest trial passed).
    pub calls: u32,
    /// What stopped it.
    pub limit: Limit,
}

impl Found {
    /// "1,234", or "≥ 1,234" for a lower bound.
    pub fn text(&self) -> String {
        let n = esparto_bench::plan::thousands(f64::from(self.calls));
        match self.limit {
            Limit::Gateway => n,
            Limit::Generator | Limit::Cap => format!("≥ {n}"),
        }
    }
}

/// The ramp's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    /// First N.
    pub start: u32,
    /// Largest N.
    pub max: u32,
    /// Bisection resolution.
    pub resolution: f64,
}

/// `(largest passing N below the smallest failing one, the smallest
/// failing step)` for a criterion.
fn bracket(steps: &[Step], pass: impl Fn(&Step) -> bool) -> (u32, Option<&Step>) {
    let hi = steps.iter().filter(|s| !pass(s)).min_by_key(|s| s.trial.calls);
    let lo = steps
        .iter()
        .filter(|s| pass(s) && hi.is_none_or(|h| s.trial.calls < h.trial.calls))
        .map(|s| s.trial.calls)
        .max()
        .unwrap_or(0);
    (lo, hi)
}

/// Bisect between a criterion's bracket until it is narrow enough.
pub(crate) fn refine(
    ramp: &Ramp,
    steps: &mut Vec<Step>,
    pass: impl Fn(&Step) -> bool,
    measure: &mut impl FnMut(u32) -> Result<Step>,
) -> Result<Found> {
    loop {
        let (lo, hi) = bracket(steps, &pass);
        let Some(hi) = hi else {
            return Ok(Found { calls: lo, limit: Limit::Cap });
        };
        let h = hi.trial.calls;
        let limit = if hi.trial.generator_limited { Limit::Generator } else { Limit::Gateway };
        let width = (f64::from(lo) * ramp.resolution).max(1.0);
        if f64::from(h - lo) <= width || h <= 1 {
            return Ok(Found { calls: lo, limit });
        }
        let mid = lo + (h - lo) / 2;
        if steps.iter().any(|s| s.trial.calls == mid) {
            return Ok(Found { calls: lo, limit });
        }
        let s = measure(mid)?;
        steps.push(s);
    }
}

/// The ramp of one codec through one pair: every trial, and the largest N
/// with zero loss and with every call at MOS ≥ 4.0.
pub fn search(ramp: &Ramp, mut measure: impl FnMut(u32) -> Result<Step>) -> Result<(Vec<Step>, Found, Found)> {
    let mut steps = Vec::new();
    let mut n = ramp.start.clamp(1, ramp.max);
    loop {
        let s = measure(n)?;
        // Either criterion can fail first: delay costs MOS without a
        // packet lost, and a codec with loss concealment keeps its MOS
        // through some loss.
        let stop = !(s.mos_ok || s.zero_loss) || n >= ramp.max;
        steps.push(s);
        if stop {
            break;
        }
        n = n.saturating_mul(2).min(ramp.max);
    }
    let mos = refine(ramp, &mut steps, |s| s.mos_ok, &mut measure)?;
    let zero = refine(ramp, &mut steps, |s| s.zero_loss, &mut measure)?;
    steps.sort_by_key(|s| s.trial.calls);
    Ok((steps, zero, mos))
}

/// One codec through one pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerResult {
    /// Which pair.
    pub peer: Peer,
    /// What was measured.
    pub label: String,
    /// Largest N without a packet lost.
    pub zero_loss: Option<Found>,
    /// Largest N with every call at MOS ≥ 4.0.
    pub mos: Option<Found>,
    /// Every trial, by N.
    pub steps: Vec<Step>,
    /// What went wrong, if the search did not finish.
    pub error: Option<String>,
}

/// One codec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodecResult {
    /// `esparto plan voip`'s key.
    pub key: String,
    /// As printed.
    pub name: String,
    /// Milliseconds per packet.
    pub ptime_ms: u32,
    /// Inner IP packet, bytes (IPv4).
    pub ip_bytes: usize,
    /// Packets per second each way, one call.
    pub pps_per_call: f64,
    /// The E-model's codec figures.
    pub impairment: Impairment,
    /// One per pair.
    pub peers: Vec<PeerResult>,
}

/// One line of the summary: what a chart of calls per codec needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Codec key.
    pub codec: String,
    /// Codec as printed.
    pub name: String,
    /// Pair.
    pub peer: Peer,
    /// Calls at zero loss (`None`: not measured).
    pub zero_loss_calls: Option<u32>,
    /// That figure is a lower bound (generator or cap).
    pub zero_loss_lower_bound: bool,
    /// Calls with every call at MOS ≥ 4.0.
    pub mos_calls: Option<u32>,
    /// That figure is a lower bound.
    pub mos_lower_bound: bool,
}

/// `esparto plan voip`'s figure for a codec beside the measured one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanComparison {
    /// Codec key.
    pub codec: String,
    /// Calls the plan computes (exact quotient).
    pub plan_calls: f64,
    /// The plan's rate is a lower bound.
    pub plan_lower_bound: bool,
    /// Esparto's measured calls at zero loss.
    pub measured_calls: u32,
    /// That figure is a lower bound (the generator or --max-calls stopped the ramp).
    #[serde(default)]
    pub measured_lower_bound: bool,
    /// plan ÷ measured.
    pub ratio: Option<f64>,
}

/// The plan's side of the comparison: which file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCheck {
    /// The `bench tunnel` results the plan reads.
    pub from: String,
    /// Per codec.
    pub rows: Vec<PlanComparison>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The options in force.
    pub options: Options,
    /// Unix time at the start.
    pub started_unix: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Per codec.
    pub codecs: Vec<CodecResult>,
    /// Per codec and pair: the two figures.
    pub summary: Vec<Summary>,
    /// `esparto plan voip` against the measurement, when `bench tunnel` results were found.
    pub plan: Option<PlanCheck>,
    /// What failed.
    pub errors: Vec<String>,
}

/// Gateways up on a topology, ready for calls.
pub(crate) enum Up {
    Swan(Box<(Topology, SwanPair)>),
    Esparto(Box<EspartoPair>),
    Routed(Topology),
}

impl Up {
    pub(crate) fn topology(&self) -> &Topology {
        match self {
            Up::Swan(b) => &b.0,
            Up::Routed(t) => t,
            Up::Esparto(p) => p.topology(),
        }
    }

    pub(crate) fn down(self) -> Result<()> {
        match self {
            Up::Swan(b) => {
                let (topo, pair) = *b;
                let r = pair.down();
                drop(topo);
                r
            }
            Up::Esparto(p) => p.down(),
            Up::Routed(_) => Ok(()),
        }
    }
}

const SWAN_PSK: &str = "esparto voip benchmark psk";

/// Addresses each host receives calls on, by default.
pub const HOST_ADDRS: usize = 64;
/// The most: `.100` to `.199` of the host's /24.
pub const MAX_HOST_ADDRS: usize = 100;

/// A host of the topology with `n` addresses to receive calls on: its own
/// and `n − 1` more of its LAN (from `.100`), added to its LAN interface.
pub(crate) fn host(topo: &Topology, node: Node, n: usize) -> Result<callgen::Host<'_>> {
    let addr = Topology::addr(node, Net::Lan, Family::V4);
    let std::net::IpAddr::V4(v4) = addr else { bail!("{addr}: the call bench runs over IPv4") };
    let [a, b, c, _] = v4.octets();
    let mut receive = vec![addr];
    for k in 0..n.saturating_sub(1) {
        let extra = std::net::Ipv4Addr::new(a, b, c, 100 + k as u8);
        topo.ns(node)
            .addr(crate::topology::LAN_IF, &format!("{extra}/24"))
            .with_context(|| format!("adding {extra} to {node:?}"))?;
        receive.push(extra.into());
    }
    Ok(callgen::Host { ns: topo.ns(node), addr, receive })
}

pub(crate) fn bring_up(peer: Peer, bin: &Path, o: &Options) -> Result<(Up, String)> {
    Ok(match peer {
        Peer::Strongswan => {
            let topo = Topology::new()?;
            let pair = SwanPair::up(&topo, SWAN_PSK, &o.ike_proposal, &o.esp_proposal)?;
            let label = format!(
                "strongSwan 5.9 kernel-libipsec ↔ same, IKE {} / ESP {}",
                o.ike_proposal, o.esp_proposal
            );
            (Up::Swan(Box::new((topo, pair))), label)
        }
        Peer::Esparto => {
            let east = crate::esparto::east_cpus_shifted()?;
            let p = EspartoPair::up(bin, Layout::IkePerCpu, o.workers, &o.ike_proposal, &o.esp_proposal, Some(east))?;
            let label = format!("{} [gw-west SAs: {}]", p.label(), p.sa_summary());
            (Up::Esparto(Box::new(p)), label)
        }
        Peer::Routed => {
            let topo = Topology::new()?;
            topo.route_lans_directly()?;
            (Up::Routed(topo), "routed, no IPsec".to_string())
        }
    })
}

pub(crate) fn progress(t0: Instant, what: &str) {
    eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
}

/// One pair: up, every codec's search, down.
fn run_peer(peer: Peer, bin: &Path, o: &Options, codecs: &[Codec], t0: Instant) -> Result<Vec<PeerResult>> {
    progress(t0, &format!("{}: bringing the gateways up", peer.name()));
    let (up, label) = bring_up(peer, bin, o)?;
    let result = (|| -> Result<Vec<PeerResult>> {
        let topo = up.topology();
        if o.lan_gro {
            topo.set_lan_gro(true)?;
        }
        let west = host(topo, Node::HostWest, o.host_addrs)?;
        let east = host(topo, Node::HostEast, o.host_addrs)?;
        let mut generator = CallGen::new(west, east, o.generator.clone())?;
        let ramp = Ramp { start: o.start_calls, max: o.max_calls, resolution: o.resolution };
        let duration = Duration::from_secs_f64(o.trial_seconds);
        let mut out = Vec::new();
        for c in codecs {
            progress(t0, &format!("{}: {}", peer.name(), c.name));
            let stream = Stream { payload: c.payload + codec::RTP_HEADER, ptime_ms: c.ptime_ms };
            let imp = emodel::impairment(c.key);
            let r = search(&ramp, |n| {
                let mut s = Step::judge(generator.trial(n, stream, duration)?, c.ptime_ms, &imp);
                for _ in 0..o.retries {
                    if (s.zero_loss && s.mos_ok) || s.trial.generator_limited {
                        break;
                    }
                    if o.verbose {
                        eprintln!("  {} (repeated)", step_line(&s));
                    }
                    s = Step::judge(generator.trial(n, stream, duration)?, c.ptime_ms, &imp);
                }
                if o.verbose {
                    eprintln!("  {}", step_line(&s));
                }
                Ok(s)
            });
            out.push(match r {
                Ok((steps, zero, mos)) => PeerResult {
                    peer,
                    label: label.clone(),
                    zero_loss: Some(zero),
                    mos: Some(mos),
                    steps,
                    error: None,
                },
                Err(e) => PeerResult {
                    peer,
                    label: label.clone(),
                    zero_loss: None,
                    mos: None,
                    steps: vec![],
                    error: Some(format!("{e:#}")),
                },
            });
        }
        Ok(out)
    })();
    let down = up.down();
    let r = result?;
    down.context("stopping the gateways")?;
    Ok(r)
}

/// Run the benchmark.
pub fn run(bin: &Path, o: &Options, results_dir: &Path) -> Result<Report> {
    let swan = o.peers.contains(&Peer::Strongswan);
    let m = missing(swan);
    if !m.is_empty() {
        bail!("esparto-testbed bench voip needs {} (run as root)", m.join(", "));
    }
    let codecs = codec::select(&o.codecs).map_err(anyhow::Error::msg)?;
    let t0 = Instant::now();
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let mut machine = Machine::now();
    if swan {
        machine.strongswan = Some(crate::baseline::charon_version());
    }
    let mut errors = Vec::new();
    let mut by_peer: Vec<(Peer, Vec<PeerResult>)> = Vec::new();
    for &peer in &o.peers {
        match run_peer(peer, bin, o, &codecs, t0) {
            Ok(r) => {
                for p in &r {
                    if let Some(e) = &p.error {
                        errors.push(format!("{}: {e}", peer.name()));
                    }
                }
                by_peer.push((peer, r));
            }
            Err(e) => {
                let msg = format!("{}: {e:#}", peer.name());
                eprintln!("esparto-testbed bench voip: {msg}");
                errors.push(msg);
            }
        }
    }
    let ip_header = Family::V4.ip_udp_overhead() - codec::UDP_HEADER;
    let codecs: Vec<CodecResult> = codecs
        .iter()
        .enumerate()
        .map(|(i, c)| CodecResult {
            key: c.key.to_string(),
            name: c.name.to_string(),
            ptime_ms: c.ptime_ms,
            ip_bytes: c.ip_bytes(ip_header),
            pps_per_call: c.pps(),
            impairment: emodel::impairment(c.key),
            peers: by_peer.iter().filter_map(|(_, r)| r.get(i).cloned()).collect(),
        })
        .collect();
    let summary = summarise(&codecs);
    let plan = compare_with_plan(&codecs, results_dir);
    machine.loadavg_end = super::tunnel::report_loadavg();
    Ok(Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        options: o.clone(),
        started_unix,
        seconds: t0.elapsed().as_secs_f64(),
        codecs,
        summary,
        plan,
        errors,
    })
}

/// The summary rows of `codecs`.
pub fn summarise(codecs: &[CodecResult]) -> Vec<Summary> {
    let bound = |f: Option<Found>| f.is_some_and(|f| f.limit != Limit::Gateway);
    codecs
        .iter()
        .flat_map(|c| {
            c.peers.iter().map(|p| Summary {
                codec: c.key.clone(),
                name: c.name.clone(),
                peer: p.peer,
                zero_loss_calls: p.zero_loss.map(|f| f.calls),
                zero_loss_lower_bound: bound(p.zero_loss),
                mos_calls: p.mos.map(|f| f.calls),
                mos_lower_bound: bound(p.mos),
            })
        })
        .collect()
}

/// What `esparto plan voip` computes from the newest results in `dir`
/// (a call-traffic rate of `bench voip --rates` if there is one, else
/// `bench tunnel`'s), beside Esparto's measured zero-loss calls.
fn compare_with_plan(codecs: &[CodecResult], dir: &Path) -> Option<PlanCheck> {
    let found = results::load_dir(dir, &results::Machine::this()).ok()?;
    let (curve, from) = match found.newest_call_rate().and_then(|c| Some((plan_voip::call_rate_curve(&c.saved.data)?, c))) {
        Some((curve, c)) => (curve, format!("call-traffic rate {}", c.provenance())),
        None => {
            let t = found.newest_tunnel()?;
            (plan_voip::zero_loss_curve(&t.saved.data)?, format!("bench tunnel rate (an upper bound for calls) {}", t.provenance()))
        }
    };
    let rows = codecs
        .iter()
        .filter_map(|c| {
            let measured = c.peers.iter().find(|p| p.peer == Peer::Esparto)?.zero_loss?;
            let e = curve.at(c.ip_bytes);
            let plan_calls = plan_voip::full_duplex_calls(e.value, c.pps_per_call);
            Some(PlanComparison {
                codec: c.key.clone(),
                plan_calls,
                plan_lower_bound: e.lower_bound,
                measured_calls: measured.calls,
                measured_lower_bound: measured.limit != Limit::Gateway,
                ratio: (measured.calls > 0).then(|| plan_calls / f64::from(measured.calls)),
            })
        })
        .collect();
    Some(PlanCheck { from, rows })
}

pub(crate) fn step_line(s: &Step) -> String {
    let t = &s.trial;
    let (med, p99) = t.delay.map_or(("-".into(), "-".into()), |d| (format!("{:.2}", d.median_ms), format!("{:.2}", d.p99_ms)));
    format!(
        "{:>6} {:>9.0} {:>9.0} {:>8.3} {:>6} {:>8} {:>8} {:>6.2} {:>6.2} {:>5.2} {:>5.2}  {}{}{}{}",
        t.calls,
        t.target_pps,
        t.offered_pps,
        t.loss() * 100.0,
        t.calls_with_loss,
        med,
        p99,
        t.jitter_mean_ms,
        t.jitter_max_ms,
        s.mos_min,
        s.mos_median,
        if s.zero_loss { "zero-loss " } else { "" },
        if s.mos_ok { "MOS≥4 " } else { "" },
        if t.generator_limited { "GENERATOR-LIMITED" } else { "" },
        if t.receiver_drops > 0 { format!(" (receivers dropped {})", t.receiver_drops) } else { String::new() },
    )
}

/// The tables.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let op = &r.options;
    let _ = writeln!(o, "esparto-testbed bench voip: calls host-west ⇄ gw-west ══ ESP ══ gw-east ⇄ host-east");
    let _ = writeln!(
        o,
        "machine: {} CPUs ({} allowed), {}, kernel {}; load average {} at start, {} at end; {} s wall clock",
        m.cpus,
        m.cpus_allowed,
        m.cpu_model,
        m.kernel,
        m.loadavg_start,
        m.loadavg_end,
        r.seconds.round()
    );
    let _ = writeln!(o, "command: {}", r.command);
    let _ = writeln!(
        o,
        "options: {:.1} s trials, N from {} doubling to at most {}, bisection to {:.0} %; generator: {} sending threads, \
         {} UDP 5-tuples each way; IKE {} / ESP {}; {} workers per Esparto gateway; LAN links {}",
        op.trial_seconds,
        op.start_calls,
        op.max_calls,
        op.resolution * 100.0,
        op.generator.threads,
        op.generator.tuples(op.host_addrs),
        op.ike_proposal,
        op.esp_proposal,
        op.workers,
        if op.lan_gro { "as multi-queue NICs with GRO" } else { "with veth defaults" }
    );
    let _ = writeln!(
        o,
        "E-model (G.107): R = 93.2 − Id − Ie,eff per call from its own loss (worse direction); mouth-to-ear delay = ptime + \
         look-ahead + p99 one-way delay + {} ms; good = every call at MOS ≥ {MOS_GOOD:.1}",
        emodel::PLAYOUT_ALLOWANCE_MS
    );
    let _ = writeln!(o, "note: generator, gateways and the kernel's forwarding share these CPUs.");
    for c in &r.codecs {
        let _ = writeln!(
            o,
            "\n{} — IP {} B, {:.1} packets/s each way per call; Ie {} Bpl {} ({})",
            c.name, c.ip_bytes, c.pps_per_call, c.impairment.ie, c.impairment.bpl, c.impairment.source
        );
        for p in &c.peers {
            let _ = writeln!(o, "  {}", p.label);
            if let Some(e) = &p.error {
                let _ = writeln!(o, "    ERROR: {e}");
                continue;
            }
            let _ = writeln!(
                o,
                "    {:>6} {:>9} {:>9} {:>8} {:>6} {:>8} {:>8} {:>6} {:>6} {:>5} {:>5}",
                "calls", "pkt/s ask", "pkt/s sent", "loss %", "lossy", "delay50", "delay99", "jit", "jitmax", "MOSmin", "MOS50"
            );
            for s in &p.steps {
                let _ = writeln!(o, "    {}", step_line(s));
            }
            let _ = writeln!(
                o,
                "    → zero loss: {} calls{}; every call MOS ≥ 4.0: {} calls{}",
                p.zero_loss.map_or("-".into(), |f| f.text()),
                limit_note(p.zero_loss),
                p.mos.map_or("-".into(), |f| f.text()),
                limit_note(p.mos)
            );
        }
    }
    let _ = writeln!(o, "\nsummary (calls; ≥: a lower bound, the generator or --max-calls stopped the ramp)");
    let _ = writeln!(o, "  {:<20} {:<11} {:>12} {:>12}", "codec", "pair", "zero loss", "MOS ≥ 4.0");
    for s in &r.summary {
        let f = |v: Option<u32>, b: bool| {
            v.map_or("-".into(), |n| format!("{}{}", if b { "≥ " } else { "" }, esparto_bench::plan::thousands(f64::from(n))))
        };
        let _ = writeln!(
            o,
            "  {:<20} {:<11} {:>12} {:>12}",
            s.name,
            s.peer.name(),
            f(s.zero_loss_calls, s.zero_loss_lower_bound),
            f(s.mos_calls, s.mos_lower_bound)
        );
    }
    let _ = writeln!(o, "\ntargets (measured side by side in this run):");
    for key in ["g711-20ms", "g729-30ms"] {
        let get = |peer| r.summary.iter().find(|s| s.codec == key && s.peer == peer);
        let line = match (get(Peer::Esparto), get(Peer::Strongswan)) {
            (Some(e), Some(s)) => match (e.mos_calls, s.mos_calls) {
                (Some(en), Some(sn)) if sn > 0 => {
                    let ratio = f64::from(en) / f64::from(sn);
                    let verdict = if ratio >= 10.0 {
                        "met"
                    } else if e.mos_lower_bound {
                        "not shown (Esparto's figure is a lower bound)"
                    } else {
                        "not met"
                    };
                    format!("{en} / {sn} = {ratio:.1} — {verdict}")
                }
                (Some(en), Some(_)) => format!("{en} / 0: strongSwan carried no call at MOS ≥ 4.0"),
                _ => "not measured".into(),
            },
            _ => "not measured (needs both pairs)".into(),
        };
        let _ = writeln!(o, "  {key} calls at MOS ≥ 4.0, Esparto / strongSwan ≥ 10: {line}");
    }
    match &r.plan {
        Some(p) => {
            let _ = writeln!(o, "\nesparto plan voip (LANCOM method) against Esparto's measured zero-loss calls");
            let _ = writeln!(o, "  plan's zero-loss rates: {}", p.from);
            for row in &p.rows {
                let ratio = row.ratio.map_or("-".into(), |x| format!("{x:.2}"));
                let within = row.ratio.is_some_and(|x| (x - 1.0).abs() <= 0.15);
                let verdict = match (row.plan_lower_bound, row.measured_lower_bound) {
                    (false, false) if within => "within 15 %",
                    (false, false) => "NOT within 15 %",
                    (true, true) => "both lower bounds: undetermined",
                    (false, true) if row.ratio.is_some_and(|x| x < 0.85) => "NOT within 15 % (the plan is below a lower bound)",
                    (false, true) => "undetermined: the measured figure is a lower bound (the ratio is at most this)",
                    (true, false) if row.ratio.is_some_and(|x| x > 1.15) => "NOT within 15 % (the plan's lower bound is above the measurement)",
                    (true, false) => "undetermined: the plan's rate is a lower bound",
                };
                let _ = writeln!(
                    o,
                    "  {:<12} plan {}{:>9} measured {}{:>7}  plan/measured {ratio:>5}  {verdict}",
                    row.codec,
                    if row.plan_lower_bound { "≥ " } else { "" },
                    esparto_bench::plan::thousands(row.plan_calls),
                    if row.measured_lower_bound { "≥ " } else { "" },
                    esparto_bench::plan::thousands(f64::from(row.measured_calls)),
                );
            }
        }
        None => {
            let _ = writeln!(
                o,
                "\nno `esparto-testbed bench voip --rates SIZES --save` nor `bench tunnel --save` results for this machine in --results: no comparison with `esparto plan voip`"
            );
        }
    }
    for e in &r.errors {
        let _ = writeln!(o, "ERROR: {e}");
    }
    o
}

/// The bars of the calls-per-codec chart: codecs measured through both
/// Esparto and strongSwan (0 where a search failed).
pub fn chart(r: &Report) -> Vec<crate::plot::CodecCalls> {
    fn get(c: &CodecResult, peer: Peer) -> Option<&PeerResult> {
        c.peers.iter().find(|p| p.peer == peer)
    }
    let n = |p: Option<&PeerResult>, mos: bool| {
        u64::from(p.and_then(|p| if mos { p.mos } else { p.zero_loss }).map_or(0, |f| f.calls))
    };
    r.codecs
        .iter()
        .filter(|c| get(c, Peer::Esparto).is_some() && get(c, Peer::Strongswan).is_some())
        .map(|c| crate::plot::CodecCalls {
            codec: c.name.clone(),
            esparto_zero_loss: n(get(c, Peer::Esparto), false),
            esparto_mos4: n(get(c, Peer::Esparto), true),
            strongswan_zero_loss: n(get(c, Peer::Strongswan), false),
            strongswan_mos4: n(get(c, Peer::Strongswan), true),
        })
        .collect()
}

/// The chart's footnote: the run, and which bars are lower bounds.
pub fn chart_note(r: &Report) -> String {
    let bounded: Vec<String> = r
        .summary
        .iter()
        .filter(|s| s.peer != Peer::Routed && (s.zero_loss_lower_bound || s.mos_lower_bound))
        .map(|s| format!("{} {}", s.peer.name(), s.name))
        .collect();
    format!(
        "esparto-testbed bench voip, {:.0} s trials, load {} – {}{}",
        r.options.trial_seconds,
        r.machine.loadavg_start,
        r.machine.loadavg_end,
        if bounded.is_empty() {
            String::new()
        } else {
            format!("; lower bounds (the generator's limit): {}", bounded.join(", "))
        }
    )
}

fn limit_note(f: Option<Found>) -> &'static str {
    match f.map(|f| f.limit) {
        Some(Limit::Generator) => " (the generator could not offer more: not the gateways' limit)",
        Some(Limit::Cap) => " (--max-calls reached)",
        _ => "",
    }
}

/// `esparto-testbed bench voip`.
pub fn main(args: &Args, bin: &Path) -> Result<ExitCode> {
    if !args.rates.is_empty() {
        return super::callrate::main(args, bin);
    }
    let o = args.options()?;
    if let Some(path) = &args.svg {
        crate::plot::check_destination(path)?;
    }
    crate::clean_up_on_signal("esparto-testbed bench voip")?;
    let report = run(bin, &o, &args.save.results.dir)?;
    if let Some(path) = &args.svg {
        match crate::plot::voip_calls(path, &chart_note(&report), &chart(&report)) {
            Ok(()) => eprintln!("esparto-testbed bench voip: wrote {}", path.display()),
            Err(e) => eprintln!("esparto-testbed bench voip: --svg: {e:#}"),
        }
    }
    if let Some(dir) = args.save.dir() {
        let suite = o.esp_proposal.clone();
        match results::save(dir, &suite, &results::envelope(Kind::Voip, &report)) {
            Ok(p) => eprintln!("esparto-testbed bench voip: saved {}", p.display()),
            Err(e) => eprintln!("esparto-testbed bench voip: {e:#}"),
        }
    }
    super::finish(&report, &render(&report), args.output.json, report.errors.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use esparto_bench::args::ResultsDir;

    use super::*;
    use crate::callgen::{CallFigures, Delay};

    /// A trial of `n` calls on a path that carries `knee` calls with no
    /// loss and loses 2 % of every call above; the generator offers at
    /// most `gen_max` calls.
    pub(crate) fn trial(n: u32, knee: u32, gen_max: u32) -> CallTrial {
        let lossy = n > knee;
        let loss = if lossy { 2.0 } else { 0.0 };
        let sent = u64::from(n) * 200;
        let received = if lossy { sent * 98 / 100 } else { sent };
        CallTrial {
            calls: n,
            target_pps: f64::from(n) * 100.0,
            offered_pps: f64::from(n.min(gen_max)) * 100.0,
            sent,
            received,
            stray: 0,
            reordered: 0,
            receiver_drops: 0,
            generator_limited: n > gen_max,
            delay: Some(Delay { median_ms: 1.0, p99_ms: 2.0, max_ms: 3.0 }),
            jitter_mean_ms: 0.1,
            jitter_max_ms: 0.2,
            calls_with_loss: if lossy { n } else { 0 },
            per_call: vec![CallFigures { loss_percent: loss, jitter_ms: 0.1 }; n as usize],
        }
    }

    fn run(knee: u32, gen_max: u32, codec: &str, max: u32) -> (Vec<Step>, Found, Found) {
        let imp = emodel::impairment(codec);
        let ramp = Ramp { start: 16, max, resolution: 0.05 };
        search(&ramp, |n| Ok(Step::judge(trial(n, knee, gen_max), 20, &imp))).unwrap()
    }

    #[test]
    fn g729_loses_its_mos_with_its_first_lost_packets() {
        // 2 % loss takes G.729 below MOS 4, so both figures are the knee's.
        let (steps, zero, mos) = run(1000, 1_000_000, "g729-30ms", 20_000);
        assert_eq!(zero.limit, Limit::Gateway);
        assert!(zero.calls <= 1000 && zero.calls as f64 >= 1000.0 * 0.95, "{zero:?}");
        assert_eq!(mos, zero);
        // Doubling 16…1024 (7 trials), then bisection: far fewer trials than calls.
        assert!(steps.len() < 20, "{}", steps.len());
        assert!(steps.windows(2).all(|w| w[0].trial.calls < w[1].trial.calls), "each N measured once");
    }

    #[test]
    fn g711_keeps_its_mos_through_small_loss() {
        // G.711 with PLC at 2 % loss: Ie,eff = 95·2/27.1 = 7.0, R ≈ 85: still good.
        let (_, zero, mos) = run(1000, 1_000_000, "g711-20ms", 5_000);
        assert_eq!(zero.limit, Limit::Gateway);
        assert_eq!(mos, Found { calls: 5_000, limit: Limit::Cap });
        assert_eq!(mos.text(), "≥ 5,000");
    }

    #[test]
    fn the_generator_is_never_taken_for_the_gateway() {
        let (steps, zero, mos) = run(100_000, 3_000, "g729-30ms", 20_000);
        assert_eq!(zero.limit, Limit::Generator);
        assert_eq!(mos.limit, Limit::Generator);
        assert!(zero.calls <= 3_000 && zero.calls >= 2_850, "{zero:?}");
        assert!(steps.iter().filter(|s| s.trial.generator_limited).all(|s| !s.zero_loss && !s.mos_ok));
        assert!(zero.text().starts_with("≥ "));
        // Nothing passes: 0 calls, the gateway's doing.
        let (_, zero, _) = run(0, 1_000_000, "g729-30ms", 20_000);
        assert_eq!(zero, Found { calls: 0, limit: Limit::Gateway });
    }

    #[test]
    fn delay_can_cost_the_mos_before_any_loss() {
        // Above 500 calls the path queues (300 ms at the 99th percentile):
        // G.729 falls below MOS 4 with nothing lost; above 1000 it loses.
        let imp = emodel::impairment("g729-30ms");
        let ramp = Ramp { start: 16, max: 20_000, resolution: 0.05 };
        let (_, zero, mos) = search(&ramp, |n| {
            let mut t = trial(n, 1000, 1_000_000);
            if n > 500 {
                t.delay = Some(Delay { median_ms: 100.0, p99_ms: 300.0, max_ms: 400.0 });
            }
            Ok(Step::judge(t, 30, &imp))
        })
        .unwrap();
        assert_eq!((mos.limit, zero.limit), (Limit::Gateway, Limit::Gateway));
        assert!(mos.calls <= 500 && mos.calls >= 475, "{mos:?}");
        assert!(zero.calls <= 1000 && zero.calls >= 950, "{zero:?}");
    }

    #[test]
    fn judging_a_trial() {
        let imp = emodel::impairment("g711-20ms");
        let s = Step::judge(trial(10, 100, 100), 20, &imp);
        assert!(s.zero_loss && s.mos_ok);
        // Mouth-to-ear: 20 ms ptime + 2 ms p99 + the allowance.
        assert_eq!(s.mouth_to_ear_ms, Some(22.0 + emodel::PLAYOUT_ALLOWANCE_MS));
        assert!((s.mos_min - s.mos_median).abs() < 1e-12);
        let mut t = trial(10, 100, 100);
        t.delay = None;
        t.received = 0;
        let s = Step::judge(t, 20, &imp);
        assert!(!s.zero_loss && !s.mos_ok && s.mos_min == 1.0);
    }

    #[test]
    fn options_from_the_command_line() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let parse = |v: &[&str]| {
            let mut a = vec!["t"];
            a.extend_from_slice(v);
            Cli::try_parse_from(a).map_err(anyhow::Error::from).and_then(|c| c.a.options())
        };
        let o = parse(&["--workers", "2"]).unwrap();
        assert_eq!(o.peers, [Peer::Strongswan, Peer::Esparto]);
        assert_eq!(o.codecs.len(), codec::CODECS.len());
        let o = parse(&["--codecs", "g711-20ms,g729-30ms", "--peers", "esparto", "--workers", "1"]).unwrap();
        assert_eq!((o.codecs.as_slice(), o.peers.as_slice()), (&["g711-20ms".to_string(), "g729-30ms".into()][..], &[Peer::Esparto][..]));
        let e = parse(&["--codecs", "speex"]).unwrap_err().to_string();
        assert!(e.contains("known: g711-10ms"), "{e}");
        assert!(parse(&["--seconds", "0"]).is_err());
        assert!(parse(&["--start-calls", "100", "--max-calls", "10"]).is_err());
        assert!(parse(&["--peers", "racoon"]).is_err());
    }

    #[test]
    fn summary_and_render() {
        let imp = emodel::impairment("g711-20ms");
        let steps = vec![Step::judge(trial(16, 100, 100), 20, &imp)];
        let peer = |p, calls, limit| PeerResult {
            peer: p,
            label: p.name().into(),
            zero_loss: Some(Found { calls, limit }),
            mos: Some(Found { calls, limit }),
            steps: steps.clone(),
            error: None,
        };
        let codec = CodecResult {
            key: "g711-20ms".into(),
            name: "G.711 20 ms".into(),
            ptime_ms: 20,
            ip_bytes: 200,
            pps_per_call: 50.0,
            impairment: imp,
            peers: vec![peer(Peer::Strongswan, 100, Limit::Gateway), peer(Peer::Esparto, 1500, Limit::Generator)],
        };
        let summary = summarise(std::slice::from_ref(&codec));
        assert_eq!(summary.len(), 2);
        assert!(summary[1].zero_loss_lower_bound && !summary[0].mos_lower_bound);
        let r = Report {
            command: "t".into(),
            machine: Machine::now(),
            options: Args {
                codecs: vec![],
                peers: vec![Peer::Esparto],
                seconds: 1.0,
                start_calls: 1,
                max_calls: 10,
                resolution: 0.05,
                retries: 1,
                threads: 2,
                sources_per_thread: 4,
                host_addrs: 64,
                workers: Some(2),
                ike_proposal: "x".into(),
                esp_proposal: "aes256gcm16".into(),
                no_lan_gro: false,
                rates: vec![],
                rate_ptime: 20,
                svg: None,
                output: Json::default(),
                verbose: false,
                save: Save { save: false, results: ResultsDir { dir: PathBuf::from("/nonexistent") } },
            }
            .options()
            .unwrap(),
            started_unix: 0,
            seconds: 1.0,
            codecs: vec![codec],
            summary,
            plan: None,
            errors: vec![],
        };
        let bars = chart(&r);
        assert_eq!(bars.len(), 1);
        assert_eq!((bars[0].esparto_mos4, bars[0].strongswan_zero_loss), (1500, 100));
        assert!(chart_note(&r).contains("lower bounds (the generator's limit): Esparto G.711 20 ms"), "{}", chart_note(&r));
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("voip.svg");
        crate::plot::voip_calls(&svg, &chart_note(&r), &bars).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
        let text = render(&r);
        assert!(text.contains("g711-20ms calls at MOS ≥ 4.0, Esparto / strongSwan ≥ 10: 1500 / 100 = 15.0 — met"), "{text}");
        assert!(text.contains("the generator could not offer more"), "{text}");
        let j = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&j).unwrap();
        assert_eq!(back.summary, r.summary);
    }
}
