//! The test bed: two gateways between two hosts in network namespaces, the
//! traffic that crosses them, and the measurements taken on the way.
//!
//! The demo (`make demo`), the end-to-end benchmark (`esparto-testbed
//! bench tunnel`), the netns tests and the strongSwan interop tests all use this
//! one library, so that a figure printed by the benchmark and a check made
//! by a test stand on the same topology and the same generators:
//!
//! - [`topology`]: `host-west — gw-west — gw-east — host-east`, four
//!   namespaces in a line (made with `esparto_netns`, so every name
//!   carries this process's pid and `Drop` removes only our own);
//! - [`traffic`]: iperf3 (TCP streams, paced UDP) and ping between the hosts;
//!   [`pinger`]: a ping in the background, for outages;
//! - [`udpgen`]: a paced UDP blaster and counter in Rust, for the packet
//!   rates iperf3 cannot offer at small sizes (it is CPU-bound near
//!   170 kpps here);
//! - [`tcpgen`]: one TCP stream carrying a given corpus, checked byte for
//!   byte on arrival (IPComp's goodput depends on the bytes);
//! - [`callgen`]: concurrent RTP-like calls between the hosts, with
//!   one-way delay, jitter and loss per call; [`emodel`]: a call's MOS
//!   from them (ITU-T G.107);
//! - [`zeroloss`]: the RFC 2544 §26.1 throughput search (pure logic);
//! - [`cpu`]: CPU seconds of the gateway processes over an interval, as
//!   "CPU seconds per GB carried" (time accounting, not `top`);
//! - [`mem`]: a process's resident memory now and at its peak, for tests
//!   that bound it under attack;
//! - [`strongswan`] and [`esparto`]: a gateway of either kind in a
//!   namespace, started, queried and stopped;
//! - [`baseline`]: the strongSwan ↔ strongSwan baseline and the plain routed
//!   ceiling, as data the benchmark prints beside its own figures;
//! - [`plot`]: the benchmarks' SVG charts, drawn after a run or redrawn
//!   from its saved results.
//!
//! **Packet sizes** are IP packet sizes of the *inner* packet (the LANCOM
//! paper's and RFC 2544's frame sizes, less the Ethernet header and FCS):
//! a "64-byte" packet is a 64-byte IPv4 datagram, i.e. 36 bytes of UDP
//! payload (64 − 20 − 8), or 16 bytes over IPv6 (64 − 40 − 8). See
//! [`udp_payload_len`].
//!
//! Everything here needs root, iproute2 and (for most of it) iperf3 and
//! strongSwan; [`missing`] says what is absent so tests can print `SKIP`.

pub mod baseline;
pub mod bench;
pub mod callgen;
pub mod cli;
pub mod cpu;
pub mod demo;
pub mod emodel;
pub mod esparto;
pub mod follow;
pub mod mem;
pub mod pinger;
pub mod plot;
pub mod strongswan;
pub mod tcpgen;
pub mod topology;
pub mod traffic;
pub mod udpgen;
pub mod workdir;
pub mod zeroloss;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

pub use topology::Topology;
pub use workdir::WorkDir;

/// Where charon, strongSwan's IKE daemon, is installed on Debian.
pub const CHARON: &str = "/usr/lib/ipsec/charon";

/// The file name of the gateway's executable.
pub const ESPARTO: &str = "esparto";

/// The `esparto` binary the gateways run: `explicit` if given (`--esparto
/// PATH`), else the one next to this executable (`target/release/esparto`
/// beside `target/release/esparto-testbed`; for a test executable in
/// `target/debug/deps/`, the one in `target/debug/`). Cargo builds it with
/// the workspace (`make demo`, `make test`); `cargo test -p
/// esparto-testbed` alone does not, so build it first (`cargo build -p
/// esparto`).
pub fn esparto_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            bail!("--esparto {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    let dir = exe.parent().context("this executable has no directory")?;
    let mut candidates = vec![dir.join(ESPARTO)];
    if dir.file_name() == Some("deps".as_ref()) {
        candidates.extend(dir.parent().map(|up| up.join(ESPARTO)));
    }
    candidates.into_iter().find(|p| p.is_file()).with_context(|| {
        format!(
            "no `{ESPARTO}` binary next to {} (build it with `cargo build -p esparto`, or give --esparto PATH)",
            exe.display()
        )
    })
}

/// IP version of the inner traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// IP header plus UDP header, in bytes: 28 for IPv4 (RFC 791 minimum
    /// header, no options), 48 for IPv6 (RFC 8200 fixed header).
    pub fn ip_udp_overhead(self) -> usize {
        match self {
            Family::V4 => 20 + 8,
            Family::V6 => 40 + 8,
        }
    }

    /// The family of an address.
    pub fn of(addr: IpAddr) -> Self {
        if addr.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }
}

