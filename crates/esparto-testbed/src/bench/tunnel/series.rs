//! `esparto-testbed bench tunnel --runs N`: the whole run repeated, and each
//! strongSwan/Esparto ratio summarised over the runs.
//!
//! One run measures both systems side by side, so a ratio is fair within
//! it; but on a shared machine the next run's ratio can differ by a fifth
//! or more, because the machine's state moves the two systems differently
//! (charon's one packet thread loses more to a busy neighbour than
//! Esparto's pinned workers do). A target read from one run is a draw. The
//! summary gives, per measurement, every run's ratio, the median, and in
//! how many runs the ratio reached its goal — the form `docs/BENCHMARKS.md`
//! quotes. Every other run measures Esparto before strongSwan, so that a
//! drift of the machine within a run does not always favour the same side.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::report::{Measure, Row};
use super::Report;

/// Several runs and their summary, as `--runs N --json` prints them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Each run's full report, in the order they ran.
    pub runs: Vec<Report>,
    /// One row per measurement of the comparison.
    pub summary: Vec<Summary>,
}

/// One measurement of the comparison over all runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What was measured.
    pub measure: Measure,
    /// Esparto / strongSwan in each run (`None`: a side is missing there).
    pub ratios: Vec<Option<f64>>,
    /// Median of the ratios that exist.
    pub median_ratio: Option<f64>,
    /// Median of strongSwan's figures (packets/s for UDP, Mbit/s for TCP).
    pub median_baseline: Option<f64>,
    /// Median of Esparto's figures.
    pub median_subject: Option<f64>,
    /// The target ratio, for the measurements that have one.
    pub goal: Option<f64>,
    /// Runs whose ratio shows the goal reached.
    pub reached: usize,
    /// Runs whose ratio decides the goal either way (a ratio between two
    /// lower bounds decides nothing).
    pub decided: usize,
}

/// The median of the finite values in `v`; `None` when there are none.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    (!v.is_empty()).then(|| crate::bench::median(&v))
}

/// Summarise the comparison rows of `runs`, measurement by measurement, in
/// the order they first appear.
pub fn summarise(runs: &[Report]) -> Vec<Summary> {
    let mut order: Vec<Measure> = Vec::new();
    for r in runs {
        for row in &r.comparison {
            if !order.contains(&row.measure) {
                order.push(row.measure);
            }
        }
    }
    order
        .into_iter()
        .map(|m| {
            let rows: Vec<Option<&Row>> =
                runs.iter().map(|r| r.comparison.iter().find(|x| x.measure == m)).collect();
            let ratios: Vec<Option<f64>> = rows.iter().map(|r| r.and_then(|x| x.ratio)).collect();
            let side = |f: fn(&Row) -> Option<f64>| median(rows.iter().flatten().filter_map(|r| f(r)).collect());
            let goal = m.goal();
            let verdicts: Vec<bool> = match goal {
                Some(g) => rows.iter().flatten().filter_map(|r| r.reaches(g)).collect(),
                None => Vec::new(),
            };
            Summary {
                measure: m,
                median_ratio: median(ratios.iter().flatten().copied().collect()),
                median_baseline: side(|r| r.baseline.as_ref().map(|f| f.value())),
                median_subject: side(|r| r.subject.as_ref().map(|f| f.value())),
                ratios,
                goal,
                reached: verdicts.iter().filter(|v| **v).count(),
                decided: verdicts.len(),
            }
        })
        .collect()
}

