//! IKEv2 pseudorandom functions and prf+ (RFC 7296 §2.13).
//!
//! IKEv2 derives everything from one negotiated PRF: SKEYSEED =
//! prf(Ni | Nr, g^ir), the key stream {SK_d | SK_ai | ...} = prf+(SKEYSEED,
//! Ni | Nr | SPIi | SPIr), Child SA KEYMAT = prf+(SK_d, Ni | Nr), and the PSK
//! AUTH value `prf(prf(Shared Secret, "Key Pad for IKEv2"), <SignedOctets>)`
//! (§2.15). We implement the HMAC PRFs (RFC 2104 with SHA-1, RFC 4868 with
//! SHA-2).
//!
//! prf+ is, quoting §2.13:
//!
//! ```text
//! prf+ (K,S) = T1 | T2 | T3 | T4 | ...
//! T1 = prf (K, S | 0x01)
//! T2 = prf (K, T1 | S | 0x02)
//! ...
//! ```
//!
//! "The prf+ function is not defined beyond 255 times the size of the prf
//! function output", so asking for more is an error, not a truncation.
//!
//! Inputs in IKE are almost always concatenations (Ni | Nr | SPIi | SPIr), so
//! every function has a `_parts` form that takes the pieces and feeds them
//! to the HMAC one after another instead of allocating the concatenation.

use aws_lc_rs::{constant_time, hmac};
use zeroize::Zeroize;

use crate::secret::SecretBytes;

/// Largest PRF output we implement (HMAC-SHA-512).
const MAX_OUTPUT: usize = 64;

/// An IKEv2 PRF (IANA "Transform Type 2 - Pseudorandom Function Transform
/// IDs").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prf {
    /// PRF_HMAC_SHA1 (RFC 2104), id 2. Kept for interoperability only.
    HmacSha1,
    /// PRF_HMAC_SHA2_256 (RFC 4868), id 5.
    HmacSha256,
    /// PRF_HMAC_SHA2_384 (RFC 4868), id 6.
    HmacSha384,
    /// PRF_HMAC_SHA2_512 (RFC 4868), id 7.
    HmacSha512,
}

/// prf+ was asked for more than 255 blocks (RFC 7296 §2.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrfPlusError {
    /// Bytes requested.
    pub requested: usize,
    /// The most prf+ can produce with this PRF: 255 × output length.
    pub max: usize,
}

impl core::fmt::Display for PrfPlusError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "prf+ asked for {} bytes, but is only defined up to {}",
            self.requested, self.max
        )
    }
}

impl std::error::Error for PrfPlusError {}

impl Prf {
    /// Every PRF we implement.
    pub const ALL: [Prf; 4] = [
        Prf::HmacSha1,
        Prf::HmacSha256,
        Prf::HmacSha384,
        Prf::HmacSha512,
    ];

    fn algorithm(self) -> hmac::Algorithm {
        match self {
            Prf::HmacSha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Prf::HmacSha256 => hmac::HMAC_SHA256,
            Prf::HmacSha384 => hmac::HMAC_SHA384,
            Prf::HmacSha512 => hmac::HMAC_SHA512,
        }
    }

    /// IANA transform ID.
    pub fn iana_id(self) -> u16 {
        match self {
            Prf::HmacSha1 => 2,
            Prf::HmacSha256 => 5,
            Prf::HmacSha384 => 6,
            Prf::HmacSha512 => 7,
        }
    }

    /// Inverse of [`Prf::iana_id`].
    pub fn from_iana(id: u16) -> Option<Self> {
        Prf::ALL.into_iter().find(|p| p.iana_id() == id)
    }

