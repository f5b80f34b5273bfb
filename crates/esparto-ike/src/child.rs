//! Child SAs: the installed state an IKE SA keeps about each, and the
//! negotiation steps shared by IKE_AUTH and CREATE_CHILD_SA (RFC 7296
//! §1.3, §2.9, §2.17).
//!
//! The responder picks the first child configuration of the connection
//! for which both TSi and TSr narrow to something non-empty *and* one of
//! its ESP proposals matches ([`select_child`]); the order of the errors
//! follows what the RFC asks to report (TS_UNACCEPTABLE when no selector
//! fits any child, NO_PROPOSAL_CHOSEN when the selectors fit but the
//! transforms do not). [`IkeSa::negotiate_child`] is the whole responder
//! step, RFC 9611 accounting and SPI allocation included. The initiator
//! checks the answer ([`check_answer`]): one proposal from our list,
//! selectors inside what we proposed. Both sides then cut KEYMAT with
//! [`crate::keys::ChildKeys`] and report a `ChildSaEstablished` event
//! ([`install`]).

use crate::config::{ChildConfig, ConnectionConfig, PerCpuSas};
use crate::ctx::Ctx;
use crate::diag;
use crate::event::{ChildSaEstablished, Event, IkeSaId, Reason};
use crate::keys::{ChildKeys, esp_suite};
use crate::lifetime::rekey_deadline;
use crate::proposal::{Proposal, Protocol, Selected};
use crate::sa::IkeSa;
use crate::ts::{TrafficSelector, is_subset_of_any, narrow};
use core::net::{IpAddr, SocketAddr};
use esparto_crypto::EspSuite;
use esparto_crypto::ike::{KeGroup, Prf};
use esparto_wire::ike::{
    NotifyType, PayloadRepr, ProposalRepr, SaRepr, Spi, TrafficSelectorRepr, TsRepr,
};
use std::sync::Arc;
use std::time::Instant;

/// Where a Child SA is in its life (RFC 7296 §2.8, §2.25.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// In use.
    Installed,
    /// Our CREATE_CHILD_SA with REKEY_SA for it is under way.
    Rekeying,
    /// A successor took over; the initiator of the surviving rekey deletes
    /// this one.
    Rekeyed,
    /// We sent a Delete for it; the reason to report when it completes.
    Deleting(Reason),
}

/// An installed Child SA, as the IKE SA remembers it: enough to rekey it
/// (same selectors, same resource), to resolve rekey collisions (the
/// lowest nonce of the exchange that made it, §2.8.1), and its timers.
#[derive(Debug, Clone)]
pub(crate) struct ChildSa {
    /// Configuration name.
    pub(crate) name: Arc<str>,
    /// Our inbound SPI.
    pub(crate) inbound_spi: u32,
    /// Our outbound SPI.
    pub(crate) outbound_spi: u32,
    /// Our selectors, then the peer's, in one exact allocation (a Child SA
    /// lives for hours and most have one selector each way).
    ts: Box<[TrafficSelector]>,
    /// How many of `ts` are ours.
    n_local: usize,
    /// RFC 9611 resource (worker) we negotiated it for.
    pub(crate) resource: Option<u16>,
    /// RFC 9611: a per-resource SA (ours with `resource`, or the peer's).
    pub(crate) per_resource: bool,
    /// We initiated the exchange that created it.
    pub(crate) initiated: bool,
    /// Life cycle.
    pub(crate) state: ChildState,
    /// The inbound SPI of the SA it replaces.
    pub(crate) rekeys: Option<u32>,
    /// The lowest of the two nonces of the rekey exchange that created it
    /// (only for rekeys: what §2.8.1 compares).
    pub(crate) low_nonce: Option<Box<[u8]>>,
    /// The daemon was told to send on it.
    pub(crate) outbound_active: bool,
    /// It lost a rekey collision (§2.8.1): its creator deletes it; it
    /// never becomes active.
    pub(crate) redundant: bool,
    /// The daemon heard of it (a lost collision of ours is never announced).
    pub(crate) announced: bool,
    /// The PFS group it was made with, preferred when rekeying it.
    pub(crate) ke: Option<KeGroup>,
    /// When to rekey it (soft lifetime, jittered).
    pub(crate) rekey_at: Option<Instant>,
    /// When to delete it (hard lifetime, or a redundant SA's retirement).
    pub(crate) expire_at: Option<Instant>,
}

