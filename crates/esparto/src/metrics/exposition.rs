//! What a scrape exports: one [`Status`](crate::status::Status) as
//! Prometheus metrics, every name under `esparto_` (the process facts
//! under the `process_` names every client uses), counters ending in
//! `_total`, units in the names (`_bytes`, `_seconds`), labels in
//! snake_case. `docs/METRICS.md` lists them all with their labels.
//!
//! The figures are the status's, unchanged, so `esparto status --json`
//! and a scrape taken at the same moment agree to the packet:
//!
//! - per worker: packets and inner bytes each way (`direction="out"` is
//!   encapsulated, `"in"` decapsulated), drops by reason (the ESP engine's
//!   and the I/O layer's), system calls, NAT keepalives, lost events;
//! - per SA (one direction of a Child SA, `spi` its SPI in hex): packets,
//!   bytes and drops, summed over the workers (a fallback SA is sent on by
//!   every worker) from the workers' own rows ([`SaRow`](super::SaRow)),
//!   so that only the sums are made into text;
//! - the IKE engine: SAs by state, set-ups, rekeys, failures by reason,
//!   its own counters (only when IKE connections are configured).
//!
//! Drops are listed by reason only where the count is not zero: a
//! gateway with 10,000 SAs would otherwise export 120,000 zeros. A series
//! that appears later starts from zero, which is how `rate()` takes it.
//! An SA's series end when the SA does (a rekey starts new ones, with the
//! new SPI): sum by `connection` and `child` for a tunnel's traffic over
//! time.

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

use esparto_esp::{Direction, Drops};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, NoLabelSet, prometheus_text, text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::Scrape;
use super::process::Facts;
use crate::status::IoStatus;

/// The IKE engine's counters that are drops, by the reason they are
/// exported under (`esparto_ike_drops_total{reason}`).
const IKE_DROPS: &[(&str, &str)] = &[
    ("malformed", "malformed"),
    ("unknown_spi", "unknown_spi"),
    ("integrity_failures", "integrity_failure"),
    ("out_of_window", "out_of_window"),
    ("half_open_dropped_per_source", "half_open_per_source"),
    ("half_open_dropped_global", "half_open_global"),
    ("closing_dropped", "closing"),
];

