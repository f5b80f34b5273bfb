//! How much heap the process has in use, for measuring the memory a data
//! structure takes (the key-agility benchmark's bytes per SA), and giving
//! freed heap back to the system after a bulk removal.
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

/// Gives the heap's free memory back to the system (glibc `malloc_trim`):
/// after a large removal — thousands of tunnels torn down — the allocator
/// keeps the freed pages for reuse, and the daemon's resident memory would
/// stay at its peak. Walks the whole heap, so it is for after bulk
/// removals, not for every turn of a loop. Returns whether memory was
/// released (always `false` where the allocator has no such call).
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a plain number (how much to keep free
        // at the top of the heap) and only works on the allocator's own
        // structures, under its own locks.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
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
