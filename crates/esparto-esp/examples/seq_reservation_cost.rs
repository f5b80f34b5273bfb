//! What a sequence-number reservation costs on the packet path: encapsulates
//! N 64-byte packets on one outbound AES-256-GCM SA, owned or shared, with
//! or without a [`SeqLimit`] (the control thread's part, raising the limit,
//! runs every 4096 packets in every mode so the loops are alike).
//!
//! Wall-clock time on a shared machine is noise; count instructions:
//!
//! ```sh
//! cargo build --release -p esparto-esp --example seq_reservation_cost
//! for m in owned owned-reserved shared shared-reserved; do for n in 100000 300000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/seq_reservation_cost $m $n 2>&1 | grep Collected; done; done
//! ```
//!
//! (instructions per packet = difference of the two totals / 200,000).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use esparto_esp::{HEADROOM, Lifetime, OutboundSa, SaConfig, SecretBytes, SeqLimit, SharedSeq, TAILROOM};

/// Sequence numbers reserved at a time, as the daemon does without ESN.
const STEP: u64 = 1 << 20;

fn config() -> SaConfig {
    SaConfig {
        spi: 0x1000,
        suite: esparto_esp::EspSuite::Aes256Gcm16,
        keymat: SecretBytes::from_slice(&[7; 36]),
        esn: true,
        replay_window: 64,
        lifetime: Lifetime::default(),
        local_ts: vec!["10.1.0.0/16".parse().unwrap()],
        remote_ts: vec!["10.2.0.0/16".parse().unwrap()],
        peer: "192.0.2.2:4500".parse().unwrap(),
        path_mtu: 1500,
    }
}

/// Encapsulates `n` packets; returns nanoseconds per packet.
fn run(mut sa: OutboundSa, limit: Option<&SeqLimit>, n: u64) -> f64 {
    let mut buf = vec![0u8; HEADROOM + 64 + TAILROOM];
    buf[HEADROOM] = 0x45;
    buf[HEADROOM + 3] = 64;
    buf[HEADROOM + 9] = 17;
    let t = Instant::now();
    for i in 0..n {
        let r = sa.encapsulate(t, &mut buf, HEADROOM..HEADROOM + 64, 4, &mut None);
        std::hint::black_box(&r);
        if i % 4096 == 0 {
            if let Some(l) = limit.filter(|l| l.wants_more()) {
                let next = l.limit() + STEP;
                l.raise(next, next - STEP / 2);
            }
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "owned".into());
    let n: u64 = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let (now, cfg) = (Instant::now(), config());
    let limit = SeqLimit::new(0);
    limit.raise(STEP, STEP / 2);
    let ns = match mode.as_str() {
        "owned" => run(OutboundSa::owned(&cfg, now).unwrap(), None, n),
        "owned-reserved" => run(OutboundSa::owned(&cfg, now).unwrap().reserved(limit.clone()), Some(&limit), n),
        "shared" => run(OutboundSa::shared(&cfg, SharedSeq::new(), now).unwrap(), None, n),
        "shared-reserved" => {
            let sa = OutboundSa::shared(&cfg, SharedSeq::after(0), now).unwrap().reserved(Arc::clone(&limit));
            run(sa, Some(&limit), n)
        }
        m => panic!("mode {m}: owned, owned-reserved, shared or shared-reserved"),
    };
    println!("{mode}: {n} packets, {ns:.1} ns/packet");
}
