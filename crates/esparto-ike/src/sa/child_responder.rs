//! The responder side of CREATE_CHILD_SA (RFC 7296 §1.3) and
//! INFORMATIONAL (§1.4).
//!
//! CREATE_CHILD_SA creates an additional Child SA, or — with REKEY_SA —
//! its replacement: a peer-initiated Child SA rekey is answered like a new
//! Child SA for the same configuration, and the event names the SA it
//! replaces; the peer deletes the old one afterwards (§1.3.3). A KE payload
//! of the wrong group gets INVALID_KE_PAYLOAD naming ours. IKE SA rekeying
//! (§1.3.2) is refused for now.
//!
//! INFORMATIONAL: Delete payloads close Child SAs (answered with the SPIs
//! of the paired SAs, §1.4.1) or the whole IKE SA; an empty request is a
//! liveness check and gets an empty answer.

use super::IkeSa;
use super::requests::notify;
use crate::child::{ChildQuery, select_child, ts_from};
use crate::ctx::Ctx;
use crate::event::Reason;
use crate::sa::State;
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    DeleteRepr, ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, ProtocolId,
    Spi,
};

impl IkeSa {
    pub(super) fn respond_create_child(
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
        // Which group, if any, does the chosen proposal need? The group
        // of KEi if acceptable (§1.3), else the first acceptable one.
        let conn = self.conn.clone();
        let q = ChildQuery {
            offered: &sa_p.proposals,
            tsi: &tsi,
            tsr: &tsr,
            ignore_ke: false,
            prefer_ke: ke_p.and_then(|k| KeGroup::from_iana(k.group)),
            only: rekeys.as_ref().map(|(_, n)| &**n),
        };
        let want_ke = select_child(&conn, &q, self.local.ip(), self.remote.ip())
            .ok()
            .and_then(|c| c.selected.ke);
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let mut our_ke = None;
        let g_ir = match want_ke {
            None => None,
            Some(g) => {
                let Some(k) = ke_p.filter(|k| k.group == g.iana_id()) else {
                    // §1.3: a KE of another group than the one chosen is
                    // refused with INVALID_KE_PAYLOAD naming ours.
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
        let rekeys_spi = rekeys.as_ref().map(|(spi, _)| *spi);
        let g = g_ir.as_ref().map(|s| s.as_slice());
        let result = self.create_child(ctx, &q, rekeys_spi, g, ni, &nr);
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

    pub(super) fn respond_informational(
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
