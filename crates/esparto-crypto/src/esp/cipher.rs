//! [`EspCipher`]: seal and open one ESP packet in place.
//!
//! Per packet this is the whole cryptographic cost of the data plane, so it
//! is written for the inner loop: keys are expanded in [`EspCipher::new`];
//! [`EspCipher::seal`] and [`EspCipher::open`] split the caller's buffer
//! into header, IV, payload and ICV with `split_at_mut`, build the nonce
//! and the AAD in stack arrays, and hand the payload to aws-lc in place.
//!
//! What is authenticated (RFC 4303 §2.2.1, §3.3.2.1):
//!
//! * AEADs (RFC 4106 §5, RFC 7634 §2.1): AAD = SPI ‖ Seq, or with Extended
//!   Sequence Numbers SPI ‖ Seq-hi ‖ Seq-lo, where the high word is never
//!   transmitted. The IV is not in the AAD; it is part of the nonce.
//! * AES-CBC + HMAC (encrypt-then-MAC): ICV = HMAC(SPI ‖ Seq ‖ IV ‖
//!   ciphertext), and with ESN the high word is appended after the
//!   ciphertext for the computation only.
//!
//! `open` takes the IV from the packet (a peer may choose its IVs freely),
//! and the low 32 bits of the sequence number from the header; the `seq`
//! argument contributes only its high word, and only when ESN is in use —
//! it is the receiver's reconstruction of the full number (RFC 4303
//! Appendix A).

use core::ops::Range;

use esparto_wire::esp::{HEADER_LEN, field};

use crate::primitive::{AEAD_IV_LEN, AEAD_TAG_LEN, AES_BLOCK, AeadAlg, AesCbc, Hmac, SaltedAead};

use super::{EspSuite, IcvError, KeyLengthError, SealError};

/// One direction's ESP keys, ready for per-packet use. Key material we hold
/// is wiped when the cipher is dropped (the aws-lc key objects clean up
/// their own state).
pub struct EspCipher {
    suite: EspSuite,
    keys: Keys,
}

enum Keys {
    Aead(SaltedAead),
    /// Boxed: three expanded AES schedules plus an HMAC context are ~2.7 KB,
    /// and the slow suite can afford one pointer chase.
    Cbc(Box<CbcKeys>),
}

struct CbcKeys {
    cbc: AesCbc,
    hmac: Hmac,
}

impl core::fmt::Debug for EspCipher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EspCipher")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

impl EspCipher {
    /// Builds the cipher for `suite` from one direction's KEYMAT, laid out
    /// as RFC 7296 §2.17 takes it: encryption key (with the 4-byte salt
    /// appended for GCM and ChaCha20-Poly1305), then the integrity key.
    ///
    /// Fails if `keymat.len() != suite.keymat_len()`. A hand-built
    /// `AesCbc` suite whose `key_bits` is neither 128 nor 256 has no valid
    /// key length and is rejected with `expected: 0`.
    pub fn new(suite: EspSuite, keymat: &[u8]) -> Result<Self, KeyLengthError> {
        let err = KeyLengthError {
            expected: suite.keymat_len(),
            got: keymat.len(),
        };
        if keymat.len() != suite.keymat_len() {
            return Err(err);
        }
        let keys = match suite {
            EspSuite::Aes128Gcm16 => Keys::Aead(aead(AeadAlg::Aes128Gcm, keymat, err)?),
            EspSuite::Aes256Gcm16 => Keys::Aead(aead(AeadAlg::Aes256Gcm, keymat, err)?),
            EspSuite::ChaCha20Poly1305 => Keys::Aead(aead(AeadAlg::ChaCha20Poly1305, keymat, err)?),
            EspSuite::AesCbc { key_bits, integ } => {
                let (ek, ik) = keymat.split_at(suite.encr_key_len());
                let bad = KeyLengthError {
                    expected: 0,
                    got: keymat.len(),
                };
                if key_bits != 128 && key_bits != 256 {
                    return Err(bad);
                }
                Keys::Cbc(Box::new(CbcKeys {
                    cbc: AesCbc::new(ek).ok_or(bad)?,
                    hmac: Hmac::new(integ, ik),
                }))
            }
        };
        Ok(EspCipher { suite, keys })
    }

    /// The suite these keys are for.
    pub fn suite(&self) -> EspSuite {
        self.suite
    }

