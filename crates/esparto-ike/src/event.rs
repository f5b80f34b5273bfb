//! What the endpoint tells its driver: datagrams to send ([`Transmit`])
//! and things that happened ([`Event`]).
//!
//! Events are the contract with the daemon, which turns them into data
//! plane operations: `ChildSaEstablished` carries everything needed to
//! install an inbound and an outbound ESP SA (SPIs, suite, KEYMAT for each
//! direction in zeroize-on-drop buffers, selectors, the UDP endpoints for
//! ESP-in-UDP), `ChildSaDeleted` says which to remove, `PeerAddressChanged`
//! which ESP-in-UDP destination to update after a NAT rebinding. Failures
//! carry a reason that says whose fault it was (rustls habit): the peer
//! rejected us, we rejected the peer, the peer went silent.
//!
//! ## Rekeying, make-before-break (RFC 7296 §2.8)
//!
//! A rekeyed Child SA arrives as a `ChildSaEstablished` with `rekeys:
//! Some(old inbound SPI)` and the old SA's `resource`, always *before* the
//! old SA's `ChildSaDeleted { reason: Rekeyed }`. "When there are two SAs
//! eligible to receive packets, a node MUST accept incoming packets on
//! both SAs" (§2.8), so the daemon installs the new inbound SA at once and
//! keeps the old one until its `ChildSaDeleted`. When to *send* on the new
//! SA is given by `outbound_active`:
//! - `true` (we initiated the rekey): the peer installed the new SA before
//!   it answered; switch the slot's outbound SA now.
//! - `false` (we answered the peer's rekey): the peer installs the new SA
//!   only when our answer arrives, so packets sent on it at once could
//!   beat the answer and be dropped. Keep sending on the old SA until
//!   `ChildSaOutboundActive` names the new one; it comes when the peer
//!   deletes the old SA (proof that it has the new one), right before the
//!   old SA's `ChildSaDeleted` — strongSwan's responder does the same. A
//!   redundant SA from a rekey collision (§2.8.1) never becomes active; it
//!   is deleted (`ChildSaDeleted`) instead.
//!
//! An IKE SA rekey (§1.3.2) moves every Child SA to the new IKE SA: the
//! endpoint reports `IkeSaRekeyed { old, new }`, later events name `new`,
//! and `old` disappears without an `IkeSaDeleted`. Calls naming `old` are
//! forwarded to `new` meanwhile.
//!
//! ## Per-resource Child SAs (RFC 9611)
//!
//! `resource: Some(k)` is worker k's own sub-SA, which we negotiated for
//! it (the inbound SPI steers to worker k). `per_resource: true` with
//! `resource: None` is a sub-SA the *peer* negotiated for one of its
//! resources: install it as the sub-SA of a worker that has none yet, or
//! inbound-only. `per_resource: false, resource: None` is a group's
//! fallback SA (or a plain Child SA). `PerResourceUnavailable` tells the
//! daemon to stop asking for sub-SAs of a child on that IKE SA.

use crate::identity::Identity;
use crate::ts::TrafficSelector;
use core::fmt;
use core::net::SocketAddr;
use esparto_crypto::{EspSuite, SecretBytes};
use esparto_wire::ike::NotifyType;
use std::sync::Arc;

/// Handle of an IKE SA: our own IKE SPI, unique within an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IkeSaId(pub u64);

impl fmt::Display for IkeSaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Source address (port 500 or the NAT-T port).
    pub local: SocketAddr,
    /// Destination address.
    pub remote: SocketAddr,
    /// The UDP payload. On the NAT-T port it starts with the four-octet
    /// non-ESP marker (RFC 3948 §2.2), except for a NAT keepalive, which is
    /// the single octet 0xFF (RFC 3948 §2.3).
    pub data: Vec<u8>,
}

