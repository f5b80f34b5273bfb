//! The command line: `esparto <command>`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use esparto_crypto::EspSuite;

use crate::bench::dataplane;

/// Esparto: a site-to-site IPsec gateway in userspace.
#[derive(Debug, Parser)]
#[command(name = "esparto", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Measure Esparto.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// The demonstration (for now: the data-plane benchmark on the default suite).
    Demo,
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// In-process ESP throughput against the raw cipher, by packet size and worker count.
    Dataplane(DataplaneArgs),
}

#[derive(Debug, Args)]
struct DataplaneArgs {
    /// ESP suite in strongSwan syntax: aes256gcm16, aes128gcm16, chacha20poly1305, aes256-sha256, …
    #[arg(long, default_value = "aes256gcm16")]
    suite: String,
    /// Inner packet sizes in bytes, comma separated; "imix" for the simple IMIX mix.
    #[arg(long, default_value = "64,128,256,512,1024,1420,imix", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Worker threads (default: the CPUs this process may use).
    #[arg(long)]
    workers: Option<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("esparto: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Bench(BenchCmd::Dataplane(a)) => bench_dataplane(a),
        Cmd::Demo => bench_dataplane(DataplaneArgs {
            suite: "aes256gcm16".into(),
            sizes: ["64", "512", "1420", "imix"].map(String::from).to_vec(),
            workers: None,
            seconds: 0.5,
            runs: 3,
            json: false,
        }),
    }
}

fn default_workers() -> usize {
    esparto_io::cpu::allowed_cpus().map(|c| c.len()).unwrap_or(1).max(1)
}

fn bench_dataplane(a: DataplaneArgs) -> Result<ExitCode> {
    let suite = EspSuite::from_proposal(&a.suite)
        .with_context(|| format!("unknown ESP suite '{}' (try aes256gcm16, aes128gcm16, chacha20poly1305, aes256-sha256)", a.suite))?;
    let sizes = a.sizes.iter().map(|s| dataplane::Size::parse(s)).collect::<Result<Vec<_>>>()?;
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        anyhow::bail!("--seconds must be in (0, 600]");
    }
    let workers = a.workers.unwrap_or_else(default_workers);
    if workers == 0 || workers > 1024 {
        anyhow::bail!("--workers must be between 1 and 1024");
    }
    let opts = dataplane::Options { suite, sizes, workers, seconds: a.seconds, runs: a.runs };
    let rows = dataplane::run(&opts)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        dataplane::print_table(&rows);
    }
    Ok(ExitCode::SUCCESS)
}
