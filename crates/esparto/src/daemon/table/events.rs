//! The table's transitions: what each IKE event, data-plane event and
//! timer does to it (the commands they queue follow from `sa.rs`).
//!
//! | engine event | transition |
//! | --- | --- |
//! | `IkeSaEstablished` | [`Table::ike_sa_up`]: the IKE SA's record (no longer one being negotiated) |
//! | `ChildSaEstablished` | [`Table::child_established`]: group and policies for the negotiated selectors; the SA's inbound half now; its outbound half into its slot now, or (peer-initiated rekey) held |
//! | `ChildSaOutboundActive` | [`Table::outbound_active`]: the held outbound half into its slot |
//! | `ChildSaDeleted` | [`Table::child_deleted`]: outbound out of its slot; inbound now, or after [`LINGER`] for a rekey |
//! | `IkeSaDeleted` | [`Table::ike_sa_deleted`]: every Child SA of it (the group and policies stay: a trap or the next IKE SA uses them) |
//! | `IkeSaRekeyed` | [`Table::ike_sa_rekeyed`]: its Child SAs move to the new IKE SA |
//! | `PerResourceUnavailable` | [`Table::per_cpu_unavailable`]: the workers stop asking for sub-SAs |
//! | `ChildSaFailed` | [`Table::child_failed`]: its acquires are no longer in flight |
//!
//! An IKE SA a reload retired makes no record: [`Table::ike_sa_up`]
//! ignores it and [`Table::child_established`] refuses its Child SAs
//! (`conn.rs`).
//!
//! | data-plane event | transition |
//! | --- | --- |
//! | `Acquire` | [`Table::acquire`]: whether to ask the engine (a trap, or a worker without its own sub-SA, not asked within [`ACQUIRE_PENDING`]) |
//! | soft `Expire` | [`Table::soft_expire`]: which Child SA to rekey (once) |
//! | — (timer) | [`Table::expire_lingering`] |

use std::cmp::Reverse;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use esparto_crypto::SecretBytes;
use esparto_esp::{Command, Direction};
use esparto_ike::ipcomp::IpcompCpis;
use esparto_ike::{ChildSaEstablished, IkeSaId};
use smallvec::SmallVec;

use super::child::{Role, Slot, static_slot};
use super::sa::{ChildSa, Out};
use super::{ACQUIRE_PENDING, CONFIRM_WAIT, ChildId, ConnId, Effect, IkeRecord, LINGER, SaId, Table};
use crate::config::StaticSas;
use crate::daemon::seqstate::Claimed;

/// The CPI of a statically keyed SA with IPComp: DEFLATE's well-known one.
const STATIC_CPI: u16 = esparto_wire::ipcomp::cpi::DEFLATE;

/// A Child SA as installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Established {
    /// Its child.
    pub(crate) child: ChildId,
    /// The SA.
    pub(crate) sa: SaId,
    /// Where it went.
    pub(crate) slot: Slot,
}

/// An acquire to hand to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AcquireRequest {
    /// The child.
    pub(crate) child: ChildId,
    /// The worker asking for its sub-SA (`None`: the child as a whole).
    pub(crate) worker: Option<u16>,
}

/// The IKE SA as the engine says it is, for its record.
#[derive(Debug, Clone)]
pub(crate) struct IkeSaUp {
    /// Our IKE endpoint.
    pub(crate) local: SocketAddr,
    /// The peer's.
    pub(crate) remote: SocketAddr,
    /// Our identity.
    pub(crate) local_id: String,
    /// The peer's.
    pub(crate) remote_id: String,
    /// We initiated it.
    pub(crate) initiator: bool,
}

