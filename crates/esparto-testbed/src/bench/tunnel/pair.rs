//! Two Esparto gateways on a fresh standard topology, keyed one of four
//! ways, ready to be measured.
//!
//! The benchmark compares SA layouts, so a layout is a value
//! ([`Layout`]): one SA pair or per-CPU SAs (RFC 9611: a fallback SA plus
//! one Child SA per worker, same selectors, different SPIs), negotiated by
//! IKEv2 with a PSK or statically keyed. [`EspartoPair::up`] starts the
//! responder (east) first, then the initiator, waits until the west
//! gateway has every SA the layout promises (for IKE: an established IKE SA
//! with its Child SAs on both sides), and checks that pings cross before
//! anything is measured, so a broken tunnel is an error, not a zero.
//!
//! Statically keyed per-CPU pairs choose their SPIs with
//! [`::esparto::datapath::spi_for_worker`], as the daemon's IKE SPI allocator does:
//! the sub-SA of worker *k* is received on an SPI that the steering program
//! hands to worker *k* on **both** gateways (west's outbound SPI is east's
//! inbound SPI), so decryption spreads over the workers like encryption.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use ::esparto::status::Status;
use crate::baseline::{self, IoBatching, Section, WorkerSplit};
use crate::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair};
use crate::topology::{Net, Node, Topology};
use crate::udpgen::UdpGen;
use crate::{Family, traffic};

/// The pre-shared key of the benchmark's IKE gateways (namespaces only).
const PSK: &str = "esparto bench tunnel: a pre-shared key for namespaces only";

/// How long IKE may take to bring up every Child SA of a layout.
const IKE_TIMEOUT: Duration = Duration::from_secs(15);

/// The SAs between the two gateways.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// IKEv2 PSK, `per_cpu_sas = "no"`: one Child SA (one SA pair).
    IkeOnePair,
    /// IKEv2 PSK, `per_cpu_sas = "eager"`: RFC 9611 per-CPU Child SAs.
    IkePerCpu,
    /// Statically keyed, one SA pair.
    StaticOnePair,
    /// Statically keyed, a fallback pair plus one pair per worker.
    StaticPerCpu,
}

impl Layout {
    /// Whether each worker gets its own SA pair.
    pub fn per_cpu(self) -> bool {
        matches!(self, Layout::IkePerCpu | Layout::StaticPerCpu)
    }

    /// Whether IKE negotiates the SAs.
    pub fn ike(self) -> bool {
        matches!(self, Layout::IkeOnePair | Layout::IkePerCpu)
    }

    /// The one-pair layout keyed the same way (the per-CPU comparison's
    /// baseline: only the number of SAs differs).
    pub fn one_pair(self) -> Layout {
        if self.ike() {
            Layout::IkeOnePair
        } else {
            Layout::StaticOnePair
        }
    }

    /// The per-CPU layout keyed the same way.
    pub fn with_per_cpu(self) -> Layout {
        if self.ike() {
            Layout::IkePerCpu
        } else {
            Layout::StaticPerCpu
        }
    }

    /// A description for tables.
    pub fn describe(self, workers: usize) -> String {
        let keying = if self.ike() {
            "IKEv2 PSK"
        } else {
            "statically keyed"
        };
        if self.per_cpu() {
            format!("{keying}, per-CPU SAs (fallback + 1 pair per worker), {workers} workers")
        } else {
            format!("{keying}, one SA pair, {workers} workers")
        }
    }

    /// SA pairs the west gateway must hold once up.
    fn pairs(self, workers: usize) -> usize {
        if self.per_cpu() { 1 + workers } else { 1 }
    }
}

/// SPIs and KEYMAT of west's statically keyed pairs: pair 0 is the
/// fallback, pair `k + 1` worker `k`'s. AES-256-GCM KEYMAT is 36 bytes
/// (key and salt, RFC 4106 §8.1); the keys differ per pair and direction
/// (RFC 4303 §3.3.3 forbids nothing else, but one key per SA is the norm).
pub fn static_pairs(n: usize, workers: usize) -> Result<Vec<StaticPair>> {
    (0..n)
        .map(|i| {
            let worker = i.saturating_sub(1) % workers.max(1);
            let tag = u32::try_from(i).context("too many pairs")? << 8;
            let spi = |base: u32| {
                ::esparto::datapath::spi_for_worker(base | tag, worker, workers.max(1))
                    .context("no SPI for that worker")
            };
            Ok(StaticPair {
                in_spi: spi(0xc100_0000)?,
                out_spi: spi(0xc200_0000)?,
                in_key: format!("{:02x}", 0x10 + i % 0x60).repeat(36),
                out_key: format!("{:02x}", 0x80 + i % 0x60).repeat(36),
            })
        })
        .collect()
}

