//! The responder's denial-of-service defence (RFC 7296 §2.6), end to end
//! through `Endpoint::handle_datagram`: COOKIEs above the half-open
//! threshold, the initiator following them, secret rotation and its grace
//! period, replays from other addresses, per-source and global half-open
//! limits, half-open expiry, and a 100k-request flood that must leave the
//! SA table bounded. Fake clock and seeded randomness throughout.
//!
//! Requests from "attackers" are a genuine initiator's IKE_SA_INIT with
//! the SPIi, the nonce and the COOKIE replaced and re-emitted, so they pass
//! every check a real request passes and reach the key exchange when
//! admitted.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_crypto::{DeterministicRng, Rng};
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, SpiAllocator, Stats,
};
use esparto_wire::ike::{
    ExchangeType, HeaderRepr, Message, NonceRepr, NotifyRepr, NotifyType, PayloadRepr, emit_message,
};
use sim::{MOON, SUN, Setup, assert_pair};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const I: usize = 0;
const R: usize = 1;

/// An SPI allocator that lets the test see which SPIs are live.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<HashSet<u32>>>);

impl Live {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl SpiAllocator for Live {
    fn allocate(&mut self, rng: &mut dyn Rng, _resource: Option<u16>) -> u32 {
        loop {
            let mut b = [0u8; 4];
            rng.fill_public(&mut b);
            let spi = u32::from_be_bytes(b);
            if spi >= 256 && self.0.lock().unwrap().insert(spi) {
                return spi;
            }
        }
    }
    fn release(&mut self, spi: u32) {
        assert!(
            self.0.lock().unwrap().remove(&spi),
            "released twice: {spi:08x}"
        );
    }
}

fn moon_id() -> Identity {
    Identity::parse("@moon.example").unwrap()
}
fn sun_id() -> Identity {
    Identity::parse("@sun.example").unwrap()
}

/// `sun` as the simulation's `Setup` builds it (accepting any remote
/// address), with our endpoint configuration and a visible SPI allocator.
fn responder(cfg: EndpointConfig, seed: u64, ike: &str, spis: &Live) -> Endpoint {
    let mut r = Endpoint::new(
        cfg,
        Box::new(DeterministicRng::new(seed)),
        Box::new(spis.clone()),
    );
    let mut c = ConnectionConfig::new("gw", ike).unwrap();
    c.local_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(sun_id());
    c.remote.id = Some(moon_id());
    c.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", "aes256gcm16").unwrap());
    r.add_connection(c).unwrap();
    r.secrets_mut()
        .add_psk(&[moon_id(), sun_id()], b"a shared secret");
    r
}

/// `moon` with a visible SPI allocator.
fn initiator(seed: u64, ike: &str, spis: &Live) -> Endpoint {
    let mut i = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(spis.clone()),
    );
    let mut c = ConnectionConfig::new("gw", ike).unwrap();
    c.local_addrs = vec![MOON.parse().unwrap()];
    c.remote_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(moon_id());
    c.remote.id = Some(sun_id());
    c.children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
    i.add_connection(c).unwrap();
    i.secrets_mut()
        .add_psk(&[moon_id(), sun_id()], b"a shared secret");
    i
}

fn cookie_cfg(threshold: usize) -> EndpointConfig {
    EndpointConfig {
        cookie_threshold: threshold,
        ..EndpointConfig::default()
    }
}

fn established(net: &sim::Net, i: usize) -> usize {
    net.count(i, |e| matches!(e, Event::IkeSaEstablished { .. }))
}

// ---------------------------------------------------------------------------
// Hand-made requests and a responder driven directly.

/// A genuine IKE_SA_INIT request to use as a template.
fn template() -> Vec<u8> {
    let mut i = initiator(77, "aes256gcm16-prfsha256-x25519", &Live::default());
    i.initiate(Instant::now(), "gw", None).unwrap();
    i.poll_transmit().unwrap().data
}

