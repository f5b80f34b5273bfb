//! Routing that cannot hijack the host, in the standard topology with two
//! daemons as processes.
//!
//! - **A full-tunnel site.** gw-west sends everything from its LAN *and
//!   from its own WAN address* into the tunnel (`remote_ts = 0.0.0.0/0,
//!   ::/0`); gw-east is the other end (`local_ts = 0.0.0.0/0, ::/0`). Both
//!   gateways reach each other only through a default route (their WAN
//!   addresses are /32s), so nothing but the socket mark keeps a
//!   daemon's own IKE and ESP out of its tunnel: without it both would
//!   loop into their TUN devices. IKE comes up and rekeys, hosts reach
//!   each other and an "Internet" address behind gw-east over IPv4 and
//!   IPv6, and so does gw-west from its WAN address. The main tables never
//!   change; on stop, every table and rule of both gateways is exactly as
//!   before (`ip rule`, `ip route show table all`, both families).
//! - **A crash.** gw-west is killed (SIGKILL): its rules stay, its routes
//!   go with its device. Started again, it removes them (and says so),
//!   sets exactly the same rules again, no duplicate, carries traffic, and
//!   a clean stop leaves the host as before.
//! - **Someone else's table or priority, a rule that would send packets to
//!   the peer into the tunnel's table.** `esparto run` refuses to start,
//!   says why (and `check-config --strict` fails on it), and leaves the host
//!   exactly as it found it.
//!
//! Needs root, iproute2, ping: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use esparto_netns::Netns;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, esparto_rules, run_to_exit};
use esparto_testbed::topology::{Net, Node, Topology, WAN_IF};
use esparto_testbed::{Family, skip, traffic};

/// How long we wait for anything before calling it failed (generous: the
/// machine is shared).
const PATIENCE: Duration = Duration::from_secs(40);
/// An address "on the Internet" behind gw-east (RFC 5737 TEST-NET-2, RFC
/// 3849 documentation prefix), on its loopback.
const INTERNET4: &str = "198.51.100.1";
const INTERNET6: &str = "2001:db8:100::1";

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_esparto"))
}

/// Every rule and every route of both families in `ns`, as `ip` prints them.
fn snapshot(ns: &Netns) -> String {
    let mut s = String::new();
    for args in [
        &["-4", "rule"][..],
        &["-6", "rule"],
        &["-4", "route", "show", "table", "all"],
        &["-6", "route", "show", "table", "all"],
    ] {
        s.push_str(&format!("## ip {}\n", args.join(" ")));
        s.push_str(&String::from_utf8_lossy(&ns.ip(args).unwrap().stdout));
    }
    s
}

fn ip_out(ns: &Netns, args: &[&str]) -> String {
    String::from_utf8_lossy(&ns.ip(args).unwrap().stdout).into_owned()
}

/// The main tables, both families.
fn main_tables(ns: &Netns) -> String {
    ip_out(ns, &["-4", "route", "show", "table", "main"]) + &ip_out(ns, &["-6", "route", "show", "table", "main"])
}

/// The gateway's WAN address as a /32 (and /128) with a default route out
/// of the WAN: the peer is reached through the default route only, as
/// across the Internet.
fn default_route_only(ns: &Netns, node: Node) {
    for fam in [Family::V4, Family::V6] {
        let a = Topology::addr(node, Net::Transit, fam);
        let (f, old, new) = match a {
            IpAddr::V4(_) => ("-4", format!("{a}/24"), format!("{a}/32")),
            IpAddr::V6(_) => ("-6", format!("{a}/64"), format!("{a}/128")),
        };
        ns.ip(&[f, "addr", "del", &old, "dev", WAN_IF]).unwrap();
        ns.ip(&[f, "addr", "add", &new, "dev", WAN_IF, "nodad"]).unwrap();
        ns.ip(&[f, "route", "add", "default", "dev", WAN_IF]).unwrap();
    }
}

fn keying(west: bool) -> Keying {
    let (l, r) = if west { ("@west", "@east") } else { ("@east", "@west") };
    Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: l.into(),
        remote_id: r.into(),
        psk: "full tunnel test secret".into(),
        initiator: west,
    }
}

