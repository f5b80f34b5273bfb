//! One TCP stream that carries a given corpus, for goodput measurements
//! where the bytes matter (IPComp compresses what it is given).
//!
//! **Why not iperf3.** `iperf3 -F FILE` sends a file's bytes, but it stops
//! at the end of the file: a fast link would need a file of gigabytes, a
//! slow one a test that ends at an unknown time. This sender writes the
//! corpus over and over (a corpus of a few MiB, each TCP segment a
//! different slice of it) for as long as it is told, and the receiver
//! checks every byte it reads against the corpus at that offset, so a
//! tunnel that delivered corrupt data (a decompressor bug) is an error,
//! not a figure.
//!
//! Both ends are threads of the calling process whose sockets were made
//! inside the hosts' namespaces through `Netns::run` (a socket keeps its
//! namespace). Goodput is counted at the receiver over a window that opens
//! after a warm-up (TCP's slow start, the tunnel's first packets).

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use esparto_netns::Netns;
use serde::{Deserialize, Serialize};

/// Bytes handed to one `write`.
const WRITE_CHUNK: usize = 64 * 1024;

/// How long a blocked `write` or `read` waits before looking at the stop flag.
const POLL: Duration = Duration::from_millis(200);

/// How long the receiver may take to drain once the sender stopped.
const DRAIN: Duration = Duration::from_secs(5);

/// One measured window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpRun {
    /// Bytes received (and checked) in the window.
    pub bytes: u64,
    /// The window, seconds.
    pub seconds: f64,
    /// Goodput, Mbit/s of payload.
    pub mbps: f64,
}

/// A stream from `src` to `dst_addr` (in `dst`), ready to measure.
pub struct CorpusStream {
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sender: Option<std::thread::JoinHandle<Result<()>>>,
    receiver: Option<std::thread::JoinHandle<Result<()>>>,
    start: Instant,
}

impl CorpusStream {
    /// Listens in `dst`, connects from `src`, and starts sending `corpus`
    /// in a loop.
    pub fn start(src: &Netns, dst: &Netns, dst_addr: IpAddr, corpus: Arc<Vec<u8>>) -> Result<Self> {
        if corpus.is_empty() {
            bail!("an empty corpus");
        }
        let listener = dst
            .run(|| TcpListener::bind(SocketAddr::new(dst_addr, 0)))
            .context("entering the receiver's namespace")?
            .context("binding the receiver")?;
        let port = listener.local_addr()?.port();
        let stream = src
            .run(|| TcpStream::connect_timeout(&SocketAddr::new(dst_addr, port), Duration::from_secs(5)))
            .context("entering the sender's namespace")?
            .context("connecting through the tunnel")?;
        let (mut rx, _) = listener.accept().context("accepting")?;
        stream.set_write_timeout(Some(POLL))?;
        rx.set_read_timeout(Some(POLL))?;
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (stop, corpus) = (stop.clone(), corpus.clone());
            std::thread::Builder::new().name("tcpgen-send".into()).spawn(move || send(stream, &corpus, &stop))?
        };
        let receiver = {
            let (stop, received) = (stop.clone(), received.clone());
            std::thread::Builder::new()
                .name("tcpgen-recv".into())
                .spawn(move || receive(&mut rx, &corpus, &received, &stop))?
        };
        Ok(Self { received, stop, sender: Some(sender), receiver: Some(receiver), start: Instant::now() })
    }

    /// Waits until `warmup` after the start (TCP's slow start, the
    /// tunnel's first packets).
    pub fn warm_up(&self, warmup: Duration) -> Result<()> {
        if let Some(d) = (self.start + warmup).checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        self.check_alive()
    }

    /// Counts what arrives for `seconds`, from now.
    pub fn measure(&self, seconds: Duration) -> Result<TcpRun> {
        let (t0, b0) = (Instant::now(), self.received.load(Ordering::Relaxed));
        std::thread::sleep(seconds);
        let (t1, b1) = (Instant::now(), self.received.load(Ordering::Relaxed));
        self.check_alive()?;
        let secs = (t1 - t0).as_secs_f64();
        let bytes = b1 - b0;
        Ok(TcpRun { bytes, seconds: secs, mbps: bytes as f64 * 8.0 / secs / 1e6 })
    }

    /// Bytes received since the start.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    fn check_alive(&self) -> Result<()> {
        for (what, h) in [("sender", &self.sender), ("receiver", &self.receiver)] {
            if h.as_ref().is_some_and(std::thread::JoinHandle::is_finished) {
                bail!("the TCP {what} stopped early (see the error at the end of the run)");
            }
        }
        Ok(())
    }

    /// Stops both ends; the error of either, if one failed.
    pub fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let s = join(self.sender.take(), "sender");
        let r = join(self.receiver.take(), "receiver");
        s.and(r)
    }
}

impl Drop for CorpusStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = join(self.sender.take(), "sender");
        let _ = join(self.receiver.take(), "receiver");
    }
}

fn join(h: Option<std::thread::JoinHandle<Result<()>>>, what: &str) -> Result<()> {
    match h {
        Some(h) => h.join().map_err(|_| anyhow::anyhow!("the TCP {what} panicked"))?,
        None => Ok(()),
    }
}

fn send(mut s: TcpStream, corpus: &[u8], stop: &AtomicBool) -> Result<()> {
    let mut at = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let end = (at + WRITE_CHUNK).min(corpus.len());
        match s.write(&corpus[at..end]) {
            Ok(n) => at = (at + n) % corpus.len(),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("sending"),
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    Ok(())
}

fn receive(rx: &mut TcpStream, corpus: &[u8], received: &AtomicU64, stop: &AtomicBool) -> Result<()> {
    let mut buf = vec![0u8; WRITE_CHUNK];
    let mut at = 0usize;
    let mut stopped_at: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            let t = *stopped_at.get_or_insert_with(Instant::now);
            if t.elapsed() > DRAIN {
                return Ok(());
            }
        }
        let n = match rx.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("receiving"),
        };
        // The bytes must be the corpus's, at the stream's offset.
        let mut done = 0;
        while done < n {
            let take = (n - done).min(corpus.len() - at);
            if buf[done..done + take] != corpus[at..at + take] {
                bail!("the receiver got bytes that differ from the corpus (stream offset {})", received.load(Ordering::Relaxed) + done as u64);
            }
            done += take;
            at = (at + take) % corpus.len();
        }
        received.fetch_add(n as u64, Ordering::Relaxed);
    }
}
