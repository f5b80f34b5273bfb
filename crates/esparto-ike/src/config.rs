//! Typed configuration: what the binary builds from swanctl-style TOML.
//!
//! Names follow swanctl.conf so that an operator who knows strongSwan can
//! read an Esparto configuration: a [`ConnectionConfig`] has `local_addrs`,
//! `remote_addrs`, `proposals`, `encap`, a `local` and a `remote`
//! [`AuthConfig`] (identity; PSK authentication), lifetimes and liveness
//! (`rekey_time`, `rand_time`, `dpd_delay`, `dpd_timeout`, `dpd_action`),
//! and `children` ([`ChildConfig`]: `local_ts`, `remote_ts`,
//! `esp_proposals`, `start_action`, `rekey_time`, `life_time`,
//! `rand_time`, `rekey_bytes`, `rekey_packets`, `per_cpu_sas`,
//! `per_cpu_max`). PSKs live apart, in [`Secrets`], looked up by the pair
//! of identities as strongSwan does with its `ike` secrets. Endpoint-wide
//! knobs (ports, retransmission, timeouts, window size, RFC 9611 resources)
//! are in
//! [`EndpointConfig`]. Defaults are swanctl's (see [`crate::lifetime`]).
//!
//! Core crates take validated structs: the parsers here
//! turn strings into typed values and report what is wrong; they never
//! read files.

use crate::cert::{LocalCredential, TrustStore};
use crate::identity::Identity;
pub use crate::lifetime::{AfterDeath, CloseAction, DpdAction, PerCpuSas, Recover, Unique};
use crate::proposal::{Proposal, ProposalError, Protocol};
use crate::ts::{TrafficSelector, TsConfig, TsError};
use core::net::IpAddr;
use core::time::Duration;
use esparto_crypto::SecretBytes;
use std::sync::Arc;

/// What to do with a child when the configuration is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAction {
    /// Wait for the peer (responder only).
    #[default]
    None,
    /// Install a trap policy; traffic triggers `acquire`.
    Trap,
    /// Initiate at once.
    Start,
}

/// How one side authenticates: with a pre-shared key (RFC 7296 §2.15), or
/// with an X.509 certificate and a signature (RFC 7427,
/// [`crate::cert`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// The identity (IDi/IDr). `None` for the local side means "our IKE
    /// address" (with a certificate: its subject DN); for the remote side,
    /// `None` or `%any` accepts any identity for which a PSK is found, or
    /// that a trusted certificate names.
    pub id: Option<Identity>,
    /// Local side only: sign with this certificate's key instead of a PSK.
    pub credential: Option<Arc<LocalCredential>>,
    /// Remote side only: the peer must sign, with a certificate chaining
    /// to one of these CAs.
    pub trust: Option<Arc<TrustStore>>,
}

impl AuthConfig {
    /// A side identified by `id`, authenticating with a PSK.
    pub fn psk(id: Option<Identity>) -> Self {
        AuthConfig {
            id,
            ..AuthConfig::default()
        }
    }
}

