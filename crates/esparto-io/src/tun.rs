//! Multi-queue TUN with virtio-net headers: one queue (one fd) per worker.
//!
//! The device is opened with `IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE |
//! IFF_VNET_HDR`, and `TUNSETOFFLOAD` enables `TUN_F_CSUM | TSO4 | TSO6` and,
//! where the kernel has them (Linux ≥ 6.2), `USO4 | USO6`. The kernel may then
//! hand us TCP and UDP *super-packets* of up to 64 KiB with a partial checksum,
//! described by a 10-byte `virtio_net_hdr` in front of each read; and it
//! accepts such super-packets from us.
//!
//! We use the `tun-rs` crate (2.8) for the device and for the offload logic,
//! which is wireguard-go's `tun_linux.go` ported to Rust:
//! `recv_multiple` reads one super-packet and splits it into MTU-sized IP
//! packets, fixing IP/TCP/UDP lengths, IDs, sequence numbers and checksums
//! (tests in `tests/tun_netns.rs` verify each checksum). `tun-rs` checks the
//! buffer capacity before it splits, so the read path makes no allocation
//! (tested, `tests/no_alloc.rs`).
//!
//! The write path is our own ([`crate::gro`]): consecutive TCP segments
//! (and UDP datagrams when USO is on) of one flow are coalesced into a
//! super-packet (GRO), so the stack sees fewer, bigger packets, and each is
//! written with one `writev` gathering the payloads from their slots — no
//! copy and no allocation (tun-rs 2.8's `send_multiple` copies every packet
//! into a fresh `Vec` and again into the head's buffer).
//!
//! **Queue selection.** Esparto attaches a steering program with a flow
//! table ([`crate::tun_steer`]). For reference (found by test,
//! `tests/tun_netns.rs`, and in `drivers/net/tun.c`,
//! `tun_automq_select_queue`): without a steering eBPF
//! program the kernel computes the symmetric flow hash of each packet it sends
//! into the TUN; if a packet of that flow was recently *written* by userspace
//! on queue q (`tun_flow_update`, entries age out after 3 s), it picks q, else
//! `reciprocal_scale(hash, queues)`. So flows spread over queues by hash, one
//! flow stays on one queue, and once worker k writes a decrypted packet of a
//! flow to its queue the replies of that flow come back to worker k.
//!
//! The device disappears when the last queue fd closes (it is not persistent).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};

use crate::batch::{RxBatch, RxEntry, TxBatch};
pub use crate::tun_steer::Steering;

/// Length of the `virtio_net_hdr` in front of every TUN read and write.
pub const VNET_HDR_LEN: usize = tun_rs::VIRTIO_NET_HDR_LEN;

/// Largest read from the TUN: header plus a 64 KiB super-packet.
const READ_BUF_LEN: usize = VNET_HDR_LEN + 65_535;

/// Keep reading while at least this many free slots remain, enough for one
/// super-packet of ~64 KiB at MSS ≥ 1024 (a TCP peer with a tiny MSS can need
/// more; such a read fails to split and is counted in `rx_split_overflow`).
pub const DEFAULT_SPLIT_RESERVE: usize = 64;

/// How to create the device.
#[derive(Debug, Clone)]
pub struct TunConfig {
    /// Interface name (≤ 15 bytes).
    pub name: String,
    /// Number of queues (one per worker).
    pub queues: usize,
    /// Interface MTU.
    pub mtu: u16,
    /// IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// IPv6 address and prefix length.
    pub ipv6: Option<(Ipv6Addr, u8)>,
    /// Enable `IFF_VNET_HDR` and TSO/USO offloads.
    pub offload: bool,
    /// `txqueuelen` (packets the kernel queues per queue before dropping).
    pub tx_queue_len: Option<u32>,
    /// How outbound packets pick a queue ([`crate::tun_steer`];
    /// multi-queue devices only).
    pub steering: Steering,
}

impl Default for TunConfig {
    fn default() -> Self {
        Self {
            name: "esparto0".into(),
            queues: 1,
            mtu: 1420,
            ipv4: None,
            ipv6: None,
            offload: true,
            tx_queue_len: Some(1000),
            steering: Steering::FlowTable,
        }
    }
}

