//! `esparto-testbed bench metrics`: how long a Prometheus scrape of a big
//! gateway takes, and how large it is.
//!
//! One daemon in a namespace of its own (a veth pair to an empty peer
//! namespace gives it an outer address) with `--child-sas` statically
//! keyed Child SAs (default 10,000), one connection each, so every SA is
//! installed in the data plane without a peer; `[daemon] metrics` on its
//! loopback. Before the scrapes, `--traffic` children get three UDP
//! datagrams each from inside the namespace, so those SAs carry packets
//! (encrypted, and sent to the silent peer). Then
//! `--scrapes` scrapes over TCP, one after another as a scraper would,
//! each timed from `connect` to the last byte, with the Accept header
//! Prometheus sends (OpenMetrics). Reported: the response's size and
//! sample count, the scrape time (median, min, max), and the part of it the
//! daemon's control thread spent gathering the figures
//! (`esparto_metrics_gather_seconds`, which includes the workers'
//! snapshots) — the part that delays IKE — and, for comparison, the time of
//! `esparto status --json` on the same gateway (a process started, the
//! JSON built on the control thread, written and parsed).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_bench::args::{self, Json};
use esparto_netns::Netns;
use serde::Serialize;

use super::median;
use crate::esparto::EspartoGateway;

/// Where the endpoint listens, on the gateway namespace's loopback.
const METRICS: &str = "127.0.0.1:9720";
/// Every child's local selector, and the address traffic comes from.
const LOCAL_TS: &str = "10.0.0.0/16";
const SOURCE: &str = "10.0.0.1";
/// The gateway's outer address and its (silent) peer's.
const LOCAL: &str = "198.18.0.1";
const PEER: &str = "198.18.0.2";
/// Most Child SAs (one /32 of 10.128.0.0/9 each as the remote selector).
const MAX_CHILD_SAS: usize = 1 << 20;
/// What Prometheus 2.x/3.x sends.
const ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `esparto-testbed bench metrics`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Statically keyed Child SAs (one connection each).
    #[arg(long, default_value_t = 10_000)]
    pub child_sas: usize,
    /// Workers of the gateway.
    #[arg(long, default_value_t = 2, value_parser = args::workers())]
    pub workers: usize,
    /// Scrapes to time.
    #[arg(long, default_value_t = 20)]
    pub scrapes: usize,
    /// Pause between two scrapes, milliseconds.
    #[arg(long, default_value_t = 200)]
    pub pause_ms: u64,
    /// Children that get 3 datagrams each before the scrapes (0: no traffic).
    #[arg(long, default_value_t = 1000)]
    pub traffic: usize,
    /// How to print the report.
    #[command(flatten)]
    pub output: Json,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Child SAs configured.
    pub child_sas: usize,
    /// Workers.
    pub workers: usize,
    /// SAs in `status` (an outbound fallback SA once per worker).
    pub status_sas: usize,
    /// Scrapes timed.
    pub scrapes: usize,
    /// Size of the last response body, bytes.
    pub bytes: usize,
    /// Samples in it.
    pub samples: usize,
    /// Scrape time, ms: median, min, max.
    pub scrape_ms: [f64; 3],
    /// The control thread's part, ms: median, min, max.
    pub gather_ms: [f64; 3],
    /// `esparto status --json`, ms (median of 3, process start included).
    pub status_ms: f64,
    /// Size of `esparto status --json`, bytes.
    pub status_bytes: usize,
    /// Time from `esparto run` to the control socket answering, s.
    pub start_s: f64,
    /// 1-minute load average before the run.
    pub loadavg: Option<f64>,
}

/// The configuration: `n` connections of one static child each.
pub fn config(n: usize, workers: usize, control: &Path) -> Result<String> {
    if n == 0 || n > MAX_CHILD_SAS {
        bail!("--child-sas must be 1..={MAX_CHILD_SAS}, not {n}");
    }
    let mut t = String::with_capacity(n * 420);
    let _ = writeln!(
        t,
        "[daemon]\nworkers = {workers}\ncontrol = \"{}\"\nstate_dir = \"{}\"\nmetrics = \"{METRICS}\"\nlog = \"warn\"\n",
        control.display(),
        control.with_file_name("state").display()
    );
    for i in 0..n {
        // Remote selector: one host of 10.128.0.0/9 per child.
        let host = 0x0a80_0000u32 + i as u32;
        let [a, b, c, d] = host.to_be_bytes();
        let key = |dir: u32| format!("{:08x}", dir ^ i as u32).repeat(9);
        let _ = write!(
            t,
            "[connections.c{i}]\nlocal_addrs = [\"{LOCAL}\"]\nremote_addrs = [\"{PEER}\"]\n\
             [connections.c{i}.children.net]\nlocal_ts = [\"{LOCAL_TS}\"]\nremote_ts = [\"{a}.{b}.{c}.{d}/32\"]\n\
             esp_proposals = [\"aes256gcm16\"]\n\
             [[connections.c{i}.children.net.static_sas]]\nin_spi = 0x{:08x}\nout_spi = 0x{:08x}\n\
             in_key = \"0x{}\"\nout_key = \"0x{}\"\n\n",
            0x1000_0000 + i as u32,
            0x2000_0000 + i as u32,
            key(0x5a5a_0000),
            key(0xa5a5_0000),
        );
    }
    Ok(t)
}

