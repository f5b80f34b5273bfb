//! Key derivation (RFC 7296 §2.13, §2.14, §2.17, §2.18).
//!
//! ```text
//! SKEYSEED = prf(Ni | Nr, g^ir)
//! {SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr} = prf+(SKEYSEED, Ni | Nr | SPIi | SPIr)
//! KEYMAT   = prf+(SK_d, Ni | Nr)                 (first Child SA, or CREATE_CHILD_SA without PFS)
//! KEYMAT   = prf+(SK_d, g^ir (new) | Ni | Nr)    (CREATE_CHILD_SA with a KE exchange)
//! SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr)   (IKE SA rekey, §2.18)
//! ```
//!
//! The free functions are the bare formulas, checked against the NIST
//! SP 800-135 IKEv2 vectors in `tests/vectors/ikev2_kdf.txt`. [`IkeKeys`]
//! keeps the prf+ stream, cut into the SA's keys in the order §2.14 gives,
//! and builds the two SK payload ciphers from it when a message is sealed
//! or opened: SK_ei/SK_ai protect what the original initiator sends,
//! SK_er/SK_ar what the responder sends. For
//! AEADs the integrity keys are empty and SK_e carries the 4-octet salt
//! (RFC 5282 §7.1, RFC 7634 §3). [`ChildKeys`] cuts Child SA KEYMAT per
//! §2.17: "All keys for SAs carrying data from the initiator to the
//! responder are taken before SAs going from the responder to the
//! initiator", each direction encryption key first, then integrity key —
//! exactly the layout `EspSuite::keymat_len` describes.
//!
//! Everything derived lives in `SecretBytes` / `IkeCipher` and is wiped on
//! drop; intermediate prf+ streams are `SecretBytes` too.

use crate::proposal::Selected;
use esparto_crypto::ike::{IkeCipher, IkeCipherError, IkeEncr, Prf, PrfOutput, PrfPlusError};
use esparto_crypto::{EspSuite, Integ, SecretBytes};

/// Key derivation failed: only possible through a local bug (a suite
/// without a PRF, lengths prf+ cannot produce, a cipher refusing its keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The selected IKE suite has no PRF.
    NoPrf,
    /// prf+ asked for too much.
    PrfPlus(PrfPlusError),
    /// The SK cipher rejected its keys.
    Cipher(IkeCipherError),
    /// The selected ESP transforms have no `EspSuite`.
    NoEspSuite,
}

impl core::fmt::Display for KeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeyError::NoPrf => f.write_str("IKE suite without a PRF"),
            KeyError::PrfPlus(e) => write!(f, "{e}"),
            KeyError::Cipher(e) => write!(f, "{e}"),
            KeyError::NoEspSuite => f.write_str("no ESP suite for the selected transforms"),
        }
    }
}

impl std::error::Error for KeyError {}

impl From<PrfPlusError> for KeyError {
    fn from(e: PrfPlusError) -> Self {
        KeyError::PrfPlus(e)
    }
}
impl From<IkeCipherError> for KeyError {
    fn from(e: IkeCipherError) -> Self {
        KeyError::Cipher(e)
    }
}

/// SKEYSEED = prf(Ni | Nr, g^ir) (§2.14). With HMAC PRFs the whole of
/// Ni | Nr is the key (only fixed-key-size PRFs like AES-XCBC truncate it).
pub fn skeyseed(prf: Prf, ni: &[u8], nr: &[u8], g_ir: &[u8]) -> PrfOutput {
    let mut key = SecretBytes::zeroed(ni.len() + nr.len());
    key.as_mut_slice()[..ni.len()].copy_from_slice(ni);
    key.as_mut_slice()[ni.len()..].copy_from_slice(nr);
    prf.prf(key.as_slice(), g_ir)
}

/// prf+(SKEYSEED, Ni | Nr | SPIi | SPIr), `len` octets (§2.14).
pub fn ike_keymat(
    prf: Prf,
    skeyseed: &[u8],
    ni: &[u8],
    nr: &[u8],
    spi_i: u64,
    spi_r: u64,
    len: usize,
) -> Result<SecretBytes, PrfPlusError> {
    prf.prf_plus_parts(
        skeyseed,
        &[ni, nr, &spi_i.to_be_bytes(), &spi_r.to_be_bytes()],
        len,
    )
}