/// The template with SPIi, Ni and (optionally) a COOKIE as first payload.
fn request(template: &[u8], spi_i: u64, ni: &[u8], cookie: Option<&[u8]>) -> Vec<u8> {
    let msg = Message::parse(template).unwrap();
    let mut payloads = Vec::new();
    if let Some(c) = cookie {
        payloads.push(PayloadRepr::Notify(NotifyRepr::new(NotifyType::COOKIE, c)));
    }
    for p in msg.payloads {
        match p {
            PayloadRepr::Nonce(_) => payloads.push(PayloadRepr::Nonce(NonceRepr { data: ni })),
            PayloadRepr::Notify(n) if n.kind == NotifyType::COOKIE => {}
            p => payloads.push(p),
        }
    }
    let h = HeaderRepr {
        spi_i,
        ..msg.header
    };
    let mut out = Vec::new();
    emit_message(&h, &payloads, &mut out).unwrap();
    out
}

/// What the responder answered to one request.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Nothing (dropped).
    Silence,
    /// `HDR(A,0), N(COOKIE)` and nothing else.
    Cookie(Vec<u8>),
    /// SAr1, KEr, Nr…: a half-open IKE SA with this SPIr.
    Accepted(u64),
    /// Anything else.
    Other(String),
}

fn answer(ep: &mut Endpoint, spi_i: u64) -> Answer {
    let Some(t) = ep.poll_transmit() else {
        return Answer::Silence;
    };
    assert!(ep.poll_transmit().is_none(), "one answer per request");
    let data = if t.local.port() == 4500 {
        t.data.strip_prefix(&[0, 0, 0, 0]).unwrap().to_vec()
    } else {
        t.data
    };
    let m = Message::parse(&data).unwrap();
    assert_eq!(m.header.exchange, ExchangeType::IKE_SA_INIT);
    assert!(m.header.response && !m.header.initiator);
    assert_eq!((m.header.spi_i, m.header.message_id), (spi_i, 0));
    match m.payloads.as_slice() {
        [PayloadRepr::Notify(n)] if n.kind == NotifyType::COOKIE => {
            assert_eq!(m.header.spi_r, 0, "§2.6: HDR(A,0), N(COOKIE)");
            assert_eq!((n.protocol.0, n.spi.len()), (0, 0));
            assert!((1..=64).contains(&n.data.len()), "§3.10.1 length");
            Answer::Cookie(n.data.to_vec())
        }
        p if p.iter().any(|p| matches!(p, PayloadRepr::Sa(_))) => {
            assert_ne!(m.header.spi_r, 0);
            Answer::Accepted(m.header.spi_r)
        }
        p => Answer::Other(format!("{p:?}")),
    }
}

