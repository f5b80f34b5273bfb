//! Requests from the peer on an existing IKE SA: the message-ID window and
//! the response cache (§2.1, §2.3) in front of the responder side of
//! IKE_AUTH, CREATE_CHILD_SA and INFORMATIONAL (RFC 7296 §1.2–§1.4; the
//! exchanges themselves are in `crate::exchange`).
//!
//! Order of checks, cheapest and safest first: message ID (a repeat gets
//! the cached response and nothing else; anything outside the window is
//! dropped and counted), then the ICV (no answer to anything that does not verify:
//! §3.10.1 allows INVALID_SYNTAX only "if the Message ID and cryptographic
//! checksum were valid", and §2.21 warns against answering unprotected
//! messages), then
//! parsing and the payload table (an authenticated but malformed request
//! gets INVALID_SYNTAX or UNSUPPORTED_CRITICAL_PAYLOAD), then the exchange.

use super::{IkeSa, State};
use crate::ctx::Ctx;
use crate::event::{Event, Transmit};
use crate::lifetime::MAX_WINDOW;
use crate::rules;
use core::net::SocketAddr;
use pki_types::UnixTime;
use esparto_crypto::ike::KeGroup;
use esparto_wire::espinudp::NON_ESP_MARKER;
use esparto_wire::ike::{
    Error as WireError, ExchangeType, Message, NotifyRepr, NotifyType, PayloadRepr, ProtocolId, Spi,
};

/// Why a datagram for an existing SA was not processed (for counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dropped {
    /// ICV did not verify.
    Integrity,
    /// Not a request in our window / not a response we wait for / wrong state.
    OutOfWindow,
    /// Unauthenticated and malformed.
    Malformed,
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestDrop {
    /// Message ID outside the window.
    OutOfWindow,
    /// Integrity check failed.
    Integrity,
    /// Not valid in this state and not authenticated.
    State,
}

/// A notify payload without SPI.
pub(crate) fn notify(kind: NotifyType, data: &[u8]) -> PayloadRepr<'_> {
    PayloadRepr::Notify(NotifyRepr::new(kind, data))
}

/// The error notify a request is refused with (§3.10.1): what the checks
/// of a request return, step by step, for [`IkeSa::refuse`] to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A notify without data.
    Error(NotifyType),
    /// INVALID_KE_PAYLOAD naming the group we want (§1.2, §1.3).
    InvalidKe(KeGroup),
    /// CHILD_SA_NOT_FOUND for the SPI a REKEY_SA named (§2.25).
    ChildSaNotFound(u32),
}

impl From<NotifyType> for Refusal {
    fn from(kind: NotifyType) -> Self {
        Refusal::Error(kind)
    }
}

impl Refusal {
    /// The notify that says it; `group` holds INVALID_KE_PAYLOAD's data.
    pub(crate) fn payload<'a>(self, group: &'a mut [u8; 2]) -> PayloadRepr<'a> {
        match self {
            Refusal::Error(kind) => notify(kind, &[]),
            Refusal::InvalidKe(g) => {
                *group = g.iana_id().to_be_bytes();
                notify(NotifyType::INVALID_KE_PAYLOAD, &group[..])
            }
            // §2.25: "The SA that the initiator attempted to rekey is
            // indicated by the SPI field in the Notify payload, which is
            // copied from the SPI field in the REKEY_SA notification."
            Refusal::ChildSaNotFound(spi) => PayloadRepr::Notify(NotifyRepr {
                protocol: ProtocolId::ESP,
                spi: Spi::U32(spi),
                kind: NotifyType::CHILD_SA_NOT_FOUND,
                data: &[],
            }),
        }
    }
}

impl IkeSa {
    /// Entry point for every datagram with this SA's SPIs; `wall_clock` is
    /// the calendar time it arrived at (for certificates).
    pub(crate) fn handle(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        msg: &Message<'_>,
        (from, to): (SocketAddr, SocketAddr),
        wall_clock: UnixTime,
    ) -> Result<(), Dropped> {
        if msg.header.response {
            crate::exchange::on_response(self, ctx, data, msg, (from, to), wall_clock).map_err(|why| {
                tracing::debug!(ike_sa = %self.id, ?why, "response ignored");
                match why {
                    crate::exchange::Ignored::Integrity => Dropped::Integrity,
                    crate::exchange::Ignored::Unexpected => Dropped::OutOfWindow,
                    crate::exchange::Ignored::Malformed => Dropped::Malformed,
                }
            })
        } else {
            let r = self.handle_request(ctx, data, msg, (from, to), wall_clock);
            // Anything the request queued (deletes of redundant SAs,
            // per-resource Child SAs after IKE_AUTH) goes out now.
            if self.state != State::Dead {
                self.send_next(ctx);
            }
            r.map_err(|why| {
                tracing::debug!(ike_sa = %self.id, ?why, "request dropped");
                match why {
                    RequestDrop::Integrity => Dropped::Integrity,
                    RequestDrop::OutOfWindow | RequestDrop::State => Dropped::OutOfWindow,
                }
            })
        }
    }

