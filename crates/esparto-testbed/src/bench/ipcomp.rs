//! `esparto-testbed bench ipcomp`: what IPComp does for TCP goodput end to
//! end, per link speed, IPComp mode and kind of traffic.
//!
//! Two Esparto gateways on the standard topology, statically keyed (one SA
//! pair, the bench tunnel's pair code), their WAN link shaped with `tc`
//! (a token bucket, `tbf`, on both gateways' WAN veths: the link between
//! the sites is the slow part, as a leased line or DSL is) or left as
//! veth's own speed. Through the tunnel one TCP stream from host-west to
//! host-east carries a corpus ([`esparto_bench::bench::corpus`], the same bytes
//! `esparto bench ipcomp` measures in process), checked byte for byte on
//! arrival ([`crate::tcpgen`]). Per cell it records the goodput, both
//! gateway processes' CPU seconds per GB delivered, and what west's
//! outbound SA did (packets compressed and skipped, bytes saved).
//!
//! IPComp pays where the link is the bottleneck and the data compresses,
//! and costs where the CPU is: the three figures of [`Targets`] say whether
//! `ipcomp = adaptive` finds that out by itself.
//!
//! Runs are interleaved (every mode, link and corpus once per round, the
//! modes' order rotated each round) and each figure is the median over
//! the rounds, so drift on a shared machine hits every cell alike.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use esparto::status::Status;
use esparto_bench::args::{self, Json, Save};
use esparto_bench::bench::corpus::{Corpus, CorpusFile};
use esparto_bench::results;
use serde::{Deserialize, Serialize};

use super::median;
use super::tunnel::pair::{EspartoPair, Layout};
use crate::cpu::Meter;
use crate::esparto::EspartoConfig;
use crate::tcpgen::CorpusStream;
use crate::topology::{Net, Node, Topology, WAN_IF};
use crate::Family;

/// The corpus the sender loops over: long enough that TCP segments are
/// always fresh slices, short enough to check cheaply (it stays in cache).
const CORPUS_BYTES: usize = 4 << 20;

/// Token-bucket depth of a shaped link: this much of the rate, at least
/// [`MIN_BURST`] bytes.
const BURST: Duration = Duration::from_millis(2);
/// The smallest bucket (a few full-size packets).
const MIN_BURST: u64 = 16 * 1024;
/// Queue of a shaped link, as time at its rate (a router's buffer).
const QUEUE: Duration = Duration::from_millis(20);

/// How the SA compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No IPComp.
    No,
    /// `ipcomp = "yes"`: every packet the rules allow.
    Yes,
    /// `ipcomp = "adaptive"`.
    Adaptive,
    /// `ipcomp = "adaptive"` with the shaped link's rate configured
    /// ([`LINK_MBPS_KEY`]); on an unshaped link it is [`Mode::Adaptive`].
    AdaptiveLink,
}

/// The child key that tells adaptive IPComp the WAN link's rate.
pub const LINK_MBPS_KEY: &str = "link_mbps";

impl Mode {
    /// The name on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Mode::No => "no",
            Mode::Yes => "yes",
            Mode::Adaptive => "adaptive",
            Mode::AdaptiveLink => "adaptive-link",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        [Mode::No, Mode::Yes, Mode::Adaptive, Mode::AdaptiveLink]
            .into_iter()
            .find(|m| m.name() == s.trim())
            .with_context(|| format!("unknown mode '{s}' (no, yes, adaptive, adaptive-link)"))
    }

    /// The child's `ipcomp` value, if any.
    fn config(self) -> Option<&'static str> {
        match self {
            Mode::No => None,
            Mode::Yes => Some("\"yes\""),
            Mode::Adaptive | Mode::AdaptiveLink => Some("\"adaptive\""),
        }
    }

    /// Both gateways' configuration for this mode on `link`.
    fn apply(self, link: Link, c: &mut EspartoConfig) {
        if let Some(v) = self.config() {
            c.child_extra.push(("ipcomp".into(), v.into()));
        }
        if let (Mode::AdaptiveLink, Some(m)) = (self, link.mbps) {
            c.child_extra.push((LINK_MBPS_KEY.into(), m.to_string()));
        }
    }
}

/// The WAN link between the gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Link {
    /// Shaped to this many Mbit/s each way; `None`: veth's own speed.
    pub mbps: Option<u32>,
}

