//! The daemon as its systemd unit runs it (`packaging/esparto.service`):
//! root with the unit's capability bounding set and `no_new_privs`, and
//! `NOTIFY_SOCKET` set.
//!
//! - An IKE gateway (UDP 500) starts with exactly the unit's capabilities,
//!   loads its flow-table steering program (CAP_BPF), carries traffic, and
//!   keeps CAP_NET_ADMIN alone; it says `READY=1` only once its control
//!   socket answers and its TUN device exists; SIGHUP (the unit's
//!   `ExecReload`) and `esparto reload -c CONFIG` each reload the file
//!   between `RELOADING=1` (with `MONOTONIC_USEC=`) and `READY=1`, traffic
//!   flowing on; SIGTERM brings `STOPPING=1`, then exit 0. Clients find its
//!   socket through `-c CONFIG`, and name that file when the daemon is gone.
//! - Started without CAP_NET_ADMIN, or without CAP_NET_BIND_SERVICE for
//!   port 500, it refuses, naming the capability and what needs it, and
//!   leaves nothing behind: no lock file, no control socket, no device, no
//!   readiness; its exit status is the one the unit does not restart on.
//! - So does an invalid configuration, or none at all.
//!
//! Needs root, iproute2, ping, setpriv: SKIP otherwise.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use esparto_netns::Netns;
use esparto_testbed::esparto::{EspartoConfig, EspartoGateway, Keying};
use esparto_testbed::topology::{Net, Node, Topology};
use esparto_testbed::{Family, skip, traffic};

/// The unit, read for its capability bounding set.
const UNIT: &str = include_str!("../../../packaging/esparto.service");
/// `CAP_NET_ADMIN` as a bit of the `/proc/PID/status` masks.
const CAP_NET_ADMIN: u64 = 1 << 12;
/// Generous for a loaded 2-CPU machine.
const DEADLINE: Duration = Duration::from_secs(30);

