//! IKE_AUTH as initiator, with the first Child SA (RFC 7296 §1.2, §2.15).
//!
//! ```text
//! HDR, SK {IDi, [IDr,] AUTH, [N(INITIAL_CONTACT),] SAi2, TSi, TSr}  -->
//!                          <--  HDR, SK {IDr, AUTH, SAr2, TSi, TSr}
//! ```
//!
//! The IKE SA counts as established only once the responder's AUTH has
//! verified with the PSK we hold for the identity it presents, and that
//! identity is the one the connection expects. Only then is the Child SA
//! answer looked at, so an unauthenticated responder never gets a Child
//! SA installed. A Child SA failure (NO_PROPOSAL_CHOSEN, TS_UNACCEPTABLE)
//! leaves the IKE SA up: RFC 7296 §2.21.2 has the IKE SA created as usual
//! when only the Child SA part of IKE_AUTH fails. If *our* check of the
//! answer fails after the responder installed its half, we delete it with
//! an INFORMATIONAL.
//!
//! Extras: INITIAL_CONTACT when we hold no other IKE SA with this peer
//! (§2.4: it "asserts that this IKE SA is the only IKE SA currently active
//! between the authenticated identities [...] MUST be in the first IKE_AUTH
//! request or response"); SET_WINDOW_SIZE (§2.3); SA_RESOURCE_INFO with a
//! per-CPU child, which becomes its group's fallback SA (RFC 9611).

use super::{Outcome, Received, Task, reason_for};
use crate::auth::{psk_auth, verify_psk_auth};
use crate::child::{
    ChildOpts, ChildQuery, Install, check_answer, install, offer, ts_from, ts_repr,
};
use crate::config::{Connection, PerCpuSas};
use crate::ctx::{Action, Ctx};
use crate::event::{AuthFailure, Event, Reason};
use crate::identity::Identity;
use crate::lifetime::{MAX_WINDOW, rekey_deadline};
use crate::proposal::{Proposal, Protocol};
use crate::sa::{IkeSa, State, notify, peer_window, window_notify};
use crate::ts::TrafficSelector;
use core::net::SocketAddr;
use esparto_wire::ike::{
    AuthMethod, AuthRepr, ExchangeType, IdRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};
use std::sync::Arc;

/// The first Child SA we ask for.
struct ChildOffer {
    name: Arc<str>,
    resource: Option<u16>,
    inbound_spi: u32,
    tsi: Vec<TrafficSelector>,
    tsr: Vec<TrafficSelector>,
}

/// The IKE_AUTH task.
pub(crate) struct IkeAuth {
    child: Option<(Arc<str>, Option<u16>)>,
    offer: Option<ChildOffer>,
}

impl IkeAuth {
    pub(super) fn new(child: Option<(Arc<str>, Option<u16>)>) -> Self {
        IkeAuth { child, offer: None }
    }

    /// The child configuration this IKE_AUTH creates, if any.
    pub(crate) fn child_name(&self) -> Option<&Arc<str>> {
        self.child.as_ref().map(|(n, _)| n)
    }

