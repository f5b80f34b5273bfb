//! The responder's Child SA negotiation, in IKE_AUTH or CREATE_CHILD_SA
//! ([`IkeSa::answer_child`]): the choice, the Child SA installed, and the
//! answer's payloads — or the notify refusing the request.
//!
//! The responder picks the first child configuration of the connection
//! for which both TSi and TSr narrow to something non-empty *and* one of
//! its ESP proposals matches ([`select_child`], §2.9, §3.3); the order of
//! the errors follows what the RFC asks to report (TS_UNACCEPTABLE when no
//! selector fits any child, NO_PROPOSAL_CHOSEN when the selectors fit but
//! the transforms do not). In CREATE_CHILD_SA the chosen proposal may need
//! a key exchange (PFS): the group of KEi if acceptable (§1.3), else the
//! first acceptable one, and a KEi of another group gets
//! INVALID_KE_PAYLOAD. A rekey is answered like a new Child SA for the
//! same configuration, keeping the old SA's resource; its outbound
//! direction is held back until the peer deletes the old SA (see
//! `event.rs`). RFC 9611: the first SA of a per-CPU child is its group's
//! fallback SA; later ones with SA_RESOURCE_INFO are the peer's sub-SAs,
//! up to `per_cpu_max`, then TS_MAX_QUEUE.

use super::{Carrier, ChildPayloads, ts_repr};
use crate::child::{ChildSa, Install, announce, install};
use crate::config::{ChildConfig, ConnectionConfig, PerCpuSas};
use crate::ctx::Ctx;
use crate::diag;
use crate::event::{Event, Reason};
use crate::exchange::ke::{self, KeAnswer};
use crate::ipcomp::{self, IpcompCpis};
use crate::keys::esp_suite;
use crate::proposal::{Proposal, Protocol, Selected};
use crate::sa::{IkeSa, Refusal};
use crate::ts::{TrafficSelector, narrow};
use core::net::IpAddr;
use esparto_crypto::EspSuite;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProposalRepr, SaRepr, Spi, TsRepr,
};
use std::sync::Arc;

/// Where the Child SA a responder negotiates gets its keys (§2.17), and
/// what it replaces.
pub(crate) enum Keying<'a> {
    /// IKE_AUTH's first Child SA: the IKE_SA_INIT nonces, no KE.
    Initial {
        /// Ni of IKE_SA_INIT.
        ni: &'a [u8],
        /// Nr of IKE_SA_INIT.
        nr: &'a [u8],
    },
    /// CREATE_CHILD_SA: the request's Ni (and KEi), a fresh Nr (and KEr).
    Fresh {
        /// The Child SA a rekey replaces (§1.3.3), if it is one.
        rekeys: Option<&'a ChildSa>,
    },
}

/// A successful answer: what the Child SA part of the response carries.
pub(crate) struct ChildAnswer {
    /// The child configuration chosen.
    pub(crate) child: Arc<str>,
    /// Answer with SA_RESOURCE_INFO (RFC 9611).
    pub(crate) resource_info: bool,
    sa: SaRepr,
    tsi: TsRepr,
    tsr: TsRepr,
    /// IPCOMP_SUPPORTED data accepting IPComp (§2.22).
    ipcomp: Option<[u8; 3]>,
    /// CREATE_CHILD_SA: our nonce, and with PFS our KE.
    nr: Option<Vec<u8>>,
    ke: Option<(KeGroup, Vec<u8>)>,
}

impl ChildAnswer {
    /// `[N(SA_RESOURCE_INFO),] [N(IPCOMP_SUPPORTED),] SA, [Nr,] [KEr,]
    /// TSi, TSr`.
    pub(crate) fn payloads(&self) -> Vec<PayloadRepr<'_>> {
        let mut out = Vec::with_capacity(7);
        if self.resource_info {
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SA_RESOURCE_INFO,
                &[],
            )));
        }
        if let Some(d) = &self.ipcomp {
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::IPCOMP_SUPPORTED,
                d,
            )));
        }
        out.push(PayloadRepr::Sa(self.sa.clone()));
        if let Some(nr) = &self.nr {
            out.push(PayloadRepr::Nonce(NonceRepr { data: nr }));
        }
        if let Some((g, public)) = &self.ke {
            out.push(PayloadRepr::Ke(KeRepr {
                group: g.iana_id(),
                data: public,
            }));
        }
        out.push(PayloadRepr::TsI(self.tsi.clone()));
        out.push(PayloadRepr::TsR(self.tsr.clone()));
        out
    }
}

