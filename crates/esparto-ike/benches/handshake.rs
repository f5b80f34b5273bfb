//! IKE set-up cost: full IKE_SA_INIT + IKE_AUTH (PSK, X25519, AES-256-GCM,
//! first Child SA) between two in-memory endpoints, and the heap each
//! established tunnel (IKE SA + one Child SA pair) keeps, measured with a
//! counting global allocator.
//!
//! Run: `cargo bench -p esparto-ike --bench handshake`. One iteration is
//! one complete handshake on both sides (both endpoints run on this core),
//! so handshakes/s per core for one side is about twice 1/time.
//! Figures are only meaningful on an idle machine.

#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group};
use esparto_crypto::DeterministicRng;
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, RandomSpiAllocator,
    UnixTime,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Live heap bytes allocated since `region` started.
fn live(region: &Region<'_, System>) -> isize {
    let s = region.change();
    // Reallocations are in `bytes_allocated`/`bytes_deallocated` already
    // (`bytes_reallocated` is their net again, not to be added).
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

fn endpoint(
    seed: u64,
    me: &str,
    peer: &str,
    local: &str,
    remote: &str,
    lts: &str,
    rts: &str,
) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![local.parse().unwrap()];
    c.remote_addrs = vec![remote.parse().unwrap()];
    c.local.id = Some(Identity::parse(me).unwrap());
    c.remote.id = Some(Identity::parse(peer).unwrap());
    c.children
        .push(ChildConfig::new("net", lts, rts, "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"benchmark psk");
    ep
}

fn pair(seed: u64) -> (Endpoint, Endpoint) {
    (
        endpoint(
            seed,
            "@moon",
            "@sun",
            "10.0.0.1",
            "10.0.0.2",
            "10.1.0.0/16",
            "10.2.0.0/16",
        ),
        endpoint(
            seed + 1,
            "@sun",
            "@moon",
            "10.0.0.2",
            "10.0.0.1",
            "10.2.0.0/16",
            "10.1.0.0/16",
        ),
    )
}

/// One handshake: initiate, move datagrams until quiet. Returns the
/// number of Child SAs established (both sides).
fn handshake(i: &mut Endpoint, r: &mut Endpoint, now: Instant) -> usize {
    // PSK: the calendar time is never looked at.
    let wall_clock = UnixTime::since_unix_epoch(Duration::from_secs(2_000_000_000));
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
    let mut n = 0;
    for ep in [i, r] {
        while let Some(e) = ep.poll_event() {
            n += usize::from(matches!(e, Event::ChildSaEstablished(_)));
        }
    }
    n
}

fn memory_report() {
    const N: usize = 2000;
    let now = Instant::now();
    let (mut i, mut r) = pair(7);
    // Warm up the maps so their growth is not attributed to the first SAs.
    handshake(&mut i, &mut r, now);
    let region = Region::new(GLOBAL);
    let mut children = 0;
    for _ in 0..N {
        children += handshake(&mut i, &mut r, now);
    }
    assert_eq!(children, 2 * N);
    let both = live(&region);
    // Drop the initiator: what remains allocated is the responder's state.
    let initiator_region = Region::new(GLOBAL);
    drop(i);
    let initiator = -live(&initiator_region);
    let n = N as isize;
    println!(
        "heap per established tunnel (IKE SA + 1 Child SA pair), {N} tunnels: both ends {} B; \
         initiator endpoint {} B/tunnel (its fixed part included), so responder about {} B",
        both / n,
        initiator / n,
        (both - initiator) / n,
    );
    drop(r);
}

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    c.bench_function(
        "ike_sa_init+ike_auth (psk, x25519, aes256gcm16), both sides",
        |b| {
            b.iter_batched(
                || pair(1),
                |(mut i, mut r)| black_box(handshake(&mut i, &mut r, now)),
                BatchSize::SmallInput,
            )
        },
    );
    // Handshakes into endpoints that already hold many SAs (map growth, timers).
    let (mut i, mut r) = pair(3);
    c.bench_function("handshake into endpoints holding many SAs", |b| {
        b.iter(|| black_box(handshake(&mut i, &mut r, now)))
    });
}

criterion_group!(benches, bench);

fn main() {
    memory_report();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
