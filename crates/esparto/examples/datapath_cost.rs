//! Instruction counts of the data plane's per-packet work, for
//! `valgrind --tool=callgrind`: ESP encapsulation and decapsulation through
//! the worker's datapath ([`esparto::datapath::EspDatapath`], batches of
//! 64 as a worker hands them over), and GRO's plan for a batch of 64 TCP
//! segments of one flow on the TUN write path.
//!
//! Each measured call is a function of its own (`measured_*`), so that
//! callgrind counts it alone, without the set-up and the refilling of the
//! batches between calls:
//!
//! ```sh
//! cargo build --release -p esparto --example datapath_cost
//! valgrind --tool=callgrind --toggle-collect='*measured_outbound*' \
//!     target/release/examples/datapath_cost encap 64 100
//! # instructions per packet = the total / (100 batches × 64)
//! ```
//!
//! Arguments: `encap|decap|gro`, the inner packet size in bytes (IP header
//! included, 64..=1500), the number of batches.

use std::net::SocketAddr;
use std::time::Instant;

use esparto::datapath::{EspCommand, EspDatapath, IcmpSources};
use esparto_esp::{
    Action, Command, EspSuite, HEADROOM, InboundSa, Lifetime, OutboundSa, Policy, SaConfig, SecretBytes, TAILROOM,
};
use esparto_io::gro::Gro;
use esparto_io::worker::{Datapath, IoStats};
use esparto_io::{RxBatch, TxBatch};
use esparto_wire::ip::proto;
use esparto_wire::{esp, ipv4, tcp, udp};

/// Packets per batch: what a worker hands the datapath at a time.
const BATCH: usize = 64;
/// The largest inner packet measured.
const MAX_SIZE: usize = 1500;

fn sa_config() -> SaConfig {
    SaConfig {
        spi: 0x1000,
        suite: EspSuite::Aes256Gcm16,
        keymat: SecretBytes::from_slice(&[7u8; 36]),
        esn: true,
        replay_window: 1024,
        lifetime: Lifetime::default(),
        local_ts: vec!["10.2.0.0/16".parse().expect("selector")],
        remote_ts: vec!["10.1.0.0/16".parse().expect("selector")],
        peer: "192.0.2.2:4500".parse().expect("address"),
        path_mtu: 9000,
    }
}

