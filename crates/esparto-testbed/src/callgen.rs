//! Concurrent voice calls between the two hosts: N calls, each a pair of
//! RTP-like UDP flows (host-west → host-east and back) at a codec's packet
//! size and rate, with every packet's one-way delay, each flow's RFC 3550
//! interarrival jitter and each call's loss measured at the receiver.
//!
//! **Packets.** Each datagram is an RTP packet (RFC 3550 §5.1: version 2,
//! a 16-bit sequence number, a timestamp in the codec's 8 kHz clock, the
//! call's number as SSRC) whose voice payload starts with a magic, the
//! trial number and the send time: CLOCK_MONOTONIC in nanoseconds, a clock
//! all network namespaces of one machine share, so the receiver's
//! CLOCK_MONOTONIC at arrival minus it is the one-way delay. Datagrams of
//! an earlier trial (strongSwan's queues drain for a while after an
//! overload) are counted apart and never credited.
//!
//! **Flows.** A call's two flows are distinct UDP 5-tuples per direction
//! drawn from [`Options::sources_per_thread`] source sockets per sending
//! thread and the receiving host's addresses (the bench gives each host
//! 64): with the defaults 2 × 4 × 64 = 512 tuples each way, spread over
//! the calls round robin, so that no two consecutive packets of the
//! aggregate share a 5-tuple (as with a tuple per call: a gateway hashing
//! flows to workers sees many, and a GRO engine coalesces none). Each host
//! receives on one socket bound to the wildcard address, read with
//! `recvmmsg` in batches, and each sending socket reaches every address
//! in one `sendmmsg`: the tuples cost the generator nothing per packet. A
//! real call has its own tuple; this many changes nothing a gateway does
//! per packet.
//!
//! **Pacing.** A few sending threads ([`Options::threads`]), not one per
//! call: each carries a share of the calls as one stream whose packet *j*
//! belongs to call *j* mod M and leaves at `start + j·ptime/M` — every
//! call's packets exactly `ptime` apart, the calls' phases spread evenly
//! over the period. What is due is sent with `sendmmsg` in batches per
//! socket; a late wake-up is made up by the next batch. A thread that
//! falls more than [`BEHIND_LIMIT`] of the trial behind stops: the
//! generator, not the gateway, is then the limit, and
//! [`CallTrial::generator_limited`] says so.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_io::poll::Poller;
use esparto_io::{RxBatch, TxBatch, UdpConfig, UdpSocket};
use esparto_netns::Netns;
use serde::{Deserialize, Serialize};

/// RTP fixed header (RFC 3550 §5.1).
pub const RTP_HEADER: usize = 12;
/// Our fields after it: magic (4), trial (4), send time in ns (8).
pub const TAG_LEN: usize = 16;
/// The smallest UDP payload that carries the header and the tag.
pub const MIN_PAYLOAD: usize = RTP_HEADER + TAG_LEN;
const MAGIC: [u8; 4] = *b"ESPV";
/// RTP payload type: dynamic (RFC 3551 §3); the codec is the benchmark's.
const PAYLOAD_TYPE: u8 = 96;
/// RTP clock of the narrowband codecs' timestamps, Hz.
const RTP_CLOCK_HZ: u64 = 8_000;

/// The port every host receives calls on.
pub const SINK_PORT: u16 = 16_384;
/// Source sockets per sending thread and direction, by default.
pub const SOURCES_PER_THREAD: usize = 4;
/// Datagrams per `sendmmsg`.
const TX_BATCH: usize = 64;
/// Datagrams per `recvmmsg`.
const RX_BATCH: usize = 64;
/// A sending thread sleeps at least this long between batches (the
/// aggregate's bursts are at most this long).
const MIN_NAP: Duration = Duration::from_micros(250);
/// A thread this far behind its schedule (a fraction of the trial) stops.
pub const BEHIND_LIMIT: f64 = 0.5;
/// A trial whose send rate is below this fraction of the target was
/// limited by the generator.
pub const GENERATOR_SHORTFALL: f64 = 0.95;
/// One-way delays are histogrammed in buckets of this many ns…
const DELAY_BUCKET_NS: u64 = 10_000;
/// …up to this many ns; later packets are counted in the last bucket.
const DELAY_MAX_NS: u64 = 4_000_000_000;

