//! Public-key authentication: X.509 certificates and RFC 7427 signatures.
//!
//! IKE_AUTH with certificates (RFC 7296 §2.15, §3.6, §3.7) signs the same
//! octets a PSK MACs ([`crate::auth::signed_octets`]). The AUTH payload
//! uses the "Digital Signature" method (14, RFC 7427 §3), whose data is
//!
//! ```text
//! | len (1) | AlgorithmIdentifier (DER, len octets) | signature |
//! ```
//!
//! so the signature scheme travels with the signature instead of being
//! implied by the key. Both sides announce the hashes they accept in a
//! SIGNATURE_HASH_ALGORITHMS notify in IKE_SA_INIT (RFC 7427 §4); without
//! one from us strongSwan falls back to the older per-key methods.
//!
//! The parts, none of which parse ASN.1 by hand:
//!
//! - [`SigningKey`]: our PKCS#8 private key (ECDSA P-256/P-384, Ed25519,
//!   RSA with PKCS#1 v1.5 or PSS padding), signing with aws-lc-rs.
//! - [`LocalCredential`]: that key with our certificate and intermediates,
//!   checked to belong together; what goes into our CERT payloads.
//! - [`TrustStore`]: the CAs we accept for a peer, optional CRLs, and the
//!   CERTREQ body naming the CAs (SHA-1 of their SubjectPublicKeyInfo,
//!   §3.7). [`TrustStore::verify`] builds the peer's chain with
//!   rustls-webpki (signatures, validity, basic constraints, name
//!   constraints, path length, unknown critical extensions, revocation),
//!   then checks the key usage and that the peer's IKE identity is one the
//!   certificate names (RFC 4945 §3.1: subject DN or a subjectAltName of
//!   the ID's type), using x509-parser to read the subject and SANs.
//! - [`PeerCert::verify_auth`]: the AUTH signature, checked with the
//!   certificate's key through webpki's aws-lc-rs algorithms.
//!
//! Every refusal is a [`CertRefusal`] whose name says why (expired, unknown
//! CA, revoked, identity not in the certificate, …) for the log line and
//! the counter.

use crate::identity::{DnName, Identity};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaKeyPair};
use core::fmt;
use pki_types::{AlgorithmIdentifier, CertificateDer, CertificateRevocationListDer, TrustAnchor, UnixTime, alg_id};
use std::time::SystemTime;
use webpki::{
    EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeId, KeyPurposeIdIter,
    OwnedCertRevocationList, RevocationCheckDepth, RevocationOptionsBuilder, UnknownStatusPolicy,
};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// CERT/CERTREQ encoding "X.509 Certificate - Signature" (RFC 7296 §3.6).
pub const CERT_ENCODING_X509: u8 = 4;
/// The most CERT payloads read from one message (end entity plus
/// intermediates); more is refused, not searched.
pub const MAX_CERTS_PER_MESSAGE: usize = 8;
/// The largest certificate accepted, in octets. An RSA-8192 certificate
/// with ordinary extensions is under 3 KiB.
pub const MAX_CERT_LEN: usize = 16 * 1024;
/// The most CAs named in one CERTREQ we send (20 octets each).
pub const MAX_CERTREQ_CAS: usize = 64;
/// Length of a CERTREQ CA key identifier (SHA-1, §3.7).
const KEYID_LEN: usize = 20;
/// Chains remembered as valid per trust store (a peer that reconnects or
/// many tunnels of one peer skip path building); the memory is forgotten
/// when full.
pub const MAX_VERIFIED_CHAINS: usize = 4096;

/// SIGNATURE_HASH_ALGORITHMS values (RFC 7427 §7, RFC 8420 §2).
pub mod hash_alg {
    /// SHA2-256.
    pub const SHA2_256: u16 = 2;
    /// SHA2-384.
    pub const SHA2_384: u16 = 3;
    /// SHA2-512.
    pub const SHA2_512: u16 = 4;
    /// "Identity": the whole message is signed (Ed25519, RFC 8420).
    pub const IDENTITY: u16 = 5;
}

/// The body of our SIGNATURE_HASH_ALGORITHMS notify: every hash we sign
/// and verify with.
pub fn signature_hash_notify() -> [u8; 8] {
    let mut out = [0u8; 8];
    for (i, h) in [hash_alg::SHA2_256, hash_alg::SHA2_384, hash_alg::SHA2_512, hash_alg::IDENTITY]
        .iter()
        .enumerate()
    {
        out[2 * i..2 * i + 2].copy_from_slice(&h.to_be_bytes());
    }
    out
}

