//! Debian's `swanctl` drives Esparto over VICI.
//!
//! Two Esparto gateways in the standard topology; neither starts the
//! tunnel by itself. `swanctl --uri unix://…/charon.vici` against gw-west:
//! `--version`, `--stats`, `--list-algs`, `--list-conns`, `--initiate
//! --child` (the negotiation's log streams, exit 0), `--list-sas` (plain,
//! `--raw`, `--pretty`), `--rekey --child`, `--terminate --child` and
//! `--ike`, `--list-pols`, `--counters` (and `--reset`), `--log`,
//! `--install` and `--uninstall` of a trap, and what Esparto
//! refuses (counters per connection) fails with Esparto's reason.
//! Then the clients that misbehave: one that sends nothing, one that
//! announces a 4 GiB segment, one that sends garbage, 64 idle ones at
//! once — the daemon keeps serving swanctl throughout.
//!
//! Needs root and swanctl: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};

const PSK: &str = "vici netns test secret, long enough";

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_esparto"))
}

fn gateway(topo: &Topology, side: Node) -> EspartoGateway {
    let west = side == Node::GwWest;
    let keying = Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: if west { "@west" } else { "@east" }.into(),
        remote_id: if west { "@east" } else { "@west" }.into(),
        psk: PSK.into(),
        initiator: false,
    };
    let mut cfg = EspartoConfig::site(side, keying).unwrap();
    cfg.workers = Some(2);
    EspartoGateway::start(topo.ns(side), bin(), &cfg).unwrap()
}

fn vici_path(gw: &EspartoGateway) -> PathBuf {
    gw.control_path().with_file_name("charon.vici")
}

/// `swanctl ARGS --uri unix://…`: (exit status 0, stdout, stderr).
fn swanctl(gw: &EspartoGateway, args: &[&str]) -> (bool, String, String) {
    let uri = format!("unix://{}", vici_path(gw).display());
    let out = Command::new("timeout")
        .arg("60")
        .arg("swanctl")
        .args(args)
        .arg("--uri")
        .arg(&uri)
        .output()
        .unwrap();
    let (o, e) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
    (out.status.success(), o, e)
}

fn ok(gw: &EspartoGateway, args: &[&str]) -> String {
    let (good, out, err) = swanctl(gw, args);
    assert!(good, "swanctl {args:?} failed:\n{out}\n{err}");
    out
}

fn wait(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Resident memory of process `pid` (`VmRSS`), KiB.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0)
}

fn ping_through(topo: &Topology) -> bool {
    let he = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    traffic::ping(topo.ns(Node::HostWest), he, 3, Duration::from_millis(300)).is_ok_and(|r| r.received > 0)
}

