//! Micro-benchmarks for the per-packet wire work: 5-tuple extraction (the
//! SPD lookup key, computed for every inner packet) and the Internet checksum
//! over a full-size payload. Run with `cargo bench -p esparto-wire`; figures
//! only mean something on an otherwise idle machine.
#![allow(missing_docs, clippy::unwrap_used)]

use core::net::{Ipv4Addr, Ipv6Addr};
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use esparto_wire::checksum;
use esparto_wire::ip::FiveTuple;
use esparto_wire::{ipv4, ipv6, tcp, udp};

fn ipv4_tcp(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let ip = ipv4::Repr {
        src_addr: Ipv4Addr::new(10, 1, 0, 2),
        dst_addr: Ipv4Addr::new(10, 2, 0, 3),
        protocol: 6,
        payload_len: len - 20,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    };
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut v[..])).unwrap();
    let t = tcp::Repr {
        src_port: 40000,
        dst_port: 443,
        seq_number: 1,
        ack_number: 2,
        flags: tcp::flags::ACK,
        window: 1000,
        urgent_ptr: 0,
        options: &[],
        payload_len: len - 40,
    };
    t.emit(&mut tcp::Packet::new_unchecked(&mut v[20..])).unwrap();
    v
}

fn ipv6_udp_behind_dest_opts(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let ip = ipv6::Repr {
        src_addr: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10),
        dst_addr: Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x20),
        next_header: ipv6::ext::DEST_OPTS,
        payload_len: len - 40,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    ip.emit(&mut ipv6::Packet::new_unchecked(&mut v[..])).unwrap();
    v[40] = 17; // Destination Options, 8 bytes, then UDP
    let u = udp::Repr { src_port: 5060, dst_port: 5061, payload_len: len - 56 };
    u.emit(&mut udp::Packet::new_unchecked(&mut v[48..])).unwrap();
    v
}

fn five_tuple(c: &mut Criterion) {
    let v4 = ipv4_tcp(1400);
    let v6 = ipv6_udp_behind_dest_opts(1400);
    assert!(FiveTuple::extract(&v4).is_ok() && FiveTuple::extract(&v6).is_ok());
    let mut g = c.benchmark_group("five_tuple");
    g.throughput(Throughput::Elements(1));
    g.bench_function("ipv4_tcp", |b| b.iter(|| FiveTuple::extract(black_box(&v4))));
    g.bench_function("ipv6_destopts_udp", |b| b.iter(|| FiveTuple::extract(black_box(&v6))));
    g.finish();
}

fn checksum_1400(c: &mut Criterion) {
    let data: Vec<u8> = (0..1400u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("data_1400", |b| b.iter(|| checksum::data(black_box(&data))));
    g.bench_function("data_1399_unaligned", |b| b.iter(|| checksum::data(black_box(&data[1..]))));
    g.finish();
}

criterion_group!(benches, five_tuple, checksum_1400);
criterion_main!(benches);
