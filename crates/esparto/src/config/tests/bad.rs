//! Bad files: every error names the file, line, column and key.

use super::*;
use crate::config::*;

#[test]
fn bad_configs_name_line_column_and_key() {
    let sa = format!("{L}.static_sas[0]");
    // (replace this, with this, expected line, column, key, message part)
    let cases: Vec<(&str, String, usize, usize, String, &str)> = vec![
        (
            "workers = 2",
            "workrs = 2".into(),
            2,
            1,
            "daemon.workrs".into(),
            "unknown key (did you mean 'workers'?)",
        ),
        (
            "workers = 2",
            "workers = 0".into(),
            2,
            11,
            "daemon.workers".into(),
            "0 is out of range (1..=1024)",
        ),
        (
            "workers = 2",
            "workers = 100000".into(),
            2,
            11,
            "daemon.workers".into(),
            "out of range",
        ),
        (
            "workers = 2",
            "workers = \"2\"".into(),
            2,
            11,
            "daemon.workers".into(),
            "expected an integer, found a string",
        ),
        (
            "workers = 2",
            "workers = 2\nport = 0".into(),
            3,
            8,
            "daemon.port".into(),
            "0 is out of range (1..=65535)",
        ),
        (
            "workers = 2",
            "workers = 2\nike_port = 4500".into(),
            3,
            12,
            "daemon.ike_port".into(),
            "must differ from port",
        ),
        (
            "workers = 2",
            "workers = 2\ntun = \"a/b\"".into(),
            3,
            7,
            "daemon.tun".into(),
            "not a valid interface name",
        ),
        (
            "workers = 2",
            "workers = 2\ncpus = [1, 1]".into(),
            3,
            12,
            "daemon.cpus[1]".into(),
            "CPU 1 is listed twice",
        ),
        (
            "workers = 2",
            "workers = 2\ncpus = []".into(),
            3,
            8,
            "daemon.cpus".into(),
            "empty list",
        ),
        (
            "workers = 2",
            "workers = 2\ncpus = 3".into(),
            3,
            8,
            "daemon.cpus".into(),
            "expected an array of CPU numbers, found an integer",
        ),
        (
            "workers = 2",
            "workers = 2\ncpus = [0, -1]".into(),
            3,
            12,
            "daemon.cpus[1]".into(),
            "-1 is out of range (0..=8191)",
        ),
        (
            "workers = 2",
            "workers = 2\ntun_queue_len = 8".into(),
            3,
            17,
            "daemon.tun_queue_len".into(),
            "8 is out of range",
        ),
        (
            "workers = 2",
            "workers = 2\nrouting_table = \"main\"".into(),
            3,
            17,
            "daemon.routing_table".into(),
            "'main' is one of the host's own tables: Esparto keeps its routes in a table of its own",
        ),
        (
            "workers = 2",
            "workers = 2\nrouting_table = 254".into(),
            3,
            17,
            "daemon.routing_table".into(),
            "table 254 is the host's own (253 default, 254 main, 255 local)",
        ),
        (
            "workers = 2",
            "workers = 2\nrouting_table = 0".into(),
            3,
            17,
            "daemon.routing_table".into(),
            "0 is out of range (1..=4294967295)",
        ),
        (
            "workers = 2",
            "workers = 2\nrouting_table_prio = 32764".into(),
            3,
            22,
            "daemon.routing_table_prio".into(),
            "32764 is out of range (1..=32763)",
        ),
        (
            "workers = 2",
            "workers = 2\nrouting_mark = 0".into(),
            3,
            16,
            "daemon.routing_mark".into(),
            "0 is out of range (1..=4294967295)",
        ),
        (
            "workers = 2",
            "workers = 2\nport = 500".into(),
            3,
            8,
            "daemon.port".into(),
            "port = 500 is IKE's port (ike_port, 500 by default): the NAT-T port frames IKE differently",
        ),
        (
            "workers = 2",
            "workers = 2\nlog = \"debgu\"".into(),
            3,
            7,
            "daemon.log".into(),
            "'debgu' is not a log level (did you mean 'debug'?): levels are error, warn, info, debug, trace, off",
        ),
        (
            "workers = 2",
            "workers = 2\nlog = \"info,verbose\"".into(),
            3,
            7,
            "daemon.log".into(),
            "'verbose' is not a log level: levels are",
        ),
        (
            "workers = 2",
            "workers = 2\nlog = \"[\"".into(),
            3,
            7,
            "daemon.log".into(),
            "not a log filter",
        ),
        (
            "workers = 2",
            "workers = 2\nstate_dir = \"\"".into(),
            3,
            13,
            "daemon.state_dir".into(),
            "empty path",
        ),
        (
            "workers = 2",
            "workers = 2\nmetrics = \"localhost:9720\"".into(),
            3,
            11,
            "daemon.metrics".into(),
            "'localhost:9720' is not an IP address and port (e.g. \"127.0.0.1:9720\" or \"[::1]:9720\")",
        ),
        (
            "workers = 2",
            "workers = 2\nmetrics = \"127.0.0.1\"".into(),
            3,
            11,
            "daemon.metrics".into(),
            "is not an IP address and port",
        ),
        (
            "workers = 2",
            "workers = 2\nmetrics = \"[::1]:0\"".into(),
            3,
            11,
            "daemon.metrics".into(),
            "port 0 would listen on a random port",
        ),
        (
            "workers = 2",
            "workers = 2\nmetrics = 9720".into(),
            3,
            11,
            "daemon.metrics".into(),
            "expected a string, found an integer",
        ),
        (
            "workers = 2",
            "workers = 2\nbogus = 1".into(),
            3,
            1,
            "daemon.bogus".into(),
            "unknown key (known here: workers, cpus, control, vici, state_dir, tun, port, ike_port, path_mtu, tun_queue_len, log, window_size, fragment_size, cookie_threshold, cookie_threshold_per_source, half_open_per_source, cookie_threshold_per_peer, half_open_per_peer, max_half_open, initiating_per_peer, routing_table, routing_table_prio, routing_mark, metrics)",
        ),
        (
            "workers = 2",
            "workers = 2\nvici = 7".into(),
            3,
            8,
            "daemon.vici".into(),
            "expected a string, found an integer",
        ),
        (
            "workers = 2",
            "workers = 2\ncontrol = \"/run/e/s\"\nvici = \"/run/e/s\"".into(),
            4,
            8,
            "daemon.vici".into(),
            "the VICI socket cannot be the control socket",
        ),
        (
            "workers = 2",
            "workers = ".into(),
            2,
            11,
            "".into(),
            "TOML syntax",
        ),
        (
            "\"192.0.2.2\"",
            "\"192.0.2.300\"".into(),
            6,
            17,
            "connections.site.remote_addrs[0]".into(),
            "'192.0.2.300' is not an IP address",
        ),
        (
            "\"192.0.2.2\"",
            "\"192.0.2.0/24\"".into(),
            6,
            17,
            "connections.site.remote_addrs[0]".into(),
            "ranges and subnets are not accepted",
        ),
        (
            "\"192.0.2.2\"",
            "\"2001:db8::2\"".into(),
            6,
            16,
            "connections.site.remote_addrs".into(),
            "has no IPv6 address to reach it from",
        ),
        (
            "\"192.0.2.2\"",
            "\"0.0.0.0\"".into(),
            6,
            17,
            "connections.site.remote_addrs[0]".into(),
            "cannot be a tunnel endpoint",
        ),
        (
            "remote_addrs = [\"192.0.2.2\"]",
            "remote_adrs = [\"192.0.2.2\"]".into(),
            6,
            1,
            "connections.site.remote_adrs".into(),
            "did you mean 'remote_addrs'?",
        ),
        (
            "remote_addrs = [\"192.0.2.2\"]",
            "remote_addrs = [\"192.0.2.2\"]\nmobike = false".into(),
            7,
            1,
            "connections.site.mobike".into(),
            "IKE setting on a connection whose children are all statically keyed",
        ),
        (
            "remote_addrs = [\"192.0.2.2\"]",
            "remote_addrs = [\"192.0.2.2\"]\nproposals = [\"aes256gcm16-prfsha256-x25519\"]".into(),
            7,
            1,
            "connections.site.proposals".into(),
            "children are all statically keyed",
        ),
        (
            "remote_addrs = [\"192.0.2.2\"]\n",
            "".into(),
            7,
            1,
            L.into(),
            "needs explicit local_addrs and remote_addrs",
        ),
        (
            "\"10.2.0.0/16\"",
            "\"10.2.0.0/33\"".into(),
            10,
            14,
            format!("{L}.remote_ts[0]"),
            "'10.2.0.0/33': prefix length /33 too long for 10.2.0.0",
        ),
        (
            "\"10.2.0.0/16\"",
            "\"10.2.0.1/16\"".into(),
            10,
            14,
            format!("{L}.remote_ts[0]"),
            "10.2.0.1/16 has host bits set",
        ),
        (
            "\"10.1.0.0/16\"",
            "\"10.1.0.1-fd00::1\"".into(),
            9,
            13,
            format!("{L}.local_ts[0]"),
            "10.1.0.1 and fd00::1 are of different families",
        ),
        (
            "\"10.2.0.0/16\"",
            "\"fd00:2::/64\"".into(),
            10,
            14,
            format!("{L}.remote_ts[0]"),
            "no address family in common with local_ts",
        ),
        (
            "local_ts = [\"10.1.0.0/16\"]\n",
            "".into(),
            8,
            1,
            format!("{L}.local_ts"),
            "missing: a statically keyed child needs fixed traffic selectors",
        ),
        (
            "[\"aes256gcm16\"]",
            "[\"aes256gcm17\"]".into(),
            11,
            18,
            format!("{L}.esp_proposals[0]"),
            "proposal \"aes256gcm17\": unknown algorithm",
        ),
        (
            "[\"aes256gcm16\"]",
            "[\"aes256gcm16\", \"aes128gcm16\"]".into(),
            11,
            33,
            format!("{L}.esp_proposals[1]"),
            "takes exactly one ESP proposal, found 2",
        ),
        (
            "[\"aes256gcm16\"]",
            "[\"aes256gcm16-x25519\"]".into(),
            11,
            18,
            format!("{L}.esp_proposals[0]"),
            "PFS",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nlife_time = \"4x\"".into(),
            12,
            13,
            format!("{L}.life_time"),
            "'4x' is not a duration",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nrekey_time = \"1h\"\nlife_time = \"30m\"".into(),
            13,
            13,
            format!("{L}.life_time"),
            "life_time (30m) must be greater than rekey_time (1h)",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nrekey_time = \"1s\"".into(),
            12,
            14,
            format!("{L}.rekey_time"),
            "rekey_time (1s) is shorter than the 5s minimum",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nreplay_window = 10".into(),
            12,
            17,
            format!("{L}.replay_window"),
            "10 is out of range (64..=32768)",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nper_cpu_sas = \"eager\"".into(),
            12,
            15,
            format!("{L}.per_cpu_sas"),
            "has no effect on a statically keyed child",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nmode = \"transport\"".into(),
            12,
            8,
            format!("{L}.mode"),
            "only tunnel mode",
        ),
        (
            "esp_proposals = [\"aes256gcm16\"]",
            "esp_proposals = [\"aes256gcm16\"]\nah_proposals = [\"sha256\"]".into(),
            12,
            1,
            format!("{L}.ah_proposals"),
            "AH is not implemented",
        ),
        (
            "in_spi = 0xc0000101",
            "in_spi = 255".into(),
            14,
            10,
            format!("{sa}.in_spi"),
            "SPI 255 is reserved (RFC 4303 §2.1",
        ),
        (
            "in_spi = 0xc0000101",
            "in_spi = 0".into(),
            14,
            10,
            format!("{sa}.in_spi"),
            "SPI 0 is reserved",
        ),
        (
            "in_spi = 0xc0000101",
            "in_spi = 0x1c0000101".into(),
            14,
            10,
            format!("{sa}.in_spi"),
            "does not fit in a 32-bit SPI",
        ),
        (
            "out_spi = 0xc0000201",
            "out_spi = \"0xzz\"".into(),
            15,
            11,
            format!("{sa}.out_spi"),
            "is not an SPI",
        ),
        (
            "in_key = \"0x",
            "in_key = \"0x00".into(),
            16,
            10,
            format!("{sa}.in_key"),
            "37 bytes, aes256gcm16 needs 36 (32-byte key + 4-byte salt)",
        ),
        (
            "in_key = \"0x",
            "in_key = \"0xg".into(),
            16,
            10,
            format!("{sa}.in_key"),
            "not hexadecimal (character 3 is not a hex digit)",
        ),
        (
            "in_key = \"0x",
            "in_key_file = \"k\"\nin_key = \"0x".into(),
            17,
            10,
            format!("{sa}.in_key"),
            "give in_key or in_key_file, not both",
        ),
        (
            "in_key = \"0x",
            "in_key_file = \"/nonexistent/key\"\nxin_key = \"0x".into(),
            16,
            15,
            format!("{sa}.in_key_file"),
            "cannot read '/nonexistent/key'",
        ),
        (
            "[\"aes256gcm16\"]",
            "[\"aes128-sha256\"]".into(),
            16,
            10,
            format!("{sa}.in_key"),
            "36 bytes, aes128-sha256 needs 48 (16-byte AES key + 32-byte HMAC key)",
        ),
        (
            "[[connections.site.children.lan.static_sas]]",
            "[connections.site.children.lan.static_sas]".into(),
            13,
            1,
            format!("{L}.static_sas"),
            "expected an array of tables",
        ),
    ];
    let mut failures = Vec::new();
    for (from, to, line, column, key, msg) in cases {
        let text = base().replacen(from, &to, 1);
        assert_ne!(text, base(), "case '{to}' did not change the base");
        let errs = errors_of(&text);
        match errs
            .iter()
            .find(|e| e.key == key && e.message.contains(msg))
        {
            None => failures.push(format!(
                "case '{to}': no error with key '{key}' and message '{msg}' in:\n{}",
                ConfigErrors(errs)
            )),
            Some(e) if (e.file.as_str(), e.line, e.column) != ("west.toml", line, column) => {
                failures.push(format!("case '{to}': expected {line}:{column}, got {e}"))
            }
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_typo_inside_a_pair_is_named_and_the_missing_key_too() {
    let errs = errors_of(&base().replacen("in_spi = ", "in_spii = ", 1));
    let sa = format!("{L}.static_sas[0]");
    assert!(
        errs.iter().any(
            |e| e.key == format!("{sa}.in_spii") && e.message.contains("did you mean 'in_spi'")
        )
    );
    assert!(
        errs.iter()
            .any(|e| e.key == format!("{sa}.in_spi") && e.message == "missing" && e.line == 13)
    );
}

#[test]
fn every_error_is_reported_in_file_order() {
    let text = base()
        .replacen("workers = 2", "workers = 0", 1)
        .replacen("\"10.2.0.0/16\"", "\"10.2.0.0/33\"", 1)
        .replacen("in_spi = 0xc0000101", "in_spi = 7", 1)
        .replacen("in_key = \"0x", "in_key = \"0xab", 1);
    let errs = errors_of(&text);
    let lines: Vec<usize> = errs.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 10, 14, 16], "{}", ConfigErrors(errs.clone()));
    let shown = ConfigErrors(errs).to_string();
    assert_eq!(shown.lines().count(), 4);
    assert!(shown.starts_with("west.toml:2:11: daemon.workers: "));
}

#[test]
fn overlapping_children_are_refused_naming_both() {
    // Same remote side, local side inside the first child's.
    let text = base() + &second("10.1.2.0/24", "10.2.0.0/16", "0xc0000102");
    let errs = errors_of(&text);
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    let e = &errs[0];
    assert_eq!((e.line, e.column), (24, 13));
    assert_eq!(e.key, "connections.other.children.net.local_ts[0]");
    assert_eq!(
        e.message,
        "10.1.2.0/24 <-> 10.2.0.0/16 overlaps child site/lan (10.1.0.0/16 <-> 10.2.0.0/16, at west.toml:9:13): \
         both would claim the same traffic and one of them would never see it"
    );
    // Disjoint on one side: fine.
    parse_str(
        &(base() + &second("10.1.2.0/24", "10.3.0.0/16", "0xc0000102")),
        "west.toml",
    )
    .unwrap();
    // Same addresses but different ports: fine.
    let text = base().replacen("\"10.2.0.0/16\"", "\"10.2.0.0/16[tcp/80]\"", 1)
        + &second("10.1.0.0/16", "10.2.0.0/16[tcp/443]", "0xc0000102");
    parse_str(&text, "west.toml").unwrap();
}

#[test]
fn inbound_spis_are_unique_across_the_file() {
    let text = base() + &second("10.5.0.0/16", "10.6.0.0/16", "0xc0000101");
    let errs = errors_of(&text);
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_eq!((errs[0].line, errs[0].column), (29, 10));
    assert_eq!(
        errs[0].key,
        "connections.other.children.net.static_sas[0].in_spi"
    );
    assert!(
        errs[0]
            .message
            .starts_with("in_spi 0xc0000101 is already used by site/lan (at west.toml:14:10)")
    );
    // Outbound SPIs repeat only across peers: the same out_spi towards another peer is fine.
    let text = base()
        + &second("10.5.0.0/16", "10.6.0.0/16", "0xc0000102").replacen(
            "0xc0000301",
            "0xc0000201",
            1,
        );
    parse_str(&text, "west.toml").unwrap();
}

#[test]
fn outbound_spis_are_unique_towards_a_peer() {
    let pair2 = format!(
        "\n[[connections.site.children.lan.static_sas]]\nin_spi = 0xc0000102\nout_spi = 0xc0000201\nin_key = \"{K36C}\"\nout_key = \"{K36D}\"\n"
    );
    let errs = errors_of(&(base() + &pair2));
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_eq!(errs[0].key, format!("{L}.static_sas[1].out_spi"));
    assert!(errs[0].message.contains("towards the same peer"));
}

#[test]
fn keys_never_appear_in_messages_or_debug() {
    let secret = "0x5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e7ab";
    let text = base().replacen(&format!("0x{K36}"), secret, 1);
    let errs = errors_of(&text)
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(errs.contains("37 bytes"), "{errs}");
    assert!(!errs.contains("5ec2e7"), "{errs}");
    let good = base().replacen(
        &format!("0x{K36}"),
        "0x5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e7",
        1,
    ) + "\n[secrets.x]\nsecret = \"hunter2-hunter2\"\n";
    let c = parse_str(&good, "west.toml").unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("5ec2e7") && !dbg.contains("hunter2"), "{dbg}");
    assert!(!dbg.to_lowercase().contains("0x0001020304"), "{dbg}");
}

