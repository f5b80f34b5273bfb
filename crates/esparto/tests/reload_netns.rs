//! Live reload between two Esparto gateways (IKEv2, PSK) in the standard
//! topology, with three connections told apart by their selectors:
//!
//! | connection | selectors (west side) | |
//! | --- | --- | --- |
//! | `keep` | `10.1.0.0/24[udp]` — `10.2.0.0/24[udp]` | in both files: carries a UDP stream throughout |
//! | `gone` | `fd00:1::/64` — `fd00:2::/64` | removed from west's file |
//! | `new` | `10.1.0.0/24[icmp]` — `10.2.0.0/24[icmp]` | added to west's file (east has it from the start) |
//!
//! While host-west sends a sequence-numbered UDP stream through `keep`,
//! west reloads (`esparto reload`): `new` comes up (ICMP passes), `gone`
//! is deleted at the peer (east drops its IKE SA; IPv6 no longer passes,
//! its route is gone), and `keep` keeps its IKE SA and Child SA (same
//! SPIs) and loses no packet. Then a file with an error is refused with
//! the error's file, line and key, and changes nothing; then SIGHUP
//! reloads a file without `new`, again with no loss on `keep`. A
//! statically keyed pair of gateways does the same with static children.
//! Needs root: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use esparto::status::IkeSaStatus;
use esparto_testbed::esparto::EspartoGateway;
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::udpgen::UdpGen;
use esparto_testbed::{Family, skip, traffic};

/// How long we wait for anything before calling it failed (generous: the
/// machine is shared).
const PATIENCE: Duration = Duration::from_secs(40);
/// The stream through `keep`: packets per second and size.
const RATE: f64 = 1_000.0;
const SIZE: usize = 200;

/// One connection's selectors, from west's side.
struct Spec {
    name: &'static str,
    local: &'static str,
    remote: &'static str,
}

const KEEP: Spec = Spec {
    name: "keep",
    local: "10.1.0.0/24[udp]",
    remote: "10.2.0.0/24[udp]",
};
const GONE: Spec = Spec {
    name: "gone",
    local: "fd00:1::/64",
    remote: "fd00:2::/64",
};
const NEW: Spec = Spec {
    name: "new",
    local: "10.1.0.0/24[icmp]",
    remote: "10.2.0.0/24[icmp]",
};

fn q(s: &str) -> String {
    format!("\"{s}\"")
}

/// The configuration file of `side` with `conns` (IKE; west initiates).
fn ike_file(side: Node, control: &Path, conns: &[&Spec]) -> String {
    let west = side == Node::GwWest;
    let (me, peer) = if west { ("west", "east") } else { ("east", "west") };
    let other = if west { Node::GwEast } else { Node::GwWest };
    let mut t = daemon_section(control, 2);
    for c in conns {
        let (l, r) = if west { (c.local, c.remote) } else { (c.remote, c.local) };
        t.push_str(&format!(
            "\n[connections.{n}]\nlocal_addrs = [{la}]\nremote_addrs = [{ra}]\nversion = 2\n\
             proposals = [\"aes256gcm16-prfsha256-x25519\"]\nencap = true\n\
             local.auth = \"psk\"\nlocal.id = \"@{me}-{n}\"\nremote.auth = \"psk\"\nremote.id = \"@{peer}-{n}\"\n\
             [connections.{n}.children.lan]\nlocal_ts = [{l}]\nremote_ts = [{r}]\nesp_proposals = [\"aes256gcm16\"]\n\
             per_cpu_sas = \"no\"\nstart_action = {start}\n\
             [secrets.{n}]\nids = [\"@west-{n}\", \"@east-{n}\"]\nsecret = \"reload test secret for {n}\"\n",
            n = c.name,
            la = q(&Topology::addr(side, Net::Transit, Family::V4).to_string()),
            ra = q(&Topology::addr(other, Net::Transit, Family::V4).to_string()),
            l = q(l),
            r = q(r),
            start = q(if west { "start" } else { "none" }),
        ));
    }
    t
}

fn daemon_section(control: &Path, workers: usize) -> String {
    format!(
        "[daemon]\nworkers = {workers}\ncontrol = {}\nstate_dir = {}\ntun = \"esparto0\"\nlog = \"info\"\n",
        q(&control.display().to_string()),
        q(&control.with_file_name("state").display().to_string()),
    )
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The IKE SA of `conn` with at least one Child SA, if there is one.
fn up<'a>(sas: &'a [IkeSaStatus], conn: &str) -> Option<&'a IkeSaStatus> {
    sas.iter()
        .find(|s| s.connection == conn && s.state == "established" && !s.children.is_empty())
}

