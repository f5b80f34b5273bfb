//! Worker threads: one per core, each owning a TUN queue, a UDP socket of the
//! reuseport group and a command queue, and driving a [`Datapath`].
//!
//! ```text
//! loop {
//!     poll(tun_queue_k, udp_socket_k, eventfd_k)
//!     eventfd:       drain commands       -> Datapath::on_command
//!     TUN readable:  recv_batch (split)   -> Datapath::outbound -> UDP send_batch (GSO)
//!     UDP readable:  recv_batch (GRO)     -> Datapath::inbound  -> TUN send_batch (GRO)
//!                                                              \-> control channel
//!     tick due:      Datapath::on_tick
//! }
//! ```
//!
//! The shape follows quinn's driver/core split: the I/O loop here knows
//! nothing of the protocol; the [`Datapath`] (for the gateway, ESP) sees
//! batches and an explicit `now`, so it can be tested without sockets. All batches are
//! allocated when the thread starts; the loop itself does not allocate, lock
//! or log. Threads are pinned round-robin to the CPUs the process may use
//! (`sched_setaffinity`), so more workers than cores still works.
//!
//! **Every queue between threads is bounded**, and a worker never waits
//! for the control thread:
//!
//! - *commands* (control → worker): a `sync_channel` of
//!   [`COMMAND_QUEUE`] per worker, with an `eventfd` that wakes the worker
//!   from `poll`. When it is full the control thread wakes the worker and
//!   waits for room, rather than drop: a lost command would be a lost SA
//!   install or removal. Waiting cannot deadlock, because a worker drains
//!   its whole queue at every wake-up and itself only ever *tries* to send
//!   (events, datagrams, snapshots): nothing a worker does waits for the
//!   control thread. If the worker has stopped, the send fails at once
//!   (the channel is closed) and the command comes back to the caller.
//!   Commands come from the control plane itself (installs by
//!   authenticated peers, `status`), not from packets, so waiting is
//!   back-pressure on the control plane, not something a sender can force;
//! - *control datagrams* (worker → control): a bounded pool per worker,
//!   dropped and counted when spent ([`crate::control`]);
//! - *events* (worker → control): bounded by the datapath, which holds an
//!   event back when the channel is full and retries later.
//!
//! A worker that stops without being told to — it panicked, or its TUN
//! queue was closed under it — records why ([`Workers::failure`]); the
//! thread that owns the [`Workers`] is expected to look after every loop
//! and stop the whole process with that reason, rather than run on with
//! part of its data plane gone.
//!
//! Datagrams that reach a worker but belong to the control socket —
//! coalesced behind data traffic by UDP GRO (see [`crate::steer`]) — go to
//! the `to_control` batch and from there, copied into the pool, to the
//! control thread.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::batch::{RxBatch, TxBatch};
use crate::control::ControlTx;
use crate::link::LinkVerdict;
use crate::sys::{self, EventFd};
use crate::tun::{TunQueue, TunStats};
use crate::udp::{UdpSocket, UdpStats};

mod event_loop;
mod gaps;
use event_loop::WorkerLoop;
pub use gaps::{LOOP_GAP_BOUNDS_US, LoopGaps};

