//! `esparto-testbed bench setup`: how fast IKE tunnels come up, what each one
//! costs in memory, and whether loading many of them scales linearly.
//!
//! Three measurements, in one run:
//!
//! 1. **Tunnel set-up** ([`tunnels`]): one Esparto process initiates
//!    `--tunnels` IKE SAs (default 10,000), each with its first Child SA,
//!    to another, keeping `--concurrency` in flight, over a veth pair
//!    between two network namespaces (or one namespace's loopback), each
//!    process a single-threaded loop pinned to its own core ([`peer`]) —
//!    strongSwan's load-tester, in short. PSK authentication, IKE
//!    `aes256gcm16-prfsha256-x25519`, ESP `aes256gcm16`, NAT-T float to
//!    4500 as the daemon always does. The Child SAs are negotiated and
//!    counted on both sides but **not installed into a data plane**: this
//!    measures the control plane. Reported: time to bring them all up,
//!    tunnels per second (wall clock), tunnels per CPU-second of each
//!    process (the "per core" figure, next to the X25519 ceiling measured
//!    in the same run), resident memory per established tunnel on each
//!    side beyond the process baseline (and heap per tunnel in a
//!    `count-alloc` build, [`heap`]), retransmissions, drops and failures,
//!    which must all be zero.
//! 2. **SPI cost** ([`micro`]): nanoseconds per unpredictable IKE SPI and
//!    per steering ESP SPI.
//! 3. **Config load scaling** ([`config_load`]): generated hub
//!    configurations of 1,000 … 10,000 connections, loaded and added to an
//!    IKE endpoint; time per connection for each size, which must stay flat.
//!
//! The figures come from a shared machine: they are as noisy as the load
//! other processes put on it. `docs/BENCHMARKS.md` takes them from a quiet
//! run.

pub mod config_load;
pub mod heap;
pub mod micro;
pub mod peer;
pub mod pki;
pub mod procfs;
pub mod render;
pub mod report;
pub mod tunnels;

pub use render::render;

use std::net::IpAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::builder::RangedU64ValueParser;
use esparto_bench::args::{self, Json};
use serde::Serialize;

use config_load::ConfigLoadRow;
use micro::{SpiCost, X25519Rate};
use peer::{PeerOptions, Role};
use tunnels::{PeerLink, TunnelOptions, TunnelReport};

/// The IKE proposal of the run (strongSwan syntax).
pub const IKE_PROPOSAL: &str = "aes256gcm16-prfsha256-x25519";
/// The ESP proposal of the run.
pub const ESP_PROPOSAL: &str = "aes256gcm16";
/// What the tunnel figures do not include.
pub const NOT_INSTALLED: &str = "Child SAs are negotiated but not installed into a data plane (as strongSwan's load-tester): this measures the IKE control plane";

/// Everything `esparto-testbed bench setup` does.
#[derive(Debug, Clone)]
pub struct Options {
    /// The tunnel run; `None` skips it.
    pub tunnels: Option<TunnelOptions>,
    /// Connection counts for the config load measurement (empty skips it).
    pub config_sizes: Vec<usize>,
    /// Repetitions of each config load (median).
    pub config_runs: usize,
    /// Authentication of the tunnel run (`psk`, `ecdsa-p256`, …).
    pub auth: &'static str,
}

/// How time per connection grows from the smallest size to the largest.
#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    /// Loader and endpoint together.
    pub total: f64,
    /// `config::parse_str` alone.
    pub parse: f64,
    /// Adding to the endpoint alone.
    pub endpoint: f64,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// IKE proposal.
    pub ike_proposal: &'static str,
    /// ESP proposal.
    pub esp_proposal: &'static str,
    /// Authentication.
    pub auth: &'static str,
    /// The caveat on the tunnel figures.
    pub note: &'static str,
    /// Whether heap bytes are counted (`count-alloc` build).
    pub heap_counted: bool,
    /// X25519 keygen+agree per second on the initiator's core, this run.
    pub x25519: X25519Rate,
    /// SPI costs.
    pub spi: SpiCost,
    /// The tunnel run.
    pub tunnels: Option<TunnelReport>,
    /// Config load timings by size.
    pub config_load: Vec<ConfigLoadRow>,
    /// Time per connection at the largest size over that at the smallest
    /// (1.0 = linear; quadratic doubles it with every doubling of size):
    /// loader and endpoint together, and each alone.
    pub config_load_growth: Option<Growth>,
}

