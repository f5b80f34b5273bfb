//! The Encrypted and Authenticated payload, SK (RFC 7296 §3.14), and its
//! fragment, SKF (RFC 7383 §2.5).
//!
//! ```text
//! | Next Payload  |C|  RESERVED   |         Payload Length        |
//! |                     Initialization Vector                     |
//! ~                    Encrypted IKE Payloads                     ~
//! +               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |               |             Padding (0-255 octets)            |
//! +-+-+-+-+-+-+-+-+                               +-+-+-+-+-+-+-+-+
//! |                                               |  Pad Length   |
//! ~                    Integrity Checksum Data                    ~
//! ```
//!
//! This layer never touches keys (`esparto-crypto` seals and opens, and
//! depends on this crate, not the other way round). It does the framing on
//! both sides of the crypto: [`SkLayout`] describes the sizes a cipher
//! imposes; [`SkLocation`] says where a received message's SK payload sits
//! and checks that its length can hold an IV, at least the pad-length octet
//! and an ICV, in whole cipher blocks; [`strip_padding`] removes the padding
//! from a decrypted plaintext. Emitting is in [`super::message`], which lays
//! out header, SK header, IV space, payloads, padding and ICV space in one
//! buffer so the cipher can work in place.
//!
//! An SKF payload is an SK payload with two more fields before the IV:
//!
//! ```text
//! | Next Payload  |C|  RESERVED   |         Payload Length        |
//! |        Fragment Number        |        Total Fragments        |
//! |                     Initialization Vector                     |
//! ~                      Encrypted content                        ~
//! ```
//!
//! RFC 7383 §2.5.3 authenticates the IKE header and the SKF header "up to
//! and including the Total Fragments field" as associated data, which is
//! what the cipher covers when told that the SK header starts
//! [`FRAGMENT_FIELDS_LEN`] octets later: a fragment's [`SkLocation`] has
//! its `offset` there, and the cipher seals and opens it like any SK.

use super::consts::PayloadType;
use super::error::{Error, Result};
use super::payload::GENERIC_HEADER_LEN;

/// The sizes an IKE SA cipher imposes on the SK payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkLayout {
    /// Initialization Vector length (8 for AES-GCM and ChaCha20-Poly1305 in
    /// IKE, RFC 5282 §3 / RFC 7634 §3; 16 for AES-CBC).
    pub iv_len: usize,
    /// Integrity Checksum Data length (the AEAD tag or the truncated HMAC).
    pub icv_len: usize,
    /// The plaintext (payloads, padding and pad-length octet) must be a
    /// multiple of this (16 for AES-CBC; 1 for the AEADs, which RFC 5282 §3
    /// and RFC 7634 §3 allow to be unpadded).
    pub block_size: usize,
}

impl SkLayout {
    /// Padding for `payloads_len` octets of inner payloads: the plaintext
    /// (payloads, padding, pad-length octet) fills whole blocks.
    pub fn padding_for(&self, payloads_len: usize) -> usize {
        let bs = self.block_size.max(1);
        (bs - (payloads_len + 1) % bs) % bs
    }

    /// SK body length (IV, plaintext, ICV) for `payloads_len` octets of inner payloads.
    pub fn body_len(&self, payloads_len: usize) -> usize {
        self.iv_len + payloads_len + self.padding_for(payloads_len) + 1 + self.icv_len
    }
}

/// Fragment Number and Total Fragments, between the SKF generic header
/// and the IV.
pub const FRAGMENT_FIELDS_LEN: usize = 4;

/// Which fragment of how many an SKF payload is (RFC 7383 §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// 1 to `total`.
    pub number: u16,
    /// At least 1.
    pub total: u16,
}

/// Where the SK payload sits in a received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkLocation {
    /// Offset of the SK generic payload header from the start of the
    /// message (what `IkeCipher::open_sk` calls `sk_offset`). For an SKF
    /// payload, [`FRAGMENT_FIELDS_LEN`] past its generic header, so that
    /// the cipher's associated data ends with Total Fragments.
    pub offset: usize,
    /// Type of the first payload inside the ciphertext (the SK payload's
    /// Next Payload field, §3.14; a fragment's, if it is the first).
    pub first_inner: PayloadType,
    /// Length of the SK body (IV, ciphertext, ICV), without the generic
    /// header (and the fragment fields).
    pub body_len: usize,
    /// Set for an SKF payload.
    pub fragment: Option<Fragment>,
}

impl SkLocation {
    /// Check that the body can hold an IV, a whole number of blocks holding
    /// at least the pad-length octet, and an ICV. Run this before handing
    /// the message to the cipher.
    pub fn check(&self, layout: &SkLayout) -> Result<()> {
        let overhead = layout.iv_len + layout.icv_len;
        let plain = self.body_len.checked_sub(overhead).ok_or(Error::Malformed(
            "Encrypted payload shorter than IV and ICV",
        ))?;
        if plain == 0 {
            return Err(Error::Malformed("Encrypted payload without Pad Length"));
        }
        if plain % layout.block_size.max(1) != 0 {
            return Err(Error::Malformed(
                "Encrypted payload not a whole number of blocks",
            ));
        }
        Ok(())
    }

    /// Offset of the IV from the start of the message.
    pub fn iv_offset(&self) -> usize {
        self.offset + GENERIC_HEADER_LEN
    }
}

/// Remove padding from a decrypted SK plaintext (payloads ‖ padding ‖ pad
/// length). RFC 7296 §3.14 lets the padding "contain any value chosen by
/// the sender", so only the Pad Length is checked against what is there.
pub fn strip_padding(plain: &[u8]) -> Result<&[u8]> {
    let (&pad_len, rest) = plain.split_last().ok_or(Error::Truncated)?;
    let keep = rest
        .len()
        .checked_sub(usize::from(pad_len))
        .ok_or(Error::Malformed("Pad Length longer than the plaintext"))?;
    Ok(&rest[..keep])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn padding_fills_blocks() {
        let cbc = SkLayout {
            iv_len: 16,
            icv_len: 16,
            block_size: 16,
        };
        assert_eq!(cbc.padding_for(15), 0);
        assert_eq!(cbc.padding_for(16), 15);
        assert_eq!(cbc.padding_for(0), 15);
        assert_eq!(cbc.body_len(15), 16 + 16 + 16);
        let gcm = SkLayout {
            iv_len: 8,
            icv_len: 16,
            block_size: 1,
        };
        assert_eq!(gcm.padding_for(37), 0);
        assert_eq!(gcm.body_len(37), 8 + 37 + 1 + 16);
    }

    #[test]
    fn location_checks() {
        let cbc = SkLayout {
            iv_len: 16,
            icv_len: 12,
            block_size: 16,
        };
        let loc = |n| SkLocation {
            offset: 28,
            first_inner: PayloadType::IDI,
            body_len: n,
            fragment: None,
        };
        assert!(loc(16 + 12 + 16).check(&cbc).is_ok());
        assert!(loc(16 + 12).check(&cbc).is_err());
        assert!(loc(16 + 12 + 15).check(&cbc).is_err());
        assert!(loc(10).check(&cbc).is_err());
        assert_eq!(loc(0).iv_offset(), 32);
    }

    #[test]
    fn strips_padding() {
        assert_eq!(
            strip_padding(&[1, 2, 3, 0xee, 0xee, 2]).unwrap(),
            &[1, 2, 3]
        );
        assert_eq!(strip_padding(&[1, 0]).unwrap(), &[1]);
        assert!(strip_padding(&[1, 2]).is_err());
        assert!(strip_padding(&[]).is_err());
    }
}
