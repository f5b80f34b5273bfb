//! A paced UDP blaster and counter, for zero-loss trials at packet rates
//! iperf3 cannot offer.
//!
//! **Why not iperf3.** Its UDP sender makes one `sendto` per datagram and
//! its receiver one `recv`; at 64-byte packets both are CPU-bound near
//! 170 kpps here, and its end-of-test accounting counts packets still in
//! a gateway's queue as lost. This generator:
//!
//! - sends each burst of at most 64 datagrams as one UDP GSO message
//!   (`UDP_SEGMENT`, through `esparto_io::UdpSocket::send_batch`), paced
//!   against the clock: burst *k* leaves at `start + k·burst/rate`, so a
//!   late wake-up is made up by the next bursts instead of lowering the
//!   rate. The device under test must see individual packets of the stated
//!   size, as from a real host, so the hosts' veth ends have UDP
//!   segmentation offload switched off ([`super::topology`]): the kernel
//!   cuts the burst into datagrams *in the sending host*, before its veth —
//!   one skb per datagram on the "wire", each with its own IP ID and
//!   checksum, exactly what one `sendmmsg` entry per datagram would produce
//!   (tested: `tests/testbed_topology.rs` counts the packets arriving on
//!   gw-west). What changes is the generator's own CPU per packet: one
//!   socket send and one route lookup per burst instead of per datagram.
//!   On these 2 CPUs every cycle the test equipment spends is taken from
//!   the gateways, so a cheaper generator measures the gateways better;
//! - receives with `recvmmsg` (GRO on, so the counter stays cheap should
//!   the path coalesce) on a thread of its own;
//! - tags every datagram with a 16-byte header — magic, trial number,
//!   sequence number — and counts only the current trial's datagrams, so
//!   stragglers of a lost trial (strongSwan's queues are unbounded and drain
//!   for a while) are never credited to the next one;
//! - ends a trial only when the receiver has been quiet for a while (the
//!   tail has drained), up to a limit.
//!
//! The sender and counter run on threads of the calling process; their
//! sockets were created inside host-west and host-east through
//! `Netns::run`, and a socket keeps the namespace it was made in. On this
//! 2-core machine they compete for CPU with the gateways, like iperf3
//! would: a figure is the system's, generator included.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_netns::Netns;
use esparto_io::{RxBatch, TxBatch, UdpConfig, UdpSocket};

use super::zeroloss::Trial;
use super::{Family, udp_payload_len};

/// Datagram header: magic, trial number, sequence number.
pub const HEADER_LEN: usize = 16;
const MAGIC: [u8; 4] = *b"ESPT";
/// Largest burst handed to one `sendmmsg`.
pub const MAX_BURST: usize = 64;
/// Target time between bursts: bursts are sized so that they leave about
/// this often (and never exceed [`MAX_BURST`]).
const BURST_INTERVAL: Duration = Duration::from_micros(500);

/// Counters shared between the receiving thread and the driver.
#[derive(Debug, Default)]
struct Counters {
    stop: AtomicBool,
    trial: AtomicU32,
    received: AtomicU64,
    bytes: AtomicU64,
    stray: AtomicU64,
    /// Datagrams of the current trial that arrived after a later one of
    /// the same flow (source address and port: each flow numbers its own).
    reordered: AtomicU64,
    /// Nanoseconds since `epoch` of the last datagram seen (any trial).
    last_ns: AtomicU64,
}

