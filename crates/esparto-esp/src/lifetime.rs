//! SA lifetimes (RFC 4301 §4.4.2.1).
//!
//! An SA may be limited in bytes, packets and time, each with a *soft* limit
//! (raise an event so the IKE daemon rekeys in time) and a *hard* limit (the
//! SA is dead: nothing more is sent or accepted on it). Limits are checked per
//! packet with integer compares; the events are raised once per SA.
//!
//! Separately from configured limits, a 32-bit sequence number must never
//! wrap (RFC 4303 §3.3.3): without ESN the hard packet limit is `2^32 - 1`
//! and a soft limit is implied shortly before it.

use std::time::{Duration, Instant};

/// Limits of one SA. `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lifetime {
    /// Soft byte limit (rekey).
    pub soft_bytes: Option<u64>,
    /// Hard byte limit (expire).
    pub hard_bytes: Option<u64>,
    /// Soft packet limit.
    pub soft_packets: Option<u64>,
    /// Hard packet limit.
    pub hard_packets: Option<u64>,
    /// Soft age.
    pub soft_time: Option<Duration>,
    /// Hard age.
    pub hard_time: Option<Duration>,
}

/// Which limit an SA reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// A soft limit: rekey now.
    Soft,
    /// A hard limit: the SA is dead.
    Hard,
}

/// What a packet is allowed to do under an SA's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Fine.
    Ok,
    /// Fine, and the soft limit was just crossed: raise the event.
    SoftNow,
    /// Hard limit reached: drop (and raise the event if `first`).
    Hard { first: bool },
}

/// Per-SA tracking of the limits.
#[derive(Debug, Clone)]
// In this order: what every packet reads first (a cache line's worth at
// the front), the limits only the slow path reads after it.
#[repr(C)]
pub(crate) struct LifetimeState {
    /// The fast path: below all three, nothing can have been crossed.
    next_bytes: u64,
    next_packets: u64,
    next_time: Option<Instant>,
    soft_raised: bool,
    hard_raised: bool,
    limits: Lifetime,
    soft_at: Option<Instant>,
    hard_at: Option<Instant>,
}

/// Bytes at the front of a [`LifetimeState`] that every packet reads.
#[cfg(test)]
pub(crate) const HOT_LEN: usize = core::mem::offset_of!(LifetimeState, limits);

/// Seq numbers left before a 32-bit counter wraps at which we ask for a rekey.
pub(crate) const SEQ_SOFT_MARGIN: u64 = 1 << 20;

impl LifetimeState {
    pub(crate) fn new(limits: Lifetime, esn: bool, now: Instant) -> Self {
        let mut limits = limits;
        if !esn {
            // RFC 4303 §3.3.3: without ESN the counter MUST NOT cycle.
            let hard = u64::from(u32::MAX);
            limits.hard_packets = Some(limits.hard_packets.map_or(hard, |h| h.min(hard)));
            let soft = hard - SEQ_SOFT_MARGIN;
            limits.soft_packets = Some(limits.soft_packets.map_or(soft, |s| s.min(soft)));
        }
        let mut s = Self {
            limits,
            soft_at: limits.soft_time.and_then(|d| now.checked_add(d)),
            hard_at: limits.hard_time.and_then(|d| now.checked_add(d)),
            soft_raised: false,
            hard_raised: false,
            next_bytes: 0,
            next_packets: 0,
            next_time: None,
        };
        s.refresh();
        s
    }

    /// Recomputes the fast-path thresholds: the nearest limit not yet raised
    /// (a raised hard limit keeps every packet on the slow path: the SA is dead).
    fn refresh(&mut self) {
        fn min<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        let soft = !self.soft_raised;
        if self.hard_raised {
            (self.next_bytes, self.next_packets, self.next_time) = (0, 0, None);
            return;
        }
        self.next_bytes = min(self.limits.hard_bytes, self.limits.soft_bytes.filter(|_| soft)).unwrap_or(u64::MAX);
        self.next_packets = min(self.limits.hard_packets, self.limits.soft_packets.filter(|_| soft)).unwrap_or(u64::MAX);
        self.next_time = min(self.hard_at, self.soft_at.filter(|_| soft));
    }

