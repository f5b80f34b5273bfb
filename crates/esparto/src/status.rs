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
    /// How outbound flows are spread over the TUN's queues ("flow table",
    /// "flow hash", "kernel flow learning"; empty from older daemons).
    #[serde(default)]
    pub steering: String,
    /// Per-worker figures.
    pub workers: Vec<WorkerStatus>,
    /// Per-SA figures (an outbound fallback SA appears once per worker that used it).
    pub sas: Vec<SaStatus>,
    /// Drops by reason, summed over workers, and the kernel's drops at the
    /// TUN device (`tun_queue_full`, `tun_input_dropped`; see `devices`).
    pub drops: BTreeMap<String, u64>,
    /// The kernel's own counters of each TUN device the daemon reads and
    /// writes, since the daemon started.
    #[serde(default)]
    pub devices: Vec<DeviceStatus>,
    /// IKE SAs and their Child SAs (empty without IKE connections).
    #[serde(default)]
    pub ike_sas: Vec<IkeSaStatus>,
    /// The IKE engine's counters (datagrams, drops, cookies, …).
    #[serde(default)]
    pub ike: BTreeMap<String, u64>,
    /// IKE SAs by state, and the set-ups, rekeys and failures of IKE and
    /// Child SAs since the daemon started (all zero without IKE).
    #[serde(default)]
    pub ike_events: IkeEvents,
}

/// The IKE engine's SAs by state and what became of the SAs it negotiated,
/// counted since the daemon started. Maps by reason hold non-zero counts
/// only; reasons are `esparto_ike::Reason::name`s (`timeout`,
/// `no_proposal_chosen`, `authentication_failed`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IkeEvents {
    /// IKE SAs the engine holds, by state: `waiting` (an initiation
    /// waiting for its turn to the peer, `initiating_per_peer`: nothing
    /// sent yet), `connecting` (IKE_SA_INIT sent),
    /// `authenticating` (IKE_AUTH in progress, a responder's half-open SA
    /// included), `established`, `failed` (a responder's failed
    /// authentication, kept to answer retransmissions). Every state is
    /// listed, zero or not.
    pub ike_sa_states: BTreeMap<String, u64>,
    /// IKE SAs established (IKE_AUTH completed), either role.
    pub ike_sa_setups: u64,
    /// IKE SAs rekeyed (RFC 7296 §1.3.2).
    pub ike_sa_rekeys: u64,
    /// Of those, the rekeys we initiated (the rest the peer did).
    #[serde(default)]
    pub ike_sa_rekeys_initiated: u64,
    /// IKE messages received and sent, by exchange, direction and kind,
    /// under strongSwan's counter names (`ike-init-in-req`,
    /// `ike-auth-out-resp`, `create-child-in-resp`, `info-out-req`, …).
    #[serde(default)]
    pub ike_messages: BTreeMap<String, u64>,
    /// IKE SAs that ended before they were established, by reason.
    pub ike_sa_failures: BTreeMap<String, u64>,
    /// Established IKE SAs that ended, by reason (`terminated` and
    /// `deleted_by_peer` are the orderly ones).
    pub ike_sa_deletes: BTreeMap<String, u64>,
    /// Failed authentications, by what failed (`bad_auth`, `no_secret`,
    /// `unknown_identity`, `unsupported_method`, `rejected_by_peer`).
    pub auth_failures: BTreeMap<String, u64>,
    /// Child SAs negotiated, not counting rekeys.
    pub child_sa_setups: u64,
    /// Child SAs negotiated to replace another (RFC 7296 §2.8).
    pub child_sa_rekeys: u64,
    /// Child SAs that could not be negotiated, by reason.
    pub child_sa_failures: BTreeMap<String, u64>,
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
    /// Inner bytes encapsulated.
    #[serde(default)]
    pub tx_bytes: u64,
    /// Inner bytes decapsulated.
    #[serde(default)]
    pub rx_bytes: u64,
    /// Drops by reason (non-zero only): the ESP engine's and the I/O
    /// layer's (`control_queue_full`, `send_buffer_full`, …).
    pub drops: BTreeMap<String, u64>,
    /// System calls and batching of its TUN queue and UDP socket.
    #[serde(default)]
    pub io: IoStatus,
    /// NAT keepalives received (RFC 3948 §2.3: consumed, not a drop).
    #[serde(default)]
    pub keepalives: u64,
    /// Events (acquires, expiries) for the control plane lost because too
    /// many were already waiting.
    #[serde(default)]
    pub events_dropped: u64,
    /// How long the worker went without draining its queues.
    #[serde(default)]
    pub loop_gaps: LoopGapsStatus,
    /// Milliseconds the worker thread was runnable but waited for a CPU
    /// since it started (the scheduler's run delay; absent where the
    /// kernel does not say): other work taking the CPU shows here.
    #[serde(default)]
    pub cpu_wait_ms: Option<f64>,
}

