//! Installing children into the data plane: one path for static keys and
//! for IKE-negotiated SAs.
//!
//! Each child (connection, child name) gets an SA group and the policies of
//! its selectors. SA pairs are then added to the group in one of three
//! slots: the **fallback** (the group's head SA, on every worker, one shared
//! sequence counter; the only SA when there are no sub-SAs), a worker's
//! **sub-SA** (on that worker only), or **inbound only** (the peer has more
//! cores than we have workers: we receive on its extra SAs but never send
//! on them, DESIGN.md "fewer local CPUs"). Every inbound SA goes to the
//! worker its SPI steers to.
//!
//! Order matters for a make-before-break rekey: a new pair is installed
//! (inbound first, so the peer may switch at once) before the old one is
//! removed, and removing a pair never touches the group's policies.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use esparto_crypto::{EspSuite, KeyLengthError, SecretBytes};
use esparto_esp::{
    Action, Command, Direction, GroupId, InboundSa, Lifetime, OutboundSa, Policy, SaConfig, SharedSeq, Spd,
    TrafficSelector,
};
use crate::datapath::spi_to_worker;
use tracing::{info, warn};

use super::Gateway;
use super::seqstate::{Claimed, Claims};
use crate::config::{Child, Connection};

/// The slot of a static child's pair `i` on a gateway with `workers`
/// workers: pair 0 is the fallback, pair k+1 worker k's sub-SA, pairs
/// beyond the workers inbound only.
pub(super) fn static_slot(i: usize, workers: usize) -> Slot {
    match i {
        0 => Slot::Fallback,
        k if k - 1 < workers => Slot::Worker((k - 1) as u16),
        _ => Slot::InboundOnly,
    }
}

/// Which SA of a group an SPI is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The only SA pair of a group without sub-SAs.
    Single,
    /// The fallback (head) SA of a per-CPU group.
    Fallback,
    /// A worker's own sub-SA (or a peer's extra one, inbound only).
    Sub,
}

impl Role {
    pub(super) fn name(self) -> &'static str {
        match self {
            Role::Single => "single",
            Role::Fallback => "fallback",
            Role::Sub => "sub",
        }
    }
}

/// What the control plane knows of one installed SA, for status output.
#[derive(Debug, Clone)]
pub(super) struct SaLabel {
    pub(super) connection: String,
    pub(super) child: String,
    pub(super) role: Role,
}

/// Where a pair goes in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The group's fallback (or only) SA.
    Fallback,
    /// Worker `k`'s own sub-SA.
    Worker(u16),
    /// Received on, never sent on.
    InboundOnly,
    /// A sub-SA the peer negotiated for one of its resources (RFC 9611):
    /// we send on it from the first worker that has no sub-SA of its own
    /// in this group, else receive only.
    AnyFreeWorker,
}

/// One SA pair to install.
#[derive(Debug)]
pub struct SaPair<'a> {
    /// Algorithms.
    pub suite: EspSuite,
    /// Extended sequence numbers.
    pub esn: bool,
    /// SPI we receive on.
    pub in_spi: u32,
    /// SPI we send on.
    pub out_spi: u32,
    /// KEYMAT of the inbound SA.
    pub in_key: &'a SecretBytes,
    /// KEYMAT of the outbound SA.
    pub out_key: &'a SecretBytes,
    /// Where it goes.
    pub slot: Slot,
}

/// A child's traffic parameters.
#[derive(Debug, Clone)]
pub struct ChildParams {
    /// Our selectors.
    pub local_ts: Vec<TrafficSelector>,
    /// The peer's selectors.
    pub remote_ts: Vec<TrafficSelector>,
    /// The peer's ESP-in-UDP endpoint.
    pub peer: SocketAddr,
    /// Anti-replay window.
    pub replay_window: u32,
    /// Lifetimes of each SA.
    pub lifetime: Lifetime,
    /// Whether per-worker sub-SAs are wanted (workers raise acquires without one).
    pub per_cpu: bool,
}

/// A child as installed.
#[derive(Debug)]
pub(super) struct ChildState {
    pub(super) connection: String,
    pub(super) child: String,
    pub(super) group: GroupId,
    pub(super) params: ChildParams,
    pub(super) policies: Vec<Policy>,
    /// Outbound SPIs, with the worker for sub-SAs (`None`: the fallback).
    pub(super) outbound: Vec<(u32, Option<u16>)>,
    /// Inbound SPIs and the worker that owns each.
    pub(super) inbound: Vec<(u32, usize)>,
}

fn key_err(e: KeyLengthError) -> anyhow::Error {
    anyhow!("key length: expected {} bytes, got {}", e.expected, e.got)
}

