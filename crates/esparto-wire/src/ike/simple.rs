//! The payloads that are a small fixed prefix followed by opaque data:
//! Key Exchange (§3.4), Identification (§3.5), Authentication (§3.8),
//! Nonce (§3.9) and Vendor ID (§3.12) of RFC 7296.
//!
//! Their Reprs borrow the data from the message buffer: the IKE core copies
//! what it keeps (a peer's nonce, its KE value) and throws the rest away
//! with the datagram. Parsing checks the fixed prefix and the few length
//! rules the RFC states for the payload itself (a nonce of 16..=256 octets);
//! what the data must look like for a given group or ID type is checked by
//! the core, which knows the negotiated context.

use super::consts::{AuthMethod, IdType};
use super::cursor::{Reader, Writer};
use super::error::{Error, Result};

/// Key Exchange payload (RFC 7296 §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeRepr<'a> {
    /// Key exchange method ("Diffie-Hellman Group Num").
    pub group: u16,
    /// The sender's public value ("Key Exchange Data").
    pub data: &'a [u8],
}

impl<'a> KeRepr<'a> {
    /// Parse the body (after the generic header).
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let group = r.u16()?;
        let _reserved = r.u16()?;
        let data = r.rest();
        if data.is_empty() {
            return Err(Error::Malformed("empty Key Exchange data"));
        }
        Ok(KeRepr { group, data })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }
    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(buf);
        w.u16(self.group)?;
        w.u16(0)?;
        w.put(self.data)
    }
}

/// Identification payload, IDi or IDr (RFC 7296 §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRepr<'a> {
    /// ID type.
    pub id_type: IdType,
    /// Identification data, interpreted according to the type.
    pub data: &'a [u8],
}

impl<'a> IdRepr<'a> {
    /// Parse the body.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let id_type = IdType(r.u8()?);
        r.take(3)?;
        let data = r.rest();
        if data.is_empty() {
            return Err(Error::Malformed("empty identification data"));
        }
        Ok(IdRepr { id_type, data })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }
    /// Write the body. RFC 7296 §2.15 signs exactly these octets (ID Type,
    /// three zero RESERVED octets, data) as "RestOfInitIDPayload".
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(buf);
        w.u8(self.id_type.0)?;
        w.put(&[0, 0, 0])?;
        w.put(self.data)
    }
}

/// Authentication payload (RFC 7296 §3.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRepr<'a> {
    /// Authentication method.
    pub method: AuthMethod,
    /// Authentication data (for a PSK: the PRF output, §2.15).
    pub data: &'a [u8],
}

impl<'a> AuthRepr<'a> {
    /// Parse the body.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        let mut r = Reader::new(body);
        let method = AuthMethod(r.u8()?);
        r.take(3)?;
        let data = r.rest();
        if data.is_empty() {
            return Err(Error::Malformed("empty authentication data"));
        }
        Ok(AuthRepr { method, data })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        4 + self.data.len()
    }
    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let mut w = Writer::new(buf);
        w.u8(self.method.0)?;
        w.put(&[0, 0, 0])?;
        w.put(self.data)
    }
}

/// Smallest nonce (RFC 7296 §2.10: "Nonces used in IKEv2 MUST be randomly
/// chosen, MUST be at least 128 bits in size").
pub const NONCE_MIN_LEN: usize = 16;
/// Largest nonce (RFC 7296 §3.9: "The size of the Nonce Data MUST be between
/// 16 and 256 octets, inclusive").
pub const NONCE_MAX_LEN: usize = 256;

/// Nonce payload, Ni or Nr (RFC 7296 §3.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonceRepr<'a> {
    /// Nonce data, 16..=256 octets.
    pub data: &'a [u8],
}

impl<'a> NonceRepr<'a> {
    /// Parse the body, enforcing the §3.9 size range.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        if !(NONCE_MIN_LEN..=NONCE_MAX_LEN).contains(&body.len()) {
            return Err(Error::Malformed("nonce length outside 16..=256"));
        }
        Ok(NonceRepr { data: body })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        self.data.len()
    }
    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Writer::new(buf).put(self.data)
    }
}

/// Vendor ID payload (RFC 7296 §3.12): opaque, never interpreted by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorIdRepr<'a> {
    /// Vendor ID data.
    pub data: &'a [u8],
}

impl<'a> VendorIdRepr<'a> {
    /// Parse the body.
    pub fn parse(body: &'a [u8]) -> Result<Self> {
        Ok(VendorIdRepr { data: body })
    }
    /// Body length.
    pub fn buffer_len(&self) -> usize {
        self.data.len()
    }
    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        Writer::new(buf).put(self.data)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ke_round_trip_and_bytes() {
        let ke = KeRepr {
            group: 31,
            data: &[9; 32],
        };
        let mut b = vec![0u8; ke.buffer_len()];
        ke.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[0, 31, 0, 0]);
        assert_eq!(KeRepr::parse(&b).unwrap(), ke);
        assert_eq!(
            KeRepr::parse(&b[..4]),
            Err(Error::Malformed("empty Key Exchange data"))
        );
        assert_eq!(KeRepr::parse(&b[..3]), Err(Error::Truncated));
    }

    #[test]
    fn id_fqdn_bytes() {
        let id = IdRepr {
            id_type: IdType::FQDN,
            data: b"moon.example",
        };
        let mut b = vec![0u8; id.buffer_len()];
        id.emit(&mut b).unwrap();
        assert_eq!(&b[..4], &[2, 0, 0, 0]);
        assert_eq!(&b[4..], b"moon.example");
        assert_eq!(IdRepr::parse(&b).unwrap(), id);
    }

    #[test]
    fn auth_round_trip() {
        let a = AuthRepr {
            method: AuthMethod::SHARED_KEY_MIC,
            data: &[1; 32],
        };
        let mut b = vec![0u8; a.buffer_len()];
        a.emit(&mut b).unwrap();
        assert_eq!(b[0], 2);
        assert_eq!(AuthRepr::parse(&b).unwrap(), a);
    }

    #[test]
    fn nonce_size_range() {
        assert!(NonceRepr::parse(&[0; 15]).is_err());
        assert!(NonceRepr::parse(&[0; 16]).is_ok());
        assert!(NonceRepr::parse(&[0; 256]).is_ok());
        assert!(NonceRepr::parse(&[0; 257]).is_err());
    }
}
