//! IKE_AUTH (RFC 7296 §1.2, §2.15), both roles, with the first Child SA.
//!
//! ```text
//! HDR, SK {IDi, [CERT,] [CERTREQ,] [IDr,] AUTH, [N(INITIAL_CONTACT),] SAi2, TSi, TSr}  -->
//!                          <--  HDR, SK {IDr, [CERT,] AUTH, SAr2, TSi, TSr}
//! ```
//!
//! Each side proves that it holds the PSK for the pair of identities, or
//! the private key of its certificate, with an AUTH payload over its own
//! IKE_SA_INIT message, the other side's nonce and its own identity
//! ([`crate::auth`]; a signature, RFC 7427, [`crate::cert`]), and checks
//! the other's. A side whose connection trusts CAs for the peer
//! (`remote.trust`) demands a signature: the peer's CERT payloads must
//! chain to one of them and name the identity it presents, and its
//! signature must verify; a side with `local.credential` signs and sends
//! its chain. Each side chooses its own method (§2.15).
//! Neither side looks at the Child SA part before the peer is
//! authenticated, so an unauthenticated peer never gets a Child SA
//! installed.
//!
//! Initiator ([`IkeAuth`]). `build` sends our identity, the IDr we expect
//! (if the connection names one) and our AUTH, with INITIAL_CONTACT when we
//! hold no other IKE SA with this peer (§2.4: it "asserts that this IKE SA
//! is the only IKE SA currently active between the authenticated
//! identities [...] MUST be in the first IKE_AUTH request or response").
//! `process` counts the IKE SA as established only once the responder's
//! AUTH has verified with the PSK we hold for the identity it presents, and
//! that identity is one the connection accepts. A Child SA failure
//! (NO_PROPOSAL_CHOSEN, TS_UNACCEPTABLE) leaves the IKE SA up: §2.21.2 has
//! the IKE SA created as usual when only the Child SA part fails. If *our*
//! check of the answer fails after the responder installed its half, we
//! delete it with an INFORMATIONAL.
//!
//! Responder ([`IkeSa::respond_ike_auth`]). The connection is chosen by the
//! identity the peer proves, not just claims: candidates must accept IDi
//! (and offer IDr if asked), then the PSK for the identity pair must verify
//! the peer's AUTH. A failed authentication is logged once with the peer
//! and the identity, answered with AUTHENTICATION_FAILED (§2.21.2), and
//! ends the IKE SA. The first Child SA is negotiated as CREATE_CHILD_SA
//! would, without a key exchange of its own ([`IkeSa::negotiate_child`]).
//!
//! Both, once authenticated: SET_WINDOW_SIZE (§2.3: "The window size is
//! always one until the initial exchanges complete"), INITIAL_CONTACT acted
//! on (§2.4: the peer "MAY use this information to delete any other IKE SAs
//! it has to the same authenticated identity without waiting for a
//! timeout"), SA_RESOURCE_INFO with a per-CPU child, whose first SA is its
//! group's fallback SA (RFC 9611).