#[test]
fn swanctl_drives_esparto() {
    if skip("vici_netns", true) {
        return;
    }
    let topo = Topology::new().unwrap();
    let east = gateway(&topo, Node::GwEast);
    let west = gateway(&topo, Node::GwWest);
    let vici = vici_path(&west);
    let mode = std::fs::metadata(&vici).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.unwrap(), 0o600, "the VICI socket is for its owner only");

    let v = ok(&west, &["--version", "--daemon"]);
    assert!(v.contains(&format!("{} esparto (Linux", env!("CARGO_PKG_VERSION"))), "{v}");
    let st = ok(&west, &["--stats"]);
    assert!(st.contains("IKE_SAs: 0 total, 0 half-open"), "{st}");
    assert!(st.contains("worker threads: 2 total"), "{st}");
    // The algorithms by strongSwan's names, with the library of each.
    let algs = ok(&west, &["--list-algs"]);
    for want in ["aead:", "  AES_GCM_16[aws-lc-rs]", "  CHACHA20_POLY1305[aws-lc-rs]", "ke:", "  CURVE_25519[aws-lc-rs]", "  MODP_3072[crypto-bigint]", "prf:", "  PRF_HMAC_SHA2_256[aws-lc-rs]"] {
        assert!(algs.lines().any(|l| l == want), "{want:?} not in {algs}");
    }

    let conns = ok(&west, &["--list-conns"]);
    assert!(conns.contains("site: IKEv2"), "{conns}");
    assert!(conns.contains("lan: TUNNEL"), "{conns}");
    assert!(conns.contains("10.1.0.0/24"), "{conns}");

    // `swanctl --log` follows the daemon's log from now on (the daemon
    // logs that it does, the first line the follower gets).
    // Line-buffered: swanctl's stdout to a file is block-buffered.
    let mut cmd = Command::new("stdbuf");
    cmd.args(["-oL", "swanctl", "--log", "--uri", &format!("unix://{}", vici.display())]);
    let follower = esparto_testbed::follow::Follower::spawn(cmd, &west.dir().path().join("swanctl-log.txt")).unwrap();
    let logged = |what: &str| follower.output().lines().any(|l| l.starts_with("00[") && l.contains(what));
    wait("swanctl --log to follow", 10, || logged("follows the daemon's events"));

    // Initiate the child: swanctl prints the negotiation's log and exits 0.
    let init = ok(&west, &["--initiate", "--child", "lan", "--timeout", "20"]);
    assert!(init.contains("initiate completed successfully"), "{init}");
    assert!(init.contains("[IKE] "), "the log streams as control-log events: {init}");
    wait("traffic through what swanctl brought up", 20, || ping_through(&topo));
    wait("the daemon's log in swanctl --log", 10, || logged("IKE SA established"));
    assert!(follower.output().contains("00[IKE] "), "IKE lines in the IKE group");
    drop(follower);

    let sas = ok(&west, &["--list-sas"]);
    assert!(sas.contains("site: #1, ESTABLISHED, IKEv2"), "{sas}");
    // Identities as charon prints them (an FQDN without Esparto's '@').
    assert!(sas.contains("local  'west' @ 192.0.2.1[") && sas.contains("remote 'east' @ 192.0.2.2["), "{sas}");
    assert!(sas.contains("AES_GCM_16-256/PRF_HMAC_SHA2_256/CURVE_25519"), "{sas}");
    assert!(sas.contains("lan: #"), "{sas}");
    assert!(sas.contains("INSTALLED, TUNNEL-in-UDP, ESP:AES_GCM_16-256"), "{sas}");
    assert!(sas.contains("local  10.1.0.0/24") && sas.contains("remote 10.2.0.0/24"), "{sas}");
    let packets_in = sas.lines().find(|l| l.trim_start().starts_with("in  ")).unwrap_or_default().to_string();
    assert!(!packets_in.contains(" 0 packets"), "the pings are counted: {sas}");
    let raw = ok(&west, &["--list-sas", "--raw"]);
    assert!(raw.contains("list-sa event {site {uniqueid=1 version=2 state=ESTABLISHED"), "{raw}");
    let pretty = ok(&west, &["--list-sas", "--pretty"]);
    assert!(pretty.contains("list-sa event {\n  site {\n    uniqueid = 1"), "{pretty}");
    assert!(ok(&west, &["--list-sas", "--ike", "nope"]).trim().is_empty());

    // Rekey the child; the tunnel keeps carrying traffic.
    let spi_before = west.sas().unwrap()[0].children[0].in_spi.clone();
    let r = ok(&west, &["--rekey", "--child", "lan"]);
    assert!(r.contains("rekey completed successfully"), "{r}");
    wait("the rekeyed Child SA", 20, || west.sas().unwrap().iter().flat_map(|s| &s.children).all(|c| c.in_spi != spi_before));
    assert!(ping_through(&topo));

    // strongSwan's IKE counters: west initiated the IKE SA and rekeyed
    // the child; a reset zeroes what VICI shows.
    let counters = |args: &[&str]| -> HashMap<String, u64> {
        let out = ok(&west, args);
        assert!(out.starts_with("global:\n"), "{out}");
        out.lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect()
    };
    let c = counters(&["--counters"]);
    assert_eq!(c.len(), 21, "{c:?}");
    for k in ["ike-init-out-req", "ike-init-in-resp", "ike-auth-out-req", "ike-auth-in-resp", "child-rekey", "create-child-out-req", "create-child-in-resp"] {
        assert!(c[k] >= 1, "{k}: {c:?}");
    }
    assert_eq!((c["ike-init-in-req"], c["ike-auth-in-req"], c["ike-rekey-init"]), (0, 0, 0), "{c:?}");
    assert!(ok(&west, &["--counters", "--reset"]).contains("reset-counters completed successfully"));
    let c = counters(&["--counters"]);
    assert_eq!((c["ike-init-out-req"], c["ike-auth-out-req"], c["child-rekey"]), (0, 0, 0), "{c:?}");
    // Per connection: Esparto keeps none, and says so.
    let (good, _, err) = swanctl(&west, &["--counters", "--name", "site"]);
    assert!(!good && err.contains("get-counters failed: Esparto keeps global IKE counters only"), "{err}");
    // No child traps: no policies.
    assert!(ok(&west, &["--list-pols"]).trim().is_empty());

    misbehaving_clients_cost_little(&west, &vici);

    // Terminate the Child SAs of the child by name: the IKE SA stays.
    let t = ok(&west, &["--terminate", "--child", "lan"]);
    assert!(t.contains("terminate completed successfully"), "{t}");
    wait("the Child SAs to go, their IKE SA staying", 20, || {
        let sas = west.sas().unwrap();
        sas.len() == 1 && sas[0].children.is_empty()
    });
    assert!(ok(&west, &["--list-sas"]).contains("site: #1, ESTABLISHED"));

    // Initiating the child again negotiates it within that IKE SA; once
    // it is up, initiating starts nothing and says so.
    let init = ok(&west, &["--initiate", "--child", "lan", "--timeout", "20"]);
    assert!(init.contains("initiate completed successfully"), "{init}");
    let sas = west.sas().unwrap();
    assert_eq!((sas.len(), sas[0].children.is_empty()), (1, false), "{sas:?}");
    assert!(ok(&west, &["--list-sas"]).contains("site: #1, ESTABLISHED"), "the same IKE SA");
    let (good, out, err) = swanctl(&west, &["--initiate", "--child", "lan", "--timeout", "20"]);
    assert!(!good && format!("{out}{err}").contains("site: already up (IKE SA"), "{out}{err}");
    assert_eq!(west.sas().unwrap().len(), 1, "no second IKE SA");

    // Terminate the IKE SA by name.
    let t = ok(&west, &["--terminate", "--ike", "site"]);
    assert!(t.contains("terminate completed successfully"), "{t}");
    wait("the IKE SA to go", 20, || west.sas().unwrap().is_empty() && east.sas().unwrap().is_empty());
    assert!(ok(&west, &["--stats"]).contains("IKE_SAs: 0 total"));

    // A trap installed over VICI: listed, and traffic brings the tunnel
    // up; uninstalled, it is no longer listed.
    let i = ok(&west, &["--install", "--child", "lan"]);
    assert!(i.contains("install completed successfully"), "{i}");
    let pols = ok(&west, &["--list-pols"]);
    assert!(pols.contains("site/lan, TUNNEL") && pols.contains("local:  10.1.0.0/24"), "{pols}");
    let (good, _, err) = swanctl(&west, &["--install", "--child", "lan"]);
    assert!(!good && err.contains("a trap policy is installed already"), "{err}");
    wait("the trap to bring the tunnel up", 20, || ping_through(&topo));
    assert!(ok(&west, &["--uninstall", "--child", "lan"]).contains("uninstall completed successfully"));
    assert!(ok(&west, &["--list-pols"]).trim().is_empty());
    let (good, _, err) = swanctl(&west, &["--uninstall", "--child", "lan"]);
    assert!(!good && err.contains("no trap policy is installed"), "{err}");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// Clients that send nothing, announce 4 GiB, send garbage or never
