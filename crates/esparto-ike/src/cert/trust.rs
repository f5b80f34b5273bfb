//! Trust: the peer's certificate chain, its identity and its AUTH
//! signature (RFC 7296 §2.15, §3.6, §3.7; RFC 4945; RFC 7427 §3).
//!
//! A [`TrustStore`] holds the CAs a connection accepts for its peer, their
//! CRLs, and the CERTREQ body naming them. [`TrustStore::verify`] builds
//! the peer's chain with rustls-webpki at the time the caller passes in
//! (certificates name calendar dates, so that is wall-clock time, and it
//! comes from the caller as every time does in this crate), checks the
//! key usage and that the certificate names the peer's IKE identity; the
//! [`PeerCert`] it returns checks the AUTH signature.
//!
//! A store remembers the chains it accepted, until the first of their
//! certificates expires (see [`TrustStore`]).

use super::names::{CertNames, parse_cert};
use super::{
    CERT_ENCODING_X509, CertRefusal, CredentialError, KEYID_LEN, LocalCredential,
    MAX_CERT_LEN, MAX_CERTREQ_CAS, MAX_CERTS_PER_MESSAGE, MAX_VERIFIED_CHAINS, cred_err,
};
use crate::identity::Identity;
use pki_types::{CertificateDer, CertificateRevocationListDer, TrustAnchor, UnixTime};
use webpki::{
    EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeId, KeyPurposeIdIter,
    OwnedCertRevocationList, RevocationCheckDepth, RevocationOptionsBuilder, UnknownStatusPolicy,
};

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

    /// The CA certificates, DER, in the order given.
    pub fn cas(&self) -> &[Vec<u8>] {
        &self.ca_ders
    }

    /// The CERTREQ body: encoding 4 and the CAs' key identifiers.
    pub fn certreq(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + self.keyids.len());
        out.push(CERT_ENCODING_X509);
        out.extend_from_slice(&self.keyids);
        out
    }

    /// Validate the peer's chain at `now`, the wall-clock time the caller
    /// read (validity periods are calendar dates, RFC 5280 §4.1.2.5), and
    /// check that it names `id`.
    /// `ee` is the end-entity certificate, `intermediates` the others it
    /// sent, in any order.
    pub fn verify(
        &self,
        ee: &[u8],
        intermediates: &[&[u8]],
        now: UnixTime,
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
    pub fn accepts(&self, cred: &LocalCredential, now: UnixTime) -> Result<(), CertRefusal> {
        let (ee, inter) = cred.chain().split_first().ok_or(CertRefusal::NoCertificate)?;
        let inter: Vec<&[u8]> = inter.iter().map(Vec::as_slice).collect();
        self.verify_chain(ee, &inter, now).map(|_| ())
    }

    fn verify_chain(
        &self,
        ee: &[u8],
        intermediates: &[&[u8]],
        now: UnixTime,
    ) -> Result<CertNames, CertRefusal> {
        if intermediates.len() >= MAX_CERTS_PER_MESSAGE {
            return Err(CertRefusal::Oversized);
        }
        let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
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
        now: UnixTime,
    ) -> Result<CertNames, CertRefusal> {
        let names = CertNames::read(ee)?;
        for i in intermediates {
            parse_cert(i)?;
        }
        let ee_der = CertificateDer::from(ee);
        let cert = EndEntityCert::try_from(&ee_der).map_err(|e| CertRefusal::from_webpki(&e))?;
        let inter: Vec<CertificateDer<'_>> = intermediates.iter().map(|d| CertificateDer::from(*d)).collect();
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
            now,
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
