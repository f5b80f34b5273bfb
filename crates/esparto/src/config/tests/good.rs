//! Good files: the examples, defaults, key files, lifetimes.

use std::path::Path;
use std::time::Duration;

use esparto_crypto::EspSuite;

use super::*;
use crate::config::*;

#[test]
fn the_base_is_valid() {
    let c = parse_str(&base(), "west.toml").unwrap();
    assert_eq!(c.connections.len(), 1);
    assert_eq!(c.child_count(), 1);
}

#[test]
fn static_example_pair_mirrors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let west = load(&dir.join("static-west.toml")).unwrap();
    let east = load(&dir.join("static-east.toml")).unwrap();
    let w = &west.connections[0];
    let e = &east.connections[0];
    assert_eq!(w.local_addrs, e.remote_addrs);
    assert_eq!(w.remote_port, 4500);
    let (wc, ec) = (&w.children[0], &e.children[0]);
    assert_eq!(wc.local_ts, ec.remote_ts);
    assert_eq!(wc.local_ts.len(), 2);
    assert_eq!(wc.per_cpu_sas, PerCpuSas::Eager);
    assert_eq!(
        wc.lifetime,
        esparto_esp::Lifetime::default(),
        "static SAs have no limits by default"
    );
    let (ws, es) = (
        wc.static_sas.as_ref().unwrap(),
        ec.static_sas.as_ref().unwrap(),
    );
    assert_eq!(ws.suite, EspSuite::Aes256Gcm16);
    assert!(!ws.esn);
    assert_eq!(ws.pairs.len(), 3);
    for (a, b) in ws.pairs.iter().zip(&es.pairs) {
        assert_eq!(a.in_spi, b.out_spi);
        assert_eq!(a.out_spi, b.in_spi);
        assert_eq!(a.in_key.as_slice(), b.out_key.as_slice());
        assert_eq!(a.out_key.as_slice(), b.in_key.as_slice());
        assert_eq!(a.in_key.len(), 36);
    }
    assert_eq!(west.daemon.workers, 2);
    assert_eq!(west.daemon.control, Path::new("/run/esparto/west.sock"));
}

#[test]
fn psk_example_builds_the_ike_connection() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let c = load(&dir.join("site-to-site-psk.toml")).unwrap();
    let conn = &c.connections[0];
    let ike = conn.ike.as_ref().unwrap();
    assert_eq!(ike.proposals.len(), 2);
    assert!(ike.encap);
    assert_eq!(ike.dpd_delay, Some(Duration::from_secs(30)));
    assert_eq!(ike.remote_port, 500);
    assert_eq!(ike.local.id.as_ref().unwrap().to_string(), "@west.example");
    assert_eq!(ike.children.len(), 1);
    assert_eq!(ike.children[0].esp_proposals.len(), 3);
    assert_eq!(
        ike.children[0].start_action,
        esparto_ike::StartAction::Start
    );
    ike.validate().unwrap();
    let child = &conn.children[0];
    assert!(child.static_sas.is_none());
    assert_eq!(child.lifetime.soft_time, Some(Duration::from_secs(3600)));
    assert_eq!(
        child.lifetime.hard_time,
        Some(Duration::from_secs(3960)),
        "life_time = rekey_time + 10%"
    );
    assert_eq!(child.per_cpu_sas, PerCpuSas::OnDemand);
    assert_eq!(child.per_cpu_max, c.daemon.workers);
    let (l, r) = (
        ike.local.id.clone().unwrap(),
        ike.remote.id.clone().unwrap(),
    );
    assert!(c.secrets.find_psk(&l, &r).is_some());
}

#[test]
fn ike_defaults_and_dynamic_selectors() {
    let text = r#"
[connections.gw]
remote_addrs = "198.51.100.7"
local.id = "@moon"
remote.id = "@sun"
[connections.gw.children.host]
[secrets.ike]
id = "@sun"
secret = "0x00112233445566778899"
"#;
    let c = parse_str(text, "moon.toml").unwrap();
    let d = &c.daemon;
    assert_eq!(
        (d.port, d.ike_port, d.path_mtu, d.tun.as_str()),
        (4500, 500, 1500, "esparto0")
    );
    assert_eq!(d.control, Path::new(DEFAULT_CONTROL));
    assert_eq!(d.state_dir, Path::new(DEFAULT_STATE_DIR));
    assert_eq!(d.tun_queue_len, DEFAULT_TUN_QUEUE_LEN);
    assert!(d.cpus.is_empty());
    let conn = &c.connections[0];
    let ike = conn.ike.as_ref().unwrap();
    assert_eq!(ike.proposals.len(), DEFAULT_IKE_PROPOSALS.len());
    let child = &ike.children[0];
    assert_eq!(child.esp_proposals.len(), DEFAULT_ESP_PROPOSALS.len());
    assert!(matches!(
        child.local_ts[0],
        esparto_ike::TsConfig::Dynamic { .. }
    ));
    // The remote `dynamic` resolves against the known peer address; the local one cannot.
    assert_eq!(conn.children[0].remote_ts[0].to_string(), "198.51.100.7/32");
    assert!(conn.children[0].local_ts.is_empty());
    assert_eq!(
        c.secrets.psks[0].secret.as_slice(),
        &[0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99]
    );
}

