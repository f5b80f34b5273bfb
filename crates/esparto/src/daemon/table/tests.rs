//! The table's transitions, checked against real workers: every command
//! a transition queues is applied to an [`esparto_esp::Worker`] per worker,
//! and the tests look at what the workers hold.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use esparto_crypto::{EspSuite, SecretBytes};
use esparto_esp::{Direction, GroupId, Lifetime, Selector, Worker};
use esparto_ike::{ChildSaEstablished, IkeSaId};

use super::child::Role;
use super::report::Counters;
use super::sa::Out;
use super::*;
use crate::config::{StaticPair, StaticSas};
use crate::daemon::seqstate::Claimed;

const SUITE: EspSuite = EspSuite::Aes256Gcm16;

/// A table and the workers that follow it.
pub(super) struct Harness {
    pub(super) table: Table,
    pub(super) workers: Vec<Worker>,
    pub(super) routes: usize,
    /// The selectors of the last route effect: (local, remote).
    pub(super) last_routes: Option<(Vec<Selector>, Vec<Selector>)>,
    /// Prefixes the table asked to unroute, in order.
    pub(super) unrouted: Vec<Prefix>,
    pub(super) now: Instant,
}

pub(super) fn key(b: u8) -> SecretBytes {
    SecretBytes::from_slice(&vec![b; SUITE.keymat_len()])
}

fn ts(s: &str) -> Selector {
    s.parse().unwrap()
}

pub(super) fn ike_ts(s: &str) -> esparto_ike::TrafficSelector {
    let (addr, len) = s.split_once('/').unwrap();
    esparto_ike::TrafficSelector::subnet(addr.parse().unwrap(), len.parse().unwrap()).unwrap()
}

fn ike_subnet(a: [u8; 4], len: u8) -> esparto_ike::TrafficSelector {
    esparto_ike::TrafficSelector::subnet(std::net::Ipv4Addr::from(a).into(), len).unwrap()
}

pub(super) fn peer() -> SocketAddr {
    SocketAddr::new(std::net::Ipv4Addr::new(192, 0, 2, 2).into(), 4500)
}

impl Harness {
    pub(super) fn new(workers: u16) -> Self {
        Self {
            table: Table::new(workers, 1500),
            workers: (0..workers).map(Worker::new).collect(),
            routes: 0,
            last_routes: None,
            unrouted: Vec::new(),
            now: Instant::now(),
        }
    }

    /// Applies every queued command to its worker.
    pub(super) fn apply(&mut self) {
        for e in self.table.take_effects() {
            match e {
                Effect::Worker(k, cmd) => self.workers[usize::from(k)].apply(cmd),
                Effect::Routes { local, remote } => {
                    self.routes += 1;
                    self.last_routes = Some((local, remote));
                }
                Effect::Unroute(p) => self.unrouted.extend(p),
                // These workers apply commands as they are given.
                Effect::Barrier => {}
            }
        }
    }

    /// A connection `name` with one child `net` (per-CPU or not) to
    /// `remote`.
    pub(super) fn conn(&mut self, name: &str, per_cpu: bool, remote: &str) -> ChildId {
        self.conn_ts(name, per_cpu, ts(remote))
    }

    /// The same, with the peer's selector parsed.
    pub(super) fn conn_ts(&mut self, name: &str, per_cpu: bool, remote: Selector) -> ChildId {
        let c = self.table.add_conn(name);
        let settings = Settings {
            local_ts: vec![Selector::addrs(
                esparto_esp::IpRange::prefix(std::net::Ipv4Addr::new(10, 1, 0, 0).into(), 16).unwrap(),
            )],
            remote_ts: vec![remote],
            peer: peer(),
            replay_window: 64,
            lifetime: Lifetime::default(),
            per_cpu,
            ipcomp: None,
            link_mbps: None,
        };
        self.table.add_child(c, "net", settings)
    }

    pub(super) fn group(&self, child: ChildId) -> GroupId {
        self.table.child(child).unwrap().group.as_ref().unwrap().id
    }

    /// The outbound SPI worker `k` sends with in `child`'s group, and
    /// whether it is its own sub-SA.
    fn sends(&self, child: ChildId, k: usize) -> Option<(u32, bool)> {
        let g = self.workers[k].group(self.group(child))?;
        g.sub()
            .map(|s| (s.spi(), true))
            .or_else(|| g.fallback().map(|s| (s.spi(), false)))
    }

    fn receives(&self, spi: u32) -> bool {
        self.workers[crate::datapath::spi_to_worker(spi, self.workers.len())]
            .sad()
            .get(spi)
            .is_some()
    }

    fn inbound_total(&self) -> usize {
        self.workers.iter().map(|w| w.sad().len()).sum()
    }
}

/// A Child SA of connection `conn`'s child `net`.
pub(super) struct Est {
    pub(super) ike: u64,
    pub(super) conn: Arc<str>,
    pub(super) remote: esparto_ike::TrafficSelector,
    pub(super) in_spi: u32,
    pub(super) out_spi: u32,
    pub(super) resource: Option<u16>,
    pub(super) per_resource: bool,
    pub(super) rekeys: Option<u32>,
    pub(super) outbound_active: bool,
    /// We initiated the exchange.
    pub(super) initiator: bool,
}

impl Est {
    pub(super) fn new(ike: u64, conn: &str, in_spi: u32, out_spi: u32) -> Self {
        Self {
            ike,
            conn: Arc::from(conn),
            remote: ike_subnet([10, 2, 0, 0], 16),
            in_spi,
            out_spi,
            resource: None,
            per_resource: false,
            rekeys: None,
            outbound_active: true,
            initiator: true,
        }
    }

    pub(super) fn event(&self) -> ChildSaEstablished {
        ChildSaEstablished {
            ike_sa: IkeSaId(self.ike),
            connection: self.conn.clone(),
            child: Arc::from("net"),
            inbound_spi: self.in_spi,
            outbound_spi: self.out_spi,
            suite: SUITE,
            esn: false,
            inbound_key: key(self.in_spi as u8),
            outbound_key: key(self.out_spi as u8),
            local_ts: vec![ike_subnet([10, 1, 0, 0], 16)],
            remote_ts: vec![self.remote],
            local: SocketAddr::new(std::net::Ipv4Addr::new(192, 0, 2, 1).into(), 500),
            remote: SocketAddr::new(std::net::Ipv4Addr::new(192, 0, 2, 2).into(), 500),
            encap: true,
            resource: self.resource,
            initiator: self.initiator,
            rekeys: self.rekeys,
            per_resource: self.per_resource,
            outbound_active: self.outbound_active,
            ipcomp: None,
        }
    }
}

