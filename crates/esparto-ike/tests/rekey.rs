//! Child SA rekeying over the simulated network (RFC 7296 §1.3.3, §2.8,
//! §2.8.1, §2.25): both directions, with and without PFS,
//! make-before-break ordering of the events, lifetimes with jitter, and
//! traffic through a model of the data plane that must lose nothing while
//! Child SAs rekey every few seconds.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{Event, IkeSaId, Reason};
use esparto_wire::ike::ExchangeType;
use sim::dataplane::{Dp, run_with_traffic};
use sim::{Setup, assert_pair};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

fn up(s: &Setup, seed: u64) -> (sim::Net, IkeSaId) {
    let mut net = s.build(seed);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(I).len(), 1);
    (net, id)
}

/// Index of the first event matching `f` at peer `i`.
fn pos(net: &sim::Net, i: usize, f: impl Fn(&Event) -> bool) -> usize {
    net.peers[i]
        .events
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("peer {i}: event not found"))
}

/// Rekey the only Child SA from `who` and check both ends: one new Child SA
/// naming the old one, announced before the old one is deleted (the
/// responder's outbound side activated in between), both halves agreeing,
/// fresh keys, nothing leaked.
fn child_rekey_from(who: usize, esp: &str, seed: u64) {
    let s = Setup {
        esp_i: esp.into(),
        esp_r: esp.into(),
        ..Setup::default()
    };
    let (mut net, _) = up(&s, seed);
    let other = 1 - who;
    let old = net.live_children(who)[0];
    let (old_in, old_key) = (old.inbound_spi, old.inbound_key.as_slice().to_vec());
    let old_peer_in = net.live_children(other)[0].inbound_spi;
    let ike = net.current_ike(who).unwrap();
    net.peers[who].ep.rekey_child(net.now, ike, old_in).unwrap();
    net.run_for(Duration::from_secs(2));

    for (p, old_spi) in [(who, old_in), (other, old_peer_in)] {
        let live = net.live_children(p);
        assert_eq!(
            live.len(),
            1,
            "peer {p}: exactly one Child SA after the rekey"
        );
        let new = live[0];
        assert_eq!(
            new.rekeys,
            Some(old_spi),
            "peer {p}: names the SA it replaces"
        );
        assert_eq!(new.resource, None);
        assert_ne!(new.inbound_spi, old_spi);
        // Make-before-break: the new SA is announced before the old one goes.
        let est = pos(
            &net,
            p,
            |e| matches!(e, Event::ChildSaEstablished(c) if c.inbound_spi == new.inbound_spi),
        );
        let del = pos(
            &net,
            p,
            |e| matches!(e, Event::ChildSaDeleted { inbound_spi, reason: Reason::Rekeyed, .. } if *inbound_spi == old_spi),
        );
        assert!(
            est < del,
            "peer {p}: new SA announced before the old one is deleted"
        );
        // The initiator of the rekey sends on the new SA at once; the
        // responder only when the initiator deleted the old one, right
        // before that deletion.
        if p == who {
            assert!(new.outbound_active && new.initiator);
        } else {
            assert!(!new.outbound_active && !new.initiator);
            let act = pos(
                &net,
                p,
                |e| matches!(e, Event::ChildSaOutboundActive { inbound_spi, .. } if *inbound_spi == new.inbound_spi),
            );
            assert!(
                est < act && act < del,
                "peer {p}: activated, then the old SA deleted"
            );
        }
        net.assert_no_leak(p);
    }
    let (a, b) = (net.live_children(who)[0], net.live_children(other)[0]);
    assert_pair(a, b);
    assert_ne!(a.inbound_key.as_slice(), &old_key[..], "fresh keys");
    // One CREATE_CHILD_SA exchange and one INFORMATIONAL delete.
    let cc = net.peers[who]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
        .count();
    assert_eq!(cc, 1);
}

#[test]
fn child_rekey_initiator_side_without_pfs() {
    child_rekey_from(I, "aes256gcm16", 1);
}

