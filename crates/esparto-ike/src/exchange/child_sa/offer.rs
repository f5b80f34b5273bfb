//! The initiator's Child SA negotiation, in IKE_AUTH or CREATE_CHILD_SA
//! ([`ChildOffer`]): the request's Child SA payloads, the answer's check,
//! and the Child SA installed or the failure reported.
//!
//! An offer is made once per request: our inbound SPI and CPI are kept
//! across retries (a retransmission and an INVALID_KE_PAYLOAD retry offer
//! the same SPI); the nonce and, with PFS, the KE are made per request.
//! A rekey (§1.3.3): "The REKEY_SA notification MUST be included in a
//! CREATE_CHILD_SA exchange if the purpose of the exchange is to replace
//! an existing ESP or AH SA. The SA being rekeyed is identified by the SPI
//! field in the Notify payload; this is the SPI the exchange initiator
//! would expect in inbound ESP or AH packets". It proposes the old SA's
//! (narrowed) selectors — "the new Child SA SHOULD NOT have different
//! Traffic Selectors and algorithms than the old one" (§2.8) — and keeps
//! its resource and PFS group.
//!
//! The answer. A CREATE_CHILD_SA answer with an error notify refuses the
//! Child SA (INVALID_KE_PAYLOAD is followed, `exchange/ke.rs`); in
//! IKE_AUTH, where notifies may concern the IKE SA, only an answer without
//! the Child SA's payloads does (§2.21.2: when only the Child SA fails,
//! the IKE SA is created as usual). Otherwise the answer must hold one of our
//! proposals with a non-zero SPI, of our group if we sent a KE, and
//! selectors inside ours (§2.9: narrowed, never widened); if it does not,
//! the responder installed a half we do not want, and a Delete for it
//! (named by our inbound SPI, §1.4.1) is queued. IPComp holds if the
//! responder answered IPCOMP_SUPPORTED (§2.22); SA_RESOURCE_INFO echoed
//! with an RFC 9611 group's fallback SA says the peer supports sub-SAs.

use super::{Carrier, ChildPayloads, ts_repr};
use crate::child::{ChildSa, Install, announce, install};
use crate::config::{ChildConfig, PerCpuSas};
use crate::ctx::Ctx;
use crate::diag;
use crate::event::{ChildSaEstablished, Event, IkeSaId, Reason};
use crate::exchange::ke::KeOffer;
use crate::exchange::{Outcome, Task, reason_for};
use crate::ipcomp::{self, IpcompCpis};
use crate::keys::{IkeKeys, esp_suite};
use crate::proposal::{Proposal, Selected};
use crate::sa::IkeSa;
use crate::ts::{TrafficSelector, is_subset_of_any};
use esparto_crypto::ike::KeGroup;
use esparto_crypto::{EspSuite, SecretBytes};
use esparto_wire::ike::{
    NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProposalRepr, ProtocolId, SaRepr, Spi,
};
use std::sync::Arc;

/// The SA a rekey replaces.
#[derive(Debug, Clone)]
pub(crate) struct RekeyOf {
    /// Its inbound SPI (the REKEY_SA notify's SPI).
    pub(crate) inbound: u32,
    /// Its negotiated selectors, ours and the peer's.
    pub(crate) local_ts: Vec<TrafficSelector>,
    pub(crate) remote_ts: Vec<TrafficSelector>,
}