impl IkeSa {
    /// Responder: negotiate and install the Child SA that a request's
    /// payloads `m` ask for, keyed as `keying` says. Returns the answer, or
    /// the notify refusing the request (reported to the driver as
    /// `ChildSaFailed` where no Child SA could be chosen).
    pub(crate) fn answer_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        m: &ChildPayloads<'_>,
        keying: Keying<'_>,
    ) -> Result<ChildAnswer, Refusal> {
        let Some((sa_p, tsi, tsr)) = m.child_sa() else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        match keying {
            Keying::Initial { ni, nr } => {
                let q = ChildQuery {
                    offered: &sa_p.proposals,
                    tsi,
                    tsr,
                    carrier: Carrier::IkeAuth,
                    prefer_ke: None,
                    only: None,
                };
                let opts = ChildOpts {
                    resource_info: m.resource_info,
                    ipcomp: m.ipcomp,
                    ..ChildOpts::default()
                };
                Ok(self.negotiate_child(ctx, &q, opts, None, ni, nr)?)
            }
            Keying::Fresh { rekeys } => {
                let Some(ni) = m.nonce else {
                    return Err(NotifyType::INVALID_SYNTAX.into());
                };
                let q = ChildQuery {
                    offered: &sa_p.proposals,
                    tsi,
                    tsr,
                    carrier: Carrier::CreateChild,
                    prefer_ke: m.ke.and_then(|k| KeGroup::from_iana(k.group)),
                    only: rekeys.map(|c| &*c.name),
                };
                // Which group, if any, does the chosen proposal need? The
                // group of KEi if acceptable (§1.3), else the first
                // acceptable one.
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
                    rekeys: rekeys.map(|c| c.inbound_spi),
                    resource: rekeys.and_then(|c| c.resource),
                    per_resource: rekeys.is_some_and(|c| c.per_resource),
                    resource_info: m.resource_info && rekeys.is_none(),
                    ke: ke.as_ref().map(|k| k.group),
                    ipcomp: m.ipcomp,
                };
                let g_ir = ke.as_ref().map(|k| k.shared.as_slice());
                let mut answer = self.negotiate_child(ctx, &q, opts, g_ir, ni, &nr)?;
                answer.ke = ke.map(|KeAnswer { group, public, .. }| (group, public));
                answer.nr = Some(nr);
                Ok(answer)
            }
        }
    }

    /// Choose, allocate and install the Child SA (`g_ir` with PFS, `ni`
    /// and `nr` this exchange's nonces, or IKE_SA_INIT's). Returns what to
    /// answer with: the SA and selectors chosen, or the notify refusing
    /// the request.
    fn negotiate_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &ChildQuery<'_>,
        opts: ChildOpts,
        g_ir: Option<&[u8]>,
        ni: &[u8],
        nr: &[u8],
    ) -> Result<ChildAnswer, NotifyType> {
        let conn = self.conn.clone();
        let choice = self.choose_child(ctx, &conn, q)?;
        let Spi::U32(outbound_spi) = choice.selected.spi else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN);
        };
        let cfg = choice.config;
        let (resource_info, per_resource) = self.resource_role(cfg, &opts)?;
        let Some(keys) = self.keys.as_ref() else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN);
        };
        let inbound_spi = inbound_spi(ctx, &opts, per_resource, outbound_spi);
        // §2.22: IPComp if the peer offered DEFLATE and we want it; an
        // offer we cannot take just leaves it out.
        let ipcomp = match (cfg.ipcomp, opts.ipcomp) {
            (true, Some(outbound)) => Some(IpcompCpis {
                inbound: ipcomp::allocate(ctx.rng),
                outbound,
            }),
            _ => None,
        };
        let answer = ChildAnswer {
            child: cfg.name.clone(),
            resource_info,
            sa: SaRepr {
                proposals: vec![
                    choice
                        .selected
                        .to_wire(Protocol::Esp, Spi::U32(inbound_spi)),
                ],
            },
            tsi: ts_repr(&choice.tsi),
            tsr: ts_repr(&choice.tsr),
            ipcomp: ipcomp.map(|c| ipcomp::data(c.inbound)),
            nr: None,
            ke: None,
        };
        let installed = install(
            ctx,
            Install {
                ike_sa: self.id,
                connection: conn.name.clone(),
                child: cfg.name.clone(),
                initiator: false,
                inbound_spi,
                outbound_spi,
                suite: choice.suite,
                esn: choice.selected.esn,
                prf: keys.prf,
                sk_d: keys.sk_d(),
                g_ir,
                ni,
                nr,
                local_ts: choice.tsr,
                remote_ts: choice.tsi,
                local: self.local,
                remote: self.remote,
                encap: self.encap(),
                resource: opts.resource,
                rekeys: opts.rekeys,
                per_resource,
                // §2.8: the initiator installs the new SA only when our
                // answer arrives; hold the outbound side back until it
                // deletes the old SA (see `event.rs`).
                outbound_active: opts.rekeys.is_none(),
                ke: opts.ke,
                config: cfg,
                ipcomp,
            },
        );
        match installed {
            Ok((mut c, event)) => {
                announce(ctx, &mut c, event);
                self.add_child(c);
                Ok(answer)
            }
            Err(_) => {
                ctx.spis.release(inbound_spi);
                Err(NotifyType::NO_PROPOSAL_CHOSEN)
            }
        }
    }

    /// [`select_child`], with a refusal reported to the driver and turned
    /// into the notify that answers it.
    fn choose_child<'c>(
        &self,
        ctx: &mut Ctx<'_>,
        conn: &'c ConnectionConfig,
        q: &ChildQuery<'_>,
    ) -> Result<ChildChoice<'c>, NotifyType> {
        select_child(conn, q, self.local.ip(), self.remote.ip()).map_err(|reason| {
            let children = || conn.children.iter().filter(|c| q.only.is_none_or(|n| n == &*c.name));
            match reason {
                Reason::NoProposalChosen => {
                    let configured = diag::configured(children().flat_map(|c| &c.esp_proposals), q.carrier.with_ke());
                    let m = diag::ProposalMismatch { received: q.offered, configured: &configured };
                    tracing::info!(ike_sa = %self.id, "CHILD_SA request refused, no proposal chosen: {m}");
                }
                Reason::TsUnacceptable => {
                    let configured: Vec<_> = children()
                        .map(|c| (&*c.name, c.remote_selectors(self.remote.ip()), c.local_selectors(self.local.ip())))
                        .collect();
                    let m = diag::TsMismatch { received: (q.tsi, q.tsr), configured: &configured };
                    tracing::info!(ike_sa = %self.id, "CHILD_SA request refused, traffic selectors unacceptable: {m}");
                }
                _ => tracing::info!(ike_sa = %self.id, ?reason, "CHILD_SA request refused"),
            }
            ctx.events.push_back(Event::ChildSaFailed {
                ike_sa: self.id,
                connection: conn.name.clone(),
                child: None,
                reason,
            });
            match reason {
                Reason::TsUnacceptable => NotifyType::TS_UNACCEPTABLE,
                _ => NotifyType::NO_PROPOSAL_CHOSEN,
            }
        })
    }

    /// RFC 9611 for a request carrying SA_RESOURCE_INFO with a per-CPU
    /// child: the group's first SA is its fallback; later ones are the
    /// peer's sub-SAs, up to our maximum, then TS_MAX_QUEUE. Without
    /// per-CPU configuration the notify is ignored and a duplicate SA is
    /// simply another Child SA. Returns whether to answer with
    /// SA_RESOURCE_INFO and whether the new SA is a per-resource one.
    fn resource_role(
        &mut self,
        cfg: &ChildConfig,
        opts: &ChildOpts,
    ) -> Result<(bool, bool), NotifyType> {
        let per_cpu = cfg.per_cpu_sas != PerCpuSas::No;
        let resource_info = opts.resource_info && per_cpu;
        let first = !self.children.iter().any(|c| c.name == cfg.name);
        let mut per_resource = opts.per_resource;
        if resource_info && !first {
            if !self.accepts_peer_sub_sa(&cfg.name, cfg.per_cpu_max) {
                tracing::info!(ike_sa = %self.id, child = %cfg.name, max = cfg.per_cpu_max,
                    "per-resource CHILD_SA refused: TS_MAX_QUEUE");
                return Err(NotifyType::TS_MAX_QUEUE);
            }
            per_resource = true;
        }
        if resource_info {
            self.resource_group(&cfg.name).supported = true;
        }
        Ok((resource_info, per_resource))
    }
}

