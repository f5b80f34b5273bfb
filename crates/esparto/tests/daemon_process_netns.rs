//! The daemon as a process, in the standard topology: one instance per TUN
//! device and UDP port (a second daemon is refused before it touches
//! anything, naming the first one's pid, and the first carries traffic on
//! with its routes intact); after set-up it holds `CAP_NET_ADMIN` alone
//! (its workers nothing) with `no_new_privs`; and a route the kernel
//! flushed comes back when the child is installed again (an IKE rekey);
//! an instance (`--instance NAME`) takes its socket, device and state
//! directory from its name; one daemon serves an IPv4 and an IPv6 peer
//! at once from a dual-stack socket group; and peers named by host name
//! are found, and found again when the name moves.
//! Needs root, iproute2, ping: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying, StaticPair, run_to_exit};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};
use esparto_netns::Netns;

/// `CAP_NET_ADMIN` as a bit of the `/proc/PID/status` masks.
const CAP_NET_ADMIN: u64 = 1 << 12;

fn pair() -> StaticPair {
    StaticPair { in_spi: 0xc000_0101, out_spi: 0xc000_0201, in_key: "11".repeat(36), out_key: "22".repeat(36) }
}

fn pings(topo: &Topology) -> bool {
    let host = topo.ns(Node::HostWest);
    [Family::V4, Family::V6].into_iter().all(|fam| {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        traffic::ping(host, dst, 3, Duration::from_millis(100)).is_ok_and(|r| r.all_answered())
    })
}

/// The routes out of `dev` in `ns` (both families, every table: the
/// tunnel's are in Esparto's own), as `ip` prints them.
fn routes(ns: &Netns, dev: &str) -> String {
    let mut out = String::new();
    for fam in ["-4", "-6"] {
        let o = ns.ip(&[fam, "route", "show", "table", "all", "dev", dev]).unwrap();
        out.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    out
}

/// The lock file of `claim` ("tun-esparto0", "udp4-4500") in `ns`.
fn lock_file(ns: &Netns, claim: &str) -> PathBuf {
    let ino = std::fs::metadata(format!("/var/run/netns/{}", ns.name())).unwrap().ino();
    Path::new(esparto_io::instance::RUN_DIR).join(format!("net{ino}.{claim}.lock"))
}

#[test]
fn a_second_daemon_is_refused_and_the_first_runs_on() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let west_cfg = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair()])).unwrap();
    let east_cfg = EspartoConfig::site(Node::GwEast, Keying::Static(vec![pair().mirrored()])).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &west_cfg).unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();
    let gw = topo.ns(Node::GwWest);
    assert!(pings(&topo), "no traffic through the first daemon");
    let before = routes(gw, "esparto0");
    assert!(before.contains("10.2.0.0/24") && before.contains("fd00:2::/64"), "{before}");
    let lock = lock_file(gw, "tun-esparto0");
    assert_eq!(std::fs::read_to_string(&lock).unwrap().trim(), west.pid().to_string());

    // The same configuration with another control socket; then another
    // TUN device on the same port.
    let mut other_tun = west_cfg.clone();
    other_tun.tun = "esparto1".into();
    for (cfg, held, key) in [(&west_cfg, "TUN device esparto0", "tun"), (&other_tun, "UDP port 4500 (IPv4)", "port")] {
        let second = run_to_exit(gw, bin, cfg, &[], Duration::from_secs(20)).unwrap();
        let status = second.status.expect("the second daemon exits by itself");
        assert!(!status.success(), "{status}: {}", second.log);
        let want = format!("another esparto (pid {}) is running with {held}", west.pid());
        assert!(second.log.contains(&want), "{want:?} not in: {}", second.log);
        assert!(second.log.contains("to run beside it, give this daemon") && second.log.contains(&format!("another [daemon] {key}")), "no hint naming {key}: {}", second.log);
        assert!(!second.log.contains("data plane up"), "it touched the data plane: {}", second.log);
    }

    // The first daemon never noticed: same routes, link up, traffic flows.
    assert_eq!(routes(gw, "esparto0"), before);
    let link = gw.ip(&["link", "show", "esparto0"]).unwrap();
    assert!(String::from_utf8_lossy(&link.stdout).contains(",UP"), "{link:?}");
    assert!(!String::from_utf8_lossy(&gw.ip(&["link"]).unwrap().stdout).contains("esparto1"));
    assert!(pings(&topo), "the first daemon stopped carrying traffic");
    assert_eq!(west.status().unwrap().pid, west.pid());

    // A clean stop removes the lock files.
    west.stop().unwrap();
    east.stop().unwrap();
    assert!(!lock.exists() && !lock_file(gw, "udp4-4500").exists());
}

