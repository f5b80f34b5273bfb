//! The IKE driver's reactions: engine events (RFC 7296) and data-plane
//! events (acquires, expiries), each mapped onto the gateway.
//!
//! | engine event | data plane |
//! | --- | --- |
//! | `ChildSaEstablished` | group for the child; inbound SA now; outbound now, or on `ChildSaOutboundActive` |
//! | `ChildSaOutboundActive` | start sending on the new outbound SA (its slot) |
//! | `ChildSaDeleted` | outbound SA removed; inbound removed now, or after [`LINGER`] for a rekey |
//! | `IkeSaDeleted` | every pair removed; `dpd_action` / `close_action` trap: trap policies (a restart is the engine's own) |
//! | `PerResourceUnavailable` | the child's workers stop asking for sub-SAs |
//!
//! | data-plane event | engine |
//! | --- | --- |
//! | `Acquire` without worker (trap) | `acquire(conn, child, None)` |
//! | `Acquire` for worker k | `acquire(conn, child, Some(k))` (RFC 9611) |
//! | soft `Expire` (bytes/packets) | `rekey_child` |
//! | `UnknownSpi` (ESP from a peer, SPI unknown) | `handle_unknown_esp`: maybe an INVALID_SPI to the peer (RFC 7296 §1.5) |

use std::net::SocketAddr;
use std::time::Instant;

use esparto_esp::{Direction, Event as DpEvent, Expiry, GroupId};
use esparto_ike::{AfterDeath, ChildSaEstablished, Event, InitiateError, Reason};
use crate::datapath::WorkerEvent;
use tracing::{debug, info, warn};

use super::Gateway;
use super::ike::{ACQUIRE_PENDING, ChildRecord, Ike, IkeRecord, LINGER, PendingOut};
use super::install::{ChildParams, SaPair, Slot};
use super::log_limit::TRAFFIC;

