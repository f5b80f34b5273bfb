//! The sans-IO endpoint: every IKE SA of one gateway, quinn style.
//!
//! ```text
//!   driver (esparto-io / the daemon)              Endpoint
//!   ───────────────────────────────               ────────
//!   UDP 500/4500 datagram  ──handle_datagram(now, wall_clock, local, remote, data)──▶
//!                            (wall_clock: calendar time, for certificates)
//!   timer fired            ──handle_timeout(now)──────────────────────▶
//!   operator / trap        ──initiate / acquire / terminate(now, …)──▶
//!                          ◀──poll_transmit()  datagrams to send
//!                          ◀──poll_event()     SAs up / down, failures
//!                          ◀──poll_timeout()   when to call handle_timeout
//! ```
//!
//! The endpoint never reads a clock or the OS RNG: `now` comes in with
//! every call, the wall-clock time certificates are checked against with
//! every datagram (`handle_datagram`'s `wall_clock`, as rustls passes a
//! `UnixTime` into certificate verification), and randomness through the
//! injected [`Rng`], so a seeded simulation replays bit for bit
//! (tests/simulation.rs; ECDSA and RSA-PSS signatures excepted, whose
//! randomness aws-lc-rs draws itself: `cert/sign.rs`).
//!
//! IKE SAs are keyed by *our* SPI, which we choose unpredictably and
//! unique (§2.6), so a datagram finds its SA with one hash lookup: the
//! header's I flag says which of the two SPIs is ours. The only message
//! without our SPI is the first IKE_SA_INIT request; its retransmissions
//! find the half-open SA through `(peer address, SPIi)`. A responder keeps
//! no state for an IKE_SA_INIT it refuses (NO_PROPOSAL_CHOSEN,
//! INVALID_KE_PAYLOAD and COOKIE are answered statelessly; the half-open
//! limits and the COOKIE defence of §2.6 are in `init_responder.rs`).
//!
//! Timers: each SA knows its next deadline; the endpoint keeps a min-heap
//! of `(deadline, SA)` with lazy invalidation, so `poll_timeout` and
//! `handle_timeout` cost O(log n) per SA touched, not O(n) per call, which
//! matters at ten thousand SAs set up per second. An SA has one live entry,
//! at or before its deadline: a deadline that moves later (a response
//! came, the SA is up) leaves the entry to fire early and re-arm, so an
//! SA does not leave an entry behind for every change.
//!
//! Everything else found per tunnel is found by index, never by walking
//! every SA or connection: connections by name, address and identity
//! (`crate::connections`), PSKs by identity (`crate::psk`), SAs by
//! connection and identity pair (`sa_index.rs`). SAs are boxed in the
//! table (see the memory table in the crate documentation).

