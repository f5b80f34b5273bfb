//! Shared helpers for the namespace tests: skipping when not root, building
//! IPv4/UDP packets, and checking Internet checksums (RFC 1071) the slow,
//! obvious way, so the offload code is checked by an independent oracle.
#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use esparto_io::steer::{self, SteeringKey};
use esparto_io::udp::UdpConfig;

/// The tests' datagrams are steered as ESP is: by the first four bytes,
/// in datagrams of at least eight (the SPI and sequence number).
pub const KEY: SteeringKey = SteeringKey::new(0, 8);

/// The smallest key the tests hand out (ESP reserves the SPIs below 256).
pub const MIN_KEY: u32 = 256;

/// `UdpConfig::default()` steered by [`KEY`].
pub fn steered() -> UdpConfig {
    UdpConfig { steering: Some(KEY), ..UdpConfig::default() }
}

/// A key that datagrams carry to reach `worker` of `workers`.
pub fn key_for_worker(random: u32, worker: usize, workers: usize) -> Option<u32> {
    steer::key_for_worker(random, worker, workers, MIN_KEY)
}

/// Skip (return early, loudly) unless root with iproute2.
#[macro_export]
macro_rules! require_netns {
    ($name:expr) => {
        if !esparto_netns::available() {
            eprintln!(
                "SKIP {}: needs root and iproute2 (network namespaces)",
                $name
            );
            return;
        }
    };
}

/// One's-complement sum of 16-bit big-endian words (odd byte padded).
pub fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = chunks.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// What is wrong with an IP packet's checksums, if anything. Checks the IPv4
/// header checksum and the TCP/UDP checksum over the pseudo-header
/// (RFC 793 §3.1, RFC 768, RFC 8200 §8.1).
pub fn checksum_error(pkt: &[u8]) -> Option<String> {
    let (proto, l4, pseudo) = match pkt.first()? >> 4 {
        4 => {
            let ihl = usize::from(pkt[0] & 0xf) * 4;
            if fold(sum16(&pkt[..ihl], 0)) != 0xffff {
                return Some("IPv4 header checksum".into());
            }
            let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
            if total != pkt.len() {
                return Some(format!("IPv4 total length {total} != {}", pkt.len()));
            }
            let l4 = &pkt[ihl..];
            let mut ps = sum16(&pkt[12..20], 0);
            ps += u32::from(pkt[9]) + l4.len() as u32;
            (pkt[9], l4, ps)
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
            if plen + 40 != pkt.len() {
                return Some("IPv6 payload length".into());
            }
            let l4 = &pkt[40..];
            let mut ps = sum16(&pkt[8..40], 0);
            ps += u32::from(pkt[6]) + l4.len() as u32;
            (pkt[6], l4, ps)
        }
        v => return Some(format!("IP version {v}")),
    };
    match proto {
        6 | 17 => {
            if proto == 17 && u16::from_be_bytes([l4[6], l4[7]]) == 0 {
                return Some("UDP checksum absent".into());
            }
            if fold(sum16(l4, pseudo)) != 0xffff {
                return Some(format!("L4 checksum (proto {proto})"));
            }
            None
        }
        _ => None,
    }
}

/// An IPv4/UDP packet with correct checksums.
pub fn udp4(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40; // DF
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
    let mut ps = sum16(&p[12..20], 0) + 17 + (8 + payload.len()) as u32;
    ps = sum16(&p[20..], ps);
    let mut c = !fold(ps);
    if c == 0 {
        c = 0xffff;
    }
    p[26..28].copy_from_slice(&c.to_be_bytes());
    p
}

/// (src port, dst port) of an IPv4 TCP/UDP packet.
pub fn ports4(pkt: &[u8]) -> Option<(u16, u16)> {
    let ihl = usize::from(pkt.first()? & 0xf) * 4;
    let l4 = pkt.get(ihl..ihl + 4)?;
    Some((
        u16::from_be_bytes([l4[0], l4[1]]),
        u16::from_be_bytes([l4[2], l4[3]]),
    ))
}

/// Poll `f` until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    f()
}

/// Deterministic pseudo-random bytes for payloads.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn oracle_accepts_what_it_builds() {
    let p = udp4(
        (Ipv4Addr::new(10, 0, 0, 1), 1000),
        (Ipv4Addr::new(10, 0, 0, 2), 2000),
        b"hello!!",
    );
    assert_eq!(checksum_error(&p), None);
    let mut bad = p.clone();
    bad[30] ^= 1;
    assert!(checksum_error(&bad).is_some());
}
