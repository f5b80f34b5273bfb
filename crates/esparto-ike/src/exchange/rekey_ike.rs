//! Rekeying the IKE SA with CREATE_CHILD_SA, as initiator (RFC 7296
//! §1.3.2, §2.18, §2.8, §2.8.2).
//!
//! ```text
//! HDR, SK {SA, Ni, KEi}  -->
//!                 <--  HDR, SK {SA, Nr, KEr}
//! ```
//!
//! "A new initiator SPI is supplied in the SPI field of the SA payload."
//! The KE payload is mandatory: "implementations MUST perform a new
//! Diffie-Hellman exchange when rekeying the IKE SA" (§2.18). We offer the
//! connection's proposals with the group of the current IKE SA first
//! (strongSwan does the same), and follow INVALID_KE_PAYLOAD.
//!
//! On success the new IKE SA ([`IkeSa::successor`]) inherits every Child SA
//! ("An IKE SA so created inherits all of the original IKE SA's Child
//! SAs"), the driver gets `IkeSaRekeyed`, and we delete the old SA: "After
//! the new equivalent IKE SA is created, the initiator deletes the old IKE
//! SA, and the Delete payload to delete itself MUST be the last request
//! sent over the old IKE SA" (§2.8). The new SA's message IDs start at 0
//! (§1.3.2). If the peer's rekey of the same SA crossed ours (§2.8.2), "the
//! new IKE SA containing the lowest nonce SHOULD be deleted by the node
//! that created it, and the other surviving new IKE SA MUST inherit all
//! the Child SAs."

use super::{Outcome, Received, Task, reason_for};
use crate::child::lowest;
use crate::ctx::{Action, Ctx};
use crate::event::{Event, IkeSaId, Reason};
use crate::keys::IkeKeys;
use crate::lifetime::{MAX_WINDOW, rekey_deadline, retry_deadline};
use crate::proposal::{Proposal, Protocol, Selected};
use crate::sa::{IkeSa, Role, State, notify, peer_window, window_notify};
use core::net::SocketAddr;
use esparto_crypto::ike::{KeGroup, KeyExchange};
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};

const MAX_KE_RETRIES: u8 = 2;

/// The IKE SA rekey task.
pub(crate) struct RekeyIke {
    /// Our SPI for the new IKE SA, reserved until the task ends.
    spi: Option<u64>,
    nonce: Vec<u8>,
    group: Option<KeGroup>,
    ke: Option<KeyExchange>,
    retries: u8,
}

impl RekeyIke {
    pub(crate) fn new() -> Self {
        RekeyIke {
            spi: None,
            nonce: Vec::new(),
            group: None,
            ke: None,
            retries: 0,
        }
    }

    pub(super) fn release(self, ctx: &mut Ctx<'_>) {
        if let Some(spi) = self.spi {
            ctx.release_ike_spi(spi);
        }
    }