#[test]
fn ike_errors() {
    let text = r#"[connections.gw]
remote_addrs = "198.51.100.7"
version = 1
proposals = "aes256gcm16-x25519"
local = { auth = "pubkey", id = "cn=x" }
remote.certs = "x.pem"
dpd_delay = "soon"
[connections.gw.children.host]
per_cpu_sas = "sometimes"
start_action = "go"
"#;
    let errs = errors_of(text);
    let got: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.key.as_str())).collect();
    assert_eq!(
        got,
        [
            (3, "connections.gw.version"),
            (4, "connections.gw.proposals"),
            // pubkey without certs; a DN id is fine.
            (5, "connections.gw.local"),
            // certs on a PSK side.
            (6, "connections.gw.remote.certs"),
            (7, "connections.gw.dpd_delay"),
            (9, "connections.gw.children.host.per_cpu_sas"),
            (10, "connections.gw.children.host.start_action"),
        ],
        "{}",
        ConfigErrors(errs.clone())
    );
    assert!(errs[0].message.contains("only IKEv2"));
    assert!(errs[2].message.contains("needs 'certs'"), "{}", errs[2].message);
    assert!(
        errs[1]
            .message
            .contains("AEAD IKE proposal needs a prf keyword")
    );
}

#[test]
fn lifecycle_errors() {
    let text = r#"[daemon]
window_size = 0
[connections.gw]
remote_addrs = "198.51.100.7"
rekey_time = "1m"
rand_time = "2m"
[connections.gw.children.a]
local_ts = "10.1.0.0/24"
rekey_time = "10s"
rand_time = "10s"
dpd_action = "clear"
[connections.gw.children.b]
local_ts = "10.2.0.0/24"
dpd_action = "restart"
close_action = "start"
[connections.gw.children.c]
local_ts = "10.3.0.0/24"
close_action = "trap"
[connections.gw.children.d]
local_ts = "10.4.0.0/24"
close_action = "restart"
[secrets.s]
secret = "x"
"#;
    let errs = errors_of(text);
    let got: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.key.as_str())).collect();
    assert_eq!(
        got,
        [
            (2, "daemon.window_size"),
            (6, "connections.gw.rand_time"),
            (10, "connections.gw.children.a.rand_time"),
            (14, "connections.gw.children.b.dpd_action"),
            (18, "connections.gw.children.c.close_action"),
            (21, "connections.gw.children.d.close_action"),
        ],
        "{}",
        ConfigErrors(errs.clone())
    );
    assert!(errs[1].message.contains("shorter than rekey_time"));
    assert!(errs[3].message.contains("must share a dpd_action"));
    assert!(errs[4].message.contains("must share a close_action"));
    assert!(errs[5].message.contains("expected none, start or trap"), "{}", errs[5].message);
}

