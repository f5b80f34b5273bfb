//! The data plane's UDP sockets: a `SO_REUSEPORT` group with batched I/O,
//! UDP GSO on send and UDP GRO on receive.
//!
//! One socket per worker, plus one *control* socket that joins the group last
//! (index N) and belongs to the control thread; the cBPF program of
//! [`crate::steer`] chooses between them by a key in the payload. The group
//! index of a socket is the order of its `bind()`, so [`UdpGroup::bind`]
//! binds the workers 0..N, then the control socket, then attaches the
//! program. (If a member closes, the kernel moves the last member into its
//! slot: indices only hold while the group is whole.)
//!
//! **Send.** [`UdpSocket::send_batch`] walks a [`TxBatch`] and folds runs of
//! consecutive datagrams with the same destination and the same length (the
//! last of a run may be shorter) into one `sendmmsg` entry carrying a
//! `UDP_SEGMENT` control message: the kernel builds one super-packet and
//! segments it as late as possible (GSO). A run also ends at 64 segments
//! (`UDP_MAX_SEGMENTS`) or 65 507 bytes (the largest UDP payload over IPv4),
//! and — with a steering key configured — when the key changes, so that a
//! super-packet that reaches the peer whole is steered correctly there. Each segment is one `iovec` pointing into its own slot: no copy.
//! If the kernel refuses GSO for the route (`EIO`: no checksum offload;
//! `EINVAL`) the socket turns GSO off and sends plain `sendmmsg` from then
//! on. A run of segments above the path MTU (`EMSGSIZE`: equal-sized large
//! IKE messages) is sent again as plain datagrams, which the IP layer
//! fragments; GSO stays on for the rest.
//!
//! **Receive.** [`UdpSocket::recv_batch`] is one `recvmmsg` into the slots of
//! an [`RxBatch`]; with `UDP_GRO` on, one slot may hold several datagrams of
//! equal size (the last may be shorter) and a `UDP_GRO` control message gives
//! the segment size, by which the slot is split into entries.
//!
//! Why not `quinn-udp`: it sends one `sendmsg` per transmit and wants each
//! GSO batch contiguous in one buffer (a copy per packet for us, since every
//! ESP packet is built in its own slot), and has no `sendmmsg`; this file is a
//! few hundred lines of `libc` and gathers segments with `iovec`s instead.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::batch::{RxBatch, RxEntry, TxBatch};
use crate::steer::SteeringKey;
use crate::sys::{self, RawAddr};

/// Most segments the kernel accepts in one GSO send (`UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;

/// Most datagrams one received buffer may hold: newer kernels accept GSO
/// sends of 128 segments (64 before), and a super-packet sent over veth or
/// loopback reaches the receiving socket whole. Receive batches have room
/// for this many entries per slot; past it a datagram is dropped and
/// counted (`rx_overflow`).
pub const MAX_GRO_SEGMENTS: usize = 128;

/// Largest UDP payload in one IPv4 datagram (65 535 − 20 − 8); also used for
/// IPv6 to keep one limit.
pub const MAX_GSO_BYTES: usize = 65_507;

/// Buffer size for one GRO'd receive: a whole 64 KiB super-packet.
pub const GRO_SLOT_LEN: usize = 65_535;

