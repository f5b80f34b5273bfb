//! IKE_SA_INIT (RFC 7296 §1.2), both roles.
//!
//! ```text
//! HDR, SAi1, KEi, Ni, N(NAT_DETECTION_SOURCE_IP), N(NAT_DETECTION_DESTINATION_IP)  -->
//!                 <--  HDR, SAr1, KEr, Nr, N(NAT_DETECTION_*), [CERTREQ]
//! ```
//!
//! Nothing here is authenticated, so each side checks strictly before any
//! state changes. Both derive the IKE SA's keys from g^ir and the nonces
//! (§2.14) and find out from the NAT detection hashes whether a NAT sits
//! between them (§2.23).
//!
//! Initiator ([`IkeInit`]). The response must hold exactly one proposal
//! out of ours, a KE of the group we sent, and a valid public value. Two
//! error answers are not failures but instructions: INVALID_KE_PAYLOAD
//! names the group the responder wants and we retry IKE_SA_INIT with a KE
//! of that group (§1.2, §1.3 — if the group is in our proposals), and
//! COOKIE asks us to repeat the request with the cookie first (§2.6). Both
//! retry with message ID 0 and the same SPIi; a bounded number of retries
//! stops a hostile responder from bouncing us forever. Then IKE_AUTH
//! follows.
//!
//! Responder. The endpoint decides first whether it can afford to answer
//! at all (half-open limits and COOKIEs, `endpoint/init_responder.rs`);
//! then [`choose`] picks the connection and proposal, refusing statelessly
//! with NO_PROPOSAL_CHOSEN or INVALID_KE_PAYLOAD (naming the group we want,
//! §1.2), and [`response`] answers for the new half-open IKE SA.

use super::ike_auth::IkeAuth;
use super::{Outcome, Received, reason_for};
use crate::config::{ConnectionConfig, Fragmentation};
use crate::ctx::Ctx;
use crate::diag;
use crate::event::Reason;
use crate::keys::IkeKeys;
use crate::nat::{NatState, fake_nat_hash, nat_hash};
use crate::proposal::{Proposal, Protocol, Selected};
use crate::sa::{IkeSa, State};
use esparto_crypto::Rng;
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};
use std::sync::Arc;

/// How often the initiator follows INVALID_KE_PAYLOAD or COOKIE before
/// giving up.
const MAX_RETRIES: u8 = 3;

/// Longest COOKIE the initiator repeats (§2.6: 1 to 64 octets).
const MAX_COOKIE_LEN: usize = 64;

/// The payloads of an IKE_SA_INIT message that either role reads.
pub(crate) struct InitPayloads<'a> {
    pub(crate) sa: Option<&'a SaRepr>,
    pub(crate) ke: Option<KeRepr<'a>>,
    pub(crate) nonce: Option<&'a [u8]>,
    /// NAT_DETECTION_SOURCE_IP: one per address the sender may use (§2.23).
    pub(crate) nat_src: Vec<&'a [u8]>,
    /// NAT_DETECTION_DESTINATION_IP.
    pub(crate) nat_dst: Option<&'a [u8]>,
    /// SIGNATURE_HASH_ALGORITHMS (RFC 7427 §4) was sent.
    pub(crate) sig_hash: bool,
    /// IKEV2_FRAGMENTATION_SUPPORTED (RFC 7383 §2.3) was sent.
    pub(crate) fragmentation: bool,
    /// INTERMEDIATE_EXCHANGE_SUPPORTED (RFC 9242 §3) was sent.
    pub(crate) intermediate: bool,
}