#[test]
fn host_names_are_peers_only_and_must_be_names() {
    let text = r#"[connections.gw]
local_addrs = ["gw.example.com"]
remote_addrs = ["192.0.2.256", "-bad.example", "vpn.example.com", "VPN.example.com"]
[connections.gw.children.host]
"#;
    let errs = errors_of(text);
    let got: Vec<(usize, usize, &str)> = errs.iter().map(|e| (e.line, e.column, e.key.as_str())).collect();
    assert_eq!(
        got,
        [
            (2, 16, "connections.gw.local_addrs[0]"),
            (3, 17, "connections.gw.remote_addrs[0]"),
            (3, 32, "connections.gw.remote_addrs[1]"),
            (3, 67, "connections.gw.remote_addrs[3]"),
        ],
        "{}",
        ConfigErrors(errs.clone())
    );
    assert!(errs[0].message.contains("host names are accepted in remote_addrs only"), "{}", errs[0].message);
    assert!(errs[1].message.contains("'192.0.2.256' is not an IP address"), "{}", errs[1].message);
    assert!(errs[2].message.contains("is not an IP address"), "{}", errs[2].message);
    assert!(errs[3].message.contains("listed twice"), "{}", errs[3].message);
}

#[test]
fn recover_takes_notify_or_initiate_and_initiate_needs_a_peer_address() {
    let text = r#"[connections.gw]
remote_addrs = "198.51.100.7"
recover = "maybe"
[connections.gw.children.a]
local_ts = "10.1.0.0/24"
[connections.any]
recover = "initiate"
[connections.any.children.a]
local_ts = "10.2.0.0/24"
[connections.ok]
remote_addrs = "198.51.100.8"
recover = "initiate"
[connections.ok.children.a]
local_ts = "10.3.0.0/24"
[secrets.s]
secret = "x"
"#;
    let errs = errors_of(text);
    let got: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.key.as_str())).collect();
    assert_eq!(got, [(3, "connections.gw.recover"), (7, "connections.any.recover")], "{}", ConfigErrors(errs.clone()));
    assert!(errs[0].message.contains("expected notify or initiate"), "{}", errs[0].message);
    assert!(errs[1].message.contains("needs remote_addrs"), "{}", errs[1].message);
}

