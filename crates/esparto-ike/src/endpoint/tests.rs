//! Responder behaviour on malformed, tampered, out-of-window and
//! unsupported requests. These need messages that only a peer holding the
//! IKE SA keys can make, so they live inside the crate: the initiator's
//! SA seals whatever the test wants.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::config::ChildConfig;
use crate::identity::Identity;
use crate::spi::RandomSpiAllocator;
use esparto_crypto::DeterministicRng;
use esparto_wire::ike::{
    DeleteRepr, HeaderRepr, KeRepr, NotifyRepr, NotifyType, PayloadRepr, PayloadType, ProtocolId,
    SkLayout, emit_encrypted, emit_message, parse_payloads, strip_padding,
};

const MOON: &str = "10.0.0.1";
const SUN: &str = "10.0.0.2";

/// The calendar time the datagrams arrive at: fixed (these tests use PSKs,
/// so it is never looked at).
pub(super) fn wall_clock() -> UnixTime {
    UnixTime::since_unix_epoch(core::time::Duration::from_secs(2_000_000_000))
}

fn endpoint(seed: u64, local: &str, remote: &str, me: &str, peer: &str) -> Endpoint {
    endpoint_with(seed, local, remote, me, peer, |_| {})
}

fn endpoint_with(
    seed: u64,
    local: &str,
    remote: &str,
    me: &str,
    peer: &str,
    tweak: fn(&mut ConnectionConfig),
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
    let (l, r) = if local == MOON {
        ("10.1.0.0/16", "10.2.0.0/16")
    } else {
        ("10.2.0.0/16", "10.1.0.0/16")
    };
    c.children
        .push(ChildConfig::new("net", l, r, "aes256gcm16").unwrap());
    tweak(&mut c);
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"secret");
    ep
}

struct Pair {
    i: Endpoint,
    r: Endpoint,
    now: Instant,
    ike: IkeSaId,
}

/// Move datagrams between the two until quiet; return what went I -> R
/// and R -> I.
fn pump(p: &mut Pair) -> (Vec<Transmit>, Vec<Transmit>) {
    let (mut to_r, mut to_i) = (Vec::new(), Vec::new());
    loop {
        let mut moved = false;
        while let Some(t) = p.i.poll_transmit() {
            p.r.handle_datagram(p.now, wall_clock(), t.remote, t.local, &t.data);
            to_r.push(t);
            moved = true;
        }
        while let Some(t) = p.r.poll_transmit() {
            p.i.handle_datagram(p.now, wall_clock(), t.remote, t.local, &t.data);
            to_i.push(t);
            moved = true;
        }
        if !moved {
            return (to_r, to_i);
        }
    }
}

fn established() -> Pair {
    established_with(|_| {})
}

/// An IKE SA with one Child SA; `tweak_r` changes the responder's connection.
fn established_with(tweak_r: fn(&mut ConnectionConfig)) -> Pair {
    let mut p = Pair {
        i: endpoint(1, MOON, SUN, "@moon", "@sun"),
        r: endpoint_with(2, SUN, MOON, "@sun", "@moon", tweak_r),
        now: Instant::now(),
        ike: IkeSaId(0),
    };
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    pump(&mut p);
    let mut children = 0;
    while let Some(e) = p.r.poll_event() {
        children += usize::from(matches!(e, Event::ChildSaEstablished(_)));
    }
    assert_eq!(children, 1);
    while p.i.poll_event().is_some() {}
    p
}