/// Why a certificate, a chain or a signature is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertRefusal {
    /// A certificate in the chain is past its notAfter.
    Expired,
    /// A certificate in the chain is before its notBefore.
    NotYetValid,
    /// The chain leads to no configured CA.
    UnknownCa,
    /// A CRL lists a certificate of the chain.
    Revoked,
    /// The peer's IKE identity is neither the subject nor a subjectAltName.
    IdentityNotInCert(String),
    /// The key usage or extended key usage forbids signing for IKE.
    KeyUsage,
    /// The AUTH signature does not verify with the certificate's key.
    BadSignature,
    /// A signature algorithm we do not implement (or that does not fit
    /// the key).
    UnsupportedAlgorithm,
    /// No CERT payload, or only ones with encodings we do not read.
    NoCertificate,
    /// Too many CERT payloads, or one too large.
    Oversized,
    /// A certificate that does not parse, or a chain webpki refuses for
    /// another reason (named).
    Invalid(String),
}

impl CertRefusal {
    /// A stable snake_case name for logs and counters.
    pub fn name(&self) -> &'static str {
        match self {
            CertRefusal::Expired => "cert_expired",
            CertRefusal::NotYetValid => "cert_not_yet_valid",
            CertRefusal::UnknownCa => "unknown_ca",
            CertRefusal::Revoked => "cert_revoked",
            CertRefusal::IdentityNotInCert(_) => "identity_not_in_cert",
            CertRefusal::KeyUsage => "cert_key_usage",
            CertRefusal::BadSignature => "bad_signature",
            CertRefusal::UnsupportedAlgorithm => "unsupported_signature_algorithm",
            CertRefusal::NoCertificate => "no_certificate",
            CertRefusal::Oversized => "cert_oversized",
            CertRefusal::Invalid(_) => "cert_invalid",
        }
    }

    // The context-free variants are deprecated but still produced.
    #[allow(deprecated)]
    fn from_webpki(e: &webpki::Error) -> Self {
        use webpki::Error as E;
        match e {
            E::CertExpired { .. } => CertRefusal::Expired,
            E::CertNotValidYet { .. } => CertRefusal::NotYetValid,
            E::UnknownIssuer => CertRefusal::UnknownCa,
            E::CertRevoked => CertRefusal::Revoked,
            E::RequiredEkuNotFound | E::RequiredEkuNotFoundContext(_) => CertRefusal::KeyUsage,
            E::UnsupportedSignatureAlgorithm
            | E::UnsupportedSignatureAlgorithmContext(_)
            | E::UnsupportedSignatureAlgorithmForPublicKey
            | E::UnsupportedSignatureAlgorithmForPublicKeyContext(_) => {
                CertRefusal::UnsupportedAlgorithm
            }
            E::InvalidSignatureForPublicKey => CertRefusal::BadSignature,
            other => CertRefusal::Invalid(format!("{other:?}")),
        }
    }
}

impl fmt::Display for CertRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertRefusal::Expired => f.write_str("certificate expired"),
            CertRefusal::NotYetValid => f.write_str("certificate not yet valid"),
            CertRefusal::UnknownCa => f.write_str("certificate not issued by a trusted CA"),
            CertRefusal::Revoked => f.write_str("certificate revoked (CRL)"),
            CertRefusal::IdentityNotInCert(id) => {
                write!(f, "identity {id} not in the certificate (subject or subjectAltName)")
            }
            CertRefusal::KeyUsage => f.write_str("certificate key usage does not allow IKE signatures"),
            CertRefusal::BadSignature => f.write_str("AUTH signature does not verify with the certificate's key"),
            CertRefusal::UnsupportedAlgorithm => f.write_str("unsupported signature algorithm"),
            CertRefusal::NoCertificate => f.write_str("no X.509 certificate received"),
            CertRefusal::Oversized => f.write_str("too many or too large CERT payloads"),
            CertRefusal::Invalid(why) => write!(f, "invalid certificate: {why}"),
        }
    }
}

impl std::error::Error for CertRefusal {}

/// A credential that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialError(pub String);

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CredentialError {}

fn cred_err(s: impl Into<String>) -> CredentialError {
    CredentialError(s.into())
}

// ---------------------------------------------------------------------------
// Signing

