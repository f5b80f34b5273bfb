//! INFORMATIONAL (RFC 7296 §1.4), both roles: deleting Child SAs,
//! deleting the IKE SA, and the liveness check (an empty request, whose
//! response proves the peer is alive).
//!
//! §1.4.1: "To delete an SA, an INFORMATIONAL exchange with one or more
//! Delete payloads is sent listing the SPIs (as they would be expected in
//! the headers of inbound packets) of the SAs to be deleted."
//!
//! Initiator (`Task::DeleteChild`, `Task::DeleteIke`, `Task::Liveness`):
//! the peer answers a Child SA delete with the SPIs of the paired SAs; we
//! close ours when the answer comes (or when the peer's own Delete crossed
//! ours).
//!
//! Responder ([`IkeSa::respond_informational`]): Delete payloads close
//! Child SAs (answered with the SPIs of the paired SAs, §1.4.1) or the
//! whole IKE SA; an empty request gets an empty answer. Deletes for SPIs we
//! do not know are answered without a Delete payload for them (§2.25.1:
//! "If a peer receives a request to close a Child SA that does not exist,
//! it SHOULD reply without a Delete payload"), as are deletes crossing our
//! own (§1.4.1).

use super::{Outcome, Received};
use crate::child::ChildState;
use crate::ctx::{Action, Ctx};
use crate::event::Reason;
use crate::sa::{IkeSa, State};
use core::net::SocketAddr;
use esparto_wire::ike::{DeleteRepr, ExchangeType, NotifyRepr, NotifyType, PayloadRepr, ProtocolId};

pub(super) fn build_delete_child(
    sa: &mut IkeSa,
    mid: u32,
    spis: &[u32],
) -> Result<Vec<u8>, Reason> {
    for c in sa
        .children
        .iter_mut()
        .filter(|c| spis.contains(&c.inbound_spi))
    {
        if !matches!(c.state, ChildState::Deleting(_)) {
            c.state = ChildState::Deleting(Reason::Terminated);
        }
        c.rekey_at = None;
        c.expire_at = None;
    }
    let d = PayloadRepr::Delete(DeleteRepr {
        protocol: ProtocolId::ESP,
        spis: spis.to_vec(),
    });
    sa.encode(ExchangeType::INFORMATIONAL, false, mid, &[d])
}

pub(super) fn build_delete_ike(sa: &mut IkeSa, mid: u32) -> Result<Vec<u8>, Reason> {
    let d = PayloadRepr::Delete(DeleteRepr {
        protocol: ProtocolId::IKE,
        spis: vec![],
    });
    sa.encode(ExchangeType::INFORMATIONAL, false, mid, &[d])
}

pub(super) fn process_delete_child(
    sa: &mut IkeSa,
    ctx: &mut Ctx<'_>,
    _rx: &Received<'_>,
    spis: &[u32],
) -> Outcome {
    // Whatever the peer answered (its paired SPIs, or nothing if it had
    // already deleted them), our side of these SAs is gone now.
    for spi in spis {
        if let Some(i) = sa.child_by_inbound(*spi) {
            let reason = match sa.children[i].state {
                ChildState::Deleting(r) => r,
                _ => Reason::Terminated,
            };
            sa.remove_child(ctx, i, reason);
        }
    }
    Outcome::Done
}

impl IkeSa {
    /// An INFORMATIONAL request: Delete payloads, error notifies, or
    /// nothing (a liveness check).
    pub(crate) fn respond_informational(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::INFORMATIONAL;
        let mut delete_ike = false;
        let mut update = false;
        let mut ours = Vec::new();
        for p in payloads {
            match p {
                PayloadRepr::Notify(n) if n.kind == NotifyType::UPDATE_SA_ADDRESSES => update = true,
                PayloadRepr::Delete(d) if d.protocol == ProtocolId::IKE => delete_ike = true,
                PayloadRepr::Delete(d) if d.protocol == ProtocolId::ESP => {
                    self.peer_deletes_children(ctx, &d.spis, &mut ours);
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
            return self.peer_deletes_ike_sa(ctx);
        }
        // MOBIKE (RFC 4555 §3.5, §3.9): COOKIE2 comes back as it came,
        // NAT detection answers NAT detection.
        let (cookie2, nat) = self.mobike_answer(ctx, payloads, from, to);
        let mut answer = Vec::new();
        if !ours.is_empty() {
            answer.push(PayloadRepr::Delete(DeleteRepr {
                protocol: ProtocolId::ESP,
                spis: ours,
            }));
        }
        if let Some([src, dst]) = &nat {
            answer.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::NAT_DETECTION_SOURCE_IP, src)));
            answer.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::NAT_DETECTION_DESTINATION_IP, dst)));
        }
        if let Some(c) = &cookie2 {
            answer.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE2, c)));
        }
        self.respond(ctx, ex, mid, &answer, from, to);
        if update {
            self.peer_update(ctx, from, to);
        }
    }

    /// §1.4.1: the SPIs of a Delete are the peer's inbound ones, i.e. our
    /// outbound. Remove those Child SAs and add our inbound SPIs of the
    /// pairs to the answer — except for deletes that cross ours, which get
    /// no Delete back.
    fn peer_deletes_children(&mut self, ctx: &mut Ctx<'_>, spis: &[u32], ours: &mut Vec<u32>) {
        for spi in spis {
            if let Some(i) = self.children.iter().position(|c| c.outbound_spi == *spi) {
                if !matches!(self.children[i].state, ChildState::Deleting(_)) {
                    ours.push(self.children[i].inbound_spi);
                }
                self.remove_child(ctx, i, Reason::DeletedByPeer);
            }
        }
    }

    /// The peer deleted this IKE SA.
    fn peer_deletes_ike_sa(&mut self, ctx: &mut Ctx<'_>) {
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
    }
}