impl Link {
    /// "50 Mbit/s", "unshaped".
    pub fn name(self) -> String {
        match self.mbps {
            Some(m) if m >= 1000 && m % 1000 == 0 => format!("{} Gbit/s", m / 1000),
            Some(m) => format!("{m} Mbit/s"),
            None => "unshaped".into(),
        }
    }

    fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "unshaped" || s == "0" {
            return Ok(Link { mbps: None });
        }
        let m: u32 = s.parse().with_context(|| format!("link '{s}': Mbit/s or \"unshaped\""))?;
        if !(1..=100_000).contains(&m) {
            bail!("link {m} Mbit/s: between 1 and 100000");
        }
        Ok(Link { mbps: Some(m) })
    }
}

/// The command line.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// WAN links, comma separated: Mbit/s, or "unshaped" [default: 50,1000,unshaped].
    #[arg(long, value_delimiter = ',')]
    links: Vec<String>,
    /// IPComp modes, comma separated: no, yes, adaptive, adaptive-link (adaptive with
    /// `link_mbps` = the shaped rate) [default: all four; --quick: no,yes,adaptive].
    #[arg(long, value_delimiter = ',')]
    modes: Vec<String>,
    /// Corpora, comma separated: text, json, records, random [default: all four; with --file: none].
    #[arg(long, value_delimiter = ',')]
    corpora: Vec<String>,
    /// Also send this file's bytes (a sample of your own traffic), repeated, as corpus "file".
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Rounds; each figure is the median over them [default: 3; --quick: 1].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100))]
    runs: Option<usize>,
    /// Seconds measured per cell [default: 4; --quick: 2].
    #[arg(long)]
    seconds: Option<f64>,
    /// Seconds of TCP before measuring [default: 1; --quick: 0.5].
    #[arg(long)]
    warmup: Option<f64>,
    /// Workers per gateway.
    #[arg(long, default_value_t = 1, value_parser = args::workers())]
    workers: usize,
    /// A smoke run: one round, 2 s per cell, links 50 and unshaped, corpora text and random.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    save: Save,
}

/// What a run does, as the report records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The smoke-run settings.
    pub quick: bool,
    /// Links.
    pub links: Vec<Link>,
    /// Modes.
    pub modes: Vec<Mode>,
    /// Corpora.
    pub corpora: Vec<Corpus>,
    /// Rounds.
    pub runs: usize,
    /// Seconds measured per cell.
    pub seconds: f64,
    /// Seconds of TCP before measuring.
    pub warmup: f64,
    /// Workers per gateway.
    pub workers: usize,
    /// The file sent as corpus "file".
    #[serde(default)]
    pub file: Option<PathBuf>,
}

impl Options {
    fn from_args(a: &Args) -> Result<Self> {
        let list = |v: &[String], quick: &str, full: &str| -> Vec<String> {
            if !v.is_empty() {
                v.to_vec()
            } else if a.quick {
                quick.split(',').map(String::from).collect()
            } else {
                full.split(',').map(String::from).collect()
            }
        };
        let o = Options {
            quick: a.quick,
            links: list(&a.links, "50,unshaped", "50,1000,unshaped")
                .iter()
                .map(|s| Link::parse(s))
                .collect::<Result<_>>()?,
            modes: list(&a.modes, "no,yes,adaptive", "no,yes,adaptive,adaptive-link")
                .iter()
                .map(|s| Mode::parse(s))
                .collect::<Result<_>>()?,
            corpora: if a.corpora.is_empty() && a.file.is_some() {
                vec![Corpus::File]
            } else {
                let mut c: Vec<Corpus> = list(&a.corpora, "text,random", "text,json,records,random")
                    .iter()
                    .map(|s| Corpus::parse(s))
                    .collect::<Result<_>>()?;
                if a.file.is_some() {
                    c.push(Corpus::File);
                }
                c
            },
            runs: a.runs.unwrap_or(if a.quick { 1 } else { 3 }),
            seconds: a.seconds.unwrap_or(if a.quick { 2.0 } else { 4.0 }),
            warmup: a.warmup.unwrap_or(if a.quick { 0.5 } else { 1.0 }),
            workers: a.workers,
            file: a.file.clone(),
        };
        if !((0.0..=600.0).contains(&o.seconds) && o.seconds > 0.0 && (0.0..=60.0).contains(&o.warmup)) {
            bail!("--seconds must be in (0, 600] and --warmup in [0, 60]");
        }
        Ok(o)
    }
}

