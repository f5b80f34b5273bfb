//! IKE_AUTH (RFC 7296 §1.2, §2.15), both roles, with the first Child SA.
//!
//! ```text
//! HDR, SK {IDi, [CERT,] [CERTREQ,] [IDr,] AUTH, [N(INITIAL_CONTACT),] SAi2, TSi, TSr}  -->
//!                          <--  HDR, SK {IDr, [CERT,] AUTH, SAr2, TSi, TSr}
//! ```
//!
//! Each side proves that it holds the PSK for the pair of identities, or
//! the private key of its certificate, with an AUTH payload over its own
//! IKE_SA_INIT message, the other side's nonce and its own identity, and
//! checks the other's: `proof.rs`. Each side chooses its own method
//! (§2.15). This file is the exchange around the proofs: the messages,
//! when the IKE SA counts as established, and the Child SA part, which is
//! negotiated as in CREATE_CHILD_SA by [`super::child_sa`] (keyed from
//! IKE_SA_INIT, §2.17). Neither side looks at the Child SA part before the
//! peer is authenticated, so an unauthenticated peer never gets a Child SA
//! installed.
//!
//! Initiator ([`IkeAuth`]). `build` sends our identity, our chain and a
//! CERTREQ if we sign and trust CAs, the IDr we expect (if the connection
//! names one) and our AUTH, with INITIAL_CONTACT when we hold no other IKE
//! SA with this peer (§2.4: it "asserts that this IKE SA is the only IKE
//! SA currently active between the authenticated identities [...] MUST be
//! in the first IKE_AUTH request or response"). `process` counts the IKE
//! SA as established only once the responder is authenticated. A Child SA
//! failure (NO_PROPOSAL_CHOSEN, TS_UNACCEPTABLE) leaves the IKE SA up:
//! §2.21.2 has the IKE SA created as usual when only the Child SA part
//! fails. If *our* check of the answer fails after the responder installed
//! its half, we delete it with an INFORMATIONAL.
//!
//! Responder ([`IkeSa::respond_ike_auth`]). The connection is chosen by the
//! identity the peer proves, not just claims (`proof.rs`). A failed
//! authentication is answered with AUTHENTICATION_FAILED (§2.21.2) and
//! ends the IKE SA, and so does a refusal by the connection's `unique =
//! keep` (an IKE SA with the same identities is up from another address);
//! otherwise the answer carries our proof and the first Child SA, or the
//! notify refusing it. With `unique = replace` the others then go.
//!
//! Both, once authenticated: SET_WINDOW_SIZE (§2.3: "The window size is
//! always one until the initial exchanges complete"), INITIAL_CONTACT acted
//! on unless `unique = never` (§2.4: the peer "MAY use this information to
//! delete any other IKE SAs it has to the same authenticated identity
//! without waiting for a timeout"), SA_RESOURCE_INFO with a per-CPU child, whose first SA is its
//! group's fallback SA (RFC 9611).

mod proof;

use super::child_sa::ChildPayloads;
use super::child_sa::answer::{ChildAnswer, Keying};
use super::child_sa::offer::ChildOffer;
use super::{Outcome, Received};
use crate::cert::CERT_ENCODING_X509;
use crate::ctx::{Action, Ctx};
use crate::event::{AuthFailure, Event, Reason};
use crate::identity::Identity;
use crate::lifetime::{MAX_WINDOW, Unique, rekey_deadline};
use crate::sa::{IkeSa, Refusal, State, notify, peer_window, window_notify};
use core::net::SocketAddr;
use esparto_wire::ike::{
    AuthRepr, ExchangeType, IdRepr, NotifyRepr, NotifyType, PayloadRepr, PayloadType,
};
use pki_types::UnixTime;
use proof::{Proof, Unverified, Verified};
use std::sync::Arc;

/// The payloads of an IKE_AUTH message that either role reads (the
/// payload rules have checked which may appear, [`crate::rules`]).
struct AuthPayloads<'a> {
    idi: Option<IdRepr<'a>>,
    idr: Option<IdRepr<'a>>,
    auth: Option<AuthRepr<'a>>,
    /// SET_WINDOW_SIZE (§2.3).
    window: Option<u32>,
    /// INITIAL_CONTACT (§2.4).
    initial_contact: bool,
    /// MOBIKE_SUPPORTED (RFC 4555 §4.2.1).
    mobike: bool,
    /// CERT payload bodies (encoding octet first), in order (§3.6).
    certs: Vec<&'a [u8]>,
    /// The Child SA part.
    child: ChildPayloads<'a>,
}