impl ChildSa {
    /// Our selectors.
    pub(crate) fn local_ts(&self) -> &[TrafficSelector] {
        self.ts.get(..self.n_local).unwrap_or_default()
    }

    /// The peer's selectors.
    pub(crate) fn remote_ts(&self) -> &[TrafficSelector] {
        self.ts.get(self.n_local..).unwrap_or_default()
    }

    /// Its next timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (self.rekey_at, self.expire_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The lowest of two nonces, octet by octet: §2.8 "'Lowest' means an
/// octet-by-octet comparison (instead of, for instance, comparing the
/// nonces as large integers). [...] If you reach the end of one nonce,
/// that nonce is the lower one." — exactly the lexicographic order of
/// byte slices.
pub(crate) fn lowest<'a>(a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
    if a <= b { a } else { b }
}

/// Selectors as TS payload bodies.
pub(crate) fn ts_repr(ts: &[TrafficSelector]) -> TsRepr {
    TsRepr {
        selectors: ts.iter().map(|t| TrafficSelectorRepr::from(*t)).collect(),
    }
}

/// Selectors from a TS payload.
pub(crate) fn ts_from(r: &TsRepr) -> Vec<TrafficSelector> {
    r.selectors
        .iter()
        .map(|s| TrafficSelector::from(*s))
        .collect()
}

/// Our ESP proposals, numbered, carrying our inbound SPI.
pub(crate) fn offer(proposals: &[Proposal], inbound_spi: u32, with_ke: bool) -> Vec<ProposalRepr> {
    proposals
        .iter()
        .enumerate()
        .map(|(i, p)| p.to_wire((i + 1) as u8, Spi::U32(inbound_spi), with_ke))
        .collect()
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

/// What the initiator asked for, as the responder's selection sees it.
pub(crate) struct ChildQuery<'q> {
    /// The offered ESP proposals.
    pub(crate) offered: &'q [ProposalRepr],
    /// TSi (the initiator's side).
    pub(crate) tsi: &'q [TrafficSelector],
    /// TSr (our side).
    pub(crate) tsr: &'q [TrafficSelector],
    /// IKE_AUTH: ignore KE transforms (§1.2).
    pub(crate) ignore_ke: bool,
    /// The group of the KE payload, taken if acceptable.
    pub(crate) prefer_ke: Option<KeGroup>,
    /// Rekeying: only this child configuration.
    pub(crate) only: Option<&'q str>,
}

/// Responder: choose a child configuration, proposal and narrowed
/// selectors for an initiator's SA/TSi/TSr (§2.9, §2.7).
pub(crate) fn select_child<'c>(
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
        // The first child SA of IKE_AUTH has no KE of its own (§1.2);
        // ignore_ke also ignores our PFS groups there.
        let Some(selected) =
            Proposal::select(&config.esp_proposals, q.offered, q.ignore_ke, q.prefer_ke)
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

/// Initiator: check the responder's SA/TSi/TSr against what we sent.
/// Returns the selection (its `spi` is the responder's inbound SPI, our
/// outbound) and the suite.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_answer(
    ike_sa: IkeSaId,
    ours: &[Proposal],
    answer: &[ProposalRepr],
    ignore_ke: bool,
    sent_tsi: &[TrafficSelector],
    sent_tsr: &[TrafficSelector],
    got_tsi: &[TrafficSelector],
    got_tsr: &[TrafficSelector],
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
    // §2.9: the responder may narrow, never widen.
    if !is_subset_of_any(got_tsi, sent_tsi) || !is_subset_of_any(got_tsr, sent_tsr) {
        let configured = [("", sent_tsi.to_vec(), sent_tsr.to_vec())];
        let m = diag::TsMismatch { received: (got_tsi, got_tsr), configured: &configured };
        tracing::info!(%ike_sa, "CHILD_SA answer refused, the responder widened the traffic selectors: {m}");
        return Err(Reason::TsUnacceptable);
    }
    Ok((selected, suite))
}

