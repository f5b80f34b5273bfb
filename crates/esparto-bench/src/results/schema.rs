//! The saved JSON types: what a results file holds, which is its format.
//!
//! Every file is one [`Saved`]: the envelope (format version, [`Kind`],
//! [`Machine`], commit, date, command line, load, clock) around one
//! benchmark's figures ([`DataplaneData`], [`AgilityData`],
//! [`IpcompData`], [`TunnelData`], [`CallRateData`]; the test bed's voip
//! and IPComp reports are its own types). A field whose meaning changes
//! raises [`FORMAT`], and the store sets older and newer files aside.
//! Fields added later carry `#[serde(default)]`, so files written before
//! them still read.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::bench::dataplane;

/// The file format this build writes and reads. Raised when a field's
/// meaning changes; files of any other version are set aside, named.
pub const FORMAT: u32 = 1;

/// Which benchmark wrote a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `esparto bench dataplane`: in process.
    Dataplane,
    /// `esparto-testbed bench tunnel`: end to end through two gateways.
    Tunnel,
    /// `esparto bench dataplane --sas`: in process, many active SAs.
    Agility,
    /// `esparto-testbed bench voip`: concurrent calls end to end.
    Voip,
    /// `esparto bench ipcomp`: DEFLATE per corpus in process.
    Ipcomp,
    /// `esparto-testbed bench ipcomp`: goodput per link and IPComp mode.
    #[serde(rename = "ipcomp-tunnel")]
    IpcompTunnel,
    /// `esparto-testbed bench voip --rates`: the zero-loss packet rate of
    /// call-like traffic by packet size.
    #[serde(rename = "callrate")]
    CallRate,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Dataplane => "dataplane",
            Kind::Tunnel => "tunnel",
            Kind::Agility => "agility",
            Kind::Voip => "voip",
            Kind::Ipcomp => "ipcomp",
            Kind::IpcompTunnel => "ipcomp-tunnel",
            Kind::CallRate => "callrate",
        })
    }
}

/// The machine a measurement was taken on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `/etc/machine-id` (or "hostname:NAME" where there is none).
    pub id: String,
    /// The host name.
    pub hostname: String,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Processors listed in `/proc/cpuinfo`.
    pub cpus: usize,
}

impl Machine {
    /// This machine.
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).ok().filter(|s| !s.is_empty());
        let hostname = read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into());
        let id = read("/etc/machine-id")
            .or_else(|| read("/var/lib/dbus/machine-id"))
            .unwrap_or_else(|| format!("hostname:{hostname}"));
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_string(), |(_, v)| v.trim().to_string());
        let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        Self { id, hostname, cpu_model, cpus }
    }

    /// `None` if `other` is this machine as it is now; else how it differs.
    pub fn differs(&self, other: &Machine) -> Option<String> {
        if self.id != other.id {
            return Some(format!("from another machine ({}, machine id {})", other.hostname, other.id));
        }
        if self.cpu_model != other.cpu_model {
            return Some(format!("measured on other CPUs ({}; now {})", other.cpu_model, self.cpu_model));
        }
        if self.cpus != other.cpus {
            return Some(format!("measured with {} CPUs (now {})", other.cpus, self.cpus));
        }
        None
    }
}

/// One saved measurement: who, where, when, and the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved<T> {
    /// [`FORMAT`].
    pub format: u32,
    /// Which benchmark.
    pub kind: Kind,
    /// Where it ran.
    pub machine: Machine,
    /// The commit of the binary that measured.
    pub commit: String,
    /// When, RFC 3339 UTC.
    pub date: String,
    /// The same as Unix seconds (which file is newest).
    pub unix: u64,
    /// The command line.
    pub command: String,
    /// `/proc/loadavg`'s 1, 5 and 15-minute load averages when saved: how
    /// busy the machine was (figures taken beside other work are lower).
    pub load_average: String,
    /// The cycle counter's rate, Hz: the clock the cycle counts are in.
    pub clock_hz: f64,
    /// The figures.
    pub data: T,
}

/// What `esparto bench dataplane` measured (one suite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataplaneData {
    /// The suite, strongSwan's name.
    pub suite: String,
    /// Worker threads of the multi-worker figures.
    pub workers: usize,
    /// Seconds per measurement.
    pub seconds: f64,
    /// Measurements per figure (medians).
    pub runs: usize,
    /// One row per packet size.
    pub rows: Vec<dataplane::Row>,
}

