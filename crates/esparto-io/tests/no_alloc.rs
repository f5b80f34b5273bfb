//! The per-packet path does not allocate: after one warm-up round, UDP
//! `send_batch`/`recv_batch` (GSO/GRO) and TUN `recv_batch`/`send_batch`
//! (TSO/USO split, GRO coalescing) make no heap allocation, nor does the
//! hand-over of non-ESP datagrams to the control thread once a worker's
//! pool is made (a flood of them neither allocates nor grows memory). Counted by a
//! global allocator that tallies, per thread, allocations made while a
//! thread-local flag is set, i.e. only inside the calls under test. The
//! tally is per thread too: the tests run in parallel, and a shared one
//! credited one test's warm-up allocations to another's measured round.
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use esparto_io::control::{CONTROL_POOL, control_channel};
use esparto_netns::Netns;
use esparto_io::tun::{TunConfig, TunDevice, VNET_HDR_LEN};
use esparto_io::udp::{GRO_SLOT_LEN, UdpConfig, UdpSocket};
use esparto_io::{RxBatch, TxBatch};

struct Counting;
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn allocs_in<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, ALLOCS.with(Cell::get) - before)
}

#[test]
fn udp_batches_do_not_allocate() {
    let cfg = UdpConfig::default();
    let mut tx = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &cfg, false).unwrap();
    let mut rx = UdpSocket::bind("127.0.0.1:0".parse().unwrap(), &cfg, false).unwrap();
    let mut out = TxBatch::new(128, 0, 1500);
    let mut inb = RxBatch::new(16, 0, GRO_SLOT_LEN, 16 * 64);
    for round in 0..5 {
        out.clear();
        for i in 0..128u32 {
            let mut d = common::pattern(1400, i);
            d[..4].copy_from_slice(&[0, 0, 1, 0]);
            out.push(Some(rx.local_addr()), &d).unwrap();
        }
        let (sent, a) = allocs_in(|| tx.send_batch(&out).unwrap());
        assert_eq!(sent, 128);
        let mut got = 0;
        let mut a_rx = 0;
        common::wait_until(Duration::from_secs(5), || {
            let (n, a) = allocs_in(|| rx.recv_batch(&mut inb).unwrap());
            a_rx += a;
            got += n;
            got >= 128
        });
        assert_eq!(got, 128);
        if round > 0 {
            assert_eq!((a, a_rx), (0, 0), "round {round}: send/recv allocated");
        }
    }
}

#[test]
fn control_handover_does_not_allocate_once_the_pool_is_made() {
    let (tx, rx) = control_channel(1);
    let mut w = tx.for_worker(0);
    let peer = Some("192.0.2.7:4500".parse().unwrap());
    let ike = common::pattern(1400, 3);
    // Warm-up: the pool is made on first use.
    for _ in 0..CONTROL_POOL {
        w.send(peer, &ike).unwrap();
    }
    while rx.try_recv().is_some() {}
    for round in 0..5 {
        let (refused, a) = allocs_in(|| {
            // More than a pool's worth: the rest is refused, not queued.
            let refused = (0..3 * CONTROL_POOL).filter(|_| w.send(peer, &ike).is_err()).count();
            while let Some(d) = rx.try_recv() {
                assert_eq!(d.bytes().len(), ike.len());
            }
            refused
        });
        assert_eq!(refused, 2 * CONTROL_POOL);
        assert_eq!(a, 0, "round {round}: the hand-over allocated");
    }
    assert_eq!(w.buffers(), CONTROL_POOL);
}

struct TunRig {
    _ns: Netns,
    q: esparto_io::TunQueue,
    src: UdpSocket,
    sink: std::net::UdpSocket,
}

