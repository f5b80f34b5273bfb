//! `esparto plan capacity --tunnels N`: what N active tunnels add to the
//! cost of a packet, from the key-agility measurement
//! (`esparto bench dataplane --sas … --save`).
//!
//! With many tunnels a packet's SA state (policy, group, SA, key schedule,
//! replay window) is no longer in the cache when its turn comes; the
//! benchmark measured the round-trip rate with N SA pairs per worker beside
//! the rate with one, in the same run. A gateway with N tunnels holds N SA
//! pairs on every worker (each worker has its own sub-SA of each tunnel),
//! so the measured N is the tunnel count. The extra cost of a packet is
//!
//! ```text
//! extra cycles = cycles of a round trip with one SA × (1 / ratio(N) − 1)
//! ```
//!
//! It is added to every row's cost per packet, in process and end to end
//! alike: it is the same ESP work done on colder state, while the kernel's
//! share of an end-to-end packet does not grow with the tunnels. Between
//! measured counts the ratio is interpolated in log N, between measured
//! sizes the extra cycles linearly in size; beyond either it stays at the
//! last measured value and the note says so. A ratio above 1 (noise, at
//! small N) counts as no extra cost.

use super::capacity::{Mix, Row};
use crate::results::{AgilityData, Loaded};

/// Extra cycles per round trip at `size` bytes with `tunnels` SA pairs per
/// worker, and whether it left the measured counts or sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Extra {
    /// Cycles (at the measurement's clock) added to a round trip.
    pub cycles: f64,
    /// `tunnels` beyond the most SAs measured.
    pub beyond_sas: bool,
    /// `size` outside the measured sizes.
    pub beyond_size: bool,
}

/// The ratio (N SAs / one SA) at `tunnels` for one size's rows (sorted by
/// SAs), interpolated in log N; `(ratio, beyond the largest N)`.
fn ratio_at(points: &[(usize, f64)], tunnels: usize) -> (f64, bool) {
    // One SA against itself is 1 by definition.
    let mut pts: Vec<(f64, f64)> = vec![(0.0, 1.0)];
    pts.extend(points.iter().filter(|(n, _)| *n > 1).map(|&(n, r)| ((n as f64).log10(), r)));
    let x = (tunnels.max(1) as f64).log10();
    let last = pts[pts.len() - 1];
    if x >= last.0 {
        return (last.1, x > last.0);
    }
    for w in pts.windows(2) {
        let ((x0, r0), (x1, r1)) = (w[0], w[1]);
        if x <= x1 {
            return (r0 + (r1 - r0) * (x - x0) / (x1 - x0), false);
        }
    }
    (last.1, false)
}

/// Extra cycles per round trip at `size` with `tunnels` tunnels.
pub fn extra(d: &Loaded<AgilityData>, size: usize, tunnels: usize) -> Option<Extra> {
    let data = &d.saved.data;
    let clock = d.saved.clock_hz;
    let mut sizes: Vec<usize> = data.rows.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let at_size = |s: usize| -> Option<(f64, bool)> {
        let mut pts: Vec<(usize, f64)> = data.rows.iter().filter(|r| r.size == s).map(|r| (r.sas, r.ratio)).collect();
        pts.sort_by_key(|p| p.0);
        let one = data.rows.iter().filter(|r| r.size == s).map(|r| r.mpps_1).fold(f64::NAN, f64::max);
        if !(one.is_finite() && one > 0.0) {
            return None;
        }
        // Cycles of one round trip on one worker with one SA.
        let cycles_1 = clock * data.workers as f64 / (one * 1e6);
        let (ratio, beyond) = ratio_at(&pts, tunnels);
        Some((cycles_1 * (1.0 / ratio - 1.0).max(0.0), beyond))
    };
    let (lo, hi) = (*sizes.first()?, *sizes.last()?);
    let below = sizes.iter().rev().find(|&&s| s <= size).copied().unwrap_or(lo);
    let above = sizes.iter().find(|&&s| s >= size).copied().unwrap_or(hi);
    let (e0, b0) = at_size(below)?;
    let (e1, b1) = at_size(above)?;
    let cycles = if above == below { e0 } else { e0 + (e1 - e0) * (size - below) as f64 / (above - below) as f64 };
    Some(Extra { cycles, beyond_sas: b0 || b1, beyond_size: size < lo || size > hi })
}

