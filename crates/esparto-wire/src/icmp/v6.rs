//! ICMPv6 messages (RFC 4443).
//!
//! Same layout as ICMPv4, but the checksum covers the IPv6 pseudo header
//! too (RFC 4443 §2.3), so verifying and filling it takes the addresses; the
//! `Repr` takes them on both `parse` and `emit`. Types below 128 are error
//! messages (RFC 4443 §2.1), which matters for the rule against errors about
//! errors.

use core::net::Ipv6Addr;

use crate::bytes::{put_u16, put_u32, u16_at, u32_at};
use crate::checksum::{self, Checksum};
use crate::ip::proto;
use crate::{Error, Result};

pub use super::HEADER_LEN;

/// ICMPv6 message types (RFC 4443 §2.1, RFC 4861).
pub mod msg_type {
    /// Destination Unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet Too Big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time Exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter Problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo Request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo Reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor Discovery Redirect (RFC 4861 §4.5).
    pub const REDIRECT: u8 = 137;
}

/// Whether `msg_type` is an error message: "Error messages are identified as
/// such by a zero in the high-order bit of their message Type field values"
/// (RFC 4443 §2.1).
#[inline]
pub const fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// A view of an ICMPv6 message.
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

    /// MTU of a Packet Too Big message (RFC 4443 §3.2).
    #[inline]
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
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

    /// Whether this is an error message ([`is_error`]).
    #[inline]
    pub fn is_error(&self) -> bool {
        is_error(self.msg_type())
    }

    /// Whether the checksum (pseudo header + message) is correct.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let Ok(len) = u32::try_from(b.len()) else {
            return false;
        };
        checksum::combine(&[
            checksum::pseudo_header_v6(src, dst, proto::ICMPV6, len),
            checksum::data(b),
        ]) == 0xffff
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

    /// Computes and writes the checksum for a message from `src` to `dst`.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Result<()> {
        let len = u32::try_from(self.buffer.as_ref().len())
            .map_err(|_| Error::Malformed("icmpv6 too long"))?;
        self.set_checksum(0);
        let mut c = Checksum::new();
        c.add_sum(checksum::pseudo_header_v6(src, dst, proto::ICMPV6, len))
            .add(self.buffer.as_ref());
        self.set_checksum(c.finish());
        Ok(())
    }

    /// Data after the header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// Any ICMPv6 message: the common header and the data.
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
    /// Parses a checked view of a message from `src` to `dst`; a wrong
    /// checksum is `Malformed`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        packet: &Packet<&'a T>,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Malformed("icmpv6 checksum"));
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

    /// Writes the whole message with its checksum into a buffer of exactly
    /// [`Repr::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if packet.buffer.as_ref().len() != self.buffer_len() {
            return Err(Error::Truncated);
        }
        packet.set_msg_type(self.msg_type);
        packet.set_code(self.code);
        packet.set_rest_of_header(self.rest_of_header);
        packet.data_mut().copy_from_slice(self.data);
        packet.fill_checksum(src, dst)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ipv6;
    use crate::testutil::hex;

    #[test]
    fn echo_request_captured() {
        let bytes = hex(include_str!("../../testdata/ipv6_icmpv6_echo.hex"));
        let ip = ipv6::Packet::new_checked(&bytes[..]).unwrap();
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let p = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!((p.echo_ident(), p.echo_seq()), (0x1d2c, 7));
        assert!(p.verify_checksum(src, dst));
        assert!(!p.verify_checksum(dst, Ipv6Addr::LOCALHOST));
        let r = Repr::parse(src, dst, &p).unwrap();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(src, dst, &mut Packet::new_unchecked(&mut out[..]))
            .unwrap();
        assert_eq!(&out[..], ip.payload());
        assert_eq!(
            Repr::parse(dst, src, &p).map(|_| ()),
            Ok(()),
            "swapping src/dst keeps the sum"
        );
        assert_eq!(
            Repr::parse(Ipv6Addr::LOCALHOST, dst, &p),
            Err(Error::Malformed("icmpv6 checksum"))
        );
    }

    #[test]
    fn error_types() {
        assert!(is_error(msg_type::PACKET_TOO_BIG));
        assert!(is_error(0));
        assert!(!is_error(msg_type::ECHO_REQUEST));
        assert!(!is_error(msg_type::REDIRECT));
    }
}
