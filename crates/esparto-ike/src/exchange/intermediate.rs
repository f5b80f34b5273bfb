//! IKE_INTERMEDIATE (RFC 9242) carrying the additional key exchanges of
//! a hybrid IKE SA (RFC 9370 §2.2.2), both roles.
//!
//! ```text
//! IKE_SA_INIT  SA(…, KE=x25519, ADDKE1=mlkem768), KEi, Ni,
//!              N(INTERMEDIATE_EXCHANGE_SUPPORTED)     ──▶  ◀── the same, answered
//!              keys(0) from g^ir
//! IKE_INTERMEDIATE (keys(0))  SK{KEi(1) = ML-KEM encapsulation key}  ──▶
//!                             ◀──  SK{KEr(1) = ML-KEM ciphertext}
//!              keys(1): SKEYSEED(1) = prf(SK_d(0), SK(1) | Ni | Nr),
//!              prf+(SKEYSEED(1), Ni | Nr | SPIi | SPIr)        (… up to 7)
//! IKE_AUTH (keys(n))  AUTH over RealMessage | Nonce | prf(SK_p, ID')
//!                     | IntAuth_i(n) | IntAuth_r(n) | IKE_AUTH's message ID
//! ```
//!
//! Every IKE_INTERMEDIATE message is folded into the AUTH payloads
//! (RFC 9242 §3.3.2): IntAuth_iN = prf(SK_pi, IntAuth_i(N-1) | A | P) for
//! the initiator's messages, IntAuth_rN likewise with SK_pr for the
//! responder's, where A | P is the message as if it were not encrypted —
//! the IKE header and the Encrypted payload's header with their lengths
//! counting only the inner payloads, then the inner payloads — and SK_p
//! the keys that protected the message (the update follows the
//! exchange). strongSwan computes it the same way (`message.c`,
//! `get_plain`), from the parsed payloads; so do we, for sent and received
//! messages alike.
//!
//! The responder expects the negotiated exchanges in slot order, one per
//! IKE_INTERMEDIATE request, each with exactly the KE payload of its
//! method: anything else is answered with INVALID_SYNTAX and ends the IKE
//! SA (RFC 9370 §2.2.2), as does an IKE_AUTH before the last one.

use super::{Outcome, Received};
use crate::ctx::Ctx;
use crate::event::Reason;
use crate::keys::IkeKeys;
use crate::sa::IkeSa;
use esparto_crypto::ike::{MlKem, MlKemInitiator};
use esparto_wire::ike::{
    ExchangeType, HEADER_LEN, HeaderRepr, KeRepr, NotifyRepr, NotifyType, PayloadRepr, PayloadType, emit_message,
};
use std::collections::VecDeque;

/// The initiator's additional key exchanges still to run, and the
/// IKE_AUTH that follows them.
pub(crate) struct Intermediate {
    remaining: VecDeque<MlKem>,
    ours: Option<MlKemInitiator>,
    then: super::ike_auth::IkeAuth,
}