/// read: each is dropped or bounded, and swanctl is served meanwhile.
fn misbehaving_clients_cost_little(west: &EspartoGateway, vici: &Path) {
    let rss_before = rss_kib(west.pid());
    let idle: Vec<UnixStream> = (0..64).map(|_| UnixStream::connect(vici).unwrap()).collect();
    let mut huge = UnixStream::connect(vici).unwrap();
    huge.write_all(&[0xff, 0xff, 0xff, 0xff, 0]).unwrap();
    let mut garbage = UnixStream::connect(vici).unwrap();
    garbage.write_all(&[0, 0, 0, 3, 9, 9, 9]).unwrap();
    // A registration for an event Esparto does not raise: EVENT_UNKNOWN.
    let mut reg = UnixStream::connect(vici).unwrap();
    reg.write_all(&[&[0, 0, 0, 12, 3, 10][..], b"ike-update"].concat()).unwrap();
    let mut answer = [0u8; 5];
    reg.read_exact(&mut answer).unwrap();
    assert_eq!(answer, [0, 0, 0, 1, 6], "EVENT_UNKNOWN");

    // Served while they hang on, each costing little.
    assert!(ok(west, &["--stats"]).contains("IKE_SAs: 1 total"));
    let per_client = rss_kib(west.pid()).saturating_sub(rss_before) / 67;
    eprintln!("vici: 67 misbehaving clients connected, {per_client} KiB of resident memory each");
    assert!(per_client <= 1024, "{per_client} KiB per idle client");
    // The bad framings were closed at once.
    for s in [&mut huge, &mut garbage] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 16];
        // Closed with our bytes unread: end of stream or a reset.
        let r = s.read(&mut b);
        assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "closed: {r:?}");
    }
    // The silent ones are dropped after the first-packet timeout.
    let started = Instant::now();
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 16];
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "dropped");
    }
    assert!(started.elapsed() < Duration::from_secs(25), "{:?}", started.elapsed());
    assert!(ok(west, &["--stats"]).contains("IKE_SAs: 1 total"));
    let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap_or_default();
    assert!(log.contains("vici: vici segment longer than 512 KiB; connection closed") || log.contains("longer than 512 KiB"), "{log}");
}