/// One measurement of one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// TCP goodput, Mbit/s.
    pub mbps: f64,
    /// Bytes delivered in the window.
    pub bytes: u64,
    /// Both gateway processes' CPU seconds in the window.
    pub gateway_s: f64,
    /// The same per 10⁹ bytes delivered.
    pub gateway_s_per_gb: Option<f64>,
    /// West's outbound packets sent compressed in the window.
    pub compressed: u64,
    /// West's outbound packets sent as they were (short, not smaller, or
    /// an adaptive back-off).
    pub skipped: u64,
    /// Bytes compression took off west's packets in the window.
    pub bytes_saved: u64,
    /// West's outbound compression state at the end ("compressing",
    /// "paused-incompressible", "paused-cpu"; empty without IPComp).
    pub state: String,
}

/// One link × mode × corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The link.
    pub link: Link,
    /// The mode.
    pub mode: Mode,
    /// The corpus.
    pub corpus: Corpus,
    /// Each round's measurement.
    pub samples: Vec<Sample>,
    /// Median goodput, Mbit/s.
    pub mbps: f64,
    /// Median gateway CPU seconds per GB delivered.
    pub gateway_s_per_gb: Option<f64>,
    /// Share of west's packets sent compressed, all rounds.
    pub compressed_share: f64,
}

/// One of the figures the benchmark is held to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// What is asked.
    pub goal: String,
    /// What was measured (absent: a cell it needs was not measured).
    pub measured: Option<String>,
    /// Whether it was met (absent: not measured).
    pub met: Option<bool>,
}

/// The three figures: adaptive ≥ 2 × no with text on a 50 Mbit/s link;
/// adaptive within 5 % of no in goodput and CPU per byte with random data
/// on an unshaped link; adaptive ≥ 0.95 × the better of no and yes in every
/// cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// Text on 50 Mbit/s.
    pub slow_link_text: Target,
    /// Random data unshaped.
    pub fast_link_random: Target,
    /// Every cell.
    pub never_worse: Target,
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// What ran.
    pub options: Options,
    /// `model name` from `/proc/cpuinfo`, and the CPU count.
    pub cpu_model: String,
    /// CPUs.
    pub cpus: usize,
    /// Load averages at the start and end.
    pub loadavg_start: String,
    /// At the end.
    pub loadavg_end: String,
    /// Every cell.
    pub cells: Vec<Cell>,
    /// The figures held to, by `ipcomp = adaptive`.
    pub targets: Targets,
    /// The same, by adaptive with the link's rate configured (when measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets_link: Option<Targets>,
    /// Failures (a cell or a round that could not be measured).
    pub errors: Vec<String>,
}

/// Shapes both gateways' WAN veths to `link` (or removes the shaping).
pub fn shape(topo: &Topology, link: Link) -> Result<()> {
    for node in [Node::GwWest, Node::GwEast] {
        let ns = topo.ns(node);
        match link.mbps {
            None => {
                // Absent when never shaped: nothing to remove.
                let _ = ns.exec("tc", &["qdisc", "del", "dev", WAN_IF, "root"]);
            }
            Some(m) => {
                let bytes_per_s = f64::from(m) * 1e6 / 8.0;
                let burst = ((bytes_per_s * BURST.as_secs_f64()) as u64).max(MIN_BURST);
                let limit = (bytes_per_s * QUEUE.as_secs_f64()) as u64 + burst;
                ns.exec(
                    "tc",
                    &[
                        "qdisc",
                        "replace",
                        "dev",
                        WAN_IF,
                        "root",
                        "tbf",
                        "rate",
                        &format!("{m}mbit"),
                        "burst",
                        &burst.to_string(),
                        "limit",
                        &limit.to_string(),
                    ],
                )
                .with_context(|| format!("shaping {} to {m} Mbit/s", ns.name()))?;
            }
        }
    }
    Ok(())
}

/// West's outbound IPComp counters: (compressed, skipped, bytes saved, state).
fn west_ipcomp(w: &Status) -> (u64, u64, u64, String) {
    let mut t = (0, 0, 0, String::new());
    for s in w.sas.iter().filter(|s| s.direction == "out") {
        if let Some(c) = &s.ipcomp {
            t.0 += c.compressed;
            t.1 += c.skipped;
            t.2 += c.bytes_saved;
            if t.3.is_empty() || c.state == "compressing" {
                t.3.clone_from(&c.state);
            }
        }
    }
    t
}

