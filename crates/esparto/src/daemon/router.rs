//! The tunnel's routes and rules, changed on a thread of their own.
//!
//! Every route change goes through the kernel's routing lock
//! (`rtnl_lock`), and whoever holds it — a network namespace being torn
//! down, a routing daemon loading a full table, another process adding
//! thousands of routes — can make a change wait for seconds (up to 40 s
//! were seen on a busy machine). The control thread must never wait on it:
//! it answers IKE, retransmits, rekeys and serves the control socket, and
//! a stall there lets Child SAs run past their lifetimes. So once the
//! daemon is up, the changes the Child SA table asks for
//! ([`Effect::Routes`](super::table::Effect), `Unroute`) go in order over
//! a channel to the thread `esparto-routes`, which owns the
//! [`TunnelRouting`] and makes them; the control thread goes on at once.
//!
//! The same thread keeps the routes there: every [`RESTORE_EVERY`] it
//! lists the table's routes on the TUN device (a dump the kernel filters
//! and answers without the lock) and puts back any the kernel dropped —
//! it flushes a device's routes when the device is set down and up.
//!
//! Before [`Router::spawn`] (while the daemon starts: static children are
//! installed with their routes before it serves anything) changes are made
//! on the calling thread, at once. Lookups that change nothing (where a
//! peer is routed, for `check_peers`) are always made on the calling
//! thread, over a netlink socket of its own.
//!
//! On stop the thread finishes the changes queued and hands the routing
//! back, and every route and rule is removed.

use std::net::IpAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use esparto_io::netlink::Rtnetlink;
use esparto_io::routing::{self, PeerPath, Prefix, RoutingError, TunnelRouting};
use tracing::{info, warn};

/// How often the routing thread checks that the kernel still has the
/// tunnel's routes.
pub(super) const RESTORE_EVERY: Duration = Duration::from_secs(2);

/// Changes slower than this are logged: they held the routing thread (and,
/// before it runs, the control thread) that long.
const SLOW: Duration = Duration::from_millis(100);

/// A change for the routing thread.
#[derive(Debug)]
enum Change {
    /// Route `remote` into the device for traffic from `local`.
    Add { local: Vec<Prefix>, remote: Vec<Prefix> },
    /// No tunnel routes these prefixes any more.
    Remove(Vec<Prefix>),
}

enum State {
    /// Changes are made on the calling thread.
    Here(TunnelRouting),
    /// Changes go to the routing thread.
    Thread { tx: mpsc::Sender<Change>, thread: JoinHandle<TunnelRouting> },
    /// Stopped.
    Gone,
}

/// The tunnel's routing: the [`TunnelRouting`] on the calling thread, or
/// on the routing thread once spawned.
pub(super) struct Router {
    state: State,
    /// For lookups on the calling thread.
    lookups: Rtnetlink,
    mark: u32,
    /// The TUN device's name and index.
    device: Option<(String, u32)>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Here(_) => "here",
            State::Thread { .. } => "thread",
            State::Gone => "stopped",
        };
        f.debug_struct("Router").field("state", &state).field("device", &self.device).finish()
    }
}

impl Router {
    /// Takes over `routing` (claimed and attached to the TUN device);
    /// changes are made on this thread until [`Router::spawn`].
    pub(super) fn new(routing: TunnelRouting) -> Result<Self> {
        let lookups = Rtnetlink::open().context("opening an rtnetlink socket for route lookups")?;
        let mark = routing.config().mark;
        let device = routing.device().map(|(n, i)| (n.to_string(), i));
        Ok(Self { state: State::Here(routing), lookups, mark, device })
    }

    /// From now on, changes are made by the routing thread (it inherits
    /// this thread's capabilities and network namespace).
    pub(super) fn spawn(&mut self) -> Result<()> {
        let State::Here(routing) = std::mem::replace(&mut self.state, State::Gone) else {
            return Ok(());
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("esparto-routes".into())
            .spawn(move || run(routing, rx))
            .context("starting the routing thread")?;
        self.state = State::Thread { tx, thread };
        Ok(())
    }

    /// Sends traffic from `local` to `remote` into the TUN device
    /// ([`TunnelRouting::add`]). Before the thread runs, an error is the
    /// caller's; after, the thread logs it.
    pub(super) fn add(&mut self, local: Vec<Prefix>, remote: Vec<Prefix>) -> Result<(), RoutingError> {
        self.change(Change::Add { local, remote })
    }

    /// Removes the routes of `prefixes` ([`TunnelRouting::remove_routes`]).
    pub(super) fn remove(&mut self, prefixes: Vec<Prefix>) -> Result<(), RoutingError> {
        self.change(Change::Remove(prefixes))
    }

    fn change(&mut self, c: Change) -> Result<(), RoutingError> {
        match &mut self.state {
            State::Here(r) => timed(|| apply(r, c)),
            State::Thread { tx, .. } => {
                // The thread stops only with the router: a send cannot fail
                // before `stop`, and after it there is nothing to route.
                let _ = tx.send(c);
                Ok(())
            }
            State::Gone => Ok(()),
        }
    }

    /// Where the daemon's own packets to `peer` go ([`routing::peer_path`]).
    pub(super) fn check_peer(&mut self, peer: IpAddr, src: Option<IpAddr>) -> Result<PeerPath, RoutingError> {
        let dev = self.device.as_ref().map(|(n, i)| (n.as_str(), *i));
        routing::peer_path(&mut self.lookups, self.mark, dev, peer, src)
    }

    /// Finishes the queued changes, then removes every rule and route;
    /// returns what could not be removed.
    pub(super) fn stop(&mut self) -> Vec<RoutingError> {
        let routing = match std::mem::replace(&mut self.state, State::Gone) {
            State::Here(r) => Some(r),
            State::Thread { tx, thread } => {
                drop(tx);
                thread.join().ok()
            }
            State::Gone => None,
        };
        routing.map(|mut r| r.remove_all()).unwrap_or_default()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        for e in self.stop() {
            warn!("{e}");
        }
    }
}

fn apply(r: &mut TunnelRouting, c: Change) -> Result<(), RoutingError> {
    match c {
        Change::Add { local, remote } => r.add(&local, &remote),
        Change::Remove(prefixes) => r.remove_routes(&prefixes),
    }
}

/// Runs `f`, logging it if the kernel kept it waiting.
fn timed<T>(f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    let took = t0.elapsed();
    if took > SLOW {
        warn!(ms = took.as_millis() as u64, "a route change waited for the kernel's routing lock");
    }
    r
}

/// The routing thread: changes in order as they come, a check of the
/// routes every [`RESTORE_EVERY`]; hands the routing back when the sender
/// is dropped.
fn run(mut routing: TunnelRouting, rx: mpsc::Receiver<Change>) -> TunnelRouting {
    let mut next_check = Instant::now() + RESTORE_EVERY;
    loop {
        match rx.recv_timeout(next_check.saturating_duration_since(Instant::now())) {
            Ok(c) => {
                if let Err(e) = timed(|| apply(&mut routing, c)) {
                    warn!(error = %e, "routes not updated");
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return routing,
        }
        if Instant::now() >= next_check {
            match timed(|| routing.restore()) {
                Ok(0) => {}
                Ok(n) => info!(routes = n, "put back tunnel routes the kernel had dropped (the device went down and up?)"),
                Err(e) => warn!(error = %e, "checking the tunnel's routes"),
            }
            next_check = Instant::now() + RESTORE_EVERY;
        }
    }
}
