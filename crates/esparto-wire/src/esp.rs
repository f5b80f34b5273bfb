//! ESP header and trailer (RFC 4303).
//!
//! An ESP packet on the wire is (RFC 4303 §2, Figure 1):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               Security Parameters Index (SPI)                 |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                      Sequence Number                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Payload Data* (variable)                   |
//! ~                                                               ~
//! +               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               |     Padding (0-255 bytes)                     |
//! +-+-+-+-+-+-+-+-+               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                               |  Pad Length   | Next Header   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Integrity Check Value-ICV   (variable)                |
//! ~                                                               ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Only the first eight bytes are in the clear, so this module splits the
//! format in two:
//!
//! - [`Packet`] / [`Repr`]: the cleartext header. The view checks length only;
//!   it does **not** reject reserved SPIs, because the receiver's first job is
//!   a SAD lookup by SPI, which fails for them anyway. [`is_reserved_spi`]
//!   is there for the sender side and for counters.
//! - [`Trailer`]: what ends the *decrypted* plaintext — padding, Pad Length,
//!   Next Header. The IV and ICV sizes depend on the SA's transform, so
//!   cutting them off is the job of `esparto-esp`, not of this crate.
//!
//! The padding check implements the default of RFC 4303 §2.4: padding bytes
//! are 1, 2, 3, …, and "the receiver SHOULD inspect the Padding field"; every
//! transform we support (AES-GCM, ChaCha20-Poly1305, AES-CBC) uses that
//! default.

use crate::bytes::u32_at;
use crate::{Error, Result};

/// Length of the cleartext ESP header: SPI + Sequence Number.
pub const HEADER_LEN: usize = 8;
/// Length of the fixed part of the trailer: Pad Length + Next Header.
pub const TRAILER_LEN: usize = 2;
/// The Pad Length field is one octet (RFC 4303 §2.5).
pub const MAX_PAD_LEN: usize = 255;

/// Next Header for a tunnel-mode IPv4 payload (IP-in-IP).
pub const NEXT_HEADER_IPV4: u8 = 4;
/// Next Header for a tunnel-mode IPv6 payload.
pub const NEXT_HEADER_IPV6: u8 = 41;
/// Next Header of a dummy packet (RFC 4303 §2.6): "the receiver MUST discard it".
pub const NEXT_HEADER_NO_NEXT: u8 = 59;
/// Next Header for an IPComp-compressed payload (RFC 3173).
pub const NEXT_HEADER_IPCOMP: u8 = 108;

/// The smallest SPI an SA may have. RFC 4303 §2.1: "The SPI value of zero
/// (0) is reserved for local, implementation-specific use and MUST NOT be
/// sent on the wire", and 1–255 "are reserved by the Internet Assigned
/// Numbers Authority (IANA) for future use".
pub const MIN_SPI: u32 = 256;

/// Whether no SA may be given `spi` (it is below [`MIN_SPI`]).
#[inline]
pub const fn is_reserved_spi(spi: u32) -> bool {
    spi < MIN_SPI
}

/// Byte offsets of the header fields, for code that must name a position
/// rather than read a value: checksum offload (where the checksum field
/// lies), steering programs the kernel runs on the raw bytes.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Security Parameters Index.
    pub const SPI: Range<usize> = 0..4;
    /// Sequence Number.
    pub const SEQ: Range<usize> = 4..8;
    /// Payload Data (IV, ciphertext, ICV).
    pub const PAYLOAD: RangeFrom<usize> = 8..;
}

/// A view of an ESP packet: the cleartext header and the opaque rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic if it is
    /// shorter than [`HEADER_LEN`]. Use [`Packet::new_checked`] on input.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps a buffer after checking it holds at least the ESP header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that every accessor stays in bounds.
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

    /// Security Parameters Index.
    #[inline]
    pub fn spi(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SPI.start)
    }

    /// Sequence Number (the low 32 bits when ESN is in use, RFC 4303 §2.2.1).
    #[inline]
    pub fn seq(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SEQ.start)
    }

    /// Whether the SPI is one no SA may have (see [`is_reserved_spi`]).
    #[inline]
    pub fn is_reserved_spi(&self) -> bool {
        is_reserved_spi(self.spi())
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Everything after the header: IV, ciphertext, ICV.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the SPI.
    #[inline]
    pub fn set_spi(&mut self, spi: u32) {
        self.buffer.as_mut()[field::SPI].copy_from_slice(&spi.to_be_bytes());
    }

    /// Sets the Sequence Number.
    #[inline]
    pub fn set_seq(&mut self, seq: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.to_be_bytes());
    }

    /// Everything after the header, writable (the encrypter fills it).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The cleartext ESP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Security Parameters Index.
    pub spi: u32,
    /// Sequence Number (low 32 bits).
    pub seq: u32,
}

