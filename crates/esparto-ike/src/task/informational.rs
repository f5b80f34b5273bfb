//! INFORMATIONAL exchanges we initiate (RFC 7296 §1.4): deleting Child
//! SAs, deleting the IKE SA, and the liveness check (an empty request,
//! whose response proves the peer is alive).
//!
//! §1.4.1: "To delete an SA, an INFORMATIONAL exchange with one or more
//! Delete payloads is sent listing the SPIs (as they would be expected in
//! the headers of inbound packets) of the SAs to be deleted." The peer
//! answers with the SPIs of the paired SAs; we close ours when the answer
//! comes (or when the peer's own Delete crossed ours).

use super::{Outcome, Received};
use crate::child::ChildState;
use crate::ctx::Ctx;
use crate::event::Reason;
use crate::sa::IkeSa;
use esparto_wire::ike::{DeleteRepr, ExchangeType, PayloadRepr, ProtocolId};

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
