//! `esparto-testbed bench tunnel`: end-to-end throughput through two gateways,
//! Esparto against strongSwan, in one run on one machine.
//!
//! The topology is the test bed's (`host-west — gw-west ══ gw-east —
//! host-east`, four network namespaces), built afresh for every section so
//! no section inherits another's state. The measurements are the LANCOM
//! paper's and RFC 2544's (§26.1 throughput: the highest offered rate with
//! no loss, found by binary search): TCP throughput with iperf3, and the
//! zero-loss UDP rate per inner IP packet size (64 … 1400 bytes), with the
//! CPU time the two gateway processes spent per GB carried. Sections:
//!
//! 1. the plain routed path (no IPsec), for context;
//! 2. strongSwan 5.9 `kernel-libipsec` ↔ strongSwan (userspace ESP, as
//!    Esparto), IKE `aes256gcm16-prfsha256-x25519`, ESP `aes256gcm16`;
//! 3. Esparto ↔ Esparto with the same proposals, IKEv2 PSK, as configured
//!    by default: a Child SA per worker (RFC 9611; strongSwan 5.9 cannot
//!    do this, which is the point). Sections 1–3 offer UDP on
//!    `comparison_flows` generator flows (default 4): with one flow the
//!    generator's single sending thread caps the rate near the routed
//!    path's ceiling, whatever the gateways can do;
//! 4. Esparto with per-CPU SAs (RFC 9611: a fallback SA plus one Child SA
//!    per worker) against one SA pair, with 1, 2 and 8 flows: TCP with as
//!    many streams and zero-loss UDP at 1400 and 64 bytes with as many
//!    generator flows. Both layouts are keyed the same way and up at the
//!    same time, and the measurements alternate between them, flow count
//!    by flow count, so that drift in the machine's load hits both alike.
//!
//! **The LAN links** are set up as a gateway's multi-queue NIC would be
//! (`Options::lan_gro`, on unless `--no-lan-gro`): a queue per CPU with
//! XPS, GRO and UDP GRO forwarding on the gateways' LAN ends, the same for
//! every section. A burst of one flow's small UDP packets then reaches a
//! gateway as one GSO packet; Esparto's TUN (with USO) takes it in one
//! read, strongSwan's (no offloads) has it segmented again first. With
//! `--no-lan-gro` every UDP packet reaches the TUN alone.
//!
//! **Worker placement** (`Options::east_cpus_shifted`, on unless
//! `--same-cpus`). A flow that gw-west's worker *k* encrypts is decrypted
//! by gw-east's worker *k* (each worker's Child SA pairs with the peer's
//! worker of the same index). Both daemons would pin worker *k* to the
//! *k*-th CPU, so on this one machine both ends of every flow would share
//! a CPU, which two gateways never do. gw-east's CPUs are therefore
//! shifted by one ([`crate::esparto::shifted_cpus`]). One flow
//! then has a CPU per gateway, as on two machines, and every hand-over
//! between the gateways wakes a thread on the other CPU, as a wire would,
//! instead of on the same one. strongSwan's threads are not pinned.
//!
//! **Caps per section.** The search starts with a probe at a cap. A cap
//! tuned for strongSwan (whose queues are unbounded, so offering 10× its
//! capacity only fills memory) would make Esparto's figure the cap itself,
//! so each section has its own ([`Caps`]). Above what the generator can
//! offer every request is the same blast, so each search first blasts at
//! the cap and, if the generator fell short, searches below what it did
//! offer (`baseline::Options::calibrate`). A figure whose first probe
//! passed is reported as a lower bound (`≥`): the generator, or the cap,
//! set it, not the gateways.
//!
//! **The machine.** Everything — generators, iperf3, both gateways, the
//! kernel's forwarding — shares the same CPUs (two here). The figures are
//! those of this system on this machine, with its load average printed
//! before and after; the ratios, measured side by side, are what carries
//! over.

mod options;
pub mod pair;
mod report;
pub mod save;
pub mod series;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

pub use options::{Args, Caps, Options, PER_CPU_LAYOUT};
pub use pair::{EspartoPair, Layout, static_pairs};
pub use report::{Bound, Figure, LEGEND, Machine, Measure, Row, figures, rows};
pub(crate) use report::loadavg as report_loadavg;

use crate::baseline::{self, Section};
use crate::missing;
use crate::topology::Offloads;

