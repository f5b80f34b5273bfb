//! A model of the daemon and its data plane, driven by the endpoint's
//! events exactly as `event.rs` tells the daemon to: install the inbound
//! SA of a new Child SA at once; send on it at once if `outbound_active`,
//! else when `ChildSaOutboundActive` names it; a rekeyed SA takes its
//! predecessor's slot; remove on `ChildSaDeleted`. Packets carry (SPI,
//! sequence number, key id); the receiver checks it holds that SPI with
//! that key and has not seen that sequence number on it before.
//!
//! `ignore_deferral` makes the model switch outbound at once on every new
//! SA — what a daemon that ignored `outbound_active` would do — so a test
//! can show that the deferral is what prevents loss.

use super::Net;
use esparto_ike::Event;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Where an outbound SA is used: (child, worker); `None` = fallback.
type Slot = (String, Option<u16>);

#[derive(Debug, Clone)]
struct Out {
    spi: u32,
    key: Vec<u8>,
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct DataPacket {
    at: Instant,
    to: usize,
    spi: u32,
    seq: u64,
    key: u64,
}

/// One side's data plane.
#[derive(Debug, Default)]
pub struct Dp {
    inbound: HashMap<u32, (u64, HashSet<u64>)>,
    outbound: HashMap<Slot, Out>,
    deferred: HashMap<u32, (Slot, Out)>,
    slot_of: HashMap<u32, Slot>,
    keys: HashMap<Vec<u8>, u64>,
    seen_events: usize,
    /// Switch outbound at once, whatever `outbound_active` says.
    pub ignore_deferral: bool,
    /// Packets received on a known SA with the right key, first time.
    pub received: u64,
    /// Packets for an SPI this side does not hold.
    pub no_sa: u64,
    /// Packets whose key is not the one this side holds for the SPI.
    pub bad_key: u64,
    /// A sequence number seen twice on one SA.
    pub replayed: u64,
    /// Times there was nothing to send on.
    pub no_outbound: u64,
    /// Packets sent.
    pub sent: u64,
    /// Every inbound key ever installed (all must differ).
    pub installed: u64,
}

impl Dp {
    fn key_id(&mut self, key: &[u8]) -> u64 {
        let n = self.keys.len() as u64;
        *self.keys.entry(key.to_vec()).or_insert(n)
    }

    /// Apply the events peer `i` produced since the last call.
    pub fn apply(&mut self, events: &[Event]) {
        for e in &events[self.seen_events..] {
            match e {
                Event::ChildSaEstablished(c) => {
                    let slot = match c.rekeys.and_then(|old| self.slot_of.get(&old).cloned()) {
                        Some(s) => s,
                        None if c.per_resource && c.resource.is_none() => {
                            (format!("{}-peer-{:08x}", c.child, c.inbound_spi), None)
                        }
                        None => (c.child.to_string(), c.resource),
                    };
                    let kin = self.key_id(c.inbound_key.as_slice());
                    let kout = self.key_id(c.outbound_key.as_slice());
                    assert!(
                        self.inbound
                            .insert(c.inbound_spi, (kin, HashSet::new()))
                            .is_none(),
                        "inbound SPI {:08x} installed twice",
                        c.inbound_spi
                    );
                    self.installed += 1;
                    let _ = kout;
                    let out = Out {
                        spi: c.outbound_spi,
                        key: c.outbound_key.as_slice().to_vec(),
                        seq: 1,
                    };
                    self.slot_of.insert(c.inbound_spi, slot.clone());
                    if c.outbound_active || self.ignore_deferral {
                        self.outbound.insert(slot, out);
                    } else {
                        self.deferred.insert(c.inbound_spi, (slot, out));
                    }
                }
                Event::ChildSaOutboundActive { .. } if self.ignore_deferral => {}
                Event::ChildSaOutboundActive { inbound_spi, .. } => {
                    let (slot, out) = self
                        .deferred
                        .remove(inbound_spi)
                        .expect("ChildSaOutboundActive for an SA announced with outbound_active");
                    self.outbound.insert(slot, out);
                }
                Event::ChildSaDeleted {
                    inbound_spi,
                    outbound_spi,
                    ..
                } => {
                    self.inbound.remove(inbound_spi);
                    self.deferred.remove(inbound_spi);
                    if let Some(slot) = self.slot_of.remove(inbound_spi) {
                        if self
                            .outbound
                            .get(&slot)
                            .is_some_and(|o| o.spi == *outbound_spi)
                        {
                            self.outbound.remove(&slot);
                        }
                    }
                }
                _ => {}
            }
        }
        self.seen_events = events.len();
    }

