//! Cost of reading packets from a TUN queue, four ways side by side in one
//! run, on one device opened as Esparto opens it (virtio-net header, TSO
//! and USO offloads):
//!
//! - **esparto**: `TunQueue::recv_batch`, i.e. tun-rs 2.8's `recv_multiple`
//!   (one `read` into a scratch buffer, the packet copied into its batch
//!   slot; super-packets split) plus our bookkeeping;
//! - **readv**: one `readv` putting the virtio-net header aside and the
//!   packet straight into its slot (a super-packet would spill into a
//!   scratch buffer) — no copy in user space; tried as Esparto's read path
//!   and not kept (no faster at 64 bytes, a few per cent at 1,400, mixed
//!   end to end: not worth owning code tun-rs has; `docs/BENCHMARKS.md`);
//! - **read()**: a bare `read` into one buffer, nothing done with the
//!   packet — the floor for one system call per packet;
//! - **io_uring**: 32 `IORING_OP_READ`s per `io_uring_enter`, with
//!   `RWF_NOWAIT` so they complete inline — what batching the system calls
//!   would save.
//!
//! A UDP socket in the device's namespace fills the queue with 4,000
//! packets (not timed), then one method drains it (timed: thread CPU time
//! per packet). Workloads: 64- and 1,400-byte datagrams, and (`recv_batch`
//! only, the others do not split) 1,400-byte datagrams sent 44 at a time
//! with `UDP_SEGMENT`, which the device takes as USO super-packets. The
//! methods alternate, 7 trials each; medians are printed.
//!
//! Run as root: `cargo run --release -p esparto-io --example tun_read_cost`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::io::IoSliceMut;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;

use esparto_io::RxBatch;
use esparto_netns::Netns;
use esparto_io::tun::{TunConfig, TunDevice, TunQueue, VNET_HDR_LEN};

const FILL: usize = 4_000;
const TRIALS: usize = 7;
const SLOTS: usize = 128;
const HEADROOM: usize = 64;
const SLOT: usize = 1_600;
const URING_BATCH: usize = 32;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Queue about `FILL` packets of `len` bytes (IP) towards `dst`, in USO
/// sends of 44 when `uso`.
fn fill(sock: &UdpSocket, dst: Ipv4Addr, len: usize, uso: bool) {
    let payload = len - 28;
    let per_send = if uso { 44 } else { 1 };
    let seg: libc::c_int = if uso { payload as libc::c_int } else { 0 };
    // SAFETY: setsockopt reads one c_int we own.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&seg as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "UDP_SEGMENT");
    let buf = vec![0x5a_u8; payload * per_send];
    for _ in 0..FILL / per_send {
        sock.send_to(&buf, (dst, 9)).unwrap();
    }
}

/// CPU ns per packet for one drain.
fn drain(mut read_all: impl FnMut() -> usize) -> f64 {
    let c0 = thread_cpu_ns();
    let n = read_all();
    assert!(n >= FILL / 2, "only {n} packets queued");
    (thread_cpu_ns() - c0) as f64 / n as f64
}

fn main() {
    let ns = Netns::new("tunrcost").unwrap();
    let cfg = TunConfig {
        name: "tunE".into(),
        mtu: 1500,
        ipv4: Some((Ipv4Addr::new(10, 60, 0, 1), 24)),
        tx_queue_len: Some(8192),
        ..TunConfig::default()
    };
    let mut tun: TunQueue = ns.run(|| TunDevice::create(&cfg)).unwrap().unwrap().into_queues().remove(0);
    let fd = tun.as_raw_fd();
    let sock = ns.run(|| UdpSocket::bind("0.0.0.0:0")).unwrap().unwrap();
    let dst = Ipv4Addr::new(10, 60, 0, 2);

    let mut rxb = RxBatch::new(SLOTS, HEADROOM, SLOT, SLOTS);
    let mut slots: Vec<Vec<u8>> = (0..SLOTS).map(|_| vec![0u8; HEADROOM + SLOT]).collect();
    let mut scratch = vec![0u8; VNET_HDR_LEN + 65_535];
    let mut ring = io_uring::IoUring::new(64).unwrap();
    let mut ubufs: Vec<Vec<u8>> = (0..URING_BATCH).map(|_| vec![0u8; VNET_HDR_LEN + 65_535]).collect();

    println!("TUN read cost, CPU ns per packet, median of {TRIALS} drains of ~{FILL} packets (USO {})", tun.udp_offload());
    println!("{:<22} {:>8} {:>8} {:>8} {:>8}   readv/esparto  io_uring/read()", "workload", "esparto", "readv", "read()", "io_uring");
    for (label, len, uso) in [("UDP 64 B", 64, false), ("UDP 1400 B", 1400, false), ("UDP 1400 B, USO x44", 1400, true)] {
        let (mut e, mut v, mut r, mut u) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..TRIALS {
            fill(&sock, dst, len, uso);
            e.push(drain(|| {
                let mut n = 0;
                while let Ok(k @ 1..) = tun.recv_batch(&mut rxb) {
                    n += k;
                }
                n
            }));
            if uso {
                continue; // the other methods do not split super-packets
            }
            fill(&sock, dst, len, uso);
            v.push(drain(|| {
                let mut n = 0;
                loop {
                    let slot = &mut slots[n % SLOTS];
                    let mut hdr = [0u8; VNET_HDR_LEN];
                    let (slot_part, spill) = (&mut slot[HEADROOM..], &mut scratch[SLOT..]);
                    let mut iov = [IoSliceMut::new(&mut hdr), IoSliceMut::new(slot_part), IoSliceMut::new(spill)];
                    // SAFETY: readv writes at most the iovecs' lengths into
                    // buffers we own and hold for the call.
                    let rc = unsafe { libc::readv(fd, iov.as_mut_ptr().cast(), iov.len() as libc::c_int) };
                    if rc <= 0 {
                        return n;
                    }
                    n += 1;
                }
            }));
            fill(&sock, dst, len, uso);
            r.push(drain(|| {
                let mut n = 0;
                // SAFETY: read writes at most the buffer's length into it.
                while unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), scratch.len()) } > 0 {
                    n += 1;
                }
                n
            }));
            fill(&sock, dst, len, uso);
            u.push(drain(|| {
                let mut n = 0;
                loop {
                    for (i, b) in ubufs.iter_mut().enumerate() {
                        let op = io_uring::opcode::Read::new(io_uring::types::Fd(fd), b.as_mut_ptr(), b.len() as u32)
                            .rw_flags(libc::RWF_NOWAIT)
                            .build()
                            .user_data(i as u64);
                        // SAFETY: the buffer outlives the request: every
                        // completion is reaped before it is used again.
                        unsafe { ring.submission().push(&op).unwrap() };
                    }
                    ring.submit_and_wait(URING_BATCH).unwrap();
                    let mut empty = false;
                    for c in ring.completion() {
                        if c.result() > 0 {
                            n += 1;
                        } else {
                            empty = true;
                        }
                    }
                    if empty {
                        return n;
                    }
                }
            }));
        }
        let e = median(e);
        if uso {
            println!("{label:<22} {e:>8.0}");
        } else {
            let (v, r, u) = (median(v), median(r), median(u));
            println!("{label:<22} {e:>8.0} {v:>8.0} {r:>8.0} {u:>8.0}   {:>13.2}  {:>15.2}", v / e, u / r);
        }
    }
    let st = tun.stats();
    println!("esparto: {} packets in {} reads ({} GSO)", st.rx_packets, st.rx_reads, st.rx_gso_reads);
}
