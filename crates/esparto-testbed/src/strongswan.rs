//! A strongSwan gateway in a namespace: charon with `kernel-libipsec`
//! (userspace ESP: the kernel here has no ESP transform), driven with
//! `swanctl` over its vici socket.
//!
//! Each instance gets a [`WorkDir`] holding `strongswan.conf`,
//! `swanctl/swanctl.conf`, the vici socket, `charon.log` and a `run/`
//! directory. charon's pid file is fixed at `/var/run/charon.pid`, so charon
//! is started as
//!
//! ```text
//! ip netns exec NS sh -c "mount --bind DIR/run /run && exec env STRONGSWAN_CONF=… charon"
//! ```
//!
//! `ip netns exec` already gives the command a mount namespace of its own
//! (slave of ours, so the bind mount does not leak back), and every `exec`
//! keeps the pid: the child we spawn *is* charon, which is the pid to signal
//! and to account CPU to. Several instances run side by side this way.
//!
//! What charon 5.9.8 with `kernel-libipsec` needs to run here: the plugin
//! `load` list puts `kernel-libipsec` before `kernel-netlink` (else charon
//! tries kernel XFRM, errno 38) and lists `kdf`; `mobike = no`; libipsec
//! always UDP-encapsulates ESP (RFC 3948) on port 4500; routes to the remote
//! selectors go into table 220 via the TUN device `ipsec0` (MTU 1400) with a
//! source address from the local selectors, so the gateway needs an address
//! inside its local traffic selector (in the standard topology its LAN
//! address is).
//!
//! The same harness runs strongSwan against Esparto in the interop tests:
//! every parameter that matters to a peer (addresses, ports, identities,
//! PSK, proposals, selectors, role, rekey times, `encap`, DPD) is a field
//! of [`SwanConfig`].

use std::fmt::Write as _;
use std::net::IpAddr;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use esparto_netns::Netns;

use super::topology::{Net, Node, Topology};
use super::{CHARON, Family, WorkDir, sigterm, wait_child, wait_for};

/// The plugin list that works with kernel-libipsec (see the module essay).
/// `pkcs8`, `constraints` and `revocation` are for certificate
/// authentication (PKCS#8 keys, basic/name constraints, CRL checks).
pub const PLUGINS: &str = "random nonce openssl aes sha1 sha2 hmac kdf gcm chapoly curve25519 gmp pem pkcs1 pkcs8 x509 pubkey constraints revocation kernel-libipsec kernel-netlink socket-default vici";

/// Certificate authentication for one side: files (PEM) and what to
/// trust. Used by both [`SwanConfig`] and the Esparto test configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// Our certificate.
    pub cert: std::path::PathBuf,
    /// Intermediate CA certificates above it (sent along).
    pub intermediates: Vec<std::path::PathBuf>,
    /// Our PKCS#8 private key.
    pub key: std::path::PathBuf,
    /// The CA we accept for the peer.
    pub cacert: std::path::PathBuf,
    /// A CRL to check the peer against.
    pub crl: Option<std::path::PathBuf>,
}

