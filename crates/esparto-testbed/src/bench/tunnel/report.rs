//! What `esparto-testbed bench tunnel` reports: the machine it ran on, the rows
//! that put two systems side by side (a baseline and a subject, with the
//! ratio subject/baseline), and the plain-text rendering of it all.
//!
//! A row compares like with like: TCP with the same number of streams, or
//! the RFC 2544 zero-loss rate at the same inner IP packet size with the
//! same number of flows. For UDP the ratio is of packets/s (the same as of
//! Mbit/s at one size). A figure whose search passed its first probe at the
//! cap is a lower bound (the generator or the cap, not the gateway, set
//! it): it is printed with `≥`, and the ratio says which way it is bounded
//! ([`Bound`]) — or that it says nothing, when both sides are lower bounds.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::baseline::{Section, WorkerSplit};

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// Processors listed in `/proc/cpuinfo`.
    pub cpus: usize,
    /// CPUs this process may run on (its affinity mask).
    pub cpus_allowed: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The running kernel (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// `/proc/loadavg`'s 1, 5 and 15-minute averages at the start.
    pub loadavg_start: String,
    /// The same at the end.
    pub loadavg_end: String,
    /// Esparto's version.
    pub esparto: String,
    /// strongSwan's, as charon prints it (when measured).
    pub strongswan: Option<String>,
}

impl Machine {
    /// Read what can be read now (`loadavg_end` is filled in later).
    pub fn now() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self {
            cpus: cpuinfo
                .lines()
                .filter(|l| l.starts_with("processor"))
                .count(),
            cpus_allowed: esparto_io::cpu::allowed_cpus()
                .map(|c| c.len())
                .unwrap_or(0),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            loadavg_start: loadavg(),
            loadavg_end: String::new(),
            esparto: env!("CARGO_PKG_VERSION").into(),
            strongswan: None,
        }
    }
}

/// The first `model name` of a `/proc/cpuinfo` text.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// `/proc/loadavg`'s first three fields.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Measure {
    /// iperf3 TCP with this many streams.
    Tcp {
        /// Parallel streams.
        streams: u32,
    },
    /// Zero-loss UDP with packets of this inner IP size.
    Udp {
        /// Inner IP packet size, bytes.
        ip_size: usize,
    },
}

impl Measure {
    /// What the issue asks of the Esparto/strongSwan ratio, for the
    /// measurements that have a target: TCP (any stream count) and the
    /// 64-byte zero-loss rate must be at least ten times strongSwan's.
    pub fn goal(self) -> Option<f64> {
        match self {
            Measure::Tcp { .. } | Measure::Udp { ip_size: 64 } => Some(10.0),
            Measure::Udp { .. } => None,
        }
    }

    /// "TCP, 4 streams", "UDP   64 B".
    pub fn name(self) -> String {
        match self {
            Measure::Tcp { streams: 1 } => "TCP, 1 stream".into(),
            Measure::Tcp { streams } => format!("TCP, {streams} streams"),
            Measure::Udp { ip_size } => format!("UDP {ip_size:>4} B"),
        }
    }
}

/// One system's figure in a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Mbit/s: TCP payload at the receiver, or inner IP for UDP.
    pub mbps: f64,
    /// Zero-loss packets/s (UDP only).
    pub pps: Option<f64>,
    /// CPU seconds of the two gateway processes per GB carried.
    pub gateway_s_per_gb: Option<f64>,
    /// UDP: a confirming trial passed (always true for TCP).
    pub confirmed: bool,
    /// UDP: the probe at the cap passed, so this is a lower bound.
    pub at_max: bool,
    /// UDP: what the generator offered when asked for the cap, packets/s
    /// (the search's ceiling when lower than the cap).
    pub generator_pps: Option<f64>,
    /// Share of the receiving gateway's decapsulations done by its
    /// busiest worker (Esparto only; 1.0 = all on one worker).
    pub decap_busiest_share: Option<f64>,
    /// The same for the sending gateway's encapsulations.
    pub encap_busiest_share: Option<f64>,
}

