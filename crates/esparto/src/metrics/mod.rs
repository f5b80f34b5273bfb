//! The Prometheus endpoint (`[daemon] metrics = "127.0.0.1:9720"`): `GET
//! /metrics` answers with everything `esparto status --json` knows, as
//! counters and gauges (`docs/METRICS.md` lists them).
//!
//! **Where the figures come from.** Nothing is counted for the metrics
//! alone: a scrape reads what the workers already publish for `status`
//! (their snapshot of plain per-worker counters, taken between batches)
//! and what the control thread's table and IKE driver hold, through the
//! same [`Gateway::gather`](crate::daemon::Gateway::gather) as the control
//! socket's `status`. The data plane never sees a scrape except as one snapshot per
//! worker, so metrics cost it nothing between scrapes.
//!
//! **Threads.** The endpoint has a thread of its own (`esparto-metrics`,
//! started with no capabilities, since it reads bytes from the network)
//! that accepts connections, reads the request, and asks the control
//! thread for its figures through a channel of one and a wake-up socket
//! the control loop polls. The control thread gathers them between two
//! turns of its loop ([`Metrics::serve`]): the workers' snapshots and
//! whose each SA is, nothing formatted; the costly part — summing tens of
//! thousands of SAs ([`SaRow`]s, never made into strings one by one),
//! turning the sums into text, writing megabytes to a slow client —
//! happens on the endpoint's thread. The time the control thread spent
//! is itself a metric, `esparto_metrics_gather_seconds`.
//!
//! **Bounded.** One connection is served at a time (a scraper asks every
//! few seconds; a second waits in the listen backlog). A request head
//! larger than [`MAX_REQUEST_HEAD`], or not complete within
//! [`REQUEST_TIMEOUT`], is refused; a response not taken within
//! [`WRITE_TIMEOUT`] is abandoned; if the control thread does not answer
//! within [`GATHER_TIMEOUT`], the scrape gets a 503. Every connection is closed after
//! its response.
//!
//! **Formats.** A scraper that accepts OpenMetrics (Prometheus does) gets
//! OpenMetrics text; anyone else (curl) the Prometheus text format 0.0.4.
//! Both come from the Prometheus project's Rust client
//! ([`prometheus_client`]); `exposition.rs` says what is exported.

mod exposition;
mod http;
mod process;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use esparto_esp::{Direction, Drops};
use tracing::warn;

use crate::status::Status;

use exposition::render;

/// Longest a client may take to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a client may take to read the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the endpoint waits for the control thread's figures.
pub const GATHER_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head accepted (request line and headers).
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Pause after a failed `accept` (out of file descriptors), so that the
/// thread does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// One SA as one worker reports it, not formatted (an outbound fallback
/// SA comes once per worker that holds it): the exposition sums these per
/// SA and formats only the sums.
#[derive(Debug, Clone)]
pub struct SaRow {
    /// Connection name (empty: an SA the table does not know).
    pub connection: Arc<str>,
    /// Child name.
    pub child: Arc<str>,
    /// Which way.
    pub direction: Direction,
    /// The SPI.
    pub spi: u32,
    /// Packets.
    pub packets: u64,
    /// Inner bytes.
    pub bytes: u64,
    /// Drops by reason.
    pub drops: Drops,
}

/// One scrape's figures.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The figures as `esparto status --json` shows them, but for `sas`.
    pub status: Status,
    /// The SAs, as the workers report them.
    pub sas: Vec<SaRow>,
    /// How long the control thread took to gather them.
    pub gather: Duration,
}

/// The figures for one scrape as the control thread hands them over,
/// made into a [`Status`] on the endpoint's thread: formatting tens of
/// thousands of SAs must not hold the control thread.
pub type Figures = Box<dyn FnOnce() -> (Status, Vec<SaRow>) + Send>;

/// The control thread's answer: the figures and how long it took to
/// gather them, or why there are none.
type Answer = Result<(Figures, Duration), String>;