fn from(ip: IpAddr) -> SocketAddr {
    SocketAddr::new(ip, 500)
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

struct Bench {
    ep: Endpoint,
    spis: Live,
    now: Instant,
    tpl: Vec<u8>,
    local: SocketAddr,
}

impl Bench {
    fn new(cfg: EndpointConfig) -> Self {
        let spis = Live::default();
        Bench {
            ep: responder(cfg, 5, "aes256gcm16-prfsha256-x25519", &spis),
            spis,
            now: Instant::now(),
            tpl: template(),
            local: SocketAddr::new(SUN.parse().unwrap(), 500),
        }
    }

    fn send(&mut self, src: IpAddr, spi_i: u64, ni: &[u8], cookie: Option<&[u8]>) -> Answer {
        let req = request(&self.tpl, spi_i, ni, cookie);
        self.ep
            .handle_datagram(self.now, sim::wall_clock_at(Duration::ZERO), self.local, from(src), &req);
        answer(&mut self.ep, spi_i)
    }

    /// Get a cookie and come back with it, as a genuine initiator does.
    fn with_cookie(&mut self, src: IpAddr, spi_i: u64, ni: &[u8]) -> Answer {
        match self.send(src, spi_i, ni, None) {
            Answer::Cookie(c) => self.send(src, spi_i, ni, Some(&c)),
            other => other,
        }
    }

    fn stats(&self) -> Stats {
        self.ep.stats()
    }
}

const NI: &[u8] = &[7; 32];

// ---------------------------------------------------------------------------

#[test]
fn below_the_threshold_no_cookie() {
    let mut net = Setup::default().build(31);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    assert_eq!(net.delivered.len(), 4, "no extra round trip");
    let s = net.peers[R].ep.stats();
    assert_eq!(
        (s.cookies_sent, s.cookies_verified, s.cookies_rejected),
        (0, 0, 0)
    );

    // Below the threshold a cookie is ignored, valid or not (§2.6: "process
    // the message as if no cookie had been included").
    let mut b = Bench::new(EndpointConfig::default());
    assert!(matches!(
        b.send(v4(198, 51, 100, 1), 1, NI, Some(b"not ours")),
        Answer::Accepted(_)
    ));
    assert_eq!(b.stats().cookies_rejected, 0);
}

#[test]
fn above_the_threshold_the_initiator_follows_the_cookie_and_succeeds() {
    let mut net = Setup::default().build(32);
    let spis_r = Live::default();
    net.peers[R].ep = responder(cookie_cfg(0), 32, "aes256gcm16-prfsha256-x25519", &spis_r);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    assert_eq!(established(&net, R), 1);
    assert_pair(net.children(I)[0], net.children(R)[0]);

    // Six messages: request, COOKIE, request with COOKIE, response, IKE_AUTH.
    assert_eq!(net.delivered.len(), 6);
    let inits: Vec<_> = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::IKE_SA_INIT, false))
        .collect();
    assert_eq!(inits.len(), 2);
    let (first, second) = (
        Message::parse(&inits[0].data).unwrap(),
        Message::parse(&inits[1].data).unwrap(),
    );
    assert_eq!(first.header.spi_i, second.header.spi_i, "same SPIi (§2.6)");
    assert_eq!(second.header.message_id, 0);
    // "include the COOKIE notification containing the received data as the
    // first payload, and all other payloads unchanged".
    assert!(matches!(&second.payloads[0], PayloadRepr::Notify(n) if n.kind == NotifyType::COOKIE));
    assert_eq!(&second.payloads[1..], &first.payloads[..]);
    let cookie_reply = &net.peers[R].sent[0];
    assert!(cookie_reply.is(ExchangeType::IKE_SA_INIT, true));
    assert_eq!(cookie_reply.header().unwrap().spi_r, 0);

    let s = net.peers[R].ep.stats();
    assert_eq!(
        (s.cookies_sent, s.cookies_verified, s.cookies_rejected),
        (1, 1, 0)
    );
    assert_eq!(
        s.responder_sas, 1,
        "one IKE SA, made after the cookie came back"
    );
    assert_eq!(net.peers[R].ep.half_open_count(), 0, "established");
    assert_eq!(spis_r.count(), 1, "one inbound ESP SPI at the responder");
}

/// §2.6.1: a cookie and INVALID_KE_PAYLOAD in one set-up. Our cookie does
/// not cover KEi, so the initiator keeps sending it in the retry with the
/// other group (the "shorter exchange" implementations SHOULD support).
#[test]
fn cookie_then_invalid_ke_payload() {
    let s = Setup {
        ike_i: "aes256gcm16-prfsha256-x25519-ecp256".into(),
        ..Setup::default()
    };
    let mut net = s.build(33);
    net.peers[I].ep = initiator(33, "aes256gcm16-prfsha256-x25519-ecp256", &Live::default());
    net.peers[R].ep = responder(
        cookie_cfg(0),
        34,
        "aes256gcm16-prfsha256-ecp256",
        &Live::default(),
    );
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    let inits = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::IKE_SA_INIT, false))
        .count();
    assert_eq!(inits, 3, "no cookie; cookie + x25519; cookie + ecp256");
    let st = net.peers[R].ep.stats();
    assert_eq!((st.cookies_sent, st.cookies_verified), (1, 2));
    assert_eq!(st.init_refused, 1, "INVALID_KE_PAYLOAD, statelessly");
}