/// `/proc/PID[/task/TID]/status` fields.
struct ProcStatus(String);

impl ProcStatus {
    fn read(path: &Path) -> Self {
        Self(std::fs::read_to_string(path.join("status")).unwrap())
    }

    fn field(&self, name: &str) -> &str {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(str::trim)
            .unwrap()
    }

    fn mask(&self, name: &str) -> u64 {
        u64::from_str_radix(self.field(name), 16).unwrap()
    }
}

fn ike(initiator: bool, west: bool) -> Keying {
    let (l, r) = if west { ("@west", "@east") } else { ("@east", "@west") };
    Keying::Ike {
        proposal: "aes256gcm16-prfsha256-x25519".into(),
        local_id: l.into(),
        remote_id: r.into(),
        psk: "correct horse battery staple".into(),
        initiator,
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn only_cap_net_admin_is_kept_and_flushed_routes_come_back() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut wcfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    wcfg.workers = Some(2);
    let mut ecfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    ecfg.workers = Some(2);
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &wcfg).unwrap();
    wait_for("the tunnel", || west.sas().is_ok_and(|s| s.iter().any(|s| !s.children.is_empty())));
    assert!(pings(&topo));

    // It bound UDP 500 at start and kept neither CAP_NET_BIND_SERVICE nor
    // anything else but CAP_NET_ADMIN, in any set; its workers and its
    // VICI threads hold nothing.
    let proc = PathBuf::from(format!("/proc/{}", west.pid()));
    let main = ProcStatus::read(&proc);
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(main.mask(set), CAP_NET_ADMIN, "{set}: {}", main.field(set));
    }
    assert_eq!((main.mask("CapInh"), main.mask("CapAmb")), (0, 0));
    assert_eq!(main.field("NoNewPrivs"), "1");
    let (mut workers, mut vici) = (0, 0);
    for task in std::fs::read_dir(proc.join("task")).unwrap() {
        let path = task.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap();
        let st = ProcStatus::read(&path);
        let want = if comm.starts_with("esparto-w") {
            workers += 1;
            0
        } else if comm.starts_with("esparto-vici") {
            // The VICI listener and its clients' threads.
            vici += 1;
            0
        } else {
            CAP_NET_ADMIN
        };
        for set in ["CapEff", "CapPrm", "CapBnd"] {
            assert_eq!(st.mask(set), want, "{} ({}) {set}", path.display(), comm.trim());
        }
        assert_eq!(st.field("NoNewPrivs"), "1", "{}", path.display());
    }
    assert_eq!((workers, vici), (2, 1));

    // Down and up: the kernel flushes the routes through the device, and
    // the tunnel is cut. The next install of the child (a rekey) puts them
    // back, over netlink, with CAP_NET_ADMIN alone.
    let gw = topo.ns(Node::GwWest);
    gw.ip(&["link", "set", "esparto0", "down"]).unwrap();
    gw.ip(&["link", "set", "esparto0", "up"]).unwrap();
    assert!(!routes(gw, "esparto0").contains("10.2.0.0/24"));
    assert!(!pings(&topo));
    let (ok, out) = west.cli(&["rekey", "site"]).unwrap();
    assert!(ok, "{out}");
    wait_for("the routes", || {
        let r = routes(gw, "esparto0");
        r.contains("10.2.0.0/24") && r.contains("fd00:2::/64")
    });
    assert!(pings(&topo), "no traffic after the routes came back");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// `esparto --instance NAME`: what the file leaves out defaults to the
