//! The IKE driver's reactions: engine events (RFC 7296) and data-plane
//! events (acquires, expiries), each a transition of the Child SA table
//! (`table/events.rs` says what each does to it) whose commands go to the
//! workers at once, and, for data-plane events, a request to the engine.
//!
//! | data-plane event | engine |
//! | --- | --- |
//! | `Acquire` without worker (trap) | `acquire(conn, child, None)` |
//! | `Acquire` for worker k | `acquire(conn, child, Some(k))` (RFC 9611) |
//! | soft `Expire` (bytes/packets) | `rekey_child` |
//! | `UnknownSpi` (ESP from a peer, SPI unknown) | `handle_unknown_esp`: maybe an INVALID_SPI to the peer (RFC 7296 §1.5) |
//!
//! The commands of an engine event are sent before the engine's next
//! datagram leaves (`Ike::flush` handles events first): a responder's new
//! inbound SA is on its way to the workers before the response that lets
//! the peer send on it (make-before-break; a worker applies commands
//! before the ESP that follows them, see `esparto_io::worker`).
//!
//! An event of an IKE SA a reload retired reaches neither the table nor
//! the workers ([`Ike::on_retired`]). Around every other event, the log
//! lines queued for `esparto up` are filed with its watches while the
//! table still knows what the lines are about (`watch.rs`): before the
//! event (an IKE SA that failed is still one being negotiated) and after
//! it (a new one is known).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::datapath::WorkerEvent;
use esparto_esp::{Event as DpEvent, Expiry, GroupId};
use esparto_ike::{AfterDeath, AuthFailure, ChildSaEstablished, Event, IkeSaId, InitiateError, Reason};
use tracing::{debug, info, warn};

use super::Gateway;
use super::ike::{Ike, bump};
use super::log_limit::TRAFFIC;
use super::watch;
use crate::control::Response;
use super::table::{AcquireRequest, ConnId, IkeSaUp};

impl Ike {
    /// Acts on one engine event: a transition of the table and the
    /// commands it queues, sent at once.
    pub(super) fn on_event(&mut self, now: Instant, gw: &mut Gateway, ev: Event) {
        if ike_sa_of(&ev).is_some_and(|id| gw.table.is_retired(id)) {
            self.on_retired(now, gw, ev);
            return;
        }
        file_watch_lines(gw);
        let after = self.events_before(now, gw, &ev);
        match ev {
            Event::ResolveHost { name } => self.ask_resolver(&name),
            Event::IkeSaEstablished { ike_sa, connection, local, remote, local_id, remote_id, initiator } => {
                let up = IkeSaUp { local, remote, local_id: local_id.to_string(), remote_id: remote_id.to_string(), initiator };
                self.on_ike_sa_established(now, gw, ike_sa, &connection, &up);
            }
            Event::ChildSaEstablished(c) => {
                if c.rekeys.is_some() {
                    self.counts.child_sa_rekeys += 1;
                } else {
                    self.counts.child_sa_setups += 1;
                }
                self.install(now, gw, &c);
            }
            Event::ChildSaOutboundActive { ike_sa, connection, child, inbound_spi, outbound_spi } => {
                on_outbound_active(now, gw, ike_sa, (&connection, &child), (inbound_spi, outbound_spi));
            }
            Event::ChildSaDeleted { ike_sa, connection, child, inbound_spi, outbound_spi, reason } => {
                info!(%ike_sa, %connection, %child, in_spi = %format!("{inbound_spi:08x}"), out_spi = %format!("{outbound_spi:08x}"), ?reason, "Child SA deleted");
                // The new SA (if this was a rekey) took the outbound slot
                // already; the old inbound SA lingers for packets in flight.
                gw.table.child_deleted(now, inbound_spi, reason == Reason::Rekeyed);
                apply(gw, "removing a Child SA");
            }
            Event::IkeSaDeleted { ike_sa, connection, reason } => self.on_ike_sa_deleted(gw, ike_sa, connection, reason),
            Event::ChildSaFailed { ike_sa, connection, child, reason } => {
                self.on_child_sa_failed(gw, ike_sa, &connection, child.as_deref(), reason);
            }
            Event::AuthFailed { ike_sa, peer, identity, reason } => {
                // Anyone can cause one per message: limited (`log_limit`).
                warn!(target: TRAFFIC, %ike_sa, %peer, identity = ?identity.map(|i| i.to_string()), ?reason, "IKE authentication failed");
                self.on_auth_failed(gw, ike_sa, reason);
            }
            Event::IkeSaRekeyed { old, new, connection, initiated } => {
                // RFC 7296 §1.3.2: the new IKE SA inherits every Child SA.
                info!(%old, %new, %connection, initiated, "IKE SA rekeyed");
                self.counts.ike_sa_rekeys += 1;
                self.counts.ike_sa_rekeys_initiated += u64::from(initiated);
                gw.table.ike_sa_rekeyed(old, new);
            }
            Event::PerResourceUnavailable { ike_sa, connection, child, reason } => {
                info!(%ike_sa, %connection, %child, ?reason, "no (more) per-CPU Child SAs: workers without one use the fallback SA");
                if let Some(id) = gw.table.child_id(&connection, &child) {
                    gw.table.per_cpu_unavailable(id);
                    apply(gw, "stopping per-CPU acquires");
                }
            }
            Event::PeerAddressChanged { ike_sa, local, remote } => {
                info!(%ike_sa, %local, %remote, "peer address changed");
                gw.table.peer_address_changed(ike_sa, local, remote, self.esp_peer(remote));
                apply(gw, "moving ESP to the peer's new address");
            }
        }
        if let Some(after) = after {
            self.events_after(now, gw, after);
        }
        file_watch_lines(gw);
    }