use super::{Outcome, Received, informational_notify, reason_for};
use crate::auth::{psk_auth, signed_octets, verify_psk_auth};
use crate::cert::{
    CERT_ENCODING_X509, CertRefusal, LocalCredential, TrustStore, x509_from_cert_payloads,
};
use super::child_sa::ChildPayloads;
use super::child_sa::answer::{ChildAnswer, Keying};
use super::child_sa::offer::ChildOffer;
use crate::config::ConnectionConfig;
use crate::ctx::{Action, Ctx};
use crate::event::{AuthFailure, Event, Reason};
use crate::identity::Identity;
use crate::lifetime::{MAX_WINDOW, rekey_deadline};
use crate::proposal::{Proposal, Protocol};
use crate::sa::{IkeSa, Refusal, State, notify, peer_window, window_notify};
use core::net::SocketAddr;
use esparto_crypto::SecretBytes;
use esparto_crypto::ike::PrfOutput;
use esparto_wire::ike::{
    AuthMethod, AuthRepr, ExchangeType, IdRepr, IdType, NotifyRepr, NotifyType, PayloadRepr,
    PayloadType, Spi,
};
use pki_types::UnixTime;
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
        if initial_contact {
            ctx.actions.push(Action::InitialContact { keep: self.id.0 });
        }
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
        let conn = sa.conn.clone();
        let local_id = conn.local_id(sa.local.ip());
        let (id_type, id_data) = local_id
            .to_wire()
            .ok_or(Reason::Local("local identity %any"))?;
        let idi = IdRepr {
            id_type,
            data: &id_data,
        };
        let (method, auth) = match &conn.local.credential {
            Some(cred) => (
                AuthMethod::DIGITAL_SIGNATURE,
                initiator_signature(sa, ctx, cred, &idi)?,
            ),
            None => (
                AuthMethod::SHARED_KEY_MIC,
                initiator_auth(sa, ctx, &local_id, &idi)?.as_slice().to_vec(),
            ),
        };
        let idr_wire = conn.remote.id.as_ref().and_then(Identity::to_wire);
        let child_cfg = match &mut self.child {
            Some(c) => {
                let cfg = conn.child(&c.name).ok_or(Reason::Local("unknown child"))?;
                c.prepare(sa, ctx, cfg)?;
                Some(cfg)
            }
            None => None,
        };
        let certs = cert_bodies(conn.local.credential.as_deref());
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
        let (local_id, peer_id) = match authenticate_responder(sa, ctx, rx, &m) {
            Ok(ids) => ids,
            Err(outcome) => {
                self.release(ctx);
                return outcome;
            }
        };
        let peer = sa.remote;
        sa.established(ctx, peer, local_id, peer_id, m.window, m.initial_contact);
        sa.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        match self.child {
            Some(c) => c.process(sa, ctx, rx.error(), &m.child),
            None => Outcome::Done,
        }
    }
}

/// Our AUTH (§2.15: over RealMessage1 | NonceRData | MACedIDForI), with the
/// PSK for our identity and the one we expect of the responder.
fn initiator_auth(
    sa: &IkeSa,
    ctx: &mut Ctx<'_>,
    local_id: &Identity,
    idi: &IdRepr<'_>,
) -> Result<PrfOutput, Reason> {
    let remote_hint = sa.conn.remote.id.clone().unwrap_or(Identity::Any);
    let Some(psk) = ctx.psks.find(local_id, &remote_hint) else {
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
    let (keys, hs, sk_pi) = initiator_auth_inputs(sa)?;
    Ok(psk_auth(
        keys.prf,
        psk.as_slice(),
        &hs.init_request,
        &hs.nr,
        sk_pi,
        idi,
    ))
}

/// What the initiator's AUTH is computed from (§2.15): the IKE SA's keys,
/// the IKE_SA_INIT exchange and SK_pi.
fn initiator_auth_inputs(sa: &IkeSa) -> Result<(&crate::keys::IkeKeys, &crate::sa::Handshake, &[u8]), Reason> {
    let keys = sa.keys.as_ref().ok_or(Reason::Local("no keys"))?;
    let hs = sa
        .handshake
        .as_deref()
        .ok_or(Reason::Local("IKE_SA_INIT state gone"))?;
    let sk_pi = keys.sk_pi().ok_or(Reason::Local("SK_pi gone"))?;
    Ok((keys, hs, sk_pi))
}

/// Our signature (RFC 7427) over RealMessage1 | NonceRData | MACedIDForI.
fn initiator_signature(
    sa: &IkeSa,
    ctx: &mut Ctx<'_>,
    cred: &LocalCredential,
    idi: &IdRepr<'_>,
) -> Result<Vec<u8>, Reason> {
    let (keys, hs, sk_pi) = initiator_auth_inputs(sa)?;
    let octets = signed_octets(keys.prf, &hs.init_request, &hs.nr, sk_pi, idi);
    cred.key().auth_data(ctx.rng, &octets).map_err(|e| {
        tracing::warn!(ike_sa = %sa.id, "cannot sign AUTH: {e}");
        Reason::Local("signing failed")
    })
}

/// CERT payload bodies for our chain, end entity first (§3.6).
fn cert_bodies(cred: Option<&LocalCredential>) -> Vec<Vec<u8>> {
    cred.map_or_else(Vec::new, |c| {
        c.chain()
            .iter()
            .map(|der| {
                let mut body = Vec::with_capacity(1 + der.len());
                body.push(CERT_ENCODING_X509);
                body.extend_from_slice(der);
                body
            })
            .collect()
    })
}

/// What the peer's certificates are checked against: the connection's
/// CAs, at the calendar time the message arrived (the caller's reading,
/// [`crate::Endpoint::handle_datagram`]).
#[derive(Clone, Copy)]
struct TrustAt<'a> {
    store: &'a TrustStore,
    wall_clock: UnixTime,
}