impl Ike {
    pub(super) fn on_event(&mut self, now: Instant, gw: &mut Gateway, ev: Event) {
        match ev {
            Event::IkeSaEstablished { ike_sa, connection, local, remote, local_id, remote_id, initiator } => {
                info!(%ike_sa, %connection, %remote, %remote_id, "IKE SA established");
                let rec = self.sas.entry(ike_sa).or_insert_with(|| IkeRecord {
                    connection: connection.clone(),
                    local,
                    remote,
                    local_id: local_id.to_string(),
                    remote_id: remote_id.to_string(),
                    initiator,
                    since: now,
                    established: true,
                    children: Vec::new(),
                });
                rec.established = true;
                rec.local_id = local_id.to_string();
                rec.remote_id = remote_id.to_string();
                if let Some(rest) = self.start_after.remove(&*connection) {
                    for child in rest {
                        if let Err(e) = self.ep.acquire(now, &connection, &child, None) {
                            warn!(%connection, %child, error = ?e, "starting child failed");
                        }
                    }
                }
            }
            Event::ChildSaEstablished(c) => self.install(now, gw, *c),
            Event::ChildSaOutboundActive { ike_sa, connection, child, inbound_spi, outbound_spi } => {
                let Some(p) = self.pending_out.remove(&inbound_spi) else { return };
                if p.out_spi != outbound_spi {
                    warn!(%ike_sa, expected = %format!("{:08x}", p.out_spi), got = %format!("{outbound_spi:08x}"), "outbound SPI changed between announcement and activation");
                }
                // Only the outbound half is installed here (`set_outbound`
                // reads `out_*` and the slot); the inbound half is in place.
                let pair = SaPair {
                    suite: p.suite,
                    esn: p.esn,
                    in_spi: inbound_spi,
                    out_spi: outbound_spi,
                    in_key: &p.out_key,
                    out_key: &p.out_key,
                    slot: p.slot,
                };
                match gw.set_outbound(&connection, &child, &pair) {
                    Ok(slot) => {
                        debug!(%ike_sa, %connection, %child, out_spi = %format!("{outbound_spi:08x}"), "sending on the rekeyed SA");
                        if let Some(r) = self.sas.get_mut(&ike_sa).and_then(|r| r.children.iter_mut().find(|c| c.in_spi == inbound_spi)) {
                            r.slot = slot;
                        }
                    }
                    Err(e) => warn!(%connection, %child, error = %format!("{e:#}"), "activating outbound SA"),
                }
            }
            Event::ChildSaDeleted { ike_sa, connection, child, inbound_spi, outbound_spi, reason } => {
                info!(%ike_sa, %connection, %child, in_spi = %format!("{inbound_spi:08x}"), out_spi = %format!("{outbound_spi:08x}"), ?reason, "Child SA deleted");
                self.forget_child(ike_sa, inbound_spi, outbound_spi);
                // The new SA (if this was a rekey) took the outbound slot already.
                if let Err(e) = gw.remove_outbound(&connection, &child, outbound_spi) {
                    warn!(error = %e, "removing outbound SA");
                }
                if reason == Reason::Rekeyed {
                    self.lingering.push((now + LINGER, connection.to_string(), child.to_string(), inbound_spi));
                } else if let Err(e) = gw.remove_inbound(&connection, &child, inbound_spi) {
                    warn!(error = %e, "removing inbound SA");
                }
            }
            Event::IkeSaDeleted { ike_sa, connection, reason } => {
                info!(%ike_sa, connection = ?connection, ?reason, "IKE SA deleted");
                if let Some(rec) = self.sas.remove(&ike_sa) {
                    // Children die with their IKE SA (RFC 7296 §1.4.1).
                    for c in rec.children {
                        self.by_in_spi.remove(&c.in_spi);
                        self.out_to_in.remove(&c.out_spi);
                        self.pending_out.remove(&c.in_spi);
                        self.rekeying.remove(&c.in_spi);
                        let _ = gw.remove_pair(&rec.connection, &c.child, c.in_spi, c.out_spi);
                    }
                }
                if let Some(conn) = connection {
                    // Children still waiting for the connection's first IKE
                    // SA: a re-initiation brings them itself (the engine
                    // initiates every `start` child of the connection).
                    self.start_after.remove(&*conn);
                    self.after_death(gw, &conn, reason);
                }
            }
            Event::ChildSaFailed { ike_sa, connection, child, reason } => {
                // The peer's answer to each request: limited (`log_limit`).
                warn!(target: TRAFFIC, %ike_sa, %connection, child = ?child, ?reason, "Child SA negotiation failed");
                if let Some(child) = child {
                    self.pending.retain(|(c, ch, _), _| !(**c == *connection && **ch == *child));
                }
            }
            Event::AuthFailed { ike_sa, peer, identity, reason } => {
                // Anyone can cause one per message: limited (`log_limit`).
                warn!(target: TRAFFIC, %ike_sa, %peer, identity = ?identity.map(|i| i.to_string()), ?reason, "IKE authentication failed");
            }
            Event::IkeSaRekeyed { old, new, connection } => {
                // RFC 7296 §1.3.2: the new IKE SA inherits every Child SA.
                info!(%old, %new, %connection, "IKE SA rekeyed");
                if let Some(rec) = self.sas.remove(&old) {
                    for c in &rec.children {
                        self.by_in_spi.insert(c.in_spi, new);
                    }
                    self.sas.insert(new, rec);
                }
            }
            Event::PerResourceUnavailable { ike_sa, connection, child, reason } => {
                info!(%ike_sa, %connection, %child, ?reason, "no (more) per-CPU Child SAs: workers without one use the fallback SA");
                self.per_cpu_off.insert((connection.to_string(), child.to_string()));
                if let Err(e) = gw.set_per_cpu(&connection, &child, false) {
                    warn!(error = %e, "stopping per-CPU acquires");
                }
            }
            Event::PeerAddressChanged { ike_sa, local, remote } => {
                info!(%ike_sa, %local, %remote, "peer address changed");
                if let Some(r) = self.sas.get_mut(&ike_sa) {
                    r.local = local;
                    r.remote = remote;
                }
            }
        }
    }

    fn forget_child(&mut self, ike_sa: esparto_ike::IkeSaId, in_spi: u32, out_spi: u32) {
        self.by_in_spi.remove(&in_spi);
        self.out_to_in.remove(&out_spi);
        self.pending_out.remove(&in_spi);
        self.rekeying.remove(&in_spi);
        if let Some(r) = self.sas.get_mut(&ike_sa) {
            r.children.retain(|c| c.in_spi != in_spi);
        }
    }

