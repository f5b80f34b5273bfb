//! IP Payload Compression header (RFC 3173 §2.2).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Next Header   |     Flags     | Compression Parameter Index   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! With IPsec, IPComp sits inside ESP (ESP Next Header 108), and its own Next
//! Header names the compressed payload (4 or 41 in tunnel mode). The CPI
//! ranges come from RFC 3173 §3.3:
//!
//! - 0–63: well-known, "identical to IPCOMP Transform identifiers" of the
//!   IANA registry (RFC 2407 §4.4.5): OUI 1, DEFLATE 2, LZS 3, LZJH 4;
//! - 64–255: "reserved for future use";
//! - 256–61439: negotiated per IPComp Association (with IKEv2, the CPI of
//!   the IPCOMP_SUPPORTED notify, RFC 7296 §2.22);
//! - 61440–65535: private use.
//!
//! The Flags octet is "Reserved for future use. MUST be set to zero. MUST be
//! ignored by the receiving node." — so [`Repr`] drops it and emits zero,
//! and a reserved CPI is [`Error::Unsupported`] in `parse` and refused by
//! `emit`, since no SA can be using one.
//!
//! RFC 3173 §2.2 also allows a packet whose compressed payload would not be
//! smaller to be sent uncompressed without this header: that decision is the
//! data plane's, not this crate's.

use crate::bytes::{put_u16, u16_at};
use crate::{Error, Result};

/// Length of the IPComp header.
pub const HEADER_LEN: usize = 4;

/// Well-known CPIs (the IPCOMP transform IDs).
pub mod cpi {
    /// Proprietary, identified by an OUI (RFC 2407).
    pub const OUI: u16 = 1;
    /// DEFLATE (RFC 2394).
    pub const DEFLATE: u16 = 2;
    /// LZS (RFC 2395).
    pub const LZS: u16 = 3;
    /// ITU-T V.44 packet method (RFC 3051).
    pub const LZJH: u16 = 4;
}

/// Which RFC 3173 §3.3 range a CPI falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpiClass {
    /// 0–63: the CPI is the transform ID itself.
    WellKnown,
    /// 64–255: reserved.
    Reserved,
    /// 256–61439: chosen by the decompressing node during negotiation.
    Negotiated,
    /// 61440–65535: private use.
    Private,
}

impl CpiClass {
    /// Classifies a CPI.
    #[inline]
    pub const fn of(cpi: u16) -> CpiClass {
        match cpi {
            0..=63 => CpiClass::WellKnown,
            64..=255 => CpiClass::Reserved,
            256..=61439 => CpiClass::Negotiated,
            _ => CpiClass::Private,
        }
    }
}

/// A view of an IPComp packet.
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

    /// Wraps a buffer holding at least the header.
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

    /// Next Header: the protocol of the decompressed payload.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Flags (reserved, to be ignored).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Compression Parameter Index.
    #[inline]
    pub fn cpi(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The compressed payload.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Next Header.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[0] = nh;
    }

    /// Sets Flags.
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[1] = f;
    }

    /// Sets the CPI.
    #[inline]
    pub fn set_cpi(&mut self, cpi: u16) {
        put_u16(self.buffer.as_mut(), 2, cpi);
    }

    /// The compressed payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// An IPComp header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Protocol of the decompressed payload.
    pub next_header: u8,
    /// Compression Parameter Index (not in the reserved range).
    pub cpi: u16,
}

impl Repr {
    /// Parses a checked view; ignores Flags, refuses a reserved CPI.
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        let cpi = packet.cpi();
        if CpiClass::of(cpi) == CpiClass::Reserved {
            return Err(Error::Unsupported("ipcomp reserved cpi"));
        }
        Ok(Repr {
            next_header: packet.next_header(),
            cpi,
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with Flags zero.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        if CpiClass::of(self.cpi) == CpiClass::Reserved {
            return Err(Error::Unsupported("ipcomp reserved cpi"));
        }
        packet.check_len()?;
        packet.set_next_header(self.next_header);
        packet.set_flags(0);
        packet.set_cpi(self.cpi);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn deflate_tunnel_header() {
        let b = [4u8, 0, 0, 2, 0x78, 0x9c];
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.next_header(), 4);
        assert_eq!(p.cpi(), cpi::DEFLATE);
        assert_eq!(p.payload(), &[0x78, 0x9c]);
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                next_header: 4,
                cpi: 2
            }
        );
        let mut out = [0xffu8; 4];
        r.emit(&mut Packet::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, [4, 0, 0, 2]);
    }

    #[test]
    fn flags_ignored() {
        let b = [41u8, 0xff, 0x12, 0x34];
        let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            Repr {
                next_header: 41,
                cpi: 0x1234
            }
        );
    }

    #[test]
    fn cpi_ranges() {
        assert_eq!(CpiClass::of(0), CpiClass::WellKnown);
        assert_eq!(CpiClass::of(63), CpiClass::WellKnown);
        assert_eq!(CpiClass::of(64), CpiClass::Reserved);
        assert_eq!(CpiClass::of(255), CpiClass::Reserved);
        assert_eq!(CpiClass::of(256), CpiClass::Negotiated);
        assert_eq!(CpiClass::of(61439), CpiClass::Negotiated);
        assert_eq!(CpiClass::of(61440), CpiClass::Private);
        assert_eq!(CpiClass::of(65535), CpiClass::Private);
        let b = [4u8, 0, 0, 100];
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::Unsupported("ipcomp reserved cpi"))
        );
        let mut out = [0u8; 4];
        assert!(
            Repr {
                next_header: 4,
                cpi: 100
            }
            .emit(&mut Packet::new_unchecked(&mut out[..]))
            .is_err()
        );
    }

    #[test]
    fn short() {
        assert_eq!(
            Packet::new_checked(&[4u8, 0, 0][..]).unwrap_err(),
            Error::Truncated
        );
        let mut out = [0u8; 3];
        assert_eq!(
            Repr {
                next_header: 4,
                cpi: 2
            }
            .emit(&mut Packet::new_unchecked(&mut out[..])),
            Err(Error::Truncated)
        );
    }
}
