//! What the COOKIE defence (RFC 7296 §2.6) costs per request, and what it
//! saves: a keyed hash run for every packet of a flood has to stay cheap
//! (floods of 10k–300k connections/s are what TCP SYN cookies face).
//!
//! - `cookie/make`, `cookie/verify` (valid and wrong): [`CookieJar`] alone,
//!   HMAC-SHA-256 with its key schedule precomputed per secret, 32-octet Ni.
//! - `cookie/hmac via Prf::prf_parts`: the same hash through
//!   `esparto_crypto::ike::Prf`, which sets the HMAC key up on every call —
//!   the price of not precomputing it.
//! - `stateless path`: `Endpoint::handle_datagram` on a genuine
//!   IKE_SA_INIT (parse, payload rules, admission, cookie, response
//!   emitted and queued) plus `poll_transmit`: the work per flood packet
//!   above the threshold, so 1/time is requests/s per core.
//! - `stateless path, wrong cookie`: the same with a COOKIE that fails.
//! - `accepted IKE_SA_INIT`: the same request admitted (X25519, key
//!   derivation, half-open SA): what every flood packet would cost without
//!   cookies.
//!
//! Before criterion runs, the heap traffic of the stateless path is
//! counted (a counting global allocator): allocations per request. The
//! admission check and the cookie allocate nothing; the parser and the
//! response datagram do.
//!
//! Run: `cargo bench -p esparto-ike --bench cookie`. Figures are only
//! meaningful on an idle machine.

#![allow(clippy::unwrap_used, missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group};
use esparto_crypto::DeterministicRng;
use esparto_crypto::ike::Prf;
use esparto_ike::cookie::CookieJar;
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Identity, RandomSpiAllocator,
    UnixTime,
};
use esparto_wire::ike::{HeaderRepr, Message, NotifyRepr, NotifyType, PayloadRepr, emit_message};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NI: [u8; 32] = [0x5a; 32];

fn endpoint(cfg: EndpointConfig, seed: u64, initiator: bool) -> Endpoint {
    let mut ep = Endpoint::new(
        cfg,
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    if initiator {
        c.local_addrs = vec!["10.0.0.1".parse().unwrap()];
        c.remote_addrs = vec!["10.0.0.2".parse().unwrap()];
    } else {
        c.local_addrs = vec!["10.0.0.2".parse().unwrap()];
    }
    c.local.id = Some(Identity::parse("@a").unwrap());
    c.children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"benchmark psk");
    ep
}

/// A genuine IKE_SA_INIT request (SA with one proposal, KE X25519,
/// 32-octet Ni, two NAT detection notifies: 256 octets or so).
fn request() -> Vec<u8> {
    let mut i = endpoint(EndpointConfig::default(), 1, true);
    i.initiate(Instant::now(), "gw", None).unwrap();
    i.poll_transmit().unwrap().data
}

/// The request with a COOKIE notify as first payload.
fn with_cookie(req: &[u8], cookie: &[u8]) -> Vec<u8> {
    let m = Message::parse(req).unwrap();
    let mut p = vec![PayloadRepr::Notify(NotifyRepr::new(
        NotifyType::COOKIE,
        cookie,
    ))];
    p.extend(m.payloads);
    let h = HeaderRepr { ..m.header };
    let mut out = Vec::new();
    emit_message(&h, &p, &mut out).unwrap();
    out
}

fn cookie_responder() -> Endpoint {
    endpoint(
        EndpointConfig {
            cookie_threshold: 0,
            ..EndpointConfig::default()
        },
        2,
        false,
    )
}

/// The calendar time every request arrives at (no certificates here).
const WALL_CLOCK: UnixTime = UnixTime::since_unix_epoch(Duration::from_secs(2_000_000_000));

fn addrs() -> (SocketAddr, SocketAddr) {
    (
        "10.0.0.2:500".parse().unwrap(),
        "198.51.100.7:500".parse().unwrap(),
    )
}

fn allocation_report() {
    const N: u64 = 10_000;
    let req = request();
    let mut r = cookie_responder();
    let (local, remote) = addrs();
    let now = Instant::now();
    // Warm up (the cookie secret is drawn, the transmit queue grows once).
    r.handle_datagram(now, WALL_CLOCK, local, remote, &req);
    while r.poll_transmit().is_some() {}
    let region = Region::new(GLOBAL);
    for _ in 0..N {
        r.handle_datagram(now, WALL_CLOCK, local, remote, &req);
        black_box(r.poll_transmit().unwrap());
    }
    let s = region.change();
    assert_eq!(r.ike_sa_count(), 0);
    assert_eq!(r.stats().cookies_sent, N + 1);
    println!(
        "stateless COOKIE path: {:.2} allocations and {:.0} bytes allocated per request \
         (three are Message::parse's: the payload list and the SA payload's proposal and \
         transform lists; one is the response datagram); request {} B, response {} B",
        s.allocations as f64 / N as f64,
        s.bytes_allocated as f64 / N as f64,
        req.len(),
        {
            r.handle_datagram(now, WALL_CLOCK, local, remote, &req);
            r.poll_transmit().unwrap().data.len()
        },
    );
}

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    let mut rng = DeterministicRng::new(9);
    let jar = CookieJar::new(
        &mut rng,
        now,
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let ip: IpAddr = "198.51.100.7".parse().unwrap();
    let spi = 0x0102_0304_0506_0708u64;
    let good = jar.make(&NI, ip, spi);
    let mut bad = *good.as_bytes().first_chunk::<17>().unwrap();
    bad[16] ^= 1;

    let mut g = c.benchmark_group("cookie");
    g.bench_function("make", |b| {
        b.iter(|| black_box(jar.make(black_box(&NI), black_box(ip), black_box(spi))))
    });
    g.bench_function("verify (valid)", |b| {
        b.iter(|| black_box(jar.verify(black_box(good.as_bytes()), &NI, ip, spi)))
    });
    g.bench_function("verify (wrong)", |b| {
        b.iter(|| black_box(jar.verify(black_box(&bad), &NI, ip, spi)))
    });
    let secret = [0x42u8; 32];
    let ip16 = [0u8; 16];
    g.bench_function("hmac via Prf::prf_parts (key set up per call)", |b| {
        b.iter(|| {
            black_box(
                Prf::HmacSha256.prf_parts(black_box(&secret), &[&NI, &ip16, &spi.to_be_bytes()]),
            )
        })
    });
    g.finish();

    let req = request();
    let (local, remote) = addrs();
    let mut g = c.benchmark_group("IKE_SA_INIT");
    let mut r = cookie_responder();
    g.bench_function("stateless path: request in, COOKIE out", |b| {
        b.iter(|| {
            r.handle_datagram(now, WALL_CLOCK, local, remote, black_box(&req));
            black_box(r.poll_transmit())
        })
    });
    assert_eq!(r.ike_sa_count(), 0);
    let wrong = with_cookie(&req, &[0x41; 17]);
    g.bench_function("stateless path, wrong cookie", |b| {
        b.iter(|| {
            r.handle_datagram(now, WALL_CLOCK, local, remote, black_box(&wrong));
            black_box(r.poll_transmit())
        })
    });
    assert_eq!(r.ike_sa_count(), 0);
    g.bench_function("accepted: X25519 + keys + half-open SA", |b| {
        b.iter_batched(
            || endpoint(EndpointConfig::default(), 3, false),
            |mut r| {
                r.handle_datagram(now, WALL_CLOCK, local, remote, &req);
                black_box(r.poll_transmit());
                r
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    allocation_report();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