impl<'a> InitPayloads<'a> {
    pub(crate) fn collect(payloads: &'a [PayloadRepr<'a>]) -> Self {
        let mut m = InitPayloads {
            sa: None,
            ke: None,
            nonce: None,
            nat_src: Vec::new(),
            nat_dst: None,
            sig_hash: false,
            fragmentation: false,
            intermediate: false,
        };
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => m.sa = Some(s),
                PayloadRepr::Ke(k) => m.ke = Some(*k),
                PayloadRepr::Nonce(n) => m.nonce = Some(n.data),
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_SOURCE_IP => {
                    m.nat_src.push(n.data)
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_DESTINATION_IP => {
                    m.nat_dst = Some(n.data)
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::SIGNATURE_HASH_ALGORITHMS => {
                    m.sig_hash = true
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::IKEV2_FRAGMENTATION_SUPPORTED => {
                    m.fragmentation = true
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED => {
                    m.intermediate = true
                }
                _ => {}
            }
        }
        m
    }
}

// ---------------------------------------------------------------------------
// Initiator

/// The IKE_SA_INIT task.
pub(crate) struct IkeInit {
    group: KeGroup,
    ke: Option<KeyExchange>,
    nonce: Vec<u8>,
    cookie: Option<Vec<u8>>,
    retries: u8,
    /// The child to create in IKE_AUTH, and its worker.
    child: Option<(Arc<str>, Option<u16>)>,
}

impl IkeInit {
    /// Start with the first group of our first proposal.
    pub(crate) fn new(group: KeGroup, child: Option<(Arc<str>, Option<u16>)>) -> Self {
        IkeInit {
            group,
            ke: None,
            nonce: Vec::new(),
            cookie: None,
            retries: 0,
            child,
        }
    }

    /// The child configuration the following IKE_AUTH creates, if any.
    pub(crate) fn child_name(&self) -> Option<&Arc<str>> {
        self.child.as_ref().map(|(n, _)| n)
    }

    pub(super) fn release(self, _ctx: &mut Ctx<'_>) {}

    pub(super) fn build(&mut self, sa: &mut IkeSa, ctx: &mut Ctx<'_>) -> Result<Vec<u8>, Reason> {
        if self.ke.is_none() {
            self.ke = Some(
                self.group
                    .generate(ctx.rng)
                    .map_err(|_| Reason::Local("key exchange"))?,
            );
        }
        if self.nonce.is_empty() {
            self.nonce = vec![0; ctx.config.nonce_len];
            ctx.rng.fill_public(&mut self.nonce);
        }
        let ke = self.ke.as_ref().ok_or(Reason::Local("key exchange"))?;
        let proposals = SaRepr {
            proposals: sa
                .conn
                .proposals
                .iter()
                .enumerate()
                .map(|(i, p)| p.to_wire((i + 1) as u8, Spi::None, true))
                .collect(),
        };
        // §2.23: hashes over SPIi, SPIr (zero here), and our addresses.
        // Forcing encapsulation: a source hash that cannot match.
        let src = if sa.conn.encap {
            fake_nat_hash(ctx.rng)
        } else {
            nat_hash(sa.spi_i, 0, sa.local)
        };
        let dst = nat_hash(sa.spi_i, 0, sa.remote);
        let mut payloads = Vec::with_capacity(6);
        if let Some(c) = &self.cookie {
            // §2.6: the COOKIE notify comes first.
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, c)));
        }
        payloads.push(PayloadRepr::Sa(proposals));
        payloads.push(PayloadRepr::Ke(KeRepr {
            group: self.group.iana_id(),
            data: ke.public_value(),
        }));
        payloads.push(PayloadRepr::Nonce(NonceRepr { data: &self.nonce }));
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::NAT_DETECTION_SOURCE_IP,
            &src,
        )));
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            &dst,
        )));
        let hashes = crate::cert::signature_hash_notify();
        if sa.conn.uses_certs() {
            // RFC 7427 §4: the signature hashes we accept.
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SIGNATURE_HASH_ALGORITHMS,
                &hashes,
            )));
        }
        if sa.conn.fragmentation != Fragmentation::No {
            // RFC 7383 §2.3: announced in IKE_SA_INIT, empty.
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::IKEV2_FRAGMENTATION_SUPPORTED,
                &[],
            )));
        }
        if sa.conn.proposals.iter().any(|p| p.ake.iter().any(|s| !s.is_empty())) {
            // RFC 9242 §3: needed for the additional key exchanges.
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED,
                &[],
            )));
        }
        let packet = sa.encode(ExchangeType::IKE_SA_INIT, false, 0, &payloads)?;
        if let Some(PayloadRepr::Sa(offer)) = payloads.iter().find(|p| matches!(p, PayloadRepr::Sa(_))) {
            tracing::info!(
                ike_sa = %sa.id, peer = %sa.remote, connection = %sa.conn.name,
                "sending IKE_SA_INIT request, proposals: {}", diag::Proposals(&offer.proposals)
            );
        }
        let hs = sa.handshake_mut();
        hs.ni.clone_from(&self.nonce);
        hs.init_request.clone_from(&packet);
        Ok(packet)
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some(cookie) = rx.notify(NotifyType::COOKIE) {
            return self.follow_cookie(cookie);
        }
        if let Some((kind, data)) = rx.error() {
            return self.follow_error(sa, kind, data);
        }
        let m = InitPayloads::collect(&rx.payloads);
        if let Err(reason) = self.derive_keys(sa, rx, &m) {
            return Outcome::Fail(reason);
        }
        let hs = sa.handshake_mut();
        hs.init_response = rx.raw.to_vec();
        if m.fragmentation && sa.conn.fragmentation != Fragmentation::No {
            sa.fragmentation = Some(ctx.config.fragment_size);
        }
        sa.nat = NatState::detect(
            rx.header.spi_i,
            rx.header.spi_r,
            &m.nat_src,
            m.nat_dst,
            rx.from,
            rx.to,
        );
        if sa.encap() {
            sa.float(ctx);
        }
        if sa.nat.local_behind_nat {
            sa.next_keepalive = Some(ctx.now + ctx.config.keepalive_interval);
        }
        if let Some(chosen) = sa.suite.as_ref() {
            let nat = match (sa.nat.local_behind_nat, sa.nat.remote_behind_nat) {
                (false, false) => "no NAT",
                (true, false) => "local host is behind NAT",
                (false, true) => "remote host is behind NAT (or fakes it to force encapsulation)",
                (true, true) => "both hosts are behind NAT",
            };
            tracing::info!(
                ike_sa = %sa.id, peer = %rx.from,
                "IKE_SA_INIT response received: selected proposal {}, {nat}",
                diag::OneProposal(&chosen.to_wire(Protocol::Ike, Spi::None))
            );
        }
        sa.state = State::Auth;
        let auth = IkeAuth::new(self.child.take());
        let additional: Vec<_> = sa.suite.as_ref().map(|s| s.additional().collect()).unwrap_or_default();
        if additional.is_empty() {
            return Outcome::Then(Box::new(super::Task::IkeAuth(auth)));
        }
        if !m.intermediate {
            auth.release(ctx);
            return Outcome::Fail(Reason::ProtocolError(
                "additional key exchanges chosen without INTERMEDIATE_EXCHANGE_SUPPORTED",
            ));
        }
        Outcome::Then(Box::new(super::Task::Intermediate(
            super::intermediate::Intermediate::new(additional, auth),
        )))
    }

    /// §2.6: repeat the request with the responder's COOKIE first.
    fn follow_cookie(mut self, cookie: &[u8]) -> Outcome {
        if self.retries >= MAX_RETRIES || cookie.is_empty() || cookie.len() > MAX_COOKIE_LEN {
            return Outcome::Fail(Reason::ProtocolError("COOKIE loop"));
        }
        self.retries += 1;
        self.cookie = Some(cookie.to_vec());
        Outcome::Then(Box::new(super::Task::IkeInit(self)))
    }

    /// An error notify: INVALID_KE_PAYLOAD names the group the responder
    /// wants, and we retry with it if we offer it (§1.2); anything else
    /// ends the IKE SA.
    fn follow_error(mut self, sa: &IkeSa, kind: NotifyType, data: &[u8]) -> Outcome {
        if kind == NotifyType::NO_PROPOSAL_CHOSEN {
            let sent = diag::configured(&sa.conn.proposals, true);
            tracing::info!(
                ike_sa = %sa.id, peer = %sa.remote, notify = %kind,
                "IKE_SA_INIT refused: the peer accepts none of our configured proposals: {}", diag::Proposals(&sent)
            );
            return Outcome::Fail(reason_for(kind));
        }
        if kind != NotifyType::INVALID_KE_PAYLOAD {
            tracing::info!(ike_sa = %sa.id, peer = %sa.remote, notify = %kind, "IKE_SA_INIT refused");
            return Outcome::Fail(reason_for(kind));
        }
        let wanted = NotifyRepr::new(kind, data)
            .u16_data()
            .and_then(KeGroup::from_iana);
        match wanted {
            Some(g)
                if g != self.group && Self::offers_group(sa, g) && self.retries < MAX_RETRIES =>
            {
                tracing::info!(ike_sa = %sa.id, group = %g, "peer asks for another key exchange group");
                self.retries += 1;
                self.group = g;
                self.ke = None;
                Outcome::Then(Box::new(super::Task::IkeInit(self)))
            }
            _ => Outcome::Fail(Reason::InvalidKePayload),
        }
    }

    fn offers_group(sa: &IkeSa, g: KeGroup) -> bool {
        sa.conn.proposals.iter().any(|p| p.ke.contains(&g))
    }

    /// Check the response (SPIr, one of our proposals, our group) and
    /// derive the IKE SA's keys from g^ir (§2.14).
    fn derive_keys(
        &mut self,
        sa: &mut IkeSa,
        rx: &Received<'_>,
        m: &InitPayloads<'_>,
    ) -> Result<(), Reason> {
        let (Some(sa_p), Some(ke_p), Some(nonce)) = (m.sa, m.ke, m.nonce) else {
            return Err(Reason::ProtocolError(
                "IKE_SA_INIT response lacks SA, KE or Nonce",
            ));
        };
        if rx.header.spi_r == 0 {
            return Err(Reason::ProtocolError("IKE_SA_INIT response without SPIr"));
        }
        let selected = Proposal::accept_response(&sa.conn.proposals, &sa_p.proposals, false)
            .ok_or(Reason::ProtocolError(
                "responder chose a proposal we did not offer",
            ))?;
        if selected.ke != Some(self.group) || ke_p.group != self.group.iana_id() {
            return Err(Reason::ProtocolError(
                "key exchange group differs from ours",
            ));
        }
        let ke = self
            .ke
            .take()
            .ok_or(Reason::Local("key exchange state lost"))?;
        let g_ir = ke
            .agree(ke_p.data)
            .map_err(|_| Reason::ProtocolError("invalid key exchange value"))?;
        sa.spi_r = rx.header.spi_r;
        let keys = IkeKeys::derive(
            &selected,
            &self.nonce,
            nonce,
            g_ir.as_slice(),
            sa.spi_i,
            sa.spi_r,
        )
        .map_err(|_| Reason::Local("IKE key derivation"))?;
        sa.keys = Some(keys);
        sa.suite = Some(selected);
        sa.handshake_mut().nr = nonce.to_vec();
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Responder

/// The COOKIE and Ni of a request: what the denial-of-service gate needs,
/// read before anything else. §2.6: the initiator puts the COOKIE "as the
/// first payload"; we take the first one wherever it is (the hash binds it
/// to this request anyway).
pub(crate) fn cookie_and_nonce<'a>(
    payloads: &'a [PayloadRepr<'a>],
) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
    let (mut cookie, mut nonce) = (None, None);
    for p in payloads {
        match p {
            PayloadRepr::Notify(n) if n.kind == NotifyType::COOKIE => {
                cookie = cookie.or(Some(n.data))
            }
            PayloadRepr::Nonce(n) => nonce = Some(n.data),
            _ => {}
        }
    }
    (cookie, nonce)
}