impl Harness {
    pub(super) fn establish(&mut self, e: &Est) -> Slot {
        let r = self.table.child_established(self.now, &e.event(), peer()).unwrap();
        self.apply();
        r.slot
    }

    fn delete(&mut self, in_spi: u32, rekeyed: bool) {
        assert!(self.table.child_deleted(self.now, in_spi, rekeyed));
        self.apply();
    }
}

#[test]
fn install_puts_policies_group_inbound_then_outbound_on_the_workers() {
    let mut h = Harness::new(2);
    let child = h.conn("a", false, "10.2.0.0/16");
    let slot = h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    assert_eq!(slot, Slot::Fallback);
    for k in 0..2 {
        assert_eq!(h.workers[k].spd().len(), 1);
        assert_eq!(
            h.sends(child, k),
            Some((0x2000, false)),
            "worker {k} sends on the fallback"
        );
    }
    // Inbound only on the worker its SPI steers to.
    assert!(h.receives(0x1001));
    assert_eq!(h.inbound_total(), 1);
    assert_eq!(h.routes, 1);
    // Routes name both sides: the sources (policy rules) and destinations.
    let (local, remote) = h.last_routes.clone().unwrap();
    assert_eq!((local.len(), remote), (1, vec![ts("10.2.0.0/16")]), "{local:?}");
    assert!(local[0].addrs.contains("10.1.0.1".parse().unwrap()), "{local:?}");
    // The first command is the group, then its policy; the inbound SA
    // comes before any outbound one.
    let mut h2 = Harness::new(2);
    h2.conn("a", false, "10.2.0.0/16");
    h2.table
        .child_established(h2.now, &Est::new(1, "a", 0x1001, 0x2000).event(), peer())
        .unwrap();
    let kinds: Vec<&'static str> = h2
        .table
        .take_effects()
        .iter()
        .filter_map(|e| match e {
            Effect::Worker(1, c) => Some(match c {
                esparto_esp::Command::AddGroup { .. } => "group",
                esparto_esp::Command::AddPolicy(..) => "policy",
                esparto_esp::Command::AddInbound(_) => "inbound",
                esparto_esp::Command::SetFallback(..) => "outbound",
                _ => "other",
            }),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["group", "policy", "inbound", "outbound"]);
    let (name_conn, name_child) = h.table.names(child).unwrap();
    assert_eq!((&**name_conn, &**name_child), ("a", "net"));
    assert_eq!(h.table.counts(), (1, 1, 1));
}

/// Every new Child SA: its inbound half, then a barrier (the gateway
/// holds what follows, the IKE messages included, until every worker has
/// confirmed), then its outbound half.
#[test]
fn a_barrier_stands_between_a_child_sas_inbound_and_outbound_halves() {
    for (rekey, active) in [(false, true), (true, true), (true, false)] {
        let mut h = Harness::new(2);
        h.conn("a", false, "10.2.0.0/16");
        h.establish(&Est::new(1, "a", 0x1001, 0x2000));
        let e = Est { rekeys: rekey.then_some(0x1001), outbound_active: active, ..Est::new(1, "a", 0x1011, 0x2010) };
        h.table.child_established(h.now, &e.event(), peer()).unwrap();
        let kinds: Vec<&'static str> = h
            .table
            .take_effects()
            .iter()
            .filter_map(|e| match e {
                Effect::Worker(_, esparto_esp::Command::AddInbound(_)) => Some("inbound"),
                Effect::Worker(_, esparto_esp::Command::SetFallback(..)) => Some("outbound"),
                Effect::Barrier => Some("barrier"),
                _ => None,
            })
            .collect();
        let want: &[&str] = if active { &["inbound", "barrier", "outbound", "outbound"] } else { &["inbound", "barrier"] };
        assert_eq!(kinds, want, "rekey {rekey}, outbound active {active}");
    }
}

/// A sub-SA the peer negotiated (we answered): its worker goes on sending
/// on the fallback until the peer's first packet on the new SA shows the
/// peer installed it — or, without traffic from the peer, after
/// CONFIRM_WAIT.
#[test]
fn a_sub_sa_we_answered_for_sends_once_the_peer_does() {
    for by_packet in [true, false] {
        let mut h = Harness::new(2);
        let child = h.conn("a", true, "10.2.0.0/16");
        h.establish(&Est::new(1, "a", 0x1001, 0x2000));
        let in_spi = on_worker(1, 2, 0x10_0000);
        let peers = Est { per_resource: true, initiator: false, ..Est::new(1, "a", in_spi, 0x2003) };
        let r = h.table.child_established(h.now, &peers.event(), peer()).unwrap();
        assert_eq!(r.slot, Slot::Worker(1));
        let effects = h.table.take_effects();
        assert!(
            effects.iter().any(|e| matches!(e, Effect::Worker(1, esparto_esp::Command::AnnounceFirst(s)) if *s == in_spi)),
            "{effects:?}"
        );
        for e in effects {
            if let Effect::Worker(k, c) = e {
                h.workers[usize::from(k)].apply(c);
            }
        }
        assert!(h.receives(in_spi));
        assert_eq!(h.sends(child, 1), Some((0x2000, false)), "still the fallback");
        assert_eq!(h.table.next_confirm(), Some(h.now + CONFIRM_WAIT));
        if by_packet {
            assert_eq!(h.table.inbound_confirmed(h.now, in_spi).unwrap(), Some(Slot::Worker(1)));
            // The wait's timer finds nothing left to do.
            assert_eq!(h.table.expire_confirming(h.now + CONFIRM_WAIT).unwrap(), 0);
        } else {
            assert_eq!(h.table.expire_confirming(h.now + CONFIRM_WAIT / 2).unwrap(), 0);
            assert_eq!(h.table.expire_confirming(h.now + CONFIRM_WAIT).unwrap(), 1);
        }
        h.apply();
        assert_eq!(h.sends(child, 1), Some((0x2003, true)), "its own SA now");
        assert_eq!(h.table.inbound_confirmed(h.now, in_spi).unwrap(), None, "once");
    }
    // The first SA of a child has nothing else to send on: at once.
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est { initiator: false, ..Est::new(1, "a", 0x1001, 0x2000) });
    assert_eq!(h.sends(child, 0), Some((0x2000, false)));
    assert_eq!(h.table.next_confirm(), None);
}

