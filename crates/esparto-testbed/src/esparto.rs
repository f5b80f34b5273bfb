//! An Esparto gateway in a namespace: the counterpart of
//! [`super::strongswan::Charon`] for our own daemon.
//!
//! The harness writes a configuration file (the TOML keys of the config
//! engineer's `[daemon]` / `[connections.NAME]` /
//! `[connections.NAME.children.CHILD]` shape, strongSwan spelling) into a
//! [`WorkDir`], starts `esparto run --config FILE --control SOCK` inside the
//! gateway's namespace with `ip netns exec` (which execs, so the child's pid
//! is the daemon's), waits for the control socket to answer `esparto status
//! --control SOCK --json`, and stops it with `SIGTERM`, checking that it
//! exits 0 and leaves neither its control socket, nor its TUN device, nor a
//! policy rule tagged as Esparto's behind.
//! For recovery tests it can also be killed (`SIGKILL`, a crash) and
//! started again with the same configuration.
//!
//! Children are either statically keyed (SA pairs with SPIs and KEYMAT;
//! [`StaticPair::mirrored`] gives the peer's view) or negotiated by IKE
//! with a PSK.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use esparto_netns::Netns;

use super::topology::{Net, Node, Topology};
use super::{Family, WorkDir, sigterm, wait_child, wait_for};
use ::esparto::status::{IkeSaStatus, Status};

/// One statically keyed SA pair, as the config file lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPair {
    /// SPI we receive on.
    pub in_spi: u32,
    /// SPI we send on.
    pub out_spi: u32,
    /// KEYMAT of the inbound SA, hex.
    pub in_key: String,
    /// KEYMAT of the outbound SA, hex.
    pub out_key: String,
}

impl StaticPair {
    /// The same pair as the peer must list it (in and out swapped).
    pub fn mirrored(&self) -> Self {
        Self {
            in_spi: self.out_spi,
            out_spi: self.in_spi,
            in_key: self.out_key.clone(),
            out_key: self.in_key.clone(),
        }
    }
}

/// How the child's SAs come to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keying {
    /// Statically keyed pairs: the first the fallback SA, then one per worker.
    Static(Vec<StaticPair>),
    /// IKEv2 with a pre-shared key.
    Ike {
        /// IKE proposal.
        proposal: String,
        /// Our identity.
        local_id: String,
        /// The peer's identity.
        remote_id: String,
        /// The PSK.
        psk: String,
        /// Whether we initiate (`start_action = "start"`).
        initiator: bool,
    },
}

/// One Esparto gateway's configuration: one connection, one child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EspartoConfig {
    /// Worker threads (`None`: the daemon's default).
    pub workers: Option<usize>,
    /// `[daemon] cpus` (`None`: the daemon's default, ascending order).
    pub cpus: Option<Vec<usize>>,
    /// TUN device name.
    pub tun: String,
    /// ESP-in-UDP / NAT-T port.
    pub port: u16,
    /// IKE port.
    pub ike_port: u16,
    /// Log filter.
    pub log: String,
    /// `[daemon] state_dir` (`None`: `state` beside the control socket, in
    /// the gateway's work directory; a test that restarts a gateway with
    /// its state names a directory of its own).
    pub state_dir: Option<PathBuf>,
    /// Connection name.
    pub name: String,
    /// Our outer address.
    pub local_addr: IpAddr,
    /// The peer's outer address.
    pub remote_addr: IpAddr,
    /// The peer's ESP-in-UDP port.
    pub remote_port: u16,
    /// Child name.
    pub child: String,
    /// Local selectors.
    pub local_ts: Vec<String>,
    /// Remote selectors.
    pub remote_ts: Vec<String>,
    /// ESP proposal (strongSwan syntax).
    pub esp_proposal: String,
    /// `per_cpu_sas`: `no`, `eager` or `on-demand`.
    pub per_cpu_sas: String,
    /// Extra `key = value` lines (TOML values, written as given) for the
    /// `[daemon]` section, e.g. `("metrics", "\"127.0.0.1:9720\"")`.
    pub daemon_extra: Vec<(String, String)>,
    /// Extra `key = value` lines for the connection section, e.g.
    /// `("dpd_delay", "\"2s\"")`.
    pub conn_extra: Vec<(String, String)>,
    /// Extra lines for the child section, e.g. `("rekey_time", "\"5s\"")`.
    pub child_extra: Vec<(String, String)>,
    /// How the SAs are keyed.
    pub keying: Keying,
    /// With [`Keying::Ike`]: authenticate with certificates instead of
    /// the PSK (both ways).
    pub certs: Option<crate::strongswan::CertFiles>,
}