use crate::config::{
    ConfigError, ConnectionConfig, EndpointConfig, PerCpuSas, Secrets, StartAction,
};
use crate::connections::Connections;
use crate::ctx::{Action, Ctx};
use crate::event::{Event, IkeSaId, Transmit};
use crate::exchange::Task;
use crate::exchange::child_sa::offer::ChildOffer;
use crate::exchange::ike_init::IkeInit;
use crate::psk::Psks;
use crate::sa::{Dropped, IkeSa, Role, State};
use crate::activity::{InboundActivity, NoActivity};
use crate::spi::{SpiAllocator, ike_spi};
use core::net::{IpAddr, SocketAddr};
use esparto_crypto::Rng;
use esparto_crypto::ike::KeGroup;
use esparto_wire::espinudp::{Datagram, Kind, NON_ESP_MARKER};
use esparto_wire::ike::{Error as WireError, ExchangeType, Message, NotifyType, PayloadRepr};
use pki_types::UnixTime;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
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
    /// Protected messages whose ICV did not verify (dropped silently, §2.21).
    pub integrity_failures: u64,
    /// Requests outside the window, responses to nothing we sent, or
    /// messages the SA's state does not allow.
    pub out_of_window: u64,
    /// IKE_SA_INIT requests answered with only a COOKIE (§2.6), statelessly.
    pub cookies_sent: u64,
    /// Requests whose COOKIE we made and that passed (current secret, or
    /// the previous one within its grace period).
    pub cookies_verified: u64,
    /// Requests with a COOKIE that did not pass (forged, replayed from
    /// another address, for another SPI, or too old): answered with a new one.
    pub cookies_rejected: u64,
    /// IKE_SA_INIT requests dropped because their source address holds
    /// `half_open_per_source` half-open IKE SAs already.
    pub half_open_dropped_per_source: u64,
    /// IKE_SA_INIT requests dropped because `max_half_open` half-open IKE
    /// SAs exist.
    pub half_open_dropped_global: u64,
    /// Requests for an IKE SA we do not hold answered with INVALID_IKE_SPI
    /// (RFC 7296 §2.21.4).
    pub invalid_ike_spi_sent: u64,
    /// INVALID_IKE_SPI answers to our own requests: the peer lost the IKE
    /// SA, which we then deleted.
    pub invalid_ike_spi_received: u64,
    /// Unprotected INVALID_IKE_SPI that matched no request of ours:
    /// ignored (forged, or late).
    pub invalid_ike_spi_ignored: u64,
    /// Unprotected INVALID_SPI notifications sent to a configured peer
    /// about ESP with an unknown SPI (§1.5).
    pub invalid_spi_hints_sent: u64,
    /// INVALID_SPI hints received that named one of our Child SAs: a
    /// liveness check followed.
    pub invalid_spi_hints_received: u64,
    /// Unprotected answers or hint checks not done because of the rate
    /// limits (§2.21.4).
    pub rate_limited: u64,
    /// Connections initiated again after their IKE SA died (`dpd_action`,
    /// `close_action`).
    pub reinitiations: u64,
    /// IKE_SA_INIT requests dropped while shutting down.
    pub closing_dropped: u64,
    /// CERT payloads in IKE_AUTH with an encoding other than X.509
    /// certificate (RFC 7296 §3.6 lists thirteen): skipped, the rest of
    /// the message used.
    pub cert_payloads_skipped: u64,
    /// Liveness checks sent because `dpd_delay` passed without an IKE
    /// message or authenticated ESP from the peer (RFC 7296 §2.4).
    pub liveness_checks: u64,
    /// Connections brought back because their peer sent ESP for SAs we
    /// no longer held (`recover = initiate`).
    pub recoveries: u64,
    /// Initiations that waited because `initiating_per_peer` of our IKE
    /// SAs to the same peer address were being set up.
    pub initiations_paced: u64,
    /// IKE fragments (RFC 7383) authenticated and kept for reassembly.
    pub fragments_received: u64,
    /// Authenticated fragments not kept: duplicates, a smaller Total
    /// Fragments than before, reassembly bounds broken.
    pub fragments_dropped: u64,
    /// Messages of the peer put back together from fragments.
    pub messages_reassembled: u64,
    /// Fragments of ours sent (retransmissions included).
    pub fragments_sent: u64,
    /// Plaintext octets of partial messages held now, over all IKE SAs
    /// (bounded by `sa::fragments::MAX_FRAGMENT_BYTES`).
    pub fragment_bytes_held: usize,
    /// Lookups of a peer's host name that the driver reported failed.
    pub unresolved_hosts: u64,
    /// Additional key exchanges (RFC 9370, ML-KEM) completed in
    /// IKE_INTERMEDIATE exchanges, both roles.
    pub additional_key_exchanges: u64,
    /// IKE_INTERMEDIATE requests refused (out of order, a KE payload of
    /// another method, a malformed encapsulation key): the IKE SA ended.
    pub intermediate_refused: u64,
    /// IKE SAs moved to new addresses by MOBIKE (RFC 4555): ours after
    /// the peer answered our update, the peer's after its address passed
    /// the return routability check.
    pub mobike_updates: u64,
    /// Return routability checks that failed: the peer's old addresses
    /// were kept.
    pub mobike_checks_failed: u64,
    /// IKE messages received (parsed) and sent, by exchange and kind.
    pub messages: Messages,
}

