//! Hybrid key exchange (RFC 9370): X25519 in IKE_SA_INIT, ML-KEM in
//! IKE_INTERMEDIATE exchanges (RFC 9242), every secret in the keys and
//! every intermediate message in the AUTH payloads; a required ML-KEM
//! never falls back to the classical group, an optional one does.

use super::*;
use crate::event::Reason;
use crate::proposal::{Proposal, Protocol};

fn hybrid(c: &mut ConnectionConfig) {
    c.proposals = Proposal::parse_list(Protocol::Ike, "aes256gcm16-prfsha384-x25519-ke1_mlkem768").unwrap();
}

fn two_kems(c: &mut ConnectionConfig) {
    c.proposals =
        Proposal::parse_list(Protocol::Ike, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke2_mlkem1024").unwrap();
}

fn optional(c: &mut ConnectionConfig) {
    c.proposals = Proposal::parse_list(Protocol::Ike, "aes256gcm16-prfsha384-x25519-ke1_mlkem768-ke1_none").unwrap();
}

fn classical(c: &mut ConnectionConfig) {
    c.proposals = Proposal::parse_list(Protocol::Ike, "aes256gcm16-prfsha384-x25519").unwrap();
}

/// Runs the initial exchanges between an initiator and a responder made
/// with `ti` / `tr`; returns the pair, the exchange types of the
/// datagrams the initiator sent in order (a fragmented message once per
/// fragment), and the Child SAs each side announced.
fn run(ti: fn(&mut ConnectionConfig), tr: fn(&mut ConnectionConfig)) -> (Pair, Vec<ExchangeType>, usize, usize) {
    let mut p = Pair {
        i: endpoint_with(1, MOON, SUN, "@moon", "@sun", ti),
        r: endpoint_with(2, SUN, MOON, "@sun", "@moon", tr),
        now: Instant::now(),
        ike: IkeSaId(0),
    };
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    let (to_r, _) = pump(&mut p);
    let exchanges = to_r
        .iter()
        .filter_map(|t| esparto_wire::ike::Header::new_checked(&t.data[..]).ok())
        .filter_map(|h| esparto_wire::ike::HeaderRepr::parse(&h).ok())
        .map(|h| h.exchange)
        .collect();
    let count = |ep: &mut Endpoint| std::iter::from_fn(|| ep.poll_event()).filter(|e| matches!(e, Event::ChildSaEstablished(_))).count();
    let (ci, cr) = (count(&mut p.i), count(&mut p.r));
    (p, exchanges, ci, cr)
}

#[test]
fn a_hybrid_ike_sa_runs_ml_kem_in_ike_intermediate() {
    let (p, exchanges, ci, cr) = run(hybrid, hybrid);
    let mut messages = exchanges.clone();
    messages.dedup();
    assert_eq!(
        messages,
        [ExchangeType::IKE_SA_INIT, ExchangeType::IKE_INTERMEDIATE, ExchangeType::IKE_AUTH],
        "one IKE_INTERMEDIATE for ke1"
    );
    // ML-KEM-768's 1,184-octet encapsulation key and the headers exceed
    // the 1,280 fragment size: two fragments.
    assert_eq!(exchanges.iter().filter(|e| **e == ExchangeType::IKE_INTERMEDIATE).count(), 2);
    assert_eq!((ci, cr), (1, 1), "the Child SA is up on both sides");
    assert_eq!(p.i.stats().additional_key_exchanges, 1);
    assert_eq!(p.r.stats().additional_key_exchanges, 1);
    let info = p.i.ike_sa_info(p.ike).unwrap();
    assert!(info.proposal.contains("KE1_ML_KEM_768"), "{}", info.proposal);
}

#[test]
fn two_additional_exchanges_run_in_slot_order_and_the_large_one_is_fragmented() {
    let (p, exchanges, ci, cr) = run(two_kems, two_kems);
    let intermediates = exchanges.iter().filter(|e| **e == ExchangeType::IKE_INTERMEDIATE).count();
    // ML-KEM-1024's encapsulation key (1,568 octets) exceeds the default
    // fragment size: its IKE_INTERMEDIATE goes as two fragments.
    assert!(intermediates >= 3, "{exchanges:?}");
    assert_eq!((ci, cr), (1, 1));
    assert_eq!(p.r.stats().additional_key_exchanges, 2);
    assert!(p.i.stats().fragments_sent > 0);
}

#[test]
fn a_required_ml_kem_never_falls_back_to_the_classical_group() {
    let (mut p, exchanges, ci, cr) = run(hybrid, classical);
    assert_eq!(exchanges, [ExchangeType::IKE_SA_INIT]);
    assert_eq!((ci, cr), (0, 0));
    let _ = &mut p;
    // And the other way round: a responder that requires it refuses a
    // classical initiator.
    let (_, exchanges, ci, cr) = run(classical, hybrid);
    assert_eq!(exchanges, [ExchangeType::IKE_SA_INIT]);
    assert_eq!((ci, cr), (0, 0));
}

#[test]
fn an_optional_ml_kem_is_skipped_with_a_classical_peer() {
    let (p, exchanges, ci, cr) = run(optional, classical);
    assert_eq!(exchanges, [ExchangeType::IKE_SA_INIT, ExchangeType::IKE_AUTH]);
    assert_eq!((ci, cr), (1, 1));
    assert_eq!(p.i.stats().additional_key_exchanges, 0);
    // With a hybrid peer the same proposal runs it.
    let (_, exchanges, ..) = run(optional, hybrid);
    assert!(exchanges.contains(&ExchangeType::IKE_INTERMEDIATE), "{exchanges:?}");
}

#[test]
fn the_hybrid_ike_sa_rekeys_with_the_classical_group() {
    let (mut p, ..) = run(hybrid, hybrid);
    p.i.rekey_ike(p.now, p.ike).unwrap();
    pump(&mut p);
    let rekeyed = std::iter::from_fn(|| p.i.poll_event()).any(|e| matches!(e, Event::IkeSaRekeyed { .. }));
    assert!(rekeyed, "the IKE SA rekey completes");
    let _ = Reason::Rekeyed;
}

/// A hybrid pair after IKE_SA_INIT only: the initiator's own
/// IKE_INTERMEDIATE (message 1) is dropped, so a test can send its own.
fn after_init() -> Pair {
    let mut p = Pair {
        i: endpoint_with(1, MOON, SUN, "@moon", "@sun", hybrid),
        r: endpoint_with(2, SUN, MOON, "@sun", "@moon", hybrid),
        now: Instant::now(),
        ike: IkeSaId(0),
    };
    p.ike = p.i.initiate(p.now, "gw", None).unwrap();
    let init = p.i.poll_transmit().unwrap();
    p.r.handle_datagram(p.now, wall_clock(), init.remote, init.local, &init.data);
    let resp = p.r.poll_transmit().unwrap();
    p.i.handle_datagram(p.now, wall_clock(), resp.remote, resp.local, &resp.data);
    while p.i.poll_transmit().is_some() {}
    p
}

/// The responder answers `inner` in message 1 of `ex` with INVALID_SYNTAX
/// and drops the half-open IKE SA, counting the refusal.
fn refused(ex: ExchangeType, inner: &[PayloadRepr<'_>]) {
    let mut p = after_init();
    let data = request(&mut p, ex, inner, false, -1);
    let out = send(&mut p, &data);
    let answer = out.first().expect("an answer");
    assert!(notifies(&p, answer).iter().any(|(n, _)| *n == NotifyType::INVALID_SYNTAX), "{ex:?}");
    assert_eq!(p.r.ike_sa_count(), 0, "{ex:?}: nothing kept");
    assert_eq!(p.r.stats().intermediate_refused, 1, "{ex:?}");
    assert_eq!(p.r.child_sa_count(), 0);
}

#[test]
fn bad_intermediate_requests_are_refused_with_invalid_syntax() {
    let ek = [7u8; 1184];
    // A KE payload of a method that was not negotiated.
    let other = [0u8; 1568];
    refused(ExchangeType::IKE_INTERMEDIATE, &[PayloadRepr::Ke(KeRepr { group: 37, data: &other })]);
    // An encapsulation key one octet short.
    refused(ExchangeType::IKE_INTERMEDIATE, &[PayloadRepr::Ke(KeRepr { group: 36, data: &ek[1..] })]);
    // No KE payload at all.
    refused(ExchangeType::IKE_INTERMEDIATE, &[]);
    // IKE_AUTH before the additional exchange.
    let idi = esparto_wire::ike::IdRepr { id_type: esparto_wire::ike::IdType::FQDN, data: b"moon" };
    refused(ExchangeType::IKE_AUTH, &[PayloadRepr::IdI(idi)]);
}