/// The data path a worker drives: for the gateway, ESP.
pub trait Datapath: Send + 'static {
    /// Control-plane messages (install SA, delete SA, ...).
    type Command: Send + 'static;

    /// A command from the control plane, applied between batches. `io` is
    /// the worker's I/O counters as of now (for statistics snapshots).
    fn on_command(&mut self, now: Instant, cmd: Self::Command, io: &IoStats);

    /// Plain IP packets read from this worker's TUN queue; push datagrams
    /// (with their destination) into `out`, and packets for the
    /// TUN itself (ICMP errors about packets too big for the tunnel) into
    /// `to_tun`.
    ///
    /// Process packets from index `from` on, and return the index of the
    /// first one not processed: stop early when `out` or `to_tun` is full,
    /// and the loop sends them and calls again with the rest.
    fn outbound(&mut self, now: Instant, pkts: &mut RxBatch, from: usize, out: &mut TxBatch, to_tun: &mut TxBatch)
    -> usize;

    /// Datagrams read from this worker's UDP socket; push decrypted inner
    /// packets into `to_tun`, and datagrams for the control thread with
    /// their source address as destination into `to_control`.
    ///
    /// Like `outbound`, process from index `from` and return where it
    /// stopped (a GRO batch can hold more datagrams than `to_tun` has slots).
    fn inbound(
        &mut self,
        now: Instant,
        dgrams: &mut RxBatch,
        from: usize,
        to_tun: &mut TxBatch,
        to_control: &mut TxBatch,
    ) -> usize;

    /// The UDP socket took fewer datagrams than `outbound` produced (its
    /// buffer is full): the link pushes back.
    fn on_send_pushback(&mut self) {}

    /// Whether the worker should measure its link (see [`crate::link`]):
    /// sample its UDP socket's send queue at most once a millisecond and
    /// report each interval's verdict with [`Datapath::on_link`].
    fn wants_link_verdicts(&self) -> bool {
        false
    }

    /// The link below the UDP socket over the last interval: saturated at
    /// a measured rate, or keeping up.
    fn on_link(&mut self, verdict: LinkVerdict) {
        let _ = verdict;
    }

    /// Called every [`WorkerConfig::tick`] (lifetimes, counters, timers).
    fn on_tick(&mut self, now: Instant) {
        let _ = now;
    }
}

/// Batch sizes and timing of every worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Slots for packets read from the TUN (one packet per slot).
    pub tun_rx_slots: usize,
    /// Bytes per TUN read slot after the headroom (≥ the TUN MTU).
    pub tun_rx_slot_len: usize,
    /// Headroom in front of each TUN packet (room for in-place headers).
    pub tun_rx_headroom: usize,
    /// Slots for `recvmmsg` (each holds a whole GRO buffer).
    pub udp_rx_slots: usize,
    /// Datagrams the outbound path may produce per batch.
    pub udp_tx_slots: usize,
    /// Bytes per outbound datagram slot.
    pub udp_tx_slot_len: usize,
    /// Packets the inbound path may produce per batch.
    pub tun_tx_slots: usize,
    /// Bytes per TUN write slot: bounds GRO coalescing (64 KiB = full).
    pub tun_tx_slot_len: usize,
    /// Datagrams for the control thread per inbound batch.
    pub control_slots: usize,
    /// Interval of [`Datapath::on_tick`].
    pub tick: Duration,
    /// Pin worker k to the k-th CPU of `cpus` (round-robin).
    pub pin: bool,
    /// CPUs to pin to, in order (empty: the CPUs this process may use, in
    /// ascending order).
    pub cpus: Vec<usize>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            tun_rx_slots: 128,
            tun_rx_slot_len: 1500 + 64,
            tun_rx_headroom: 64,
            udp_rx_slots: 16,
            udp_tx_slots: 128,
            udp_tx_slot_len: 1600,
            tun_tx_slots: 128,
            tun_tx_slot_len: 65_535,
            control_slots: 16,
            tick: Duration::from_millis(100),
            pin: true,
            cpus: Vec::new(),
        }
    }
}

pub use crate::control::ControlDatagram;

/// Commands queued per worker before the control thread waits for room
/// (see the module essay).
pub const COMMAND_QUEUE: usize = 1024;

/// A worker's I/O counters (its TUN queue, its socket, what it dropped):
/// what it returns when it stops, and what a [`Datapath`] sees with every
/// command (for statistics snapshots).
#[derive(Debug, Clone, Default)]
pub struct IoStats {
    /// Worker index.
    pub index: usize,
    /// CPU it was pinned to, if pinning succeeded.
    pub cpu: Option<usize>,
    /// TUN queue counters.
    pub tun: TunStats,
    /// UDP socket counters.
    pub udp: UdpStats,
    /// Outbound datagrams dropped because the socket buffer was full.
    pub udp_tx_dropped: u64,
    /// Outbound datagrams dropped because the send failed outright.
    pub udp_tx_failed: u64,
    /// Control datagrams dropped because the worker's pool for the control
    /// thread was spent ([`crate::control`]).
    pub control_queue_full: u64,
    /// Control datagrams dropped (no control channel, or it was closed).
    pub control_dropped: u64,
    /// Receive/send errors other than "would block".
    pub io_errors: u64,
    /// Commands applied.
    pub commands: u64,
    /// Loop iterations.
    pub loops: u64,
    /// Time between the starts of consecutive loop iterations (see
    /// [`LoopGaps`]).
    pub loop_gaps: LoopGaps,
    /// Time the worker thread spent runnable but waiting for a CPU, as of
    /// its last tick (the scheduler's run delay; `None` where the kernel
    /// does not say).
    pub cpu_wait: Option<Duration>,
}