impl Report {
    /// Did every part that ran come out clean?
    pub fn ok(&self) -> bool {
        self.tunnels.as_ref().is_none_or(|t| t.clean)
    }
}

/// Run the measurements; `bin` is the `esparto-testbed` binary (for the peers).
pub fn run(bin: &Path, o: &Options) -> Result<Report> {
    // The micro-measurements run on the initiator's core, before the peers.
    let cpu = o.tunnels.as_ref().map(|t| t.cpus.0);
    let workers = o.tunnels.as_ref().map_or(2, |t| t.workers);
    let live = o.tunnels.as_ref().map_or(10_000, |t| t.tunnels);
    let (x25519, spi) = std::thread::scope(|s| {
        s.spawn(|| -> Result<_> {
            if let Some(c) = cpu {
                esparto_io::cpu::pin_current_thread(c)
                    .with_context(|| format!("pinning to CPU {c}"))?;
            }
            let x = micro::x25519_rate(Duration::from_millis(200), 3)?;
            Ok((x, micro::spi_cost(live, workers, 3)))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the micro-measurement thread panicked"))?
    })?;
    let config_load = config_load::measure(&o.config_sizes, o.config_runs)?;
    let config_load_growth = growth(&config_load);
    let tunnels = match &o.tunnels {
        Some(t) => Some(tunnels::run(bin, t)?),
        None => None,
    };
    Ok(Report {
        ike_proposal: IKE_PROPOSAL,
        esp_proposal: ESP_PROPOSAL,
        auth: o.auth,
        note: NOT_INSTALLED,
        heap_counted: heap::live_bytes().is_some(),
        x25519,
        spi,
        tunnels,
        config_load,
        config_load_growth,
    })
}

/// Growth of the time per connection from the first row to the last.
fn growth(rows: &[ConfigLoadRow]) -> Option<Growth> {
    let (a, b) = (rows.first()?, rows.last()?);
    if rows.len() < 2 {
        return None;
    }
    let per = |ms: f64, n: usize| ms / n as f64;
    let ratio = |x: f64, y: f64| if x > 0.0 { y / x } else { f64::NAN };
    Some(Growth {
        total: ratio(a.us_per_connection, b.us_per_connection),
        parse: ratio(
            per(a.parse_ms, a.connections),
            per(b.parse_ms, b.connections),
        ),
        endpoint: ratio(
            per(a.endpoint_ms, a.connections),
            per(b.endpoint_ms, b.connections),
        ),
    })
}

/// `esparto-testbed bench setup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Tunnels to bring up (IKE SA + first Child SA each); 0 skips the tunnel run.
    #[arg(long, default_value_t = 10_000, value_parser = RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    pub tunnels: usize,
    /// IKE SAs in flight at most.
    #[arg(long, default_value_t = 500, value_parser = RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub concurrency: usize,
    /// veth (two namespaces joined by a veth pair) or loopback (one namespace).
    #[arg(long, default_value = "veth")]
    pub topology: PeerLink,
    /// CPUs for the initiator and the responder, e.g. 0,1 (default: the first two this process may use).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Give up on the tunnel run after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// The responder demands a COOKIE (RFC 7296 §2.6) on every IKE_SA_INIT.
    #[arg(long)]
    pub cookies: bool,
    /// Spoke connections (each its own identity, PSK and selectors) both sides load; tunnels
    /// go round-robin over them. 1: every tunnel is an IKE SA of one connection (load-tester).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Connection counts for the config load measurement, comma separated; "none" skips it.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,5000,10000")]
    pub config_sizes: Vec<String>,
    /// Loads of each configuration size (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub config_runs: usize,
    /// Authentication: psk, or certificates (RFC 7427 signatures) with
    /// ecdsa (P-256), ed25519 or rsa (3072 bits, PKCS#1 v1.5).
    #[arg(long, default_value = "psk")]
    pub auth: String,
    /// How to print the report.
    #[command(flatten)]
    pub output: Json,
}

/// `esparto-testbed bench setup-peer` (hidden): one side of the tunnel run.
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// initiator or responder.
    #[arg(long)]
    pub role: String,
    /// Our address.
    #[arg(long)]
    pub local: IpAddr,
    /// The other peer's address.
    #[arg(long)]
    pub remote: IpAddr,
    /// Tunnels to bring up.
    #[arg(long)]
    pub tunnels: usize,
    /// IKE SAs in flight at most.
    #[arg(long)]
    pub concurrency: usize,
    /// CPU to pin to.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Seconds before giving up.
    #[arg(long)]
    pub timeout: f64,
    /// Workers the ESP SPIs steer to.
    #[arg(long, default_value_t = 2, value_parser = args::workers())]
    pub workers: usize,
    /// Demand cookies (responder).
    #[arg(long)]
    pub cookies: bool,
    /// Spoke connections to load.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Directory with the run's certificates (certificate authentication).
    #[arg(long)]
    pub pki: Option<std::path::PathBuf>,
}

