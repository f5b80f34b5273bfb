//! The hand-over of datagrams that belong to the control thread from the
//! workers to it: bounded, and without an allocation per datagram.
//!
//! A datagram for the control socket reaches a worker only when UDP GRO
//! coalesced it behind data traffic: the steering program looks at the
//! first datagram of a GRO train alone ([`crate::steer`]), and the
//! datapath then takes every datagram of the train for what its own bytes
//! say, passing on what is not its own (for the gateway: IKE behind the
//! non-ESP marker, RFC 3948 §2.2). For honest peers that is rare, but
//! anyone can build such trains: a GSO super-packet whose first segment
//! carries a steering key and whose 59 others do not is steered whole to a
//! worker (veth and loopback keep it whole; with `UDP_GRO` on the data
//! sockets a NIC's GRO builds the same from the wire). So this path must
//! take whatever arrives at line rate without growing, and without making
//! the worker wait:
//!
//! - each worker owns a pool of at most [`CONTROL_POOL`] buffers, made on
//!   first use (an idle gateway holds none) and reused from then on. A
//!   datagram is copied into a free buffer, which travels to the control
//!   thread inside a [`ControlDatagram`]; dropping that gives the buffer
//!   back to its worker's free list (a channel as large as the pool, so
//!   giving back never fails while the worker runs);
//! - the queue to the control thread is a bounded channel with room for
//!   every worker's whole pool, so a worker's send never waits either;
//! - with no free buffer (the control thread is behind) the datagram is
//!   dropped and counted: `control_queue_full` in `esparto status`.
//!
//! So memory stays at workers × [`CONTROL_POOL`] × [`MAX_CONTROL_DATAGRAM`]
//! at most, however fast the trains come, and the worker keeps on with its
//! own traffic. A control protocol must bear the loss of a datagram
//! dropped here (IKE retransmits, RFC 7296 §2.1); datagrams reaching the
//! control socket directly do not pass through here.

use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

/// Buffers per worker: datagrams one worker may have on their way to the
/// control thread at once.
pub const CONTROL_POOL: usize = 64;

/// Largest datagram forwarded (the largest UDP payload fits).
pub const MAX_CONTROL_DATAGRAM: usize = 65_535;

/// A datagram a worker received for the control thread. Its
/// buffer goes back to the worker's pool when this is dropped.
pub struct ControlDatagram {
    worker: usize,
    peer: Option<SocketAddr>,
    buf: Vec<u8>,
    home: SyncSender<Vec<u8>>,
}

impl ControlDatagram {
    /// The worker that received it.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// Its source address.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The UDP payload.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl std::fmt::Debug for ControlDatagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlDatagram")
            .field("worker", &self.worker)
            .field("peer", &self.peer)
            .field("len", &self.buf.len())
            .finish()
    }
}

impl Drop for ControlDatagram {
    fn drop(&mut self) {
        // Back to the worker's free list; if the worker has stopped, the
        // buffer is freed here.
        let _ = self.home.try_send(std::mem::take(&mut self.buf));
    }
}

/// Why a datagram was not handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No free buffer (the control thread is behind), or the datagram is
    /// larger than a buffer: `control_queue_full`.
    Full,
    /// The control thread is gone.
    Closed,
}

/// A bounded channel from `workers` workers to the control thread.
pub fn control_channel(workers: usize) -> (ControlTx, ControlRx) {
    let (tx, rx) = mpsc::sync_channel(workers.max(1) * CONTROL_POOL);
    (ControlTx { tx }, ControlRx { rx })
}

/// The workers' side of [`control_channel`], before it is split per worker.
#[derive(Debug, Clone)]
pub struct ControlTx {
    tx: SyncSender<ControlDatagram>,
}

impl ControlTx {
    /// Worker `worker`'s end, with its own pool of buffers.
    pub fn for_worker(&self, worker: usize) -> ControlSender {
        let (home, free) = mpsc::sync_channel(CONTROL_POOL);
        ControlSender { worker, tx: self.tx.clone(), free, home, made: 0 }
    }
}

/// One worker's end: copies datagrams into pooled buffers and queues them.
#[derive(Debug)]
pub struct ControlSender {
    worker: usize,
    tx: SyncSender<ControlDatagram>,
    free: Receiver<Vec<u8>>,
    home: SyncSender<Vec<u8>>,
    /// Buffers made so far (at most [`CONTROL_POOL`]).
    made: usize,
}

