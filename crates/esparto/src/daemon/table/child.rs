//! One child (a connection's `[children.NAME]`) as the table holds it: its
//! settings, its SA group and policies, which of its SAs sends where, and
//! what it waits for (acquires).
//!
//! The group has one outbound *slot* per worker plus the fallback slot.
//! A slot holds at most one SA at a time, and an SA is in at most one
//! slot: that is what lets each worker send on its own SA. Where a new SA
//! goes is decided here ([`Child::sub_slot`]):
//!
//! - a per-resource SA, ours or the peer's, takes the slot of the worker
//!   it is received on (ours: the worker it was negotiated for; the
//!   peer's: the worker whose index its SPI names on the peer), unless
//!   another SA holds that slot; then it is received on only (the worker
//!   already sends on an SA of its own);
//! - a rekeyed SA takes the place of the one it replaces (see `sa.rs`).
//!
//! With the peer's SPIs mirrored (the IKE engine gives a peer's sub-SA an
//! SPI steering to the worker index the peer's SPI names) and a peer that
//! places SAs the same way, worker k's sub-SA is worker k's at both ends:
//! the layout does not depend on which side negotiated which SA first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use esparto_esp::{GroupId, Lifetime, PolicyId, Selector};

use super::{ConnId, SaId};

/// Where an SA's outbound half goes in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The group's fallback (or only) SA: every worker may send on it.
    Fallback,
    /// Worker `k`'s own sub-SA.
    Worker(u16),
    /// Received on, never sent on.
    InboundOnly,
}

/// What an SA is to its group, as `status` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The only SA pair of a group without sub-SAs.
    Single,
    /// The fallback (head) SA of a per-CPU group.
    Fallback,
    /// A worker's own sub-SA (or a peer's extra one, inbound only).
    Sub,
}

impl Role {
    /// The name `status` shows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Fallback => "fallback",
            Role::Sub => "sub",
        }
    }

    /// The role of an SA in `slot` of a group that has (`per_cpu`) or has
    /// not sub-SAs beside its fallback.
    pub(crate) fn of(slot: Slot, per_cpu: bool) -> Self {
        match slot {
            Slot::Fallback if per_cpu => Role::Fallback,
            Slot::Fallback => Role::Single,
            Slot::Worker(_) | Slot::InboundOnly => Role::Sub,
        }
    }
}

/// A child's configured settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Configured selectors (trap policies and static SAs use them; IKE
    /// SAs use what was negotiated).
    pub(crate) local_ts: Vec<Selector>,
    /// The peer's configured selectors.
    pub(crate) remote_ts: Vec<Selector>,
    /// The peer's configured ESP-in-UDP endpoint.
    pub(crate) peer: SocketAddr,
    /// Anti-replay window.
    pub(crate) replay_window: u32,
    /// The data plane's limits of each SA.
    pub(crate) lifetime: Lifetime,
    /// Per-CPU sub-SAs wanted (IKE children; a static child's are
    /// configured, never negotiated).
    pub(crate) per_cpu: bool,
    /// IPComp wanted (`ipcomp` in the child).
    pub(crate) ipcomp: Option<esparto_esp::IpcompMode>,
    /// `link_mbps` of the child (adaptive IPComp).
    pub(crate) link_mbps: Option<u32>,
}

/// A child's SA group as the workers hold it.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Its id in the workers and in its policies.
    pub(crate) id: GroupId,
    /// Whether the workers raise acquires for their own sub-SAs.
    pub(crate) per_cpu: bool,
    /// The selectors its policies and SAs use.
    pub(crate) local_ts: Vec<Selector>,
    /// The peer's selectors.
    pub(crate) remote_ts: Vec<Selector>,
    /// Where its SAs send (the peer's ESP-in-UDP endpoint).
    pub(crate) peer: SocketAddr,
    /// Its policies in every worker's SPD.
    pub(crate) policies: Vec<PolicyId>,
}

/// One child.
#[derive(Debug)]
pub(crate) struct Child {
    /// Its connection.
    pub(crate) conn: ConnId,
    /// Its name (display only).
    pub(crate) name: Arc<str>,
    /// Its configuration.
    pub(crate) settings: Settings,
    /// Its group, once it has policies (a trap, or its first SA).
    pub(crate) group: Option<Group>,
    /// The SA in the fallback slot.
    pub(crate) fallback: Option<SaId>,
    /// The SA in each worker's slot.
    pub(crate) subs: Vec<Option<SaId>>,
    /// Every SA of the child: sending, received on only, waiting for the
    /// peer to switch, lingering after a rekey.
    pub(crate) sas: Vec<SaId>,
    /// Acquires of each worker's sub-SA in flight, since when.
    pub(crate) acquires: Vec<Option<Instant>>,
    /// An acquire of the child as a whole (trap) in flight, since when.
    pub(crate) acquire_all: Option<Instant>,
    /// The peer gives no (more) per-resource SAs: workers use the fallback.
    pub(crate) per_cpu_off: bool,
    /// A trap policy is armed: traffic initiates the child.
    pub(crate) trap: bool,
    /// To be started once its connection's IKE SA is up (a `start` child
    /// other than the one IKE_AUTH creates).
    pub(crate) start_once_up: bool,
}

impl Child {
    pub(crate) fn new(conn: ConnId, name: Arc<str>, settings: Settings, workers: u16) -> Self {
        let n = usize::from(workers);
        Self {
            conn,
            name,
            settings,
            group: None,
            fallback: None,
            subs: vec![None; n],
            sas: Vec::new(),
            acquires: vec![None; n],
            acquire_all: None,
            per_cpu_off: false,
            trap: false,
            start_once_up: false,
        }
    }

    /// Whether the workers should ask for sub-SAs now.
    pub(crate) fn per_cpu(&self) -> bool {
        self.settings.per_cpu && !self.per_cpu_off
    }

    /// The slot of a new per-resource SA received on worker `k` (its
    /// inbound SPI steers there): `k`'s, unless another SA holds it.
    pub(crate) fn sub_slot(&self, k: u16) -> Slot {
        match self.subs.get(usize::from(k)) {
            Some(None) => Slot::Worker(k),
            _ => Slot::InboundOnly,
        }
    }
}

/// The slot of a static child's pair `i` on a gateway with `workers`
/// workers: pair 0 is the fallback, pair k+1 worker k's sub-SA, pairs
/// beyond the workers inbound only.
pub(crate) fn static_slot(i: usize, workers: usize) -> Slot {
    match i {
        0 => Slot::Fallback,
        k if k - 1 < workers => Slot::Worker(u16::try_from(k - 1).unwrap_or(u16::MAX)),
        _ => Slot::InboundOnly,
    }
}