/// The Python interpreter of the venv `scripts/setup.sh` puts strongSwan's
/// `vici` package in (PyPI, pinned).
const VICI_PYTHON: &str = "/opt/esparto-testbed/vici-6.0.3/bin/python";

/// strongSwan's own Python client library: `version`, an `initiate`
/// whose log streams as control-log events, then `list_sas` and
/// `list_conns`, each parsed by the library as it parses charon's.
#[test]
fn python_vici_lists_and_initiates() {
    if skip("vici_netns", true) {
        return;
    }
    if !Path::new(VICI_PYTHON).exists() {
        eprintln!("SKIP vici_netns python: missing {VICI_PYTHON} (scripts/setup.sh installs it)");
        return;
    }
    let topo = Topology::new().unwrap();
    let east = gateway(&topo, Node::GwEast);
    let west = gateway(&topo, Node::GwWest);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vici/client.py");
    let out = Command::new("timeout")
        .args(["60", VICI_PYTHON, script])
        .arg(vici_path(&west))
        .args(["site", "lan"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["version"]["daemon"], "esparto", "{v}");
    let logs = v["initiate"].as_array().unwrap();
    assert!(logs.iter().any(|l| l.as_str().is_some_and(|m| m.contains("IKE_SA established"))), "{logs:?}");
    let sa = &v["sas"][0]["site"];
    assert_eq!((sa["state"].as_str(), sa["version"].as_str()), (Some("ESTABLISHED"), Some("2")), "{v}");
    let children = sa["child-sas"].as_object().unwrap();
    assert_eq!(children.len(), 1, "{v}");
    let child = children.values().next().unwrap();
    assert_eq!((child["name"].as_str(), child["state"].as_str()), (Some("lan"), Some("INSTALLED")), "{v}");
    assert_eq!(child["local-ts"][0], "10.1.0.0/24", "{v}");
    assert_eq!(v["conns"][0]["site"]["children"]["lan"]["mode"], "TUNNEL", "{v}");

    // What the second session heard, in order: up, rekeys, down.
    let events = v["events"].as_array().unwrap();
    let sa_events: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] != "log").collect();
    let shape: Vec<String> = sa_events
        .iter()
        .map(|e| format!("{}{}", e["kind"].as_str().unwrap(), if e["msg"]["up"] == "yes" { " up" } else { "" }))
        .collect();
    let first = |kind: &str| shape.iter().position(|s| s == kind).unwrap_or_else(|| panic!("no {kind} in {shape:?}"));
    assert!(first("ike-updown up") < first("child-updown up"), "{shape:?}");
    assert!(first("child-updown up") < first("child-rekey"), "{shape:?}");
    assert!(first("child-rekey") < first("child-updown") && first("child-updown") < first("ike-updown"), "{shape:?}");
    assert!(first("ike-rekey") < first("ike-updown"), "{shape:?}");
    let of = |kind: &str| &sa_events[first(kind)]["msg"]["site"];
    let up = of("child-updown up");
    assert_eq!(up["state"], "ESTABLISHED", "{up}");
    let (_, c) = up["child-sas"].as_object().unwrap().iter().next().unwrap();
    assert_eq!((c["name"].as_str(), c["local-ts"][0].as_str()), (Some("lan"), Some("10.1.0.0/24")), "{up}");
    let rekey = &of("child-rekey")["child-sas"]["lan"];
    assert_ne!(rekey["old"]["spi-in"], rekey["new"]["spi-in"], "{rekey}");
    assert!(rekey["new"]["spi-in"].as_str().is_some_and(|s| s.len() == 8), "{rekey}");
    let ike = of("ike-rekey");
    assert_ne!(ike["old"]["uniqueid"], ike["new"]["uniqueid"], "{ike}");
    assert_ne!(ike["old"]["responder-spi"], ike["new"]["responder-spi"], "{ike}");
    assert!(events.iter().any(|e| e["kind"] == "log" && e["msg"]["msg"].as_str().is_some_and(|m| m.contains("IKE SA established"))), "no log event");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// gw-west's swanctl.conf: the tunnel `gateway(…, GwEast)` answers, as a