/// Initiator: the responder refused our request for `child` with `kind`;
/// for NO_PROPOSAL_CHOSEN and TS_UNACCEPTABLE, log what we offered
/// (`with_ke`: our PFS groups were part of it).
pub(crate) fn log_refused(
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

/// Everything needed to report a new Child SA.
pub(crate) struct Install<'a> {
    pub(crate) ike_sa: IkeSaId,
    pub(crate) connection: Arc<str>,
    pub(crate) child: Arc<str>,
    pub(crate) initiator: bool,
    pub(crate) inbound_spi: u32,
    pub(crate) outbound_spi: u32,
    pub(crate) suite: EspSuite,
    pub(crate) esn: bool,
    pub(crate) prf: Prf,
    pub(crate) sk_d: &'a [u8],
    pub(crate) g_ir: Option<&'a [u8]>,
    pub(crate) ni: &'a [u8],
    pub(crate) nr: &'a [u8],
    pub(crate) local_ts: Vec<TrafficSelector>,
    pub(crate) remote_ts: Vec<TrafficSelector>,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) encap: bool,
    pub(crate) resource: Option<u16>,
    pub(crate) rekeys: Option<u32>,
    pub(crate) per_resource: bool,
    /// `false` for the responder of a rekey (see `event.rs`).
    pub(crate) outbound_active: bool,
    /// The PFS group used.
    pub(crate) ke: Option<KeGroup>,
    /// Lifetimes from here.
    pub(crate) config: &'a ChildConfig,
    /// IPComp, if agreed.
    pub(crate) ipcomp: Option<crate::ipcomp::IpcompCpis>,
}

/// Derive the keys and build the record the IKE SA keeps (timers set from
/// the child's lifetimes) and the event announcing it, which the caller
/// queues with [`announce`] — or not, for a rekey that lost a collision.
pub(crate) fn install(
    ctx: &mut Ctx<'_>,
    i: Install<'_>,
) -> Result<(ChildSa, Box<ChildSaEstablished>), Reason> {
    let keys = ChildKeys::derive(i.prf, i.sk_d, i.suite, i.g_ir, i.ni, i.nr)
        .map_err(|_| Reason::Local("Child SA key derivation"))?;
    let (inbound_key, outbound_key) = if i.initiator {
        (keys.r_to_i, keys.i_to_r)
    } else {
        (keys.i_to_r, keys.r_to_i)
    };
    let rekey_at = rekey_deadline(ctx, i.config.rekey_time, i.config.jitter());
    let expire_at = i.config.hard_lifetime().map(|l| ctx.now + l);
    let low_nonce = i.rekeys.map(|_| Box::<[u8]>::from(lowest(i.ni, i.nr)));
    let record = ChildSa {
        name: i.child.clone(),
        inbound_spi: i.inbound_spi,
        outbound_spi: i.outbound_spi,
        ts: i.local_ts.iter().chain(&i.remote_ts).copied().collect(),
        n_local: i.local_ts.len(),
        resource: i.resource,
        per_resource: i.per_resource,
        initiated: i.initiator,
        state: ChildState::Installed,
        rekeys: i.rekeys,
        low_nonce,
        outbound_active: i.outbound_active,
        redundant: false,
        announced: false,
        ke: i.ke,
        rekey_at,
        expire_at,
    };
    let event = Box::new(ChildSaEstablished {
        ike_sa: i.ike_sa,
        connection: i.connection,
        child: i.child,
        inbound_spi: i.inbound_spi,
        outbound_spi: i.outbound_spi,
        suite: i.suite,
        esn: i.esn,
        inbound_key,
        outbound_key,
        local_ts: i.local_ts,
        remote_ts: i.remote_ts,
        local: i.local,
        remote: i.remote,
        encap: i.encap,
        resource: i.resource,
        initiator: i.initiator,
        rekeys: i.rekeys,
        per_resource: i.per_resource,
        outbound_active: i.outbound_active,
        ipcomp: i.ipcomp,
    });
    Ok((record, event))
}

/// Tell the driver about a Child SA built by [`install`].
pub(crate) fn announce(ctx: &mut Ctx<'_>, child: &mut ChildSa, event: Box<ChildSaEstablished>) {
    tracing::info!(
        ike_sa = %event.ike_sa, child = %event.child, inbound_spi = format_args!("{:08x}", event.inbound_spi),
        outbound_spi = format_args!("{:08x}", event.outbound_spi), suite = event.suite.name(),
        encap = event.encap, rekeys = ?event.rekeys.map(|s| format!("{s:08x}")),
        resource = ?event.resource, per_resource = event.per_resource,
        ipcomp = ?event.ipcomp.map(|c| format!("cpi in {:04x} out {:04x}", c.inbound, c.outbound)),
        "CHILD_SA established"
    );
    child.announced = true;
    ctx.events.push_back(Event::ChildSaEstablished(event));
}

