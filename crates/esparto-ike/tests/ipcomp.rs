//! IPComp negotiation (RFC 7296 §2.22) between two endpoints: agreed in
//! IKE_AUTH and CREATE_CHILD_SA when both want it, with each side's CPI
//! crossing; a Child SA without it, never a failure, when one side does not.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::ChildSaEstablished;
use esparto_ike::config::ConnectionConfig;
use esparto_wire::ike::ExchangeType;
use esparto_wire::ipcomp::CpiClass;
use sim::{Setup, assert_pair};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

fn with_ipcomp(c: &mut ConnectionConfig) {
    for ch in &mut c.children {
        ch.ipcomp = true;
    }
}

fn assert_ipcomp_pair(a: &ChildSaEstablished, b: &ChildSaEstablished) {
    let (x, y) = (a.ipcomp.unwrap(), b.ipcomp.unwrap());
    assert_eq!(x.inbound, y.outbound, "A's CPI is what B sends");
    assert_eq!(x.outbound, y.inbound, "B's CPI is what A sends");
    for c in [x.inbound, x.outbound] {
        assert_eq!(CpiClass::of(c), CpiClass::Negotiated, "{c}");
    }
}

#[test]
fn both_sides_agree_in_ike_auth_and_create_child_sa() {
    let s = Setup { extra_child: true, tweak_i: with_ipcomp, tweak_r: with_ipcomp, ..Setup::default() };
    let mut net = s.build(41);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    net.peers[I].ep.acquire(net.now, "gw", "host", Some(1)).unwrap();
    net.run_for(Duration::from_secs(2));
    let (a, b) = (net.children(I), net.children(R));
    assert_eq!((a.len(), b.len()), (2, 2));
    for k in 0..2 {
        assert_pair(a[k], b[k]);
        assert_ipcomp_pair(a[k], b[k]);
    }
    assert_eq!(
        net.peers[I].sent.iter().filter(|p| p.is(ExchangeType::CREATE_CHILD_SA, false)).count(),
        1,
        "the second child came from CREATE_CHILD_SA"
    );
}

#[test]
fn a_side_without_ipcomp_gets_a_child_without_it() {
    for (ti, tr) in [(with_ipcomp as fn(&mut ConnectionConfig), (|_| {}) as fn(&mut ConnectionConfig)), (|_| {}, with_ipcomp)] {
        let s = Setup { extra_child: true, tweak_i: ti, tweak_r: tr, ..Setup::default() };
        let mut net = s.build(42);
        net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
        net.run_for(Duration::from_secs(2));
        net.peers[I].ep.acquire(net.now, "gw", "host", Some(1)).unwrap();
        net.run_for(Duration::from_secs(2));
        let (a, b) = (net.children(I), net.children(R));
        assert_eq!((a.len(), b.len()), (2, 2));
        for k in 0..2 {
            assert_pair(a[k], b[k]);
            assert_eq!((a[k].ipcomp, b[k].ipcomp), (None, None));
        }
    }
}