/// One strongSwan gateway's configuration: one IKE connection with one child.
#[derive(Debug, Clone, PartialEq)]
pub struct SwanConfig {
    /// Connection name (`connections.NAME`).
    pub name: String,
    /// Child name (`children.NAME`).
    pub child: String,
    /// Our outer address.
    pub local_addr: IpAddr,
    /// The peer's outer address.
    pub remote_addr: IpAddr,
    /// Our IKE port (`charon.port`, default 500).
    pub local_port: u16,
    /// Our NAT-T port (`charon.port_nat_t`, default 4500).
    pub local_port_nat_t: u16,
    /// The peer's IKE port (`remote_port`, default 500).
    pub remote_port: u16,
    /// Our identity (`local.id`), e.g. `@west`.
    pub local_id: String,
    /// The peer's identity (`remote.id`).
    pub remote_id: String,
    /// The pre-shared key.
    pub psk: String,
    /// IKE proposal, strongSwan syntax (`aes256gcm16-prfsha256-x25519`).
    pub ike_proposal: String,
    /// ESP proposal (`aes256gcm16`).
    pub esp_proposal: String,
    /// Local traffic selectors.
    pub local_ts: Vec<String>,
    /// Remote traffic selectors.
    pub remote_ts: Vec<String>,
    /// Whether this side initiates (see [`Charon::initiate`]); a responder
    /// waits.
    pub initiator: bool,
    /// IKE SA rekey time (`rekey_time`, e.g. `"4h"`; `None`: strongSwan's default).
    pub ike_rekey_time: Option<String>,
    /// Child SA rekey time (`children.X.rekey_time`).
    pub child_rekey_time: Option<String>,
    /// Force UDP encapsulation (`encap = yes`); libipsec encapsulates anyway.
    pub encap: bool,
    /// DPD interval (`dpd_delay`, e.g. `"30s"`).
    pub dpd_delay: Option<String>,
    /// charon's log levels for the `ike`, `chd`, `cfg`, `net`, `knl` groups.
    pub log_level: i8,
    /// Authenticate with certificates instead of the PSK (both ways).
    pub certs: Option<CertFiles>,
    /// IKE fragmentation (`fragmentation`: `yes`, `accept`, `no`; `None`:
    /// strongSwan's default, `yes`).
    pub fragmentation: Option<String>,
    /// MOBIKE (`mobike = yes`, strongSwan's default; off unless asked):
    /// then `local_addrs = %any`, so charon may move to another address.
    pub mobike: bool,
}

impl SwanConfig {
    /// The standard topology's gateway on `side` (west or east), talking
    /// to the other gateway over IPv4 transit, protecting both LANs (IPv4
    /// and IPv6) with PSK and the given proposals. West initiates.
    pub fn site(side: Node, psk: &str, ike: &str, esp: &str) -> Result<Self> {
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
        let id = |n: Node| if n == Node::GwWest { "@west" } else { "@east" };
        Ok(Self {
            name: "site".into(),
            child: "lan".into(),
            local_addr: Topology::addr(side, Net::Transit, Family::V4),
            remote_addr: Topology::addr(other, Net::Transit, Family::V4),
            local_port: 500,
            local_port_nat_t: 4500,
            remote_port: 500,
            local_id: id(side).into(),
            remote_id: id(other).into(),
            psk: psk.into(),
            ike_proposal: ike.into(),
            esp_proposal: esp.into(),
            local_ts: lts.map(String::from).to_vec(),
            remote_ts: rts.map(String::from).to_vec(),
            initiator: side == Node::GwWest,
            ike_rekey_time: None,
            child_rekey_time: None,
            encap: false,
            dpd_delay: None,
            log_level: 1,
            certs: None,
            fragmentation: None,
            mobike: false,
        })
    }

    /// `strongswan.conf` for an instance living in `dir`.
    pub fn strongswan_conf(&self, dir: &WorkDir) -> String {
        let l = self.log_level;
        format!(
            "charon {{\n  load = {PLUGINS}\n  port = {}\n  port_nat_t = {}\n  \
             install_routes = yes\n  routing_table = 220\n  routing_table_prio = 220\n  \
             filelog {{\n    tb {{\n      path = {}\n      time_format = %H:%M:%S\n      default = 0\n      \
             ike = {l}\n      chd = {l}\n      cfg = {l}\n      net = {l}\n      knl = {l}\n      lib = {l}\n      \
             append = no\n      flush_line = yes\n    }}\n  }}\n  \
             syslog {{\n    daemon {{\n      default = -1\n    }}\n  }}\n  \
             plugins {{\n    vici {{\n      socket = unix://{}\n    }}\n  }}\n}}\n",
            self.local_port,
            self.local_port_nat_t,
            dir.join("charon.log").display(),
            dir.join("charon.vici").display(),
        )
    }

