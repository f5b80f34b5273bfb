//! Hostile or unlucky requests around rekeying and RFC 9611, answered as
//! RFC 7296 §2.25 and RFC 9611 say, with no panic and nothing leaked: a
//! rekey for an unknown SPI or for an SA being deleted, IKE SA rekeys
//! meeting other exchanges, requests out of the window, floods of
//! CREATE_CHILD_SA past the per-CPU and per-IKE-SA maximums, and IPComp
//! offers we cannot take (§2.22: a child without IPComp, not a failure).

use super::*;
use crate::config::PerCpuSas;
use crate::lifetime::MAX_CHILD_SAS;
use crate::proposal::{Proposal, Protocol};
use esparto_wire::ike::{NonceRepr, SaRepr, Spi, TrafficSelectorRepr, TsRepr};

/// TSi/TSr as the initiator's configuration has them.
fn ts(net: &str) -> TsRepr {
    let t = crate::ts::TsConfig::parse(net)
        .unwrap()
        .resolve(MOON.parse().unwrap());
    TsRepr {
        selectors: vec![TrafficSelectorRepr::from(t)],
    }
}

/// A CREATE_CHILD_SA request for a Child SA with our SPI `spi`, plus
/// `notifies` (REKEY_SA, SA_RESOURCE_INFO, ...).
fn child_request(p: &mut Pair, spi: u32, notifies: &[NotifyRepr<'_>]) -> Vec<u8> {
    let offer = Proposal::parse(Protocol::Esp, "aes256gcm16").unwrap();
    let nonce = [0x5a; 32];
    let mut inner: Vec<PayloadRepr<'_>> =
        notifies.iter().map(|n| PayloadRepr::Notify(*n)).collect();
    inner.push(PayloadRepr::Sa(SaRepr {
        proposals: vec![offer.to_wire(1, Spi::U32(spi), true)],
    }));
    inner.push(PayloadRepr::Nonce(NonceRepr { data: &nonce }));
    inner.push(PayloadRepr::TsI(ts("10.1.0.0/16")));
    inner.push(PayloadRepr::TsR(ts("10.2.0.0/16")));
    request(p, ExchangeType::CREATE_CHILD_SA, &inner, false, 0)
}

/// A CREATE_CHILD_SA request rekeying the IKE SA (§1.3.2), KE of `group`.
fn ike_rekey_request(p: &mut Pair, group: u16) -> Vec<u8> {
    let offer = Proposal::parse(Protocol::Ike, "aes256gcm16-prfsha256-x25519").unwrap();
    let nonce = [0x33; 32];
    // An all-zero X25519 value: a low-order point, refused by the agreement.
    let public = [0u8; 32];
    let inner = [
        PayloadRepr::Sa(SaRepr {
            proposals: vec![offer.to_wire(1, Spi::U64(0x1122_3344_5566_7788), true)],
        }),
        PayloadRepr::Nonce(NonceRepr { data: &nonce }),
        PayloadRepr::Ke(KeRepr {
            group,
            data: &public,
        }),
    ];
    request(p, ExchangeType::CREATE_CHILD_SA, &inner, false, 0)
}

/// The responder's answer: notify types with their SPIs, and whether it
/// carried an SA payload.
fn answer(p: &Pair, t: &Transmit) -> (Vec<(NotifyType, Spi)>, bool) {
    let sa = &p.i.sas[&p.ike.0];
    let data = t.data.strip_prefix(&[0, 0, 0, 0]).unwrap_or(&t.data);
    let msg = Message::parse(data).unwrap();
    let opened = sa.decrypt(data, &msg).unwrap();
    let payloads = opened.payloads().unwrap();
    let n = payloads
        .iter()
        .filter_map(|pl| match pl {
            PayloadRepr::Notify(n) => Some((n.kind, n.spi)),
            _ => None,
        })
        .collect();
    let has_sa = payloads.iter().any(|pl| matches!(pl, PayloadRepr::Sa(_)));
    (n, has_sa)
}

fn drain_events(ep: &mut Endpoint) -> Vec<Event> {
    let mut v = Vec::new();
    while let Some(e) = ep.poll_event() {
        v.push(e);
    }
    v
}

fn rekey_notify(spi: u32) -> NotifyRepr<'static> {
    NotifyRepr {
        protocol: ProtocolId::ESP,
        spi: Spi::U32(spi),
        kind: NotifyType::REKEY_SA,
        data: &[],
    }
}