/// The IKE engine's other counters: key in `status.ike`, metric name
/// (without `_total`), help.
const IKE_COUNTERS: &[(&str, &str, &str)] = &[
    ("datagrams", "esparto_ike_datagrams", "IKE datagrams received."),
    (
        "init_refused",
        "esparto_ike_init_refused",
        "IKE_SA_INIT requests refused (no proposal, wrong group, limits).",
    ),
    (
        "cookies_sent",
        "esparto_ike_cookies_sent",
        "IKE_SA_INIT requests answered with only a COOKIE (RFC 7296 §2.6).",
    ),
    (
        "cookies_verified",
        "esparto_ike_cookies_verified",
        "Requests whose COOKIE passed.",
    ),
    (
        "cookies_rejected",
        "esparto_ike_cookies_rejected",
        "Requests whose COOKIE did not pass.",
    ),
    (
        "invalid_ike_spi_sent",
        "esparto_ike_invalid_ike_spi_sent",
        "INVALID_IKE_SPI sent for IKE SAs we do not hold (RFC 7296 §2.21.4).",
    ),
    (
        "invalid_ike_spi_received",
        "esparto_ike_invalid_ike_spi_received",
        "INVALID_IKE_SPI answers to our requests: the peer lost the IKE SA.",
    ),
    (
        "invalid_ike_spi_ignored",
        "esparto_ike_invalid_ike_spi_ignored",
        "Unprotected INVALID_IKE_SPI that matched no request of ours.",
    ),
    (
        "invalid_spi_hints_sent",
        "esparto_ike_invalid_spi_hints_sent",
        "INVALID_SPI notifications sent about ESP with an unknown SPI (RFC 7296 §1.5).",
    ),
    (
        "invalid_spi_hints_received",
        "esparto_ike_invalid_spi_hints_received",
        "INVALID_SPI notifications received that named one of our Child SAs.",
    ),
    (
        "rate_limited",
        "esparto_ike_rate_limited",
        "Unprotected answers or hint checks left out by the rate limits.",
    ),
    (
        "reinitiations",
        "esparto_ike_reinitiations",
        "Connections initiated again after their IKE SA died.",
    ),
    (
        "recoveries",
        "esparto_ike_recoveries",
        "Connections initiated because their peer sent ESP for SAs this daemon no longer held (recover = initiate).",
    ),
    (
        "additional_key_exchanges",
        "esparto_ike_additional_key_exchanges",
        "Additional key exchanges (RFC 9370, ML-KEM) completed in IKE_INTERMEDIATE exchanges.",
    ),
    (
        "intermediate_refused",
        "esparto_ike_intermediate_refused",
        "IKE_INTERMEDIATE requests refused (out of order, another method, a malformed key): the IKE SA ended.",
    ),
    (
        "mobike_updates",
        "esparto_ike_mobike_updates",
        "IKE SAs moved to new addresses by MOBIKE (RFC 4555).",
    ),
    (
        "mobike_checks_failed",
        "esparto_ike_mobike_checks_failed",
        "MOBIKE return routability checks that failed: the peer's old addresses were kept.",
    ),
    (
        "unresolved_hosts",
        "esparto_ike_unresolved_hosts",
        "Lookups of a peer's host name (remote_addrs) that failed.",
    ),
    (
        "initiations_paced",
        "esparto_ike_initiations_paced",
        "Initiations that waited for their turn to the peer (initiating_per_peer).",
    ),
    (
        "liveness_checks",
        "esparto_ike_liveness_checks",
        "Liveness checks sent: dpd_delay passed without an IKE message or authenticated ESP from the peer.",
    ),
    (
        "cert_payloads_skipped",
        "esparto_ike_cert_payloads_skipped",
        "CERT payloads of encodings other than X.509 certificate, skipped.",
    ),
    (
        "fragments_sent",
        "esparto_ike_fragments_sent",
        "IKE fragments sent (RFC 7383), retransmissions included.",
    ),
    (
        "fragments_received",
        "esparto_ike_fragments_received",
        "IKE fragments of the peers authenticated and kept for reassembly.",
    ),
    (
        "fragments_dropped",
        "esparto_ike_fragments_dropped",
        "Authenticated IKE fragments not kept: duplicates, a smaller Total Fragments, reassembly bounds.",
    ),
    (
        "messages_reassembled",
        "esparto_ike_messages_reassembled",
        "IKE messages of the peers put back together from fragments.",
    ),
];

/// A worker's I/O counter: metric name (without `_total`), help, and
/// where it is in the status.
type IoCounter = (&'static str, &'static str, fn(&IoStatus) -> u64);

/// Hex digits of an SPI label.
const SPI_DIGITS: usize = 8;

/// The workers' I/O counters.
const WORKER_IO: [IoCounter; 9] = [
    ("esparto_worker_tun_reads", "TUN reads that returned a packet.", |i| {
        i.tun_reads
    }),
    (
        "esparto_worker_tun_gso_reads",
        "TUN reads of a GSO super-packet.",
        |i| i.tun_gso_reads,
    ),
    (
        "esparto_worker_tun_read_packets",
        "Packets read from the TUN queue (after splitting).",
        |i| i.tun_rx_packets,
    ),
    (
        "esparto_worker_tun_writes",
        "Writes to the TUN queue (a coalesced super-packet is one).",
        |i| i.tun_writes,
    ),
    (
        "esparto_worker_tun_written_packets",
        "Packets written to the TUN queue (before coalescing).",
        |i| i.tun_tx_packets,
    ),
    (
        "esparto_worker_udp_recv_calls",
        "recvmmsg calls that returned datagrams.",
        |i| i.udp_recv_calls,
    ),
    (
        "esparto_worker_udp_received_datagrams",
        "Datagrams received (after splitting GRO buffers).",
        |i| i.udp_rx_datagrams,
    ),
    ("esparto_worker_udp_send_calls", "sendmmsg calls.", |i| i.udp_send_calls),
    (
        "esparto_worker_udp_sent_datagrams",
        "Datagrams handed to the kernel.",
        |i| i.udp_tx_datagrams,
    ),
];

/// `status.ike` keys exported otherwise (`ike_sas` as `esparto_ike_sas`,
/// `fragment_bytes_held` as a gauge).
const IKE_NOT_COUNTERS: &[&str] = &["ike_sas", "fragment_bytes_held"];

