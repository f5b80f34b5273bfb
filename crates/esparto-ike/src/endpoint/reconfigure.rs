//! Replacing the connection set of a running endpoint (a configuration
//! reload) without touching the IKE SAs of the connections that stay.
//!
//! The driver says, connection by connection in the new order, which held
//! connection to keep as it is ([`NewConnection::Keep`]) and which
//! configuration to load ([`NewConnection::Load`]: one added, or one that
//! replaces the held connection of the same name). Everything is checked
//! before anything changes; then the index is rebuilt over the new list,
//! reusing the kept connections' shared `Arc`s. That is what leaves their
//! IKE SAs alone: an SA holds its connection's `Arc`, and the SA index
//! finds a connection's SAs by the `Arc`'s address (`sa_index.rs`), so
//! `acquire`, INITIAL_CONTACT and re-initiation see exactly the SAs they
//! saw before.
//!
//! A held connection that is not kept is *retired*: each of its IKE SAs is
//! deleted as by [`Endpoint::terminate`] — an INFORMATIONAL Delete for an
//! established one (RFC 7296 §1.4.1: its Child SAs go with it), dropped
//! silently otherwise — and a re-initiation it had due is cancelled. Its
//! SAs keep the old configuration until they are gone, and when they go
//! they ask for no re-initiation (`IkeSa::after_death` checks that its
//! connection is still the one held under its name); the replacement, if
//! any, is the driver's to start. A new IKE_SA_INIT can only find the new
//! list. Rebuilding costs O(connections): a hub of 10,000 connections
//! rebuilds in milliseconds, once per reload. A new list that keeps every
//! held connection in its order and adds some after them (a VICI client
//! loading connections one by one) only adds those to the index.

use super::{Endpoint, InitiateError};
use crate::config::{ConfigError, ConnectionConfig};
use crate::connections::Connections;
use crate::ctx::Ctx;
use crate::event::{IkeSaId, Reason};
use crate::exchange::Task;
use crate::sa::State;
use std::sync::Arc;
use std::time::Instant;

/// One connection of a new configuration, for
/// [`Endpoint::replace_connections`].
#[derive(Debug, Clone)]
pub enum NewConnection {
    /// Keep the connection held under this name as it is, with its IKE SAs.
    Keep(Arc<str>),
    /// Load this configuration: a connection added, or one replacing the
    /// held connection of the same name (whose IKE SAs are deleted).
    Load(Box<ConnectionConfig>),
}

impl Endpoint {
    /// Replaces the connections with `conns`, in their order (the order in
    /// which a responder tries them). Every connection held and not kept
    /// is retired: its IKE SAs are deleted (see the module docs). Returns
    /// the IKE SAs retired, whose remaining events (their deletion, a
    /// negotiation that was under way) belong to a connection no longer
    /// held. Nothing changes on error: a configuration that does not
    /// validate, a name twice, a kept connection that is not held.
    pub fn replace_connections(
        &mut self,
        now: Instant,
        conns: Vec<NewConnection>,
    ) -> Result<Vec<IkeSaId>, ConfigError> {
        if self.only_appends(&conns) {
            return self.append_connections(conns).map(|()| Vec::new());
        }
        let mut next = Connections::with_capacity(conns.len());
        for c in conns {
            let conn = match c {
                NewConnection::Keep(name) => self
                    .connections
                    .get(&name)
                    .cloned()
                    .ok_or(ConfigError::Invalid("a kept connection is not held"))?,
                NewConnection::Load(cfg) => {
                    cfg.validate()?;
                    Arc::new(*cfg)
                }
            };
            next.insert(conn)?;
        }
        self.connections.hand_answers_to(&mut next);
        let old = std::mem::replace(&mut self.connections, next);
        let mut retired = Vec::new();
        for conn in old.all() {
            let kept = self
                .connections
                .get(&conn.name)
                .is_some_and(|c| Arc::ptr_eq(c, conn));
            if kept {
                continue;
            }
            self.cancel_reinitiation(&conn.name);
            let ids: Vec<u64> = self.sa_index.of_conn(conn).collect();
            for id in ids {
                if self.close(now, id).is_ok() {
                    retired.push(IkeSaId(id));
                }
            }
        }
        Ok(retired)
    }

    /// Whether `conns` keeps every held connection, in its order, before
    /// anything else: what a load over VICI of one more connection sends.
    fn only_appends(&self, conns: &[NewConnection]) -> bool {
        let held = self.connections.all();
        conns.len() >= held.len()
            && conns.iter().zip(held).all(|(c, h)| matches!(c, NewConnection::Keep(n) if *n == h.name))
    }

    /// [`Endpoint::replace_connections`] when [`Endpoint::only_appends`]:
    /// the connections after the held ones are added to the index as it
    /// is (O(added), not a rebuild), all checked first, and nothing is
    /// retired.
    fn append_connections(&mut self, mut conns: Vec<NewConnection>) -> Result<(), ConfigError> {
        let added = conns.split_off(self.connections.all().len());
        let mut names = std::collections::HashSet::with_capacity(added.len());
        let mut load = Vec::with_capacity(added.len());
        for c in added {
            match c {
                NewConnection::Keep(name) if self.connections.get(&name).is_some() => {
                    return Err(ConfigError::Invalid("duplicate connection name"));
                }
                NewConnection::Keep(_) => return Err(ConfigError::Invalid("a kept connection is not held")),
                NewConnection::Load(cfg) => {
                    cfg.validate()?;
                    if self.connections.get(&cfg.name).is_some() || !names.insert(cfg.name.clone()) {
                        return Err(ConfigError::Invalid("duplicate connection name"));
                    }
                    load.push(Arc::new(*cfg));
                }
            }
        }
        for conn in load {
            self.connections.insert(conn)?;
        }
        Ok(())
    }

    /// Deletes IKE SA `id` with the peer (an INFORMATIONAL Delete, unless
    /// one is under way already) if it is established, else drops it
    /// without a word: a half-open SA has nothing the peer could delete.
    pub(super) fn close(&mut self, now: Instant, id: u64) -> Result<(), InitiateError> {
        let mut ctx = ctx!(self, now);
        let sa = self
            .sas
            .get_mut(&id)
            .ok_or(InitiateError::UnknownIkeSa(IkeSaId(id)))?;
        if sa.state == State::Established {
            let deleting = sa
                .pending
                .iter()
                .map(|p| &p.task)
                .chain(sa.queue.iter())
                .any(|t| matches!(t, Task::DeleteIke));
            if !deleting {
                sa.start_task(&mut ctx, Task::DeleteIke);
            }
        } else {
            sa.die(&mut ctx, Reason::Terminated);
        }
        self.finish(now, id);
        Ok(())
    }
}
