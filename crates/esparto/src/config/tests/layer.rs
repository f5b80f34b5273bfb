//! Connections and secrets loaded over VICI, checked beside the file's.

use super::*;

fn sec(entries: &[(&str, LayerValue)]) -> LayerValue {
    LayerValue::Section(entries.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
}
fn st(s: &str) -> LayerValue {
    LayerValue::Str(s.into())
}
fn list(items: &[&str]) -> LayerValue {
    LayerValue::List(items.iter().map(|s| s.to_string()).collect())
}

/// An IKE connection as swanctl sends it: every value a string.
fn vici_conn(remote: &str, remote_ts: &str, window: &str) -> LayerValue {
    sec(&[
        ("local_addrs", list(&["192.0.2.1"])),
        ("remote_addrs", list(&[remote])),
        ("version", st("2")),
        ("encap", st("yes")),
        ("rekey_time", st("4h")),
        ("local", sec(&[("auth", st("psk")), ("id", st("west"))])),
        ("remote", sec(&[("auth", st("psk")), ("id", st("east"))])),
        (
            "children",
            sec(&[(
                "net",
                sec(&[
                    ("local_ts", list(&["10.1.0.0/16"])),
                    ("remote_ts", list(&[remote_ts])),
                    ("esp_proposals", list(&["aes256gcm16"])),
                    ("replay_window", st(window)),
                    ("start_action", st("trap")),
                ]),
            )]),
        ),
    ])
}

fn psk() -> LayerValue {
    sec(&[("ids", list(&["west", "east"])), ("secret", st("0x00112233445566778899aabbccddeeff"))])
}

fn layered(file: &str, layer: &Layer) -> Result<Config, ConfigErrors> {
    parse_in(file, "gw.toml".into(), ".".into(), "gw.toml".into(), &Host::default(), false, layer)
}

#[test]
fn a_vici_connection_loads_beside_the_files_with_strings_for_numbers_and_booleans() {
    let mut layer = Layer::default();
    layer.set_conn("vpn", vici_conn("192.0.2.9", "10.9.0.0/16", "128"));
    layer.set_secret("ike-vpn", psk());
    let c = layered(&base(), &layer).unwrap();
    let names: Vec<&str> = c.connections.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["site", "vpn"]);
    assert_eq!(c.connections[1].children[0].replay_window, 128);
    assert_eq!(c.layer, layer);
    assert_eq!(&*c.text, base().as_str());
}

/// `unique` and `fragmentation` as swanctl sends them (strings).
#[test]
fn a_vici_connection_takes_unique_and_fragmentation() {
    let mut layer = Layer::default();
    let LayerValue::Section(mut conn) = vici_conn("192.0.2.9", "10.9.0.0/16", "128") else { unreachable!() };
    conn.push(("unique".into(), st("replace")));
    conn.push(("fragmentation".into(), st("accept")));
    layer.set_conn("vpn", LayerValue::Section(conn.clone()));
    layer.set_secret("ike-vpn", psk());
    let c = layered(&base(), &layer).unwrap();
    let ike = c.connections[1].ike.as_ref().unwrap();
    assert_eq!((ike.unique, ike.fragmentation), (esparto_ike::Unique::Replace, esparto_ike::Fragmentation::Accept));
    conn.retain(|(k, _)| k != "fragmentation");
    conn.push(("fragmentation".into(), st("force")));
    layer.set_conn("vpn", LayerValue::Section(conn));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.contains("load-conn 'vpn' (VICI): connections.vpn.fragmentation: 'force' fragments IKEv1's first message"), "{e}");
}

#[test]
fn errors_in_a_vici_connection_name_it_and_the_key() {
    let mut layer = Layer::default();
    layer.set_conn("vpn", vici_conn("192.0.2.9", "10.9.0.0/16", "many"));
    layer.set_secret("ike-vpn", psk());
    let e = layered(&base(), &layer).unwrap_err();
    assert_eq!(
        e.to_string(),
        "load-conn 'vpn' (VICI): connections.vpn.children.net.replay_window: expected a number, found 'many'"
    );
}

