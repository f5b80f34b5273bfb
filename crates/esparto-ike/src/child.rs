//! Child SAs as an IKE SA keeps them (RFC 7296 §1.3, §2.8, §2.17): the
//! record of each installed one ([`ChildSa`]: enough to rekey it, to
//! resolve rekey collisions and to time it), and how a negotiated Child SA
//! becomes one ([`install`]): KEYMAT cut with [`crate::keys::ChildKeys`],
//! the record with its timers from the child's lifetimes, and the
//! `ChildSaEstablished` event that hands the keys to the driver
//! ([`announce`]). The negotiation itself, both exchanges and both roles,
//! is `exchange/child_sa`.

use crate::config::ChildConfig;
use crate::ctx::Ctx;
use crate::event::{ChildSaEstablished, Event, IkeSaId, Reason};
use crate::keys::ChildKeys;
use crate::lifetime::rekey_deadline;
use crate::ts::TrafficSelector;
use core::net::SocketAddr;
use esparto_crypto::EspSuite;
use esparto_crypto::ike::{KeGroup, Prf};
use std::sync::Arc;
use std::time::Instant;

/// Where a Child SA is in its life (RFC 7296 §2.8, §2.25.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChildState {
    /// In use.
    Installed,
    /// Our CREATE_CHILD_SA with REKEY_SA for it is under way.
    Rekeying,
    /// A successor took over; the initiator of the surviving rekey deletes
    /// this one.
    Rekeyed,
    /// We sent a Delete for it; the reason to report when it completes.
    Deleting(Reason),
}

/// An installed Child SA, as the IKE SA remembers it: enough to rekey it
/// (same selectors, same resource), to resolve rekey collisions (the
/// lowest nonce of the exchange that made it, §2.8.1), and its timers.
#[derive(Debug, Clone)]
pub(crate) struct ChildSa {
    /// Configuration name.
    pub(crate) name: Arc<str>,
    /// Our inbound SPI.
    pub(crate) inbound_spi: u32,
    /// Our outbound SPI.
    pub(crate) outbound_spi: u32,
    /// Our selectors, then the peer's, in one exact allocation (a Child SA
    /// lives for hours and most have one selector each way).
    ts: Box<[TrafficSelector]>,
    /// How many of `ts` are ours.
    n_local: usize,
    /// RFC 9611 resource (worker) we negotiated it for.
    pub(crate) resource: Option<u16>,
    /// RFC 9611: a per-resource SA (ours with `resource`, or the peer's).
    pub(crate) per_resource: bool,
    /// We initiated the exchange that created it.
    pub(crate) initiated: bool,
    /// Life cycle.
    pub(crate) state: ChildState,
    /// The inbound SPI of the SA it replaces.
    pub(crate) rekeys: Option<u32>,
    /// The lowest of the two nonces of the rekey exchange that created it
    /// (only for rekeys: what §2.8.1 compares).
    pub(crate) low_nonce: Option<Box<[u8]>>,
    /// The daemon was told to send on it.
    pub(crate) outbound_active: bool,
    /// It lost a rekey collision (§2.8.1): its creator deletes it; it
    /// never becomes active.
    pub(crate) redundant: bool,
    /// The daemon heard of it (a lost collision of ours is never announced).
    pub(crate) announced: bool,
    /// The PFS group it was made with, preferred when rekeying it.
    pub(crate) ke: Option<KeGroup>,
    /// When to rekey it (soft lifetime, jittered).
    pub(crate) rekey_at: Option<Instant>,
    /// When to delete it (hard lifetime, or a redundant SA's retirement).
    pub(crate) expire_at: Option<Instant>,
}

impl ChildSa {
    /// Our selectors.
    pub(crate) fn local_ts(&self) -> &[TrafficSelector] {
        self.ts.get(..self.n_local).unwrap_or_default()
    }

    /// The peer's selectors.
    pub(crate) fn remote_ts(&self) -> &[TrafficSelector] {
        self.ts.get(self.n_local..).unwrap_or_default()
    }