/// What the responder agrees to: a connection, a proposal, its group.
pub(crate) struct InitChoice {
    pub(crate) conn: Arc<ConnectionConfig>,
    pub(crate) selected: Selected,
    pub(crate) group: KeGroup,
}

/// Why the responder does not create an IKE SA for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InitRefusal {
    /// Answered statelessly with NO_PROPOSAL_CHOSEN.
    NoProposalChosen,
    /// Answered statelessly with INVALID_KE_PAYLOAD naming this group.
    InvalidKe(KeGroup),
    /// Dropped: a proposal without a group (ours always have one).
    Drop,
}

/// The connection and proposal for a request (§2.7): the first candidate
/// connection with a proposal we accept, taking the group of KEi if it is
/// acceptable. KEi must be of the group chosen (§1.2).
pub(crate) fn choose<'c>(
    candidates: impl Iterator<Item = &'c Arc<ConnectionConfig>>,
    offered: &SaRepr,
    kei: KeRepr<'_>,
    intermediate: bool,
) -> Result<InitChoice, InitRefusal> {
    let ke_group = KeGroup::from_iana(kei.group);
    // Additional key exchanges need IKE_INTERMEDIATE (RFC 9370 §2.2.1):
    // a peer that did not announce it gets no proposal that requires one.
    let chosen = candidates.into_iter().find_map(|c| {
        Proposal::select(&c.proposals, &offered.proposals, false, ke_group)
            .filter(|s| intermediate || s.additional().next().is_none())
            .map(|s| (c.clone(), s))
    });
    let Some((conn, selected)) = chosen else {
        return Err(InitRefusal::NoProposalChosen);
    };
    let Some(group) = selected.ke else {
        return Err(InitRefusal::Drop);
    };
    if ke_group != Some(group) {
        return Err(InitRefusal::InvalidKe(group));
    }
    Ok(InitChoice {
        conn,
        selected,
        group,
    })
}