/// One Child SA configuration (swanctl `children.<name>`).
///
/// `Default` is an empty, invalid configuration (no selectors, no
/// proposals) with swanctl's lifetimes; it exists so that struct literals
/// can end in `..ChildConfig::default()` and keep compiling as fields are
/// added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildConfig {
    /// Child name (used in events).
    pub name: Arc<str>,
    /// Local traffic selectors.
    pub local_ts: Vec<TsConfig>,
    /// Remote traffic selectors.
    pub remote_ts: Vec<TsConfig>,
    /// ESP proposals, in preference order. A KE method in a proposal
    /// requests PFS for CREATE_CHILD_SA (the first Child SA, in IKE_AUTH,
    /// never has its own key exchange, RFC 7296 §1.2).
    pub esp_proposals: Vec<Proposal>,
    /// What to do on load.
    pub start_action: StartAction,
    /// Rekey the Child SA this long after it was created (swanctl
    /// `rekey_time`, default 1 h), minus a random part of up to
    /// [`rand_time`](Self::rand_time) (RFC 7296 §2.8: rekeying "SHOULD be
    /// jittered"). `None`: no time-based rekeying.
    pub rekey_time: Option<Duration>,
    /// Delete the Child SA this long after it was created if it was not
    /// rekeyed (swanctl `life_time`). `None`: `rekey_time` + 10 %.
    pub life_time: Option<Duration>,
    /// Upper bound of the random part subtracted from `rekey_time`
    /// (swanctl `rand_time`). `None`: `life_time - rekey_time`, i.e. 10 %
    /// of `rekey_time` with the default `life_time`.
    pub rand_time: Option<Duration>,
    /// Rekey after this many bytes (0: never). Counted by the data plane,
    /// which tells the daemon, which calls [`crate::Endpoint::rekey_child`];
    /// the engine only carries the value.
    pub rekey_bytes: u64,
    /// Rekey after this many packets (0: never); like `rekey_bytes`.
    pub rekey_packets: u64,
    /// RFC 9611 per-resource Child SAs (swanctl-style `per_cpu_sas`).
    pub per_cpu_sas: PerCpuSas,
    /// At most this many per-resource Child SAs in the group: the most we
    /// negotiate ourselves, and the most we accept from the peer before
    /// answering TS_MAX_QUEUE (RFC 9611 §4). Ignored with `PerCpuSas::No`.
    pub per_cpu_max: u16,
    /// Offer and accept IPComp with DEFLATE (RFC 7296 §2.22).
    pub ipcomp: bool,
}

impl Default for ChildConfig {
    fn default() -> Self {
        ChildConfig {
            name: "".into(),
            local_ts: Vec::new(),
            remote_ts: Vec::new(),
            esp_proposals: Vec::new(),
            start_action: StartAction::None,
            rekey_time: Some(crate::lifetime::CHILD_REKEY_TIME),
            life_time: None,
            rand_time: None,
            rekey_bytes: 0,
            rekey_packets: 0,
            per_cpu_sas: PerCpuSas::No,
            per_cpu_max: crate::lifetime::PER_CPU_MAX,
            ipcomp: false,
        }
    }
}

