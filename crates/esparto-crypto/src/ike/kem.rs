//! ML-KEM (FIPS 203) as an IKEv2 key exchange method (RFC 9370
//! additional key exchanges; IANA transform IDs 35, 36, 37).
//!
//! Unlike Diffie-Hellman, the two halves differ: the initiator generates
//! a decapsulation key and sends its encapsulation key in KEi; the
//! responder encapsulates to it and sends the ciphertext in KEr; both
//! get the same 32-byte shared secret, which takes the place of g^ir in
//! the key update.
//!
//! | method | IANA | KEi (encapsulation key) | KEr (ciphertext) |
//! |---|---|---|---|
//! | `mlkem512` | 35 | 800 | 768 |
//! | `mlkem768` | 36 | 1,184 | 1,088 |
//! | `mlkem1024` | 37 | 1,568 | 1,568 |
//!
//! aws-lc-rs draws ML-KEM's randomness itself (its KEM API takes no RNG),
//! as it does for ECDSA and RSA-PSS signatures: a seeded simulation does
//! not replay these values bit for bit. Peer values of the wrong length
//! are refused before aws-lc sees them; an encapsulation key aws-lc
//! rejects (FIPS 203 §7.2's modulus check) is the peer's fault.

use aws_lc_rs::kem::{self, Ciphertext, DecapsulationKey, EncapsulationKey};

use super::ke::KeError;
use crate::secret::SecretBytes;

/// An ML-KEM parameter set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MlKem {
    /// ML-KEM-512 (security category 1), id 35.
    MlKem512,
    /// ML-KEM-768 (category 3), id 36.
    MlKem768,
    /// ML-KEM-1024 (category 5), id 37.
    MlKem1024,
}

impl MlKem {
    /// Every parameter set, as strongSwan lists them.
    pub const ALL: [MlKem; 3] = [MlKem::MlKem512, MlKem::MlKem768, MlKem::MlKem1024];

    /// IANA transform ID (Key Exchange Method).
    pub fn iana_id(self) -> u16 {
        match self {
            MlKem::MlKem512 => 35,
            MlKem::MlKem768 => 36,
            MlKem::MlKem1024 => 37,
        }
    }

    /// Inverse of [`MlKem::iana_id`].
    pub fn from_iana(id: u16) -> Option<Self> {
        MlKem::ALL.into_iter().find(|m| m.iana_id() == id)
    }

    /// strongSwan keyword: `mlkem512`, `mlkem768`, `mlkem1024`.
    pub fn name(self) -> &'static str {
        match self {
            MlKem::MlKem512 => "mlkem512",
            MlKem::MlKem768 => "mlkem768",
            MlKem::MlKem1024 => "mlkem1024",
        }
    }

    /// Parses a strongSwan keyword.
    pub fn from_keyword(s: &str) -> Option<Self> {
        MlKem::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Length of the encapsulation key (the initiator's KE data).
    pub fn encapsulation_key_len(self) -> usize {
        match self {
            MlKem::MlKem512 => 800,
            MlKem::MlKem768 => 1184,
            MlKem::MlKem1024 => 1568,
        }
    }

    /// Length of the ciphertext (the responder's KE data).
    pub fn ciphertext_len(self) -> usize {
        match self {
            MlKem::MlKem512 => 768,
            MlKem::MlKem768 => 1088,
            MlKem::MlKem1024 => 1568,
        }
    }

    fn algorithm(self) -> &'static kem::Algorithm<kem::AlgorithmId> {
        match self {
            MlKem::MlKem512 => &kem::ML_KEM_512,
            MlKem::MlKem768 => &kem::ML_KEM_768,
            MlKem::MlKem1024 => &kem::ML_KEM_1024,
        }
    }

    /// The initiator's half: a fresh decapsulation key and the
    /// encapsulation key to send.
    pub fn generate(self) -> Result<MlKemInitiator, KeError> {
        let dk = DecapsulationKey::generate(self.algorithm()).map_err(|_| KeError::Backend)?;
        let ek = dk.encapsulation_key().map_err(|_| KeError::Backend)?;
        let public = ek.key_bytes().map_err(|_| KeError::Backend)?.as_ref().to_vec();
        Ok(MlKemInitiator { kem: self, dk, public })
    }

    /// The responder's half: encapsulates to the initiator's
    /// `encapsulation_key`; returns the ciphertext to send and the shared
    /// secret.
    pub fn encapsulate(self, encapsulation_key: &[u8]) -> Result<(Vec<u8>, SecretBytes), KeError> {
        let expected = self.encapsulation_key_len();
        if encapsulation_key.len() != expected {
            return Err(KeError::PeerPublicLength { expected, got: encapsulation_key.len() });
        }
        let ek = EncapsulationKey::new(self.algorithm(), encapsulation_key).map_err(|_| KeError::InvalidPeerPublic)?;
        let (ct, ss) = ek.encapsulate().map_err(|_| KeError::Backend)?;
        Ok((ct.as_ref().to_vec(), SecretBytes::from_slice(ss.as_ref())))
    }

    /// A decapsulation key from its FIPS 203 encoding (known-answer
    /// tests).
    pub fn from_decapsulation_key(self, bytes: &[u8]) -> Result<MlKemInitiator, KeError> {
        let dk = DecapsulationKey::new(self.algorithm(), bytes).map_err(|_| KeError::Backend)?;
        // aws-lc keeps no public half for a key made from raw bytes (its
        // `encapsulation_key()` then fails), but the FIPS 203 encoding
        // carries it: dk = dk_PKE ‖ ek ‖ H(ek) ‖ z (Algorithm 16), so ek
        // ends 64 bytes before the end. `new` has checked the length.
        let end = bytes.len() - 64;
        let ek = bytes
            .get(end - self.encapsulation_key_len()..end)
            .ok_or(KeError::Backend)?;
        let ek = EncapsulationKey::new(self.algorithm(), ek).map_err(|_| KeError::Backend)?;
        let public = ek.key_bytes().map_err(|_| KeError::Backend)?.as_ref().to_vec();
        Ok(MlKemInitiator { kem: self, dk, public })
    }
}

