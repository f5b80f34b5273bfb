//! `status` and `sas`, derived from the table: each worker reports its
//! SAs' counters by SPI (an integer) and, for outbound SAs, group; the
//! table says whose they are, and what each Child SA is.
//!
//! Joining costs one hash look-up per SA a worker reports: the counters
//! are summed by (SPI, direction, group) once, then each Child SA finds
//! its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use esparto_esp::{Direction, GroupId, SaStats};
use esparto_ike::IkeSaId;

use super::{SaId, Table};
use super::child::Role;
use super::sa::{ChildSa, Out};
use crate::status::{ChildSaStatus, IkeSaStatus, NatStatus};

/// Who an SA a worker reports belongs to (for the table's tests; the
/// gateway takes [`Table::owner`]).
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Label<'a> {
    /// Connection name.
    pub(crate) connection: &'a str,
    /// Child name.
    pub(crate) child: &'a str,
    /// What it is to its group.
    pub(crate) role: Role,
}

/// Packets and bytes of every SA, summed over the workers, and when the
/// last worker to use it did.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    by_sa: HashMap<(u32, Direction, Option<GroupId>), Traffic>,
}

/// One SA's figures over every worker.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Traffic {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
    /// The latest of the workers' last-packet times.
    pub(crate) last_used: Option<Instant>,
}

/// Whose an SA is: connection, child, role, and the IPComp mode the
/// child asked for if the peer refused it.
pub(crate) type SaOwner = (Arc<str>, Arc<str>, Role, Option<esparto_esp::IpcompMode>);

impl Counters {
    /// Adds one worker's figures of one SA.
    pub(crate) fn add(&mut self, s: &SaStats) {
        let e = self.by_sa.entry((s.spi, s.direction, s.group)).or_default();
        e.packets += s.counters.packets;
        e.bytes += s.counters.bytes;
        e.last_used = e.last_used.max(s.last_used);
    }

    fn get(&self, spi: u32, direction: Direction, group: Option<GroupId>) -> Traffic {
        self.by_sa.get(&(spi, direction, group)).copied().unwrap_or_default()
    }
}

