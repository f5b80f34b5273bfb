//! IP Payload Compression inside ESP (RFC 3173) with DEFLATE (RFC 2394).
//!
//! With IPComp an SA's inner packet is `[IPComp header | DEFLATE data]`
//! (ESP Next Header 108) instead of the IP packet itself. The rules of
//! RFC 3173 §2.2 shape everything here:
//!
//! - each packet is compressed on its own ("stateless"): the compressor is
//!   reset before every packet, so a lost or reordered packet costs nothing
//!   and one compressor per worker serves every SA;
//! - a packet shorter than [`MIN_COMPRESS_LEN`] (RFC 2394 §2: "90 bytes") is
//!   sent as it is, and so is one whose compressed form plus the header is
//!   not smaller: the receiver takes both forms on the same SA;
//! - the receiver's output is bounded by the tunnel's largest inner packet
//!   ([`IpcompParams::max_inner`]) in a buffer the worker allocated once:
//!   a decompression bomb fills it and is dropped as `too_big`, a corrupt
//!   stream or a CPI the SA does not know as `malformed`, and the SA's own
//!   IPComp figures count each as `too_big` or `decompress_failed`.
//!   Nothing is ever sized by the peer.
//!
//! The per-SA state ([`IpcompSa`]) lives beside the ESP SA, keyed by SPI,
//! not inside it: SAs without IPComp pay one emptiness check per packet.
//!
//! *Adaptive* mode ([`IpcompMode::Adaptive`]) compresses only while it
//! pays, which the FreeS/WAN measurements put simply: when the link, not
//! the CPU, is the bottleneck, and the data compresses. Over a window of
//! [`PROBE_PACKETS`] packets the SA learns what compression saves (bytes
//! out over bytes in), what it costs (nanoseconds per input byte, timed on
//! one packet in [`TIME_EVERY`]; the cheapest of those, since preemption
//! only ever adds time), and what the link can carry: the
//! configured `link_mbps`; else the rate the worker measured on its own
//! link while its send queue stood (the local link is the bottleneck:
//! the I/O layer's link meter, [`Worker::note_link`](crate::Worker::note_link));
//! else whether the send path pushed back (the UDP socket refused part of
//! a batch: its buffer is full) during the window. [`decide`] weighs them:
//!
//! - ratio above [`ADAPTIVE_MAX_RATIO`]: the data does not compress;
//! - with a link rate, configured or measured: compressed, the link
//!   carries `link / ratio` of inner data and the compressor at most
//!   `1 / cost`; compress when the smaller of the two beats the link
//!   itself by [`MIN_GAIN`];
//! - without one: compress while the link pushes back; if it never did,
//!   the link took all the worker sent, so compression would only spend
//!   CPU (the CPU, not the link, limits the SA).
//!
//! A "no" sends uncompressed for a back-off that doubles while the answer
//! stays no (RFC 3173 §2.2's "exponential backoff"), from [`BACKOFF_MIN`]
//! to [`BACKOFF_MAX`] packets but never longer than [`BACKOFF_MAX_TIME`],
//! then probes one window again; a "yes" resets it.

use esparto_wire::esp as wesp;
use esparto_wire::ipcomp::{self as wipcomp, HEADER_LEN};
use std::time::{Duration, Instant};

use libdeflater::{CompressionLvl, Compressor, DecompressionError, Decompressor};

use crate::counters::DropReason;

/// Packets shorter than this are never compressed (RFC 2394 §2).
pub const MIN_COMPRESS_LEN: usize = 90;

/// The DEFLATE level: the fastest, see docs/BENCHMARKS.md (level 6 saves
/// a few percent more at about 1.3 to 1.6 times the cost per byte, as
/// measured on the benchmark machines).
pub const DEFLATE_LEVEL: i32 = 1;

/// The IPCOMP transform ID of DEFLATE (RFC 7296 §3.10.1, IANA
/// "IPCOMP Transform IDs"); also its well-known CPI (RFC 3173 §3.3).
pub const TRANSFORM_DEFLATE: u8 = 2;

/// Largest packet a worker compresses or decompresses (the largest IPv4
/// or IPv6 packet without jumbograms): the size of its scratch buffer.
pub const MAX_PACKET: usize = 65_535;

/// Compressed packets an adaptive SA looks at before deciding.
pub const PROBE_PACKETS: u32 = 32;

/// An adaptive SA stops compressing when the compressed bytes (header
/// included) exceed this share of the input over a probe window.
pub const ADAPTIVE_MAX_RATIO: f64 = 0.9;

/// An adaptive SA times the compression of one packet in this many (two
/// clock reads cost far less than DEFLATE of a packet, but not nothing).
pub const TIME_EVERY: u32 = 8;

/// With a configured link rate, compression must carry at least this much
/// more inner data than the link does uncompressed (10 %) to be worth it.
pub const MIN_GAIN: f64 = 0.1;

/// Packets sent uncompressed after the first "does not pay" decision.
pub const BACKOFF_MIN: u32 = 64;

/// The longest back-off, in packets.
pub const BACKOFF_MAX: u32 = 1 << 16;

/// A back-off also ends after this long, whatever packets are left in
/// it: on a slow link the longest one would last many seconds (65,536
/// packets are 15 s at 50 Mbit/s) after the traffic changed. One probe of
/// [`PROBE_PACKETS`] a second costs nothing measurable.
pub const BACKOFF_MAX_TIME: Duration = Duration::from_secs(1);