impl Repr {
    /// Reads the header from a checked view.
    #[inline]
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            spi: packet.spi(),
            seq: packet.seq(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; the payload is left alone.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) -> Result<()> {
        packet.check_len()?;
        packet.set_spi(self.spi);
        packet.set_seq(self.seq);
        Ok(())
    }
}

/// The end of a decrypted ESP payload: Pad Length and Next Header, with the
/// padding they describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Trailer {
    /// Number of padding bytes before the Pad Length field.
    pub pad_len: u8,
    /// Protocol of the payload data ([`NEXT_HEADER_IPV4`], …).
    pub next_header: u8,
}

impl Trailer {
    /// Reads the trailer at the end of `plaintext` (payload data ‖ padding ‖
    /// Pad Length ‖ Next Header, ICV already removed) and checks the padding.
    ///
    /// RFC 4303 §2.4: padding bytes are "initialized with a series of
    /// (unsigned, 1-byte) integer values. The first padding byte appended to
    /// the plaintext is numbered 1, with subsequent padding bytes making up a
    /// monotonically increasing sequence", and the receiver SHOULD check them.
    #[inline]
    pub fn parse(plaintext: &[u8]) -> Result<Trailer> {
        Self::split(plaintext).map(|(_, t)| t)
    }

    /// Like [`Trailer::parse`], also returning the payload data in front of
    /// the padding (the inner packet, possibly followed by TFC padding,
    /// RFC 4303 §2.7).
    #[inline]
    pub fn split(plaintext: &[u8]) -> Result<(&[u8], Trailer)> {
        let n = plaintext.len();
        if n < TRAILER_LEN {
            return Err(Error::Truncated);
        }
        let pad_len = plaintext[n - 2];
        let next_header = plaintext[n - 1];
        let data_len = (n - TRAILER_LEN)
            .checked_sub(usize::from(pad_len))
            .ok_or(Error::Malformed("esp pad length"))?;
        let (data, rest) = plaintext.split_at(data_len);
        let padding = &rest[..usize::from(pad_len)];
        if !padding
            .iter()
            .enumerate()
            .all(|(i, &b)| usize::from(b) == i + 1)
        {
            return Err(Error::Malformed("esp padding"));
        }
        Ok((
            data,
            Trailer {
                pad_len,
                next_header,
            },
        ))
    }

    /// Bytes [`Trailer::emit`] writes: padding, Pad Length, Next Header.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.pad_len as usize + TRAILER_LEN
    }

    /// Whether this ends a dummy packet (RFC 4303 §2.6), to be dropped
    /// silently after integrity has been verified.
    #[inline]
    pub const fn is_dummy(&self) -> bool {
        self.next_header == NEXT_HEADER_NO_NEXT
    }

    /// Writes padding 1, 2, …, `pad_len`, then Pad Length and Next Header
    /// into the first [`Trailer::buffer_len`] bytes of `buf`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = self.buffer_len();
        let out = buf.get_mut(..len).ok_or(Error::Truncated)?;
        let (padding, fixed) = out.split_at_mut(usize::from(self.pad_len));
        for (i, b) in padding.iter_mut().enumerate() {
            // i < pad_len <= 255, so i + 1 fits.
            *b = (i + 1) as u8;
        }
        fixed[0] = self.pad_len;
        fixed[1] = self.next_header;
        Ok(())
    }
}

