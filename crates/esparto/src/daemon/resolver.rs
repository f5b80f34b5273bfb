//! Host names of peers, resolved off the control thread.
//!
//! `remote_addrs` may name hosts (`vpn.example.com`). The IKE engine asks
//! for a name whenever it initiates such a connection
//! (`Event::ResolveHost`); the daemon also asks for every name at start
//! and every [`REFRESH`] (a responder matches a peer against the last
//! answers). Lookups run on [`THREADS`] threads of their own, started on
//! the first question and without capabilities, through the C library's
//! `getaddrinfo` — so `/etc/hosts`, `resolv.conf` and `nsswitch.conf` are
//! read as every other program on the host reads them, and their
//! timeouts apply. A slow name holds one thread; the others go on, and
//! the control thread never waits: answers come back over a channel and
//! a wake-up socket it polls.
//!
//! ```text
//!   control thread ──ask(name)──▶ queue ──▶ esparto-dns-k: getaddrinfo(name)
//!        ▲                                          │
//!        └── answers() ◀── channel + wake byte ◀────┘
//! ```

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{IpAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::warn;

/// Lookup threads: a name that hangs (an unreachable DNS server) holds
/// one, the others serve the rest.
pub(super) const THREADS: usize = 4;
/// Every name is resolved again this often, for responders matching a
/// peer by its name.
pub(super) const REFRESH: Duration = Duration::from_secs(60);

/// A lookup's answer: the addresses in the resolver's order (RFC 6724,
/// duplicates dropped), or why there are none.
pub(super) type Answer = (Arc<str>, Result<Vec<IpAddr>, String>);

/// The lookup threads and their queues.
pub(super) struct Resolver {
    /// Questions; `None` until the threads are started.
    questions: Option<Sender<Arc<str>>>,
    answers_tx: Sender<Answer>,
    answers: Receiver<Answer>,
    /// The control thread's end of the wake-up socket.
    wake: UnixStream,
    /// The threads' end.
    wake_tx: Arc<UnixStream>,
    /// Names asked and not answered yet (each asked once at a time).
    pending: HashSet<Arc<str>>,
}

impl Resolver {
    /// A resolver with no threads yet.
    pub(super) fn new() -> std::io::Result<Self> {
        let (wake, wake_tx) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let (answers_tx, answers) = channel();
        Ok(Resolver { questions: None, answers_tx, answers, wake, wake_tx: Arc::new(wake_tx), pending: HashSet::new() })
    }

    /// The descriptor the control thread polls for answers.
    pub(super) fn fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Looks `name` up (unless it is being looked up already).
    pub(super) fn ask(&mut self, name: &Arc<str>) {
        if self.pending.contains(name) {
            return;
        }
        if self.questions.is_none() {
            match self.spawn() {
                Ok(tx) => self.questions = Some(tx),
                Err(e) => {
                    warn!(host = %name, error = %e, "cannot start the resolver threads");
                    let _ = self.answers_tx.send((name.clone(), Err(format!("no resolver thread: {e}"))));
                    return;
                }
            }
        }
        if let Some(q) = &self.questions {
            if q.send(name.clone()).is_ok() {
                self.pending.insert(name.clone());
            }
        }
    }

    /// The answers that have come in.
    pub(super) fn answers(&mut self) -> Vec<Answer> {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
        let out: Vec<Answer> = self.answers.try_iter().collect();
        for (name, _) in &out {
            self.pending.remove(name);
        }
        out
    }

    /// Starts the lookup threads, without capabilities.
    fn spawn(&self) -> std::io::Result<Sender<Arc<str>>> {
        let (tx, rx) = channel::<Arc<str>>();
        let rx = Arc::new(Mutex::new(rx));
        let (answers, wake) = (self.answers_tx.clone(), self.wake_tx.clone());
        esparto_io::privs::with_no_capabilities(move || {
            for k in 0..THREADS {
                let (rx, answers, wake) = (rx.clone(), answers.clone(), wake.clone());
                std::thread::Builder::new()
                    .name(format!("esparto-dns-{k}"))
                    .spawn(move || serve(&rx, &answers, &wake))?;
            }
            Ok::<(), std::io::Error>(())
        })??;
        Ok(tx)
    }
}

/// One lookup thread: until the control thread drops the queue.
fn serve(rx: &Mutex<Receiver<Arc<str>>>, answers: &Sender<Answer>, wake: &UnixStream) {
    loop {
        let name = match rx.lock() {
            Ok(rx) => match rx.recv() {
                Ok(n) => n,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let answer = lookup(&name);
        if answers.send((name, answer)).is_err() {
            return;
        }
        // A full socket has a wake-up pending already.
        let _ = (&*wake).write(&[1]);
    }
}

/// `getaddrinfo` for `name`, both families.
pub(super) fn lookup(name: &str) -> Result<Vec<IpAddr>, String> {
    let addrs = (name, 0u16).to_socket_addrs().map_err(|e| e.to_string())?;
    let mut out: Vec<IpAddr> = Vec::new();
    for a in addrs {
        // An IPv4 address the resolver mapped into IPv6 is the IPv4 one.
        let ip = match a.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    if out.is_empty() {
        return Err("no address".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Instant;

    #[test]
    fn localhost_resolves_and_a_reserved_name_does_not() {
        // RFC 6761: "localhost" is the loopback, ".invalid" never exists.
        let local = lookup("localhost").unwrap();
        assert!(local.iter().all(IpAddr::is_loopback), "{local:?}");
        assert!(lookup("no-such-host.invalid").is_err());
    }

    #[test]
    fn answers_come_back_through_the_wake_up_socket() {
        let mut r = Resolver::new().unwrap();
        let name: Arc<str> = "localhost".into();
        r.ask(&name);
        r.ask(&name);
        assert_eq!(r.pending.len(), 1, "asked once at a time");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            got = r.answers();
        }
        assert_eq!(got.len(), 1);
        assert!(got[0].1.as_ref().unwrap().iter().all(IpAddr::is_loopback));
        assert!(r.pending.is_empty());
    }
}