/// One Child SA we ask for, from the request to the installed Child SA.
pub(crate) struct ChildOffer {
    /// The child configuration.
    pub(crate) name: Arc<str>,
    /// The RFC 9611 resource (worker) it is for: its inbound SPI steers
    /// there.
    pub(crate) resource: Option<u16>,
    /// RFC 9611: a per-resource SA (sends SA_RESOURCE_INFO).
    pub(crate) per_resource: bool,
    /// §1.3.3: the SA this one replaces.
    pub(crate) rekey: Option<RekeyOf>,
    carrier: Carrier,
    inbound_spi: Option<u32>,
    /// Our CPI, when the child wants IPComp, and its notify data.
    ipcomp_cpi: Option<u16>,
    ipcomp_data: Option<[u8; 3]>,
    /// The SA_RESOURCE_INFO data: the resource's number.
    resource_id: Option<[u8; 2]>,
    /// CREATE_CHILD_SA: our nonce, fresh for each request.
    nonce: Vec<u8>,
    /// CREATE_CHILD_SA with PFS: the group, our KE, INVALID_KE retries.
    ke: KeOffer,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
}

impl ChildOffer {
    /// A CREATE_CHILD_SA for the child configuration `name`, for
    /// `resource` if given.
    pub(crate) fn new(name: Arc<str>, resource: Option<u16>) -> Self {
        Self::carried(Carrier::CreateChild, name, resource)
    }

    /// The first Child SA, in IKE_AUTH.
    pub(crate) fn first(name: Arc<str>, resource: Option<u16>) -> Self {
        Self::carried(Carrier::IkeAuth, name, resource)
    }

    fn carried(carrier: Carrier, name: Arc<str>, resource: Option<u16>) -> Self {
        ChildOffer {
            name,
            resource,
            per_resource: false,
            rekey: None,
            carrier,
            inbound_spi: None,
            ipcomp_cpi: None,
            ipcomp_data: None,
            resource_id: None,
            nonce: Vec::new(),
            ke: KeOffer::default(),
            tsi: Vec::new(),
            tsr: Vec::new(),
        }
    }

    /// Rekey `old` (CREATE_CHILD_SA): same configuration, selectors,
    /// resource, PFS group.
    pub(crate) fn rekey(old: &ChildSa) -> Self {
        let mut o = ChildOffer::new(old.name.clone(), old.resource);
        o.per_resource = old.per_resource;
        o.ke = KeOffer::new(old.ke);
        o.rekey = Some(RekeyOf {
            inbound: old.inbound_spi,
            local_ts: old.local_ts().to_vec(),
            remote_ts: old.remote_ts().to_vec(),
        });
        o
    }

