//! The endpoint's side of SA life cycles: rekeying on request (RFC 7296
//! §2.8), following an IKE SA to its successor after a rekey, and the
//! [`Action`]s SAs leave for the endpoint — a new IKE SA born from a rekey,
//! Child SAs moving to it (§1.3.2), INITIAL_CONTACT (§2.4).
//!
//! Order matters after each step of an SA: actions run *before* a dead SA
//! is removed, so an IKE SA deleted right after its rekey can still hand
//! its Child SAs to its successor. Then [`Endpoint::after`] removes the SA
//! if dead, frees its IKE_SA_INIT state once established, refiles it in
//! the SA index and re-arms its timer.

use super::{Endpoint, InitiateError};
use crate::child::ChildState;
use crate::ctx::{Action, Ctx};
use crate::event::{IkeSaId, Reason};
use crate::exchange::Task;
use crate::exchange::rekey_ike::RekeyIke;
use crate::lifetime::{REPLACE_DELAY, Unique};
use crate::sa::{IkeSa, State};
use std::cmp::Reverse;
use std::time::Instant;

impl Endpoint {
    /// After an SA's step: carry out its actions, then re-arm or remove it.
    pub(super) fn finish(&mut self, now: Instant, id: u64) {
        self.run_actions(now);
        self.after(now, id);
    }

    /// After a step of SA `id`: remove it if dead; free its handshake
    /// state once established (and note the connection up, for the
    /// re-initiation back-off); refile it in the index; re-arm its timer;
    /// pass its pacing slot on once it is set up or gone.
    pub(super) fn after(&mut self, now: Instant, id: u64) {
        let freed = self.sas.get_mut(&id).and_then(|sa| Self::slot_done(sa));
        self.refile(now, id);
        if let Some(ip) = freed {
            self.slot_freed(now, ip);
        }
    }

    fn refile(&mut self, now: Instant, id: u64) {
        let Some(sa) = self.sas.get_mut(&id) else {
            return;
        };
        if sa.state == State::Dead {
            if let Some(k) = sa.half_open_key() {
                self.half_open.remove(&k);
            }
            self.sa_index.unfile(id, sa);
            self.sas.remove(&id);
            self.ike_spis.remove(&id);
            return;
        }
        self.ike_spis.insert(id);
        if sa.state == State::Established {
            // IKE_AUTH is over: the nonces and messages of IKE_SA_INIT and
            // the AUTH keys have no further use (see `sa::Handshake`).
            let mut up = None;
            if let Some(hs) = sa.handshake.take() {
                if let Some(k) = hs.half_open_key {
                    self.half_open.remove(&k);
                }
                up = Some(sa.conn.name.clone());
            }
            if let Some(k) = sa.keys.as_mut() {
                k.forget_auth_keys();
            }
            if let Some(name) = up {
                self.connection_up(now, &name);
            }
        }
        let Some(sa) = self.sas.get_mut(&id) else {
            return;
        };
        self.sa_index.file(id, sa);
        // One live heap entry per SA, at or before its deadline: a new one
        // only when the deadline moves earlier (a request sent); when it
        // moves later (an answer, the SA established) the old entry fires
        // early and `handle_timeout` re-arms. Most SAs thus hold a single
        // entry for their life instead of one per change.
        match (sa.next_deadline(), sa.scheduled) {
            (None, _) => sa.scheduled = None,
            (Some(d), Some(s)) if s <= d => {}
            (Some(d), _) => {
                sa.scheduled = Some(d);
                self.timers.push(Reverse((d, id)));
                self.compact_timers();
            }
        }
    }

    /// Drop stale heap entries once they outnumber the SAs, so the heap
    /// stays within a small multiple of the SA count (amortised O(1): each
    /// pass removes at least half of what it looks at).
    fn compact_timers(&mut self) {
        if self.timers.len() <= 2 * self.sas.len() + 64 {
            return;
        }
        let sas = &self.sas;
        self.timers
            .retain(|Reverse((t, id))| sas.get(id).is_some_and(|sa| sa.scheduled == Some(*t)));
    }

