//! Certificate authentication against strongSwan 5.9.8: ECDSA with Esparto
//! initiating, RSA with an intermediate CA with strongSwan initiating, and
//! the refusals (expired, wrong CA, identity not in the certificate,
//! revoked by a CRL): each logged by Esparto with its reason, no Child SA
//! on either side; `swanctl --list-certs` over Esparto's VICI socket lists
//! its certificates (filters by flag and subject too). Certificates are
//! made with rcgen in a temporary directory. And `swanctl --load-all` of a
//! certificate swanctl.conf (x509/, x509ca/, private/) into Esparto, then
//! traffic through what it loaded. And IKE fragmentation (RFC 7383) with
//! an RSA-4096 chain across a path of MTU 1280 that drops IP fragments.
//! Needs root, iproute2, nftables and strongSwan: SKIP otherwise.

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
    ca_keyed(dir, name, parent, KeyPair::generate_for(alg).unwrap())
}

/// A CA with key `key`.
fn ca_keyed(dir: &Path, name: &str, parent: Option<&Ca>, key: KeyPair) -> Ca {
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
    issue_keyed(dir, ca, dns, KeyPair::generate_for(alg).unwrap(), serial, days)
}

/// An end entity for `dns` with key `key`, issued by `ca`.
fn issue_keyed(dir: &Path, ca: &Ca, dns: &str, key: KeyPair, serial: u64, days: (i64, i64)) -> (PathBuf, PathBuf) {
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

/// Esparto at gw-east, answering with its certificate: the peer of an
/// Esparto west.
fn east_cfg(certs: CertFiles) -> EspartoConfig {
    let mut c = EspartoConfig::site(
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
    let gw_east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg(files(east, vec![], &root.file, None))).unwrap();
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

/// A connection of the swanctl.conf of
/// [`swanctl_load_all_of_a_certificate_swanctl_conf`]: our certificate
/// `cert` from `x509/`, the peer's CA from `x509ca/`, our key from
/// `private/`, as a strongSwan site has them.
fn cert_conn(name: &str, peer: &str, cert: &str, remote_ts: &str) -> String {
    format!(
        r#"    {name} {{
        local_addrs = 192.0.2.1
        remote_addrs = {peer}
        proposals = aes256gcm16-prfsha256-x25519
        local {{
            auth = pubkey
            certs = {cert}
            id = west.example
        }}
        remote {{
            auth = pubkey
            id = east.example
        }}
        children {{
            lan {{
                local_ts = 10.1.0.0/24
                remote_ts = {remote_ts}
                esp_proposals = aes256gcm16
                start_action = start
            }}
        }}
    }}
"#
    )
}

