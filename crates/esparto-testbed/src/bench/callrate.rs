//! `esparto-testbed bench voip --rates SIZES`: the zero-loss packet rate of
//! call-like traffic, by IP packet size, for `esparto plan voip` to turn
//! into calls.
//!
//! `bench tunnel`'s RFC 2544 search offers a few bursty UDP flows; a
//! receiving kernel coalesces them (GRO) and a gateway reads them in
//! batches of one flow, so its zero-loss rate overstates what calls get.
//! Calls are hundreds of 5-tuples, each paced, interleaved, in both
//! directions at once. This search offers exactly that: the call generator
//! of `bench voip` ([`crate::callgen`]), at a synthetic stream of each IP
//! size and a fixed packet time ([`Args::rate_ptime`], default 20 ms), N
//! "calls" ramped as `bench voip` ramps them (doubling, then bisection to
//! `--resolution`, a failed trial repeated `--retries` times as there) to
//! the largest N that loses not one packet. The figure
//! kept is a packet rate, both directions together,
//!
//! ```text
//! zero-loss packets/s = 2 × N × 1000 / ptime
//! ```
//!
//! at that IP size; the plan interpolates between sizes and divides by a
//! codec's own packets per second. When the generator, not the gateways,
//! stopped the ramp (or `--max-calls` did), the rate is a lower bound and
//! is saved as one.
//!
//! [`Args::rate_ptime`]: super::voip::Args::rate_ptime

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_bench::results::{self, CallRateData, Kind, ZeroLoss};
use serde::{Deserialize, Serialize};

use super::tunnel::Machine;
use super::voip::{self, Found, Limit, Options, Peer, Ramp, Step};
use crate::callgen::{CallGen, Stream};
use crate::emodel;
use crate::topology::Node;
use crate::{Family, missing};

/// The smallest IP packet the generator can build (IPv4, UDP, RTP and its tag).
pub const MIN_IP_SIZE: usize = 20 + 8 + crate::callgen::MIN_PAYLOAD;
/// The largest IP packet searched (no fragmentation inside the tunnel).
pub const MAX_IP_SIZE: usize = 1400;

/// One IP size through one pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatePoint {
    /// Which pair.
    pub peer: Peer,
    /// Inner IP packet bytes (IPv4).
    pub ip_size: usize,
    /// Milliseconds between a flow's packets.
    pub ptime_ms: u32,
    /// The largest N with zero loss, and what stopped the ramp.
    pub calls: Option<Found>,
    /// 2 × N × 1000 / ptime: packets/s both directions together.
    pub zero_loss_pps: f64,
    /// The generator or the cap, not the gateways, stopped the ramp.
    pub lower_bound: bool,
    /// Every trial, by N.
    pub steps: Vec<Step>,
    /// What went wrong, if the search did not finish.
    pub error: Option<String>,
}

/// Everything one rate run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateReport {
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The options in force.
    pub options: Options,
    /// UDP 5-tuples each way.
    pub tuples: usize,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Per pair and size.
    pub points: Vec<RatePoint>,
    /// What failed.
    pub errors: Vec<String>,
}

/// Packets per second, both directions, of `calls` paced flow pairs.
pub fn pps_of(calls: u32, ptime_ms: u32) -> f64 {
    2.0 * f64::from(calls) * 1000.0 / f64::from(ptime_ms)
}

/// The ramp to the largest N with zero loss (no MOS criterion: this is a
/// packet rate, not a codec's quality).
pub fn search_zero_loss(ramp: &Ramp, mut measure: impl FnMut(u32) -> Result<Step>) -> Result<(Vec<Step>, Found)> {
    let mut steps = Vec::new();
    let mut n = ramp.start.clamp(1, ramp.max);
    loop {
        let s = measure(n)?;
        let stop = !s.zero_loss || n >= ramp.max;
        steps.push(s);
        if stop {
            break;
        }
        n = n.saturating_mul(2).min(ramp.max);
    }
    let zero = voip::refine(ramp, &mut steps, |s| s.zero_loss, &mut measure)?;
    steps.sort_by_key(|s| s.trial.calls);
    Ok((steps, zero))
}

/// Checks `--rates` and `--rate-ptime`.
pub fn validate(sizes: &[usize], ptime_ms: u32) -> Result<()> {
    for &s in sizes {
        if !(MIN_IP_SIZE..=MAX_IP_SIZE).contains(&s) {
            bail!("--rates: {s} B is outside {MIN_IP_SIZE}..={MAX_IP_SIZE} B (IPv4 packet sizes)");
        }
    }
    if !(5..=120).contains(&ptime_ms) {
        bail!("--rate-ptime must be between 5 and 120 ms");
    }
    Ok(())
}

