//! [`IkeCipher`]: the Encrypted (SK) payload of an IKE message
//! (RFC 7296 §3.14).
//!
//! ```text
//! [IKE header 28][payloads before SK][SK generic header 4][IV][plaintext ‖ padding ‖ pad length][ICV]
//! ^0                                  ^sk_offset
//! ```
//!
//! The caller lays out the whole message — lengths in the IKE header and
//! the SK generic header already final, inner payloads and padding written
//! — and [`IkeCipher::seal_sk`] fills in the IV, encrypts and writes the
//! ICV, all in place. [`IkeCipher::open_sk`] reverses it and returns the
//! range of the decrypted inner payloads (padding included; the IKE layer
//! strips it by the Pad Length byte).
//!
//! What is authenticated:
//!
//! * AEADs (RFC 5282 §5.1, RFC 7634 §3): the associated data is the
//!   message "from the first octet of the Fixed Header ... through the last
//!   octet of the Generic Payload Header of the Encrypted Payload", i.e.
//!   `msg[..sk_offset + 4]`; the nonce is salt ‖ IV as for ESP.
//! * AES-CBC + HMAC (RFC 7296 §3.14): the ICV covers the whole message
//!   up to the ICV, ciphertext and IV included ("the checksum MUST be
//!   computed over the encrypted message").
//!
//! IVs come from the caller's `iv_seed`, a per-SA, per-direction message
//! counter that must never repeat under one key. AEADs send it as the
//! 8-byte IV (RFC 5282 §3.1: "the IV MUST NOT repeat for a given key";
//! a counter is the recommended way). CBC needs an unpredictable IV
//! (§3.14: "MUST be chosen at random and MUST be unpredictable"), so the
//! counter is encrypted with SK_e first: `IV = AES-ECB_SK_e(counter ‖ 0)`,
//! NIST SP 800-38A Appendix C. That keeps this crate free of an RNG
//! dependency on the send path without making the IV guessable.

use core::ops::Range;

use super::IkeEncr;
use crate::esp::{IcvError, Integ, KeyLengthError, SealError};
use crate::primitive::{AEAD_IV_LEN, AEAD_TAG_LEN, AES_BLOCK, AeadAlg, AesCbc, Hmac, SaltedAead};

/// Length of the generic payload header that precedes the IV.
const GENERIC_HEADER: usize = 4;

/// A problem with the keys or transforms handed to [`IkeCipher::new`]: a
/// local bug in the caller's key derivation or proposal handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IkeCipherError {
    /// SK_e or SK_a has the wrong length (`which` is `"SK_e"` or `"SK_a"`).
    KeyLength {
        /// Which key.
        which: &'static str,
        /// The lengths.
        error: KeyLengthError,
    },
    /// An AEAD was given an integrity transform, or AES-CBC was not
    /// (RFC 7296 §3.3.3, RFC 5282 §8).
    IntegMismatch,
}

impl core::fmt::Display for IkeCipherError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IkeCipherError::KeyLength { which, error } => write!(f, "{which}: {error}"),
            IkeCipherError::IntegMismatch => {
                f.write_str("AEAD transforms take no integrity transform; AES-CBC needs one")
            }
        }
    }
}

impl std::error::Error for IkeCipherError {}

/// One direction's SK payload protection (SK_ei + SK_ai, or SK_er + SK_ar).
pub struct IkeCipher {
    encr: IkeEncr,
    integ: Option<Integ>,
    keys: Keys,
}

enum Keys {
    Aead(SaltedAead),
    Cbc(Box<CbcKeys>),
}

struct CbcKeys {
    cbc: AesCbc,
    hmac: Hmac,
}

impl core::fmt::Debug for IkeCipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IkeCipher")
            .field("encr", &self.encr)
            .field("integ", &self.integ)
            .finish_non_exhaustive()
    }
}