/// One codec's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// UDP payload per packet (RTP header and voice).
    pub payload: usize,
    /// Milliseconds between a call's packets.
    pub ptime_ms: u32,
}

impl Stream {
    /// Packets per second of one flow.
    pub fn pps(&self) -> f64 {
        1000.0 / f64::from(self.ptime_ms)
    }
}

/// How the generator runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Options {
    /// Sending threads (both directions each).
    pub threads: usize,
    /// Source sockets per thread and direction.
    #[serde(default = "default_sources")]
    pub sources_per_thread: usize,
    /// How long the receivers must be quiet to end a trial.
    #[serde(with = "crate::zeroloss::secs")]
    pub quiet: Duration,
    /// The longest wait for that after sending.
    #[serde(with = "crate::zeroloss::secs")]
    pub drain_limit: Duration,
}

fn default_sources() -> usize {
    SOURCES_PER_THREAD
}

impl Default for Options {
    fn default() -> Self {
        Self {
            threads: 2,
            sources_per_thread: SOURCES_PER_THREAD,
            quiet: Duration::from_millis(300),
            drain_limit: Duration::from_secs(20),
        }
    }
}

impl Options {
    /// Distinct UDP 5-tuples each way towards a host with `addresses` addresses.
    pub fn tuples(&self, addresses: usize) -> usize {
        self.threads * self.sources_per_thread * addresses
    }

    /// Refuses what the generator cannot do.
    pub fn validate(&self) -> Result<()> {
        if !(1..=16).contains(&self.threads) {
            bail!("call generator: {} threads (1 to 16)", self.threads);
        }
        if !(1..=64).contains(&self.sources_per_thread) {
            bail!("call generator: {} source sockets per thread (1 to 64)", self.sources_per_thread);
        }
        Ok(())
    }
}

/// One direction of one call, as received.
#[derive(Debug, Clone, Copy, Default)]
struct FlowStat {
    received: u32,
    /// Highest sequence number seen + 1 (0: none yet).
    next_seq: u32,
    /// Packets that arrived with a sequence number below one already seen.
    reordered: u32,
    /// RFC 3550 A.8: the previous packet's transit time, ns.
    last_transit: i64,
    /// RFC 3550 A.8 interarrival jitter, ns.
    jitter: f64,
}

impl FlowStat {
    fn arrive(&mut self, seq: u32, transit: i64) {
        if self.received > 0 {
            let d = (transit - self.last_transit).unsigned_abs() as f64;
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.last_transit = transit;
        self.received += 1;
        if seq < self.next_seq {
            self.reordered += 1;
        } else {
            self.next_seq = seq + 1;
        }
    }
}

/// What the receivers gather in one trial.
#[derive(Debug)]
struct Gathered {
    trial: u32,
    /// Per call, [west→east, east→west].
    flows: Vec<[FlowStat; 2]>,
    /// One-way delays, both directions.
    delays: Vec<u64>,
    stray: u64,
    last_arrival: Instant,
}

impl Gathered {
    fn new() -> Self {
        Self {
            trial: 0,
            flows: Vec::new(),
            delays: vec![0; (DELAY_MAX_NS / DELAY_BUCKET_NS) as usize + 1],
            stray: 0,
            last_arrival: Instant::now(),
        }
    }

    fn begin(&mut self, trial: u32, calls: usize) {
        self.trial = trial;
        self.flows.clear();
        self.flows.resize(calls, [FlowStat::default(); 2]);
        self.delays.iter_mut().for_each(|b| *b = 0);
    }

