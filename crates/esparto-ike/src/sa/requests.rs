//! Requests from the peer on an existing IKE SA: the responder side of
//! IKE_AUTH, CREATE_CHILD_SA and INFORMATIONAL (RFC 7296 §1.2–§1.4), with
//! the message-ID window and the response cache (§2.1, §2.3) in front.
//!
//! Order of checks, cheapest and safest first: message ID (a repeat gets
//! the cached response and nothing else; anything outside the window is
//! dropped), then the ICV (no answer to anything that does not verify:
//! §2.21 forbids answering unauthenticated messages with errors), then
//! parsing and the payload table (an authenticated but malformed request
//! gets INVALID_SYNTAX or UNSUPPORTED_CRITICAL_PAYLOAD), then the exchange.

use super::{IkeSa, State, WINDOW};
use crate::auth::{psk_auth, verify_psk_auth};
use crate::child::{Install, install, select_child, ts_from, ts_repr};
use crate::config::Connection;
use crate::ctx::Ctx;
use crate::event::{AuthFailure, Event, Reason, Transmit};
use crate::identity::Identity;
use crate::proposal::{Proposal, Protocol};
use crate::rules;
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    AuthMethod, AuthRepr, DeleteRepr, Error as WireError, ExchangeType, IdRepr, KeRepr, Message,
    NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProtocolId, SaRepr, Spi,
};
use std::sync::Arc;

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestDrop {
    /// Message ID outside the window.
    OutOfWindow,
    /// Integrity check failed.
    Integrity,
    /// Not valid in this state and not authenticated.
    State,
}

fn notify(kind: NotifyType, data: &[u8]) -> PayloadRepr<'_> {
    PayloadRepr::Notify(NotifyRepr::new(kind, data))
}

impl IkeSa {
    /// Entry point for every datagram with this SA's SPIs.
    pub(crate) fn handle(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        msg: &Message<'_>,
        from: SocketAddr,
        to: SocketAddr,
    ) {
        if msg.header.response {
            if let Err(why) = crate::task::on_response(self, ctx, data, msg, from, to) {
                tracing::debug!(ike_sa = %self.id, ?why, "response ignored");
            }
        } else if let Err(why) = self.handle_request(ctx, data, msg, from, to) {
            tracing::debug!(ike_sa = %self.id, ?why, "request dropped");
        }
    }

    fn transmit_to(&self, ctx: &mut Ctx<'_>, local: SocketAddr, remote: SocketAddr, packet: &[u8]) {
        let mut data = Vec::with_capacity(packet.len() + 4);
        if local.port() == ctx.config.natt_port {
            data.extend_from_slice(&[0; 4]);
        }
        data.extend_from_slice(packet);
        ctx.transmits.push_back(Transmit {
            local,
            remote,
            data,
        });
    }

    /// Seal a response, cache it for retransmissions, send it where the
    /// request came from (§2.11), and open the window for the next request.
    fn respond(
        &mut self,
        ctx: &mut Ctx<'_>,
        exchange: ExchangeType,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        match self.encode(exchange, true, mid, payloads) {
            Ok(packet) => {
                self.transmit_to(ctx, to, from, &packet);
                if self.responses.len() >= WINDOW {
                    self.responses.pop_front();
                }
                self.responses.push_back((mid, packet));
            }
            Err(reason) => tracing::warn!(ike_sa = %self.id, ?reason, "cannot build response"),
        }
        self.expected_mid = mid.wrapping_add(1);
    }

    /// A repeated IKE_SA_INIT request on a half-open SA: answer from the cache.
    pub(crate) fn retransmit_init_response(
        &self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        if data == self.init_request.as_slice() {
            if let Some((0, p)) = self.responses.front() {
                self.transmit_to(ctx, to, from, p);
            }
        }
    }

