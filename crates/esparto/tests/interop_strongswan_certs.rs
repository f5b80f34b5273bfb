//! Certificate authentication against strongSwan 5.9.8: ECDSA with Esparto
//! initiating, RSA with an intermediate CA with strongSwan initiating, and
//! the refusals (expired, wrong CA, identity not in the certificate,
//! revoked by a CRL): each logged by Esparto with its reason, no Child SA
//! on either side; `swanctl --list-certs` over Esparto's VICI socket lists
//! its certificates (filters by flag and subject too). Certificates are
//! made with rcgen in a temporary directory. Needs root, iproute2 and
//! strongSwan: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::strongswan::{CertFiles, Charon, SwanConfig};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, IsCa, Issuer,
    KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SerialNumber, SignatureAlgorithm,
};

const IKE: &str = "aes256gcm16-prfsha256-x25519";

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    file: PathBuf,
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

const DAY: Duration = Duration::from_secs(86_400);

fn ca(dir: &Path, name: &str, parent: Option<&Ca>, alg: &'static SignatureAlgorithm) -> Ca {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = now() - DAY;
    params.not_after = now() + DAY * 3650;
    let cert = match parent {
        None => params.self_signed(&key).unwrap(),
        Some(p) => params.signed_by(&key, &Issuer::from_params(&p.params, &p.key)).unwrap(),
    };
    let file = dir.join(format!("{name}.crt"));
    std::fs::write(&file, cert.pem()).unwrap();
    Ca { params, key, file }
}

/// An end entity for `dns` issued by `ca`: (certificate, key) files.
fn issue(dir: &Path, ca: &Ca, dns: &str, alg: &'static SignatureAlgorithm, serial: u64, days: (i64, i64)) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut p = CertificateParams::new(vec![dns.to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, dns);
    p.serial_number = Some(SerialNumber::from(serial));
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.not_before = now() + time::Duration::days(days.0);
    p.not_after = now() + time::Duration::days(days.1);
    let cert = p.signed_by(&key, &Issuer::from_params(&ca.params, &ca.key)).unwrap();
    let name = format!("{dns}-{serial}");
    let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    (c, k)
}

