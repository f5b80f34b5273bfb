//! The IKE SA around its Child SAs, over the simulated network: window
//! size (RFC 7296 §2.3) with eight CREATE_CHILD_SA in flight, requests
//! passing one another, INITIAL_CONTACT (§2.4) from a restarted peer, and
//! `dpd_timeout`.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{DpdAction, EndpointConfig, Event, Reason};
use esparto_wire::ike::ExchangeType;
use sim::{Setup, assert_pair};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

/// Eight extra Child SAs asked for at once.
fn eight_children(s: &Setup, seed: u64) -> sim::Net {
    let mut net = s.build(seed);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(1));
    for _ in 0..8 {
        net.peers[I]
            .ep
            .acquire(net.now, "gw", "host", None)
            .unwrap();
    }
    net
}

#[test]
fn window_eight_sends_eight_create_child_sa_in_parallel() {
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = eight_children(&s, 1);
    net.run_for(Duration::from_secs(2));
    let t = net.request_times(I, ExchangeType::CREATE_CHILD_SA);
    assert_eq!(t.len(), 8);
    assert!(
        t.iter().all(|x| *x == t[0]),
        "all eight in flight at once: {t:?}"
    );
    assert_eq!(net.live_children(I).len(), 9);
    for x in net.live_children(I) {
        let y = net
            .live_children(R)
            .into_iter()
            .find(|y| y.outbound_spi == x.inbound_spi)
            .unwrap();
        assert_pair(x, y);
    }
    net.assert_no_leak(I);
    net.assert_no_leak(R);

    // A peer that announced no window (it sent no SET_WINDOW_SIZE): one
    // request at a time, each after the previous answer (20 ms RTT).
    let s = Setup {
        extra_child: true,
        cfg_r: EndpointConfig {
            window_size: 1,
            ..EndpointConfig::default()
        },
        ..Setup::default()
    };
    let mut net = eight_children(&s, 2);
    net.run_for(Duration::from_secs(2));
    let t = net.request_times(I, ExchangeType::CREATE_CHILD_SA);
    assert_eq!(t.len(), 8);
    assert!(
        t.windows(2).all(|w| w[1] - w[0] >= 0.019),
        "serialised: {t:?}"
    );
    assert_eq!(net.live_children(I).len(), 9);

    // Our window of three towards a window-8 peer: three at a time.
    let s = Setup {
        extra_child: true,
        cfg_r: EndpointConfig {
            window_size: 3,
            ..EndpointConfig::default()
        },
        ..Setup::default()
    };
    let mut net = eight_children(&s, 3);
    net.run_for(Duration::from_secs(2));
    let t = net.request_times(I, ExchangeType::CREATE_CHILD_SA);
    assert_eq!(t.iter().filter(|x| **x == t[0]).count(), 3, "{t:?}");
    assert_eq!(net.live_children(I).len(), 9);
}

#[test]
fn requests_passing_one_another_are_all_answered() {
    for seed in 10..30 {
        let s = Setup {
            extra_child: true,
            ..Setup::default()
        };
        let mut net = eight_children(&s, seed);
        net.reorder = 0.8;
        net.dup = 0.3;
        net.run_for(Duration::from_secs(30));
        assert_eq!(net.live_children(I).len(), 9, "seed {seed}");
        assert_eq!(net.live_children(R).len(), 9, "seed {seed}");
        // Retransmissions only where a response was lost: none here.
        assert_eq!(
            net.request_times(I, ExchangeType::CREATE_CHILD_SA).len(),
            8,
            "seed {seed}"
        );
        net.assert_no_leak(I);
        net.assert_no_leak(R);
    }
}

#[test]
fn initial_contact_from_a_restarted_peer_deletes_the_stale_ike_sa() {
    let s = Setup {
        extra_child: true,
        ..Setup::default()
    };
    let mut net = s.build(40);
    let old = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", None)
        .unwrap();
    net.run_for(Duration::from_secs(2));
    let r_old = net.current_ike(R).unwrap();
    assert_eq!(net.live_children(R).len(), 2);

    // A second IKE SA while the first lives: no INITIAL_CONTACT, both stay.
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.peers[R].ep.ike_sa_count(), 2);
    assert_eq!(net.count(R, |e| matches!(e, Event::IkeSaDeleted { .. })), 0);
    net.peers[I].ep.terminate(net.now, old).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.peers[R].ep.ike_sa_count(), 1);
    let r_live = net.current_ike(R).unwrap();
    assert_ne!(r_live, r_old);

    // The initiator restarts (all state lost) and comes back: its first
    // IKE_AUTH carries INITIAL_CONTACT, and the responder drops what it
    // held for that identity pair without sending a Delete.
    let fresh = s.build(41).peers.remove(I);
    net.peers[I].ep = fresh.ep;
    net.peers[I].live = fresh.live;
    net.peers[I].events.clear();
    let before = net.peers[R].sent.len();
    let children_before = net.live_children(R).len();
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert!(net.peers[R].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted { ike_sa, reason: Reason::PeerRestarted, .. } if *ike_sa == r_live
    )));
    assert_eq!(
        net.count(R, |e| matches!(
            e,
            Event::ChildSaDeleted {
                reason: Reason::PeerRestarted,
                ..
            }
        )),
        children_before
    );
    assert_eq!(net.peers[R].ep.ike_sa_count(), 1, "only the new IKE SA");
    let deletes = net.peers[R].sent[before..]
        .iter()
        .filter(|p| p.is(ExchangeType::INFORMATIONAL, false))
        .count();
    assert_eq!(deletes, 0, "no Delete to a peer that forgot the SA");
    assert_eq!(net.live_children(R).len(), 1);
    assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn dpd_timeout_declares_the_peer_dead_before_retransmissions_give_up() {
    let s = Setup {
        dpd: Some(Duration::from_secs(10)),
        tweak_i: |c| {
            c.dpd_timeout = Some(Duration::from_secs(20));
            c.dpd_action = DpdAction::Clear;
        },
        ..Setup::default()
    };
    let mut net = s.build(50);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(1));
    net.loss = 1.0;
    // The liveness check leaves ~10 s after the last message; the peer is
    // dead 20 s later (the retransmission give-up would take ~165 s).
    net.run_for(Duration::from_secs(29));
    assert_eq!(net.count(I, |e| matches!(e, Event::IkeSaDeleted { .. })), 0);
    net.run_for(Duration::from_secs(2));
    assert!(net.peers[I].events.iter().any(|e| matches!(
        e,
        Event::IkeSaDeleted {
            reason: Reason::Timeout,
            ..
        }
    )));
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    net.assert_no_leak(I);
}