/// Validate the peer's certificates against `trust`, check that they name
/// `peer_id`, and check its AUTH signature over `octets`.
fn verify_signature_auth(
    trust: TrustAt<'_>,
    certs: &[&[u8]],
    peer_id: &Identity,
    auth: &[u8],
    octets: &[u8],
) -> Result<(), CertRefusal> {
    let (x509, _other) = x509_from_cert_payloads(certs)?;
    let (ee, inter) = x509.split_first().ok_or(CertRefusal::NoCertificate)?;
    let peer = trust.store.verify(ee, inter, trust.wall_clock, peer_id)?;
    peer.verify_auth(auth, octets)
}

/// Check the responder's IDr and AUTH (§2.15: over RealMessage2 |
/// NonceIData | MACedIDForR). Returns our identity and the responder's, or
/// what the failure means for the IKE SA (reported to the driver).
fn authenticate_responder(
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    rx: &Received<'_>,
    m: &AuthPayloads<'_>,
) -> Result<(Identity, Identity), Outcome> {
    if rx.notify(NotifyType::AUTHENTICATION_FAILED).is_some() {
        tracing::warn!(ike_sa = %sa.id, peer = %sa.remote,
            local_id = %sa.local_id.as_ref().map_or_else(String::new, ToString::to_string),
            "peer rejected our authentication (AUTHENTICATION_FAILED)");
        return Err(auth_failed(sa, ctx, None, AuthFailure::RejectedByPeer));
    }
    let (Some(idr), Some(auth)) = (m.idr, m.auth) else {
        let reason = rx.error().map_or(
            Reason::ProtocolError("IKE_AUTH response without IDr/AUTH"),
            |(k, _)| reason_for(k),
        );
        return Err(Outcome::Fail(reason));
    };
    let Some(peer_id) = Identity::from_wire(idr.id_type, idr.data) else {
        return Err(auth_failed(sa, ctx, None, AuthFailure::UnknownIdentity));
    };
    if !sa.conn.accepts_remote_id(&peer_id) {
        tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id, "peer identity not accepted by the connection");
        let reason = AuthFailure::UnknownIdentity;
        return Err(auth_failed(sa, ctx, Some(peer_id), reason));
    }
    let local_id = sa
        .local_id
        .clone()
        .unwrap_or_else(|| sa.conn.local_id(sa.local.ip()));
    if let Some(trust) = sa.conn.remote.trust.clone() {
        let trust = TrustAt { store: &trust, wall_clock: rx.wall_clock };
        return check_responder_signature(sa, ctx, trust, m, idr, auth, peer_id)
            .map(|peer_id| (local_id, peer_id));
    }
    if auth.method != AuthMethod::SHARED_KEY_MIC {
        tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id, method = %auth.method,
            "authentication of the responder failed: method {} where the connection uses a PSK", auth.method);
        let reason = AuthFailure::UnsupportedMethod;
        return Err(auth_failed(sa, ctx, Some(peer_id), reason));
    }
    let Some(psk) = ctx.psks.find(&local_id, &peer_id) else {
        return Err(auth_failed(sa, ctx, Some(peer_id), AuthFailure::NoSecret));
    };
    let (Some(keys), Some(hs)) = (sa.keys.as_ref(), sa.handshake.as_deref()) else {
        return Err(Outcome::Fail(Reason::Local("no keys")));
    };
    let Some(sk_pr) = keys.sk_pr() else {
        return Err(Outcome::Fail(Reason::Local("SK_pr gone")));
    };
    let verified = verify_psk_auth(
        keys.prf,
        psk.as_slice(),
        &hs.init_response,
        &hs.ni,
        sk_pr,
        &idr,
        auth.data,
    );
    if !verified {
        tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id,
            "authentication of the responder failed: its AUTH does not verify with our PSK");
        // §2.21.2: the initiator MAY tell the responder in an INFORMATIONAL.
        informational_notify(sa, ctx, NotifyType::AUTHENTICATION_FAILED);
        return Err(auth_failed(sa, ctx, Some(peer_id), AuthFailure::BadAuth));
    }
    Ok((local_id, peer_id))
}

