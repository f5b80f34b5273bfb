//! Anti-replay window (RFC 4303 §3.4.3, Appendix A; RFC 6479).
//!
//! The receiver keeps the highest authenticated sequence number `top` and a
//! bitmap of which of the `size` numbers below it were seen. A naive bitmap
//! shifts on every advance; RFC 6479 instead treats the bitmap as a ring of
//! 64-bit blocks indexed by `seq / 64`, so the per-packet cost is constant
//! whatever the window size. RFC 6479 clears whole blocks as the window
//! passes them and so needs one block more than the window; here advancing
//! clears exactly the bits of the numbers it passes over (one bit in order,
//! a few words for a jump), so the ring holds the window and nothing more:
//! number `s` lives at bit `s mod ring`, and the `size <= ring` numbers in
//! the window never share a bit. The ring's length is a power of two (the
//! index is a mask), which for the default window is exactly its size:
//! 512 bytes for 4096 packets, half of what a spare block rounded up costs.
//! Every SA has one, so this is most of an inbound SA's memory.
//!
//! Checking and committing are separate, as in strongSwan's libipsec
//! (`verify_seqno` / `set_authenticated_seqno`): [`ReplayWindow::check`] runs
//! before decryption and changes nothing — a forged packet must not move the
//! window — and [`ReplayWindow::commit`] runs only after the ICV verified.
//!
//! With extended sequence numbers only the low 32 bits travel on the wire; the
//! high 32 bits are inferred from the window position as RFC 4303 Appendix
//! A2.2 describes, and the ICV (which covers the high bits) confirms the guess.

/// The largest window this implementation accepts, in packets.
///
/// RFC 4303 recommends 64 as a default and mandates at least 32; large windows
/// matter at high rates with reordering across cores. 32768 packets is about
/// 45 ms at 1420-byte packets and 10 Gbit/s.
pub const MAX_WINDOW: u32 = 32_768;

/// The default window size, in packets.
pub const DEFAULT_WINDOW: u32 = 4096;

const BLOCK_BITS: u64 = 64;

/// Why [`ReplayWindow::check`] rejected a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Already received (RFC 4303 §3.4.3: a duplicate).
    Duplicate,
    /// Older than the left edge of the window.
    TooOld,
    /// Sequence number zero is never sent (the first packet is 1).
    Zero,
}

/// A sliding anti-replay window over 64-bit (possibly ESN) sequence numbers.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// Highest sequence number authenticated so far (0: none yet).
    top: u64,
    /// Window size in packets; a multiple of 64.
    size: u64,
    /// Whether the SA uses 64-bit extended sequence numbers.
    esn: bool,
    /// The ring of bitmap blocks: a power of two of them, at least `size` bits.
    blocks: Box<[u64]>,
}

impl ReplayWindow {
    /// Creates a window of `size` packets (rounded up to a multiple of 64,
    /// at least 64, at most [`MAX_WINDOW`]).
    pub fn new(size: u32, esn: bool) -> Self {
        let size = u64::from(size.clamp(64, MAX_WINDOW)).next_multiple_of(BLOCK_BITS);
        // Exact clearing needs no spare block; a power of two so the ring
        // index is a mask.
        let nblocks = (size / BLOCK_BITS).next_power_of_two() as usize;
        Self {
            top: 0,
            size,
            esn,
            blocks: vec![0u64; nblocks].into_boxed_slice(),
        }
    }

    /// The window size in packets.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The highest sequence number committed so far.
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Infers the full sequence number of a packet that carries `seq_lo` on
    /// the wire, and checks it against the window without changing anything.
    ///
    /// Returns the 64-bit sequence number to authenticate (and later commit).
    pub fn check(&self, seq_lo: u32) -> Result<u64, ReplayError> {
        let seq = if self.esn { self.infer_esn(seq_lo) } else { u64::from(seq_lo) };
        if seq == 0 {
            return Err(ReplayError::Zero);
        }
        if seq > self.top {
            return Ok(seq);
        }
        if self.top - seq >= self.size {
            return Err(ReplayError::TooOld);
        }
        let (block, bit) = self.locate(seq);
        if self.blocks[block] & bit != 0 {
            Err(ReplayError::Duplicate)
        } else {
            Ok(seq)
        }
    }

    /// Records `seq` as received. Call only after the packet's ICV verified.
    ///
    /// Returns the same error as [`check`](Self::check) if `seq` was committed
    /// meanwhile (another packet with the same number was authenticated
    /// between check and commit) — the caller must then drop the packet.
    pub fn commit(&mut self, seq: u64) -> Result<(), ReplayError> {
        if seq == 0 {
            return Err(ReplayError::Zero);
        }
        if seq > self.top {
            self.advance(seq);
        } else if self.top - seq >= self.size {
            return Err(ReplayError::TooOld);
        }
        let (block, bit) = self.locate(seq);
        if self.blocks[block] & bit != 0 {
            return Err(ReplayError::Duplicate);
        }
        self.blocks[block] |= bit;
        Ok(())
    }