    /// An IKE SA is authenticated: its record, then the `start` children
    /// that waited for it.
    fn on_ike_sa_established(&mut self, now: Instant, gw: &mut Gateway, ike_sa: IkeSaId, connection: &str, up: &IkeSaUp) {
        info!(%ike_sa, %connection, remote = %up.remote, remote_id = %up.remote_id, "IKE SA established");
        self.counts.ike_sa_setups += 1;
        let Some(conn) = gw.table.conn_id(connection) else {
            return;
        };
        gw.table.ike_sa_up(now, ike_sa, conn, up);
        for child in gw.table.take_deferred_starts(conn) {
            let Some(name) = gw.table.child(child).map(|c| c.name.clone()) else {
                continue;
            };
            if let Err(e) = self.ep.acquire(now, connection, &name, None) {
                warn!(%connection, child = %name, error = ?e, "starting child failed");
            }
        }
    }

    /// An IKE SA is gone, and its Child SAs with it (RFC 7296 §1.4.1):
    /// the watches of its connection end, and what its end calls for
    /// follows.
    fn on_ike_sa_deleted(&mut self, gw: &mut Gateway, ike_sa: IkeSaId, connection: Option<Arc<str>>, reason: Reason) {
        info!(%ike_sa, connection = ?connection, ?reason, "IKE SA deleted");
        if let Some(conn) = &connection {
            let outcome = Response::Error(format!("IKE SA {ike_sa} deleted: {}", reason.name()));
            watch::global().finish(conn, &outcome, |id| gw.table.ike_sa_owner(id));
        }
        // The table knows established IKE SAs only.
        match gw.table.ike_sa_deleted(ike_sa) {
            Some(_) => bump(&mut self.counts.ike_sa_deletes, reason.name()),
            None => bump(&mut self.counts.ike_sa_failures, reason.name()),
        }
        apply(gw, "removing the Child SAs of an IKE SA");
        if let Some(conn) = connection.and_then(|c| gw.table.conn_id(&c)) {
            // Children still waiting for the connection's first IKE SA: a
            // re-initiation brings them itself (the engine initiates every
            // `start` child of the connection).
            gw.table.take_deferred_starts(conn);
            self.after_death(gw, conn, reason);
        }
    }