/// Seal `inner` as a request from the initiator's SA with the next message
/// ID; `critical` sets the critical bit of the first inner payload.
fn request(
    p: &mut Pair,
    ex: ExchangeType,
    inner: &[PayloadRepr<'_>],
    critical: bool,
    mid_delta: i64,
) -> Vec<u8> {
    let sa = p.i.sas.get_mut(&p.ike.0).unwrap();
    let mid = (i64::from(sa.next_mid) + mid_delta) as u32;
    let h = sa.header(ex, false, mid);
    let keys = sa.keys.as_ref().unwrap();
    let c = &keys.cipher_i().unwrap();
    let layout = SkLayout {
        iv_len: c.iv_len(),
        icv_len: c.icv_len(),
        block_size: c.block_size(),
    };
    let mut out = Vec::new();
    let off = emit_encrypted(&h, inner, &layout, &mut out).unwrap();
    if critical {
        out[off + 4 + layout.iv_len + 1] |= 0x80;
    }
    c.seal_sk(&mut out, off, 1000 + sa.iv_seed).unwrap();
    sa.iv_seed += 1;
    if mid_delta == 0 {
        sa.next_mid += 1;
    }
    out
}

/// Send a datagram to the responder as the initiator would (NAT-T port if floated).
fn send(p: &mut Pair, data: &[u8]) -> Vec<Transmit> {
    let sa = &p.i.sas[&p.ike.0];
    let (local, remote) = (sa.local, sa.remote);
    let mut d = Vec::new();
    if local.port() == 4500 {
        d.extend_from_slice(&[0; 4]);
    }
    d.extend_from_slice(data);
    p.r.handle_datagram(p.now, wall_clock(), remote, local, &d);
    let mut out = Vec::new();
    while let Some(t) = p.r.poll_transmit() {
        out.push(t);
    }
    out
}

/// Decrypt a response with the initiator's keys; return its notifies and deletes.
fn notifies(p: &Pair, t: &Transmit) -> Vec<(NotifyType, Vec<u8>)> {
    let sa = &p.i.sas[&p.ike.0];
    let data = t.data.strip_prefix(&[0, 0, 0, 0]).unwrap_or(&t.data);
    let msg = Message::parse(data).unwrap();
    assert!(msg.header.response);
    let opened = sa.decrypt(data, &msg).unwrap();
    opened
        .payloads()
        .unwrap()
        .iter()
        .filter_map(|pl| match pl {
            PayloadRepr::Notify(n) => Some((n.kind, n.data.to_vec())),
            _ => None,
        })
        .collect()
}

#[test]
fn rule_violation_gets_invalid_syntax() {
    let mut p = established();
    let ke = [PayloadRepr::Ke(KeRepr {
        group: 31,
        data: &[7; 32],
    })];
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &ke, false, 0);
    let out = send(&mut p, &m);
    assert_eq!(out.len(), 1);
    assert_eq!(
        notifies(&p, &out[0]),
        [(NotifyType::INVALID_SYNTAX, vec![])]
    );
    // CREATE_CHILD_SA without its mandatory Nonce.
    let offer =
        crate::proposal::Proposal::parse(crate::proposal::Protocol::Esp, "aes256gcm16").unwrap();
    let n = [PayloadRepr::Sa(esparto_wire::ike::SaRepr {
        proposals: vec![offer.to_wire(1, esparto_wire::ike::Spi::U32(0x4000), false)],
    })];
    let m = request(&mut p, ExchangeType::CREATE_CHILD_SA, &n, false, 0);
    let out = send(&mut p, &m);
    assert_eq!(
        notifies(&p, &out[0]),
        [(NotifyType::INVALID_SYNTAX, vec![])]
    );
    // The SA survives and still answers liveness checks.
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 0);
    let out = send(&mut p, &m);
    assert!(notifies(&p, &out[0]).is_empty());
}

#[test]
fn unknown_critical_payload_is_named_in_the_answer() {
    let mut p = established();
    let other = [PayloadRepr::Other {
        payload_type: PayloadType(201),
        body: &[1, 2, 3],
    }];
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &other, true, 0);
    let out = send(&mut p, &m);
    assert_eq!(
        notifies(&p, &out[0]),
        [(NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD, vec![201])]
    );
    // Not critical: skipped, answered normally.
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &other, false, 0);
    let out = send(&mut p, &m);
    assert!(notifies(&p, &out[0]).is_empty());
}

#[test]
fn tampered_or_out_of_window_requests_are_dropped_silently() {
    let mut p = established();
    let mut m = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 0);
    let last = m.len() - 1;
    m[last] ^= 1;
    assert!(send(&mut p, &m).is_empty(), "bad ICV: no answer");
    assert_eq!(p.r.stats().integrity_failures, 1);
    // The window did not move: the same message ID, intact, is answered.
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, -1);
    assert_eq!(send(&mut p, &m).len(), 1);
    // A message ID beyond the window (8, §2.3): dropped, counted.
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 20);
    assert!(send(&mut p, &m).is_empty());
    assert_eq!(p.r.stats().out_of_window, 1);
    // Truncated, and garbage after the header: dropped, counted.
    let before = p.r.stats().malformed;
    send(&mut p, &m[..m.len() - 3]);
    send(&mut p, &[0u8; 40]);
    assert_eq!(p.r.stats().malformed, before + 2);
}

#[test]
fn delete_for_unknown_spi_gets_an_empty_answer() {
    let mut p = established();
    let d = [PayloadRepr::Delete(DeleteRepr {
        protocol: ProtocolId::ESP,
        spis: vec![0x1234_5678],
    })];
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &d, false, 0);
    let out = send(&mut p, &m);
    let sa = &p.i.sas[&p.ike.0];
    let data = out[0]
        .data
        .strip_prefix(&[0, 0, 0, 0])
        .unwrap_or(&out[0].data);
    let msg = Message::parse(data).unwrap();
    assert!(sa.decrypt(data, &msg).unwrap().payloads().unwrap().is_empty());
    assert!(p.r.poll_event().is_none(), "nothing deleted");
}

