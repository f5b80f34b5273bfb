//! The responder side of CREATE_CHILD_SA (RFC 7296 §1.3) and
//! INFORMATIONAL (§1.4).
//!
//! CREATE_CHILD_SA creates an additional Child SA, an RFC 9611 sub-SA (with
//! SA_RESOURCE_INFO, up to `per_cpu_max`, then TS_MAX_QUEUE), or — with
//! REKEY_SA — the replacement of one (§1.3.3): answered like a new Child
//! SA for the same configuration, keeping the old SA's resource; the event
//! names the SA it replaces and holds back the outbound direction until
//! the peer deletes the old SA (see `event.rs`). An SA payload proposing
//! IKE rekeys the IKE SA (`ike_rekey.rs`). A KE payload of the wrong group
//! gets INVALID_KE_PAYLOAD naming ours.
//!
//! Collisions (§2.25.1, §2.25.2): "If a peer receives a request to rekey a
//! Child SA that it is currently trying to close, it SHOULD reply with
//! TEMPORARY_FAILURE. If a peer receives a request to rekey a Child SA
//! that it is currently rekeying, it SHOULD reply as usual, and SHOULD
//! prepare to close redundant SAs later based on the nonces (see Section
//! 2.8.1). If a peer receives a request to rekey a Child SA that does not
//! exist, it SHOULD reply with CHILD_SA_NOT_FOUND." And "If a peer
//! receives a request to create or rekey a Child SA when it is currently
//! rekeying the IKE SA, it SHOULD reply with TEMPORARY_FAILURE."
//!
//! INFORMATIONAL: Delete payloads close Child SAs (answered with the SPIs
//! of the paired SAs, §1.4.1) or the whole IKE SA; an empty request is a
//! liveness check and gets an empty answer. Deletes for SPIs we do not
//! know are answered without a Delete payload for them (§2.25.1: "If a
//! peer receives a request to close a Child SA that does not exist, it
//! SHOULD reply without a Delete payload"), as are deletes crossing our
//! own (§1.4.1).