/// The summary as a table.
pub fn render(rows: &[Summary], runs: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\nsummary of {runs} runs (Esparto / strongSwan, each run side by side):");
    let _ = writeln!(
        o,
        "  {:<15} {:>12} {:>12} {:>8}  {:<10} per run",
        "", "strongSwan", "Esparto", "ratio", "≥ goal"
    );
    for s in rows {
        let unit = match s.measure {
            Measure::Tcp { .. } => "Mbit/s",
            Measure::Udp { .. } => "pps",
        };
        let fig = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.0} {unit}"));
        let reached = match s.goal {
            Some(g) => format!("{}/{} ≥ {g:.0}×", s.reached, s.decided),
            None => String::new(),
        };
        let each: Vec<String> =
            s.ratios.iter().map(|r| r.map_or_else(|| "-".into(), |x| format!("{x:.2}"))).collect();
        let _ = writeln!(
            o,
            "  {:<15} {:>12} {:>12} {:>8}  {:<10} {}",
            s.measure.name(),
            fig(s.median_baseline),
            fig(s.median_subject),
            s.median_ratio.map_or_else(|| "-".into(), |x| format!("{x:.2}×")),
            reached,
            each.join(" ")
        );
    }
    let _ = writeln!(
        o,
        "  (medians over the runs; a ratio whose figures are bounds counts at its value in the median, \
         and towards the goal only where the bound decides it)"
    );
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::bench::tunnel::report::{Bound, Figure};
    use crate::bench::tunnel::tests::report;

    fn fig(v: f64, pps: bool, at_max: bool) -> Figure {
        Figure {
            mbps: if pps { v * 0.0005 } else { v },
            pps: pps.then_some(v),
            gateway_s_per_gb: None,
            confirmed: true,
            at_max,
            generator_pps: None,
            decap_busiest_share: None,
            encap_busiest_share: None,
        }
    }

    fn row(m: Measure, b: Option<f64>, s: f64, s_at_max: bool) -> Row {
        let pps = matches!(m, Measure::Udp { .. });
        let (bf, sf) = (b.map(|b| fig(b, pps, false)), fig(s, pps, s_at_max));
        Row {
            measure: m,
            flows: 4,
            ratio: b.map(|b| s / b),
            ratio_bound: Bound::of(false, s_at_max),
            baseline: bf,
            subject: Some(sf),
        }
    }

    const TCP1: Measure = Measure::Tcp { streams: 1 };
    const U64: Measure = Measure::Udp { ip_size: 64 };
    const U1400: Measure = Measure::Udp { ip_size: 1400 };

    #[test]
    fn medians_and_goal_counts_per_measurement() {
        let runs = vec![
            report(vec![row(TCP1, Some(400.0), 3_600.0, false), row(U64, Some(30_000.0), 330_000.0, false)]),
            report(vec![row(TCP1, Some(350.0), 4_200.0, false), row(U64, Some(35_000.0), 315_000.0, false)]),
            // strongSwan missing at 64 B in the third run; a 1400 B row only here.
            report(vec![
                row(TCP1, Some(420.0), 3_780.0, false),
                row(U64, None, 320_000.0, false),
                row(U1400, Some(20_000.0), 260_000.0, false),
            ]),
        ];
        let s = summarise(&runs);
        assert_eq!(s.iter().map(|x| x.measure).collect::<Vec<_>>(), vec![TCP1, U64, U1400]);

        let tcp = &s[0];
        // Ratios 9.0, 12.0, 9.0: median 9.0, one run of three at 10x.
        assert_eq!(tcp.ratios, vec![Some(9.0), Some(12.0), Some(9.0)]);
        assert_eq!(tcp.median_ratio, Some(9.0));
        assert_eq!((tcp.reached, tcp.decided), (1, 3));
        assert_eq!(tcp.median_baseline, Some(400.0));
        assert_eq!(tcp.median_subject, Some(3_780.0));

        let u64 = &s[1];
        // 11.0 and 9.0 (the third run has no ratio): median of two is their mean.
        assert_eq!(u64.ratios, vec![Some(11.0), Some(9.0), None]);
        assert_eq!(u64.median_ratio, Some(10.0));
        assert_eq!((u64.reached, u64.decided), (1, 2));
        assert_eq!(u64.median_subject, Some(320_000.0));

        let big = &s[2];
        assert_eq!(big.goal, None);
        assert_eq!(big.ratios, vec![None, None, Some(13.0)]);
        assert_eq!((big.reached, big.decided), (0, 0));

        let t = render(&s, 3);
        assert!(t.contains("summary of 3 runs"), "{t}");
        assert!(t.contains("1/3 ≥ 10×") && t.contains("9.00 12.00 9.00"), "{t}");
        assert!(t.contains("11.00 9.00 -"), "{t}");
    }

    #[test]
    fn a_lower_bound_counts_only_when_it_decides() {
        // Esparto at the search's cap: the ratio is a lower bound.
        let runs = vec![
            report(vec![row(U64, Some(30_000.0), 400_000.0, true)]), // ≥ 13.3: reached
            report(vec![row(U64, Some(50_000.0), 400_000.0, true)]), // ≥ 8.0: undecided
        ];
        let s = summarise(&runs);
        assert_eq!((s[0].reached, s[0].decided), (1, 1));
    }

    #[test]
    fn series_round_trips() {
        let runs = vec![report(vec![row(TCP1, Some(400.0), 4_000.0, false)])];
        let s = Series { summary: summarise(&runs), runs };
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Series>(&j).unwrap(), s);
    }

    #[test]
    fn median_of_nothing_is_none() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![f64::NAN]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    }
}
