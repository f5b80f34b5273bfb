//! ICMPv4 messages (RFC 792).
//!
//! The view exposes the common header and the type-specific words the
//! gateway needs (echo identifier/sequence, the RFC 1191 next-hop MTU). The
//! checksum covers the whole message, which has no length field of its own:
//! make the view over exactly the IPv4 payload.

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::checksum;
use crate::{Error, Result};

pub use super::HEADER_LEN;

/// ICMPv4 message types (RFC 792; IANA "ICMP Type Numbers").
pub mod msg_type {
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination Unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source Quench (deprecated by RFC 6633, still an error message).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter Problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 13;
    /// Timestamp Reply.
    pub const TIMESTAMP_REPLY: u8 = 14;
}

/// Destination Unreachable code 4: "fragmentation needed and DF set".
pub const CODE_FRAG_NEEDED: u8 = 4;

/// Whether `msg_type` is an error message (RFC 1122 §3.2.2: Destination
/// Unreachable, Source Quench, Redirect, Time Exceeded, Parameter Problem),
/// about which no further ICMP error may be sent.
#[inline]
pub const fn is_error(msg_type: u8) -> bool {
    matches!(
        msg_type,
        msg_type::DEST_UNREACHABLE
            | msg_type::SOURCE_QUENCH
            | msg_type::REDIRECT
            | msg_type::TIME_EXCEEDED
            | msg_type::PARAMETER_PROBLEM
    )
}

/// A view of an ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer that holds at least the 8-byte header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header fits.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }

    /// The four type-specific header bytes, as one word.
    #[inline]
    pub fn rest_of_header(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 4)
    }

    /// Echo identifier (Echo Request/Reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number (Echo Request/Reply).
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }

    /// Next-hop MTU of a Fragmentation Needed message (RFC 1191 §4).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }

    /// Whether this is an error message ([`is_error`]).
    #[inline]
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }

    /// Whether the checksum over the whole message is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Data after the header (for errors: the quoted offending packet).
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the Type.
    #[inline]
    pub fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[0] = t;
    }

    /// Sets the Code.
    #[inline]
    pub fn set_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c;
    }

    /// Sets the Checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        put_u16(self.buffer.as_mut(), 2, c);
    }

    /// Sets the four type-specific header bytes.
    #[inline]
    pub fn set_rest_of_header(&mut self, w: u32) {
        put_u32(self.buffer.as_mut(), 4, w);
    }

    /// Computes and writes the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let s = checksum::data(self.buffer.as_ref());
        self.set_checksum(!s);
    }

    /// Data after the header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Any ICMPv4 message: the common header and the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Type.
    pub msg_type: u8,
    /// Code.
    pub code: u8,
    /// The four type-specific header bytes.
    pub rest_of_header: u32,
    /// Data after the header.
    pub data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a checked view; a wrong checksum is `Malformed`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed("icmp checksum"));
        }
        Ok(Repr {
            msg_type: packet.msg_type(),
            code: packet.code(),
            rest_of_header: packet.rest_of_header(),
            data: packet.data(),
        })
    }

    /// Header plus data.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data.len()
    }

    /// Writes the whole message, checksum included, into a buffer of exactly
    /// [`Repr::buffer_len`] bytes (the checksum covers the buffer).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if packet.buffer.as_ref().len() != self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_msg_type(self.msg_type);
        packet.set_code(self.code);
        packet.set_rest_of_header(self.rest_of_header);
        packet.data_mut().copy_from_slice(self.data);
        packet.fill_checksum();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ipv4;
    use crate::testutil::hex;

    #[test]
    fn echo_request_captured() {
        let bytes = hex(include_str!("../../testdata/ipv4_icmp_echo.hex"));
        let ip = ipv4::Packet::new_checked(&bytes[..]).unwrap();
        let p = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.code(), 0);
        assert_eq!(p.echo_ident(), 0x4242);
        assert_eq!(p.echo_seq(), 1);
        assert_eq!(p.data().len(), 56);
        assert!(p.verify_checksum());
        assert!(!p.is_error());
        let r = Repr::parse(&p).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(&out[..], ip.payload());
    }

    #[test]
    fn checksum_and_length() {
        assert_eq!(
            Packet::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        let b = [8u8, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Malformed("icmp checksum"))
        );
        let r = Repr {
            msg_type: 0,
            code: 0,
            rest_of_header: 0,
            data: &[1],
        };
        assert_eq!(
            r.emit(&mut Packet::new_unchecked(&mut [0u8; 10][..])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn error_types() {
        for t in [3, 4, 5, 11, 12] {
            assert!(is_error(t));
        }
        for t in [0, 8, 13, 14, 9, 10] {
            assert!(!is_error(t));
        }
    }
}
