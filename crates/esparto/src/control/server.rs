//! The daemon's end of the control socket: a non-blocking listener and
//! per-client buffers, served by [`ControlServer::poll`] from the daemon's
//! control loop (see the module above for the rules).

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{CLIENT_TIMEOUT, MAX_CLIENTS, MAX_REQUEST, REQUESTS_PER_POLL, Request, Response};

/// One connected client.
struct Client {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// Dropped if no progress is made by then.
    deadline: Instant,
    /// Peer closed its side: answer what is buffered, then close.
    eof: bool,
    /// We decided to close after the output is flushed.
    closing: bool,
    /// The stream this client is reading ([`Answer::Stream`]).
    watching: Option<u64>,
}

/// How the daemon answers one request.
#[derive(Debug)]
pub enum Answer {
    /// One response line.
    Reply(Response),
    /// The lines of stream `id`, until it ends ([`Streams`]).
    Stream(u64),
}

/// Streamed answers: where [`ControlServer::poll_streams`] gets their
/// lines.
pub trait Streams {
    /// Appends stream `id`'s news to `out` (JSON lines); `true` when its
    /// last line is written.
    fn take(&mut self, id: u64, out: &mut Vec<u8>) -> bool;
    /// The client of stream `id` left.
    fn cancel(&mut self, id: u64);
}

/// No streams: [`ControlServer::poll`].
struct NoStreams;

impl Streams for NoStreams {
    fn take(&mut self, _id: u64, _out: &mut Vec<u8>) -> bool {
        true
    }
    fn cancel(&mut self, _id: u64) {}
}

/// The daemon's end of the control socket.
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file we created, to remove only ours.
    ident: (u64, u64),
    clients: Vec<Client>,
    timeout: Duration,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("path", &self.path)
            .field("clients", &self.clients.len())
            .finish()
    }
}

impl ControlServer {
    /// Create the socket at `path` (mode 0600), creating its directory if
    /// needed. Fails with `AddrInUse` if a daemon already listens there,
    /// and refuses to replace a file that is not a socket.
    pub fn bind(path: &Path) -> io::Result<Self> {
        let (listener, ident) = bind_socket(path)?;
        listener.set_nonblocking(true)?;
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            ident,
            clients: Vec::new(),
            timeout: CLIENT_TIMEOUT,
        })
    }

    /// Drop silent clients after `timeout` instead of [`CLIENT_TIMEOUT`].
    pub fn with_client_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connected clients.
    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// File descriptors of connected clients, to wait on for readability
    /// next to the listener's [`as_raw_fd`](AsRawFd::as_raw_fd), each with
    /// whether to wait for writability too: its client has output the
    /// socket did not take yet (a long answer leaves as fast as the client
    /// reads it, not one socket buffer per wake-up).
    pub fn client_fds(&self) -> impl Iterator<Item = (RawFd, bool)> + '_ {
        self.clients.iter().map(|c| (c.stream.as_raw_fd(), c.written < c.output.len()))
    }

    /// Accept new clients and serve every request that is complete, without
    /// blocking. `handler` answers one request at a time.
    pub fn poll(&mut self, mut handler: impl FnMut(Request) -> Response) {
        self.poll_streams(|r| Answer::Reply(handler(r)), &mut NoStreams);
    }

    /// [`poll`](Self::poll) with streamed answers: a request answered
    /// with [`Answer::Stream`] gets the stream's lines as `streams` has
    /// them, each poll, as fast as the client reads them; the client is
    /// closed after the last. A client that leaves, or stops reading for
    /// the client timeout, has its stream cancelled.
    pub fn poll_streams(&mut self, mut handler: impl FnMut(Request) -> Answer, streams: &mut dyn Streams) {
        let now = Instant::now();
        self.accept(now);
        let timeout = self.timeout;
        self.clients.retain_mut(|c| {
            let keep = serve(c, now, timeout, &mut handler, streams);
            if !keep {
                if let Some(id) = c.watching.take() {
                    streams.cancel(id);
                }
            }
            keep
        });
    }

    /// Only the streams: each streaming client gets what is ready of its
    /// stream; nothing is accepted or read (no request is answered here).
    pub fn pump_streams(&mut self, streams: &mut dyn Streams) {
        let now = Instant::now();
        let timeout = self.timeout;
        self.clients.retain_mut(|c| {
            let Some(id) = c.watching else { return true };
            let keep = flush(c, now, timeout) && pump(c, id, now, timeout, streams);
            if !keep {
                if let Some(id) = c.watching.take() {
                    streams.cancel(id);
                }
            }
            keep
        });
    }

    /// Whether some client is reading a stream (the daemon then pumps
    /// streams after its own work, so lines logged by it leave at once).
    pub fn streaming(&self) -> bool {
        self.clients.iter().any(|c| c.watching.is_some())
    }

    fn accept(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if self.clients.len() >= MAX_CLIENTS || stream.set_nonblocking(true).is_err() {
                        // Best effort: the socket buffer takes a short line.
                        let mut s = stream;
                        let _ = s.set_nonblocking(true);
                        let _ =
                            s.write_all(b"{\"ok\":false,\"error\":\"too many control clients\"}\n");
                        continue;
                    }
                    self.clients.push(Client {
                        stream,
                        input: Vec::new(),
                        output: Vec::new(),
                        written: 0,
                        deadline: now + self.timeout,
                        eof: false,
                        closing: false,
                        watching: None,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing more; anything else (EMFILE, …): try next time.
                Err(_) => return,
            }
        }
    }
}