    fn packet(&mut self, dir: usize, pkt: &[u8], now_ns: u64) {
        let Some((call, seq, trial, sent_ns)) = parse(pkt) else {
            self.stray += 1;
            return;
        };
        if trial != self.trial {
            self.stray += 1;
            return;
        }
        let Some(flow) = self.flows.get_mut(call as usize) else {
            self.stray += 1;
            return;
        };
        let delay = now_ns.saturating_sub(sent_ns);
        flow[dir].arrive(seq, now_ns as i64 - sent_ns as i64);
        let b = (delay.min(DELAY_MAX_NS) / DELAY_BUCKET_NS) as usize;
        if let Some(slot) = self.delays.get_mut(b) {
            *slot += 1;
        }
    }
}

/// CLOCK_MONOTONIC in ns: the same clock in every namespace of a machine.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec as u64)
}

/// Writes the RTP header and the tag into `buf` (at least [`MIN_PAYLOAD`]).
fn write_packet(buf: &mut [u8], call: u32, seq: u32, ptime_ms: u32, trial: u32, sent_ns: u64) {
    buf[0] = 0x80; // version 2, no padding, extension or CSRCs
    buf[1] = PAYLOAD_TYPE;
    buf[2..4].copy_from_slice(&(seq as u16).to_be_bytes());
    let ts = u64::from(seq) * u64::from(ptime_ms) * RTP_CLOCK_HZ / 1000;
    buf[4..8].copy_from_slice(&(ts as u32).to_be_bytes());
    buf[8..12].copy_from_slice(&call.to_be_bytes());
    buf[12..16].copy_from_slice(&MAGIC);
    buf[16..20].copy_from_slice(&trial.to_be_bytes());
    buf[20..28].copy_from_slice(&sent_ns.to_be_bytes());
}

/// `(call, seq, trial, sent_ns)` of one of our packets, `None` otherwise.
/// The 16-bit RTP sequence number is enough: a trial is far shorter than
/// 65,536 packets of one flow.
fn parse(pkt: &[u8]) -> Option<(u32, u32, u32, u64)> {
    let h = pkt.get(..MIN_PAYLOAD)?;
    if h[0] != 0x80 || h[12..16] != MAGIC {
        return None;
    }
    let seq = u32::from(u16::from_be_bytes([h[2], h[3]]));
    let call = u32::from_be_bytes(h[8..12].try_into().ok()?);
    let trial = u32::from_be_bytes(h[16..20].try_into().ok()?);
    let sent = u64::from_be_bytes(h[20..28].try_into().ok()?);
    Some((call, seq, trial, sent))
}