    fn send(
        &mut self,
        slot: &Slot,
        now: Instant,
        to: usize,
        latency: Duration,
    ) -> Option<DataPacket> {
        let Some(o) = self.outbound.get_mut(slot) else {
            self.no_outbound += 1;
            return None;
        };
        let seq = o.seq;
        o.seq += 1;
        let (spi, key) = (o.spi, o.key.clone());
        self.sent += 1;
        Some(DataPacket {
            at: now + latency,
            to,
            spi,
            seq,
            key: self.key_id_of(&key),
        })
    }

    fn key_id_of(&mut self, key: &[u8]) -> u64 {
        self.key_id(key)
    }

    fn receive(&mut self, p: &DataPacket, key_of: &dyn Fn(u64) -> Vec<u8>) {
        let Some((kin, seen)) = self.inbound.get_mut(&p.spi) else {
            self.no_sa += 1;
            return;
        };
        let k = key_of(p.key);
        let mine = self
            .keys
            .iter()
            .find(|(_, id)| **id == *kin)
            .map(|(k, _)| k.clone());
        if mine.as_deref() != Some(&k[..]) {
            self.bad_key += 1;
            return;
        }
        if !seen.insert(p.seq) {
            self.replayed += 1;
            return;
        }
        self.received += 1;
    }

    fn key_bytes(&self, id: u64) -> Vec<u8> {
        self.keys
            .iter()
            .find(|(_, i)| **i == id)
            .map(|(k, _)| k.clone())
            .unwrap_or_default()
    }
}

/// Run the network for `d`, both sides sending one packet on `child`'s
/// fallback slot every `every`, data taking `latency` (less than IKE's, so
/// data can overtake an IKE response, the race deferral exists for).
pub fn run_with_traffic(
    net: &mut Net,
    dps: &mut [Dp; 2],
    child: &str,
    d: Duration,
    every: Duration,
    latency: Duration,
) {
    let end = net.now + d;
    let mut flight: Vec<DataPacket> = Vec::new();
    let slot: Slot = (child.to_string(), None);
    while net.now < end {
        net.run_for(every);
        for (i, dp) in dps.iter_mut().enumerate() {
            dp.apply(&net.peers[i].events);
        }
        let now = net.now;
        flight.sort_by_key(|p| p.at);
        while flight.first().is_some_and(|p| p.at <= now) {
            let p = flight.remove(0);
            let (a, b) = dps.split_at_mut(1);
            let (rx, tx) = if p.to == 0 {
                (&mut a[0], &b[0])
            } else {
                (&mut b[0], &a[0])
            };
            let key_of = |id| tx.key_bytes(id);
            rx.receive(&p, &key_of);
        }
        for (i, dp) in dps.iter_mut().enumerate() {
            if let Some(p) = dp.send(&slot, now, 1 - i, latency) {
                flight.push(p);
            }
        }
    }
    // Drain what is still in flight.
    net.run_for(latency * 2);
    for (i, dp) in dps.iter_mut().enumerate() {
        dp.apply(&net.peers[i].events);
    }
    for p in std::mem::take(&mut flight) {
        let (a, b) = dps.split_at_mut(1);
        let (rx, tx) = if p.to == 0 {
            (&mut a[0], &b[0])
        } else {
            (&mut b[0], &a[0])
        };
        let key_of = |id| tx.key_bytes(id);
        rx.receive(&p, &key_of);
    }
}