/// Two running Esparto gateways and their topology.
#[derive(Debug)]
pub struct EspartoPair {
    // Field order is drop order: gateways stop before the namespaces go.
    west: EspartoGateway,
    east: EspartoGateway,
    topo: Topology,
    label: String,
    layout: Layout,
    sa_summary: String,
}

impl EspartoPair {
    /// Build a topology, start both gateways with `layout`, wait for their
    /// SAs and check that pings cross.
    pub fn up(
        bin: &Path,
        layout: Layout,
        workers: usize,
        ike_proposal: &str,
        esp_proposal: &str,
        east_cpus: Option<Vec<usize>>,
    ) -> Result<Self> {
        Self::up_with(bin, layout, workers, ike_proposal, esp_proposal, east_cpus, &|_| {})
    }

    /// [`EspartoPair::up`] with both gateways' configurations changed by
    /// `tweak` first (e.g. a child's `ipcomp`).
    pub fn up_with(
        bin: &Path,
        layout: Layout,
        workers: usize,
        ike_proposal: &str,
        esp_proposal: &str,
        east_cpus: Option<Vec<usize>>,
        tweak: &dyn Fn(&mut EspartoConfig),
    ) -> Result<Self> {
        let topo = Topology::new()?;
        let (mut west_cfg, mut east_cfg) = configs(layout, workers, ike_proposal, esp_proposal)?;
        tweak(&mut west_cfg);
        tweak(&mut east_cfg);
        east_cfg.cpus = east_cpus;
        let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg)
            .context("starting gw-east")?;
        let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &west_cfg)
            .context("starting gw-west")?;
        let mut pair = Self {
            west,
            east,
            topo,
            label: format!(
                "Esparto ↔ Esparto, {}, ESP {esp_proposal}{}",
                layout.describe(workers),
                if layout.ike() {
                    format!(", IKE {ike_proposal}")
                } else {
                    String::new()
                }
            ),
            layout,
            sa_summary: String::new(),
        };
        if let Err(e) = pair.wait_ready(workers) {
            pair.west.dir().keep();
            pair.east.dir().keep();
            bail!(
                "{e:#} (logs kept in {} and {})",
                pair.west.dir().path().display(),
                pair.east.dir().path().display()
            );
        }
        Ok(pair)
    }

    fn wait_ready(&mut self, workers: usize) -> Result<()> {
        // Both gateways are eager: each negotiates a sub-SA per worker, so
        // once all are up each holds its own and the peer's (1 + 2 × workers
        // Child SAs). Waiting for fewer would report a layout mid-way.
        let want = match self.layout {
            Layout::IkePerCpu => 1 + 2 * workers,
            l => l.pairs(workers),
        };
        let deadline = Instant::now() + IKE_TIMEOUT;
        // If the daemon negotiates sub-SAs on acquires (a worker without
        // one sees traffic) rather than at once, traffic on every worker
        // brings them up: a short burst of many flows while waiting.
        let mut kick = if self.layout.ike() && self.layout.per_cpu() {
            Some(UdpGen::with_flows(
                self.topo.ns(Node::HostWest),
                Topology::addr(Node::HostWest, Net::Lan, Family::V4),
                self.topo.ns(Node::HostEast),
                Topology::addr(Node::HostEast, Net::Lan, Family::V4),
                8,
            )?)
        } else {
            None
        };
        loop {
            let (w, e) = (self.west.status()?, self.east.status()?);
            let ready = [&w, &e].iter().all(|s| {
                let children_ok = !self.layout.ike()
                    || s.ike_sas
                        .iter()
                        .any(|i| i.state == "established" && i.children.len() >= want);
                children_ok && inbound_spis(s) >= want
            });
            if ready {
                self.sa_summary = sa_summary(&w);
                break;
            }
            if Instant::now() >= deadline {
                bail!(
                    "{}: after {IKE_TIMEOUT:?} gw-west holds {} (want {want} SA pairs)",
                    self.label,
                    sa_summary(&w)
                );
            }
            match kick.as_mut() {
                Some(g) if !w.ike_sas.is_empty() => {
                    g.trial(64, 2_000.0, Duration::from_millis(100))?;
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        drop(kick);
        let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
        let r = traffic::ping(
            self.topo.ns(Node::HostWest),
            dst,
            3,
            Duration::from_millis(50),
        )?;
        if r.received == 0 {
            bail!("{}: no ping crossed the tunnel ({r:?})", self.label);
        }
        Ok(())
    }

    /// The topology the two gateways run on.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// The section label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// What gw-west held once up (SAs by direction and role).
    pub fn sa_summary(&self) -> &str {
        &self.sa_summary
    }

    /// Both gateways' labels and process ids (for CPU meters).
    pub fn pids(&self) -> [(&'static str, u32); 2] {
        [("gw-west esparto", self.west.pid()), ("gw-east esparto", self.east.pid())]
    }

    /// Both gateways' status (west, east).
    pub fn status(&self) -> Result<(Status, Status)> {
        Ok((self.west.status()?, self.east.status()?))
    }

    /// Keeps both gateways' working directories (logs) after the run.
    pub fn keep_logs(&self) {
        self.west.dir().keep();
        self.east.dir().keep();
    }

    /// Both gateways' cumulative per-worker counters.
    pub fn probe(&self) -> Result<WorkerSplit> {
        let (w, e) = (self.west.status()?, self.east.status()?);
        Ok(WorkerSplit {
            west_encap: w.workers.iter().map(|x| x.tx_packets).collect(),
            east_decap: e.workers.iter().map(|x| x.rx_packets).collect(),
            east_encap: e.workers.iter().map(|x| x.tx_packets).collect(),
            west_decap: w.workers.iter().map(|x| x.rx_packets).collect(),
            west_io: IoBatching::total(w.workers.iter().map(|x| &x.io)),
            east_io: IoBatching::total(e.workers.iter().map(|x| &x.io)),
        })
    }

    /// Measure with `opts` (its search cap and `tunnel_max_mbps` as the
    /// caps), recording the worker split.
    pub fn measure(&self, opts: &baseline::Options) -> Result<Section> {
        let pids = [
            ("gw-west esparto", self.west.pid()),
            ("gw-east esparto", self.east.pid()),
        ];
        let probe = || self.probe();
        let r = baseline::measure_probed(
            &self.topo,
            opts,
            &self.label,
            &pids,
            opts.search.max_pps,
            opts.tunnel_max_mbps,
            Some(&probe),
        );
        if r.is_err() {
            self.west.dir().keep();
            self.east.dir().keep();
        }
        r
    }

    /// Stop both gateways (each must exit 0 and leave nothing behind) and
    /// remove the namespaces.
    pub fn down(self) -> Result<()> {
        let Self {
            west, east, topo, ..
        } = self;
        let w = west.stop().context("stopping gw-west");
        let e = east.stop().context("stopping gw-east");
        drop(topo);
        w.and(e)
    }
}

/// Distinct inbound SPIs a gateway holds.
fn inbound_spis(s: &Status) -> usize {
    let mut spis: Vec<&str> = s
        .sas
        .iter()
        .filter(|x| x.direction == "in")
        .map(|x| x.spi.as_str())
        .collect();
    spis.sort_unstable();
    spis.dedup();
    spis.len()
}

/// "in: 1 fallback, 2 sub; out: 1 fallback, 2 sub" (distinct SPIs by role).
fn sa_summary(s: &Status) -> String {
    let side = |dir: &str| {
        let mut seen: Vec<(&str, &str)> = s
            .sas
            .iter()
            .filter(|x| x.direction == dir)
            .map(|x| (x.role.as_str(), x.spi.as_str()))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        let mut roles: Vec<(&str, usize)> = Vec::new();
        for (role, _) in seen {
            match roles.iter_mut().find(|(r, _)| *r == role) {
                Some((_, n)) => *n += 1,
                None => roles.push((role, 1)),
            }
        }
        if roles.is_empty() {
            return "none".to_string();
        }
        roles
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("in: {}; out: {}", side("in"), side("out"))
}

/// West's and east's configurations for `layout`.
fn configs(
    layout: Layout,
    workers: usize,
    ike_proposal: &str,
    esp_proposal: &str,
) -> Result<(EspartoConfig, EspartoConfig)> {
    let (mut west, mut east) = if layout.ike() {
        let keying = |west: bool| Keying::Ike {
            proposal: ike_proposal.to_string(),
            local_id: if west { "@west" } else { "@east" }.into(),
            remote_id: if west { "@east" } else { "@west" }.into(),
            psk: PSK.into(),
            initiator: west,
        };
        (
            EspartoConfig::site(Node::GwWest, keying(true))?,
            EspartoConfig::site(Node::GwEast, keying(false))?,
        )
    } else {
        let pairs = static_pairs(layout.pairs(workers), workers)?;
        let mirrored = pairs.iter().map(StaticPair::mirrored).collect();
        (
            EspartoConfig::site(Node::GwWest, Keying::Static(pairs))?,
            EspartoConfig::site(Node::GwEast, Keying::Static(mirrored))?,
        )
    };
    let per_cpu = if layout.per_cpu() { "eager" } else { "no" };
    for c in [&mut west, &mut east] {
        c.workers = Some(workers);
        c.esp_proposal = esp_proposal.to_string();
        // Written to the file for negotiated children only (see
        // `EspartoConfig::to_toml`); static pairs fix their layout themselves.
        c.per_cpu_sas = per_cpu.into();
    }
    Ok((west, east))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ::esparto::datapath::spi_to_worker;

    #[test]
    fn static_per_cpu_spis_steer_to_their_worker_on_both_sides() {
        for workers in [1usize, 2, 3, 8] {
            let pairs = static_pairs(1 + workers, workers).unwrap();
            for (i, p) in pairs.iter().enumerate().skip(1) {
                // West receives worker k's sub-SA on worker k, and so does
                // east (west's outbound SPI is east's inbound SPI).
                assert_eq!(spi_to_worker(p.in_spi, workers), i - 1);
                assert_eq!(spi_to_worker(p.out_spi, workers), i - 1);
            }
            let mut spis: Vec<u32> = pairs.iter().flat_map(|p| [p.in_spi, p.out_spi]).collect();
            spis.sort_unstable();
            spis.dedup();
            assert_eq!(spis.len(), 2 * pairs.len(), "SPIs are distinct");
            let mut keys: Vec<&str> = pairs
                .iter()
                .flat_map(|p| [p.in_key.as_str(), p.out_key.as_str()])
                .collect();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), 2 * pairs.len(), "one key per SA");
            assert!(pairs.iter().all(|p| p.in_key.len() == 72));
        }
    }

    #[test]
    fn layouts_pair_up() {
        assert_eq!(Layout::StaticPerCpu.one_pair(), Layout::StaticOnePair);
        assert_eq!(Layout::IkePerCpu.one_pair(), Layout::IkeOnePair);
        assert_eq!(Layout::StaticOnePair.with_per_cpu(), Layout::StaticPerCpu);
        assert_eq!(Layout::IkeOnePair.with_per_cpu(), Layout::IkePerCpu);
        assert_eq!(Layout::StaticPerCpu.pairs(2), 3);
        assert_eq!(Layout::IkeOnePair.pairs(2), 1);
        assert!(
            Layout::StaticPerCpu
                .describe(2)
                .contains("statically keyed")
        );
    }

    #[test]
    fn configs_differ_only_in_the_sas() {
        let (w1, e1) = configs(Layout::StaticOnePair, 2, "x", "aes256gcm16").unwrap();
        let (w3, _) = configs(Layout::StaticPerCpu, 2, "x", "aes256gcm16").unwrap();
        let n = |c: &EspartoConfig| match &c.keying {
            Keying::Static(p) => p.len(),
            Keying::Ike { .. } => 0,
        };
        assert_eq!((n(&w1), n(&e1), n(&w3)), (1, 1, 3));
        assert_eq!(w1.workers, Some(2));
        let (wi, ei) = configs(
            Layout::IkePerCpu,
            2,
            "aes256gcm16-prfsha256-x25519",
            "aes256gcm16",
        )
        .unwrap();
        let t = wi.to_toml(Path::new("/s"));
        assert!(t.contains("per_cpu_sas = \"eager\""), "{t}");
        assert!(t.contains("start_action = \"start\""), "{t}");
        assert!(
            ei.to_toml(Path::new("/s"))
                .contains("start_action = \"none\"")
        );
    }
}