enum KeyInner {
    EcdsaP256(EcdsaKeyPair),
    EcdsaP384(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
    Rsa(RsaKeyPair),
}

/// Our private key, from PKCS#8 DER.
pub struct SigningKey {
    inner: KeyInner,
    /// RSA only: sign with RSASSA-PSS instead of PKCS#1 v1.5.
    rsa_pss: bool,
    rng: SystemRandom,
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
        Ok(SigningKey {
            inner,
            rsa_pss,
            rng: SystemRandom::new(),
        })
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

    /// The AUTH payload data for method 14 (RFC 7427 §3) over `octets`.
    pub fn auth_data(&self, octets: &[u8]) -> Result<Vec<u8>, CredentialError> {
        let signature = match &self.inner {
            KeyInner::EcdsaP256(k) | KeyInner::EcdsaP384(k) => k
                .sign(&self.rng, octets)
                .map_err(|_| cred_err("ECDSA signing failed"))?
                .as_ref()
                .to_vec(),
            KeyInner::Ed25519(k) => k.sign(octets).as_ref().to_vec(),
            KeyInner::Rsa(k) => {
                let mut out = vec![0u8; k.public_modulus_len()];
                let pad: &'static dyn sig::RsaEncoding = if self.rsa_pss {
                    &sig::RSA_PSS_SHA256
                } else {
                    &sig::RSA_PKCS1_SHA256
                };
                k.sign(pad, &self.rng, octets, &mut out)
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

/// Split RFC 7427 AUTH data into the AlgorithmIdentifier contents and the
/// signature.
fn split_auth_data(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = data.split_first()?;
    let len = usize::from(len);
    if rest.len() <= len {
        return None;
    }
    let (id, signature) = rest.split_at(len);
    // SEQUENCE with a short-form length covering exactly the field.
    match id {
        [0x30, l, body @ ..] if usize::from(*l) == body.len() => Some((body, signature)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Our credential

/// What a certificate says about its subject, read with x509-parser.
#[derive(Debug, Clone)]
struct CertNames {
    subject: Option<DnName>,
    dns: Vec<String>,
    email: Vec<String>,
    ip: Vec<Vec<u8>>,
    /// The keyUsage extension allows signatures (or is absent).
    may_sign: bool,
    /// notAfter, seconds since the epoch.
    not_after: i64,
    /// The raw subjectPublicKey.
    public_key: Vec<u8>,
}

fn parse_cert(der: &[u8]) -> Result<X509Certificate<'_>, CertRefusal> {
    if der.len() > MAX_CERT_LEN {
        return Err(CertRefusal::Oversized);
    }
    match X509Certificate::from_der(der) {
        Ok(([], c)) => Ok(c),
        Ok(_) => Err(CertRefusal::Invalid("trailing data after the certificate".into())),
        Err(e) => Err(CertRefusal::Invalid(format!("does not parse: {e}"))),
    }
}

impl CertNames {
    fn read(der: &[u8]) -> Result<Self, CertRefusal> {
        let c = parse_cert(der)?;
        let subject = DnName::from_der(c.subject().as_raw());
        let (mut dns, mut email, mut ip) = (Vec::new(), Vec::new(), Vec::new());
        let san = c
            .subject_alternative_name()
            .map_err(|e| CertRefusal::Invalid(format!("subjectAltName: {e}")))?;
        if let Some(san) = san {
            for n in &san.value.general_names {
                match n {
                    GeneralName::DNSName(d) => dns.push(d.to_ascii_lowercase()),
                    GeneralName::RFC822Name(e) => email.push(e.to_ascii_lowercase()),
                    GeneralName::IPAddress(a) => ip.push(a.to_vec()),
                    _ => {}
                }
            }
        }
        let ku = c
            .key_usage()
            .map_err(|e| CertRefusal::Invalid(format!("keyUsage: {e}")))?;
        // RFC 4945 §5.1.3.2: digitalSignature or nonRepudiation.
        let may_sign = ku.is_none_or(|k| k.value.digital_signature() || k.value.non_repudiation());
        Ok(CertNames {
            subject,
            dns,
            email,
            ip,
            may_sign,
            not_after: c.validity().not_after.timestamp(),
            public_key: c.public_key().subject_public_key.data.to_vec(),
        })
    }

    /// RFC 4945 §3.1: the ID must be the subject (ID_DER_ASN1_DN) or a
    /// subjectAltName of its own type.
    fn binds(&self, id: &Identity) -> bool {
        match id {
            Identity::Dn(d) => self.subject.as_ref() == Some(d),
            Identity::Fqdn(f) => self.dns.iter().any(|d| d.eq_ignore_ascii_case(f)),
            Identity::UserFqdn(e) => self.email.iter().any(|m| m.eq_ignore_ascii_case(e)),
            Identity::Ipv4(a) => self.ip.iter().any(|i| i.as_slice() == a.octets()),
            Identity::Ipv6(a) => self.ip.iter().any(|i| i.as_slice() == a.octets()),
            Identity::KeyId(_) | Identity::Any => false,
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
// Trust

/// Extended key usages we accept when the extension is present: IKE
/// (RFC 4945 §5.1.3.12), the TLS ones strongSwan's `pki` sets, and any.
struct IkeEku;

/// id-kp-ipsecIKE, 1.3.6.1.5.5.7.3.17.
const EKU_IPSEC_IKE: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x11];
/// id-kp-serverAuth, 1.3.6.1.5.5.7.3.1.
const EKU_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// id-kp-clientAuth, 1.3.6.1.5.5.7.3.2.
const EKU_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
/// iKEIntermediate, 1.3.6.1.5.5.8.2.2.
const EKU_IKE_INTERMEDIATE: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x08, 0x02, 0x02];
/// anyExtendedKeyUsage, 2.5.29.37.0.
const EKU_ANY: &[u8] = &[0x55, 0x1d, 0x25, 0x00];

impl ExtendedKeyUsageValidator for IkeEku {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let ok = [EKU_IPSEC_IKE, EKU_SERVER_AUTH, EKU_CLIENT_AUTH, EKU_IKE_INTERMEDIATE, EKU_ANY]
            .map(KeyPurposeId::new);
        let mut empty = true;
        for id in iter {
            empty = false;
            if ok.contains(&id?) {
                return Ok(());
            }
        }
        if empty {
            Ok(())
        } else {
            Err(eku_error())
        }
    }
}

#[allow(deprecated)]
fn eku_error() -> webpki::Error {
    webpki::Error::RequiredEkuNotFound
}

/// The CAs (and CRLs) a connection trusts for its peer.
///
/// A chain that webpki accepted is remembered (by the SHA-256 of its
/// certificates) with the period in which all of its certificates are
/// valid: the CAs and CRLs of a store never change, so the same octets
/// within that period would be accepted again, and only the identity
/// binding and the signature need checking. Path building costs a
/// signature verification per certificate, as much as the AUTH check.
#[derive(Debug)]
pub struct TrustStore {
    ca_ders: Vec<Vec<u8>>,
    anchors: Vec<TrustAnchor<'static>>,
    crls: Vec<webpki::CertRevocationList<'static>>,
    /// SHA-1 of each CA's SubjectPublicKeyInfo (§3.7), concatenated.
    keyids: Vec<u8>,
    verified: std::sync::Mutex<std::collections::HashMap<[u8; 32], VerifiedChain>>,
}

/// A chain webpki accepted: what its end entity names, and when all of
/// the chain's certificates are valid (seconds since the epoch).
#[derive(Debug, Clone)]
struct VerifiedChain {
    names: CertNames,
    from: i64,
    until: i64,
}

fn chain_digest(ee: &[u8], intermediates: &[&[u8]]) -> [u8; 32] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for c in core::iter::once(&ee).chain(intermediates) {
        ctx.update(&(c.len() as u64).to_be_bytes());
        ctx.update(c);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The period in which every certificate given is valid.
fn validity_window(certs: &[&[u8]]) -> Option<(i64, i64)> {
    let mut w = (i64::MIN, i64::MAX);
    for c in certs {
        let c = parse_cert(c).ok()?;
        w.0 = w.0.max(c.validity().not_before.timestamp());
        w.1 = w.1.min(c.validity().not_after.timestamp());
    }
    Some(w)
}

impl PartialEq for TrustStore {
    fn eq(&self, other: &Self) -> bool {
        self.ca_ders == other.ca_ders && self.crls.len() == other.crls.len()
    }
}

impl Eq for TrustStore {}

/// A peer certificate that chained to a trusted CA and names the peer.
#[derive(Debug)]
pub struct PeerCert {
    der: Vec<u8>,
}

impl TrustStore {
    /// CA certificates (DER) and CRLs (DER) issued by them or their
    /// intermediates.
    pub fn new(cas: Vec<Vec<u8>>, crls: &[Vec<u8>]) -> Result<Self, CredentialError> {
        if cas.is_empty() {
            return Err(cred_err("no CA certificate"));
        }
        let mut anchors = Vec::with_capacity(cas.len());
        let mut keyids = Vec::with_capacity(cas.len() * KEYID_LEN);
        for (i, der) in cas.iter().enumerate() {
            let c = parse_cert(der).map_err(|e| cred_err(format!("CA {i}: {e}")))?;
            if !c.is_ca() {
                return Err(cred_err(format!("CA {i} ({}) is not a CA certificate", c.subject())));
            }
            let spki = aws_lc_rs::digest::digest(
                &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
                c.public_key().raw,
            );
            if keyids.len() < MAX_CERTREQ_CAS * KEYID_LEN {
                keyids.extend_from_slice(spki.as_ref());
            }
            let cert = CertificateDer::from(der.as_slice());
            let anchor = webpki::anchor_from_trusted_cert(&cert)
                .map_err(|e| cred_err(format!("CA {i}: {e:?}")))?
                .to_owned();
            anchors.push(anchor);
        }
        let crls = crls
            .iter()
            .enumerate()
            .map(|(i, der)| {
                OwnedCertRevocationList::from_der(CertificateRevocationListDer::from(der.as_slice()).as_ref())
                    .map(webpki::CertRevocationList::from)
                    .map_err(|e| cred_err(format!("CRL {i}: {e:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustStore {
            ca_ders: cas,
            anchors,
            crls,
            keyids,
            verified: std::sync::Mutex::default(),
        })
    }

    /// The CERTREQ body: encoding 4 and the CAs' key identifiers.
    pub fn certreq(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.keyids.len());
        out.push(CERT_ENCODING_X509);
        out.extend_from_slice(&self.keyids);
        out
    }

    /// Validate the peer's chain at `now` and check that it names `id`.
    /// `ee` is the end-entity certificate, `intermediates` the others it
    /// sent, in any order.
    pub fn verify(
        &self,
        ee: &[u8],
        intermediates: &[&[u8]],
        now: SystemTime,
        id: &Identity,
    ) -> Result<PeerCert, CertRefusal> {
        let names = self.verify_chain(ee, intermediates, now)?;
        if !names.binds(id) {
            return Err(CertRefusal::IdentityNotInCert(id.to_string()));
        }
        Ok(PeerCert { der: ee.to_vec() })
    }

    /// Does `cred`'s chain build to one of our CAs at `now` (a
    /// configuration check)?
    pub fn accepts(&self, cred: &LocalCredential, now: SystemTime) -> Result<(), CertRefusal> {
        let (ee, inter) = cred.chain.split_first().ok_or(CertRefusal::NoCertificate)?;
        let inter: Vec<&[u8]> = inter.iter().map(Vec::as_slice).collect();
        self.verify_chain(ee, &inter, now).map(|_| ())
    }

    fn verify_chain(
        &self,
        ee: &[u8],
        intermediates: &[&[u8]],
        now: SystemTime,
    ) -> Result<CertNames, CertRefusal> {
        if intermediates.len() >= MAX_CERTS_PER_MESSAGE {
            return Err(CertRefusal::Oversized);
        }
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let key = chain_digest(ee, intermediates);
        if let Ok(cache) = self.verified.lock() {
            if let Some(v) = cache.get(&key) {
                if v.from <= secs && secs <= v.until {
                    return Ok(v.names.clone());
                }
            }
        }
        let names = self.build_chain(ee, intermediates, now)?;
        let mut all = vec![ee];
        all.extend_from_slice(intermediates);
        if let (Some((from, until)), Ok(mut cache)) = (validity_window(&all), self.verified.lock()) {
            if cache.len() >= MAX_VERIFIED_CHAINS {
                cache.clear();
            }
            cache.insert(key, VerifiedChain { names: names.clone(), from, until });
        }
        Ok(names)
    }

    fn build_chain(
        &self,
        ee: &[u8],
        intermediates: &[&[u8]],
        now: SystemTime,
    ) -> Result<CertNames, CertRefusal> {
        let names = CertNames::read(ee)?;
        for i in intermediates {
            parse_cert(i)?;
        }
        let ee_der = CertificateDer::from(ee);
        let cert = EndEntityCert::try_from(&ee_der).map_err(|e| CertRefusal::from_webpki(&e))?;
        let inter: Vec<CertificateDer<'_>> = intermediates.iter().map(|d| CertificateDer::from(*d)).collect();
        let time = UnixTime::since_unix_epoch(
            now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default(),
        );
        let crl_refs: Vec<&webpki::CertRevocationList<'_>> = self.crls.iter().collect();
        let revocation = RevocationOptionsBuilder::new(&crl_refs).ok().map(|b| {
            b.with_depth(RevocationCheckDepth::Chain)
                // A CRL covers the CAs that issued it; certificates of
                // other issuers are not "unknown" but simply not listed.
                .with_status_policy(UnknownStatusPolicy::Allow)
                .build()
        });
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &self.anchors,
            &inter,
            time,
            IkeEku,
            revocation,
            None,
        )
        .map_err(|e| CertRefusal::from_webpki(&e))?;
        if !names.may_sign {
            return Err(CertRefusal::KeyUsage);
        }
        Ok(names)
    }
}

impl PeerCert {
    /// Check RFC 7427 AUTH data over `octets` with this certificate's key.
    pub fn verify_auth(&self, auth_data: &[u8], octets: &[u8]) -> Result<(), CertRefusal> {
        let (id, signature) = split_auth_data(auth_data).ok_or(CertRefusal::UnsupportedAlgorithm)?;
        let der = CertificateDer::from(self.der.as_slice());
        let cert = EndEntityCert::try_from(&der).map_err(|e| CertRefusal::from_webpki(&e))?;
        let mut seen = false;
        for alg in webpki::ALL_VERIFICATION_ALGS
            .iter()
            .filter(|a| a.signature_alg_id().as_ref() == id)
        {
            seen = true;
            if cert.verify_signature(*alg, octets, signature).is_ok() {
                return Ok(());
            }
        }
        Err(if seen { CertRefusal::BadSignature } else { CertRefusal::UnsupportedAlgorithm })
    }
}

/// The X.509 certificates among received CERT payload bodies, end entity
/// first (§3.6: "the first certificate provided MUST contain the public
/// key used to verify the AUTH field"). Other encodings are skipped and
/// counted in the second value.
pub fn x509_from_cert_payloads<'a>(
    bodies: &[&'a [u8]],
) -> Result<(Vec<&'a [u8]>, usize), CertRefusal> {
    if bodies.len() > MAX_CERTS_PER_MESSAGE {
        return Err(CertRefusal::Oversized);
    }
    let mut certs = Vec::new();
    let mut other = 0;
    for b in bodies {
        match b.split_first() {
            Some((&CERT_ENCODING_X509, der)) if !der.is_empty() => {
                if der.len() > MAX_CERT_LEN {
                    return Err(CertRefusal::Oversized);
                }
                certs.push(der);
            }
            _ => other += 1,
        }
    }
    if certs.is_empty() {
        return Err(CertRefusal::NoCertificate);
    }
    Ok((certs, other))
}

/// The CA key identifiers of a received CERTREQ body (§3.7), if it is for
/// X.509 certificates.
pub fn certreq_keyids(body: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    let (&enc, ids) = body.split_first()?;
    (enc == CERT_ENCODING_X509).then(|| ids.chunks_exact(KEYID_LEN))
}

// ---------------------------------------------------------------------------
// Files

/// Certificates from a file's contents: PEM (`CERTIFICATE` blocks, in
/// order) or a single DER certificate.
pub fn certs_from_file(bytes: &[u8]) -> Result<Vec<Vec<u8>>, CredentialError> {
    use pki_types::pem::PemObject;
    if bytes.starts_with(b"-----") || bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let certs = CertificateDer::pem_slice_iter(bytes)
            .map(|c| c.map(|c| c.as_ref().to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| cred_err(format!("PEM: {e}")))?;
        if certs.is_empty() {
            return Err(cred_err("no CERTIFICATE block"));
        }
        return Ok(certs);
    }
    parse_cert(bytes).map_err(|e| cred_err(e.to_string()))?;
    Ok(vec![bytes.to_vec()])
}

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

/// A CRL from a file's contents, PEM (`X509 CRL`) or DER.
pub fn crl_from_file(bytes: &[u8]) -> Result<Vec<u8>, CredentialError> {
    use pki_types::pem::PemObject;
    if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return CertificateRevocationListDer::from_pem_slice(bytes)
            .map(|c| c.as_ref().to_vec())
            .map_err(|e| cred_err(format!("no X509 CRL block: {e}")));
    }
    Ok(bytes.to_vec())
}

#[cfg(test)]
pub(crate) mod tests;