    /// A Child SA could not be negotiated: the watches of its connection
    /// end with the reason, and its acquires are no longer in flight.
    fn on_child_sa_failed(&mut self, gw: &mut Gateway, ike_sa: IkeSaId, connection: &str, child: Option<&str>, reason: Reason) {
        // The peer's answer to each request: limited (`log_limit`).
        warn!(target: TRAFFIC, %ike_sa, %connection, child = ?child, ?reason, "Child SA negotiation failed");
        let what = child.map_or_else(String::new, |c| format!(" {c}"));
        let outcome = Response::Error(format!("{connection}: Child SA{what} failed: {}", reason.name()));
        watch::global().finish(connection, &outcome, |id| gw.table.ike_sa_owner(id));
        bump(&mut self.counts.child_sa_failures, reason.name());
        if let Some(id) = child.and_then(|ch| gw.table.child_id(connection, ch)) {
            gw.table.child_failed(id);
        }
    }

    /// An IKE SA failed to authenticate: the watches of its connection, if
    /// the table knows whose it is, end with the reason.
    fn on_auth_failed(&mut self, gw: &mut Gateway, ike_sa: IkeSaId, reason: AuthFailure) {
        if let Some(conn) = gw.table.ike_sa_owner(ike_sa) {
            let outcome = Response::Error(format!("IKE SA {ike_sa}: authentication failed: {}", reason.name()));
            watch::global().finish(conn, &outcome, |id| gw.table.ike_sa_owner(id));
        }
        bump(&mut self.counts.auth_failures, reason.name());
    }

    /// An event of an IKE SA a reload retired: its connection is gone
    /// from the table (or its name names a new configuration), so nothing
    /// reaches the table or the workers. A rekey's successor is retired
    /// too, and deleted.
    fn on_retired(&mut self, now: Instant, gw: &mut Gateway, ev: Event) {
        match ev {
            Event::IkeSaDeleted { ike_sa, connection, reason } => {
                gw.table.retired_ike_sa_deleted(ike_sa);
                info!(%ike_sa, connection = ?connection, ?reason, "IKE SA of a removed or changed connection deleted");
            }
            Event::IkeSaRekeyed { old, new, connection, .. } => {
                gw.table.retired_ike_sa_rekeyed(old, new);
                info!(%old, %new, %connection, "IKE SA of a removed or changed connection rekeyed: deleting it");
                if let Err(e) = self.ep.terminate(now, new) {
                    debug!(ike_sa = %new, error = ?e, "deleting a retired IKE SA");
                }
            }
            ev => debug!(ike_sa = ?ike_sa_of(&ev), "event of a retired IKE SA ignored"),
        }
    }

    /// What the end of an IKE SA calls for (`dpd_action` on a dead peer,
    /// `close_action` on the peer's Delete): a restart the engine schedules
    /// itself (with back-off); trap policies are ours to arm.
    fn after_death(&mut self, gw: &mut Gateway, conn: ConnId, reason: Reason) {
        let Some(actions) = gw.table.conn(conn).and_then(|c| c.actions) else {
            return;
        };
        let name = gw.table.conn(conn).map(|c| c.name.clone()).unwrap_or_default();
        match esparto_ike::lifetime::after_death(actions.dpd, actions.close, reason) {
            AfterDeath::Nothing => {}
            AfterDeath::Initiate => info!(connection = %name, ?reason, "the connection will be initiated again"),
            AfterDeath::Trap => {
                info!(connection = %name, ?reason, "traffic will initiate the connection again (trap)");
                let children = gw.table.conn(conn).map(|c| c.children.clone()).unwrap_or_default();
                for child in children {
                    if let Err(e) = self.arm_trap(gw, child) {
                        warn!(connection = %name, error = %format!("{e:#}"), "installing trap");
                    }
                }
            }
        }
    }

    /// Where ESP to a peer at IKE endpoint `remote` goes: always in UDP
    /// (RFC 3948), to the peer's NAT-T port.
    fn esp_peer(&self, remote: SocketAddr) -> SocketAddr {
        let port = if remote.port() == self.ike_port { self.natt_port } else { remote.port() };
        SocketAddr::new(remote.ip(), port)
    }

