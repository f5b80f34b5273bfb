//! A peer that restarts (a fresh endpoint with the same configuration,
//! over the simulated network) and a peer that leaves: INVALID_IKE_SPI
//! both ways (RFC 7296 §2.21.4), a forged one ignored, the INVALID_SPI
//! hint (§1.5) leading to a liveness check that fails fast, re-initiation
//! by `dpd_action` / `close_action` with back-off, and `shutdown`.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::lifetime::{REINITIATE_DELAY, REINITIATE_MAX_DELAY, REINITIATE_STABLE};
use esparto_ike::{CloseAction, DpdAction, Event, InitiateError, Reason, RetransmitConfig};
use esparto_wire::ike::{
    ExchangeType, HeaderRepr, Message, NotifyRepr, NotifyType, PayloadRepr, PayloadType,
    emit_message,
};
use sim::{MOON, Packet, SUN, Setup, assert_pair};
use std::net::SocketAddr;
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// The initiator restarts its connection when the peer is found dead
/// and when the peer deletes it; the responder knows the initiator's
/// address (a site-to-site pair).
fn site() -> Setup {
    Setup {
        tweak_i: |c| {
            c.dpd_action = DpdAction::Restart;
            c.close_action = CloseAction::Start;
        },
        tweak_r: |c| c.remote_addrs = vec![MOON.parse().unwrap()],
        ..Setup::default()
    }
}

/// Replace peer `i` by a fresh endpoint with the same configuration, as
/// after a restart (the network keeps what it has in flight).
fn restart(net: &mut sim::Net, s: &Setup, i: usize, seed: u64) {
    let fresh = s.build(seed).peers.remove(i);
    net.peers[i].ep = fresh.ep;
    net.peers[i].live = fresh.live;
    net.peers[i].events.clear();
    net.peers[i].sent.clear();
}

fn ike_deleted(net: &sim::Net, i: usize, reason: Reason) -> usize {
    net.count(
        i,
        |e| matches!(e, Event::IkeSaDeleted { reason: r, .. } if *r == reason),
    )
}

/// The notify types of an unprotected message.
fn notifies(p: &Packet) -> Vec<NotifyType> {
    let d = p.data.strip_prefix(&[0, 0, 0, 0]).unwrap_or(&p.data);
    let m = Message::parse(d).unwrap();
    assert!(m.sk.is_none(), "unprotected");
    m.payloads
        .iter()
        .filter_map(|p| match p {
            PayloadRepr::Notify(n) => Some(n.kind),
            _ => None,
        })
        .collect()
}