    /// What the end of an IKE SA calls for (`dpd_action` on a dead peer,
    /// `close_action` on the peer's Delete): a restart the engine schedules
    /// itself (with back-off); trap policies are ours to install.
    fn after_death(&mut self, gw: &mut Gateway, conn: &str, reason: Reason) {
        let Some(&(dpd, close)) = self.actions.get(conn) else { return };
        match esparto_ike::lifetime::after_death(dpd, close, reason) {
            AfterDeath::Nothing => {}
            AfterDeath::Initiate => info!(connection = %conn, ?reason, "the connection will be initiated again"),
            AfterDeath::Trap => {
                info!(connection = %conn, ?reason, "traffic will initiate the connection again (trap)");
                let children: Vec<String> =
                    self.settings.keys().filter(|(c, _)| c == conn).map(|(_, ch)| ch.clone()).collect();
                for child in children {
                    if let Err(e) = self.install_trap(gw, conn, &child) {
                        warn!(connection = %conn, %child, error = %format!("{e:#}"), "installing trap");
                    }
                }
            }
        }
    }

    fn install(&mut self, now: Instant, gw: &mut Gateway, c: ChildSaEstablished) {
        let key = (c.connection.to_string(), c.child.to_string());
        self.pending.remove(&(key.0.clone(), key.1.clone(), c.resource));
        self.pending.remove(&(key.0.clone(), key.1.clone(), None));
        let Some(settings) = self.settings.get(&key).cloned() else {
            warn!(connection = %c.connection, child = %c.child, "Child SA for an unknown child: not installed");
            return;
        };
        // ESP always travels in UDP (RFC 3948) to the peer's NAT-T port.
        let peer_port = if c.remote.port() == self.ike_port { self.natt_port } else { c.remote.port() };
        let per_cpu = settings.per_cpu && !self.per_cpu_off.contains(&key);
        let params = ChildParams {
            local_ts: c.local_ts.iter().map(to_esp_ts).collect(),
            remote_ts: c.remote_ts.iter().map(to_esp_ts).collect(),
            peer: SocketAddr::new(c.remote.ip(), peer_port),
            replay_window: settings.replay_window,
            lifetime: settings.lifetime,
            per_cpu,
        };
        // A rekeyed SA takes its predecessor's slot (a sub-SA keeps its worker).
        let inherited = c.rekeys.and_then(|old| {
            self.sas.get(&c.ike_sa).and_then(|r| r.children.iter().find(|ch| ch.in_spi == old)).map(|ch| ch.slot)
        });
        let slot = match (inherited, c.resource, c.per_resource) {
            (Some(s), _, _) => s,
            (None, Some(k), _) => Slot::Worker(k),
            (None, None, true) => Slot::AnyFreeWorker,
            (None, None, false) => Slot::Fallback,
        };
        let pair = SaPair {
            suite: c.suite,
            esn: c.esn,
            in_spi: c.inbound_spi,
            out_spi: c.outbound_spi,
            in_key: &c.inbound_key,
            out_key: &c.outbound_key,
            slot,
        };
        let r = gw
            .ensure_child(&c.connection, &c.child, params)
            .and_then(|_| gw.set_per_cpu(&c.connection, &c.child, per_cpu))
            .and_then(|()| gw.add_inbound(&c.connection, &c.child, &pair))
            .and_then(|()| {
                if c.outbound_active {
                    gw.set_outbound(&c.connection, &c.child, &pair)
                } else {
                    // The peer initiated this rekey: it switches to the new
                    // SA when it deletes the old one; until then we keep
                    // sending on the old one (RFC 7296 §2.8).
                    self.pending_out.insert(
                        c.inbound_spi,
                        PendingOut {
                            suite: c.suite,
                            esn: c.esn,
                            out_spi: c.outbound_spi,
                            out_key: esparto_crypto::SecretBytes::from_slice(c.outbound_key.as_slice()),
                            slot,
                        },
                    );
                    Ok(slot)
                }
            });
        match r {
            Ok(slot) => {
                info!(
                    connection = %c.connection, child = %c.child, ike_sa = %c.ike_sa, suite = c.suite.name(),
                    in_spi = %format!("{:08x}", c.inbound_spi), out_spi = %format!("{:08x}", c.outbound_spi),
                    ?slot, rekey = c.rekeys.is_some(), "Child SA installed"
                );
                self.by_in_spi.insert(c.inbound_spi, c.ike_sa);
                self.out_to_in.insert(c.outbound_spi, c.inbound_spi);
                let rec = self.sas.entry(c.ike_sa).or_insert_with(|| IkeRecord {
                    connection: c.connection.clone(),
                    local: c.local,
                    remote: c.remote,
                    local_id: String::new(),
                    remote_id: String::new(),
                    initiator: c.initiator,
                    since: now,
                    established: true,
                    children: Vec::new(),
                });
                rec.children.push(ChildRecord {
                    child: c.child.clone(),
                    in_spi: c.inbound_spi,
                    out_spi: c.outbound_spi,
                    suite: c.suite.name(),
                    slot,
                    since: now,
                });
            }
            Err(e) => warn!(connection = %c.connection, child = %c.child, error = %format!("{e:#}"), "installing Child SA failed"),
        }
    }