#[test]
fn the_cookie_answer_keeps_no_state_and_costs_no_key_exchange() {
    let mut b = Bench::new(cookie_cfg(0));
    let Answer::Cookie(c) = b.send(v4(198, 51, 100, 1), 0xabcd, NI, None) else {
        panic!("expected a cookie");
    };
    assert_eq!(c.len(), esparto_ike::cookie::COOKIE_LEN);
    assert_eq!(b.ep.ike_sa_count(), 0);
    assert_eq!(b.ep.half_open_count(), 0);
    assert_eq!(b.ep.poll_timeout(), None, "no timer either");
    assert_eq!(b.stats().responder_sas, 0);
    // The same request again gets the same cookie (nothing was stored, the
    // cookie is a function of the request), and with it, an SA.
    assert_eq!(
        b.send(v4(198, 51, 100, 1), 0xabcd, NI, None),
        Answer::Cookie(c.clone())
    );
    assert!(matches!(
        b.send(v4(198, 51, 100, 1), 0xabcd, NI, Some(&c)),
        Answer::Accepted(_)
    ));
    assert_eq!(b.ep.ike_sa_count(), 1);
    // Its retransmission finds the half-open SA (not a second one).
    assert!(matches!(
        b.send(v4(198, 51, 100, 1), 0xabcd, NI, Some(&c)),
        Answer::Accepted(_)
    ));
    assert_eq!(b.ep.ike_sa_count(), 1);
}

#[test]
fn cookie_on_the_natt_port_carries_the_marker() {
    let mut b = Bench::new(cookie_cfg(0));
    let mut req = vec![0, 0, 0, 0];
    req.extend(request(&b.tpl, 5, NI, None));
    let local = SocketAddr::new(SUN.parse().unwrap(), 4500);
    let remote = SocketAddr::new(v4(198, 51, 100, 1), 4500);
    b.ep.handle_datagram(b.now, sim::wall_clock_at(Duration::ZERO), local, remote, &req);
    assert!(matches!(answer(&mut b.ep, 5), Answer::Cookie(_)));
}

#[test]
fn replayed_or_forged_cookies_get_a_fresh_cookie_and_no_state() {
    let mut b = Bench::new(cookie_cfg(0));
    let (a, x) = (v4(198, 51, 100, 1), v4(198, 51, 100, 2));
    let Answer::Cookie(c) = b.send(a, 1, NI, None) else {
        panic!()
    };
    // The same cookie from another address (an attacker who saw it).
    let Answer::Cookie(c2) = b.send(x, 1, NI, Some(&c)) else {
        panic!("a replay from elsewhere is answered with a new cookie")
    };
    assert_ne!(c, c2, "bound to the address");
    // For another SPIi or another nonce from the same address.
    assert!(matches!(b.send(a, 2, NI, Some(&c)), Answer::Cookie(_)));
    assert!(matches!(
        b.send(a, 1, &[8; 32], Some(&c)),
        Answer::Cookie(_)
    ));
    // Garbage of every length, including empty and over-long.
    for len in [0usize, 1, 16, 17, 64, 200] {
        assert!(matches!(
            b.send(a, 1, NI, Some(&vec![0x41; len])),
            Answer::Cookie(_)
        ));
    }
    // A flipped version octet.
    let mut v = c.clone();
    v[0] ^= 1;
    assert!(matches!(b.send(a, 1, NI, Some(&v)), Answer::Cookie(_)));
    let s = b.stats();
    assert_eq!(s.cookies_rejected, 10);
    assert_eq!(s.cookies_sent, 11);
    assert_eq!(s.cookies_verified, 0);
    assert_eq!((b.ep.ike_sa_count(), b.ep.half_open_count()), (0, 0));
    // The genuine one still works.
    assert!(matches!(b.send(a, 1, NI, Some(&c)), Answer::Accepted(_)));
}

#[test]
fn secret_rotation_old_cookie_passes_in_grace_and_fails_after() {
    let cfg = EndpointConfig {
        cookie_threshold: 0,
        cookie_secret_lifetime: Duration::from_secs(60),
        cookie_grace: Duration::from_secs(10),
        ..EndpointConfig::default()
    };
    let mut b = Bench::new(cfg);
    let src = v4(198, 51, 100, 1);
    let t0 = b.now;
    let Answer::Cookie(c1) = b.send(src, 1, NI, None) else {
        panic!()
    };
    let Answer::Cookie(c2) = b.send(src, 2, NI, None) else {
        panic!()
    };
    // Past the lifetime: the next request rotates the secret.
    b.now = t0 + Duration::from_secs(61);
    let Answer::Cookie(c3) = b.send(src, 3, NI, None) else {
        panic!()
    };
    assert_ne!(c3[0], c1[0], "a new version octet");
    // Within the grace period the old cookie passes.
    assert!(matches!(b.send(src, 1, NI, Some(&c1)), Answer::Accepted(_)));
    // After it, it does not: a fresh cookie under the new secret, no state.
    b.now = t0 + Duration::from_secs(71);
    let Answer::Cookie(c2b) = b.send(src, 2, NI, Some(&c2)) else {
        panic!("expired cookie must earn a new one")
    };
    assert_eq!(c2b[0], c3[0]);
    assert_eq!(b.ep.ike_sa_count(), 1);
    assert!(matches!(
        b.send(src, 2, NI, Some(&c2b)),
        Answer::Accepted(_)
    ));
    let s = b.stats();
    assert_eq!((s.cookies_verified, s.cookies_rejected), (2, 1));
}

