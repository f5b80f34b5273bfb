//! Whether the link below a UDP socket is the bottleneck, and how fast it
//! drains, read from the socket's own send queue.
//!
//! A datagram handed to the kernel stays charged to its socket until the
//! device has sent it: `SIOCOUTQ` ([`crate::udp::UdpSocket::queued_bytes`])
//! counts what sits in the socket, the qdisc and the device queue. A sender
//! that the link keeps up with finds that queue (nearly) empty each time it
//! comes back with the next batch; one that sends faster than the link
//! finds a standing queue, and the link's rate is then what drained from it:
//! bytes sent plus the queue at the start of an interval, less the queue at
//! its end, over the interval.
//!
//! This sees only a bottleneck on this host (a shaped or slower interface,
//! a full device queue); a slower hop further along the path drops or
//! queues where this socket cannot see it.
//!
//! [`LinkMeter`] is the bookkeeping, without I/O: the worker samples the
//! queue before a send at most every [`SAMPLE_EVERY`], and every
//! [`INTERVAL`] the meter gives its verdict. A saturated link stays so
//! until [`KEEPS_UP_AFTER`] intervals in a row have seen the queue empty:
//! a TCP sender backing off after a loss drains it for a moment, and a
//! data path that switches behaviour on each verdict would flap with it.

use std::time::{Duration, Instant};

/// The shortest time between two queue samples (one `ioctl` each).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(1);

/// The length of one measurement interval.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// A queue at least this long (bytes, as the kernel charges them) at a
/// sample is "standing": more than the tail of the previous batch still
/// on its way out.
pub const STANDING_MIN: usize = 16 * 1024;

/// Fewer samples than this in an interval give no verdict of saturation:
/// a sender that comes back that rarely is not the one filling the link.
pub const MIN_SAMPLES: u32 = 8;

/// A saturated link stays saturated through this many intervals in a row
/// that saw it keep up (half a second): a TCP sender's back-off after a
/// loss empties the queue for a moment without making the link faster.
pub const KEEPS_UP_AFTER: u32 = 10;

/// One interval's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkVerdict {
    /// The queue stood at every sample: the link is the bottleneck and
    /// drained this many bytes per second.
    Saturated {
        /// Bytes per second the link took from this socket.
        bytes_per_sec: u64,
    },
    /// The queue emptied at least once (or too few samples) in each of
    /// the last [`KEEPS_UP_AFTER`] intervals, or the link was never
    /// saturated: it keeps up with this sender.
    KeepsUp,
}

/// Queue samples of one socket, turned into a verdict per interval.
#[derive(Debug, Clone)]
pub struct LinkMeter {
    /// When the current interval began (`None`: before the first sample).
    start: Option<Instant>,
    next_sample: Option<Instant>,
    /// The queue at the interval's first sample.
    queued_at_start: usize,
    /// Bytes handed to the socket since that sample.
    sent: u64,
    samples: u32,
    /// Whether every sample of the interval found a standing queue.
    standing: bool,
    /// The rate of the last saturated interval, and the intervals since
    /// that kept up.
    last_rate: Option<u64>,
    keeps_up_run: u32,
}

impl Default for LinkMeter {
    fn default() -> Self {
        Self::new()
    }
}

impl LinkMeter {
    /// A meter with no samples.
    pub fn new() -> Self {
        Self {
            start: None,
            next_sample: None,
            queued_at_start: 0,
            sent: 0,
            samples: 0,
            standing: true,
            last_rate: None,
            keeps_up_run: 0,
        }
    }

    /// Whether a sample is due (the caller then reads the queue and calls
    /// [`LinkMeter::sample`] before its send).
    #[inline]
    pub fn due(&self, now: Instant) -> bool {
        self.next_sample.is_none_or(|t| now >= t)
    }

    /// Bytes handed to the socket (after the sample of this send, if any).
    #[inline]
    pub fn sent(&mut self, bytes: usize) {
        if self.start.is_some() {
            self.sent += bytes as u64;
        }
    }

    /// A queue sample taken before a send. Returns the verdict when it
    /// closes an interval: saturated at this interval's rate, or at the
    /// last saturated one's through [`KEEPS_UP_AFTER`] intervals that kept
    /// up; else keeping up.
    pub fn sample(&mut self, now: Instant, queued: usize) -> Option<LinkVerdict> {
        self.next_sample = Some(now + SAMPLE_EVERY);
        let Some(start) = self.start else {
            self.begin(now, queued);
            return None;
        };
        self.samples += 1;
        self.standing &= queued >= STANDING_MIN;
        let elapsed = now.saturating_duration_since(start);
        if elapsed < INTERVAL {
            return None;
        }
        if self.standing && self.samples >= MIN_SAMPLES {
            let drained = (self.sent + self.queued_at_start as u64).saturating_sub(queued as u64);
            self.last_rate = Some((drained as f64 / elapsed.as_secs_f64()) as u64);
            self.keeps_up_run = 0;
        } else if self.last_rate.is_some() {
            self.keeps_up_run += 1;
            if self.keeps_up_run >= KEEPS_UP_AFTER {
                self.last_rate = None;
            }
        }
        self.begin(now, queued);
        Some(match self.last_rate {
            Some(bytes_per_sec) => LinkVerdict::Saturated { bytes_per_sec },
            None => LinkVerdict::KeepsUp,
        })
    }