/// The exposition of `scrape`, with the process `facts`: OpenMetrics text
/// (ending in `# EOF`) or the Prometheus text format 0.0.4.
pub(super) fn render(scrape: Scrape, facts: &Facts, openmetrics: bool) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition {
        scrape,
        facts: facts.clone(),
    }));
    let mut out = String::new();
    if openmetrics {
        text::encode(&mut out, &registry)?;
    } else {
        prometheus_text::encode(&mut out, &registry)?;
    }
    Ok(out)
}

/// One scrape, for the encoder.
#[derive(Debug)]
struct Exposition {
    scrape: Scrape,
    facts: Facts,
}

/// A family of counters.
/// The labels of an `ike_messages` key (`ike-auth-in-req`): exchange,
/// direction, kind.
fn message_labels(key: &str) -> Option<[(&'static str, &'static str); 3]> {
    let (rest, kind) = key.rsplit_once('-')?;
    let (exchange, direction) = rest.rsplit_once('-')?;
    let exchange = match exchange {
        "ike-init" => "IKE_SA_INIT",
        "ike-auth" => "IKE_AUTH",
        "create-child" => "CREATE_CHILD_SA",
        "info" => "INFORMATIONAL",
        _ => return None,
    };
    let direction = match direction {
        "in" => "in",
        "out" => "out",
        _ => return None,
    };
    let kind = match kind {
        "req" => "request",
        "resp" => "response",
        _ => return None,
    };
    Some([("exchange", exchange), ("direction", direction), ("kind", kind)])
}

fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, V, u64>(&v, None)?;
    }
    Ok(())
}

/// A family of gauges.
fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: impl IntoIterator<Item = (L, V)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

/// One counter without labels.
fn counter<V: EncodeCounterValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: V,
) -> fmt::Result {
    e.encode_descriptor(name, help, unit, MetricType::Counter)?
        .encode_counter::<NoLabelSet, V, u64>(&v, None)
}

/// One gauge without labels.
fn gauge<V: EncodeGaugeValue>(
    e: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: V,
) -> fmt::Result {
    e.encode_descriptor(name, help, unit, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// Counts by reason, non-zero only, with one more label in front.
fn by_reason<'a>(
    key: &'static str,
    label: &'a str,
    map: &'a BTreeMap<String, u64>,
) -> impl Iterator<Item = ([(&'static str, &'a str); 2], u64)> + 'a {
    map.iter()
        .filter(|(_, n)| **n > 0)
        .map(move |(r, n)| ([(key, label), ("reason", r.as_str())], *n))
}

/// Counts by reason alone, non-zero only.
fn reasons(map: &BTreeMap<String, u64>) -> impl Iterator<Item = ([(&'static str, &str); 1], u64)> + '_ {
    map.iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| ([("reason", r.as_str())], *n))
}

/// An SA: (connection, child, direction, SPI).
type SaKey<'a> = (&'a str, &'a str, &'static str, u32);

/// An SA's labels, from its key and the SPI in hex.
fn sa_labels<'a>(&(connection, child, direction, _): &SaKey<'a>, spi: &'a str) -> [(&'static str, &'a str); 4] {
    [
        ("connection", connection),
        ("child", child),
        ("direction", direction),
        ("spi", spi),
    ]
}

/// One SA's figures summed over the workers.
#[derive(Debug, Default)]
struct SaSum {
    packets: u64,
    bytes: u64,
    drops: Drops,
}

impl Collector for Exposition {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.scrape.status;
        let e = &mut e;