fn ipv4(len: usize, protocol: u8, ident: u16) -> (Vec<u8>, ipv4::Repr) {
    let mut p = vec![0u8; len];
    let repr = ipv4::Repr {
        src_addr: [10, 1, 0, 1].into(),
        dst_addr: [10, 2, 0, 1].into(),
        protocol,
        payload_len: len - ipv4::HEADER_LEN,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    repr.emit(&mut ipv4::Packet::new_unchecked(&mut p[..])).expect("ipv4 header");
    (p, repr)
}

/// An IPv4/UDP packet of `len` bytes from 10.1.0.1 to 10.2.0.1.
fn udp_packet(len: usize) -> Vec<u8> {
    let (mut p, _) = ipv4(len, proto::UDP, 0);
    let mut u = udp::Packet::new_unchecked(&mut p[ipv4::HEADER_LEN..]);
    u.set_src_port(1000);
    u.set_dst_port(2000);
    u.set_len((len - ipv4::HEADER_LEN) as u16);
    p
}

/// A TCP segment of `len` bytes with sequence number `seq` and valid
/// checksums, one flow for all.
fn tcp_segment(len: usize, seq: u32) -> Vec<u8> {
    let (mut p, ip) = ipv4(len, proto::TCP, seq as u16);
    let t = tcp::Repr {
        src_port: 4000,
        dst_port: 5001,
        seq_number: seq,
        ack_number: 7,
        flags: tcp::flags::ACK,
        window: 1000,
        urgent_ptr: 0,
        options: &[],
        payload_len: len - ipv4::HEADER_LEN - tcp::HEADER_LEN,
    };
    let mut tp = tcp::Packet::new_unchecked(&mut p[ipv4::HEADER_LEN..]);
    t.emit(&mut tp).expect("tcp header");
    for (i, b) in tp.payload_mut().iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    tp.fill_checksum_v4(ip.src_addr, ip.dst_addr).expect("tcp checksum");
    p
}

/// A datapath with one policy, its outbound SA and the inbound SA of the
/// same keys.
fn datapath() -> EspDatapath {
    let (tx, rx) = std::sync::mpsc::sync_channel(1024);
    // Events are not read: the receiver lives as long as the process.
    std::mem::forget(rx);
    let mut dp = EspDatapath::new(0, tx, IcmpSources::default());
    let now = Instant::now();
    let io = IoStats::default();
    let ts = |s: &str| s.parse().expect("selector");
    let policy = Policy { local: ts("10.1.0.0/16"), remote: ts("10.2.0.0/16"), action: Action::Protect(1), priority: 100 };
    let out = OutboundSa::owned(&sa_config(), now).expect("outbound SA");
    let inb = InboundSa::new(&sa_config(), now).expect("inbound SA");
    for c in [
        Command::AddPolicy(0, Box::new(policy)),
        Command::AddGroup { id: 1, per_cpu: false },
        Command::SetFallback(1, Box::new(out)),
        Command::AddInbound(Box::new(inb)),
    ] {
        dp.on_command(now, EspCommand::Esp(c), &io);
    }
    dp
}

#[inline(never)]
fn measured_outbound(dp: &mut EspDatapath, now: Instant, pkts: &mut RxBatch, out: &mut TxBatch, tun: &mut TxBatch) {
    dp.outbound(now, pkts, 0, out, tun);
}

#[inline(never)]
fn measured_inbound(dp: &mut EspDatapath, now: Instant, dgrams: &mut RxBatch, tun: &mut TxBatch, ctl: &mut TxBatch) {
    dp.inbound(now, dgrams, 0, tun, ctl);
}

#[inline(never)]
fn measured_plan(gro: &mut Gro, batch: &mut TxBatch) -> usize {
    gro.plan(batch, true).writes
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: datapath_cost encap|decap|gro SIZE BATCHES";
    let (Some(what), Some(size), Some(batches)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let size: usize = size.parse().expect("SIZE: a number of bytes");
    let batches: usize = batches.parse().expect("BATCHES: a number");
    assert!((64..=MAX_SIZE).contains(&size), "SIZE: 64..=1500");
    let now = Instant::now();
    let peer: SocketAddr = "192.0.2.2:4500".parse().expect("address");
    let slot = HEADROOM + MAX_SIZE + TAILROOM;
    match what.as_str() {
        "encap" => {
            let mut dp = datapath();
            let inner = udp_packet(size);
            let mut pkts = RxBatch::new(BATCH, HEADROOM, MAX_SIZE + TAILROOM, BATCH);
            let mut out = TxBatch::new(BATCH, 0, slot);
            let mut tun = TxBatch::new(BATCH, 16, 2048);
            for _ in 0..batches {
                pkts.clear();
                out.clear();
                for _ in 0..BATCH {
                    pkts.push_read(&[&inner], None).expect("room for a batch");
                }
                measured_outbound(&mut dp, now, &mut pkts, &mut out, &mut tun);
                assert_eq!(out.len(), BATCH, "every packet encapsulated");
            }
        }
        "decap" => {
            let mut dp = datapath();
            let mut sender = OutboundSa::owned(&sa_config(), now).expect("outbound SA");
            let inner = udp_packet(size);
            let esp: Vec<Vec<u8>> = (0..batches * BATCH)
                .map(|_| {
                    let mut buf = vec![0u8; slot];
                    buf[HEADROOM..HEADROOM + size].copy_from_slice(&inner);
                    let r = sender
                        .encapsulate(now, &mut buf, HEADROOM..HEADROOM + size, esp::NEXT_HEADER_IPV4, &mut None)
                        .expect("encapsulated");
                    buf[r].to_vec()
                })
                .collect();
            let mut dgrams = RxBatch::new(BATCH, 0, slot, BATCH);
            let mut tun = TxBatch::new(BATCH, 16, 2048);
            let mut ctl = TxBatch::new(16, 0, 2048);
            for chunk in esp.chunks(BATCH) {
                dgrams.clear();
                tun.clear();
                for d in chunk {
                    dgrams.push_read(&[d], Some(peer)).expect("room for a batch");
                }
                measured_inbound(&mut dp, now, &mut dgrams, &mut tun, &mut ctl);
                assert_eq!(tun.len(), chunk.len(), "every datagram decapsulated");
            }
        }
        "gro" => {
            let mut gro = Gro::default();
            let mut batch = TxBatch::new(BATCH, 16, 2048);
            let payload = size - ipv4::HEADER_LEN - tcp::HEADER_LEN;
            let segs: Vec<Vec<u8>> = (0..BATCH).map(|k| tcp_segment(size, 1 + (k * payload) as u32)).collect();
            for _ in 0..batches {
                batch.clear();
                for s in &segs {
                    batch.push(None, s).expect("room for a batch");
                }
                let writes = measured_plan(&mut gro, &mut batch);
                assert!(writes < BATCH / 8, "the segments merged ({writes} writes)");
            }
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