#[test]
fn rekey_of_an_unknown_spi_gets_child_sa_not_found_naming_it() {
    let mut p = established();
    let m = child_request(&mut p, 0x0bad_0001, &[rekey_notify(0xdead_beef)]);
    let out = send(&mut p, &m);
    assert_eq!(out.len(), 1);
    let (n, has_sa) = answer(&p, &out[0]);
    // §2.25: "The SA that the initiator attempted to rekey is indicated by
    // the SPI field in the Notify payload, which is copied from the SPI
    // field in the REKEY_SA notification."
    assert_eq!(n, [(NotifyType::CHILD_SA_NOT_FOUND, Spi::U32(0xdead_beef))]);
    assert!(!has_sa);
    assert!(drain_events(&mut p.r).is_empty());
    assert_eq!(p.r.child_sa_count(), 1);
    // A REKEY_SA for the IKE protocol or with an 8-octet SPI: INVALID_SYNTAX.
    let bad = NotifyRepr {
        protocol: ProtocolId::IKE,
        spi: Spi::U64(5),
        kind: NotifyType::REKEY_SA,
        data: &[],
    };
    let m = child_request(&mut p, 0x0bad_0002, &[bad]);
    let out = send(&mut p, &m);
    assert_eq!(
        answer(&p, &out[0]).0,
        [(NotifyType::INVALID_SYNTAX, Spi::None)]
    );
    assert_eq!(p.r.child_sa_count(), 1);
}

#[test]
fn rekey_of_a_child_sa_being_deleted_gets_temporary_failure() {
    let mut p = established();
    let r_child = p.r.sas.values().next().unwrap().children[0].clone();
    let r_ike = IkeSaId(p.r.sas.keys().copied().next().unwrap());
    // The responder starts deleting it; its Delete is still on the way.
    p.r.terminate_child(p.now, r_ike, r_child.inbound_spi)
        .unwrap();
    while p.r.poll_transmit().is_some() {}
    // REKEY_SA carries the SPI the initiator receives on: the responder's
    // outbound SPI of the pair.
    let m = child_request(&mut p, 0x0bad_0003, &[rekey_notify(r_child.outbound_spi)]);
    let out = send(&mut p, &m);
    assert_eq!(
        answer(&p, &out[0]).0,
        [(NotifyType::TEMPORARY_FAILURE, Spi::None)]
    );
    assert_eq!(p.r.child_sa_count(), 1, "no new SA");
}

#[test]
fn ike_rekey_meeting_a_child_exchange_or_a_bad_ke_is_refused() {
    // §2.25.1: a rekey of the IKE SA while we create/rekey/delete a Child
    // SA gets TEMPORARY_FAILURE.
    let mut p = established();
    let r_ike = IkeSaId(p.r.sas.keys().copied().next().unwrap());
    let spi = p.r.sas[&r_ike.0].children[0].inbound_spi;
    p.r.rekey_child(p.now, r_ike, spi).unwrap();
    while p.r.poll_transmit().is_some() {}
    let m = ike_rekey_request(&mut p, 31);
    let out = send(&mut p, &m);
    assert_eq!(
        answer(&p, &out[0]).0,
        [(NotifyType::TEMPORARY_FAILURE, Spi::None)]
    );
    assert_eq!(p.r.ike_sa_count(), 1);
    assert_eq!(p.r.ike_spi_count(), 1, "no SPI reserved");

    // §1.2/§2.18: a KE of a group we did not choose: INVALID_KE_PAYLOAD
    // naming ours (31); no state kept.
    let mut p = established();
    let m = ike_rekey_request(&mut p, 19);
    let out = send(&mut p, &m);
    assert_eq!(
        answer(&p, &out[0]).0,
        [(NotifyType::INVALID_KE_PAYLOAD, Spi::None)]
    );
    assert_eq!((p.r.ike_sa_count(), p.r.ike_spi_count()), (1, 1));
    // An invalid public value of the right group: refused, no new SA.
    let m = ike_rekey_request(&mut p, 31);
    let out = send(&mut p, &m);
    let (n, has_sa) = answer(&p, &out[0]);
    assert_eq!(n, [(NotifyType::INVALID_SYNTAX, Spi::None)]);
    assert!(!has_sa);
    assert!(drain_events(&mut p.r).is_empty());
    assert_eq!((p.r.ike_sa_count(), p.r.ike_spi_count()), (1, 1));
}

