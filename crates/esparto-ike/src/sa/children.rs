//! Child SA bookkeeping of one IKE SA: removal (and what it unblocks),
//! and the outcome of a Child SA rekey we initiated, collisions included
//! (RFC 7296 §2.8, §2.8.1, §2.25).
//!
//! A rekey creates the new SA before the old one goes (make-before-break).
//! When both peers rekey the same SA at once, "the SA created with the
//! lowest of the four nonces used in the two exchanges SHOULD be closed by
//! the endpoint that created it [...] The node that initiated the
//! surviving rekeyed SA should delete the replaced SA after the new one is
//! established" (§2.8). Each SA made by a rekey keeps the lowest nonce of
//! its exchange, so whichever exchange finishes last can decide:
//!
//! ```text
//!   our rekey done, no rival answered by us     -> ours survives: announce, delete the old SA
//!   rival (the peer's, answered by us) lower    -> ours survives: announce, delete the old SA;
//!                                                  the peer deletes its rival
//!   ours lower                                  -> ours is redundant: delete it unannounced;
//!                                                  the peer deletes the old SA
//! ```
//!
//! The rival we answered was announced with `outbound_active: false`: it
//! becomes active only when the old SA goes and it is not redundant, so a
//! redundant SA never carries a packet (see `event.rs`).

use super::IkeSa;
use crate::child::{ChildSa, ChildState, announce};
use crate::ctx::Ctx;
use crate::event::{ChildSaEstablished, Event, Reason};
use crate::exchange::Task;
use crate::exchange::child_sa::offer::ChildOffer;
use crate::lifetime::{RETIRE_AFTER, retry_deadline};
use esparto_wire::ike::NotifyType;

impl IkeSa {
    /// Has the child with inbound SPI `spi` a successor that will survive?
    pub(crate) fn replaced(&self, spi: u32) -> bool {
        self.children
            .iter()
            .any(|c| c.rekeys == Some(spi) && !c.redundant)
    }

    /// Remove child `idx`, release its SPI and report it (if the driver
    /// heard of it). A successor still waiting to send (a rekey the peer
    /// initiated) becomes active first: the old SA is gone, so the peer
    /// has the new one.
    pub(crate) fn remove_child(&mut self, ctx: &mut Ctx<'_>, idx: usize, reason: Reason) {
        if idx >= self.children.len() {
            return;
        }
        let c = self.children.remove(idx);
        ctx.spis.release(c.inbound_spi);
        for s in self.children.iter_mut().filter(|s| {
            s.rekeys == Some(c.inbound_spi) && s.announced && !s.redundant && !s.outbound_active
        }) {
            s.outbound_active = true;
            tracing::info!(ike_sa = %self.id, child = %s.name,
                outbound_spi = format_args!("{:08x}", s.outbound_spi), "CHILD_SA outbound active");
            ctx.events.push_back(Event::ChildSaOutboundActive {
                ike_sa: self.id,
                connection: self.conn.name.clone(),
                child: s.name.clone(),
                inbound_spi: s.inbound_spi,
                outbound_spi: s.outbound_spi,
            });
        }
        let reason = if c.state == ChildState::Rekeyed || self.replaced(c.inbound_spi) {
            Reason::Rekeyed
        } else {
            reason
        };
        tracing::info!(ike_sa = %self.id, child = %c.name,
            inbound_spi = format_args!("{:08x}", c.inbound_spi), ?reason, "CHILD_SA deleted");
        self.announce_deleted(ctx, c, reason);
    }

    /// `ChildSaDeleted` for a Child SA that has left the list, if the
    /// driver was told of it.
    pub(crate) fn announce_deleted(&self, ctx: &mut Ctx<'_>, c: ChildSa, reason: Reason) {
        if c.announced {
            ctx.events.push_back(Event::ChildSaDeleted {
                ike_sa: self.id,
                connection: self.conn.name.clone(),
                child: c.name,
                inbound_spi: c.inbound_spi,
                outbound_spi: c.outbound_spi,
                reason,
            });
        }
    }