    /// Seals one ESP packet in place. `packet` is the whole ESP packet as it
    /// goes on the wire (the UDP payload for ESP-in-UDP):
    ///
    /// `[SPI 4][Seq 4][IV iv_len][payload: plaintext incl. padding, pad len, next header][ICV icv_len]`
    ///
    /// The caller has written the SPI, the low 32 bits of `seq`, and the
    /// padded plaintext; `seal` writes the IV, encrypts the payload and
    /// writes the ICV. `seq` is the full 64-bit sequence number; `esn` says
    /// whether Extended Sequence Numbers are in use (then the high word is
    /// authenticated but not sent, RFC 4303 §2.2.1).
    ///
    /// IVs: the AEADs use `seq` itself as the 8-byte IV (RFC 4106 §3.1: the
    /// IV must not repeat under a key, and an SA never reuses a sequence
    /// number). AES-CBC uses `AES-ECB_K(seq ‖ 0)`, unpredictable without
    /// the key (NIST SP 800-38A Appendix C, RFC 3602 §2.4).
    ///
    /// Errors only on a caller bug: a buffer too short for header, IV, a
    /// non-empty payload and ICV, or a payload that is not a multiple of
    /// [`EspSuite::block_size`].
    #[inline]
    pub fn seal(&self, seq: u64, esn: bool, packet: &mut [u8]) -> Result<(), SealError> {
        debug_assert!(
            packet.len() < HEADER_LEN || packet[field::SEQ] == (seq as u32).to_be_bytes(),
            "the header's sequence number must be the low 32 bits of `seq`"
        );
        let seq_hi = esn.then_some((seq >> 32) as u32);
        match &self.keys {
            Keys::Aead(aead) => seal_aead(aead, &seq.to_be_bytes(), seq_hi, packet),
            Keys::Cbc(k) => seal_cbc(&k.cbc, &k.hmac, &k.cbc.derive_iv(seq), seq_hi, packet),
        }
    }

    /// Verifies and decrypts one ESP packet in place. `packet` is laid out
    /// as for [`EspCipher::seal`], as received. Returns the range of the
    /// decrypted payload (padding, pad length and next header included; the
    /// ESP layer checks them) within `packet`.
    ///
    /// `seq` is the full sequence number the receiver reconstructed
    /// (RFC 4303 Appendix A); only its high word is used, and only when
    /// `esn` is set. The ICV is checked in constant time before anything is
    /// decrypted or returned; on failure the payload bytes are unspecified.
    #[inline]
    pub fn open(&self, seq: u64, esn: bool, packet: &mut [u8]) -> Result<Range<usize>, IcvError> {
        let seq_hi = esn.then_some((seq >> 32) as u32);
        match &self.keys {
            Keys::Aead(aead) => open_aead(aead, seq_hi, packet),
            Keys::Cbc(k) => open_cbc(&k.cbc, &k.hmac, seq_hi, packet),
        }
    }
}

fn aead(alg: AeadAlg, keymat: &[u8], err: KeyLengthError) -> Result<SaltedAead, KeyLengthError> {
    SaltedAead::new(alg, keymat).ok_or(err)
}

/// AAD for the AEADs: SPI ‖ [Seq-hi] ‖ Seq-lo (RFC 4106 §5, RFC 7634 §2.1).
/// Returns the buffer and the used length.
#[inline(always)]
fn esp_aad(header: &[u8], seq_hi: Option<u32>) -> ([u8; 12], usize) {
    let mut aad = [0u8; 12];
    match seq_hi {
        None => {
            aad[..HEADER_LEN].copy_from_slice(&header[..HEADER_LEN]);
            (aad, HEADER_LEN)
        }
        Some(hi) => {
            aad[..4].copy_from_slice(&header[field::SPI]);
            aad[4..8].copy_from_slice(&hi.to_be_bytes());
            aad[8..12].copy_from_slice(&header[field::SEQ]);
            (aad, 12)
        }
    }
}