/// Why an SA ended or could not be set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The peer deleted it (INFORMATIONAL Delete).
    DeletedByPeer,
    /// We deleted it (`terminate`).
    Terminated,
    /// The peer stopped answering: retransmissions exhausted (RFC 7296 §2.4).
    Timeout,
    /// The peer answered one of our requests with an unprotected
    /// INVALID_IKE_SPI (RFC 7296 §2.21.4): it no longer knows the IKE SA,
    /// usually because it restarted. Treated like a dead peer.
    InvalidIkeSpi,
    /// A responder's IKE SA did not authenticate in time.
    HalfOpenExpired,
    /// No proposal acceptable (our verdict or the peer's NO_PROPOSAL_CHOSEN).
    NoProposalChosen,
    /// The peer insisted on a key exchange group we do not offer.
    InvalidKePayload,
    /// Authentication failed (see the `AuthFailed` event for who and why).
    AuthenticationFailed,
    /// No acceptable traffic selectors (TS_UNACCEPTABLE).
    TsUnacceptable,
    /// The peer answered with another error notify.
    PeerError(NotifyType),
    /// The peer sent something that breaks the protocol.
    ProtocolError(&'static str),
    /// A local problem (configuration, SPI space, key derivation).
    Local(&'static str),
    /// Replaced by a rekeyed SA (RFC 7296 §2.8): its successor was
    /// announced before this deletion.
    Rekeyed,
    /// Its hard lifetime (`life_time`) ran out before it was rekeyed.
    Expired,
    /// The peer authenticated a new IKE SA with INITIAL_CONTACT (§2.4): it
    /// restarted and no longer knows this one. Deleted without a Delete.
    PeerRestarted,
    /// The peer did not answer SA_RESOURCE_INFO: it does not support
    /// per-resource Child SAs (RFC 9611).
    PerResourceUnsupported,
    /// Our address it used left the host ([`crate::Endpoint::local_address_gone`]):
    /// without MOBIKE it cannot move; what follows is as for a dead peer
    /// (`dpd_action`).
    LocalAddressGone,
    /// An initiation found no address to send to: the peer's host names
    /// did not resolve (or not in time, [`crate::lifetime::RESOLVE_PATIENCE`])
    /// and no other address was usable. What follows is as for a dead
    /// peer (`dpd_action`): initiated again with back-off.
    Unresolved,
}

impl Reason {
    /// A stable snake_case name for logs, status output and metrics (a
    /// peer's error notify and the text of protocol and local errors are
    /// left out: the name has a fixed set of values).
    pub fn name(self) -> &'static str {
        match self {
            Reason::DeletedByPeer => "deleted_by_peer",
            Reason::Terminated => "terminated",
            Reason::Timeout => "timeout",
            Reason::InvalidIkeSpi => "invalid_ike_spi",
            Reason::HalfOpenExpired => "half_open_expired",
            Reason::NoProposalChosen => "no_proposal_chosen",
            Reason::InvalidKePayload => "invalid_ke_payload",
            Reason::AuthenticationFailed => "authentication_failed",
            Reason::TsUnacceptable => "ts_unacceptable",
            Reason::PeerError(_) => "peer_error",
            Reason::ProtocolError(_) => "protocol_error",
            Reason::Local(_) => "local",
            Reason::Rekeyed => "rekeyed",
            Reason::Expired => "expired",
            Reason::PeerRestarted => "peer_restarted",
            Reason::LocalAddressGone => "local_address_gone",
            Reason::Unresolved => "unresolved",
            Reason::PerResourceUnsupported => "per_resource_unsupported",
        }
    }
}

/// Which side of an authentication failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// The peer's AUTH payload did not verify with the PSK we hold for it.
    BadAuth,
    /// No PSK configured for this pair of identities.
    NoSecret,
    /// The peer's identity matches no connection.
    UnknownIdentity,
    /// The peer used an authentication method we do not support.
    UnsupportedMethod,
    /// The peer told us our AUTH did not verify (AUTHENTICATION_FAILED).
    RejectedByPeer,
    /// The peer's certificate (or one of its chain) is expired.
    CertExpired,
    /// The peer's certificate is not valid yet.
    CertNotYetValid,
    /// The peer's chain leads to no CA configured for the connection.
    UnknownCa,
    /// A configured CRL revokes the peer's certificate or a CA above it.
    CertRevoked,
    /// The peer's IKE identity is not in its certificate (RFC 4945 §3.1).
    IdentityNotInCert,
    /// The peer's signature does not verify with its certificate's key.
    BadSignature,
    /// No certificate, an unusable one, or a signature algorithm we do not
    /// implement.
    CertInvalid,
    /// Authenticated, but refused by `unique = keep`: an IKE SA of the
    /// connection with the same identities is up from another address.
    UniqueKeep,
}

