//! Two Esparto daemons negotiate with IKEv2 (PSK) in the standard topology:
//! the initiator's `start_action = start` brings the tunnel up, hosts ping
//! through it both ways (IPv4 and IPv6), `esparto sas` lists the IKE SA and
//! its Child SA on both sides, `esparto down` deletes them on both sides,
//! `esparto up` brings them back (and, when they are up, starts nothing
//! unless `--force`), a wrong PSK never installs anything, and a
//! Child SA past its hard packet limit is deleted on both sides. `up` shows
//! the negotiation as it happens and its outcome (an installed Child SA, a
//! failed authentication, a proposal mismatch), `sas --json` the timers,
//! NAT state and last packets, `esparto log` the log and the SA events as
//! they happen, and with `--json` every error is JSON.
//! Needs root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use esparto::status::IkeSaStatus;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};

fn keying(initiator: bool, west: bool, psk: &str) -> Keying {
    let (l, r) = if west { ("@west", "@east") } else { ("@east", "@west") };
    Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: l.into(),
        remote_id: r.into(),
        psk: psk.into(),
        initiator,
    }
}

fn wait_established(gw: &EspartoGateway) -> Vec<IkeSaStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = gw.sas().unwrap();
        if s.iter().any(|s| s.state == "established" && !s.children.is_empty()) {
            return s;
        }
        assert!(Instant::now() < deadline, "no IKE SA with a Child SA: {s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn esparto_to_esparto_with_ikev2_psk() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true, "correct horse battery staple")).unwrap();
    wcfg.workers = Some(2);
    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false, "correct horse battery staple")).unwrap();
    ecfg.workers = Some(2);
    // The responder first, so the initiator's first IKE_SA_INIT is answered.
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();

    let w = wait_established(&west);
    let e = wait_established(&east);
    assert_eq!(w[0].children[0].in_spi, e[0].children[0].out_spi);
    assert_eq!(w[0].children[0].out_spi, e[0].children[0].in_spi);
    assert_eq!(w[0].children[0].suite, "aes256gcm16");
    assert!(w[0].initiator && !e[0].initiator);

    let host = topo.ns(Node::HostWest);
    for fam in [Family::V4, Family::V6] {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        let r = traffic::ping(host, dst, 3, Duration::from_millis(100)).unwrap();
        assert!(r.all_answered(), "{dst} through the IKE tunnel: {r:?}");
    }
    let back = Topology::addr(Node::HostWest, Net::Lan, Family::V4);
    assert!(traffic::ping(topo.ns(Node::HostEast), back, 3, Duration::from_millis(100)).unwrap().all_answered());
    let w = west.sas().unwrap();
    assert!(w[0].children[0].out_packets >= 6 && w[0].children[0].in_packets >= 6, "{w:?}");
    check_sas_details(&w[0]);

    // Errors are JSON with --json: an unknown connection.
    let (ok, out) = west.cli(&["up", "nosuch", "--json"]).unwrap();
    assert!(!ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!((v["ok"].as_bool(), v["kind"].as_str()), (Some(false), Some("refused")), "{out}");
    assert!(v["error"].as_str().unwrap().contains("nosuch"), "{out}");

    // Down on one side deletes on both (INFORMATIONAL Delete).
    let (ok, out) = west.cli(&["down", "site"]).unwrap();
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !east.sas().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the responder kept its SAs after the delete");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = traffic::ping(host, Topology::addr(Node::HostEast, Net::Lan, Family::V4), 2, Duration::from_millis(100)).unwrap();
    assert_eq!(r.received, 0, "no tunnel, no traffic");

    // `esparto log` follows the daemon from now on: its log lines and the
    // SA events.
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["log", "--control"]).arg(west.control_path());
    let follower = esparto_testbed::follow::Follower::spawn(cmd, &west.dir().path().join("esparto-log.txt")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !follower.has_line("a control client follows the daemon's events") {
        assert!(Instant::now() < deadline, "esparto log shows nothing");
        std::thread::sleep(Duration::from_millis(50));
    }

    // And up again, the negotiation's log lines shown as they happen.
    let (ok, out) = west.cli(&["up", "site"]).unwrap();
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !["event: site: IKE SA up #", "event: site: Child SA up #", "IKE SA established"].iter().all(|l| follower.has_line(l)) {
        assert!(Instant::now() < deadline, "esparto log: {}", follower.output());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(follower);
    for line in [
        "sending IKE_SA_INIT request, proposals: IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519",
        "IKE_SA_INIT response received: selected proposal IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519",
        "IKE_SA established",
        "Child SA installed",
        "site: Child SA lan installed, SPIs ",
        "INSTALLED",
    ] {
        assert!(out.contains(line), "`up` shows {line:?}: {out}");
    }
    let r = traffic::ping(host, Topology::addr(Node::HostEast, Net::Lan, Family::V4), 3, Duration::from_millis(100)).unwrap();
    assert!(r.all_answered(), "{r:?}");

    // `up --json`: one JSON object per log line, then the outcome with the SAs.
    let (ok, out) = west.cli(&["down", "site", "--json"]).unwrap();
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["ok"].as_bool(), Some(true), "{out}");
    let (ok, out) = west.cli(&["up", "site", "--json"]).unwrap();
    assert!(ok, "{out}");
    let lines: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let logs: Vec<&str> = lines.iter().filter_map(|v| v["log"]["message"].as_str()).collect();
    assert!(logs.iter().any(|m| m.starts_with("sending IKE_SA_INIT request")), "{out}");
    assert!(lines.iter().filter_map(|v| v["log"]["level"].as_str()).all(|l| ["INFO", "WARN", "ERROR", "DEBUG"].contains(&l)));
    let last = lines.last().unwrap();
    assert_eq!(last["ok"].as_bool(), Some(true), "{out}");
    let sas: Vec<IkeSaStatus> = serde_json::from_value(last["sas"].clone()).unwrap();
    assert!(sas.iter().any(|s| s.state == "established" && !s.children.is_empty()), "{out}");

    // `up` of a connection that is up starts nothing and says so;
    // `--force` starts another IKE SA.
    let first = west.sas().unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    let (ok, out) = west.cli(&["up", "site"]).unwrap();
    assert!(!ok && out.contains("site: already up (IKE SA") && out.contains("--force"), "{out}");
    assert_eq!(west.sas().unwrap().len(), 1, "no second IKE SA");
    let (ok, out) = west.cli(&["up", "site", "--force"]).unwrap();
    assert!(ok, "{out}");
    assert!(
        west.sas().unwrap().iter().any(|s| s.id != first[0].id && s.state == "established"),
        "a second IKE SA: {out}"
    );

    let control = west.control_path().to_path_buf();
    west.stop().unwrap();
    east.stop().unwrap();

    // No daemon: a JSON error on stdout and a non-zero exit.
    for cmd in [&["status"][..], &["sas"], &["list-conns"], &["up", "site"], &["down", "site"], &["rekey", "site"], &["reload"]] {
        let out = std::process::Command::new(bin).args(cmd).arg("--json").arg("--control").arg(&control).output().unwrap();
        assert!(!out.status.success(), "{cmd:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{cmd:?}: {e}: {text}"));
        assert_eq!((v["ok"].as_bool(), v["kind"].as_str()), (Some(false), Some("no_daemon")), "{cmd:?}: {text}");
        assert!(v["error"].as_str().unwrap().contains("no esparto daemon at"), "{text}");
    }
    // A configuration that cannot be read.
    let out = std::process::Command::new(bin).args(["sas", "--json", "-c", "/nonexistent/esparto.toml"]).output().unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"].as_str(), Some("config"), "{v}");
}

