//! ESP transform suites: what was negotiated, how long everything is, and
//! what strongSwan calls it.
//!
//! A suite is an encryption transform plus, for non-AEAD ciphers, an
//! integrity transform (RFC 7296 §3.3.2). We implement the ones RFC 8221
//! marks MUST/SHOULD for ESP and that strongSwan proposes by default:
//!
//! | suite | RFC | key material | IV | ICV | align |
//! |---|---|---|---|---|---|
//! | `aes128gcm16` | RFC 4106 | 16 + 4 salt | 8 | 16 | 4 |
//! | `aes256gcm16` | RFC 4106 | 32 + 4 salt | 8 | 16 | 4 |
//! | `chacha20poly1305` | RFC 7634 | 32 + 4 salt | 8 | 16 | 4 |
//! | `aes{128,256}-sha1` | RFC 3602 + RFC 2404 | 16/32 + 20 | 16 | 12 | 16 |
//! | `aes{128,256}-sha256` | RFC 3602 + RFC 4868 | 16/32 + 32 | 16 | 16 | 16 |
//! | `aes{128,256}-sha384` | RFC 3602 + RFC 4868 | 16/32 + 48 | 16 | 24 | 16 |
//! | `aes{128,256}-sha512` | RFC 3602 + RFC 4868 | 16/32 + 64 | 16 | 32 | 16 |
//!
//! Names follow strongSwan's proposal keywords (`proposal_keywords_static.txt`)
//! so that a configuration written for strongSwan reads the same here.

use crate::primitive::{AEAD_IV_LEN, AEAD_TAG_LEN, AES_BLOCK, SALT_LEN};

/// An HMAC integrity transform with its ICV truncation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Integ {
    /// AUTH_HMAC_SHA1_96 (RFC 2404), IANA transform type 3 id 2.
    HmacSha1_96,
    /// AUTH_HMAC_SHA2_256_128 (RFC 4868), id 12.
    HmacSha256_128,
    /// AUTH_HMAC_SHA2_384_192 (RFC 4868), id 13.
    HmacSha384_192,
    /// AUTH_HMAC_SHA2_512_256 (RFC 4868), id 14.
    HmacSha512_256,
}

impl Integ {
    /// Every integrity transform we implement.
    pub const ALL: [Integ; 4] = [
        Integ::HmacSha1_96,
        Integ::HmacSha256_128,
        Integ::HmacSha384_192,
        Integ::HmacSha512_256,
    ];

    /// Key length: the hash output length (RFC 2404 §3; RFC 4868 §2.1.1:
    /// "the key length ... MUST be equal to the output length of the
    /// underlying hash").
    pub fn key_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 20,
            Integ::HmacSha256_128 => 32,
            Integ::HmacSha384_192 => 48,
            Integ::HmacSha512_256 => 64,
        }
    }

    /// Truncated ICV length: half the hash output, 96 bits for SHA-1.
    pub fn icv_len(self) -> usize {
        match self {
            Integ::HmacSha1_96 => 12,
            Integ::HmacSha256_128 => 16,
            Integ::HmacSha384_192 => 24,
            Integ::HmacSha512_256 => 32,
        }
    }

    /// IANA "Transform Type 3 - Integrity Algorithm Transform IDs".
    pub fn iana_id(self) -> u16 {
        match self {
            Integ::HmacSha1_96 => 2,
            Integ::HmacSha256_128 => 12,
            Integ::HmacSha384_192 => 13,
            Integ::HmacSha512_256 => 14,
        }
    }

    /// Inverse of [`Integ::iana_id`]; `None` for transforms we don't do.
    pub fn from_iana(id: u16) -> Option<Self> {
        Integ::ALL.into_iter().find(|i| i.iana_id() == id)
    }

    /// strongSwan keyword (`sha1`, `sha256`, `sha384`, `sha512`).
    pub fn name(self) -> &'static str {
        match self {
            Integ::HmacSha1_96 => "sha1",
            Integ::HmacSha256_128 => "sha256",
            Integ::HmacSha384_192 => "sha384",
            Integ::HmacSha512_256 => "sha512",
        }
    }

    /// Parses a strongSwan integrity keyword, aliases included
    /// (`sha`/`sha1`, `sha256`/`sha2_256`, ...).
    pub fn from_keyword(s: &str) -> Option<Self> {
        Some(match s {
            "sha" | "sha1" => Integ::HmacSha1_96,
            "sha256" | "sha2_256" => Integ::HmacSha256_128,
            "sha384" | "sha2_384" => Integ::HmacSha384_192,
            "sha512" | "sha2_512" => Integ::HmacSha512_256,
            _ => return None,
        })
    }
}