#[test]
fn child_rekey_responder_side_without_pfs() {
    child_rekey_from(R, "aes256gcm16", 2);
}

#[test]
fn child_rekey_both_sides_with_pfs() {
    // The responder's proposal requires the group: success means a KE
    // exchange took place (and the request grew by the KE payload).
    child_rekey_from(I, "aes128gcm16-x25519", 3);
    child_rekey_from(R, "aes256-sha256-ecp256", 4);
    let mut sizes = Vec::new();
    for esp in ["aes128gcm16", "aes128gcm16-x25519"] {
        let s = Setup {
            esp_i: esp.into(),
            esp_r: esp.into(),
            ..Setup::default()
        };
        let (mut net, id) = up(&s, 5);
        let spi = net.live_children(I)[0].inbound_spi;
        net.peers[I].ep.rekey_child(net.now, id, spi).unwrap();
        net.run_for(Duration::from_secs(1));
        let req = net.peers[I]
            .sent
            .iter()
            .find(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
            .unwrap();
        sizes.push(req.data.len());
    }
    assert!(
        sizes[1] >= sizes[0] + 4 + 4 + 32,
        "KEi (x25519) in the PFS rekey: {sizes:?}"
    );
}

#[test]
fn rekey_of_a_rekeyed_sa_and_unknown_spis_are_refused_locally() {
    let (mut net, id) = up(&Setup::default(), 6);
    let spi = net.live_children(I)[0].inbound_spi;
    assert!(matches!(
        net.peers[I].ep.rekey_child(net.now, id, 0x1234),
        Err(esparto_ike::InitiateError::UnknownChildSa(0x1234))
    ));
    net.peers[I].ep.rekey_child(net.now, id, spi).unwrap();
    // A second request while the first is under way changes nothing.
    net.peers[I].ep.rekey_child(net.now, id, spi).unwrap();
    net.run_for(Duration::from_secs(2));
    let cc = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
        .count();
    assert_eq!(cc, 1);
    assert_eq!(net.live_children(I).len(), 1);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn children_rekey_on_their_own_timer_with_jitter() {
    let s = Setup {
        tweak_i: |c| {
            c.children[0].rekey_time = Some(Duration::from_secs(20));
        },
        ..Setup::default()
    };
    let (mut net, _) = up(&s, 7);
    net.run_for(Duration::from_secs(100));
    let times = net.request_times(I, ExchangeType::CREATE_CHILD_SA);
    assert_eq!(times.len(), 5, "every 18-20 s for 100 s: {times:?}");
    let mut prev = 0.0;
    for t in &times {
        let gap = t - prev;
        // rekey_time 20 s, rand_time default 10 %: [18, 20] s after the
        // SA was made (plus the exchange's round trip).
        assert!((17.9..=20.1).contains(&gap), "gap {gap} in {times:?}");
        prev = *t;
    }
    assert!(
        times.windows(2).any(|w| (w[1] - w[0] - 20.0).abs() > 0.05),
        "jittered: {times:?}"
    );
    assert_eq!(net.live_children(I).len(), 1);
    assert_eq!(net.live_children(R).len(), 1);
    assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn hard_lifetime_deletes_an_sa_that_was_not_rekeyed() {
    let s = Setup {
        tweak_i: |c| {
            c.children[0].rekey_time = None;
            c.children[0].life_time = Some(Duration::from_secs(30));
        },
        ..Setup::default()
    };
    let (mut net, _) = up(&s, 8);
    net.run_for(Duration::from_secs(27));
    assert_eq!(net.live_children(I).len(), 1);
    net.run_for(Duration::from_secs(2));
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::ChildSaDeleted {
            reason: Reason::Expired,
            ..
        }
    )));
    assert!(net.live_children(I).is_empty() && net.live_children(R).is_empty());
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn a_minute_of_traffic_through_rekeys_loses_nothing() {
    for (seed, esp, both) in [
        (10, "aes256gcm16", false),
        (11, "aes128gcm16-x25519", false),
        (12, "aes256gcm16", true),
        (13, "aes128gcm16-x25519", true),
    ] {
        let mut s = Setup {
            esp_i: esp.into(),
            esp_r: esp.into(),
            tweak_i: |c| c.children[0].rekey_time = Some(Duration::from_secs(5)),
            ..Setup::default()
        };
        if both {
            // Both ends rekey on their own timers (an answered rekey stops
            // the answering side's timer for the old SA); collisions have
            // their own test below.
            s.tweak_r = |c| c.children[0].rekey_time = Some(Duration::from_secs(5));
        }
        let (mut net, _) = up(&s, seed);
        let mut dps = [Dp::default(), Dp::default()];
        run_with_traffic(
            &mut net,
            &mut dps,
            "net",
            Duration::from_secs(60),
            Duration::from_millis(2),
            Duration::from_millis(3),
        );
        let rekeys = net.count(
            I,
            |e| matches!(e, Event::ChildSaEstablished(c) if c.rekeys.is_some()),
        );
        assert!(rekeys >= 10, "seed {seed}: {rekeys} rekeys in a minute");
        for (i, dp) in dps.iter().enumerate() {
            assert!(dp.sent >= 29_000, "seed {seed} peer {i}: sent {}", dp.sent);
            assert_eq!(
                dp.no_outbound, 0,
                "seed {seed} peer {i}: always an SA to send on"
            );
            assert_eq!(
                (dp.no_sa, dp.bad_key, dp.replayed),
                (0, 0, 0),
                "seed {seed} peer {i}: lost, wrong key, sequence number reused"
            );
            assert_eq!(
                dps[1 - i].received,
                dp.sent,
                "seed {seed}: every packet arrived"
            );
            assert_eq!(
                dp.installed as usize,
                net.count(i, |e| matches!(e, Event::ChildSaEstablished(_)))
            );
        }
        assert_eq!(net.live_children(I).len(), 1, "seed {seed}");
        assert_eq!(net.live_children(R).len(), 1, "seed {seed}");
        net.assert_no_leak(I);
        net.assert_no_leak(R);
    }
}

#[test]
fn switching_outbound_at_once_would_lose_packets() {
    // The control: the same run with a data plane that ignores
    // `outbound_active` drops the packets that overtake the rekey answer.
    let s = Setup {
        tweak_i: |c| c.children[0].rekey_time = Some(Duration::from_secs(5)),
        ..Setup::default()
    };
    let (mut net, _) = up(&s, 14);
    let mut dps = [Dp::default(), Dp::default()];
    dps[R].ignore_deferral = true;
    run_with_traffic(
        &mut net,
        &mut dps,
        "net",
        Duration::from_secs(20),
        Duration::from_millis(2),
        Duration::from_millis(3),
    );
    assert!(dps[I].no_sa > 0, "packets on the new SA beat the answer");
}

/// Both ends rekey the Child SA at once, the second `offset` later.
fn collide(net: &mut sim::Net, offset: std::time::Duration) {
    let spis: Vec<u32> = (0..2)
        .map(|p| net.live_children(p)[0].inbound_spi)
        .collect();
    let ikes: Vec<IkeSaId> = (0..2).map(|p| net.current_ike(p).unwrap()).collect();
    net.peers[I]
        .ep
        .rekey_child(net.now, ikes[I], spis[I])
        .unwrap();
    if !offset.is_zero() {
        net.run_for(offset);
    }
    // The responder's SA may be gone already if the first exchange is over.
    if net
        .live_children(R)
        .iter()
        .any(|c| c.inbound_spi == spis[R])
    {
        net.peers[R]
            .ep
            .rekey_child(net.now, ikes[R], spis[R])
            .unwrap();
    }
}

#[test]
fn simultaneous_child_rekeys_leave_one_sa_and_nothing_leaked() {
    // Offsets: the requests cross (both detect the collision), or the
    // second leaves when the first request arrived (one detects), or after
    // the first exchange ended (TEMPORARY_FAILURE or CHILD_SA_NOT_FOUND).
    let mut redundant_deleted = 0;
    let mut winners = [0, 0];
    let offsets = [0u64, 0, 0, 1, 5, 9, 10, 11, 15, 20, 25];
    for (seed, offset_ms) in (30..63).zip(offsets.iter().cycle().copied()) {
        for esp in ["aes256gcm16", "aes128gcm16-x25519"] {
            let s = Setup {
                esp_i: esp.into(),
                esp_r: esp.into(),
                ..Setup::default()
            };
            let (mut net, _) = up(&s, seed);
            let olds: Vec<u32> = (0..2)
                .map(|p| net.live_children(p)[0].inbound_spi)
                .collect();
            collide(&mut net, Duration::from_millis(offset_ms));
            net.run_for(Duration::from_secs(5));
            let (a, b) = (net.live_children(I), net.live_children(R));
            assert_eq!(
                (a.len(), b.len()),
                (1, 1),
                "seed {seed} offset {offset_ms} ms"
            );
            assert_pair(a[0], b[0]);
            assert!(!olds.contains(&a[0].inbound_spi) && !olds.contains(&b[0].inbound_spi));
            for p in [I, R] {
                // What the daemon would send on at the end: the survivor.
                let sending: Vec<u32> = net.peers[p]
                    .events
                    .iter()
                    .filter_map(|e| match e {
                        Event::ChildSaEstablished(c) if c.outbound_active => Some(c.inbound_spi),
                        Event::ChildSaOutboundActive { inbound_spi, .. } => Some(*inbound_spi),
                        _ => None,
                    })
                    .collect();
                let live = net.live_children(p)[0].inbound_spi;
                assert_eq!(
                    sending.last(),
                    Some(&live),
                    "seed {seed} peer {p}: sends on the survivor"
                );
                net.assert_no_leak(p);
            }
            // Whose rekey survived? Its initiator announced it active.
            let survivor = net.live_children(I)[0];
            winners[usize::from(!survivor.initiator)] += 1;
            redundant_deleted += net.count(I, |e| {
                matches!(
                    e,
                    Event::ChildSaDeleted {
                        reason: Reason::DeletedByPeer,
                        ..
                    }
                )
            }) + net.count(R, |e| {
                matches!(
                    e,
                    Event::ChildSaDeleted {
                        reason: Reason::DeletedByPeer,
                        ..
                    }
                )
            });
        }
    }
    assert!(
        redundant_deleted > 0,
        "some runs made (and removed) a redundant SA"
    );
    assert!(
        winners[0] > 5 && winners[1] > 5,
        "either side's SA may survive: {winners:?}"
    );
}

#[test]
fn a_minute_of_traffic_through_colliding_rekeys_loses_nothing() {
    for (seed, offset_ms) in [(40u64, 0u64), (41, 4), (42, 10), (43, 17)] {
        let (mut net, _) = up(&Setup::default(), seed);
        let mut dps = [Dp::default(), Dp::default()];
        for _ in 0..12 {
            collide(&mut net, Duration::from_millis(offset_ms));
            run_with_traffic(
                &mut net,
                &mut dps,
                "net",
                Duration::from_secs(5),
                Duration::from_millis(2),
                Duration::from_millis(3),
            );
        }
        for (i, dp) in dps.iter().enumerate() {
            assert_eq!(dp.no_outbound, 0, "seed {seed} peer {i}");
            assert_eq!(
                (dp.no_sa, dp.bad_key, dp.replayed),
                (0, 0, 0),
                "seed {seed} peer {i}"
            );
            assert_eq!(dps[1 - i].received, dp.sent, "seed {seed}");
        }
        assert_eq!(net.live_children(I).len(), 1);
        assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
        net.assert_no_leak(I);
        net.assert_no_leak(R);
    }
}