/// `SO_SNDBUFFORCE` / `SO_RCVBUFFORCE`: as root, exceed `wmem_max`/`rmem_max`.
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Socket options for every member of a group.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// `SO_RCVBUF` in bytes (forced past `rmem_max` when permitted).
    pub recv_buffer: usize,
    /// `SO_SNDBUF` in bytes (forced past `wmem_max` when permitted).
    pub send_buffer: usize,
    /// Ask for `UDP_GRO` on receive.
    pub gro: bool,
    /// Use `UDP_SEGMENT` on send.
    pub gso: bool,
    /// The key that steers datagrams among a group's sockets
    /// ([`crate::steer`]): [`UdpGroup::bind`] attaches a program that steers
    /// by it (a group needs one), and a socket sending GSO runs ends a run
    /// where the key changes, so that a run reaching a peer whole is
    /// steered right there. `None`: runs regardless of the payload.
    pub steering: Option<SteeringKey>,
    /// `SO_MARK`: the firewall mark every packet sent carries, so that
    /// policy rules can tell the daemon's own packets from the traffic it
    /// tunnels ([`crate::routing`]). Needs `CAP_NET_ADMIN` at creation;
    /// `None`: unmarked.
    pub mark: Option<u32>,
    /// `IP_FREEBIND` / `IPV6_FREEBIND`: bind an address the host does not
    /// have (yet); datagrams flow once it does. No privilege needed.
    pub freebind: bool,
    /// An IPv6 socket serves IPv4 too (`IPV6_V6ONLY` off): IPv4 peers
    /// appear as IPv4 addresses, and are sent to IPv4-mapped. Ignored for
    /// an IPv4 address.
    pub dual_stack: bool,
    /// Report each datagram's destination address (`IP_PKTINFO` /
    /// `IPV6_RECVPKTINFO`, [`RxBatch::local`]): what a socket bound to a
    /// wildcard address needs to answer from the address it was asked at.
    pub pktinfo: bool,
}

impl Default for UdpConfig {
    fn default() -> Self {
        Self {
            recv_buffer: 8 << 20,
            send_buffer: 8 << 20,
            gro: true,
            gso: true,
            steering: None,
            mark: None,
            freebind: false,
            dual_stack: false,
            pktinfo: false,
        }
    }
}

/// Counters kept by one socket (single owner, no atomics).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UdpStats {
    /// `recvmmsg` calls that returned messages.
    pub rx_calls: u64,
    /// Messages (kernel buffers) received; fewer than datagrams under GRO.
    pub rx_msgs: u64,
    /// Datagrams after splitting GRO buffers.
    pub rx_datagrams: u64,
    /// Messages dropped because they did not fit a slot (`MSG_TRUNC`).
    pub rx_truncated: u64,
    /// Datagrams dropped because the batch had no entry left.
    pub rx_overflow: u64,
    /// `sendmmsg` calls.
    pub tx_calls: u64,
    /// `sendmmsg` entries (one GSO super-packet or one plain datagram each).
    pub tx_msgs: u64,
    /// Datagrams handed to the kernel.
    pub tx_datagrams: u64,
    /// Datagrams dropped on a send error (other than a full buffer).
    pub tx_errors: u64,
    /// Datagrams without a destination address (dropped).
    pub tx_no_dst: u64,
    /// Times the kernel refused GSO and it was turned off.
    pub gso_fallbacks: u64,
}

mod group;
mod mmsg;

pub use group::UdpGroup;
use mmsg::{CmsgBuf, Scratch, gro_segment_size, pktinfo_local, write_send_cmsgs};

/// One UDP socket of the group, with batched send and receive.
pub struct UdpSocket {
    fd: OwnedFd,
    local: SocketAddr,
    /// An IPv6 socket: IPv4 destinations go IPv4-mapped.
    v6: bool,
    gso: bool,
    gro: bool,
    /// End GSO runs where this key changes.
    split_key: Option<SteeringKey>,
    scratch: Scratch,
    stats: UdpStats,
}