/// IKE messages by exchange (IKE_SA_INIT, IKE_AUTH, CREATE_CHILD_SA,
/// INFORMATIONAL), direction and kind: what strongSwan's `counters`
/// plugin counts. A message received counts once it parses (before its
/// integrity is checked); one sent when it is handed out to be sent
/// (retransmissions included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Messages {
    /// `[exchange][response]`, received.
    pub received: [[u64; 2]; 4],
    /// `[exchange][response]`, sent.
    pub sent: [[u64; 2]; 4],
}

impl Messages {
    /// The exchanges in the arrays' order.
    pub const EXCHANGES: [ExchangeType; 4] = [
        ExchangeType::IKE_SA_INIT,
        ExchangeType::IKE_AUTH,
        ExchangeType::CREATE_CHILD_SA,
        ExchangeType::INFORMATIONAL,
    ];

    fn slot(exchange: ExchangeType) -> Option<usize> {
        Self::EXCHANGES.iter().position(|e| *e == exchange)
    }

    fn count(&mut self, sent: bool, exchange: ExchangeType, response: bool) {
        let Some(i) = Self::slot(exchange) else { return };
        let table = if sent { &mut self.sent } else { &mut self.received };
        table[i][usize::from(response)] += 1;
    }

    /// Counts the IKE message at the start of `data` as sent (nothing if
    /// it is not one).
    fn count_sent(&mut self, data: &[u8]) {
        let Ok(h) = esparto_wire::ike::Header::new_checked(data) else { return };
        if let Ok(h) = esparto_wire::ike::HeaderRepr::parse(&h) {
            self.count(true, h.exchange, h.response);
        }
    }
}

/// IKE SAs held, by where they are in their life (RFC 7296 §1.2).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IkeSaStates {
    /// Our IKE_SA_INIT sent, not answered yet: no keys.
    pub connecting: usize,
    /// Keys derived, IKE_AUTH in progress (a responder's half-open SA
    /// included).
    pub authenticating: usize,
    /// Authenticated (a rekeyed one included until its deletion).
    pub established: usize,
    /// Authentication failed as responder; kept only to answer
    /// retransmissions until the half-open timer.
    pub failed: usize,
    /// Of `connecting`: initiations waiting for their turn to the peer
    /// (`initiating_per_peer`), nothing sent yet.
    pub waiting: usize,
}

/// Picks our address towards a peer (see [`Endpoint::set_source_chooser`]);
/// `None`: no route to it.
pub type SourceChooser = Box<dyn FnMut(IpAddr) -> Option<IpAddr> + Send>;

/// Why `initiate`/`acquire`/`terminate` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiateError {
    /// No connection of that name.
    UnknownConnection(String),
    /// No child of that name in the connection.
    UnknownChild(String),
    /// The connection has no `local_addrs` of the peer's family to send
    /// from, and none came from the routing table.
    NoLocalAddress,
    /// The connection has no `remote_addrs` to send to.
    NoRemoteAddress,
    /// No such IKE SA.
    UnknownIkeSa(IkeSaId),
    /// The endpoint holds `max_ike_sas` already.
    TooManySas,
    /// No such Child SA on the IKE SA.
    UnknownChildSa(u32),
    /// No (more) per-resource Child SAs for this child on its IKE SA
    /// (RFC 9611): the peer does not support them, refused more, or
    /// `per_cpu_max` is reached. Stop asking; the fallback SA carries the
    /// worker's traffic.
    PerResourceUnavailable(crate::event::Reason),
    /// The endpoint is shutting down (`shutdown`).
    Closing,
}