/// One connection as the engine takes it (swanctl `connections.<name>`):
/// addresses, IKE proposals, authentication, liveness and its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionConfig {
    /// Connection name (used in events and logs).
    pub name: Arc<str>,
    /// Our addresses; empty accepts any (responder).
    pub local_addrs: Vec<IpAddr>,
    /// Peer addresses; the initiator uses the first; empty (with no
    /// `remote_hosts`) accepts any.
    pub remote_addrs: Vec<IpAddr>,
    /// Peer host names (swanctl allows DNS names in `remote_addrs`), with
    /// where each stood among the addresses. The driver resolves them
    /// ([`crate::Event::ResolveHost`], [`crate::Endpoint::host_resolved`]):
    /// an initiation waits for a fresh answer, and a responder accepts the
    /// peer from the addresses the name last resolved to.
    pub remote_hosts: Vec<RemoteHost>,
    /// Peer IKE port (500).
    pub remote_port: u16,
    /// IKE proposals, in preference order.
    pub proposals: Vec<Proposal>,
    /// Force UDP encapsulation of ESP even without a NAT (swanctl `encap`):
    /// we then send a NAT_DETECTION_SOURCE_IP that cannot match (RFC 7296
    /// §2.23 allows it; strongSwan does the same), so both sides float to
    /// port 4500 and use ESP-in-UDP. Esparto's data plane speaks only
    /// ESP-in-UDP, so the daemon sets this unless it knows the path has a NAT.
    pub encap: bool,
    /// Local authentication.
    pub local: AuthConfig,
    /// Remote authentication.
    pub remote: AuthConfig,
    /// Child SA configurations.
    pub children: Vec<ChildConfig>,
    /// Send a liveness check (empty INFORMATIONAL, §1.4) after this much
    /// time without hearing from the peer. `None` disables.
    pub dpd_delay: Option<Duration>,
    /// Declare the peer dead when a request (a liveness check or any
    /// other) has gone unanswered this long (swanctl `dpd_timeout`).
    /// `None`: when retransmissions give up (RFC 7296 §2.4).
    pub dpd_timeout: Option<Duration>,
    /// What follows when the peer is found dead (`IkeSaDeleted` with
    /// `Timeout` or `InvalidIkeSpi`): `Restart` makes the endpoint initiate
    /// again with back-off, `Trap` is the daemon's (trap policies).
    pub dpd_action: DpdAction,
    /// What follows when the peer deletes the IKE SA (`IkeSaDeleted` with
    /// `DeletedByPeer`): `Start` makes the endpoint initiate again with
    /// back-off, `Trap` is the daemon's.
    pub close_action: CloseAction,
    /// What ESP for an unknown SPI from the peer makes us do while we hold
    /// no IKE SA with it (we restarted).
    pub recover: Recover,
    /// What a new IKE SA with the same identities does to the ones up
    /// (swanctl `unique`).
    pub unique: Unique,
    /// IKE fragmentation (swanctl `fragmentation`).
    pub fragmentation: Fragmentation,
    /// MOBIKE (RFC 4555, swanctl `mobike`, default on): announced in
    /// IKE_AUTH; with a peer that announces it too, an IKE SA we
    /// initiated moves to a new local address instead of ending, and one
    /// the peer initiated follows the peer's UPDATE_SA_ADDRESSES.
    pub mobike: bool,
    /// Rekey the IKE SA this long after it was created (swanctl
    /// `rekey_time`, default 4 h), minus a random part of up to
    /// `rand_time` (RFC 7296 §2.8). `None`: never.
    pub rekey_time: Option<Duration>,
    /// Upper bound of the random part (swanctl `rand_time`). `None`: 10 %
    /// of `rekey_time` (swanctl's default `over_time`).
    pub rand_time: Option<Duration>,
}

impl Default for ConnectionConfig {
    /// An empty, invalid connection (no proposals, no children) with
    /// swanctl's defaults, for `..ConnectionConfig::default()` in struct literals.
    fn default() -> Self {
        ConnectionConfig {
            name: "".into(),
            local_addrs: vec![],
            remote_addrs: vec![],
            remote_hosts: vec![],
            remote_port: 500,
            proposals: vec![],
            encap: false,
            local: AuthConfig::default(),
            remote: AuthConfig::default(),
            children: vec![],
            dpd_delay: None,
            dpd_timeout: None,
            dpd_action: DpdAction::Clear,
            close_action: CloseAction::None,
            recover: Recover::Notify,
            unique: Unique::No,
            fragmentation: Fragmentation::Yes,
            mobike: true,
            rekey_time: Some(crate::lifetime::IKE_REKEY_TIME),
            rand_time: None,
        }
    }
}

/// A peer's host name in a connection's `remote_addrs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteHost {
    /// The name, as written (resolved by the driver).
    pub name: Arc<str>,
    /// How many of `remote_addrs` come before it: an initiator tries the
    /// literal addresses and the names' answers in the order written.
    pub position: usize,
}

