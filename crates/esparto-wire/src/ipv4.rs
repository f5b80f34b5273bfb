//! IPv4 header (RFC 791).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |Flags|      Fragment Offset    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! [`Packet::new_checked`] validates the three lengths once — the buffer,
//! the IHL (header with options, RFC 791 §3.1: "minimum value for a correct
//! header is 5") and the Total Length — so that every accessor afterwards is
//! in bounds. A buffer *longer* than Total Length is accepted and the excess
//! ignored (Ethernet pads short frames, and TUN reads may too); a shorter one
//! is [`Error::Truncated`].
//!
//! [`Repr`] covers the header *without options*: the headers Esparto itself
//! builds (outer headers are the kernel's business, ICMP errors are ours).
//! A header with options parses through the view but not into a `Repr`
//! ([`Error::Unsupported`]). The DSCP/ECN split follows RFC 2474 and
//! RFC 3168, which replaced RFC 791's TOS byte.

use core::net::Ipv4Addr;

use crate::bytes::{put_u16, u16_at};
use crate::checksum;
use crate::{Error, Result};

/// Length of a header without options (IHL 5).
pub const HEADER_LEN: usize = 20;
/// Longest header: IHL is four bits, in 32-bit words.
pub const MAX_HEADER_LEN: usize = 60;
/// Largest payload a header without options allows (Total Length is 16 bits).
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

/// Byte offsets of the header fields, for code that must name a position
/// rather than read a value: checksum offload (where the checksum field
/// lies), steering programs the kernel runs on the raw bytes.
pub mod field {
    use core::ops::Range;
    /// Version (high four bits) and IHL (low four bits).
    pub const VER_IHL: usize = 0;
    /// DSCP (high six bits) and ECN (low two bits).
    pub const DSCP_ECN: usize = 1;
    /// Total Length.
    pub const LENGTH: usize = 2;
    /// Identification.
    pub const IDENT: usize = 4;
    /// Flags (high three bits) and Fragment Offset.
    pub const FLG_OFF: usize = 6;
    /// Time to Live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header Checksum.
    pub const CHECKSUM: usize = 10;
    /// Source Address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination Address.
    pub const DST: Range<usize> = 16..20;
}

/// Flag bits and the offset mask of the Flags/Fragment Offset word
/// (RFC 791 §3.1), as a steering program tests them.
pub mod flags {
    /// Reserved, "must be zero".
    pub const RESERVED: u16 = 0x8000;
    /// Don't Fragment.
    pub const DF: u16 = 0x4000;
    /// More Fragments.
    pub const MF: u16 = 0x2000;
    /// The Fragment Offset, in 8-octet units.
    pub const OFFSET_MASK: u16 = 0x1fff;
}
use flags::{DF as FLAG_DF, MF as FLAG_MF, OFFSET_MASK, RESERVED as FLAG_RESERVED};