    /// Asks `prefetch` for the word of the bitmap the next number in order
    /// lands in (the word at the top, or the next one).
    #[inline]
    pub(crate) fn prefetch(&self, prefetch: crate::sad::Prefetch) {
        let (block, _) = self.locate(self.top.wrapping_add(1));
        prefetch((&raw const self.blocks[block]).cast());
    }

    fn locate(&self, seq: u64) -> (usize, u64) {
        let mask = self.blocks.len() as u64 - 1;
        (((seq / BLOCK_BITS) & mask) as usize, 1u64 << (seq % BLOCK_BITS))
    }

    /// Moves the right edge to `seq`, clearing the bits of the numbers it
    /// passes over (`top + 1 ..= seq`): each of them takes the bit of the
    /// number one ring length older, which has left the window.
    fn advance(&mut self, seq: u64) {
        let ring_bits = self.blocks.len() as u64 * BLOCK_BITS;
        if seq - self.top >= ring_bits {
            self.blocks.fill(0);
        } else {
            let mut s = self.top + 1;
            let end = seq + 1;
            while s < end {
                let bit = s % BLOCK_BITS;
                let take = (BLOCK_BITS - bit).min(end - s);
                let ones = if take == BLOCK_BITS { u64::MAX } else { (1u64 << take) - 1 };
                let (block, _) = self.locate(s);
                self.blocks[block] &= !(ones << bit);
                s += take;
            }
        }
        self.top = seq;
    }