impl Figure {
    /// The number the ratio is taken of: packets/s for UDP, Mbit/s for TCP.
    pub fn value(&self) -> f64 {
        self.pps.unwrap_or(self.mbps)
    }
}

fn shares(w: Option<&WorkerSplit>) -> (Option<f64>, Option<f64>) {
    w.map_or((None, None), |w| {
        (
            WorkerSplit::busiest_share(&w.east_decap),
            WorkerSplit::busiest_share(&w.west_encap),
        )
    })
}

/// The figures of `s` by what they measure.
pub fn figures(s: &Section) -> Vec<(Measure, Figure)> {
    let tcp = s.tcp.iter().map(|t| {
        let (decap, encap) = shares(t.workers.as_ref());
        (
            Measure::Tcp {
                streams: t.result.streams,
            },
            Figure {
                mbps: t.result.received_mbps,
                pps: None,
                gateway_s_per_gb: t.cpu.gateway_s_per_gb,
                confirmed: true,
                at_max: false,
                generator_pps: None,
                decap_busiest_share: decap,
                encap_busiest_share: encap,
            },
        )
    });
    let udp = s.udp.iter().map(|u| {
        let (decap, encap) = shares(u.workers.as_ref());
        (
            Measure::Udp { ip_size: u.ip_size },
            Figure {
                mbps: u.ip_mbps,
                pps: Some(u.rate_pps),
                gateway_s_per_gb: u.cpu.as_ref().and_then(|c| c.gateway_s_per_gb),
                confirmed: u.outcome.confirmed,
                at_max: u.outcome.at_max,
                generator_pps: u.generator_pps,
                decap_busiest_share: decap,
                encap_busiest_share: encap,
            },
        )
    });
    tcp.chain(udp).collect()
}

/// How far a ratio can be trusted, given which figures are lower bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// Both figures are measured knees.
    Exact,
    /// The subject's figure is a lower bound: the true ratio is at least this.
    Lower,
    /// The baseline's figure is a lower bound: the true ratio is at most this.
    Upper,
    /// Both are lower bounds: the ratio means nothing.
    Unknown,
}

impl Bound {
    pub(crate) fn of(baseline_at_max: bool, subject_at_max: bool) -> Self {
        match (baseline_at_max, subject_at_max) {
            (false, false) => Bound::Exact,
            (false, true) => Bound::Lower,
            (true, false) => Bound::Upper,
            (true, true) => Bound::Unknown,
        }
    }
}

/// Two systems side by side on one measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// What was measured.
    pub measure: Measure,
    /// Concurrent flows (UDP) — TCP rows give their stream count here too.
    pub flows: usize,
    /// The baseline's figure (strongSwan; one SA pair).
    pub baseline: Option<Figure>,
    /// The subject's figure (Esparto; per-CPU SAs).
    pub subject: Option<Figure>,
    /// `subject / baseline` (packets/s for UDP, Mbit/s for TCP).
    pub ratio: Option<f64>,
    /// Which way the ratio is bounded.
    pub ratio_bound: Bound,
}

impl Row {
    /// The ratio as a table cell: `12.00×`, `≥12.00×`, `≤12.00×`, `both ≥`, `-`.
    pub fn ratio_text(&self) -> String {
        match (self.ratio, self.ratio_bound) {
            (None, _) => "-".into(),
            (Some(_), Bound::Unknown) => "both ≥".into(),
            (Some(x), Bound::Exact) => format!("{x:.2}×"),
            (Some(x), Bound::Lower) => format!("≥{x:.2}×"),
            (Some(x), Bound::Upper) => format!("≤{x:.2}×"),
        }
    }

