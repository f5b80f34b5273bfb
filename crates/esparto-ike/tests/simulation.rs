//! Two IKE endpoints over a simulated network (fake clocks, seeded RNG,
//! loss, duplication, reordering, NAT): the protocol's scenarios, end to end
//! through `Endpoint::handle_datagram` / `poll_*`, with PSKs and with
//! certificates checked at the simulation's calendar time; and that a
//! seeded run replays exactly.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{AuthFailure, Event, IkeSaStates, Reason};
use esparto_wire::ike::ExchangeType;
use sim::{MOON, SUN, Setup, assert_pair};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

fn established(net: &sim::Net, i: usize) -> usize {
    net.count(i, |e| matches!(e, Event::IkeSaEstablished { .. }))
}

#[test]
fn handshake_establishes_matching_keys() {
    for (ike, esp) in [
        ("aes256gcm16-prfsha256-x25519", "aes256gcm16"),
        ("aes128-sha256-ecp256", "aes128-sha256"),
        ("aes256-sha256-modp2048", "aes256-sha384"),
        ("chacha20poly1305-prfsha256-x25519", "chacha20poly1305"),
        ("aes256gcm16-prfsha384-ecp384", "aes128gcm16"),
        ("aes128-sha1-modp3072", "aes128-sha1"),
        ("aes256-sha512-x25519", "aes256-sha512-esn"),
    ] {
        let s = Setup {
            ike_i: ike.into(),
            ike_r: ike.into(),
            esp_i: esp.into(),
            esp_r: esp.into(),
            ..Setup::default()
        };
        let mut net = s.build(1);
        let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(5));
        assert_eq!(established(&net, I), 1, "{ike}");
        assert_eq!(established(&net, R), 1, "{ike}");
        let (a, b) = (net.children(I), net.children(R));
        assert_eq!((a.len(), b.len()), (1, 1), "{ike} / {esp}");
        assert_pair(a[0], b[0]);
        assert_eq!(a[0].ike_sa, id);
        assert_eq!(a[0].suite.name(), esp.trim_end_matches("-esn"));
        assert_eq!(a[0].esn, esp.ends_with("-esn"));
        assert!(!a[0].encap, "no NAT, no forced encapsulation");
        assert_eq!(a[0].local_ts[0].to_string(), "10.1.0.0/16");
        assert_eq!(a[0].remote_ts[0].to_string(), "10.2.0.0/16");
        // Four messages, no retransmissions.
        assert_eq!(net.delivered.len(), 4, "{ike}");
    }
}

#[test]
fn lost_messages_are_retransmitted_with_exponential_backoff() {
    let mut net = Setup::default().build(2);
    // Lose the first two IKE_SA_INIT requests and the first IKE_AUTH response.
    let mut init_lost = 0;
    let mut auth_lost = 0;
    net.drop_if = Some(Box::new(move |p| {
        if p.is(ExchangeType::IKE_SA_INIT, false) && init_lost < 2 {
            init_lost += 1;
            return true;
        }
        if p.is(ExchangeType::IKE_AUTH, true) && auth_lost < 1 {
            auth_lost += 1;
            return true;
        }
        false
    }));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(60));
    let times = net.request_times(I, ExchangeType::IKE_SA_INIT);
    // Sent at 0, after 4 s, then after 4 × 1.8 = 7.2 s more.
    assert_eq!(times.len(), 3);
    assert!(
        (times[1] - 4.0).abs() < 1e-6 && (times[2] - 11.2).abs() < 1e-6,
        "{times:?}"
    );
    // The lost IKE_AUTH response: the initiator retransmits its request,
    // the responder answers from its cache (one IKE SA, one child).
    let auth_reqs = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::IKE_AUTH, false))
        .count();
    assert_eq!(auth_reqs, 2);
    let auth_resps: Vec<_> = net.peers[R]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::IKE_AUTH, true))
        .collect();
    assert_eq!(auth_resps.len(), 2);
    assert_eq!(
        auth_resps[0].data, auth_resps[1].data,
        "the cached response, byte for byte"
    );
    assert_eq!(net.children(R).len(), 1);
    assert_pair(net.children(I)[0], net.children(R)[0]);
    for p in [I, R] {
        let established = IkeSaStates { established: 1, ..IkeSaStates::default() };
        assert_eq!(net.peers[p].ep.ike_sa_states(), established);
    }
}

