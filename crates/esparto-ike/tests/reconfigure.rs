//! Replacing the connection set of a running endpoint (a configuration
//! reload), over the simulated network: the IKE SA of a kept connection
//! is not touched (no event, no message, same SA), a retired one is
//! deleted with the peer, an added one can be initiated, a changed one is
//! closed and asks for no re-initiation, and a replacement that does not
//! validate changes nothing.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{
    ChildConfig, CloseAction, ConnectionConfig, DpdAction, Event, Identity, IkeSaId, InitiateError,
    NewConnection, Reason,
};
use sim::{MOON, SUN, Setup};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

/// A connection `name` between moon and sun with identities of its own
/// (`@moon-NAME`, `@sun-NAME`) and a child `net` over 10.N.0.0/16.
fn conn(initiator: bool, name: &str, n: u8) -> ConnectionConfig {
    let mut c = ConnectionConfig::new(name, "aes256gcm16-prfsha256-x25519").unwrap();
    let (me, peer) = if initiator {
        ("moon", "sun")
    } else {
        ("sun", "moon")
    };
    c.local_addrs = vec![if initiator { MOON } else { SUN }.parse().unwrap()];
    if initiator {
        c.remote_addrs = vec![SUN.parse().unwrap()];
    }
    c.local.id = Some(Identity::parse(&format!("@{me}-{name}")).unwrap());
    c.remote.id = Some(Identity::parse(&format!("@{peer}-{name}")).unwrap());
    let (l, r) = if initiator {
        (format!("10.{n}.1.0/24"), format!("10.{n}.2.0/24"))
    } else {
        (format!("10.{n}.2.0/24"), format!("10.{n}.1.0/24"))
    };
    c.children
        .push(ChildConfig::new("net", &l, &r, "aes256gcm16").unwrap());
    c
}

fn ids(name: &str) -> [Identity; 2] {
    [
        Identity::parse(&format!("@moon-{name}")).unwrap(),
        Identity::parse(&format!("@sun-{name}")).unwrap(),
    ]
}

/// The IKE SA peer `i` established for `connection`.
fn ike_of(net: &sim::Net, i: usize, connection: &str) -> Option<IkeSaId> {
    net.peers[i].events.iter().rev().find_map(|e| match e {
        Event::IkeSaEstablished {
            ike_sa,
            connection: c,
            ..
        } if &**c == connection => Some(*ike_sa),
        _ => None,
    })
}

/// Events of peer `i` since `from` that name IKE SA `id`.
fn events_of(net: &sim::Net, i: usize, from: usize, id: IkeSaId) -> Vec<&Event> {
    net.peers[i].events[from..]
        .iter()
        .filter(|e| match e {
            Event::IkeSaDeleted { ike_sa, .. }
            | Event::ChildSaDeleted { ike_sa, .. }
            | Event::IkeSaEstablished { ike_sa, .. }
            | Event::ChildSaFailed { ike_sa, .. } => *ike_sa == id,
            Event::ChildSaEstablished(c) => c.ike_sa == id,
            Event::IkeSaRekeyed { old, .. } => *old == id,
            _ => false,
        })
        .collect()
}