#[test]
fn a_rekey_we_initiate_switches_at_once_and_the_old_inbound_lingers() {
    let mut h = Harness::new(2);
    let child = h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    let new = Est {
        rekeys: Some(0x1001),
        ..Est::new(1, "a", 0x1003, 0x2001)
    };
    assert_eq!(h.establish(&new), Slot::Fallback);
    for k in 0..2 {
        assert_eq!(h.sends(child, k), Some((0x2001, false)));
    }
    assert!(
        h.receives(0x1001) && h.receives(0x1003),
        "both inbound SAs, RFC 7296 §2.8"
    );
    h.delete(0x1001, true);
    assert!(h.receives(0x1001), "lingers");
    assert_eq!(h.table.next_linger(), Some(h.now + LINGER));
    // Not listed with its IKE SA any more.
    assert_eq!(h.table.ike_sa(IkeSaId(1)).unwrap().sas.len(), 1);
    assert_eq!(h.table.expire_lingering(h.now + LINGER - Duration::from_millis(1)), 0);
    assert_eq!(h.table.expire_lingering(h.now + LINGER), 1);
    h.apply();
    assert!(!h.receives(0x1001) && h.receives(0x1003));
    assert_eq!(h.table.next_linger(), None);
    for k in 0..2 {
        assert_eq!(h.sends(child, k), Some((0x2001, false)), "the new SA keeps sending");
    }
}

#[test]
fn a_rekey_the_peer_initiates_waits_for_the_peer_to_switch() {
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    h.establish(&Est {
        resource: Some(1),
        per_resource: true,
        ..Est::new(1, "a", 0x1005, 0x2005)
    });
    assert_eq!(h.sends(child, 1), Some((0x2005, true)));
    // The peer rekeys worker 1's sub-SA: we answered, it has not switched.
    let new = Est {
        rekeys: Some(0x1005),
        outbound_active: false,
        ..Est::new(1, "a", 0x1007, 0x2007)
    };
    assert_eq!(h.establish(&new), Slot::Worker(1));
    assert!(h.receives(0x1007), "the new inbound SA is there at once");
    assert_eq!(h.sends(child, 1), Some((0x2005, true)), "still sending on the old one");
    assert!(matches!(h.table.by_in_spi(0x1007).unwrap().1.out, Out::Waiting(_)));
    // Its Delete of the old SA shows it switched.
    assert_eq!(
        h.table.outbound_active(h.now, 0x1007, 0x2007).unwrap(),
        Some(Slot::Worker(1))
    );
    h.apply();
    assert_eq!(h.sends(child, 1), Some((0x2007, true)));
    assert_eq!(h.table.outbound_active(h.now, 0x1007, 0x2007).unwrap(), None, "once");
    h.delete(0x1005, true);
    assert_eq!(
        h.sends(child, 1),
        Some((0x2007, true)),
        "removing the old one leaves the new one"
    );
    assert_eq!(h.sends(child, 0), Some((0x2000, false)), "worker 0 untouched");
    let out_workers: Vec<_> = h
        .table
        .ike_sa(IkeSaId(1))
        .unwrap()
        .sas
        .iter()
        .map(|s| h.table.sa(*s).unwrap().out_worker())
        .collect();
    assert_eq!(out_workers, [None, Some(1)]);
}

#[test]
fn a_waiting_outbound_sa_deleted_before_activation_never_sends() {
    let mut h = Harness::new(1);
    let child = h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    // A redundant SA of a rekey collision (RFC 7296 §2.8.1): deleted, never active.
    h.establish(&Est {
        rekeys: Some(0x1000),
        outbound_active: false,
        ..Est::new(1, "a", 0x1002, 0x2002)
    });
    h.delete(0x1002, false);
    assert_eq!(h.sends(child, 0), Some((0x2000, false)));
    assert!(!h.receives(0x1002));
    assert_eq!(h.table.outbound_active(h.now, 0x1002, 0x2002).unwrap(), None);
}

#[test]
fn delete_removes_both_halves_but_keeps_group_and_policies() {
    let mut h = Harness::new(2);
    let child = h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    assert_eq!(h.table.last_packets.len(), 1, "its last-packet time is filed for the engine");
    h.delete(0x1001, false);
    assert_eq!(h.inbound_total(), 0);
    assert_eq!(h.table.last_packets.len(), 0, "and goes with it");
    for k in 0..2 {
        assert_eq!(h.sends(child, k), None);
        assert_eq!(
            h.workers[k].spd().len(),
            1,
            "the policy stays (a trap or the next SA uses it)"
        );
    }
    assert!(!h.table.child_deleted(h.now, 0x1001, false), "once");
    assert_eq!(h.table.counts(), (1, 0, 1));
}

#[test]
fn an_ike_sa_deleted_takes_its_child_sas_and_only_them() {
    let mut h = Harness::new(2);
    let a = h.conn("a", true, "10.2.0.0/16");
    let b = h.conn("b", false, "10.3.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    h.establish(&Est {
        resource: Some(0),
        per_resource: true,
        ..Est::new(1, "a", 0x1002, 0x2002)
    });
    // A peer's rekey waiting for activation goes too.
    h.establish(&Est {
        rekeys: Some(0x1001),
        outbound_active: false,
        ..Est::new(1, "a", 0x1003, 0x2003)
    });
    h.establish(&Est {
        remote: ike_ts("10.3.0.0/16"),
        ..Est::new(2, "b", 0x1005, 0x2005)
    });
    assert_eq!(h.table.ike_sa_deleted(IkeSaId(1)), h.table.conn_id("a"));
    h.apply();
    assert!(!h.receives(0x1001) && !h.receives(0x1002) && !h.receives(0x1003));
    assert!(h.receives(0x1005));
    for k in 0..2 {
        assert_eq!(h.sends(a, k), None);
        assert_eq!(h.sends(b, k), Some((0x2005, false)));
    }
    assert!(h.table.ike_sa(IkeSaId(1)).is_none());
    assert!(h.table.conn(h.table.conn_id("a").unwrap()).unwrap().ike_sas.is_empty());
    assert_eq!(h.table.ike_sa_deleted(IkeSaId(1)), None);
}