/// CPUs for gw-east's workers such that no flow has both its ends on one
/// CPU: `cpus` (gw-west's, in order) shifted by one, so that gw-east's
/// worker *k* runs on `cpus[(k + 1) mod n]` (with two CPUs, the opposite
/// order).
///
/// Both daemons pin worker *k* to `cpus[k mod n]` by default, and a flow
/// that gw-west's worker *k* encrypts travels on that worker's Child SA,
/// whose inbound half gw-east steers to its own worker *k* (RFC 9611
/// pairs, one per worker at each end). On two machines the two ends of a
/// flow run on two CPUs. In this test bed, with the same order at both
/// ends, they would share one: a single flow would carry both gateways'
/// work on that CPU, and every hand-over from one gateway to the other
/// would be a same-CPU wake-up, cheaper than any wire. Shifting gw-east's
/// order keeps each flow's two ends apart, as two machines would.
/// With one CPU there is nothing to shift.
pub fn shifted_cpus(cpus: &[usize]) -> Vec<usize> {
    let mut v = cpus.to_vec();
    if !v.is_empty() {
        v.rotate_left(1);
    }
    v
}

/// [`shifted_cpus`] of the CPUs this process may use (gw-west's default):
/// gw-east's `[daemon] cpus` in the bench and the demo.
pub fn east_cpus_shifted() -> Result<Vec<usize>> {
    let cpus = esparto_io::cpu::allowed_cpus().context("reading the CPUs this process may use")?;
    Ok(shifted_cpus(&cpus))
}

