//! `esparto run`: the daemon's control thread.
//!
//! Start-up order makes failures cheap and complete: first the daemon
//! checks that it holds the capabilities the configuration needs
//! ([`caps`](super::caps): a refusal names each one and what needs it),
//! then it claims its TUN device, UDP ports, routing table and rule priorities
//! ([`esparto_io::instance`]: a lock
//! file per claim under `/run/esparto`, per network namespace, and a check
//! that the TUN device is not someone else's), so a second daemon is
//! refused, naming the first one's pid, before it touches any device; then
//! the metrics endpoint's address is bound (an address in use is refused
//! here, naming the key), then the control socket, then the gateway (TUN,
//! sockets, workers, SAs) and IKE; if anything fails, what was created is
//! torn down and the error names it.
//!
//! Set-up done, the control thread gives up every capability but
//! `CAP_NET_ADMIN` (routes and policy rules), in every set including the bounding set, and
//! sets `no_new_privs`; the workers never had any ([`Gateway::start`]).
//! Then, and only then, it tells a service manager that it is ready
//! ([`notify`](super::notify)).
//!
//! A worker that stops on its own (a panic, its TUN device deleted) stops
//! the daemon: the loop asks after every turn, logs which worker and why,
//! shuts down and returns the error, so the process exits non-zero and a
//! service manager restarts it with a whole data plane. Panics anywhere are
//! logged through the daemon's log, with the thread and the location.
//!
//! The loop waits on the control socket and its clients, two signal pipes
//! (SIGTERM, SIGINT: shut down; SIGHUP: reload the configuration file, as
//! `esparto reload` does, see [`reload`](super::reload)), the IKE socket
//! and the metrics endpoint's wake-up socket (a scrape waiting for figures,
//! [`crate::metrics`]), with a short timeout for worker events, which
//! arrive over channels. Several SIGHUPs that arrive together make one reload. Shutdown first deletes every
//! IKE SA (an INFORMATIONAL Delete each, waiting at most
//! [`SHUTDOWN_GRACE`] for the answers, so peers drop our SAs at once), then
//! removes the routes and policy rules it added, stops the workers, which
//! closes the TUN queues (the device goes with them) and the sockets, and
//! removes the control socket file.

use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow};
use esparto_esp::{Event, Expiry};
use esparto_io::instance::{self, Claim, InstanceLock};
use esparto_io::poll::Poller;
use esparto_io::privs::{self, Capability};
use esparto_io::worker::WorkerFailure;
use tracing::{error, info, warn};

use super::ike::Ike;
use super::log_limit::Throttle;
use super::{Gateway, caps, notify};
use crate::config::Config;
use crate::control::{Answer, ControlServer, Request, Response, Streams};
use crate::vici::ViciServer;
use super::watch::{self, Taken, WatchLayer};
use crate::metrics::{self, Metrics};
use crate::status::Status;

/// Longest the loop sleeps when nothing happens (bounds event latency,
/// and how long a dead worker goes unnoticed).
const IDLE: Duration = Duration::from_millis(50);
/// At shutdown, how long we wait for the peers to answer our Deletes
/// before the data plane goes (a peer that is there answers within a
/// round trip; one that is not would hold us until its retransmissions
/// give up).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Capabilities kept after set-up: routes (and, later, TUN and policy-rule
/// changes) need `CAP_NET_ADMIN`. Every port is bound at start and never
/// again, so `CAP_NET_BIND_SERVICE` goes.
const KEEP: &[Capability] = &[Capability::NetAdmin];