impl Table {
    /// The record of `ike_sa`, made if new (it is no longer being
    /// negotiated).
    fn ike_record(&mut self, now: Instant, ike_sa: IkeSaId, conn: ConnId, up: &IkeSaUp) -> &mut IkeRecord {
        if !self.ike_sas.contains_key(&ike_sa) {
            self.stop_initiating(ike_sa);
            self.conns[conn.0].ike_sas.push(ike_sa);
        }
        self.ike_sas.entry(ike_sa).or_insert_with(|| IkeRecord {
            conn,
            local: up.local,
            remote: up.remote,
            local_id: up.local_id.clone(),
            remote_id: up.remote_id.clone(),
            initiator: up.initiator,
            since: now,
            established: true,
            sas: Vec::new(),
        })
    }

    /// An IKE SA is authenticated (a retired one is ignored).
    pub(crate) fn ike_sa_up(&mut self, now: Instant, ike_sa: IkeSaId, conn: ConnId, up: &IkeSaUp) {
        if self.retired.contains(&ike_sa) {
            return;
        }
        let rec = self.ike_record(now, ike_sa, conn, up);
        rec.established = true;
        rec.local_id.clone_from(&up.local_id);
        rec.remote_id.clone_from(&up.remote_id);
    }

    /// A Child SA is ready: installs it (see the module docs of `sa.rs`);
    /// `peer` is where its ESP goes. One of a retired IKE SA is refused.
    pub(crate) fn child_established(
        &mut self,
        now: Instant,
        c: &ChildSaEstablished,
        peer: SocketAddr,
    ) -> Result<Established> {
        if self.retired.contains(&c.ike_sa) {
            return Err(anyhow!("Child SA of a retired IKE SA"));
        }
        let child = self
            .child_id(&c.connection, &c.child)
            .ok_or_else(|| anyhow!("Child SA for an unknown child"))?;
        let conn = self.children[child.0].conn;
        let ch = &mut self.children[child.0];
        if let Some(a) = c.resource.and_then(|k| ch.acquires.get_mut(usize::from(k))) {
            *a = None;
        }
        ch.acquire_all = None;
        let per_cpu = ch.per_cpu();
        let local_ts: Vec<_> = c.local_ts.iter().map(crate::selector::to_esp).collect();
        let remote_ts: Vec<_> = c.remote_ts.iter().map(crate::selector::to_esp).collect();
        self.ensure_group(child, &local_ts, &remote_ts, peer, per_cpu);
        self.set_per_cpu(child, per_cpu);
        // A rekeyed SA takes its predecessor's place: where it sent (a
        // sub-SA keeps its worker), or nowhere if it sent nowhere.
        let inherited = c
            .rekeys
            .and_then(|old| self.by_in.get(&old))
            .map(|id| &self.sas[id.0])
            .filter(|old| old.child == child && old.linger.is_none())
            .map(|old| {
                if matches!(old.out, Out::Idle) {
                    Slot::InboundOnly
                } else {
                    old.slot
                }
            });
        let ch = &self.children[child.0];
        let slot = match (inherited, c.resource, c.per_resource) {
            (Some(s), _, _) => s,
            (None, Some(k), _) => ch.sub_slot(k),
            (None, None, true) => ch.sub_slot(in_worker(c.inbound_spi, self.workers)),
            (None, None, false) => Slot::Fallback,
        };
        let up = IkeSaUp {
            local: c.local,
            remote: c.remote,
            local_id: String::new(),
            remote_id: String::new(),
            initiator: c.initiator,
        };
        self.ike_record(now, c.ike_sa, conn, &up);
        let sa = ChildSa {
            child,
            ike_sa: Some(c.ike_sa),
            in_spi: c.inbound_spi,
            out_spi: c.outbound_spi,
            suite: c.suite,
            esn: c.esn,
            in_worker: in_worker(c.inbound_spi, self.workers),
            slot,
            role: Role::of(slot, per_cpu),
            out: Out::Idle,
            since: now,
            rekeying: false,
            expired: false,
            linger: None,
            ipcomp: c.ipcomp,
        };
        let id = self.add_sa(now, sa, &c.inbound_key)?;
        let confirm = c.outbound_active && self.waits_for_first_packet(child, slot, c);
        if confirm {
            let w = self.sas[id.0].in_worker;
            self.emit(Effect::Worker(w, Command::AnnounceFirst(c.inbound_spi)));
        }
        // The inbound half is in every worker it must be before anything
        // else happens: before the response that lets the peer send on it
        // leaves, and before we send on the outbound half (the gateway
        // holds both back until the workers confirm).
        self.emit(Effect::Barrier);
        if confirm {
            self.sas[id.0].out = Out::Confirming(SecretBytes::from_slice(c.outbound_key.as_slice()));
            self.confirming.push(Reverse((now + CONFIRM_WAIT, c.inbound_spi)));
        } else if c.outbound_active {
            if let Err(e) = self.send_on(now, id, &c.outbound_key, None) {
                self.remove_sa(id);
                return Err(e);
            }
        } else {
            // The peer initiated this rekey: it switches to the new SA when
            // it deletes the old one; until then we keep sending on the old
            // one (RFC 7296 §2.8).
            self.sas[id.0].out = Out::Waiting(SecretBytes::from_slice(c.outbound_key.as_slice()));
        }
        Ok(Established { child, sa: id, slot })
    }

