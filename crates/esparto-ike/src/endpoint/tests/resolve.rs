//! Peers by host name: an initiation waits for the driver's answer and
//! goes where the name points now; a responder accepts the peer from the
//! addresses its name last resolved to, and asks again when an unknown
//! address knocks; a name that does not resolve fails the initiation with
//! `Unresolved`, which `dpd_action = restart` retries with back-off.

use super::*;
use crate::config::{DpdAction, RemoteHost};
use crate::event::Reason;
use crate::lifetime::{REFRESH_ON_MISS, RESOLVE_PATIENCE};
use core::time::Duration;

/// `ep`'s one connection, with `remote_addrs` replaced by host `name`.
fn by_name(seed: u64, local: &str, me: &str, peer: &str, name: &str) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![local.parse().unwrap()];
    c.remote_hosts = vec![RemoteHost { name: name.into(), position: 0 }];
    c.local.id = Some(Identity::parse(me).unwrap());
    c.remote.id = Some(Identity::parse(peer).unwrap());
    c.dpd_action = DpdAction::Restart;
    let (l, r) = if local == MOON { ("10.1.0.0/16", "10.2.0.0/16") } else { ("10.2.0.0/16", "10.1.0.0/16") };
    c.children.push(ChildConfig::new("net", l, r, "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"secret");
    ep
}

/// The names `ep` asked to resolve since the last call.
fn asked(ep: &mut Endpoint) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(e) = ep.poll_event() {
        if let Event::ResolveHost { name } = e {
            out.push(name.to_string());
        }
    }
    out
}

#[test]
fn an_initiation_waits_for_the_name_and_the_responder_matches_the_peer_by_its_name() {
    let mut p = Pair {
        i: by_name(1, MOON, "@moon", "@sun", "sun.example"),
        r: by_name(2, SUN, "@sun", "@moon", "moon.example"),
        now: Instant::now(),
        ike: IkeSaId(0),
    };
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    assert!(p.i.poll_transmit().is_none(), "nothing is sent before the name is answered");
    assert_eq!(p.i.initiations_resolving(), 1);
    assert_eq!(asked(&mut p.i), ["sun.example"]);
    p.i.host_resolved(p.now, "sun.example", Ok(vec![SUN.parse().unwrap()]));
    let init = p.i.poll_transmit().expect("IKE_SA_INIT once the name is answered");
    assert_eq!(init.remote, format!("{SUN}:500").parse().unwrap());
    assert_eq!(init.local, format!("{MOON}:500").parse().unwrap());

    // The responder has no answer for moon.example yet: the request
    // matches nothing, and makes it ask (once per REFRESH_ON_MISS).
    p.r.handle_datagram(p.now, wall_clock(), init.remote, init.local, &init.data);
    assert!(p.r.poll_transmit().is_none(), "unanswered while the name is looked up, not refused");
    assert_eq!(asked(&mut p.r), ["moon.example"]);
    p.r.handle_datagram(p.now, wall_clock(), init.remote, init.local, &init.data);
    assert!(asked(&mut p.r).is_empty(), "asked once, not per datagram");
    assert!(p.r.poll_transmit().is_none());
    p.r.host_resolved(p.now, "moon.example", Ok(vec![MOON.parse().unwrap()]));

    // The initiator's retransmission gets in.
    p.now += Duration::from_secs(5);
    p.i.handle_timeout(p.now);
    pump(&mut p);
    let up = std::iter::from_fn(|| p.i.poll_event())
        .any(|e| matches!(e, Event::ChildSaEstablished(c) if c.ike_sa == p.ike));
    assert!(up, "the IKE SA initiate returned is the one established");
    let at = std::iter::from_fn(|| p.r.poll_event()).find_map(|e| match e {
        Event::ChildSaEstablished(c) => Some(c.remote.ip()),
        _ => None,
    });
    assert_eq!(at, Some(MOON.parse::<IpAddr>().unwrap()), "the responder's Child SA is with the peer by name");
}