#[test]
fn kept_connections_keep_their_sas_and_retired_ones_are_deleted_at_the_peer() {
    let mut net = Setup::default().build(7);
    for name in ["two", "three"] {
        let [m, s] = ids(name);
        net.peers[I]
            .ep
            .add_connection(conn(true, name, if name == "two" { 2 } else { 3 }))
            .unwrap();
        net.peers[I]
            .ep
            .secrets_mut()
            .add_psk(&[m.clone(), s.clone()], b"a secret of their own");
        net.peers[R]
            .ep
            .add_connection(conn(false, name, if name == "two" { 2 } else { 3 }))
            .unwrap();
        net.peers[R]
            .ep
            .secrets_mut()
            .add_psk(&[m, s], b"a secret of their own");
    }
    let now = net.now;
    net.peers[I].ep.initiate(now, "gw", None).unwrap();
    net.peers[I].ep.initiate(now, "two", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let (gw_i, two_i) = (
        ike_of(&net, I, "gw").unwrap(),
        ike_of(&net, I, "two").unwrap(),
    );
    let (gw_r, two_r) = (
        ike_of(&net, R, "gw").unwrap(),
        ike_of(&net, R, "two").unwrap(),
    );
    assert_eq!(net.live_children(I).len(), 2);
    let (seen_i, seen_r, sent) = (
        net.peers[I].events.len(),
        net.peers[R].events.len(),
        net.delivered.len(),
    );

    // The initiator's new file: gw as it was, two gone, three new.
    let now = net.now;
    let retired = net.peers[I]
        .ep
        .replace_connections(
            now,
            vec![
                NewConnection::Keep("gw".into()),
                NewConnection::Load(Box::new(conn(true, "three", 3))),
            ],
        )
        .unwrap();
    assert_eq!(retired, [two_i]);
    assert_eq!(
        net.peers[I].ep.initiate(now, "two", None),
        Err(InitiateError::UnknownConnection("two".into()))
    );
    net.peers[I].ep.initiate(now, "three", None).unwrap();
    net.run_for(Duration::from_secs(2));

    // two: deleted with the peer (one INFORMATIONAL each way).
    assert!(
        net.peers[R].events[seen_r..].iter().any(|e| matches!(
            e,
            Event::IkeSaDeleted { ike_sa, reason: Reason::DeletedByPeer, .. } if *ike_sa == two_r
        )),
        "the peer dropped two's IKE SA"
    );
    assert!(
        events_of(&net, I, seen_i, two_i)
            .iter()
            .any(|e| matches!(e, Event::IkeSaDeleted { .. }))
    );
    // gw: not a single event on either side, the same SAs.
    assert!(
        events_of(&net, I, seen_i, gw_i).is_empty(),
        "{:?}",
        events_of(&net, I, seen_i, gw_i)
    );
    assert!(events_of(&net, R, seen_r, gw_r).is_empty());
    // three: up.
    assert!(ike_of(&net, I, "three").is_some() && ike_of(&net, R, "three").is_some());
    let live: Vec<_> = net
        .live_children(I)
        .iter()
        .map(|c| c.connection.to_string())
        .collect();
    assert_eq!(live.len(), 2, "{live:?}");
    assert!(
        live.contains(&"gw".to_string()) && live.contains(&"three".to_string()),
        "{live:?}"
    );
    assert!(net.delivered.len() > sent);
    net.assert_no_leak(I);
    net.assert_no_leak(R);

    // A replacement that does not check out changes nothing.
    let now = net.now;
    let mut bad = conn(true, "four", 4);
    bad.children.clear();
    for list in [
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Keep("nope".into()),
        ],
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Keep("gw".into()),
        ],
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Keep("three".into()),
            NewConnection::Load(Box::new(bad)),
        ],
    ] {
        assert!(net.peers[I].ep.replace_connections(now, list).is_err());
    }
    let same = vec![
        NewConnection::Keep("gw".into()),
        NewConnection::Keep("three".into()),
    ];
    assert_eq!(net.peers[I].ep.replace_connections(now, same).unwrap(), []);

    // three changed (it would restart on a dead peer): closed, and its
    // death asks for no re-initiation of the old configuration.
    let mut three = conn(true, "three", 3);
    three.dpd_action = DpdAction::Restart;
    three.close_action = CloseAction::Start;
    let three_i = ike_of(&net, I, "three").unwrap();
    let seen_i = net.peers[I].events.len();
    let retired = net.peers[I]
        .ep
        .replace_connections(
            now,
            vec![
                NewConnection::Keep("gw".into()),
                NewConnection::Load(Box::new(three)),
            ],
        )
        .unwrap();
    assert_eq!(retired, [three_i]);
    net.run_for(Duration::from_secs(30));
    assert!(
        events_of(&net, I, seen_i, three_i)
            .iter()
            .any(|e| matches!(e, Event::IkeSaDeleted { .. }))
    );
    assert_eq!(net.peers[I].ep.reinitiation_due("three"), None);
    assert!(
        ike_of(&net, I, "three") == Some(three_i),
        "nothing initiated three again by itself"
    );
    assert!(events_of(&net, I, seen_i, gw_i).is_empty());
    net.assert_no_leak(I);
}