/// Padding bytes to add after `payload_len` bytes of data so that data,
/// padding and the two trailer bytes end on an `align` boundary.
///
/// RFC 4303 §2.4: the ciphertext must be a multiple of the cipher's block
/// size, and in any case "the Pad Length and Next Header fields [must be]
/// right aligned within a 4-byte word". So `align` is the block size for CBC
/// (16) and 4 for AEAD/stream transforms (RFC 4106 §3.2, RFC 7634 §3); values
/// below 4 count as 4. `align` should be a power of two no larger than 256,
/// so the result fits the one-octet Pad Length; larger values are clamped.
#[inline]
pub const fn padding_for(payload_len: usize, align: usize) -> usize {
    let align = if align < 4 {
        4
    } else if align > 256 {
        256
    } else {
        align
    };
    let used = (payload_len + TRAILER_LEN) % align;
    if used == 0 { 0 } else { align - used }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn header_view() {
        let bytes = [0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x07, 0xaa, 0xbb];
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.spi(), 0x1234);
        assert_eq!(p.seq(), 7);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        assert!(!p.is_reserved_spi());
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr {
                spi: 0x1234,
                seq: 7
            }
        );
    }

    #[test]
    fn short_header_is_truncated() {
        assert_eq!(
            Packet::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::Truncated
        );
        assert!(
            Packet::new_checked(&[0u8; 8][..])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn reserved_spis() {
        assert!(is_reserved_spi(0));
        assert!(is_reserved_spi(1));
        assert!(is_reserved_spi(255));
        assert!(!is_reserved_spi(256));
        assert!(!is_reserved_spi(u32::MAX));
    }

    #[test]
    fn emit_header() {
        let mut buf = [0u8; 12];
        let repr = Repr {
            spi: 0xdead_beef,
            seq: 0x0102_0304,
        };
        repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(&buf[..8], &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4]);
        let mut short = [0u8; 4];
        assert_eq!(
            repr.emit(&mut Packet::new_unchecked(&mut short[..])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn trailer_with_padding() {
        // "hello" + padding 1..=3 + pad len 3 + next header 4 (IPv4).
        let pt = *b"hello\x01\x02\x03\x03\x04";
        let (data, t) = Trailer::split(&pt).unwrap();
        assert_eq!(data, b"hello");
        assert_eq!(
            t,
            Trailer {
                pad_len: 3,
                next_header: NEXT_HEADER_IPV4
            }
        );
        assert_eq!(t.buffer_len(), 5);
    }

    #[test]
    fn trailer_without_padding_and_dummy() {
        let (data, t) = Trailer::split(&[0x00, 59]).unwrap();
        assert!(data.is_empty());
        assert!(t.is_dummy());
    }

    #[test]
    fn trailer_rejects_bad_padding() {
        assert_eq!(
            Trailer::parse(b"x\x01\x03\x02\x04"),
            Err(Error::Malformed("esp padding"))
        );
        assert_eq!(
            Trailer::parse(b"x\x00\x01\x02\x04"),
            Err(Error::Malformed("esp padding"))
        );
        // Pad Length larger than what precedes it.
        assert_eq!(
            Trailer::parse(b"\x01\x02\x04"),
            Err(Error::Malformed("esp pad length"))
        );
        assert_eq!(Trailer::parse(b"\x04"), Err(Error::Truncated));
        assert_eq!(Trailer::parse(b""), Err(Error::Truncated));
    }

    #[test]
    fn trailer_full_255_padding() {
        let mut pt = vec![0xeeu8; 10];
        pt.extend(1..=255u8);
        pt.extend([255, NEXT_HEADER_IPV6]);
        let (data, t) = Trailer::split(&pt).unwrap();
        assert_eq!(data.len(), 10);
        assert_eq!(t.pad_len, 255);
    }

    #[test]
    fn trailer_emit_parse() {
        let t = Trailer {
            pad_len: 6,
            next_header: NEXT_HEADER_IPCOMP,
        };
        let mut buf = [0u8; 3 + 8];
        buf[..3].copy_from_slice(b"abc");
        t.emit(&mut buf[3..]).unwrap();
        assert_eq!(&buf[3..], &[1, 2, 3, 4, 5, 6, 6, 108]);
        assert_eq!(Trailer::split(&buf).unwrap(), (&b"abc"[..], t));
        assert_eq!(t.emit(&mut [0u8; 7]), Err(Error::Truncated));
    }

    #[test]
    fn padding_aligns() {
        for align in [4usize, 8, 16, 32] {
            for len in 0..100usize {
                let pad = padding_for(len, align);
                assert!(pad < align);
                assert_eq!(
                    (len + pad + TRAILER_LEN) % align,
                    0,
                    "len {len} align {align}"
                );
            }
        }
        // AEAD (block size 1) still aligns to 4 bytes.
        assert_eq!(padding_for(1, 1), 1);
        assert_eq!(padding_for(2, 0), 0);
        assert_eq!(padding_for(3, 16), 11);
        assert!(padding_for(1, 4096) <= MAX_PAD_LEN);
    }
}
