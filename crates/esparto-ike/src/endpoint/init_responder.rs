//! The responder side of IKE_SA_INIT (RFC 7296 §1.2), where an IKE SA is
//! born on this end, and the defence against floods of it (§2.6).
//!
//! Everything here runs on an unauthenticated datagram, so refusals keep
//! no state: NO_PROPOSAL_CHOSEN and INVALID_KE_PAYLOAD (naming the group
//! we want, §1.2) are answered statelessly with SPIr zero, an unknown
//! critical payload gets UNSUPPORTED_CRITICAL_PAYLOAD (§2.5), and a
//! malformed request is dropped. Only an acceptable request costs a key
//! exchange and a half-open IKE SA, which expires unless IKE_AUTH
//! completes within `half_open_timeout`. A retransmitted request finds
//! the half-open SA by `(peer, SPIi)` and gets the same response.
//!
//! Before that cost is paid, [`Endpoint::admit`] applies the
//! denial-of-service limits, cheapest first, in the order strongSwan's
//! receiver applies its equivalents:
//!
//! 1. a source address already holding `half_open_per_source` half-open
//!    SAs is dropped (strongSwan's `block_threshold`);
//! 2. with `max_half_open` half-open SAs in all, every request is dropped
//!    (`init_limit_half_open`);
//! 3. with `cookie_threshold` half-open SAs in all, or
//!    `cookie_threshold_per_source` from this address, a request must
//!    carry a COOKIE we made for its Ni, source address and SPIi
//!    ([`crate::cookie`]); otherwise it is answered with only a fresh
//!    COOKIE notify — `HDR(A,0), N(COOKIE)` in §2.6's diagram — and
//!    forgotten. §2.6: "When one party receives an IKE_SA_INIT request
//!    containing a cookie whose contents do not match the value expected,
//!    that party MUST ignore the cookie and process the message as if no
//!    cookie had been included; usually this means sending a response
//!    containing a new cookie." So a forged cookie, one replayed from
//!    another address, or one whose secret has expired earns a new cookie
//!    and never state; below the thresholds a cookie is simply ignored.
//!
//! The per-source cookie threshold sits below the per-source limit so a
//! blind attacker forging a legitimate peer's address, who cannot return
//! cookies, stalls at `cookie_threshold_per_source` half-open SAs and
//! never locks the peer out. An address that a connection names in its
//! `remote_addrs` gets `cookie_threshold_per_peer` and
//! `half_open_per_peer` instead, larger, so that a peer bringing up many
//! connections at once (a hub, a strongSwan initiator that does not pace)
//! is neither cookied nor dropped; the same ordering keeps a spoofer of
//! that address stalled below the peer's limit, and the global
//! `cookie_threshold` still bounds what all spoofers together hold. Counting half-open SAs per address is
//! [`HalfOpen`]'s job; drops and cookies are counted in [`super::Stats`].
//! The stateless path allocates only the response datagram.

use super::Endpoint;
use crate::config::EndpointConfig;
use crate::cookie::CookieJar;
use crate::ctx::Ctx;
use crate::diag::{self, ProposalMismatch};
use crate::event::{IkeSaId, Transmit};
use crate::exchange::ike_init::{self, InitChoice, InitPayloads, InitRefusal};
use crate::nat::NatState;
use crate::rules;
use crate::sa::{Handshake, IkeSa, Role, State};
use crate::spi::ike_spi;
use core::net::{IpAddr, SocketAddr};
use esparto_crypto::Rng;
use esparto_wire::espinudp::NON_ESP_MARKER;
use esparto_wire::ike::{
    ExchangeType, HEADER_LEN, Header, HeaderRepr, Message, NotifyRepr, NotifyType, PayloadRepr, PayloadType,
    emit_message,
};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Instant;

/// Initial capacity of a stateless reply: a header, one notify (8 octets
/// before its data) with up to 64 octets of data (§3.10.1's maximum), and
/// the NAT-T marker.
const STATELESS_REPLY_CAPACITY: usize = HEADER_LEN + 8 + 64 + NON_ESP_MARKER.len();

/// The responder's half-open IKE SAs (created by IKE_SA_INIT, not yet
/// authenticated), by `(peer, SPIi)` for retransmitted requests, and how
/// many each source address holds for the per-source limits.
#[derive(Debug, Default)]
pub(super) struct HalfOpen {
    by_init: HashMap<(SocketAddr, u64), u64>,
    per_ip: HashMap<IpAddr, usize>,
}