    pub(super) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(o) = self.offer {
            ctx.spis.release(o.inbound_spi);
        }
    }

    pub(super) fn build(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mid: u32,
    ) -> Result<Vec<u8>, Reason> {
        let conn = sa.conn.clone();
        let local_id = conn.local_id(sa.local.ip());
        let (id_type, id_data) = local_id
            .to_wire()
            .ok_or(Reason::Local("local identity %any"))?;
        let remote_hint = conn.remote.id.clone().unwrap_or(Identity::Any);
        let Some(psk) = ctx.psks.find(&local_id, &remote_hint) else {
            tracing::warn!(ike_sa = %sa.id, local_id = %local_id, remote_id = %remote_hint,
                "no PSK found for these identities");
            ctx.events.push_back(Event::AuthFailed {
                ike_sa: sa.id,
                peer: sa.remote,
                identity: None,
                reason: AuthFailure::NoSecret,
            });
            return Err(Reason::AuthenticationFailed);
        };
        let keys = sa.keys.as_ref().ok_or(Reason::Local("no keys"))?;
        let hs = sa
            .handshake
            .as_deref()
            .ok_or(Reason::Local("IKE_SA_INIT state gone"))?;
        let sk_pi = keys.sk_pi().ok_or(Reason::Local("SK_pi gone"))?;
        let idi = IdRepr {
            id_type,
            data: &id_data,
        };
        // §2.15: InitiatorSignedOctets = RealMessage1 | NonceRData | MACedIDForI.
        let auth = psk_auth(
            keys.prf,
            psk.as_slice(),
            &hs.init_request,
            &hs.nr,
            sk_pi,
            &idi,
        );
        let idr_wire = conn.remote.id.as_ref().and_then(Identity::to_wire);

        if self.offer.is_none() {
            if let Some((name, resource)) = self.child.clone() {
                let cfg = conn.child(&name).ok_or(Reason::Local("unknown child"))?;
                self.offer = Some(ChildOffer {
                    inbound_spi: ctx.spis.allocate(ctx.rng, resource),
                    tsi: cfg.local_selectors(sa.local.ip()),
                    tsr: cfg.remote_selectors(sa.remote.ip()),
                    name,
                    resource,
                });
            }
        }
        let mut payloads = vec![PayloadRepr::IdI(idi)];
        if let Some((t, d)) = &idr_wire {
            payloads.push(PayloadRepr::IdR(IdRepr {
                id_type: *t,
                data: d,
            }));
        }
        payloads.push(PayloadRepr::Auth(AuthRepr {
            method: AuthMethod::SHARED_KEY_MIC,
            data: auth.as_slice(),
        }));
        if sa.initial_contact {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::INITIAL_CONTACT,
                &[],
            )));
        }
        let window = window_notify(ctx.config);
        if let Some(w) = &window {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SET_WINDOW_SIZE,
                w,
            )));
        }
        if let Some(o) = &self.offer {
            let cfg = conn.child(&o.name).ok_or(Reason::Local("unknown child"))?;
            if cfg.per_cpu_sas != PerCpuSas::No {
                payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                    NotifyType::SA_RESOURCE_INFO,
                    &[],
                )));
            }
            // §1.2: the first Child SA takes its keys from the IKE SA; its
            // proposals carry no KE transforms.
            payloads.push(PayloadRepr::Sa(SaRepr {
                proposals: offer(&cfg.esp_proposals, o.inbound_spi, false),
            }));
            payloads.push(PayloadRepr::TsI(ts_repr(&o.tsi)));
            payloads.push(PayloadRepr::TsR(ts_repr(&o.tsr)));
        }
        let packet = sa.encode(ExchangeType::IKE_AUTH, false, mid, &payloads)?;
        sa.local_id = Some(local_id);
        Ok(packet)
    }

    fn auth_failed(
        sa: &IkeSa,
        ctx: &mut Ctx<'_>,
        identity: Option<Identity>,
        reason: AuthFailure,
    ) -> Outcome {
        ctx.events.push_back(Event::AuthFailed {
            ike_sa: sa.id,
            peer: sa.remote,
            identity,
            reason,
        });
        Outcome::Fail(Reason::AuthenticationFailed)
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        let mut idr = None;
        let mut auth = None;
        let mut sa_p = None;
        let mut tsi = None;
        let mut tsr = None;
        let (mut window, mut initial_contact) = (None, false);
        for p in &rx.payloads {
            match p {
                PayloadRepr::IdR(i) => idr = Some(*i),
                PayloadRepr::Auth(a) => auth = Some(*a),
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SET_WINDOW_SIZE => {
                    window = n.u32_data()
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::INITIAL_CONTACT => {
                    initial_contact = true
                }
                _ => {}
            }
        }
        if rx.notify(NotifyType::AUTHENTICATION_FAILED).is_some() {
            tracing::warn!(ike_sa = %sa.id, peer = %sa.remote,
                local_id = %sa.local_id.as_ref().map_or_else(String::new, ToString::to_string),
                "peer rejected our authentication (AUTHENTICATION_FAILED)");
            self.release(ctx);
            return Self::auth_failed(sa, ctx, None, AuthFailure::RejectedByPeer);
        }
        let (Some(idr), Some(auth)) = (idr, auth) else {
            let reason = rx.error().map_or(
                Reason::ProtocolError("IKE_AUTH response without IDr/AUTH"),
                |(k, _)| reason_for(k),
            );
            self.release(ctx);
            return Outcome::Fail(reason);
        };
        let Some(peer_id) = Identity::from_wire(idr.id_type, idr.data) else {
            self.release(ctx);
            return Self::auth_failed(sa, ctx, None, AuthFailure::UnknownIdentity);
        };
        if !sa.conn.accepts_remote_id(&peer_id) {
            tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id, "peer identity not accepted by the connection");
            self.release(ctx);
            return Self::auth_failed(sa, ctx, Some(peer_id), AuthFailure::UnknownIdentity);
        }
        if auth.method != AuthMethod::SHARED_KEY_MIC {
            self.release(ctx);
            return Self::auth_failed(sa, ctx, Some(peer_id), AuthFailure::UnsupportedMethod);
        }
        let local_id = sa
            .local_id
            .clone()
            .unwrap_or_else(|| sa.conn.local_id(sa.local.ip()));
        let Some(psk) = ctx.psks.find(&local_id, &peer_id) else {
            self.release(ctx);
            return Self::auth_failed(sa, ctx, Some(peer_id), AuthFailure::NoSecret);
        };
        let (Some(keys), Some(hs)) = (sa.keys.as_ref(), sa.handshake.as_deref()) else {
            return Outcome::Fail(Reason::Local("no keys"));
        };
        let Some(sk_pr) = keys.sk_pr() else {
            return Outcome::Fail(Reason::Local("SK_pr gone"));
        };
        // §2.15: ResponderSignedOctets = RealMessage2 | NonceIData | MACedIDForR.
        if !verify_psk_auth(
            keys.prf,
            psk.as_slice(),
            &hs.init_response,
            &hs.ni,
            sk_pr,
            &idr,
            auth.data,
        ) {
            tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id,
                "authentication of the responder failed: its AUTH does not verify with our PSK");
            self.release(ctx);
            // §2.21.2: the initiator MAY tell the responder in an INFORMATIONAL.
            super::informational_notify(sa, ctx, NotifyType::AUTHENTICATION_FAILED);
            return Self::auth_failed(sa, ctx, Some(peer_id), AuthFailure::BadAuth);
        }
        // Authenticated.
        // The IKE_SA_INIT state goes when this step ends (`Endpoint::after`).
        sa.state = State::Established;
        sa.announced = true;
        tracing::info!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id, connection = %sa.conn.name, "IKE_SA established");
        ctx.events.push_back(Event::IkeSaEstablished {
            ike_sa: sa.id,
            connection: sa.conn.name.clone(),
            local: sa.local,
            remote: sa.remote,
            local_id: local_id.clone(),
            remote_id: peer_id.clone(),
            initiator: true,
        });
        sa.remote_id = Some(peer_id);
        sa.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        sa.peer_window = crate::sa::peer_window(window);
        sa.rekey_at = rekey_deadline(ctx, sa.conn.rekey_time, sa.conn.jitter());
        if initial_contact {
            ctx.actions.push(Action::InitialContact { keep: sa.id.0 });
        }

        let Some(o) = self.offer.take() else {
            return Outcome::Done;
        };
        let echoed = rx.notify(NotifyType::SA_RESOURCE_INFO).is_some();
        let name = o.name.clone();
        let fail = |sa: &IkeSa, ctx: &mut Ctx<'_>, reason| {
            tracing::info!(ike_sa = %sa.id, child = %o.name, ?reason, "CHILD_SA not created");
            ctx.spis.release(o.inbound_spi);
            ctx.events.push_back(Event::ChildSaFailed {
                ike_sa: sa.id,
                connection: sa.conn.name.clone(),
                child: Some(o.name.clone()),
                reason,
            });
        };
        let (Some(sa_p), Some(tsi), Some(tsr)) = (sa_p, tsi, tsr) else {
            let reason = rx.error().map_or(
                Reason::ProtocolError("no Child SA in IKE_AUTH response"),
                |(k, _)| reason_for(k),
            );
            fail(sa, ctx, reason);
            sa.fallback_done(ctx, &name, None);
            return Outcome::Done;
        };
        let Some(cfg) = sa.conn.child(&o.name).cloned() else {
            fail(sa, ctx, Reason::Local("child configuration vanished"));
            return Outcome::Done;
        };
        let (selected, suite) = match check_answer(
            &cfg.esp_proposals,
            &sa_p.proposals,
            true,
            &o.tsi,
            &o.tsr,
            &tsi,
            &tsr,
        ) {
            Ok(x) => x,
            Err(reason) => {
                fail(sa, ctx, reason);
                // The responder installed its half: delete it.
                sa.queue.push_back(Task::DeleteChild(vec![o.inbound_spi]));
                sa.fallback_done(ctx, &name, None);
                return Outcome::Done;
            }
        };
        let esparto_wire::ike::Spi::U32(outbound_spi) = selected.spi else {
            return Outcome::Done;
        };
        let (Some(keys), Some(hs)) = (sa.keys.as_ref(), sa.handshake.as_deref()) else {
            fail(sa, ctx, Reason::Local("IKE_SA_INIT state gone"));
            return Outcome::Done;
        };
        let installed = install(
            ctx,
            Install {
                ike_sa: sa.id,
                connection: sa.conn.name.clone(),
                child: o.name.clone(),
                initiator: true,
                inbound_spi: o.inbound_spi,
                outbound_spi,
                suite,
                esn: selected.esn,
                prf: keys.prf,
                sk_d: keys.sk_d(),
                g_ir: None,
                ni: &hs.ni,
                nr: &hs.nr,
                local_ts: tsi,
                remote_ts: tsr,
                local: sa.local,
                remote: sa.remote,
                encap: sa.encap(),
                resource: o.resource,
                rekeys: None,
                per_resource: false,
                outbound_active: true,
                ke: None,
                config: &cfg,
            },
        );
        match installed {
            Ok((mut c, event)) => {
                crate::child::announce(ctx, &mut c, event);
                sa.add_child(c);
                sa.fallback_done(ctx, &name, Some(echoed));
            }
            Err(reason) => {
                fail(sa, ctx, reason);
                sa.fallback_done(ctx, &name, None);
            }
        }
        Outcome::Done
    }
}

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

    pub(crate) fn respond_ike_auth(
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
}
