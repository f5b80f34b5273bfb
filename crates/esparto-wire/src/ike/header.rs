//! The IKE header (RFC 7296 §3.1).
//!
//! ```text
//!                      1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       IKE SA Initiator's SPI                  |
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       IKE SA Responder's SPI                  |
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Payload | MjVer | MnVer | Exchange Type |     Flags     |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                          Message ID                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                            Length                             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! [`Header`] is a smoltcp-style checked view: `new_checked` verifies once
//! that the buffer holds the 28 octets and that the Length field fits the
//! buffer, after which the accessors cannot go out of bounds. [`HeaderRepr`]
//! is the parsed, validated form. The SPIs are kept as `u64` in network byte
//! order semantics (the 8 octets read big-endian): they are opaque to
//! everybody except their creator, and a `u64` is cheap to hash and compare.

use super::consts::{ExchangeType, PayloadType};
use super::error::{Error, Result};

/// Length of the fixed IKE header.
pub const HEADER_LEN: usize = 28;

/// The only major version we speak (RFC 7296 §3.1: "MUST set the major
/// version to 2").
pub const MAJOR_VERSION: u8 = 2;

mod field {
    use core::ops::Range;
    pub(super) const SPI_I: Range<usize> = 0..8;
    pub(super) const SPI_R: Range<usize> = 8..16;
    pub(super) const NEXT_PAYLOAD: usize = 16;
    pub(super) const VERSION: usize = 17;
    pub(super) const EXCHANGE: usize = 18;
    pub(super) const FLAGS: usize = 19;
    pub(super) const MESSAGE_ID: Range<usize> = 20..24;
    pub(super) const LENGTH: Range<usize> = 24..28;
}

/// Header flags (RFC 7296 §3.1).
pub mod flags {
    /// "Initiator (bit 3 of Flags, the 'I' bit)": set by the original
    /// initiator of the IKE SA in every message it sends.
    pub const INITIATOR: u8 = 0x08;
    /// "Version (bit 4)": the sender can speak a higher major version. We never set it.
    pub const VERSION: u8 = 0x10;
    /// "Response (bit 5)": this message is a response.
    pub const RESPONSE: u8 = 0x20;
}