fn run_peer(peer: Peer, bin: &Path, o: &Options, sizes: &[usize], ptime_ms: u32, t0: Instant) -> Result<Vec<RatePoint>> {
    voip::progress(t0, &format!("{}: bringing the gateways up", peer.name()));
    let (up, _label) = voip::bring_up(peer, bin, o)?;
    let result = (|| -> Result<Vec<RatePoint>> {
        let topo = up.topology();
        if o.lan_gro {
            topo.set_lan_gro(true)?;
        }
        let west = voip::host(topo, Node::HostWest, o.host_addrs)?;
        let east = voip::host(topo, Node::HostEast, o.host_addrs)?;
        let mut generator = CallGen::new(west, east, o.generator.clone())?;
        let ramp = Ramp { start: o.start_calls, max: o.max_calls, resolution: o.resolution };
        let duration = Duration::from_secs_f64(o.trial_seconds);
        // The MOS is not a criterion here; any impairment serves `judge`.
        let imp = emodel::impairment("g711-20ms");
        let ip_udp = Family::V4.ip_udp_overhead();
        let mut out = Vec::new();
        for &size in sizes {
            voip::progress(t0, &format!("{}: {size} B every {ptime_ms} ms", peer.name()));
            let stream = Stream { payload: size - ip_udp, ptime_ms };
            let r = search_zero_loss(&ramp, |n| {
                let mut s = Step::judge(generator.trial(n, stream, duration)?, ptime_ms, &imp);
                for _ in 0..o.retries {
                    if s.zero_loss || s.trial.generator_limited {
                        break;
                    }
                    if o.verbose {
                        eprintln!("  {} (repeated)", voip::step_line(&s));
                    }
                    s = Step::judge(generator.trial(n, stream, duration)?, ptime_ms, &imp);
                }
                if o.verbose {
                    eprintln!("  {}", voip::step_line(&s));
                }
                Ok(s)
            });
            out.push(match r {
                Ok((steps, found)) => RatePoint {
                    peer,
                    ip_size: size,
                    ptime_ms,
                    calls: Some(found),
                    zero_loss_pps: pps_of(found.calls, ptime_ms),
                    lower_bound: found.limit != Limit::Gateway,
                    steps,
                    error: None,
                },
                Err(e) => RatePoint {
                    peer,
                    ip_size: size,
                    ptime_ms,
                    calls: None,
                    zero_loss_pps: 0.0,
                    lower_bound: false,
                    steps: vec![],
                    error: Some(format!("{e:#}")),
                },
            });
        }
        Ok(out)
    })();
    let down = up.down();
    let r = result?;
    down.context("stopping the gateways")?;
    Ok(r)
}

/// Runs the rate search for every pair of `o` and every size.
pub fn run(bin: &Path, o: &Options, sizes: &[usize], ptime_ms: u32) -> Result<RateReport> {
    let m = missing(o.peers.contains(&Peer::Strongswan));
    if !m.is_empty() {
        bail!("esparto-testbed bench voip --rates needs {} (run as root)", m.join(", "));
    }
    let t0 = Instant::now();
    let mut machine = Machine::now();
    let mut errors = Vec::new();
    let mut points = Vec::new();
    for &peer in &o.peers {
        match run_peer(peer, bin, o, sizes, ptime_ms, t0) {
            Ok(r) => {
                for p in &r {
                    if let Some(e) = &p.error {
                        errors.push(format!("{} {} B: {e}", peer.name(), p.ip_size));
                    }
                }
                points.extend(r);
            }
            Err(e) => errors.push(format!("{}: {e:#}", peer.name())),
        }
    }
    machine.loadavg_end = super::tunnel::report_loadavg();
    Ok(RateReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        options: o.clone(),
        tuples: o.generator.tuples(o.host_addrs),
        seconds: t0.elapsed().as_secs_f64(),
        points,
        errors,
    })
}

/// What `esparto plan voip` reads: Esparto's points.
pub fn saved_data(r: &RateReport, ptime_ms: u32) -> Result<CallRateData> {
    Ok(CallRateData {
        suite: r.options.esp_proposal.clone(),
        workers: r.options.workers,
        tuples: r.tuples,
        ptime_ms,
        trial_seconds: r.options.trial_seconds,
        resolution: r.options.resolution,
        zero_loss: r
            .points
            .iter()
            .filter(|p| p.peer == Peer::Esparto && p.error.is_none())
            .map(|p| ZeroLoss {
                ip_size: p.ip_size,
                pps: p.zero_loss_pps,
                lower_bound: p.lower_bound,
                confirmed: false,
                gateway_s_per_gb: None,
            })
            .collect(),
        report: serde_json::to_value(r)?,
    })
}