/// Runs the gateway described by `config` until SIGTERM or SIGINT.
pub fn run(mut config: Config, control: &Path) -> Result<()> {
    let throttle = init_logging(&config.daemon.log);
    log_panics();
    for w in &config.warnings {
        warn!("{w}");
    }
    caps::check(&config)?;
    let _instance = claim(&config)?;
    let metrics = match config.daemon.metrics {
        Some(addr) => Some(start_metrics(&config, addr)?),
        None => None,
    };
    let server = ControlServer::bind(control).with_context(|| format!("control socket {}", control.display()))?;
    let mut vici = match config.daemon.vici.path(control) {
        Some(p) => Some(ViciServer::bind(&p, control).with_context(|| format!("VICI socket {} ([daemon] vici)", p.display()))?),
        None => None,
    };
    let signals = Signals::install()?;
    let mut gw = Gateway::start(&config)?;
    let ike = Ike::start(&mut config, &mut gw, Instant::now())?;
    // Before this thread drops its own: the VICI threads give up every
    // capability, the bounding set too, which needs CAP_SETPCAP.
    if let Some(v) = vici.as_mut() {
        v.serve().context("starting the VICI server")?;
    }
    let kept = privs::restrict_thread(KEEP).context("dropping capabilities")?;
    // Route changes leave the control thread, which must never wait for
    // the kernel's routing lock (the thread inherits what was kept).
    gw.spawn_router()?;
    if !kept.bounding_reduced {
        warn!("no CAP_SETPCAP: the capability bounding set is left as it was");
    }
    info!(
        config = %config.path.display(), control = %control.display(),
        vici = %vici.as_ref().map_or_else(|| "off".to_string(), |v| v.path().display().to_string()), tun = gw.tun(), workers = gw.workers(),
        pid = std::process::id(), capabilities = %kept, "esparto running"
    );
    notify::ready(&config, &gw);
    let local_addrs = super::local_addrs::LocalAddrs::new(&config);
    let mut daemon = Daemon {
        config,
        gw,
        ike,
        server,
        vici,
        metrics,
        signals,
        throttle,
        started: Instant::now(),
        heap: HeapTrim::new(),
        local_addrs,
    };
    match daemon.serve()? {
        Stop::Signal => {
            daemon.shut_down();
            Ok(())
        }
        Stop::Worker(f) => Err(daemon.stop_for_worker(f)),
    }
}

/// Everything the control thread runs, once set up.
struct Daemon {
    config: Config,
    gw: Gateway,
    ike: Option<Ike>,
    server: ControlServer,
    /// The VICI socket (`swanctl`); its threads ask `server`.
    vici: Option<ViciServer>,
    metrics: Option<Metrics>,
    signals: Signals,
    throttle: Throttle,
    started: Instant,
    heap: HeapTrim,
    /// The configured local addresses coming and going.
    local_addrs: super::local_addrs::LocalAddrs,
}

/// Gives freed heap back to the system after a large removal (thousands of
/// tunnels torn down): the allocator keeps what it freed for reuse, and
/// the daemon's resident memory would stay at its peak for good.
#[derive(Debug)]
struct HeapTrim {
    /// The most SAs (IKE and Child) held since the last trim.
    peak: usize,
    last: Instant,
}

/// A trim follows when this many SAs are gone since the peak…
const TRIM_AFTER_REMOVED: usize = 1_000;
/// …and the last trim is this long ago (a trim walks the whole heap).
const TRIM_EVERY: Duration = Duration::from_secs(10);

impl HeapTrim {
    fn new() -> Self {
        Self { peak: 0, last: Instant::now() }
    }

    /// `live` SAs are held now: trims if enough went since the peak.
    fn observe(&mut self, now: Instant, live: usize) {
        self.peak = self.peak.max(live);
        if self.peak - live >= TRIM_AFTER_REMOVED && now.duration_since(self.last) >= TRIM_EVERY {
            let before = esparto_io::mem::heap_in_use();
            let released = esparto_io::mem::trim();
            info!(
                removed = self.peak - live,
                heap_mib = before.map(|b| b as f64 / (1 << 20) as f64),
                released,
                "many SAs removed: returned the freed heap to the system"
            );
            self.peak = live;
            self.last = now;
        }
    }
}

/// Why the control loop ended.
enum Stop {
    /// SIGTERM or SIGINT.
    Signal,
    /// A worker stopped on its own (a panic, its TUN queue gone).
    Worker(WorkerFailure),
}

/// What a wait found readable (the control socket and its clients are
/// served whether or not).
struct Readable {
    /// SIGTERM or SIGINT.
    term: bool,
    /// SIGHUP.
    hup: bool,
    /// An IKE socket.
    ike: bool,
    /// The metrics endpoint's wake-up socket.
    metrics: bool,
    /// The host's address events.
    addrs: bool,
}