/// The receiving end, counting datagrams on its own thread.
#[derive(Debug)]
pub struct Sink {
    addr: SocketAddr,
    counters: Arc<Counters>,
    epoch: Instant,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Sink {
    /// Bind `bind` inside `ns` and start counting.
    pub fn start(ns: &Netns, bind: SocketAddr) -> Result<Self> {
        let cfg = UdpConfig {
            recv_buffer: 16 << 20,
            gro: true,
            gso: false,
            ..UdpConfig::default()
        };
        let mut sock = ns.run(|| UdpSocket::bind(bind, &cfg, false))??;
        let addr = sock.local_addr();
        let counters = Arc::new(Counters::default());
        let epoch = Instant::now();
        let c = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("udpgen-sink".into())
            .spawn(move || {
                let mut batch = RxBatch::new(32, 0, esparto_io::udp::GRO_SLOT_LEN, 32 * 64);
                // Each flow's highest sequence number so far, in this trial.
                let mut highest: std::collections::HashMap<Option<SocketAddr>, u64> = std::collections::HashMap::new();
                let mut trial_seen = u32::MAX;
                while !c.stop.load(Ordering::Relaxed) {
                    let n = sock.recv_batch(&mut batch)?;
                    if n == 0 {
                        // recvmmsg is non-blocking here; a short nap bounds the
                        // idle cost, and 16 MiB of socket buffer covers it.
                        std::thread::sleep(Duration::from_micros(300));
                        continue;
                    }
                    let current = c.trial.load(Ordering::Relaxed);
                    if current != trial_seen {
                        highest.clear();
                        trial_seen = current;
                    }
                    let (mut ours, mut bytes, mut stray, mut reordered) = (0u64, 0u64, 0u64, 0u64);
                    for (pkt, from) in batch.iter() {
                        match parse_header(pkt) {
                            Some((t, seq)) if t == current => {
                                ours += 1;
                                bytes += pkt.len() as u64;
                                let h = highest.entry(from).or_insert(seq);
                                if seq < *h {
                                    reordered += 1;
                                } else {
                                    *h = seq;
                                }
                            }
                            _ => stray += 1,
                        }
                    }
                    c.reordered.fetch_add(reordered, Ordering::Relaxed);
                    c.received.fetch_add(ours, Ordering::Relaxed);
                    c.bytes.fetch_add(bytes, Ordering::Relaxed);
                    c.stray.fetch_add(stray, Ordering::Relaxed);
                    c.last_ns
                        .store(epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                Ok(())
            })?;
        Ok(Self {
            addr,
            counters,
            epoch,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Start counting trial `t` from zero.
    fn begin(&self, t: u32) {
        self.counters.trial.store(t, Ordering::Relaxed);
        self.counters.received.store(0, Ordering::Relaxed);
        self.counters.bytes.store(0, Ordering::Relaxed);
        self.counters.reordered.store(0, Ordering::Relaxed);
    }

    /// Datagrams of the current trial that arrived after a later one of
    /// their flow.
    pub fn reordered(&self) -> u64 {
        self.counters.reordered.load(Ordering::Relaxed)
    }

    /// Datagrams of the current trial received so far.
    pub fn received(&self) -> u64 {
        self.counters.received.load(Ordering::Relaxed)
    }

    /// Payload bytes of the current trial received so far.
    pub fn bytes(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }

    /// Datagrams that belonged to another trial or were not ours.
    pub fn stray(&self) -> u64 {
        self.counters.stray.load(Ordering::Relaxed)
    }

    /// Wait until nothing has arrived for `quiet`, at most `limit`.
    /// Returns whether it went quiet.
    pub fn wait_quiet(&self, quiet: Duration, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let last = Duration::from_nanos(self.counters.last_ns.load(Ordering::Relaxed));
            let since = self.epoch.elapsed().saturating_sub(last);
            if since >= quiet {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep((quiet - since).min(Duration::from_millis(50)));
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.counters.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_header(buf: &mut [u8], trial: u32, seq: u64) {
    buf[..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&trial.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

/// `(trial, seq)` of one of our datagrams, `None` for anything else.
fn parse_header(pkt: &[u8]) -> Option<(u32, u64)> {
    let h = pkt.get(..HEADER_LEN)?;
    if h[..4] != MAGIC {
        return None;
    }
    let trial = u32::from_be_bytes(h[4..8].try_into().ok()?);
    let seq = u64::from_be_bytes(h[8..16].try_into().ok()?);
    Some((trial, seq))
}

/// Datagrams per burst at `rate_pps`: one burst per [`BURST_INTERVAL`], 1 to [`MAX_BURST`].
fn burst_len(rate_pps: f64) -> usize {
    ((rate_pps * BURST_INTERVAL.as_secs_f64()).ceil() as usize).clamp(1, MAX_BURST)
}

/// What the sender did in one trial.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sent {
    /// Datagrams handed to the kernel.
    pub packets: u64,
    /// Seconds from the first to the last send.
    pub seconds: f64,
}

/// The sending end.
#[derive(Debug)]
pub struct Source {
    sock: UdpSocket,
}

impl Source {
    /// Bind an ephemeral port on `bind` inside `ns`.
    pub fn new(ns: &Netns, bind: IpAddr) -> Result<Self> {
        let cfg = UdpConfig {
            send_buffer: 4 << 20,
            gro: false,
            gso: true,
            // Our payloads start with the magic, not a steering key.
            steering: None,
            ..UdpConfig::default()
        };
        let sock = ns.run(|| UdpSocket::bind(SocketAddr::new(bind, 0), &cfg, false))??;
        Ok(Self { sock })
    }

    /// Send `rate_pps` datagrams/s of `payload` bytes to `dst` for
    /// `duration`, tagged with trial `trial`. Stops early, short of the
    /// count, if it falls more than half the duration behind (the
    /// generator cannot keep up: the caller sees it in the offered rate).
    pub fn send(
        &mut self,
        dst: SocketAddr,
        payload: usize,
        rate_pps: f64,
        duration: Duration,
        trial: u32,
    ) -> Result<Sent> {
        if payload < HEADER_LEN {
            bail!("udpgen needs a payload of at least {HEADER_LEN} bytes, got {payload}");
        }
        if !(rate_pps > 0.0 && rate_pps.is_finite()) {
            bail!("udpgen: bad rate {rate_pps}");
        }
        let total = (rate_pps * duration.as_secs_f64()).round().max(1.0) as u64;
        let burst = burst_len(rate_pps);
        let give_up = duration.mul_f64(1.5);
        let mut batch = TxBatch::new(burst, 0, payload);
        let start = Instant::now();
        let mut sent = 0u64;
        while sent < total {
            let due = start + Duration::from_secs_f64(sent as f64 / rate_pps);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else if now - start > give_up {
                break;
            }
            let n = burst.min((total - sent) as usize);
            batch.clear();
            for i in 0..n {
                let seq = sent + i as u64;
                let _ = batch.push_with(Some(dst), |buf| {
                    write_header(buf, trial, seq);
                    buf[HEADER_LEN..payload].fill(0x5a);
                    payload
                });
            }
            let mut from = 0;
            while from < batch.len() {
                from = self.sock.send_batch_from(&batch, from)?;
                if from < batch.len() {
                    // Socket buffer full: our own stack is behind, not the
                    // device; wait rather than count it as offered-and-lost.
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            sent += n as u64;
        }
        Ok(Sent {
            packets: sent,
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}

/// Sources in one namespace and a sink in another, run trial by trial.
///
/// With several *flows*, each flow is a source socket of its own (its own
/// UDP source port, so its own 5-tuple: the gateway's TUN steering spreads the
/// flows over TUN queues and CPUs, which is what lets per-CPU SAs work) sent
/// from its own thread at `rate / flows`.
#[derive(Debug)]
pub struct UdpGen {
    sources: Vec<Source>,
    sink: Sink,
    family: Family,
    trial: u32,
    /// How long the sink must be quiet to end a trial.
    pub quiet: Duration,
    /// The longest wait for quiet after sending.
    pub drain_limit: Duration,
}

/// The UDP port the sink listens on.
pub const SINK_PORT: u16 = 9_000;

impl UdpGen {
    /// One flow from `src` in `src_ns` to a sink at `dst` in `dst_ns`.
    pub fn new(src_ns: &Netns, src: IpAddr, dst_ns: &Netns, dst: IpAddr) -> Result<Self> {
        Self::with_flows(src_ns, src, dst_ns, dst, 1)
    }

    /// `flows` flows (1 to 64) from `src` to a sink at `dst`.
    pub fn with_flows(
        src_ns: &Netns,
        src: IpAddr,
        dst_ns: &Netns,
        dst: IpAddr,
        flows: usize,
    ) -> Result<Self> {
        Self::to_port(src_ns, src, dst_ns, SocketAddr::new(dst, SINK_PORT), flows)
    }

    /// `flows` flows (1 to 64) from `src` to a sink at `dst` (its port
    /// chosen: several generators at once, or a tunnel per port).
    pub fn to_port(
        src_ns: &Netns,
        src: IpAddr,
        dst_ns: &Netns,
        dst: SocketAddr,
        flows: usize,
    ) -> Result<Self> {
        if src.is_ipv4() != dst.is_ipv4() {
            bail!("udpgen: {src} and {dst} are of different families");
        }
        if !(1..=64).contains(&flows) {
            bail!("udpgen: {flows} flows (1 to 64)");
        }
        Ok(Self {
            sources: (0..flows)
                .map(|_| Source::new(src_ns, src))
                .collect::<Result<_>>()?,
            sink: Sink::start(dst_ns, dst).context("starting the UDP sink")?,
            family: Family::of(dst.ip()),
            trial: 0,
            quiet: Duration::from_millis(200),
            drain_limit: Duration::from_secs(5),
        })
    }

    /// The number of flows.
    pub fn flows(&self) -> usize {
        self.sources.len()
    }

    /// What the senders' sockets did so far: (`sendmsg` entries, datagrams).
    /// Fewer entries than datagrams: bursts went out as GSO messages.
    pub fn sender_messages(&self) -> (u64, u64) {
        self.sources.iter().fold((0, 0), |(m, d), s| {
            let st = s.sock.stats();
            (m + st.tx_msgs, d + st.tx_datagrams)
        })
    }

    /// The sink (for its counters).
    pub fn sink(&self) -> &Sink {
        &self.sink
    }

    /// One trial: `ip_size`-byte IP packets at `rate_pps` (all flows
    /// together) for `duration`; the result counts what arrived once the
    /// path has drained. Also returns the UDP payload bytes received.
    pub fn trial(
        &mut self,
        ip_size: usize,
        rate_pps: f64,
        duration: Duration,
    ) -> Result<(Trial, u64)> {
        let payload = udp_payload_len(ip_size, self.family)?;
        // Whatever an earlier trial left in flight arrives first.
        self.sink.wait_quiet(self.quiet, self.drain_limit);
        self.trial = self.trial.wrapping_add(1);
        self.sink.begin(self.trial);
        let (dst, trial) = (self.sink.addr(), self.trial);
        let per_flow = rate_pps / self.sources.len() as f64;
        let results: Vec<Result<Sent>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .sources
                .iter_mut()
                .map(|src| s.spawn(move || src.send(dst, payload, per_flow, duration, trial)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("sender thread panicked")))
                })
                .collect()
        });
        let (mut packets, mut seconds) = (0u64, 0f64);
        for r in results {
            let sent = r?;
            packets += sent.packets;
            seconds = seconds.max(sent.seconds);
        }
        self.sink.wait_quiet(self.quiet, self.drain_limit);
        let received = self.sink.received();
        let trial = Trial {
            requested_pps: rate_pps,
            offered_pps: packets as f64 / seconds.max(1e-9),
            sent: packets,
            received,
        };
        Ok((trial, self.sink.bytes()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn header_round_trip_and_rejects() {
        let mut b = [0u8; 36];
        write_header(&mut b, 7, 0x0102_0304_0506_0708);
        assert_eq!(parse_header(&b), Some((7, 0x0102_0304_0506_0708)));
        assert_eq!(parse_header(&b[..15]), None);
        b[0] = b'X';
        assert_eq!(parse_header(&b), None);
    }

    #[test]
    fn bursts_are_bounded() {
        assert_eq!(burst_len(100.0), 1);
        assert_eq!(burst_len(10_000.0), 5);
        assert_eq!(burst_len(1e7), MAX_BURST);
    }

    #[test]
    fn paced_over_loopback_in_a_namespace() {
        if !esparto_netns::available() {
            eprintln!("SKIP udpgen::paced_over_loopback_in_a_namespace: needs root and iproute2");
            return;
        }
        let ns = Netns::new("udpgen").unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let mut g = UdpGen::new(&ns, lo, &ns, lo).unwrap();
        let (t, bytes) = g.trial(64, 20_000.0, Duration::from_millis(500)).unwrap();
        assert_eq!(t.sent, 10_000);
        assert_eq!(t.received, t.sent, "loopback lost packets: {t:?}");
        assert_eq!(bytes, 10_000 * 36);
        // Paced, not flooded: 10 000 packets at 20 kpps take about half a second.
        assert!(
            t.offered_pps < 22_000.0 && t.offered_pps > 15_000.0,
            "{t:?}"
        );
        // A second trial starts its count from zero.
        let (t2, _) = g.trial(1400, 2_000.0, Duration::from_millis(200)).unwrap();
        assert_eq!((t2.sent, t2.received), (400, 400));
        assert_eq!(g.sink().stray(), 0);
        // Three flows share the rate: 3 × 1000 packets (same sink port, so
        // the first generator goes first).
        drop(g);
        // The old sink's port is free once its socket is closed everywhere:
        // a process another test spawns holds a copy until its exec.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut g3 = loop {
            match UdpGen::with_flows(&ns, lo, &ns, lo, 3) {
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                r => break r.unwrap(),
            }
        };
        assert_eq!(g3.flows(), 3);
        let (t3, _) = g3.trial(256, 6_000.0, Duration::from_millis(500)).unwrap();
        assert_eq!((t3.sent, t3.received), (3_000, 3_000));
        assert!(UdpGen::with_flows(&ns, lo, &ns, lo, 0).is_err());
    }
}