#[test]
fn every_initiation_asks_again_and_goes_where_the_name_points_now() {
    let mut ep = by_name(1, MOON, "@moon", "@sun", "sun.example");
    let now = Instant::now();
    let a = ep.initiate(now, "gw", None).unwrap();
    assert_eq!(asked(&mut ep), ["sun.example"]);
    ep.host_resolved(now, "sun.example", Ok(vec!["10.0.0.7".parse().unwrap()]));
    assert_eq!(ep.poll_transmit().unwrap().remote.ip(), "10.0.0.7".parse::<IpAddr>().unwrap());
    ep.terminate(now, a).unwrap();

    let later = now + Duration::from_secs(1);
    ep.initiate(later, "gw", None).unwrap();
    assert_eq!(asked(&mut ep), ["sun.example"], "asked afresh, though an answer is held");
    assert!(ep.poll_transmit().is_none(), "the held answer is not used while a fresh one may come");
    ep.host_resolved(later, "sun.example", Ok(vec![SUN.parse().unwrap()]));
    assert_eq!(ep.poll_transmit().unwrap().remote.ip(), SUN.parse::<IpAddr>().unwrap());
}

#[test]
fn a_resolver_that_does_not_answer_leaves_the_last_answer_after_the_patience() {
    let mut ep = by_name(1, MOON, "@moon", "@sun", "sun.example");
    let now = Instant::now();
    let a = ep.initiate(now, "gw", None).unwrap();
    ep.host_resolved(now, "sun.example", Ok(vec![SUN.parse().unwrap()]));
    ep.terminate(now, a).unwrap();
    while ep.poll_transmit().is_some() {}

    ep.initiate(now, "gw", None).unwrap();
    assert_eq!(ep.poll_timeout(), Some(now + RESOLVE_PATIENCE));
    ep.handle_timeout(now + RESOLVE_PATIENCE - Duration::from_millis(1));
    assert!(ep.poll_transmit().is_none());
    ep.handle_timeout(now + RESOLVE_PATIENCE);
    assert_eq!(ep.poll_transmit().unwrap().remote.ip(), SUN.parse::<IpAddr>().unwrap());
}

#[test]
fn a_name_that_does_not_resolve_fails_the_initiation_and_is_retried_with_back_off() {
    let mut ep = by_name(1, MOON, "@moon", "@sun", "sun.example");
    let now = Instant::now();
    let id = ep.initiate(now, "gw", None).unwrap();
    asked(&mut ep);
    ep.host_resolved(now, "sun.example", Err("no such host".into()));
    let failed = std::iter::from_fn(|| ep.poll_event()).any(|e| {
        matches!(e, Event::IkeSaDeleted { ike_sa, reason: Reason::Unresolved, .. } if ike_sa == id)
    });
    assert!(failed, "IkeSaDeleted with Unresolved for the ID initiate returned");
    assert!(ep.poll_transmit().is_none());
    assert_eq!(ep.stats().unresolved_hosts, 1);
    let due = ep.reinitiation_due("gw").expect("dpd_action = restart retries");
    ep.handle_timeout(due);
    assert_eq!(asked(&mut ep), ["sun.example"], "the retry resolves again");
    ep.host_resolved(due, "sun.example", Ok(vec![SUN.parse().unwrap()]));
    assert!(ep.poll_transmit().is_some());
}

#[test]
fn a_name_of_a_family_without_a_local_address_fails_as_unresolved() {
    let mut ep = by_name(1, MOON, "@moon", "@sun", "sun.example");
    let now = Instant::now();
    ep.initiate(now, "gw", None).unwrap();
    asked(&mut ep);
    ep.host_resolved(now, "sun.example", Ok(vec!["2001:db8::2".parse().unwrap()]));
    assert!(ep.poll_transmit().is_none());
    assert!(std::iter::from_fn(|| ep.poll_event())
        .any(|e| matches!(e, Event::IkeSaDeleted { reason: Reason::Unresolved, .. })));
}

#[test]
fn an_unmatched_request_asks_again_only_after_the_refresh_interval() {
    let mut i = endpoint(1, MOON, SUN, "@moon", "@sun");
    let mut r = by_name(2, SUN, "@sun", "@moon", "moon.example");
    let now = Instant::now();
    i.initiate(now, "gw", None).unwrap();
    let init = i.poll_transmit().unwrap();
    r.handle_datagram(now, wall_clock(), init.remote, init.local, &init.data);
    assert_eq!(asked(&mut r), ["moon.example"]);
    assert!(r.poll_transmit().is_none());
    r.host_resolved(now, "moon.example", Ok(vec!["10.0.0.9".parse().unwrap()]));
    r.handle_datagram(now + Duration::from_secs(1), wall_clock(), init.remote, init.local, &init.data);
    assert!(asked(&mut r).is_empty());
    assert!(r.poll_transmit().is_some(), "with the name answered elsewhere, refused as before");
    r.handle_datagram(now + REFRESH_ON_MISS, wall_clock(), init.remote, init.local, &init.data);
    assert_eq!(asked(&mut r), ["moon.example"]);
}
