//! The sans-IO endpoint: every IKE SA of one gateway, quinn style.
//!
//! ```text
//!   driver (esparto-io / the daemon)              Endpoint
//!   ───────────────────────────────               ────────
//!   UDP 500/4500 datagram  ──handle_datagram(now, local, remote, data)──▶
//!   timer fired            ──handle_timeout(now)──────────────────────▶
//!   operator / trap        ──initiate / acquire / terminate(now, …)──▶
//!                          ◀──poll_transmit()  datagrams to send
//!                          ◀──poll_event()     SAs up / down, failures
//!                          ◀──poll_timeout()   when to call handle_timeout
//! ```
//!
//! The endpoint never reads a clock or the OS RNG: `now` comes in with
//! every call and randomness through the injected [`Rng`], so a seeded
//! simulation replays bit for bit (tests/simulation.rs).
//!
//! IKE SAs are keyed by *our* SPI, which we choose unpredictably and
//! unique (§2.6), so a datagram finds its SA with one hash lookup: the
//! header's I flag says which of the two SPIs is ours. The only message
//! without our SPI is the first IKE_SA_INIT request; its retransmissions
//! find the half-open SA through `(peer address, SPIi)`. A responder keeps
//! no state for an IKE_SA_INIT it refuses (NO_PROPOSAL_CHOSEN,
//! INVALID_KE_PAYLOAD are answered statelessly).
//!
//! Timers: each SA knows its next deadline; the endpoint keeps a min-heap
//! of `(deadline, SA)` with lazy invalidation, so `poll_timeout` and
//! `handle_timeout` cost O(log n) per SA touched, not O(n) per call — this
//! matters at the 10k SAs/s the brief targets.

use crate::config::{ConfigError, Connection, EndpointConfig, Secrets};
use crate::ctx::Ctx;
use crate::event::{Event, IkeSaId, Transmit};
use crate::nat::{NatState, fake_nat_hash, nat_hash};
use crate::proposal::{Proposal, Protocol};
use crate::rules;
use crate::sa::{IkeSa, Role, State};
use crate::spi::{SpiAllocator, ike_spi};
use crate::task::Task;
use crate::task::create_child::CreateChild;
use crate::task::ike_init::IkeInit;
use core::net::SocketAddr;
use esparto_crypto::Rng;
use esparto_crypto::ike::KeGroup;
use esparto_wire::ike::{
    Error as WireError, ExchangeType, Header, HeaderRepr, KeRepr, Message, NonceRepr, NotifyRepr,
    NotifyType, PayloadRepr, PayloadType, SaRepr, Spi, emit_message,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// Counters of what the endpoint dropped or refused (never logged per packet).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams handed to `handle_datagram`.
    pub datagrams: u64,
    /// Not an IKE message (bad marker, header, lengths, payloads).
    pub malformed: u64,
    /// No IKE SA with that SPI.
    pub unknown_spi: u64,
    /// IKE_SA_INIT requests refused (no proposal, wrong group, limits).
    pub init_refused: u64,
    /// IKE SAs created as responder.
    pub responder_sas: u64,
}

/// Why `initiate`/`acquire`/`terminate` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiateError {
    /// No connection of that name.
    UnknownConnection(String),
    /// No child of that name in the connection.
    UnknownChild(String),
    /// The connection has no `local_addrs` to send from.
    NoLocalAddress,
    /// The connection has no `remote_addrs` to send to.
    NoRemoteAddress,
    /// No such IKE SA.
    UnknownIkeSa(IkeSaId),
    /// The endpoint holds `max_ike_sas` already.
    TooManySas,
}

impl core::fmt::Display for InitiateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitiateError::UnknownConnection(n) => write!(f, "no connection {n:?}"),
            InitiateError::UnknownChild(n) => write!(f, "no child {n:?}"),
            InitiateError::NoLocalAddress => f.write_str("connection has no local address"),
            InitiateError::NoRemoteAddress => f.write_str("connection has no remote address"),
            InitiateError::UnknownIkeSa(id) => write!(f, "no IKE SA {id}"),
            InitiateError::TooManySas => f.write_str("IKE SA limit reached"),
        }
    }
}

