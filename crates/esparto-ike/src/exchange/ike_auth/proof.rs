//! Who is who in IKE_AUTH (RFC 7296 §2.15): our AUTH payload, the check
//! of the peer's, and, for the responder, the connection the peer's proven
//! identity selects.
//!
//! An AUTH payload is over the sender's IKE_SA_INIT message, the other
//! side's nonce and the sender's identity under SK_pi or SK_pr
//! ([`crate::auth::signed_octets`]): the PSK's MAC (method 2,
//! [`crate::auth`]) or a signature with the private key of a certificate
//! (method 14, RFC 7427, [`crate::cert`]). A side whose connection trusts
//! CAs for the peer (`remote.trust`) demands a signature: the peer's CERT
//! payloads must chain to one of them at the calendar time the message
//! arrived ([`TrustAt`]) and name the identity it presents (RFC 4945
//! §3.1), and its signature must verify; a side with `local.credential`
//! signs and sends its chain. Otherwise the PSK for the pair of identities
//! must verify the peer's MAC.
//!
//! The responder's checks run cheapest first — a usable IDi, an AUTH
//! payload (none means EAP, which we do not offer), a connection that
//! accepts this identity (and offers the IDr asked for, and the IKE suite
//! already chosen), the method, a PSK or the certificate chain, and last
//! the AUTH value itself — and each refusal is logged once with the peer
//! and the identity. The initiator accepts the responder only with the
//! identity the connection expects, proven by the method it demands.

use super::AuthPayloads;
use crate::auth::{psk_auth, signed_octets, verify_psk_auth};
use crate::cert::{
    CERT_ENCODING_X509, CertRefusal, LocalCredential, TrustStore, x509_from_cert_payloads,
};
use crate::config::ConnectionConfig;
use crate::ctx::Ctx;
use crate::event::{AuthFailure, Event, Reason};
use crate::exchange::{Outcome, Received, informational_notify, reason_for};
use crate::identity::Identity;
use crate::proposal::{Proposal, Protocol};
use crate::sa::IkeSa;
use core::net::SocketAddr;
use esparto_crypto::SecretBytes;
use esparto_crypto::ike::PrfOutput;
use esparto_wire::ike::{AuthMethod, AuthRepr, IdRepr, IdType, NotifyType, Spi};
use pki_types::UnixTime;
use std::sync::Arc;

// ---------------------------------------------------------------------------
// Initiator