impl core::fmt::Display for MlKem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The initiator's half of one ML-KEM exchange: the decapsulation key
/// (aws-lc wipes it when dropped) and the encapsulation key to send.
pub struct MlKemInitiator {
    kem: MlKem,
    dk: DecapsulationKey<kem::AlgorithmId>,
    public: Vec<u8>,
}

impl core::fmt::Debug for MlKemInitiator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MlKemInitiator").field("kem", &self.kem).finish_non_exhaustive()
    }
}

impl MlKemInitiator {
    /// The parameter set.
    pub fn kem(&self) -> MlKem {
        self.kem
    }

    /// The encapsulation key, as KEi's Key Exchange Data.
    pub fn public_value(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret from the responder's `ciphertext`. ML-KEM's
    /// implicit rejection (FIPS 203 §6.3) turns a tampered ciphertext of
    /// the right length into an unrelated secret, so the failure shows as
    /// keys that do not match (the next message's ICV), not here.
    pub fn decapsulate(self, ciphertext: &[u8]) -> Result<SecretBytes, KeError> {
        let expected = self.kem.ciphertext_len();
        if ciphertext.len() != expected {
            return Err(KeError::PeerPublicLength { expected, got: ciphertext.len() });
        }
        let ss = self.dk.decapsulate(Ciphertext::from(ciphertext)).map_err(|_| KeError::InvalidPeerPublic)?;
        Ok(SecretBytes::from_slice(ss.as_ref()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::test_vectors::{Vectors, hex};

    #[test]
    fn both_halves_agree_with_the_documented_sizes() {
        for m in MlKem::ALL {
            let i = m.generate().unwrap();
            assert_eq!(i.public_value().len(), m.encapsulation_key_len(), "{m}");
            let (ct, r) = m.encapsulate(i.public_value()).unwrap();
            assert_eq!(ct.len(), m.ciphertext_len(), "{m}");
            let s = i.decapsulate(&ct).unwrap();
            assert_eq!(s.as_slice(), r.as_slice(), "{m}");
            assert_eq!(s.as_slice().len(), 32);
            assert_eq!(MlKem::from_iana(m.iana_id()), Some(m));
            assert_eq!(MlKem::from_keyword(m.name()), Some(m));
        }
    }

    #[test]
    fn peer_values_of_the_wrong_length_are_refused() {
        let m = MlKem::MlKem768;
        let i = m.generate().unwrap();
        assert_eq!(
            m.encapsulate(&i.public_value()[1..]),
            Err(KeError::PeerPublicLength { expected: 1184, got: 1183 })
        );
        assert_eq!(
            i.decapsulate(&[0u8; 1087]),
            Err(KeError::PeerPublicLength { expected: 1088, got: 1087 })
        );
    }

    #[test]
    fn a_tampered_ciphertext_gives_another_secret() {
        let m = MlKem::MlKem768;
        let i = m.generate().unwrap();
        let (mut ct, r) = m.encapsulate(i.public_value()).unwrap();
        ct[17] ^= 1;
        assert_ne!(i.decapsulate(&ct).unwrap().as_slice(), r.as_slice(), "implicit rejection");
    }

    #[test]
    fn fips203_acvp_decapsulation_vectors() {
        let v = Vectors::load(include_str!("../../tests/vectors/fips203_mlkem_decap.txt"));
        let mut seen = Vec::new();
        for c in v.cases() {
            let m = MlKem::from_keyword(c.get("kem")).unwrap();
            let i = m.from_decapsulation_key(&hex(c.get("dk"))).unwrap();
            assert_eq!(i.kem(), m, "{}", c.name());
            if c.has("ek") {
                assert_eq!(i.public_value(), &hex(c.get("ek"))[..], "{}", c.name());
            }
            let k = i.decapsulate(&hex(c.get("c"))).unwrap();
            assert_eq!(k.as_slice(), &hex(c.get("k"))[..], "{}", c.name());
            seen.push((m, c.get("reason") == "modify ciphertext"));
        }
        // A valid and an implicitly rejected ciphertext for every parameter set.
        for m in MlKem::ALL {
            for rejected in [false, true] {
                assert!(
                    seen.contains(&(m, rejected)),
                    "{m}: rejected={rejected} missing"
                );
            }
        }
        assert_eq!(seen.len(), 6);
    }
}
