//! The VICI socket: the accept thread and one thread per client (see the
//! module above for the rules).

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use esparto_wire::vici::{self, Packet, PacketType, Section};
use tracing::{debug, warn};

use super::commands::{self, ControlBackend, Cx, Ids, Outcome};
use crate::control::{Request, Response, StreamItem, bind_socket, remove_socket};
use crate::daemon::log_limit::TRAFFIC;

/// Clients served at once; more are closed as they connect.
pub const MAX_CLIENTS: usize = 128;
/// A client that sends no packet this long after connecting is dropped.
pub const FIRST_PACKET_TIMEOUT: Duration = Duration::from_secs(10);
/// A segment begun must be complete within this.
pub const SEGMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that takes nothing we send for this long is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// List events are written in batches of about this many bytes.
const LIST_BATCH: usize = 64 * 1024;
/// Stack of a client thread: it parses and builds messages on the heap.
const CLIENT_STACK: usize = 256 * 1024;

/// What the accept thread and the client threads share.
struct Shared {
    stop: AtomicBool,
    /// A handle on each client's socket, to close them when the server stops.
    clients: Mutex<Vec<(u64, UnixStream)>>,
    ids: Mutex<Ids>,
    control: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A client thread that panicked leaves nothing half-done that matters
    // here (a list of sockets, a map of numbers).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The VICI socket and its threads; dropping it closes every client and
/// removes the socket file (if it is still ours).
pub struct ViciServer {
    path: PathBuf,
    ident: (u64, u64),
    shared: Arc<Shared>,
    /// Until [`serve`](Self::serve) hands it to the accept thread.
    listener: Option<UnixListener>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ViciServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViciServer").field("path", &self.path).field("clients", &self.client_count()).finish()
    }
}

impl ViciServer {
    /// Create the socket at `path` (mode 0600; the rules of the control
    /// socket's `bind`); commands will go to the daemon on its control
    /// socket `control`. Nothing is served until [`serve`](Self::serve):
    /// the daemon binds while it may still create files anywhere.
    pub fn bind(path: &Path, control: &Path) -> io::Result<Self> {
        let (listener, ident) = bind_socket(path)?;
        Ok(ViciServer {
            path: path.to_path_buf(),
            ident,
            shared: Arc::new(Shared {
                stop: AtomicBool::new(false),
                clients: Mutex::new(Vec::new()),
                ids: Mutex::new(Ids::default()),
                control: control.to_path_buf(),
            }),
            listener: Some(listener),
            accept: None,
        })
    }

    /// Start the accept thread, with no capabilities (nor the client
    /// threads it starts).
    pub fn serve(&mut self) -> io::Result<()> {
        let Some(listener) = self.listener.take() else {
            return Ok(());
        };
        let sh = Arc::clone(&self.shared);
        let t = esparto_io::privs::with_no_capabilities(move || {
            std::thread::Builder::new().name("esparto-vici".into()).spawn(move || accept_loop(&listener, &sh))
        })??;
        self.accept = Some(t);
        Ok(())
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Clients connected now.
    pub fn client_count(&self) -> usize {
        lock(&self.shared.clients).len()
    }
}

impl Drop for ViciServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept thread; if even that fails it is left blocked
        // in accept, harmless in a daemon that is exiting.
        if self.accept.is_some() && UnixStream::connect(&self.path).is_ok() {
            if let Some(t) = self.accept.take() {
                let _ = t.join();
            }
        }
        for (_, c) in lock(&self.shared.clients).drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        remove_socket(&self.path, self.ident);
    }
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    let mut next = 0u64;
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and the like: try again shortly, quietly.
                debug!(error = %e, "vici: accept failed");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let Ok(handle) = stream.try_clone() else { continue };
        let id = next;
        next += 1;
        {
            let mut clients = lock(&shared.clients);
            if clients.len() >= MAX_CLIENTS {
                warn!(target: TRAFFIC, "vici: {MAX_CLIENTS} clients connected; closing a new one");
                continue;
            }
            clients.push((id, handle));
        }
        let sh = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("esparto-vici-c".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                serve(id, stream, &sh);
                lock(&sh.clients).retain(|(i, _)| *i != id);
            });
        if spawned.is_err() {
            lock(&shared.clients).retain(|(i, _)| *i != id);
        }
    }
}

