//! Initiator pacing: how many of our IKE SAs to one peer address may be
//! between their IKE_SA_INIT request and the end of IKE_AUTH at once.
//!
//! A responder counts the half-open IKE SAs of each source address and,
//! past a few, demands a COOKIE or drops the request (RFC 7296 §2.6;
//! strongSwan's `cookie_threshold_ip` and `block_threshold`, this crate's
//! `cookie_threshold_per_source` and `half_open_per_source`). A gateway
//! starting fifty connections to one hub at once would send fifty
//! IKE_SA_INIT requests in one burst, most of them refused, then retry
//! them on the back-off of retransmission. Instead each initiation takes
//! one of `initiating_per_peer` slots of its peer address; without a free
//! slot the new IKE SA is created (it has its ID, tasks queue on it) but
//! sends nothing and waits in a first-come queue. When an SA holding a
//! slot is established or gone, the slot passes to the next one waiting.
//! Our count is never below the responder's: its half-open SA ends when
//! it answers IKE_AUTH, our slot only when that answer arrives.

use super::Endpoint;
use crate::ctx::Ctx;
use crate::sa::{IkeSa, State};
use core::net::IpAddr;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Per peer address: our IKE SAs being set up, and those waiting.
#[derive(Debug, Default)]
pub(super) struct Pacing {
    peers: HashMap<IpAddr, Peer>,
}

#[derive(Debug, Default)]
struct Peer {
    /// SAs holding a slot (their `pace_slot` names this address).
    setting_up: usize,
    /// IDs of SAs waiting for a slot, oldest first. One that died while
    /// waiting is skipped when its turn comes.
    waiting: VecDeque<u64>,
}

impl Endpoint {
    /// A new initiator SA, before its IKE_SA_INIT task is queued: take a
    /// slot of its peer address or wait for one.
    pub(super) fn pace(&mut self, sa: &mut IkeSa) {
        let limit = self.config.initiating_per_peer;
        if limit == 0 {
            return;
        }
        let ip = sa.remote.ip();
        let peer = self.pacing.peers.entry(ip).or_default();
        if peer.setting_up < limit && peer.waiting.is_empty() {
            peer.setting_up += 1;
            sa.pace_slot = Some(ip);
        } else {
            peer.waiting.push_back(sa.spi_i);
            sa.waiting = true;
            self.stats.initiations_paced += 1;
            tracing::debug!(ike_sa = %sa.id, remote = %sa.remote, waiting = peer.waiting.len(), "initiation waits for its turn to the peer");
        }
    }

    /// The slot SA `sa` holds, if it is done with it (established,
    /// failed or dead); taken from the SA.
    pub(super) fn slot_done(sa: &mut IkeSa) -> Option<IpAddr> {
        if matches!(sa.state, State::Init | State::Auth) {
            return None;
        }
        sa.pace_slot.take()
    }

    /// A slot of `ip` came free: start waiting initiations while slots
    /// are free.
    pub(super) fn slot_freed(&mut self, now: Instant, ip: IpAddr) {
        let Some(peer) = self.pacing.peers.get_mut(&ip) else {
            return;
        };
        peer.setting_up = peer.setting_up.saturating_sub(1);
        loop {
            let Some(peer) = self.pacing.peers.get_mut(&ip) else {
                return;
            };
            if peer.setting_up >= self.config.initiating_per_peer.max(1) || self.recovery.closing {
                break;
            }
            let Some(next) = peer.waiting.pop_front() else {
                break;
            };
            let Some(sa) = self.sas.get_mut(&next) else {
                continue;
            };
            if !sa.waiting || sa.state != State::Init {
                continue;
            }
            peer.setting_up += 1;
            sa.waiting = false;
            sa.pace_slot = Some(ip);
            tracing::debug!(ike_sa = %sa.id, remote = %sa.remote, "initiation's turn to the peer");
            let mut ctx = ctx!(self, now);
            sa.send_next(&mut ctx);
            // An SA that died at once frees its slot again in `after`,
            // which calls back here: the loop re-reads the count.
            self.finish(now, next);
        }
        if let Some(peer) = self.pacing.peers.get(&ip) {
            if peer.setting_up == 0 && peer.waiting.is_empty() {
                self.pacing.peers.remove(&ip);
            }
        }
    }
}