    /// Whether the ratio shows at least `goal` (`Some(true)`), shows less
    /// (`Some(false)`), or cannot tell (`None`).
    pub fn reaches(&self, goal: f64) -> Option<bool> {
        let x = self.ratio?;
        match self.ratio_bound {
            Bound::Exact => Some(x >= goal),
            Bound::Lower => (x >= goal).then_some(true),
            Bound::Upper => (x < goal).then_some(false),
            Bound::Unknown => None,
        }
    }
}

/// Pair the figures of two sections measurement by measurement (in the
/// subject's order, then anything only the baseline has).
pub fn rows(baseline: Option<&Section>, subject: Option<&Section>, flows: usize) -> Vec<Row> {
    let b = baseline.map(figures).unwrap_or_default();
    let s = subject.map(figures).unwrap_or_default();
    let mut order: Vec<Measure> = s.iter().map(|(m, _)| *m).collect();
    for (m, _) in &b {
        if !order.contains(m) {
            order.push(*m);
        }
    }
    order
        .into_iter()
        .map(|m| {
            let find =
                |v: &[(Measure, Figure)]| v.iter().find(|(x, _)| *x == m).map(|(_, f)| f.clone());
            let (bf, sf) = (find(&b), find(&s));
            let ratio = match (&bf, &sf) {
                (Some(b), Some(s)) if b.value() > 0.0 => Some(s.value() / b.value()),
                _ => None,
            };
            Row {
                measure: m,
                flows: match m {
                    Measure::Tcp { streams } => streams as usize,
                    Measure::Udp { .. } => flows,
                },
                ratio_bound: Bound::of(
                    bf.as_ref().is_some_and(|f| f.at_max),
                    sf.as_ref().is_some_and(|f| f.at_max),
                ),
                baseline: bf,
                subject: sf,
                ratio,
            }
        })
        .collect()
}

fn num(v: Option<f64>, width: usize, prec: usize) -> String {
    match v {
        Some(x) => format!("{x:>width$.prec$}"),
        None => format!("{:>width$}", "-"),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{:.0}%", x * 100.0))
}

/// One figure as table cells: Mbit/s, pps, CPU s/GB (and, with `split`,
/// the busiest decapsulating worker's share).
fn cells(f: Option<&Figure>, split: bool) -> String {
    let Some(f) = f else {
        let blank = format!("{:>9} {:>10} {:>8}", "-", "-", "-");
        return if split {
            format!("{blank} {:>6}", "-")
        } else {
            blank
        };
    };
    let mark = if f.at_max {
        "≥"
    } else if !f.confirmed {
        "?"
    } else {
        " "
    };
    let mut s = format!(
        "{mark}{} {} {}",
        num(Some(f.mbps), 8, 1),
        num(f.pps, 10, 0),
        num(f.gateway_s_per_gb, 8, 2)
    );
    if split {
        let _ = write!(s, " {:>6}", pct(f.decap_busiest_share));
    }
    s
}

/// The strongSwan/Esparto table.
pub(super) fn render_comparison(out: &mut String, rows: &[Row], baseline: &str, subject: &str) {
    let _ = writeln!(out, "  baseline: {baseline}");
    let _ = writeln!(out, "  subject:  {subject}");
    let _ = writeln!(
        out,
        "  {:<15} {:>9} {:>10} {:>8} │ {:>9} {:>10} {:>8} │ {:>8}",
        "", "base Mb/s", "pps", "CPU s/GB", "subj Mb/s", "pps", "CPU s/GB", "ratio"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "  {:<15} {} │ {} │ {:>8}",
            r.measure.name(),
            cells(r.baseline.as_ref(), false),
            cells(r.subject.as_ref(), false),
            r.ratio_text()
        );
    }
}