/// Seals with an explicit 8-byte IV (the public path passes the sequence
/// number; the RFC 7634 known-answer test passes the RFC's IV).
#[inline(always)]
fn seal_aead(
    aead: &SaltedAead,
    iv: &[u8; AEAD_IV_LEN],
    seq_hi: Option<u32>,
    packet: &mut [u8],
) -> Result<(), SealError> {
    // Smallest payload: pad length + next header, aligned to 4.
    let min = HEADER_LEN + AEAD_IV_LEN + 4 + AEAD_TAG_LEN;
    if packet.len() < min {
        return Err(SealError::TooShort {
            min,
            got: packet.len(),
        });
    }
    let payload_len = packet.len() - HEADER_LEN - AEAD_IV_LEN - AEAD_TAG_LEN;
    if payload_len % 4 != 0 {
        return Err(SealError::Misaligned {
            block_size: 4,
            len: payload_len,
        });
    }
    let (header, rest) = packet.split_at_mut(HEADER_LEN);
    let (iv_field, rest) = rest.split_at_mut(AEAD_IV_LEN);
    let (payload, icv) = rest.split_at_mut(payload_len);
    iv_field.copy_from_slice(iv);
    let (aad, aad_len) = esp_aad(header, seq_hi);
    aead.seal(iv, &aad[..aad_len], payload, icv)
        .map_err(|()| SealError::Backend)
}

#[inline(always)]
fn open_aead(
    aead: &SaltedAead,
    seq_hi: Option<u32>,
    packet: &mut [u8],
) -> Result<Range<usize>, IcvError> {
    let len = packet.len();
    if len < HEADER_LEN + AEAD_IV_LEN + AEAD_TAG_LEN {
        return Err(IcvError);
    }
    let (header, rest) = packet.split_at_mut(HEADER_LEN);
    let (iv_field, ct_and_tag) = rest.split_at_mut(AEAD_IV_LEN);
    let mut iv = [0u8; AEAD_IV_LEN];
    iv.copy_from_slice(iv_field);
    let (aad, aad_len) = esp_aad(header, seq_hi);
    aead.open(&iv, &aad[..aad_len], ct_and_tag)
        .map_err(|()| IcvError)?;
    Ok(HEADER_LEN + AEAD_IV_LEN..len - AEAD_TAG_LEN)
}

#[inline(always)]
fn seal_cbc(
    cbc: &AesCbc,
    hmac: &Hmac,
    iv: &[u8; AES_BLOCK],
    seq_hi: Option<u32>,
    packet: &mut [u8],
) -> Result<(), SealError> {
    let icv_len = hmac.icv_len();
    let min = HEADER_LEN + AES_BLOCK + AES_BLOCK + icv_len;
    if packet.len() < min {
        return Err(SealError::TooShort {
            min,
            got: packet.len(),
        });
    }
    let len = packet.len();
    let payload_len = len - HEADER_LEN - AES_BLOCK - icv_len;
    if payload_len % AES_BLOCK != 0 {
        return Err(SealError::Misaligned {
            block_size: AES_BLOCK,
            len: payload_len,
        });
    }
    let (authed, icv) = packet.split_at_mut(len - icv_len);
    let (head, payload) = authed.split_at_mut(HEADER_LEN + AES_BLOCK);
    head[HEADER_LEN..].copy_from_slice(iv);
    cbc.encrypt(iv, payload).map_err(|()| SealError::Backend)?;
    // Encrypt-then-MAC over SPI ‖ Seq ‖ IV ‖ ciphertext (RFC 4303 §3.3.2),
    // with the ESN high word appended for the computation only (§3.3.2.1).
    let hi = seq_hi.map(u32::to_be_bytes);
    hmac.sign(authed, hi.as_ref().map_or(&[][..], |h| &h[..]), icv);
    Ok(())
}

