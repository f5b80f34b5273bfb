//! A hub with many spokes: every spoke finds its own connection and key
//! (the indexes of `connections.rs`, `psk.rs` and `sa_index.rs` at work
//! through the endpoint), INITIAL_CONTACT from a restarted spoke deletes
//! only that spoke's old IKE SA, and the SA index empties with the SAs.

use super::*;
use crate::event::Reason;

const SPOKES: usize = 12;

fn spoke_id(i: usize) -> Identity {
    Identity::parse(&format!("@spoke{i}.example")).unwrap()
}

/// The hub (responder, `initiator == false`) or the spokes' side: one
/// connection and one PSK per spoke, all between the same two addresses,
/// as `esparto-testbed bench setup --connections` has them. The hub's keys are
/// loaded in reverse and after a key listing only the hub, so a spoke
/// finds its key by the pair, not by position.
fn side(seed: u64, initiator: bool) -> Endpoint {
    let (local, remote) = if initiator { (MOON, SUN) } else { (SUN, MOON) };
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(seed)),
        Box::new(RandomSpiAllocator::new()),
    );
    let hub = Identity::parse("@hub.example").unwrap();
    for i in 0..SPOKES {
        let (me, peer) = if initiator {
            (spoke_id(i), hub.clone())
        } else {
            (hub.clone(), spoke_id(i))
        };
        let mut c =
            ConnectionConfig::new(&format!("spoke{i}"), "aes256gcm16-prfsha256-x25519").unwrap();
        c.local_addrs = vec![local.parse().unwrap()];
        c.remote_addrs = vec![remote.parse().unwrap()];
        c.local.id = Some(me);
        c.remote.id = Some(peer);
        let lan = format!("10.128.{i}.0/24");
        let (l, r) = if initiator {
            (lan.as_str(), "10.0.0.0/16")
        } else {
            ("10.0.0.0/16", lan.as_str())
        };
        c.children
            .push(ChildConfig::new("net", l, r, "aes256gcm16").unwrap());
        ep.add_connection(c).unwrap();
    }
    if !initiator {
        ep.secrets_mut()
            .add_psk(std::slice::from_ref(&hub), b"the hub's fallback key");
    }
    let order: Vec<usize> = if initiator {
        (0..SPOKES).collect()
    } else {
        (0..SPOKES).rev().collect()
    };
    for i in order {
        ep.secrets_mut()
            .add_psk(&[spoke_id(i), hub.clone()], format!("key {i}").as_bytes());
    }
    ep
}

fn pair_of(i: Endpoint, r: Endpoint) -> Pair {
    Pair {
        i,
        r,
        now: Instant::now(),
        ike: IkeSaId(0),
    }
}

/// IKE SAs established (with their connection) and deleted.
type Ups = Vec<(IkeSaId, String)>;
type Downs = Vec<(IkeSaId, Reason)>;

/// Events of `ep`: established connections by IKE SA, and deleted IKE SAs.
fn drain(ep: &mut Endpoint) -> (Ups, Downs) {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    while let Some(e) = ep.poll_event() {
        match e {
            Event::IkeSaEstablished {
                ike_sa, connection, ..
            } => up.push((ike_sa, connection.to_string())),
            Event::IkeSaDeleted { ike_sa, reason, .. } => down.push((ike_sa, reason)),
            Event::AuthFailed { reason, .. } => panic!("authentication failed: {reason:?}"),
            _ => {}
        }
    }
    (up, down)
}