/// A configuration string that could not be turned into a typed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A bad proposal.
    Proposal(ProposalError),
    /// A bad traffic selector.
    Ts(TsError),
    /// A bad identity.
    Identity(crate::identity::IdentityError),
    /// A structural problem (no children, no proposals, …).
    Invalid(&'static str),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::Proposal(e) => e.fmt(f),
            ConfigError::Ts(e) => e.fmt(f),
            ConfigError::Identity(e) => e.fmt(f),
            ConfigError::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<ProposalError> for ConfigError {
    fn from(e: ProposalError) -> Self {
        ConfigError::Proposal(e)
    }
}
impl From<TsError> for ConfigError {
    fn from(e: TsError) -> Self {
        ConfigError::Ts(e)
    }
}
impl From<crate::identity::IdentityError> for ConfigError {
    fn from(e: crate::identity::IdentityError) -> Self {
        ConfigError::Identity(e)
    }
}

impl ChildConfig {
    /// Build from swanctl-style strings: comma-separated selectors and proposals.
    pub fn new(
        name: &str,
        local_ts: &str,
        remote_ts: &str,
        esp_proposals: &str,
    ) -> Result<Self, ConfigError> {
        let ts = |s: &str| -> Result<Vec<TsConfig>, ConfigError> {
            s.split(',')
                .filter(|w| !w.trim().is_empty())
                .map(|w| Ok(TsConfig::parse(w)?))
                .collect()
        };
        let c = ChildConfig {
            name: name.into(),
            local_ts: ts(local_ts)?,
            remote_ts: ts(remote_ts)?,
            esp_proposals: Proposal::parse_list(Protocol::Esp, esp_proposals)?,
            ..ChildConfig::default()
        };
        c.validate()?;
        Ok(c)
    }

    /// Check the invariants the core relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.local_ts.is_empty() || self.remote_ts.is_empty() {
            return Err(ConfigError::Invalid("child without traffic selectors"));
        }
        if self.esp_proposals.is_empty() {
            return Err(ConfigError::Invalid("child without ESP proposals"));
        }
        if self
            .esp_proposals
            .iter()
            .any(|p| p.protocol != Protocol::Esp)
        {
            return Err(ConfigError::Invalid("child proposal is not ESP"));
        }
        if self.rekey_time.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::Invalid("child rekey_time is zero"));
        }
        if let (Some(r), Some(l)) = (self.rekey_time, self.life_time) {
            if l <= r {
                return Err(ConfigError::Invalid(
                    "child life_time must exceed rekey_time",
                ));
            }
        }
        if self.per_cpu_sas != PerCpuSas::No && self.per_cpu_max == 0 {
            return Err(ConfigError::Invalid("per_cpu_max is zero"));
        }
        Ok(())
    }

    /// Local selectors with `dynamic` resolved to `own`.
    pub fn local_selectors(&self, own: IpAddr) -> Vec<TrafficSelector> {
        self.local_ts.iter().map(|t| t.resolve(own)).collect()
    }

    /// Remote selectors with `dynamic` resolved to `peer`.
    pub fn remote_selectors(&self, peer: IpAddr) -> Vec<TrafficSelector> {
        self.remote_ts.iter().map(|t| t.resolve(peer)).collect()
    }
}

impl ConnectionConfig {
    /// A connection with swanctl defaults: port 500, no DPD, no encap
    /// forcing, identities defaulting to addresses.
    pub fn new(name: &str, proposals: &str) -> Result<Self, ConfigError> {
        let c = ConnectionConfig {
            name: name.into(),
            proposals: Proposal::parse_list(Protocol::Ike, proposals)?,
            ..ConnectionConfig::default()
        };
        if c.proposals.is_empty() {
            return Err(ConfigError::Invalid("connection without proposals"));
        }
        Ok(c)
    }