    /// RFC 4303 Appendix A2.2: infer the high 32 bits of an ESN from the
    /// window's position. `Tl`/`Th` are the low/high halves of the top of the
    /// window, `Bl` the low half of its bottom, `W` its size.
    fn infer_esn(&self, seq_lo: u32) -> u64 {
        let th = (self.top >> 32) as u32;
        let tl = self.top as u32;
        let w = self.size as u32; // size <= MAX_WINDOW fits in u32
        let bl = tl.wrapping_sub(w).wrapping_add(1);
        let seq_hi = if tl >= w - 1 {
            // Case A: the window lies within one sequence-number subspace.
            if seq_lo >= bl { th } else { th.wrapping_add(1) }
        } else {
            // Case B: the window spans two subspaces.
            if seq_lo >= bl { th.wrapping_sub(1) } else { th }
        };
        // Before anything was received (top == 0) case B would pick
        // Th - 1 = 0xffff_ffff for numbers in the "previous" subspace; that
        // subspace doesn't exist, so the packet belongs to subspace 0.
        if self.top < self.size && seq_hi == u32::MAX {
            return u64::from(seq_lo);
        }
        (u64::from(seq_hi) << 32) | u64::from(seq_lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(w: &mut ReplayWindow, seq_lo: u32) -> Result<u64, ReplayError> {
        let s = w.check(seq_lo)?;
        w.commit(s)?;
        Ok(s)
    }

    #[test]
    fn in_order_then_duplicate() {
        let mut w = ReplayWindow::new(64, false);
        for s in 1..=200 {
            assert_eq!(accept(&mut w, s), Ok(u64::from(s)));
        }
        assert_eq!(w.check(200), Err(ReplayError::Duplicate));
        assert_eq!(w.check(150), Err(ReplayError::Duplicate));
        assert_eq!(w.check(136), Err(ReplayError::TooOld));
        assert_eq!(w.check(0), Err(ReplayError::Zero));
    }

    #[test]
    fn reordering_within_window_is_accepted_once() {
        let mut w = ReplayWindow::new(128, false);
        accept(&mut w, 1000).unwrap();
        for s in (880..1000).rev() {
            assert_eq!(accept(&mut w, s), Ok(u64::from(s)), "seq {s}");
        }
        for s in 880..=1000 {
            assert_eq!(w.check(s), Err(ReplayError::Duplicate), "seq {s}");
        }
        // Exactly `size` behind the top is outside the window.
        assert_eq!(w.check(1000 - 128), Err(ReplayError::TooOld));
        assert_eq!(w.check(1000 - 127), Ok(873));
    }

    #[test]
    fn check_does_not_move_the_window() {
        let mut w = ReplayWindow::new(64, false);
        accept(&mut w, 10).unwrap();
        assert_eq!(w.check(1_000_000), Ok(1_000_000));
        // Not committed (say the ICV failed): old numbers are still fine.
        assert_eq!(w.check(9), Ok(9));
        assert_eq!(w.top(), 10);
    }

    #[test]
    fn big_jump_clears_the_whole_ring() {
        let mut w = ReplayWindow::new(256, false);
        for s in 1..=300 {
            accept(&mut w, s).unwrap();
        }
        accept(&mut w, 100_000).unwrap();
        // Numbers in the new window that alias old bits must be fresh.
        for s in (100_000 - 255)..100_000 {
            assert_eq!(w.check(s), Ok(u64::from(s)), "seq {s}");
        }
    }

    #[test]
    fn window_sizes_are_rounded_and_bounded() {
        assert_eq!(ReplayWindow::new(0, false).size(), 64);
        assert_eq!(ReplayWindow::new(65, false).size(), 128);
        assert_eq!(ReplayWindow::new(4096, false).size(), 4096);
        assert_eq!(ReplayWindow::new(u32::MAX, false).size(), u64::from(MAX_WINDOW));
    }

    #[test]
    fn commit_twice_is_refused() {
        let mut w = ReplayWindow::new(64, false);
        let s = w.check(5).unwrap();
        let t = w.check(5).unwrap(); // both checked before either committed
        assert_eq!(w.commit(s), Ok(()));
        assert_eq!(w.commit(t), Err(ReplayError::Duplicate));
    }

    #[test]
    fn esn_crosses_the_32_bit_boundary() {
        let mut w = ReplayWindow::new(64, true);
        let near = u32::MAX - 10;
        for s in near..=u32::MAX {
            assert_eq!(accept(&mut w, s), Ok(u64::from(s)));
        }
        // The next packets carry low halves 0, 1, 2…: high half becomes 1.
        assert_eq!(accept(&mut w, 0), Ok(1 << 32));
        assert_eq!(accept(&mut w, 1), Ok((1 << 32) | 1));
        // A late packet from just before the wrap is still placed in
        // subspace 0 (case B) and is a fresh number there.
        let late = u32::MAX - 20;
        assert_eq!(accept(&mut w, late), Ok(u64::from(late)));
        assert_eq!(w.check(u32::MAX), Err(ReplayError::Duplicate));
    }

    #[test]
    fn esn_case_a_guesses_next_subspace_for_small_numbers() {
        let mut w = ReplayWindow::new(64, true);
        let top = (5u64 << 32) | 1000;
        w.commit(top).unwrap();
        // Below the window bottom: RFC A2.2 assumes the next subspace.
        assert_eq!(w.check(10), Ok((6 << 32) | 10));
        // Inside the window: same subspace.
        assert_eq!(w.check(990), Ok((5 << 32) | 990));
    }

    #[test]
    fn esn_first_packets_are_in_subspace_zero() {
        let w = ReplayWindow::new(4096, true);
        assert_eq!(w.check(1), Ok(1));
        assert_eq!(w.check(4000), Ok(4000));
        assert_eq!(w.check(u32::MAX), Ok(u64::from(u32::MAX)));
    }

    /// Against a reference model: a set of every accepted number.
    #[test]
    fn matches_a_reference_model() {
        // 192 has a ring of 256 bits, larger than the window; the others
        // have exactly their size.
        for size in [64u64, 128, 192, 4096] {
            reference_model(size);
        }
    }

    #[test]
    fn the_ring_is_the_window_for_power_of_two_sizes() {
        assert_eq!(ReplayWindow::new(DEFAULT_WINDOW, true).blocks.len() * 8, DEFAULT_WINDOW as usize / 8);
        assert_eq!(ReplayWindow::new(64, false).blocks.len(), 1);
        assert_eq!(ReplayWindow::new(192, false).blocks.len(), 4);
    }

    fn reference_model(size: u64) {
        use std::collections::BTreeSet;
        let mut w = ReplayWindow::new(size as u32, false);
        let mut seen = BTreeSet::new();
        let mut top = 0u64;
        // A deterministic walk with jumps (within a block, across blocks,
        // past the whole ring), duplicates and stragglers.
        let mut x: u64 = 0x1234_5678 ^ size;
        for _ in 0..40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = match x % 12 {
                0..=5 => top + 1 + (x >> 20) % 4,
                6 | 7 => top.saturating_sub((x >> 20) % (size + size / 2)),
                8 => top + (x >> 20) % (size * 4),
                9 => top + 60 + (x >> 20) % 10,
                10 => top.saturating_sub(size - 1 - (x >> 20) % 3),
                _ => top.saturating_sub(size - 1),
            };
            let s = s.min(u64::from(u32::MAX)) as u32;
            let want = if s == 0 {
                Err(ReplayError::Zero)
            } else if u64::from(s) > top {
                Ok(u64::from(s))
            } else if top - u64::from(s) >= size {
                Err(ReplayError::TooOld)
            } else if seen.contains(&u64::from(s)) {
                Err(ReplayError::Duplicate)
            } else {
                Ok(u64::from(s))
            };
            let got = accept(&mut w, s);
            assert_eq!(got, want, "window {size}: seq {s} top {top}");
            if let Ok(v) = got {
                seen.insert(v);
                top = top.max(v);
            }
        }
    }
}
