//! IPv6 fixed header (RFC 8200 §3) and the walk over extension headers
//! ([`ext`]).
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version| Traffic Class |           Flow Label                  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                  Source Address (128 bits)                    |
//! |                Destination Address (128 bits)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! [`Packet::new_checked`] checks the buffer against the fixed header and the
//! Payload Length; as with IPv4, trailing bytes beyond it are ignored.
//! Jumbograms (Payload Length 0 with a Hop-by-Hop Jumbo Payload option,
//! RFC 2675) never cross a VPN tunnel and are refused as
//! [`Error::Unsupported`] rather than misread as empty packets.
//!
//! The Next Header of the fixed header is often not the upper-layer protocol:
//! [`Packet::upper_layer`] walks the extension-header chain to find it.

pub mod ext;

use core::net::Ipv6Addr;

use crate::bytes::{put_u16, u16_at, u32_at};
use crate::{Error, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;
/// The IPv6 minimum link MTU (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;
/// Largest Flow Label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0x000f_ffff;

/// Byte offsets of the header fields, for code that must name a position
/// rather than read a value: checksum offload (where the checksum field
/// lies), steering programs the kernel runs on the raw bytes.
pub mod field {
    use core::ops::Range;
    /// Version, Traffic Class and Flow Label (one 32-bit word).
    pub const VER_TC_FLOW: usize = 0;
    /// Payload Length.
    pub const LENGTH: usize = 4;
    /// Next Header.
    pub const NXT_HDR: usize = 6;
    /// Hop Limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source Address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination Address.
    pub const DST: Range<usize> = 24..40;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it. For input use
    /// [`Packet::new_checked`].
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the fixed header and Payload Length against the buffer. Does
    /// not check the version: see [`Repr::parse`].
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let payload_len = usize::from(self.payload_len());
        if payload_len == 0 && self.next_header() == ext::HOP_BY_HOP && len > HEADER_LEN {
            // RFC 2675 §2: a jumbogram has Payload Length zero and its real
            // length in a Hop-by-Hop option.
            return Err(Error::Unsupported("ipv6 jumbogram"));
        }
        if HEADER_LEN + payload_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    /// Version field (6 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic Class (DSCP and ECN, RFC 2474 / RFC 3168).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// DSCP: the upper six bits of the Traffic Class.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// ECN: the lower two bits of the Traffic Class.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow Label (20 bits, RFC 6437).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & MAX_FLOW_LABEL
    }

    /// Payload Length: bytes after the fixed header, extension headers
    /// included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Length of the packet proper: fixed header plus Payload Length.
    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// Next Header of the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop Limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr(&self.buffer.as_ref()[field::SRC]))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr(&self.buffer.as_ref()[field::DST]))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload: extension headers and upper layer, Payload Length bytes.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// The packet proper: the first [`Packet::total_len`] bytes of the buffer.
    #[inline]
    pub fn packet(&self) -> &'a [u8] {
        &self.buffer.as_ref()[..self.total_len()]
    }

    /// Walks the extension headers to the upper-layer protocol; the offset in
    /// the result is into [`Packet::payload`]. See [`ext::walk`].
    #[inline]
    pub fn upper_layer(&self) -> Result<ext::UpperLayer> {
        ext::walk(self.next_header(), self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_first_word(&mut self, w: u32) {
        self.buffer.as_mut()[0..4].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the Version field.
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[0];
        *b = (*b & 0x0f) | (version << 4);
    }

    /// Sets the Traffic Class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let w = (self.first_word() & 0xf00f_ffff) | (u32::from(tc) << 20);
        self.set_first_word(w);
    }

    /// Sets the Flow Label (low 20 bits of `label`).
    #[inline]
    pub fn set_flow_label(&mut self, label: u32) {
        let w = (self.first_word() & !MAX_FLOW_LABEL) | (label & MAX_FLOW_LABEL);
        self.set_first_word(w);
    }

    /// Sets Payload Length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets Next Header.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = nh;
    }

    /// Sets Hop Limit.
    #[inline]
    pub fn set_hop_limit(&mut self, hl: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hl;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next Header of the fixed header.
    pub next_header: u8,
    /// Payload Length (extension headers included), at most 65535.
    pub payload_len: usize,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class.
    pub traffic_class: u8,
    /// Flow Label, at most [`MAX_FLOW_LABEL`].
    pub flow_label: u32,
}

