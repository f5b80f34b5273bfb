//! The command line: `esparto-testbed <command>`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use esparto_bench::args::{self, Json};

use crate::bench::{ipcomp, metrics, setup, tunnel, voip};

/// Esparto's test bed: two gateways in network namespaces, the demo and the
/// end-to-end benchmarks. The gateways are the `esparto` binary, run as
/// separate processes.
#[derive(Debug, Parser)]
#[command(name = "esparto-testbed", version, about, long_about = None)]
pub struct Cli {
    /// The `esparto` binary to run the gateways with (default: the one next to this executable).
    #[arg(long, global = true, value_name = "PATH")]
    esparto: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Two gateways in network namespaces, IKEv2, ping, iperf3 TCP and UDP, live figures.
    Demo(DemoArgs),
    /// Measure Esparto end to end.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Redraw a benchmark's chart (SVG) from its saved results, without measuring again.
    #[command(subcommand)]
    Plot(crate::plot::Cmd),
}

#[derive(Debug, Args)]
#[command(mut_arg("json", |a| a.help("Print a JSON summary (ping_ok, tcp_mbps, udp_1400_mbps, per-worker packets) instead")))]
struct DemoArgs {
    /// Seconds of each traffic phase (TCP, UDP).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    seconds: u32,
    /// Workers per gateway (default: the CPUs esparto may use).
    #[arg(long, value_parser = args::workers())]
    workers: Option<usize>,
    #[command(flatten)]
    output: Json,
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// End to end through two gateways in namespaces: Esparto vs strongSwan, per-CPU SAs vs one pair.
    Tunnel(tunnel::Args),
    /// Concurrent VoIP calls per codec through two gateways (Esparto vs strongSwan): zero loss, delay, jitter, MOS.
    Voip(voip::Args),
    /// IKE tunnel set-up rate, memory per tunnel, SPI cost and config load scaling (two processes in namespaces).
    Setup(setup::Args),
    /// TCP goodput and gateway CPU through IPComp (no, yes, adaptive) per corpus on a `tc`-shaped WAN link.
    Ipcomp(ipcomp::Args),
    /// A Prometheus scrape of a gateway with 10,000 Child SAs: time, size, the control thread's part.
    Metrics(metrics::Args),
    /// One side of `bench setup` (started by it).
    #[command(hide = true)]
    SetupPeer(setup::PeerArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = dispatch(cli);
    // A signal is being handled: its cleanup ends the process (the failure
    // this thread saw is the cleanup stopping the gateways).
    crate::wait_if_interrupted();
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("esparto-testbed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Demo(a) => demo(a, cli.esparto),
        Cmd::Plot(c) => crate::plot::main(&c),
        Cmd::Bench(BenchCmd::Tunnel(a)) => tunnel::main(&a, &crate::esparto_binary(cli.esparto.as_deref())?),
        Cmd::Bench(BenchCmd::Voip(a)) => voip::main(&a, &crate::esparto_binary(cli.esparto.as_deref())?),
        Cmd::Bench(BenchCmd::Ipcomp(a)) => ipcomp::main(&a, &crate::esparto_binary(cli.esparto.as_deref())?),
        Cmd::Bench(BenchCmd::Setup(a)) => setup::main(&a),
        Cmd::Bench(BenchCmd::SetupPeer(a)) => setup::peer_main(&a),
        Cmd::Bench(BenchCmd::Metrics(a)) => metrics::main(&a, &crate::esparto_binary(cli.esparto.as_deref())?),
    }
}

fn demo(a: DemoArgs, esparto: Option<PathBuf>) -> Result<ExitCode> {
    let bin = crate::esparto_binary(esparto.as_deref())?;
    crate::clean_up_on_signal("esparto-testbed demo")?;
    let summary =
        crate::demo::run(&bin, &crate::demo::Options { seconds: a.seconds, workers: a.workers, json: a.output.json })?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(if summary.ping_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
