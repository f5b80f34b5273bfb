//! What a run of `esparto-testbed bench tunnel` does: [`Options`] (the full run
//! and the `--quick` smoke run), the caps of each section's search, the
//! per-CPU section's SA layout, and the command line ([`Args`]) that
//! selects among them.

use std::time::Duration;

use anyhow::{Result, bail};
use esparto_bench::args::{self, Json, MAX_WORKERS, Save};
use serde::{Deserialize, Serialize};

use super::pair::Layout;
use crate::Family;
use crate::baseline;
use crate::zeroloss::Search;

/// The per-CPU layout measured against one SA pair: negotiated by IKEv2
/// (RFC 9611, `per_cpu_sas = "eager"`), against one IKE-negotiated pair.
/// `Layout::StaticPerCpu` measures the same data path with static keys.
pub const PER_CPU_LAYOUT: Layout = Layout::IkePerCpu;

fn default_comparison_flows() -> usize {
    4
}

/// The highest rate a section's search offers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Caps {
    /// Packets/s.
    pub max_pps: f64,
    /// Inner IP Mbit/s (caps large packets below `max_pps`).
    pub max_mbps: f64,
}

/// Everything a run does, as the JSON records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The smoke-run settings were used.
    pub quick: bool,
    /// Seconds per TCP run.
    pub tcp_seconds: u32,
    /// TCP stream counts in the strongSwan/Esparto comparison.
    pub tcp_streams: Vec<u32>,
    /// Inner IP sizes in the strongSwan/Esparto comparison.
    pub sizes: Vec<usize>,
    /// Flow (and TCP stream) counts of the per-CPU comparison.
    pub flows: Vec<usize>,
    /// UDP generator flows in the main comparison (routed, strongSwan,
    /// Esparto): one flow is capped by the generator itself (one sending
    /// thread) near the routed path's ceiling, whatever the gateways do.
    #[serde(default = "default_comparison_flows")]
    pub comparison_flows: usize,
    /// Inner IP sizes of the per-CPU comparison.
    pub per_cpu_sizes: Vec<usize>,
    /// Workers per Esparto gateway.
    pub workers: usize,
    /// Measure strongSwan.
    pub strongswan: bool,
    /// Measure the plain routed path.
    pub routed: bool,
    /// The zero-loss search (its `max_pps` is replaced by each section's cap).
    pub search: Search,
    /// strongSwan's caps.
    pub strongswan_caps: Caps,
    /// Esparto's caps.
    pub esparto_caps: Caps,
    /// The routed path's caps.
    pub routed_caps: Caps,
    /// IKE proposal (strongSwan syntax), both systems.
    pub ike_proposal: String,
    /// ESP proposal, both systems.
    pub esp_proposal: String,
    /// The per-CPU section's layout.
    pub per_cpu_layout: Layout,
    /// Print every trial to stderr.
    pub verbose: bool,
    /// The LAN links set up like multi-queue NICs — a queue per CPU with
    /// XPS on every end, GRO and UDP GRO forwarding on the gateways' ends
    /// ([`crate::topology::Topology::set_lan_gro`]) — in every
    /// section (routed, strongSwan, Esparto alike). Off: veth's defaults.
    #[serde(default)]
    pub lan_gro: bool,
    /// gw-east's workers pinned to gw-west's CPUs shifted by one
    /// ([`crate::esparto::shifted_cpus`]), so that no flow has
    /// both its ends on one CPU, as on two machines. Off: both gateways pin
    /// worker *k* to CPU *k*, and each flow's two ends share a CPU (what a
    /// result file without this field was measured with, hence the
    /// `serde` default).
    #[serde(default)]
    pub east_cpus_shifted: bool,
}

impl Options {
    /// A full run (10–20 minutes).
    pub fn full(workers: usize) -> Self {
        Self {
            quick: false,
            tcp_seconds: 10,
            tcp_streams: vec![1, 4],
            sizes: vec![64, 128, 256, 512, 1024, 1400],
            flows: vec![1, 2, 8],
            comparison_flows: default_comparison_flows(),
            per_cpu_sizes: vec![1400, 64],
            workers,
            strongswan: true,
            routed: true,
            search: Search {
                min_pps: 500.0,
                max_pps: 250_000.0,
                loss_tolerance: 0.0,
                resolution: 0.03,
                trial: Duration::from_secs(2),
                settle: Duration::from_secs(1),
                confirm_retries: 4,
            },
            // strongSwan: the test bed baseline's caps (it carries ≈ 250
            // Mbit/s of TCP here; its queues grow without bound).
            strongswan_caps: Caps {
                max_pps: 250_000.0,
                max_mbps: 1_000.0,
            },
            esparto_caps: Caps {
                max_pps: 3_000_000.0,
                max_mbps: 20_000.0,
            },
            routed_caps: Caps {
                max_pps: 3_000_000.0,
                max_mbps: 20_000.0,
            },
            ike_proposal: "aes256gcm16-prfsha256-x25519".into(),
            esp_proposal: "aes256gcm16".into(),
            per_cpu_layout: PER_CPU_LAYOUT,
            verbose: false,
            lan_gro: true,
            east_cpus_shifted: true,
        }
    }

