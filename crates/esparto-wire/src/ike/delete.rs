//! The Delete payload (RFC 7296 §3.11).
//!
//! ```text
//! | Protocol ID   |   SPI Size    |          Num of SPIs          |
//! |               Security Parameter Index(es) (SPI)              ~
//! ```
//!
//! "For IKE SAs, the SPI Size MUST be zero"; for ESP and AH the SPIs are
//! four octets, each the *sender's inbound* SPI (§1.4.1). Anything else is
//! malformed. The number of SPIs is bounded by [`super::limits::MAX_DELETE_SPIS`].

use super::consts::ProtocolId;
use super::cursor::{Reader, Writer};
use super::error::{Error, Result};
use super::limits;

/// Delete payload body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRepr {
    /// IKE, AH or ESP.
    pub protocol: ProtocolId,
    /// SPIs of the Child SAs (empty for IKE).
    pub spis: Vec<u32>,
}

impl DeleteRepr {
    /// Parse the body.
    pub fn parse(body: &[u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let protocol = ProtocolId(r.u8()?);
        let spi_size = r.u8()?;
        let count = usize::from(r.u16()?);
        match (protocol, spi_size) {
            (ProtocolId::IKE, 0) => {
                if count != 0 || !r.is_empty() {
                    return Err(Error::Malformed("Delete of IKE SA with SPIs"));
                }
                Ok(DeleteRepr {
                    protocol,
                    spis: Vec::new(),
                })
            }
            (ProtocolId::ESP | ProtocolId::AH, 4) => {
                if count > limits::MAX_DELETE_SPIS {
                    return Err(Error::Limit("too many SPIs in Delete"));
                }
                let mut spis = Vec::with_capacity(count);
                for _ in 0..count {
                    spis.push(r.u32()?);
                }
                if !r.is_empty() {
                    return Err(Error::Malformed("Delete length disagrees with SPI count"));
                }
                Ok(DeleteRepr { protocol, spis })
            }
            (ProtocolId::IKE | ProtocolId::ESP | ProtocolId::AH, _) => {
                Err(Error::Malformed("Delete SPI size"))
            }
            _ => Err(Error::Malformed("Delete protocol")),
        }
    }

    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + 4 * self.spis.len()
    }

    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(buf);
        let count = u16::try_from(self.spis.len()).map_err(|_| Error::Limit("Delete SPIs"))?;
        w.u8(self.protocol.0)?;
        w.u8(if self.protocol == ProtocolId::IKE {
            0
        } else {
            4
        })?;
        w.u16(count)?;
        for spi in &self.spis {
            w.u32(*spi)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn esp_delete_bytes() {
        let d = DeleteRepr {
            protocol: ProtocolId::ESP,
            spis: vec![0xc1c2c3c4, 7],
        };
        let mut b = vec![0u8; d.buffer_len()];
        d.emit(&mut b).unwrap();
        assert_eq!(b, [3, 4, 0, 2, 0xc1, 0xc2, 0xc3, 0xc4, 0, 0, 0, 7]);
        assert_eq!(DeleteRepr::parse(&b).unwrap(), d);
    }

    #[test]
    fn ike_delete_bytes() {
        let d = DeleteRepr {
            protocol: ProtocolId::IKE,
            spis: vec![],
        };
        let mut b = vec![0u8; d.buffer_len()];
        d.emit(&mut b).unwrap();
        assert_eq!(b, [1, 0, 0, 0]);
        assert_eq!(DeleteRepr::parse(&b).unwrap(), d);
    }

    #[test]
    fn rejects_inconsistent() {
        assert!(DeleteRepr::parse(&[1, 8, 0, 0]).is_err());
        assert!(DeleteRepr::parse(&[1, 0, 0, 1]).is_err());
        assert!(DeleteRepr::parse(&[3, 4, 0, 2, 0, 0, 0, 1]).is_err());
        assert!(DeleteRepr::parse(&[3, 4, 0, 0, 9]).is_err());
        assert!(DeleteRepr::parse(&[9, 4, 0, 0]).is_err());
        assert!(DeleteRepr::parse(&[3, 4, 0xff, 0xff]).is_err());
    }
}