    /// `swanctl.conf`.
    pub fn swanctl_conf(&self) -> String {
        let mut c = String::new();
        let _ = writeln!(c, "connections {{\n  {} {{", self.name);
        let local = if self.mobike { "%any".to_string() } else { self.local_addr.to_string() };
        let _ = writeln!(
            c,
            "    version = 2\n    local_addrs = {local}\n    remote_addrs = {}",
            self.remote_addr
        );
        let _ = writeln!(
            c,
            "    remote_port = {}\n    proposals = {}\n    mobike = {}",
            self.remote_port,
            self.ike_proposal,
            if self.mobike { "yes" } else { "no" }
        );
        let _ = writeln!(c, "    encap = {}", if self.encap { "yes" } else { "no" });
        if let Some(t) = &self.ike_rekey_time {
            let _ = writeln!(c, "    rekey_time = {t}");
        }
        if let Some(d) = &self.dpd_delay {
            let _ = writeln!(c, "    dpd_delay = {d}");
        }
        if let Some(f) = &self.fragmentation {
            let _ = writeln!(c, "    fragmentation = {f}");
        }
        if self.certs.is_some() {
            let _ = writeln!(
                c,
                "    local {{\n      auth = pubkey\n      certs = local.crt\n      id = {}\n    }}",
                self.local_id
            );
            let _ = writeln!(
                c,
                "    remote {{\n      auth = pubkey\n      cacerts = ca.crt\n      id = {}\n    }}",
                self.remote_id
            );
        } else {
            let _ = writeln!(
                c,
                "    local {{\n      auth = psk\n      id = {}\n    }}",
                self.local_id
            );
            let _ = writeln!(
                c,
                "    remote {{\n      auth = psk\n      id = {}\n    }}",
                self.remote_id
            );
        }
        let _ = writeln!(c, "    children {{\n      {} {{", self.child);
        let _ = writeln!(
            c,
            "        local_ts = {}\n        remote_ts = {}",
            self.local_ts.join(","),
            self.remote_ts.join(",")
        );
        let _ = writeln!(
            c,
            "        esp_proposals = {}\n        mode = tunnel",
            self.esp_proposal
        );
        if let Some(t) = &self.child_rekey_time {
            let _ = writeln!(c, "        rekey_time = {t}");
        }
        let _ = writeln!(c, "        start_action = none\n      }}\n    }}\n  }}\n}}");
        if self.certs.is_some() {
            return c;
        }
        // A quoted string; swanctl.conf escapes '"' and '\' with '\'.
        let psk = self.psk.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            c,
            "secrets {{\n  ike-{} {{\n    id-1 = {}\n    id-2 = {}\n    secret = \"{psk}\"\n  }}\n}}",
            self.name, self.local_id, self.remote_id
        );
        c
    }
}

/// Copy certificate files where `swanctl --load-all` finds them
/// (`x509/`, `x509ca/`, `private/`, `x509crl/` under SWANCTL_DIR),
/// replacing what an earlier configuration put there.
fn install_certs(dir: &WorkDir, certs: Option<&CertFiles>) -> Result<()> {
    for sub in ["x509", "x509ca", "private", "x509crl"] {
        let d = dir.join("swanctl").join(sub);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d)?;
    }
    let Some(c) = certs else { return Ok(()) };
    let sw = dir.join("swanctl");
    std::fs::copy(&c.cert, sw.join("x509/local.crt")).context("copying the certificate")?;
    std::fs::copy(&c.cacert, sw.join("x509ca/ca.crt")).context("copying the CA")?;
    for (i, p) in c.intermediates.iter().enumerate() {
        std::fs::copy(p, sw.join(format!("x509ca/intermediate{i}.crt")))?;
    }
    std::fs::copy(&c.key, sw.join("private/local.key")).context("copying the key")?;
    if let Some(crl) = &c.crl {
        std::fs::copy(crl, sw.join("x509crl/ca.crl"))?;
    }
    Ok(())
}

/// A running charon in a namespace.
#[derive(Debug)]
pub struct Charon {
    cfg: SwanConfig,
    ns: String,
    dir: WorkDir,
    child: Option<Child>,
    pid: u32,
}

impl Charon {
    /// Write the configuration, start charon in `ns`, and load it with
    /// `swanctl --load-all`. On failure the work directory is kept.
    pub fn start(ns: &Netns, cfg: SwanConfig) -> Result<Self> {
        let dir = WorkDir::new(&format!("charon-{}", ns.name()))?;
        let conf = cfg.swanctl_conf();
        Self::start_in(ns, cfg, dir, &conf)
    }

