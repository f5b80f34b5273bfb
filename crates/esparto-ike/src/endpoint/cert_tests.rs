//! IKE_AUTH with certificates between two endpoints: every key type, an
//! intermediate CA, both roles, and each refusal (expired, wrong CA,
//! identity not in the certificate, revoked) ending without a Child SA.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::cert::tests::{TestCa, TestCert};
use crate::cert::{LocalCredential, SigningKey, TrustStore};
use crate::config::ChildConfig;
use crate::event::AuthFailure;
use crate::identity::Identity;
use crate::spi::RandomSpiAllocator;
use esparto_crypto::DeterministicRng;
use esparto_wire::ike::{Message, NotifyType, PayloadRepr, PayloadType};
use rcgen::SignatureAlgorithm;
use std::sync::Arc;

const MOON: &str = "10.0.0.1";
const SUN: &str = "10.0.0.2";

/// One side: its certificate (with intermediates), the CAs it trusts and
/// CRLs, its identity and the one it expects.
struct Side<'a> {
    addr: &'a str,
    peer: &'a str,
    cert: &'a TestCert,
    chain: Vec<Vec<u8>>,
    cas: Vec<Vec<u8>>,
    crls: Vec<Vec<u8>>,
    id: Option<&'a str>,
    peer_id: Option<&'a str>,
    pss: bool,
}