/// A negotiated ESP transform set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EspSuite {
    /// AES-GCM with a 128-bit key and 16-byte ICV (RFC 4106): 8-byte IV,
    /// 4-byte salt.
    Aes128Gcm16,
    /// AES-GCM with a 256-bit key and 16-byte ICV (RFC 4106).
    Aes256Gcm16,
    /// ChaCha20-Poly1305 (RFC 7634): 8-byte IV, 16-byte ICV, 4-byte salt.
    ChaCha20Poly1305,
    /// AES-CBC (RFC 3602) with an HMAC integrity transform
    /// (RFC 4868 / RFC 2404). `key_bits` is 128 or 256.
    AesCbc {
        /// AES key size in bits: 128 or 256.
        key_bits: u16,
        /// The integrity transform.
        integ: Integ,
    },
}

impl EspSuite {
    /// Every suite we implement, AEADs first (in preference order).
    pub const ALL: [EspSuite; 11] = [
        EspSuite::Aes256Gcm16,
        EspSuite::Aes128Gcm16,
        EspSuite::ChaCha20Poly1305,
        EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha1_96,
        },
        EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha256_128,
        },
        EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha384_192,
        },
        EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha512_256,
        },
        EspSuite::AesCbc {
            key_bits: 256,
            integ: Integ::HmacSha1_96,
        },
        EspSuite::AesCbc {
            key_bits: 256,
            integ: Integ::HmacSha256_128,
        },
        EspSuite::AesCbc {
            key_bits: 256,
            integ: Integ::HmacSha384_192,
        },
        EspSuite::AesCbc {
            key_bits: 256,
            integ: Integ::HmacSha512_256,
        },
    ];

    /// Parses a strongSwan ESP proposal keyword: `"aes128gcm16"`,
    /// `"aes256gcm16"` (and the aliases `aes128gcm128`, `aes128gcm`, ...),
    /// `"chacha20poly1305"`, or `<aes|aes128|aes256>-<integ>` with `integ`
    /// one of `sha1`/`sha`, `sha256`/`sha2_256`, `sha384`/`sha2_384`,
    /// `sha512`/`sha2_512` (e.g. `"aes256-sha2_256"`). Anything else —
    /// including a key-exchange or ESN token appended to the proposal — is
    /// `None`: the configuration layer splits those off first.
    pub fn from_proposal(s: &str) -> Option<Self> {
        let (encr, integ) = match s.split_once('-') {
            Some((e, i)) => (e, Some(i)),
            None => (s, None),
        };
        let aead = match encr {
            "aes128gcm16" | "aes128gcm128" | "aes128gcm" => Some(EspSuite::Aes128Gcm16),
            "aes256gcm16" | "aes256gcm128" | "aes256gcm" => Some(EspSuite::Aes256Gcm16),
            "chacha20poly1305" => Some(EspSuite::ChaCha20Poly1305),
            _ => None,
        };
        if let Some(suite) = aead {
            // RFC 7296 §3.3: an AEAD proposal carries no integrity transform.
            return integ.is_none().then_some(suite);
        }
        let key_bits = match encr {
            "aes" | "aes128" => 128,
            "aes256" => 256,
            _ => return None,
        };
        let integ = Integ::from_keyword(integ?)?;
        Some(EspSuite::AesCbc { key_bits, integ })
    }

    /// Canonical strongSwan spelling, e.g. `"aes256gcm16"`, `"aes128-sha256"`.
    pub fn name(&self) -> &'static str {
        match *self {
            EspSuite::Aes128Gcm16 => "aes128gcm16",
            EspSuite::Aes256Gcm16 => "aes256gcm16",
            EspSuite::ChaCha20Poly1305 => "chacha20poly1305",
            EspSuite::AesCbc { key_bits, integ } => match (key_bits, integ) {
                (128, Integ::HmacSha1_96) => "aes128-sha1",
                (128, Integ::HmacSha256_128) => "aes128-sha256",
                (128, Integ::HmacSha384_192) => "aes128-sha384",
                (128, Integ::HmacSha512_256) => "aes128-sha512",
                (256, Integ::HmacSha1_96) => "aes256-sha1",
                (256, Integ::HmacSha256_128) => "aes256-sha256",
                (256, Integ::HmacSha384_192) => "aes256-sha384",
                (256, Integ::HmacSha512_256) => "aes256-sha512",
                _ => "aes-invalid-key-size",
            },
        }
    }

    /// Length of the encryption key, including the 4-byte salt for the
    /// AEADs (RFC 4106 §8.1, RFC 7634 §2).
    pub fn encr_key_len(&self) -> usize {
        match *self {
            EspSuite::Aes128Gcm16 => 16 + SALT_LEN,
            EspSuite::Aes256Gcm16 | EspSuite::ChaCha20Poly1305 => 32 + SALT_LEN,
            EspSuite::AesCbc { key_bits, .. } => usize::from(key_bits) / 8,
        }
    }

    /// Length of the integrity key (0 for AEADs).
    pub fn integ_key_len(&self) -> usize {
        match *self {
            EspSuite::AesCbc { integ, .. } => integ.key_len(),
            _ => 0,
        }
    }

    /// KEYMAT bytes for ONE direction, in RFC 7296 §2.17 order: encryption
    /// key (incl. the 4-byte salt for GCM/ChaCha), then integrity key.
    pub fn keymat_len(&self) -> usize {
        self.encr_key_len() + self.integ_key_len()
    }

    /// Explicit IV carried in each packet: 8 (AEADs) or 16 (AES-CBC).
    pub fn iv_len(&self) -> usize {
        if self.is_aead() {
            AEAD_IV_LEN
        } else {
            AES_BLOCK
        }
    }

    /// ICV length: 16 for the AEADs, the HMAC truncation otherwise.
    pub fn icv_len(&self) -> usize {
        match *self {
            EspSuite::AesCbc { integ, .. } => integ.icv_len(),
            _ => AEAD_TAG_LEN,
        }
    }

    /// Alignment of the encrypted part: 4 for the AEADs (RFC 4303 §2.4:
    /// the Pad Length and Next Header fields must end on a 4-byte
    /// boundary), 16 for AES-CBC (RFC 3602 §2.4).
    pub fn block_size(&self) -> usize {
        if self.is_aead() { 4 } else { AES_BLOCK }
    }

    /// True for the combined-mode suites (GCM, ChaCha20-Poly1305).
    pub fn is_aead(&self) -> bool {
        !matches!(self, EspSuite::AesCbc { .. })
    }

    /// Bytes ESP adds around a payload before padding: SPI, sequence
    /// number, IV, pad length, next header and ICV (the per-packet overhead
    /// used by the capacity planner, padding excluded).
    pub fn fixed_overhead(&self) -> usize {
        8 + self.iv_len() + 2 + self.icv_len()
    }
}