/// How an SA compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpcompMode {
    /// Every packet the rules allow.
    Always,
    /// Only while compression pays (see the module essay).
    Adaptive,
}

/// IPComp for one direction of one SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcompParams {
    /// The CPI: outbound, the one the peer chose (written in every
    /// header); inbound, ours (the only one accepted).
    pub cpi: u16,
    /// Outbound only: always or adaptive.
    pub mode: IpcompMode,
    /// Inbound only: the largest decompressed packet accepted (the
    /// tunnel's largest inner packet), at most [`MAX_PACKET`].
    pub max_inner: usize,
    /// Outbound, adaptive: what the WAN link to the peer carries, in
    /// Mbit/s (`link_mbps`); `None`: judged from the send path's
    /// back-pressure.
    pub link_mbps: Option<u32>,
}

/// Why an adaptive SA does not compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseReason {
    /// The data did not shrink enough ([`ADAPTIVE_MAX_RATIO`]).
    Incompressible,
    /// The CPU, not the link, limits the SA: compressing would lower what
    /// it carries (or, without a link rate, the link never pushed back).
    Cpu,
}

impl PauseReason {
    /// A stable name for status output and the log.
    pub fn name(self) -> &'static str {
        match self {
            PauseReason::Incompressible => "incompressible",
            PauseReason::Cpu => "cpu",
        }
    }
}

/// What an adaptive SA measured over one probe window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowFigures {
    /// Bytes out (as sent, header included) over bytes in.
    pub ratio: f64,
    /// Nanoseconds of compression per input byte (`None`: none timed).
    pub ns_per_byte: Option<f64>,
    /// The link rate, Mbit/s: configured, or measured (below).
    pub link_mbps: Option<u32>,
    /// Whether `link_mbps` was measured (the worker's send queue stood:
    /// the local link is the bottleneck, draining at that rate) rather
    /// than configured.
    pub link_measured: bool,
    /// Whether the send path pushed back during the window.
    pub pushback: bool,
}

/// The adaptive decision (see the module essay): `Ok` to compress, or why
/// not.
pub fn decide(w: &WindowFigures) -> Result<(), PauseReason> {
    // A NaN ratio (nothing measured) counts as not compressing.
    if w.ratio.is_nan() || w.ratio > ADAPTIVE_MAX_RATIO {
        return Err(PauseReason::Incompressible);
    }
    match w.link_mbps {
        Some(mbps) => {
            // Inner bytes per second each way can carry.
            let link = f64::from(mbps) * 1e6 / 8.0;
            let cpu = w.ns_per_byte.filter(|c| *c > 0.0).map_or(f64::INFINITY, |c| 1e9 / c);
            let compressed = (link / w.ratio.max(1e-3)).min(cpu);
            if compressed >= link * (1.0 + MIN_GAIN) { Ok(()) } else { Err(PauseReason::Cpu) }
        }
        None if w.pushback => Ok(()),
        None => Err(PauseReason::Cpu),
    }
}

/// Whether an outbound SA compresses now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpcompState {
    /// Compressing every packet the rules allow.
    On,
    /// Adaptive, not compressing for `remaining` more packets.
    Backoff {
        /// Packets left in this back-off.
        remaining: u32,
        /// Why.
        reason: PauseReason,
    },
}

impl IpcompState {
    /// A stable name for status output: `compressing`,
    /// `paused-incompressible` or `paused-cpu`.
    pub fn name(self) -> &'static str {
        match self {
            IpcompState::On => "compressing",
            IpcompState::Backoff { reason: PauseReason::Incompressible, .. } => "paused-incompressible",
            IpcompState::Backoff { reason: PauseReason::Cpu, .. } => "paused-cpu",
        }
    }
}

/// What IPComp did on one SA as one worker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcompStats {
    /// The CPI (see [`IpcompParams::cpi`]).
    pub cpi: u16,
    /// Outbound mode.
    pub mode: IpcompMode,
    /// Outbound: whether it compresses now.
    pub state: IpcompState,
    /// Packets sent compressed / received compressed and delivered.
    pub compressed: u64,
    /// Outbound packets sent uncompressed (too short, not smaller, or in
    /// an adaptive back-off).
    pub skipped: u64,
    /// Inner bytes of the compressed packets before compression.
    pub bytes_in: u64,
    /// Their bytes after compression, IPComp header included.
    pub bytes_out: u64,
    /// Times an adaptive SA switched off (each switch is one back-off).
    pub switches_off: u64,
    /// The last switch of an adaptive SA (`None`: none yet).
    pub last_switch: Option<IpcompSwitch>,
    /// Inbound payloads that did not decompress (corrupt DEFLATE, another
    /// CPI, a bad header): dropped as `malformed`.
    pub decompress_failed: u64,
    /// Inbound payloads that decompressed past the bound: dropped as
    /// `too_big`.
    pub too_big: u64,
}

impl IpcompStats {
    /// Bytes compression took off the packets it compressed.
    pub fn bytes_saved(&self) -> u64 {
        self.bytes_in.saturating_sub(self.bytes_out)
    }

