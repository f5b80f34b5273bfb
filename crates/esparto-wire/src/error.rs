//! The one error type of the wire crate.
//!
//! Parsing untrusted bytes can go wrong in exactly three ways, and callers
//! react differently to each, so the kinds are kept apart rather than folded
//! into a string:
//!
//! - [`Error::Truncated`]: the buffer ends before a header or a length field
//!   says it should. For a datagram protocol this is a peer (or path) fault:
//!   drop and count.
//! - [`Error::Malformed`]: a field holds a value the RFC forbids (an IPv4 IHL
//!   below 5, a UDP length below 8, ESP padding that is not 1, 2, 3, …).
//!   Also a peer fault; the static string names the field so that drop
//!   counters and tests can tell reasons apart without allocating.
//! - [`Error::Unsupported`]: well-formed but outside what we handle (IPv4
//!   options in a `Repr`, an IPv6 extension-header chain longer than our
//!   bound). Not the peer's fault; the caller may pass the packet on untouched.
//!
//! The type is `Copy` and allocation-free: the data plane returns it per
//! packet.

use core::fmt;

/// What went wrong while reading or writing a wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than the header or a length field says.
    Truncated,
    /// A field has a value the format forbids; the string names it ("ipv4 ihl < 5").
    Malformed(&'static str),
    /// Valid but not something we handle (e.g. IPv4 options we don't parse).
    Unsupported(&'static str),
}

/// The result of every fallible function in this crate.
pub type Result<T> = core::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated packet"),
            Error::Malformed(what) => write!(f, "malformed packet: {what}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_field() {
        assert_eq!(Error::Truncated.to_string(), "truncated packet");
        assert_eq!(
            Error::Malformed("ipv4 ihl < 5").to_string(),
            "malformed packet: ipv4 ihl < 5"
        );
        assert_eq!(
            Error::Unsupported("ipv4 options").to_string(),
            "unsupported: ipv4 options"
        );
    }
}