/// West's status, asked up to [`STATUS_TRIES`] times: on a loaded machine
/// the control socket's answer can miss its deadline.
fn west_status(pair: &EspartoPair) -> Result<Status> {
    let mut last = None;
    for _ in 0..STATUS_TRIES {
        match pair.status() {
            Ok((w, _)) => return Ok(w),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no status")))
}

/// Attempts at a gateway's status before a cell counts as failed.
const STATUS_TRIES: usize = 3;

fn measure(pair: &EspartoPair, corpus: &Arc<Vec<u8>>, o: &Options) -> Result<Sample> {
    let topo = pair.topology();
    let stream = CorpusStream::start(
        topo.ns(Node::HostWest),
        topo.ns(Node::HostEast),
        Topology::addr(Node::HostEast, Net::Lan, Family::V4),
        corpus.clone(),
    )?;
    stream.warm_up(Duration::from_secs_f64(o.warmup))?;
    let before = west_ipcomp(&west_status(pair)?);
    let meter = Meter::start(&pair.pids())?;
    let run = stream.measure(Duration::from_secs_f64(o.seconds))?;
    let usage = meter.stop()?;
    let after = west_ipcomp(&west_status(pair)?);
    stream.stop()?;
    Ok(Sample {
        mbps: run.mbps,
        bytes: run.bytes,
        gateway_s: usage.process_s(),
        gateway_s_per_gb: usage.process_s_per_gb(run.bytes),
        compressed: after.0.saturating_sub(before.0),
        skipped: after.1.saturating_sub(before.1),
        bytes_saved: after.2.saturating_sub(before.2),
        state: after.3,
    })
}

/// Runs the benchmark.
pub fn run(bin: &std::path::Path, o: &Options, progress: bool) -> Result<Report> {
    let loadavg_start = loadavg_text();
    let file = o.file.as_deref().map(CorpusFile::read).transpose()?;
    let corpora: Vec<(Corpus, Arc<Vec<u8>>)> = o
        .corpora
        .iter()
        .map(|&c| Ok((c, Arc::new(c.bytes(CORPUS_BYTES, file.as_ref())?))))
        .collect::<Result<_>>()?;
    let mut samples: Samples = Vec::new();
    for &link in &o.links {
        for &mode in &o.modes {
            for &(c, _) in &corpora {
                samples.push(((link, mode, c), Vec::new()));
            }
        }
    }
    let mut errors = Vec::new();
    for round in 0..o.runs {
        let mut modes = o.modes.clone();
        let n = modes.len().max(1);
        modes.rotate_left(round % n);
        for mode in modes {
            if mode == Mode::AdaptiveLink {
                // The rate is configuration: a pair per shaped link.
                for &link in o.links.iter().filter(|l| l.mbps.is_some()) {
                    pair_round(bin, o, round, mode, &[link], &corpora, &mut samples, &mut errors, progress);
                }
            } else {
                pair_round(bin, o, round, mode, &o.links, &corpora, &mut samples, &mut errors, progress);
            }
        }
    }
    let cells: Vec<Cell> = samples
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|((link, mode, corpus), v)| {
            let mbps = median(&v.iter().map(|s| s.mbps).collect::<Vec<_>>());
            let cpu: Vec<f64> = v.iter().filter_map(|s| s.gateway_s_per_gb).collect();
            let (c, k): (u64, u64) = v.iter().fold((0, 0), |(c, k), s| (c + s.compressed, k + s.skipped));
            Cell {
                link,
                mode,
                corpus,
                mbps,
                gateway_s_per_gb: (!cpu.is_empty()).then(|| median(&cpu)),
                compressed_share: if c + k == 0 { 0.0 } else { c as f64 / (c + k) as f64 },
                samples: v,
            }
        })
        .collect();
    let targets_link = o.modes.contains(&Mode::AdaptiveLink).then(|| targets(&cells, Mode::AdaptiveLink));
    let targets = targets(&cells, Mode::Adaptive);
    let (cpu_model, cpus) = cpu_info();
    Ok(Report {
        options: o.clone(),
        cpu_model,
        cpus,
        loadavg_start,
        loadavg_end: loadavg_text(),
        cells,
        targets,
        targets_link,
        errors,
    })
}

type Samples = Vec<((Link, Mode, Corpus), Vec<Sample>)>;

/// One round of one mode: a pair up, each link shaped in turn, each corpus
/// measured, the pair down.
#[allow(clippy::too_many_arguments)]
fn pair_round(
    bin: &std::path::Path,
    o: &Options,
    round: usize,
    mode: Mode,
    links: &[Link],
    corpora: &[(Corpus, Arc<Vec<u8>>)],
    samples: &mut Samples,
    errors: &mut Vec<String>,
    progress: bool,
) {
    let first = links.first().copied().unwrap_or(Link { mbps: None });
    let tweak = |c: &mut EspartoConfig| mode.apply(first, c);
    let pair = match EspartoPair::up_with(bin, Layout::StaticOnePair, o.workers, "", "aes256gcm16", None, &tweak) {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!("round {round}, ipcomp = {}: {e:#}", mode.name()));
            return;
        }
    };
    for &link in links {
        if let Err(e) = shape(pair.topology(), link) {
            errors.push(format!("round {round}, {}: {e:#}", link.name()));
            continue;
        }
        for (corpus, bytes) in corpora {
            let key = (link, mode, *corpus);
            match measure(&pair, bytes, o) {
                Ok(s) => {
                    if progress {
                        eprintln!(
                            "round {round}: {:>10} {:<13} {:<8} {:8.1} Mbit/s, {:6.2} s/GB, {} compressed, {} skipped",
                            link.name(),
                            mode.name(),
                            corpus.name(),
                            s.mbps,
                            s.gateway_s_per_gb.unwrap_or(0.0),
                            s.compressed,
                            s.skipped
                        );
                    }
                    if let Some((_, v)) = samples.iter_mut().find(|(k, _)| *k == key) {
                        v.push(s);
                    }
                }
                Err(e) => {
                    pair.keep_logs();
                    errors.push(format!(
                        "round {round}, {}, ipcomp = {}, {}: {e:#}",
                        link.name(),
                        mode.name(),
                        corpus.name()
                    ));
                }
            }
        }
    }
    if let Err(e) = pair.down() {
        errors.push(format!("round {round}, ipcomp = {}: stopping: {e:#}", mode.name()));
    }
}

