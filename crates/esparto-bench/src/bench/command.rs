//! The command lines of `esparto bench dataplane` and `esparto bench
//! ipcomp`: their flags, the checks that refuse a bad value before anything
//! is measured, the table or JSON printed, `--svg` and `--save`.
//!
//! The measuring is [`super::dataplane`]'s and [`super::ipcomp`]'s; this
//! module only turns flags into their options and their rows into output.
//! A `--count` run is for instruction counts (`valgrind --tool=callgrind`),
//! not for planning, so it is never saved.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use clap::builder::RangedU64ValueParser;

use super::corpus::{Corpus, CorpusFile};
use super::{dataplane, ipcomp};
use crate::args::{Json, Save, workers};
use crate::results;

/// `esparto bench`'s commands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// In-process ESP throughput against the raw cipher, by packet size and worker count.
    Dataplane(DataplaneArgs),
    /// IPComp's DEFLATE in process, per corpus and packet size: cycles per byte, ratio, share compressed.
    Ipcomp(IpcompArgs),
}

impl BenchCmd {
    /// Whether the command was asked for JSON (then its errors are JSON too).
    pub fn json(&self) -> bool {
        match self {
            BenchCmd::Dataplane(a) => a.output.json,
            BenchCmd::Ipcomp(a) => a.output.json,
        }
    }

    /// Runs the command.
    pub fn run(self) -> Result<ExitCode> {
        match self {
            BenchCmd::Dataplane(a) => bench_dataplane(a),
            BenchCmd::Ipcomp(a) => bench_ipcomp(a),
        }
    }
}

/// The command line of `esparto bench ipcomp`.
#[derive(Debug, Args)]
pub struct IpcompArgs {
    /// Corpora, comma separated: text, json, records, random [default: all four; with --file: none].
    #[arg(long, value_delimiter = ',')]
    corpora: Vec<String>,
    /// Also measure this file's bytes (a sample of your own traffic) as corpus "file".
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Inner packet sizes in bytes (IP header included), comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = ipcomp::DEFAULT_SIZES)]
    sizes: Vec<usize>,
    /// Seconds per measurement (compress and decompress each).
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = RangedU64ValueParser::<usize>::new().range(1..=MAX_RUNS))]
    runs: usize,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    save: Save,
}

