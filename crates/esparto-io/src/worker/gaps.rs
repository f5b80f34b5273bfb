//! How long a worker went without looking at its queues, and how long it
//! waited for a CPU: what tells "the machine was starved" from "the
//! gateway stalled" when packets are lost in the kernel's queues in front
//! of a worker.
//!
//! A *loop gap* is the time between the starts of two turns of a worker's
//! loop; every turn drains what its TUN queue and its socket hold. A
//! worker that is idle still turns at least once a tick ([`super::WorkerConfig::tick`],
//! 100 ms by default), since `poll` waits no longer than the next tick. So
//! on a healthy worker gaps stay below the tick plus one batch's work, and
//! a gap beyond that is time the worker did not run when it should have:
//! packets arriving meanwhile wait in the TUN device's queue (which the
//! kernel drops from when it is full: `tun_queue_full`) and in the socket's
//! receive buffer.
//!
//! Which of the two it was, the kernel says: the scheduler's *run delay*
//! of the worker thread (`/proc/thread-self/schedstat`, second field: time
//! spent runnable on a run queue, not running) grows when other work took
//! the CPU; a gap without run delay is the worker itself blocking.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// Upper bounds of the loop-gap histogram's buckets, in microseconds; a
/// last bucket holds every longer gap.
pub const LOOP_GAP_BOUNDS_US: [u64; 8] = [100, 1_000, 10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000];

/// A histogram of one worker's loop gaps (see the module essay).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopGaps {
    /// Gaps per bucket: `counts[i]` are gaps no longer than
    /// `LOOP_GAP_BOUNDS_US[i]` (and longer than the bound before it); the
    /// last entry, gaps longer than the last bound.
    pub counts: [u64; LOOP_GAP_BOUNDS_US.len() + 1],
    /// The sum of every gap, microseconds.
    pub sum_us: u64,
    /// The longest gap, microseconds.
    pub max_us: u64,
}

impl LoopGaps {
    /// Counts one gap.
    #[inline]
    pub fn record(&mut self, gap: Duration) {
        let us = u64::try_from(gap.as_micros()).unwrap_or(u64::MAX);
        let i = LOOP_GAP_BOUNDS_US.iter().position(|&b| us <= b).unwrap_or(LOOP_GAP_BOUNDS_US.len());
        self.counts[i] += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
    }

    /// Gaps counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Gaps longer than `bound_us`, which must be one of
    /// [`LOOP_GAP_BOUNDS_US`] (another value counts from the next bound up).
    pub fn longer_than(&self, bound_us: u64) -> u64 {
        let from = LOOP_GAP_BOUNDS_US.iter().position(|&b| b >= bound_us).map_or(LOOP_GAP_BOUNDS_US.len(), |i| i + 1);
        self.counts[from..].iter().sum()
    }
}

/// The calling thread's scheduler statistics, read again on demand.
#[derive(Debug)]
pub(crate) struct SchedStat {
    file: File,
}

impl SchedStat {
    /// Opens `/proc/thread-self/schedstat` of the calling thread (`None`
    /// where the kernel has no schedstat or /proc is not mounted).
    pub(crate) fn open() -> Option<Self> {
        File::open("/proc/thread-self/schedstat").ok().map(|file| Self { file })
    }

    /// The thread's run delay so far: time spent runnable, waiting for a
    /// CPU. One `pread`.
    pub(crate) fn run_delay(&self) -> Option<Duration> {
        let mut buf = [0u8; 96];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        parse_run_delay(buf.get(..n)?)
    }
}

/// The second field of a schedstat line (`"<on cpu ns> <run delay ns> <timeslices>\n"`).
fn parse_run_delay(line: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(line).ok()?;
    let ns: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_land_in_their_buckets() {
        let mut g = LoopGaps::default();
        for us in [50, 100, 101, 20_000, 150_000, 150_001, 2_000_000] {
            g.record(Duration::from_micros(us));
        }
        assert_eq!(g.counts, [2, 1, 0, 1, 0, 2, 0, 0, 1]);
        assert_eq!(g.count(), 7);
        assert_eq!(g.max_us, 2_000_000);
        assert_eq!(g.sum_us, 50 + 100 + 101 + 20_000 + 150_000 + 150_001 + 2_000_000);
        assert_eq!(g.longer_than(100_000), 3);
        assert_eq!(g.longer_than(200_000), 1);
        assert_eq!(g.longer_than(100), 5);
    }

    #[test]
    fn run_delay_is_the_second_field() {
        assert_eq!(parse_run_delay(b"81362 1001285 2\n"), Some(Duration::from_nanos(1_001_285)));
        assert_eq!(parse_run_delay(b"81362\n"), None);
        assert_eq!(parse_run_delay(b"a b c"), None);
        // This thread's own, where the kernel keeps them.
        if let Some(s) = SchedStat::open() {
            assert!(s.run_delay().is_some());
        }
    }
}