/// A TUN device as the kernel counts it (`ip -s link`), since the daemon
/// started.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceStatus {
    /// The device's name.
    pub name: String,
    /// Packets the host sent into the device, towards the workers (`ip -s
    /// link`'s TX).
    pub to_workers: u64,
    /// Of those, packets the kernel dropped because the device's queue
    /// towards the workers was full: the workers did not read in time
    /// (see each worker's `loop_gaps` and `cpu_wait_ms`). Reason
    /// `tun_queue_full`.
    pub queue_full: u64,
    /// Packets the workers wrote into the device, towards the host (RX).
    pub from_workers: u64,
    /// Of those, packets the kernel dropped on their way into the host's
    /// stack. Reason `tun_input_dropped`.
    pub input_dropped: u64,
}

/// How long one worker went without draining its queues: a histogram of
/// the time between the starts of its loop's turns. An idle worker turns
/// at least once a tick (100 ms), so a gap well beyond that is time it
/// did not run when it should have; `cpu_wait_ms` beside it says whether
/// other work held the CPU.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LoopGapsStatus {
    /// Upper bounds of the buckets, milliseconds (a last bucket, without a
    /// bound, holds every longer gap).
    pub bounds_ms: Vec<f64>,
    /// Gaps per bucket (one more entry than `bounds_ms`).
    pub counts: Vec<u64>,
    /// The sum of every gap, milliseconds.
    pub sum_ms: f64,
    /// The longest gap, milliseconds.
    pub max_ms: f64,
    /// Gaps longer than 200 ms.
    pub over_200ms: u64,
}

impl LoopGapsStatus {
    /// From a worker's histogram.
    pub fn from_gaps(g: &esparto_io::worker::LoopGaps) -> Self {
        Self {
            bounds_ms: esparto_io::worker::LOOP_GAP_BOUNDS_US.iter().map(|&us| us as f64 / 1000.0).collect(),
            counts: g.counts.to_vec(),
            sum_ms: g.sum_us as f64 / 1000.0,
            max_ms: g.max_us as f64 / 1000.0,
            over_200ms: g.longer_than(200_000),
        }
    }
}

/// One worker's I/O: how many packets each system call carried.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IoStatus {
    /// TUN reads that returned a packet.
    pub tun_reads: u64,
    /// Of those, reads of a GSO super-packet (split into several packets).
    pub tun_gso_reads: u64,
    /// Packets read from the TUN (after splitting).
    pub tun_rx_packets: u64,
    /// Packets written to the TUN (before coalescing).
    pub tun_tx_packets: u64,
    /// Writes to the TUN (a coalesced super-packet is one).
    #[serde(default)]
    pub tun_writes: u64,
    /// `recvmmsg` calls on the UDP socket that returned datagrams.
    pub udp_recv_calls: u64,
    /// Datagrams received (after splitting GRO buffers).
    pub udp_rx_datagrams: u64,
    /// `sendmmsg` calls.
    pub udp_send_calls: u64,
    /// Datagrams handed to the kernel.
    pub udp_tx_datagrams: u64,
    /// Datagrams dropped because the socket's send buffer was full.
    pub udp_tx_dropped: u64,
    /// Other receive/send errors.
    pub io_errors: u64,
}

