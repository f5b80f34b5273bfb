//! Walking the IPv6 extension-header chain to the upper layer (RFC 8200 §4).
//!
//! Policy lookup (RFC 4301 selectors), ICMPv6 error suppression and
//! checksums all need the *upper-layer* protocol and where its header
//! starts, which in IPv6 may sit behind a chain of extension headers. Each
//! extension header names the next one; their lengths are encoded three
//! different ways:
//!
//! | header | number | length |
//! | --- | --- | --- |
//! | Hop-by-Hop Options | 0 | `(Hdr Ext Len + 1) × 8` (RFC 8200 §4.3) |
//! | Routing | 43 | `(Hdr Ext Len + 1) × 8` (§4.4) |
//! | Fragment | 44 | fixed 8 (§4.5) |
//! | Destination Options | 60 | `(Hdr Ext Len + 1) × 8` (§4.6) |
//! | Authentication Header | 51 | `(Payload Len + 2) × 4` (RFC 4302 §2.2) |
//! | HIP 139, Shim6 140, experimental 253/254 | | RFC 6564 uniform format, as Routing |
//! | No Next Header | 59 | the chain ends, nothing follows (§4.7) |
//!
//! ESP (50) is treated as an upper layer: what follows it is encrypted. So is
//! the Mobility Header (135), which RFC 4301 §4.4.1.1 uses as a selector.
//!
//! The walk is bounded by [`MAX_EXT_HEADERS`] so that a packet made of
//! nothing but extension headers costs a fixed amount of work; a longer chain
//! is [`Error::Unsupported`], not a peer fault (RFC 8200 sets no limit, but
//! RFC 7112 and operational practice drop such packets). Hop-by-Hop anywhere
//! but first is `Malformed` (RFC 8200 §4.1: it "is restricted to appear
//! immediately after an IPv6 header only").
//!
//! A *non-initial* fragment (offset ≠ 0) carries no upper-layer header: the
//! walk stops at its Fragment header and reports the protocol it names, with
//! [`UpperLayer::fragment`] set, so that callers treat ports as OPAQUE
//! (RFC 4301 §7).

use crate::bytes::{u16_at, u32_at};
use crate::{Error, Result};

/// IPv6 Hop-by-Hop Options.
pub const HOP_BY_HOP: u8 = 0;
/// Routing header.
pub const ROUTING: u8 = 43;
/// Fragment header.
pub const FRAGMENT: u8 = 44;
/// Encapsulating Security Payload: an upper layer for this walk.
pub const ESP: u8 = 50;
/// Authentication Header.
pub const AH: u8 = 51;
/// No Next Header.
pub const NO_NEXT_HEADER: u8 = 59;
/// Destination Options.
pub const DEST_OPTS: u8 = 60;
/// Host Identity Protocol (RFC 7401), uniform format.
pub const HIP: u8 = 139;
/// Shim6 (RFC 5533), uniform format.
pub const SHIM6: u8 = 140;
/// Experimentation and testing (RFC 3692), uniform format.
pub const EXPERIMENTAL_1: u8 = 253;
/// Experimentation and testing (RFC 3692), uniform format.
pub const EXPERIMENTAL_2: u8 = 254;

/// The most extension headers [`walk`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// Length of the Fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// What a Fragment header says (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fragment {
    /// Offset of this fragment's data, in bytes (the field is in 8-octet units).
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

impl Fragment {
    /// Whether this fragment starts the original packet (and so holds the
    /// upper-layer header).
    #[inline]
    pub const fn is_initial(&self) -> bool {
        self.offset == 0
    }
}

/// Where the walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UpperLayer {
    /// Upper-layer protocol (e.g. 6, 17, 58, 50), or [`NO_NEXT_HEADER`].
    pub protocol: u8,
    /// Offset of the upper-layer header in the IPv6 payload (after the fixed
    /// header). May equal the payload length (nothing follows).
    pub offset: usize,
    /// The Fragment header, if the chain had one.
    pub fragment: Option<Fragment>,
}