fn crl(dir: &Path, ca: &Ca, serials: &[u64]) -> PathBuf {
    let p = CertificateRevocationListParams {
        this_update: now() - Duration::from_secs(3600),
        next_update: now() + DAY * 30,
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
    let f = dir.join("ca.crl");
    std::fs::write(&f, p.signed_by(&Issuer::from_params(&ca.params, &ca.key)).unwrap().pem().unwrap()).unwrap();
    f
}

fn pings(topo: &Topology) -> bool {
    let there = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    traffic::ping(topo.ns(Node::HostWest), there, 2, Duration::from_millis(100)).unwrap().all_answered()
}

fn files(cert: (PathBuf, PathBuf), intermediates: Vec<PathBuf>, cacert: &Path, crl: Option<PathBuf>) -> CertFiles {
    CertFiles { cert: cert.0, key: cert.1, intermediates, cacert: cacert.to_path_buf(), crl }
}

fn esparto_cfg(initiator: bool, local_id: &str, certs: CertFiles) -> EspartoConfig {
    let mut c = EspartoConfig::site(
        Node::GwWest,
        Keying::Ike {
            proposal: IKE.into(),
            local_id: local_id.into(),
            remote_id: "@east.example".into(),
            psk: String::new(),
            initiator,
        },
    )
    .unwrap();
    c.certs = Some(certs);
    c
}

fn swan_cfg(initiator: bool, local_id: &str, certs: CertFiles) -> SwanConfig {
    let mut c = SwanConfig::site(Node::GwEast, "unused", IKE, "aes256gcm16").unwrap();
    c.initiator = initiator;
    c.local_id = local_id.into();
    c.remote_id = "@west.example".into();
    c.certs = Some(certs);
    c
}

/// `swanctl --list-certs ARGS` against `gw`'s VICI socket: its output.
fn list_certs(gw: &EspartoGateway, args: &[&str]) -> String {
    let uri = format!("unix://{}", gw.control_path().with_file_name("charon.vici").display());
    let out = std::process::Command::new("swanctl").arg("--list-certs").args(args).args(["--uri", &uri]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "swanctl --list-certs {args:?}: {text}");
    text
}

fn established(gw: &EspartoGateway, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if gw.sas().unwrap().iter().any(|s| s.state == "established" && !s.children.is_empty()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn strongswan_certificates_both_roles_and_refusals() {
    if skip("interop_strongswan_certs", true) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    let root = ca(d, "root", None, &rcgen::PKCS_ECDSA_P256_SHA256);
    let rsa_root = ca(d, "rsa-root", None, &rcgen::PKCS_RSA_SHA256);
    let inter = ca(d, "intermediate", Some(&rsa_root), &rcgen::PKCS_RSA_SHA256);
    let other = ca(d, "other", None, &rcgen::PKCS_ECDSA_P256_SHA256);
    let ec = &rcgen::PKCS_ECDSA_P256_SHA256;
    let rsa = &rcgen::PKCS_RSA_SHA256;
    let topo = Topology::new().unwrap();
    let mut failures = Vec::new();

    // ECDSA, Esparto initiates.
    let west = issue(d, &root, "west.example", ec, 1, (-1, 365));
    let east = issue(d, &root, "east.example", ec, 2, (-1, 365));
    let mut charon = Charon::start(
        topo.ns(Node::GwEast),
        swan_cfg(false, "@east.example", files(east.clone(), vec![], &root.file, None)),
    )
    .unwrap();
    let gw = EspartoGateway::start(
        topo.ns(Node::GwWest),
        bin,
        &esparto_cfg(true, "@west.example", files(west.clone(), vec![], &root.file, None)),
    )
    .unwrap();
    if !established(&gw, Duration::from_secs(15)) || charon.wait_child_installed(Duration::from_secs(10)).is_err() || !pings(&topo) {
        failures.push("ECDSA, Esparto initiator: no working tunnel".to_string());
        gw.dir().keep();
        charon.dir().keep();
    }
    gw.stop().unwrap();

    // RSA with an intermediate CA on both sides, strongSwan initiates.
    let west_rsa = issue(d, &inter, "west.example", rsa, 3, (-1, 365));
    let east_rsa = issue(d, &inter, "east.example", rsa, 4, (-1, 365));
    charon
        .reload(swan_cfg(true, "@east.example", files(east_rsa, vec![inter.file.clone()], &rsa_root.file, None)))
        .unwrap();
    let gw = EspartoGateway::start(
        topo.ns(Node::GwWest),
        bin,
        &esparto_cfg(false, "@west.example", files(west_rsa.clone(), vec![inter.file.clone()], &rsa_root.file, None)),
    )
    .unwrap();
    let up = charon.initiate(Duration::from_secs(15)).is_ok() && established(&gw, Duration::from_secs(10)) && pings(&topo);
    if !up {
        failures.push("RSA + intermediate, Esparto responder: no working tunnel".to_string());
        gw.dir().keep();
        charon.dir().keep();
    }
    // swanctl lists Esparto's certificates over VICI: our own with its
    // key, the intermediate we send and the root we trust, each once.
    let listed = list_certs(&gw, &[]);
    if !listed.contains("List of X.509 End Entity Certificates") || !listed.contains("RSA 2048 bits, has private key") {
        failures.push(format!("swanctl --list-certs: no end entity with its key:\n{listed}"));
    }
    for want in ["subject:  \"CN=west.example\"", "subject:  \"CN=intermediate\"", "subject:  \"CN=rsa-root\""] {
        if listed.matches(want).count() != 1 {
            failures.push(format!("swanctl --list-certs: {want} not listed once:\n{listed}"));
        }
    }
    let ca_only = list_certs(&gw, &["--type", "x509", "--flag", "ca"]);
    if ca_only.contains("CN=west.example") || !ca_only.contains("CN=rsa-root") {
        failures.push(format!("swanctl --list-certs --flag ca:\n{ca_only}"));
    }
    let by_subject = list_certs(&gw, &["--subject", "west.example"]);
    if !by_subject.contains("CN=west.example") || by_subject.contains("CN=rsa-root") {
        failures.push(format!("swanctl --list-certs --subject west.example:\n{by_subject}"));
    }
    gw.stop().unwrap();

    // Refusals: strongSwan initiates with a bad certificate; Esparto
    // (responder) names the reason and installs nothing.
    let expired = issue(d, &root, "east.example", ec, 10, (-30, -1));
    let foreign = issue(d, &other, "east.example", ec, 11, (-1, 365));
    let revoked = issue(d, &root, "east.example", ec, 12, (-1, 365));
    let crl_file = crl(d, &root, &[12]);
    // (case, strongSwan's certificate and key, its identity, Esparto's CRL, the logged reason)
    type Case<'a> = (&'a str, (PathBuf, PathBuf), &'a str, Option<PathBuf>, &'a str);
    let cases: [Case<'_>; 4] = [
        ("expired", expired, "@east.example", None, "certificate expired"),
        ("wrong CA", foreign, "@east.example", None, "not issued by a trusted CA"),
        ("identity not in certificate", east.clone(), "@mars.example", None, "not in the certificate"),
        ("revoked", revoked, "@east.example", Some(crl_file), "revoked"),
    ];
    for (what, cert, id, crl, reason) in cases {
        let mut scfg = swan_cfg(true, id, files(cert, vec![], &root.file, None));
        if what == "identity not in certificate" {
            scfg.local_id = id.into();
        }
        charon.reload(scfg).unwrap();
        let mut ecfg = esparto_cfg(false, "@west.example", files(west.clone(), vec![], &root.file, crl));
        if what == "identity not in certificate" {
            if let Keying::Ike { remote_id, .. } = &mut ecfg.keying {
                *remote_id = "%any".into();
            }
        }
        let gw = EspartoGateway::start(topo.ns(Node::GwWest), bin, &ecfg).unwrap();
        let _ = charon.initiate_may_fail(Duration::from_secs(10));
        let log_path = gw.dir().path().join("esparto.log");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut logged = false;
        while Instant::now() < deadline && !logged {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(l) = log.lines().find(|l| l.contains("authentication of") && l.contains(reason)) {
                eprintln!("{what}: {l}");
                logged = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let sas = gw.sas().unwrap();
        let installed = sas.iter().any(|s| !s.children.is_empty()) || charon.child_installed().unwrap_or(true);
        if !logged || installed {
            failures.push(format!("{what}: logged with reason {logged}, Child SA installed {installed}"));
            gw.dir().keep();
            charon.dir().keep();
        }
        gw.stop().unwrap();
    }
    charon.stop().unwrap();
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
}

/// Two Esparto gateways with Ed25519 certificates from one CA; west
/// initiates, traffic crosses both ways.
#[test]
fn esparto_to_esparto_ed25519() {
    if skip("esparto_to_esparto_ed25519", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    let root = ca(d, "root", None, &rcgen::PKCS_ED25519);
    let ed = &rcgen::PKCS_ED25519;
    let west = issue(d, &root, "west.example", ed, 1, (-1, 365));
    let east = issue(d, &root, "east.example", ed, 2, (-1, 365));
    let topo = Topology::new().unwrap();
    let gw_west = EspartoGateway::start(
        topo.ns(Node::GwWest),
        bin,
        &esparto_cfg(true, "@west.example", files(west, vec![], &root.file, None)),
    )
    .unwrap();
    let mut ecfg = EspartoConfig::site(
        Node::GwEast,
        Keying::Ike {
            proposal: IKE.into(),
            local_id: "@east.example".into(),
            remote_id: "@west.example".into(),
            psk: String::new(),
            initiator: false,
        },
    )
    .unwrap();
    ecfg.certs = Some(files(east, vec![], &root.file, None));
    let gw_east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let up = established(&gw_west, Duration::from_secs(20)) && established(&gw_east, Duration::from_secs(5));
    let back = Topology::addr(Node::HostWest, Net::Lan, Family::V4);
    let ok = up
        && pings(&topo)
        && traffic::ping(topo.ns(Node::HostEast), back, 2, Duration::from_millis(100)).unwrap().all_answered();
    if !ok {
        gw_west.dir().keep();
        gw_east.dir().keep();
    }
    assert!(up, "no IKE SA with a Child SA on both gateways");
    assert!(ok, "no traffic through the tunnel");
    gw_west.stop().unwrap();
    gw_east.stop().unwrap();
}