/// One timed scrape: (time, body).
fn scrape(ns: &Netns) -> Result<(Duration, String)> {
    let t0 = Instant::now();
    let mut s = ns
        .run(|| TcpStream::connect(METRICS))?
        .context("connecting to the metrics endpoint")?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {METRICS}\r\nAccept: {ACCEPT}\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let took = t0.elapsed();
    let raw = String::from_utf8(raw).context("the response is not UTF-8")?;
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        bail!("no HTTP head in {} bytes", raw.len())
    };
    if !head.starts_with("HTTP/1.1 200 ") {
        bail!("scrape refused: {head}\n{body}");
    }
    Ok((took, body.to_string()))
}

/// The value of an unlabelled sample.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Runs the measurement.
pub fn run(bin: &Path, a: &Args) -> Result<Report> {
    if a.scrapes == 0 {
        bail!("--scrapes must be at least 1");
    }
    if a.child_sas == 0 || a.child_sas > MAX_CHILD_SAS {
        bail!("--child-sas must be 1..={MAX_CHILD_SAS}, not {}", a.child_sas);
    }
    let loadavg = crate::loadavg();
    let gw = Netns::new("metrics-gw")?;
    let peer = Netns::new("metrics-peer")?;
    gw.veth("out0", &peer, "out0")?;
    gw.addr("out0", &format!("{LOCAL}/24"))?;
    peer.addr("out0", &format!("{PEER}/24"))?;
    gw.ip(&["addr", "add", &format!("{SOURCE}/32"), "dev", "lo"])?;
    let t0 = Instant::now();
    let daemon = EspartoGateway::start_with(&gw, bin, "esparto0", |control| {
        config(a.child_sas, a.workers, control).unwrap_or_default()
    })?;
    let start_s = t0.elapsed().as_secs_f64();
    // Into each child's remote selector, from its local one.
    let n = a.traffic.min(a.child_sas);
    gw.run(|| -> Result<()> {
        let s = std::net::UdpSocket::bind((SOURCE, 0))?;
        for i in 0..n {
            let dst = std::net::Ipv4Addr::from(0x0a80_0000u32 + i as u32);
            for _ in 0..3 {
                s.send_to(b"esparto bench metrics", (dst, 9))?;
            }
        }
        Ok(())
    })??;
    let mut status_ms = Vec::new();
    let mut status_bytes = 0;
    let mut status_sas = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let out = Command::new(bin)
            .args(["status", "--json", "--control"])
            .arg(daemon.control_path())
            .output()?;
        status_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if !out.status.success() {
            bail!("esparto status: {}", String::from_utf8_lossy(&out.stderr));
        }
        status_bytes = out.stdout.len();
        let st: esparto::status::Status = serde_json::from_slice(&out.stdout)?;
        status_sas = st.sas.len();
    }
    let mut times = Vec::new();
    let mut gathers = Vec::new();
    let mut body = String::new();
    for i in 0..a.scrapes {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
        let (t, b) = scrape(&gw)?;
        times.push(t.as_secs_f64() * 1e3);
        gathers.push(sample(&b, "esparto_metrics_gather_seconds").context("no esparto_metrics_gather_seconds")? * 1e3);
        body = b;
    }
    daemon.stop()?;
    let spread = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        [median(v), min, max]
    };
    Ok(Report {
        child_sas: a.child_sas,
        workers: a.workers,
        status_sas,
        scrapes: a.scrapes,
        bytes: body.len(),
        samples: body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count(),
        scrape_ms: spread(&times),
        gather_ms: spread(&gathers),
        status_ms: median(&status_ms),
        status_bytes,
        start_s,
        loadavg,
    })
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "gateway: {} static Child SAs, {} workers ({} SAs in status), started in {:.1} s; load average {}",
        r.child_sas,
        r.workers,
        r.status_sas,
        r.start_s,
        r.loadavg.map_or_else(|| "?".into(), |l| format!("{l:.2}"))
    );
    let _ = writeln!(
        t,
        "scrape (OpenMetrics): {} bytes, {} samples; {} scrapes: median {:.1} ms (min {:.1}, max {:.1})",
        r.bytes, r.samples, r.scrapes, r.scrape_ms[0], r.scrape_ms[1], r.scrape_ms[2]
    );
    let _ = writeln!(
        t,
        "  of which the control thread: median {:.1} ms (min {:.1}, max {:.1})",
        r.gather_ms[0], r.gather_ms[1], r.gather_ms[2]
    );
    let _ = writeln!(
        t,
        "esparto status --json: {} bytes, {:.1} ms (median of 3, process start included)",
        r.status_bytes, r.status_ms
    );
    t
}

/// The command.
pub fn main(a: &Args, bin: &Path) -> Result<ExitCode> {
    crate::clean_up_on_signal("esparto-testbed bench metrics")?;
    let r = run(bin, a)?;
    if a.output.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&r));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_generated_configuration_loads() {
        let text = config(300, 2, Path::new("/run/x/esparto.sock")).unwrap();
        let c = esparto::config::parse_str(&text, "/run/x/esparto.toml").unwrap();
        assert_eq!(c.child_count(), 300);
        assert_eq!(c.daemon.metrics, Some(METRICS.parse().unwrap()));
        let last = &c.connections[299].children[0];
        assert_eq!(last.static_sas.as_ref().unwrap().pairs[0].in_spi, 0x1000_0000 + 299);
        assert!(config(0, 2, Path::new("/s")).is_err());
    }
}