fn loadavg_text() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_info() -> (String, usize) {
    let m = results::Machine::this();
    (m.cpu_model, m.cpus)
}

fn find(cells: &[Cell], link: Option<u32>, mode: Mode, corpus: Corpus) -> Option<&Cell> {
    // Without a shaped rate there is nothing to configure: adaptive-link
    // is adaptive there.
    let mode = if mode == Mode::AdaptiveLink && link.is_none() { Mode::Adaptive } else { mode };
    cells.iter().find(|c| c.link.mbps == link && c.mode == mode && c.corpus == corpus)
}

/// Holds `adaptive`'s cells (of [`Mode::Adaptive`] or
/// [`Mode::AdaptiveLink`]) to the three figures.
pub fn targets(cells: &[Cell], adaptive: Mode) -> Targets {
    let slow = match (find(cells, Some(50), adaptive, Corpus::Text), find(cells, Some(50), Mode::No, Corpus::Text)) {
        (Some(a), Some(n)) if n.mbps > 0.0 => {
            let r = a.mbps / n.mbps;
            Target {
                goal: "50 Mbit/s, text: adaptive ≥ 2 × no (goodput)".into(),
                measured: Some(format!("{r:.2} × ({:.1} / {:.1} Mbit/s)", a.mbps, n.mbps)),
                met: Some(r >= 2.0),
            }
        }
        _ => Target { goal: "50 Mbit/s, text: adaptive ≥ 2 × no (goodput)".into(), measured: None, met: None },
    };
    let goal = "unshaped, random: adaptive within 5 % of no in goodput and CPU per byte";
    let fast = match (find(cells, None, adaptive, Corpus::Random), find(cells, None, Mode::No, Corpus::Random)) {
        (Some(a), Some(n)) if n.mbps > 0.0 => {
            let g = a.mbps / n.mbps;
            let cpu = match (a.gateway_s_per_gb, n.gateway_s_per_gb) {
                (Some(x), Some(y)) if y > 0.0 => Some(x / y),
                _ => None,
            };
            Target {
                goal: goal.into(),
                measured: Some(format!(
                    "goodput {g:.3} × ({:.0} / {:.0} Mbit/s), CPU/GB {}",
                    a.mbps,
                    n.mbps,
                    cpu.map_or("not measured".into(), |c| format!("{c:.3} ×"))
                )),
                met: Some(g >= 0.95 && cpu.is_some_and(|c| c <= 1.05)),
            }
        }
        _ => Target { goal: goal.into(), measured: None, met: None },
    };
    let goal = "every link and corpus: adaptive ≥ 0.95 × the better of no and yes (goodput)";
    let mut worst: Option<(f64, String)> = None;
    for n in cells.iter().filter(|c| c.mode == Mode::No) {
        let Some(a) = find(cells, n.link.mbps, adaptive, n.corpus) else { continue };
        let best = [Mode::No, Mode::Yes]
            .iter()
            .filter_map(|&m| find(cells, a.link.mbps, m, a.corpus))
            .map(|c| c.mbps)
            .fold(0.0f64, f64::max);
        if best > 0.0 {
            let r = a.mbps / best;
            if worst.as_ref().is_none_or(|(w, _)| r < *w) {
                worst = Some((r, format!("{}, {}", a.link.name(), a.corpus.name())));
            }
        }
    }
    let never = Target {
        goal: goal.into(),
        measured: worst.as_ref().map(|(r, at)| format!("worst {r:.3} × ({at})")),
        met: worst.map(|(r, _)| r >= 0.95),
    };
    Targets { slow_link_text: slow, fast_link_random: fast, never_worse: never }
}

