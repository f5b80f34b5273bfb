//! Signing: our credential and the AUTH data it makes (RFC 7296 §2.15,
//! RFC 7427 §3).
//!
//! [`SigningKey`] is our PKCS#8 private key, signing with aws-lc-rs and
//! the engine's injected randomness (which aws-lc-rs ignores for ECDSA and
//! RSA: [`SigningKey::auth_data`]);
//! [`LocalCredential`] is that key with the certificate chain we send in
//! CERT payloads (§3.6), checked when loaded: the key must be the
//! certificate's, and the certificate's keyUsage must allow signatures
//! (RFC 4945 §5.1.3.2).

use super::names::{CertNames, parse_cert};
use super::{CredentialError, cred_err};
use crate::identity::Identity;
use aws_lc_rs::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use core::fmt;
use esparto_crypto::Rng;
use pki_types::{AlgorithmIdentifier, alg_id};

/// Our private key, from PKCS#8 DER.
pub struct SigningKey {
    inner: KeyInner,
    /// RSA only: sign with RSASSA-PSS instead of PKCS#1 v1.5.
    rsa_pss: bool,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.kind())
    }
}

impl SigningKey {
    /// Load a PKCS#8 private key of any supported type. `rsa_pss` picks
    /// RSASSA-PSS for an RSA key (ignored for the others).
    pub fn from_pkcs8(der: &[u8], rsa_pss: bool) -> Result<Self, CredentialError> {
        let inner = if let Ok(k) = EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, der) {
            KeyInner::EcdsaP256(k)
        } else if let Ok(k) = EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P384_SHA384_ASN1_SIGNING, der) {
            KeyInner::EcdsaP384(k)
        } else if let Ok(k) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            KeyInner::Ed25519(k)
        } else if let Ok(k) = RsaKeyPair::from_pkcs8(der) {
            KeyInner::Rsa(k)
        } else {
            return Err(cred_err(
                "not a PKCS#8 ECDSA P-256/P-384, Ed25519 or RSA private key",
            ));
        };
        Ok(SigningKey { inner, rsa_pss })
    }

    /// `ecdsa-p256`, `ed25519`, `rsa-3072-pss`, …
    pub fn kind(&self) -> String {
        match &self.inner {
            KeyInner::EcdsaP256(_) => "ecdsa-p256".into(),
            KeyInner::EcdsaP384(_) => "ecdsa-p384".into(),
            KeyInner::Ed25519(_) => "ed25519".into(),
            KeyInner::Rsa(k) => format!(
                "rsa-{}{}",
                k.public_modulus_len() * 8,
                if self.rsa_pss { "-pss" } else { "" }
            ),
        }
    }

    /// The AUTH payload data for method 14 (RFC 7427 §3) over `octets`.
    ///
    /// `rng` is the engine's injected randomness, and aws-lc-rs gets the
    /// generator it hands out ([`Rng::secure_random`]). That does not make
    /// the signature a function of `rng`: aws-lc-rs 1.19 ignores the
    /// argument of ECDSA and RSA signing, and AWS-LC draws the ECDSA nonce
    /// and the RSA-PSS salt from its own DRBG, so those signatures differ
    /// from run to run whatever the seed. Ed25519 (RFC 8032 §5.1.6) and
    /// PKCS#1 v1.5 signatures are deterministic.
    pub fn auth_data(&self, rng: &mut dyn Rng, octets: &[u8]) -> Result<Vec<u8>, CredentialError> {
        let random = rng.secure_random();
        let signature = match &self.inner {
            KeyInner::EcdsaP256(k) | KeyInner::EcdsaP384(k) => k
                .sign(random, octets)
                .map_err(|_| cred_err("ECDSA signing failed"))?
                .as_ref()
                .to_vec(),
            KeyInner::Ed25519(k) => k
                .try_sign(octets)
                .map_err(|_| cred_err("Ed25519 signing failed"))?
                .as_ref()
                .to_vec(),
            KeyInner::Rsa(k) => {
                let mut out = vec![0u8; k.public_modulus_len()];
                let pad: &'static dyn sig::RsaEncoding = if self.rsa_pss {
                    &sig::RSA_PSS_SHA256
                } else {
                    &sig::RSA_PKCS1_SHA256
                };
                k.sign(pad, random, octets, &mut out)
                    .map_err(|_| cred_err("RSA signing failed"))?;
                out
            }
        };
        let id = wrap_alg_id(self.alg_id());
        let len = u8::try_from(id.len()).map_err(|_| cred_err("AlgorithmIdentifier too long"))?;
        let mut data = Vec::with_capacity(1 + id.len() + signature.len());
        data.push(len);
        data.extend_from_slice(&id);
        data.extend_from_slice(&signature);
        Ok(data)
    }

    /// The key's id as strongSwan shows it (`swanctl --load-creds`,
    /// VICI `get-keys`): SHA-1 of the public key, in hex.
    pub fn key_id(&self) -> String {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, self.public_key());
        d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The raw public key, as in a certificate's subjectPublicKey BIT
    /// STRING (EC point, Ed25519 key, RSAPublicKey DER).
    fn public_key(&self) -> &[u8] {
        match &self.inner {
            KeyInner::EcdsaP256(k) | KeyInner::EcdsaP384(k) => k.public_key().as_ref(),
            KeyInner::Ed25519(k) => k.public_key().as_ref(),
            KeyInner::Rsa(k) => k.public_key().as_ref(),
        }
    }

    /// The AlgorithmIdentifier (contents, without the SEQUENCE header) of
    /// the signatures this key makes.
    fn alg_id(&self) -> AlgorithmIdentifier {
        match &self.inner {
            KeyInner::EcdsaP256(_) => alg_id::ECDSA_SHA256,
            KeyInner::EcdsaP384(_) => alg_id::ECDSA_SHA384,
            KeyInner::Ed25519(_) => alg_id::ED25519,
            KeyInner::Rsa(_) if self.rsa_pss => alg_id::RSA_PSS_SHA256,
            KeyInner::Rsa(_) => alg_id::RSA_PKCS1_SHA256,
        }
    }
}