/// The IKE SA id and the Child SAs' SPIs of `conn`.
fn identity(sas: &[IkeSaStatus], conn: &str) -> (String, Vec<(String, String)>) {
    let s = up(sas, conn).unwrap_or_else(|| panic!("{conn} is not up: {sas:?}"));
    (
        s.id.clone(),
        s.children
            .iter()
            .map(|c| (c.in_spi.clone(), c.out_spi.clone()))
            .collect(),
    )
}

fn host_east(fam: Family) -> IpAddr {
    Topology::addr(Node::HostEast, Net::Lan, fam)
}

fn pings(topo: &Topology, fam: Family) -> bool {
    traffic::ping(topo.ns(Node::HostWest), host_east(fam), 3, Duration::from_millis(100))
        .is_ok_and(|r| r.all_answered())
}

/// The routes into the TUN device in every table of `node`.
fn tun_routes(topo: &Topology, node: Node) -> String {
    let mut out = String::new();
    for fam in ["-4", "-6"] {
        let o = topo
            .ns(node)
            .ip(&[fam, "route", "show", "table", "all", "dev", "esparto0"])
            .unwrap();
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    out
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Runs `during` while a UDP stream of `secs` seconds goes from host-west
/// to host-east; returns (sent, received).
fn with_stream(topo: &Topology, secs: u64, during: impl FnOnce()) -> (u64, u64) {
    let mut udp = UdpGen::new(
        topo.ns(Node::HostWest),
        Topology::addr(Node::HostWest, Net::Lan, Family::V4),
        topo.ns(Node::HostEast),
        host_east(Family::V4),
    )
    .unwrap();
    udp.quiet = Duration::from_millis(500);
    udp.drain_limit = Duration::from_secs(5);
    std::thread::scope(|s| {
        let stream = s.spawn(move || udp.trial(SIZE, RATE, Duration::from_secs(secs)).unwrap().0);
        // Let it run a moment before anything changes.
        std::thread::sleep(Duration::from_millis(500));
        during();
        let t = stream.join().unwrap();
        (t.sent, t.received)
    })
}

#[test]
fn reload_adds_removes_and_leaves_the_rest_alone() {
    if skip("reload_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, "esparto0", |c| {
        ike_file(Node::GwEast, c, &[&KEEP, &GONE, &NEW])
    })
    .unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| {
        ike_file(Node::GwWest, c, &[&KEEP, &GONE])
    })
    .unwrap();
    wait_for("keep and gone", || {
        west.sas()
            .is_ok_and(|s| up(&s, "keep").is_some() && up(&s, "gone").is_some())
    });
    assert!(pings(&topo, Family::V6), "gone carries IPv6");
    assert!(!pings(&topo, Family::V4), "no connection carries ICMP yet");
    let keep_before = identity(&west.sas().unwrap(), "keep");
    let keep_east = identity(&east.sas().unwrap(), "keep");
    assert!(tun_routes(&topo, Node::GwWest).contains("fd00:2::/64"));
    let control = west.control_path().to_path_buf();
    assert_eq!(conn_names(&west), ["keep", "gone"]);

    // 1. Reload: gone out, new in, keep as it was, under a stream.
    let (sent, received) = with_stream(&topo, 6, || {
        write(&west.config_path(), &ike_file(Node::GwWest, &control, &[&KEEP, &NEW]));
        let (ok, out) = west.cli(&["reload"]).unwrap();
        assert!(ok, "{out}");
        for want in ["added     1: new", "removed   1: gone", "changed   0", "unchanged 1"] {
            assert!(out.contains(want), "{want:?} not in: {out}");
        }
        wait_for("new to come up", || west.sas().is_ok_and(|s| up(&s, "new").is_some()));
        wait_for("the peer to drop gone", || {
            east.sas().is_ok_and(|s| s.iter().all(|x| x.connection != "gone"))
        });
        assert!(pings(&topo, Family::V4), "new carries ICMP");
        assert!(!pings(&topo, Family::V6), "gone is gone");
    });
    assert!(sent > 3_000, "the stream ran: {sent}");
    assert_eq!(
        received,
        sent,
        "keep lost {} of {sent} packets during the reload",
        sent - received
    );
    // list-conns shows the file now loaded, text and JSON alike.
    assert_eq!(conn_names(&west), ["keep", "new"]);
    let (ok, text) = west.cli(&["list-conns"]).unwrap();
    assert!(ok, "{text}");
    for want in ["keep: IKEv2, ", "new: IKEv2, ", "start_action start", "local:  10.1.0.0/24[1]\n", "remote: 10.2.0.0/24[17]\n"] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("gone"), "{text}");
    let sas = west.sas().unwrap();
    assert_eq!(identity(&sas, "keep"), keep_before, "keep kept its IKE SA and Child SA");
    assert_eq!(identity(&east.sas().unwrap(), "keep"), keep_east);
    assert!(sas.iter().all(|s| s.connection != "gone"), "{sas:?}");
    let routes = tun_routes(&topo, Node::GwWest);
    assert!(!routes.contains("fd00:2::/64"), "gone's route stays: {routes}");
    assert!(routes.contains("10.2.0.0/24"), "keep's and new's route went: {routes}");

    // 2. A file with an error: refused with where it is, nothing changes.
    let before = (identity(&sas, "keep"), identity(&sas, "new"));
    let bad =
        ike_file(Node::GwWest, &control, &[&KEEP, &NEW]).replace("\"10.2.0.0/24[icmp]\"", "\"10.2.0.0/33[icmp]\"");
    write(&west.config_path(), &bad);
    let line = bad.lines().position(|l| l.contains("/33")).unwrap() + 1;
    let (ok, out) = west.cli(&["reload"]).unwrap();
    assert!(!ok, "{out}");
    let at = format!("{}:{line}:", west.config_path().display());
    for want in [
        at.as_str(),
        "connections.new.children.lan.remote_ts[0]",
        "the running configuration stays as it was",
    ] {
        assert!(out.contains(want), "{want:?} not in: {out}");
    }
    let sas = west.sas().unwrap();
    assert_eq!((identity(&sas, "keep"), identity(&sas, "new")), before);
    assert!(pings(&topo, Family::V4));

    // 3. SIGHUP: the file without new, under a stream.
    let (sent, received) = with_stream(&topo, 4, || {
        write(&west.config_path(), &ike_file(Node::GwWest, &control, &[&KEEP]));
        let hup = std::process::Command::new("kill")
            .args(["-HUP", &west.pid().to_string()])
            .status()
            .unwrap();
        assert!(hup.success());
        wait_for("the peer to drop new", || {
            east.sas().is_ok_and(|s| s.iter().all(|x| x.connection != "new"))
        });
    });
    assert_eq!(
        received,
        sent,
        "keep lost {} of {sent} packets during the SIGHUP reload",
        sent - received
    );
    assert_eq!(identity(&west.sas().unwrap(), "keep"), keep_before);
    assert!(!pings(&topo, Family::V4), "new is gone");
    let log = std::fs::read_to_string(west.dir().join("esparto.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("reloading the configuration") && l.contains("SIGHUP")),
        "{log}"
    );
    west.stop().unwrap();
    east.stop().unwrap();
}