/// Prints the tables.
pub fn print(r: &Report) {
    println!(
        "IPComp end to end: one TCP stream host-west → host-east through two Esparto gateways (static SA pair, \
         aes256gcm16, {} worker(s) each); {} round(s) of {} s (+{} s warm-up) per cell, medians.",
        r.options.workers, r.options.runs, r.options.seconds, r.options.warmup
    );
    if let Some(f) = &r.options.file {
        println!("Corpus \"file\": {}, repeated.", f.display());
    }
    println!("{}, {} CPUs; load average {} → {}\n", r.cpu_model, r.cpus, r.loadavg_start, r.loadavg_end);
    let modes = &r.options.modes;
    // One column per mode, each as wide as the longest mode name.
    let w = modes.iter().map(|m| m.name().len()).max().unwrap_or(8).max(8);
    let span = modes.len() * (w + 1) - 1;
    println!("{:<11} {:<8} | {:>span$} | {:>span$} | {:>9}", "link", "corpus", "goodput Mbit/s", "gateway CPU s/GB", "adaptive");
    let head: Vec<String> = modes.iter().map(|m| format!("{:>w$}", m.name())).collect();
    println!("{:<11} {:<8} | {} | {} | {:>9}", "", "", head.join(" "), head.join(" "), "compr.");
    for &link in &r.options.links {
        for &corpus in &r.options.corpora {
            let cell = |m: Mode| find(&r.cells, link.mbps, m, corpus);
            let g: Vec<String> =
                modes.iter().map(|&m| cell(m).map_or(format!("{:>w$}", "—"), |c| format!("{:>w$.1}", c.mbps))).collect();
            let cpu: Vec<String> = modes
                .iter()
                .map(|&m| {
                    cell(m).and_then(|c| c.gateway_s_per_gb).map_or(format!("{:>w$}", "—"), |v| format!("{v:>w$.2}"))
                })
                .collect();
            let share = cell(Mode::Adaptive).map_or("—".into(), |c| format!("{:.0} %", c.compressed_share * 100.0));
            println!("{:<11} {:<8} | {} | {} | {:>9}", link.name(), corpus.name(), g.join(" "), cpu.join(" "), share);
        }
    }
    println!();
    let mut all = vec![("adaptive", &r.targets)];
    if let Some(t) = &r.targets_link {
        all.push(("adaptive-link", t));
    }
    for (who, t) in all.iter().flat_map(|(w, t)| [(w, &t.slow_link_text), (w, &t.fast_link_random), (w, &t.never_worse)]) {
        let verdict = match t.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        println!("[{who}] {}: {verdict}{}", t.goal, t.measured.as_ref().map_or(String::new(), |m| format!(" — {m}")));
    }
    for e in &r.errors {
        println!("error: {e}");
    }
}

