//! One Child SA (an inbound and an outbound ESP SA) and the steps that
//! put it into the workers and take it out again.
//!
//! ```text
//!            install                      outbound_active
//!  (new) ───────────────► Waiting ───────────────────────► Sending
//!    │   inbound on its          (peer-initiated rekey:       │
//!    │   worker first            the peer switched)           │ replaced in its slot
//!    │                                                        ▼ (rekey, duplicate)
//!    └──────────────────────────► Sending / Idle ◄──────── Idle
//!          outbound at once        (Idle: no slot)             │
//!                                                              │ delete
//!          delete after a rekey: Lingering ── LINGER ──► gone ◄┘
//! ```
//!
//! *Sending*: the outbound SA is in its slot (the fallback on every
//! worker, a sub-SA on its worker). *Waiting*: installed inbound; the
//! outbound key is held until the peer shows it switched
//! (make-before-break, RFC 7296 §2.8). *Idle*: received on only — no free
//! slot, or a newer SA took its slot. *Lingering*: deleted after a rekey;
//! its inbound SA stays [`LINGER`](super::LINGER) for packets in flight.
//! Inbound always goes in before outbound, and an outbound SA is removed
//! only from a slot it still holds.

use std::time::Instant;

use anyhow::{Result, anyhow};
use esparto_crypto::{EspSuite, KeyLengthError, SecretBytes};
use esparto_esp::{Command, InboundSa, OutboundSa, SaConfig, SharedSeq};
use esparto_esp::{Direction, IpcompParams};
use esparto_ike::IkeSaId;
use esparto_ike::ipcomp::IpcompCpis;

use super::child::{Role, Slot};
use super::{ChildId, Effect, SaId, Table};
use crate::daemon::seqstate::Claimed;

/// What the outbound half of a Child SA is doing.
#[derive(Debug)]
pub(crate) enum Out {
    /// In its slot.
    Sending,
    /// Waiting for the peer to switch to it; the key to install it with.
    Waiting(SecretBytes),
    /// A new SA we answered for, waiting for the peer's first packet on
    /// its inbound half (the proof that the peer has installed it) before
    /// we send on it; the key to install it with.
    Confirming(SecretBytes),
    /// Not sent on.
    Idle,
}

/// One Child SA.
#[derive(Debug)]
pub(crate) struct ChildSa {
    /// Its child.
    pub(crate) child: ChildId,
    /// Its IKE SA (`None`: statically keyed).
    pub(crate) ike_sa: Option<IkeSaId>,
    /// SPI we receive on.
    pub(crate) in_spi: u32,
    /// SPI we send on.
    pub(crate) out_spi: u32,
    /// Algorithms.
    pub(crate) suite: EspSuite,
    /// Extended sequence numbers.
    pub(crate) esn: bool,
    /// The worker its inbound SPI steers to.
    pub(crate) in_worker: u16,
    /// Its place in the group.
    pub(crate) slot: Slot,
    /// What it is to the group.
    pub(crate) role: Role,
    /// Its outbound half.
    pub(crate) out: Out,
    /// Installed at.
    pub(crate) since: Instant,
    /// A rekey was asked for (the data plane's soft limit).
    pub(crate) rekeying: bool,
    /// Its deletion was asked for (the data plane's hard limit).
    pub(crate) expired: bool,
    /// Deleted after a rekey: its inbound SA goes at this time.
    pub(crate) linger: Option<Instant>,
    /// IPComp's CPIs, when the SA has it.
    pub(crate) ipcomp: Option<IpcompCpis>,
}

impl ChildSa {
    /// The worker that sends on it (`None`: every worker, or nobody).
    pub(crate) fn out_worker(&self) -> Option<u16> {
        match (self.slot, &self.out) {
            (Slot::Worker(k), Out::Sending) => Some(k),
            _ => None,
        }
    }
}

pub(super) fn key_err(e: KeyLengthError) -> anyhow::Error {
    anyhow!("key length: expected {} bytes, got {}", e.expected, e.got)
}

