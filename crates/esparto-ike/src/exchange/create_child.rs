//! CREATE_CHILD_SA for a Child SA (RFC 7296 §1.3.1), a per-resource one
//! (RFC 9611), or the rekey of one (§1.3.3), both roles. An SA payload
//! proposing IKE instead rekeys the IKE SA ([`super::rekey_ike`]).
//!
//! ```text
//! HDR, SK {[N(REKEY_SA),] [N(SA_RESOURCE_INFO),] SA, Ni, [KEi], TSi, TSr}  -->
//!                 <--  HDR, SK {[N(SA_RESOURCE_INFO),] SA, Nr, [KEr], TSi, TSr}
//! ```
//!
//! KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr) with this exchange's nonces
//! (§2.17). With a key exchange group in the child's ESP proposals (PFS),
//! the initiator sends KEi for the first group of the first such proposal
//! (for a rekey: the group the old SA used, if still configured); a KE
//! payload of another group than the responder chose gets
//! INVALID_KE_PAYLOAD naming the one it wants, and the initiator retries
//! with it if it offers it (§1.3), as an IKE SA rekey does ([`super::ke`]).
//!
//! Initiator ([`CreateChild`]). The task carries the RFC 9611 resource
//! (worker) the Child SA is for, which selects the inbound SPI so that it
//! steers to that worker. A rekey: "The REKEY_SA notification MUST be
//! included in a CREATE_CHILD_SA exchange if the purpose of the exchange is
//! to replace an existing ESP or AH SA. The SA being rekeyed is identified
//! by the SPI field in the Notify payload; this is the SPI the exchange
//! initiator would expect in inbound ESP or AH packets" (§1.3.3). It
//! proposes the old SA's (narrowed) selectors — "the new Child SA SHOULD
//! NOT have different Traffic Selectors and algorithms than the old one"
//! (§2.8) — and keeps its resource. What happens on success (collisions,
//! deleting the old SA) is in `sa/children.rs`.
//!
//! Responder ([`IkeSa::respond_create_child`]). A new Child SA or an RFC
//! 9611 sub-SA (with SA_RESOURCE_INFO, up to `per_cpu_max`, then
//! TS_MAX_QUEUE) is negotiated as in IKE_AUTH ([`IkeSa::negotiate_child`]).
//! A rekey is answered like a new Child SA for the same configuration,
//! keeping the old SA's resource; the event names the SA it replaces and
//! holds back the outbound direction until the peer deletes the old SA
//! (see `event.rs`). Collisions (§2.25.1, §2.25.2): "If a peer receives a
//! request to rekey a Child SA that it is currently trying to close, it
//! SHOULD reply with TEMPORARY_FAILURE. If a peer receives a request to
//! rekey a Child SA that it is currently rekeying, it SHOULD reply as
//! usual, and SHOULD prepare to close redundant SAs later based on the
//! nonces (see Section 2.8.1). If a peer receives a request to rekey a
//! Child SA that does not exist, it SHOULD reply with CHILD_SA_NOT_FOUND."
//! And "If a peer receives a request to create or rekey a Child SA when it
//! is currently rekeying the IKE SA, it SHOULD reply with
//! TEMPORARY_FAILURE."

use super::ke::{self, KeOffer};
use super::{Outcome, Received, Task, reason_for};
use crate::child::{
    ChildAnswer, ChildOpts, ChildQuery, ChildSa, ChildState, Install, announce, check_answer,
    install, offer, select_child, ts_from, ts_repr,
};
use crate::config::{ChildConfig, PerCpuSas};
use crate::ctx::Ctx;
use crate::event::{ChildSaEstablished, Event, Reason};
use crate::lifetime::MAX_CHILD_SAS;
use crate::sa::{IkeSa, Refusal};
use crate::ts::TrafficSelector;
use core::net::SocketAddr;
use esparto_crypto::SecretBytes;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProtocolId, SaRepr, Spi,
};
use std::sync::Arc;