/// The receivers: a socket on each host, read by one thread.
#[derive(Debug)]
struct Sinks {
    state: Arc<Mutex<Gathered>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Sinks {
    /// `hosts[d]`: the receiving namespace and address of direction `d`
    /// (0: west → east, received at east).
    fn start(hosts: [(&Netns, IpAddr); 2]) -> Result<Self> {
        let cfg = UdpConfig { recv_buffer: 4 << 20, gro: false, gso: false, ..UdpConfig::default() };
        let mut socks: Vec<(usize, UdpSocket)> = Vec::new();
        for (dir, (ns, addr)) in hosts.into_iter().enumerate() {
            let any = if addr.is_ipv4() {
                IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED)
            } else {
                IpAddr::from(std::net::Ipv6Addr::UNSPECIFIED)
            };
            let bind = SocketAddr::new(any, SINK_PORT);
            let s = ns
                .run(|| UdpSocket::bind(bind, &cfg, false))?
                .with_context(|| format!("binding the call receiver {bind}"))?;
            socks.push((dir, s));
        }
        let state = Arc::new(Mutex::new(Gathered::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (Arc::clone(&state), Arc::clone(&stop));
        let thread = std::thread::Builder::new().name("callgen-sink".into()).spawn(move || {
            use std::os::fd::AsRawFd as _;
            let mut poller = Poller::new();
            for (_, s) in &socks {
                poller.add(s.as_raw_fd());
            }
            let mut batch = RxBatch::new(RX_BATCH, 0, 2048, RX_BATCH);
            while !sp.load(Ordering::Relaxed) {
                poller.wait(Duration::from_millis(20))?;
                let mut got = 0usize;
                for (i, (dir, s)) in socks.iter_mut().enumerate() {
                    if !poller.readable(i) {
                        continue;
                    }
                    loop {
                        let n = s.recv_batch(&mut batch)?;
                        if n == 0 {
                            break;
                        }
                        got += n;
                        let now = monotonic_ns();
                        let mut g = st.lock().map_err(|_| anyhow::anyhow!("call receiver state poisoned"))?;
                        for (pkt, _) in batch.iter() {
                            g.packet(*dir, pkt, now);
                        }
                        g.last_arrival = Instant::now();
                        if n < RX_BATCH {
                            break;
                        }
                    }
                }
                if got < RX_BATCH {
                    // Let packets gather: fewer, fuller reads. Adds at most
                    // this much to a delay, against milliseconds measured.
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            Ok(())
        })?;
        Ok(Self { state, stop, thread: Some(thread) })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Gathered>> {
        self.state.lock().map_err(|_| anyhow::anyhow!("call receiver state poisoned"))
    }

    /// Wait until nothing has arrived for `quiet`, at most `limit`.
    fn wait_quiet(&self, quiet: Duration, limit: Duration) -> Result<bool> {
        let deadline = Instant::now() + limit;
        loop {
            let since = self.lock()?.last_arrival.elapsed();
            if since >= quiet {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep((quiet - since).min(Duration::from_millis(50)));
        }
    }
}

impl Drop for Sinks {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One sending thread's sockets: [`SOURCES_PER_THREAD`] per direction.
#[derive(Debug)]
struct Sender {
    socks: [Vec<UdpSocket>; 2],
}

/// What one sending thread did.
#[derive(Debug, Clone, Copy)]
struct SentBy {
    /// Stream packets sent (each is one packet each way).
    packets: u64,
    seconds: f64,
    behind: bool,
}

impl Sender {
    fn new(hosts: [(&Netns, IpAddr); 2], sources: usize) -> Result<Self> {
        let cfg = UdpConfig { send_buffer: 4 << 20, gro: false, gso: false, steering: None, ..UdpConfig::default() };
        let mk = |(ns, addr): (&Netns, IpAddr)| -> Result<Vec<UdpSocket>> {
            (0..sources)
                .map(|_| Ok(ns.run(|| UdpSocket::bind(SocketAddr::new(addr, 0), &cfg, false))??))
                .collect()
        };
        Ok(Self { socks: [mk(hosts[0])?, mk(hosts[1])?] })
    }

    /// Sends calls `first .. first + count` of `stream` for `duration`:
    /// direction `d` to the far host's addresses `dst[d]`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        dst: [&[IpAddr]; 2],
        stream: Stream,
        first: u32,
        count: u32,
        duration: Duration,
        trial: u32,
    ) -> Result<SentBy> {
        let m = u64::from(count);
        let rate = m as f64 * stream.pps();
        let total = ((duration.as_secs_f64() * rate).round() as u64).max(m);
        let sources = self.socks[0].len();
        let mut batches: Vec<Vec<TxBatch>> = (0..2)
            .map(|_| (0..sources).map(|_| TxBatch::new(TX_BATCH, 0, stream.payload)).collect())
            .collect();
        let give_up = duration.mul_f64(1.0 + BEHIND_LIMIT);
        let start = Instant::now();
        let mut sent = 0u64;
        let mut behind = false;
        while sent < total {
            let now = Instant::now();
            let elapsed = now - start;
            let due = (((elapsed.as_secs_f64() * rate) as u64) + 1).min(total);
            if due <= sent {
                let next = start + Duration::from_secs_f64(sent as f64 / rate);
                std::thread::sleep(next.saturating_duration_since(now).max(MIN_NAP));
                continue;
            }
            if elapsed > give_up {
                behind = true;
                break;
            }
            let stamp = monotonic_ns();
            for j in sent..due {
                let call = (j % m) as u32;
                let seq = (j / m) as u32;
                let global = first + call;
                let sock = call as usize % sources;
                let at = call as usize / sources;
                for d in 0..2 {
                    let b = &mut batches[d][sock];
                    let to = SocketAddr::new(dst[d][at % dst[d].len()], SINK_PORT);
                    let _ = b.push_with(Some(to), |buf| {
                        write_packet(buf, global, seq, stream.ptime_ms, trial, stamp);
                        stream.payload
                    });
                    if b.is_full() {
                        flush(&mut self.socks[d][sock], b)?;
                    }
                }
            }
            for (socks, bs) in self.socks.iter_mut().zip(batches.iter_mut()) {
                for (s, b) in socks.iter_mut().zip(bs.iter_mut()) {
                    if !b.is_empty() {
                        flush(s, b)?;
                    }
                }
            }
            sent = due;
        }
        Ok(SentBy { packets: sent, seconds: start.elapsed().as_secs_f64(), behind })
    }
}

/// Sends all of `b` on `s` (waiting while the socket buffer is full), then empties it.
fn flush(s: &mut UdpSocket, b: &mut TxBatch) -> Result<()> {
    let mut from = 0;
    let deadline = Instant::now() + Duration::from_secs(2);
    while from < b.len() {
        from = s.send_batch_from(b, from)?;
        if from < b.len() {
            if Instant::now() > deadline {
                bail!("call generator: the socket buffer stayed full for 2 s");
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    b.clear();
    Ok(())
}

/// Percentiles of one trial's one-way delay, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Delay {
    /// Median.
    pub median_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// One call's figures (the worse direction of each).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CallFigures {
    /// Packets lost, percent of those sent, the worse direction.
    pub loss_percent: f64,
    /// RFC 3550 interarrival jitter at the end of the trial, ms, the worse direction.
    pub jitter_ms: f64,
}

/// What one trial of N calls did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTrial {
    /// Concurrent calls.
    pub calls: u32,
    /// Packets per second asked for, both directions together.
    pub target_pps: f64,
    /// Packets per second the generator sent, both directions together.
    pub offered_pps: f64,
    /// Packets sent, both directions.
    pub sent: u64,
    /// Packets of this trial received, both directions.
    pub received: u64,
    /// Packets of other trials or unknown received meanwhile.
    pub stray: u64,
    /// Packets that arrived after a later one of the same flow.
    pub reordered: u64,
    /// Packets the receiving hosts' sockets dropped, their buffers full
    /// (UDP `RcvbufErrors`): lost by the generator's receiver, not the path.
    #[serde(default)]
    pub receiver_drops: u64,
    /// Sending fell behind, or the receivers dropped packets: the
    /// generator, not the path, limited this trial.
    pub generator_limited: bool,
    /// One-way delay over all received packets.
    pub delay: Option<Delay>,
    /// RFC 3550 jitter, mean over flows, ms.
    pub jitter_mean_ms: f64,
    /// RFC 3550 jitter, largest flow's, ms.
    pub jitter_max_ms: f64,
    /// Calls that lost at least one packet.
    pub calls_with_loss: u32,
    /// Per call (by call number).
    #[serde(skip)]
    pub per_call: Vec<CallFigures>,
}

impl CallTrial {
    /// Packets lost, both directions.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Fraction of packets lost.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 { 1.0 } else { self.lost() as f64 / self.sent as f64 }
    }
}

/// One end of the calls.
#[derive(Debug, Clone)]
pub struct Host<'a> {
    /// Its namespace.
    pub ns: &'a Netns,
    /// The address it sends from.
    pub addr: IpAddr,
    /// The addresses it receives on (all on [`SINK_PORT`]).
    pub receive: Vec<IpAddr>,
}

/// The call generator between two hosts.
#[derive(Debug)]
pub struct CallGen<'a> {
    /// The receiving namespaces: east (direction 0), west.
    receivers: [&'a Netns; 2],
    senders: Vec<Sender>,
    sinks: Sinks,
    /// Receiving addresses: of east (direction 0), of west.
    addrs: [Vec<IpAddr>; 2],
    trial: u32,
    opts: Options,
}

impl<'a> CallGen<'a> {
    /// Calls between `west` (its namespace and address) and `east`.
    /// Calls between `west` (its namespace, the address it sends from and
    /// the addresses it receives on) and `east`.
    pub fn new(west: Host<'a>, east: Host<'a>, opts: Options) -> Result<Self> {
        opts.validate()?;
        for h in [&west, &east] {
            if h.receive.is_empty() || h.receive.iter().any(|a| a.is_ipv4() != west.addr.is_ipv4()) {
                bail!("call generator: {}: no receiving address, or addresses of mixed families", h.addr);
            }
        }
        if west.addr.is_ipv4() != east.addr.is_ipv4() {
            bail!("call generator: {} and {} are of different families", west.addr, east.addr);
        }
        // Direction 0 is west → east: sent from west, received at east.
        let senders = (0..opts.threads)
            .map(|_| Sender::new([(west.ns, west.addr), (east.ns, east.addr)], opts.sources_per_thread))
            .collect::<Result<_>>()?;
        let sinks = Sinks::start([(east.ns, east.addr), (west.ns, west.addr)])?;
        Ok(Self { receivers: [east.ns, west.ns], senders, sinks, addrs: [east.receive, west.receive], trial: 0, opts })
    }

    /// Distinct UDP 5-tuples each way (the fewer of the two directions').
    pub fn tuples(&self) -> usize {
        self.opts.tuples(self.addrs[0].len().min(self.addrs[1].len()))
    }

    /// UDP receive-buffer drops in both receiving namespaces so far.
    fn rcvbuf_errors(&self) -> Result<u64> {
        let mut n = 0;
        for ns in self.receivers {
            n += crate::topology::udp_rcvbuf_errors(ns)?;
        }
        Ok(n)
    }

    /// One trial: `calls` concurrent calls of `stream` for `duration`.
    pub fn trial(&mut self, calls: u32, stream: Stream, duration: Duration) -> Result<CallTrial> {
        if stream.payload < MIN_PAYLOAD {
            bail!("call generator: a payload of {} bytes is below {MIN_PAYLOAD}", stream.payload);
        }
        if calls == 0 || stream.ptime_ms == 0 {
            bail!("call generator: no calls or no packet time");
        }
        self.sinks.wait_quiet(self.opts.quiet, self.opts.drain_limit)?;
        self.trial = self.trial.wrapping_add(1);
        let trial = self.trial;
        let rcvbuf_before = self.rcvbuf_errors()?;
        let stray_before = {
            let mut g = self.sinks.lock()?;
            g.begin(trial, calls as usize);
            g.stray
        };
        let threads = (self.senders.len() as u32).min(calls);
        let share = |t: u32| (u64::from(calls) * u64::from(t) / u64::from(threads)) as u32;
        let dst = [self.addrs[0].as_slice(), self.addrs[1].as_slice()];
        let results: Vec<Result<SentBy>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .senders
                .iter_mut()
                .take(threads as usize)
                .enumerate()
                .map(|(t, snd)| {
                    let (a, b) = (share(t as u32), share(t as u32 + 1));
                    s.spawn(move || snd.run(dst, stream, a, b - a, duration, trial))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("sender thread panicked"))))
                .collect()
        });
        let mut by = Vec::new();
        for r in results {
            by.push(r?);
        }
        self.sinks.wait_quiet(self.opts.quiet, self.opts.drain_limit)?;
        let receiver_drops = self.rcvbuf_errors()?.saturating_sub(rcvbuf_before);
        let g = self.sinks.lock()?;
        // Packets each call sent each way: thread t sent `packets` stream
        // packets over its M calls round robin.
        let mut sent_by_call = vec![0u64; calls as usize];
        for (t, s) in by.iter().enumerate() {
            let (a, b) = (share(t as u32), share(t as u32 + 1));
            let m = u64::from(b - a);
            for (k, slot) in sent_by_call[a as usize..b as usize].iter_mut().enumerate() {
                *slot = s.packets / m + u64::from((k as u64) < s.packets % m);
            }
        }
        let mut per_call = Vec::with_capacity(calls as usize);
        let (mut received, mut reordered, mut with_loss) = (0u64, 0u64, 0u32);
        let (mut jit_sum, mut jit_max) = (0f64, 0f64);
        for (c, flows) in g.flows.iter().enumerate() {
            let sent = sent_by_call[c];
            let mut worst_loss = 0f64;
            let mut worst_jit = 0f64;
            for f in flows {
                received += u64::from(f.received);
                reordered += u64::from(f.reordered);
                let lost = sent.saturating_sub(u64::from(f.received));
                let loss = if sent == 0 { 0.0 } else { lost as f64 * 100.0 / sent as f64 };
                worst_loss = worst_loss.max(loss);
                let j = f.jitter / 1e6;
                worst_jit = worst_jit.max(j);
                jit_sum += j;
                jit_max = jit_max.max(j);
            }
            if worst_loss > 0.0 {
                with_loss += 1;
            }
            per_call.push(CallFigures { loss_percent: worst_loss, jitter_ms: worst_jit });
        }
        let sent: u64 = by.iter().map(|s| 2 * s.packets).sum();
        let seconds = by.iter().map(|s| s.seconds).fold(0.0, f64::max).max(1e-9);
        let target_pps = 2.0 * f64::from(calls) * stream.pps();
        let offered_pps = sent as f64 / seconds;
        Ok(CallTrial {
            calls,
            target_pps,
            offered_pps,
            sent,
            received,
            stray: g.stray - stray_before,
            reordered,
            receiver_drops,
            generator_limited: by.iter().any(|s| s.behind)
                || offered_pps < target_pps * GENERATOR_SHORTFALL
                || receiver_drops > 0,
            delay: percentiles(&g.delays),
            jitter_mean_ms: jit_sum / (2.0 * f64::from(calls)),
            jitter_max_ms: jit_max,
            calls_with_loss: with_loss,
            per_call,
        })
    }
}

/// Median, 99th percentile and maximum of a delay histogram, ms (bucket
/// upper edges); `None` when empty.
fn percentiles(h: &[u64]) -> Option<Delay> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    let at = |q: f64| {
        let want = ((total as f64 * q).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, n) in h.iter().enumerate() {
            acc += n;
            if acc >= want {
                return (i as u64 + 1) as f64 * DELAY_BUCKET_NS as f64 / 1e6;
            }
        }
        h.len() as f64 * DELAY_BUCKET_NS as f64 / 1e6
    };
    Some(Delay { median_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn packets_round_trip_and_strangers_are_refused() {
        let mut b = [0u8; 32];
        write_packet(&mut b, 4711, 300, 20, 9, 123_456_789);
        assert_eq!(parse(&b), Some((4711, 300, 9, 123_456_789)));
        // RTP: version 2, timestamp 300 × 160.
        assert_eq!(b[0] >> 6, 2);
        assert_eq!(u32::from_be_bytes(b[4..8].try_into().unwrap()), 48_000);
        assert_eq!(parse(&b[..MIN_PAYLOAD - 1]), None);
        b[12] = b'X';
        assert_eq!(parse(&b), None);
    }

    #[test]
    fn rfc3550_jitter_and_reordering() {
        let mut f = FlowStat::default();
        // Constant transit: no jitter.
        for s in 0..10 {
            f.arrive(s, 1_000_000);
        }
        assert_eq!(f.jitter, 0.0);
        // One packet 1.6 ms late: J += (1.6 ms − J)/16, then decays back.
        f.arrive(10, 2_600_000);
        assert!((f.jitter - 100_000.0).abs() < 1e-6, "{}", f.jitter);
        f.arrive(9, 1_000_000);
        assert_eq!((f.received, f.reordered, f.next_seq), (12, 1, 11));
    }

    #[test]
    fn delay_percentiles_from_the_histogram() {
        let mut g = Gathered::new();
        g.begin(1, 1);
        assert_eq!(percentiles(&g.delays), None);
        let mut pkt = [0u8; 40];
        for i in 0..100u64 {
            write_packet(&mut pkt, 0, i as u32, 20, 1, 0);
            // 1 ms for 98 packets, 5 ms for one, 50 ms for one.
            let d = match i { 98 => 5_000_000, 99 => 50_000_000, _ => 1_000_000 };
            g.packet(0, &pkt, d);
        }
        write_packet(&mut pkt, 0, 0, 20, 2, 0);
        g.packet(0, &pkt, 1);
        write_packet(&mut pkt, 7, 0, 20, 1, 0);
        g.packet(0, &pkt, 1);
        assert_eq!(g.stray, 2, "another trial's and an unknown call's packets");
        let d = percentiles(&g.delays).unwrap();
        assert!((d.median_ms - 1.01).abs() < 1e-9, "{d:?}");
        assert!((d.p99_ms - 5.01).abs() < 1e-9, "{d:?}");
        assert!((d.max_ms - 50.01).abs() < 1e-9, "{d:?}");
        assert_eq!(g.flows[0][0].received, 100);
    }

    #[test]
    fn calls_between_two_namespaces() {
        if !esparto_netns::available() {
            eprintln!("SKIP callgen::calls_between_two_namespaces: needs root and iproute2");
            return;
        }
        // Two hosts on a veth; east receives on two addresses.
        let p = esparto_netns::Pair::new("callgen", "10.201.0.1/24", "10.201.0.2/24").unwrap();
        p.b.addr("veth1", "10.201.0.3/24").unwrap();
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let west = Host { ns: &p.a, addr: ip("10.201.0.1"), receive: vec![ip("10.201.0.1")] };
        let east = Host { ns: &p.b, addr: ip("10.201.0.2"), receive: vec![ip("10.201.0.2"), ip("10.201.0.3")] };
        let mut g = CallGen::new(west, east, Options::default()).unwrap();
        assert_eq!(g.tuples(), 2 * SOURCES_PER_THREAD);
        // 100 G.711 20 ms calls for a second: 100 × 50 packets each way.
        let stream = Stream { payload: 172, ptime_ms: 20 };
        let t = g.trial(100, stream, Duration::from_secs(1)).unwrap();
        assert_eq!(t.sent, 2 * 100 * 50, "{t:?}");
        assert_eq!(t.received, t.sent, "the veth lost packets: {t:?}");
        assert_eq!((t.calls_with_loss, t.stray), (0, 0));
        assert!(t.per_call.iter().all(|c| c.loss_percent == 0.0));
        assert!(t.delay.unwrap().median_ms < 1_000.0);
        // An odd call count splits unevenly over the threads and still adds up.
        let t = g.trial(7, Stream { payload: 42, ptime_ms: 30 }, Duration::from_millis(600)).unwrap();
        assert_eq!((t.sent, t.received, t.per_call.len()), (2 * 7 * 20, 2 * 7 * 20, 7));
        assert!(g.trial(1, Stream { payload: 20, ptime_ms: 20 }, Duration::from_millis(100)).is_err());
    }
}
