//! Counters: every packet is either delivered or dropped for a named reason.
//!
//! The data plane never logs per packet (a flood of garbage would turn into a
//! flood of log lines); it counts. Each worker keeps its own counters — plain
//! integers, no atomics, no sharing — and the control plane sums snapshots.

use core::fmt;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// Inbound ESP with an SPI no SA of this worker has.
    UnknownSpi,
    /// Sequence number already seen or left of the window (RFC 4303 §3.4.3).
    Replay,
    /// Integrity check failed (forged, corrupted, or wrong keys).
    IcvFailure,
    /// Decrypted padding is not 1, 2, 3, … or the pad length is impossible.
    BadPadding,
    /// The decrypted inner packet does not match the SA's selectors
    /// (RFC 4301 §5.2 step 4), or an outbound packet matched no policy.
    PolicyMismatch,
    /// Too short, truncated, or an inner packet that is not IP.
    Malformed,
    /// The SA reached a hard lifetime limit (or its sequence numbers ran out).
    LifetimeExpired,
    /// A policy matched but no SA is installed yet (an acquire was raised).
    NoSa,
    /// The inner packet does not fit the path MTU with ESP overhead (an ICMP
    /// error goes back to the sender).
    TooBig,
    /// A policy says discard.
    Discarded,
    /// The outbound SA reached the end of the sequence numbers reserved
    /// for it durably (statically keyed SAs; see [`SeqLimit`]): the control
    /// plane has not extended the reservation in time.
    ///
    /// [`SeqLimit`]: crate::SeqLimit
    SeqUnreserved,
    /// An authentic dummy packet (next header 59, RFC 4303 §2.6: "the
    /// receiver MUST discard" it): nothing to deliver, counted all the same.
    Dummy,
}

impl DropReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 12;

    /// Every reason, in counter order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::UnknownSpi,
        DropReason::Replay,
        DropReason::IcvFailure,
        DropReason::BadPadding,
        DropReason::PolicyMismatch,
        DropReason::Malformed,
        DropReason::LifetimeExpired,
        DropReason::NoSa,
        DropReason::TooBig,
        DropReason::Discarded,
        DropReason::SeqUnreserved,
        DropReason::Dummy,
    ];

    /// A stable snake_case name for status output and metrics.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::UnknownSpi => "unknown_spi",
            DropReason::Replay => "replay",
            DropReason::IcvFailure => "icv_failure",
            DropReason::BadPadding => "bad_padding",
            DropReason::PolicyMismatch => "policy_mismatch",
            DropReason::Malformed => "malformed",
            DropReason::LifetimeExpired => "lifetime_expired",
            DropReason::NoSa => "no_sa",
            DropReason::TooBig => "too_big",
            DropReason::Discarded => "discarded",
            DropReason::SeqUnreserved => "seq_unreserved",
            DropReason::Dummy => "dummy",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Drop counts by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops([u64; DropReason::COUNT]);

impl Drops {
    /// Counts one drop.
    #[inline]
    pub fn count(&mut self, reason: DropReason) {
        self.0[reason as usize] += 1;
    }

    /// The count for one reason.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize]
    }

    /// Total drops.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds another set of counts.
    pub fn add(&mut self, other: &Drops) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// `(reason, count)` for every reason with a non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|&r| (r, self.get(r))).filter(|&(_, n)| n > 0)
    }
}

/// Traffic through one SA as seen by one worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
// In this order: the two every packet writes first, beside an SA's other
// hot fields, the drops (rare) after them.
#[repr(C)]
pub struct SaCounters {
    /// Packets processed successfully.
    pub packets: u64,
    /// Bytes of inner (plaintext) packets processed.
    pub bytes: u64,
    /// Drops attributable to this SA.
    pub drops: Drops,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reasons_have_distinct_slots_and_names() {
        let mut d = Drops::default();
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            for _ in 0..=i {
                d.count(*r);
            }
        }
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(d.get(*r), i as u64 + 1);
        }
        let names: std::collections::BTreeSet<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), DropReason::COUNT);
        assert_eq!(d.total(), (1..=DropReason::COUNT as u64).sum::<u64>());
    }
}
