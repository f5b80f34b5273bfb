//! Peers by host name: initiations that wait for the driver's resolver.
//!
//! swanctl lets `remote_addrs` name hosts; the engine resolves nothing
//! itself (it is sans-IO, and a lookup may take seconds). An initiation
//! of a connection with names is *parked*: it gets its IKE SA ID at once,
//! every name it needs is asked of the driver ([`Event::ResolveHost`],
//! once at a time per name), and it goes on when the driver has answered
//! every one of them since ([`Endpoint::host_resolved`]) or
//! [`RESOLVE_PATIENCE`] has passed, with the addresses it then has: the
//! literal ones and each name's last answer, in the order written
//! ([`ConnectionConfig::remote_candidates`]). So a retry or a DPD
//! restart always sees where the name points now, and a resolver that
//! hangs delays only the connections waiting for it.
//!
//! ```text
//!   initiate(conn)  ──▶ parked (SPI reserved) ──▶ Event::ResolveHost(name)
//!   host_resolved(name, answer) ──▶ all names answered? ──▶ IKE_SA_INIT to
//!                                   (or patience over)      the first usable
//!   no usable address ──▶ IkeSaDeleted { reason: Unresolved } ──▶ dpd_action
//! ```
//!
//! A failed lookup keeps the name's last good answer (a stale address
//! is still worth a try, and what a responder matches meanwhile). A
//! responder matches the last answers only; an IKE_SA_INIT that matches
//! no connection asks for every name again, at most every
//! [`REFRESH_ON_MISS`], so a peer whose address moved gets in with its
//! next retransmission.
//!
//! [`RESOLVE_PATIENCE`]: crate::lifetime::RESOLVE_PATIENCE
//! [`REFRESH_ON_MISS`]: crate::lifetime::REFRESH_ON_MISS

use super::{Endpoint, InitiateError};
use crate::config::ConnectionConfig;
use crate::event::{Event, IkeSaId, Reason};
use crate::lifetime::{AfterDeath, REFRESH_ON_MISS, RESOLVE_PATIENCE};
use core::net::IpAddr;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Initiations waiting for host names, and the names asked.
#[derive(Debug, Default)]
pub(super) struct Resolving {
    /// Names asked of the driver and not answered yet, with when.
    asked: HashMap<Arc<str>, Instant>,
    /// When the driver last answered each name.
    answered: HashMap<Arc<str>, Instant>,
    /// In the order initiated.
    parked: Vec<Parked>,
    /// When an unmatched IKE_SA_INIT last asked for every name.
    refreshed_on_miss: Option<Instant>,
}

#[derive(Debug)]
struct Parked {
    spi: u64,
    conn: Arc<str>,
    child: Arc<str>,
    resource: Option<u16>,
    since: Instant,
    deadline: Instant,
}

impl Resolving {
    /// Whether a parked initiation holds IKE SPI `spi`.
    pub(super) fn holds(&self, spi: u64) -> bool {
        self.parked.iter().any(|p| p.spi == spi)
    }

    /// When the first parked initiation runs out of patience.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.parked.iter().map(|p| p.deadline).min()
    }

    /// Initiations waiting.
    pub(super) fn parked(&self) -> usize {
        self.parked.len()
    }
}

impl Endpoint {
    /// Park an initiation of `conn` until its host names are answered;
    /// returns the IKE SPI it will use.
    pub(super) fn park(
        &mut self,
        now: Instant,
        conn: &ConnectionConfig,
        child: Arc<str>,
        resource: Option<u16>,
    ) -> u64 {
        let spi = self.new_initiator_spi();
        for h in &conn.remote_hosts {
            self.ask(now, &h.name);
        }
        tracing::debug!(ike_sa = %IkeSaId(spi), connection = %conn.name, "resolving the peer's host names");
        self.resolving.parked.push(Parked {
            spi,
            conn: conn.name.clone(),
            child,
            resource,
            since: now,
            deadline: now + RESOLVE_PATIENCE,
        });
        spi
    }

    /// Ask the driver for `name` unless a question is out already (one
    /// older than the patience is asked again: its answer was lost).
    fn ask(&mut self, now: Instant, name: &Arc<str>) {
        let pending = self
            .resolving
            .asked
            .get(name)
            .is_some_and(|t| now.saturating_duration_since(*t) < RESOLVE_PATIENCE);
        if !pending {
            self.resolving.asked.insert(name.clone(), now);
            self.events.push_back(Event::ResolveHost { name: name.clone() });
        }
    }

    /// The driver's answer for host `name`: its addresses in the order to
    /// try them, or why the lookup failed (logged; the last good answer
    /// stays). Initiations waiting for it go on once all their names are
    /// answered.
    pub fn host_resolved(&mut self, now: Instant, name: &str, answer: Result<Vec<IpAddr>, String>) {
        let Some(key) = self.connections.hosts().find(|h| &***h == name).cloned() else {
            // Asked for a connection a reconfiguration removed since.
            self.resolving.asked.remove(name);
            return;
        };
        self.resolving.asked.remove(name);
        self.resolving.answered.insert(key.clone(), now);
        match answer {
            Ok(addrs) => {
                if self.connections.answer(name) != addrs.as_slice() {
                    tracing::info!(host = %key, addrs = ?addrs, "peer host name resolved");
                }
                self.connections.set_answer(name, addrs);
            }
            Err(e) => {
                self.stats.unresolved_hosts += 1;
                tracing::warn!(host = %key, error = %e, kept = ?self.connections.answer(name),
                    "peer host name did not resolve");
            }
        }
        self.resume_parked(now);
    }