/// The payloads of a CREATE_CHILD_SA message that either role reads.
struct ChildPayloads<'a> {
    sa: Option<&'a SaRepr>,
    nonce: Option<&'a [u8]>,
    ke: Option<KeRepr<'a>>,
    tsi: Option<Vec<TrafficSelector>>,
    tsr: Option<Vec<TrafficSelector>>,
    /// REKEY_SA (§1.3.3).
    rekey: Option<NotifyRepr<'a>>,
    /// SA_RESOURCE_INFO (RFC 9611).
    resource_info: bool,
    /// The peer's DEFLATE CPI (IPCOMP_SUPPORTED, §2.22).
    ipcomp: Option<u16>,
}

impl<'a> ChildPayloads<'a> {
    fn collect(payloads: &'a [PayloadRepr<'a>]) -> Self {
        let mut m = ChildPayloads {
            sa: None,
            nonce: None,
            ke: None,
            tsi: None,
            tsr: None,
            rekey: None,
            resource_info: false,
            ipcomp: crate::ipcomp::peer_cpi(payloads),
        };
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => m.sa = Some(s),
                PayloadRepr::Nonce(n) => m.nonce = Some(n.data),
                PayloadRepr::Ke(k) => m.ke = Some(*k),
                PayloadRepr::TsI(t) => m.tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => m.tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) if n.kind == NotifyType::REKEY_SA => m.rekey = Some(*n),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SA_RESOURCE_INFO => {
                    m.resource_info = true
                }
                _ => {}
            }
        }
        m
    }
}

