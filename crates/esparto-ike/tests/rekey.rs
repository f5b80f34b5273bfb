//! Child SA and IKE SA rekeying over the simulated network (RFC 7296
//! §1.3.2, §1.3.3, §2.8, §2.18): both directions, with and without PFS,
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

/// Rekey the only Child SA from `who` and check everything the brief asks.
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
    let times: Vec<f64> = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false))
        .map(|p| (p.at - net.base).as_secs_f64())
        .collect();
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

#[test]
fn ike_sa_rekey_both_directions_keeps_the_children() {
    for (who, seed) in [(I, 20), (R, 21)] {
        let s = Setup {
            extra_child: true,
            ..Setup::default()
        };
        let mut net = s.build(seed);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.peers[I]
            .ep
            .acquire(net.now, "gw", "host", None)
            .unwrap();
        net.run_for(Duration::from_secs(2));
        let before: Vec<Vec<u32>> = (0..2)
            .map(|p| net.live_children(p).iter().map(|c| c.inbound_spi).collect())
            .collect();
        assert_eq!(before[0].len(), 2);
        let old = [net.current_ike(I).unwrap(), net.current_ike(R).unwrap()];
        net.peers[who].ep.rekey_ike(net.now, old[who]).unwrap();
        net.run_for(Duration::from_secs(2));
        for p in [I, R] {
            let new = net.current_ike(p).unwrap();
            assert_ne!(new, old[p], "peer {p}: a new IKE SA");
            assert_eq!(
                net.count(p, |e| matches!(e, Event::IkeSaRekeyed { old: o, new: n, .. } if *o == old[p] && *n == new)),
                1
            );
            assert_eq!(
                net.count(p, |e| matches!(e, Event::ChildSaDeleted { .. })),
                0
            );
            assert_eq!(
                net.count(p, |e| matches!(e, Event::IkeSaDeleted { .. })),
                0,
                "the old SA goes silently"
            );
            let now: Vec<u32> = net.live_children(p).iter().map(|c| c.inbound_spi).collect();
            assert_eq!(now, before[p], "peer {p}: the Child SAs survive");
            assert_eq!(
                net.peers[p].ep.ike_sa_count(),
                1,
                "peer {p}: the old IKE SA is gone"
            );
            net.assert_no_leak(p);
        }
        // The new IKE SA works: rekey a child over it (using the old id,
        // which is forwarded), and delete the other.
        let c = net.live_children(I)[0].inbound_spi;
        net.peers[I].ep.rekey_child(net.now, old[I], c).unwrap();
        net.run_for(Duration::from_secs(2));
        let new_i = net.current_ike(I).unwrap();
        let rekeyed = net
            .live_children(I)
            .into_iter()
            .find(|x| x.rekeys == Some(c))
            .unwrap();
        assert_eq!(rekeyed.ike_sa, new_i);
        assert_eq!(net.live_children(R).len(), 2);
        let r_ike = net.current_ike(R).unwrap();
        net.peers[R].ep.terminate(net.now, r_ike).unwrap();
        net.run_for(Duration::from_secs(2));
        assert_eq!(
            net.peers[I].ep.ike_sa_count() + net.peers[R].ep.ike_sa_count(),
            0
        );
        for p in [I, R] {
            net.assert_no_leak(p);
        }
    }
}