impl Daemon {
    /// The control loop, until a signal or a worker stops it.
    fn serve(&mut self) -> Result<Stop> {
        loop {
            let readable = self.wait()?;
            if let Some(f) = self.gw.worker_failure() {
                return Ok(Stop::Worker(f));
            }
            let now = Instant::now();
            if readable.term {
                self.signals.drain_term();
                info!(uptime_s = self.started.elapsed().as_secs(), "signal received, shutting down");
                notify::stopping("stopping: deleting IKE SAs, then the data plane");
                return Ok(Stop::Signal);
            }
            if readable.hup {
                self.reload_on_sighup();
            }
            if readable.addrs {
                for a in self.local_addrs.on_readable(&self.config) {
                    if let Some(ike) = self.ike.as_mut() {
                        ike.ep.local_address_gone(now, a);
                    }
                }
            }
            self.serve_ike(now, readable.ike);
            self.gw.keep_reservations();
            self.serve_clients();
            if let Some(m) = &mut self.metrics {
                let (gw, ike) = (&self.gw, self.ike.as_ref());
                m.serve(readable.metrics, || scrape_figures(gw, ike));
            }
            self.on_dataplane_events(now);
            self.on_stray_ike(now);
            let (_, child_sas, _) = self.gw.table.counts();
            let ike_sas = self.ike.as_ref().map_or(0, |i| i.ep.ike_sa_count());
            self.heap.observe(now, child_sas + ike_sas);
            self.throttle.flush(Instant::now(), false);
            if self.server.streaming() {
                // Lines logged since the poll above leave now, not at the
                // next wake-up.
                super::ike_events::file_watch_lines(&self.gw);
                self.server.pump_streams(&mut WatchStreams);
            }
        }
    }

    /// Waits for something to do: a signal, a request, IKE, a scrape, or
    /// at most until the next IKE timer or [`IDLE`] (worker events arrive
    /// over channels).
    fn wait(&mut self) -> Result<Readable> {
        let mut poller = Poller::new();
        let term = poller.add(self.signals.term.as_raw_fd());
        let hup = poller.add(self.signals.hup.as_raw_fd());
        poller.add(self.server.as_raw_fd());
        for (fd, output) in self.server.client_fds() {
            if output {
                poller.add_writable(fd);
            } else {
                poller.add(fd);
            }
        }
        let metrics = self.metrics.as_ref().map(|m| poller.add(m.fd()));
        let addrs = self.local_addrs.fd().map(|fd| poller.add(fd));
        // Workers' events (a barrier's answer is waited for).
        poller.add(self.gw.wake_fd());
        let ike_first = poller.add(self.gw.udp_control().as_raw_fd());
        if let Some(ike) = &self.ike {
            for fd in ike.fds() {
                poller.add(fd);
            }
        }
        let ike_last = poller.len();
        let gw = &self.gw;
        let wait = self
            .ike
            .as_mut()
            .and_then(|i| i.next_timeout(gw))
            .map_or(IDLE, |t| t.saturating_duration_since(Instant::now()).min(IDLE));
        poller.wait(wait)?;
        Ok(Readable {
            term: poller.readable(term),
            hup: poller.readable(hup),
            ike: (ike_first..ike_last).any(|i| poller.readable(i)),
            metrics: metrics.is_some_and(|i| poller.readable(i)),
            addrs: addrs.is_some_and(|i| poller.readable(i)),
        })
    }

    /// A worker stopped on its own: the data plane stops at once (no IKE
    /// SA is deleted first), and the error says why.
    fn stop_for_worker(self, f: WorkerFailure) -> anyhow::Error {
        error!(worker = f.index, reason = %f, "a worker stopped; stopping the daemon");
        notify::stopping(&format!("stopping: worker {} stopped ({f})", f.index));
        self.throttle.flush(Instant::now(), true);
        self.gw.shutdown();
        anyhow!(f).context("the data plane lost a worker")
    }

    /// SIGHUP: the configuration file is read again and applied. Several
    /// SIGHUPs that arrived together make one reload.
    fn reload_on_sighup(&mut self) {
        self.signals.drain_hup();
        if let Err(e) = super::reload::reload(&mut self.config, &mut self.gw, self.ike.as_mut(), "SIGHUP") {
            warn!("{e}");
        }
        if readable_now(&self.signals.hup) {
            info!("SIGHUP during the reload: the file is read again once more");
        }
    }