    /// Every host name the connections name (for a driver that refreshes
    /// them on its own schedule too).
    pub fn remote_hosts(&self) -> Vec<Arc<str>> {
        self.connections.hosts().cloned().collect()
    }

    /// An IKE_SA_INIT from `remote` matched no connection: if some name
    /// hosts, ask for each again (rate-limited), in case one of them now
    /// points at `remote`. Whether lookups are out: the request is then
    /// left unanswered (not refused), so its retransmission gets in.
    pub(super) fn refresh_hosts_on_miss(&mut self, now: Instant, remote: IpAddr) -> bool {
        if self.connections.hosts().next().is_none() {
            return false;
        }
        let recent = self
            .resolving
            .refreshed_on_miss
            .is_some_and(|t| now.saturating_duration_since(t) < REFRESH_ON_MISS);
        if !recent {
            self.resolving.refreshed_on_miss = Some(now);
            tracing::debug!(peer = %remote, "IKE_SA_INIT from an unknown address: resolving the peers' host names again");
            for name in self.remote_hosts() {
                self.ask(now, &name);
            }
        }
        self.resolving
            .asked
            .values()
            .any(|t| now.saturating_duration_since(*t) < RESOLVE_PATIENCE)
    }

    /// Launch every parked initiation whose names are all answered since
    /// it was parked, or whose patience is over.
    pub(super) fn resume_parked(&mut self, now: Instant) {
        let mut i = 0;
        while let Some(p) = self.resolving.parked.get(i) {
            let Some(conn) = self.connections.get(&p.conn).cloned() else {
                let p = self.resolving.parked.remove(i);
                self.fail_parked(now, p, None, Reason::Local("connection removed"));
                continue;
            };
            let answered = conn.remote_hosts.iter().all(|h| {
                self.resolving
                    .answered
                    .get(&h.name)
                    .is_some_and(|t| *t >= p.since)
            });
            if !answered && now < p.deadline {
                i += 1;
                continue;
            }
            let p = self.resolving.parked.remove(i);
            if !answered {
                tracing::warn!(ike_sa = %IkeSaId(p.spi), connection = %conn.name,
                    "the resolver did not answer in time; trying the addresses known");
            }
            let (spi, child, resource) = (p.spi, p.child.clone(), p.resource);
            match self.launch(now, conn.clone(), child, resource, Some(spi)) {
                Ok(_) => {}
                Err(e) => {
                    let why = match e {
                        InitiateError::NoLocalAddress => "no local address of the family the peer's names resolved to",
                        _ => "the peer's host names gave no address",
                    };
                    tracing::warn!(ike_sa = %IkeSaId(spi), connection = %conn.name, error = %e, "initiation failed: {why}");
                    self.fail_parked(now, p, Some(&conn), Reason::Unresolved);
                }
            }
        }
    }

    /// A parked initiation that ends without an IKE SA: reported as one
    /// that died, and initiated again as its connection's `dpd_action` says.
    fn fail_parked(&mut self, now: Instant, p: Parked, conn: Option<&Arc<ConnectionConfig>>, reason: Reason) {
        self.events.push_back(Event::IkeSaDeleted {
            ike_sa: IkeSaId(p.spi),
            connection: Some(p.conn.clone()),
            reason,
        });
        if let Some(conn) = conn {
            if conn.after_death(reason) == AfterDeath::Initiate {
                self.schedule_reinitiate(now, conn.name.clone(), vec![p.child]);
            }
        }
    }

    /// Drop the parked initiation `ike_sa` (the operator took it down);
    /// whether there was one.
    pub(super) fn cancel_parked(&mut self, ike_sa: IkeSaId) -> bool {
        let Some(i) = self.resolving.parked.iter().position(|p| p.spi == ike_sa.0) else {
            return false;
        };
        let p = self.resolving.parked.remove(i);
        self.cancel_reinitiation(&p.conn);
        self.events.push_back(Event::IkeSaDeleted {
            ike_sa,
            connection: Some(p.conn),
            reason: Reason::Terminated,
        });
        true
    }

    /// Drop every parked initiation (shutting down).
    pub(super) fn drop_parked(&mut self) {
        for p in std::mem::take(&mut self.resolving.parked) {
            self.events.push_back(Event::IkeSaDeleted {
                ike_sa: IkeSaId(p.spi),
                connection: Some(p.conn),
                reason: Reason::Terminated,
            });
        }
    }

    /// Initiations waiting for the peer's host names.
    pub fn initiations_resolving(&self) -> usize {
        self.resolving.parked()
    }
}
