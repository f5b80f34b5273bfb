//! Recovering from a peer that lost its state, and leaving without
//! leaving the peer with dead SAs.
//!
//! A peer that restarts forgets its IKE SAs and Child SAs; we keep ours
//! and send into the void until DPD gives up (minutes). RFC 7296 §1.5 and
//! §2.21.4 give the restarted side two ways to say so, both without
//! cryptographic protection (it has no keys left):
//!
//! ```text
//!   we (kept our SAs)                            peer (restarted, knows nothing)
//!   ESP, SPI x            ─────────────────────▶ unknown SPI: a configured peer's
//!                                                 address and no IKE SA with it
//!                         ◀───────────────────── INFORMATIONAL, N(INVALID_SPI, x)
//!   a hint only: find the IKE SA
//!   whose Child SA sends on x,
//!   check liveness now
//!   INFORMATIONAL (SK)    ─────────────────────▶ unknown IKE SPI, a request
//!                         ◀───────────────────── same SPIs and message ID,
//!                                                 response, N(INVALID_IKE_SPI)
//!   the answer to our own request:
//!   the IKE SA is dead (as after DPD)
//!   dpd_action restart / close_action start:
//!   initiate again after REINITIATE_DELAY ─────▶ (INITIAL_CONTACT)
//! ```
//!
//! Trust. §2.21.4 says a peer receiving such an unprotected notify "MUST
//! NOT change the state of any existing SAs" and "should initiate a
//! liveness check", rate-limited. We follow it for the INVALID_SPI hint:
//! it only makes us ask, over the IKE SA, whether the peer is there. We
//! go further for INVALID_IKE_SPI, and only for one case: an answer with
//! the SPIs and message ID of a request we have outstanding ends the IKE
//! SA at once. Forging that takes the 64-bit SPIs, which only someone on
//! the path sees; and someone on the path can kill the SA anyway by
//! dropping its packets until DPD gives up. An INVALID_IKE_SPI that
//! matches no outstanding request is ignored and counted. Everything we
//! send in answer to an unprotected message is rate-limited globally and
//! per source ([`crate::ratelimit`], limits in [`crate::lifetime`]), and
//! a response is never answered (§2.21.4: "If the message is marked as a
//! response, the node [...] MUST NOT respond").
//!
//! Re-initiation. When an IKE SA ends in a way the connection's
//! `dpd_action` / `close_action` turn into [`AfterDeath::Initiate`]
//! (`lifetime::after_death`), the endpoint initiates the connection again
//! with the children the SA carried: after [`REINITIATE_DELAY`], doubling
//! per attempt up to [`REINITIATE_MAX_DELAY`], minus a tenth at random. An
//! IKE SA that stays up for [`REINITIATE_STABLE`] resets the count. A due
//! re-initiation finds the connection up already (the peer came to us, or
//! the operator did) and does nothing; `terminate` and `shutdown` cancel
//! it.
//!
//! Shutdown. [`Endpoint::shutdown`] deletes every established IKE SA with
//! an INFORMATIONAL Delete (§1.4.1: its Child SAs go with it), drops the
//! others silently, and from then on refuses new IKE SAs either way; the
//! driver waits, bounded, until [`Endpoint::ike_sa_count`] is zero.
//!
//! [`AfterDeath::Initiate`]: crate::lifetime::AfterDeath::Initiate
//! [`REINITIATE_DELAY`]: crate::lifetime::REINITIATE_DELAY
//! [`REINITIATE_MAX_DELAY`]: crate::lifetime::REINITIATE_MAX_DELAY