/// The encodings of the CERT bodies that are not X.509 certificates (an
/// empty body, which has no encoding octet, as 0, a reserved value).
fn skipped_encodings(certs: &[&[u8]]) -> Vec<u8> {
    certs
        .iter()
        .filter_map(|b| match b.first() {
            Some(&CERT_ENCODING_X509) => None,
            Some(&e) => Some(e),
            None => Some(0),
        })
        .collect()
}

impl<'a> AuthPayloads<'a> {
    /// Counts (and logs) the CERT payloads of encodings we do not read;
    /// they are skipped and the X.509 ones used (§3.6).
    fn count_skipped_certs(&self, ctx: &mut Ctx<'_>, ike_sa: impl core::fmt::Display) {
        let skipped = skipped_encodings(&self.certs);
        if !skipped.is_empty() {
            ctx.stats.cert_payloads_skipped += skipped.len() as u64;
            tracing::info!(%ike_sa, encodings = ?skipped,
                "skipped {} CERT payload(s) not in X.509 certificate encoding (4)", skipped.len());
        }
    }

    fn collect(payloads: &'a [PayloadRepr<'a>]) -> Self {
        let mut m = AuthPayloads {
            idi: None,
            idr: None,
            auth: None,
            window: None,
            initial_contact: false,
            mobike: false,
            certs: Vec::new(),
            child: ChildPayloads::collect(payloads),
        };
        for p in payloads {
            match p {
                PayloadRepr::IdI(i) => m.idi = Some(*i),
                PayloadRepr::IdR(i) => m.idr = Some(*i),
                PayloadRepr::Auth(a) => m.auth = Some(*a),
                PayloadRepr::Other {
                    payload_type: PayloadType::CERT,
                    body,
                } => m.certs.push(body),
                PayloadRepr::Notify(n) => match n.kind {
                    NotifyType::SET_WINDOW_SIZE => m.window = n.u32_data(),
                    NotifyType::INITIAL_CONTACT => m.initial_contact = true,
                    NotifyType::MOBIKE_SUPPORTED => m.mobike = true,
                    _ => {}
                },
                _ => {}
            }
        }
        m
    }
}

impl IkeSa {
    /// Both roles, once the peer is authenticated: the IKE SA is
    /// established and the driver hears of it, the peer's window applies
    /// (§2.3), the rekey timer starts, and INITIAL_CONTACT from the peer
    /// deletes its older IKE SAs (§2.4). Our own window is left to the
    /// caller: a responder keeps it at one until its answer is out.
    fn established(
        &mut self,
        ctx: &mut Ctx<'_>,
        peer: SocketAddr,
        local_id: Identity,
        remote_id: Identity,
        window: Option<u32>,
        initial_contact: bool,
    ) {
        // The IKE_SA_INIT state goes when this step ends (`Endpoint::after`).
        self.state = State::Established;
        self.announced = true;
        tracing::info!(ike_sa = %self.id, peer = %peer, identity = %remote_id, connection = %self.conn.name, "IKE_SA established");
        ctx.events.push_back(Event::IkeSaEstablished {
            ike_sa: self.id,
            connection: self.conn.name.clone(),
            local: self.local,
            remote: self.remote,
            local_id: local_id.clone(),
            remote_id: remote_id.clone(),
            initiator: self.is_initiator(),
        });
        self.local_id = Some(local_id);
        self.remote_id = Some(remote_id);
        self.peer_window = peer_window(window);
        self.rekey_at = rekey_deadline(ctx, self.conn.rekey_time, self.conn.jitter());
        let replace = !self.is_initiator() && self.conn.unique == Unique::Replace;
        if initial_contact || replace {
            ctx.actions.push(Action::Duplicates {
                keep: self.id.0,
                initial_contact,
            });
        }
    }

    /// A responder's `unique = keep` (charon's rule): an authenticated
    /// initiator without INITIAL_CONTACT is refused while an IKE SA of the
    /// connection with the same identities is up from another address (one
    /// from the same address is taken for a reauthentication). The
    /// address of the SA kept, if refused.
    fn kept_instead(
        &self,
        ctx: &Ctx<'_>,
        v: &Verified<'_>,
        from: SocketAddr,
        initial_contact: bool,
    ) -> Option<core::net::IpAddr> {
        if v.conn.unique != Unique::Keep || initial_contact {
            return None;
        }
        ctx.sa_index
            .up_with(&v.conn, &v.local_id, &v.peer_id)
            .find(|(id, ip)| *id != self.id.0 && *ip != from.ip())
            .map(|(_, ip)| ip)
    }
}

// ---------------------------------------------------------------------------
// Initiator