    /// Check the invariants the core relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.proposals.is_empty() {
            return Err(ConfigError::Invalid("connection without proposals"));
        }
        if self.proposals.iter().any(|p| p.protocol != Protocol::Ike) {
            return Err(ConfigError::Invalid("connection proposal is not IKE"));
        }
        if self.proposals.len() > 255 {
            return Err(ConfigError::Invalid("more than 255 proposals"));
        }
        if self.children.is_empty() {
            return Err(ConfigError::Invalid("connection without children"));
        }
        if self.remote_hosts.iter().any(|h| h.name.is_empty()) {
            return Err(ConfigError::Invalid("empty remote host name"));
        }
        if !self.remote_hosts.is_sorted_by_key(|h| h.position) {
            return Err(ConfigError::Invalid("remote host names out of order"));
        }
        if matches!(self.local.id, Some(Identity::Any)) {
            return Err(ConfigError::Invalid("local identity %any"));
        }
        if self.rekey_time.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::Invalid("IKE rekey_time is zero"));
        }
        for c in &self.children {
            c.validate()?;
        }
        Ok(())
    }

    /// The child configuration named `name`.
    pub fn child(&self, name: &str) -> Option<&ChildConfig> {
        self.children.iter().find(|c| &*c.name == name)
    }

    /// Does this connection accept an IKE_SA_INIT between these addresses?
    /// `resolved` answers whether one of its `remote_hosts` last resolved
    /// to `remote`.
    pub fn matches_addrs(
        &self,
        local: IpAddr,
        remote: IpAddr,
        resolved: impl Fn(&str, IpAddr) -> bool,
    ) -> bool {
        (self.local_addrs.is_empty() || self.local_addrs.contains(&local))
            && ((self.remote_addrs.is_empty() && self.remote_hosts.is_empty())
                || self.remote_addrs.contains(&remote)
                || self.remote_hosts.iter().any(|h| resolved(&h.name, remote)))
    }

    /// The peer's addresses in the order written, each host name replaced
    /// by what `resolved` gives for it (its last answer).
    pub fn remote_candidates<'a>(
        &'a self,
        resolved: impl Fn(&str) -> &'a [IpAddr],
    ) -> Vec<IpAddr> {
        let mut out = Vec::with_capacity(self.remote_addrs.len() + self.remote_hosts.len());
        let mut hosts = self.remote_hosts.iter().peekable();
        for (i, a) in self.remote_addrs.iter().enumerate() {
            while let Some(h) = hosts.next_if(|h| h.position <= i) {
                out.extend_from_slice(resolved(&h.name));
            }
            out.push(*a);
        }
        for h in hosts {
            out.extend_from_slice(resolved(&h.name));
        }
        out
    }

    /// Whether the peer has an address to initiate to, written or by name.
    pub fn has_remote(&self) -> bool {
        !self.remote_addrs.is_empty() || !self.remote_hosts.is_empty()
    }

    /// The local identity, defaulting to our certificate's subject, else
    /// the local IKE address.
    pub fn local_id(&self, local: IpAddr) -> Identity {
        match (&self.local.id, &self.local.credential) {
            (Some(id), Some(c)) => c.wire_identity(id),
            (Some(id), None) => id.clone(),
            (None, Some(c)) => c.subject().unwrap_or_else(|| Identity::from(local)),
            (None, None) => Identity::from(local),
        }
    }

    /// Does either side authenticate with certificates?
    pub fn uses_certs(&self) -> bool {
        self.local.credential.is_some() || self.remote.trust.is_some()
    }

    /// What the end of one of its IKE SAs for `reason` calls for
    /// ([`crate::lifetime::after_death`]).
    pub fn after_death(&self, reason: crate::event::Reason) -> AfterDeath {
        crate::lifetime::after_death(self.dpd_action, self.close_action, reason)
    }

    /// Does the configured remote identity accept `peer`?
    pub fn accepts_remote_id(&self, peer: &Identity) -> bool {
        self.remote.id.as_ref().is_none_or(|id| id.matches(peer))
    }
}

/// One pre-shared key and the identities it belongs to.
pub struct Psk {
    /// Identities this key is for; empty matches any pair (lowest priority).
    pub ids: Vec<Identity>,
    /// The key.
    pub secret: SecretBytes,
}