    /// IKE datagrams and timers; without IKE, whatever reaches the NAT-T
    /// control socket is dropped (read, so the buffer never fills).
    fn serve_ike(&mut self, now: Instant, readable: bool) {
        match &mut self.ike {
            Some(ike) => {
                if readable {
                    ike.on_readable(now, &mut self.gw);
                }
                ike.tick(now, &mut self.gw);
            }
            None => {
                let mut buf = [0u8; 2048];
                while let Ok(Some(_)) = self.gw.udp_control().recv_from(&mut buf) {}
            }
        }
    }

    /// New clients, and every complete request.
    fn serve_clients(&mut self) {
        let Self { server, gw, ike, config, .. } = self;
        super::ike_events::file_watch_lines(gw);
        server.poll_streams(|req| handle(gw, ike.as_mut(), config, req), &mut WatchStreams);
    }

    /// The workers' events: acquires and lifetimes for IKE, IPComp
    /// switches logged; with static keys alone, lifetimes are only logged.
    fn on_dataplane_events(&mut self, now: Instant) {
        for ev in self.gw.poll_events() {
            match (&mut self.ike, ev.event) {
                (_, Event::IpcompSwitched { spi, switch }) => log_ipcomp_switch(ev.worker, spi, switch),
                (Some(ike), _) => ike.on_dataplane(now, &mut self.gw, ev),
                (None, Event::Acquire { .. }) => {}
                (None, Event::Expire { spi, direction, kind: Expiry::Soft }) => {
                    info!(spi = %format!("{spi:08x}"), ?direction, "SA reached a soft lifetime limit (static keys: no rekey)")
                }
                (None, Event::Expire { spi, direction, kind: Expiry::Hard }) => {
                    warn!(spi = %format!("{spi:08x}"), ?direction, "SA expired (hard limit); it carries no more traffic")
                }
                // Static keys only: nothing to tell the peer with.
                (None, Event::UnknownSpi { .. }) => {}
                // Barriers and first packets come with negotiated SAs.
                (None, Event::Barrier(id)) => {
                    let _ = self.gw.barrier_reached(id);
                }
                (None, Event::FirstPacket { .. }) => {}
            }
        }
    }

    /// IKE datagrams that reached a worker (coalesced behind ESP by GRO).
    fn on_stray_ike(&mut self, now: Instant) {
        for d in self.gw.poll_control_datagrams() {
            if let (Some(ike), Some(from)) = (&mut self.ike, d.peer()) {
                ike.on_stray(now, &mut self.gw, from, d.bytes());
            }
        }
    }

    /// Stops cleanly: every IKE SA deleted first, while the data plane
    /// still runs (the Deletes' answers may arrive through a worker), then
    /// the data plane, then the control socket file.
    fn shut_down(mut self) {
        // VICI clients first: what they would ask goes nowhere now.
        drop(self.vici.take());
        if let Some(ike) = &mut self.ike {
            ike.shutdown(&mut self.gw, SHUTDOWN_GRACE);
        }
        self.throttle.flush(Instant::now(), true);
        let reports = self.gw.shutdown();
        let errors: u64 = reports.iter().map(|r| r.io_errors).sum();
        info!(workers = reports.len(), io_errors = errors, "stopped");
        drop(self.server); // removes the socket file
    }
}

/// The signal pipes: SIGTERM and SIGINT on one, SIGHUP on the other.
struct Signals {
    term: UnixStream,
    hup: UnixStream,
}

impl Signals {
    /// Installs the handlers.
    fn install() -> Result<Self> {
        let (term, term_tx) = UnixStream::pair().context("signal pipe")?;
        term.set_nonblocking(true)?;
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::low_level::pipe::register(sig, term_tx.try_clone()?).context("installing signal handlers")?;
        }
        let (hup, hup_tx) = UnixStream::pair().context("signal pipe")?;
        hup.set_nonblocking(true)?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGHUP, hup_tx).context("installing signal handlers")?;
        Ok(Self { term, hup })
    }

    /// Reads what SIGTERM or SIGINT wrote.
    fn drain_term(&mut self) {
        let mut b = [0u8; 16];
        let _ = self.term.read(&mut b);
    }

    /// Reads everything SIGHUP wrote.
    fn drain_hup(&mut self) {
        let mut b = [0u8; 16];
        while matches!(self.hup.read(&mut b), Ok(n) if n > 0) {}
    }
}