/// Why a session ended early.
enum End {
    /// The client broke the protocol or its time limits: said in the log.
    Protocol(String),
    /// The socket failed.
    Io(io::Error),
}

fn serve(id: u64, mut s: UnixStream, shared: &Shared) {
    match session(&mut s, shared) {
        Ok(()) => debug!(client = id, "vici: client left"),
        Err(End::Protocol(why)) => warn!(target: TRAFFIC, client = id, "vici: {why}; connection closed"),
        Err(End::Io(e)) => debug!(client = id, error = %e, "vici: connection failed"),
    }
    let _ = s.shutdown(Shutdown::Both);
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn write_all(s: &mut UnixStream, data: &[u8]) -> Result<(), End> {
    s.write_all(data).map_err(|e| {
        if timed_out(&e) {
            End::Protocol(format!("client read nothing for {} s", WRITE_TIMEOUT.as_secs()))
        } else {
            End::Io(e)
        }
    })
}

/// Reads into `buf` entirely; `what` names the part for the log.
fn read_exact(s: &mut UnixStream, buf: &mut [u8], what: &str) -> Result<(), End> {
    s.read_exact(buf).map_err(|e| {
        if timed_out(&e) {
            End::Protocol(format!("{what} not complete within {} s", SEGMENT_TIMEOUT.as_secs()))
        } else if e.kind() == io::ErrorKind::UnexpectedEof {
            End::Protocol(format!("connection closed inside a {what}"))
        } else {
            End::Io(e)
        }
    })
}

/// The daemon's event stream ([`Request::Events`]), followed while the
/// client is registered for one of [`commands::DAEMON_EVENTS`].
struct Follow {
    stream: UnixStream,
    /// With log lines (`log` is registered).
    log: bool,
    /// Bytes read after the last complete line.
    buf: Vec<u8>,
}

/// How long the daemon may take to accept a subscription.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(5);

impl Follow {
    /// Subscribes, and waits for the daemon to accept.
    fn open(control: &Path, log: bool) -> Result<Self, String> {
        let mut stream = UnixStream::connect(control).map_err(|e| format!("cannot reach the daemon: {e}"))?;
        let mut req = serde_json::to_vec(&Request::Events { log }).map_err(|e| e.to_string())?;
        req.push(b'\n');
        stream.set_write_timeout(Some(FOLLOW_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(FOLLOW_TIMEOUT)).map_err(|e| e.to_string())?;
        stream.write_all(&req).map_err(|e| e.to_string())?;
        let mut f = Follow { stream, log, buf: Vec::new() };
        let mut chunk = [0u8; 4096];
        while !f.buf.contains(&b'\n') {
            match f.stream.read(&mut chunk) {
                Ok(0) => return Err("the daemon closed the event stream".into()),
                Ok(n) => f.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("no answer from the daemon: {e}")),
            }
        }
        // The first line says whether it was accepted; what follows it is
        // read with the rest.
        let end = f.buf.iter().position(|&b| b == b'\n').unwrap_or(f.buf.len());
        let first: Result<StreamItem, _> = serde_json::from_slice(&f.buf[..end]);
        f.buf.drain(..(end + 1).min(f.buf.len()));
        match first {
            Ok(StreamItem::Started { .. }) => {}
            Ok(StreamItem::End(Response::Error(e))) => return Err(e),
            _ => return Err("unexpected answer from the daemon".into()),
        }
        f.stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(f)
    }

    /// The complete lines read so far, parsed (a line that does not parse
    /// is skipped).
    fn lines(&mut self) -> Vec<StreamItem> {
        let Some(end) = self.buf.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
        let rest = self.buf.split_off(end + 1);
        let done = std::mem::replace(&mut self.buf, rest);
        done.split(|&b| b == b'\n').filter(|l| !l.is_empty()).filter_map(|l| serde_json::from_slice(l).ok()).collect()
    }

    /// What the daemon sent since; `Err` when the stream ended.
    fn read(&mut self) -> io::Result<Vec<StreamItem>> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let items = self.lines();
        if items.iter().any(|i| matches!(i, StreamItem::End(_))) {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(items)
    }
}

/// The events stream the client's registrations call for: none, or one
/// with or without log lines.
fn wanted(events: &HashSet<&'static str>) -> Option<bool> {
    commands::DAEMON_EVENTS.iter().any(|e| events.contains(e)).then(|| events.contains("log"))
}

/// Waits until the client sends (`true`), forwarding the daemon's events
/// to it meanwhile; the stream is dropped if it ends.
fn wait_for_client(s: &mut UnixStream, follow: &mut Option<Follow>, events: &HashSet<&'static str>, ids: &Mutex<Ids>) -> Result<(), End> {
    use rustix::event::{PollFd, PollFlags, poll};
    while let Some(f) = follow.as_mut() {
        // Lines read already (with the stream's first one) go out first.
        let early = f.lines();
        forward(s, &early, events, ids)?;
        let (client, daemon) = {
            let mut fds = [PollFd::new(&*s, PollFlags::IN), PollFd::new(&f.stream, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(End::Io(e.into())),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if daemon {
            match f.read() {
                Ok(items) => forward(s, &items, events, ids)?,
                Err(e) => {
                    debug!(error = %e, "vici: the daemon's event stream ended");
                    *follow = None;
                }
            }
        }
        if client {
            return Ok(());
        }
    }
    Ok(())
}

/// Sends the client the VICI events of `items` it registered for.
fn forward(s: &mut UnixStream, items: &[StreamItem], events: &HashSet<&'static str>, ids: &Mutex<Ids>) -> Result<(), End> {
    let mut out = Vec::new();
    for (name, msg) in items.iter().filter_map(|i| commands::daemon_event(i, ids)) {
        if events.contains(name) {
            if let Err(e) = (Packet { kind: PacketType::Event, name, message: &msg }).emit(&mut out) {
                warn!(target: TRAFFIC, "vici: {name} event left out: {e}");
            }
        }
    }
    if out.is_empty() { Ok(()) } else { write_all(s, &out) }
}

fn session(s: &mut UnixStream, shared: &Shared) -> Result<(), End> {
    s.set_write_timeout(Some(WRITE_TIMEOUT)).map_err(End::Io)?;
    let mut events: HashSet<&'static str> = HashSet::new();
    let mut backend = ControlBackend::new(&shared.control);
    let mut follow: Option<Follow> = None;
    let mut first = true;
    loop {
        wait_for_client(s, &mut follow, &events, &shared.ids)?;
        // Idle between packets is allowed; before the first one it is not.
        s.set_read_timeout(first.then_some(FIRST_PACKET_TIMEOUT)).map_err(End::Io)?;
        let mut header = [0u8; vici::HEADER_LEN];
        match s.read(&mut header[..1]) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if timed_out(&e) => {
                return Err(End::Protocol(format!("no packet within {} s of connecting", FIRST_PACKET_TIMEOUT.as_secs())));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(End::Io(e)),
        }
        s.set_read_timeout(Some(SEGMENT_TIMEOUT)).map_err(End::Io)?;
        read_exact(s, &mut header[1..], "segment header")?;
        let len = vici::segment_len(header).map_err(|e| End::Protocol(e.to_string()))?;
        let mut segment = vec![0u8; len];
        read_exact(s, &mut segment, "segment")?;
        first = false;
        let p = Packet::parse(&segment).map_err(|e| End::Protocol(e.to_string()))?;
        // What goes out next: buffered events, then the answer.
        let mut out = Vec::new();
        let mut events_end = 0;
        let emitted = match p.kind {
            PacketType::CmdRequest => {
                let outcome = match Section::parse(p.message) {
                    Ok(req) => {
                        let mut write_err = None;
                        // The list events of one command go out in writes of
                        // up to LIST_BATCH bytes (10,000 SAs are 10,000
                        // events: one write each would wake the client as
                        // often); the others at once, as they happen.
                        let mut emit = |name: &'static str, msg: &[u8]| -> bool {
                            if !events.contains(name) {
                                return true;
                            }
                            let at = out.len();
                            if let Err(e) = (Packet { kind: PacketType::Event, name, message: msg }).emit(&mut out) {
                                out.truncate(at);
                                warn!(target: TRAFFIC, "vici: {name} event left out: {e}");
                                return true;
                            }
                            if name.starts_with("list-") && out.len() < LIST_BATCH {
                                return true;
                            }
                            let sent = write_all(s, &out);
                            out.clear();
                            match sent {
                                Ok(()) => true,
                                Err(e) => {
                                    write_err = Some(e);
                                    false
                                }
                            }
                        };
                        let mut cx = Cx { backend: &mut backend, ids: &shared.ids };
                        let outcome = commands::handle(p.name, &req, &mut cx, &mut emit);
                        if let Some(e) = write_err {
                            return Err(e);
                        }
                        outcome
                    }
                    Err(e) => {
                        debug!("vici: malformed {} request: {e}", p.name);
                        Outcome::Reply(commands::failure(&format!("malformed request message: {e}")))
                    }
                };
                events_end = out.len();
                match &outcome {
                    Outcome::Reply(m) => Packet { kind: PacketType::CmdResponse, name: "", message: m }.emit(&mut out),
                    Outcome::Unknown => Packet { kind: PacketType::CmdUnknown, name: "", message: &[] }.emit(&mut out),
                }
            }
            PacketType::EventRegister | PacketType::EventUnregister => {
                let kind = match commands::EVENTS.iter().find(|e| **e == p.name) {
                    Some(e) => {
                        let register = p.kind == PacketType::EventRegister;
                        if register {
                            events.insert(e);
                        } else {
                            events.remove(e);
                        }
                        let want = wanted(&events);
                        if follow.as_ref().map(|f| f.log) != want {
                            follow = None;
                        }
                        match want.filter(|_| follow.is_none()).map(|log| Follow::open(&shared.control, log)) {
                            Some(Err(why)) if register => {
                                // The protocol cannot say why: the log does.
                                warn!(target: TRAFFIC, "vici: {e} events refused: {why}");
                                events.remove(e);
                                PacketType::EventUnknown
                            }
                            Some(Err(why)) => {
                                warn!(target: TRAFFIC, "vici: the daemon's events lost: {why}");
                                PacketType::EventConfirm
                            }
                            Some(Ok(f)) => {
                                follow = Some(f);
                                PacketType::EventConfirm
                            }
                            None => PacketType::EventConfirm,
                        }
                    }
                    None => PacketType::EventUnknown,
                };
                Packet { kind, name: "", message: &[] }.emit(&mut out)
            }
            other => {
                return Err(End::Protocol(format!("client sent a {other:?} packet, which only a server sends")));
            }
        };
        if let Err(e) = emitted {
            // An answer over 512 KiB: say so instead (after the events
            // still buffered).
            warn!("vici: the answer to {} left out: {e}", p.name);
            out.truncate(events_end);
            let m = commands::failure(&format!("the answer is too large for VICI: {e}"));
            let _ = Packet { kind: PacketType::CmdResponse, name: "", message: &m }.emit(&mut out);
        }
        write_all(s, &out)?;
    }
}