    /// [`start`](Self::start) with several connections: the first
    /// configuration's daemon settings, every configuration's connection
    /// and secret (their names must differ). Helpers that act on "the"
    /// connection act on the first.
    pub fn start_many(ns: &Netns, cfgs: Vec<SwanConfig>) -> Result<Self> {
        let dir = WorkDir::new(&format!("charon-{}", ns.name()))?;
        // swanctl.conf merges sections of the same name.
        let conf: String = cfgs.iter().map(SwanConfig::swanctl_conf).collect();
        let first = cfgs.into_iter().next().context("no configuration")?;
        Self::start_in(ns, first, dir, &conf)
    }

    fn start_in(ns: &Netns, cfg: SwanConfig, dir: WorkDir, swanctl_conf: &str) -> Result<Self> {
        std::fs::create_dir_all(dir.join("run"))?;
        std::fs::create_dir_all(dir.join("swanctl"))?;
        std::fs::write(dir.join("strongswan.conf"), cfg.strongswan_conf(&dir))?;
        std::fs::write(dir.join("swanctl/swanctl.conf"), swanctl_conf)?;
        install_certs(&dir, cfg.certs.as_ref())?;
        let out = std::fs::File::create(dir.join("charon.out"))?;
        let script = format!(
            "mount --bind '{}' /run && exec env STRONGSWAN_CONF='{}' {CHARON}",
            dir.join("run").display(),
            dir.join("strongswan.conf").display()
        );
        let child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("spawning charon")?;
        let pid = child.id();
        let mut c = Self {
            cfg,
            ns: ns.name().to_string(),
            dir,
            child: Some(child),
            pid,
        };
        let up = c
            .wait_started()
            .and_then(|()| c.swanctl(&["--load-all", "--noprompt"]).map(|_| ()));
        if let Err(e) = up {
            c.dir.keep();
            bail!("{e:#} (charon logs kept in {})", c.dir.path().display());
        }
        Ok(c)
    }

    fn wait_started(&mut self) -> Result<()> {
        let vici = self.dir.join("charon.vici");
        let pidfile = self.dir.join("run/charon.pid");
        let child = self.child.as_mut().context("charon not running")?;
        wait_for(
            "charon's vici socket",
            Duration::from_secs(10),
            Duration::from_millis(50),
            || {
                if let Some(st) = child.try_wait()? {
                    bail!("charon exited at start ({st})");
                }
                Ok((vici.exists() && pidfile.exists()).then_some(()))
            },
        )?;
        let written: u32 = std::fs::read_to_string(&pidfile)?
            .trim()
            .parse()
            .context("charon.pid")?;
        if written != self.pid {
            bail!("charon wrote pid {written}, but we started {}", self.pid);
        }
        Ok(())
    }

    /// charon's pid (for CPU accounting).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The configuration it runs.
    pub fn config(&self) -> &SwanConfig {
        &self.cfg
    }

    /// The work directory (logs: `charon.log`, `charon.out`).
    pub fn dir(&self) -> &WorkDir {
        &self.dir
    }

