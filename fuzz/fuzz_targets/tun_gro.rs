//! Fuzz the TUN write path's GRO (`esparto_io::gro`): any batch of packets
//! plans without a panic, and what it would write holds exactly the packets
//! that went in — a plain write is a packet unchanged, and a super-packet,
//! segmented again the way the kernel does (tun-rs's `gso_split`), gives
//! back packets that went in (IPv4 ID and checksums aside, which
//! segmentation rewrites), as many as were merged.
//!
//! Input: one byte of options (bit 0: the device takes USO), then packets,
//! each a byte of flags (bit 0: fix the lengths and checksums first, so
//! merges are reachable) and a 16-bit big-endian length.
#![no_main]

use std::collections::HashSet;

use esparto_io::gro::Gro;
use esparto_io::tun::VNET_HDR_LEN;
use esparto_io::TxBatch;
use libfuzzer_sys::fuzz_target;

/// Make lengths and checksums right where the packet is IPv4/IPv6 with
/// TCP or UDP, so that the fuzzer reaches the merging code.
fn fix(p: &mut [u8]) {
    let len = p.len();
    let (l4_at, proto, pseudo) = match p.first().map(|b| b >> 4) {
        Some(4) if len >= 20 => {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            p[10..12].fill(0);
            let c = !tun_rs::checksum(&p[..20], 0);
            p[10..12].copy_from_slice(&c.to_be_bytes());
            (20, p[9], tun_rs::checksum_no_fold(&p[12..20], u64::from(p[9]) + (len - 20) as u64))
        }
        Some(6) if len >= 40 => {
            p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            (40, p[6], tun_rs::checksum_no_fold(&p[8..40], u64::from(p[6]) + (len - 40) as u64))
        }
        _ => return,
    };
    let at = match proto {
        6 if len >= l4_at + 20 => l4_at + 16,
        17 if len >= l4_at + 8 => {
            p[l4_at + 4..l4_at + 6].copy_from_slice(&((len - l4_at) as u16).to_be_bytes());
            l4_at + 6
        }
        _ => return,
    };
    p[at..at + 2].fill(0);
    let c = !tun_rs::checksum(&p[l4_at..], pseudo);
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// IPv4 ID and header checksum and the TCP/UDP checksum zeroed:
/// segmentation rewrites them (and a checksum has two spellings of zero).
fn normal(p: &[u8]) -> Vec<u8> {
    let mut v = p.to_vec();
    let (l4_at, proto) = match v.first().map(|b| b >> 4) {
        Some(4) if v.len() >= 20 => {
            v[4..6].fill(0);
            v[10..12].fill(0);
            (20, v[9])
        }
        Some(6) if v.len() >= 40 => (40, v[6]),
        _ => return v,
    };
    let at = match proto {
        6 => l4_at + 16,
        17 => l4_at + 6,
        _ => return v,
    };
    if v.len() >= at + 2 {
        v[at..at + 2].fill(0);
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let Some((&opts, mut rest)) = data.split_first() else { return };
    let mut batch = TxBatch::new(64, 16, 1600);
    let mut inputs = Vec::new();
    while rest.len() >= 3 && !batch.is_full() {
        let flags = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(1500).min(rest.len() - 3);
        let mut p = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        if p.is_empty() {
            continue;
        }
        if flags & 1 != 0 {
            fix(&mut p);
        }
        batch.push(None, &p).unwrap();
        inputs.push(p);
    }
    let n = batch.len();
    let mut gro = Gro::default();
    let plan = gro.plan(&mut batch, opts & 1 != 0);
    let originals: HashSet<Vec<u8>> = inputs.iter().map(|p| normal(p)).collect();
    let mut packets = 0;
    let mut writes = 0;
    for i in 0..n {
        let Some(w) = gro.gathered(&batch, i) else { continue };
        writes += 1;
        let hdr = tun_rs::VirtioNetHdr::decode(&w[..VNET_HDR_LEN]).unwrap();
        let pkt = &w[VNET_HDR_LEN..];
        if hdr.gso_type == 0 {
            assert_eq!(w[..VNET_HDR_LEN], [0u8; VNET_HDR_LEN]);
            assert_eq!(pkt, &inputs[i][..], "a plain write is the packet unchanged");
            packets += 1;
            continue;
        }
        let mut input = pkt.to_vec();
        let v6 = input[0] >> 4 == 6;
        let mut out = vec![vec![0u8; 1600]; 64];
        let mut sizes = vec![0usize; 64];
        let k = tun_rs::gso_split(&mut input, hdr, &mut out, &mut sizes, 0, v6).unwrap();
        assert!(k >= 2, "a super-packet of one segment");
        for s in 0..k {
            assert!(originals.contains(&normal(&out[s][..sizes[s]])), "segment {s} of write {i} is not a packet that went in");
        }
        packets += k;
    }
    assert_eq!(writes, plan.writes);
    assert_eq!(packets, n, "every packet written exactly once");
});