    fn handle_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        msg: &Message<'_>,
        from: SocketAddr,
        to: SocketAddr,
    ) -> Result<(), RequestDrop> {
        let h = msg.header;
        if h.message_id != self.expected_mid {
            // §2.1: a retransmitted request gets the same response again.
            if let Some((_, p)) = self.responses.iter().find(|(m, _)| *m == h.message_id) {
                self.transmit_to(ctx, to, from, p);
                return Ok(());
            }
            return Err(RequestDrop::OutOfWindow);
        }
        if !matches!(self.state, State::Auth | State::Established)
            || h.exchange == ExchangeType::IKE_SA_INIT
        {
            return Err(RequestDrop::State);
        }
        let opened = self.open(data, msg).map_err(|_| RequestDrop::Integrity)?;
        // Authenticated by the IKE SA keys from here on.
        self.last_heard = ctx.now;
        self.track_address(ctx, from, to);
        let payloads = match opened.payloads() {
            Ok(p) => p,
            Err(WireError::UnsupportedCriticalPayload(t)) => {
                let d = [t];
                self.respond(
                    ctx,
                    h.exchange,
                    h.message_id,
                    &[notify(NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, &d)],
                    from,
                    to,
                );
                return Ok(());
            }
            Err(e) => {
                tracing::info!(ike_sa = %self.id, error = %e, "malformed request");
                self.respond(
                    ctx,
                    h.exchange,
                    h.message_id,
                    &[notify(NotifyType::INVALID_SYNTAX, &[])],
                    from,
                    to,
                );
                return Ok(());
            }
        };
        if let Err(v) = rules::check(h.exchange, false, &msg.payloads, true, &payloads) {
            tracing::info!(ike_sa = %self.id, violation = ?v, "request breaks the payload rules");
            self.respond(
                ctx,
                h.exchange,
                h.message_id,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            );
            return Ok(());
        }
        match (h.exchange, self.state) {
            (ExchangeType::IKE_AUTH, State::Auth) if !self.is_initiator() => {
                self.respond_ike_auth(ctx, h.message_id, &payloads, from, to)
            }
            (ExchangeType::CREATE_CHILD_SA, State::Established) => {
                self.respond_create_child(ctx, h.message_id, &payloads, from, to)
            }
            (ExchangeType::INFORMATIONAL, _) => {
                self.respond_informational(ctx, h.message_id, &payloads, from, to)
            }
            _ => self.respond(
                ctx,
                h.exchange,
                h.message_id,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            ),
        }
        Ok(())
    }

    /// §2.23: with a NAT in front of the peer, follow its address as seen
    /// in authenticated requests (the mapping may change).
    fn track_address(&mut self, ctx: &mut Ctx<'_>, from: SocketAddr, to: SocketAddr) {
        if (from, to) == (self.remote, self.local) {
            return;
        }
        let floated = to.port() == ctx.config.natt_port && self.local.port() != to.port();
        if !(self.nat.any() || floated) {
            return;
        }
        self.remote = from;
        self.local = to;
        if self.state == State::Established {
            tracing::info!(ike_sa = %self.id, remote = %from, "peer address changed");
            ctx.events.push_back(Event::PeerAddressChanged {
                ike_sa: self.id,
                local: to,
                remote: from,
            });
        }
    }

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
        ctx.connections.iter().find(|c| fits(c)).cloned()
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

    fn respond_ike_auth(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let (mut idi, mut idr, mut auth, mut sa_p, mut tsi, mut tsr) =
            (None, None, None, None, None, None);
        for p in payloads {
            match p {
                PayloadRepr::IdI(i) => idi = Some(*i),
                PayloadRepr::IdR(i) => idr = Some(*i),
                PayloadRepr::Auth(a) => auth = Some(*a),
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
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
        let Some(psk) = ctx.secrets.find_psk(&local_id, &peer_id) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no PSK for '{}' - '{}'", local_id, peer_id);
            return self.fail_auth(ctx, mid, from, to, Some(peer_id), AuthFailure::NoSecret);
        };
        let Some(keys) = self.keys.as_ref() else {
            return;
        };
        if !verify_psk_auth(
            keys.prf,
            psk.as_slice(),
            &self.init_request,
            &self.nr,
            keys.sk_pi.as_slice(),
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
            &self.init_response,
            &self.ni,
            keys.sk_pr.as_slice(),
            &idr_out,
        );

        // Authenticated.
        self.conn = conn;
        self.state = State::Established;
        self.announced = true;
        self.half_open_deadline = None;
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

        let child = match (sa_p, tsi, tsr) {
            (Some(sa_p), Some(tsi), Some(tsr)) => {
                let (ni, nr) = (self.ni.clone(), self.nr.clone());
                Some(self.create_child(
                    ctx,
                    &sa_p.proposals,
                    &tsi,
                    &tsr,
                    None,
                    None,
                    &ni,
                    &nr,
                    true,
                ))
            }
            _ => None,
        };
        let mut out = vec![
            PayloadRepr::IdR(idr_out),
            PayloadRepr::Auth(AuthRepr {
                method: AuthMethod::SHARED_KEY_MIC,
                data: our_auth.as_slice(),
            }),
        ];
        match &child {
            Some(Ok(answer)) => out.extend(answer.payloads()),
            Some(Err(kind)) => out.push(notify(*kind, &[])),
            None => {}
        }
        self.init_request = Vec::new();
        self.init_response = Vec::new();
        self.respond(ctx, ExchangeType::IKE_AUTH, mid, &out, from, to);
    }

    /// Negotiate and install a Child SA as responder. `g_ir` for PFS.
    #[allow(clippy::too_many_arguments)]
    fn create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        offered: &[esparto_wire::ike::ProposalRepr],
        tsi: &[crate::ts::TrafficSelector],
        tsr: &[crate::ts::TrafficSelector],
        rekeys: Option<(u32, Arc<str>)>,
        g_ir: Option<&[u8]>,
        ni: &[u8],
        nr: &[u8],
        first: bool,
    ) -> Result<ChildAnswer, NotifyType> {
        let conn = self.conn.clone();
        let only = rekeys.as_ref().map(|(_, n)| &**n);
        let choice = match select_child(
            &conn,
            offered,
            tsi,
            tsr,
            self.local.ip(),
            self.remote.ip(),
            first,
            only,
        ) {
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
        let Some(keys) = self.keys.as_ref() else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN);
        };
        let inbound_spi = ctx.spis.allocate(ctx.rng, None);
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
                sk_d: keys.sk_d.as_slice(),
                g_ir,
                ni,
                nr,
                local_ts: choice.tsr,
                remote_ts: choice.tsi,
                local: self.local,
                remote: self.remote,
                encap: self.encap(),
                resource: None,
                rekeys: rekeys.map(|(s, _)| s),
            },
        );
        match installed {
            Ok(c) => {
                self.children.push(c);
                Ok(answer)
            }
            Err(_) => {
                ctx.spis.release(inbound_spi);
                Err(NotifyType::NO_PROPOSAL_CHOSEN)
            }
        }
    }

    fn respond_create_child(
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
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) if n.kind == NotifyType::REKEY_SA => rekey = Some(*n),
                _ => {}
            }
        }
        let (Some(sa_p), Some(ni)) = (sa_p, nonce) else {
            return self.respond(
                ctx,
                ex,
                mid,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            );
        };
        if sa_p.proposals.iter().any(|p| p.protocol == ProtocolId::IKE) {
            // IKE SA rekeying (§1.3.2) is the next issue's work.
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey requested: not implemented, refusing");
            return self.respond(
                ctx,
                ex,
                mid,
                &[notify(NotifyType::NO_PROPOSAL_CHOSEN, &[])],
                from,
                to,
            );
        }
        let (Some(tsi), Some(tsr)) = (tsi, tsr) else {
            return self.respond(
                ctx,
                ex,
                mid,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            );
        };
        // §1.3.3: REKEY_SA names the SA being rekeyed by the SPI the
        // initiator receives on, i.e. our outbound SPI.
        let rekeys = match rekey.map(|n| n.spi) {
            None => None,
            Some(Spi::U32(spi)) => match self.children.iter().find(|c| c.outbound_spi == spi) {
                Some(c) => Some((c.inbound_spi, c.name.clone())),
                None => {
                    // §2.25: the SA to rekey is gone (deleted meanwhile).
                    let n = PayloadRepr::Notify(NotifyRepr {
                        protocol: ProtocolId::ESP,
                        spi: Spi::U32(spi),
                        kind: NotifyType::CHILD_SA_NOT_FOUND,
                        data: &[],
                    });
                    return self.respond(ctx, ex, mid, &[n], from, to);
                }
            },
            Some(_) => {
                return self.respond(
                    ctx,
                    ex,
                    mid,
                    &[notify(NotifyType::INVALID_SYNTAX, &[])],
                    from,
                    to,
                );
            }
        };
        // Which group, if any, does the chosen proposal need?
        let conn = self.conn.clone();
        let only = rekeys.as_ref().map(|(_, n)| &**n);
        let want_ke = select_child(
            &conn,
            &sa_p.proposals,
            &tsi,
            &tsr,
            self.local.ip(),
            self.remote.ip(),
            false,
            only,
        )
        .ok()
        .and_then(|c| c.selected.ke);
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let mut our_ke = None;
        let g_ir = match want_ke {
            None => None,
            Some(g) => {
                let Some(k) = ke_p.filter(|k| k.group == g.iana_id()) else {
                    // §1.3: "the responder ... MUST reject the request and
                    // indicate its preferred group in INVALID_KE_PAYLOAD".
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
                    return self.respond(
                        ctx,
                        ex,
                        mid,
                        &[notify(NotifyType::NO_PROPOSAL_CHOSEN, &[])],
                        from,
                        to,
                    );
                };
                let public = ours.public_value().to_vec();
                match ours.agree(k.data) {
                    Ok(s) => {
                        our_ke = Some((g, public));
                        Some(s)
                    }
                    Err(_) => {
                        return self.respond(
                            ctx,
                            ex,
                            mid,
                            &[notify(NotifyType::INVALID_SYNTAX, &[])],
                            from,
                            to,
                        );
                    }
                }
            }
        };
        let result = self.create_child(
            ctx,
            &sa_p.proposals,
            &tsi,
            &tsr,
            rekeys,
            g_ir.as_ref().map(|s| s.as_slice()),
            ni,
            &nr,
            false,
        );
        match result {
            Ok(answer) => {
                let mut out = vec![
                    PayloadRepr::Sa(answer.sa.clone()),
                    PayloadRepr::Nonce(NonceRepr { data: &nr }),
                ];
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
            Err(kind) => self.respond(ctx, ex, mid, &[notify(kind, &[])], from, to),
        }
    }

    fn respond_informational(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::INFORMATIONAL;
        let mut delete_ike = false;
        let mut ours = Vec::new();
        for p in payloads {
            match p {
                PayloadRepr::Delete(d) if d.protocol == ProtocolId::IKE => delete_ike = true,
                PayloadRepr::Delete(d) => {
                    // §1.4.1: the SPIs are the peer's inbound ones, i.e. our
                    // outbound; answer with our inbound SPIs of the pairs.
                    for spi in &d.spis {
                        if let Some(i) = self.children.iter().position(|c| c.outbound_spi == *spi) {
                            ours.push(self.children[i].inbound_spi);
                            self.remove_child(ctx, i, Reason::DeletedByPeer);
                        }
                    }
                }
                PayloadRepr::Notify(n) if n.kind.is_error() => {
                    tracing::info!(ike_sa = %self.id, notify = %n.kind, "peer reports an error");
                    if n.kind == NotifyType::AUTHENTICATION_FAILED && self.state == State::Auth {
                        delete_ike = true;
                    }
                }
                _ => {}
            }
        }
        if delete_ike {
            self.respond(ctx, ex, mid, &[], from, to);
            tracing::info!(ike_sa = %self.id, peer = %from, "peer deleted the IKE_SA");
            self.die(ctx, Reason::DeletedByPeer);
            return;
        }
        if ours.is_empty() {
            // A liveness check, or deletes for SAs we no longer have.
            self.respond(ctx, ex, mid, &[], from, to);
        } else {
            let d = PayloadRepr::Delete(DeleteRepr {
                protocol: ProtocolId::ESP,
                spis: ours,
            });
            self.respond(ctx, ex, mid, &[d], from, to);
        }
    }
}

/// The payloads of a successful Child SA answer.
struct ChildAnswer {
    sa: SaRepr,
    tsi: esparto_wire::ike::TsRepr,
    tsr: esparto_wire::ike::TsRepr,
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