#[test]
fn keys_and_secrets_from_files_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(dir.path().join("keys/in.hex"), format!("0x{K36}\n")).unwrap();
    std::fs::write(dir.path().join("psk"), "s3cret\n").unwrap();
    let text = base().replacen(
        &format!("in_key = \"0x{K36}\""),
        "in_key_file = \"keys/in.hex\"",
        1,
    ) + "\n[secrets.p]\nsecret_file = \"psk\"\n";
    let path = dir.path().join("west.toml");
    std::fs::write(&path, &text).unwrap();
    let c = load(&path).unwrap();
    let pair = &c.connections[0].children[0]
        .static_sas
        .as_ref()
        .unwrap()
        .pairs[0];
    assert_eq!(pair.in_key.as_slice()[..3], [0, 1, 2]);
    assert_eq!(c.secrets.psks[0].secret.as_slice(), b"s3cret");
    // A key file of the wrong length names the file, not its content.
    std::fs::write(dir.path().join("keys/in.hex"), "00ff\n").unwrap();
    let errs = load(&path).unwrap_err();
    let e = &errs.0[0];
    assert_eq!(
        (e.line, e.key.as_str()),
        (
            16,
            "connections.site.children.lan.static_sas[0].in_key_file"
        )
    );
    assert_eq!(
        e.message,
        "2 bytes, aes256gcm16 needs 36 (32-byte key + 4-byte salt)"
    );
}

#[test]
fn unreadable_files_are_one_error_without_a_line() {
    let errs = load(Path::new("/nonexistent/esparto.toml")).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs.0[0].line, 0);
    assert!(
        errs.to_string()
            .starts_with("/nonexistent/esparto.toml: cannot read: ")
    );
}

#[test]
fn lifetimes_follow_swanctl() {
    let ike = |extra: &str| {
        let text = format!(
            "[connections.gw]\nremote_addrs = \"198.51.100.7\"\n[connections.gw.children.c]\n{extra}\n[secrets.s]\nsecret = \"x\"\n"
        );
        parse_str(&text, "t.toml").unwrap().connections[0].children[0].lifetime
    };
    let lt = ike("rekey_time = \"4h\"\nrekey_bytes = 1000\nlife_packets = 100");
    assert_eq!(lt.soft_time, Some(Duration::from_secs(4 * 3600)));
    assert_eq!(lt.hard_time, Some(Duration::from_secs(4 * 3600 + 1440)));
    assert_eq!((lt.soft_bytes, lt.hard_bytes), (Some(1000), Some(1100)));
    assert_eq!((lt.soft_packets, lt.hard_packets), (None, Some(100)));
    let lt = ike("life_time = \"30m\"");
    assert_eq!(
        (lt.soft_time, lt.hard_time),
        (
            Some(Duration::from_secs(1620)),
            Some(Duration::from_secs(1800))
        )
    );
    let lt = ike("rekey_time = 0");
    assert_eq!((lt.soft_time, lt.hard_time), (None, None));
}