/// instance's control socket (`/run/esparto/NAME/esparto.sock`), TUN
/// device (`esp-NAME`) and state directory (`/var/lib/esparto/NAME`), and
/// a client finds the daemon by the name alone.
#[test]
fn an_instance_takes_its_defaults_from_its_name() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let gw = topo.ns(Node::GwWest);
    // Unique to this run (instance names are at most 11 bytes).
    let name = format!("t{}", std::process::id() % 10_000_000);
    let (run, state) = (Path::new("/run/esparto").join(&name), Path::new("/var/lib/esparto").join(&name));
    assert!(!run.exists() && !state.exists(), "{} or {} is someone else's", run.display(), state.display());
    let cfg = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair()])).unwrap();
    let text: String = cfg
        .to_toml(Path::new("/unused"))
        .lines()
        .filter(|l| !["control =", "state_dir =", "tun ="].iter().any(|k| l.starts_with(k)))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("west.toml");
    std::fs::write(&file, text).unwrap();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let mut daemon = std::process::Command::new("ip")
        .args(["netns", "exec", gw.name()])
        .arg(bin)
        .args(["--instance", &name, "run", "--config"])
        .arg(&file)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let status = |with_file: bool| {
        let mut c = std::process::Command::new(bin);
        c.args(["--instance", &name, "status", "--json"]);
        if with_file {
            c.arg("-c").arg(&file);
        }
        c.output().unwrap()
    };
    let socket = run.join("esparto.sock");
    wait_for("the instance's control socket", || socket.exists() && status(true).status.success());
    let s: serde_json::Value = serde_json::from_slice(&status(true).stdout).unwrap();
    let tun = format!("esp-{name}");
    assert_eq!(s["tun"], tun.as_str(), "{s}");
    assert!(gw.ip(&["link", "show", &tun]).unwrap().status.success(), "no device {tun}");
    // Without -c: /etc/esparto/NAME.toml is absent, so the instance's default socket.
    let bare = status(false);
    assert!(bare.status.success(), "{}", String::from_utf8_lossy(&bare.stderr));
    assert!(state.is_dir(), "no state directory {}", state.display());

    let _ = std::process::Command::new("kill").arg(s["pid"].to_string()).status();
    let exited = daemon.wait().unwrap();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(exited.success(), "{exited}: {log}");
    assert!(!socket.exists(), "control socket left");
    let _ = std::fs::remove_dir_all(&run);
    let _ = std::fs::remove_dir_all(&state);
}

/// The daemon's log so far.
fn log_of(gw: &EspartoGateway) -> String {
    std::fs::read_to_string(gw.dir().join("esparto.log")).unwrap_or_default()
}

/// A local address that is not on the host yet (a WAN address from
/// PPPoE or DHCP): the daemon starts anyway, says so, and initiates; its
/// IKE_SA_INIT cannot leave yet, and a retransmission does once the
/// address is there. It says when the address arrives, carries IKE and
/// traffic from it, and says when it leaves.
#[test]
fn a_local_address_that_arrives_late() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let late = "192.0.2.11";
    let mut west_cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    west_cfg.local_addr = late.parse().unwrap();
    let mut east_cfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    east_cfg.remote_addr = late.parse().unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();
    let west = EspartoGateway::start(topo.ns(Node::GwWest), bin, &west_cfg).unwrap();
    let log = log_of(&west);
    assert!(log.contains("the local address is not on this host yet: bound anyway (IP_FREEBIND)") && log.contains("local=192.0.2.11"), "{log}");

    let gw = topo.ns(Node::GwWest);
    assert!(gw.ip(&["addr", "add", &format!("{late}/24"), "dev", "wan0"]).unwrap().status.success());
    wait_for("the arrival logged", || log_of(&west).contains("local address is on the host now"));
    wait_for("the tunnel from the late address", || {
        west.sas().is_ok_and(|s| s.iter().any(|sa| sa.state == "established" && !sa.children.is_empty()))
    });
    wait_for("traffic", || pings(&topo));
    let sas = west.sas().unwrap();
    assert!(sas.iter().any(|s| s.local.starts_with(late)), "{sas:?}");

    assert!(gw.ip(&["addr", "del", &format!("{late}/24"), "dev", "wan0"]).unwrap().status.success());
    wait_for("the departure logged", || log_of(&west).contains("local address left the host"));
    west.stop().unwrap();
    east.stop().unwrap();
}