/// The names `esparto list-conns --json` lists, in file order.
fn conn_names(gw: &EspartoGateway) -> Vec<String> {
    let (ok, out) = gw.cli(&["list-conns", "--json"]).unwrap();
    assert!(ok, "{out}");
    let conns: Vec<esparto::status::ConnStatus> = serde_json::from_str(&out).unwrap();
    conns.into_iter().map(|c| c.name).collect()
}

/// A statically keyed child `name` of west's file (east mirrors it):
/// SPIs and keys derived from `n` (and `keys`, to change the keys).
fn static_conn(side: Node, spec: &Spec, n: u8, keys: u8) -> String {
    let west = side == Node::GwWest;
    let other = if west { Node::GwEast } else { Node::GwWest };
    let (l, r) = if west {
        (spec.local, spec.remote)
    } else {
        (spec.remote, spec.local)
    };
    let (a, b) = (
        0xc000_0000u32 | u32::from(n) << 8 | 1,
        0xc000_0000u32 | u32::from(n) << 8 | 2,
    );
    let (in_spi, out_spi) = if west { (a, b) } else { (b, a) };
    // One byte per key, repeated: distinct for every SA and direction.
    let key = |x: u32| format!("0x{}", format!("{:02x}", n << 4 | keys << 2 | (x as u8 & 3)).repeat(36));
    format!(
        "\n[connections.{name}]\nlocal_addrs = [{la}]\nremote_addrs = [{ra}]\n\
         [connections.{name}.children.lan]\nlocal_ts = [{l}]\nremote_ts = [{r}]\nesp_proposals = [\"aes256gcm16\"]\n\
         [[connections.{name}.children.lan.static_sas]]\nin_spi = 0x{in_spi:08x}\nout_spi = 0x{out_spi:08x}\n\
         in_key = \"{ik}\"\nout_key = \"{ok}\"\n",
        name = spec.name,
        la = q(&Topology::addr(side, Net::Transit, Family::V4).to_string()),
        ra = q(&Topology::addr(other, Net::Transit, Family::V4).to_string()),
        l = q(l),
        r = q(r),
        ik = key(in_spi),
        ok = key(out_spi),
    )
}