impl HalfOpen {
    /// The half-open SA (our SPI) a request from `peer` with SPIi is for.
    pub(super) fn get(&self, k: &(SocketAddr, u64)) -> Option<&u64> {
        self.by_init.get(k)
    }

    /// Record a new half-open SA; false (and nothing changed) if the key
    /// is taken.
    pub(super) fn insert(&mut self, k: (SocketAddr, u64), spi_r: u64) -> bool {
        match self.by_init.entry(k) {
            Entry::Occupied(_) => false,
            Entry::Vacant(v) => {
                v.insert(spi_r);
                *self.per_ip.entry(k.0.ip().to_canonical()).or_insert(0) += 1;
                true
            }
        }
    }

    /// The SA under `k` is established or gone.
    pub(super) fn remove(&mut self, k: &(SocketAddr, u64)) -> Option<u64> {
        let spi_r = self.by_init.remove(k)?;
        let ip = k.0.ip().to_canonical();
        if let Entry::Occupied(mut e) = self.per_ip.entry(ip) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        Some(spi_r)
    }

    /// Half-open SAs in all.
    pub(super) fn len(&self) -> usize {
        self.by_init.len()
    }

    /// Half-open SAs from `ip`.
    pub(super) fn count_from(&self, ip: IpAddr) -> usize {
        self.per_ip.get(&ip.to_canonical()).copied().unwrap_or(0)
    }

    /// Source addresses holding any.
    fn sources(&self) -> usize {
        self.per_ip.len()
    }
}

impl Endpoint {
    /// Half-open IKE SAs we hold as responder (not yet authenticated,
    /// failed authentications until their timer included).
    pub fn half_open_count(&self) -> usize {
        self.half_open.len()
    }

    /// Distinct source addresses with half-open IKE SAs.
    pub fn half_open_sources(&self) -> usize {
        self.half_open.sources()
    }