impl IkeCipher {
    /// Builds the cipher from SK_e (key ‖ salt for the AEADs) and SK_a
    /// (empty for the AEADs).
    pub fn new(
        encr: IkeEncr,
        integ: Option<Integ>,
        sk_e: &[u8],
        sk_a: &[u8],
    ) -> Result<Self, IkeCipherError> {
        if encr.is_aead() == integ.is_some() {
            return Err(IkeCipherError::IntegMismatch);
        }
        let e_err = IkeCipherError::KeyLength {
            which: "SK_e",
            error: KeyLengthError {
                expected: encr.key_len(),
                got: sk_e.len(),
            },
        };
        if sk_e.len() != encr.key_len() {
            return Err(e_err);
        }
        let a_len = integ.map_or(0, Integ::key_len);
        if sk_a.len() != a_len {
            return Err(IkeCipherError::KeyLength {
                which: "SK_a",
                error: KeyLengthError {
                    expected: a_len,
                    got: sk_a.len(),
                },
            });
        }
        let aead = |alg| SaltedAead::new(alg, sk_e).ok_or(e_err);
        let keys = match (encr, integ) {
            (IkeEncr::AesGcm16 { key_bits: 128 }, None) => Keys::Aead(aead(AeadAlg::Aes128Gcm)?),
            (IkeEncr::AesGcm16 { key_bits: 256 }, None) => Keys::Aead(aead(AeadAlg::Aes256Gcm)?),
            (IkeEncr::ChaCha20Poly1305, None) => Keys::Aead(aead(AeadAlg::ChaCha20Poly1305)?),
            (
                IkeEncr::AesCbc {
                    key_bits: 128 | 256,
                },
                Some(integ),
            ) => Keys::Cbc(Box::new(CbcKeys {
                cbc: AesCbc::new(sk_e).ok_or(e_err)?,
                hmac: Hmac::new(integ, sk_a),
            })),
            _ => return Err(e_err),
        };
        Ok(IkeCipher { encr, integ, keys })
    }

    /// The encryption transform.
    pub fn encr(&self) -> IkeEncr {
        self.encr
    }

    /// The integrity transform (`None` for AEADs).
    pub fn integ(&self) -> Option<Integ> {
        self.integ
    }

    /// Length of SK_e for this cipher (salt included for AEADs).
    pub fn key_len_encr(&self) -> usize {
        self.encr.key_len()
    }

    /// Length of SK_a (0 for AEADs).
    pub fn key_len_integ(&self) -> usize {
        self.integ.map_or(0, Integ::key_len)
    }

    /// IV length in the SK payload.
    pub fn iv_len(&self) -> usize {
        self.encr.iv_len()
    }

    /// ICV length at the end of the message.
    pub fn icv_len(&self) -> usize {
        self.integ.map_or(AEAD_TAG_LEN, Integ::icv_len)
    }

    /// Padding alignment for plaintext ‖ padding ‖ pad length.
    pub fn block_size(&self) -> usize {
        self.encr.block_size()
    }

    /// Seals the SK payload of `msg` in place.
    ///
    /// `msg` = the whole IKE message: `[IKE header 28][... payloads before
    /// SK][SK generic header 4][IV][plaintext incl. padding and pad-length
    /// byte][ICV]`. `sk_offset` = offset of the SK generic payload header.
    /// The IKE header's length field and the SK payload length are already
    /// correct. Writes the IV (from `iv_seed`, a per-SA message counter
    /// that never repeats under this key: sent as is by the AEADs,
    /// encrypted for CBC), encrypts, writes the ICV.
    pub fn seal_sk(&self, msg: &mut [u8], sk_offset: usize, iv_seed: u64) -> Result<(), SealError> {
        let (iv_len, icv_len, bs) = (self.iv_len(), self.icv_len(), self.block_size());
        // At least the Pad Length byte, rounded up to a block.
        let min = sk_offset.saturating_add(GENERIC_HEADER + iv_len + bs + icv_len);
        if msg.len() < min {
            return Err(SealError::TooShort {
                min,
                got: msg.len(),
            });
        }
        let len = msg.len();
        let pt_start = sk_offset + GENERIC_HEADER + iv_len;
        let pt_len = len - pt_start - icv_len;
        if pt_len % bs != 0 {
            return Err(SealError::Misaligned {
                block_size: bs,
                len: pt_len,
            });
        }
        match &self.keys {
            Keys::Aead(aead) => {
                let iv = iv_seed.to_be_bytes();
                let (aad, rest) = msg.split_at_mut(sk_offset + GENERIC_HEADER);
                let (iv_field, rest) = rest.split_at_mut(iv_len);
                let (pt, icv) = rest.split_at_mut(pt_len);
                iv_field.copy_from_slice(&iv);
                aead.seal(&iv, aad, pt, icv)
                    .map_err(|()| SealError::Backend)
            }
            Keys::Cbc(k) => {
                let iv = k.cbc.derive_iv(iv_seed);
                let (authed, icv) = msg.split_at_mut(len - icv_len);
                authed[pt_start - iv_len..pt_start].copy_from_slice(&iv);
                k.cbc
                    .encrypt(&iv, &mut authed[pt_start..])
                    .map_err(|()| SealError::Backend)?;
                k.hmac.sign(authed, &[], icv);
                Ok(())
            }
        }
    }