/// The peer's NAT mapping changes (an authenticated IKE message from a new
/// port): ESP follows it on every worker — the fallback SA and a sub-SA —
/// keeping the SAs (and their sequence numbers); another IKE SA's
/// children stay where they were.
#[test]
fn a_peer_address_change_moves_its_esp_on_every_worker() {
    let mut h = Harness::new(2);
    let a = h.conn("a", true, "10.2.0.0/16");
    let b = h.conn("b", false, "10.3.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    h.establish(&Est { resource: Some(0), per_resource: true, ..Est::new(1, "a", 0x1002, 0x2002) });
    h.establish(&Est { remote: ike_ts("10.3.0.0/16"), ..Est::new(2, "b", 0x1005, 0x2005) });
    let moved: std::net::SocketAddr = "198.51.100.7:61000".parse().unwrap();
    let ike: std::net::SocketAddr = "198.51.100.7:61000".parse().unwrap();
    h.table.peer_address_changed(IkeSaId(1), "192.0.2.1:4500".parse().unwrap(), ike, moved);
    h.apply();
    for k in 0..2 {
        let g = h.workers[k].group(h.group(a)).unwrap();
        for sa in g.sub().into_iter().chain(g.fallback()) {
            assert_eq!(sa.peer(), moved, "worker {k} SPI {:#x}", sa.spi());
        }
        assert_ne!(h.workers[k].group(h.group(b)).unwrap().fallback().unwrap().peer(), moved);
    }
    assert_eq!(h.sends(a, 0), Some((0x2002, true)), "the same SAs");
    assert_eq!(h.table.ike_sa(IkeSaId(1)).unwrap().remote, ike);
    // An IPv6 endpoint for an IPv4 SA is refused by the SA: nothing moves.
    h.table.peer_address_changed(IkeSaId(1), "192.0.2.1:4500".parse().unwrap(), ike, "[2001:db8::7]:4500".parse().unwrap());
    h.apply();
    assert_eq!(h.workers[1].group(h.group(a)).unwrap().fallback().unwrap().peer(), moved);
}

#[test]
fn an_ike_sa_rekey_moves_its_child_sas() {
    let mut h = Harness::new(1);
    h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    h.table.ike_sa_rekeyed(IkeSaId(1), IkeSaId(9));
    assert_eq!(h.table.by_in_spi(0x1000).unwrap().1.ike_sa, Some(IkeSaId(9)));
    assert_eq!(
        h.table.soft_expire(0x1000, Direction::Inbound).as_slice(),
        [(IkeSaId(9), 0x1000)]
    );
    assert_eq!(
        h.table.conn(h.table.conn_id("a").unwrap()).unwrap().ike_sas,
        [IkeSaId(9)]
    );
    h.table.ike_sa_deleted(IkeSaId(9));
    h.apply();
    assert_eq!(h.inbound_total(), 0);
}

#[test]
fn an_uninstalled_trap_takes_its_policy_unless_an_sa_uses_it() {
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    assert!(!h.table.disarm_trap(child), "no trap to take");
    h.table.arm_trap(child);
    h.apply();
    let g = h.group(child);
    assert!(h.table.disarm_trap(child));
    h.apply();
    for k in 0..2 {
        assert_eq!(h.workers[k].spd().len(), 0, "policy gone with the trap");
        assert!(h.workers[k].group(g).is_none(), "group gone");
    }
    assert_eq!(h.table.acquire(h.now, g, None), None);
    // Armed again, an SA arrives, then the trap goes: the SA keeps its policy.
    h.table.arm_trap(child);
    h.apply();
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    let g = h.group(child);
    assert!(h.table.disarm_trap(child));
    h.apply();
    for k in 0..2 {
        assert_eq!(h.workers[k].spd().len(), 1, "the SA's policy stays");
    }
    assert_eq!(h.table.acquire(h.now + ACQUIRE_PENDING, g, None), None, "no trap, no acquire");
}

#[test]
fn a_trap_raises_one_acquire_until_its_sa_arrives() {
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.table.arm_trap(child);
    h.apply();
    let g = h.group(child);
    for k in 0..2 {
        assert_eq!(h.workers[k].spd().len(), 1, "trap policy");
        assert!(
            !h.workers[k].group(g).unwrap().per_cpu(),
            "a trap asks for the child, not for sub-SAs"
        );
    }
    let req = h.table.acquire(h.now, g, None).unwrap();
    assert_eq!(req, AcquireRequest { child, worker: None });
    h.table.acquire_started(h.now, req);
    assert_eq!(
        h.table.acquire(h.now + Duration::from_secs(1), g, None),
        None,
        "in flight"
    );
    assert!(
        h.table.acquire(h.now + ACQUIRE_PENDING, g, None).is_some(),
        "asked again when it took too long"
    );
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    for k in 0..2 {
        assert!(
            h.workers[k].group(g).unwrap().per_cpu(),
            "now the workers ask for their own sub-SAs"
        );
    }
    assert_eq!(
        h.table.acquire(h.now, g, None).map(|r| r.worker),
        Some(None),
        "the SA came: no longer in flight"
    );
    // A group with no trap never initiates the child as a whole.
    let other = h.conn("b", false, "10.3.0.0/16");
    h.establish(&Est {
        remote: ike_ts("10.3.0.0/16"),
        ..Est::new(2, "b", 0x1003, 0x2003)
    });
    assert_eq!(h.table.acquire(h.now, h.group(other), None), None);
    assert_eq!(h.table.acquire(h.now, 9999, None), None, "unknown group");
}

#[test]
fn per_cpu_acquires_follow_each_worker_and_stop_when_the_peer_gives_no_more() {
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    let g = h.group(child);
    let req = h.table.acquire(h.now, g, Some(1)).unwrap();
    h.table.acquire_started(h.now, req);
    assert_eq!(h.table.acquire(h.now, g, Some(1)), None, "in flight");
    assert!(h.table.acquire(h.now, g, Some(0)).is_some(), "each worker on its own");
    h.establish(&Est {
        resource: Some(1),
        per_resource: true,
        ..Est::new(1, "a", 0x1003, 0x2003)
    });
    assert_eq!(h.sends(child, 1), Some((0x2003, true)));
    assert_eq!(
        h.table.acquire(h.now + ACQUIRE_PENDING, g, Some(1)),
        None,
        "it has its own SA"
    );
    // A failed negotiation lets the worker ask again.
    let req = h.table.acquire(h.now, g, Some(0)).unwrap();
    h.table.acquire_started(h.now, req);
    h.table.child_failed(child);
    assert!(h.table.acquire(h.now, g, Some(0)).is_some());
    h.table.per_cpu_unavailable(child);
    h.apply();
    assert_eq!(h.table.acquire(h.now, g, Some(0)), None);
    assert!(!h.workers[0].group(g).unwrap().per_cpu());
    assert_eq!(
        h.sends(child, 0),
        Some((0x2000, false)),
        "the fallback carries worker 0"
    );
}

/// An inbound SPI that steers to worker `k` of `workers`.
fn on_worker(k: usize, workers: usize, random: u32) -> u32 {
    crate::datapath::spi_for_worker(random, k, workers).unwrap()
}

/// Both gateways ask for sub-SAs at once. The peer's SA is placed on the
/// worker it is received on (worker 1), not on worker 0, whose own SA is
/// on its way; when ours arrives it takes worker 0, and every worker sends
/// on the SA it receives on.
#[test]
fn the_peers_sub_sa_goes_to_the_worker_it_is_received_on() {
    let mut h = Harness::new(2);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    let g = h.group(child);
    let req = h.table.acquire(h.now, g, Some(0)).unwrap();
    h.table.acquire_started(h.now, req);
    let peers = Est {
        per_resource: true,
        ..Est::new(1, "a", on_worker(1, 2, 0x10_0000), 0x2003)
    };
    assert_eq!(h.establish(&peers), Slot::Worker(1));
    let ours = Est {
        resource: Some(0),
        per_resource: true,
        ..Est::new(1, "a", on_worker(0, 2, 0x20_0000), 0x2004)
    };
    assert_eq!(h.establish(&ours), Slot::Worker(0));
    assert_eq!(
        (h.sends(child, 0), h.sends(child, 1)),
        (Some((0x2004, true)), Some((0x2003, true)))
    );
    // Every Child SA the IKE SA lists sends where it says, and no two name one worker.
    let listed: Vec<Option<u16>> = h
        .table
        .ike_sa(IkeSaId(1))
        .unwrap()
        .sas
        .iter()
        .map(|s| h.table.sa(*s).unwrap().out_worker())
        .collect();
    assert_eq!(listed, [None, Some(1), Some(0)]);
}

/// The other order: the peer's SA received on worker 0 came first and
/// holds worker 0's slot when ours for worker 0 arrives. Ours is received
/// on only: worker 0 already sends on an SA the peer receives on its own
/// worker 0, and moving ours to another worker would send that worker's
/// flows to a peer worker that answers them on worker 0.
#[test]
fn our_sub_sa_finds_its_worker_taken_and_is_received_on_only() {
    let mut h = Harness::new(3);
    let child = h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1002, 0x2000));
    assert_eq!(
        h.establish(&Est {
            per_resource: true,
            ..Est::new(1, "a", on_worker(0, 3, 0x10_0000), 0x2003)
        }),
        Slot::Worker(0)
    );
    let ours = on_worker(0, 3, 0x20_0000);
    let est = Est {
        resource: Some(0),
        per_resource: true,
        ..Est::new(1, "a", ours, 0x2006)
    };
    assert_eq!(h.establish(&est), Slot::InboundOnly);
    assert_eq!(h.sends(child, 0), Some((0x2003, true)), "not replaced");
    assert!(h.receives(ours));
    assert_eq!(h.table.by_in_spi(ours).unwrap().1.out_worker(), None);
    assert_eq!(h.table.by_in_spi(ours).unwrap().1.role, Role::Sub);
    // The peer's SA received on worker 2 takes worker 2's slot; worker 1
    // still sends on the fallback.
    assert_eq!(
        h.establish(&Est {
            per_resource: true,
            ..Est::new(1, "a", on_worker(2, 3, 0x30_0000), 0x2009)
        }),
        Slot::Worker(2)
    );
    assert_eq!(h.sends(child, 1), Some((0x2000, false)));
    // Deleting the inbound-only SA touches no worker's outbound SA.
    h.delete(ours, false);
    assert_eq!(
        (h.sends(child, 0), h.sends(child, 1), h.sends(child, 2)),
        (Some((0x2003, true)), Some((0x2000, false)), Some((0x2009, true)))
    );
    // A second SA of the peer's received on worker 0: inbound only too.
    let extra = on_worker(0, 3, 0x40_0000);
    h.establish(&Est {
        per_resource: true,
        ..Est::new(1, "a", extra, 0x200e)
    });
    assert_eq!(h.table.by_in_spi(extra).unwrap().1.out_worker(), None);
    // A rekey of an inbound-only SA stays inbound only.
    let rk = Est {
        rekeys: Some(extra),
        ..Est::new(1, "a", 0x1011, 0x2011)
    };
    assert_eq!(h.establish(&rk), Slot::InboundOnly);
}