fn endpoint(seed: u64, s: &Side<'_>) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![s.addr.parse().unwrap()];
    c.remote_addrs = vec![s.peer.parse().unwrap()];
    c.local.id = s.id.map(|i| Identity::parse(i).unwrap());
    c.remote.id = s.peer_id.map(|i| Identity::parse(i).unwrap());
    let mut chain = vec![s.cert.der.clone()];
    chain.extend(s.chain.iter().cloned());
    let key = SigningKey::from_pkcs8(&s.cert.key, s.pss).unwrap();
    c.local.credential = Some(Arc::new(LocalCredential::new(chain, key).unwrap()));
    c.remote.trust = Some(Arc::new(TrustStore::new(s.cas.clone(), &s.crls).unwrap()));
    let (l, r) = if s.addr == MOON {
        ("10.1.0.0/16", "10.2.0.0/16")
    } else {
        ("10.2.0.0/16", "10.1.0.0/16")
    };
    c.children.push(ChildConfig::new("net", l, r, "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep
}

struct Outcome {
    i_children: usize,
    r_children: usize,
    i_failures: Vec<AuthFailure>,
    r_failures: Vec<AuthFailure>,
    /// Payload types of the IKE_SA_INIT response.
    init_response: Vec<(PayloadType, Option<NotifyType>)>,
}

fn run(i: &Side<'_>, r: &Side<'_>) -> Outcome {
    let mut ei = endpoint(1, i);
    let mut er = endpoint(2, r);
    let now = Instant::now();
    ei.initiate(now, "gw", None).unwrap();
    let mut init_response = None;
    for _ in 0..20 {
        let mut moved = false;
        while let Some(t) = ei.poll_transmit() {
            er.handle_datagram(now, UnixTime::now(), t.remote, t.local, &t.data);
            moved = true;
        }
        while let Some(t) = er.poll_transmit() {
            if init_response.is_none() {
                let m = Message::parse(&t.data).unwrap();
                init_response = Some(
                    m.payloads
                        .iter()
                        .map(|p| {
                            let n = match p {
                                PayloadRepr::Notify(n) => Some(n.kind),
                                _ => None,
                            };
                            (p.payload_type(), n)
                        })
                        .collect(),
                );
            }
            ei.handle_datagram(now, UnixTime::now(), t.remote, t.local, &t.data);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    let drain = |ep: &mut Endpoint| {
        let (mut children, mut failures) = (0, Vec::new());
        while let Some(e) = ep.poll_event() {
            match e {
                Event::ChildSaEstablished(_) => children += 1,
                Event::AuthFailed { reason, .. } => failures.push(reason),
                _ => {}
            }
        }
        (children, failures)
    };
    let (i_children, i_failures) = drain(&mut ei);
    let (r_children, r_failures) = drain(&mut er);
    Outcome {
        i_children,
        r_children,
        i_failures,
        r_failures,
        init_response: init_response.unwrap_or_default(),
    }
}

fn side<'a>(addr: &'a str, peer: &'a str, cert: &'a TestCert, ca: &TestCa) -> Side<'a> {
    Side {
        addr,
        peer,
        cert,
        chain: vec![],
        cas: vec![ca.der.clone()],
        crls: vec![],
        id: None,
        peer_id: None,
        pss: false,
    }
}

fn assert_up(o: &Outcome, what: &str) {
    assert!(o.i_failures.is_empty() && o.r_failures.is_empty(), "{what}: {:?} {:?}", o.i_failures, o.r_failures);
    assert_eq!((o.i_children, o.r_children), (1, 1), "{what}");
}

#[test]
fn every_key_type_establishes() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let algs: [(&'static SignatureAlgorithm, bool, &str); 5] = [
        (&rcgen::PKCS_ECDSA_P256_SHA256, false, "ecdsa-p256"),
        (&rcgen::PKCS_ECDSA_P384_SHA384, false, "ecdsa-p384"),
        (&rcgen::PKCS_ED25519, false, "ed25519"),
        (&rcgen::PKCS_RSA_SHA256, false, "rsa"),
        (&rcgen::PKCS_RSA_SHA256, true, "rsa-pss"),
    ];
    for (alg, pss, what) in algs {
        let moon = ca.issue("moon", &["moon.example"], alg, 1);
        let sun = ca.issue("sun", &["sun.example"], alg, 2);
        let mut i = side(MOON, SUN, &moon, &ca);
        i.id = Some("@moon.example");
        i.peer_id = Some("@sun.example");
        i.pss = pss;
        let mut r = side(SUN, MOON, &sun, &ca);
        r.id = Some("@sun.example");
        r.peer_id = Some("@moon.example");
        r.pss = pss;
        let o = run(&i, &r);
        assert_up(&o, what);
        assert!(o.init_response.contains(&(PayloadType::CERTREQ, None)), "{what}: CERTREQ");
        assert!(
            o.init_response
                .contains(&(PayloadType::NOTIFY, Some(NotifyType::SIGNATURE_HASH_ALGORITHMS))),
            "{what}: SIGNATURE_HASH_ALGORITHMS"
        );
    }
}

#[test]
fn intermediate_ca_and_subject_dn_identities() {
    // Each side trusts only the root; the initiator's certificate comes
    // from an intermediate it sends along. No identities configured: both
    // use their subject DN, and accept any identity the chain names.
    let root = TestCa::root("Root", &rcgen::PKCS_RSA_SHA256);
    let inter = root.intermediate("Intermediate");
    let moon = inter.issue("moon", &["moon.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 1);
    let sun = root.issue("sun", &["sun.example"], &rcgen::PKCS_ED25519, 2);
    let mut i = side(MOON, SUN, &moon, &root);
    i.chain = vec![inter.der.clone()];
    let mut r = side(SUN, MOON, &sun, &root);
    r.peer_id = Some("CN=moon, O=Esparto Test");
    assert_up(&run(&i, &r), "intermediate");
    // Without the intermediate the responder cannot build the chain.
    i.chain.clear();
    let o = run(&i, &r);
    assert_eq!(o.r_failures, vec![AuthFailure::UnknownCa]);
    assert_eq!((o.i_children, o.r_children), (0, 0));
}

#[test]
fn refusals_install_nothing() {
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let other = TestCa::root("Other", &rcgen::PKCS_ECDSA_P256_SHA256);
    let day = std::time::Duration::from_secs(86_400);
    let now = crate::cert::tests::now();
    let alg = &rcgen::PKCS_ECDSA_P256_SHA256;
    let good = ca.issue("moon", &["moon.example"], alg, 1);
    let sun = ca.issue("sun", &["sun.example"], alg, 2);
    let expired = ca.issue_at("moon", &["moon.example"], alg, 3, now - day * 30, now - day);
    let foreign = other.issue("moon", &["moon.example"], alg, 4);
    let revoked = ca.issue("moon", &["moon.example"], alg, 5);
    let crl = ca.crl(&[5]);
    let responder = |crls: Vec<Vec<u8>>| {
        let mut r = side(SUN, MOON, &sun, &ca);
        r.id = Some("@sun.example");
        r.peer_id = Some("@moon.example");
        r.crls = crls;
        r
    };
    let initiator = |cert| {
        let mut i = side(MOON, SUN, cert, &ca);
        i.id = Some("@moon.example");
        i
    };
    // (initiator's certificate, the identity it claims, the responder's CRLs, the refusal)
    type Case<'a> = (&'a TestCert, Option<&'a str>, Vec<Vec<u8>>, AuthFailure);
    let cases: [Case<'_>; 4] = [
        (&expired, None, vec![], AuthFailure::CertExpired),
        (&foreign, None, vec![], AuthFailure::UnknownCa),
        (&good, Some("@mars.example"), vec![], AuthFailure::IdentityNotInCert),
        (&revoked, None, vec![crl.clone()], AuthFailure::CertRevoked),
    ];
    for (cert, claim, crls, want) in cases {
        let mut i = initiator(cert);
        if let Some(c) = claim {
            i.id = Some(c);
        }
        let mut r = responder(crls);
        if claim.is_some() {
            r.peer_id = None;
        }
        let o = run(&i, &r);
        assert_eq!(o.r_failures, vec![want], "{}", want.name());
        assert_eq!(o.i_failures, vec![AuthFailure::RejectedByPeer], "{}", want.name());
        assert_eq!((o.i_children, o.r_children), (0, 0), "{}", want.name());
    }
    // The same CRL does not stop a certificate it does not list.
    assert_up(&run(&initiator(&good), &responder(vec![crl])), "CRL, not revoked");

    // The initiator refuses the responder's expired certificate: the
    // responder installed its half before hearing, the initiator nothing.
    let sun_expired = ca.issue_at("sun", &["sun.example"], alg, 6, now - day * 30, now - day);
    let mut r = side(SUN, MOON, &sun_expired, &ca);
    r.id = Some("@sun.example");
    let mut i = initiator(&good);
    i.peer_id = Some("@sun.example");
    let o = run(&i, &r);
    assert_eq!(o.i_failures, vec![AuthFailure::CertExpired]);
    assert_eq!(o.i_children, 0);
}

#[test]
fn psk_peer_cannot_pass_for_a_certificate_connection() {
    // The responder wants a certificate; an initiator with a PSK (same
    // identities, same key on both sides) is refused.
    let ca = TestCa::root("Root", &rcgen::PKCS_ECDSA_P256_SHA256);
    let sun = ca.issue("sun", &["sun.example"], &rcgen::PKCS_ECDSA_P256_SHA256, 2);
    let mut r = side(SUN, MOON, &sun, &ca);
    r.id = Some("@sun.example");
    let mut er = endpoint(2, &r);
    er.secrets_mut().add_psk(&[], b"secret");
    let mut ei = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(1)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![MOON.parse().unwrap()];
    c.remote_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(Identity::parse("@moon.example").unwrap());
    c.children.push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
    ei.add_connection(c).unwrap();
    ei.secrets_mut().add_psk(&[], b"secret");
    let now = Instant::now();
    ei.initiate(now, "gw", None).unwrap();
    for _ in 0..10 {
        while let Some(t) = ei.poll_transmit() {
            er.handle_datagram(now, UnixTime::now(), t.remote, t.local, &t.data);
        }
        while let Some(t) = er.poll_transmit() {
            ei.handle_datagram(now, UnixTime::now(), t.remote, t.local, &t.data);
        }
    }
    let mut failed = false;
    while let Some(e) = er.poll_event() {
        assert!(!matches!(e, Event::ChildSaEstablished(_) | Event::IkeSaEstablished { .. }));
        failed |= matches!(e, Event::AuthFailed { .. });
    }
    assert!(failed);
}