    /// A smoke run of about a minute: short trials, 2 sizes, a coarse search.
    pub fn quick(workers: usize) -> Self {
        Self {
            quick: true,
            tcp_seconds: 1,
            sizes: vec![64, 1400],
            flows: vec![1, 8],
            per_cpu_sizes: vec![1400],
            search: Search {
                min_pps: 1_000.0,
                max_pps: 250_000.0,
                loss_tolerance: 0.0,
                resolution: 0.25,
                trial: Duration::from_millis(250),
                settle: Duration::from_millis(50),
                confirm_retries: 3,
            },
            ..Self::full(workers)
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        // 1400: strongSwan's ipsec0 MTU (larger packets would be
        // fragmented); 44: the generator's 16-byte header over IPv4/UDP.
        if let Some(s) = self
            .sizes
            .iter()
            .chain(&self.per_cpu_sizes)
            .find(|s| !(44..=1400).contains(*s))
        {
            bail!("packet size {s} is outside 44..=1400 bytes");
        }
        if !(1..=64).contains(&self.comparison_flows) {
            bail!("--comparison-flows must be between 1 and 64");
        }
        if let Some(f) = self.flows.iter().find(|f| !(1..=64).contains(*f)) {
            bail!("{f} flows: 1 to 64");
        }
        if !(1..=600).contains(&self.tcp_seconds) {
            bail!("--tcp-seconds must be between 1 and 600");
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            bail!("--workers must be between 1 and {MAX_WORKERS}");
        }
        Ok(())
    }

    /// gw-east's `[daemon] cpus`: gw-west's (the CPUs this process may
    /// use, in order) shifted by one, or `None` (the same order as gw-west)
    /// with `--same-cpus`.
    pub(super) fn east_cpus(&self) -> Result<Option<Vec<usize>>> {
        if !self.east_cpus_shifted {
            return Ok(None);
        }
        crate::esparto::east_cpus_shifted().map(Some)
    }

    /// The test bed's options for one section.
    pub(super) fn section(
        &self,
        caps: Caps,
        tcp_streams: Vec<u32>,
        sizes: Vec<usize>,
        flows: usize,
    ) -> baseline::Options {
        baseline::Options {
            tcp_seconds: self.tcp_seconds,
            tcp_streams,
            sizes,
            family: Family::V4,
            search: Search {
                max_pps: caps.max_pps,
                ..self.search.clone()
            },
            tunnel_max_mbps: caps.max_mbps,
            routed_max_mbps: caps.max_mbps,
            routed_max_pps: caps.max_pps,
            routed: false,
            routed_gro: false,
            ike_proposal: self.ike_proposal.clone(),
            esp_proposal: self.esp_proposal.clone(),
            udp_flows: flows,
            verbose: self.verbose,
            calibrate: true,
            lan_gro: self.lan_gro,
        }
    }
}

/// The command line of `esparto-testbed bench tunnel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How to print the results.
    #[command(flatten)]
    pub output: Json,
    /// A smoke run of about a minute: 1-second TCP, 64 and 1400 bytes, 0.25-second trials, a coarse search.
    #[arg(long)]
    pub quick: bool,
    /// Inner IP packet sizes for strongSwan vs Esparto (44..=1400), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Leave strongSwan out (no baseline, no ratios).
    #[arg(long)]
    pub skip_strongswan: bool,
    /// Leave out the plain routed path (no IPsec).
    #[arg(long)]
    pub skip_routed: bool,
    /// Flow counts for per-CPU SAs vs one pair, comma separated (empty: skip that section).
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub flows: Option<Vec<usize>>,
    /// UDP generator flows in the main comparison (default 4).
    #[arg(long)]
    pub comparison_flows: Option<usize>,
    /// Seconds per TCP run (default 10; 1 with --quick).
    #[arg(long)]
    pub tcp_seconds: Option<u32>,
    /// Workers per Esparto gateway (default: the CPUs this process may use).
    #[arg(long, value_parser = args::workers())]
    pub workers: Option<usize>,
    /// Key the per-CPU comparison with static keys instead of IKEv2 (same data path, no negotiation).
    #[arg(long)]
    pub per_cpu_static: bool,
    /// Print every trial to stderr.
    #[arg(long)]
    pub verbose: bool,
    /// LAN links like multi-queue NICs: a queue per CPU with XPS, GRO and rx-udp-gro-forwarding on the gateways' LAN ends (every section alike). The default.
    #[arg(long, conflicts_with = "no_lan_gro")]
    pub lan_gro: bool,
    /// LAN links with veth's defaults instead: one queue, no GRO, so every UDP packet reaches the TUN alone.
    #[arg(long)]
    pub no_lan_gro: bool,
    /// Pin gw-east's worker k to the same CPU as gw-west's worker k, so that each flow's two ends share a CPU. The default shifts gw-east's CPUs by one: a flow's two ends on different CPUs, as on two machines.
    #[arg(long)]
    pub same_cpus: bool,
    /// Repeat the whole run N times, then summarise each ratio: every run's value, the median, and how many runs reach the target; --save keeps every run.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Whether to keep Esparto's figures for `esparto plan`, and where.
    #[command(flatten)]
    pub save: Save,
    /// Also draw throughput and zero-loss packet rate against packet size (routed, strongSwan,
    /// Esparto) as an SVG chart into FILE; with --runs, the medians.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,
}