/// The per-CPU comparison for one flow count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowSections {
    /// Flows (UDP) and streams (TCP).
    pub flows: usize,
    /// One SA pair.
    pub one_pair: Option<Section>,
    /// Per-CPU SAs.
    pub per_cpu: Option<Section>,
}

/// Per-CPU SAs against one SA pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerCpu {
    /// The per-CPU layout.
    pub layout: String,
    /// The one-pair layout.
    pub one_pair_layout: String,
    /// SAs gw-west held, per-CPU layout.
    pub per_cpu_sas: Option<String>,
    /// SAs gw-west held, one-pair layout.
    pub one_pair_sas: Option<String>,
    /// The raw sections by flow count.
    pub sections: Vec<FlowSections>,
    /// baseline = one pair, subject = per-CPU.
    pub rows: Vec<Row>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The command line, as typed.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The options in force.
    pub options: Options,
    /// Unix time at the start.
    pub started_unix: u64,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// The plain routed path (no IPsec).
    pub routed: Option<Section>,
    /// strongSwan ↔ strongSwan.
    pub strongswan: Option<Section>,
    /// Esparto ↔ Esparto, IKEv2, as configured by default (per-CPU Child SAs).
    pub esparto: Option<Section>,
    /// SAs gw-west held in that section.
    pub esparto_sas: Option<String>,
    /// Esparto's section ran before strongSwan's (`--runs` alternates).
    #[serde(default)]
    pub esparto_first: bool,
    /// baseline = strongSwan, subject = Esparto.
    pub comparison: Vec<Row>,
    /// Per-CPU SAs against one pair.
    pub per_cpu: Option<PerCpu>,
    /// Sections that failed (the run goes on without them).
    pub errors: Vec<String>,
}

/// `esparto-testbed bench tunnel` with the `esparto` binary at `bin`: run,
/// print the tables (or the JSON), and fail if any section failed.
pub fn main(args: &Args, bin: &Path) -> Result<ExitCode> {
    let opts = args.options()?;
    if let Some(path) = &args.svg {
        crate::plot::check_destination(path)?;
    }
    crate::clean_up_on_signal("esparto-testbed bench tunnel")?;
    if args.runs > 1 {
        return main_series(bin, &opts, args);
    }
    let report = run(bin, &opts, false)?;
    if let Some(dir) = args.save.dir() {
        save_run(&report, dir);
    }
    if let Some(path) = &args.svg {
        draw(path, || Ok(crate::plot::TunnelChart::of_report(&report)));
    }
    super::finish(&report, &render(&report), args.output.json, report.errors.is_empty())
}