#[test]
fn a_retired_sa_whose_peer_is_gone_is_not_initiated_again() {
    // The peer no longer answers: the Delete of the retired SA times out,
    // which for a connection with dpd_action = restart means initiating
    // it again — not for a configuration that was replaced (the new one
    // is the driver's to start).
    let s = Setup {
        tweak_i: |c| c.dpd_action = DpdAction::Restart,
        ..Setup::default()
    };
    let mut net = s.build(9);
    let now = net.now;
    let gw = net.peers[I].ep.initiate(now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(I).len(), 1);
    net.drop_if = Some(Box::new(|_| true));
    // gw changed: another DPD delay.
    let mut changed = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    changed.local_addrs = vec![MOON.parse().unwrap()];
    changed.remote_addrs = vec![SUN.parse().unwrap()];
    changed.local.id = Some(Identity::parse("@moon.example").unwrap());
    changed.remote.id = Some(Identity::parse("@sun.example").unwrap());
    changed.dpd_action = DpdAction::Restart;
    changed.dpd_delay = Some(Duration::from_secs(10));
    changed
        .children
        .push(ChildConfig::new("net", "10.1.0.0/16", "10.2.0.0/16", "aes256gcm16").unwrap());
    let now = net.now;
    let retired = net.peers[I]
        .ep
        .replace_connections(now, vec![NewConnection::Load(Box::new(changed))])
        .unwrap();
    assert_eq!(retired, [gw]);
    net.run_for(Duration::from_secs(600));
    assert_eq!(net.peers[I].ep.ike_sa_count(), 0);
    assert_eq!(net.peers[I].ep.stats().reinitiations, 0);
    assert_eq!(
        net.count(I, |e| matches!(e, Event::IkeSaEstablished { .. })),
        1,
        "no second IKE SA"
    );
}

/// A list that keeps every held connection in its order and adds some
/// after them (a VICI client loading one more) extends the index: the
/// kept SAs see nothing, the added connection can be initiated, and a
/// name twice or an invalid addition changes nothing.
#[test]
fn appending_connections_keeps_every_sa_and_checks_the_additions_first() {
    let mut net = Setup::default().build(11);
    let [m, s] = ids("two");
    net.peers[I].ep.secrets_mut().add_psk(&[m.clone(), s.clone()], b"a secret of their own");
    net.peers[R].ep.secrets_mut().add_psk(&[m, s], b"a secret of their own");
    net.peers[R].ep.add_connection(conn(false, "two", 2)).unwrap();
    let now = net.now;
    net.peers[I].ep.initiate(now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let gw_i = ike_of(&net, I, "gw").unwrap();
    let seen_i = net.peers[I].events.len();

    let now = net.now;
    let mut bad = conn(true, "four", 4);
    bad.children.clear();
    for list in [
        // A name twice among the additions, a held name added again, an
        // invalid addition, a kept name that is not held.
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Load(Box::new(conn(true, "two", 2))),
            NewConnection::Load(Box::new(conn(true, "two", 2))),
        ],
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Load(Box::new(conn(true, "gw", 5))),
        ],
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Load(Box::new(conn(true, "two", 2))),
            NewConnection::Load(Box::new(bad)),
        ],
        vec![
            NewConnection::Keep("gw".into()),
            NewConnection::Keep("nope".into()),
        ],
    ] {
        assert!(net.peers[I].ep.replace_connections(now, list).is_err());
        assert_eq!(
            net.peers[I].ep.initiate(now, "two", None),
            Err(InitiateError::UnknownConnection("two".into())),
            "a refused list added nothing"
        );
    }
    let retired = net.peers[I]
        .ep
        .replace_connections(
            now,
            vec![
                NewConnection::Keep("gw".into()),
                NewConnection::Load(Box::new(conn(true, "two", 2))),
            ],
        )
        .unwrap();
    assert_eq!(retired, []);
    net.peers[I].ep.initiate(now, "two", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert!(ike_of(&net, I, "two").is_some() && ike_of(&net, R, "two").is_some());
    assert!(events_of(&net, I, seen_i, gw_i).is_empty(), "gw's SA saw nothing");
    assert_eq!(net.live_children(I).len(), 2);
    net.assert_no_leak(I);
}