#[test]
fn fragmentation_and_fragment_size() {
    let text = "[daemon]\nfragment_size = 500\n[connections.gw]\nremote_addrs = \"198.51.100.7\"\nfragmentation = \"force\"\n[connections.gw.children.a]\n[connections.b]\nremote_addrs = \"198.51.100.8\"\nfragmentation = \"maybe\"\n[connections.b.children.a]\nlocal_ts = \"10.9.0.0/24\"\n[secrets.s]\nsecret = \"x\"\n";
    let errs = errors_of(text);
    let got: Vec<(usize, &str)> = errs.iter().map(|e| (e.line, e.key.as_str())).collect();
    assert_eq!(got, [(2, "daemon.fragment_size"), (5, "connections.gw.fragmentation"), (9, "connections.b.fragmentation")], "{}", ConfigErrors(errs.clone()));
    assert!(errs[0].message.contains("576"), "{}", errs[0].message);
    assert!(errs[1].message.contains("IKEv1"), "{}", errs[1].message);
    assert!(errs[2].message.contains("expected yes, accept or no"), "{}", errs[2].message);
    let ok = text.replace("500", "1400").replace("\"force\"", "false").replace("maybe", "accept");
    let c = parse_str(&ok, "t.toml").unwrap();
    assert_eq!(c.daemon.ike.fragment_size, 1400);
    let f: Vec<_> = c.connections.iter().map(|c| c.ike.as_ref().unwrap().fragmentation).collect();
    assert_eq!(f, [esparto_ike::Fragmentation::No, esparto_ike::Fragmentation::Accept]);
    let d = parse_str(&text.replace("fragmentation = \"force\"\n", "").replace("fragmentation = \"maybe\"\n", "").replace("fragment_size = 500\n", ""), "t.toml").unwrap();
    assert_eq!((d.daemon.ike.fragment_size, d.connections[0].ike.as_ref().unwrap().fragmentation), (1280, esparto_ike::Fragmentation::Yes), "strongSwan's defaults");
}

