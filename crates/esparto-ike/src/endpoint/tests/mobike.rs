//! MOBIKE (RFC 4555): announced in IKE_AUTH; the initiator whose address
//! leaves moves the IKE SA with UPDATE_SA_ADDRESSES and keeps its Child
//! SAs; the responder moves only after the new address answers its
//! COOKIE2 check, and puts the old addresses back when it does not;
//! without MOBIKE on either side the IKE SA ends as before.

use super::*;
use crate::event::Reason;
use core::time::Duration;

const MOON2: &str = "10.0.0.3";

/// The responder takes the initiator at either address.
fn either(c: &mut ConnectionConfig) {
    c.remote_addrs.push(MOON2.parse().unwrap());
}

fn either_without_mobike(c: &mut ConnectionConfig) {
    either(c);
    c.mobike = false;
}

/// An established pair whose initiator may send from `MOON` or `MOON2`
/// (`tweak_r` makes the responder's connection), and the responder's ID
/// of the IKE SA.
fn pair(tweak_r: fn(&mut ConnectionConfig)) -> (Pair, IkeSaId) {
    let mut p = Pair {
        i: endpoint_with(1, MOON, SUN, "@moon", "@sun", |c| {
            c.local_addrs.push(MOON2.parse().unwrap());
        }),
        r: endpoint_with(2, SUN, MOON, "@sun", "@moon", tweak_r),
        now: Instant::now(),
        ike: IkeSaId(0),
    };
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    pump(&mut p);
    let r_id = std::iter::from_fn(|| p.r.poll_event())
        .find_map(|e| match e {
            Event::IkeSaEstablished { ike_sa, .. } => Some(ike_sa),
            _ => None,
        })
        .unwrap();
    while p.r.poll_event().is_some() {}
    while p.i.poll_event().is_some() {}
    (p, r_id)
}

fn events(ep: &mut Endpoint) -> Vec<Event> {
    std::iter::from_fn(|| ep.poll_event()).collect()
}

fn moved_to(evs: &[Event]) -> Option<(SocketAddr, SocketAddr)> {
    evs.iter().find_map(|e| match e {
        Event::PeerAddressChanged { local, remote, .. } => Some((*local, *remote)),
        _ => None,
    })
}

fn addr(ip: &str) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), 500)
}

#[test]
fn the_initiator_moves_and_the_responder_follows_after_the_check() {
    let (mut p, r_id) = pair(either);
    assert_eq!(p.i.local_address_gone(p.now, MOON.parse().unwrap()), 1);
    let update = p.i.poll_transmit().expect("UPDATE_SA_ADDRESSES");
    assert_eq!((update.local, update.remote), (addr(MOON2), addr(SUN)), "sent from the new address");
    p.r.handle_datagram(p.now, wall_clock(), update.remote, update.local, &update.data);
    let (to_r, to_i) = pump(&mut p);
    // The responder answered the update, then checked the new address
    // with COOKIE2, which the initiator echoed.
    assert!(to_i.iter().all(|t| t.remote == addr(MOON2)), "{to_i:?}");
    assert_eq!(to_i.len(), 2, "the answer and the check");
    assert_eq!(to_r.len(), 1, "the check's answer");
    let (ei, er) = (events(&mut p.i), events(&mut p.r));
    assert_eq!(moved_to(&ei), Some((addr(MOON2), addr(SUN))), "{ei:?}");
    assert_eq!(moved_to(&er), Some((addr(SUN), addr(MOON2))), "{er:?}");
    for e in ei.iter().chain(&er) {
        assert!(
            !matches!(e, Event::ChildSaEstablished(_) | Event::ChildSaDeleted { .. } | Event::IkeSaDeleted { .. }),
            "nothing renegotiated: {e:?}"
        );
    }
    assert_eq!(p.i.stats().mobike_updates, 1);
    assert_eq!(p.r.stats().mobike_updates, 1);
    // Both sides use the new addresses from now on.
    p.r.liveness_check(p.now, r_id).unwrap();
    assert_eq!(p.r.poll_transmit().unwrap().remote, addr(MOON2));
}

#[test]
fn an_update_whose_address_fails_the_check_changes_nothing() {
    let (mut p, _) = pair(either);
    p.i.local_address_gone(p.now, MOON.parse().unwrap());
    let update = p.i.poll_transmit().unwrap();
    // Someone on the path rewrites the source: the responder answers
    // there, and checks there; nothing comes back.
    let spoofed = addr("10.0.0.66");
    p.r.handle_datagram(p.now, wall_clock(), update.remote, spoofed, &update.data);
    let mut sent = Vec::new();
    for _ in 0..40 {
        p.now += Duration::from_secs(1);
        p.r.handle_timeout(p.now);
        sent.extend(std::iter::from_fn(|| p.r.poll_transmit()));
    }
    let er = events(&mut p.r);
    assert_eq!(moved_to(&er), None, "{er:?}");
    assert!(!er.iter().any(|e| matches!(e, Event::IkeSaDeleted { .. })), "the IKE SA lives on: {er:?}");
    assert_eq!(p.r.stats().mobike_checks_failed, 1);
    assert!(sent.iter().any(|t| t.remote == spoofed), "the check went to the claimed address: {sent:?} {er:?}");
    let last = sent.last().unwrap();
    assert_eq!(last.remote, addr(MOON), "then the old address gets the same request: {sent:?}");
    assert_eq!(p.r.ike_sa_count(), 1);
}

#[test]
fn without_mobike_at_the_peer_the_ike_sa_ends() {
    let (mut p, _) = pair(either_without_mobike);
    assert_eq!(p.i.local_address_gone(p.now, MOON.parse().unwrap()), 1);
    assert!(p.i.poll_transmit().is_none(), "no update: the peer did not announce MOBIKE");
    let ei = events(&mut p.i);
    assert!(
        ei.iter().any(|e| matches!(e, Event::IkeSaDeleted { reason: Reason::LocalAddressGone, .. })),
        "{ei:?}"
    );
}

#[test]
fn a_responder_whose_address_leaves_cannot_move_the_ike_sa() {
    let (mut p, _) = pair(either);
    p.r.local_address_gone(p.now, SUN.parse().unwrap());
    assert!(p.r.poll_transmit().is_none());
    let er = events(&mut p.r);
    assert!(er.iter().any(|e| matches!(e, Event::IkeSaDeleted { reason: Reason::LocalAddressGone, .. })), "{er:?}");
}
