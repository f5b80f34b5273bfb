//! The two-process tunnel set-up run: namespaces, the two peers, their
//! reports.
//!
//! ```text
//!   ns A (initiator, CPU a)                       ns B (responder, CPU b)
//!   esparto-testbed bench setup-peer  ── veth 198.18.0.1 ↔ 198.18.0.2 ──  esparto-testbed bench setup-peer
//!   --role initiator                                              --role responder
//! ```
//!
//! With `--topology loopback` both run in one namespace and talk over its
//! `lo` (127.0.0.1 ↔ 127.0.0.2). Either way the namespaces are this run's
//! own (`esparto_netns`, deleted on drop), so ports 500 and 4500 are
//! free and nothing touches the host's network. The peers are started with
//! `ip netns exec`, which execs: the child's pid is the peer's, and a peer
//! still running when the run fails or is interrupted is killed by that
//! pid before the namespaces go.

use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_netns::{self as netns, Netns, Pair};
use serde::Serialize;

use super::peer::{PeerReport, Role};

/// How the two peers are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerLink {
    /// Two namespaces and a veth pair.
    Veth,
    /// One namespace, its loopback.
    Loopback,
}

impl std::str::FromStr for PeerLink {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "veth" => Ok(PeerLink::Veth),
            "loopback" | "lo" => Ok(PeerLink::Loopback),
            _ => Err(format!("unknown topology '{s}' (veth or loopback)")),
        }
    }
}

/// What the run does.
#[derive(Debug, Clone)]
pub struct TunnelOptions {
    /// Tunnels to bring up.
    pub tunnels: usize,
    /// IKE SAs in flight at most.
    pub concurrency: usize,
    /// Veth or loopback.
    pub topology: PeerLink,
    /// CPUs for the initiator and the responder.
    pub cpus: (usize, usize),
    /// Give up after this long.
    pub timeout: Duration,
    /// Demand a COOKIE on every IKE_SA_INIT.
    pub cookies: bool,
    /// Workers the ESP SPIs steer to.
    pub workers: usize,
    /// Spoke connections both sides load.
    pub connections: usize,
    /// Certificate authentication: the directory with the run's PKI
    /// ([`super::pki`]); `None`: PSK.
    pub pki: Option<std::path::PathBuf>,
}

/// Both peers' figures and the run's own.
#[derive(Debug, Clone, Serialize)]
pub struct TunnelReport {
    /// Veth or loopback.
    pub topology: PeerLink,
    /// Tunnels asked for.
    pub tunnels: usize,
    /// IKE SAs in flight at most.
    pub concurrency: usize,
    /// Connections loaded on each side.
    pub connections: usize,
    /// Every tunnel up on both sides, no failure, no retransmission, no drop.
    pub clean: bool,
    /// Wall-clock seconds to bring them all up (the initiator's clock).
    pub seconds: f64,
    /// Tunnels per second, wall clock.
    pub tunnels_per_second: f64,
    /// The initiator's figures.
    pub initiator: PeerReport,
    /// The responder's figures.
    pub responder: PeerReport,
}

/// Peers still running are killed (by pid) when this goes.
struct Peers {
    children: Vec<Child>,
}

impl Drop for Peers {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// One peer: its stdin (closing it stops a responder) and its stdout lines.
struct Running {
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

fn spawn(peers: &mut Peers, bin: &Path, ns: &Netns, args: &[String]) -> Result<Running> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(bin)
        .args(["bench", "setup-peer"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {} in {}", bin.display(), ns.name()))?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().context("peer stdout")?;
    peers.children.push(child);
    let (tx, rx) = mpsc::channel();
    // A reader thread, so the orchestrator can wait with a timeout and
    // notice an interrupt.
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Running { stdin, lines: rx })
}

/// The next line from a peer, or an error on timeout, exit or interrupt.
fn next_line(p: &Running, what: &str, timeout: Duration, stop: &AtomicBool) -> Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("{what}: no answer within {:.0} s", timeout.as_secs_f64());
        }
        match p.lines.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(l) => return Ok(l),
            Err(RecvTimeoutError::Timeout) => continue,
            // A Ctrl-C ends the peers first; say what happened, not how.
            Err(RecvTimeoutError::Disconnected) if stop.load(Ordering::Relaxed) => {
                bail!("interrupted")
            }
            Err(RecvTimeoutError::Disconnected) => {
                bail!("{what}: the peer exited early (see its message above)")
            }
        }
    }
}

fn peer_args(
    o: &TunnelOptions,
    role: Role,
    local: IpAddr,
    remote: IpAddr,
    cpu: usize,
) -> Vec<String> {
    let mut a = vec![
        "--role".into(),
        match role {
            Role::Initiator => "initiator",
            Role::Responder => "responder",
        }
        .into(),
        "--local".into(),
        local.to_string(),
        "--remote".into(),
        remote.to_string(),
        "--tunnels".into(),
        o.tunnels.to_string(),
        "--concurrency".into(),
        o.concurrency.to_string(),
        "--cpu".into(),
        cpu.to_string(),
        "--timeout".into(),
        o.timeout.as_secs_f64().to_string(),
        "--workers".into(),
        o.workers.to_string(),
        "--connections".into(),
        o.connections.to_string(),
    ];
    if let Some(d) = &o.pki {
        a.push("--pki".into());
        a.push(d.display().to_string());
    }
    if o.cookies {
        a.push("--cookies".into());
    }
    a
}