impl core::fmt::Display for EspSuite {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in EspSuite::ALL {
            assert_eq!(EspSuite::from_proposal(s.name()), Some(s), "{s}");
        }
    }

    #[test]
    fn strongswan_aliases() {
        let cases = [
            ("aes128gcm128", EspSuite::Aes128Gcm16),
            ("aes128gcm", EspSuite::Aes128Gcm16),
            ("aes256gcm128", EspSuite::Aes256Gcm16),
            ("aes256gcm", EspSuite::Aes256Gcm16),
            (
                "aes-sha1",
                EspSuite::AesCbc {
                    key_bits: 128,
                    integ: Integ::HmacSha1_96,
                },
            ),
            (
                "aes128-sha",
                EspSuite::AesCbc {
                    key_bits: 128,
                    integ: Integ::HmacSha1_96,
                },
            ),
            (
                "aes256-sha2_256",
                EspSuite::AesCbc {
                    key_bits: 256,
                    integ: Integ::HmacSha256_128,
                },
            ),
            (
                "aes128-sha2_384",
                EspSuite::AesCbc {
                    key_bits: 128,
                    integ: Integ::HmacSha384_192,
                },
            ),
            (
                "aes256-sha2_512",
                EspSuite::AesCbc {
                    key_bits: 256,
                    integ: Integ::HmacSha512_256,
                },
            ),
        ];
        for (s, want) in cases {
            assert_eq!(EspSuite::from_proposal(s), Some(want), "{s}");
        }
    }

    #[test]
    fn rejects_what_we_do_not_implement() {
        for s in [
            "",
            "aes",
            "aes192-sha256",
            "aes128gcm8",
            "aes128gcm12",
            "aes128gcm16-sha256",
            "chacha20poly1305-sha1",
            "aes128-md5",
            "aes128-sha256-modp2048",
            "3des-sha1",
            "AES128GCM16",
            "aes128-",
        ] {
            assert_eq!(EspSuite::from_proposal(s), None, "{s:?}");
        }
    }

    #[test]
    fn lengths() {
        assert_eq!(EspSuite::Aes128Gcm16.keymat_len(), 20);
        assert_eq!(EspSuite::Aes256Gcm16.keymat_len(), 36);
        assert_eq!(EspSuite::ChaCha20Poly1305.keymat_len(), 36);
        let cbc = EspSuite::AesCbc {
            key_bits: 256,
            integ: Integ::HmacSha512_256,
        };
        assert_eq!(cbc.keymat_len(), 32 + 64);
        assert_eq!(cbc.icv_len(), 32);
        assert_eq!(cbc.iv_len(), 16);
        assert_eq!(cbc.block_size(), 16);
        let sha1 = EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha1_96,
        };
        assert_eq!((sha1.keymat_len(), sha1.icv_len()), (36, 12));
        for s in EspSuite::ALL {
            assert_eq!(s.is_aead(), s.iv_len() == 8);
            if s.is_aead() {
                assert_eq!((s.icv_len(), s.block_size(), s.integ_key_len()), (16, 4, 0));
            }
        }
        // AES-GCM over ESP-in-UDP: 8 + 8 + 2 + 16 = 34 bytes before padding.
        assert_eq!(EspSuite::Aes128Gcm16.fixed_overhead(), 34);
    }

    #[test]
    fn integ_iana_round_trip() {
        for i in Integ::ALL {
            assert_eq!(Integ::from_iana(i.iana_id()), Some(i));
            assert_eq!(Integ::from_keyword(i.name()), Some(i));
        }
        assert_eq!(Integ::from_iana(1), None); // HMAC-MD5-96: not implemented
    }
}