/// Why a worker stopped without being told to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureCause {
    /// It panicked, with this message.
    Panicked(String),
    /// Its TUN queue was closed (the device was deleted).
    TunClosed,
}

/// A worker that stopped on its own ([`Workers::failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFailure {
    /// Worker index.
    pub index: usize,
    /// Why.
    pub cause: FailureCause,
}

impl std::fmt::Display for WorkerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            FailureCause::Panicked(msg) => write!(f, "worker {} panicked: {msg}", self.index),
            FailureCause::TunClosed => write!(f, "worker {} stopped: its TUN queue was closed", self.index),
        }
    }
}

impl std::error::Error for WorkerFailure {}

/// The text of a panic's payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".into())
}

impl IoStats {
    /// The I/O layer's drops by reason, as `esparto status` names them
    /// beside the datapath's: every datagram or packet that a worker
    /// received or was given and did not deliver.
    pub fn drops(&self) -> [(&'static str, u64); 8] {
        [
            // Control datagrams the control thread had no room for.
            ("control_queue_full", self.control_queue_full),
            // Control datagrams with no control thread to take them.
            ("control_closed", self.control_dropped),
            // Outbound datagrams: socket send buffer full, or the send failed.
            ("send_buffer_full", self.udp_tx_dropped),
            ("send_error", self.udp_tx_failed + self.udp.tx_errors + self.udp.tx_no_dst),
            // Received datagrams larger than a receive slot, or beyond the
            // batch's entries.
            ("rx_truncated", self.udp.rx_truncated),
            ("rx_overflow", self.udp.rx_overflow),
            // TUN reads refused (bad virtio header, or too many segments
            // for the batch: one count per super-packet), and packets lost
            // in failed TUN writes.
            ("tun_rx_error", self.tun.rx_malformed + self.tun.rx_split_overflow),
            ("tun_write_error", self.tun.tx_failed),
        ]
    }
}

/// What a worker thread shares with its [`Workers`] handle.
struct Shared {
    /// Wakes the worker from `poll` (commands queued, or stop).
    wake: EventFd,
    /// Set by [`Workers`] to stop the worker.
    stop: AtomicBool,
    /// Set once by the worker thread if it stops on its own.
    failure: OnceLock<FailureCause>,
}

/// Running worker threads; stops and joins them on drop.
pub struct Workers<C: Send + 'static> {
    senders: Vec<mpsc::SyncSender<C>>,
    shared: Vec<Arc<Shared>>,
    threads: Vec<JoinHandle<IoStats>>,
}

impl<C: Send + 'static> std::fmt::Debug for Workers<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("len", &self.threads.len())
            .finish()
    }
}