#[test]
fn gives_up_after_the_retransmission_limit() {
    let mut net = Setup::default().build(3);
    net.loss = 1.0;
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    let connecting = IkeSaStates { connecting: 1, ..IkeSaStates::default() };
    assert_eq!(net.peers[I].ep.ike_sa_states(), connecting);
    net.run_for(Duration::from_secs(600));
    let sent = net.peers[I].sent.len();
    assert_eq!(sent, 6, "original + 5 retransmissions");
    let gave_up = net.peers[I].events.iter().find_map(|e| match e {
        Event::IkeSaDeleted { ike_sa, reason, .. } if *ike_sa == id => Some(*reason),
        _ => None,
    });
    assert_eq!(gave_up, Some(Reason::Timeout));
    // 4 + 7.2 + 12.96 + 23.328 + 41.99 + 75.58 ≈ 165.06 s after the start.
    let last = net.peers[I].sent.last().unwrap().at - net.base;
    assert!((last.as_secs_f64() - 89.48).abs() < 0.01, "{last:?}");
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    assert_eq!(net.peers[I].ep.poll_timeout(), None);
}

#[test]
fn duplicated_request_gets_the_cached_response() {
    let mut net = Setup::default().build(4);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.children(R).len(), 1);
    // Replay every request the initiator sent, late.
    let requests: Vec<_> = net.peers[I]
        .sent
        .iter()
        .filter(|p| !p.header().unwrap().response)
        .cloned()
        .collect();
    let before = net.peers[R].sent.len();
    for p in requests {
        net.inject(p);
    }
    let resent: Vec<_> = net.peers[R].sent[before..].to_vec();
    // IKE_SA_INIT: the SA is established, so the half-open lookup is gone
    // and the request would start a new SA; IKE_AUTH (mid 1) gets the cache.
    let auth = resent
        .iter()
        .find(|p| p.is(ExchangeType::IKE_AUTH, true))
        .unwrap();
    let first = net.peers[R]
        .sent
        .iter()
        .find(|p| p.is(ExchangeType::IKE_AUTH, true))
        .unwrap();
    assert_eq!(auth.data, first.data);
    assert_eq!(net.children(R).len(), 1, "no second Child SA");
    assert_eq!(
        net.count(R, |e| matches!(e, Event::IkeSaEstablished { .. })),
        1
    );
}

#[test]
fn duplication_and_reordering_everywhere() {
    for seed in 0..20 {
        let mut net = Setup::default().build(100 + seed);
        net.dup = 0.5;
        net.reorder = 0.5;
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(30));
        assert_eq!(net.children(I).len(), 1, "seed {seed}");
        assert_eq!(net.children(R).len(), 1, "seed {seed}");
        assert_pair(net.children(I)[0], net.children(R)[0]);
    }
}

#[test]
fn random_loss_either_establishes_or_times_out_cleanly() {
    let mut ok = 0;
    for seed in 0..30 {
        let mut net = Setup::default().build(200 + seed);
        net.loss = 0.3;
        net.dup = 0.1;
        net.reorder = 0.2;
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(400));
        let (a, b) = (net.children(I), net.children(R));
        if a.len() == 1 && b.len() == 1 {
            assert_pair(a[0], b[0]);
            ok += 1;
        } else {
            // Never a Child SA on one side only with an authenticated peer.
            assert!(
                a.is_empty(),
                "seed {seed}: initiator child without responder"
            );
        }
    }
    assert!(ok >= 25, "only {ok}/30 established under 30% loss");
}

#[test]
fn wrong_psk_is_authentication_failed_and_no_child() {
    let s = Setup {
        psk_r: b"another secret".to_vec(),
        ..Setup::default()
    };
    let mut net = s.build(5);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(10));
    assert!(net.children(I).is_empty() && net.children(R).is_empty());
    let r_fail = net.peers[R].events.iter().find_map(|e| match e {
        Event::AuthFailed {
            reason,
            identity,
            peer,
            ..
        } => Some((*reason, identity.clone(), *peer)),
        _ => None,
    });
    let (reason, identity, peer) = r_fail.unwrap();
    assert_eq!(reason, AuthFailure::BadAuth);
    assert_eq!(identity.unwrap().to_string(), "@moon.example");
    assert_eq!(peer.ip().to_string(), MOON);
    let i_fail = net.peers[I].events.iter().find_map(|e| match e {
        Event::AuthFailed { reason, .. } => Some(*reason),
        _ => None,
    });
    assert_eq!(i_fail, Some(AuthFailure::RejectedByPeer));
    // The response carried AUTHENTICATION_FAILED.
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::AuthenticationFailed,
            ..
        }
    )));
    assert_eq!(established(&net, I) + established(&net, R), 0);
    assert_eq!(net.peers[R].ep.ike_sa_count(), 0);
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
}