/// The bound listening socket, before its thread starts: binding first
/// lets `esparto run` refuse an address in use before it touches any
/// device.
#[derive(Debug)]
pub struct Listener {
    socket: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    /// Listens on `addr`.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = TcpListener::bind(addr)?;
        let addr = socket.local_addr()?;
        Ok(Self { socket, addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The control thread's end of the endpoint.
#[derive(Debug)]
pub struct Metrics {
    requests: Receiver<SyncSender<Answer>>,
    wake: UnixStream,
    addr: SocketAddr,
}

impl Metrics {
    /// Starts the endpoint's thread on `listener`; `started` is when the
    /// daemon started (`process_start_time_seconds`). The thread holds no
    /// capabilities.
    pub fn start(listener: Listener, started: SystemTime) -> io::Result<Self> {
        let (wake, wake_tx) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let (req_tx, requests) = mpsc::sync_channel(1);
        let addr = listener.addr;
        let endpoint = Endpoint {
            requests: req_tx,
            wake: wake_tx,
            started,
        };
        esparto_io::privs::with_no_capabilities(move || {
            std::thread::Builder::new()
                .name("esparto-metrics".into())
                .spawn(move || endpoint.run(listener.socket))
        })??;
        Ok(Self { requests, wake, addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Readable when a scrape waits for [`serve`](Self::serve).
    pub fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Answers the scrape waiting, if any, with `gather`'s figures; `woken`
    /// says that [`fd`](Self::fd) polled readable (the wake-up is then
    /// consumed). Never blocks on the endpoint.
    pub fn serve(&mut self, woken: bool, gather: impl FnOnce() -> anyhow::Result<Figures>) {
        if woken {
            let mut b = [0u8; 64];
            while matches!((&self.wake).read(&mut b), Ok(n) if n > 0) {}
        }
        let Ok(reply) = self.requests.try_recv() else { return };
        let t0 = Instant::now();
        let answer = gather().map(|f| (f, t0.elapsed())).map_err(|e| format!("{e:#}"));
        // A scraper that gave up has dropped its receiver: nothing to do.
        let _ = reply.try_send(answer);
    }
}

/// The endpoint's thread.
struct Endpoint {
    requests: SyncSender<SyncSender<Answer>>,
    wake: UnixStream,
    started: SystemTime,
}

impl Endpoint {
    fn run(self, listener: TcpListener) {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = self.connection(stream) {
                        tracing::debug!(error = %e, "metrics client");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(target: crate::daemon::log_limit::TRAFFIC, error = %e, "metrics endpoint: accept failed");
                    std::thread::sleep(ACCEPT_BACKOFF);
                }
            }
        }
    }

    /// One request, one response, then close.
    fn connection(&self, mut stream: std::net::TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        let req = match http::read_request(&mut stream, Instant::now() + REQUEST_TIMEOUT) {
            Ok(r) => r,
            Err(http::ReadError::Io(e)) => return Err(e),
            Err(http::ReadError::Refused(resp)) => return resp.write(&mut stream, false),
        };
        let head_only = req.method == "HEAD";
        let resp = if req.method != "GET" && !head_only {
            http::Response::method_not_allowed()
        } else {
            match req.path.as_str() {
                "/metrics" => self.metrics(req.openmetrics),
                "/" => http::Response::text(200, "Esparto: metrics are at /metrics\n".into()),
                _ => http::Response::text(404, "not found: metrics are at /metrics\n".into()),
            }
        };
        resp.write(&mut stream, head_only)
    }

    /// The exposition, or a 503 saying why not.
    fn metrics(&self, openmetrics: bool) -> http::Response {
        let (tx, rx) = mpsc::sync_channel(1);
        match self.requests.try_send(tx) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return http::Response::text(503, "the previous scrape is still being gathered\n".into());
            }
            Err(TrySendError::Disconnected(_)) => {
                return http::Response::text(503, "the daemon is stopping\n".into());
            }
        }
        // A full socket means a wake-up is pending already.
        let _ = (&self.wake).write(&[1]);
        match rx.recv_timeout(GATHER_TIMEOUT) {
            Ok(Ok((figures, gather))) => {
                let (status, sas) = figures();
                let scrape = Scrape { status, sas, gather };
                let facts = process::Facts::read(self.started);
                match render(scrape, &facts, openmetrics) {
                    Ok(body) => http::Response::metrics(body, openmetrics),
                    Err(_) => http::Response::text(500, "cannot encode the metrics\n".into()),
                }
            }
            Ok(Err(e)) => http::Response::text(503, format!("{e}\n")),
            Err(_) => http::Response::text(
                503,
                format!("the daemon did not answer within {} s\n", GATHER_TIMEOUT.as_secs()),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