/// The IKE engine gets the lifecycle settings: rekey/life/rand times (a
/// short rekey_time still gets a longer life_time), byte and packet rekey
/// triggers, per-CPU options, DPD, IKE SA rekeying, and the daemon limits.
#[test]
fn lifecycle_settings_reach_the_engine() {
    let text = r#"
[daemon]
window_size = 4
cookie_threshold = 50
half_open_per_source = 7
[connections.gw]
remote_addrs = "198.51.100.7"
dpd_delay = "10s"
dpd_timeout = "40s"
rekey_time = "2h"
rand_time = "5m"
unique = "keep"
[connections.gw.children.c]
rekey_time = "5s"
rand_time = "1s"
rekey_bytes = 1000000
per_cpu_sas = "eager"
per_cpu_max = 4
dpd_action = "restart"
[secrets.s]
secret = "x"
"#;
    let c = parse_str(text, "t.toml").unwrap();
    assert_eq!((c.daemon.ike.window_size, c.daemon.ike.cookie_threshold, c.daemon.ike.half_open_per_source), (4, 50, 7));
    let ike = c.connections[0].ike.as_ref().unwrap();
    assert_eq!(ike.dpd_timeout, Some(Duration::from_secs(40)));
    assert_eq!(ike.dpd_action, esparto_ike::DpdAction::Restart);
    assert_eq!((ike.rekey_time, ike.rand_time), (Some(Duration::from_secs(7200)), Some(Duration::from_secs(300))));
    let ch = &ike.children[0];
    assert_eq!(ch.rekey_time, Some(Duration::from_secs(5)));
    assert_eq!(ch.life_time, Some(Duration::from_secs(6)), "5 s + 10 % rounds up to a whole second");
    assert_eq!(ch.rand_time, Some(Duration::from_secs(1)));
    assert_eq!(ch.rekey_bytes, 1_000_000);
    assert_eq!((ch.per_cpu_sas, ch.per_cpu_max), (esparto_ike::PerCpuSas::Eager, 4));
    assert_eq!(ike.close_action, esparto_ike::CloseAction::None, "swanctl's default");
    assert_eq!(ike.unique, esparto_ike::Unique::Keep);
    ike.validate().unwrap();
}

/// A connection we start is meant to stay up: unless set, a dead peer
/// restarts it and the peer's Delete starts it again; otherwise (and when
/// set) swanctl's defaults and values.
#[test]
fn start_connections_restart_by_default() {
    let conf = |child: &str| {
        format!("[connections.gw]\nlocal_addrs = \"198.51.100.1\"\nremote_addrs = \"198.51.100.7\"\n[connections.gw.children.c]\n{child}\n[secrets.s]\nsecret = \"x\"\n")
    };
    let actions = |child: &str| {
        let c = parse_str(&conf(child), "t.toml").unwrap();
        let ike = c.connections[0].ike.clone().unwrap();
        (ike.dpd_action, ike.close_action)
    };
    use esparto_ike::{CloseAction, DpdAction};
    assert_eq!(actions(""), (DpdAction::Clear, CloseAction::None));
    assert_eq!(actions("start_action = \"trap\""), (DpdAction::Clear, CloseAction::None));
    assert_eq!(actions("start_action = \"start\""), (DpdAction::Restart, CloseAction::Start));
    assert_eq!(
        actions("start_action = \"start\"\ndpd_action = \"clear\"\nclose_action = \"none\""),
        (DpdAction::Clear, CloseAction::None)
    );
    assert_eq!(actions("close_action = \"trap\""), (DpdAction::Clear, CloseAction::Trap));
    assert_eq!(actions("close_action = \"start\""), (DpdAction::Clear, CloseAction::Start));
}

#[test]
fn cpus_pin_in_the_order_given_and_set_the_worker_count() {
    let c = parse_str(&base().replace("workers = 2", "cpus = [3, 1, 2]"), "west.toml").unwrap();
    assert_eq!(c.daemon.cpus, vec![3, 1, 2]);
    assert_eq!(c.daemon.workers, 3, "workers default to the CPUs listed");
    // An explicit worker count wins, before or after the list.
    for text in ["workers = 4\ncpus = [1, 0]", "cpus = [1, 0]\nworkers = 4"] {
        let c = parse_str(&base().replace("workers = 2", text), "west.toml").unwrap();
        assert_eq!((c.daemon.workers, c.daemon.cpus.as_slice()), (4, &[1, 0][..]));
    }
}

#[test]
fn metrics_is_off_unless_an_address_is_named() {
    assert_eq!(parse_str(&base(), "west.toml").unwrap().daemon.metrics, None);
    for addr in ["127.0.0.1:9720", "[::1]:9720", "0.0.0.0:80"] {
        let text = base().replacen("workers = 2", &format!("workers = 2\nmetrics = \"{addr}\""), 1);
        let c = parse_str(&text, "west.toml").unwrap();
        assert_eq!(c.daemon.metrics, Some(addr.parse().unwrap()));
    }
}