    pub(super) fn build(
        &mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        mid: u32,
    ) -> Result<Vec<u8>, Reason> {
        let spi = match self.spi {
            Some(s) => s,
            None => *self.spi.insert(ctx.new_ike_spi()),
        };
        let conn = sa.conn.clone();
        let offered = |g: &KeGroup| conn.proposals.iter().any(|p| p.ke.contains(g));
        if !self.group.as_ref().is_some_and(offered) {
            self.group = sa
                .suite
                .and_then(|s| s.ke)
                .filter(offered)
                .or_else(|| conn.proposals.iter().find_map(|p| p.ke.first().copied()));
        }
        let group = self.group.ok_or(Reason::Local("no key exchange group"))?;
        if self.ke.as_ref().is_none_or(|k| k.group() != group) {
            self.ke = Some(
                group
                    .generate(ctx.rng)
                    .map_err(|_| Reason::Local("key exchange"))?,
            );
        }
        let ke = self.ke.as_ref().ok_or(Reason::Local("key exchange"))?;
        self.nonce = vec![0; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut self.nonce);
        // Our proposals, the current group's first within each (§1.2:
        // the KE payload's group should be the first choice).
        let proposals = conn
            .proposals
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut p = p.clone();
                if let Some(pos) = p.ke.iter().position(|g| *g == group) {
                    p.ke.swap(0, pos);
                }
                p.to_wire((i + 1) as u8, Spi::U64(spi), true)
            })
            .collect();
        let window = window_notify(ctx.config);
        let mut payloads = vec![
            PayloadRepr::Sa(SaRepr { proposals }),
            PayloadRepr::Nonce(NonceRepr { data: &self.nonce }),
            PayloadRepr::Ke(KeRepr {
                group: group.iana_id(),
                data: ke.public_value(),
            }),
        ];
        if let Some(w) = &window {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::SET_WINDOW_SIZE,
                w,
            )));
        }
        tracing::info!(ike_sa = %sa.id, new_spi = format_args!("{spi:016x}"), %group, "rekeying IKE_SA");
        sa.encode(ExchangeType::CREATE_CHILD_SA, false, mid, &payloads)
    }

    /// The rekey did not happen: adopt the peer's crossed rekey if there
    /// is one, else retry later.
    fn failed(self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, reason: Reason) -> Outcome {
        tracing::info!(ike_sa = %sa.id, ?reason, "IKE_SA rekey failed");
        self.release(ctx);
        if let Some((peer_sa, _)) = sa.peer_rekey.take() {
            // §2.8.2: only the peer's new SA exists; it inherits.
            sa.superseded = true;
            sa.successor = Some(peer_sa);
            sa.retire(ctx);
            ctx.actions.push(Action::Inherit {
                from: sa.id.0,
                to: peer_sa,
            });
        } else if !sa.superseded {
            // §2.25: after TEMPORARY_FAILURE, wait before retrying.
            sa.rekey_at = Some(retry_deadline(ctx));
        }
        Outcome::Done
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some((kind, data)) = rx.error() {
            if kind == NotifyType::INVALID_KE_PAYLOAD && self.retries < MAX_KE_RETRIES {
                let wanted = NotifyRepr::new(kind, data)
                    .u16_data()
                    .and_then(KeGroup::from_iana);
                if let Some(g) = wanted.filter(|g| {
                    Some(*g) != self.group && sa.conn.proposals.iter().any(|p| p.ke.contains(g))
                }) {
                    self.retries += 1;
                    self.group = Some(g);
                    self.ke = None;
                    return Outcome::Then(Box::new(Task::RekeyIke(self)));
                }
            }
            return self.failed(sa, ctx, reason_for(kind));
        }
        let (mut sa_p, mut nonce, mut ke_p, mut window) = (None, None, None, None);
        for p in &rx.payloads {
            match p {
                PayloadRepr::Sa(s) => sa_p = Some(s),
                PayloadRepr::Nonce(n) => nonce = Some(n.data),
                PayloadRepr::Ke(k) => ke_p = Some(*k),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SET_WINDOW_SIZE => {
                    window = n.u32_data()
                }
                _ => {}
            }
        }
        let (Some(sa_p), Some(nr), Some(ke_p)) = (sa_p, nonce, ke_p) else {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("IKE rekey response incomplete"),
            );
        };
        let Some(selected) = Proposal::accept_response(&sa.conn.proposals, &sa_p.proposals, false)
        else {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("responder chose a proposal we did not offer"),
            );
        };
        let Spi::U64(spi_r) = selected.spi else {
            return self.failed(sa, ctx, Reason::ProtocolError("IKE rekey without an SPI"));
        };
        if spi_r == 0
            || selected.ke != self.group
            || Some(ke_p.group) != self.group.map(|g| g.iana_id())
        {
            return self.failed(
                sa,
                ctx,
                Reason::ProtocolError("IKE rekey answer with a bad SPI or group"),
            );
        }
        let (Some(ke), Some(spi_i)) = (self.ke.take(), self.spi) else {
            return self.failed(sa, ctx, Reason::Local("rekey state lost"));
        };
        let Ok(g_ir) = ke.agree(ke_p.data) else {
            return self.failed(sa, ctx, Reason::ProtocolError("invalid key exchange value"));
        };
        let Some(old) = sa.keys.as_ref() else {
            return self.failed(sa, ctx, Reason::Local("no keys"));
        };
        let keys = match IkeKeys::derive_rekey(
            old.prf,
            old.sk_d(),
            &selected,
            &self.nonce,
            nr,
            g_ir.as_slice(),
            spi_i,
            spi_r,
        ) {
            Ok(k) => k,
            Err(_) => return self.failed(sa, ctx, Reason::Local("IKE key derivation")),
        };
        let mut new = sa.successor(ctx, Role::Initiator, spi_i, spi_r, keys, selected, window);
        // The SPI is the new SA's now; the endpoint holds it.
        self.spi = None;
        let ours_low = lowest(&self.nonce, nr);
        if let Some((peer_sa, peer_low)) = sa.peer_rekey.take() {
            if *ours_low < *peer_low {
                // §2.8.2: ours holds the lowest nonce: we delete it, the
                // peer's inherits (and the peer deletes the old one).
                tracing::info!(ike_sa = %sa.id, "IKE_SA rekey collision lost: deleting our new SA");
                new.superseded = true;
                new.queue.push_back(Task::DeleteIke);
                ctx.actions.push(Action::Insert(Box::new(new)));
                sa.superseded = true;
                sa.successor = Some(peer_sa);
                sa.retire(ctx);
                ctx.actions.push(Action::Inherit {
                    from: sa.id.0,
                    to: peer_sa,
                });
                return Outcome::Done;
            }
            tracing::info!(ike_sa = %sa.id, "IKE_SA rekey collision won: the peer deletes its new SA");
        }
        sa.hand_over(ctx, &mut new);
        ctx.actions.push(Action::Insert(Box::new(new)));
        // The old SA's last request: its Delete (§2.8).
        Outcome::Then(Box::new(Task::DeleteIke))
    }
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
    pub(crate) fn respond_rekey_ike(
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
