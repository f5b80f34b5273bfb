//! The client's end: one request, one answer, bounded by a timeout; or a
//! [`Session`] of such requests over one connection.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{MAX_RESPONSE, Request, Response, StreamItem};

/// Why a request to the daemon failed.
#[derive(Debug)]
pub enum ClientError {
    /// Nothing listens at the path.
    NoDaemon(PathBuf),
    /// No (complete) answer within the timeout.
    Timeout(PathBuf),
    /// The answer was not a response.
    Protocol(String),
    /// Another I/O error (permission denied, …).
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NoDaemon(p) => {
                write!(f, "no esparto daemon at {}: is it running?", p.display())
            }
            ClientError::Timeout(p) => {
                write!(f, "the daemon at {} did not answer in time", p.display())
            }
            ClientError::Protocol(m) => write!(f, "unexpected answer from the daemon: {m}"),
            ClientError::Io(p, e) if e.kind() == io::ErrorKind::PermissionDenied => {
                write!(
                    f,
                    "{}: {e} (the control socket is mode 0600: run as the daemon's user)",
                    p.display()
                )
            }
            ClientError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for ClientError {}

/// Send one request to the daemon at `path` and wait at most `timeout`
/// for the answer.
pub fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Response, ClientError> {
    let mut first = None;
    exchange(path, req, timeout, &mut |line| {
        first = Some(serde_json::from_slice(line).map_err(|e| ClientError::Protocol(e.to_string()))?);
        Ok(false)
    })?;
    first.ok_or_else(|| ClientError::Protocol("no answer".into()))
}

/// Send a request whose answer is streamed ([`StreamItem`]s), hand each
/// log line and drop count to `each` as it arrives, and return the
/// outcome; all within `timeout`.
pub fn stream(
    path: &Path,
    req: &Request,
    timeout: Duration,
    each: &mut dyn FnMut(StreamItem),
) -> Result<Response, ClientError> {
    let mut end = None;
    exchange(path, req, timeout, &mut |line| {
        match serde_json::from_slice(line).map_err(|e| ClientError::Protocol(e.to_string()))? {
            StreamItem::End(r) => {
                end = Some(r);
                return Ok(false);
            }
            item => each(item),
        }
        Ok(true)
    })?;
    end.ok_or_else(|| ClientError::Protocol("no answer".into()))
}

/// Sends `req`, then hands each answer line to `line_fn` while it returns
/// `true`.
fn exchange(
    path: &Path,
    req: &Request,
    timeout: Duration,
    line_fn: &mut dyn FnMut(&[u8]) -> Result<bool, ClientError>,
) -> Result<(), ClientError> {
    let mut s = connect(path)?;
    exchange_on(&mut s, path, req, timeout, line_fn).map_err(|(e, _)| e)
}

fn connect(path: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ClientError::NoDaemon(path.to_path_buf())
        }
        _ => ClientError::Io(path.to_path_buf(), e),
    })
}

/// [`exchange`] on the connection `s`. An error says also whether the
/// daemon may have seen the request (false: the request could not be
/// written, or the connection closed before a byte of answer).
fn exchange_on(
    s: &mut UnixStream,
    path: &Path,
    req: &Request,
    timeout: Duration,
    line_fn: &mut dyn FnMut(&[u8]) -> Result<bool, ClientError>,
) -> Result<(), (ClientError, bool)> {
    let io_err = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            ClientError::Timeout(path.to_path_buf())
        }
        _ => ClientError::Io(path.to_path_buf(), e),
    };
    let deadline = Instant::now() + timeout;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| ClientError::Timeout(path.to_path_buf()))
    };
    let mut line = serde_json::to_vec(req).map_err(|e| (ClientError::Protocol(e.to_string()), false))?;
    line.push(b'\n');
    s.set_write_timeout(Some(remaining().map_err(|e| (e, false))?)).map_err(|e| (io_err(e), false))?;
    s.write_all(&line).map_err(|e| (io_err(e), false))?;
    let mut got = Vec::new();
    let mut answered = false;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let seen = |e| (e, true);
        s.set_read_timeout(Some(remaining().map_err(seen)?)).map_err(|e| seen(io_err(e)))?;
        match s.read(&mut buf) {
            Ok(0) => {
                return Err((
                    ClientError::Protocol("connection closed before a complete answer".into()),
                    answered,
                ));
            }
            Ok(n) => {
                answered = true;
                // Only the bytes just read can end a line: an answer of
                // megabytes (the SA list of a hub) is scanned once.
                let mut from = got.len();
                got.extend_from_slice(&buf[..n]);
                while let Some(i) = got[from..].iter().position(|&b| b == b'\n').map(|i| from + i) {
                    let more = line_fn(&got[..i]).map_err(seen)?;
                    if !more {
                        return Ok(());
                    }
                    got.drain(..=i);
                    from = 0;
                }
                if got.len() > MAX_RESPONSE {
                    return Err(seen(ClientError::Protocol(format!(
                        "answer longer than {MAX_RESPONSE} bytes"
                    ))));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(seen(io_err(e))),
        }
    }
}

/// Requests to the daemon at one path over one connection, kept while
/// they follow each other closely (well within the daemon's
/// [`super::CLIENT_TIMEOUT`] for a silent client): a client that sends
/// many (a VICI client loading a thousand connections) costs the daemon
/// one connection instead of one per request.
#[derive(Debug)]
pub struct Session {
    path: PathBuf,
    open: Option<(UnixStream, Instant)>,
}

impl Session {
    /// How long a connection is kept unused.
    pub const KEEP: Duration = Duration::from_secs(1);

    /// A session with the daemon at `path`; it connects on the first request.
    pub fn new(path: &Path) -> Self {
        Session { path: path.to_path_buf(), open: None }
    }

    /// [`request`] over the session's connection. A kept connection the
    /// daemon closed before it saw the request (it restarted) is replaced
    /// and the request sent again, once.
    pub fn request(&mut self, req: &Request, timeout: Duration) -> Result<Response, ClientError> {
        let kept = self.open.take().filter(|(_, used)| used.elapsed() < Self::KEEP).map(|(s, _)| s);
        let reused = kept.is_some();
        let mut s = match kept {
            Some(s) => s,
            None => connect(&self.path)?,
        };
        let mut first = None;
        let mut take = |line: &[u8]| {
            first = Some(serde_json::from_slice(line).map_err(|e| ClientError::Protocol(e.to_string()))?);
            Ok(false)
        };
        match exchange_on(&mut s, &self.path, req, timeout, &mut take) {
            Ok(()) => {}
            Err((_, false)) if reused => {
                s = connect(&self.path)?;
                exchange_on(&mut s, &self.path, req, timeout, &mut take).map_err(|(e, _)| e)?;
            }
            Err((e, _)) => return Err(e),
        }
        let answer = first.ok_or_else(|| ClientError::Protocol("no answer".into()))?;
        self.open = Some((s, Instant::now()));
        Ok(answer)
    }
}