use super::Endpoint;
use crate::ctx::Ctx;
use crate::event::Transmit;
use crate::lifetime::{
    Recover, HINT_CHECKS_PER_PEER, HINT_CHECKS_PER_SEC, INVALID_IKE_SPI_PER_SEC, INVALID_IKE_SPI_PER_SOURCE,
    INVALID_SPI_HINTS_PER_PEER, INVALID_SPI_HINTS_PER_SEC, REINITIATE_STABLE, random_up_to,
    reinitiate_delay,
};
use crate::ratelimit::RateLimiter;
use crate::sa::State;
use core::net::SocketAddr;
use esparto_wire::espinudp::NON_ESP_MARKER;
use esparto_wire::ike::{
    ExchangeType, HEADER_LEN, HeaderRepr, Message, NotifyRepr, NotifyType, PayloadRepr, PayloadType, Spi,
    emit_message,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Room for an unprotected notify message: header, one notify (8 octets
/// before its data) with a four-octet SPI as data, the NAT-T marker.
const NOTIFY_MESSAGE_CAPACITY: usize = HEADER_LEN + 8 + 4 + NON_ESP_MARKER.len();

/// A connection's re-initiation state.
#[derive(Debug)]
struct Revival {
    /// Re-initiations since the last stable IKE SA.
    attempts: u32,
    /// When the next one is due, if one is.
    due: Option<Instant>,
    /// When an IKE SA of the connection was last established.
    up_since: Option<Instant>,
    /// The child configurations to bring back, the first in IKE_AUTH.
    children: Vec<Arc<str>>,
}

/// The endpoint's recovery state.
#[derive(Debug)]
pub(super) struct Recovery {
    invalid_ike_spi: RateLimiter,
    hints_sent: RateLimiter,
    hints_heard: RateLimiter,
    revivals: HashMap<Arc<str>, Revival>,
    /// Due re-initiations, lazily invalidated like the SA timers: an entry
    /// counts only while its connection's `due` equals it.
    timers: BinaryHeap<Reverse<(Instant, Arc<str>)>>,
    /// `shutdown` was called: no new IKE SAs either way.
    pub(super) closing: bool,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            invalid_ike_spi: RateLimiter::new(INVALID_IKE_SPI_PER_SEC, INVALID_IKE_SPI_PER_SOURCE),
            hints_sent: RateLimiter::new(INVALID_SPI_HINTS_PER_SEC, INVALID_SPI_HINTS_PER_PEER),
            hints_heard: RateLimiter::new(HINT_CHECKS_PER_SEC, HINT_CHECKS_PER_PEER),
            revivals: HashMap::new(),
            timers: BinaryHeap::new(),
            closing: false,
        }
    }
}

impl Recovery {
    /// The next due re-initiation, dropping stale heap entries.
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((t, name))) = self.timers.peek() {
            if self.revivals.get(name).is_some_and(|r| r.due == Some(*t)) {
                return Some(*t);
            }
            self.timers.pop();
        }
        None
    }
}

/// The SPI an INVALID_SPI notify names: its notification data (§1.5: "The
/// Notification Data contains the SPI of the invalid packet"), or, as some
/// senders put it, its SPI field.
fn hinted_spi(n: &NotifyRepr<'_>) -> Option<u32> {
    if let Ok(b) = <[u8; 4]>::try_from(n.data) {
        return Some(u32::from_be_bytes(b));
    }
    match n.spi {
        Spi::U32(s) => Some(s),
        _ => None,
    }
}