    /// Our rekey of the SA with inbound SPI `old` produced `new`: decide
    /// between it and a crossing rekey of the peer (module docs), announce
    /// the survivor, delete what must go.
    pub(crate) fn complete_rekey(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut new: ChildSa,
        event: Box<ChildSaEstablished>,
        old: u32,
    ) {
        let rival = self
            .children
            .iter()
            .position(|c| c.rekeys == Some(old) && !c.initiated && !c.redundant);
        let lost = rival.is_some_and(|r| new.low_nonce < self.children[r].low_nonce);
        if lost {
            tracing::info!(ike_sa = %self.id, child = %new.name,
                inbound_spi = format_args!("{:08x}", new.inbound_spi),
                "CHILD_SA rekey collision lost (lowest nonce): deleting ours");
            new.redundant = true;
            new.state = ChildState::Deleting(Reason::Rekeyed);
            new.rekey_at = None;
            new.expire_at = None;
            let spi = new.inbound_spi;
            self.add_child(new);
            if let Some(i) = self.child_by_inbound(old) {
                if self.children[i].state == ChildState::Rekeying {
                    self.children[i].state = ChildState::Rekeyed;
                }
            }
            self.queue.push_back(Task::DeleteChild(vec![spi]));
            return;
        }
        let terminated = self
            .child_by_inbound(old)
            .is_some_and(|i| self.children[i].state == ChildState::Deleting(Reason::Terminated));
        announce(ctx, &mut new, event);
        let new_spi = new.inbound_spi;
        self.add_child(new);
        if terminated {
            // `terminate_child` while the rekey was out: the Child SA was
            // meant to go, so its successor goes too.
            if let Some(i) = self.child_by_inbound(new_spi) {
                self.children[i].state = ChildState::Deleting(Reason::Terminated);
                self.children[i].rekey_at = None;
                self.children[i].expire_at = None;
                self.queue.push_back(Task::DeleteChild(vec![new_spi]));
            }
        }
        if let Some(r) = rival {
            tracing::info!(ike_sa = %self.id, "CHILD_SA rekey collision won: the peer deletes its SA");
            let c = &mut self.children[r];
            c.redundant = true;
            c.rekey_at = None;
            // If the peer forgets to delete it, we do.
            c.expire_at = Some(ctx.now + RETIRE_AFTER);
        }
        if let Some(i) = self.child_by_inbound(old) {
            if !matches!(self.children[i].state, ChildState::Deleting(_)) {
                self.children[i].state = ChildState::Deleting(Reason::Rekeyed);
                self.children[i].rekey_at = None;
                self.children[i].expire_at = None;
                self.queue.push_back(Task::DeleteChild(vec![old]));
            }
        }
    }

    /// Our rekey of the SA with inbound SPI `old` failed with `error`.
    pub(crate) fn rekey_failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        old: u32,
        error: Option<NotifyType>,
        resource: Option<u16>,
        per_resource: bool,
    ) {
        let Some(i) = self.child_by_inbound(old) else {
            return;
        };
        if error == Some(NotifyType::CHILD_SA_NOT_FOUND) {
            // §2.25: "A peer that receives a CHILD_SA_NOT_FOUND notification
            // SHOULD silently delete the Child SA (if it still exists) and
            // send a request to create a new Child SA from scratch".
            let name = self.children[i].name.clone();
            self.remove_child(ctx, i, Reason::PeerError(NotifyType::CHILD_SA_NOT_FOUND));
            let mut task = ChildOffer::new(name, resource);
            task.per_resource = per_resource;
            self.queue.push_back(Task::CreateChild(task));
            return;
        }
        let replaced = self.replaced(old);
        let c = &mut self.children[i];
        if c.state != ChildState::Rekeying {
            return;
        }
        if replaced {
            // The peer's rekey of it succeeded: it deletes this one.
            c.state = ChildState::Rekeyed;
            return;
        }
        c.state = ChildState::Installed;
        // §2.25: after TEMPORARY_FAILURE "it MUST NOT immediately retry";
        // other failures are retried alike until the hard lifetime ends.
        let retry = retry_deadline(ctx);
        if c.expire_at.is_none_or(|e| retry < e) {
            c.rekey_at = Some(retry);
        }
    }
}