impl Table {
    /// The data plane's configuration of one direction of an SA of `child`.
    pub(super) fn sa_config(
        &self,
        child: ChildId,
        spi: u32,
        suite: EspSuite,
        esn: bool,
        key: &SecretBytes,
    ) -> Result<SaConfig> {
        let c = &self.children[child.0];
        let g = c.group.as_ref().ok_or_else(|| anyhow!("{} has no group", c.name))?;
        Ok(SaConfig {
            spi,
            suite,
            keymat: SecretBytes::from_slice(key.as_slice()),
            esn,
            replay_window: c.settings.replay_window,
            lifetime: c.settings.lifetime,
            local_ts: g.local_ts.clone(),
            remote_ts: g.remote_ts.clone(),
            peer: g.peer,
            path_mtu: self.path_mtu,
        })
    }

    /// Adds `sa` to the table and its inbound half to its worker (built
    /// before anything changes, so a bad key leaves nothing behind).
    pub(super) fn add_sa(&mut self, now: Instant, sa: ChildSa, in_key: &SecretBytes) -> Result<SaId> {
        let cfg = self.sa_config(sa.child, sa.in_spi, sa.suite, sa.esn, in_key)?;
        let mut inbound = InboundSa::new(&cfg, now).map_err(key_err)?;
        let (child, ike_sa, in_spi, out_spi, worker) = (sa.child, sa.ike_sa, sa.in_spi, sa.out_spi, sa.in_worker);
        self.last_packets.insert(in_spi, inbound.share_last_used());
        let id = SaId(self.sas.insert(sa));
        self.by_in.insert(in_spi, id);
        self.by_out.entry(out_spi).or_default().push(id);
        self.children[child.0].sas.push(id);
        if let Some(r) = ike_sa.and_then(|i| self.ike_sas.get_mut(&i)) {
            r.sas.push(id);
        }
        if let Some(p) = self.ipcomp_params(id, Direction::Inbound) {
            // Before the SA, so that its first packet finds it.
            self.emit(Effect::Worker(worker, Command::SetIpcomp(in_spi, Direction::Inbound, Some(p))));
        }
        self.emit(Effect::Worker(worker, Command::AddInbound(Box::new(inbound))));
        Ok(id)
    }

    /// The data plane's IPComp for one direction of `sa` (`None`: without).
    /// Decompressed packets are bounded by the path MTU: no inner packet
    /// that fits the tunnel uncompressed is larger.
    fn ipcomp_params(&self, id: SaId, direction: Direction) -> Option<IpcompParams> {
        let sa = &self.sas[id.0];
        let cpis = sa.ipcomp?;
        let settings = &self.children[sa.child.0].settings;
        let mode = settings.ipcomp?;
        let link_mbps = settings.link_mbps;
        let cpi = match direction {
            Direction::Inbound => cpis.inbound,
            Direction::Outbound => cpis.outbound,
        };
        Some(IpcompParams { cpi, mode, max_inner: usize::from(self.path_mtu), link_mbps })
    }