/// Quote a TOML basic string.
fn q(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn list(v: &[String]) -> String {
    format!(
        "[{}]",
        v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ")
    )
}

impl EspartoConfig {
    /// The standard topology's gateway on `side` with the given keying,
    /// protecting both LANs (IPv4 and IPv6), peers over IPv4 transit.
    pub fn site(side: Node, keying: Keying) -> Result<Self> {
        let (other, lts, rts) = match side {
            Node::GwWest => (
                Node::GwEast,
                ["10.1.0.0/24", "fd00:1::/64"],
                ["10.2.0.0/24", "fd00:2::/64"],
            ),
            Node::GwEast => (
                Node::GwWest,
                ["10.2.0.0/24", "fd00:2::/64"],
                ["10.1.0.0/24", "fd00:1::/64"],
            ),
            n => bail!("{n:?} is not a gateway"),
        };
        Ok(Self {
            workers: None,
            cpus: None,
            tun: "esparto0".into(),
            port: 4500,
            ike_port: 500,
            log: "info".into(),
            state_dir: None,
            name: "site".into(),
            local_addr: Topology::addr(side, Net::Transit, Family::V4),
            remote_addr: Topology::addr(other, Net::Transit, Family::V4),
            remote_port: 4500,
            child: "lan".into(),
            local_ts: lts.map(String::from).to_vec(),
            remote_ts: rts.map(String::from).to_vec(),
            esp_proposal: "aes256gcm16".into(),
            per_cpu_sas: "no".into(),
            daemon_extra: Vec::new(),
            conn_extra: Vec::new(),
            child_extra: Vec::new(),
            keying,
            certs: None,
        })
    }

    /// The configuration file, with `control` as the control socket path.
    pub fn to_toml(&self, control: &Path) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "[daemon]");
        if let Some(w) = self.workers {
            let _ = writeln!(t, "workers = {w}");
        }
        if let Some(c) = &self.cpus {
            let l: Vec<String> = c.iter().map(usize::to_string).collect();
            let _ = writeln!(t, "cpus = [{}]", l.join(", "));
        }
        let _ = writeln!(t, "control = {}", q(&control.display().to_string()));
        let state = self.state_dir.clone().unwrap_or_else(|| control.with_file_name("state"));
        let _ = writeln!(t, "state_dir = {}", q(&state.display().to_string()));
        let _ = writeln!(
            t,
            "tun = {}\nport = {}\nike_port = {}\nlog = {}",
            q(&self.tun),
            self.port,
            self.ike_port,
            q(&self.log)
        );
        for (k, v) in &self.daemon_extra {
            let _ = writeln!(t, "{k} = {v}");
        }
        let conn = format!("connections.{}", self.name);
        let _ = writeln!(t, "\n[{conn}]");
        let _ = writeln!(
            t,
            "local_addrs = [{}]\nremote_addrs = [{}]",
            q(&self.local_addr.to_string()),
            q(&self.remote_addr.to_string())
        );
        let _ = writeln!(t, "remote_port = {}", self.remote_port);
        for (k, v) in &self.conn_extra {
            let _ = writeln!(t, "{k} = {v}");
        }
        if let Keying::Ike {
            proposal,
            local_id,
            remote_id,
            ..
        } = &self.keying
        {
            let _ = writeln!(
                t,
                "version = 2\nproposals = [{}]\nencap = true",
                q(proposal)
            );
            if let Some(c) = &self.certs {
                let mut certs = vec![c.cert.display().to_string()];
                certs.extend(c.intermediates.iter().map(|p| p.display().to_string()));
                let _ = writeln!(
                    t,
                    "local.auth = \"pubkey\"\nlocal.id = {}\nlocal.certs = {}\nlocal.key = {}",
                    q(local_id),
                    list(&certs),
                    q(&c.key.display().to_string())
                );
                let _ = writeln!(
                    t,
                    "remote.auth = \"pubkey\"\nremote.id = {}\nremote.cacerts = [{}]",
                    q(remote_id),
                    q(&c.cacert.display().to_string())
                );
                if let Some(crl) = &c.crl {
                    let _ = writeln!(t, "remote.crls = [{}]", q(&crl.display().to_string()));
                }
            } else {
                let _ = writeln!(
                    t,
                    "local.auth = \"psk\"\nlocal.id = {}\nremote.auth = \"psk\"\nremote.id = {}",
                    q(local_id),
                    q(remote_id)
                );
            }
        }
        let child = format!("{conn}.children.{}", self.child);
        let _ = writeln!(t, "\n[{child}]");
        let _ = writeln!(
            t,
            "local_ts = {}\nremote_ts = {}",
            list(&self.local_ts),
            list(&self.remote_ts)
        );
        let _ = writeln!(t, "esp_proposals = [{}]", q(&self.esp_proposal));
        // Static SAs fix their per-worker SAs in the pairs; the option is
        // for negotiated children only (the validator refuses it otherwise).
        if !matches!(self.keying, Keying::Static(_)) {
            let _ = writeln!(t, "per_cpu_sas = {}", q(&self.per_cpu_sas));
        }
        for (k, v) in &self.child_extra {
            let _ = writeln!(t, "{k} = {v}");
        }
        match &self.keying {
            Keying::Static(pairs) => {
                for p in pairs {
                    let _ = writeln!(t, "\n[[{child}.static_sas]]");
                    let _ = writeln!(
                        t,
                        "in_spi = 0x{:08x}\nout_spi = 0x{:08x}\nin_key = {}\nout_key = {}",
                        p.in_spi,
                        p.out_spi,
                        q(&format!("0x{}", p.in_key)),
                        q(&format!("0x{}", p.out_key))
                    );
                }
            }
            Keying::Ike {
                local_id,
                remote_id,
                psk,
                initiator,
                ..
            } => {
                let _ = writeln!(
                    t,
                    "start_action = {}",
                    q(if *initiator { "start" } else { "none" })
                );
                if self.certs.is_some() {
                    return t;
                }
                let _ = writeln!(
                    t,
                    "\n[secrets.{}]\nids = [{}, {}]\nsecret = {}",
                    self.name,
                    q(local_id),
                    q(remote_id),
                    q(psk)
                );
            }
        }
        t
    }
}

/// How long a stopping daemon may take before the test bed calls it hung.
/// Its own part is bounded (Deletes answered within 2 s, then workers
/// joined), but removing its rules and routes and closing the TUN queues
/// wait for the kernel (the routing lock, RCU grace periods), which a
/// machine busy with other work — parallel tests tearing down their
/// namespaces — was seen to make take 7 s.
pub const STOP_PATIENCE: Duration = Duration::from_secs(30);

