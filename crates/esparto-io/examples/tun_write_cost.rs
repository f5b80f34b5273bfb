//! Cost of writing a batch to a TUN, side by side in one run:
//!
//! - **tun-rs**: tun-rs 2.8's `send_multiple` (its GRO copies every packet
//!   into a fresh `Vec`, then into the head's buffer, then one `write` per
//!   super-packet) — what Esparto used before;
//! - **esparto**: `TunQueue::send_batch` (our GRO, `esparto_io::gro`: the
//!   heads' headers rewritten in place, one `writev` gathering the payloads).
//!
//! Both devices live in one namespace whose route for the destination is a
//! blackhole, so each write costs the TUN write, the route lookup and
//! freeing the packet, and nothing else. Workloads: one TCP flow of 1,400-byte packets (64
//! consecutive segments per batch), and one UDP flow of 1,400- and 64-byte
//! packets (coalesced when the kernel has USO). Each trial writes 2,000
//! batches on one thread; the two paths alternate, 7 trials each, and the
//! median nanoseconds per packet (wall clock and thread CPU time) are
//! printed with their ratio.
//!
//! Run as root: `cargo run --release -p esparto-io --example tun_write_cost`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::Ipv4Addr;
use std::time::Instant;

use esparto_io::TxBatch;
use esparto_netns::Netns;
use esparto_io::tun::{TunConfig, TunDevice, TunQueue, VNET_HDR_LEN};

const BATCH: usize = 64;
const ROUNDS: usize = 2_000;
const TRIALS: usize = 7;
const HEADROOM: usize = VNET_HDR_LEN.next_multiple_of(8);

/// An IPv4 packet of `len` bytes from `src` to 10.50.0.2, TCP (seq given)
/// or UDP, with valid checksums.
fn packet(src: [u8; 4], tcp: bool, len: usize, seq: u32) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    p[6] = 0x40;
    p[8] = 64;
    p[9] = if tcp { 6 } else { 17 };
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&[10, 50, 0, 2]);
    let c = !tun_rs::checksum(&p[..20], 0);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&40000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5201u16.to_be_bytes());
    let hdr = if tcp { 40 } else { 28 };
    for (k, b) in p[hdr..].iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(7).wrapping_add(seq as u8);
    }
    let at = if tcp {
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&1u32.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x10;
        p[34..36].copy_from_slice(&512u16.to_be_bytes());
        36
    } else {
        p[24..26].copy_from_slice(&((len - 20) as u16).to_be_bytes());
        26
    };
    let pseudo = tun_rs::checksum_no_fold(&p[12..20], u64::from(p[9]) + (len - 20) as u64);
    let c = !tun_rs::checksum(&p[20..], pseudo);
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    p
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (wall ns, CPU ns) per packet of one trial.
fn trial(mut write_batch: impl FnMut()) -> (f64, f64) {
    let (t0, c0) = (Instant::now(), thread_cpu_ns());
    for _ in 0..ROUNDS {
        write_batch();
    }
    let n = (ROUNDS * BATCH) as f64;
    (t0.elapsed().as_nanos() as f64 / n, (thread_cpu_ns() - c0) as f64 / n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let ns = Netns::new("tunwcost").unwrap();
    ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
    ns.sysctl("net.ipv4.conf.all.rp_filter", "0").unwrap();
    ns.ip(&["route", "add", "blackhole", "10.50.0.0/16"]).unwrap();

    // Ours: the TunDevice's queue (GRO of esparto_io::gro).
    let cfg = TunConfig {
        name: "tunE".into(),
        mtu: 1500,
        ipv4: Some((Ipv4Addr::new(10, 60, 0, 1), 24)),
        ..TunConfig::default()
    };
    let mut ours: TunQueue = ns.run(|| TunDevice::create(&cfg)).unwrap().unwrap().into_queues().remove(0);
    let uso = ours.udp_offload();
    // tun-rs's: a device opened the same way, written with send_multiple.
    let theirs = ns
        .run(|| {
            tun_rs::DeviceBuilder::new()
                .name("tunR")
                .mtu(1500)
                .ipv4(Ipv4Addr::new(10, 61, 0, 1), 24, None)
                .offload(true)
                .build_sync()
        })
        .unwrap()
        .unwrap();
    theirs.set_nonblocking(true).unwrap();
    let mut gro_table = tun_rs::GROTable::new();

    println!("TUN write cost, ns per packet, median of {TRIALS} trials of {ROUNDS} batches of {BATCH} packets (USO {uso})");
    println!("{:<22} {:>14} {:>14} {:>14} {:>14} {:>8}", "workload", "tun-rs wall", "esparto wall", "tun-rs CPU", "esparto CPU", "CPU ratio");
    for (label, tcp, len) in [("TCP 1400 B, one flow", true, 1400), ("UDP 1400 B, one flow", false, 1400), ("UDP 64 B, one flow", false, 64)] {
        let mk = |src: [u8; 4]| -> Vec<Vec<u8>> {
            let mss = (len - 40) as u32;
            (0..BATCH as u32).map(|k| packet(src, tcp, len, k * mss)).collect()
        };
        let ours_pkts = mk([10, 60, 0, 2]);
        let their_pkts = mk([10, 61, 0, 2]);
        let mut txb = TxBatch::new(BATCH, HEADROOM, 65_535);
        let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| Vec::with_capacity(HEADROOM + 65_535)).collect();
        let (mut ow, mut oc, mut tw, mut tc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..TRIALS {
            let (w, c) = trial(|| {
                for (b, p) in bufs.iter_mut().zip(&their_pkts) {
                    b.clear();
                    b.resize(HEADROOM, 0);
                    b.extend_from_slice(p);
                }
                theirs.send_multiple(&mut gro_table, &mut bufs, HEADROOM).unwrap();
            });
            tw.push(w);
            tc.push(c);
            let (w, c) = trial(|| {
                for p in &ours_pkts {
                    txb.push(None, p).unwrap();
                }
                ours.send_batch(&mut txb).unwrap();
            });
            ow.push(w);
            oc.push(c);
        }
        let (tw, ow, tc, oc) = (median(tw), median(ow), median(tc), median(oc));
        println!("{label:<22} {tw:>14.1} {ow:>14.1} {tc:>14.1} {oc:>14.1} {:>8.2}", oc / tc);
    }
    let st = ours.stats();
    println!("esparto: {} packets in {} writes", st.tx_packets, st.tx_writes);
}