/// Child SA KEYMAT = prf+(SK_d, [g^ir (new) |] Ni | Nr), `len` octets (§2.17).
pub fn child_keymat(
    prf: Prf,
    sk_d: &[u8],
    g_ir_new: Option<&[u8]>,
    ni: &[u8],
    nr: &[u8],
    len: usize,
) -> Result<SecretBytes, PrfPlusError> {
    match g_ir_new {
        Some(g) => prf.prf_plus_parts(sk_d, &[g, ni, nr], len),
        None => prf.prf_plus_parts(sk_d, &[ni, nr], len),
    }
}

/// SKEYSEED for a rekeyed IKE SA = prf(SK_d (old), g^ir (new) | Ni | Nr) (§2.18).
pub fn rekey_skeyseed(
    prf: Prf,
    sk_d_old: &[u8],
    g_ir_new: &[u8],
    ni: &[u8],
    nr: &[u8],
) -> PrfOutput {
    prf.prf_parts(sk_d_old, &[g_ir_new, ni, nr])
}

/// The keys of one IKE SA, as the prf+ stream cut them (§2.14), in one
/// wiped buffer:
///
/// ```text
/// SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr
///                                        └ dropped by forget_auth_keys ┘
/// ```
///
/// The SK payload ciphers are built from their keys for each message
/// ([`IkeKeys::cipher_i`], [`IkeKeys::cipher_r`]) instead of living with
/// the SA: a cipher context (aws-lc's expanded AES key and GHASH table)
/// is about 600 bytes, twice per IKE SA, for an SA that sends a message
/// every few minutes at most once it is up, while building one costs a
/// fraction of a microsecond. SK_pi and SK_pr serve only the AUTH payloads
/// of IKE_AUTH (§2.15; an IKE SA made by a rekey never authenticates), so
/// the SA drops them once authenticated.
pub struct IkeKeys {
    /// The negotiated PRF.
    pub prf: Prf,
    encr: IkeEncr,
    integ: Option<Integ>,
    stream: SecretBytes,
}

impl core::fmt::Debug for IkeKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IkeKeys")
            .field("prf", &self.prf)
            .field("encr", &self.encr)
            .field("integ", &self.integ)
            .finish_non_exhaustive()
    }
}