impl core::fmt::Debug for Psk {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Psk")
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

/// The PSK store (swanctl `secrets.ike<suffix>`).
#[derive(Debug, Default)]
pub struct Secrets {
    /// All keys.
    pub psks: Vec<std::sync::Arc<Psk>>,
}

impl Secrets {
    /// Add a key for the given identities.
    pub fn add_psk(&mut self, ids: &[Identity], secret: &[u8]) {
        self.psks.push(std::sync::Arc::new(Psk {
            ids: ids.to_vec(),
            secret: SecretBytes::from_slice(secret),
        }));
    }

    /// The best key for the pair of identities, strongSwan-style: a key
    /// listing both identities beats one listing only the peer's, which
    /// beats one listing only ours, which beats a key with no identities.
    /// A key whose identities match neither is not a candidate; among
    /// equals the first added wins.
    ///
    /// This scans every key: it is the rule's statement. An [`crate::Endpoint`]
    /// answers the same question from an index by identity (`psk.rs`,
    /// checked against this function by a property test).
    pub fn find_psk(&self, local: &Identity, remote: &Identity) -> Option<&SecretBytes> {
        let score = |p: &Psk| -> Option<u8> {
            if p.ids.is_empty() {
                return Some(0);
            }
            let l = p.ids.iter().any(|i| !i.is_any() && i.matches(local));
            let r = p.ids.iter().any(|i| !i.is_any() && i.matches(remote));
            let any = p.ids.iter().any(Identity::is_any);
            match (l, r) {
                (true, true) => Some(3),
                (false, true) => Some(2),
                (true, false) => Some(1),
                (false, false) if any => Some(0),
                (false, false) => None,
            }
        };
        let mut best: Option<(u8, &Psk)> = None;
        for p in &self.psks {
            if let Some(s) = score(p) {
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, p));
                }
            }
        }
        best.map(|(_, p)| &p.secret)
    }
}

/// Retransmission schedule (RFC 7296 §2.1: "retransmission times MUST
/// increase exponentially"). strongSwan's defaults: 4 s, factor 1.8, five
/// retransmissions, i.e. give up after about 165 s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetransmitConfig {
    /// Timeout before the first retransmission.
    pub timeout: Duration,
    /// Each timeout is the previous one times this.
    pub base: f64,
    /// Retransmissions before giving up.
    pub tries: u32,
    /// No single timeout exceeds this.
    pub max_timeout: Duration,
}

impl Default for RetransmitConfig {
    fn default() -> Self {
        RetransmitConfig {
            timeout: Duration::from_secs(4),
            base: 1.8,
            tries: 5,
            max_timeout: Duration::from_secs(120),
        }
    }
}

impl RetransmitConfig {
    /// How long to wait after transmission number `n` (0 = the original).
    pub fn timeout_after(&self, n: u32) -> Duration {
        let f = self.base.max(1.0).powi(n.min(64) as i32);
        let t = self.timeout.as_secs_f64() * f;
        Duration::from_secs_f64(t.min(self.max_timeout.as_secs_f64()))
    }
}

