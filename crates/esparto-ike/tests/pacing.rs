//! A hub: fifty connections between the same two gateways started at
//! once, through `Endpoint::handle_datagram` on a simulated network. The
//! initiator paces its IKE_SA_INIT requests per peer address
//! (`initiating_per_peer`), so a responder with strongSwan's default
//! per-source limits neither demands cookies nor drops any; and a
//! responder gives an address its connections name a budget of its own
//! (`cookie_threshold_per_peer`, `half_open_per_peer`), so an initiator
//! that does not pace comes up without cookies too.

#![allow(clippy::unwrap_used)]

mod sim;

use esparto_ike::{ChildConfig, ConnectionConfig, EndpointConfig, Event, Identity, IkeSaId, IkeSaStates};
use sim::{MOON, SUN};
use std::time::Duration;

const I: usize = 0;
const R: usize = 1;
const N: usize = 50;

/// Connection `k` of moon (`to_sun`) or sun: its own identities and
/// subnets, so that each is an IKE SA of its own (and INITIAL_CONTACT of
/// one does not end another's).
fn conn(k: usize, moon_side: bool, configured_peer: bool) -> ConnectionConfig {
    let mut c = ConnectionConfig::new(&format!("c{k}"), "aes256gcm16-prfsha256-x25519").unwrap();
    let (moon, sun) = (Identity::parse(&format!("@moon{k}.example")).unwrap(), Identity::parse(&format!("@sun{k}.example")).unwrap());
    let (west, east) = (format!("10.1.{k}.0/24"), format!("10.2.{k}.0/24"));
    if moon_side {
        c.local_addrs = vec![MOON.parse().unwrap()];
        c.remote_addrs = vec![SUN.parse().unwrap()];
        (c.local.id, c.remote.id) = (Some(moon), Some(sun));
        c.children.push(ChildConfig::new("net", &west, &east, "aes256gcm16").unwrap());
    } else {
        c.local_addrs = vec![SUN.parse().unwrap()];
        if configured_peer {
            c.remote_addrs = vec![MOON.parse().unwrap()];
        }
        (c.local.id, c.remote.id) = (Some(sun), Some(moon));
        c.children.push(ChildConfig::new("net", &east, &west, "aes256gcm16").unwrap());
    }
    c
}

/// Moon with `cfg_i` and sun with `cfg_r`, `N` connections each; every
/// one of moon's initiated at the same instant.
fn hub(seed: u64, cfg_i: EndpointConfig, cfg_r: EndpointConfig, configured_peer: bool) -> (sim::Net, Vec<IkeSaId>) {
    let mut net = sim::Net::new(seed);
    let (mut i, _) = sim::counting_endpoint(seed ^ 1, cfg_i);
    let (mut r, _) = sim::counting_endpoint(seed ^ 2, cfg_r);
    for k in 0..N {
        let (a, b) = (conn(k, true, configured_peer), conn(k, false, configured_peer));
        let ids = [a.local.id.clone().unwrap(), a.remote.id.clone().unwrap()];
        i.add_connection(a).unwrap();
        r.add_connection(b).unwrap();
        i.secrets_mut().add_psk(&ids, b"a shared secret");
        r.secrets_mut().add_psk(&ids, b"a shared secret");
    }
    net.add(MOON, i);
    net.add(SUN, r);
    let ids = (0..N).map(|k| net.peers[I].ep.initiate(net.now, &format!("c{k}"), None).unwrap()).collect();
    (net, ids)
}

fn established(net: &sim::Net, i: usize) -> usize {
    net.count(i, |e| matches!(e, Event::IkeSaEstablished { .. }))
}

/// Initiations in flight to one peer by default.
fn pace() -> usize {
    EndpointConfig::default().initiating_per_peer
}

#[test]
fn paced_initiations_meet_no_cookie_and_no_drop_at_a_strict_responder() {
    // The responder treats moon as a stranger: strongSwan's defaults,
    // cookies from the fourth half-open SA of one address on.
    let (mut net, _) = hub(1, EndpointConfig::default(), EndpointConfig::default(), false);
    let waiting = net.peers[I].ep.ike_sa_states();
    assert_eq!(waiting, IkeSaStates { connecting: N, waiting: N - pace(), ..IkeSaStates::default() });
    // Two round trips of 20 ms per connection, `pace()` at a time.
    net.run_for(Duration::from_secs(2));
    assert_eq!((established(&net, I), established(&net, R)), (N, N));
    assert_eq!(net.children(I).len(), N);
    let (si, sr) = (net.peers[I].ep.stats(), net.peers[R].ep.stats());
    assert_eq!(si.initiations_paced, (N - pace()) as u64);
    assert_eq!((sr.cookies_sent, sr.half_open_dropped_per_source), (0, 0), "{sr:?}");
    assert_eq!(net.peers[I].ep.ike_sa_states(), IkeSaStates { established: N, ..IkeSaStates::default() });
}

#[test]
fn unpaced_initiations_meet_cookies_and_drops_at_a_strict_responder() {
    // The failure the pacing prevents (and the proof that the test above
    // can fail): all fifty at once, cookied after three, dropped after five.
    let unpaced = EndpointConfig { initiating_per_peer: 0, ..EndpointConfig::default() };
    let (mut net, _) = hub(2, unpaced, EndpointConfig::default(), false);
    net.run_for(Duration::from_secs(2));
    let sr = net.peers[R].ep.stats();
    assert!(sr.cookies_sent > 0 && sr.half_open_dropped_per_source > 0, "{sr:?}");
    assert!(established(&net, I) < N);
}

#[test]
fn a_configured_peer_has_a_half_open_budget_of_its_own() {
    // An initiator that does not pace (strongSwan's does not) to a
    // responder whose connections name its address: fifty at once, no
    // cookie, no drop.
    let unpaced = EndpointConfig { initiating_per_peer: 0, ..EndpointConfig::default() };
    let (mut net, _) = hub(3, unpaced.clone(), EndpointConfig::default(), true);
    net.run_for(Duration::from_secs(1));
    assert_eq!((established(&net, I), established(&net, R)), (N, N));
    let sr = net.peers[R].ep.stats();
    assert_eq!((sr.cookies_sent, sr.half_open_dropped_per_source), (0, 0), "{sr:?}");
    // The budget is bounded: with a smaller one, the same burst is cookied.
    let small = EndpointConfig { cookie_threshold_per_peer: 10, half_open_per_peer: 20, ..EndpointConfig::default() };
    let (mut net, _) = hub(4, unpaced, small, true);
    net.run_for(Duration::from_secs(1));
    let sr = net.peers[R].ep.stats();
    assert!(sr.cookies_sent > 0 && sr.half_open_dropped_per_source > 0, "{sr:?}");
}

#[test]
fn a_waiting_initiation_that_is_terminated_leaves_its_turn() {
    let (mut net, ids) = hub(5, EndpointConfig::default(), EndpointConfig::default(), false);
    let now = net.now;
    // Terminate one that is being set up and four of those waiting: the
    // others still all come up, in turn.
    let ended = [0, 10, 11, 30, 49];
    for k in ended {
        net.peers[I].ep.terminate(now, ids[k]).unwrap();
    }
    let ended = ended.len();
    assert_eq!(net.peers[I].ep.ike_sa_states().waiting, N - ended - pace());
    net.run_for(Duration::from_secs(2));
    assert_eq!(established(&net, I), N - ended);
    assert_eq!(net.peers[I].ep.ike_sa_states(), IkeSaStates { established: N - ended, ..IkeSaStates::default() });
}
