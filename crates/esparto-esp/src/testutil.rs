//! Packet and SA builders shared by this crate's tests and benchmarks.
//!
//! The topology every test uses: the sender's subnets are 10.1.0.0/16 and
//! fd00:1::/32, the receiver's 10.2.0.0/16 and fd00:2::/32.

#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Instant;

use esparto_crypto::{EspSuite, SecretBytes};

use crate::lifetime::Lifetime;
use crate::sa::{InboundSa, OutboundSa, SaConfig};
use crate::selector::Selector;

/// An IPv4/UDP packet 10.1.0.1:1000 → 10.2.0.1:2000 with `len` payload bytes.
pub fn udp4(len: usize) -> Vec<u8> {
    let total = 28 + len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 1, 0, 1]);
    p[16..20].copy_from_slice(&[10, 2, 0, 1]);
    p[20..22].copy_from_slice(&1000u16.to_be_bytes());
    p[22..24].copy_from_slice(&2000u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// An IPv6/UDP packet fd00:1::1 → fd00:2::1 with `len` payload bytes.
pub fn udp6(len: usize) -> Vec<u8> {
    let mut p = vec![0u8; 48 + len];
    p[0] = 0x60;
    p[4..6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8..10].copy_from_slice(&[0xfd, 0x00]);
    p[10..12].copy_from_slice(&[0x00, 0x01]);
    p[23] = 1;
    p[24..26].copy_from_slice(&[0xfd, 0x00]);
    p[26..28].copy_from_slice(&[0x00, 0x02]);
    p[39] = 1;
    p[40..42].copy_from_slice(&1000u16.to_be_bytes());
    p[42..44].copy_from_slice(&2000u16.to_be_bytes());
    p[44..46].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    for (i, b) in p[48..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

fn ts(s: &str) -> Selector {
    s.parse().unwrap()
}

/// The receiver's view of an SA from the 10.1/fd00:1 side to the 10.2/fd00:2 side.
pub fn config(suite: EspSuite, spi: u32, esn: bool, outer_v6: bool) -> SaConfig {
    let keymat: Vec<u8> = (0..suite.keymat_len()).map(|i| (i as u8).wrapping_mul(7).wrapping_add(spi as u8)).collect();
    let peer: SocketAddr = if outer_v6 { "[2001:db8::2]:4500".parse().unwrap() } else { "192.0.2.2:4500".parse().unwrap() };
    SaConfig {
        spi,
        suite,
        keymat: SecretBytes::from_slice(&keymat),
        esn,
        replay_window: 128,
        lifetime: Lifetime::default(),
        local_ts: vec![ts("10.2.0.0/16"), ts("fd00:2::/32")],
        remote_ts: vec![ts("10.1.0.0/16"), ts("fd00:1::/32")],
        peer,
        path_mtu: 1500,
    }
}

/// A matching outbound/inbound pair with SPI 0x1000_0001.
pub fn pair(suite: EspSuite, esn: bool, outer_v6: bool, now: Instant) -> (OutboundSa, InboundSa) {
    let cfg = config(suite, 0x1000_0001, esn, outer_v6);
    (OutboundSa::owned(&cfg, now).unwrap(), InboundSa::new(&cfg, now).unwrap())
}