/// The table.
pub fn render(r: &RateReport) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let _ = writeln!(
        o,
        "esparto-testbed bench voip --rates: zero-loss packet rate of call-like traffic (host-west ⇄ host-east, both ways)"
    );
    let _ = writeln!(
        o,
        "machine: {} CPUs, {}; load average {} at start, {} at end; {:.0} s; {} 5-tuples each way, {} s trials, ESP {}, {} workers",
        m.cpus,
        m.cpu_model,
        m.loadavg_start,
        m.loadavg_end,
        r.seconds,
        r.tuples,
        r.options.trial_seconds,
        r.options.esp_proposal,
        r.options.workers
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "{:<12} {:>6} {:>6} {:>12} {:>14}  limit", "pair", "IP B", "ptime", "flow pairs", "zero-loss pps");
    for p in &r.points {
        let ge = if p.lower_bound { "≥ " } else { "" };
        let (n, limit) = match (p.calls, &p.error) {
            (Some(f), _) => (
                format!("{ge}{}", esparto_bench::plan::thousands(f64::from(f.calls))),
                match f.limit {
                    Limit::Gateway => "gateways",
                    Limit::Generator => "generator-limited (lower bound)",
                    Limit::Cap => "--max-calls (lower bound)",
                },
            ),
            (None, Some(_)) => ("error".into(), ""),
            (None, None) => ("—".into(), ""),
        };
        let _ = writeln!(
            o,
            "{:<12} {:>6} {:>4} ms {:>12} {:>14}  {limit}",
            p.peer.name(),
            p.ip_size,
            p.ptime_ms,
            n,
            format!("{ge}{}", esparto_bench::plan::thousands(p.zero_loss_pps)),
        );
    }
    for e in &r.errors {
        let _ = writeln!(o, "error: {e}");
    }
    o
}

/// `esparto-testbed bench voip --rates`.
pub fn main(args: &voip::Args, bin: &Path) -> Result<ExitCode> {
    let o = args.options()?;
    validate(&args.rates, args.rate_ptime)?;
    crate::clean_up_on_signal("esparto-testbed bench voip --rates")?;
    let report = run(bin, &o, &args.rates, args.rate_ptime)?;
    if let Some(dir) = args.save.dir() {
        let data = saved_data(&report, args.rate_ptime)?;
        if data.zero_loss.is_empty() {
            eprintln!("esparto-testbed bench voip --rates: no Esparto figure measured: nothing saved");
        } else {
            match results::save(dir, &o.esp_proposal, &results::envelope(Kind::CallRate, data)) {
                Ok(p) => eprintln!("esparto-testbed bench voip --rates: saved {}", p.display()),
                Err(e) => eprintln!("esparto-testbed bench voip --rates: {e:#}"),
            }
        }
    }
    super::finish(&report, &render(&report), args.output.json, report.errors.is_empty())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rate_of_paced_calls() {
        // 100 flow pairs every 20 ms: 50 packets/s each way each.
        assert_eq!(pps_of(100, 20), 10_000.0);
        assert_eq!(pps_of(0, 20), 0.0);
    }

    fn search(knee: u32, gen_max: u32) -> (Vec<Step>, Found) {
        let imp = emodel::impairment("g711-20ms");
        let ramp = Ramp { start: 64, max: 20_000, resolution: 0.05 };
        search_zero_loss(&ramp, |n| Ok(Step::judge(voip::tests::trial(n, knee, gen_max), 20, &imp))).unwrap()
    }

    #[test]
    fn the_ramp_finds_the_gateways_knee() {
        let (steps, found) = search(1_000, 1_000_000);
        assert_eq!(found.limit, Limit::Gateway);
        assert!(found.calls <= 1_000 && f64::from(found.calls) >= 1_000.0 * 0.95, "{found:?}");
        assert!(steps.windows(2).all(|w| w[0].trial.calls < w[1].trial.calls), "each N measured once");
        assert_eq!(pps_of(found.calls, 20), 100.0 * f64::from(found.calls));
    }

    #[test]
    fn a_generator_limit_is_a_lower_bound() {
        let (_, found) = search(100_000, 3_000);
        assert_eq!(found.limit, Limit::Generator);
        assert!(found.calls <= 3_000 && f64::from(found.calls) >= 3_000.0 * 0.95, "{found:?}");
    }

    #[test]
    fn sizes_outside_what_the_generator_builds_are_refused() {
        assert!(validate(&[70, 200, 280], 20).is_ok());
        assert!(validate(&[MIN_IP_SIZE - 1], 20).is_err());
        assert!(validate(&[MAX_IP_SIZE + 1], 20).is_err());
        assert!(validate(&[70], 0).is_err());
    }
}
