//! Fuzz the responder's state machine. A genuine initiator (same seeds
//! every run, so its messages are reproducible) talks to a responder
//! endpoint through a network the fuzzer controls: it can deliver the
//! initiator's next datagram as is, deliver it with bytes flipped, replay
//! an earlier one, inject arbitrary datagrams on port 500 or 4500, and
//! advance the clock. Responses always reach the initiator.
//!
//! Checked on every step:
//! - nothing panics;
//! - the responder reports an established IKE SA only in the step that
//!   delivered the initiator's *unmodified* IKE_AUTH request (only the
//!   initiator holds the PSK, so anything else would be an authentication
//!   bypass), and only for the initiator's identity;
//! - a Child SA is reported only for an IKE SA reported established before
//!   (or its successor after a rekey, `IkeSaRekeyed`);
//! - a rekeyed Child SA names one the responder announced, and an SA's
//!   outbound side is activated only once, after it was announced held back;
//! - the responder's Child SAs and IKE SPIs stay bounded (no leak).
//!
//! The initiator also rekeys its Child SAs and its IKE SA and asks for
//! per-resource Child SAs (RFC 9611) when the fuzzer says so, so the
//! responder's rekey, collision and TS_MAX_QUEUE paths are reachable.
#![no_main]

use esparto_crypto::DeterministicRng;
use esparto_ike::{
    ChildConfig, ConnectionConfig, Endpoint, EndpointConfig, Event, Identity, IkeSaId, PerCpuSas,
    RandomSpiAllocator, Transmit, UnixTime,
};
use esparto_wire::ike::{ExchangeType, Header, HeaderRepr};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The calendar time every datagram arrives at (PSKs only: never looked at).
const WALL_CLOCK: UnixTime = UnixTime::since_unix_epoch(Duration::from_secs(2_000_000_000));

const MOON: &str = "10.0.0.1";
const SUN: &str = "10.0.0.2";

fn endpoint(seed: u64, me: &str, peer: &str, local: &str, remote: &str, lts: &str, rts: &str) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519, aes128-sha256-ecp256").unwrap();
    c.local_addrs = vec![local.parse().unwrap()];
    c.remote_addrs = vec![remote.parse().unwrap()];
    c.local.id = Some(Identity::parse(me).unwrap());
    c.remote.id = Some(Identity::parse(peer).unwrap());
    let mut net = ChildConfig::new("net", lts, rts, "aes256gcm16, aes128-sha256-x25519").unwrap();
    net.per_cpu_sas = PerCpuSas::OnDemand;
    net.per_cpu_max = 3;
    c.children.push(net);
    c.children.push(ChildConfig::new("pfs", lts, rts, "aes128gcm16-x25519").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[Identity::parse(me).unwrap(), Identity::parse(peer).unwrap()], b"fuzz psk");
    ep
}

fn header(t: &Transmit) -> Option<HeaderRepr> {
    let d = if t.local.port() == 4500 { t.data.get(4..)? } else { &t.data[..] };
    HeaderRepr::parse(&Header::new_checked(d).ok()?).ok()
}