/// Claims the TUN device and the UDP ports for this process (see the
/// module docs), before anything is touched.
fn claim(config: &Config) -> Result<InstanceLock> {
    let bind = super::gateway::bind_addr(config);
    // A dual-stack socket takes the port in both families.
    let families: &[bool] = if super::gateway::dual_stack(config) { &[false, true] } else if bind.is_ipv6() { &[true] } else { &[false] };
    let mut claims = vec![Claim::Tun(config.daemon.tun.clone())];
    claims.extend(families.iter().map(|&v6| Claim::Udp { v6, port: config.daemon.port }));
    // The routing table and rule priorities, which the start cleans of
    // leftovers: no live daemon may be using them.
    let routing: esparto_io::routing::RoutingConfig = config.daemon.routing.into();
    claims.push(Claim::RouteTable(routing.table));
    claims.extend(routing.priorities().map(Claim::RulePriority));
    if config.connections.iter().any(|c| c.ike.is_some()) {
        claims.extend(families.iter().map(|&v6| Claim::Udp { v6, port: config.daemon.ike_port }));
    }
    let lock = InstanceLock::acquire(Path::new(instance::RUN_DIR), &claims).map_err(|e| {
        // Which key gives this daemon its own, to run beside the other.
        let key = match &e {
            instance::InstanceError::Held { claim, .. } => match claim {
                Claim::Tun(_) => "tun",
                Claim::Udp { port, .. } if *port == config.daemon.port => "port",
                Claim::Udp { .. } => "ike_port",
                Claim::RouteTable(_) => "routing_table",
                Claim::RulePriority(_) => "routing_table_prio",
            },
            _ => return anyhow!(e),
        };
        anyhow!("{e}; to run beside it, give this daemon ({}) another [daemon] {key}", config.path.display())
    })?;
    instance::check_tun_free(&config.daemon.tun)?;
    Ok(lock)
}

/// Binds the metrics endpoint's address (before any device: an address in
/// use stops the start with nothing touched) and starts its thread.
fn start_metrics(config: &Config, addr: SocketAddr) -> Result<Metrics> {
    let listener = metrics::Listener::bind(addr).map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => " (another esparto or another exporter listens there)",
            std::io::ErrorKind::AddrNotAvailable => " (no interface in this network namespace has that address)",
            std::io::ErrorKind::PermissionDenied => " (a port below 1024 needs CAP_NET_BIND_SERVICE)",
            _ => "",
        };
        anyhow!("{}: [daemon] metrics = \"{addr}\": cannot listen there: {e}{hint}", config.path.display())
    })?;
    let m = Metrics::start(listener, SystemTime::now()).context("starting the metrics endpoint")?;
    info!(metrics = %m.local_addr(), "metrics endpoint listening (GET /metrics)");
    Ok(m)
}

/// The whole status: the gateway's, with the IKE engine's counters and
/// events.
fn full_status(gw: &Gateway, ike: Option<&Ike>) -> Result<Status> {
    let mut s = gw.status()?;
    if let Some(ike) = ike {
        s.ike = ike.counters();
        s.ike_events = ike.events();
        ike.annotate(Instant::now(), &mut s.ike_sas);
    }
    Ok(s)
}

/// Every certificate the configuration holds, each once: our own (with
/// its key) and the intermediates we send, then the CAs we trust, then
/// the rest of those loaded over VICI.
fn certs_of(config: &Config) -> Vec<crate::control::CertInfo> {
    let mut out: Vec<crate::control::CertInfo> = Vec::new();
    let mut add = |der: &[u8], ca: bool, private_key: bool| match out.iter_mut().find(|c| c.der == der) {
        Some(c) => c.private_key |= private_key,
        None => out.push(crate::control::CertInfo { der: der.to_vec(), ca, private_key }),
    };
    for ike in config.connections.iter().filter_map(|c| c.ike.as_ref()) {
        if let Some(cred) = &ike.local.credential {
            for (i, der) in cred.chain().iter().enumerate() {
                add(der, i > 0, i == 0);
            }
        }
    }
    for ike in config.connections.iter().filter_map(|c| c.ike.as_ref()) {
        if let Some(trust) = &ike.remote.trust {
            for der in trust.cas() {
                add(der, true, false);
            }
        }
    }
    // Loaded over VICI, whether a connection uses them or not.
    for (_, c) in &config.layer.certs {
        add(&c.der, c.ca, false);
    }
    for der in config.layer.authorities.iter().filter_map(|(_, v)| crate::config::Layer::cacert(v)) {
        add(&der, true, false);
    }
    out
}

