//! MOBIKE (RFC 4555): an IKE SA and its Child SAs move to new addresses
//! without being renegotiated.
//!
//! ```text
//! initiator (its address changed)               responder
//! INFORMATIONAL from the new address ─────────▶ (authenticated)
//!   N(UPDATE_SA_ADDRESSES), N(NAT_DETECTION_*),
//!   N(COOKIE2)
//!                                     ◀───────── N(NAT_DETECTION_*), N(COOKIE2)
//! IKE and Child SAs now                         return routability (§3.5):
//! from the new address                          INFORMATIONAL N(COOKIE2) to
//!                           ◀─────────────────── the new address
//! echoes N(COOKIE2) ────────────────────────────▶ matches: IKE and Child SAs
//!                                                 move; else the old ones stay
//! ```
//!
//! Only the original initiator decides to move (§3.4); Esparto moves when
//! the address an IKE SA uses leaves the host and the routing table gives
//! another one towards the peer (`Endpoint::local_address_gone`). The
//! responder takes the addresses of the UPDATE_SA_ADDRESSES request's IP
//! header, but only after a COOKIE2 exchange from them proves the peer
//! is there: an attacker on the path who rewrites the source of an
//! authenticated update gets no answer it could give, and after
//! [`CHECK_TRIES`] sends the old addresses are put back — nothing moved
//! (the IKE SA is not declared dead for it: the check's request, whose
//! message ID the peer must still see, goes on to the old address, and
//! its answer moves nothing). Both sides answer every
//! request's COOKIE2 with the same value (§3.5) and, when the request
//! carried NAT detection, with NAT detection of their own (§3.9), faked
//! as in IKE_SA_INIT when the connection forces encapsulation. The Child
//! SAs' new endpoint reaches the driver as `Event::PeerAddressChanged`.

use super::Outcome;
use crate::ctx::Ctx;
use crate::event::{Event, Reason};
use crate::nat::{fake_nat_hash, nat_hash};
use crate::sa::{IkeSa, State};
use core::net::SocketAddr;
use esparto_wire::ike::{ExchangeType, NotifyRepr, NotifyType, PayloadRepr};

/// Length of our COOKIE2 values (§4.2.6: 8 to 64 octets).
pub(crate) const COOKIE2_LEN: usize = 16;

/// Sends of a return routability check before the addresses go back:
/// the peer answered its own update a moment ago, so a check that goes
/// unanswered this often went to the wrong place.
pub(crate) const CHECK_TRIES: u32 = 3;

/// NAT detection notifies for a message from `local` to `remote` on `sa`
/// (§2.23 hashes, with the IKE SA's SPIs).
fn nat_detection(sa: &IkeSa, ctx: &mut Ctx<'_>, local: SocketAddr, remote: SocketAddr) -> [[u8; 20]; 2] {
    let src = if sa.conn.encap {
        fake_nat_hash(ctx.rng)
    } else {
        nat_hash(sa.spi_i, sa.spi_r, local)
    };
    [src, nat_hash(sa.spi_i, sa.spi_r, remote)]
}

/// The UPDATE_SA_ADDRESSES request (initiator), from `sa.local` as it is
/// now.
pub(super) fn build_update(sa: &mut IkeSa, ctx: &mut Ctx<'_>, mid: u32, cookie2: &[u8; COOKIE2_LEN]) -> Result<Vec<u8>, Reason> {
    let [src, dst] = nat_detection(sa, ctx, sa.local, sa.remote);
    let payloads = [
        PayloadRepr::Notify(NotifyRepr::new(NotifyType::UPDATE_SA_ADDRESSES, &[])),
        PayloadRepr::Notify(NotifyRepr::new(NotifyType::NAT_DETECTION_SOURCE_IP, &src)),
        PayloadRepr::Notify(NotifyRepr::new(NotifyType::NAT_DETECTION_DESTINATION_IP, &dst)),
        PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE2, cookie2)),
    ];
    sa.encode(ExchangeType::INFORMATIONAL, false, mid, &payloads)
}

/// The return routability check (responder): COOKIE2 alone.
pub(super) fn build_check(sa: &mut IkeSa, mid: u32, cookie2: &[u8; COOKIE2_LEN]) -> Result<Vec<u8>, Reason> {
    let payloads = [PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE2, cookie2))];
    sa.encode(ExchangeType::INFORMATIONAL, false, mid, &payloads)
}

