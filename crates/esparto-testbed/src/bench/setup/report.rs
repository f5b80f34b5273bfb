//! What one peer of `esparto-testbed bench setup` reports to the orchestrator, as
//! one line of JSON on its stdout: its counts, its CPU time and memory over
//! the run, and the counters that say whether the run was clean.

use esparto_ike::Stats;
use serde::{Deserialize, Serialize};

/// Which side this process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Starts the tunnels.
    Initiator,
    /// Answers them.
    Responder,
}

/// The engine's counters that tell whether the run was clean.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineCounters {
    /// Datagrams handed to the endpoint.
    pub datagrams: u64,
    /// Not IKE, or not parseable.
    pub malformed: u64,
    /// For no IKE SA we hold.
    pub unknown_spi: u64,
    /// IKE_SA_INIT requests refused.
    pub init_refused: u64,
    /// Integrity check failures.
    pub integrity_failures: u64,
    /// Out-of-window or unexpected messages (retransmissions land here).
    pub out_of_window: u64,
    /// COOKIEs sent (responder).
    pub cookies_sent: u64,
    /// Half-open drops (per source and global).
    pub half_open_dropped: u64,
}

impl From<Stats> for EngineCounters {
    fn from(s: Stats) -> Self {
        EngineCounters {
            datagrams: s.datagrams,
            malformed: s.malformed,
            unknown_spi: s.unknown_spi,
            init_refused: s.init_refused,
            integrity_failures: s.integrity_failures,
            out_of_window: s.out_of_window,
            cookies_sent: s.cookies_sent,
            half_open_dropped: s.half_open_dropped_per_source + s.half_open_dropped_global,
        }
    }
}

/// Handshake latency on the initiator, from `initiate` to its Child SA.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Median, milliseconds.
    pub median_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Largest, milliseconds.
    pub max_ms: f64,
}

/// What one peer measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerReport {
    /// Which side.
    pub role: Role,
    /// CPU it was pinned to.
    pub cpu: Option<usize>,
    /// Child SAs established (`ChildSaEstablished` events).
    pub tunnels: usize,
    /// IKE SAs established.
    pub ike_sas: usize,
    /// IKE SAs started (initiator) or created (responder).
    pub started: usize,
    /// IKE SAs or Child SAs that failed.
    pub failures: usize,
    /// The first few failure reasons.
    pub failure_reasons: Vec<String>,
    /// Wall-clock seconds: initiator from the first `initiate`, responder
    /// from the first datagram, to the last Child SA.
    pub seconds: f64,
    /// CPU seconds of the loop over the same span (user + system).
    pub cpu_seconds: f64,
    /// User-mode part (10 ms resolution).
    pub user_seconds: f64,
    /// Kernel part (10 ms resolution).
    pub system_seconds: f64,
    /// `tunnels / cpu_seconds`: the per-core figure.
    pub tunnels_per_cpu_second: f64,
    /// VmRSS before the first tunnel, bytes.
    pub rss_before: u64,
    /// VmRSS with every tunnel up, bytes.
    pub rss_after: u64,
    /// `(rss_after − rss_before) / tunnels`.
    pub rss_per_tunnel: f64,
    /// Live heap before, bytes (`count-alloc` builds only).
    pub heap_before: Option<i64>,
    /// Live heap with every tunnel up.
    pub heap_after: Option<i64>,
    /// `(heap_after − heap_before) / tunnels`.
    pub heap_per_tunnel: Option<f64>,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Datagrams beyond the exchange's own count: retransmitted requests
    /// (initiator: more than 2 per IKE SA, 3 with cookies) or duplicate
    /// requests received (responder). Must be 0.
    pub retransmissions: u64,
    /// Datagrams the socket layer dropped (send errors, truncation) plus the
    /// namespace's UDP receive-buffer errors (`/proc/net/snmp`) over the run.
    pub socket_drops: u64,
    /// Whether UDP GSO stayed on for the sends.
    pub gso: bool,
    /// The engine's counters.
    pub engine: EngineCounters,
    /// Initiator only.
    pub latency: Option<Latency>,
    /// Initiator only: seconds at which 10 %, 20 %, … 100 % of the tunnels were up.
    pub deciles: Vec<f64>,
    /// Did it finish before the timeout?
    pub completed: bool,
}

/// Median, 99th percentile and maximum of `ms` (sorted in place).
pub(crate) fn latency(ms: &mut [f64]) -> Latency {
    if ms.is_empty() {
        return Latency::default();
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Latency {
        median_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let l = latency(&mut v);
        assert_eq!((l.median_ms, l.p99_ms, l.max_ms), (51.0, 99.0, 100.0));
        assert_eq!(latency(&mut []).max_ms, 0.0);
    }
}
