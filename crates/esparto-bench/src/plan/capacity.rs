//! `esparto plan capacity`: the cores a link of C Mbit/s needs, per suite,
//! for a traffic mix — the FreeS/WAN planning table ("MHz needed = link
//! Mbit/s × 25") made exact from this machine's own measurements.
//!
//! A link of C Mbit/s each way means every packet sent is encapsulated and
//! every packet received decapsulated: per packet, one ESP round trip. So
//!
//! ```text
//! cores = C × 10⁶ / 8 / mean packet bytes × cost per packet (cycles) / clock (Hz)
//! ```
//!
//! with two measured costs, side by side:
//!
//! - **in process** (`esparto bench dataplane`): cycles of one ESP round
//!   trip on one core, by packet size — the ESP code alone, no kernel I/O,
//!   a floor the gateway never reaches;
//! - **end to end** (`esparto-testbed bench tunnel`): the two gateway
//!   processes' CPU seconds per GB at the zero-loss rate of each size
//!   (gw-west encapsulates what gw-east decapsulates: a round trip's work
//!   per packet), and per GB of TCP. The kernel's softirq forwarding is not
//!   in it, and at rates below the zero-loss rate batches are smaller and a
//!   packet costs more.
//!
//! The mix's mean cost is the weighted mean of the cost at each of its sizes
//! ([`super::curve`], interpolated between measured sizes). Cycles are
//! counted by the cycle counter at the rate printed with them (the TSC's
//! reference clock, which the cores' actual clock may exceed). A cell is
//! marked where it goes beyond what was measured: more cores than the
//! measurement ran on (taken to scale linearly), or, end to end, a rate
//! above what the test bed carried.
//!
//! `--tunnels N` adds what N active tunnels cost a packet (its SA state
//! out of cache), from the key-agility measurement ([`super::agility`]).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::curve::{Curve, Point, Shape};
use super::{Common, thousands};
use crate::bench::dataplane::IMIX;
use crate::results::{DataplaneData, Loaded, TunnelData};

/// The link rates of the table, Mbit/s each way (`--mbps` adds one).
pub const LINKS_MBPS: [f64; 6] = [10.0, 100.0, 1_000.0, 10_000.0, 40_000.0, 100_000.0];

/// Sizes a histogram may hold: an IPv4 header to a jumbo frame.
const SIZES: std::ops::RangeInclusive<usize> = 20..=9000;

/// The command line of `esparto plan capacity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Traffic mix: "imix" (7 × 64, 4 × 576, 1 × 1420 B), the default.
    #[arg(long, conflicts_with_all = ["size", "histogram"])]
    pub mix: Option<String>,
    /// Every packet this many bytes (inner IP packet).
    #[arg(long, conflicts_with = "histogram",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(*SIZES.start() as u64..=*SIZES.end() as u64))]
    pub size: Option<usize>,
    /// A packet-size histogram: one "SIZE COUNT" per line (inner IP bytes; "#" starts a comment).
    #[arg(long, value_name = "FILE")]
    pub histogram: Option<PathBuf>,
    /// A link of this many Mbit/s each way, beside the table's.
    #[arg(long, value_name = "MBPS")]
    pub mbps: Option<f64>,
    /// Active tunnels: add what switching between this many SAs costs a packet, from the saved
    /// key-agility measurement (`esparto bench dataplane --sas 1,100,10000,100000 --save`).
    #[arg(long, value_name = "N")]
    pub tunnels: Option<usize>,
    /// Only these suites, comma separated (default: every suite measured).
    #[arg(long, value_delimiter = ',')]
    pub suite: Vec<String>,
    /// Where the measurements are, and how to print.
    #[command(flatten)]
    pub common: Common,
}

/// Packet sizes and their weights.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mix {
    /// "imix", "1420 B", or the histogram's file name.
    pub name: String,
    /// (size, weight), weights > 0.
    pub sizes: Vec<(usize, f64)>,
}

impl Mix {
    /// The simple IMIX `esparto bench dataplane` measures.
    pub fn imix() -> Self {
        let mut sizes: Vec<(usize, f64)> = Vec::new();
        for s in IMIX {
            match sizes.iter_mut().find(|(x, _)| *x == s) {
                Some((_, w)) => *w += 1.0,
                None => sizes.push((s, 1.0)),
            }
        }
        Self { name: "imix".into(), sizes }
    }

