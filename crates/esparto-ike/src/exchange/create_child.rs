//! CREATE_CHILD_SA for an additional Child SA (RFC 7296 §1.3.1), for a
//! per-resource one (RFC 9611), or to rekey one (§1.3.3), as initiator.
//!
//! ```text
//! HDR, SK {[N(REKEY_SA),] [N(SA_RESOURCE_INFO),] SA, Ni, [KEi], TSi, TSr}  -->
//!                 <--  HDR, SK {[N(SA_RESOURCE_INFO),] SA, Nr, [KEr], TSi, TSr}
//! ```
//!
//! With a key exchange group in the child's ESP proposals (PFS), KEi is
//! sent for the first group of the first such proposal (for a rekey: the
//! group the old SA used, if still configured); INVALID_KE_PAYLOAD retries
//! with the group the responder names, if we offer it (§1.3).
//! KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr) with this exchange's nonces
//! (§2.17). The task carries the RFC 9611 resource (worker) the Child SA is
//! for, which selects the inbound SPI so that it steers to that worker.
//!
//! A rekey: "The REKEY_SA notification MUST be included in a
//! CREATE_CHILD_SA exchange if the purpose of the exchange is to replace an
//! existing ESP or AH SA. The SA being rekeyed is identified by the SPI
//! field in the Notify payload; this is the SPI the exchange initiator
//! would expect in inbound ESP or AH packets" (§1.3.3). It proposes the old
//! SA's (narrowed) selectors — "the new Child SA SHOULD NOT have different
//! Traffic Selectors and algorithms than the old one" (§2.8) — and keeps
//! its resource. What happens on success (collisions, deleting the old SA)
//! is in `sa/children.rs`.

use super::{Outcome, Received, Task, reason_for};
use crate::child::{
    ChildOpts, ChildQuery, ChildSa, ChildState, Install, check_answer, install, offer,
    select_child, ts_from, ts_repr,
};
use crate::ctx::Ctx;
use crate::event::{Event, Reason};
use crate::lifetime::MAX_CHILD_SAS;
use crate::sa::{IkeSa, notify};
use crate::ts::TrafficSelector;
use core::net::SocketAddr;
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProtocolId, SaRepr, Spi,
};
use std::sync::Arc;

const MAX_KE_RETRIES: u8 = 2;

/// The SA a rekey replaces.
#[derive(Debug, Clone)]
pub(crate) struct RekeyOf {
    /// Its inbound SPI (the REKEY_SA notify's SPI).
    pub(crate) inbound: u32,
    /// Its negotiated selectors, ours and the peer's.
    pub(crate) local_ts: Vec<TrafficSelector>,
    pub(crate) remote_ts: Vec<TrafficSelector>,
}

/// The CREATE_CHILD_SA task.
pub(crate) struct CreateChild {
    pub(crate) name: Arc<str>,
    pub(crate) resource: Option<u16>,
    /// RFC 9611: ask for a per-resource SA (sends SA_RESOURCE_INFO).
    pub(crate) per_resource: bool,
    /// §1.3.3: the SA this one replaces.
    pub(crate) rekey: Option<RekeyOf>,
    inbound_spi: Option<u32>,
    nonce: Vec<u8>,
    group: Option<KeGroup>,
    ke: Option<KeyExchange>,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
    retries: u8,
}

impl CreateChild {
    /// Create the child configuration `name`, for `resource` if given.
    pub(crate) fn new(name: Arc<str>, resource: Option<u16>) -> Self {
        CreateChild {
            name,
            resource,
            per_resource: false,
            rekey: None,
            inbound_spi: None,
            nonce: Vec::new(),
            group: None,
            ke: None,
            tsi: Vec::new(),
            tsr: Vec::new(),
            retries: 0,
        }
    }

    /// Rekey `old`: same configuration, selectors, resource, PFS group.
    pub(crate) fn rekey(old: &ChildSa) -> Self {
        let mut t = CreateChild::new(old.name.clone(), old.resource);
        t.per_resource = old.per_resource;
        t.group = old.ke;
        t.rekey = Some(RekeyOf {
            inbound: old.inbound_spi,
            local_ts: old.local_ts().to_vec(),
            remote_ts: old.remote_ts().to_vec(),
        });
        t
    }