/// A connection without `local_addrs` (swanctl's `%any`) initiates from
/// the address the routing table gives towards the peer, as strongSwan
/// does: the tunnel comes up from the gateway's WAN address and carries
/// traffic.
#[test]
fn a_connection_without_local_addrs_initiates_from_the_routes_source() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    // start_action = "start": initiated when the daemon starts.
    let west_cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    let east_cfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &east_cfg).unwrap();
    let tun = west_cfg.tun.clone();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, &tun, |control| {
        let text = west_cfg.to_toml(control);
        assert!(text.contains("local_addrs = ["), "{text}");
        text.lines().filter(|l| !l.starts_with("local_addrs")).map(|l| format!("{l}\n")).collect()
    })
    .unwrap();
    wait_for("the tunnel", || west.sas().is_ok_and(|s| s.iter().any(|sa| sa.state == "established" && !sa.children.is_empty())));
    let sas = west.sas().unwrap();
    let wan = Topology::addr(Node::GwWest, Net::Transit, Family::V4).to_string();
    assert!(sas.iter().any(|s| s.state == "established" && s.local.starts_with(&wan)), "{wan}: {sas:?}");
    wait_for("traffic", || pings(&topo));
    west.stop().unwrap();
    east.stop().unwrap();
}

/// The address a connection without `local_addrs` uses changes (a new
/// DHCP lease) and MOBIKE is off: the old address leaves, its IKE SA
/// ends, and `dpd_action = restart` (the default of `start` connections)
/// brings the connection up again from the new address; the outage is
/// printed.
#[test]
fn a_changed_local_address_reestablishes_the_connection() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let without = |key: &'static str, cfg: EspartoConfig| {
        move |control: &Path| -> String {
            cfg.to_toml(control).lines().filter(|l| !l.starts_with(key)).map(|l| format!("{l}\n")).collect()
        }
    };
    let mut west_cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    west_cfg.conn_extra.push(("mobike".into(), "false".into()));
    let east_cfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    let (wt, et) = (west_cfg.tun.clone(), east_cfg.tun.clone());
    // East answers from any address; west sends from the route's source.
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, &et, without("remote_addrs", east_cfg)).unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, &wt, without("local_addrs", west_cfg)).unwrap();
    let up_from = |addr: &str| {
        let addr = addr.to_string();
        let w = &west;
        move || w.sas().is_ok_and(|s| s.iter().any(|sa| sa.state == "established" && !sa.children.is_empty() && sa.local.starts_with(&addr)))
    };
    let old = Topology::addr(Node::GwWest, Net::Transit, Family::V4).to_string();
    wait_for("the tunnel", up_from(&old));
    wait_for("traffic", || pings(&topo));

    let gw = topo.ns(Node::GwWest);
    gw.sysctl("net.ipv4.conf.wan0.promote_secondaries", "1").unwrap();
    let new = "192.0.2.21";
    assert!(gw.ip(&["addr", "add", &format!("{new}/24"), "dev", "wan0"]).unwrap().status.success());
    let changed = Instant::now();
    assert!(gw.ip(&["addr", "del", &format!("{old}/24"), "dev", "wan0"]).unwrap().status.success());
    wait_for("the tunnel from the new address", up_from(new));
    wait_for("traffic again", || pings(&topo));
    eprintln!("traffic again {:.2} s after the address changed", changed.elapsed().as_secs_f64());
    let log = log_of(&west);
    assert!(log.contains("our address left the host: the IKE_SA ends (no MOBIKE)"), "{log}");
    west.stop().unwrap();
    east.stop().unwrap();
}

