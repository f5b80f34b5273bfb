//! The gateway's status, as `esparto status [--json]` shows it: per worker
//! and per SA, packets, bytes and drops by reason — what `ipsec
//! trafficstatus` shows, per CPU. Serialized over the control socket.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A snapshot of the whole gateway.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// Esparto's version.
    pub version: String,
    /// Process id of the daemon.
    pub pid: u32,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// The TUN device.
    pub tun: String,
    /// Per-worker figures.
    pub workers: Vec<WorkerStatus>,
    /// Per-SA figures (an outbound fallback SA appears once per worker that used it).
    pub sas: Vec<SaStatus>,
    /// Drops by reason, summed over workers.
    pub drops: BTreeMap<String, u64>,
}

/// One worker.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerStatus {
    /// Worker index.
    pub worker: u16,
    /// CPU it is pinned to.
    pub cpu: Option<usize>,
    /// Packets encapsulated.
    pub tx_packets: u64,
    /// Packets decapsulated.
    pub rx_packets: u64,
    /// Drops by reason (non-zero only).
    pub drops: BTreeMap<String, u64>,
}

/// One SA as one worker sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SaStatus {
    /// Connection name.
    pub connection: String,
    /// Child name.
    pub child: String,
    /// SPI, as 8 hex digits.
    pub spi: String,
    /// "in" or "out".
    pub direction: String,
    /// "fallback", "sub" (a per-worker SA) or "single" (the only SA pair).
    pub role: String,
    /// The worker that processes it.
    pub worker: u16,
    /// Suite, strongSwan spelling.
    pub suite: String,
    /// Peer UDP endpoint.
    pub peer: String,
    /// Packets.
    pub packets: u64,
    /// Inner bytes.
    pub bytes: u64,
    /// Highest sequence number sent or received.
    pub last_seq: u64,
    /// Seconds since it was installed.
    pub age_s: f64,
    /// Drops attributable to the SA (non-zero only).
    pub drops: BTreeMap<String, u64>,
}