fn policies(group: GroupId, local: &[TrafficSelector], remote: &[TrafficSelector]) -> Vec<Policy> {
    let mut out = Vec::new();
    for l in local {
        for r in remote.iter().filter(|r| r.addrs.family() == l.addrs.family()) {
            out.push(Policy { local: *l, remote: *r, action: Action::Protect(group), priority: Policy::auto_priority(l, r) });
        }
    }
    out
}

impl Gateway {
    /// Creates (or updates the selectors of) the group of a child; returns it.
    ///
    /// The routes of the peer's selectors are set every time, not only when
    /// they change: a route the kernel flushed meanwhile (the device went
    /// down and up) would otherwise leave the child's traffic without a way
    /// into the tunnel until a restart.
    pub fn ensure_child(&mut self, connection: &str, child: &str, params: ChildParams) -> Result<GroupId> {
        if let Some(c) = self.children.iter_mut().find(|c| c.connection == connection && c.child == child) {
            let group = c.group;
            let changed = c.params.local_ts != params.local_ts || c.params.remote_ts != params.remote_ts;
            let remote_ts = params.remote_ts.clone();
            if changed {
                c.policies = policies(group, &params.local_ts, &params.remote_ts);
            }
            c.params = params;
            if changed {
                self.add_routes(&remote_ts)?;
                self.publish_spd()?;
            } else if let Err(e) = self.add_routes(&remote_ts) {
                // The SAs still go in: the routes come back with the next
                // install, once the device can take them.
                warn!(connection, child, "routes not restored: {e:#}");
            }
            return Ok(group);
        }
        let group = self.next_group;
        self.next_group += 1;
        let per_cpu = params.per_cpu;
        self.send_all(|| Ok(Command::AddGroup { id: group, per_cpu }))?;
        self.add_routes(&params.remote_ts)?;
        self.children.push(ChildState {
            connection: connection.to_string(),
            child: child.to_string(),
            group,
            policies: policies(group, &params.local_ts, &params.remote_ts),
            params,
            outbound: Vec::new(),
            inbound: Vec::new(),
        });
        self.publish_spd()?;
        Ok(group)
    }

    fn add_routes(&mut self, remote_ts: &[TrafficSelector]) -> Result<()> {
        for r in remote_ts {
            for (addr, len) in esparto_io::route::range_to_prefixes(r.addrs.start(), r.addrs.end()) {
                self.routes.add(addr, len)?;
            }
        }
        Ok(())
    }

    /// Adds an SA pair to a child created with [`ensure_child`](Self::ensure_child):
    /// inbound first (the peer may start using it at once), then outbound.
    /// A pair in an occupied slot replaces the SA there (a rekey). Returns
    /// the slot the outbound SA took.
    pub fn add_pair(&mut self, connection: &str, child: &str, pair: &SaPair<'_>) -> Result<Slot> {
        self.add_inbound(connection, child, pair)?;
        self.set_outbound(connection, child, pair)
    }

    fn child_index(&self, connection: &str, child: &str) -> Result<usize> {
        self.children
            .iter()
            .position(|c| c.connection == connection && c.child == child)
            .with_context(|| format!("{connection}/{child} has no group"))
    }

    fn sa_config(&self, idx: usize, suite: EspSuite, esn: bool, spi: u32, key: &SecretBytes) -> SaConfig {
        let params = &self.children[idx].params;
        SaConfig {
            spi,
            suite,
            keymat: SecretBytes::from_slice(key.as_slice()),
            esn,
            replay_window: params.replay_window,
            lifetime: params.lifetime,
            local_ts: params.local_ts.clone(),
            remote_ts: params.remote_ts.clone(),
            peer: params.peer,
            path_mtu: self.path_mtu,
        }
    }

    fn fallback_role(&self, idx: usize, slot: Slot) -> Role {
        if self.children[idx].params.per_cpu || !matches!(slot, Slot::Fallback) { Role::Fallback } else { Role::Single }
    }

    /// Installs the inbound half of `pair` on the worker its SPI steers to.
    pub fn add_inbound(&mut self, connection: &str, child: &str, pair: &SaPair<'_>) -> Result<()> {
        let idx = self.child_index(connection, child)?;
        let now = Instant::now();
        let cfg = self.sa_config(idx, pair.suite, pair.esn, pair.in_spi, pair.in_key);
        let w = spi_to_worker(pair.in_spi, self.workers());
        self.send(w, Command::AddInbound(Box::new(InboundSa::new(&cfg, now).map_err(key_err)?)))?;
        let role = match pair.slot {
            Slot::Fallback => self.fallback_role(idx, pair.slot),
            Slot::Worker(_) | Slot::InboundOnly | Slot::AnyFreeWorker => Role::Sub,
        };
        self.children[idx].inbound.push((pair.in_spi, w));
        self.labels.insert((pair.in_spi, Direction::Inbound), SaLabel { connection: connection.into(), child: child.into(), role });
        Ok(())
    }

