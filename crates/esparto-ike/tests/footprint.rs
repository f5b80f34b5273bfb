//! Heap per established tunnel (one IKE SA and its first Child SA pair),
//! each side apart, held to a budget: the figure the crate essay's memory
//! table explains, measured the way `esparto-testbed bench setup` does (live heap
//! bytes through a counting global allocator), in-process and seeded.
//!
//! Each side's share is what dropping its endpoint frees, less what
//! dropping the same endpoint without tunnels frees, over the tunnel
//! count. Only Rust allocations are counted: cipher contexts allocated by
//! aws-lc in C would escape this test (the SA keeps none, see `keys.rs`).
//! One test in this binary, so no other thread allocates meanwhile.

#![allow(clippy::unwrap_used, missing_docs)]

use esparto_crypto::DeterministicRng;
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, RandomSpiAllocator,
    UnixTime,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Tunnels set up per measurement.
const TUNNELS: usize = 1000;
/// Heap budgets per tunnel (bytes). Measured: about 1,000 for the
/// initiator and 1,230 for the responder, which also keeps its IKE_AUTH
/// response for retransmitted requests (RFC 7296 §2.1).
const BUDGET_INITIATOR: isize = 1536;
const BUDGET_RESPONDER: isize = 1792;

fn endpoint(seed: u64, initiator: bool) -> Endpoint {
    let (me, peer, local, remote, lts, rts) = if initiator {
        (
            "@moon",
            "@sun",
            "10.0.0.1",
            "10.0.0.2",
            "10.1.0.0/16",
            "10.2.0.0/16",
        )
    } else {
        (
            "@sun",
            "@moon",
            "10.0.0.2",
            "10.0.0.1",
            "10.2.0.0/16",
            "10.1.0.0/16",
        )
    };
    // All tunnels come from one address: no per-source DoS limits here.
    let cfg = EndpointConfig {
        half_open_per_source: usize::MAX,
        cookie_threshold_per_source: usize::MAX,
        ..EndpointConfig::default()
    };
    let mut ep = Endpoint::new(
        cfg,
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![local.parse().unwrap()];
    c.remote_addrs = vec![remote.parse().unwrap()];
    c.local.id = Some(Identity::parse(me).unwrap());
    c.remote.id = Some(Identity::parse(peer).unwrap());
    // As the daemon: always ESP-in-UDP, IKE floats to 4500.
    c.encap = true;
    c.children
        .push(ChildConfig::new("net", lts, rts, "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    let ids = [Identity::parse(me).unwrap(), Identity::parse(peer).unwrap()];
    ep.secrets_mut().add_psk(&ids, b"footprint psk");
    ep
}

/// Bring up `n` tunnels, one after the other; events are drained as a
/// driver would.
fn tunnels(i: &mut Endpoint, r: &mut Endpoint, n: usize) {
    let now = Instant::now();
    // PSK only: the calendar time is never looked at.
    let wall_clock = UnixTime::since_unix_epoch(Duration::from_secs(2_000_000_000));
    let mut up = 0;
    for _ in 0..n {
        i.initiate(now, "gw", None).unwrap();
        loop {
            let mut moved = false;
            while let Some(t) = i.poll_transmit() {
                r.handle_datagram(now, wall_clock, t.remote, t.local, &t.data);
                moved = true;
            }
            while let Some(t) = r.poll_transmit() {
                i.handle_datagram(now, wall_clock, t.remote, t.local, &t.data);
                moved = true;
            }
            if !moved {
                break;
            }
        }
        for ep in [&mut *i, &mut *r] {
            while let Some(e) = ep.poll_event() {
                up += usize::from(matches!(e, Event::ChildSaEstablished(_)));
            }
        }
    }
    assert_eq!(up, 2 * n, "every tunnel up on both sides");
}

/// Bytes freed by dropping `ep`.
fn freed_by_drop(ep: Endpoint) -> isize {
    let region = Region::new(GLOBAL);
    drop(ep);
    let s = region.change();
    // Reallocations are counted in both already (`bytes_reallocated` is
    // their net once more).
    s.bytes_deallocated as isize - s.bytes_allocated as isize
}

#[test]
fn heap_per_tunnel_stays_within_budget() {
    let (mut i, mut r) = (endpoint(1, true), endpoint(2, false));
    tunnels(&mut i, &mut r, TUNNELS);
    assert_eq!((i.ike_sa_count(), r.ike_sa_count()), (TUNNELS, TUNNELS));
    assert_eq!(r.half_open_count(), 0);
    let (full_i, full_r) = (freed_by_drop(i), freed_by_drop(r));
    let (empty_i, empty_r) = (
        freed_by_drop(endpoint(1, true)),
        freed_by_drop(endpoint(2, false)),
    );
    let n = TUNNELS as isize;
    let (per_i, per_r) = ((full_i - empty_i) / n, (full_r - empty_r) / n);
    println!("heap per tunnel: initiator {per_i} B, responder {per_r} B");
    assert!(
        per_i > 0 && per_r > 0,
        "the SAs cost something: {per_i} {per_r}"
    );
    assert!(
        per_i <= BUDGET_INITIATOR,
        "initiator: {per_i} B per tunnel, budget {BUDGET_INITIATOR}"
    );
    assert!(
        per_r <= BUDGET_RESPONDER,
        "responder: {per_r} B per tunnel, budget {BUDGET_RESPONDER}"
    );
}
