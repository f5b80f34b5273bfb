//! The test bed's charts: `esparto-testbed bench tunnel --svg`, `bench voip
//! --svg`, and `esparto-testbed plot tunnel|dataplane|voip --from FILE --svg OUT`, which
//! redraws a chart from results saved earlier without measuring again.
//!
//! The drawing itself is `esparto-bench`'s ([`esparto_bench::plot`]), so that
//! `esparto bench dataplane --svg` on a gateway and `esparto-testbed plot
//! dataplane` here draw the same chart. This module turns the test bed's
//! reports into the charts' plain series: per system, the RFC 2544
//! zero-loss rate at each inner packet size, flagged where it is only a
//! lower bound (the generator or the cap set it). Over several runs
//! (`--runs N`) a point is the median of the runs' figures, and a lower
//! bound if any run's was.
//!
//! `--from` reads what the benchmarks write: `bench tunnel --json` (one run
//! or `--runs N`), `bench tunnel --save` and `esparto bench dataplane --sas
//! … --json|--save`. A file of another kind or an older format is refused,
//! named; every chart's footnote says which machine, date and command its
//! figures came from.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use esparto_bench::bench::dataplane::AgilityRow;
use esparto_bench::plot::{SaSeries, SizePoint, SizeSeries};
use esparto_bench::results::{self, AgilityData, Saved, TunnelData};
use serde_json::Value;

use crate::baseline::Section;
use crate::bench::tunnel::Report;
use crate::bench::tunnel::series::Series;

pub use esparto_bench::plot::{CodecCalls, check_destination, voip_calls, voip_calls_svg};

/// `esparto-testbed plot …`: a chart from saved results.
#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Throughput and zero-loss packet rate against packet size (routed, strongSwan, Esparto)
    /// from `bench tunnel --json` or `--save` output.
    Tunnel(TunnelArgs),
    /// ESP rate against the number of active SAs from `esparto bench dataplane --sas … --json` or `--save` output.
    Dataplane(DataplaneArgs),
    /// Calls per codec, Esparto beside strongSwan, from `bench voip --json` or `--save` output.
    Voip(VoipArgs),
}

/// `esparto-testbed plot tunnel`.
#[derive(Debug, clap::Args)]
pub struct TunnelArgs {
    /// The results: `bench tunnel --json` (one run or --runs N) or a file `--save` wrote.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The chart to write.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
}

/// `esparto-testbed plot voip`.
#[derive(Debug, clap::Args)]
pub struct VoipArgs {
    /// The results: `bench voip --json` or a file `--save` wrote.
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The chart to write.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
}

/// `esparto-testbed plot dataplane`.
#[derive(Debug, clap::Args)]
pub struct DataplaneArgs {
    /// The results: `esparto bench dataplane --sas … --json` or a file `--save` wrote;
    /// repeat to draw several runs on one chart (round-robin and zipf; two builds: a line per file).
    #[arg(long, value_name = "FILE", required = true)]
    pub from: Vec<PathBuf>,
    /// The chart to write.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
}