impl From<&crate::cert::CertRefusal> for AuthFailure {
    fn from(r: &crate::cert::CertRefusal) -> Self {
        use crate::cert::CertRefusal as R;
        match r {
            R::Expired => AuthFailure::CertExpired,
            R::NotYetValid => AuthFailure::CertNotYetValid,
            R::UnknownCa => AuthFailure::UnknownCa,
            R::Revoked => AuthFailure::CertRevoked,
            R::IdentityNotInCert(_) => AuthFailure::IdentityNotInCert,
            R::BadSignature => AuthFailure::BadSignature,
            R::KeyUsage
            | R::UnsupportedAlgorithm
            | R::NoCertificate
            | R::Oversized
            | R::Invalid(_) => AuthFailure::CertInvalid,
        }
    }
}

impl AuthFailure {
    /// A stable snake_case name for status output and metrics.
    pub fn name(self) -> &'static str {
        match self {
            AuthFailure::BadAuth => "bad_auth",
            AuthFailure::NoSecret => "no_secret",
            AuthFailure::UnknownIdentity => "unknown_identity",
            AuthFailure::UnsupportedMethod => "unsupported_method",
            AuthFailure::RejectedByPeer => "rejected_by_peer",
            AuthFailure::CertExpired => "cert_expired",
            AuthFailure::CertNotYetValid => "cert_not_yet_valid",
            AuthFailure::UnknownCa => "unknown_ca",
            AuthFailure::CertRevoked => "cert_revoked",
            AuthFailure::IdentityNotInCert => "identity_not_in_cert",
            AuthFailure::BadSignature => "bad_signature",
            AuthFailure::CertInvalid => "cert_invalid",
            AuthFailure::UniqueKeep => "unique_keep",
        }
    }
}

/// A Child SA ready to install.
pub struct ChildSaEstablished {
    /// The IKE SA it belongs to.
    pub ike_sa: IkeSaId,
    /// Connection name.
    pub connection: Arc<str>,
    /// Child configuration name.
    pub child: Arc<str>,
    /// Our inbound SPI (the peer sends with it).
    pub inbound_spi: u32,
    /// Our outbound SPI (the peer's inbound).
    pub outbound_spi: u32,
    /// The negotiated ESP transforms.
    pub suite: EspSuite,
    /// Extended sequence numbers negotiated.
    pub esn: bool,
    /// KEYMAT for the inbound SA (encryption key with salt, then integrity key).
    pub inbound_key: SecretBytes,
    /// KEYMAT for the outbound SA.
    pub outbound_key: SecretBytes,
    /// Our traffic selectors (after narrowing).
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's traffic selectors (after narrowing).
    pub remote_ts: Vec<TrafficSelector>,
    /// Our IKE address and port (the ESP-in-UDP source when `encap`).
    pub local: SocketAddr,
    /// The peer's IKE address and port (the ESP-in-UDP destination when `encap`).
    pub remote: SocketAddr,
    /// ESP must be UDP-encapsulated (NAT detected or forced, RFC 3948).
    pub encap: bool,
    /// The worker (RFC 9611 resource) this SA is for; `None` for a plain SA.
    pub resource: Option<u16>,
    /// We initiated the exchange that created it.
    pub initiator: bool,
    /// The inbound SPI of the Child SA this one replaces (RFC 7296 §2.8);
    /// that SA's `ChildSaDeleted { reason: Rekeyed }` follows later.
    pub rekeys: Option<u32>,
    /// RFC 9611: one of several Child SAs with the same selectors, each for
    /// one resource. With `resource: None` the peer negotiated it for one
    /// of its resources (see the module docs).
    pub per_resource: bool,
    /// Send on the outbound SA at once. `false` only for a rekey the peer
    /// initiated: wait for `ChildSaOutboundActive` (see the module docs).
    pub outbound_active: bool,
    /// IPComp, when both sides agreed on it (RFC 7296 §2.22).
    pub ipcomp: Option<crate::ipcomp::IpcompCpis>,
}

