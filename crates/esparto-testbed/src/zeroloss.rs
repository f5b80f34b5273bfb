//! Throughput as RFC 2544 §26.1 defines it: "the maximum rate at which none
//! of the offered frames are dropped by the device", found by a binary
//! search on the offered rate.
//!
//! RFC 2544 §26.1, procedure: "Send a specific number of frames at a specific
//! rate through the DUT and then count the frames that are transmitted by the
//! DUT. If the count of offered frames is equal to the count of received
//! frames, the rate of the offered stream is raised and the test is rerun. If
//! fewer frames are received than were transmitted, the rate of the offered
//! stream is reduced and the test is rerun."
//!
//! The search here:
//!
//! 1. a probe at `max_pps`: if it passes, the answer is "at least max" and
//!    [`Outcome::at_max`] says so (the generator, not the device, limited it);
//! 2. bisection of `[min_pps, max_pps]` until the bracket is narrower than
//!    `resolution` × its upper end (2–5 % is usual; each halving costs one
//!    trial, so 3 % from a 100× range is about 8 trials);
//! 3. a **confirming** trial at the best passing rate: on a shared machine a
//!    trial can pass by luck; if the confirmation loses, the rate is lowered
//!    by `resolution`, then by twice that, four times that… (at most by
//!    half) and tried again, up to `confirm_retries` times, and
//!    [`Outcome::confirmed`] records whether a rate was confirmed at all.
//!
//! "Zero loss" is a loss fraction ≤ `loss_tolerance`: 0 is RFC 2544's
//! definition; a tolerance such as 1e-5 (0.001 %) is the usual concession
//! to a generator that drops a stray packet. Every figure states which.
//!
//! Between trials the search pauses `settle`, so that the device's queues
//! drain (strongSwan's are unbounded: a lost trial leaves a backlog that
//! would otherwise be charged to the next one). The search is pure logic
//! over a `FnMut(rate) -> Result<Trial>` and an injected sleep, so it is
//! unit-tested without a network.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Parameters of one search.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Search {
    /// Lowest rate considered, packets/s (> 0).
    pub min_pps: f64,
    /// Highest rate offered, packets/s; the first trial.
    pub max_pps: f64,
    /// Largest loss fraction that still counts as zero loss (0 = RFC 2544).
    pub loss_tolerance: f64,
    /// Stop when `hi − lo ≤ resolution × hi` (a fraction, e.g. 0.03).
    pub resolution: f64,
    /// Length of each trial (used by the caller's trial function).
    #[serde(with = "secs")]
    pub trial: Duration,
    /// Pause between trials.
    #[serde(with = "secs")]
    pub settle: Duration,
    /// Lower the rate by `resolution` and retry this often when the
    /// confirming trial loses.
    pub confirm_retries: u32,
}

impl Default for Search {
    fn default() -> Self {
        Self {
            min_pps: 1_000.0,
            max_pps: 1_000_000.0,
            loss_tolerance: 0.0,
            resolution: 0.03,
            trial: Duration::from_secs(3),
            settle: Duration::from_secs(1),
            confirm_retries: 2,
        }
    }
}

impl Search {
    fn validate(&self) -> Result<()> {
        if !(self.min_pps > 0.0 && self.min_pps < self.max_pps && self.max_pps.is_finite()) {
            bail!(
                "zero-loss search: need 0 < min_pps ({}) < max_pps ({})",
                self.min_pps,
                self.max_pps
            );
        }
        if !(self.resolution > 0.0 && self.resolution < 1.0) {
            bail!(
                "zero-loss search: resolution {} must be in (0, 1)",
                self.resolution
            );
        }
        if !(0.0..1.0).contains(&self.loss_tolerance) {
            bail!(
                "zero-loss search: loss tolerance {} must be in [0, 1)",
                self.loss_tolerance
            );
        }
        Ok(())
    }
}

/// What one trial measured.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Trial {
    /// The rate asked of the generator, packets/s.
    pub requested_pps: f64,
    /// The rate it actually offered (sent / sending time), packets/s.
    pub offered_pps: f64,
    /// Packets offered.
    pub sent: u64,
    /// Packets received at the far end (duplicates would count twice).
    pub received: u64,
}