#[test]
fn vici_sits_beside_the_control_socket_unless_moved_or_off() {
    let c = parse_str(&base(), "/etc/esparto/west.toml").unwrap();
    assert_eq!(c.daemon.vici, ViciSocket::Default);
    assert_eq!(c.daemon.vici.path(Path::new("/run/esparto/esparto.sock")), Some("/run/esparto/charon.vici".into()));
    assert_eq!(c.daemon.vici.path(Path::new("/tmp/t/ctl")), Some("/tmp/t/charon.vici".into()), "beside --control too");
    let off = base().replacen("workers = 2", "workers = 2\nvici = \"\"", 1);
    assert_eq!(parse_str(&off, "/etc/esparto/west.toml").unwrap().daemon.vici.path(Path::new("/x")), None);
    let moved = base().replacen("workers = 2", "workers = 2\nvici = \"v.sock\"", 1);
    assert_eq!(
        parse_str(&moved, "/etc/esparto/west.toml").unwrap().daemon.vici,
        ViciSocket::Path("/etc/esparto/v.sock".into())
    );
}

#[test]
fn state_dir_is_relative_to_the_config() {
    let text = base().replacen("workers = 2", "workers = 2\nstate_dir = \"state\"", 1);
    let c = parse_str(&text, "/etc/esparto/west.toml").unwrap();
    assert_eq!(c.daemon.state_dir, Path::new("/etc/esparto/state"));
    let text = base().replacen("workers = 2", "workers = 2\nstate_dir = \"/srv/esparto\"", 1);
    assert_eq!(parse_str(&text, "/etc/esparto/west.toml").unwrap().daemon.state_dir, Path::new("/srv/esparto"));
}

#[test]
fn routing_defaults_to_table_220_and_the_mark_follows_the_table() {
    let c = parse_str(&base(), "w.toml").unwrap();
    assert_eq!(c.daemon.routing, Routing { table: 220, priority: 220, mark: 220 });
    let text = base().replace("workers = 2", "workers = 2\nrouting_table = 1000\nrouting_table_prio = 32763");
    let c = parse_str(&text, "w.toml").unwrap();
    assert_eq!(c.daemon.routing, Routing { table: 1000, priority: 32763, mark: 1000 });
    let text = base().replace("workers = 2", "workers = 2\nrouting_mark = 0x10000");
    assert_eq!(parse_str(&text, "w.toml").unwrap().daemon.routing.mark, 0x1_0000);
}

#[test]
fn link_mbps_needs_adaptive_ipcomp() {
    let with = |extra: &str| base().replace("esp_proposals = [\"aes256gcm16\"]\n", &format!("esp_proposals = [\"aes256gcm16\"]\n{extra}\n"));
    let c = parse_str(&with("ipcomp = \"adaptive\"\nlink_mbps = 50"), "west.toml").unwrap();
    assert_eq!(c.connections[0].children[0].link_mbps, Some(50));
    assert_eq!(parse_str(&with("ipcomp = \"adaptive\""), "west.toml").unwrap().connections[0].children[0].link_mbps, None);
    let e = parse_str(&with("ipcomp = \"yes\"\nlink_mbps = 50"), "west.toml").unwrap_err().to_string();
    assert!(e.contains("west.toml:") && e.contains("link_mbps") && e.contains("adaptive"), "{e}");
    let e = parse_str(&with("ipcomp = \"adaptive\"\nlink_mbps = 0"), "west.toml").unwrap_err().to_string();
    assert!(e.contains("link_mbps"), "{e}");
}

#[test]
fn ipcomp_values() {
    let with = |v: &str| base().replace("esp_proposals = [\"aes256gcm16\"]\n", &format!("esp_proposals = [\"aes256gcm16\"]\nipcomp = {v}\n"));
    for (v, want) in [
        ("\"yes\"", Some(esparto_esp::IpcompMode::Always)),
        ("true", Some(esparto_esp::IpcompMode::Always)),
        ("\"adaptive\"", Some(esparto_esp::IpcompMode::Adaptive)),
        ("\"no\"", None),
        ("false", None),
    ] {
        let c = parse_str(&with(v), "west.toml").unwrap();
        assert_eq!(c.connections[0].children[0].ipcomp, want, "{v}");
    }
    assert_eq!(parse_str(&base(), "west.toml").unwrap().connections[0].children[0].ipcomp, None);
    let e = parse_str(&with("\"maybe\""), "west.toml").unwrap_err().to_string();
    assert!(e.contains("expected yes, no or adaptive") && e.contains("ipcomp"), "{e}");
    // An IKE child passes it to the engine, which offers IPCOMP_SUPPORTED.
    let text = r#"
[connections.gw]
remote_addrs = "198.51.100.7"
local.id = "@moon"
remote.id = "@sun"
[connections.gw.children.host]
ipcomp = "yes"
[secrets.ike]
id = "@sun"
secret = "0x00112233445566778899"
"#;
    let c = parse_str(text, "moon.toml").unwrap();
    assert!(c.connections[0].ike.as_ref().unwrap().children[0].ipcomp);
}

