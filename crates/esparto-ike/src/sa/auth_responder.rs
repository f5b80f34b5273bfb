//! The responder side of IKE_AUTH (RFC 7296 §1.2, §2.15), and the Child
//! SA negotiation it shares with CREATE_CHILD_SA.
//!
//! ```text
//! HDR, SK {IDi, [CERT,] [CERTREQ,] [IDr,] AUTH, SAi2, TSi, TSr}  -->
//!                          <--  HDR, SK {IDr, [CERT,] AUTH, SAr2, TSi, TSr}
//! ```
//!
//! The connection is chosen by the identity the peer proves, not just
//! claims: candidates must accept IDi (and offer IDr if asked), then the
//! PSK for the identity pair must verify the peer's AUTH. Only after that
//! is a Child SA considered, so an unauthenticated peer never gets one. A
//! failed authentication is logged once with the peer and the identity,
//! answered with AUTHENTICATION_FAILED (§2.21.2), and ends the IKE SA.
//!
//! Once authenticated: SET_WINDOW_SIZE both ways (§2.3: "The window size
//! is always one until the initial exchanges complete"), INITIAL_CONTACT
//! acted on (§2.4: the peer "MAY use this information to delete any other
//! IKE SAs it has to the same authenticated identity without waiting for a
//! timeout"), SA_RESOURCE_INFO answered for a per-CPU child (RFC 9611).

use super::IkeSa;
use super::requests::notify;
use crate::auth::{psk_auth, verify_psk_auth};
use crate::child::{ChildQuery, Install, install, select_child, ts_from, ts_repr};
use crate::config::{Connection, PerCpuSas};
use crate::ctx::{Action, Ctx};
use crate::event::{AuthFailure, Event, Reason};
use crate::identity::Identity;
use crate::lifetime::{MAX_WINDOW, rekey_deadline};
use crate::proposal::{Proposal, Protocol};
use crate::sa::State;
use crate::sa::{peer_window, window_notify};
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    AuthMethod, AuthRepr, ExchangeType, IdRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
    TsRepr,
};
use std::sync::Arc;

impl IkeSa {
    /// The connection for an authenticating peer: matching addresses, the
    /// peer's identity, the IDr it asked for, and the IKE suite already
    /// chosen. The candidate from IKE_SA_INIT wins ties.
    fn pick_connection(
        &self,
        ctx: &Ctx<'_>,
        peer: &Identity,
        idr: Option<&Identity>,
    ) -> Option<Arc<Connection>> {
        let suite = self.suite.as_ref()?;
        let answer = suite.to_wire(Protocol::Ike, Spi::None);
        let fits = |c: &Arc<Connection>| {
            c.matches_addrs(self.local.ip(), self.remote.ip())
                && c.accepts_remote_id(peer)
                && idr.is_none_or(|want| want.matches(&c.local_id(self.local.ip())))
                && Proposal::select(&c.proposals, std::slice::from_ref(&answer), false, None)
                    .is_some()
        };
        if fits(&self.conn) {
            return Some(self.conn.clone());
        }
        // Only connections accepting this IDi can fit: the index hands
        // those, in configuration order.
        ctx.connections
            .for_remote_id(peer)
            .find(|c| fits(c))
            .cloned()
    }

    fn fail_auth(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        from: SocketAddr,
        to: SocketAddr,
        identity: Option<Identity>,
        reason: AuthFailure,
    ) {
        ctx.events.push_back(Event::AuthFailed {
            ike_sa: self.id,
            peer: from,
            identity,
            reason,
        });
        self.respond(
            ctx,
            ExchangeType::IKE_AUTH,
            mid,
            &[notify(NotifyType::AUTHENTICATION_FAILED, &[])],
            from,
            to,
        );
        self.announced = true;
        self.die(ctx, Reason::AuthenticationFailed);
    }

