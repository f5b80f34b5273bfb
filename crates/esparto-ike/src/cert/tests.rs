#![allow(clippy::unwrap_used)]
//! Certificates made with rcgen: a CA, intermediates, end entities of
//! every key type, expired ones, CRLs.

use super::names::CertNames;
use super::*;
use pki_types::UnixTime;
use crate::identity::Identity;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SanType, SerialNumber,
    SignatureAlgorithm,
};
use std::time::Duration;
use x509_parser::prelude::{FromDer, X509Certificate};
use time::OffsetDateTime;

/// A test CA (root or intermediate).
pub(crate) struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    /// Its certificate.
    pub(crate) der: Vec<u8>,
}

/// An end entity: certificate and PKCS#8 key.
pub(crate) struct TestCert {
    pub(crate) der: Vec<u8>,
    pub(crate) key: Vec<u8>,
}

pub(crate) fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::OrganizationName, "Esparto Test");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.not_before = now() - Duration::from_secs(86_400);
    p.not_after = now() + Duration::from_secs(3650 * 86_400);
    p
}

impl TestCa {
    /// A self-signed root.
    pub(crate) fn root(cn: &str, alg: &'static SignatureAlgorithm) -> Self {
        let key = KeyPair::generate_for(alg).unwrap();
        let params = ca_params(cn);
        let der = params.self_signed(&key).unwrap().der().to_vec();
        TestCa { params, key, der }
    }

    /// An intermediate CA issued by this one.
    pub(crate) fn intermediate(&self, cn: &str) -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let params = ca_params(cn);
        let issuer = Issuer::from_params(&self.params, &self.key);
        let der = params.signed_by(&key, &issuer).unwrap().der().to_vec();
        TestCa { params, key, der }
    }

    /// An end entity with subject `CN=cn`, SANs (DNS names, IPs, and
    /// e-mail addresses for entries with an `@`), serial `serial`, valid
    /// from `from` to `until`.
    pub(crate) fn issue_at(
        &self,
        cn: &str,
        sans: &[&str],
        alg: &'static SignatureAlgorithm,
        serial: u64,
        from: OffsetDateTime,
        until: OffsetDateTime,
    ) -> TestCert {
        let key = KeyPair::generate_for(alg).unwrap();
        let mut p = CertificateParams::new(
            sans.iter().filter(|s| !s.contains('@')).map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        for e in sans.iter().filter(|s| s.contains('@')) {
            p.subject_alt_names.push(SanType::Rfc822Name((*e).try_into().unwrap()));
        }
        p.distinguished_name.push(DnType::OrganizationName, "Esparto Test");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = Some(SerialNumber::from(serial));
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.not_before = from;
        p.not_after = until;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let der = p.signed_by(&key, &issuer).unwrap().der().to_vec();
        TestCert { der, key: key.serialize_der() }
    }

    /// An end entity valid from yesterday for a year.
    pub(crate) fn issue(&self, cn: &str, sans: &[&str], alg: &'static SignatureAlgorithm, serial: u64) -> TestCert {
        let day = Duration::from_secs(86_400);
        self.issue_at(cn, sans, alg, serial, now() - day, now() + day * 365)
    }

    /// A CRL revoking these serials.
    pub(crate) fn crl(&self, serials: &[u64]) -> Vec<u8> {
        let p = CertificateRevocationListParams {
            this_update: now() - Duration::from_secs(3600),
            next_update: now() + Duration::from_secs(30 * 86_400),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| RevokedCertParams {
                    serial_number: SerialNumber::from(*s),
                    revocation_time: now() - Duration::from_secs(60),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let issuer = Issuer::from_params(&self.params, &self.key);
        p.signed_by(&issuer).unwrap().der().to_vec()
    }
}

fn id(s: &str) -> Identity {
    Identity::parse(s).unwrap()
}

/// Sign with `cert`'s key, verify through a trust store of `ca`.
fn round_trip(ca: &TestCa, cert: &TestCert, inter: &[&[u8]], pss: bool, who: &str) {
    let key = SigningKey::from_pkcs8(&cert.key, pss).unwrap();
    let cred = LocalCredential::new(vec![cert.der.clone()], key).unwrap();
    let octets = b"RealMessage | Nonce | MACedID";
    let data = cred.key().auth_data(&mut esparto_crypto::DeterministicRng::new(1), octets).unwrap();
    let trust = TrustStore::new(vec![ca.der.clone()], &[]).unwrap();
    let peer = trust.verify(&cert.der, inter, UnixTime::now(), &id(who)).unwrap();
    peer.verify_auth(&data, octets).unwrap();
    assert_eq!(peer.verify_auth(&data, b"other octets"), Err(CertRefusal::BadSignature));
    let mut bad = data.clone();
    bad[2] ^= 0x01; // the AlgorithmIdentifier's OID
    assert!(peer.verify_auth(&bad, octets).is_err());
}

#[test]
fn every_key_type_signs_and_verifies() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P384_SHA384);
    for (alg, pss) in [
        (&rcgen::PKCS_ECDSA_P256_SHA256, false),
        (&rcgen::PKCS_ECDSA_P384_SHA384, false),
        (&rcgen::PKCS_ED25519, false),
        (&rcgen::PKCS_RSA_SHA256, false),
        (&rcgen::PKCS_RSA_SHA256, true),
    ] {
        let c = ca.issue("moon", &["moon.example"], alg, 2);
        round_trip(&ca, &c, &[], pss, "@moon.example");
    }
}