impl Trial {
    /// Fraction of offered packets lost (0 when more arrived than were sent).
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            return 1.0;
        }
        self.sent.saturating_sub(self.received) as f64 / self.sent as f64
    }

    /// Whether the trial counts as loss-free under `tolerance`. A trial
    /// that offered nothing never passes.
    pub fn passes(&self, tolerance: f64) -> bool {
        self.sent > 0 && self.loss() <= tolerance
    }
}

/// Why a trial was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The first trial, at `max_pps`.
    Probe,
    /// A bisection step.
    Bisect,
    /// A confirming trial at the result.
    Confirm,
}

/// One trial of the search, for the record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Step {
    /// Why it ran.
    pub phase: Phase,
    /// What it measured.
    pub trial: Trial,
    /// Whether it counted as zero loss.
    pub passed: bool,
}

/// The result of a search.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    /// Highest zero-loss rate found, as offered (packets/s); 0 if none.
    pub rate_pps: f64,
    /// Whether a confirming trial passed at `rate_pps`.
    pub confirmed: bool,
    /// The probe at `max_pps` passed: the true figure may be higher.
    pub at_max: bool,
    /// The loss tolerance used.
    pub loss_tolerance: f64,
    /// Every trial, in order.
    pub steps: Vec<Step>,
}

/// Run the search, sleeping `settle` between trials with `thread::sleep`.
pub fn search(cfg: &Search, trial: impl FnMut(f64) -> Result<Trial>) -> Result<Outcome> {
    search_with(cfg, trial, std::thread::sleep)
}

/// [`search`] with an injected sleep (tests pass one that records).
pub fn search_with(
    cfg: &Search,
    mut trial: impl FnMut(f64) -> Result<Trial>,
    mut sleep: impl FnMut(Duration),
) -> Result<Outcome> {
    cfg.validate()?;
    let mut steps: Vec<Step> = Vec::new();
    let mut run = |phase: Phase, rate: f64| -> Result<Step> {
        if !steps.is_empty() {
            sleep(cfg.settle);
        }
        let t = trial(rate)?;
        let step = Step {
            phase,
            trial: t,
            passed: t.passes(cfg.loss_tolerance),
        };
        steps.push(step);
        Ok(step)
    };

    // The best passing requested rate so far.
    let mut best: Option<f64> = None;
    let probe = run(Phase::Probe, cfg.max_pps)?;
    let at_max = probe.passed;
    if at_max {
        best = Some(cfg.max_pps);
    } else {
        let (mut lo, mut hi) = (cfg.min_pps, cfg.max_pps);
        while hi - lo > cfg.resolution * hi {
            let mid = (lo + hi) / 2.0;
            if run(Phase::Bisect, mid)?.passed {
                lo = mid;
                best = Some(mid);
            } else {
                hi = mid;
            }
        }
        if best.is_none() && run(Phase::Bisect, cfg.min_pps)?.passed {
            best = Some(cfg.min_pps);
        }
    }

    let mut rate_pps = 0.0;
    let mut confirmed = false;
    if let Some(mut r) = best {
        for attempt in 0..=cfg.confirm_retries {
            let c = run(Phase::Confirm, r)?;
            if c.passed {
                confirmed = true;
                // RFC 2544 reports the rate offered; a generator that fell
                // short of the request offered less than it was asked.
                rate_pps = c.trial.offered_pps.min(r);
                break;
            }
            // Step down by resolution, then twice that, four times…: a
            // knee that moved (the machine got busier) is found again in a
            // few trials without restarting the search.
            r *= 1.0 - (cfg.resolution * f64::from(1u32 << attempt.min(4))).min(0.5);
            if r < cfg.min_pps {
                break;
            }
        }
    }
    Ok(Outcome {
        rate_pps,
        confirmed,
        at_max,
        loss_tolerance: cfg.loss_tolerance,
        steps,
    })
}

