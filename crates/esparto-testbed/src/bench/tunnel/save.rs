//! `bench tunnel --save`: a run's Esparto figures kept for `esparto plan`,
//! in the gateway's results format ([`esparto_bench::results`]), with the
//! machine, the commit and the date.
//!
//! The planner reads Esparto ↔ Esparto's section: the RFC 2544 zero-loss
//! rate at each inner packet size (the search of [`crate::zeroloss`]; a
//! rate found at the generator's most is kept as a lower bound), the two
//! gateway processes' CPU per GB there, and TCP throughput with its CPU
//! per GB. The whole report, every trial of every search included, is
//! saved beside them.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use esparto_bench::results::{self, Kind, TcpThroughput, TunnelData, ZeroLoss};

use super::Report;

/// What `--save` keeps of `r`; `None` if Esparto's section did not run.
pub fn tunnel_data(r: &Report) -> Option<TunnelData> {
    let s = r.esparto.as_ref()?;
    let o = &r.options;
    Some(TunnelData {
        suite: o.esp_proposal.clone(),
        workers: o.workers,
        flows: o.comparison_flows,
        trial_seconds: o.search.trial.as_secs_f64(),
        resolution: o.search.resolution,
        loss_tolerance: o.search.loss_tolerance,
        zero_loss: s
            .udp
            .iter()
            .map(|u| ZeroLoss {
                ip_size: u.ip_size,
                pps: u.rate_pps,
                lower_bound: u.outcome.at_max,
                confirmed: u.outcome.confirmed,
                gateway_s_per_gb: u.cpu.as_ref().and_then(|c| c.gateway_s_per_gb),
            })
            .collect(),
        tcp: s
            .tcp
            .iter()
            .map(|t| TcpThroughput {
                streams: t.result.streams,
                mbps: t.result.received_mbps,
                gateway_s_per_gb: t.cpu.gateway_s_per_gb,
            })
            .collect(),
        report: serde_json::to_value(r).unwrap_or(serde_json::Value::Null),
    })
}

/// Saves `r` into `dir`; returns the file.
pub fn save(r: &Report, dir: &Path) -> Result<PathBuf> {
    let Some(data) = tunnel_data(r) else {
        bail!("--save: Esparto's section did not run in this run: nothing saved");
    };
    let suite = data.suite.clone();
    results::save(dir, &suite, &results::envelope(Kind::Tunnel, data))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::baseline::{Section, UdpFigure};
    use crate::zeroloss::Outcome;

    fn udp(ip_size: usize, rate_pps: f64, at_max: bool) -> UdpFigure {
        UdpFigure {
            ip_size,
            payload: ip_size - 28,
            rate_pps,
            ip_mbps: rate_pps * ip_size as f64 * 8.0 / 1e6,
            generator_pps: None,
            outcome: Outcome {
                rate_pps,
                confirmed: rate_pps > 0.0,
                at_max,
                loss_tolerance: 0.0,
                steps: vec![],
            },
            cpu: None,
            workers: None,
        }
    }

    #[test]
    fn saved_runs_are_read_back_by_the_planner() {
        let mut r = crate::bench::tunnel::tests::report(vec![]);
        assert!(tunnel_data(&r).is_none());
        let dir = tempfile::tempdir().unwrap();
        assert!(save(&r, dir.path()).is_err());
        r.esparto = Some(Section {
            label: "Esparto".into(),
            tcp: vec![],
            udp: vec![udp(64, 900_000.0, true), udp(1400, 400_000.0, false)],
        });
        let path = save(&r, dir.path()).unwrap();
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tunnel-aes256gcm16-")
        );
        let found = results::load_dir(dir.path(), &results::Machine::this()).unwrap();
        assert!(found.ignored.is_empty(), "{:?}", found.ignored);
        let t = found.newest_tunnel().unwrap();
        assert_eq!(t.saved.commit, results::COMMIT);
        let z = &t.saved.data.zero_loss;
        assert_eq!(
            z.iter()
                .map(|z| (z.ip_size, z.pps, z.lower_bound))
                .collect::<Vec<_>>(),
            [(64, 900_000.0, true), (1400, 400_000.0, false)]
        );
        assert_eq!(t.saved.data.report["options"]["quick"], true);
    }
}
