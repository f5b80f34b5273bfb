//! The three building blocks shared by ESP and the IKE SK payload.
//!
//! ESP (RFC 4303) and IKEv2's Encrypted payload (RFC 7296 §3.14) use the same
//! transforms with the same key-material conventions, only framed
//! differently, so the keyed objects live here once:
//!
//! * [`SaltedAead`]: an AEAD key plus the 4-byte salt that RFC 4106 §4,
//!   RFC 5282 §7.1 and RFC 7634 §2 take from the end of the key material. The
//!   12-byte nonce is `salt ‖ IV`, where the 8-byte IV travels in the packet
//!   (RFC 4106 §4: "the salt field is ... the first four octets" and "the IV
//!   field ... the next eight").
//! * [`AesCbc`]: AES-CBC with caller-managed IVs and no padding (ESP and IKE
//!   pad for themselves), plus the IV derivation `IV = AES-ECB_K(counter ‖ 0)`
//!   that NIST SP 800-38A Appendix C recommends for generating unpredictable
//!   CBC IVs from a nonce.
//! * [`Hmac`]: an HMAC key with its truncation length (RFC 2404, RFC 4868).
//!
//! Each is built once per SA, so the per-packet path only borrows them. None
//! of the per-packet functions allocate.

use aws_lc_rs::{
    aead, cipher,
    cipher::{DecryptionContext, EncryptionContext},
    constant_time, hmac,
};
use zeroize::Zeroize;

use crate::esp::Integ;

/// Length of the implicit salt for AES-GCM and ChaCha20-Poly1305 in ESP and
/// IKE (RFC 4106 §4, RFC 5282 §7.1, RFC 7634 §2).
pub(crate) const SALT_LEN: usize = 4;
/// Length of the explicit IV those AEADs carry in each packet.
pub(crate) const AEAD_IV_LEN: usize = 8;
/// Their ICV length (we implement only the 16-octet variants).
pub(crate) const AEAD_TAG_LEN: usize = 16;
/// AES block size, which is also the CBC IV length (RFC 3602 §3).
pub(crate) const AES_BLOCK: usize = 16;

/// Which AEAD a [`SaltedAead`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AeadAlg {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

impl AeadAlg {
    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            AeadAlg::Aes128Gcm => &aead::AES_128_GCM,
            AeadAlg::Aes256Gcm => &aead::AES_256_GCM,
            AeadAlg::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }

    /// Cipher key length, without the salt.
    pub(crate) fn key_len(self) -> usize {
        match self {
            AeadAlg::Aes128Gcm => 16,
            AeadAlg::Aes256Gcm | AeadAlg::ChaCha20Poly1305 => 32,
        }
    }
}

/// An AEAD key and its implicit salt.
pub(crate) struct SaltedAead {
    key: aead::LessSafeKey,
    salt: [u8; SALT_LEN],
}

impl SaltedAead {
    /// `key_and_salt` is `key ‖ salt`, exactly `alg.key_len() + 4` bytes
    /// (the caller checked the length).
    pub(crate) fn new(alg: AeadAlg, key_and_salt: &[u8]) -> Option<Self> {
        if key_and_salt.len() != alg.key_len() + SALT_LEN {
            return None;
        }
        let (key, salt) = key_and_salt.split_at(alg.key_len());
        let unbound = aead::UnboundKey::new(alg.algorithm(), key).ok()?;
        let mut s = [0u8; SALT_LEN];
        s.copy_from_slice(salt);
        Some(SaltedAead {
            key: aead::LessSafeKey::new(unbound),
            salt: s,
        })
    }

    #[inline(always)]
    fn nonce(&self, iv: &[u8; AEAD_IV_LEN]) -> aead::Nonce {
        let mut n = [0u8; aead::NONCE_LEN];
        n[..SALT_LEN].copy_from_slice(&self.salt);
        n[SALT_LEN..].copy_from_slice(iv);
        aead::Nonce::assume_unique_for_key(n)
    }

