//! CPUs: which ones we may run on, how many workers that makes, pinning,
//! and a cycle counter.
//!
//! A gateway runs one worker per CPU it may use unless told otherwise, and
//! never more than [`MAX_WORKERS`]: the limit of `[daemon] workers` and of
//! every command's `--workers`.
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

/// Most worker threads a gateway runs (`[daemon] workers`, and `--workers`
/// of the benchmarks): more is a typo, not a machine.
pub const MAX_WORKERS: usize = 1024;

/// The workers to run when nothing says how many: one per CPU this process
/// may run on (its affinity mask, not the machine's CPU count), at least
/// one and at most [`MAX_WORKERS`].
pub fn default_workers() -> usize {
    allowed_cpus().map(|c| c.len()).unwrap_or(1).clamp(1, MAX_WORKERS)
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

/// Asks the CPU to bring the cache line holding `addr` into every level
/// of the cache, without waiting for it: a hint that never faults, so any
/// address is fine (a dangling or null one is simply ignored by the CPU).
/// The data plane calls it for the state of a batch's SAs before it works
/// on the first packet, so the misses of all of them overlap.
#[inline(always)]
pub fn prefetch(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: PREFETCHT0 is a hint: it reads no memory architecturally,
        // cannot fault on any address, and SSE exists on every x86_64 CPU.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr.cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = addr;
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): on a
/// machine shared with other work, a rate per CPU-second of the measuring
/// thread does not count the time the thread was not running.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Whether [`cycles`] is a real cycle counter (else nanoseconds).
pub const HAS_TSC: bool = cfg!(target_arch = "x86_64");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_takes_any_address() {
        let v = [7u8; 64];
        prefetch(v.as_ptr());
        prefetch(core::ptr::null());
        prefetch(usize::MAX as *const u8);
        assert_eq!(v[0], 7);
    }

    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let a = thread_cpu_time();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let b = thread_cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let c = thread_cpu_time();
        assert!(b - a < std::time::Duration::from_millis(40), "sleeping used {:?}", b - a);
        assert!(c > b, "busy work used no CPU time");
    }

    #[test]
    fn counter_does_not_go_back() {
        let a = cycles();
        let b = cycles();
        assert!(b >= a);
    }
}