#[test]
fn a_restarted_responder_answers_invalid_ike_spi_and_the_initiator_starts_over() {
    let s = site();
    let mut net = s.build(100);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let old = net.current_ike(I).unwrap();
    restart(&mut net, &s, R, 101);

    // Our next request (a liveness check here) reaches a peer that knows
    // nothing: it answers with INVALID_IKE_SPI, unprotected, with the
    // request's SPIs and message ID, to where the request came from.
    net.peers[I].ep.liveness_check(net.now, old).unwrap();
    net.run_for(Duration::from_millis(100));
    let req = net.peers[I]
        .sent
        .iter()
        .rfind(|p| p.is(ExchangeType::INFORMATIONAL, false))
        .unwrap()
        .clone();
    let answers: Vec<&Packet> = net.peers[R].sent.iter().collect();
    assert_eq!(answers.len(), 1, "one answer: {answers:?}");
    let (q, a) = (req.header().unwrap(), answers[0].header().unwrap());
    assert_eq!(
        (a.spi_i, a.spi_r, a.message_id),
        (q.spi_i, q.spi_r, q.message_id)
    );
    assert_eq!(a.exchange, ExchangeType::INFORMATIONAL);
    assert!(a.response && !a.initiator && q.initiator);
    assert_eq!(answers[0].to, req.from);
    assert_eq!(notifies(answers[0]), [NotifyType::INVALID_IKE_SPI]);
    assert_eq!(net.peers[R].ep.stats().invalid_ike_spi_sent, 1);

    // The initiator takes it as the end of the IKE SA, at once.
    assert_eq!(ike_deleted(&net, I, Reason::InvalidIkeSpi), 1);
    assert_eq!(
        net.count(I, |e| matches!(
            e,
            Event::ChildSaDeleted {
                reason: Reason::InvalidIkeSpi,
                ..
            }
        )),
        1
    );
    assert_eq!(net.peers[I].ep.stats().invalid_ike_spi_received, 1);
    assert!(net.peers[I].ep.reinitiation_due("gw").is_some());

    // dpd_action = restart: a new IKE SA within REINITIATE_DELAY, with
    // INITIAL_CONTACT (the only one with the peer), and matching keys.
    net.run_for(REINITIATE_DELAY + Duration::from_millis(200));
    let new = net.current_ike(I).unwrap();
    assert_ne!(new, old);
    assert_eq!(net.peers[I].ep.stats().reinitiations, 1);
    assert_eq!(net.live_children(I).len(), 1);
    assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn a_restarted_initiator_answers_invalid_ike_spi_and_the_responder_clears() {
    let s = site();
    let mut net = s.build(110);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let r_old = net.current_ike(R).unwrap();
    restart(&mut net, &s, I, 111);

    net.peers[R].ep.liveness_check(net.now, r_old).unwrap();
    net.run_for(Duration::from_millis(100));
    let a = net.peers[I].sent[0].header().unwrap();
    assert!(a.response && a.initiator, "the original initiator's flag");
    assert_eq!(
        notifies(&net.peers[I].sent[0]),
        [NotifyType::INVALID_IKE_SPI]
    );
    assert_eq!(ike_deleted(&net, R, Reason::InvalidIkeSpi), 1);
    assert_eq!(net.peers[R].ep.ike_sa_count(), 0);
    // The responder's dpd_action is clear: nothing follows.
    net.run_for(Duration::from_secs(10));
    assert_eq!(net.peers[R].ep.stats().reinitiations, 0);
    assert!(
        net.peers[R]
            .sent
            .iter()
            .all(|p| !p.is(ExchangeType::IKE_SA_INIT, false))
    );
    net.assert_no_leak(R);
}

/// An unprotected INVALID_IKE_SPI response from `from` to `to`.
fn forged(net: &sim::Net, spi_i: u64, spi_r: u64, mid: u32, response: bool) -> Packet {
    let h = HeaderRepr {
        spi_i,
        spi_r,
        next_payload: PayloadType::NONE,
        exchange: ExchangeType::INFORMATIONAL,
        initiator: false,
        response,
        message_id: mid,
        length: 0,
    };
    let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_IKE_SPI, &[]));
    let mut data = Vec::new();
    emit_message(&h, &[n], &mut data).unwrap();
    Packet {
        at: net.now,
        from: addr(SUN, 500),
        to: addr(MOON, 500),
        data,
    }
}