impl core::fmt::Display for InitiateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitiateError::UnknownConnection(n) => write!(f, "no connection {n:?}"),
            InitiateError::UnknownChild(n) => write!(f, "no child {n:?}"),
            InitiateError::NoLocalAddress => {
                f.write_str("connection has no local address of the peer's family (local_addrs), and no route gives one towards the peer")
            }
            InitiateError::NoRemoteAddress => f.write_str("connection has no remote address"),
            InitiateError::UnknownIkeSa(id) => write!(f, "no IKE SA {id}"),
            InitiateError::TooManySas => f.write_str("IKE SA limit reached"),
            InitiateError::UnknownChildSa(spi) => write!(f, "no Child SA {spi:08x}"),
            InitiateError::PerResourceUnavailable(r) => {
                write!(f, "no per-resource Child SAs: {r:?}")
            }
            InitiateError::Closing => f.write_str("shutting down"),
        }
    }
}

impl std::error::Error for InitiateError {}

/// All IKE SAs of one gateway.
pub struct Endpoint {
    config: EndpointConfig,
    connections: Connections,
    psks: Psks,
    rng: Box<dyn Rng + Send>,
    spis: Box<dyn SpiAllocator + Send>,
    /// The data plane's last-packet times (liveness without a check).
    activity: Box<dyn InboundActivity + Send>,
    /// Our address towards a peer, for a connection without `local_addrs`.
    source: Option<SourceChooser>,
    /// Boxed: a table of SAs inline would hold up to twice their size in
    /// empty slots as it grows, and move them on every growth.
    sas: HashMap<u64, Box<IkeSa>>,
    /// The SAs of each connection and of each identity pair.
    sa_index: sa_index::SaIndex,
    half_open: init_responder::HalfOpen,
    /// COOKIE secrets (§2.6), drawn when first needed.
    cookies: Option<crate::cookie::CookieJar>,
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    stats: Stats,
    /// Our IKE SPIs: of every SA held, and reserved for rekeys under way.
    ike_spis: HashSet<u64>,
    /// What SAs asked the endpoint to do (`ctx::Action`).
    actions: Vec<Action>,
    /// Rate limits for unprotected answers, re-initiations, shutdown.
    recovery: recovery::Recovery,
    /// Our IKE SAs being set up, and those waiting, per peer address.
    pacing: pacing::Pacing,
    /// Initiations waiting for the peer's host names.
    resolving: resolve::Resolving,
}

macro_rules! ctx {
    ($self:ident, $now:expr) => {
        Ctx {
            now: $now,
            config: &$self.config,
            connections: &$self.connections,
            psks: &$self.psks,
            rng: &mut *$self.rng,
            spis: &mut *$self.spis,
            activity: &*$self.activity,
            transmits: &mut $self.transmits,
            events: &mut $self.events,
            ike_spis: &mut $self.ike_spis,
            actions: &mut $self.actions,
            stats: &mut $self.stats,
            sa_index: &$self.sa_index,
        }
    };
}

mod info;
mod init_responder;
mod lifecycle;
mod pacing;
mod reconfigure;
mod recovery;
mod resolve;
pub(crate) mod sa_index;

pub use info::{ChildSaInfo, IkeSaInfo};
pub use reconfigure::NewConnection;

impl Endpoint {
    /// An endpoint without connections.
    pub fn new(
        config: EndpointConfig,
        rng: Box<dyn Rng + Send>,
        spis: Box<dyn SpiAllocator + Send>,
    ) -> Self {
        Endpoint {
            config,
            connections: Connections::default(),
            psks: Psks::default(),
            rng,
            spis,
            activity: Box::new(NoActivity),
            source: None,
            sas: HashMap::new(),
            sa_index: sa_index::SaIndex::default(),
            half_open: init_responder::HalfOpen::default(),
            cookies: None,
            timers: BinaryHeap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            ike_spis: HashSet::new(),
            actions: Vec::new(),
            recovery: recovery::Recovery::default(),
            pacing: pacing::Pacing::default(),
            resolving: resolve::Resolving::default(),
        }
    }

    /// Where to learn when ESP last arrived on each Child SA: authenticated
    /// ESP from the peer counts as liveness, and `dpd_delay` asks for a
    /// liveness check only after that long without it either (see
    /// [`crate::activity`]). Without one, only IKE messages count.
    pub fn set_inbound_activity(&mut self, activity: Box<dyn InboundActivity + Send>) {
        self.activity = activity;
    }