impl IkeKeys {
    /// Derive all keys of a new IKE SA from the IKE_SA_INIT outcome.
    pub fn derive(
        suite: &Selected,
        ni: &[u8],
        nr: &[u8],
        g_ir: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, KeyError> {
        let prf = suite.prf.ok_or(KeyError::NoPrf)?;
        let seed = skeyseed(prf, ni, nr, g_ir);
        Self::from_skeyseed(
            prf,
            suite.encr,
            suite.integ,
            seed.as_slice(),
            ni,
            nr,
            spi_i,
            spi_r,
        )
    }

    /// Keys of an IKE SA made by a rekey (§2.18): "SKEYSEED for the new
    /// IKE SA is computed using SK_d from the existing IKE SA as follows:
    /// SKEYSEED = prf(SK_d (old), g^ir (new) | Ni | Nr) [...] it is the old
    /// IKE SA's PRF that is used to generate SKEYSEED", and the rest "as
    /// specified in Section 2.14, using SPIi, SPIr, Ni, and Nr from the new
    /// exchange, and using the new IKE SA's PRF."
    #[allow(clippy::too_many_arguments)]
    pub fn derive_rekey(
        old_prf: Prf,
        old_sk_d: &[u8],
        suite: &Selected,
        ni: &[u8],
        nr: &[u8],
        g_ir: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, KeyError> {
        let prf = suite.prf.ok_or(KeyError::NoPrf)?;
        let seed = rekey_skeyseed(old_prf, old_sk_d, g_ir, ni, nr);
        Self::from_skeyseed(
            prf,
            suite.encr,
            suite.integ,
            seed.as_slice(),
            ni,
            nr,
            spi_i,
            spi_r,
        )
    }

    /// prf+(SKEYSEED, …), long enough for the seven keys (§2.14 order).
    #[allow(clippy::too_many_arguments)]
    pub fn from_skeyseed(
        prf: Prf,
        encr: IkeEncr,
        integ: Option<Integ>,
        skeyseed: &[u8],
        ni: &[u8],
        nr: &[u8],
        spi_i: u64,
        spi_r: u64,
    ) -> Result<Self, KeyError> {
        // What `IkeCipher::new` would refuse for any keys, checked once
        // here rather than on the first message.
        if encr.is_aead() == integ.is_some() {
            return Err(KeyError::Cipher(IkeCipherError::IntegMismatch));
        }
        let mut k = IkeKeys {
            prf,
            encr,
            integ,
            stream: SecretBytes::zeroed(0),
        };
        k.stream = ike_keymat(prf, skeyseed, ni, nr, spi_i, spi_r, k.len_with_auth())?;
        Ok(k)
    }

    fn len_a(&self) -> usize {
        self.integ.map_or(0, Integ::key_len)
    }

    /// Octets of SK_d ‖ SK_ai ‖ SK_ar ‖ SK_ei ‖ SK_er.
    fn len_without_auth(&self) -> usize {
        self.prf.key_len() + 2 * self.len_a() + 2 * self.encr.key_len()
    }

    fn len_with_auth(&self) -> usize {
        self.len_without_auth() + 2 * self.prf.key_len()
    }

    /// `n` octets of the stream from `at` (empty if the stream is shorter,
    /// which only SK_pi/SK_pr can be, after `forget_auth_keys`).
    fn part(&self, at: usize, n: usize) -> &[u8] {
        self.stream.as_slice().get(at..at + n).unwrap_or_default()
    }

    /// SK_d, for Child SA KEYMAT and rekeying (§2.17, §2.18).
    pub fn sk_d(&self) -> &[u8] {
        self.part(0, self.prf.key_len())
    }

    /// SK_pi, for the initiator's AUTH (§2.15); `None` once forgotten.
    pub fn sk_pi(&self) -> Option<&[u8]> {
        let p = self.prf.key_len();
        let k = self.part(self.len_without_auth(), p);
        (k.len() == p).then_some(k)
    }

    /// SK_pr, for the responder's AUTH; `None` once forgotten.
    pub fn sk_pr(&self) -> Option<&[u8]> {
        let p = self.prf.key_len();
        let k = self.part(self.len_without_auth() + p, p);
        (k.len() == p).then_some(k)
    }

    /// Drop SK_pi and SK_pr (wiped): IKE_AUTH is over.
    pub fn forget_auth_keys(&mut self) {
        let n = self.len_without_auth();
        if self.stream.len() > n {
            // A new buffer rather than a truncation: the old one is wiped
            // whole when dropped, and the new one is exactly as long.
            self.stream = SecretBytes::from_slice(self.part(0, n));
        }
    }

    /// The cipher protecting what the original initiator sends (SK_ei,
    /// SK_ai), built now.
    pub fn cipher_i(&self) -> Result<IkeCipher, IkeCipherError> {
        let (d, a, e) = (self.prf.key_len(), self.len_a(), self.encr.key_len());
        let sk_ai = self.part(d, a);
        let sk_ei = self.part(d + 2 * a, e);
        IkeCipher::new(self.encr, self.integ, sk_ei, sk_ai)
    }

    /// The cipher protecting what the original responder sends (SK_er,
    /// SK_ar), built now.
    pub fn cipher_r(&self) -> Result<IkeCipher, IkeCipherError> {
        let (d, a, e) = (self.prf.key_len(), self.len_a(), self.encr.key_len());
        let sk_ar = self.part(d + a, a);
        let sk_er = self.part(d + 2 * a + e, e);
        IkeCipher::new(self.encr, self.integ, sk_er, sk_ar)
    }

    /// Heap octets these keys hold (the memory table in the crate essay).
    pub fn heap_len(&self) -> usize {
        self.stream.len()
    }
}

/// The ESP suite for a selected ESP proposal.
pub fn esp_suite(s: &Selected) -> Option<EspSuite> {
    match (s.encr, s.integ) {
        (IkeEncr::AesGcm16 { key_bits: 128 }, None) => Some(EspSuite::Aes128Gcm16),
        (IkeEncr::AesGcm16 { key_bits: 256 }, None) => Some(EspSuite::Aes256Gcm16),
        (IkeEncr::ChaCha20Poly1305, None) => Some(EspSuite::ChaCha20Poly1305),
        (IkeEncr::AesCbc { key_bits }, Some(integ)) => Some(EspSuite::AesCbc { key_bits, integ }),
        _ => None,
    }
}

/// Child SA keys, by direction (§2.17).
pub struct ChildKeys {
    /// Keys for traffic from the original initiator of the exchange to the responder.
    pub i_to_r: SecretBytes,
    /// Keys for traffic from the responder to the initiator.
    pub r_to_i: SecretBytes,
}

impl ChildKeys {
    /// Derive KEYMAT for `suite` and cut it in two. `ni`/`nr` are the
    /// nonces of the exchange that creates the Child SA (IKE_SA_INIT's for
    /// the first one, CREATE_CHILD_SA's otherwise).
    pub fn derive(
        prf: Prf,
        sk_d: &[u8],
        suite: EspSuite,
        g_ir_new: Option<&[u8]>,
        ni: &[u8],
        nr: &[u8],
    ) -> Result<Self, KeyError> {
        let n = suite.keymat_len();
        let km = child_keymat(prf, sk_d, g_ir_new, ni, nr, 2 * n)?;
        let (a, b) = km.as_slice().split_at(n);
        Ok(ChildKeys {
            i_to_r: SecretBytes::from_slice(a),
            r_to_i: SecretBytes::from_slice(b),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_crypto::ike::KeGroup;

    fn suite(encr: IkeEncr, integ: Option<Integ>) -> Selected {
        Selected {
            number: 1,
            spi: esparto_wire::ike::Spi::None,
            encr,
            prf: Some(Prf::HmacSha256),
            integ,
            ke: Some(KeGroup::Curve25519),
            esn: false,
            ake: Default::default(),
        }
    }

    #[test]
    fn both_sides_derive_the_same_keys_and_directions_differ() {
        let (ni, nr, g) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        for (e, i) in [
            (IkeEncr::AesGcm16 { key_bits: 256 }, None),
            (IkeEncr::ChaCha20Poly1305, None),
            (
                IkeEncr::AesCbc { key_bits: 128 },
                Some(Integ::HmacSha256_128),
            ),
        ] {
            let a = IkeKeys::derive(&suite(e, i), &ni, &nr, &g, 7, 9).unwrap();
            let mut b = IkeKeys::derive(&suite(e, i), &ni, &nr, &g, 7, 9).unwrap();
            assert!(a.sk_d() == b.sk_d() && a.sk_pi() == b.sk_pi() && a.sk_pr() == b.sk_pr());
            assert!(a.sk_pi() != a.sk_pr());
            assert_eq!(a.sk_d().len(), 32);
            assert_eq!(a.sk_pi().unwrap().len(), 32);
            // §2.14: the stream is SK_d | SK_ai | SK_ar | SK_ei | SK_er | SK_pi | SK_pr.
            let (ai, ei) = (i.map_or(0, Integ::key_len), e.key_len());
            let len = 32 + 2 * ai + 2 * ei + 64;
            let seed = skeyseed(Prf::HmacSha256, &ni, &nr, &g);
            let stream = ike_keymat(Prf::HmacSha256, seed.as_slice(), &ni, &nr, 7, 9, len).unwrap();
            let stream = stream.as_slice();
            assert_eq!(a.sk_d(), &stream[..32]);
            assert_eq!(a.sk_pi().unwrap(), &stream[len - 64..len - 32]);
            assert_eq!(a.sk_pr().unwrap(), &stream[len - 32..]);
            // Forgetting the AUTH keys keeps the others.
            b.forget_auth_keys();
            assert_eq!((b.sk_pi(), b.sk_pr()), (None, None));
            assert_eq!(b.sk_d(), a.sk_d());
            assert_eq!(b.heap_len(), len - 64);
            b.forget_auth_keys();
            assert_eq!(b.heap_len(), len - 64);
            let (ci, cr) = (a.cipher_i().unwrap(), b.cipher_r().unwrap());
            let bi = b.cipher_i().unwrap();
            // A message sealed with the initiator's cipher opens only with it.
            let layout = esparto_wire::ike::SkLayout {
                iv_len: ci.iv_len(),
                icv_len: ci.icv_len(),
                block_size: ci.block_size(),
            };
            let h = esparto_wire::ike::HeaderRepr {
                spi_i: 7,
                spi_r: 9,
                next_payload: esparto_wire::ike::PayloadType::NONE,
                exchange: esparto_wire::ike::ExchangeType::INFORMATIONAL,
                initiator: true,
                response: false,
                message_id: 2,
                length: 0,
            };
            let mut msg = Vec::new();
            let off = esparto_wire::ike::emit_encrypted(&h, &[], &layout, &mut msg).unwrap();
            ci.seal_sk(&mut msg, off, 1).unwrap();
            let mut copy = msg.clone();
            assert!(cr.open_sk(&mut copy, off).is_err());
            assert!(bi.open_sk(&mut msg, off).is_ok());
        }
    }

    #[test]
    fn rekeyed_ike_sa_seeds_with_the_old_prf_and_keys_with_the_new() {
        // §2.18: SKEYSEED with the old SA's PRF and SK_d; the rest with
        // the new suite's PRF, the new nonces and SPIs.
        let (ni, nr, g) = ([4u8; 32], [5u8; 32], [6u8; 32]);
        let old =
            IkeKeys::derive(&suite(IkeEncr::ChaCha20Poly1305, None), &ni, &nr, &g, 1, 2).unwrap();
        let mut new_suite = suite(IkeEncr::AesGcm16 { key_bits: 128 }, None);
        new_suite.prf = Some(Prf::HmacSha512);
        let (ni2, nr2, g2) = ([7u8; 32], [8u8; 32], [9u8; 32]);
        let k = IkeKeys::derive_rekey(
            Prf::HmacSha256,
            old.sk_d(),
            &new_suite,
            &ni2,
            &nr2,
            &g2,
            11,
            12,
        )
        .unwrap();
        let seed = rekey_skeyseed(Prf::HmacSha256, old.sk_d(), &g2, &ni2, &nr2);
        assert_eq!(seed.as_slice().len(), 32, "the old (SHA-256) PRF made it");
        let stream = ike_keymat(Prf::HmacSha512, seed.as_slice(), &ni2, &nr2, 11, 12, 64).unwrap();
        assert_eq!(
            k.sk_d(),
            stream.as_slice(),
            "SK_d = first prf+ block of the new PRF"
        );
        assert_eq!(k.prf, Prf::HmacSha512);
        assert!(k.sk_d() != old.sk_d());
        // Different SPIs, different keys.
        let k2 = IkeKeys::derive_rekey(
            Prf::HmacSha256,
            old.sk_d(),
            &new_suite,
            &ni2,
            &nr2,
            &g2,
            11,
            13,
        )
        .unwrap();
        assert!(k2.sk_d() != k.sk_d());
    }

    #[test]
    fn child_keys_split_by_direction() {
        let k = ChildKeys::derive(
            Prf::HmacSha256,
            &[5; 32],
            EspSuite::Aes256Gcm16,
            None,
            &[1; 32],
            &[2; 32],
        )
        .unwrap();
        assert_eq!(k.i_to_r.len(), 36);
        assert_eq!(k.r_to_i.len(), 36);
        let whole = child_keymat(Prf::HmacSha256, &[5; 32], None, &[1; 32], &[2; 32], 72).unwrap();
        assert_eq!(k.i_to_r.as_slice(), &whole.as_slice()[..36]);
        assert_eq!(k.r_to_i.as_slice(), &whole.as_slice()[36..]);
        let pfs = ChildKeys::derive(
            Prf::HmacSha256,
            &[5; 32],
            EspSuite::Aes256Gcm16,
            Some(&[9; 32]),
            &[1; 32],
            &[2; 32],
        )
        .unwrap();
        assert!(pfs.i_to_r != k.i_to_r);
    }
}