#[test]
fn unique_takes_swanctls_values() {
    let text = "[connections.gw]\nremote_addrs = \"198.51.100.7\"\nunique = \"replace-all\"\n[connections.gw.children.a]\n[secrets.s]\nsecret = \"x\"\n";
    let errs = errors_of(text);
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_eq!((errs[0].line, errs[0].key.as_str()), (3, "connections.gw.unique"));
    assert!(errs[0].message.contains("'replace-all': expected no, never, keep, replace"), "{}", errs[0].message);
    let ok = text.replace("replace-all", "never");
    let c = parse_str(&ok, "t.toml").unwrap();
    assert_eq!(c.connections[0].ike.as_ref().unwrap().unique, esparto_ike::Unique::Never);
}

#[test]
fn a_missing_psk_is_an_error() {
    let text = "[connections.gw]\nremote_addrs = \"198.51.100.7\"\nlocal.id = \"@moon\"\nremote.id = \"@sun\"\n[connections.gw.children.host]\n";
    let errs = errors_of(text);
    assert_eq!(errs.len(), 1);
    assert_eq!((errs[0].line, errs[0].key.as_str()), (1, "connections.gw"));
    assert!(
        errs[0]
            .message
            .contains("no [secrets] entry holds a PSK for local id '@moon' and remote id '@sun'")
    );
}