    /// How to pick our address towards a peer when a connection we
    /// initiate names no `local_addrs` (swanctl's `%any`): the driver asks
    /// the routing table, as strongSwan does. Without one, initiating such
    /// a connection fails with [`InitiateError::NoLocalAddress`].
    pub fn set_source_chooser(&mut self, choose: SourceChooser) {
        self.source = Some(choose);
    }

    /// Add a connection (validated; its name must be new). O(1): the
    /// connection is indexed by name, peer address and peer identity.
    pub fn add_connection(&mut self, conn: ConnectionConfig) -> Result<(), ConfigError> {
        conn.validate()?;
        self.connections.add(conn)
    }

    /// The PSK store. The endpoint indexes it by identity and rebuilds the
    /// index on the next lookup after this borrow.
    pub fn secrets_mut(&mut self) -> &mut Secrets {
        self.psks.secrets_mut()
    }

    /// Drop counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Number of IKE SAs held (half-open included).
    pub fn ike_sa_count(&self) -> usize {
        self.sas.len()
    }

    /// IKE SAs held, by state. Walks every SA: for statistics, not for
    /// anything per packet or per event.
    pub fn ike_sa_states(&self) -> IkeSaStates {
        let mut n = IkeSaStates::default();
        for sa in self.sas.values() {
            match sa.state {
                State::Init => {
                    n.connecting += 1;
                    n.waiting += usize::from(sa.waiting);
                }
                State::Auth => n.authenticating += 1,
                State::Established => n.established += 1,
                State::Failed => n.failed += 1,
                // Removed in the same step that killed it.
                State::Dead => {}
            }
        }
        n
    }

