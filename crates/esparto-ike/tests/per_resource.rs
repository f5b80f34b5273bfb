//! RFC 9611 per-resource Child SAs over the simulated network: the
//! fallback SA in IKE_AUTH, sub-SAs eager and on demand, in parallel as the
//! window allows (RFC 7296 §2.3), asymmetric worker counts with
//! TS_MAX_QUEUE past the responder's maximum, a peer without
//! SA_RESOURCE_INFO (strongSwan 5.9), and rekeyed sub-SAs keeping their
//! worker.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{ConnectionConfig, EndpointConfig, Event, InitiateError, PerCpuSas, Reason};
use esparto_wire::ike::{ExchangeType, NotifyType};
use sim::{Setup, assert_pair};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;

fn per_cpu(c: &mut ConnectionConfig, mode: PerCpuSas, max: u16) {
    c.children[0].per_cpu_sas = mode;
    c.children[0].per_cpu_max = max;
}

fn workers(n: u16) -> EndpointConfig {
    EndpointConfig {
        resources: n,
        ..EndpointConfig::default()
    }
}

/// Every Child SA of I has its pair at R.
fn check_pairs(net: &sim::Net) {
    let (a, b) = (net.live_children(I), net.live_children(R));
    assert_eq!(a.len(), b.len());
    for x in &a {
        let y = b.iter().find(|y| y.outbound_spi == x.inbound_spi).unwrap();
        assert_pair(x, y);
    }
}

fn first_requests_at_once(net: &sim::Net, p: usize) -> usize {
    let times: Vec<_> = net.peers[p]
        .sent
        .iter()
        .filter(|x| x.is(ExchangeType::CREATE_CHILD_SA, false))
        .map(|x| x.at)
        .collect();
    times.iter().filter(|t| **t == times[0]).count()
}