    /// The cookie secrets in `slot`, brought up to date at `now` (drawn on
    /// first use, so an endpoint that is never flooded never draws them).
    /// Takes the fields it needs, not `self`, so the caller can still
    /// count into `self.stats` while holding the jar.
    fn cookie_jar<'a>(
        slot: &'a mut Option<CookieJar>,
        rng: &mut dyn Rng,
        config: &EndpointConfig,
        now: Instant,
    ) -> &'a CookieJar {
        match slot {
            Some(jar) => {
                jar.rotate(now, rng);
                jar
            }
            None => slot.insert(CookieJar::new(
                rng,
                now,
                config.cookie_secret_lifetime,
                config.cookie_grace,
            )),
        }
    }

    /// The denial-of-service gate in front of the key exchange (module
    /// docs): true if the request may create a half-open SA; otherwise it
    /// has been dropped or answered with a COOKIE, and counted.
    fn admit(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        spi_i: u64,
        ni: &[u8],
        cookie: Option<&[u8]>,
    ) -> bool {
        let ip = remote.ip();
        let from_ip = self.half_open.count_from(ip);
        let total = self.half_open.len();
        // A configured peer's address has a budget of its own (module docs).
        let (cookie_at, block_at) = if self.connections.with_remote_addr(ip).next().is_some() {
            (self.config.cookie_threshold_per_peer, self.config.half_open_per_peer)
        } else {
            (self.config.cookie_threshold_per_source, self.config.half_open_per_source)
        };
        if from_ip >= block_at {
            self.stats.half_open_dropped_per_source += 1;
            return false;
        }
        if total >= self.config.max_half_open {
            self.stats.half_open_dropped_global += 1;
            return false;
        }
        // §2.6: "When a responder detects a large number of half-open IKE
        // SAs, it SHOULD reply to IKE_SA_INIT requests with a response
        // containing the COOKIE notification."
        if total < self.config.cookie_threshold && from_ip < cookie_at {
            return true;
        }
        let jar = Self::cookie_jar(&mut self.cookies, &mut *self.rng, &self.config, now);
        let verdict = cookie.map(|c| jar.verify(c, ni, ip, spi_i));
        match verdict {
            Some(Ok(())) => {
                self.stats.cookies_verified += 1;
                return true;
            }
            // Counted, never logged: this runs for every packet of a flood.
            Some(Err(_)) => self.stats.cookies_rejected += 1,
            None => {}
        }
        let fresh = jar.make(ni, ip, spi_i);
        self.stats.cookies_sent += 1;
        let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, fresh.as_bytes()));
        self.stateless_reply(local, remote, spi_i, &[n]);
        false
    }

    fn stateless_reply(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        spi_i: u64,
        payloads: &[PayloadRepr<'_>],
    ) {
        let h = HeaderRepr {
            spi_i,
            spi_r: 0,
            next_payload: PayloadType::NONE,
            exchange: ExchangeType::IKE_SA_INIT,
            initiator: false,
            response: true,
            message_id: 0,
            length: 0,
        };
        // One allocation for the datagram: the refusals and a COOKIE reply
        // (28 + 8 + 17 octets) fit in the initial capacity.
        let mut data = Vec::with_capacity(STATELESS_REPLY_CAPACITY);
        if emit_message(&h, payloads, &mut data).is_err() {
            return;
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
    }

    /// §2.5: an IKE_SA_INIT request with an unknown critical payload gets
    /// UNSUPPORTED_CRITICAL_PAYLOAD naming it.
    pub(super) fn refuse_critical(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        t: u8,
    ) {
        let Ok(view) = Header::new_checked(data) else {
            return;
        };
        let Ok(h) = HeaderRepr::parse(&view) else {
            return;
        };
        if h.exchange == ExchangeType::IKE_SA_INIT && !h.response && h.spi_r == 0 {
            let d = [t];
            let n = PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD,
                &d,
            ));
            self.stateless_reply(local, remote, h.spi_i, &[n]);
        }
    }

    /// Responder side of IKE_SA_INIT (§1.2): the same answer again for a
    /// retransmitted request, stateless refusals, or a new half-open IKE SA
    /// with keys.
    pub(super) fn respond_init(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
        msg: &Message<'_>,
    ) {
        let spi_i = msg.header.spi_i;
        if let Some(&id) = self.half_open.get(&(remote, spi_i)) {
            let mut ctx = ctx!(self, now);
            if let Some(sa) = self.sas.get(&id) {
                sa.retransmit_init_response(&mut ctx, data, remote, local);
            }
            return;
        }
        if !self.admit_init(now, local, remote, msg) {
            return;
        }
        let m = InitPayloads::collect(&msg.payloads);
        let (Some(offered), Some(kei), Some(_)) = (m.sa, m.ke, m.nonce) else {
            return;
        };
        if self.connections.for_addrs(local.ip(), remote.ip()).next().is_none()
            && self.refresh_hosts_on_miss(now, remote.ip())
        {
            // Unanswered rather than refused: the retransmission finds
            // the connection if a name now points at this peer.
            return;
        }
        let candidates = self.connections.for_addrs(local.ip(), remote.ip());
        let choice = match ike_init::choose(candidates, offered, kei, m.intermediate) {
            Ok(c) => c,
            Err(refusal) => {
                if refusal == InitRefusal::NoProposalChosen {
                    // After the admission gate, like every line an
                    // unauthenticated request can cause.
                    let configured = diag::configured(
                        self.connections.for_addrs(local.ip(), remote.ip()).flat_map(|c| c.proposals.iter()),
                        true,
                    );
                    let m = ProposalMismatch { received: &offered.proposals, configured: &configured };
                    tracing::info!(peer = %remote, "IKE_SA_INIT: no proposal chosen: {m}");
                }
                return self.refuse_init(local, remote, spi_i, refusal);
            }
        };
        if let Some((sa, packet)) = self.new_half_open(now, local, remote, spi_i, data, &m, choice)
        {
            self.hold_half_open(now, sa, packet);
        }
    }

    /// The half-open IKE SA for an admitted request and its response: our
    /// KE, SPI and nonce, the keys (§2.14), NAT detection (§2.23). `None`
    /// (dropped) if the KE value is invalid or the keys cannot be made.
    #[allow(clippy::too_many_arguments)]
    fn new_half_open(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        spi_i: u64,
        data: &[u8],
        m: &InitPayloads<'_>,
        choice: InitChoice,
    ) -> Option<(Box<IkeSa>, Vec<u8>)> {
        let (Some(kei), Some(ni)) = (m.ke, m.nonce) else {
            return None;
        };
        let ours = choice.group.generate(&mut *self.rng).ok()?;
        let public = ours.public_value().to_vec();
        let Ok(g_ir) = ours.agree(kei.data) else {
            self.stats.malformed += 1;
            return None;
        };
        let sas = &self.sas;
        let spi_r = ike_spi(&mut *self.rng, |s| sas.contains_key(&s));
        let mut nr = vec![0u8; self.config.nonce_len];
        self.rng.fill_public(&mut nr);
        let keys =
            crate::keys::IkeKeys::derive(&choice.selected, ni, &nr, g_ir.as_slice(), spi_i, spi_r)
                .ok()?;
        let mut sa = Box::new(IkeSa::new(
            IkeSaId(spi_r),
            Role::Responder,
            spi_i,
            spi_r,
            choice.conn,
            local,
            remote,
            now,
        ));
        sa.state = State::Auth;
        sa.suite = Some(choice.selected);
        sa.keys = Some(keys);
        sa.nat = NatState::detect(spi_i, 0, &m.nat_src, m.nat_dst, remote, local);
        if m.fragmentation && sa.conn.fragmentation != crate::config::Fragmentation::No {
            sa.fragmentation = Some(self.config.fragment_size);
        }
        sa.expected_mid = 1;
        let packet =
            ike_init::response(&mut sa, &mut *self.rng, choice.group, &public, &nr, (m.sig_hash, m.intermediate))
                .ok()?;
        sa.handshake = Some(Box::new(Handshake {
            ni: ni.to_vec(),
            nr,
            init_request: data.to_vec(),
            init_response: packet.clone(),
            half_open_deadline: Some(now + self.config.half_open_timeout),
            half_open_key: Some((remote, spi_i)),
            ake_pending: choice.selected.additional().collect(),
            ..Handshake::default()
        }));
        Some((sa, packet))
    }

    /// Whether a new IKE_SA_INIT request may cost a key exchange: it
    /// follows the payload rules, the SA table has room, and it passes the
    /// denial-of-service gate ([`Endpoint::admit`]). Counted if not.
    fn admit_init(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        msg: &Message<'_>,
    ) -> bool {
        if rules::check(ExchangeType::IKE_SA_INIT, false, &msg.payloads, false, &[]).is_err() {
            // Unauthenticated and malformed: drop; INVALID_SYNTAX is only for
            // messages whose checksum verified (§3.10.1).
            self.stats.malformed += 1;
            return false;
        }
        if self.sas.len() >= self.config.max_ike_sas {
            self.stats.init_refused += 1;
            return false;
        }
        let (cookie, nonce) = ike_init::cookie_and_nonce(&msg.payloads);
        // The rules table demands exactly one Nonce; be safe anyway.
        let Some(nonce) = nonce else {
            return false;
        };
        self.admit(now, local, remote, msg.header.spi_i, nonce, cookie)
    }

    /// A request we will not hold an IKE SA for: answered statelessly
    /// (§1.2, §2.7) or dropped.
    fn refuse_init(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        spi_i: u64,
        refusal: InitRefusal,
    ) {
        match refusal {
            InitRefusal::NoProposalChosen => {
                self.stats.init_refused += 1;
                let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::NO_PROPOSAL_CHOSEN, &[]));
                self.stateless_reply(local, remote, spi_i, &[n]);
            }
            InitRefusal::InvalidKe(group) => {
                // §1.2: tell the initiator which group we want, keep no state.
                self.stats.init_refused += 1;
                tracing::debug!(peer = %remote, %group, "IKE_SA_INIT: asking for another group");
                let d = group.iana_id().to_be_bytes();
                let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_KE_PAYLOAD, &d));
                self.stateless_reply(local, remote, spi_i, &[n]);
            }
            InitRefusal::Drop => {}
        }
    }

    /// Send the response of a new half-open SA, keep it for retransmitted
    /// requests, and hold the SA: in the table, and by `(peer, SPIi)`
    /// until it is established.
    fn hold_half_open(&mut self, now: Instant, mut sa: Box<IkeSa>, packet: Vec<u8>) {
        let mut ctx = ctx!(self, now);
        sa.transmit(&mut ctx, &packet);
        // One slot: the IKE_AUTH response replaces it (window one, §2.3).
        sa.responses.reserve_exact(1);
        sa.responses.push_back((0, packet));
        self.stats.responder_sas += 1;
        let (id, spi_i, spi_r, remote) = (sa.id, sa.spi_i, sa.spi_r, sa.remote);
        tracing::debug!(ike_sa = %id, peer = %remote, nat = ?sa.nat, "IKE_SA_INIT answered");
        self.sas.insert(spi_r, sa);
        let fresh = self.half_open.insert((remote, spi_i), spi_r);
        // `respond_init` found no SA under this key and inserted none since.
        debug_assert!(fresh, "half-open key taken");
        self.after(now, spi_r);
    }
}