/// The response of the responder's new IKE SA `sa` (its suite and NAT
/// state set): SAr1, KEr, Nr, and NAT detection only if the initiator
/// started it (§2.23). With forced encapsulation the source hash cannot
/// match.
pub(crate) fn response(
    sa: &mut IkeSa,
    rng: &mut dyn Rng,
    group: KeGroup,
    public: &[u8],
    nr: &[u8],
    (peer_sig_hash, peer_intermediate): (bool, bool),
) -> Result<Vec<u8>, Reason> {
    let selected = sa.suite.ok_or(Reason::Local("no suite"))?;
    let answer = SaRepr {
        proposals: vec![selected.to_wire(Protocol::Ike, Spi::None)],
    };
    let src_hash = if sa.conn.encap {
        fake_nat_hash(rng)
    } else {
        nat_hash(sa.spi_i, sa.spi_r, sa.local)
    };
    let dst_hash = nat_hash(sa.spi_i, sa.spi_r, sa.remote);
    let mut payloads = vec![
        PayloadRepr::Sa(answer),
        PayloadRepr::Ke(KeRepr {
            group: group.iana_id(),
            data: public,
        }),
        PayloadRepr::Nonce(NonceRepr { data: nr }),
    ];
    if sa.nat.supported {
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::NAT_DETECTION_SOURCE_IP,
            &src_hash,
        )));
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::NAT_DETECTION_DESTINATION_IP,
            &dst_hash,
        )));
    }
    // RFC 7427 §4 answered in kind; CERTREQ (§3.7) for the CAs the
    // candidate connection trusts.
    let hashes = crate::cert::signature_hash_notify();
    if peer_sig_hash || sa.conn.uses_certs() {
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::SIGNATURE_HASH_ALGORITHMS,
            &hashes,
        )));
    }
    if sa.fragmentation.is_some() {
        // RFC 7383 §2.3: only if the initiator announced it.
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::IKEV2_FRAGMENTATION_SUPPORTED,
            &[],
        )));
    }
    if peer_intermediate {
        // RFC 9242 §3: answered in kind.
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::INTERMEDIATE_EXCHANGE_SUPPORTED,
            &[],
        )));
    }
    let certreq = sa.conn.remote.trust.as_ref().map(|t| t.certreq());
    if let Some(body) = &certreq {
        payloads.push(PayloadRepr::Other {
            payload_type: esparto_wire::ike::PayloadType::CERTREQ,
            body,
        });
    }
    sa.encode(ExchangeType::IKE_SA_INIT, true, 0, &payloads)
}