/// The same address change with MOBIKE (on by default on both sides):
/// the IKE SA moves to the new address with UPDATE_SA_ADDRESSES, east
/// checks the new address (COOKIE2) and follows, and traffic goes on over
/// the same IKE SA and the same Child SAs — nothing is renegotiated. The
/// outage (pings lost between the change and the first answer) is printed.
#[test]
fn a_changed_local_address_moves_the_ike_sa_with_mobike() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let without = |key: &'static str, cfg: EspartoConfig| {
        move |control: &Path| -> String {
            cfg.to_toml(control).lines().filter(|l| !l.starts_with(key)).map(|l| format!("{l}\n")).collect()
        }
    };
    let west_cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    let east_cfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    let (wt, et) = (west_cfg.tun.clone(), east_cfg.tun.clone());
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, &et, without("remote_addrs", east_cfg)).unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, &wt, without("local_addrs", west_cfg)).unwrap();
    let old = Topology::addr(Node::GwWest, Net::Transit, Family::V4).to_string();
    let established = |gw: &EspartoGateway| {
        gw.sas().unwrap_or_default().into_iter().find(|sa| sa.state == "established" && !sa.children.is_empty())
    };
    wait_for("the tunnel", || established(&west).is_some_and(|sa| sa.local.starts_with(&old)));
    wait_for("traffic", || pings(&topo));
    let before = established(&west).unwrap();
    let spis = |sa: &esparto::status::IkeSaStatus| sa.children.iter().map(|c| (c.in_spi.clone(), c.out_spi.clone())).collect::<Vec<_>>();

    let gw = topo.ns(Node::GwWest);
    gw.sysctl("net.ipv4.conf.wan0.promote_secondaries", "1").unwrap();
    let new = "192.0.2.21";
    assert!(gw.ip(&["addr", "add", &format!("{new}/24"), "dev", "wan0"]).unwrap().status.success());
    let changed = Instant::now();
    assert!(gw.ip(&["addr", "del", &format!("{old}/24"), "dev", "wan0"]).unwrap().status.success());
    wait_for("west on the new address", || established(&west).is_some_and(|sa| sa.local.starts_with(new)));
    wait_for("east following", || established(&east).is_some_and(|sa| sa.remote.starts_with(new)));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !pings(&topo) {
        if Instant::now() >= deadline {
            for n in [Node::GwWest, Node::GwEast] {
                let o = std::process::Command::new("ip").args(["netns", "exec", topo.ns(n).name(), "sh", "-c", "grep Udp: /proc/net/snmp; ip -s link show wan0; ip addr show wan0; ss -uan; ip neigh"]).output().unwrap();
                eprintln!("{n:?}:\n{}", String::from_utf8_lossy(&o.stdout));
            }
        }
        assert!(Instant::now() < deadline, "no traffic after the move:\nwest: {:?}\n{}\neast: {:?}\n{}", west.sas(), log_of(&west), east.sas(), log_of(&east));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("traffic again {:.2} s after the address changed (MOBIKE)", changed.elapsed().as_secs_f64());
    let after = established(&west).unwrap();
    assert_eq!(after.id, before.id, "the same IKE SA");
    assert_eq!(spis(&after), spis(&before), "the same Child SAs");
    let log = log_of(&west);
    assert!(log.contains("moving the IKE_SA (MOBIKE)") && log.contains("IKE_SA moved (MOBIKE)"), "{log}");
    assert!(log_of(&east).contains("the peer moved (MOBIKE)"), "{}", log_of(&east));
    west.stop().unwrap();
    east.stop().unwrap();
}