/// Counters kept by one queue.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TunStats {
    /// Reads from the fd that returned a packet.
    pub rx_reads: u64,
    /// Reads that carried a GSO super-packet (split into > 1 packet).
    pub rx_gso_reads: u64,
    /// Packets after splitting.
    pub rx_packets: u64,
    /// Reads dropped because the packet or its virtio header was malformed.
    pub rx_malformed: u64,
    /// Super-packets dropped because the batch lacked free slots.
    pub rx_split_overflow: u64,
    /// Packets passed to `send_batch`.
    pub tx_packets: u64,
    /// Bytes written to the fd (after coalescing, with virtio headers).
    pub tx_bytes: u64,
    /// `send_batch` calls that reported a write error.
    pub tx_errors: u64,
    /// Packets lost in failed writes (each counted once, merged or not).
    pub tx_failed: u64,
    /// Writes to the fd (a coalesced super-packet is one write).
    pub tx_writes: u64,
    /// Packets that failed their TCP/UDP checksum check and so were not
    /// coalesced (written alone, as they came, for the receiver to drop).
    pub tx_bad_csum: u64,
}

/// A multi-queue TUN device: its queues until they are handed to workers.
#[derive(Debug)]
pub struct TunDevice {
    name: String,
    queues: Vec<TunQueue>,
    steering: Steering,
    steering_note: Option<String>,
}

impl TunDevice {
    /// Create and configure the device (addresses, MTU, up) with
    /// `cfg.queues` queues, in the caller's network namespace.
    pub fn create(cfg: &TunConfig) -> io::Result<Self> {
        let queues = cfg.queues.max(1);
        let mut b = tun_rs::DeviceBuilder::new()
            .name(cfg.name.clone())
            .mtu(cfg.mtu)
            .multi_queue(true)
            .offload(cfg.offload)
            .enable(false);
        if let Some((a, p)) = cfg.ipv4 {
            b = b.ipv4(a, p, None);
        }
        if let Some((a, p)) = cfg.ipv6 {
            b = b.ipv6(a, p);
        }
        if let Some(q) = cfg.tx_queue_len {
            b = b.tx_queue_len(q);
        }
        let first = b.build_sync()?;
        let name = first.name()?;
        no_link_local(&name);
        first.enabled(true)?;
        let mut devs = Vec::with_capacity(queues);
        for _ in 1..queues {
            devs.push(first.try_clone()?);
        }
        devs.insert(0, first);
        let queues = devs
            .into_iter()
            .enumerate()
            .map(|(i, d)| TunQueue::new(d, i))
            .collect::<io::Result<Vec<_>>>()?;
        let (steering, steering_note) = match &queues[..] {
            [q, _, ..] => crate::tun_steer::attach(q.as_raw_fd(), cfg.steering),
            _ => (cfg.steering, None), // one queue: nothing to steer
        };
        Ok(Self { name, queues, steering, steering_note })
    }

    /// Interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How outbound packets pick their queue, and, when that is less than
    /// the configuration asked for, why (the kernel refused a map or the
    /// program).
    pub fn steering(&self) -> (Steering, Option<&str>) {
        (self.steering, self.steering_note.as_deref())
    }

    /// The queues, index = queue number.
    pub fn queues_mut(&mut self) -> &mut [TunQueue] {
        &mut self.queues
    }

    /// Hand the queues out (to workers). The device lives while any does.
    pub fn into_queues(self) -> Vec<TunQueue> {
        self.queues
    }
}

/// Keeps the kernel from giving the device an IPv6 link-local address
/// (`addr_gen_mode` 1, "none") before it goes up. A link-local address
/// would make the kernel itself send router solicitations and MLD reports
/// into the tunnel, which no policy covers: counted drops on an idle
/// gateway. Inner IPv6 still flows: forwarding and delivery need no
/// address on the device. Over rtnetlink (a service may see `/proc/sys`
/// read-only), else the sysctl file; best effort (IPv6 may be disabled
/// entirely).
fn no_link_local(name: &str) {
    let by_netlink = crate::netlink::Rtnetlink::open()
        .and_then(|mut nl| {
            let index = nl.link_index(name)?;
            nl.no_ipv6_link_local(index)
        })
        .is_ok();
    let path = format!("/proc/sys/net/ipv6/conf/{name}/addr_gen_mode");
    if !by_netlink && std::path::Path::new(&path).exists() {
        let _ = std::fs::write(&path, "1");
    }
}

/// One queue of the device, owned by one worker. Non-blocking.
pub struct TunQueue {
    dev: tun_rs::SyncDevice,
    index: usize,
    read_buf: Box<[u8]>,
    gro: crate::gro::Gro,
    split_reserve: usize,
    stats: TunStats,
}

impl std::fmt::Debug for TunQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunQueue")
            .field("fd", &self.dev.as_raw_fd())
            .field("index", &self.index)
            .field("stats", &self.stats)
            .finish()
    }
}

impl AsRawFd for TunQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.dev.as_raw_fd()
    }
}