/// gw-west tunnels everything from its LAN and its own WAN address;
/// gw-east takes anything to them.
fn full_tunnel(side: Node) -> EspartoConfig {
    let west = side == Node::GwWest;
    let mut c = EspartoConfig::site(side, keying(west)).unwrap();
    c.workers = Some(2);
    let west_side: Vec<String> = ["10.1.0.0/24", "fd00:1::/64", "192.0.2.1/32"]
        .map(String::from)
        .to_vec();
    let everything: Vec<String> = ["0.0.0.0/0", "::/0"].map(String::from).to_vec();
    if west {
        (c.local_ts, c.remote_ts) = (west_side, everything);
    } else {
        (c.local_ts, c.remote_ts) = (everything, west_side);
    }
    c
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The IKE SAs' Child SAs' inbound SPIs (to see a rekey land).
fn child_spis(gw: &EspartoGateway) -> Vec<String> {
    let sas = gw.sas().unwrap_or_default();
    sas.iter()
        .filter(|s| s.state == "established")
        .flat_map(|s| s.children.iter().map(|c| c.in_spi.clone()))
        .collect()
}

fn established(gw: &EspartoGateway) -> bool {
    !child_spis(gw).is_empty()
}

/// Whether `dst` answers pings from `from`: a path, not a loss figure,
/// so one answer of three pings will do (a busy machine may lose or delay
/// one), and an attempt without any is repeated once. A path that does not
/// exist answers none of the six.
fn ping_ok(from: &Netns, dst: &str, source: Option<&str>) -> bool {
    let dst: IpAddr = dst.parse().unwrap();
    let once = || match source {
        None => traffic::ping(from, dst, 3, Duration::from_millis(200)).is_ok_and(|r| r.received > 0),
        Some(src) => {
            let fam = if dst.is_ipv6() { "-6" } else { "-4" };
            let d = dst.to_string();
            // ping exits 0 when at least one reply came back.
            from.exec("ping", &[fam, "-n", "-c", "3", "-i", "0.2", "-W", "2", "-I", src, &d])
                .is_ok()
        }
    };
    once() || once()
}

/// Every path of the full tunnel carries traffic.
fn traffic_flows(topo: &Topology) {
    let (hw, he, gw) = (topo.ns(Node::HostWest), topo.ns(Node::HostEast), topo.ns(Node::GwWest));
    for fam in [Family::V4, Family::V6] {
        let (w, e) = (
            Topology::addr(Node::HostWest, Net::Lan, fam),
            Topology::addr(Node::HostEast, Net::Lan, fam),
        );
        assert!(ping_ok(hw, &e.to_string(), None), "host-west → host-east {e}");
        assert!(ping_ok(he, &w.to_string(), None), "host-east → host-west {w}");
    }
    // Beyond the other site: only the tunnel leads there from west's LAN.
    assert!(ping_ok(hw, INTERNET4, None), "host-west → {INTERNET4}");
    assert!(ping_ok(hw, INTERNET6, None), "host-west → {INTERNET6}");
    // The gateway's own WAN address is a local selector too: its traffic
    // from it goes through the tunnel, while its ESP to the peer, from the
    // same address, does not.
    assert!(
        ping_ok(gw, INTERNET4, Some("192.0.2.1")),
        "gw-west (192.0.2.1) → {INTERNET4}"
    );
}

#[test]
fn a_full_tunnel_site_keeps_its_peer_and_leaves_no_trace() {
    if skip("routing_netns", false) {
        return;
    }
    let topo = Topology::new().unwrap();
    let (gw, ge) = (topo.ns(Node::GwWest), topo.ns(Node::GwEast));
    default_route_only(gw, Node::GwWest);
    default_route_only(ge, Node::GwEast);
    ge.ip(&["addr", "add", &format!("{INTERNET4}/32"), "dev", "lo"])
        .unwrap();
    ge.ip(&["-6", "addr", "add", &format!("{INTERNET6}/128"), "dev", "lo"])
        .unwrap();
    // Nothing crosses without the tunnel.
    assert!(!ping_ok(topo.ns(Node::HostWest), INTERNET4, None));
    let before = (snapshot(gw), snapshot(ge));
    let mains = (main_tables(gw), main_tables(ge));

    let east = EspartoGateway::start(ge, bin(), &full_tunnel(Node::GwEast)).unwrap();
    let mut west = EspartoGateway::start(gw, bin(), &full_tunnel(Node::GwWest)).unwrap();
    wait_for("the tunnel", || established(&west) && established(&east));
    traffic_flows(&topo);
    // `run` logged what check-config would have warned about, read from
    // this namespace's routes: the WAN address is a local selector of a
    // full tunnel.
    let log = std::fs::read_to_string(west.dir().join("esparto.log")).unwrap();
    assert!(
        log.contains("192.0.2.1/32 covers 192.0.2.1, this host's address on wan0 where its default route leaves"),
        "{log}"
    );

    // What the daemon added: rules tagged 229 and routes in table 220,
    // nothing in the main tables.
    assert_eq!((main_tables(gw), main_tables(ge)), mains, "a main table changed");
    let rules = ip_out(gw, &["-4", "rule"]);
    for want in [
        "220:\tfrom all fwmark 0xdc goto 222 proto 229",
        "221:\tfrom 10.1.0.0/24 lookup main suppress_prefixlength 0 proto 229",
        "221:\tfrom 10.1.0.0/24 lookup 220 proto 229",
        "221:\tfrom 192.0.2.1 lookup 220 proto 229",
        "222:\tfrom all nop proto 229",
    ] {
        assert!(rules.contains(want), "{want:?} not in:\n{rules}");
    }
    assert!(ip_out(gw, &["-6", "rule"]).contains("221:\tfrom fd00:1::/64 lookup 220 proto 229"));
    assert!(ip_out(gw, &["-4", "route", "show", "table", "220"]).contains("default dev esparto0 proto 229"));
    assert!(ip_out(gw, &["-6", "route", "show", "table", "220"]).contains("default dev esparto0 proto 229"));
    assert!(ip_out(ge, &["-4", "rule"]).contains("221:\tfrom all lookup 220 proto 229"));
    // The kernel agrees: from the gateway's own address, marked packets to
    // the peer leave by the WAN, unmarked ones enter the tunnel.
    let get = |mark: &str| ip_out(gw, &["route", "get", "192.0.2.2", "from", "192.0.2.1", "mark", mark]);
    assert!(get("0xdc").contains(&format!("dev {WAN_IF}")), "{}", get("0xdc"));
    assert!(get("0").contains("dev esparto0"), "{}", get("0"));

    // IKE keeps working with the rules in place: a rekey.
    let spis = child_spis(&west);
    let (ok, out) = west.cli(&["rekey", "site"]).unwrap();
    assert!(ok, "{out}");
    wait_for("the rekey", || {
        let now = child_spis(&west);
        !now.is_empty() && now.iter().all(|c| !spis.contains(c))
    });
    traffic_flows(&topo);
    // The device set down and up: the kernel flushes its routes, and the
    // daemon puts them back by itself (its routing thread checks them
    // every 2 s), with no rekey or reload to prompt it.
    let routes = |gw: &Netns| ip_out(gw, &["route", "show", "table", "220"]) + &ip_out(gw, &["-6", "route", "show", "table", "220"]);
    let before_flap = routes(gw);
    gw.ip(&["link", "set", "esparto0", "down"]).unwrap();
    assert!(!routes(gw).contains("esparto0"), "the kernel kept the routes: {}", routes(gw));
    gw.ip(&["link", "set", "esparto0", "up"]).unwrap();
    wait_for("the routes to come back", || routes(gw) == before_flap);
    let log = std::fs::read_to_string(west.dir().join("esparto.log")).unwrap();
    assert!(log.contains("put back tunnel routes the kernel had dropped"), "{log}");
    traffic_flows(&topo);
    let rules_running = (ip_out(gw, &["-4", "rule"]), ip_out(gw, &["-6", "rule"]));
    let table_running =
        ip_out(gw, &["route", "show", "table", "220"]) + &ip_out(gw, &["-6", "route", "show", "table", "220"]);

    // A crash: the rules stay behind, the routes go with the device.
    west.kill().unwrap();
    wait_for("the TUN device to go", || gw.ip(&["link", "show", "esparto0"]).is_err());
    assert_eq!(
        (ip_out(gw, &["-4", "rule"]), ip_out(gw, &["-6", "rule"])),
        rules_running
    );
    assert_eq!(
        esparto_rules(gw.name()).unwrap().len(),
        6 + 4,
        "{:?}",
        esparto_rules(gw.name())
    );
    // Started again: the leftovers are removed first, then the same rules
    // set again, none twice.
    west.restart().unwrap();
    wait_for("the tunnel after the restart", || {
        established(&west) && established(&east)
    });
    let log = std::fs::read_to_string(west.dir().join("esparto.log")).unwrap();
    assert!(
        log.contains("removed the routes and rules an earlier esparto left behind"),
        "{log}"
    );
    assert!(log.contains("rules=10"), "{log}");
    traffic_flows(&topo);
    assert_eq!(
        (ip_out(gw, &["-4", "rule"]), ip_out(gw, &["-6", "rule"])),
        rules_running
    );
    wait_for("the same routes", || {
        ip_out(gw, &["route", "show", "table", "220"]) + &ip_out(gw, &["-6", "route", "show", "table", "220"])
            == table_running
    });
    assert_eq!((main_tables(gw), main_tables(ge)), mains, "a main table changed");

    // Stopped: both hosts exactly as before.
    west.stop().unwrap();
    east.stop().unwrap();
    assert_eq!(snapshot(gw), before.0);
    assert_eq!(snapshot(ge), before.1);
}

/// `esparto run` in `ns` that must refuse to start: its log.
fn refused(ns: &Netns, cfg: &EspartoConfig) -> String {
    let r = run_to_exit(ns, bin(), cfg, &[], Duration::from_secs(20)).unwrap();
    let status = r.status.expect("it exits by itself");
    assert!(!status.success(), "{status}: {}", r.log);
    r.log
}

#[test]
fn someone_elses_table_or_a_rule_towards_it_refuses_the_start_and_changes_nothing() {
    if skip("routing_netns", false) {
        return;
    }
    let topo = Topology::new().unwrap();
    let gw = topo.ns(Node::GwWest);
    let cfg = EspartoConfig::site(Node::GwWest, keying(true)).unwrap();

    // strongSwan's table: a route in 220 and its rule at 220.
    gw.ip(&[
        "route",
        "add",
        "10.9.0.0/24",
        "dev",
        WAN_IF,
        "table",
        "220",
        "proto",
        "static",
    ])
    .unwrap();
    gw.ip(&["rule", "add", "priority", "220", "lookup", "220"]).unwrap();
    let with_others = snapshot(gw);
    let log = refused(gw, &cfg);
    for want in [
        "the routing table or rule priorities are in use, nothing was changed",
        "IPv4 rule '220: from all lookup 220' is not Esparto's and holds priority 220",
        "table 220 holds route '10.9.0.0/24 dev wan0 table 220 proto static' that Esparto did not set",
        "[daemon] routing_table",
    ] {
        assert!(log.contains(want), "{want:?} not in:\n{log}");
    }
    assert!(!log.contains("data plane up"), "{log}");
    assert_eq!(snapshot(gw), with_others);
    assert!(gw.ip(&["link", "show", "esparto0"]).is_err(), "a TUN device was left");
    // check-config says the same, as a warning at the key.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("w.toml");
    std::fs::write(&file, cfg.to_toml(&dir.path().join("s.sock"))).unwrap();
    let check = |strict: bool| {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", gw.name()]).arg(bin()).arg("check-config");
        if strict {
            c.arg("--strict");
        }
        c.arg(&file).output().unwrap()
    };
    let out = check(true);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("daemon.routing_table_prio: warning: esparto run would refuse to start"),
        "{text}"
    );
    // Without --strict the same warnings are printed, and the file passes.
    let out = check(false);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: esparto run would refuse to start"),
        "{stderr}"
    );
    let n = stderr.lines().filter(|l| l.contains(": warning: ")).count();
    assert!(n >= 2, "{stderr}");
    assert!(
        stdout.contains(&format!(": OK (1 connection, 1 child, {n} warnings)")),
        "{stdout}"
    );

    gw.ip(&["rule", "del", "priority", "220", "lookup", "220"]).unwrap();
    gw.ip(&["route", "del", "10.9.0.0/24", "dev", WAN_IF, "table", "220"])
        .unwrap();

    // A rule of someone else's that would send packets to the peer into the
    // tunnel's table, ahead of everything: the peer would be unreachable.
    gw.ip(&["rule", "add", "priority", "100", "to", "192.0.2.2", "lookup", "220"])
        .unwrap();
    let with_rule = snapshot(gw);
    let log = refused(gw, &cfg);
    assert!(
        log.contains(
            "IPv4 rule '100: from all to 192.0.2.2/32 lookup 220' is not Esparto's and sends traffic to table 220"
        ),
        "{log}"
    );
    assert_eq!(snapshot(gw), with_rule, "something was left half-applied");
    assert!(esparto_rules(gw.name()).unwrap().is_empty());

    // Without it, the same configuration runs, and stops cleanly.
    gw.ip(&["rule", "del", "priority", "100"]).unwrap();
    let before = snapshot(gw);
    let mut west = EspartoGateway::start(gw, bin(), &cfg).unwrap();
    west.terminate().unwrap();
    assert_eq!(snapshot(gw), before);
}
