//! UDP header (RFC 768), with checksums over the IPv4 and IPv6 pseudo
//! headers.
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |     Source      |   Destination   |
//! |      Port       |      Port       |
//! +--------+--------+--------+--------+
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! ```
//!
//! The Length field covers header and data, so the view checks it once
//! against the buffer: below 8 is `Malformed`, beyond the buffer is
//! `Truncated`, and a buffer longer than Length (IP padding) is fine — the
//! payload stops at Length.
//!
//! Checksum rules differ by IP version, and both are implemented as the RFCs
//! state them:
//!
//! - IPv4, RFC 768: "An all zero transmitted checksum value means that the
//!   transmitter generated no checksum", so zero verifies; a computed zero
//!   is transmitted as all ones.
//! - IPv6, RFC 8200 §8.1: the checksum "is not optional", and "IPv6
//!   receivers must discard UDP packets containing a zero checksum", so zero
//!   fails verification. (RFC 6935/6936 carve out zero-checksum tunnels;
//!   Esparto does not use them.)
//!
//! For ESP-in-UDP over IPv4, RFC 3948 §2.1 says the sender SHOULD transmit a
//! zero checksum and the receiver "MUST NOT depend on" it; that policy lives
//! in the I/O layer, which simply does not call `verify_checksum_v4`.
//!
//! [`Repr`] holds the header fields and the payload length; the caller
//! writes the payload through [`Packet::payload_mut`] and then fills the
//! checksum, which covers the payload.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{put_u16, u16_at};
use crate::checksum::{self, Checksum};
use crate::ip::proto;
use crate::{Error, Result};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// Byte offsets of the header fields, for code that must name a position
/// rather than read a value: checksum offload (where the checksum field
/// lies), steering programs the kernel runs on the raw bytes.
pub mod field {
    /// Source Port.
    pub const SRC_PORT: usize = 0;
    /// Destination Port.
    pub const DST_PORT: usize = 2;
    /// Length.
    pub const LENGTH: usize = 4;
    /// Checksum.
    pub const CHECKSUM: usize = 6;
}

/// A view of a UDP datagram (header and payload).
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

    /// Checks the header and the Length field against the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let field_len = usize::from(self.len());
        if field_len < HEADER_LEN {
            return Err(Error::Malformed("udp length < 8"));
        }
        if field_len > len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field: header plus data.
    #[inline]
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the datagram carries no data (Length is 8).
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    fn sum(&self) -> u16 {
        checksum::data(&self.buffer.as_ref()[..usize::from(self.len())])
    }

    /// Verifies the checksum for an IPv4 packet from `src` to `dst`; a zero
    /// field means "no checksum" and verifies (RFC 768).
    #[inline]
    pub fn verify_checksum_v4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let ph = checksum::pseudo_header_v4(src, dst, proto::UDP, self.len());
        checksum::combine(&[ph, self.sum()]) == 0xffff
    }

    /// Verifies the checksum for an IPv6 packet from `src` to `dst`; a zero
    /// field fails (RFC 8200 §8.1).
    #[inline]
    pub fn verify_checksum_v6(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        if self.checksum() == 0 {
            return false;
        }
        let ph = checksum::pseudo_header_v6(src, dst, proto::UDP, u32::from(self.len()));
        checksum::combine(&[ph, self.sum()]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The data: after the header, up to Length.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        put_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        put_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the Length field.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        put_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the Checksum field.
    #[inline]
    pub fn set_checksum(&mut self, sum: u16) {
        put_u16(self.buffer.as_mut(), field::CHECKSUM, sum);
    }

    fn fill_with(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let mut c = Checksum::new();
        c.add_sum(pseudo)
            .add(&self.buffer.as_ref()[..usize::from(self.len())]);
        // RFC 768: "If the computed checksum is zero, it is transmitted as
        // all ones"; the same holds for IPv6 (RFC 8200 §8.1).
        let sum = match c.finish() {
            0 => 0xffff,
            s => s,
        };
        self.set_checksum(sum);
    }

    /// Computes and writes the checksum for IPv4 (over Length bytes, which
    /// the view must hold).
    #[inline]
    pub fn fill_checksum_v4(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let ph = checksum::pseudo_header_v4(src, dst, proto::UDP, self.len());
        self.fill_with(ph);
    }

    /// Computes and writes the checksum for IPv6.
    #[inline]
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let ph = checksum::pseudo_header_v6(src, dst, proto::UDP, u32::from(self.len()));
        self.fill_with(ph);
    }

    /// The data, writable (after the header, up to Length).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// A UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Bytes of data after the header (Length − 8).
    pub payload_len: usize,
}

impl Repr {
    /// Reads the header from a checked view. The checksum needs the IP
    /// addresses and is verified separately (`verify_checksum_v4/v6`).
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Header plus data.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header with a zero checksum; the buffer must hold
    /// [`Repr::buffer_len`] bytes. Fill the payload, then the checksum.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        let len = u16::try_from(self.buffer_len())
            .map_err(|_| Error::Malformed("udp payload too long"))?;
        if packet.buffer.as_ref().len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        packet.set_checksum(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::testutil::hex;
    use crate::{ipv4, ipv6};

    #[test]
    fn dns_query_captured() {
        let bytes = hex(include_str!("../testdata/ipv4_udp_dns.hex"));
        let ip = ipv4::Packet::new_checked(&bytes[..]).unwrap();
        let udp = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(udp.src_port(), 54321);
        assert_eq!(udp.dst_port(), 53);
        assert_eq!(usize::from(udp.len()), ip.payload().len());
        assert!(udp.verify_checksum_v4(ip.src_addr(), ip.dst_addr()));
        assert!(!udp.verify_checksum_v4(ip.dst_addr(), Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(&udp.payload()[12..20], b"\x07example");
        // Refill from scratch: same bytes.
        let mut copy = ip.payload().to_vec();
        let mut p = Packet::new_unchecked(&mut copy[..]);
        p.set_checksum(0x1234);
        p.fill_checksum_v4(ip.src_addr(), ip.dst_addr());
        assert_eq!(&copy[..], ip.payload());
    }

    #[test]
    fn ipv6_fragment_piece_has_full_length() {
        // The captured IPv6 packet is a first fragment: the UDP Length covers
        // the whole reassembled datagram, so the view reports Truncated.
        let bytes = hex(include_str!("../testdata/ipv6_hbh_frag_udp.hex"));
        let ip = ipv6::Packet::new_checked(&bytes[..]).unwrap();
        let ul = ip.upper_layer().unwrap();
        let l4 = &ip.payload()[ul.offset..];
        assert_eq!(Packet::new_checked(l4).unwrap_err(), Error::Truncated);
        let p = Packet::new_unchecked(l4);
        assert_eq!((p.src_port(), p.dst_port()), (5060, 5061));
    }

    #[test]
    fn zero_checksum_rules() {
        let src = Ipv6Addr::LOCALHOST;
        let mut b = [0u8; 12];
        Repr {
            src_port: 1,
            dst_port: 2,
            payload_len: 4,
        }
        .emit(&mut Packet::new_unchecked(&mut b[..]))
        .unwrap();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum_v4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST));
        assert!(!p.verify_checksum_v6(src, src));
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum_v6(src, src);
        assert_ne!(p.checksum(), 0);
        assert!(p.verify_checksum_v6(src, src));
    }

    #[test]
    fn computed_zero_sent_as_ones() {
        // Choose ports so that the full sum is 0xffff, i.e. the checksum
        // computes to zero and must be sent as 0xffff.
        let a = Ipv4Addr::new(0, 0, 0, 0);
        let mut b = [0u8; 8];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_len(8);
        // Sum so far: pseudo (proto 17 + len 8) + header length 8 = 33.
        p.set_src_port(0xffff - 33);
        p.fill_checksum_v4(a, a);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum_v4(a, a));
    }

    #[test]
    fn length_checks() {
        let mut b = [0u8; 10];
        b[4..6].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::Malformed("udp length < 8")
        );
        b[4..6].copy_from_slice(&11u16.to_be_bytes());
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[4..6].copy_from_slice(&9u16.to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 1); // the 10th byte is IP padding
        assert_eq!(Packet::new_checked(&b[..7]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn emit_limits() {
        let mut b = [0u8; 8];
        let r = Repr {
            src_port: 1,
            dst_port: 2,
            payload_len: 1,
        };
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut b[..])),
            Err(Error::Truncated)
        );
        let r = Repr {
            payload_len: 65528,
            ..r
        };
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut b[..])),
            Err(Error::Malformed("udp payload too long"))
        );
    }
}