#[test]
fn proposal_mismatch_is_no_proposal_chosen() {
    let s = Setup {
        ike_i: "aes128-sha256-ecp256".into(),
        ike_r: "aes256gcm16-prfsha256-x25519".into(),
        ..Setup::default()
    };
    let mut net = s.build(6);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(10));
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::NoProposalChosen,
            ..
        }
    )));
    assert_eq!(
        net.peers[R].ep.ike_sa_count(),
        0,
        "the responder kept no state"
    );
    assert_eq!(net.peers[R].ep.stats().init_refused, 1);
    assert!(net.peers[R].events.is_empty());
}

#[test]
fn ke_group_mismatch_retries_with_the_requested_group() {
    let s = Setup {
        ike_i: "aes256gcm16-prfsha256-x25519-ecp256".into(),
        ike_r: "aes256gcm16-prfsha256-ecp256".into(),
        ..Setup::default()
    };
    let mut net = s.build(7);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(10));
    let inits: Vec<_> = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::IKE_SA_INIT, false))
        .collect();
    assert_eq!(inits.len(), 2, "first with x25519, then ecp256");
    assert_eq!(net.peers[R].ep.stats().init_refused, 1);
    assert_pair(net.children(I)[0], net.children(R)[0]);
}

#[test]
fn traffic_selectors_are_narrowed() {
    // The initiator asks for everything behind the responder; the
    // responder only allows its subnet.
    let s = Setup {
        ts_i: ("10.1.0.0/16".into(), "0.0.0.0/0".into()),
        ts_r: ("10.2.0.0/16".into(), "10.0.0.0/8".into()),
        ..Setup::default()
    };
    let mut net = s.build(8);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    let a = net.children(I)[0];
    assert_eq!(
        a.remote_ts
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>(),
        ["10.2.0.0/16"]
    );
    assert_eq!(
        a.local_ts.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        ["10.1.0.0/16"]
    );
    assert_pair(a, net.children(R)[0]);

    // Protocol and ports narrow too.
    let s = Setup {
        ts_i: ("10.1.0.0/16".into(), "10.2.0.0/16".into()),
        ts_r: ("10.2.0.0/16[tcp/443]".into(), "10.1.0.0/16".into()),
        ..Setup::default()
    };
    let mut net = s.build(9);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(
        net.children(I)[0].remote_ts[0].to_string(),
        "10.2.0.0/16[6/443]"
    );
}

#[test]
fn disjoint_selectors_are_ts_unacceptable_but_the_ike_sa_lives() {
    let s = Setup {
        ts_r: ("10.9.0.0/16".into(), "10.1.0.0/16".into()),
        ..Setup::default()
    };
    let mut net = s.build(10);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    assert_eq!(established(&net, R), 1);
    assert!(net.children(I).is_empty() && net.children(R).is_empty());
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::ChildSaFailed {
            reason: Reason::TsUnacceptable,
            ..
        }
    )));
    assert!(net.peers[R].events.iter().any(|e| matches!(
        e,
        Event::ChildSaFailed {
            reason: Reason::TsUnacceptable,
            ..
        }
    )));
    // ESP proposal mismatch: NO_PROPOSAL_CHOSEN for the child only.
    let s = Setup {
        esp_i: "aes128gcm16".into(),
        esp_r: "chacha20poly1305".into(),
        ..Setup::default()
    };
    let mut net = s.build(11);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, I), 1);
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::ChildSaFailed {
            reason: Reason::NoProposalChosen,
            ..
        }
    )));
}