#[test]
fn ike_sa_rekeys_on_its_own_timer() {
    let s = Setup {
        tweak_i: |c| c.rekey_time = Some(Duration::from_secs(60)),
        ..Setup::default()
    };
    let (mut net, first) = up(&s, 22);
    net.run_for(Duration::from_secs(200));
    let rekeys = net.count(I, |e| matches!(e, Event::IkeSaRekeyed { .. }));
    assert_eq!(rekeys, 3, "every 54-60 s for 200 s");
    assert_ne!(net.current_ike(I), Some(first));
    assert_eq!(net.live_children(I).len(), 1);
    assert_eq!(net.peers[R].ep.ike_sa_count(), 1);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
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

#[test]
fn simultaneous_ike_rekeys_leave_one_ike_sa_holding_the_children() {
    let offsets = [0u64, 0, 0, 2, 6, 9, 10, 12, 20, 30];
    for (seed, offset_ms) in (50..90).zip(offsets.iter().cycle().copied()) {
        let s = Setup {
            extra_child: true,
            ..Setup::default()
        };
        let mut net = s.build(seed);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.peers[I]
            .ep
            .acquire(net.now, "gw", "host", None)
            .unwrap();
        net.run_for(Duration::from_secs(2));
        let before: Vec<Vec<u32>> = (0..2)
            .map(|p| net.live_children(p).iter().map(|c| c.inbound_spi).collect())
            .collect();
        let old = [net.current_ike(I).unwrap(), net.current_ike(R).unwrap()];
        net.peers[I].ep.rekey_ike(net.now, old[I]).unwrap();
        net.run_for(Duration::from_millis(offset_ms));
        if net.current_ike(R) == Some(old[R]) {
            net.peers[R].ep.rekey_ike(net.now, old[R]).unwrap();
        }
        // Long enough for any leftover to retire (30 s).
        net.run_for(Duration::from_secs(40));
        for p in [I, R] {
            let cur = net.current_ike(p).unwrap();
            assert_ne!(cur, old[p], "seed {seed} peer {p}");
            assert_eq!(
                net.peers[p].ep.ike_sa_count(),
                1,
                "seed {seed} offset {offset_ms} peer {p}: one IKE SA"
            );
            assert_eq!(
                net.count(p, |e| matches!(
                    e,
                    Event::ChildSaDeleted { .. } | Event::IkeSaDeleted { .. }
                )),
                0,
                "seed {seed} peer {p}: nothing deleted"
            );
            let now: Vec<u32> = net.live_children(p).iter().map(|c| c.inbound_spi).collect();
            assert_eq!(now, before[p], "seed {seed} peer {p}: children inherited");
            net.assert_no_leak(p);
        }
        // Both ends agree on the surviving IKE SA: a Child SA rekey and a
        // liveness check over it work.
        let ike_i = net.current_ike(I).unwrap();
        let c = net.live_children(I)[0].inbound_spi;
        net.peers[I].ep.rekey_child(net.now, ike_i, c).unwrap();
        net.run_for(Duration::from_secs(2));
        assert_eq!(net.live_children(I).len(), 2, "seed {seed}");
        assert_eq!(net.live_children(R).len(), 2, "seed {seed}");
        let r = net
            .live_children(I)
            .into_iter()
            .find(|x| x.rekeys == Some(c))
            .unwrap();
        assert_eq!(r.ike_sa, ike_i);
        for p in [I, R] {
            net.assert_no_leak(p);
        }
    }
}

#[test]
fn rekeys_survive_loss_duplication_and_reordering() {
    // With this much loss an exchange sometimes exhausts its
    // retransmissions and its IKE SA dies (§2.4): that is allowed, but
    // whatever survives must be consistent and nothing may leak.
    let mut survived = 0;
    let seeds = 80u64..160;
    let runs = (seeds.end - seeds.start) as usize;
    for seed in seeds {
        let s = Setup {
            extra_child: true,
            ..Setup::default()
        };
        let mut net = s.build(seed);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.peers[I]
            .ep
            .acquire(net.now, "gw", "host", None)
            .unwrap();
        net.run_for(Duration::from_secs(2));
        net.loss = 0.15;
        net.dup = 0.2;
        net.reorder = 0.3;
        for round in 0..3 {
            let (Some(ike_i), Some(ike_r)) = (net.current_ike(I), net.current_ike(R)) else {
                break;
            };
            for c in net
                .live_children(I)
                .iter()
                .map(|c| c.inbound_spi)
                .collect::<Vec<_>>()
            {
                net.peers[I].ep.rekey_child(net.now, ike_i, c).unwrap();
            }
            if let Some(c) = net.live_children(R).first().map(|c| c.inbound_spi) {
                net.peers[R].ep.rekey_child(net.now, ike_r, c).unwrap();
            }
            if round == 1 {
                net.peers[R].ep.rekey_ike(net.now, ike_r).unwrap();
            }
            net.run_for(Duration::from_secs(60));
        }
        net.loss = 0.0;
        // Long enough for a request to a peer that forgot the IKE SA (an
        // old SA whose Delete answer was lost, or a peer whose SA died) to
        // give up retransmitting (§2.4: about 165 s).
        net.run_for(Duration::from_secs(400));
        for p in [I, R] {
            assert!(net.peers[p].ep.ike_sa_count() <= 1, "seed {seed} peer {p}");
            net.assert_no_leak(p);
        }
        if net.peers[I].ep.ike_sa_count() + net.peers[R].ep.ike_sa_count() < 2 {
            continue;
        }
        survived += 1;
        let (a, b) = (net.live_children(I), net.live_children(R));
        assert_eq!((a.len(), b.len()), (2, 2), "seed {seed}");
        for x in &a {
            let y = b.iter().find(|y| y.outbound_spi == x.inbound_spi).unwrap();
            assert_pair(x, y);
        }
    }
    assert!(
        survived * 10 >= runs * 9,
        "{survived}/{runs} survived 15 % loss"
    );
}

#[test]
fn terminating_while_a_rekey_is_out_deletes_the_successor_too() {
    // A Child SA.
    let (mut net, id) = up(&Setup::default(), 300);
    let spi = net.live_children(I)[0].inbound_spi;
    net.peers[I].ep.rekey_child(net.now, id, spi).unwrap();
    net.peers[I].ep.terminate_child(net.now, id, spi).unwrap();
    net.run_for(Duration::from_secs(2));
    assert!(net.live_children(I).is_empty() && net.live_children(R).is_empty());
    net.assert_no_leak(I);
    net.assert_no_leak(R);
    // The IKE SA.
    let (mut net, id) = up(&Setup::default(), 301);
    net.peers[I].ep.rekey_ike(net.now, id).unwrap();
    net.peers[I].ep.terminate(net.now, id).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(
        net.peers[I].ep.ike_sa_count() + net.peers[R].ep.ike_sa_count(),
        0
    );
    assert_eq!(
        net.count(I, |e| matches!(
            e,
            Event::IkeSaDeleted {
                reason: Reason::Terminated,
                ..
            }
        )),
        1
    );
    assert_eq!(
        net.count(R, |e| matches!(
            e,
            Event::IkeSaDeleted {
                reason: Reason::DeletedByPeer,
                ..
            }
        )),
        1
    );
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}