#[test]
fn no_follow_on_errors_and_secrets_required_for_ike() {
    // A misspelt address is one error, not also "addresses missing".
    let errs = errors_of(&base().replacen("\"192.0.2.2\"", "\"192.0.2.300\"", 1));
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    // An IKE responder whose identities are only known at run time still needs some PSK.
    let errs = errors_of("[connections.any.children.c]\nlocal_ts = \"10.9.0.0/16\"\n");
    assert_eq!(errs.len(), 1, "{}", ConfigErrors(errs.clone()));
    assert_eq!((errs[0].line, errs[0].key.as_str()), (1, "connections.any"));
    assert!(errs[0].message.contains("no [secrets] section"));
}

#[test]
fn static_children_refuse_negotiation_keys() {
    let text = base().replacen("esp_proposals = [\"aes256gcm16\"]", "esp_proposals = [\"aes256gcm16\"]\nrand_time = \"1s\"\ndpd_action = \"restart\"\nclose_action = \"start\"", 1);
    let errs = errors_of(&text);
    let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
    assert!(keys.iter().any(|k| k.ends_with(".rand_time")) && keys.iter().any(|k| k.ends_with(".dpd_action")) && keys.iter().any(|k| k.ends_with(".close_action")), "{}", ConfigErrors(errs.clone()));
    assert!(errs.iter().all(|e| e.message.contains("statically keyed")), "{}", ConfigErrors(errs.clone()));
}

