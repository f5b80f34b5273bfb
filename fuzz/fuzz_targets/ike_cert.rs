//! Fuzz the certificate path of IKE_AUTH: CERT payload bodies (any
//! encoding, any size, any number), the peer chain built from them against
//! a fixed trust store (a real CA, and a CRL), the identity binding, and
//! RFC 7427 AUTH data checked against the end entity.
//!
//! Input: an identity selector byte, then CERT bodies each prefixed with a
//! two-octet length; what is left is the AUTH data. With selector bit 7
//! set, the genuine end-entity certificate is put first, so the mutations
//! reach intermediates, identity binding and signature checks.
//!
//! Checked: nothing panics; unknown encodings are skipped and counted
//! (X.509 + other = bodies); a refusal always has a name; a chain is
//! accepted only with the genuine end entity and an identity it names,
//! and a signature never verifies (the fuzzer does not hold the key).
#![no_main]

use esparto_ike::cert::{CertRefusal, TrustStore, x509_from_cert_payloads};
use esparto_ike::{Identity, UnixTime};
use libfuzzer_sys::fuzz_target;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::sync::OnceLock;

struct Fixture {
    trust: TrustStore,
    ee: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let ca_key = KeyPair::generate().expect("key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_der = ca.self_signed(&ca_key).expect("ca").der().to_vec();
        let issuer = Issuer::from_params(&ca, &ca_key);
        let key = KeyPair::generate().expect("key");
        let p = CertificateParams::new(vec!["moon.example".to_string()]).expect("params");
        let ee = p.signed_by(&key, &issuer).expect("ee").der().to_vec();
        Fixture {
            trust: TrustStore::new(vec![ca_der], &[]).expect("trust"),
            ee,
        }
    })
}

const IDS: [&str; 4] = ["@moon.example", "@sun.example", "CN=moon", "192.0.2.1"];

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&sel, mut rest)) = data.split_first() else { return };
    let id = Identity::parse(IDS[usize::from(sel & 3)]).expect("identity");
    let genuine = [&[4u8][..], &f.ee].concat();
    let mut bodies: Vec<&[u8]> = Vec::new();
    if sel & 0x80 != 0 {
        bodies.push(&genuine);
    }
    while rest.len() >= 2 && bodies.len() < 16 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        if n == 0 || rest.len() < 2 + n {
            break;
        }
        bodies.push(&rest[2..2 + n]);
        rest = &rest[2 + n..];
    }
    let auth = rest;
    match x509_from_cert_payloads(&bodies) {
        Ok((certs, other)) => {
            assert_eq!(certs.len() + other, bodies.len());
            let (ee, inter) = certs.split_first().expect("at least one");
            match f.trust.verify(ee, inter, UnixTime::now(), &id) {
                Ok(peer) => {
                    assert_eq!(*ee, f.ee.as_slice(), "only the genuine certificate chains");
                    assert_eq!(sel & 3, 0, "only its own identity binds");
                    assert!(peer.verify_auth(auth, b"signed octets").is_err());
                }
                Err(r) => assert!(!r.name().is_empty()),
            }
        }
        Err(r) => assert!(matches!(r, CertRefusal::NoCertificate | CertRefusal::Oversized)),
    }
});