/// `A | P` of RFC 9242 §3.3.2: the message with `header` and `payloads`
/// as if its Encrypted payload held them in the clear.
pub(crate) fn plain(header: &HeaderRepr, payloads: &[PayloadRepr<'_>]) -> Result<Vec<u8>, Reason> {
    let mut m = Vec::new();
    emit_message(header, payloads, &mut m).map_err(|_| Reason::Local("message too large"))?;
    let first = m.get(16).copied().ok_or(Reason::Local("short header"))?;
    let inner = m.len() - HEADER_LEN;
    let sk_len = u16::try_from(4 + inner).map_err(|_| Reason::Local("message too large"))?;
    let total = u32::try_from(HEADER_LEN + 4 + inner).map_err(|_| Reason::Local("message too large"))?;
    m[16] = PayloadType::SK.0;
    m[24..28].copy_from_slice(&total.to_be_bytes());
    let sk_header = [first, 0, (sk_len >> 8) as u8, sk_len as u8];
    m.splice(HEADER_LEN..HEADER_LEN, sk_header);
    Ok(m)
}

impl IkeSa {
    /// Fold one IKE_INTERMEDIATE message into IntAuth_i (`initiators`:
    /// sent by the original initiator) or IntAuth_r, with the SK_p that
    /// protected it.
    fn fold_int_auth(&mut self, initiators: bool, plain: &[u8]) -> Result<(), Reason> {
        let keys = self.keys.as_ref().ok_or(Reason::Local("no keys"))?;
        let sk_p = if initiators { keys.sk_pi() } else { keys.sk_pr() }.ok_or(Reason::Local("SK_p gone"))?;
        let prf = keys.prf;
        let hs = self.handshake.as_deref_mut().ok_or(Reason::Local("IKE_SA_INIT state gone"))?;
        let chain = if initiators { &mut hs.int_auth_i } else { &mut hs.int_auth_r };
        let next = prf.prf_parts(sk_p, &[chain.as_slice(), plain]);
        chain.clear();
        chain.extend_from_slice(next.as_slice());
        Ok(())
    }

    /// The keys after an additional exchange with shared secret `ss`
    /// (RFC 9370 §2.2.2): the IKE SA rekey's formula with the same SPIs.
    fn update_keys(&mut self, ss: &[u8]) -> Result<(), Reason> {
        let (Some(keys), Some(suite), Some(hs)) = (self.keys.as_ref(), self.suite.as_ref(), self.handshake.as_deref())
        else {
            return Err(Reason::Local("IKE_SA_INIT state gone"));
        };
        let next = IkeKeys::derive_rekey(keys.prf, keys.sk_d(), suite, &hs.ni, &hs.nr, ss, self.spi_i, self.spi_r)
            .map_err(|_| Reason::Local("IKE key derivation"))?;
        self.keys = Some(next);
        Ok(())
    }

    /// The responder's answer to an IKE_INTERMEDIATE request: the next
    /// negotiated method's ciphertext, then the key update.
    pub(crate) fn respond_intermediate(
        &mut self,
        ctx: &mut Ctx<'_>,
        h: &HeaderRepr,
        payloads: &[PayloadRepr<'_>],
        from: core::net::SocketAddr,
        to: core::net::SocketAddr,
    ) {
        let mid = h.message_id;
        let refuse = |sa: &mut IkeSa, ctx: &mut Ctx<'_>, why: &'static str| {
            tracing::info!(ike_sa = %sa.id, peer = %from, "IKE_INTERMEDIATE refused: {why}");
            ctx.stats.intermediate_refused += 1;
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_SYNTAX, &[]));
            sa.respond(ctx, ExchangeType::IKE_INTERMEDIATE, mid, &[n], from, to);
            sa.die(ctx, Reason::ProtocolError("bad IKE_INTERMEDIATE"));
        };
        let Some(kem) = self.handshake.as_ref().and_then(|hs| hs.ake_pending.first().copied()) else {
            return refuse(self, ctx, "no additional key exchange is left to run");
        };
        let kes: Vec<&KeRepr<'_>> = payloads
            .iter()
            .filter_map(|p| match p {
                PayloadRepr::Ke(k) => Some(k),
                _ => None,
            })
            .collect();
        let [ke] = kes[..] else {
            return refuse(self, ctx, "not exactly one KE payload");
        };
        if ke.group != kem.iana_id() {
            return refuse(self, ctx, "KE payload of another method than negotiated");
        }
        let (ct, ss) = match kem.encapsulate(ke.data) {
            Ok(x) => x,
            Err(_) => return refuse(self, ctx, "invalid ML-KEM encapsulation key"),
        };
        let request = match plain(h, payloads) {
            Ok(p) => p,
            Err(r) => return self.die(ctx, r),
        };
        let answer = [PayloadRepr::Ke(KeRepr { group: kem.iana_id(), data: &ct })];
        let ours = plain(&self.header(ExchangeType::IKE_INTERMEDIATE, true, mid), &answer);
        let folded = ours.and_then(|ours| {
            self.fold_int_auth(true, &request)?;
            self.fold_int_auth(false, &ours)
        });
        if let Err(r) = folded {
            return self.die(ctx, r);
        }
        self.respond(ctx, ExchangeType::IKE_INTERMEDIATE, mid, &answer, from, to);
        if let Err(r) = self.update_keys(ss.as_slice()) {
            return self.die(ctx, r);
        }
        self.handshake_mut().ake_pending.remove(0);
        ctx.stats.additional_key_exchanges += 1;
        tracing::debug!(ike_sa = %self.id, method = %kem, "additional key exchange done (responder)");
    }
}

