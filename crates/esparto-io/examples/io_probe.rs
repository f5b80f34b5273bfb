//! I/O ceiling probe: packets per second for
//!
//! 1. UDP GSO send → GRO receive between two namespaces over veth,
//!    1400-byte datagrams (and plain `sendmmsg` for comparison);
//! 2. TUN read: a UDP GSO sender in a namespace whose route points into a
//!    TUN; `TunQueue::recv_batch` reads and splits;
//! 3. TUN write: `TunQueue::send_batch` writes UDP packets (coalesced by GRO
//!    when USO is on) addressed to a socket in the same namespace.
//!
//! Run as root: `cargo run --release -p esparto-io --example io_probe [secs]`.
//! The figures are only as quiet as the machine: on a shared 2-core box,
//! anything else running (builds) shows up directly in them.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use esparto_netns::{Netns, Pair};
use esparto_io::tun::{TunConfig, TunDevice, VNET_HDR_LEN};
use esparto_io::udp::{GRO_SLOT_LEN, UdpConfig, UdpSocket};
use esparto_io::{RxBatch, TxBatch};

const LEN: usize = 1400;

fn wait_readable(fd: i32, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Datagram payloads with one SPI so GSO runs are 64 long.
fn fill(batch: &mut TxBatch, dst: Option<SocketAddr>, pkt: impl Fn(u32) -> Vec<u8>) {
    batch.clear();
    for i in 0..batch.capacity() as u32 {
        batch.push(dst, &pkt(i)).unwrap();
    }
}

fn esp_like(i: u32) -> Vec<u8> {
    let mut d = vec![0xabu8; LEN];
    d[..4].copy_from_slice(&0x0102_0304u32.to_be_bytes());
    d[4..8].copy_from_slice(&i.to_be_bytes());
    d
}

struct Rate {
    sent: u64,
    recv: u64,
    secs: f64,
}

impl Rate {
    fn line(&self, what: &str) {
        let s = self.sent as f64 / self.secs;
        let r = self.recv as f64 / self.secs;
        println!(
            "{what:<44} sent {:>6.2} Mpps  recv {:>6.2} Mpps  ({:.2} Gbit/s payload recv, {:.1}% lost)",
            s / 1e6,
            r / 1e6,
            r * (LEN * 8) as f64 / 1e9,
            if self.sent > 0 {
                100.0 * (1.0 - self.recv as f64 / self.sent as f64).max(0.0)
            } else {
                0.0
            }
        );
    }
}

fn udp_probe(pair: &Pair, gso: bool, secs: f64, port: u16) -> Rate {
    let dst: SocketAddr = format!("10.210.0.2:{port}").parse().unwrap();
    let cfg = UdpConfig {
        gso,
        ..UdpConfig::default()
    };
    let mut rx = pair
        .b
        .run(|| UdpSocket::bind(dst, &cfg, false))
        .unwrap()
        .unwrap();
    let mut tx = pair
        .a
        .run(|| UdpSocket::bind("10.210.0.1:0".parse().unwrap(), &cfg, false))
        .unwrap()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut b = RxBatch::new(32, 0, GRO_SLOT_LEN, 32 * 64);
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            let k = rx.recv_batch(&mut b).unwrap();
            if k == 0 {
                wait_readable(rx.as_raw_fd(), 50);
            }
            n += k as u64;
        }
        n
    });
    let mut batch = TxBatch::new(256, 0, 1500);
    fill(&mut batch, Some(dst), esp_like);
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        sent += tx.send_batch(&batch).unwrap() as u64;
    }
    let el = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    Rate {
        sent,
        recv: receiver.join().unwrap(),
        secs: el,
    }
}