    /// A Child SA is ready: installed (inbound first), and the watches of
    /// its connection end with it unless it is a rekey.
    fn install(&mut self, now: Instant, gw: &mut Gateway, c: &ChildSaEstablished) {
        let peer = self.esp_peer(c.remote);
        match gw.table.child_established(now, c, peer) {
            Ok(done) => {
                let ts = |v: &[esparto_ike::TrafficSelector]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
                info!(
                    connection = %c.connection, child = %c.child, ike_sa = %c.ike_sa, suite = c.suite.name(),
                    in_spi = %format!("{:08x}", c.inbound_spi), out_spi = %format!("{:08x}", c.outbound_spi),
                    ts = %format!("{} === {}", ts(&c.local_ts), ts(&c.remote_ts)),
                    slot = ?done.slot, rekey = c.rekeys.is_some(), "Child SA installed"
                );
                if c.rekeys.is_none() {
                    let outcome = Response::Done(format!(
                        "{}: Child SA {} installed, SPIs {:08x}_i {:08x}_o, {} === {}",
                        c.connection,
                        c.child,
                        c.inbound_spi,
                        c.outbound_spi,
                        ts(&c.local_ts),
                        ts(&c.remote_ts)
                    ));
                    watch::global().finish(&c.connection, &outcome, |id| gw.table.ike_sa_owner(id));
                }
                // The SAs go in even if their routes do not (they come back
                // with the next install).
                apply(gw, "installing Child SA");
            }
            Err(e) => {
                warn!(connection = %c.connection, child = %c.child, error = %format!("{e:#}"), "installing Child SA failed");
                apply(gw, "installing Child SA");
            }
        }
    }