/// Serve one client; `false` means drop it.
fn serve(
    c: &mut Client,
    now: Instant,
    timeout: Duration,
    handler: &mut impl FnMut(Request) -> Answer,
    streams: &mut dyn Streams,
) -> bool {
    if !flush(c, now, timeout) {
        return false;
    }
    if let Some(id) = c.watching {
        return pump(c, id, now, timeout, streams);
    }
    // Read only when all answers are out: a client that does not read its
    // answers is not read from, so nothing piles up on our side.
    if c.written == c.output.len() && !c.closing {
        if !c.eof {
            let mut buf = [0u8; 4096];
            loop {
                match c.stream.read(&mut buf) {
                    Ok(0) => {
                        c.eof = true;
                        break;
                    }
                    Ok(n) => {
                        c.input.extend_from_slice(&buf[..n]);
                        c.deadline = now + timeout;
                        if c.input.len() > MAX_REQUEST {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
            }
        }
        c.output.clear();
        c.written = 0;
        for _ in 0..REQUESTS_PER_POLL {
            let line: Vec<u8> = match c.input.iter().position(|&b| b == b'\n') {
                Some(i) => c.input.drain(..=i).collect(),
                // A last request without a newline, before EOF.
                None if c.eof && !c.input.is_empty() && c.input.len() <= MAX_REQUEST => {
                    std::mem::take(&mut c.input)
                }
                None => break,
            };
            if line.len() > MAX_REQUEST + 1 {
                answer(
                    c,
                    &Response::Error(format!("request longer than {MAX_REQUEST} bytes")),
                );
                c.closing = true;
                break;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let resp = match serde_json::from_str::<Request>(text) {
                Ok(req) => handler(req),
                Err(e) => Answer::Reply(Response::Error(format!("bad request: {e}"))),
            };
            match resp {
                Answer::Reply(r) => answer(c, &r),
                Answer::Stream(id) => {
                    // The stream is this connection's last answer.
                    c.watching = Some(id);
                    c.input.clear();
                    return pump(c, id, now, timeout, streams);
                }
            }
        }
        if !c.closing && c.input.len() > MAX_REQUEST && !c.input.contains(&b'\n') {
            answer(
                c,
                &Response::Error(format!("request longer than {MAX_REQUEST} bytes")),
            );
            c.input.clear();
            c.closing = true;
        }
        if !flush(c, now, timeout) {
            return false;
        }
    }
    let idle = c.written == c.output.len();
    if idle && (c.eof || c.closing) && c.input.is_empty() {
        return false;
    }
    if idle && c.closing {
        return false;
    }
    now < c.deadline
}

/// Serves a client reading stream `id`: whatever of it is ready once the
/// previous lines are out; `false` when it is done or the client left.
fn pump(c: &mut Client, id: u64, now: Instant, timeout: Duration, streams: &mut dyn Streams) -> bool {
    // Anything it sends now is ignored; reading shows when it hangs up.
    let mut buf = [0u8; 512];
    loop {
        match c.stream.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(_) => return false,
        }
    }
    if c.written == c.output.len() {
        c.output.clear();
        c.written = 0;
        // Waiting for news is progress: the stream has its own limit.
        c.deadline = now + timeout;
        if streams.take(id, &mut c.output) {
            c.watching = None;
            c.closing = true;
        }
        if !flush(c, now, timeout) {
            return false;
        }
    }
    if c.closing && c.written == c.output.len() {
        return false;
    }
    now < c.deadline
}

fn answer(c: &mut Client, r: &Response) {
    match serde_json::to_vec(r) {
        Ok(mut v) => {
            v.push(b'\n');
            c.output.extend_from_slice(&v);
        }
        Err(_) => c
            .output
            .extend_from_slice(b"{\"ok\":false,\"error\":\"cannot encode the response\"}\n"),
    }
}

/// Write what the socket takes; `false` on a broken connection.
fn flush(c: &mut Client, now: Instant, timeout: Duration) -> bool {
    while c.written < c.output.len() {
        match c.stream.write(&c.output[c.written..]) {
            Ok(0) => return false,
            Ok(n) => {
                c.written += n;
                c.deadline = now + timeout;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
    true
}

impl AsRawFd for ControlServer {
    /// The listening socket (readable when a client connects).
    fn as_raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        remove_socket(&self.path, self.ident);
    }
}

/// Create a Unix stream socket at `path`, mode 0600, creating its
/// directory if needed: bound under a temporary name, made 0600, then
/// renamed into place, so it is never reachable with looser permissions.
/// Fails with `AddrInUse` if a daemon already listens there, replaces a
/// socket nobody listens on, and refuses to replace a file that is not a
/// socket. Returns the listener (blocking) and the (device, inode) of the
/// file, for [`remove_socket`].
pub(crate) fn bind_socket(path: &Path) -> io::Result<(UnixListener, (u64, u64))> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another esparto is running on {}", path.display()),
                ));
            }
            // Nobody listens: a stale socket from a daemon that died.
            // The rename below replaces it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        },
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                ),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", tmp.display())))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
    }
    let m = std::fs::symlink_metadata(path)?;
    Ok((listener, (m.dev(), m.ino())))
}