    /// The SA an id names now: an IKE SA replaced by a rekey forwards to
    /// its successor (the driver may not have seen `IkeSaRekeyed` yet).
    pub(super) fn resolve(&self, ike_sa: IkeSaId) -> Result<u64, InitiateError> {
        let mut id = ike_sa.0;
        for _ in 0..8 {
            let sa = self
                .sas
                .get(&id)
                .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
            match sa.successor {
                Some(next) if self.sas.contains_key(&next) => id = next,
                _ => return Ok(id),
            }
        }
        Ok(id)
    }

    /// The IKE SA holding our inbound SPI `spi`: `ike_sa` (or its
    /// successor), else any (inbound SPIs are unique in an endpoint).
    pub(super) fn resolve_child(&self, ike_sa: IkeSaId, spi: u32) -> Result<u64, InitiateError> {
        if let Ok(id) = self.resolve(ike_sa) {
            if self.sas[&id].child_by_inbound(spi).is_some() {
                return Ok(id);
            }
        }
        self.sas
            .iter()
            .find(|(_, sa)| sa.child_by_inbound(spi).is_some())
            .map(|(id, _)| *id)
            .ok_or(InitiateError::UnknownChildSa(spi))
    }

    /// Rekey one Child SA, named by our inbound SPI (RFC 7296 §1.3.3): the
    /// daemon calls this when the data plane reports the soft byte or
    /// packet limit (`rekey_bytes`, `rekey_packets`); time-based rekeys
    /// run by themselves. The new SA is announced with `rekeys:
    /// Some(inbound_spi)` and the same resource; the old one is deleted
    /// afterwards. A Child SA already being rekeyed or deleted is left
    /// alone (`Ok`).
    pub fn rekey_child(
        &mut self,
        now: Instant,
        ike_sa: IkeSaId,
        inbound_spi: u32,
    ) -> Result<(), InitiateError> {
        let id = self.resolve_child(ike_sa, inbound_spi)?;
        let mut ctx = ctx!(self, now);
        let Some(sa) = self.sas.get_mut(&id) else {
            return Err(InitiateError::UnknownIkeSa(ike_sa));
        };
        if sa.state != State::Established {
            return Err(InitiateError::UnknownIkeSa(ike_sa));
        }
        let idx = sa
            .child_by_inbound(inbound_spi)
            .ok_or(InitiateError::UnknownChildSa(inbound_spi))?;
        let c = &sa.children[idx];
        if c.state == ChildState::Installed && !c.redundant && !sa.replaced(inbound_spi) {
            sa.children[idx].rekey_at = None;
            sa.start_rekey_child(&mut ctx, idx);
        }
        self.finish(now, id);
        Ok(())
    }

    /// Rekey an IKE SA now (RFC 7296 §1.3.2); time-based rekeys (the
    /// connection's `rekey_time`) run by themselves. Its Child SAs move to
    /// the new IKE SA (`IkeSaRekeyed`).
    pub fn rekey_ike(&mut self, now: Instant, ike_sa: IkeSaId) -> Result<(), InitiateError> {
        let id = self.resolve(ike_sa)?;
        let mut ctx = ctx!(self, now);
        let Some(sa) = self.sas.get_mut(&id) else {
            return Err(InitiateError::UnknownIkeSa(ike_sa));
        };
        if sa.state != State::Established {
            return Err(InitiateError::UnknownIkeSa(ike_sa));
        }
        let busy = sa
            .pending
            .iter()
            .map(|p| &p.task)
            .chain(sa.queue.iter())
            .any(Task::is_exclusive);
        if !busy {
            sa.rekey_at = None;
            sa.start_task(&mut ctx, Task::RekeyIke(RekeyIke::new()));
        }
        self.finish(now, id);
        Ok(())
    }

