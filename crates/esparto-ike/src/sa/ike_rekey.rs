//! IKE SA rekeying (RFC 7296 §1.3.2, §2.18, §2.8.2): the new SA built from
//! an old one, the hand-over of Child SAs, and the responder side.
//!
//! ```text
//! HDR, SK {SA, Ni, KEi}  -->
//!                 <--  HDR, SK {SA, Nr, KEr}
//! ```
//!
//! "The new IKE SA has its message counters set to 0, regardless of what
//! they were in the earlier IKE SA. [...] The new IKE SA also has its
//! window size reset to 1, and the initiator in this rekey exchange is the
//! new 'original initiator' of the new IKE SA" (§1.3.2). Both peers put
//! SET_WINDOW_SIZE in the rekey exchange (status notifies "MAY be added to
//! any message", §3.10.1), which then applies to the new SA.
//!
//! Responder, collisions (§2.25.1, §2.25.2): a rekey request meeting a
//! Child SA exchange of ours, or our own delete of this SA, or an SA
//! already replaced gets TEMPORARY_FAILURE. One meeting our own rekey of
//! this SA is answered as usual and the new SA is held apart, childless,
//! until our exchange ends and the nonces decide (`task/rekey_ike.rs`).

use super::requests::notify;
use super::{IkeSa, Role, State};
use crate::child::lowest;
use crate::config::EndpointConfig;
use crate::ctx::{Action, Ctx};
use crate::event::{Event, IkeSaId};
use crate::keys::IkeKeys;
use crate::lifetime::{MAX_WINDOW, rekey_deadline};
use crate::proposal::{Proposal, Protocol, Selected};
use crate::task::Task;
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};

/// SET_WINDOW_SIZE's data for our window, if above one (§2.3: "The data
/// associated with a SET_WINDOW_SIZE notification MUST be 4 octets long
/// and contain the big endian representation of the number of messages the
/// sender promises to keep").
pub(crate) fn window_notify(config: &EndpointConfig) -> Option<[u8; 4]> {
    let w = config.window_size.clamp(1, MAX_WINDOW);
    (w > 1).then(|| w.to_be_bytes())
}

/// The peer's window from its SET_WINDOW_SIZE (1 without one).
pub(crate) fn peer_window(announced: Option<u32>) -> u32 {
    announced.unwrap_or(1).clamp(1, MAX_WINDOW)
}

