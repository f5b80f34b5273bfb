//! How much heap the process has in use, for measuring the memory a data
//! structure takes (the key-agility benchmark's bytes per SA).
//!
//! Resident memory (VmRSS) counts pages, so it misses what a new structure
//! puts in memory the allocator already held and counts a whole page for a
//! byte. The C allocator's own statistics (glibc `mallinfo2`) count the
//! bytes handed out, whichever library asked: Rust's allocations and the
//! crypto library's key schedules (it allocates with `malloc`) alike.

/// Bytes currently allocated from the C heap (glibc's `uordblks` plus its
/// `mmap`ed blocks), or `None` where the allocator does not tell.
pub fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments, returns a plain struct by
        // value and only reads the allocator's own counters.
        let m = unsafe { libc::mallinfo2() };
        Some(m.uordblks as u64 + m.hblkhd as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn an_allocation_shows_in_the_heap_figure() {
        let before = heap_in_use().unwrap_or(0);
        let v = vec![1u8; 1 << 20];
        let after = heap_in_use().unwrap_or(0);
        assert!(after >= before + (1 << 20), "{before} -> {after}");
        drop(v);
    }
}