#[test]
fn nat_detection_floats_to_4500_and_encapsulates() {
    let mut net = Setup::default().build(12);
    net.nat = Some(sim::Nat::new(MOON, "203.0.113.7"));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    let (a, b) = (net.children(I)[0], net.children(R)[0]);
    assert_pair(a, b);
    assert!(a.encap && b.encap);
    assert_eq!(a.local.port(), 4500);
    assert_eq!(a.remote, format!("{SUN}:4500").parse().unwrap());
    assert_eq!(b.local, format!("{SUN}:4500").parse().unwrap());
    assert_eq!(
        b.remote.ip().to_string(),
        "203.0.113.7",
        "the NAT's public side"
    );
    // IKE_AUTH went over 4500 with the non-ESP marker.
    let auth = net.peers[I]
        .sent
        .iter()
        .find(|p| p.is(ExchangeType::IKE_AUTH, false))
        .unwrap();
    assert_eq!((auth.from.port(), auth.to.port()), (4500, 4500));
    assert_eq!(&auth.data[..4], &[0, 0, 0, 0]);
    let ike = a.ike_sa;
    let first_remote = b.remote;
    // The initiator is behind the NAT: it sends keepalives.
    net.run_for(Duration::from_secs(45));
    let keepalives = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.data == [0xff])
        .count();
    assert_eq!(keepalives, 2, "every 20 s");
    assert_eq!(
        net.peers[R]
            .sent
            .iter()
            .filter(|p| p.data == [0xff])
            .count(),
        0
    );

    // The NAT forgets its mapping; the next request comes from a new port
    // and the responder follows it.
    net.nat.as_mut().unwrap().rebind();
    net.peers[I].ep.liveness_check(net.now, ike).unwrap();
    net.run_for(Duration::from_secs(2));
    let moved = net.peers[R].events.iter().find_map(|e| match e {
        Event::PeerAddressChanged { remote, .. } => Some(*remote),
        _ => None,
    });
    let moved = moved.unwrap();
    assert_eq!(moved.ip().to_string(), "203.0.113.7");
    assert_ne!(moved, first_remote);
}

#[test]
fn forced_encapsulation_without_nat() {
    let s = Setup {
        encap_i: true,
        ..Setup::default()
    };
    let mut net = s.build(13);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    let (a, b) = (net.children(I)[0], net.children(R)[0]);
    assert!(a.encap && b.encap);
    assert_eq!((a.local.port(), b.local.port()), (4500, 4500));
    assert_pair(a, b);
}

#[test]
fn create_child_sa_for_an_additional_child_with_pfs() {
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = s.build(14);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let again = net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", Some(1))
        .unwrap();
    assert_eq!(again, id, "the existing IKE SA carries it");
    net.run_for(Duration::from_secs(2));
    let (a, b) = (net.children(I), net.children(R));
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_pair(a[1], b[1]);
    assert_eq!(a[1].child.as_ref(), "host");
    assert_eq!(a[1].resource, Some(1));
    assert_eq!(a[1].suite.name(), "aes128-sha256");
    assert_eq!(a[1].remote_ts[0].to_string(), "10.2.0.7/32[6/443]");
    assert_ne!(a[0].inbound_spi, a[1].inbound_spi);
    assert!(a[0].inbound_key != a[1].inbound_key);
    // It used a KE payload (PFS): the request carried one.
    let cc = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
        .count();
    assert_eq!(cc, 1);
    // acquire() queued before IKE_AUTH completes also works.
    let mut net = s.build(15);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", None)
        .unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.children(I).len(), 2);
    assert_pair(net.children(I)[1], net.children(R)[1]);
}

#[test]
fn informational_delete_of_a_child_and_of_the_ike_sa() {
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = s.build(16);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", None)
        .unwrap();
    net.run_for(Duration::from_secs(2));
    let spi = net.children(I)[0].inbound_spi;
    let peer_spi = net.children(R)[0].inbound_spi;
    net.peers[I].ep.terminate_child(net.now, id, spi).unwrap();
    net.run_for(Duration::from_secs(2));
    let del = |net: &sim::Net, i: usize| {
        net.peers[i]
            .events
            .iter()
            .filter_map(|e: &Event| match e {
                Event::ChildSaDeleted {
                    inbound_spi,
                    reason,
                    ..
                } => Some((*inbound_spi, *reason)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(del(&net, I), [(spi, Reason::Terminated)]);
    assert_eq!(del(&net, R), [(peer_spi, Reason::DeletedByPeer)]);
    // Now delete the IKE SA from the responder side.
    let r_id = net.peers[R]
        .events
        .iter()
        .find_map(|e| match e {
            Event::IkeSaEstablished { ike_sa, .. } => Some(*ike_sa),
            _ => None,
        })
        .unwrap();
    net.peers[R].ep.terminate(net.now, r_id).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(
        del(&net, I).len(),
        2,
        "the remaining child goes with the IKE SA"
    );
    assert_eq!(del(&net, R).len(), 2);
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::DeletedByPeer,
            ..
        }
    )));
    assert!(net.peers[R].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::Terminated,
            ..
        }
    )));
    assert_eq!(
        net.peers[I].ep.ike_sa_count() + net.peers[R].ep.ike_sa_count(),
        0
    );
}