/// A running Esparto daemon in a namespace.
#[derive(Debug)]
pub struct EspartoGateway {
    bin: PathBuf,
    ns: String,
    tun: String,
    dir: WorkDir,
    control: PathBuf,
    child: Option<Child>,
    pid: u32,
    /// Environment variables of the daemon process (the fault-injection
    /// hooks), kept for a restart.
    env: Vec<(String, String)>,
}

impl EspartoGateway {
    /// The daemon's control socket.
    pub fn control_path(&self) -> &Path {
        &self.control
    }

    /// Write `cfg`, start `BIN run --config F --control S` in `ns`, and wait
    /// until `status` answers. On failure the work directory (config, log)
    /// is kept.
    pub fn start(ns: &Netns, bin: &Path, cfg: &EspartoConfig) -> Result<Self> {
        Self::start_with(ns, bin, &cfg.tun, |control| cfg.to_toml(control))
    }

    /// Like [`start`](Self::start), with these environment variables set
    /// for the daemon (e.g. a fault-injection hook of a test build).
    pub fn start_with_env(ns: &Netns, bin: &Path, cfg: &EspartoConfig, env: &[(&str, &str)]) -> Result<Self> {
        Self::start_inner(ns, bin, &cfg.tun, env, |control| cfg.to_toml(control))
    }

    /// Like [`start`](Self::start), with the configuration file that
    /// `toml` writes for a control socket path (several connections, a
    /// file to change and reload); `tun` is its TUN device.
    pub fn start_with(ns: &Netns, bin: &Path, tun: &str, toml: impl FnOnce(&Path) -> String) -> Result<Self> {
        Self::start_inner(ns, bin, tun, &[], toml)
    }

    fn start_inner(
        ns: &Netns,
        bin: &Path,
        tun: &str,
        env: &[(&str, &str)],
        toml: impl FnOnce(&Path) -> String,
    ) -> Result<Self> {
        let dir = WorkDir::new(&format!("esparto-{}", ns.name()))?;
        let control = dir.join("esparto.sock");
        let config = dir.join("esparto.toml");
        std::fs::write(&config, toml(&control))?;
        std::fs::File::create(dir.join("esparto.log"))?;
        let mut g = Self {
            bin: bin.to_path_buf(),
            ns: ns.name().to_string(),
            tun: tun.to_string(),
            dir,
            control,
            child: None,
            pid: 0,
            env: env.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        };
        g.spawn()?;
        Ok(g)
    }

    /// Run the daemon (its log appended to `esparto.log`) and wait until
    /// it answers; on failure the work directory is kept.
    fn spawn(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().append(true).open(self.dir.join("esparto.log"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(&self.bin)
            .arg("run")
            .arg("--config")
            .arg(self.dir.join("esparto.toml"))
            .arg("--control")
            .arg(&self.control)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", self.bin.display()))?;
        self.pid = child.id();
        self.child = Some(child);
        if let Err(e) = self.wait_ready() {
            self.dir.keep();
            bail!("{e:#} (config and log kept in {})", self.dir.path().display());
        }
        Ok(())
    }

    /// Kill the daemon with SIGKILL, as a crash would: no Delete is sent
    /// and nothing is cleaned up but what the kernel closes with the
    /// process (its TUN device and sockets). The control socket file
    /// stays; [`restart`](Self::restart) brings the daemon back.
    pub fn kill(&mut self) -> Result<()> {
        let mut child = self.child.take().with_context(|| format!("esparto in {} is not running", self.ns))?;
        child.kill().context("SIGKILL")?;
        child.wait()?;
        Ok(())
    }

    /// SIGTERM and the same checks as [`stop`](Self::stop), keeping the
    /// gateway for a [`restart`](Self::restart).
    pub fn terminate(&mut self) -> Result<()> {
        let r = self.shutdown();
        if r.is_err() {
            self.dir.keep();
        }
        r
    }

    /// Start the daemon again with the same configuration (after
    /// [`kill`](Self::kill) or [`terminate`](Self::terminate)) and wait
    /// until it answers.
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("esparto in {} is still running", self.ns);
        }
        self.spawn()
    }

