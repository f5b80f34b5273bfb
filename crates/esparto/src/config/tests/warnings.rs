//! Warnings about secrets and an empty file, and the errors for what
//! `run` would refuse: each at its key, printed by `check-config`.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::config::*;

fn warnings(c: &Config) -> Vec<String> {
    c.warnings.iter().map(|w| w.to_string()).collect()
}

/// An IKE connection with one child; `conn` and `child` are added lines.
fn ike(conn: &str, child: &str, secret: &str) -> String {
    format!(
        "[connections.gw]\n{conn}\n[connections.gw.children.c]\nlocal_ts = \"10.1.0.0/16\"\nremote_ts = \"10.2.0.0/16\"\n{child}\n[secrets.s]\n{secret}\n"
    )
}

const ADDRS: &str = "local_addrs = \"192.0.2.1\"\nremote_addrs = \"192.0.2.2\"";
const GOOD_PSK: &str = "secret = \"a long and random enough shared secret\"";

#[test]
fn a_good_ike_file_has_no_warnings() {
    let c = parse_str(&ike(ADDRS, "start_action = \"start\"", GOOD_PSK), "t.toml").unwrap();
    assert_eq!(warnings(&c), Vec::<String>::new());
}

#[test]
fn short_psks_are_warned_at_the_secret() {
    for (secret, bytes) in [("secret = \"nineteen characters\"", 19), ("secret = \"0x00112233445566778899\"", 10)] {
        let c = parse_str(&ike(ADDRS, "", secret), "t.toml").unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("t.toml:9:10: secrets.s.secret: warning: PSK of "), "{}", w[0]);
        assert!(w[0].contains(&format!("{bytes} bytes")), "{}", w[0]);
    }
    let c = parse_str(&ike(ADDRS, "", "secret = \"exactly twenty chars\""), "t.toml").unwrap();
    assert!(c.warnings.is_empty(), "{:?}", warnings(&c));
}

#[test]
fn the_examples_psk_is_warned_even_copied_elsewhere() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/site-to-site-psk.toml");
    let text = std::fs::read_to_string(example).unwrap();
    let c = parse_str(&text, "site.toml").unwrap();
    let w = warnings(&c);
    assert!(
        w.iter().any(|w| w.contains("secrets.west-east.secret: warning: this PSK is published")),
        "{w:?}"
    );
    let demo = ike(ADDRS, "", "secret = \"esparto demo: a pre-shared key for namespaces only\"");
    let w = warnings(&parse_str(&demo, "t.toml").unwrap());
    assert!(w.len() == 1 && w[0].contains("published"), "{w:?}");
}

#[test]
fn secret_files_readable_by_others_are_warned_at_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let psk = dir.path().join("gw.psk");
    std::fs::write(&psk, "a long and random enough shared secret\n").unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, ike(ADDRS, "", "secret_file = \"gw.psk\"")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (mode, warned) in [(0o640, true), (0o600, false), (0o604, true)] {
        std::fs::set_permissions(&psk, std::fs::Permissions::from_mode(mode)).unwrap();
        let w = warnings(&load(&file).unwrap());
        assert_eq!(w.len(), usize::from(warned), "{mode:o}: {w:?}");
        if warned {
            assert!(w[0].contains(":9:15: secrets.s.secret_file: warning: '"), "{}", w[0]);
            assert!(w[0].contains(&format!("(mode {mode:04o}); `chmod 600` it")), "{}", w[0]);
        }
    }
    // Static keys in files: the same.
    let key = dir.path().join("in.key");
    std::fs::write(&key, K36).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = base().replace(&format!("in_key = \"0x{K36}\""), "in_key_file = \"in.key\"");
    let other = "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40414243";
    let text = text.replace(&format!("out_key = \"0x{K36B}\""), &format!("out_key = \"{other}\""));
    std::fs::write(&file, &text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let w = warnings(&load(&file).unwrap());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&format!("{L}.static_sas[0].in_key_file: warning: '")), "{}", w[0]);
}