impl Args {
    /// The options these arguments ask for.
    pub fn options(&self) -> Result<Options> {
        let workers = self
            .workers
            .unwrap_or_else(esparto_io::cpu::default_workers);
        let mut o = if self.quick {
            Options::quick(workers)
        } else {
            Options::full(workers)
        };
        if let Some(s) = &self.sizes {
            o.sizes = s.clone();
        }
        if let Some(f) = &self.flows {
            o.flows = f.clone();
        }
        if let Some(n) = self.comparison_flows {
            o.comparison_flows = n;
        }
        if let Some(t) = self.tcp_seconds {
            o.tcp_seconds = t;
        }
        o.strongswan = !self.skip_strongswan;
        o.routed = !self.skip_routed;
        o.verbose = self.verbose;
        o.lan_gro = !self.no_lan_gro;
        o.east_cpus_shifted = !self.same_cpus;
        if self.per_cpu_static {
            o.per_cpu_layout = Layout::StaticPerCpu;
        }
        o.validate()?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    fn parse(args: &[&str]) -> Result<Options> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        Cli::try_parse_from(v)?.a.options()
    }

    #[test]
    fn defaults_and_overrides() {
        let o = parse(&["--workers", "2"]).unwrap();
        assert_eq!(o, Options::full(2));
        assert!(o.lan_gro);
        assert!(parse(&["--workers", "2", "--lan-gro"]).unwrap().lan_gro);
        assert!(!parse(&["--workers", "2", "--no-lan-gro"]).unwrap().lan_gro);
        assert!(parse(&["--lan-gro", "--no-lan-gro"]).is_err());
        assert!(o.east_cpus_shifted);
        assert!(!parse(&["--workers", "2", "--same-cpus"]).unwrap().east_cpus_shifted);
        assert!(Options::quick(2).east_cpus_shifted);
        assert_eq!(o.sizes, [64, 128, 256, 512, 1024, 1400]);
        assert_eq!(o.flows, [1, 2, 8]);
        assert!(o.strongswan && o.routed && !o.quick);
        assert_eq!(o.per_cpu_layout, PER_CPU_LAYOUT);
        let q = parse(&[
            "--quick",
            "--workers",
            "2",
            "--skip-strongswan",
            "--flows",
            "1,2",
            "--tcp-seconds",
            "3",
        ])
        .unwrap();
        assert!(q.quick && !q.strongswan && q.routed);
        assert_eq!(q.sizes, [64, 1400]);
        assert_eq!(q.flows, [1, 2]);
        assert_eq!(q.tcp_seconds, 3);
        assert_eq!(
            parse(&["--workers", "1", "--flows"]).unwrap().flows,
            Vec::<usize>::new()
        );
        let st = parse(&["--workers", "2", "--per-cpu-static"]).unwrap();
        assert_eq!(st.per_cpu_layout, Layout::StaticPerCpu);
        assert_eq!(
            parse(&["--workers", "1", "--sizes", "128,512"])
                .unwrap()
                .sizes,
            [128, 512]
        );
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            &["--sizes", "1500"][..],
            &["--sizes", "40"],
            &["--flows", "0"],
            &["--flows", "65"],
            &["--tcp-seconds", "0"],
            &["--workers", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn caps_are_per_section() {
        let o = Options::full(2);
        let swan = o.section(o.strongswan_caps, vec![1], vec![64], 1);
        let esp = o.section(o.esparto_caps, vec![2], vec![1400], 2);
        assert_eq!(
            (swan.search.max_pps, swan.tunnel_max_mbps),
            (250_000.0, 1_000.0)
        );
        assert_eq!(
            (esp.search.max_pps, esp.tunnel_max_mbps),
            (3_000_000.0, 20_000.0)
        );
        assert_eq!((esp.udp_flows, esp.tcp_streams.as_slice()), (2, &[2][..]));
        // Everything but the caps is the same search.
        assert_eq!(
            Search {
                max_pps: 0.0,
                ..swan.search
            },
            Search {
                max_pps: 0.0,
                ..esp.search
            }
        );
    }
}