/// The responder's certificate and signature (RFC 7427) over
/// RealMessage2 | NonceIData | MACedIDForR.
fn check_responder_signature(
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    trust: TrustAt<'_>,
    m: &AuthPayloads<'_>,
    idr: IdRepr<'_>,
    auth: AuthRepr<'_>,
    peer_id: Identity,
) -> Result<Identity, Outcome> {
    let (Some(keys), Some(hs)) = (sa.keys.as_ref(), sa.handshake.as_deref()) else {
        return Err(Outcome::Fail(Reason::Local("no keys")));
    };
    let Some(sk_pr) = keys.sk_pr() else {
        return Err(Outcome::Fail(Reason::Local("SK_pr gone")));
    };
    let checked = if auth.method == AuthMethod::DIGITAL_SIGNATURE {
        let octets = signed_octets(keys.prf, &hs.init_response, &hs.ni, sk_pr, &idr);
        verify_signature_auth(trust, &m.certs, &peer_id, auth.data, &octets)
    } else {
        Err(CertRefusal::UnsupportedAlgorithm)
    };
    match checked {
        Ok(()) => Ok(peer_id),
        Err(refusal) => {
            tracing::warn!(ike_sa = %sa.id, peer = %sa.remote, identity = %peer_id, reason = refusal.name(),
                "authentication of the responder failed: {refusal}");
            informational_notify(sa, ctx, NotifyType::AUTHENTICATION_FAILED);
            let reason = AuthFailure::from(&refusal);
            Err(auth_failed(sa, ctx, Some(peer_id), reason))
        }
    }
}

/// Report a failed authentication; the IKE SA ends.
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

// ---------------------------------------------------------------------------
// Responder

/// An initiator that passed the responder's checks.
struct Verified<'p> {
    /// The connection its proven identity selects.
    conn: Arc<ConnectionConfig>,
    local_id: Identity,
    peer_id: Identity,
    /// The PSK, unless we sign.
    psk: Option<&'p SecretBytes>,
}

/// Why the responder does not authenticate an IKE_AUTH request.
enum Unverified {
    /// No IDi, or the IKE SA's keys are gone: dropped unanswered.
    Drop,
    /// Answered with AUTHENTICATION_FAILED (§2.21.2).
    Refuse(Option<Identity>, AuthFailure),
}

