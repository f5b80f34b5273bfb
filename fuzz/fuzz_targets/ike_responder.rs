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
//! - a Child SA is reported only for an IKE SA reported established before.
#![no_main]

use esparto_crypto::DeterministicRng;
use esparto_ike::{
    ChildConfig, Connection, Endpoint, EndpointConfig, Event, Identity, IkeSaId,
    RandomSpiAllocator, Transmit,
};
use esparto_wire::ike::{ExchangeType, Header, HeaderRepr};
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MOON: &str = "10.0.0.1";
const SUN: &str = "10.0.0.2";

fn endpoint(seed: u64, me: &str, peer: &str, local: &str, remote: &str, lts: &str, rts: &str) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = Connection::new("gw", "aes256gcm16-prfsha256-x25519, aes128-sha256-ecp256").unwrap();
    c.local_addrs = vec![local.parse().unwrap()];
    c.remote_addrs = vec![remote.parse().unwrap()];
    c.local.id = Some(Identity::parse(me).unwrap());
    c.remote.id = Some(Identity::parse(peer).unwrap());
    c.children.push(ChildConfig::new("net", lts, rts, "aes256gcm16, aes128-sha256-x25519").unwrap());
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
    let ike = i.initiate(now, "gw", None).unwrap();
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
        match op % 6 {
            0 | 1 => {
                if queue.is_empty() {
                    continue;
                }
                let mut t = queue.remove(0);
                let mut mutated = false;
                if op % 6 == 1 {
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
                r.handle_datagram(now, t.remote, t.local, &t.data);
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
                r.handle_datagram(now, to, from, raw);
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
                    r.handle_datagram(now, t.remote, t.local, &t.data);
                }
            }
            _ => {
                if !acquired {
                    acquired = true;
                    let _ = i.acquire(now, "gw", "pfs", Some(1));
                }
                let _ = i.liveness_check(now, ike);
            }
        }
        while let Some(t) = r.poll_transmit() {
            i.handle_datagram(now, t.remote, t.local, &t.data);
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
                }
                Event::IkeSaDeleted { ike_sa, .. } => {
                    up.remove(&ike_sa);
                }
                _ => {}
            }
        }
        while i.poll_event().is_some() {}
    }
});