    pub(crate) fn transmit_to(
        &self,
        ctx: &mut Ctx<'_>,
        local: SocketAddr,
        remote: SocketAddr,
        packet: &[u8],
    ) {
        // A packet is one message, or a fragmented one's fragments.
        for m in esparto_wire::ike::messages(packet) {
            let mut data = Vec::with_capacity(m.len() + NON_ESP_MARKER.len());
            if local.port() == ctx.config.natt_port {
                // RFC 3948 §2.2: IKE on the NAT-T port starts with four zero octets.
                data.extend_from_slice(&NON_ESP_MARKER);
            }
            data.extend_from_slice(m);
            ctx.transmits.push_back(Transmit {
                local,
                remote,
                data,
            });
        }
    }

    /// Is `mid` a request we have not answered, within our window (§2.3)?
    /// "An IKE endpoint MUST be prepared to accept and process a request
    /// while it has a request outstanding", and with a window above one,
    /// requests "may pass one another over the network".
    fn in_window(&self, mid: u32) -> bool {
        let w = self.window.clamp(1, MAX_WINDOW);
        let Some(off) = mid.checked_sub(self.expected_mid) else {
            return false;
        };
        off < w && (off == 0 || self.answered & (1u64 << (off - 1)) == 0)
    }

    /// Request `mid` is answered: slide the window over every request
    /// answered in a row.
    fn mark_answered(&mut self, mid: u32) {
        match mid.checked_sub(self.expected_mid) {
            Some(0) => loop {
                self.expected_mid = self.expected_mid.wrapping_add(1);
                let next_done = self.answered & 1 == 1;
                self.answered >>= 1;
                if !next_done {
                    break;
                }
            },
            Some(off) if off <= 64 => self.answered |= 1u64 << (off - 1),
            _ => {}
        }
    }

