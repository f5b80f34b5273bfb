//! SA groups: a fallback (head) SA plus one sub-SA per worker (RFC 9611;
//! Linux XFRM "pCPU", Libreswan "clones").
//!
//! All SAs of a group share the same traffic selectors and differ only in
//! SPI. A worker sends on its own sub-SA when it has one — its own sequence
//! counter, no cache line shared with any other core — and otherwise on the
//! fallback SA, whose sequence counter is a shared atomic, while raising one
//! "acquire for worker k" so the IKE daemon negotiates the missing sub-SA.
//! A flow stays on one TUN queue (the TUN steering program keeps it
//! there), hence one worker, hence one SA: it is never reordered by the
//! switch from fallback to sub-SA beyond what a single in-order queue
//! produces.
//!
//! The group is sharded: each worker holds its *own* `SaGroup` containing
//! its copy of the fallback SA (sharing only the [`SharedSeq`]) and its own
//! sub-SA. The control plane holds the complete picture (which worker has
//! which sub-SA, and the inbound SAs, which may be more than the outbound
//! ones: a peer with more cores than we have workers gives us more sub-SAs
//! than we can send on, and we receive on them all).
//!
//! [`SharedSeq`]: crate::sa::SharedSeq

use std::time::{Duration, Instant};

use crate::sa::OutboundSa;
use crate::spd::GroupId;

/// How long a worker waits before raising the same acquire again.
pub const ACQUIRE_RETRY: Duration = Duration::from_secs(2);

/// One worker's share of an SA group.
#[derive(Debug)]
pub struct SaGroup {
    id: GroupId,
    per_cpu: bool,
    /// Boxed: a worker sends on it only until its sub-SA is installed, and
    /// inline it would double the size of every group (the worker's group
    /// table holds groups inline, one per tunnel).
    fallback: Option<Box<OutboundSa>>,
    sub: Option<OutboundSa>,
    last_acquire: Option<Instant>,
}

/// Which SA a packet goes out on, and whether to ask for a better one.
pub(crate) struct Selected<'a> {
    pub(crate) sa: Option<&'a mut OutboundSa>,
    /// Raise an acquire: `Some(true)` for this worker's sub-SA, `Some(false)`
    /// for the group as a whole (nothing installed: a trap policy).
    pub(crate) acquire: Option<bool>,
}

impl SaGroup {
    /// An empty group. With `per_cpu`, a worker without its own sub-SA
    /// raises acquires for one.
    pub fn new(id: GroupId, per_cpu: bool) -> Self {
        Self { id, per_cpu, fallback: None, sub: None, last_acquire: None }
    }

    /// The group id.
    pub fn id(&self) -> GroupId {
        self.id
    }

    /// Whether per-CPU sub-SAs are wanted.
    pub fn per_cpu(&self) -> bool {
        self.per_cpu
    }

    /// Sets the fallback SA, returning the one it replaces.
    pub fn set_fallback(&mut self, sa: Option<Box<OutboundSa>>) -> Option<Box<OutboundSa>> {
        core::mem::replace(&mut self.fallback, sa)
    }

    /// Sets this worker's sub-SA, returning the one it replaces.
    pub fn set_sub(&mut self, sa: Option<OutboundSa>) -> Option<OutboundSa> {
        if sa.is_some() {
            self.last_acquire = None;
        }
        core::mem::replace(&mut self.sub, sa)
    }

    /// The fallback SA.
    pub fn fallback(&self) -> Option<&OutboundSa> {
        self.fallback.as_deref()
    }

    /// This worker's sub-SA.
    pub fn sub(&self) -> Option<&OutboundSa> {
        self.sub.as_ref()
    }

    pub(crate) fn both_mut(&mut self) -> (Option<&mut OutboundSa>, Option<&mut OutboundSa>) {
        (self.sub.as_mut(), self.fallback.as_deref_mut())
    }

    /// Sends on every SA of the group to `peer` (see
    /// [`OutboundSa::set_peer`]).
    pub fn set_peer(&mut self, peer: core::net::SocketAddr) {
        if let Some(s) = self.sub.as_mut() {
            s.set_peer(peer);
        }
        if let Some(f) = self.fallback.as_deref_mut() {
            f.set_peer(peer);
        }
    }

    /// Removes whichever SA has `spi`; true if one did.
    pub fn remove_spi(&mut self, spi: u32) -> bool {
        if self.sub.as_ref().is_some_and(|s| s.spi() == spi) {
            self.sub = None;
            true
        } else if self.fallback.as_ref().is_some_and(|s| s.spi() == spi) {
            self.fallback = None;
            true
        } else {
            false
        }
    }

    /// Picks the SA for the next packet (see the module docs).
    #[inline]
    pub(crate) fn select(&mut self, now: Instant) -> Selected<'_> {
        if let Some(sub) = self.sub.as_mut().filter(|s| !s.is_dead()) {
            return Selected { sa: Some(sub), acquire: None };
        }
        let due = self.last_acquire.is_none_or(|t| now.duration_since(t) >= ACQUIRE_RETRY);
        let fallback = self.fallback.as_deref_mut().filter(|s| !s.is_dead());
        let acquire = match (&fallback, due) {
            (_, false) => None,
            (Some(_), true) if self.per_cpu => Some(true),
            (Some(_), true) => None,
            (None, true) => Some(false),
        };
        if acquire.is_some() {
            self.last_acquire = Some(now);
        }
        Selected { sa: fallback, acquire }
    }
}