fn tun_read_probe(secs: f64) -> Rate {
    let ns = Netns::new("probe-tunr").unwrap();
    let cfg = TunConfig {
        name: "ptun0".into(),
        mtu: 1500,
        ipv4: Some((Ipv4Addr::new(10, 211, 0, 1), 24)),
        ..TunConfig::default()
    };
    let mut q = ns
        .run(|| TunDevice::create(&cfg))
        .unwrap()
        .unwrap()
        .into_queues()
        .remove(0);
    println!("  (TUN offload {}, USO {})", q.offload(), q.udp_offload());
    let mut tx = ns
        .run(|| {
            UdpSocket::bind(
                "10.211.0.1:0".parse().unwrap(),
                &UdpConfig::default(),
                false,
            )
        })
        .unwrap()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut b = RxBatch::new(256, 64, 1500, 256);
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            let k = q.recv_batch(&mut b).unwrap();
            if k == 0 {
                wait_readable(q.as_raw_fd(), 50);
            }
            n += k as u64;
        }
        n
    });
    let dst: SocketAddr = "10.211.0.2:9".parse().unwrap();
    let mut batch = TxBatch::new(256, 0, 1500);
    fill(&mut batch, Some(dst), esp_like);
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        sent += tx.send_batch(&batch).unwrap() as u64;
    }
    let el = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    Rate {
        sent,
        recv: reader.join().unwrap(),
        secs: el,
    }
}

fn tun_write_probe(secs: f64) -> Rate {
    let ns = Netns::new("probe-tunw").unwrap();
    let cfg = TunConfig {
        name: "ptun1".into(),
        mtu: 1500,
        ipv4: Some((Ipv4Addr::new(10, 212, 0, 1), 24)),
        ..TunConfig::default()
    };
    let mut q = ns
        .run(|| TunDevice::create(&cfg))
        .unwrap()
        .unwrap()
        .into_queues()
        .remove(0);
    let mut rx = ns
        .run(|| {
            UdpSocket::bind(
                "10.212.0.1:7000".parse().unwrap(),
                &UdpConfig::default(),
                false,
            )
        })
        .unwrap()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut b = RxBatch::new(32, 0, GRO_SLOT_LEN, 32 * 64);
        let mut n = 0u64;
        while !st.load(Ordering::Relaxed) {
            let k = rx.recv_batch(&mut b).unwrap();
            if k == 0 {
                wait_readable(rx.as_raw_fd(), 50);
            }
            n += k as u64;
        }
        n
    });
    // Inner packets as the decapsulating side would write them.
    let src = (Ipv4Addr::new(10, 212, 0, 2), 5555);
    let dst = (Ipv4Addr::new(10, 212, 0, 1), 7000);
    let pkts: Vec<Vec<u8>> = (0..128u32)
        .map(|i| udp4(src, dst, &esp_like(i)[..LEN - 28]))
        .collect();
    let mut batch = TxBatch::new(128, VNET_HDR_LEN.next_multiple_of(8), 65_535);
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        for p in &pkts {
            batch.push(None, p).unwrap();
        }
        sent += q.send_batch(&mut batch).unwrap() as u64;
    }
    let el = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    Rate {
        sent,
        recv: receiver.join().unwrap(),
        secs: el,
    }
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    for c in data.chunks(2) {
        acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    acc
}

fn fold(mut a: u32) -> u16 {
    while a > 0xffff {
        a = (a & 0xffff) + (a >> 16);
    }
    a as u16
}

fn udp4(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.0.octets());
    p[16..20].copy_from_slice(&dst.0.octets());
    let c = !fold(sum16(&p[..20], 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&src.1.to_be_bytes());
    p[22..24].copy_from_slice(&dst.1.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    let ps = sum16(
        &p[20..],
        sum16(&p[12..20], 0) + 17 + (8 + payload.len()) as u32,
    );
    let c = match !fold(ps) {
        0 => 0xffff,
        c => c,
    };
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

fn main() {
    if !esparto_netns::available() {
        eprintln!("io_probe needs root and iproute2 (network namespaces)");
        std::process::exit(2);
    }
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!(
        "esparto-io probe: {LEN}-byte datagrams, {secs} s per case, {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let pair = Pair::new("probe", "10.210.0.1/24", "10.210.0.2/24").unwrap();
    udp_probe(&pair, true, secs, 4500).line("UDP GSO sendmmsg -> GRO recvmmsg (veth)");
    udp_probe(&pair, false, secs, 4501).line("UDP plain sendmmsg -> recvmmsg (veth)");
    tun_read_probe(secs).line("TUN read (UDP GSO into TUN, recv_batch split)");
    tun_write_probe(secs).line("TUN write (send_batch GRO -> local socket)");
}
