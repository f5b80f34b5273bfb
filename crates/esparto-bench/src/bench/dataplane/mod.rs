//! `esparto bench dataplane`: the in-process data-plane benchmark.
//!
//! For each packet size it measures, side by side in one run:
//!
//! - **raw**: the AEAD (or AES-CBC + HMAC) of aws-lc-rs sealing and opening a
//!   buffer of that size, with `workers` threads — the ceiling set by the
//!   cipher itself;
//! - **esp**: the full ESP round trip through two
//!   [`Worker`](esparto_esp::Worker)s — SPD lookup,
//!   the worker's own sub-SA, padding, sequence number, seal; then SAD lookup,
//!   replay check, open, padding check, commit, selector check — with
//!   `workers` threads each owning its own sub-SA, and again with one;
//! - **encap**: encapsulation alone on one core (the inner packet copied into
//!   the buffer each time, as a TUN read would), in packets per second.
//!
//! With `--sas N` it measures key agility instead ([`run_agility`]): the
//! ESP round trip with packets spread over N active SA pairs per worker,
//! beside the same with one SA, and the memory each SA takes.
//!
//! Each figure is the median of `runs` measurements of `seconds` each; the
//! kinds are interleaved within a run so drift on a shared machine hits them
//! alike. Threads are pinned one per CPU. Cycles are TSC reference cycles
//! ([`super::tsc::tsc_hz`]).
//!
//! This module holds the options, the rows and the table; `rig` the loops
//! that drive the data plane and the cipher and the threads they run on;
//! `agility` the key-agility benchmark.

mod agility;
mod rig;

use anyhow::{Context, Result, bail};
use esparto_crypto::EspSuite;
use serde::{Deserialize, Serialize};

pub use agility::{AgilityOptions, AgilityRow, MAX_SAS, MEMORY_MIN_SAS, SaMix, print_agility, run_agility};
use rig::{encap_loop, esp_loop, interleaved_ratio, measure, measure_value, raw_loop};

use super::median;

/// The packet sizes of the "imix" mix: seven small, four medium, one large
/// (the classic simple IMIX, with the large size capped at what fits a
/// 1500-byte path after ESP-in-UDP overhead).
pub const IMIX: [usize; 12] = [64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1420];

/// A packet size to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// Every inner packet this many bytes (IP header included).
    Fixed(usize),
    /// The [`IMIX`] mix.
    Imix,
}

impl Size {
    /// Parses "64" or "imix".
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("imix") {
            return Ok(Size::Imix);
        }
        let n: usize = s.parse().with_context(|| format!("'{s}' is not a packet size or 'imix'"))?;
        if !(40..=9000).contains(&n) {
            bail!("packet size {n} is outside 40..=9000 bytes");
        }
        Ok(Size::Fixed(n))
    }

    fn sizes(self) -> Vec<usize> {
        match self {
            Size::Fixed(n) => vec![n],
            Size::Imix => IMIX.to_vec(),
        }
    }

    /// Mean bytes per packet.
    pub fn mean(self) -> f64 {
        let s = self.sizes();
        s.iter().sum::<usize>() as f64 / s.len() as f64
    }

    fn label(self) -> String {
        match self {
            Size::Fixed(n) => n.to_string(),
            Size::Imix => "imix".into(),
        }
    }
}

/// Options of the benchmark.
#[derive(Debug, Clone)]
pub struct Options {
    /// The ESP suite.
    pub suite: EspSuite,
    /// Sizes to measure.
    pub sizes: Vec<Size>,
    /// Worker threads for the multi-worker figures.
    pub workers: usize,
    /// Length of one measurement.
    pub seconds: f64,
    /// Measurements per figure (the median is reported).
    pub runs: usize,
    /// Run exactly this many packets per thread and measurement instead of
    /// `seconds` (for instruction counting under callgrind).
    pub count: Option<u64>,
}

/// One row of results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// "64" … or "imix".
    pub size: String,
    /// Mean inner packet size in bytes.
    pub bytes: f64,
    /// Worker threads of the multi-worker figures.
    pub workers: usize,
    /// Suite.
    pub suite: String,
    /// Raw cipher seal+open, all workers, Gbit/s of plaintext.
    pub raw_gbps: f64,
    /// Raw cipher round trips per second, all workers, millions.
    pub raw_mpps: f64,
    /// ESP encapsulate+decapsulate, all workers, Gbit/s of inner packets.
    pub esp_gbps: f64,
    /// ESP round trips per second, all workers, millions.
    pub esp_mpps: f64,
    /// ESP round trips per second on one worker, millions.
    pub esp_mpps_1: f64,
    /// ESP encapsulations alone per second on one core, millions.
    pub encap_mpps_1: f64,
    /// Reference cycles per byte of one ESP round trip on one core.
    pub cycles_per_byte: f64,
    /// Reference cycles per byte of one raw seal+open on one core.
    pub raw_cycles_per_byte: f64,
    /// ESP round-trip rate over raw seal+open rate, from alternating chunks
    /// of the two in one thread timed by the cycle counter (the robust figure).
    pub ratio: f64,
    /// `esp_gbps / raw_gbps` from the separate timed runs (noisier).
    pub ratio_separate: f64,
    /// `esp` with `workers` threads over `esp` with one.
    pub scaling: f64,
}

