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
//! Two jobs, one file each, neither of which parses ASN.1 by hand:
//!
//! - **Signing** (`sign.rs`), our side: [`SigningKey`], our PKCS#8
//!   private key (ECDSA P-256/P-384, Ed25519, RSA with PKCS#1 v1.5 or PSS
//!   padding), signing with aws-lc-rs into AUTH data (handed the engine's
//!   injected randomness, which aws-lc-rs ignores for ECDSA and RSA-PSS:
//!   [`SigningKey::auth_data`]); [`LocalCredential`],
//!   that key with our certificate and intermediates, checked to belong
//!   together: what goes into our CERT payloads.
//! - **Trust** (`trust.rs`), the peer's side: [`TrustStore`], the CAs we
//!   accept for a peer, optional CRLs, and the CERTREQ body naming the CAs
//!   (SHA-1 of their SubjectPublicKeyInfo, §3.7). [`TrustStore::verify`]
//!   builds the peer's chain with rustls-webpki (signatures, validity,
//!   basic constraints, name constraints, path length, unknown critical
//!   extensions, revocation) at the time the caller gives, then checks the
//!   key usage and that the peer's IKE identity is one the certificate
//!   names; [`PeerCert::verify_auth`] checks the AUTH signature with the
//!   certificate's key through webpki's aws-lc-rs algorithms.
//!
//! Both read what a certificate names (`names.rs`: subject DN and
//! subjectAltNames with x509-parser, RFC 4945 §3.1's binding of an IKE
//! identity to them). This module holds what the two share: the limits,
//! the SIGNATURE_HASH_ALGORITHMS body, the errors, and reading
//! certificate files.
//!
//! Every refusal is a [`CertRefusal`] whose name says why (expired, unknown
//! CA, revoked, identity not in the certificate, …) for the log line and
//! the counter.

mod names;
mod sign;
mod trust;

pub use sign::{LocalCredential, SigningKey, key_from_file, pkcs8_from_der};
pub use trust::{PeerCert, TrustStore, certreq_keyids, crl_from_file, x509_from_cert_payloads};

use core::fmt;
use names::parse_cert;
use pki_types::CertificateDer;

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
pub(crate) const KEYID_LEN: usize = 20;
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
    pub(crate) fn from_webpki(e: &webpki::Error) -> Self {
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

pub(crate) fn cred_err(s: impl Into<String>) -> CredentialError {
    CredentialError(s.into())
}

/// Whether the DER certificate `der` has `id` as its subject DN or a
/// subjectAltName of its type (false if it does not parse).
pub fn cert_has_subject(der: &[u8], id: &crate::identity::Identity) -> bool {
    names::CertNames::read(der).is_ok_and(|n| n.binds(id))
}

/// The subject DN of the DER certificate `der`, as text (`None` if it
/// does not parse or has an empty subject).
pub fn cert_subject(der: &[u8]) -> Option<String> {
    names::CertNames::read(der).ok()?.subject.map(|d| d.to_string())
}

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


#[cfg(test)]
pub(crate) mod tests;
