//! Live heap bytes, when the binary is built with the `count-alloc`
//! feature.
//!
//! Resident memory (`VmRSS`) says what a tunnel costs the machine, allocator
//! slack and page granularity included; the heap the engine itself keeps
//! per tunnel needs a counting global allocator. This crate forbids
//! `unsafe`, so it cannot write one; `stats_alloc` (the one `esparto-ike`'s
//! handshake bench uses) wraps the system allocator with atomic counters
//! and is installed with `#[global_allocator]`, which needs no `unsafe` on
//! our side. A global allocator is process-wide — it would slow every
//! allocation of the test bed's other commands too — so it is behind a
//! feature that is off by default:
//! `cargo build --release -p esparto-testbed --features count-alloc`.
//! Without it, [`live_bytes`] is `None` and the report says so.

#[cfg(feature = "count-alloc")]
#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Bytes currently allocated on the heap by this process, if counted.
pub fn live_bytes() -> Option<i64> {
    #[cfg(feature = "count-alloc")]
    {
        let s = GLOBAL.stats();
        // `bytes_allocated`/`bytes_deallocated` already include what
        // reallocations grew or shrank by; `bytes_reallocated` is the same
        // change again (its net), so adding it would count every growth
        // by `realloc` twice, transient ones included.
        let live = s.bytes_allocated as i128 - s.bytes_deallocated as i128;
        Some(i64::try_from(live).unwrap_or(i64::MAX))
    }
    #[cfg(not(feature = "count-alloc"))]
    {
        None
    }
}

#[cfg(all(test, feature = "count-alloc"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_an_allocation() {
        assert!(live_bytes().is_some());
        // Other test threads allocate and free at the same time, so the
        // live figure can move either way; the running total cannot shrink.
        let before = GLOBAL.stats().bytes_allocated;
        let v = std::hint::black_box(vec![0u8; 1 << 20]);
        let after = GLOBAL.stats().bytes_allocated;
        drop(v);
        assert!(after - before >= 1 << 20, "{before} {after}");
    }
}
