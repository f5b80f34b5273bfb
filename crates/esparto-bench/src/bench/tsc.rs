//! The cycle counter's rate, for cycles per byte.
//!
//! On x86_64 the time-stamp counter ([`esparto_io::cpu::cycles`]) ticks at a
//! constant reference rate (invariant TSC); [`tsc_hz`] calibrates that rate
//! against the monotonic clock once, so `seconds × tsc_hz` is a count of
//! reference cycles. On other architectures the counter is nanoseconds and
//! the rate 1 GHz, which the benchmark output says.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use esparto_io::cpu::{HAS_TSC, cycles};

/// One calibration's sleep: long enough that the clocks' granularity is
/// noise, short enough that three cost little.
const CALIBRATION: Duration = Duration::from_millis(15);

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
                std::thread::sleep(CALIBRATION);
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