    /// Give back our inbound SPI, if the offer ends without a Child SA.
    pub(crate) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(spi) = self.inbound_spi {
            ctx.spis.release(spi);
        }
    }

    /// Before each request: our inbound SPI (made once) and CPI, the PFS
    /// group and our KE for it, a fresh nonce, the selectors.
    pub(crate) fn prepare(&mut self, sa: &IkeSa, ctx: &mut Ctx<'_>, cfg: &ChildConfig) -> Result<(), Reason> {
        // A rekey stays where its predecessor's SPI steers (a peer's
        // per-resource SA has no resource of ours, yet a worker).
        let (resource, like) = (self.resource, self.rekey.as_ref().map(|r| r.inbound));
        self.inbound_spi.get_or_insert_with(|| match (resource, like) {
            (None, Some(old)) => ctx.spis.allocate_like(ctx.rng, old),
            _ => ctx.spis.allocate(ctx.rng, resource),
        });
        self.resource_id = resource.map(u16::to_be_bytes);
        if cfg.ipcomp && self.ipcomp_cpi.is_none() {
            let cpi = ipcomp::allocate(ctx.rng);
            self.ipcomp_cpi = Some(cpi);
            self.ipcomp_data = Some(ipcomp::data(cpi));
        }
        if self.carrier == Carrier::CreateChild {
            // The group of the old SA (a rekey) or of an INVALID_KE_PAYLOAD
            // while configured, else the first of the first proposal
            // that has one.
            let configured = |g: &KeGroup| cfg.esp_proposals.iter().any(|p| p.ke.contains(g));
            let first = || cfg.esp_proposals.iter().find_map(|p| p.ke.first().copied());
            self.ke.prepare(ctx.rng, configured, first)?;
            self.nonce = vec![0; ctx.config.nonce_len];
            ctx.rng.fill_public(&mut self.nonce);
        }
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
        Ok(())
    }

    /// The request's Child SA payloads, after [`prepare`](Self::prepare):
    /// `[N(REKEY_SA),] [N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SA,
    /// [Ni,] [KEi,] TSi, TSr`.
    pub(crate) fn payloads(&self, cfg: &ChildConfig) -> Result<Vec<PayloadRepr<'_>>, Reason> {
        let spi = self.inbound_spi.ok_or(Reason::Local("no inbound SPI"))?;
        let mut out = Vec::with_capacity(8);
        if let Some(r) = &self.rekey {
            out.push(PayloadRepr::Notify(NotifyRepr {
                protocol: ProtocolId::ESP,
                spi: Spi::U32(r.inbound),
                kind: NotifyType::REKEY_SA,
                data: &[],
            }));
        }
        if self.per_resource || self.is_fallback(cfg) {
            // RFC 9611: with the group's first SA and with each sub-SA. The
            // identifier is opaque to the peer ("SHOULD only use it for
            // debugging purposes"); we send the worker number (none for
            // the fallback SA).
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SA_RESOURCE_INFO,
                self.resource_id.as_ref().map_or(&[][..], |b| &b[..]),
            )));
        }
        if let Some(d) = &self.ipcomp_data {
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::IPCOMP_SUPPORTED,
                d,
            )));
        }
        out.push(PayloadRepr::Sa(SaRepr {
            proposals: proposals(&cfg.esp_proposals, spi, self.carrier.with_ke()),
        }));
        if self.carrier == Carrier::CreateChild {
            out.push(PayloadRepr::Nonce(NonceRepr { data: &self.nonce }));
        }
        out.extend(self.ke.payload().map(PayloadRepr::Ke));
        out.push(PayloadRepr::TsI(ts_repr(&self.tsi)));
        out.push(PayloadRepr::TsR(ts_repr(&self.tsr)));
        Ok(out)
    }

    /// The answer to our request arrived (in IKE_AUTH: on an IKE SA just
    /// authenticated); `error` is its first error notify. Install the
    /// Child SA, retry with the group INVALID_KE_PAYLOAD names, or report
    /// why not.
    pub(crate) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        error: Option<(NotifyType, &[u8])>,
        m: &ChildPayloads<'_>,
    ) -> Outcome {
        let refused = match self.carrier {
            Carrier::CreateChild => error,
            Carrier::IkeAuth => error.filter(|_| m.child_sa().is_none()),
        };
        if let Some((kind, data)) = refused {
            if self.follows_invalid_ke(sa, kind, data) {
                return Outcome::Then(Box::new(Task::CreateChild(self)));
            }
            if let Some(cfg) = sa.conn.child(&self.name) {
                log_refused(sa.id, &self.name, kind, &cfg.esp_proposals, self.ke.group().is_some(), &self.tsi, &self.tsr);
            }
            return self.failed(sa, ctx, reason_for(kind), Some(kind));
        }
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

    /// §1.3, CREATE_CHILD_SA only: follow INVALID_KE_PAYLOAD to a group of
    /// the child's proposals ([`KeOffer::follow_invalid_ke`]).
    fn follows_invalid_ke(&mut self, sa: &IkeSa, kind: NotifyType, data: &[u8]) -> bool {
        let Some(cfg) = sa.conn.child(&self.name) else {
            return false;
        };
        self.carrier == Carrier::CreateChild
            && self
                .ke
                .follow_invalid_ke(kind, data, |g| cfg.esp_proposals.iter().any(|p| p.ke.contains(g)))
    }

    /// Check the answer against our request and derive the Child SA.
    fn install(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        m: &ChildPayloads<'_>,
    ) -> Result<(ChildSa, Box<ChildSaEstablished>), Reason> {
        let Some((sa_p, tsi, tsr)) = m.child_sa() else {
            return Err(self.incomplete());
        };
        if self.carrier == Carrier::CreateChild && m.nonce.is_none() {
            return Err(self.incomplete());
        }
        let cfg = sa
            .conn
            .child(&self.name)
            .cloned()
            .ok_or(Reason::Local("child configuration vanished"))?;
        let (selected, suite) = match self.check(sa.id, &cfg, &sa_p.proposals, tsi, tsr) {
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
        let g_ir = self.agree(m)?;
        let (Spi::U32(outbound_spi), Some(inbound_spi)) = (selected.spi, self.inbound_spi) else {
            return Err(Reason::ProtocolError("no SPI"));
        };
        let (keys, ni, nr) = self.keying(sa, m)?;
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
                ni,
                nr,
                local_ts: tsi.to_vec(),
                remote_ts: tsr.to_vec(),
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

    /// One of our proposals, of the suite it names, and selectors inside
    /// ours ([`check_answer`]).
    fn check(
        &self,
        ike_sa: IkeSaId,
        cfg: &ChildConfig,
        answer: &[ProposalRepr],
        tsi: &[TrafficSelector],
        tsr: &[TrafficSelector],
    ) -> Result<(Selected, EspSuite), Reason> {
        let sent = (&self.tsi[..], &self.tsr[..]);
        check_answer(ike_sa, &cfg.esp_proposals, answer, !self.carrier.with_ke(), sent, (tsi, tsr))
    }

    /// g^ir with the responder's KEr, which must be of our group (§1.3);
    /// `None` without PFS.
    fn agree(&mut self, m: &ChildPayloads<'_>) -> Result<Option<SecretBytes>, Reason> {
        let group = self.ke.group();
        match (self.ke.take(), m.ke) {
            (None, _) => Ok(None),
            (Some(ke), Some(k)) if Some(k.group) == group.map(|g| g.iana_id()) => ke
                .agree(k.data)
                .map(Some)
                .map_err(|_| Reason::ProtocolError("invalid key exchange value")),
            (Some(_), _) => Err(Reason::ProtocolError("missing or wrong KEr")),
        }
    }

    /// What KEYMAT is cut from (§2.17): SK_d, and the nonces of this
    /// exchange — IKE_SA_INIT's for the first Child SA, else ours and the
    /// answer's.
    fn keying<'s>(
        &'s self,
        sa: &'s IkeSa,
        m: &ChildPayloads<'s>,
    ) -> Result<(&'s IkeKeys, &'s [u8], &'s [u8]), Reason> {
        match self.carrier {
            Carrier::CreateChild => {
                let keys = sa.keys.as_ref().ok_or(Reason::Local("no keys"))?;
                let nr = m.nonce.ok_or_else(|| self.incomplete())?;
                Ok((keys, &self.nonce, nr))
            }
            Carrier::IkeAuth => match (sa.keys.as_ref(), sa.handshake.as_deref()) {
                (Some(keys), Some(hs)) => Ok((keys, &hs.ni, &hs.nr)),
                _ => Err(Reason::Local("IKE_SA_INIT state gone")),
            },
        }
    }

    /// An answer without the Child SA's payloads.
    fn incomplete(&self) -> Reason {
        Reason::ProtocolError(match self.carrier {
            Carrier::IkeAuth => "no Child SA in IKE_AUTH response",
            Carrier::CreateChild => "CREATE_CHILD_SA response incomplete",
        })
    }

    /// The first SA of an RFC 9611 group (not a rekey, not a sub-SA).
    fn is_fallback(&self, cfg: &ChildConfig) -> bool {
        !self.per_resource && self.rekey.is_none() && cfg.per_cpu_sas != PerCpuSas::No
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
    /// SA decide about the old SA; an RFC 9611 group learns it has no
    /// fallback SA.
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

/// Our ESP proposals, numbered, carrying our inbound SPI; KE transforms
/// only where the exchange has a KE payload (`with_ke`).
fn proposals(ours: &[Proposal], inbound_spi: u32, with_ke: bool) -> Vec<ProposalRepr> {
    ours.iter()
        .enumerate()
        .map(|(i, p)| p.to_wire((i + 1) as u8, Spi::U32(inbound_spi), with_ke))
        .collect()
}

/// Check the responder's SA and selectors against what we `sent` (TSi,
/// TSr): a single proposal from our list with a non-zero SPI and a suite we
/// implement, selectors narrowed, never widened (§2.9). Returns the
/// selection (its `spi` is the responder's inbound SPI, our outbound) and
/// the suite.
fn check_answer(
    ike_sa: IkeSaId,
    ours: &[Proposal],
    answer: &[ProposalRepr],
    ignore_ke: bool,
    sent: (&[TrafficSelector], &[TrafficSelector]),
    got: (&[TrafficSelector], &[TrafficSelector]),
) -> Result<(Selected, EspSuite), Reason> {
    let Some(selected) = Proposal::accept_response(ours, answer, ignore_ke) else {
        let configured = diag::configured(ours, !ignore_ke);
        let m = diag::ProposalMismatch { received: answer, configured: &configured };
        tracing::info!(%ike_sa, "CHILD_SA answer refused, the responder chose a proposal we did not offer: {m}");
        return Err(Reason::ProtocolError("responder chose a proposal we did not offer"));
    };
    if !matches!(selected.spi, Spi::U32(s) if s != 0) {
        return Err(Reason::ProtocolError("ESP proposal without a 4-octet SPI"));
    }
    let suite = esp_suite(&selected).ok_or(Reason::ProtocolError("no ESP suite"))?;
    if !is_subset_of_any(got.0, sent.0) || !is_subset_of_any(got.1, sent.1) {
        let configured = [("", sent.0.to_vec(), sent.1.to_vec())];
        let m = diag::TsMismatch { received: got, configured: &configured };
        tracing::info!(%ike_sa, "CHILD_SA answer refused, the responder widened the traffic selectors: {m}");
        return Err(Reason::TsUnacceptable);
    }
    Ok((selected, suite))
}

/// The responder refused our request for `child` with `kind`; for
/// NO_PROPOSAL_CHOSEN and TS_UNACCEPTABLE, log what we offered (`with_ke`:
/// our PFS groups were part of it).
fn log_refused(
    ike_sa: IkeSaId,
    child: &str,
    kind: NotifyType,
    offered: &[Proposal],
    with_ke: bool,
    tsi: &[TrafficSelector],
    tsr: &[TrafficSelector],
) {
    match kind {
        NotifyType::NO_PROPOSAL_CHOSEN => {
            let sent = diag::configured(offered, with_ke);
            tracing::info!(%ike_sa, child, "CHILD_SA refused by the peer (NO_PROPOSAL_CHOSEN), configured proposals: {}", diag::Proposals(&sent));
        }
        NotifyType::TS_UNACCEPTABLE => {
            tracing::info!(%ike_sa, child, "CHILD_SA refused by the peer (TS_UNACCEPTABLE), configured TS {} === {}", diag::Selectors(tsi), diag::Selectors(tsr));
        }
        _ => {}
    }
}

/// Our IPComp from our CPI and the answer's: a responder that did not
/// accept leaves the Child SA without it (logged, not refused).
fn agreed_ipcomp(ike_sa: IkeSaId, child: &str, ours: Option<u16>, theirs: Option<u16>) -> Option<IpcompCpis> {
    match (ours, theirs) {
        (Some(inbound), Some(outbound)) => Some(IpcompCpis { inbound, outbound }),
        (Some(_), None) => {
            tracing::info!(%ike_sa, %child, "peer did not accept IPComp: CHILD_SA without it");
            None
        }
        _ => None,
    }
}
