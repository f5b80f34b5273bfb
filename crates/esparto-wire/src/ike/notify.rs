//! The Notify payload (RFC 7296 §3.10).
//!
//! ```text
//! | Protocol ID  |   SPI Size    |      Notify Message Type      |
//! |                Security Parameter Index (SPI)                 ~
//! |                       Notification Data                       ~
//! ```
//!
//! Notifies carry both errors (types below 16384) and status information
//! (NAT detection hashes, COOKIE, REKEY_SA, the RFC 9611 SA_RESOURCE_INFO…).
//! The Repr keeps the type open ([`NotifyType`] accepts any value): §3.10.1
//! says unrecognised status types "MUST be ignored", while unrecognised
//! error types in a response mean the request failed — a policy the core
//! applies, not the parser. Constructors for the notifies we send with
//! data are provided so the data encodings live next to the wire format.

use super::consts::{NotifyType, ProtocolId};
use super::cursor::{Reader, Writer};
use super::error::Result;
use super::sa::Spi;

/// Notify payload body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyRepr<'a> {
    /// Protocol of the SA the notify is about; zero when the SPI is empty
    /// (§3.10: "If the SPI field is empty, this field MUST be sent as zero
    /// and MUST be ignored on receipt").
    pub protocol: ProtocolId,
    /// SPI of that SA, often empty.
    pub spi: Spi,
    /// Notify message type.
    pub kind: NotifyType,
    /// Notification data.
    pub data: &'a [u8],
}

impl<'a> NotifyRepr<'a> {
    /// A notify about no particular SA.
    pub const fn new(kind: NotifyType, data: &'a [u8]) -> Self {
        NotifyRepr {
            protocol: ProtocolId(0),
            spi: Spi::None,
            kind,
            data,
        }
    }

    /// Parse the body.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let protocol = ProtocolId(r.u8()?);
        let spi_size = r.u8()?;
        let kind = NotifyType(r.u16()?);
        let spi = Spi::read(&mut r, spi_size)?;
        Ok(NotifyRepr {
            protocol,
            spi,
            kind,
            data: r.rest(),
        })
    }

    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + self.spi.len() + self.data.len()
    }

    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(buf);
        let protocol = if self.spi.is_empty() {
            0
        } else {
            self.protocol.0
        };
        w.u8(protocol)?;
        w.u8(self.spi.len() as u8)?;
        w.u16(self.kind.0)?;
        self.spi.write(&mut w)?;
        w.put(self.data)
    }

    /// The two-octet value carried by INVALID_KE_PAYLOAD (the accepted
    /// group, §3.10.1), SET_WINDOW_SIZE is four octets — see
    /// [`NotifyRepr::u32_data`].
    pub fn u16_data(&self) -> Option<u16> {
        match self.data {
            [a, b] => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    /// The four-octet value carried by SET_WINDOW_SIZE (§2.3).
    pub fn u32_data(&self) -> Option<u32> {
        match self.data {
            [a, b, c, d] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn invalid_ke_bytes() {
        let group = 19u16.to_be_bytes();
        let n = NotifyRepr::new(NotifyType::INVALID_KE_PAYLOAD, &group);
        let mut b = vec![0u8; n.buffer_len()];
        n.emit(&mut b).unwrap();
        assert_eq!(b, [0, 0, 0, 17, 0, 19]);
        let p = NotifyRepr::parse(&b).unwrap();
        assert_eq!(p, n);
        assert_eq!(p.u16_data(), Some(19));
    }

    #[test]
    fn rekey_sa_with_esp_spi() {
        let n = NotifyRepr {
            protocol: ProtocolId::ESP,
            spi: Spi::U32(0x1234_5678),
            kind: NotifyType::REKEY_SA,
            data: &[],
        };
        let mut b = vec![0u8; n.buffer_len()];
        n.emit(&mut b).unwrap();
        assert_eq!(b, [3, 4, 0x40, 0x09, 0x12, 0x34, 0x56, 0x78]);
        assert_eq!(NotifyRepr::parse(&b).unwrap(), n);
    }

    #[test]
    fn truncated_and_bad_spi_size() {
        assert!(NotifyRepr::parse(&[0, 0, 0]).is_err());
        assert!(NotifyRepr::parse(&[3, 4, 0, 11, 1, 2]).is_err());
        assert!(NotifyRepr::parse(&[3, 5, 0, 11, 1, 2, 3, 4, 5]).is_err());
    }
}