#[test]
fn a_soft_expiry_asks_for_one_rekey_per_child_sa() {
    let mut h = Harness::new(2);
    h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    // Every worker's copy of the fallback raises its own event.
    assert_eq!(
        h.table.soft_expire(0x2000, Direction::Outbound).as_slice(),
        [(IkeSaId(1), 0x1001)]
    );
    assert!(h.table.soft_expire(0x2000, Direction::Outbound).is_empty());
    assert!(h.table.soft_expire(0x1001, Direction::Inbound).is_empty());
    h.table.rekey_failed(0x1001);
    assert_eq!(h.table.soft_expire(0x1001, Direction::Inbound).len(), 1);
    assert!(h.table.soft_expire(0xdead, Direction::Inbound).is_empty());
}

/// A hard limit asks once for the Child SA's deletion, whichever
/// direction and however many workers report it.
#[test]
fn a_hard_expiry_asks_for_one_deletion_per_child_sa() {
    let mut h = Harness::new(2);
    h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    assert_eq!(
        h.table.hard_expire(0x2000, Direction::Outbound).as_slice(),
        [(IkeSaId(1), 0x1001)]
    );
    assert!(h.table.hard_expire(0x2000, Direction::Outbound).is_empty());
    assert!(h.table.hard_expire(0x1001, Direction::Inbound).is_empty());
    assert!(h.table.hard_expire(0xdead, Direction::Inbound).is_empty());
}