    /// Every packet `size` bytes.
    pub fn fixed(size: usize) -> Self {
        Self { name: format!("{size} B"), sizes: vec![(size, 1.0)] }
    }

    /// Parses a histogram: "SIZE COUNT" per line (whitespace or a comma
    /// between), "#" comments, blank lines; sizes may repeat (summed).
    pub fn parse_histogram(name: &str, text: &str) -> Result<Self, String> {
        let mut sizes: Vec<(usize, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let fields: Vec<&str> =
                line.split(|c: char| c == ',' || c.is_whitespace()).filter(|f| !f.is_empty()).collect();
            let at = |m: String| format!("{name}:{}: {m}", i + 1);
            let [size, count] = fields[..] else {
                return Err(at(format!("expected \"SIZE COUNT\", found {line:?}")));
            };
            let size: usize = size.parse().map_err(|_| at(format!("size {size:?} is not a whole number of bytes")))?;
            if !SIZES.contains(&size) {
                return Err(at(format!("size {size} is outside {}..={} bytes", SIZES.start(), SIZES.end())));
            }
            let count: f64 = count.parse().map_err(|_| at(format!("count {count:?} is not a number")))?;
            if !(count.is_finite() && count >= 0.0) {
                return Err(at(format!("count {count} is not a non-negative number")));
            }
            match sizes.iter_mut().find(|(s, _)| *s == size) {
                Some((_, w)) => *w += count,
                None => sizes.push((size, count)),
            }
        }
        sizes.retain(|(_, w)| *w > 0.0);
        if sizes.is_empty() {
            return Err(format!("{name}: no packets in the histogram"));
        }
        sizes.sort_by_key(|(s, _)| *s);
        Ok(Self { name: name.into(), sizes })
    }

    fn total_weight(&self) -> f64 {
        self.sizes.iter().map(|(_, w)| w).sum()
    }

    /// Mean packet size, bytes.
    pub fn mean_bytes(&self) -> f64 {
        self.sizes.iter().map(|(s, w)| *s as f64 * w).sum::<f64>() / self.total_weight()
    }

    /// Mean of `f(size)` over packets.
    fn mean_of(&self, mut f: impl FnMut(usize) -> f64) -> f64 {
        self.sizes.iter().map(|(s, w)| f(*s) * w).sum::<f64>() / self.total_weight()
    }

    /// "7 × 64, 4 × 576, 1 × 1420 B" (shortened for long histograms).
    pub fn describe(&self) -> String {
        const SHOWN: usize = 6;
        let parts: Vec<String> = self.sizes.iter().take(SHOWN).map(|(s, w)| format!("{} × {s}", trim(*w))).collect();
        let more = if self.sizes.len() > SHOWN { format!(", … ({} sizes)", self.sizes.len()) } else { String::new() };
        format!("{}{more} B; mean {:.1} B", parts.join(", "), self.mean_bytes())
    }
}

fn trim(w: f64) -> String {
    if w.fract() == 0.0 { format!("{w:.0}") } else { format!("{w}") }
}

/// The cores one link rate needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkCores {
    /// Mbit/s each way.
    pub mbps: f64,
    /// Cores at the measured clock.
    pub cores: f64,
    /// The same in MHz of that clock.
    pub mhz: f64,
    /// Beyond what was measured (see the row's notes).
    pub extrapolated: bool,
}

/// One measurement's row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The suite.
    pub suite: String,
    /// "ESP in process", "end to end, UDP", "end to end, TCP 4 streams".
    pub measurement: String,
    /// The file and date.
    pub from: String,
    /// The clock the cycles are counted at, Hz.
    pub clock_hz: f64,
    /// Mean cost of a packet of the mix (one round trip), cycles.
    pub cycles_per_packet: f64,
    /// The same per byte.
    pub cycles_per_byte: f64,
    /// MHz per Mbit/s each way (FreeS/WAN's factor, 25 in 2002).
    pub mhz_per_mbps: f64,
    /// Cores per link rate.
    pub links: Vec<LinkCores>,
    /// Where the figures go beyond the measurement, and other caveats.
    pub notes: Vec<String>,
}