#[test]
fn liveness_check_is_answered_and_a_dead_peer_is_detected() {
    let mut net = Setup::default().build(17);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    net.peers[I].ep.liveness_check(net.now, id).unwrap();
    net.run_for(Duration::from_secs(2));
    let info = net.peers[R]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::INFORMATIONAL, true))
        .count();
    assert_eq!(info, 1, "the responder answered");
    assert!(
        !net.peers[I]
            .events
            .iter()
            .any(|e| matches!(e, Event::IkeSaDeleted { .. }))
    );
    // The peer vanishes: the next check times out and the SA goes.
    net.loss = 1.0;
    net.peers[I].ep.liveness_check(net.now, id).unwrap();
    net.run_for(Duration::from_secs(300));
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::Timeout,
            ..
        }
    )));
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::ChildSaDeleted {
            reason: Reason::Timeout,
            ..
        }
    )));
}

#[test]
fn dpd_delay_sends_liveness_checks_when_idle() {
    let s = Setup {
        dpd: Some(Duration::from_secs(30)),
        ..Setup::default()
    };
    let mut net = s.build(18);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(100));
    let checks = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::INFORMATIONAL, false))
        .count();
    assert_eq!(checks, 3, "at 30, 60 and 90 s");
}

/// What the simulated data plane last saw: ESP from the peer at that time
/// on every Child SA (`None`: nothing).
#[derive(Clone, Default)]
struct Esp(std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl esparto_ike::InboundActivity for Esp {
    fn last_inbound(&self, _spi: u32) -> Option<std::time::Instant> {
        *self.0.lock().unwrap()
    }
}

/// Authenticated ESP from the peer is liveness (RFC 7296 §2.4): while it
/// flows, `dpd_delay` starts no liveness check; once it stops, a check
/// follows `dpd_delay` after the last packet, and a peer that answers
/// nothing is declared dead `dpd_timeout` after that.
#[test]
fn esp_from_the_peer_is_liveness_and_silence_still_finds_a_dead_peer() {
    let s = Setup {
        dpd: Some(Duration::from_secs(5)),
        tweak_i: |c| c.dpd_timeout = Some(Duration::from_secs(10)),
        ..Setup::default()
    };
    let mut net = s.build(31);
    let esp = Esp::default();
    net.peers[I].ep.set_inbound_activity(Box::new(esp.clone()));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.peers[I].ep.ike_sa_states().established, 1);
    let checks = |net: &sim::Net| net.peers[I].sent.iter().filter(|p| p.is(ExchangeType::INFORMATIONAL, false)).count();
    // A minute of traffic from the peer, a packet every 100 ms.
    for _ in 0..600 {
        *esp.0.lock().unwrap() = Some(net.now);
        net.run_for(Duration::from_millis(100));
    }
    assert_eq!(checks(&net), 0, "no liveness check while ESP arrives");
    // The peer goes silent and stops answering.
    let silent_since = net.now;
    net.loss = 1.0;
    net.run_for(Duration::from_secs(4));
    assert_eq!(checks(&net), 0, "not before dpd_delay of silence");
    net.run_for(Duration::from_secs(2));
    assert_eq!(checks(&net), 1, "a check after dpd_delay of silence");
    let dead = |net: &sim::Net| net.peers[I].events.iter().any(|e| matches!(e, Event::IkeSaDeleted { reason: Reason::Timeout, .. }));
    // The check went out 5 s into the silence; dpd_timeout is 10 s.
    net.run_for(Duration::from_secs(8));
    assert!(!dead(&net), "still alive {:?} into the silence", net.now - silent_since);
    net.run_for(Duration::from_secs(2));
    assert!(dead(&net), "dead {:?} into the silence (dpd_delay + dpd_timeout = 15 s)", net.now - silent_since);
}

