//! A process's resident memory, for tests that bound it under attack:
//! `VmRSS` (now) and `VmHWM` (the peak since it started) from
//! `/proc/PID/status`, and a [`Watch`] that samples `VmRSS` on a thread.
//!
//! `VmHWM` is the kernel's own high-water mark, so a short peak between two
//! samples is not missed; the samples show how memory moved meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

/// Resident memory of one process, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss_kib: u64,
    /// Highest resident set size so far (`VmHWM`).
    pub hwm_kib: u64,
}

/// `VmRSS` and `VmHWM` from the text of `/proc/PID/status`.
pub fn parse_status(text: &str) -> Result<Memory> {
    let field = |name: &str| -> Result<u64> {
        let line = text.lines().find(|l| l.starts_with(name)).with_context(|| format!("no {name} line"))?;
        line[name.len()..]
            .split_whitespace()
            .next()
            .context("no value")?
            .parse()
            .with_context(|| format!("bad {name} value in {line:?}"))
    };
    Ok(Memory { rss_kib: field("VmRSS:")?, hwm_kib: field("VmHWM:")? })
}

/// The memory of process `pid` now.
pub fn sample(pid: u32) -> Result<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_status(&text)
}

/// Samples a process's `VmRSS` every interval on a thread of its own.
#[derive(Debug)]
pub struct Watch {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    samples: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Start sampling `pid` every `every`.
    pub fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(AtomicU64::new(0));
        let (s, p, n) = (Arc::clone(&stop), Arc::clone(&peak), Arc::clone(&samples));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(m) = sample(pid) {
                    p.fetch_max(m.rss_kib, Ordering::Relaxed);
                    n.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(every);
            }
        });
        Self { stop, peak, samples, thread: Some(thread) }
    }

    /// Stop; the highest `VmRSS` seen (KiB) and the number of samples.
    pub fn stop(mut self) -> (u64, u64) {
        self.halt();
        (self.peak.load(Ordering::Relaxed), self.samples.load(Ordering::Relaxed))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn status_fields() {
        let text = "Name:\tesparto\nVmPeak:\t  123456 kB\nVmHWM:\t   30720 kB\nVmRSS:\t   25600 kB\nThreads:\t4\n";
        assert_eq!(parse_status(text).unwrap(), Memory { rss_kib: 25_600, hwm_kib: 30_720 });
        assert!(parse_status("Name:\tx\nVmRSS:\t1 kB\n").is_err(), "no VmHWM");
        assert!(parse_status("VmRSS:\tmany kB\nVmHWM:\t1 kB\n").is_err());
    }

    #[test]
    fn this_process_and_a_watch() {
        let me = std::process::id();
        let m = sample(me).unwrap();
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib, "{m:?}");
        let w = Watch::start(me, Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(50));
        let (peak, n) = w.stop();
        assert!(n >= 2 && peak > 0, "{n} samples, peak {peak}");
    }
}
