//! The ESP engine as a [`Datapath`]: what each worker thread runs.
//!
//! **Why here.** `esparto-esp` is the ESP engine without I/O (it works in
//! the caller's buffers, with the time passed in), `esparto-io` drives
//! sockets, the TUN device and worker threads and knows no protocol. This
//! module is the glue between the two, as the `quinn` crate is between
//! `quinn-proto` and `quinn-udp`: it turns the I/O layer's batches into
//! the engine's calls, and the engine's results into datagrams, packets for
//! the TUN, events and statistics for the control thread. In the engine
//! it would make the sans-IO crate depend on the syscall crate; in the I/O
//! crate it would make the packet path run io → esp → io. The daemon is its one
//! user. The rule that steers inbound ESP to the worker holding its SA
//! lives here too ([`steering`]): the I/O layer runs a steering program
//! built from where this module says the SPI lies.
//!
//! Outbound, every packet read from the worker's TUN queue is encapsulated
//! in place in its read slot (the slot has headroom for the ESP header and
//! IV and tailroom for padding and ICV), and the slot itself is swapped
//! into the UDP send batch ([`TxBatch::push_from_rx`], no copy), which
//! leaves as `UDP_SEGMENT` super-packets. Inbound, every
//! datagram of a GRO batch is classified (RFC 3948: NAT keepalive, IKE
//! behind the non-ESP marker, or ESP), ESP is decrypted in place in the
//! receive slot and the inner packet copied once into the TUN write batch.
//!
//! A packet too big for its SA (the TUN MTU already covers the common case,
//! so this is the rare SA with more overhead, or a peer with a smaller path
//! MTU) is answered with ICMP "fragmentation needed" / ICMPv6 "packet too
//! big" written back into the TUN, rate-limited per worker (RFC 4443 §2.4 (f)).
//!
//! Everything the worker cannot deliver is counted by reason in the ESP
//! [`Worker`]'s drop counters; events (acquires, expiries) and statistics
//! snapshots go to the control thread over channels, between batches. ESP
//! with an unknown SPI is also reported, with its source, at most
//! [`UNKNOWN_SPI_REPORTS_PER_SEC`] times a second per worker: after a
//! restart it is how the IKE layer learns that a peer still sends on SAs
//! we lost.
//!
//! **A GRO train is classified datagram by datagram.** The steering
//! program saw only the train's first datagram ([`steering`]), so a
//! train may mix kinds, and each datagram is taken for what its own bytes
//! say: ESP is decrypted here (or dropped under its reason), a keepalive
//! counted, IKE handed to the control thread through the worker's bounded
//! pool ([`esparto_io::control`]: dropped and counted as `control_queue_full`
//! when the control thread is behind), anything else dropped as
//! `malformed`. A train of one ESP-looking datagram and 59 IKE ones, at any
//! rate, thus costs the worker a copy of each IKE datagram into its control
//! batch, and a second into a pool buffer while the pool lasts; it never
//! grows memory.
//!
//! Limitation: a NIC's GRO may also merge ESP-in-UDP datagrams of several
//! SAs of one peer into one train; a datagram whose SA lives on another
//! worker is then counted as `unknown_spi` here. Over veth, and with
//! senders that split GSO runs per SPI (ours do), this does not happen.
//!
//! The event channel to the control thread is bounded: when it is full the
//! datapath holds the event back and sends it at the next flush, and the
//! ESP [`Worker`] keeps the rest queued (up to its own limit, past which
//! it drops and counts them). A lost soft-expiry event would mean a
//! missed rekey, so none is dropped while there is room to wait. An
//! unknown-SPI report is only a hint: when the channel is full it is left
//! out (the packet itself is counted all the same).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use esparto_esp::{Command, DropReason, Event, PREFETCH_AHEAD, Worker, WorkerStats};
use esparto_io::batch::{RxBatch, TxBatch};
use esparto_io::link::LinkVerdict;
use esparto_io::wake::Waker;
use esparto_io::worker::{Datapath, IoStats};
use esparto_wire::espinudp::{Datagram, Kind};
use esparto_wire::icmp as too_big;
use esparto_wire::ip::IpVersion;
use esparto_wire::{ipv4, ipv6};

pub mod steering;

pub use steering::{SPI_STEERING, spi_for_worker, spi_to_worker};