// ---------------------------------------------------------------------------
// Initiator

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
    /// Our CPI, when the child wants IPComp.
    ipcomp_cpi: Option<u16>,
    nonce: Vec<u8>,
    /// With PFS: the group offered, our KE, INVALID_KE_PAYLOAD retries.
    ke: KeOffer,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
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
            ipcomp_cpi: None,
            nonce: Vec::new(),
            ke: KeOffer::default(),
            tsi: Vec::new(),
            tsr: Vec::new(),
        }
    }

    /// Rekey `old`: same configuration, selectors, resource, PFS group.
    pub(crate) fn rekey(old: &ChildSa) -> Self {
        let mut t = CreateChild::new(old.name.clone(), old.resource);
        t.per_resource = old.per_resource;
        t.ke = KeOffer::new(old.ke);
        t.rekey = Some(RekeyOf {
            inbound: old.inbound_spi,
            local_ts: old.local_ts().to_vec(),
            remote_ts: old.remote_ts().to_vec(),
        });
        t
    }

    /// The first SA of an RFC 9611 group (not a rekey, not a sub-SA).
    fn is_fallback(&self, cfg: &ChildConfig) -> bool {
        !self.per_resource && self.rekey.is_none() && cfg.per_cpu_sas != PerCpuSas::No
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
        let spi = self.prepare(sa, ctx, cfg)?;
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
        let ipcomp = self.ipcomp_cpi.map(crate::ipcomp::data);
        if let Some(d) = &ipcomp {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::IPCOMP_SUPPORTED,
                d,
            )));
        }
        payloads.push(PayloadRepr::Sa(SaRepr {
            proposals: offer(&cfg.esp_proposals, spi, true),
        }));
        payloads.push(PayloadRepr::Nonce(NonceRepr { data: &self.nonce }));
        payloads.extend(self.ke.payload().map(PayloadRepr::Ke));
        payloads.push(PayloadRepr::TsI(ts_repr(&self.tsi)));
        payloads.push(PayloadRepr::TsR(ts_repr(&self.tsr)));
        sa.encode(ExchangeType::CREATE_CHILD_SA, false, mid, &payloads)
    }

    /// What the request offers: our inbound SPI (kept across retries), the
    /// PFS group and our KE for it, a fresh nonce, the selectors. Returns
    /// the SPI.
    fn prepare(&mut self, sa: &IkeSa, ctx: &mut Ctx<'_>, cfg: &ChildConfig) -> Result<u32, Reason> {
        // A rekey stays where its predecessor's SPI steers (a peer's
        // per-resource SA has no resource of ours, yet a worker).
        let (resource, like) = (self.resource, self.rekey.as_ref().map(|r| r.inbound));
        let spi = *self.inbound_spi.get_or_insert_with(|| match (resource, like) {
            (None, Some(old)) => ctx.spis.allocate_like(ctx.rng, old),
            _ => ctx.spis.allocate(ctx.rng, resource),
        });
        if cfg.ipcomp && self.ipcomp_cpi.is_none() {
            self.ipcomp_cpi = Some(crate::ipcomp::allocate(ctx.rng));
        }
        let configured = |g: &KeGroup| cfg.esp_proposals.iter().any(|p| p.ke.contains(g));
        let first = || cfg.esp_proposals.iter().find_map(|p| p.ke.first().copied());
        self.ke.prepare(ctx.rng, configured, first)?;
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
        Ok(spi)
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some((kind, data)) = rx.error() {
            if self.follow_invalid_ke(sa, kind, data) {
                return Outcome::Then(Box::new(Task::CreateChild(self)));
            }
            if let Some(cfg) = sa.conn.child(&self.name) {
                crate::child::log_refused(
                    sa.id, &self.name, kind, &cfg.esp_proposals, self.ke.group().is_some(), &self.tsi, &self.tsr,
                );
            }
            return self.failed(sa, ctx, reason_for(kind), Some(kind));
        }
        let m = ChildPayloads::collect(&rx.payloads);
        // RFC 9611: a responder that supports per-resource SAs answers with
        // SA_RESOURCE_INFO; a sub-SA without it is a plain duplicate (RFC
        // 7296 allows those), still usable by our worker.
        let echoed = m.resource_info;
        match self.install(sa, ctx, m) {
            Ok((child, event)) => {
                self.inbound_spi = None;
                self.installed(sa, ctx, child, event, echoed);
                Outcome::Done
            }
            Err(reason) => self.failed(sa, ctx, reason, None),
        }
    }

    /// §1.3: follow INVALID_KE_PAYLOAD to a group of the child's
    /// proposals ([`KeOffer::follow_invalid_ke`]).
    fn follow_invalid_ke(&mut self, sa: &IkeSa, kind: NotifyType, data: &[u8]) -> bool {
        let Some(cfg) = sa.conn.child(&self.name) else {
            return false;
        };
        let offered = |g: &KeGroup| cfg.esp_proposals.iter().any(|p| p.ke.contains(g));
        self.ke.follow_invalid_ke(kind, data, offered)
    }

    /// Check the answer against our request (one of our proposals, with
    /// our group; selectors narrowed, never widened, §2.9) and derive the
    /// Child SA.
    fn install(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        m: ChildPayloads<'_>,
    ) -> Result<(ChildSa, Box<ChildSaEstablished>), Reason> {
        let (Some(sa_p), Some(nonce), Some(tsi), Some(tsr)) = (m.sa, m.nonce, m.tsi, m.tsr) else {
            return Err(Reason::ProtocolError("CREATE_CHILD_SA response incomplete"));
        };
        let cfg = sa
            .conn
            .child(&self.name)
            .cloned()
            .ok_or(Reason::Local("child configuration vanished"))?;
        let answer = check_answer(
            sa.id,
            &cfg.esp_proposals,
            &sa_p.proposals,
            false,
            &self.tsi,
            &self.tsr,
            &tsi,
            &tsr,
        );
        let (selected, suite) = match answer {
            Ok(x) => x,
            Err(reason) => {
                // The responder installed its half: delete it (our inbound
                // SPI names the pair, §1.4.1).
                if let Some(spi) = self.inbound_spi.take() {
                    sa.queue.push_back(Task::DeleteChild(vec![spi]));
                    ctx.spis.release(spi);
                }
                return Err(reason);
            }
        };
        if selected.ke != self.ke.group() {
            return Err(Reason::ProtocolError(
                "responder changed the key exchange group",
            ));
        }
        let g_ir = self.agree(m.ke)?;
        let (Spi::U32(outbound_spi), Some(inbound_spi)) = (selected.spi, self.inbound_spi) else {
            return Err(Reason::ProtocolError("no SPI"));
        };
        let keys = sa.keys.as_ref().ok_or(Reason::Local("no keys"))?;
        install(
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
                ke: self.ke.group(),
                config: &cfg,
                ipcomp: agreed_ipcomp(sa.id, &self.name, self.ipcomp_cpi, m.ipcomp),
            },
        )
    }

    /// g^ir with the responder's KEr, which must be of our group (§1.3);
    /// `None` without PFS.
    fn agree(&mut self, ker: Option<KeRepr<'_>>) -> Result<Option<SecretBytes>, Reason> {
        let group = self.ke.group();
        match (self.ke.take(), ker) {
            (None, _) => Ok(None),
            (Some(ke), Some(k)) if Some(k.group) == group.map(|g| g.iana_id()) => ke
                .agree(k.data)
                .map(Some)
                .map_err(|_| Reason::ProtocolError("invalid key exchange value")),
            (Some(_), _) => Err(Reason::ProtocolError("missing or wrong KEr")),
        }
    }

    /// The new Child SA is ours: a rekey decides between it and a crossing
    /// rekey of the peer; a new SA is announced, and if it is its RFC 9611
    /// group's fallback SA, the group learns whether the peer supports
    /// sub-SAs (`echoed`).
    fn installed(
        self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mut child: ChildSa,
        event: Box<ChildSaEstablished>,
        echoed: bool,
    ) {
        if let Some(r) = self.rekey {
            sa.complete_rekey(ctx, child, event, r.inbound);
            return;
        }
        let fallback = sa
            .conn
            .child(&self.name)
            .is_some_and(|c| self.is_fallback(c));
        announce(ctx, &mut child, event);
        sa.add_child(child);
        if fallback {
            sa.fallback_done(ctx, &self.name, Some(echoed));
        }
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
}