    /// Compressed size over original size of the compressed packets (1.0
    /// with none).
    pub fn ratio(&self) -> f64 {
        if self.bytes_in == 0 { 1.0 } else { self.bytes_out as f64 / self.bytes_in as f64 }
    }

    /// Adds another worker's figures for the same SA (the state of the
    /// worker that compresses wins).
    pub fn add(&mut self, o: &IpcompStats) {
        self.compressed += o.compressed;
        self.skipped += o.skipped;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.switches_off += o.switches_off;
        self.decompress_failed += o.decompress_failed;
        self.too_big += o.too_big;
        if o.state == IpcompState::On {
            self.state = IpcompState::On;
        }
        if self.last_switch.is_none() {
            self.last_switch = o.last_switch;
        }
    }
}

/// A state switch of an adaptive SA, for the control plane's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpcompSwitch {
    /// The new state.
    pub state: IpcompState,
    /// Compressed over original size in the window that decided it, in
    /// thousandths.
    pub ratio_permille: u32,
    /// Measured compression cost, picoseconds per input byte (0: not
    /// timed).
    pub ps_per_byte: u32,
    /// Whether the send path pushed back in that window.
    pub pushback: bool,
    /// The link rate it was weighed against, Mbit/s.
    pub link_mbps: Option<u32>,
    /// Whether that rate was measured rather than configured.
    pub link_measured: bool,
}

impl IpcompSwitch {
    /// Why the SA switched, in words (status and log).
    pub fn reason(&self) -> String {
        let ratio = f64::from(self.ratio_permille) / 1000.0;
        let cost = f64::from(self.ps_per_byte) / 1000.0;
        let link = match self.link_mbps {
            Some(m) if self.link_measured => format!("link saturated at {m} Mbit/s"),
            Some(m) => format!("link {m} Mbit/s"),
            None if self.pushback => "link pushing back".into(),
            None => "link not pushing back".into(),
        };
        match self.state {
            IpcompState::On => format!("compresses (ratio {ratio:.3}, {cost:.2} ns/B, {link})"),
            IpcompState::Backoff { reason: PauseReason::Incompressible, .. } => {
                format!("incompressible (ratio {ratio:.3} > {ADAPTIVE_MAX_RATIO})")
            }
            IpcompState::Backoff { reason: PauseReason::Cpu, .. } => {
                format!("CPU-bound (ratio {ratio:.3}, {cost:.2} ns/B, {link})")
            }
        }
    }
}

/// One SA's IPComp state in one worker (either direction).
#[derive(Debug, Clone)]
pub struct IpcompSa {
    params: IpcompParams,
    stats: IpcompStats,
    /// Adaptive: bytes in and out of the current probe window.
    window_in: u64,
    window_out: u64,
    window_packets: u32,
    /// Adaptive: the cheapest of the window's timed compressions, in
    /// picoseconds per input byte (`None`: none timed yet).
    window_ps_per_byte: Option<u64>,
    /// Adaptive: the worker's push-back count last seen, and whether it
    /// moved in this window.
    pushbacks_seen: u64,
    window_pushback: bool,
    /// Adaptive: the worker's latest verdict on its link (Mbit/s it drains
    /// at while saturated; `None`: it keeps up).
    window_link: Option<u32>,
    /// Whether the last packet went through the compressor.
    attempted: bool,
    /// Adaptive: the next back-off's length.
    next_backoff: u32,
    /// Adaptive: when the current back-off was first seen (by
    /// [`IpcompSa::observe`]).
    paused_since: Option<Instant>,
}

