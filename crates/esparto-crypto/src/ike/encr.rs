//! IKEv2 encryption transforms for the SK payload: identifiers, names and
//! lengths.
//!
//! IKE negotiates its own encryption transform (RFC 7296 §3.3.2, Transform
//! Type 1) with a Key Length attribute for AES (§3.3.5). The lengths follow
//! the same conventions as ESP: the AEADs' SK_e carries the 4-byte salt
//! after the key (RFC 5282 §7.1, RFC 7634 §3), their IV is 8 bytes; AES-CBC
//! has a 16-byte IV and needs a separate integrity transform.

use crate::primitive::{AEAD_IV_LEN, AES_BLOCK};

/// An IKEv2 encryption transform (IANA "Transform Type 1 - Encryption
/// Algorithm Transform IDs").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IkeEncr {
    /// ENCR_AES_CBC (RFC 3602), id 12, with Key Length 128 or 256.
    AesCbc {
        /// AES key size in bits: 128 or 256.
        key_bits: u16,
    },
    /// ENCR_AES_GCM_16 (RFC 5282), id 20, with Key Length 128 or 256.
    AesGcm16 {
        /// AES key size in bits: 128 or 256.
        key_bits: u16,
    },
    /// ENCR_CHACHA20_POLY1305 (RFC 7634), id 28.
    ChaCha20Poly1305,
}

impl IkeEncr {
    /// Every encryption transform we implement for IKE.
    pub const ALL: [IkeEncr; 5] = [
        IkeEncr::AesGcm16 { key_bits: 256 },
        IkeEncr::AesGcm16 { key_bits: 128 },
        IkeEncr::ChaCha20Poly1305,
        IkeEncr::AesCbc { key_bits: 256 },
        IkeEncr::AesCbc { key_bits: 128 },
    ];

    /// IANA transform ID (the Key Length attribute carries `key_bits`).
    pub fn iana_id(self) -> u16 {
        match self {
            IkeEncr::AesCbc { .. } => 12,
            IkeEncr::AesGcm16 { .. } => 20,
            IkeEncr::ChaCha20Poly1305 => 28,
        }
    }

    /// The Key Length attribute value (RFC 7296 §3.3.5), if the transform
    /// takes one.
    pub fn key_bits(self) -> Option<u16> {
        match self {
            IkeEncr::AesCbc { key_bits } | IkeEncr::AesGcm16 { key_bits } => Some(key_bits),
            IkeEncr::ChaCha20Poly1305 => None,
        }
    }

    /// Builds a transform from its IANA ID and Key Length attribute; `None`
    /// if we don't implement that combination.
    pub fn from_iana(id: u16, key_bits: Option<u16>) -> Option<Self> {
        let e = match (id, key_bits) {
            (12, Some(k @ (128 | 256))) => IkeEncr::AesCbc { key_bits: k },
            (20, Some(k @ (128 | 256))) => IkeEncr::AesGcm16 { key_bits: k },
            (28, None) => IkeEncr::ChaCha20Poly1305,
            _ => return None,
        };
        Some(e)
    }

    /// strongSwan keyword: `aes128`, `aes256`, `aes128gcm16`,
    /// `aes256gcm16`, `chacha20poly1305`.
    pub fn name(self) -> &'static str {
        match self {
            IkeEncr::AesCbc { key_bits: 128 } => "aes128",
            IkeEncr::AesCbc { key_bits: 256 } => "aes256",
            IkeEncr::AesGcm16 { key_bits: 128 } => "aes128gcm16",
            IkeEncr::AesGcm16 { key_bits: 256 } => "aes256gcm16",
            IkeEncr::ChaCha20Poly1305 => "chacha20poly1305",
            _ => "aes-invalid-key-size",
        }
    }

    /// Parses a strongSwan keyword (aliases `aes`, `aes128gcm128`,
    /// `aes128gcm`, ... included).
    pub fn from_keyword(s: &str) -> Option<Self> {
        Some(match s {
            "aes" | "aes128" => IkeEncr::AesCbc { key_bits: 128 },
            "aes256" => IkeEncr::AesCbc { key_bits: 256 },
            "aes128gcm16" | "aes128gcm128" | "aes128gcm" => IkeEncr::AesGcm16 { key_bits: 128 },
            "aes256gcm16" | "aes256gcm128" | "aes256gcm" => IkeEncr::AesGcm16 { key_bits: 256 },
            "chacha20poly1305" => IkeEncr::ChaCha20Poly1305,
            _ => return None,
        })
    }

    /// True for the combined-mode transforms, which take no integrity
    /// transform (RFC 5282 §8).
    pub fn is_aead(self) -> bool {
        !matches!(self, IkeEncr::AesCbc { .. })
    }

    /// Length of SK_ei / SK_er: the key, plus the 4-byte salt for the
    /// AEADs (RFC 5282 §7.1, RFC 7634 §3).
    pub fn key_len(self) -> usize {
        match self {
            IkeEncr::AesCbc { key_bits } => usize::from(key_bits) / 8,
            IkeEncr::AesGcm16 { key_bits } => usize::from(key_bits) / 8 + 4,
            IkeEncr::ChaCha20Poly1305 => 32 + 4,
        }
    }

    /// IV length in the SK payload: 8 for the AEADs, 16 for AES-CBC.
    pub fn iv_len(self) -> usize {
        if self.is_aead() {
            AEAD_IV_LEN
        } else {
            AES_BLOCK
        }
    }

    /// Padding alignment: 16 for AES-CBC; 1 for the AEADs, which are
    /// stream-like and need no padding (RFC 5282 §3, RFC 7634 §3; strongSwan
    /// pads them to 1 too).
    pub fn block_size(self) -> usize {
        if self.is_aead() { 1 } else { AES_BLOCK }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transform_ids_and_names() {
        for e in IkeEncr::ALL {
            assert_eq!(IkeEncr::from_iana(e.iana_id(), e.key_bits()), Some(e));
            assert_eq!(IkeEncr::from_keyword(e.name()), Some(e));
        }
        assert_eq!(IkeEncr::from_iana(12, Some(192)), None);
        assert_eq!(IkeEncr::from_iana(28, Some(256)), None);
        assert_eq!(
            IkeEncr::from_keyword("aes128gcm"),
            Some(IkeEncr::AesGcm16 { key_bits: 128 })
        );
    }
}
