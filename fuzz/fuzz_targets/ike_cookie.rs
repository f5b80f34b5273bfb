//! Fuzz the responder's denial-of-service defence (RFC 7296 §2.6): a
//! responder with small limits (cookie threshold chosen by the input,
//! 2 half-open SAs per source before cookies, 3 at most per source, 8 in
//! all, a cookie secret rotating every 20 s with 5 s of grace) receives a
//! stream the fuzzer controls: genuine IKE_SA_INIT requests from four
//! addresses with chosen SPIs and nonces, with no cookie, with a cookie it
//! received earlier (for any address, SPI or nonce: replays), or with
//! arbitrary cookie bytes; mangled requests; arbitrary datagrams on 500
//! and 4500; and time passing.
//!
//! Checked on every step: nothing panics; every SA the responder holds is
//! half-open (nothing can authenticate here) and their number never exceeds
//! the global cap, nor the addresses holding them the four in use; every
//! COOKIE answer is `HDR(A,0), N(COOKIE)` with 1–64 octets of data. At the
//! end, once the half-open timeout has passed, nothing is left: no SA, no
//! timer.
#![no_main]

use esparto_crypto::DeterministicRng;
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Identity, RandomSpiAllocator,
    UnixTime,
};
use esparto_wire::ike::{
    HeaderRepr, Message, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, emit_message,
};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The calendar time every datagram arrives at (PSKs only: never looked at).
const WALL_CLOCK: UnixTime = UnixTime::since_unix_epoch(Duration::from_secs(2_000_000_000));

const CAP: usize = 8;

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
    c.local.id = Some(Identity::parse("@x").unwrap());
    c.children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"fuzz psk");
    ep
}

/// A genuine IKE_SA_INIT request, made once.
fn template() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        let mut i = endpoint(EndpointConfig::default(), 1, true);
        i.initiate(Instant::now(), "gw", None).unwrap();
        i.poll_transmit().unwrap().data
    })
}

fn request(spi_i: u64, nonce: u8, cookie: Option<&[u8]>) -> Vec<u8> {
    let msg = Message::parse(template()).unwrap();
    let ni = [nonce; 32];
    let mut payloads = Vec::new();
    if let Some(c) = cookie {
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, c)));
    }
    for p in msg.payloads {
        match p {
            PayloadRepr::Nonce(_) => payloads.push(PayloadRepr::Nonce(NonceRepr { data: &ni })),
            p => payloads.push(p),
        }
    }
    let h = HeaderRepr {
        spi_i,
        ..msg.header
    };
    let mut out = Vec::new();
    // A cookie too long for a payload just makes no request.
    if emit_message(&h, &payloads, &mut out).is_err() {
        out.clear();
    }
    out
}

fn take<'a>(ops: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if ops.len() < n {
        return None;
    }
    let (a, b) = ops.split_at(n);
    *ops = b;
    Some(a)
}

fuzz_target!(|data: &[u8]| {
    let Some((&threshold, mut ops)) = data.split_first() else {
        return;
    };
    let cfg = EndpointConfig {
        cookie_threshold: usize::from(threshold % 10),
        cookie_threshold_per_source: 2,
        half_open_per_source: 3,
        max_half_open: CAP,
        cookie_secret_lifetime: Duration::from_secs(20),
        cookie_grace: Duration::from_secs(5),
        ..EndpointConfig::default()
    };
    let mut r = endpoint(cfg, 2, false);
    let t0 = Instant::now();
    let mut now = t0;
    let local500 = SocketAddr::new("10.0.0.2".parse().unwrap(), 500);
    let local4500 = SocketAddr::new("10.0.0.2".parse().unwrap(), 4500);
    let mut cookies: Vec<Vec<u8>> = Vec::new();

    while let Some(&[op, a, b]) = take(&mut ops, 3).map(|s| <&[u8; 3]>::try_from(s).unwrap()) {
        let src = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1 + a % 4)), 500);
        let spi = u64::from(b) + 1;
        let nonce = a >> 2;
        let (local, dgram) = match op % 7 {
            0 => (local500, request(spi, nonce, None)),
            1 => {
                let c = cookies.get(usize::from(op / 7) % cookies.len().max(1)).cloned();
                (local500, request(spi, nonce, c.as_deref()))
            }
            2 => {
                let n = usize::from(op / 7) % 70;
                let c = take(&mut ops, n).unwrap_or(&[]).to_vec();
                (local500, request(spi, nonce, Some(&c)))
            }
            3 => {
                now += Duration::from_millis(250 * u64::from(a));
                r.handle_timeout(now);
                continue;
            }
            4 => {
                let mut q = request(spi, nonce, None);
                let k = usize::from(a) * 7 % q.len().max(1);
                if let Some(x) = q.get_mut(k) {
                    *x ^= op | 1;
                }
                (local500, q)
            }
            5 => {
                let n = usize::from(op / 7) % 64;
                let raw = take(&mut ops, n).unwrap_or(&[]).to_vec();
                (if a & 1 == 0 { local500 } else { local4500 }, raw)
            }
            _ => {
                // The same request on the NAT-T port, behind the marker.
                let mut q = vec![0, 0, 0, 0];
                q.extend(request(spi, nonce, None));
                (local4500, q)
            }
        };
        r.handle_datagram(now, WALL_CLOCK, local, src, &dgram);
        while let Some(t) = r.poll_transmit() {
            let d = if t.local.port() == 4500 { &t.data[4..] } else { &t.data[..] };
            let m = Message::parse(d).expect("we emit what we parse");
            if let [PayloadRepr::Notify(n)] = m.payloads.as_slice() {
                if n.kind == NotifyType::COOKIE {
                    assert_eq!(m.header.spi_r, 0, "HDR(A,0), N(COOKIE)");
                    assert!((1..=64).contains(&n.data.len()));
                    if cookies.len() < 32 {
                        cookies.push(n.data.to_vec());
                    }
                }
            }
        }
        let held = r.ike_sa_count();
        assert_eq!(held, r.half_open_count(), "only half-open SAs here");
        assert!(held <= CAP, "{held} half-open SAs");
        assert!(r.half_open_sources() <= 4);
    }
    now += Duration::from_secs(31);
    r.handle_timeout(now);
    assert_eq!(r.ike_sa_count(), 0);
    assert_eq!(r.half_open_count(), 0);
    assert_eq!(r.poll_timeout(), None);
});