/// ICMP errors a worker sends per second at most.
pub const ICMP_ERRORS_PER_SEC: u32 = 100;
/// ESP datagrams with an unknown SPI a worker reports to the control
/// thread per second at most (`Event::UnknownSpi`); the rest are only
/// counted. The IKE layer needs one per peer now and then, and a flood of
/// garbage must not become a flood of events.
pub const UNKNOWN_SPI_REPORTS_PER_SEC: u32 = 10;

/// Events all workers together may have queued for the control thread.
pub const EVENT_QUEUE: usize = 1024;

/// The bounded channel that carries every worker's events to the control
/// thread.
pub fn event_channel() -> (SyncSender<WorkerEvent>, mpsc::Receiver<WorkerEvent>) {
    mpsc::sync_channel(EVENT_QUEUE)
}

/// A message from the control thread to a worker's ESP engine.
#[derive(Debug)]
pub enum EspCommand {
    /// A data-plane change (SAs, policies).
    Esp(Command),
    /// Send a statistics snapshot back (one answer: a channel of one).
    Snapshot(SyncSender<Snapshot>),
}

/// One worker's statistics: the ESP engine's and the I/O loop's.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// SAs, packets, drops.
    pub esp: WorkerStats,
    /// TUN and UDP system calls and batching.
    pub io: IoStats,
    /// NAT keepalives received (RFC 3948 §2.3).
    pub keepalives: u64,
}

/// A message from a worker to the control thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerEvent {
    /// The worker.
    pub worker: u16,
    /// What happened.
    pub event: Event,
}

/// Where ICMP errors come from.
///
/// By default (`None`) the error's source is the offending packet's
/// destination. The error is written into the TUN, so the kernel sees it
/// arrive *from the tunnel*: a gateway address as source would be dropped
/// as a martian (a packet from outside claiming one of our own addresses),
/// while the destination routes via the TUN and passes reverse-path checks.
/// Hosts accept the error from any source: they match it by the quoted
/// packet (RFC 1191 §4, RFC 8201 §4).
#[derive(Debug, Clone, Copy, Default)]
pub struct IcmpSources {
    /// Source of ICMPv4 errors.
    pub v4: Option<Ipv4Addr>,
    /// Source of ICMPv6 errors.
    pub v6: Option<Ipv6Addr>,
}

/// One worker's ESP engine.
#[derive(Debug)]
pub struct EspDatapath {
    esp: Worker,
    events: SyncSender<WorkerEvent>,
    /// An event the full channel refused, sent first at the next flush.
    held: Option<WorkerEvent>,
    icmp: IcmpSources,
    icmp_tokens: u32,
    icmp_refill: Instant,
    /// Scratch for ICMP errors (never reallocated).
    icmp_buf: Box<[u8]>,
    /// Keepalives received (RFC 3948 §2.3; nothing to do but count).
    keepalives: u64,
    /// ICMP errors sent back into the TUN.
    icmp_sent: u64,
    /// Unknown-SPI reports left in this second, and when it began.
    unknown_spi_tokens: u32,
    unknown_spi_refill: Instant,
    /// Wakes the control thread when events were sent.
    wake: Option<Arc<Waker>>,
}

impl EspDatapath {
    /// The engine of worker `id`; `events` reaches the control thread.
    pub fn new(id: u16, events: SyncSender<WorkerEvent>, icmp: IcmpSources) -> Self {
        Self {
            esp: Worker::new(id),
            events,
            held: None,
            icmp,
            icmp_tokens: ICMP_ERRORS_PER_SEC,
            icmp_refill: Instant::now(),
            icmp_buf: vec![0u8; too_big::MAX_V6_ERROR_LEN].into_boxed_slice(),
            keepalives: 0,
            icmp_sent: 0,
            unknown_spi_tokens: UNKNOWN_SPI_REPORTS_PER_SEC,
            unknown_spi_refill: Instant::now(),
            wake: None,
        }
    }

    /// The ESP worker (for tests).
    pub fn worker(&self) -> &Worker {
        &self.esp
    }

