//! Just enough HTTP/1.x for a scraper (RFC 9112): read one request head
//! (parsed by `httparse`) within a deadline and a size limit, write one
//! response with a `Content-Length`, close. No bodies are read, no
//! keep-alive, no chunking: a scraper needs none of them.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use prometheus_client::encoding::prometheus_text;

use super::{MAX_REQUEST_HEAD, WRITE_TIMEOUT};

/// Headers a request may carry (a scraper sends half a dozen).
const MAX_HEADERS: usize = 32;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 1024;
/// Bytes written per `write` call (so the deadline is checked between them).
const WRITE_CHUNK: usize = 64 * 1024;
/// After the response, how long and how much of the client's leftover
/// input is read before the connection is closed.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;
/// The OpenMetrics text format's media type (OpenMetrics 1.0, "Overall
/// structure").
pub(super) const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Request {
    /// `GET`, `HEAD`, …
    pub(super) method: String,
    /// The path, without a query.
    pub(super) path: String,
    /// The client accepts OpenMetrics text.
    pub(super) openmetrics: bool,
}

/// Why no request came.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The connection failed or timed out: nothing to answer.
    Io(io::Error),
    /// A request we refuse, and the answer to give.
    Refused(Response),
}

/// Reads a request head from `s` by `deadline`.
pub(super) fn read_request(s: &mut TcpStream, deadline: Instant) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(READ_CHUNK);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::Io(io::ErrorKind::TimedOut.into()));
        }
        s.set_read_timeout(Some(left)).map_err(ReadError::Io)?;
        let mut chunk = [0u8; READ_CHUNK];
        let n = match s.read(&mut chunk) {
            Ok(0) => return Err(ReadError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        // Only the first MAX_REQUEST_HEAD bytes may hold the head.
        if let Some(r) = parse(&buf[..buf.len().min(MAX_REQUEST_HEAD)])? {
            return Ok(r);
        }
        if buf.len() >= MAX_REQUEST_HEAD {
            return Err(ReadError::Refused(Response::text(
                431,
                format!("request head longer than {MAX_REQUEST_HEAD} bytes\n"),
            )));
        }
    }
}

/// The request in `buf`, `None` if it is not complete yet.
fn parse(buf: &[u8]) -> Result<Option<Request>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let target = req.path.unwrap_or("/");
            let path = target.split(['?', '#']).next().unwrap_or(target);
            let openmetrics = req
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("accept"))
                .any(|h| accepts_openmetrics(h.value));
            Ok(Some(Request {
                method: req.method.unwrap_or_default().to_string(),
                path: path.to_string(),
                openmetrics,
            }))
        }
        Err(e) => Err(ReadError::Refused(Response::text(400, format!("bad request: {e}\n")))),
    }
}

/// Whether an `Accept` value lists OpenMetrics text with a non-zero
/// quality (RFC 9110 §12.5.1).
fn accepts_openmetrics(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    value.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let q_zero = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        media.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
    })
}

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Response {
    status: u16,
    content_type: &'static str,
    allow: bool,
    body: Vec<u8>,
}

impl Response {
    /// A plain-text answer.
    pub(super) fn text(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            allow: false,
            body: body.into_bytes(),
        }
    }

    /// The exposition, in the format asked for.
    pub(super) fn metrics(body: String, openmetrics: bool) -> Self {
        let content_type = if openmetrics {
            OPENMETRICS_TYPE
        } else {
            prometheus_text::CONTENT_TYPE
        };
        Self {
            status: 200,
            content_type,
            allow: false,
            body: body.into_bytes(),
        }
    }

    /// 405, with the methods that are allowed.
    pub(super) fn method_not_allowed() -> Self {
        Self {
            allow: true,
            ..Self::text(405, "only GET and HEAD\n".into())
        }
    }

    /// The HTTP status.
    #[cfg(test)]
    pub(super) fn status(&self) -> u16 {
        self.status
    }

    /// Writes the response (headers only for `HEAD`) within
    /// [`WRITE_TIMEOUT`], then closes the connection.
    pub(super) fn write(&self, s: &mut TcpStream, head_only: bool) -> io::Result<()> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            500 => "Internal Server Error",
            _ => "Service Unavailable",
        };
        let mut head = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            head.push_str("Allow: GET, HEAD\r\n");
        }
        head.push_str("\r\n");
        let deadline = Instant::now() + WRITE_TIMEOUT;
        write_by(s, head.as_bytes(), deadline)?;
        if !head_only {
            write_by(s, &self.body, deadline)?;
        }
        s.flush()?;
        let _ = s.shutdown(std::net::Shutdown::Write);
        linger(s);
        Ok(())
    }
}

/// Reads what the client still sends, until it closes (at most
/// [`LINGER_BYTES`] within [`LINGER`]): closing a socket with unread
/// input makes the kernel reset the connection, and the client may lose
/// the response it has not read yet (a refused oversized request).
fn linger(s: &mut TcpStream) {
    let deadline = Instant::now() + LINGER;
    let mut left = LINGER_BYTES;
    let mut buf = [0u8; READ_CHUNK];
    while left > 0 {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() || s.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Writes all of `data` by `deadline`.
fn write_by(s: &mut TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        let n = data.len().min(WRITE_CHUNK);
        match s.write(&data[..n]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn req(text: &str) -> Request {
        parse(text.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn requests_are_parsed_and_formats_negotiated() {
        // What Prometheus 2.x/3.x sends.
        let r = req(
            "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1\r\n\r\n",
        );
        assert_eq!(
            r,
            Request {
                method: "GET".into(),
                path: "/metrics".into(),
                openmetrics: true
            }
        );
        // curl: Prometheus text.
        assert!(!req("GET /metrics HTTP/1.1\r\nAccept: */*\r\n\r\n").openmetrics);
        assert!(!req("HEAD /metrics HTTP/1.0\r\n\r\n").openmetrics);
        assert!(!req("GET / HTTP/1.1\r\naccept: application/openmetrics-text; q=0\r\n\r\n").openmetrics);
        assert!(req("GET / HTTP/1.1\r\nACCEPT: text/plain, Application/OpenMetrics-Text\r\n\r\n").openmetrics);
        // Not complete yet; not HTTP.
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nHost: a\r\n").unwrap(), None);
        match parse(b"GET /metrics HTTP/9\r\n\r\n") {
            Err(ReadError::Refused(r)) => assert_eq!(r.status(), 400),
            other => panic!("{other:?}"),
        }
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(MAX_HEADERS + 1));
        match parse(many.as_bytes()) {
            Err(ReadError::Refused(r)) => assert_eq!(r.status(), 400),
            other => panic!("{other:?}"),
        }
    }
}