/// `esparto-testbed bench ipcomp`.
pub fn main(a: &Args, bin: &std::path::Path) -> Result<ExitCode> {
    let o = Options::from_args(a)?;
    let missing = crate::missing(false);
    if !missing.is_empty() {
        bail!("bench ipcomp needs {}", missing.join(", "));
    }
    crate::clean_up_on_signal("esparto-testbed bench ipcomp")?;
    let r = run(bin, &o, !a.output.json)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print(&r);
    }
    if let Some(dir) = a.save.dir() {
        let path = results::save(dir, "deflate", &results::envelope(results::Kind::IpcompTunnel, &r))?;
        eprintln!("saved {}", path.display());
    }
    Ok(if r.errors.is_empty() && !r.cells.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cell(link: Option<u32>, mode: Mode, corpus: Corpus, mbps: f64, cpu: f64) -> Cell {
        Cell {
            link: Link { mbps: link },
            mode,
            corpus,
            samples: vec![],
            mbps,
            gateway_s_per_gb: Some(cpu),
            compressed_share: 0.0,
        }
    }

    #[test]
    fn targets_are_held_to_the_cells() {
        let cells = vec![
            cell(Some(50), Mode::No, Corpus::Text, 47.0, 10.0),
            cell(Some(50), Mode::Yes, Corpus::Text, 90.0, 20.0),
            cell(Some(50), Mode::Adaptive, Corpus::Text, 95.0, 20.0),
            cell(None, Mode::No, Corpus::Random, 1000.0, 10.0),
            cell(None, Mode::Yes, Corpus::Random, 500.0, 30.0),
            cell(None, Mode::Adaptive, Corpus::Random, 960.0, 10.6),
        ];
        let t = targets(&cells, Mode::Adaptive);
        assert_eq!(t.slow_link_text.met, Some(true), "{t:?}");
        assert_eq!(t.fast_link_random.met, Some(false), "CPU 6 % over: {t:?}");
        assert_eq!(t.never_worse.met, Some(true), "{t:?}");
        let mut worse = cells.clone();
        worse[2].mbps = 80.0;
        let t = targets(&worse, Mode::Adaptive);
        assert_eq!((t.slow_link_text.met, t.never_worse.met), (Some(false), Some(false)));
        assert!(t.never_worse.measured.unwrap().contains("50 Mbit/s, text"));
        // Adaptive-link on an unshaped link is adaptive.
        let mut with_link = cells.clone();
        with_link.push(cell(Some(50), Mode::AdaptiveLink, Corpus::Text, 100.0, 20.0));
        let t = targets(&with_link, Mode::AdaptiveLink);
        assert_eq!((t.slow_link_text.met, t.fast_link_random.met, t.never_worse.met), (Some(true), Some(false), Some(true)));
        let none = targets(&[], Mode::Adaptive);
        assert_eq!((none.slow_link_text.met, none.fast_link_random.met, none.never_worse.met), (None, None, None));
    }

    #[test]
    fn links_and_modes_parse() {
        assert_eq!(Link::parse("50").unwrap().name(), "50 Mbit/s");
        assert_eq!(Link::parse("1000").unwrap().name(), "1 Gbit/s");
        assert_eq!(Link::parse("unshaped").unwrap().mbps, None);
        assert!(Link::parse("fast").is_err() && Link::parse("0.5").is_err());
        assert_eq!(Mode::parse("adaptive").unwrap(), Mode::Adaptive);
        assert!(Mode::parse("maybe").is_err());
        assert_eq!(Mode::No.config(), None);
    }

    #[test]
    fn a_file_is_its_own_corpus() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let opts = |args: &[&str]| {
            let cli = <Cli as clap::Parser>::try_parse_from(std::iter::once("ipcomp").chain(args.iter().copied())).unwrap();
            Options::from_args(&cli.a).unwrap()
        };
        let o = opts(&["--file", "/srv/sample.html"]);
        assert_eq!(o.corpora, [Corpus::File]);
        assert_eq!(o.file.as_deref(), Some(std::path::Path::new("/srv/sample.html")));
        let o = opts(&["--corpora", "text,random", "--file", "x"]);
        assert_eq!(o.corpora, [Corpus::Text, Corpus::Random, Corpus::File]);
        assert_eq!(opts(&[]).corpora, Corpus::ALL);
        assert_eq!(opts(&[]).file, None);
    }
}
