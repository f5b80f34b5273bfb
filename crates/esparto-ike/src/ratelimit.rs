//! Rate limits for what we send in answer to unauthenticated messages.
//!
//! RFC 7296 §2.21.4: "A node needs to limit the rate at which it will send
//! messages in response to unprotected messages." Anyone can forge such a
//! message with any source address, so an answer per message would make us
//! a reflector, and an action per message (a liveness check) a lever. A
//! [`RateLimiter`] allows at most `per_sec` in all and `per_source` per
//! source address in each one-second window.
//!
//! The per-source table is bounded ([`RATE_LIMIT_SOURCES`]): when it is
//! full, entries whose window is over are dropped (at most once a window,
//! so a spray of fresh sources does not make every call walk the table),
//! and a new source is refused if none could be dropped. Refusing is the
//! safe failure here: the message goes unanswered, as it would without
//! the feature. Time comes in as `now`, like everything in this crate.

use crate::lifetime::RATE_LIMIT_SOURCES;
use core::net::IpAddr;
use core::time::Duration;
use std::collections::HashMap;
use std::time::Instant;

/// The window the limits count in.
const WINDOW: Duration = Duration::from_secs(1);

/// At most `per_sec` a second in all, `per_source` per source address.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    per_sec: u32,
    per_source: u32,
    /// Start of the current global window and what it used.
    window: Option<Instant>,
    used: u32,
    /// Per source: start of its window and what it used.
    sources: HashMap<IpAddr, (Instant, u32)>,
    /// When the table was last purged of finished windows.
    purged: Option<Instant>,
}

fn over(now: Instant, start: Instant) -> bool {
    now.saturating_duration_since(start) >= WINDOW
}

impl RateLimiter {
    pub(crate) fn new(per_sec: u32, per_source: u32) -> Self {
        RateLimiter {
            per_sec,
            per_source,
            window: None,
            used: 0,
            sources: HashMap::new(),
            purged: None,
        }
    }

    /// May we send one more to `source` now? Counts it if so.
    pub(crate) fn allow(&mut self, now: Instant, source: IpAddr) -> bool {
        let source = source.to_canonical();
        if self.window.is_none_or(|w| over(now, w)) {
            self.window = Some(now);
            self.used = 0;
        }
        if self.used >= self.per_sec {
            return false;
        }
        match self.sources.get_mut(&source) {
            Some((start, n)) if !over(now, *start) => {
                if *n >= self.per_source {
                    return false;
                }
                *n += 1;
            }
            Some(e) => *e = (now, 1),
            None => {
                if self.sources.len() >= RATE_LIMIT_SOURCES {
                    if self.purged.is_some_and(|p| !over(now, p)) {
                        return false;
                    }
                    self.purged = Some(now);
                    self.sources.retain(|_, (start, _)| !over(now, *start));
                    if self.sources.len() >= RATE_LIMIT_SOURCES {
                        return false;
                    }
                }
                if self.per_source == 0 {
                    return false;
                }
                self.sources.insert(source, (now, 1));
            }
        }
        self.used += 1;
        true
    }

    /// Sources remembered (for tests).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(i: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i))
    }

    #[test]
    fn per_source_and_global_limits_hold_per_window() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(5, 2);
        assert!(r.allow(t0, ip(1)));
        assert!(r.allow(t0, ip(1)));
        assert!(!r.allow(t0, ip(1)), "third from one source in a second");
        assert!(r.allow(t0, ip(2)));
        assert!(r.allow(t0, ip(2)));
        assert!(r.allow(t0, ip(3)));
        assert!(!r.allow(t0, ip(4)), "fifth in all was the last");
        let t1 = t0 + Duration::from_millis(999);
        assert!(!r.allow(t1, ip(5)), "still the same window");
        let t2 = t0 + WINDOW;
        assert!(r.allow(t2, ip(1)), "a new window for everyone");
        assert!(r.allow(t2, ip(1)));
        assert!(!r.allow(t2, ip(1)));
        // An IPv4-mapped IPv6 address is the same source.
        let mapped = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0001).to_ipv6_mapped());
        assert!(!r.allow(t2, mapped));
    }

    #[test]
    fn the_source_table_is_bounded_and_refuses_when_full() {
        let t0 = Instant::now();
        let n = RATE_LIMIT_SOURCES as u32;
        let mut r = RateLimiter::new(u32::MAX, 1);
        for i in 0..n {
            assert!(r.allow(t0, ip(i)));
        }
        assert_eq!(r.tracked(), RATE_LIMIT_SOURCES);
        assert!(!r.allow(t0, ip(n)), "full, nothing old enough: refused");
        assert_eq!(r.tracked(), RATE_LIMIT_SOURCES);
        // A window later the old entries go, and the newcomer is let in.
        let t1 = t0 + WINDOW;
        assert!(r.allow(t1, ip(n)));
        assert_eq!(r.tracked(), 1);
    }
}
