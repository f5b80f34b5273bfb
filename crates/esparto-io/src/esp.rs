//! The ESP engine as a [`Datapath`]: what each worker thread runs.
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
//! Limitation: a NIC's hardware GRO may merge ESP-in-UDP datagrams of
//! several SAs of one peer into one buffer, which the SPI-steering program
//! sees once; a datagram whose SA lives on another worker is then counted
//! as `unknown_spi` here. Over veth, and with senders that split GSO runs
//! per SPI (ours do), this does not happen.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use esparto_esp::{Command, DropReason, Event, Worker, WorkerStats};
use esparto_wire::espinudp::{Datagram, Kind};
use esparto_wire::icmp as too_big;

use crate::batch::{RxBatch, TxBatch};
use crate::worker::{Datapath, WorkerReport};

/// ICMP errors a worker sends per second at most.
pub const ICMP_ERRORS_PER_SEC: u32 = 100;
/// ESP datagrams with an unknown SPI a worker reports to the control
/// thread per second at most (`Event::UnknownSpi`); the rest are only
/// counted. The IKE layer needs one per peer now and then, and a flood of
/// garbage must not become a flood of events.
pub const UNKNOWN_SPI_REPORTS_PER_SEC: u32 = 10;

/// A message from the control thread to a worker's ESP engine.
#[derive(Debug)]
pub enum EspCommand {
    /// A data-plane change (SAs, policies).
    Esp(Command),
    /// Send a statistics snapshot back.
    Snapshot(mpsc::Sender<Snapshot>),
}

/// One worker's statistics: the ESP engine's and the I/O loop's.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// SAs, packets, drops.
    pub esp: WorkerStats,
    /// TUN and UDP system calls and batching.
    pub io: WorkerReport,
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
    events: mpsc::Sender<WorkerEvent>,
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
}

impl EspDatapath {
    /// The engine of worker `id`; `events` reaches the control thread.
    pub fn new(id: u16, events: mpsc::Sender<WorkerEvent>, icmp: IcmpSources) -> Self {
        Self {
            esp: Worker::new(id),
            events,
            icmp,
            icmp_tokens: ICMP_ERRORS_PER_SEC,
            icmp_refill: Instant::now(),
            icmp_buf: vec![0u8; too_big::MAX_V6_ERROR_LEN].into_boxed_slice(),
            keepalives: 0,
            icmp_sent: 0,
            unknown_spi_tokens: UNKNOWN_SPI_REPORTS_PER_SEC,
            unknown_spi_refill: Instant::now(),
        }
    }

    /// The ESP worker (for tests).
    pub fn worker(&self) -> &Worker {
        &self.esp
    }

    fn flush_events(&mut self) {
        while let Some(event) = self.esp.poll_event() {
            // The control thread gone means we are shutting down.
            let _ = self.events.send(WorkerEvent { worker: self.esp.id(), event });
        }
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
        // The control thread gone means we are shutting down.
        let _ = self.events.send(WorkerEvent { worker: self.esp.id(), event });
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
        let n = match offending.first().map(|b| b >> 4) {
            Some(4) => {
                // RFC 1191: only a packet with DF set asks for PMTU discovery;
                // without DF the sender gets nothing (and the packet is
                // dropped, counted as too_big).
                let df = offending.get(6).is_some_and(|b| b & 0x40 != 0);
                let src = self.icmp.v4.or_else(|| dst_v4(offending));
                match (df, src) {
                    (true, Some(src)) => too_big::frag_needed_v4(offending, mtu, src, &mut self.icmp_buf).ok(),
                    _ => None,
                }
            }
            Some(6) => {
                let src = self.icmp.v6.or_else(|| dst_v6(offending));
                src.and_then(|src| too_big::packet_too_big_v6(offending, u32::from(mtu), src, &mut self.icmp_buf).ok())
            }
            _ => None,
        };
        if let Some(n) = n {
            if to_tun.push(None, &self.icmp_buf[..n]).is_ok() {
                self.icmp_tokens -= 1;
                self.icmp_sent += 1;
            }
        }
    }
}