    /// The effective limits (with the sequence-number cap folded in).
    #[cfg(test)]
    pub(crate) fn limits(&self) -> &Lifetime {
        &self.limits
    }

    /// Checks totals *after* counting the packet in question.
    #[inline]
    pub(crate) fn check(&mut self, now: Instant, bytes: u64, packets: u64) -> Verdict {
        if bytes <= self.next_bytes && packets <= self.next_packets && self.next_time.is_none_or(|t| now < t) {
            return Verdict::Ok;
        }
        self.check_slow(now, bytes, packets)
    }

    #[cold]
    fn check_slow(&mut self, now: Instant, bytes: u64, packets: u64) -> Verdict {
        let over = |v: u64, lim: Option<u64>| lim.is_some_and(|l| v > l);
        let at = |t: Option<Instant>| t.is_some_and(|t| now >= t);
        if over(bytes, self.limits.hard_bytes) || over(packets, self.limits.hard_packets) || at(self.hard_at) {
            let first = !self.hard_raised;
            self.hard_raised = true;
            self.refresh();
            return Verdict::Hard { first };
        }
        if !self.soft_raised
            && (over(bytes, self.limits.soft_bytes)
                || over(packets, self.limits.soft_packets)
                || at(self.soft_at))
        {
            self.soft_raised = true;
            self.refresh();
            return Verdict::SoftNow;
        }
        Verdict::Ok
    }

    /// Time-only check, for idle SAs (called from the worker's tick).
    pub(crate) fn check_time(&mut self, now: Instant) -> Option<Expiry> {
        if !self.hard_raised && self.hard_at.is_some_and(|t| now >= t) {
            self.hard_raised = true;
            self.refresh();
            return Some(Expiry::Hard);
        }
        if !self.soft_raised && self.soft_at.is_some_and(|t| now >= t) {
            self.soft_raised = true;
            self.refresh();
            return Some(Expiry::Soft);
        }
        None
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.hard_raised
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_and_packet_limits_raise_once() {
        let now = Instant::now();
        let lt = Lifetime { soft_bytes: Some(1000), hard_bytes: Some(2000), ..Default::default() };
        let mut s = LifetimeState::new(lt, true, now);
        assert_eq!(s.check(now, 1000, 1), Verdict::Ok);
        assert_eq!(s.check(now, 1001, 2), Verdict::SoftNow);
        assert_eq!(s.check(now, 1500, 3), Verdict::Ok);
        assert_eq!(s.check(now, 2001, 4), Verdict::Hard { first: true });
        assert_eq!(s.check(now, 2002, 5), Verdict::Hard { first: false });
        assert!(s.is_dead());
    }

    #[test]
    fn time_limits() {
        let now = Instant::now();
        let lt = Lifetime {
            soft_time: Some(Duration::from_secs(10)),
            hard_time: Some(Duration::from_secs(20)),
            ..Default::default()
        };
        let mut s = LifetimeState::new(lt, true, now);
        assert_eq!(s.check_time(now + Duration::from_secs(9)), None);
        assert_eq!(s.check_time(now + Duration::from_secs(10)), Some(Expiry::Soft));
        assert_eq!(s.check_time(now + Duration::from_secs(11)), None);
        assert_eq!(s.check(now + Duration::from_secs(21), 1, 1), Verdict::Hard { first: true });
    }

    #[test]
    fn no_esn_caps_packets_below_wrap() {
        let now = Instant::now();
        let mut s = LifetimeState::new(Lifetime::default(), false, now);
        assert_eq!(s.limits().hard_packets, Some(u64::from(u32::MAX)));
        assert_eq!(s.check(now, 0, u64::from(u32::MAX) - SEQ_SOFT_MARGIN + 1), Verdict::SoftNow);
        assert_eq!(s.check(now, 0, u64::from(u32::MAX)), Verdict::Ok);
        assert_eq!(s.check(now, 0, u64::from(u32::MAX) + 1), Verdict::Hard { first: true });
        let s = LifetimeState::new(Lifetime::default(), true, now);
        assert_eq!(s.limits().hard_packets, None);
    }
}
