//! The `unique` policy: what a second IKE SA with the same identities
//! does to the first at the responder, with and without INITIAL_CONTACT,
//! from the same address and from another (charon's rules).
//!
//! Two initiators with one identity, `@moon`, at `MOON` and `MOON2`,
//! reach one responder whose connection accepts any address. The second
//! IKE SA either comes from a fresh endpoint (INITIAL_CONTACT, as after a
//! restart) or from one that holds another SA (none).

use super::*;
use crate::event::{AuthFailure, Reason};
use crate::lifetime::{REPLACE_DELAY, Unique};
use std::collections::HashMap;

const MOON2: &str = "10.0.0.3";

fn initiator(seed: u64, local: &str) -> Endpoint {
    endpoint(seed, local, SUN, "@moon", "@sun")
}

/// The responder: `remote_addrs` empty (any peer address), `unique = policy`.
fn responder(policy: Unique) -> Endpoint {
    let mut ep = Endpoint::new(
        EndpointConfig::default(),
        Box::new(DeterministicRng::new(99)),
        Box::new(RandomSpiAllocator::new()),
    );
    let mut c = ConnectionConfig::new("gw", "aes256gcm16-prfsha256-x25519").unwrap();
    c.local_addrs = vec![SUN.parse().unwrap()];
    c.local.id = Some(Identity::parse("@sun").unwrap());
    c.remote.id = Some(Identity::parse("@moon").unwrap());
    c.unique = policy;
    c.children
        .push(ChildConfig::new("net", "10.2.0.0/16", "10.1.0.0/16", "aes256gcm16").unwrap());
    ep.add_connection(c).unwrap();
    ep.secrets_mut().add_psk(&[], b"secret");
    ep
}

/// A responder and initiators by address, and a clock.
struct Net {
    r: Endpoint,
    peers: HashMap<std::net::IpAddr, Endpoint>,
    now: Instant,
}

impl Net {
    fn new(policy: Unique) -> Self {
        Net {
            r: responder(policy),
            peers: HashMap::new(),
            now: Instant::now(),
        }
    }