#[inline(always)]
fn open_cbc(
    cbc: &AesCbc,
    hmac: &Hmac,
    seq_hi: Option<u32>,
    packet: &mut [u8],
) -> Result<Range<usize>, IcvError> {
    let icv_len = hmac.icv_len();
    let len = packet.len();
    if len < HEADER_LEN + AES_BLOCK + AES_BLOCK + icv_len
        || (len - HEADER_LEN - AES_BLOCK - icv_len) % AES_BLOCK != 0
    {
        return Err(IcvError);
    }
    let (authed, icv) = packet.split_at_mut(len - icv_len);
    let hi = seq_hi.map(u32::to_be_bytes);
    // RFC 4303 §3.4.4.1: verify the ICV before decrypting.
    if !hmac.verify(authed, hi.as_ref().map_or(&[][..], |h| &h[..]), icv) {
        return Err(IcvError);
    }
    let (head, payload) = authed.split_at_mut(HEADER_LEN + AES_BLOCK);
    let mut iv = [0u8; AES_BLOCK];
    iv.copy_from_slice(&head[HEADER_LEN..]);
    cbc.decrypt(&iv, payload).map_err(|()| IcvError)?;
    Ok(HEADER_LEN + AES_BLOCK..len - icv_len)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::esp::Integ;
    use crate::rand::{DeterministicRng, Rng};
    use crate::test_vectors::{Vectors, hex};
    use proptest::prelude::*;

    fn keymat(suite: EspSuite, seed: u64) -> Vec<u8> {
        let mut k = vec![0u8; suite.keymat_len()];
        DeterministicRng::new(seed).fill_secret(&mut k);
        k
    }

    /// Lays out an ESP packet around `payload_len` bytes of plaintext.
    fn packet(suite: EspSuite, spi: u32, seq: u64, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&spi.to_be_bytes());
        p.extend_from_slice(&(seq as u32).to_be_bytes());
        p.extend_from_slice(&vec![0u8; suite.iv_len()]);
        p.extend_from_slice(payload);
        p.extend_from_slice(&vec![0u8; suite.icv_len()]);
        p
    }

    fn payload(suite: EspSuite, n_blocks: usize) -> Vec<u8> {
        (0..suite.block_size() * n_blocks)
            .map(|i| i as u8)
            .collect()
    }

    #[test]
    fn rfc7634_esp_example_opens() {
        let v = Vectors::load(include_str!(
            "../../tests/vectors/rfc7634_chacha20poly1305.txt"
        ));
        let c = v.case("rfc7634-esp");
        let cipher = EspCipher::new(EspSuite::ChaCha20Poly1305, &hex(c.get("keymat"))).unwrap();
        let mut pkt = hex(c.get("packet"));
        let range = cipher.open(5, false, &mut pkt).unwrap();
        assert_eq!(range, 16..pkt.len() - 16);
        assert_eq!(&pkt[range], &hex(c.get("plain"))[..]);
        // Same packet with ESN claimed: the AAD grows by the high word, so
        // it must not verify.
        let mut pkt = hex(c.get("packet"));
        assert_eq!(cipher.open(5, true, &mut pkt), Err(IcvError));
    }

    #[test]
    fn rfc7634_esp_example_seals_with_its_iv() {
        let v = Vectors::load(include_str!(
            "../../tests/vectors/rfc7634_chacha20poly1305.txt"
        ));
        let c = v.case("rfc7634-esp");
        let cipher = EspCipher::new(EspSuite::ChaCha20Poly1305, &hex(c.get("keymat"))).unwrap();
        let Keys::Aead(aead) = &cipher.keys else {
            panic!()
        };
        let mut pkt = hex(c.get("spi"));
        pkt.extend_from_slice(&hex(c.get("seq")));
        pkt.extend_from_slice(&[0; 8]);
        pkt.extend_from_slice(&hex(c.get("plain")));
        pkt.extend_from_slice(&[0; 16]);
        let iv: [u8; 8] = hex(c.get("iv")).try_into().unwrap();
        seal_aead(aead, &iv, None, &mut pkt).unwrap();
        assert_eq!(pkt, hex(c.get("packet")));
    }

    /// Packets sealed by an independent (Python/OpenSSL) implementation of
    /// the same conventions, ESN included: seal must match byte for byte,
    /// and open must recover the payload.
    #[test]
    fn matches_independent_implementation() {
        let v = Vectors::load(include_str!("../../tests/vectors/esp_independent.txt"));
        let mut n = 0;
        for c in v.cases() {
            let suite = EspSuite::from_proposal(c.get("suite")).unwrap();
            let cipher = EspCipher::new(suite, &hex(c.get("keymat"))).unwrap();
            let seq = u64::from_str_radix(c.get("seq"), 16).unwrap();
            let esn = c.get("esn") == "true";
            let want = hex(c.get("packet"));
            let payload = hex(c.get("payload"));
            let mut p = want[..8].to_vec();
            p.extend_from_slice(&vec![0u8; suite.iv_len()]);
            p.extend_from_slice(&payload);
            p.extend_from_slice(&vec![0u8; suite.icv_len()]);
            cipher.seal(seq, esn, &mut p).unwrap();
            assert_eq!(p, want, "{}", c.name());
            let r = cipher.open(seq, esn, &mut p).unwrap();
            assert_eq!(&p[r], &payload[..], "{}", c.name());
            n += 1;
        }
        assert_eq!(n, 9);
    }

    /// RFC 3602 cases 5-8 are ESP packets with NULL authentication; our CBC
    /// suites always carry HMAC, so check the ESP framing (IV after the
    /// header, ciphertext up to the end) through the CBC half of the cipher.
    #[test]
    fn rfc3602_esp_packets_through_cbc_half() {
        let v = Vectors::load(include_str!("../../tests/vectors/rfc3602_aes_cbc.txt"));
        let mut n = 0;
        for c in v.cases().filter(|c| c.has("packet")) {
            let suite = EspSuite::AesCbc {
                key_bits: 128,
                integ: Integ::HmacSha256_128,
            };
            let mut km = hex(c.get("key"));
            km.extend_from_slice(&[0x55; 32]);
            let cipher = EspCipher::new(suite, &km).unwrap();
            let Keys::Cbc(k) = &cipher.keys else { panic!() };
            let cbc = &k.cbc;
            let pkt = hex(c.get("packet"));
            let iv: [u8; 16] = pkt[8..24].try_into().unwrap();
            let mut body = pkt[24..].to_vec();
            cbc.decrypt(&iv, &mut body).unwrap();
            assert_eq!(body, hex(c.get("plain")), "{}", c.name());
            cbc.encrypt(&iv, &mut body).unwrap();
            assert_eq!(body, &pkt[24..], "{}", c.name());
            n += 1;
        }
        assert_eq!(n, 4);
    }

    #[test]
    fn round_trip_every_suite_with_and_without_esn() {
        for suite in EspSuite::ALL {
            let cipher = EspCipher::new(suite, &keymat(suite, 1)).unwrap();
            for esn in [false, true] {
                for seq in [1u64, 0xffff_ffff, 0x1_0000_0000, 0xdead_beef_0000_0001] {
                    for blocks in [1, 2, 17, 90] {
                        let plain = payload(suite, blocks);
                        let mut pkt = packet(suite, 0x1234_5678, seq, &plain);
                        cipher.seal(seq, esn, &mut pkt).unwrap();
                        assert_ne!(&pkt[8 + suite.iv_len()..][..plain.len()], &plain[..]);
                        let r = cipher.open(seq, esn, &mut pkt).unwrap();
                        assert_eq!(&pkt[r], &plain[..], "{suite} esn={esn} seq={seq:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn flipped_bit_anywhere_fails_open() {
        for suite in EspSuite::ALL {
            let cipher = EspCipher::new(suite, &keymat(suite, 2)).unwrap();
            let seq = 0x0000_0007_0000_0042;
            let plain = payload(suite, 3);
            let mut sealed = packet(suite, 0xabcd_0001, seq, &plain);
            cipher.seal(seq, true, &mut sealed).unwrap();
            for byte in 0..sealed.len() {
                for bit in [0, 7] {
                    let mut p = sealed.clone();
                    p[byte] ^= 1 << bit;
                    assert_eq!(
                        cipher.open(seq, true, &mut p),
                        Err(IcvError),
                        "{suite} byte {byte}"
                    );
                }
            }
            // The ESN high word is authenticated though never sent.
            for wrong_hi in [seq ^ (1 << 32), seq ^ (1 << 63), seq & 0xffff_ffff] {
                let mut p = sealed.clone();
                assert_eq!(
                    cipher.open(wrong_hi, true, &mut p),
                    Err(IcvError),
                    "{suite}"
                );
            }
            let mut p = sealed.clone();
            assert!(cipher.open(seq, true, &mut p).is_ok());
        }
    }

    #[test]
    fn without_esn_the_high_word_is_not_authenticated() {
        for suite in EspSuite::ALL {
            let cipher = EspCipher::new(suite, &keymat(suite, 3)).unwrap();
            let mut p = packet(suite, 1, 9, &payload(suite, 1));
            cipher.seal(9, false, &mut p).unwrap();
            assert!(cipher.open(9 | (5 << 32), false, &mut p).is_ok(), "{suite}");
        }
    }

    #[test]
    fn aead_iv_is_the_sequence_number() {
        let suite = EspSuite::Aes256Gcm16;
        let cipher = EspCipher::new(suite, &keymat(suite, 4)).unwrap();
        let seq = 0x0102_0304_0506_0708;
        let mut p = packet(suite, 1, seq, &payload(suite, 2));
        cipher.seal(seq, true, &mut p).unwrap();
        assert_eq!(p[8..16], seq.to_be_bytes());
    }

    #[test]
    fn cbc_iv_is_unpredictable_and_distinct() {
        let suite = EspSuite::AesCbc {
            key_bits: 128,
            integ: Integ::HmacSha1_96,
        };
        let cipher = EspCipher::new(suite, &keymat(suite, 5)).unwrap();
        let mut ivs = std::collections::HashSet::new();
        for seq in 1..200u64 {
            let mut p = packet(suite, 1, seq, &payload(suite, 1));
            cipher.seal(seq, false, &mut p).unwrap();
            let iv = p[8..24].to_vec();
            assert_ne!(
                &iv[..8],
                &seq.to_be_bytes(),
                "IV must not expose the counter"
            );
            assert!(ivs.insert(iv));
        }
        // A different key gives different IVs for the same counter.
        let other = EspCipher::new(suite, &keymat(suite, 6)).unwrap();
        let (mut a, mut b) = (
            packet(suite, 1, 1, &payload(suite, 1)),
            packet(suite, 1, 1, &payload(suite, 1)),
        );
        cipher.seal(1, false, &mut a).unwrap();
        other.seal(1, false, &mut b).unwrap();
        assert_ne!(a[8..24], b[8..24]);
    }

    #[test]
    fn wrong_key_length_is_reported() {
        for suite in EspSuite::ALL {
            let n = suite.keymat_len();
            let e = EspCipher::new(suite, &vec![0; n - 1]).unwrap_err();
            assert_eq!(
                e,
                KeyLengthError {
                    expected: n,
                    got: n - 1
                }
            );
            assert!(EspCipher::new(suite, &vec![0; n + 1]).is_err());
        }
        let bogus = EspSuite::AesCbc {
            key_bits: 100,
            integ: Integ::HmacSha1_96,
        };
        assert!(EspCipher::new(bogus, &vec![0; bogus.keymat_len()]).is_err());
    }

    #[test]
    fn seal_rejects_bad_layouts() {
        for suite in EspSuite::ALL {
            let cipher = EspCipher::new(suite, &keymat(suite, 7)).unwrap();
            let min = 8 + suite.iv_len() + suite.block_size() + suite.icv_len();
            let mut short = vec![0u8; min - 1];
            short[4..8].copy_from_slice(&1u32.to_be_bytes());
            assert!(matches!(
                cipher.seal(1, false, &mut short),
                Err(SealError::TooShort { .. })
            ));
            let mut odd = vec![0u8; min + 1];
            odd[4..8].copy_from_slice(&1u32.to_be_bytes());
            assert!(matches!(
                cipher.seal(1, false, &mut odd),
                Err(SealError::Misaligned { .. })
            ));
            let mut ok = vec![0u8; min];
            ok[4..8].copy_from_slice(&1u32.to_be_bytes());
            assert!(cipher.seal(1, false, &mut ok).is_ok());
        }
    }

    #[test]
    fn keys_differ_between_directions() {
        let suite = EspSuite::Aes128Gcm16;
        let a = EspCipher::new(suite, &keymat(suite, 10)).unwrap();
        let b = EspCipher::new(suite, &keymat(suite, 11)).unwrap();
        let mut p = packet(suite, 1, 1, &payload(suite, 4));
        a.seal(1, false, &mut p).unwrap();
        assert_eq!(b.open(1, false, &mut p), Err(IcvError));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn open_never_panics_on_arbitrary_bytes(
            idx in 0..EspSuite::ALL.len(),
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            seq in any::<u64>(),
            esn in any::<bool>(),
        ) {
            let suite = EspSuite::ALL[idx];
            let cipher = EspCipher::new(suite, &keymat(suite, 20)).unwrap();
            let mut b = bytes;
            // Random bytes essentially never authenticate.
            prop_assert_eq!(cipher.open(seq, esn, &mut b), Err(IcvError));
        }

        #[test]
        fn seal_open_round_trips(
            idx in 0..EspSuite::ALL.len(),
            body in proptest::collection::vec(any::<u8>(), 0..300),
            seq in any::<u64>(),
            esn in any::<bool>(),
            spi in any::<u32>(),
        ) {
            let suite = EspSuite::ALL[idx];
            let cipher = EspCipher::new(suite, &keymat(suite, 21)).unwrap();
            let mut plain = body;
            let bs = suite.block_size();
            plain.resize((plain.len() / bs + 1) * bs, 0);
            let mut p = packet(suite, spi, seq, &plain);
            cipher.seal(seq, esn, &mut p).unwrap();
            let r = cipher.open(seq, esn, &mut p).unwrap();
            prop_assert_eq!(&p[r], &plain[..]);
        }
    }
}