    /// Run `swanctl ARGS` against this charon.
    pub fn swanctl(&self, args: &[&str]) -> Result<Output> {
        let out = Command::new("swanctl")
            .args(args)
            .arg("--uri")
            .arg(format!("unix://{}", self.dir.join("charon.vici").display()))
            .env("SWANCTL_DIR", self.dir.join("swanctl"))
            .env("STRONGSWAN_CONF", self.dir.join("strongswan.conf"))
            .output()
            .context("running swanctl")?;
        if !out.status.success() {
            bail!(
                "swanctl {} failed in {}: {}{}",
                args.join(" "),
                self.ns,
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out)
    }

    /// Replace the configuration of the running charon (`swanctl
    /// --load-all`: connections of the same name are replaced, others
    /// unloaded); existing SAs are terminated first.
    pub fn reload(&mut self, cfg: SwanConfig) -> Result<()> {
        if self.child_installed().unwrap_or(false) {
            let _ = self.terminate(Duration::from_secs(5));
        }
        std::fs::write(self.dir.join("swanctl/swanctl.conf"), cfg.swanctl_conf())?;
        install_certs(&self.dir, cfg.certs.as_ref())?;
        self.cfg = cfg;
        self.swanctl(&["--load-all", "--noprompt"]).map(|_| ())
    }

    /// Whether any IKE SA of the configured connection exists.
    pub fn has_ike_sa(&self) -> Result<bool> {
        let name = format!("{}: #", self.cfg.name);
        Ok(self.list_sas()?.lines().any(|l| l.starts_with(&name)))
    }

    /// `swanctl --initiate --child CHILD`: returns once IKE_AUTH completed.
    /// A failure keeps charon's logs for the report.
    pub fn initiate(&self, timeout: Duration) -> Result<()> {
        self.initiate_may_fail(timeout).inspect_err(|_| self.dir.keep())
    }

    /// [`Charon::initiate`] for a negotiation the caller expects the peer
    /// to refuse: a failure is the answer, not a fault, and keeps no logs.
    pub fn initiate_may_fail(&self, timeout: Duration) -> Result<()> {
        let t = timeout.as_secs().max(1).to_string();
        self.swanctl(&["--initiate", "--child", &self.cfg.child, "--timeout", &t])
            .map(|_| ())
    }

    /// `swanctl --list-sas` as text.
    pub fn list_sas(&self) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.swanctl(&["--list-sas"])?.stdout).into_owned())
    }

    /// Whether the child SA is INSTALLED (a line `  CHILD: #n, reqid r, INSTALLED, …`).
    pub fn child_installed(&self) -> Result<bool> {
        Ok(child_installed(&self.list_sas()?, &self.cfg.child))
    }

    /// Wait until the child SA is INSTALLED.
    pub fn wait_child_installed(&self, timeout: Duration) -> Result<()> {
        wait_for(
            "the CHILD_SA to be INSTALLED",
            timeout,
            Duration::from_millis(100),
            || Ok(self.child_installed()?.then_some(())),
        )
        .inspect_err(|_| self.dir.keep())
    }

    /// `swanctl --terminate --ike NAME`.
    pub fn terminate(&self, timeout: Duration) -> Result<()> {
        let t = timeout.as_secs().max(1).to_string();
        self.swanctl(&["--terminate", "--ike", &self.cfg.name, "--timeout", &t])
            .map(|_| ())
    }

    /// Stop charon (SIGTERM, wait up to 10 s) and remove its files unless
    /// they were kept. Errors if it had to be killed or exited with failure.
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
        if child.try_wait()?.is_some() {
            bail!(
                "charon in {} had already exited (logs in {})",
                self.ns,
                self.dir.path().display()
            );
        }
        sigterm(self.pid)?;
        match wait_child(&mut child, Duration::from_secs(10))? {
            // charon exits 0 on SIGTERM.
            Some(st) if st.success() => Ok(()),
            Some(st) => bail!(
                "charon in {} exited with {st} (logs in {})",
                self.ns,
                self.dir.path().display()
            ),
            None => bail!("charon in {} ignored SIGTERM and was killed", self.ns),
        }
    }
}

impl Drop for Charon {
    fn drop(&mut self) {
        if self.child.is_some() && self.shutdown().is_err() {
            self.dir.keep();
        }
    }
}

/// Whether `list-sas` text shows `child` INSTALLED.
pub fn child_installed(list_sas: &str, child: &str) -> bool {
    let prefix = format!("{child}: #");
    list_sas
        .lines()
        .any(|l| l.trim_start().starts_with(&prefix) && l.contains("INSTALLED"))
}

/// Inner bytes `(in, out)` of the first child SA in `list-sas` text (the
/// lines `    in  SPI, N bytes, P packets, …` and `    out SPI, …`).
pub fn child_bytes(list_sas: &str) -> Option<(u64, u64)> {
    let bytes = |dir: &str| -> Option<u64> {
        let line = list_sas.lines().map(str::trim_start).find(|l| {
            l.strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with(' '))
        })?;
        let field = line.split(',').nth(1)?.trim();
        field.strip_suffix(" bytes")?.parse().ok()
    };
    Some((bytes("in")?, bytes("out")?))
}

/// Two strongSwan gateways on the standard topology with the tunnel up.
#[derive(Debug)]
pub struct SwanPair {
    /// The west gateway (initiator).
    pub west: Charon,
    /// The east gateway (responder).
    pub east: Charon,
}