#[test]
fn rsa_ca_and_intermediate_chain() {
    let root = TestCa::root("Root", &rcgen::PKCS_RSA_SHA256);
    let inter = root.intermediate("Intermediate");
    let c = inter.issue("sun", &["sun.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 7);
    round_trip(&root, &c, &[&inter.der], false, "@sun.example");
    // Without the intermediate the chain does not build.
    let trust = TrustStore::new(vec![root.der.clone()], &[]).unwrap();
    assert_eq!(
        trust.verify(&c.der, &[], UnixTime::now(), &id("@sun.example")).unwrap_err(),
        CertRefusal::UnknownCa
    );
}

#[test]
fn identity_binding_rfc4945() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let c = ca.issue(
        "moon",
        &["moon.example", "192.0.2.1", "2001:db8::1", "moon@example.org"],
        &rcgen::PKCS_ECDSA_P256_SHA256,
        3,
    );
    let trust = TrustStore::new(vec![ca.der.clone()], &[]).unwrap();
    let now = UnixTime::now();
    for ok in [
        "@MOON.example",
        "192.0.2.1",
        "2001:db8::1",
        "moon@example.org",
        // rcgen writes the CN first.
        "CN=moon, O=Esparto Test",
        "cn=moon,o=Esparto Test",
    ] {
        let r = trust.verify(&c.der, &[], now, &id(ok));
        assert!(r.is_ok(), "{ok}: {r:?} {:?}", CertNames::read(&c.der).unwrap().subject);
    }
    for bad in ["@sun.example", "192.0.2.2", "sun@example.org", "CN=sun, O=Esparto Test", "O=Esparto Test, CN=moon", "keyid:0102"] {
        let e = trust.verify(&c.der, &[], now, &id(bad)).unwrap_err();
        assert!(matches!(e, CertRefusal::IdentityNotInCert(_)), "{bad}: {e}");
        assert_eq!(e.name(), "identity_not_in_cert");
    }
    // The subject as received in an ID payload (DER) binds too.
    let subject = LocalCredential::new(
        vec![c.der.clone()],
        SigningKey::from_pkcs8(&c.key, false).unwrap(),
    )
    .unwrap()
    .subject()
    .unwrap();
    let (t, d) = subject.to_wire().unwrap();
    let received = Identity::from_wire(t, &d).unwrap();
    assert!(trust.verify(&c.der, &[], now, &received).is_ok());
}

#[test]
fn refusals_name_their_reason() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let other = TestCa::root("Other", &rcgen::PKCS_ECDSA_P256_SHA256);
    let day = Duration::from_secs(86_400);
    let expired = ca.issue_at("old", &["old.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 4, now() - day * 30, now() - day);
    let future = ca.issue_at("new", &["new.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 5, now() + day, now() + day * 30);
    let foreign = other.issue("moon", &["moon.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 6);
    let revoked = ca.issue("bad", &["bad.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 99);
    let fine = ca.issue("ok", &["ok.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 100);
    let crl = ca.crl(&[99]);
    let trust = TrustStore::new(vec![ca.der.clone()], &[crl]).unwrap();
    let t = UnixTime::now();
    let v = |c: &TestCert, who: &str| trust.verify(&c.der, &[], t, &id(who)).map(|_| ());
    assert_eq!(v(&expired, "@old.example"), Err(CertRefusal::Expired));
    assert_eq!(v(&future, "@new.example"), Err(CertRefusal::NotYetValid));
    assert_eq!(v(&foreign, "@moon.example"), Err(CertRefusal::UnknownCa));
    assert_eq!(v(&revoked, "@bad.example"), Err(CertRefusal::Revoked));
    assert_eq!(v(&fine, "@ok.example"), Ok(()));
    assert_eq!(CertRefusal::Revoked.name(), "cert_revoked");
    // A CA's certificate is not an end entity.
    assert!(trust.verify(&ca.der, &[], t, &id("@x")).is_err());
}

#[test]
fn key_must_match_certificate() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let a = ca.issue("a", &["a.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 1);
    let b = ca.issue("b", &["b.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 2);
    let key = SigningKey::from_pkcs8(&b.key, false).unwrap();
    assert!(LocalCredential::new(vec![a.der.clone()], key).is_err());
    assert!(SigningKey::from_pkcs8(b"not a key", false).is_err());
    assert!(TrustStore::new(vec![a.der.clone()], &[]).is_err(), "an end entity is no CA");
}

#[test]
fn malformed_input_is_refused_not_panicking() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let trust = TrustStore::new(vec![ca.der.clone()], &[]).unwrap();
    let c = ca.issue("moon", &["moon.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 1);
    let t = UnixTime::now();
    let who = id("@moon.example");
    // Every truncation and single-octet corruption of a valid certificate.
    for n in 0..c.der.len() {
        assert!(trust.verify(&c.der[..n], &[], t, &who).is_err());
    }
    for i in (0..c.der.len()).step_by(7) {
        let mut d = c.der.clone();
        d[i] ^= 0x5a;
        let _ = trust.verify(&d, &[], t, &who);
    }
    let huge = vec![0x30; MAX_CERT_LEN + 1];
    assert_eq!(trust.verify(&huge, &[], t, &who).unwrap_err(), CertRefusal::Oversized);
    // Deeply nested SEQUENCEs.
    let mut nested = Vec::new();
    for _ in 0..2000 {
        nested.splice(0..0, [0x30, 0x80]);
        nested.extend_from_slice(&[0, 0]);
    }
    assert!(trust.verify(&nested, &[], t, &who).is_err());
    // CERT payload bodies: unknown encodings skipped and counted; too many refused.
    let pkcs7 = [1u8, 0x30, 0x00];
    let x509 = [&[CERT_ENCODING_X509][..], &c.der].concat();
    let (certs, other) = x509_from_cert_payloads(&[&pkcs7, &x509]).unwrap();
    assert_eq!((certs.len(), other), (1, 1));
    assert_eq!(x509_from_cert_payloads(&[&pkcs7]).unwrap_err(), CertRefusal::NoCertificate);
    let many = vec![x509.as_slice(); MAX_CERTS_PER_MESSAGE + 1];
    assert_eq!(x509_from_cert_payloads(&many).unwrap_err(), CertRefusal::Oversized);
    // AUTH data framing.
    let peer = trust.verify(&c.der, &[], t, &who).unwrap();
    for bad in [&[][..], &[0], &[5, 0x30, 3, 1, 2], &[200, 0x30]] {
        assert!(peer.verify_auth(bad, b"x").is_err());
    }
}

#[test]
fn path_length_is_limited() {
    // A chain of intermediates longer than webpki's path-depth limit.
    let root = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let mut cas = vec![root.intermediate("I0")];
    for i in 1..MAX_CERTS_PER_MESSAGE - 1 {
        let next = cas[i - 1].intermediate(&format!("I{i}"));
        cas.push(next);
    }
    let c = cas.last().unwrap().issue("deep", &["deep.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 1);
    let inter: Vec<&[u8]> = cas.iter().map(|c| c.der.as_slice()).collect();
    let trust = TrustStore::new(vec![root.der.clone()], &[]).unwrap();
    let r = trust.verify(&c.der, &inter, UnixTime::now(), &id("@deep.example"));
    assert!(r.is_err(), "{} intermediates accepted", inter.len());
}

#[test]
fn certreq_names_the_cas() {
    let a = TestCa::root("A", &rcgen::PKCS_ECDSA_P256_SHA256);
    let b = TestCa::root("B", &rcgen::PKCS_ED25519);
    let trust = TrustStore::new(vec![a.der.clone(), b.der.clone()], &[]).unwrap();
    let body = trust.certreq();
    assert_eq!(body.len(), 1 + 2 * 20);
    let ids: Vec<&[u8]> = certreq_keyids(&body).unwrap().collect();
    let (_, ca) = X509Certificate::from_der(&a.der).unwrap();
    let want = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, ca.public_key().raw);
    assert_eq!(ids[0], want.as_ref());
    assert!(certreq_keyids(&[1, 2, 3]).is_none());
}

#[test]
fn hash_notify_lists_sha2_and_identity() {
    assert_eq!(signature_hash_notify(), [0, 2, 0, 3, 0, 4, 0, 5]);
}

#[test]
fn remembered_chains_still_expire_and_bind() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let day = Duration::from_secs(86_400);
    let c = ca.issue_at("moon", &["moon.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 1, now() - day, now() + day * 2);
    let trust = TrustStore::new(vec![ca.der.clone()], &[]).unwrap();
    let t = UnixTime::now();
    assert!(trust.verify(&c.der, &[], t, &id("@moon.example")).is_ok());
    // Remembered now; the identity is still checked every time …
    assert!(matches!(
        trust.verify(&c.der, &[], t, &id("@sun.example")),
        Err(CertRefusal::IdentityNotInCert(_))
    ));
    assert!(trust.verify(&c.der, &[], t, &id("@moon.example")).is_ok());
    // … and past notAfter the chain is built again, and refused.
    let later = UnixTime::since_unix_epoch(Duration::from_secs(t.as_secs()) + day * 3);
    assert_eq!(trust.verify(&c.der, &[], later, &id("@moon.example")).unwrap_err(), CertRefusal::Expired);
    // A changed certificate is not the remembered one.
    let mut d = c.der.clone();
    let last = d.len() - 1;
    d[last] ^= 1;
    assert!(trust.verify(&d, &[], t, &id("@moon.example")).is_err());
}