    /// Seal a response, cache it for retransmissions, send it where the
    /// request came from (§2.11), and move the window.
    pub(crate) fn respond(
        &mut self,
        ctx: &mut Ctx<'_>,
        exchange: ExchangeType,
        mid: u32,
        payloads: &[PayloadRepr<'_>],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        match self.encode(exchange, true, mid, payloads) {
            Ok(packet) => {
                self.transmit_to(ctx, to, from, &packet);
                // §2.3: "An IKE endpoint MUST keep a copy of [...] the
                // number of previous responses equal to its declared window
                // size": drop the oldest beyond that.
                let keep = self.window.clamp(1, MAX_WINDOW) as usize;
                while self.responses.len() >= keep {
                    let oldest = self
                        .responses
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (m, _))| *m)
                        .map(|(i, _)| i);
                    if let Some(i) = oldest {
                        self.responses.remove(i);
                    }
                }
                if self.responses.is_empty() {
                    // One slot, not VecDeque's four: most SAs keep only the
                    // IKE_AUTH answer for a long time.
                    self.responses.reserve_exact(1);
                }
                self.responses.push_back((mid, packet));
            }
            Err(reason) => tracing::warn!(ike_sa = %self.id, ?reason, "cannot build response"),
        }
        self.mark_answered(mid);
    }

    /// Answer request `mid` with the notify that refuses it.
    pub(crate) fn refuse(
        &mut self,
        ctx: &mut Ctx<'_>,
        exchange: ExchangeType,
        mid: u32,
        refusal: Refusal,
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let mut group = [0; 2];
        let n = refusal.payload(&mut group);
        self.respond(ctx, exchange, mid, &[n], from, to);
    }

    /// A repeated IKE_SA_INIT request on a half-open SA: answer from the cache.
    pub(crate) fn retransmit_init_response(
        &self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        from: SocketAddr,
        to: SocketAddr,
    ) {
        let Some(hs) = self.handshake.as_deref() else {
            return;
        };
        if data == hs.init_request.as_slice() {
            if let Some((0, p)) = self.responses.front() {
                self.transmit_to(ctx, to, from, p);
            }
        }
    }

    fn handle_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        data: &[u8],
        msg: &Message<'_>,
        (from, to): (SocketAddr, SocketAddr),
        wall_clock: UnixTime,
    ) -> Result<(), RequestDrop> {
        let h = msg.header;
        if h.message_id == u32::MAX {
            // §2.2: IDs never wrap; the peer should have rekeyed.
            return Err(RequestDrop::OutOfWindow);
        }
        // §2.1: a retransmitted request gets the same response again; a
        // fragmented one once, on its first fragment (RFC 7383 §2.6.1).
        if let Some((_, p)) = self.responses.iter().find(|(m, _)| *m == h.message_id) {
            if msg.sk.and_then(|s| s.fragment).is_none_or(|f| f.number == 1) {
                self.transmit_to(ctx, to, from, p);
            }
            return Ok(());
        }
        if !self.in_window(h.message_id) {
            return Err(RequestDrop::OutOfWindow);
        }
        if !matches!(self.state, State::Auth | State::Established)
            || h.exchange == ExchangeType::IKE_SA_INIT
        {
            return Err(RequestDrop::State);
        }
        let Some(opened) = self.open(ctx, data, msg).map_err(|_| RequestDrop::Integrity)? else {
            // A fragment kept: the request is not whole yet.
            return Ok(());
        };
        // Authenticated by the IKE SA keys from here on.
        self.last_heard = ctx.now;
        self.track_address(ctx, from, to);
        let payloads = match opened.payloads() {
            Ok(p) => p,
            Err(WireError::UnsupportedCriticalPayload(t)) => {
                let d = [t];
                self.respond(
                    ctx,
                    h.exchange,
                    h.message_id,
                    &[notify(NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, &d)],
                    from,
                    to,
                );
                return Ok(());
            }
            Err(e) => {
                tracing::info!(ike_sa = %self.id, error = %e, "malformed request");
                self.respond(
                    ctx,
                    h.exchange,
                    h.message_id,
                    &[notify(NotifyType::INVALID_SYNTAX, &[])],
                    from,
                    to,
                );
                return Ok(());
            }
        };
        if let Err(v) = rules::check(h.exchange, false, &msg.payloads, true, &payloads) {
            tracing::info!(ike_sa = %self.id, violation = ?v, "request breaks the payload rules");
            self.respond(
                ctx,
                h.exchange,
                h.message_id,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            );
            return Ok(());
        }
        match (h.exchange, self.state) {
            (ExchangeType::IKE_INTERMEDIATE, State::Auth) if !self.is_initiator() => {
                self.respond_intermediate(ctx, &h, &payloads, from, to)
            }
            (ExchangeType::IKE_AUTH, State::Auth) if !self.is_initiator() => {
                self.respond_ike_auth(ctx, h.message_id, &payloads, (from, to), wall_clock)
            }
            (ExchangeType::CREATE_CHILD_SA, State::Established) => {
                self.respond_create_child(ctx, h.message_id, &payloads, from, to)
            }
            (ExchangeType::INFORMATIONAL, _) => {
                self.respond_informational(ctx, h.message_id, &payloads, from, to)
            }
            _ => self.respond(
                ctx,
                h.exchange,
                h.message_id,
                &[notify(NotifyType::INVALID_SYNTAX, &[])],
                from,
                to,
            ),
        }
        Ok(())
    }

    /// §2.23: with a NAT in front of the peer, follow its address as seen
    /// in authenticated requests (the mapping may change). With MOBIKE
    /// only a new port of the same address (a NAT rebinding the peer
    /// cannot see): a new address is the initiator's to announce
    /// (UPDATE_SA_ADDRESSES, RFC 4555 §3.8), and it is checked first.
    fn track_address(&mut self, ctx: &mut Ctx<'_>, from: SocketAddr, to: SocketAddr) {
        if (from, to) == (self.remote, self.local) || (self.mobike && (from.ip(), to.ip()) != (self.remote.ip(), self.local.ip())) {
            return;
        }
        let floated = to.port() == ctx.config.natt_port && self.local.port() != to.port();
        if !(self.nat.any() || floated) {
            return;
        }
        self.remote = from;
        self.local = to;
        if self.state == State::Established {
            tracing::info!(ike_sa = %self.id, remote = %from, "peer address changed");
            ctx.events.push_back(Event::PeerAddressChanged {
                ike_sa: self.id,
                local: to,
                remote: from,
            });
        }
    }
}