/// The cost of the mix from a curve of cost per packet by size; notes
/// where the mix leaves the measured sizes.
fn mix_cost(curve: &Curve, mix: &Mix, notes: &mut Vec<String>) -> f64 {
    let mut outside = Vec::new();
    let mean = mix.mean_of(|s| {
        let e = curve.at(s);
        if e.source.extrapolated() {
            outside.push(s);
        }
        e.value
    });
    if !outside.is_empty() {
        let sizes = curve.sizes();
        notes.push(format!(
            "sizes {} outside the measured {}–{} B: cost extrapolated",
            outside.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
            sizes[0],
            sizes[sizes.len() - 1]
        ));
    }
    mean
}

/// Cores for each link rate, at `cycles_per_packet` and `clock_hz`;
/// `beyond(mbps, cores)` says whether a cell leaves the measurement.
fn cores_per_link(
    mbps: &[f64],
    mix_bytes: f64,
    cycles_per_packet: f64,
    clock_hz: f64,
    beyond: impl Fn(f64, f64) -> bool,
) -> Vec<LinkCores> {
    mbps.iter()
        .map(|&m| {
            let cycles = m * 1e6 / 8.0 / mix_bytes * cycles_per_packet;
            let cores = cycles / clock_hz;
            LinkCores { mbps: m, cores, mhz: cycles / 1e6, extrapolated: beyond(m, cores) }
        })
        .collect()
}

/// What a row measured and where: suite, measurement, file, clock.
struct Head<'a> {
    suite: &'a str,
    measurement: String,
    from: String,
    clock_hz: f64,
}

fn row(head: Head<'_>, mix: &Mix, cpp: f64, links: Vec<LinkCores>, notes: Vec<String>) -> Row {
    let cpb = cpp / mix.mean_bytes();
    Row {
        suite: head.suite.into(),
        measurement: head.measurement,
        from: head.from,
        clock_hz: head.clock_hz,
        cycles_per_packet: cpp,
        cycles_per_byte: cpb,
        mhz_per_mbps: cpb / 8.0,
        links,
        notes,
    }
}

/// The in-process row of one suite.
pub fn in_process(d: &Loaded<DataplaneData>, mix: &Mix, mbps: &[f64]) -> Option<Row> {
    let data = &d.saved.data;
    let clock = d.saved.clock_hz;
    let mut notes = Vec::new();
    let imix_row = data.rows.iter().find(|r| r.size == "imix");
    let cpp = match imix_row {
        Some(r) if mix.name == "imix" => r.cycles_per_byte * r.bytes,
        _ => {
            let points = data.rows.iter().filter_map(|r| {
                let size = r.size.parse().ok()?;
                Some(Point { size, value: r.cycles_per_byte * r.bytes, lower_bound: false })
            });
            let curve = Curve::new(points, Shape::Cost)?;
            mix_cost(&curve, mix, &mut notes)
        }
    };
    let scaling = crate::bench::median(&data.rows.iter().map(|r| r.scaling).collect::<Vec<_>>());
    let workers = data.workers;
    let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |_, cores| cores > workers as f64);
    if links.iter().any(|l| l.extrapolated) {
        notes.push(format!(
            "*: more than the {workers} cores measured: assumes every added core carries what one does (measured: {workers} workers {scaling:.2} × one)"
        ));
    }
    notes.push("ESP code alone, no kernel I/O: a floor the gateway does not reach".into());
    let head = Head { suite: &data.suite, measurement: "ESP in process".into(), from: d.provenance(), clock_hz: clock };
    Some(row(head, mix, cpp, links, notes))
}