impl Table {
    /// Whose SA a worker reports: an inbound SPI, or an outbound SPI of a
    /// group (outbound SPIs are the peers' choice, unique only per peer).
    #[cfg(test)]
    pub(crate) fn label(&self, spi: u32, direction: Direction, group: Option<GroupId>) -> Option<Label<'_>> {
        let sa = self.reported(spi, direction, group)?;
        let (connection, child) = self.names(sa.child)?;
        Some(Label {
            connection,
            child,
            role: sa.role,
        })
    }

    /// Whose SA a worker reports (see [`reported`](Self::reported)), with
    /// shared names, to keep beyond a borrow of the table: (connection,
    /// child, role, and the IPComp mode the child asked for if the peer
    /// refused it: no IPCOMP_SUPPORTED back, or an unusable transform or
    /// CPI).
    pub(crate) fn owner(
        &self,
        spi: u32,
        direction: Direction,
        group: Option<GroupId>,
    ) -> Option<SaOwner> {
        let sa = self.reported(spi, direction, group)?;
        let (connection, child) = self.names(sa.child)?;
        let refused = if sa.ipcomp.is_none() { self.children[sa.child.0].settings.ipcomp } else { None };
        Some((connection.clone(), child.clone(), sa.role, refused))
    }

    /// The Child SA a worker reports an SA of: by inbound SPI, or by
    /// outbound SPI and group (outbound SPIs are the peers' choice, unique
    /// only per peer).
    fn reported(&self, spi: u32, direction: Direction, group: Option<GroupId>) -> Option<&ChildSa> {
        match direction {
            Direction::Inbound => self.by_in.get(&spi).map(|id| &self.sas[id.0]),
            Direction::Outbound => self.by_out.get(&spi).and_then(|ids| {
                ids.iter()
                    .map(|id| &self.sas[id.0])
                    .find(|sa| self.children[sa.child.0].group.as_ref().map(|g| g.id) == group || group.is_none())
            }),
        }
    }

    /// The IKE SAs with their Child SAs and each one's traffic; ESP is
    /// received on `esp_port`.
    pub(crate) fn ike_sas_status(&self, now: Instant, counters: &Counters, esp_port: u16) -> Vec<IkeSaStatus> {
        let mut ids: Vec<_> = self.ike_sas.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.ike_sa_status(id, now, counters, esp_port)).collect()
    }

    /// One IKE SA with its Child SAs and each one's traffic.
    pub(crate) fn ike_sa_status(&self, id: IkeSaId, now: Instant, counters: &Counters, esp_port: u16) -> Option<IkeSaStatus> {
        self.ike_sas.get(&id).map(|r| (&id, r))
            .map(|(id, r)| IkeSaStatus {
                id: id.to_string(),
                connection: self
                    .conns
                    .get(r.conn.0)
                    .map_or_else(String::new, |c| c.name.to_string()),
                state: if r.established { "established" } else { "connecting" }.into(),
                initiator: r.initiator,
                local: r.local.to_string(),
                remote: r.remote.to_string(),
                remote_host: String::new(),
                local_id: r.local_id.clone(),
                remote_id: r.remote_id.clone(),
                age_s: now.saturating_duration_since(r.since).as_secs_f64(),
                proposal: String::new(),
                rekey_in_s: None,
                responder_spi: String::new(),
                initiator_spi: String::new(),
                nat: NatStatus {
                    encap: "esp-in-udp".into(),
                    local_port: esp_port,
                    remote_port: r
                        .sas
                        .iter()
                        .find_map(|sid| self.children[self.sas[sid.0].child.0].group.as_ref())
                        .map_or(0, |g| g.peer.port()),
                    ..NatStatus::default()
                },
                children: r.sas.iter().map(|sid| self.child_sa_status(now, counters, *sid)).collect(),
            })
    }

    /// One Child SA of an IKE SA, with its traffic.
    fn child_sa_status(&self, now: Instant, counters: &Counters, sid: SaId) -> ChildSaStatus {
        let sa = &self.sas[sid.0];
        let c = &self.children[sa.child.0];
        let group = c.group.as_ref().map(|g| g.id);
        let rx = counters.get(sa.in_spi, Direction::Inbound, None);
        let tx = counters.get(sa.out_spi, Direction::Outbound, group);
        let idle = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_secs_f64());
        // The configured lifetime; the IKE engine's jittered
        // timers replace it for negotiated SAs (`Ike::annotate`).
        let left = |limit: Option<std::time::Duration>| {
            limit.map(|l| (sa.since + l).saturating_duration_since(now).as_secs_f64())
        };
        let lifetime = &c.settings.lifetime;
        ChildSaStatus {
            child: c.name.to_string(),
            in_spi: format!("{:08x}", sa.in_spi),
            out_spi: format!("{:08x}", sa.out_spi),
            suite: sa.suite.name().into(),
            role: sa.role.name().into(),
            in_worker: Some(sa.in_worker),
            out_worker: sa.out_worker(),
            out_state: match sa.out {
                Out::Sending => "sending",
                Out::Waiting(_) => "waiting",
                Out::Confirming(_) => "confirming",
                Out::Idle => "idle",
            }
            .into(),
            local_ts: c
                .group
                .iter()
                .flat_map(|g| &g.local_ts)
                .map(ToString::to_string)
                .collect(),
            remote_ts: c
                .group
                .iter()
                .flat_map(|g| &g.remote_ts)
                .map(ToString::to_string)
                .collect(),
            age_s: now.saturating_duration_since(sa.since).as_secs_f64(),
            rekey_in_s: if sa.rekeying { None } else { left(lifetime.soft_time) },
            expire_in_s: left(lifetime.hard_time),
            in_idle_s: idle(rx.last_used),
            out_idle_s: idle(tx.last_used),
            in_bytes: rx.bytes,
            in_packets: rx.packets,
            out_bytes: tx.bytes,
            out_packets: tx.packets,
            ipcomp: match (c.settings.ipcomp, sa.ipcomp) {
                (None, _) => String::new(),
                (Some(_), None) => crate::status::IPCOMP_REFUSED.into(),
                (Some(m), Some(cpis)) => format!(
                    "{}, cpi in {:04x} out {:04x}",
                    crate::status::IpcompStatus::refused(m).mode,
                    cpis.inbound,
                    cpis.outbound
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_esp::SaCounters;
    use std::time::Duration;

    fn stats(packets: u64, last_used: Option<Instant>) -> SaStats {
        SaStats {
            spi: 0x100,
            direction: Direction::Inbound,
            group: None,
            fallback: false,
            suite: "aes256gcm16",
            peer: "192.0.2.2:4500".parse().unwrap(),
            last_seq: packets,
            installed: Instant::now(),
            last_used,
            counters: SaCounters { packets, bytes: packets * 100, ..SaCounters::default() },
            ipcomp: None,
        }
    }

    /// An SA's traffic is summed over the workers, and its last packet is
    /// the latest any worker saw.
    #[test]
    fn workers_figures_sum_and_the_latest_last_packet_wins() {
        let t0 = Instant::now();
        let mut c = Counters::default();
        c.add(&stats(3, Some(t0 + Duration::from_secs(2))));
        c.add(&stats(0, None));
        c.add(&stats(4, Some(t0 + Duration::from_secs(1))));
        let t = c.get(0x100, Direction::Inbound, None);
        assert_eq!((t.packets, t.bytes, t.last_used), (7, 700, Some(t0 + Duration::from_secs(2))));
        let none = c.get(0x200, Direction::Inbound, None);
        assert_eq!((none.packets, none.last_used), (0, None));
    }
}