use super::IkeSa;
use super::auth_responder::ChildOpts;
use super::requests::notify;
use crate::child::{ChildQuery, ChildState, select_child, ts_from};
use crate::ctx::{Action, Ctx};
use crate::event::Reason;
use crate::lifetime::MAX_CHILD_SAS;
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
        let mut resource_info = false;
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::TsI(t) => tsi = Some(ts_from(t)),
                PayloadRepr::TsR(t) => tsr = Some(ts_from(t)),
                PayloadRepr::Notify(n) if n.kind == NotifyType::REKEY_SA => rekey = Some(*n),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SA_RESOURCE_INFO => {
                    resource_info = true
                }
                _ => {}
            }
        }
        let refuse = |sa: &mut IkeSa, ctx: &mut Ctx<'_>, kind: NotifyType| {
            sa.respond(ctx, ex, mid, &[notify(kind, &[])], from, to);
        };
        let Some(sa_p) = sa_p else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
        };
        if sa_p.proposals.iter().any(|p| p.protocol == ProtocolId::IKE) {
            return self.respond_rekey_ike(ctx, mid, payloads, from, to);
        }
        let (Some(ni), Some(tsi), Some(tsr)) = (nonce, tsi, tsr) else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
        };
        if self.superseded || self.ike_exchange_pending() {
            tracing::info!(ike_sa = %self.id, "CHILD_SA request while the IKE_SA is rekeyed or closed: TEMPORARY_FAILURE");
            return refuse(self, ctx, NotifyType::TEMPORARY_FAILURE);
        }
        // §1.3.3: REKEY_SA names the SA being rekeyed by the SPI the
        // initiator receives on, i.e. our outbound SPI.
        let old = match rekey {
            None => None,
            Some(n) if n.protocol != ProtocolId::ESP => {
                return refuse(self, ctx, NotifyType::INVALID_SYNTAX);
            }
            Some(NotifyRepr {
                spi: Spi::U32(spi), ..
            }) => match self.children.iter().position(|c| c.outbound_spi == spi) {
                Some(i) => Some(i),
                None => {
                    // §2.25: "A CHILD_SA_NOT_FOUND notification SHOULD be
                    // sent when a peer receives a request to rekey a Child
                    // SA that does not exist. The SA that the initiator
                    // attempted to rekey is indicated by the SPI field in
                    // the Notify payload, which is copied from the SPI
                    // field in the REKEY_SA notification."
                    tracing::info!(ike_sa = %self.id, spi = format_args!("{spi:08x}"), "rekey of an unknown CHILD_SA");
                    let n = PayloadRepr::Notify(NotifyRepr {
                        protocol: ProtocolId::ESP,
                        spi: Spi::U32(spi),
                        kind: NotifyType::CHILD_SA_NOT_FOUND,
                        data: &[],
                    });
                    return self.respond(ctx, ex, mid, &[n], from, to);
                }
            },
            Some(_) => return refuse(self, ctx, NotifyType::INVALID_SYNTAX),
        };
        if let Some(i) = old {
            let c = &self.children[i];
            if matches!(c.state, ChildState::Deleting(_) | ChildState::Rekeyed)
                || c.redundant
                || self.replaced(c.inbound_spi)
            {
                tracing::info!(ike_sa = %self.id, child = %c.name, "rekey of a CHILD_SA being closed: TEMPORARY_FAILURE");
                return refuse(self, ctx, NotifyType::TEMPORARY_FAILURE);
            }
        } else if self.children.len() >= MAX_CHILD_SAS {
            // §3.10.1 NO_ADDITIONAL_SAS: no more Child SAs on this IKE SA.
            return refuse(self, ctx, NotifyType::NO_ADDITIONAL_SAS);
        }
        let old_child = old.map(|i| self.children[i].clone());
        // Which group, if any, does the chosen proposal need? The group
        // of KEi if acceptable (§1.3), else the first acceptable one.
        let conn = self.conn.clone();
        let q = ChildQuery {
            offered: &sa_p.proposals,
            tsi: &tsi,
            tsr: &tsr,
            ignore_ke: false,
            prefer_ke: ke_p.and_then(|k| KeGroup::from_iana(k.group)),
            only: old_child.as_ref().map(|c| &*c.name),
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
                    return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN);
                };
                let public = ours.public_value().to_vec();
                match ours.agree(k.data) {
                    Ok(s) => {
                        our_ke = Some((g, public));
                        Some(s)
                    }
                    Err(_) => return refuse(self, ctx, NotifyType::INVALID_SYNTAX),
                }
            }
        };
        let opts = ChildOpts {
            rekeys: old_child.as_ref().map(|c| c.inbound_spi),
            resource: old_child.as_ref().and_then(|c| c.resource),
            per_resource: old_child.as_ref().is_some_and(|c| c.per_resource),
            resource_info: resource_info && old_child.is_none(),
            ke: our_ke.as_ref().map(|(g, _)| *g),
        };
        let g = g_ir.as_ref().map(|s| s.as_slice());
        match self.create_child(ctx, &q, opts, g, ni, &nr) {
            Ok(answer) => {
                if let Some(c) = &old_child {
                    // The peer replaces it and deletes it: no rekey of our own.
                    if let Some(i) = self.child_by_inbound(c.inbound_spi) {
                        self.children[i].rekey_at = None;
                    }
                }
                let mut out = Vec::with_capacity(6);
                if answer.resource_info {
                    out.push(PayloadRepr::Notify(NotifyRepr::new(
                        NotifyType::SA_RESOURCE_INFO,
                        &[],
                    )));
                }
                out.push(PayloadRepr::Sa(answer.sa.clone()));
                out.push(PayloadRepr::Nonce(NonceRepr { data: &nr }));
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
            Err(kind) => refuse(self, ctx, kind),
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
                PayloadRepr::Delete(d) if d.protocol == ProtocolId::ESP => {
                    // §1.4.1: the SPIs are the peer's inbound ones, i.e. our
                    // outbound; answer with our inbound SPIs of the pairs.
                    for spi in &d.spis {
                        if let Some(i) = self.children.iter().position(|c| c.outbound_spi == *spi) {
                            // §1.4.1: deletes that cross get no Delete back.
                            if !matches!(self.children[i].state, ChildState::Deleting(_)) {
                                ours.push(self.children[i].inbound_spi);
                            }
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
            if let Some((peer_sa, _)) = self.peer_rekey.take() {
                // §2.8.2: "If the peer that did notice the simultaneous
                // rekey gets the delete request from the other peer for the
                // old IKE SA, it knows that the other peer did not detect
                // the simultaneous rekey, and the first peer can forget its
                // own rekey attempt." The peer's new SA inherits.
                self.superseded = true;
                self.successor = Some(peer_sa);
                ctx.actions.push(Action::Inherit {
                    from: self.id.0,
                    to: peer_sa,
                });
            }
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