impl ControlSender {
    /// Queue a copy of `bytes` from `peer` for the control thread. Never
    /// waits; allocates only while the pool is still growing.
    pub fn send(&mut self, peer: Option<SocketAddr>, bytes: &[u8]) -> Result<(), Refused> {
        if bytes.len() > MAX_CONTROL_DATAGRAM {
            return Err(Refused::Full);
        }
        let mut buf = match self.free.try_recv() {
            Ok(b) => b,
            Err(_) if self.made < CONTROL_POOL => {
                self.made += 1;
                // Not zeroed: only the bytes written are ever touched.
                Vec::with_capacity(MAX_CONTROL_DATAGRAM)
            }
            Err(_) => return Err(Refused::Full),
        };
        buf.clear();
        buf.extend_from_slice(bytes);
        let d = ControlDatagram { worker: self.worker, peer, buf, home: self.home.clone() };
        // Dropping a refused datagram returns its buffer.
        self.tx.try_send(d).map_err(|e| match e {
            TrySendError::Full(_) => Refused::Full,
            TrySendError::Disconnected(_) => Refused::Closed,
        })
    }

    /// Buffers made so far.
    pub fn buffers(&self) -> usize {
        self.made
    }
}

/// The control thread's side of [`control_channel`].
#[derive(Debug)]
pub struct ControlRx {
    rx: Receiver<ControlDatagram>,
}

impl ControlRx {
    /// The next queued datagram, if any (never waits).
    pub fn try_recv(&self) -> Option<ControlDatagram> {
        self.rx.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn peer() -> Option<SocketAddr> {
        Some("192.0.2.9:4500".parse().unwrap())
    }

    #[test]
    fn bounded_by_the_pool_and_recycled() {
        let (tx, rx) = control_channel(2);
        let mut w = tx.for_worker(1);
        for i in 0..CONTROL_POOL {
            w.send(peer(), &[0, 0, 0, 0, i as u8]).unwrap();
        }
        // The control thread has not read anything: the pool is spent.
        assert_eq!(w.send(peer(), b"one too many"), Err(Refused::Full));
        assert_eq!(w.buffers(), CONTROL_POOL);
        let d = rx.try_recv().unwrap();
        assert_eq!((d.worker(), d.peer(), d.bytes()), (1, peer(), &[0u8, 0, 0, 0, 0][..]));
        assert_eq!(w.send(peer(), b"still full"), Err(Refused::Full), "the buffer is still held");
        drop(d);
        // Its buffer is back: one more fits, and no buffer is made for it.
        w.send(peer(), b"recycled").unwrap();
        assert_eq!(w.buffers(), CONTROL_POOL);
        let mut got = Vec::new();
        while let Some(d) = rx.try_recv() {
            got.push(d.bytes().to_vec());
        }
        assert_eq!(got.len(), CONTROL_POOL);
        assert_eq!(got.last().unwrap(), b"recycled");
        assert_eq!(got[0], [0, 0, 0, 0, 1]);
    }

    #[test]
    fn workers_have_pools_of_their_own() {
        let (tx, rx) = control_channel(2);
        let (mut a, mut b) = (tx.for_worker(0), tx.for_worker(1));
        for _ in 0..CONTROL_POOL {
            a.send(peer(), b"a").unwrap();
        }
        assert_eq!(a.send(peer(), b"a"), Err(Refused::Full));
        // A flood through worker 0 leaves worker 1 its whole pool.
        for _ in 0..CONTROL_POOL {
            b.send(peer(), b"b").unwrap();
        }
        let mut n = 0;
        while rx.try_recv().is_some() {
            n += 1;
        }
        assert_eq!(n, 2 * CONTROL_POOL);
    }

    #[test]
    fn oversized_and_closed_are_refused() {
        let (tx, rx) = control_channel(1);
        let mut w = tx.for_worker(0);
        assert_eq!(w.send(peer(), &vec![0u8; MAX_CONTROL_DATAGRAM + 1]), Err(Refused::Full));
        w.send(peer(), &vec![7u8; MAX_CONTROL_DATAGRAM]).unwrap();
        let d = rx.try_recv().unwrap();
        drop(rx);
        assert_eq!(w.send(peer(), b"x"), Err(Refused::Closed));
        // A datagram that outlives its worker frees its buffer.
        drop(w);
        drop(tx);
        assert_eq!(d.bytes().len(), MAX_CONTROL_DATAGRAM);
        drop(d);
    }
}