/// UDP payload length that makes an IP packet of `ip_size` bytes:
/// `ip_size − 28` over IPv4, `ip_size − 48` over IPv6. This is the number to
/// give iperf3's `-l` (which is the UDP payload) for a packet-size sweep.
pub fn udp_payload_len(ip_size: usize, family: Family) -> Result<usize> {
    let over = family.ip_udp_overhead();
    if ip_size <= over || ip_size > 65_535 {
        bail!(
            "IP packet size {ip_size} impossible for {family:?} UDP (header alone is {over} bytes)"
        );
    }
    Ok(ip_size - over)
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// If [`clean_up_on_signal`]'s thread is cleaning up after a signal, wait
/// for it to end the process (with its exit status) instead of returning.
pub fn wait_if_interrupted() {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// On SIGINT, SIGTERM or SIGHUP, stop what this process started in its
/// network namespaces, delete the namespaces and its scratch directories,
/// and exit with 128 + the signal number. For the long-running commands
/// that build a test bed (`esparto-testbed demo`, `bench tunnel`): an
/// operator's Ctrl-C must not leave namespaces, veths and gateways behind.
/// Only this process's own (pid-named) namespaces and directories are
/// touched.
pub fn clean_up_on_signal(command: &'static str) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("testbed-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("{command}: signal {sig}: stopping this run's processes and removing its namespaces");
                match esparto_netns::sweep_own(Duration::from_secs(2)) {
                    Ok(n) => eprintln!("{command}: removed {n} namespaces"),
                    Err(e) => eprintln!("{command}: cleaning up namespaces: {e}"),
                }
                workdir::sweep_own();
                std::process::exit(128 + sig);
            }
        })?;
    Ok(())
}

/// For a test that needs the test bed: when something is [`missing`], print
/// `SKIP <test>: missing …` and return `true` (the test returns early and
/// passes, as namespace tests do without root).
pub fn skip(test: &str, strongswan: bool) -> bool {
    let m = missing(strongswan);
    if !m.is_empty() {
        eprintln!("SKIP {test}: missing {}", m.join(", "));
    }
    !m.is_empty()
}

/// The external programs the test bed runs, with the Debian package of
/// each and its group (`build`, `testbed`, `strongswan`): the list that
/// `scripts/setup.sh` installs and checks.
const PROGRAMS: &str = include_str!("../../../scripts/programs.txt");

/// The programs of the given groups in [`PROGRAMS`].
fn programs(groups: &[&str]) -> impl Iterator<Item = &'static str> {
    PROGRAMS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (prog, _pkg, group) = (f.next()?, f.next()?, f.next()?);
            groups.contains(&group).then_some(prog)
        })
}

/// What the test bed needs and does not find: empty when everything is
/// there. `strongswan` adds charon and swanctl to the list.
pub fn missing(strongswan: bool) -> Vec<String> {
    let mut out = Vec::new();
    if !esparto_netns::available() {
        out.push("root and iproute2 (ip netns)".to_string());
    }
    let groups: &[&str] = if strongswan { &["testbed", "strongswan"] } else { &["testbed"] };
    for tool in programs(groups) {
        let found = if tool.starts_with('/') { Path::new(tool).exists() } else { on_path(tool) };
        if !found {
            out.push(tool.to_string());
        }
    }
    out
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Poll `f` every `every` until it returns `Some`, or fail after `timeout`
/// with `what` in the message.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(every);
    }
}

/// Send `SIGTERM` to `pid` (a process this test bed started).
pub(crate) fn sigterm(pid: u32) -> Result<()> {
    signal(pid, "TERM")
}

/// Send a signal by name with `kill(1)`: the crate forbids `unsafe`, and a
/// process or two per test does not justify a dependency.
fn signal(pid: u32, sig: &str) -> Result<()> {
    let out = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .output()?;
    if !out.status.success() {
        bail!(
            "kill -{sig} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Wait for a child to exit, up to `timeout`; `SIGKILL` it after that.
/// Returns its exit status, or `None` when it had to be killed.
pub(crate) fn wait_child(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The 1-minute load average (a noise indicator recorded with figures).
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn payload_convention() {
        assert_eq!(udp_payload_len(64, Family::V4).unwrap(), 36);
        assert_eq!(udp_payload_len(1400, Family::V4).unwrap(), 1372);
        assert_eq!(udp_payload_len(64, Family::V6).unwrap(), 16);
        assert_eq!(udp_payload_len(1400, Family::V6).unwrap(), 1352);
        assert!(udp_payload_len(28, Family::V4).is_err());
        assert!(udp_payload_len(48, Family::V6).is_err());
        assert!(udp_payload_len(70_000, Family::V4).is_err());
    }

    #[test]
    fn program_list_names_the_test_beds_tools() {
        let testbed: Vec<_> = programs(&["testbed"]).collect();
        for tool in ["ip", "ethtool", "iperf3", "ping", "nstat", "tc"] {
            assert!(testbed.contains(&tool), "{tool} missing from scripts/programs.txt");
        }
        let swan: Vec<_> = programs(&["strongswan"]).collect();
        assert_eq!(swan, [CHARON, "swanctl"]);
        assert!(programs(&["build"]).any(|p| p == "cc"));
    }

    #[test]
    fn wait_for_returns_value_or_times_out() {
        let mut n = 0;
        let v = wait_for(
            "three polls",
            Duration::from_secs(5),
            Duration::ZERO,
            || {
                n += 1;
                Ok((n == 3).then_some(n))
            },
        )
        .unwrap();
        assert_eq!(v, 3);
        let e = wait_for::<()>(
            "never",
            Duration::from_millis(30),
            Duration::from_millis(5),
            || Ok(None),
        )
        .unwrap_err();
        assert!(e.to_string().contains("never"), "{e}");
    }
}