/// Serde for durations as (fractional) seconds.
pub(crate) mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A device that loses nothing up to `knee` packets/s and everything
    /// above it beyond the knee (loss fraction `(r − knee) / r`).
    fn knee(knee: f64) -> impl FnMut(f64) -> Result<Trial> {
        move |r: f64| {
            let sent = (r * 2.0).round() as u64; // a 2-second trial
            let carried = (knee.min(r) * 2.0).round() as u64;
            Ok(Trial {
                requested_pps: r,
                offered_pps: r,
                sent,
                received: carried,
            })
        }
    }

    fn cfg() -> Search {
        Search {
            min_pps: 1_000.0,
            max_pps: 1_000_000.0,
            resolution: 0.02,
            ..Search::default()
        }
    }

    #[test]
    fn finds_the_knee_from_below_within_resolution() {
        let mut sleeps = 0;
        let out = search_with(&cfg(), knee(123_456.0), |_| sleeps += 1).unwrap();
        assert!(out.confirmed && !out.at_max);
        assert!(out.rate_pps <= 123_456.0, "{}", out.rate_pps);
        // The bracket stops at 2 % of its upper end, which is above the knee.
        assert!(
            out.rate_pps >= 123_456.0 * (1.0 - 0.02 * 1.02),
            "{}",
            out.rate_pps
        );
        assert_eq!(out.steps[0].phase, Phase::Probe);
        assert!(!out.steps[0].passed);
        assert_eq!(out.steps.last().unwrap().phase, Phase::Confirm);
        // One settle pause between consecutive trials, none before the first.
        assert_eq!(sleeps, out.steps.len() - 1);
        // Bisection from a 1000× range to 2 % takes about log2(1/0.02/…) steps, not more.
        assert!(out.steps.len() <= 12, "{} trials", out.steps.len());
    }

    #[test]
    fn passing_probe_reports_at_max() {
        let out = search_with(&cfg(), knee(5e6), |_| ()).unwrap();
        assert!(out.at_max && out.confirmed);
        assert_eq!(out.rate_pps, 1_000_000.0);
        assert_eq!(out.steps.len(), 2); // probe + confirm
    }

    #[test]
    fn device_that_always_loses_yields_zero() {
        let out = search_with(&cfg(), knee(10.0), |_| ()).unwrap();
        assert_eq!(out.rate_pps, 0.0);
        assert!(!out.confirmed && !out.at_max);
        assert!(out.steps.iter().all(|s| !s.passed));
        // The minimum itself was tried.
        assert!(out.steps.iter().any(|s| s.trial.requested_pps == 1_000.0));
    }

    #[test]
    fn tolerance_accepts_a_trickle_of_loss() {
        // Loses about 5 packets in 10^6 (at least one) everywhere, and half
        // of them above 50 kpps; 100-second trials.
        let f = |r: f64| {
            let sent = (r * 100.0) as u64;
            let trickle = (sent as f64 * 5e-6).ceil() as u64;
            let received = if r <= 50_000.0 {
                sent - trickle
            } else {
                sent / 2
            };
            Ok(Trial {
                requested_pps: r,
                offered_pps: r,
                sent,
                received,
            })
        };
        let strict = search_with(&cfg(), f, |_| ()).unwrap();
        assert_eq!(strict.rate_pps, 0.0, "strict zero loss never holds");
        let lenient = Search {
            loss_tolerance: 1e-5,
            ..cfg()
        };
        let out = search_with(&lenient, f, |_| ()).unwrap();
        assert!(out.confirmed);
        assert!(
            out.rate_pps <= 50_000.0 && out.rate_pps > 48_000.0,
            "{}",
            out.rate_pps
        );
    }

    #[test]
    fn failed_confirmation_steps_down() {
        // The knee is at 100 kpps but the first confirming trial (the first
        // repeat of the best passing rate) is unlucky.
        let mut inner = knee(100_000.0);
        let mut confirms = 0;
        let mut last_bisect = 0.0;
        let f = |r: f64| {
            let mut t = inner(r)?;
            if r == last_bisect && confirms == 0 && t.passes(0.0) {
                confirms += 1;
                t.received -= 1;
            }
            if t.passes(0.0) {
                last_bisect = r;
            }
            Ok(t)
        };
        let out = search_with(&cfg(), f, |_| ()).unwrap();
        assert!(out.confirmed);
        let confirm_steps: Vec<_> = out
            .steps
            .iter()
            .filter(|s| s.phase == Phase::Confirm)
            .collect();
        assert_eq!(confirm_steps.len(), 2);
        assert!(!confirm_steps[0].passed && confirm_steps[1].passed);
        let r0 = confirm_steps[0].trial.requested_pps;
        assert!((confirm_steps[1].trial.requested_pps - r0 * 0.98).abs() < 1e-6);
        assert_eq!(out.rate_pps, confirm_steps[1].trial.offered_pps);
    }

    #[test]
    fn repeated_confirmation_failures_step_down_faster() {
        // Bisection passes up to 100 kpps, but the machine then gets busier:
        // only 90 kpps holds when confirming.
        let mut confirming = false;
        let mut best_seen = 0.0f64;
        let f = |r: f64| {
            // The first repeat of a passing rate marks the start of the
            // confirmation phase (bisection never repeats a rate).
            if r == best_seen {
                confirming = true;
            }
            let knee = if confirming { 90_000.0 } else { 100_000.0 };
            let t = knee_trial(r, knee);
            if t.passes(0.0) && !confirming {
                best_seen = r;
            }
            Ok(t)
        };
        let c = Search {
            confirm_retries: 4,
            ..cfg()
        };
        let out = search_with(&c, f, |_| ()).unwrap();
        let rates: Vec<f64> = out
            .steps
            .iter()
            .filter(|s| s.phase == Phase::Confirm)
            .map(|s| s.trial.requested_pps)
            .collect();
        // r, r·0.98, r·0.98·0.96, r·0.98·0.96·0.92 (≈ 86.6 % of r) …
        assert_eq!(rates.len(), 4, "{rates:?}");
        for (i, w) in rates.windows(2).enumerate() {
            let step = 1.0 - w[1] / w[0];
            assert!(
                (step - 0.02 * f64::from(1u32 << i)).abs() < 1e-9,
                "{rates:?}"
            );
        }
        assert!(
            out.confirmed && out.rate_pps <= 90_000.0,
            "{}",
            out.rate_pps
        );
    }

    fn knee_trial(r: f64, knee: f64) -> Trial {
        let sent = (r * 2.0).round() as u64;
        let received = (knee.min(r) * 2.0).round() as u64;
        Trial {
            requested_pps: r,
            offered_pps: r,
            sent,
            received,
        }
    }

    #[test]
    fn generator_shortfall_reports_offered_rate() {
        // The generator tops out at 80 kpps; the device never loses.
        let f = |r: f64| {
            let offered = r.min(80_000.0);
            let sent = (offered * 2.0) as u64;
            Ok(Trial {
                requested_pps: r,
                offered_pps: offered,
                sent,
                received: sent,
            })
        };
        let out = search_with(&cfg(), f, |_| ()).unwrap();
        assert!(out.at_max);
        assert_eq!(out.rate_pps, 80_000.0);
    }

    #[test]
    fn errors_propagate_and_bad_configs_are_refused() {
        let e = search_with(&cfg(), |_| bail!("generator died"), |_| ()).unwrap_err();
        assert!(e.to_string().contains("generator died"));
        for bad in [
            Search {
                min_pps: 0.0,
                ..cfg()
            },
            Search {
                min_pps: 2e6,
                ..cfg()
            },
            Search {
                resolution: 0.0,
                ..cfg()
            },
            Search {
                resolution: 1.0,
                ..cfg()
            },
            Search {
                loss_tolerance: -0.1,
                ..cfg()
            },
            Search {
                max_pps: f64::INFINITY,
                ..cfg()
            },
        ] {
            assert!(search_with(&bad, knee(1.0), |_| ()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn loss_arithmetic() {
        let t = Trial {
            requested_pps: 1.0,
            offered_pps: 1.0,
            sent: 1000,
            received: 990,
        };
        assert!((t.loss() - 0.01).abs() < 1e-12);
        assert!(!t.passes(0.0) && t.passes(0.01));
        let dup = Trial {
            sent: 10,
            received: 11,
            ..t
        };
        assert_eq!(dup.loss(), 0.0);
        let none = Trial {
            sent: 0,
            received: 0,
            ..t
        };
        assert!(!none.passes(0.5));
    }

    #[test]
    fn serde_round_trip() {
        let out = search_with(&cfg(), knee(20_000.0), |_| ()).unwrap();
        let s = serde_json::to_string(&out).unwrap();
        assert_eq!(serde_json::from_str::<Outcome>(&s).unwrap(), out);
        let c = cfg();
        let s = serde_json::to_string(&c).unwrap();
        assert!(s.contains("\"trial\":3.0"), "{s}");
        assert_eq!(serde_json::from_str::<Search>(&s).unwrap(), c);
    }
}