/// strongSwan site writes it (authentication rounds named, lists as
/// comma lists, the PSK in `secrets`).
const SWANCTL_CONF: &str = r#"
connections {
    site {
        version = 2
        local_addrs = 192.0.2.1
        remote_addrs = 192.0.2.2
        proposals = aes256gcm16-prfsha256-x25519
        rekey_time = 4h
        local-1 {
            auth = psk
            id = @west
        }
        remote-1 {
            auth = psk
            id = @east
        }
        children {
            lan {
                local_ts = 10.1.0.0/24
                remote_ts = 10.2.0.0/24
                esp_proposals = aes256gcm16
                start_action = start
            }
        }
    }
}
secrets {
    ike-site {
        id-west = @west
        id-east = @east
        secret = "vici netns test secret, long enough"
    }
}
"#;

/// `swanctl --load-all` of a swanctl.conf into a daemon whose TOML file
/// has no connection: the tunnel comes up and carries traffic, shows in
/// `esparto sas` like a connection of the file, a key Esparto does not
/// know is refused with check-config's message, and loading a file
/// without the connection unloads it (its IKE SA deleted with the peer).
#[test]
fn swanctl_load_all_brings_up_a_swanctl_conf() {
    if skip("vici_netns", true) {
        return;
    }
    let topo = Topology::new().unwrap();
    let east = gateway(&topo, Node::GwEast);
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin(), "esparto0", |control| {
        format!(
            "[daemon]\nworkers = 2\ncontrol = \"{}\"\nstate_dir = \"{}\"\n",
            control.display(),
            control.with_file_name("state").display()
        )
    })
    .unwrap();
    let dir = west.dir().path().to_path_buf();
    let conf = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };

    let file = conf("swanctl.conf", SWANCTL_CONF);
    let out = ok(&west, &["--load-all", "--noprompt", "--file", &file]);
    assert!(out.contains("loaded ike secret 'ike-site'"), "{out}");
    assert!(out.contains("successfully loaded 1 connections, 0 unloaded"), "{out}");
    wait("traffic through what swanctl loaded", 20, || ping_through(&topo));
    let sas = west.sas().unwrap();
    assert_eq!((sas.len(), sas[0].connection.as_str()), (1, "site"), "{sas:?}");
    assert!(ok(&west, &["--list-conns"]).contains("site: IKEv2"));
    // Loading the same file again changes nothing: the IKE SA stays.
    let id = sas[0].id.clone();
    let out = ok(&west, &["--load-all", "--noprompt", "--file", &file]);
    assert!(out.contains("successfully loaded 1 connections, 0 unloaded"), "{out}");
    assert_eq!(west.sas().unwrap()[0].id, id, "an unchanged connection keeps its IKE SA");

    // A typo is refused with the loader's message, naming the connection.
    let other = "    other {\n        local_addrs = 192.0.2.1\n        remote_addrs = 192.0.2.3\n        \
                 local-1 {\n            auth = psk\n            id = @west\n        }\n        \
                 remote-1 {\n            auth = psk\n            id = @other\n        }\n        \
                 children {\n            lan {\n                local_ts = 10.1.0.0/24\n                \
                 remote_ts = 10.3.0.0/24\n                esp_proposal = aes256gcm16\n            }\n        }\n    }\n";
    let typo = conf("typo.conf", &SWANCTL_CONF.replacen("connections {\n", &format!("connections {{\n{other}"), 1));
    let (good, stdout, stderr) = swanctl(&west, &["--load-conns", "--file", &typo]);
    let both = format!("{stdout}{stderr}");
    assert!(!good, "{both}");
    assert!(
        both.contains("load-conn 'other' (VICI): connections.other.children.lan.esp_proposal: unknown key (did you mean 'esp_proposals'?)"),
        "{both}"
    );
    assert!(both.contains("loaded 1 of 2 connections, 1 failed to load, 0 unloaded"), "{both}");
    assert_eq!(west.sas().unwrap()[0].id, id, "a failed load-conn leaves the others alone");

    // A file without the connection unloads it; the peer hears the Delete.
    let empty = conf("empty.conf", "connections {\n}\n");
    let out = ok(&west, &["--load-conns", "--file", &empty]);
    assert!(out.contains("no connections found, 1 unloaded"), "{out}");
    wait("the unloaded connection's IKE SA to go at both ends", 20, || {
        west.sas().unwrap().is_empty() && east.sas().unwrap().is_empty()
    });
    assert!(!ok(&west, &["--list-conns"]).contains("site"));
    west.stop().unwrap();
    east.stop().unwrap();
}