/// Our AUTH as initiator: a signature with our credential (RFC 7427), else
/// the MAC with the PSK (§2.15).
pub(super) fn initiator_proof(
    sa: &IkeSa,
    ctx: &mut Ctx<'_>,
    local_id: &Identity,
    idi: &IdRepr<'_>,
) -> Result<(AuthMethod, Vec<u8>), Reason> {
    match &sa.conn.local.credential {
        Some(cred) => Ok((
            AuthMethod::DIGITAL_SIGNATURE,
            initiator_signature(sa, ctx, cred, idi)?,
        )),
        None => Ok((
            AuthMethod::SHARED_KEY_MIC,
            initiator_auth(sa, ctx, local_id, idi)?.as_slice().to_vec(),
        )),
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
        (&hs.init_request, &hs.int_auth),
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
    let octets = signed_octets(keys.prf, (&hs.init_request, &hs.int_auth), &hs.nr, sk_pi, idi);
    cred.key().auth_data(ctx.rng, &octets).map_err(|e| {
        tracing::warn!(ike_sa = %sa.id, "cannot sign AUTH: {e}");
        Reason::Local("signing failed")
    })
}

/// CERT payload bodies for our chain, end entity first (§3.6).
pub(super) fn cert_bodies(cred: Option<&LocalCredential>) -> Vec<Vec<u8>> {
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
pub(super) fn authenticate_responder(
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
        (&hs.init_response, &hs.int_auth),
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
        let octets = signed_octets(keys.prf, (&hs.init_response, &hs.int_auth), &hs.ni, sk_pr, &idr);
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
pub(super) struct Verified<'p> {
    /// The connection its proven identity selects.
    pub(super) conn: Arc<ConnectionConfig>,
    pub(super) local_id: Identity,
    pub(super) peer_id: Identity,
    /// The PSK, unless we sign.
    pub(super) psk: Option<&'p SecretBytes>,
}

/// Why the responder does not authenticate an IKE_AUTH request.
pub(super) enum Unverified {
    /// No IDi, or the IKE SA's keys are gone: dropped unanswered.
    Drop,
    /// Answered with AUTHENTICATION_FAILED (§2.21.2).
    Refuse(Option<Identity>, AuthFailure),
}

/// Our answer's proof: IDr and AUTH over RealMessage2 | NonceIData |
/// MACedIDForR (§2.15).
pub(super) struct Proof {
    pub(super) id_type: IdType,
    pub(super) id_data: Vec<u8>,
    pub(super) method: AuthMethod,
    pub(super) auth: Vec<u8>,
    /// CERT payload bodies, end entity first.
    pub(super) certs: Vec<Vec<u8>>,
}

impl IkeSa {
    /// The responder's checks, cheapest first: a usable IDi, an AUTH
    /// payload (none means EAP, which we do not offer), a connection for
    /// this identity, the PSK method, a PSK for the pair, and last the
    /// AUTH value itself (§2.15: over RealMessage1 | NonceRData |
    /// MACedIDForI).
    pub(super) fn verify_initiator<'p>(
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
        let psk = self.check_initiator_psk(ctx, idi, auth, (&local_id, &peer_id), from)?;
        Ok(Verified {
            conn,
            local_id,
            peer_id,
            psk: Some(psk),
        })
    }

    /// The initiator's MAC with the PSK for the pair of identities (§2.15:
    /// over RealMessage1 | NonceRData | MACedIDForI). Returns the PSK, for
    /// our own AUTH.
    fn check_initiator_psk<'p>(
        &self,
        ctx: &Ctx<'p>,
        idi: IdRepr<'_>,
        auth: AuthRepr<'_>,
        (local_id, peer_id): (&Identity, &Identity),
        from: SocketAddr,
    ) -> Result<&'p SecretBytes, Unverified> {
        if auth.method != AuthMethod::SHARED_KEY_MIC {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, method = %auth.method, "authentication failed: unsupported method");
            return Err(Unverified::Refuse(
                Some(peer_id.clone()),
                AuthFailure::UnsupportedMethod,
            ));
        }
        let psks = ctx.psks;
        let Some(psk) = psks.find(local_id, peer_id) else {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id, "authentication failed: no PSK for '{}' - '{}'", local_id, peer_id);
            return Err(Unverified::Refuse(Some(peer_id.clone()), AuthFailure::NoSecret));
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
            (&hs.init_request, &hs.int_auth),
            &hs.nr,
            sk_pi,
            &idi,
            auth.data,
        );
        if !verified {
            tracing::warn!(ike_sa = %self.id, peer = %from, identity = %peer_id,
                "authentication of '{}' failed: AUTH payload does not verify with the PSK (wrong PSK?)", peer_id);
            return Err(Unverified::Refuse(Some(peer_id.clone()), AuthFailure::BadAuth));
        }
        Ok(psk)
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
            let octets = signed_octets(keys.prf, (&hs.init_request, &hs.int_auth), &hs.nr, sk_pi, &idi);
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
            ctx.connections.matches_addrs(c, self.local.ip(), self.remote.ip())
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
    pub(super) fn prove_responder(&self, ctx: &mut Ctx<'_>, v: &Verified<'_>) -> Option<Proof> {
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
                let octets = signed_octets(keys.prf, (&hs.init_response, &hs.int_auth), &hs.ni, sk_pr, &idr);
                match cred.key().auth_data(ctx.rng, &octets) {
                    Ok(a) => (AuthMethod::DIGITAL_SIGNATURE, a),
                    Err(e) => {
                        tracing::warn!(ike_sa = %self.id, "cannot sign AUTH: {e}");
                        return None;
                    }
                }
            }
            (None, Some(psk)) => {
                let a = psk_auth(keys.prf, psk.as_slice(), (&hs.init_response, &hs.int_auth), &hs.ni, sk_pr, &idr);
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
}