/// The per-CPU table (flows, and the busiest decapsulating worker's share).
pub(super) fn render_per_cpu(out: &mut String, rows: &[Row]) {
    let _ = writeln!(
        out,
        "  {:>5} {:<15} {:>9} {:>10} {:>8} {:>6} │ {:>9} {:>10} {:>8} {:>6} │ {:>8}",
        "flows",
        "",
        "1pair Mb/s",
        "pps",
        "CPU s/GB",
        "decap",
        "pCPU Mb/s",
        "pps",
        "CPU s/GB",
        "decap",
        "ratio"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "  {:>5} {:<15} {} │ {} │ {:>8}",
            r.flows,
            r.measure.name(),
            cells(r.baseline.as_ref(), true),
            cells(r.subject.as_ref(), true),
            r.ratio_text()
        );
    }
}

/// The legend printed under the tables.
pub const LEGEND: &str = "Mb/s: Mbit/s (TCP payload; inner IP bytes for UDP). pps: RFC 2544 zero-loss \
packets/s. CPU s/GB: CPU seconds of both gateway processes per 10^9 bytes carried (time \
accounting of the processes; kernel forwarding in softirq is not in it). ≥: the first probe, at \
the cap or at what the generator could offer (whichever was lower), passed — a lower bound. ?: no confirming trial passed. \
decap: share of the receiving gateway's decapsulations done by its busiest worker (100% = one \
worker did all). ratio: subject / baseline (≥ or ≤ when one figure is a lower bound; \"both ≥\": \
both are, the ratio says nothing).";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::baseline::{CpuFigure, TcpFigure, UdpFigure};
    use crate::cpu::Usage;
    use crate::traffic::TcpResult;
    use crate::zeroloss::Outcome;

    fn cpu(bytes: u64, s: f64) -> CpuFigure {
        CpuFigure {
            usage: Usage {
                wall_s: 1.0,
                processes: vec![],
                system_busy_s: s,
            },
            bytes,
            gateway_s_per_gb: Some(s / (bytes as f64 / 1e9)),
            system_s_per_gb: None,
        }
    }

    fn section(tcp_mbps: &[(u32, f64)], udp: &[(usize, f64, bool)]) -> Section {
        Section {
            label: "x".into(),
            tcp: tcp_mbps
                .iter()
                .map(|&(streams, mbps)| TcpFigure {
                    result: TcpResult {
                        streams,
                        seconds: 1.0,
                        received_mbps: mbps,
                        sent_mbps: mbps,
                        retransmits: 0,
                        bytes: (mbps * 1e6 / 8.0) as u64,
                    },
                    cpu: cpu(1_000_000_000, 2.0),
                    workers: Some(WorkerSplit {
                        west_encap: vec![50, 50],
                        east_decap: vec![100, 0],
                        ..WorkerSplit::default()
                    }),
                })
                .collect(),
            udp: udp
                .iter()
                .map(|&(ip_size, pps, at_max)| UdpFigure {
                    ip_size,
                    payload: ip_size - 28,
                    rate_pps: pps,
                    ip_mbps: pps * ip_size as f64 * 8.0 / 1e6,
                    outcome: Outcome {
                        rate_pps: pps,
                        confirmed: true,
                        at_max,
                        loss_tolerance: 0.0,
                        steps: vec![],
                    },
                    generator_pps: None,
                    cpu: None,
                    workers: None,
                })
                .collect(),
        }
    }

    #[test]
    fn rows_pair_by_measure_and_take_ratios() {
        let swan = section(
            &[(1, 250.0), (4, 200.0)],
            &[(64, 20_000.0, false), (1400, 8_000.0, false)],
        );
        let esp = section(
            &[(1, 3_000.0), (4, 2_500.0)],
            &[(64, 300_000.0, true), (1400, 0.0, false)],
        );
        let r = rows(Some(&swan), Some(&esp), 1);
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].measure, Measure::Tcp { streams: 1 });
        assert!((r[0].ratio.unwrap() - 12.0).abs() < 1e-9);
        assert_eq!(r[1].flows, 4);
        assert!((r[1].ratio.unwrap() - 12.5).abs() < 1e-9);
        assert_eq!(r[2].measure, Measure::Udp { ip_size: 64 });
        assert!((r[2].ratio.unwrap() - 15.0).abs() < 1e-9);
        assert_eq!(
            (r[0].ratio_bound, r[2].ratio_bound),
            (Bound::Exact, Bound::Lower)
        );
        assert_eq!(r[2].reaches(10.0), Some(true));
        assert_eq!(
            r[2].reaches(20.0),
            None,
            "a lower bound below the goal proves nothing"
        );
        assert_eq!(r[0].reaches(10.0), Some(true));
        assert_eq!(r[0].reaches(13.0), Some(false));
        // A subject figure of zero is a ratio of zero, not a missing one.
        assert_eq!(r[3].ratio, Some(0.0));
        assert_eq!(
            r[0].subject.as_ref().unwrap().decap_busiest_share,
            Some(1.0)
        );
        assert_eq!(
            r[0].subject.as_ref().unwrap().encap_busiest_share,
            Some(0.5)
        );
        assert_eq!(r[0].subject.as_ref().unwrap().gateway_s_per_gb, Some(2.0));
    }

    #[test]
    fn bounds_follow_the_figures_at_the_cap() {
        let swan = section(&[], &[(64, 20_000.0, true), (128, 20_000.0, true)]);
        let esp = section(&[], &[(64, 100_000.0, true), (128, 100_000.0, false)]);
        let r = rows(Some(&swan), Some(&esp), 1);
        assert_eq!(
            (r[0].ratio_bound, r[0].ratio_text()),
            (Bound::Unknown, "both ≥".to_string())
        );
        assert_eq!(r[0].reaches(1.0), None);
        assert_eq!(
            (r[1].ratio_bound, r[1].ratio_text()),
            (Bound::Upper, "≤5.00×".to_string())
        );
        assert_eq!(r[1].reaches(10.0), Some(false));
        assert_eq!(r[1].reaches(2.0), None);
    }

    #[test]
    fn a_missing_side_gives_no_ratio() {
        let esp = section(&[(1, 3_000.0)], &[(64, 300_000.0, false)]);
        let r = rows(None, Some(&esp), 2);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|x| x.ratio.is_none() && x.baseline.is_none()));
        assert_eq!(r[1].flows, 2);
        let zero = section(&[(1, 0.0)], &[]);
        assert_eq!(rows(Some(&zero), Some(&esp), 1)[0].ratio, None);
        // Measures only the baseline has still get a row.
        let swan = section(&[(1, 250.0), (8, 100.0)], &[]);
        let r = rows(Some(&swan), Some(&esp), 1);
        assert!(
            r.iter()
                .any(|x| x.measure == Measure::Tcp { streams: 8 } && x.subject.is_none())
        );
    }

    #[test]
    fn rendering_marks_bounds() {
        let swan = section(&[(1, 250.0)], &[(64, 20_000.0, false)]);
        let esp = section(&[(1, 3_000.0)], &[(64, 300_000.0, true)]);
        let r = rows(Some(&swan), Some(&esp), 1);
        let mut out = String::new();
        render_comparison(&mut out, &r, "strongSwan", "Esparto");
        assert!(out.contains("12.00×"), "{out}");
        assert!(out.contains("≥15.00×"), "{out}");
        assert!(out.contains("≥   153.6"), "{out}");
        let mut out = String::new();
        render_per_cpu(&mut out, &r);
        assert!(out.contains("100%"), "{out}");
    }

    #[test]
    fn cpuinfo_model() {
        let text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9R45\nprocessor\t: 1\n";
        assert_eq!(cpu_model(text).as_deref(), Some("AMD EPYC 9R45"));
        assert_eq!(cpu_model("processor : 0\n"), None);
        let m = Machine::now();
        assert!(!m.kernel.is_empty() && !m.loadavg_start.is_empty());
    }
}