#[test]
fn every_spoke_gets_its_connection_and_key() {
    let mut p = pair_of(side(1, true), side(2, false));
    // One at a time: the hub's per-source half-open limits (§2.6) are
    // for strangers, and every spoke here comes from one address.
    for i in 0..SPOKES {
        p.i.initiate(p.now, &format!("spoke{i}"), None).unwrap();
        pump(&mut p);
    }
    let (up_i, _) = drain(&mut p.i);
    let (mut up_r, down_r) = drain(&mut p.r);
    assert_eq!(up_i.len(), SPOKES);
    assert!(down_r.is_empty());
    up_r.sort_by_key(|(_, c)| c[5..].parse::<usize>().unwrap());
    let names: Vec<String> = up_r.iter().map(|(_, c)| c.clone()).collect();
    let want: Vec<String> = (0..SPOKES).map(|i| format!("spoke{i}")).collect();
    assert_eq!(names, want, "the hub chose each spoke's own connection");
    // Filed: every SA under its connection and under its identity pair.
    assert_eq!(p.r.sa_index.len(), (SPOKES, SPOKES));
    assert_eq!(p.i.sa_index.len(), (SPOKES, SPOKES));
    // All IKE_SA_INIT state gone once established.
    assert!(p.r.sas.values().all(|sa| sa.handshake.is_none()));
    assert!(p.i.sas.values().all(|sa| sa.handshake.is_none()));
    assert_eq!(p.r.half_open_count(), 0);

    // Tear everything down: the index empties with the SAs.
    let ids: Vec<IkeSaId> = up_i.iter().map(|(id, _)| *id).collect();
    for id in ids {
        p.i.terminate(p.now, id).unwrap();
    }
    pump(&mut p);
    assert_eq!((p.i.ike_sa_count(), p.r.ike_sa_count()), (0, 0));
    assert_eq!(p.i.sa_index.len(), (0, 0));
    assert_eq!(p.r.sa_index.len(), (0, 0));
}

#[test]
fn a_restarted_spoke_replaces_only_its_own_sa() {
    let mut p = pair_of(side(3, true), side(4, false));
    // One at a time: the hub's per-source half-open limits (§2.6) are
    // for strangers, and every spoke here comes from one address.
    for i in 0..SPOKES {
        p.i.initiate(p.now, &format!("spoke{i}"), None).unwrap();
        pump(&mut p);
    }
    drain(&mut p.i);
    let (up_r, _) = drain(&mut p.r);
    let old = up_r
        .iter()
        .find(|(_, c)| c == "spoke5")
        .map(|(id, _)| *id)
        .unwrap();
    // Spoke 5 restarts: a fresh endpoint, whose first IKE SA for the
    // connection carries INITIAL_CONTACT (§2.4).
    let restarted = side(5, true);
    let mut q = pair_of(restarted, p.r);
    q.i.initiate(q.now, "spoke5", None).unwrap();
    pump(&mut q);
    let (up, down) = drain(&mut q.r);
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].1, "spoke5");
    assert_eq!(
        down,
        [(old, Reason::PeerRestarted)],
        "only spoke 5's old SA"
    );
    assert_eq!(q.r.ike_sa_count(), SPOKES);
    assert_eq!(q.r.sa_index.len(), (SPOKES, SPOKES));
}

/// Our address leaves the host: the IKE SAs on it end without a Delete,
/// counted as `local_address_gone`, and a connection with
/// `dpd_action = restart` initiates again after the re-initiation delay;
/// SAs on other addresses are left alone.
#[test]
fn a_local_address_that_leaves_ends_its_sas_and_restart_initiates_again() {
    let i = endpoint_with(5, MOON, SUN, "@moon", "@sun", |c| c.dpd_action = crate::lifetime::DpdAction::Restart);
    let mut p = pair_of(i, endpoint(6, SUN, MOON, "@sun", "@moon"));
    p.i.initiate(p.now, "gw", None).unwrap();
    pump(&mut p);
    drain(&mut p.i);
    assert_eq!(p.i.local_address_gone(p.now, "10.0.0.99".parse().unwrap()), 0, "not ours");
    assert_eq!(p.i.local_address_gone(p.now, MOON.parse().unwrap()), 1);
    let (_, down) = drain(&mut p.i);
    assert_eq!(down.iter().map(|(_, r)| *r).collect::<Vec<_>>(), [Reason::LocalAddressGone]);
    assert!(p.i.poll_transmit().is_none(), "no Delete from a gone address");
    assert_eq!(p.i.ike_sa_count(), 0);
    p.now += crate::lifetime::REINITIATE_DELAY + core::time::Duration::from_millis(10);
    p.i.handle_timeout(p.now);
    let t = p.i.poll_transmit().expect("initiated again");
    let h = esparto_wire::ike::Message::parse(&t.data).unwrap().header;
    assert_eq!(h.exchange, ExchangeType::IKE_SA_INIT);
}