    /// Starts sending on the outbound half of `pair` in its slot (replacing
    /// what was there). Returns the slot taken.
    pub fn set_outbound(&mut self, connection: &str, child: &str, pair: &SaPair<'_>) -> Result<Slot> {
        self.set_outbound_reserved(connection, child, pair, None)
    }

    /// [`set_outbound`](Self::set_outbound), continuing the sequence
    /// numbers of earlier runs within a durable reservation (static SAs).
    fn set_outbound_reserved(
        &mut self,
        connection: &str,
        child: &str,
        pair: &SaPair<'_>,
        reserved: Option<&Claimed>,
    ) -> Result<Slot> {
        let idx = self.child_index(connection, child)?;
        let now = Instant::now();
        let group = self.children[idx].group;
        let per_cpu = self.children[idx].params.per_cpu;
        let out = self.sa_config(idx, pair.suite, pair.esn, pair.out_spi, pair.out_key);
        let slot = match pair.slot {
            Slot::AnyFreeWorker => (0..self.workers().min(usize::from(u16::MAX)))
                .map(|k| k as u16)
                .find(|k| !self.children[idx].outbound.iter().any(|(_, w)| *w == Some(*k)))
                .map_or(Slot::InboundOnly, Slot::Worker),
            s => s,
        };
        let owned = || -> Result<Box<OutboundSa>> {
            let sa = OutboundSa::owned(&out, now).map_err(key_err)?;
            Ok(Box::new(match reserved {
                Some(r) => sa.reserved(r.limit.clone()),
                None => sa,
            }))
        };
        let out_worker = match slot {
            Slot::Fallback if self.workers() == 1 && !per_cpu => {
                self.send(0, Command::SetFallback(group, owned()?))?;
                Some(None)
            }
            Slot::Fallback => {
                // One counter for every worker's copy, continuing after
                // earlier runs when reserved.
                let seq = reserved.map_or_else(SharedSeq::new, |r| r.shared.clone());
                self.send_all(|| {
                    let sa = OutboundSa::shared(&out, seq.clone(), now).map_err(key_err)?;
                    let sa = match reserved {
                        Some(r) => sa.reserved(r.limit.clone()),
                        None => sa,
                    };
                    Ok(Command::SetFallback(group, Box::new(sa)))
                })?;
                Some(None)
            }
            Slot::Worker(k) if usize::from(k) < self.workers() => {
                self.send(usize::from(k), Command::SetSub(group, owned()?))?;
                Some(Some(k))
            }
            Slot::Worker(_) | Slot::InboundOnly | Slot::AnyFreeWorker => None,
        };
        let role = match out_worker {
            Some(Some(_)) => Role::Sub,
            _ => self.fallback_role(idx, slot),
        };
        let c = &mut self.children[idx];
        if let Some(worker) = out_worker {
            // The SA now in this slot replaces any earlier one there.
            for (spi, _) in c.outbound.iter().filter(|(_, wk)| *wk == worker) {
                self.labels.remove(&(*spi, Direction::Outbound));
            }
            c.outbound.retain(|(_, wk)| *wk != worker);
            c.outbound.push((pair.out_spi, worker));
            self.labels.insert(
                (pair.out_spi, Direction::Outbound),
                SaLabel { connection: connection.to_string(), child: child.to_string(), role },
            );
        }
        Ok(match out_worker {
            Some(None) => Slot::Fallback,
            Some(Some(k)) => Slot::Worker(k),
            None => Slot::InboundOnly,
        })
    }

    /// Turns per-CPU acquires of a child's workers on or off.
    pub fn set_per_cpu(&mut self, connection: &str, child: &str, per_cpu: bool) -> Result<()> {
        let idx = self.child_index(connection, child)?;
        if self.children[idx].params.per_cpu == per_cpu {
            return Ok(());
        }
        self.children[idx].params.per_cpu = per_cpu;
        let group = self.children[idx].group;
        self.send_all(|| Ok(Command::AddGroup { id: group, per_cpu }))
    }

    /// The child a group belongs to.
    pub fn child_of_group(&self, group: GroupId) -> Option<(&str, &str)> {
        self.children.iter().find(|c| c.group == group).map(|c| (c.connection.as_str(), c.child.as_str()))
    }

    /// Removes one inbound SA of a child (kept apart from its outbound half
    /// after a rekey, to catch packets still in flight).
    pub fn remove_inbound(&mut self, connection: &str, child: &str, in_spi: u32) -> Result<bool> {
        let Ok(idx) = self.child_index(connection, child) else { return Ok(false) };
        let c = &mut self.children[idx];
        let gone: Vec<(u32, usize)> = c.inbound.iter().copied().filter(|(s, _)| *s == in_spi).collect();
        c.inbound.retain(|(s, _)| *s != in_spi);
        for (spi, w) in &gone {
            self.send(*w, Command::RemoveInbound(*spi))?;
            self.labels.remove(&(*spi, Direction::Inbound));
        }
        Ok(!gone.is_empty())
    }