impl IpcompSa {
    /// Fresh state for an SA.
    pub fn new(params: IpcompParams) -> Self {
        let params = IpcompParams { max_inner: params.max_inner.min(MAX_PACKET), ..params };
        Self {
            params,
            stats: IpcompStats {
                cpi: params.cpi,
                mode: params.mode,
                state: IpcompState::On,
                compressed: 0,
                skipped: 0,
                bytes_in: 0,
                bytes_out: 0,
                switches_off: 0,
                last_switch: None,
                decompress_failed: 0,
                too_big: 0,
            },
            window_in: 0,
            window_out: 0,
            window_packets: 0,
            window_ps_per_byte: None,
            pushbacks_seen: 0,
            window_pushback: false,
            window_link: None,
            attempted: false,
            next_backoff: BACKOFF_MIN,
            paused_since: None,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &IpcompParams {
        &self.params
    }

    /// The figures so far.
    pub fn stats(&self) -> &IpcompStats {
        &self.stats
    }

    /// Adaptive: whether the caller should time the next packet's
    /// compression and report it with [`IpcompSa::note_cost`].
    #[inline]
    pub fn time_next(&self) -> bool {
        self.params.mode == IpcompMode::Adaptive
            && self.stats.state == IpcompState::On
            && self.window_packets % TIME_EVERY == 0
    }

    /// Adaptive: the time the last packet's compression took (ignored if
    /// it did not go through the compressor).
    ///
    /// The window keeps the *cheapest* timed packet, not the sum: a wall
    /// clock times whatever else ran on the CPU meanwhile, so a worker
    /// preempted during one compression would otherwise see the cost of a
    /// scheduler time slice spread over the window and stop compressing on
    /// a link that is the bottleneck by far. Preemption only ever adds
    /// time, so the minimum of the window's samples is the estimate it
    /// cannot inflate; the samples are packets of the same SA, whose cost
    /// per byte differs little.
    pub fn note_cost(&mut self, len: usize, ns: u64) {
        if self.attempted && len > 0 {
            let ps = ns.saturating_mul(1000) / len as u64;
            self.window_ps_per_byte = Some(self.window_ps_per_byte.map_or(ps, |m| m.min(ps)));
        }
    }

    /// Adaptive, before each packet: the time, the worker's count of
    /// send-path push-backs (a UDP send that the socket refused in part; a
    /// change since the last call marks this window as "the link pushes
    /// back") and its latest verdict on the link (`Some(mbps)`: saturated,
    /// draining at that rate).
    #[inline]
    pub fn observe(&mut self, now: Instant, pushbacks: u64, saturated_mbps: Option<u32>) {
        if pushbacks != self.pushbacks_seen {
            self.pushbacks_seen = pushbacks;
            self.window_pushback = true;
        }
        let newly_saturated = saturated_mbps.is_some() && self.window_link.is_none();
        self.window_link = saturated_mbps;
        let IpcompState::Backoff { remaining, reason } = &mut self.stats.state else {
            self.paused_since = None;
            return;
        };
        let since = *self.paused_since.get_or_insert(now);
        // The next packet probes again when the pause has lasted
        // BACKOFF_MAX_TIME, or when a pause for want of a bottleneck sees
        // the link become one.
        if now.saturating_duration_since(since) >= BACKOFF_MAX_TIME || (newly_saturated && *reason == PauseReason::Cpu) {
            *remaining = 1;
        }
    }

    /// Whether the next packet of `len` bytes should be compressed; counts
    /// the ones that are not.
    fn wants(&mut self, len: usize) -> bool {
        self.attempted = false;
        if len < MIN_COMPRESS_LEN {
            self.stats.skipped += 1;
            return false;
        }
        if let IpcompState::Backoff { remaining, .. } = &mut self.stats.state {
            self.stats.skipped += 1;
            *remaining -= 1;
            if *remaining == 0 {
                self.stats.state = IpcompState::On;
                self.window_pushback = false;
            }
            return false;
        }
        self.attempted = true;
        true
    }

    /// Records one compression attempt (`out`: the packet's size as sent,
    /// compressed or not) and, in adaptive mode, decides at the end of a
    /// probe window.
    fn record(&mut self, len: usize, out: Option<usize>) -> Option<IpcompSwitch> {
        match out {
            Some(n) => {
                self.stats.compressed += 1;
                self.stats.bytes_in += len as u64;
                self.stats.bytes_out += n as u64;
            }
            None => self.stats.skipped += 1,
        }
        if self.params.mode != IpcompMode::Adaptive {
            return None;
        }
        self.window_in += len as u64;
        self.window_out += out.unwrap_or(len) as u64;
        self.window_packets += 1;
        if self.window_packets < PROBE_PACKETS {
            return None;
        }
        let figures = WindowFigures {
            ratio: self.window_out as f64 / self.window_in.max(1) as f64,
            ns_per_byte: self.window_ps_per_byte.map(|ps| ps as f64 / 1000.0),
            link_mbps: self.params.link_mbps.or(self.window_link),
            link_measured: self.params.link_mbps.is_none() && self.window_link.is_some(),
            pushback: self.window_pushback,
        };
        self.window_in = 0;
        self.window_out = 0;
        self.window_packets = 0;
        self.window_ps_per_byte = None;
        self.window_pushback = false;
        let ps_per_byte = figures.ns_per_byte.map_or(0, |c| (c * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32);
        let switch = |state| IpcompSwitch {
            state,
            ratio_permille: permille(figures.ratio),
            ps_per_byte,
            pushback: figures.pushback,
            link_mbps: figures.link_mbps,
            link_measured: figures.link_measured,
        };
        let sw = match decide(&figures) {
            Err(reason) => {
                let remaining = self.next_backoff;
                self.next_backoff = (self.next_backoff.saturating_mul(2)).min(BACKOFF_MAX);
                self.stats.state = IpcompState::Backoff { remaining, reason };
                self.stats.switches_off += 1;
                Some(switch(self.stats.state))
            }
            Ok(()) => {
                // Paying again: the next time it stops paying starts short.
                let was_backing_off = self.next_backoff > BACKOFF_MIN;
                self.next_backoff = BACKOFF_MIN;
                was_backing_off.then(|| switch(IpcompState::On))
            }
        };
        if sw.is_some() {
            self.stats.last_switch = sw;
        }
        sw
    }
}

fn permille(ratio: f64) -> u32 {
    (ratio * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// A worker's DEFLATE engine and scratch buffer, shared by all its SAs
/// (libdeflate compresses and decompresses one whole buffer per call, so
/// no SA sees another's history, and no packet another packet's).
pub struct Deflate {
    compress: Compressor,
    decompress: Decompressor,
    scratch: Box<[u8]>,
}

impl core::fmt::Debug for Deflate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Deflate").finish_non_exhaustive()
    }
}

impl Default for Deflate {
    fn default() -> Self {
        Self::new()
    }
}

impl Deflate {
    /// Allocates the engine and its [`MAX_PACKET`] scratch buffer, once.
    pub fn new() -> Self {
        let level = CompressionLvl::new(DEFLATE_LEVEL).unwrap_or_else(|_| CompressionLvl::fastest());
        Self {
            // Raw DEFLATE, no zlib header (RFC 2394 §2).
            compress: Compressor::new(level),
            decompress: Decompressor::new(),
            scratch: vec![0u8; MAX_PACKET].into_boxed_slice(),
        }
    }

    /// Compresses `input` into the scratch buffer if the result plus the
    /// IPComp header is smaller than `input`; returns the compressed length.
    /// The output room is that bound, so a packet that would not shrink
    /// costs no more than finding out.
    pub fn compress(&mut self, input: &[u8]) -> Option<usize> {
        let limit = input.len().checked_sub(HEADER_LEN + 1)?.min(self.scratch.len());
        self.compress.deflate_compress(input, &mut self.scratch[..limit]).ok()
    }

    /// The scratch buffer (the last result).
    pub fn scratch(&self) -> &[u8] {
        &self.scratch
    }

    /// Decompresses one DEFLATE stream into the scratch buffer, at most
    /// `max_out` bytes (more is [`DropReason::TooBig`]).
    pub fn decompress(&mut self, input: &[u8], max_out: usize) -> Result<usize, DropReason> {
        let max_out = max_out.min(self.scratch.len());
        match self.decompress.deflate_decompress(input, &mut self.scratch[..max_out]) {
            Ok(n) => Ok(n),
            Err(DecompressionError::InsufficientSpace) => Err(DropReason::TooBig),
            Err(DecompressionError::BadData) => Err(DropReason::Malformed),
        }
    }

    /// Outbound: compresses the inner packet at `buf[inner]` in place when
    /// the SA wants it and it pays; returns the range and ESP Next Header
    /// to send, and an adaptive SA's switch if this packet decided one.
    pub fn compress_in_place(
        &mut self,
        sa: &mut IpcompSa,
        buf: &mut [u8],
        inner: core::ops::Range<usize>,
        next_header: u8,
    ) -> (core::ops::Range<usize>, u8, Option<IpcompSwitch>) {
        let len = inner.len();
        if !sa.wants(len) {
            return (inner, next_header, None);
        }
        let Some(packet) = buf.get(inner.clone()) else {
            return (inner, next_header, None);
        };
        let Some(n) = self.compress(packet) else {
            let switch = sa.record(len, None);
            return (inner, next_header, switch);
        };
        let out = inner.start..inner.start + HEADER_LEN + n;
        let repr = wipcomp::Repr { next_header, cpi: sa.params.cpi };
        let mut header = wipcomp::Packet::new_unchecked(&mut buf[out.clone()]);
        if repr.emit(&mut header).is_err() {
            // A reserved CPI: the control plane never installs one.
            let switch = sa.record(len, None);
            return (inner, next_header, switch);
        }
        header.payload_mut().copy_from_slice(&self.scratch[..n]);
        let switch = sa.record(len, Some(HEADER_LEN + n));
        (out, wesp::NEXT_HEADER_IPCOMP, switch)
    }

    /// Inbound: checks the IPComp header of `payload` against the SA and
    /// decompresses it into the scratch buffer; returns the Next Header
    /// it names and the decompressed length.
    /// A payload that does not decompress is [`DropReason::Malformed`]
    /// (and the SA's `decompress_failed`), one past the bound
    /// [`DropReason::TooBig`] (and its `too_big`).
    pub fn decompress_packet(&mut self, sa: &mut IpcompSa, payload: &[u8]) -> Result<(u8, usize), DropReason> {
        let r = self.decompress_checked(sa, payload);
        match r {
            Err(DropReason::TooBig) => sa.stats.too_big += 1,
            Err(_) => sa.stats.decompress_failed += 1,
            Ok(_) => {}
        }
        r
    }

    fn decompress_checked(&mut self, sa: &mut IpcompSa, payload: &[u8]) -> Result<(u8, usize), DropReason> {
        let p = wipcomp::Packet::new_checked(payload).map_err(|_| DropReason::Malformed)?;
        let repr = wipcomp::Repr::parse(&p).map_err(|_| DropReason::Malformed)?;
        if repr.cpi != sa.params.cpi {
            return Err(DropReason::Malformed);
        }
        let n = self.decompress(p.payload(), sa.params.max_inner)?;
        sa.stats.compressed += 1;
        sa.stats.bytes_in += n as u64;
        sa.stats.bytes_out += payload.len() as u64;
        Ok((repr.next_header, n))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let words = ["tunnel ", "gateway ", "<p>packet</p> ", "compress ", "link "];
        let mut v = Vec::new();
        let mut i = 0usize;
        while v.len() < n {
            v.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
            i += 1;
        }
        v.truncate(n);
        v
    }

    fn random(n: usize) -> Vec<u8> {
        let mut s = 0x1234_5678_9abc_def1u64;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    fn params(mode: IpcompMode) -> IpcompParams {
        IpcompParams { cpi: 0x1234, mode, max_inner: 1500, link_mbps: None }
    }

    #[test]
    fn round_trip_and_header() {
        let mut d = Deflate::new();
        let mut out_sa = IpcompSa::new(params(IpcompMode::Always));
        let mut in_sa = IpcompSa::new(params(IpcompMode::Always));
        let data = text(1400);
        let mut buf = vec![0u8; 1500];
        buf[50..1450].copy_from_slice(&data);
        let (r, nh, sw) = d.compress_in_place(&mut out_sa, &mut buf, 50..1450, 4);
        assert!(sw.is_none());
        assert_eq!(nh, wesp::NEXT_HEADER_IPCOMP);
        assert!(r.len() < 700, "{}", r.len());
        assert_eq!(&buf[50..54], &[4, 0, 0x12, 0x34]);
        assert_eq!(out_sa.stats().compressed, 1);
        assert_eq!(out_sa.stats().bytes_saved(), 1400 - r.len() as u64);
        let (inner_nh, n) = d.decompress_packet(&mut in_sa, &buf[r]).unwrap();
        assert_eq!((inner_nh, n), (4, 1400));
        assert_eq!(&d.scratch()[..n], &data[..]);
    }

    #[test]
    fn short_and_incompressible_go_as_they_are() {
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Always));
        let mut buf = text(200);
        let before = buf.clone();
        let (r, nh, _) = d.compress_in_place(&mut sa, &mut buf, 0..MIN_COMPRESS_LEN - 1, 4);
        assert_eq!((r, nh), (0..MIN_COMPRESS_LEN - 1, 4));
        let mut rnd = random(1400);
        let rbefore = rnd.clone();
        let (r, nh, _) = d.compress_in_place(&mut sa, &mut rnd, 0..1400, 41);
        assert_eq!((r, nh), (0..1400, 41));
        assert_eq!(rnd, rbefore);
        assert_eq!(buf, before);
        assert_eq!(sa.stats().skipped, 2);
        assert_eq!(sa.stats().compressed, 0);
    }

    #[test]
    fn bomb_is_too_big_and_garbage_fails() {
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Always));
        // 60 000 zero bytes compress to a few dozen: past max_inner 1500.
        let zeros = vec![0u8; 60_000];
        let n = d.compress(&zeros).unwrap();
        let mut pkt = vec![4u8, 0, 0x12, 0x34];
        pkt.extend_from_slice(&d.scratch()[..n]);
        assert_eq!(d.decompress_packet(&mut sa, &pkt), Err(DropReason::TooBig));
        // Corrupt stream.
        let bad = [4u8, 0, 0x12, 0x34, 0xff, 0xff, 0xff, 0xff, 0x00];
        assert_eq!(d.decompress_packet(&mut sa, &bad), Err(DropReason::Malformed));
        // Wrong CPI, reserved CPI, short header.
        let mut other = pkt.clone();
        other[3] = 0x35;
        assert_eq!(d.decompress_packet(&mut sa, &other), Err(DropReason::Malformed));
        other[2] = 0;
        other[3] = 100;
        assert_eq!(d.decompress_packet(&mut sa, &other), Err(DropReason::Malformed));
        assert_eq!(d.decompress_packet(&mut sa, &pkt[..3]), Err(DropReason::Malformed));
        assert_eq!((sa.stats().too_big, sa.stats().decompress_failed), (1, 4));
        let data = text(1000);
        let n = d.compress(&data).unwrap();
        let mut ok = vec![4u8, 0, 0x12, 0x34];
        ok.extend_from_slice(&d.scratch()[..n]);
        assert_eq!(d.decompress_packet(&mut sa, &ok), Ok((4, 1000)));
        // Truncated stream.
        ok.truncate(ok.len() - 3);
        assert_eq!(d.decompress_packet(&mut sa, &ok), Err(DropReason::Malformed));
    }