/// `swanctl ARGS --uri …` against `gw`: (exit status 0, stdout and stderr).
fn swanctl(gw: &EspartoGateway, args: &[&str]) -> (bool, String) {
    let uri = format!("unix://{}", gw.control_path().with_file_name("charon.vici").display());
    let out = std::process::Command::new("timeout").arg("60").arg("swanctl").args(args).args(["--uri", &uri]).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// `swanctl --load-all` of a certificate swanctl.conf (`x509/`,
/// `x509ca/`, `private/`) into an Esparto whose TOML file has no
/// connection: the tunnel comes up with the certificate, CA and key it
/// loaded and carries traffic; `--list-certs`, `--list-authorities` and
/// the keys see them; `clear-creds` is refused while the connection needs
/// its key; a connection whose key is not loaded is refused, saying so.
#[test]
fn swanctl_load_all_of_a_certificate_swanctl_conf() {
    if skip("swanctl_load_all_of_a_certificate_swanctl_conf", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    let p256 = &rcgen::PKCS_ECDSA_P256_SHA256;
    let root = ca(d, "root", None, p256);
    let west = issue(d, &root, "west.example", p256, 1, (-1, 365));
    let east = issue(d, &root, "east.example", p256, 2, (-1, 365));
    let topo = Topology::new().unwrap();
    let gw_east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg(files(east, vec![], &root.file, None))).unwrap();
    let gw_west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |control| {
        format!("[daemon]\nworkers = 2\ncontrol = \"{}\"\nstate_dir = \"{}\"\n", control.display(), control.with_file_name("state").display())
    })
    .unwrap();

    // A swanctl directory as strongSwan sites keep it, and a spare RSA key
    // (swanctl sends it as PKCS#1) that no connection uses.
    let sw = gw_west.dir().path().join("swanctl");
    for sub in ["x509", "x509ca", "private"] {
        std::fs::create_dir_all(sw.join(sub)).unwrap();
    }
    std::fs::copy(&west.0, sw.join("x509/west.crt")).unwrap();
    std::fs::copy(&root.file, sw.join("x509ca/root.crt")).unwrap();
    std::fs::copy(&west.1, sw.join("private/west.key")).unwrap();
    let spare = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
    std::fs::write(sw.join("private/spare-rsa.key"), spare.serialize_pem()).unwrap();
    let conf = sw.join("swanctl.conf");
    let site = cert_conn("site", "192.0.2.2", "west.crt", "10.2.0.0/24");
    // An authority section too (its CA is root's again).
    let authorities = "authorities {\n    site-ca {\n        cacert = root.crt\n    }\n}\n";
    std::fs::write(&conf, format!("connections {{\n{site}}}\n{authorities}")).unwrap();
    let file = conf.display().to_string();

    let (good, out) = swanctl(&gw_west, &["--load-all", "--noprompt", "--file", &file]);
    assert!(good, "{out}");
    assert_eq!(out.matches("loaded certificate from").count(), 2, "{out}");
    assert_eq!(out.matches("loaded private key from").count(), 2, "{out}");
    assert!(out.contains("loaded authority 'site-ca'"), "{out}");
    assert!(out.contains("successfully loaded 1 connections, 0 unloaded"), "{out}");
    let up = established(&gw_west, Duration::from_secs(20)) && established(&gw_east, Duration::from_secs(5));
    let ok = up && pings(&topo);
    if !ok {
        gw_west.dir().keep();
        gw_east.dir().keep();
    }
    assert!(up, "no IKE SA with a Child SA on both gateways");
    assert!(ok, "no traffic through the tunnel");
    let listed = list_certs(&gw_west, &[]);
    assert!(listed.contains("subject:  \"CN=west.example\"") && listed.contains("has private key"), "{listed}");
    assert!(listed.contains("subject:  \"CN=root\""), "{listed}");
    let (good, conns) = swanctl(&gw_west, &["--list-conns"]);
    assert!(good && conns.contains("local public key authentication:") && conns.contains("id: west.example"), "{conns}");
    let (good, auths) = swanctl(&gw_west, &["--list-authorities"]);
    assert!(good && auths.contains("site-ca:") && auths.contains("cacert: CN=root"), "{auths}");
    let (good, keys) = swanctl(&gw_west, &["--load-creds", "--raw", "--noprompt", "--file", &file]);
    assert!(good, "{keys}");
    assert!(keys.contains("get-keys reply {keys=["), "{keys}");

    // The connection signs with the loaded key: clearing it is refused,
    // and changes nothing.
    let id = gw_west.sas().unwrap()[0].id.clone();
    let (good, out) = swanctl(&gw_west, &["--load-creds", "--clear", "--raw", "--noprompt", "--file", &file]);
    assert!(good, "{out}");
    assert!(out.contains("clear-creds reply {success=no errmsg=") && out.contains("private keys loaded over VICI"), "{out}");
    assert_eq!(gw_west.sas().unwrap()[0].id, id, "a refused clear-creds leaves the IKE SA alone");

    // One more connection, whose certificate's key is not loaded: refused,
    // saying so; the other one stays.
    let other = issue(d, &root, "other.example", p256, 3, (-1, 365));
    std::fs::copy(&other.0, sw.join("x509/other.crt")).unwrap();
    let other = cert_conn("other", "192.0.2.3", "other.crt", "10.3.0.0/24");
    std::fs::write(&conf, format!("connections {{\n{site}{other}}}\n{authorities}")).unwrap();
    let (good, out) = swanctl(&gw_west, &["--load-conns", "--file", &file]);
    assert!(!good, "{out}");
    assert!(out.contains("load-conn 'other' (VICI): connections.other.local.certs: none of the 2 private keys"), "{out}");
    assert!(out.contains("loaded 1 of 2 connections, 1 failed to load, 0 unloaded"), "{out}");
    assert_eq!(gw_west.sas().unwrap()[0].id, id, "a refused load-conn leaves the others alone");
    gw_west.stop().unwrap();
    gw_east.stop().unwrap();
}