impl IkeSa {
    /// The IKE SA that replaces this one after a rekey exchange: same
    /// peer, connection, identities, NAT state; new SPIs and keys;
    /// message IDs from 0.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn successor(
        &self,
        ctx: &mut Ctx<'_>,
        role: Role,
        spi_i: u64,
        spi_r: u64,
        keys: IkeKeys,
        suite: Selected,
        announced_window: Option<u32>,
    ) -> IkeSa {
        let ours = if role == Role::Initiator {
            spi_i
        } else {
            spi_r
        };
        let mut n = IkeSa::new(
            IkeSaId(ours),
            role,
            spi_i,
            spi_r,
            self.conn.clone(),
            self.local,
            self.remote,
            ctx.now,
        );
        n.state = State::Established;
        n.keys = Some(keys);
        n.suite = Some(suite);
        n.nat = self.nat;
        n.local_id = self.local_id.clone();
        n.remote_id = self.remote_id.clone();
        n.announced = true;
        n.window = ctx.config.window_size.clamp(1, MAX_WINDOW);
        n.peer_window = peer_window(announced_window);
        n.next_keepalive = self.next_keepalive;
        n.rekey_at = rekey_deadline(ctx, self.conn.rekey_time, self.conn.jitter());
        n
    }

    /// Give this SA's Child SAs, RFC 9611 state and waiting tasks to its
    /// successor `to`, and tell the driver. This SA is superseded from now:
    /// it dies without an event once deleted.
    pub(crate) fn hand_over(&mut self, ctx: &mut Ctx<'_>, to: &mut IkeSa) {
        tracing::info!(old = %self.id, new = %to.id, children = self.children.len(), "IKE_SA rekeyed");
        to.children.append(&mut self.children);
        for g in self.resources.drain(..) {
            if !to.resources.iter().any(|h| h.child == g.child) {
                to.resources.push(g);
            }
        }
        let mut keep = std::collections::VecDeque::new();
        for t in self.queue.drain(..) {
            if t.is_exclusive() {
                // A `terminate` waiting for the rekey to end meant the IKE
                // SA, whichever SPIs it has now: the successor goes too.
                if matches!(t, Task::DeleteIke)
                    && !to.queue.iter().any(|q| matches!(q, Task::DeleteIke))
                {
                    to.queue.push_back(Task::DeleteIke);
                }
                keep.push_back(t);
            } else {
                to.queue.push_back(t);
            }
        }
        self.queue = keep;
        self.superseded = true;
        self.successor = Some(to.id.0);
        self.rekey_at = None;
        to.superseded = false;
        to.retire_at = None;
        ctx.events.push_back(Event::IkeSaRekeyed {
            old: self.id,
            new: to.id,
            connection: self.conn.name.clone(),
        });
    }

    /// A CREATE_CHILD_SA request whose SA payload proposes IKE: the peer
    /// rekeys this IKE SA.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn respond_rekey_ike(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::CREATE_CHILD_SA;
        let (mut sa_p, mut ni, mut ke_p, mut window) = (None, None, None, None);
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => ni = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SET_WINDOW_SIZE => {
                    window = n.u32_data()
                }
                _ => {}
            }
        }
        let refuse = |sa: &mut IkeSa, ctx: &mut Ctx<'_>, kind: NotifyType, data: &[u8]| {
            sa.respond(ctx, ex, mid, &[notify(kind, data)], from, to);
        };
        // §2.25.2: "If a peer receives a request to rekey an IKE SA that it
        // is currently trying to close, it SHOULD reply with
        // TEMPORARY_FAILURE"; §2.25.1: "If a peer receives a request to
        // rekey the IKE SA, and it is currently creating, rekeying, or
        // closing a Child SA of that IKE SA, it SHOULD reply with
        // TEMPORARY_FAILURE." An SA we rekeyed already counts as closing
        // (§2.8.2).
        let closing = self.superseded
            || self
                .pending
                .iter()
                .any(|p| matches!(p.task, Task::DeleteIke));
        if closing || self.child_exchange_pending() {
            tracing::info!(ike_sa = %self.id, closing, "IKE_SA rekey refused: TEMPORARY_FAILURE");
            return refuse(self, ctx, NotifyType::TEMPORARY_FAILURE, &[]);
        }
        let (Some(sa_p), Some(ni)) = (sa_p, ni) else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX, &[]);
        };
        let ke_group = ke_p.and_then(|k| KeGroup::from_iana(k.group));
        // Our IKE proposals always carry a group, so a proposal with NONE
        // never matches: "a responder MUST NOT accept such a proposal" (§2.18).
        let Some(selected) =
            Proposal::select(&self.conn.proposals, &sa_p.proposals, false, ke_group)
        else {
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey: no proposal chosen");
            return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN, &[]);
        };
        let Spi::U64(spi_i) = selected.spi else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX, &[]);
        };
        let Some(group) = selected.ke else {
            return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN, &[]);
        };
        let Some(ke_p) = ke_p.filter(|k| k.group == group.iana_id()) else {
            let d = group.iana_id().to_be_bytes();
            return refuse(self, ctx, NotifyType::INVALID_KE_PAYLOAD, &d);
        };
        if spi_i == 0 {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX, &[]);
        }
        let Ok(ours) = group.generate(ctx.rng) else {
            return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN, &[]);
        };
        let public = ours.public_value().to_vec();
        let Ok(g_ir) = ours.agree(ke_p.data) else {
            return refuse(self, ctx, NotifyType::INVALID_SYNTAX, &[]);
        };
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let Some(old) = self.keys.as_ref() else {
            return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN, &[]);
        };
        let spi_r = ctx.new_ike_spi();
        let keys = match IkeKeys::derive_rekey(
            old.prf,
            old.sk_d(),
            &selected,
            ni,
            &nr,
            g_ir.as_slice(),
            spi_i,
            spi_r,
        ) {
            Ok(k) => k,
            Err(_) => {
                ctx.release_ike_spi(spi_r);
                return refuse(self, ctx, NotifyType::NO_PROPOSAL_CHOSEN, &[]);
            }
        };
        let mut new = self.successor(ctx, Role::Responder, spi_i, spi_r, keys, selected, window);
        let crossed = self
            .pending
            .iter()
            .any(|p| matches!(p.task, Task::RekeyIke(_)));
        if crossed {
            // §2.8.2: answer as usual; the nonces decide when ours ends.
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey collision: holding the peer's new SA");
            self.peer_rekey = Some((spi_r, lowest(ni, &nr).into()));
            // Silent until it inherits: if it turns out redundant, the peer
            // deletes it (or it retires) without the driver hearing of it.
            new.superseded = true;
            new.retire(ctx);
        } else {
            self.hand_over(ctx, &mut new);
            // The peer deletes this one; if it does not, we will.
            self.retire(ctx);
        }
        ctx.actions.push(Action::Insert(Box::new(new)));
        let answer = SaRepr {
            proposals: vec![selected.to_wire(Protocol::Ike, Spi::U64(spi_r))],
        };
        let w = window_notify(ctx.config);
        let mut out = vec![
            PayloadRepr::Sa(answer),
            PayloadRepr::Nonce(NonceRepr { data: &nr }),
            PayloadRepr::Ke(KeRepr {
                group: group.iana_id(),
                data: &public,
            }),
        ];
        if let Some(w) = &w {
            out.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SET_WINDOW_SIZE,
                w,
            )));
        }
        self.respond(ctx, ex, mid, &out, from, to);
    }
}