impl TunQueue {
    fn new(dev: tun_rs::SyncDevice, index: usize) -> io::Result<Self> {
        dev.set_nonblocking(true)?;
        Ok(Self {
            dev,
            index,
            read_buf: vec![0u8; READ_BUF_LEN].into_boxed_slice(),
            gro: crate::gro::Gro::default(),
            split_reserve: DEFAULT_SPLIT_RESERVE,
            stats: TunStats::default(),
        })
    }

    /// Queue number.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether the device speaks virtio-net headers (TSO/GRO on).
    pub fn offload(&self) -> bool {
        self.dev.tcp_gso()
    }

    /// Whether USO (UDP segmentation offload) was accepted by the kernel.
    pub fn udp_offload(&self) -> bool {
        self.dev.udp_gso()
    }

    /// Counters so far.
    pub fn stats(&self) -> TunStats {
        self.stats
    }

    /// Change the free-slot reserve below which reads stop (see
    /// [`DEFAULT_SPLIT_RESERVE`]).
    pub fn set_split_reserve(&mut self, slots: usize) {
        self.split_reserve = slots.max(1);
    }

    /// Read packets until the queue is empty or the batch is nearly full,
    /// splitting super-packets; each packet lands in its own slot after the
    /// batch's headroom. Non-blocking: `Ok(0)` when nothing is queued.
    /// Replaces the batch's previous contents.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        batch.reset_slots();
        batch.exclusive = true; // one packet per slot
        let headroom = batch.headroom;
        let total = batch.slots.len();
        let mut used = 0;
        while used < total {
            let free = total - used;
            if used > 0 && free < self.split_reserve {
                break;
            }
            let r = self.dev.recv_multiple(
                &mut self.read_buf,
                &mut batch.slots[used..],
                &mut batch.sizes[used..],
                headroom,
            );
            match r {
                Ok(k) => {
                    self.stats.rx_reads += 1;
                    if k > 1 {
                        self.stats.rx_gso_reads += 1;
                    }
                    for j in used..used + k {
                        batch.entries.push(RxEntry {
                            slot: j as u32,
                            start: headroom as u32,
                            len: batch.sizes[j] as u32,
                            peer: None,
                        });
                    }
                    used += k;
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ if e.raw_os_error().is_some() => {
                        if used > 0 {
                            break;
                        }
                        return Err(e);
                    }
                    // Not an OS error: tun-rs refused the packet (bad virtio
                    // header, short packet, or not enough slots to split).
                    _ => {
                        if e.get_ref()
                            .is_some_and(|i| i.to_string().contains("segments"))
                        {
                            self.stats.rx_split_overflow += 1;
                        } else {
                            self.stats.rx_malformed += 1;
                        }
                    }
                },
            }
        }
        self.stats.rx_packets += used as u64;
        Ok(used)
    }

    /// Write every packet of `batch` (plain IP packets after the batch's
    /// headroom, which must be ≥ [`VNET_HDR_LEN`]), coalescing TCP/UDP flows
    /// where the device has offloads (the GRO writer needs every packet
    /// right after the headroom, [`TxBatch::uniform`], and refuses a batch
    /// built otherwise). The batch is consumed (cleared) even on error,
    /// since coalescing rewrote its buffers. Returns the packet count.
    pub fn send_batch(&mut self, batch: &mut TxBatch) -> io::Result<usize> {
        if batch.headroom < VNET_HDR_LEN {
            self.stats.tx_failed += batch.len as u64;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TUN batch headroom must hold the virtio-net header",
            ));
        }
        let n = batch.len;
        if n == 0 {
            return Ok(0);
        }
        let mut failed = 0;
        let r = if self.dev.tcp_gso() {
            let plan = self.gro.plan(batch, self.dev.udp_gso());
            self.stats.tx_writes += plan.writes as u64;
            self.stats.tx_bad_csum += plan.bad_csum as u64;
            self.gro.write(batch, &self.dev, &mut failed)
        } else {
            self.stats.tx_writes += n as u64;
            self.write_plain(batch, &mut failed)
        };
        self.stats.tx_failed += failed as u64;
        batch.clear();
        self.stats.tx_packets += n as u64;
        match r {
            Ok(bytes) => {
                self.stats.tx_bytes += bytes as u64;
                Ok(n)
            }
            Err(e) => {
                self.stats.tx_errors += 1;
                Err(e)
            }
        }
    }

    /// Without virtio-net headers: each packet as it is.
    fn write_plain(&self, batch: &TxBatch, failed: &mut usize) -> io::Result<usize> {
        let mut total = 0;
        let mut err = None;
        for i in 0..batch.len {
            let Some(pkt) = batch.packet(i) else { continue };
            match self.dev.send(pkt) {
                Ok(b) => total += b,
                Err(e) => {
                    *failed += 1;
                    err = Some(e);
                }
            }
        }
        err.map_or(Ok(total), Err)
    }
}