fuzz_target!(|data: &[u8]| {
    let mut i = endpoint(1, "@moon", "@sun", MOON, SUN, "10.1.0.0/16", "10.2.0.0/16");
    let mut r = endpoint(2, "@sun", "@moon", SUN, MOON, "10.2.0.0/16", "10.1.0.0/16");
    let mut now = Instant::now();
    let mut ike = i.initiate(now, "gw", None).unwrap();
    // The initiator's Child SAs (inbound SPIs), to rekey them.
    let mut i_children: Vec<u32> = Vec::new();
    // What the responder announced: inbound SPIs, and those held back.
    let mut r_children: HashSet<u32> = HashSet::new();
    let mut r_held: HashSet<u32> = HashSet::new();
    let mut queue: Vec<Transmit> = Vec::new();
    let mut delivered: Vec<Transmit> = Vec::new();
    let mut up: HashSet<IkeSaId> = HashSet::new();
    let mut ops = data;
    let mut acquired = false;

    while let [op, rest @ ..] = ops {
        ops = rest;
        while let Some(t) = i.poll_transmit() {
            queue.push(t);
        }
        let mut genuine_auth = false;
        match op % 8 {
            0 | 1 => {
                if queue.is_empty() {
                    continue;
                }
                let mut t = queue.remove(0);
                let mut mutated = false;
                if op % 8 == 1 {
                    if let [pos, x, rest @ ..] = ops {
                        ops = rest;
                        if *x != 0 && !t.data.is_empty() {
                            let n = t.data.len();
                            t.data[usize::from(*pos) * 7 % n] ^= x;
                            mutated = true;
                        }
                    }
                }
                genuine_auth = !mutated
                    && header(&t).is_some_and(|h| h.exchange == ExchangeType::IKE_AUTH && !h.response);
                r.handle_datagram(now, WALL_CLOCK, t.remote, t.local, &t.data);
                delivered.push(t);
            }
            2 => {
                let [len, rest @ ..] = ops else { break };
                let n = usize::from(*len).min(rest.len());
                let (raw, rest) = rest.split_at(n);
                ops = rest;
                let port = if len & 1 == 0 { 500 } else { 4500 };
                let to: SocketAddr = format!("{SUN}:{port}").parse().unwrap();
                let from: SocketAddr = format!("{MOON}:{port}").parse().unwrap();
                r.handle_datagram(now, WALL_CLOCK, to, from, raw);
            }
            3 => {
                let [secs, rest @ ..] = ops else { break };
                ops = rest;
                now += Duration::from_millis(u64::from(*secs) * 250);
                i.handle_timeout(now);
                r.handle_timeout(now);
            }
            4 => {
                let [k, rest @ ..] = ops else { break };
                ops = rest;
                if !delivered.is_empty() {
                    let t = delivered[usize::from(*k) % delivered.len()].clone();
                    r.handle_datagram(now, WALL_CLOCK, t.remote, t.local, &t.data);
                }
            }
            5 => {
                if !acquired {
                    acquired = true;
                    let _ = i.acquire(now, "gw", "pfs", Some(1));
                }
                let _ = i.liveness_check(now, ike);
            }
            6 => {
                let [k, rest @ ..] = ops else { break };
                ops = rest;
                if k & 1 == 0 && !i_children.is_empty() {
                    let spi = i_children[usize::from(*k / 2) % i_children.len()];
                    let _ = i.rekey_child(now, ike, spi);
                } else {
                    let _ = i.rekey_ike(now, ike);
                }
            }
            _ => {
                let [k, rest @ ..] = ops else { break };
                ops = rest;
                let _ = i.acquire(now, "gw", "net", Some(u16::from(*k % 8)));
            }
        }
        while let Some(t) = r.poll_transmit() {
            i.handle_datagram(now, WALL_CLOCK, t.remote, t.local, &t.data);
        }
        while let Some(e) = r.poll_event() {
            match e {
                Event::IkeSaEstablished { ike_sa, remote_id, .. } => {
                    assert!(genuine_auth, "IKE SA established without the initiator's genuine IKE_AUTH");
                    assert_eq!(remote_id, Identity::parse("@moon").unwrap());
                    up.insert(ike_sa);
                }
                Event::ChildSaEstablished(c) => {
                    assert!(up.contains(&c.ike_sa), "Child SA on an IKE SA never established");
                    if let Some(old) = c.rekeys {
                        assert!(r_children.contains(&old), "rekey of an SA never announced");
                    }
                    assert!(r_children.insert(c.inbound_spi), "inbound SPI announced twice");
                    if !c.outbound_active {
                        r_held.insert(c.inbound_spi);
                    }
                }
                Event::ChildSaOutboundActive { inbound_spi, .. } => {
                    assert!(r_held.remove(&inbound_spi), "activation of an SA not held back");
                }
                Event::ChildSaDeleted { inbound_spi, .. } => {
                    assert!(r_children.remove(&inbound_spi), "deletion of an SA never announced");
                    r_held.remove(&inbound_spi);
                }
                Event::IkeSaRekeyed { old, new, .. } => {
                    assert!(up.remove(&old), "rekey of an IKE SA never established");
                    up.insert(new);
                }
                Event::IkeSaDeleted { ike_sa, .. } => {
                    up.remove(&ike_sa);
                }
                _ => {}
            }
        }
        // Held: every announced SA, plus a redundant one being deleted
        // unannounced; bounded: the initiator makes at most 5 at a time
        // (fallback, 3 sub-SAs, "pfs") per IKE SA, rekeys replace them.
        assert!(r.child_sa_count() >= r_children.len());
        assert!(r.child_sa_count() <= 64, "Child SAs pile up: {}", r.child_sa_count());
        // Each IKE SA holds its SPI, and one more while its rekey is out.
        assert!(r.ike_spi_count() <= 2 * r.ike_sa_count(), "IKE SPIs leak");
        while let Some(e) = i.poll_event() {
            match e {
                Event::ChildSaEstablished(c) => i_children.push(c.inbound_spi),
                Event::ChildSaDeleted { inbound_spi, .. } => i_children.retain(|s| *s != inbound_spi),
                Event::IkeSaRekeyed { new, .. } => ike = new,
                _ => {}
            }
        }
    }
});