    /// Puts the outbound half of `sa` into its slot, replacing what was
    /// there; `reserved` continues the sequence numbers of a static SA.
    pub(super) fn send_on(
        &mut self,
        now: Instant,
        id: SaId,
        key: &SecretBytes,
        reserved: Option<&Claimed>,
    ) -> Result<()> {
        let sa = &self.sas[id.0];
        let (child, slot, spi, suite, esn) = (sa.child, sa.slot, sa.out_spi, sa.suite, sa.esn);
        let cfg = self.sa_config(child, spi, suite, esn, key)?;
        let Some(group) = self.children[child.0].group.as_ref().map(|g| (g.id, g.per_cpu)) else {
            return Ok(());
        };
        let limit = |sa: OutboundSa| match reserved {
            Some(r) => sa.reserved(r.limit.clone()),
            None => sa,
        };
        let commands: Vec<(u16, Command)> = match slot {
            Slot::InboundOnly => {
                self.sas[id.0].out = Out::Idle;
                return Ok(());
            }
            Slot::Worker(k) if k >= self.workers => {
                self.sas[id.0].out = Out::Idle;
                return Ok(());
            }
            Slot::Worker(k) => {
                vec![(
                    k,
                    Command::SetSub(group.0, Box::new(limit(OutboundSa::owned(&cfg, now).map_err(key_err)?))),
                )]
            }
            // One worker and no sub-SAs: no counter to share.
            Slot::Fallback if self.workers == 1 && !group.1 => {
                vec![(
                    0,
                    Command::SetFallback(group.0, Box::new(limit(OutboundSa::owned(&cfg, now).map_err(key_err)?))),
                )]
            }
            Slot::Fallback => {
                // One counter for every worker's copy, continuing after
                // earlier runs when reserved.
                let seq = reserved.map_or_else(SharedSeq::new, |r| r.shared.clone());
                let mut v = Vec::with_capacity(usize::from(self.workers));
                for k in 0..self.workers {
                    let sa = OutboundSa::shared(&cfg, seq.clone(), now).map_err(key_err)?;
                    v.push((k, Command::SetFallback(group.0, Box::new(limit(sa)))));
                }
                v
            }
        };
        let c = &mut self.children[child.0];
        let held = match slot {
            Slot::Fallback => Some(&mut c.fallback),
            Slot::Worker(k) => c.subs.get_mut(usize::from(k)),
            Slot::InboundOnly => None,
        };
        if let Some(old) = held.and_then(|h| h.replace(id)).filter(|old| *old != id) {
            // Replaced in the workers by the commands below.
            self.sas[old.0].out = Out::Idle;
        }
        self.sas[id.0].out = Out::Sending;
        let ipcomp = self.ipcomp_params(id, Direction::Outbound);
        for (k, cmd) in commands {
            if let Some(p) = ipcomp {
                self.emit(Effect::Worker(k, Command::SetIpcomp(spi, Direction::Outbound, Some(p))));
            }
            self.emit(Effect::Worker(k, cmd));
        }
        Ok(())
    }

    /// Stops sending on `sa` if it still holds its slot.
    pub(super) fn stop_sending(&mut self, id: SaId) {
        let sa = &mut self.sas[id.0];
        if !matches!(sa.out, Out::Sending) {
            sa.out = Out::Idle;
            return;
        }
        sa.out = Out::Idle;
        let (child, slot, spi) = (sa.child, sa.slot, sa.out_spi);
        let c = &mut self.children[child.0];
        let Some(group) = c.group.as_ref().map(|g| g.id) else {
            return;
        };
        match slot {
            Slot::Fallback if c.fallback == Some(id) => {
                c.fallback = None;
                for k in 0..self.workers {
                    self.emit(Effect::Worker(k, Command::RemoveOutbound(group, spi)));
                }
            }
            Slot::Worker(k) if c.subs.get(usize::from(k)) == Some(&Some(id)) => {
                c.subs[usize::from(k)] = None;
                self.emit(Effect::Worker(k, Command::RemoveOutbound(group, spi)));
            }
            _ => {}
        }
    }

    /// Removes `sa` entirely: outbound (if sending), then inbound.
    pub(super) fn remove_sa(&mut self, id: SaId) {
        self.stop_sending(id);
        let sa = self.sas.remove(id.0);
        if self.by_in.get(&sa.in_spi) == Some(&id) {
            self.by_in.remove(&sa.in_spi);
            self.last_packets.remove(sa.in_spi);
        }
        self.unindex_out(id, sa.out_spi);
        if let Some(c) = self.children.get_mut(sa.child.0) {
            c.sas.retain(|s| *s != id);
        }
        if let Some(r) = sa.ike_sa.and_then(|i| self.ike_sas.get_mut(&i)) {
            r.sas.retain(|s| *s != id);
        }
        tracing::debug!(in_spi = format_args!("{:08x}", sa.in_spi), out_spi = format_args!("{:08x}", sa.out_spi),
            worker = sa.in_worker, lingered = sa.linger.is_some(), "inbound SA removed");
        self.emit(Effect::Worker(sa.in_worker, Command::RemoveInbound(sa.in_spi)));
    }

    pub(super) fn unindex_out(&mut self, id: SaId, spi: u32) {
        if let Some(v) = self.by_out.get_mut(&spi) {
            v.retain(|s| *s != id);
            if v.is_empty() {
                self.by_out.remove(&spi);
            }
        }
    }
}