#[test]
fn eager_sub_sas_one_per_worker_in_parallel() {
    let s = Setup {
        cfg_i: workers(4),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(1);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let a = net.live_children(I);
    assert_eq!(a.len(), 5, "the fallback and four sub-SAs");
    assert_eq!(
        (a[0].resource, a[0].per_resource),
        (None, false),
        "fallback first"
    );
    let mut res: Vec<u16> = a[1..].iter().map(|c| c.resource.unwrap()).collect();
    res.sort_unstable();
    assert_eq!(res, [0, 1, 2, 3]);
    assert!(a[1..].iter().all(|c| c.per_resource && c.initiator));
    let b = net.live_children(R);
    assert_eq!((b[0].resource, b[0].per_resource), (None, false));
    assert!(
        b[1..]
            .iter()
            .all(|c| c.per_resource && c.resource.is_none())
    );
    // Identical selectors for all five.
    assert!(
        a.iter()
            .all(|c| c.local_ts == a[0].local_ts && c.remote_ts == a[0].remote_ts)
    );
    check_pairs(&net);
    // Window 8 both ways: the four requests left together.
    assert_eq!(first_requests_at_once(&net, I), 4);
    assert_eq!(
        net.count(I, |e| matches!(e, Event::PerResourceUnavailable { .. })),
        0
    );
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn window_one_peer_gets_the_sub_sas_one_after_another() {
    let s = Setup {
        cfg_i: workers(4),
        cfg_r: EndpointConfig {
            window_size: 1,
            ..EndpointConfig::default()
        },
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(2);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(I).len(), 5);
    assert_eq!(
        first_requests_at_once(&net, I),
        1,
        "no SET_WINDOW_SIZE: one at a time"
    );
    check_pairs(&net);
}

#[test]
fn eight_workers_facing_two_get_ts_max_queue_past_the_maximum() {
    // The 2-worker responder accepts up to its maximum (4), then answers
    // TS_MAX_QUEUE; the initiator stops asking and reports it.
    let s = Setup {
        cfg_i: workers(8),
        cfg_r: workers(2),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 4),
        ..Setup::default()
    };
    let mut net = s.build(3);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(I).len(), 5, "fallback + 4");
    assert_eq!(net.live_children(R).len(), 5);
    let refused = net.peers[I]
        .events
        .iter()
        .filter_map(|e| match e {
            Event::PerResourceUnavailable { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(refused, [Reason::PeerError(NotifyType::TS_MAX_QUEUE)]);
    assert_eq!(
        net.count(I, |e| matches!(e, Event::ChildSaFailed { .. })),
        0
    );
    assert!(matches!(
        net.peers[I].ep.acquire(net.now, "gw", "net", Some(7)),
        Err(InitiateError::PerResourceUnavailable(_))
    ));
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.live_children(I).len(), 5, "no more requests");
    let _ = id;
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);

    // With a maximum of 8 the 2-worker gateway takes all eight: it sends
    // on two (its workers) and receives on all (the daemon's choice).
    let s = Setup {
        cfg_i: workers(8),
        cfg_r: workers(2),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(4);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(R).len(), 9);
    assert_eq!(
        net.live_children(R)
            .iter()
            .filter(|c| c.per_resource)
            .count(),
        8
    );
    check_pairs(&net);
    net.assert_no_leak(R);
}

#[test]
fn a_peer_without_sa_resource_info_gets_one_pair() {
    // strongSwan 5.9: no SA_RESOURCE_INFO in its answer. The fallback SA
    // carries every worker's traffic; acquires for workers stop.
    let s = Setup {
        cfg_i: workers(4),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        ..Setup::default()
    };
    let mut net = s.build(5);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.live_children(I).len(), 1);
    assert_eq!(net.live_children(R).len(), 1);
    assert!(!net.live_children(I)[0].per_resource);
    assert_eq!(
        net.count(I, |e| matches!(
            e,
            Event::PerResourceUnavailable {
                reason: Reason::PerResourceUnsupported,
                ..
            }
        )),
        1
    );
    assert_eq!(
        net.peers[I].ep.acquire(net.now, "gw", "net", Some(2)),
        Err(InitiateError::PerResourceUnavailable(
            Reason::PerResourceUnsupported
        ))
    );
    net.run_for(Duration::from_secs(1));
    let cc = net.peers[I]
        .sent
        .iter()
        .filter(|x| x.is(ExchangeType::CREATE_CHILD_SA, false))
        .count();
    assert_eq!(cc, 0, "nothing asked of the peer");
    // The responder side of the same: our per-CPU responder facing a plain
    // initiator tells its daemon too.
    let s = Setup {
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(6);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    assert_eq!(
        net.count(R, |e| matches!(e, Event::PerResourceUnavailable { .. })),
        1
    );
}

#[test]
fn on_demand_sub_sas_per_worker_and_before_the_ike_sa_exists() {
    let s = Setup {
        cfg_i: workers(4),
        tweak_i: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(7);
    // Worker 2 sends first: IKE_AUTH brings the fallback, then its sub-SA.
    let id = net.peers[I]
        .ep
        .acquire(net.now, "gw", "net", Some(2))
        .unwrap();
    net.run_for(Duration::from_secs(2));
    let a = net.live_children(I);
    assert_eq!(a.len(), 2);
    assert_eq!((a[0].resource, a[1].resource), (None, Some(2)));
    // Again for worker 2: nothing; worker 0: one more.
    assert_eq!(
        net.peers[I].ep.acquire(net.now, "gw", "net", Some(2)),
        Ok(id)
    );
    assert_eq!(
        net.peers[I].ep.acquire(net.now, "gw", "net", Some(0)),
        Ok(id)
    );
    assert_eq!(
        net.peers[I].ep.acquire(net.now, "gw", "net", Some(0)),
        Ok(id)
    );
    net.run_for(Duration::from_secs(2));
    let mut res: Vec<_> = net.live_children(I).iter().map(|c| c.resource).collect();
    res.sort_unstable();
    assert_eq!(res, [None, Some(0), Some(2)]);
    // A trap acquire (no worker) with the fallback in place: nothing.
    net.peers[I].ep.acquire(net.now, "gw", "net", None).unwrap();
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.live_children(I).len(), 3);
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn rekeyed_sub_sas_keep_their_worker_both_ways() {
    let s = Setup {
        cfg_i: workers(2),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::OnDemand, 8),
        ..Setup::default()
    };
    let mut net = s.build(8);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    let sub = net
        .live_children(I)
        .into_iter()
        .find(|c| c.resource == Some(1))
        .unwrap();
    let (spi, peer_spi, ike) = (sub.inbound_spi, sub.outbound_spi, sub.ike_sa);
    // Our rekey of it, then the peer's rekey of the result.
    net.peers[I].ep.rekey_child(net.now, ike, spi).unwrap();
    net.run_for(Duration::from_secs(2));
    let new = net
        .live_children(I)
        .into_iter()
        .find(|c| c.rekeys == Some(spi))
        .unwrap();
    assert_eq!((new.resource, new.per_resource), (Some(1), true));
    let r_new = net
        .live_children(R)
        .into_iter()
        .find(|c| c.rekeys == Some(peer_spi))
        .unwrap();
    assert_eq!((r_new.resource, r_new.per_resource), (None, true));
    let (spi2, r_spi2) = (new.inbound_spi, r_new.inbound_spi);
    let r_ike = net.current_ike(R).unwrap();
    net.peers[R].ep.rekey_child(net.now, r_ike, r_spi2).unwrap();
    net.run_for(Duration::from_secs(2));
    let newer = net
        .live_children(I)
        .into_iter()
        .find(|c| c.rekeys == Some(spi2))
        .unwrap();
    assert_eq!(
        (newer.resource, newer.per_resource),
        (Some(1), true),
        "the peer's rekey keeps our worker too"
    );
    assert_eq!(net.live_children(I).len(), 3);
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn both_sides_eager_each_make_their_own() {
    let s = Setup {
        cfg_i: workers(2),
        cfg_r: workers(3),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::Eager, 8),
        ..Setup::default()
    };
    let mut net = s.build(9);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    // 1 fallback + 2 of I's + 3 of R's.
    assert_eq!(net.live_children(I).len(), 6);
    let ours = |p: usize| {
        let mut v: Vec<u16> = net
            .live_children(p)
            .iter()
            .filter_map(|c| c.resource)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(ours(I), [0, 1]);
    assert_eq!(ours(R), [0, 1, 2]);
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

/// With both sides steering alike, every per-resource SA is received on
/// the same worker index at both ends, whoever negotiated it, and keeps it
/// across rekeys by either side: a flow sent by worker k is received by
/// the peer's worker k, whose replies come back to worker k.
#[test]
fn per_resource_sas_steer_to_the_same_worker_at_both_ends() {
    let s = Setup {
        cfg_i: workers(3),
        cfg_r: workers(3),
        tweak_i: |c| per_cpu(c, PerCpuSas::Eager, 8),
        tweak_r: |c| per_cpu(c, PerCpuSas::Eager, 8),
        ..Setup::default()
    };
    let mut net = s.build(11);
    net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    net.run_for(Duration::from_secs(2));
    // (inbound SPI, outbound SPI, ours, a rekey) of I's sub-SAs.
    let alike = |net: &sim::Net| -> Vec<(u32, u32, bool, bool)> {
        let subs: Vec<_> = net
            .live_children(I)
            .into_iter()
            .filter(|c| c.per_resource)
            .map(|c| (c.inbound_spi, c.outbound_spi, c.initiator, c.rekeys.is_some()))
            .collect();
        assert_eq!(subs.len(), 6, "three sub-SAs each");
        for &(i, o, _, _) in &subs {
            assert_eq!(sim::steered(i, 3), sim::steered(o, 3), "{i:08x}/{o:08x}");
        }
        subs
    };
    let subs = alike(&net);
    // Rekey one of each side's from I's end, then one from R's end.
    let ike_i = net.current_ike(I).unwrap();
    let ours = subs.iter().find(|c| c.2).unwrap().0;
    let theirs = subs.iter().find(|c| !c.2).unwrap().0;
    net.peers[I].ep.rekey_child(net.now, ike_i, ours).unwrap();
    net.peers[I].ep.rekey_child(net.now, ike_i, theirs).unwrap();
    net.run_for(Duration::from_secs(2));
    let ike_r = net.current_ike(R).unwrap();
    let r_sub = net
        .live_children(R)
        .into_iter()
        .find(|c| c.per_resource && c.rekeys.is_none())
        .unwrap()
        .inbound_spi;
    net.peers[R].ep.rekey_child(net.now, ike_r, r_sub).unwrap();
    net.run_for(Duration::from_secs(2));
    let after = alike(&net);
    assert_eq!(after.iter().filter(|c| c.3).count(), 3);
    let workers = |v: &[(u32, u32, bool, bool)]| {
        let mut w: Vec<usize> = v.iter().map(|c| sim::steered(c.0, 3)).collect();
        w.sort_unstable();
        w
    };
    assert_eq!(workers(&subs), workers(&after), "rekeys keep their workers");
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}

#[test]
fn a_per_cpu_child_acquired_while_ike_auth_makes_another() {
    // IKE_AUTH carries "net"; a worker's acquire for the per-CPU child
    // "host" meanwhile must still get "host" its fallback and sub-SA.
    let s = Setup {
        extra_child: true,
        cfg_i: workers(2),
        tweak_i: |c| {
            c.children[1].per_cpu_sas = PerCpuSas::OnDemand;
            c.children[1].per_cpu_max = 4;
        },
        tweak_r: |c| {
            c.children[1].per_cpu_sas = PerCpuSas::OnDemand;
            c.children[1].per_cpu_max = 4;
        },
        ..Setup::default()
    };
    let mut net = s.build(10);
    let id = net.peers[I].ep.initiate(net.now, "gw", None).unwrap();
    assert_eq!(
        net.peers[I].ep.acquire(net.now, "gw", "host", Some(1)),
        Ok(id)
    );
    net.run_for(Duration::from_secs(2));
    let host: Vec<_> = net
        .live_children(I)
        .into_iter()
        .filter(|c| &*c.child == "host")
        .map(|c| (c.resource, c.per_resource))
        .collect();
    assert_eq!(host, [(None, false), (Some(1), true)]);
    check_pairs(&net);
    net.assert_no_leak(I);
    net.assert_no_leak(R);
}