    /// The first SA of an RFC 9611 group (not a rekey, not a sub-SA).
    fn is_fallback(&self, cfg: &crate::config::ChildConfig) -> bool {
        !self.per_resource
            && self.rekey.is_none()
            && cfg.per_cpu_sas != crate::config::PerCpuSas::No
    }

    pub(super) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(spi) = self.inbound_spi {
            ctx.spis.release(spi);
        }
    }

    pub(super) fn build(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mid: u32,
    ) -> Result<Vec<u8>, Reason> {
        let conn = sa.conn.clone();
        let cfg = conn
            .child(&self.name)
            .ok_or(Reason::Local("unknown child"))?;
        let spi = *self
            .inbound_spi
            .get_or_insert_with(|| ctx.spis.allocate(ctx.rng, self.resource));
        let configured = |g: &KeGroup| cfg.esp_proposals.iter().any(|p| p.ke.contains(g));
        if !self.group.as_ref().is_some_and(configured) {
            self.group = cfg.esp_proposals.iter().find_map(|p| p.ke.first().copied());
        }
        if let (Some(g), None) = (self.group, &self.ke) {
            self.ke = Some(
                g.generate(ctx.rng)
                    .map_err(|_| Reason::Local("key exchange"))?,
            );
        }
        self.nonce = vec![0; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut self.nonce);
        match &self.rekey {
            Some(r) => {
                self.tsi = r.local_ts.clone();
                self.tsr = r.remote_ts.clone();
            }
            None => {
                self.tsi = cfg.local_selectors(sa.local.ip());
                self.tsr = cfg.remote_selectors(sa.remote.ip());
            }
        }
        let resource_id = self.resource.map(u16::to_be_bytes);
        let mut payloads = Vec::with_capacity(7);
        if let Some(r) = &self.rekey {
            payloads.push(PayloadRepr::Notify(NotifyRepr {
                protocol: ProtocolId::ESP,
                spi: Spi::U32(r.inbound),
                kind: NotifyType::REKEY_SA,
                data: &[],
            }));
        }
        if self.per_resource || self.is_fallback(cfg) {
            // RFC 9611: with the group's first SA and with each sub-SA. The
            // identifier is opaque to the peer ("SHOULD only use it for
            // debugging purposes"); we send the worker number.
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SA_RESOURCE_INFO,
                resource_id.as_ref().map_or(&[][..], |b| &b[..]),
            )));
        }
        payloads.push(PayloadRepr::Sa(SaRepr {
            proposals: offer(&cfg.esp_proposals, spi, true),
        }));
        payloads.push(PayloadRepr::Nonce(NonceRepr { data: &self.nonce }));
        if let (Some(g), Some(ke)) = (self.group, &self.ke) {
            payloads.push(PayloadRepr::Ke(KeRepr {
                group: g.iana_id(),
                data: ke.public_value(),
            }));
        }
        payloads.push(PayloadRepr::TsI(ts_repr(&self.tsi)));
        payloads.push(PayloadRepr::TsR(ts_repr(&self.tsr)));
        sa.encode(ExchangeType::CREATE_CHILD_SA, false, mid, &payloads)
    }

    /// Report the failure, give back the SPI, and for a rekey let the IKE
    /// SA decide about the old SA.
    fn failed(
        self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        reason: Reason,
        error: Option<NotifyType>,
    ) -> Outcome {
        tracing::info!(ike_sa = %sa.id, child = %self.name, ?reason,
            rekey = self.rekey.is_some(), "CHILD_SA not created");
        if error == Some(NotifyType::TS_MAX_QUEUE) && self.per_resource {
            // RFC 9611: the peer will take no more SAs with these
            // selectors; stop asking on this IKE SA.
            let g = sa.resource_group(&self.name);
            if !g.closed {
                g.closed = true;
                ctx.events.push_back(Event::PerResourceUnavailable {
                    ike_sa: sa.id,
                    connection: sa.conn.name.clone(),
                    child: self.name.clone(),
                    reason,
                });
            }
        } else {
            ctx.events.push_back(Event::ChildSaFailed {
                ike_sa: sa.id,
                connection: sa.conn.name.clone(),
                child: Some(self.name.clone()),
                reason,
            });
        }
        let rekey = self.rekey.as_ref().map(|r| r.inbound);
        let (resource, per_resource) = (self.resource, self.per_resource);
        let fallback = sa
            .conn
            .child(&self.name)
            .is_some_and(|c| self.is_fallback(c));
        let name = self.name.clone();
        self.release(ctx);
        if let Some(old) = rekey {
            sa.rekey_failed(ctx, old, error, resource, per_resource);
        } else if fallback {
            sa.fallback_done(ctx, &name, None);
        }
        Outcome::Done
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some((kind, data)) = rx.error() {
            if kind == NotifyType::INVALID_KE_PAYLOAD && self.retries < MAX_KE_RETRIES {
                let wanted = NotifyRepr::new(kind, data)
                    .u16_data()
                    .and_then(KeGroup::from_iana);
                let offered = sa.conn.child(&self.name).is_some_and(|c| {
                    c.esp_proposals
                        .iter()
                        .any(|p| wanted.is_some_and(|g| p.ke.contains(&g)))
                });
                if offered && wanted != self.group {
                    self.retries += 1;
                    self.group = wanted;
                    self.ke = None;
                    return Outcome::Then(Box::new(Task::CreateChild(self)));
                }
            }
            return self.failed(sa, ctx, reason_for(kind), Some(kind));
        }
        let mut sa_p = None;
        let mut nonce = None;
        let mut ke_p = None;
        let mut tsi = None;
        let mut tsr = None;
        for p in &rx.payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                _ => {}
            }
        }
        let (Some(sa_p), Some(nonce), Some(tsi), Some(tsr)) = (sa_p, nonce, tsi, tsr) else {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("CREATE_CHILD_SA response incomplete"),
                None,
            );
        };
        let Some(cfg) = sa.conn.child(&self.name).cloned() else {
            return self.failed(sa, ctx, Reason::Local("child configuration vanished"), None);
        };
        let (selected, suite) = match check_answer(
            &cfg.esp_proposals,
            &sa_p.proposals,
            false,
            &self.tsi,
            &self.tsr,
            &tsi,
            &tsr,
        ) {
            Ok(x) => x,
            Err(reason) => {
                // The responder installed its half: delete it (our inbound
                // SPI names the pair, §1.4.1).
                if let Some(spi) = self.inbound_spi.take() {
                    sa.queue.push_back(Task::DeleteChild(vec![spi]));
                    ctx.spis.release(spi);
                }
                return self.failed(sa, ctx, reason, None);
            }
        };
        if selected.ke != self.group {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("responder changed the key exchange group"),
                None,
            );
        }
        let g_ir = match (self.ke.take(), ke_p) {
            (None, _) => None,
            (Some(ke), Some(k)) if Some(k.group) == self.group.map(|g| g.iana_id()) => {
                match ke.agree(k.data) {
                    Ok(g) => Some(g),
                    Err(_) => {
                        return self.failed(
                            sa,
                            ctx,
                            Reason::ProtocolError("invalid key exchange value"),
                            None,
                        );
                    }
                }
            }
            (Some(_), _) => {
                return self.failed(sa, ctx, Reason::ProtocolError("missing or wrong KEr"), None);
            }
        };
        let (Spi::U32(outbound_spi), Some(inbound_spi)) = (selected.spi, self.inbound_spi) else {
            return self.failed(sa, ctx, Reason::ProtocolError("no SPI"), None);
        };
        // RFC 9611: a responder that supports per-resource SAs answers with
        // SA_RESOURCE_INFO; a sub-SA without it is a plain duplicate (RFC
        // 7296 allows those), still usable by our worker.
        let echoed = rx.notify(NotifyType::SA_RESOURCE_INFO).is_some();
        let fallback = self.is_fallback(&cfg);
        let Some(keys) = sa.keys.as_ref() else {
            return self.failed(sa, ctx, Reason::Local("no keys"), None);
        };
        let installed = install(
            ctx,
            Install {
                ike_sa: sa.id,
                connection: sa.conn.name.clone(),
                child: self.name.clone(),
                initiator: true,
                inbound_spi,
                outbound_spi,
                suite,
                esn: selected.esn,
                prf: keys.prf,
                sk_d: keys.sk_d(),
                g_ir: g_ir.as_ref().map(|g| g.as_slice()),
                ni: &self.nonce,
                nr: nonce,
                local_ts: tsi,
                remote_ts: tsr,
                local: sa.local,
                remote: sa.remote,
                encap: sa.encap(),
                resource: self.resource,
                rekeys: self.rekey.as_ref().map(|r| r.inbound),
                per_resource: self.per_resource,
                outbound_active: true,
                ke: self.group,
                config: &cfg,
            },
        );
        match installed {
            Ok((mut child, event)) => {
                self.inbound_spi = None;
                match self.rekey {
                    Some(r) => sa.complete_rekey(ctx, child, event, r.inbound),
                    None => {
                        crate::child::announce(ctx, &mut child, event);
                        sa.add_child(child);
                        if fallback {
                            sa.fallback_done(ctx, &self.name, Some(echoed));
                        }
                    }
                }
                Outcome::Done
            }
            Err(reason) => self.failed(sa, ctx, reason, None),
        }
    }
}