/// The IKE_AUTH task.
pub(crate) struct IkeAuth {
    /// The first Child SA, if the connection asks for one.
    child: Option<ChildOffer>,
}

impl IkeAuth {
    pub(super) fn new(child: Option<(Arc<str>, Option<u16>)>) -> Self {
        IkeAuth {
            child: child.map(|(name, resource)| ChildOffer::first(name, resource)),
        }
    }

    /// The child configuration this IKE_AUTH creates, if any.
    pub(crate) fn child_name(&self) -> Option<&Arc<str>> {
        self.child.as_ref().map(|c| &c.name)
    }

    pub(super) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(c) = self.child {
            c.release(ctx);
        }
    }

    pub(super) fn build(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mid: u32,
    ) -> Result<Vec<u8>, Reason> {
        sa.handshake_mut().seal_int_auth(mid);
        let conn = sa.conn.clone();
        let local_id = conn.local_id(sa.local.ip());
        let (id_type, id_data) = local_id
            .to_wire()
            .ok_or(Reason::Local("local identity %any"))?;
        let idi = IdRepr {
            id_type,
            data: &id_data,
        };
        let (method, auth) = proof::initiator_proof(sa, ctx, &local_id, &idi)?;
        let idr_wire = conn.remote.id.as_ref().and_then(Identity::to_wire);
        let child_cfg = match &mut self.child {
            Some(c) => {
                let cfg = conn.child(&c.name).ok_or(Reason::Local("unknown child"))?;
                c.prepare(sa, ctx, cfg)?;
                Some(cfg)
            }
            None => None,
        };
        let certs = proof::cert_bodies(conn.local.credential.as_deref());
        let certreq = conn.remote.trust.as_ref().map(|t| t.certreq());

        // §1.2: IDi, [CERT,] [CERTREQ,] [IDr,] AUTH, …
        let mut payloads = vec![PayloadRepr::IdI(idi)];
        payloads.extend(certs.iter().map(|body| PayloadRepr::Other {
            payload_type: PayloadType::CERT,
            body,
        }));
        if let Some(body) = &certreq {
            payloads.push(PayloadRepr::Other {
                payload_type: PayloadType::CERTREQ,
                body,
            });
        }
        if let Some((t, d)) = &idr_wire {
            payloads.push(PayloadRepr::IdR(IdRepr {
                id_type: *t,
                data: d,
            }));
        }
        payloads.push(PayloadRepr::Auth(AuthRepr { method, data: &auth }));
        if sa.initial_contact {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::INITIAL_CONTACT,
                &[],
            )));
        }
        if sa.conn.mobike {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::MOBIKE_SUPPORTED,
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
        if let (Some(c), Some(cfg)) = (&self.child, child_cfg) {
            payloads.extend(c.payloads(cfg)?);
        }
        let packet = sa.encode(ExchangeType::IKE_AUTH, false, mid, &payloads)?;
        sa.local_id = Some(local_id);
        Ok(packet)
    }

    pub(super) fn process(
        self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        let m = AuthPayloads::collect(&rx.payloads);
        m.count_skipped_certs(ctx, sa.id);
        let (local_id, peer_id) = match proof::authenticate_responder(sa, ctx, rx, &m) {
            Ok(ids) => ids,
            Err(outcome) => {
                self.release(ctx);
                return outcome;
            }
        };
        let peer = sa.remote;
        sa.mobike = sa.conn.mobike && m.mobike;
        sa.established(ctx, peer, local_id, peer_id, m.window, m.initial_contact);
        sa.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        match self.child {
            Some(c) => c.process(sa, ctx, rx.error(), &m.child),
            None => Outcome::Done,
        }
    }
}

// ---------------------------------------------------------------------------
// Responder