#[test]
fn half_open_sa_expires_at_the_responder() {
    let mut net = Setup::default().build(19);
    net.drop_if = Some(Box::new(|p| p.is(ExchangeType::IKE_AUTH, false)));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.peers[R].ep.ike_sa_count(), 1);
    for p in [I, R] {
        let authenticating = IkeSaStates { authenticating: 1, ..IkeSaStates::default() };
        assert_eq!(net.peers[p].ep.ike_sa_states(), authenticating);
    }
    net.run_for(Duration::from_secs(31));
    assert_eq!(net.peers[R].ep.ike_sa_count(), 0);
    assert!(
        net.peers[R].events.is_empty(),
        "never announced, so never reported"
    );
}

#[test]
fn create_child_sa_ke_mismatch_retries_with_the_requested_group() {
    // The initiator's PFS group for "host" is curve25519 first; the
    // responder only accepts ecp256 for it.
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = s.build(20);
    // Responder side: replace the "host" child with an ecp256-only one.
    let mut r = sim::endpoint(20 ^ 0x2222);
    let mut c = esparto_ike::ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(esparto_ike::Identity::parse("@sun.example").unwrap());
    c.children.push(
        esparto_ike::ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", "aes256gcm16").unwrap(),
    );
    c.children.push(
        esparto_ike::ChildConfig::new("host", "10.2.0.0/16", "10.1.0.0/16", "aes128-sha256-ecp256")
            .unwrap(),
    );
    r.add_connection(c).unwrap();
    r.secrets_mut().add_psk(&[], b"a shared secret");
    net.peers[R].ep = r;
    // The initiator offers both groups for "host".
    let mut i = sim::endpoint(20 ^ 0x1111);
    let mut c = esparto_ike::ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![MOON.parse().unwrap()];
    c.remote_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(esparto_ike::Identity::parse("@moon.example").unwrap());
    c.children.push(
        esparto_ike::ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap(),
    );
    c.children.push(
        esparto_ike::ChildConfig::new(
            "host",
            "10.1.0.5/32",
            "10.2.0.7/32",
            "aes128-sha256-curve25519-ecp256",
        )
        .unwrap(),
    );
    i.add_connection(c).unwrap();
    i.secrets_mut().add_psk(&[], b"a shared secret");
    net.peers[I].ep = i;
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", None)
        .unwrap();
    net.run_for(Duration::from_secs(3));
    let cc = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
        .count();
    assert_eq!(
        cc, 2,
        "curve25519 refused with INVALID_KE_PAYLOAD, then ecp256"
    );
    assert_eq!(net.children(I).len(), 2);
    assert_pair(net.children(I)[1], net.children(R)[1]);
}

// ---------------------------------------------------------------------------
// Certificates, at the time the simulation gives (the endpoints read no
// clock: validity is checked at the wall-clock time each datagram comes
// with, here the simulation's own, years after the machine's).

/// Certificates for moon and sun from one CA, valid from `moon.0` to
/// `moon.1` and `sun.0` to `sun.1` (seconds after the simulation's start).
fn certs(alg: &'static rcgen::SignatureAlgorithm, moon: (i64, i64), sun: (i64, i64)) -> sim::Certs {
    let mut ca = sim::pki::Ca::new(alg);
    let m = ca.issue("moon.example", alg, moon.0, moon.1);
    let s = ca.issue("sun.example", alg, sun.0, sun.1);
    sim::Certs {
        moon: m.credential,
        sun: s.credential,
        trust: ca.trust(),
    }
}

