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
//! **A GRO train is classified datagram by datagram.** The steering
//! program saw only the train's first datagram ([`crate::steer`]), so a
//! train may mix kinds, and each datagram is taken for what its own bytes
//! say: ESP is decrypted here (or dropped under its reason), a keepalive
//! counted, IKE handed to the control thread through the worker's bounded
//! pool ([`crate::control`]: dropped and counted as `control_queue_full`
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
use std::sync::mpsc::{self, SyncSender, TrySendError};
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
    pub io: WorkerReport,
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
        }
    }

    /// The ESP worker (for tests).
    pub fn worker(&self) -> &Worker {
        &self.esp
    }

    /// Sends queued events until the channel is full (never waits).
    fn flush_events(&mut self) {
        loop {
            let ev = match self.held.take() {
                Some(ev) => ev,
                None => match self.esp.poll_event() {
                    Some(event) => WorkerEvent { worker: self.esp.id(), event },
                    None => return,
                },
            };
            match self.events.try_send(ev) {
                Ok(()) => {}
                Err(TrySendError::Full(ev)) => {
                    self.held = Some(ev);
                    return;
                }
                // The control thread gone means we are shutting down.
                Err(TrySendError::Disconnected(_)) => {}
            }
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
        for i in from..dgrams.len() {
            if to_tun.is_full() || to_control.is_full() {
                self.flush_events();
                return i;
            }
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
                    match self.esp.decapsulate(now, slot, range) {
                        Ok(inner) => {
                            if to_tun.push(None, &slot[inner]).is_err() {
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
    use esparto_esp::{EspSuite, InboundSa, Lifetime, OutboundSa, SaConfig, SecretBytes, HEADROOM, TAILROOM};

    const SPI: u32 = 0x0100_0001;

    fn config(spi: u32, lifetime: Lifetime) -> SaConfig {
        SaConfig {
            spi,
            suite: EspSuite::Aes256Gcm16,
            keymat: SecretBytes::from_slice(&[7u8; 36]),
            esn: false,
            replay_window: 64,
            lifetime,
            local_ts: vec!["10.2.0.0/16".parse().unwrap()],
            remote_ts: vec!["10.1.0.0/16".parse().unwrap()],
            peer: "192.0.2.1:4500".parse().unwrap(),
            path_mtu: 1500,
        }
    }

    /// An IPv4/UDP packet 10.1.0.1 → 10.2.0.1.
    fn inner(len: usize) -> Vec<u8> {
        let total = 28 + len;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 1, 0, 1]);
        p[16..20].copy_from_slice(&[10, 2, 0, 1]);
        p[24..26].copy_from_slice(&((8 + len) as u16).to_be_bytes());
        p
    }

    fn seal(out: &mut OutboundSa, next_header: u8, inner: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HEADROOM + inner.len() + TAILROOM];
        buf[HEADROOM..HEADROOM + inner.len()].copy_from_slice(inner);
        let r = out.encapsulate(Instant::now(), &mut buf, HEADROOM..HEADROOM + inner.len(), next_header, &mut None).unwrap();
        buf[r].to_vec()
    }

    /// One receive slot holding `dgrams` back to back, one entry each: what
    /// a UDP GRO read of a mixed train looks like.
    fn train(dgrams: &[Vec<u8>]) -> RxBatch {
        let mut b = RxBatch::new(1, 0, 4096, 64);
        let peer = Some("192.0.2.1:4500".parse().unwrap());
        let mut at = 0;
        for d in dgrams {
            b.slots[0].storage_mut()[at..at + d.len()].copy_from_slice(d);
            b.entries.push(RxEntry { slot: 0, start: at as u32, len: d.len() as u32, peer });
            at += d.len();
        }
        b
    }

    fn datapath(events: SyncSender<WorkerEvent>) -> EspDatapath {
        EspDatapath::new(0, events, IcmpSources::default())
    }

    #[test]
    fn a_mixed_gro_train_is_classified_datagram_by_datagram() {
        let (tx, _rx) = event_channel();
        let mut dp = datapath(tx);
        let now = Instant::now();
        let cfg = config(SPI, Lifetime::default());
        dp.on_command(now, EspCommand::Esp(Command::AddInbound(Box::new(InboundSa::new(&cfg, now).unwrap()))), &WorkerReport::default());
        let mut out = OutboundSa::owned(&cfg, now).unwrap();
        let mut ike = vec![0u8; 4];
        ike.extend_from_slice(&[0x11; 28]);
        let mut other_spi = seal(&mut out, 4, &inner(10));
        other_spi[..4].copy_from_slice(&0x0200_0002u32.to_be_bytes());
        let mut batch = train(&[
            seal(&mut out, 4, &inner(10)),
            ike.clone(),
            seal(&mut out, 59, &[0u8; 16]), // RFC 4303 §2.6: a dummy packet
            ike.clone(),
            other_spi,                       // an SA this worker does not own
            vec![1, 2, 3],                   // too short for anything
            vec![0xff],                      // RFC 3948 §2.3: NAT keepalive
        ]);
        let mut to_tun = TxBatch::new(16, 16, 2048);
        let mut to_control = TxBatch::new(16, 0, 2048);
        assert_eq!(dp.inbound(now, &mut batch, 0, &mut to_tun, &mut to_control), 7);
        assert_eq!(to_tun.len(), 1);
        assert_eq!(to_tun.packet(0).unwrap(), &inner(10)[..]);
        assert_eq!(to_control.len(), 2);
        assert_eq!(to_control.packet(1).unwrap(), &ike[..], "marker included, for the IKE thread");
        assert_eq!(to_control.dst(0), Some("192.0.2.1:4500".parse().unwrap()));
        assert_eq!(dp.keepalives, 1);
        let d = dp.worker().drops();
        assert_eq!(
            (d.get(DropReason::Dummy), d.get(DropReason::UnknownSpi), d.get(DropReason::Malformed), d.total()),
            (1, 1, 1, 3)
        );
    }

    #[test]
    fn a_full_control_batch_stops_the_pass_and_loses_nothing() {
        let (tx, _rx) = event_channel();
        let mut dp = datapath(tx);
        let ike: Vec<Vec<u8>> = (0..5u8).map(|i| vec![0, 0, 0, 0, i, i, i, i]).collect();
        let mut batch = train(&ike);
        let mut to_tun = TxBatch::new(4, 16, 2048);
        let mut to_control = TxBatch::new(2, 0, 2048);
        let now = Instant::now();
        // The worker loop forwards what was queued and calls again from
        // where the datapath stopped.
        let mut from = 0;
        let mut seen = Vec::new();
        while from < batch.len() {
            to_control.clear();
            from = dp.inbound(now, &mut batch, from, &mut to_tun, &mut to_control);
            seen.extend((0..to_control.len()).map(|i| to_control.packet(i).unwrap()[4]));
        }
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        assert_eq!(dp.worker().drops().total(), 0);
    }

    #[test]
    fn events_wait_for_room_in_the_channel_and_none_is_lost() {
        let (tx, rx) = mpsc::sync_channel(1);
        let mut dp = datapath(tx);
        let now = Instant::now();
        // Three inbound SAs whose soft time limit passes at the first tick.
        let lifetime = Lifetime { soft_time: Some(Duration::from_secs(1)), ..Lifetime::default() };
        for spi in [0x100, 0x200, 0x300] {
            let sa = InboundSa::new(&config(spi, lifetime), now).unwrap();
            dp.on_command(now, EspCommand::Esp(Command::AddInbound(Box::new(sa))), &WorkerReport::default());
        }
        let later = now + Duration::from_secs(2);
        dp.on_tick(later);
        let mut got = Vec::new();
        for _ in 0..3 {
            // One fits the channel at a time; the others wait in the worker.
            let ev = rx.try_recv().unwrap();
            assert!(rx.try_recv().is_err(), "the channel holds one");
            got.push(ev.event);
            dp.on_tick(later);
        }
        assert!(rx.try_recv().is_err());
        let mut spis: Vec<u32> = got
            .iter()
            .map(|e| match e {
                Event::Expire { spi, .. } => *spi,
                other => panic!("{other:?}"),
            })
            .collect();
        spis.sort_unstable();
        assert_eq!(spis, [0x100, 0x200, 0x300]);
        assert_eq!(dp.worker().stats().events_dropped, 0);
    }

    #[test]
    fn a_snapshot_carries_keepalives_and_never_waits() {
        let (tx, _rx) = event_channel();
        let mut dp = datapath(tx);
        let now = Instant::now();
        let mut batch = train(&[vec![0xff], vec![0xff]]);
        dp.inbound(now, &mut batch, 0, &mut TxBatch::new(2, 16, 64), &mut TxBatch::new(2, 0, 64));
        let (reply, answers) = mpsc::sync_channel(1);
        dp.on_command(now, EspCommand::Snapshot(reply.clone()), &WorkerReport::default());
        // A second request while the first answer is unread: dropped, not a wait.
        dp.on_command(now, EspCommand::Snapshot(reply), &WorkerReport::default());
        let s = answers.try_recv().unwrap();
        assert_eq!((s.keepalives, s.esp.worker), (2, 0));
        assert!(answers.try_recv().is_err());
    }

    #[test]
    fn unknown_spis_are_reported_with_their_source_within_the_rate_limit() {
        let (tx, rx) = mpsc::sync_channel(64);
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