/// What `sas --json` says of a fresh, pinged tunnel with the default
/// lifetimes (Child SA rekey 1 h, life 1 h + 10 %; IKE SA rekey 4 h).
fn check_sas_details(s: &IkeSaStatus) {
    assert_eq!(s.proposal, "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_256/CURVE_25519", "{s:?}");
    let ike_rekey = s.rekey_in_s.expect("IKE SA rekey timer");
    assert!(ike_rekey > 0.0 && ike_rekey <= 4.0 * 3600.0, "{ike_rekey}");
    // `encap = true` (the default) fakes our NAT hash; the peer's is faked too.
    assert_eq!((s.nat.encap.as_str(), s.nat.encap_forced), ("esp-in-udp", true), "{:?}", s.nat);
    assert!(s.nat.remote_behind_nat && !s.nat.local_behind_nat, "{:?}", s.nat);
    assert_eq!((s.nat.local_port, s.nat.remote_port), (4500, 4500), "{:?}", s.nat);
    let c = &s.children[0];
    let rekey = c.rekey_in_s.expect("Child SA rekey timer");
    let expire = c.expire_in_s.expect("Child SA expiry");
    assert!(rekey > 0.0 && rekey <= 3600.0, "rekey in {rekey} s");
    assert!(expire > rekey && expire <= 3960.0, "expires in {expire} s");
    // Pinged a moment ago, both ways.
    for idle in [c.in_idle_s, c.out_idle_s] {
        let idle = idle.expect("a packet went each way");
        assert!((0.0..10.0).contains(&idle), "last packet {idle} s ago");
    }
    assert!(!c.local_ts.is_empty() && !c.remote_ts.is_empty(), "{c:?}");
}