    /// Its next timer.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (self.rekey_at, self.expire_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The lowest of two nonces, octet by octet: §2.8 "'Lowest' means an
/// octet-by-octet comparison (instead of, for instance, comparing the
/// nonces as large integers). [...] If you reach the end of one nonce,
/// that nonce is the lower one." — exactly the lexicographic order of
/// byte slices.
pub(crate) fn lowest<'a>(a: &'a [u8], b: &'a [u8]) -> &'a [u8] {
    if a <= b { a } else { b }
}

/// Everything needed to report a new Child SA.
pub(crate) struct Install<'a> {
    pub(crate) ike_sa: IkeSaId,
    pub(crate) connection: Arc<str>,
    pub(crate) child: Arc<str>,
    pub(crate) initiator: bool,
    pub(crate) inbound_spi: u32,
    pub(crate) outbound_spi: u32,
    pub(crate) suite: EspSuite,
    pub(crate) esn: bool,
    pub(crate) prf: Prf,
    pub(crate) sk_d: &'a [u8],
    pub(crate) g_ir: Option<&'a [u8]>,
    pub(crate) ni: &'a [u8],
    pub(crate) nr: &'a [u8],
    pub(crate) local_ts: Vec<TrafficSelector>,
    pub(crate) remote_ts: Vec<TrafficSelector>,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) encap: bool,
    pub(crate) resource: Option<u16>,
    pub(crate) rekeys: Option<u32>,
    pub(crate) per_resource: bool,
    /// `false` for the responder of a rekey (see `event.rs`).
    pub(crate) outbound_active: bool,
    /// The PFS group used.
    pub(crate) ke: Option<KeGroup>,
    /// Lifetimes from here.
    pub(crate) config: &'a ChildConfig,
    /// IPComp, if agreed.
    pub(crate) ipcomp: Option<crate::ipcomp::IpcompCpis>,
}

/// Derive the keys and build the record the IKE SA keeps (timers set from
/// the child's lifetimes) and the event announcing it, which the caller
/// queues with [`announce`] — or not, for a rekey that lost a collision.
pub(crate) fn install(
    ctx: &mut Ctx<'_>,
    i: Install<'_>,
) -> Result<(ChildSa, Box<ChildSaEstablished>), Reason> {
    let keys = ChildKeys::derive(i.prf, i.sk_d, i.suite, i.g_ir, i.ni, i.nr)
        .map_err(|_| Reason::Local("Child SA key derivation"))?;
    let (inbound_key, outbound_key) = if i.initiator {
        (keys.r_to_i, keys.i_to_r)
    } else {
        (keys.i_to_r, keys.r_to_i)
    };
    let rekey_at = rekey_deadline(ctx, i.config.rekey_time, i.config.jitter());
    let expire_at = i.config.hard_lifetime().map(|l| ctx.now + l);
    let low_nonce = i.rekeys.map(|_| Box::<[u8]>::from(lowest(i.ni, i.nr)));
    let record = ChildSa {
        name: i.child.clone(),
        inbound_spi: i.inbound_spi,
        outbound_spi: i.outbound_spi,
        ts: i.local_ts.iter().chain(&i.remote_ts).copied().collect(),
        n_local: i.local_ts.len(),
        resource: i.resource,
        per_resource: i.per_resource,
        initiated: i.initiator,
        state: ChildState::Installed,
        rekeys: i.rekeys,
        low_nonce,
        outbound_active: i.outbound_active,
        redundant: false,
        announced: false,
        ke: i.ke,
        rekey_at,
        expire_at,
    };
    let event = Box::new(ChildSaEstablished {
        ike_sa: i.ike_sa,
        connection: i.connection,
        child: i.child,
        inbound_spi: i.inbound_spi,
        outbound_spi: i.outbound_spi,
        suite: i.suite,
        esn: i.esn,
        inbound_key,
        outbound_key,
        local_ts: i.local_ts,
        remote_ts: i.remote_ts,
        local: i.local,
        remote: i.remote,
        encap: i.encap,
        resource: i.resource,
        initiator: i.initiator,
        rekeys: i.rekeys,
        per_resource: i.per_resource,
        outbound_active: i.outbound_active,
        ipcomp: i.ipcomp,
    });
    Ok((record, event))
}

/// Tell the driver about a Child SA built by [`install`].
pub(crate) fn announce(ctx: &mut Ctx<'_>, child: &mut ChildSa, event: Box<ChildSaEstablished>) {
    tracing::info!(
        ike_sa = %event.ike_sa, child = %event.child, inbound_spi = format_args!("{:08x}", event.inbound_spi),
        outbound_spi = format_args!("{:08x}", event.outbound_spi), suite = event.suite.name(),
        encap = event.encap, rekeys = ?event.rekeys.map(|s| format!("{s:08x}")),
        resource = ?event.resource, per_resource = event.per_resource,
        ipcomp = ?event.ipcomp.map(|c| format!("cpi in {:04x} out {:04x}", c.inbound, c.outbound)),
        "CHILD_SA established"
    );
    child.announced = true;
    ctx.events.push_back(Event::ChildSaEstablished(event));
}