/// A scrape's figures: gathered here, formatted on the metrics endpoint's
/// thread (the IKE SA list is left out: no metric needs it).
fn scrape_figures(gw: &Gateway, ike: Option<&Ike>) -> Result<metrics::Figures> {
    let gathered = gw.gather(false)?;
    let (counters, events) = ike.map(|i| (i.counters(), i.events())).unzip();
    Ok(Box::new(move || {
        let (mut s, sas) = gathered.into_summary();
        s.ike = counters.unwrap_or_default();
        s.ike_events = events.unwrap_or_default();
        (s, sas)
    }))
}

/// Logs every panic (any thread) through the daemon's log: the thread,
/// where, the message, and a backtrace if `RUST_BACKTRACE` asks for one.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        let location = info.location().map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let bt = std::backtrace::Backtrace::capture();
        if bt.status() == std::backtrace::BacktraceStatus::Captured {
            error!(thread, location, "panic: {message}\n{bt}");
        } else {
            error!(thread, location, "panic: {message}");
        }
    }));
}

/// Whether `s` has something to read (polled without waiting).
fn readable_now(s: &UnixStream) -> bool {
    let mut p = Poller::new();
    let i = p.add(s.as_raw_fd());
    p.wait(Duration::ZERO).is_ok() && p.readable(i)
}

/// The streams of `up --watch`: the daemon's [`watch`]es.
struct WatchStreams;

impl Streams for WatchStreams {
    fn take(&mut self, id: u64, out: &mut Vec<u8>) -> bool {
        watch::global().take(id, Instant::now(), out) == Taken::Ended
    }

    fn cancel(&mut self, id: u64) {
        watch::global().cancel(id);
    }
}

fn handle(gw: &mut Gateway, ike: Option<&mut Ike>, config: &mut Config, req: Request) -> Answer {
    match req {
        Request::Up { name, watch: true, force } => {
            let Some(ike) = ike else {
                return Answer::Reply(Response::Error(format!("{name}: no IKE connections are configured")));
            };
            // Open before initiating: the first lines are logged by it.
            let Some(id) = watch::global().begin(&name, Instant::now()) else {
                return Answer::Reply(Response::Error(format!(
                    "{name}: {} `up` commands are already waiting; try again",
                    watch::MAX_WATCHES
                )));
            };
            match ike.up(Instant::now(), gw, &name, force) {
                Ok(_) => Answer::Stream(id),
                Err(e) => {
                    watch::global().cancel(id);
                    Answer::Reply(Response::Error(e))
                }
            }
        }
        Request::Events { log } => match watch::global().subscribe(log) {
            Some(id) => {
                // The first line a follower of the log gets.
                info!(log, "a control client follows the daemon's events");
                Answer::Stream(id)
            }
            None => Answer::Reply(Response::Error(format!(
                "{} clients follow the daemon's events already; try again later",
                watch::MAX_SUBSCRIPTIONS
            ))),
        },
        req => Answer::Reply(answer(gw, ike, config, req)),
    }
}