/// One daemon, peers of both families: each gateway has a connection
/// over IPv4 (carrying the IPv4 LANs) and one over IPv6 (the IPv6 LANs),
/// on dual-stack sockets. Both come up, each from the local address of
/// its family, and traffic of both families crosses.
#[test]
fn one_daemon_serves_an_ipv4_and_an_ipv6_peer() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let config = |side: Node| {
        let (west, other) = (side == Node::GwWest, if side == Node::GwWest { Node::GwEast } else { Node::GwWest });
        let conn = |fam: Family| {
            let tag = if fam == Family::V4 { "4" } else { "6" };
            let Keying::Ike { proposal, local_id, remote_id, psk, initiator } = ike(west, west) else { unreachable!() };
            let keying = Keying::Ike { proposal, local_id: format!("{local_id}{tag}"), remote_id: format!("{remote_id}{tag}"), psk, initiator };
            let mut c = EspartoConfig::site(side, keying).unwrap();
            c.name = format!("site{tag}");
            c.local_addr = Topology::addr(side, Net::Transit, fam);
            c.remote_addr = Topology::addr(other, Net::Transit, fam);
            // site() lists each side's IPv4 LAN, then its IPv6 one.
            let keep = usize::from(fam == Family::V6);
            c.local_ts = vec![c.local_ts[keep].clone()];
            c.remote_ts = vec![c.remote_ts[keep].clone()];
            c
        };
        let (v4, v6) = (conn(Family::V4), conn(Family::V6));
        let tun = v4.tun.clone();
        let toml = move |control: &Path| {
            let second = v6.to_toml(control);
            let at = second.find("\n[connections.").unwrap();
            format!("{}{}", v4.to_toml(control), &second[at..])
        };
        (tun, toml)
    };
    let (et, east_toml) = config(Node::GwEast);
    let (wt, west_toml) = config(Node::GwWest);
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, &et, east_toml).unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, &wt, west_toml).unwrap();
    let up = |gw: &EspartoGateway| {
        gw.sas().is_ok_and(|s| s.iter().filter(|sa| sa.state == "established" && !sa.children.is_empty()).count() == 2)
    };
    wait_for("both tunnels", || up(&west) && up(&east));
    wait_for("traffic of both families", || pings(&topo));
    let sas = west.sas().unwrap();
    for fam in [Family::V4, Family::V6] {
        let ours = Topology::addr(Node::GwWest, Net::Transit, fam).to_string();
        let theirs = Topology::addr(Node::GwEast, Net::Transit, fam).to_string();
        assert!(sas.iter().any(|s| s.local.contains(&ours) && s.remote.contains(&theirs)), "{fam:?}: {sas:?}");
    }
    assert!(log_of(&west).contains("dual_stack=true"), "{}", log_of(&west));
    west.stop().unwrap();
    east.stop().unwrap();
}

/// `/etc/netns/NS/hosts`, which `ip netns exec` mounts over `/etc/hosts`
/// for the programs it starts in NS (the daemon's `getaddrinfo` reads
/// it). Rewritten in place, so the mount sees each change; removed, with
/// its directory if this created it, on drop.
struct NetnsHosts {
    file: PathBuf,
    /// The directories this created, innermost first.
    made: Vec<PathBuf>,
}

impl NetnsHosts {
    fn new(ns: &Netns, lines: &str) -> Self {
        let top = Path::new("/etc/netns");
        let dir = top.join(ns.name());
        let made = [dir.clone(), top.to_path_buf()].into_iter().filter(|d| !d.exists()).collect();
        std::fs::create_dir_all(&dir).unwrap();
        let hosts = NetnsHosts { file: dir.join("hosts"), made };
        hosts.set(lines);
        hosts
    }

    fn set(&self, lines: &str) {
        std::fs::write(&self.file, format!("127.0.0.1 localhost\n{lines}\n")).unwrap();
    }
}

impl Drop for NetnsHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        // remove_dir leaves a directory another test still uses.
        for dir in &self.made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Peers by host name on both sides: west initiates to `east.vpn.test`,
