//! Telling the service manager how the daemon is doing (`sd_notify(3)`).
//!
//! Under systemd with `Type=notify` the unit counts as started only when
//! the daemon says `READY=1`, which [`ready`] sends once set-up is
//! complete: the TUN device, the sockets and the workers up, the static
//! SAs installed, IKE started and the capabilities dropped. So `systemctl
//! start esparto` returns, and units ordered after it start, only when the
//! gateway carries traffic, and a start that fails is a failed unit rather
//! than a daemon that died just after "started". [`stopping`] sends
//! `STOPPING=1` when it begins to stop. A reload of the configuration
//! ([`reload`](super::reload), for SIGHUP and `esparto reload` alike) is
//! bracketed by [`reloading`] and [`ready`], so the service manager shows
//! the unit as reloading meanwhile.
//!
//! Without `NOTIFY_SOCKET` in the environment each is a no-op. A message
//! that cannot be sent is logged, not fatal: systemd's start timeout is the
//! backstop.

use sd_notify::NotifyState;
use tracing::warn;

use super::Gateway;
use crate::config::Config;

/// Set-up (or a reload) is complete; what runs is shown by `systemctl
/// status`.
pub(crate) fn ready(config: &Config, gw: &Gateway) {
    let status = format!(
        "running: {} connection(s), {} worker(s), TUN device {}",
        config.connections.len(),
        gw.workers(),
        gw.tun()
    );
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// The daemon has begun to re-read its configuration, for `why`; [`ready`]
/// ends it. `MONOTONIC_USEC` goes with it, as systemd's `Type=notify-reload`
/// (version 253 and later) requires and earlier versions ignore.
pub(crate) fn reloading(why: &str) {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now, NotifyState::Status(why)]),
        Err(e) => {
            warn!("cannot read CLOCK_MONOTONIC for the service manager: {e}");
            send(&[NotifyState::Reloading, NotifyState::Status(why)]);
        }
    }
}

/// The daemon has begun to stop, for `why`.
pub(crate) fn stopping(why: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(why)]);
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        let socket = std::env::var_os("NOTIFY_SOCKET").unwrap_or_default();
        warn!(socket = %socket.to_string_lossy(), "cannot notify the service manager: {e}");
    }
}