impl std::error::Error for InitiateError {}

/// All IKE SAs of one gateway.
pub struct Endpoint {
    config: EndpointConfig,
    connections: Vec<Arc<Connection>>,
    secrets: Secrets,
    rng: Box<dyn Rng + Send>,
    spis: Box<dyn SpiAllocator + Send>,
    sas: HashMap<u64, IkeSa>,
    half_open: HashMap<(SocketAddr, u64), u64>,
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
}

macro_rules! ctx {
    ($self:ident, $now:expr) => {
        Ctx {
            now: $now,
            config: &$self.config,
            connections: &$self.connections,
            secrets: &$self.secrets,
            rng: &mut *$self.rng,
            spis: &mut *$self.spis,
            transmits: &mut $self.transmits,
            events: &mut $self.events,
        }
    };
}

impl Endpoint {
    /// An endpoint without connections.
    pub fn new(
        config: EndpointConfig,
        rng: Box<dyn Rng + Send>,
        spis: Box<dyn SpiAllocator + Send>,
    ) -> Self {
        Endpoint {
            config,
            connections: Vec::new(),
            secrets: Secrets::default(),
            rng,
            spis,
            sas: HashMap::new(),
            half_open: HashMap::new(),
            timers: BinaryHeap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Add a connection (validated).
    pub fn add_connection(&mut self, conn: Connection) -> Result<(), ConfigError> {
        conn.validate()?;
        if self.connections.iter().any(|c| c.name == conn.name) {
            return Err(ConfigError::Invalid("duplicate connection name"));
        }
        self.connections.push(Arc::new(conn));
        Ok(())
    }

    /// The PSK store.
    pub fn secrets_mut(&mut self) -> &mut Secrets {
        &mut self.secrets
    }

    /// Drop counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Number of IKE SAs held (half-open included).
    pub fn ike_sa_count(&self) -> usize {
        self.sas.len()
    }

    /// Next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` should be called next.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if self.sas.get(&id).is_some_and(|sa| sa.scheduled == Some(t)) {
                return Some(t);
            }
            self.timers.pop();
        }
        None
    }

    /// Run every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(sa) = self.sas.get_mut(&id) else {
                continue;
            };
            if sa.scheduled != Some(t) {
                continue;
            }
            sa.scheduled = None;
            let mut ctx = ctx!(self, now);
            sa.on_timeout(&mut ctx);
            self.after(id);
        }
    }

    /// Remove a dead SA or re-arm its timer.
    fn after(&mut self, id: u64) {
        let Some(sa) = self.sas.get_mut(&id) else {
            return;
        };
        if sa.state == State::Dead {
            if let Some(k) = sa.half_open_key {
                self.half_open.remove(&k);
            }
            self.sas.remove(&id);
            return;
        }
        if sa.state == State::Established {
            if let Some(k) = sa.half_open_key.take() {
                self.half_open.remove(&k);
            }
        }
        let d = sa.next_deadline();
        if d != sa.scheduled {
            sa.scheduled = d;
            if let Some(t) = d {
                self.timers.push(Reverse((t, id)));
            }
        }
    }

    fn find_conn(&self, name: &str) -> Result<Arc<Connection>, InitiateError> {
        self.connections
            .iter()
            .find(|c| &*c.name == name)
            .cloned()
            .ok_or_else(|| InitiateError::UnknownConnection(name.to_string()))
    }

    /// Start an IKE SA for `connection`, creating `child` (default: the
    /// first child) in IKE_AUTH.
    pub fn initiate(
        &mut self,
        now: Instant,
        connection: &str,
        child: Option<&str>,
    ) -> Result<IkeSaId, InitiateError> {
        self.initiate_for(now, connection, child, None)
    }

    fn initiate_for(
        &mut self,
        now: Instant,
        connection: &str,
        child: Option<&str>,
        resource: Option<u16>,
    ) -> Result<IkeSaId, InitiateError> {
        let conn = self.find_conn(connection)?;
        if self.sas.len() >= self.config.max_ike_sas {
            return Err(InitiateError::TooManySas);
        }
        let child_name = match child {
            Some(c) => conn
                .child(c)
                .ok_or_else(|| InitiateError::UnknownChild(c.to_string()))?
                .name
                .clone(),
            None => conn
                .children
                .first()
                .ok_or_else(|| InitiateError::UnknownChild(String::new()))?
                .name
                .clone(),
        };
        let local_ip = *conn
            .local_addrs
            .first()
            .ok_or(InitiateError::NoLocalAddress)?;
        let remote_ip = *conn
            .remote_addrs
            .first()
            .ok_or(InitiateError::NoRemoteAddress)?;
        let sas = &self.sas;
        let spi_i = ike_spi(&mut *self.rng, |s| sas.contains_key(&s));
        let group = conn
            .proposals
            .first()
            .and_then(|p| p.ke.first().copied())
            .unwrap_or(KeGroup::Curve25519);
        let local = SocketAddr::new(local_ip, self.config.ike_port);
        let remote = SocketAddr::new(remote_ip, conn.remote_port);
        let id = IkeSaId(spi_i);
        tracing::info!(ike_sa = %id, connection = %conn.name, %remote, "initiating IKE_SA");
        let mut sa = IkeSa::new(id, Role::Initiator, spi_i, 0, conn, local, remote, now);
        let mut ctx = ctx!(self, now);
        sa.start_task(
            &mut ctx,
            Task::IkeInit(IkeInit::new(group, Some((child_name, resource)))),
        );
        self.sas.insert(spi_i, sa);
        self.after(spi_i);
        Ok(id)
    }

    /// Traffic needs `child` of `connection` (a trap, or RFC 9611 "acquire
    /// for worker k"): add a Child SA to the connection's IKE SA, or start
    /// one. `resource` is the worker the inbound SPI must steer to.
    pub fn acquire(
        &mut self,
        now: Instant,
        connection: &str,
        child: &str,
        resource: Option<u16>,
    ) -> Result<IkeSaId, InitiateError> {
        let conn = self.find_conn(connection)?;
        let cfg = conn
            .child(child)
            .ok_or_else(|| InitiateError::UnknownChild(child.to_string()))?;
        let existing = self
            .sas
            .values()
            .filter(|sa| {
                Arc::ptr_eq(&sa.conn, &conn) && sa.state != State::Dead && sa.state != State::Failed
            })
            .map(|sa| sa.id.0)
            .next();
        match existing {
            Some(id) => {
                let task = Task::CreateChild(CreateChild::new(cfg.name.clone(), resource));
                let mut ctx = ctx!(self, now);
                if let Some(sa) = self.sas.get_mut(&id) {
                    sa.start_task(&mut ctx, task);
                }
                self.after(id);
                Ok(IkeSaId(id))
            }
            None => self.initiate_for(now, connection, Some(child), resource),
        }
    }

    /// Delete an IKE SA (INFORMATIONAL Delete, or locally if not yet up).
    pub fn terminate(&mut self, now: Instant, ike_sa: IkeSaId) -> Result<(), InitiateError> {
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&ike_sa.0)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        if sa.state == State::Established {
            sa.start_task(&mut ctx, Task::DeleteIke);
        } else {
            sa.die(&mut ctx, crate::event::Reason::Terminated);
        }
        self.after(ike_sa.0);
        Ok(())
    }

    /// Delete one Child SA, named by our inbound SPI.
    pub fn terminate_child(
        &mut self,
        now: Instant,
        ike_sa: IkeSaId,
        inbound_spi: u32,
    ) -> Result<(), InitiateError> {
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&ike_sa.0)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        if sa.child_by_inbound(inbound_spi).is_none() {
            return Err(InitiateError::UnknownChild(format!("{inbound_spi:08x}")));
        }
        sa.start_task(&mut ctx, Task::DeleteChild(vec![inbound_spi]));
        self.after(ike_sa.0);
        Ok(())
    }

    /// Send a liveness check (empty INFORMATIONAL, §1.4) now.
    pub fn liveness_check(&mut self, now: Instant, ike_sa: IkeSaId) -> Result<(), InitiateError> {
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&ike_sa.0)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        sa.start_task(&mut ctx, Task::Liveness);
        self.after(ike_sa.0);
        Ok(())
    }

    /// A UDP datagram arrived on `local` (port 500 or the NAT-T port) from `remote`.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
    ) {
        self.stats.datagrams += 1;
        let data = if local.port() == self.config.natt_port {
            match data {
                // RFC 3948 §2.3: a NAT keepalive; nothing to do.
                [0xff] => return,
                // RFC 3948 §2.2: the non-ESP marker precedes IKE on 4500.
                [0, 0, 0, 0, rest @ ..] => rest,
                _ => {
                    self.stats.malformed += 1;
                    return;
                }
            }
        } else {
            data
        };
        let msg = match Message::parse(data) {
            Ok(m) => m,
            Err(e) => {
                self.stats.malformed += 1;
                if let WireError::UnsupportedCriticalPayload(t) = e {
                    self.refuse_critical(local, remote, data, t);
                }
                return;
            }
        };
        let h = msg.header;
        if h.exchange == ExchangeType::IKE_SA_INIT && !h.response {
            if h.initiator && h.spi_r == 0 && h.message_id == 0 {
                self.respond_init(now, local, remote, data, &msg);
            } else {
                self.stats.malformed += 1;
            }
            return;
        }
        // The I flag says who sent it; our SPI is the other one.
        let ours = if h.initiator { h.spi_r } else { h.spi_i };
        let Some(sa) = self.sas.get_mut(&ours) else {
            self.stats.unknown_spi += 1;
            return;
        };
        let theirs_ok = if h.initiator {
            sa.role == Role::Responder && sa.spi_i == h.spi_i
        } else {
            sa.role == Role::Initiator
                && (sa.spi_r == h.spi_r
                    || (sa.spi_r == 0 && h.exchange == ExchangeType::IKE_SA_INIT))
        };
        if !theirs_ok {
            self.stats.unknown_spi += 1;
            return;
        }
        let mut ctx = ctx!(self, now);
        sa.handle(&mut ctx, data, &msg, remote, local);
        self.after(ours);
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
        let mut out = Vec::new();
        if emit_message(&h, payloads, &mut out).is_ok() {
            let mut data = Vec::with_capacity(out.len() + 4);
            if local.port() == self.config.natt_port {
                data.extend_from_slice(&[0; 4]);
            }
            data.extend_from_slice(&out);
            self.transmits.push_back(Transmit {
                local,
                remote,
                data,
            });
        }
    }

    /// §2.5: an IKE_SA_INIT request with an unknown critical payload gets
    /// UNSUPPORTED_CRITICAL_PAYLOAD naming it.
    fn refuse_critical(&mut self, local: SocketAddr, remote: SocketAddr, data: &[u8], t: u8) {
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

    /// Responder side of IKE_SA_INIT (§1.2): stateless refusals, or a new
    /// half-open IKE SA with keys.
    fn respond_init(
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
        if rules::check(ExchangeType::IKE_SA_INIT, false, &msg.payloads, false, &[]).is_err() {
            // Unauthenticated and malformed: drop (§2.21 allows no error answer).
            self.stats.malformed += 1;
            return;
        }
        if self.sas.len() >= self.config.max_ike_sas {
            self.stats.init_refused += 1;
            return;
        }
        let (mut offered, mut ke, mut ni, mut src, mut dst) = (None, None, None, Vec::new(), None);
        for p in &msg.payloads {
            match p {
                PayloadRepr::Sa(s) => offered = Some(s),
                PayloadRepr::Ke(k) => ke = Some(*k),
                PayloadRepr::Nonce(n) => ni = Some(n.data),
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_SOURCE_IP => {
                    src.push(n.data)
                }
                PayloadRepr::Notify(n) if n.kind == NotifyType::NAT_DETECTION_DESTINATION_IP => {
                    dst = Some(n.data)
                }
                _ => {}
            }
        }
        let (Some(offered), Some(ke), Some(ni)) = (offered, ke, ni) else {
            return;
        };
        let ke_group = KeGroup::from_iana(ke.group);
        let chosen = self
            .connections
            .iter()
            .filter(|c| c.matches_addrs(local.ip(), remote.ip()))
            .find_map(|c| {
                Proposal::select(&c.proposals, &offered.proposals, false, ke_group)
                    .map(|s| (c.clone(), s))
            });
        let Some((conn, selected)) = chosen else {
            self.stats.init_refused += 1;
            tracing::info!(peer = %remote, "IKE_SA_INIT: no proposal chosen");
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::NO_PROPOSAL_CHOSEN, &[]));
            return self.stateless_reply(local, remote, spi_i, &[n]);
        };
        let Some(group) = selected.ke else { return };
        if ke_group != Some(group) {
            // §1.2: tell the initiator which group we want, keep no state.
            self.stats.init_refused += 1;
            tracing::debug!(peer = %remote, %group, "IKE_SA_INIT: asking for another group");
            let d = group.iana_id().to_be_bytes();
            let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_KE_PAYLOAD, &d));
            return self.stateless_reply(local, remote, spi_i, &[n]);
        }
        let Ok(ours) = group.generate(&mut *self.rng) else {
            return;
        };
        let public = ours.public_value().to_vec();
        let Ok(g_ir) = ours.agree(ke.data) else {
            self.stats.malformed += 1;
            return;
        };
        let sas = &self.sas;
        let spi_r = ike_spi(&mut *self.rng, |s| sas.contains_key(&s));
        let mut nr = vec![0u8; self.config.nonce_len];
        self.rng.fill_public(&mut nr);
        let Ok(keys) =
            crate::keys::IkeKeys::derive(&selected, ni, &nr, g_ir.as_slice(), spi_i, spi_r)
        else {
            return;
        };
        let nat = NatState::detect(spi_i, 0, &src, dst, remote, local);
        let id = IkeSaId(spi_r);
        let mut sa = IkeSa::new(
            id,
            Role::Responder,
            spi_i,
            spi_r,
            conn.clone(),
            local,
            remote,
            now,
        );
        sa.state = State::Auth;
        sa.suite = Some(selected);
        sa.keys = Some(keys);
        sa.ni = ni.to_vec();
        sa.nr = nr;
        sa.nat = nat;
        sa.init_request = data.to_vec();
        sa.expected_mid = 1;
        sa.half_open_deadline = Some(now + self.config.half_open_timeout);
        sa.half_open_key = Some((remote, spi_i));

        let answer = SaRepr {
            proposals: vec![selected.to_wire(Protocol::Ike, Spi::None)],
        };
        let nr_copy = sa.nr.clone();
        let src_hash = if conn.encap {
            fake_nat_hash(&mut *self.rng)
        } else {
            nat_hash(spi_i, spi_r, local)
        };
        let dst_hash = nat_hash(spi_i, spi_r, remote);
        let mut payloads = vec![
            PayloadRepr::Sa(answer),
            PayloadRepr::Ke(KeRepr {
                group: group.iana_id(),
                data: &public,
            }),
            PayloadRepr::Nonce(NonceRepr { data: &nr_copy }),
        ];
        // §2.23: NAT detection only if the initiator started it.
        if nat.supported {
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::NAT_DETECTION_SOURCE_IP,
                &src_hash,
            )));
            payloads.push(PayloadRepr::Notify(NotifyRepr::new(
                NotifyType::NAT_DETECTION_DESTINATION_IP,
                &dst_hash,
            )));
        }
        let Ok(packet) = sa.encode(ExchangeType::IKE_SA_INIT, true, 0, &payloads) else {
            return;
        };
        sa.init_response = packet.clone();
        let mut ctx = ctx!(self, now);
        sa.transmit(&mut ctx, &packet);
        sa.responses.push_back((0, packet));
        self.stats.responder_sas += 1;
        tracing::debug!(ike_sa = %id, peer = %remote, nat = ?nat, "IKE_SA_INIT answered");
        self.sas.insert(spi_r, sa);
        self.half_open.insert((remote, spi_i), spi_r);
        self.after(spi_r);
    }
}
