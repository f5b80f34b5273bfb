//! IKEv2 messages (RFC 7296 §3): header, payload chain, and one view or
//! Repr per payload type.
//!
//! The IKE control plane handles a few messages per tunnel per hour, so
//! unlike the ESP views this module trades a little allocation for
//! simplicity: a parsed [`Message`] holds a `Vec` of [`PayloadRepr`]s that
//! borrow their data from the datagram, and proposals / traffic selectors
//! are small owned vectors. Every count and size is bounded by the named
//! constants in [`limits`], checked before allocating, so a hostile
//! datagram can make us allocate at most a few kilobytes, and every read of
//! untrusted bytes goes through a bounds-checked cursor: malformed input is
//! an [`Error`], never a panic.
//!
//! The Encrypted payload (SK, §3.14) is framed here but sealed and opened
//! by `esparto-crypto`: [`Message::parse`] records where SK sits, the core
//! decrypts in place, and [`parse_payloads`] reads the inner chain.
//! [`emit_encrypted`] lays out a message for in-place sealing. IKE
//! fragmentation (RFC 7383) is not implemented.
//!
//! Layout: [`header`] (IKE header), [`payload`] (generic header and chain
//! walk), [`consts`] (IANA code points), [`sa`] (proposals), [`simple`]
//! (KE, ID, AUTH, Nonce, Vendor ID), [`notify`], [`delete`], [`ts`],
//! [`sk`], [`message`] (the enum, parse and emit).

pub mod consts;
mod cursor;
pub mod delete;
pub mod error;
pub mod header;
pub mod message;
pub mod notify;
pub mod payload;
pub mod sa;
pub mod simple;
pub mod sk;
pub mod ts;

#[cfg(test)]
mod proptests;

pub use consts::{
    AuthMethod, ExchangeType, IdType, NotifyType, PayloadType, ProtocolId, TransformType, TsType,
};
pub use delete::DeleteRepr;
pub use error::{Error, Result};
pub use header::{HEADER_LEN, Header, HeaderRepr};
pub use message::{
    Message, PayloadRepr, emit_encrypted, emit_fragments, emit_message, messages, parse_payloads,
    payloads_len,
};
pub use notify::NotifyRepr;
pub use payload::{GENERIC_HEADER_LEN, PayloadIter, RawPayload};
pub use sa::{ProposalRepr, SaRepr, Spi, TransformRepr};
pub use simple::{AuthRepr, IdRepr, KeRepr, NonceRepr, VendorIdRepr};
pub use sk::{FRAGMENT_FIELDS_LEN, Fragment, SkLayout, SkLocation, strip_padding};
pub use ts::{TrafficSelectorRepr, TsRepr};

/// Every bound the IKE parser enforces, in one place (WireGuard habit).
pub mod limits {
    /// Largest IKE message we accept or build, in octets. strongSwan's
    /// default `charon.max_packet` is 10000; a PSK handshake with MODP-3072
    /// fits in well under 2000.
    pub const MAX_MESSAGE_LEN: usize = 10_000;
    /// Fragments of one message (RFC 7383), sent or reassembled: at the
    /// smallest fragment size (576-octet datagrams) a message of
    /// [`MAX_MESSAGE_LEN`] takes about twenty.
    pub const MAX_FRAGMENTS: usize = 64;
    /// Payloads per chain (outer or inside SK).
    pub const MAX_PAYLOADS: usize = 64;
    /// Proposals per SA payload.
    pub const MAX_PROPOSALS: usize = 64;
    /// Transforms per proposal (the count field is one octet anyway;
    /// strongSwan's default IKE proposal carries about forty).
    pub const MAX_TRANSFORMS: usize = 128;
    /// Attributes per transform (RFC 7296 defines only one).
    pub const MAX_ATTRIBUTES: usize = 4;
    /// Selectors per TS payload.
    pub const MAX_TRAFFIC_SELECTORS: usize = 64;
    /// SPIs per Delete payload.
    pub const MAX_DELETE_SPIS: usize = 256;
}
