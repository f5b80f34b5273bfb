//! CREATE_CHILD_SA for a Child SA (RFC 7296 §1.3.1), a per-resource one
//! (RFC 9611), or the rekey of one (§1.3.3), both roles. An SA payload
//! proposing IKE instead rekeys the IKE SA ([`super::rekey_ike`]).
//!
//! ```text
//! HDR, SK {[N(REKEY_SA),] [N(SA_RESOURCE_INFO),] SA, Ni, [KEi], TSi, TSr}  -->
//!                 <--  HDR, SK {[N(SA_RESOURCE_INFO),] SA, Nr, [KEr], TSi, TSr}
//! ```
//!
//! The Child SA itself — the offer, the answer, PFS and its
//! INVALID_KE_PAYLOAD follow-up, the keys (KEYMAT = prf+(SK_d, [g^ir (new)
//! |] Ni | Nr) with this exchange's nonces, §2.17), RFC 9611 — is
//! negotiated as in IKE_AUTH, by [`super::child_sa`]. What is this
//! exchange's own is what a request is for and when it may be made.
//!
//! Initiator: a `Task::CreateChild` carries a
//! [`ChildOffer`] for a new Child SA,
//! an RFC 9611 sub-SA (for the resource its inbound SPI steers to) or a
//! rekey (with REKEY_SA); [`request`] frames it. What happens on success
//! (collisions, deleting the old SA) is in `sa/children.rs`.
//!
//! Responder ([`IkeSa::respond_create_child`]). A rekey is answered like a
//! new Child SA for the same configuration; the event names the SA it
//! replaces. Collisions (§2.25.1, §2.25.2): "If a peer receives a request
//! to rekey a Child SA that it is currently trying to close, it SHOULD
//! reply with TEMPORARY_FAILURE. If a peer receives a request to rekey a
//! Child SA that it is currently rekeying, it SHOULD reply as usual, and
//! SHOULD prepare to close redundant SAs later based on the nonces (see
//! Section 2.8.1). If a peer receives a request to rekey a Child SA that
//! does not exist, it SHOULD reply with CHILD_SA_NOT_FOUND." And "If a peer
//! receives a request to create or rekey a Child SA when it is currently
//! rekeying the IKE SA, it SHOULD reply with TEMPORARY_FAILURE."

use super::child_sa::ChildPayloads;
use super::child_sa::answer::{ChildAnswer, Keying};
use super::child_sa::offer::ChildOffer;
use crate::child::{ChildSa, ChildState};
use crate::ctx::Ctx;
use crate::event::Reason;
use crate::lifetime::MAX_CHILD_SAS;
use crate::sa::{IkeSa, Refusal};
use core::net::SocketAddr;
use esparto_wire::ike::{ExchangeType, NotifyRepr, NotifyType, PayloadRepr, ProtocolId, Spi};

/// The CREATE_CHILD_SA request for `child`.
pub(super) fn request(
    child: &mut ChildOffer,
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    mid: u32,
) -> Result<Vec<u8>, Reason> {
    let conn = sa.conn.clone();
    let cfg = conn
        .child(&child.name)
        .ok_or(Reason::Local("unknown child"))?;
    child.prepare(sa, ctx, cfg)?;
    sa.encode(ExchangeType::CREATE_CHILD_SA, false, mid, &child.payloads(cfg)?)
}

impl IkeSa {
    /// A CREATE_CHILD_SA request: the IKE SA's rekey if its SA payload
    /// proposes IKE, else a new Child SA or the rekey of one.
    pub(crate) fn respond_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::CREATE_CHILD_SA;
        let m = ChildPayloads::collect(payloads);
        if m.sa
            .is_some_and(|s| s.proposals.iter().any(|p| p.protocol == ProtocolId::IKE))
        {
            return self.respond_rekey_ike(ctx, mid, payloads, from, to);
        }
        match self.answer_create_child(ctx, &m) {
            Ok(answer) => {
                let out = answer.payloads();
                self.respond(ctx, ex, mid, &out, from, to);
            }
            Err(refusal) => self.refuse(ctx, ex, mid, refusal, from, to),
        }
    }

    /// Check what the request is for and whether it may be made now, then
    /// negotiate and install the Child SA.
    fn answer_create_child(
        &mut self,
        ctx: &mut Ctx<'_>,
        m: &ChildPayloads<'_>,
    ) -> Result<ChildAnswer, Refusal> {
        if m.child_sa().is_none() || m.nonce.is_none() {
            return Err(NotifyType::INVALID_SYNTAX.into());
        }
        if self.superseded || self.ike_exchange_pending() {
            tracing::info!(ike_sa = %self.id, "CHILD_SA request while the IKE_SA is rekeyed or closed: TEMPORARY_FAILURE");
            return Err(NotifyType::TEMPORARY_FAILURE.into());
        }
        let old = self.child_to_rekey(m.rekey)?;
        let answer = self.answer_child(ctx, m, Keying::Fresh { rekeys: old.as_ref() })?;
        if let Some(c) = &old {
            // The peer replaces it and deletes it: no rekey of our own.
            if let Some(i) = self.child_by_inbound(c.inbound_spi) {
                self.children[i].rekey_at = None;
            }
        }
        Ok(answer)
    }

    /// The Child SA a REKEY_SA notify names (§1.3.3: by the SPI the
    /// initiator receives on, i.e. our outbound SPI), if it may be rekeyed
    /// now; without REKEY_SA, whether another Child SA fits on this IKE SA.
    fn child_to_rekey(&self, rekey: Option<NotifyRepr<'_>>) -> Result<Option<ChildSa>, Refusal> {
        let Some(n) = rekey else {
            if self.children.len() >= MAX_CHILD_SAS {
                // §3.10.1 NO_ADDITIONAL_SAS: no more Child SAs on this IKE SA.
                return Err(NotifyType::NO_ADDITIONAL_SAS.into());
            }
            return Ok(None);
        };
        let (ProtocolId::ESP, Spi::U32(spi)) = (n.protocol, n.spi) else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        let Some(c) = self.children.iter().find(|c| c.outbound_spi == spi) else {
            // §2.25: "A CHILD_SA_NOT_FOUND notification SHOULD be sent when
            // a peer receives a request to rekey a Child SA that does not
            // exist."
            tracing::info!(ike_sa = %self.id, spi = format_args!("{spi:08x}"), "rekey of an unknown CHILD_SA");
            return Err(Refusal::ChildSaNotFound(spi));
        };
        if matches!(c.state, ChildState::Deleting(_) | ChildState::Rekeyed)
            || c.redundant
            || self.replaced(c.inbound_spi)
        {
            tracing::info!(ike_sa = %self.id, child = %c.name, "rekey of a CHILD_SA being closed: TEMPORARY_FAILURE");
            return Err(NotifyType::TEMPORARY_FAILURE.into());
        }
        Ok(Some(c.clone()))
    }
}