fn static_file(side: Node, control: &Path, conns: &[(&Spec, u8, u8)]) -> String {
    let mut t = daemon_section(control, 2);
    for (spec, n, keys) in conns {
        t.push_str(&static_conn(side, spec, *n, *keys));
    }
    t
}

/// Reloads the gateway (SIGHUP or `esparto reload`) after writing `text`.
fn reload(gw: &EspartoGateway, text: &str) -> String {
    write(&gw.config_path(), text);
    let (ok, out) = gw.cli(&["reload"]).unwrap();
    assert!(ok, "{out}");
    out
}

#[test]
fn static_children_are_reloaded_too() {
    if skip("reload_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let start = |node| {
        EspartoGateway::start_with(topo.ns(node), bin, "esparto0", |c| {
            static_file(node, c, &[(&KEEP, 1, 0)])
        })
        .unwrap()
    };
    let (west, east) = (start(Node::GwWest), start(Node::GwEast));
    let controls: Vec<PathBuf> = [&west, &east].iter().map(|g| g.control_path().to_path_buf()).collect();
    assert!(!pings(&topo, Family::V6));

    // Both sides add gone (IPv6) and new (ICMP) while keep streams.
    let (sent, received) = with_stream(&topo, 5, || {
        for (gw, (node, c)) in [&west, &east]
            .into_iter()
            .zip([Node::GwWest, Node::GwEast].into_iter().zip(&controls))
        {
            let out = reload(gw, &static_file(node, c, &[(&KEEP, 1, 0), (&GONE, 2, 0), (&NEW, 3, 0)]));
            assert!(out.contains("added     2: gone, new"), "{out}");
        }
        wait_for("IPv6 through gone", || pings(&topo, Family::V6));
        wait_for("ICMP through new", || pings(&topo, Family::V4));
    });
    assert_eq!(received, sent, "keep lost {} of {sent} packets", sent - received);

    // New keys for new (changed), gone removed, on both sides.
    let (sent, received) = with_stream(&topo, 5, || {
        for (gw, (node, c)) in [&west, &east]
            .into_iter()
            .zip([Node::GwWest, Node::GwEast].into_iter().zip(&controls))
        {
            let out = reload(gw, &static_file(node, c, &[(&KEEP, 1, 0), (&NEW, 3, 1)]));
            assert!(
                out.contains("changed   1: new") && out.contains("removed   1: gone"),
                "{out}"
            );
        }
        wait_for("ICMP through the changed new", || pings(&topo, Family::V4));
        assert!(!pings(&topo, Family::V6));
    });
    assert_eq!(received, sent, "keep lost {} of {sent} packets", sent - received);
    // The data plane holds exactly keep's and new's SAs.
    let st = west.status().unwrap();
    let mut conns: Vec<&str> = st.sas.iter().map(|s| s.connection.as_str()).collect();
    conns.sort_unstable();
    conns.dedup();
    assert_eq!(conns, ["keep", "new"], "{:?}", st.sas);
    west.stop().unwrap();
    east.stop().unwrap();
}

/// Connections of the reload benchmark (`RELOAD_BENCH_CONNECTIONS`
/// overrides).
const BENCH_CONNECTIONS: usize = 1_000;
/// Connections of `gw` that are established with at least one child.
fn connections_up(gw: &EspartoGateway) -> usize {
    gw.sas().map_or(0, |s| s.iter().filter(|x| x.state == "established" && !x.children.is_empty()).count())
}

/// One IKE counter from a status listing, 0 where absent.
fn counter(m: &std::collections::BTreeMap<String, u64>, k: &str) -> u64 {
    m.get(k).copied().unwrap_or(0)
}

/// The unchanged connections that carry a stream during the benchmark's
/// reload, and the one that changes (the last).
const BENCH_STREAMS: [usize; 4] = [0, 250, 500, 750];

/// West's or east's file for the benchmark: `n` connections `c0`, `c1`, …,
/// connection `i` protecting UDP to port 10000 + i of the east LAN; west
/// proposes `esp_last` for the last one, east accepts it.
fn bench_file(side: Node, control: &Path, n: usize, esp_last: &str) -> String {
    // Every initiation arrives at once from one address.
    let limits = "half_open_per_source = 100000\nmax_half_open = 100000\n\
                  cookie_threshold = 100000\ncookie_threshold_per_source = 100000\n";
    hub_file(side, control, n, esp_last, limits)
}