/// The destination of an IPv4 packet: the default ICMP source (see
/// [`IcmpSources`]).
fn dst_v4(p: &[u8]) -> Option<Ipv4Addr> {
    let b: [u8; 4] = p.get(16..20)?.try_into().ok()?;
    Some(Ipv4Addr::from(b))
}

fn dst_v6(p: &[u8]) -> Option<Ipv6Addr> {
    let b: [u8; 16] = p.get(24..40)?.try_into().ok()?;
    Some(Ipv6Addr::from(b))
}

impl Datapath for EspDatapath {
    type Command = EspCommand;

    fn on_command(&mut self, _now: Instant, cmd: EspCommand, io: &WorkerReport) {
        match cmd {
            EspCommand::Esp(c) => self.esp.apply(c),
            EspCommand::Snapshot(reply) => {
                let _ = reply.send(Snapshot {
                    esp: self.esp.stats(),
                    io: io.clone(),
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
        for i in from..pkts.len() {
            if out.is_full() || to_tun.is_full() {
                self.flush_events();
                return i;
            }
            let Some((slot, inner)) = pkts.slot_mut(i) else { continue };
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
        for i in from..dgrams.len() {
            if to_tun.is_full() || to_control.is_full() {
                self.flush_events();
                return i;
            }
            let peer = dgrams.peer(i);
            let Some((slot, range)) = dgrams.slot_mut(i) else { continue };
            match Datagram::classify(&slot[range.clone()]) {
                Ok(Kind::Esp(esp)) => {
                    let spi = esp.spi();
                    match self.esp.decapsulate(now, slot, range) {
                        Ok(inner) => {
                            if !inner.is_empty() && to_tun.push(None, &slot[inner]).is_err() {
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
                    let _ = to_control.push(peer, &slot[range]);
                }
                Ok(Kind::NatKeepalive) => self.keepalives += 1,
                Err(_) => self.esp.count_drop(DropReason::Malformed),
            }
        }
        self.flush_events();
        dgrams.len()
    }

    fn on_tick(&mut self, now: Instant) {
        self.esp.tick(now);
        self.flush_events();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::batch::RxEntry;

    #[test]
    fn unknown_spis_are_reported_with_their_source_within_the_rate_limit() {
        let (tx, rx) = mpsc::channel();
        let mut dp = EspDatapath::new(3, tx, IcmpSources::default());
        let peer: SocketAddr = "192.0.2.2:4500".parse().unwrap();
        let n = 2 * UNKNOWN_SPI_REPORTS_PER_SEC as usize;
        let mut dgrams = RxBatch::new(1, 0, 64 * (n + 1), n + 1);
        for i in 0..=n {
            let off = 64 * i;
            let esp = &mut dgrams.slots[0].storage_mut()[off..off + 64];
            esp[..4].copy_from_slice(&0xc0de_0100_u32.to_be_bytes());
            esp[4..8].copy_from_slice(&1u32.to_be_bytes());
            // The last one arrived without a known source.
            let peer = (i < n).then_some(peer);
            dgrams.entries.push(RxEntry { slot: 0, start: off as u32, len: 64, peer });
        }
        let (mut to_tun, mut to_control) = (TxBatch::new(4, 0, 64), TxBatch::new(4, 0, 64));
        let now = Instant::now();
        assert_eq!(dp.inbound(now, &mut dgrams, 0, &mut to_tun, &mut to_control), n + 1);
        let events: Vec<WorkerEvent> = rx.try_iter().collect();
        assert_eq!(events.len(), UNKNOWN_SPI_REPORTS_PER_SEC as usize, "rate-limited");
        assert!(events.iter().all(|e| e.worker == 3 && e.event == Event::UnknownSpi { spi: 0xc0de_0100, peer }));
        assert_eq!(dp.worker().stats().drops.get(DropReason::UnknownSpi), n as u64 + 1, "all counted");
        // A second later the worker reports again.
        dgrams.entries.truncate(1);
        dp.inbound(now + Duration::from_secs(1), &mut dgrams, 0, &mut to_tun, &mut to_control);
        assert_eq!(rx.try_iter().count(), 1);
    }
}