fn tun_rig(name: &str, net: u8) -> TunRig {
    let ns = Netns::new(name).unwrap();
    let cfg = TunConfig {
        name: "tunNA".into(),
        mtu: 1500,
        ipv4: Some((Ipv4Addr::new(10, 97, net, 1), 24)),
        ..TunConfig::default()
    };
    let q = ns
        .run(|| TunDevice::create(&cfg))
        .unwrap()
        .unwrap()
        .into_queues()
        .remove(0);
    let (src, sink) = ns
        .run(|| {
            let s = UdpSocket::bind(
                SocketAddr::from((Ipv4Addr::new(10, 97, net, 1), 0)),
                &UdpConfig::default(),
                false,
            )
            .unwrap();
            let sink = std::net::UdpSocket::bind((Ipv4Addr::new(10, 97, net, 1), 7000)).unwrap();
            (s, sink)
        })
        .unwrap();
    sink.set_nonblocking(true).unwrap();
    TunRig {
        _ns: ns,
        q,
        src,
        sink,
    }
}

#[test]
fn tun_read_does_not_allocate() {
    require_netns!("tun_read_does_not_allocate");
    let TunRig { mut q, mut src, .. } = tun_rig("noalloc-r", 0);
    let dst: SocketAddr = "10.97.0.2:9".parse().unwrap();
    let mut out = TxBatch::new(64, 0, 1500);
    for i in 0..64u32 {
        let mut d = common::pattern(1200, i);
        d[..4].copy_from_slice(&[0, 0, 2, 0]);
        out.push(Some(dst), &d).unwrap();
    }
    let mut rxb = RxBatch::new(128, 64, 1500, 128);
    for round in 0..5 {
        // A GSO send from the namespace's stack: a USO super-packet (or
        // plain packets) into the TUN, split by recv_batch.
        assert_eq!(src.send_batch(&out).unwrap(), 64);
        let mut got = 0;
        let mut allocs = 0;
        common::wait_until(Duration::from_secs(5), || {
            let (_, a) = allocs_in(|| q.recv_batch(&mut rxb).unwrap());
            allocs += a;
            // Count ours only: the stack may also emit e.g. IPv6 router
            // solicitations on a fresh interface.
            got += rxb
                .iter()
                .filter(|(p, _)| {
                    p[0] >> 4 == 4 && p[9] == 17 && common::ports4(p).map(|x| x.1) == Some(9)
                })
                .count();
            got >= 64
        });
        assert_eq!(got, 64);
        if round > 0 {
            assert_eq!(allocs, 0, "round {round}: TUN read allocated");
        }
    }
    assert!(q.stats().rx_gso_reads > 0, "the reads split super-packets");
}

/// The TUN write path (our GRO, `esparto_io::gro`, and one `writev` per
/// super-packet) allocates nothing once warm. tun-rs 2.8's GRO, used
/// before, allocated one `Vec` per packet and failed this test.
#[test]
fn tun_write_does_not_allocate() {
    require_netns!("tun_write_does_not_allocate");
    let TunRig { mut q, sink, .. } = tun_rig("noalloc-w", 1);
    let mut txb = TxBatch::new(128, VNET_HDR_LEN.next_multiple_of(8), 65_535);
    let inner: Vec<Vec<u8>> = (0..64u32)
        .map(|i| {
            common::udp4(
                (Ipv4Addr::new(10, 97, 1, 2), 5555),
                (Ipv4Addr::new(10, 97, 1, 1), 7000),
                &common::pattern(1000, i),
            )
        })
        .collect();
    let mut buf = [0u8; 2048];
    for round in 0..5 {
        // 64 packets of one UDP flow, coalesced on the way in.
        for p in &inner {
            txb.push(None, p).unwrap();
        }
        let (n, allocs) = allocs_in(|| q.send_batch(&mut txb).unwrap());
        assert_eq!(n, 64);
        let mut delivered = 0;
        common::wait_until(Duration::from_secs(5), || {
            while sink.recv(&mut buf).is_ok() {
                delivered += 1;
            }
            delivered >= 64
        });
        assert_eq!(delivered, 64);
        if round > 0 {
            assert_eq!(allocs, 0, "round {round}: TUN write allocated");
        }
    }
    let st = q.stats();
    if q.udp_offload() {
        assert_eq!(st.tx_writes, 5, "64 datagrams of one flow, one write per round: {st:?}");
    }
}