impl std::fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSocket")
            .field("fd", &self.fd)
            .field("local", &self.local)
            .field("gso", &self.gso)
            .field("gro", &self.gro)
            .finish()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl UdpSocket {
    /// A single socket bound to `addr` with the options of `cfg`, optionally
    /// with `SO_REUSEPORT` (to join a group).
    pub fn bind(addr: SocketAddr, cfg: &UdpConfig, reuse_port: bool) -> io::Result<Self> {
        let fd = sys::udp_socket(&addr)?;
        let raw = fd.as_raw_fd();
        if reuse_port {
            sys::setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
        }
        if addr.is_ipv6() {
            // Unless it serves both: a separate IPv4 group can then share
            // the port.
            sys::setsockopt_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, i32::from(!cfg.dual_stack))?;
        }
        if cfg.pktinfo {
            // On a dual-stack socket IPV6_RECVPKTINFO covers IPv4 too.
            let (level, opt) =
                if addr.is_ipv6() { (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO) } else { (libc::IPPROTO_IP, libc::IP_PKTINFO) };
            sys::setsockopt_int(raw, level, opt, 1)?;
        }
        set_buffer(raw, SO_RCVBUFFORCE, libc::SO_RCVBUF, cfg.recv_buffer)?;
        set_buffer(raw, SO_SNDBUFFORCE, libc::SO_SNDBUF, cfg.send_buffer)?;
        let gro = cfg.gro && sys::setsockopt_int(raw, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        if let Some(mark) = cfg.mark {
            // The mark is an unsigned 32-bit value passed as an int.
            sys::setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_MARK, mark as libc::c_int).map_err(|e| {
                io::Error::new(e.kind(), format!("setting SO_MARK {mark:#x} (needs CAP_NET_ADMIN): {e}"))
            })?;
        }
        if cfg.freebind {
            // <linux/in.h> IP_FREEBIND, <linux/in6.h> IPV6_FREEBIND.
            let (level, opt) = if addr.is_ipv6() { (libc::IPPROTO_IPV6, 78) } else { (libc::IPPROTO_IP, libc::IP_FREEBIND) };
            sys::setsockopt_int(raw, level, opt, 1)?;
        }
        sys::bind(raw, &addr)?;
        let local = sys::local_addr(raw)?;
        Ok(Self {
            fd,
            local,
            v6: addr.is_ipv6(),
            gso: cfg.gso,
            gro,
            split_key: cfg.steering,
            scratch: Scratch::new(),
            stats: UdpStats::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Whether sends still use `UDP_SEGMENT`.
    pub fn gso_enabled(&self) -> bool {
        self.gso
    }

    /// Whether `UDP_GRO` was accepted.
    pub fn gro_enabled(&self) -> bool {
        self.gro
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Effective `SO_RCVBUF` (the kernel doubles the requested value).
    pub fn recv_buffer(&self) -> io::Result<usize> {
        sys::getsockopt_int(self.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).map(|v| v as usize)
    }

    /// Send one datagram (the control path).
    pub fn send_to(&self, buf: &[u8], dst: SocketAddr) -> io::Result<usize> {
        let raw = RawAddr::for_socket(&dst, self.v6);
        // SAFETY: buf and raw are live for the call and describe their sizes.
        let rc = unsafe {
            libc::sendto(
                self.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&raw.storage as *const libc::sockaddr_storage).cast(),
                raw.len,
            )
        };
        if rc < 0 {
            Err(sys::last_err())
        } else {
            Ok(rc as usize)
        }
    }

    /// Receive one datagram without GRO splitting (control path). Returns
    /// `Ok(None)` when nothing is queued.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        // SAFETY: all-zero sockaddr_storage is valid.
        let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: buf, storage and len are live and sized as declared.
        let rc = unsafe {
            libc::recvfrom(
                self.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            let e = sys::last_err();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let peer =
            sys::to_std(&storage, len).ok_or_else(|| io::Error::other("bad peer address"))?;
        Ok(Some((rc as usize, peer)))
    }

    /// Receive up to one message per slot of `batch` with one `recvmmsg`,
    /// splitting GRO buffers into datagrams. Non-blocking: `Ok(0)` when
    /// nothing is queued. Replaces the batch's previous contents.
    pub fn recv_batch(&mut self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.clear();
        batch.reset_slots();
        batch.exclusive = false; // a GRO buffer holds many datagrams
        let n = batch.slots.len();
        let headroom = batch.headroom;
        self.scratch.ensure(n);
        let s = &mut self.scratch;
        for i in 0..n {
            let storage = batch.slots[i].storage_mut();
            let start = headroom.min(storage.len());
            let room = storage.len() - start;
            s.iovs[i] = libc::iovec {
                iov_base: storage[start..].as_mut_ptr().cast(),
                iov_len: room,
            };
            let h = &mut s.msgs[i].msg_hdr;
            h.msg_name = (&mut s.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut s.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = s.cmsgs[i].as_mut_ptr().cast();
            h.msg_controllen = size_of::<CmsgBuf>();
            h.msg_flags = 0;
            s.msgs[i].msg_len = 0;
        }
        let got = loop {
            // SAFETY: msgs[..n] are initialised above and point at buffers
            // (slots, names, cmsgs, iovs) that stay borrowed for the call.
            let rc = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    s.msgs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let e = sys::last_err();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(e),
            }
        };
        self.stats.rx_calls += 1;
        self.stats.rx_msgs += got as u64;
        for i in 0..got {
            let m = &s.msgs[i];
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                continue;
            }
            let peer = sys::to_std(&s.names[i], m.msg_hdr.msg_namelen);
            if let Some(l) = batch.locals.get_mut(i) {
                *l = pktinfo_local(&m.msg_hdr);
            }
            let seg = gro_segment_size(&m.msg_hdr)
                .filter(|g| *g > 0)
                .unwrap_or(len)
                .max(1);
            let mut off = 0;
            while off < len {
                let this = seg.min(len - off);
                if batch.entries.len() == batch.entries.capacity() {
                    self.stats.rx_overflow += 1;
                } else {
                    batch.entries.push(RxEntry {
                        slot: i as u32,
                        start: (headroom + off) as u32,
                        len: this as u32,
                        peer,
                    });
                }
                off += this;
            }
        }
        self.stats.rx_datagrams += batch.entries.len() as u64;
        Ok(batch.entries.len())
    }

    /// Bytes this socket handed to the kernel that have not left the host
    /// yet: in the socket, the qdisc or the device queue (`SIOCOUTQ`, as
    /// the kernel charges them). See [`crate::link`].
    pub fn queued_bytes(&self) -> io::Result<usize> {
        // Linux's SIOCOUTQ is TIOCOUTQ.
        sys::ioctl_read_int(self.as_raw_fd(), libc::TIOCOUTQ).map(|v| v.max(0) as usize)
    }

    /// Send every datagram of `batch` (each needs a destination), folding
    /// runs into GSO sends. Returns how many datagrams were consumed (sent,
    /// or dropped on a per-destination error and counted); fewer than
    /// `batch.len()` means the socket buffer is full: the caller may retry the
    /// rest with [`UdpSocket::send_batch_from`] or drop it.
    pub fn send_batch(&mut self, batch: &TxBatch) -> io::Result<usize> {
        self.send_batch_from(batch, 0)
    }

    /// [`UdpSocket::send_batch`] starting at datagram `from`; returns the
    /// index one past the last consumed datagram.
    pub fn send_batch_from(&mut self, batch: &TxBatch, mut from: usize) -> io::Result<usize> {
        let n = batch.len();
        self.scratch.ensure(n);
        // Datagrams below this index go one by one (their GSO send was
        // refused as too big: segments above the path MTU).
        let mut plain_until = 0;
        while from < n {
            let (msgs, used_gso) = self.build_send(batch, from, plain_until);
            if msgs == 0 {
                // Only destination-less datagrams were left.
                from = n;
                break;
            }
            let s = &mut self.scratch;
            // SAFETY: msgs[..msgs] were initialised by build_send and point at
            // slots of `batch`, names, cmsgs and iovs, all borrowed for the call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    s.msgs.as_mut_ptr(),
                    msgs as libc::c_uint,
                    0,
                )
            };
            self.stats.tx_calls += 1;
            if rc > 0 {
                let sent = rc as usize;
                let datagrams: usize = s.groups[..sent].iter().map(|g| g.1).sum();
                self.stats.tx_msgs += sent as u64;
                self.stats.tx_datagrams += datagrams as u64;
                from = s.groups[sent - 1].0 + s.groups[sent - 1].1;
                continue;
            }
            let e = sys::last_err();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(from),
                Some(libc::EMSGSIZE) if used_gso && s.groups[0].1 > 1 => {
                    // Segments above the path MTU (large IKE messages of
                    // equal size): the IP layer can fragment them one by
                    // one, GSO cannot. Only this run goes plain.
                    let (first, count) = s.groups[0];
                    plain_until = first + count;
                }
                Some(libc::EIO) | Some(libc::EINVAL) if used_gso && s.groups[0].1 > 1 => {
                    // The route cannot do GSO (no checksum offload, or a
                    // segment above the MTU): RFC-neutral fallback to plain
                    // datagrams, kept for the life of the socket.
                    self.gso = false;
                    self.stats.gso_fallbacks += 1;
                }
                Some(_) => {
                    // This entry's destination failed (unreachable, too big,
                    // ...): drop its datagrams, count, go on with the rest.
                    let (first, count) = s.groups[0];
                    self.stats.tx_errors += count as u64;
                    from = first + count;
                }
                None => return Err(e),
            }
        }
        Ok(from)
    }

    /// Fill the scratch `mmsghdr`s for datagrams `from..`; returns the number
    /// of entries and whether any carries `UDP_SEGMENT`.
    fn build_send(&mut self, batch: &TxBatch, mut i: usize, plain_until: usize) -> (usize, bool) {
        let n = batch.len();
        let split = self.split_key;
        let s = &mut self.scratch;
        s.groups.clear();
        let mut iov_at = 0;
        let mut used_gso = false;
        while i < n {
            let Some(dst) = batch.dsts[i] else {
                self.stats.tx_no_dst += 1;
                i += 1;
                continue;
            };
            let first = i;
            let src = batch.srcs[i];
            let seg_len = batch.packet_len(i);
            let key = key_of(split, batch, i);
            let mut bytes = seg_len;
            i += 1;
            if self.gso && first >= plain_until {
                while i < n
                    && i - first < MAX_GSO_SEGMENTS
                    && batch.dsts[i] == Some(dst)
                    && batch.srcs[i] == src
                    && bytes + batch.packet_len(i) <= MAX_GSO_BYTES
                {
                    let len = batch.packet_len(i);
                    if len > seg_len || key_of(split, batch, i) != key {
                        break;
                    }
                    bytes += len;
                    i += 1;
                    if len < seg_len {
                        break; // a shorter segment ends the run
                    }
                }
            }
            let count = i - first;
            let g = s.groups.len();
            s.groups.push((first, count));
            for k in first..i {
                let pkt = batch.packet(k).unwrap_or_default();
                s.iovs[iov_at + k - first] = libc::iovec {
                    // The kernel only reads through this pointer (sendmmsg).
                    iov_base: pkt.as_ptr() as *mut libc::c_void,
                    iov_len: pkt.len(),
                };
            }
            let raw = RawAddr::for_socket(&dst, self.v6);
            s.names[g] = raw.storage;
            let h = &mut s.msgs[g].msg_hdr;
            h.msg_name = (&mut s.names[g] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = raw.len;
            h.msg_iov = &mut s.iovs[iov_at];
            h.msg_iovlen = count;
            h.msg_flags = 0;
            used_gso |= count > 1;
            h.msg_control = s.cmsgs[g].as_mut_ptr().cast();
            h.msg_controllen = size_of::<CmsgBuf>();
            write_send_cmsgs(h, (count > 1).then_some(seg_len as u16), src, self.v6);
            s.msgs[g].msg_len = 0;
            iov_at += count;
        }
        (s.groups.len(), used_gso)
    }
}