impl SwanPair {
    /// Start both, initiate from west, and wait until both sides have the
    /// child INSTALLED.
    pub fn up(topo: &Topology, psk: &str, ike: &str, esp: &str) -> Result<Self> {
        let east = Charon::start(
            topo.ns(Node::GwEast),
            SwanConfig::site(Node::GwEast, psk, ike, esp)?,
        )?;
        let west = Charon::start(
            topo.ns(Node::GwWest),
            SwanConfig::site(Node::GwWest, psk, ike, esp)?,
        )?;
        let pair = Self { west, east };
        pair.west.initiate(Duration::from_secs(15))?;
        pair.west.wait_child_installed(Duration::from_secs(10))?;
        pair.east.wait_child_installed(Duration::from_secs(10))?;
        // libipsec's TUN gets the kernel's 500-packet ring; give it the
        // depth Esparto's has by default, so a comparison measures the
        // gateways and not their queue lengths.
        let len = ::esparto::config::DEFAULT_TUN_QUEUE_LEN.to_string();
        for node in [Node::GwWest, Node::GwEast] {
            topo.ns(node)
                .ip(&["link", "set", "ipsec0", "txqueuelen", &len])
                .context("setting ipsec0's txqueuelen")?;
        }
        Ok(pair)
    }

    /// `(label, pid)` of both charons, for [`super::cpu::Meter`].
    pub fn pids(&self) -> [(&'static str, u32); 2] {
        [
            ("gw-west charon", self.west.pid()),
            ("gw-east charon", self.east.pid()),
        ]
    }

    /// Keep both work directories (after a failure).
    pub fn keep_logs(&self) {
        self.west.dir().keep();
        self.east.dir().keep();
    }

    /// Terminate the IKE SA and stop both.
    pub fn down(self) -> Result<()> {
        let t = self.west.terminate(Duration::from_secs(5));
        let w = self.west.stop();
        let e = self.east.stop();
        t.and(w).and(e)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn configs_have_what_libipsec_needs() {
        let c = SwanConfig::site(
            Node::GwWest,
            "a \"quoted\" secret",
            "aes256gcm16-prfsha256-x25519",
            "aes256gcm16",
        )
        .unwrap();
        let s = c.swanctl_conf();
        for want in [
            "local_addrs = 192.0.2.1",
            "remote_addrs = 192.0.2.2",
            "proposals = aes256gcm16-prfsha256-x25519",
            "esp_proposals = aes256gcm16",
            "mobike = no",
            "local_ts = 10.1.0.0/24,fd00:1::/64",
            "remote_ts = 10.2.0.0/24,fd00:2::/64",
            "id = @west",
            "id = @east",
            r#"secret = "a \"quoted\" secret""#,
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        assert!(c.initiator);
        let e = SwanConfig::site(Node::GwEast, "k", "x", "y").unwrap();
        assert!(!e.initiator && e.local_addr.to_string() == "192.0.2.2");
        assert!(SwanConfig::site(Node::HostWest, "k", "x", "y").is_err());
        let dir = WorkDir::new("unit-swan").unwrap();
        let sc = c.strongswan_conf(&dir);
        let libipsec = sc.find("kernel-libipsec").unwrap();
        assert!(
            libipsec < sc.find("kernel-netlink").unwrap(),
            "kernel-libipsec must load first"
        );
        assert!(sc.contains(" kdf "));
        assert!(sc.contains(&format!(
            "socket = unix://{}/charon.vici",
            dir.path().display()
        )));
    }

    #[test]
    fn list_sas_parsing() {
        let text = "site: #1, ESTABLISHED, IKEv2, 1f7c0d6e3b1a2c4d_i* 9a8b7c6d5e4f3a2b_r\n  \
                    local  'west' @ 192.0.2.1[4500]\n  lan: #1, reqid 1, INSTALLED, TUNNEL-in-UDP, ESP:AES_GCM_16-256\n";
        assert!(child_installed(text, "lan"));
        assert!(!child_installed(text, "other"));
        assert!(!child_installed(
            "  lan: #1, reqid 1, REKEYING, TUNNEL\n",
            "lan"
        ));
        let counters = "    installed 3s ago, rekeying in 3358s\n    in  dc872161, 133332081 bytes, 95267 packets,     0s ago\n\
                        \x20   out 330f666a, 1034861 bytes, 17352 packets,     0s ago\n    local  10.2.0.0/24\n";
        assert_eq!(child_bytes(counters), Some((133_332_081, 1_034_861)));
        assert_eq!(child_bytes("    in  dc872161, 0 bytes, 0 packets\n"), None);
    }
}