#[test]
fn per_source_limit_drops_even_with_a_cookie() {
    let cfg = EndpointConfig {
        cookie_threshold: 1000,
        cookie_threshold_per_source: 3,
        half_open_per_source: 5,
        ..EndpointConfig::default()
    };
    let mut b = Bench::new(cfg);
    let src = v4(198, 51, 100, 9);
    // The first three need no cookie, then this address must return one.
    for spi in 1..=3 {
        assert!(matches!(b.send(src, spi, NI, None), Answer::Accepted(_)));
    }
    assert!(matches!(b.send(src, 4, NI, None), Answer::Cookie(_)));
    assert!(matches!(b.with_cookie(src, 4, NI), Answer::Accepted(_)));
    // A valid cookie for SPI 6, obtained while the address holds four.
    let Answer::Cookie(c6) = b.send(src, 6, NI, None) else {
        panic!()
    };
    assert!(matches!(b.with_cookie(src, 5, NI), Answer::Accepted(_)));
    // Five now: nothing more from this address, valid cookie or not.
    assert_eq!(b.send(src, 6, NI, Some(&c6)), Answer::Silence);
    assert_eq!(b.send(src, 7, NI, None), Answer::Silence);
    let s = b.stats();
    assert_eq!(s.half_open_dropped_per_source, 2);
    assert_eq!(s.cookies_verified, 2);
    assert_eq!(b.ep.half_open_count(), 5);
    // Other addresses are not affected.
    assert!(matches!(
        b.send(v4(198, 51, 100, 10), 6, NI, None),
        Answer::Accepted(_)
    ));
    assert_eq!(b.ep.half_open_sources(), 2);
    // When one of the five expires, the address may come back.
    b.now += Duration::from_secs(31);
    b.ep.handle_timeout(b.now);
    assert_eq!(b.ep.half_open_count(), 0);
    assert!(matches!(b.send(src, 6, NI, None), Answer::Accepted(_)));
}

#[test]
fn a_blind_flood_forging_the_peer_address_cannot_lock_it_out() {
    // Defaults: cookies for an address from its third half-open SA on,
    // block from its fifth.
    let mut net = Setup::default().build(35);
    let spis_r = Live::default();
    net.peers[R].ep = responder(
        EndpointConfig::default(),
        35,
        "aes256gcm16-prfsha256-x25519",
        &spis_r,
    );
    let tpl = template();
    let local = SocketAddr::new(SUN.parse().unwrap(), 500);
    let moon = SocketAddr::new(MOON.parse().unwrap(), 500);
    // 1000 forged requests from moon's address, new SPIi each; the attacker
    // never sees the answers (they go to moon, which knows no such SPI).
    for spi in 1..=1000u64 {
        let req = request(&tpl, spi << 8, NI, None);
        let wall_clock = net.wall_clock();
        net.peers[R].ep.handle_datagram(net.now, wall_clock, local, moon, &req);
        while net.peers[R].ep.poll_transmit().is_some() {}
    }
    let s = net.peers[R].ep.stats();
    assert_eq!(net.peers[R].ep.half_open_count(), 3);
    assert_eq!(s.cookies_sent, 997);
    assert_eq!(s.half_open_dropped_per_source, 0);
    // The genuine moon still gets through, by way of a cookie.
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    assert_eq!(net.peers[R].ep.stats().cookies_verified, 1);
}