/// A read/write view of an IKE header at the start of a buffer.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wrap a buffer without checking it. Accessors may panic on a short
    /// buffer: use [`Header::new_checked`] for anything from the network.
    pub const fn new_unchecked(buffer: T) -> Self {
        Header { buffer }
    }

    /// Wrap a buffer after checking that it holds a full header and that the
    /// Length field neither claims less than a header nor more than the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// The length check behind [`Header::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = self.length() as usize;
        if len < HEADER_LEN {
            return Err(Error::Malformed("IKE header length shorter than header"));
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IKE SA Initiator's SPI.
    pub fn spi_i(&self) -> u64 {
        be_u64(&self.buffer.as_ref()[field::SPI_I])
    }
    /// IKE SA Responder's SPI (zero in the first IKE_SA_INIT request).
    pub fn spi_r(&self) -> u64 {
        be_u64(&self.buffer.as_ref()[field::SPI_R])
    }
    /// Type of the first payload.
    pub fn next_payload(&self) -> PayloadType {
        PayloadType(self.buffer.as_ref()[field::NEXT_PAYLOAD])
    }
    /// Major version (high nibble).
    pub fn major_version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION] >> 4
    }
    /// Minor version (low nibble).
    pub fn minor_version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION] & 0x0f
    }
    /// Exchange type.
    pub fn exchange_type(&self) -> ExchangeType {
        ExchangeType(self.buffer.as_ref()[field::EXCHANGE])
    }
    /// Raw flags octet.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Message ID.
    pub fn message_id(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::MESSAGE_ID])
    }
    /// Length of the whole message (header and payloads) in octets.
    pub fn length(&self) -> u32 {
        be_u32(&self.buffer.as_ref()[field::LENGTH])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Set the initiator's SPI.
    pub fn set_spi_i(&mut self, v: u64) {
        self.buffer.as_mut()[field::SPI_I].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the responder's SPI.
    pub fn set_spi_r(&mut self, v: u64) {
        self.buffer.as_mut()[field::SPI_R].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the first payload type.
    pub fn set_next_payload(&mut self, v: PayloadType) {
        self.buffer.as_mut()[field::NEXT_PAYLOAD] = v.0;
    }
    /// Set version 2.0.
    pub fn set_version(&mut self, major: u8, minor: u8) {
        self.buffer.as_mut()[field::VERSION] = (major << 4) | (minor & 0x0f);
    }
    /// Set the exchange type.
    pub fn set_exchange_type(&mut self, v: ExchangeType) {
        self.buffer.as_mut()[field::EXCHANGE] = v.0;
    }
    /// Set the flags octet.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Set the Message ID.
    pub fn set_message_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::MESSAGE_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the Length.
    pub fn set_length(&mut self, v: u32) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
}

/// The parsed IKE header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    /// IKE SA Initiator's SPI.
    pub spi_i: u64,
    /// IKE SA Responder's SPI.
    pub spi_r: u64,
    /// First payload type.
    pub next_payload: PayloadType,
    /// Exchange type.
    pub exchange: ExchangeType,
    /// The I flag: sent by the original initiator of the IKE SA.
    pub initiator: bool,
    /// The R flag: this is a response.
    pub response: bool,
    /// Message ID.
    pub message_id: u32,
    /// Total message length.
    pub length: u32,
}

impl HeaderRepr {
    /// Parse a checked header view.
    ///
    /// RFC 7296 §3.1: implementations "MUST ignore the minor version number
    /// of received messages"; a major version other than 2 is an error the
    /// core may answer with INVALID_MAJOR_VERSION (§2.5). The other flag
    /// bits "MUST be ignored on receipt".
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<Self> {
        h.check_len()?;
        if h.major_version() != MAJOR_VERSION {
            return Err(Error::InvalidMajorVersion(h.major_version()));
        }
        let f = h.flags();
        Ok(HeaderRepr {
            spi_i: h.spi_i(),
            spi_r: h.spi_r(),
            next_payload: h.next_payload(),
            exchange: h.exchange_type(),
            initiator: f & flags::INITIATOR != 0,
            response: f & flags::RESPONSE != 0,
            message_id: h.message_id(),
            length: h.length(),
        })
    }

    /// The header is always 28 octets.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header (version 2.0) into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        h.set_spi_i(self.spi_i);
        h.set_spi_r(self.spi_r);
        h.set_next_payload(self.next_payload);
        h.set_version(MAJOR_VERSION, 0);
        h.set_exchange_type(self.exchange);
        let mut f = 0;
        if self.initiator {
            f |= flags::INITIATOR;
        }
        if self.response {
            f |= flags::RESPONSE;
        }
        h.set_flags(f);
        h.set_message_id(self.message_id);
        h.set_length(self.length);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // An IKE_SA_INIT request header: SPIi set, SPIr zero, first payload SA,
    // version 2.0, I flag, message ID 0, length 28.
    const BYTES: [u8; 28] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 33, 0x20, 34, 0x08,
        0, 0, 0, 0, 0, 0, 0, 28,
    ];

    #[test]
    fn parse_fields() {
        let h = Header::new_checked(&BYTES[..]).unwrap();
        let r = HeaderRepr::parse(&h).unwrap();
        assert_eq!(r.spi_i, 0x0102030405060708);
        assert_eq!(r.spi_r, 0);
        assert_eq!(r.next_payload, PayloadType::SA);
        assert_eq!(r.exchange, ExchangeType::IKE_SA_INIT);
        assert!(r.initiator && !r.response);
        assert_eq!(r.length, 28);
    }

    #[test]
    fn emit_matches_bytes() {
        let h = Header::new_checked(&BYTES[..]).unwrap();
        let r = HeaderRepr::parse(&h).unwrap();
        let mut out = [0u8; 28];
        r.emit(&mut Header::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn rejects_short_and_lying_lengths() {
        assert_eq!(
            Header::new_checked(&BYTES[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut b = BYTES;
        b[27] = 29;
        assert_eq!(Header::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[27] = 27;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(Error::Malformed(_))
        ));
    }

    #[test]
    fn rejects_major_version_3() {
        let mut b = BYTES;
        b[17] = 0x30;
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(HeaderRepr::parse(&h), Err(Error::InvalidMajorVersion(3)));
        // A different minor version is ignored (§3.1).
        b[17] = 0x21;
        let h = Header::new_checked(&b[..]).unwrap();
        assert!(HeaderRepr::parse(&h).is_ok());
    }
}