/// Endpoint-wide settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointConfig {
    /// The IKE port (500).
    pub ike_port: u16,
    /// The NAT-T port (4500, RFC 3948); datagrams on it carry the non-ESP marker.
    pub natt_port: u16,
    /// Retransmission schedule for our requests.
    pub retransmit: RetransmitConfig,
    /// A responder drops an IKE SA that has not authenticated within this.
    pub half_open_timeout: Duration,
    /// Nonce length we send (RFC 7296 §2.10: at least half the PRF key
    /// size; 32 octets covers SHA-512).
    pub nonce_len: usize,
    /// NAT keepalive interval (RFC 3948 §2.3) when we are behind a NAT.
    pub keepalive_interval: Duration,
    /// Upper bound on IKE SAs (established and half-open) this endpoint holds.
    pub max_ike_sas: usize,
    /// Denial-of-service defence (RFC 7296 §2.6): with this many half-open
    /// IKE SAs (responder side, not yet authenticated) or more, an
    /// IKE_SA_INIT request without a valid COOKIE is answered with only a
    /// COOKIE notify and costs no state. 0 demands cookies always.
    /// strongSwan's `charon.cookie_threshold` (default 30).
    pub cookie_threshold: usize,
    /// The same, counted per source address: once one address holds this
    /// many half-open IKE SAs, its further requests need a cookie. Below
    /// `half_open_per_source`, so that a blind flood forging a real peer's
    /// address cannot push that peer to the per-source limit and lock it
    /// out (strongSwan's `cookie_threshold_ip`, default 3).
    pub cookie_threshold_per_source: usize,
    /// At most this many half-open IKE SAs from one address; requests
    /// beyond are dropped (and counted), valid cookie or not
    /// (strongSwan's `block_threshold`, default 5).
    pub half_open_per_source: usize,
    /// `cookie_threshold_per_source` for an address some connection
    /// names in its `remote_addrs`: a configured peer may bring up many
    /// connections at once without a cookie round trip. Spoofing that
    /// address still stalls at this many half-open SAs (the spoofer
    /// cannot return cookies), and `cookie_threshold` still counts them.
    pub cookie_threshold_per_peer: usize,
    /// `half_open_per_source` for a configured peer's address; above
    /// `cookie_threshold_per_peer`, so a spoofer of that address cannot
    /// lock the peer out.
    pub half_open_per_peer: usize,
    /// At most this many half-open IKE SAs in all; requests beyond are
    /// dropped and counted (strongSwan's `init_limit_half_open`).
    pub max_half_open: usize,
    /// Initiator pacing: at most this many of our IKE SAs to one peer
    /// address between their IKE_SA_INIT request and the end of
    /// IKE_AUTH; further initiations to it wait, in order, until one of
    /// those is established or gone. The default, 2, keeps a responder
    /// with strongSwan's defaults (`cookie_threshold_ip = 3`,
    /// `block_threshold = 5`) from demanding cookies or dropping requests
    /// when many connections to it start at once: one below its cookie
    /// threshold, because a busy charon still counts an IKE SA half-open
    /// for a moment after it answered its IKE_AUTH. 0 turns pacing off.
    pub initiating_per_peer: usize,
    /// How long a cookie secret is used before a new one is drawn (§2.6:
    /// "periodically changed").
    pub cookie_secret_lifetime: Duration,
    /// How long cookies made with the previous secret still pass after it
    /// was replaced (§2.6: "keep the old value of <secret> around for a
    /// short time").
    pub cookie_grace: Duration,
    /// How many requests of the peer we process in parallel and whose
    /// responses we keep for retransmission, announced in IKE_AUTH with
    /// SET_WINDOW_SIZE (RFC 7296 §2.3) when above one. Capped at
    /// [`crate::lifetime::MAX_WINDOW`].
    pub window_size: u32,
    /// RFC 9611 resources: how many the data plane has (for the daemon,
    /// its workers). `per_cpu_sas = eager` negotiates one per-resource
    /// Child SA for each, up to the child's `per_cpu_max`.
    pub resources: u16,
    /// Largest IP datagram an IKE message of ours may fill before it is
    /// sent in fragments, where the peer supports them (RFC 7383; IP and
    /// UDP headers and the non-ESP marker count). strongSwan's
    /// `charon.fragment_size`, 1280 by default.
    pub fragment_size: usize,
}

/// [`EndpointConfig::fragment_size`]'s default (strongSwan's).
pub const DEFAULT_FRAGMENT_SIZE: usize = 1280;
/// The smallest `fragment_size`: every IPv4 host takes 576-octet datagrams
/// (RFC 791), and RFC 7383 §2.5.1 names 576 for IPv4.
pub const MIN_FRAGMENT_SIZE: usize = 576;

