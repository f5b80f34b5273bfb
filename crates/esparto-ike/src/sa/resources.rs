//! RFC 9611 per-resource Child SAs on one IKE SA.
//!
//! RFC 9611 §1: "The SA_RESOURCE_INFO notification is used to convey
//! information that the negotiated Child SA and subsequent new Child SAs
//! with the same Traffic Selectors are a logical group of Child SAs where
//! most or all of the Child SAs are bound to a specific resource, such as a
//! specific CPU. The TS_MAX_QUEUE notify conveys that the peer is unwilling
//! to create more additional Child SAs for this particular negotiated
//! Traffic Selector combination."
//!
//! How Esparto uses it (a fallback SA and one sub-SA per CPU):
//! - The first Child SA of a per-CPU child — in IKE_AUTH or the first
//!   CREATE_CHILD_SA for it — is the group's **fallback** SA, which any
//!   worker may use; we send SA_RESOURCE_INFO with it. A peer that answers
//!   with SA_RESOURCE_INFO supports per-resource SAs for the group; one
//!   that does not (strongSwan 5.9) gets no more: the group is closed and
//!   the driver told (`PerResourceUnavailable`), so traffic keeps flowing
//!   on the fallback SA on every worker.
//! - Then each worker's **sub-SA** is a CREATE_CHILD_SA with
//!   SA_RESOURCE_INFO, for all workers at once (`eager`) or when a worker
//!   first sends (`on-demand`, [`crate::Endpoint::acquire`] with
//!   `Some(worker)`), at most `per_cpu_max` of them. They go out in
//!   parallel as far as the peer's window allows (§2.3).
//! - As responder we accept the peer's sub-SAs (identical selectors) up to
//!   `per_cpu_max`, then answer TS_MAX_QUEUE; a rekey is never counted
//!   (it replaces an SA). The sub-SAs the peer made carry `per_resource:
//!   true, resource: None`: the daemon installs them for a worker of its
//!   own that has none, or inbound-only (fewer local workers than the
//!   peer's).

use super::IkeSa;
use crate::config::PerCpuSas;
use crate::ctx::Ctx;
use crate::event::{Event, Reason};
use crate::exchange::Task;
use crate::exchange::child_sa::offer::ChildOffer;
use std::sync::Arc;

impl IkeSa {
    /// Our per-resource Child SAs of `child`, live or being negotiated.
    fn own_sub_sas(&self, child: &Arc<str>) -> Vec<u16> {
        let live = self
            .children
            .iter()
            .filter(|c| c.name == *child && c.initiated && c.per_resource && !c.redundant)
            .filter_map(|c| c.resource);
        let pending = self
            .pending
            .iter()
            .map(|p| &p.task)
            .chain(self.queue.iter())
            .filter_map(|t| match t {
                Task::CreateChild(c) if c.name == *child && c.per_resource => c.resource,
                _ => None,
            });
        let mut v: Vec<u16> = live.chain(pending).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Has `child` a Child SA here, or one being negotiated?
    pub(crate) fn has_child(&self, child: &Arc<str>) -> bool {
        self.children.iter().any(|c| c.name == *child)
            || self
                .pending
                .iter()
                .map(|p| &p.task)
                .chain(self.queue.iter())
                .any(|t| t.creates_child(child))
    }

    fn close_group(&mut self, ctx: &mut Ctx<'_>, child: &Arc<str>, reason: Reason) {
        let id = self.id;
        let connection = self.conn.name.clone();
        let g = self.resource_group(child);
        if g.closed {
            return;
        }
        g.closed = true;
        g.wanted.clear();
        tracing::info!(ike_sa = %id, %child, ?reason, "no (more) per-resource CHILD_SAs");
        ctx.events.push_back(Event::PerResourceUnavailable {
            ike_sa: id,
            connection,
            child: child.clone(),
            reason,
        });
    }

    /// The group's fallback SA is up (or failed: `None`); `echoed` says
    /// whether the peer answered SA_RESOURCE_INFO. Start the sub-SAs that
    /// are wanted (eager: one per worker).
    pub(crate) fn fallback_done(
        &mut self,
        ctx: &mut Ctx<'_>,
        child: &Arc<str>,
        echoed: Option<bool>,
    ) {
        let Some(cfg) = self.conn.child(child) else {
            return;
        };
        if cfg.per_cpu_sas == PerCpuSas::No {
            return;
        }
        let (eager, max) = (cfg.per_cpu_sas == PerCpuSas::Eager, cfg.per_cpu_max);
        match echoed {
            None => {
                // No fallback SA: wait for the next acquire.
                self.resource_group(child).wanted.clear();
                return;
            }
            Some(false) => {
                return self.close_group(ctx, child, Reason::PerResourceUnsupported);
            }
            Some(true) => self.resource_group(child).supported = true,
        }
        if eager {
            let n = ctx.config.resources.min(max);
            let g = self.resource_group(child);
            for k in 0..n {
                if !g.wanted.contains(&k) {
                    g.wanted.push(k);
                }
            }
        }
        self.start_wanted(ctx, child);
    }

    /// Queue a CREATE_CHILD_SA for every wanted resource without one.
    fn start_wanted(&mut self, ctx: &mut Ctx<'_>, child: &Arc<str>) {
        let max = self.conn.child(child).map_or(0, |c| c.per_cpu_max);
        let wanted = std::mem::take(&mut self.resource_group(child).wanted);
        for k in wanted {
            let own = self.own_sub_sas(child);
            if own.contains(&k) {
                continue;
            }
            if own.len() >= usize::from(max) {
                self.close_group(ctx, child, Reason::Local("per_cpu_max reached"));
                return;
            }
            let mut t = ChildOffer::new(child.clone(), Some(k));
            t.per_resource = true;
            self.queue.push_back(Task::CreateChild(t));
        }
        self.send_next(ctx);
    }

    /// The data plane asks for `child`'s sub-SA for worker `k`.
    pub(crate) fn acquire_resource(
        &mut self,
        ctx: &mut Ctx<'_>,
        child: &Arc<str>,
        k: u16,
    ) -> Result<(), Reason> {
        let g = self.resource_group(child);
        if g.closed {
            return Err(if g.supported {
                Reason::Local("per_cpu_max reached")
            } else {
                Reason::PerResourceUnsupported
            });
        }
        let supported = g.supported;
        if !g.wanted.contains(&k) {
            g.wanted.push(k);
        }
        if !self.has_child(child) {
            // The fallback first; the sub-SA when the peer's support is known.
            self.start_task(
                ctx,
                Task::CreateChild(ChildOffer::new(child.clone(), None)),
            );
        } else if supported {
            self.start_wanted(ctx, child);
        }
        let g = self.resource_group(child);
        if g.closed && !g.supported {
            return Err(Reason::PerResourceUnsupported);
        }
        Ok(())
    }

    /// Responder: may the peer have another per-resource SA of `child`?
    /// RFC 9611: beyond our maximum, TS_MAX_QUEUE.
    pub(crate) fn accepts_peer_sub_sa(&self, child: &Arc<str>, max: u16) -> bool {
        let n = self
            .children
            .iter()
            .filter(|c| c.name == *child && c.per_resource && !c.initiated && !c.redundant)
            .count();
        n < usize::from(max)
    }
}
