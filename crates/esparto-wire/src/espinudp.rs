//! ESP-in-UDP: telling ESP, IKE and NAT keepalives apart on port 4500
//! (RFC 3948).
//!
//! Esparto always UDP-encapsulates ESP, so every datagram on its UDP 4500
//! sockets is one of three things, distinguished by the first bytes of the
//! UDP payload:
//!
//! - **NAT keepalive** (RFC 3948 §2.3): "a single octet payload ... 0xFF".
//!   The receiver "SHOULD ignore" it.
//! - **IKE** (RFC 3948 §2.2): prefixed by the four-octet *non-ESP marker*,
//!   all zeros. The marker occupies the place of the ESP SPI, and SPI 0 is
//!   never sent on the wire (RFC 4303 §2.1), so the two cannot be confused.
//!   The IKE message proper starts after the marker.
//! - **ESP** (RFC 3948 §2.1): anything else, with "the SPI field in the ESP
//!   header MUST NOT be a zero value". It must hold at least the ESP header
//!   (SPI + Sequence Number).
//!
//! Classification is a pure function of the payload bytes, needs no state and
//! allocates nothing; the I/O layer calls it per datagram before anything
//! else. (The cBPF steering program in `esparto-io` applies the same rule in
//! the kernel to pick a socket by SPI.)

use crate::esp;
use crate::{Error, Result};

/// The IANA port for IKE and ESP-in-UDP after NAT detection (RFC 3948 §2.2).
pub const PORT: u16 = 4500;
/// The NAT-keepalive payload octet (RFC 3948 §2.3).
pub const KEEPALIVE: u8 = 0xff;
/// The non-ESP marker that prefixes IKE messages on port 4500 (RFC 3948 §2.2).
pub const NON_ESP_MARKER: [u8; 4] = [0; 4];
/// Length of [`NON_ESP_MARKER`].
pub const MARKER_LEN: usize = NON_ESP_MARKER.len();

/// What a UDP-4500 payload carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A one-octet 0xFF NAT keepalive: ignore.
    NatKeepalive,
    /// An IKE message; the slice starts after the non-ESP marker.
    Ike(&'a [u8]),
    /// An ESP packet (header length already checked).
    Esp(esp::Packet<&'a [u8]>),
}

/// Classifier for UDP-4500 payloads (a namespace: it holds no data).
#[derive(Debug, Clone, Copy)]
pub struct Datagram;

impl Datagram {
    /// Classifies a UDP payload received on port 4500 (RFC 3948 §2).
    ///
    /// Errors: an empty payload, or a non-keepalive payload shorter than the
    /// ESP header that does not start with the full non-ESP marker, is
    /// [`Error::Truncated`].
    #[inline]
    pub fn classify(payload: &[u8]) -> Result<Kind<'_>> {
        match payload {
            [KEEPALIVE] => Ok(Kind::NatKeepalive),
            [0, 0, 0, 0, ike @ ..] => Ok(Kind::Ike(ike)),
            _ => {
                // First four octets non-zero (or fewer than four): an SPI.
                let p = esp::Packet::new_checked(payload)?;
                debug_assert!(p.spi() != 0);
                Ok(Kind::Esp(p))
            }
        }
    }

    /// Writes the NAT-keepalive payload into `buf`; returns its length (1).
    #[inline]
    pub fn emit_keepalive(buf: &mut [u8]) -> Result<usize> {
        let b = buf.first_mut().ok_or(Error::Truncated)?;
        *b = KEEPALIVE;
        Ok(1)
    }

    /// Writes the non-ESP marker at the start of `buf`; returns its length.
    /// The IKE message goes in `buf[MARKER_LEN..]`.
    #[inline]
    pub fn emit_marker(buf: &mut [u8]) -> Result<usize> {
        buf.get_mut(..MARKER_LEN)
            .ok_or(Error::Truncated)?
            .copy_from_slice(&NON_ESP_MARKER);
        Ok(MARKER_LEN)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keepalive() {
        assert_eq!(Datagram::classify(&[0xff]).unwrap(), Kind::NatKeepalive);
        let mut b = [0u8; 1];
        assert_eq!(Datagram::emit_keepalive(&mut b).unwrap(), 1);
        assert_eq!(Datagram::classify(&b).unwrap(), Kind::NatKeepalive);
        assert_eq!(Datagram::emit_keepalive(&mut []), Err(Error::Truncated));
    }

    #[test]
    fn ike_after_marker() {
        let d = [0, 0, 0, 0, 0x11, 0x22];
        assert_eq!(Datagram::classify(&d).unwrap(), Kind::Ike(&[0x11, 0x22]));
        // A bare marker is an (empty) IKE message; the IKE parser rejects it.
        assert_eq!(Datagram::classify(&[0, 0, 0, 0]).unwrap(), Kind::Ike(&[]));
        let mut b = [9u8; 6];
        assert_eq!(Datagram::emit_marker(&mut b).unwrap(), 4);
        assert_eq!(b, [0, 0, 0, 0, 9, 9]);
        assert_eq!(Datagram::emit_marker(&mut [0u8; 3]), Err(Error::Truncated));
    }

    #[test]
    fn esp_by_nonzero_spi() {
        let d = [0, 0, 1, 0, 0, 0, 0, 1, 0xab];
        match Datagram::classify(&d).unwrap() {
            Kind::Esp(p) => {
                assert_eq!(p.spi(), 0x100);
                assert_eq!(p.seq(), 1);
                assert_eq!(p.payload(), &[0xab]);
            }
            other => panic!("classified as {other:?}"),
        }
        // Any non-zero octet in the first four makes it ESP, even 0xff first.
        assert!(matches!(
            Datagram::classify(&[0xff, 0, 0, 0, 0, 0, 0, 0]),
            Ok(Kind::Esp(_))
        ));
        assert!(matches!(
            Datagram::classify(&[0, 0, 0, 1, 0, 0, 0, 0]),
            Ok(Kind::Esp(_))
        ));
    }

    #[test]
    fn short_datagrams() {
        assert_eq!(Datagram::classify(&[]), Err(Error::Truncated));
        assert_eq!(Datagram::classify(&[0xfe]), Err(Error::Truncated));
        assert_eq!(Datagram::classify(&[0xff, 0xff]), Err(Error::Truncated));
        assert_eq!(Datagram::classify(&[0, 0, 0]), Err(Error::Truncated));
        // SPI present but no sequence number.
        assert_eq!(
            Datagram::classify(&[1, 2, 3, 4, 5, 6, 7]),
            Err(Error::Truncated)
        );
    }
}
