//! The endpoint over real TCP on loopback, with a stand-in control loop
//! that sleeps in `poll` on the wake-up socket as the daemon's does.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use super::*;

/// Runs a control loop that answers scrapes with `answer` until dropped.
struct Control {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl Control {
    fn new(answer: fn() -> anyhow::Result<Status>) -> Self {
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut m = Metrics::start(listener, SystemTime::now()).unwrap();
        let addr = m.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                // Long enough that a scrape is answered only if it wakes us
                // (the endpoint gives up after GATHER_TIMEOUT).
                let mut p = esparto_io::poll::Poller::new();
                let i = p.add(m.fd());
                p.wait(Duration::from_secs(30)).unwrap();
                m.serve(p.readable(i), || {
                    answer().map(|s| Box::new(move || (s, Vec::new())) as Figures)
                });
            }
        });
        Self {
            stop,
            thread: Some(thread),
            addr,
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // One more scrape wakes the loop so it sees the flag.
        let _ = get(self.addr, "GET /metrics HTTP/1.1\r\n\r\n");
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn status() -> anyhow::Result<Status> {
    Ok(Status {
        version: "9.9.9".into(),
        pid: 42,
        ..Status::default()
    })
}

/// Sends `request` raw; returns the whole response.
fn get(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer and close before it has read everything.
    let _ = s.write_all(request.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8(out).unwrap()
}

/// (status line, headers, body).
fn split(resp: &str) -> (&str, &str, &str) {
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    let (status, headers) = head.split_once("\r\n").unwrap();
    (status, headers, body)
}

#[test]
fn scrapes_are_answered_in_the_format_asked_for() {
    let c = Control::new(status);
    let om = get(
        c.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n",
    );
    let (st, headers, body) = split(&om);
    assert_eq!(st, "HTTP/1.1 200 OK");
    assert!(
        headers.contains(&format!("Content-Type: {}", http::OPENMETRICS_TYPE)),
        "{headers}"
    );
    assert!(
        headers.contains(&format!("Content-Length: {}", body.len())),
        "{headers}"
    );
    assert!(headers.contains("Connection: close"));
    assert!(
        body.contains("esparto_build_info{version=\"9.9.9\"} 1\n") && body.ends_with("# EOF\n"),
        "{body}"
    );

    let plain = get(c.addr, "GET /metrics HTTP/1.0\r\n\r\n");
    let (st, headers, body) = split(&plain);
    assert_eq!(st, "HTTP/1.1 200 OK");
    assert!(headers.contains("Content-Type: text/plain; version=0.0.4"), "{headers}");
    assert!(
        body.contains("# TYPE esparto_build_info gauge\n") && !body.contains("# EOF"),
        "{body}"
    );

    // HEAD: the same head, no body.
    let head = get(c.addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
    let (st, headers, body) = split(&head);
    assert_eq!(st, "HTTP/1.1 200 OK");
    assert!(body.is_empty() && !headers.contains("Content-Length: 0"), "{head}");
}

#[test]
fn other_requests_are_refused_and_the_endpoint_goes_on() {
    let c = Control::new(status);
    let cases = [
        ("GET /nope HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (
            "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        ("GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        ("GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK"),
    ];
    for (req, want) in cases {
        let r = get(c.addr, req);
        assert!(r.starts_with(want), "{req:?} → {r}");
    }
    assert!(get(c.addr, "POST / HTTP/1.1\r\n\r\n").contains("\r\nAllow: GET, HEAD\r\n"));
    let long = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_REQUEST_HEAD));
    let r = get(c.addr, &long);
    assert!(r.starts_with("HTTP/1.1 431 "), "{r:?}");
    // A client that connects and hangs up sends nothing and gets nothing.
    drop(TcpStream::connect(c.addr).unwrap());
    assert!(get(c.addr, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
}

#[test]
fn a_failed_gather_or_a_stopped_daemon_is_a_503() {
    let c = Control::new(|| Err(anyhow::anyhow!("worker 1 did not answer within 1s")));
    let r = get(c.addr, "GET /metrics HTTP/1.1\r\n\r\n");
    let (st, _, body) = split(&r);
    assert_eq!(
        (st, body),
        (
            "HTTP/1.1 503 Service Unavailable",
            "worker 1 did not answer within 1s\n"
        )
    );
    drop(c);

    // The control thread's end gone (the daemon is stopping).
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let m = Metrics::start(listener, SystemTime::now()).unwrap();
    let addr = m.local_addr();
    drop(m);
    let r = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
    assert!(
        r.starts_with("HTTP/1.1 503 ") && r.ends_with("the daemon is stopping\n"),
        "{r}"
    );
}

#[test]
fn an_address_in_use_is_refused() {
    let l = Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let e = Listener::bind(l.local_addr()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
}