impl<C: Send + 'static> Workers<C> {
    /// Spawn one worker per `(tun queue, udp socket, datapath)` triple; all
    /// three vectors must have the same length. `control` receives the
    /// datagrams a datapath passes on (each worker gets its own pool of
    /// buffers).
    pub fn spawn<D: Datapath<Command = C>>(
        cfg: &WorkerConfig,
        tun: Vec<TunQueue>,
        udp: Vec<UdpSocket>,
        datapaths: Vec<D>,
        control: Option<ControlTx>,
    ) -> io::Result<Self> {
        let n = tun.len();
        if n == 0 || udp.len() != n || datapaths.len() != n {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "need equally many TUN queues, UDP sockets and datapaths (at least one)",
            ));
        }
        if cfg.tun_rx_slots == 0 || cfg.udp_rx_slots == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty batches"));
        }
        let cpus = if cfg.cpus.is_empty() { sys::allowed_cpus().unwrap_or_default() } else { cfg.cpus.clone() };
        let mut w = Self {
            senders: Vec::new(),
            shared: Vec::new(),
            threads: Vec::new(),
        };
        for (k, ((t, u), d)) in tun.into_iter().zip(udp).zip(datapaths).enumerate() {
            let (tx, rx) = mpsc::sync_channel(COMMAND_QUEUE);
            let shared = Arc::new(Shared {
                wake: EventFd::new()?,
                stop: AtomicBool::new(false),
                failure: OnceLock::new(),
            });
            let cpu = if cfg.pin && !cpus.is_empty() {
                Some(cpus[k % cpus.len()])
            } else {
                None
            };
            let ctl = control.as_ref().map(|c| c.for_worker(k));
            let worker = WorkerLoop::new(k, cfg, t, u, d, rx, shared.clone(), ctl);
            let sh = shared.clone();
            let h = std::thread::Builder::new().name(format!("esparto-w{k}")).spawn(move || {
                // The worker is dropped with the unwinding, and nothing it
                // touched is used again: unwind safety is not in question.
                match panic::catch_unwind(AssertUnwindSafe(|| worker.run(cpu))) {
                    Ok(report) => {
                        if !sh.stop.load(Ordering::Acquire) {
                            let _ = sh.failure.set(FailureCause::TunClosed);
                        }
                        report
                    }
                    Err(payload) => {
                        let _ = sh.failure.set(FailureCause::Panicked(panic_message(payload.as_ref())));
                        panic::resume_unwind(payload)
                    }
                }
            })?;
            w.senders.push(tx);
            w.shared.push(shared);
            w.threads.push(h);
        }
        Ok(w)
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    /// Whether there are no workers.
    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Queue a command for worker `k` and wake it; with [`COMMAND_QUEUE`]
    /// commands already queued, wait until the worker has made room (see
    /// the module essay). Gives the command back if the worker does not
    /// exist or has stopped.
    pub fn send(&self, k: usize, cmd: C) -> Result<(), C> {
        let (Some(tx), Some(sh)) = (self.senders.get(k), self.shared.get(k)) else {
            return Err(cmd);
        };
        match tx.try_send(cmd) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Disconnected(c)) => return Err(c),
            Err(mpsc::TrySendError::Full(c)) => {
                // The worker drains its whole queue when woken.
                let _ = sh.wake.notify();
                tx.send(c).map_err(|e| e.0)?;
            }
        }
        // A failed wake-up only delays the command to the next tick.
        let _ = sh.wake.notify();
        Ok(())
    }

    /// The first worker (by index) that has stopped without being told to,
    /// and why. Cheap (one atomic load per worker): meant to be asked on
    /// every turn of the owner's loop.
    pub fn failure(&self) -> Option<WorkerFailure> {
        self.shared
            .iter()
            .enumerate()
            .find_map(|(index, sh)| sh.failure.get().map(|cause| WorkerFailure { index, cause: cause.clone() }))
    }

    /// Stop every worker, join it, and collect the I/O counters of those that
    /// stopped cleanly (a worker that panicked has none; [`Self::failure`]
    /// says why). The workers' TUN queues and sockets are closed when this
    /// returns.
    pub fn shutdown(mut self) -> Vec<IoStats> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Vec<IoStats> {
        for sh in &self.shared {
            sh.stop.store(true, Ordering::Release);
            let _ = sh.wake.notify();
        }
        self.threads
            .drain(..)
            .filter_map(|h| h.join().ok())
            .collect()
    }
}

impl<C: Send + 'static> Drop for Workers<C> {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_io_drop_counter_has_its_own_name() {
        let mut r = IoStats {
            control_queue_full: 1,
            control_dropped: 2,
            udp_tx_dropped: 3,
            udp_tx_failed: 4,
            ..IoStats::default()
        };
        r.udp.tx_errors = 10;
        r.udp.tx_no_dst = 20;
        r.udp.rx_truncated = 5;
        r.udp.rx_overflow = 6;
        r.tun.rx_malformed = 7;
        r.tun.rx_split_overflow = 30;
        r.tun.tx_failed = 8;
        let d = r.drops();
        assert_eq!(
            d,
            [
                ("control_queue_full", 1),
                ("control_closed", 2),
                ("send_buffer_full", 3),
                ("send_error", 34),
                ("rx_truncated", 5),
                ("rx_overflow", 6),
                ("tun_rx_error", 37),
                ("tun_write_error", 8),
            ]
        );
    }
}