/// The end-to-end rows: UDP by size for the mix, and each TCP figure.
pub fn end_to_end(t: &Loaded<TunnelData>, mix: &Mix, mbps: &[f64]) -> Vec<Row> {
    let data = &t.saved.data;
    let clock = t.saved.clock_hz;
    let workers = data.workers as f64;
    let mut rows = Vec::new();
    let common = "the gateway processes' CPU (both ends of a packet's way), the kernel's forwarding not included";
    // CPU seconds per packet at each size, at the zero-loss rate.
    let points = data.zero_loss.iter().filter_map(|z| {
        let s = z.gateway_s_per_gb?;
        (z.pps > 0.0).then(|| Point { size: z.ip_size, value: s * z.ip_size as f64 / 1e9 * clock, lower_bound: false })
    });
    if let Some(curve) = Curve::new(points, Shape::Cost) {
        let mut notes = Vec::new();
        let cpp = mix_cost(&curve, mix, &mut notes);
        // What the test bed carried at the mix's sizes, Mbit/s.
        let rates = super::voip::zero_loss_curve(data);
        let carried = rates.map_or(0.0, |r| mix.mean_of(|s| r.at(s).value) * mix.mean_bytes() * 8.0 / 1e6);
        let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |m, cores| m > carried || cores > workers);
        if links.iter().any(|l| l.extrapolated) {
            notes.push(format!(
                "*: beyond the measurement ({} Mbit/s of this mix on {} workers per gateway): assumes the cost per packet holds",
                thousands(carried),
                data.workers
            ));
        }
        notes.push(format!("{common}; at the zero-loss rate (lower rates batch less and cost more per packet)"));
        let head =
            Head { suite: &data.suite, measurement: "end to end, UDP".into(), from: t.provenance(), clock_hz: clock };
        rows.push(row(head, mix, cpp, links, notes));
    }
    for tcp in &data.tcp {
        let Some(s) = tcp.gateway_s_per_gb else { continue };
        // TCP moves in TSO/GRO super-packets: its cost is per byte, whatever the mix.
        let cpp = s / 1e9 * clock * mix.mean_bytes();
        let links = cores_per_link(mbps, mix.mean_bytes(), cpp, clock, |m, cores| m > tcp.mbps || cores > workers);
        let mut notes = Vec::new();
        if links.iter().any(|l| l.extrapolated) {
            notes.push(format!(
                "*: beyond the measured {} Mbit/s: assumes the cost per byte holds",
                thousands(tcp.mbps)
            ));
        }
        notes.push(format!("{common}; TCP in TSO/GRO super-packets, per byte: the mix does not apply"));
        let streams = if tcp.streams == 1 { "1 stream".to_string() } else { format!("{} streams", tcp.streams) };
        let head = Head {
            suite: &data.suite,
            measurement: format!("end to end, TCP {streams}"),
            from: t.provenance(),
            clock_hz: clock,
        };
        rows.push(row(head, mix, cpp, links, notes));
    }
    rows
}

/// The whole plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The mix.
    pub mix: Mix,
    /// Link rates, Mbit/s each way.
    pub links_mbps: Vec<f64>,
    /// One per measurement.
    pub rows: Vec<Row>,
    /// About the whole plan.
    pub notes: Vec<String>,
    /// Results files set aside.
    pub ignored: Vec<crate::results::Ignored>,
}

/// Three significant digits.
fn sig3(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    if x >= 1000.0 { thousands(x) } else { format!("{x:.digits$}") }
}

/// The plan as text.
pub fn render(p: &Plan) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "esparto plan capacity: mix {} ({}); a link of C Mbit/s each way: every packet sent encapsulated, every packet received decapsulated",
        p.mix.name,
        p.mix.describe()
    );
    for (i, r) in p.rows.iter().enumerate() {
        let _ = writeln!(o, "[{}] {}: {}, clock {:.2} GHz", i + 1, r.measurement, r.from, r.clock_hz / 1e9);
    }
    if !p.rows.is_empty() {
        let _ = writeln!(o);
        let mut head = format!("{:<42} {:>9} {:>8}", "suite, measurement", "cycles/B", "MHz per");
        for m in &p.links_mbps {
            let _ = write!(head, " {:>9}", thousands(*m));
        }
        let _ = writeln!(o, "{head}");
        let _ = writeln!(o, "{:<42} {:>9} {:>8}  cores for C Mbit/s each way:", "", "(mix)", "Mbit/s");
        for (i, r) in p.rows.iter().enumerate() {
            let label = format!("{}, {} [{}]", r.suite, r.measurement, i + 1);
            let _ = write!(o, "{label:<42} {:>9} {:>8}", sig3(r.cycles_per_byte), sig3(r.mhz_per_mbps));
            for l in &r.links {
                let cell = format!("{}{}", sig3(l.cores), if l.extrapolated { "*" } else { "" });
                let _ = write!(o, " {cell:>9}");
            }
            let _ = writeln!(o);
        }
        let _ = writeln!(o);
        for (i, r) in p.rows.iter().enumerate() {
            for n in &r.notes {
                let _ = writeln!(o, "[{}] {n}", i + 1);
            }
        }
    }
    for n in &p.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

