//! Rekeying the IKE SA with CREATE_CHILD_SA (RFC 7296 §1.3.2, §2.18, §2.8,
//! §2.8.2), both roles.
//!
//! ```text
//! HDR, SK {SA, Ni, KEi}  -->
//!                 <--  HDR, SK {SA, Nr, KEr}
//! ```
//!
//! "A new initiator SPI is supplied in the SPI field of the SA payload."
//! The KE payload is mandatory: "implementations MUST perform a new
//! Diffie-Hellman exchange when rekeying the IKE SA" (§2.18). The new IKE
//! SA ([`IkeSa::successor`]) keeps the peer, connection, identities and NAT
//! state, with new SPIs and keys: "The new IKE SA has its message counters
//! set to 0, regardless of what they were in the earlier IKE SA. [...] The
//! new IKE SA also has its window size reset to 1, and the initiator in
//! this rekey exchange is the new 'original initiator' of the new IKE SA"
//! (§1.3.2). Both peers put SET_WINDOW_SIZE in the rekey exchange (status
//! notifies "MAY be added to any message", §3.10.1), which then applies to
//! the new SA. The new SA inherits every Child SA ("An IKE SA so created
//! inherits all of the original IKE SA's Child SAs",
//! [`IkeSa::hand_over`]) and the driver gets `IkeSaRekeyed`.
//!
//! Initiator ([`RekeyIke`]). We offer the connection's proposals with the
//! group of the current IKE SA first (strongSwan does the same), and follow
//! INVALID_KE_PAYLOAD as a Child SA with PFS does ([`super::ke`]). On success we delete the old SA: "After the new
//! equivalent IKE SA is created, the initiator deletes the old IKE SA, and
//! the Delete payload to delete itself MUST be the last request sent over
//! the old IKE SA" (§2.8).
//!
//! Responder ([`IkeSa::respond_rekey_ike`]). A rekey request meeting a
//! Child SA exchange of ours, or our own delete of this SA, or an SA
//! already replaced gets TEMPORARY_FAILURE (§2.25.1, §2.25.2). The peer
//! deletes the old SA; if it does not, we do after a while.
//!
//! Collisions (§2.8.2): if both peers rekey the same SA at once, "the new
//! IKE SA containing the lowest nonce SHOULD be deleted by the node that
//! created it, and the other surviving new IKE SA MUST inherit all the
//! Child SAs." The responder answers the peer's request as usual and holds
//! the new SA apart, childless, until its own exchange ends; then the
//! initiator side compares the nonces.

use super::ke::{self, KeOffer};
use super::{Outcome, Received, Task, reason_for};
use crate::child::lowest;
use crate::ctx::{Action, Ctx};
use crate::event::{Event, IkeSaId, Reason};
use crate::keys::IkeKeys;
use crate::lifetime::{MAX_WINDOW, rekey_deadline, retry_deadline};
use crate::proposal::{Proposal, Protocol, Selected};
use crate::sa::{IkeSa, Refusal, Role, State, peer_window, window_notify};
use core::net::SocketAddr;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    ExchangeType, KeRepr, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, SaRepr, Spi,
};

/// The payloads of an IKE SA rekey message that either role reads.
struct RekeyPayloads<'a> {
    sa: Option<&'a SaRepr>,
    nonce: Option<&'a [u8]>,
    ke: Option<KeRepr<'a>>,
    /// SET_WINDOW_SIZE for the new SA (§2.3).
    window: Option<u32>,
}

impl<'a> RekeyPayloads<'a> {
    fn collect(payloads: &'a [PayloadRepr<'a>]) -> Self {
        let mut m = RekeyPayloads {
            sa: None,
            nonce: None,
            ke: None,
            window: None,
        };
        for p in payloads {
            match p {
                PayloadRepr::Sa(s) => m.sa = Some(s),
                PayloadRepr::Nonce(n) => m.nonce = Some(n.data),
                PayloadRepr::Ke(k) => m.ke = Some(*k),
                PayloadRepr::Notify(n) if n.kind == NotifyType::SET_WINDOW_SIZE => {
                    m.window = n.u32_data()
                }
                _ => {}
            }
        }
        m
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
        n.fragmentation = self.fragmentation;
        n.mobike = self.mobike;
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
            // The rekey's initiator is the new IKE SA's (RFC 7296 §2.18).
            initiated: to.role == Role::Initiator,
        });
    }

    /// Only the peer's new SA exists (§2.8.2): it inherits, and this one
    /// retires.
    fn yield_to_peer_rekey(&mut self, ctx: &mut Ctx<'_>, peer_sa: u64) {
        self.superseded = true;
        self.successor = Some(peer_sa);
        self.retire(ctx);
        ctx.actions.push(Action::Inherit {
            from: self.id.0,
            to: peer_sa,
        });
    }
}