    /// Sends queued events until the channel is full (never waits), and
    /// wakes the control thread if it sent any.
    fn flush_events(&mut self) {
        let mut sent = false;
        loop {
            let ev = match self.held.take() {
                Some(ev) => ev,
                None => match self.esp.poll_event() {
                    Some(event) => WorkerEvent { worker: self.esp.id(), event },
                    None => break,
                },
            };
            match self.events.try_send(ev) {
                Ok(()) => sent = true,
                Err(TrySendError::Full(ev)) => {
                    self.held = Some(ev);
                    break;
                }
                // The control thread gone means we are shutting down.
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
        if sent {
            if let Some(w) = &self.wake {
                w.wake();
            }
        }
    }

    /// Wakes the control thread with `wake` whenever events were sent: it
    /// acts on them at once instead of at its next timer.
    pub fn with_waker(mut self, wake: Arc<Waker>) -> Self {
        self.wake = Some(wake);
        self
    }

    /// Tells the control thread about ESP from `peer` with an unknown SPI,
    /// within the rate limit.
    fn unknown_spi(&mut self, now: Instant, peer: SocketAddr, spi: u32) {
        if now.duration_since(self.unknown_spi_refill) >= Duration::from_secs(1) {
            self.unknown_spi_tokens = UNKNOWN_SPI_REPORTS_PER_SEC;
            self.unknown_spi_refill = now;
        }
        if self.unknown_spi_tokens == 0 {
            return;
        }
        self.unknown_spi_tokens -= 1;
        let event = Event::UnknownSpi { spi, peer };
        // A hint, not a duty: with the channel full (or the control thread
        // gone) it is left out, and the next one comes within a second.
        let _ = self.events.try_send(WorkerEvent { worker: self.esp.id(), event });
    }

    /// Writes an ICMP error for `offending` into `to_tun`, within the rate limit.
    fn too_big(&mut self, now: Instant, offending: &[u8], mtu: u16, to_tun: &mut TxBatch) {
        if now.duration_since(self.icmp_refill) >= Duration::from_secs(1) {
            self.icmp_tokens = ICMP_ERRORS_PER_SEC;
            self.icmp_refill = now;
        }
        if self.icmp_tokens == 0 {
            return;
        }
        let n = match IpVersion::of(offending) {
            Ok(IpVersion::V4) => {
                // RFC 1191: only a packet with DF set asks for PMTU discovery;
                // without DF the sender gets nothing (and the packet is
                // dropped, counted as too_big).
                match ipv4::Packet::new_checked(offending) {
                    Ok(ip) if ip.dont_frag() => {
                        let src = self.icmp.v4.unwrap_or_else(|| ip.dst_addr());
                        too_big::frag_needed_v4(offending, mtu, src, &mut self.icmp_buf).ok()
                    }
                    _ => None,
                }
            }
            Ok(IpVersion::V6) => {
                let ip = ipv6::Packet::new_checked(offending).ok();
                let src = self.icmp.v6.or_else(|| ip.map(|ip| ip.dst_addr()));
                src.and_then(|src| too_big::packet_too_big_v6(offending, u32::from(mtu), src, &mut self.icmp_buf).ok())
            }
            Err(_) => None,
        };
        if let Some(n) = n {
            if to_tun.push(None, &self.icmp_buf[..n]).is_ok() {
                self.icmp_tokens -= 1;
                self.icmp_sent += 1;
            }
        }
    }
}

impl Datapath for EspDatapath {
    type Command = EspCommand;

    fn on_command(&mut self, _now: Instant, cmd: EspCommand, io: &IoStats) {
        match cmd {
            EspCommand::Esp(c) => {
                // A barrier's answer (the control thread waits for it) goes
                // out at once, not with the next batch.
                let barrier = matches!(c, Command::Barrier(_));
                self.esp.apply(c);
                if barrier {
                    self.flush_events();
                }
            }
            EspCommand::Snapshot(reply) => {
                // Room for one answer; nobody left to read it is fine.
                let _ = reply.try_send(Snapshot {
                    esp: self.esp.stats(),
                    io: io.clone(),
                    keepalives: self.keepalives,
                });
            }
        }
    }

    fn outbound(
        &mut self,
        now: Instant,
        pkts: &mut RxBatch,
        from: usize,
        out: &mut TxBatch,
        to_tun: &mut TxBatch,
    ) -> usize {
        // No outbound prefetch: finding a packet's SA ahead of time is the
        // flow lookup `encapsulate` does again, and measured it gained
        // nothing (`esparto bench dataplane --no-prefetch`).
        for i in from..pkts.len() {
            if out.is_full() || to_tun.is_full() {
                self.flush_events();
                return i;
            }
            let Some((slot, inner)) = pkts.slot_mut(i) else {
                // An entry outside its slot: a batch bug, counted anyway.
                self.esp.count_drop(DropReason::Malformed);
                continue;
            };
            match self.esp.encapsulate(now, slot, inner.clone()) {
                Ok(e) => {
                    // Built in place in the read slot: the slot itself moves
                    // to the send batch (no copy).
                    if out.push_from_rx(Some(e.peer), pkts, i, e.esp).is_err() {
                        // The send batch is sized for a full read batch, so
                        // this is a configuration bug; count it all the same.
                        self.esp.count_drop(DropReason::Malformed);
                    }
                }
                Err(d) if d.reason == DropReason::TooBig => self.too_big(now, &slot[inner], d.mtu, to_tun),
                Err(_) => {}
            }
        }
        self.flush_events();
        pkts.len()
    }

    fn inbound(
        &mut self,
        now: Instant,
        dgrams: &mut RxBatch,
        from: usize,
        to_tun: &mut TxBatch,
        to_control: &mut TxBatch,
    ) -> usize {
        for i in from..dgrams.len().min(from + PREFETCH_AHEAD) {
            prefetch_inbound(&self.esp, dgrams, i);
        }
        for i in from..dgrams.len() {
            if to_tun.is_full() || to_control.is_full() {
                self.flush_events();
                return i;
            }
            prefetch_inbound(&self.esp, dgrams, i + PREFETCH_AHEAD);
            let peer = dgrams.peer(i);
            let Some((slot, range)) = dgrams.slot_mut(i) else {
                self.esp.count_drop(DropReason::Malformed);
                continue;
            };
            // Each datagram by its own bytes, whatever the train's first
            // one was (see the module essay).
            match Datagram::classify(&slot[range.clone()]) {
                Ok(Kind::Esp(esp)) => {
                    let spi = esp.spi();
                    // Every failure, a dummy packet included, is counted
                    // by the ESP worker under its reason.
                    // In place, or (IPComp) decompressed in the worker's
                    // own buffer: the datagrams after this one in the slot
                    // are left alone.
                    match self.esp.decapsulate_packet(now, slot, range) {
                        Ok(inner) => {
                            if to_tun.push(None, inner).is_err() {
                                self.esp.count_drop(DropReason::Malformed);
                            }
                        }
                        Err(DropReason::UnknownSpi) => {
                            if let Some(peer) = peer {
                                self.unknown_spi(now, peer, spi);
                            }
                        }
                        Err(_) => {}
                    }
                }
                Ok(Kind::Ike(_)) => {
                    // The whole datagram, marker included: the IKE thread
                    // strips it, as it does for datagrams on its own socket.
                    // `to_control` has a free slot (checked above) as large
                    // as any datagram, so this cannot fail; if it did, the
                    // datagram would not fit anywhere.
                    if to_control.push(peer, &slot[range]).is_err() {
                        self.esp.count_drop(DropReason::Malformed);
                    }
                }
                Ok(Kind::NatKeepalive) => self.keepalives += 1,
                Err(_) => self.esp.count_drop(DropReason::Malformed),
            }
        }
        self.flush_events();
        dgrams.len()
    }

    fn on_send_pushback(&mut self) {
        self.esp.note_send_pushback();
    }

    fn wants_link_verdicts(&self) -> bool {
        self.esp.wants_link()
    }

    fn on_link(&mut self, verdict: LinkVerdict) {
        self.esp.note_link(match verdict {
            LinkVerdict::Saturated { bytes_per_sec } => Some(bytes_per_sec),
            LinkVerdict::KeepsUp => None,
        });
    }

    fn on_tick(&mut self, now: Instant) {
        self.esp.tick(now);
        self.flush_events();
    }
}

/// Asks for the inbound SA state of datagram `i` (if it is ESP) ahead of use.
#[inline]
fn prefetch_inbound(esp: &Worker, dgrams: &RxBatch, i: usize) {
    if let Some(p) = dgrams.packet(i) {
        esp.prefetch_inbound(p, esparto_io::cpu::prefetch);
    }
}

#[cfg(test)]
mod tests;