impl IkeSa {
    /// Responder: negotiate and install a Child SA for the initiator's
    /// request, in IKE_AUTH or CREATE_CHILD_SA (`g_ir` with PFS). Returns
    /// what to answer with: the SA and selectors chosen, or the notify
    /// refusing the request.
    pub(crate) fn negotiate_child(
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
        // A rekey keeps the old SA's worker (its SPI steers there), so
        // packets on the old and the new SA are not decrypted by two
        // workers at once. A peer's new per-resource SA goes to the
        // worker whose index its SPI names on the peer (RFC 9611 leaves
        // placement to each side): with both sides steering alike, each
        // sub-SA belongs to worker k at both ends, whichever side
        // negotiated it and in whatever order the negotiations finish.
        let inbound_spi = match (opts.resource, opts.rekeys) {
            (Some(k), _) => ctx.spis.allocate(ctx.rng, Some(k)),
            (None, Some(old)) => ctx.spis.allocate_like(ctx.rng, old),
            (None, None) if per_resource => ctx.spis.allocate_like(ctx.rng, outbound_spi),
            (None, None) => ctx.spis.allocate(ctx.rng, None),
        };
        // §2.22: IPComp if the peer offered DEFLATE and we want it; an
        // offer we cannot take just leaves it out.
        let ipcomp = match (cfg.ipcomp, opts.ipcomp) {
            (true, Some(outbound)) => Some(crate::ipcomp::IpcompCpis {
                inbound: crate::ipcomp::allocate(ctx.rng),
                outbound,
            }),
            _ => None,
        };
        let answer = ChildAnswer {
            sa: SaRepr {
                proposals: vec![
                    choice
                        .selected
                        .to_wire(Protocol::Esp, Spi::U32(inbound_spi)),
                ],
            },
            tsi: ts_repr(&choice.tsi),
            tsr: ts_repr(&choice.tsr),
            child: cfg.name.clone(),
            resource_info,
            ipcomp: ipcomp.map(|c| crate::ipcomp::data(c.inbound)),
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
                    let configured = diag::configured(children().flat_map(|c| &c.esp_proposals), !q.ignore_ke);
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

/// What a responder's Child SA negotiation needs beyond the request.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ChildOpts {
    /// The inbound SPI of the SA a rekey replaces.
    pub(crate) rekeys: Option<u32>,
    /// The replaced SA's resource (worker).
    pub(crate) resource: Option<u16>,
    /// The replaced SA was a per-resource SA.
    pub(crate) per_resource: bool,
    /// The request carried SA_RESOURCE_INFO (and is not a rekey).
    pub(crate) resource_info: bool,
    /// The PFS group of this exchange.
    pub(crate) ke: Option<KeGroup>,
    /// The peer's DEFLATE CPI from its IPCOMP_SUPPORTED notify.
    pub(crate) ipcomp: Option<u16>,
}

/// The payloads of a successful Child SA answer.
pub(crate) struct ChildAnswer {
    pub(crate) sa: SaRepr,
    pub(crate) tsi: TsRepr,
    pub(crate) tsr: TsRepr,
    /// The child configuration chosen.
    pub(crate) child: Arc<str>,
    /// Answer with SA_RESOURCE_INFO (RFC 9611).
    pub(crate) resource_info: bool,
    /// Answer with IPCOMP_SUPPORTED carrying this data (§2.22).
    pub(crate) ipcomp: Option<[u8; 3]>,
}

impl ChildAnswer {
    /// `[N(IPCOMP_SUPPORTED),]`: the notify accepting IPComp, if any.
    pub(crate) fn ipcomp_notify(&self) -> Option<PayloadRepr<'_>> {
        self.ipcomp.as_ref().map(|d| {
            PayloadRepr::Notify(esparto_wire::ike::NotifyRepr::new(
                NotifyType::IPCOMP_SUPPORTED,
                d,
            ))
        })
    }

    pub(crate) fn payloads(&self) -> [PayloadRepr<'static>; 3] {
        [
            PayloadRepr::Sa(self.sa.clone()),
            PayloadRepr::TsI(self.tsi.clone()),
            PayloadRepr::TsR(self.tsr.clone()),
        ]
    }
}