/// Our inbound SPI for the new Child SA. A rekey keeps the old SA's worker
/// (its SPI steers there), so packets on the old and the new SA are not
/// decrypted by two workers at once. A peer's new per-resource SA goes to
/// the worker whose index its SPI names on the peer (RFC 9611 leaves
/// placement to each side): with both sides steering alike, each sub-SA
/// belongs to worker k at both ends, whichever side negotiated it and in
/// whatever order the negotiations finish.
fn inbound_spi(ctx: &mut Ctx<'_>, opts: &ChildOpts, per_resource: bool, outbound_spi: u32) -> u32 {
    match (opts.resource, opts.rekeys) {
        (Some(k), _) => ctx.spis.allocate(ctx.rng, Some(k)),
        (None, Some(old)) => ctx.spis.allocate_like(ctx.rng, old),
        (None, None) if per_resource => ctx.spis.allocate_like(ctx.rng, outbound_spi),
        (None, None) => ctx.spis.allocate(ctx.rng, None),
    }
}

/// What the initiator asked for, as the responder's selection sees it.
pub(crate) struct ChildQuery<'q> {
    /// The offered ESP proposals.
    pub(crate) offered: &'q [ProposalRepr],
    /// TSi (the initiator's side).
    pub(crate) tsi: &'q [TrafficSelector],
    /// TSr (our side).
    pub(crate) tsr: &'q [TrafficSelector],
    /// The exchange: IKE_AUTH ignores KE transforms (§1.2).
    pub(crate) carrier: Carrier,
    /// The group of the KE payload, taken if acceptable.
    pub(crate) prefer_ke: Option<KeGroup>,
    /// Rekeying: only this child configuration.
    pub(crate) only: Option<&'q str>,
}