    /// strongSwan keyword: `prfsha1`, `prfsha256`, `prfsha384`, `prfsha512`.
    pub fn name(self) -> &'static str {
        match self {
            Prf::HmacSha1 => "prfsha1",
            Prf::HmacSha256 => "prfsha256",
            Prf::HmacSha384 => "prfsha384",
            Prf::HmacSha512 => "prfsha512",
        }
    }

    /// Inverse of [`Prf::name`].
    pub fn from_keyword(s: &str) -> Option<Self> {
        Prf::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Output length in bytes (the hash length).
    pub fn output_len(self) -> usize {
        match self {
            Prf::HmacSha1 => 20,
            Prf::HmacSha256 => 32,
            Prf::HmacSha384 => 48,
            Prf::HmacSha512 => 64,
        }
    }

    /// Preferred key length: the output length (RFC 7296 §2.13, RFC 4868
    /// §2.1.2). Used for SK_d, SK_pi and SK_pr.
    pub fn key_len(self) -> usize {
        self.output_len()
    }

    /// prf(key, data).
    pub fn prf(self, key: &[u8], data: &[u8]) -> PrfOutput {
        self.prf_parts(key, &[data])
    }

    /// `prf(key, parts[0] | parts[1] | ...)`, without building the
    /// concatenation.
    pub fn prf_parts(self, key: &[u8], parts: &[&[u8]]) -> PrfOutput {
        let key = hmac::Key::new(self.algorithm(), key);
        let mut ctx = hmac::Context::with_key(&key);
        for p in parts {
            ctx.update(p);
        }
        PrfOutput::from_tag(ctx.sign())
    }

    /// prf+(key, seed) truncated to `len` bytes (RFC 7296 §2.13).
    pub fn prf_plus(
        self,
        key: &[u8],
        seed: &[u8],
        len: usize,
    ) -> Result<SecretBytes, PrfPlusError> {
        self.prf_plus_parts(key, &[seed], len)
    }

    /// `prf+(key, seed_parts[0] | seed_parts[1] | ...)` truncated to `len`
    /// bytes. Fails if `len > 255 * output_len()`.
    pub fn prf_plus_parts(
        self,
        key: &[u8],
        seed_parts: &[&[u8]],
        len: usize,
    ) -> Result<SecretBytes, PrfPlusError> {
        let out_len = self.output_len();
        let max = 255 * out_len;
        if len > max {
            return Err(PrfPlusError {
                requested: len,
                max,
            });
        }
        let key = hmac::Key::new(self.algorithm(), key);
        let mut out = SecretBytes::zeroed(len);
        let mut prev = PrfOutput::empty();
        for (n, chunk) in out.as_mut_slice().chunks_mut(out_len).enumerate() {
            // n < 255 by the length check above.
            let counter = [(n + 1) as u8];
            let mut ctx = hmac::Context::with_key(&key);
            ctx.update(prev.as_slice()); // T0 is empty
            for p in seed_parts {
                ctx.update(p);
            }
            ctx.update(&counter);
            prev = PrfOutput::from_tag(ctx.sign());
            chunk.copy_from_slice(&prev.as_slice()[..chunk.len()]);
        }
        Ok(out)
    }
}

/// One PRF output, on the stack, wiped on drop. `Debug` hides the value.
#[derive(Clone)]
pub struct PrfOutput {
    bytes: [u8; MAX_OUTPUT],
    len: usize,
}

impl PrfOutput {
    fn empty() -> Self {
        PrfOutput {
            bytes: [0; MAX_OUTPUT],
            len: 0,
        }
    }

    fn from_tag(tag: hmac::Tag) -> Self {
        let t = tag.as_ref();
        let mut out = PrfOutput::empty();
        out.bytes[..t.len()].copy_from_slice(t);
        out.len = t.len();
        out
    }

    /// The output bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Constant-time comparison with a received value (e.g. a PSK AUTH
    /// payload, RFC 7296 §2.15). Different lengths compare unequal.
    pub fn ct_eq(&self, other: &[u8]) -> bool {
        #[allow(deprecated)]
        let r = constant_time::verify_slices_are_equal(self.as_slice(), other);
        r.is_ok()
    }

    /// Copies the output into a [`SecretBytes`].
    pub fn to_secret(&self) -> SecretBytes {
        SecretBytes::from_slice(self.as_slice())
    }
}