#[test]
fn wrong_psk_installs_nothing() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &EspartoConfig::site(Node::GwEast, keying(false, false, "the right secret")).unwrap()).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &EspartoConfig::site(Node::GwWest, keying(true, true, "a wrong secret!!")).unwrap()).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(east.sas().unwrap().iter().all(|s| s.children.is_empty()), "responder installed a Child SA");
    assert!(west.sas().unwrap().iter().all(|s| s.children.is_empty()), "initiator installed a Child SA");
    let st = east.status().unwrap();
    assert!(st.sas.is_empty(), "no SA in the responder's data plane: {:?}", st.sas);
    let log = std::fs::read_to_string(east.dir().path().join("esparto.log")).unwrap_or_default();
    assert!(log.contains("authentication failed") || log.contains("AUTHENTICATION_FAILED"), "a clear log line: {log}");
    // `up` shows the attempt and ends with the reason, exit 1.
    let (ok, out) = west.cli(&["up", "site", "--timeout", "20"]).unwrap();
    assert!(!ok, "{out}");
    assert!(out.contains("sending IKE_SA_INIT request"), "{out}");
    assert!(out.to_lowercase().contains("authentication"), "the reason: {out}");
    let (ok, out) = west.cli(&["up", "site", "--timeout", "20", "--json"]).unwrap();
    assert!(!ok, "{out}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!((last["ok"].as_bool(), last["kind"].as_str()), (Some(false), Some("failed")), "{out}");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// A Child SA that reaches its hard packet limit (no rekey configured to
/// come first) carries no more traffic and is deleted, on both sides, with
/// an INFORMATIONAL Delete; the IKE SA stays.
#[test]
fn a_hard_limit_deletes_the_child_sa_on_both_sides() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let limits = [("rekey_packets", "0"), ("life_packets", "50")];
    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true, "correct horse battery staple")).unwrap();
    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false, "correct horse battery staple")).unwrap();
    for cfg in [&mut wcfg, &mut ecfg] {
        cfg.workers = Some(1);
        cfg.child_extra.extend(limits.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())));
    }
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    wait_established(&west);
    wait_established(&east);

    // 80 echo requests: the 51st and later find no SA to carry them.
    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let r = traffic::ping(topo.ns(Node::HostWest), dst, 80, Duration::from_millis(20)).unwrap();
    assert!(r.received > 0 && r.received < 80, "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (w, e) = (west.sas().unwrap(), east.sas().unwrap());
        let gone = |s: &[IkeSaStatus]| s.iter().all(|s| s.state == "established" && s.children.is_empty()) && !s.is_empty();
        if gone(&w) && gone(&e) {
            break;
        }
        assert!(Instant::now() < deadline, "the expired Child SA is still listed: west {w:?} east {e:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap_or_default()
        + &std::fs::read_to_string(east.dir().path().join("esparto.log")).unwrap_or_default();
    assert!(log.contains("deleting the expired Child SA"), "{log}");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// Proposals that do not meet: `up` shows what was offered and ends with
/// the reason; nothing is installed.
#[test]
fn up_shows_a_proposal_mismatch() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let psk = "correct horse battery staple";
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &EspartoConfig::site(Node::GwEast, keying(false, false, psk)).unwrap()).unwrap();
    let mut w = keying(false, true, psk);
    if let Keying::Ike { proposal, .. } = &mut w {
        *proposal = "aes128gcm16-prfsha256-x25519".into();
    }
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &EspartoConfig::site(Node::GwWest, w).unwrap()).unwrap();
    let (ok, out) = west.cli(&["up", "site", "--timeout", "20"]).unwrap();
    assert!(!ok, "{out}");
    assert!(out.contains("sending IKE_SA_INIT request, proposals: IKE:AES_GCM_16_128/PRF_HMAC_SHA2_256/CURVE_25519"), "{out}");
    assert!(out.contains("the peer accepts none of our configured proposals"), "{out}");
    assert!(out.lines().last().unwrap().contains("no_proposal_chosen"), "the reason last: {out}");
    // The responder's log says what it received beside what it has.
    let log = std::fs::read_to_string(east.dir().path().join("esparto.log")).unwrap_or_default();
    assert!(log.contains("received proposals: IKE:AES_GCM_16_128"), "{log}");
    assert!(west.sas().unwrap().is_empty());
    west.stop().unwrap();
    east.stop().unwrap();
}