#[test]
fn ike_sa_init_with_critical_unknown_payload_is_refused_statelessly() {
    let mut r = endpoint(3, SUN, MOON, "@sun", "@moon");
    let h = HeaderRepr {
        spi_i: 0xabcdef,
        spi_r: 0,
        next_payload: PayloadType::NONE,
        exchange: ExchangeType::IKE_SA_INIT,
        initiator: true,
        response: false,
        message_id: 0,
        length: 0,
    };
    let mut m = Vec::new();
    emit_message(
        &h,
        &[PayloadRepr::Other {
            payload_type: PayloadType(222),
            body: &[],
        }],
        &mut m,
    )
    .unwrap();
    m[29] |= 0x80;
    let now = Instant::now();
    r.handle_datagram(
        now,
        wall_clock(),
        format!("{SUN}:500").parse().unwrap(),
        format!("{MOON}:500").parse().unwrap(),
        &m,
    );
    let t = r.poll_transmit().unwrap();
    let msg = Message::parse(&t.data).unwrap();
    assert!(msg.header.response && msg.header.spi_r == 0 && msg.header.spi_i == 0xabcdef);
    assert_eq!(
        msg.payloads,
        [PayloadRepr::Notify(NotifyRepr::new(
            NotifyType::UNSUPPORTED_CRITICAL_PAYLOAD,
            &[222]
        ))]
    );
    assert_eq!(r.ike_sa_count(), 0);
}

#[test]
fn natt_port_requires_the_marker() {
    let mut r = endpoint(4, SUN, MOON, "@sun", "@moon");
    let now = Instant::now();
    let (l, rem) = (
        format!("{SUN}:4500").parse().unwrap(),
        format!("{MOON}:4500").parse().unwrap(),
    );
    r.handle_datagram(now, wall_clock(), l, rem, &[0xff]); // keepalive: ignored, not malformed
    r.handle_datagram(now, wall_clock(), l, rem, &[1, 2, 3, 4, 5, 6, 7, 8]); // ESP-looking: not ours
    assert_eq!(r.stats().malformed, 1);
    assert!(r.poll_transmit().is_none());
}

#[test]
fn message_ids_never_wrap() {
    let mut p = established();
    p.i.sas.get_mut(&p.ike.0).unwrap().next_mid = u32::MAX;
    p.i.liveness_check(p.now, p.ike).unwrap();
    // The SA refuses to reuse message IDs: it is deleted instead (a rekey
    // would be needed long before, §2.2).
    let mut deleted = false;
    while let Some(e) = p.i.poll_event() {
        deleted |= matches!(e, Event::IkeSaDeleted { .. });
    }
    assert!(deleted);
}

#[test]
fn strip_padding_and_inner_parse_helpers_agree() {
    // Guard for the test helper itself: a response decrypts to its payloads.
    let mut p = established();
    let m = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 0);
    let out = send(&mut p, &m);
    let sa = &p.i.sas[&p.ike.0];
    let data = out[0]
        .data
        .strip_prefix(&[0, 0, 0, 0])
        .unwrap_or(&out[0].data);
    let msg = Message::parse(data).unwrap();
    let o = sa.decrypt(data, &msg).unwrap();
    let plain = &o.buf[o.inner.clone()];
    assert!(parse_payloads(o.first, plain).unwrap().is_empty());
    assert!(strip_padding(&[0]).unwrap().is_empty());
}

#[test]
fn start_all_initiates_children_with_start_action_start() {
    let mut i = endpoint(5, MOON, SUN, "@moon", "@sun");
    let mut r = endpoint(6, SUN, MOON, "@sun", "@moon");
    let mut c = ConnectionConfig::new("gw2", "aes128-sha256-ecp256").unwrap();
    c.local_addrs = vec![MOON.parse().unwrap()];
    c.remote_addrs = vec![SUN.parse().unwrap()];
    let mut a = ChildConfig::new("a", "10.1.1.0/24", "10.2.1.0/24", "aes128gcm16").unwrap();
    a.start_action = crate::config::StartAction::Start;
    let mut b = ChildConfig::new("b", "10.1.2.0/24", "10.2.2.0/24", "aes128gcm16").unwrap();
    b.start_action = crate::config::StartAction::Start;
    let trap = ChildConfig::new("t", "10.1.3.0/24", "10.2.3.0/24", "aes128gcm16").unwrap();
    c.children = vec![a, b, trap];
    i.add_connection(c).unwrap();
    let mut c = ConnectionConfig::new("gw2", "aes128-sha256-ecp256").unwrap();
    c.local_addrs = vec![SUN.parse().unwrap()];
    c.children = vec![
        ChildConfig::new("a", "10.2.1.0/24", "10.1.1.0/24", "aes128gcm16").unwrap(),
        ChildConfig::new("b", "10.2.2.0/24", "10.1.2.0/24", "aes128gcm16").unwrap(),
    ];
    r.add_connection(c).unwrap();
    let now = Instant::now();
    let started = i.start_all(now);
    assert_eq!(started.len(), 2);
    let ids: Vec<_> = started.into_iter().map(Result::unwrap).collect();
    assert_eq!(ids[0], ids[1], "one IKE SA carries both");
    let mut p = Pair {
        i,
        r,
        now,
        ike: ids[0],
    };
    pump(&mut p);
    let mut names = Vec::new();
    while let Some(e) = p.i.poll_event() {
        if let Event::ChildSaEstablished(c) = e {
            names.push(c.child.to_string());
        }
    }
    assert_eq!(names, ["a", "b"]);
}

mod bad_input;
mod hub;
mod hybrid;
mod fragments;
mod mismatch;
mod mobike;
mod resolve;
mod unique;