/// Our answer's proof: IDr and AUTH over RealMessage2 | NonceIData |
/// MACedIDForR (§2.15).
struct Proof {
    id_type: IdType,
    id_data: Vec<u8>,
    method: AuthMethod,
    auth: Vec<u8>,
    /// CERT payload bodies, end entity first.
    certs: Vec<Vec<u8>>,
}

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
        let m = AuthPayloads::collect(payloads);
        m.count_skipped_certs(ctx, self.id);
        let verified = match self.verify_initiator(ctx, &m, from, wall_clock) {
            Ok(v) => v,
            Err(Unverified::Drop) => return,
            Err(Unverified::Refuse(identity, reason)) => {
                return self.fail_auth(ctx, mid, from, to, identity, reason);
            }
        };
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
        let out = auth_response(&proof, window.as_ref(), child.as_ref(), &mut group);
        // Window one until this answer is out (§2.3), so only it is kept
        // (the IKE_SA_INIT response is of no use any more); ours from now.
        self.respond(ctx, ExchangeType::IKE_AUTH, mid, &out, from, to);
        self.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        if let Some(Ok(answer)) = &child {
            let name = answer.child.clone();
            self.fallback_done(ctx, &name, Some(answer.resource_info));
        }
    }

    /// The responder's checks, cheapest first: a usable IDi, an AUTH
    /// payload (none means EAP, which we do not offer), a connection for
    /// this identity, the PSK method, a PSK for the pair, and last the
    /// AUTH value itself (§2.15: over RealMessage1 | NonceRData |
    /// MACedIDForI).
    fn verify_initiator<'p>(
        &self,
        ctx: &Ctx<'p>,
        m: &AuthPayloads<'_>,
        from: SocketAddr,
        wall_clock: UnixTime,
    ) -> Result<Verified<'p>, Unverified> {
        let Some(idi) = m.idi else {
            return Err(Unverified::Drop);
        };
        let Some(peer_id) = Identity::from_wire(idi.id_type, idi.data) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, "authentication failed: unusable identity type {}", idi.id_type);
            return Err(Unverified::Refuse(None, AuthFailure::UnknownIdentity));
        };
        let Some(auth) = m.auth else {
            return Err(Unverified::Refuse(
                Some(peer_id),
                AuthFailure::UnsupportedMethod,
            ));
        };
        let want_idr = m.idr.and_then(|i| Identity::from_wire(i.id_type, i.data));
        let signs = auth.method == AuthMethod::DIGITAL_SIGNATURE;
        let Some(conn) = self.pick_connection(ctx, &peer_id, want_idr.as_ref(), signs) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no connection for this identity");
            return Err(Unverified::Refuse(
                Some(peer_id),
                AuthFailure::UnknownIdentity,
            ));
        };
        let local_id = conn.local_id(self.local.ip());
        if let Some(trust) = conn.remote.trust.clone() {
            let trust = TrustAt { store: &trust, wall_clock };
            self.check_initiator_signature(trust, m, idi, auth, &peer_id, from)?;
            // Each side picks its own method (§2.15): we may still use a PSK.
            let psk = if conn.local.credential.is_none() {
                ctx.psks.find(&local_id, &peer_id)
            } else {
                None
            };
            return Ok(Verified {
                conn,
                local_id,
                peer_id,
                psk,
            });
        }
        if auth.method != AuthMethod::SHARED_KEY_MIC {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, method = %auth.method, "authentication failed: unsupported method");
            return Err(Unverified::Refuse(
                Some(peer_id),
                AuthFailure::UnsupportedMethod,
            ));
        }
        let psks = ctx.psks;
        let Some(psk) = psks.find(&local_id, &peer_id) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no PSK for '{}' - '{}'", local_id, peer_id);
            return Err(Unverified::Refuse(Some(peer_id), AuthFailure::NoSecret));
        };
        let (Some(keys), Some(hs)) = (self.keys.as_ref(), self.handshake.as_deref()) else {
            return Err(Unverified::Drop);
        };
        let (Some(sk_pi), Some(_)) = (keys.sk_pi(), keys.sk_pr()) else {
            return Err(Unverified::Drop);
        };
        let verified = verify_psk_auth(
            keys.prf,
            psk.as_slice(),
            &hs.init_request,
            &hs.nr,
            sk_pi,
            &idi,
            auth.data,
        );
        if !verified {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id,
                "authentication of '{}' failed: AUTH payload does not verify with the PSK (wrong PSK?)", peer_id);
            return Err(Unverified::Refuse(Some(peer_id), AuthFailure::BadAuth));
        }
        Ok(Verified {
            conn,
            local_id,
            peer_id,
            psk: Some(psk),
        })
    }

    /// The initiator's certificate and signature (RFC 7427) over
    /// RealMessage1 | NonceRData | MACedIDForI.
    fn check_initiator_signature(
        &self,
        trust: TrustAt<'_>,
        m: &AuthPayloads<'_>,
        idi: IdRepr<'_>,
        auth: AuthRepr<'_>,
        peer_id: &Identity,
        from: SocketAddr,
    ) -> Result<(), Unverified> {
        let (Some(keys), Some(hs)) = (self.keys.as_ref(), self.handshake.as_deref()) else {
            return Err(Unverified::Drop);
        };
        let Some(sk_pi) = keys.sk_pi() else {
            return Err(Unverified::Drop);
        };
        let checked = if auth.method == AuthMethod::DIGITAL_SIGNATURE {
            let octets = signed_octets(keys.prf, &hs.init_request, &hs.nr, sk_pi, &idi);
            verify_signature_auth(trust, &m.certs, peer_id, auth.data, &octets)
        } else {
            Err(CertRefusal::UnsupportedAlgorithm)
        };
        checked.map_err(|refusal| {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, reason = refusal.name(),
                "authentication of '{}' failed: {refusal}", peer_id);
            Unverified::Refuse(Some(peer_id.clone()), AuthFailure::from(&refusal))
        })
    }

    /// The connection for an authenticating peer: matching addresses, the
    /// peer's identity, the IDr it asked for, and the IKE suite already
    /// chosen. The candidate from IKE_SA_INIT wins ties.
    fn pick_connection(
        &self,
        ctx: &Ctx<'_>,
        peer: &Identity,
        idr: Option<&Identity>,
        signs: bool,
    ) -> Option<Arc<ConnectionConfig>> {
        let suite = self.suite.as_ref()?;
        let answer = suite.to_wire(Protocol::Ike, Spi::None);
        let fits = |c: &Arc<ConnectionConfig>| {
            c.matches_addrs(self.local.ip(), self.remote.ip())
                && c.accepts_remote_id(peer)
                && c.remote.trust.is_some() == signs
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

    /// Our IDr and AUTH for a verified initiator.
    fn prove_responder(&self, ctx: &mut Ctx<'_>, v: &Verified<'_>) -> Option<Proof> {
        let keys = self.keys.as_ref()?;
        let hs = self.handshake.as_deref()?;
        let sk_pr = keys.sk_pr()?;
        let (id_type, id_data) = v.local_id.to_wire()?;
        let idr = IdRepr {
            id_type,
            data: &id_data,
        };
        let cred = v.conn.local.credential.as_deref();
        let (method, auth) = match (cred, v.psk) {
            (Some(cred), _) => {
                let octets = signed_octets(keys.prf, &hs.init_response, &hs.ni, sk_pr, &idr);
                match cred.key().auth_data(ctx.rng, &octets) {
                    Ok(a) => (AuthMethod::DIGITAL_SIGNATURE, a),
                    Err(e) => {
                        tracing::warn!(ike_sa = %self.id, "cannot sign AUTH: {e}");
                        return None;
                    }
                }
            }
            (None, Some(psk)) => {
                let a = psk_auth(keys.prf, psk.as_slice(), &hs.init_response, &hs.ni, sk_pr, &idr);
                (AuthMethod::SHARED_KEY_MIC, a.as_slice().to_vec())
            }
            (None, None) => {
                tracing::warn!(ike_sa = %self.id, identity = %v.local_id,
                    "no certificate and no PSK to authenticate ourselves with");
                return None;
            }
        };
        Some(Proof {
            id_type,
            id_data,
            method,
            auth,
            certs: cert_bodies(cred),
        })
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

/// `IDr, AUTH, [N(SET_WINDOW_SIZE),]` then the Child SA's answer —
/// `[N(SA_RESOURCE_INFO),] SAr2, TSi, TSr` — or the notify refusing it.
fn auth_response<'a>(
    proof: &'a Proof,
    window: Option<&'a [u8; 4]>,
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