#[test]
fn child_requests_while_we_rekey_the_ike_sa_get_temporary_failure() {
    // §2.25.2: "If a peer receives a request to create or rekey a Child SA
    // when it is currently rekeying the IKE SA, it SHOULD reply with
    // TEMPORARY_FAILURE."
    let mut p = established();
    let r_ike = IkeSaId(p.r.sas.keys().copied().next().unwrap());
    p.r.rekey_ike(p.now, r_ike).unwrap();
    while p.r.poll_transmit().is_some() {}
    assert_eq!(p.r.ike_spi_count(), 2, "the new SPI is reserved");
    let m = child_request(&mut p, 0x0bad_0004, &[]);
    let out = send(&mut p, &m);
    assert_eq!(
        answer(&p, &out[0]).0,
        [(NotifyType::TEMPORARY_FAILURE, Spi::None)]
    );
    assert_eq!(p.r.child_sa_count(), 1);
    // Deleting the IKE SA meanwhile releases the reserved SPI.
    p.r.terminate(p.now, r_ike).unwrap();
    let mut now = p.now;
    for _ in 0..10 {
        now += std::time::Duration::from_secs(60);
        p.r.handle_timeout(now);
    }
    assert_eq!((p.r.ike_sa_count(), p.r.ike_spi_count()), (0, 0));
}

#[test]
fn requests_inside_the_window_may_come_out_of_order() {
    let mut p = established();
    // Message IDs n+1 then n: both answered (§2.3: requests "may pass one
    // another over the network").
    let later = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 1);
    let now = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 0);
    p.i.sas.get_mut(&p.ike.0).unwrap().next_mid += 1;
    assert_eq!(send(&mut p, &later).len(), 1);
    assert_eq!(send(&mut p, &now).len(), 1);
    // Both again: the cached answers.
    assert_eq!(send(&mut p, &later).len(), 1);
    assert_eq!(send(&mut p, &now).len(), 1);
    // The window moved past both: the next is answered, one 8 ahead not.
    let next = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 0);
    assert_eq!(send(&mut p, &next).len(), 1);
    let far = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 8);
    assert!(send(&mut p, &far).is_empty());
    assert_eq!(p.r.stats().out_of_window, 1);
    let edge = request(&mut p, ExchangeType::INFORMATIONAL, &[], false, 7);
    assert_eq!(send(&mut p, &edge).len(), 1, "the window's last slot");
}

#[test]
fn per_resource_flood_past_the_maximum_gets_ts_max_queue() {
    let mut p = established_with(|c| {
        c.children[0].per_cpu_sas = PerCpuSas::OnDemand;
        c.children[0].per_cpu_max = 3;
    });
    let info = NotifyRepr::new(NotifyType::SA_RESOURCE_INFO, &[0, 1]);
    let mut accepted = 0;
    let mut refused = 0;
    for k in 0..20u32 {
        let m = child_request(&mut p, 0x0c00_0000 + k, &[info]);
        let out = send(&mut p, &m);
        assert_eq!(out.len(), 1);
        match answer(&p, &out[0]) {
            (n, true) => {
                assert!(n.contains(&(NotifyType::SA_RESOURCE_INFO, Spi::None)));
                accepted += 1;
            }
            (n, false) => {
                // RFC 9611: the peer "is unwilling to create more
                // additional Child SAs for this particular negotiated
                // Traffic Selector combination".
                assert_eq!(n, [(NotifyType::TS_MAX_QUEUE, Spi::None)]);
                refused += 1;
            }
        }
    }
    assert_eq!((accepted, refused), (3, 17));
    let events = drain_events(&mut p.r);
    let subs = events
        .iter()
        .filter(
            |e| matches!(e, Event::ChildSaEstablished(c) if c.per_resource && c.resource.is_none()),
        )
        .count();
    assert_eq!(subs, 3);
    assert_eq!(p.r.child_sa_count(), 4, "fallback + 3");
    // A rekey of one of them is not counted against the maximum.
    let sub = p.r.sas.values().next().unwrap().children[1].clone();
    let m = child_request(&mut p, 0x0d00_0000, &[rekey_notify(sub.outbound_spi)]);
    let out = send(&mut p, &m);
    assert!(answer(&p, &out[0]).1, "the rekey is answered with an SA");
}