    /// Next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        let ike = if t.local.port() == self.config.natt_port {
            t.data.get(NON_ESP_MARKER.len()..).unwrap_or_default()
        } else {
            &t.data
        };
        // A fragmented message counts once, with its first fragment (the
        // header's Next Payload is SKF; Fragment Number follows the SKF
        // generic header).
        let fragment = (ike.get(16) == Some(&esparto_wire::ike::PayloadType::SKF.0))
            .then(|| ike.get(32..34).map(|n| u16::from_be_bytes([n[0], n[1]])));
        match fragment {
            Some(number) => {
                self.stats.fragments_sent += 1;
                if number == Some(1) {
                    self.stats.messages.count_sent(ike);
                }
            }
            None => self.stats.messages.count_sent(ike),
        }
        Some(t)
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` should be called next. It may find nothing
    /// due then (an SA's deadline moved later after its timer was set) and
    /// only re-arm; it is never later than the first work due.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let revive = match (self.recovery.next_due(), self.resolving.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if self.sas.get(&id).is_some_and(|sa| sa.scheduled == Some(t)) {
                return Some(revive.map_or(t, |r| r.min(t)));
            }
            self.timers.pop();
        }
        revive
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
            // The entry may be older than the SA's deadline, which moved
            // later since (see `after`): then there is only re-arming to do.
            if sa.next_deadline().is_some_and(|d| d <= now) {
                let mut ctx = ctx!(self, now);
                sa.on_timeout(&mut ctx);
            }
            self.finish(now, id);
        }
        self.reinitiate_due(now);
        if self.resolving.next_deadline().is_some_and(|t| t <= now) {
            self.resume_parked(now);
        }
    }

    /// An unused IKE SPI for an SA we initiate (parked ones included).
    fn new_initiator_spi(&mut self) -> u64 {
        let (sas, parked) = (&self.sas, &self.resolving);
        ike_spi(&mut *self.rng, |s| sas.contains_key(&s) || parked.holds(s))
    }

    fn find_conn(&self, name: &str) -> Result<Arc<ConnectionConfig>, InitiateError> {
        self.connections
            .get(name)
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
        if self.recovery.closing {
            return Err(InitiateError::Closing);
        }
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
        if !conn.has_remote() {
            return Err(InitiateError::NoRemoteAddress);
        }
        if !conn.remote_hosts.is_empty() {
            // Names are resolved afresh for every initiation: it goes on
            // once the driver has answered (`resolve.rs`).
            return Ok(IkeSaId(self.park(now, &conn, child_name, resource)));
        }
        self.launch(now, conn, child_name, resource, None)
    }

    /// Send the IKE_SA_INIT of an initiation (with `spi`, the one a
    /// parked initiation returned, if given).
    fn launch(
        &mut self,
        now: Instant,
        conn: Arc<ConnectionConfig>,
        child_name: Arc<str>,
        resource: Option<u16>,
        spi: Option<u64>,
    ) -> Result<IkeSaId, InitiateError> {
        // remote_addrs in order, as strongSwan takes them (names by their
        // answers): the first one we have a local address towards — the
        // first of its family in local_addrs (a dual-stack connection
        // lists both), else the routing table's source.
        let connections = &self.connections;
        let candidates = conn.remote_candidates(|name| connections.answer(name));
        if candidates.is_empty() {
            return Err(InitiateError::NoRemoteAddress);
        }
        let source = &mut self.source;
        let (remote_ip, local_ip) = candidates
            .iter()
            .find_map(|remote| {
                let local = match conn.local_addrs.iter().find(|a| a.is_ipv4() == remote.is_ipv4()) {
                    Some(a) => Some(*a),
                    None if !conn.local_addrs.is_empty() => None,
                    None => source
                        .as_mut()
                        .and_then(|choose| choose(*remote))
                        .filter(|a| a.is_ipv4() == remote.is_ipv4()),
                };
                local.map(|l| (*remote, l))
            })
            .ok_or(InitiateError::NoLocalAddress)?;
        let spi_i = match spi {
            Some(s) if !self.sas.contains_key(&s) => s,
            _ => self.new_initiator_spi(),
        };
        let group = conn
            .proposals
            .first()
            .and_then(|p| p.ke.first().copied())
            .unwrap_or(KeGroup::Curve25519);
        let local = SocketAddr::new(local_ip, self.config.ike_port);
        let remote = SocketAddr::new(remote_ip, conn.remote_port);
        let id = IkeSaId(spi_i);
        tracing::info!(ike_sa = %id, connection = %conn.name, %remote, "initiating IKE_SA");
        // §2.4: INITIAL_CONTACT only when this is the one IKE SA with the peer.
        let sas = &self.sas;
        let initial_contact = !self.sa_index.of_conn(&conn).any(|id| {
            sas.get(&id)
                .is_some_and(|s| s.state != State::Dead && !s.superseded)
        });
        // RFC 9611: a per-CPU child's first SA is its fallback; the worker's
        // sub-SA follows once the peer's support is known.
        let per_cpu = conn
            .child(&child_name)
            .is_some_and(|c| c.per_cpu_sas != PerCpuSas::No);
        let first_resource = if per_cpu { None } else { resource };
        let mut sa = Box::new(IkeSa::new(
            id,
            Role::Initiator,
            spi_i,
            0,
            conn,
            local,
            remote,
            now,
        ));
        sa.initial_contact = initial_contact;
        if let (true, Some(k)) = (per_cpu, resource) {
            sa.resource_group(&child_name).wanted.push(k);
        }
        self.pace(&mut sa);
        let mut ctx = ctx!(self, now);
        sa.start_task(
            &mut ctx,
            Task::IkeInit(IkeInit::new(group, Some((child_name, first_resource)))),
        );
        self.sas.insert(spi_i, sa);
        self.finish(now, spi_i);
        Ok(id)
    }

    /// Initiate every child whose `start_action` is `Start` (swanctl's
    /// behaviour on load): the first such child of a connection goes into
    /// IKE_AUTH, the others follow with CREATE_CHILD_SA on the same IKE SA.
    pub fn start_all(&mut self, now: Instant) -> Vec<Result<IkeSaId, InitiateError>> {
        let mut out = Vec::new();
        for conn in self.connections.all().to_vec() {
            for child in conn
                .children
                .iter()
                .filter(|c| c.start_action == StartAction::Start)
            {
                out.push(self.acquire(now, &conn.name, &child.name, None));
            }
        }
        out
    }

    /// Traffic needs `child` of `connection` (a trap, or RFC 9611 "acquire
    /// for worker k"): add a Child SA to the connection's IKE SA, or start
    /// one. `resource` is the worker the inbound SPI must steer to.
    ///
    /// For a child with `per_cpu_sas` other than `No`, `Some(k)` asks for
    /// worker k's sub-SA (after the group's fallback SA, which comes
    /// first) and does nothing if it exists or is under way; it fails with
    /// [`InitiateError::PerResourceUnavailable`] once the peer turned out
    /// not to support them or refused more — stop asking then. `None`
    /// asks for the fallback SA only if there is none.
    pub fn acquire(
        &mut self,
        now: Instant,
        connection: &str,
        child: &str,
        resource: Option<u16>,
    ) -> Result<IkeSaId, InitiateError> {
        if self.recovery.closing {
            return Err(InitiateError::Closing);
        }
        let conn = self.find_conn(connection)?;
        let cfg = conn
            .child(child)
            .ok_or_else(|| InitiateError::UnknownChild(child.to_string()))?;
        let sas = &self.sas;
        let existing = self.sa_index.of_conn(&conn).find(|id| {
            sas.get(id).is_some_and(|sa| {
                sa.state != State::Dead && sa.state != State::Failed && !sa.superseded
            })
        });
        let Some(id) = existing else {
            return self.initiate_for(now, connection, Some(child), resource);
        };
        let name = cfg.name.clone();
        let per_cpu = cfg.per_cpu_sas != PerCpuSas::No;
        let mut ctx = ctx!(self, now);
        let Some(sa) = self.sas.get_mut(&id) else {
            return Err(InitiateError::UnknownIkeSa(IkeSaId(id)));
        };
        let r = match (per_cpu, resource) {
            (false, _) => {
                sa.start_task(
                    &mut ctx,
                    Task::CreateChild(ChildOffer::new(name, resource)),
                );
                Ok(())
            }
            (true, None) => {
                if !sa.has_child(&name) {
                    sa.start_task(&mut ctx, Task::CreateChild(ChildOffer::new(name, None)));
                }
                Ok(())
            }
            (true, Some(k)) => sa
                .acquire_resource(&mut ctx, &name, k)
                .map_err(InitiateError::PerResourceUnavailable),
        };
        self.finish(now, id);
        r.map(|()| IkeSaId(id))
    }

    /// Delete an IKE SA (INFORMATIONAL Delete, or locally if not yet up).
    /// A re-initiation of its connection that was due is cancelled: the
    /// operator wants it down.
    pub fn terminate(&mut self, now: Instant, ike_sa: IkeSaId) -> Result<(), InitiateError> {
        if self.cancel_parked(ike_sa) {
            return Ok(());
        }
        let id = self.resolve(ike_sa)?;
        if let Some(name) = self.sas.get(&id).map(|sa| sa.conn.name.clone()) {
            self.cancel_reinitiation(&name);
        }
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&id)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        if sa.state == State::Established {
            sa.start_task(&mut ctx, Task::DeleteIke);
        } else {
            sa.die(&mut ctx, crate::event::Reason::Terminated);
        }
        self.finish(now, id);
        Ok(())
    }

    /// Delete one Child SA, named by our inbound SPI.
    pub fn terminate_child(
        &mut self,
        now: Instant,
        ike_sa: IkeSaId,
        inbound_spi: u32,
    ) -> Result<(), InitiateError> {
        let id = self.resolve_child(ike_sa, inbound_spi)?;
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&id)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        let idx = sa
            .child_by_inbound(inbound_spi)
            .ok_or(InitiateError::UnknownChildSa(inbound_spi))?;
        sa.delete_child(&mut ctx, idx, crate::event::Reason::Terminated);
        self.finish(now, id);
        Ok(())
    }

    /// Send a liveness check (empty INFORMATIONAL, §1.4) now.
    pub fn liveness_check(&mut self, now: Instant, ike_sa: IkeSaId) -> Result<(), InitiateError> {
        let id = self.resolve(ike_sa)?;
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&id)
            .ok_or(InitiateError::UnknownIkeSa(ike_sa))?;
        sa.start_task(&mut ctx, Task::Liveness);
        self.finish(now, id);
        Ok(())
    }

    /// A UDP datagram arrived on `local` (port 500 or the NAT-T port) from
    /// `remote`. `now` is the monotonic time, for every timer;
    /// `wall_clock` the calendar time, which a peer's certificates are
    /// checked against (RFC 5280 §4.1.2.5) when the datagram carries them.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        wall_clock: UnixTime,
        local: SocketAddr,
        remote: SocketAddr,
        data: &[u8],
    ) {
        self.stats.datagrams += 1;
        let data = if local.port() == self.config.natt_port {
            match Datagram::classify(data) {
                // RFC 3948 §2.3: a NAT keepalive; nothing to do.
                Ok(Kind::NatKeepalive) => return,
                // RFC 3948 §2.2: the non-ESP marker precedes IKE on 4500.
                Ok(Kind::Ike(rest)) => rest,
                Ok(Kind::Esp(_)) | Err(_) => {
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
        self.stats.messages.count(false, h.exchange, h.response);
        if h.exchange == ExchangeType::IKE_SA_INIT && !h.response {
            if self.recovery.closing {
                self.stats.closing_dropped += 1;
            } else if h.initiator && h.spi_r == 0 && h.message_id == 0 {
                self.respond_init(now, local, remote, data, &msg);
            } else {
                self.stats.malformed += 1;
            }
            return;
        }
        // The I flag says who sent it; our SPI is the other one.
        let ours = if h.initiator { h.spi_r } else { h.spi_i };
        let theirs_ok = self.sas.get(&ours).is_some_and(|sa| {
            if h.initiator {
                sa.role == Role::Responder && sa.spi_i == h.spi_i
            } else {
                sa.role == Role::Initiator
                    && (sa.spi_r == h.spi_r
                        || (sa.spi_r == 0 && h.exchange == ExchangeType::IKE_SA_INIT))
            }
        });
        if !theirs_ok {
            self.unknown_ike_sa(now, local, remote, &msg);
            return;
        }
        let Some(sa) = self.sas.get_mut(&ours) else {
            return;
        };
        // An unprotected INVALID_IKE_SPI (§2.21.4) counts apart: taken only
        // as the answer to a request of ours (`exchange::on_response`).
        let invalid_ike_spi = h.response
            && msg.sk.is_none()
            && msg.payloads.iter().any(
                |p| matches!(p, PayloadRepr::Notify(n) if n.kind == NotifyType::INVALID_IKE_SPI),
            );
        // A socket on a wildcard address that could not say where the
        // datagram was sent to: the IKE SA's own address, not the wildcard.
        let local = if local.ip().is_unspecified() { SocketAddr::new(sa.local.ip(), local.port()) } else { local };
        let mut ctx = ctx!(self, now);
        match sa.handle(&mut ctx, data, &msg, (remote, local), wall_clock) {
            Ok(()) if invalid_ike_spi => self.stats.invalid_ike_spi_received += 1,
            Ok(()) => {}
            Err(_) if invalid_ike_spi => {
                self.stats.invalid_ike_spi_ignored += 1;
                tracing::info!(ike_sa = %IkeSaId(ours), peer = %remote, mid = h.message_id,
                    "unprotected INVALID_IKE_SPI that answers no request of ours: ignored");
            }
            Err(Dropped::Integrity) => self.stats.integrity_failures += 1,
            Err(Dropped::OutOfWindow) => self.stats.out_of_window += 1,
            Err(Dropped::Malformed) => self.stats.malformed += 1,
        }
        self.finish(now, ours);
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod cert_tests;