// ---------------------------------------------------------------------------
// Initiator

/// The IKE SA rekey task.
pub(crate) struct RekeyIke {
    /// Our SPI for the new IKE SA, reserved until the task ends.
    spi: Option<u64>,
    nonce: Vec<u8>,
    /// The group offered, our KE, INVALID_KE_PAYLOAD retries (§2.18: the
    /// rekey of an IKE SA always has a KE).
    ke: KeOffer,
}

impl RekeyIke {
    pub(crate) fn new() -> Self {
        RekeyIke {
            spi: None,
            nonce: Vec::new(),
            ke: KeOffer::default(),
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
        let group = self.prepare(sa, ctx)?;
        let ke = self.ke.payload().ok_or(Reason::Local("key exchange"))?;
        // Our proposals, the current group's first within each (§1.2:
        // the KE payload's group should be the first choice).
        let proposals = Proposal::without_additional(&sa.conn.proposals)
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
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
            PayloadRepr::Ke(ke),
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

    /// The group to offer (the one asked for by INVALID_KE_PAYLOAD, else
    /// the current IKE SA's if we still offer it, else our first), our KE
    /// for it, and a fresh nonce.
    fn prepare(&mut self, sa: &IkeSa, ctx: &mut Ctx<'_>) -> Result<KeGroup, Reason> {
        let conn = &sa.conn;
        let offered = |g: &KeGroup| conn.proposals.iter().any(|p| p.ke.contains(g));
        let first = || {
            sa.suite
                .and_then(|s| s.ke)
                .filter(offered)
                .or_else(|| conn.proposals.iter().find_map(|p| p.ke.first().copied()))
        };
        self.ke.prepare(ctx.rng, offered, first)?;
        let group = self.ke.group().ok_or(Reason::Local("no key exchange group"))?;
        self.nonce = vec![0; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut self.nonce);
        Ok(group)
    }

    pub(super) fn process(
        mut self,
        sa: &mut IkeSa,
        ctx: &mut Ctx<'_>,
        rx: &Received<'_>,
    ) -> Outcome {
        if let Some((kind, data)) = rx.error() {
            let offered = |g: &KeGroup| sa.conn.proposals.iter().any(|p| p.ke.contains(g));
            if self.ke.follow_invalid_ke(kind, data, offered) {
                return Outcome::Then(Box::new(Task::RekeyIke(self)));
            }
            return self.failed(sa, ctx, reason_for(kind));
        }
        let m = RekeyPayloads::collect(&rx.payloads);
        match self.new_sa(sa, ctx, &m) {
            Ok((new, nr)) => self.adopt(sa, ctx, new, nr),
            Err(reason) => self.failed(sa, ctx, reason),
        }
    }

    /// Check the answer (one of our proposals, a non-zero SPIr, our
    /// group), derive the new SA's keys from SK_d (§2.18) and build it.
    /// Returns it with the responder's nonce.
    fn new_sa<'m>(
        &mut self,
        sa: &IkeSa,
        ctx: &mut Ctx<'_>,
        m: &RekeyPayloads<'m>,
    ) -> Result<(IkeSa, &'m [u8]), Reason> {
        let (Some(sa_p), Some(nr), Some(ke_p)) = (m.sa, m.nonce, m.ke) else {
            return Err(Reason::ProtocolError("IKE rekey response incomplete"));
        };
        let selected = Proposal::accept_response(&Proposal::without_additional(&sa.conn.proposals), &sa_p.proposals, false)
            .ok_or(Reason::ProtocolError(
                "responder chose a proposal we did not offer",
            ))?;
        let Spi::U64(spi_r) = selected.spi else {
            return Err(Reason::ProtocolError("IKE rekey without an SPI"));
        };
        let group = self.ke.group();
        if spi_r == 0 || selected.ke != group || Some(ke_p.group) != group.map(|g| g.iana_id()) {
            return Err(Reason::ProtocolError(
                "IKE rekey answer with a bad SPI or group",
            ));
        }
        let (Some(ke), Some(spi_i)) = (self.ke.take(), self.spi) else {
            return Err(Reason::Local("rekey state lost"));
        };
        let g_ir = ke
            .agree(ke_p.data)
            .map_err(|_| Reason::ProtocolError("invalid key exchange value"))?;
        let old = sa.keys.as_ref().ok_or(Reason::Local("no keys"))?;
        let keys = IkeKeys::derive_rekey(
            old.prf,
            old.sk_d(),
            &selected,
            &self.nonce,
            nr,
            g_ir.as_slice(),
            spi_i,
            spi_r,
        )
        .map_err(|_| Reason::Local("IKE key derivation"))?;
        let new = sa.successor(ctx, Role::Initiator, spi_i, spi_r, keys, selected, m.window);
        Ok((new, nr))
    }

    /// Our new SA exists: unless the peer's crossed rekey wins (§2.8.2),
    /// it inherits everything and the old SA's last request is its Delete
    /// (§2.8).
    fn adopt(mut self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, mut new: IkeSa, nr: &[u8]) -> Outcome {
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
                sa.yield_to_peer_rekey(ctx, peer_sa);
                return Outcome::Done;
            }
            tracing::info!(ike_sa = %sa.id, "IKE_SA rekey collision won: the peer deletes its new SA");
        }
        sa.hand_over(ctx, &mut new);
        ctx.actions.push(Action::Insert(Box::new(new)));
        Outcome::Then(Box::new(Task::DeleteIke))
    }

    /// The rekey did not happen: adopt the peer's crossed rekey if there
    /// is one, else retry later.
    fn failed(self, sa: &mut IkeSa, ctx: &mut Ctx<'_>, reason: Reason) -> Outcome {
        tracing::info!(ike_sa = %sa.id, ?reason, "IKE_SA rekey failed");
        self.release(ctx);
        if let Some((peer_sa, _)) = sa.peer_rekey.take() {
            sa.yield_to_peer_rekey(ctx, peer_sa);
        } else if !sa.superseded {
            // §2.25: after TEMPORARY_FAILURE, wait before retrying.
            sa.rekey_at = Some(retry_deadline(ctx));
        }
        Outcome::Done
    }
}