#[test]
fn a_config_holding_a_secret_inline_must_be_private_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.toml");
    std::fs::write(&file, ike(ADDRS, "", GOOD_PSK)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = warnings(&load(&file).unwrap());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("t.toml:9:10: secrets.s.secret: warning: '"), "{}", w[0]);
    assert!(w[0].contains("move the secret to a file of its own"), "{}", w[0]);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(load(&file).unwrap().warnings.is_empty());
    // Without secrets inline, who reads the file does not matter.
    std::fs::write(dir.path().join("gw.psk"), "a long and random enough shared secret").unwrap();
    std::fs::set_permissions(dir.path().join("gw.psk"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&file, ike(ADDRS, "", "secret_file = \"gw.psk\"")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(load(&file).unwrap().warnings.is_empty());
}

/// A static key used twice in the file is an error at the second use,
/// naming the first (both ends would encrypt under one key: nonces
/// repeat), whether in one pair, across pairs or across connections.
#[test]
fn a_static_key_used_in_both_directions_or_twice_is_refused_where_it_is() {
    let same_pair = base().replace(&format!("out_key = \"0x{K36B}\""), &format!("out_key = \"0x{K36}\""));
    let e = errors_of(&same_pair);
    assert_eq!(e.len(), 1, "{}", ConfigErrors(e.clone()));
    assert_eq!((e[0].line, e[0].column, e[0].key.as_str()), (17, 11, format!("{L}.static_sas[0].out_key").as_str()));
    assert!(e[0].message.starts_with(&format!("the same key as {L}.static_sas[0].in_key (at west.toml:16:10)")), "{}", e[0].message);
    assert!(e[0].message.contains("nonces repeat"), "{}", e[0].message);
    assert!(!e[0].message.contains(K36), "a key was quoted: {}", e[0].message);
    // Distinct keys in one pair, but a second pair reusing the first's.
    let text = format!(
        "{}\n[[connections.site.children.lan.static_sas]]\nin_spi = 0xc0000102\nout_spi = 0xc0000202\nin_key = \"{K36B}\"\nout_key = \"0x{K36}\"\n",
        base()
    );
    let e = errors_of(&text);
    assert_eq!(e.len(), 2, "{}", ConfigErrors(e.clone()));
    assert!(e[0].key.ends_with("static_sas[1].in_key") && e[0].message.contains("the same key as connections.site.children.lan.static_sas[0].out_key"), "{}", e[0]);
    assert!(e[1].key.ends_with("static_sas[1].out_key") && e[1].message.contains("the same key as connections.site.children.lan.static_sas[0].in_key"), "{}", e[1]);
    // Across connections too, with its line.
    let other = base() + &second("10.5.0.0/16", "10.6.0.0/16", "0xc0000102").replace(K36D, K36);
    let e = errors_of(&other);
    assert_eq!(e.len(), 1, "{}", ConfigErrors(e.clone()));
    assert_eq!((e[0].line, e[0].key.as_str()), (32, "connections.other.children.net.static_sas[0].out_key"));
    assert!(e[0].message.contains("(at west.toml:16:10)"), "{}", e[0].message);
}

#[test]
fn the_examples_static_keys_are_warned() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let w = warnings(&parse_str(&std::fs::read_to_string(dir.join("static-west.toml")).unwrap(), "w.toml").unwrap());
    let published: Vec<_> = w.iter().filter(|w| w.contains("this key is published")).collect();
    assert_eq!(published.len(), 6, "{w:?}");
}

#[test]
fn an_empty_file_is_warned() {
    for text in ["", "[daemon]\nworkers = 1\n", "[connections]\n"] {
        let c = parse_str(text, "t.toml").unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 1, "{text:?}: {w:?}");
        assert!(w[0].contains("connections: warning: no connections"), "{}", w[0]);
    }
}

#[test]
fn what_run_refuses_check_config_refuses() {
    let err = |conn: &str, child: &str| -> Vec<ConfigError> {
        errors_of(&ike(conn, child, GOOD_PSK))
    };
    // start or trap without an address to initiate to.
    for (conn, action) in [("local_addrs = \"192.0.2.1\"", "start"), ("", "start"), ("local_addrs = \"192.0.2.1\"", "trap")] {
        let e = err(conn, &format!("start_action = \"{action}\""));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].key, "connections.gw.children.c.start_action");
        assert!(e[0].message.contains(&format!("\"{action}\" needs remote_addrs")), "{}", e[0].message);
        assert!(e[0].message.contains("esparto run would refuse to start"), "{}", e[0].message);
    }
    // Without local_addrs both initiate from the route's source: no warning.
    for action in ["start", "trap"] {
        let c = parse_str(&ike("remote_addrs = \"192.0.2.2\"", &format!("start_action = \"{action}\""), GOOD_PSK), "t.toml").unwrap();
        assert!(warnings(&c).is_empty(), "{action}: {:?}", warnings(&c));
    }
    // Responders need no addresses at all.
    assert!(parse_str(&ike("", "start_action = \"none\"", GOOD_PSK), "t.toml").is_ok());
    // Connections of two outer families: one daemon serves both.
    let two = format!(
        "{}\n[connections.v6]\nlocal_addrs = \"2001:db8::1\"\nremote_addrs = \"2001:db8::2\"\n[connections.v6.children.c]\nlocal_ts = \"10.3.0.0/16\"\nremote_ts = \"10.4.0.0/16\"\n",
        ike(ADDRS, "", GOOD_PSK)
    );
    assert!(parse_str(&two, "t.toml").is_ok());
    // One connection with both: each peer address has a local one of its family.
    let both = "local_addrs = [\"192.0.2.1\", \"2001:db8::1\"]\nremote_addrs = [\"2001:db8::2\", \"192.0.2.2\"]";
    assert!(parse_str(&ike(both, "", GOOD_PSK), "t.toml").is_ok());
    // A peer no local address can reach: refused where it is written.
    let e = errors_of(&ike("local_addrs = \"192.0.2.1\"\nremote_addrs = [\"192.0.2.2\", \"2001:db8::2\"]", "", GOOD_PSK));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].key, "connections.gw.remote_addrs");
    assert!(e[0].message.contains("2001:db8::2: local_addrs of connection gw has no IPv6 address to reach it from"), "{}", e[0].message);
}

#[test]
fn cpus_this_host_would_refuse_are_warned() {
    let text = format!("[daemon]\ncpus = [0, 5, 7]\n{}", ike(ADDRS, "", GOOD_PSK));
    let host = Host { cpus: vec![0, 1, 2, 3, 4, 5], ..Host::default() };
    let w = warnings(&parse_str_on(&text, "t.toml", &host).unwrap());
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("t.toml:2:15: daemon.cpus[2]: warning: esparto run would refuse to start: CPU 7 is not one"),
        "{}",
        w[0]
    );
    // Unknown affinity: nothing compared.
    assert!(parse_str(&text, "t.toml").unwrap().warnings.is_empty());
}