    /// Stops sending on an outbound SA if it is still installed.
    pub fn remove_outbound(&mut self, connection: &str, child: &str, out_spi: u32) -> Result<bool> {
        let Ok(idx) = self.child_index(connection, child) else { return Ok(false) };
        let group = self.children[idx].group;
        let c = &mut self.children[idx];
        let had = c.outbound.iter().any(|(s, _)| *s == out_spi);
        c.outbound.retain(|(s, _)| *s != out_spi);
        if had {
            self.send_all(|| Ok(Command::RemoveOutbound(group, out_spi)))?;
            self.labels.remove(&(out_spi, Direction::Outbound));
        }
        Ok(had)
    }

    /// Removes one SA pair (by its SPIs) from a child; the group and its
    /// policies stay (a trap or a rekey keeps using them).
    pub fn remove_pair(&mut self, connection: &str, child: &str, in_spi: u32, out_spi: u32) -> Result<bool> {
        let out = self.remove_outbound(connection, child, out_spi)?;
        let inb = self.remove_inbound(connection, child, in_spi)?;
        Ok(out || inb)
    }

    /// Removes a child entirely: its policies first (so no packet is
    /// encapsulated on an SA about to go), then its group and SAs.
    pub fn remove_child(&mut self, connection: &str, child: &str) -> Result<bool> {
        let Some(i) = self.children.iter().position(|c| c.connection == connection && c.child == child) else {
            return Ok(false);
        };
        let c = self.children.remove(i);
        self.publish_spd()?;
        self.send_all(|| Ok(Command::RemoveGroup(c.group)))?;
        for (spi, w) in &c.inbound {
            self.send(*w, Command::RemoveInbound(*spi))?;
            self.labels.remove(&(*spi, Direction::Inbound));
        }
        for (spi, _) in &c.outbound {
            self.labels.remove(&(*spi, Direction::Outbound));
        }
        Ok(true)
    }

    /// Sends the SPD built from every installed child to every worker.
    pub(super) fn publish_spd(&self) -> Result<()> {
        let spd = std::sync::Arc::new(Spd::new(self.children.iter().flat_map(|c| c.policies.iter().cloned()).collect()));
        self.send_all(|| Ok(Command::SetSpd(spd.clone())))
    }

    /// Installs a statically keyed child: pair 0 is the fallback, pair k+1
    /// worker k's sub-SA, pairs beyond our worker count inbound only. Each
    /// outbound SA continues within its claim ([`super::seqstate`]).
    pub(super) fn install_static(&mut self, conn: &Connection, child: &Child, claims: &Claims) -> Result<()> {
        let Some(st) = &child.static_sas else { return Ok(()) };
        let peer_ip = *conn.remote_addrs.first().context("no remote_addrs")?;
        let params = ChildParams {
            local_ts: child.local_ts.clone(),
            remote_ts: child.remote_ts.clone(),
            peer: SocketAddr::new(peer_ip, conn.remote_port),
            replay_window: child.replay_window,
            lifetime: child.lifetime,
            // Nothing can negotiate a missing sub-SA: no acquires.
            per_cpu: false,
        };
        self.ensure_child(&conn.name, &child.name, params)?;
        let n = self.workers();
        for (i, p) in st.pairs.iter().enumerate() {
            let slot = static_slot(i, n);
            let pair = SaPair {
                suite: st.suite,
                esn: st.esn,
                in_spi: p.in_spi,
                out_spi: p.out_spi,
                in_key: &p.in_key,
                out_key: &p.out_key,
                slot,
            };
            self.add_inbound(&conn.name, &child.name, &pair)?;
            if slot != Slot::InboundOnly {
                // Never sent on without a reservation: its counter would
                // start at 1 again under the same key.
                let claim = claims
                    .get(&(conn.name.clone(), child.name.clone(), i))
                    .with_context(|| format!("no sequence numbers reserved for static_sas[{i}]"))?;
                self.set_outbound_reserved(&conn.name, &child.name, &pair, Some(claim))?;
            }
        }
        if st.pairs.len() > 1 {
            // With sub-SAs the head SA is a fallback, not the only SA.
            for p in &st.pairs[..1] {
                for d in [Direction::Inbound, Direction::Outbound] {
                    let spi = if d == Direction::Inbound { p.in_spi } else { p.out_spi };
                    if let Some(l) = self.labels.get_mut(&(spi, d)) {
                        l.role = Role::Fallback;
                    }
                }
            }
        }
        info!(
            connection = %conn.name, child = %child.name, suite = st.suite.name(),
            pairs = st.pairs.len(), workers = n, "static child installed"
        );
        Ok(())
    }
}