impl UpperLayer {
    /// Whether the upper-layer header is absent because this is a
    /// non-initial fragment.
    #[inline]
    pub fn is_non_initial_fragment(&self) -> bool {
        self.fragment.is_some_and(|f| !f.is_initial())
    }
}

/// Walks from `next_header` (the fixed header's Next Header) through the
/// extension headers at the start of `payload` (the bytes after the fixed
/// header).
///
/// Errors: an extension header running past `payload` is `Truncated`;
/// Hop-by-Hop not first or two Fragment headers are `Malformed`; more than
/// [`MAX_EXT_HEADERS`] headers are `Unsupported`.
pub fn walk(next_header: u8, payload: &[u8]) -> Result<UpperLayer> {
    let mut nh = next_header;
    let mut off = 0usize;
    let mut fragment: Option<Fragment> = None;
    for i in 0..=MAX_EXT_HEADERS {
        let len = match nh {
            HOP_BY_HOP if i != 0 => return Err(Error::Malformed("ipv6 hop-by-hop not first")),
            HOP_BY_HOP | ROUTING | DEST_OPTS | HIP | SHIM6 | EXPERIMENTAL_1 | EXPERIMENTAL_2 => {
                let hdr = payload.get(off..off + 2).ok_or(Error::Truncated)?;
                (usize::from(hdr[1]) + 1) * 8
            }
            AH => {
                let hdr = payload.get(off..off + 2).ok_or(Error::Truncated)?;
                (usize::from(hdr[1]) + 2) * 4
            }
            FRAGMENT => {
                let hdr = payload
                    .get(off..off + FRAGMENT_HEADER_LEN)
                    .ok_or(Error::Truncated)?;
                if fragment.is_some() {
                    // RFC 8200 §4.1: each extension header (Destination
                    // Options excepted) occurs at most once.
                    return Err(Error::Malformed("ipv6 two fragment headers"));
                }
                let word = u16_at(hdr, 2);
                let f = Fragment {
                    offset: word & 0xfff8,
                    more: word & 1 != 0,
                    ident: u32_at(hdr, 4),
                };
                fragment = Some(f);
                if !f.is_initial() {
                    // The rest is the middle of the original packet: no
                    // upper-layer header to find (RFC 8200 §4.5).
                    return Ok(UpperLayer {
                        protocol: hdr[0],
                        offset: off + FRAGMENT_HEADER_LEN,
                        fragment,
                    });
                }
                FRAGMENT_HEADER_LEN
            }
            upper => {
                return Ok(UpperLayer {
                    protocol: upper,
                    offset: off,
                    fragment,
                });
            }
        };
        if i == MAX_EXT_HEADERS {
            break;
        }
        if off + len > payload.len() {
            return Err(Error::Truncated);
        }
        nh = payload[off];
        off += len;
    }
    Err(Error::Unsupported("ipv6 extension header chain too long"))
}

