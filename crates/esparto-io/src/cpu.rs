//! CPUs: which ones we may run on, pinning, and a cycle counter.
//!
//! `esparto bench dataplane` reports cycles per byte, the unit that survives
//! changes of clock speed and core count. On x86_64 [`cycles`] reads the
//! time-stamp counter, which ticks at a constant reference rate on every CPU
//! this project targets (invariant TSC; the benchmark calibrates the rate).
//! Reading it takes an instruction only this crate may use (`unsafe`). On
//! other architectures the counter falls back to nanoseconds.

use std::io;
#[cfg(not(target_arch = "x86_64"))]
use std::{sync::OnceLock, time::Instant};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_does_not_go_back() {
        let a = cycles();
        let b = cycles();
        assert!(b >= a);
    }
}