/// A view of an IPv4 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short
    /// buffer. For input use [`Packet::new_checked`].
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

    /// Checks buffer length, IHL and Total Length, so that every accessor
    /// (including [`Packet::options`] and [`Packet::payload`]) is in bounds.
    /// It does not check the version or the checksum: see [`Repr::parse`].
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed("ipv4 ihl < 5"));
        }
        if header_len > len {
            return Err(Error::Truncated);
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::Malformed("ipv4 total length < header length"));
        }
        if total_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 for a valid packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// Differentiated Services Code Point (RFC 2474), six bits.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit Congestion Notification (RFC 3168), two bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// DSCP and ECN together: the second byte as it is (RFC 791's Type of
    /// Service), for comparing two headers.
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total Length: header and data, in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::IDENT)
    }

    fn flags_offset(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::FLG_OFF)
    }

    /// Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_offset() & FLAG_DF != 0
    }

    /// The reserved flag bit (RFC 791: "must be zero").
    #[inline]
    pub fn reserved_flag(&self) -> bool {
        self.flags_offset() & FLAG_RESERVED != 0
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_offset() & FLAG_MF != 0
    }

    /// Fragment offset in **bytes** (the field counts 8-octet units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_offset() & OFFSET_MASK) << 3
    }

    /// Whether this is a fragment (first, middle or last) rather than a
    /// whole datagram.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_offset() & (FLAG_MF | OFFSET_MASK) != 0
    }

    /// Time to Live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (IANA protocol number, see [`crate::ip::proto`]).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Whether the header checksum (over the header, options included) is
    /// correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Option bytes (between the fixed header and the payload).
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: from the end of the header to Total Length (trailing
    /// bytes beyond Total Length excluded).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }

    /// The packet proper: the first Total Length bytes of the buffer.
    #[inline]
    pub fn packet(&self) -> &'a [u8] {
        &self.buffer.as_ref()[..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the Version field.
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (version << 4);
    }

    /// Sets IHL from a header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Sets the DSCP (low six bits of `dscp`).
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (dscp << 2);
    }

    /// Sets the ECN codepoint (low two bits of `ecn`).
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (ecn & 0x03);
    }

    /// Sets Total Length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets Identification.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        put_u16(self.buffer.as_mut(), field::IDENT, ident);
    }

    /// Sets the flags and fragment offset (in bytes; the low three bits are
    /// dropped). The reserved flag bit is cleared (RFC 791: "must be zero").
    #[inline]
    pub fn set_flags_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let mut v = (offset >> 3) & OFFSET_MASK;
        if dont_frag {
            v |= FLAG_DF;
        }
        if more_frags {
            v |= FLAG_MF;
        }
        put_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    /// Sets Time to Live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets Protocol.
    #[inline]
    pub fn set_protocol(&mut self, proto: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = proto;
    }

    /// Sets the Header Checksum field.
    #[inline]
    pub fn set_checksum(&mut self, sum: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.octets());
    }

    /// Computes and writes the header checksum (RFC 791: "the 16 bit one's
    /// complement of the one's complement sum of all 16 bit words in the
    /// header", with the field itself taken as zero).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(!sum);
    }

    /// The payload, writable (from the header end to Total Length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.header_len()..usize::from(self.total_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// An IPv4 header without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length in bytes (Total Length − 20).
    pub payload_len: usize,
    /// Time to Live.
    pub ttl: u8,
    /// DSCP, 0..=63.
    pub dscp: u8,
    /// ECN, 0..=3.
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Repr {
    /// Parses a checked view. Rejects a version other than 4 and a wrong
    /// header checksum (`Malformed`), and options (`Unsupported`).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed("ipv4 version != 4"));
        }
        if packet.header_len() != HEADER_LEN {
            return Err(Error::Unsupported("ipv4 options"));
        }
        if !packet.verify_checksum() {
            return Err(Error::Malformed("ipv4 header checksum"));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - HEADER_LEN,
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
        })
    }

    /// Header plus payload length.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header (with its checksum) at the start of the buffer,
    /// which must hold [`Repr::buffer_len`] bytes; the payload is left for
    /// the caller (via [`Packet::payload_mut`]).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if self.payload_len > MAX_PAYLOAD_LEN {
            return Err(Error::Malformed("ipv4 payload too long"));
        }
        if self.dscp > 63 {
            return Err(Error::Malformed("ipv4 dscp > 63"));
        }
        if self.ecn > 3 {
            return Err(Error::Malformed("ipv4 ecn > 3"));
        }
        if self.frag_offset % 8 != 0 {
            return Err(Error::Malformed("ipv4 fragment offset not a multiple of 8"));
        }
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.buffer.as_mut()[field::VER_IHL] = 0x45;
        packet.buffer.as_mut()[field::DSCP_ECN] = (self.dscp << 2) | self.ecn;
        packet.set_total_len(self.buffer_len() as u16);
        packet.set_ident(self.ident);
        packet.set_flags_offset(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testutil::hex;

    #[test]
    fn udp_dns_query_captured() {
        let bytes = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert!(p.verify_checksum());
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.src_addr(), Ipv4Addr::new(192, 168, 1, 10));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 1, 1));
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(usize::from(p.total_len()), bytes.len());
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, bytes.len() - 20);
        assert_eq!(r.ttl, 64);
        // Re-emitting gives the same header bytes.
        let mut out = bytes.clone();
        out[..20].fill(0);
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn options_router_alert() {
        let bytes = hex(include_str!("../testdata/ipv4_options_igmp.hex"));
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        // RFC 2113 Router Alert: type 148, length 4, value 0.
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 8);
        assert_eq!(Repr::parse(&p), Err(Error::Unsupported("ipv4 options")));
    }

    #[test]
    fn trailing_bytes_ignored() {
        let mut bytes = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let n = bytes.len();
        bytes.extend_from_slice(&[0u8; 6]); // Ethernet-style padding
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.payload().len(), n - 20);
        assert_eq!(p.packet().len(), n);
    }

    fn header() -> [u8; 20] {
        let mut h = [0u8; 20];
        Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            protocol: 6,
            payload_len: 0,
            ttl: 64,
            dscp: 46,
            ecn: 1,
            ident: 0x1234,
            dont_frag: false,
            more_frags: true,
            frag_offset: 1480,
        }
        .emit(&mut Packet::new_unchecked(&mut h[..]))
        .unwrap();
        h
    }

    #[test]
    fn fields_round_trip() {
        let h = header();
        let p = Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.more_frags() && !p.dont_frag() && p.is_fragment());
        assert_eq!(p.ident(), 0x1234);
        assert!(p.verify_checksum());
    }

    #[test]
    fn length_errors() {
        let h = header();
        assert_eq!(Packet::new_checked(&h[..19]).unwrap_err(), Error::Truncated);
        let mut bad = h;
        bad[0] = 0x44; // IHL 4
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed("ipv4 ihl < 5")
        );
        bad[0] = 0x46; // IHL 6: 24 > 20
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Truncated);
        let mut bad = h;
        bad[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed("ipv4 total length < header length")
        );
        bad[2..4].copy_from_slice(&21u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn repr_rejects_bad_version_and_checksum() {
        let mut h = header();
        h[0] = 0x65;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&h[..]).unwrap()),
            Err(Error::Malformed("ipv4 version != 4"))
        );
        let mut h = header();
        h[8] ^= 1; // TTL changed, checksum not updated
        assert_eq!(
            Repr::parse(&Packet::new_checked(&h[..]).unwrap()),
            Err(Error::Malformed("ipv4 header checksum"))
        );
    }

    #[test]
    fn emit_checks_repr_and_buffer() {
        let h = header();
        let p = Packet::new_checked(&h[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        let mut buf = [0u8; 20];
        let mut view = Packet::new_unchecked(&mut buf[..]);
        assert_eq!(
            Repr {
                payload_len: 1,
                ..r
            }
            .emit(&mut view),
            Err(Error::Truncated)
        );
        assert!(Repr { dscp: 64, ..r }.emit(&mut view).is_err());
        assert!(Repr { ecn: 4, ..r }.emit(&mut view).is_err());
        assert!(
            Repr {
                frag_offset: 3,
                ..r
            }
            .emit(&mut view)
            .is_err()
        );
        assert!(
            Repr {
                payload_len: MAX_PAYLOAD_LEN + 1,
                ..r
            }
            .emit(&mut view)
            .is_err()
        );
    }

    #[test]
    fn ttl_decrement_with_incremental_checksum() {
        let mut h = header();
        let mut p = Packet::new_unchecked(&mut h[..]);
        let old = u16::from_be_bytes([p.ttl(), p.protocol()]);
        p.set_ttl(p.ttl() - 1);
        let new = u16::from_be_bytes([p.ttl(), p.protocol()]);
        let c = checksum::update(p.checksum(), old, new);
        p.set_checksum(c);
        assert!(p.verify_checksum());
    }
}