impl IoStatus {
    /// From a worker's I/O counters.
    pub fn from_stats(r: &esparto_io::IoStats) -> Self {
        Self {
            tun_reads: r.tun.rx_reads,
            tun_gso_reads: r.tun.rx_gso_reads,
            tun_rx_packets: r.tun.rx_packets,
            tun_tx_packets: r.tun.tx_packets,
            tun_writes: r.tun.tx_writes,
            udp_recv_calls: r.udp.rx_calls,
            udp_rx_datagrams: r.udp.rx_datagrams,
            udp_send_calls: r.udp.tx_calls,
            udp_tx_datagrams: r.udp.tx_datagrams,
            udp_tx_dropped: r.udp_tx_dropped,
            io_errors: r.io_errors,
        }
    }
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
    /// IPComp on this SA (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipcomp: Option<IpcompStatus>,
}

/// IPComp of one SA as one worker sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IpcompStatus {
    /// The CPI in its headers, 4 hex digits.
    pub cpi: String,
    /// "yes" or "adaptive".
    pub mode: String,
    /// Outbound: "compressing", "paused-incompressible" or "paused-cpu"
    /// (adaptive, not compressing for now, and why).
    pub state: String,
    /// Outbound, adaptive: why it last switched (empty: never).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_switch: String,
    /// Packets compressed (outbound) or decompressed (inbound).
    pub compressed: u64,
    /// Outbound packets sent uncompressed (short, not smaller, back-off).
    pub skipped: u64,
    /// Bytes compression took off.
    pub bytes_saved: u64,
    /// Compressed over original size of the compressed packets.
    pub ratio: f64,
    /// Times an adaptive SA stopped compressing.
    pub switches_off: u64,
    /// Inbound payloads that did not decompress (dropped as `malformed`).
    #[serde(default)]
    pub decompress_failed: u64,
    /// Inbound payloads that decompressed past the bound (dropped as
    /// `too_big`).
    #[serde(default)]
    pub too_big: u64,
}

/// [`IpcompStatus::state`] of a child configured with `ipcomp` whose peer
/// refused it (the SA runs without IPComp).
pub const IPCOMP_REFUSED: &str = "refused by peer";

impl IpcompStatus {
    /// A child configured with `ipcomp` (in `mode`) whose peer refused it:
    /// state [`IPCOMP_REFUSED`], no CPI, no figures.
    pub fn refused(mode: esparto_esp::IpcompMode) -> Self {
        Self { mode: mode_name(mode).into(), state: IPCOMP_REFUSED.into(), ratio: 1.0, ..Self::default() }
    }

    /// From the data plane's figures.
    pub fn from_stats(s: &esparto_esp::IpcompStats) -> Self {
        Self {
            cpi: format!("{:04x}", s.cpi),
            mode: mode_name(s.mode).into(),
            state: s.state.name().into(),
            last_switch: s.last_switch.map(|w| w.reason()).unwrap_or_default(),
            compressed: s.compressed,
            skipped: s.skipped,
            bytes_saved: s.bytes_saved(),
            ratio: s.ratio(),
            switches_off: s.switches_off,
            decompress_failed: s.decompress_failed,
            too_big: s.too_big,
        }
    }
}

fn mode_name(m: esparto_esp::IpcompMode) -> &'static str {
    match m {
        esparto_esp::IpcompMode::Always => "yes",
        esparto_esp::IpcompMode::Adaptive => "adaptive",
    }
}