/// What the responder chose.
pub(crate) struct ChildChoice<'c> {
    /// The child configuration.
    pub(crate) config: &'c ChildConfig,
    /// The selected transforms (`spi` is the initiator's inbound SPI).
    pub(crate) selected: Selected,
    /// The ESP suite.
    pub(crate) suite: EspSuite,
    /// Narrowed TSi (the initiator's side: remote for us).
    pub(crate) tsi: Vec<TrafficSelector>,
    /// Narrowed TSr (our side).
    pub(crate) tsr: Vec<TrafficSelector>,
}

/// What a responder's Child SA negotiation needs beyond the request.
#[derive(Debug, Default, Clone, Copy)]
struct ChildOpts {
    /// The inbound SPI of the SA a rekey replaces.
    rekeys: Option<u32>,
    /// The replaced SA's resource (worker).
    resource: Option<u16>,
    /// The replaced SA was a per-resource SA.
    per_resource: bool,
    /// The request carried SA_RESOURCE_INFO (and is not a rekey).
    resource_info: bool,
    /// The PFS group of this exchange.
    ke: Option<KeGroup>,
    /// The peer's DEFLATE CPI from its IPCOMP_SUPPORTED notify.
    ipcomp: Option<u16>,
}

/// Choose a child configuration, proposal and narrowed selectors for an
/// initiator's SA/TSi/TSr (§2.9, §2.7).
fn select_child<'c>(
    conn: &'c ConnectionConfig,
    q: &ChildQuery<'_>,
    local_ip: IpAddr,
    remote_ip: IpAddr,
) -> Result<ChildChoice<'c>, Reason> {
    let mut ts_fit = false;
    for config in &conn.children {
        if q.only.is_some_and(|n| n != &*config.name) {
            continue;
        }
        let n_tsi = narrow(q.tsi, &config.remote_selectors(remote_ip));
        let n_tsr = narrow(q.tsr, &config.local_selectors(local_ip));
        if n_tsi.is_empty() || n_tsr.is_empty() {
            continue;
        }
        ts_fit = true;
        // The first Child SA of IKE_AUTH has no KE of its own (§1.2); its
        // KE transforms, and our PFS groups, are ignored there.
        let ignore_ke = !q.carrier.with_ke();
        let Some(selected) =
            Proposal::select(&config.esp_proposals, q.offered, ignore_ke, q.prefer_ke)
        else {
            continue;
        };
        if !matches!(selected.spi, Spi::U32(s) if s != 0) {
            return Err(Reason::ProtocolError("ESP proposal without a 4-octet SPI"));
        }
        let Some(suite) = esp_suite(&selected) else {
            continue;
        };
        return Ok(ChildChoice {
            config,
            selected,
            suite,
            tsi: n_tsi,
            tsr: n_tsr,
        });
    }
    Err(if ts_fit {
        Reason::NoProposalChosen
    } else {
        Reason::TsUnacceptable
    })
}