/// Adds what `tunnels` tunnels cost to a row of the capacity table, from
/// the key-agility measurement `d` (same suite), and says so in its notes.
/// The row's cycles are at `row.clock_hz`; the agility figures' at their
/// own clock, converted by the ratio of the two.
pub fn apply(row: &mut Row, d: &Loaded<AgilityData>, mix: &Mix, tunnels: usize) {
    let mut beyond_sas = false;
    let mut beyond_size = false;
    let mut missing = false;
    let total: f64 = mix.sizes.iter().map(|(_, w)| w).sum();
    let extra_agility_clock: f64 = mix
        .sizes
        .iter()
        .map(|&(s, w)| match extra(d, s, tunnels) {
            Some(e) => {
                beyond_sas |= e.beyond_sas;
                beyond_size |= e.beyond_size;
                e.cycles * w
            }
            None => {
                missing = true;
                0.0
            }
        })
        .sum::<f64>()
        / total;
    let extra_cycles = extra_agility_clock * row.clock_hz / d.saved.clock_hz;
    let before = row.cycles_per_packet;
    let after = before + extra_cycles;
    let scale = after / before;
    row.cycles_per_packet = after;
    row.cycles_per_byte *= scale;
    row.mhz_per_mbps *= scale;
    for l in &mut row.links {
        l.cores *= scale;
        l.mhz *= scale;
        l.extrapolated |= beyond_sas;
    }
    let data = &d.saved.data;
    let measured: Vec<String> = {
        let mut n: Vec<usize> = data.rows.iter().map(|r| r.sas).collect();
        n.sort_unstable();
        n.dedup();
        n.iter().map(|n| super::thousands(*n as f64)).collect()
    };
    let mix_name = data.rows.first().map_or("?", |r| if r.mix == crate::bench::dataplane::SaMix::Zipf { "Zipf" } else { "round-robin" });
    row.notes.push(format!(
        "{} tunnels: +{:.0} cycles per packet (× {:.2}) for SA state out of cache, from the key-agility measurement {} \
         ({mix_name} mix over {} SAs measured)",
        super::thousands(tunnels as f64),
        extra_cycles,
        scale,
        d.provenance(),
        measured.join(", ")
    ));
    if beyond_sas {
        row.notes.push(format!(
            "*: {} tunnels is more than the most SAs measured: their cost taken as at the most measured",
            super::thousands(tunnels as f64)
        ));
    }
    if beyond_size {
        row.notes.push("the mix has sizes outside the key-agility measurement's: its cost taken as at the nearest".into());
    }
    if missing {
        row.notes.push("the key-agility measurement lacks a one-SA rate for some size: no extra cost counted there".into());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::plan::capacity::{LINKS_MBPS, in_process};
    use crate::results::fixtures::{dataplane_data, row as dp_row};
    use crate::results::{Kind, envelope};

    #[test]
    fn ratio_is_interpolated_in_log_n_and_held_beyond() {
        let pts = [(100, 1.0), (10_000, 0.5), (100_000, 0.4)];
        assert_eq!(ratio_at(&pts, 1), (1.0, false));
        assert_eq!(ratio_at(&pts, 100), (1.0, false));
        let (r, b) = ratio_at(&pts, 1000);
        assert!((r - 0.75).abs() < 1e-9 && !b, "{r}");
        assert_eq!(ratio_at(&pts, 100_000), (0.4, false));
        assert_eq!(ratio_at(&pts, 1_000_000), (0.4, true));
    }

    fn loaded<T>(kind: Kind, data: T) -> Loaded<T> {
        Loaded { path: PathBuf::from(format!("/results/{kind}.json")), saved: envelope(kind, data) }
    }

    fn agility_row(size: usize, sas: usize, ratio: f64, mpps_1: f64) -> crate::bench::dataplane::AgilityRow {
        crate::bench::dataplane::AgilityRow {
            size,
            sas,
            mix: crate::bench::dataplane::SaMix::Zipf,
            workers: 1,
            suite: "aes256gcm16".into(),
            mpps: mpps_1 * ratio,
            gbps: 0.0,
            mpps_1,
            ratio,
            packets: 1,
            sas_used: sas,
            out_bytes_per_sa: None,
            in_bytes_per_sa: None,
            out_heap_per_sa: None,
            in_heap_per_sa: None,
            prefetch: true,
        }
    }

    /// `--tunnels`: with one SA a round trip takes 1,000 cycles (1 Mpps at
    /// 1 GHz); at 100,000 SAs the rate is half, so a packet costs 1,000
    /// cycles more; at 10,000 a quarter less, so a third more.
    #[test]
    fn tunnels_add_the_measured_cost_of_cold_sa_state() {
        let mut data = dataplane_data("aes256gcm16");
        data.rows = vec![dp_row(64, 20.0), dp_row(1420, 20.0)];
        data.workers = 1;
        let mut d = loaded(Kind::Dataplane, data);
        d.saved.clock_hz = 1e9;
        let rows = vec![
            agility_row(64, 100, 1.02, 1.0),
            agility_row(64, 10_000, 0.75, 1.0),
            agility_row(64, 100_000, 0.5, 1.0),
        ];
        let agility = crate::results::AgilityData { suite: "aes256gcm16".into(), workers: 1, seconds: 1.0, runs: 5, rows };
        let mut a = loaded(Kind::Agility, agility);
        a.saved.clock_hz = 1e9;
        let mix = Mix::fixed(64);
        let base = in_process(&d, &mix, &LINKS_MBPS).unwrap();
        for (tunnels, extra, beyond) in [(1, 0.0, false), (100, 0.0, false), (10_000, 1000.0 / 3.0, false), (100_000, 1000.0, false), (1_000_000, 1000.0, true)] {
            let mut r = base.clone();
            crate::plan::agility::apply(&mut r, &a, &mix, tunnels);
            assert!((r.cycles_per_packet - (base.cycles_per_packet + extra)).abs() < 1e-6, "{tunnels}: {}", r.cycles_per_packet);
            let scale = r.cycles_per_packet / base.cycles_per_packet;
            assert!((r.links[2].cores - base.links[2].cores * scale).abs() < 1e-9);
            assert!(r.notes.iter().any(|n| n.contains("key-agility measurement /results/agility.json")), "{:?}", r.notes);
            assert_eq!(r.notes.iter().any(|n| n.contains("more than the most SAs measured")), beyond, "{tunnels}");
            assert_eq!(r.links[0].extrapolated, beyond);
        }
        // A size outside the measured ones is said.
        let mut r = in_process(&d, &Mix::fixed(1420), &LINKS_MBPS).unwrap();
        crate::plan::agility::apply(&mut r, &a, &Mix::fixed(1420), 100_000);
        assert!(r.notes.iter().any(|n| n.contains("outside the key-agility measurement")), "{:?}", r.notes);
    }
}