#[test]
fn an_invalid_ike_spi_that_answers_no_request_of_ours_is_ignored() {
    let s = site();
    let mut net = s.build(120);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let spi_r = net.peers[I]
        .sent
        .iter()
        .rfind(|p| p.is(ExchangeType::IKE_AUTH, false))
        .unwrap()
        .header()
        .unwrap()
        .spi_r;
    let before = net.peers[I].sent.len();

    // Right SPIs, but no request is outstanding (an off-path forger who
    // guessed, or a stale answer).
    for mid in [0, 1, 2, 7] {
        let p = forged(&net, id.0, spi_r, mid, true);
        net.inject(p);
    }
    // Wrong responder SPI, right message ID of a request in flight.
    net.drop_if = Some(Box::new(|p| p.is(ExchangeType::INFORMATIONAL, false)));
    net.peers[I].ep.liveness_check(net.now, id).unwrap();
    net.run_for(Duration::from_millis(10));
    let mid = net.peers[I]
        .sent
        .last()
        .unwrap()
        .header()
        .unwrap()
        .message_id;
    let p = forged(&net, id.0, spi_r ^ 1, mid, true);
    net.inject(p);
    // A response with unknown SPIs is never answered, and neither is an
    // unprotected "request" carrying INVALID_IKE_SPI.
    let p = forged(&net, 0x1234, 0x5678, 0, true);
    net.inject(p);
    let p = forged(&net, id.0, spi_r, mid + 1, false);
    net.inject(p);

    assert_eq!(net.current_ike(I), Some(id), "the IKE SA lives");
    assert_eq!(ike_deleted(&net, I, Reason::InvalidIkeSpi), 0);
    let st = net.peers[I].ep.stats();
    assert_eq!(st.invalid_ike_spi_received, 0);
    assert_eq!(st.invalid_ike_spi_ignored, 4, "{st:?}");
    assert_eq!(st.invalid_ike_spi_sent, 0);
    assert_eq!(
        net.peers[I].sent.len(),
        before + 1,
        "nothing sent but the liveness check"
    );

    // The genuine answer to that request still ends the SA.
    let p = forged(&net, id.0, spi_r, mid, true);
    net.inject(p);
    assert_eq!(ike_deleted(&net, I, Reason::InvalidIkeSpi), 1);
}

#[test]
fn invalid_ike_spi_answers_are_rate_limited_per_source() {
    let s = site();
    let mut net = s.build(130);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    // Twenty encrypted requests for IKE SAs the responder never had.
    let req = net.peers[I]
        .sent
        .iter()
        .rfind(|p| p.is(ExchangeType::IKE_AUTH, false))
        .unwrap()
        .clone();
    restart(&mut net, &s, R, 131);
    for k in 0..20u64 {
        let mut p = req.clone();
        p.data[..8].copy_from_slice(&(0x1000 + k).to_be_bytes());
        let wall_clock = net.wall_clock();
        net.peers[R]
            .ep
            .handle_datagram(net.now, wall_clock, p.to, p.from, &p.data);
    }
    let st = net.peers[R].ep.stats();
    assert_eq!(
        st.invalid_ike_spi_sent,
        u64::from(esparto_ike::lifetime::INVALID_IKE_SPI_PER_SOURCE)
    );
    assert_eq!(st.rate_limited, 20 - st.invalid_ike_spi_sent);
    // A second later the source gets answers again.
    net.run_for(Duration::from_secs(1));
    let wall_clock = net.wall_clock();
    net.peers[R]
        .ep
        .handle_datagram(net.now, wall_clock, req.to, req.from, &req.data);
    assert_eq!(
        net.peers[R].ep.stats().invalid_ike_spi_sent,
        st.invalid_ike_spi_sent + 1
    );
}