impl fmt::Debug for ChildSaEstablished {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildSaEstablished")
            .field("ike_sa", &self.ike_sa)
            .field("connection", &self.connection)
            .field("child", &self.child)
            .field("inbound_spi", &format_args!("{:08x}", self.inbound_spi))
            .field("outbound_spi", &format_args!("{:08x}", self.outbound_spi))
            .field("suite", &self.suite)
            .field("esn", &self.esn)
            .field("local_ts", &self.local_ts)
            .field("remote_ts", &self.remote_ts)
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("encap", &self.encap)
            .field("resource", &self.resource)
            .field("per_resource", &self.per_resource)
            .field("initiator", &self.initiator)
            .field("rekeys", &self.rekeys.map(|s| format!("{s:08x}")))
            .field("outbound_active", &self.outbound_active)
            .finish_non_exhaustive()
    }
}

/// Something the driver needs to know.
#[derive(Debug)]
pub enum Event {
    /// IKE_AUTH completed: the IKE SA is authenticated.
    IkeSaEstablished {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// Our address.
        local: SocketAddr,
        /// The peer's address.
        remote: SocketAddr,
        /// Our identity.
        local_id: Identity,
        /// The peer's authenticated identity.
        remote_id: Identity,
        /// We are the original initiator.
        initiator: bool,
    },
    /// An IKE SA is gone (after its Child SAs' `ChildSaDeleted`).
    IkeSaDeleted {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// Connection name, if one had been chosen.
        connection: Option<Arc<str>>,
        /// Why.
        reason: Reason,
    },
    /// A Child SA is ready.
    ChildSaEstablished(Box<ChildSaEstablished>),
    /// A Child SA is gone: remove both directions.
    ChildSaDeleted {
        /// The IKE SA it belonged to.
        ike_sa: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// Child configuration name.
        child: Arc<str>,
        /// Our inbound SPI.
        inbound_spi: u32,
        /// Our outbound SPI.
        outbound_spi: u32,
        /// Why.
        reason: Reason,
    },
    /// A Child SA could not be created (the IKE SA may live on).
    ChildSaFailed {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// Child configuration name (the one we asked for, or `None` when
        /// the peer's request matched none).
        child: Option<Arc<str>>,
        /// Why.
        reason: Reason,
    },
    /// Authentication failed; the IKE SA is deleted.
    AuthFailed {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// The peer's address.
        peer: SocketAddr,
        /// The identity the peer claimed, if it got that far.
        identity: Option<Identity>,
        /// What went wrong.
        reason: AuthFailure,
    },
    /// The IKE SA was rekeyed (RFC 7296 §1.3.2, §2.18): `new` inherits
    /// every Child SA of `old`, later events name `new`, and `old` goes
    /// away without an `IkeSaDeleted`.
    IkeSaRekeyed {
        /// The replaced IKE SA.
        old: IkeSaId,
        /// Its successor.
        new: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// We initiated the rekey (else the peer did).
        initiated: bool,
    },
    /// Start sending on this Child SA (announced with `outbound_active:
    /// false`): the peer has switched to it.
    ChildSaOutboundActive {
        /// The IKE SA it belongs to.
        ike_sa: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// Child configuration name.
        child: Arc<str>,
        /// Our inbound SPI.
        inbound_spi: u32,
        /// The outbound SPI to send with from now on.
        outbound_spi: u32,
    },
    /// No (more) per-resource Child SAs for this child on this IKE SA
    /// (RFC 9611): the peer does not support them, answered TS_MAX_QUEUE,
    /// or `per_cpu_max` is reached. Workers without a sub-SA keep using
    /// the fallback SA; stop acquiring for them.
    PerResourceUnavailable {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// Connection name.
        connection: Arc<str>,
        /// Child configuration name.
        child: Arc<str>,
        /// Why: `PerResourceUnsupported`, `PeerError(TS_MAX_QUEUE)`, or
        /// `Local("per_cpu_max reached")`.
        reason: Reason,
    },
    /// Resolve this host name (a connection's `remote_addrs`) and hand the
    /// answer to [`crate::Endpoint::host_resolved`]: an initiation waits
    /// for it. Asked on every initiation, retry and restart of a
    /// connection with names, at most once at a time per name.
    ResolveHost {
        /// The name.
        name: Arc<str>,
    },
    /// The peer's (NAT-translated) address changed on an established IKE
    /// SA: ESP-in-UDP for its Child SAs must go to the new address.
    PeerAddressChanged {
        /// The IKE SA.
        ike_sa: IkeSaId,
        /// Our address.
        local: SocketAddr,
        /// The peer's new address.
        remote: SocketAddr,
    },
}