/// IPComp negotiated in IKE_AUTH (IPCOMP_SUPPORTED both ways): large
/// compressible pings cross compressed, each side's CPI is what the other
/// writes, and short ones cross as they are.
#[test]
fn esparto_to_esparto_negotiates_ipcomp() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true, "compress me, not the key")).unwrap();
    wcfg.child_extra.push(("ipcomp".into(), "\"yes\"".into()));
    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false, "compress me, not the key")).unwrap();
    ecfg.child_extra.push(("ipcomp".into(), "\"adaptive\"".into()));
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    wait_established(&west);
    wait_established(&east);

    let host = topo.ns(Node::HostWest);
    let dst = Topology::addr(Node::HostEast, Net::Lan, Family::V4).to_string();
    // ping's default payload is a byte counter: 1,200 of them compress.
    let out = host.exec("ping", &["-c", "5", "-i", "0.2", "-W", "2", "-s", "1200", &dst]);
    assert!(out.is_ok(), "large pings through the IPComp tunnel: {out:?}");
    let r = traffic::ping(host, Topology::addr(Node::HostEast, Net::Lan, Family::V6), 3, Duration::from_millis(100)).unwrap();
    assert!(r.all_answered(), "short IPv6 pings: {r:?}");

    let (w, e) = (west.status().unwrap(), east.status().unwrap());
    // One row per SA and worker: the figures summed over the workers.
    let find = |s: &esparto::status::Status, dir: &str| {
        let rows: Vec<_> = s.sas.iter().filter(|x| x.direction == dir).filter_map(|x| x.ipcomp.clone()).collect();
        let mut sum = rows.first().cloned().unwrap_or_else(|| panic!("no IPComp on {dir}: {:#?}", s.sas));
        sum.compressed = rows.iter().map(|r| r.compressed).sum();
        sum.bytes_saved = rows.iter().map(|r| r.bytes_saved).sum();
        sum
    };
    let (w_out, e_in, e_out) = (find(&w, "out"), find(&e, "in"), find(&e, "out"));
    assert_eq!(w_out.cpi, e_in.cpi, "west writes east's CPI");
    assert_ne!(w_out.cpi, e_out.cpi, "each side chose its own CPI");
    assert!(w_out.compressed >= 5 && e_in.compressed >= 5, "west {w_out:?}, east {e_in:?}");
    assert!(w_out.bytes_saved > 5 * 500, "{w_out:?}");
    assert_eq!(e_out.mode, "adaptive");
    assert_eq!((e_in.decompress_failed, e_in.too_big), (0, 0), "{e_in:?}");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// Authenticated ESP from the peer is liveness: with `dpd_delay = 2s` and