/// [`bench_file`] with `daemon_extra` (lines of `[daemon]` keys) added to
/// the daemon section; with `""`, every limit is at its default.
fn hub_file(side: Node, control: &Path, n: usize, esp_last: &str, daemon_extra: &str) -> String {
    let west = side == Node::GwWest;
    let (me, peer) = if west { ("west", "east") } else { ("east", "west") };
    let other = if west { Node::GwEast } else { Node::GwWest };
    let (la, ra) = (
        Topology::addr(side, Net::Transit, Family::V4),
        Topology::addr(other, Net::Transit, Family::V4),
    );
    let mut t = daemon_section(control, 2);
    t.push_str(daemon_extra);
    for i in 0..n {
        let (l, r) = (
            "10.1.0.0/24[udp]".to_string(),
            format!("10.2.0.0/24[udp/{}]", 10_000 + i),
        );
        let (l, r) = if west { (l, r) } else { (r, l) };
        let esp = match (west, i + 1 == n) {
            (true, true) => format!("\"{esp_last}\""),
            (false, _) => "\"aes256gcm16\", \"aes128gcm16\"".into(),
            (true, false) => "\"aes256gcm16\"".into(),
        };
        t.push_str(&format!(
            "\n[connections.c{i}]\nlocal_addrs = [\"{la}\"]\nremote_addrs = [\"{ra}\"]\nversion = 2\n\
             proposals = [\"aes256gcm16-prfsha256-x25519\"]\nencap = true\n\
             local.auth = \"psk\"\nlocal.id = \"@{me}-c{i}\"\nremote.auth = \"psk\"\nremote.id = \"@{peer}-c{i}\"\n\
             [connections.c{i}.children.lan]\nlocal_ts = [\"{l}\"]\nremote_ts = [\"{r}\"]\nesp_proposals = [{esp}]\n\
             per_cpu_sas = \"no\"\nstart_action = \"{start}\"\n\
             [secrets.c{i}]\nids = [\"@west-c{i}\", \"@east-c{i}\"]\nsecret = \"reload benchmark secret c{i}\"\n",
            start = if west { "start" } else { "none" },
        ));
    }
    t
}