fn answer(gw: &mut Gateway, ike: Option<&mut Ike>, config: &mut Config, req: Request) -> Response {
    let now = Instant::now();
    match req {
        Request::Status => match full_status(gw, ike.as_deref()) {
            Ok(s) => Response::Status(Box::new(s)),
            Err(e) => Response::Error(format!("{e:#}")),
        },
        Request::Sas => match full_status(gw, ike.as_deref()) {
            Ok(s) => Response::Sas(s.ike_sas),
            Err(e) => Response::Error(format!("{e:#}")),
        },
        Request::Up { name, force, .. } => match ike {
            Some(ike) => ike.up(now, gw, &name, force).map_or_else(Response::Error, Response::Done),
            None => Response::Error(format!("{name}: no IKE connections are configured")),
        },
        Request::Down { name } => match ike {
            Some(ike) => ike.down(now, gw, &name).map_or_else(Response::Error, Response::Done),
            None => Response::Error(format!("{name}: no IKE connections are configured")),
        },
        Request::DownChild { name, in_spi } => match ike {
            Some(ike) => ike.down_child(now, gw, &name, in_spi).map_or_else(Response::Error, Response::Done),
            None => Response::Error(format!("{name}: no IKE connections are configured")),
        },
        Request::Rekey { name, ike: whole } => match ike {
            Some(ike) => ike.rekey(now, gw, &name, whole).map_or_else(Response::Error, Response::Done),
            None => Response::Error(format!("{name}: no IKE connections are configured")),
        },
        Request::Certs => Response::Certs(certs_of(config)),
        // Streamed by `handle`; a client that asks here gets the reason.
        Request::Events { .. } => Response::Error("events are a stream".into()),
        Request::ListConns => Response::Conns(
            config
                .connections
                .iter()
                .map(|c| {
                    let mut s = crate::status::ConnStatus::from_config(c);
                    for ch in &mut s.children {
                        ch.trap = gw.table.child_id(&c.name, &ch.name).and_then(|id| gw.table.child(id)).is_some_and(|t| t.trap);
                    }
                    s
                })
                .collect(),
        ),
        Request::Install { name, child } => match ike {
            Some(ike) => ike.install_trap(gw, config, &name, &child).map_or_else(Response::Error, Response::Done),
            None => Response::Error(format!("{name}: no IKE connections are configured")),
        },
        Request::Uninstall { name, child } => match gw.table.child_id(&name, &child) {
            Some(id) if gw.table.disarm_trap(id) => match gw.apply() {
                Ok(()) => {
                    info!(connection = %name, %child, "trap policy uninstalled");
                    Response::Done(format!("{name}/{child}: trap policy uninstalled"))
                }
                Err(e) => Response::Error(format!("{name}/{child}: {e:#}")),
            },
            Some(_) => Response::Error(format!("{name}/{child}: no trap policy is installed")),
            None => Response::Error(format!("{name}/{child}: no such child")),
        },
        Request::Reload => match super::reload::reload(config, gw, ike, "esparto reload") {
            Ok(r) => Response::Reload(Box::new(r)),
            Err(e) => {
                warn!("{e}");
                Response::Error(e)
            }
        },
        Request::Loaded => Response::Loaded(crate::control::Loaded {
            conns: config.layer.conn_names().map(str::to_string).collect(),
            shared: config.layer.secret_ids().map(str::to_string).collect(),
            keys: config.layer.keys.iter().map(|(id, _)| id.to_string()).collect(),
            authorities: config
                .layer
                .authorities
                .iter()
                .map(|(name, v)| (name.to_string(), crate::config::Layer::cacert(v).unwrap_or_default()))
                .collect(),
        }),
        Request::LoadCert { der, ca } => {
            let mut layer = config.layer.clone();
            let id = layer.add_cert(der, ca);
            let what = format!("load-cert {id}");
            if layer == config.layer {
                return Response::Reload(Box::new(unchanged(config, &what)));
            }
            load_layer(gw, ike, config, layer, &what)
        }
        Request::LoadKey { id, pkcs8 } => {
            let what = format!("load-key {id}");
            if config.layer.keys.iter().any(|(i, k)| **i == *id && ***k == *pkcs8) {
                return Response::Reload(Box::new(unchanged(config, &what)));
            }
            let mut layer = config.layer.clone();
            layer.set_key(&id, pkcs8);
            load_layer(gw, ike, config, layer, &what)
        }
        Request::UnloadKey { id } => {
            let mut layer = config.layer.clone();
            if !layer.remove_key(&id) {
                return Response::Error(format!("{id}: no private key of this id was loaded over VICI"));
            }
            load_layer(gw, ike, config, layer, &format!("unload-key {id}"))
        }
        Request::LoadAuthority { name, authority } => {
            let what = format!("load-authority '{name}'");
            if config.layer.authorities.iter().any(|(n, v)| **n == *name && **v == authority) {
                return Response::Reload(Box::new(unchanged(config, &what)));
            }
            let mut layer = config.layer.clone();
            layer.set_authority(&name, authority);
            load_layer(gw, ike, config, layer, &what)
        }
        Request::UnloadAuthority { name } => {
            let mut layer = config.layer.clone();
            if !layer.remove_authority(&name) {
                return Response::Error(format!("{name}: no authority of this name was loaded over VICI"));
            }
            load_layer(gw, ike, config, layer, &format!("unload-authority '{name}'"))
        }
        Request::ClearCreds => {
            let mut layer = config.layer.clone();
            layer.clear_creds();
            if layer == config.layer {
                return Response::Reload(Box::new(unchanged(config, "clear-creds")));
            }
            load_layer(gw, ike, config, layer, "clear-creds")
        }
        Request::LoadConn { name, conn } => {
            // The same tree again (`swanctl --load-all` of an unchanged
            // file): the configuration would be the running one.
            if config.layer.conns.iter().any(|(n, v)| **n == *name && **v == conn) {
                return Response::Reload(Box::new(unchanged(config, &format!("load-conn '{name}'"))));
            }
            let mut layer = config.layer.clone();
            layer.set_conn(&name, conn);
            load_layer(gw, ike, config, layer, &format!("load-conn '{name}'"))
        }
        Request::UnloadConn { name } => {
            let mut layer = config.layer.clone();
            if !layer.remove_conn(&name) {
                return Response::Error(match config.connections.iter().any(|c| c.name == name) {
                    true => format!(
                        "{name}: the connection is from {}; remove it there and reload",
                        config.path.display()
                    ),
                    false => format!("{name}: no connection of this name was loaded over VICI"),
                });
            }
            load_layer(gw, ike, config, layer, &format!("unload-conn '{name}'"))
        }
        Request::LoadShared { id, secret } => {
            if config.layer.secrets.iter().any(|(n, v)| **n == *id && **v == secret) {
                return Response::Reload(Box::new(unchanged(config, &format!("load-shared '{id}'"))));
            }
            let mut layer = config.layer.clone();
            layer.set_secret(&id, secret);
            load_layer(gw, ike, config, layer, &format!("load-shared '{id}'"))
        }
        Request::UnloadShared { id } => {
            let mut layer = config.layer.clone();
            if !layer.remove_secret(&id) {
                return Response::Error(format!("{id}: no secret of this id was loaded over VICI"));
            }
            load_layer(gw, ike, config, layer, &format!("unload-shared '{id}'"))
        }
    }
}