#[test]
fn plain_create_child_sa_flood_stops_at_no_additional_sas() {
    let mut p = established();
    let mut last = Vec::new();
    for k in 0..(MAX_CHILD_SAS as u32 + 5) {
        let m = child_request(&mut p, 0x1000_0000 + k, &[]);
        let out = send(&mut p, &m);
        last = answer(&p, &out[0]).0;
    }
    assert_eq!(last, [(NotifyType::NO_ADDITIONAL_SAS, Spi::None)]);
    assert_eq!(p.r.child_sa_count(), MAX_CHILD_SAS);
    drain_events(&mut p.r);
    // The IKE SA goes, and every Child SA with it, reported.
    let r_ike = IkeSaId(p.r.sas.keys().copied().next().unwrap());
    p.r.terminate(p.now, r_ike).unwrap();
    let deleted = drain_events(&mut p.r)
        .iter()
        .filter(|e| matches!(e, Event::ChildSaDeleted { .. }))
        .count();
    assert_eq!(deleted, 0, "the Delete is under way");
    pump(&mut p);
    let deleted = drain_events(&mut p.r)
        .iter()
        .filter(|e| matches!(e, Event::ChildSaDeleted { .. }))
        .count();
    assert_eq!(deleted, MAX_CHILD_SAS);
    assert_eq!(p.r.child_sa_count(), 0);
}

/// The IPCOMP_SUPPORTED notify's data: CPI and transform (RFC 7296 §3.10.1).
fn ipcomp_data(cpi: u16, transform: u8) -> [u8; 3] {
    let [a, b] = cpi.to_be_bytes();
    [a, b, transform]
}

#[test]
fn ipcomp_offers_we_cannot_take_give_a_child_without_ipcomp() {
    let mut p = established_with(|c| c.children[0].ipcomp = true);
    drain_events(&mut p.r);
    // An unknown transform (LZS, 3), a CPI below 256 (reserved for the
    // well-known ones, RFC 3173 §3.3), one above 61439, a short notify:
    // each request still gets its Child SA, answered without IPComp.
    let offers: [&[u8]; 4] = [
        &ipcomp_data(0x1234, 3),
        &ipcomp_data(0x0002, 2),
        &ipcomp_data(0xf123, 2),
        &[0x12, 0x34],
    ];
    for (k, data) in offers.into_iter().enumerate() {
        let notify = NotifyRepr::new(NotifyType::IPCOMP_SUPPORTED, data);
        let m = child_request(&mut p, 0x0e00_0000 + k as u32, &[notify]);
        let out = send(&mut p, &m);
        assert_eq!(out.len(), 1);
        let (notifies, has_sa) = answer(&p, &out[0]);
        assert!(has_sa, "offer {data:02x?}: the child is created");
        assert!(
            !notifies.iter().any(|(n, _)| *n == NotifyType::IPCOMP_SUPPORTED),
            "offer {data:02x?}: no IPComp in the answer: {notifies:?}"
        );
        let events = drain_events(&mut p.r);
        let up: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::ChildSaEstablished(c) => Some(c.ipcomp),
                _ => None,
            })
            .collect();
        assert_eq!(up, [None], "offer {data:02x?}");
    }
    // DEFLATE with a negotiable CPI, after an LZS offer in the same
    // request: taken, and answered with our own CPI.
    let lzs = ipcomp_data(0x2345, 3);
    let deflate = ipcomp_data(0x1234, 2);
    let m = child_request(
        &mut p,
        0x0e00_0010,
        &[
            NotifyRepr::new(NotifyType::IPCOMP_SUPPORTED, &lzs),
            NotifyRepr::new(NotifyType::IPCOMP_SUPPORTED, &deflate),
        ],
    );
    let out = send(&mut p, &m);
    let (notifies, has_sa) = answer(&p, &out[0]);
    assert!(has_sa);
    assert!(notifies.iter().any(|(n, _)| *n == NotifyType::IPCOMP_SUPPORTED));
    let cpis: Vec<_> = drain_events(&mut p.r)
        .iter()
        .filter_map(|e| match e {
            Event::ChildSaEstablished(c) => c.ipcomp.map(|i| i.outbound),
            _ => None,
        })
        .collect();
    assert_eq!(cpis, [0x1234]);
}
