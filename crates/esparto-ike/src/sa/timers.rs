//! An IKE SA's timers: retransmission and give-up (RFC 7296 §2.1, §2.4),
//! half-open expiry, NAT keepalives (RFC 3948 §2.3), liveness checks and
//! `dpd_timeout`, and the lifetimes of the IKE SA and its Child SAs
//! (§2.8): soft (rekey, jittered) and hard (delete).
//!
//! The endpoint keeps one heap entry per SA, at or before
//! [`IkeSa::next_deadline`]; [`IkeSa::on_timeout`] runs whatever is due
//! and the endpoint re-arms.
//! Every request in flight has its own retransmission deadline, since with
//! a window above one several may be outstanding (§2.3).

use super::{IkeSa, State};
use crate::child::ChildState;
use crate::ctx::Ctx;
use crate::event::{Reason, Transmit};
use crate::exchange::Task;
use crate::exchange::child_sa::offer::ChildOffer;
use crate::exchange::rekey_ike::RekeyIke;
use crate::lifetime::RETIRE_AFTER;
use std::time::Instant;

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl IkeSa {
    /// The earliest time this SA needs `on_timeout`.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let mut t = None;
        for p in &self.pending {
            t = earliest(t, Some(p.deadline));
            if let Some(d) = self.conn.dpd_timeout {
                t = earliest(t, Some(p.first_sent + d));
            }
        }
        for d in [
            self.half_open_deadline(),
            self.next_keepalive,
            self.dpd_deadline(),
            self.retire_at,
        ] {
            t = earliest(t, d);
        }
        if self.state == State::Established && !self.superseded {
            t = earliest(t, self.rekey_at);
            for c in &self.children {
                t = earliest(t, c.deadline());
            }
        }
        t
    }

    /// The last time the data plane accepted ESP on any of the SA's Child
    /// SAs (the engine's [`crate::activity::InboundActivity`]).
    fn last_esp(&self, ctx: &Ctx<'_>) -> Option<Instant> {
        self.children.iter().filter_map(|c| ctx.activity.last_inbound(c.inbound_spi)).max()
    }

    fn dpd_deadline(&self) -> Option<Instant> {
        // A replaced IKE SA waits for its Delete; its successor checks.
        if self.state != State::Established
            || self.superseded
            || !self.pending.is_empty()
            || !self.queue.is_empty()
        {
            return None;
        }
        self.conn.dpd_delay.map(|d| self.last_heard + d)
    }

    /// Run whatever is due at `ctx.now`.
    pub(crate) fn on_timeout(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        if self.half_open_deadline().is_some_and(|d| d <= now) {
            if let Some(hs) = self.handshake.as_mut() {
                hs.half_open_deadline = None;
            }
            if self.state != State::Established {
                tracing::debug!(ike_sa = %self.id, peer = %self.remote, "half-open IKE_SA expired");
                self.die(ctx, Reason::HalfOpenExpired);
                return;
            }
        }
        if !self.retransmit(ctx) {
            return;
        }
        if let Some(k) = self.next_keepalive {
            if k <= now {
                if self.nat.local_behind_nat && self.state == State::Established && !self.superseded
                {
                    // RFC 3948 §2.3: a single 0xFF octet, no marker.
                    ctx.transmits.push_back(Transmit {
                        local: self.local,
                        remote: self.remote,
                        data: vec![0xff],
                    });
                }
                self.next_keepalive = Some(now + ctx.config.keepalive_interval);
            }
        }
        if self.dpd_deadline().is_some_and(|d| d <= now) {
            // ESP the data plane accepted since counts as hearing from the
            // peer (RFC 7296 §2.4: a check is for when "there has only been
            // outgoing traffic"); the check waits for `dpd_delay` after it.
            if let Some(t) = self.last_esp(ctx).filter(|t| *t > self.last_heard) {
                self.last_heard = t.min(now);
            }
        }
        if self.dpd_deadline().is_some_and(|d| d <= now) {
            // Restart the idle clock so a liveness check that cannot even
            // be built does not fire again at once.
            self.last_heard = now;
            ctx.stats.liveness_checks += 1;
            tracing::debug!(ike_sa = %self.id, peer = %self.remote, "nothing from the peer for dpd_delay: checking liveness");
            self.start_task(ctx, Task::Liveness);
        }
        if self.retire_at.is_some_and(|d| d <= now) {
            // A replaced or redundant IKE SA the peer should have deleted.
            self.retire_at = None;
            self.superseded = true;
            tracing::info!(ike_sa = %self.id, "deleting a replaced IKE_SA the peer kept");
            self.start_task(ctx, Task::DeleteIke);
        }
        if self.state != State::Established || self.superseded {
            return;
        }
        if self.rekey_at.is_some_and(|d| d <= now) {
            self.rekey_at = None;
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey time reached");
            self.start_task(ctx, Task::RekeyIke(RekeyIke::new()));
        }
        self.child_timers(ctx);
    }

    /// Retransmit what is due; give up on a silent peer (§2.4). Returns
    /// whether the SA lives on.
    fn retransmit(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let now = ctx.now;
        let mut resend = Vec::new();
        let mut dead = None;
        let mut check_failed = false;
        let checking = self.mobike_check.is_some();
        for p in self.pending.iter_mut() {
            if checking
                && matches!(p.task, Task::CheckAddress(_))
                && p.deadline <= now
                && p.sent >= crate::exchange::CHECK_TRIES
            {
                // The peer's new address does not answer: the old one
                // gets the same request (its message ID must arrive).
                check_failed = true;
            }
            if self
                .conn
                .dpd_timeout
                .is_some_and(|d| p.first_sent + d <= now)
            {
                tracing::info!(ike_sa = %self.id, peer = %self.remote, mid = p.mid,
                    "no answer within dpd_timeout: peer dead");
                dead = Some(Reason::Timeout);
                break;
            }
            if p.deadline > now {
                continue;
            }
            if p.sent > ctx.config.retransmit.tries {
                tracing::info!(ike_sa = %self.id, peer = %self.remote, mid = p.mid,
                    "giving up after {} retransmissions", p.sent - 1);
                dead = Some(Reason::Timeout);
                break;
            }
            p.deadline = now + ctx.config.retransmit.timeout_after(p.sent);
            p.sent += 1;
            tracing::debug!(ike_sa = %self.id, mid = p.mid, sent = p.sent, "retransmit");
            resend.push(p.packet.clone());
        }
        if let Some(r) = dead {
            self.die(ctx, r);
            return false;
        }
        if check_failed {
            self.check_failed(ctx);
        }
        for packet in resend {
            self.transmit(ctx, &packet);
        }
        true
    }

    /// Child SA lifetimes: rekey at the soft deadline, delete at the hard
    /// one (§2.8: "When the lifetime of a Security Association expires,
    /// the Security Association MUST NOT be used").
    fn child_timers(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now;
        let mut i = 0;
        while i < self.children.len() {
            let c = &mut self.children[i];
            if c.expire_at.is_some_and(|d| d <= now) {
                c.expire_at = None;
                c.rekey_at = None;
                if !matches!(c.state, ChildState::Deleting(_)) {
                    let reason = if c.redundant || c.state == ChildState::Rekeyed {
                        Reason::Rekeyed
                    } else {
                        Reason::Expired
                    };
                    tracing::info!(ike_sa = %self.id, child = %c.name,
                        inbound_spi = format_args!("{:08x}", c.inbound_spi), ?reason,
                        "CHILD_SA lifetime over: deleting");
                    self.delete_child(ctx, i, reason);
                }
            } else if c.rekey_at.is_some_and(|d| d <= now) {
                c.rekey_at = None;
                let spi = c.inbound_spi;
                if c.state == ChildState::Installed && !c.redundant && !self.replaced(spi) {
                    self.start_rekey_child(ctx, i);
                }
            }
            i += 1;
        }
    }

    /// Start rekeying child `idx` (§1.3.3): same configuration, selectors
    /// and resource, new SPIs, nonces and (with PFS) key exchange.
    pub(crate) fn start_rekey_child(&mut self, ctx: &mut Ctx<'_>, idx: usize) {
        let Some(c) = self.children.get_mut(idx) else {
            return;
        };
        tracing::info!(ike_sa = %self.id, child = %c.name,
            inbound_spi = format_args!("{:08x}", c.inbound_spi), "rekeying CHILD_SA");
        c.state = ChildState::Rekeying;
        let task = ChildOffer::rekey(c);
        self.start_task(ctx, Task::CreateChild(task));
    }

    /// Delete child `idx` with an INFORMATIONAL (§1.4.1), reporting
    /// `reason` when the peer has answered.
    pub(crate) fn delete_child(&mut self, ctx: &mut Ctx<'_>, idx: usize, reason: Reason) {
        let Some(c) = self.children.get_mut(idx) else {
            return;
        };
        c.state = ChildState::Deleting(reason);
        c.rekey_at = None;
        c.expire_at = None;
        let spi = c.inbound_spi;
        self.start_task(ctx, Task::DeleteChild(vec![spi]));
    }

    /// Ask the peer now whether it still holds this IKE SA (§2.21.4: a
    /// hint "that there might be problems with SAs to that IP address"
    /// should lead to "a liveness check for any such IKE SA"): the oldest
    /// request in flight is sent again, or an empty INFORMATIONAL (§1.4)
    /// goes out. Either way the peer answers within a round trip, with
    /// INVALID_IKE_SPI if it lost the SA. Retransmission counters and
    /// deadlines stay as they are.
    pub(crate) fn check_liveness_now(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(packet) = self.pending.front().map(|p| p.packet.clone()) {
            self.transmit(ctx, &packet);
        } else if !self.queue.iter().any(|t| matches!(t, Task::Liveness)) {
            self.start_task(ctx, Task::Liveness);
        }
    }

    /// Set the retirement timer of a replaced IKE SA.
    pub(crate) fn retire(&mut self, ctx: &Ctx<'_>) {
        self.retire_at = Some(ctx.now + RETIRE_AFTER);
    }
}
