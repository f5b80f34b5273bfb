//! One worker's event loop: `poll` on its TUN queue, its UDP socket and
//! its wake-up `eventfd`, then commands, outbound batches (TUN → UDP),
//! inbound batches (UDP → TUN and the control thread) and the tick, in
//! that order (the diagram in the parent module's essay). Everything it
//! uses is allocated in [`WorkerLoop::new`]; the loop itself does not
//! allocate, lock or log.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::gaps::SchedStat;
use super::{Datapath, IoStats, Shared, WorkerConfig};
use crate::batch::{RxBatch, TxBatch};
use crate::control::{ControlSender, Refused};
use crate::link::LinkMeter;
use crate::sys;
use crate::tun::{TunQueue, VNET_HDR_LEN};
use crate::udp::{GRO_SLOT_LEN, MAX_GRO_SEGMENTS, UdpSocket};

pub(super) struct WorkerLoop<D: Datapath> {
    tick: Duration,
    tun: TunQueue,
    udp: UdpSocket,
    dp: D,
    commands: mpsc::Receiver<D::Command>,
    shared: Arc<Shared>,
    control: Option<ControlSender>,
    tun_rx: RxBatch,
    udp_rx: RxBatch,
    udp_tx: TxBatch,
    tun_tx: TxBatch,
    ctl_tx: TxBatch,
    stats: IoStats,
    link: LinkMeter,
}