#[test]
fn checks_across_connections_see_both_sources() {
    // The VICI child's selectors overlap the file's child's.
    let mut layer = Layer::default();
    layer.set_conn("vpn", vici_conn("192.0.2.9", "10.2.0.0/24", "128"));
    layer.set_secret("ike-vpn", psk());
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.contains("load-conn 'vpn' (VICI)") && e.contains("overlap"), "{e}");
    // Without the secret the PSK check names the VICI connection.
    let mut layer = Layer::default();
    layer.set_conn("vpn", vici_conn("192.0.2.9", "10.9.0.0/16", "128"));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.starts_with("load-conn 'vpn' (VICI): connections.vpn"), "{e}");
}

#[test]
fn a_name_the_file_uses_is_refused() {
    let mut layer = Layer::default();
    layer.set_conn("site", vici_conn("192.0.2.9", "10.9.0.0/16", "128"));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(
        e.contains("load-conn 'site' (VICI): connections.site: gw.toml:4:14 has one of this name"),
        "{e}"
    );
}

#[test]
fn a_kept_walk_gives_what_a_new_walk_gives() {
    let mut layer = Layer::default();
    // A selector with a port: warned (routes select by address only).
    layer.set_conn("vpn", vici_conn("192.0.2.9", "10.9.0.0/16[6/443]", "128"));
    layer.set_secret("ike-vpn", psk());
    let first = layered(&base(), &layer).unwrap();
    // The second load reuses the walks kept by the first.
    let again = layered(&base(), &layer).unwrap();
    assert_eq!(first.connections, again.connections);
    assert_eq!(first.secrets.psks.len(), again.secrets.psks.len());
    assert!(first.warnings.iter().any(|w| w.to_string().contains("load-conn 'vpn' (VICI)")), "{:?}", first.warnings);
    assert_eq!(
        first.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        again.warnings.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
    // A second connection that overlaps the kept one is refused, and the
    // message points at the kept one's tree.
    layer.set_conn("vpn2", vici_conn("192.0.2.10", "10.9.1.0/24", "128"));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.contains("load-conn 'vpn2' (VICI)") && e.contains("load-conn 'vpn' (VICI)"), "{e}");
    // Another file text walks the trees again.
    let other = base().replace("workers = 2", "workers = 3");
    assert_eq!(layered(&other, &layer).unwrap_err().to_string(), e);
}

/// `vici_conn` with the identities `(local, remote)`.
fn conn_for(remote_ts: &str, (local_id, remote_id): (&str, &str)) -> LayerValue {
    let LayerValue::Section(mut conn) = vici_conn("192.0.2.9", remote_ts, "128") else { unreachable!() };
    for (k, v) in &mut conn {
        match k.as_str() {
            "local" => *v = sec(&[("auth", st("psk")), ("id", st(local_id))]),
            "remote" => *v = sec(&[("auth", st("psk")), ("id", st(remote_id))]),
            _ => {}
        }
    }
    LayerValue::Section(conn)
}

/// The same layer without what its checks remember: checked whole.
fn afresh(layer: &Layer) -> Layer {
    let mut l = Layer::default();
    for (name, v) in &layer.conns {
        l.set_conn(name, (**v).clone());
    }
    for (id, v) in &layer.secrets {
        l.set_secret(id, (**v).clone());
    }
    l
}

#[test]
fn one_more_load_is_checked_as_the_whole_layer_would_be() {
    let mut layer = Layer::default();
    layer.set_secret("ike-vpn", psk());
    // Loaded one by one, as swanctl does: each check after the first
    // compares only the new connection with the others.
    for k in 0..20 {
        layer.set_conn(&format!("c{k}"), conn_for(&format!("10.9.{k}.0/24"), ("west", "east")));
        layer = layered(&base(), &layer).unwrap().layer;
    }
    let refused = |layer: &Layer| layered(&base(), layer).unwrap_err().to_string();
    // One more that overlaps c5, one whose PSK is missing, and c3 changed
    // in place to overlap c10: each refused as a whole check refuses it.
    let mut overlapping = layer.clone();
    overlapping.set_conn("c20", conn_for("10.9.5.128/25", ("west", "east")));
    let e = refused(&overlapping);
    assert!(e.contains("load-conn 'c20' (VICI)") && e.contains("overlaps child c5/net"), "{e}");
    assert_eq!(e, refused(&afresh(&overlapping)));
    let mut no_psk = layer.clone();
    no_psk.set_conn("c20", conn_for("10.9.20.0/24", ("here", "elsewhere")));
    let e = refused(&no_psk);
    assert!(e.contains("load-conn 'c20' (VICI)") && e.contains("remote id '@elsewhere'"), "{e}");
    assert_eq!(e, refused(&afresh(&no_psk)));
    let mut changed = layer.clone();
    changed.set_conn("c3", conn_for("10.9.10.0/25", ("west", "east")));
    let e = refused(&changed);
    assert!(e.contains("load-conn 'c10' (VICI)") && e.contains("overlaps child c3/net"), "{e}");
    assert_eq!(e, refused(&afresh(&changed)));
    // The refusals leave the accepted layer's checks right.
    layer.set_conn("c20", conn_for("10.9.20.0/24", ("west", "east")));
    assert_eq!(layered(&base(), &layer).unwrap().connections.len(), 22);
}

