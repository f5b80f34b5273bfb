//! IKE_SA_INIT as initiator (RFC 7296 §1.2).
//!
//! ```text
//! HDR, SAi1, KEi, Ni, N(NAT_DETECTION_SOURCE_IP), N(NAT_DETECTION_DESTINATION_IP)  -->
//!                 <--  HDR, SAr1, KEr, Nr, N(NAT_DETECTION_*), [CERTREQ]
//! ```
//!
//! The response is unauthenticated, so it is checked strictly before any
//! state changes: exactly one proposal out of ours, a KE of the group we
//! sent, a valid public value. Two error answers are not failures but
//! instructions: INVALID_KE_PAYLOAD names the group the responder wants
//! and the initiator retries IKE_SA_INIT with a KE of that group (§1.2,
//! §1.3 — if the group is in our proposals), and COOKIE asks us to repeat
//! the request with the cookie first (§2.6). Both retry with message ID 0 and the same
//! SPIi; a bounded number of retries stops a hostile responder from
//! bouncing us forever.

use super::ike_auth::IkeAuth;
use super::{Outcome, Received, reason_for};
use crate::ctx::Ctx;
use crate::event::Reason;
use crate::keys::IkeKeys;
use crate::nat::{NatState, fake_nat_hash, nat_hash};
use crate::proposal::Proposal;
use crate::sa::{IkeSa, State};
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};
use std::sync::Arc;

/// How often we follow INVALID_KE_PAYLOAD or COOKIE before giving up.
const MAX_RETRIES: u8 = 3;

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
        let packet = sa.encode(ExchangeType::IKE_SA_INIT, false, 0, &payloads)?;
        let hs = sa.handshake_mut();
        hs.ni.clone_from(&self.nonce);
        hs.init_request.clone_from(&packet);
        Ok(packet)
    }

    fn offers_group(sa: &IkeSa, g: KeGroup) -> bool {
        sa.conn.proposals.iter().any(|p| p.ke.contains(&g))
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some(cookie) = rx.notify(NotifyType::COOKIE) {
            if self.retries >= MAX_RETRIES || cookie.is_empty() || cookie.len() > 64 {
                return Outcome::Fail(Reason::ProtocolError("COOKIE loop"));
            }
            self.retries += 1;
            self.cookie = Some(cookie.to_vec());
            return Outcome::Then(Box::new(super::Task::IkeInit(self)));
        }
        if let Some((kind, data)) = rx.error() {
            if kind == NotifyType::INVALID_KE_PAYLOAD {
                let wanted = NotifyRepr::new(kind, data)
                    .u16_data()
                    .and_then(KeGroup::from_iana);
                return match wanted {
                    Some(g)
                        if g != self.group
                            && Self::offers_group(sa, g)
                            && self.retries < MAX_RETRIES =>
                    {
                        tracing::info!(ike_sa = %sa.id, group = %g, "peer asks for another key exchange group");
                        self.retries += 1;
                        self.group = g;
                        self.ke = None;
                        Outcome::Then(Box::new(super::Task::IkeInit(self)))
                    }
                    _ => Outcome::Fail(Reason::InvalidKePayload),
                };
            }
            tracing::info!(ike_sa = %sa.id, peer = %sa.remote, notify = %kind, "IKE_SA_INIT refused");
            return Outcome::Fail(reason_for(kind));
        }
        let mut sa_p = None;
        let mut ke_p = None;
        let mut nonce = None;
        let mut src_hashes = Vec::new();
        let mut dst_hash = None;
        for p in &rx.payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Ke(k) => ke_p = Some(k),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_SOURCE_IP => {
                    src_hashes.push(n.data)
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_DESTINATION_IP => {
                    dst_hash = Some(n.data)
                }
                _ => {}
            }
        }
        let (Some(sa_p), Some(ke_p), Some(nonce)) = (sa_p, ke_p, nonce) else {
            return Outcome::Fail(Reason::ProtocolError(
                "IKE_SA_INIT response lacks SA, KE or Nonce",
            ));
        };
        if rx.header.spi_r == 0 {
            return Outcome::Fail(Reason::ProtocolError("IKE_SA_INIT response without SPIr"));
        }
        let Some(selected) = Proposal::accept_response(&sa.conn.proposals, &sa_p.proposals, false)
        else {
            return Outcome::Fail(Reason::ProtocolError(
                "responder chose a proposal we did not offer",
            ));
        };
        if selected.ke != Some(self.group) || ke_p.group != self.group.iana_id() {
            return Outcome::Fail(Reason::ProtocolError(
                "key exchange group differs from ours",
            ));
        }
        let Some(ke) = self.ke.take() else {
            return Outcome::Fail(Reason::Local("key exchange state lost"));
        };
        let g_ir = match ke.agree(ke_p.data) {
            Ok(g) => g,
            Err(_) => return Outcome::Fail(Reason::ProtocolError("invalid key exchange value")),
        };
        sa.spi_r = rx.header.spi_r;
        let keys = match IkeKeys::derive(
            &selected,
            &self.nonce,
            nonce,
            g_ir.as_slice(),
            sa.spi_i,
            sa.spi_r,
        ) {
            Ok(k) => k,
            Err(_) => return Outcome::Fail(Reason::Local("IKE key derivation")),
        };
        sa.keys = Some(keys);
        sa.suite = Some(selected);
        let hs = sa.handshake_mut();
        hs.nr = nonce.to_vec();
        hs.init_response = rx.raw.to_vec();
        sa.nat = NatState::detect(
            rx.header.spi_i,
            rx.header.spi_r,
            &src_hashes,
            dst_hash,
            rx.from,
            rx.to,
        );
        if sa.encap() {
            sa.float(ctx);
        }
        if sa.nat.local_behind_nat {
            sa.next_keepalive = Some(ctx.now + ctx.config.keepalive_interval);
        }
        tracing::debug!(ike_sa = %sa.id, nat = ?sa.nat, "IKE_SA_INIT done");
        sa.state = State::Auth;
        Outcome::Then(Box::new(super::Task::IkeAuth(IkeAuth::new(
            self.child.take(),
        ))))
    }
}