/// Runs `esparto-testbed plot …`.
pub fn main(cmd: &Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Tunnel(a) => {
            let chart = load_tunnel(&a.from)?;
            chart.write(&a.svg)?;
            eprintln!("wrote {} from {}", a.svg.display(), a.from.display());
        }
        Cmd::Voip(a) => {
            let r = load_voip(&a.from)?;
            let bars = crate::bench::voip::chart(&r);
            if bars.is_empty() {
                bail!("{}: no codec was measured through both Esparto and strongSwan", a.from.display());
            }
            voip_calls(&a.svg, &crate::bench::voip::chart_note(&r), &bars)?;
            eprintln!("wrote {} from {}", a.svg.display(), a.from.display());
        }
        Cmd::Dataplane(a) => {
            let mut series = Vec::new();
            let mut notes = Vec::new();
            for f in &a.from {
                let (rows, note) = load_agility(f)?;
                series.push((f.as_path(), esparto_bench::plot::agility_series(&rows)));
                notes.push(note);
            }
            notes.dedup();
            esparto_bench::plot::active_sas(
                &a.svg,
                "Key agility: ESP rate against active SAs (in process)",
                &notes.join(" | "),
                &merge_series(series),
            )?;
            eprintln!("wrote {}", a.svg.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines of several files on one chart: a size and mix that more than
/// one file measured (two builds, two days) is a line per file, named
/// after its file.
fn merge_series(files: Vec<(&Path, Vec<SaSeries>)>) -> Vec<SaSeries> {
    let names: Vec<&str> = files.iter().flat_map(|(_, s)| s.iter().map(|x| x.name.as_str())).collect();
    let shared: Vec<String> =
        names.iter().filter(|n| names.iter().filter(|m| m == n).count() > 1).map(|n| n.to_string()).collect();
    files
        .into_iter()
        .flat_map(|(path, series)| {
            let stem = path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned());
            let shared = &shared;
            series.into_iter().map(move |mut s| {
                if shared.contains(&s.name) {
                    s.name = format!("{}, {stem}", s.name);
                }
                s
            })
        })
        .collect()
}

/// A packet-size chart ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct TunnelChart {
    /// The title.
    pub title: String,
    /// Where the figures came from.
    pub note: String,
    /// Esparto, strongSwan, routed (those measured).
    pub series: Vec<SizeSeries>,
}

impl TunnelChart {
    /// One run.
    pub fn of_report(r: &Report) -> Self {
        let sections = sections(r);
        Self {
            title: title(r),
            note: note(r, ""),
            series: sections.into_iter().map(|(_, name, s)| SizeSeries { name, points: points(s) }).collect(),
        }
    }

    /// Several runs (`--runs N`): the median at each size.
    pub fn of_runs(runs: &[Report]) -> Result<Self> {
        let Some(first) = runs.first() else { bail!("no run to plot") };
        // Per system (in drawing order): its legend and each run's points.
        let mut series: Vec<Option<(String, Vec<Vec<SizePoint>>)>> = vec![None; SYSTEMS];
        for r in runs {
            for (k, name, s) in sections(r) {
                series[k].get_or_insert_with(|| (name, Vec::new())).1.push(points(s));
            }
        }
        Ok(Self {
            title: format!("{}, median of {} runs", title(first), runs.len()),
            note: note(first, &format!(" (first of {} runs)", runs.len())),
            series: series.into_iter().flatten().map(|(name, runs)| SizeSeries { name, points: medians(&runs) }).collect(),
        })
    }

    /// Draws the chart into `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        esparto_bench::plot::packet_sizes(path, &self.title, &self.note, &self.series)
    }
}

/// Systems a run measures: Esparto, strongSwan, routed.
const SYSTEMS: usize = 3;

/// The measured sections of `r` with their place in the drawing order
/// (which sets their colours) and their legends.
fn sections(r: &Report) -> Vec<(usize, String, &Section)> {
    let swan = r.machine.strongswan.as_deref().map_or("strongSwan".to_string(), |v| {
        // charon prints "Linux strongSwan 5.9.8" (or "U5.9.8/K6.1.0"): keep the version.
        let v = v.split_whitespace().map(|w| w.trim_start_matches('U')).find(|w| w.starts_with(|c: char| c.is_ascii_digit()));
        v.and_then(|v| v.split('/').next()).map_or("strongSwan".into(), |v| format!("strongSwan {v}"))
    });
    let all: [(String, Option<&Section>); SYSTEMS] = [
        ("Esparto (per-CPU Child SAs)".to_string(), r.esparto.as_ref()),
        (format!("{swan} (kernel-libipsec)"), r.strongswan.as_ref()),
        ("routed (no IPsec)".to_string(), r.routed.as_ref()),
    ];
    all.into_iter().enumerate().filter_map(|(k, (n, s))| Some((k, n, s?))).collect()
}

fn points(s: &Section) -> Vec<SizePoint> {
    s.udp
        .iter()
        .map(|u| SizePoint { ip_size: u.ip_size, mbps: u.ip_mbps, pps: u.rate_pps, lower_bound: u.outcome.at_max })
        .collect()
}

/// The median rate at each size over the runs; a lower bound if any run's was.
fn medians(runs: &[Vec<SizePoint>]) -> Vec<SizePoint> {
    let mut sizes: Vec<usize> = runs.iter().flatten().map(|p| p.ip_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|size| {
            let at: Vec<&SizePoint> = runs.iter().flatten().filter(|p| p.ip_size == size).collect();
            let pps = crate::bench::median(&at.iter().map(|p| p.pps).collect::<Vec<_>>());
            SizePoint {
                ip_size: size,
                mbps: pps * size as f64 * 8.0 / 1e6,
                pps,
                lower_bound: at.iter().any(|p| p.lower_bound),
            }
        })
        .collect()
}

fn title(r: &Report) -> String {
    format!(
        "Zero-loss throughput and packet rate by packet size (RFC 2544), {} UDP flows, {}",
        r.options.comparison_flows, r.options.esp_proposal
    )
}