        // The process.
        e.encode_descriptor("esparto_build", "Esparto's version.", None, MetricType::Info)?
            .encode_info(&[("version", s.version.as_str())])?;
        gauge(
            e,
            "esparto_uptime",
            "Time since the daemon started.",
            Some(&Unit::Seconds),
            s.uptime_s,
        )?;
        gauge(
            e,
            "process_start_time",
            "Start time of the process since the Unix epoch.",
            Some(&Unit::Seconds),
            self.facts.start_time,
        )?;
        if let Some(v) = self.facts.cpu_seconds {
            counter(
                e,
                "process_cpu",
                "User and system CPU time spent.",
                Some(&Unit::Seconds),
                v,
            )?;
        }
        if let Some(v) = self.facts.resident_bytes {
            gauge(
                e,
                "process_resident_memory",
                "Resident memory size.",
                Some(&Unit::Bytes),
                v,
            )?;
        }
        if let Some(v) = self.facts.virtual_bytes {
            gauge(
                e,
                "process_virtual_memory",
                "Virtual memory size.",
                Some(&Unit::Bytes),
                v,
            )?;
        }
        if let Some(v) = self.facts.threads {
            gauge(e, "process_threads", "Threads of the process.", None, v)?;
        }
        if let Some(v) = self.facts.open_fds {
            gauge(e, "process_open_fds", "Open file descriptors.", None, v)?;
        }
        if let Some(v) = self.facts.max_fds {
            gauge(
                e,
                "process_max_fds",
                "Most open file descriptors allowed (soft limit).",
                None,
                v,
            )?;
        }
        gauge(
            e,
            "esparto_metrics_gather",
            "Time the control thread spent gathering this scrape's figures (worker snapshots included).",
            Some(&Unit::Seconds),
            self.scrape.gather.as_secs_f64(),
        )?;

        self.workers(e)?;
        self.sas(e)?;
        if !s.ike.is_empty() {
            self.ike(e)?;
        }
        Ok(())
    }
}

impl Exposition {
    fn workers(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.scrape.status;
        let ids: Vec<String> = s.workers.iter().map(|w| w.worker.to_string()).collect();
        let ws = || ids.iter().map(String::as_str).zip(&s.workers);
        gauge(
            e,
            "esparto_workers",
            "Data-plane worker threads.",
            None,
            s.workers.len() as u64,
        )?;
        gauges(
            e,
            "esparto_worker_cpu",
            "The CPU each worker is pinned to (absent: not pinned).",
            None,
            ws().filter_map(|(k, w)| w.cpu.map(|c| ([("worker", k)], c as u64))),
        )?;
        counters(
            e,
            "esparto_worker_packets",
            "Packets encapsulated (direction=\"out\") and decapsulated (\"in\") by each worker.",
            None,
            ws().flat_map(|(k, w)| {
                [
                    ([("worker", k), ("direction", "out")], w.tx_packets),
                    ([("worker", k), ("direction", "in")], w.rx_packets),
                ]
            }),
        )?;
        counters(
            e,
            "esparto_worker",
            "Inner bytes encapsulated (direction=\"out\") and decapsulated (\"in\") by each worker.",
            Some(&Unit::Bytes),
            ws().flat_map(|(k, w)| {
                [
                    ([("worker", k), ("direction", "out")], w.tx_bytes),
                    ([("worker", k), ("direction", "in")], w.rx_bytes),
                ]
            }),
        )?;
        counters(
            e,
            "esparto_worker_drops",
            "Packets a worker did not deliver, by reason (the ESP engine's and the I/O layer's; non-zero only).",
            None,
            ws().flat_map(|(k, w)| by_reason("worker", k, &w.drops)),
        )?;
        for (name, help, get) in WORKER_IO {
            counters(e, name, help, None, ws().map(|(k, w)| ([("worker", k)], get(&w.io))))?;
        }
        counters(
            e,
            "esparto_worker_io_errors",
            "Receive and send errors other than would-block.",
            None,
            ws().map(|(k, w)| ([("worker", k)], w.io.io_errors)),
        )?;
        counters(
            e,
            "esparto_worker_keepalives",
            "NAT keepalives received (RFC 3948 §2.3: consumed, not dropped).",
            None,
            ws().map(|(k, w)| ([("worker", k)], w.keepalives)),
        )?;
        counters(
            e,
            "esparto_worker_events_dropped",
            "Events for the control thread (acquires, expiries) lost because too many were waiting.",
            None,
            ws().map(|(k, w)| ([("worker", k)], w.events_dropped)),
        )?;
        self.loop_gaps(e)?;
        counters(
            e,
            "esparto_worker_cpu_wait",
            "Time each worker thread was runnable but waited for a CPU (the scheduler's run delay).",
            Some(&Unit::Seconds),
            ws().filter_map(|(k, w)| w.cpu_wait_ms.map(|ms| ([("worker", k)], ms / 1000.0))),
        )?;
        counters(
            e,
            "esparto_device_packets",
            "Packets through each TUN device as the kernel counts them: direction=\"to_workers\" the host sent into it, \"from_workers\" the workers wrote.",
            None,
            s.devices.iter().flat_map(|d| {
                [
                    ([("device", d.name.as_str()), ("direction", "to_workers")], d.to_workers),
                    ([("device", d.name.as_str()), ("direction", "from_workers")], d.from_workers),
                ]
            }),
        )?;
        counters(
            e,
            "esparto_device_drops",
            "Packets the kernel dropped at each TUN device (tun_queue_full: its queue towards the workers was full; tun_input_dropped: on their way into the host), non-zero only.",
            None,
            s.devices.iter().flat_map(|d| {
                [
                    ([("device", d.name.as_str()), ("reason", "tun_queue_full")], d.queue_full),
                    ([("device", d.name.as_str()), ("reason", "tun_input_dropped")], d.input_dropped),
                ]
                .into_iter()
                .filter(|(_, n)| *n > 0)
            }),
        )?;
        counters(
            e,
            "esparto_drops",
            "Packets not delivered, by reason, summed over the workers, with the kernel's drops at the TUN devices (non-zero only).",
            None,
            reasons(&s.drops),
        )
    }