    fn figures(ratio: f64, ns_per_byte: Option<f64>, link_mbps: Option<u32>, pushback: bool) -> WindowFigures {
        WindowFigures { ratio, ns_per_byte, link_mbps, link_measured: false, pushback }
    }

    #[test]
    fn decide_link_bound_and_compressible_compresses() {
        // 50 Mbit/s link, text at half its size, 1 ns/B (1 GB/s): the
        // link carries twice as much inner data compressed.
        assert_eq!(decide(&figures(0.5, Some(1.0), Some(50), false)), Ok(()));
        // Without a configured rate, a link that pushes back.
        assert_eq!(decide(&figures(0.5, Some(1.0), None, true)), Ok(()));
        // Not timed yet: the cost is taken as nothing.
        assert_eq!(decide(&figures(0.5, None, Some(50), false)), Ok(()));
    }

    #[test]
    fn decide_cpu_bound_does_not_compress() {
        // 10 Gbit/s = 1.25 GB/s; at 2 ns/B the compressor does 0.5 GB/s:
        // compressing would carry less than the link does plainly.
        assert_eq!(decide(&figures(0.5, Some(2.0), Some(10_000), false)), Err(PauseReason::Cpu));
        // Just below the gain needed: 1 Gbit/s, ratio 0.95 would not even
        // pass the ratio test; ratio 0.88 gains 13.6 % but the CPU caps at
        // 1.1 × the link.
        let link = 1000.0 * 1e6 / 8.0;
        let ns = 1e9 / (link * 1.05);
        assert_eq!(decide(&figures(0.88, Some(ns), Some(1000), false)), Err(PauseReason::Cpu));
        // No configured rate and the link never pushed back.
        assert_eq!(decide(&figures(0.3, Some(0.5), None, false)), Err(PauseReason::Cpu));
    }