/// The upper-layer protocol and the offset of its header in `payload`: the
/// short form of [`walk`].
#[inline]
pub fn upper_layer(next_header: u8, payload: &[u8]) -> Result<(u8, usize)> {
    walk(next_header, payload).map(|u| (u.protocol, u.offset))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A generic (Hdr Ext Len) extension header of `units` × 8 + 8 bytes.
    fn generic(next: u8, units: u8) -> Vec<u8> {
        let mut h = vec![0u8; (usize::from(units) + 1) * 8];
        h[0] = next;
        h[1] = units;
        h
    }

    #[test]
    fn no_extension_headers() {
        assert_eq!(upper_layer(6, &[0u8; 20]).unwrap(), (6, 0));
        // The upper layer may be empty: its own parser reports truncation.
        assert_eq!(upper_layer(17, &[]).unwrap(), (17, 0));
        assert_eq!(upper_layer(ESP, &[1, 2, 3]).unwrap(), (ESP, 0));
    }

    #[test]
    fn chain_of_every_kind() {
        let mut p = generic(DEST_OPTS, 0); // HBH, 8 bytes
        p.extend(generic(ROUTING, 1)); // DestOpts, 16 bytes
        p.extend(generic(FRAGMENT, 0)); // Routing, 8 bytes
        p.extend([AH, 0, 0, 0, 0, 0, 0, 0]); // Fragment, offset 0
        let mut ah = vec![0u8; 24]; // AH with 12-byte ICV: Payload Len (24/4) - 2 = 4
        ah[0] = 58;
        ah[1] = 4;
        p.extend(ah);
        p.extend([128, 0, 0, 0]); // ICMPv6 echo request
        let u = walk(HOP_BY_HOP, &p).unwrap();
        assert_eq!(u.protocol, 58);
        assert_eq!(u.offset, 8 + 16 + 8 + 8 + 24);
        assert_eq!(
            u.fragment,
            Some(Fragment {
                offset: 0,
                more: false,
                ident: 0
            })
        );
        assert!(!u.is_non_initial_fragment());
    }

    #[test]
    fn no_next_header_ends_chain() {
        let p = generic(NO_NEXT_HEADER, 0);
        assert_eq!(upper_layer(DEST_OPTS, &p).unwrap(), (NO_NEXT_HEADER, 8));
    }

    #[test]
    fn non_initial_fragment_stops() {
        // Fragment header: next 6 (TCP), offset 1448 bytes = 181 units, M set.
        let word: u16 = (181 << 3) | 1;
        let mut p = vec![6, 0];
        p.extend(word.to_be_bytes());
        p.extend(0x1234_5678u32.to_be_bytes());
        p.extend([0xde, 0xad]); // middle of the original packet
        let u = walk(FRAGMENT, &p).unwrap();
        assert_eq!(u.protocol, 6);
        assert_eq!(u.offset, 8);
        assert!(u.is_non_initial_fragment());
        assert_eq!(
            u.fragment,
            Some(Fragment {
                offset: 1448,
                more: true,
                ident: 0x1234_5678
            })
        );
    }

    #[test]
    fn hop_by_hop_must_be_first() {
        let p = generic(HOP_BY_HOP, 0);
        assert_eq!(
            walk(DEST_OPTS, &p),
            Err(Error::Malformed("ipv6 hop-by-hop not first"))
        );
    }

    #[test]
    fn duplicate_fragment_header() {
        let mut p = vec![FRAGMENT, 0, 0, 0, 0, 0, 0, 0];
        p.extend([17, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            walk(FRAGMENT, &p),
            Err(Error::Malformed("ipv6 two fragment headers"))
        );
    }

    #[test]
    fn truncation() {
        assert_eq!(walk(HOP_BY_HOP, &[]), Err(Error::Truncated));
        assert_eq!(walk(HOP_BY_HOP, &[6]), Err(Error::Truncated));
        // Claims 16 bytes, has 8.
        assert_eq!(walk(ROUTING, &generic(6, 1)[..8]), Err(Error::Truncated));
        assert_eq!(
            walk(FRAGMENT, &[6, 0, 0, 0, 0, 0, 0]),
            Err(Error::Truncated)
        );
        assert_eq!(
            walk(AH, &[6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn chain_bound() {
        // MAX_EXT_HEADERS Destination Options headers then UDP: accepted.
        let mut p = Vec::new();
        for i in 0..MAX_EXT_HEADERS {
            p.extend(generic(
                if i + 1 == MAX_EXT_HEADERS {
                    17
                } else {
                    DEST_OPTS
                },
                0,
            ));
        }
        assert_eq!(
            upper_layer(DEST_OPTS, &p).unwrap(),
            (17, MAX_EXT_HEADERS * 8)
        );
        // One more and the walk refuses.
        let mut q = generic(DEST_OPTS, 0);
        q.extend(p);
        assert_eq!(
            walk(DEST_OPTS, &q),
            Err(Error::Unsupported("ipv6 extension header chain too long"))
        );
    }
}