    /// Encrypts `in_out` in place and writes the tag into `tag_out`
    /// (exactly [`AEAD_TAG_LEN`] bytes).
    #[inline(always)]
    pub(crate) fn seal(
        &self,
        iv: &[u8; AEAD_IV_LEN],
        aad: &[u8],
        in_out: &mut [u8],
        tag_out: &mut [u8],
    ) -> Result<(), ()> {
        let tag = self
            .key
            .seal_in_place_separate_tag(self.nonce(iv), aead::Aad::from(aad), in_out)
            .map_err(|_| ())?;
        tag_out.copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Verifies the tag at the end of `ciphertext_and_tag` (in constant
    /// time, inside aws-lc) and decrypts in place. On failure the buffer's
    /// contents are unspecified.
    #[inline(always)]
    pub(crate) fn open(
        &self,
        iv: &[u8; AEAD_IV_LEN],
        aad: &[u8],
        ciphertext_and_tag: &mut [u8],
    ) -> Result<(), ()> {
        self.key
            .open_in_place(self.nonce(iv), aead::Aad::from(aad), ciphertext_and_tag)
            .map(|_| ())
            .map_err(|_| ())
    }
}

impl Drop for SaltedAead {
    fn drop(&mut self) {
        // The aws-lc key object is opaque (and cleaned up by aws-lc); the
        // salt is ours to wipe.
        self.salt.zeroize();
    }
}

/// AES-CBC without padding, plus the keyed IV derivation.
pub(crate) struct AesCbc {
    enc: cipher::EncryptingKey,
    dec: cipher::DecryptingKey,
    /// Same key, ECB mode: only used to encrypt one block for the IV.
    ecb: cipher::EncryptingKey,
}

impl AesCbc {
    /// `key` must be 16 or 32 bytes.
    pub(crate) fn new(key: &[u8]) -> Option<Self> {
        let alg = match key.len() {
            16 => &cipher::AES_128,
            32 => &cipher::AES_256,
            _ => return None,
        };
        let unbound = || cipher::UnboundCipherKey::new(alg, key).ok();
        Some(AesCbc {
            enc: cipher::EncryptingKey::cbc(unbound()?).ok()?,
            dec: cipher::DecryptingKey::cbc(unbound()?).ok()?,
            ecb: cipher::EncryptingKey::ecb(unbound()?).ok()?,
        })
    }

    /// An unpredictable IV from a counter that never repeats under this key:
    /// `AES-ECB_K(counter ‖ 0^64)` (NIST SP 800-38A Appendix C: "apply the
    /// forward cipher function, under the same key that is used for the
    /// encryption of the plaintext, to a nonce"). RFC 3602 §2.4 and RFC 7296
    /// §3.14 require CBC IVs to be unpredictable; an attacker who does not
    /// know K cannot predict the block cipher's output.
    #[inline(always)]
    pub(crate) fn derive_iv(&self, counter: u64) -> [u8; AES_BLOCK] {
        let mut block = [0u8; AES_BLOCK];
        block[..8].copy_from_slice(&counter.to_be_bytes());
        // ECB on exactly one block cannot fail (length is a block multiple,
        // context is the ECB one).
        let _ = self
            .ecb
            .less_safe_encrypt(&mut block, EncryptionContext::None);
        block
    }

    /// CBC-encrypts `in_out` (a non-empty multiple of 16 bytes) in place.
    #[inline(always)]
    pub(crate) fn encrypt(&self, iv: &[u8; AES_BLOCK], in_out: &mut [u8]) -> Result<(), ()> {
        let ctx = EncryptionContext::Iv128((*iv).into());
        self.enc
            .less_safe_encrypt(in_out, ctx)
            .map(|_| ())
            .map_err(|_| ())
    }

    /// CBC-decrypts `in_out` (a multiple of 16 bytes) in place.
    #[inline(always)]
    pub(crate) fn decrypt(&self, iv: &[u8; AES_BLOCK], in_out: &mut [u8]) -> Result<(), ()> {
        let ctx = DecryptionContext::Iv128((*iv).into());
        self.dec.decrypt(in_out, ctx).map(|_| ()).map_err(|_| ())
    }
}

/// An HMAC integrity key with its ICV truncation.
pub(crate) struct Hmac {
    key: hmac::Key,
    icv_len: usize,
}

impl Hmac {
    /// `key` must be `integ.key_len()` bytes (checked by the caller).
    pub(crate) fn new(integ: Integ, key: &[u8]) -> Self {
        let alg = match integ {
            Integ::HmacSha1_96 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Integ::HmacSha256_128 => hmac::HMAC_SHA256,
            Integ::HmacSha384_192 => hmac::HMAC_SHA384,
            Integ::HmacSha512_256 => hmac::HMAC_SHA512,
        };
        Hmac {
            key: hmac::Key::new(alg, key),
            icv_len: integ.icv_len(),
        }
    }

    /// Truncated ICV length.
    #[inline(always)]
    pub(crate) fn icv_len(&self) -> usize {
        self.icv_len
    }

    #[inline(always)]
    fn tag(&self, data: &[u8], trailer: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(data);
        if !trailer.is_empty() {
            ctx.update(trailer);
        }
        ctx.sign()
    }

    /// Writes the truncated HMAC of `data ‖ trailer` into `icv_out`
    /// (exactly `icv_len` bytes).
    #[inline(always)]
    pub(crate) fn sign(&self, data: &[u8], trailer: &[u8], icv_out: &mut [u8]) {
        let tag = self.tag(data, trailer);
        icv_out.copy_from_slice(&tag.as_ref()[..self.icv_len]);
    }

    /// Constant-time check of `icv` against the truncated HMAC of
    /// `data ‖ trailer`.
    #[inline(always)]
    pub(crate) fn verify(&self, data: &[u8], trailer: &[u8], icv: &[u8]) -> bool {
        let tag = self.tag(data, trailer);
        #[allow(deprecated)]
        let ok = constant_time::verify_slices_are_equal(&tag.as_ref()[..self.icv_len], icv);
        ok.is_ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::test_vectors::{Vectors, hex};

    /// The GCM specification's test cases (McGrew & Viega) with 96-bit IVs,
    /// run through the IPsec nonce construction: the 12-byte IV of the spec
    /// is split into a 4-byte salt (kept with the key, as ESP's KEYMAT does)
    /// and the 8-byte explicit IV that travels in the packet.
    #[test]
    fn gcm_spec_through_salt_and_explicit_iv() {
        let v = Vectors::load(include_str!("../tests/vectors/gcm_spec.txt"));
        let mut n = 0;
        for case in v.cases() {
            let key = hex(case.get("key"));
            let iv12 = hex(case.get("iv"));
            let aad = hex(case.get("aad"));
            let pt = hex(case.get("pt"));
            let ct = hex(case.get("ct"));
            let tag = hex(case.get("tag"));
            let alg = if key.len() == 16 {
                AeadAlg::Aes128Gcm
            } else {
                AeadAlg::Aes256Gcm
            };
            let mut keymat = key.clone();
            keymat.extend_from_slice(&iv12[..4]);
            let aead = SaltedAead::new(alg, &keymat).unwrap();
            let iv: [u8; 8] = iv12[4..].try_into().unwrap();

            let mut buf = pt.clone();
            let mut got_tag = [0u8; 16];
            aead.seal(&iv, &aad, &mut buf, &mut got_tag).unwrap();
            assert_eq!(buf, ct, "{}", case.name());
            assert_eq!(&got_tag[..], &tag[..], "{}", case.name());

            let mut both = ct.clone();
            both.extend_from_slice(&tag);
            aead.open(&iv, &aad, &mut both).unwrap();
            assert_eq!(&both[..pt.len()], &pt[..], "{}", case.name());

            let mut bad = ct.clone();
            bad.extend_from_slice(&tag);
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert!(aead.open(&iv, &aad, &mut bad).is_err());
            n += 1;
        }
        assert_eq!(n, 8, "GCM spec cases 1-4 and 13-16");
    }

    /// RFC 3602 §4 cases 1-4: plain AES-CBC-128 with explicit IVs.
    #[test]
    fn rfc3602_cbc_cases() {
        let v = Vectors::load(include_str!("../tests/vectors/rfc3602_aes_cbc.txt"));
        let mut n = 0;
        for case in v.cases().filter(|c| c.has("pt")) {
            let cbc = AesCbc::new(&hex(case.get("key"))).unwrap();
            let iv: [u8; 16] = hex(case.get("iv")).try_into().unwrap();
            let mut buf = hex(case.get("pt"));
            cbc.encrypt(&iv, &mut buf).unwrap();
            assert_eq!(buf, hex(case.get("ct")), "{}", case.name());
            cbc.decrypt(&iv, &mut buf).unwrap();
            assert_eq!(buf, hex(case.get("pt")), "{}", case.name());
            n += 1;
        }
        assert_eq!(n, 4);
    }

    #[test]
    fn derived_iv_is_aes_of_counter_block() {
        // FIPS-197 Appendix C.1: AES-128(000102..0f, 00112233..ff) = 69c4e0d8...
        // Our counter block is counter ‖ 0^64, so feed the key and check
        // against an independent one-block CBC encryption with a zero IV
        // (CBC with IV 0 on one block is ECB).
        let key = hex("000102030405060708090a0b0c0d0e0f");
        let cbc = AesCbc::new(&key).unwrap();
        let counter = 0x0011_2233_4455_6677u64;
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&counter.to_be_bytes());
        cbc.encrypt(&[0u8; 16], &mut block).unwrap();
        assert_eq!(cbc.derive_iv(counter), block);
        assert_ne!(cbc.derive_iv(1), cbc.derive_iv(2));

        let mut fips = hex("00112233445566778899aabbccddeeff");
        cbc.encrypt(&[0u8; 16], &mut fips).unwrap();
        assert_eq!(fips, hex("69c4e0d86a7b0430d8cdb78070b4c55a"));
    }

    /// RFC 2202 (HMAC-SHA-1) truncated to 96 bits as RFC 2404 ICVs.
    #[test]
    fn rfc2202_hmac_sha1_96() {
        let v = Vectors::load(include_str!("../tests/vectors/rfc2202_hmac_sha1.txt"));
        let mut n = 0;
        for c in v.cases() {
            let h = Hmac::new(Integ::HmacSha1_96, &hex(c.get("key")));
            let data = hex(c.get("data"));
            let want = hex(c.get("sha1_96"));
            assert_eq!(&hex(c.get("sha1"))[..12], &want[..], "{}", c.name());
            let mut icv = [0u8; 12];
            h.sign(&data, &[], &mut icv);
            assert_eq!(&icv[..], &want[..], "{}", c.name());
            assert!(h.verify(&data, &[], &want));
            // Split input (as the ESN trailer path does) gives the same ICV.
            let (a, b) = data.split_at(data.len() / 2);
            assert!(h.verify(a, b, &want));
            let mut bad = want.clone();
            bad[11] ^= 0x80;
            assert!(!h.verify(&data, &[], &bad));
            n += 1;
        }
        assert_eq!(n, 7);
    }

    /// RFC 4868 §2.7.2: HMAC-SHA-256-128 / -384-192 / -512-256 with keys of
    /// the ESP key length.
    #[test]
    fn rfc4868_truncated_icvs() {
        let v = Vectors::load(include_str!("../tests/vectors/rfc4868_hmac_trunc.txt"));
        let mut n = 0;
        for c in v.cases() {
            let integ = match c.get("alg") {
                "sha256" => Integ::HmacSha256_128,
                "sha384" => Integ::HmacSha384_192,
                "sha512" => Integ::HmacSha512_256,
                other => panic!("{other}"),
            };
            let key = hex(c.get("key"));
            assert_eq!(key.len(), integ.key_len(), "{}", c.name());
            let h = Hmac::new(integ, &key);
            let want = hex(c.get("icv"));
            let mut icv = vec![0u8; integ.icv_len()];
            h.sign(&hex(c.get("data")), &[], &mut icv);
            assert_eq!(icv, want, "{}", c.name());
            n += 1;
        }
        assert_eq!(n, 9);
    }

    /// RFC 4231 cases 1-7 truncated to each ESP ICV length.
    #[test]
    fn rfc4231_truncations() {
        let v = Vectors::load(include_str!("../tests/vectors/rfc4231_hmac_sha2.txt"));
        for c in v.cases() {
            for (integ, field) in [
                (Integ::HmacSha256_128, "sha256"),
                (Integ::HmacSha384_192, "sha384"),
                (Integ::HmacSha512_256, "sha512"),
            ] {
                let full = hex(c.get(field));
                let n = integ.icv_len().min(full.len());
                let h = Hmac::new(integ, &hex(c.get("key")));
                let mut icv = vec![0u8; integ.icv_len()];
                h.sign(&hex(c.get("data")), &[], &mut icv);
                assert_eq!(&icv[..n], &full[..n], "{} {field}", c.name());
            }
        }
    }

    #[test]
    fn salted_aead_rejects_wrong_lengths() {
        assert!(SaltedAead::new(AeadAlg::Aes128Gcm, &[0; 16]).is_none());
        assert!(SaltedAead::new(AeadAlg::Aes128Gcm, &[0; 20]).is_some());
        assert!(SaltedAead::new(AeadAlg::ChaCha20Poly1305, &[0; 36]).is_some());
        assert!(AesCbc::new(&[0; 24]).is_none());
    }
}
