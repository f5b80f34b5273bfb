//! `esparto run`: the daemon's control thread.
//!
//! Start-up order makes failures cheap and complete: the control socket is
//! bound first (a second daemon on the same socket is refused before it
//! touches any device), then the gateway (TUN, sockets, workers, SAs); if
//! anything fails, what was created is torn down and the error names it.
//!
//! The loop waits on the control socket and its clients, a signal pipe
//! (SIGTERM, SIGINT: shut down) and the IKE socket, with a short timeout for
//! worker events, which arrive over channels. Shutdown stops the workers,
//! which closes the TUN queues (the device and its routes go with them) and
//! the sockets, and removes the control socket file.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use esparto_esp::{Event, Expiry};
use esparto_io::poll::Poller;
use tracing::{info, warn};

use super::Gateway;
use crate::config::Config;
use crate::control::{ControlServer, Request, Response};

/// Longest the loop sleeps when nothing happens (bounds event latency).
const IDLE: Duration = Duration::from_millis(50);

/// Runs the gateway described by `config` until SIGTERM or SIGINT.
pub fn run(config: Config, control: &Path) -> Result<()> {
    init_logging(&config.daemon.log);
    let mut server = ControlServer::bind(control).with_context(|| format!("control socket {}", control.display()))?;
    let (mut sig_rx, sig_tx) = UnixStream::pair().context("signal pipe")?;
    sig_rx.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?).context("installing signal handlers")?;
    }
    let mut gw = Gateway::start(&config)?;
    info!(
        config = %config.path.display(), control = %control.display(), tun = gw.tun(), workers = gw.workers(),
        pid = std::process::id(), "esparto running"
    );

    let started = Instant::now();
    loop {
        let mut poller = Poller::new();
        let sig = poller.add(sig_rx.as_raw_fd());
        poller.add(server_fd(&server));
        for fd in server.client_fds() {
            poller.add(fd);
        }
        poller.wait(IDLE)?;
        if poller.readable(sig) {
            let mut b = [0u8; 16];
            let _ = sig_rx.read(&mut b);
            info!(uptime_s = started.elapsed().as_secs(), "signal received, shutting down");
            break;
        }
        server.poll(|req| handle(&mut gw, req));
        for ev in gw.poll_events() {
            match ev.event {
                Event::Acquire { group, worker } => {
                    tracing::debug!(group, ?worker, from = ev.worker, "acquire (no IKE for static SAs)")
                }
                Event::Expire { spi, direction, kind: Expiry::Soft } => {
                    info!(spi = %format!("{spi:08x}"), ?direction, "SA reached a soft lifetime limit")
                }
                Event::Expire { spi, direction, kind: Expiry::Hard } => {
                    warn!(spi = %format!("{spi:08x}"), ?direction, "SA expired (hard limit); it carries no more traffic")
                }
            }
        }
        // IKE datagrams that reached a worker (coalesced behind ESP) are
        // not served until the IKE engine is wired in.
        let stray = gw.poll_control_datagrams();
        if !stray.is_empty() {
            tracing::debug!(n = stray.len(), "non-ESP datagrams on the data sockets (no IKE configured)");
        }
    }
    let reports = gw.shutdown();
    let errors: u64 = reports.iter().map(|r| r.io_errors).sum();
    info!(workers = reports.len(), io_errors = errors, "stopped");
    drop(server); // removes the socket file
    Ok(())
}

fn server_fd(s: &ControlServer) -> std::os::fd::RawFd {
    s.as_raw_fd()
}

fn handle(gw: &mut Gateway, req: Request) -> Response {
    match req {
        Request::Status => match gw.status() {
            Ok(s) => Response::Status(Box::new(s)),
            Err(e) => Response::Error(format!("{e:#}")),
        },
        Request::Sas => match gw.status() {
            Ok(s) => Response::Sas(s.sas),
            Err(e) => Response::Error(format!("{e:#}")),
        },
        Request::Up { name } | Request::Down { name } => {
            Response::Error(format!("connection '{name}': up/down need IKE, which this daemon does not run yet"))
        }
    }
}

/// Logs to stderr; `RUST_LOG` overrides the configured filter.
fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialisation (tests) is harmless.
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
