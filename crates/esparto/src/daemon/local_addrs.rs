//! Local addresses that come and go: a WAN address that arrives after the
//! daemon (PPPoE, DHCP) or leaves while it runs.
//!
//! The daemon binds the one local address every connection names (else
//! the wildcard). If the host does not have it at start, the sockets are
//! bound with `IP_FREEBIND`, so the start does not fail: IKE and ESP from
//! it work as soon as the address is there. The kernel's address events
//! (rtnetlink, both families) are followed for every address a connection
//! names in `local_addrs`, and the daemon logs each one arriving and
//! leaving, with the connections that use it. Any address that leaves
//! ends the IKE SAs that used it (`Endpoint::local_address_gone`: without
//! MOBIKE they cannot move), and `dpd_action = restart` brings them up
//! again from the address the host has then.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use esparto_io::netlink::{AddressChange, AddressWatch, Rtnetlink};
use tracing::{info, warn};

use crate::config::Config;

/// The host's addresses now, if rtnetlink answers.
fn host_addresses() -> Option<BTreeSet<IpAddr>> {
    let mut nl = Rtnetlink::open().ok()?;
    nl.addresses().ok().map(|v| v.into_iter().collect())
}

/// Should a socket for `addr` be bound with `IP_FREEBIND`? Yes when it is
/// a specific address the host does not have (yet), which is then logged
/// for `what` ("IKE", "ESP-in-UDP").
pub(super) fn freebind(addr: IpAddr, what: &str) -> bool {
    if addr.is_unspecified() {
        return false;
    }
    match host_addresses() {
        Some(host) if !host.contains(&addr) => {
            warn!(
                local = %addr, sockets = what,
                "the local address is not on this host yet: bound anyway (IP_FREEBIND); IKE and ESP from it work once it is"
            );
            true
        }
        _ => false,
    }
}

/// The configured local addresses, followed as they come and go.
pub(super) struct LocalAddrs {
    watch: Option<AddressWatch>,
    /// Those of the wanted addresses the host has.
    present: BTreeSet<IpAddr>,
}

/// Every address a connection names in `local_addrs`, with the names of
/// the connections naming it.
fn wanted(cfg: &Config) -> Vec<(IpAddr, Vec<&str>)> {
    let mut v: Vec<(IpAddr, Vec<&str>)> = Vec::new();
    for c in &cfg.connections {
        for a in &c.local_addrs {
            match v.iter_mut().find(|(x, _)| x == a) {
                Some((_, names)) => names.push(&c.name),
                None => v.push((*a, vec![&c.name])),
            }
        }
    }
    v
}

impl LocalAddrs {
    /// Subscribes to the kernel's address events (a failure to is logged:
    /// the daemon runs on without them) and notes which configured
    /// addresses the host has.
    pub(super) fn new(cfg: &Config) -> Self {
        let watch = AddressWatch::open().map_err(|e| warn!(error = %e, "cannot follow the host's addresses (rtnetlink)")).ok();
        let host = host_addresses().unwrap_or_default();
        let present = wanted(cfg).into_iter().map(|(a, _)| a).filter(|a| host.contains(a)).collect();
        Self { watch, present }
    }

    /// The descriptor to poll, if events are followed.
    pub(super) fn fd(&self) -> Option<RawFd> {
        self.watch.as_ref().map(|w| w.as_fd().as_raw_fd())
    }

    /// Reads the events and logs what they mean for `cfg`'s connections.
    /// Returns every address that left the host (configured or not: a
    /// connection without `local_addrs` uses whatever the route gave).
    pub(super) fn on_readable(&mut self, cfg: &Config) -> Vec<IpAddr> {
        let Some(w) = self.watch.as_mut() else { return Vec::new() };
        let changes = match w.changes() {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "reading the host's address events");
                return Vec::new();
            }
        };
        let mut gone = Vec::new();
        let wanted = wanted(cfg);
        let users = |a: &IpAddr| wanted.iter().find(|(x, _)| x == a).map(|(_, n)| n.join(", "));
        for ch in changes {
            match ch {
                AddressChange::Added(a) => {
                    if let Some(conns) = users(&a) {
                        if self.present.insert(a) {
                            info!(local = %a, connections = %conns, "local address is on the host now");
                        }
                    }
                }
                AddressChange::Removed(a) => {
                    gone.push(a);
                    if let Some(conns) = users(&a) {
                        if self.present.remove(&a) {
                            warn!(local = %a, connections = %conns, "local address left the host: IKE and ESP from it stop until it is back");
                        }
                    }
                }
                AddressChange::Lost => {
                    let host = host_addresses().unwrap_or_default();
                    for (a, conns) in &wanted {
                        let now = host.contains(a);
                        if now && self.present.insert(*a) {
                            info!(local = %a, connections = %conns.join(", "), "local address is on the host now");
                        } else if !now && self.present.remove(a) {
                            warn!(local = %a, connections = %conns.join(", "), "local address left the host: IKE and ESP from it stop until it is back");
                            gone.push(*a);
                        }
                    }
                }
            }
        }
        gone
    }
}