/// Runs the benchmark.
pub fn run(opts: &Options) -> Result<Vec<Row>> {
    let cpus = esparto_io::cpu::allowed_cpus().context("reading the CPU affinity mask")?;
    let hz = super::tsc::tsc_hz();
    let mut rows = Vec::new();
    for &size in &opts.sizes {
        let mut raw_w = Vec::new();
        let mut raw_1 = Vec::new();
        let mut esp_w = Vec::new();
        let mut esp_1 = Vec::new();
        let mut enc_1 = Vec::new();
        let mut ratio_1 = Vec::new();
        for _ in 0..opts.runs.max(1) {
            ratio_1.push(measure_value(opts, &cpus, |k, d| interleaved_ratio(opts.suite, size, k, d))?);
            raw_w.push(measure(opts, &cpus, opts.workers, |k, d| raw_loop(opts.suite, size, k, d))?);
            esp_w.push(measure(opts, &cpus, opts.workers, |k, d| esp_loop(opts.suite, size, k, d))?);
            if opts.workers > 1 {
                raw_1.push(measure(opts, &cpus, 1, |k, d| raw_loop(opts.suite, size, k, d))?);
                esp_1.push(measure(opts, &cpus, 1, |k, d| esp_loop(opts.suite, size, k, d))?);
            }
            enc_1.push(measure(opts, &cpus, 1, |k, d| encap_loop(opts.suite, size, k, d))?);
        }
        if opts.workers == 1 {
            raw_1 = raw_w.clone();
            esp_1 = esp_w.clone();
        }
        let (raw_w, raw_1, esp_w, esp_1, enc_1, ratio_1) =
            (median(&raw_w), median(&raw_1), median(&esp_w), median(&esp_1), median(&enc_1), median(&ratio_1));
        let bytes = size.mean();
        let gbps = |pps: f64| pps * bytes * 8.0 / 1e9;
        rows.push(Row {
            size: size.label(),
            bytes,
            workers: opts.workers,
            suite: opts.suite.name().to_string(),
            raw_gbps: gbps(raw_w),
            raw_mpps: raw_w / 1e6,
            esp_gbps: gbps(esp_w),
            esp_mpps: esp_w / 1e6,
            esp_mpps_1: esp_1 / 1e6,
            encap_mpps_1: enc_1 / 1e6,
            cycles_per_byte: hz / esp_1 / bytes,
            raw_cycles_per_byte: hz / raw_1 / bytes,
            ratio: ratio_1,
            ratio_separate: esp_w / raw_w,
            scaling: esp_w / esp_1,
        });
    }
    Ok(rows)
}

/// Prints the table.
pub fn print_table(rows: &[Row]) {
    let Some(first) = rows.first() else { return };
    println!(
        "esparto bench dataplane: suite {}, {} worker(s), TSC {:.2} GHz{}",
        first.suite,
        first.workers,
        super::tsc::tsc_hz() / 1e9,
        if esparto_io::cpu::HAS_TSC { "" } else { " (no TSC: nanoseconds)" }
    );
    println!(
        "{:>6} {:>10} {:>10} {:>9} {:>8} {:>11} {:>11} {:>9} {:>9} {:>8}",
        "size", "raw Gb/s", "ESP Gb/s", "ESP Mpps", "ESP/raw", "1w RT Mpps", "encap Mpps", "cyc/B", "raw cyc/B", "scaling"
    );
    // ESP/raw comes from alternating chunks of both in one thread (cycle
    // counter); the Gb/s columns from separate timed runs.
    for r in rows {
        println!(
            "{:>6} {:>10.2} {:>10.2} {:>9.3} {:>8.3} {:>11.3} {:>11.3} {:>9.2} {:>9.2} {:>7.2}x",
            r.size,
            r.raw_gbps,
            r.esp_gbps,
            r.esp_mpps,
            r.ratio,
            r.esp_mpps_1,
            r.encap_mpps_1,
            r.cycles_per_byte,
            r.raw_cycles_per_byte,
            r.scaling
        );
    }
    println!(
        "raw = aws-lc-rs seal+open; ESP = encapsulate+decapsulate round trip; RT = round trip; \
         ESP/raw = rates of the two alternating in one thread (cycle counter); \
         encap = encapsulation alone, one core; cyc/B = TSC cycles per inner byte, one core; \
         scaling = ESP with {} workers over one.",
        first.workers
    );
}
