//! The capabilities `esparto run` needs, checked before anything is
//! touched.
//!
//! Without `CAP_NET_ADMIN` the TUN device cannot be created; without
//! `CAP_NET_BIND_SERVICE` a port below `net.ipv4.ip_unprivileged_port_start`
//! (IKE's 500) cannot be bound. Found out half-way, either would surface as
//! a failed `TUNSETIFF` or `bind` after the lock files and the control
//! socket were made; found out first, the message names the capability and
//! what needs it, and nothing has been done. `CAP_BPF` is not required:
//! without it (where unprivileged eBPF is disabled) the TUN steering
//! program is refused and the daemon runs on with the kernel's flow
//! learning, and says so with the reason.

use anyhow::{Context, Result};
use esparto_io::privs::{self, Capability};

use crate::config::Config;

/// Per network namespace, the lowest port that needs no capability to
/// bind (it covers IPv6 too).
const UNPRIVILEGED_PORT_START: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
/// The kernel's default for it.
const DEFAULT_UNPRIVILEGED_PORT_START: u32 = 1024;

/// A capability the daemon needs at start, and what for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    pub(crate) cap: Capability,
    pub(crate) why: String,
}

/// What `config` needs at start, given the namespace's lowest unprivileged
/// port.
pub(crate) fn needed(config: &Config, unprivileged_port_start: u32) -> Vec<Need> {
    let d = &config.daemon;
    let mut needs = vec![Need {
        cap: Capability::NetAdmin,
        why: format!("to create the TUN device {} and set routes into it", d.tun),
    }];
    let mut ports = vec![("port", d.port)];
    if config.connections.iter().any(|c| c.ike.is_some()) {
        ports.push(("ike_port", d.ike_port));
    }
    let low: Vec<String> = ports
        .iter()
        .filter(|(_, p)| u32::from(*p) < unprivileged_port_start)
        .map(|(key, p)| format!("{key} = {p}"))
        .collect();
    if !low.is_empty() {
        needs.push(Need {
            cap: Capability::NetBindService,
            why: format!(
                "to bind UDP ports below net.ipv4.ip_unprivileged_port_start = {unprivileged_port_start}: {}",
                low.join(", ")
            ),
        });
    }
    needs
}

/// The refusal for the capabilities in `missing`.
pub(crate) fn refusal(missing: &[Need]) -> String {
    let list: Vec<String> = missing.iter().map(|n| format!("{} ({})", n.cap.name(), n.why)).collect();
    format!(
        "esparto run needs {}, which this process does not have; nothing was set up. Run it as root, or grant {} \
         (the systemd unit esparto.service does: CapabilityBoundingSet=)",
        list.join(" and "),
        if missing.len() == 1 { "it" } else { "them" }
    )
}

/// A start refused before anything was set up, for a reason that trying
/// again cannot cure: `esparto run` exits with [`EXIT_REFUSED`], which the
/// systemd unit does not restart on (`RestartPreventExitStatus=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// `esparto run`'s exit status when its configuration is invalid or it
/// lacks a capability the configuration needs: `EX_CONFIG` of
/// `sysexits.h`, as systemd's documentation of exit statuses lists it.
pub const EXIT_REFUSED: u8 = 78;

/// Refuses to start unless the calling thread holds every capability
/// `config` needs (see the module docs).
pub(crate) fn check(config: &Config) -> Result<()> {
    let start = std::fs::read_to_string(UNPRIVILEGED_PORT_START)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_UNPRIVILEGED_PORT_START);
    let mut missing = Vec::new();
    for need in needed(config, start) {
        if !privs::has(need.cap).context("reading the process's capabilities")? {
            missing.push(need);
        }
    }
    if !missing.is_empty() {
        return Err(Refused(refusal(&missing)).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const STATIC: &str = r#"
[daemon]
tun = "vpn7"
port = 4500
[connections.s]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
[connections.s.children.c]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]
[[connections.s.children.c.static_sas]]
in_spi = 0x1000
out_spi = 0x2000
in_key = "0x1111111111111111111111111111111111111111111111111111111111111111aabbccdd"
out_key = "0x2222222222222222222222222222222222222222222222222222222222222222aabbccdd"
"#;

    const IKE: &str = r#"
[connections.s]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
local.auth = "psk"
local.id = "@w"
remote.auth = "psk"
remote.id = "@e"
[connections.s.children.c]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
[secrets.a]
ids = ["@w", "@e"]
secret = "a secret of more than twenty characters"
"#;

    fn caps(needs: &[Need]) -> Vec<Capability> {
        needs.iter().map(|n| n.cap).collect()
    }

    #[test]
    fn a_static_gateway_on_a_high_port_needs_net_admin_alone() {
        let c = crate::config::parse_str(STATIC, "w.toml").unwrap();
        let n = needed(&c, 1024);
        assert_eq!(caps(&n), [Capability::NetAdmin]);
        assert_eq!(n[0].why, "to create the TUN device vpn7 and set routes into it");
        // Ports below the namespace's limit need CAP_NET_BIND_SERVICE.
        let n = needed(&c, 5000);
        assert_eq!(caps(&n), [Capability::NetAdmin, Capability::NetBindService]);
        assert_eq!(n[1].why, "to bind UDP ports below net.ipv4.ip_unprivileged_port_start = 5000: port = 4500");
    }

    #[test]
    fn ike_binds_port_500() {
        let c = crate::config::parse_str(IKE, "w.toml").unwrap();
        let n = needed(&c, 1024);
        assert_eq!(caps(&n), [Capability::NetAdmin, Capability::NetBindService]);
        assert_eq!(n[1].why, "to bind UDP ports below net.ipv4.ip_unprivileged_port_start = 1024: ike_port = 500");
        assert_eq!(caps(&needed(&c, 0)), [Capability::NetAdmin]);
    }

    #[test]
    fn the_refusal_names_each_capability_and_its_use() {
        let c = crate::config::parse_str(IKE, "w.toml").unwrap();
        let msg = refusal(&needed(&c, 1024));
        assert_eq!(
            msg,
            "esparto run needs CAP_NET_ADMIN (to create the TUN device esparto0 and set routes into it) and \
             CAP_NET_BIND_SERVICE (to bind UDP ports below net.ipv4.ip_unprivileged_port_start = 1024: ike_port = 500), \
             which this process does not have; nothing was set up. Run it as root, or grant them \
             (the systemd unit esparto.service does: CapabilityBoundingSet=)"
        );
    }
}