    fn wait_ready(&mut self) -> Result<()> {
        // Generous: a gateway of 10,000 static SAs installs them all first.
        wait_for(
            "esparto's control socket",
            Duration::from_secs(60),
            Duration::from_millis(50),
            || {
                if let Some(st) = self.child.as_mut().context("not running")?.try_wait()? {
                    bail!("esparto exited at start ({st})");
                }
                if !self.control.exists() {
                    return Ok(None);
                }
                Ok(self.status().ok().map(|_| ()))
            },
        )
    }

    /// The configuration file the daemon runs with (`esparto reload` and
    /// SIGHUP read it again).
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("esparto.toml")
    }

    /// The daemon's pid (for CPU accounting).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The work directory (`esparto.toml`, `esparto.log`).
    pub fn dir(&self) -> &WorkDir {
        &self.dir
    }

    /// `esparto status --control S --json`, parsed.
    pub fn status(&self) -> Result<Status> {
        let out = Command::new(&self.bin)
            .args(["status", "--json", "--control"])
            .arg(&self.control)
            .output()
            .context("running esparto status")?;
        if !out.status.success() {
            bail!(
                "esparto status: {}{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        serde_json::from_slice(&out.stdout).context("parsing esparto status --json")
    }

    /// Runs `esparto ARGS --control SOCKET` against this daemon (`up`,
    /// `down`, `rekey`, …); returns whether it succeeded and its output.
    pub fn cli(&self, args: &[&str]) -> Result<(bool, String)> {
        let out = Command::new(&self.bin).args(args).arg("--control").arg(&self.control).output().context("running esparto")?;
        Ok((
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        ))
    }

    /// `esparto sas --json`: the IKE SAs and their Child SAs.
    pub fn sas(&self) -> Result<Vec<IkeSaStatus>> {
        let (ok, out) = self.cli(&["sas", "--json"])?;
        if !ok {
            bail!("esparto sas: {}", out.trim());
        }
        serde_json::from_str(&out).context("parsing esparto sas --json")
    }

    /// SIGTERM, wait up to [`STOP_PATIENCE`]; the daemon must exit 0 and
    /// remove its control socket, its TUN device and its policy rules.
    /// Files are removed unless kept.
    pub fn stop(mut self) -> Result<()> {
        let r = self.shutdown();
        if r.is_err() {
            self.dir.keep();
        }
        r
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Some(st) = child.try_wait()? {
            bail!("esparto in {} had already exited ({st})", self.ns);
        }
        sigterm(self.pid)?;
        match wait_child(&mut child, STOP_PATIENCE)? {
            Some(st) if st.success() => {}
            Some(st) => bail!("esparto in {} exited with {st}", self.ns),
            None => bail!("esparto in {} ignored SIGTERM and was killed", self.ns),
        }
        if self.control.exists() {
            bail!(
                "esparto left its control socket {} behind",
                self.control.display()
            );
        }
        let link = Command::new("ip")
            .args(["-n", &self.ns, "link", "show", &self.tun])
            .output()?;
        if link.status.success() {
            bail!(
                "esparto left its TUN device {} behind in {}",
                self.tun,
                self.ns
            );
        }
        let left = esparto_rules(&self.ns)?;
        if !left.is_empty() {
            bail!("esparto left policy rules behind in {}:\n{}", self.ns, left.join("\n"));
        }
        Ok(())
    }
}

/// The policy rules of both families in namespace `ns` that carry
/// Esparto's protocol number (`ip -N rule`, one line each).
pub fn esparto_rules(ns: &str) -> Result<Vec<String>> {
    let tag = format!("proto {}", esparto_io::routing::PROTOCOL);
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        let o = Command::new("ip").args(["-N", "-n", ns, fam, "rule"]).output()?;
        if !o.status.success() {
            bail!("ip -n {ns} {fam} rule: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
        out.extend(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w.join(" ") == tag))
                .map(str::to_string),
        );
    }
    Ok(out)
}

/// How a daemon run by [`run_to_exit`] ended.
#[derive(Debug)]
pub struct Exited {
    /// Its exit status (`None`: still running at the deadline, killed).
    pub status: Option<std::process::ExitStatus>,
    /// Everything it logged (stdout and stderr).
    pub log: String,
    /// How long it ran.
    pub ran: Duration,
}