impl Intermediate {
    /// The exchanges `additional`, then `then`.
    pub(crate) fn new(additional: impl IntoIterator<Item = MlKem>, then: super::ike_auth::IkeAuth) -> Self {
        Intermediate { remaining: additional.into_iter().collect(), ours: None, then }
    }

    /// The child the IKE_AUTH that follows creates.
    pub(crate) fn child_name(&self) -> Option<&std::sync::Arc<str>> {
        self.then.child_name()
    }

    pub(super) fn build(&mut self, sa: &mut IkeSa, mid: u32) -> Result<Vec<u8>, Reason> {
        let kem = *self.remaining.front().ok_or(Reason::Local("no additional key exchange left"))?;
        let ours = kem.generate().map_err(|_| Reason::Local("ML-KEM key generation"))?;
        let payloads = [PayloadRepr::Ke(KeRepr { group: kem.iana_id(), data: ours.public_value() })];
        let packet = sa.encode(ExchangeType::IKE_INTERMEDIATE, false, mid, &payloads)?;
        let p = plain(&sa.header(ExchangeType::IKE_INTERMEDIATE, false, mid), &payloads)?;
        sa.fold_int_auth(true, &p)?;
        self.ours = Some(ours);
        Ok(packet)
    }

    pub(super) fn process(mut self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, rx: &Received<'_>) -> Outcome {
        if let Some((kind, _)) = rx.error() {
            tracing::info!(ike_sa = %sa.id, notify = %kind, "IKE_INTERMEDIATE refused by the peer");
            self.then.release(ctx);
            return Outcome::Fail(super::reason_for(kind));
        }
        let (Some(kem), Some(ours)) = (self.remaining.pop_front(), self.ours.take()) else {
            self.then.release(ctx);
            return Outcome::Fail(Reason::Local("additional key exchange state lost"));
        };
        let ke = rx.payloads.iter().find_map(|p| match p {
            PayloadRepr::Ke(k) if k.group == kem.iana_id() => Some(k),
            _ => None,
        });
        let Some(ke) = ke else {
            self.then.release(ctx);
            return Outcome::Fail(Reason::ProtocolError("IKE_INTERMEDIATE response without the KE payload asked for"));
        };
        let step = ours
            .decapsulate(ke.data)
            .map_err(|_| Reason::ProtocolError("invalid ML-KEM ciphertext"))
            .and_then(|ss| {
                let p = plain(&rx.header, &rx.payloads)?;
                sa.fold_int_auth(false, &p)?;
                sa.update_keys(ss.as_slice())
            });
        if let Err(r) = step {
            self.then.release(ctx);
            return Outcome::Fail(r);
        }
        ctx.stats.additional_key_exchanges += 1;
        tracing::debug!(ike_sa = %sa.id, method = %kem, "additional key exchange done");
        if self.remaining.is_empty() {
            Outcome::Then(Box::new(super::Task::IkeAuth(self.then)))
        } else {
            Outcome::Then(Box::new(super::Task::Intermediate(self)))
        }
    }

    pub(crate) fn release(self, ctx: &mut Ctx<'_>) {
        self.then.release(ctx);
    }
}