#[test]
fn global_cap_drops_and_counts() {
    let cfg = EndpointConfig {
        cookie_threshold: 4,
        max_half_open: 10,
        ..EndpointConfig::default()
    };
    let mut b = Bench::new(cfg);
    for i in 1..=4u8 {
        assert!(matches!(
            b.send(v4(198, 51, 100, i), 1, NI, None),
            Answer::Accepted(_)
        ));
    }
    // Above the threshold: cookies; those who return them get in, up to the cap.
    for i in 5..=10u8 {
        assert!(matches!(
            b.with_cookie(v4(198, 51, 100, i), 1, NI),
            Answer::Accepted(_)
        ));
    }
    assert_eq!(b.ep.half_open_count(), 10);
    assert_eq!(b.send(v4(198, 51, 100, 11), 1, NI, None), Answer::Silence);
    assert_eq!(b.stats().half_open_dropped_global, 1);
    assert_eq!(b.ep.ike_sa_count(), 10);
    // Expiry makes room again.
    b.now += Duration::from_secs(31);
    b.ep.handle_timeout(b.now);
    assert_eq!(b.ep.half_open_count(), 0);
    assert!(matches!(
        b.send(v4(198, 51, 100, 11), 1, NI, None),
        Answer::Accepted(_)
    ));
}

#[test]
fn half_open_expiry_frees_everything() {
    // Two kinds of half-open: forged requests at the responder, and a
    // genuine pair whose IKE_AUTH never arrives (the initiator holds an
    // inbound ESP SPI for its first Child SA meanwhile).
    let mut net = Setup::default().build(36);
    let (spis_i, spis_r) = (Live::default(), Live::default());
    net.peers[I].ep = initiator(36, "aes256gcm16-prfsha256-x25519", &spis_i);
    net.peers[R].ep = responder(
        EndpointConfig::default(),
        37,
        "aes256gcm16-prfsha256-x25519",
        &spis_r,
    );
    net.drop_if = Some(Box::new(|p| p.is(ExchangeType::IKE_AUTH, false)));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    let tpl = template();
    let local = SocketAddr::new(SUN.parse().unwrap(), 500);
    for i in 0..50u64 {
        let src = SocketAddr::new(v4(198, 51, 100, 1 + (i % 10) as u8), 500);
        let req = request(&tpl, 1000 + i, NI, None);
        let wall_clock = net.wall_clock();
        net.peers[R].ep.handle_datagram(net.now, wall_clock, local, src, &req);
    }
    net.run_for(Duration::from_secs(1));
    // 10 sources × 3 before cookies, plus moon's.
    assert_eq!(net.peers[R].ep.half_open_count(), 31);
    assert_eq!(net.peers[R].ep.ike_sa_count(), 31);
    assert_eq!(net.peers[R].ep.half_open_sources(), 11);
    assert_eq!(spis_i.count(), 1, "the initiator's pending Child SA");
    assert!(net.peers[R].ep.poll_timeout().is_some());

    net.run_for(Duration::from_secs(30));
    assert_eq!(net.peers[R].ep.half_open_count(), 0);
    assert_eq!(net.peers[R].ep.half_open_sources(), 0);
    assert_eq!(net.peers[R].ep.ike_sa_count(), 0);
    assert_eq!(spis_r.count(), 0);
    assert_eq!(net.peers[R].ep.poll_timeout(), None, "no timer left behind");
    assert!(net.peers[R].events.is_empty(), "never announced");
    // The initiator gives up on its own schedule and frees its SPI too.
    net.run_for(Duration::from_secs(200));
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    assert_eq!(spis_i.count(), 0);
    assert_eq!(net.peers[I].ep.poll_timeout(), None);
}