/// Two peers may choose the same outbound SPI: each is found in its own group.
#[test]
fn outbound_spis_of_two_peers_may_collide() {
    let mut h = Harness::new(1);
    let a = h.conn("a", false, "10.2.0.0/16");
    let b = h.conn("b", false, "10.3.0.0/16");
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    h.establish(&Est {
        remote: ike_ts("10.3.0.0/16"),
        ..Est::new(2, "b", 0x1001, 0x2000)
    });
    assert_eq!(
        h.table
            .label(0x2000, Direction::Outbound, Some(h.group(a)))
            .unwrap()
            .connection,
        "a"
    );
    assert_eq!(
        h.table
            .label(0x2000, Direction::Outbound, Some(h.group(b)))
            .unwrap()
            .connection,
        "b"
    );
    assert_eq!(h.table.soft_expire(0x2000, Direction::Outbound).len(), 2);
    h.delete(0x1000, false);
    assert_eq!(h.sends(b, 0), Some((0x2000, false)));
    assert_eq!(
        h.table
            .label(0x2000, Direction::Outbound, Some(h.group(b)))
            .unwrap()
            .connection,
        "b"
    );
}

#[test]
fn status_joins_worker_counters_by_spi() {
    let mut h = Harness::new(2);
    h.conn("a", true, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    h.establish(&Est {
        resource: Some(0),
        per_resource: true,
        ..Est::new(1, "a", 0x1002, 0x2002)
    });
    let mut counters = Counters::default();
    for w in &h.workers {
        for sa in w.stats().sas {
            counters.add(&sa);
        }
    }
    let l = h.table.label(0x1002, Direction::Inbound, None).unwrap();
    assert_eq!((l.connection, l.child, l.role), ("a", "net", Role::Sub));
    assert_eq!(
        h.table
            .label(
                0x2000,
                Direction::Outbound,
                Some(h.group(h.table.child_id("a", "net").unwrap()))
            )
            .unwrap()
            .role,
        Role::Fallback
    );
    let s = h.table.ike_sas_status(h.now, &counters, 4500);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].connection, "a");
    // ESP-in-UDP from our port to the group's peer; no packet yet either way.
    let nat = &s[0].nat;
    assert_eq!((nat.encap.as_str(), nat.local_port, nat.remote_port), ("esp-in-udp", 4500, 4500));
    assert!(s[0].children.iter().all(|c| c.in_idle_s.is_none() && c.out_idle_s.is_none()));
    let c: Vec<(&str, &str, Option<u16>, Option<u16>)> = s[0]
        .children
        .iter()
        .map(|c| (c.in_spi.as_str(), c.role.as_str(), c.in_worker, c.out_worker))
        .collect();
    assert_eq!(
        c,
        [
            ("00001001", "fallback", Some(1), None),
            ("00001002", "sub", Some(0), Some(0))
        ]
    );
    let c = &s[0].children[0];
    assert_eq!(
        (c.out_state.as_str(), c.local_ts.as_slice(), c.remote_ts.as_slice()),
        (
            "sending",
            &["10.1.0.0/16".to_string()][..],
            &["10.2.0.0/16".to_string()][..]
        )
    );
}