    pub(super) fn respond_ike_auth(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let (mut idi, mut idr, mut auth, mut sa_p, mut tsi, mut tsr) =
            (None, None, None, None, None, None);
        let (mut window, mut initial_contact, mut resource_info) = (None, false, false);
        for p in payloads {
            match p {
                PayloadRepr::IdI(i) => idi = Some(*i),
                PayloadRepr::IdR(i) => idr = Some(*i),
                PayloadRepr::Auth(a) => auth = Some(*a),
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) => match n.kind {
                    NotifyType::SET_WINDOW_SIZE => window = n.u32_data(),
                    NotifyType::INITIAL_CONTACT => initial_contact = true,
                    NotifyType::SA_RESOURCE_INFO => resource_info = true,
                    _ => {}
                },
                _ => {}
            }
        }
        let Some(idi) = idi else { return };
        let Some(peer_id) = Identity::from_wire(idi.id_type, idi.data) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, "authentication failed: unusable identity type {}", idi.id_type);
            return self.fail_auth(ctx, mid, from, to, None, AuthFailure::UnknownIdentity);
        };
        let Some(auth) = auth else {
            // No AUTH means EAP, which we do not offer.
            return self.fail_auth(
                ctx,
                mid,
                from,
                to,
                Some(peer_id),
                AuthFailure::UnsupportedMethod,
            );
        };
        let want_idr = idr.and_then(|i| Identity::from_wire(i.id_type, i.data));
        let Some(conn) = self.pick_connection(ctx, &peer_id, want_idr.as_ref()) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no connection for this identity");
            return self.fail_auth(
                ctx,
                mid,
                from,
                to,
                Some(peer_id),
                AuthFailure::UnknownIdentity,
            );
        };
        let local_id = conn.local_id(self.local.ip());
        if auth.method != AuthMethod::SHARED_KEY_MIC {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, method = %auth.method, "authentication failed: unsupported method");
            return self.fail_auth(
                ctx,
                mid,
                from,
                to,
                Some(peer_id),
                AuthFailure::UnsupportedMethod,
            );
        }
        let Some(psk) = ctx.psks.find(&local_id, &peer_id) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no PSK for '{}' - '{}'", local_id, peer_id);
            return self.fail_auth(ctx, mid, from, to, Some(peer_id), AuthFailure::NoSecret);
        };
        let (Some(keys), Some(hs)) = (self.keys.as_ref(), self.handshake.as_deref()) else {
            return;
        };
        let (Some(sk_pi), Some(sk_pr)) = (keys.sk_pi(), keys.sk_pr()) else {
            return;
        };
        // §2.15: the initiator signed RealMessage1 | Nr | prf(SK_pi, IDi').
        if !verify_psk_auth(
            keys.prf,
            psk.as_slice(),
            &hs.init_request,
            &hs.nr,
            sk_pi,
            &idi,
            auth.data,
        ) {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id,
                "authentication of '{}' failed: AUTH payload does not verify with the PSK (wrong PSK?)", peer_id);
            return self.fail_auth(ctx, mid, from, to, Some(peer_id), AuthFailure::BadAuth);
        }
        let Some((id_type, id_data)) = local_id.to_wire() else {
            return;
        };
        let idr_out = IdRepr {
            id_type,
            data: &id_data,
        };
        let our_auth = psk_auth(
            keys.prf,
            psk.as_slice(),
            &hs.init_response,
            &hs.ni,
            sk_pr,
            &idr_out,
        );
        // Kept for the first Child SA's KEYMAT (§2.17) past the borrow.
        let (ni, nr) = (hs.ni.clone(), hs.nr.clone());

        // Authenticated.
        self.conn = conn;
        // The IKE_SA_INIT state (half-open deadline included) goes when
        // this step ends (`Endpoint::after`).
        self.state = State::Established;
        self.announced = true;
        tracing::info!(ike_sa = %self.id, peer = %from, identity = %peer_id, connection = %self.conn.name, "IKE_SA established");
        ctx.events.push_back(Event::IkeSaEstablished {
            ike_sa: self.id,
            connection: self.conn.name.clone(),
            local: self.local,
            remote: self.remote,
            local_id: local_id.clone(),
            remote_id: peer_id.clone(),
            initiator: false,
        });
        self.local_id = Some(local_id);
        self.remote_id = Some(peer_id);
        if self.nat.local_behind_nat {
            self.next_keepalive = Some(ctx.now + ctx.config.keepalive_interval);
        }
        self.peer_window = peer_window(window);
        self.rekey_at = rekey_deadline(ctx, self.conn.rekey_time, self.conn.jitter());
        if initial_contact {
            ctx.actions.push(Action::InitialContact { keep: self.id.0 });
        }

        let child = match (sa_p, tsi, tsr) {
            (Some(sa_p), Some(tsi), Some(tsr)) => {
                let q = ChildQuery {
                    offered: &sa_p.proposals,
                    tsi: &tsi,
                    tsr: &tsr,
                    ignore_ke: true,
                    prefer_ke: None,
                    only: None,
                };
                let opts = ChildOpts {
                    resource_info,
                    ..ChildOpts::default()
                };
                Some(self.create_child(ctx, &q, opts, None, &ni, &nr))
            }
            _ => None,
        };
        let w = window_notify(ctx.config);
        let mut out = vec![
            PayloadRepr::IdR(idr_out),
            PayloadRepr::Auth(AuthRepr {
                method: AuthMethod::SHARED_KEY_MIC,
                data: our_auth.as_slice(),
            }),
        ];
        if let Some(w) = &w {
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SET_WINDOW_SIZE,
                w,
            )));
        }
        match &child {
            Some(Ok(answer)) => {
                if answer.resource_info {
                    out.push(PayloadRepr::Notify(NotifyRepr::new(
                        NotifyType::SA_RESOURCE_INFO,
                        &[],
                    )));
                }
                out.extend(answer.payloads());
            }
            Some(Err(kind)) => out.push(notify(*kind, &[])),
            None => {}
        }
        // Window one until this answer is out (§2.3), so only it is kept
        // (the IKE_SA_INIT response is of no use any more); ours from now.
        self.respond(ctx, ExchangeType::IKE_AUTH, mid, &out, from, to);
        self.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        if let Some(Ok(answer)) = &child {
            let name = answer.child.clone();
            self.fallback_done(ctx, &name, Some(answer.resource_info));
        }
    }

    /// Negotiate and install a Child SA as responder. `g_ir` for PFS.
    pub(super) fn create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        q: &ChildQuery<'_>,
        opts: ChildOpts,
        g_ir: Option<&[u8]>,
        ni: &[u8],
        nr: &[u8],
    ) -> Result<ChildAnswer, NotifyType> {
        let conn = self.conn.clone();
        let choice = match select_child(&conn, q, self.local.ip(), self.remote.ip()) {
            Ok(c) => c,
            Err(reason) => {
                tracing::info!(ike_sa = %self.id, ?reason, "CHILD_SA request refused");
                ctx.events.push_back(Event::ChildSaFailed {
                    ike_sa: self.id,
                    connection: conn.name.clone(),
                    child: None,
                    reason,
                });
                return Err(match reason {
                    Reason::TsUnacceptable => NotifyType::TS_UNACCEPTABLE,
                    _ => NotifyType::NO_PROPOSAL_CHOSEN,
                });
            }
        };
        let Spi::U32(outbound_spi) = choice.selected.spi else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN);
        };
        // RFC 9611: SA_RESOURCE_INFO with a per-CPU child. The group's first
        // SA is its fallback; later ones are the peer's sub-SAs, up to our
        // maximum, then TS_MAX_QUEUE. Without per-CPU configuration the
        // notify is ignored and a duplicate SA is simply another Child SA.
        let cfg = choice.config;
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
        let Some(keys) = self.keys.as_ref() else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN);
        };
        // A rekey keeps the old SA's worker (its SPI steers there).
        let inbound_spi = ctx.spis.allocate(ctx.rng, opts.resource);
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
        };
        let installed = install(
            ctx,
            Install {
                ike_sa: self.id,
                connection: conn.name.clone(),
                child: choice.config.name.clone(),
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
            },
        );
        match installed {
            Ok((mut c, event)) => {
                crate::child::announce(ctx, &mut c, event);
                self.add_child(c);
                Ok(answer)
            }
            Err(_) => {
                ctx.spis.release(inbound_spi);
                Err(NotifyType::NO_PROPOSAL_CHOSEN)
            }
        }
    }
}

/// What a responder's Child SA negotiation needs beyond the request.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ChildOpts {
    /// The inbound SPI of the SA a rekey replaces.
    pub(super) rekeys: Option<u32>,
    /// The replaced SA's resource (worker).
    pub(super) resource: Option<u16>,
    /// The replaced SA was a per-resource SA.
    pub(super) per_resource: bool,
    /// The request carried SA_RESOURCE_INFO (and is not a rekey).
    pub(super) resource_info: bool,
    /// The PFS group of this exchange.
    pub(super) ke: Option<KeGroup>,
}

/// The payloads of a successful Child SA answer.
pub(super) struct ChildAnswer {
    pub(super) sa: SaRepr,
    pub(super) tsi: TsRepr,
    pub(super) tsr: TsRepr,
    /// The child configuration chosen.
    pub(super) child: Arc<str>,
    /// Answer with SA_RESOURCE_INFO (RFC 9611).
    pub(super) resource_info: bool,
}

impl ChildAnswer {
    fn payloads(&self) -> [PayloadRepr<'static>; 3] {
        [
            PayloadRepr::Sa(self.sa.clone()),
            PayloadRepr::TsI(self.tsi.clone()),
            PayloadRepr::TsR(self.tsr.clone()),
        ]
    }
}