/// Remove the socket file at `path` only if it is still the one
/// [`bind_socket`] created (`ident`): a second daemon started by mistake
/// must not delete the first one's socket.
pub(crate) fn remove_socket(path: &Path, ident: (u64, u64)) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if (m.dev(), m.ino()) == ident {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::control::{ClientError, request};
    use crate::status::Status;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread;

    fn fake_status() -> Status {
        Status {
            version: "9.9.9".into(),
            pid: 42,
            tun: "esparto0".into(),
            ..Status::default()
        }
    }

    fn handler(req: Request) -> Response {
        match req {
            Request::Status => Response::Status(Box::new(fake_status())),
            Request::Sas => Response::Sas(vec![]),
            Request::Up { name, .. } => Response::Done(format!("{name} up")),
            Request::Down { name } => Response::Error(format!("no connection '{name}'")),
            Request::Rekey { name, .. } => Response::Done(format!("{name} rekeyed")),
            Request::Reload => Response::Error("not reloaded".into()),
            Request::ListConns => Response::Conns(vec![]),
            _ => Response::Error("not here".into()),
        }
    }

    /// Runs `poll` in a thread until dropped.
    struct Running {
        stop: Arc<AtomicBool>,
        thread: Option<thread::JoinHandle<ControlServer>>,
    }

    impl Running {
        fn new(mut server: ControlServer) -> Self {
            let stop = Arc::new(AtomicBool::new(false));
            let s = stop.clone();
            let thread = thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    server.poll(handler);
                    thread::sleep(Duration::from_millis(1));
                }
                server
            });
            Running {
                stop,
                thread: Some(thread),
            }
        }

        fn stop(mut self) -> ControlServer {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.take().unwrap().join().unwrap()
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn serves_requests_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/esparto.sock");
        let server = ControlServer::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let running = Running::new(server);
        match request(&path, &Request::Status, T).unwrap() {
            Response::Status(s) => assert_eq!(*s, fake_status()),
            r => panic!("{r:?}"),
        }
        assert_eq!(
            request(&path, &Request::Up { name: "a".into(), watch: false, force: false }, T).unwrap(),
            Response::Done("a up".into())
        );
        assert_eq!(
            request(&path, &Request::Down { name: "b".into() }, T).unwrap(),
            Response::Error("no connection 'b'".into())
        );
        // A second daemon on the same path is refused, and does not remove ours.
        let e = ControlServer::bind(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(
            e.to_string().contains("another esparto is running on"),
            "{e}"
        );
        assert!(path.exists());
        drop(running.stop());
        assert!(!path.exists(), "socket removed at exit");
        match request(&path, &Request::Status, T).unwrap_err() {
            e @ ClientError::NoDaemon(_) => {
                assert!(e.to_string().starts_with("no esparto daemon at "), "{e}");
                assert!(e.to_string().ends_with(": is it running?"), "{e}");
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn raw_protocol_errors_and_pipelining() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let _running = Running::new(ControlServer::bind(&path).unwrap());
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(b"{\"cmd\":\"nope\"}\n\n{\"cmd\":\"up\",\"name\":\"x\"}\nnot json\n")
            .unwrap();
        let mut got = String::new();
        while got.matches('\n').count() < 3 {
            let mut b = [0u8; 1024];
            let n = s.read(&mut b).unwrap();
            assert!(n > 0);
            got.push_str(std::str::from_utf8(&b[..n]).unwrap());
        }
        let lines: Vec<&str> = got.lines().collect();
        assert!(
            lines[0].starts_with(r#"{"ok":false,"error":"bad request: unknown variant `nope`"#),
            "{}",
            lines[0]
        );
        assert_eq!(lines[1], r#"{"ok":true,"message":"x up"}"#);
        assert!(lines[2].starts_with(r#"{"ok":false,"error":"bad request: "#));
    }

    #[test]
    fn oversized_requests_are_refused_and_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let _running = Running::new(ControlServer::bind(&path).unwrap());
        let mut s = UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        // Writing may fail once the server closes; what matters is the answer.
        let _ = s.write_all(&vec![b'x'; MAX_REQUEST + 10]);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        let got = String::from_utf8(got).unwrap();
        assert_eq!(
            got,
            format!("{{\"ok\":false,\"error\":\"request longer than {MAX_REQUEST} bytes\"}}\n")
        );
    }

    #[test]
    fn a_client_with_an_answer_still_going_out_is_waited_on_for_writability() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"{\"cmd\":\"status\"}\n").unwrap();
        // An answer far larger than a socket buffer, not read yet.
        let big = |_: Request| Response::Error("x".repeat(8 << 20));
        let deadline = Instant::now() + T;
        while server.client_count() == 0 && Instant::now() < deadline {
            server.poll(big);
        }
        server.poll(big);
        let fds: Vec<(RawFd, bool)> = server.client_fds().collect();
        assert_eq!(fds, [(fds[0].0, true)], "output pending: wait for POLLOUT");
        // Read it all; once it is out, readability alone.
        s.set_read_timeout(Some(T)).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        while !got.ends_with(b"\n") && Instant::now() < deadline {
            server.poll(big);
            match s.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(got.len() > 8 << 20, "{} bytes", got.len());
        assert_eq!(server.client_fds().map(|(_, w)| w).collect::<Vec<_>>(), [false]);
    }

    #[test]
    fn a_silent_client_stalls_nobody_and_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let mut server = ControlServer::bind(&path)
            .unwrap()
            .with_client_timeout(Duration::from_millis(200));
        let _silent = UnixStream::connect(&path).unwrap();
        let mut half = UnixStream::connect(&path).unwrap();
        half.write_all(b"{\"cmd\":\"sta").unwrap();
        let t0 = Instant::now();
        server.poll(handler);
        assert!(
            t0.elapsed() < Duration::from_millis(100),
            "poll must not block"
        );
        assert_eq!(server.client_count(), 2);
        assert_eq!(server.client_fds().count(), 2);
        // A real client is served while the other two hang around.
        let p = path.clone();
        let asker = thread::spawn(move || request(&p, &Request::Sas, T));
        let deadline = Instant::now() + T;
        while !asker.is_finished() && Instant::now() < deadline {
            server.poll(handler);
            thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(asker.join().unwrap().unwrap(), Response::Sas(vec![]));
        thread::sleep(Duration::from_millis(250));
        server.poll(handler);
        assert_eq!(
            server.client_count(),
            0,
            "silent clients dropped after the timeout"
        );
    }

    /// A stream of three parts: a line now, a line later, the end.
    #[derive(Default)]
    struct Script {
        step: usize,
        cancelled: Vec<u64>,
    }

    impl Streams for Script {
        fn take(&mut self, id: u64, out: &mut Vec<u8>) -> bool {
            self.step += 1;
            let line = match self.step {
                1 => format!("{{\"log\":{{\"level\":\"INFO\",\"target\":\"t\",\"message\":\"stream {id}\"}}}}\n"),
                2 | 3 => String::new(),
                4 => "{\"dropped\":2}\n".to_string(),
                _ => {
                    out.extend_from_slice(b"{\"ok\":true,\"message\":\"done\"}\n");
                    return true;
                }
            };
            out.extend_from_slice(line.as_bytes());
            false
        }

        fn cancel(&mut self, id: u64) {
            self.cancelled.push(id);
        }
    }

    fn stream_handler(req: Request) -> Answer {
        match req {
            Request::Up { watch: true, .. } => Answer::Stream(7),
            req => Answer::Reply(handler(req)),
        }
    }

    #[test]
    fn a_streamed_answer_arrives_line_by_line_then_the_connection_closes() {
        use crate::control::{StreamItem, stream};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let p = path.clone();
        let asker = thread::spawn(move || {
            let mut items = Vec::new();
            let end = stream(&p, &Request::Up { name: "a".into(), watch: true, force: false }, T, &mut |i| items.push(i));
            (end, items)
        });
        let mut script = Script::default();
        let deadline = Instant::now() + T;
        while !asker.is_finished() && Instant::now() < deadline {
            server.poll_streams(stream_handler, &mut script);
            thread::sleep(Duration::from_millis(2));
        }
        let (end, items) = asker.join().unwrap();
        assert_eq!(end.unwrap(), Response::Done("done".into()));
        assert!(matches!(&items[..], [StreamItem::Log { log }, StreamItem::Dropped { dropped: 2 }] if log.message == "stream 7"), "{items:?}");
        assert!(!server.streaming());
        server.poll_streams(stream_handler, &mut script);
        assert_eq!(server.client_count(), 0, "closed after the end");
        assert!(script.cancelled.is_empty(), "an ended stream is not cancelled");
        // Plain requests still get one answer.
        let p = path.clone();
        let asker = thread::spawn(move || request(&p, &Request::Sas, T));
        while !asker.is_finished() {
            server.poll_streams(stream_handler, &mut script);
            thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(asker.join().unwrap().unwrap(), Response::Sas(vec![]));
    }

    #[test]
    fn a_client_that_hangs_up_cancels_its_stream() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"{\"cmd\":\"up\",\"name\":\"a\",\"watch\":true}\n").unwrap();
        // Never ends: only the first line, then nothing.
        struct Forever(Vec<u64>);
        impl Streams for Forever {
            fn take(&mut self, _id: u64, _out: &mut Vec<u8>) -> bool {
                false
            }
            fn cancel(&mut self, id: u64) {
                self.0.push(id);
            }
        }
        let mut f = Forever(Vec::new());
        let deadline = Instant::now() + T;
        while !server.streaming() && Instant::now() < deadline {
            server.poll_streams(stream_handler, &mut f);
            thread::sleep(Duration::from_millis(2));
        }
        assert!(server.streaming());
        // A client waiting with a request is not served by pump_streams.
        let mut other = UnixStream::connect(&path).unwrap();
        other.write_all(b"{\"cmd\":\"sas\"}\n").unwrap();
        server.pump_streams(&mut f);
        other.set_nonblocking(true).unwrap();
        let mut b = [0u8; 64];
        assert_eq!(other.read(&mut b).unwrap_err().kind(), io::ErrorKind::WouldBlock, "no answer from pump_streams");
        drop(s);
        while server.streaming() && Instant::now() < deadline {
            server.pump_streams(&mut f);
            thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(server.client_count(), 0);
        assert_eq!(f.0, [7], "cancelled once");
        // The waiting request is served by the next poll.
        other.set_nonblocking(false).unwrap();
        other.set_read_timeout(Some(T)).unwrap();
        server.poll_streams(stream_handler, &mut f);
        let mut got = Vec::new();
        while !got.ends_with(b"\n") {
            server.poll_streams(stream_handler, &mut f);
            let n = other.read(&mut b).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&b[..n]);
        }
        assert_eq!(got, b"{\"ok\":true,\"sas\":[]}\n");
    }

    #[test]
    fn stale_sockets_are_replaced_other_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        // A listener that goes away without removing its file: a crashed daemon.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        // A process another test spawns may hold a copy of the listener
        // until its exec (see too_many_clients_are_told_so); while it does,
        // the socket is not stale yet. Retry briefly.
        let deadline = Instant::now() + T;
        let server = loop {
            match ControlServer::bind(&path) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(2));
                }
                r => break r.unwrap(),
            }
        };
        drop(server);
        let file = dir.path().join("plain");
        std::fs::write(&file, b"keep me").unwrap();
        let e = ControlServer::bind(&file).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    }

    #[test]
    fn too_many_clients_are_told_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.sock");
        let mut server = ControlServer::bind(&path).unwrap();
        let mut held: Vec<UnixStream> = (0..MAX_CLIENTS)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        server.poll(handler);
        let mut extra = UnixStream::connect(&path).unwrap();
        server.poll(handler);
        assert_eq!(server.client_count(), MAX_CLIENTS);
        extra.set_read_timeout(Some(T)).unwrap();
        let mut got = String::new();
        extra.read_to_string(&mut got).unwrap();
        assert_eq!(
            got,
            "{\"ok\":false,\"error\":\"too many control clients\"}\n"
        );
        held.clear();
        // Hanging up is seen at the next poll, unless a process that another
        // test spawns at that moment holds copies of these sockets between
        // its fork and its exec: CI once saw 19 of 32 still open, and a
        // thread spawning `getconf` in a loop delays 15 of 20,000 closes
        // the same way. So poll until they are gone, with a deadline.
        let deadline = Instant::now() + T;
        server.poll(handler);
        while server.client_count() > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(2));
            server.poll(handler);
        }
        assert_eq!(server.client_count(), 0, "clients that hung up are dropped");
    }
}