/// A fresh RSA-4096 key.
fn rsa4096() -> KeyPair {
    KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_4096).unwrap()
}

/// The WAN between the gateways as a path that neither carries datagrams
/// above 1,280 octets nor IP fragments: MTU 1280 on both ends, and an
/// nftables rule in each gateway's namespace that drops every IPv4
/// fragment as it arrives, ahead of reassembly (prerouting at priority
/// -500; the kernel reassembles at -400), as a middlebox that drops
/// fragments would.
fn small_path_without_ip_fragments(topo: &Topology, dir: &Path) {
    const RULES: &str = "table ip esparto_test_fragdrop {\n  chain pre {\n    type filter hook prerouting priority -500; policy accept;\n    ip frag-off & 0x3fff != 0 counter drop\n  }\n}\n";
    for gw in [Node::GwWest, Node::GwEast] {
        let ns = topo.ns(gw);
        let o = ns.ip(&["link", "set", "wan0", "mtu", "1280"]).unwrap();
        assert!(o.status.success(), "mtu: {}", String::from_utf8_lossy(&o.stderr));
        let rules = dir.join("fragdrop.nft");
        std::fs::write(&rules, RULES).unwrap();
        let o = ns.exec("nft", &["-f", &rules.display().to_string()]).unwrap();
        assert!(o.status.success(), "nft: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// IP fragments the rules of [`small_path_without_ip_fragments`] dropped
/// in `gw`'s namespace.
fn fragments_dropped(topo: &Topology, gw: Node) -> u64 {
    let o = topo.ns(gw).exec("nft", &["list", "table", "ip", "esparto_test_fragdrop"]).unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    text.split("packets ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// IKE_AUTH with an RSA-4096 certificate and two RSA-4096 intermediates
/// (about 5 KB each way) across a path of MTU 1280 that drops IP
/// fragments: with IKE fragmentation (RFC 7383, both sides' default) the
/// tunnel comes up on every one of 20 tries, 10 with each side
/// initiating, and carries traffic; with fragmentation off on either side
/// it does not come up at all, so the path is what the test says.
#[test]
fn fragmented_ike_auth_with_an_rsa_4096_chain_on_a_path_that_drops_ip_fragments() {
    if skip("interop_strongswan_certs", true) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let pki = tempfile::tempdir().unwrap();
    let d = pki.path();
    let root = ca_keyed(d, "root4096", None, rsa4096());
    let inter1 = ca_keyed(d, "inter1", Some(&root), rsa4096());
    let inter2 = ca_keyed(d, "inter2", Some(&inter1), rsa4096());
    let chain = vec![inter2.file.clone(), inter1.file.clone()];
    let west = files(issue_keyed(d, &inter2, "west.example", rsa4096(), 1, (-1, 365)), chain.clone(), &root.file, None);
    let east = files(issue_keyed(d, &inter2, "east.example", rsa4096(), 2, (-1, 365)), chain, &root.file, None);
    let topo = Topology::new().unwrap();
    small_path_without_ip_fragments(&topo, d);

    // Esparto initiates (`esparto up`), 10 times.
    let mut swan = swan_cfg(false, "@east.example", east.clone());
    let mut charon = Charon::start(topo.ns(Node::GwEast), swan.clone()).unwrap();
    let mut cfg = esparto_cfg(false, "@west.example", west.clone());
    let gw = EspartoGateway::start(topo.ns(Node::GwWest), bin, &cfg).unwrap();
    let mut failed = Vec::new();
    for i in 0..10 {
        let (up, out) = gw.cli(&["up", "site", "--quiet", "--timeout", "20"]).unwrap();
        if !up || charon.wait_child_installed(Duration::from_secs(10)).is_err() {
            failed.push(format!("Esparto initiating, try {i}: {out}"));
        } else if i == 0 && !pings(&topo) {
            failed.push("Esparto initiating: no traffic".into());
        }
        let _ = gw.cli(&["down", "site", "--quiet"]);
    }
    let ike = gw.status().unwrap().ike;
    let (sent, reassembled) = (ike.get("fragments_sent").copied().unwrap_or(0), ike.get("messages_reassembled").copied().unwrap_or(0));
    assert!(sent >= 10 * 2 && reassembled >= 10, "fragments sent {sent}, messages reassembled {reassembled}");
    gw.stop().unwrap();

    // strongSwan initiates, 10 times.
    swan.initiator = true;
    charon.reload(swan.clone()).unwrap();
    cfg = esparto_cfg(false, "@west.example", west.clone());
    let gw = EspartoGateway::start(topo.ns(Node::GwWest), bin, &cfg).unwrap();
    for i in 0..10 {
        let up = charon.initiate(Duration::from_secs(20)).is_ok() && established(&gw, Duration::from_secs(10));
        if !up {
            failed.push(format!("strongSwan initiating, try {i}"));
        } else if i == 0 && !pings(&topo) {
            failed.push("strongSwan initiating: no traffic".into());
        }
        let _ = charon.terminate(Duration::from_secs(10));
    }
    let ike = gw.status().unwrap().ike;
    let (sent, reassembled) = (ike.get("fragments_sent").copied().unwrap_or(0), ike.get("messages_reassembled").copied().unwrap_or(0));
    assert!(sent >= 10 * 2 && reassembled >= 10, "as responder: fragments sent {sent}, messages reassembled {reassembled}");
    gw.stop().unwrap();
    if !failed.is_empty() {
        charon.dir().keep();
    }
    assert!(failed.is_empty(), "{failed:#?}");

    // Fragmentation off on Esparto's side, then on strongSwan's: IKE_AUTH
    // cannot cross (Esparto initiates; nothing comes up).
    swan.initiator = false;
    for (esparto_frag, swan_frag) in [("\"no\"", None), ("\"yes\"", Some("no"))] {
        let dropped_before = fragments_dropped(&topo, Node::GwEast);
        swan.fragmentation = swan_frag.map(str::to_string);
        charon.reload(swan.clone()).unwrap();
        let mut c = esparto_cfg(false, "@west.example", west.clone());
        c.conn_extra.push(("fragmentation".into(), esparto_frag.into()));
        let gw = EspartoGateway::start(topo.ns(Node::GwWest), bin, &c).unwrap();
        let (up, out) = gw.cli(&["up", "site", "--quiet", "--timeout", "8"]).unwrap();
        assert!(!up, "fragmentation {esparto_frag} / strongSwan {swan_frag:?}: came up across the path: {out}");
        assert!(!charon.child_installed().unwrap_or(false));
        let sent = gw.status().unwrap().ike.get("fragments_sent").copied().unwrap_or(0);
        assert_eq!(sent, 0, "no fragments without both sides announcing them");
        assert!(fragments_dropped(&topo, Node::GwEast) > dropped_before, "the whole IKE_AUTH went out in IP fragments, and they were dropped");
        gw.stop().unwrap();
    }
    charon.stop().unwrap();
}