    fn begin(&mut self, now: Instant, queued: usize) {
        self.start = Some(now);
        self.queued_at_start = queued;
        self.sent = 0;
        self.samples = 0;
        self.standing = queued >= STANDING_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a meter `secs` of a sender that hands `per_ms` bytes to the
    /// socket each millisecond while the link drains `drain_per_ms`, the
    /// queue bounded by `limit` (a qdisc dropping the rest).
    fn run(per_ms: usize, drain_per_ms: usize, limit: usize, ms: u32) -> Vec<LinkVerdict> {
        let mut m = LinkMeter::new();
        let t0 = Instant::now();
        let mut q = 0usize;
        let mut out = Vec::new();
        for i in 0..ms {
            let now = t0 + Duration::from_millis(u64::from(i));
            if m.due(now) {
                out.extend(m.sample(now, q));
            }
            m.sent(per_ms);
            q = (q + per_ms).min(limit);
            q = q.saturating_sub(drain_per_ms);
        }
        out
    }

    fn saturated_rates(v: &[LinkVerdict]) -> Vec<u64> {
        v.iter()
            .filter_map(|v| match v {
                LinkVerdict::Saturated { bytes_per_sec } => Some(*bytes_per_sec),
                LinkVerdict::KeepsUp => None,
            })
            .collect()
    }

    #[test]
    fn a_link_slower_than_the_sender_is_saturated_at_its_rate() {
        // 6,250 B/ms is 50 Mbit/s. A sender 12 % faster with room to
        // queue: once the queue passes STANDING_MIN (~22 ms), every
        // interval is saturated at the drain rate (the queue's growth is
        // subtracted from what was sent).
        let v = run(7_000, 6_250, 1 << 30, 400);
        let rates = saturated_rates(&v);
        assert!(rates.len() >= 5, "{v:?}");
        for r in rates {
            assert!((r as f64 - 6_250_000.0).abs() < 6_250_000.0 * 0.05, "{r}");
        }
    }

    #[test]
    fn what_a_full_qdisc_drops_counts_as_drained() {
        // The same link behind a 125 KB queue that drops the excess, as a
        // tbf does: the socket cannot tell a dropped datagram from a sent
        // one, so the estimate is what was offered (an upper bound of the
        // link's rate; a TCP sender inside the tunnel keeps the excess to
        // its few lost packets).
        let v = run(7_000, 6_250, 125_000, 400);
        let rates = saturated_rates(&v);
        assert!(rates.len() >= 5, "{v:?}");
        for r in rates {
            assert!((6_250_000..=7_000_000).contains(&r), "{r}");
        }
    }

    #[test]
    fn a_sender_no_faster_than_the_link_finds_no_queue() {
        let v = run(6_250, 6_250, 1 << 30, 400);
        assert!(!v.is_empty());
        assert!(v.iter().all(|v| *v == LinkVerdict::KeepsUp), "{v:?}");
    }

    #[test]
    fn a_link_that_keeps_up_is_never_saturated() {
        let v = run(3_000, 6_250, 1 << 30, 400);
        assert!(!v.is_empty());
        assert!(v.iter().all(|v| *v == LinkVerdict::KeepsUp), "{v:?}");
    }

    #[test]
    fn a_saturated_link_stays_so_through_short_dips() {
        let mut m = LinkMeter::new();
        let t0 = Instant::now();
        let ms = |i: u64| t0 + Duration::from_millis(i);
        let mut t = 0;
        let mut interval = |m: &mut LinkMeter, q: usize| {
            let mut v = None;
            for _ in 0..INTERVAL.as_millis() {
                m.sent(6_250);
                if let Some(x) = m.sample(ms(t), q) {
                    v = Some(x);
                }
                t += 1;
            }
            v
        };
        interval(&mut m, 100_000);
        assert!(matches!(interval(&mut m, 100_000), Some(LinkVerdict::Saturated { .. })));
        // The queue empties: still saturated (at the last rate) for
        // KEEPS_UP_AFTER - 1 intervals, then keeping up.
        for _ in 1..KEEPS_UP_AFTER {
            assert!(matches!(interval(&mut m, 0), Some(LinkVerdict::Saturated { .. })));
        }
        assert_eq!(interval(&mut m, 0), Some(LinkVerdict::KeepsUp));
        // One standing interval is enough to be saturated again.
        interval(&mut m, 100_000);
        assert!(matches!(interval(&mut m, 100_000), Some(LinkVerdict::Saturated { .. })));
    }

    #[test]
    fn rare_samples_give_no_saturation() {
        let mut m = LinkMeter::new();
        let t0 = Instant::now();
        assert_eq!(m.sample(t0, 1 << 20), None);
        // Two samples 30 ms apart with a full queue: too few to judge.
        assert_eq!(m.sample(t0 + Duration::from_millis(30), 1 << 20), None);
        assert_eq!(m.sample(t0 + Duration::from_millis(60), 1 << 20), Some(LinkVerdict::KeepsUp));
    }

    #[test]
    fn samples_are_spaced() {
        let mut m = LinkMeter::new();
        let t0 = Instant::now();
        assert!(m.due(t0));
        m.sample(t0, 0);
        assert!(!m.due(t0 + Duration::from_micros(999)));
        assert!(m.due(t0 + SAMPLE_EVERY));
    }
}