/// The steering key of datagram `i`, if runs `split` on one and the
/// datagram is long enough to carry it.
fn key_of(split: Option<SteeringKey>, batch: &TxBatch, i: usize) -> Option<u32> {
    split.and_then(|k| k.of(batch.packet(i)?))
}

/// Ask for `bytes` of socket buffer, forcing past the sysctl cap if we may.
fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    if sys::setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_ok() {
        return Ok(());
    }
    sys::setsockopt_int(fd, libc::SOL_SOCKET, plain, v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::net::IpAddr;

    fn lo_pair(cfg: &UdpConfig) -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), cfg, false).unwrap();
        let b = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), cfg, false).unwrap();
        (a, b)
    }

    fn recv_all(sock: &mut UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let mut rx = RxBatch::new(8, 0, GRO_SLOT_LEN, 512);
        let mut got = Vec::new();
        for _ in 0..2000 {
            sock.recv_batch(&mut rx).unwrap();
            got.extend(rx.iter().map(|(p, _)| p.to_vec()));
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got
    }

    fn datagram(spi: u32, seq: u32, len: usize) -> Vec<u8> {
        let mut d = vec![0u8; len];
        d[..4].copy_from_slice(&spi.to_be_bytes());
        d[4..8].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in d.iter_mut().enumerate().skip(8) {
            *b = (i as u32 ^ seq) as u8;
        }
        d
    }

    /// A dual-stack socket on the IPv6 wildcard serves IPv4 and IPv6
    /// peers: IPv4 ones as IPv4 addresses, each datagram with the address
    /// it was sent to (pktinfo), and answers leave from the source set,
    /// GSO runs included.
    #[test]
    fn a_dual_stack_socket_serves_both_families_from_the_address_asked() {
        let cfg = UdpConfig { dual_stack: true, pktinfo: true, ..UdpConfig::default() };
        let Ok(mut server) = UdpSocket::bind("[::]:0".parse().unwrap(), &cfg, false) else {
            eprintln!("SKIP: no IPv6 here");
            return;
        };
        let port = server.local_addr().port();
        // The peers read datagram by datagram: no GRO.
        let plain = UdpConfig { gro: false, ..UdpConfig::default() };
        let c4 = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &plain, false).unwrap();
        let Ok(c6) = UdpSocket::bind("[::1]:0".parse().unwrap(), &plain, false) else {
            eprintln!("SKIP: no ::1 here");
            return;
        };
        // 127.0.0.2 is the loopback's too, but not what the route picks.
        let asked4: IpAddr = "127.0.0.2".parse().unwrap();
        c4.send_to(b"four", SocketAddr::new(asked4, port)).unwrap();
        c6.send_to(b"six", SocketAddr::new("::1".parse().unwrap(), port)).unwrap();
        let mut rx = RxBatch::new(8, 0, GRO_SLOT_LEN, 64);
        let mut got = Vec::new();
        for _ in 0..2000 {
            server.recv_batch(&mut rx).unwrap();
            got.extend((0..rx.len()).map(|i| (rx.packet(i).unwrap().to_vec(), rx.peer(i).unwrap(), rx.local(i))));
            if got.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        got.sort_by_key(|g| g.0.len());
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[1].0.as_slice(), got[1].1, got[1].2), (&b"four"[..], c4.local_addr(), Some(asked4)));
        assert_eq!((got[0].0.as_slice(), got[0].1, got[0].2), (&b"six"[..], c6.local_addr(), Some("::1".parse().unwrap())));

        // Answers: one to each, and a GSO run of three to the IPv4 peer,
        // all from the address asked.
        let mut tx = TxBatch::new(8, 0, 1500);
        for (pkt, peer, local) in &got {
            tx.push(Some(*peer), pkt).unwrap();
            tx.set_last_source(*local);
        }
        for _ in 0..3 {
            tx.push(Some(c4.local_addr()), &[7u8; 100]).unwrap();
            tx.set_last_source(Some(asked4));
        }
        assert_eq!(server.send_batch(&tx).unwrap(), 5);
        assert_eq!(server.stats().tx_errors, 0);
        let mut buf = [0u8; 2048];
        let mut from4 = Vec::new();
        for _ in 0..2000 {
            while let Some((n, from)) = c4.recv_from(&mut buf).unwrap() {
                from4.push((n, from));
            }
            if from4.len() >= 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(from4.len(), 4, "{from4:?}");
        assert!(from4.iter().all(|(_, f)| *f == SocketAddr::new(asked4, port)), "{from4:?}");
        let mut answer6 = None;
        for _ in 0..2000 {
            answer6 = c6.recv_from(&mut buf).unwrap();
            if answer6.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(answer6, Some((3, SocketAddr::new("::1".parse().unwrap(), port))));
    }

    /// A configured mark is on the socket (`SO_MARK`); without one, none.
    #[test]
    fn sockets_carry_the_configured_mark() {
        let marked = UdpConfig { mark: Some(0xdc), ..UdpConfig::default() };
        match UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &marked, false) {
            Ok(s) => {
                assert_eq!(sys::getsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MARK).unwrap(), 0xdc);
            }
            Err(e) => {
                // Without CAP_NET_ADMIN the kernel refuses, and says so.
                assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
                assert!(e.to_string().contains("SO_MARK 0xdc"), "{e}");
            }
        }
        let plain = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &UdpConfig::default(), false).unwrap();
        assert_eq!(sys::getsockopt_int(plain.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MARK).unwrap(), 0);
    }

    /// Loopback: a run of equal datagrams goes out as one GSO send and comes
    /// back, split, byte for byte and in order.
    #[test]
    fn gso_runs_round_trip_on_loopback() {
        // Split runs on a key where ESP has its SPI.
        let cfg = UdpConfig { steering: Some(SteeringKey::new(0, 8)), ..UdpConfig::default() };
        let (mut tx, mut rx) = lo_pair(&cfg);
        let dst = rx.local_addr();
        let mut batch = TxBatch::new(128, 0, 1500);
        let mut sent = Vec::new();
        for seq in 0..100u32 {
            let len = if seq == 39 { 700 } else { 1400 }; // a short one ends a run
            let spi = if seq < 80 { 0x1111 } else { 0x2222 }; // an SPI change too
            let d = datagram(spi, seq, len);
            batch.push(Some(dst), &d).unwrap();
            sent.push(d);
        }
        // And a run that hits the 65 507-byte cap: 47 × 1400 > 65 507.
        let mut big = TxBatch::new(64, 0, 1500);
        for seq in 0..50u32 {
            big.push(Some(dst), &datagram(0x3333, seq, 1400)).unwrap();
        }
        assert_eq!(tx.send_batch(&batch).unwrap(), 100);
        let st = tx.stats();
        assert_eq!(st.tx_datagrams, 100);
        // runs: 0..=39 (40, ends short), 40..=79 (40, SPI change), 80..=99 (20)
        assert_eq!(st.tx_msgs, 3, "{st:?}");
        assert_eq!(tx.stats().tx_calls, 1);
        let got = recv_all(&mut rx, 100);
        assert_eq!(got, sent);
        assert_eq!(tx.send_batch(&big).unwrap(), 50);
        assert_eq!(tx.stats().tx_msgs, 3 + 2, "46 + 4 segments");
        assert_eq!(recv_all(&mut rx, 50).len(), 50);
    }

    #[test]
    fn plain_sendmmsg_when_gso_off() {
        let cfg = UdpConfig {
            gso: false,
            ..UdpConfig::default()
        };
        let (mut tx, mut rx) = lo_pair(&cfg);
        let dst = rx.local_addr();
        let mut batch = TxBatch::new(16, 0, 1500);
        for seq in 0..10 {
            batch.push(Some(dst), &datagram(7, seq, 300)).unwrap();
        }
        assert_eq!(tx.send_batch(&batch).unwrap(), 10);
        assert_eq!(tx.stats().tx_msgs, 10);
        assert_eq!(recv_all(&mut rx, 10).len(), 10);
    }

    #[test]
    fn the_send_queue_is_read_and_empty_once_loopback_took_it() {
        let (mut tx, mut rx) = lo_pair(&UdpConfig::default());
        assert_eq!(tx.queued_bytes().unwrap(), 0);
        let mut batch = TxBatch::new(8, 0, 1500);
        for seq in 0..8 {
            batch.push(Some(rx.local_addr()), &datagram(7, seq, 1000)).unwrap();
        }
        assert_eq!(batch.bytes(), 8000);
        assert_eq!(tx.send_batch(&batch).unwrap(), 8);
        assert_eq!(recv_all(&mut rx, 8).len(), 8);
        // Loopback hands each datagram to the receiver at once: nothing
        // stays charged to the sender (a shaped link is another matter:
        // see `link` and the test bed's IPComp benchmark).
        assert_eq!(tx.queued_bytes().unwrap(), 0);
    }

    #[test]
    fn datagrams_without_destination_are_counted_not_sent() {
        let cfg = UdpConfig::default();
        let (mut tx, mut rx) = lo_pair(&cfg);
        let mut batch = TxBatch::new(4, 0, 100);
        batch.push(None, &[1; 20]).unwrap();
        batch.push(Some(rx.local_addr()), &[2; 20]).unwrap();
        assert_eq!(tx.send_batch(&batch).unwrap(), 2);
        assert_eq!(tx.stats().tx_no_dst, 1);
        let got = recv_all(&mut rx, 1);
        assert_eq!(got, vec![vec![2u8; 20]]);
    }

    #[test]
    fn gro_split_reports_peer() {
        let cfg = UdpConfig::default();
        let (mut tx, mut rx) = lo_pair(&cfg);
        let mut batch = TxBatch::new(64, 0, 1500);
        for seq in 0..40 {
            batch
                .push(Some(rx.local_addr()), &datagram(9, seq, 1200))
                .unwrap();
        }
        tx.send_batch(&batch).unwrap();
        let mut rxb = RxBatch::new(4, 0, GRO_SLOT_LEN, 256);
        let mut n = 0;
        for _ in 0..1000 {
            n += rx.recv_batch(&mut rxb).unwrap();
            for (p, peer) in rxb.iter() {
                assert_eq!(p.len(), 1200);
                assert_eq!(peer, Some(tx.local_addr()));
            }
            if n == 40 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(n, 40);
        // On loopback the GSO super-packet is delivered whole: fewer messages.
        assert!(rx.stats().rx_msgs < 40, "{:?}", rx.stats());
    }

    #[test]
    fn datagrams_past_the_batch_entries_are_counted() {
        let cfg = UdpConfig::default();
        let (mut tx, mut rx) = lo_pair(&cfg);
        let mut batch = TxBatch::new(64, 0, 100);
        for seq in 0..50 {
            batch.push(Some(rx.local_addr()), &datagram(3, seq, 64)).unwrap();
        }
        assert_eq!(tx.send_batch(&batch).unwrap(), 50);
        // One GSO super-packet of 50 arrives whole; room for 20 entries.
        let mut rxb = RxBatch::new(1, 0, GRO_SLOT_LEN, 20);
        let mut got = 0;
        for _ in 0..1000 {
            got += rx.recv_batch(&mut rxb).unwrap();
            if got + rx.stats().rx_overflow as usize >= 50 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!((got, rx.stats().rx_overflow), (20, 30), "{:?}", rx.stats());
    }

    #[test]
    fn recv_on_empty_socket_is_zero() {
        let (_, mut rx) = lo_pair(&UdpConfig::default());
        let mut rxb = RxBatch::new(2, 0, 2048, 8);
        assert_eq!(rx.recv_batch(&mut rxb).unwrap(), 0);
        assert!(rx.recv_from(&mut [0u8; 64]).unwrap().is_none());
    }
}