fn seconds(x: f64, what: &str) -> Result<Duration> {
    if !(x > 0.0 && x <= 3600.0) {
        bail!("{what} must be in (0, 3600] seconds");
    }
    Ok(Duration::from_secs_f64(x))
}

/// The CPUs this process may use.
fn allowed_cpus() -> Vec<usize> {
    esparto_io::cpu::allowed_cpus()
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// Entry point of `esparto-testbed bench setup`.
pub fn main(a: &Args) -> Result<ExitCode> {
    let allowed = allowed_cpus();
    let cpus = match a.cpus.as_slice() {
        [] => (allowed[0], *allowed.get(1).unwrap_or(&allowed[0])),
        [i, r] => (*i, *r),
        _ => bail!("--cpus takes two CPUs: initiator,responder"),
    };
    let auth = pki::Auth::parse(&a.auth)?;
    if auth != pki::Auth::Psk && a.connections != 1 {
        bail!("--auth {} runs with --connections 1 (one certificate per side)", a.auth);
    }
    // Kept until the peers are done.
    let pki_dir = match auth {
        pki::Auth::Psk => None,
        _ => Some(pki::make(auth)?),
    };
    let tunnels = (a.tunnels > 0).then_some(TunnelOptions {
        tunnels: a.tunnels,
        concurrency: a.concurrency.min(a.tunnels),
        topology: a.topology,
        cpus,
        timeout: seconds(a.timeout, "--timeout")?,
        cookies: a.cookies,
        workers: allowed.len(),
        connections: a.connections,
        pki: pki_dir.as_ref().map(|d| d.path().to_path_buf()),
    });
    let config_sizes = match a.config_sizes.as_slice() {
        [none] if none == "none" => vec![],
        list => list
            .iter()
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .with_context(|| format!("--config-sizes: '{s}' is not a count"))
            })
            .collect::<Result<Vec<_>>>()?,
    };
    // The peers are this executable's hidden `bench setup-peer`.
    let bin = std::env::current_exe().context("locating this executable")?;
    let opts = Options {
        tunnels,
        config_sizes,
        config_runs: a.config_runs,
        auth: auth.name(),
    };
    let report = run(&bin, &opts)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Entry point of `esparto-testbed bench setup-peer`.
pub fn peer_main(a: &PeerArgs) -> Result<ExitCode> {
    let role = match a.role.as_str() {
        "initiator" => Role::Initiator,
        "responder" => Role::Responder,
        r => bail!("--role {r}: initiator or responder"),
    };
    let o = PeerOptions {
        role,
        local: a.local,
        remote: a.remote,
        tunnels: a.tunnels,
        concurrency: a.concurrency,
        cpu: a.cpu,
        timeout: seconds(a.timeout, "--timeout")?,
        cookies: a.cookies,
        workers: a.workers,
        connections: a.connections,
        pki: a.pki.clone(),
    };
    let r = peer::run(&o)?;
    Ok(if r.completed && r.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_per_connection() {
        let row = |n: usize, parse_ms: f64, endpoint_ms: f64| ConfigLoadRow {
            connections: n,
            file_bytes: 0,
            parse_ms,
            endpoint_ms,
            us_per_connection: (parse_ms + endpoint_ms) * 1e3 / n as f64,
        };
        // Linear loader, quadratic endpoint: 10× the size, 100× the time.
        let g = growth(&[row(1000, 10.0, 1.0), row(10_000, 100.0, 100.0)]).unwrap();
        assert!((g.parse - 1.0).abs() < 1e-9);
        assert!((g.endpoint - 10.0).abs() < 1e-9);
        assert!((g.total - 200.0 / 110.0).abs() < 1e-9);
        assert!(growth(&[row(1000, 1.0, 1.0)]).is_none());
        assert!(growth(&[]).is_none());
    }
}