/// The peer's answer to our update: the IKE SA is at the new address
/// (the peer checks it may take a moment more); the Child SAs follow.
pub(super) fn process_update(sa: &mut IkeSa, ctx: &mut Ctx<'_>, rx: &super::Received<'_>, cookie2: &[u8; COOKIE2_LEN]) -> Outcome {
    if let Some((kind, _)) = rx.error() {
        // UNACCEPTABLE_ADDRESSES or UNEXPECTED_NAT_DETECTED (§3.5): the
        // peer keeps the old addresses, which we no longer have.
        tracing::warn!(ike_sa = %sa.id, notify = %kind, "the peer refused our new address");
        return Outcome::Fail(Reason::LocalAddressGone);
    }
    if rx.notify(NotifyType::COOKIE2) != Some(&cookie2[..]) {
        tracing::warn!(ike_sa = %sa.id, "answer to UPDATE_SA_ADDRESSES without our COOKIE2: ignored");
        return Outcome::Done;
    }
    tracing::info!(ike_sa = %sa.id, local = %sa.local, remote = %sa.remote, "IKE_SA moved (MOBIKE)");
    ctx.stats.mobike_updates += 1;
    ctx.events.push_back(Event::PeerAddressChanged { ike_sa: sa.id, local: sa.local, remote: sa.remote });
    Outcome::Done
}

/// The answer to our return routability check.
pub(super) fn process_check(sa: &mut IkeSa, ctx: &mut Ctx<'_>, rx: &super::Received<'_>, cookie2: &[u8; COOKIE2_LEN]) -> Outcome {
    if rx.notify(NotifyType::COOKIE2) != Some(&cookie2[..]) {
        tracing::warn!(ike_sa = %sa.id, from = %rx.from, "return routability check answered without our COOKIE2: addresses kept");
        sa.check_failed(ctx);
        return Outcome::Done;
    }
    if sa.mobike_check.take().is_some() {
        tracing::info!(ike_sa = %sa.id, local = %sa.local, remote = %sa.remote, "the peer moved (MOBIKE)");
        ctx.stats.mobike_updates += 1;
        ctx.events.push_back(Event::PeerAddressChanged { ike_sa: sa.id, local: sa.local, remote: sa.remote });
    }
    Outcome::Done
}

impl IkeSa {
    /// Move to `local` (our address changed) and tell the peer: MOBIKE's
    /// UPDATE_SA_ADDRESSES. Whether it could: we initiated the IKE SA,
    /// the peer supports MOBIKE, and the SA is established.
    pub(crate) fn move_local(&mut self, ctx: &mut Ctx<'_>, local: core::net::IpAddr) -> bool {
        if !self.mobike || !self.is_initiator() || self.state != State::Established || self.superseded {
            return false;
        }
        self.local = SocketAddr::new(local, self.local.port());
        let mut cookie2 = [0u8; COOKIE2_LEN];
        ctx.rng.fill_public(&mut cookie2);
        // Whatever was in flight is resent from the new address too.
        self.start_task(ctx, super::Task::UpdateAddresses(cookie2));
        true
    }

    /// The peer's UPDATE_SA_ADDRESSES, arrived from `from` to `to`: the
    /// answer's extra payloads are the caller's ([`Self::mobike_answer`]);
    /// if the addresses differ, a return routability check to them starts,
    /// with them in use meanwhile.
    pub(crate) fn peer_update(&mut self, ctx: &mut Ctx<'_>, from: SocketAddr, to: SocketAddr) {
        if !self.mobike || self.is_initiator() || self.state != State::Established {
            tracing::info!(ike_sa = %self.id, "UPDATE_SA_ADDRESSES without MOBIKE, or to the initiator: ignored");
            return;
        }
        if (from, to) == (self.remote, self.local) {
            return;
        }
        tracing::info!(ike_sa = %self.id, old = %self.remote, new = %from, "peer asks to move (MOBIKE): checking the new address");
        if self.mobike_check.is_none() {
            self.mobike_check = Some((self.local, self.remote));
        }
        self.local = to;
        self.remote = from;
        let mut cookie2 = [0u8; COOKIE2_LEN];
        ctx.rng.fill_public(&mut cookie2);
        self.start_task(ctx, super::Task::CheckAddress(cookie2));
    }

    /// A return routability check failed: the addresses from before the
    /// update come back, and nothing else changed.
    pub(crate) fn check_failed(&mut self, ctx: &mut Ctx<'_>) {
        if let Some((local, remote)) = self.mobike_check.take() {
            tracing::warn!(ike_sa = %self.id, tried = %self.remote, kept = %remote,
                "return routability check failed (MOBIKE): the old addresses stay");
            ctx.stats.mobike_checks_failed += 1;
            self.local = local;
            self.remote = remote;
        }
    }

    /// COOKIE2 echoed and NAT detection for the answer to a request that
    /// carried them, arrived from `from` to `to` (§3.5, §3.9).
    pub(crate) fn mobike_answer(
        &self,
        ctx: &mut Ctx<'_>,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) -> (Option<Vec<u8>>, Option<[[u8; 20]; 2]>) {
        let find = |kind| {
            payloads.iter().find_map(|p| match p {
                PayloadRepr::Notify(n) if n.kind == kind => Some(n.data),
                _ => None,
            })
        };
        let cookie2 = find(NotifyType::COOKIE2).map(<[u8]>::to_vec);
        let nat = find(NotifyType::NAT_DETECTION_SOURCE_IP).map(|_| nat_detection(self, ctx, to, from));
        (cookie2, nat)
    }
}