    /// Whether the outbound half of a new Child SA waits for the peer's
    /// first packet on it: a per-worker sub-SA (RFC 9611) we answered for,
    /// of a child whose fallback SA sends meanwhile. The initiator installs
    /// the SA only when our response arrives, so ESP we sent on it at once
    /// could reach it first and be dropped there as an unknown SPI; its own
    /// first packet on the SA says it is in. Its worker has traffic (that
    /// is why it asked), so the wait is a round trip; an SA asked for
    /// without traffic goes in after [`CONFIRM_WAIT`]. The first SA of a
    /// child (nothing else to send on) and rekeys (the peer's Delete of the
    /// old SA says it moved, `Out::Waiting`) do not wait.
    fn waits_for_first_packet(&self, child: ChildId, slot: Slot, c: &ChildSaEstablished) -> bool {
        if c.initiator || c.rekeys.is_some() || !matches!(slot, Slot::Worker(_)) {
            return false;
        }
        let fallback = self.children[child.0].fallback;
        fallback.is_some_and(|f| matches!(self.sas.get(f.0).map(|s| &s.out), Some(Out::Sending)))
    }

    /// The inbound SA `in_spi` delivered its first packet, or its wait is
    /// over: its outbound half goes into its slot. Returns its slot, or
    /// `None` if it was not waiting.
    pub(crate) fn inbound_confirmed(&mut self, now: Instant, in_spi: u32) -> Result<Option<Slot>> {
        let Some(&id) = self.by_in.get(&in_spi) else {
            return Ok(None);
        };
        if !matches!(self.sas[id.0].out, Out::Confirming(_)) {
            return Ok(None);
        }
        let Out::Confirming(key) = std::mem::replace(&mut self.sas[id.0].out, Out::Idle) else {
            return Ok(None);
        };
        self.send_on(now, id, &key, None)?;
        Ok(Some(self.sas[id.0].slot))
    }

    /// When the next outbound half stops waiting for its first packet.
    pub(crate) fn next_confirm(&self) -> Option<Instant> {
        self.confirming.peek().map(|Reverse((t, _))| *t)
    }