/// The unit's `CapabilityBoundingSet=`, as `setpriv --bounding-set`
/// names (`net_admin`, …).
fn unit_capabilities() -> Vec<String> {
    let line =
        UNIT.lines().find_map(|l| l.strip_prefix("CapabilityBoundingSet=")).expect("the unit bounds capabilities");
    line.split_whitespace().map(|c| c.trim_start_matches("CAP_").to_lowercase()).collect()
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

fn pings(topo: &Topology) -> bool {
    let host = topo.ns(Node::HostWest);
    [Family::V4, Family::V6].into_iter().all(|fam| {
        let dst = Topology::addr(Node::HostEast, Net::Lan, fam);
        traffic::ping(host, dst, 3, Duration::from_millis(100)).is_ok_and(|r| r.all_answered())
    })
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `esparto run` in `ns` as the unit starts it: with the capability
/// bounding set `caps` (setpriv names), `no_new_privs`, and a notify
/// socket of the test's own.
struct Service {
    _dir: tempfile::TempDir,
    config: PathBuf,
    control: PathBuf,
    log: PathBuf,
    notify: UnixDatagram,
    child: Child,
}

impl Service {
    fn start(ns: &Netns, cfg: &EspartoConfig, caps: &[String]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("esparto.sock");
        let config = dir.path().join("esparto.toml");
        std::fs::write(&config, cfg.to_toml(&control)).unwrap();
        let notify_path = dir.path().join("notify");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        notify.set_nonblocking(true).unwrap();
        let log = dir.path().join("esparto.log");
        let out = std::fs::File::create(&log).unwrap();
        let bounding: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "setpriv", "--no-new-privs"])
            .arg(format!("--bounding-set=-all,{}", bounding.join(",")))
            .arg(env!("CARGO_BIN_EXE_esparto"))
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Self { _dir: dir, config, control, log, notify, child }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The next notification, if one comes before the deadline and the
    /// daemon is still running (or has just exited with one queued).
    fn notification(&mut self) -> Option<String> {
        let deadline = Instant::now() + DEADLINE;
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.notify.recv(&mut buf) {
                return Some(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            if Instant::now() >= deadline || self.child.try_wait().unwrap().is_some() {
                return self.notify.recv(&mut buf).ok().map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `esparto ARGS` with `-c CONFIG`: whether it succeeded, and its output.
    fn client(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_esparto")).args(args).arg("-c").arg(&self.config).output().unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(ok.success());
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("esparto did not exit: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn link_exists(ns: &Netns, dev: &str) -> bool {
    ns.ip(&["link", "show", dev]).is_ok_and(|o| o.status.success())
}

/// `/proc/PID/status` field `name` as a mask.
fn mask(pid: u32, name: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let v = s.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':'))).unwrap();
    u64::from_str_radix(v.trim(), 16).unwrap()
}

#[test]
fn under_the_units_capabilities_it_notifies_ready_reloads_and_stops_cleanly() {
    if skip("service_netns", false) {
        return;
    }
    let caps = unit_capabilities();
    assert!(caps.contains(&"net_admin".to_string()), "{caps:?}");
    let bin = Path::new(env!("CARGO_BIN_EXE_esparto"));
    let topo = Topology::new().unwrap();
    let mut ecfg = EspartoConfig::site(Node::GwEast, ike(false, false)).unwrap();
    ecfg.workers = Some(2);
    let east = EspartoGateway::start(topo.ns(Node::GwEast), bin, &ecfg).unwrap();
    let mut wcfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    wcfg.workers = Some(2);
    let gw = topo.ns(Node::GwWest);
    let mut west = Service::start(gw, &wcfg, &caps);

    // Ready means ready: the socket answers and the device is there.
    let ready = west.notification().unwrap_or_else(|| panic!("no notification; log: {}", west.log()));
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS=running: 1 connection(s), 2 worker(s), TUN device esparto0"), "{ready:?}");
    let (ok, out) = west.client(&["status", "--json"]);
    assert!(ok, "status right after READY=1: {out}");
    assert!(link_exists(gw, "esparto0"));

    // A tunnel with the unit's capabilities: port 500 bound, the flow
    // table loaded, and afterwards CAP_NET_ADMIN alone in every set.
    wait_for("the tunnel", || {
        let (ok, out) = west.client(&["sas", "--json"]);
        let sas: serde_json::Value = if ok { serde_json::from_str(&out).unwrap() } else { serde_json::Value::Null };
        sas.as_array().is_some_and(|l| l.iter().any(|sa| sa["children"].as_array().is_some_and(|c| !c.is_empty())))
    });
    assert!(pings(&topo), "no traffic; log: {}", west.log());
    let log = west.log();
    for unwanted in ["kernel's flow learning", "by hash alone", "no CAP_SETPCAP"] {
        assert!(!log.contains(unwanted), "{unwanted:?} in: {log}");
    }
    let pid = west.child.id();
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(mask(pid, set), CAP_NET_ADMIN, "{set}");
    }

    // ExecReload (SIGHUP), then `esparto reload`: each a reload of the
    // unchanged file, bracketed for the service manager.
    for how in ["SIGHUP", "esparto reload"] {
        if how == "SIGHUP" {
            west.signal("HUP");
        } else {
            let (ok, out) = west.client(&["reload"]);
            assert!(ok && out.contains("unchanged 1"), "esparto reload: {out}");
        }
        let reloading = west.notification().unwrap_or_else(|| panic!("{how}: no RELOADING=1; log: {}", west.log()));
        assert!(reloading.lines().any(|l| l == "RELOADING=1"), "{how}: {reloading:?}");
        assert!(reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC=")), "{how}: {reloading:?}");
        let ready = west.notification().unwrap_or_else(|| panic!("{how}: no READY=1; log: {}", west.log()));
        assert!(ready.lines().any(|l| l == "READY=1"), "{how}: {ready:?}");
        assert!(ready.contains("STATUS=running: 1 connection(s), 2 worker(s), TUN device esparto0"), "{ready:?}");
        assert!(west.child.try_wait().unwrap().is_none(), "{how} stopped the daemon: {}", west.log());
        assert!(pings(&topo), "no traffic after {how}");
    }

    // Stop: STOPPING=1 first, then a clean exit that removes the socket.
    west.signal("TERM");
    let stopping = west.notification().unwrap_or_else(|| panic!("no STOPPING=1; log: {}", west.log()));
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let st = west.wait_exit();
    assert!(st.success(), "{st}: {}", west.log());
    assert!(!west.control.exists());
    let (ok, out) = west.client(&["status"]);
    assert!(!ok);
    let want = format!(
        "no esparto daemon at {} (named by [daemon] control in {}): is esparto running?",
        west.control.display(),
        west.config.display()
    );
    assert!(out.contains(&want), "{want:?} not in {out:?}");
    east.stop().unwrap();
    drop(west);
}

/// Lock files under /run/esparto for the namespace `ns`.
/// The lock files named after `ns`, each with what identifies its version:
/// inode, modification time and content. A fresh namespace may reuse the
/// nsfs inode of one that is gone, and a daemon killed there left its files
/// (a dead holder's lock is free, so they are harmless); a refused start must
/// leave the set exactly as it found it.
fn locks_of(ns: &Netns) -> Vec<(PathBuf, u64, std::time::SystemTime, Vec<u8>)> {
    let ino = std::fs::metadata(format!("/var/run/netns/{}", ns.name())).unwrap().ino();
    let prefix = format!("net{ino}.");
    let mut v: Vec<_> = std::fs::read_dir(esparto_io::instance::RUN_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
                .filter_map(|p| {
                    let m = std::fs::metadata(&p).ok()?;
                    let body = std::fs::read(&p).ok()?;
                    Some((p, m.ino(), m.modified().ok()?, body))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn without_its_capabilities_it_refuses_and_touches_nothing() {
    if skip("service_netns", false) {
        return;
    }
    let unit = unit_capabilities();
    let without = |cap: &str| -> Vec<String> { unit.iter().filter(|c| *c != cap).cloned().collect() };
    let ns = Netns::new("nocap").unwrap();
    let cfg = EspartoConfig::site(Node::GwWest, ike(true, true)).unwrap();
    let cases = [
        (
            without("net_admin"),
            "esparto run needs CAP_NET_ADMIN (to create the TUN device esparto0 and set routes into it), which \
             this process does not have; nothing was set up",
        ),
        (
            without("net_bind_service"),
            "esparto run needs CAP_NET_BIND_SERVICE (to bind UDP ports below \
             net.ipv4.ip_unprivileged_port_start = 1024: ike_port = 500), which this process does not have",
        ),
    ];
    for (caps, want) in cases {
        let before = locks_of(&ns);
        let mut s = Service::start(&ns, &cfg, &caps);
        let st = s.wait_exit();
        let log = s.log();
        assert_eq!(st.code(), Some(i32::from(esparto::daemon::EXIT_REFUSED)), "{caps:?}: {log}");
        assert!(log.contains(want), "{want:?} not in: {log}");
        assert!(s.notification().is_none(), "a refused start notified");
        assert!(!s.control.exists(), "control socket left behind");
        let after = locks_of(&ns);
        assert_eq!(after, before, "lock files created, changed or removed");
        assert!(!link_exists(&ns, "esparto0"), "TUN device created");
    }
}

#[test]
fn an_invalid_or_missing_configuration_is_refused_with_the_status_the_unit_does_not_restart_on() {
    let want = UNIT
        .lines()
        .find_map(|l| l.strip_prefix("RestartPreventExitStatus="))
        .expect("the unit names the status it does not restart on");
    assert_eq!(want.trim(), esparto::daemon::EXIT_REFUSED.to_string());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[daemon]\nworkrs = 2\n").unwrap();
    let absent = dir.path().join("absent.toml");
    for (file, msg) in [(&bad, "daemon.workrs: unknown key"), (&absent, "cannot read")] {
        let out = Command::new(env!("CARGO_BIN_EXE_esparto")).arg("run").arg("--config").arg(file).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(i32::from(esparto::daemon::EXIT_REFUSED)), "{err}");
        assert!(err.contains(msg) && err.contains("invalid configuration, not starting"), "{err}");
    }
}