#[test]
fn an_invalid_spi_hint_from_a_restarted_peer_leads_to_a_liveness_check_that_fails_fast() {
    let s = site();
    let mut net = s.build(140);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let old = net.current_ike(I).unwrap();
    // The Child SA I sends on: its outbound SPI is the peer's inbound.
    let out_spi = net.live_children(I)[0].outbound_spi;
    restart(&mut net, &s, R, 141);

    // A peer with an IKE SA to us, or an address not configured, gets no
    // hint; ESP from the configured peer does.
    net.peers[R]
        .ep
        .handle_unknown_esp(net.now, addr(SUN, 4500), addr("10.0.0.9", 4500), out_spi);
    net.run_for(Duration::from_millis(1));
    assert!(net.peers[R].sent.is_empty(), "not a configured peer");
    let t0 = net.now;
    for _ in 0..5 {
        net.peers[R]
            .ep
            .handle_unknown_esp(net.now, addr(SUN, 4500), addr(MOON, 4500), out_spi);
    }
    assert_eq!(
        net.peers[R].ep.stats().invalid_spi_hints_sent,
        1,
        "rate-limited"
    );
    net.run_for(Duration::from_millis(100));
    let hint = &net.peers[R].sent[0];
    assert_eq!((hint.from, hint.to), (addr(SUN, 4500), addr(MOON, 4500)));
    let h = hint.header().unwrap();
    assert!(h.initiator && !h.response && h.exchange == ExchangeType::INFORMATIONAL);
    assert_eq!(notifies(hint), [NotifyType::INVALID_SPI]);

    // The initiator checked at once; the restarted peer answered
    // INVALID_IKE_SPI; the IKE SA is gone within a few round trips
    // (10 ms each way here), not after DPD's minutes.
    assert_eq!(net.peers[I].ep.stats().invalid_spi_hints_received, 1);
    let gone = net.peers[I]
        .events
        .iter()
        .any(|e| matches!(e, Event::IkeSaDeleted { ike_sa, reason: Reason::InvalidIkeSpi, .. } if *ike_sa == old));
    assert!(gone, "{:?}", net.peers[I].events);
    assert!(net.now - t0 < Duration::from_millis(200));

    // Restarted, and up again with the peer after the back-off delay.
    net.run_for(REINITIATE_DELAY + Duration::from_millis(200));
    assert!(net.current_ike(I).is_some_and(|n| n != old));
    assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
    // With an IKE SA in place, ESP for an unknown SPI gets no hint.
    let sent = net.peers[R].ep.stats().invalid_spi_hints_sent;
    net.run_for(Duration::from_secs(2));
    net.peers[R]
        .ep
        .handle_unknown_esp(net.now, addr(SUN, 4500), addr(MOON, 4500), 0xdead_beef);
    assert_eq!(net.peers[R].ep.stats().invalid_spi_hints_sent, sent);
}

#[test]
fn a_hint_for_an_spi_we_do_not_send_on_changes_nothing() {
    let s = site();
    let mut net = s.build(150);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let before = net.peers[I].sent.len();
    // A forged hint (any IKE SPIs, an SPI of nobody's) from the peer's
    // address: no liveness check, no state change.
    let h = HeaderRepr {
        spi_i: 77,
        spi_r: 0,
        next_payload: PayloadType::NONE,
        exchange: ExchangeType::INFORMATIONAL,
        initiator: true,
        response: false,
        message_id: 0,
        length: 0,
    };
    let spi = 0x0bad_cafe_u32.to_be_bytes();
    let n = PayloadRepr::Notify(NotifyRepr::new(NotifyType::INVALID_SPI, &spi));
    let mut data = vec![0, 0, 0, 0];
    let mut body = Vec::new();
    emit_message(&h, &[n], &mut body).unwrap();
    data.extend_from_slice(&body);
    let p = Packet {
        at: net.now,
        from: addr(SUN, 4500),
        to: addr(MOON, 4500),
        data,
    };
    net.inject(p);
    net.run_for(Duration::from_secs(1));
    assert_eq!(
        net.peers[I].sent.len(),
        before,
        "nothing sent, nothing answered"
    );
    assert_eq!(net.peers[I].ep.stats().invalid_spi_hints_received, 0);
    assert_eq!(net.current_ike(I), Some(id));
}

