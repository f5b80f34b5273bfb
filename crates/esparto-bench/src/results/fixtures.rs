//! Results for the tests of the store and the planner: rows and figures
//! of each kind, shaped like what the benchmarks save.

#![allow(clippy::unwrap_used)]

use super::schema::{CallRateData, DataplaneData, TunnelData, ZeroLoss};
use crate::bench::dataplane;

/// A `bench dataplane` row with `cycles_per_byte` at `size` bytes.
pub(crate) fn row(size: usize, cycles_per_byte: f64) -> dataplane::Row {
    let bytes = size as f64;
    let rt_pps = 2.6e9 / (cycles_per_byte * bytes);
    dataplane::Row {
        size: size.to_string(),
        bytes,
        workers: 2,
        suite: "aes256gcm16".into(),
        raw_gbps: 1.0,
        raw_mpps: 1.0,
        esp_gbps: 2.0 * rt_pps * bytes * 8.0 / 1e9,
        esp_mpps: 2.0 * rt_pps / 1e6,
        esp_mpps_1: rt_pps / 1e6,
        encap_mpps_1: 1.0,
        cycles_per_byte,
        raw_cycles_per_byte: cycles_per_byte * 0.8,
        ratio: 0.8,
        ratio_separate: 0.8,
        scaling: 2.0,
    }
}

/// A `bench dataplane` result of `suite` at 64, 128 and 1420 bytes.
pub(crate) fn dataplane_data(suite: &str) -> DataplaneData {
    DataplaneData {
        suite: suite.into(),
        workers: 2,
        seconds: 0.5,
        runs: 3,
        rows: vec![row(64, 12.88), row(128, 6.56), row(1420, 1.16)],
    }
}

/// A `bench tunnel` result: `(IP size, zero-loss packets/s)`.
pub(crate) fn tunnel_data(points: &[(usize, f64)]) -> TunnelData {
    TunnelData {
        suite: "aes256gcm16".into(),
        workers: 2,
        flows: 4,
        trial_seconds: 2.0,
        resolution: 0.03,
        loss_tolerance: 0.0,
        zero_loss: points
            .iter()
            .map(|&(ip_size, pps)| ZeroLoss {
                ip_size,
                pps,
                lower_bound: false,
                confirmed: true,
                gateway_s_per_gb: Some(10.0),
            })
            .collect(),
        tcp: vec![],
        report: serde_json::Value::Null,
    }
}

/// A `bench voip --rates` result: `(IP size, packets/s, lower bound)`.
pub(crate) fn call_rate_data(points: &[(usize, f64, bool)]) -> CallRateData {
    CallRateData {
        suite: "aes256gcm16".into(),
        workers: 2,
        tuples: 512,
        ptime_ms: 20,
        trial_seconds: 3.0,
        resolution: 0.05,
        zero_loss: points
            .iter()
            .map(|&(ip_size, pps, lower_bound)| ZeroLoss {
                ip_size,
                pps,
                lower_bound,
                confirmed: false,
                gateway_s_per_gb: None,
            })
            .collect(),
        report: serde_json::Value::Null,
    }
}