impl Endpoint {
    /// A message for an IKE SA we do not hold (none with our SPI, or not
    /// with the peer's). Requests that are encrypted get INVALID_IKE_SPI
    /// (§2.21.4); an unprotected INFORMATIONAL may carry an INVALID_SPI
    /// hint (§1.5); nothing else is answered.
    pub(super) fn unknown_ike_sa(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        msg: &Message<'_>,
    ) {
        self.stats.unknown_spi += 1;
        let h = msg.header;
        if h.response {
            // §2.21.4: "If the message is marked as a response, the node
            // can audit the suspicious event but MUST NOT respond."
            return;
        }
        if msg.sk.is_none() {
            if h.exchange == ExchangeType::INFORMATIONAL {
                self.invalid_spi_hint(now, remote, msg);
            }
            return;
        }
        if !self.recovery.invalid_ike_spi.allow(now, remote.ip()) {
            self.stats.rate_limited += 1;
            return;
        }
        // §2.21.4: "the response MUST be sent to the IP address and port
        // from where it came with the same IKE SPIs and the Message ID
        // copied. The response MUST NOT be cryptographically protected and
        // MUST contain an INVALID_IKE_SPI Notify payload." §1.5: "the
        // Message ID and Exchange Type are copied from the request. The
        // Response flag is set to 1".
        let reply = HeaderRepr {
            spi_i: h.spi_i,
            spi_r: h.spi_r,
            next_payload: PayloadType::NONE,
            exchange: h.exchange,
            initiator: !h.initiator,
            response: true,
            message_id: h.message_id,
            length: 0,
        };
        let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_IKE_SPI, &[]));
        if self.send_unprotected(local, remote, &reply, &[n]) {
            self.stats.invalid_ike_spi_sent += 1;
            tracing::debug!(%remote, spi_i = format_args!("{:016x}", h.spi_i),
                spi_r = format_args!("{:016x}", h.spi_r), mid = h.message_id,
                "request for an unknown IKE_SA: answered INVALID_IKE_SPI");
        }
    }

    /// Emit an unprotected message and queue it (with the non-ESP marker
    /// on the NAT-T port).
    fn send_unprotected(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        h: &HeaderRepr,
        payloads: &[PayloadRepr<'_>],
    ) -> bool {
        let mut data = Vec::with_capacity(NOTIFY_MESSAGE_CAPACITY);
        if emit_message(h, payloads, &mut data).is_err() {
            return false;
        }
        if local.port() == self.config.natt_port {
            // RFC 3948 §2.2: IKE on the NAT-T port starts with four zero octets.
            data.splice(0..0, NON_ESP_MARKER);
        }
        self.transmits.push_back(Transmit {
            local,
            remote,
            data,
        });
        true
    }

    /// An unprotected INFORMATIONAL with INVALID_SPI: the peer at `remote`
    /// says it received ESP with an SPI it does not know (§1.5). It is
    /// unauthenticated, so it only makes us check, at once, that the peer
    /// still holds the IKE SA of the Child SA that sends on that SPI (the
    /// liveness check fails fast if it does not: INVALID_IKE_SPI).
    fn invalid_spi_hint(&mut self, now: Instant, remote: SocketAddr, msg: &Message<'_>) {
        let Some(spi) = msg.payloads.iter().find_map(|p| match p {
            PayloadRepr::Notify(n) if n.kind == NotifyType::INVALID_SPI => hinted_spi(n),
            _ => None,
        }) else {
            return;
        };
        if !self.recovery.hints_heard.allow(now, remote.ip()) {
            self.stats.rate_limited += 1;
            return;
        }
        // Only SAs of connections that name this peer's address; a
        // wildcard connection's SAs are not searched (that could be every
        // SA of a hub).
        let ip = remote.ip();
        let sas = &self.sas;
        let found = self
            .connections
            .with_remote_addr(ip)
            .flat_map(|c| self.sa_index.of_conn(c))
            .find(|id| {
                sas.get(id).is_some_and(|sa| {
                    sa.state == State::Established
                        && sa.remote.ip() == ip
                        && sa.children.iter().any(|c| c.outbound_spi == spi)
                })
            });
        let Some(id) = found else {
            return;
        };
        self.stats.invalid_spi_hints_received += 1;
        let mut ctx = ctx!(self, now);
        if let Some(sa) = self.sas.get_mut(&id) {
            tracing::info!(ike_sa = %sa.id, peer = %remote, spi = format_args!("{spi:08x}"),
                "peer reports our ESP SPI unknown (INVALID_SPI, unauthenticated): checking liveness now");
            sa.check_liveness_now(&mut ctx);
        }
        self.finish(now, id);
    }

    /// ESP arrived from `remote` with an SPI (`spi`) we hold no SA for
    /// (the data plane reports it, rate-limited). If `remote` is a
    /// configured peer's address and we hold no IKE SA with it, we
    /// probably restarted and the peer did not notice: tell it, without
    /// protection (§1.5: "If no suitable IKE SA exists, the node MAY send
    /// an informational message without cryptographic protection to the
    /// source IP address, using the source UDP port as the destination
    /// port"), so that it checks its IKE SA at once instead of waiting
    /// for DPD. With an IKE SA in place the stale SPI is left alone: the
    /// peer is talking to us and will sort its SAs out. `local` is our
    /// NAT-T socket's address.
    pub fn handle_unknown_esp(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        spi: u32,
    ) {
        if self.recovery.closing {
            return;
        }
        let ip = remote.ip();
        let mut configured = false;
        let mut recover = Vec::new();
        for c in self.connections.with_remote_addr(ip) {
            configured = true;
            let up = self.sa_index.of_conn(c).any(|id| {
                self.sas
                    .get(&id)
                    .is_some_and(|sa| sa.state == State::Established && sa.remote.ip() == ip)
            });
            if up {
                return;
            }
            if c.recover == Recover::Initiate {
                recover.push((c.name.clone(), c.children.iter().map(|ch| ch.name.clone()).collect::<Vec<_>>()));
            }
        }
        if !configured {
            return;
        }
        // `recover = initiate`: the peer holds SAs we lost and may never
        // act on the hint below; we bring the connection back ourselves,
        // with INITIAL_CONTACT so that it drops the old IKE SA. The
        // re-initiation's back-off rate-limits it (one at a time per
        // connection, doubling while attempts fail).
        for (name, children) in recover {
            if self.recovery.revivals.get(&name).is_some_and(|r| r.due.is_some()) {
                continue;
            }
            tracing::info!(connection = %name, peer = %remote, spi = format_args!("{spi:08x}"),
                "ESP for an unknown SPI from the peer of a connection without an IKE SA: initiating it (recover = initiate)");
            self.stats.recoveries += 1;
            self.schedule_reinitiate(now, name, children);
        }
        if !self.recovery.hints_sent.allow(now, ip) {
            self.stats.rate_limited += 1;
            return;
        }
        // §1.5: "there are no IKE SPI values that would be meaningful to
        // the recipient of such a notification; using zero values or
        // random values are both acceptable [...] The Initiator flag is
        // set to 1, the Response flag is set to 0".
        let mut b = [0u8; 8];
        self.rng.fill_public(&mut b);
        let h = HeaderRepr {
            spi_i: u64::from_be_bytes(b) | 1,
            spi_r: 0,
            next_payload: PayloadType::NONE,
            exchange: ExchangeType::INFORMATIONAL,
            initiator: true,
            response: false,
            message_id: 0,
            length: 0,
        };
        let data = spi.to_be_bytes();
        let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_SPI, &data));
        if self.send_unprotected(local, remote, &h, &[n]) {
            self.stats.invalid_spi_hints_sent += 1;
            tracing::info!(peer = %remote, spi = format_args!("{spi:08x}"),
                "ESP for an unknown SPI from a configured peer: sent INVALID_SPI");
        }
    }

    /// Schedule a re-initiation of `connection` (back-off in the module
    /// docs).
    pub(super) fn schedule_reinitiate(
        &mut self,
        now: Instant,
        connection: Arc<str>,
        children: Vec<Arc<str>>,
    ) {
        if self.recovery.closing {
            return;
        }
        let r = self
            .recovery
            .revivals
            .entry(connection.clone())
            .or_insert(Revival {
                attempts: 0,
                due: None,
                up_since: None,
                children: Vec::new(),
            });
        if r.up_since
            .is_some_and(|t| now.saturating_duration_since(t) >= REINITIATE_STABLE)
        {
            r.attempts = 0;
        }
        r.up_since = None;
        if !children.is_empty() {
            r.children = children;
        }
        if r.due.is_some() {
            // One is scheduled already (two SAs of the connection died).
            return;
        }
        let delay = reinitiate_delay(r.attempts);
        r.attempts = r.attempts.saturating_add(1);
        let attempt = r.attempts;
        let mut ctx = ctx!(self, now);
        let jitter = random_up_to(&mut ctx, delay / 10);
        let due = now + (delay - jitter);
        if let Some(r) = self.recovery.revivals.get_mut(&connection) {
            r.due = Some(due);
        }
        self.recovery
            .timers
            .push(Reverse((due, connection.clone())));
        tracing::info!(%connection, attempt, in_s = (due - now).as_secs_f64(),
            "initiating the connection again");
    }

    /// An IKE SA of `connection` is established: the back-off clock starts
    /// (see [`REINITIATE_STABLE`]) and a pending re-initiation has nothing
    /// left to do.
    pub(super) fn connection_up(&mut self, now: Instant, connection: &Arc<str>) {
        if let Some(r) = self.recovery.revivals.get_mut(connection) {
            r.up_since = Some(now);
            r.due = None;
        }
    }

    /// Forget a scheduled re-initiation of `connection` (the operator took
    /// it down); whether one was due.
    pub fn cancel_reinitiation(&mut self, connection: &str) -> bool {
        self.recovery
            .revivals
            .get_mut(connection)
            .and_then(|r| r.due.take())
            .is_some()
    }

    /// Run the re-initiations due at `now`.
    pub(super) fn reinitiate_due(&mut self, now: Instant) {
        while let Some(t) = self.recovery.next_due() {
            if t > now {
                break;
            }
            let Some(Reverse((_, name))) = self.recovery.timers.pop() else {
                break;
            };
            let Some(r) = self.recovery.revivals.get_mut(&name) else {
                continue;
            };
            r.due = None;
            let children = r.children.clone();
            let attempt = r.attempts;
            self.reinitiate(now, &name, &children, attempt);
        }
    }

    fn reinitiate(&mut self, now: Instant, name: &Arc<str>, children: &[Arc<str>], attempt: u32) {
        let Ok(conn) = self.find_conn(name) else {
            return;
        };
        let sas = &self.sas;
        let up = self.sa_index.of_conn(&conn).any(|id| {
            sas.get(&id).is_some_and(|sa| {
                !matches!(sa.state, State::Dead | State::Failed) && !sa.superseded
            })
        });
        if up {
            tracing::debug!(connection = %name, "re-initiation not needed: the connection is up");
            return;
        }
        let (first, rest) = match children.split_first() {
            Some((f, r)) => (Some(&**f), r),
            None => (None, &[][..]),
        };
        self.stats.reinitiations += 1;
        tracing::info!(connection = %name, attempt, "re-initiating the connection");
        match self.initiate_for(now, name, first, None) {
            Ok(_) => {
                for child in rest {
                    if let Err(e) = self.acquire(now, name, child, None) {
                        tracing::warn!(connection = %name, %child, error = %e, "re-initiating a child");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(connection = %name, error = %e, "re-initiation failed");
                self.schedule_reinitiate(now, name.clone(), children.to_vec());
            }
        }
    }

    /// Stop: delete every established IKE SA with an INFORMATIONAL Delete
    /// (§1.4.1; its Child SAs go with it), drop the others without a word
    /// (half-open ones have nothing the peer could delete), cancel
    /// re-initiations, and refuse new IKE SAs from now on (IKE_SA_INIT
    /// requests are dropped, `initiate` and `acquire` fail). The driver
    /// keeps feeding datagrams and timeouts until [`Endpoint::ike_sa_count`]
    /// is zero or its patience ends.
    pub fn shutdown(&mut self, now: Instant) {
        self.recovery.closing = true;
        self.recovery.revivals.clear();
        self.recovery.timers.clear();
        self.drop_parked();
        let ids: Vec<u64> = self.sas.keys().copied().collect();
        for id in ids {
            // An SA an earlier one took with it is gone: nothing to do.
            let _ = self.close(now, id);
        }
    }

    /// Whether [`Endpoint::shutdown`] was called.
    pub fn is_closing(&self) -> bool {
        self.recovery.closing
    }

    /// The connection's next re-initiation, if one is due (for tests).
    pub fn reinitiation_due(&self, connection: &str) -> Option<Instant> {
        self.recovery.revivals.get(connection)?.due
    }
}