    /// Move datagrams until quiet.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for ep in self.peers.values_mut() {
                while let Some(t) = ep.poll_transmit() {
                    self.r
                        .handle_datagram(self.now, wall_clock(), t.remote, t.local, &t.data);
                    moved = true;
                }
            }
            while let Some(t) = self.r.poll_transmit() {
                if let Some(ep) = self.peers.get_mut(&t.remote.ip()) {
                    ep.handle_datagram(self.now, wall_clock(), t.remote, t.local, &t.data);
                }
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    /// Initiate from the peer at `addr` (created fresh unless there),
    /// with or without INITIAL_CONTACT; returns the initiator's SA.
    fn connect(&mut self, addr: &str, seed: u64, initial_contact: bool) -> IkeSaId {
        let ip = addr.parse().unwrap();
        let ep = self.peers.entry(ip).or_insert_with(|| initiator(seed, addr));
        let id = ep.initiate(self.now, "gw", None).unwrap();
        ep.sas.get_mut(&id.0).unwrap().initial_contact = initial_contact;
        self.pump();
        id
    }

    /// The responder's IKE SAs up, by peer address.
    fn up_at_responder(&self) -> Vec<std::net::IpAddr> {
        let mut v: Vec<_> = self
            .r
            .sas
            .values()
            .filter(|sa| sa.state == State::Established && !sa.closing())
            .map(|sa| sa.remote.ip())
            .collect();
        v.sort();
        v
    }

    /// The responder's events: IKE SAs deleted (with why) and
    /// authentication failures.
    fn drain(&mut self) -> (Vec<Reason>, Vec<AuthFailure>) {
        let (mut down, mut failed) = (Vec::new(), Vec::new());
        while let Some(e) = self.r.poll_event() {
            match e {
                Event::IkeSaDeleted { reason, .. } => down.push(reason),
                Event::AuthFailed { reason, .. } => failed.push(reason),
                _ => {}
            }
        }
        (down, failed)
    }

    fn advance(&mut self, d: core::time::Duration) {
        self.now += d;
        self.r.handle_timeout(self.now);
        for ep in self.peers.values_mut() {
            ep.handle_timeout(self.now);
        }
        self.pump();
    }
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// The first IKE SA from `MOON`, events drained.
fn first_up(policy: Unique) -> Net {
    let mut n = Net::new(policy);
    n.connect(MOON, 1, true);
    assert_eq!(n.up_at_responder(), [ip(MOON)]);
    n.drain();
    n
}

#[test]
fn no_keeps_both_without_initial_contact_and_replaces_with_it() {
    let mut n = first_up(Unique::No);
    n.connect(MOON2, 2, false);
    assert_eq!(n.up_at_responder(), [ip(MOON), ip(MOON2)]);
    assert_eq!(n.drain(), (vec![], vec![]));
    // A restarted MOON: INITIAL_CONTACT deletes both others, silently.
    n.peers.remove(&ip(MOON));
    n.connect(MOON, 3, true);
    assert_eq!(n.up_at_responder(), [ip(MOON)]);
    let (down, _) = n.drain();
    assert_eq!(down, [Reason::PeerRestarted, Reason::PeerRestarted]);
}

#[test]
fn never_ignores_initial_contact() {
    let mut n = first_up(Unique::Never);
    n.connect(MOON2, 2, true);
    assert_eq!(n.up_at_responder(), [ip(MOON), ip(MOON2)]);
    assert_eq!(n.drain(), (vec![], vec![]));
}

#[test]
fn keep_refuses_another_address_and_allows_a_reauthentication() {
    let mut n = first_up(Unique::Keep);
    let refused = n.connect(MOON2, 2, false);
    assert_eq!(n.up_at_responder(), [ip(MOON)], "the first stays alone");
    let (down, failed) = n.drain();
    assert_eq!(failed, [AuthFailure::UniqueKeep]);
    assert!(down.iter().all(|r| *r == Reason::AuthenticationFailed), "{down:?}");
    let moon2 = n.peers.get_mut(&ip(MOON2)).unwrap();
    assert!(!moon2.sas.contains_key(&refused.0), "the initiator was told");
    let mut told = false;
    while let Some(e) = moon2.poll_event() {
        told |= matches!(e, Event::IkeSaDeleted { reason: Reason::AuthenticationFailed, .. });
    }
    assert!(told);
    // From the same address: a reauthentication, allowed; both stay.
    n.connect(MOON, 1, false);
    assert_eq!(n.up_at_responder(), [ip(MOON), ip(MOON)]);
    assert_eq!(n.drain(), (vec![], vec![]));
    // INITIAL_CONTACT still replaces (the peer says it lost the others).
    n.connect(MOON2, 2, true);
    assert_eq!(n.up_at_responder(), [ip(MOON2)]);
}

#[test]
fn replace_deletes_the_other_at_once_or_after_a_reauthentication_delay() {
    let mut n = first_up(Unique::Replace);
    n.connect(MOON2, 2, false);
    assert_eq!(n.up_at_responder(), [ip(MOON2)], "the new one wins");
    assert_eq!(n.r.ike_sa_count(), 1, "deleted with a Delete, answered");
    let moon = n.peers.get_mut(&ip(MOON)).unwrap();
    assert_eq!(moon.ike_sa_count(), 0, "MOON heard the Delete");
    let mut deleted = false;
    while let Some(e) = moon.poll_event() {
        deleted |= matches!(e, Event::IkeSaDeleted { reason: Reason::DeletedByPeer, .. });
    }
    assert!(deleted);
    n.drain();

    // From the same address: the old one stays for REPLACE_DELAY.
    n.connect(MOON2, 2, false);
    assert_eq!(n.r.ike_sa_count(), 2);
    n.advance(REPLACE_DELAY / 2);
    assert_eq!(n.r.ike_sa_count(), 2, "not yet");
    n.advance(REPLACE_DELAY);
    assert_eq!(n.r.ike_sa_count(), 1);
    assert_eq!(n.peers[&ip(MOON2)].ike_sa_count(), 1);
    assert_eq!(n.up_at_responder(), [ip(MOON2)]);
}