/// Runs `BIN run` with `cfg` (and a control socket of its own) in `ns`,
/// with extra environment variables, until it exits or `timeout` passes
/// (then it is killed). For daemons that are expected to stop by
/// themselves: refused at start, or failing.
pub fn run_to_exit(
    ns: &Netns,
    bin: &Path,
    cfg: &EspartoConfig,
    env: &[(&str, &str)],
    timeout: Duration,
) -> Result<Exited> {
    let dir = WorkDir::new(&format!("esparto-once-{}", ns.name()))?;
    let control = dir.join("esparto.sock");
    let config = dir.join("esparto.toml");
    std::fs::write(&config, cfg.to_toml(&control))?;
    let log_path = dir.join("esparto.log");
    let log = std::fs::File::create(&log_path)?;
    let started = std::time::Instant::now();
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--control")
        .arg(&control)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {}", bin.display()))?;
    let status = wait_child(&mut child, timeout)?;
    let ran = started.elapsed();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    Ok(Exited { status, log, ran })
}

impl Drop for EspartoGateway {
    fn drop(&mut self) {
        if self.child.is_some() && self.shutdown().is_err() {
            self.dir.keep();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn shifted_cpus_keep_a_flows_ends_apart() {
        assert_eq!(shifted_cpus(&[0, 1]), vec![1, 0]);
        assert_eq!(shifted_cpus(&[2, 5, 7]), vec![5, 7, 2]);
        assert_eq!(shifted_cpus(&[3]), vec![3]);
        assert!(shifted_cpus(&[]).is_empty());
        // With two or more CPUs, worker k's CPU differs at the two ends,
        // also when there are more workers than CPUs (k mod n).
        for n in 2..9 {
            let west: Vec<usize> = (0..n).collect();
            let east = shifted_cpus(&west);
            for k in 0..3 * n {
                assert_ne!(west[k % n], east[k % n], "{n} CPUs, worker {k}");
            }
        }
    }

    #[test]
    fn static_config_shape() {
        let pair = StaticPair {
            in_spi: 0xc000_0101,
            out_spi: 0xc000_0201,
            in_key: "aa".repeat(36),
            out_key: "bb".repeat(36),
        };
        let c = EspartoConfig::site(Node::GwWest, Keying::Static(vec![pair.clone()])).unwrap();
        let t = c.to_toml(Path::new("/tmp/x/esparto.sock"));
        for want in [
            "[daemon]\n",
            "control = \"/tmp/x/esparto.sock\"",
            "state_dir = \"/tmp/x/state\"",
            "[connections.site]\n",
            "local_addrs = [\"192.0.2.1\"]",
            "remote_addrs = [\"192.0.2.2\"]",
            "[connections.site.children.lan]\n",
            "local_ts = [\"10.1.0.0/24\", \"fd00:1::/64\"]",
            "esp_proposals = [\"aes256gcm16\"]",
            "[[connections.site.children.lan.static_sas]]\nin_spi = 0xc0000101\nout_spi = 0xc0000201",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
        assert!(t.contains(&format!("in_key = \"0x{}\"", "aa".repeat(36))));
        let m = pair.mirrored();
        assert_eq!(
            (m.in_spi, m.out_key.as_str()),
            (0xc000_0201, pair.in_key.as_str())
        );
        assert_eq!(m.mirrored(), pair);
    }

    #[test]
    fn ike_config_shape_and_quoting() {
        let k = Keying::Ike {
            proposal: "aes256gcm16-prfsha256-x25519".into(),
            local_id: "east".into(),
            remote_id: "west".into(),
            psk: "a \"psk\" \\ with\nstuff".into(),
            initiator: false,
        };
        let c = EspartoConfig::site(Node::GwEast, k).unwrap();
        let t = c.to_toml(Path::new("/s"));
        assert!(
            t.contains("proposals = [\"aes256gcm16-prfsha256-x25519\"]"),
            "{t}"
        );
        assert!(t.contains("remote.id = \"west\""));
        assert!(t.contains("start_action = \"none\""));
        assert!(
            t.contains(r#"secret = "a \"psk\" \\ with\u000astuff""#),
            "{t}"
        );
        assert!(EspartoConfig::site(Node::HostEast, Keying::Static(vec![])).is_err());
    }
}
