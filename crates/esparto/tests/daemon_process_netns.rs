//! The daemon as a process, in the standard topology: one instance per TUN
//! device and UDP port (a second daemon is refused before it touches
//! anything, naming the first one's pid, and the first carries traffic on
//! with its routes intact); after set-up it holds `CAP_NET_ADMIN` alone
//! (its workers nothing) with `no_new_privs`; and a route the kernel
//! flushed comes back when the child is installed again (an IKE rekey).
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
    for (cfg, held) in [(&west_cfg, "TUN device esparto0"), (&other_tun, "UDP port 4500 (IPv4)")] {
        let second = run_to_exit(gw, bin, cfg, &[], Duration::from_secs(20)).unwrap();
        let status = second.status.expect("the second daemon exits by itself");
        assert!(!status.success(), "{status}: {}", second.log);
        let want = format!("another esparto (pid {}) is running with {held}", west.pid());
        assert!(second.log.contains(&want), "{want:?} not in: {}", second.log);
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