impl<D: Datapath> WorkerLoop<D> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        index: usize,
        cfg: &WorkerConfig,
        tun: TunQueue,
        udp: UdpSocket,
        dp: D,
        commands: mpsc::Receiver<D::Command>,
        shared: Arc<Shared>,
        control: Option<ControlSender>,
    ) -> Self {
        // TUN read slots and UDP send slots have one size, so an encrypted
        // packet's slot can move to the send batch instead of being copied
        // (`TxBatch::push_from_rx`).
        let slot = (cfg.tun_rx_headroom + cfg.tun_rx_slot_len).max(cfg.udp_tx_slot_len);
        Self {
            tick: cfg.tick.max(Duration::from_millis(1)),
            tun,
            udp,
            dp,
            commands,
            shared,
            control,
            tun_rx: RxBatch::new(cfg.tun_rx_slots, cfg.tun_rx_headroom, slot - cfg.tun_rx_headroom, cfg.tun_rx_slots),
            udp_rx: RxBatch::new(cfg.udp_rx_slots, 0, GRO_SLOT_LEN, cfg.udp_rx_slots * MAX_GRO_SEGMENTS),
            udp_tx: TxBatch::new(cfg.udp_tx_slots, 0, slot),
            tun_tx: TxBatch::new(
                cfg.tun_tx_slots,
                VNET_HDR_LEN.next_multiple_of(8),
                cfg.tun_tx_slot_len,
            ),
            ctl_tx: TxBatch::new(cfg.control_slots.max(1), 0, GRO_SLOT_LEN),
            stats: IoStats {
                index,
                ..IoStats::default()
            },
            link: LinkMeter::new(),
        }
    }

    pub(super) fn run(mut self, cpu: Option<usize>) -> IoStats {
        if let Some(c) = cpu {
            if sys::pin_current_thread(c).is_ok() {
                self.stats.cpu = sys::current_cpu();
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: self.tun.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.udp.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.shared.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let sched = SchedStat::open();
        let mut next_tick = Instant::now() + self.tick;
        let mut last_turn: Option<Instant> = None;
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            // Round up: a sub-millisecond wait must not become a busy spin.
            let timeout = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            for f in &mut fds {
                f.revents = 0;
            }
            if sys::poll(&mut fds, timeout).is_err() {
                self.stats.io_errors += 1;
            }
            self.stats.loops += 1;
            let now = Instant::now();
            if let Some(t) = last_turn {
                self.stats.loop_gaps.record(now.saturating_duration_since(t));
            }
            last_turn = Some(now);
            if fds[2].revents != 0 {
                self.shared.wake.drain();
                self.apply_commands(now);
                if self.shared.stop.load(Ordering::Acquire) {
                    break;
                }
            }
            // A deleted TUN device leaves its queues polling POLLERR
            // (`tun_chr_poll`) for good: stop rather than spin.
            if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                break; // the TUN device is gone
            }
            if fds[0].revents & libc::POLLIN != 0 {
                self.outbound(now);
            }
            if fds[1].revents & libc::POLLIN != 0 {
                self.inbound(now);
            }
            if now >= next_tick {
                if let Some(s) = &sched {
                    self.stats.cpu_wait = s.run_delay();
                }
                self.dp.on_tick(now);
                next_tick = now + self.tick;
            }
        }
        self.stats.tun = self.tun.stats();
        self.stats.udp = self.udp.stats();
        self.stats
    }

    fn outbound(&mut self, now: Instant) {
        match self.tun.recv_batch(&mut self.tun_rx) {
            Ok(0) => return,
            Ok(_) => {}
            Err(_) => {
                self.stats.io_errors += 1;
                return;
            }
        }
        let mut from = 0;
        while from < self.tun_rx.len() {
            self.udp_tx.clear();
            self.tun_tx.clear();
            let next = self.dp.outbound(now, &mut self.tun_rx, from, &mut self.udp_tx, &mut self.tun_tx);
            if !self.udp_tx.is_empty() && self.dp.wants_link_verdicts() {
                self.meter_link(now);
            }
            match self.udp.send_batch(&self.udp_tx) {
                Ok(sent) => {
                    if sent < self.udp_tx.len() {
                        self.stats.udp_tx_dropped += (self.udp_tx.len() - sent) as u64;
                        self.dp.on_send_pushback();
                    }
                }
                Err(_) => {
                    self.stats.io_errors += 1;
                    self.stats.udp_tx_failed += self.udp_tx.len() as u64;
                }
            }
            self.udp_tx.clear();
            self.write_tun();
            // A datapath that makes no progress would spin: skip the packet.
            from = next.max(from + 1);
        }
    }

    /// Samples the send queue before `udp_tx` goes out (when due) and
    /// counts its bytes as sent.
    fn meter_link(&mut self, now: Instant) {
        if self.link.due(now) {
            match self.udp.queued_bytes() {
                Ok(q) => {
                    if let Some(v) = self.link.sample(now, q) {
                        self.dp.on_link(v);
                    }
                }
                Err(_) => self.stats.io_errors += 1,
            }
        }
        self.link.sent(self.udp_tx.bytes());
    }

    /// Applies every queued command (an empty queue costs one atomic load).
    fn apply_commands(&mut self, now: Instant) {
        while let Ok(cmd) = self.commands.try_recv() {
            self.stats.tun = self.tun.stats();
            self.stats.udp = self.udp.stats();
            self.dp.on_command(now, cmd, &self.stats);
            self.stats.commands += 1;
        }
    }

    fn inbound(&mut self, now: Instant) {
        match self.udp.recv_batch(&mut self.udp_rx) {
            Ok(0) => return,
            Ok(_) => {}
            Err(_) => {
                self.stats.io_errors += 1;
                return;
            }
        }
        // A command queued before these datagrams arrived is applied before
        // they are processed, even if `poll` returned before the command was
        // queued: the control plane installs a new inbound SA before it lets
        // the peer send on it, so the SA is here by the time its first packet
        // is (no "unknown SPI" drop on the first packets after a rekey).
        self.apply_commands(now);
        let mut from = 0;
        while from < self.udp_rx.len() {
            self.tun_tx.clear();
            self.ctl_tx.clear();
            let next = self
                .dp
                .inbound(now, &mut self.udp_rx, from, &mut self.tun_tx, &mut self.ctl_tx);
            self.write_tun();
            self.forward_control();
            from = next.max(from + 1);
        }
    }

    /// Writes `tun_tx` to the TUN queue.
    fn write_tun(&mut self) {
        if self.tun_tx.is_empty() {
            return;
        }
        // The TUN queue counts the packets a failed write lost.
        if self.tun.send_batch(&mut self.tun_tx).is_err() {
            self.stats.io_errors += 1;
        }
    }

    /// Hands the datagrams of `ctl_tx` to the control thread, as far
    /// as the worker's pool allows; the rest is dropped and counted.
    fn forward_control(&mut self) {
        for i in 0..self.ctl_tx.len() {
            let Some(bytes) = self.ctl_tx.packet(i) else {
                continue;
            };
            let r = match self.control.as_mut() {
                Some(c) => c.send(self.ctl_tx.dst(i), bytes),
                None => Err(Refused::Closed),
            };
            match r {
                Ok(()) => {}
                Err(Refused::Full) => self.stats.control_queue_full += 1,
                Err(Refused::Closed) => self.stats.control_dropped += 1,
            }
        }
        self.ctl_tx.clear();
    }
}