// ---------------------------------------------------------------------------
// Responder

/// A successful answer: the Child SA chosen, our nonce, our KE (PFS).
struct ChildResponse {
    answer: ChildAnswer,
    nr: Vec<u8>,
    ke: Option<(KeGroup, Vec<u8>)>,
}

impl IkeSa {
    /// A CREATE_CHILD_SA request: the IKE SA's rekey if its SA payload
    /// proposes IKE, else a new Child SA or the rekey of one.
    pub(crate) fn respond_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::CREATE_CHILD_SA;
        let m = ChildPayloads::collect(payloads);
        if m.sa
            .is_some_and(|s| s.proposals.iter().any(|p| p.protocol == ProtocolId::IKE))
        {
            return self.respond_rekey_ike(ctx, mid, payloads, from, to);
        }
        match self.answer_create_child(ctx, &m) {
            Ok(r) => {
                let out = child_response(&r);
                self.respond(ctx, ex, mid, &out, from, to);
            }
            Err(refusal) => self.refuse(ctx, ex, mid, refusal, from, to),
        }
    }

    /// Check the request, negotiate the Child SA and install it.
    fn answer_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        m: &ChildPayloads<'_>,
    ) -> Result<ChildResponse, Refusal> {
        let (Some(sa_p), Some(ni), Some(tsi), Some(tsr)) = (m.sa, m.nonce, &m.tsi, &m.tsr) else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        if self.superseded || self.ike_exchange_pending() {
            tracing::info!(ike_sa = %self.id, "CHILD_SA request while the IKE_SA is rekeyed or closed: TEMPORARY_FAILURE");
            return Err(NotifyType::TEMPORARY_FAILURE.into());
        }
        let old = self.child_to_rekey(m.rekey)?;
        let q = ChildQuery {
            offered: &sa_p.proposals,
            tsi,
            tsr,
            ignore_ke: false,
            prefer_ke: m.ke.and_then(|k| KeGroup::from_iana(k.group)),
            only: old.as_ref().map(|c| &*c.name),
        };
        // Which group, if any, does the chosen proposal need? The group
        // of KEi if acceptable (§1.3), else the first acceptable one.
        let conn = self.conn.clone();
        let want_ke = select_child(&conn, &q, self.local.ip(), self.remote.ip())
            .ok()
            .and_then(|c| c.selected.ke);
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let ke = match want_ke {
            Some(g) => Some(ke::answer(ctx.rng, g, m.ke)?),
            None => None,
        };
        let opts = ChildOpts {
            rekeys: old.as_ref().map(|c| c.inbound_spi),
            resource: old.as_ref().and_then(|c| c.resource),
            per_resource: old.as_ref().is_some_and(|c| c.per_resource),
            resource_info: m.resource_info && old.is_none(),
            ke: ke.as_ref().map(|k| k.group),
            ipcomp: m.ipcomp,
        };
        let g_ir = ke.as_ref().map(|k| k.shared.as_slice());
        let answer = self.negotiate_child(ctx, &q, opts, g_ir, ni, &nr)?;
        if let Some(c) = &old {
            // The peer replaces it and deletes it: no rekey of our own.
            if let Some(i) = self.child_by_inbound(c.inbound_spi) {
                self.children[i].rekey_at = None;
            }
        }
        Ok(ChildResponse {
            answer,
            nr,
            ke: ke.map(|k| (k.group, k.public)),
        })
    }

    /// The Child SA a REKEY_SA notify names (§1.3.3: by the SPI the
    /// initiator receives on, i.e. our outbound SPI), if it may be rekeyed
    /// now; without REKEY_SA, whether another Child SA fits on this IKE SA.
    fn child_to_rekey(&self, rekey: Option<NotifyRepr<'_>>) -> Result<Option<ChildSa>, Refusal> {
        let Some(n) = rekey else {
            if self.children.len() >= MAX_CHILD_SAS {
                // §3.10.1 NO_ADDITIONAL_SAS: no more Child SAs on this IKE SA.
                return Err(NotifyType::NO_ADDITIONAL_SAS.into());
            }
            return Ok(None);
        };
        let (ProtocolId::ESP, Spi::U32(spi)) = (n.protocol, n.spi) else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        let Some(c) = self.children.iter().find(|c| c.outbound_spi == spi) else {
            // §2.25: "A CHILD_SA_NOT_FOUND notification SHOULD be sent when
            // a peer receives a request to rekey a Child SA that does not
            // exist."
            tracing::info!(ike_sa = %self.id, spi = format_args!("{spi:08x}"), "rekey of an unknown CHILD_SA");
            return Err(Refusal::ChildSaNotFound(spi));
        };
        if matches!(c.state, ChildState::Deleting(_) | ChildState::Rekeyed)
            || c.redundant
            || self.replaced(c.inbound_spi)
        {
            tracing::info!(ike_sa = %self.id, child = %c.name, "rekey of a CHILD_SA being closed: TEMPORARY_FAILURE");
            return Err(NotifyType::TEMPORARY_FAILURE.into());
        }
        Ok(Some(c.clone()))
    }
}