/// What `esparto bench dataplane --sas` measured (one suite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgilityData {
    /// The suite, strongSwan's name.
    pub suite: String,
    /// Worker threads.
    pub workers: usize,
    /// Seconds per measurement.
    pub seconds: f64,
    /// Measurements per figure (medians).
    pub runs: usize,
    /// One row per packet size and number of SAs.
    pub rows: Vec<dataplane::AgilityRow>,
}

/// What `esparto bench ipcomp` measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IpcompData {
    /// Seconds per measurement.
    pub seconds: f64,
    /// Measurements per figure (medians).
    pub runs: usize,
    /// The file measured as corpus "file", if any.
    #[serde(default)]
    pub file: Option<String>,
    /// One row per corpus and packet size.
    pub rows: Vec<crate::bench::ipcomp::Row>,
}

/// One packet size's RFC 2544 zero-loss rate, end to end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZeroLoss {
    /// Inner IP packet size, bytes.
    pub ip_size: usize,
    /// Highest rate with no loss, packets/s (0: none found).
    pub pps: f64,
    /// The search's first probe, at the most the generator offered, passed:
    /// the gateways carry at least this much.
    pub lower_bound: bool,
    /// A confirming trial passed at this rate.
    pub confirmed: bool,
    /// The two gateway processes' CPU seconds per 10⁹ inner bytes at this rate.
    pub gateway_s_per_gb: Option<f64>,
}

/// One TCP figure, end to end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpThroughput {
    /// Parallel streams.
    pub streams: u32,
    /// Payload Mbit/s at the receiver.
    pub mbps: f64,
    /// The two gateway processes' CPU seconds per 10⁹ payload bytes.
    pub gateway_s_per_gb: Option<f64>,
}

/// What `esparto-testbed bench tunnel` measured of Esparto ↔ Esparto.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunnelData {
    /// The ESP suite the gateways used.
    pub suite: String,
    /// Workers per gateway.
    pub workers: usize,
    /// UDP generator flows offered at once.
    pub flows: usize,
    /// Seconds per zero-loss trial.
    pub trial_seconds: f64,
    /// The search's resolution (a fraction of the rate).
    pub resolution: f64,
    /// The loss fraction counted as zero (0: RFC 2544's definition).
    pub loss_tolerance: f64,
    /// The zero-loss rate by inner packet size.
    pub zero_loss: Vec<ZeroLoss>,
    /// TCP throughput.
    pub tcp: Vec<TcpThroughput>,
    /// The test bed's whole report (every trial of every search), as it
    /// printed it with `--json`; the planner does not read it.
    pub report: serde_json::Value,
}

/// What `esparto-testbed bench voip --rates` measured of Esparto ↔ Esparto:
/// the zero-loss packet rate (both directions together) of call-like
/// traffic at a few IP packet sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRateData {
    /// The ESP suite the gateways used.
    pub suite: String,
    /// Workers per gateway.
    pub workers: usize,
    /// UDP 5-tuples each way.
    pub tuples: usize,
    /// Milliseconds between a flow's packets (the rate is paced calls of
    /// this packet time; a rate of R packets/s is R ÷ (2 × 1000/ptime) calls).
    pub ptime_ms: u32,
    /// Seconds per trial.
    pub trial_seconds: f64,
    /// The search's resolution (a fraction of the calls).
    pub resolution: f64,
    /// The zero-loss rate by inner IP packet size; `lower_bound` when the
    /// generator (or the cap), not the gateways, stopped the search.
    pub zero_loss: Vec<ZeroLoss>,
    /// The test bed's whole report; the planner does not read it.
    pub report: serde_json::Value,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn machines_differ_by_id_cpu_model_or_count() {
        let a = Machine { id: "x".into(), hostname: "h".into(), cpu_model: "m".into(), cpus: 2 };
        assert_eq!(a.differs(&a.clone()), None);
        assert!(a.differs(&Machine { id: "y".into(), ..a.clone() }).unwrap().contains("another machine"));
        assert!(a.differs(&Machine { cpu_model: "n".into(), ..a.clone() }).unwrap().contains("other CPUs"));
        assert!(a.differs(&Machine { cpus: 4, ..a.clone() }).unwrap().contains("4 CPUs"));
        let t = Machine::this();
        assert!(!t.id.is_empty() && t.cpus > 0);
    }
}