// ---------------------------------------------------------------------------
// Responder

/// What the responder answers a rekey with.
struct RekeyResponse {
    selected: Selected,
    /// Our SPI of the new SA.
    spi_r: u64,
    nr: Vec<u8>,
    group: KeGroup,
    public: Vec<u8>,
}

/// The responder's choice for a rekey request.
struct RekeyChoice<'a> {
    selected: Selected,
    /// The initiator's SPI of the new SA.
    spi_i: u64,
    group: KeGroup,
    /// The initiator's KE, of that group.
    kei: KeRepr<'a>,
}

impl IkeSa {
    /// A CREATE_CHILD_SA request whose SA payload proposes IKE: the peer
    /// rekeys this IKE SA.
    pub(crate) fn respond_rekey_ike(
        &mut self,
        ctx: &mut Ctx<'_>,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let ex = ExchangeType::CREATE_CHILD_SA;
        let r = match self.answer_rekey_ike(ctx, payloads) {
            Ok(r) => r,
            Err(refusal) => return self.refuse(ctx, ex, mid, refusal, from, to),
        };
        let answer = SaRepr {
            proposals: vec![r.selected.to_wire(Protocol::Ike, Spi::U64(r.spi_r))],
        };
        let w = window_notify(ctx.config);
        let mut out = vec![
            PayloadRepr::Sa(answer),
            PayloadRepr::Nonce(NonceRepr { data: &r.nr }),
            PayloadRepr::Ke(KeRepr {
                group: r.group.iana_id(),
                data: &r.public,
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

    /// Check the request, make the new SA and hand it what it inherits.
    fn answer_rekey_ike(
        &mut self,
        ctx: &mut Ctx<'_>,
        payloads: &[PayloadRepr<'_>],
    ) -> Result<RekeyResponse, Refusal> {
        let m = RekeyPayloads::collect(payloads);
        self.may_rekey_ike()?;
        let (Some(sa_p), Some(ni)) = (m.sa, m.nonce) else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        let choice = self.choose_ike_rekey(sa_p, m.ke)?;
        let ke::KeAnswer { public, shared: g_ir, .. } = ke::answer(ctx.rng, choice.group, Some(choice.kei))?;
        let mut nr = vec![0u8; ctx.config.nonce_len];
        ctx.rng.fill_public(&mut nr);
        let Some(old) = self.keys.as_ref() else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN.into());
        };
        let spi_r = ctx.new_ike_spi();
        let keys = match IkeKeys::derive_rekey(
            old.prf,
            old.sk_d(),
            &choice.selected,
            ni,
            &nr,
            g_ir.as_slice(),
            choice.spi_i,
            spi_r,
        ) {
            Ok(k) => k,
            Err(_) => {
                ctx.release_ike_spi(spi_r);
                return Err(NotifyType::NO_PROPOSAL_CHOSEN.into());
            }
        };
        let new = self.successor(
            ctx,
            Role::Responder,
            choice.spi_i,
            spi_r,
            keys,
            choice.selected,
            m.window,
        );
        self.adopt_peer_rekey(ctx, new, ni, &nr);
        Ok(RekeyResponse {
            selected: choice.selected,
            spi_r,
            nr,
            group: choice.group,
            public,
        })
    }

    /// §2.25.2: "If a peer receives a request to rekey an IKE SA that it is
    /// currently trying to close, it SHOULD reply with TEMPORARY_FAILURE";
    /// §2.25.1: "If a peer receives a request to rekey the IKE SA, and it
    /// is currently creating, rekeying, or closing a Child SA of that IKE
    /// SA, it SHOULD reply with TEMPORARY_FAILURE." An SA we rekeyed
    /// already counts as closing (§2.8.2).
    fn may_rekey_ike(&self) -> Result<(), Refusal> {
        let closing = self.superseded
            || self
                .pending
                .iter()
                .any(|p| matches!(p.task, Task::DeleteIke));
        if closing || self.child_exchange_pending() {
            tracing::info!(ike_sa = %self.id, closing, "IKE_SA rekey refused: TEMPORARY_FAILURE");
            return Err(NotifyType::TEMPORARY_FAILURE.into());
        }
        Ok(())
    }

    /// One of our IKE proposals, with a new 8-octet SPIi and a KE of the
    /// group it needs. Our IKE proposals always carry a group, so a
    /// proposal with NONE never matches: "a responder MUST NOT accept such
    /// a proposal" (§2.18).
    fn choose_ike_rekey<'a>(
        &self,
        sa_p: &SaRepr,
        kei: Option<KeRepr<'a>>,
    ) -> Result<RekeyChoice<'a>, Refusal> {
        let ke_group = kei.and_then(|k| KeGroup::from_iana(k.group));
        let Some(selected) =
            Proposal::select(&Proposal::without_additional(&self.conn.proposals), &sa_p.proposals, false, ke_group)
        else {
            let configured = crate::diag::configured(&self.conn.proposals, true);
            let m = crate::diag::ProposalMismatch { received: &sa_p.proposals, configured: &configured };
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey: no proposal chosen: {m}");
            return Err(NotifyType::NO_PROPOSAL_CHOSEN.into());
        };
        let Spi::U64(spi_i) = selected.spi else {
            return Err(NotifyType::INVALID_SYNTAX.into());
        };
        let Some(group) = selected.ke else {
            return Err(NotifyType::NO_PROPOSAL_CHOSEN.into());
        };
        let Some(kei) = kei.filter(|k| k.group == group.iana_id()) else {
            return Err(Refusal::InvalidKe(group));
        };
        if spi_i == 0 {
            return Err(NotifyType::INVALID_SYNTAX.into());
        }
        Ok(RekeyChoice {
            selected,
            spi_i,
            group,
            kei,
        })
    }

    /// The peer's new SA exists. If our own rekey of this SA is under way
    /// (§2.8.2), it is held apart until ours ends and the nonces decide;
    /// otherwise it inherits now. The endpoint holds it from the end of
    /// this step.
    fn adopt_peer_rekey(&mut self, ctx: &mut Ctx<'_>, mut new: IkeSa, ni: &[u8], nr: &[u8]) {
        let crossed = self
            .pending
            .iter()
            .any(|p| matches!(p.task, Task::RekeyIke(_)));
        if crossed {
            tracing::info!(ike_sa = %self.id, "IKE_SA rekey collision: holding the peer's new SA");
            self.peer_rekey = Some((new.id.0, lowest(ni, nr).into()));
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
    }
}