impl IkeSa {
    pub(crate) fn respond_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::CREATE_CHILD_SA;
        let (mut sa_p, mut nonce, mut ke_p, mut tsi, mut tsr, mut rekey) =
            (None, None, None, None, None, None);
        let mut resource_info = false;
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) if n.kind == NotifyType::REKEY_SA => rekey = Some(*n),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SA_RESOURCE_INFO => {
                    resource_info = true
                }
                _ => {}
            }
        }
        let refuse = |sa: &mut IkeSa, ctx: &mut Ctx<'_>, kind: NotifyType| {
            sa.respond(ctx, ex, mid, &[notify(kind, &[])], from, to);
        };
        let Some(sa_p) = sa_p else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
        };
        if sa_p.proposals.iter().any(|p| p.protocol == ProtocolId::IKE) {
            return self.respond_rekey_ike(ctx, mid, payloads, from, to);
        }
        let (Some(ni), Some(tsi), Some(tsr)) = (nonce, tsi, tsr) else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
        };
        if self.superseded || self.ike_exchange_pending() {
            tracing::info!(ike_sa = %self.id, "CHILD_SA request while the IKE_SA is rekeyed or closed: TEMPORARY_FAILURE");
            return refuse(self, ctx, NotifyType::TEMPORARY_FAILURE);
        }
        // §1.3.3: REKEY_SA names the SA being rekeyed by the SPI the
        // initiator receives on, i.e. our outbound SPI.
        let old = match rekey {
            None => None,
            Some(n) if n.protocol != ProtocolId::ESP => {
                return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
            }
            Some(NotifyRepr {
                spi: Spi::U32(spi), ..
            }) => match self.children.iter().position(|c| c.outbound_spi == spi) {
                Some(i) => Some(i),
                None => {
                    // §2.25: "A CHILD_SA_NOT_FOUND notification SHOULD be
                    // sent when a peer receives a request to rekey a Child
                    // SA that does not exist. The SA that the initiator
                    // attempted to rekey is indicated by the SPI field in
                    // the Notify payload, which is copied from the SPI
                    // field in the REKEY_SA notification."
                    tracing::info!(ike_sa = %self.id, spi = format_args!("{spi:08x}"), "rekey of an unknown CHILD_SA");
                    let n = PayloadRepr::Notify(NotifyRepr {
                        protocol: ProtocolId::ESP,
                        spi: Spi::U32(spi),
                        kind: NotifyType::CHILD_SA_NOT_FOUND,
                        data: &[],
                    });
                    return self.respond(ctx, ex, mid, &[n], from, to);
                }
            },
            Some(_) => return refuse(self, ctx, NotifyType::INVALID_SYNTAX),
        };
        if let Some(i) = old {
            let c = &self.children[i];
            if matches!(c.state, ChildState::Deleting(_) | ChildState::Rekeyed)
                || c.redundant
                || self.replaced(c.inbound_spi)
            {
                tracing::info!(ike_sa = %self.id, child = %c.name, "rekey of a CHILD_SA being closed: TEMPORARY_FAILURE");
                return refuse(self, ctx, NotifyType::TEMPORARY_FAILURE);
            }
        } else if self.children.len() >= MAX_CHILD_SAS {
            // §3.10.1 NO_ADDITIONAL_SAS: no more Child SAs on this IKE SA.
            return refuse(self, ctx, NotifyType::NO_ADDITIONAL_SAS);
        }
        let old_child = old.map(|i| self.children[i].clone());
        // Which group, if any, does the chosen proposal need? The group
        // of KEi if acceptable (§1.3), else the first acceptable one.
        let conn = self.conn.clone();
        let q = ChildQuery {
            offered: &sa_p.proposals,
            tsi: &tsi,
            tsr: &tsr,
            ignore_ke: false,
            prefer_ke: ke_p.and_then(|k| KeGroup::from_iana(k.group)),
            only: old_child.as_ref().map(|c| &*c.name),
        };
        let want_ke = select_child(&conn, &q, self.local.ip(), self.remote.ip())
            .ok()
            .and_then(|c| c.selected.ke);
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let mut our_ke = None;
        let g_ir = match want_ke {
            None => None,
            Some(g) => {
                let Some(k) = ke_p.filter(|k| k.group == g.iana_id()) else {
                    // §1.3: a KE of another group than the one chosen is
                    // refused with INVALID_KE_PAYLOAD naming ours.
                    let d = g.iana_id().to_be_bytes();
                    return self.respond(
                        ctx,
                        ex,
                        mid,
                        &[notify(NotifyType::INVALID_KE_PAYLOAD, &d)],
                        from,
                        to,
                    );
                };
                let Ok(ours) = KeGroup::generate(g, ctx.rng) else {
                    return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN);
                };
                let public = ours.public_value().to_vec();
                match ours.agree(k.data) {
                    Ok(s) => {
                        our_ke = Some((g, public));
                        Some(s)
                    }
                    Err(_) => return refuse(self, ctx, NotifyType::INVALID_SYNTAX),
                }
            }
        };
        let opts = ChildOpts {
            rekeys: old_child.as_ref().map(|c| c.inbound_spi),
            resource: old_child.as_ref().and_then(|c| c.resource),
            per_resource: old_child.as_ref().is_some_and(|c| c.per_resource),
            resource_info: resource_info && old_child.is_none(),
            ke: our_ke.as_ref().map(|(g, _)| *g),
        };
        let g = g_ir.as_ref().map(|s| s.as_slice());
        match self.create_child(ctx, &q, opts, g, ni, &nr) {
            Ok(answer) => {
                if let Some(c) = &old_child {
                    // The peer replaces it and deletes it: no rekey of our own.
                    if let Some(i) = self.child_by_inbound(c.inbound_spi) {
                        self.children[i].rekey_at = None;
                    }
                }
                let mut out = Vec::with_capacity(6);
                if answer.resource_info {
                    out.push(PayloadRepr::Notify(NotifyRepr::new(
                        NotifyType::SA_RESOURCE_INFO,
                        &[],
                    )));
                }
                out.push(PayloadRepr::Sa(answer.sa.clone()));
                out.push(PayloadRepr::Nonce(NonceRepr { data: &nr }));
                if let Some((g, public)) = &our_ke {
                    out.push(PayloadRepr::Ke(KeRepr {
                        group: g.iana_id(),
                        data: public,
                    }));
                }
                out.push(PayloadRepr::TsI(answer.tsi.clone()));
                out.push(PayloadRepr::TsR(answer.tsr.clone()));
                self.respond(ctx, ex, mid, &out, from, to);
            }
            Err(kind) => refuse(self, ctx, kind),
        }
    }
}
