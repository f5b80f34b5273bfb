//! The process facts every Prometheus client exports under the same names
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`),
//! read from `/proc/self` at scrape time (proc(5)). A fact that cannot be
//! read is left out, not reported as zero.

use std::time::{SystemTime, UNIX_EPOCH};

/// One reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Facts {
    /// When the daemon started, seconds since the Unix epoch.
    pub(super) start_time: f64,
    /// User and system CPU time of all threads, seconds.
    pub(super) cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub(super) resident_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    pub(super) virtual_bytes: Option<u64>,
    /// Threads.
    pub(super) threads: Option<u64>,
    /// Open file descriptors.
    pub(super) open_fds: Option<u64>,
    /// The soft limit on file descriptors.
    pub(super) max_fds: Option<u64>,
}

impl Facts {
    /// Reads `/proc/self`; `started` is when the daemon started.
    pub(super) fn read(started: SystemTime) -> Self {
        let start_time = started.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let stat = stat.as_deref().and_then(Stat::parse);
        let tick = rustix::param::clock_ticks_per_second() as f64;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .as_deref()
            .and_then(max_open_files);
        Self {
            start_time,
            cpu_seconds: stat.filter(|_| tick > 0.0).map(|s| (s.utime + s.stime) as f64 / tick),
            resident_bytes: stat.map(|s| s.rss_pages * rustix::param::page_size() as u64),
            virtual_bytes: stat.map(|s| s.vsize),
            threads: stat.map(|s| s.threads),
            open_fds,
            max_fds,
        }
    }
}

/// The fields of `/proc/self/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    threads: u64,
    vsize: u64,
    rss_pages: u64,
}

impl Stat {
    /// proc(5): fields are separated by spaces, but the second, `(comm)`,
    /// may hold spaces and parentheses itself: count from its last `)`.
    fn parse(text: &str) -> Option<Self> {
        let rest = &text[text.rfind(')')? + 1..];
        // After comm: field 3 (state) is index 0.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |field: usize| f.get(field - 3).and_then(|v| v.parse::<u64>().ok());
        Some(Self {
            utime: num(14)?,
            stime: num(15)?,
            threads: num(20)?,
            vsize: num(23)?,
            rss_pages: num(24)?,
        })
    }
}

/// The soft "Max open files" of `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn stat_and_limits_parse() {
        let line = "4242 (esparto (w) 1) S 1 4242 4242 0 -1 4194560 1061 0 0 0 250 125 0 0 20 0 7 0 99 12345678 2048 18446744073709551615";
        let s = Stat::parse(line).unwrap();
        assert_eq!(
            s,
            Stat {
                utime: 250,
                stime: 125,
                threads: 7,
                vsize: 12_345_678,
                rss_pages: 2048
            }
        );
        assert_eq!(Stat::parse("4242 (x) S 1"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

    #[test]
    fn this_process_can_be_read() {
        let f = Facts::read(SystemTime::now());
        assert!(f.cpu_seconds.is_some() && f.resident_bytes.is_some_and(|b| b > 0));
        assert!(f.threads.is_some_and(|t| t >= 1) && f.open_fds.is_some_and(|n| n >= 3));
        assert!(f.max_fds.is_some() && f.start_time > 1.0e9);
    }
}
