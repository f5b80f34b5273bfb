//! What the IKE driver needs to know of a connection beyond its children
//! and SAs, held in the connection's and its children's records so that
//! it lives and dies with them:
//!
//! - **what the end of an IKE SA calls for**: the connection's
//!   `dpd_action` and `close_action`
//!   ([`Conn::actions`](super::Conn::actions)), noted when the table adds
//!   the connection;
//! - **children to start once the IKE SA is up**: a connection's first
//!   `start` child goes into IKE_AUTH, the others wait for the IKE SA
//!   ([`Child::start_once_up`](super::Child::start_once_up),
//!   [`Table::take_deferred_starts`]);
//! - **IKE SAs being negotiated**: the ones the daemon initiated, from the
//!   moment the engine names them until they are established or gone
//!   ([`Conn::initiating`](super::Conn::initiating)), so that
//!   [`Table::ike_sa_owner`] can say whose an IKE SA is before IKE_AUTH
//!   is over (`esparto up` follows its log lines by it, see `watch.rs`);
//! - **retired IKE SAs**: those of connections a reload removed or
//!   changed, until the engine reports them gone. Their events must not
//!   reach the table: a changed connection's name now names its new
//!   configuration. [`Table::remove_conn`] retires the IKE SAs it knows
//!   of; the engine's list ([`Table::retire_ike_sas`]) adds those it never
//!   heard of (half-open ones); [`Table::ike_sa_up`] and
//!   [`Table::child_established`] refuse a retired IKE SA.
//!
//! Removing a connection removes all of it but the retired IKE SAs, which
//! belong to no connection any more. Nothing here walks more than one
//! connection's children.

use esparto_ike::{CloseAction, DpdAction, IkeSaId};

use super::{ChildId, ConnId, Table};

/// What the end of a connection's IKE SA calls for: its `dpd_action` on
/// a dead peer, its `close_action` on the peer's Delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Actions {
    /// `dpd_action`.
    pub(crate) dpd: DpdAction,
    /// `close_action`.
    pub(crate) close: CloseAction,
}

impl Table {
    /// Marks `child` to be started once its connection's IKE SA is up.
    pub(crate) fn defer_start(&mut self, child: ChildId) {
        if let Some(c) = self.children.get_mut(child.0) {
            c.start_once_up = true;
        }
    }

    /// The children of `conn` waiting for its IKE SA, in their order; none
    /// waits any more.
    pub(crate) fn take_deferred_starts(&mut self, conn: ConnId) -> Vec<ChildId> {
        let Some(c) = self.conns.get(conn.0) else { return Vec::new() };
        let mut starts = Vec::new();
        for &id in &c.children {
            let child = &mut self.children[id.0];
            if std::mem::take(&mut child.start_once_up) {
                starts.push(id);
            }
        }
        starts
    }

    /// The IKE SA `ike_sa`, which the daemon just initiated (or asked the
    /// engine for), is `conn`'s. Nothing changes for an IKE SA already
    /// established, or retired.
    pub(crate) fn ike_sa_initiated(&mut self, ike_sa: IkeSaId, conn: ConnId) {
        if self.ike_sas.contains_key(&ike_sa) || self.retired.contains(&ike_sa) || self.initiating.contains_key(&ike_sa) {
            return;
        }
        let Some(c) = self.conns.get_mut(conn.0) else { return };
        c.initiating.push(ike_sa);
        self.initiating.insert(ike_sa, conn);
    }

    /// `ike_sa` is no longer being negotiated (it is established, or gone).
    pub(super) fn stop_initiating(&mut self, ike_sa: IkeSaId) {
        let Some(conn) = self.initiating.remove(&ike_sa) else { return };
        if let Some(c) = self.conns.get_mut(conn.0) {
            c.initiating.retain(|i| *i != ike_sa);
        }
    }

    /// The connection an IKE SA is of: established, or being negotiated
    /// after the daemon initiated it. `None` for one the table does not
    /// know (a responder's before IKE_AUTH, a retired one).
    pub(crate) fn ike_sa_owner(&self, ike_sa: IkeSaId) -> Option<&str> {
        let conn = match self.ike_sas.get(&ike_sa) {
            Some(r) => r.conn,
            None => *self.initiating.get(&ike_sa)?,
        };
        self.conns.get(conn.0).map(|c| &*c.name)
    }

    /// Retires these IKE SAs (the engine retired their connections): their
    /// events no longer reach the table.
    pub(crate) fn retire_ike_sas(&mut self, ids: impl IntoIterator<Item = IkeSaId>) {
        self.retired.extend(ids);
    }

    /// Whether `ike_sa` is retired.
    pub(crate) fn is_retired(&self, ike_sa: IkeSaId) -> bool {
        self.retired.contains(&ike_sa)
    }

    /// A retired IKE SA is gone.
    pub(crate) fn retired_ike_sa_deleted(&mut self, ike_sa: IkeSaId) {
        self.retired.remove(&ike_sa);
    }

    /// A retired IKE SA was rekeyed: its successor is retired in its place.
    pub(crate) fn retired_ike_sa_rekeyed(&mut self, old: IkeSaId, new: IkeSaId) {
        if self.retired.remove(&old) {
            self.retired.insert(new);
        }
    }
}