impl Repr {
    /// Parses a checked view; a version other than 6 is `Malformed`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Malformed("ipv6 version != 6"));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Fixed header plus payload.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the fixed header; the buffer must hold [`Repr::buffer_len`]
    /// bytes. The payload is left to the caller.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if self.payload_len > usize::from(u16::MAX) {
            return Err(Error::Unsupported("ipv6 jumbogram"));
        }
        if self.flow_label > MAX_FLOW_LABEL {
            return Err(Error::Malformed("ipv6 flow label > 20 bits"));
        }
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_first_word((6 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        Ok(())
    }
}

#[inline(always)]
fn addr(b: &[u8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testutil::hex;

    #[test]
    fn hop_by_hop_and_fragment_captured() {
        let bytes = hex(include_str!("../../testdata/ipv6_hbh_frag_udp.hex"));
        let p = Packet::new_checked(&bytes[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.next_header, ext::HOP_BY_HOP);
        assert_eq!(r.src_addr, "2001:db8:1::10".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.dst_addr, "2001:db8:2::20".parse::<Ipv6Addr>().unwrap());
        assert_eq!(r.hop_limit, 64);
        assert_eq!(r.flow_label, 0x5_4321);
        assert_eq!(r.traffic_class, 0xb8); // DSCP EF
        assert_eq!(p.dscp(), 46);
        let ul = p.upper_layer().unwrap();
        assert_eq!(ul.protocol, 17);
        assert_eq!(ul.offset, 8 + 8);
        let frag = ul.fragment.unwrap();
        assert_eq!(frag.offset, 0);
        assert!(frag.more);
        assert_eq!(frag.ident, 0xcafe_f00d);
        let mut out = bytes.clone();
        out[..40].fill(0);
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn lengths() {
        let mut h = [0u8; 48];
        let r = Repr {
            src_addr: Ipv6Addr::LOCALHOST,
            dst_addr: Ipv6Addr::LOCALHOST,
            next_header: 59,
            payload_len: 8,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: MAX_FLOW_LABEL,
        };
        r.emit(&mut Packet::new_unchecked(&mut h[..])).unwrap();
        assert_eq!(Packet::new_checked(&h[..47]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&h[..39]).unwrap_err(), Error::Truncated);
        let mut longer = h.to_vec();
        longer.push(0xaa);
        let p = Packet::new_checked(&longer[..]).unwrap();
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.flow_label(), MAX_FLOW_LABEL);
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut [0u8; 47][..])),
            Err(Error::Truncated)
        );
        assert!(
            Repr {
                flow_label: MAX_FLOW_LABEL + 1,
                ..r
            }
            .emit(&mut Packet::new_unchecked(&mut h[..]))
            .is_err()
        );
        assert!(
            Repr {
                payload_len: 70000,
                ..r
            }
            .emit(&mut Packet::new_unchecked(&mut h[..]))
            .is_err()
        );
    }

    #[test]
    fn jumbogram_refused() {
        let mut h = [0u8; 48];
        h[0] = 0x60;
        h[6] = ext::HOP_BY_HOP;
        assert_eq!(
            Packet::new_checked(&h[..]).unwrap_err(),
            Error::Unsupported("ipv6 jumbogram")
        );
        // Payload Length 0 with nothing after the header is just empty.
        assert!(Packet::new_checked(&h[..40]).is_ok());
    }

    #[test]
    fn version_checked_by_repr() {
        let mut h = [0u8; 40];
        h[0] = 0x40;
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::Malformed("ipv6 version != 6")));
    }

    #[test]
    fn setters_keep_neighbouring_bits() {
        let mut h = [0u8; 40];
        let mut p = Packet::new_unchecked(&mut h[..]);
        p.set_version(6);
        p.set_flow_label(0xfffff);
        p.set_traffic_class(0xa5);
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xa5);
        assert_eq!(p.flow_label(), 0xfffff);
        p.set_flow_label(0x12345);
        assert_eq!(p.traffic_class(), 0xa5);
        assert_eq!(p.version(), 6);
    }
}