/// Our certificate chain and private key.
#[derive(Debug)]
pub struct LocalCredential {
    /// End entity first, then intermediates, DER.
    chain: Vec<Vec<u8>>,
    key: SigningKey,
    names: CertNames,
}

impl PartialEq for LocalCredential {
    fn eq(&self, other: &Self) -> bool {
        self.chain == other.chain && self.key.public_key() == other.key.public_key()
    }
}

impl Eq for LocalCredential {}

impl LocalCredential {
    /// Our certificate (`chain[0]`), its intermediates, and the key, which
    /// must be the certificate's.
    pub fn new(chain: Vec<Vec<u8>>, key: SigningKey) -> Result<Self, CredentialError> {
        let ee = chain.first().ok_or_else(|| cred_err("no certificate"))?;
        let names = CertNames::read(ee).map_err(|e| cred_err(e.to_string()))?;
        for (i, c) in chain.iter().enumerate().skip(1) {
            parse_cert(c).map_err(|e| cred_err(format!("intermediate {i}: {e}")))?;
        }
        if names.public_key != key.public_key() {
            return Err(cred_err("the private key does not belong to the certificate"));
        }
        if !names.may_sign {
            return Err(cred_err("the certificate's keyUsage does not allow digitalSignature"));
        }
        Ok(LocalCredential { chain, key, names })
    }

    /// The certificates to send, end entity first.
    pub fn chain(&self) -> &[Vec<u8>] {
        &self.chain
    }

    /// The signing key.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The subject DN, our identity unless another is configured.
    pub fn subject(&self) -> Option<Identity> {
        self.names.subject.clone().map(Identity::Dn)
    }

    /// Does the certificate name `id` (RFC 4945 §3.1)?
    pub fn binds(&self, id: &Identity) -> bool {
        self.names.binds(id)
    }

