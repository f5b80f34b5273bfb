//! CPUs: which ones we may run on, pinning, and a cycle counter.
//!
//! Benchmarks report cycles per byte, the unit FreeS/WAN's performance notes
//! used and the one that survives changes of clock speed and core count. On
//! x86_64 the time-stamp counter ticks at a constant reference rate on every
//! CPU this project targets (invariant TSC); [`tsc_hz`] calibrates that rate
//! against the monotonic clock once, so `seconds × tsc_hz` is a count of
//! reference cycles. On other architectures the counter falls back to
//! nanoseconds and the rate to 1 GHz, which the benchmark output says.

use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sys;

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    sys::allowed_cpus()
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    sys::pin_current_thread(cpu)
}

/// Reads the cycle counter.
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; it reads a register and exists
        // on every x86_64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Whether [`cycles`] is a real cycle counter (else nanoseconds).
pub const HAS_TSC: bool = cfg!(target_arch = "x86_64");

/// Cycle-counter ticks per second, calibrated once (takes ~50 ms the first time).
pub fn tsc_hz() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        if !HAS_TSC {
            return 1e9;
        }
        // Three short calibrations; the median is immune to one preemption.
        let mut rates: Vec<f64> = (0..3)
            .map(|_| {
                let (t0, c0) = (Instant::now(), cycles());
                std::thread::sleep(Duration::from_millis(15));
                let (t1, c1) = (Instant::now(), cycles());
                (c1.wrapping_sub(c0)) as f64 / (t1 - t0).as_secs_f64()
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        rates[1]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibrated_rate_is_plausible() {
        let hz = tsc_hz();
        assert!((1e8..1e10).contains(&hz), "{hz}");
        let a = cycles();
        let b = cycles();
        assert!(b >= a);
    }
}