/// traffic both ways neither side sends a liveness check; once the peer
/// dies (kill -9: no Delete, nothing more from it), it is declared dead
/// `dpd_delay` + `dpd_timeout` after its last packet.
#[test]
fn esp_from_the_peer_keeps_dpd_quiet_and_a_dead_peer_is_found() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let dpd = [("dpd_delay".to_string(), "\"2s\"".to_string()), ("dpd_timeout".to_string(), "\"6s\"".to_string())];
    let mut wcfg = EspartoConfig::site(Node::GwWest, keying(true, true, "dpd test key")).unwrap();
    let mut ecfg = EspartoConfig::site(Node::GwEast, keying(false, false, "dpd test key")).unwrap();
    wcfg.conn_extra.extend(dpd.clone());
    ecfg.conn_extra.extend(dpd);
    let mut east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    wait_established(&west);
    wait_established(&east);
    let (hw, he) = (Topology::addr(Node::HostWest, Net::Lan, Family::V4), Topology::addr(Node::HostEast, Net::Lan, Family::V4));
    let mut to_east = esparto_testbed::udpgen::UdpGen::new(topo.ns(Node::HostWest), hw, topo.ns(Node::HostEast), he).unwrap();
    let mut to_west =
        esparto_testbed::udpgen::UdpGen::to_port(topo.ns(Node::HostEast), he, topo.ns(Node::HostWest), (hw, 9001).into(), 1).unwrap();
    // Six dpd_delays of traffic both ways.
    std::thread::scope(|s| {
        let a = s.spawn(|| to_east.trial(200, 200.0, Duration::from_secs(12)).unwrap());
        to_west.trial(200, 200.0, Duration::from_secs(12)).unwrap();
        a.join().unwrap();
    });
    let checks = |gw: &EspartoGateway| gw.status().unwrap().ike.get("liveness_checks").copied().unwrap_or(0);
    assert_eq!((checks(&west), checks(&east)), (0, 0), "liveness checks while ESP flowed both ways");

    // The peer dies: nothing more from it. Found dead dpd_delay +
    // dpd_timeout (8 s) after its last packet; our own traffic (pings into
    // the tunnel) does not count.
    east.kill().unwrap();
    let died = Instant::now();
    let dead = loop {
        let _ = traffic::ping(topo.ns(Node::HostWest), he, 1, Duration::from_millis(100));
        let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap_or_default();
        if log.contains("IKE SA deleted") && log.contains("reason=Timeout") {
            break died.elapsed();
        }
        assert!(died.elapsed() < Duration::from_secs(30), "the dead peer was not found: {log}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(checks(&west) >= 1, "the end came from a liveness check");
    assert!(dead >= Duration::from_secs(7), "declared dead after {dead:?}, before dpd_delay + dpd_timeout");
    eprintln!("dead peer found {dead:?} after its last packet (dpd_delay 2 s + dpd_timeout 6 s)");
    west.stop().unwrap();
}

/// A hybrid post-quantum IKE SA between two daemons: X25519 in
/// IKE_SA_INIT and ML-KEM-768 in an IKE_INTERMEDIATE exchange (RFC 9370);
/// the tunnel carries traffic, `sas` names both key exchanges, and the
/// engine counts the additional exchange on both sides.
#[test]
fn a_hybrid_ml_kem_ike_sa_carries_traffic() {
    if skip("ike_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let hybrid = |initiator: bool, west: bool| {
        let Keying::Ike { local_id, remote_id, psk, .. } = keying(initiator, west, "a hybrid key, namespaces only") else { unreachable!() };
        Keying::Ike { proposal: "aes256gcm16-prfsha384-x25519-ke1_mlkem768".into(), local_id, remote_id, psk, initiator }
    };
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &EspartoConfig::site(Node::GwEast, hybrid(false, false)).unwrap()).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &EspartoConfig::site(Node::GwWest, hybrid(true, true)).unwrap()).unwrap();
    let sas = wait_established(&west);
    assert!(sas[0].proposal.contains("CURVE_25519/KE1_ML_KEM_768"), "{}", sas[0].proposal);
    let there = Topology::addr(Node::HostEast, Net::Lan, Family::V4);
    let r = traffic::ping(topo.ns(Node::HostWest), there, 3, Duration::from_millis(100)).unwrap();
    assert!(r.received > 0, "{r:?}");
    for gw in [&west, &east] {
        let ike = gw.status().unwrap().ike;
        assert_eq!(ike.get("additional_key_exchanges").copied(), Some(1), "{ike:?}");
    }
    west.stop().unwrap();
    east.stop().unwrap();
}
