//! What a benchmark process costs: CPU time of the calling thread and
//! resident memory of the process.
//!
//! CPU time is `CLOCK_THREAD_CPUTIME_ID` (through `rustix`, as this crate
//! forbids `unsafe`): nanoseconds, brought up to date when read — unlike
//! `/proc/thread-self/schedstat`, which lags by up to a scheduler tick and
//! reads zero for sub-millisecond spans. The user/system split comes from
//! `/proc/thread-self/stat` (`utime`, `stime`, in clock ticks of 1/100 s —
//! `USER_HZ` is 100 on every Linux ABI we run on), so it is coarse. The
//! thread, not the process: the peers of `esparto-testbed bench setup` are
//! single-threaded loops, and the orchestrator's own threads must not be
//! counted. Resident memory is `VmRSS` of `/proc/self/status`, what an
//! operator sees in `ps`.

use std::fs;
use std::io;

/// Clock ticks per second of `utime`/`stime` (`USER_HZ`, fixed at 100 by
/// the Linux ABI).
const USER_HZ: f64 = 100.0;

/// CPU time used by the calling thread so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    /// Seconds on the CPU (user + system), nanosecond resolution.
    pub total: f64,
    /// Seconds in user mode (10 ms resolution).
    pub user: f64,
    /// Seconds in the kernel (10 ms resolution).
    pub system: f64,
}

impl CpuTime {
    /// The calling thread's CPU time now.
    pub fn thread() -> io::Result<Self> {
        let stat = fs::read_to_string("/proc/thread-self/stat")?;
        Self::parse(thread_cpu_seconds(), &stat)
    }

    /// From the precise total and the text of `stat`.
    fn parse(total: f64, stat: &str) -> io::Result<Self> {
        let bad = |what: &str| io::Error::other(format!("unexpected /proc format: {what}"));
        // `comm` (field 2) is in parentheses and may contain anything,
        // spaces and ')' included: the fields proper start after the last ')'.
        let rest = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .ok_or_else(|| bad("stat"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // proc_pid_stat(5): utime is field 14, stime 15; `rest` starts at 3.
        let tick = |i: usize| -> io::Result<f64> {
            fields
                .get(i)
                .and_then(|s| s.parse::<u64>().ok())
                .map(|t| t as f64 / USER_HZ)
                .ok_or_else(|| bad("stat utime/stime"))
        };
        Ok(CpuTime {
            total,
            user: tick(11)?,
            system: tick(12)?,
        })
    }

    /// The time used between `earlier` and `self`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            total: self.total - earlier.total,
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }
}

/// CPU seconds of the calling thread (user + system), to the nanosecond.
pub fn thread_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Resident set size of this process, in bytes (`VmRSS`).
pub fn rss_bytes() -> io::Result<u64> {
    parse_rss(&fs::read_to_string("/proc/self/status")?)
}

fn parse_rss(status: &str) -> io::Result<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::other("no VmRSS in /proc/self/status"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_stat_with_a_hostile_comm() {
        let stat = "42 (a) b) c) R 1 1 1 0 -1 4194304 101 0 0 0 250 37 0 0 20 0 1 0 5106";
        let t = CpuTime::parse(1.5, stat).unwrap();
        assert_eq!(t.total, 1.5);
        assert_eq!(t.user, 2.5);
        assert_eq!(t.system, 0.37);
        assert!(CpuTime::parse(1.0, "no parenthesis").is_err());
        assert!(CpuTime::parse(1.0, "1 (x) R 1").is_err(), "too few fields");
    }

    #[test]
    fn parses_vmrss() {
        let s = "Name:\tx\nVmPeak:\t  100 kB\nVmRSS:\t    2196 kB\nThreads: 1\n";
        assert_eq!(parse_rss(s).unwrap(), 2196 * 1024);
        assert!(parse_rss("VmPeak: 1 kB\n").is_err());
    }

    #[test]
    fn this_thread_uses_cpu_and_memory() {
        let a = CpuTime::thread().unwrap();
        let mut x = 0u64;
        // Well under a scheduler tick: the clock must still see it.
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = CpuTime::thread().unwrap();
        assert!(b.since(a).total > 0.0, "{x}");
        assert!(rss_bytes().unwrap() > 0);
    }
}