/// A CA and an end entity for `dns` it issued: (CA DER, end entity PEM,
/// its PKCS#8 key).
fn pki(dns: &str) -> (Vec<u8>, String, Vec<u8>) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "root");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ee = CertificateParams::new(vec![dns.to_string()]).unwrap();
    ee.distinguished_name.push(DnType::CommonName, dns);
    ee.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let ee_cert = ee.signed_by(&key, &Issuer::from_params(&ca, &ca_key)).unwrap();
    (ca_cert.der().to_vec(), ee_cert.pem(), key.serialize_der())
}

#[test]
fn a_certificate_connection_signs_with_the_loaded_key_that_is_its_certificates() {
    let (ca, ee, key) = pki("west.example");
    let LayerValue::Section(mut conn) = vici_conn("192.0.2.9", "10.9.0.0/16", "64") else { panic!() };
    for (k, v) in &mut conn {
        match k.as_str() {
            "local" => *v = sec(&[("auth", st("pubkey")), ("id", st("west.example")), ("certs", list(&[&inline(ee.as_bytes())]))]),
            "remote" => *v = sec(&[("auth", st("pubkey")), ("id", st("east.example"))]),
            _ => {}
        }
    }
    let mut layer = Layer::default();
    layer.set_conn("vpn", LayerValue::Section(conn));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.contains("load-conn 'vpn' (VICI): connections.vpn.local.certs: none of the 0 private keys loaded over VICI"), "{e}");
    assert!(e.contains("connections.vpn.remote: auth = \"pubkey\" needs 'cacerts' here or an [authorities] entry"), "{e}");
    // The CA from x509ca/, the key from private/: it loads.
    layer.add_cert(ca.clone(), true);
    let id = esparto_ike::cert::SigningKey::from_pkcs8(&key, false).unwrap().key_id();
    layer.set_key(&id, zeroize::Zeroizing::new(key));
    let c = layered(&base(), &layer).unwrap();
    let ike = c.connections[1].ike.as_ref().unwrap();
    assert!(ike.local.credential.is_some());
    assert_eq!(ike.remote.trust.as_ref().unwrap().cas(), [ca]);
    // Without the key again: refused, although the connection's tree is
    // the same (its kept walk depended on the key).
    let mut without = layer.clone();
    assert!(without.remove_key(&id));
    assert!(layered(&base(), &without).unwrap_err().to_string().contains("none of the 0 private keys"));
    let mut cleared = layer.clone();
    cleared.clear_creds();
    assert!(layered(&base(), &cleared).is_err(), "the connection needs what clear-creds takes");
    assert!(layered(&base(), &layer).is_ok());
}

#[test]
fn over_vici_a_certificate_is_data_never_a_file_name() {
    let LayerValue::Section(mut conn) = vici_conn("192.0.2.9", "10.9.0.0/16", "64") else { panic!() };
    for (k, v) in &mut conn {
        if k == "local" {
            *v = sec(&[("auth", st("pubkey")), ("certs", list(&["/etc/ssl/certs/any.pem", "vici-data:abc"]))]);
        }
    }
    let mut layer = Layer::default();
    layer.set_conn("vpn", LayerValue::Section(conn));
    let e = layered(&base(), &layer).unwrap_err().to_string();
    assert!(e.contains("'/etc/ssl/certs/any.pem': over VICI a certificate is given by its contents, not a file name"), "{e}");
    assert!(e.contains("data given over VICI: odd number of hex digits"), "{e}");
}