impl IkeSa {
    /// An IKE_AUTH request: authenticate the initiator, answer with our
    /// own proof, and negotiate the first Child SA if it asks for one.
    pub(crate) fn respond_ike_auth(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        (from, to): (SocketAddr, SocketAddr),
        wall_clock: UnixTime,
    ) {
        if self.handshake.as_ref().is_some_and(|hs| !hs.ake_pending.is_empty()) {
            // RFC 9370 §2.2.2: every negotiated key exchange comes first.
            tracing::info!(ike_sa = %self.id, peer = %from, "IKE_AUTH before the additional key exchanges: refused");
            ctx.stats.intermediate_refused += 1;
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_SYNTAX, &[]));
            self.respond(ctx, ExchangeType::IKE_AUTH, mid, &[n], from, to);
            return self.die(ctx, Reason::ProtocolError("IKE_AUTH before IKE_INTERMEDIATE"));
        }
        self.handshake_mut().seal_int_auth(mid);
        let m = AuthPayloads::collect(payloads);
        m.count_skipped_certs(ctx, self.id);
        let verified = match self.verify_initiator(ctx, &m, from, wall_clock) {
            Ok(v) => v,
            Err(Unverified::Drop) => return,
            Err(Unverified::Refuse(identity, reason)) => {
                return self.fail_auth(ctx, mid, from, to, identity, reason);
            }
        };
        if let Some(kept) = self.kept_instead(ctx, &verified, from, m.initial_contact) {
            tracing::info!(ike_sa = %self.id, peer = %from, identity = %verified.peer_id, %kept,
                connection = %verified.conn.name,
                "refusing a second IKE_SA for this identity (unique = keep): one is up from another address");
            let identity = Some(verified.peer_id.clone());
            return self.fail_auth(ctx, mid, from, to, identity, AuthFailure::UniqueKeep);
        }
        let Some(proof) = self.prove_responder(ctx, &verified) else {
            return;
        };
        // Kept for the first Child SA's KEYMAT (§2.17) past the borrow.
        let Some((ni, nr)) = self
            .handshake
            .as_deref()
            .map(|h| (h.ni.clone(), h.nr.clone()))
        else {
            return;
        };
        let Verified {
            conn,
            local_id,
            peer_id,
            ..
        } = verified;
        self.conn = conn;
        self.mobike = self.conn.mobike && m.mobike;
        self.established(ctx, from, local_id, peer_id, m.window, m.initial_contact);
        if self.nat.local_behind_nat {
            self.next_keepalive = Some(ctx.now + ctx.config.keepalive_interval);
        }
        // The first Child SA, if the request asks for one: negotiated as in
        // CREATE_CHILD_SA, but keyed from IKE_SA_INIT (§1.2, §2.17).
        let child = m
            .child
            .child_sa()
            .map(|_| self.answer_child(ctx, &m.child, Keying::Initial { ni: &ni, nr: &nr }));
        let window = window_notify(ctx.config);
        let mut group = [0; 2];
        let out = auth_response(&proof, window.as_ref(), self.mobike, child.as_ref(), &mut group);
        // Window one until this answer is out (§2.3), so only it is kept
        // (the IKE_SA_INIT response is of no use any more); ours from now.
        self.respond(ctx, ExchangeType::IKE_AUTH, mid, &out, from, to);
        self.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        if let Some(Ok(answer)) = &child {
            let name = answer.child.clone();
            self.fallback_done(ctx, &name, Some(answer.resource_info));
        }
    }

    /// Authentication failed: tell the driver and the peer (§2.21.2), and
    /// end the IKE SA.
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
}

/// `IDr, AUTH, [N(SET_WINDOW_SIZE),] [N(MOBIKE_SUPPORTED),]` then the
/// Child SA's answer — `[N(SA_RESOURCE_INFO),] SAr2, TSi, TSr` — or the
/// notify refusing it.
fn auth_response<'a>(
    proof: &'a Proof,
    window: Option<&'a [u8; 4]>,
    mobike: bool,
    child: Option<&'a Result<ChildAnswer, Refusal>>,
    group: &'a mut [u8; 2],
) -> Vec<PayloadRepr<'a>> {
    let mut out = vec![PayloadRepr::IdR(IdRepr {
        id_type: proof.id_type,
        data: &proof.id_data,
    })];
    out.extend(proof.certs.iter().map(|body| PayloadRepr::Other {
        payload_type: PayloadType::CERT,
        body,
    }));
    out.push(PayloadRepr::Auth(AuthRepr {
        method: proof.method,
        data: &proof.auth,
    }));
    if let Some(w) = window {
        out.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::SET_WINDOW_SIZE,
            w,
        )));
    }
    if mobike {
        out.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::MOBIKE_SUPPORTED, &[])));
    }
    match child {
        Some(Ok(answer)) => out.extend(answer.payloads()),
        Some(Err(refusal)) => out.push(refusal.payload(group)),
        None => {}
    }
    out
}

#[cfg(test)]
mod skipped_cert_tests {
    use super::*;

    #[test]
    fn only_x509_certificates_are_kept_the_rest_is_named() {
        let x509: &[u8] = &[CERT_ENCODING_X509, 0x30, 0x82];
        let pkcs7: &[u8] = &[1, 0x30];
        let crl: &[u8] = &[7, 0x30];
        assert_eq!(skipped_encodings(&[x509, pkcs7, x509, crl, &[]]), vec![1, 7, 0]);
        assert!(skipped_encodings(&[x509, x509]).is_empty());
        assert!(skipped_encodings(&[]).is_empty());
    }
}