/// The command line of `esparto bench dataplane`.
#[derive(Debug, Args)]
pub struct DataplaneArgs {
    /// ESP suite in strongSwan syntax: aes256gcm16, aes128gcm16, chacha20poly1305, aes256-sha256, …
    #[arg(long, default_value = "aes256gcm16")]
    suite: String,
    /// Inner packet sizes in bytes, comma separated; "imix" for the simple IMIX mix
    /// [default: 64,128,256,512,1024,1420,imix; with --sas: 64,1420].
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Key agility: spread the packets over N active SA pairs per worker (N policies,
    /// groups and inbound SAs), each N measured beside one SA; comma separated.
    #[arg(long, value_delimiter = ',', value_name = "N")]
    sas: Vec<usize>,
    /// With --sas: how packets are spread over the SAs, "round-robin" or "zipf" (Zipf, s = 1).
    #[arg(long, default_value = "round-robin", requires = "sas")]
    sa_mix: String,
    /// With --sas: do not prefetch each packet's SA state ahead in the batch
    /// (to measure what prefetching buys).
    #[arg(long, requires = "sas")]
    no_prefetch: bool,
    /// Worker threads (default: the CPUs this process may use).
    #[arg(long, value_parser = workers())]
    workers: Option<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Exactly this many packets per thread and measurement instead of
    /// --seconds (for instruction counts: `valgrind --tool=callgrind`).
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    output: Json,
    #[command(flatten)]
    save: Save,
    /// With --sas: also draw the rate (Mpps, Gbit/s) against the number of
    /// active SAs, one line per packet size, as an SVG chart into FILE.
    #[arg(long, value_name = "FILE", requires = "sas")]
    svg: Option<PathBuf>,
}

/// Sizes `bench dataplane` measures unless told.
const DEFAULT_SIZES: &str = "64,128,256,512,1024,1420,imix";
/// Sizes `bench dataplane --sas` measures unless told.
const DEFAULT_AGILITY_SIZES: &str = "64,1420";

/// Most `bench ipcomp --runs`.
const MAX_RUNS: u64 = 1000;

fn bench_dataplane(a: DataplaneArgs) -> Result<ExitCode> {
    let suite = crate::plan::parse_suite(&a.suite)?;
    if !a.sas.is_empty() {
        return bench_agility(a, suite);
    }
    let sizes = if a.sizes.is_empty() { DEFAULT_SIZES.split(',').map(str::to_string).collect() } else { a.sizes.clone() };
    let sizes = sizes.iter().map(|s| dataplane::Size::parse(s)).collect::<Result<Vec<_>>>()?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    let workers = a.workers.unwrap_or_else(esparto_io::cpu::default_workers);
    let opts = dataplane::Options { suite, sizes, workers, seconds: a.seconds, runs: a.runs, count: a.count };
    let rows = dataplane::run(&opts)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        dataplane::print_table(&rows);
    }
    if let Some(dir) = a.save.dir() {
        if a.count.is_some() {
            anyhow::bail!("--save: a --count run is for instruction counts, not for planning; not saved");
        }
        let data = results::DataplaneData { suite: suite.name().into(), workers, seconds: a.seconds, runs: a.runs, rows };
        let path = results::save(dir, suite.name(), &results::envelope(results::Kind::Dataplane, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_agility(a: DataplaneArgs, suite: esparto_crypto::EspSuite) -> Result<ExitCode> {
    let sizes = if a.sizes.is_empty() { DEFAULT_AGILITY_SIZES.split(',').map(str::to_string).collect() } else { a.sizes };
    let sizes = sizes
        .iter()
        .map(|s| match dataplane::Size::parse(s)? {
            dataplane::Size::Fixed(n) => Ok(n),
            dataplane::Size::Imix => anyhow::bail!("--sas measures fixed sizes only, not imix"),
        })
        .collect::<Result<Vec<_>>>()?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    if let Some(&n) = a.sas.iter().find(|&&n| n == 0 || n > dataplane::MAX_SAS) {
        anyhow::bail!("--sas {n}: must be between 1 and {}", dataplane::MAX_SAS);
    }
    let workers = a.workers.unwrap_or_else(esparto_io::cpu::default_workers);
    let opts = dataplane::AgilityOptions {
        suite,
        sizes,
        sas: a.sas,
        mix: dataplane::SaMix::parse(&a.sa_mix)?,
        workers,
        seconds: a.seconds,
        runs: a.runs,
        count: a.count,
        prefetch: !a.no_prefetch,
    };
    if let Some(path) = &a.svg {
        svg_writable(path)?;
    }
    let rows = dataplane::run_agility(&opts)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        dataplane::print_agility(&rows);
    }
    if let Some(path) = &a.svg {
        agility_chart(path, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = a.save.dir() {
        if a.count.is_some() {
            anyhow::bail!("--save: a --count run is for instruction counts, not for planning; not saved");
        }
        let data = results::AgilityData { suite: suite.name().into(), workers, seconds: a.seconds, runs: a.runs, rows };
        let path = results::save(dir, suite.name(), &results::envelope(results::Kind::Agility, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails before a measurement, not after, if the chart has nowhere to go.
#[cfg(feature = "svg")]
fn svg_writable(path: &Path) -> Result<()> {
    crate::plot::check_destination(path)
}

#[cfg(not(feature = "svg"))]
fn svg_writable(_: &Path) -> Result<()> {
    anyhow::bail!("--svg: this esparto was built without charts (cargo feature \"svg\")")
}

#[cfg(feature = "svg")]
fn agility_chart(path: &Path, rows: &[dataplane::AgilityRow]) -> Result<()> {
    let Some(first) = rows.first() else { anyhow::bail!("--svg: nothing was measured") };
    let (_, date) = results::now();
    let note = format!(
        "{}, {} worker(s); {}; load average {}; {date}; {}",
        first.suite,
        first.workers,
        results::Machine::this().cpu_model,
        results::load_average(),
        std::env::args().collect::<Vec<_>>().join(" ")
    );
    crate::plot::active_sas(path, "Key agility: ESP rate against active SAs (in process)", &note, &crate::plot::agility_series(rows))
}

#[cfg(not(feature = "svg"))]
fn agility_chart(_: &Path, _: &[dataplane::AgilityRow]) -> Result<()> {
    anyhow::bail!("--svg: this esparto was built without charts (cargo feature \"svg\")")
}

fn bench_ipcomp(a: IpcompArgs) -> Result<ExitCode> {
    let file = a.file.as_deref().map(CorpusFile::read).transpose()?;
    let mut corpora = if a.corpora.is_empty() && file.is_some() {
        Vec::new()
    } else if a.corpora.is_empty() {
        Corpus::ALL.to_vec()
    } else {
        a.corpora.iter().map(|c| Corpus::parse(c)).collect::<Result<Vec<_>>>()?
    };
    if let Some(f) = &file {
        corpora.push(Corpus::File);
        eprintln!("corpus file: {} ({} bytes, repeated as needed)", f.path().display(), f.len());
    }
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    let file_name = file.as_ref().map(|f| f.path().display().to_string());
    let opts = ipcomp::Options { corpora, sizes: a.sizes, seconds: a.seconds, runs: a.runs, file };
    let rows = ipcomp::run(&opts)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        ipcomp::print_table(&rows);
    }
    if let Some(dir) = a.save.dir() {
        let data = results::IpcompData { seconds: a.seconds, runs: a.runs, file: file_name, rows };
        let path = results::save(dir, "deflate", &results::envelope(results::Kind::Ipcomp, data))?;
        eprintln!("saved {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