    #[test]
    fn decide_incompressible_does_not_compress() {
        for link in [None, Some(50)] {
            for pushback in [false, true] {
                assert_eq!(
                    decide(&figures(0.98, Some(0.1), link, pushback)),
                    Err(PauseReason::Incompressible),
                    "{link:?} {pushback}"
                );
            }
        }
        assert_eq!(decide(&figures(f64::NAN, None, Some(50), true)), Err(PauseReason::Incompressible));
    }

    #[test]
    fn a_link_that_becomes_saturated_ends_a_cpu_pause() {
        let now = Instant::now();
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Adaptive));
        let txt = text(1400);
        let send = |d: &mut Deflate, sa: &mut IpcompSa, link: Option<u32>| {
            sa.observe(now, 0, link);
            let mut b = txt.clone();
            let timed = sa.time_next();
            let (_, _, sw) = d.compress_in_place(sa, &mut b, 0..1400, 4);
            if timed {
                sa.note_cost(1400, 1400);
            }
            sw
        };
        // The link keeps up: paused, and each probe doubles the pause.
        for _ in 0..PROBE_PACKETS + BACKOFF_MIN + PROBE_PACKETS {
            send(&mut d, &mut sa, None);
        }
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: 2 * BACKOFF_MIN, reason: PauseReason::Cpu });
        // Saturated at 50 Mbit/s: the pause ends on the next packet and
        // the probe after it compresses.
        assert!(send(&mut d, &mut sa, Some(50)).is_none());
        assert_eq!(sa.stats().state, IpcompState::On);
        let mut on = None;
        for _ in 0..PROBE_PACKETS {
            on = send(&mut d, &mut sa, Some(50)).or(on);
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        let sw = on.unwrap();
        assert!(sw.link_measured && sw.link_mbps == Some(50), "{sw:?}");
        let why = sw.reason();
        assert!(why.starts_with("compresses (ratio ") && why.ends_with(", 1.00 ns/B, link saturated at 50 Mbit/s)"), "{why}");
        // An incompressible pause is not cut short by the link.
        let mut sa = IpcompSa::new(params(IpcompMode::Adaptive));
        sa.stats.state = IpcompState::Backoff { remaining: 100, reason: PauseReason::Incompressible };
        sa.observe(Instant::now(), 0, Some(50));
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: 100, reason: PauseReason::Incompressible });
    }

    #[test]
    fn a_long_pause_ends_after_its_time_whatever_packets_are_left() {
        let mut sa = IpcompSa::new(params(IpcompMode::Adaptive));
        let t0 = Instant::now();
        sa.stats.state = IpcompState::Backoff { remaining: BACKOFF_MAX, reason: PauseReason::Incompressible };
        sa.observe(t0, 0, None);
        assert!(!sa.wants(1400));
        sa.observe(t0 + BACKOFF_MAX_TIME / 2, 0, None);
        assert!(!sa.wants(1400));
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: BACKOFF_MAX - 2, reason: PauseReason::Incompressible });
        // A second on: this packet ends the pause, the next one probes.
        sa.observe(t0 + BACKOFF_MAX_TIME, 0, None);
        assert!(!sa.wants(1400));
        assert_eq!(sa.stats().state, IpcompState::On);
        sa.observe(t0 + BACKOFF_MAX_TIME, 0, None);
        assert!(sa.wants(1400));
        // The next pause is timed from its own start.
        sa.stats.state = IpcompState::Backoff { remaining: 1000, reason: PauseReason::Cpu };
        sa.observe(t0 + 3 * BACKOFF_MAX_TIME, 0, None);
        sa.observe(t0 + 3 * BACKOFF_MAX_TIME + BACKOFF_MAX_TIME / 2, 0, None);
        assert!(matches!(sa.stats().state, IpcompState::Backoff { remaining: 1000, .. }));
    }

    #[test]
    fn cpu_bound_backs_off_doubling_and_resets_when_the_link_pushes_back() {
        let now = Instant::now();
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Adaptive));
        let txt = text(1400);
        let mut pushbacks = 0u64;
        let mut send = |d: &mut Deflate, sa: &mut IpcompSa, pushback: bool| {
            if pushback {
                pushbacks += 1;
            }
            sa.observe(now, pushbacks, None);
            let mut b = txt.clone();
            let timed = sa.time_next();
            let (_, _, sw) = d.compress_in_place(sa, &mut b, 0..1400, 4);
            if timed {
                sa.note_cost(1400, 1400);
            }
            sw
        };
        let mut last = None;
        for _ in 0..PROBE_PACKETS {
            last = send(&mut d, &mut sa, false).or(last);
        }
        let sw = last.unwrap();
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: BACKOFF_MIN, reason: PauseReason::Cpu });
        assert_eq!(sw.ps_per_byte, 1000);
        assert_eq!(sa.stats().last_switch, Some(sw));
        // A push-back during the back-off does not count for the probe.
        for _ in 0..BACKOFF_MIN {
            assert!(send(&mut d, &mut sa, true).is_none());
        }
        for _ in 0..PROBE_PACKETS {
            send(&mut d, &mut sa, false);
        }
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: 2 * BACKOFF_MIN, reason: PauseReason::Cpu });
        for _ in 0..2 * BACKOFF_MIN {
            send(&mut d, &mut sa, false);
        }
        // The link pushes back now: compressing again, back-off reset.
        let mut on = None;
        for i in 0..PROBE_PACKETS {
            on = send(&mut d, &mut sa, i == 3).or(on);
        }
        assert_eq!(on.map(|s| s.state), Some(IpcompState::On));
        assert!(on.unwrap().pushback);
        for i in 0..PROBE_PACKETS {
            send(&mut d, &mut sa, i == 0);
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        for _ in 0..PROBE_PACKETS {
            send(&mut d, &mut sa, false);
        }
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: BACKOFF_MIN, reason: PauseReason::Cpu });
        assert_eq!(sa.stats().switches_off, 3);
    }

    #[test]
    fn a_preempted_sample_does_not_turn_compression_off() {
        // Every window's first timed packet took 10 ms (the worker was
        // preempted in the middle of it: 7 µs/B), the others 1 ns/B: the
        // window's estimate is the cheapest, and a 50 Mbit/s link stays
        // the bottleneck.
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(IpcompParams { link_mbps: Some(50), ..params(IpcompMode::Adaptive) });
        let txt = text(1400);
        for i in 0..8 * PROBE_PACKETS {
            let mut b = txt.clone();
            let timed = sa.time_next();
            let (_, _, sw) = d.compress_in_place(&mut sa, &mut b, 0..1400, 4);
            if timed {
                sa.note_cost(1400, if i % PROBE_PACKETS == 0 { 10_000_000 } else { 1400 });
            }
            assert!(sw.is_none(), "{sw:?}");
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        // Every sample that slow: the CPU is what limits the SA.
        for _ in 0..PROBE_PACKETS {
            let mut b = txt.clone();
            let timed = sa.time_next();
            d.compress_in_place(&mut sa, &mut b, 0..1400, 4);
            if timed {
                sa.note_cost(1400, 10_000_000);
            }
        }
        assert!(matches!(sa.stats().state, IpcompState::Backoff { reason: PauseReason::Cpu, .. }));
    }

    #[test]
    fn adaptive_with_a_slow_link_compresses_text_without_push_back() {
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(IpcompParams { link_mbps: Some(50), ..params(IpcompMode::Adaptive) });
        let txt = text(1400);
        for _ in 0..4 * PROBE_PACKETS {
            let mut b = txt.clone();
            let t0 = sa.time_next().then(std::time::Instant::now);
            let (r, _, sw) = d.compress_in_place(&mut sa, &mut b, 0..1400, 4);
            if let Some(t0) = t0 {
                sa.note_cost(1400, t0.elapsed().as_nanos() as u64);
            }
            assert!(sw.is_none());
            assert!(r.len() < 1000);
        }
        assert_eq!(sa.stats().state, IpcompState::On);
    }

    #[test]
    fn adaptive_backs_off_on_random_and_returns_on_text() {
        let now = Instant::now();
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Adaptive));
        // The link pushes back throughout: only the data decides.
        let mut pushbacks = 0u64;
        let rnd = random(1400);
        let txt = text(1400);
        let mut switches = Vec::new();
        let mut send = |d: &mut Deflate, sa: &mut IpcompSa, data: &[u8]| {
            pushbacks += 1;
            sa.observe(now, pushbacks, None);
            let mut b = data.to_vec();
            let n = b.len();
            let (r, _, sw) = d.compress_in_place(sa, &mut b, 0..n, 4);
            if let Some(s) = sw {
                switches.push(s.state.name());
            }
            r.len()
        };
        for _ in 0..PROBE_PACKETS {
            send(&mut d, &mut sa, &rnd);
        }
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: BACKOFF_MIN, reason: PauseReason::Incompressible });
        // During the back-off nothing is compressed, even text.
        for _ in 0..BACKOFF_MIN {
            assert_eq!(send(&mut d, &mut sa, &txt), 1400);
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        // Still random: a back-off twice as long.
        for _ in 0..PROBE_PACKETS {
            send(&mut d, &mut sa, &rnd);
        }
        assert_eq!(sa.stats().state, IpcompState::Backoff { remaining: 2 * BACKOFF_MIN, reason: PauseReason::Incompressible });
        for _ in 0..2 * BACKOFF_MIN {
            send(&mut d, &mut sa, &txt);
        }
        // Text again: compressing, and a switch "on" is reported.
        for _ in 0..PROBE_PACKETS {
            assert!(send(&mut d, &mut sa, &txt) < 1000);
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        assert_eq!(switches, ["paused-incompressible", "paused-incompressible", "compressing"]);
        assert_eq!(sa.stats().switches_off, 2);
    }

    #[test]
    fn always_mode_never_backs_off() {
        let mut d = Deflate::new();
        let mut sa = IpcompSa::new(params(IpcompMode::Always));
        let rnd = random(1400);
        for _ in 0..4 * PROBE_PACKETS {
            let mut b = rnd.clone();
            let (_, _, sw) = d.compress_in_place(&mut sa, &mut b, 0..1400, 4);
            assert!(sw.is_none());
        }
        assert_eq!(sa.stats().state, IpcompState::On);
        assert_eq!(sa.stats().skipped, u64::from(4 * PROBE_PACKETS));
    }
}