/// IKE fragmentation (RFC 7383), per connection as swanctl's
/// `fragmentation`. Fragments the peer sends are accepted whatever the
/// value, as strongSwan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fragmentation {
    /// Announced (IKEV2_FRAGMENTATION_SUPPORTED), and our messages above
    /// `fragment_size` are sent in fragments if the peer announced it too.
    #[default]
    Yes,
    /// Announced, but our messages are never fragmented.
    Accept,
    /// Not announced: the peer does not fragment towards us, nor we.
    No,
}

impl Fragmentation {
    /// swanctl's names (`force` is IKEv1's).
    pub const NAMES: [(&'static str, Fragmentation); 3] = [
        ("yes", Fragmentation::Yes),
        ("accept", Fragmentation::Accept),
        ("no", Fragmentation::No),
    ];
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            ike_port: 500,
            natt_port: 4500,
            retransmit: RetransmitConfig::default(),
            half_open_timeout: Duration::from_secs(30),
            nonce_len: 32,
            keepalive_interval: Duration::from_secs(20),
            max_ike_sas: 1_000_000,
            cookie_threshold: 100,
            cookie_threshold_per_source: 3,
            half_open_per_source: 5,
            cookie_threshold_per_peer: 50,
            half_open_per_peer: 100,
            max_half_open: 10_000,
            initiating_per_peer: 2,
            cookie_secret_lifetime: Duration::from_secs(60),
            cookie_grace: Duration::from_secs(10),
            window_size: 8,
            resources: 1,
            fragment_size: DEFAULT_FRAGMENT_SIZE,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn backoff_is_exponential_and_capped() {
        let r = RetransmitConfig::default();
        assert_eq!(r.timeout_after(0), Duration::from_secs(4));
        assert_eq!(r.timeout_after(1), Duration::from_secs_f64(7.2));
        assert!(r.timeout_after(2) > r.timeout_after(1));
        assert_eq!(r.timeout_after(30), Duration::from_secs(120));
    }

    #[test]
    fn psk_lookup_prefers_the_most_specific() {
        let moon = Identity::parse("@moon").unwrap();
        let sun = Identity::parse("@sun").unwrap();
        let carol = Identity::parse("carol@x").unwrap();
        let mut s = Secrets::default();
        s.add_psk(&[], b"wild");
        s.add_psk(std::slice::from_ref(&moon), b"moon-only");
        s.add_psk(&[moon.clone(), sun.clone()], b"moon-sun");
        s.add_psk(std::slice::from_ref(&carol), b"carol");
        assert_eq!(s.find_psk(&moon, &sun).unwrap().as_slice(), b"moon-sun");
        assert_eq!(s.find_psk(&sun, &moon).unwrap().as_slice(), b"moon-sun");
        assert_eq!(s.find_psk(&moon, &carol).unwrap().as_slice(), b"carol");
        assert_eq!(
            s.find_psk(&moon, &Identity::parse("@x").unwrap())
                .unwrap()
                .as_slice(),
            b"moon-only"
        );
        assert_eq!(
            s.find_psk(&sun, &Identity::parse("@x").unwrap())
                .unwrap()
                .as_slice(),
            b"moon-sun"
        );
        assert_eq!(
            s.find_psk(
                &Identity::parse("@y").unwrap(),
                &Identity::parse("@x").unwrap()
            )
            .unwrap()
            .as_slice(),
            b"wild"
        );
        let mut t = Secrets::default();
        t.add_psk(&[carol], b"c");
        assert!(t.find_psk(&moon, &sun).is_none());
    }

    #[test]
    fn connection_validation() {
        let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
        assert!(c.validate().is_err(), "no children");
        c.children
            .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
        c.validate().unwrap();
        assert!(c.child("net").is_some());
        assert!(ConnectionConfig::new("gw", "").is_err());
        assert!(ChildConfig::new("n", "", "10.2.0.0/16", "aes256gcm16").is_err());
        assert!(
            ChildConfig::new("n", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16-prfsha256").is_err()
        );
    }
}
