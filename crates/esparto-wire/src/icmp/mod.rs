//! ICMP for IPv4 (RFC 792) and IPv6 (RFC 4443), and the two error messages
//! a tunnel gateway has to originate itself.
//!
//! Both versions share the same first eight bytes — Type, Code, Checksum and
//! a four-byte "rest of header" whose meaning depends on the type — followed
//! by data. [`v4`] and [`v6`] give a view and a generic `Repr` each; the
//! difference that matters is the checksum: ICMPv4 sums the message alone,
//! ICMPv6 includes the IPv6 pseudo header (RFC 4443 §2.3), so its checksum
//! functions take the addresses.
//!
//! A gateway that adds ESP overhead shrinks the path MTU for the traffic it
//! tunnels. When an inner packet is too big to send and must not be
//! fragmented, it answers with "Destination Unreachable, Fragmentation
//! Needed" carrying the next-hop MTU (RFC 1191 §4) for IPv4, or "Packet Too
//! Big" (RFC 4443 §3.2) for IPv6. [`frag_needed_v4`] and
//! [`packet_too_big_v6`] write the complete IP + ICMP packet into a caller
//! buffer, quoting as much of the offending packet as the RFCs allow, and
//! refuse the cases where the RFCs forbid an error message at all (errors
//! about errors, about non-initial fragments, or to addresses that do not
//! name a single host).

mod too_big;
pub mod v4;
pub mod v6;

pub use too_big::{
    DEFAULT_HOP_LIMIT, MAX_V4_ERROR_LEN, MAX_V6_ERROR_LEN, MIN_V4_MTU, frag_needed_v4,
    packet_too_big_v6,
};

/// Length of the ICMP header common to both versions: type, code,
/// checksum, four bytes of type-specific header.
pub const HEADER_LEN: usize = 8;