    /// Verifies and decrypts the SK payload of `msg` in place (laid out as
    /// for [`IkeCipher::seal_sk`]). Returns the range of the plaintext
    /// (inner payloads ‖ padding ‖ pad length) within `msg`. The ICV is
    /// checked before anything is decrypted; a message too short to hold
    /// the SK framing fails the same way.
    pub fn open_sk(&self, msg: &mut [u8], sk_offset: usize) -> Result<Range<usize>, IcvError> {
        let (iv_len, icv_len, bs) = (self.iv_len(), self.icv_len(), self.block_size());
        let len = msg.len();
        let min = sk_offset.saturating_add(GENERIC_HEADER + iv_len + bs + icv_len);
        if len < min {
            return Err(IcvError);
        }
        let pt_start = sk_offset + GENERIC_HEADER + iv_len;
        let pt_len = len - pt_start - icv_len;
        if pt_len % bs != 0 {
            return Err(IcvError);
        }
        match &self.keys {
            Keys::Aead(aead) => {
                let (aad, rest) = msg.split_at_mut(sk_offset + GENERIC_HEADER);
                let (iv_field, ct_and_tag) = rest.split_at_mut(iv_len);
                let mut iv = [0u8; AEAD_IV_LEN];
                iv.copy_from_slice(iv_field);
                aead.open(&iv, aad, ct_and_tag).map_err(|()| IcvError)?;
            }
            Keys::Cbc(k) => {
                let (authed, icv) = msg.split_at_mut(len - icv_len);
                if !k.hmac.verify(authed, &[], icv) {
                    return Err(IcvError);
                }
                let mut iv = [0u8; AES_BLOCK];
                iv.copy_from_slice(&authed[pt_start - iv_len..pt_start]);
                k.cbc
                    .decrypt(&iv, &mut authed[pt_start..])
                    .map_err(|()| IcvError)?;
            }
        }
        Ok(pt_start..len - icv_len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::rand::{DeterministicRng, Rng};
    use crate::test_vectors::{Vectors, hex};

    fn all_configs() -> Vec<(IkeEncr, Option<Integ>)> {
        let mut v = Vec::new();
        for e in IkeEncr::ALL {
            if e.is_aead() {
                v.push((e, None));
            } else {
                for i in Integ::ALL {
                    v.push((e, Some(i)));
                }
            }
        }
        v
    }

    fn cipher(encr: IkeEncr, integ: Option<Integ>, seed: u64) -> IkeCipher {
        let mut rng = DeterministicRng::new(seed);
        let mut e = vec![0u8; encr.key_len()];
        let mut a = vec![0u8; integ.map_or(0, Integ::key_len)];
        rng.fill_secret(&mut e);
        rng.fill_secret(&mut a);
        IkeCipher::new(encr, integ, &e, &a).unwrap()
    }

    /// A message with some cleartext payloads before SK (as IKE_AUTH with
    /// fragmentation or IKE_INTERMEDIATE can have), SK, plaintext of
    /// `blocks` cipher blocks.
    fn message(c: &IkeCipher, before_sk: usize, blocks: usize) -> (Vec<u8>, usize, Vec<u8>) {
        let sk_offset = 28 + before_sk;
        let pt: Vec<u8> = (0..c.block_size() * blocks)
            .map(|i| (i * 7) as u8)
            .collect();
        let mut m = vec![0x11u8; sk_offset];
        m.extend_from_slice(&[0x29, 0, 0, 0]);
        m.extend_from_slice(&vec![0; c.iv_len()]);
        m.extend_from_slice(&pt);
        m.extend_from_slice(&vec![0; c.icv_len()]);
        (m, sk_offset, pt)
    }

    #[test]
    fn rfc7634_ikev2_example() {
        let v = Vectors::load(include_str!(
            "../../tests/vectors/rfc7634_chacha20poly1305.txt"
        ));
        let t = v.case("rfc7634-ike");
        let c =
            IkeCipher::new(IkeEncr::ChaCha20Poly1305, None, &hex(t.get("keymat")), &[]).unwrap();
        let want = hex(t.get("message"));
        // Seal: the RFC's IV is 0x1011121314151617, our counter form.
        let mut m = want[..28 + 4].to_vec();
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(&hex(t.get("plain")));
        m.extend_from_slice(&[0; 16]);
        c.seal_sk(&mut m, 28, 0x1011_1213_1415_1617).unwrap();
        assert_eq!(m, want);
        // Open.
        let mut m = want.clone();
        let r = c.open_sk(&mut m, 28).unwrap();
        assert_eq!(r, 40..53);
        assert_eq!(&m[r], &hex(t.get("plain"))[..]);
    }

    #[test]
    fn round_trip_every_config() {
        for (encr, integ) in all_configs() {
            let c = cipher(encr, integ, 1);
            for (before, blocks) in [(0, 1), (0, 5), (8, 3), (100, 40)] {
                let (mut m, off, pt) = message(&c, before, blocks);
                let head = m[..off + 4].to_vec();
                c.seal_sk(&mut m, off, 42).unwrap();
                assert_eq!(&m[..off + 4], &head[..], "cleartext part untouched");
                assert_ne!(&m[off + 4 + c.iv_len()..][..pt.len()], &pt[..]);
                let r = c.open_sk(&mut m, off).unwrap();
                assert_eq!(&m[r], &pt[..], "{encr:?} {integ:?}");
            }
        }
    }

    #[test]
    fn any_flipped_bit_fails() {
        for (encr, integ) in all_configs() {
            let c = cipher(encr, integ, 2);
            let (mut sealed, off, _) = message(&c, 4, 2);
            c.seal_sk(&mut sealed, off, 7).unwrap();
            for byte in 0..sealed.len() {
                let mut m = sealed.clone();
                m[byte] ^= 0x40;
                assert_eq!(
                    c.open_sk(&mut m, off),
                    Err(IcvError),
                    "{encr:?} {integ:?} byte {byte}"
                );
            }
            // Claiming a different SK offset changes the AAD split or layout.
            let mut m = sealed.clone();
            assert_eq!(c.open_sk(&mut m, off - 1), Err(IcvError), "{encr:?}");
        }
    }

    #[test]
    fn iv_handling() {
        let gcm = cipher(IkeEncr::AesGcm16 { key_bits: 256 }, None, 3);
        let (mut m, off, _) = message(&gcm, 0, 2);
        gcm.seal_sk(&mut m, off, 0xabcdef).unwrap();
        assert_eq!(m[off + 4..off + 12], 0xabcdefu64.to_be_bytes());

        let cbc = cipher(
            IkeEncr::AesCbc { key_bits: 128 },
            Some(Integ::HmacSha256_128),
            3,
        );
        let (mut a, off, _) = message(&cbc, 0, 2);
        let mut b = a.clone();
        cbc.seal_sk(&mut a, off, 1).unwrap();
        cbc.seal_sk(&mut b, off, 2).unwrap();
        let (iva, ivb) = (&a[off + 4..off + 20], &b[off + 4..off + 20]);
        assert_ne!(iva, ivb);
        assert_ne!(
            &iva[..8],
            &1u64.to_be_bytes(),
            "CBC IV must not expose the counter"
        );
    }

    #[test]
    fn directions_do_not_cross() {
        for (encr, integ) in all_configs() {
            let i = cipher(encr, integ, 10);
            let r = cipher(encr, integ, 11);
            let (mut m, off, _) = message(&i, 0, 2);
            i.seal_sk(&mut m, off, 0).unwrap();
            assert_eq!(r.open_sk(&mut m, off), Err(IcvError));
        }
    }

    #[test]
    fn construction_checks() {
        let gcm = IkeEncr::AesGcm16 { key_bits: 128 };
        assert_eq!(
            IkeCipher::new(gcm, Some(Integ::HmacSha256_128), &[0; 20], &[0; 32]).unwrap_err(),
            IkeCipherError::IntegMismatch
        );
        let cbc = IkeEncr::AesCbc { key_bits: 256 };
        assert_eq!(
            IkeCipher::new(cbc, None, &[0; 32], &[]).unwrap_err(),
            IkeCipherError::IntegMismatch
        );
        assert!(matches!(
            IkeCipher::new(gcm, None, &[0; 16], &[]),
            Err(IkeCipherError::KeyLength { which: "SK_e", .. })
        ));
        assert!(matches!(
            IkeCipher::new(cbc, Some(Integ::HmacSha1_96), &[0; 32], &[0; 32]),
            Err(IkeCipherError::KeyLength { which: "SK_a", .. })
        ));
        let c = IkeCipher::new(cbc, Some(Integ::HmacSha384_192), &[0; 32], &[0; 48]).unwrap();
        assert_eq!(
            (
                c.key_len_encr(),
                c.key_len_integ(),
                c.iv_len(),
                c.icv_len(),
                c.block_size()
            ),
            (32, 48, 16, 24, 16)
        );
        let c = IkeCipher::new(IkeEncr::ChaCha20Poly1305, None, &[0; 36], &[]).unwrap();
        assert_eq!(
            (
                c.key_len_encr(),
                c.key_len_integ(),
                c.iv_len(),
                c.icv_len(),
                c.block_size()
            ),
            (36, 0, 8, 16, 1)
        );
        assert!(
            IkeCipher::new(
                IkeEncr::AesCbc { key_bits: 192 },
                Some(Integ::HmacSha1_96),
                &[0; 24],
                &[0; 20]
            )
            .is_err()
        );
    }

    #[test]
    fn seal_and_open_reject_bad_framing() {
        for (encr, integ) in all_configs() {
            let c = cipher(encr, integ, 5);
            let (mut m, off, _) = message(&c, 0, 1);
            let n = m.len();
            assert!(matches!(
                c.seal_sk(&mut m, n, 0),
                Err(SealError::TooShort { .. })
            ));
            assert!(matches!(
                c.seal_sk(&mut m, usize::MAX - 2, 0),
                Err(SealError::TooShort { .. })
            ));
            assert_eq!(c.open_sk(&mut m, usize::MAX), Err(IcvError));
            if c.block_size() > 1 {
                let mut odd = m.clone();
                odd.push(0);
                assert!(matches!(
                    c.seal_sk(&mut odd, off, 0),
                    Err(SealError::Misaligned { .. })
                ));
                assert_eq!(c.open_sk(&mut odd, off), Err(IcvError));
            }
            for n in 0..m.len() {
                let mut short = m[..n].to_vec();
                assert_eq!(c.open_sk(&mut short, off), Err(IcvError));
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn open_never_panics(
            idx in 0usize..8,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
            off in 0usize..200,
        ) {
            let configs = all_configs();
            let (encr, integ) = configs[idx % configs.len()];
            let c = cipher(encr, integ, 6);
            let mut b = bytes;
            proptest::prop_assert_eq!(c.open_sk(&mut b, off), Err(IcvError));
        }
    }
}
