//! Esparto's IKEv2 control plane (RFC 7296), sans-IO.
//!
//! This crate negotiates, authenticates and maintains IKE SAs and their
//! Child SAs, and hands the resulting ESP keys to whoever installs them.
//! It does no I/O and reads no clock: [`Endpoint`] takes datagrams and
//! timer ticks with the current time, and gives back datagrams to send and
//! events (quinn's `handle`/`poll` shape). Each datagram also comes with
//! the caller's wall-clock reading ([`UnixTime`]), the time a peer's
//! certificates are checked against, as rustls passes a `UnixTime` into
//! certificate verification. Randomness — SPIs, nonces, key exchange
//! secrets — comes through the injected [`esparto_crypto::Rng`], which also
//! supplies the generator aws-lc-rs's signing calls take (aws-lc-rs ignores
//! it for ECDSA and RSA-PSS, whose signatures are therefore not
//! reproducible: `cert/sign.rs`), and inbound ESP SPIs through a
//! [`SpiAllocator`] the daemon implements so that each SPI steers to the
//! worker that owns the SA.
//!
//! What is implemented (RFC 7296 unless noted): IKE_SA_INIT with proposal
//! selection (§2.7), INVALID_KE_PAYLOAD retry (§1.2), COOKIEs both ways
//! (§2.6) and NAT detection (§2.23); IKE_AUTH with PSK authentication
//! (§2.15) or X.509 certificates and RFC 7427 signatures ([`cert`]), and
//! the first Child SA with traffic selector narrowing (§2.9);
//! CREATE_CHILD_SA for additional Child SAs, with optional PFS (§1.3.1);
//! rekeying of Child SAs (§1.3.3) and IKE SAs (§1.3.2, §2.18) both ways,
//! make-before-break, on timers with jitter or on request, and their
//! collisions (§2.8.1, §2.8.2, §2.25); INFORMATIONAL deletes and liveness
//! checks (§1.4) with `dpd_timeout`; windows above one (SET_WINDOW_SIZE,
//! §2.3); INITIAL_CONTACT (§2.4); RFC 9611 per-resource Child SAs
//! (SA_RESOURCE_INFO, TS_MAX_QUEUE) eager or on demand; retransmission
//! with exponential back-off and give-up (§2.1, §2.4); the responder's
//! response cache (§2.1); payload rules per exchange (§3, [`rules`]);
//! recovery from a peer that lost its state — INVALID_IKE_SPI answers and
//! INVALID_SPI hints (§1.5, §2.21.4), rate-limited — and re-initiation with
//! back-off by `dpd_action` / `close_action`; an orderly `shutdown` that
//! deletes every IKE SA (`endpoint/recovery.rs`). Not yet: fragmentation
//! (RFC 7383), MOBIKE, EAP, transport mode (USE_TRANSPORT_MODE, §1.3.1:
//! every Child SA is a tunnel).
//!
//! The events ([`event`]) are the contract with the daemon; their module
//! documentation says how to install, switch and remove SAs during a
//! rekey so that no packet is lost, and how RFC 9611 sub-SAs map to
//! workers. Lifetimes and limits are named in [`lifetime`].
//!
//! Scale. A hub holds thousands of connections, each with its own peer
//! identity and key, and tens of thousands of IKE SAs; nothing done per
//! tunnel may walk all of them. Connections are indexed by name, peer
//! address and peer identity (`connections`), PSKs by identity with
//! strongSwan's priorities (`psk`), IKE SAs by our SPI, by connection and
//! by identity pair (`endpoint/sa_index.rs`), timers in a heap; each index
//! answers exactly what the scan it replaces did, which property tests
//! check against the scan.
//!
//! Memory per tunnel. One established tunnel (an IKE SA and its first
//! Child SA pair; AES-256-GCM, HMAC-SHA-256, X25519; one selector each
//! way) costs this much heap, measured with heaptrack over 10,000 tunnels
//! (`tests/footprint.rs` holds it to a budget):
//!
//! | what | bytes | note |
//! | --- | ---: | --- |
//! | `IkeSa` | 560 | boxed: SPIs, addresses (2 × 32), identities (2 × 32), request and response queues (3 × 32), timers, window, suite, keys' header |
//! | its slot in the SA table | ≈ 26 | a pointer and a key, over the table's load |
//! | IKE keys | 104 | SK_d ‖ SK_ei ‖ SK_er in one wiped buffer (32 + 2 × 36); SK_pi/SK_pr (64) dropped after IKE_AUTH |
//! | Child SA record | 144 | SPIs, lifetimes, rekey state |
//! | its selectors | 80 | one allocation for both directions |
//! | timer entry, our-SPI set, SA index | ≈ 85 | one heap entry per SA; index buckets of one SA allocate nothing |
//! | identities | ≈ 10–30 | the FQDN strings of IDi and IDr |
//! | **initiator** | **≈ 1,020** | |
//! | cached IKE_AUTH response | ≈ 235 | responder only: RFC 7296 §2.1, kept until the next request |
//! | **responder** | **≈ 1,260** | |
//!
//! Not kept once IKE_AUTH completes (`sa::Handshake`): the IKE_SA_INIT
//! messages and nonces (§2.15 signs them once), the responder's half-open
//! key, SK_pi/SK_pr. Not kept at all: SK payload cipher contexts (about
//! 600 bytes each in aws-lc, two per SA), built per message instead
//! (`keys`). Child SA keys go out in the event and are not held here.
//! SAs are boxed: inline, the table would hold a whole `IkeSa` in every
//! empty slot too, and move them all each time it grows.
//!
//! Layout: [`config`] (typed configuration), [`proposal`], [`identity`],
//! [`ts`] (selectors, narrowing), [`keys`] (derivation), [`auth`] (PSK),
//! [`cert`] (signing with our credential; trust in the peer's),
//! [`nat`], [`rules`], [`spi`], [`event`], [`lifetime`], [`Endpoint`]
//! (with `endpoint/recovery.rs`, and `ratelimit` for what it sends in
//! answer to unauthenticated messages);
//! internally `sa` (one IKE SA: its message-ID windows and response cache,
//! timers, Child SA bookkeeping and collisions, RFC 9611), `exchange` (one
//! module per exchange, initiator and responder: IKE_SA_INIT, IKE_AUTH,
//! CREATE_CHILD_SA, the IKE SA rekey, INFORMATIONAL; and the two parts
//! several share: `exchange/child_sa`, the one Child SA negotiation of
//! IKE_AUTH and CREATE_CHILD_SA, and `exchange/ke`, CREATE_CHILD_SA's key
//! exchange and its INVALID_KE_PAYLOAD follow-up), `child` (the Child SAs
//! an IKE SA holds, and how a negotiated one is installed),
//! `connections` and `psk` (the indexes over configuration).
#![forbid(unsafe_code)]