fn auth_failures(net: &sim::Net, i: usize) -> Vec<AuthFailure> {
    net.peers[i]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::AuthFailed { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

const VALID: (i64, i64) = (-sim::pki::DAY, 30 * sim::pki::DAY);

#[test]
fn certificates_are_checked_at_the_time_given() {
    for alg in [&rcgen::PKCS_ED25519, &rcgen::PKCS_ECDSA_P256_SHA256] {
        let certs = certs(alg, VALID, VALID);
        // By the machine's clock these certificates are years from valid.
        let moon = &certs.moon.chain()[0];
        let id = esparto_ike::Identity::parse("@moon.example").unwrap();
        let now = esparto_ike::UnixTime::now();
        assert_eq!(
            certs.trust.verify(moon, &[], now, &id).unwrap_err(),
            esparto_ike::cert::CertRefusal::NotYetValid
        );
        let s = Setup {
            certs: Some(certs),
            ..Setup::default()
        };
        let mut net = s.build(21);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(5));
        assert_eq!((established(&net, I), established(&net, R)), (1, 1));
        assert!(auth_failures(&net, I).is_empty() && auth_failures(&net, R).is_empty());
        let (a, b) = (net.children(I), net.children(R));
        assert_eq!((a.len(), b.len()), (1, 1));
        assert_pair(a[0], b[0]);
        assert_eq!(net.delivered.len(), 4);
        // Each side sent its certificate and signed with it.
        for p in [I, R] {
            let auth = net.peers[p].sent.iter().find(|q| q.is(ExchangeType::IKE_AUTH, p == R));
            assert!(auth.is_some_and(|q| q.data.len() > 400), "peer {p}: CERT in IKE_AUTH");
        }
    }
}

#[test]
fn a_certificate_expired_at_the_time_given_is_refused() {
    // Expired a day before the simulation's start; by the machine's clock
    // not yet valid: only the time given makes it "expired".
    let expired = (-30 * sim::pki::DAY, -sim::pki::DAY);
    // The initiator's: the responder refuses it and installs nothing.
    let s = Setup {
        certs: Some(certs(&rcgen::PKCS_ED25519, expired, VALID)),
        ..Setup::default()
    };
    let mut net = s.build(22);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(auth_failures(&net, R), vec![AuthFailure::CertExpired]);
    assert_eq!(auth_failures(&net, I), vec![AuthFailure::RejectedByPeer]);
    assert_eq!((established(&net, I), established(&net, R)), (0, 0));
    assert_eq!((net.children(I).len(), net.children(R).len()), (0, 0));
    // The responder's: the initiator refuses it, after the responder
    // installed its half, which goes with the IKE SA.
    let s = Setup {
        certs: Some(certs(&rcgen::PKCS_ED25519, VALID, expired)),
        ..Setup::default()
    };
    let mut net = s.build(23);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(auth_failures(&net, I), vec![AuthFailure::CertExpired]);
    assert_eq!(established(&net, I), 0);
    assert!(net.children(I).is_empty());
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
}

#[test]
fn a_certificate_that_expires_during_the_run_is_refused_from_then_on() {
    // Valid for the run's first hour.
    let hour = 3600;
    let s = Setup {
        certs: Some(certs(&rcgen::PKCS_ED25519, (-sim::pki::DAY, hour), VALID)),
        ..Setup::default()
    };
    let mut net = s.build(24);
    let first = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, R), 1);
    net.run_for(Duration::from_secs(2 * 3600));
    net.peers[I].ep.terminate(net.now, first).unwrap();
    net.run_for(Duration::from_secs(5));
    // The chain the responder remembered is trusted only until notAfter.
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(5));
    assert_eq!(established(&net, R), 1, "no second IKE SA");
    assert_eq!(auth_failures(&net, R), vec![AuthFailure::CertExpired]);
}

#[test]
fn a_seeded_run_replays_bit_for_bit() {
    let transcript = |net: &sim::Net| -> Vec<(Duration, String, String, Vec<u8>)> {
        net.delivered
            .iter()
            .map(|p| (p.at - net.base, p.from.to_string(), p.to.to_string(), p.data.clone()))
            .collect()
    };
    let run = |s: &Setup| {
        let mut net = s.build(25);
        net.loss = 0.2;
        net.reorder = 0.2;
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(120));
        assert_eq!(established(&net, I), 1);
        transcript(&net)
    };
    // PSK, and Ed25519 certificates (RFC 8032 signatures are deterministic):
    // every datagram the same, at the same time.
    let ed25519 = certs(&rcgen::PKCS_ED25519, VALID, VALID);
    for s in [
        Setup::default(),
        Setup {
            certs: Some(ed25519),
            ..Setup::default()
        },
    ] {
        assert_eq!(run(&s), run(&s));
    }
    // ECDSA: the same exchanges at the same times, but the IKE_AUTH
    // messages differ: aws-lc-rs draws the ECDSA nonce from AWS-LC's own
    // generator, whatever it is handed (see esparto_crypto::Rng::secure_random).
    let s = Setup {
        certs: Some(certs(&rcgen::PKCS_ECDSA_P256_SHA256, VALID, VALID)),
        ..Setup::default()
    };
    let (a, b) = (run(&s), run(&s));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| x.0 == y.0 && x.1 == y.1));
    assert_ne!(a, b);
}