#[test]
fn reinitiation_backs_off_while_the_peer_stays_away_and_resets_once_stable() {
    let s = Setup {
        // One try per IKE_SA_INIT, given up after a second: the attempts
        // are the re-initiations themselves.
        cfg_i: esparto_ike::EndpointConfig {
            retransmit: RetransmitConfig {
                timeout: Duration::from_secs(1),
                tries: 0,
                ..RetransmitConfig::default()
            },
            ..esparto_ike::EndpointConfig::default()
        },
        ..site()
    };
    let mut net = s.build(160);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    net.loss = 1.0;
    net.peers[I].ep.liveness_check(net.now, id).unwrap();
    let dead_at = net.elapsed().as_secs_f64() + 1.0;
    net.run_for(Duration::from_secs(40 * 60));
    assert_eq!(
        ike_deleted(&net, I, Reason::Timeout) as u64,
        net.peers[I].ep.stats().reinitiations + 1
    );
    // Each attempt starts a delay after the previous one died (a second
    // after it was sent): 1, 2, 4, … s, minus up to a tenth, capped.
    let t: Vec<f64> = net
        .request_times(I, ExchangeType::IKE_SA_INIT)
        .into_iter()
        .filter(|x| *x > dead_at - 0.5)
        .collect();
    assert!(t.len() >= 10, "{t:?}");
    let mut prev_end = dead_at;
    for (k, x) in t.iter().enumerate() {
        let want = (REINITIATE_DELAY.as_secs_f64() * 2f64.powi(k as i32))
            .min(REINITIATE_MAX_DELAY.as_secs_f64());
        let waited = x - prev_end;
        assert!(
            waited <= want + 1e-6 && waited >= 0.9 * want - 1e-6,
            "attempt {k}: waited {waited} s, want {want} s minus ≤10 %: {t:?}"
        );
        prev_end = x + 1.0;
    }
    assert!(
        t.windows(2)
            .any(|w| w[1] - w[0] > 0.9 * REINITIATE_MAX_DELAY.as_secs_f64()),
        "the cap is reached: {t:?}"
    );

    // The peer comes back: the next attempt succeeds.
    net.loss = 0.0;
    net.run_for(REINITIATE_MAX_DELAY + Duration::from_secs(2));
    let up = net.current_ike(I).unwrap();
    assert_pair(net.live_children(I)[0], net.live_children(R)[0]);
    // Stable for a while, then dead again: back to the first delay.
    net.run_for(REINITIATE_STABLE);
    net.loss = 1.0;
    net.peers[I].ep.liveness_check(net.now, up).unwrap();
    net.run_for(Duration::from_millis(1100));
    let due = net.peers[I].ep.reinitiation_due("gw").unwrap();
    assert!(
        due - net.now <= REINITIATE_DELAY,
        "reset: {:?}",
        due - net.now
    );
}

#[test]
fn a_peer_delete_restarts_only_with_close_action_start() {
    for (close, expect) in [(CloseAction::Start, true), (CloseAction::None, false)] {
        let mut s = site();
        if close == CloseAction::None {
            s.tweak_i = |c| c.dpd_action = DpdAction::Restart;
        }
        let mut net = s.build(170);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(2));
        let old = net.current_ike(R).unwrap();
        net.peers[R].ep.terminate(net.now, old).unwrap();
        net.run_for(Duration::from_millis(100));
        assert_eq!(ike_deleted(&net, I, Reason::DeletedByPeer), 1);
        net.run_for(Duration::from_secs(3));
        assert_eq!(
            net.current_ike(I).is_some(),
            expect,
            "close_action {close:?}: {:?}",
            net.peers[I].events
        );
        assert_eq!(net.peers[I].ep.stats().reinitiations, u64::from(expect));
    }
}