/// One IKE SA, as `esparto sas` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IkeSaStatus {
    /// Our id for it (the initiator's SPI, hex).
    pub id: String,
    /// Connection name.
    pub connection: String,
    /// "connecting", "established".
    pub state: String,
    /// Whether we initiated it.
    pub initiator: bool,
    /// Our IKE endpoint.
    pub local: String,
    /// The peer's IKE endpoint.
    pub remote: String,
    /// The host name (from `remote_addrs`) that gave the peer's address,
    /// if it was named (empty otherwise, and from older daemons).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    /// Our identity.
    pub local_id: String,
    /// The peer's identity.
    pub remote_id: String,
    /// Seconds since it was established.
    pub age_s: f64,
    /// The chosen IKE proposal in strongSwan's syntax
    /// (`IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519`; empty until
    /// IKE_SA_INIT completed, and from older daemons).
    #[serde(default)]
    pub proposal: String,
    /// Seconds until it is rekeyed (`None`: never, or not known).
    #[serde(default)]
    pub rekey_in_s: Option<f64>,
    /// The responder's SPI, hex (empty until IKE_SA_INIT completed, and
    /// from older daemons); the initiator's is `id` unless a rekey
    /// replaced the SA.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub responder_spi: String,
    /// The initiator's SPI of the SA in use, hex (it differs from `id`
    /// after an IKE SA rekey; empty from older daemons).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub initiator_spi: String,
    /// What NAT detection found and how ESP travels.
    #[serde(default)]
    pub nat: NatStatus,
    /// Its Child SAs.
    pub children: Vec<ChildSaStatus>,
}

/// NAT detection (RFC 7296 §2.23) and the encapsulation of ESP (RFC 3948).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NatStatus {
    /// Our address was translated on the way to the peer (we send keepalives).
    pub local_behind_nat: bool,
    /// The peer's address was translated (or the peer forces encapsulation).
    pub remote_behind_nat: bool,
    /// How ESP travels: `esp-in-udp` (Esparto's data plane sends nothing else).
    pub encap: String,
    /// The connection forces UDP encapsulation (`encap = true`): the NAT
    /// detection hash we send is faked, so the peer sees us behind a NAT.
    pub encap_forced: bool,
    /// Our ESP-in-UDP port.
    pub local_port: u16,
    /// The peer's ESP-in-UDP port (0: no Child SA yet).
    pub remote_port: u16,
}

/// One Child SA (an inbound and an outbound ESP SA).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChildSaStatus {
    /// Child name.
    pub child: String,
    /// SPI we receive on (hex).
    pub in_spi: String,
    /// SPI we send on (hex).
    pub out_spi: String,
    /// ESP suite, strongSwan spelling.
    pub suite: String,
    /// "single", "fallback" or "sub".
    pub role: String,
    /// The worker that receives on it (its SPI steers there).
    pub in_worker: Option<u16>,
    /// The worker that sends on it (`None`: every worker, a fallback SA,
    /// or nobody: see `out_state`).
    pub out_worker: Option<u16>,
    /// Its outbound half: "sending", "waiting" (a rekey the peer started:
    /// until the peer switches to it) or "idle" (received on only; empty
    /// from older daemons).
    #[serde(default)]
    pub out_state: String,
    /// Our traffic selectors (empty from older daemons).
    #[serde(default)]
    pub local_ts: Vec<String>,
    /// The peer's traffic selectors.
    #[serde(default)]
    pub remote_ts: Vec<String>,
    /// Seconds since it was established.
    pub age_s: f64,
    /// Seconds until it is rekeyed: its soft lifetime (`None`: never, a
    /// rekey is under way, or an older daemon).
    #[serde(default)]
    pub rekey_in_s: Option<f64>,
    /// Seconds until it expires: its hard lifetime (`None`: never).
    #[serde(default)]
    pub expire_in_s: Option<f64>,
    /// Seconds since a packet was last received on it (`None`: none yet).
    /// The data plane stamps each SA with the time of the batch that
    /// carried its last packet, so this is exact to a batch.
    #[serde(default)]
    pub in_idle_s: Option<f64>,
    /// Seconds since a packet was last sent on it (`None`: none yet).
    #[serde(default)]
    pub out_idle_s: Option<f64>,
    /// Inner bytes received.
    pub in_bytes: u64,
    /// Packets received.
    pub in_packets: u64,
    /// Inner bytes sent.
    pub out_bytes: u64,
    /// Packets sent.
    pub out_packets: u64,
    /// IPComp of a child configured with `ipcomp`: the mode and CPIs
    /// (`"adaptive, cpi in 1a2b out 3c4d"`), or [`IPCOMP_REFUSED`] when
    /// the peer did not accept it (no IPCOMP_SUPPORTED back, or another
    /// transform or an unusable CPI: the SA runs without IPComp). Empty
    /// without `ipcomp`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ipcomp: String,
}