/// Each example comes with both sides, and the east side is the west side
/// mirrored: addresses, identities and selectors swapped; proposals, the
/// PSK and the CA the same.
#[test]
fn the_examples_have_both_sides_mirrored() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let read = |f: &str| -> toml_edit::Document<String> { std::fs::read_to_string(dir.join(f)).unwrap().parse().unwrap() };
    let strs = |item: &toml_edit::Item| -> Vec<String> {
        match item.as_array() {
            Some(a) => a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect(),
            None => item.as_str().map(|s| vec![s.to_string()]).unwrap_or_default(),
        }
    };
    for (west, east) in [
        ("site-to-site-psk.toml", "site-to-site-psk-east.toml"),
        ("site-to-site-certs.toml", "site-to-site-certs-east.toml"),
        ("static-west.toml", "static-east.toml"),
    ] {
        let (w, e) = (read(west), read(east));
        let (wc, ec) = (w["connections"].as_table().unwrap(), e["connections"].as_table().unwrap());
        assert_eq!(wc.iter().map(|(k, _)| k).collect::<Vec<_>>(), ec.iter().map(|(k, _)| k).collect::<Vec<_>>(), "{east}");
        for (name, wconn) in wc.iter() {
            let econn = &ec[name];
            let at = |c: &toml_edit::Item, path: &[&str]| path.iter().fold(c.clone(), |i, k| i.get(k).cloned().unwrap_or_default());
            for (a, b) in [("local_addrs", "remote_addrs"), ("remote_addrs", "local_addrs")] {
                assert_eq!(strs(&at(econn, &[a])), strs(&at(wconn, &[b])), "{east}: {name}.{a}");
            }
            if wconn.get("local").is_some() {
                assert_eq!(strs(&at(econn, &["local", "id"])), strs(&at(wconn, &["remote", "id"])), "{east}: {name}.local.id");
                assert_eq!(strs(&at(econn, &["remote", "id"])), strs(&at(wconn, &["local", "id"])), "{east}: {name}.remote.id");
            }
            assert_eq!(strs(&at(econn, &["proposals"])), strs(&at(wconn, &["proposals"])), "{east}: {name}.proposals");
            let children = wconn["children"].as_table().unwrap();
            for (child, wch) in children.iter() {
                let ech = &econn["children"][child];
                assert_eq!(strs(&ech["local_ts"]), strs(&wch["remote_ts"]), "{east}: {name}.{child}.local_ts");
                assert_eq!(strs(&ech["remote_ts"]), strs(&wch["local_ts"]), "{east}: {name}.{child}.remote_ts");
                assert_eq!(strs(&at(ech, &["esp_proposals"])), strs(&at(wch, &["esp_proposals"])), "{east}: {name}.{child}");
            }
        }
        for key in ["secrets", "authorities"] {
            assert_eq!(w.get(key).is_some(), e.get(key).is_some(), "{east}: [{key}]");
        }
    }
    // The PSK examples load as they are.
    for f in ["site-to-site-psk.toml", "site-to-site-psk-east.toml"] {
        parse_str(&std::fs::read_to_string(dir.join(f)).unwrap(), f).unwrap();
    }
}

#[test]
fn peers_by_host_name_keep_their_place_among_the_addresses() {
    let text = r#"
[connections.gw]
remote_addrs = ["vpn.example.com", "198.51.100.7", "Backup-2.example.net."]
local.id = "@moon"
remote.id = "@sun"
[connections.gw.children.host]
start_action = "start"
[secrets.ike]
id = "@sun"
secret = "0x00112233445566778899"
"#;
    let c = parse_str(text, "moon.toml").unwrap();
    let conn = &c.connections[0];
    let hosts = |h: &[esparto_ike::RemoteHost]| h.iter().map(|h| (h.name.to_string(), h.position)).collect::<Vec<_>>();
    let want = vec![("vpn.example.com".to_string(), 0), ("Backup-2.example.net".to_string(), 1)];
    assert_eq!(conn.remote_addrs, ["198.51.100.7".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(hosts(&conn.remote_hosts), want);
    assert_eq!(hosts(&conn.ike.as_ref().unwrap().remote_hosts), want, "the engine gets them");
    // A name alone is enough to initiate to.
    let named = text.replace(r#"["vpn.example.com", "198.51.100.7", "Backup-2.example.net."]"#, r#""vpn.example.com""#);
    let c = parse_str(&named, "moon.toml").unwrap();
    assert!(c.connections[0].remote_addrs.is_empty());
    assert_eq!(c.connections[0].remote_hosts.len(), 1);
}