    /// An event from a worker: acquires and lifetimes.
    pub fn on_dataplane(&mut self, now: Instant, gw: &mut Gateway, ev: WorkerEvent) {
        match ev.event {
            DpEvent::Acquire { group, worker } => self.on_acquire(now, gw, group, worker),
            // Logged by the main loop; nothing for IKE to do.
            DpEvent::IpcompSwitched { .. } => {}
            DpEvent::Expire {
                spi,
                direction,
                kind: Expiry::Soft,
            } => {
                for (ike_sa, in_spi) in gw.table.soft_expire(spi, direction) {
                    info!(%ike_sa, in_spi = %format!("{in_spi:08x}"), ?direction, "SA reached its byte/packet soft limit: rekeying");
                    if let Err(e) = self.ep.rekey_child(now, ike_sa, in_spi) {
                        warn!(%ike_sa, error = ?e, "rekey failed");
                        gw.table.rekey_failed(in_spi);
                    }
                }
                self.flush(now, gw);
            }
            DpEvent::Expire {
                spi,
                direction,
                kind: Expiry::Hard,
            } => {
                warn!(spi = %format!("{spi:08x}"), ?direction, "SA reached a hard limit; it carries no more traffic");
                for (ike_sa, in_spi) in gw.table.hard_expire(spi, direction) {
                    info!(%ike_sa, in_spi = %format!("{in_spi:08x}"), "deleting the expired Child SA");
                    if let Err(e) = self.ep.terminate_child(now, ike_sa, in_spi) {
                        warn!(%ike_sa, in_spi = %format!("{in_spi:08x}"), error = ?e, "deleting the expired Child SA failed");
                    }
                }
                self.flush(now, gw);
            }
            DpEvent::Barrier(id) => match gw.barrier_reached(id) {
                Ok(Some(done)) => self.release_held(gw, done, true),
                Ok(None) => {}
                Err(e) => warn!(error = %format!("{e:#}"), "releasing held effects"),
            },
            DpEvent::FirstPacket { spi } => match gw.table.inbound_confirmed(now, spi) {
                Ok(Some(slot)) => {
                    debug!(in_spi = %format!("{spi:08x}"), ?slot, "the peer sends on the new sub-SA: sending on it too");
                    apply(gw, "installing an outbound SA");
                }
                Ok(None) => {}
                Err(e) => warn!(error = %format!("{e:#}"), "installing an outbound SA"),
            },
            DpEvent::UnknownSpi { spi, peer } => {
                // Which SPI, for whoever reads the `unknown_spi` count (the
                // workers rate-limit their reports, UNKNOWN_SPI_REPORTS_PER_SEC
                // each; the log line is
                // limited per kind too).
                info!(target: TRAFFIC, spi = format_args!("{spi:08x}"), %peer, worker = ev.worker, "ESP for an SPI no inbound SA has");
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
        let Some(req @ AcquireRequest { child, worker }) = gw.table.acquire(now, group, worker) else {
            return;
        };
        let Some((conn, name)) = gw.table.names(child).map(|(a, b)| (a.clone(), b.clone())) else {
            return;
        };
        match self.ep.acquire(now, &conn, &name, worker) {
            Ok(id) => {
                info!(connection = %conn, child = %name, ike_sa = %id, ?worker, "acquire: negotiating");
                gw.table.acquire_started(now, req);
                if let Some(c) = gw.table.conn_id(&conn) {
                    gw.table.ike_sa_initiated(id, c);
                }
            }
            Err(InitiateError::PerResourceUnavailable(reason)) => {
                info!(connection = %conn, child = %name, ?reason, "no per-CPU Child SAs from this peer");
                gw.table.per_cpu_unavailable(child);
                apply(gw, "stopping per-CPU acquires");
            }
            // Traffic raises acquires; a failing one recurs: limited.
            Err(e) => warn!(target: TRAFFIC, connection = %conn, child = %name, ?worker, error = ?e, "acquire failed"),
        }
        self.flush(now, gw);
    }
}

/// Files the log lines queued for `esparto up` with its watches, the
/// table saying whose each IKE SA is (`watch.rs`).
pub(super) fn file_watch_lines(gw: &Gateway) {
    watch::global().file(|id| gw.table.ike_sa_owner(id));
}

/// The peer switched to a Child SA it rekeyed (`spis`: inbound,
/// outbound): we send on it from now on.
fn on_outbound_active(now: Instant, gw: &mut Gateway, ike_sa: IkeSaId, (connection, child): (&str, &str), (inbound_spi, outbound_spi): (u32, u32)) {
    match gw.table.outbound_active(now, inbound_spi, outbound_spi) {
        Ok(Some(slot)) => {
            debug!(%ike_sa, %connection, %child, out_spi = %format!("{outbound_spi:08x}"), ?slot, "sending on the rekeyed SA");
        }
        Ok(None) => {}
        Err(e) => warn!(%connection, %child, error = %format!("{e:#}"), "activating outbound SA"),
    }
    apply(gw, "activating outbound SA");
}

/// Sends the table's queued commands; a failure is logged with `what`.
fn apply(gw: &mut Gateway, what: &str) {
    if let Err(e) = gw.apply() {
        warn!(error = %format!("{e:#}"), "{what}");
    }
}

/// The IKE SA an event is about (`IkeSaRekeyed`: the one it replaced).
fn ike_sa_of(ev: &Event) -> Option<IkeSaId> {
    Some(match ev {
        Event::IkeSaEstablished { ike_sa, .. }
        | Event::IkeSaDeleted { ike_sa, .. }
        | Event::ChildSaDeleted { ike_sa, .. }
        | Event::ChildSaFailed { ike_sa, .. }
        | Event::AuthFailed { ike_sa, .. }
        | Event::ChildSaOutboundActive { ike_sa, .. }
        | Event::PerResourceUnavailable { ike_sa, .. }
        | Event::PeerAddressChanged { ike_sa, .. } => *ike_sa,
        Event::ChildSaEstablished(c) => c.ike_sa,
        Event::IkeSaRekeyed { old, .. } => *old,
        Event::ResolveHost { .. } => return None,
    })
}
