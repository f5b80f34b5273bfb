//! SA installs the workers have confirmed before anything that depends on
//! them happens.
//!
//! The control thread sends its commands to the workers through queues;
//! a worker applies them between its batches, which on a busy machine can
//! be long after. A new Child SA's inbound half must be in its worker
//! before the peer may send on it, and the peer may do so as soon as it
//! has our next IKE message (the CREATE_CHILD_SA or IKE_AUTH response we
//! answer with, or the Delete of the SA a rekey replaces): RFC 7296 §2.8's
//! make-before-break holds only if that message leaves after the install
//! is done, not after it is queued. Likewise we send on a new outbound
//! half only once its inbound half is in (the peer answers on it).
//!
//! So the Child SA table puts an [`Effect::Barrier`] after the inbound
//! half of each new Child SA. The gateway sends every worker
//! `Command::Barrier(n)`, which a worker answers (`Event::Barrier(n)`)
//! once it has applied everything queued before it; until all have, every
//! later effect of the table is held here, in order, and the IKE driver
//! holds back every IKE message it would send ([`Barriers::holding`] tags
//! each with the barrier it waits for). The answers wake the control
//! thread at once, so on an idle machine the wait is a few microseconds.
//!
//! A worker that does not answer within [`BARRIER_TIMEOUT`] (it is
//! stalled: the machine is starved, or a test delays it on purpose) fails
//! the exchanges that waited rather than letting them go early: the held
//! effects are applied (the table already counts on them) but the held
//! IKE messages are dropped; the peer retransmits its request, the engine
//! answers it again from its response cache, and our own requests are
//! retransmitted by the engine's timers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::table::Effect;

/// How long the workers have to confirm a barrier.
pub(super) const BARRIER_TIMEOUT: Duration = Duration::from_secs(2);

/// What to do with an effect now.
#[derive(Debug)]
pub(super) enum Admit {
    /// Apply it.
    Now(Effect),
    /// Send every worker `Command::Barrier` with this number; later effects
    /// wait for their answers.
    Issue(u64),
    /// Held behind a barrier.
    Held,
}

/// A barrier the workers are confirming.
#[derive(Debug)]
struct Pending {
    id: u64,
    /// Workers that have not answered yet.
    left: usize,
    issued: Instant,
}

/// Something held behind a barrier.
#[derive(Debug)]
enum Held {
    Effect(Effect),
    Barrier(u64),
}

/// The barriers of the Child SA table's effects (see the module essay).
#[derive(Debug)]
pub(super) struct Barriers {
    workers: usize,
    /// The number of the last barrier queued, issued or held.
    last: u64,
    pending: Option<Pending>,
    held: VecDeque<Held>,
}

impl Barriers {
    /// Barriers over `workers` workers.
    pub(super) fn new(workers: usize) -> Self {
        Self { workers, last: 0, pending: None, held: VecDeque::new() }
    }

    /// An effect of the table, in order.
    pub(super) fn admit(&mut self, now: Instant, e: Effect) -> Admit {
        let barrier = matches!(e, Effect::Barrier);
        if barrier {
            self.last += 1;
        }
        match (&self.pending, barrier) {
            (Some(_), true) => {
                self.held.push_back(Held::Barrier(self.last));
                Admit::Held
            }
            (Some(_), false) => {
                self.held.push_back(Held::Effect(e));
                Admit::Held
            }
            (None, true) => {
                self.pending = Some(Pending { id: self.last, left: self.workers, issued: now });
                Admit::Issue(self.last)
            }
            (None, false) => Admit::Now(e),
        }
    }

    /// The barrier an IKE message sent now would have to wait for (`None`:
    /// none is pending, send it).
    pub(super) fn holding(&self) -> Option<u64> {
        self.pending.as_ref().map(|_| self.last)
    }