/// Bring up `o.tunnels` tunnels between two `bin` processes.
pub fn run(bin: &Path, o: &TunnelOptions) -> Result<TunnelReport> {
    if !netns::available() {
        bail!(
            "esparto-testbed bench setup needs root and iproute2 (it runs its peers in network namespaces)"
        );
    }
    // Ctrl-C reaches the peers too (same process group) and ends them; the
    // orchestrator notices, and its destructors remove the namespaces.
    let stop = Arc::new(AtomicBool::new(false));
    let ids = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]
        .map(|s| signal_hook::flag::register(s, Arc::clone(&stop)));
    let result = run_in_namespaces(bin, o, &stop);
    for id in ids.into_iter().flatten() {
        signal_hook::low_level::unregister(id);
    }
    result
}

fn run_in_namespaces(bin: &Path, o: &TunnelOptions, stop: &AtomicBool) -> Result<TunnelReport> {
    // Declared before the peers: dropped after them, once they are dead.
    let (pair, single);
    let (ns_i, ns_r, ip_i, ip_r): (&Netns, &Netns, IpAddr, IpAddr) = match o.topology {
        PeerLink::Veth => {
            pair = Pair::new("setup", "198.18.0.1/24", "198.18.0.2/24")
                .context("creating the namespaces")?;
            (
                &pair.a,
                &pair.b,
                "198.18.0.1".parse()?,
                "198.18.0.2".parse()?,
            )
        }
        PeerLink::Loopback => {
            single = Netns::new("setup-lo").context("creating the namespace")?;
            (&single, &single, "127.0.0.1".parse()?, "127.0.0.2".parse()?)
        }
    };
    let mut peers = Peers {
        children: Vec::new(),
    };
    let start_timeout = Duration::from_secs(10);
    let mut responder = spawn(
        &mut peers,
        bin,
        ns_r,
        &peer_args(o, Role::Responder, ip_r, ip_i, o.cpus.1),
    )?;
    expect_ready(&responder, "responder", start_timeout, stop)?;
    let initiator = spawn(
        &mut peers,
        bin,
        ns_i,
        &peer_args(o, Role::Initiator, ip_i, ip_r, o.cpus.0),
    )?;
    expect_ready(&initiator, "initiator", start_timeout, stop)?;
    let run_timeout = o.timeout + Duration::from_secs(10);
    let line = next_line(&initiator, "initiator", run_timeout, stop)?;
    let init: PeerReport =
        serde_json::from_str(&line).with_context(|| format!("initiator report: {line}"))?;
    // Closing its stdin tells the responder to report and exit.
    if let Some(mut s) = responder.stdin.take() {
        let _ = s.flush();
    }
    let line = next_line(&responder, "responder", start_timeout, stop)?;
    let resp: PeerReport =
        serde_json::from_str(&line).with_context(|| format!("responder report: {line}"))?;
    drop(peers);
    let clean = [&init, &resp].iter().all(|r| {
        r.completed
            && r.tunnels == o.tunnels
            && r.failures == 0
            && r.retransmissions == 0
            && r.socket_drops == 0
    });
    Ok(TunnelReport {
        topology: o.topology,
        tunnels: o.tunnels,
        concurrency: o.concurrency,
        connections: o.connections,
        clean,
        seconds: init.seconds,
        tunnels_per_second: if init.seconds > 0.0 {
            init.tunnels as f64 / init.seconds
        } else {
            0.0
        },
        initiator: init,
        responder: resp,
    })
}

fn expect_ready(p: &Running, what: &str, timeout: Duration, stop: &AtomicBool) -> Result<()> {
    let l = next_line(p, what, timeout, stop)?;
    if l.trim() != "READY" {
        bail!("{what}: expected READY, got {l:?}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn topology_names() {
        assert_eq!("veth".parse::<PeerLink>().unwrap(), PeerLink::Veth);
        assert_eq!("loopback".parse::<PeerLink>().unwrap(), PeerLink::Loopback);
        assert!("wifi".parse::<PeerLink>().is_err());
    }

    #[test]
    fn peer_arguments_carry_every_setting() {
        let o = TunnelOptions {
            tunnels: 7,
            concurrency: 3,
            topology: PeerLink::Veth,
            cpus: (0, 1),
            timeout: Duration::from_secs(9),
            cookies: true,
            workers: 2,
            connections: 4,
            pki: None,
        };
        let a = peer_args(
            &o,
            Role::Responder,
            "198.18.0.2".parse().unwrap(),
            "198.18.0.1".parse().unwrap(),
            1,
        );
        let s = a.join(" ");
        assert_eq!(
            s,
            "--role responder --local 198.18.0.2 --remote 198.18.0.1 --tunnels 7 --concurrency 3 --cpu 1 --timeout 9 --workers 2 --connections 4 --cookies"
        );
    }
}
