//! Fuzz `Worker::decapsulate`: any byte string is a delivered packet or a
//! counted drop, never a panic, and a delivered packet lies inside the buffer.
//!
//! The first byte picks the SA (AES-GCM with ESN, or AES-CBC + HMAC without)
//! and whether to overwrite the SPI with that SA's, so most inputs reach the
//! replay and integrity checks rather than stopping at the SPI lookup.
#![no_main]

use std::sync::OnceLock;
use std::time::Instant;

use esparto_crypto::{EspSuite, Integ, SecretBytes};
use esparto_esp::{Command, InboundSa, Lifetime, SaConfig, Worker};
use libfuzzer_sys::fuzz_target;

const SPIS: [u32; 2] = [0x1000_0001, 0x1000_0002];

fn config(spi: u32, suite: EspSuite, esn: bool) -> SaConfig {
    SaConfig {
        spi,
        suite,
        keymat: SecretBytes::from_slice(&vec![0x42; suite.keymat_len()]),
        esn,
        replay_window: 64,
        lifetime: Lifetime::default(),
        local_ts: vec!["10.2.0.0/16".parse().unwrap()],
        remote_ts: vec!["10.1.0.0/16".parse().unwrap()],
        peer: "192.0.2.2:4500".parse().unwrap(),
        path_mtu: 1500,
    }
}

fn now() -> Instant {
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else { return };
    let mut w = Worker::new(0);
    let gcm = config(SPIS[0], EspSuite::Aes256Gcm16, true);
    let cbc = config(SPIS[1], EspSuite::AesCbc { key_bits: 128, integ: Integ::HmacSha256_128 }, false);
    w.apply(Command::AddInbound(Box::new(InboundSa::new(&gcm, now()).unwrap())));
    w.apply(Command::AddInbound(Box::new(InboundSa::new(&cbc, now()).unwrap())));
    let mut buf = rest.to_vec();
    if ctl & 1 == 1 && buf.len() >= 4 {
        buf[..4].copy_from_slice(&SPIS[usize::from(ctl >> 1 & 1)].to_be_bytes());
    }
    let n = buf.len();
    match w.decapsulate(now(), &mut buf, 0..n) {
        // A dummy packet is a counted drop too: a delivered range is never empty.
        Ok(inner) => assert!(inner.end <= n && inner.start < inner.end),
        Err(_) => assert_eq!(w.drops().total(), 1),
    }
});