/// What a configuration reload did (`esparto reload`): connections by what
/// happened to them, the `[daemon]` settings only a restart applies, and
/// anything that failed while the rest applied.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReloadReport {
    /// The file read.
    pub file: String,
    /// Connections loaded (and started or trapped, as `start_action` says).
    pub added: Vec<String>,
    /// Connections whose settings changed: closed and loaded again.
    pub changed: Vec<String>,
    /// Connections closed and dropped.
    pub removed: Vec<String>,
    /// Connections left as they were, SAs and all.
    pub unchanged: usize,
    /// IKE SAs deleted with their peers (of removed and changed
    /// connections); the Deletes are answered after the reload returns.
    pub ike_sas_deleted: usize,
    /// Settings the file changes that the running daemon keeps until it is
    /// restarted, each with the running and the new value.
    pub needs_restart: Vec<String>,
    /// The file's warnings (what `check-config` warns about, without the
    /// comparisons with the host's routes).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What failed while the rest applied.
    pub problems: Vec<String>,
    /// Milliseconds from reading the file to the workers' commands sent.
    pub took_ms: f64,
}

/// A loaded connection, as `esparto list-conns` shows it: what the
/// configuration asks for, not what is negotiated (that is `sas`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ConnStatus {
    /// Connection name.
    pub name: String,
    /// Our outer addresses (empty: any).
    pub local_addrs: Vec<String>,
    /// The peer's outer addresses (empty: any, responder only).
    pub remote_addrs: Vec<String>,
    /// The peer's UDP port for ESP-in-UDP.
    pub remote_port: u16,
    /// IKE settings; `None` when every child is statically keyed.
    pub ike: Option<IkeConnStatus>,
    /// Children.
    pub children: Vec<ChildConnStatus>,
}

/// The IKE side of a loaded connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IkeConnStatus {
    /// Our identity ("" for our IKE address).
    pub local_id: String,
    /// The identity we expect ("" or `%any`: any with a PSK).
    pub remote_id: String,
    /// IKE proposals, in strongSwan's syntax (`IKE:AES_GCM_16_256/…`).
    pub proposals: Vec<String>,
    /// Seconds between IKE SA rekeys (`None`: never).
    pub rekey_time_s: Option<u64>,
    /// Seconds of silence before a liveness check (`None`: off).
    pub dpd_delay_s: Option<u64>,
    /// How each side authenticates: "psk" or "pubkey" (ours, theirs).
    #[serde(default)]
    pub auth: (String, String),
    /// The `unique` policy: "no", "never", "keep" or "replace".
    #[serde(default)]
    pub unique: String,
}

/// A loaded child.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChildConnStatus {
    /// Child name.
    pub name: String,
    /// "ike" (negotiated) or "static" (`static_sas`).
    pub keying: String,
    /// Our selectors.
    pub local_ts: Vec<String>,
    /// The peer's selectors.
    pub remote_ts: Vec<String>,
    /// ESP proposals in strongSwan's syntax (static: the one suite).
    pub esp_proposals: Vec<String>,
    /// "none", "trap" or "start" ("" for static children).
    pub start_action: String,
    /// A trap policy is installed now (`start_action = "trap"`, or VICI
    /// `install`), as the daemon says; `from_config` leaves it false.
    #[serde(default)]
    pub trap: bool,
    /// RFC 9611 sub-SAs: "no", "eager", "on-demand".
    pub per_cpu_sas: String,
    /// Seconds between rekeys (`None`: never, or static).
    pub rekey_time_s: Option<u64>,
    /// Statically keyed SA pairs (0 for negotiated children).
    pub static_pairs: usize,
}