    /// Sends on every SA whose wait for a first packet is over; returns how
    /// many.
    pub(crate) fn expire_confirming(&mut self, now: Instant) -> Result<usize> {
        let mut n = 0;
        while let Some(&Reverse((t, spi))) = self.confirming.peek() {
            if t > now {
                break;
            }
            self.confirming.pop();
            if self.inbound_confirmed(now, spi)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The peer switched to the Child SA we receive on with `in_spi`:
    /// start sending on it. Returns its slot, or `None` if nothing waited.
    pub(crate) fn outbound_active(&mut self, now: Instant, in_spi: u32, out_spi: u32) -> Result<Option<Slot>> {
        let Some(&id) = self.by_in.get(&in_spi) else {
            return Ok(None);
        };
        let sa = &mut self.sas[id.0];
        if !matches!(sa.out, Out::Waiting(_)) {
            return Ok(None);
        }
        let Out::Waiting(key) = std::mem::replace(&mut sa.out, Out::Idle) else {
            return Ok(None);
        };
        if sa.out_spi != out_spi {
            let old = std::mem::replace(&mut sa.out_spi, out_spi);
            self.unindex_out(id, old);
            self.by_out.entry(out_spi).or_default().push(id);
        }
        self.send_on(now, id, &key, None)?;
        Ok(Some(self.sas[id.0].slot))
    }

    /// A Child SA is deleted: its outbound half leaves its slot (if it
    /// still holds it); its inbound half goes now, or after [`LINGER`] when
    /// it was `rekeyed`. Returns whether the SA was known.
    pub(crate) fn child_deleted(&mut self, now: Instant, in_spi: u32, rekeyed: bool) -> bool {
        let Some(&id) = self.by_in.get(&in_spi) else {
            return false;
        };
        if self.sas[id.0].linger.is_some() {
            return false;
        }
        if !rekeyed {
            self.remove_sa(id);
            return true;
        }
        self.stop_sending(id);
        let until = now + LINGER;
        let sa = &mut self.sas[id.0];
        sa.linger = Some(until);
        sa.rekeying = false;
        let (ike_sa, out_spi) = (sa.ike_sa, sa.out_spi);
        self.unindex_out(id, out_spi);
        if let Some(r) = ike_sa.and_then(|i| self.ike_sas.get_mut(&i)) {
            r.sas.retain(|s| *s != id);
        }
        self.lingering.push(Reverse((until, in_spi)));
        true
    }

    /// When the next lingering inbound SA is due.
    pub(crate) fn next_linger(&self) -> Option<Instant> {
        self.lingering.peek().map(|Reverse((t, _))| *t)
    }

    /// Removes the lingering inbound SAs that are due; returns how many.
    pub(crate) fn expire_lingering(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(&Reverse((t, spi))) = self.lingering.peek() {
            if t > now {
                break;
            }
            self.lingering.pop();
            if let Some(&id) = self.by_in.get(&spi) {
                if self.sas[id.0].linger == Some(t) {
                    self.remove_sa(id);
                    n += 1;
                }
            }
        }
        n
    }

    /// An IKE SA is gone, and its Child SAs with it (RFC 7296 §1.4.1).
    /// Returns its connection if it was established.
    pub(crate) fn ike_sa_deleted(&mut self, ike_sa: IkeSaId) -> Option<ConnId> {
        self.stop_initiating(ike_sa);
        let rec = self.ike_sas.remove(&ike_sa)?;
        for id in rec.sas {
            if self.sas.contains(id.0) {
                self.remove_sa(id);
            }
        }
        if let Some(c) = self.conns.get_mut(rec.conn.0) {
            c.ike_sas.retain(|i| *i != ike_sa);
        }
        Some(rec.conn)
    }

    /// RFC 7296 §1.3.2: the new IKE SA inherits every Child SA of the old.
    pub(crate) fn ike_sa_rekeyed(&mut self, old: IkeSaId, new: IkeSaId) {
        let Some(rec) = self.ike_sas.remove(&old) else { return };
        for id in &rec.sas {
            self.sas[id.0].ike_sa = Some(new);
        }
        if let Some(c) = self.conns.get_mut(rec.conn.0) {
            c.ike_sas.retain(|i| *i != old && *i != new);
            c.ike_sas.push(new);
        }
        self.ike_sas.insert(new, rec);
    }

    /// The peer's address changed (NAT rebinding): its IKE SA's record,
    /// and where its Child SAs' ESP goes (`esp`).
    pub(crate) fn peer_address_changed(&mut self, ike_sa: IkeSaId, local: SocketAddr, remote: SocketAddr, esp: SocketAddr) {
        let Some(r) = self.ike_sas.get_mut(&ike_sa) else { return };
        r.local = local;
        r.remote = remote;
        // ESP follows IKE to the peer's new endpoint (RFC 7296 §2.23, RFC
        // 3948 §3.5): every group of the IKE SA's Child SAs, in every
        // worker, without touching sequence numbers.
        let mut groups: Vec<_> = r.sas.iter().filter_map(|id| self.sas.get(id.0)).map(|sa| sa.child).collect();
        groups.dedup();
        for child in groups {
            let Some(g) = self.children.get_mut(child.0).and_then(|c| c.group.as_mut()) else { continue };
            if g.peer == esp {
                continue;
            }
            g.peer = esp;
            let id = g.id;
            for k in 0..self.workers {
                self.emit(Effect::Worker(k, Command::SetPeer(id, esp)));
            }
        }
    }

    /// The peer gives no (more) per-resource SAs for `child`: its workers
    /// stop asking and use the fallback SA.
    pub(crate) fn per_cpu_unavailable(&mut self, child: ChildId) {
        let Some(c) = self.children.get_mut(child.0) else {
            return;
        };
        c.per_cpu_off = true;
        self.set_per_cpu(child, false);
    }

    /// A negotiation for `child` failed: none of its acquires is in flight.
    pub(crate) fn child_failed(&mut self, child: ChildId) {
        if let Some(c) = self.children.get_mut(child.0) {
            c.acquires.iter_mut().for_each(|a| *a = None);
            c.acquire_all = None;
        }
    }

    /// A worker has traffic for `group` and no SA for it: the group as a
    /// whole (`worker: None`, a trap) or its own sub-SA (RFC 9611). Returns
    /// what to ask the engine for, if anything: not for a group without a
    /// trap, not for a worker that has its sub-SA by now (the event was
    /// raised before it arrived), not when the peer gives no more, and not
    /// twice within [`ACQUIRE_PENDING`].
    pub(crate) fn acquire(&mut self, now: Instant, group: u32, worker: Option<u16>) -> Option<AcquireRequest> {
        let child = *self.groups.get(&group)?;
        let c = &self.children[child.0];
        let since = match worker {
            None if !c.trap => return None,
            None => c.acquire_all,
            Some(_) if c.per_cpu_off => return None,
            Some(k) => match (c.subs.get(usize::from(k)), c.acquires.get(usize::from(k))) {
                (Some(None), Some(a)) => *a,
                _ => return None,
            },
        };
        if since.is_some_and(|t| now.saturating_duration_since(t) < ACQUIRE_PENDING) {
            return None;
        }
        Some(AcquireRequest { child, worker })
    }

    /// The engine took the acquire: it is in flight from `now`.
    pub(crate) fn acquire_started(&mut self, now: Instant, req: AcquireRequest) {
        let Some(c) = self.children.get_mut(req.child.0) else {
            return;
        };
        match req.worker {
            None => c.acquire_all = Some(now),
            Some(k) => {
                if let Some(a) = c.acquires.get_mut(usize::from(k)) {
                    *a = Some(now);
                }
            }
        }
    }

    /// An SA crossed its soft byte or packet limit: the Child SAs to
    /// rekey, as (IKE SA, inbound SPI), each once (every worker's copy of
    /// a fallback SA raises its own event).
    pub(crate) fn soft_expire(&mut self, spi: u32, direction: Direction) -> SmallVec<[(IkeSaId, u32); 1]> {
        self.limit_reached(spi, direction, |sa| &mut sa.rekeying)
    }

    /// The SA with this SPI (in `direction`) reached a hard byte or packet
    /// limit: it carries no more traffic in that direction, so its Child
    /// SA is to be deleted (RFC 4301 §4.4.2.1), once. Returns the IKE SA
    /// and inbound SPI of each to delete (none for static SAs, which have
    /// no peer to tell, nor for SAs already going away).
    pub(crate) fn hard_expire(&mut self, spi: u32, direction: Direction) -> SmallVec<[(IkeSaId, u32); 1]> {
        self.limit_reached(spi, direction, |sa| &mut sa.expired)
    }

    /// The IKE-keyed, not lingering SAs with this SPI in `direction` whose
    /// `flag` is not yet set, as (IKE SA, inbound SPI); sets the flag, so
    /// each is returned once.
    fn limit_reached(
        &mut self,
        spi: u32,
        direction: Direction,
        flag: fn(&mut ChildSa) -> &mut bool,
    ) -> SmallVec<[(IkeSaId, u32); 1]> {
        let ids: SmallVec<[SaId; 1]> = match direction {
            Direction::Inbound => self.by_in.get(&spi).copied().into_iter().collect(),
            Direction::Outbound => self.by_out.get(&spi).cloned().unwrap_or_default(),
        };
        let mut out = SmallVec::new();
        for id in ids {
            let sa = &mut self.sas[id.0];
            if sa.linger.is_some() || *flag(sa) {
                continue;
            }
            if let Some(ike_sa) = sa.ike_sa {
                *flag(sa) = true;
                out.push((ike_sa, sa.in_spi));
            }
        }
        out
    }

    /// The engine refused to rekey the Child SA: a later limit may ask again.
    pub(crate) fn rekey_failed(&mut self, in_spi: u32) {
        if let Some(&id) = self.by_in.get(&in_spi) {
            self.sas[id.0].rekeying = false;
        }
    }

    /// Arms (or re-arms) the trap policy of a child: its configured
    /// selectors into an SA group with no SA, whose traffic raises
    /// acquires.
    pub(crate) fn arm_trap(&mut self, child: ChildId) {
        let Some(c) = self.children.get(child.0) else { return };
        let s = c.settings.clone();
        self.ensure_group(child, &s.local_ts, &s.remote_ts, s.peer, false);
        self.children[child.0].trap = true;
    }

    /// Installs a statically keyed child: pair 0 is the fallback, pair k+1
    /// worker k's sub-SA, pairs beyond the workers inbound only. Each
    /// outbound SA continues within its claim (`seqstate`), named by its
    /// index.
    pub(crate) fn install_static<'a>(
        &mut self,
        now: Instant,
        child: ChildId,
        st: &StaticSas,
        claim: impl Fn(usize) -> Option<&'a Claimed>,
    ) -> Result<()> {
        let s = self.children.get(child.0).context("no such child")?.settings.clone();
        // Nothing can negotiate a missing sub-SA: no acquires.
        self.ensure_group(child, &s.local_ts, &s.remote_ts, s.peer, false);
        let workers = usize::from(self.workers);
        for (i, p) in st.pairs.iter().enumerate() {
            let slot = static_slot(i, workers);
            let sa = ChildSa {
                child,
                ike_sa: None,
                in_spi: p.in_spi,
                out_spi: p.out_spi,
                suite: st.suite,
                esn: st.esn,
                in_worker: in_worker(p.in_spi, self.workers),
                slot,
                // With sub-SAs the head SA is a fallback, not the only SA.
                role: Role::of(slot, st.pairs.len() > 1),
                out: Out::Idle,
                since: now,
                rekeying: false,
                expired: false,
                linger: None,
                // Nothing negotiates a CPI: the well-known one of DEFLATE
                // (RFC 3173 §3.3) both ways.
                ipcomp: s.ipcomp.map(|_| IpcompCpis {
                    inbound: STATIC_CPI,
                    outbound: STATIC_CPI,
                }),
            };
            let id = self.add_sa(now, sa, &p.in_key)?;
            if slot != Slot::InboundOnly {
                // Never sent on without a reservation: its counter would
                // start at 1 again under the same key.
                let claimed = claim(i).with_context(|| format!("no sequence numbers reserved for static_sas[{i}]"))?;
                self.send_on(now, id, &p.out_key, Some(claimed))?;
            }
        }
        Ok(())
    }
}

/// The worker an inbound SPI steers to.
pub(super) fn in_worker(spi: u32, workers: u16) -> u16 {
    u16::try_from(crate::datapath::spi_to_worker(spi, usize::from(workers))).unwrap_or(0)
}