/// One error per root cause, naming the token and the valid choices.
#[test]
fn errors_name_their_cause_once() {
    let ike = |extra: &str| {
        format!(
            "[daemon]\nworkers = 2\n[connections.site]\nlocal_addrs = [\"192.0.2.1\"]\nremote_addrs = [\"192.0.2.2\"]\n\
             local = {{ auth = \"psk\", id = \"@west\" }}\nremote = {{ auth = \"psk\", id = \"@east\" }}\n{extra}\
             [secrets.s]\nids = [\"@west\", \"@east\"]\nsecret = \"a long enough secret for the test here\"\n"
        )
    };
    // No child: that error alone, not "IKE setting … ignored" for each key.
    let e = errors_of(&ike(""));
    assert_eq!(e.len(), 1, "{}", ConfigErrors(e.clone()));
    assert!(e[0].message.contains("a connection needs at least one child"), "{}", e[0]);
    // An unknown algorithm: which word, the nearest one, every known one.
    let e = errors_of(&ike(
        "proposals = [\"aes256gcm16-prfsha256-x2551\"]\n[connections.site.children.lan]\nlocal_ts = [\"10.1.0.0/24\"]\nremote_ts = [\"10.2.0.0/24\"]\n",
    ));
    assert_eq!(e.len(), 1, "{}", ConfigErrors(e.clone()));
    assert!(e[0].message.contains("unknown algorithm 'x2551' (did you mean 'x25519'?); known: aes256gcm16,"), "{}", e[0]);
    assert!(e[0].message.contains("modp2048") && e[0].message.contains("noesn"), "{}", e[0]);
    // A key given twice names the key.
    let e = errors_of("[daemon]\nworkers = 2\nworkers = 3\n");
    assert_eq!((e[0].line, e[0].message.as_str()), (3, "TOML syntax: duplicate key 'workers': it is set earlier in the same table"));
    // swanctl.conf given by mistake says so.
    let e = errors_of("connections {\n    site {\n        remote_addrs = 192.0.2.2\n    }\n}\n");
    assert!(e[0].message.contains("this looks like swanctl.conf syntax") && e[0].message.contains("swanctl --load-all"), "{}", e[0]);
    // An authority whose CA does not load: its error, not "needs an
    // [authorities] entry" at every connection that would use it.
    let e = errors_of(&ike("[authorities.ca]\ncacert = \"/nonexistent/ca.crt\"\n").replace(
        "remote = { auth = \"psk\", id = \"@east\" }",
        "remote = { auth = \"pubkey\", id = \"@east\" }\n[connections.site.children.lan]\nlocal_ts = [\"10.1.0.0/24\"]\nremote_ts = [\"10.2.0.0/24\"]",
    ));
    let all = ConfigErrors(e.clone()).to_string();
    assert!(all.contains("cannot read '/nonexistent/ca.crt'"), "{all}");
    assert!(!all.contains("needs 'cacerts' here"), "{all}");
}

#[test]
fn a_file_that_is_not_utf8_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("west.toml");
    std::fs::write(&p, b"[daemon]\nworkers = 2\nlog = \"info\xff\"\n").unwrap();
    let e = load(&p).unwrap_err().to_string();
    assert!(e.contains("not UTF-8 at byte 32 (line 3, column 12)"), "{e}");
}