/// The figure in docs/BENCHMARKS.md ("Live reload"): both gateways with
/// 1,000 IKE connections up, four of them carrying a UDP stream; west's
/// file changes one other connection's ESP proposal and `esparto reload`
/// applies it. Prints the reload's time (the client's wall clock and the
/// daemon's own), how long the changed connection took to come back, and
/// each stream's loss.
#[test]
#[ignore = "benchmark: cargo test --release -p esparto --test reload_netns -- --ignored --nocapture"]
fn bench_reload_1000_connections_one_changed() {
    if skip("reload_netns bench", false) {
        return;
    }
    let n: usize = std::env::var("RELOAD_BENCH_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BENCH_CONNECTIONS);
    assert!(
        n > BENCH_STREAMS[3] + 1,
        "at least {} connections",
        BENCH_STREAMS[3] + 2
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, "esparto0", |c| {
        bench_file(Node::GwEast, c, n, "")
    })
    .unwrap();
    let t0 = Instant::now();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| {
        bench_file(Node::GwWest, c, n, "aes256gcm16")
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while connections_up(&west) < n {
        assert!(Instant::now() < deadline, "{} of {n} connections up", connections_up(&west));
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("{n} connections up in {:.1} s", t0.elapsed().as_secs_f64());
    let changed = format!("c{}", n - 1);
    let before = west.sas().unwrap();
    let control = west.control_path().to_path_buf();
    let src = Topology::addr(Node::HostWest, Net::Lan, Family::V4);
    let dst = host_east(Family::V4);
    let mut gens: Vec<UdpGen> = BENCH_STREAMS
        .iter()
        .map(|i| {
            let port = 10_000 + u16::try_from(*i).unwrap();
            let mut g = UdpGen::to_port(
                topo.ns(Node::HostWest),
                src,
                topo.ns(Node::HostEast),
                (dst, port).into(),
                1,
            )
            .unwrap();
            g.quiet = Duration::from_millis(500);
            g
        })
        .collect();
    let (results, wall_ms, report, back_s) = std::thread::scope(|s| {
        let streams: Vec<_> = gens
            .iter_mut()
            .map(|g| s.spawn(move || g.trial(SIZE, RATE / 2.0, Duration::from_secs(8)).unwrap().0))
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        write(
            &west.config_path(),
            &bench_file(Node::GwWest, &control, n, "aes128gcm16"),
        );
        let t = Instant::now();
        let (ok, out) = west.cli(&["reload", "--json"]).unwrap();
        let wall_ms = t.elapsed().as_secs_f64() * 1e3;
        assert!(ok, "{out}");
        let report: esparto::status::ReloadReport = serde_json::from_str(&out).unwrap();
        let back = Instant::now();
        wait_for("the changed connection", || {
            west.sas()
                .is_ok_and(|s| up(&s, &changed).is_some_and(|x| x.children.iter().any(|c| c.suite.contains("128"))))
        });
        let back_s = back.elapsed().as_secs_f64();
        let results: Vec<_> = streams.into_iter().map(|h| h.join().unwrap()).collect();
        (results, wall_ms, report, back_s)
    });
    assert_eq!(
        (report.changed.as_slice(), report.unchanged),
        (std::slice::from_ref(&changed), n - 1),
        "{report:?}"
    );
    println!(
        "reload of {n} connections, 1 changed: {wall_ms:.1} ms (esparto reload, wall clock), {:.1} ms in the daemon; \
         the changed one back in {back_s:.2} s",
        report.took_ms
    );
    let after = west.sas().unwrap();
    let mut kept = 0;
    for b in before.iter().filter(|b| b.connection != changed) {
        let a = after.iter().find(|a| a.connection == b.connection).unwrap();
        assert_eq!(
            (&a.id, &a.children[0].in_spi),
            (&b.id, &b.children[0].in_spi),
            "{} was touched",
            b.connection
        );
        kept += 1;
    }
    println!("{kept} unchanged connections kept their IKE SA and Child SA");
    for (i, t) in BENCH_STREAMS.iter().zip(&results) {
        println!(
            "stream through c{i}: {} sent, {} received, {} lost",
            t.sent,
            t.received,
            t.sent.saturating_sub(t.received)
        );
    }
    for (i, t) in BENCH_STREAMS.iter().zip(&results) {
        assert_eq!(t.received, t.sent, "c{i} lost packets");
    }
    west.stop().unwrap();
    east.stop().unwrap();
}

/// West starts `n` IKE connections to east at once, every limit at its
/// default on both sides; returns how long until all were up, with west's
/// and east's IKE counters.
fn hub_up(n: usize) -> (Duration, std::collections::BTreeMap<String, u64>, std::collections::BTreeMap<String, u64>) {
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, "esparto0", |c| hub_file(Node::GwEast, c, n, "", "")).unwrap();
    let t0 = Instant::now();
    let west =
        EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| hub_file(Node::GwWest, c, n, "aes256gcm16", "")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while connections_up(&west) < n {
        assert!(Instant::now() < deadline, "{} of {n} connections up; east: {:?}", connections_up(&west), east.status().map(|s| s.ike));
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    let (w, e) = (west.status().unwrap().ike, east.status().unwrap().ike);
    west.stop().unwrap();
    east.stop().unwrap();
    (took, w, e)
}

/// A hub: fifty connections between the same two gateways, all with
/// `start_action = "start"` and default limits. West paces its
/// initiations (`initiating_per_peer`), so east neither demands a cookie
/// nor drops a request, and nothing waits for a retransmission. The time
/// bound is loose (the machine is shared); the counters are the test.
#[test]
fn fifty_connections_to_one_peer_come_up_without_cookies_or_drops() {
    if skip("reload_netns", false) {
        return;
    }
    let n = 50;
    let (took, west, east) = hub_up(n);
    eprintln!("{n} connections up in {:.2} s; west paced {}", took.as_secs_f64(), counter(&west, "initiations_paced"));
    assert_eq!(
        (counter(&east, "cookies_sent"), counter(&east, "half_open_dropped_per_source"), counter(&east, "half_open_dropped_global")),
        (0, 0, 0),
        "east: {east:?}"
    );
    assert!(counter(&west, "initiations_paced") > 0, "west: {west:?}");
    assert!(took < Duration::from_secs(30), "{n} connections took {took:?}");
}

/// The figure in docs/BENCHMARKS.md ("A hub"): 1,000 connections
/// (`HUB_CONNECTIONS`) between two gateways with default settings, from
/// west's start until all are up.
#[test]
#[ignore = "benchmark: cargo test --release -p esparto --test reload_netns bench_hub -- --ignored --nocapture"]
fn bench_hub_1000_connections_up_with_default_limits() {
    if skip("reload_netns bench", false) {
        return;
    }
    let n: usize = std::env::var("HUB_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let (took, west, east) = hub_up(n);
    println!(
        "hub: {n} connections up in {:.2} s with default limits (west paced {}, east sent {} cookies, dropped {} half-open)",
        took.as_secs_f64(),
        counter(&west, "initiations_paced"),
        counter(&east, "cookies_sent"),
        counter(&east, "half_open_dropped_per_source") + counter(&east, "half_open_dropped_global"),
    );
}

/// The figure in docs/BENCHMARKS.md ("swanctl over VICI"): a hub of
/// 10,000 connections (`VICI_BENCH_CONNECTIONS`), each with one Child SA;
/// `swanctl --list-sas` against west over VICI, five times, timed, while
/// a Child SA rekey runs; the IKE engine's failure and retransmission
/// counters before and after say whether the listing disturbed IKE.
#[test]
#[ignore = "benchmark: cargo test --release -p esparto --test reload_netns bench_vici -- --ignored --nocapture"]
fn bench_vici_list_sas_of_10000_child_sas() {
    if skip("reload_netns bench", true) {
        return;
    }
    let n: usize = std::env::var("VICI_BENCH_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, "esparto0", |c| bench_file(Node::GwEast, c, n, "")).unwrap();
    let west =
        EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| bench_file(Node::GwWest, c, n, "aes256gcm16")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while connections_up(&west) < n {
        assert!(Instant::now() < deadline, "{} of {n} connections up", connections_up(&west));
        std::thread::sleep(Duration::from_millis(200));
    }
    let uri = format!("unix://{}", west.control_path().with_file_name("charon.vici").display());
    let disturbed = |gw: &EspartoGateway| {
        let st = gw.status().unwrap();
        (st.ike_events.ike_sa_failures.values().sum::<u64>(), st.ike_events.child_sa_failures.values().sum::<u64>(), counter(&st.ike, "reinitiations"))
    };
    let before = (disturbed(&west), disturbed(&east));
    let mut times = Vec::new();
    for round in 0..5 {
        let (out, took) = std::thread::scope(|sc| {
            // In the middle round, a rekey while the listing runs.
            let rekey = (round == 2).then(|| {
                sc.spawn(|| {
                    std::thread::sleep(Duration::from_millis(50));
                    west.cli(&["rekey", "c0"]).unwrap()
                })
            });
            let t = Instant::now();
            let out = std::process::Command::new("swanctl").args(["--list-sas", "--uri", &uri]).output().unwrap();
            let took = t.elapsed().as_secs_f64();
            if let Some(r) = rekey {
                let (ok, msg) = r.join().unwrap();
                assert!(ok, "the rekey during the listing: {msg}");
            }
            (out, took)
        });
        times.push(took);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listed = String::from_utf8_lossy(&out.stdout).matches(", ESTABLISHED, IKEv2").count();
        assert_eq!(listed, n, "IKE SAs listed");
    }
    let after = (disturbed(&west), disturbed(&east));
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    // The same list over the control socket (`esparto sas --json`), for
    // comparison: what VICI adds.
    let control: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let sas = west.sas().unwrap();
            assert_eq!(sas.len(), n);
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!(
        "vici: swanctl --list-sas of {n} IKE SAs with {n} Child SAs: {times:.2?} s (median {:.2} s); \
         esparto sas --json {control:.2?} s; \
         IKE failures, Child SA failures, re-initiations west/east before {before:?} after {after:?}",
        sorted[2]
    );
    assert_eq!(before, after, "the listing disturbed IKE");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// A swanctl.conf of `n` PSK connections from gw-west to gw-east, each
/// with its own identities, secret and LAN pair, as a hub site writes it.
fn swanctl_hub(n: usize) -> String {
    let mut t = String::from("connections {\n");
    for k in 0..n {
        let (hi, lo) = (k / 256, k % 256);
        t.push_str(&format!(
            "    c{k} {{\n        local_addrs = 192.0.2.1\n        remote_addrs = 192.0.2.2\n        \
             proposals = aes256gcm16-prfsha256-x25519\n        local-1 {{\n            auth = psk\n            \
             id = @west{k}\n        }}\n        remote-1 {{\n            auth = psk\n            id = @east{k}\n        }}\n        \
             children {{\n            net {{\n                local_ts = 10.{}.{lo}.0/24\n                \
             remote_ts = 10.{}.{lo}.0/24\n                esp_proposals = aes256gcm16\n            }}\n        }}\n    }}\n",
            100 + hi,
            150 + hi
        ));
    }
    t.push_str("}\nsecrets {\n");
    for k in 0..n {
        t.push_str(&format!(
            "    ike-c{k} {{\n        id-a = @west{k}\n        id-b = @east{k}\n        secret = \"hub secret number {k:05}, long enough\"\n    }}\n"
        ));
    }
    t.push_str("}\n");
    t
}

/// `swanctl --load-all` of a swanctl.conf with 1,000 connections and
/// their secrets into a daemon whose TOML file has none, five times: the
/// first loads everything, the later ones find everything unchanged.
#[test]
#[ignore = "benchmark: cargo test --release -p esparto --test reload_netns bench_vici_load_all -- --ignored --nocapture"]
fn bench_vici_load_all_of_1000_connections() {
    if skip("reload_netns bench", true) {
        return;
    }
    let n: usize = std::env::var("VICI_BENCH_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000);
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| {
        format!(
            "[daemon]\nworkers = 2\ncontrol = \"{}\"\nstate_dir = \"{}\"\n",
            c.display(),
            c.with_file_name("state").display()
        )
    })
    .unwrap();
    let conf = west.dir().path().join("swanctl.conf");
    std::fs::write(&conf, swanctl_hub(n)).unwrap();
    let uri = format!("unix://{}", west.control_path().with_file_name("charon.vici").display());
    let swanctl = |what: &str| {
        let t = Instant::now();
        let noprompt: &[&str] = if what == "--load-conns" { &[] } else { &["--noprompt"] };
        let out = std::process::Command::new("swanctl")
            .arg(what)
            .args(noprompt)
            .arg("--file")
            .arg(&conf)
            .args(["--uri", &uri])
            .output()
            .unwrap();
        let took = t.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{what}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        (took, stdout)
    };
    // First the secrets, then the connections, each timed; then the whole
    // file again, four times, unchanged.
    let (creds, _) = swanctl("--load-creds");
    let (conns, out) = swanctl("--load-conns");
    assert!(out.contains(&format!("successfully loaded {n} connections, 0 unloaded")), "{out}");
    let mut again = Vec::new();
    for _ in 0..4 {
        let (t, out) = swanctl("--load-all");
        assert!(out.contains(&format!("successfully loaded {n} connections, 0 unloaded")), "{out}");
        again.push(t);
    }
    assert_eq!(west.cli(&["list-conns", "--json"]).unwrap().1.matches("\"name\": \"c").count(), n);
    println!(
        "vici: swanctl --load-creds of {n} secrets {creds:.2} s, then --load-conns of {n} connections {conns:.2} s \
         ({:.2} s together); --load-all of the unchanged file again: {again:.2?} s",
        creds + conns
    );
    west.stop().unwrap();
}

/// Resident memory of a daemon (`VmRSS`), MiB.
fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0.0);
    kib / 1024.0
}

/// The figure in docs/BENCHMARKS.md ("Memory after a churn"): both
/// gateways start with one connection, a reload brings up 2,000 IKE
/// connections (`CHURN_CONNECTIONS`), a second reload removes all but the
/// first; west's resident memory with one, with all up, and after they
/// went (the daemon gives freed heap back after a large removal).
#[test]
#[ignore = "benchmark: cargo test --release -p esparto --test reload_netns bench_memory -- --ignored --nocapture"]
fn bench_memory_after_a_churn_of_2000_connections() {
    if skip("reload_netns bench", false) {
        return;
    }
    let n: usize = std::env::var("CHURN_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, "esparto0", |c| bench_file(Node::GwEast, c, 1, "")).unwrap();
    let west =
        EspartoGateway::start_with(topo.ns(Node::GwWest), bin, "esparto0", |c| bench_file(Node::GwWest, c, 1, "aes256gcm16")).unwrap();
    wait_for("the first connection", || west.sas().is_ok_and(|s| !s.is_empty()));
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_mib(west.pid());
    for (gw, node) in [(&east, Node::GwEast), (&west, Node::GwWest)] {
        write(&gw.config_path(), &bench_file(node, gw.control_path(), n, "aes256gcm16"));
        let (ok, out) = gw.cli(&["reload"]).unwrap();
        assert!(ok, "{out}");
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while connections_up(&west) < n {
        assert!(Instant::now() < deadline, "{} of {n} connections up", connections_up(&west));
        std::thread::sleep(Duration::from_millis(500));
    }
    let up = rss_mib(west.pid());
    for (gw, node) in [(&west, Node::GwWest), (&east, Node::GwEast)] {
        write(&gw.config_path(), &bench_file(node, gw.control_path(), 1, "aes256gcm16"));
        let (ok, out) = gw.cli(&["reload"]).unwrap();
        assert!(ok, "{out}");
    }
    wait_for("every other SA gone", || west.sas().is_ok_and(|s| s.len() == 1));
    // The trim follows within a turn of the control loop (at most 10 s
    // after the last one).
    std::thread::sleep(Duration::from_secs(12));
    let after = rss_mib(west.pid());
    let log = std::fs::read_to_string(west.dir().path().join("esparto.log")).unwrap_or_default();
    println!(
        "west's VmRSS: one connection {idle:.1} MiB, {n} connections up {up:.1} MiB, after they went {after:.1} MiB (trimmed: {})",
        log.contains("returned the freed heap to the system")
    );
    west.stop().unwrap();
    east.stop().unwrap();
}