fn note(r: &Report, which: &str) -> String {
    let m = &r.machine;
    let date = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(r.started_unix));
    format!(
        "{}, {} CPUs, kernel {}; load {} → {}; {date}{which}; {}",
        m.cpu_model, m.cpus_allowed, m.kernel, m.loadavg_start, m.loadavg_end, r.command
    )
}

/// Reads a results file as JSON, naming it in every error.
fn read_json(path: &Path) -> Result<Value> {
    let len = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?.len();
    if len > results::MAX_FILE_BYTES {
        bail!("{}: {len} bytes is too large for a results file", path.display());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
}

/// The saved-results envelope's data, if `v` is one (of the current format
/// and the kind `want`).
fn envelope<T: serde::de::DeserializeOwned>(path: &Path, v: &Value, want: results::Kind) -> Result<Option<Saved<T>>> {
    let Some(kind) = v.get("kind") else { return Ok(None) };
    let format = v.get("format").and_then(Value::as_u64);
    if format != Some(u64::from(results::FORMAT)) {
        bail!(
            "{}: results format {} (this build reads format {})",
            path.display(),
            format.map_or("unknown".into(), |f| f.to_string()),
            results::FORMAT
        );
    }
    let kind: results::Kind =
        serde_json::from_value(kind.clone()).with_context(|| format!("{}: unknown kind {kind}", path.display()))?;
    if kind != want {
        bail!("{}: results of `bench {kind}`, not of `bench {want}`", path.display());
    }
    let saved = serde_json::from_value(v.clone()).with_context(|| format!("{}: a damaged {want} results file", path.display()))?;
    Ok(Some(saved))
}

/// The chart of a `bench tunnel --json` (one run or `--runs N`) or
/// `--save` file.
pub fn load_tunnel(path: &Path) -> Result<TunnelChart> {
    let v = read_json(path)?;
    if let Some(saved) = envelope::<TunnelData>(path, &v, results::Kind::Tunnel)? {
        let r: Report = serde_json::from_value(saved.data.report)
            .with_context(|| format!("{}: the saved run's report is damaged", path.display()))?;
        return Ok(TunnelChart::of_report(&r));
    }
    if v.get("runs").is_some() {
        let s: Series = serde_json::from_value(v).with_context(|| format!("{}: a damaged --runs report", path.display()))?;
        return TunnelChart::of_runs(&s.runs);
    }
    let r: Report = serde_json::from_value(v).with_context(|| {
        format!("{}: not a `bench tunnel` report (--json, --runs N --json or --save)", path.display())
    })?;
    Ok(TunnelChart::of_report(&r))
}

/// The report of a `bench voip --json` or `--save` file.
pub fn load_voip(path: &Path) -> Result<crate::bench::voip::Report> {
    let v = read_json(path)?;
    if let Some(saved) = envelope::<crate::bench::voip::Report>(path, &v, results::Kind::Voip)? {
        return Ok(saved.data);
    }
    serde_json::from_value(v)
        .with_context(|| format!("{}: not a `bench voip` report (--json or --save)", path.display()))
}

/// The rows of an `esparto bench dataplane --sas … --json` or `--save` file,
/// and where they came from.
pub fn load_agility(path: &Path) -> Result<(Vec<AgilityRow>, String)> {
    let v = read_json(path)?;
    if v.get("kind").and_then(Value::as_str) == Some("dataplane") {
        bail!(
            "{}: results of `esparto bench dataplane` without --sas (rate by packet size), not against active SAs",
            path.display()
        );
    }
    if let Some(saved) = envelope::<AgilityData>(path, &v, results::Kind::Agility)? {
        let note = format!(
            "{}, {} worker(s); {}; load {}; {}; {}",
            saved.data.suite, saved.data.workers, saved.machine.cpu_model, saved.load_average, saved.date, saved.command
        );
        return Ok((saved.data.rows, note));
    }
    let rows: Vec<AgilityRow> = serde_json::from_value(v).with_context(|| {
        format!("{}: not `esparto bench dataplane --sas` results (--json or --save)", path.display())
    })?;
    let Some(first) = rows.first() else { bail!("{}: no rows", path.display()) };
    let note = format!("{}, {} worker(s); from {}", first.suite, first.workers, path.display());
    Ok((rows, note))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::baseline::UdpFigure;
    use crate::bench::tunnel::tests::report;
    use crate::zeroloss::Outcome;

    fn udp(ip_size: usize, rate_pps: f64, at_max: bool) -> UdpFigure {
        UdpFigure {
            ip_size,
            payload: ip_size - 28,
            rate_pps,
            ip_mbps: rate_pps * ip_size as f64 * 8.0 / 1e6,
            generator_pps: None,
            outcome: Outcome { rate_pps, confirmed: true, at_max, loss_tolerance: 0.0, steps: vec![] },
            cpu: None,
            workers: None,
        }
    }

    fn section(udp: Vec<UdpFigure>) -> Option<Section> {
        Some(Section { label: "x".into(), tcp: vec![], udp })
    }

    fn run(esparto_64: f64) -> Report {
        let mut r = report(vec![]);
        r.machine.strongswan = Some("Linux strongSwan 5.9.8".into());
        r.esparto = section(vec![udp(64, esparto_64, false), udp(1400, 200_000.0, true)]);
        r.strongswan = section(vec![udp(64, 25_000.0, false), udp(1400, 20_000.0, false)]);
        r.routed = section(vec![udp(64, 800_000.0, false)]);
        r
    }

    /// Text nodes of an SVG file (which must parse as XML).
    fn texts(path: &Path) -> Vec<String> {
        let svg = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        doc.descendants().filter_map(|n| n.text()).map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect()
    }

    #[test]
    fn a_run_becomes_three_series() {
        let c = TunnelChart::of_report(&run(500_000.0));
        assert_eq!(
            c.series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["Esparto (per-CPU Child SAs)", "strongSwan 5.9.8 (kernel-libipsec)", "routed (no IPsec)"]
        );
        assert_eq!(c.series[0].points[1], SizePoint { ip_size: 1400, mbps: 2240.0, pps: 200_000.0, lower_bound: true });
        assert!(c.note.contains("1970-01-01T00:00:00Z") && c.note.contains("esparto-testbed bench tunnel"), "{}", c.note);
        let mut u = run(1.0);
        u.machine.strongswan = Some("Linux strongSwan U5.9.8/K6.1.0-27-amd64".into());
        assert_eq!(TunnelChart::of_report(&u).series[1].name, "strongSwan 5.9.8 (kernel-libipsec)");
        u.machine.strongswan = Some("strongSwan (version unknown)".into());
        assert_eq!(TunnelChart::of_report(&u).series[1].name, "strongSwan (kernel-libipsec)");
        // strongSwan not measured: two series.
        let mut r = run(1.0);
        r.strongswan = None;
        assert_eq!(TunnelChart::of_report(&r).series.len(), 2);
    }

    #[test]
    fn runs_give_medians_and_keep_lower_bounds() {
        let runs = [run(300_000.0), run(500_000.0), run(400_000.0)];
        let c = TunnelChart::of_runs(&runs).unwrap();
        assert_eq!(c.series.len(), 3);
        let e = &c.series[0].points;
        assert_eq!((e[0].ip_size, e[0].pps, e[0].lower_bound), (64, 400_000.0, false));
        assert!(e[1].lower_bound);
        assert!(c.title.contains("median of 3 runs"));
        assert!(TunnelChart::of_runs(&[]).is_err());
        // A system missing from some runs keeps its place (and colour).
        let mut no_swan = run(1.0);
        no_swan.strongswan = None;
        let c = TunnelChart::of_runs(&[no_swan, run(1.0)]).unwrap();
        assert_eq!(c.series[1].name, "strongSwan 5.9.8 (kernel-libipsec)");
        assert_eq!(c.series[1].points[0].pps, 25_000.0);
        assert_eq!(c.series[2].name, "routed (no IPsec)");
    }

    #[test]
    fn every_tunnel_results_form_redraws() {
        let dir = tempfile::tempdir().unwrap();
        let r = run(500_000.0);
        let json = dir.path().join("run.json");
        std::fs::write(&json, serde_json::to_string(&r).unwrap()).unwrap();
        let series = dir.path().join("series.json");
        let s = Series { runs: vec![r.clone(), run(300_000.0)], summary: vec![] };
        std::fs::write(&series, serde_json::to_string(&s).unwrap()).unwrap();
        let saved = crate::bench::tunnel::save::save(&r, dir.path()).unwrap();
        for (from, name) in [(&json, "a"), (&series, "b"), (&saved, "c")] {
            let out = dir.path().join(format!("{name}.svg"));
            main(&Cmd::Tunnel(TunnelArgs { from: from.clone(), svg: out.clone() })).unwrap();
            let t = texts(&out);
            for s in ["Esparto (per-CPU Child SAs)", "strongSwan 5.9.8 (kernel-libipsec)", "routed (no IPsec)", "zero-loss packet rate, kpps (log)"] {
                assert!(t.iter().any(|x| x == s), "{from:?}: {s:?} missing from {t:?}");
            }
        }
    }

    #[test]
    fn wrong_or_damaged_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.json");
        let err = |f: &Path| format!("{:#}", load_tunnel(f).unwrap_err());
        std::fs::write(&f, "not json").unwrap();
        assert!(err(&f).contains("x.json: not JSON"), "{}", err(&f));
        std::fs::write(&f, r#"{"a": 1}"#).unwrap();
        assert!(err(&f).contains("not a `bench tunnel` report"), "{}", err(&f));
        std::fs::write(&f, r#"{"format": 0, "kind": "tunnel", "data": {}}"#).unwrap();
        assert!(err(&f).contains("results format 0"), "{}", err(&f));
        std::fs::write(&f, format!(r#"{{"format": {}, "kind": "agility", "data": {{}}}}"#, results::FORMAT)).unwrap();
        assert!(err(&f).contains("results of `bench agility`, not of `bench tunnel`"), "{}", err(&f));
        std::fs::write(&f, format!(r#"{{"format": {}, "kind": "dataplane", "data": {{}}}}"#, results::FORMAT)).unwrap();
        assert!(format!("{:#}", load_agility(&f).unwrap_err()).contains("without --sas"));
        assert!(err(&dir.path().join("missing.json")).contains("missing.json"));
    }

    #[test]
    fn agility_rows_and_saved_runs_redraw_together() {
        let row = |size, sas, mpps: f64| AgilityRow {
            size,
            sas,
            mix: esparto_bench::bench::dataplane::SaMix::Zipf,
            workers: 2,
            suite: "aes256gcm16".into(),
            mpps,
            gbps: mpps * size as f64 * 8.0 / 1e3,
            mpps_1: 1.0,
            ratio: 1.0,
            packets: 10,
            sas_used: sas,
            out_bytes_per_sa: None,
            in_bytes_per_sa: None,
            out_heap_per_sa: None,
            in_heap_per_sa: None,
            prefetch: true,
        };
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("rows.json");
        std::fs::write(&json, serde_json::to_string(&[row(64, 1, 1.0), row(64, 10_000, 0.7)]).unwrap()).unwrap();
        let data = AgilityData { suite: "aes256gcm16".into(), workers: 2, seconds: 0.5, runs: 3, rows: vec![row(1420, 1, 0.4), row(1420, 100, 0.39)] };
        let saved = results::save(dir.path(), "aes256gcm16", &results::envelope(results::Kind::Agility, data)).unwrap();
        let out = dir.path().join("sas.svg");
        main(&Cmd::Dataplane(DataplaneArgs { from: vec![json.clone(), saved], svg: out.clone() })).unwrap();
        let t = texts(&out);
        for s in ["64 B, zipf", "1420 B, zipf", "active SA pairs per worker (log)"] {
            assert!(t.iter().any(|x| x == s), "{s:?} missing from {t:?}");
        }
        assert!(t.iter().any(|x| x.contains("from ") && x.contains("rows.json")), "{t:?}");
        // The same size and mix from two files: a line each, named after its file.
        let again = dir.path().join("again.json");
        std::fs::write(&again, serde_json::to_string(&[row(64, 1, 0.9), row(64, 10_000, 0.8)]).unwrap()).unwrap();
        main(&Cmd::Dataplane(DataplaneArgs { from: vec![json, again], svg: out.clone() })).unwrap();
        let t = texts(&out);
        for s in ["64 B, zipf, rows", "64 B, zipf, again"] {
            assert!(t.iter().any(|x| x == s), "{s:?} missing from {t:?}");
        }
    }

    #[test]
    fn bench_tunnel_svg_needs_a_directory_before_measuring() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: crate::bench::tunnel::Args,
        }
        let cli = Cli::try_parse_from(["t", "--quick", "--svg", "/nonexistent-testbed-dir/t.svg"]).unwrap();
        assert_eq!(cli.a.svg.as_deref(), Some(Path::new("/nonexistent-testbed-dir/t.svg")));
        // The binary is never started: the check comes first.
        let e = crate::bench::tunnel::main(&cli.a, Path::new("/nonexistent/esparto")).unwrap_err();
        assert!(format!("{e:#}").contains("no directory /nonexistent-testbed-dir"), "{e:#}");
    }

    #[test]
    fn voip_calls_is_reachable_from_here() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("voip.svg");
        let calls = [CodecCalls {
            codec: "G.729/30 ms".into(),
            esparto_zero_loss: 1234,
            esparto_mos4: 1200,
            strongswan_zero_loss: 98,
            strongswan_mos4: 90,
        }];
        voip_calls(&out, "test", &calls).unwrap();
        let t = texts(&out);
        assert!(["G.729/30 ms", "1234", "98", "strongSwan, MOS ≥ 4.0"].iter().all(|s| t.iter().any(|x| x == s)), "{t:?}");
    }
}