/// The report of a load that changes nothing.
fn unchanged(config: &Config, what: &str) -> crate::status::ReloadReport {
    crate::status::ReloadReport {
        file: what.to_string(),
        unchanged: config.connections.len(),
        ..Default::default()
    }
}

/// Applies `layer` (what was loaded over VICI, changed) as a reload does;
/// `what` names the change.
fn load_layer(gw: &mut Gateway, ike: Option<&mut Ike>, config: &mut Config, layer: crate::config::Layer, what: &str) -> Response {
    match super::reload::load_layer(config, gw, ike, layer, what) {
        Ok(r) => Response::Reload(Box::new(r)),
        Err(e) => {
            warn!("{e}");
            Response::Error(e)
        }
    }
}

/// Logs to stderr; `RUST_LOG` overrides the configured filter. Lines that
/// traffic can cause go through the returned [`Throttle`], whose summaries
/// the loop flushes.
fn init_logging(filter: &str) -> Throttle {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let throttle = Throttle::default();
    // Colours only on a terminal: a log file (or journald) gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    // A second initialisation (tests) is harmless.
    let watch = WatchLayer(watch::global());
    let _ = tracing_subscriber::registry().with(filter).with(throttle.layer()).with(fmt).with(watch).try_init();
    throttle
}

/// Logs an adaptive IPComp SA's decision: when it switched and why (one
/// line per switch; the back-off bounds how often).
fn log_ipcomp_switch(worker: u16, spi: u32, switch: esparto_esp::IpcompSwitch) {
    let reason = switch.reason();
    match switch.state {
        esparto_esp::IpcompState::On => {
            info!(spi = %format!("{spi:08x}"), worker, reason = %reason, "IPComp compressing again")
        }
        esparto_esp::IpcompState::Backoff { remaining, reason: why } => info!(
            spi = %format!("{spi:08x}"),
            worker,
            state = switch.state.name(),
            skip_packets = remaining,
            reason = %reason,
            "IPComp paused ({})",
            why.name()
        ),
    }
}