    /// An event from a worker: acquires and lifetimes.
    pub fn on_dataplane(&mut self, now: Instant, gw: &mut Gateway, ev: WorkerEvent) {
        match ev.event {
            DpEvent::Acquire { group, worker } => self.on_acquire(now, gw, group, worker),
            DpEvent::Expire { spi, direction, kind: Expiry::Soft } => {
                let in_spi = match direction {
                    Direction::Inbound => Some(spi),
                    Direction::Outbound => self.out_to_in.get(&spi).copied(),
                };
                let Some(in_spi) = in_spi else { return };
                let Some(&ike_sa) = self.by_in_spi.get(&in_spi) else { return };
                // Every worker's copy of a fallback SA raises its own event.
                if !self.rekeying.insert(in_spi) {
                    return;
                }
                info!(%ike_sa, in_spi = %format!("{in_spi:08x}"), ?direction, "SA reached its byte/packet soft limit: rekeying");
                if let Err(e) = self.ep.rekey_child(now, ike_sa, in_spi) {
                    warn!(%ike_sa, error = ?e, "rekey failed");
                    self.rekeying.remove(&in_spi);
                }
                self.flush(now, gw);
            }
            DpEvent::Expire { spi, direction, kind: Expiry::Hard } => {
                warn!(spi = %format!("{spi:08x}"), ?direction, "SA reached a hard limit; it carries no more traffic");
            }
            DpEvent::UnknownSpi { spi, peer } => {
                // The engine decides (a configured peer with no IKE SA)
                // and rate-limits; the source port is the peer's NAT-T port.
                let local = gw.udp_control().local_addr();
                self.ep.handle_unknown_esp(now, local, peer, spi);
                self.flush(now, gw);
            }
        }
    }

    /// A worker has traffic for a group with no SA (a trap), or without
    /// its own sub-SA (per-CPU, RFC 9611).
    fn on_acquire(&mut self, now: Instant, gw: &mut Gateway, group: GroupId, worker: Option<u16>) {
        let (conn, child) = match (self.traps.get(&group), gw.child_of_group(group)) {
            (Some((c, ch)), _) => (c.clone(), ch.clone()),
            (None, Some((c, ch))) if worker.is_some() => (c.to_string(), ch.to_string()),
            _ => return,
        };
        if worker.is_some() && self.per_cpu_off.contains(&(conn.clone(), child.clone())) {
            return;
        }
        let key = (conn.clone(), child.clone(), worker);
        if self.pending.get(&key).is_some_and(|t| now.duration_since(*t) < ACQUIRE_PENDING) {
            return;
        }
        match self.ep.acquire(now, &conn, &child, worker) {
            Ok(id) => {
                info!(connection = %conn, child = %child, ike_sa = %id, ?worker, "acquire: negotiating");
                self.pending.insert(key, now);
            }
            Err(InitiateError::PerResourceUnavailable(reason)) => {
                info!(connection = %conn, child = %child, ?reason, "no per-CPU Child SAs from this peer");
                self.per_cpu_off.insert((conn.clone(), child.clone()));
                let _ = gw.set_per_cpu(&conn, &child, false);
            }
            // Traffic raises acquires; a failing one recurs: limited.
            Err(e) => warn!(target: TRAFFIC, connection = %conn, child = %child, ?worker, error = ?e, "acquire failed"),
        }
        self.flush(now, gw);
    }
}

/// An IKE traffic selector as the data plane's.
fn to_esp_ts(ts: &esparto_ike::TrafficSelector) -> esparto_esp::TrafficSelector {
    let addrs = esparto_esp::IpRange::new(ts.start, ts.end).unwrap_or_else(|_| {
        // The engine only produces ranges with both ends of one family and
        // in order; fall back to the start host rather than panic.
        esparto_esp::IpRange::host(ts.start)
    });
    esparto_esp::TrafficSelector { addrs, proto: ts.protocol, port_start: ts.start_port, port_end: ts.end_port }
}