    /// Our address `ip` left the host: the IKE SAs on it can neither send
    /// nor receive. One we initiated with a peer that supports MOBIKE
    /// (RFC 4555) moves to the address the routing table gives towards
    /// the peer now (another of `local_addrs` of that family if the
    /// connection lists them), if there is one: UPDATE_SA_ADDRESSES, the
    /// Child SAs kept. The others end here, without a Delete (it could not
    /// leave), and what follows is as for a dead peer: the connection's
    /// `dpd_action` (`restart`, the default of `start` connections,
    /// initiates it again, from the address the routing table gives then).
    /// Returns how many ended or moved.
    pub fn local_address_gone(&mut self, now: Instant, ip: core::net::IpAddr) -> usize {
        let ids: Vec<u64> = self
            .sas
            .iter()
            .filter(|(_, sa)| sa.local.ip() == ip && sa.state != State::Dead)
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            let Some(sa) = self.sas.get(id) else { continue };
            let (conn, remote) = (sa.conn.clone(), sa.remote.ip());
            let next = if sa.mobike && sa.is_initiator() {
                match conn.local_addrs.is_empty() {
                    true => self.source.as_mut().and_then(|choose| choose(remote)),
                    false => conn.local_addrs.iter().find(|a| **a != ip && a.is_ipv4() == remote.is_ipv4()).copied(),
                }
                .filter(|a| *a != ip && a.is_ipv4() == remote.is_ipv4())
            } else {
                None
            };
            let mut ctx = ctx!(self, now);
            let Some(sa) = self.sas.get_mut(id) else { continue };
            match next {
                Some(new) if sa.move_local(&mut ctx, new) => {
                    tracing::info!(ike_sa = %sa.id, old = %ip, local = %new, connection = %sa.conn.name,
                        "our address left the host: moving the IKE_SA (MOBIKE)");
                }
                _ => {
                    let why = match (sa.mobike, sa.is_initiator()) {
                        (false, _) => "no MOBIKE",
                        (true, false) => "the peer initiated it, only the peer can move it",
                        (true, true) => "no other address towards the peer",
                    };
                    tracing::info!(ike_sa = %sa.id, local = %ip, connection = %sa.conn.name,
                        "our address left the host: the IKE_SA ends ({why})");
                    kill_silently(sa, &mut ctx, Reason::LocalAddressGone);
                }
            }
        }
        self.run_actions(now);
        for id in &ids {
            self.after(now, *id);
        }
        ids.len()
    }

    /// Child SAs held (announced or not, all IKE SAs).
    pub fn child_sa_count(&self) -> usize {
        self.sas.values().map(|sa| sa.children.len()).sum()
    }

    /// Our IKE SPIs in use or reserved (for tests: nothing leaks).
    pub fn ike_spi_count(&self) -> usize {
        self.ike_spis.len()
    }

    /// Carry out what SAs asked for, until nothing is left.
    pub(super) fn run_actions(&mut self, now: Instant) {
        let mut touched = Vec::new();
        while !self.actions.is_empty() {
            let actions = std::mem::take(&mut self.actions);
            for a in actions {
                match a {
                    Action::Insert(sa) => {
                        let id = sa.id.0;
                        if self.sas.contains_key(&id) {
                            // An SPI collision with a responder's new SA:
                            // astronomically unlikely; drop the newcomer.
                            tracing::warn!(ike_sa = %sa.id, "IKE SPI collision: rekeyed SA dropped");
                            let mut sa = *sa;
                            let mut ctx = ctx!(self, now);
                            sa.die(&mut ctx, Reason::Local("IKE SPI collision"));
                            continue;
                        }
                        self.sas.insert(id, sa);
                        let mut ctx = ctx!(self, now);
                        if let Some(sa) = self.sas.get_mut(&id) {
                            sa.send_next(&mut ctx);
                        }
                        touched.push(id);
                    }
                    Action::Inherit { from, to } => {
                        self.inherit(now, from, to);
                        touched.push(from);
                        touched.push(to);
                    }
                    Action::Duplicates {
                        keep,
                        initial_contact,
                    } => {
                        touched.extend(self.duplicates(now, keep, initial_contact));
                    }
                    Action::Reinitiate {
                        connection,
                        children,
                    } => self.schedule_reinitiate(now, connection, children),
                }
            }
        }
        for id in touched {
            self.after(now, id);
        }
    }

    /// Move `from`'s Child SAs and waiting tasks to `to` (§2.8.2: "the
    /// other surviving new IKE SA MUST inherit all the Child SAs").
    fn inherit(&mut self, now: Instant, from: u64, to: u64) {
        let Some(mut old) = self.sas.remove(&from) else {
            return;
        };
        let mut ctx = ctx!(self, now);
        match self.sas.get_mut(&to) {
            Some(new) if new.state != State::Dead => {
                old.hand_over(&mut ctx, new);
                new.send_next(&mut ctx);
            }
            _ => {
                // The successor is gone too: the Child SAs die here.
                old.successor = None;
                old.drop_children(&mut ctx, Reason::Local("rekeyed IKE SA vanished"));
                for t in old.queue.drain(..) {
                    t.release(&mut ctx);
                }
            }
        }
        self.sas.insert(from, old);
    }

    /// IKE SA `keep` was just authenticated: INITIAL_CONTACT and the
    /// connection's `unique` policy decide what becomes of the other IKE
    /// SAs with the same identities (charon's rules). Returns the SAs
    /// touched.
    fn duplicates(&mut self, now: Instant, keep: u64, initial_contact: bool) -> Vec<u64> {
        let Some(k) = self.sas.get(&keep) else {
            return Vec::new();
        };
        let policy = k.conn.unique;
        if initial_contact {
            if policy == Unique::Never {
                tracing::debug!(ike_sa = %k.id, "INITIAL_CONTACT ignored (unique = never)");
                return Vec::new();
            }
            return self.initial_contact(now, keep);
        }
        if policy != Unique::Replace || k.is_initiator() {
            return Vec::new();
        }
        let (Some(lid), Some(rid)) = (k.local_id.clone(), k.remote_id.clone()) else {
            return Vec::new();
        };
        let (conn, from) = (k.conn.clone(), k.remote.ip());
        let others: Vec<(u64, core::net::IpAddr)> = self
            .sa_index
            .up_with(&conn, &lid, &rid)
            .filter(|(id, _)| *id != keep)
            .collect();
        let mut touched = Vec::new();
        for (id, ip) in others {
            let mut ctx = ctx!(self, now);
            let Some(sa) = self.sas.get_mut(&id) else {
                continue;
            };
            if sa.state != State::Established
                || sa.local_id.as_ref() != Some(&lid)
                || sa.remote_id.as_ref() != Some(&rid)
            {
                continue;
            }
            if ip == from {
                // A reauthentication: the peer makes the new Child SAs
                // before it deletes the old ones; give it the time.
                tracing::info!(ike_sa = %sa.id, identity = %rid,
                    "deleting the duplicate IKE_SA in {:?} (unique = replace, same address: a reauthentication)",
                    REPLACE_DELAY);
                sa.retire_at = Some(now + REPLACE_DELAY);
            } else {
                tracing::info!(ike_sa = %sa.id, identity = %rid, peer = %sa.remote,
                    "deleting the duplicate IKE_SA (unique = replace)");
                sa.superseded = true;
                sa.start_task(&mut ctx, Task::DeleteIke);
            }
            touched.push(id);
        }
        touched
    }

    /// §2.4: "The INITIAL_CONTACT notification asserts that this IKE SA is
    /// the only IKE SA currently active between the authenticated
    /// identities. [...] the recipient MAY use this information to delete
    /// any other IKE SAs it has to the same authenticated identity without
    /// waiting for a timeout." Deleted locally: the peer forgot them, so a
    /// Delete would go nowhere.
    fn initial_contact(&mut self, now: Instant, keep: u64) -> Vec<u64> {
        let Some(k) = self.sas.get(&keep) else {
            return Vec::new();
        };
        let (Some(lid), Some(rid)) = (k.local_id.clone(), k.remote_id.clone()) else {
            return Vec::new();
        };
        // The index gives the SAs filed under this pair's hash; the
        // identities themselves are compared here.
        let sas = &self.sas;
        let stale: Vec<u64> = self
            .sa_index
            .of_ids(&lid, &rid)
            .filter(|id| {
                *id != keep
                    && sas.get(id).is_some_and(|sa| {
                        sa.state == State::Established
                            && sa.local_id.as_ref() == Some(&lid)
                            && sa.remote_id.as_ref() == Some(&rid)
                    })
            })
            .collect();
        for id in &stale {
            let mut ctx = ctx!(self, now);
            if let Some(sa) = self.sas.get_mut(id) {
                tracing::info!(ike_sa = %sa.id, identity = %rid,
                    "peer restarted (INITIAL_CONTACT): deleting the old IKE_SA");
                kill_silently(sa, &mut ctx, Reason::PeerRestarted);
            }
        }
        stale
    }
}

/// Delete an IKE SA without a Delete payload (its successor, if any, is
/// deleted by the caller separately).
fn kill_silently(sa: &mut IkeSa, ctx: &mut Ctx<'_>, reason: Reason) {
    if !sa.superseded {
        sa.successor = None;
    }
    sa.die(ctx, reason);
}