#[test]
fn removing_a_connection_removes_its_children_policies_groups_and_sas() {
    let mut h = Harness::new(2);
    let a = h.conn("a", true, "10.2.0.0/16");
    let b = h.conn("b", false, "10.3.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2000));
    h.establish(&Est {
        resource: Some(1),
        per_resource: true,
        ..Est::new(1, "a", 0x1003, 0x2003)
    });
    h.establish(&Est {
        rekeys: Some(0x1001),
        ..Est::new(1, "a", 0x1005, 0x2005)
    });
    h.delete(0x1001, true);
    h.establish(&Est {
        remote: ike_ts("10.3.0.0/16"),
        ..Est::new(2, "b", 0x1007, 0x2007)
    });
    let ga = h.group(a);
    let conn = h.table.conn_id("a").unwrap();
    h.table.remove_conn(conn);
    h.apply();
    for k in 0..2 {
        assert!(h.workers[k].group(ga).is_none());
        assert_eq!(h.workers[k].spd().len(), 1, "b's policy alone");
        assert_eq!(h.sends(b, k), Some((0x2007, false)));
    }
    assert!(h.receives(0x1007));
    assert_eq!(h.inbound_total(), 1, "the lingering one went too");
    assert_eq!(h.table.conn_id("a"), None);
    assert!(h.table.child_id("a", "net").is_none());
    assert!(h.table.ike_sa(IkeSaId(1)).is_none());
    assert_eq!(h.table.counts(), (1, 1, 1));
    assert_eq!(h.table.acquire(h.now, ga, Some(0)), None);
    // Its lingering timer finds nothing to do.
    assert_eq!(h.table.expire_lingering(h.now + LINGER), 0);
    // A new connection gets a new group id.
    let c = h.conn("c", false, "10.4.0.0/16");
    h.establish(&Est {
        remote: ike_ts("10.4.0.0/16"),
        ..Est::new(3, "c", 0x1009, 0x2009)
    });
    assert_ne!(h.group(c), ga);
}

#[test]
fn a_route_goes_when_no_child_wants_it() {
    let mut h = Harness::new(1);
    let p = |s: &str| -> Prefix {
        let (a, l) = s.split_once('/').unwrap();
        (a.parse().unwrap(), l.parse().unwrap())
    };
    h.conn("a", false, "10.2.0.0/16");
    h.conn("b", false, "10.2.0.0/16");
    h.conn("c", false, "10.3.0.0/16");
    h.establish(&Est::new(1, "a", 0x1001, 0x2001));
    h.establish(&Est::new(2, "b", 0x1003, 0x2003));
    h.establish(&Est {
        remote: ike_ts("10.3.0.0/16"),
        ..Est::new(3, "c", 0x1005, 0x2005)
    });
    // Configured and negotiated, by two children.
    assert_eq!(h.table.routed().get(&p("10.2.0.0/16")), Some(&4));
    // An IKE SA going keeps the group, its policies and its routes (a
    // trap or the next IKE SA uses them).
    h.table.ike_sa_deleted(IkeSaId(1));
    h.table.flush_unroutes();
    h.apply();
    assert!(h.unrouted.is_empty());
    // b still wants 10.2.0.0/16.
    h.table.remove_conn(h.table.conn_id("a").unwrap());
    h.table.flush_unroutes();
    h.apply();
    assert!(h.unrouted.is_empty(), "{:?}", h.unrouted);
    // A connection dropped and loaded again before the flush (a reload
    // that changes it) keeps its routes throughout.
    h.table.remove_conn(h.table.conn_id("b").unwrap());
    h.apply();
    h.conn("b", false, "10.2.0.0/16");
    h.table.flush_unroutes();
    h.apply();
    assert!(h.unrouted.is_empty(), "{:?}", h.unrouted);
    h.table.remove_conn(h.table.conn_id("b").unwrap());
    h.table.flush_unroutes();
    h.apply();
    assert_eq!(h.unrouted, [p("10.2.0.0/16")]);
    // Narrowed selectors: the new route in; the configured one stays
    // (its traffic is dropped in the device, not sent elsewhere).
    h.establish(&Est {
        remote: ike_ts("10.3.1.0/24"),
        rekeys: Some(0x1005),
        ..Est::new(3, "c", 0x1007, 0x2007)
    });
    assert_eq!(h.unrouted, [p("10.2.0.0/16")]);
    let mut routed: Vec<_> = h.table.routed().iter().map(|(k, v)| (*k, *v)).collect();
    routed.sort_unstable();
    assert_eq!(routed, [(p("10.3.0.0/16"), 1), (p("10.3.1.0/24"), 1)]);
}

#[test]
fn changed_selectors_replace_the_policies() {
    let mut h = Harness::new(1);
    let child = h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    h.establish(&Est {
        remote: ike_ts("10.2.1.0/24"),
        rekeys: Some(0x1000),
        ..Est::new(1, "a", 0x1002, 0x2002)
    });
    let spd = h.workers[0].spd();
    assert_eq!(spd.len(), 1);
    let p = spd.iter().next().unwrap().1;
    assert_eq!(p.remote, ts("10.2.1.0/24"));
    assert_eq!(p.action, esparto_esp::Action::Protect(h.group(child)));
}

#[test]
fn a_static_child_installs_fallback_subs_and_inbound_only_pairs() {
    let mut h = Harness::new(2);
    let child = h.conn("s", false, "10.2.0.0/16");
    let pair = |i: u32| StaticPair {
        in_spi: 0x100 + i,
        out_spi: 0x200 + i,
        in_key: key(i as u8),
        out_key: key(0x80 + i as u8),
    };
    let st = StaticSas {
        suite: SUITE,
        esn: false,
        pairs: (0..4).map(pair).collect(),
    };
    let claims: Vec<Claimed> = (0..4)
        .map(|_| Claimed {
            limit: esparto_esp::SeqLimit::new(0),
            shared: esparto_esp::SharedSeq::after(0),
        })
        .collect();
    h.table.install_static(h.now, child, &st, |i| claims.get(i)).unwrap();
    h.apply();
    assert_eq!(
        (h.sends(child, 0), h.sends(child, 1)),
        (Some((0x201, true)), Some((0x202, true)))
    );
    assert_eq!(
        h.workers[0].group(h.group(child)).unwrap().fallback().unwrap().spi(),
        0x200
    );
    assert_eq!(h.inbound_total(), 4, "the pair beyond the workers is received on");
    let roles: Vec<Role> = (0..4).map(|i| h.table.by_in_spi(0x100 + i).unwrap().1.role).collect();
    assert_eq!(roles, [Role::Fallback, Role::Sub, Role::Sub, Role::Sub]);
    assert!(
        h.table.soft_expire(0x100, Direction::Inbound).is_empty(),
        "static keys never rekey"
    );
    assert_eq!(h.table.acquire(h.now, h.group(child), Some(0)), None);
    // Without a reservation a static SA is never sent on.
    let mut h = Harness::new(1);
    let child = h.conn("s", false, "10.2.0.0/16");
    let st = StaticSas {
        suite: SUITE,
        esn: false,
        pairs: vec![pair(0)],
    };
    assert!(h.table.install_static(h.now, child, &st, |_| None).is_err());
}

#[test]
fn an_sa_for_an_unknown_child_or_with_a_bad_key_installs_nothing() {
    let mut h = Harness::new(1);
    h.conn("a", false, "10.2.0.0/16");
    assert!(
        h.table
            .child_established(h.now, &Est::new(1, "nope", 0x1000, 0x2000).event(), peer())
            .is_err()
    );
    let mut ev = Est::new(1, "a", 0x1000, 0x2000).event();
    ev.inbound_key = SecretBytes::from_slice(&[1, 2, 3]);
    assert!(h.table.child_established(h.now, &ev, peer()).is_err());
    h.apply();
    assert_eq!(h.inbound_total(), 0);
    assert!(h.table.by_in_spi(0x1000).is_none());
    let mut ev = Est::new(1, "a", 0x1000, 0x2000).event();
    ev.outbound_key = SecretBytes::from_slice(&[1, 2, 3]);
    assert!(h.table.child_established(h.now, &ev, peer()).is_err());
    h.apply();
    assert_eq!(h.inbound_total(), 0, "the inbound half went again");
    assert_eq!(h.table.counts().1, 0);
}

/// A configuration with one IKE connection `a` whose children `net`
/// (10.2.0.0/16) and `web` (10.3.0.0/16) have this start action.
fn ike_config(start_action: &str) -> crate::config::Config {
    let text = format!(
        r#"
[daemon]
workers = 1
[connections.a]
local_addrs = ["192.0.2.1"]
remote_addrs = ["192.0.2.2"]
version = 2
proposals = ["aes256gcm16-prfsha256-x25519"]
local.auth = "psk"
local.id = "@west"
remote.auth = "psk"
remote.id = "@east"
[connections.a.children.net]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.2.0.0/16"]
esp_proposals = ["aes256gcm16"]
start_action = "{start_action}"
[connections.a.children.web]
local_ts = ["10.1.0.0/16"]
remote_ts = ["10.3.0.0/16"]
esp_proposals = ["aes256gcm16"]
start_action = "{start_action}"
[secrets.a]
ids = ["@west", "@east"]
secret = "a secret that is long enough"
"#
    );
    crate::config::parse_str(&text, "west.toml").unwrap()
}

#[test]
fn deferred_start_children_are_taken_once_in_their_order() {
    let mut h = Harness::new(1);
    let cfg = ike_config("start");
    let a = h.table.add_configured(&cfg.connections[0], peer().ip());
    let (net, web) = (h.table.child_id("a", "net").unwrap(), h.table.child_id("a", "web").unwrap());
    h.table.defer_start(web);
    h.table.defer_start(net);
    assert_eq!(h.table.take_deferred_starts(a), [net, web]);
    assert_eq!(h.table.take_deferred_starts(a), []);
}

#[test]
fn an_ike_sa_is_its_connections_from_initiation_to_its_end() {
    let mut h = Harness::new(1);
    h.conn("a", false, "10.2.0.0/16");
    let a = h.table.conn_id("a").unwrap();
    assert_eq!(h.table.ike_sa_owner(IkeSaId(5)), None);
    h.table.ike_sa_initiated(IkeSaId(5), a);
    h.table.ike_sa_initiated(IkeSaId(5), a);
    assert_eq!(h.table.ike_sa_owner(IkeSaId(5)), Some("a"));
    assert_eq!(h.table.conn(a).unwrap().initiating, [IkeSaId(5)], "noted once");
    assert!(h.table.ike_sa(IkeSaId(5)).is_none(), "not listed before it is established");
    // Established: a record, no longer being negotiated.
    h.establish(&Est::new(5, "a", 0x1000, 0x2000));
    assert_eq!(h.table.ike_sa_owner(IkeSaId(5)), Some("a"));
    assert!(h.table.conn(a).unwrap().initiating.is_empty());
    h.table.ike_sa_initiated(IkeSaId(5), a);
    assert!(h.table.conn(a).unwrap().initiating.is_empty(), "an established IKE SA is not noted again");
    assert_eq!(h.table.ike_sa_deleted(IkeSaId(5)), Some(a));
    assert_eq!(h.table.ike_sa_owner(IkeSaId(5)), None);
    // One that fails before it is established leaves nothing either, and
    // is reported as never established.
    h.table.ike_sa_initiated(IkeSaId(6), a);
    assert_eq!(h.table.ike_sa_deleted(IkeSaId(6)), None);
    assert_eq!(h.table.ike_sa_owner(IkeSaId(6)), None);
    assert!(h.table.conn(a).unwrap().initiating.is_empty());
}

#[test]
fn a_removed_connection_leaves_no_ike_driver_state_behind() {
    let mut h = Harness::new(1);
    let local_ip = peer().ip();
    let cfg = ike_config("start");
    let a = h.table.add_configured(&cfg.connections[0], local_ip);
    let actions = h.table.conn(a).unwrap().actions;
    assert_eq!(actions, Some(Actions { dpd: esparto_ike::DpdAction::Restart, close: esparto_ike::CloseAction::Start }));
    h.table.defer_start(h.table.child_id("a", "web").unwrap());
    h.table.ike_sa_initiated(IkeSaId(5), a);
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    h.table.remove_conn(a);
    h.apply();
    assert!(h.table.conn(a).is_none());
    for id in [1, 5] {
        assert_eq!(h.table.ike_sa_owner(IkeSaId(id)), None, "IKE SA {id}");
        assert!(h.table.is_retired(IkeSaId(id)), "IKE SA {id}");
    }
    // The connection comes back changed, under the same name (and here
    // the same slot): nothing of the old one is carried over.
    let cfg = ike_config("trap");
    let again = h.table.add_configured(&cfg.connections[0], local_ip);
    assert_eq!(again, a, "the slab reuses the slot");
    assert_eq!(h.table.take_deferred_starts(again), []);
    assert!(h.table.conn(again).unwrap().initiating.is_empty() && h.table.conn(again).unwrap().ike_sas.is_empty());
    let actions = h.table.conn(again).unwrap().actions;
    assert_eq!(actions, Some(Actions { dpd: esparto_ike::DpdAction::Clear, close: esparto_ike::CloseAction::None }));
    // A connection without IKE has no actions.
    let static_only = h.table.add_conn("static");
    assert_eq!(h.table.conn(static_only).unwrap().actions, None);
}

#[test]
fn events_of_a_retired_ike_sa_do_not_reach_the_table() {
    let mut h = Harness::new(1);
    h.conn("a", false, "10.2.0.0/16");
    h.establish(&Est::new(1, "a", 0x1000, 0x2000));
    let a = h.table.conn_id("a").unwrap();
    // A reload changes `a`: the engine retires IKE SA 1 and a half-open
    // one (7) the table never heard of.
    h.table.retire_ike_sas([IkeSaId(1), IkeSaId(7)]);
    h.table.remove_conn(a);
    h.conn("a", false, "10.2.0.0/16");
    h.apply();
    let up = IkeSaUp {
        local: peer(),
        remote: peer(),
        local_id: "@west".into(),
        remote_id: "@east".into(),
        initiator: true,
    };
    let a = h.table.conn_id("a").unwrap();
    for id in [1, 7] {
        h.table.ike_sa_up(h.now, IkeSaId(id), a, &up);
        assert!(h.table.ike_sa(IkeSaId(id)).is_none(), "IKE SA {id}: no record");
        let ev = Est::new(id, "a", 0x1000 + id as u32, 0x2000).event();
        assert!(h.table.child_established(h.now, &ev, peer()).is_err(), "IKE SA {id}");
    }
    h.apply();
    assert_eq!(h.inbound_total(), 0);
    assert_eq!(h.table.counts(), (1, 0, 0));
    assert!(h.table.conn(a).unwrap().ike_sas.is_empty());
    // A rekey passes retirement on; the end of the IKE SA ends it.
    h.table.retired_ike_sa_rekeyed(IkeSaId(1), IkeSaId(3));
    assert!(!h.table.is_retired(IkeSaId(1)) && h.table.is_retired(IkeSaId(3)));
    assert!(h.table.child_established(h.now, &Est::new(3, "a", 0x1003, 0x2000).event(), peer()).is_err());
    h.table.retired_ike_sa_deleted(IkeSaId(3));
    h.table.retired_ike_sa_deleted(IkeSaId(7));
    assert!(!h.table.is_retired(IkeSaId(3)) && !h.table.is_retired(IkeSaId(7)));
    // The new configuration's own IKE SAs are the table's as ever.
    h.establish(&Est::new(2, "a", 0x1002, 0x2002));
    assert!(h.receives(0x1002));
    assert_eq!(h.table.conn(a).unwrap().ike_sas, [IkeSaId(2)]);
}