impl ConnStatus {
    /// The listing of one configured connection.
    pub fn from_config(c: &crate::config::Connection) -> Self {
        use esparto_ike::diag::proposal_names;
        let ike = c.ike.as_ref().map(|i| IkeConnStatus {
            local_id: i.local.id.as_ref().map_or_else(String::new, ToString::to_string),
            remote_id: i.remote.id.as_ref().map_or_else(String::new, ToString::to_string),
            proposals: proposal_names(&i.proposals, true),
            rekey_time_s: i.rekey_time.map(|d| d.as_secs()),
            dpd_delay_s: i.dpd_delay.map(|d| d.as_secs()),
            auth: (
                if i.local.credential.is_some() { "pubkey" } else { "psk" }.into(),
                if i.remote.trust.is_some() { "pubkey" } else { "psk" }.into(),
            ),
            unique: i.unique.name().into(),
        });
        let children = c
            .children
            .iter()
            .map(|ch| {
                let negotiated = c.ike.as_ref().and_then(|i| i.child(&ch.name));
                let (keying, esp, start, rekey) = match (&ch.static_sas, negotiated) {
                    (Some(s), _) => {
                        let esn = if s.esn { "EXT_SEQ" } else { "NO_EXT_SEQ" };
                        ("static", vec![format!("{} ({esn})", s.suite.name())], String::new(), None)
                    }
                    (None, Some(n)) => (
                        "ike",
                        proposal_names(&n.esp_proposals, true),
                        match n.start_action {
                            esparto_ike::StartAction::None => "none",
                            esparto_ike::StartAction::Trap => "trap",
                            esparto_ike::StartAction::Start => "start",
                        }
                        .to_string(),
                        n.rekey_time.map(|d| d.as_secs()),
                    ),
                    (None, None) => ("ike", vec![], String::new(), None),
                };
                ChildConnStatus {
                    name: ch.name.clone(),
                    keying: keying.into(),
                    local_ts: selectors(&ch.local_ts),
                    remote_ts: selectors(&ch.remote_ts),
                    esp_proposals: esp,
                    start_action: start,
                    trap: false,
                    per_cpu_sas: match ch.per_cpu_sas {
                        esparto_ike::PerCpuSas::No => "no",
                        esparto_ike::PerCpuSas::Eager => "eager",
                        esparto_ike::PerCpuSas::OnDemand => "on-demand",
                    }
                    .into(),
                    rekey_time_s: rekey,
                    static_pairs: ch.static_sas.as_ref().map_or(0, |s| s.pairs.len()),
                }
            })
            .collect();
        ConnStatus {
            name: c.name.clone(),
            local_addrs: c.local_addrs.iter().map(ToString::to_string).collect(),
            remote_addrs: remote_addrs(c),
            remote_port: c.remote_port,
            ike,
            children,
        }
    }
}

/// A connection's `remote_addrs` as written: addresses and host names in
/// their order.
fn remote_addrs(c: &crate::config::Connection) -> Vec<String> {
    let ips = c.remote_addrs.iter().map(ToString::to_string);
    let mut out: Vec<String> = ips.collect();
    for h in c.remote_hosts.iter().rev() {
        out.insert(h.position.min(out.len()), h.name.to_string());
    }
    out
}

/// Selectors as written; none known yet is `dynamic` (the address of an
/// end known only once the IKE SA is up).
fn selectors(ts: &[esparto_esp::Selector]) -> Vec<String> {
    if ts.is_empty() {
        return vec!["dynamic".into()];
    }
    ts.iter().map(ToString::to_string).collect()
}