/// The initiator's IPComp from our CPI and the answer's: a responder that
/// did not accept leaves the Child SA without it (logged, not refused).
pub(crate) fn agreed_ipcomp(
    ike_sa: crate::event::IkeSaId,
    child: &str,
    ours: Option<u16>,
    theirs: Option<u16>,
) -> Option<crate::ipcomp::IpcompCpis> {
    match (ours, theirs) {
        (Some(inbound), Some(outbound)) => Some(crate::ipcomp::IpcompCpis { inbound, outbound }),
        (Some(_), None) => {
            tracing::info!(%ike_sa, %child, "peer did not accept IPComp: CHILD_SA without it");
            None
        }
        _ => None,
    }
}

/// `[N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SA, Nr, [KEr,] TSi, TSr`.
fn child_response(r: &ChildResponse) -> Vec<PayloadRepr<'_>> {
    let mut out = Vec::with_capacity(7);
    if r.answer.resource_info {
        out.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::SA_RESOURCE_INFO,
            &[],
        )));
    }
    out.extend(r.answer.ipcomp_notify());
    out.push(PayloadRepr::Sa(r.answer.sa.clone()));
    out.push(PayloadRepr::Nonce(NonceRepr { data: &r.nr }));
    if let Some((g, public)) = &r.ke {
        out.push(PayloadRepr::Ke(KeRepr {
            group: g.iana_id(),
            data: public,
        }));
    }
    out.push(PayloadRepr::TsI(r.answer.tsi.clone()));
    out.push(PayloadRepr::TsR(r.answer.tsr.clone()));
    out
}