#[test]
fn the_operator_taking_the_connection_down_stops_reinitiation() {
    let s = site();
    let mut net = s.build(180);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let r_id = net.current_ike(R).unwrap();
    net.peers[R].ep.terminate(net.now, r_id).unwrap();
    net.run_for(Duration::from_millis(100));
    // `esparto down` while the re-initiation waits: it is cancelled.
    assert!(net.peers[I].ep.reinitiation_due("gw").is_some());
    assert!(net.peers[I].ep.cancel_reinitiation("gw"));
    assert!(!net.peers[I].ep.cancel_reinitiation("gw"), "nothing left");
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    assert_eq!(net.peers[I].ep.stats().reinitiations, 0);

    // Up again, deleted by the peer again, and this time the operator
    // deletes the re-initiated IKE SA while it is still connecting: it is
    // not re-initiated once more.
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let r_id = net.current_ike(R).unwrap();
    net.peers[R].ep.terminate(net.now, r_id).unwrap();
    net.drop_if = Some(Box::new(|p| p.is(ExchangeType::IKE_SA_INIT, true)));
    net.run_for(Duration::from_millis(100));
    // The IKE SA before was up only seconds: the back-off goes on (2 s).
    let due = net.peers[I].ep.reinitiation_due("gw").unwrap();
    assert!(due - net.now > REINITIATE_DELAY, "{:?}", due - net.now);
    net.run_for(due - net.now + Duration::from_millis(10));
    assert_eq!(net.peers[I].ep.stats().reinitiations, 1);
    let connecting = net.peers[I]
        .sent
        .iter()
        .rfind(|p| p.is(ExchangeType::IKE_SA_INIT, false))
        .unwrap()
        .header()
        .unwrap()
        .spi_i;
    net.peers[I]
        .ep
        .terminate(net.now, esparto_ike::IkeSaId(connecting))
        .unwrap();
    net.drop_if = None;
    net.run_for(Duration::from_secs(600));
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    assert_eq!(net.peers[I].ep.stats().reinitiations, 1);
    assert!(net.peers[I].ep.reinitiation_due("gw").is_none());
}

#[test]
fn shutdown_deletes_every_ike_sa_and_refuses_new_ones() {
    let s = Setup {
        extra_child: true,
        ..site()
    };
    let mut net = s.build(190);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.peers[I]
        .ep
        .acquire(net.now, "gw", "host", None)
        .unwrap();
    net.run_for(Duration::from_secs(2));
    // A half-open one too: dropped without a word.
    net.drop_if = Some(Box::new(|p| p.is(ExchangeType::IKE_SA_INIT, true)));
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_millis(50));
    net.drop_if = None;
    assert_eq!(net.peers[I].ep.ike_sa_count(), 2);

    net.peers[I].ep.shutdown(net.now);
    assert!(net.peers[I].ep.is_closing());
    assert_eq!(
        net.peers[I].ep.initiate(net.now, "gw", None),
        Err(InitiateError::Closing)
    );
    net.run_for(Duration::from_millis(100));
    // One Delete, answered; both sides hold nothing, the peer at once.
    let deletes = net.peers[I]
        .sent
        .iter()
        .filter(|p| p.is(ExchangeType::INFORMATIONAL, false))
        .count();
    assert_eq!(deletes, 1);
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    // (The peer's half-open SA from the second IKE_SA_INIT expires on its
    // own timer.)
    assert_eq!(net.current_ike(R), None);
    assert_eq!(net.live_children(R).len(), 0);
    assert_eq!(ike_deleted(&net, R, Reason::DeletedByPeer), 1);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
    // The peer's IKE_SA_INIT is refused while we are closing.
    net.peers[R].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.peers[I].ep.stats().closing_dropped, 1);
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
}

#[test]
fn shutdown_during_an_ike_sa_rekey_deletes_the_new_ike_sa_too() {
    for (seed, ours) in [(200, true), (201, false)] {
        let s = site();
        let mut net = s.build(seed);
        let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(2));
        if ours {
            net.peers[I].ep.rekey_ike(net.now, id).unwrap();
        } else {
            // The peer's rekey request is on its way as we stop.
            let r = net.current_ike(R).unwrap();
            net.peers[R].ep.rekey_ike(net.now, r).unwrap();
            net.run_for(Duration::from_millis(5));
        }
        net.peers[I].ep.shutdown(net.now);
        net.run_for(Duration::from_secs(1));
        assert_eq!(net.peers[I].ep.ike_sa_count(), 0, "rekey by us: {ours}");
        assert_eq!(net.peers[R].ep.ike_sa_count(), 0, "rekey by us: {ours}");
        assert_eq!(net.live_children(R).len(), 0);
        net.assert_no_leak(I);
        net.assert_no_leak(R);
    }
}