/// `--runs N`: each run's tables as it ends (on stderr with `--json`), then
/// the summary; with `--json` one [`series::Series`] on stdout.
fn main_series(bin: &Path, opts: &Options, args: &Args) -> Result<ExitCode> {
    let n = args.runs as usize;
    let mut runs = Vec::with_capacity(n);
    for k in 1..=n {
        // Every other run measures Esparto first, so that a drift in the
        // machine's state over a run does not always favour the same side.
        let esparto_first = k % 2 == 0;
        eprintln!(
            "esparto-testbed bench tunnel: run {k} of {n} ({} first)",
            if esparto_first { "Esparto" } else { "strongSwan" }
        );
        let report = run(bin, opts, esparto_first)?;
        if let Some(dir) = args.save.dir() {
            save_run(&report, dir);
        }
        let text = render(&report);
        if args.output.json {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
        runs.push(report);
    }
    if let Some(path) = &args.svg {
        draw(path, || crate::plot::TunnelChart::of_runs(&runs));
    }
    let summary = series::summarise(&runs);
    let text = series::render(&summary, n);
    let failed = runs.iter().any(|r| !r.errors.is_empty());
    if args.output.json {
        eprint!("{text}");
        println!("{}", serde_json::to_string_pretty(&series::Series { runs, summary })?);
    } else {
        print!("{text}");
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `--save`: keeps the run for `esparto plan`; a failure to save is
/// reported, and the run's figures are still printed.
fn save_run(report: &Report, dir: &Path) {
    match save::save(report, dir) {
        Ok(path) => eprintln!("esparto-testbed bench tunnel: saved {}", path.display()),
        Err(e) => eprintln!("esparto-testbed bench tunnel: {e:#}"),
    }
}

/// `--svg`: a failure to draw is reported, and the run's figures are still
/// printed.
fn draw(path: &Path, chart: impl FnOnce() -> Result<crate::plot::TunnelChart>) {
    match chart().and_then(|c| c.write(path)) {
        Ok(()) => eprintln!("esparto-testbed bench tunnel: wrote {}", path.display()),
        Err(e) => eprintln!("esparto-testbed bench tunnel: --svg: {e:#}"),
    }
}

/// Log progress to stderr.
fn progress(t0: Instant, what: &str) {
    eprintln!("[{:>6.1} s] {what}", t0.elapsed().as_secs_f64());
}

/// Run `f`; on error record it and carry on.
fn attempt<T>(errors: &mut Vec<String>, what: &str, f: impl FnOnce() -> Result<T>) -> Option<T> {
    match f() {
        Ok(v) => Some(v),
        Err(e) => {
            let m = format!("{what}: {e:#}");
            eprintln!("esparto-testbed bench tunnel: {m}");
            errors.push(m);
            None
        }
    }
}

/// Run the benchmark with the `esparto` binary at `bin` for the gateways:
/// routed, strongSwan, Esparto, per-CPU (Esparto before strongSwan with
/// `esparto_first`).
pub fn run(bin: &Path, opts: &Options, esparto_first: bool) -> Result<Report> {
    opts.validate()?;
    let m = missing(opts.strongswan);
    if !m.is_empty() {
        bail!(
            "esparto-testbed bench tunnel needs {} (run as root; `make test` installs the tools)",
            m.join(", ")
        );
    }
    let t0 = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut machine = Machine::now();
    let mut errors = Vec::new();
    let main_opts = |caps| opts.section(caps, opts.tcp_streams.clone(), opts.sizes.clone(), opts.comparison_flows);

    let routed = if opts.routed {
        progress(t0, "routed path, no IPsec");
        attempt(&mut errors, "routed", || {
            baseline::routed(&main_opts(opts.routed_caps), Offloads::default())
        })
    } else {
        None
    };

    if opts.strongswan {
        machine.strongswan = Some(baseline::charon_version());
    }
    let strongswan_section = |errors: &mut Vec<String>| {
        if !opts.strongswan {
            return None;
        }
        progress(t0, "strongSwan ↔ strongSwan");
        attempt(errors, "strongSwan", || baseline::tunnel(&main_opts(opts.strongswan_caps)))
    };
    let esparto_section = |errors: &mut Vec<String>| {
        progress(t0, "Esparto ↔ Esparto, IKEv2, per-CPU Child SAs");
        attempt(errors, "Esparto", || {
            let p = EspartoPair::up(
                bin,
                opts.per_cpu_layout,
                opts.workers,
                &opts.ike_proposal,
                &opts.esp_proposal,
                opts.east_cpus()?,
            )?;
            let s = p.measure(&main_opts(opts.esparto_caps))?;
            let sas = p.sa_summary().to_string();
            p.down()?;
            Ok((s, sas))
        })
    };
    let (strongswan, esparto) = if esparto_first {
        let e = esparto_section(&mut errors);
        (strongswan_section(&mut errors), e)
    } else {
        let s = strongswan_section(&mut errors);
        (s, esparto_section(&mut errors))
    };
    let (esparto, esparto_sas) = match esparto {
        Some((s, sas)) => (Some(s), Some(sas)),
        None => (None, None),
    };
    let comparison = rows(strongswan.as_ref(), esparto.as_ref(), opts.comparison_flows);

    let per_cpu = if opts.flows.is_empty() {
        None
    } else {
        Some(per_cpu(bin, opts, t0, &mut errors))
    };

    machine.loadavg_end = report::loadavg();
    Ok(Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        options: opts.clone(),
        started_unix,
        seconds: t0.elapsed().as_secs_f64(),
        routed,
        strongswan,
        esparto,
        esparto_sas,
        esparto_first,
        comparison,
        per_cpu,
        errors,
    })
}

/// Section 4: both layouts up side by side, measured alternately.
fn per_cpu(bin: &Path, opts: &Options, t0: Instant, errors: &mut Vec<String>) -> PerCpu {
    let (pcpu_layout, one_layout) = (
        opts.per_cpu_layout.with_per_cpu(),
        opts.per_cpu_layout.one_pair(),
    );
    progress(t0, "per-CPU SAs against one SA pair: bringing both up");
    let up = |l: Layout| {
        EspartoPair::up(
            bin,
            l,
            opts.workers,
            &opts.ike_proposal,
            &opts.esp_proposal,
            opts.east_cpus()?,
        )
    };
    let pcpu = attempt(errors, "per-CPU SAs", || up(pcpu_layout));
    let one = attempt(errors, "one SA pair (per-CPU comparison)", || {
        up(one_layout)
    });
    let mut sections = Vec::new();
    let mut rows_all = Vec::new();
    for &n in &opts.flows {
        let o = opts.section(
            opts.esparto_caps,
            vec![n as u32],
            opts.per_cpu_sizes.clone(),
            n,
        );
        let mut measure = |p: &Option<EspartoPair>, what: &str| {
            let p = p.as_ref()?;
            progress(t0, &format!("{what}, {n} flow(s)"));
            attempt(errors, &format!("{what}, {n} flows"), || p.measure(&o))
        };
        // Alternate which goes first, so neither always follows the other.
        let (per_cpu, one_pair) = if sections.len() % 2 == 0 {
            let a = measure(&pcpu, "per-CPU SAs");
            (a, measure(&one, "one SA pair"))
        } else {
            let b = measure(&one, "one SA pair");
            (measure(&pcpu, "per-CPU SAs"), b)
        };
        rows_all.extend(rows(one_pair.as_ref(), per_cpu.as_ref(), n));
        sections.push(FlowSections {
            flows: n,
            one_pair,
            per_cpu,
        });
    }
    let per_cpu_sas = pcpu.as_ref().map(|p| p.sa_summary().to_string());
    let one_pair_sas = one.as_ref().map(|p| p.sa_summary().to_string());
    for (p, what) in [(pcpu, "per-CPU SAs"), (one, "one SA pair")] {
        if let Some(p) = p {
            attempt(errors, &format!("stopping {what}"), || p.down());
        }
    }
    PerCpu {
        layout: pcpu_layout.describe(opts.workers),
        one_pair_layout: one_layout.describe(opts.workers),
        per_cpu_sas,
        one_pair_sas,
        sections,
        rows: rows_all,
    }
}

/// The report as text: machine, options, the tables, the targets.
pub fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let m = &r.machine;
    let o_ = &r.options;
    let _ = writeln!(
        o,
        "esparto-testbed bench tunnel: host-west → gw-west ══ ESP-in-UDP ══ gw-east → host-east"
    );
    let _ = writeln!(
        o,
        "machine: {} CPUs ({} allowed), {}, kernel {}; load average {} at start, {} at end",
        m.cpus, m.cpus_allowed, m.cpu_model, m.kernel, m.loadavg_start, m.loadavg_end
    );
    let _ = writeln!(
        o,
        "software: esparto {}{}; {} s wall clock",
        m.esparto,
        m.strongswan
            .as_ref()
            .map(|s| format!(", {s} (kernel-libipsec)"))
            .unwrap_or_default(),
        r.seconds.round()
    );
    let _ = writeln!(o, "command: {}", r.command);
    if r.esparto_first {
        let _ = writeln!(o, "order: Esparto measured before strongSwan in this run");
    }
    let s = &o_.search;
    let _ = writeln!(
        o,
        "options: {}TCP {} s; sizes {:?}; zero-loss search {:.2} s trials, {:.2} s settle, resolution {:.0} %, loss tolerance {}, \
         {} confirmation retries, from {} pps; caps: strongSwan {} pps / {} Mbit/s, Esparto {} pps / {} Mbit/s; \
         IKE {} / ESP {}; {} workers per Esparto gateway; each search capped at what the generator offers; \
         per-CPU comparison: flows {:?}, sizes {:?}, {}; LAN links: {}",
        if o_.quick { "--quick: " } else { "" },
        o_.tcp_seconds,
        o_.sizes,
        s.trial.as_secs_f64(),
        s.settle.as_secs_f64(),
        s.resolution * 100.0,
        s.loss_tolerance,
        s.confirm_retries,
        s.min_pps,
        o_.strongswan_caps.max_pps,
        o_.strongswan_caps.max_mbps,
        o_.esparto_caps.max_pps,
        o_.esparto_caps.max_mbps,
        o_.ike_proposal,
        o_.esp_proposal,
        o_.workers,
        o_.flows,
        o_.per_cpu_sizes,
        if o_.per_cpu_layout.ike() {
            "keyed by IKEv2"
        } else {
            "statically keyed"
        },
        if o_.lan_gro {
            format!("{} (--lan-gro)", crate::topology::LAN_AS_NICS)
        } else {
            "veth defaults: one queue, no GRO (--no-lan-gro)".to_string()
        }
    );
    let _ = writeln!(
        o,
        "Esparto's workers: gw-west's worker k on the k-th CPU allowed, gw-east's {}",
        if o_.east_cpus_shifted {
            "on the next one, so a flow's two ends never share a CPU, as on two machines"
        } else {
            "on the k-th too, so each flow's two ends share a CPU (--same-cpus)"
        }
    );
    let _ = writeln!(
        o,
        "note: generators, iperf3, both gateways and the kernel's forwarding share these CPUs."
    );
    if let Some(rt) = &r.routed {
        let _ = writeln!(o, "\n0. context: {}", baseline::render(rt).trim_end());
    }
    let _ = writeln!(
        o,
        "\n1. strongSwan vs Esparto (UDP: {} flows; Esparto with its default per-CPU Child SAs)",
        r.options.comparison_flows
    );
    let base = r
        .strongswan
        .as_ref()
        .map_or("(not measured)".to_string(), |s| s.label.clone());
    let subj = r.esparto.as_ref().map_or("(failed)".to_string(), |s| {
        format!(
            "{} [gw-west SAs: {}]",
            s.label,
            r.esparto_sas.as_deref().unwrap_or("?")
        )
    });
    report::render_comparison(&mut o, &r.comparison, &base, &subj);
    if let Some(p) = &r.per_cpu {
        let _ = writeln!(
            o,
            "\n2. per-CPU SAs vs one SA pair (Esparto ↔ Esparto; TCP with as many streams as flows)"
        );
        let _ = writeln!(
            o,
            "  baseline: {} [gw-west SAs: {}]",
            p.one_pair_layout,
            p.one_pair_sas.as_deref().unwrap_or("?")
        );
        let _ = writeln!(
            o,
            "  subject:  {} [gw-west SAs: {}]",
            p.layout,
            p.per_cpu_sas.as_deref().unwrap_or("?")
        );
        report::render_per_cpu(&mut o, &p.rows);
    }
    let _ = writeln!(o, "\n{LEGEND}");
    let _ = writeln!(o, "\ntargets (measured side by side in this run):");
    for row in &r.comparison {
        if let Some(goal) = row.measure.goal() {
            let _ = writeln!(
                o,
                "  {:<15} Esparto/strongSwan ≥ {goal:.0}: {}",
                row.measure.name(),
                verdict(row, goal)
            );
        }
    }
    if let Some(p) = &r.per_cpu {
        for row in p.rows.iter().filter(|x| x.flows >= 2) {
            let _ = writeln!(
                o,
                "  {} flows, {}: per-CPU / one pair = {}",
                row.flows,
                row.measure.name(),
                row.ratio_text()
            );
        }
    }
    for e in &r.errors {
        let _ = writeln!(o, "ERROR: {e}");
    }
    o
}

fn verdict(row: &Row, goal: f64) -> String {
    let text = row.ratio_text();
    match row.reaches(goal) {
        Some(true) => format!("{text} — met"),
        Some(false) => format!("{text} — not met"),
        None if row.ratio.is_none() => "no ratio (a side is missing)".into(),
        None => format!("{text} — undetermined (a figure is only a lower bound)"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A `--quick` report with `comparison` and nothing else measured.
    pub(crate) fn report(comparison: Vec<Row>) -> Report {
        Report {
            command: "esparto-testbed bench tunnel".into(),
            machine: Machine::now(),
            options: Options::quick(2),
            started_unix: 0,
            seconds: 1.0,
            routed: None,
            strongswan: None,
            esparto: None,
            esparto_sas: None,
            esparto_first: false,
            comparison,
            per_cpu: None,
            errors: vec![],
        }
    }

    #[test]
    fn report_round_trips_and_renders() {
        let r = Report { errors: vec!["x: y".into()], ..report(vec![]) };
        assert!(!render(&r).contains("order:"), "strongSwan first is the default, not worth a line");
        let first = Report { esparto_first: true, ..r.clone() };
        assert!(render(&first).contains("order: Esparto measured before strongSwan"));
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&j).unwrap(), r);
        let t = render(&r);
        assert!(t.contains("ERROR: x: y") && t.contains("--quick"), "{t}");
    }
}