impl AsRef<[u8]> for PrfOutput {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for PrfOutput {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl core::fmt::Debug for PrfOutput {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PrfOutput({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::test_vectors::{Vectors, hex};

    /// RFC 4231 (full-length outputs) through `Prf::prf`.
    #[test]
    fn rfc4231_full_outputs() {
        let v = Vectors::load(include_str!("../../tests/vectors/rfc4231_hmac_sha2.txt"));
        let mut n = 0;
        for c in v.cases() {
            for (prf, field) in [
                (Prf::HmacSha256, "sha256"),
                (Prf::HmacSha384, "sha384"),
                (Prf::HmacSha512, "sha512"),
            ] {
                let got = prf.prf(&hex(c.get("key")), &hex(c.get("data")));
                let want = hex(c.get(field));
                if c.has("trunc") {
                    assert_eq!(&got.as_slice()[..want.len()], &want[..], "{}", c.name());
                } else {
                    assert_eq!(got.as_slice(), &want[..], "{} {field}", c.name());
                    assert!(got.ct_eq(&want));
                }
                n += 1;
            }
        }
        assert_eq!(n, 21);
    }

    #[test]
    fn rfc2202_full_outputs() {
        let v = Vectors::load(include_str!("../../tests/vectors/rfc2202_hmac_sha1.txt"));
        for c in v.cases() {
            let got = Prf::HmacSha1.prf(&hex(c.get("key")), &hex(c.get("data")));
            assert_eq!(got.as_slice(), &hex(c.get("sha1"))[..], "{}", c.name());
        }
    }

    /// prf+ written the obvious way, with allocations and concatenation.
    fn naive_prf_plus(prf: Prf, key: &[u8], seed: &[u8], len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut t: Vec<u8> = Vec::new();
        let mut n = 1u16;
        while out.len() < len {
            assert!(n <= 255);
            let mut input = t.clone();
            input.extend_from_slice(seed);
            input.push(n as u8);
            t = prf.prf(key, &input).as_slice().to_vec();
            out.extend_from_slice(&t);
            n += 1;
        }
        out.truncate(len);
        out
    }

    #[test]
    fn prf_plus_matches_naive_definition() {
        let key = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
        let seed: Vec<u8> = (0..77u8).collect();
        for prf in Prf::ALL {
            for len in [
                0,
                1,
                prf.output_len() - 1,
                prf.output_len(),
                prf.output_len() + 1,
                200,
                255 * prf.output_len(),
            ] {
                let got = prf.prf_plus(&key, &seed, len).unwrap();
                assert_eq!(
                    got.as_slice(),
                    &naive_prf_plus(prf, &key, &seed, len)[..],
                    "{prf:?} {len}"
                );
            }
        }
    }

    #[test]
    fn parts_equal_concatenation() {
        let (a, b, c) = (
            &b"Ni-nonce"[..],
            &b"Nr-nonce-longer"[..],
            &[1u8, 2, 3, 4, 5, 6, 7, 8][..],
        );
        let cat = [a, b, c].concat();
        for prf in Prf::ALL {
            assert_eq!(
                prf.prf_parts(b"k", &[a, b, c]).as_slice(),
                prf.prf(b"k", &cat).as_slice()
            );
            assert_eq!(
                prf.prf_plus_parts(b"k", &[a, b, c], 100)
                    .unwrap()
                    .as_slice(),
                prf.prf_plus(b"k", &cat, 100).unwrap().as_slice()
            );
        }
    }

    /// prf+ outputs computed by an independent implementation (Python's
    /// `hmac` module, see the file header), for every PRF.
    #[test]
    fn prf_plus_independent_vectors() {
        let v = Vectors::load(include_str!("../../tests/vectors/prf_plus.txt"));
        let mut n = 0;
        for c in v.cases() {
            let prf = Prf::from_keyword(c.get("prf")).unwrap();
            let want = hex(c.get("out"));
            let got = prf
                .prf_plus(&hex(c.get("key")), &hex(c.get("seed")), want.len())
                .unwrap();
            assert_eq!(got.as_slice(), &want[..], "{}", c.name());
            n += 1;
        }
        assert_eq!(n, 4);
    }

    #[test]
    fn prf_plus_refuses_beyond_255_blocks() {
        for prf in Prf::ALL {
            let max = 255 * prf.output_len();
            assert!(prf.prf_plus(b"k", b"s", max).is_ok());
            assert_eq!(
                prf.prf_plus(b"k", b"s", max + 1).unwrap_err(),
                PrfPlusError {
                    requested: max + 1,
                    max
                }
            );
        }
    }

    #[test]
    fn ids_names_lengths() {
        for prf in Prf::ALL {
            assert_eq!(Prf::from_iana(prf.iana_id()), Some(prf));
            assert_eq!(Prf::from_keyword(prf.name()), Some(prf));
            assert_eq!(prf.prf(b"k", b"d").as_slice().len(), prf.output_len());
            assert_eq!(prf.key_len(), prf.output_len());
        }
        assert_eq!(Prf::from_iana(4), None); // PRF_AES128_XCBC: not implemented
        let out = Prf::HmacSha256.prf(b"k", b"d");
        assert_eq!(format!("{out:?}"), "PrfOutput(32 bytes)");
        assert!(!out.ct_eq(&out.as_slice()[..31]));
    }
}
