//! IKE SA rekeying over the simulated network (RFC 7296 §1.3.2, §2.18,
//! §2.8.2): both directions with the Child SAs inherited, on the
//! connection's timer, simultaneous rekeys, a delete during a rekey, and
//! rekeys of both kinds under loss, duplication and reordering.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{Event, IkeSaId, Reason};
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

/// Both peers up with an IKE SA and two Child SAs (the IKE_AUTH child and
/// the `host` child the initiator acquires).
fn up_with_two_children(seed: u64) -> sim::Net {
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = s.build(seed);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I].ep.acquire(net.now, "gw", "host", None).unwrap();
    net.run_for(Duration::from_secs(2));
    net
}

/// Each peer's live inbound Child SA SPIs.
fn inbound_spis(net: &sim::Net) -> Vec<Vec<u32>> {
    (0..2)
        .map(|p| net.live_children(p).iter().map(|c| c.inbound_spi).collect())
        .collect()
}

#[test]
fn ike_sa_rekey_both_directions_keeps_the_children() {
    for (who, seed) in [(I, 20), (R, 21)] {
        let mut net = up_with_two_children(seed);
        let before = inbound_spis(&net);
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
            // Whose rekey it was, as each side sees it.
            assert_eq!(
                net.count(p, |e| matches!(e, Event::IkeSaRekeyed { initiated, .. } if *initiated == (p == who))),
                1,
                "peer {p}"
            );
            // The rekey's CREATE_CHILD_SA, counted on both sides: a
            // request out and a response in at the initiator of the
            // rekey, the other way round at the peer.
            let m = net.peers[p].ep.stats().messages;
            let (reqs, resps) = if p == who { (m.sent[2][0], m.received[2][1]) } else { (m.received[2][0], m.sent[2][1]) };
            assert!(reqs >= 1 && resps >= 1, "peer {p}: {m:?}");
            // The first exchanges: the initiator sent the requests.
            let (init, auth) = if p == I { (m.sent[0][0], m.sent[1][0]) } else { (m.received[0][0], m.received[1][0]) };
            assert!(init >= 1 && auth >= 1, "peer {p}: {m:?}");
            assert_eq!(
                net.count(p, |e| matches!(e, Event::ChildSaDeleted { .. })),
                0
            );
            assert_eq!(
                net.count(p, |e| matches!(e, Event::IkeSaDeleted { .. })),
                0,
                "the old SA goes silently"
            );
            assert_eq!(inbound_spis(&net)[p], before[p], "peer {p}: the Child SAs survive");
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

#[test]
fn simultaneous_ike_rekeys_leave_one_ike_sa_holding_the_children() {
    let offsets = [0u64, 0, 0, 2, 6, 9, 10, 12, 20, 30];
    for (seed, offset_ms) in (50..90).zip(offsets.iter().cycle().copied()) {
        let mut net = up_with_two_children(seed);
        let before = inbound_spis(&net);
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
            assert_eq!(inbound_spis(&net)[p], before[p], "seed {seed} peer {p}: children inherited");
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
        let mut net = up_with_two_children(seed);
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