    /// notAfter of our certificate, seconds since the epoch.
    pub fn not_after(&self) -> i64 {
        self.names.not_after
    }

    /// `id` as we send it: a DN configured as text becomes the subject
    /// with its DER from the certificate.
    pub fn wire_identity(&self, id: &Identity) -> Identity {
        match (id, &self.names.subject) {
            (Identity::Dn(d), Some(s)) if d == s => Identity::Dn(s.clone()),
            _ => id.clone(),
        }
    }
}

// ---------------------------------------------------------------------------

/// A PKCS#8 private key from a file's contents, PEM (`PRIVATE KEY`) or
/// DER.
pub fn key_from_file(bytes: &[u8], rsa_pss: bool) -> Result<SigningKey, CredentialError> {
    use pki_types::pem::PemObject;
    if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let der = pki_types::PrivatePkcs8KeyDer::from_pem_slice(bytes)
            .map_err(|e| cred_err(format!("no PKCS#8 PRIVATE KEY block: {e}")))?;
        return SigningKey::from_pkcs8(der.secret_pkcs8_der(), rsa_pss);
    }
    SigningKey::from_pkcs8(bytes, rsa_pss)
}

/// A private key as a VICI client sends it (`load-key`), as PKCS#8 DER:
/// PKCS#8 already, or the key-specific encodings swanctl sends for the
/// keys it read itself (PKCS#1 `RSAPrivateKey`, RFC 8017; RFC 5915
/// `ECPrivateKey`).
///
/// PEM (`PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY`) is taken too,
/// as charon takes it.
pub fn pkcs8_from_der(data: &[u8]) -> Result<zeroize::Zeroizing<Vec<u8>>, CredentialError> {
    use aws_lc_rs::encoding::AsDer;
    use pki_types::pem::PemObject;
    let pem;
    let der = if data.windows(11).any(|w| w == b"-----BEGIN ") {
        pem = pki_types::PrivateKeyDer::from_pem_slice(data).map_err(|e| cred_err(format!("PEM: {e}")))?;
        pem.secret_der()
    } else {
        data
    };
    if SigningKey::from_pkcs8(der, false).is_ok() {
        return Ok(zeroize::Zeroizing::new(der.to_vec()));
    }
    if let Ok(k) = RsaKeyPair::from_der(der) {
        let p8 = k.as_der().map_err(|_| cred_err("cannot encode the RSA key as PKCS#8"))?;
        return Ok(zeroize::Zeroizing::new(p8.as_ref().to_vec()));
    }
    for alg in [&sig::ECDSA_P256_SHA256_ASN1_SIGNING, &sig::ECDSA_P384_SHA384_ASN1_SIGNING] {
        if let Ok(k) = EcdsaKeyPair::from_private_key_der(alg, der) {
            let p8 = k.to_pkcs8v1().map_err(|_| cred_err("cannot encode the EC key as PKCS#8"))?;
            return Ok(zeroize::Zeroizing::new(p8.as_ref().to_vec()));
        }
    }
    Err(cred_err(
        "not a PKCS#8, PKCS#1 (RSA) or RFC 5915 (EC) private key of a supported type \
         (ECDSA P-256/P-384, Ed25519, RSA)",
    ))
}

/// The key pair, by algorithm.
enum KeyInner {
    EcdsaP256(EcdsaKeyPair),
    EcdsaP384(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
    Rsa(RsaKeyPair),
}

/// The full AlgorithmIdentifier SEQUENCE around pki-types' contents (all
/// of which are shorter than 128 octets, so a one-octet length).
fn wrap_alg_id(id: AlgorithmIdentifier) -> Vec<u8> {
    let body = id.as_ref();
    let mut out = Vec::with_capacity(body.len() + 2);
    out.push(0x30);
    out.push(u8::try_from(body.len()).unwrap_or(0x7f));
    out.extend_from_slice(body);
    out
}