/// xorshift64*, so the flood is the same every run.
struct X(u64);
impl X {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn cookie_of(data: &[u8]) -> Option<Vec<u8>> {
    let m = Message::parse(data).ok()?;
    m.payloads.iter().find_map(|p| match p {
        PayloadRepr::Notify(n) if n.kind == NotifyType::COOKIE => Some(n.data.to_vec()),
        _ => None,
    })
}

/// 100 000 IKE_SA_INIT requests, 1 ms apart (100 s: half-open SAs expire
/// at 30 s, the cookie secret rotates at 60 s). The first 30 000 are blind
/// (forged sources, nobody reads the answers): the table never holds more
/// than `cookie_threshold`. Then a quarter come from 100 addresses an
/// attacker really holds and that echo every cookie, as a botnet would:
/// those get in, but never more than 5 per address or `max_half_open` in
/// all. Throughout: random, over-long and replayed cookies, and a few
/// mangled datagrams. Nothing panics; when the flood stops, everything
/// expires.
#[test]
fn a_flood_of_100k_requests_keeps_the_sa_table_bounded() {
    const THRESHOLD: usize = 50;
    const CAP: usize = 200;
    const BLIND: u64 = 30_000;
    let cfg = EndpointConfig {
        cookie_threshold: THRESHOLD,
        max_half_open: CAP,
        ..EndpointConfig::default()
    };
    let mut b = Bench::new(cfg);
    let mut x = X(0x5eed);
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut max_held = 0usize;
    let t0 = b.now;
    for n in 0..100_000u64 {
        b.now = t0 + Duration::from_millis(n);
        b.ep.handle_timeout(b.now);
        let r = x.next();
        let botnet = n >= BLIND && r % 4 == 0;
        let src = if botnet {
            v4(203, 0, 113, ((r >> 8) % 100) as u8)
        } else {
            IpAddr::V4(Ipv4Addr::from((r >> 16) as u32))
        };
        let spi = x.next() | 1;
        let mut ni = [0u8; 32];
        ni[..8].copy_from_slice(&x.next().to_be_bytes());
        let cookie: Option<Vec<u8>> = match x.next() % 4 {
            0 => Some(
                (0..(x.next() % 70) as usize)
                    .map(|_| x.next() as u8)
                    .collect(),
            ),
            // A cookie someone else got: other address, SPI and nonce.
            1 if !seen.is_empty() => Some(seen[(x.next() % seen.len() as u64) as usize].clone()),
            _ => None,
        };
        let mut req = request(&b.tpl, spi, &ni, cookie.as_deref());
        if x.next() % 50 == 0 {
            let k = (x.next() % req.len() as u64) as usize;
            req[k] ^= 1 << (x.next() % 8);
        }
        b.ep.handle_datagram(b.now, sim::wall_clock_at(Duration::ZERO), b.local, from(src), &req);
        let answers: Vec<_> = std::iter::from_fn(|| b.ep.poll_transmit()).collect();
        for t in answers {
            let Some(c) = cookie_of(&t.data) else {
                continue;
            };
            if seen.len() < 1000 {
                seen.push(c.clone());
            }
            if botnet {
                let again = request(&b.tpl, spi, &ni, Some(&c));
                b.ep.handle_datagram(b.now, sim::wall_clock_at(Duration::ZERO), b.local, from(src), &again);
                while b.ep.poll_transmit().is_some() {}
            }
        }
        let held = b.ep.ike_sa_count();
        assert_eq!(held, b.ep.half_open_count(), "nothing ever authenticates");
        if n < BLIND {
            assert!(held <= THRESHOLD, "{held} SAs at blind request {n}");
        }
        assert!(held <= CAP, "{held} SAs at request {n}");
        assert!(b.ep.half_open_sources() <= held);
        max_held = max_held.max(held);
    }
    let s = b.stats();
    eprintln!("flood: {s:?}, at most {max_held} SAs");
    assert_eq!(
        max_held, CAP,
        "the botnet filled the table to the cap, no further"
    );
    assert!(s.half_open_dropped_global > 0);
    assert!(
        s.cookies_sent > 20_000,
        "the blind flood was answered statelessly"
    );
    assert!(s.cookies_rejected > 5_000);
    assert!(s.cookies_verified >= (CAP - THRESHOLD) as u64);
    // Let everything expire: the table drains completely.
    b.now += Duration::from_secs(31);
    b.ep.handle_timeout(b.now);
    assert_eq!(b.ep.ike_sa_count(), 0);
    assert_eq!(b.ep.half_open_count(), 0);
    assert_eq!(b.ep.half_open_sources(), 0);
    assert_eq!(b.spis.count(), 0);
    assert_eq!(b.ep.poll_timeout(), None);
}