pub mod activity;
pub mod auth;
pub mod cert;
mod child;
pub mod config;
mod connections;
pub mod cookie;
mod ctx;
pub mod diag;
mod endpoint;
pub mod event;
mod exchange;
pub mod identity;
pub mod ipcomp;
pub mod keys;
pub mod lifetime;
pub mod nat;
pub mod proposal;
mod psk;
mod ratelimit;
pub mod rules;
mod sa;
pub mod spi;
/// IKE fragmentation (RFC 7383): reassembly of the peer's fragments.
pub use sa::fragments;
pub mod ts;

pub use activity::{InboundActivity, NoActivity};
pub use config::{
    AfterDeath, AuthConfig, ChildConfig, CloseAction, ConfigError, ConnectionConfig, DpdAction, Recover,
    EndpointConfig, Fragmentation, PerCpuSas, RemoteHost, RetransmitConfig, Secrets, StartAction, Unique,
};
pub use endpoint::{ChildSaInfo, Endpoint, IkeSaInfo, IkeSaStates, InitiateError, Messages, NewConnection, SourceChooser, Stats};
pub use event::{AuthFailure, ChildSaEstablished, Event, IkeSaId, Reason, Transmit};
pub use identity::Identity;
/// Wall-clock time (seconds since the Unix epoch), as the caller reads it:
/// what certificate validity is checked at ([`Endpoint::handle_datagram`]).
pub use pki_types::UnixTime;
pub use psk::PskIndex;
pub use spi::{RandomSpiAllocator, SpiAllocator, SteerFn, SteeredFn, SteeringSpiAllocator};
pub use ts::{TrafficSelector, TsConfig};