    /// Each worker's loop gaps as a histogram.
    fn loop_gaps(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let mut m = e.encode_descriptor(
            "esparto_worker_loop_gap",
            "Time between the starts of a worker's loop turns (each drains its TUN queue and socket); an idle worker turns every 100 ms, so longer gaps are time it did not run.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for w in &self.scrape.status.workers {
            let g = &w.loop_gaps;
            if g.counts.len() != g.bounds_ms.len() + 1 {
                continue;
            }
            // The last bucket has no bound: +Inf.
            let buckets: Vec<(f64, u64)> =
                g.bounds_ms.iter().map(|ms| ms / 1000.0).chain([f64::INFINITY]).zip(g.counts.iter().copied()).collect();
            let worker = w.worker.to_string();
            m.encode_family(&[("worker", worker.as_str())])?.encode_histogram::<NoLabelSet>(
                g.sum_ms / 1000.0,
                g.counts.iter().sum(),
                &buckets,
                None,
            )?;
        }
        Ok(())
    }

    fn sas(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        // (connection, child, direction, SPI) → figures over all workers.
        // A hash index, then one sort by SPI: tens of thousands of string
        // comparisons in a tree were half of a scrape's time.
        let mut index: HashMap<SaKey<'_>, usize> = HashMap::with_capacity(self.scrape.sas.len());
        let mut sums: Vec<(SaKey<'_>, SaSum)> = Vec::new();
        for sa in &self.scrape.sas {
            let direction = match sa.direction {
                Direction::Inbound => "in",
                Direction::Outbound => "out",
            };
            let key = (&*sa.connection, &*sa.child, direction, sa.spi);
            let i = *index.entry(key).or_insert_with(|| {
                sums.push((key, SaSum::default()));
                sums.len() - 1
            });
            let sum = &mut sums[i].1;
            sum.packets += sa.packets;
            sum.bytes += sa.bytes;
            sum.drops.add(&sa.drops);
        }
        sums.sort_unstable_by(|(a, _), (b, _)| (a.3, a.2, a.0, a.1).cmp(&(b.3, b.2, b.0, b.1)));
        let sums = sums;
        // Every SPI in hex, as `esparto sas` shows it, in one buffer.
        let mut hex = String::with_capacity(sums.len() * SPI_DIGITS);
        for (k, _) in &sums {
            write!(hex, "{:08x}", k.3)?;
        }
        let labels = |i: usize, k| sa_labels(k, hex.get(i * SPI_DIGITS..(i + 1) * SPI_DIGITS).unwrap_or_default());
        let count = |dir: &str| sums.iter().filter(|(k, _)| k.2 == dir).count() as u64;
        gauges(
            e,
            "esparto_sas",
            "ESP SAs installed (one direction of a Child SA each), however many workers use them.",
            None,
            [
                ([("direction", "in")], count("in")),
                ([("direction", "out")], count("out")),
            ],
        )?;
        counters(
            e,
            "esparto_child_sa_packets",
            "Packets through one direction of a Child SA (spi: that direction's SPI), all workers.",
            None,
            sums.iter().enumerate().map(|(i, (k, v))| (labels(i, k), v.packets)),
        )?;
        counters(
            e,
            "esparto_child_sa",
            "Inner bytes through one direction of a Child SA, all workers.",
            Some(&Unit::Bytes),
            sums.iter().enumerate().map(|(i, (k, v))| (labels(i, k), v.bytes)),
        )?;
        counters(
            e,
            "esparto_child_sa_drops",
            "Packets of one direction of a Child SA dropped, by reason (non-zero only).",
            None,
            sums.iter().enumerate().flat_map(|(i, (k, v))| {
                let [a, b, c, d] = labels(i, k);
                v.drops
                    .nonzero()
                    .map(move |(r, n)| ([a, b, c, d, ("reason", r.name())], n))
            }),
        )
    }

    fn ike(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let s = &self.scrape.status;
        let ev = &s.ike_events;
        gauges(
            e,
            "esparto_ike_sas",
            "IKE SAs held, by state (waiting, connecting, authenticating, established, failed).",
            None,
            ev.ike_sa_states
                .iter()
                .map(|(state, n)| ([("state", state.as_str())], *n)),
        )?;
        counter(
            e,
            "esparto_ike_sa_setups",
            "IKE SAs established (IKE_AUTH completed), either role.",
            None,
            ev.ike_sa_setups,
        )?;
        counter(
            e,
            "esparto_ike_sa_rekeys",
            "IKE SAs rekeyed (RFC 7296 §1.3.2).",
            None,
            ev.ike_sa_rekeys,
        )?;
        counter(
            e,
            "esparto_ike_sa_rekeys_initiated",
            "IKE SA rekeys this gateway initiated (the rest its peers did).",
            None,
            ev.ike_sa_rekeys_initiated,
        )?;
        counters(
            e,
            "esparto_ike_messages",
            "IKE messages received (once they parse) and sent (retransmissions included), by exchange, direction and kind.",
            None,
            ev.ike_messages.iter().filter_map(|(key, n)| Some((message_labels(key)?, *n))),
        )?;
        counters(
            e,
            "esparto_ike_sa_failures",
            "IKE SAs that ended before they were established, by reason (non-zero only).",
            None,
            reasons(&ev.ike_sa_failures),
        )?;
        counters(
            e,
            "esparto_ike_sa_deletes",
            "Established IKE SAs that ended, by reason (non-zero only).",
            None,
            reasons(&ev.ike_sa_deletes),
        )?;
        counters(
            e,
            "esparto_ike_auth_failures",
            "Failed IKE authentications, by what failed (non-zero only).",
            None,
            reasons(&ev.auth_failures),
        )?;
        counter(
            e,
            "esparto_child_sa_setups",
            "Child SAs negotiated, rekeys not included.",
            None,
            ev.child_sa_setups,
        )?;
        counter(
            e,
            "esparto_child_sa_rekeys",
            "Child SAs negotiated to replace another (RFC 7296 §2.8).",
            None,
            ev.child_sa_rekeys,
        )?;
        counters(
            e,
            "esparto_child_sa_failures",
            "Child SAs that could not be negotiated, by reason (non-zero only).",
            None,
            reasons(&ev.child_sa_failures),
        )?;
        counters(
            e,
            "esparto_ike_drops",
            "IKE messages the engine dropped, by reason (non-zero only).",
            None,
            IKE_DROPS
                .iter()
                .filter_map(|(key, reason)| s.ike.get(*key).filter(|n| **n > 0).map(|n| ([("reason", *reason)], *n))),
        )?;
        for (key, name, help) in IKE_COUNTERS {
            if let Some(n) = s.ike.get(*key) {
                counter(e, name, help, None, *n)?;
            }
        }
        if let Some(n) = s.ike.get("fragment_bytes_held") {
            gauge(
                e,
                "esparto_ike_fragment_bytes_held",
                "Plaintext octets of the peers' partial fragmented IKE messages held now.",
                None,
                *n,
            )?;
        }
        // Counters the engine may gain later: exported under their own name.
        let known = |k: &str| {
            IKE_DROPS.iter().any(|(d, _)| *d == k)
                || IKE_COUNTERS.iter().any(|(c, _, _)| *c == k)
                || IKE_NOT_COUNTERS.contains(&k)
        };
        for (key, n) in s.ike.iter().filter(|(k, _)| !known(k)) {
            let name = format!("esparto_ike_{key}");
            counter(e, &name, "An IKE engine counter.", None, *n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