    /// One worker's answer to barrier `id`. When it was the last, returns
    /// `id`: messages waiting for it may go, and [`Barriers::release`]
    /// gives the effects held behind it.
    pub(super) fn confirmed(&mut self, id: u64) -> Option<u64> {
        let p = self.pending.as_mut().filter(|p| p.id == id)?;
        p.left = p.left.saturating_sub(1);
        if p.left > 0 {
            return None;
        }
        self.pending = None;
        Some(id)
    }

    /// When the pending barrier times out.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.issued + BARRIER_TIMEOUT)
    }

    /// The pending barrier, if it has timed out: it is given up (returns
    /// its number and how long it waited), and [`Barriers::release`] gives
    /// what it held.
    pub(super) fn expire(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let p = self.pending.as_ref().filter(|p| now >= p.issued + BARRIER_TIMEOUT)?;
        let r = (p.id, now.duration_since(p.issued));
        self.pending = None;
        Some(r)
    }

    /// With no barrier pending, the held effects up to the next barrier
    /// (which this issues: the last entry is then [`Admit::Issue`]).
    pub(super) fn release(&mut self, now: Instant) -> Vec<Admit> {
        let mut out = Vec::new();
        while self.pending.is_none() {
            match self.held.pop_front() {
                Some(Held::Effect(e)) => out.push(Admit::Now(e)),
                Some(Held::Barrier(id)) => {
                    self.pending = Some(Pending { id, left: self.workers, issued: now });
                    out.push(Admit::Issue(id));
                }
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unroute(n: u8) -> Effect {
        Effect::Unroute(vec![(std::net::IpAddr::from([10, 0, 0, n]), 32)])
    }

    fn is_now(a: &Admit, n: u8) -> bool {
        matches!(a, Admit::Now(Effect::Unroute(p)) if p[0].0 == std::net::IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn effects_after_a_barrier_wait_for_every_worker() {
        let t = Instant::now();
        let mut b = Barriers::new(2);
        assert!(is_now(&b.admit(t, unroute(1)), 1));
        assert_eq!(b.holding(), None);
        assert!(matches!(b.admit(t, Effect::Barrier), Admit::Issue(1)));
        assert_eq!(b.holding(), Some(1));
        assert!(matches!(b.admit(t, unroute(2)), Admit::Held));
        // A second barrier queued behind the first: messages from now on
        // wait for it.
        assert!(matches!(b.admit(t, Effect::Barrier), Admit::Held));
        assert_eq!(b.holding(), Some(2));
        assert!(matches!(b.admit(t, unroute(3)), Admit::Held));
        assert_eq!(b.confirmed(1), None, "one of two workers");
        assert_eq!(b.confirmed(2), None, "not the pending one");
        assert_eq!(b.confirmed(1), Some(1));
        // Released up to the next barrier, which is issued.
        let r = b.release(t);
        assert_eq!(r.len(), 2);
        assert!(is_now(&r[0], 2));
        assert!(matches!(r[1], Admit::Issue(2)));
        assert!(b.release(t).is_empty(), "the rest waits for barrier 2");
        b.confirmed(2);
        assert_eq!(b.confirmed(2), Some(2));
        let r = b.release(t);
        assert!(r.len() == 1 && is_now(&r[0], 3));
        assert_eq!(b.holding(), None);
    }

    #[test]
    fn a_barrier_unanswered_in_time_is_given_up() {
        let t = Instant::now();
        let mut b = Barriers::new(1);
        assert!(matches!(b.admit(t, Effect::Barrier), Admit::Issue(1)));
        assert!(matches!(b.admit(t, unroute(4)), Admit::Held));
        assert_eq!(b.deadline(), Some(t + BARRIER_TIMEOUT));
        assert_eq!(b.expire(t + BARRIER_TIMEOUT / 2), None);
        assert_eq!(b.expire(t + BARRIER_TIMEOUT), Some((1, BARRIER_TIMEOUT)));
        let r = b.release(t + BARRIER_TIMEOUT);
        assert!(r.len() == 1 && is_now(&r[0], 4));
        // A late answer changes nothing.
        assert_eq!(b.confirmed(1), None);
        assert_eq!(b.holding(), None);
    }
}