/// `esparto plan capacity`.
pub fn main(a: &Args) -> Result<ExitCode> {
    let mix = match (&a.mix, a.size, &a.histogram) {
        (Some(m), _, _) if m.eq_ignore_ascii_case("imix") => Mix::imix(),
        (Some(m), _, _) => bail!("unknown mix '{m}'; known: imix (or --size N, --histogram FILE)"),
        (None, Some(n), _) => Mix::fixed(n),
        (None, None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Mix::parse_histogram(&path.display().to_string(), &text).map_err(anyhow::Error::msg)?
        }
        (None, None, None) => Mix::imix(),
    };
    let suites = a.suite.iter().map(|s| super::parse_suite(s)).collect::<Result<Vec<_>>>()?;
    let mut mbps = LINKS_MBPS.to_vec();
    if let Some(m) = a.mbps {
        if !(m.is_finite() && m > 0.0) {
            bail!("--mbps must be a positive number of Mbit/s");
        }
        if !mbps.contains(&m) {
            mbps.push(m);
        }
    }
    let calibrate_suite = suites.first().copied().unwrap_or(super::voip::DEFAULT_SUITE);
    let found = super::load(&a.common, calibrate_suite).context("reading the saved results")?;
    let wanted = |s: &str| suites.is_empty() || suites.iter().any(|x| x.name() == s);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for d in found.newest_dataplane_per_suite() {
        if wanted(&d.saved.data.suite) {
            rows.extend(in_process(d, &mix, &mbps));
        }
    }
    match found.newest_tunnel() {
        Some(t) if wanted(&t.saved.data.suite) => rows.extend(end_to_end(t, &mix, &mbps)),
        Some(t) => notes.push(format!(
            "the end-to-end measurement {} is of {}, a suite not asked for",
            t.path.display(),
            t.saved.data.suite
        )),
        None => notes.push("no end-to-end measurement for this machine (`esparto-testbed bench tunnel --save`)".into()),
    }
    if let Some(n) = a.tunnels {
        if n == 0 {
            bail!("--tunnels must be at least 1");
        }
        let mut without = Vec::new();
        for r in &mut rows {
            match found.newest_agility(&r.suite) {
                Some(d) => super::agility::apply(r, d, &mix, n),
                None => without.push(r.suite.clone()),
            }
        }
        without.dedup();
        for s in without {
            notes.push(format!(
                "--tunnels {n}: no key-agility measurement of {s} on this machine (`esparto bench dataplane --suite {s} \
                 --sas 1,100,10000,100000 --sa-mix zipf --save`): its rows are for a few tunnels"
            ));
        }
    }
    for s in &suites {
        if !rows.iter().any(|r| r.suite == s.name()) {
            notes.push(format!("{s}: not measured on this machine (`esparto bench dataplane --suite {s} --save`)"));
        }
    }
    if rows.is_empty() {
        notes.push(super::how_to_measure(&found));
    }
    let p = Plan { mix, links_mbps: mbps, rows, notes, ignored: found.ignored.clone() };
    if a.common.output.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}", render(&p));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::results::fixtures::{dataplane_data, row as dp_row, tunnel_data};
    use crate::results::{Kind, TcpThroughput, envelope};

    fn loaded<T>(kind: Kind, data: T) -> Loaded<T> {
        Loaded { path: PathBuf::from(format!("/results/{kind}.json")), saved: envelope(kind, data) }
    }

    #[test]
    fn mixes() {
        let imix = Mix::imix();
        assert_eq!(imix.sizes, [(64, 7.0), (576, 4.0), (1420, 1.0)]);
        assert!((imix.mean_bytes() - (7.0 * 64.0 + 4.0 * 576.0 + 1420.0) / 12.0).abs() < 1e-9);
        assert_eq!(imix.describe(), "7 × 64, 4 × 576, 1 × 1420 B; mean 347.7 B");
        let h = Mix::parse_histogram("h.txt", "# size count\n64 7\n576,4\n\n1420 1  # big\n64 0\n").unwrap();
        assert_eq!(h.sizes, imix.sizes);
        for (bad, want) in [
            ("64", "expected \"SIZE COUNT\""),
            ("64 1 2", "expected"),
            ("x 1", "not a whole number"),
            ("10 1", "outside 20..=9000"),
            ("64 -1", "not a non-negative number"),
            ("64 nan", "not a non-negative number"),
            ("# nothing\n64 0", "no packets"),
        ] {
            let e = Mix::parse_histogram("h.txt", bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
        assert!(Mix::parse_histogram("h.txt", "1 x\n").unwrap_err().starts_with("h.txt:1: "));
    }

    fn agility_row(size: usize, sas: usize, ratio: f64, mpps_1: f64) -> crate::bench::dataplane::AgilityRow {
        crate::bench::dataplane::AgilityRow {
            size,
            sas,
            mix: crate::bench::dataplane::SaMix::Zipf,
            workers: 1,
            suite: "aes256gcm16".into(),
            mpps: mpps_1 * ratio,
            gbps: 0.0,
            mpps_1,
            ratio,
            packets: 1,
            sas_used: sas,
            out_bytes_per_sa: None,
            in_bytes_per_sa: None,
            out_heap_per_sa: None,
            in_heap_per_sa: None,
            prefetch: true,
        }
    }

    /// `--tunnels`: with one SA a round trip takes 1,000 cycles (1 Mpps at
    /// 1 GHz); at 100,000 SAs the rate is half, so a packet costs 1,000
    /// cycles more; at 10,000 a quarter less, so a third more.
    #[test]
    fn tunnels_add_the_measured_cost_of_cold_sa_state() {
        let mut data = dataplane_data("aes256gcm16");
        data.rows = vec![dp_row(64, 20.0), dp_row(1420, 20.0)];
        data.workers = 1;
        let mut d = loaded(Kind::Dataplane, data);
        d.saved.clock_hz = 1e9;
        let rows = vec![
            agility_row(64, 100, 1.02, 1.0),
            agility_row(64, 10_000, 0.75, 1.0),
            agility_row(64, 100_000, 0.5, 1.0),
        ];
        let agility = crate::results::AgilityData { suite: "aes256gcm16".into(), workers: 1, seconds: 1.0, runs: 5, rows };
        let mut a = loaded(Kind::Agility, agility);
        a.saved.clock_hz = 1e9;
        let mix = Mix::fixed(64);
        let base = in_process(&d, &mix, &LINKS_MBPS).unwrap();
        for (tunnels, extra, beyond) in [(1, 0.0, false), (100, 0.0, false), (10_000, 1000.0 / 3.0, false), (100_000, 1000.0, false), (1_000_000, 1000.0, true)] {
            let mut r = base.clone();
            crate::plan::agility::apply(&mut r, &a, &mix, tunnels);
            assert!((r.cycles_per_packet - (base.cycles_per_packet + extra)).abs() < 1e-6, "{tunnels}: {}", r.cycles_per_packet);
            let scale = r.cycles_per_packet / base.cycles_per_packet;
            assert!((r.links[2].cores - base.links[2].cores * scale).abs() < 1e-9);
            assert!(r.notes.iter().any(|n| n.contains("key-agility measurement /results/agility.json")), "{:?}", r.notes);
            assert_eq!(r.notes.iter().any(|n| n.contains("more than the most SAs measured")), beyond, "{tunnels}");
            assert_eq!(r.links[0].extrapolated, beyond);
        }
        // A size outside the measured ones is said.
        let mut r = in_process(&d, &Mix::fixed(1420), &LINKS_MBPS).unwrap();
        crate::plan::agility::apply(&mut r, &a, &Mix::fixed(1420), 100_000);
        assert!(r.notes.iter().any(|n| n.contains("outside the key-agility measurement")), "{:?}", r.notes);
    }

    /// FreeS/WAN's rule, exactly: 140 cycles per byte at a given clock make
    /// C × 140 / 8 MHz for C Mbit/s.
    #[test]
    fn freeswan_rule() {
        let mut data = dataplane_data("aes256gcm16");
        data.rows = vec![dp_row(64, 140.0), dp_row(1420, 140.0)];
        data.workers = 1;
        let mut d = loaded(Kind::Dataplane, data);
        d.saved.clock_hz = 1e9;
        let r = in_process(&d, &Mix::fixed(1000), &LINKS_MBPS).unwrap();
        assert!((r.cycles_per_byte - 140.0).abs() < 1e-9);
        assert!((r.mhz_per_mbps - 17.5).abs() < 1e-9);
        let l10 = r.links[0];
        assert!((l10.mhz - 175.0).abs() < 1e-6 && (l10.cores - 0.175).abs() < 1e-9, "{l10:?}");
        assert!(!l10.extrapolated);
        // 100 Mbit/s: 1,750 MHz, more than the one core measured.
        assert!(r.links[1].extrapolated);
        assert!(r.notes.iter().any(|n| n.contains("more than the 1 cores measured")), "{:?}", r.notes);
        assert!(r.from.contains("/results/dataplane.json"));
    }

    #[test]
    fn the_imix_row_is_used_for_imix_and_sizes_outside_are_said() {
        let mut data = dataplane_data("aes256gcm16");
        let mut imix = dp_row(347, 3.0);
        imix.size = "imix".into();
        imix.bytes = Mix::imix().mean_bytes();
        data.rows.push(imix);
        let d = loaded(Kind::Dataplane, data);
        let r = in_process(&d, &Mix::imix(), &LINKS_MBPS).unwrap();
        assert!((r.cycles_per_byte - 3.0).abs() < 1e-9, "{r:?}");
        let r = in_process(&d, &Mix::fixed(40), &LINKS_MBPS).unwrap();
        assert!(r.notes.iter().any(|n| n.contains("sizes 40 outside the measured 64–1420 B")), "{:?}", r.notes);
        // 40 B costs what 64 B does (12.88 cycles per byte × 64).
        assert!((r.cycles_per_packet - 12.88 * 64.0).abs() < 1e-6);
    }

    #[test]
    fn end_to_end_rows_from_cpu_per_gb() {
        // 10 s per GB at 1,000 and 2,000 pps: 10 ns per byte, 26 cycles per byte at 2.6 GHz.
        let mut data = tunnel_data(&[(64, 1_000.0), (1400, 2_000.0)]);
        data.tcp = vec![TcpThroughput { streams: 4, mbps: 5_000.0, gateway_s_per_gb: Some(2.0) }];
        let mut t = loaded(Kind::Tunnel, data);
        t.saved.clock_hz = 2.6e9;
        let rows = end_to_end(&t, &Mix::fixed(1400), &[1.0, 100.0]);
        assert_eq!(rows.len(), 2);
        let udp = &rows[0];
        assert!((udp.cycles_per_byte - 26.0).abs() < 1e-9, "{udp:?}");
        // 1 Mbit/s = 125,000 B/s × 10 ns = 0.125 % of a core; 2,000 pps × 1,400 B = 22.4 Mbit/s carried.
        assert!((udp.links[0].cores - 0.00125).abs() < 1e-12);
        assert!(!udp.links[0].extrapolated && udp.links[1].extrapolated);
        let tcp = &rows[1];
        assert_eq!(tcp.measurement, "end to end, TCP 4 streams");
        assert!((tcp.cycles_per_byte - 5.2).abs() < 1e-9);
        assert!(!tcp.links[1].extrapolated);
        let text =
            render(&Plan { mix: Mix::fixed(1400), links_mbps: vec![1.0, 100.0], rows, notes: vec![], ignored: vec![] });
        assert!(text.contains("[1] end to end, UDP: /results/tunnel.json"), "{text}");
        assert!(text.contains("0.00125 ") && text.contains('*'), "{text}");
    }

    #[test]
    fn significant_digits() {
        assert_eq!(sig3(0.00141), "0.00141");
        assert_eq!(sig3(1.413), "1.41");
        assert_eq!(sig3(14.13), "14.1");
        assert_eq!(sig3(141.3), "141");
        assert_eq!(sig3(14_130.0), "14,130");
    }
}
