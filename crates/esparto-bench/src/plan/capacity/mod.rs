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
//!
//! This module is the command line and the table; [`mix`] holds the
//! traffic mixes and [`cores`] the rows.

pub mod cores;
pub mod mix;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use esparto_crypto::EspSuite;
use serde::Serialize;

pub use cores::{LinkCores, Row, end_to_end, in_process};
pub use mix::Mix;

use super::{Common, thousands};
use crate::results::{Found, Ignored};

/// The link rates of the table, Mbit/s each way (`--mbps` adds one).
pub const LINKS_MBPS: [f64; 6] = [10.0, 100.0, 1_000.0, 10_000.0, 40_000.0, 100_000.0];

/// The command line of `esparto plan capacity`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Traffic mix: "imix" (7 × 64, 4 × 576, 1 × 1420 B), the default.
    #[arg(long, conflicts_with_all = ["size", "histogram"])]
    pub mix: Option<String>,
    /// Every packet this many bytes (inner IP packet).
    #[arg(long, conflicts_with = "histogram",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(*mix::SIZES.start() as u64..=*mix::SIZES.end() as u64))]
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
    pub ignored: Vec<Ignored>,
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
    let mix = mix_of(a)?;
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
    let (mut rows, mut notes) = measured_rows(&found, &suites, &mix, &mbps);
    if let Some(n) = a.tunnels {
        if n == 0 {
            bail!("--tunnels must be at least 1");
        }
        add_tunnels(&found, &mut rows, &mut notes, &mix, n);
    }
    for s in &suites {
        if !rows.iter().any(|r| r.suite == s.name()) {
            notes.push(format!("{s}: not measured on this machine (`esparto bench dataplane --suite {s} --save`)"));
        }
    }
    // Nothing to plan from: say what to run, and fail, rather than print
    // an empty table.
    if rows.is_empty() {
        bail!("{}", super::how_to_measure(&found));
    }
    let p = Plan { mix, links_mbps: mbps, rows, notes, ignored: found.ignored.clone() };
    if a.common.output.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}", render(&p));
    }
    Ok(ExitCode::SUCCESS)
}

/// The mix `--mix`, `--size` or `--histogram` asks for (IMIX unless told).
fn mix_of(a: &Args) -> Result<Mix> {
    Ok(match (&a.mix, a.size, &a.histogram) {
        (Some(m), _, _) if m.eq_ignore_ascii_case("imix") => Mix::imix(),
        (Some(m), _, _) => bail!("unknown mix '{m}'; known: imix (or --size N, --histogram FILE)"),
        (None, Some(n), _) => Mix::fixed(n),
        (None, None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Mix::parse_histogram(&path.display().to_string(), &text).map_err(anyhow::Error::msg)?
        }
        (None, None, None) => Mix::imix(),
    })
}

/// A row per newest in-process measurement of each suite asked for, and
/// the end-to-end rows; notes where the end-to-end measurement is missing
/// or of another suite.
fn measured_rows(found: &Found, suites: &[EspSuite], mix: &Mix, mbps: &[f64]) -> (Vec<Row>, Vec<String>) {
    let wanted = |s: &str| suites.is_empty() || suites.iter().any(|x| x.name() == s);
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for d in found.newest_dataplane_per_suite() {
        if wanted(&d.saved.data.suite) {
            rows.extend(in_process(d, mix, mbps));
        }
    }
    match found.newest_tunnel() {
        Some(t) if wanted(&t.saved.data.suite) => rows.extend(end_to_end(t, mix, mbps)),
        Some(t) => notes.push(format!(
            "the end-to-end measurement {} is of {}, a suite not asked for",
            t.path.display(),
            t.saved.data.suite
        )),
        None => notes.push("no end-to-end measurement for this machine (`esparto-testbed bench tunnel --save`)".into()),
    }
    (rows, notes)
}

/// `--tunnels N`: what N active tunnels add to each row, from its suite's
/// key-agility measurement; the suites without one are noted.
fn add_tunnels(found: &Found, rows: &mut [Row], notes: &mut Vec<String>, mix: &Mix, n: usize) {
    let mut without = Vec::new();
    for r in rows.iter_mut() {
        match found.newest_agility(&r.suite) {
            Some(d) => super::agility::apply(r, d, mix, n),
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

/// Three significant digits.
fn sig3(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    if x >= 1000.0 { thousands(x) } else { format!("{x:.digits$}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits() {
        assert_eq!(sig3(0.00141), "0.00141");
        assert_eq!(sig3(1.413), "1.41");
        assert_eq!(sig3(14.13), "14.1");
        assert_eq!(sig3(141.3), "141");
        assert_eq!(sig3(14_130.0), "14,130");
    }
}