/// east accepts `west.vpn.test`; each gateway's `/etc/hosts` (its own
/// namespace's) says where the other is. The tunnel comes up, `sas`
/// names the host beside the address. Then east moves to a new address
/// and the name is pointed there: east's IKE SA ends with its address,
/// east initiates again (`dpd_action = restart`) from the new one, west
/// (whose last answer is the old address) resolves the name again on the
/// unknown address's IKE_SA_INIT and takes the retransmission: traffic
/// flows again, with the SA at the new address under the same name.
#[test]
fn peers_by_host_name_and_a_peer_whose_name_moves() {
    if skip("daemon_process_netns", false) {
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let east_old = Topology::addr(Node::GwEast, Net::Transit, Family::V4).to_string();
    let west_addr = Topology::addr(Node::GwWest, Net::Transit, Family::V4).to_string();
    let east_new = "192.0.2.22";
    let west_hosts = NetnsHosts::new(topo.ns(Node::GwWest), &format!("{east_old} east.vpn.test"));
    let _east_hosts = NetnsHosts::new(topo.ns(Node::GwEast), &format!("{west_addr} west.vpn.test"));

    let by_name = |cfg: EspartoConfig, peer: &'static str, drop_local: bool| {
        move |control: &Path| -> String {
            cfg.to_toml(control)
                .lines()
                .filter(|l| !(drop_local && l.starts_with("local_addrs")))
                .map(|l| if l.starts_with("remote_addrs") { format!("remote_addrs = [\"{peer}\"]\n") } else { format!("{l}\n") })
                .collect()
        }
    };
    let west_cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    let mut east_cfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    east_cfg.child_extra.push(("dpd_action".into(), "\"restart\"".into()));
    let (wt, et) = (west_cfg.tun.clone(), east_cfg.tun.clone());
    let east = EspartoGateway::start_with(topo.ns(Node::GwEast), bin, &et, by_name(east_cfg, "west.vpn.test", true)).unwrap();
    let west = EspartoGateway::start_with(topo.ns(Node::GwWest), bin, &wt, by_name(west_cfg, "east.vpn.test", false)).unwrap();
    let up_at = |gw: &EspartoGateway, addr: &str| {
        gw.sas().is_ok_and(|s| {
            s.iter().any(|sa| sa.state == "established" && !sa.children.is_empty() && sa.remote.starts_with(addr))
        })
    };
    wait_for("the tunnel to east by name", || up_at(&west, &east_old) && up_at(&east, &west_addr));
    wait_for("traffic", || pings(&topo));
    let named = |gw: &EspartoGateway, host: &str| gw.sas().unwrap().iter().any(|sa| sa.remote_host == host);
    assert!(named(&west, "east.vpn.test"), "{:?}", west.sas());
    assert!(named(&east, "west.vpn.test"), "the responder matched the peer by its name: {:?}", east.sas());
    let text = west.cli(&["sas"]).unwrap().1;
    assert!(text.contains(&format!("east.vpn.test {east_old}")), "{text}");

    let gw = topo.ns(Node::GwEast);
    gw.sysctl("net.ipv4.conf.wan0.promote_secondaries", "1").unwrap();
    assert!(gw.ip(&["addr", "add", &format!("{east_new}/24"), "dev", "wan0"]).unwrap().status.success());
    west_hosts.set(&format!("{east_new} east.vpn.test"));
    let moved = Instant::now();
    assert!(gw.ip(&["addr", "del", &format!("{east_old}/24"), "dev", "wan0"]).unwrap().status.success());
    let deadline = Instant::now() + Duration::from_secs(40);
    while !(up_at(&west, east_new) && pings(&topo)) {
        assert!(Instant::now() < deadline, "no tunnel to east's new address: {:?}\n{}", west.sas(), log_of(&west));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("traffic again {:.2} s after east moved", moved.elapsed().as_secs_f64());
    assert!(named(&west, "east.vpn.test"), "{:?}", west.sas());
    let log = log_of(&west);
    assert!(log.contains("peer host name resolved") && log.contains(east_new), "{log}");
    west.stop().unwrap();
    east.stop().unwrap();
}
